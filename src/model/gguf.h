/* gguf.h — GGUF v2/v3 files, mapped read-only or read into memory, every
 * field validated at open.
 *
 * kvq_gguf_open() (public, kvq.h) maps the file and checks all of it before
 * returning: header, every key/value (nested arrays included), every tensor
 * info (type, dims, size), alignment, that each tensor's data lies inside
 * the file, aligned, without overlapping another, and that no key or tensor
 * name appears twice. After a successful open, the accessors below read
 * only validated bytes; a file that fails any check gets KVQ_ERR_FORMAT and
 * a message naming the field and its offset.
 *
 * Byte order: GGUF is little-endian; values are assembled byte by byte, so
 * nothing here depends on the host's order or on alignment.
 */
#ifndef KVQ_GGUF_H
#define KVQ_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "common/common.h"

/* GGUF value types (numbers from the format). */
typedef enum kvq_gguf_type {
    KVQ_GGUF_U8 = 0,
    KVQ_GGUF_I8 = 1,
    KVQ_GGUF_U16 = 2,
    KVQ_GGUF_I16 = 3,
    KVQ_GGUF_U32 = 4,
    KVQ_GGUF_I32 = 5,
    KVQ_GGUF_F32 = 6,
    KVQ_GGUF_BOOL = 7,
    KVQ_GGUF_STRING = 8,
    KVQ_GGUF_ARRAY = 9,
    KVQ_GGUF_U64 = 10,
    KVQ_GGUF_I64 = 11,
    KVQ_GGUF_F64 = 12
} kvq_gguf_type;

#define KVQ_GGUF_TYPE_COUNT 13
#define KVQ_GGUF_MAX_DIMS 4
/* Nested arrays deeper than this are refused (bounds the recursion). */
#define KVQ_GGUF_MAX_ARRAY_DEPTH 8
/* Used when the file has no general.alignment key. */
#define KVQ_GGUF_DEFAULT_ALIGNMENT 32

/* "u8", "string", "array", ...; NULL outside the enum. */
const char *kvq_gguf_type_name(uint32_t type);

/* ggml tensor types (ids from ggml.h; ids ggml removed are unknown). */
typedef enum kvq_ggml_type {
    KVQ_GGML_TYPE_F32 = 0,
    KVQ_GGML_TYPE_F16 = 1,
    KVQ_GGML_TYPE_Q4_0 = 2,
    KVQ_GGML_TYPE_Q4_1 = 3,
    KVQ_GGML_TYPE_Q5_0 = 6,
    KVQ_GGML_TYPE_Q5_1 = 7,
    KVQ_GGML_TYPE_Q8_0 = 8,
    KVQ_GGML_TYPE_Q4_K = 12,
    KVQ_GGML_TYPE_Q5_K = 13,
    KVQ_GGML_TYPE_Q6_K = 14,
    KVQ_GGML_TYPE_BF16 = 30
} kvq_ggml_type;

/* One row of the ggml type table: a row of ne0 values takes
 * ne0 / block_size * block_bytes bytes (ne0 a multiple of block_size). */
typedef struct kvq_ggml_type_info {
    const char *name;      /* ggml's name: "f32", "q4_1", "q4_K", ... */
    uint32_t block_size;   /* values per block */
    uint32_t block_bytes;  /* bytes per block */
    int supported;         /* 1 if kvq's model code has kernels for it */
} kvq_ggml_type_info;

/* The table row for a ggml type id; NULL for an id ggml never had or
 * removed (such a tensor makes the file malformed for kvq). */
const kvq_ggml_type_info *kvq_ggml_type_get(uint32_t id);

/* A string inside the mapping: len bytes, not NUL-terminated, may hold any
 * bytes (token strings do). */
typedef struct kvq_gguf_str {
    const char *ptr;
    uint64_t len;
} kvq_gguf_str;

/* 1 if s holds exactly the bytes of the C string c. */
int kvq_gguf_str_eq(kvq_gguf_str s, const char *c);

typedef struct kvq_gguf_tensor {
    const char *name;         /* NUL-terminated copy, non-empty, unique */
    uint32_t type;            /* ggml type id, in the table */
    int n_dims;               /* 1..KVQ_GGUF_MAX_DIMS */
    int64_t ne[KVQ_GGUF_MAX_DIMS]; /* ne[0] varies fastest; 1 past n_dims */
    int64_t n_elements;       /* product of ne */
    uint64_t offset;          /* of the data, from the start of the file */
    uint64_t n_bytes;         /* of the data */
    const void *data;         /* (n_bytes) inside the mapping */
} kvq_gguf_tensor;

