/* decode_vnni.c — decode attention over interleaved q4_0 / q8_0 tiles with
 * AVX512-VNNI (design and measurements: docs/ATTN_PROTO.md).
 *
 * Scores: a K vector holds 4 dims of 16 tokens (dword lane = token), so one
 * vpdpbusd with 4 query int8 values broadcast adds 4 products to 16 scores:
 * no dequantization, no horizontal sums. The codes' offset (q4_0: 8, q8_0:
 * 128) is the accumulator's initial value, -off x sum(q int8), prepared once.
 * P x V: a V vector holds 16 dims of 4 tokens (byte = token); each token's V
 * block scale is folded into its softmax weight, and the products rounded to
 * 8 bits per (head, block, tile): signed against q4_0's u8 codes (offset
 * corrected), unsigned against q8_0's s8 codes (its scales are >= 0).
 * iq4_nl has q4_0's layout; one vpshufb turns its nibbles into codebook
 * value + 128 (u8), used as q8_0's K codes and as q4_0's V codes.
 * The int32 sums become floats once per block (scores) or tile (P x V). */
#include <math.h>
#include <string.h>

#include "attn/attn_kernels.h"
#include "attn/softmax_avx512.h"
#include "codec/ggml_blocks.h"

void kvq_attn_qi8_prepare(const float *q, int d, int code_off, kvq_attn_qi8 *out) {
    for (int b = 0; b < d / 32; b++) {
        const float *x = q + 32 * b;
        float amax = 0;
        for (int i = 0; i < 32; i++) amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
        const float inv = amax > 0 ? 127.0f / amax : 0.0f;
        int sum[2] = {0, 0};
        for (int i = 0; i < 32; i++) {
            const float y = x[i] * inv;
            const long q0 = lrintf(y), q1 = lrintf((y - (float)q0) * 254.0f); /* |y - q0| <= 0.5: |q1| <= 127 */
            out->q[0][32 * b + i] = (int8_t)q0;
            out->q[1][32 * b + i] = (int8_t)q1;
            sum[0] += (int)q0;
            sum[1] += (int)q1;
        }
        out->scale[b] = amax / 127.0f;
        out->off[0][b] = -code_off * sum[0];
        out->off[1][b] = -code_off * sum[1];
    }
}

#if KVQ_HAVE_X86

/* iq4_nl's codebook + 128, in each 128-bit lane (vpshufb indexes within lanes). */
KVQ_TARGET_AVX512VNNI static KVQ_ALWAYS_INLINE __m512i iq4nl_lut(void) {
    uint8_t t[16];
    for (int i = 0; i < 16; i++) t[i] = (uint8_t)(kvq_iq4nl_values[i] + 128);
    return _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)t));
}

/* The u8 codes of a vector of nibbles: low and high nibbles (q4_0), through
 * the codebook for iq4_nl. */
KVQ_TARGET_AVX512VNNI static KVQ_ALWAYS_INLINE void nibble_codes(const int KIND, __m512i z, __m512i lut, __m512i *c0,
                                                                 __m512i *c1) {
    const __m512i lo4 = _mm512_set1_epi8(0x0F);
    *c0 = _mm512_and_si512(z, lo4);
    *c1 = _mm512_and_si512(_mm512_srli_epi16(z, 4), lo4);
    if (KIND == KVQ_ITILE_IQ4_NL) {
        *c0 = _mm512_shuffle_epi8(lut, *c0);
        *c1 = _mm512_shuffle_epi8(lut, *c1);
    }
}

/* The code vector at base + o, prefetching the same line of the next tile
 * (pf, or NULL): tiles of a stream share the layout. */
KVQ_TARGET_AVX512VNNI static KVQ_ALWAYS_INLINE __m512i load_line(const uint8_t *base, const uint8_t *pf, size_t o) {
    if (pf) _mm_prefetch((const char *)pf + o, _MM_HINT_T0);
    return _mm512_loadu_si512(base + o);
}

/* Bytes of a K group of 16 tokens, and of a tile's codes before its scales. */
static inline size_t k_group_bytes(int q8, int nb) { return (size_t)16 * nb * (q8 ? 34 : 18); }
static inline size_t k_group_codes(int q8, int nb) { return (size_t)16 * nb * (q8 ? 32 : 16); }
static inline size_t v_codes(int q8, int nb, int T) { return (size_t)T * nb * (q8 ? 32 : 16); }

static KVQ_ALWAYS_INLINE int32_t ld32(const void *p) {
    int32_t x;
    memcpy(&x, p, 4);
    return x;
}

