/* test_main.c — runs the registered tests; the last line is
 * "N passed, N failed". */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "common/rng.h"
#include "test.h"

#define MAX_TESTS 1024

static struct {
    const char *name;
    kvq_test_fn fn;
} tests[MAX_TESTS];
static int n_tests;
static int current_failed;

void kvq_test_register(const char *name, kvq_test_fn fn) {
    if (n_tests == MAX_TESTS) {
        fprintf(stderr, "too many tests: raise MAX_TESTS\n");
        exit(2);
    }
    tests[n_tests].name = name;
    tests[n_tests].fn = fn;
    n_tests++;
}

void kvq_test_fail(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stdout, "    %s:%d: ", file, line);
    vfprintf(stdout, fmt, ap);
    fprintf(stdout, "\n");
    va_end(ap);
    current_failed = 1;
}

int kvq_test_failed(void) { return current_failed; }

void kvq_test_skip(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stdout, "    skip: ");
    vfprintf(stdout, fmt, ap);
    fprintf(stdout, "\n");
    va_end(ap);
}

float kvq_test_normal(uint64_t *state) { return (float)kvq_rng_normal(state); }

void kvq_test_outlier_rows(float *x, int n_rows, int d, uint64_t seed) {
    uint64_t s = seed;
    int outlier[4];
    float gain[4];
    for (int k = 0; k < 4; k++) {
        outlier[k] = (int)(kvq_splitmix64(&s) % (uint64_t)d);
        gain[k] = 10.0f + 40.0f * (float)kvq_rng_uniform(&s);
    }
    for (int r = 0; r < n_rows; r++) {
        for (int i = 0; i < d; i++) x[(size_t)r * d + i] = kvq_test_normal(&s);
        for (int k = 0; k < 4; k++) x[(size_t)r * d + outlier[k]] *= gain[k];
    }
}

static int by_name(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* With no filters every test runs; else those whose name contains any. */
static int selected(const char *name, int n_filters, char **filters) {
    for (int k = 0; k < n_filters; k++)
        if (strstr(name, filters[k])) return 1;
    return n_filters == 0;
}

int main(int argc, char **argv) {

    /* Constructor order is unspecified: sort for a stable run order. */
    qsort(tests, (size_t)n_tests, sizeof tests[0], by_name);
    int passed = 0, failed = 0;
    for (int i = 0; i < n_tests; i++) {
        if (!selected(tests[i].name, argc - 1, argv + 1)) continue;
        current_failed = 0;
        fflush(stdout);
        tests[i].fn();
        printf("%s %s\n", current_failed ? "FAIL" : "ok  ", tests[i].name);
        fflush(stdout);
        if (current_failed) failed++;
        else passed++;
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
