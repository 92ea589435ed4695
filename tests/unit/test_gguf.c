/* test_gguf.c — the GGUF parser on synthetic files: a valid file reads back
 * the values written, and every malformation we know of (truncation at any
 * byte, bad magic/version, absurd counts and lengths, bad dims, types,
 * alignment, offsets, duplicates) fails with KVQ_ERR_FORMAT and a message
 * naming the problem. Each open gets a buffer of exactly the file's size,
 * so a read past the end shows up under valgrind. */
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/rng.h"
#include "model/gguf.h"
#include "test.h"

/* ------------------------------------------------------------ the writer */

typedef struct wbuf {
    uint8_t *p;
    size_t len, cap;
    int oom;
} wbuf;

static void w_bytes(wbuf *b, const void *src, size_t n) {
    if (b->oom) return;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n) cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
}

static void w_le(wbuf *b, uint64_t v, int n) {
    uint8_t t[8];
    for (int i = 0; i < n; i++) t[i] = (uint8_t)(v >> (8 * i));
    w_bytes(b, t, (size_t)n);
}

static void w_u32(wbuf *b, uint32_t v) { w_le(b, v, 4); }
static void w_u64(wbuf *b, uint64_t v) { w_le(b, v, 8); }

static void w_f32(wbuf *b, float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    w_u32(b, u);
}

static void w_str(wbuf *b, const char *s) {
    w_u64(b, strlen(s));
    w_bytes(b, s, strlen(s));
}

static void patch_le(uint8_t *p, size_t pos, uint64_t v, int n) {
    for (int i = 0; i < n; i++) p[pos + i] = (uint8_t)(v >> (8 * i));
}

/* The sample file: keys and tensors of every kind, with the position of
 * each field recorded so tests can break exactly one. */
enum { KV_ARCH, KV_ALIGN, KV_BLOCKS, KV_I8, KV_FREQ, KV_F64, KV_BOOL, KV_U64, KV_I64,
       KV_TOKENS, KV_SCORES, KV_TYPES, KV_NESTED, N_KV };
enum { T_TOK, T_NORM, T_Q4K, T_BF16, N_T };

static const struct {
    const char *name;
    uint32_t type;
    int n_dims;
    uint64_t ne[4];
    uint64_t bytes;
} tspec[N_T] = {
    {"tok0", KVQ_GGML_TYPE_Q8_0, 2, {64, 3, 1, 1}, 2 * 34 * 3},
    {"norm", KVQ_GGML_TYPE_F32, 1, {64, 1, 1, 1}, 64 * 4},
    {"wq4k", KVQ_GGML_TYPE_Q4_K, 2, {256, 2, 1, 1}, 144 * 2},
    {"bf16", KVQ_GGML_TYPE_BF16, 4, {2, 3, 4, 5}, 120 * 2},
};

static const char *const tokens[] = {"<s>", "a b", "", "\n\"\\\x01", "\xc3\xa9t\xc3\xa9"};
static const float scores[] = {0.0f, -1.5f, 2.25f, -1e-3f, 3e38f};
static const int32_t token_types[] = {3, 1, 1, 6, -7};

typedef struct sample {
    wbuf b;
    size_t version, n_tensors, n_kv;
    size_t key[N_KV];   /* key length field */
    size_t value[N_KV]; /* value; for arrays the element type field */
    size_t name[N_T], n_dims[N_T], dims[N_T], type[N_T], offset[N_T];
    size_t data_start, data[N_T];
} sample;

#define SAMPLE_ALIGN 32

static void w_key(sample *s, int k, const char *key, uint32_t type) {
    s->key[k] = s->b.len;
    w_str(&s->b, key);
    w_u32(&s->b, type);
    s->value[k] = s->b.len;
}

