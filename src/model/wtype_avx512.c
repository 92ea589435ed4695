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

/* Per 32-value type: the dequantizer. */
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
KVQ_WBLOCK32(Q4_0, 18)
KVQ_WBLOCK32(Q4_1, 20)
KVQ_WBLOCK32(Q5_0, 22)
KVQ_WBLOCK32(Q5_1, 24)
KVQ_WBLOCK32(Q8_0, 34)
#undef KVQ_WBLOCK32

#define KVQ_WQUANT(ID, bs, bytes)                                                      \
    KVQ_WBLOCKS(ID, bs, bytes)                                                        \
    KVQ_TARGET_AVX512 void kvq_wdequant_##ID##_avx512(const void *src, float *dst, int64_t n) { \
        dequant_##ID(src, dst, n);                                                    \
    }
KVQ_WQUANT(Q4_K, 256, 144)
KVQ_WQUANT(Q5_K, 256, 176)
KVQ_WQUANT(Q6_K, 256, 210)
#undef KVQ_WQUANT

/* Fused float matvec of the 32-value block types: weights dequantized in
 * registers and FMA'd with exact float x (no activation rounding).
 * - q4_0 / q4_1 by table (below).
 * - q5_0 / q5_1 / q8_0: w[j] = d * u[j] + c with integer codes u (q5_0:
 *   c = -16 d, q5_1: c = m, q8_0: signed codes, c = 0), so
 *       w . x = d (u . x) + c (sum of the block's x):
 *   the codes are converted and FMA'd with x, one FMA by d per block, and
 *   the offset terms use block sums of x computed once per call and shared
 *   by every row (about half the float work of dequantize-then-FMA). Rows
 *   go in k-chunks of MV_CHUNK_BLOCKS blocks to bound the sums buffer. */
#define MV_CHUNK_BLOCKS 128

KVQ_TARGET_AVX512 static inline float f16_at(const uint8_t *p) { return _cvtsh_ss(kvq_load_u16(p)); }

/* Codes of values 0..15 and 16..31 of a block. */
KVQ_TARGET_AVX512 static KVQ_ALWAYS_INLINE void nib_codes(const uint8_t *qs, __m512i *u0, __m512i *u1) {
    const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)qs));
    *u0 = _mm512_and_si512(v, _mm512_set1_epi32(15));
    *u1 = _mm512_srli_epi32(v, 4);
}
KVQ_TARGET_AVX512 static KVQ_ALWAYS_INLINE void codes_Q5_0(const uint8_t *b, __m512i *u0, __m512i *u1) {
    uint32_t qh;
    memcpy(&qh, b + 2, 4);
    nib_codes(b + 6, u0, u1);
    *u0 = with_bit4(*u0, (__mmask16)qh);
    *u1 = with_bit4(*u1, (__mmask16)(qh >> 16));
}
KVQ_TARGET_AVX512 static KVQ_ALWAYS_INLINE void codes_Q5_1(const uint8_t *b, __m512i *u0, __m512i *u1) {
    uint32_t qh;
    memcpy(&qh, b + 4, 4);
    nib_codes(b + 8, u0, u1);
    *u0 = with_bit4(*u0, (__mmask16)qh);
    *u1 = with_bit4(*u1, (__mmask16)(qh >> 16));
}
KVQ_TARGET_AVX512 static KVQ_ALWAYS_INLINE void codes_Q8_0(const uint8_t *b, __m512i *u0, __m512i *u1) {
    *u0 = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b + 2)));
    *u1 = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b + 18)));
}
#define off_Q5_0(blk) (-16.0f * f16_at(blk))
#define off_Q5_1(blk) f16_at((blk) + 2)

/* acc + d * (u . x) for the block at b, x0/x1 its 32 values of x. */
#define KVQ_WFUSED_STEP(ID)                                                                          \
    KVQ_TARGET_AVX512 static KVQ_ALWAYS_INLINE __m512 fstep_##ID(const uint8_t *b, __m512 x0, __m512 x1, \
                                                                 __m512 acc) {                       \
        __m512i u0, u1;                                                                              \
        codes_##ID(b, &u0, &u1);                                                                     \
        const __m512 t = _mm512_mul_ps(_mm512_cvtepi32_ps(u0), x0);                                  \
        return _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_cvtepi32_ps(u1), x1, t), f16_splat(b), acc);   \
    }
KVQ_WFUSED_STEP(Q5_0)
KVQ_WFUSED_STEP(Q5_1)
KVQ_WFUSED_STEP(Q8_0)
#undef KVQ_WFUSED_STEP

/* Two rows at a time share every load of x and its block sums; per row
 * two vector accumulators (even / odd blocks) and one scalar one. An odd
 * last row pairs with itself and is written once. */
#define KVQ_WFUSED_MV(ID, BYTES)                                                                     \
    KVQ_TARGET_AVX512 static void fmatvec_##ID(const void *w, size_t row_bytes, const float *x, int64_t n, \
                                               int64_t r0, int64_t r1, float *y) {                  \
        float sx[MV_CHUNK_BLOCKS]; /* (chunk blocks) sum of x over each block */                    \
        for (int64_t c0 = 0; c0 < n / 32; c0 += MV_CHUNK_BLOCKS) {                                   \
            const int64_t nb = n / 32 - c0 < MV_CHUNK_BLOCKS ? n / 32 - c0 : MV_CHUNK_BLOCKS;        \
            const float *xc = x + 32 * c0;                                                           \
            for (int64_t i = 0; i < nb; i++)                                                         \
                sx[i] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_loadu_ps(xc + 32 * i),            \
                                                           _mm512_loadu_ps(xc + 32 * i + 16)));     \
            for (int64_t r = r0; r < r1; r += 2) {                                                   \
                const int two = r + 1 < r1;                                                          \
                const uint8_t *a = (const uint8_t *)w + (size_t)r * row_bytes + (size_t)c0 * (BYTES); \
                const uint8_t *b = two ? a + row_bytes : a;                                          \
                __m512 aa0 = _mm512_setzero_ps(), aa1 = aa0, ab0 = aa0, ab1 = aa0;                   \
                float oa = 0, ob = 0;                                                                \
                int64_t i = 0;                                                                       \
                for (; i + 2 <= nb; i += 2) {                                                        \
                    const float *xb = xc + 32 * i;                                                   \
                    const __m512 x0 = _mm512_loadu_ps(xb), x1 = _mm512_loadu_ps(xb + 16);            \
                    const __m512 x2 = _mm512_loadu_ps(xb + 32), x3 = _mm512_loadu_ps(xb + 48);       \
                    const uint8_t *pa = a + i * (BYTES), *pb = b + i * (BYTES);                      \
                    aa0 = fstep_##ID(pa, x0, x1, aa0);                                               \
                    ab0 = fstep_##ID(pb, x0, x1, ab0);                                               \
                    aa1 = fstep_##ID(pa + (BYTES), x2, x3, aa1);                                     \
                    ab1 = fstep_##ID(pb + (BYTES), x2, x3, ab1);                                     \
                    oa += off_##ID(pa) * sx[i] + off_##ID(pa + (BYTES)) * sx[i + 1];                 \
                    ob += off_##ID(pb) * sx[i] + off_##ID(pb + (BYTES)) * sx[i + 1];                 \
                }                                                                                    \
                if (i < nb) {                                                                        \
                    const __m512 x0 = _mm512_loadu_ps(xc + 32 * i), x1 = _mm512_loadu_ps(xc + 32 * i + 16); \
                    aa0 = fstep_##ID(a + i * (BYTES), x0, x1, aa0);                                  \
                    ab0 = fstep_##ID(b + i * (BYTES), x0, x1, ab0);                                  \
                    oa += off_##ID(a + i * (BYTES)) * sx[i];                                         \
                    ob += off_##ID(b + i * (BYTES)) * sx[i];                                         \
                }                                                                                    \
                const float pa = _mm512_reduce_add_ps(_mm512_add_ps(aa0, aa1)) + oa;                 \
                y[r - r0] = c0 == 0 ? pa : y[r - r0] + pa;                                           \
                if (two) {                                                                           \
                    const float pb = _mm512_reduce_add_ps(_mm512_add_ps(ab0, ab1)) + ob;             \
                    y[r + 1 - r0] = c0 == 0 ? pb : y[r + 1 - r0] + pb;                               \
                }                                                                                    \
            }                                                                                        \
        }                                                                                            \
    }
