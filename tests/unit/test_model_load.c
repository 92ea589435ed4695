/* test_model_load.c — model load on GGUF files the parser accepts but the
 * model cannot run: the tiny in-repo model with one key or tensor renamed
 * (missing), one value changed (inconsistent shapes, unsupported choices)
 * or one tensor's type changed. Each must fail with a message naming the
 * key, tensor or value, and nothing may be read out of bounds (the buffer
 * is exactly the file's size, for ASan). And the file read into memory
 * (the default) or mapped gives the same logits, and decode's int16 route
 * the float route's within its rounding. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "model/wtype.h"
#include "test.h"

#define TINY_MODEL "tests/data/tiny-llama.gguf"

static uint8_t *tiny_bytes(size_t *n) {
    FILE *f = fopen(TINY_MODEL, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc(*n);
    if (p && fread(p, 1, *n, f) != *n) {
        free(p);
        p = NULL;
    }
    fclose(f);
    return p;
}

/* Offset just past the first occurrence of the string s (with its GGUF
 * length prefix in front, so "blk.1.x" does not match "blk.11.x"). */
static size_t after(const uint8_t *p, size_t n, const char *s) {
    const size_t len = strlen(s);
    for (size_t i = 8; i + len <= n; i++)
        if (p[i - 8] == len && !memcmp(p + i, s, len)) return i + len;
    return 0;
}

/* Loads p with `edit` applied; returns 1 if that fails with status want
 * and a message holding text. */
typedef struct edit {
    const char *name;  /* key or tensor name to find */
    int rename;        /* 1: change its last character (the key or tensor goes missing) */
    int value_at;      /* else: bytes after the name where the value starts */
    uint32_t value;    /* written as u32 */
    kvq_status want;
    const char *text;
} edit;

static int load_fails(const uint8_t *file, size_t n, const edit *e) {
    uint8_t *p = malloc(n);
    if (!p) return 0;
    memcpy(p, file, n);
    const size_t at = after(p, n, e->name);
    if (!at) {
        printf("    '%s' not in the tiny model\n", e->name);
        free(p);
        return 0;
    }
    if (e->rename) p[at - 1] = 'X';
    else
        for (int i = 0; i < 4; i++) p[at + (size_t)e->value_at + (size_t)i] = (uint8_t)(e->value >> (8 * i));
    kvq_gguf *g = NULL;
    kvq_model *m = NULL;
    kvq_status s = kvq_gguf_open_memory(p, n, &g);
    if (s == KVQ_OK) s = kvq_model_from_gguf(g, &m);
    const int ok = s == e->want && m == NULL && strstr(kvq_last_error(), e->text) != NULL;
    if (!ok) printf("    %s: %s: %s (want %s '%s')\n", e->name, kvq_status_name(s), kvq_last_error(),
                    kvq_status_name(e->want), e->text);
    kvq_model_free(m);
    free(p);
    return ok;
}

TEST(model_load_refuses_missing_and_inconsistent_metadata) {
    size_t n = 0;
    uint8_t *file = tiny_bytes(&n);
    CHECKF(file, "%s (run from the repo root)", TINY_MODEL);
    {   /* the file as it is loads */
        kvq_gguf *g = NULL;
        kvq_model *m = NULL;
        CHECK_OK(kvq_gguf_open_memory(file, n, &g));
        CHECK_OK(kvq_model_from_gguf(g, &m));
        kvq_model_free(m);
    }
    /* A u32 key's value sits after its name and the 4-byte type. */
    static const edit edits[] = {
        {"general.architecture", 1, 0, 0, KVQ_ERR_FORMAT, "general.architecture"},
        {"llama.block_count", 1, 0, 0, KVQ_ERR_FORMAT, "llama.block_count"},
        {"llama.embedding_length", 1, 0, 0, KVQ_ERR_FORMAT, "llama.embedding_length"},
        {"llama.feed_forward_length", 1, 0, 0, KVQ_ERR_FORMAT, "llama.feed_forward_length"},
        {"llama.attention.head_count", 1, 0, 0, KVQ_ERR_FORMAT, "llama.attention.head_count"},
        {"llama.attention.layer_norm_rms_epsilon", 1, 0, 0, KVQ_ERR_FORMAT, "layer_norm_rms_epsilon"},
        {"llama.block_count", 0, 4, 1u << 31, KVQ_ERR_FORMAT, "llama.block_count = 2147483648 is out of range"},
        {"llama.block_count", 0, 4, 0, KVQ_ERR_FORMAT, "a layer, width or head count is zero"},
        {"llama.block_count", 0, 4, 3, KVQ_ERR_FORMAT, "blk.2.attn_norm.weight"},
        {"llama.attention.head_count_kv", 0, 4, 3, KVQ_ERR_FORMAT, "4 heads are not a multiple of 3 kv heads"},
        {"llama.attention.head_count", 0, 4, 8, KVQ_ERR_UNSUPPORTED, "head_dim 16 is not a multiple of 32"},
        {"llama.embedding_length", 0, 4, 256, KVQ_ERR_FORMAT, "token_embd.weight"},
        {"llama.feed_forward_length", 0, 4, 96, KVQ_ERR_FORMAT, "blk.0.ffn_gate.weight"},
        {"llama.rope.freq_base", 0, 4, 0, KVQ_ERR_FORMAT, "rope theta or eps <= 0"},
        /* "llama" -> "llamX": the architecture key names an unknown one */
        {"llama", 1, 0, 0, KVQ_ERR_UNSUPPORTED, "architecture 'llamX' is not supported"},
        {"token_embd.weight", 1, 0, 0, KVQ_ERR_FORMAT, "token_embd.weight"},
        {"output_norm.weight", 1, 0, 0, KVQ_ERR_FORMAT, "output_norm.weight"},
        {"blk.1.ffn_down.weight", 1, 0, 0, KVQ_ERR_FORMAT, "blk.1.ffn_down.weight"},
        {"blk.0.attn_k.weight", 1, 0, 0, KVQ_ERR_FORMAT, "blk.0.attn_k.weight"},
        /* A tensor info: name, n_dims (u32), dims (u64 each), type (u32). */
        {"blk.0.attn_norm.weight", 0, 4 + 8, KVQ_GGML_TYPE_F16, KVQ_ERR_UNSUPPORTED,
         "tensor 'blk.0.attn_norm.weight' must be f32"},
        {"blk.0.attn_q.weight", 0, 4 + 8, 64, KVQ_ERR_FORMAT, "'blk.0.attn_q.weight'"},
    };
    for (size_t k = 0; k < KVQ_ARRAY_LEN(edits); k++) CHECKF(load_fails(file, n, &edits[k]), "edit %zu", k);
    free(file);
}