/* The first n_kv keys of the sample (so a file can go without alignment). */
static void build_sample(sample *s, uint32_t version) {
    memset(s, 0, sizeof *s);
    wbuf *b = &s->b;
    w_bytes(b, "GGUF", 4);
    s->version = b->len;
    w_u32(b, version);
    s->n_tensors = b->len;
    w_u64(b, N_T);
    s->n_kv = b->len;
    w_u64(b, N_KV);

    w_key(s, KV_ARCH, "general.architecture", KVQ_GGUF_STRING);
    w_str(b, "llama");
    w_key(s, KV_ALIGN, "general.alignment", KVQ_GGUF_U32);
    w_u32(b, SAMPLE_ALIGN);
    w_key(s, KV_BLOCKS, "llama.block_count", KVQ_GGUF_U32);
    w_u32(b, 30);
    w_key(s, KV_I8, "test.i8", KVQ_GGUF_I8);
    w_le(b, (uint8_t)-5, 1);
    w_key(s, KV_FREQ, "llama.rope.freq_base", KVQ_GGUF_F32);
    w_f32(b, 100000.0f);
    w_key(s, KV_F64, "test.f64", KVQ_GGUF_F64);
    {
        const double d = 1e300;
        uint64_t u;
        memcpy(&u, &d, 8);
        w_u64(b, u);
    }
    w_key(s, KV_BOOL, "test.bool", KVQ_GGUF_BOOL);
    w_le(b, 1, 1);
    w_key(s, KV_U64, "test.u64", KVQ_GGUF_U64);
    w_u64(b, 1ull << 40);
    w_key(s, KV_I64, "test.i64", KVQ_GGUF_I64);
    w_u64(b, (uint64_t)(int64_t)-3);
    w_key(s, KV_TOKENS, "tokenizer.ggml.tokens", KVQ_GGUF_ARRAY);
    w_u32(b, KVQ_GGUF_STRING);
    w_u64(b, KVQ_ARRAY_LEN(tokens));
    for (size_t i = 0; i < KVQ_ARRAY_LEN(tokens); i++) w_str(b, tokens[i]);
    w_key(s, KV_SCORES, "tokenizer.ggml.scores", KVQ_GGUF_ARRAY);
    w_u32(b, KVQ_GGUF_F32);
    w_u64(b, KVQ_ARRAY_LEN(scores));
    for (size_t i = 0; i < KVQ_ARRAY_LEN(scores); i++) w_f32(b, scores[i]);
    w_key(s, KV_TYPES, "tokenizer.ggml.token_type", KVQ_GGUF_ARRAY);
    w_u32(b, KVQ_GGUF_I32);
    w_u64(b, KVQ_ARRAY_LEN(token_types));
    for (size_t i = 0; i < KVQ_ARRAY_LEN(token_types); i++) w_u32(b, (uint32_t)token_types[i]);
    /* [[1, 2], [3]] */
    w_key(s, KV_NESTED, "test.nested", KVQ_GGUF_ARRAY);
    w_u32(b, KVQ_GGUF_ARRAY);
    w_u64(b, 2);
    w_u32(b, KVQ_GGUF_U8);
    w_u64(b, 2);
    w_le(b, 1, 1);
    w_le(b, 2, 1);
    w_u32(b, KVQ_GGUF_U8);
    w_u64(b, 1);
    w_le(b, 3, 1);

    uint64_t rel = 0;
    for (int t = 0; t < N_T; t++) {
        s->name[t] = b->len;
        w_str(b, tspec[t].name);
        s->n_dims[t] = b->len;
        w_u32(b, (uint32_t)tspec[t].n_dims);
        s->dims[t] = b->len;
        for (int d = 0; d < tspec[t].n_dims; d++) w_u64(b, tspec[t].ne[d]);
        s->type[t] = b->len;
        w_u32(b, tspec[t].type);
        s->offset[t] = b->len;
        w_u64(b, rel);
        rel += (tspec[t].bytes + SAMPLE_ALIGN - 1) / SAMPLE_ALIGN * SAMPLE_ALIGN;
    }
    while (b->len % SAMPLE_ALIGN) w_le(b, 0, 1);
    s->data_start = b->len;
    for (int t = 0; t < N_T; t++) {
        while ((b->len - s->data_start) % SAMPLE_ALIGN) w_le(b, 0, 1);
        s->data[t] = b->len;
        if (t == T_NORM)
            for (int i = 0; i < 64; i++) w_f32(b, (float)i);
        else
            for (uint64_t i = 0; i < tspec[t].bytes; i++) w_le(b, (uint8_t)(i * 7 + (uint64_t)t), 1);
    }
}

/* Opens a private copy of exactly len bytes of p. */
static kvq_status open_copy(const uint8_t *p, size_t len, uint8_t **copy, kvq_gguf **g) {
    *copy = malloc(len ? len : 1);
    if (!*copy) return KVQ_ERR_NOMEM;
    memcpy(*copy, p, len);
    return kvq_gguf_open_memory(*copy, len, g);
}

/* Opening p (len bytes) fails with KVQ_ERR_FORMAT and a message holding
 * `want`; returns 1 if so, else prints why and returns 0. */
static int fails_with(const uint8_t *p, size_t len, const char *want) {
    uint8_t *copy;
    kvq_gguf *g = NULL;
    const kvq_status s = open_copy(p, len, &copy, &g);
    const char *msg = kvq_last_error();
    int ok = s == KVQ_ERR_FORMAT && g == NULL && strncmp(msg, "gguf: ", 6) == 0 && strstr(msg, want);
    if (!ok) printf("    want FORMAT with '%s', got %s: %s\n", want, kvq_status_name(s), msg);
    kvq_gguf_close(g);
    free(copy);
    return ok;
}

/* ------------------------------------------------------------ valid files */