KVQ_WFUSED_MV(Q5_0, 22)
KVQ_WFUSED_MV(Q5_1, 24)
#undef KVQ_WFUSED_MV

/* 4-bit types by table: vpermps picks lut[code] from a 16-entry table of
 * the block's dequantized values (lut[j] = d j + m, q4_0: d (j - 8), the
 * reference's bits: d j is exact in float), reading only the low 4 bits of
 * each index, so the low nibbles need no mask and no conversion. Two rows
 * at a time share the loads of x. */
static const float iota16[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

KVQ_TARGET_AVX512 static KVQ_ALWAYS_INLINE __m512 lut_Q4_0(const uint8_t *b, __m512 iota) {
    return _mm512_mul_ps(_mm512_sub_ps(iota, _mm512_set1_ps(8.0f)), f16_splat(b));
}
KVQ_TARGET_AVX512 static KVQ_ALWAYS_INLINE __m512 lut_Q4_1(const uint8_t *b, __m512 iota) {
    return _mm512_fmadd_ps(iota, f16_splat(b), f16_splat(b + 2));
}

#define KVQ_WLUT_MV(ID, BYTES, QS)                                                                   \
    KVQ_TARGET_AVX512 static KVQ_ALWAYS_INLINE __m512 lstep_##ID(const uint8_t *b, __m512 iota, __m512 x0, \
                                                                 __m512 x1, __m512 acc) {            \
        const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(b + (QS))));        \
        const __m512 lut = lut_##ID(b, iota);                                                        \
        acc = _mm512_fmadd_ps(_mm512_permutexvar_ps(v, lut), x0, acc);                               \
        return _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), lut), x1, acc);        \
    }                                                                                                \
    KVQ_TARGET_AVX512 static void lmatvec_##ID(const void *w, size_t row_bytes, const float *x, int64_t n, \
                                               int64_t r0, int64_t r1, float *y) {                  \
        const int64_t nb = n / 32;                                                                   \
        const __m512 iota = _mm512_loadu_ps(iota16);                                                 \
        for (int64_t r = r0; r < r1; r += 2) {                                                       \
            const int two = r + 1 < r1;                                                              \
            const uint8_t *a = (const uint8_t *)w + (size_t)r * row_bytes, *b = two ? a + row_bytes : a; \
            __m512 aa0 = _mm512_setzero_ps(), aa1 = aa0, ab0 = aa0, ab1 = aa0;                       \
            int64_t i = 0;                                                                           \
            for (; i + 2 <= nb; i += 2) {                                                            \
                const float *xb = x + 32 * i;                                                        \
                const __m512 x0 = _mm512_loadu_ps(xb), x1 = _mm512_loadu_ps(xb + 16);                \
                const __m512 x2 = _mm512_loadu_ps(xb + 32), x3 = _mm512_loadu_ps(xb + 48);           \
                aa0 = lstep_##ID(a + i * (BYTES), iota, x0, x1, aa0);                                \
                ab0 = lstep_##ID(b + i * (BYTES), iota, x0, x1, ab0);                                \
                aa1 = lstep_##ID(a + (i + 1) * (BYTES), iota, x2, x3, aa1);                          \
                ab1 = lstep_##ID(b + (i + 1) * (BYTES), iota, x2, x3, ab1);                          \
            }                                                                                        \
            if (i < nb) {                                                                            \
                const __m512 x0 = _mm512_loadu_ps(x + 32 * i), x1 = _mm512_loadu_ps(x + 32 * i + 16); \
                aa0 = lstep_##ID(a + i * (BYTES), iota, x0, x1, aa0);                                \
                ab0 = lstep_##ID(b + i * (BYTES), iota, x0, x1, ab0);                                \
            }                                                                                        \
            y[r - r0] = _mm512_reduce_add_ps(_mm512_add_ps(aa0, aa1));                               \
            if (two) y[r + 1 - r0] = _mm512_reduce_add_ps(_mm512_add_ps(ab0, ab1));                  \
        }                                                                                            \
    }
KVQ_WLUT_MV(Q4_0, 18, 2)
KVQ_WLUT_MV(Q4_1, 20, 4)
#undef KVQ_WLUT_MV

/* q8_0 has no offset term: two rows sharing x, two blocks per step. */
KVQ_TARGET_AVX512 static void fmatvec_Q8_0(const void *w, size_t row_bytes, const float *x, int64_t n,
                                           int64_t r0, int64_t r1, float *y) {
    const int64_t nb = n / 32;
    for (int64_t r = r0; r < r1; r += 2) {
        const int two = r + 1 < r1;
        const uint8_t *a = (const uint8_t *)w + (size_t)r * row_bytes, *b = two ? a + row_bytes : a;
        __m512 aa0 = _mm512_setzero_ps(), aa1 = aa0, ab0 = aa0, ab1 = aa0;
        int64_t i = 0;
        for (; i + 2 <= nb; i += 2) {
            const float *xb = x + 32 * i;
            const __m512 x0 = _mm512_loadu_ps(xb), x1 = _mm512_loadu_ps(xb + 16);
            const __m512 x2 = _mm512_loadu_ps(xb + 32), x3 = _mm512_loadu_ps(xb + 48);
            aa0 = fstep_Q8_0(a + i * 34, x0, x1, aa0);
            ab0 = fstep_Q8_0(b + i * 34, x0, x1, ab0);
            aa1 = fstep_Q8_0(a + i * 34 + 34, x2, x3, aa1);
            ab1 = fstep_Q8_0(b + i * 34 + 34, x2, x3, ab1);
        }
        if (i < nb) {
            const __m512 x0 = _mm512_loadu_ps(x + 32 * i), x1 = _mm512_loadu_ps(x + 32 * i + 16);
            aa0 = fstep_Q8_0(a + i * 34, x0, x1, aa0);
            ab0 = fstep_Q8_0(b + i * 34, x0, x1, ab0);
        }
        y[r - r0] = _mm512_reduce_add_ps(_mm512_add_ps(aa0, aa1));
        if (two) y[r + 1 - r0] = _mm512_reduce_add_ps(_mm512_add_ps(ab0, ab1));
    }
}

