/* decode_avx512.c — the attention tile kernel with AVX-512.
 *
 * Scores: per token, the K row is dequantized in registers once and dotted
 * with all G queries; the G x 16 lane-partial sums of a 16-token block are
 * reduced together by a transpose-add tree (3 ops per score instead of a
 * horizontal sum each). P x V: per 32- or 64-channel slice, the G
 * accumulators stay in registers while the V rows stream through, each V
 * value dequantized once. */
#include <math.h>
#include <string.h>

#include "attn/attn_kernels.h"
#include "attn/softmax_avx512.h"
#include "common/fp16.h"

#if KVQ_HAVE_X86
#include <immintrin.h>

KVQ_TARGET_AVX512 static KVQ_ALWAYS_INLINE __m512 pair_sum(__m512 a, __m512 b) {
    return _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
}

KVQ_TARGET_AVX512 static KVQ_ALWAYS_INLINE __m512 quad_sum(__m512 x, __m512 y) {
    const __m512d xd = _mm512_castps_pd(x), yd = _mm512_castps_pd(y);
    return _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(xd, yd)), _mm512_castpd_ps(_mm512_unpackhi_pd(xd, yd)));
}

KVQ_TARGET_AVX512 static KVQ_ALWAYS_INLINE __m512 lane_sum(__m512 a, __m512 b) {
    return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
}

/* r: (16, 16) lane partials -> the 16 row sums, in order. */
KVQ_TARGET_AVX512 static KVQ_ALWAYS_INLINE __m512 reduce16(const float *r) {
    __m512 z[4];
    for (int b = 0; b < 4; b++) {
        const float *p = r + 64 * b;
        z[b] = quad_sum(pair_sum(_mm512_load_ps(p), _mm512_load_ps(p + 16)),
                        pair_sum(_mm512_load_ps(p + 32), _mm512_load_ps(p + 48)));
    }
    return lane_sum(lane_sum(z[0], z[1]), lane_sum(z[2], z[3]));
}

/* ------------------------------------------------------------ fused kernel
 *
 * The same tile algorithm, reading codec rows in place: each K and V row is
 * dequantized into registers 32 values at a time (one ggml block, or two
 * 16-value groups) with the reference's arithmetic, and used at once for all
 * G heads. No float copy of the tile is written, so a compressed tile costs
 * its bytes plus a few integer ops per value. */

KVQ_TARGET_AVX512 static KVQ_ALWAYS_INLINE __m512 bcast_f16(const uint8_t *p) {
    return _mm512_cvtph_ps(_mm256_set1_epi16((short)kvq_load_u16(p)));
}

/* 16 rotated-codec indices of b bits at p -> lut[index] (see rotated_avx512.c). */
KVQ_TARGET_AVX512 static KVQ_ALWAYS_INLINE __m512 rot16(const uint8_t *p, __m512 lut, const int b) {
    const __m512i even = _mm512_mullo_epi64(_mm512_set_epi64(14, 12, 10, 8, 6, 4, 2, 0), _mm512_set1_epi64(b));
    const __m512i odd = _mm512_add_epi64(even, _mm512_set1_epi64(b));
    const __m512i w = _mm512_broadcastq_epi64(_mm_maskz_loadu_epi8((__mmask16)((1u << (2 * b)) - 1u), p));
    const __m512i lo = _mm512_srlv_epi64(w, even);
    const __m512i hi = _mm512_slli_epi64(_mm512_srlv_epi64(w, odd), 32);
    return _mm512_permutexvar_ps(_mm512_mask_blend_epi32(0xAAAA, lo, hi), lut);
}

