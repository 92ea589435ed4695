/* sample.h — the sampler's steps over a candidate list (the API is in
 * kvq.h). Each step keeps a prefix or rewrites logits; the steps after
 * top-k expect the list sorted by logit, descending (ties: lower id first). */
#ifndef KVQ_SAMPLE_H
#define KVQ_SAMPLE_H

#include <stddef.h>
#include <stdint.h>

#include "kvq.h"

typedef struct kvq_cand {
    int32_t id;
    float logit;
} kvq_cand;

/* Repeat penalty, once per distinct id of hist: positive logits are divided
 * by penalty, negative ones multiplied (llama.cpp's rule). c is indexed by
 * id (c[i].id == i, n entries); hist ids outside [0, n) are ignored.
 * tmp: (n_hist) scratch. */
void kvq_sample_penalty(kvq_cand *c, size_t n, const int32_t *hist, size_t n_hist,
                        float penalty, int32_t *tmp);

/* Sorts descending and keeps the best k (all when k <= 0 or k >= n).
 * Returns the new count. */
size_t kvq_sample_top_k(kvq_cand *c, size_t n, int32_t k);

/* Keeps the smallest prefix whose probability (softmax of the logits) sums
 * to at least p; at least one. */
size_t kvq_sample_top_p(const kvq_cand *c, size_t n, float p);

/* Keeps the candidates whose probability is at least min_p times the top
 * one's; at least one. */
size_t kvq_sample_min_p(const kvq_cand *c, size_t n, float min_p);

#endif
