/* model.c — loads a GGUF model: architecture, hyper-parameters, weight
 * views. Every shape is checked against the metadata before use, so the
 * forward pass can trust them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"

/* Reads "<arch>.<suffix>" as u32 into *out; optional keys keep *out. */
static kvq_status arch_u32(const kvq_model *m, const char *suffix, int optional, int *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", m->arch_name, suffix);
    if (optional && kvq_gguf_find_key(m->gguf, key) < 0) return KVQ_OK;
    uint32_t v;
    KVQ_FORWARD(kvq_gguf_get_u32(m->gguf, key, &v));
    KVQ_RETURN_IF(v > (1u << 30), KVQ_ERR_FORMAT, "model: %s = %u is out of range", key, v);
    *out = (int)v;
    return KVQ_OK;
}

static kvq_status arch_f32(const kvq_model *m, const char *suffix, int optional, float *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", m->arch_name, suffix);
    if (optional && kvq_gguf_find_key(m->gguf, key) < 0) return KVQ_OK;
    return kvq_gguf_get_f32(m->gguf, key, out);
}

/* A 2-D weight (rows, n): ggml ne = {n, rows}. */
static kvq_status load_weight(const kvq_model *m, const char *name, int64_t rows, int64_t n, kvq_weight *w) {
    const int64_t ne[2] = {n, rows};
    const kvq_gguf_tensor *t;
    KVQ_FORWARD(kvq_gguf_expect_tensor(m->gguf, name, 2, ne, &t));
    w->t = kvq_wtype_find((int)t->type);
    KVQ_RETURN_IF(!w->t, KVQ_ERR_UNSUPPORTED, "model: tensor '%s' has weight type %u, which kvq does not run",
                  name, t->type);
    kvq_status s = kvq_wtype_check_n(w->t, n);
    KVQ_RETURN_IF(s != KVQ_OK, KVQ_ERR_FORMAT, "model: tensor '%s': %s", name, kvq_last_error());
    w->data = t->data;
    w->row_bytes = kvq_wtype_row_bytes(w->t, n);
    w->rows = rows;
    w->n = n;
    return KVQ_OK;
}

/* A 1-D f32 vector of n values; optional ones may be absent (NULL). */
static kvq_status load_vec(const kvq_model *m, const char *name, int64_t n, int optional, kvq_vec *out) {
    *out = NULL;
    if (optional && !kvq_gguf_find_tensor(m->gguf, name)) return KVQ_OK;
    const kvq_gguf_tensor *t;
    KVQ_FORWARD(kvq_gguf_expect_tensor(m->gguf, name, 1, &n, &t));
    KVQ_RETURN_IF(t->type != 0, KVQ_ERR_UNSUPPORTED, "model: tensor '%s' must be f32 (type %u)", name, t->type);
    KVQ_RETURN_IF((uintptr_t)t->data % 4, KVQ_ERR_FORMAT, "model: tensor '%s' is not 4-byte aligned", name);
    *out = t->data;
    return KVQ_OK;
}

static kvq_status load_layer(kvq_model *m, int il) {
    kvq_layer *L = &m->layers[il];
    const int64_t e = m->n_embd, qd = (int64_t)m->n_head * m->head_dim, kvd = (int64_t)m->n_kv_head * m->head_dim;
    char name[96];
#define NAME(suffix) (snprintf(name, sizeof name, "blk.%d." suffix, il), name)
    KVQ_FORWARD(load_vec(m, NAME("attn_norm.weight"), e, 0, &L->attn_norm));
    KVQ_FORWARD(load_vec(m, NAME("ffn_norm.weight"), e, 0, &L->ffn_norm));
    KVQ_FORWARD(load_weight(m, NAME("attn_q.weight"), qd, e, &L->wq));
    KVQ_FORWARD(load_weight(m, NAME("attn_k.weight"), kvd, e, &L->wk));
    KVQ_FORWARD(load_weight(m, NAME("attn_v.weight"), kvd, e, &L->wv));
    KVQ_FORWARD(load_weight(m, NAME("attn_output.weight"), e, qd, &L->wo));
    KVQ_FORWARD(load_weight(m, NAME("ffn_gate.weight"), m->n_ff, e, &L->gate));
    KVQ_FORWARD(load_weight(m, NAME("ffn_up.weight"), m->n_ff, e, &L->up));
    KVQ_FORWARD(load_weight(m, NAME("ffn_down.weight"), e, m->n_ff, &L->down));
    const int biased = m->arch == KVQ_ARCH_QWEN2;
    KVQ_FORWARD(load_vec(m, NAME("attn_q.bias"), qd, !biased, &L->bq));
    KVQ_FORWARD(load_vec(m, NAME("attn_k.bias"), kvd, !biased, &L->bk));
    KVQ_FORWARD(load_vec(m, NAME("attn_v.bias"), kvd, !biased, &L->bv));
    const int qk_norm = m->arch == KVQ_ARCH_QWEN3;
    KVQ_FORWARD(load_vec(m, NAME("attn_q_norm.weight"), m->head_dim, !qk_norm, &L->q_norm));
    KVQ_FORWARD(load_vec(m, NAME("attn_k_norm.weight"), m->head_dim, !qk_norm, &L->k_norm));
#undef NAME
    return KVQ_OK;
}

