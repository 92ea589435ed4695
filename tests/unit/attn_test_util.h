/* attn_test_util.h — building stores from random data for the attention
 * and KV store tests. */
#ifndef KVQ_ATTN_TEST_UTIL_H
#define KVQ_ATTN_TEST_UTIL_H

#include "kv/kvstore.h"

/* Appends n tokens to every layer from k, v: (n_layer, n, n_kv_head, head_dim),
 * flushing over pool (or NULL). */
kvq_status kvq_test_fill(kvq_kv *kv, int n, const float *k, const float *v, kvq_threadpool *pool);

/* Random K (outlier channels) and V (N(0,1)) for n tokens of every layer:
 * (n_layer, n, n_kv_head, head_dim) each; caller frees. */
void kvq_test_kv_data(const kvq_kv_params *p, int n, uint64_t seed, float **k, float **v);

/* What the store holds for a layer, decoded to the original space:
 * k, v: (n_kv_head, n_tokens, head_dim). */
void kvq_test_decoded(const kvq_kv *kv, int layer, float *k, float *v);

#endif
