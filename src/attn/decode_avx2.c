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

/* bf16 rows 16 values a load: a bf16 is a float's top half, so a 32-byte
 * load's dwords shifted left by 16 are its even values and the dwords
 * masked its odd ones, one ALU op each, where load8 widens 8 values with a
 * 2-uop vpmovzxwd and a shift. The values come in even / odd order, so the
 * tile kernel puts the query (scores) and the accumulators (P x V) in that
 * order around its loops. On a Zen 3, bf16 generation at depth 4096 went
 * from 0.94-0.97x f16 to 1.04-1.08x (docs/PERF.md). */
KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE void bf16_even_odd(const void *base, size_t i, __m256 *even, __m256 *odd) {
    const __m256i w = _mm256_loadu_si256((const __m256i *)(const void *)((const uint16_t *)base + i));
    *even = _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
    *odd = _mm256_castsi256_ps(_mm256_and_si256(w, _mm256_set1_epi32((int)0xFFFF0000u)));
}

/* x (16 floats as a, b) -> its even and odd elements. */
KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE void deinterleave16(__m256 a, __m256 b, __m256 *even, __m256 *odd) {
    /* shuffle_ps leaves [a0 a2 b0 b2 | a4 a6 b4 b6]: 64-bit pairs 0 2 1 3 */
    *even = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xD8));
    *odd = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xDD)), 0xD8));
}

