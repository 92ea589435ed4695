/* test_codec.c — tests every codec of the table: a codec added to
 * codecs.def is covered here without touching this file (but for its error
 * bound, which must be stated below). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codec/codec_impl.h"
#include "codec/ggml_blocks.h"
#include "common/rng.h"
#include "test.h"

/* Stated round-trip bounds: relative MSE = sum (x - y)^2 / sum x^2 over
 * 256 rows, on N(0,1) data and on outlier data (4 channels x10..x50), at
 * head_dim 64, 128 and 256. About 1.5x above what we measure (`kvq codecs`). */
static const struct {
    const char *name;
    double gauss, outlier;
} bounds[] = {
    {"f32", 0.0, 0.0},
    {"f16", 1.5e-7, 1.5e-7},
    {"bf16", 4e-6, 4e-6},
    {"q8_0", 4.5e-5, 2.3e-4},
    {"q4_0", 1.1e-2, 2.7e-2},
    {"q4_1", 9.5e-3, 2.2e-2},
    {"q5_0", 2.8e-3, 1.1e-2},
    {"q5_1", 2.2e-3, 5e-3},
    {"iq4_nl", 8.7e-3, 2e-2},
    {"turbo2", 0.175, 0.13},
    {"turbo3", 0.051, 0.045},
    {"turbo4", 0.014, 0.0125},
    {"iso3", 0.051, 0.5},
    {"iso4", 0.014, 0.34},
    {"planar3", 0.051, 0.62},
    {"planar4", 0.014, 0.45},
    {"rotor3", 0.051, 0.53},
    {"rotor4", 0.014, 0.34},
};

static int bound_for(const char *name, double *gauss, double *outlier) {
    for (size_t i = 0; i < KVQ_ARRAY_LEN(bounds); i++) {
        if (strcmp(bounds[i].name, name) == 0) {
            *gauss = bounds[i].gauss;
            *outlier = bounds[i].outlier;
            return 1;
        }
    }
    return 0;
}

static const int head_dims[] = {64, 128, 256};

/* Relative MSE of a round trip over n rows. */
static double round_trip_rel_mse(kvq_codec *c, const float *x, int n) {
    const int d = kvq_codec_head_dim(c);
    uint8_t *row = malloc(kvq_codec_row_bytes(c));
    float y[KVQ_MAX_HEAD_DIM];
    double err = 0, ref = 0;
    for (int r = 0; r < n; r++) {
        const float *xr = x + (size_t)r * d;
        if (kvq_codec_encode_row(c, xr, row) != KVQ_OK) {
            free(row);
            return INFINITY;
        }
        kvq_codec_decode_row(c, row, y);
        for (int i = 0; i < d; i++) {
            err += ((double)xr[i] - y[i]) * ((double)xr[i] - y[i]);
            ref += (double)xr[i] * xr[i];
        }
    }
    free(row);
    return err / ref;
}

TEST(codec_table_names_and_ids_are_unique) {
    const int n = kvq_codec_count();
    CHECK(n >= 3);
    for (int i = 0; i < n; i++) {
        const kvq_codec_desc *a = kvq_codec_desc_at(i);
        CHECK(a && a->name && strlen(a->name) < 24);
        CHECKF(a->id == i, "codec %s: id %d at table position %d (ids are appended in order)", a->name, a->id, i);
        for (int j = i + 1; j < n; j++) CHECKF(strcmp(a->name, kvq_codec_desc_at(j)->name) != 0, "%s", a->name);
    }
    CHECK(kvq_codec_name_at(n) == NULL && kvq_codec_name_at(-1) == NULL);
}