/* Values dequantized per step of matvec for the other types (a multiple of
 * every block size, small enough to stay in L1 next to x). */
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
    switch (t->type) {
    case KVQ_WTYPE_Q4_0: lmatvec_Q4_0(w, row_bytes, x, n, r0, r1, y); return;
    case KVQ_WTYPE_Q4_1: lmatvec_Q4_1(w, row_bytes, x, n, r0, r1, y); return;
    case KVQ_WTYPE_Q5_0: fmatvec_Q5_0(w, row_bytes, x, n, r0, r1, y); return;
    case KVQ_WTYPE_Q5_1: fmatvec_Q5_1(w, row_bytes, x, n, r0, r1, y); return;
    case KVQ_WTYPE_Q8_0: fmatvec_Q8_0(w, row_bytes, x, n, r0, r1, y); return;
    }
    const kvq_wdequant_fn dq = t->dequant_isa[KVQ_ISA_AVX512];
    _Alignas(64) float buf[MV_CHUNK]; // (chunk) one row's dequantized values
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *row = (const uint8_t *)w + (size_t)r * row_bytes;
        __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
        if (t->type == KVQ_WTYPE_F32) {
            dot_acc((const float *)row, x, n, &acc0, &acc1);
        } else {
            for (int64_t k0 = 0; k0 < n; k0 += MV_CHUNK) {
                const int64_t len = n - k0 < MV_CHUNK ? n - k0 : MV_CHUNK;
                dq(row + (size_t)(k0 / t->block_size) * t->block_bytes, buf, len / t->block_size);
                dot_acc(buf, x + k0, len, &acc0, &acc1);
            }
        }
        y[r - r0] = hsum(_mm512_add_ps(acc0, acc1));
    }
}

/* 16 vectors -> one: lane 4 L + q holds the sum of v[4 q + L]. */
KVQ_TARGET_AVX512 static inline __m512 reduce16(const __m512 v[16]) {
    __m512 w[8], z[4];
    for (int k = 0; k < 8; k++)
        w[k] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], 0x44),
                             _mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], 0xEE));
    for (int k = 0; k < 4; k++)
        z[k] = _mm512_add_ps(_mm512_shuffle_f32x4(w[2 * k], w[2 * k + 1], 0x88),
                             _mm512_shuffle_f32x4(w[2 * k], w[2 * k + 1], 0xDD));
    const __m512 t0 = _mm512_add_ps(_mm512_unpacklo_ps(z[0], z[1]), _mm512_unpackhi_ps(z[0], z[1]));
    const __m512 t1 = _mm512_add_ps(_mm512_unpacklo_ps(z[2], z[3]), _mm512_unpackhi_ps(z[2], z[3]));
    return _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t0), _mm512_castps_pd(t1))),
                         _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t0), _mm512_castps_pd(t1))));
}

/* Matmul register tile: MM_ROWS weight rows x MM_TOK tokens of 16-lane
 * accumulators (16 of 32 zmm). Each weight chunk is dequantized once per
 * block of MM_TB tokens into an L1-resident buffer and used by each of
 * them; the block's x chunk (MM_TB tokens x at most MM_CHUNK floats, 512
 * KiB) stays in L2 while every row tile passes over it. Chunks are equal
 * (1536 = 2 x 768): a short last one pays a whole tile's reduction for
 * few products. Without the token blocks every
 * row tile streamed all of x (1.2-3 MB at 512 tokens) from L3, and two
 * threads doing so contended there. */
#define MM_ROWS 4
#define MM_TOK 4
#define MM_CHUNK 1024
#define MM_TB 128

/* Sums of w_a . x_b over len values (len a multiple of 16): lane 4 b + a
 * (reduce16: no per-accumulator horizontal sums). */
KVQ_TARGET_AVX512 static __m512 tile(const float *const wr[MM_ROWS], const float *const xr[MM_TOK], int64_t len) {
    __m512 acc[MM_ROWS * MM_TOK];
    /* Unrolled, or GCC zeroes the array with rep stos (5% of a prefill). */
#pragma GCC unroll 16
    for (int j = 0; j < MM_ROWS * MM_TOK; j++) acc[j] = _mm512_setzero_ps();
    for (int64_t k = 0; k < len; k += 16) {
        __m512 wv[MM_ROWS];
#pragma GCC unroll 4
        for (int a = 0; a < MM_ROWS; a++) wv[a] = _mm512_loadu_ps(wr[a] + k);
#pragma GCC unroll 4
        for (int b = 0; b < MM_TOK; b++) {
            const __m512 xv = _mm512_loadu_ps(xr[b] + k);
#pragma GCC unroll 4
            for (int a = 0; a < MM_ROWS; a++) acc[a * MM_TOK + b] = _mm512_fmadd_ps(wv[a], xv, acc[a * MM_TOK + b]);
        }
    }
    return reduce16(acc);
}

KVQ_TARGET_AVX512 void kvq_wmatmul_avx512(const kvq_wtype_traits *t, const void *w, size_t row_bytes,
                                          const float *x, int64_t n_tok, int64_t n, int64_t r0,
                                          int64_t r1, float *y, int64_t ldy) {
    const kvq_wdequant_fn dq = t->dequant_isa[KVQ_ISA_AVX512];
    _Alignas(64) float buf[MM_ROWS][MM_CHUNK]; // (tile rows, chunk) dequantized weights
    const int64_t unit = t->block_size > 32 ? t->block_size : 32, n_chunks = (n + MM_CHUNK - 1) / MM_CHUNK;
    int64_t chunk = (n + n_chunks - 1) / n_chunks;
    chunk = (chunk + unit - 1) / unit * unit;
    if (chunk > MM_CHUNK) chunk = MM_CHUNK;
    for (int64_t tb = 0; tb < n_tok; tb += MM_TB) {
        const int64_t te = n_tok - tb < MM_TB ? n_tok : tb + MM_TB;
        for (int64_t k0 = 0; k0 < n; k0 += chunk) {
            const int64_t len = n - k0 < chunk ? n - k0 : chunk;
            for (int64_t rb = r0; rb < r1; rb += MM_ROWS) {
                const int nr = r1 - rb < MM_ROWS ? (int)(r1 - rb) : MM_ROWS;
                const __mmask16 rows = (__mmask16)((1u << nr) - 1);
                const float *wr[MM_ROWS];
                kvq_wmatmul_dequant_tile(t, dq, w, row_bytes, rb, nr, MM_ROWS, k0, len, &buf[0][0], MM_CHUNK, wr);
                for (int64_t i = tb; i < te; i += MM_TOK) {
                    const int nt = te - i < MM_TOK ? (int)(te - i) : MM_TOK;
                    const float *xr[MM_TOK];
                    for (int b = 0; b < MM_TOK; b++) xr[b] = x + (i + (b < nt ? b : nt - 1)) * n + k0;
                    _Alignas(64) float out[MM_TOK * MM_ROWS]; // (tokens, rows)
                    _mm512_store_ps(out, tile(wr, xr, len));
                    for (int b = 0; b < nt; b++) {
                        float *yr = y + (i + b) * ldy + rb;
                        __m128 o = _mm_load_ps(out + MM_ROWS * b);
                        if (k0) o = _mm_add_ps(o, _mm_maskz_loadu_ps(rows, yr));
                        _mm_mask_storeu_ps(yr, rows, o);
                    }
                }
            }
        }
    }
}
/* ------------------------------------------------------- integer route
 * x prepared as int8 blocks of 32 (kvq_wxq). A pair of weight blocks a, b
 * becomes one vector of 64 unsigned codes u (a's 32 then b's) with, per
 * block, a scale dw and an offset coefficient c such that
 *     w[j] = dw * u[j] + c          (q8_0 in matvec: w = dw * signed code),
 * so w . x^ = dw dx (u . q) + c s, with s = dx * sum(q) from the prep.
 * u . q is exact in int32 (vpdpbusd, or vpmaddubsw + vpmaddwd: no
 * saturation, |u| <= 31 or 128 against |q| <= 127): lanes 0-7 hold block
 * a's partial sums, lanes 8-15 block b's. */

