/* wtype_avx512.c — weight dequantization, matvec and matmul with AVX-512. */
#include "model/wtype.h"

#if KVQ_HAVE_X86
#include <immintrin.h>

#include "model/wtype_blocks.h"

/* One instantiation of a reference block body under this target: the
 * compiler vectorizes it, and it stays bit-exact (same operations, no
 * contraction under -std=c11). */
#define KVQ_WBLOCKS(ID, bs, bytes)                                                     \
    KVQ_TARGET_AVX512 static void dequant_##ID(const void *src, float *dst, int64_t n_blocks) { \
        const uint8_t *b = src;                                                       \
        for (int64_t i = 0; i < n_blocks; i++) kvq_wblock_##ID(b + i * (bytes), dst + i * (bs)); \
    }
KVQ_WBLOCKS(F16, 1, 2)
KVQ_WBLOCKS(BF16, 1, 2)

KVQ_TARGET_AVX512 void kvq_wdequant_F32_avx512(const void *src, float *dst, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
}

KVQ_TARGET_AVX512 void kvq_wdequant_F16_avx512(const void *src, float *dst, int64_t n) {
    const uint16_t *h = src;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(h + i))));
    dequant_F16(h + i, dst + i, n - i);
}

KVQ_TARGET_AVX512 void kvq_wdequant_BF16_avx512(const void *src, float *dst, int64_t n) {
    const uint16_t *h = src;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512i u = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(h + i)));
        _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(_mm512_slli_epi32(u, 16)));
    }
    dequant_BF16(h + i, dst + i, n - i);
}

/* ggml blocks of 32 as two 16-lane vectors (values 0..15, 16..31), with
 * the reference's operations in its order (bit-exact). */
KVQ_TARGET_AVX512 static inline __m512 f16_splat(const uint8_t *p) {
    return _mm512_set1_ps(_cvtsh_ss(kvq_load_u16(p)));
}

KVQ_TARGET_AVX512 static inline __m512i nibbles_lo(const uint8_t *qs) {
    return _mm512_and_si512(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)qs)), _mm512_set1_epi32(15));
}

KVQ_TARGET_AVX512 static inline __m512i nibbles_hi(const uint8_t *qs) {
    return _mm512_srli_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)qs)), 4);
}

/* The fifth bits of q5_0/q5_1: bit j of qh belongs to value j. */
KVQ_TARGET_AVX512 static inline __m512i with_bit4(__m512i q, __mmask16 bits) {
    return _mm512_mask_or_epi32(q, bits, q, _mm512_set1_epi32(16));
}

KVQ_TARGET_AVX512 static inline void block_Q4_0(const uint8_t *b, __m512 *w0, __m512 *w1) {
    const __m512 d = f16_splat(b);
    const __m512i eight = _mm512_set1_epi32(8);
    *w0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(nibbles_lo(b + 2), eight)), d);
    *w1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(nibbles_hi(b + 2), eight)), d);
}

KVQ_TARGET_AVX512 static inline void block_Q4_1(const uint8_t *b, __m512 *w0, __m512 *w1) {
    const __m512 d = f16_splat(b), m = f16_splat(b + 2);
    *w0 = _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(nibbles_lo(b + 4)), d), m);
    *w1 = _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(nibbles_hi(b + 4)), d), m);
}

KVQ_TARGET_AVX512 static inline void block_Q5_0(const uint8_t *b, __m512 *w0, __m512 *w1) {
    const __m512 d = f16_splat(b);
    uint32_t qh;
    memcpy(&qh, b + 2, 4);
    const __m512i sixteen = _mm512_set1_epi32(16);
    const __m512i q0 = with_bit4(nibbles_lo(b + 6), (__mmask16)qh);
    const __m512i q1 = with_bit4(nibbles_hi(b + 6), (__mmask16)(qh >> 16));
    *w0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(q0, sixteen)), d);
    *w1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(q1, sixteen)), d);
}

KVQ_TARGET_AVX512 static inline void block_Q5_1(const uint8_t *b, __m512 *w0, __m512 *w1) {
    const __m512 d = f16_splat(b), m = f16_splat(b + 2);
    uint32_t qh;
    memcpy(&qh, b + 4, 4);
    const __m512i q0 = with_bit4(nibbles_lo(b + 8), (__mmask16)qh);
    const __m512i q1 = with_bit4(nibbles_hi(b + 8), (__mmask16)(qh >> 16));
    *w0 = _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(q0), d), m);
    *w1 = _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(q1), d), m);
}