/* The inverse: even and odd elements -> x (16 floats as *a, *b). */
KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE void interleave16(__m256 even, __m256 odd, __m256 *a, __m256 *b) {
    const __m256 lo = _mm256_unpacklo_ps(even, odd), hi = _mm256_unpackhi_ps(even, odd);
    *a = _mm256_permute2f128_ps(lo, hi, 0x20);
    *b = _mm256_permute2f128_ps(lo, hi, 0x31);
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
KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE void pv_row(const void *v, size_t at, const int CB, const int EO,
                                                     __m256 vv[4], const int kind) {
#pragma GCC unroll 4
    for (int b = 0; b < CB; b += 1 + EO) {
        if (EO) bf16_even_odd(v, at + 8 * (size_t)b, &vv[b], &vv[b + 1]);
        else vv[b] = load8(v, at + 8 * (size_t)b, kind);
    }
}

KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE void pv_body(const int G, const int CB, const int PH, int d, int n, int np,
                                                      const float *p, const void *v, float *acc, const int kind) {
    /* bf16 in even / odd order (bf16_even_odd): slices b, b + 1 of the
     * accumulators hold the even and odd channels of 16 */
    const int EO = kind == KVQ_ROWS_BF16 && CB % 2 == 0;
    for (int c0 = 0; c0 < d; c0 += 8 * CB) {
        __m256 a[2][KVQ_ATTN_MAX_G][4];
#pragma GCC unroll 8
        for (int g = 0; g < G; g++)
#pragma GCC unroll 4
            for (int b = 0; b < CB; b++) {
                a[0][g][b] = _mm256_loadu_ps(acc + g * d + c0 + 8 * b);
                if (PH == 2) a[1][g][b] = _mm256_setzero_ps();
            }
        if (EO)
#pragma GCC unroll 8
            for (int g = 0; g < G; g++)
#pragma GCC unroll 2
                for (int b = 0; b < CB; b += 2) deinterleave16(a[0][g][b], a[0][g][b + 1], &a[0][g][b], &a[0][g][b + 1]);
        int t = 0;
        for (; t + PH <= n; t += PH)
#pragma GCC unroll 2
            for (int ph = 0; ph < PH; ph++) {
                __m256 vv[4];
                pv_row(v, (size_t)(t + ph) * d + c0, CB, EO, vv, kind);
#pragma GCC unroll 8
                for (int g = 0; g < G; g++) {
                    const __m256 pg = _mm256_broadcast_ss(p + g * np + t + ph);
#pragma GCC unroll 4
                    for (int b = 0; b < CB; b++) a[ph][g][b] = _mm256_fmadd_ps(pg, vv[b], a[ph][g][b]);
                }
            }
        for (; t < n; t++) { /* an odd last token (PH = 2) */
            __m256 vv[4];
            pv_row(v, (size_t)t * d + c0, CB, EO, vv, kind);
#pragma GCC unroll 8
            for (int g = 0; g < G; g++) {
                const __m256 pg = _mm256_broadcast_ss(p + g * np + t);
#pragma GCC unroll 4
                for (int b = 0; b < CB; b++) a[0][g][b] = _mm256_fmadd_ps(pg, vv[b], a[0][g][b]);
            }
        }
#pragma GCC unroll 8
        for (int g = 0; g < G; g++) {
#pragma GCC unroll 4
            for (int b = 0; b < CB; b++)
                if (PH == 2) a[0][g][b] = _mm256_add_ps(a[0][g][b], a[1][g][b]);
            if (EO)
#pragma GCC unroll 2
                for (int b = 0; b < CB; b += 2) interleave16(a[0][g][b], a[0][g][b + 1], &a[0][g][b], &a[0][g][b + 1]);
#pragma GCC unroll 4
            for (int b = 0; b < CB; b++) _mm256_storeu_ps(acc + g * d + c0 + 8 * b, a[0][g][b]);
        }
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

/* a[j][g] += the J rows' dims c.. (8, bf16 16) dotted with query g's. */
KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE void k_dots(const int G, const int J, int d, const float *q, const void *k,
                                                     const size_t row[8], int c, __m256 a[8][KVQ_ATTN_MAX_G],
                                                     const int kind) {
#pragma GCC unroll 8
    for (int j = 0; j < J; j++) {
        if (kind == KVQ_ROWS_BF16) {
            __m256 ke, ko;
            bf16_even_odd(k, row[j] + c, &ke, &ko);
#pragma GCC unroll 8
            for (int g = 0; g < G; g++)
                a[j][g] = _mm256_fmadd_ps(_mm256_load_ps(q + g * d + c + 8), ko,
                                          _mm256_fmadd_ps(_mm256_load_ps(q + g * d + c), ke, a[j][g]));
        } else {
            const __m256 kc = load8(k, row[j] + c, kind);
#pragma GCC unroll 8
            for (int g = 0; g < G; g++) a[j][g] = _mm256_fmadd_ps(_mm256_loadu_ps(q + g * d + c), kc, a[j][g]);
        }
    }
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
    /* bf16: the query in the rows' even / odd order per 16 dims (bf16_even_odd) */
    float qeo[KVQ_ATTN_MAX_G * KVQ_MAX_HEAD_DIM] __attribute__((aligned(32)));
    if (kind == KVQ_ROWS_BF16) {
        for (int i = 0; i < G * d; i += 16) {
            __m256 e, o;
            deinterleave16(_mm256_loadu_ps(q + i), _mm256_loadu_ps(q + i + 8), &e, &o);
            _mm256_store_ps(qeo + i, e);
            _mm256_store_ps(qeo + i + 8, o);
        }
        q = qeo;
    }
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
            /* one token at a time (J 1): the dims' loop unrolled, as its
             * counter and branch took issue slots from the FMAs (f16 in L1:
             * G 3 -13%, G 4 -5%, G 8 -17%); with J tokens the body is J
             * times larger, and unrolled it made G 1 10% slower */
            const int step = kind == KVQ_ROWS_BF16 ? 16 : 8;
            if (J == 1)
#pragma GCC unroll 8
                for (int c = 0; c < d; c += step) k_dots(G, J, d, q, k, row, c, a, kind);
            else
                for (int c = 0; c < d; c += step) k_dots(G, J, d, q, k, row, c, a, kind);
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

/* ------------------------------------------------------------ block kernel
 *
 * Prefill: many query heads over the same rows, decode_avx512.c's block
 * kernel in 8 lanes and 16 registers. Per 32-row slice K is transposed once
 * into KT (d, 32), so a score block is an outer-product accumulation (6
 * heads x 16 rows in 12 registers, one broadcast per head and dim, no
 * horizontal sums); P x V keeps 6 heads x 16 channels in 12 registers while
 * the V rows stream through. The tile kernel above, which prefill ran query
 * by query before, converts every K and V row again for each query and
 * reduces each score across lanes. */

#define BLOCK_SLICE 32 /* rows per slice */
#define BLOCK_QR 6     /* query heads per score and P x V block */

KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE __m256 row8(const kvq_attn_rows *r, int t, int c, const int fmt) {
    const uint8_t *row = r->base + (size_t)t * r->stride;
    return load8(row, (size_t)c, fmt == KVQ_FMT_F16 ? KVQ_ROWS_F16 : fmt == KVQ_FMT_BF16 ? KVQ_ROWS_BF16 : KVQ_ROWS_F32);
}

/* r[i] (row i of an 8 x 8 block) -> r[e] (column e). */
KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE void transpose8(__m256 r[8]) {
    __m256 t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
        u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
        r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
    }
}

/* KT (d, BLOCK_SLICE) of rows t0 .. t0 + nb of k, zero past nb. */
KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE void block_kt(const kvq_attn_rows *k, int d, int t0, int nb, float *kt,
                                                       const int fmt) {
    for (int tb = 0; tb < BLOCK_SLICE; tb += 8)
        for (int c = 0; c < d; c += 8) {
            __m256 r[8];
            for (int i = 0; i < 8; i++) r[i] = tb + i < nb ? row8(k, t0 + tb + i, c, fmt) : _mm256_setzero_ps();
            transpose8(r);
            for (int e = 0; e < 8; e++) _mm256_store_ps(kt + (size_t)(c + e) * BLOCK_SLICE + tb, r[e]);
        }
}

/* Scores of BLOCK_QR heads (q pointers; unused ones point at zeros) over the
 * slice: s (BLOCK_QR, BLOCK_SLICE), 16 rows at a time. */
KVQ_TARGET_AVX2 static void block_scores(const float *const *q, int d, const float *kt, float *s) {
    for (int h = 0; h < BLOCK_SLICE; h += 16) {
        __m256 a[BLOCK_QR][2];
#pragma GCC unroll 6
        for (int r = 0; r < BLOCK_QR; r++) a[r][0] = a[r][1] = _mm256_setzero_ps();
        for (int e = 0; e < d; e++) {
            const __m256 k0 = _mm256_load_ps(kt + e * BLOCK_SLICE + h), k1 = _mm256_load_ps(kt + e * BLOCK_SLICE + h + 8);
#pragma GCC unroll 6
            for (int r = 0; r < BLOCK_QR; r++) {
                const __m256 qe = _mm256_broadcast_ss(q[r] + e);
                a[r][0] = _mm256_fmadd_ps(qe, k0, a[r][0]);
                a[r][1] = _mm256_fmadd_ps(qe, k1, a[r][1]);
            }
        }
#pragma GCC unroll 6
        for (int r = 0; r < BLOCK_QR; r++) {
            _mm256_store_ps(s + r * BLOCK_SLICE + h, a[r][0]);
            _mm256_store_ps(s + r * BLOCK_SLICE + h + 8, a[r][1]);
        }
    }
}

/* acc[r][c0 .. c0 + 16) = acc * alpha[r] + sum_t p[r][t] v[t] for BLOCK_QR
 * heads; v: the slice's rows as floats (stride d). */
KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE void block_pv(float *const *acc, const float *alpha, const float *p,
                                                       const float *v, int d, int nb, int c0) {
    __m256 a[BLOCK_QR][2];
#pragma GCC unroll 6
    for (int r = 0; r < BLOCK_QR; r++) {
        const __m256 al = _mm256_set1_ps(alpha[r]);
        a[r][0] = _mm256_mul_ps(_mm256_loadu_ps(acc[r] + c0), al);
        a[r][1] = _mm256_mul_ps(_mm256_loadu_ps(acc[r] + c0 + 8), al);
    }
    for (int t = 0; t < nb; t++) {
        const __m256 v0 = _mm256_loadu_ps(v + (size_t)t * d + c0), v1 = _mm256_loadu_ps(v + (size_t)t * d + c0 + 8);
#pragma GCC unroll 6
        for (int r = 0; r < BLOCK_QR; r++) {
            const __m256 pr = _mm256_broadcast_ss(p + r * BLOCK_SLICE + t);
            a[r][0] = _mm256_fmadd_ps(pr, v0, a[r][0]);
            a[r][1] = _mm256_fmadd_ps(pr, v1, a[r][1]);
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < BLOCK_QR; r++) {
        _mm256_storeu_ps(acc[r] + c0, a[r][0]);
        _mm256_storeu_ps(acc[r] + c0 + 8, a[r][1]);
    }
}

/* The online-softmax step of head qr over its visible rows of the slice's
 * scores sr (BLOCK_SLICE): sr becomes p (0 where not visible); returns the
 * accumulator's factor alpha. */
KVQ_TARGET_AVX2 static float block_softmax(const kvq_attn_qrow *qr, int t0, int nb, float *sr) {
    const int vis = qr ? (qr->n_valid - t0 < nb ? qr->n_valid - t0 : nb) : 0;
    if (vis <= 0) {
        for (int j = 0; j < BLOCK_SLICE; j += 8) _mm256_store_ps(sr + j, _mm256_setzero_ps());
        return 1.0f;
    }
    const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256 sv[BLOCK_SLICE / 8], keep[BLOCK_SLICE / 8], mx = _mm256_set1_ps(-INFINITY);
    for (int j = 0; j < BLOCK_SLICE / 8; j++) {
        keep[j] = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(vis - 8 * j), iota));
        sv[j] = _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), _mm256_load_ps(sr + 8 * j), keep[j]);
        mx = _mm256_max_ps(mx, sv[j]);
    }
    /* A new maximum is rare at depth: see softmax_update_avx2. */
    float m_new = *qr->m, alpha = 1.0f;
    if (_mm256_movemask_ps(_mm256_cmp_ps(mx, _mm256_set1_ps(m_new), _CMP_GT_OQ))) {
        const float mt = hmax8(mx);
        m_new = mt > *qr->m ? mt : *qr->m;
        alpha = expf(*qr->m - m_new);
    }
    const __m256 mv = _mm256_set1_ps(m_new);
    __m256 sum = _mm256_setzero_ps();
    for (int j = 0; j < BLOCK_SLICE / 8; j++) {
        const __m256 pj = _mm256_and_ps(keep[j], exp8(_mm256_sub_ps(sv[j], mv)));
        _mm256_store_ps(sr + 8 * j, pj);
        sum = _mm256_add_ps(sum, pj);
    }
    *qr->l = *qr->l * alpha + hsum8(sum);
    *qr->m = m_new;
    return alpha;
}

KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE void block_body(int R, const kvq_attn_qrow *rows, int d, int n,
                                                         const kvq_attn_rows *k, const kvq_attn_rows *v,
                                                         const int kfmt, const int vfmt) {
    float kt[KVQ_MAX_HEAD_DIM * BLOCK_SLICE] __attribute__((aligned(32)));
    float vf[BLOCK_SLICE * KVQ_MAX_HEAD_DIM] __attribute__((aligned(32))); /* (32, d) V as floats */
    float s[BLOCK_QR * BLOCK_SLICE] __attribute__((aligned(32)));
    float zero_q[KVQ_MAX_HEAD_DIM] = {0};
    float sink_acc[KVQ_MAX_HEAD_DIM] = {0}; /* for unused heads */
    for (int t0 = 0; t0 < n; t0 += BLOCK_SLICE) {
        const int nb = n - t0 < BLOCK_SLICE ? n - t0 : BLOCK_SLICE;
        block_kt(k, d, t0, nb, kt, kfmt);
        /* V converted once per slice, not once per block of heads */
        const float *vs = (const float *)(const void *)(v->base + (size_t)t0 * v->stride);
        if (vfmt != KVQ_FMT_F32 || v->stride != sizeof(float) * (size_t)d) {
            for (int t = 0; t < nb; t++)
                for (int c = 0; c < d; c += 8) _mm256_store_ps(vf + (size_t)t * d + c, row8(v, t0 + t, c, vfmt));
            vs = vf;
        }
        for (int r0 = 0; r0 < R; r0 += BLOCK_QR) {
            const int nr = R - r0 < BLOCK_QR ? R - r0 : BLOCK_QR;
            const float *q[BLOCK_QR];
            for (int r = 0; r < BLOCK_QR; r++) q[r] = r < nr ? rows[r0 + r].q : zero_q;
            block_scores(q, d, kt, s);
            float alpha[BLOCK_QR];
            float *acc[BLOCK_QR];
            for (int r = 0; r < BLOCK_QR; r++) {
                alpha[r] = block_softmax(r < nr ? &rows[r0 + r] : NULL, t0, nb, s + r * BLOCK_SLICE);
                acc[r] = r < nr ? rows[r0 + r].acc : sink_acc;
            }
            for (int c0 = 0; c0 < d; c0 += 16) block_pv(acc, alpha, s, vs, d, nb, c0);
        }
    }
}

