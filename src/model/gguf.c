/* gguf.c — GGUF v2/v3 parser over the file's bytes in memory (mapped, or
 * read into memory of its own: kvq_gguf_open_file).
 *
 * Layout (little-endian): "GGUF", u32 version, u64 tensor_count,
 * u64 kv_count; kv_count entries (string key, u32 type, value); tensor_count
 * infos (string name, u32 n_dims, u64 ne[n_dims], u32 ggml type, u64 offset
 * from the data section); padding to the alignment; the data section.
 * A string is u64 length + bytes; an array is u32 element type, u64 count,
 * elements. v1 (u32 counts) is refused; v2 and v3 share this layout.
 *
 * Every read goes through a reader that checks the bytes are there, and
 * every count is checked against the bytes left before anything is
 * allocated or looped over, so a hostile file costs at most O(file size). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/hash.h"
#include "model/gguf.h"

#define GGUF_HEADER_BYTES 24
/* Smallest encodings, used to bound counts by the bytes left: a kv is a key
 * length, a type and a 1-byte value; a tensor info is a name length, n_dims,
 * one dim, a type and an offset. */
#define GGUF_MIN_KV_BYTES (8 + 4 + 1)
#define GGUF_MIN_TENSOR_BYTES (8 + 4 + 8 + 4 + 8)
#define GGUF_MIN_STRING_BYTES 8
#define GGUF_MIN_ARRAY_BYTES (4 + 8)
/* Items kvq_gguf_kv_value_text shows of an array. */
#define GGUF_TEXT_ITEMS 8

/* ------------------------------------------------------------ type tables */

static const char *const value_type_names[KVQ_GGUF_TYPE_COUNT] = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64",
};

static const char *const array_type_names[KVQ_GGUF_TYPE_COUNT] = {
    "array[u8]",  "array[i8]",   "array[u16]",   "array[i16]",  "array[u32]",
    "array[i32]", "array[f32]",  "array[bool]",  "array[string]", "array[array]",
    "array[u64]", "array[i64]",  "array[f64]",
};