KVQ_TARGET_AVX512 void kvq_wquantize_x_avx512(const float *x, int64_t n, int8_t *q, float *d, float *s) {
    const __m512 sign = _mm512_set1_ps(-0.0f);
    for (int64_t b = 0; b < n / 32; b++) {
        const __m512 x0 = _mm512_loadu_ps(x + 32 * b), x1 = _mm512_loadu_ps(x + 32 * b + 16);
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_andnot_ps(sign, x0), _mm512_andnot_ps(sign, x1)));
        const float db = amax / 127.0f, id = db != 0.0f ? 1.0f / db : 0.0f;
        const __m512 vid = _mm512_set1_ps(id);
        const __m512i q0 = _mm512_cvtps_epi32(_mm512_roundscale_ps(_mm512_mul_ps(x0, vid), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        const __m512i q1 = _mm512_cvtps_epi32(_mm512_roundscale_ps(_mm512_mul_ps(x1, vid), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        _mm_storeu_si128((__m128i *)(q + 32 * b), _mm512_cvtepi32_epi8(q0));
        _mm_storeu_si128((__m128i *)(q + 32 * b + 16), _mm512_cvtepi32_epi8(q1));
        d[b] = db;
        s[b] = db * (float)_mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
    }
}

/* 64 nibble codes of two 4-bit blocks: [a lo, a hi, b lo, b hi]. */
KVQ_TARGET_AVX512 static inline __m512i nib_pair(const uint8_t *qa, const uint8_t *qb) {
    const __m256i ab = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)qa)),
                                               _mm_loadu_si128((const __m128i *)qb), 1);
    const __m512i v = _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 1, 0, 1, 2, 3, 2, 3), _mm512_castsi256_si512(ab));
    return _mm512_and_si512(_mm512_srlv_epi64(v, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4)), _mm512_set1_epi8(15));
}

/* The fifth bits of q5_0/q5_1 (bit j of qh is value j's). */
KVQ_TARGET_AVX512 static inline __m512i bit4_pair(__m512i u, const uint8_t *ha, const uint8_t *hb) {
    uint32_t a, b;
    memcpy(&a, ha, 4), memcpy(&b, hb, 4);
    return _mm512_mask_add_epi8(u, (__mmask64)a | (__mmask64)b << 32, u, _mm512_set1_epi8(16));
}

/* Per type: codes of the pair (a, b) for the matvec (q8_0: |w|, with the
 * signs moved onto x), codes for the matmul (q8_0: w + 128, keeping x as
 * is so one x vector serves every row), and the offset coefficient c. */
KVQ_TARGET_AVX512 static inline __m512i mv_codes_Q4_0(const uint8_t *a, const uint8_t *b, __m512i *xv) {
    (void)xv;
    return nib_pair(a + 2, b + 2);
}
KVQ_TARGET_AVX512 static inline __m512i mv_codes_Q4_1(const uint8_t *a, const uint8_t *b, __m512i *xv) {
    (void)xv;
    return nib_pair(a + 4, b + 4);
}
KVQ_TARGET_AVX512 static inline __m512i mv_codes_Q5_0(const uint8_t *a, const uint8_t *b, __m512i *xv) {
    (void)xv;
    return bit4_pair(nib_pair(a + 6, b + 6), a + 2, b + 2);
}
KVQ_TARGET_AVX512 static inline __m512i mv_codes_Q5_1(const uint8_t *a, const uint8_t *b, __m512i *xv) {
    (void)xv;
    return bit4_pair(nib_pair(a + 8, b + 8), a + 4, b + 4);
}
KVQ_TARGET_AVX512 static inline __m512i q8_pair(const uint8_t *a, const uint8_t *b) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(a + 2))),
                              _mm256_loadu_si256((const __m256i *)(b + 2)), 1);
}
KVQ_TARGET_AVX512 static inline __m512i mv_codes_Q8_0(const uint8_t *a, const uint8_t *b, __m512i *xv) {
    const __m512i w = q8_pair(a, b);
    *xv = _mm512_mask_sub_epi8(*xv, _mm512_movepi8_mask(w), _mm512_setzero_si512(), *xv);
    return _mm512_abs_epi8(w);
}
#define mm_codes_Q4_0(a, b) mv_codes_Q4_0(a, b, NULL)
#define mm_codes_Q4_1(a, b) mv_codes_Q4_1(a, b, NULL)
#define mm_codes_Q5_0(a, b) mv_codes_Q5_0(a, b, NULL)
#define mm_codes_Q5_1(a, b) mv_codes_Q5_1(a, b, NULL)
#define mm_codes_Q8_0(a, b) _mm512_xor_si512(q8_pair(a, b), _mm512_set1_epi8((char)0x80))
#define mv_off_Q4_0(blk, dw) (-8.0f * (dw))
#define mv_off_Q4_1(blk, dw) f16_at((blk) + 2)
#define mv_off_Q5_0(blk, dw) (-16.0f * (dw))
#define mv_off_Q5_1(blk, dw) f16_at((blk) + 2)
#define mv_off_Q8_0(blk, dw) 0.0f
#define mm_off_Q4_0 mv_off_Q4_0
#define mm_off_Q4_1 mv_off_Q4_1
#define mm_off_Q5_0 mv_off_Q5_0
#define mm_off_Q5_1 mv_off_Q5_1
#define mm_off_Q8_0(blk, dw) (-128.0f * (dw))

KVQ_TARGET_AVX512 static inline __m512i dp_bw(__m512i u, __m512i q) {
    return _mm512_madd_epi16(_mm512_maddubs_epi16(u, q), _mm512_set1_epi16(1));
}
KVQ_TARGET_AVX512VNNI static inline __m512i dp_vnni(__m512i u, __m512i q) {
    return _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, q);
}

/* Two lanes-halves: a in lanes 0-7, b in lanes 8-15. */
KVQ_TARGET_AVX512 static inline __m512 halves(float a, float b) {
    return _mm512_insertf32x8(_mm512_set1_ps(a), _mm256_set1_ps(b), 1);
}

/* Matvec row dot: pairs of blocks, two vector accumulators, two scalar
 * ones for the offset terms; an odd last block pairs with itself at zero
 * scale and zero x. */
#define KVQ_WMVQ(ID, BYTES, TGT, DP, SUF)                                                        \
    TGT static KVQ_ALWAYS_INLINE __m512 mvq_step_##ID##SUF(const uint8_t *a, const kvq_wxq *xq, int64_t i, \
                                                           int two, __m512 acc, float *off) {          \
        const uint8_t *b = two ? a + (BYTES) : a;                                                 \
        __m512i xv = _mm512_maskz_loadu_epi8(two ? ~(__mmask64)0 : 0xFFFFFFFFull, xq->q + 32 * i); \
        const __m512i u = mv_codes_##ID(a, b, &xv);                                                \
        const float da = f16_at(a), db = two ? f16_at(b) : 0.0f;                                   \
        *off += mv_off_##ID(a, da) * xq->s[i] + (two ? mv_off_##ID(b, db) * xq->s[i + 1] : 0.0f);  \
        const __m512 sc = halves(da * xq->d[i], two ? db * xq->d[i + 1] : 0.0f);                   \
        return _mm512_fmadd_ps(_mm512_cvtepi32_ps(DP(u, xv)), sc, acc);                            \
    }                                                                                             \
    TGT static void mvq_##ID##SUF(const void *w, size_t rb, const kvq_wxq *xq, int64_t n, int64_t r0, \
                                  int64_t r1, float *y) {                                         \
        const int64_t nb = n / 32;                                                                \
        for (int64_t r = r0; r < r1; r++) {                                                       \
            const uint8_t *row = (const uint8_t *)w + (size_t)r * rb;                             \
            __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0;                                       \
            float off0 = 0, off1 = 0;                                                             \
            int64_t i = 0;                                                                        \
            for (; i + 4 <= nb; i += 4) {                                                         \
                acc0 = mvq_step_##ID##SUF(row + i * (BYTES), xq, i, 1, acc0, &off0);              \
                acc1 = mvq_step_##ID##SUF(row + (i + 2) * (BYTES), xq, i + 2, 1, acc1, &off1);    \
            }                                                                                     \
            if (i + 2 <= nb) {                                                                    \
                acc0 = mvq_step_##ID##SUF(row + i * (BYTES), xq, i, 1, acc0, &off0);              \
                i += 2;                                                                           \
            }                                                                                     \
            if (i < nb) acc1 = mvq_step_##ID##SUF(row + i * (BYTES), xq, i, 0, acc1, &off1);      \
            y[r - r0] = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1)) + (off0 + off1);          \
        }                                                                                         \
    }
