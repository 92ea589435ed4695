/* ppl_stats.h — the arithmetic behind `kvq ppl`: log-softmax, KL divergence
 * (over the full vocabulary, or against a base kept as its top-k), and the
 * per-config accumulator that turns scored positions into PPL, PPL ratio,
 * KLD mean/stderr/p99/max, same-top-1 % and RMS of the change in the
 * probability of the correct token, with llama-perplexity's formulas.
 * Separate from cmd_ppl.c so an oracle test (numpy, float64) can check it
 * through build/libkvqppl.so. */
#ifndef KVQ_PPL_STATS_H
#define KVQ_PPL_STATS_H

#include <stddef.h>
#include <stdint.h>

/* out[i] = x[i] - log(sum_j exp(x[j])), the log-sum-exp in double.
 * n >= 1; x finite. */
void ppl_log_softmax(const float *x, int n, float *out);

/* Index of the largest value, the lowest index on ties. n >= 1. */
int ppl_argmax(const float *x, int n);

/* KL(P || Q) = sum_i p_i (lp_i - lq_i), p_i = exp(lp_i), in double; lp and
 * lq are full log-softmax rows of n values. */
double ppl_kld(const float *lp, const float *lq, int n);

/* The k largest entries of lp (k <= n) into ids/vals, largest first (lower
 * index first on ties). */
void ppl_topk(const float *lp, int n, int k, int32_t *ids, float *vals);

/* KL(P || Q) where P is known only by its top k (ids, lp_top) and Q is a
 * full log-softmax row: the divergence of the two distributions coarsened
 * to those k tokens plus one bucket for all others,
 *   sum_top p_i (lp_i - lq_i) + r_p log(r_p / r_q),  r = 1 - sum_top.
 * By the log-sum inequality it never exceeds the full KL and equals it when
 * the tail of Q is the tail of P scaled. */
double ppl_kld_topk(const int32_t *ids, const float *lp_top, int k, const float *lq);

/* Linear-interpolated percentile (numpy's default) of n sorted values,
 * q in [0, 100]. n >= 1. */
double ppl_percentile(const double *sorted, size_t n, double q);

/* One config's scored positions. */
typedef struct ppl_acc {
    size_t n, cap;
    double *kld;                   /* (cap) every position's KLD, for p99 and max */
    double sum_nll, sum_nll2;      /* -log q(correct token) */
    double sum_base, sum_base2;    /* -log p(correct token) of the base */
    double sum_d, sum_d2;          /* nll - nll_base */
    double sum_kld, sum_kld2;
    double sum_dp2, sum_dp4;       /* dp = q(correct) - p(correct) */
    size_t same_top1;
} ppl_acc;

/* 1 on success, 0 when out of memory (the accumulator is then unchanged). */
int ppl_acc_add(ppl_acc *a, double nll_base, double nll, double kld, int same_top1);
void ppl_acc_free(ppl_acc *a);

typedef struct ppl_summary {
    size_t n;
    double ppl, ppl_se;            /* exp(mean nll) and its delta-method stderr */
    double base_ppl, base_ppl_se;
    double ppl_ratio, ppl_ratio_se; /* exp(mean(nll - nll_base)) */
    double kld_mean, kld_se, kld_p99, kld_max;
    double top1_pct, top1_se;      /* in percent */
    double rms_dp, rms_dp_se;      /* as a fraction (x100 for percent) */
} ppl_summary;

/* Stderrs follow llama-perplexity: sqrt((E[x^2] - E[x]^2) / (n - 1)), the
 * positions taken as independent (they are not quite: neighbours share a
 * context), 0 when n < 2. Sorts a->kld. 0 when a is empty, else 1. */
int ppl_acc_summary(ppl_acc *a, ppl_summary *s);

#endif
