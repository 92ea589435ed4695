/* test_session.c — session files and the context's limits on the tiny
 * in-repo model (tests/data/tiny-llama.gguf, written by
 * tests/fuzz/gen_corpus.py): a save/load round trip continues with
 * bit-identical logits, a compressed session is smaller by the codec's
 * ratio, every kind of damage or mismatch is refused by name with the
 * context left as it was, and kvq_ctx_create refuses a context that does
 * not fit in memory before allocating it. */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/hash.h"
#include "kv/kv_session.h"
#include "model/ctx.h"
#include "test.h"

#define TINY_MODEL "tests/data/tiny-llama.gguf"

static kvq_model *tiny(void) {
    kvq_model *m = NULL;
    if (kvq_model_load(TINY_MODEL, &m) != KVQ_OK) {
        kvq_test_fail(__FILE__, __LINE__, "%s: %s (run from the repo root)", TINY_MODEL, kvq_last_error());
        return NULL;
    }
    return m;
}

static kvq_status make_ctx(const kvq_model *m, const char *ctk, const char *ctv, int n_sinks, int boundary,
                           int n_ctx, kvq_ctx **c) {
    kvq_ctx_params p;
    kvq_ctx_params_default(&p);
    p.n_ctx = n_ctx;
    p.n_threads = 2;
    p.n_batch = 64;
    p.ctk = ctk;
    p.ctv = ctv;
    p.n_sinks = n_sinks;
    p.boundary_layers = boundary;
    p.seed = 7;
    return kvq_ctx_create(m, &p, c);
}

static void ids(int32_t *t, int n, int n_vocab, uint64_t seed) {
    for (int i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        t[i] = (int32_t)((seed >> 33) % (uint64_t)n_vocab);
    }
}

static char *tmp_path(char *buf, size_t cap, const char *name) {
    snprintf(buf, cap, "/tmp/kvq-test-%ld-%s", (long)getpid(), name);
    return buf;
}

static uint8_t *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc(*n ? *n : 1);
    if (p && fread(p, 1, *n, f) != *n) {
        free(p);
        p = NULL;
    }
    fclose(f);
    return p;
}

static const struct {
    const char *ctk, *ctv;
    int sinks, boundary, n_tokens;
} configs[] = {
    {"f16", "f16", 0, 0, 100},     {"q4_0", "q4_0", 0, 0, 100},  {"q8_0", "turbo3", 3, 0, 77},
    {"iso4", "q4_1", 0, 1, 64},    {"turbo4+qjl", "f32", 5, 0, 3}, {"q5_0", "rotor3", 0, 0, 0},
};

TEST(session_round_trip_continues_with_identical_logits) {
    kvq_model *m = tiny();
    if (!m) return;
    kvq_model_info info;
    kvq_model_get_info(m, &info);
    char path[256];
    tmp_path(path, sizeof path, "roundtrip.kvqs");
    float *la = malloc(sizeof(float) * (size_t)info.n_vocab), *lb = malloc(sizeof(float) * (size_t)info.n_vocab);
    int32_t t[160];
    ids(t, 160, info.n_vocab, 1);
    for (size_t k = 0; k < KVQ_ARRAY_LEN(configs) && la && lb; k++) {
        kvq_ctx *a = NULL, *b = NULL;
        const int n = configs[k].n_tokens;
        CHECK_OK(make_ctx(m, configs[k].ctk, configs[k].ctv, configs[k].sinks, configs[k].boundary, 256, &a));
        CHECK_OK(make_ctx(m, configs[k].ctk, configs[k].ctv, configs[k].sinks, configs[k].boundary, 256, &b));
        CHECK_OK(kvq_ctx_eval(a, t, n, NULL, 0));
        CHECK_OK(kvq_ctx_session_save(a, path));
        const int32_t *got;
        int n_got = -1;
        CHECK_OK(kvq_ctx_session_load(b, path, &got, &n_got));
        CHECKF(n_got == n && kvq_ctx_n_past(b) == n, "%s/%s: %d tokens back, want %d", configs[k].ctk,
               configs[k].ctv, n_got, n);
        CHECK(n == 0 || memcmp(got, t, sizeof *t * (size_t)n) == 0);
        CHECK(kvq_ctx_kv_bytes(a) == kvq_ctx_kv_bytes(b));
        /* The next tokens (across a tile boundary) see the same cache. */
        for (int i = 0; i < 40; i++) {
            CHECK_OK(kvq_ctx_eval(a, t + n + i, 1, la, 0));
            CHECK_OK(kvq_ctx_eval(b, t + n + i, 1, lb, 0));
            CHECKF(memcmp(la, lb, sizeof(float) * (size_t)info.n_vocab) == 0,
                   "%s/%s: logits differ %d tokens after the load", configs[k].ctk, configs[k].ctv, i);
        }
        kvq_ctx_free(a);
        kvq_ctx_free(b);
    }
    unlink(path);
    free(la);
    free(lb);
    kvq_model_free(m);
}

