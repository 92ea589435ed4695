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

/* Fused float matvec of the 32-value block types, as in wtype_avx512.c:
 * w . x = d (u . x) + c (sum of the block's x) with the codes u converted
 * in registers and FMA'd with exact float x, block sums of x shared by
 * every row. A block is four 8-lane vectors: values 0-7, 8-15, 16-23,
 * 24-31. */
#define MV_CHUNK_BLOCKS 128

KVQ_TARGET_AVX2 static inline float f16_at(const uint8_t *p) { return _cvtsh_ss(kvq_load_u16(p)); }

KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE void nib_codes(const uint8_t *qs, __m256i u[4]) {
    const __m128i v = _mm_loadu_si128((const __m128i *)qs);
    const __m256i a = _mm256_cvtepu8_epi32(v), b = _mm256_cvtepu8_epi32(_mm_srli_si128(v, 8));
    const __m256i m = _mm256_set1_epi32(15);
    u[0] = _mm256_and_si256(a, m);
    u[1] = _mm256_and_si256(b, m);
    u[2] = _mm256_srli_epi32(a, 4);
    u[3] = _mm256_srli_epi32(b, 4);
}

KVQ_TARGET_AVX2 static inline __m256i nib32(const uint8_t *qs) {
    const __m128i v = _mm_loadu_si128((const __m128i *)qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(15));
}

KVQ_TARGET_AVX2 static inline uint32_t load_u32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* Adds 16 to code j where bit j of h is set. */
KVQ_TARGET_AVX2 static inline __m256i with_bit4_32(__m256i u, uint32_t h) {
    /* Byte j gets h's byte j / 8; OR-ing every bit but j % 8 and comparing
     * with all-ones isolates bit j. */
    const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32((int)h),
                                              _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202,
                                                                 0x0303030303030303));
    const __m256i set = _mm256_cmpeq_epi8(_mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe)),
                                          _mm256_set1_epi64x(-1));
    return _mm256_or_si256(u, _mm256_and_si256(set, _mm256_set1_epi8(16)));
}

/* 32 byte codes [values 0-15 | 16-31] as four 8-lane vectors. */
KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE void byte_codes(__m256i c, __m256i u[4]) {
    const __m128i lo = _mm256_castsi256_si128(c), hi = _mm256_extracti128_si256(c, 1);
    u[0] = _mm256_cvtepu8_epi32(lo);
    u[1] = _mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8));
    u[2] = _mm256_cvtepu8_epi32(hi);
    u[3] = _mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8));
}

KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE void fcodes_Q4_0(const uint8_t *b, __m256i u[4]) { nib_codes(b + 2, u); }
KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE void fcodes_Q4_1(const uint8_t *b, __m256i u[4]) { nib_codes(b + 4, u); }
KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE void fcodes_Q5_0(const uint8_t *b, __m256i u[4]) {
    byte_codes(with_bit4_32(nib32(b + 6), load_u32(b + 2)), u);
}
KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE void fcodes_Q5_1(const uint8_t *b, __m256i u[4]) {
    byte_codes(with_bit4_32(nib32(b + 8), load_u32(b + 4)), u);
}
KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE void fcodes_Q8_0(const uint8_t *b, __m256i u[4]) {
    for (int q = 0; q < 4; q++) u[q] = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(b + 2 + 8 * q)));
}
#define foff_Q4_0(blk) (-8.0f * f16_at(blk))
#define foff_Q4_1(blk) f16_at((blk) + 2)
#define foff_Q5_0(blk) (-16.0f * f16_at(blk))
#define foff_Q5_1(blk) f16_at((blk) + 2)

