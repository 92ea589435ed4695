/* ctx_mem.c — what a context needs in memory before it allocates any of
 * it, and the refusal when that does not fit. The KV store allocates as the
 * context fills, so without this check a long context would fail (or be
 * killed by the OOM killer) hours into a run instead of at the start. */
#include <stdio.h>
#include <string.h>

#include "kv/kvstore.h"
#include "model/ctx.h"

/* Bytes of one K or V stream of one (layer, kv head) holding n_ctx tokens
 * in codec `name`, as the store lays them out: sinks and the staging tile
 * in f16, whole tiles padded to 64 bytes, the centering mean of quantized
 * codecs. */
static kvq_status stream_bytes(const char *name, const kvq_model *m, const kvq_ctx_params *p, double *out) {
    kvq_codec *c;
    const int head_dim = m->head_dim, n_ctx = p->n_ctx, n_sinks = p->n_sinks;
    KVQ_FORWARD(kvq_codec_create(name, head_dim, p->seed, &c));
    const double T = 32, row = (double)kvq_codec_row_bytes(c);
    const int mean = p->centering && kvq_codec_is_quantized(c);
    kvq_codec_free(c);
    const int sinks = n_sinks < n_ctx ? n_sinks : n_ctx;
    const double tiles = (double)((n_ctx - sinks + 31) / 32);
    const double tile_bytes = (double)(((size_t)(T * row) + 63) & ~(size_t)63);
    *out = (double)sinks * head_dim * 2 + tiles * tile_bytes + T * head_dim * 2 + (mean ? head_dim * 4.0 : 0);
    return KVQ_OK;
}

/* The whole cache at n_ctx tokens with K codec ctk and V codec ctv. */
static kvq_status kv_bytes(const kvq_model *m, const kvq_ctx_params *p, const char *ctk, const char *ctv,
                           double *out) {
    double k, v, bk = 0, bv = 0;
    KVQ_FORWARD(stream_bytes(ctk, m, p, &k));
    KVQ_FORWARD(stream_bytes(ctv, m, p, &v));
    int n_boundary = 2 * p->boundary_layers < m->n_layer ? 2 * p->boundary_layers : m->n_layer;
    if (n_boundary) {
        KVQ_FORWARD(stream_bytes("q8_0", m, p, &bk));
        bv = bk;
    }
    *out = (double)m->n_kv_head * ((m->n_layer - n_boundary) * (k + v) + n_boundary * (bk + bv));
    return KVQ_OK;
}

kvq_status kvq_ctx_estimate(const kvq_model *m, const kvq_ctx_params *p, kvq_mem_estimate *out) {
    KVQ_RETURN_IF(!m || !p || !out, KVQ_ERR_INVALID_ARG, "kvq_ctx_estimate: NULL argument");
    memset(out, 0, sizeof *out);
    kvq_ctx_params cp = *p;
    if (cp.n_ctx == 0) cp.n_ctx = m->n_ctx_train;
    KVQ_RETURN_IF(cp.n_ctx < 1 || cp.n_ctx > (1 << 24), KVQ_ERR_INVALID_ARG, "context length %d not in [1, %d]",
                  cp.n_ctx, 1 << 24);
    KVQ_RETURN_IF(cp.n_sinks < 0 || cp.boundary_layers < 0, KVQ_ERR_INVALID_ARG,
                  "kv sinks %d / boundary layers %d must not be negative", cp.n_sinks, cp.boundary_layers);
    const int B = cp.n_batch == 0 ? KVQ_DEFAULT_N_BATCH : cp.n_batch;
    KVQ_RETURN_IF(B < 1 || B > 4096, KVQ_ERR_INVALID_ARG, "batch size %d not in [1, 4096]", cp.n_batch);
    double kv;
    KVQ_FORWARD(kv_bytes(m, &cp, cp.ctk ? cp.ctk : "f16", cp.ctv ? cp.ctv : "f16", &kv));
    const double b = B < cp.n_ctx ? B : cp.n_ctx;
    const double qd = (double)m->n_head * m->head_dim, kvd = (double)m->n_kv_head * m->head_dim;
    const double widest = m->n_ff > m->n_embd ? m->n_ff : m->n_embd;
    /* The forward pass's buffers per batch token (x, xn, q, k, v, att, gate,
     * up, rope), the int8 copy of the widest input, the token history. */
    const double scratch = 4 * b * (m->n_embd + (m->n_embd > qd ? m->n_embd : qd) + 2 * qd + 2 * kvd + 2 * m->n_ff +
                                    m->n_rot) +
                           b * (widest > qd ? widest : qd) * 1.25 + 4.0 * cp.n_ctx;
    out->n_ctx = cp.n_ctx;
    out->weight_bytes = m->weight_bytes;
    out->kv_bytes = (size_t)kv;
    out->scratch_bytes = (size_t)scratch;
    out->total_bytes = out->weight_bytes + out->kv_bytes + out->scratch_bytes;
    out->available_bytes = kvq_ctx_available_bytes(p->mem_limit, kvq_mem_available(), kvq_gguf_resident(m->gguf),
                                                   (size_t)kvq_gguf_file_size(m->gguf));
    return KVQ_OK;
}

size_t kvq_ctx_available_bytes(size_t mem_limit, size_t mem_available, int resident, size_t file_bytes) {
    if (mem_limit) return mem_limit;
    if (!mem_available) return 0; /* unknown: the file's size alone is not what is free */
    return mem_available + (resident ? file_bytes : 0);
}

#define GIB(x) ((double)(x) / (1024.0 * 1024.0 * 1024.0))

kvq_status kvq_ctx_check_memory(const kvq_model *m, const kvq_ctx_params *p) {
    kvq_mem_estimate e;
    KVQ_FORWARD(kvq_ctx_estimate(m, p, &e));
    if (!e.available_bytes || e.total_bytes <= e.available_bytes) return KVQ_OK;
    const char *ctk = p->ctk ? p->ctk : "f16", *ctv = p->ctv ? p->ctv : "f16";
    /* The suggestion: the first of these, best quality first, that fits. */
    static const char *const smaller[] = {"q8_0", "q4_0", "turbo3", "turbo2"};
    char hint[200] = "";
    const double fixed = (double)e.weight_bytes + (double)e.scratch_bytes;
    for (size_t i = 0; i < KVQ_ARRAY_LEN(smaller) && !hint[0]; i++) {
        double kv;
        if (kv_bytes(m, p, smaller[i], smaller[i], &kv) != KVQ_OK) continue;
        if (fixed + kv <= (double)e.available_bytes && kv < (double)e.kv_bytes)
            snprintf(hint, sizeof hint, "; --kv %s would need %.1f GiB", smaller[i], GIB(fixed + kv));
    }
    if (!hint[0]) {
        /* No codec fits at this length: say how long a context does. */
        const double per_token = (double)e.kv_bytes / e.n_ctx;
        const double room = (double)e.available_bytes - fixed;
        const long fits = room > 0 ? (long)(room / per_token) : 0;
        snprintf(hint, sizeof hint, "; no smaller KV codec fits, lower -c (about %ld tokens fit with %s/%s)", fits, ctk,
                 ctv);
    }
    return kvq_fail(KVQ_ERR_NOMEM, "context %d needs %.1f GiB of KV (%s/%s) + %.1f GiB weights and buffers, %.1f GiB %s%s",
                    e.n_ctx, GIB(e.kv_bytes), ctk, ctv, GIB(e.weight_bytes + e.scratch_bytes), GIB(e.available_bytes),
                    p->mem_limit ? "allowed (mem_limit)" : "available", hint);
}
