/* wtype.h — model weight types (ggml block formats) and their kernels.
 *
 * One traits table keyed by ggml type id (wtypes.def); consumers only talk to
 * the table. A weight matrix is stored as rows of n values of one type, each
 * row n / block_size blocks (row_bytes = n / block_size * block_bytes).
 *
 * Kernels take the activations x as plain floats: there is nothing to
 * prepare per matvec, so the caller splits the rows [0, rows) into ranges
 * and runs them on its own threads with the same x. Kernels never allocate,
 * never fail and create no threads; the caller validates shapes once with
 * kvq_wtype_check_n().
 *
 * Numerics. The reference kernels dequantize with the ggml-exact block
 * bodies and accumulate each dot product in double, so they are the true
 * product of the stored weights with x up to one final rounding to float.
 * The AVX2 / AVX-512 kernels dequantize the same floats (bit-exact) and
 * accumulate in float with FMA in several partial sums; their documented
 * error bound (checked by tests/unit/test_wtype.c) is
 *     |y - y_ref| <= 1e-6 * sum_k |W[r,k] x[k]|   (n <= 16384).
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

struct kvq_wtype_traits {
    int type;               /* ggml type id */
    const char *name;       /* "q4_1" */
    int block_size;         /* values per block */
    int block_bytes;        /* bytes per block */
    kvq_wdequant_fn dequant;                  /* reference, bit-exact with ggml */
    kvq_wdequant_fn dequant_isa[KVQ_ISA_COUNT]; /* the same bits, per ISA */
    kvq_wmatvec_fn matvec[KVQ_ISA_COUNT];     /* never NULL: a missing ISA kernel */
    kvq_wmatmul_fn matmul[KVQ_ISA_COUNT];     /* takes the next lower one */
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
