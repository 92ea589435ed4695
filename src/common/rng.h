/* rng.h — small deterministic generators. Rotations are fixed by a seed
 * stored with the cache, so these sequences are part of the format: never
 * change them. */
#ifndef KVQ_RNG_H
#define KVQ_RNG_H

#include <math.h>
#include <stdint.h>

/* splitmix64: the seed expander and generator. */
static inline uint64_t kvq_splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform double in [0, 1) with 53 random bits. */
static inline double kvq_rng_uniform(uint64_t *state) {
    return (double)(kvq_splitmix64(state) >> 11) * (1.0 / 9007199254740992.0);
}

/* Standard normal (Box-Muller, one value per call). */
static inline double kvq_rng_normal(uint64_t *state) {
    double u1 = kvq_rng_uniform(state);
    double u2 = kvq_rng_uniform(state);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

#endif