/* Values [32 blk, 32 blk + 32) of row t, in the codec's attention domain. */
KVQ_TARGET_AVX512 static KVQ_ALWAYS_INLINE void load32(const kvq_attn_rows *r, int t, int blk, __m512 *v0,
                                                      __m512 *v1, const int fmt) {
    const uint8_t *row = r->base + (size_t)t * r->stride;
    switch (fmt) {
    case KVQ_FMT_F32:
        *v0 = _mm512_loadu_ps((const float *)row + 32 * blk);
        *v1 = _mm512_loadu_ps((const float *)row + 32 * blk + 16);
        break;
    case KVQ_FMT_F16:
        *v0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(row + 64 * blk)));
        *v1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(row + 64 * blk + 32)));
        break;
    case KVQ_FMT_BF16:
        *v0 = _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(row + 64 * blk))), 16));
        *v1 = _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(row + 64 * blk + 32))), 16));
        break;
    case KVQ_FMT_Q8_0: {
        const uint8_t *b = row + 34 * blk;
        const __m512 d = bcast_f16(b);
        *v0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b + 2)))), d);
        *v1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b + 18)))), d);
        break;
    }
    case KVQ_FMT_Q4_0:
    case KVQ_FMT_Q5_0:
    case KVQ_FMT_Q4_1:
    case KVQ_FMT_Q5_1:
    case KVQ_FMT_IQ4_NL: {
        const int five = fmt == KVQ_FMT_Q5_0 || fmt == KVQ_FMT_Q5_1, offs = fmt == KVQ_FMT_Q4_1 || fmt == KVQ_FMT_Q5_1;
        const size_t bb = 18 + 2 * offs + 4 * five;
        const uint8_t *b = row + bb * (size_t)blk;
        const __m512 d = bcast_f16(b);
        const __m512i x = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(b + bb - 16)));
        __m512i q0 = _mm512_and_si512(x, _mm512_set1_epi32(0x0F)), q1 = _mm512_srli_epi32(x, 4);
        if (five) {
            uint32_t qh;
            memcpy(&qh, b + 2 + 2 * offs, 4);
            q0 = _mm512_mask_or_epi32(q0, (__mmask16)qh, q0, _mm512_set1_epi32(0x10));
            q1 = _mm512_mask_or_epi32(q1, (__mmask16)(qh >> 16), q1, _mm512_set1_epi32(0x10));
        }
        if (fmt == KVQ_FMT_IQ4_NL) {
            const __m512 lut = _mm512_loadu_ps(r->lut);
            *v0 = _mm512_mul_ps(d, _mm512_permutexvar_ps(q0, lut));
            *v1 = _mm512_mul_ps(d, _mm512_permutexvar_ps(q1, lut));
        } else if (offs) {
            const __m512 m = bcast_f16(b + 2);
            *v0 = _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(q0), d), m);
            *v1 = _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(q1), d), m);
        } else {
            const __m512i half = _mm512_set1_epi32(five ? 16 : 8);
            *v0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(q0, half)), d);
            *v1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(q1, half)), d);
        }
        break;
    }
    default: { /* KVQ_FMT_ROT2..4: fp16 row scale, then b-bit indices */
        const int b = fmt - KVQ_FMT_ROT2 + 2;
        const __m512 cs = _mm512_mul_ps(bcast_f16(row), _mm512_loadu_ps(r->lut));
        *v0 = rot16(row + 2 + 4 * b * blk, cs, b);
        *v1 = rot16(row + 2 + 4 * b * blk + 2 * b, cs, b);
        break;
    }
    }
}

/* Prefetches row t of a tile ahead (the cache lines it starts in) into L2
 * (prefetcht1), not L1: measured, f16 at depth 32768 on smollm2-135m
 * shapes took 87.6 ms a step with one thread prefetching into L1 and 66.5
 * into L2 (41.9 -> 38.8 with two); into L3 it gained the same. */
static KVQ_ALWAYS_INLINE void prefetch_next(const kvq_attn_rows *r, int t) {
    if (!r->next) return;
    const size_t first = ((size_t)t * r->stride) & ~(size_t)63, end = (size_t)(t + 1) * r->stride;
    for (size_t o = first; o < end; o += 64) __builtin_prefetch(r->next + o, 0, 2);
}

/* s (G, np): raw scores of the n rows, -Inf past n. */
KVQ_TARGET_AVX512 static KVQ_ALWAYS_INLINE void fused_scores(const int G, int d, int n, int np, const float *q,
                                                             const kvq_attn_rows *k, float *s, const int fmt) {
    float part[KVQ_ATTN_MAX_G * 256] __attribute__((aligned(64))); /* (G, 16 tokens, 16 lanes) */
    for (int t0 = 0; t0 < n; t0 += 16) {
        const int nb = n - t0 < 16 ? n - t0 : 16;
        for (int j = 0; j < 16; j++) {
            __m512 a[KVQ_ATTN_MAX_G];
#pragma GCC unroll 8
            for (int g = 0; g < G; g++) a[g] = _mm512_setzero_ps();
            if (j < nb) {
                prefetch_next(k, t0 + j);
                for (int blk = 0; blk < d / 32; blk++) {
                    __m512 k0, k1;
                    load32(k, t0 + j, blk, &k0, &k1, fmt);
#pragma GCC unroll 8
                    for (int g = 0; g < G; g++) {
                        a[g] = _mm512_fmadd_ps(_mm512_loadu_ps(q + g * d + 32 * blk), k0, a[g]);
                        a[g] = _mm512_fmadd_ps(_mm512_loadu_ps(q + g * d + 32 * blk + 16), k1, a[g]);
                    }
                }
            }
#pragma GCC unroll 8
            for (int g = 0; g < G; g++) _mm512_store_ps(part + g * 256 + j * 16, a[g]);
        }
        const __mmask16 pad = (__mmask16)~((1u << nb) - 1u);
#pragma GCC unroll 8
        for (int g = 0; g < G; g++)
            _mm512_store_ps(s + g * np + t0,
                            _mm512_mask_mov_ps(reduce16(part + g * 256), pad, _mm512_set1_ps(-INFINITY)));
    }
}

