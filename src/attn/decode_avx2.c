/* decode_avx2.c — the attention tile kernel with AVX2 + FMA + F16C.
 *
 * Same shape as decode_avx512.c with 8 lanes: per token the K row is loaded
 * once for all G queries, the G x 8 lane-partials of an 8-token block are
 * reduced by a transpose-add tree, and P x V keeps the G accumulators of an
 * 8-channel slice in registers. */
#include <math.h>

#include "attn/attn_kernels.h"
#include "attn/softmax_avx2.h"

#if KVQ_HAVE_X86
#include <immintrin.h>

KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE __m256 load8(const void *base, size_t i, int kind) {
    if (kind == KVQ_ROWS_F16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)base + i)));
    if (kind == KVQ_ROWS_BF16) /* bf16 is a float's top half */
        return _mm256_castsi256_ps(
            _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)base + i))), 16));
    return _mm256_loadu_ps((const float *)base + i);
}

KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE __m256 pair_sum(__m256 a, __m256 b) {
    return _mm256_add_ps(_mm256_unpacklo_ps(a, b), _mm256_unpackhi_ps(a, b));
}

KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE __m256 quad_sum(__m256 x, __m256 y) {
    const __m256d xd = _mm256_castps_pd(x), yd = _mm256_castps_pd(y);
    return _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(xd, yd)), _mm256_castpd_ps(_mm256_unpackhi_pd(xd, yd)));
}

/* r: (8, 8) lane partials -> the 8 row sums, in order. */
KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE __m256 reduce8(const float *r) {
    const __m256 lo = quad_sum(pair_sum(_mm256_load_ps(r), _mm256_load_ps(r + 8)),
                               pair_sum(_mm256_load_ps(r + 16), _mm256_load_ps(r + 24)));
    const __m256 hi = quad_sum(pair_sum(_mm256_load_ps(r + 32), _mm256_load_ps(r + 40)),
                               pair_sum(_mm256_load_ps(r + 48), _mm256_load_ps(r + 56)));
    return _mm256_add_ps(_mm256_permute2f128_ps(lo, hi, 0x20), _mm256_permute2f128_ps(lo, hi, 0x31));
}

/* acc (G, d) += p (G, np) x V (n, d), CB 8-channel slices at a time
 * (head_dim is a multiple of 32, so CB <= 4 divides it). With PH = 2 the
 * even and odd tokens go to separate accumulators: G 1 has only 4 chains
 * of FMAs, whose 4-cycle latency needs 8 in flight for both pipes. */
KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE void pv_body(const int G, const int CB, const int PH, int d, int n, int np,
                                                      const float *p, const void *v, float *acc, const int kind) {
    for (int c0 = 0; c0 < d; c0 += 8 * CB) {
        __m256 a[2][KVQ_ATTN_MAX_G][4];
#pragma GCC unroll 8
        for (int g = 0; g < G; g++)
#pragma GCC unroll 4
            for (int b = 0; b < CB; b++) {
                a[0][g][b] = _mm256_loadu_ps(acc + g * d + c0 + 8 * b);
                if (PH == 2) a[1][g][b] = _mm256_setzero_ps();
            }
        int t = 0;
        for (; t + PH <= n; t += PH)
#pragma GCC unroll 2
            for (int ph = 0; ph < PH; ph++) {
                __m256 vv[4];
#pragma GCC unroll 4
                for (int b = 0; b < CB; b++) vv[b] = load8(v, (size_t)(t + ph) * d + c0 + 8 * b, kind);
#pragma GCC unroll 8
                for (int g = 0; g < G; g++) {
                    const __m256 pg = _mm256_broadcast_ss(p + g * np + t + ph);
#pragma GCC unroll 4
                    for (int b = 0; b < CB; b++) a[ph][g][b] = _mm256_fmadd_ps(pg, vv[b], a[ph][g][b]);
                }
            }
        for (; t < n; t++) { /* an odd last token (PH = 2) */
            __m256 vv[4];
#pragma GCC unroll 4
            for (int b = 0; b < CB; b++) vv[b] = load8(v, (size_t)t * d + c0 + 8 * b, kind);
#pragma GCC unroll 8
            for (int g = 0; g < G; g++) {
                const __m256 pg = _mm256_broadcast_ss(p + g * np + t);
#pragma GCC unroll 4
                for (int b = 0; b < CB; b++) a[0][g][b] = _mm256_fmadd_ps(pg, vv[b], a[0][g][b]);
            }
        }
#pragma GCC unroll 8
        for (int g = 0; g < G; g++)
#pragma GCC unroll 4
            for (int b = 0; b < CB; b++)
                _mm256_storeu_ps(acc + g * d + c0 + 8 * b, PH == 2 ? _mm256_add_ps(a[0][g][b], a[1][g][b]) : a[0][g][b]);
    }
}