static void check_sample_values(const kvq_gguf *g, const sample *s) {
    CHECK(kvq_gguf_kv_count(g) == N_KV);
    CHECK(kvq_gguf_tensor_count(g) == N_T);
    CHECK(kvq_gguf_alignment(g) == SAMPLE_ALIGN);
    CHECK(kvq_gguf_data_offset(g) == s->data_start);
    CHECK(kvq_gguf_file_size(g) == s->b.len);

    kvq_gguf_str str;
    CHECK_OK(kvq_gguf_get_str(g, "general.architecture", &str));
    CHECK(kvq_gguf_str_eq(str, "llama"));
    uint32_t u32;
    CHECK_OK(kvq_gguf_get_u32(g, "llama.block_count", &u32));
    CHECK(u32 == 30);
    int32_t i32;
    CHECK_OK(kvq_gguf_get_i32(g, "test.i8", &i32));
    CHECK(i32 == -5);
    CHECK_OK(kvq_gguf_get_i32(g, "test.i64", &i32));
    CHECK(i32 == -3);
    float f;
    CHECK_OK(kvq_gguf_get_f32(g, "llama.rope.freq_base", &f));
    CHECK(f == 100000.0f);
    int bv;
    CHECK_OK(kvq_gguf_get_bool(g, "test.bool", &bv));
    CHECK(bv == 1);
    uint64_t u64;
    CHECK_OK(kvq_gguf_get_u64(g, "test.u64", &u64));
    CHECK(u64 == 1ull << 40);
    CHECK_OK(kvq_gguf_get_u64(g, "llama.block_count", &u64));
    CHECK(u64 == 30);

    uint64_t n;
    CHECK_OK(kvq_gguf_get_arr_len(g, "tokenizer.ggml.tokens", &n));
    CHECK(n == KVQ_ARRAY_LEN(tokens));
    kvq_gguf_str toks[KVQ_ARRAY_LEN(tokens)];
    CHECK_OK(kvq_gguf_get_arr_str(g, "tokenizer.ggml.tokens", toks, n));
    for (size_t i = 0; i < n; i++) CHECKF(kvq_gguf_str_eq(toks[i], tokens[i]), "token %zu", i);
    float sc[KVQ_ARRAY_LEN(scores)];
    CHECK_OK(kvq_gguf_get_arr_f32(g, "tokenizer.ggml.scores", sc, KVQ_ARRAY_LEN(scores)));
    CHECK(memcmp(sc, scores, sizeof sc) == 0);
    int32_t tt[KVQ_ARRAY_LEN(token_types)];
    CHECK_OK(kvq_gguf_get_arr_i32(g, "tokenizer.ggml.token_type", -7, 6, tt, KVQ_ARRAY_LEN(tt)));
    CHECK(memcmp(tt, token_types, sizeof tt) == 0);

    kvq_gguf_type elem;
    const int64_t nested = kvq_gguf_find_key(g, "test.nested");
    CHECK(nested == KV_NESTED);
    CHECK(kvq_gguf_kv_type_of(g, nested) == KVQ_GGUF_ARRAY);
    kvq_gguf_kv_array_info(g, nested, &elem, &n);
    CHECK(elem == KVQ_GGUF_ARRAY && n == 2);
    CHECK(kvq_gguf_find_key(g, "nope") == -1);

    for (int t = 0; t < N_T; t++) {
        const kvq_gguf_tensor *tn = kvq_gguf_find_tensor(g, tspec[t].name);
        CHECKF(tn == kvq_gguf_tensor_at(g, t), "tensor %d", t);
        CHECK(tn->type == tspec[t].type && tn->n_dims == tspec[t].n_dims);
        for (int d = 0; d < 4; d++) CHECK((uint64_t)tn->ne[d] == tspec[t].ne[d]);
        CHECK(tn->n_bytes == tspec[t].bytes);
        CHECK(tn->offset == s->data[t]);
        CHECK(kvq_gguf_tensor_offset(g, t) == s->data[t]);
        CHECK(kvq_gguf_tensor_bytes(g, t) == tspec[t].bytes);
        CHECK(strcmp(kvq_gguf_tensor_name(g, t), tspec[t].name) == 0);
        CHECK(kvq_gguf_tensor_type(g, t) == (int)tspec[t].type);
        CHECK(kvq_gguf_tensor_dim(g, t, 0) == (int64_t)tspec[t].ne[0]);
        CHECK(kvq_gguf_tensor_dim(g, t, 7) == 1);
    }
    const kvq_gguf_tensor *norm = kvq_gguf_find_tensor(g, "norm");
    float v63;
    memcpy(&v63, (const uint8_t *)norm->data + 63 * 4, 4);
    CHECK(v63 == 63.0f);
    CHECK(strcmp(kvq_gguf_tensor_type_name(g, T_Q4K), "q4_K") == 0);
    CHECK(kvq_gguf_tensor_type_supported(g, T_BF16));
    CHECK(kvq_gguf_find_tensor(g, "tok") == NULL);
    CHECK(kvq_gguf_tensor_at(g, N_T) == NULL && kvq_gguf_tensor_name(g, -1) == NULL);
}

TEST(gguf_valid_file_reads_back_v2_and_v3) {
    for (uint32_t version = 2; version <= 3; version++) {
        sample s;
        build_sample(&s, version);
        CHECK(!s.b.oom);
        uint8_t *copy;
        kvq_gguf *g = NULL;
        CHECK_OK(open_copy(s.b.p, s.b.len, &copy, &g));
        CHECK(kvq_gguf_version(g) == version);
        check_sample_values(g, &s);
        kvq_gguf_close(g);
        free(copy);
        free(s.b.p);
        if (kvq_test_failed()) return;
    }
}

/* st is the status of a call just made: KVQ_ERR_FORMAT with `want` in its
 * message. Returns 1 if so, else prints why. */
static int failed_with(kvq_status st, const char *want) {
    const char *msg = kvq_last_error();
    if (st == KVQ_ERR_FORMAT && strstr(msg, want)) return 1;
    printf("    want FORMAT with '%s', got %s: %s\n", want, kvq_status_name(st), msg);
    return 0;
}

static int write_file(const char *path, const void *p, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    const int ok = fwrite(p, 1, len, f) == len;
    return fclose(f) == 0 && ok;
}

/* The v3 sample in a new temporary file named path: 1 if written. */
static int sample_file(sample *s, char path[26]) {
    build_sample(s, 3);
    strcpy(path, "/tmp/kvq-test-gguf-XXXXXX");
    const int fd = mkstemp(path);
    if (fd < 0) return 0;
    close(fd);
    return write_file(path, s->b.p, s->b.len);
}