KVQ_TARGET_AVX512 static inline void block_Q8_0(const uint8_t *b, __m512 *w0, __m512 *w1) {
    const __m512 d = f16_splat(b);
    *w0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b + 2)))), d);
    *w1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b + 18)))), d);
}

/* Per 32-value type: the dequantizer, and a fused row dot (dequantize in
 * registers, FMA with x; four partial sums over two blocks per step). */
#define KVQ_WBLOCK32(ID, bytes)                                                        \
    KVQ_TARGET_AVX512 void kvq_wdequant_##ID##_avx512(const void *src, float *dst, int64_t n) { \
        const uint8_t *b = src;                                                       \
        for (int64_t i = 0; i < n; i++) {                                             \
            __m512 w0, w1;                                                            \
            block_##ID(b + i * (bytes), &w0, &w1);                                    \
            _mm512_storeu_ps(dst + 32 * i, w0);                                       \
            _mm512_storeu_ps(dst + 32 * i + 16, w1);                                  \
        }                                                                             \
    }
#define KVQ_WDOT32(ID, bytes)                                                          \
    KVQ_TARGET_AVX512 static float dot_##ID(const uint8_t *row, const float *x, int64_t nb) { \
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, w0, w1, w2, w3;  \
        int64_t i = 0;                                                                \
        for (; i + 2 <= nb; i += 2) {                                                 \
            block_##ID(row + i * (bytes), &w0, &w1);                                  \
            block_##ID(row + (i + 1) * (bytes), &w2, &w3);                            \
            a0 = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x + 32 * i), a0);                \
            a1 = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + 32 * i + 16), a1);           \
            a2 = _mm512_fmadd_ps(w2, _mm512_loadu_ps(x + 32 * i + 32), a2);           \
            a3 = _mm512_fmadd_ps(w3, _mm512_loadu_ps(x + 32 * i + 48), a3);           \
        }                                                                             \
        if (i < nb) {                                                                 \
            block_##ID(row + i * (bytes), &w0, &w1);                                  \
            a0 = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x + 32 * i), a0);                \
            a1 = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + 32 * i + 16), a1);           \
        }                                                                             \
        return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3))); \
    }
KVQ_WBLOCK32(Q4_0, 18)
KVQ_WBLOCK32(Q4_1, 20)
KVQ_WBLOCK32(Q5_0, 22)
KVQ_WBLOCK32(Q5_1, 24)
KVQ_WBLOCK32(Q8_0, 34)
KVQ_WDOT32(Q4_0, 18)
KVQ_WDOT32(Q5_0, 22)
KVQ_WDOT32(Q5_1, 24)
KVQ_WDOT32(Q8_0, 34)
#undef KVQ_WBLOCK32
#undef KVQ_WDOT32

#define KVQ_WQUANT(ID, bs, bytes)                                                      \
    KVQ_WBLOCKS(ID, bs, bytes)                                                        \
    KVQ_TARGET_AVX512 void kvq_wdequant_##ID##_avx512(const void *src, float *dst, int64_t n) { \
        dequant_##ID(src, dst, n);                                                    \
    }
KVQ_WQUANT(Q4_K, 256, 144)
KVQ_WQUANT(Q5_K, 256, 176)
KVQ_WQUANT(Q6_K, 256, 210)
#undef KVQ_WQUANT

/* q4_1 matvec: sum_i (d q_i + m) x_i = d (q . x) + m (sum of the block's x),
 * with the block sums of x computed once per call and shared by every row:
 * half the float work of dequantize-then-FMA, so one thread keeps up with
 * memory. Rows go in k-chunks of Q41_CHUNK blocks to bound the sums buffer. */
#define Q41_CHUNK 128