/* CB channel slices at once: G * CB accumulator chains (x PH token phases)
 * hide the FMA latency, within the 16 registers. */
KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE void pv_rows(const int G, int d, int n, int np, const float *p,
                                                      const void *v, float *acc, const int kind) {
    if (G <= 2) pv_body(G, 4, G == 1 ? 2 : 1, d, n, np, p, v, acc, kind);
    else if (G <= 6) pv_body(G, 2, 1, d, n, np, p, v, acc, kind);
    else pv_body(G, 1, 1, d, n, np, p, v, acc, kind);
}

/* Rows [t0, t0 + n) of a later tile, fetched as this one's are read: a burst
 * for a whole tile fills the line fill buffers and stalls the core
 * (decode.c PREFETCH_TILES). */
KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE void prefetch_rows(const void *next, size_t row_bytes, int t0, int n) {
    if (!next) return;
    for (size_t o = (size_t)t0 * row_bytes; o < (size_t)(t0 + n) * row_bytes; o += 64)
        _mm_prefetch((const char *)next + o, _MM_HINT_T1);
}

KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE void tile_body(const int G, int d, int n, const float *q, const void *k,
                                                        const void *v, const void *k_next, const void *v_next,
                                                        float *m, float *l, float *acc, const int kind) {
    const int np = (n + 7) & ~7;
    float s[KVQ_ATTN_MAX_G * KVQ_KV_MAX_TILE] __attribute__((aligned(32))); /* (G, np) scores, then p */
    float part[KVQ_ATTN_MAX_G * 64] __attribute__((aligned(32)));          /* (G, 8 tokens, 8 lanes) */
    /* J tokens at once: J x G independent FMA chains, as an FMA's 4-cycle
     * latency needs 8 in flight for both pipes (G 1: 1.6x, G 2: 1.1x in L1;
     * from G 3 the core overlaps consecutive tokens' chains by itself). A
     * token past n reads row n - 1 (in bounds); its score is masked below. */
    const int J = G == 1 ? 8 : G == 2 ? 4 : 1;
    const size_t row_bytes = (size_t)d * (kind == KVQ_ROWS_F32 ? sizeof(float) : sizeof(uint16_t));
    for (int t0 = 0; t0 < n; t0 += 8) {
        const int nb = n - t0 < 8 ? n - t0 : 8;
        prefetch_rows(k_next, row_bytes, t0, nb);
        prefetch_rows(v_next, row_bytes, t0, nb);
        for (int j0 = 0; j0 < 8; j0 += J) {
            __m256 a[8][KVQ_ATTN_MAX_G];
            size_t row[8];
#pragma GCC unroll 8
            for (int j = 0; j < J; j++) {
                row[j] = (size_t)(t0 + j0 + j < n ? t0 + j0 + j : n - 1) * d;
#pragma GCC unroll 8
                for (int g = 0; g < G; g++) a[j][g] = _mm256_setzero_ps();
            }
            for (int c = 0; c < d; c += 8)
#pragma GCC unroll 8
                for (int j = 0; j < J; j++) {
                    const __m256 kc = load8(k, row[j] + c, kind);
#pragma GCC unroll 8
                    for (int g = 0; g < G; g++) a[j][g] = _mm256_fmadd_ps(_mm256_loadu_ps(q + g * d + c), kc, a[j][g]);
                }
#pragma GCC unroll 8
            for (int j = 0; j < J; j++)
#pragma GCC unroll 8
                for (int g = 0; g < G; g++) _mm256_store_ps(part + g * 64 + (j0 + j) * 8, a[j][g]);
        }
        const __m256 lane = _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7);
        const __m256 pad = _mm256_cmp_ps(lane, _mm256_set1_ps((float)nb), _CMP_GE_OQ);
        #pragma GCC unroll 8
        for (int g = 0; g < G; g++)
            _mm256_store_ps(s + g * np + t0, _mm256_blendv_ps(reduce8(part + g * 64), _mm256_set1_ps(-INFINITY), pad));
    }
    softmax_update_avx2(0, G, d, np, s, m, l, acc);
    pv_rows(G, d, n, np, s, v, acc, kind);
}

