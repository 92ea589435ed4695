/* wtype_avx2.c — weight dequantization, matvec and matmul with AVX2 + FMA. */
#include "model/wtype.h"

#if KVQ_HAVE_X86
#include <immintrin.h>

#include "model/wtype_blocks.h"

/* One instantiation of a reference block body under this target: the
 * compiler vectorizes it, and it stays bit-exact (same operations, no
 * contraction under -std=c11). */
#define KVQ_WBLOCKS(ID, bs, bytes)                                                     \
    KVQ_TARGET_AVX2 static void dequant_##ID(const void *src, float *dst, int64_t n_blocks) { \
        const uint8_t *b = src;                                                       \
        for (int64_t i = 0; i < n_blocks; i++) kvq_wblock_##ID(b + i * (bytes), dst + i * (bs)); \
    }
KVQ_WBLOCKS(F16, 1, 2)
KVQ_WBLOCKS(BF16, 1, 2)

KVQ_TARGET_AVX2 void kvq_wdequant_F32_avx2(const void *src, float *dst, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
}

KVQ_TARGET_AVX2 void kvq_wdequant_F16_avx2(const void *src, float *dst, int64_t n) {
    const uint16_t *h = src;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + i))));
    dequant_F16(h + i, dst + i, n - i);
}

KVQ_TARGET_AVX2 void kvq_wdequant_BF16_avx2(const void *src, float *dst, int64_t n) {
    const uint16_t *h = src;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(h + i)));
        _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(u, 16)));
    }
    dequant_BF16(h + i, dst + i, n - i);
}

#define KVQ_WQUANT(ID, bs, bytes)                                                      \
    KVQ_WBLOCKS(ID, bs, bytes)                                                        \
    KVQ_TARGET_AVX2 void kvq_wdequant_##ID##_avx2(const void *src, float *dst, int64_t n) { \
        dequant_##ID(src, dst, n);                                                    \
    }
KVQ_WQUANT(Q4_0, 32, 18)
KVQ_WQUANT(Q4_1, 32, 20)
KVQ_WQUANT(Q5_0, 32, 22)
KVQ_WQUANT(Q5_1, 32, 24)
KVQ_WQUANT(Q8_0, 32, 34)
KVQ_WQUANT(Q4_K, 256, 144)
KVQ_WQUANT(Q5_K, 256, 176)
KVQ_WQUANT(Q6_K, 256, 210)
#undef KVQ_WQUANT

/* Values dequantized per step of matvec (a multiple of every block size,
 * small enough to stay in L1 next to x). */
#define MV_CHUNK 256

KVQ_TARGET_AVX2 static inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* acc += a . b over len values (len a multiple of 32), four partial sums. */
KVQ_TARGET_AVX2 static inline void dot_acc(const float *a, const float *b, int64_t len, __m256 acc[4]) {
    for (int64_t k = 0; k < len; k += 32) {
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++)
            acc[j] = _mm256_fmadd_ps(_mm256_loadu_ps(a + k + 8 * j), _mm256_loadu_ps(b + k + 8 * j), acc[j]);
    }
}

KVQ_TARGET_AVX2 void kvq_wmatvec_avx2(const kvq_wtype_traits *t, const void *w, size_t row_bytes,
                                      const float *x, int64_t n, int64_t r0, int64_t r1, float *y) {
    const kvq_wdequant_fn dq = t->dequant_isa[KVQ_ISA_AVX2];
    _Alignas(64) float buf[MV_CHUNK]; // (chunk) one row's dequantized values
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *row = (const uint8_t *)w + (size_t)r * row_bytes;
        __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
        if (t->type == KVQ_WTYPE_F32) {
            dot_acc((const float *)row, x, n, acc);
        } else {
            for (int64_t k0 = 0; k0 < n; k0 += MV_CHUNK) {
                const int64_t len = n - k0 < MV_CHUNK ? n - k0 : MV_CHUNK;
                dq(row + (size_t)(k0 / t->block_size) * t->block_bytes, buf, len / t->block_size);
                dot_acc(buf, x + k0, len, acc);
            }
        }
        y[r - r0] = hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    }
}

/* Matmul register tile: MM_ROWS weight rows x MM_TOK tokens of 8-lane
 * accumulators (8 of 16 ymm, 4 more hold the weights). Each weight chunk is
 * dequantized once into an L1/L2-resident buffer and used by every token. */
#define MM_ROWS 4
#define MM_TOK 2
#define MM_CHUNK 1024

/* out[a][b] = w_a . x_b over len values (len a multiple of 8). */
KVQ_TARGET_AVX2 static void tile(const float *const wr[MM_ROWS], const float *const xr[MM_TOK],
                                 int64_t len, float out[MM_ROWS][MM_TOK]) {
    __m256 acc[MM_ROWS][MM_TOK];
    for (int a = 0; a < MM_ROWS; a++)
        for (int b = 0; b < MM_TOK; b++) acc[a][b] = _mm256_setzero_ps();
    for (int64_t k = 0; k < len; k += 8) {
        __m256 wv[MM_ROWS];
#pragma GCC unroll 4
        for (int a = 0; a < MM_ROWS; a++) wv[a] = _mm256_loadu_ps(wr[a] + k);
#pragma GCC unroll 4
        for (int b = 0; b < MM_TOK; b++) {
            const __m256 xv = _mm256_loadu_ps(xr[b] + k);
#pragma GCC unroll 4
            for (int a = 0; a < MM_ROWS; a++) acc[a][b] = _mm256_fmadd_ps(wv[a], xv, acc[a][b]);
        }
    }
    for (int a = 0; a < MM_ROWS; a++)
        for (int b = 0; b < MM_TOK; b++) out[a][b] = hsum(acc[a][b]);
}

KVQ_TARGET_AVX2 void kvq_wmatmul_avx2(const kvq_wtype_traits *t, const void *w, size_t row_bytes,
                                      const float *x, int64_t n_tok, int64_t n, int64_t r0,
                                      int64_t r1, float *y, int64_t ldy) {
    const kvq_wdequant_fn dq = t->dequant_isa[KVQ_ISA_AVX2];
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