/* acc + d * (u . x) for the block at b. */
#define KVQ_WFUSED_STEP(ID)                                                                          \
    KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE __m256 fstep_##ID(const uint8_t *b, const float *x, __m256 acc) { \
        __m256i u[4];                                                                                \
        fcodes_##ID(b, u);                                                                           \
        __m256 t0 = _mm256_mul_ps(_mm256_cvtepi32_ps(u[0]), _mm256_loadu_ps(x));                     \
        __m256 t1 = _mm256_mul_ps(_mm256_cvtepi32_ps(u[1]), _mm256_loadu_ps(x + 8));                 \
        t0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(u[2]), _mm256_loadu_ps(x + 16), t0);                 \
        t1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(u[3]), _mm256_loadu_ps(x + 24), t1);                 \
        return _mm256_fmadd_ps(_mm256_add_ps(t0, t1), _mm256_set1_ps(f16_at(b)), acc);              \
    }
KVQ_WFUSED_STEP(Q4_0)
KVQ_WFUSED_STEP(Q4_1)
KVQ_WFUSED_STEP(Q5_0)
KVQ_WFUSED_STEP(Q5_1)
KVQ_WFUSED_STEP(Q8_0)
#undef KVQ_WFUSED_STEP

KVQ_TARGET_AVX2 static inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

#define KVQ_WFUSED_MV(ID, BYTES)                                                                     \
    KVQ_TARGET_AVX2 static void fmatvec_##ID(const void *w, size_t row_bytes, const float *x, int64_t n, \
                                             int64_t r0, int64_t r1, float *y) {                    \
        float sx[MV_CHUNK_BLOCKS]; /* (chunk blocks) sum of x over each block */                    \
        for (int64_t c0 = 0; c0 < n / 32; c0 += MV_CHUNK_BLOCKS) {                                   \
            const int64_t nb = n / 32 - c0 < MV_CHUNK_BLOCKS ? n / 32 - c0 : MV_CHUNK_BLOCKS;        \
            const float *xc = x + 32 * c0;                                                           \
            for (int64_t i = 0; i < nb; i++) {                                                       \
                const float *xb = xc + 32 * i;                                                       \
                sx[i] = hsum(_mm256_add_ps(_mm256_add_ps(_mm256_loadu_ps(xb), _mm256_loadu_ps(xb + 8)), \
                                           _mm256_add_ps(_mm256_loadu_ps(xb + 16), _mm256_loadu_ps(xb + 24)))); \
            }                                                                                        \
            for (int64_t r = r0; r < r1; r++) {                                                      \
                const uint8_t *b = (const uint8_t *)w + (size_t)r * row_bytes + (size_t)c0 * (BYTES); \
                __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;                                      \
                float off0 = 0, off1 = 0;                                                            \
                int64_t i = 0;                                                                       \
                for (; i + 2 <= nb; i += 2, b += 2 * (BYTES)) {                                      \
                    acc0 = fstep_##ID(b, xc + 32 * i, acc0);                                         \
                    acc1 = fstep_##ID(b + (BYTES), xc + 32 * i + 32, acc1);                          \
                    off0 += foff_##ID(b) * sx[i];                                                    \
                    off1 += foff_##ID(b + (BYTES)) * sx[i + 1];                                      \
                }                                                                                    \
                if (i < nb) {                                                                        \
                    acc0 = fstep_##ID(b, xc + 32 * i, acc0);                                         \
                    off0 += foff_##ID(b) * sx[i];                                                    \
                }                                                                                    \
                const float part = hsum(_mm256_add_ps(acc0, acc1)) + (off0 + off1);                  \
                y[r - r0] = c0 == 0 ? part : y[r - r0] + part;                                       \
            }                                                                                        \
        }                                                                                            \
    }
KVQ_WFUSED_MV(Q4_0, 18)
KVQ_WFUSED_MV(Q4_1, 20)
KVQ_WFUSED_MV(Q5_0, 22)
KVQ_WFUSED_MV(Q5_1, 24)
#undef KVQ_WFUSED_MV

