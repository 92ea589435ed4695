/* ctx.h — the inference context's insides, shared by the forward pass
 * (forward.c), sessions (ctx_session.c) and the memory estimate (ctx_mem.c). */
#ifndef KVQ_CTX_H
#define KVQ_CTX_H

#include "common/threadpool.h"
#include "model/model.h"

struct kvq_ctx {
    const kvq_model *m;
    kvq_ctx_params p;
    kvq_kv *kv;
    kvq_threadpool *pool;
    kvq_isa isa;
    int n_past;
    int32_t *tokens; /* (cap_tokens) the ids the cache holds, first n_past valid (sessions save them) */
    int cap_tokens;
    int n_threads;
    double attn_seconds; /* cumulative wall time inside the fused attention calls */
    /* Scratch for one chunk of up to n_batch tokens. */
    float *x;        /* (n_batch, n_embd) residual stream */
    float *xn;       /* (n_batch, n_embd) normed input of a block */
    float *q;        /* (n_batch, n_head * head_dim) */
    float *k, *v;    /* (n_batch, n_kv_head * head_dim) */
    float *att;      /* (n_batch, n_head * head_dim) attention output */
    float *gate, *up; /* (n_batch, n_ff) */
    float *rope;     /* (n_batch, n_rot / 2, 2) cos, sin */
    void *xq_scratch; /* int8 activations of the widest input, (n_batch, max(n_embd, n_ff)) + scales */
    void *x16_scratch; /* int16 activations of one token's widest input (decode) */
};

/* Replaces the context's cache and token history with kv and tokens[0..n)
 * (taking ownership of both) and frees the old ones. Cannot fail: the
 * caller validated and allocated everything first. */
void kvq_ctx_adopt(kvq_ctx *c, kvq_kv *kv, int32_t *tokens, int n);

/* kvq_ctx_estimate's available_bytes: mem_limit where set, else 0 where
 * MemAvailable is unknown (0: nothing is checked), else MemAvailable plus
 * the model file where it is resident (its copy is out of MemAvailable
 * already; a mapping's pages are page cache, which MemAvailable counts). */
size_t kvq_ctx_available_bytes(size_t mem_limit, size_t mem_available, int resident, size_t file_bytes);

/* kvq_ctx_estimate's total against the available memory: KVQ_ERR_NOMEM
 * with the numbers and a codec that would fit when it does not. */
kvq_status kvq_ctx_check_memory(const kvq_model *m, const kvq_ctx_params *p);

/* kvq_ctx_session_load on bytes in memory (tests, fuzzing). */
kvq_status kvq_ctx_session_load_bytes(kvq_ctx *c, const uint8_t *data, size_t size);

#endif