TEST(gguf_open_reads_a_file_and_reports_io_errors) {
    sample s;
    char path[26];
    kvq_gguf *g = NULL;
    const int wrote = sample_file(&s, path);
    const kvq_status st = wrote ? kvq_gguf_open(path, &g) : KVQ_ERR_IO;
    if (st == KVQ_OK) check_sample_values(g, &s);
    kvq_gguf_close(g);
    g = NULL;
    /* A file shorter than a header is refused before it is mapped. */
    const int wrote_short = write_file(path, "GGUF", 4);
    const kvq_status st_short = kvq_gguf_open(path, &g);
    unlink(path);
    free(s.b.p);
    CHECK(wrote && wrote_short);
    CHECK_OK(st);
    CHECK(failed_with(st_short, "header") && g == NULL);
    CHECK(kvq_gguf_open("/nonexistent/kvq.gguf", &g) == KVQ_ERR_IO && g == NULL);
    CHECK(strstr(kvq_last_error(), "/nonexistent/kvq.gguf"));
    CHECK(kvq_gguf_open("/tmp", &g) == KVQ_ERR_IO && strstr(kvq_last_error(), "not a regular file"));
    CHECK(kvq_gguf_open(NULL, &g) == KVQ_ERR_INVALID_ARG);
}

static void exit_3(int sig) {
    (void)sig;
    _exit(3);
}

/* A resident open reads the same bytes the mapping shows, into memory of
 * its own on a 2 MiB boundary (so that it can sit in huge pages), and
 * gives a file that fails a check the same error. */
TEST(gguf_resident_open_matches_the_mapping) {
    sample s;
    char path[26];
    kvq_gguf *mapped = NULL, *resident = NULL;
    const int wrote = sample_file(&s, path);
    const kvq_status sm = wrote ? kvq_gguf_open_file(path, 0, &mapped) : KVQ_ERR_IO;
    const kvq_status sr = wrote ? kvq_gguf_open_file(path, 1, &resident) : KVQ_ERR_IO;
    CHECK_OK(sm);
    CHECK_OK(sr);
    if (sm == KVQ_OK && sr == KVQ_OK) {
        check_sample_values(resident, &s);
        CHECK(!kvq_gguf_resident(mapped) && kvq_gguf_resident(resident));
        CHECK(kvq_gguf_tensor_count(resident) == kvq_gguf_tensor_count(mapped));
        for (int64_t i = 0; i < kvq_gguf_tensor_count(resident); i++) {
            const kvq_gguf_tensor *a = kvq_gguf_tensor_at(mapped, i), *b = kvq_gguf_tensor_at(resident, i);
            CHECK(a->n_bytes == b->n_bytes && a->data != b->data);
            CHECK(!memcmp(a->data, b->data, a->n_bytes) && !memcmp(b->data, s.b.p + b->offset, b->n_bytes));
            CHECK(((uintptr_t)b->data - b->offset) % ((uintptr_t)2 << 20) == 0);
        }
        /* Read-only as the mapping is: a write faults (in a child, whose
         * SIGSEGV handler exits 3). */
        const pid_t child = fork();
        if (child == 0) {
            signal(SIGSEGV, exit_3);
            *(volatile uint8_t *)(uintptr_t)kvq_gguf_tensor_at(resident, 0)->data = 1;
            _exit(0);
        }
        int wst = 0;
        CHECK(child > 0 && waitpid(child, &wst, 0) == child && WIFEXITED(wst) && WEXITSTATUS(wst) == 3);
    }
    kvq_gguf_close(mapped);
    kvq_gguf_close(resident);
    /* A tensor past the end: the resident copy fails the mapped one's check. */
    resident = NULL;
    const int wrote_cut = write_file(path, s.b.p, s.b.len - 1);
    const kvq_status cut = kvq_gguf_open_file(path, 1, &resident);
    unlink(path);
    free(s.b.p);
    CHECK(wrote_cut);
    CHECK(cut == KVQ_ERR_FORMAT && resident == NULL);
    CHECK(kvq_gguf_open_file("/nonexistent/kvq.gguf", 1, &resident) == KVQ_ERR_IO && resident == NULL);
    /* Read into memory only where MemAvailable is known and >= 4/3 of the
     * file: unknown (0, also what an exhausted machine reports) maps. */
    CHECK(kvq_gguf_resident_fits(75, 100) && !kvq_gguf_resident_fits(76, 100));
    CHECK(!kvq_gguf_resident_fits(1, 0) && !kvq_gguf_resident_fits(0, 0));
    CHECK(kvq_gguf_resident_fits((size_t)3 << 30, (size_t)4 << 30));
    CHECK(kvq_gguf_resident(NULL) == 0);
}