KVQ_TARGET_AVX2 static void fmatvec_Q8_0(const void *w, size_t row_bytes, const float *x, int64_t n,
                                         int64_t r0, int64_t r1, float *y) {
    const int64_t nb = n / 32;
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *b = (const uint8_t *)w + (size_t)r * row_bytes;
        __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
        int64_t i = 0;
        for (; i + 2 <= nb; i += 2, b += 68) {
            acc0 = fstep_Q8_0(b, x + 32 * i, acc0);
            acc1 = fstep_Q8_0(b + 34, x + 32 * i + 32, acc1);
        }
        if (i < nb) acc0 = fstep_Q8_0(b, x + 32 * i, acc0);
        y[r - r0] = hsum(_mm256_add_ps(acc0, acc1));
    }
}

/* Values dequantized per step of matvec for the other types (a multiple
 * of every block size, small enough to stay in L1 next to x). */
#define MV_CHUNK 256

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
    switch (t->type) {
    case KVQ_WTYPE_Q4_0: fmatvec_Q4_0(w, row_bytes, x, n, r0, r1, y); return;
    case KVQ_WTYPE_Q4_1: fmatvec_Q4_1(w, row_bytes, x, n, r0, r1, y); return;
    case KVQ_WTYPE_Q5_0: fmatvec_Q5_0(w, row_bytes, x, n, r0, r1, y); return;
    case KVQ_WTYPE_Q5_1: fmatvec_Q5_1(w, row_bytes, x, n, r0, r1, y); return;
    case KVQ_WTYPE_Q8_0: fmatvec_Q8_0(w, row_bytes, x, n, r0, r1, y); return;
    }
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
            kvq_wmatmul_dequant_tile(t, dq, w, row_bytes, rb, nr, MM_ROWS, k0, len, &buf[0][0], MM_CHUNK, wr);
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
/* ------------------------------------------------------- integer route
 * One block per vector: 32 unsigned codes u with w = dw * u + c (q8_0:
 * |w| with the signs moved onto x), u . q exact through vpmaddubsw (no
 * saturation: |u| <= 128, |q| <= 127) and vpmaddwd. See wtype_avx512.c. */

KVQ_TARGET_AVX2 static inline int hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

/* Loads the block of 32 values at xb into v and returns max |x|. */
KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE float load_block_amax(const float *xb, __m256 v[4]) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m = _mm256_setzero_ps();
    for (int j = 0; j < 4; j++) {
        v[j] = _mm256_loadu_ps(xb + 8 * j);
        m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[j]));
    }
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

/* 32 int32 values in [-127, 127] as bytes in order. */
KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE __m256i pack_i8(const __m256i i32[4]) {
    /* The packs interleave 128-bit lanes; the permute restores order. */
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i32[0], i32[1]), _mm256_packs_epi32(i32[2], i32[3]));
    return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

KVQ_TARGET_AVX2 void kvq_wquantize_x_avx2(const float *x, int64_t n, int8_t *q, float *d, float *s) {
    for (int64_t b = 0; b < n / 32; b++) {
        __m256 v[4];
        const float db = load_block_amax(x + 32 * b, v) / 127.0f, id = db != 0.0f ? 1.0f / db : 0.0f;
        __m256i i32[4];
        for (int j = 0; j < 4; j++)
            i32[j] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[j], _mm256_set1_ps(id)),
                                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        _mm256_storeu_si256((__m256i *)(q + 32 * b), pack_i8(i32));
        d[b] = db;
        s[b] = db * (float)hsum_i32(_mm256_add_epi32(_mm256_add_epi32(i32[0], i32[1]), _mm256_add_epi32(i32[2], i32[3])));
    }
}

/* The block's 32 codes u as bytes [values 0-15 | 16-31]; q8_0 gives |w|
 * and moves w's signs onto the x vectors (xb NULL for one plane). */
KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE __m256i codes_Q4_0(const uint8_t *b, __m256i *xa, __m256i *xb) {
    (void)xa, (void)xb;
    return nib32(b + 2);
}
KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE __m256i codes_Q4_1(const uint8_t *b, __m256i *xa, __m256i *xb) {
    (void)xa, (void)xb;
    return nib32(b + 4);
}
KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE __m256i codes_Q5_0(const uint8_t *b, __m256i *xa, __m256i *xb) {
    (void)xa, (void)xb;
    return with_bit4_32(nib32(b + 6), load_u32(b + 2));
}
KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE __m256i codes_Q5_1(const uint8_t *b, __m256i *xa, __m256i *xb) {
    (void)xa, (void)xb;
    return with_bit4_32(nib32(b + 8), load_u32(b + 4));
}
KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE __m256i codes_Q8_0(const uint8_t *b, __m256i *xa, __m256i *xb) {
    const __m256i w = _mm256_loadu_si256((const __m256i *)(b + 2));
    *xa = _mm256_sign_epi8(*xa, w);
    if (xb) *xb = _mm256_sign_epi8(*xb, w);
    return _mm256_abs_epi8(w);
}
#define off_Q4_0(blk, dw) (-8.0f * (dw))
#define off_Q4_1(blk, dw) f16_at((blk) + 2)
#define off_Q5_0(blk, dw) (-16.0f * (dw))
#define off_Q5_1(blk, dw) f16_at((blk) + 2)
#define off_Q8_0(blk, dw) 0.0f

#define KVQ_WMVQ(ID, BYTES)                                                                       \
    KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE __m256 mvq_step_##ID(const uint8_t *blk, const kvq_wxq *xq, \
                                                                  int64_t i, __m256 acc, float *off) { \
        __m256i xv = _mm256_loadu_si256((const __m256i *)(xq->q + 32 * i));                       \
        const __m256i u = codes_##ID(blk, &xv, NULL);                                             \
        const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(u, xv), _mm256_set1_epi16(1));  \
        const float dw = _cvtsh_ss(kvq_load_u16(blk));                                            \
        *off += off_##ID(blk, dw) * xq->s[i];                                                     \
        return _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dw * xq->d[i]), acc);        \
    }                                                                                             \
    KVQ_TARGET_AVX2 static void mvq_##ID(const void *w, size_t rb, const kvq_wxq *xq, int64_t n,   \
                                         int64_t r0, int64_t r1, float *y) {                      \
        const int64_t nb = n / 32;                                                                \
        for (int64_t r = r0; r < r1; r++) {                                                       \
            const uint8_t *row = (const uint8_t *)w + (size_t)r * rb;                             \
            __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;                                       \
            float off0 = 0, off1 = 0;                                                             \
            int64_t i = 0;                                                                        \
            for (; i + 2 <= nb; i += 2) {                                                         \
                acc0 = mvq_step_##ID(row + i * (BYTES), xq, i, acc0, &off0);                      \
                acc1 = mvq_step_##ID(row + (i + 1) * (BYTES), xq, i + 1, acc1, &off1);            \
            }                                                                                     \
            if (i < nb) acc0 = mvq_step_##ID(row + i * (BYTES), xq, i, acc0, &off0);              \
            y[r - r0] = hsum(_mm256_add_ps(acc0, acc1)) + (off0 + off1);                          \
        }                                                                                         \
    }
KVQ_WMVQ(Q4_0, 18)
KVQ_WMVQ(Q4_1, 20)
KVQ_WMVQ(Q5_0, 22)
KVQ_WMVQ(Q5_1, 24)
KVQ_WMVQ(Q8_0, 34)
#undef KVQ_WMVQ

