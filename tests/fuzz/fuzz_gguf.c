/* fuzz_gguf.c — the GGUF parser on arbitrary bytes.
 *
 * Opens the bytes with kvq_gguf_open_memory(); a file the parser accepts is
 * then walked through every accessor a model loader or `kvq info` uses:
 * every key (typed getters, value text at several buffer sizes, array
 * copies), every tensor (name lookup, shape check, its data bytes, and the
 * first row dequantized where the weight kernels take its type). Checks
 * that what open validated holds: unique names, data inside the file. */
#include <math.h>
#include <string.h>

#include "fuzz.h"
#include "model/gguf.h"
#include "model/wtype.h"

/* Array copies bigger than this are skipped (the fuzzer's memory limit). */
#define MAX_ARRAY_COPY 4096
/* Rows longer than this are not dequantized. */
#define MAX_ROW 4096

static void walk_kv(const kvq_gguf *g, int64_t i) {
    const char *key = kvq_gguf_kv_key(g, i);
    FUZZ_REQUIRE(key && kvq_gguf_kv_type_name(g, i), "kv %lld", (long long)i);
    FUZZ_REQUIRE(kvq_gguf_find_key(g, key) == i, "key '%s' is not unique", key);

    static const size_t caps[] = {4, 5, 16, 160, 4096};
    static char buf[4096]; // (cap) value text
    for (size_t k = 0; k < sizeof caps / sizeof caps[0]; k++) {
        FUZZ_REQUIRE(kvq_gguf_kv_value_text(g, i, buf, caps[k]) == KVQ_OK, "value text of '%s'", key);
        FUZZ_REQUIRE(strlen(buf) < caps[k], "value text of '%s' overran %zu", key, caps[k]);
    }

    /* Each getter either succeeds or names the problem; none may crash. */
    uint32_t u32;
    int32_t i32;
    uint64_t u64;
    float f;
    int b;
    kvq_gguf_str s;
    kvq_gguf_get_u32(g, key, &u32);
    kvq_gguf_get_i32(g, key, &i32);
    kvq_gguf_get_u64(g, key, &u64);
    if (kvq_gguf_get_f32(g, key, &f) == KVQ_OK) FUZZ_REQUIRE(isfinite(f), "'%s' gave a non-finite f32", key);
    kvq_gguf_get_bool(g, key, &b);
    if (kvq_gguf_get_str(g, key, &s) == KVQ_OK && s.len) {
        volatile char last = s.ptr[s.len - 1];
        (void)last;
    }

    uint64_t n = 0;
    if (kvq_gguf_get_arr_len(g, key, &n) != KVQ_OK) return;
    kvq_gguf_type elem;
    uint64_t n2;
    kvq_gguf_kv_array_info(g, i, &elem, &n2);
    FUZZ_REQUIRE(n2 == n, "array '%s' length %llu vs %llu", key, (unsigned long long)n,
                 (unsigned long long)n2);
    if (n == 0 || n > MAX_ARRAY_COPY) return;
    kvq_gguf_str *strs = malloc(sizeof *strs * n); // (n)
    float *fl = malloc(sizeof *fl * n);            // (n)
    int32_t *in = malloc(sizeof *in * n);          // (n)
    if (strs && kvq_gguf_get_arr_str(g, key, strs, n) == KVQ_OK) {
        size_t sum = 0;
        for (uint64_t k = 0; k < n; k++)
            if (strs[k].len) sum += (unsigned char)strs[k].ptr[strs[k].len - 1];
        (void)sum;
    }
    if (fl) kvq_gguf_get_arr_f32(g, key, fl, n);
    if (in && kvq_gguf_get_arr_i32(g, key, -1000, 1000, in, n) == KVQ_OK)
        for (uint64_t k = 0; k < n; k++) FUZZ_REQUIRE(in[k] >= -1000 && in[k] <= 1000, "array '%s'", key);
    /* A wrong length must be refused, not copied. */
    if (fl) FUZZ_REQUIRE(kvq_gguf_get_arr_f32(g, key, fl, n - 1) != KVQ_OK, "'%s' short copy", key);
    free(strs);
    free(fl);
    free(in);
}