static long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

TEST(session_compressed_is_smaller_by_the_codec_ratio) {
    kvq_model *m = tiny();
    if (!m) return;
    kvq_model_info info;
    kvq_model_get_info(m, &info);
    int32_t t[224]; /* 7 full tiles: nothing left in f16 staging */
    ids(t, 224, info.n_vocab, 2);
    static const char *const names[] = {"f16", "q8_0", "q4_0", "turbo3"};
    long size[4];
    double row[4];
    char path[256];
    tmp_path(path, sizeof path, "ratio.kvqs");
    for (int k = 0; k < 4; k++) {
        kvq_ctx *c = NULL;
        CHECK_OK(make_ctx(m, names[k], names[k], 0, 0, 256, &c));
        CHECK_OK(kvq_ctx_eval(c, t, 224, NULL, 0));
        CHECK_OK(kvq_ctx_session_save(c, path));
        size[k] = file_size(path);
        /* The file is the cache plus a small fixed part. */
        CHECKF(size[k] > (long)kvq_ctx_kv_bytes(c) && size[k] < (long)kvq_ctx_kv_bytes(c) + 4096,
               "%s: file %ld bytes, cache %zu", names[k], size[k], kvq_ctx_kv_bytes(c));
        kvq_codec *codec;
        CHECK_OK(kvq_codec_create(names[k], info.head_dim, 0, &codec));
        row[k] = (double)kvq_codec_row_bytes(codec);
        kvq_codec_free(codec);
        kvq_ctx_free(c);
    }
    for (int k = 1; k < 4; k++) {
        const double want = row[0] / row[k], got = (double)size[0] / (double)size[k];
        CHECKF(got > 0.9 * want && got <= want, "%s session %.2fx smaller than f16, codec ratio %.2fx", names[k], got,
               want);
    }
    unlink(path);
    kvq_model_free(m);
}

/* The context still holds what it held: tokens and the next logits. */
typedef struct snapshot {
    int n_past;
    int32_t tokens[128];
    size_t kv_bytes;
} snapshot;

static void snap(const kvq_ctx *c, snapshot *s) {
    const int32_t *t = kvq_ctx_tokens(c, &s->n_past);
    if (s->n_past) memcpy(s->tokens, t, sizeof *t * (size_t)s->n_past);
    s->kv_bytes = kvq_ctx_kv_bytes(c);
}

static int unchanged(const kvq_ctx *c, const snapshot *s) {
    int n;
    const int32_t *t = kvq_ctx_tokens(c, &n);
    return n == s->n_past && (!n || memcmp(t, s->tokens, sizeof *t * (size_t)n) == 0) &&
           kvq_ctx_kv_bytes(c) == s->kv_bytes;
}

/* Loading p (n bytes) fails with status want (0: any) and a message
 * holding text, and leaves c as snapshot s. */
static int refused(kvq_ctx *c, const snapshot *s, const uint8_t *p, size_t n, kvq_status want, const char *text) {
    uint8_t *copy = malloc(n ? n : 1); /* exact size: ASan sees overreads */
    if (!copy) return 0;
    memcpy(copy, p, n);
    const kvq_status st = kvq_ctx_session_load_bytes(c, copy, n);
    free(copy);
    if (st == KVQ_OK || (want && st != want) || (text && !strstr(kvq_last_error(), text)) || !unchanged(c, s)) {
        fprintf(stderr, "  load of %zu bytes: %s: %s (want %s '%s')\n", n, kvq_status_name(st), kvq_last_error(),
                want ? kvq_status_name(want) : "any", text ? text : "");
        return 0;
    }
    return 1;
}

/* p with its checksum recomputed: damage the checksum does not see. */
static void reseal(uint8_t *p, size_t n) {
    const uint64_t h = kvq_fnv1a64(KVQ_FNV64_INIT, p + KVQ_SESSION_HEADER_BYTES, n - KVQ_SESSION_HEADER_BYTES);
    for (int i = 0; i < 8; i++) p[24 + i] = (uint8_t)(h >> (8 * i));
}