KVQ_TARGET_AVX2 void kvq_wmatvec_q_avx2(const kvq_wtype_traits *t, const void *w, size_t row_bytes,
                                        const kvq_wxq *xq, int64_t n, int64_t r0, int64_t r1, float *y) {
    switch (t->type) {
    case KVQ_WTYPE_Q4_0: mvq_Q4_0(w, row_bytes, xq, n, r0, r1, y); break;
    case KVQ_WTYPE_Q4_1: mvq_Q4_1(w, row_bytes, xq, n, r0, r1, y); break;
    case KVQ_WTYPE_Q5_0: mvq_Q5_0(w, row_bytes, xq, n, r0, r1, y); break;
    case KVQ_WTYPE_Q5_1: mvq_Q5_1(w, row_bytes, xq, n, r0, r1, y); break;
    case KVQ_WTYPE_Q8_0: mvq_Q8_0(w, row_bytes, xq, n, r0, r1, y); break;
    }
}

void kvq_wmatmul_q_avx2(const kvq_wtype_traits *t, const void *w, size_t row_bytes, const kvq_wxq *xq,
                        int64_t n_tok, int64_t n, int64_t r0, int64_t r1, float *y, int64_t ldy) {
    kvq_wmatmul_q_by_rows(t, kvq_wmatvec_q_avx2, w, row_bytes, xq, n_tok, n, r0, r1, y, ldy);
}
/* ------------------------------------------------------- int16 route
 * x as two int8 planes per block (kvq_wx16: x ~ e (256 h + l)), natural
 * order. Per block the codes meet both planes through vpmaddubsw (|u| <=
 * 128, |h|, |l| <= 127: no saturation) and vpmaddwd by 256 and by 1, so
 * the 16-bit product u . (256 h + l) is exact in int32; then one
 * conversion and one FMA with the block's d e, as the int8 route. Where
 * the float route converts and multiplies every value (4 conversions and
 * 4 FMAs a block), this takes 2 vpmaddubsw and 1-2 vpmaddwd. Rows are
 * fetched X16_PREFETCH bytes ahead as each starts (wtype_avx512.c). */
#define X16_PREFETCH 3072