TEST(gguf_getters_check_types_and_ranges) {
    sample s;
    build_sample(&s, 3);
    uint8_t *copy;
    kvq_gguf *g = NULL;
    CHECK_OK(open_copy(s.b.p, s.b.len, &copy, &g));
    uint32_t u32;
    int32_t i32;
    float f, fl[5];
    int bv;
    kvq_gguf_str str, sl[5];
    uint64_t n;
    int32_t il[5];
    const int64_t shape_any[2] = {64, -1}, shape_bad[2] = {64, 4};
    const kvq_gguf_tensor *t = NULL;
    CHECK(failed_with(kvq_gguf_get_u32(g, "missing.key", &u32), "missing key 'missing.key'"));
    CHECK(failed_with(kvq_gguf_get_u32(g, "test.i8", &u32), "'test.i8' = -5 does not fit u32"));
    CHECK(failed_with(kvq_gguf_get_u32(g, "test.u64", &u32), "= 1099511627776 does not fit u32"));
    CHECK(failed_with(kvq_gguf_get_i32(g, "test.u64", &i32), "does not fit i32"));
    CHECK(failed_with(kvq_gguf_get_u32(g, "general.architecture", &u32), "has type string, want an integer"));
    CHECK(failed_with(kvq_gguf_get_f32(g, "test.f64", &f), "does not fit f32"));
    CHECK(failed_with(kvq_gguf_get_f32(g, "test.bool", &f), "has type bool, want f32"));
    CHECK(failed_with(kvq_gguf_get_bool(g, "test.i8", &bv), "has type i8, want bool"));
    CHECK(failed_with(kvq_gguf_get_str(g, "tokenizer.ggml.tokens", &str), "has type array[string], want string"));
    CHECK(failed_with(kvq_gguf_get_arr_len(g, "test.bool", &n), "want an array"));
    CHECK(failed_with(kvq_gguf_get_arr_str(g, "tokenizer.ggml.tokens", sl, 4), "has 5 elements, want 4"));
    CHECK(failed_with(kvq_gguf_get_arr_str(g, "tokenizer.ggml.scores", sl, 5), "want array[string]"));
    CHECK(failed_with(kvq_gguf_get_arr_f32(g, "tokenizer.ggml.token_type", fl, 5), "array[i32], want array[f32]"));
    CHECK(failed_with(kvq_gguf_get_arr_i32(g, "tokenizer.ggml.token_type", 0, 6, il, 5),
                      "element 4 = -7 is not in [0, 6]"));
    CHECK(failed_with(kvq_gguf_get_arr_i32(g, "tokenizer.ggml.token_type", -9, -1, il, 5),
                      "element 0 = 3 is not in [-9, -1]"));
    CHECK(failed_with(kvq_gguf_get_arr_i32(g, "tokenizer.ggml.scores", 0, 1, il, 5), "want an integer array"));
    CHECK(failed_with(kvq_gguf_expect_tensor(g, "nope", 1, shape_any, &t), "missing tensor 'nope'"));
    CHECK(failed_with(kvq_gguf_expect_tensor(g, "tok0", 1, shape_any, &t), "has 2 dims, want 1"));
    CHECK(failed_with(kvq_gguf_expect_tensor(g, "tok0", 2, shape_bad, &t), "dim 1 is 3, want 4"));
    CHECK_OK(kvq_gguf_expect_tensor(g, "tok0", 2, shape_any, &t));
    CHECK(t == kvq_gguf_tensor_at(g, T_TOK));
    kvq_gguf_close(g);
    free(copy);
    free(s.b.p);
}

/* kv i as text, into a buffer of cap bytes. */
static const char *value_text(const kvq_gguf *g, int64_t i, char *buf, size_t cap) {
    return kvq_gguf_kv_value_text(g, i, buf, cap) == KVQ_OK ? buf : "(failed)";
}

TEST(gguf_value_text_formats_and_truncates) {
    sample s;
    build_sample(&s, 3);
    uint8_t *copy;
    kvq_gguf *g = NULL;
    CHECK_OK(open_copy(s.b.p, s.b.len, &copy, &g));
    char buf[256], small[12];
    const struct {
        int kv;
        const char *type, *text;
    } want[] = {
        {KV_ARCH, "string", "\"llama\""},
        {KV_BLOCKS, "u32", "30"},
        {KV_I8, "i8", "-5"},
        {KV_FREQ, "f32", "100000"},
        {KV_F64, "f64", "1.0000000000000001e+300"},
        {KV_BOOL, "bool", "true"},
        {KV_I64, "i64", "-3"},
        {KV_TOKENS, "array[string]", "[string x 5] \"<s>\", \"a b\", \"\", \"\\n\\\"\\\\\\x01\", \"\xc3\xa9t\xc3\xa9\""},
        {KV_SCORES, "array[f32]", "[f32 x 5] 0, -1.5, 2.25, -0.00100000005, 3.00000001e+38"},
        {KV_TYPES, "array[i32]", "[i32 x 5] 3, 1, 1, 6, -7"},
        {KV_NESTED, "array[array]", "[array x 2] [u8 x 2], [u8 x 1]"},
    };
    for (size_t k = 0; k < KVQ_ARRAY_LEN(want); k++) {
        CHECKF(strcmp(kvq_gguf_kv_type_name(g, want[k].kv), want[k].type) == 0, "kv %d type %s", want[k].kv,
               kvq_gguf_kv_type_name(g, want[k].kv));
        const char *got = value_text(g, want[k].kv, buf, sizeof buf);
        CHECKF(strcmp(got, want[k].text) == 0, "kv %d: got <%s> want <%s>", want[k].kv, got, want[k].text);
    }
    /* Cut text ends with "..." and never splits a UTF-8 sequence. */
    CHECK(strcmp(value_text(g, KV_TOKENS, small, sizeof small), "[string ...") == 0);
    /* The whole text is 52 bytes; cutting at 47 or 48 would split the 2-byte "é". */
    CHECK(strcmp(value_text(g, KV_TOKENS, buf, 53), want[7].text) == 0);
    CHECK(strcmp(value_text(g, KV_TOKENS, buf, 52), "[string x 5] \"<s>\", \"a b\", \"\", \"\\n\\\"\\\\\\x01\", \"\xc3\xa9...") == 0);
    CHECK(strcmp(value_text(g, KV_TOKENS, buf, 51), "[string x 5] \"<s>\", \"a b\", \"\", \"\\n\\\"\\\\\\x01\", \"...") == 0);
    CHECK(kvq_gguf_kv_value_text(g, KV_ARCH, buf, 3) == KVQ_ERR_INVALID_ARG);
    CHECK(kvq_gguf_kv_value_text(g, N_KV, buf, sizeof buf) == KVQ_ERR_INVALID_ARG);
    CHECK(kvq_gguf_kv_key(g, N_KV) == NULL && kvq_gguf_kv_type_name(g, -1) == NULL);
    kvq_gguf_close(g);
    free(copy);
    free(s.b.p);
}

