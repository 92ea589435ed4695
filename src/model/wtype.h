/* wtype.h — model weight types (ggml block formats) and their kernels.
 *
 * One traits table keyed by ggml type id (wtypes.def); consumers only talk to
 * the table. A weight matrix is stored as rows of n values of one type, each
 * row n / block_size blocks (row_bytes = n / block_size * block_bytes).
 *
 * Three routes:
 * - float x, every type: t->matvec / t->matmul read x as floats. This is
 *   the exact route (prefill by default, decode with float_decode):
 *   the 32-value block types dequantize in registers and FMA with x
 *   (w . x = d (u . x) + c (sum of the block's x), block sums of x shared
 *   by every row); matmul dequantizes a tile of rows once and reuses it
 *   for every token.
 * - integer x, the 32-value block types (Q4_0 Q4_1 Q5_0 Q5_1 Q8_0): x is
 *   quantized like ggml's q8_0 activations (int8 blocks of 32 with a
 *   float scale, plus the block's sum for the min/offset terms) and the
 *   kernels take dot products of integer codes (vpdpbusd / vpmaddubsw),
 *   one float multiply per block. Faster for prefill matmul, less
 *   accurate (bound below). t->matvec_q / t->matmul_q are set for these
 *   types (NULL otherwise); the caller prepares x once with
 *   kvq_wtype_prep_x() and every thread runs its row range on the same
 *   prepared x.
 * - int16 x, the same types, one token: x quantized to 16-bit codes per
 *   block of 32 held as two int8 planes (kvq_wx16, kvq_wtype_prep_x16),
 *   256 times finer than the integer route; t->matvec_x16. Decode's route
 *   where kvq_wtype_x16_fast(): the float-x matvec is compute-bound
 *   below the read bandwidth, the integer one is not.
 * Kernels never allocate, never fail and create no threads; the caller
 * validates shapes once with kvq_wtype_check_n().
 *
 * Numerics. The reference float-x kernels dequantize with the ggml-exact
 * block bodies and accumulate each dot product in double, so they are the
 * true product of the stored weights with x up to one final rounding. The
 * SIMD float-x kernels accumulate in float with FMA (the 32-value types
 * regroup each block as above, which differs from the reference only by
 * float rounding, including q4_1/q5_1's rounding of d u + m); the SIMD
 * integer kernels are exact in
 * their integer dot products and round once per block. Both satisfy
 * (checked by tests/unit/test_wtype.c), against the reference run on the
 * same input (x, or the prepared x^ = d * q):
 *     |y - y_ref| <= 4e-6 * sum_k |W[r,k]| |x[k]|   (n <= 16384).
 * The integer route's x^ differs from x by at most d / 2 per value, d =
 * max |x| of the block / 127, so for it against the float reference
 *     |y - W x| <= sum_blocks (max|x_b| / 254) * sum_{k in b} |W[r,k]| + the above;
 * measured on outlier-channel activations this is ~1e-3 .. 1e-2 of
 * sum_k |W[r,k] x[k]| (ggml's CPU backend makes the same trade). The
 * int16 kernels meet the first bound against the int16 reference on x^ =
 * e (256 h + l), and x^ differs from x by at most e = max|x_b| / 32512:
 *     |y - W x| <= sum_blocks e_b * sum_{k in b} |W[r,k]| + the above
 * (both checked by tests/unit/test_wtype.c).
 */
#ifndef KVQ_WTYPE_H
#define KVQ_WTYPE_H

#include <stddef.h>
#include <stdint.h>

#include "common/common.h"

/* ggml type ids. */
enum {
#define KVQ_WTYPE(ID, ggml_id, name, bs, bytes) KVQ_WTYPE_##ID = ggml_id,
#include "model/wtypes.def"
#undef KVQ_WTYPE
};

typedef struct kvq_wtype_traits kvq_wtype_traits;

/* n_blocks blocks at src -> n_blocks * block_size floats at dst. */
typedef void (*kvq_wdequant_fn)(const void *src, float *dst, int64_t n_blocks);

/* Matvec for decode over the row range [r0, r1):
 *   y[r - r0] = sum_k W[r, k] x[k]
 * w: (rows, row_bytes) the whole matrix; x: (n); y: (r1 - r0). */
typedef void (*kvq_wmatvec_fn)(const kvq_wtype_traits *t, const void *w, size_t row_bytes,
                               const float *x, int64_t n, int64_t r0, int64_t r1, float *y);