TEST(codec_create_rejects_bad_arguments) {
    kvq_codec *c = (kvq_codec *)1;
    CHECK(kvq_codec_create("nope", 64, 0, &c) == KVQ_ERR_INVALID_ARG && c == NULL);
    CHECK(strstr(kvq_last_error(), "nope") != NULL);
    CHECK(kvq_codec_create(NULL, 64, 0, &c) == KVQ_ERR_INVALID_ARG);
    CHECK(kvq_codec_create("f16", 64, 0, NULL) == KVQ_ERR_INVALID_ARG);
    const int bad_dims[] = {0, -32, 16, 33, 100, KVQ_MAX_HEAD_DIM + 32, 1 << 30};
    for (size_t i = 0; i < KVQ_ARRAY_LEN(bad_dims); i++)
        CHECKF(kvq_codec_create("f16", bad_dims[i], 0, &c) == KVQ_ERR_INVALID_ARG, "head_dim %d", bad_dims[i]);
    CHECK(kvq_codec_create("f16+qjl", 64, 0, &c) == KVQ_ERR_INVALID_ARG);
    CHECK(kvq_codec_create("+qjl", 64, 0, &c) == KVQ_ERR_INVALID_ARG);
    CHECK(kvq_codec_create("a_name_much_longer_than_any_codec_name", 64, 0, &c) == KVQ_ERR_INVALID_ARG);
    CHECK(kvq_codec_encode_row(NULL, NULL, NULL) == KVQ_ERR_INVALID_ARG);
    CHECK(kvq_codec_decode_row(NULL, NULL, NULL) == KVQ_ERR_INVALID_ARG);
}

TEST(codec_every_codec_builds_at_every_head_dim) {
    for (int i = 0; i < kvq_codec_count(); i++) {
        const char *name = kvq_codec_name_at(i);
        for (int d = 32; d <= KVQ_MAX_HEAD_DIM; d += 32) {
            kvq_codec *c = NULL;
            CHECK_OK(kvq_codec_create(name, d, 7, &c));
            CHECK(kvq_codec_head_dim(c) == d && strcmp(kvq_codec_name(c), name) == 0);
            CHECK(kvq_codec_row_bytes(c) > 0);
            CHECK(fabs(kvq_codec_bits_per_value(c) - kvq_codec_row_bytes(c) * 8.0 / d) < 1e-12);
            kvq_codec_free(c);
        }
    }
}

TEST(codec_round_trip_within_stated_bounds) {
    for (int i = 0; i < kvq_codec_count(); i++) {
        const char *name = kvq_codec_name_at(i);
        double bg, bo;
        CHECKF(bound_for(name, &bg, &bo), "codec %s has no stated error bound in test_codec.c", name);
        for (size_t k = 0; k < KVQ_ARRAY_LEN(head_dims); k++) {
            const int d = head_dims[k], n = 256;
            float *x = malloc(sizeof(float) * (size_t)n * d);
            kvq_codec *c = NULL;
            CHECK_OK(kvq_codec_create(name, d, 42, &c));
            uint64_t s = 1000 + (uint64_t)d;
            for (int j = 0; j < n * d; j++) x[j] = kvq_test_normal(&s);
            const double eg = round_trip_rel_mse(c, x, n);
            kvq_test_outlier_rows(x, n, d, 2000 + (uint64_t)d);
            const double eo = round_trip_rel_mse(c, x, n);
            kvq_codec_free(c);
            free(x);
            CHECKF(eg <= bg, "%s d=%d gaussian rel-MSE %.3g > bound %.3g", name, d, eg, bg);
            CHECKF(eo <= bo, "%s d=%d outlier rel-MSE %.3g > bound %.3g", name, d, eo, bo);
        }
    }
}

/* Every ISA path produces the reference's bytes and floats, with and
 * without the +qjl sketch. */