/* The weights read into memory (kvq_model_load's default) and mapped from
 * the file are the same bytes: the same logits to the bit. */
TEST(model_load_resident_and_mapped_agree) {
    kvq_model *res = NULL, *map = NULL;
    CHECKF(kvq_model_load_with(TINY_MODEL, KVQ_WEIGHTS_RESIDENT, &res) == KVQ_OK, "%s (run from the repo root)",
           TINY_MODEL);
    CHECK_OK(kvq_model_load_with(TINY_MODEL, KVQ_WEIGHTS_MAPPED, &map));
    kvq_model *bad = NULL;
    CHECK(kvq_model_load_with(TINY_MODEL, (kvq_weights_mode)7, &bad) == KVQ_ERR_INVALID_ARG && !bad);
    if (!res || !map) {
        kvq_model_free(res);
        kvq_model_free(map);
        return;
    }
    CHECK(kvq_model_weights_mode(res) == KVQ_WEIGHTS_RESIDENT && kvq_model_weights_mode(map) == KVQ_WEIGHTS_MAPPED);
    kvq_model_info info;
    kvq_model_get_info(res, &info);
    const int32_t tokens[5] = {1, 17, 5, 42, 9};
    float *logits[2];
    for (int k = 0; k < 2; k++) {
        kvq_ctx_params p;
        kvq_ctx_params_default(&p);
        p.n_ctx = 16;
        p.n_threads = 2;
        kvq_ctx *c = NULL;
        logits[k] = malloc(sizeof(float) * (size_t)info.n_vocab);
        CHECK_OK(kvq_ctx_create(k ? map : res, &p, &c));
        if (c) CHECK_OK(kvq_ctx_eval(c, tokens, 5, logits[k], 0));
        kvq_ctx_free(c);
    }
    CHECK(!memcmp(logits[0], logits[1], sizeof(float) * (size_t)info.n_vocab));
    free(logits[0]);
    free(logits[1]);
    kvq_model_free(res);
    kvq_model_free(map);
}

/* Decode's int16 route (x quantized to 16-bit codes per block of 32, the
 * default where kvq_wtype_x16_fast) against the float route
 * (float_decode): each matvec moves by at most max|x_b| / 32512 per value
 * (model/wtype.h), so three decode steps after a prompt must give nearly
 * the same logits; where the route is fast they must not be the same bits
 * (the route was taken). */
TEST(decode_int16_route_agrees_with_float_route) {
    kvq_model *m = NULL;
    CHECKF(kvq_model_load(TINY_MODEL, &m) == KVQ_OK, "%s (run from the repo root)", TINY_MODEL);
    if (!m) return;
    kvq_model_info info;
    kvq_model_get_info(m, &info);
    const int32_t prompt[4] = {1, 17, 5, 42}, next[3] = {9, 3, 77};
    float *logits[2][3];
    for (int route = 0; route < 2; route++) {
        kvq_ctx_params p;
        kvq_ctx_params_default(&p);
        p.n_ctx = 16;
        p.n_threads = 2;
        p.float_decode = route;
        kvq_ctx *c = NULL;
        CHECK_OK(kvq_ctx_create(m, &p, &c));
        if (c) CHECK_OK(kvq_ctx_eval(c, prompt, 4, NULL, 0));
        for (int s = 0; s < 3; s++) {
            logits[route][s] = calloc((size_t)info.n_vocab, sizeof(float));
            if (c) CHECK_OK(kvq_ctx_eval(c, &next[s], 1, logits[route][s], 0));
        }
        kvq_ctx_free(c);
    }
    int same = 1;
    for (int s = 0; s < 3; s++) {
        double amax = 0, dmax = 0;
        for (int i = 0; i < info.n_vocab; i++) {
            amax = fmax(amax, fabs(logits[1][s][i]));
            dmax = fmax(dmax, fabs((double)logits[0][s][i] - logits[1][s][i]));
        }
        CHECKF(amax > 0 && dmax <= 1e-3 * amax, "step %d: int16 route off the float one by %g (max |logit| %g)", s,
               dmax, amax);
        same &= !memcmp(logits[0][s], logits[1][s], sizeof(float) * (size_t)info.n_vocab);
        free(logits[0][s]);
        free(logits[1][s]);
    }
    CHECK(same == !kvq_wtype_x16_fast(kvq_isa_default()));
    kvq_model_free(m);
}
