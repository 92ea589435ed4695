/* tile_decode_bench.c — ns per row of each codec's tile decode (to floats in
 * the attention domain, as attention does on paths without an integer
 * kernel), per ISA path: `make bench-tile-decode`. One tile of 32 rows of
 * head_dim 64 (random rows, a few outlier channels), decoded 20 times per
 * rep; the fastest of 2000 reps, so a noisy machine only adds. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "codec/codec_impl.h"
#include "common/rng.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(void) {
    enum { D = 64, ROWS = 32, INNER = 20, REPS = 2000 };
    static float x[D], y[ROWS * D];
    printf("%-8s", "codec");
    for (int isa = kvq_isa_default(); isa >= 0; isa--) printf(" %10s", kvq_isa_name((kvq_isa)isa));
    printf("   (ns per row, d %d)\n", D);
    for (int i = 0; i < kvq_codec_count(); i++) {
        const char *name = kvq_codec_name_at(i);
        printf("%-8s", name);
        for (int isa = kvq_isa_default(); isa >= 0; isa--) {
            kvq_codec *c;
            if (kvq_codec_create(name, D, 1, &c) != KVQ_OK || kvq_codec_set_isa(c, (kvq_isa)isa) != KVQ_OK) {
                fprintf(stderr, "tile-decode-bench: %s: %s\n", name, kvq_last_error());
                return 1;
            }
            const size_t rb = kvq_codec_row_bytes(c);
            uint8_t *tile = malloc(rb * ROWS);
            if (!tile) return 1;
            uint64_t seed = 7;
            for (int r = 0; r < ROWS; r++) {
                for (int j = 0; j < D; j++) x[j] = (float)kvq_rng_normal(&seed) * (j % 7 == 0 ? 8.0f : 1.0f);
                kvq_codec_encode_row(c, x, tile + r * rb);
            }
            double best = 1e30;
            for (int rep = 0; rep < REPS; rep++) {
                const double t0 = now();
                for (int k = 0; k < INNER; k++) c->decode_tile_domain(c, tile, ROWS, y);
                const double dt = now() - t0;
                if (dt < best) best = dt;
                __asm__ volatile("" ::"r"(y) : "memory");
            }
            printf(" %10.1f", best / INNER / ROWS * 1e9);
            free(tile);
            kvq_codec_free(c);
        }
        printf("\n");
    }
    return 0;
}
