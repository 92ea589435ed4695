/* test_wtype.c — every weight type x every ISA path: per-ISA dequantization
 * bit-exact with the reference, matvec and matmul within the bound stated in
 * model/wtype.h, on random valid blocks (random bytes, sane fp16 scales, a
 * few outlier rows) at odd row counts and row ranges. A type added to
 * wtypes.def is covered once its scale fields are listed below. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/fp16.h"
#include "common/rng.h"
#include "model/wtype.h"
#include "test.h"

/* Where each type keeps its fp16 scales (d first; then m or dmin). Plain
 * types have none: their values are drawn directly. */
static const struct {
    int type;
    int n_scales;
    int offset[2];
    int min_is_subtracted; /* dmin of K types: m must be >= 0 to stay sane */
} scale_fields[] = {
    {KVQ_WTYPE_Q4_0, 1, {0}, 0},   {KVQ_WTYPE_Q4_1, 2, {0, 2}, 0},
    {KVQ_WTYPE_Q5_0, 1, {0}, 0},   {KVQ_WTYPE_Q5_1, 2, {0, 2}, 0},
    {KVQ_WTYPE_Q8_0, 1, {0}, 0},   {KVQ_WTYPE_Q4_K, 2, {0, 2}, 1},
    {KVQ_WTYPE_Q5_K, 2, {0, 2}, 1}, {KVQ_WTYPE_Q6_K, 1, {208}, 0},
};

/* Relative error bound of the SIMD kernels: |y - y_ref| <= BOUND * sum|w x|. */
#define BOUND 1e-6

/* (rows, row_bytes) random valid rows of type t; rows r % 7 == 3 are
 * outliers with 30x larger scales. Returns NULL for an unlisted type. */
static uint8_t *random_rows(const kvq_wtype_traits *t, int64_t rows, int64_t n, uint64_t seed) {
    const size_t rb = kvq_wtype_row_bytes(t, n);
    uint8_t *w = malloc(rb * (size_t)rows);
    uint64_t s = seed;
    for (size_t i = 0; i < rb * (size_t)rows; i++) w[i] = (uint8_t)kvq_splitmix64(&s);
    for (int64_t r = 0; r < rows; r++) {
        uint8_t *row = w + (size_t)r * rb;
        const float gain = r % 7 == 3 ? 30.0f : 1.0f;
        if (t->block_size == 1) {
            for (int64_t k = 0; k < n; k++) {
                const float v = gain * 0.05f * kvq_test_normal(&s);
                if (t->type == KVQ_WTYPE_F32) memcpy(row + 4 * k, &v, 4);
                else kvq_store_u16(row + 2 * k, t->type == KVQ_WTYPE_F16 ? kvq_f32_to_f16(v) : kvq_f32_to_bf16(v));
            }
            continue;
        }
        size_t f = 0;
        while (f < KVQ_ARRAY_LEN(scale_fields) && scale_fields[f].type != t->type) f++;
        if (f == KVQ_ARRAY_LEN(scale_fields)) {
            free(w);
            return NULL;
        }
        for (int64_t b = 0; b < n / t->block_size; b++) {
            uint8_t *blk = row + (size_t)b * t->block_bytes;
            const float d = gain * 0.004f * (float)(0.5 + kvq_rng_uniform(&s));
            kvq_store_u16(blk + scale_fields[f].offset[0], kvq_f32_to_f16(d));
            if (scale_fields[f].n_scales == 2) {
                const float m = gain * 0.03f * (float)(scale_fields[f].min_is_subtracted ? kvq_rng_uniform(&s)
                                                                                    : kvq_rng_uniform(&s) - 1.0);
                kvq_store_u16(blk + scale_fields[f].offset[1], kvq_f32_to_f16(m));
            }
        }
    }
    return w;
}

static void random_x(float *x, int64_t n, uint64_t seed) {
    kvq_test_outlier_rows(x, 1, (int)n, seed);
}