/* Matmul for prefill over the row range [r0, r1):
 *   Y[i, r] = sum_k X[i, k] W[r, k]   for i < n_tok, r0 <= r < r1
 * x: (n_tok, n); y: (n_tok, ldy) with the row range written at columns
 * [r0, r1), so threads splitting the rows write disjoint columns of one Y. */
typedef void (*kvq_wmatmul_fn)(const kvq_wtype_traits *t, const void *w, size_t row_bytes,
                               const float *x, int64_t n_tok, int64_t n, int64_t r0, int64_t r1,
                               float *y, int64_t ldy);

/* Activations prepared for the integer kernels (kvq_wtype_prep_x):
 * per token, blocks of 32 values x[k] ~ d * q[k]. Pointers into the
 * caller's scratch. */
typedef struct kvq_wxq {
    const int8_t *q; /* (n_tok, n) round(x / d), in [-127, 127] */
    const float *d;  /* (n_tok, n / 32) max |x| of the block / 127 */
    const float *s;  /* (n_tok, n / 32) d * (sum of the block's q) */
} kvq_wxq;

/* One token of activations prepared for the int16 matvec
 * (kvq_wtype_prep_x16): per block of 32 values, 16-bit integer codes
 * split into two int8 planes,
 *     x[k] ~ e * (256 h[k] + l[k]),  h = round(x / d), d = max |x| / 127,
 *     e = d / 256, l = round((x - d h) / e) clamped to [-127, 127],
 * so |x - x^| <= e / 2 (e where l clamps, at |x - d h| = d / 2):
 * 256 times finer than kvq_wxq, the error of a 16-bit fixed-point x per
 * block. The kernel takes u . h and u . l with vpdpbusd and combines them
 * in int32. Besides the natural order, x is laid out for the two kernel
 * shapes, padded with zero blocks to a multiple of 4 blocks:
 * - g: per group of 4 blocks, 384 bytes: h of values 0-15 of each block
 *   (4 x 16 bytes), h of values 16-31, l likewise (the nibble order of
 *   q4/q5 codes), then per 32-bit lane (lanes 4j..4j+3 are block j's) e
 *   and s / 4 as 16 floats each. Where n / 32 = 2 mod 4 (576 values: 18
 *   blocks) the groups run over x twice, so a pair of contiguous rows is
 *   whole groups (the middle one holds the last 2 blocks of the first row
 *   and the first 2 of the second); zero blocks after;
 * - p: per pair of blocks, 256 bytes: h of both (64 bytes), l of both,
 *   then per lane (0-7 the first block's, 8-15 the second's) e and s / 8
 *   (q8_0). */
typedef struct kvq_wx16 {
    const uint8_t *g; /* (2 n_pad / 128, 384 bytes) */
    const uint8_t *p; /* (n_pad / 64, 256 bytes) */
    const int8_t *h;  /* (n_pad) h in natural order */
    const int8_t *l;  /* (n_pad) l in natural order */
    const float *e;   /* (n_pad / 32) e of each block, 0 in the padding */
    const float *s;   /* (n_pad / 32) sum of the block's x^ = e * sum(256 h + l) */
} kvq_wx16;

/* Matvec on int16-prepared x (one token): y as kvq_wmatvec_fn with x^. */
typedef void (*kvq_wmatvec_x16_fn)(const kvq_wtype_traits *t, const void *w, size_t row_bytes,
                                   const kvq_wx16 *xs, int64_t n, int64_t r0, int64_t r1, float *y);

/* Matvec / matmul on prepared x: as above, x replaced by xq (n_tok rows). */
typedef void (*kvq_wmatvec_q_fn)(const kvq_wtype_traits *t, const void *w, size_t row_bytes,
                                 const kvq_wxq *xq, int64_t n, int64_t r0, int64_t r1, float *y);
typedef void (*kvq_wmatmul_q_fn)(const kvq_wtype_traits *t, const void *w, size_t row_bytes,
                                 const kvq_wxq *xq, int64_t n_tok, int64_t n, int64_t r0,
                                 int64_t r1, float *y, int64_t ldy);

