/* bench_stats.c — see bench_stats.h. */
#include <math.h>

#include "bench_stats.h"

void bench_mean_sd(const double *x, int n, double *mean, double *sd) {
    double s = 0.0;
    for (int i = 0; i < n; i++) s += x[i];
    const double m = s / n;
    double ss = 0.0;
    for (int i = 0; i < n; i++) ss += (x[i] - m) * (x[i] - m);
    *mean = m;
    *sd = n > 1 ? sqrt(ss / (n - 1)) : 0.0;
}

double bench_cv(double mean, double sd) { return mean != 0.0 ? sd / fabs(mean) : 0.0; }

double bench_median(double *x, int n) {
    /* Insertion sort: n is a repetition count. */
    for (int i = 1; i < n; i++) {
        const double v = x[i];
        int j = i;
        for (; j > 0 && x[j - 1] > v; j--) x[j] = x[j - 1];
        x[j] = v;
    }
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

int bench_linfit(const double *x, const double *y, int n, double *a, double *b, double *r2) {
    if (n < 2) return 0;
    double mx = 0.0, my = 0.0;
    for (int i = 0; i < n; i++) {
        mx += x[i];
        my += y[i];
    }
    mx /= n;
    my /= n;
    /* Centered sums: depths reach 1e5 and more, where raw sums of squares
     * would cancel badly. */
    double sxx = 0.0, sxy = 0.0, syy = 0.0;
    for (int i = 0; i < n; i++) {
        sxx += (x[i] - mx) * (x[i] - mx);
        sxy += (x[i] - mx) * (y[i] - my);
        syy += (y[i] - my) * (y[i] - my);
    }
    if (sxx == 0.0) return 0;
    const double slope = sxy / sxx;
    *b = slope;
    *a = my - slope * mx;
    *r2 = syy > 0.0 ? sxy * sxy / (sxx * syy) : 1.0;
    return 1;
}