TEST(codec_isa_paths_match_reference) {
    for (int i = 0; i < 2 * kvq_codec_count(); i++) {
        char name[40];
        snprintf(name, sizeof name, "%s%s", kvq_codec_name_at(i / 2), i % 2 ? "+qjl" : "");
        for (size_t k = 0; k < KVQ_ARRAY_LEN(head_dims); k++) {
            const int d = head_dims[k], n = 64;
            kvq_codec *ref = NULL, *fast = NULL;
            if (i % 2 && kvq_codec_create(name, d, 99, &ref) == KVQ_ERR_INVALID_ARG) break; /* unquantized */
            kvq_codec_free(ref);
            CHECK_OK(kvq_codec_create(name, d, 99, &ref));
            CHECK_OK(kvq_codec_create(name, d, 99, &fast));
            CHECK_OK(kvq_codec_set_isa(ref, KVQ_ISA_REF));
            const size_t rb = kvq_codec_row_bytes(ref);
            float *x = malloc(sizeof(float) * (size_t)n * d);
            uint8_t *a = malloc(rb), *b = malloc(rb);
            float ya[KVQ_MAX_HEAD_DIM], yb[KVQ_MAX_HEAD_DIM];
            kvq_test_outlier_rows(x, n / 2, d, 5);
            uint64_t s = 6;
            for (int j = n / 2 * d; j < n * d; j++) x[j] = kvq_test_normal(&s) * 0.01f;
            for (int isa = KVQ_ISA_AVX2; isa < KVQ_ISA_COUNT; isa++) {
                if (!kvq_isa_supported((kvq_isa)isa)) {
                    if (i == 0 && k == 0) kvq_test_skip("ISA %s not supported here", kvq_isa_name((kvq_isa)isa));
                    continue;
                }
                CHECK_OK(kvq_codec_set_isa(fast, (kvq_isa)isa));
                for (int r = 0; r < n && !kvq_test_failed(); r++) {
                    CHECK_OK(kvq_codec_encode_row(ref, x + (size_t)r * d, a));
                    CHECK_OK(kvq_codec_encode_row(fast, x + (size_t)r * d, b));
                    CHECKF(memcmp(a, b, rb) == 0, "%s d=%d isa=%s row %d: encoded bytes differ", name, d,
                           kvq_isa_name((kvq_isa)isa), r);
                    kvq_codec_decode_row(ref, a, ya);
                    kvq_codec_decode_row(fast, a, yb);
                    CHECKF(memcmp(ya, yb, sizeof(float) * (size_t)d) == 0, "%s d=%d isa=%s row %d: decode differs",
                           name, d, kvq_isa_name((kvq_isa)isa), r);
                }
            }
            free(x);
            free(a);
            free(b);
            kvq_codec_free(ref);
            kvq_codec_free(fast);
            if (kvq_test_failed()) return;
        }
    }
}

/* The oracle: the nearest codebook entry in exact arithmetic, ties to the
 * larger one (double holds x - v exactly for every float x the test draws).
 * That is the number of midpoints <= x, which ggml's best_index_int8 (a
 * binary search, then x - lo < hi - x in float) equals for every non-NaN
 * float: checked over all 2^32 bit patterns when the buckets were written. */
static int iq4nl_nearest_oracle(float x) {
    int best = 0;
    for (int k = 1; k < 16; k++)
        if (fabs((double)x - kvq_iq4nl_values[k]) <= fabs((double)x - kvq_iq4nl_values[best])) best = k;
    return best;
}

/* ggml_blocks.h's bucket rule, clamped to the 32 buckets. */
static int iq4nl_bucket_index(float x) {
    const float t = floorf((x - KVQ_IQ4NL_BUCKET_LO) / KVQ_IQ4NL_BUCKET_WIDTH);
    const int b = t < 0 ? 0 : t > 31 ? 31 : (int)t;
    return kvq_iq4nl_bucket_base[b] + (x >= kvq_iq4nl_bucket_mid[b]);
}