/* One instantiation per group size, so the G accumulators are registers. */
#define KVQ_TILE_CASES(kind)                                                      \
    switch (G) {                                                                  \
    case 1: tile_body(1, d, n, q, k, v, k_next, v_next, m, l, acc, kind); break;  \
    case 2: tile_body(2, d, n, q, k, v, k_next, v_next, m, l, acc, kind); break;  \
    case 3: tile_body(3, d, n, q, k, v, k_next, v_next, m, l, acc, kind); break;  \
    case 4: tile_body(4, d, n, q, k, v, k_next, v_next, m, l, acc, kind); break;  \
    case 5: tile_body(5, d, n, q, k, v, k_next, v_next, m, l, acc, kind); break;  \
    case 6: tile_body(6, d, n, q, k, v, k_next, v_next, m, l, acc, kind); break;  \
    case 7: tile_body(7, d, n, q, k, v, k_next, v_next, m, l, acc, kind); break;  \
    default: tile_body(8, d, n, q, k, v, k_next, v_next, m, l, acc, kind); break; \
    }

KVQ_TARGET_AVX2 void kvq_attn_tile_f32_avx2(int G, int d, int n, const float *q, const void *k, const void *v,
                                            const void *k_next, const void *v_next, float *m, float *l, float *acc) {
    KVQ_TILE_CASES(KVQ_ROWS_F32)
}

KVQ_TARGET_AVX2 void kvq_attn_tile_f16_avx2(int G, int d, int n, const float *q, const void *k, const void *v,
                                            const void *k_next, const void *v_next, float *m, float *l, float *acc) {
    KVQ_TILE_CASES(KVQ_ROWS_F16)
}

KVQ_TARGET_AVX2 void kvq_attn_tile_bf16_avx2(int G, int d, int n, const float *q, const void *k, const void *v,
                                             const void *k_next, const void *v_next, float *m, float *l, float *acc) {
    KVQ_TILE_CASES(KVQ_ROWS_BF16)
}

KVQ_TARGET_AVX2 void kvq_attn_rows_pv_f16_avx2(int G, int d, int n, int np, const float *p, const uint16_t *v,
                                               float *acc) {
    switch (G) {
    case 1: pv_rows(1, d, n, np, p, v, acc, KVQ_ROWS_F16); break;
    case 2: pv_rows(2, d, n, np, p, v, acc, KVQ_ROWS_F16); break;
    case 3: pv_rows(3, d, n, np, p, v, acc, KVQ_ROWS_F16); break;
    case 4: pv_rows(4, d, n, np, p, v, acc, KVQ_ROWS_F16); break;
    case 5: pv_rows(5, d, n, np, p, v, acc, KVQ_ROWS_F16); break;
    case 6: pv_rows(6, d, n, np, p, v, acc, KVQ_ROWS_F16); break;
    case 7: pv_rows(7, d, n, np, p, v, acc, KVQ_ROWS_F16); break;
    default: pv_rows(8, d, n, np, p, v, acc, KVQ_ROWS_F16); break;
    }
}
#endif