/* -------------------------------------------------------- malformed files */

TEST(gguf_truncated_at_every_byte_fails_cleanly) {
    sample s;
    build_sample(&s, 3);
    /* Every prefix is malformed: the last tensor ends at the end of file. */
    static const char *const phrases[] = {"truncated", "too short", "past end", "beyond end", "cannot fit", " left"};
    for (size_t len = 0; len < s.b.len; len++) {
        uint8_t *copy;
        kvq_gguf *g = NULL;
        const kvq_status st = open_copy(s.b.p, len, &copy, &g);
        const char *msg = kvq_last_error();
        int named = 0;
        for (size_t k = 0; k < KVQ_ARRAY_LEN(phrases); k++) named |= strstr(msg, phrases[k]) != NULL;
        kvq_gguf_close(g);
        free(copy);
        CHECKF(st == KVQ_ERR_FORMAT && g == NULL && strncmp(msg, "gguf: ", 6) == 0 && named,
               "cut at %zu of %zu: %s: %s", len, s.b.len, kvq_status_name(st), msg);
    }
    /* At the section boundaries, the message names the section and item. */
    CHECK(fails_with(s.b.p, 3, "header: file of 3 bytes is too short"));
    CHECK(fails_with(s.b.p, 20, "header: kv count truncated"));
    CHECK(fails_with(s.b.p, s.key[KV_TOKENS] + 3, "cannot fit"));
    CHECK(fails_with(s.b.p, s.name[T_NORM] - 1, "tensor 0 'tok0': data offset truncated"));
    CHECK(fails_with(s.b.p, s.name[T_NORM] + 10, "tensor 1: tensor name length 4 runs past end of file"));
    CHECK(fails_with(s.b.p, s.data_start, "tensor 0 'tok0': data ["));
    CHECK(fails_with(s.b.p, s.data[T_BF16] + 239, "tensor 3 'bf16': data ["));
    CHECK(fails_with(s.b.p, s.data[T_BF16] + 239, ") beyond end of file ("));
    free(s.b.p);
}

/* The sample with nbytes at pos set to v fails with `want`. */
static int patched_fails(const sample *s, size_t pos, uint64_t v, int nbytes, const char *want) {
    uint8_t *p = malloc(s->b.len);
    if (!p) return 0;
    memcpy(p, s->b.p, s->b.len);
    patch_le(p, pos, v, nbytes);
    const int ok = fails_with(p, s->b.len, want);
    if (!ok) printf("    (byte %zu set to %llu)\n", pos, (unsigned long long)v);
    free(p);
    return ok;
}

TEST(gguf_bad_header_fails) {
    sample s;
    build_sample(&s, 3);
    CHECK(patched_fails(&s, 3, 'X', 1, "header: bad magic 47 47 55 58"));
    CHECK(patched_fails(&s, s.version, 1, 4, "version 1 is not supported"));
    CHECK(patched_fails(&s, s.version, 4, 4, "version 4 is not supported"));
    CHECK(patched_fails(&s, s.version, 0x03000000, 4, "big-endian"));
    CHECK(patched_fails(&s, s.n_tensors, 1ull << 63, 8, "tensor count 9223372036854775808 cannot fit"));
    CHECK(patched_fails(&s, s.n_kv, 1ull << 63, 8, "kv count 9223372036854775808 cannot fit"));
    CHECK(patched_fails(&s, s.n_kv, UINT64_MAX, 8, "kv count 18446744073709551615 cannot fit"));
    free(s.b.p);
}