/* The iq4_nl buckets of ggml_blocks.h: each holds the midpoints and base it
 * claims, no midpoint is within 0.5 of an edge, and base + (x >= mid) is
 * ggml's index on both sides of every midpoint, edge and codebook entry and
 * on random x. Then the SIMD encoders, which search through the buckets, on
 * rows that put the first trial's scaled values exactly on midpoints (ties):
 * max 127 makes that trial's scale 1, and the values are half-integers;
 * every third row has a zero block. */
TEST(codec_iq4nl_buckets_and_ties) {
    float mid[15];
    for (int k = 0; k < 15; k++) mid[k] = (kvq_iq4nl_values[k] + kvq_iq4nl_values[k + 1]) * 0.5f;
    for (int b = 0; b < 32; b++) {
        const double lo = KVQ_IQ4NL_BUCKET_LO + b * (double)KVQ_IQ4NL_BUCKET_WIDTH, hi = lo + KVQ_IQ4NL_BUCKET_WIDTH;
        int below = 0, inside = -1;
        for (int k = 0; k < 15; k++) {
            CHECKF(fabs(mid[k] - lo) >= 0.5, "midpoint %g within 0.5 of edge %g", mid[k], lo);
            if (mid[k] < lo) below++;
            else if (mid[k] < hi) {
                CHECKF(inside < 0, "bucket %d holds two midpoints", b);
                inside = k;
            }
        }
        CHECKF(kvq_iq4nl_bucket_base[b] == below, "bucket %d base %d, want %d", b, kvq_iq4nl_bucket_base[b], below);
        CHECKF(inside < 0 ? isinf(kvq_iq4nl_bucket_mid[b]) : kvq_iq4nl_bucket_mid[b] == mid[inside],
               "bucket %d midpoint %g", b, kvq_iq4nl_bucket_mid[b]);
        CHECKF(b < 31 || inside < 0, "the last bucket holds a midpoint (the SIMD search reads bucket b + 1)");
    }
    float probes[15 + 16 + 33]; /* midpoints, codebook entries, bucket edges */
    int n_probes = 0;
    for (int k = 0; k < 15; k++) probes[n_probes++] = mid[k];
    for (int k = 0; k < 16; k++) probes[n_probes++] = kvq_iq4nl_values[k];
    for (int b = 0; b <= 32; b++) probes[n_probes++] = KVQ_IQ4NL_BUCKET_LO + b * KVQ_IQ4NL_BUCKET_WIDTH;
    for (int i = 0; i < n_probes; i++) {
        float x = probes[i];
        for (int u = 0; u < 64; u++) x = nextafterf(x, -INFINITY);
        for (int u = 0; u <= 128; u++, x = nextafterf(x, INFINITY))
            CHECKF(iq4nl_bucket_index(x) == iq4nl_nearest_oracle(x), "x %a: buckets %d, ggml %d", x,
                   iq4nl_bucket_index(x), iq4nl_nearest_oracle(x));
    }
    uint64_t s = 41;
    for (int i = 0; i < 200000 && !kvq_test_failed(); i++) {
        const float x = (float)(kvq_rng_uniform(&s) * 300.0 - 150.0);
        CHECKF(iq4nl_bucket_index(x) == iq4nl_nearest_oracle(x), "x %a: buckets %d, ggml %d", x,
               iq4nl_bucket_index(x), iq4nl_nearest_oracle(x));
    }

    const int d = 160, n = 400; /* 5 blocks: the SIMD search pairs blocks, the last one alone */
    kvq_codec *ref = NULL, *fast = NULL;
    CHECK_OK(kvq_codec_create("iq4_nl", d, 1, &ref));
    CHECK_OK(kvq_codec_create("iq4_nl", d, 1, &fast));
    CHECK_OK(kvq_codec_set_isa(ref, KVQ_ISA_REF));
    float x[160];
    uint8_t a[160], bytes[160];
    for (int r = 0; r < n && !kvq_test_failed(); r++) {
        for (int j = 0; j < d; j++) {
            const uint64_t u = kvq_splitmix64(&s);
            x[j] = u % 3 == 0 ? mid[u / 3 % 15] : (float)((int)(u / 3 % 507) - 253) * 0.5f;
        }
        x[r % 32] = r % 2 ? 127.0f : -127.0f;
        x[32 + r % 32] = 127.0f;
        x[64 + r % 32] = -127.0f;
        x[96] = 127.0f;
        /* Scaling by 2^-e keeps every trial's scaled values (ties included);
         * at e >= 16 the block scale is an fp16 denormal, whose rounding puts
         * the final quantization's values beyond the buckets' span. */
        for (int j = 0; j < d; j++) x[j] = ldexpf(x[j], -(r % 28));
        /* a zero block among the others: the search pairs skip it */
        if (r % 3 == 0) memset(x + 32 * (r / 3 % 5), 0, sizeof(float) * 32);
        CHECK_OK(kvq_codec_encode_row(ref, x, a));
        for (int isa = KVQ_ISA_AVX2; isa < KVQ_ISA_COUNT; isa++) {
            if (!kvq_isa_supported((kvq_isa)isa)) continue;
            CHECK_OK(kvq_codec_set_isa(fast, (kvq_isa)isa));
            CHECK_OK(kvq_codec_encode_row(fast, x, bytes));
            CHECKF(memcmp(a, bytes, kvq_codec_row_bytes(ref)) == 0, "isa %s row %d: bytes differ",
                   kvq_isa_name((kvq_isa)isa), r);
        }
    }
    kvq_codec_free(ref);
    kvq_codec_free(fast);
}