/* Offsets of the sections' headers in a saved file. */
static int section_offsets(const uint8_t *p, size_t n, size_t *off, int cap) {
    int k = 0;
    for (size_t pos = KVQ_SESSION_HEADER_BYTES; pos + 16 <= n && k < cap; k++) {
        off[k] = pos;
        uint64_t len = 0;
        for (int i = 0; i < 8; i++) len |= (uint64_t)p[pos + 8 + i] << (8 * i);
        pos += 16 + len;
    }
    return k;
}

TEST(session_damage_and_mismatch_are_refused_and_leave_the_context) {
    kvq_model *m = tiny();
    if (!m) return;
    kvq_model_info info;
    kvq_model_get_info(m, &info);
    kvq_ctx *src = NULL, *c = NULL, *f16 = NULL, *small = NULL;
    char path[256];
    tmp_path(path, sizeof path, "damage.kvqs");
    int32_t t[128];
    ids(t, 128, info.n_vocab, 3);
    CHECK_OK(make_ctx(m, "q4_0", "q4_0", 2, 0, 256, &src));
    CHECK_OK(kvq_ctx_eval(src, t, 70, NULL, 0)); /* sinks, 2 tiles, 4 staged */
    CHECK_OK(kvq_ctx_session_save(src, path));
    size_t n = 0;
    uint8_t *file = read_all(path, &n);
    CHECK(file && n > 1000);
    /* The context loaded into holds something else, which must survive. */
    CHECK_OK(make_ctx(m, "q4_0", "q4_0", 2, 0, 256, &c));
    CHECK_OK(kvq_ctx_eval(c, t + 50, 37, NULL, 0));
    snapshot s;
    snap(c, &s);

    size_t off[16];
    const int n_sec = section_offsets(file, n, off, 16);
    CHECKF(n_sec == 3 + info.n_layer, "%d sections", n_sec);
    /* Truncated anywhere, at every section boundary included. */
    for (size_t cut = 0; cut < n; cut++) CHECKF(refused(c, &s, file, cut, KVQ_ERR_FORMAT, NULL), "cut at %zu", cut);
    CHECK(refused(c, &s, file, 10, KVQ_ERR_FORMAT, "header"));
    for (int k = 0; k < n_sec; k++) CHECK(refused(c, &s, file, off[k], KVQ_ERR_FORMAT, "truncated"));
    /* A flipped byte anywhere: the header's fields, then the checksum. */
    uint8_t *bad = malloc(n);
    CHECK(bad);
    for (size_t pos = 0; pos < n; pos += pos < 64 ? 1 : 7) {
        memcpy(bad, file, n);
        bad[pos] ^= 0x20;
        CHECKF(refused(c, &s, bad, n, 0, NULL), "flip at %zu", pos);
        if (pos >= KVQ_SESSION_HEADER_BYTES) CHECK(refused(c, &s, bad, n, KVQ_ERR_FORMAT, "checksum mismatch"));
    }
    memcpy(bad, file, n);
    bad[0] = 'X';
    CHECK(refused(c, &s, bad, n, KVQ_ERR_FORMAT, "bad magic"));
    memcpy(bad, file, n);
    bad[8] = 2;
    CHECK(refused(c, &s, bad, n, KVQ_ERR_UNSUPPORTED, "format version 2"));

    /* Valid checksums over wrong contents: each names its field. */
    const size_t fprt = off[0] + 16, parm = off[1] + 16, toks = off[2] + 16, layr = off[3] + 16;
    /* Each patch writes a 16-bit little-endian value. */
    static const struct {
        int section; /* 0 FPRT, 1 PARM, 2 TOKS, 3 the first LAYR */
        size_t at;
        uint16_t value;
        kvq_status want;
        const char *text;
    } patches[] = {
        {0, 0, 'q', KVQ_ERR_UNSUPPORTED, "architecture 'q'"},
        {0, 16, 3, KVQ_ERR_UNSUPPORTED, "n_layer 3, this model has 2"},
        {0, 36, 7, KVQ_ERR_UNSUPPORTED, "n_vocab 7"},
        {0, 40, 0x55, KVQ_ERR_UNSUPPORTED, "another model file"},
        {1, 12, 16, KVQ_ERR_UNSUPPORTED, "tile_tokens is 16"},
        {1, 16, 3, KVQ_ERR_UNSUPPORTED, "kv sinks is 3"},
        {1, 24, 0, KVQ_ERR_UNSUPPORTED, "centering is 0"},
        {1, 28, 8, KVQ_ERR_UNSUPPORTED, "rotation seed is 8"},
        {1, 37, '8', KVQ_ERR_UNSUPPORTED, "K q8, V q4_0 in the file"},
        {1, 100 + 1, '5', KVQ_ERR_UNSUPPORTED, "layer 0 K codec is q5 in the file"},
        {1, 100 + 64, 20, KVQ_ERR_UNSUPPORTED, "rows are 20 bytes"},
        {2, 0, 200, KVQ_ERR_FORMAT, "200 tokens do not fill"},
        {2, 2, 1, KVQ_ERR_FORMAT, "do not fill"},
        {2, 4 + 4 * 5 + 2, 1, KVQ_ERR_FORMAT, "at index 5 is not in the vocabulary"},
        {3, 0, 1, KVQ_ERR_FORMAT, "says it is layer 1"},
        {3, 4, 71, KVQ_ERR_FORMAT, "holds 71 tokens"},
        {3, 8, 3, KVQ_ERR_FORMAT, "in 3 tiles"},
        {3, 12, 0, KVQ_ERR_FORMAT, "(mean 0)"},
        /* K head 0: mean (32 floats), 2 sink rows, 2 tiles of q4_0 rows. */
        {3, 16 + 2, 0x7FC0, KVQ_ERR_FORMAT, "centering mean holds NaN"},
        {3, 16 + 128, 0x7C00, KVQ_ERR_FORMAT, "sink or staging rows hold NaN"},
        {3, 16 + 128 + 128, 0x7C00, KVQ_ERR_FORMAT, "tile 0 row 0 decodes to NaN"},
    };
    const size_t base[4] = {fprt, parm, toks, layr};
    for (size_t k = 0; k < KVQ_ARRAY_LEN(patches); k++) {
        memcpy(bad, file, n);
        bad[base[patches[k].section] + patches[k].at] = (uint8_t)patches[k].value;
        bad[base[patches[k].section] + patches[k].at + 1] = (uint8_t)(patches[k].value >> 8);
        reseal(bad, n);
        CHECKF(refused(c, &s, bad, n, patches[k].want, patches[k].text), "patch %zu", k);
    }
    /* Trailing bytes, with the header's size and checksum made to agree. */
    uint8_t *longer = malloc(n + 8);
    CHECK(longer);
    memcpy(longer, file, n);
    memset(longer + n, 0, 8);
    const uint64_t payload = n + 8 - KVQ_SESSION_HEADER_BYTES;
    for (int i = 0; i < 8; i++) longer[16 + i] = (uint8_t)(payload >> (8 * i));
    reseal(longer, n + 8);
    CHECK(refused(c, &s, longer, n + 8, KVQ_ERR_FORMAT, "after the last layer"));
    free(longer);

    /* Other codecs, fewer slots, a missing file: refused by name too. */
    CHECK_OK(make_ctx(m, "f16", "f16", 2, 0, 256, &f16));
    snapshot s16;
    snap(f16, &s16);
    CHECK(refused(f16, &s16, file, n, KVQ_ERR_UNSUPPORTED, "this context uses K f16, V f16"));
    CHECK_OK(make_ctx(m, "q4_0", "q4_0", 2, 0, 64, &small));
    snapshot ss;
    snap(small, &ss);
    CHECK(refused(small, &ss, file, n, KVQ_ERR_RANGE, "more than this context's 64"));
    CHECK(kvq_ctx_session_load(c, "/nonexistent/x.kvqs", NULL, NULL) == KVQ_ERR_IO);
    CHECK(strstr(kvq_last_error(), "/nonexistent/x.kvqs") && unchanged(c, &s));

    /* And the file itself still loads: the refusals changed nothing. */
    CHECK_OK(kvq_ctx_session_load_bytes(c, file, n));
    CHECK(kvq_ctx_n_past(c) == 70);
    free(bad);
    free(file);
    unlink(path);
    kvq_ctx_free(src);
    kvq_ctx_free(c);
    kvq_ctx_free(f16);
    kvq_ctx_free(small);
    kvq_model_free(m);
}