/* s (G, T): the scores of tokens [0, n) of an interleaved K tile, -Inf past n.
 * The query residual (a second product, ~15 bits of query) only for q8_0 K,
 * whose own error is small enough for 8 bits of query to show. */
KVQ_TARGET_AVX512VNNI static KVQ_ALWAYS_INLINE void scores(const int KIND, const int G, int nb, int T, int n,
                                                           const kvq_attn_qi8 *q, const uint8_t *kt,
                                                           const uint8_t *pf, float *s) {
    const int KQ8 = KIND == KVQ_ITILE_Q8_0, QP = KQ8 ? 2 : 1;
    const __m512i lut = KIND == KVQ_ITILE_IQ4_NL ? iq4nl_lut() : _mm512_setzero_si512();
    const size_t gb = k_group_bytes(KQ8, nb), gc = k_group_codes(KQ8, nb);
#pragma GCC unroll 2
    for (int h = 0; h < T / 16; h++) {
        const uint8_t *grp = kt + h * gb, *pg = pf ? pf + h * gb : NULL;
        __m512 sc[KVQ_ATTN_MAX_G];
#pragma GCC unroll 8
        for (int g = 0; g < G; g++) sc[g] = _mm512_setzero_ps();
#pragma GCC unroll 2
        for (int b = 0; b < nb; b++) {
            __m512i a[KVQ_ATTN_MAX_G], r[KVQ_ATTN_MAX_G]; /* r: the residual's products */
#pragma GCC unroll 8
            for (int g = 0; g < G; g++) {
                a[g] = _mm512_set1_epi32(q[g].off[0][b]);
                r[g] = _mm512_set1_epi32(q[g].off[1][b]);
            }
            if (!KQ8) {
#pragma GCC unroll 4
                for (int m = 0; m < 4; m++) {
                    const size_t o = (size_t)(4 * b + m) * 64;
                    const __m512i z = load_line(grp, pg, o);
                    __m512i c0, c1;
                    nibble_codes(KIND, z, lut, &c0, &c1);
#pragma GCC unroll 8
                    for (int g = 0; g < G; g++) {
                        const int8_t *qb = q[g].q[0] + 32 * b + 8 * m;
                        a[g] = _mm512_dpbusd_epi32(a[g], c0, _mm512_set1_epi32(ld32(qb)));
                        a[g] = _mm512_dpbusd_epi32(a[g], c1, _mm512_set1_epi32(ld32(qb + 4)));
                    }
                }
            } else {
#pragma GCC unroll 8
                for (int m = 0; m < 8; m++) {
                    const size_t o = (size_t)(8 * b + m) * 64;
                    const __m512i z = load_line(grp, pg, o);
#pragma GCC unroll 8
                    for (int g = 0; g < G; g++) {
                        a[g] = _mm512_dpbusd_epi32(a[g], z, _mm512_set1_epi32(ld32(q[g].q[0] + 32 * b + 4 * m)));
                        if (QP == 2)
                            r[g] = _mm512_dpbusd_epi32(r[g], z, _mm512_set1_epi32(ld32(q[g].q[1] + 32 * b + 4 * m)));
                    }
                }
            }
            const __m512 dk = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(grp + gc + 32 * b)));
#pragma GCC unroll 8
            for (int g = 0; g < G; g++) {
                __m512 x = _mm512_cvtepi32_ps(a[g]);
                if (QP == 2) x = _mm512_fmadd_ps(_mm512_cvtepi32_ps(r[g]), _mm512_set1_ps(1.0f / 254), x);
                sc[g] = _mm512_fmadd_ps(x, _mm512_mul_ps(dk, _mm512_set1_ps(q[g].scale[b])), sc[g]);
            }
        }
        if (pg)
            for (size_t o = gc; o < gb; o += 64) _mm_prefetch((const char *)pg + o, _MM_HINT_T0);
        const int valid = n - 16 * h;
        const __mmask16 keep = valid >= 16 ? 0xFFFF : valid <= 0 ? 0 : (__mmask16)((1u << valid) - 1);
#pragma GCC unroll 8
        for (int g = 0; g < G; g++)
            _mm512_store_ps(s + g * T + 16 * h, _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), keep, sc[g]));
    }
}

