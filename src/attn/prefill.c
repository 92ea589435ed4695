/* prefill.c — causal attention for a block of new tokens. Queries are taken
 * in blocks: each tile is decoded once per block and serves every query of
 * the block (and all G heads of each), so the decode cost of a compressed
 * tile is shared by QUERY_BLOCK queries. */
#include "attn/attn_kernels.h"

/* 64 -> 256: 512 queries at depth 4096 (smollm2-135m shapes, 2 threads,
 * attn-bench --prefill 512) q8_0 0.94-0.98 -> 1.00x f16, turbo4 0.94-0.96
 * -> 1.00x; kvq bench pp512 @ d4096 q8_0 0.935 -> 0.996x, iq4_nl 0.92 ->
 * 0.965x. The decodes were ~4% of the work at 64; 512 gained nothing more
 * and doubles the per-task partials (n_q x G x (head_dim + 2) floats). */
#define QUERY_BLOCK 256

kvq_status kvq_attn_prefill(const kvq_kv *kv, int layer, kvq_threadpool *pool, int n_q, int n_head, const float *q,
                            float *out) {
    KVQ_RETURN_IF(!kv || !q || !out, KVQ_ERR_INVALID_ARG, "kvq_attn_prefill: NULL argument");
    KVQ_RETURN_IF(n_q < 1, KVQ_ERR_INVALID_ARG, "kvq_attn_prefill: n_q %d < 1", n_q);
    const int n_tokens = kvq_kv_n_tokens(kv, layer);
    const size_t stride = (size_t)n_head * kv->p.head_dim; /* floats per query */
    for (int b = 0; b < n_q; b += QUERY_BLOCK) {
        const int nb = n_q - b < QUERY_BLOCK ? n_q - b : QUERY_BLOCK;
        KVQ_FORWARD(kvq_attn_run(kv, layer, pool, kvq_isa_default(), n_tokens - n_q + b, nb, n_head,
                                 q + (size_t)b * stride, out + (size_t)b * stride));
    }
    return KVQ_OK;
}