/* Files in /tmp whose name starts with prefix. */
static int count_prefixed(const char *prefix) {
    DIR *d = opendir("/tmp");
    if (!d) return -1;
    int k = 0;
    const char *base = prefix + strlen("/tmp/");
    for (struct dirent *e; (e = readdir(d));) k += strncmp(e->d_name, base, strlen(base)) == 0;
    closedir(d);
    return k;
}

TEST(session_save_replaces_atomically_and_reports_io_errors) {
    kvq_model *m = tiny();
    if (!m) return;
    kvq_ctx *c = NULL;
    CHECK_OK(make_ctx(m, "q8_0", "q8_0", 0, 0, 256, &c));
    int32_t t[40];
    ids(t, 40, 260, 4);
    char path[256];
    tmp_path(path, sizeof path, "atomic.kvqs");
    FILE *f = fopen(path, "wb");
    CHECK(f);
    fputs("an older file", f);
    fclose(f);
    CHECK_OK(kvq_ctx_eval(c, t, 40, NULL, 0));
    CHECK_OK(kvq_ctx_session_save(c, path));
    CHECK(file_size(path) > 1000);
    CHECKF(count_prefixed(path) == 1, "temp files left beside %s", path);
    CHECK(kvq_ctx_session_save(c, "/nonexistent/dir/s.kvqs") == KVQ_ERR_IO);
    CHECK(strstr(kvq_last_error(), "/nonexistent/dir/s.kvqs.tmp-"));
    CHECK(kvq_ctx_session_save(c, "") == KVQ_ERR_INVALID_ARG);
    unlink(path);
    kvq_ctx_free(c);
    kvq_model_free(m);
}