TEST(gguf_bad_keys_and_values_fail) {
    sample s;
    build_sample(&s, 3);
    const size_t tok = s.value[KV_TOKENS], nested = s.value[KV_NESTED];
    CHECK(patched_fails(&s, s.key[KV_ARCH], 1ull << 40, 8, "kv 0: key length 1099511627776 runs past end of file"));
    CHECK(patched_fails(&s, s.value[KV_ARCH], 1ull << 40, 8,
                        "kv 0 'general.architecture': string length 1099511627776 runs past end of file"));
    CHECK(patched_fails(&s, s.key[KV_BLOCKS], 0, 8, "kv 2: empty key"));
    CHECK(patched_fails(&s, s.key[KV_BLOCKS] + 8 + 3, 0, 1, "kv 2: key holds a NUL byte"));
    CHECK(patched_fails(&s, s.value[KV_I8] - 4, 13, 4, "kv 3 'test.i8': unknown value type 13"));
    CHECK(patched_fails(&s, s.value[KV_BOOL], 2, 1, "kv 6 'test.bool': bool value 2 is neither 0 nor 1"));
    CHECK(patched_fails(&s, s.value[KV_SCORES], 99, 4, "unknown array element type 99"));
    CHECK(patched_fails(&s, tok + 4, 1ull << 62, 8, "4611686018427387904 strings need at least"));
    CHECK(patched_fails(&s, tok + 12 + 8 + 3, 1ull << 40, 8, "'tokenizer.ggml.tokens': string length"));
    CHECK(patched_fails(&s, s.value[KV_SCORES] + 4, 1ull << 62, 8, "4611686018427387904 f32 values need more than"));
    CHECK(patched_fails(&s, s.value[KV_TYPES] + 4, 1ull << 62, 8, "4611686018427387904 i32 values need"));
    CHECK(patched_fails(&s, nested + 4, 1ull << 62, 8, "4611686018427387904 nested arrays need"));
    CHECK(patched_fails(&s, nested + 12, 77, 4, "'test.nested': unknown array element type 77"));
    CHECK(patched_fails(&s, nested + 12 + 4, 1ull << 62, 8, "4611686018427387904 u8 values need"));
    /* "test.i64" -> "test.u64" */
    CHECK(patched_fails(&s, s.key[KV_I64] + 8 + 5, 'u', 1, "kv 8 'test.u64': duplicate key (also kv 7)"));
    free(s.b.p);
}

TEST(gguf_bad_alignment_fails) {
    sample s;
    build_sample(&s, 3);
    CHECK(patched_fails(&s, s.value[KV_ALIGN], 24, 4, "'general.alignment': alignment 24 is not a power of two"));
    CHECK(patched_fails(&s, s.value[KV_ALIGN], 0, 4, "alignment 0 is not a power of two"));
    CHECK(patched_fails(&s, s.value[KV_ALIGN] - 4, KVQ_GGUF_I32, 4, "alignment has type i32, must be u32"));
    CHECK(patched_fails(&s, s.value[KV_ALIGN], 64, 4,
                        "tensor 1 'norm': data offset 224 is not a multiple of the alignment 64"));
    free(s.b.p);
}

/* Files whose one key is an array nested `levels` deep. */
static void build_nested(wbuf *b, int levels) {
    w_bytes(b, "GGUF", 4);
    w_u32(b, 3);
    w_u64(b, 0);
    w_u64(b, 1);
    w_str(b, "deep");
    w_u32(b, KVQ_GGUF_ARRAY);
    for (int i = 1; i < levels; i++) {
        w_u32(b, KVQ_GGUF_ARRAY);
        w_u64(b, 1);
    }
    w_u32(b, KVQ_GGUF_U8);
    w_u64(b, 0);
}

TEST(gguf_nested_arrays_are_bounded) {
    wbuf ok = {0}, deep = {0};
    build_nested(&ok, KVQ_GGUF_MAX_ARRAY_DEPTH);
    build_nested(&deep, KVQ_GGUF_MAX_ARRAY_DEPTH + 1);
    uint8_t *copy;
    kvq_gguf *g = NULL;
    const kvq_status st = open_copy(ok.p, ok.len, &copy, &g);
    char buf[64];
    const int text_ok = st == KVQ_OK && kvq_gguf_kv_value_text(g, 0, buf, sizeof buf) == KVQ_OK &&
                        strcmp(buf, "[array x 1] [array x 1]") == 0;
    kvq_gguf_close(g);
    free(copy);
    const int deep_fails = fails_with(deep.p, deep.len, "kv 0 'deep': arrays nested deeper than 8 levels");
    free(ok.p);
    free(deep.p);
    CHECK_OK(st);
    CHECK(text_ok);
    CHECK(deep_fails);
}

TEST(gguf_bad_tensor_infos_fail) {
    sample s;
    build_sample(&s, 3);
    const size_t tok_dims = s.dims[T_TOK], norm_dims = s.dims[T_NORM];
    CHECK(patched_fails(&s, s.name[T_NORM], 0, 8, "tensor 1: empty tensor name"));
    CHECK(patched_fails(&s, s.name[T_NORM], 1ull << 40, 8, "tensor 1: tensor name length 1099511627776 runs past"));
    CHECK(patched_fails(&s, s.n_dims[T_NORM], 5, 4, "tensor 1 'norm': n_dims 5 is not in [1, 4]"));
    CHECK(patched_fails(&s, s.n_dims[T_NORM], 0, 4, "n_dims 0 is not in [1, 4]"));
    CHECK(patched_fails(&s, norm_dims, 0, 8, "tensor 1 'norm': dim 0 is 0, must be in [1, 2^63)"));
    CHECK(patched_fails(&s, norm_dims, 1ull << 63, 8, "dim 0 is 9223372036854775808, must be in [1, 2^63)"));
    {
        uint8_t *p = malloc(s.b.len);
        CHECK(p);
        memcpy(p, s.b.p, s.b.len);
        patch_le(p, tok_dims, 1ull << 32, 8);
        patch_le(p, tok_dims + 8, 1ull << 32, 8);
        const int ok = fails_with(p, s.b.len, "tensor 0 'tok0': element count overflows at dim 1");
        free(p);
        CHECK(ok);
    }
    CHECK(patched_fails(&s, norm_dims, 1ull << 62, 8, "byte size of 4611686018427387904 f32 values overflows"));
    CHECK(patched_fails(&s, norm_dims, 1ull << 40, 8, "tensor 1 'norm': data ["));
    CHECK(patched_fails(&s, tok_dims, 48, 8, "dim 0 (48) is not a multiple of the q8_0 block size 32"));
    CHECK(patched_fails(&s, s.dims[T_Q4K], 32, 8, "dim 0 (32) is not a multiple of the q4_K block size 256"));
    CHECK(patched_fails(&s, s.type[T_NORM], 4, 4, "tensor 1 'norm': unknown ggml type 4"));
    CHECK(patched_fails(&s, s.type[T_NORM], 1000, 4, "unknown ggml type 1000"));
    /* "bf16" -> "norm" */
    CHECK(patched_fails(&s, s.name[T_BF16] + 8, 0x6d726f6e, 4,
                        "tensor 3 'norm': duplicate tensor name (also tensor 1)"));
    free(s.b.p);
}

