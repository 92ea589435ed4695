/* bench_stats.h — the statistics `kvq bench` reports: mean, sample standard
 * deviation, coefficient of variation, and the least-squares line fitted to
 * decode cost against depth. Separate from cmd_bench.c so a unit test can
 * check the arithmetic. */
#ifndef KVQ_BENCH_STATS_H
#define KVQ_BENCH_STATS_H

/* Mean and sample standard deviation (n - 1 denominator, as llama-bench);
 * sd is 0 for n < 2. n must be >= 1. */
void bench_mean_sd(const double *x, int n, double *mean, double *sd);

/* sd / mean; 0 when mean is 0. */
double bench_cv(double mean, double sd);

/* The median of x[0..n), the mean of the middle two for even n; sorts x in
 * place. n must be >= 1. */
double bench_median(double *x, int n);

/* Least squares y = a + b x over n points, and R² (1 when the points lie on
 * the line, including when every y is equal). Returns 0, leaving the outputs
 * untouched, when n < 2 or every x is equal (no slope to fit). */
int bench_linfit(const double *x, const double *y, int n, double *a, double *b, double *r2);

#endif