#define KVQ_WMVQ_ALL(TGT, DP, SUF)                                                               \
    KVQ_WMVQ(Q4_0, 18, TGT, DP, SUF)                                                              \
    KVQ_WMVQ(Q4_1, 20, TGT, DP, SUF)                                                              \
    KVQ_WMVQ(Q5_0, 22, TGT, DP, SUF)                                                              \
    KVQ_WMVQ(Q5_1, 24, TGT, DP, SUF)                                                              \
    KVQ_WMVQ(Q8_0, 34, TGT, DP, SUF)                                                              \
    TGT void kvq_wmatvec_q_avx512##SUF(const kvq_wtype_traits *t, const void *w, size_t row_bytes, \
                                       const kvq_wxq *xq, int64_t n, int64_t r0, int64_t r1, float *y) { \
        switch (t->type) {                                                                        \
        case KVQ_WTYPE_Q4_0: mvq_Q4_0##SUF(w, row_bytes, xq, n, r0, r1, y); break;                \
        case KVQ_WTYPE_Q4_1: mvq_Q4_1##SUF(w, row_bytes, xq, n, r0, r1, y); break;                \
        case KVQ_WTYPE_Q5_0: mvq_Q5_0##SUF(w, row_bytes, xq, n, r0, r1, y); break;                \
        case KVQ_WTYPE_Q5_1: mvq_Q5_1##SUF(w, row_bytes, xq, n, r0, r1, y); break;                \
        case KVQ_WTYPE_Q8_0: mvq_Q8_0##SUF(w, row_bytes, xq, n, r0, r1, y); break;                \
        }                                                                                         \
    }
KVQ_WMVQ_ALL(KVQ_TARGET_AVX512, dp_bw, bw)
KVQ_WMVQ_ALL(KVQ_TARGET_AVX512VNNI, dp_vnni, vnni)
#undef KVQ_WMVQ_ALL
#undef KVQ_WMVQ

void kvq_wmatvec_q_avx512(const kvq_wtype_traits *t, const void *w, size_t row_bytes, const kvq_wxq *xq,
                          int64_t n, int64_t r0, int64_t r1, float *y) {
    if (kvq_cpu_has_vnni()) kvq_wmatvec_q_avx512vnni(t, w, row_bytes, xq, n, r0, r1, y);
    else kvq_wmatvec_q_avx512bw(t, w, row_bytes, xq, n, r0, r1, y);
}

/* ------------------------------------------------------- int16 route
 * x as e (256 h + l) (kvq_wx16), y += sum_b dw_b e_b (256 u.h + u.l)_b
 * + c_b s_b. q4/q5 rows go in groups of 4 blocks: one permute packs
 * their 64 code bytes, mask and shift split them into values 0-15 and
 * 16-31 of each block (x's g layout), 4 vpdpbusd give lanes 4j..4j+3 of
 * block j's integer sums, and one more permute of the same loads spreads
 * each block's fp16 d (and m) over its lanes, so scales and offsets are
 * per-lane vector work (x's per-lane e and s). q8_0 goes in pairs of
 * blocks (lanes 0-7, 8-15), codes w + 128 against signed x, c = -128 dw.
 * A partial last group is masked loads: zero codes and zero scales. */

KVQ_TARGET_AVX512 void kvq_wquantize_x16_avx512(const float *x, int64_t n, int8_t *h, int8_t *l, float *e, float *s) {
    const __m512 sign = _mm512_set1_ps(-0.0f), hi_lim = _mm512_set1_ps(127.0f), lo_lim = _mm512_set1_ps(-127.0f);
    for (int64_t b = 0; b < n / 32; b++) {
        const __m512 xv[2] = {_mm512_loadu_ps(x + 32 * b), _mm512_loadu_ps(x + 32 * b + 16)};
        const float amax =
            _mm512_reduce_max_ps(_mm512_max_ps(_mm512_andnot_ps(sign, xv[0]), _mm512_andnot_ps(sign, xv[1])));
        const float db = amax / 127.0f, id = db != 0.0f ? 1.0f / db : 0.0f, eb = db / 256.0f;
        const __m512 vd = _mm512_set1_ps(db), vid = _mm512_set1_ps(id), vie = _mm512_set1_ps(id * 256.0f);
        __m512i acc = _mm512_setzero_si512();
        for (int j = 0; j < 2; j++) {
            const __m512 hv = _mm512_roundscale_ps(_mm512_mul_ps(xv[j], vid), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            __m512 lv = _mm512_mul_ps(_mm512_sub_ps(xv[j], _mm512_mul_ps(vd, hv)), vie);
            lv = _mm512_roundscale_ps(lv, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            lv = _mm512_min_ps(_mm512_max_ps(lv, lo_lim), hi_lim);
            const __m512i hi = _mm512_cvtps_epi32(hv), li = _mm512_cvtps_epi32(lv);
            acc = _mm512_add_epi32(acc, _mm512_add_epi32(_mm512_slli_epi32(hi, 8), li));
            _mm_storeu_si128((__m128i *)(h + 32 * b + 16 * j), _mm512_cvtepi32_epi8(hi));
            _mm_storeu_si128((__m128i *)(l + 32 * b + 16 * j), _mm512_cvtepi32_epi8(li));
        }
        e[b] = eb;
        s[b] = eb * (float)_mm512_reduce_add_epi32(acc);
    }
}

/* Decode reads each weight once, straight from memory, and the kernel's
 * work per byte left the hardware prefetchers too few misses in flight:
 * fetching the rows X16_PREFETCH bytes ahead as each row starts took the
 * model's matvecs from 7.6 to 6.3 ms per token at 2 threads (1 thread
 * 13.5 -> 10.8; 1.5 to 8 KiB ahead all within noise of each other).
 * Prefetches past the matrix are harmless (they never fault). */
#define X16_PREFETCH 3072
KVQ_TARGET_AVX512 static KVQ_ALWAYS_INLINE void x16_prefetch(const uint8_t *row, size_t bytes) {
    for (size_t o = 0; o < bytes; o += 64) _mm_prefetch((const char *)row + X16_PREFETCH + o, _MM_HINT_T0);
}

/* Loads the first nbytes (0..128) of p as two vectors, zero past them. */
KVQ_TARGET_AVX512 static KVQ_ALWAYS_INLINE void load_upto128(const uint8_t *p, int nbytes, __m512i *a, __m512i *b) {
    const __mmask64 ma = nbytes >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << nbytes) - 1;
    const int nb2 = nbytes - 64;
    const __mmask64 mb = nb2 <= 0 ? 0 : nb2 >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << nb2) - 1;
    *a = _mm512_maskz_loadu_epi8(ma, p);
    *b = mb ? _mm512_maskz_loadu_epi8(mb, p + 64) : _mm512_setzero_si512();
}