KVQ_TARGET_AVX512 static void matvec_Q4_1(const void *w, size_t row_bytes, const float *x, int64_t n,
                                          int64_t r0, int64_t r1, float *y) {
    float sx[Q41_CHUNK]; // (chunk blocks) sum of x over each block
    for (int64_t c0 = 0; c0 < n / 32; c0 += Q41_CHUNK) {
        const int64_t nb = n / 32 - c0 < Q41_CHUNK ? n / 32 - c0 : Q41_CHUNK;
        const float *xc = x + 32 * c0;
        for (int64_t i = 0; i < nb; i++)
            sx[i] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_loadu_ps(xc + 32 * i), _mm512_loadu_ps(xc + 32 * i + 16)));
        for (int64_t r = r0; r < r1; r++) {
            const uint8_t *b = (const uint8_t *)w + (size_t)r * row_bytes + (size_t)c0 * 20;
            __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0;
            float macc = 0;
            int64_t i = 0;
            for (; i + 2 <= nb; i += 2, b += 40) {
                __m512 t0 = _mm512_mul_ps(_mm512_cvtepi32_ps(nibbles_lo(b + 4)), _mm512_loadu_ps(xc + 32 * i));
                t0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(nibbles_hi(b + 4)), _mm512_loadu_ps(xc + 32 * i + 16), t0);
                __m512 t1 = _mm512_mul_ps(_mm512_cvtepi32_ps(nibbles_lo(b + 24)), _mm512_loadu_ps(xc + 32 * i + 32));
                t1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(nibbles_hi(b + 24)), _mm512_loadu_ps(xc + 32 * i + 48), t1);
                acc0 = _mm512_fmadd_ps(t0, f16_splat(b), acc0);
                acc1 = _mm512_fmadd_ps(t1, f16_splat(b + 20), acc1);
                macc += _cvtsh_ss(kvq_load_u16(b + 2)) * sx[i] + _cvtsh_ss(kvq_load_u16(b + 22)) * sx[i + 1];
            }
            if (i < nb) {
                __m512 t0 = _mm512_mul_ps(_mm512_cvtepi32_ps(nibbles_lo(b + 4)), _mm512_loadu_ps(xc + 32 * i));
                t0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(nibbles_hi(b + 4)), _mm512_loadu_ps(xc + 32 * i + 16), t0);
                acc0 = _mm512_fmadd_ps(t0, f16_splat(b), acc0);
                macc += _cvtsh_ss(kvq_load_u16(b + 2)) * sx[i];
            }
            const float part = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1)) + macc;
            y[r - r0] = c0 == 0 ? part : y[r - r0] + part;
        }
    }
}

/* Values dequantized per step of matvec (a multiple of every block size,
 * small enough to stay in L1 next to x). */
#define MV_CHUNK 256

KVQ_TARGET_AVX512 static inline float hsum(__m512 v) { return _mm512_reduce_add_ps(v); }

/* acc += a . b over len values (len a multiple of 32), two partial sums. */
KVQ_TARGET_AVX512 static inline void dot_acc(const float *a, const float *b, int64_t len,
                                             __m512 *acc0, __m512 *acc1) {
    for (int64_t k = 0; k < len; k += 32) {
        *acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + k), _mm512_loadu_ps(b + k), *acc0);
        *acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + k + 16), _mm512_loadu_ps(b + k + 16), *acc1);
    }
}

KVQ_TARGET_AVX512 void kvq_wmatvec_avx512(const kvq_wtype_traits *t, const void *w, size_t row_bytes,
                                          const float *x, int64_t n, int64_t r0, int64_t r1,
                                          float *y) {
    if (t->type == KVQ_WTYPE_Q4_1) {
        matvec_Q4_1(w, row_bytes, x, n, r0, r1, y);
        return;
    }
    const kvq_wdequant_fn dq = t->dequant_isa[KVQ_ISA_AVX512];
    _Alignas(64) float buf[MV_CHUNK]; // (chunk) one row's dequantized values
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *row = (const uint8_t *)w + (size_t)r * row_bytes;
        __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
        switch (t->type) {
        case KVQ_WTYPE_Q4_0: y[r - r0] = dot_Q4_0(row, x, n / 32); continue;
        case KVQ_WTYPE_Q5_0: y[r - r0] = dot_Q5_0(row, x, n / 32); continue;
        case KVQ_WTYPE_Q5_1: y[r - r0] = dot_Q5_1(row, x, n / 32); continue;
        case KVQ_WTYPE_Q8_0: y[r - r0] = dot_Q8_0(row, x, n / 32); continue;
        case KVQ_WTYPE_F32: dot_acc((const float *)row, x, n, &acc0, &acc1); break;
        default:
            for (int64_t k0 = 0; k0 < n; k0 += MV_CHUNK) {
                const int64_t len = n - k0 < MV_CHUNK ? n - k0 : MV_CHUNK;
                dq(row + (size_t)(k0 / t->block_size) * t->block_bytes, buf, len / t->block_size);
                dot_acc(buf, x + k0, len, &acc0, &acc1);
            }
        }
        y[r - r0] = hsum(_mm512_add_ps(acc0, acc1));
    }
}

