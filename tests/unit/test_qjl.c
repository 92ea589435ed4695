/* test_qjl.c — the "+qjl" residual sketch (codec.c): its row size, and that
 * it removes the inner-product bias of the least-squares scale. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/codec_impl.h"
#include "common/rng.h"
#include "test.h"

TEST(qjl_row_bytes) {
    const char *names[] = {"turbo2", "turbo3", "iso4", "planar3", "rotor4"};
    for (size_t i = 0; i < KVQ_ARRAY_LEN(names); i++)
        for (int d = 32; d <= KVQ_MAX_HEAD_DIM; d += 32) {
            char q[32];
            snprintf(q, sizeof q, "%s+qjl", names[i]);
            kvq_codec *a = NULL, *b = NULL;
            CHECK_OK(kvq_codec_create(names[i], d, 1, &a));
            CHECK_OK(kvq_codec_create(q, d, 1, &b));
            CHECKF(kvq_codec_row_bytes(b) == kvq_codec_row_bytes(a) + (size_t)d / 8 + 2, "%s d=%d", q, d);
            kvq_codec_free(a);
            kvq_codec_free(b);
        }
}

/* Inner-product error e = <q, decode(x)> - <q, x> over n rows, for queries
 * correlated with their keys (q = x + noise). */
static void ip_error_stats(const char *name, int d, int n, double *mean, double *se, double *var) {
    kvq_codec *c = NULL;
    *mean = *se = *var = NAN;
    if (kvq_codec_create(name, d, 2024, &c) != KVQ_OK) return;
    uint8_t *row = malloc(kvq_codec_row_bytes(c));
    float x[KVQ_MAX_HEAD_DIM], q[KVQ_MAX_HEAD_DIM], y[KVQ_MAX_HEAD_DIM];
    uint64_t s = 7;
    double sum = 0, sum2 = 0;
    for (int r = 0; r < n; r++) {
        for (int i = 0; i < d; i++) {
            x[i] = kvq_test_normal(&s);
            q[i] = x[i] + 0.5f * kvq_test_normal(&s);
        }
        kvq_codec_encode_row(c, x, row);
        kvq_codec_decode_row(c, row, y);
        double e = 0;
        for (int i = 0; i < d; i++) e += (double)q[i] * ((double)y[i] - x[i]);
        sum += e;
        sum2 += e * e;
    }
    *mean = sum / n;
    *var = sum2 / n - *mean * *mean;
    *se = sqrt(*var / n);
    free(row);
    kvq_codec_free(c);
}

TEST(qjl_removes_inner_product_bias) {
    const char *names[] = {"turbo2", "turbo3", "iso3"};
    const int d = 128, n = 3000;
    for (size_t i = 0; i < KVQ_ARRAY_LEN(names); i++) {
        char q[32];
        snprintf(q, sizeof q, "%s+qjl", names[i]);
        double m0, se0, v0, m1, se1, v1;
        ip_error_stats(names[i], d, n, &m0, &se0, &v0);
        ip_error_stats(q, d, n, &m1, &se1, &v1);
        printf("    %-12s d=%d: mean ip error %+.4f (se %.4f, var %.4f); +qjl %+.4f (se %.4f, var %.4f)\n", names[i], d,
               m0, se0, v0, m1, se1, v1);
        CHECKF(m0 < -10 * se0, "%s: the least-squares scale should shrink <q,x>: mean %.4g se %.4g", names[i], m0, se0);
        CHECKF(fabs(m1) < 3 * se1, "%s: mean ip error %.4g, se %.4g: biased", q, m1, se1);
    }
}

/* A row the base codec accepts whose residual norm overflows fp16 (found by
 * fuzzing: iq4_nl's level nearest 0 is 1, so the zeros of a block scaled
 * to 34400 each leave a residual of 34400). Refused with KVQ_ERR_RANGE and
 * stored as the zero row, never as an Inf norm that decodes to Inf. */
TEST(qjl_norm_overflow_refused) {
    const int d = 64;
    kvq_codec *c = NULL, *base = NULL;
    CHECK_OK(kvq_codec_create("iq4_nl+qjl", d, 1, &c));
    CHECK_OK(kvq_codec_create("iq4_nl", d, 1, &base));
    float x[64] = {-4.37e6f}, zero[64] = {0}, y[64];
    uint8_t row[128], zero_row[128];
    CHECK(kvq_codec_row_bytes(c) <= sizeof row);
    CHECK_OK(kvq_codec_encode_row(base, x, row));
    CHECK(kvq_codec_encode_row(c, x, row) == KVQ_ERR_RANGE);
    CHECK_OK(kvq_codec_decode_row(c, row, y));
    CHECK_OK(kvq_codec_encode_row(c, zero, zero_row));
    for (int i = 0; i < d; i++) CHECKF(y[i] == 0.0f, "y[%d] = %g", i, y[i]);
    CHECK(memcmp(row, zero_row, kvq_codec_row_bytes(base)) == 0);
    kvq_codec_free(c);
    kvq_codec_free(base);
}