/* Word indices into (a, b) of a group of 4 blocks of BYTES bytes whose
 * codes start at byte QS: codes (8 words per block), then the fp16 d of
 * each lane's block (lanes 4j..4j+3: block j) and its m (word 1). */
KVQ_TARGET_AVX512 static KVQ_ALWAYS_INLINE __m512i x16_code_idx(int bytes, int qs) {
    _Alignas(64) int16_t ix[32];
    for (int j = 0; j < 4; j++)
        for (int k = 0; k < 8; k++) ix[8 * j + k] = (int16_t)((bytes * j + qs) / 2 + k);
    return _mm512_load_si512(ix);
}
KVQ_TARGET_AVX512 static KVQ_ALWAYS_INLINE __m512i x16_code_idx32(int bytes, int qs) {
    _Alignas(64) int32_t ix[16];
    for (int j = 0; j < 4; j++)
        for (int k = 0; k < 4; k++) ix[4 * j + k] = (bytes * j + qs) / 4 + k;
    return _mm512_load_si512(ix);
}
KVQ_TARGET_AVX512 static KVQ_ALWAYS_INLINE __m512i x16_head_idx(int bytes) {
    _Alignas(64) int16_t ix[32];
    for (int k = 0; k < 16; k++) ix[k] = (int16_t)(bytes / 2 * (k / 4)), ix[16 + k] = (int16_t)(ix[k] + 1);
    return _mm512_load_si512(ix);
}

/* The fifth bits of a q5 group: bit k of block j's qh (at qh_off) adds 16
 * to code k of its low half (k < 16) or code k - 16 of its high half. */
KVQ_TARGET_AVX512 static KVQ_ALWAYS_INLINE void x16_bit4(const uint8_t *p, int kg, int bytes, int qh_off,
                                                       __m512i *lo, __m512i *hi) {
    uint64_t ml = 0, mh = 0;
    for (int j = 0; j < kg; j++) {
        uint32_t qh;
        memcpy(&qh, p + j * bytes + qh_off, 4);
        ml |= (uint64_t)(qh & 0xFFFF) << (16 * j);
        mh |= (uint64_t)(qh >> 16) << (16 * j);
    }
    const __m512i sixteen = _mm512_set1_epi8(16);
    *lo = _mm512_mask_add_epi8(*lo, (__mmask64)ml, *lo, sixteen);
    *hi = _mm512_mask_add_epi8(*hi, (__mmask64)mh, *hi, sixteen);
}

/* 256 (lo . xh_lo + hi . xh_hi) + lo . xl_lo + hi . xl_hi as floats
 * (exact below 2^24 per lane): x's four code vectors at xg. */
KVQ_TARGET_AVX512VNNI static KVQ_ALWAYS_INLINE __m512 x16_dot(__m512i lo, __m512i hi, const uint8_t *xg) {
    __m512i acc = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, _mm512_load_si512(xg));
    acc = _mm512_slli_epi32(_mm512_dpbusd_epi32(acc, hi, _mm512_load_si512(xg + 64)), 8);
    acc = _mm512_dpbusd_epi32(acc, lo, _mm512_load_si512(xg + 128));
    return _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(acc, hi, _mm512_load_si512(xg + 192)));
}

/* fp16 d (and m) of each lane's block (lanes 4j..4j+3: block j) of a
 * group of 4 blocks loaded as (a, b). q4_1/q5_1: the dwords (d, m) at
 * block starts are dword-aligned, so one dword permute, one conversion of
 * 8 halves and two float permutes; q4_0/q5_0: one word permute. */
KVQ_TARGET_AVX512 static KVQ_ALWAYS_INLINE __m512 x16_dm(__m512i a, __m512i b, int bytes, __m512 *m) {
    const __m512i h4 = _mm512_permutex2var_epi32(
        a, _mm512_setr_epi32(0, bytes / 4, 2 * bytes / 4, 3 * bytes / 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), b);
    const __m512 f = _mm512_castps256_ps512(_mm256_cvtph_ps(_mm512_castsi512_si128(h4)));
    *m = _mm512_permutexvar_ps(_mm512_setr_epi32(1, 1, 1, 1, 3, 3, 3, 3, 5, 5, 5, 5, 7, 7, 7, 7), f);
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2, 4, 4, 4, 4, 6, 6, 6, 6), f);
}
KVQ_TARGET_AVX512 static KVQ_ALWAYS_INLINE __m512 x16_d(__m512i a, __m512i b, int bytes) {
    return _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutex2var_epi16(a, x16_head_idx(bytes), b)));
}

/* acc + the kg (1..4) blocks of a group at p against x's group xg. C: the
 * offset coefficient over d (q4_0 -8, q5_0 -16), 0 where m is stored;
 * codes by dword permute where they are dword-aligned (q4_1, q5_1). */
#define X16_GROUP(ID, BYTES, QS, QH, C)                                                                     \
    KVQ_TARGET_AVX512VNNI static KVQ_ALWAYS_INLINE __m512 x16_group_##ID(const uint8_t *p, int kg, const uint8_t *xg, \
                                                                        __m512 acc) {                       \
        __m512i a, b;                                                                                       \
        load_upto128(p, kg * (BYTES), &a, &b);                                                              \
        const __m512i v = C ? _mm512_permutex2var_epi16(a, x16_code_idx(BYTES, QS), b)                       \
                            : _mm512_permutex2var_epi32(a, x16_code_idx32(BYTES, QS), b);                   \
        const __m512i m4 = _mm512_set1_epi8(15);                                                            \
        __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);          \
        if (QH) x16_bit4(p, kg, BYTES, QH, &lo, &hi);                                                       \
        const __m512 f = x16_dot(lo, hi, xg);                                                               \
        const __m512 e = _mm512_load_ps((const float *)(xg + 256)), s = _mm512_load_ps((const float *)(xg + 320)); \
        if (C) return _mm512_fmadd_ps(x16_d(a, b, BYTES), _mm512_fmadd_ps(f, e, _mm512_mul_ps(_mm512_set1_ps(C), s)), acc); \
        __m512 mw;                                                                                          \
        const __m512 dw = x16_dm(a, b, BYTES, &mw);                                                         \
        return _mm512_fmadd_ps(mw, s, _mm512_fmadd_ps(dw, _mm512_mul_ps(f, e), acc));                       \
    }                                                                                                       \
    KVQ_TARGET_AVX512VNNI static void x16_mv_##ID(const void *w, size_t rb, const kvq_wx16 *xs, int64_t n,   \
                                                 int64_t r0, int64_t r1, float *y) {                        \
        const int64_t ng = n / 128;                                                                         \
        const int tail = (int)(n / 32 % 4);                                                                 \
        int64_t r = r0;                                                                                     \
        /* 2 blocks over whole groups (kvq_wx16.g): a row pair is 2 ng + 1 groups, the middle one split. */ \
        if (tail == 2 && rb == (size_t)(n / 32 * (BYTES)))                                                  \
            for (; r + 2 <= r1; r += 2) {                                                                   \
                const uint8_t *row = (const uint8_t *)w + (size_t)r * rb;                                   \
                x16_prefetch(row, 2 * rb);                                                                  \
                __m512 a0 = _mm512_setzero_ps(), a1 = a0, b0 = a0, b1 = a0;                                 \
                for (int64_t gi = 0; gi < ng; gi++) {                                                       \
                    a0 = x16_group_##ID(row + 4 * gi * (BYTES), 4, xs->g + 384 * gi, a0);                   \
                    b0 = x16_group_##ID(row + 4 * (gi + ng + 1) * (BYTES), 4, xs->g + 384 * (gi + ng + 1), b0); \
                    const __m512 t = a0;                                                                    \
                    a0 = a1, a1 = t;                                                                        \
                    const __m512 u = b0;                                                                    \
                    b0 = b1, b1 = u;                                                                        \
                }                                                                                           \
                const __m512 mid = x16_group_##ID(row + 4 * ng * (BYTES), 4, xs->g + 384 * ng, _mm512_setzero_ps()); \
                a0 = _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_maskz_mov_ps(0x00FF, mid));                \
                b0 = _mm512_add_ps(_mm512_add_ps(b0, b1), _mm512_maskz_mov_ps(0xFF00, mid));                \
                y[r - r0] = _mm512_reduce_add_ps(a0);                                                       \
                y[r + 1 - r0] = _mm512_reduce_add_ps(b0);                                                   \
            }                                                                                               \
        for (; r < r1; r++) {                                                                               \
            const uint8_t *row = (const uint8_t *)w + (size_t)r * rb;                                       \
            x16_prefetch(row, rb);                                                                          \
            __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0;                                                 \
            int64_t gi = 0;                                                                                 \
            for (; gi + 2 <= ng; gi += 2) {                                                                 \
                acc0 = x16_group_##ID(row + 4 * gi * (BYTES), 4, xs->g + 384 * gi, acc0);                   \
                acc1 = x16_group_##ID(row + 4 * (gi + 1) * (BYTES), 4, xs->g + 384 * (gi + 1), acc1);       \
            }                                                                                               \
            if (gi < ng) acc0 = x16_group_##ID(row + 4 * gi * (BYTES), 4, xs->g + 384 * gi, acc0), gi++;    \
            if (tail) acc1 = x16_group_##ID(row + 4 * gi * (BYTES), tail, xs->g + 384 * gi, acc1);          \
            y[r - r0] = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));                                    \
        }                                                                                                   \
    }
