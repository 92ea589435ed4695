/* rotation.h — seeded orthogonal rotations R of one head vector (d values,
 * d a multiple of 32 up to KVQ_MAX_HEAD_DIM), used by the rotated codecs and
 * by attention (q.k = Rq.Rk: the query is rotated, never the cached keys).
 *
 * Kinds (KVQ_ROT_* of codec_impl.h):
 *   WHT     y = H D x: D = diag(random +-1), H the normalized Walsh-Hadamard
 *           transform over blocks of n dims, n the largest power of two that
 *           divides d (n = d for 64, 128, 256; 32 for 96 or 160; 64 for 192).
 *   QUAT4   each 4-dim block v, read as the quaternion (v0, v1, v2, v3), goes
 *           to q_L v conj(q_R) with fixed unit quaternions per block.
 *   GIVENS  each pair (x0, x1) goes to (c x0 - s x1, s x0 + c x1), with
 *           c = cos t, s = sin t and a fixed angle t per pair.
 *   ROTOR3  each 3-dim group v goes to q v q* (a Cl(3,0) rotor, written as a
 *           unit quaternion acting on the pure quaternion (0, v)); the last
 *           d mod 3 dims are left as they are.
 *
 * The seed stream is part of the stored format (the seed is saved with the
 * cache; the rotation is rebuilt from it): never change it. With
 * state = seed and kvq_splitmix64 / kvq_rng_uniform / kvq_rng_normal of
 * common/rng.h drawing from that one state in this order:
 *   WHT     for i = 0..d-1: sign_i = -1 if the top bit of kvq_splitmix64 is
 *           set, else +1.
 *   QUAT4   for block b = 0..d/4-1: q_L then q_R, each a unit quaternion
 *           (w, x, y, z) = four kvq_rng_normal draws divided by their norm
 *           (uniform on S^3); four new draws replace a set with norm < 1e-12.
 *   GIVENS  for pair p = 0..d/2-1: t_p = 2 pi kvq_rng_uniform.
 *   ROTOR3  for group g = 0..d/3-1: q_g as a QUAT4 quaternion.
 *
 * Arithmetic (float paths; every ISA path computes exactly these operations,
 * so encoded bytes do not depend on the ISA; no FMA contraction, the build is
 * ISO C where GCC's -ffp-contract defaults to off):
 *   WHT     forward: t_i = x_i * sign_i; butterfly stages h = 1, 2, 4, ...,
 *           n/2 in that order, each pair (j, j+h) of a block becoming
 *           (a + b, a - b); then y_i = t_i * (float)(1/sqrt(n)).
 *           inverse: butterflies on x, then y_i = (t_i * (float)(1/sqrt(n))) * sign_i.
 *   others  a band matrix of half-width w (GIVENS 1, ROTOR3 2, QUAT4 3):
 *           y_i = B[0][i] x_{i-w}, then y_i = y_i + B[k][i] x_{i-w+k} for
 *           k = 1..2w in that order, x read as 0 outside [0, d). B holds the
 *           float-rounded entries of the float64 block matrices (zeros off the
 *           blocks); the inverse uses the transposed band.
 */
#ifndef KVQ_ROTATION_H
#define KVQ_ROTATION_H

#include <stdint.h>

#include "codec/codec_impl.h"

/* Largest band half-width of any kind (QUAT4). */
#define KVQ_ROT_MAX_BAND 3

typedef struct kvq_rotation {
    int kind;            /* KVQ_ROT_WHT .. KVQ_ROT_ROTOR3 */
    int d;
    int block;           /* WHT block size n */
    int band;            /* band half-width w; 0 for WHT */
    float scale;         /* WHT: (float)(1/sqrt(n)) */
    double scale64;      /* WHT: 1/sqrt(n) */
    float *sign;         /* (d) WHT signs +-1 */
    float *fwd, *inv;    /* (2w+1, d) band coefficients of R and R^T */
    double *fwd64, *inv64; /* (2w+1, d) the same in float64 */
} kvq_rotation;

/* Builds the rotation of a kind for d dims from a seed. KVQ_ERR_INVALID_ARG
 * for an unknown kind or a bad d, KVQ_ERR_NOMEM. On failure r needs no free. */
kvq_status kvq_rotation_init(kvq_rotation *r, int kind, int d, uint64_t seed);
void kvq_rotation_free(kvq_rotation *r);

/* y = R x and y = R^T x on an ISA path (bit-identical on every path; isa
 * must be supported). x, y: (d); they may alias. */
void kvq_rotation_forward(const kvq_rotation *r, kvq_isa isa, const float *x, float *y);
void kvq_rotation_inverse(const kvq_rotation *r, kvq_isa isa, const float *x, float *y);

/* The same in float64 (tests and the attention oracle). x, y may alias. */
void kvq_rotation_forward_f64(const kvq_rotation *r, const double *x, double *y);
void kvq_rotation_inverse_f64(const kvq_rotation *r, const double *x, double *y);

/* Per-ISA kernels of kvq_rotation_forward/inverse (inverse = 0 or 1). */
void kvq_rotation_apply_avx2(const kvq_rotation *r, int inverse, const float *x, float *y);
void kvq_rotation_apply_avx512(const kvq_rotation *r, int inverse, const float *x, float *y);

#endif
