/* decode_avx512.c — the attention tile kernel with AVX-512.
 *
 * Scores: per token, the K row is loaded (and converted from f16) once and
 * dotted with all G queries; the G x 16 lane-partial sums of a 16-token block
 * are reduced together by a transpose-add tree (3 ops per score instead of a
 * horizontal sum each). P x V: per 16-channel slice, the G accumulators stay
 * in registers while the V rows stream through, each V value loaded once. */
#include <math.h>

#include "attn/attn_kernels.h"

#if KVQ_HAVE_X86
#include <immintrin.h>

KVQ_TARGET_AVX512 static KVQ_ALWAYS_INLINE __m512 load16(const void *base, size_t i, int kind) {
    if (kind == KVQ_ROWS_F16)
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)base + i)));
    return _mm512_loadu_ps((const float *)base + i);
}

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

/* exp(x) for x <= 0, relative error ~2e-7; far below -87 gives 0. */
KVQ_TARGET_AVX512 static KVQ_ALWAYS_INLINE __m512 exp16(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

/* acc (G, d) += p (G, np) x V (n, d), CB 16-channel slices at a time. */
KVQ_TARGET_AVX512 static KVQ_ALWAYS_INLINE void pv_body(const int G, const int CB, int d, int n, int np,
                                                        const float *p, const void *v, float *acc, const int kind) {
    for (int c0 = 0; c0 < d; c0 += 16 * CB) {
        __m512 a[KVQ_ATTN_MAX_G][4];
#pragma GCC unroll 8
        for (int g = 0; g < G; g++)
#pragma GCC unroll 4
            for (int b = 0; b < CB; b++) a[g][b] = _mm512_loadu_ps(acc + g * d + c0 + 16 * b);
        for (int t = 0; t < n; t++) {
            __m512 vv[4];
#pragma GCC unroll 4
            for (int b = 0; b < CB; b++) vv[b] = load16(v, (size_t)t * d + c0 + 16 * b, kind);
#pragma GCC unroll 8
            for (int g = 0; g < G; g++) {
                const __m512 pg = _mm512_set1_ps(p[g * np + t]);
#pragma GCC unroll 4
                for (int b = 0; b < CB; b++) a[g][b] = _mm512_fmadd_ps(pg, vv[b], a[g][b]);
            }
        }
#pragma GCC unroll 8
        for (int g = 0; g < G; g++)
#pragma GCC unroll 4
            for (int b = 0; b < CB; b++) _mm512_storeu_ps(acc + g * d + c0 + 16 * b, a[g][b]);
    }
}

KVQ_TARGET_AVX512 static KVQ_ALWAYS_INLINE void tile_body(const int G, int d, int n, const float *q, const void *k,
                                                          const void *v, float *m, float *l, float *acc,
                                                          const int kind) {
    const int np = (n + 15) & ~15;
    float s[KVQ_ATTN_MAX_G * KVQ_KV_MAX_TILE] __attribute__((aligned(64))); /* (G, np) scores, then p */
    float part[KVQ_ATTN_MAX_G * 256] __attribute__((aligned(64)));         /* (G, 16 tokens, 16 lanes) */
    for (int t0 = 0; t0 < n; t0 += 16) {
        const int nb = n - t0 < 16 ? n - t0 : 16;
        for (int j = 0; j < 16; j++) {
            __m512 a[KVQ_ATTN_MAX_G];
            #pragma GCC unroll 8
            for (int g = 0; g < G; g++) a[g] = _mm512_setzero_ps();
            if (j < nb) {
                const size_t row = (size_t)(t0 + j) * d;
                for (int c = 0; c < d; c += 16) {
                    const __m512 kc = load16(k, row + c, kind);
                    #pragma GCC unroll 8
                    for (int g = 0; g < G; g++) a[g] = _mm512_fmadd_ps(_mm512_loadu_ps(q + g * d + c), kc, a[g]);
                }
            }
            #pragma GCC unroll 8
            for (int g = 0; g < G; g++) _mm512_store_ps(part + g * 256 + j * 16, a[g]);
        }
        const __mmask16 pad = (__mmask16)~((1u << nb) - 1u);
        #pragma GCC unroll 8
        for (int g = 0; g < G; g++)
            _mm512_store_ps(s + g * np + t0, _mm512_mask_mov_ps(reduce16(part + g * 256), pad,
                                                                _mm512_set1_ps(-INFINITY)));
    }
    #pragma GCC unroll 8
    for (int g = 0; g < G; g++) {
        float *sg = s + g * np;
        __m512 mx = _mm512_set1_ps(-INFINITY);
        for (int t = 0; t < np; t += 16) mx = _mm512_max_ps(mx, _mm512_load_ps(sg + t));
        const float mt = _mm512_reduce_max_ps(mx);
        const float m_new = mt > m[g] ? mt : m[g];
        const float alpha = expf(m[g] - m_new);
        __m512 sum = _mm512_setzero_ps();
        const __m512 mv = _mm512_set1_ps(m_new);
        for (int t = 0; t < np; t += 16) {
            const __m512 p = exp16(_mm512_sub_ps(_mm512_load_ps(sg + t), mv));
            _mm512_store_ps(sg + t, p);
            sum = _mm512_add_ps(sum, p);
        }
        l[g] = l[g] * alpha + _mm512_reduce_add_ps(sum);
        m[g] = m_new;
        if (alpha != 1.0f) {
            const __m512 av = _mm512_set1_ps(alpha);
            for (int c = 0; c < d; c += 16)
                _mm512_storeu_ps(acc + g * d + c, _mm512_mul_ps(_mm512_loadu_ps(acc + g * d + c), av));
        }
    }
    /* CB channel slices at once: G * CB independent accumulator chains hide
     * the FMA latency (G alone is too few), within the 32 registers. */
    if (G * 4 <= 24 && d % 64 == 0) pv_body(G, 4, d, n, np, s, v, acc, kind);
    else pv_body(G, 2, d, n, np, s, v, acc, kind);
}

/* One instantiation per group size, so the G accumulators are registers. */
#define KVQ_TILE_CASES(kind)                                                                             \
    switch (G) {                                                                                         \
    case 1: tile_body(1, d, n, q, k, v, m, l, acc, kind); break;                                         \
    case 2: tile_body(2, d, n, q, k, v, m, l, acc, kind); break;                                         \
    case 3: tile_body(3, d, n, q, k, v, m, l, acc, kind); break;                                         \
    case 4: tile_body(4, d, n, q, k, v, m, l, acc, kind); break;                                         \
    case 5: tile_body(5, d, n, q, k, v, m, l, acc, kind); break;                                         \
    case 6: tile_body(6, d, n, q, k, v, m, l, acc, kind); break;                                         \
    case 7: tile_body(7, d, n, q, k, v, m, l, acc, kind); break;                                         \
    default: tile_body(8, d, n, q, k, v, m, l, acc, kind); break;                                        \
    }

KVQ_TARGET_AVX512 void kvq_attn_tile_f32_avx512(int G, int d, int n, const float *q, const void *k, const void *v,
                                                float *m, float *l, float *acc) {
    KVQ_TILE_CASES(KVQ_ROWS_F32)
}

KVQ_TARGET_AVX512 void kvq_attn_tile_f16_avx512(int G, int d, int n, const float *q, const void *k, const void *v,
                                                float *m, float *l, float *acc) {
    KVQ_TILE_CASES(KVQ_ROWS_F16)
}
#endif