X16_GROUP(Q4_0, 18, 2, 0, -8.0f)
X16_GROUP(Q4_1, 20, 4, 0, 0.0f)
X16_GROUP(Q5_0, 22, 6, 2, -16.0f)
X16_GROUP(Q5_1, 24, 8, 4, 0.0f)
#undef X16_GROUP

/* acc + the kp (1..2) blocks of a q8_0 pair at p against x's pair xp:
 * codes at bytes 2..33 and 36..67 by two 32-byte loads, d at words 0, 17. */
KVQ_TARGET_AVX512VNNI static KVQ_ALWAYS_INLINE __m512 x16_pair_Q8_0(const uint8_t *p, int kp, const uint8_t *xp,
                                                                   __m512 acc) {
    const __m512i a = _mm512_maskz_loadu_epi8(kp == 2 ? ~(__mmask64)0 : 0x3FFFFFFFFULL, p);
    const __m256i cb = kp == 2 ? _mm256_loadu_si256((const __m256i *)(p + 36)) : _mm256_setzero_si256();
    const __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(p + 2))), cb, 1);
    const __m512i u = _mm512_xor_si512(w, _mm512_set1_epi8((char)0x80));
    __m512i acc_i = _mm512_slli_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), u, _mm512_load_si512(xp)), 8);
    const __m512 f = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(acc_i, u, _mm512_load_si512(xp + 64)));
    _Alignas(64) int16_t hx[32];
    for (int k = 0; k < 32; k++) hx[k] = (int16_t)(k < 8 ? 0 : 17);
    const __m512 dw = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(_mm512_load_si512(hx), a)));
    const __m512 e = _mm512_load_ps((const float *)(xp + 128)), s = _mm512_load_ps((const float *)(xp + 192));
    return _mm512_fmadd_ps(dw, _mm512_fmadd_ps(f, e, _mm512_mul_ps(_mm512_set1_ps(-128.0f), s)), acc);
}

KVQ_TARGET_AVX512VNNI static void x16_mv_Q8_0(const void *w, size_t rb, const kvq_wx16 *xs, int64_t n, int64_t r0,
                                             int64_t r1, float *y) {
    const int64_t np = n / 64;
    const int tail = (int)(n / 32 % 2);
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *row = (const uint8_t *)w + (size_t)r * rb;
        x16_prefetch(row, rb);
        __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0;
        int64_t i = 0;
        for (; i + 2 <= np; i += 2) {
            acc0 = x16_pair_Q8_0(row + 68 * i, 2, xs->p + 256 * i, acc0);
            acc1 = x16_pair_Q8_0(row + 68 * (i + 1), 2, xs->p + 256 * (i + 1), acc1);
        }
        if (i < np) acc0 = x16_pair_Q8_0(row + 68 * i, 2, xs->p + 256 * i, acc0), i++;
        if (tail) acc1 = x16_pair_Q8_0(row + 68 * i, 1, xs->p + 256 * i, acc1);
        y[r - r0] = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
    }
}

KVQ_TARGET_AVX512VNNI void kvq_wmatvec_x16_avx512vnni(const kvq_wtype_traits *t, const void *w, size_t row_bytes,
                                                      const kvq_wx16 *xs, int64_t n, int64_t r0, int64_t r1,
                                                      float *y) {
    static const struct {
        int type;
        void (*mv)(const void *, size_t, const kvq_wx16 *, int64_t, int64_t, int64_t, float *);
    } kernels[] = {{KVQ_WTYPE_Q4_0, x16_mv_Q4_0}, {KVQ_WTYPE_Q4_1, x16_mv_Q4_1}, {KVQ_WTYPE_Q5_0, x16_mv_Q5_0},
                   {KVQ_WTYPE_Q5_1, x16_mv_Q5_1}, {KVQ_WTYPE_Q8_0, x16_mv_Q8_0}};
    for (size_t i = 0; i < KVQ_ARRAY_LEN(kernels); i++)
        if (kernels[i].type == t->type) kernels[i].mv(w, row_bytes, xs, n, r0, r1, y);
}

/* Without VNNI the int16 route is the reference (kvq_wtype_x16_fast: the
 * forward pass then keeps float x). */
void kvq_wmatvec_x16_avx512(const kvq_wtype_traits *t, const void *w, size_t row_bytes, const kvq_wx16 *xs,
                            int64_t n, int64_t r0, int64_t r1, float *y) {
    if (kvq_cpu_has_vnni()) kvq_wmatvec_x16_avx512vnni(t, w, row_bytes, xs, n, r0, r1, y);
    else kvq_wmatvec_x16_ref(t, w, row_bytes, xs, n, r0, r1, y);
}

/* Matmul (VNNI): a tile of QR rows is converted once per k-chunk into
 * codes, per-pair scale vectors and offset coefficients, then every token
 * passes over it QT at a time: QR x QT accumulators, one vpdpbusd, convert
 * and FMA per pair and (row, token), the offset terms folded into the same
 * accumulators 16 blocks at a time. */
#define QR 4
#define QT 4
#define QKC 2048
#define QTB 128

typedef struct {
    _Alignas(64) uint8_t u[QR][QKC];        // (rows, chunk) codes
    _Alignas(64) float sw[QR][QKC / 64][16]; // (rows, pairs, 16) dw of a x8, of b x8
    _Alignas(64) float c[QR][QKC / 32];      // (rows, blocks) offset coefficients
} mmq_tile;

