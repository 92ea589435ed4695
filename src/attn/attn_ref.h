/* attn_ref.h — float64 reference attention: the oracle for every kernel. */
#ifndef KVQ_ATTN_REF_H
#define KVQ_ATTN_REF_H

/* One query position, grouped-query heads: query head h attends over kv head
 * h / (n_head / n_kv_head) with weights softmax(scale * q . k_t) over the
 * n_tokens rows, in double precision.
 * q: (n_head, head_dim); k, v: (n_kv_head, n_tokens, head_dim);
 * out: (n_head, head_dim). n_head must be a multiple of n_kv_head; with
 * n_tokens == 0 out is zeros. */
void kvq_attn_ref(int n_head, int n_kv_head, int head_dim, int n_tokens, double scale, const float *q,
                  const float *k, const float *v, double *out);

#endif