TEST(ctx_estimate_bounds_the_full_cache) {
    kvq_model *m = tiny();
    if (!m) return;
    kvq_model_info info;
    kvq_model_get_info(m, &info);
    static const char *const names[] = {"f16", "q4_0", "turbo3+qjl"};
    int32_t t[256];
    ids(t, 256, info.n_vocab, 5);
    for (int k = 0; k < 3; k++) {
        kvq_ctx_params p;
        kvq_ctx_params_default(&p);
        p.n_threads = 1;
        p.ctk = p.ctv = names[k];
        kvq_mem_estimate e;
        CHECK_OK(kvq_ctx_estimate(m, &p, &e));
        CHECK(e.n_ctx == info.n_ctx_train && e.weight_bytes == info.weight_bytes);
        CHECK(e.total_bytes == e.weight_bytes + e.kv_bytes + e.scratch_bytes);
        kvq_ctx *c = NULL;
        CHECK_OK(kvq_ctx_create(m, &p, &c));
        CHECK_OK(kvq_ctx_eval(c, t, 256, NULL, 0));
        /* Live bytes of a full cache, and on top the estimate's allowance
         * for each stream's staging tile and tile padding. */
        const size_t used = kvq_ctx_kv_bytes(c);
        const size_t extra = (size_t)info.n_layer * info.n_kv_head * 2 * (32 * info.head_dim * 2 + 64);
        CHECKF(e.kv_bytes >= used && e.kv_bytes <= used + extra, "%s: estimate %zu, full cache %zu", names[k],
               e.kv_bytes, used);
        kvq_ctx_free(c);
    }
    kvq_model_free(m);
}

/* The memory the context check compares against: mem_limit first; a
 * resident model's file added back to MemAvailable (its copy is already
 * out of it), a mapped one's not; and where MemAvailable is unknown,
 * nothing to check: with the file added back to 0 every context of a
 * resident model was refused (total > the file's size). */
TEST(ctx_available_bytes_adds_a_resident_model_back) {
    const size_t gib = (size_t)1 << 30, file = 300u << 20;
    CHECK(kvq_ctx_available_bytes(0, 8 * gib, 1, file) == 8 * gib + file);
    CHECK(kvq_ctx_available_bytes(0, 8 * gib, 0, file) == 8 * gib);
    CHECK(kvq_ctx_available_bytes(0, 0, 1, file) == 0);
    CHECK(kvq_ctx_available_bytes(0, 0, 0, file) == 0);
    CHECK(kvq_ctx_available_bytes(2 * gib, 8 * gib, 1, file) == 2 * gib);
    CHECK(kvq_ctx_available_bytes(2 * gib, 0, 1, file) == 2 * gib);
}

/* A container's memory cgroup caps what a context may plan for: its limit
 * less its usage, with reclaimable file pages counted as room. */