/* The input rules of kvq.h: zero, constant and denormal rows are valid;
 * NaN/Inf are refused by quantized codecs (dst = zero row) and stored by
 * plain ones; decoding arbitrary bytes never traps. */
TEST(codec_special_inputs) {
    const int d = 64;
    float x[KVQ_MAX_HEAD_DIM], y[KVQ_MAX_HEAD_DIM];
    uint8_t row[4 * KVQ_MAX_HEAD_DIM], zero_row[4 * KVQ_MAX_HEAD_DIM];
    for (int i = 0; i < kvq_codec_count(); i++) {
        const char *name = kvq_codec_name_at(i);
        kvq_codec *c = NULL;
        CHECK_OK(kvq_codec_create(name, d, 3, &c));
        const size_t rb = kvq_codec_row_bytes(c);
        const int quantized = kvq_codec_is_quantized(c);

        memset(x, 0, sizeof x);
        CHECK_OK(kvq_codec_encode_row(c, x, zero_row));
        kvq_codec_decode_row(c, zero_row, y);
        for (int j = 0; j < d; j++) CHECKF(y[j] == 0.0f, "%s: zero row decodes to %g", name, y[j]);

        /* A constant row is no harder than a random one: within 4x the bound. */
        double bg, bo, err = 0;
        CHECKF(bound_for(name, &bg, &bo), "codec %s has no stated error bound", name);
        for (int j = 0; j < d; j++) x[j] = 0.75f;
        CHECK_OK(kvq_codec_encode_row(c, x, row));
        kvq_codec_decode_row(c, row, y);
        for (int j = 0; j < d; j++) err += (y[j] - 0.75) * (y[j] - 0.75);
        CHECKF(err / (d * 0.5625) <= 4 * bg, "%s: constant row rel-MSE %.3g", name, err / (d * 0.5625));

        for (int j = 0; j < d; j++) x[j] = (j % 2 ? 1e-40f : -3e-42f) * (float)(j + 1);
        CHECK_OK(kvq_codec_encode_row(c, x, row));
        kvq_codec_decode_row(c, row, y);
        for (int j = 0; j < d; j++) CHECKF(isfinite(y[j]) && fabsf(y[j]) < 1e-30f, "%s: denormal -> %g", name, y[j]);

        const float specials[] = {NAN, INFINITY, -INFINITY};
        for (size_t k = 0; k < KVQ_ARRAY_LEN(specials); k++) {
            for (int j = 0; j < d; j++) x[j] = (float)j;
            x[d / 2] = specials[k];
            const kvq_status s = kvq_codec_encode_row(c, x, row);
            if (quantized) {
                CHECKF(s == KVQ_ERR_NONFINITE, "%s: non-finite input gave %s", name, kvq_status_name(s));
                CHECKF(memcmp(row, zero_row, rb) == 0, "%s: refused row is not the zero encoding", name);
            } else {
                CHECK(s == KVQ_OK);
                kvq_codec_decode_row(c, row, y);
                CHECKF(isnan(specials[k]) ? isnan(y[d / 2]) : y[d / 2] == specials[k], "%s: special lost", name);
            }
        }

        if (quantized) {
            for (int j = 0; j < d; j++) x[j] = (j % 3 ? 3e38f : -1e37f);
            const kvq_status s = kvq_codec_encode_row(c, x, row);
            CHECKF(s == KVQ_ERR_RANGE, "%s: huge input gave %s", name, kvq_status_name(s));
            CHECKF(memcmp(row, zero_row, rb) == 0, "%s: refused huge row is not the zero encoding", name);
            for (int j = 0; j < d; j++) x[j] = (float)(j - 30) * 100.0f; /* large but fine */
            CHECK_OK(kvq_codec_encode_row(c, x, row));
        }

        uint64_t s = 77;
        for (int trial = 0; trial < 200; trial++) {
            for (size_t j = 0; j < rb; j++) row[j] = (uint8_t)kvq_splitmix64(&s);
            CHECK_OK(kvq_codec_decode_row(c, row, y));
        }
        kvq_codec_free(c);
    }
}