/* acc (G, d) += p (G, T) x an interleaved V tile. */
KVQ_TARGET_AVX512VNNI static KVQ_ALWAYS_INLINE void pv(const int KIND, const int G, int d, int nb, int T,
                                                       const float *p, const uint8_t *vt, const uint8_t *pf,
                                                       float *acc) {
    const int VQ8 = KIND == KVQ_ITILE_Q8_0, off = KIND == KVQ_ITILE_IQ4_NL ? 128 : 8;
    /* p x V scale of head g, block b, token t, rounded: pq[(g nb + b) T + t],
     * packed (rows 4 KiB apart would alias the stores they follow). */
    _Alignas(64) int8_t pq[KVQ_ATTN_MAX_G * KVQ_MAX_HEAD_DIM / 32 * KVQ_KV_MAX_TILE];
    float sp[KVQ_ATTN_MAX_G][KVQ_MAX_HEAD_DIM / 32];
    int32_t corr[KVQ_ATTN_MAX_G][KVQ_MAX_HEAD_DIM / 32];
    const uint8_t *vs = vt + v_codes(VQ8, nb, T);
#pragma GCC unroll 8
    for (int g = 0; g < G; g++)
#pragma GCC unroll 2
        for (int b = 0; b < nb; b++) {
            const float *pg = p + g * T;
            const uint8_t *sb = vs + 2 * (size_t)b * T;
            __m512 mx = _mm512_setzero_ps();
#pragma GCC unroll 2
            for (int h = 0; h < T; h += 16) {
                const __m512 x = _mm512_mul_ps(_mm512_load_ps(pg + h),
                                               _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(sb + 2 * h))));
                mx = _mm512_max_ps(mx, _mm512_abs_ps(x));
            }
            const float amax = _mm512_reduce_max_ps(mx), levels = VQ8 ? 255.0f : 127.0f;
            const __m512 inv = _mm512_set1_ps(amax > 0 ? levels / amax : 0.0f);
            sp[g][b] = amax / levels;
            __m512i sum = _mm512_setzero_si512();
#pragma GCC unroll 2
            for (int h = 0; h < T; h += 16) {
                const __m512 x = _mm512_mul_ps(_mm512_load_ps(pg + h),
                                               _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(sb + 2 * h))));
                const __m512i qi = _mm512_cvtps_epi32(_mm512_mul_ps(x, inv));
                sum = _mm512_add_epi32(sum, qi);
                _mm_store_si128((__m128i *)&pq[((size_t)g * nb + b) * T + h], VQ8 ? _mm512_cvtusepi32_epi8(qi) : _mm512_cvtepi32_epi8(qi));
            }
            corr[g][b] = VQ8 ? 0 : -off * _mm512_reduce_add_epi32(sum);
        }
    /* Blocks per pass over the tile: 2 BB accumulators per head stay in registers. */
    const int BB = G == 1 ? 8 : G == 2 ? 4 : G <= 4 ? 2 : 1;
    const __m512i lut = KIND == KVQ_ITILE_IQ4_NL ? iq4nl_lut() : _mm512_setzero_si512();
    for (int b0 = 0; b0 < nb; b0 += BB) {
        __m512i a[KVQ_ATTN_MAX_G][16];
#pragma GCC unroll 8
        for (int g = 0; g < G; g++)
#pragma GCC unroll 16
            for (int k = 0; k < 2 * BB; k++) a[g][k] = _mm512_set1_epi32(b0 + k / 2 < nb ? corr[g][b0 + k / 2] : 0);
#pragma GCC unroll 8
        for (int j = 0; j < T / 4; j++) {
#pragma GCC unroll 8
            for (int kb = 0; kb < BB; kb++) {
                const int b = b0 + kb;
                if (b >= nb) break;
                if (!VQ8) {
                    const size_t o = ((size_t)j * nb + b) * 64;
                    const __m512i z = load_line(vt, pf, o);
                    __m512i c0, c1;
                    nibble_codes(KIND, z, lut, &c0, &c1);
#pragma GCC unroll 8
                    for (int g = 0; g < G; g++) {
                        const __m512i pb = _mm512_set1_epi32(ld32(&pq[((size_t)g * nb + b) * T + 4 * j]));
                        a[g][2 * kb] = _mm512_dpbusd_epi32(a[g][2 * kb], c0, pb);
                        a[g][2 * kb + 1] = _mm512_dpbusd_epi32(a[g][2 * kb + 1], c1, pb);
                    }
                } else {
#pragma GCC unroll 2
                    for (int half = 0; half < 2; half++) {
                        const size_t o = ((size_t)j * 2 * nb + 2 * b + half) * 64;
                        const __m512i z = load_line(vt, pf, o);
#pragma GCC unroll 8
                        for (int g = 0; g < G; g++)
                            a[g][2 * kb + half] =
                                _mm512_dpbusd_epi32(a[g][2 * kb + half], _mm512_set1_epi32(ld32(&pq[((size_t)g * nb + b) * T + 4 * j])), z);
                    }
                }
            }
        }
#pragma GCC unroll 8
        for (int g = 0; g < G; g++)
#pragma GCC unroll 16
            for (int k = 0; k < 2 * BB; k++) {
                const int b = b0 + k / 2;
                if (b >= nb) break;
                float *dst = acc + (size_t)g * d + 32 * b + 16 * (k % 2);
                _mm512_storeu_ps(dst, _mm512_fmadd_ps(_mm512_cvtepi32_ps(a[g][k]), _mm512_set1_ps(sp[g][b]),
                                                      _mm512_loadu_ps(dst)));
            }
    }
    if (pf)
        for (size_t o = v_codes(VQ8, nb, T); o < v_codes(VQ8, nb, T) + 2 * (size_t)nb * T; o += 64)
            _mm_prefetch((const char *)pf + o, _MM_HINT_T0);
}