static void walk_tensor(const kvq_gguf *g, const uint8_t *data, size_t size, int64_t i) {
    const kvq_gguf_tensor *t = kvq_gguf_tensor_at(g, i);
    FUZZ_REQUIRE(t && t->name && t->name[0], "tensor %lld", (long long)i);
    FUZZ_REQUIRE(kvq_gguf_find_tensor(g, t->name) == t, "tensor '%s' is not unique", t->name);
    FUZZ_REQUIRE(t->n_dims >= 1 && t->n_dims <= KVQ_GGUF_MAX_DIMS, "'%s' n_dims %d", t->name, t->n_dims);
    FUZZ_REQUIRE(t->offset <= size && t->n_bytes <= size - t->offset, "'%s' data outside the file", t->name);
    FUZZ_REQUIRE((const uint8_t *)t->data == data + t->offset, "'%s' data pointer", t->name);
    FUZZ_REQUIRE(t->offset % kvq_gguf_alignment(g) == 0, "'%s' unaligned", t->name);
    FUZZ_REQUIRE(kvq_gguf_tensor_type_name(g, i) != NULL, "'%s' type name", t->name);
    kvq_gguf_tensor_type_supported(g, i);
    kvq_gguf_tensor_bytes(g, i);
    int64_t ne[KVQ_GGUF_MAX_DIMS];
    for (int d = 0; d < KVQ_GGUF_MAX_DIMS; d++) ne[d] = kvq_gguf_tensor_dim(g, i, d);
    const kvq_gguf_tensor *same = NULL;
    FUZZ_REQUIRE(kvq_gguf_expect_tensor(g, t->name, t->n_dims, ne, &same) == KVQ_OK && same == t,
                 "'%s' does not match its own shape", t->name);
    if (t->n_bytes) {
        volatile uint8_t edge = ((const uint8_t *)t->data)[0] ^ ((const uint8_t *)t->data)[t->n_bytes - 1];
        (void)edge;
    }

    const kvq_wtype_traits *wt = kvq_wtype_find((int)t->type);
    if (!wt || t->ne[0] > MAX_ROW || kvq_wtype_check_n(wt, t->ne[0]) != KVQ_OK) return;
    FUZZ_REQUIRE(kvq_wtype_row_bytes(wt, t->ne[0]) <= t->n_bytes, "'%s' row beyond its data", t->name);
    float *row = malloc(sizeof *row * (size_t)t->ne[0]); // (ne0)
    if (row) FUZZ_REQUIRE(kvq_wtype_dequantize_row((int)t->type, t->data, row, t->ne[0]) == KVQ_OK, "'%s'", t->name);
    free(row);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kvq_gguf *g = NULL;
    const kvq_status s = kvq_gguf_open_memory(data, size, &g);
    if (s != KVQ_OK) {
        FUZZ_REQUIRE(!g && kvq_last_error()[0], "failed open (%s) without a message", kvq_status_name(s));
        return 0;
    }
    FUZZ_REQUIRE(kvq_gguf_version(g) == 2 || kvq_gguf_version(g) == 3, "version %u", kvq_gguf_version(g));
    FUZZ_REQUIRE(kvq_gguf_file_size(g) == size, "size");
    for (int64_t i = 0; i < kvq_gguf_kv_count(g); i++) walk_kv(g, i);
    for (int64_t i = 0; i < kvq_gguf_tensor_count(g); i++) walk_tensor(g, data, size, i);
    FUZZ_REQUIRE(!kvq_gguf_kv_key(g, kvq_gguf_kv_count(g)) && !kvq_gguf_tensor_at(g, -1), "out-of-range index");
    kvq_gguf_close(g);
    return 0;
}
