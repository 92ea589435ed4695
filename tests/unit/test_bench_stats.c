/* test_bench_stats.c — the statistics behind `kvq bench`'s summary. */
#include <math.h>

#include "../../tools/bench_stats.h"
#include "test.h"

TEST(bench_mean_sd_matches_hand_values) {
    const double x[] = {2, 4, 4, 4, 5, 5, 7, 9};
    double m, sd;
    bench_mean_sd(x, 8, &m, &sd);
    CHECKF(fabs(m - 5.0) < 1e-12, "mean %g", m);
    /* Sample variance: sum of squares 32 over 7. */
    CHECKF(fabs(sd - sqrt(32.0 / 7.0)) < 1e-12, "sd %g", sd);
    CHECKF(fabs(bench_cv(m, sd) - sqrt(32.0 / 7.0) / 5.0) < 1e-12, "cv %g", bench_cv(m, sd));
    bench_mean_sd(x, 1, &m, &sd);
    CHECK(m == 2.0 && sd == 0.0);
    CHECK(bench_cv(0.0, 1.0) == 0.0);
}

TEST(bench_median_odd_even_and_unsorted) {
    double odd[] = {9, 1, 5, 3, 7};
    CHECKF(bench_median(odd, 5) == 5.0, "median %g", odd[2]);
    CHECK(odd[0] == 1 && odd[4] == 9);
    double even[] = {4, 1, 3, 2};
    CHECKF(bench_median(even, 4) == 2.5, "median %g", bench_median(even, 4));
    /* One burst-slowed run moves the mean, not the median. */
    double burst[] = {1.02, 0.98, 1.00, 0.40};
    CHECKF(fabs(bench_median(burst, 4) - 0.99) < 1e-12, "median %g", bench_median(burst, 4));
    double one[] = {3.5};
    CHECK(bench_median(one, 1) == 3.5);
}

TEST(bench_linfit_recovers_line_and_r2) {
    /* Decode cost at realistic depths: 8 ms + 0.5 ms per 1k tokens. */
    const double d[] = {0, 1024, 4096, 32768, 131072};
    double y[5];
    for (int i = 0; i < 5; i++) y[i] = 8.0 + 0.5e-3 * d[i];
    double a, b, r2;
    CHECK(bench_linfit(d, y, 5, &a, &b, &r2));
    CHECKF(fabs(a - 8.0) < 1e-9 && fabs(b - 0.5e-3) < 1e-12 && fabs(r2 - 1.0) < 1e-12, "a %g b %g r2 %g", a, b, r2);

    /* Noise lowers R² below 1; the hand-computed fit of (0,1) (1,3) (2,2):
     * slope 0.5, intercept 1.5, R² 0.25. */
    const double x3[] = {0, 1, 2}, y3[] = {1, 3, 2};
    CHECK(bench_linfit(x3, y3, 3, &a, &b, &r2));
    CHECKF(fabs(a - 1.5) < 1e-12 && fabs(b - 0.5) < 1e-12 && fabs(r2 - 0.25) < 1e-12, "a %g b %g r2 %g", a, b, r2);

    const double flat[] = {3, 3, 3};
    CHECK(bench_linfit(x3, flat, 3, &a, &b, &r2));
    CHECK(b == 0.0 && r2 == 1.0);
}

TEST(bench_linfit_refuses_degenerate_x) {
    const double x[] = {4096, 4096}, y[] = {1, 2};
    double a = -1, b = -1, r2 = -1;
    CHECK(!bench_linfit(x, y, 2, &a, &b, &r2));
    CHECK(!bench_linfit(x, y, 1, &a, &b, &r2));
    CHECK(a == -1 && b == -1 && r2 == -1);
}