TEST(codec_centering_round_trip) {
    const int d = 128;
    float mean[KVQ_MAX_HEAD_DIM], x[KVQ_MAX_HEAD_DIM], y[KVQ_MAX_HEAD_DIM];
    uint8_t row[4 * KVQ_MAX_HEAD_DIM];
    uint64_t s = 11;
    for (int j = 0; j < d; j++) mean[j] = 20.0f * kvq_test_normal(&s);
    for (int i = 0; i < kvq_codec_count(); i++) {
        kvq_codec *c = NULL;
        CHECK_OK(kvq_codec_create(kvq_codec_name_at(i), d, 5, &c));
        CHECK_OK(kvq_codec_set_mean(c, mean));
        /* x == mean encodes a zero residual: decodes to the mean exactly
         * where the codec stores the mean's residual exactly. */
        CHECK_OK(kvq_codec_encode_row(c, mean, row));
        kvq_codec_decode_row(c, row, y);
        for (int j = 0; j < d; j++) CHECKF(y[j] == mean[j], "%s: mean row decodes off", kvq_codec_name(c));
        /* Offset rows: the centered error is that of the residual alone. */
        double err = 0, res = 0;
        for (int r = 0; r < 32; r++) {
            for (int j = 0; j < d; j++) x[j] = mean[j] + kvq_test_normal(&s);
            CHECK_OK(kvq_codec_encode_row(c, x, row));
            kvq_codec_decode_row(c, row, y);
            for (int j = 0; j < d; j++) {
                err += ((double)x[j] - y[j]) * ((double)x[j] - y[j]);
                res += ((double)x[j] - mean[j]) * ((double)x[j] - mean[j]);
            }
        }
        CHECKF(err / res < 0.2, "%s: centered residual rel-MSE %.3g", kvq_codec_name(c), err / res);
        float bad[KVQ_MAX_HEAD_DIM];
        memcpy(bad, mean, sizeof bad);
        bad[3] = NAN;
        CHECK(kvq_codec_set_mean(c, bad) == KVQ_ERR_NONFINITE);
        CHECK_OK(kvq_codec_set_mean(c, NULL));
        kvq_codec_free(c);
    }
}
