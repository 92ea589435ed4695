/* ppl_stats.c — see ppl_stats.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ppl_stats.h"

void ppl_log_softmax(const float *x, int n, float *out) {
    float mx = x[0];
    for (int i = 1; i < n; i++)
        if (x[i] > mx) mx = x[i];
    double s = 0.0;
    for (int i = 0; i < n; i++) s += exp((double)x[i] - mx);
    const double lse = mx + log(s);
    for (int i = 0; i < n; i++) out[i] = (float)((double)x[i] - lse);
}

int ppl_argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

double ppl_kld(const float *lp, const float *lq, int n) {
    double s = 0.0;
    for (int i = 0; i < n; i++) s += exp((double)lp[i]) * ((double)lp[i] - (double)lq[i]);
    return s;
}

/* "a ranks below b": smaller value, or the same value at a higher index. */
static int below(float va, int32_t ia, float vb, int32_t ib) { return va < vb || (va == vb && ia > ib); }

static void sift_down(int32_t *ids, float *vals, int k, int i) {
    for (;;) {
        int m = i;
        const int l = 2 * i + 1, r = l + 1;
        if (l < k && below(vals[l], ids[l], vals[m], ids[m])) m = l;
        if (r < k && below(vals[r], ids[r], vals[m], ids[m])) m = r;
        if (m == i) return;
        const int32_t ti = ids[i];
        const float tv = vals[i];
        ids[i] = ids[m];
        vals[i] = vals[m];
        ids[m] = ti;
        vals[m] = tv;
        i = m;
    }
}

void ppl_topk(const float *lp, int n, int k, int32_t *ids, float *vals) {
    /* A min-heap of the k best so far: n log k, and no copy of the row. */
    for (int i = 0; i < k; i++) {
        ids[i] = i;
        vals[i] = lp[i];
    }
    for (int i = k / 2 - 1; i >= 0; i--) sift_down(ids, vals, k, i);
    for (int i = k; i < n; i++)
        if (below(vals[0], ids[0], lp[i], i)) {
            ids[0] = i;
            vals[0] = lp[i];
            sift_down(ids, vals, k, 0);
        }
    /* Heap sort in place: popping the minimum to the back leaves the best first. */
    for (int end = k - 1; end > 0; end--) {
        const int32_t ti = ids[0];
        const float tv = vals[0];
        ids[0] = ids[end];
        vals[0] = vals[end];
        ids[end] = ti;
        vals[end] = tv;
        sift_down(ids, vals, end, 0);
    }
}

double ppl_kld_topk(const int32_t *ids, const float *lp_top, int k, const float *lq) {
    double s = 0.0, mass_p = 0.0, mass_q = 0.0;
    for (int i = 0; i < k; i++) {
        const double p = exp((double)lp_top[i]), q = exp((double)lq[ids[i]]);
        s += p * ((double)lp_top[i] - (double)lq[ids[i]]);
        mass_p += p;
        mass_q += q;
    }
    const double rp = 1.0 - mass_p, rq = 1.0 - mass_q;
    /* Rounding can leave a tail at or just below 0 when the top k hold
     * (nearly) everything; then there is nothing to add. */
    if (rp > 1e-12 && rq > 1e-300) s += rp * log(rp / rq);
    return s;
}

double ppl_percentile(const double *sorted, size_t n, double q) {
    const double pos = q / 100.0 * (double)(n - 1);
    size_t lo = (size_t)floor(pos);
    if (lo >= n - 1) return sorted[n - 1];
    const double f = pos - (double)lo;
    return sorted[lo] + f * (sorted[lo + 1] - sorted[lo]);
}

int ppl_acc_add(ppl_acc *a, double nll_base, double nll, double kld, int same_top1) {
    if (a->n == a->cap) {
        const size_t cap = a->cap ? 2 * a->cap : 1024;
        double *k = realloc(a->kld, cap * sizeof *k);
        if (!k) return 0;
        a->kld = k;
        a->cap = cap;
    }
    a->kld[a->n++] = kld;
    a->sum_nll += nll;
    a->sum_nll2 += nll * nll;
    a->sum_base += nll_base;
    a->sum_base2 += nll_base * nll_base;
    const double d = nll - nll_base;
    a->sum_d += d;
    a->sum_d2 += d * d;
    a->sum_kld += kld;
    a->sum_kld2 += kld * kld;
    const double dp = exp(-nll) - exp(-nll_base);
    a->sum_dp2 += dp * dp;
    a->sum_dp4 += dp * dp * dp * dp;
    a->same_top1 += same_top1 != 0;
    return 1;
}

void ppl_acc_free(ppl_acc *a) {
    free(a->kld);
    memset(a, 0, sizeof *a);
}

/* Mean of a sum over n, and llama-perplexity's stderr of that mean. */
static double mean_se(double sum, double sum2, size_t n, double *se) {
    const double m = sum / (double)n, var = sum2 / (double)n - m * m;
    *se = n > 1 && var > 0 ? sqrt(var / (double)(n - 1)) : 0.0;
    return m;
}

static int cmp_double(const void *x, const void *y) {
    const double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

int ppl_acc_summary(ppl_acc *a, ppl_summary *s) {
    memset(s, 0, sizeof *s);
    if (a->n == 0) return 0;
    const size_t n = a->n;
    s->n = n;
    double se;
    s->ppl = exp(mean_se(a->sum_nll, a->sum_nll2, n, &se));
    s->ppl_se = s->ppl * se;
    s->base_ppl = exp(mean_se(a->sum_base, a->sum_base2, n, &se));
    s->base_ppl_se = s->base_ppl * se;
    s->ppl_ratio = exp(mean_se(a->sum_d, a->sum_d2, n, &se));
    s->ppl_ratio_se = s->ppl_ratio * se;
    s->kld_mean = mean_se(a->sum_kld, a->sum_kld2, n, &s->kld_se);
    qsort(a->kld, n, sizeof *a->kld, cmp_double);
    s->kld_p99 = ppl_percentile(a->kld, n, 99.0);
    s->kld_max = a->kld[n - 1];
    const double p = (double)a->same_top1 / (double)n;
    s->top1_pct = 100.0 * p;
    s->top1_se = n > 1 ? 100.0 * sqrt(p * (1.0 - p) / (double)(n - 1)) : 0.0;
    const double ms = mean_se(a->sum_dp2, a->sum_dp4, n, &se);
    s->rms_dp = sqrt(ms);
    s->rms_dp_se = s->rms_dp > 0 ? se / (2.0 * s->rms_dp) : 0.0;
    return 1;
}