/* Matmul register tile: MM_ROWS weight rows x MM_TOK tokens of 16-lane
 * accumulators (16 of 32 zmm). Each weight chunk is dequantized once into
 * an L1/L2-resident buffer and used by every token. */
#define MM_ROWS 4
#define MM_TOK 4
#define MM_CHUNK 1024

/* out[a][b] = w_a . x_b over len values (len a multiple of 16). */
KVQ_TARGET_AVX512 static void tile(const float *const wr[MM_ROWS], const float *const xr[MM_TOK],
                                   int64_t len, float out[MM_ROWS][MM_TOK]) {
    __m512 acc[MM_ROWS][MM_TOK];
    for (int a = 0; a < MM_ROWS; a++)
        for (int b = 0; b < MM_TOK; b++) acc[a][b] = _mm512_setzero_ps();
    for (int64_t k = 0; k < len; k += 16) {
        __m512 wv[MM_ROWS];
#pragma GCC unroll 4
        for (int a = 0; a < MM_ROWS; a++) wv[a] = _mm512_loadu_ps(wr[a] + k);
#pragma GCC unroll 4
        for (int b = 0; b < MM_TOK; b++) {
            const __m512 xv = _mm512_loadu_ps(xr[b] + k);
#pragma GCC unroll 4
            for (int a = 0; a < MM_ROWS; a++) acc[a][b] = _mm512_fmadd_ps(wv[a], xv, acc[a][b]);
        }
    }
    for (int a = 0; a < MM_ROWS; a++)
        for (int b = 0; b < MM_TOK; b++) out[a][b] = hsum(acc[a][b]);
}

KVQ_TARGET_AVX512 void kvq_wmatmul_avx512(const kvq_wtype_traits *t, const void *w, size_t row_bytes,
                                          const float *x, int64_t n_tok, int64_t n, int64_t r0,
                                          int64_t r1, float *y, int64_t ldy) {
    const kvq_wdequant_fn dq = t->dequant_isa[KVQ_ISA_AVX512];
    _Alignas(64) float buf[MM_ROWS][MM_CHUNK]; // (tile rows, chunk) dequantized weights
    for (int64_t rb = r0; rb < r1; rb += MM_ROWS) {
        const int nr = r1 - rb < MM_ROWS ? (int)(r1 - rb) : MM_ROWS;
        for (int64_t k0 = 0; k0 < n; k0 += MM_CHUNK) {
            const int64_t len = n - k0 < MM_CHUNK ? n - k0 : MM_CHUNK;
            const float *wr[MM_ROWS];
            for (int a = 0; a < MM_ROWS; a++) {
                /* Edge tiles repeat the last row and drop its results. */
                const int ra = a < nr ? a : nr - 1;
                const uint8_t *row = (const uint8_t *)w + (size_t)(rb + ra) * row_bytes +
                                     (size_t)(k0 / t->block_size) * t->block_bytes;
                if (a < nr) dq(row, buf[a], len / t->block_size);
                wr[a] = buf[ra];
            }
            for (int64_t i = 0; i < n_tok; i += MM_TOK) {
                const int nt = n_tok - i < MM_TOK ? (int)(n_tok - i) : MM_TOK;
                const float *xr[MM_TOK];
                for (int b = 0; b < MM_TOK; b++) xr[b] = x + (i + (b < nt ? b : nt - 1)) * n + k0;
                float out[MM_ROWS][MM_TOK];
                tile(wr, xr, len, out);
                for (int b = 0; b < nt; b++) {
                    float *yr = y + (i + b) * ldy + rb;
                    for (int a = 0; a < nr; a++) yr[a] = k0 == 0 ? out[a][b] : yr[a] + out[a][b];
                }
            }
        }
    }
}
#endif