/* sum_k |W[r,k] x[k]|: the scale of the error bound. */
static double abs_dot(const kvq_wtype_traits *t, const uint8_t *row, const float *x, int64_t n) {
    float *v = malloc(sizeof(float) * (size_t)n);
    t->dequant(row, v, n / t->block_size);
    double s = 0;
    for (int64_t k = 0; k < n; k++) s += fabs((double)v[k] * x[k]);
    free(v);
    return s;
}

/* 4608 crosses the 4096-value chunks of the q4_1 kernel. */
static const int64_t lengths[] = {256, 576, 1536, 4608};

TEST(wtype_table_is_consistent) {
    CHECK(kvq_wtype_count() == 11);
    for (int i = 0; i < kvq_wtype_count(); i++) {
        const kvq_wtype_traits *t = kvq_wtype_at(i);
        CHECK(kvq_wtype_find(t->type) == t);
        CHECK(t->block_size == 1 || t->block_size == 32 || t->block_size == 256);
        for (int isa = 0; isa < KVQ_ISA_COUNT; isa++)
            CHECK(t->dequant_isa[isa] && t->matvec[isa] && t->matmul[isa]);
    }
    CHECK(kvq_wtype_at(kvq_wtype_count()) == NULL);
    CHECK(kvq_wtype_find(10) == NULL); /* Q2_K: not supported */
    CHECK(kvq_wtype_find(KVQ_WTYPE_Q4_K)->block_bytes == 144);
    CHECK(kvq_wtype_find(KVQ_WTYPE_Q6_K)->block_bytes == 210);
    float y[32];
    uint8_t z[34] = {0};
    CHECK(kvq_wtype_dequantize_row(10, z, y, 32) == KVQ_ERR_INVALID_ARG);
    CHECK(kvq_wtype_dequantize_row(KVQ_WTYPE_Q8_0, z, y, 31) == KVQ_ERR_INVALID_ARG);
    CHECK(kvq_wtype_check_n(kvq_wtype_find(KVQ_WTYPE_Q4_K), 576) == KVQ_ERR_UNSUPPORTED);
    CHECK(kvq_wtype_check_n(kvq_wtype_find(KVQ_WTYPE_F16), 48) == KVQ_ERR_UNSUPPORTED);
    CHECK_OK(kvq_wtype_dequantize_row(KVQ_WTYPE_Q8_0, z, y, 32));
    CHECK(y[0] == 0.0f && y[31] == 0.0f);
}

TEST(wtype_dequant_every_isa_is_bit_exact) {
    for (int i = 0; i < kvq_wtype_count(); i++) {
        const kvq_wtype_traits *t = kvq_wtype_at(i);
        const int64_t n = 1536, rows = 5;
        uint8_t *w = random_rows(t, rows, n, 11 + (uint64_t)i);
        CHECKF(w, "%s: no scale fields listed in the test", t->name);
        float *want = malloc(sizeof(float) * (size_t)(n * rows));
        float *got = malloc(sizeof(float) * (size_t)(n * rows));
        t->dequant(w, want, n * rows / t->block_size);
        for (int isa = 0; isa < KVQ_ISA_COUNT; isa++) {
            if (!kvq_isa_supported((kvq_isa)isa)) continue;
            /* An odd block count exercises the SIMD tails of plain types. */
            const int64_t nb = n * rows / t->block_size - 1;
            memset(got, 0, sizeof(float) * (size_t)(n * rows));
            t->dequant_isa[isa](w, got, nb);
            const int same = memcmp(got, want, sizeof(float) * (size_t)(nb * t->block_size)) == 0;
            if (!same) {
                free(w), free(want), free(got);
                CHECKF(0, "%s %s: dequantization differs from the reference", t->name,
                       kvq_isa_name((kvq_isa)isa));
            }
        }
        free(w), free(want), free(got);
    }
}