TEST(gguf_bad_tensor_offsets_fail) {
    sample s;
    build_sample(&s, 3);
    CHECK(patched_fails(&s, s.offset[T_NORM], 240, 8,
                        "tensor 1 'norm': data offset 240 is not a multiple of the alignment 32"));
    CHECK(patched_fails(&s, s.offset[T_NORM], 192, 8, "tensor 1 'norm': data ["));
    CHECK(patched_fails(&s, s.offset[T_NORM], 192, 8, ") overlaps tensor 0 'tok0' ["));
    CHECK(patched_fails(&s, s.offset[T_BF16], 0, 8, "overlaps tensor"));
    CHECK(patched_fails(&s, s.offset[T_BF16], 1ull << 40, 8, "tensor 3 'bf16': data ["));
    CHECK(patched_fails(&s, s.offset[T_BF16], UINT64_MAX - 31, 8, "overflows 64 bits"));
    free(s.b.p);
}

/* Walks everything an open handle offers (the accessors must stay inside
 * validated bytes whatever the file held). Returns 0 on an inconsistency. */
static int walk(const kvq_gguf *g) {
    char buf[96], tiny[4];
    for (int64_t i = 0; i < kvq_gguf_kv_count(g); i++) {
        const char *key = kvq_gguf_kv_key(g, i);
        if (!key || kvq_gguf_find_key(g, key) != i || !kvq_gguf_kv_type_name(g, i)) return 0;
        if (kvq_gguf_kv_value_text(g, i, buf, sizeof buf) != KVQ_OK) return 0;
        if (kvq_gguf_kv_value_text(g, i, tiny, sizeof tiny) != KVQ_OK) return 0;
        uint32_t u32;
        int32_t i32;
        uint64_t u64, n = 0;
        float f;
        int bv;
        kvq_gguf_str str;
        kvq_gguf_get_u32(g, key, &u32);
        kvq_gguf_get_i32(g, key, &i32);
        kvq_gguf_get_u64(g, key, &u64);
        kvq_gguf_get_f32(g, key, &f);
        kvq_gguf_get_bool(g, key, &bv);
        kvq_gguf_get_str(g, key, &str);
        if (kvq_gguf_get_arr_len(g, key, &n) == KVQ_OK && n <= 64) {
            kvq_gguf_str sl[64];
            float fl[64];
            int32_t il[64];
            kvq_gguf_get_arr_str(g, key, sl, n);
            kvq_gguf_get_arr_f32(g, key, fl, n);
            kvq_gguf_get_arr_i32(g, key, INT32_MIN, INT32_MAX, il, n);
        }
    }
    for (int64_t i = 0; i < kvq_gguf_tensor_count(g); i++) {
        const kvq_gguf_tensor *t = kvq_gguf_tensor_at(g, i);
        if (kvq_gguf_find_tensor(g, t->name) != t) return 0;
        if (t->offset < kvq_gguf_data_offset(g) || t->offset + t->n_bytes > kvq_gguf_file_size(g)) return 0;
        if (!kvq_gguf_tensor_type_name(g, i)) return 0;
    }
    return 1;
}

TEST(gguf_random_corruption_never_crashes) {
    sample s;
    build_sample(&s, 3);
    uint64_t rng = 42;
    int opened = 0, refused = 0;
    for (int iter = 0; iter < 3000; iter++) {
        uint8_t *p = malloc(s.b.len);
        CHECK(p);
        memcpy(p, s.b.p, s.b.len);
        /* 1-4 bytes of the metadata, sometimes set to a boundary value. */
        const int n_flips = 1 + (int)(kvq_splitmix64(&rng) % 4);
        for (int k = 0; k < n_flips; k++) {
            const size_t pos = (size_t)(kvq_splitmix64(&rng) % s.data_start);
            const uint64_t r = kvq_splitmix64(&rng);
            p[pos] = (r & 3) == 0 ? 0xff : (r & 3) == 1 ? 0 : (uint8_t)(r >> 8);
        }
        kvq_gguf *g = NULL;
        const kvq_status st = kvq_gguf_open_memory(p, s.b.len, &g);
        const int ok = st == KVQ_OK ? walk(g) : st == KVQ_ERR_FORMAT && strncmp(kvq_last_error(), "gguf: ", 6) == 0;
        opened += st == KVQ_OK;
        refused += st != KVQ_OK;
        kvq_gguf_close(g);
        free(p);
        CHECKF(ok, "iteration %d: %s: %s", iter, kvq_status_name(st), kvq_last_error());
    }
    free(s.b.p);
    /* Both outcomes must occur, or the test is not exercising the parser. */
    CHECKF(opened > 100 && refused > 100, "opened %d, refused %d", opened, refused);
}
