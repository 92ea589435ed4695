/* sample.c — sampling with llama.cpp's semantics and default chain order:
 * penalties, top-k, top-p, min-p, temperature, draw. The truncations see the
 * temperature-1 distribution and temperature only reshapes what survives,
 * so changing temp never changes which tokens are allowed (llama.cpp's
 * order, kept so the same flags mean the same thing in both). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "common/rng.h"
#include "text/sample.h"

struct kvq_sampler {
    kvq_sampler_params p;
    uint64_t rng;
    int32_t *hist;     // (p.repeat_last_n) ring of accepted ids
    size_t n_hist, pos;
    int32_t *tmp;      // (p.repeat_last_n)
    kvq_cand *cand;    // (cand_cap)
    size_t cand_cap;
};

kvq_sampler_params kvq_sampler_default_params(void) {
    kvq_sampler_params p = {0.8f, 40, 0.95f, 0.05f, 1.0f, 64, 0};
    return p;
}

kvq_status kvq_sampler_create(const kvq_sampler_params *p, kvq_sampler **out) {
    KVQ_RETURN_IF(!p || !out, KVQ_ERR_INVALID_ARG, "sampler: NULL argument");
    *out = NULL;
    KVQ_RETURN_IF(isnan(p->temp) || isnan(p->top_p) || isnan(p->min_p), KVQ_ERR_INVALID_ARG,
                  "sampler: NaN parameter");
    KVQ_RETURN_IF(!(p->repeat_penalty > 0.0f) || isinf(p->repeat_penalty), KVQ_ERR_INVALID_ARG,
                  "sampler: repeat_penalty %g must be finite and > 0", (double)p->repeat_penalty);
    KVQ_RETURN_IF(p->repeat_last_n < 0 || p->repeat_last_n > (1 << 24), KVQ_ERR_INVALID_ARG,
                  "sampler: repeat_last_n %d out of range [0, 2^24]", p->repeat_last_n);
    kvq_sampler *s = calloc(1, sizeof *s);
    KVQ_RETURN_IF(!s, KVQ_ERR_NOMEM, "sampler: out of memory");
    s->p = *p;
    s->rng = p->seed;
    if (p->repeat_last_n > 0) {
        s->hist = malloc(sizeof(int32_t) * (size_t)p->repeat_last_n);
        s->tmp = malloc(sizeof(int32_t) * (size_t)p->repeat_last_n);
        if (!s->hist || !s->tmp) {
            kvq_sampler_free(s);
            return kvq_fail(KVQ_ERR_NOMEM, "sampler: out of memory");
        }
    }
    *out = s;
    return KVQ_OK;
}

void kvq_sampler_free(kvq_sampler *s) {
    if (!s) return;
    free(s->hist);
    free(s->tmp);
    free(s->cand);
    free(s);
}

void kvq_sampler_accept(kvq_sampler *s, int32_t id) {
    if (!s || s->p.repeat_last_n == 0) return;
    size_t cap = (size_t)s->p.repeat_last_n;
    s->hist[s->pos] = id;
    s->pos = (s->pos + 1) % cap;
    if (s->n_hist < cap) s->n_hist++;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

void kvq_sample_penalty(kvq_cand *c, size_t n, const int32_t *hist, size_t n_hist,
                        float penalty, int32_t *tmp) {
    memcpy(tmp, hist, sizeof(int32_t) * n_hist);
    qsort(tmp, n_hist, sizeof(int32_t), cmp_i32);
    for (size_t i = 0; i < n_hist; i++) {
        int32_t id = tmp[i];
        if ((i > 0 && tmp[i - 1] == id) || id < 0 || (size_t)id >= n) continue;
        float *l = &c[id].logit;
        *l = *l > 0.0f ? *l / penalty : *l * penalty;
    }
}

/* a ranks before b: higher logit, then lower id. */
static int better(const kvq_cand *a, const kvq_cand *b) {
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static int cmp_cand(const void *a, const void *b) {
    const kvq_cand *x = a, *y = b;
    return better(x, y) ? -1 : better(y, x) ? 1 : 0;
}

/* Restores the min-heap (worst candidate at the root) below i. */
static void sift_down(kvq_cand *h, size_t k, size_t i) {
    for (;;) {
        size_t w = i, l = 2 * i + 1, r = l + 1;
        if (l < k && better(&h[w], &h[l])) w = l;
        if (r < k && better(&h[w], &h[r])) w = r;
        if (w == i) return;
        kvq_cand t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

size_t kvq_sample_top_k(kvq_cand *c, size_t n, int32_t k) {
    if (k > 0 && (size_t)k < n) {
        // Keep the best k in a heap over c[0..k), then sort just those.
        size_t kk = (size_t)k;
        for (size_t i = kk / 2 + 1; i-- > 0;) sift_down(c, kk, i);
        for (size_t i = kk; i < n; i++) {
            if (better(&c[i], &c[0])) {
                c[0] = c[i];
                sift_down(c, kk, 0);
            }
        }
        n = kk;
    }
    qsort(c, n, sizeof(kvq_cand), cmp_cand);
    return n;
}

size_t kvq_sample_top_p(const kvq_cand *c, size_t n, float p) {
    if (p >= 1.0f || n == 0) return n;
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) sum += exp((double)c[i].logit - c[0].logit);
    double cum = 0.0;
    for (size_t i = 0; i < n; i++) {
        cum += exp((double)c[i].logit - c[0].logit) / sum;
        if (cum >= p) return i + 1;
    }
    return n;
}

size_t kvq_sample_min_p(const kvq_cand *c, size_t n, float min_p) {
    if (min_p <= 0.0f || n == 0) return n;
    double floor_logit = c[0].logit + log((double)min_p);
    size_t m = 1;
    while (m < n && c[m].logit >= floor_logit) m++;
    return m;
}

kvq_status kvq_sampler_sample(kvq_sampler *s, const float *logits, int32_t n_vocab,
                              int32_t *id) {
    KVQ_RETURN_IF(!s || !logits || !id, KVQ_ERR_INVALID_ARG, "sampler: NULL argument");
    KVQ_RETURN_IF(n_vocab <= 0, KVQ_ERR_INVALID_ARG, "sampler: n_vocab %d", n_vocab);
    size_t n = (size_t)n_vocab;
    if (n > s->cand_cap) {
        kvq_cand *c = realloc(s->cand, sizeof(kvq_cand) * n);
        KVQ_RETURN_IF(!c, KVQ_ERR_NOMEM, "sampler: out of memory");
        s->cand = c;
        s->cand_cap = n;
    }
    kvq_cand *c = s->cand;  // (n_vocab), then the surviving prefix
    int any_finite = 0;
    for (size_t i = 0; i < n; i++) {
        KVQ_RETURN_IF(isnan(logits[i]) || logits[i] == INFINITY, KVQ_ERR_NONFINITE,
                      "sampler: logit %zu is %g", i, (double)logits[i]);
        any_finite |= logits[i] != -INFINITY;
        c[i].id = (int32_t)i;
        c[i].logit = logits[i];
    }
    KVQ_RETURN_IF(!any_finite, KVQ_ERR_NONFINITE, "sampler: every logit is -Inf");
    if (s->p.repeat_penalty != 1.0f && s->n_hist > 0)
        kvq_sample_penalty(c, n, s->hist, s->n_hist, s->p.repeat_penalty, s->tmp);
    if (s->p.temp <= 0.0f) {
        size_t best = 0;
        for (size_t i = 1; i < n; i++)
            if (c[i].logit > c[best].logit) best = i;
        *id = c[best].id;
        return KVQ_OK;
    }
    n = kvq_sample_top_k(c, n, s->p.top_k);
    n = kvq_sample_top_p(c, n, s->p.top_p);
    n = kvq_sample_min_p(c, n, s->p.min_p);
    // Temperature, softmax and the draw, in double so tiny tails still count.
    double inv_t = 1.0 / s->p.temp, sum = 0.0;
    for (size_t i = 0; i < n; i++) sum += exp(((double)c[i].logit - c[0].logit) * inv_t);
    double u = kvq_rng_uniform(&s->rng) * sum, cum = 0.0;
    for (size_t i = 0; i < n; i++) {
        cum += exp(((double)c[i].logit - c[0].logit) * inv_t);
        if (u < cum) {
            *id = c[i].id;
            return KVQ_OK;
        }
    }
    *id = c[n - 1].id;  // u rounded up to the whole sum
    return KVQ_OK;
}
