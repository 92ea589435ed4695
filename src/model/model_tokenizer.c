/* model_tokenizer.c — builds a model's tokenizer from its GGUF metadata
 * (tokenizer.ggml.*). The tokenizer itself (src/text/) knows nothing of GGUF. */
#include <stdlib.h>
#include <string.h>

#include "model/model.h"

static kvq_status opt_id(const kvq_gguf *g, const char *key, int32_t *out) {
    *out = -1;
    if (kvq_gguf_find_key(g, key) < 0) return KVQ_OK;
    uint32_t v;
    KVQ_FORWARD(kvq_gguf_get_u32(g, key, &v));
    *out = v > (uint32_t)INT32_MAX ? -1 : (int32_t)v;
    return KVQ_OK;
}

static kvq_status opt_bool(const kvq_gguf *g, const char *key, int dflt, int *out) {
    *out = dflt;
    return kvq_gguf_find_key(g, key) < 0 ? KVQ_OK : kvq_gguf_get_bool(g, key, out);
}

/* An array of GGUF strings as (pointers, lengths) for the tokenizer. */
static kvq_status str_array(const kvq_gguf *g, const char *key, uint64_t n, const char ***ptrs, uint32_t **lens) {
    kvq_gguf_str *s = malloc(sizeof *s * (n ? n : 1));
    *ptrs = malloc(sizeof **ptrs * (n ? n : 1));
    *lens = malloc(sizeof **lens * (n ? n : 1));
    kvq_status st = (!s || !*ptrs || !*lens) ? kvq_fail(KVQ_ERR_NOMEM, "tokenizer: out of memory") : KVQ_OK;
    if (st == KVQ_OK) st = kvq_gguf_get_arr_str(g, key, s, n);
    for (uint64_t i = 0; st == KVQ_OK && i < n; i++) {
        if (s[i].len > UINT32_MAX) st = kvq_fail(KVQ_ERR_FORMAT, "tokenizer: %s[%llu] is too long", key,
                                                 (unsigned long long)i);
        else {
            (*ptrs)[i] = s[i].ptr;
            (*lens)[i] = (uint32_t)s[i].len;
        }
    }
    free(s);
    return st;
}

kvq_status kvq_model_tokenizer(const kvq_model *m, kvq_tokenizer **out) {
    KVQ_RETURN_IF(!m || !out, KVQ_ERR_INVALID_ARG, "kvq_model_tokenizer: NULL argument");
    *out = NULL;
    const kvq_gguf *g = m->gguf;
    kvq_tokenizer_params p;
    memset(&p, 0, sizeof p);
    char model_name[32] = "", pre_name[64] = "";
    const char **tokens = NULL, **merges = NULL;
    uint32_t *token_lens = NULL, *merge_lens = NULL;
    int32_t *types = NULL;
    float *scores = NULL;
    kvq_status s;

    kvq_gguf_str str;
    s = kvq_gguf_get_str(g, "tokenizer.ggml.model", &str);
    if (s != KVQ_OK) goto fail;
    if (str.len >= sizeof model_name) {
        s = kvq_fail(KVQ_ERR_UNSUPPORTED, "tokenizer: model '%.20s...' is not supported", str.ptr);
        goto fail;
    }
    memcpy(model_name, str.ptr, str.len);
    p.model = model_name;
    if (kvq_gguf_find_key(g, "tokenizer.ggml.pre") >= 0) {
        s = kvq_gguf_get_str(g, "tokenizer.ggml.pre", &str);
        if (s != KVQ_OK) goto fail;
        if (str.len >= sizeof pre_name) {
            s = kvq_fail(KVQ_ERR_UNSUPPORTED, "tokenizer: pre-tokenizer '%.20s...' is not supported", str.ptr);
            goto fail;
        }
        memcpy(pre_name, str.ptr, str.len);
        p.pre = pre_name;
    }

    uint64_t n_vocab;
    s = kvq_gguf_get_arr_len(g, "tokenizer.ggml.tokens", &n_vocab);
    if (s != KVQ_OK) goto fail;
    if (n_vocab == 0 || n_vocab > (uint64_t)m->n_vocab) {
        s = kvq_fail(KVQ_ERR_FORMAT, "tokenizer: %llu tokens for a model with %d embedding rows",
                     (unsigned long long)n_vocab, m->n_vocab);
        goto fail;
    }
    p.n_vocab = (int32_t)n_vocab;
    s = str_array(g, "tokenizer.ggml.tokens", n_vocab, &tokens, &token_lens);
    if (s != KVQ_OK) goto fail;
    p.tokens = tokens;
    p.token_lens = token_lens;

    if (kvq_gguf_find_key(g, "tokenizer.ggml.token_type") >= 0) {
        types = malloc(sizeof *types * n_vocab);
        s = types ? kvq_gguf_get_arr_i32(g, "tokenizer.ggml.token_type", 0, 6, types, n_vocab)
                  : kvq_fail(KVQ_ERR_NOMEM, "tokenizer: out of memory");
        if (s != KVQ_OK) goto fail;
        p.token_types = types;
    }
    if (kvq_gguf_find_key(g, "tokenizer.ggml.scores") >= 0) {
        scores = malloc(sizeof *scores * n_vocab);
        s = scores ? kvq_gguf_get_arr_f32(g, "tokenizer.ggml.scores", scores, n_vocab)
                   : kvq_fail(KVQ_ERR_NOMEM, "tokenizer: out of memory");
        if (s != KVQ_OK) goto fail;
        p.scores = scores;
    }
    if (kvq_gguf_find_key(g, "tokenizer.ggml.merges") >= 0) {
        uint64_t n_merges;
        s = kvq_gguf_get_arr_len(g, "tokenizer.ggml.merges", &n_merges);
        if (s == KVQ_OK && n_merges > (uint64_t)INT32_MAX)
            s = kvq_fail(KVQ_ERR_FORMAT, "tokenizer: %llu merges", (unsigned long long)n_merges);
        if (s == KVQ_OK) s = str_array(g, "tokenizer.ggml.merges", n_merges, &merges, &merge_lens);
        if (s != KVQ_OK) goto fail;
        p.n_merges = (int32_t)n_merges;
        p.merges = merges;
        p.merge_lens = merge_lens;
    }
    if ((s = opt_id(g, "tokenizer.ggml.bos_token_id", &p.bos_id)) != KVQ_OK ||
        (s = opt_id(g, "tokenizer.ggml.eos_token_id", &p.eos_id)) != KVQ_OK ||
        (s = opt_id(g, "tokenizer.ggml.eot_token_id", &p.eot_id)) != KVQ_OK ||
        (s = opt_id(g, "tokenizer.ggml.unknown_token_id", &p.unk_id)) != KVQ_OK ||
        (s = opt_id(g, "tokenizer.ggml.padding_token_id", &p.pad_id)) != KVQ_OK ||
        (s = opt_bool(g, "tokenizer.ggml.add_bos_token", !strcmp(model_name, "llama"), &p.add_bos)) != KVQ_OK)
        goto fail;
    /* llama.cpp reads add_space_prefix for SentencePiece only; byte-level
     * BPE files (SmolLM2's among them) set it without meaning it. */
    int space_prefix = -1;
    if (strcmp(model_name, "gpt2") != 0 &&
        (s = opt_bool(g, "tokenizer.ggml.add_space_prefix", -1, &space_prefix)) != KVQ_OK)
        goto fail;
    p.add_space_prefix = space_prefix;
    s = kvq_tokenizer_create(&p, out);
fail:
    free(tokens);
    free(token_lens);
    free(merges);
    free(merge_lens);
    free(types);
    free(scores);
    return s;
}
