/* attn_ref.c — float64 reference attention (two passes: max, then sums). */
#include <math.h>
#include <stddef.h>

#include "attn/attn_ref.h"

void kvq_attn_ref(int n_head, int n_kv_head, int head_dim, int n_tokens, double scale, const float *q,
                  const float *k, const float *v, double *out) {
    const int group = n_head / n_kv_head;
    const size_t d = (size_t)head_dim;
    for (int h = 0; h < n_head; h++) {
        const float *qh = q + (size_t)h * d;
        const float *kh = k + (size_t)(h / group) * n_tokens * d; /* (n_tokens, head_dim) */
        const float *vh = v + (size_t)(h / group) * n_tokens * d; /* (n_tokens, head_dim) */
        double *o = out + (size_t)h * d;
        for (size_t i = 0; i < d; i++) o[i] = 0;
        if (n_tokens == 0) continue;
        double m = -INFINITY;
        for (int t = 0; t < n_tokens; t++) {
            double s = 0;
            for (size_t i = 0; i < d; i++) s += (double)qh[i] * kh[t * d + i];
            if (s * scale > m) m = s * scale;
        }
        double l = 0;
        for (int t = 0; t < n_tokens; t++) {
            double s = 0;
            for (size_t i = 0; i < d; i++) s += (double)qh[i] * kh[t * d + i];
            const double p = exp(s * scale - m);
            l += p;
            for (size_t i = 0; i < d; i++) o[i] += p * vh[t * d + i];
        }
        for (size_t i = 0; i < d; i++) o[i] /= l;
    }
}