struct kvq_wtype_traits {
    int type;               /* ggml type id */
    const char *name;       /* "q4_1" */
    int block_size;         /* values per block */
    int block_bytes;        /* bytes per block */
    kvq_wdequant_fn dequant;                  /* reference, bit-exact with ggml */
    kvq_wdequant_fn dequant_isa[KVQ_ISA_COUNT]; /* the same bits, per ISA */
    kvq_wmatvec_fn matvec[KVQ_ISA_COUNT];     /* never NULL: a missing ISA kernel */
    kvq_wmatmul_fn matmul[KVQ_ISA_COUNT];     /* takes the next lower one */
    /* Integer route: both NULL for float-x types, else never NULL. */
    kvq_wmatvec_q_fn matvec_q[KVQ_ISA_COUNT];
    kvq_wmatmul_q_fn matmul_q[KVQ_ISA_COUNT];
    /* Int16 route (kvq_wx16), the same types; NULL for the others. The
     * AVX2 slot and the AVX-512 slot on a VNNI CPU are fast
     * (kvq_wtype_x16_fast); AVX-512 without VNNI runs the reference. */
    kvq_wmatvec_x16_fn matvec_x16[KVQ_ISA_COUNT];
};

/* The traits of a ggml type id; NULL if the type is not supported. */
const kvq_wtype_traits *kvq_wtype_find(int type);

/* Number of supported types and the i-th (table order); NULL past the end. */
int kvq_wtype_count(void);
const kvq_wtype_traits *kvq_wtype_at(int index);

/* KVQ_OK if rows of n values of this type can be used with the kernels:
 * n > 0 and a multiple of both the block size and 32. */
kvq_status kvq_wtype_check_n(const kvq_wtype_traits *t, int64_t n);

/* Bytes of a row of n values (n a multiple of the block size). */
static inline size_t kvq_wtype_row_bytes(const kvq_wtype_traits *t, int64_t n) {
    return (size_t)(n / t->block_size) * (size_t)t->block_bytes;
}

/* Scratch bytes kvq_wtype_prep_x needs for (n_tok, n) activations (n a
 * multiple of 32). */
static inline size_t kvq_wtype_prep_bytes(int64_t n_tok, int64_t n) {
    return (size_t)(n_tok * n) + 2 * sizeof(float) * (size_t)(n_tok * (n / 32));
}

/* Quantizes x: (n_tok, n) finite floats, n a multiple of 32, into scratch
 * (kvq_wtype_prep_bytes(n_tok, n) bytes, 4-byte aligned) and returns the
 * view the _q kernels take. Every ISA gives the reference's bits. */
kvq_wxq kvq_wtype_prep_x(kvq_isa isa, const float *x, int64_t n_tok, int64_t n, void *scratch);

/* The same, writing only tokens [t0, t1) (x still the whole (n_tok, n)),
 * so threads can share the quantization of many tokens; the returned view
 * covers all n_tok tokens. */
kvq_wxq kvq_wtype_prep_x_range(kvq_isa isa, const float *x, int64_t n_tok, int64_t n, int64_t t0,
                               int64_t t1, void *scratch);

/* 1 if the int16 matvec at this ISA is a SIMD kernel (AVX2, or AVX-512
 * with VNNI), not the reference that fills the other slots. */
int kvq_wtype_x16_fast(kvq_isa isa);

/* Scratch bytes kvq_wtype_prep_x16 needs for n values (a multiple of 32). */
static inline size_t kvq_wtype_prep_x16_bytes(int64_t n) {
    const size_t pad = (size_t)((n + 127) / 128 * 128);
    return 12 * pad + 2 * sizeof(float) * (pad / 32);
}

/* Prepares one token's x: (n) finite floats, n a multiple of 32, into
 * scratch (kvq_wtype_prep_x16_bytes(n) bytes, 64-byte aligned). Every ISA
 * gives the reference's bits. */
kvq_wx16 kvq_wtype_prep_x16(kvq_isa isa, const float *x, int64_t n, void *scratch);

/* Reference dequantization of one row of n values (the oracle's entry point,
 * kept simple for ctypes). KVQ_ERR_INVALID_ARG for an unknown type, NULL
 * pointers or n not a positive multiple of the block size. */
kvq_status kvq_wtype_dequantize_row(int type, const void *src, float *dst, int64_t n);

/* Kernels, one per ISA (wtype.c fills the table's slots with them). */
#define KVQ_WTYPE(ID, ggml_id, name, bs, bytes)                                       \
    void kvq_wdequant_##ID##_ref(const void *src, float *dst, int64_t n_blocks);     \
    void kvq_wdequant_##ID##_avx2(const void *src, float *dst, int64_t n_blocks);    \
    void kvq_wdequant_##ID##_avx512(const void *src, float *dst, int64_t n_blocks);
#include "model/wtypes.def"
#undef KVQ_WTYPE

void kvq_wquantize_x_ref(const float *x, int64_t n, int8_t *q, float *d, float *s);
void kvq_wquantize_x_avx2(const float *x, int64_t n, int8_t *q, float *d, float *s);
void kvq_wquantize_x_avx512(const float *x, int64_t n, int8_t *q, float *d, float *s);