TEST(cgroup_room_reads_v1_and_v2_files) {
    const char *stat2 = "anon 4096\nfile 209715200\ninactive_file 104857600\nactive_file 5\n";
    CHECK(kvq_cgroup_room("1073741824\n", "536870912\n", stat2) == 1073741824u - (536870912u - 104857600u));
    CHECK(kvq_cgroup_room("1073741824\n", "536870912\n", NULL) == 536870912u);
    CHECK(kvq_cgroup_room("1073741824\n", "536870912\n", "anon 1\n") == 536870912u);
    /* v1: the hierarchical total is the one to take, where it is given */
    const char *stat1 = "cache 1\ninactive_file 1048576\ntotal_inactive_file 2097152\n";
    CHECK(kvq_cgroup_room("4194304\n", "4194304\n", stat1) == 2097152u);
    CHECK(kvq_cgroup_room("4194304\n", "8388608\n", NULL) == 0);  /* over the limit: no room */
    CHECK(kvq_cgroup_room("4194304\n", "1048576\n", "inactive_file 99999999\n") == 3145728u); /* bogus: ignored */
    CHECK(kvq_cgroup_room("max\n", "536870912\n", stat2) == SIZE_MAX);
    CHECK(kvq_cgroup_room("9223372036854771712\n", "1\n", NULL) == SIZE_MAX); /* v1's "no limit" */
    CHECK(kvq_cgroup_room("", "1\n", NULL) == SIZE_MAX);
    CHECK(kvq_cgroup_room("1000\n", "x\n", NULL) == SIZE_MAX);
    CHECK(kvq_cgroup_room(NULL, "1\n", NULL) == SIZE_MAX);
}

TEST(cgroup_mount_dir_finds_the_process_cgroup) {
    char dir[512];
    const char *v2 = "30 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev - cgroup2 cgroup2 rw,nsdelegate\n";
    CHECK(kvq_cgroup_mount_dir("0::/user.slice/app.scope\n", v2, dir, sizeof dir) == 14);
    CHECK(strcmp(dir, "/sys/fs/cgroup/user.slice/app.scope") == 0);
    CHECK(kvq_cgroup_mount_dir("0::/\n", v2, dir, sizeof dir) == 14 && strcmp(dir, "/sys/fs/cgroup") == 0);
    /* v1 beside a v2 mount without the memory controller (this kind of
     * host: the v1 memory line decides, the unified one has no files) */
    const char *hybrid = "12:pids:/\n4:memory:/process_api/63522ec3\n1:name=systemd:/\n0::/\n";
    const char *v1 = "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n";
    CHECK(kvq_cgroup_mount_dir(hybrid, v1, dir, sizeof dir) == 21);
    CHECK(strcmp(dir, "/sys/fs/cgroup/memory/process_api/63522ec3") == 0);
    CHECK(kvq_cgroup_mount_dir(hybrid, "41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n", dir,
                               sizeof dir) == 22 && strcmp(dir, "/sys/fs/cgroup/unified") == 0);
    CHECK(kvq_cgroup_mount_dir("3:cpu,memory,blkio:/a/b\n", "9 1 0:5 / /cg rw - cgroup cgroup rw,cpu,memory\n", dir,
                               sizeof dir) == 3 && strcmp(dir, "/cg/a/b") == 0);
    /* a container's view: the mount's root is the process's cgroup, or an
     * ancestor of it, or (namespaced differently) not on its path at all */
    const char *bind = "50 40 0:32 /docker/abc /sys/fs/cgroup/memory ro - cgroup cgroup rw,memory\n";
    CHECK(kvq_cgroup_mount_dir("4:memory:/docker/abc\n", bind, dir, sizeof dir) == 21 &&
          strcmp(dir, "/sys/fs/cgroup/memory") == 0);
    CHECK(kvq_cgroup_mount_dir("4:memory:/docker/abc/inner\n", bind, dir, sizeof dir) == 21 &&
          strcmp(dir, "/sys/fs/cgroup/memory/inner") == 0);
    CHECK(kvq_cgroup_mount_dir("4:memory:/docker/abcd\n", bind, dir, sizeof dir) == 21 &&
          strcmp(dir, "/sys/fs/cgroup/memory") == 0);
    /* lines that mount no memory hierarchy, or that do not parse */
    CHECK(kvq_cgroup_mount_dir(hybrid, "32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n", dir,
                               sizeof dir) == 0);
    CHECK(kvq_cgroup_mount_dir(hybrid, "31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw,mode=755\n", dir,
                               sizeof dir) == 0);
    CHECK(kvq_cgroup_mount_dir(hybrid, "garbage\n", dir, sizeof dir) == 0);
    CHECK(kvq_cgroup_mount_dir("4:cpu:/x\n", v1, dir, sizeof dir) == 0); /* no memory line */
    CHECK(kvq_cgroup_mount_dir("0::/deep/path\n", v2, dir, 16) == 0);     /* would not fit */
    /* and on this machine some room is found (a full cgroup reads 1, not 0) */
    CHECK(kvq_mem_available() > 0);
}