static size_t weight_size(const kvq_weight *w) { return w->row_bytes * (size_t)w->rows; }

static kvq_status load_hparams(kvq_model *m) {
    kvq_gguf_str arch;
    KVQ_FORWARD(kvq_gguf_get_str(m->gguf, "general.architecture", &arch));
    static const struct { const char *name; kvq_arch arch; int neox; } archs[] = {
        {"llama", KVQ_ARCH_LLAMA, 0}, {"qwen2", KVQ_ARCH_QWEN2, 1}, {"qwen3", KVQ_ARCH_QWEN3, 1}};
    int found = 0;
    for (size_t i = 0; i < KVQ_ARRAY_LEN(archs); i++) {
        if (arch.len == strlen(archs[i].name) && memcmp(arch.ptr, archs[i].name, arch.len) == 0) {
            m->arch = archs[i].arch;
            m->rope_neox = archs[i].neox;
            snprintf(m->arch_name, sizeof m->arch_name, "%s", archs[i].name);
            found = 1;
        }
    }
    KVQ_RETURN_IF(!found, KVQ_ERR_UNSUPPORTED,
                  "model: architecture '%.*s' is not supported (kvq runs llama, qwen2, qwen3)",
                  (int)(arch.len > 40 ? 40 : arch.len), arch.ptr);

    KVQ_FORWARD(arch_u32(m, "block_count", 0, &m->n_layer));
    KVQ_FORWARD(arch_u32(m, "embedding_length", 0, &m->n_embd));
    KVQ_FORWARD(arch_u32(m, "feed_forward_length", 0, &m->n_ff));
    KVQ_FORWARD(arch_u32(m, "attention.head_count", 0, &m->n_head));
    m->n_kv_head = m->n_head;
    KVQ_FORWARD(arch_u32(m, "attention.head_count_kv", 1, &m->n_kv_head));
    m->n_ctx_train = 2048;
    KVQ_FORWARD(arch_u32(m, "context_length", 1, &m->n_ctx_train));
    KVQ_RETURN_IF(m->n_layer < 1 || m->n_embd < 1 || m->n_ff < 1 || m->n_head < 1 || m->n_kv_head < 1,
                  KVQ_ERR_FORMAT, "model: a layer, width or head count is zero");
    KVQ_RETURN_IF(m->n_head % m->n_kv_head, KVQ_ERR_FORMAT, "model: %d heads are not a multiple of %d kv heads",
                  m->n_head, m->n_kv_head);
    m->head_dim = m->n_embd / m->n_head;
    KVQ_FORWARD(arch_u32(m, "attention.key_length", 1, &m->head_dim));
    int v_len = m->head_dim;
    KVQ_FORWARD(arch_u32(m, "attention.value_length", 1, &v_len));
    KVQ_RETURN_IF(v_len != m->head_dim, KVQ_ERR_UNSUPPORTED, "model: key length %d != value length %d",
                  m->head_dim, v_len);
    KVQ_RETURN_IF(m->head_dim < 32 || m->head_dim % 32 || m->head_dim > KVQ_MAX_HEAD_DIM, KVQ_ERR_UNSUPPORTED,
                  "model: head_dim %d is not a multiple of 32 up to %d", m->head_dim, KVQ_MAX_HEAD_DIM);
    m->n_rot = m->head_dim;
    KVQ_FORWARD(arch_u32(m, "rope.dimension_count", 1, &m->n_rot));
    KVQ_RETURN_IF(m->n_rot < 2 || m->n_rot % 2 || m->n_rot > m->head_dim, KVQ_ERR_FORMAT,
                  "model: rope.dimension_count %d must be even and at most head_dim %d", m->n_rot, m->head_dim);
    m->rope_theta = 10000.0f;
    KVQ_FORWARD(arch_f32(m, "rope.freq_base", 1, &m->rope_theta));
    m->norm_eps = 1e-5f;
    KVQ_FORWARD(arch_f32(m, "attention.layer_norm_rms_epsilon", 0, &m->norm_eps));
    KVQ_RETURN_IF(!(m->rope_theta > 0) || !(m->norm_eps > 0), KVQ_ERR_FORMAT, "model: rope theta or eps <= 0");

    /* Rope scaling: none or linear (positions divided by the factor). */
    m->rope_freq_scale = 1.0f;
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", m->arch_name);
    if (kvq_gguf_find_key(m->gguf, key) >= 0) {
        kvq_gguf_str type;
        KVQ_FORWARD(kvq_gguf_get_str(m->gguf, key, &type));
        const int none = type.len == 4 && !memcmp(type.ptr, "none", 4);
        const int linear = type.len == 6 && !memcmp(type.ptr, "linear", 6);
        KVQ_RETURN_IF(!none && !linear, KVQ_ERR_UNSUPPORTED, "model: rope scaling '%.*s' is not supported",
                      (int)(type.len > 20 ? 20 : type.len), type.ptr);
        if (linear) {
            float factor = 1.0f;
            KVQ_FORWARD(arch_f32(m, "rope.scaling.factor", 1, &factor));
            KVQ_RETURN_IF(!(factor > 0), KVQ_ERR_FORMAT, "model: rope scaling factor %g", factor);
            m->rope_freq_scale = 1.0f / factor;
        }
    }
    return KVQ_OK;
}