KVQ_TARGET_AVX2 void kvq_wquantize_x16_avx2(const float *x, int64_t n, int8_t *h, int8_t *l, float *e, float *s) {
    const __m256 hi_lim = _mm256_set1_ps(127.0f), lo_lim = _mm256_set1_ps(-127.0f);
    for (int64_t b = 0; b < n / 32; b++) {
        __m256 v[4];
        const float db = load_block_amax(x + 32 * b, v) / 127.0f, id = db != 0.0f ? 1.0f / db : 0.0f;
        const float eb = db / 256.0f;
        const __m256 vd = _mm256_set1_ps(db), vid = _mm256_set1_ps(id), vie = _mm256_set1_ps(id * 256.0f);
        __m256i hi[4], li[4], acc = _mm256_setzero_si256();
        for (int j = 0; j < 4; j++) {
            const __m256 hv = _mm256_round_ps(_mm256_mul_ps(v[j], vid), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            __m256 lv = _mm256_mul_ps(_mm256_sub_ps(v[j], _mm256_mul_ps(vd, hv)), vie);
            lv = _mm256_round_ps(lv, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            lv = _mm256_min_ps(_mm256_max_ps(lv, lo_lim), hi_lim);
            hi[j] = _mm256_cvtps_epi32(hv), li[j] = _mm256_cvtps_epi32(lv);
            acc = _mm256_add_epi32(acc, _mm256_add_epi32(_mm256_slli_epi32(hi[j], 8), li[j]));
        }
        _mm256_storeu_si256((__m256i *)(h + 32 * b), pack_i8(hi));
        _mm256_storeu_si256((__m256i *)(l + 32 * b), pack_i8(li));
        e[b] = eb;
        s[b] = eb * (float)hsum_i32(acc);
    }
}

/* q4/q5 rows go in pairs of blocks against x's g layout (kvq_wx16):
 * one load of each block's 16 code bytes and one mask and shift give
 * [values 0-15 of both | 16-31 of both], which meet x's h and l halves
 * laid out the same way; lanes 0-3 then hold the first block's integer
 * sums, 4-7 the second's, and its d (and m) are spread over the lanes to
 * meet x's per-lane e and s / 4. p1 is p0 again for a last odd block
 * (x's zero block pairs with it). */
#define KVQ_WX16_PAIR(ID, BYTES, QS, QH, C)                                                              \
    KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE __m256 x16_pair_##ID(const uint8_t *p0, const uint8_t *p1, \
                                                                  const uint8_t *xg, __m256 acc) { \
        const __m256i v = _mm256_inserti128_si256(                                                \
            _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(p0 + (QS)))),                \
            _mm_loadu_si128((const __m128i *)(p1 + (QS))), 1);                                    \
        const __m256i m4 = _mm256_set1_epi8(15);                                                  \
        __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4); \
        if (QH) {                                                                                 \
            const uint32_t h0 = load_u32(p0 + (QH)), h1 = load_u32(p1 + (QH));                    \
            lo = with_bit4_32(lo, (h0 & 0xFFFFu) | (h1 << 16));                                   \
            hi = with_bit4_32(hi, (h0 >> 16) | (h1 & 0xFFFF0000u));                               \
        }                                                                                         \
        const __m256i ph = _mm256_add_epi16(_mm256_maddubs_epi16(lo, _mm256_load_si256((const __m256i *)xg)), \
                                            _mm256_maddubs_epi16(hi, _mm256_load_si256((const __m256i *)(xg + 64)))); \
        const __m256i pl = _mm256_add_epi16(_mm256_maddubs_epi16(lo, _mm256_load_si256((const __m256i *)(xg + 128))), \
                                            _mm256_maddubs_epi16(hi, _mm256_load_si256((const __m256i *)(xg + 192)))); \
        const __m256 f = _mm256_cvtepi32_ps(_mm256_add_epi32(_mm256_madd_epi16(ph, _mm256_set1_epi16(256)), \
                                                             _mm256_madd_epi16(pl, _mm256_set1_epi16(1)))); \
        const __m256 e = _mm256_load_ps((const float *)(xg + 256)), s = _mm256_load_ps((const float *)(xg + 320)); \
        if (C) {                                                                                  \
            const __m128i dd = _mm_cvtsi32_si128((int)(kvq_load_u16(p0) | (uint32_t)kvq_load_u16(p1) << 16)); \
            const __m256 d = _mm256_cvtph_ps(_mm_shuffle_epi8(dd, _mm_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3))); \
            return _mm256_fmadd_ps(d, _mm256_fmadd_ps(f, e, _mm256_mul_ps(_mm256_set1_ps(C), s)), acc); \
        }                                                                                         \
        const __m256 dm = _mm256_castps128_ps256(_mm_cvtph_ps(_mm_setr_epi32((int)load_u32(p0), (int)load_u32(p1), 0, 0))); \
        const __m256 d = _mm256_permutevar8x32_ps(dm, _mm256_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2));  \
        const __m256 m = _mm256_permutevar8x32_ps(dm, _mm256_setr_epi32(1, 1, 1, 1, 3, 3, 3, 3));  \
        return _mm256_fmadd_ps(m, s, _mm256_fmadd_ps(d, _mm256_mul_ps(f, e), acc));                \
    }                                                                                             \
    KVQ_TARGET_AVX2 static void mvx16_##ID(const void *w, size_t rb, const kvq_wx16 *xs, int64_t n, \
                                           int64_t r0, int64_t r1, float *y) {                    \
        const int64_t nb = n / 32, bytes = (BYTES);                                               \
        for (int64_t r = r0; r < r1; r++) {                                                       \
            const uint8_t *row = (const uint8_t *)w + (size_t)r * rb;                             \
            for (size_t o = 0; o < rb; o += 64) _mm_prefetch((const char *)row + X16_PREFETCH + o, _MM_HINT_T0); \
            __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;                                       \
            int64_t i = 0;                                                                        \
            for (; i + 4 <= nb; i += 4) {                                                         \
                const uint8_t *p = row + i * bytes;                                               \
                acc0 = x16_pair_##ID(p, p + bytes, xs->g + 96 * i, acc0);                        \
                acc1 = x16_pair_##ID(p + 2 * bytes, p + 3 * bytes, xs->g + 96 * i + 32, acc1);   \
            }                                                                                     \
            for (; i < nb; i += 2) {                                                              \
                const uint8_t *p = row + i * bytes;                                               \
                acc0 = x16_pair_##ID(p, i + 1 < nb ? p + bytes : p, xs->g + 384 * (i / 4) + 32 * (i / 2 % 2), acc0); \
            }                                                                                     \
            y[r - r0] = hsum(_mm256_add_ps(acc0, acc1));                                          \
        }                                                                                         \
    }