static void write_cg(const char *dir, const char *name, const char *text) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* The walk up a cgroup tree: every level from the process's cgroup to the
 * mount point counts (the tightest wins), nothing above the mount, and v2's
 * memory.high is a limit as memory.max is. */
TEST(cgroup_hierarchy_room_walks_up_to_the_mount) {
    char top[] = "/tmp/kvq-cgroup-XXXXXX";
    CHECK(mkdtemp(top) != NULL);
    char mnt[64], a[80], b[96], dir[256];
    snprintf(mnt, sizeof mnt, "%s/mnt", top);
    snprintf(a, sizeof a, "%s/a", mnt);
    snprintf(b, sizeof b, "%s/b", a);
    CHECK(mkdir(mnt, 0700) == 0 && mkdir(a, 0700) == 0 && mkdir(b, 0700) == 0);
    const size_t mib = (size_t)1 << 20;
    write_cg(top, "memory.max", "1048576\n"); /* above the mount: never read */
    write_cg(top, "memory.current", "0\n");
    write_cg(a, "memory.max", "1073741824\n"); /* 1024 MiB, 600 used: 424 */
    write_cg(a, "memory.current", "629145600\n");
    write_cg(b, "memory.max", "max\n");
    write_cg(b, "memory.current", "524288000\n"); /* 500 MiB, 100 of it inactive file pages */
    write_cg(b, "memory.stat", "anon 1\ninactive_file 104857600\n");
    snprintf(dir, sizeof dir, "%s", b);
    CHECK(kvq_cgroup_hierarchy_room(dir, strlen(mnt)) == 424 * mib);
    write_cg(b, "memory.high", "838860800\n"); /* 800 MiB: 800 - (500 - 100) */
    snprintf(dir, sizeof dir, "%s", b);
    CHECK(kvq_cgroup_hierarchy_room(dir, strlen(mnt)) == 400 * mib);
    write_cg(mnt, "memory.max", "1258291200\n"); /* the mount itself: 1200 MiB, 1000 used */
    write_cg(mnt, "memory.current", "1048576000\n");
    snprintf(dir, sizeof dir, "%s", b);
    CHECK(kvq_cgroup_hierarchy_room(dir, strlen(mnt)) == 200 * mib);
    /* v1 files at a level without v2's */
    snprintf(dir, sizeof dir, "%s", a);
    write_cg(a, "memory.max", "max\n");
    write_cg(mnt, "memory.max", "max\n");
    CHECK(kvq_cgroup_hierarchy_room(dir, strlen(mnt)) == SIZE_MAX);
    char v1[80];
    snprintf(v1, sizeof v1, "%s/v1", mnt);
    CHECK(mkdir(v1, 0700) == 0);
    write_cg(v1, "memory.limit_in_bytes", "314572800\n");
    write_cg(v1, "memory.usage_in_bytes", "104857600\n");
    snprintf(dir, sizeof dir, "%s", v1);
    CHECK(kvq_cgroup_hierarchy_room(dir, strlen(mnt)) == 200 * mib);
    const char *files[] = {"memory.max", "memory.high", "memory.current", "memory.stat", "memory.limit_in_bytes",
                           "memory.usage_in_bytes"};
    const char *dirs[] = {b, a, v1, mnt, top};
    for (int i = 0; i < 5; i++) {
        for (int j = 0; j < 6; j++) {
            char path[512];
            snprintf(path, sizeof path, "%s/%s", dirs[i], files[j]);
            unlink(path);
        }
        rmdir(dirs[i]);
    }
}