/* Integer-route kernels. The AVX-512 slot runs the VNNI kernel where the
 * CPU has VNNI (kvq_cpu_has_vnni()), else the AVX512-BW one; both are
 * declared for the tests. */
#define KVQ_WQ_DECL(isa)                                                                     \
    void kvq_wmatvec_q_##isa(const kvq_wtype_traits *t, const void *w, size_t row_bytes,     \
                             const kvq_wxq *xq, int64_t n, int64_t r0, int64_t r1, float *y);  \
    void kvq_wmatmul_q_##isa(const kvq_wtype_traits *t, const void *w, size_t row_bytes,     \
                             const kvq_wxq *xq, int64_t n_tok, int64_t n, int64_t r0,          \
                             int64_t r1, float *y, int64_t ldy);
/* h, l, e, s of the n / 32 blocks of x (natural order only). */
void kvq_wquantize_x16_ref(const float *x, int64_t n, int8_t *h, int8_t *l, float *e, float *s);
void kvq_wquantize_x16_avx2(const float *x, int64_t n, int8_t *h, int8_t *l, float *e, float *s);
void kvq_wquantize_x16_avx512(const float *x, int64_t n, int8_t *h, int8_t *l, float *e, float *s);

#define KVQ_WX16_DECL(isa)                                                                   \
    void kvq_wmatvec_x16_##isa(const kvq_wtype_traits *t, const void *w, size_t row_bytes,   \
                               const kvq_wx16 *xs, int64_t n, int64_t r0, int64_t r1, float *y);
KVQ_WX16_DECL(ref)
KVQ_WX16_DECL(avx2)
KVQ_WX16_DECL(avx512)
KVQ_WX16_DECL(avx512vnni)
#undef KVQ_WX16_DECL

KVQ_WQ_DECL(ref)
KVQ_WQ_DECL(avx2)
KVQ_WQ_DECL(avx512)
KVQ_WQ_DECL(avx512bw)
KVQ_WQ_DECL(avx512vnni)
#undef KVQ_WQ_DECL

/* The float matmuls' weight tile: rows rb .. rb + nr - 1 (nr <= tile_rows),
 * values k0 .. k0 + len - 1, dequantized by dq into buf (tile_rows rows of
 * stride floats); wr[a] points at row a's values, and rows past nr repeat
 * the last one (edge tiles compute them and drop the results). */
void kvq_wmatmul_dequant_tile(const kvq_wtype_traits *t, kvq_wdequant_fn dq, const void *w, size_t row_bytes,
                              int64_t rb, int nr, int tile_rows, int64_t k0, int64_t len, float *buf,
                              int64_t stride, const float **wr);

/* Matmul on prepared x by running matvec kernel mv over slabs of rows
 * (for ISAs without a dedicated matmul kernel). */
void kvq_wmatmul_q_by_rows(const kvq_wtype_traits *t, kvq_wmatvec_q_fn mv, const void *w,
                           size_t row_bytes, const kvq_wxq *xq, int64_t n_tok, int64_t n,
                           int64_t r0, int64_t r1, float *y, int64_t ldy);

void kvq_wmatvec_ref(const kvq_wtype_traits *t, const void *w, size_t row_bytes, const float *x,
                     int64_t n, int64_t r0, int64_t r1, float *y);
void kvq_wmatmul_ref(const kvq_wtype_traits *t, const void *w, size_t row_bytes, const float *x,
                     int64_t n_tok, int64_t n, int64_t r0, int64_t r1, float *y, int64_t ldy);
void kvq_wmatvec_avx2(const kvq_wtype_traits *t, const void *w, size_t row_bytes, const float *x,
                      int64_t n, int64_t r0, int64_t r1, float *y);
void kvq_wmatmul_avx2(const kvq_wtype_traits *t, const void *w, size_t row_bytes, const float *x,
                      int64_t n_tok, int64_t n, int64_t r0, int64_t r1, float *y, int64_t ldy);
void kvq_wmatvec_avx512(const kvq_wtype_traits *t, const void *w, size_t row_bytes, const float *x,
                        int64_t n, int64_t r0, int64_t r1, float *y);
void kvq_wmatmul_avx512(const kvq_wtype_traits *t, const void *w, size_t row_bytes, const float *x,
                        int64_t n_tok, int64_t n, int64_t r0, int64_t r1, float *y, int64_t ldy);

#endif