static kvq_status load_all(kvq_model *m) {
    KVQ_FORWARD(load_hparams(m));
    const kvq_gguf_tensor *emb = kvq_gguf_find_tensor(m->gguf, "token_embd.weight");
    KVQ_RETURN_IF(!emb || emb->n_dims != 2, KVQ_ERR_FORMAT, "model: tensor 'token_embd.weight' missing or not 2-D");
    KVQ_RETURN_IF(emb->ne[1] > (1 << 24), KVQ_ERR_FORMAT, "model: vocabulary of %lld tokens",
                  (long long)emb->ne[1]);
    m->n_vocab = (int)emb->ne[1];
    KVQ_FORWARD(load_weight(m, "token_embd.weight", m->n_vocab, m->n_embd, &m->tok_embd));
    if (kvq_gguf_find_tensor(m->gguf, "output.weight"))
        KVQ_FORWARD(load_weight(m, "output.weight", m->n_vocab, m->n_embd, &m->output));
    else
        m->output = m->tok_embd; /* tied embeddings */
    KVQ_FORWARD(load_vec(m, "output_norm.weight", m->n_embd, 0, &m->output_norm));
    KVQ_FORWARD(load_vec(m, "rope_freqs.weight", m->n_rot / 2, 1, &m->rope_freq_factors));

    m->layers = calloc((size_t)m->n_layer, sizeof *m->layers);
    KVQ_RETURN_IF(!m->layers, KVQ_ERR_NOMEM, "model: out of memory");
    m->weight_bytes = weight_size(&m->tok_embd) + (m->output.data != m->tok_embd.data ? weight_size(&m->output) : 0);
    for (int il = 0; il < m->n_layer; il++) {
        KVQ_FORWARD(load_layer(m, il));
        const kvq_layer *L = &m->layers[il];
        m->weight_bytes += weight_size(&L->wq) + weight_size(&L->wk) + weight_size(&L->wv) + weight_size(&L->wo) +
                           weight_size(&L->gate) + weight_size(&L->up) + weight_size(&L->down);
    }
    return KVQ_OK;
}

kvq_status kvq_model_from_gguf(kvq_gguf *g, kvq_model **out) {
    KVQ_RETURN_IF(!g || !out, KVQ_ERR_INVALID_ARG, "kvq_model_from_gguf: NULL argument");
    *out = NULL;
    kvq_model *m = calloc(1, sizeof *m);
    if (!m) {
        kvq_gguf_close(g);
        return kvq_fail(KVQ_ERR_NOMEM, "model: out of memory");
    }
    m->gguf = g;
    const kvq_status s = load_all(m);
    if (s != KVQ_OK) {
        kvq_model_free(m);
        return s;
    }
    *out = m;
    return KVQ_OK;
}

kvq_status kvq_model_load_with(const char *path, kvq_weights_mode mode, kvq_model **out) {
    KVQ_RETURN_IF(!path || !out, KVQ_ERR_INVALID_ARG, "kvq_model_load: NULL argument");
    KVQ_RETURN_IF(mode != KVQ_WEIGHTS_RESIDENT && mode != KVQ_WEIGHTS_MAPPED, KVQ_ERR_INVALID_ARG,
                  "kvq_model_load: weights mode %d is neither RESIDENT nor MAPPED", (int)mode);
    *out = NULL;
    kvq_gguf *g;
    KVQ_FORWARD(kvq_gguf_open_file(path, mode == KVQ_WEIGHTS_RESIDENT, &g));
    return kvq_model_from_gguf(g, out);
}

kvq_status kvq_model_load(const char *path, kvq_model **out) {
    return kvq_model_load_with(path, KVQ_WEIGHTS_RESIDENT, out);
}

kvq_weights_mode kvq_model_weights_mode(const kvq_model *m) {
    return m && kvq_gguf_resident(m->gguf) ? KVQ_WEIGHTS_RESIDENT : KVQ_WEIGHTS_MAPPED;
}

void kvq_model_free(kvq_model *m) {
    if (!m) return;
    free(m->layers);
    kvq_gguf_close(m->gguf);
    free(m);
}

void kvq_model_get_info(const kvq_model *m, kvq_model_info *info) {
    memset(info, 0, sizeof *info);
    if (!m) return;
    info->arch = m->arch_name;
    info->n_layer = m->n_layer;
    info->n_embd = m->n_embd;
    info->n_head = m->n_head;
    info->n_kv_head = m->n_kv_head;
    info->head_dim = m->head_dim;
    info->n_ff = m->n_ff;
    info->n_vocab = m->n_vocab;
    info->n_ctx_train = m->n_ctx_train;
    info->weight_bytes = m->weight_bytes;
}

const kvq_gguf *kvq_model_gguf(const kvq_model *m) { return m ? m->gguf : NULL; }