TEST(ctx_create_refuses_what_does_not_fit_or_is_out_of_range) {
    kvq_model *m = tiny();
    if (!m) return;
    kvq_ctx_params p;
    kvq_ctx_params_default(&p);
    p.n_threads = 1;
    kvq_mem_estimate f16, q8, q4;
    CHECK_OK(kvq_ctx_estimate(m, &p, &f16));
    p.ctk = p.ctv = "q8_0";
    CHECK_OK(kvq_ctx_estimate(m, &p, &q8));
    p.ctk = p.ctv = "q4_0";
    CHECK_OK(kvq_ctx_estimate(m, &p, &q4));
    kvq_ctx *c = NULL;
    /* Room for q4_0 but not q8_0: the hint names q4_0. */
    p.ctk = p.ctv = NULL;
    p.mem_limit = (q4.total_bytes + q8.total_bytes) / 2;
    CHECK(kvq_ctx_create(m, &p, &c) == KVQ_ERR_NOMEM && !c);
    CHECKF(strstr(kvq_last_error(), "context 256 needs") && strstr(kvq_last_error(), "(f16/f16)") &&
               strstr(kvq_last_error(), "allowed (mem_limit); --kv q4_0 would need"),
           "%s", kvq_last_error());
    /* Room for nothing: the hint is a shorter context. */
    p.mem_limit = f16.weight_bytes + f16.scratch_bytes + 1000;
    CHECK(kvq_ctx_create(m, &p, &c) == KVQ_ERR_NOMEM);
    CHECKF(strstr(kvq_last_error(), "no smaller KV codec fits, lower -c"), "%s", kvq_last_error());
    p.mem_limit = f16.total_bytes;
    CHECK_OK(kvq_ctx_create(m, &p, &c));
    kvq_ctx_free(c);
    c = NULL;
    p.mem_limit = 0;
    static const struct {
        int n_ctx, n_threads, n_batch;
        const char *ctk, *text;
    } bad[] = {
        {-1, 1, 0, NULL, "context length -1 not in [1, 16777216]"},
        {1 << 25, 1, 0, NULL, "context length 33554432"},
        {16, -2, 0, NULL, "thread count -2 not in [1, 256]"},
        {16, 257, 0, NULL, "thread count 257"},
        {16, 1, 5000, NULL, "batch size 5000"},
        {16, 1, 0, "q9_9", "q9_9"},
    };
    for (size_t k = 0; k < KVQ_ARRAY_LEN(bad); k++) {
        p.n_ctx = bad[k].n_ctx;
        p.n_threads = bad[k].n_threads;
        p.n_batch = bad[k].n_batch;
        p.ctk = bad[k].ctk;
        CHECK(kvq_ctx_create(m, &p, &c) == KVQ_ERR_INVALID_ARG && !c);
        CHECKF(strstr(kvq_last_error(), bad[k].text), "%zu: %s", k, kvq_last_error());
    }
    kvq_model_free(m);
}

/* gen_corpus.py writes the valid fuzz_session seeds from the format's
 * description, independently of kv_session.c: each must load, so the
 * writer, the reader and docs/RELIABILITY.md agree. */
TEST(session_seeds_written_by_python_load) {
    kvq_model *m = tiny();
    if (!m) return;
    static const struct {
        const char *ctk, *ctv;
        int sinks, boundary;
    } cfg[] = {{"f16", "f16", 0, 0}, {"q8_0", "q8_0", 3, 0}, {"q4_0", "turbo3", 2, 0}, {"f32", "f16", 0, 1}};
    static const char *const seeds[] = {"cfg0-000-tokens", "cfg0-070-tokens", "cfg1-002-tokens", "cfg1-100-tokens",
                                        "cfg2-033-tokens", "cfg3-064-tokens"};
    for (size_t k = 0; k < KVQ_ARRAY_LEN(seeds); k++) {
        char path[256];
        snprintf(path, sizeof path, "tests/fuzz/corpus/fuzz_session/%s", seeds[k]);
        size_t n = 0;
        uint8_t *p = read_all(path, &n);
        CHECKF(p && n > 1 && p[0] < KVQ_ARRAY_LEN(cfg), "%s", path);
        kvq_ctx *c = NULL;
        CHECK_OK(make_ctx(m, cfg[p[0]].ctk, cfg[p[0]].ctv, cfg[p[0]].sinks, cfg[p[0]].boundary, 256, &c));
        const kvq_status s = kvq_ctx_session_load_bytes(c, p + 1, n - 1);
        CHECKF(s == KVQ_OK, "%s: %s", seeds[k], kvq_last_error());
        CHECK(kvq_ctx_n_past(c) == atoi(seeds[k] + 5));
        const int32_t next = 3;
        CHECK_OK(kvq_ctx_eval(c, &next, 1, NULL, 0));
        kvq_ctx_free(c);
        free(p);
    }
    kvq_model_free(m);
}
