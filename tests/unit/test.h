/* test.h — a small test harness: tests register themselves, so adding a
 * file adds its tests. Run `build/kvq-test [substring...]` (tests whose name holds any). */
#ifndef KVQ_TEST_H
#define KVQ_TEST_H

#include <stdint.h>
#include <stdio.h>

typedef void (*kvq_test_fn)(void);
void kvq_test_register(const char *name, kvq_test_fn fn);
/* Marks the running test failed and prints where. */
void kvq_test_fail(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int kvq_test_failed(void);
/* Prints a visible note that part of a test was skipped. */
void kvq_test_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define TEST(name)                                                                 \
    static void test_##name(void);                                                 \
    __attribute__((constructor)) static void register_##name(void) {               \
        kvq_test_register(#name, test_##name);                                     \
    }                                                                              \
    static void test_##name(void)

/* CHECK returns from the current function on failure; CHECKF prints values. */
#define CHECK(cond) CHECKF(cond, "%s", #cond)
#define CHECKF(cond, ...)                                                          \
    do {                                                                           \
        if (!(cond)) {                                                             \
            kvq_test_fail(__FILE__, __LINE__, __VA_ARGS__);                        \
            return;                                                                \
        }                                                                          \
    } while (0)
#define CHECK_OK(expr)                                                             \
    do {                                                                           \
        kvq_status check_s_ = (expr);                                              \
        CHECKF(check_s_ == KVQ_OK, "%s -> %s: %s", #expr, kvq_status_name(check_s_), \
               kvq_last_error());                                                  \
    } while (0)

/* Deterministic test data. */
float kvq_test_normal(uint64_t *state);
/* (n_rows, d) rows of N(0,1) where a few channels (the same for every row,
 * chosen from the seed) are scaled by 10..50, as in real K caches. */
void kvq_test_outlier_rows(float *x, int n_rows, int d, uint64_t seed);

#endif