#define KVQ_WMMQ_PACK(ID, BYTES)                                                                  \
    KVQ_TARGET_AVX512 static void mmq_pack_##ID(const uint8_t *const rows[QR], int64_t nb, mmq_tile *tl) { \
        for (int a = 0; a < QR; a++) {                                                            \
            for (int64_t i = 0; i < nb; i += 2) {                                                 \
                const uint8_t *pa = rows[a] + i * (BYTES), *pb = i + 1 < nb ? pa + (BYTES) : pa;  \
                const float da = f16_at(pa), db = i + 1 < nb ? f16_at(pb) : 0.0f;                 \
                _mm512_store_si512(tl->u[a] + 32 * i, mm_codes_##ID(pa, pb));                     \
                _mm512_store_ps(tl->sw[a][i / 2], halves(da, db));                                \
                tl->c[a][i] = mm_off_##ID(pa, da);                                                \
                if (i + 1 < nb) tl->c[a][i + 1] = mm_off_##ID(pb, db);                            \
            }                                                                                     \
        }                                                                                         \
    }
KVQ_WMMQ_PACK(Q4_0, 18)
KVQ_WMMQ_PACK(Q4_1, 20)
KVQ_WMMQ_PACK(Q5_0, 22)
KVQ_WMMQ_PACK(Q5_1, 24)
KVQ_WMMQ_PACK(Q8_0, 34)
#undef KVQ_WMMQ_PACK

/* out[a][b] = row a of the tile . token b over nb blocks starting at block
 * k0b of the prepared x (tokens at q, d, s of their own rows). */
KVQ_TARGET_AVX512VNNI static void mmq_tile_dot(const mmq_tile *tl, int64_t nb, const int8_t *const q[QT],
                                               const float *const d[QT], const float *const s[QT],
                                               float out[QR][QT]) {
    __m512 acc[QR * QT];
#pragma GCC unroll 16
    for (int j = 0; j < QR * QT; j++) acc[j] = _mm512_setzero_ps();
    const __m512i pidx = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    for (int64_t i = 0; i < nb; i += 2) {
        const int two = i + 1 < nb;
        __m512i xv[QT];
        __m512 sx[QT];
#pragma GCC unroll 4
        for (int b = 0; b < QT; b++) {
            xv[b] = _mm512_maskz_loadu_epi8(two ? ~(__mmask64)0 : 0xFFFFFFFFull, q[b] + 32 * i);
            sx[b] = _mm512_permutexvar_ps(pidx, _mm512_castps128_ps512(_mm_maskz_loadu_ps(two ? 3 : 1, d[b] + i)));
        }
#pragma GCC unroll 4
        for (int a = 0; a < QR; a++) {
            const __m512i u = _mm512_load_si512(tl->u[a] + 32 * i);
            const __m512 sw = _mm512_load_ps(tl->sw[a][i / 2]);
#pragma GCC unroll 4
            for (int b = 0; b < QT; b++)
                acc[a * QT + b] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dp_vnni(u, xv[b])), _mm512_mul_ps(sw, sx[b]),
                                                  acc[a * QT + b]);
        }
    }
    for (int64_t i = 0; i < nb; i += 16) {
        const __mmask16 m = nb - i >= 16 ? 0xFFFF : (__mmask16)((1u << (nb - i)) - 1);
        __m512 sv[QT];
        for (int b = 0; b < QT; b++) sv[b] = _mm512_maskz_loadu_ps(m, s[b] + i);
        for (int a = 0; a < QR; a++) {
            const __m512 cv = _mm512_maskz_loadu_ps(m, tl->c[a] + i);
            for (int b = 0; b < QT; b++) acc[a * QT + b] = _mm512_fmadd_ps(cv, sv[b], acc[a * QT + b]);
        }
    }
    _Alignas(64) float sums[16]; // (16) lane 4 L + q: accumulator 4 q + L
    _mm512_store_ps(sums, reduce16(acc));
    for (int j = 0; j < QR * QT; j++) out[j / QT][j % QT] = sums[4 * (j % 4) + j / 4];
}

KVQ_TARGET_AVX512VNNI void kvq_wmatmul_q_avx512vnni(const kvq_wtype_traits *t, const void *w, size_t row_bytes,
                                                    const kvq_wxq *xq, int64_t n_tok, int64_t n, int64_t r0,
                                                    int64_t r1, float *y, int64_t ldy) {
    mmq_tile tile_buf; // one row tile's converted weights
    mmq_tile *tl = &tile_buf;
    /* Token blocks keep the prepared x they read (QTB tokens) in L2 while
     * every row tile passes; converting a tile again per block is cheap. */
    for (int64_t tb = 0; tb < n_tok; tb += QTB) {
        const int64_t te = n_tok - tb < QTB ? n_tok : tb + QTB;
        for (int64_t rb = r0; rb < r1; rb += QR) {
            const int nr = r1 - rb < QR ? (int)(r1 - rb) : QR;
            for (int64_t k0 = 0; k0 < n; k0 += QKC) {
                const int64_t nb = (n - k0 < QKC ? n - k0 : QKC) / 32;
                const uint8_t *rows[QR];
                /* Edge tiles repeat the last row and drop its results. */
                for (int a = 0; a < QR; a++)
                    rows[a] = (const uint8_t *)w + (size_t)(rb + (a < nr ? a : nr - 1)) * row_bytes +
                              (size_t)(k0 / 32) * t->block_bytes;
                switch (t->type) {
                case KVQ_WTYPE_Q4_0: mmq_pack_Q4_0(rows, nb, tl); break;
                case KVQ_WTYPE_Q4_1: mmq_pack_Q4_1(rows, nb, tl); break;
                case KVQ_WTYPE_Q5_0: mmq_pack_Q5_0(rows, nb, tl); break;
                case KVQ_WTYPE_Q5_1: mmq_pack_Q5_1(rows, nb, tl); break;
                case KVQ_WTYPE_Q8_0: mmq_pack_Q8_0(rows, nb, tl); break;
                }
                for (int64_t i = tb; i < te; i += QT) {
                    const int nt = te - i < QT ? (int)(te - i) : QT;
                    const int8_t *q[QT];
                    const float *d[QT], *s[QT];
                    for (int b = 0; b < QT; b++) {
                        const int64_t tok = i + (b < nt ? b : nt - 1);
                        q[b] = xq->q + tok * n + k0;
                        d[b] = xq->d + tok * (n / 32) + k0 / 32;
                        s[b] = xq->s + tok * (n / 32) + k0 / 32;
                    }
                    float out[QR][QT];
                    mmq_tile_dot(tl, nb, q, d, s, out);
                    for (int b = 0; b < nt; b++) {
                        float *yr = y + (i + b) * ldy + rb;
                        for (int a = 0; a < nr; a++) yr[a] = k0 == 0 ? out[a][b] : yr[a] + out[a][b];
                    }
                }
            }
        }
    }
}

/* Without VNNI, vpmaddubsw would saturate on the w + 128 codes of q8_0:
 * the matvec kernel runs over slabs of rows instead. */
void kvq_wmatmul_q_avx512bw(const kvq_wtype_traits *t, const void *w, size_t row_bytes, const kvq_wxq *xq,
                            int64_t n_tok, int64_t n, int64_t r0, int64_t r1, float *y, int64_t ldy) {
    kvq_wmatmul_q_by_rows(t, kvq_wmatvec_q_avx512bw, w, row_bytes, xq, n_tok, n, r0, r1, y, ldy);
}

void kvq_wmatmul_q_avx512(const kvq_wtype_traits *t, const void *w, size_t row_bytes, const kvq_wxq *xq,
                          int64_t n_tok, int64_t n, int64_t r0, int64_t r1, float *y, int64_t ldy) {
    if (kvq_cpu_has_vnni()) kvq_wmatmul_q_avx512vnni(t, w, row_bytes, xq, n_tok, n, r0, r1, y, ldy);
    else kvq_wmatmul_q_avx512bw(t, w, row_bytes, xq, n_tok, n, r0, r1, y, ldy);
}
#endif