/* Scores and P x V are instantiated per codec kind and G, each with d and T
 * constants for the common case (head_dim 64, 32-token tiles: the loops over
 * blocks and token groups unroll) and a general one. */
typedef void (*scores_fn)(int d, int T, int n, const kvq_attn_qi8 *q, const uint8_t *kt, const uint8_t *pf,
                          float *s);
typedef void (*pv_fn)(int d, int T, const float *p, const uint8_t *vt, const uint8_t *pf, float *acc);

#define VNNI_FN(KIND, G)                                                                                     \
    KVQ_TARGET_AVX512VNNI static void scores_##KIND##_##G(int d, int T, int n, const kvq_attn_qi8 *q,         \
                                                          const uint8_t *kt, const uint8_t *pf, float *s) {  \
        if (d == 64 && T == 32) scores(KIND, G, 2, 32, n, q, kt, pf, s);                                     \
        else scores(KIND, G, d / 32, T, n, q, kt, pf, s);                                                    \
    }                                                                                                        \
    KVQ_TARGET_AVX512VNNI static void pv_##KIND##_##G(int d, int T, const float *p, const uint8_t *vt,        \
                                                      const uint8_t *pf, float *acc) {                       \
        if (d == 64 && T == 32) pv(KIND, G, 64, 2, 32, p, vt, pf, acc);                                       \
        else pv(KIND, G, d, d / 32, T, p, vt, pf, acc);                                                      \
    }
#define VNNI_FNS(KIND)                                                                                       \
    VNNI_FN(KIND, 1) VNNI_FN(KIND, 2) VNNI_FN(KIND, 3) VNNI_FN(KIND, 4) VNNI_FN(KIND, 5) VNNI_FN(KIND, 6)    \
    VNNI_FN(KIND, 7) VNNI_FN(KIND, 8)
VNNI_FNS(0)
VNNI_FNS(1)
VNNI_FNS(2)
#define VNNI_ROW(F, KIND) {F##_##KIND##_1, F##_##KIND##_2, F##_##KIND##_3, F##_##KIND##_4, \
                           F##_##KIND##_5, F##_##KIND##_6, F##_##KIND##_7, F##_##KIND##_8}

KVQ_TARGET_AVX512VNNI void kvq_attn_vnni_avx512(int G, int d, int n, const kvq_attn_qi8 *q,
                                                const kvq_attn_itiles *t, float *m, float *l, float *acc) {
    _Static_assert(KVQ_ITILE_Q4_0 == 0 && KVQ_ITILE_Q8_0 == 1 && KVQ_ITILE_IQ4_NL == 2, "table order");
    static const scores_fn score_table[3][KVQ_ATTN_MAX_G] = {VNNI_ROW(scores, 0), VNNI_ROW(scores, 1),
                                                             VNNI_ROW(scores, 2)};
    static const pv_fn pv_table[3][KVQ_ATTN_MAX_G] = {VNNI_ROW(pv, 0), VNNI_ROW(pv, 1), VNNI_ROW(pv, 2)};
    _Alignas(64) float s[KVQ_ATTN_MAX_G * KVQ_KV_MAX_TILE]; /* (G, T) */
    score_table[t->k_kind][G - 1](d, t->T, n, q, t->k, t->k_next, s);
    softmax_update(G, d, t->T, s, m, l, acc);
    pv_table[t->v_kind][G - 1](d, t->T, s, t->v, t->v_next, acc);
}
#undef VNNI_ROW
#undef VNNI_FNS
#undef VNNI_FN

#endif