/* acc (G, d) += p (G, np) x V rows, BB blocks of 32 channels at a time. */
KVQ_TARGET_AVX512 static KVQ_ALWAYS_INLINE void fused_pv(const int G, const int BB, int d, int n, int np,
                                                         const float *p, const kvq_attn_rows *v, float *acc,
                                                         const int fmt) {
    for (int blk0 = 0; blk0 < d / 32; blk0 += BB) {
        __m512 a[KVQ_ATTN_MAX_G][4];
#pragma GCC unroll 8
        for (int g = 0; g < G; g++)
#pragma GCC unroll 4
            for (int b = 0; b < 2 * BB; b++) a[g][b] = _mm512_loadu_ps(acc + g * d + 32 * blk0 + 16 * b);
        for (int t = 0; t < n; t++) {
            if (blk0 == 0) prefetch_next(v, t);
            __m512 vv[4];
#pragma GCC unroll 2
            for (int bb = 0; bb < BB; bb++) load32(v, t, blk0 + bb, &vv[2 * bb], &vv[2 * bb + 1], fmt);
#pragma GCC unroll 8
            for (int g = 0; g < G; g++) {
                const __m512 pg = _mm512_set1_ps(p[g * np + t]);
#pragma GCC unroll 4
                for (int b = 0; b < 2 * BB; b++) a[g][b] = _mm512_fmadd_ps(pg, vv[b], a[g][b]);
            }
        }
#pragma GCC unroll 8
        for (int g = 0; g < G; g++)
#pragma GCC unroll 4
            for (int b = 0; b < 2 * BB; b++) _mm512_storeu_ps(acc + g * d + 32 * blk0 + 16 * b, a[g][b]);
    }
}

typedef void (*fused_scores_fn)(int d, int n, int np, const float *q, const kvq_attn_rows *k, float *s);
typedef void (*fused_pv_fn)(int d, int n, int np, const float *p, const kvq_attn_rows *v, float *acc);

/* One instantiation per (format, group size), so the G accumulators are
 * registers and the row decode is straight-line code. The scores loop has a
 * head_dim-64 copy (the shipped models'): with d constant its block loop
 * unrolls, and f16 attention ran 4-8% faster (A/B, smollm2 and Llama-1B
 * shapes, depth 4096 and 32768); the same for P x V measured nothing. */