KVQ_TARGET_AVX2 void kvq_attn_block_avx2(int R, const kvq_attn_qrow *rows, int d, int n, const kvq_attn_rows *k,
                                         const kvq_attn_rows *v) {
    if (k->fmt == KVQ_FMT_F16 && v->fmt == KVQ_FMT_F16) block_body(R, rows, d, n, k, v, KVQ_FMT_F16, KVQ_FMT_F16);
    else if (k->fmt == KVQ_FMT_BF16 && v->fmt == KVQ_FMT_BF16) block_body(R, rows, d, n, k, v, KVQ_FMT_BF16, KVQ_FMT_BF16);
    else block_body(R, rows, d, n, k, v, KVQ_FMT_F32, KVQ_FMT_F32);
}

/* One instantiation per group size, so the G accumulators are registers.
 * From G 3 (one token at a time, tile_body's J) head_dim 64, the default
 * model's, is a constant too, so the loop over its dims unrolls; G 1 and 2
 * take J tokens at once and keep that loop rolled, so they stay general. */
#define KVQ_TILE_G(g, kind)                                                                           \
    case g:                                                                                           \
        if (d == 64) tile_body(g, 64, n, q, k, v, k_next, v_next, m, l, acc, kind);                   \
        else tile_body(g, d, n, q, k, v, k_next, v_next, m, l, acc, kind);                            \
        break;
#define KVQ_TILE_CASES(kind)                                                                          \
    switch (G) {                                                                                      \
    case 1: tile_body(1, d, n, q, k, v, k_next, v_next, m, l, acc, kind); break;                      \
    case 2: tile_body(2, d, n, q, k, v, k_next, v_next, m, l, acc, kind); break;                      \
        KVQ_TILE_G(3, kind)                                                                           \
        KVQ_TILE_G(4, kind)                                                                           \
        KVQ_TILE_G(5, kind)                                                                           \
        KVQ_TILE_G(6, kind)                                                                           \
        KVQ_TILE_G(7, kind)                                                                           \
    default:                                                                                          \
        if (d == 64) tile_body(8, 64, n, q, k, v, k_next, v_next, m, l, acc, kind);                   \
        else tile_body(8, d, n, q, k, v, k_next, v_next, m, l, acc, kind);                            \
        break;                                                                                        \
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