KVQ_WX16_PAIR(Q4_0, 18, 2, 0, -8.0f)
KVQ_WX16_PAIR(Q4_1, 20, 4, 0, 0.0f)
KVQ_WX16_PAIR(Q5_0, 22, 6, 2, -16.0f)
KVQ_WX16_PAIR(Q5_1, 24, 8, 4, 0.0f)
#undef KVQ_WX16_PAIR

/* q8_0 block by block (x's natural-order planes): |w| against x with w's
 * signs (codes_Q8_0), no offset term. */
KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE __m256 x16_block_Q8_0(const uint8_t *blk, const kvq_wx16 *xs, int64_t i,
                                                               __m256 acc) {
    __m256i hv = _mm256_loadu_si256((const __m256i *)(xs->h + 32 * i));
    __m256i lv = _mm256_loadu_si256((const __m256i *)(xs->l + 32 * i));
    const __m256i u = codes_Q8_0(blk, &hv, &lv);
    const __m256i p = _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(u, hv), _mm256_set1_epi16(256)),
                                       _mm256_madd_epi16(_mm256_maddubs_epi16(u, lv), _mm256_set1_epi16(1)));
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(_cvtsh_ss(kvq_load_u16(blk)) * xs->e[i]), acc);
}

KVQ_TARGET_AVX2 static void mvx16_Q8_0(const void *w, size_t rb, const kvq_wx16 *xs, int64_t n, int64_t r0,
                                       int64_t r1, float *y) {
    const int64_t nb = n / 32;
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *row = (const uint8_t *)w + (size_t)r * rb;
        for (size_t o = 0; o < rb; o += 64) _mm_prefetch((const char *)row + X16_PREFETCH + o, _MM_HINT_T0);
        __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
        int64_t i = 0;
        for (; i + 2 <= nb; i += 2) {
            acc0 = x16_block_Q8_0(row + 34 * i, xs, i, acc0);
            acc1 = x16_block_Q8_0(row + 34 * (i + 1), xs, i + 1, acc1);
        }
        if (i < nb) acc0 = x16_block_Q8_0(row + 34 * i, xs, i, acc0);
        y[r - r0] = hsum(_mm256_add_ps(acc0, acc1));
    }
}

KVQ_TARGET_AVX2 void kvq_wmatvec_x16_avx2(const kvq_wtype_traits *t, const void *w, size_t row_bytes,
                                          const kvq_wx16 *xs, int64_t n, int64_t r0, int64_t r1, float *y) {
    switch (t->type) {
    case KVQ_WTYPE_Q4_0: mvx16_Q4_0(w, row_bytes, xs, n, r0, r1, y); break;
    case KVQ_WTYPE_Q4_1: mvx16_Q4_1(w, row_bytes, xs, n, r0, r1, y); break;
    case KVQ_WTYPE_Q5_0: mvx16_Q5_0(w, row_bytes, xs, n, r0, r1, y); break;
    case KVQ_WTYPE_Q5_1: mvx16_Q5_1(w, row_bytes, xs, n, r0, r1, y); break;
    case KVQ_WTYPE_Q8_0: mvx16_Q8_0(w, row_bytes, xs, n, r0, r1, y); break;
    }
}
#endif