#define KVQ_FUSED_G(fmt, G)                                                                                     \
    KVQ_TARGET_AVX512 static void scores_##fmt##_##G(int d, int n, int np, const float *q,                     \
                                                     const kvq_attn_rows *k, float *s) {                       \
        if (d == 64) fused_scores(G, 64, n, np, q, k, s, KVQ_FMT_##fmt);                                        \
        else fused_scores(G, d, n, np, q, k, s, KVQ_FMT_##fmt);                                                 \
    }                                                                                                           \
    KVQ_TARGET_AVX512 static void pv_##fmt##_##G(int d, int n, int np, const float *p, const kvq_attn_rows *v, \
                                                 float *acc) {                                                  \
        if (G <= 4 && d % 64 == 0) fused_pv(G, 2, d, n, np, p, v, acc, KVQ_FMT_##fmt);                         \
        else fused_pv(G, 1, d, n, np, p, v, acc, KVQ_FMT_##fmt);                                                \
    }
#define KVQ_FUSED_FMT(fmt)                                                                                       \
    KVQ_FUSED_G(fmt, 1) KVQ_FUSED_G(fmt, 2) KVQ_FUSED_G(fmt, 3) KVQ_FUSED_G(fmt, 4) KVQ_FUSED_G(fmt, 5)        \
    KVQ_FUSED_G(fmt, 6) KVQ_FUSED_G(fmt, 7) KVQ_FUSED_G(fmt, 8)
#define KVQ_FUSED_ALL(X) X(F32) X(F16) X(BF16) X(Q8_0) X(Q4_0) X(Q4_1) X(Q5_0) X(Q5_1) X(IQ4_NL) X(ROT2) X(ROT3) X(ROT4)
KVQ_FUSED_ALL(KVQ_FUSED_FMT)

#define KVQ_FUSED_ROW(fmt)                                                                                   \
    [KVQ_FMT_##fmt] = {scores_##fmt##_1, scores_##fmt##_2, scores_##fmt##_3, scores_##fmt##_4,                \
                       scores_##fmt##_5, scores_##fmt##_6, scores_##fmt##_7, scores_##fmt##_8},
static const fused_scores_fn scores_tab[KVQ_FMT_COUNT][KVQ_ATTN_MAX_G] = {KVQ_FUSED_ALL(KVQ_FUSED_ROW)};
#undef KVQ_FUSED_ROW
#define KVQ_FUSED_ROW(fmt)                                                                                    \
    [KVQ_FMT_##fmt] = {pv_##fmt##_1, pv_##fmt##_2, pv_##fmt##_3, pv_##fmt##_4, pv_##fmt##_5, pv_##fmt##_6,     \
                       pv_##fmt##_7, pv_##fmt##_8},
static const fused_pv_fn pv_tab[KVQ_FMT_COUNT][KVQ_ATTN_MAX_G] = {KVQ_FUSED_ALL(KVQ_FUSED_ROW)};
#undef KVQ_FUSED_ROW

KVQ_TARGET_AVX512 void kvq_attn_rows_pv_avx512(int G, int d, int n, int np, const float *p, const kvq_attn_rows *v,
                                               float *acc) {
    pv_tab[v->fmt][G - 1](d, n, np, p, v, acc);
}

KVQ_TARGET_AVX512 void kvq_attn_fused_avx512(int G, int d, int n, const float *q, const kvq_attn_rows *k,
                                             const kvq_attn_rows *v, float *m, float *l, float *acc) {
    const int np = (n + 15) & ~15;
    float s[KVQ_ATTN_MAX_G * KVQ_KV_MAX_TILE] __attribute__((aligned(64))); /* (G, np) scores, then p */
    scores_tab[k->fmt][G - 1](d, n, np, q, k, s);
    softmax_update(0, G, d, np, s, m, l, acc);
    pv_tab[v->fmt][G - 1](d, n, np, s, v, acc);
}

/* ------------------------------------------------------------ block kernel
 *
 * Prefill: many query heads over the same rows. Per 32-row slice, K is
 * transposed once into KT (d, 32) so a score block is an outer-product
 * accumulation (12 heads x 32 rows in 24 registers, one FMA per head per K
 * load pair, no horizontal sums); P x V keeps 6 heads x 64 channels in 24
 * registers while the V rows stream through. */

#define BLOCK_SLICE 32 /* rows per slice: two 16-lane vectors of scores */
#define BLOCK_QR 12    /* query heads per score block */
#define BLOCK_PR 6     /* query heads per P x V block */

KVQ_TARGET_AVX512 static KVQ_ALWAYS_INLINE __m512 row16_fmt(const kvq_attn_rows *r, int t, int c, const int fmt) {
    if (fmt == KVQ_FMT_F16)
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(r->base + (size_t)t * r->stride + 2 * (size_t)c)));
    return _mm512_loadu_ps((const float *)(r->base + (size_t)t * r->stride) + c);
}

KVQ_TARGET_AVX512 static KVQ_ALWAYS_INLINE __m512 row16(const kvq_attn_rows *r, int t, int c) {
    return row16_fmt(r, t, c, r->fmt);
}

/* Scores of BLOCK_QR heads (q pointers; unused ones point at zeros) over the
 * slice: s (BLOCK_QR, BLOCK_SLICE). */
KVQ_TARGET_AVX512 static void block_scores(const float *const *q, int d, const float *kt, float *s) {
    __m512 a[BLOCK_QR][2];
#pragma GCC unroll 12
    for (int r = 0; r < BLOCK_QR; r++) a[r][0] = a[r][1] = _mm512_setzero_ps();
    for (int e = 0; e < d; e++) {
        const __m512 k0 = _mm512_load_ps(kt + e * BLOCK_SLICE), k1 = _mm512_load_ps(kt + e * BLOCK_SLICE + 16);
#pragma GCC unroll 12
        for (int r = 0; r < BLOCK_QR; r++) {
            const __m512 qe = _mm512_set1_ps(q[r][e]);
            a[r][0] = _mm512_fmadd_ps(qe, k0, a[r][0]);
            a[r][1] = _mm512_fmadd_ps(qe, k1, a[r][1]);
        }
    }
#pragma GCC unroll 12
    for (int r = 0; r < BLOCK_QR; r++) {
        _mm512_store_ps(s + r * BLOCK_SLICE, a[r][0]);
        _mm512_store_ps(s + r * BLOCK_SLICE + 16, a[r][1]);
    }
}

/* acc[r][c0 .. c0 + 16 NV) = acc * alpha[r] + sum_t p[r][t] v[t] for BLOCK_PR heads. */
KVQ_TARGET_AVX512 static KVQ_ALWAYS_INLINE void block_pv(float *const *acc, const float *alpha, const float *p,
                                                         const kvq_attn_rows *v, int t0, int nb, int c0,
                                                         const int NV, const int fmt) {
    __m512 a[BLOCK_PR][4];
#pragma GCC unroll 6
    for (int r = 0; r < BLOCK_PR; r++) {
        const __m512 al = _mm512_set1_ps(alpha[r]);
#pragma GCC unroll 4
        for (int j = 0; j < NV; j++) a[r][j] = _mm512_mul_ps(_mm512_loadu_ps(acc[r] + c0 + 16 * j), al);
    }
    for (int t = 0; t < nb; t++) {
        __m512 vv[4];
#pragma GCC unroll 4
        for (int j = 0; j < NV; j++) vv[j] = row16_fmt(v, t0 + t, c0 + 16 * j, fmt);
#pragma GCC unroll 6
        for (int r = 0; r < BLOCK_PR; r++) {
            const __m512 pr = _mm512_set1_ps(p[r * BLOCK_SLICE + t]);
#pragma GCC unroll 4
            for (int j = 0; j < NV; j++) a[r][j] = _mm512_fmadd_ps(pr, vv[j], a[r][j]);
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < BLOCK_PR; r++)
#pragma GCC unroll 4
        for (int j = 0; j < NV; j++) _mm512_storeu_ps(acc[r] + c0 + 16 * j, a[r][j]);
}

KVQ_TARGET_AVX512 void kvq_attn_block_avx512(int R, const kvq_attn_qrow *rows, int d, int n, const kvq_attn_rows *k,
                                            const kvq_attn_rows *v) {
    float kt[KVQ_MAX_HEAD_DIM * BLOCK_SLICE] __attribute__((aligned(64)));
    float s[BLOCK_QR * BLOCK_SLICE] __attribute__((aligned(64)));
    float zero_q[KVQ_MAX_HEAD_DIM] __attribute__((aligned(64))) = {0};
    float sink_acc[KVQ_MAX_HEAD_DIM] __attribute__((aligned(64))) = {0}; /* for unused heads */
    for (int t0 = 0; t0 < n; t0 += BLOCK_SLICE) {
        const int nb = n - t0 < BLOCK_SLICE ? n - t0 : BLOCK_SLICE;
        /* KT (d, 32): lanes past nb are zero (their scores are masked anyway). */
        const __m512i col = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                               _mm512_set1_epi32(16));
        for (int c = 0; c < d; c += 16) {
            float tmp[16 * BLOCK_SLICE] __attribute__((aligned(64)));
            for (int t = 0; t < BLOCK_SLICE; t++)
                _mm512_store_ps(tmp + 16 * t, t < nb ? row16(k, t0 + t, c) : _mm512_setzero_ps());
            /* Column e of 16 tokens is a stride-16 gather from tmp. */
            for (int e = 0; e < 16; e++)
                for (int h = 0; h < BLOCK_SLICE; h += 16)
                    _mm512_store_ps(kt + (c + e) * BLOCK_SLICE + h, _mm512_i32gather_ps(col, tmp + 16 * h + e, 4));
        }
        for (int r0 = 0; r0 < R; r0 += BLOCK_QR) {
            const int nr = R - r0 < BLOCK_QR ? R - r0 : BLOCK_QR;
            const float *q[BLOCK_QR];
            for (int r = 0; r < BLOCK_QR; r++) q[r] = r < nr ? rows[r0 + r].q : zero_q;
            block_scores(q, d, kt, s);
            /* Online softmax per head over its visible rows of the slice. */
            float alpha[BLOCK_QR];
            float *acc[BLOCK_QR];
            for (int r = 0; r < BLOCK_QR; r++) {
                const kvq_attn_qrow *qr = r < nr ? &rows[r0 + r] : NULL;
                const int vis = qr ? (qr->n_valid - t0 < nb ? qr->n_valid - t0 : nb) : 0;
                float *sr = s + r * BLOCK_SLICE;
                alpha[r] = 1.0f;
                acc[r] = qr ? qr->acc : sink_acc;
                if (vis <= 0) {
                    _mm512_store_ps(sr, _mm512_setzero_ps());
                    _mm512_store_ps(sr + 16, _mm512_setzero_ps());
                    continue;
                }
                const __mmask32 live = vis >= 32 ? 0xFFFFFFFFu : ((1u << vis) - 1u);
                const __mmask16 m0 = (__mmask16)live, m1 = (__mmask16)(live >> 16);
                const __m512 ninf = _mm512_set1_ps(-INFINITY);
                const __m512 s0 = _mm512_mask_load_ps(ninf, m0, sr), s1 = _mm512_mask_load_ps(ninf, m1, sr + 16);
                /* A new maximum is rare at depth: see softmax_update. */
                const __m512 mx = _mm512_max_ps(s0, s1);
                float m_new = *qr->m;
                if (_mm512_cmp_ps_mask(mx, _mm512_set1_ps(m_new), _CMP_GT_OQ)) {
                    const float mt = _mm512_reduce_max_ps(mx);
                    m_new = mt > *qr->m ? mt : *qr->m;
                    alpha[r] = expf(*qr->m - m_new);
                }
                const __m512 mv = _mm512_set1_ps(m_new);
                const __m512 p0 = _mm512_maskz_mov_ps(m0, exp16(_mm512_sub_ps(s0, mv)));
                const __m512 p1 = _mm512_maskz_mov_ps(m1, exp16(_mm512_sub_ps(s1, mv)));
                _mm512_store_ps(sr, p0);
                _mm512_store_ps(sr + 16, p1);
                *qr->l = *qr->l * alpha[r] + _mm512_reduce_add_ps(_mm512_add_ps(p0, p1));
                *qr->m = m_new;
            }
            for (int rp = 0; rp < BLOCK_QR; rp += BLOCK_PR) {
                if (rp >= nr) break;
                float *const *a = acc + rp;
                const float *al = alpha + rp, *p = s + rp * BLOCK_SLICE;
                for (int c0 = 0; c0 < d; c0 += 64) {
                    const int wide = d - c0 >= 64;
                    if (v->fmt == KVQ_FMT_F16) {
                        if (wide) block_pv(a, al, p, v, t0, nb, c0, 4, KVQ_FMT_F16);
                        else block_pv(a, al, p, v, t0, nb, c0, 2, KVQ_FMT_F16);
                    } else {
                        if (wide) block_pv(a, al, p, v, t0, nb, c0, 4, KVQ_FMT_F32);
                        else block_pv(a, al, p, v, t0, nb, c0, 2, KVQ_FMT_F32);
                    }
                }
            }
        }
    }
}

/* Float and f16 rows of contiguous (n, d) buffers: the fused kernel. */
KVQ_TARGET_AVX512 void kvq_attn_tile_f32_avx512(int G, int d, int n, const float *q, const void *k, const void *v,
                                                const void *k_next, const void *v_next, float *m, float *l,
                                                float *acc) {
    const kvq_attn_rows kr = {k, sizeof(float) * (size_t)d, NULL, KVQ_FMT_F32, k_next};
    const kvq_attn_rows vr = {v, sizeof(float) * (size_t)d, NULL, KVQ_FMT_F32, v_next};
    kvq_attn_fused_avx512(G, d, n, q, &kr, &vr, m, l, acc);
}

KVQ_TARGET_AVX512 void kvq_attn_tile_f16_avx512(int G, int d, int n, const float *q, const void *k, const void *v,
                                                const void *k_next, const void *v_next, float *m, float *l,
                                                float *acc) {
    const kvq_attn_rows kr = {k, sizeof(uint16_t) * (size_t)d, NULL, KVQ_FMT_F16, k_next};
    const kvq_attn_rows vr = {v, sizeof(uint16_t) * (size_t)d, NULL, KVQ_FMT_F16, v_next};
    kvq_attn_fused_avx512(G, d, n, q, &kr, &vr, m, l, acc);
}
#endif