/* Bytes of a fixed-size value; 0 for string and array. */
static const uint8_t value_type_bytes[KVQ_GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

const char *kvq_gguf_type_name(uint32_t type) {
    return type < KVQ_GGUF_TYPE_COUNT ? value_type_names[type] : NULL;
}

/* Block sizes and bytes from ggml's type_traits. Ids ggml removed (4, 5,
 * 31-33, 36-38) are absent. Q8_1 is ggml's current 36-byte block. */
static const kvq_ggml_type_info ggml_types[] = {
    [0] = {"f32", 1, 4, 1},         [1] = {"f16", 1, 2, 1},
    [2] = {"q4_0", 32, 18, 1},      [3] = {"q4_1", 32, 20, 1},
    [6] = {"q5_0", 32, 22, 1},      [7] = {"q5_1", 32, 24, 1},
    [8] = {"q8_0", 32, 34, 1},      [9] = {"q8_1", 32, 36, 0},
    [10] = {"q2_K", 256, 84, 0},    [11] = {"q3_K", 256, 110, 0},
    [12] = {"q4_K", 256, 144, 1},   [13] = {"q5_K", 256, 176, 1},
    [14] = {"q6_K", 256, 210, 1},   [15] = {"q8_K", 256, 292, 0},
    [16] = {"iq2_xxs", 256, 66, 0}, [17] = {"iq2_xs", 256, 74, 0},
    [18] = {"iq3_xxs", 256, 98, 0}, [19] = {"iq1_s", 256, 50, 0},
    [20] = {"iq4_nl", 32, 18, 0},   [21] = {"iq3_s", 256, 110, 0},
    [22] = {"iq2_s", 256, 82, 0},   [23] = {"iq4_xs", 256, 136, 0},
    [24] = {"i8", 1, 1, 0},         [25] = {"i16", 1, 2, 0},
    [26] = {"i32", 1, 4, 0},        [27] = {"i64", 1, 8, 0},
    [28] = {"f64", 1, 8, 0},        [29] = {"iq1_m", 256, 56, 0},
    [30] = {"bf16", 1, 2, 1},       [34] = {"tq1_0", 256, 54, 0},
    [35] = {"tq2_0", 256, 66, 0},   [39] = {"mxfp4", 32, 17, 0},
    [40] = {"nvfp4", 64, 36, 0},    [41] = {"q1_0", 128, 18, 0},
};

const kvq_ggml_type_info *kvq_ggml_type_get(uint32_t id) {
    if (id >= KVQ_ARRAY_LEN(ggml_types) || !ggml_types[id].name) return NULL;
    return &ggml_types[id];
}

int kvq_gguf_str_eq(kvq_gguf_str s, const char *c) {
    const size_t n = strlen(c);
    return s.len == n && memcmp(s.ptr, c, n) == 0;
}

/* ----------------------------------------------------------------- handle */

typedef struct gguf_kv {
    char *key;          /* NUL-terminated copy */
    uint32_t type;      /* kvq_gguf_type */
    uint32_t elem_type; /* arrays: element type */
    uint64_t n;         /* arrays: element count */
    uint64_t key_pos;   /* file offset of the key (for messages) */
    uint64_t value_pos; /* file offset of the value; of the first element for arrays */
} gguf_kv;

/* A name and its index, sorted by name for lookups and duplicate checks. */
typedef struct gguf_name {
    const char *name;
    int64_t index;
} gguf_name;

struct kvq_gguf {
    const uint8_t *base; /* (size) the file */
    uint64_t size;
    void *map;           /* the mapping to unmap, NULL for kvq_gguf_open_memory */
    int resident;        /* map is anonymous memory holding a copy of the file */
    uint32_t version;
    uint64_t alignment;
    uint64_t data_start; /* file offset of the data section */
    int64_t n_kv;
    gguf_kv *kv;               /* (n_kv) in file order */
    gguf_name *kv_by_key;      /* (n_kv) sorted by key */
    int64_t n_tensors;
    kvq_gguf_tensor *tensors;  /* (n_tensors) in file order */
    gguf_name *tensor_by_name; /* (n_tensors) sorted by name */
};

/* ----------------------------------------------------------------- reader */

typedef struct reader {
    const uint8_t *p;
    uint64_t size;
    uint64_t pos;     /* <= size, always */
    char where[112];  /* what is being read, for messages: "kv 3 'general.name'" */
} reader;

#define NO_OFFSET UINT64_MAX

static kvq_status bad(const reader *r, uint64_t at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static kvq_status bad(const reader *r, uint64_t at, const char *fmt, ...) {
    char msg[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (at == NO_OFFSET) return kvq_fail(KVQ_ERR_FORMAT, "gguf: %s: %s", r->where, msg);
    return kvq_fail(KVQ_ERR_FORMAT, "gguf: %s: %s at offset %" PRIu64, r->where, msg, at);
}

/* Sets r->where to "what index 'name'", the name cut and made printable. */
static void set_where(reader *r, const char *what, int64_t index, const char *name, uint64_t len) {
    int n = snprintf(r->where, sizeof r->where, "%s %" PRId64, what, index);
    if (!name || n < 0) return;
    char shown[68];
    size_t k = 0;
    for (uint64_t i = 0; i < len && k < 64; i++) {
        const unsigned char c = (unsigned char)name[i];
        shown[k++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
    }
    if (len > 64) memcpy(shown + 61, "...", 3);
    shown[k] = '\0';
    snprintf(r->where + n, sizeof r->where - (size_t)n, " '%s'", shown);
}

static uint64_t load_le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static kvq_status read_uint(reader *r, int n, const char *what, uint64_t *v) {
    if (r->size - r->pos < (uint64_t)n)
        return bad(r, r->pos, "%s truncated: needs %d bytes, file has %" PRIu64, what, n, r->size);
    *v = load_le(r->p + r->pos, n);
    r->pos += (uint64_t)n;
    return KVQ_OK;
}

static kvq_status read_u32(reader *r, const char *what, uint32_t *v) {
    uint64_t x = 0;
    KVQ_FORWARD(read_uint(r, 4, what, &x));
    *v = (uint32_t)x;
    return KVQ_OK;
}

static kvq_status read_string(reader *r, const char *what, kvq_gguf_str *out) {
    const uint64_t at = r->pos;
    uint64_t len = 0;
    KVQ_FORWARD(read_uint(r, 8, what, &len));
    if (len > r->size - r->pos)
        return bad(r, at, "%s length %" PRIu64 " runs past end of file (%" PRIu64 " bytes)", what, len,
                   r->size);
    out->ptr = (const char *)r->p + r->pos;
    out->len = len;
    r->pos += len;
    return KVQ_OK;
}

/* A key or tensor name: non-empty and without NUL bytes (we look it up as a
 * C string). Returns a NUL-terminated copy in *out. */
static kvq_status read_name(reader *r, const char *what, char **out) {
    const uint64_t at = r->pos;
    kvq_gguf_str s = {0};
    KVQ_FORWARD(read_string(r, what, &s));
    if (s.len == 0) return bad(r, at, "empty %s", what);
    if (memchr(s.ptr, 0, s.len)) return bad(r, at, "%s holds a NUL byte", what);
    char *copy = malloc(s.len + 1);
    if (!copy) return kvq_fail(KVQ_ERR_NOMEM, "gguf: out of memory for a %" PRIu64 "-byte %s", s.len, what);
    memcpy(copy, s.ptr, s.len);
    copy[s.len] = '\0';
    *out = copy;
    return KVQ_OK;
}

static kvq_status check_value_type(const reader *r, uint64_t at, uint32_t type, const char *what) {
    if (type >= KVQ_GGUF_TYPE_COUNT) return bad(r, at, "unknown %s %" PRIu32, what, type);
    return KVQ_OK;
}

/* Validates n values of one type at r->pos and steps over them. depth is
 * the nesting level of the array holding them (0 for a scalar kv). */
static kvq_status skip_values(reader *r, uint32_t type, uint64_t n, int depth) {
    const uint64_t left = r->size - r->pos;
    if (type == KVQ_GGUF_STRING) {
        if (n > left / GGUF_MIN_STRING_BYTES)
            return bad(r, r->pos, "%" PRIu64 " strings need at least %" PRIu64 " bytes, %" PRIu64 " left", n,
                       n > UINT64_MAX / GGUF_MIN_STRING_BYTES ? UINT64_MAX : n * GGUF_MIN_STRING_BYTES, left);
        for (uint64_t i = 0; i < n; i++) {
            kvq_gguf_str s = {0};
            KVQ_FORWARD(read_string(r, "string", &s));
        }
        return KVQ_OK;
    }
    if (type == KVQ_GGUF_ARRAY) {
        if (depth >= KVQ_GGUF_MAX_ARRAY_DEPTH)
            return bad(r, r->pos, "arrays nested deeper than %d levels", KVQ_GGUF_MAX_ARRAY_DEPTH);
        if (n > left / GGUF_MIN_ARRAY_BYTES)
            return bad(r, r->pos, "%" PRIu64 " nested arrays need at least %d bytes each, %" PRIu64 " left", n,
                       GGUF_MIN_ARRAY_BYTES, left);
        for (uint64_t i = 0; i < n; i++) {
            const uint64_t at = r->pos;
            uint32_t elem = 0;
            uint64_t count = 0;
            KVQ_FORWARD(read_u32(r, "array element type", &elem));
            KVQ_FORWARD(check_value_type(r, at, elem, "array element type"));
            KVQ_FORWARD(read_uint(r, 8, "array length", &count));
            KVQ_FORWARD(skip_values(r, elem, count, depth + 1));
        }
        return KVQ_OK;
    }
    const uint64_t bytes = value_type_bytes[type];
    if (n > left / bytes)
        return bad(r, r->pos, "%" PRIu64 " %s values need %s%" PRIu64 " bytes, %" PRIu64 " left", n,
                   value_type_names[type], n > UINT64_MAX / bytes ? "more than " : "",
                   n > UINT64_MAX / bytes ? UINT64_MAX : n * bytes, left);
    if (type == KVQ_GGUF_BOOL)
        for (uint64_t i = 0; i < n; i++)
            if (r->p[r->pos + i] > 1)
                return bad(r, r->pos + i, "bool value %u is neither 0 nor 1", r->p[r->pos + i]);
    r->pos += n * bytes;
    return KVQ_OK;
}

static int by_name(const void *a, const void *b) {
    return strcmp(((const gguf_name *)a)->name, ((const gguf_name *)b)->name);
}

/* ---------------------------------------------------------------- parsing */

static kvq_status parse_header(reader *r, kvq_gguf *g, uint64_t *n_tensors, uint64_t *n_kv) {
    snprintf(r->where, sizeof r->where, "header");
    if (r->size < 4 || memcmp(r->p, "GGUF", 4) != 0) {
        if (r->size < 4) return bad(r, 0, "file of %" PRIu64 " bytes is too short for the magic", r->size);
        return bad(r, 0, "bad magic %02x %02x %02x %02x (want \"GGUF\")", r->p[0], r->p[1], r->p[2], r->p[3]);
    }
    r->pos = 4;
    KVQ_FORWARD(read_u32(r, "version", &g->version));
    if (g->version == 0x02000000u || g->version == 0x03000000u)
        return bad(r, 4, "big-endian GGUF (version %u byte-swapped) is not supported", g->version >> 24);
    if (g->version != 2 && g->version != 3)
        return bad(r, 4, "version %" PRIu32 " is not supported (2 and 3 are)", g->version);
    KVQ_FORWARD(read_uint(r, 8, "tensor count", n_tensors));
    KVQ_FORWARD(read_uint(r, 8, "kv count", n_kv));
    /* Each entry needs a minimum number of bytes: bound both counts before
     * allocating for them. */
    const uint64_t left = r->size - r->pos;
    if (*n_kv > left / GGUF_MIN_KV_BYTES)
        return bad(r, 16, "kv count %" PRIu64 " cannot fit in the %" PRIu64 " bytes left (each needs %d)", *n_kv,
                   left, GGUF_MIN_KV_BYTES);
    if (*n_tensors > (left - *n_kv * GGUF_MIN_KV_BYTES) / GGUF_MIN_TENSOR_BYTES)
        return bad(r, 8, "tensor count %" PRIu64 " cannot fit in the %" PRIu64 " bytes left (each needs %d)",
                   *n_tensors, left - *n_kv * GGUF_MIN_KV_BYTES, GGUF_MIN_TENSOR_BYTES);
    return KVQ_OK;
}

static kvq_status parse_kvs(reader *r, kvq_gguf *g) {
    for (int64_t i = 0; i < g->n_kv; i++) {
        gguf_kv *kv = &g->kv[i];
        set_where(r, "kv", i, NULL, 0);
        kv->key_pos = r->pos;
        KVQ_FORWARD(read_name(r, "key", &kv->key));
        set_where(r, "kv", i, kv->key, strlen(kv->key));
        const uint64_t type_pos = r->pos;
        KVQ_FORWARD(read_u32(r, "value type", &kv->type));
        KVQ_FORWARD(check_value_type(r, type_pos, kv->type, "value type"));
        if (kv->type == KVQ_GGUF_ARRAY) {
            const uint64_t elem_pos = r->pos;
            KVQ_FORWARD(read_u32(r, "array element type", &kv->elem_type));
            KVQ_FORWARD(check_value_type(r, elem_pos, kv->elem_type, "array element type"));
            KVQ_FORWARD(read_uint(r, 8, "array length", &kv->n));
            kv->value_pos = r->pos;
            KVQ_FORWARD(skip_values(r, kv->elem_type, kv->n, 1));
        } else {
            kv->value_pos = r->pos;
            KVQ_FORWARD(skip_values(r, kv->type, 1, 0));
        }
    }
    for (int64_t i = 0; i < g->n_kv; i++) g->kv_by_key[i] = (gguf_name){g->kv[i].key, i};
    qsort(g->kv_by_key, (size_t)g->n_kv, sizeof *g->kv_by_key, by_name);
    for (int64_t i = 1; i < g->n_kv; i++) {
        const gguf_name *a = &g->kv_by_key[i - 1], *b = &g->kv_by_key[i];
        if (strcmp(a->name, b->name) == 0) {
            const int64_t first = a->index < b->index ? a->index : b->index;
            const int64_t second = a->index < b->index ? b->index : a->index;
            set_where(r, "kv", second, a->name, strlen(a->name));
            return bad(r, g->kv[second].key_pos, "duplicate key (also kv %" PRId64 ")", first);
        }
    }
    return KVQ_OK;
}

static kvq_status parse_alignment(reader *r, kvq_gguf *g) {
    g->alignment = KVQ_GGUF_DEFAULT_ALIGNMENT;
    const int64_t i = kvq_gguf_find_key(g, "general.alignment");
    if (i < 0) return KVQ_OK;
    const gguf_kv *kv = &g->kv[i];
    set_where(r, "kv", i, kv->key, strlen(kv->key));
    if (kv->type != KVQ_GGUF_U32)
        return bad(r, kv->value_pos, "alignment has type %s, must be u32", value_type_names[kv->type]);
    const uint64_t a = load_le(g->base + kv->value_pos, 4);
    if (a == 0 || (a & (a - 1)) != 0)
        return bad(r, kv->value_pos, "alignment %" PRIu64 " is not a power of two", a);
    g->alignment = a;
    return KVQ_OK;
}

static kvq_status parse_tensor_info(reader *r, kvq_gguf *g, int64_t i) {
    kvq_gguf_tensor *t = &g->tensors[i];
    set_where(r, "tensor", i, NULL, 0);
    char *name = NULL;
    KVQ_FORWARD(read_name(r, "tensor name", &name));
    t->name = name;
    set_where(r, "tensor", i, name, strlen(name));

    const uint64_t dims_pos = r->pos;
    uint32_t n_dims = 0;
    KVQ_FORWARD(read_u32(r, "n_dims", &n_dims));
    if (n_dims < 1 || n_dims > KVQ_GGUF_MAX_DIMS)
        return bad(r, dims_pos, "n_dims %" PRIu32 " is not in [1, %d]", n_dims, KVQ_GGUF_MAX_DIMS);
    t->n_dims = (int)n_dims;
    int64_t n_elements = 1;
    for (int d = 0; d < KVQ_GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (int d = 0; d < t->n_dims; d++) {
        const uint64_t at = r->pos;
        uint64_t ne = 0;
        KVQ_FORWARD(read_uint(r, 8, "dim", &ne));
        if (ne == 0 || ne > (uint64_t)INT64_MAX)
            return bad(r, at, "dim %d is %" PRIu64 ", must be in [1, 2^63)", d, ne);
        t->ne[d] = (int64_t)ne;
        if (__builtin_mul_overflow(n_elements, t->ne[d], &n_elements))
            return bad(r, at, "element count overflows at dim %d (%" PRIu64 ")", d, ne);
    }
    t->n_elements = n_elements;

    const uint64_t type_pos = r->pos;
    KVQ_FORWARD(read_u32(r, "ggml type", &t->type));
    const kvq_ggml_type_info *ti = kvq_ggml_type_get(t->type);
    if (!ti) return bad(r, type_pos, "unknown ggml type %" PRIu32, t->type);
    if (t->ne[0] % ti->block_size != 0)
        return bad(r, dims_pos, "dim 0 (%" PRId64 ") is not a multiple of the %s block size %" PRIu32, t->ne[0],
                   ti->name, ti->block_size);
    /* Bytes = blocks per row * block bytes * rows; n_elements fits int64,
     * so only the block-bytes product can overflow. */
    const uint64_t blocks = (uint64_t)(n_elements / ti->block_size);
    if (__builtin_mul_overflow(blocks, (uint64_t)ti->block_bytes, &t->n_bytes))
        return bad(r, dims_pos, "byte size of %" PRId64 " %s values overflows", n_elements, ti->name);

    const uint64_t off_pos = r->pos;
    uint64_t rel = 0;
    KVQ_FORWARD(read_uint(r, 8, "data offset", &rel));
    if (rel % g->alignment != 0)
        return bad(r, off_pos, "data offset %" PRIu64 " is not a multiple of the alignment %" PRIu64, rel,
                   g->alignment);
    t->offset = rel; /* made absolute once the data section is known */
    return KVQ_OK;
}

typedef struct extent {
    uint64_t begin, end;
    int64_t index;
} extent;

static int by_begin(const void *a, const void *b) {
    const extent *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* Places every tensor in the data section: inside the file, no overlaps. */
static kvq_status place_tensors(reader *r, kvq_gguf *g) {
    snprintf(r->where, sizeof r->where, "data section");
    const uint64_t infos_end = r->pos;
    uint64_t start;
    if (__builtin_add_overflow(infos_end, g->alignment - 1, &start))
        return bad(r, infos_end, "data section start overflows");
    g->data_start = start - start % g->alignment;
    if (g->n_tensors == 0) return KVQ_OK;
    if (g->data_start > g->size)
        return bad(r, NO_OFFSET, "starts at %" PRIu64 ", beyond end of file (%" PRIu64 " bytes)", g->data_start,
                   g->size);
    extent *ext = malloc((size_t)g->n_tensors * sizeof *ext);
    if (!ext) return kvq_fail(KVQ_ERR_NOMEM, "gguf: out of memory for %" PRId64 " tensors", g->n_tensors);
    kvq_status s = KVQ_OK;
    for (int64_t i = 0; i < g->n_tensors && s == KVQ_OK; i++) {
        kvq_gguf_tensor *t = &g->tensors[i];
        set_where(r, "tensor", i, t->name, strlen(t->name));
        uint64_t begin, end;
        if (__builtin_add_overflow(g->data_start, t->offset, &begin) ||
            __builtin_add_overflow(begin, t->n_bytes, &end)) {
            s = bad(r, NO_OFFSET, "data at %" PRIu64 " + %" PRIu64 ", %" PRIu64 " bytes, overflows 64 bits",
                    g->data_start, t->offset, t->n_bytes);
            break;
        }
        if (end > g->size) {
            s = bad(r, NO_OFFSET, "data [%" PRIu64 ", %" PRIu64 ") beyond end of file (%" PRIu64 " bytes)", begin,
                    end, g->size);
            break;
        }
        t->offset = begin;
        t->data = g->base + begin;
        ext[i] = (extent){begin, end, i};
    }
    if (s == KVQ_OK) {
        qsort(ext, (size_t)g->n_tensors, sizeof *ext, by_begin);
        for (int64_t k = 1; k < g->n_tensors; k++) {
            if (ext[k].begin < ext[k - 1].end) {
                const kvq_gguf_tensor *a = &g->tensors[ext[k - 1].index], *b = &g->tensors[ext[k].index];
                set_where(r, "tensor", ext[k].index, b->name, strlen(b->name));
                s = bad(r, NO_OFFSET,
                        "data [%" PRIu64 ", %" PRIu64 ") overlaps tensor %" PRId64 " '%s' [%" PRIu64 ", %" PRIu64 ")",
                        ext[k].begin, ext[k].end, ext[k - 1].index, a->name, ext[k - 1].begin, ext[k - 1].end);
                break;
            }
        }
    }
    free(ext);
    return s;
}

static kvq_status parse_tensors(reader *r, kvq_gguf *g) {
    for (int64_t i = 0; i < g->n_tensors; i++) KVQ_FORWARD(parse_tensor_info(r, g, i));
    for (int64_t i = 0; i < g->n_tensors; i++) g->tensor_by_name[i] = (gguf_name){g->tensors[i].name, i};
    qsort(g->tensor_by_name, (size_t)g->n_tensors, sizeof *g->tensor_by_name, by_name);
    for (int64_t i = 1; i < g->n_tensors; i++) {
        const gguf_name *a = &g->tensor_by_name[i - 1], *b = &g->tensor_by_name[i];
        if (strcmp(a->name, b->name) == 0) {
            const int64_t first = a->index < b->index ? a->index : b->index;
            const int64_t second = a->index < b->index ? b->index : a->index;
            set_where(r, "tensor", second, a->name, strlen(a->name));
            return bad(r, NO_OFFSET, "duplicate tensor name (also tensor %" PRId64 ")", first);
        }
    }
    return place_tensors(r, g);
}

static kvq_status parse(kvq_gguf *g) {
    reader r = {.p = g->base, .size = g->size, .pos = 0};
    uint64_t n_tensors = 0, n_kv = 0;
    KVQ_FORWARD(parse_header(&r, g, &n_tensors, &n_kv));
    /* Both counts are bounded by the file size (checked above), so these
     * products cannot overflow. */
    g->kv = calloc((size_t)n_kv + 1, sizeof *g->kv);
    g->kv_by_key = calloc((size_t)n_kv + 1, sizeof *g->kv_by_key);
    g->tensors = calloc((size_t)n_tensors + 1, sizeof *g->tensors);
    g->tensor_by_name = calloc((size_t)n_tensors + 1, sizeof *g->tensor_by_name);
    if (!g->kv || !g->kv_by_key || !g->tensors || !g->tensor_by_name)
        return kvq_fail(KVQ_ERR_NOMEM, "gguf: out of memory for %" PRIu64 " keys and %" PRIu64 " tensors", n_kv,
                        n_tensors);
    g->n_kv = (int64_t)n_kv;
    g->n_tensors = (int64_t)n_tensors;
    KVQ_FORWARD(parse_kvs(&r, g));
    KVQ_FORWARD(parse_alignment(&r, g));
    return parse_tensors(&r, g);
}

/* ------------------------------------------------------------- open/close */

void kvq_gguf_close(kvq_gguf *g) {
    if (!g) return;
    if (g->kv)
        for (int64_t i = 0; i < g->n_kv; i++) free(g->kv[i].key);
    if (g->tensors)
        for (int64_t i = 0; i < g->n_tensors; i++) free((char *)g->tensors[i].name);
    free(g->kv);
    free(g->kv_by_key);
    free(g->tensors);
    free(g->tensor_by_name);
    if (g->map) munmap(g->map, (size_t)g->size);
    free(g);
}

static kvq_status open_mapped(const uint8_t *base, uint64_t size, void *map, kvq_gguf **out) {
    kvq_gguf *g = calloc(1, sizeof *g);
    if (!g) {
        if (map) munmap(map, (size_t)size);
        return kvq_fail(KVQ_ERR_NOMEM, "gguf: out of memory");
    }
    g->base = base;
    g->size = size;
    g->map = map;
    const kvq_status s = parse(g);
    if (s != KVQ_OK) {
        kvq_gguf_close(g);
        return s;
    }
    *out = g;
    return KVQ_OK;
}

kvq_status kvq_gguf_open_memory(const void *data, size_t size, kvq_gguf **out) {
    KVQ_RETURN_IF(!out || (!data && size), KVQ_ERR_INVALID_ARG, "gguf: NULL argument");
    *out = NULL;
    static const uint8_t empty[1];
    return open_mapped(data ? data : empty, size, NULL, out);
}

/* THP's page size: a resident file starts on such a boundary so that all of
 * it can sit in huge pages. */
#define HUGE_PAGE ((size_t)2 << 20)

/* size bytes of anonymous memory on a HUGE_PAGE boundary, advised for huge
 * pages (systems whose THP setting is "madvise" need the advice), or NULL.
 * The slack mapped for the alignment is unmapped again, so the region is
 * released by one munmap(p, size). */
static void *map_huge(size_t size) {
    if (size > SIZE_MAX - HUGE_PAGE) return NULL;
    uint8_t *m = mmap(NULL, size + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return NULL;
    uint8_t *p = (uint8_t *)(((uintptr_t)m + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    const size_t page = (size_t)sysconf(_SC_PAGESIZE), end = (size + page - 1) / page * page;
    if (p > m) munmap(m, (size_t)(p - m));
    if ((size_t)(m + size + HUGE_PAGE - p) > end) munmap(p + end, (size_t)(m + size + HUGE_PAGE - p) - end);
#ifdef MADV_HUGEPAGE
    madvise(p, size, MADV_HUGEPAGE); /* advice only: without it the pages are small */
#endif
    return p;
}

/* Reads all size bytes of fd into dst; KVQ_ERR_IO naming path otherwise. */
static kvq_status read_all(int fd, uint8_t *dst, size_t size, const char *path) {
    size_t got = 0;
    while (got < size) {
        const size_t want = size - got < ((size_t)1 << 30) ? size - got : (size_t)1 << 30;
        const ssize_t r = pread(fd, dst + got, want, (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return kvq_fail(KVQ_ERR_IO, "gguf: cannot read '%s': %s", path, strerror(errno));
        if (r == 0)
            return kvq_fail(KVQ_ERR_IO, "gguf: '%s' ended at byte %zu of %zu while being read (changed?)", path,
                            got, size);
        got += (size_t)r;
    }
    return KVQ_OK;
}

/* Moves g, parsed from its file's mapping, onto a copy of the file in
 * memory of its own (read from fd) and unmaps the file. Where that memory
 * cannot be had, g stays mapped (KVQ_OK); a failed read is the error. */
static kvq_status make_resident(kvq_gguf *g, int fd, const char *path) {
    const size_t size = (size_t)g->size;
    uint8_t *copy = map_huge(size);
    if (!copy) return KVQ_OK;
    const kvq_status s = read_all(fd, copy, size, path);
    if (s != KVQ_OK) {
        munmap(copy, size);
        return s;
    }
    mprotect(copy, size, PROT_READ); /* as read-only as the mapping: a stray write faults */
    for (int64_t i = 0; i < g->n_tensors; i++)
        g->tensors[i].data = copy + ((const uint8_t *)g->tensors[i].data - g->base);
    munmap(g->map, size);
    g->base = copy;
    g->map = copy;
    g->resident = 1;
    return KVQ_OK;
}

kvq_status kvq_gguf_open_file(const char *path, int resident, kvq_gguf **out) {
    KVQ_RETURN_IF(!path || !out, KVQ_ERR_INVALID_ARG, "gguf: NULL argument");
    *out = NULL;
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return kvq_fail(KVQ_ERR_IO, "gguf: cannot open '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        const int e = errno;
        close(fd);
        return kvq_fail(KVQ_ERR_IO, "gguf: cannot stat '%s': %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return kvq_fail(KVQ_ERR_IO, "gguf: '%s' is not a regular file", path);
    }
    if (st.st_size < GGUF_HEADER_BYTES) {
        close(fd);
        return kvq_fail(KVQ_ERR_FORMAT, "gguf: header: '%s' has %lld bytes, fewer than a GGUF header (%d)", path,
                        (long long)st.st_size, GGUF_HEADER_BYTES);
    }
    const size_t size = (size_t)st.st_size;
    /* Mapped and checked first, so that a file that is not a model (or is
     * cut short) costs no read of the whole of it. */
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        const int e = errno;
        close(fd);
        return kvq_fail(KVQ_ERR_IO, "gguf: cannot map '%s': %s", path, strerror(e));
    }
    kvq_status s = open_mapped(map, (uint64_t)size, map, out);
    if (s == KVQ_OK && resident && kvq_gguf_resident_fits(size, kvq_mem_available())) {
        s = make_resident(*out, fd, path);
        if (s != KVQ_OK) {
            kvq_gguf_close(*out);
            *out = NULL;
        }
    }
    close(fd);
    return s;
}

int kvq_gguf_resident_fits(size_t file_bytes, size_t mem_available) {
    return mem_available && file_bytes <= mem_available / 4 * 3;
}

kvq_status kvq_gguf_open(const char *path, kvq_gguf **out) { return kvq_gguf_open_file(path, 0, out); }

int kvq_gguf_resident(const kvq_gguf *g) { return g ? g->resident : 0; }

/* ------------------------------------------------------------ file facts */

uint32_t kvq_gguf_version(const kvq_gguf *g) { return g ? g->version : 0; }
uint64_t kvq_gguf_file_size(const kvq_gguf *g) { return g ? g->size : 0; }
uint64_t kvq_gguf_alignment(const kvq_gguf *g) { return g ? g->alignment : 0; }
uint64_t kvq_gguf_data_offset(const kvq_gguf *g) { return g ? g->data_start : 0; }

uint64_t kvq_gguf_meta_hash(const kvq_gguf *g) {
    return g ? kvq_fnv1a64(KVQ_FNV64_INIT, g->base, (size_t)g->data_start) : 0;
}
int64_t kvq_gguf_kv_count(const kvq_gguf *g) { return g ? g->n_kv : 0; }
int64_t kvq_gguf_tensor_count(const kvq_gguf *g) { return g ? g->n_tensors : 0; }

/* --------------------------------------------------------- keys and values */

static const gguf_kv *kv_at(const kvq_gguf *g, int64_t i) {
    return g && i >= 0 && i < g->n_kv ? &g->kv[i] : NULL;
}

int64_t kvq_gguf_find_key(const kvq_gguf *g, const char *key) {
    if (!g || !key) return -1;
    const gguf_name probe = {key, 0};
    const gguf_name *hit = bsearch(&probe, g->kv_by_key, (size_t)g->n_kv, sizeof probe, by_name);
    return hit ? hit->index : -1;
}

const char *kvq_gguf_kv_key(const kvq_gguf *g, int64_t i) {
    const gguf_kv *kv = kv_at(g, i);
    return kv ? kv->key : NULL;
}

kvq_gguf_type kvq_gguf_kv_type_of(const kvq_gguf *g, int64_t i) {
    const gguf_kv *kv = kv_at(g, i);
    return kv ? (kvq_gguf_type)kv->type : KVQ_GGUF_TYPE_COUNT;
}

void kvq_gguf_kv_array_info(const kvq_gguf *g, int64_t i, kvq_gguf_type *elem, uint64_t *n) {
    const gguf_kv *kv = kv_at(g, i);
    const int is_array = kv && kv->type == KVQ_GGUF_ARRAY;
    if (elem) *elem = is_array ? (kvq_gguf_type)kv->elem_type : KVQ_GGUF_TYPE_COUNT;
    if (n) *n = is_array ? kv->n : 0;
}

const char *kvq_gguf_kv_type_name(const kvq_gguf *g, int64_t i) {
    const gguf_kv *kv = kv_at(g, i);
    if (!kv) return NULL;
    return kv->type == KVQ_GGUF_ARRAY ? array_type_names[kv->elem_type] : value_type_names[kv->type];
}

/* An integer value: signed types fill *sv,
 * unsigned ones *uv. Returns 1 if the type is an integer type. */
static int load_int(const kvq_gguf *g, uint32_t type, uint64_t pos, int *is_signed, int64_t *sv, uint64_t *uv) {
    const uint8_t *p = g->base + pos;
    switch (type) {
    case KVQ_GGUF_U8: case KVQ_GGUF_U16: case KVQ_GGUF_U32: case KVQ_GGUF_U64:
        *is_signed = 0;
        *uv = load_le(p, value_type_bytes[type]);
        return 1;
    case KVQ_GGUF_I8: *is_signed = 1; *sv = (int8_t)p[0]; return 1;
    case KVQ_GGUF_I16: *is_signed = 1; *sv = (int16_t)(uint16_t)load_le(p, 2); return 1;
    case KVQ_GGUF_I32: *is_signed = 1; *sv = (int32_t)(uint32_t)load_le(p, 4); return 1;
    case KVQ_GGUF_I64: *is_signed = 1; *sv = (int64_t)load_le(p, 8); return 1;
    default: return 0;
    }
}

/* 1 if the integer lies in [lo, hi]. */
static int int_in_range(int is_signed, int64_t sv, uint64_t uv, int64_t lo, uint64_t hi) {
    if (is_signed) return sv >= lo && (sv < 0 || (uint64_t)sv <= hi);
    return uv <= hi && (lo <= 0 || uv >= (uint64_t)lo);
}

static double load_float(const kvq_gguf *g, uint32_t type, uint64_t pos) {
    const uint64_t bits = load_le(g->base + pos, type == KVQ_GGUF_F32 ? 4 : 8);
    if (type == KVQ_GGUF_F32) {
        const uint32_t b32 = (uint32_t)bits;
        float f;
        memcpy(&f, &b32, sizeof f);
        return f;
    }
    double d;
    memcpy(&d, &bits, sizeof d);
    return d;
}

static kvq_status lookup(const kvq_gguf *g, const char *key, const gguf_kv **out) {
    KVQ_RETURN_IF(!g || !key, KVQ_ERR_INVALID_ARG, "gguf: NULL argument");
    const int64_t i = kvq_gguf_find_key(g, key);
    KVQ_RETURN_IF(i < 0, KVQ_ERR_FORMAT, "gguf: missing key '%s'", key);
    *out = &g->kv[i];
    return KVQ_OK;
}

static kvq_status get_int(const kvq_gguf *g, const char *key, int64_t lo, uint64_t hi, const char *want,
                          int64_t *sv, uint64_t *uv, int *is_signed) {
    const gguf_kv *kv = NULL;
    KVQ_FORWARD(lookup(g, key, &kv));
    if (!load_int(g, kv->type, kv->value_pos, is_signed, sv, uv))
        return kvq_fail(KVQ_ERR_FORMAT, "gguf: key '%s' has type %s, want an integer (%s)", key,
                        kvq_gguf_kv_type_name(g, kv - g->kv), want);
    if (!int_in_range(*is_signed, *sv, *uv, lo, hi)) {
        if (*is_signed)
            return kvq_fail(KVQ_ERR_FORMAT, "gguf: key '%s' = %" PRId64 " does not fit %s", key, *sv, want);
        return kvq_fail(KVQ_ERR_FORMAT, "gguf: key '%s' = %" PRIu64 " does not fit %s", key, *uv, want);
    }
    return KVQ_OK;
}

kvq_status kvq_gguf_get_u32(const kvq_gguf *g, const char *key, uint32_t *out) {
    int64_t sv = 0;
    uint64_t uv = 0;
    int is_signed;
    KVQ_FORWARD(get_int(g, key, 0, UINT32_MAX, "u32", &sv, &uv, &is_signed));
    *out = (uint32_t)(is_signed ? (uint64_t)sv : uv);
    return KVQ_OK;
}

kvq_status kvq_gguf_get_i32(const kvq_gguf *g, const char *key, int32_t *out) {
    int64_t sv = 0;
    uint64_t uv = 0;
    int is_signed;
    KVQ_FORWARD(get_int(g, key, INT32_MIN, INT32_MAX, "i32", &sv, &uv, &is_signed));
    *out = (int32_t)(is_signed ? sv : (int64_t)uv);
    return KVQ_OK;
}

kvq_status kvq_gguf_get_u64(const kvq_gguf *g, const char *key, uint64_t *out) {
    int64_t sv = 0;
    uint64_t uv = 0;
    int is_signed;
    KVQ_FORWARD(get_int(g, key, 0, UINT64_MAX, "u64", &sv, &uv, &is_signed));
    *out = is_signed ? (uint64_t)sv : uv;
    return KVQ_OK;
}

kvq_status kvq_gguf_get_f32(const kvq_gguf *g, const char *key, float *out) {
    const gguf_kv *kv = NULL;
    KVQ_FORWARD(lookup(g, key, &kv));
    if (kv->type != KVQ_GGUF_F32 && kv->type != KVQ_GGUF_F64)
        return kvq_fail(KVQ_ERR_FORMAT, "gguf: key '%s' has type %s, want f32", key,
                        kvq_gguf_kv_type_name(g, kv - g->kv));
    const double d = load_float(g, kv->type, kv->value_pos);
    if (!isfinite(d) || fabs(d) > 3.4028234663852886e38)
        return kvq_fail(KVQ_ERR_FORMAT, "gguf: key '%s' = %g does not fit f32 or is not finite", key, d);
    *out = (float)d;
    return KVQ_OK;
}

kvq_status kvq_gguf_get_bool(const kvq_gguf *g, const char *key, int *out) {
    const gguf_kv *kv = NULL;
    KVQ_FORWARD(lookup(g, key, &kv));
    if (kv->type != KVQ_GGUF_BOOL)
        return kvq_fail(KVQ_ERR_FORMAT, "gguf: key '%s' has type %s, want bool", key,
                        kvq_gguf_kv_type_name(g, kv - g->kv));
    *out = g->base[kv->value_pos];
    return KVQ_OK;
}

static kvq_gguf_str load_str(const kvq_gguf *g, uint64_t pos) {
    return (kvq_gguf_str){(const char *)g->base + pos + 8, load_le(g->base + pos, 8)};
}

kvq_status kvq_gguf_get_str(const kvq_gguf *g, const char *key, kvq_gguf_str *out) {
    const gguf_kv *kv = NULL;
    KVQ_FORWARD(lookup(g, key, &kv));
    if (kv->type != KVQ_GGUF_STRING)
        return kvq_fail(KVQ_ERR_FORMAT, "gguf: key '%s' has type %s, want string", key,
                        kvq_gguf_kv_type_name(g, kv - g->kv));
    *out = load_str(g, kv->value_pos);
    return KVQ_OK;
}

kvq_status kvq_gguf_get_arr_len(const kvq_gguf *g, const char *key, uint64_t *n) {
    const gguf_kv *kv = NULL;
    KVQ_FORWARD(lookup(g, key, &kv));
    if (kv->type != KVQ_GGUF_ARRAY)
        return kvq_fail(KVQ_ERR_FORMAT, "gguf: key '%s' has type %s, want an array", key,
                        value_type_names[kv->type]);
    *n = kv->n;
    return KVQ_OK;
}

/* The array kv of that key, with n elements of an accepted type. */
static kvq_status lookup_array(const kvq_gguf *g, const char *key, uint64_t n, int (*accept)(uint32_t),
                               const char *want, const gguf_kv **out) {
    KVQ_FORWARD(lookup(g, key, out));
    const gguf_kv *kv = *out;
    if (kv->type != KVQ_GGUF_ARRAY || !accept(kv->elem_type))
        return kvq_fail(KVQ_ERR_FORMAT, "gguf: key '%s' has type %s, want %s", key,
                        kvq_gguf_kv_type_name(g, kv - g->kv), want);
    if (kv->n != n)
        return kvq_fail(KVQ_ERR_FORMAT, "gguf: key '%s' has %" PRIu64 " elements, want %" PRIu64, key, kv->n, n);
    return KVQ_OK;
}

static int is_string(uint32_t t) { return t == KVQ_GGUF_STRING; }
static int is_float(uint32_t t) { return t == KVQ_GGUF_F32 || t == KVQ_GGUF_F64; }
static int is_int(uint32_t t) {
    return t <= KVQ_GGUF_I32 || t == KVQ_GGUF_U64 || t == KVQ_GGUF_I64;
}

kvq_status kvq_gguf_get_arr_str(const kvq_gguf *g, const char *key, kvq_gguf_str *dst, uint64_t n) {
    const gguf_kv *kv = NULL;
    KVQ_FORWARD(lookup_array(g, key, n, is_string, "array[string]", &kv));
    uint64_t pos = kv->value_pos;
    for (uint64_t i = 0; i < n; i++) {
        dst[i] = load_str(g, pos);
        pos += 8 + dst[i].len;
    }
    return KVQ_OK;
}

kvq_status kvq_gguf_get_arr_f32(const kvq_gguf *g, const char *key, float *dst, uint64_t n) {
    const gguf_kv *kv = NULL;
    KVQ_FORWARD(lookup_array(g, key, n, is_float, "array[f32]", &kv));
    const uint64_t bytes = value_type_bytes[kv->elem_type];
    for (uint64_t i = 0; i < n; i++) {
        const double d = load_float(g, kv->elem_type, kv->value_pos + i * bytes);
        if (isfinite(d) && fabs(d) > 3.4028234663852886e38)
            return kvq_fail(KVQ_ERR_FORMAT, "gguf: key '%s' element %" PRIu64 " = %g does not fit f32", key, i, d);
        dst[i] = (float)d;
    }
    return KVQ_OK;
}

kvq_status kvq_gguf_get_arr_i32(const kvq_gguf *g, const char *key, int32_t lo, int32_t hi, int32_t *dst,
                                uint64_t n) {
    const gguf_kv *kv = NULL;
    KVQ_RETURN_IF(lo > hi, KVQ_ERR_INVALID_ARG, "gguf: empty range [%" PRId32 ", %" PRId32 "]", lo, hi);
    KVQ_FORWARD(lookup_array(g, key, n, is_int, "an integer array", &kv));
    const uint64_t bytes = value_type_bytes[kv->elem_type];
    for (uint64_t i = 0; i < n; i++) {
        int is_signed;
        int64_t sv = 0;
        uint64_t uv = 0;
        load_int(g, kv->elem_type, kv->value_pos + i * bytes, &is_signed, &sv, &uv);
        if (hi < 0 ? !is_signed || sv > hi || sv < lo : !int_in_range(is_signed, sv, uv, lo, (uint64_t)hi)) {
            if (is_signed)
                return kvq_fail(KVQ_ERR_FORMAT,
                                "gguf: key '%s' element %" PRIu64 " = %" PRId64 " is not in [%" PRId32 ", %" PRId32 "]",
                                key, i, sv, lo, hi);
            return kvq_fail(KVQ_ERR_FORMAT,
                            "gguf: key '%s' element %" PRIu64 " = %" PRIu64 " is not in [%" PRId32 ", %" PRId32 "]",
                            key, i, uv, lo, hi);
        }
        dst[i] = (int32_t)(is_signed ? sv : (int64_t)uv);
    }
    return KVQ_OK;
}

/* ------------------------------------------------------------- value text */

/* Text into a fixed buffer; what does not fit is dropped and marked "...". */
typedef struct text {
    char *buf;
    size_t cap, len; /* len <= cap - 1 */
    int cut;
} text;

static void put(text *t, const char *s, size_t n) {
    if (t->cut) return;
    const size_t room = t->cap - 1 - t->len;
    if (n > room) {
        n = room;
        t->cut = 1;
    }
    memcpy(t->buf + t->len, s, n);
    t->len += n;
}

static void putf(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void putf(text *t, const char *fmt, ...) {
    char tmp[64];
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0) put(t, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

static void put_quoted(text *t, const char *s, uint64_t len) {
    put(t, "\"", 1);
    for (uint64_t i = 0; i < len && !t->cut; i++) {
        const unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '\\': put(t, "\\\\", 2); break;
        case '"': put(t, "\\\"", 2); break;
        case '\n': put(t, "\\n", 2); break;
        case '\r': put(t, "\\r", 2); break;
        case '\t': put(t, "\\t", 2); break;
        default:
            if (c < 0x20 || c == 0x7f) putf(t, "\\x%02x", c);
            else put(t, (const char *)&c, 1);
        }
    }
    put(t, "\"", 1);
}

/* Position after the value(s) at pos; the bytes were validated at open,
 * and validation bounded the nesting, so the recursion is shallow. */
static uint64_t skip_n(const kvq_gguf *g, uint32_t type, uint64_t n, uint64_t pos);

static uint64_t skip_one(const kvq_gguf *g, uint32_t type, uint64_t pos) {
    if (type == KVQ_GGUF_STRING) return pos + 8 + load_le(g->base + pos, 8);
    if (type == KVQ_GGUF_ARRAY)
        return skip_n(g, (uint32_t)load_le(g->base + pos, 4), load_le(g->base + pos + 4, 8), pos + 12);
    return pos + value_type_bytes[type];
}

static uint64_t skip_n(const kvq_gguf *g, uint32_t type, uint64_t n, uint64_t pos) {
    if (type != KVQ_GGUF_STRING && type != KVQ_GGUF_ARRAY) return pos + n * value_type_bytes[type];
    for (uint64_t i = 0; i < n; i++) pos = skip_one(g, type, pos);
    return pos;
}

/* Writes one value (a nested array as its summary); returns the position
 * after it. */
static uint64_t put_value(text *t, const kvq_gguf *g, uint32_t type, uint64_t pos) {
    int is_signed;
    int64_t sv = 0;
    uint64_t uv = 0;
    if (load_int(g, type, pos, &is_signed, &sv, &uv)) {
        if (is_signed) putf(t, "%" PRId64, sv);
        else putf(t, "%" PRIu64, uv);
        return pos + value_type_bytes[type];
    }
    switch (type) {
    case KVQ_GGUF_F32: putf(t, "%.9g", load_float(g, type, pos)); return pos + 4;
    case KVQ_GGUF_F64: putf(t, "%.17g", load_float(g, type, pos)); return pos + 8;
    case KVQ_GGUF_BOOL: put(t, g->base[pos] ? "true" : "false", g->base[pos] ? 4 : 5); return pos + 1;
    case KVQ_GGUF_STRING: {
        const kvq_gguf_str s = load_str(g, pos);
        put_quoted(t, s.ptr, s.len);
        return pos + 8 + s.len;
    }
    default: {
        const uint32_t elem = (uint32_t)load_le(g->base + pos, 4);
        const uint64_t n = load_le(g->base + pos + 4, 8);
        putf(t, "[%s x %" PRIu64 "]", value_type_names[elem], n);
        return skip_n(g, elem, n, pos + 12);
    }
    }
}

kvq_status kvq_gguf_kv_value_text(const kvq_gguf *g, int64_t i, char *buf, size_t cap) {
    const gguf_kv *kv = kv_at(g, i);
    KVQ_RETURN_IF(!kv, KVQ_ERR_INVALID_ARG, "gguf: no kv %" PRId64, i);
    KVQ_RETURN_IF(!buf || cap < 4, KVQ_ERR_INVALID_ARG, "gguf: value text needs a buffer of 4 bytes or more");
    text t = {buf, cap, 0, 0};
    if (kv->type == KVQ_GGUF_ARRAY) {
        putf(&t, "[%s x %" PRIu64 "]", value_type_names[kv->elem_type], kv->n);
        uint64_t pos = kv->value_pos;
        for (uint64_t k = 0; k < kv->n && k < GGUF_TEXT_ITEMS; k++) {
            put(&t, k ? ", " : " ", k ? 2 : 1);
            pos = put_value(&t, g, kv->elem_type, pos);
        }
        if (kv->n > GGUF_TEXT_ITEMS) put(&t, ", ...", 5);
    } else {
        put_value(&t, g, kv->type, kv->value_pos);
    }
    if (t.cut) {
        /* Room for "...", without splitting a UTF-8 sequence. */
        size_t len = t.len < 3 ? 0 : t.len - 3;
        while (len > 0 && ((unsigned char)buf[len] & 0xC0) == 0x80) len--;
        memcpy(buf + len, "...", 3);
        t.len = len + 3;
    }
    buf[t.len] = '\0';
    return KVQ_OK;
}

/* ---------------------------------------------------------------- tensors */

const kvq_gguf_tensor *kvq_gguf_tensor_at(const kvq_gguf *g, int64_t i) {
    return g && i >= 0 && i < g->n_tensors ? &g->tensors[i] : NULL;
}

const kvq_gguf_tensor *kvq_gguf_find_tensor(const kvq_gguf *g, const char *name) {
    if (!g || !name) return NULL;
    const gguf_name probe = {name, 0};
    const gguf_name *hit = bsearch(&probe, g->tensor_by_name, (size_t)g->n_tensors, sizeof probe, by_name);
    return hit ? &g->tensors[hit->index] : NULL;
}

kvq_status kvq_gguf_expect_tensor(const kvq_gguf *g, const char *name, int n_dims, const int64_t *ne,
                                  const kvq_gguf_tensor **out) {
    KVQ_RETURN_IF(!g || !name || !out || (n_dims > 0 && !ne), KVQ_ERR_INVALID_ARG, "gguf: NULL argument");
    const kvq_gguf_tensor *t = kvq_gguf_find_tensor(g, name);
    KVQ_RETURN_IF(!t, KVQ_ERR_FORMAT, "gguf: missing tensor '%s'", name);
    KVQ_RETURN_IF(t->n_dims != n_dims, KVQ_ERR_FORMAT, "gguf: tensor '%s' has %d dims, want %d", name, t->n_dims,
                  n_dims);
    for (int d = 0; d < n_dims; d++)
        KVQ_RETURN_IF(ne[d] >= 0 && t->ne[d] != ne[d], KVQ_ERR_FORMAT,
                      "gguf: tensor '%s' dim %d is %" PRId64 ", want %" PRId64, name, d, t->ne[d], ne[d]);
    *out = t;
    return KVQ_OK;
}

const char *kvq_gguf_tensor_name(const kvq_gguf *g, int64_t i) {
    const kvq_gguf_tensor *t = kvq_gguf_tensor_at(g, i);
    return t ? t->name : NULL;
}

int kvq_gguf_tensor_type(const kvq_gguf *g, int64_t i) {
    const kvq_gguf_tensor *t = kvq_gguf_tensor_at(g, i);
    return t ? (int)t->type : -1;
}

const char *kvq_gguf_tensor_type_name(const kvq_gguf *g, int64_t i) {
    const kvq_gguf_tensor *t = kvq_gguf_tensor_at(g, i);
    return t ? kvq_ggml_type_get(t->type)->name : NULL;
}

int kvq_gguf_tensor_type_supported(const kvq_gguf *g, int64_t i) {
    const kvq_gguf_tensor *t = kvq_gguf_tensor_at(g, i);
    return t ? kvq_ggml_type_get(t->type)->supported : 0;
}

int kvq_gguf_tensor_n_dims(const kvq_gguf *g, int64_t i) {
    const kvq_gguf_tensor *t = kvq_gguf_tensor_at(g, i);
    return t ? t->n_dims : 0;
}

int64_t kvq_gguf_tensor_dim(const kvq_gguf *g, int64_t i, int d) {
    const kvq_gguf_tensor *t = kvq_gguf_tensor_at(g, i);
    if (!t || d < 0) return 0;
    return d < KVQ_GGUF_MAX_DIMS ? t->ne[d] : 1;
}

uint64_t kvq_gguf_tensor_offset(const kvq_gguf *g, int64_t i) {
    const kvq_gguf_tensor *t = kvq_gguf_tensor_at(g, i);
    return t ? t->offset : 0;
}

uint64_t kvq_gguf_tensor_bytes(const kvq_gguf *g, int64_t i) {
    const kvq_gguf_tensor *t = kvq_gguf_tensor_at(g, i);
    return t ? t->n_bytes : 0;
}