/* kvq_gguf_open(), or with resident set the whole file read into memory of
 * its own, advised for huge pages (the model's weights: decode reads them
 * through fewer TLB entries), once the mapped file has passed every check;
 * it stays mapped where kvq_gguf_resident_fits() says no or the memory
 * cannot be had. */
kvq_status kvq_gguf_open_file(const char *path, int resident, kvq_gguf **out);

/* 1 if a file of file_bytes is read into memory with MemAvailable at
 * mem_available: known (not 0) and at least 4/3 of the file. A file that
 * would take most of the free memory is better paged by the kernel than
 * copied (the context still needs room for its KV), and where the free
 * memory is unknown (or reads 0, under pressure) mapping is the safe side. */
int kvq_gguf_resident_fits(size_t file_bytes, size_t mem_available);

/* 1 if g holds a resident copy of its file, 0 if it maps it (or borrows). */
int kvq_gguf_resident(const kvq_gguf *g);

/* Opens GGUF bytes already in memory (tests, fuzzing); the handle borrows
 * data, which must outlive it. Same checks as kvq_gguf_open(). */
kvq_status kvq_gguf_open_memory(const void *data, size_t size, kvq_gguf **out);

/* FNV-1a 64 of every byte before the tensor data: header, metadata (the
 * tokenizer included) and tensor infos. Sessions store it to recognize
 * the model they were made with. */
uint64_t kvq_gguf_meta_hash(const kvq_gguf *g);

/* ---- keys and values.
 * The typed getters fail with KVQ_ERR_FORMAT and a message naming the key
 * when it is missing or its value has the wrong type or does not fit. For an
 * optional key, test kvq_gguf_find_key() first. */

/* Index of the key (0..kv_count-1), or -1. */
int64_t kvq_gguf_find_key(const kvq_gguf *g, const char *key);
/* Value type of kv i (KVQ_GGUF_*); for arrays also the element type and
 * the length. */
kvq_gguf_type kvq_gguf_kv_type_of(const kvq_gguf *g, int64_t i);
void kvq_gguf_kv_array_info(const kvq_gguf *g, int64_t i, kvq_gguf_type *elem, uint64_t *n);

/* Integers of any integer type whose value fits the result. */
kvq_status kvq_gguf_get_u32(const kvq_gguf *g, const char *key, uint32_t *out);
kvq_status kvq_gguf_get_i32(const kvq_gguf *g, const char *key, int32_t *out);
kvq_status kvq_gguf_get_u64(const kvq_gguf *g, const char *key, uint64_t *out);
/* f32 or f64 (rounded to float); refused if not finite or beyond float range. */
kvq_status kvq_gguf_get_f32(const kvq_gguf *g, const char *key, float *out);
kvq_status kvq_gguf_get_bool(const kvq_gguf *g, const char *key, int *out);
kvq_status kvq_gguf_get_str(const kvq_gguf *g, const char *key, kvq_gguf_str *out);

/* Arrays: the element count (any element type), then a copy into a buffer
 * of exactly n elements (n must equal the count). */
kvq_status kvq_gguf_get_arr_len(const kvq_gguf *g, const char *key, uint64_t *n);
/* dst: (n) views into the mapping; elements must be strings. */
kvq_status kvq_gguf_get_arr_str(const kvq_gguf *g, const char *key, kvq_gguf_str *dst, uint64_t n);
/* dst: (n) floats; elements f32, or f64 within float range (non-finite
 * elements pass through: token scores may hold -inf). */
kvq_status kvq_gguf_get_arr_f32(const kvq_gguf *g, const char *key, float *dst, uint64_t n);
/* dst: (n) ints; elements of any integer type, each in [lo, hi]. */
kvq_status kvq_gguf_get_arr_i32(const kvq_gguf *g, const char *key, int32_t lo, int32_t hi,
                                int32_t *dst, uint64_t n);

/* ---- tensors. */

/* Tensor i in file order (0..tensor_count-1), NULL out of range. */
const kvq_gguf_tensor *kvq_gguf_tensor_at(const kvq_gguf *g, int64_t i);
/* The tensor of that name, or NULL. */
const kvq_gguf_tensor *kvq_gguf_find_tensor(const kvq_gguf *g, const char *name);
/* The tensor of that name, checked: present, n_dims dims equal to ne[0..n_dims)
 * (a negative ne[d] matches any size). KVQ_ERR_FORMAT names what differs. */
kvq_status kvq_gguf_expect_tensor(const kvq_gguf *g, const char *name, int n_dims,
                                  const int64_t *ne, const kvq_gguf_tensor **out);

#endif