TEST(wtype_matvec_every_isa_matches_reference) {
    const int64_t rows = 37, r0 = 3, r1 = 36;
    for (int i = 0; i < kvq_wtype_count(); i++) {
        const kvq_wtype_traits *t = kvq_wtype_at(i);
        for (size_t li = 0; li < KVQ_ARRAY_LEN(lengths); li++) {
            const int64_t n = lengths[li];
            if (kvq_wtype_check_n(t, n) != KVQ_OK) continue;
            const size_t rb = kvq_wtype_row_bytes(t, n);
            uint8_t *w = random_rows(t, rows, n, 100 * (uint64_t)i + li);
            CHECKF(w, "%s: no scale fields listed in the test", t->name);
            static float x[4608];
            float want[37], got[37 + 1];
            random_x(x, n, 7 + li);
            t->matvec[KVQ_ISA_REF](t, w, rb, x, n, r0, r1, want);
            for (int isa = 0; isa < KVQ_ISA_COUNT; isa++) {
                if (!kvq_isa_supported((kvq_isa)isa)) continue;
                got[r1 - r0] = 12345.0f;
                t->matvec[isa](t, w, rb, x, n, r0, r1, got);
                CHECKF(got[r1 - r0] == 12345.0f, "%s %s: wrote past the row range", t->name,
                       kvq_isa_name((kvq_isa)isa));
                for (int64_t r = r0; r < r1; r++) {
                    const double scale = abs_dot(t, w + (size_t)r * rb, x, n);
                    const double err = fabs((double)got[r - r0] - want[r - r0]) / scale;
                    CHECKF(err <= BOUND, "%s %s n=%lld row %lld: %g vs %g (rel %g)", t->name,
                           kvq_isa_name((kvq_isa)isa), (long long)n, (long long)r, got[r - r0],
                           want[r - r0], err);
                }
            }
            free(w);
        }
    }
}

TEST(wtype_matmul_every_isa_matches_reference) {
    const int64_t rows = 23, r0 = 2, r1 = 21, ldy = 25;
    static const int64_t toks[] = {1, 3, 9};
    for (int i = 0; i < kvq_wtype_count(); i++) {
        const kvq_wtype_traits *t = kvq_wtype_at(i);
        for (size_t li = 0; li < KVQ_ARRAY_LEN(lengths); li++) {
            const int64_t n = lengths[li];
            if (kvq_wtype_check_n(t, n) != KVQ_OK) continue;
            const size_t rb = kvq_wtype_row_bytes(t, n);
            uint8_t *w = random_rows(t, rows, n, 200 * (uint64_t)i + li);
            CHECKF(w, "%s: no scale fields listed in the test", t->name);
            for (size_t ti = 0; ti < KVQ_ARRAY_LEN(toks); ti++) {
                const int64_t nt = toks[ti];
                static float x[9 * 4608];
                float want[9 * 25], got[9 * 25];
                for (int64_t j = 0; j < nt; j++) random_x(x + j * n, n, 31 * li + (uint64_t)j);
                t->matmul[KVQ_ISA_REF](t, w, rb, x, nt, n, r0, r1, want, ldy);
                for (int isa = 0; isa < KVQ_ISA_COUNT; isa++) {
                    if (!kvq_isa_supported((kvq_isa)isa)) continue;
                    for (int64_t j = 0; j < nt * ldy; j++) got[j] = -777.0f;
                    t->matmul[isa](t, w, rb, x, nt, n, r0, r1, got, ldy);
                    for (int64_t j = 0; j < nt; j++) {
                        for (int64_t c = 0; c < ldy; c++) {
                            const float g = got[j * ldy + c];
                            if (c < r0 || c >= r1) {
                                CHECKF(g == -777.0f, "%s %s: wrote column %lld outside the range",
                                       t->name, kvq_isa_name((kvq_isa)isa), (long long)c);
                                continue;
                            }
                            const double scale = abs_dot(t, w + (size_t)c * rb, x + j * n, n);
                            const double err = fabs((double)g - want[j * ldy + c]) / scale;
                            CHECKF(err <= BOUND, "%s %s n=%lld tok %lld/%lld row %lld: %g vs %g (rel %g)",
                                   t->name, kvq_isa_name((kvq_isa)isa), (long long)n, (long long)j,
                                   (long long)nt, (long long)c, g, want[j * ldy + c], err);
                        }
                    }
                }
            }
            free(w);
        }
    }
}
