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

/* Relative error bound of the SIMD kernels against the reference on the
 * same input: |y - y_ref| <= BOUND * sum|w x| (model/wtype.h). */
#define BOUND 4e-6

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

/* The integer route's extra error from rounding x (model/wtype.h):
 * sum over blocks of max|x_b| / 254 * sum_{k in b} |W[r,k]|, with 1e-4
 * slack for the float arithmetic of the bound itself. */
static double xq_bound(const kvq_wtype_traits *t, const uint8_t *row, const float *x, int64_t n) {
    float *v = malloc(sizeof(float) * (size_t)n);
    t->dequant(row, v, n / t->block_size);
    double s = 0;
    for (int64_t b = 0; b < n / 32; b++) {
        double amax = 0, wsum = 0;
        for (int j = 0; j < 32; j++) {
            amax = fmax(amax, fabs(x[32 * b + j]));
            wsum += fabs(v[32 * b + j]);
        }
        s += amax / 254 * wsum;
    }
    free(v);
    return s * (1 + 1e-4);
}

/* x^ = d q of token i of prepared activations. */
static void xq_values(const kvq_wxq *xq, int64_t i, int64_t n, float *xhat) {
    for (int64_t k = 0; k < n; k++) xhat[k] = xq->d[i * (n / 32) + k / 32] * xq->q[i * n + k];
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

/* 4608 crosses the 4096-value chunks of the fused 32-value kernels. */
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
                    const uint8_t *row = w + (size_t)r * rb;
                    const double scale = abs_dot(t, row, x, n);
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
    /* 131: past one of the AVX-512 kernel's blocks of 128 tokens, ending in
     * a partial register tile. */
    static const int64_t toks[] = {1, 3, 9, 131};
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
                static float x[131 * 4608], want[131 * 25], got[131 * 25];
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
                            const uint8_t *row = w + (size_t)c * rb;
                            const double scale = abs_dot(t, row, x + j * n, n);
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

TEST(wtype_prep_x_every_isa_is_bit_exact) {
    static const int64_t ns[] = {32, 576, 4608};
    for (size_t li = 0; li < KVQ_ARRAY_LEN(ns); li++) {
        const int64_t n = ns[li], nt = 3;
        float *x = malloc(sizeof(float) * (size_t)(nt * n));
        random_x(x, nt * n, 40 + li);
        for (int64_t k = 0; k < 32; k++) x[k] = 0.0f; /* an all-zero block: d = 0 */
        x[40] = 127.5f, x[41] = -0.5f;                /* ties */
        uint8_t *want = malloc(kvq_wtype_prep_bytes(nt, n)), *got = malloc(kvq_wtype_prep_bytes(nt, n));
        const kvq_wxq r = kvq_wtype_prep_x(KVQ_ISA_REF, x, nt, n, want);
        CHECK(r.d[0] == 0.0f && r.s[0] == 0.0f && r.q[0] == 0);
        for (int64_t k = 0; k < nt * n; k++) {
            const float xhat = r.d[k / 32] * r.q[k];
            CHECKF(fabsf(xhat - x[k]) <= r.d[k / 32] * 0.5f * (1 + 1e-5f), "x[%lld]=%g -> %g", (long long)k, x[k], xhat);
        }
        for (int isa = 0; isa < KVQ_ISA_COUNT; isa++) {
            if (!kvq_isa_supported((kvq_isa)isa)) continue;
            memset(got, 0xAB, kvq_wtype_prep_bytes(nt, n));
            kvq_wtype_prep_x((kvq_isa)isa, x, nt, n, got);
            CHECKF(memcmp(got, want, kvq_wtype_prep_bytes(nt, n)) == 0, "n=%lld %s: prepared x differs",
                   (long long)n, kvq_isa_name((kvq_isa)isa));
        }
        free(x), free(want), free(got);
    }
}

/* The integer kernels of one ISA (the AVX-512 ones with and without VNNI)
 * against the integer reference, on the same prepared x. */
typedef struct {
    const char *name;
    kvq_isa isa;
    kvq_wmatvec_q_fn mv;
    kvq_wmatmul_q_fn mm;
    int needs_vnni;
} q_path;

static const q_path q_paths[] = {
    {"ref", KVQ_ISA_REF, kvq_wmatvec_q_ref, kvq_wmatmul_q_ref, 0},
#if KVQ_HAVE_X86
    {"avx2", KVQ_ISA_AVX2, kvq_wmatvec_q_avx2, kvq_wmatmul_q_avx2, 0},
    {"avx512", KVQ_ISA_AVX512, kvq_wmatvec_q_avx512, kvq_wmatmul_q_avx512, 0},
    {"avx512bw", KVQ_ISA_AVX512, kvq_wmatvec_q_avx512bw, kvq_wmatmul_q_avx512bw, 0},
    {"avx512vnni", KVQ_ISA_AVX512, kvq_wmatvec_q_avx512vnni, kvq_wmatmul_q_avx512vnni, 1},
#endif
};

TEST(wtype_integer_route_every_path_matches_reference) {
    const int64_t rows = 23, r0 = 2, r1 = 21, ldy = 25;
    static const int64_t toks[] = {1, 5, 9};
    static const int64_t qlengths[] = {32, 96, 576, 4608};
    for (int i = 0; i < kvq_wtype_count(); i++) {
        const kvq_wtype_traits *t = kvq_wtype_at(i);
        CHECK(!t->matvec_q[0] == (t->block_size != 32) && !t->matmul_q[0] == (t->block_size != 32));
        if (!t->matvec_q[0]) continue;
        for (size_t li = 0; li < KVQ_ARRAY_LEN(qlengths); li++) {
            const int64_t n = qlengths[li], nt_max = 9;
            const size_t rb = kvq_wtype_row_bytes(t, n);
            uint8_t *w = random_rows(t, rows, n, 300 * (uint64_t)i + li);
            float *x = malloc(sizeof(float) * (size_t)(nt_max * n));
            float *xhat = malloc(sizeof(float) * (size_t)n);
            void *scratch = malloc(kvq_wtype_prep_bytes(nt_max, n));
            for (int64_t j = 0; j < nt_max; j++) random_x(x + j * n, n, 77 * li + (uint64_t)j);
            const kvq_wxq xq = kvq_wtype_prep_x(KVQ_ISA_REF, x, nt_max, n, scratch);
            float want[9 * 25], got[9 * 25], exact[9 * 25];
            kvq_wmatmul_q_ref(t, w, rb, &xq, nt_max, n, r0, r1, want, ldy);
            kvq_wmatmul_ref(t, w, rb, x, nt_max, n, r0, r1, exact, ldy);
            for (size_t p = 0; p < KVQ_ARRAY_LEN(q_paths) && !kvq_test_failed(); p++) {
                const q_path *qp = &q_paths[p];
                if (!kvq_isa_supported(qp->isa) || (qp->needs_vnni && !kvq_cpu_has_vnni())) continue;
                for (size_t ti = 0; ti < KVQ_ARRAY_LEN(toks); ti++) {
                    const int64_t nt = toks[ti];
                    for (int64_t j = 0; j < nt * ldy; j++) got[j] = -777.0f;
                    if (nt == 1) qp->mv(t, w, rb, &xq, n, r0, r1, got + r0);
                    else qp->mm(t, w, rb, &xq, nt, n, r0, r1, got, ldy);
                    for (int64_t j = 0; j < nt; j++) {
                        xq_values(&xq, j, n, xhat);
                        for (int64_t c = 0; c < ldy; c++) {
                            const float g = got[j * ldy + c];
                            if (c < r0 || c >= r1) {
                                CHECKF(g == -777.0f, "%s %s: wrote column %lld", t->name, qp->name, (long long)c);
                                continue;
                            }
                            const uint8_t *row = w + (size_t)c * rb;
                            const double scale = abs_dot(t, row, xhat, n);
                            const double err = fabs((double)g - want[j * ldy + c]) / scale;
                            CHECKF(err <= BOUND, "%s %s n=%lld tok %lld/%lld row %lld: %g vs %g (rel %g)",
                                   t->name, qp->name, (long long)n, (long long)j, (long long)nt,
                                   (long long)c, g, want[j * ldy + c], err);
                            /* Against W x on the float x: the stated rounding bound of x. */
                            const double qerr = fabs((double)g - exact[j * ldy + c]) - xq_bound(t, row, x + j * n, n);
                            CHECKF(qerr <= BOUND * abs_dot(t, row, x + j * n, n),
                                   "%s %s n=%lld tok %lld row %lld: %g vs float %g beyond the x rounding bound",
                                   t->name, qp->name, (long long)n, (long long)j, (long long)c, g,
                                   exact[j * ldy + c]);
                        }
                    }
                }
            }
            free(w), free(x), free(xhat), free(scratch);
        }
    }
}

/* x^ = e (256 h + l) of int16-prepared x. */
static void x16_values(const kvq_wx16 *xs, int64_t n, double *xhat) {
    for (int64_t k = 0; k < n; k++) xhat[k] = (double)xs->e[k / 32] * (256.0 * xs->h[k] + xs->l[k]);
}

TEST(wtype_prep_x16_every_isa_is_bit_exact_and_within_e) {
    static const int64_t ns[] = {32, 64, 544, 576, 4608};
    for (size_t li = 0; li < KVQ_ARRAY_LEN(ns); li++) {
        const int64_t n = ns[li];
        const size_t bytes = kvq_wtype_prep_x16_bytes(n);
        float *x = malloc(sizeof(float) * (size_t)n);
        double *xhat = malloc(sizeof(double) * (size_t)n);
        random_x(x, n, 90 + li);
        for (int64_t k = 0; k < 32; k++) x[k] = 0.0f; /* an all-zero block */
        if (n > 64) x[40] = 127.5f, x[41] = -0.5f, x[42] = 0.498f; /* ties of h, and l near its clamp */
        uint8_t *want = kvq_alloc_aligned(bytes), *got = kvq_alloc_aligned(bytes);
        memset(want, 0xAB, bytes);
        const kvq_wx16 r = kvq_wtype_prep_x16(KVQ_ISA_REF, x, n, want);
        CHECK(r.e[0] == 0.0f && r.s[0] == 0.0f && r.h[0] == 0 && r.l[0] == 0);
        x16_values(&r, n, xhat);
        for (int64_t k = 0; k < n; k++)
            CHECKF(fabs(xhat[k] - x[k]) <= r.e[k / 32] * (1 + 1e-5), "n=%lld x[%lld]=%g -> %g", (long long)n,
                   (long long)k, x[k], xhat[k]);
        /* Padding to 4 blocks: zero codes, scales and sums. */
        const int64_t nb = n / 32, nb_pad = (n + 127) / 128 * 4;
        for (int64_t b = nb; b < nb_pad; b++) {
            CHECK(r.e[b] == 0.0f && r.s[b] == 0.0f);
            for (int j = 0; j < 32; j++) CHECK(r.h[32 * b + j] == 0 && r.l[32 * b + j] == 0);
        }
        /* The pair and group layouts hold the same codes, e and s per lane;
         * groups run over x twice where n / 32 = 2 mod 4, zeros after. */
        for (int64_t b = 0; b < nb_pad; b++) {
            const uint8_t *pp = r.p + 256 * (b / 2);
            for (int j = 0; j < 32; j++) {
                const int pj = 32 * (int)(b % 2) + j;
                CHECK((int8_t)pp[pj] == r.h[32 * b + j] && (int8_t)pp[64 + pj] == r.l[32 * b + j]);
            }
            float pe[16], ps[16];
            memcpy(pe, pp + 128, 64), memcpy(ps, pp + 192, 64);
            for (int k = 0; k < 8; k++) CHECK(pe[8 * (b % 2) + k] == r.e[b] && ps[8 * (b % 2) + k] == r.s[b] / 8);
        }
        const int twice = nb % 4 == 2;
        for (int64_t q = 0; q < 2 * nb_pad; q++) {
            const int64_t b = twice ? (q < 2 * nb ? q % nb : -1) : (q < nb ? q : -1);
            const uint8_t *gg = r.g + 384 * (q / 4);
            for (int j = 0; j < 32; j++) {
                const int gj = 16 * (int)(q % 4) + (j < 16 ? j : 64 + j - 16);
                CHECK((int8_t)gg[gj] == (b < 0 ? 0 : r.h[32 * b + j]) && (int8_t)gg[128 + gj] == (b < 0 ? 0 : r.l[32 * b + j]));
            }
            float ge[16], gs[16];
            memcpy(ge, gg + 256, 64), memcpy(gs, gg + 320, 64);
            for (int k = 0; k < 4; k++)
                CHECK(ge[4 * (q % 4) + k] == (b < 0 ? 0.0f : r.e[b]) && gs[4 * (q % 4) + k] == (b < 0 ? 0.0f : r.s[b] / 4));
        }
        for (int isa = 0; isa < KVQ_ISA_COUNT; isa++) {
            if (!kvq_isa_supported((kvq_isa)isa)) continue;
            memset(got, 0xCD, bytes);
            kvq_wtype_prep_x16((kvq_isa)isa, x, n, got);
            CHECKF(memcmp(got, want, bytes) == 0, "n=%lld %s: int16-prepared x differs", (long long)n,
                   kvq_isa_name((kvq_isa)isa));
        }
        free(x), free(xhat), kvq_free_aligned(want), kvq_free_aligned(got);
    }
}

/* The int16 kernels of every slot, and the VNNI one by name, against the
 * int16 reference on the same prepared x (BOUND), and against W x on the
 * float x within the rounding of x (e per value). */
TEST(wtype_int16_route_every_path_matches_reference) {
    const int64_t rows = 23, r0 = 2, r1 = 21;
    static const int64_t ns[] = {32, 64, 96, 544, 576, 1536, 4608};
    for (int i = 0; i < kvq_wtype_count(); i++) {
        const kvq_wtype_traits *t = kvq_wtype_at(i);
        CHECK(!t->matvec_x16[0] == (t->block_size != 32));
        if (!t->matvec_x16[0]) continue;
        for (size_t li = 0; li < KVQ_ARRAY_LEN(ns); li++) {
            const int64_t n = ns[li];
            const size_t rb = kvq_wtype_row_bytes(t, n);
            uint8_t *w = random_rows(t, rows, n, 500 * (uint64_t)i + li);
            float *x = malloc(sizeof(float) * (size_t)n), *v = malloc(sizeof(float) * (size_t)n);
            double *xhat = malloc(sizeof(double) * (size_t)n);
            void *scratch = kvq_alloc_aligned(kvq_wtype_prep_x16_bytes(n));
            random_x(x, n, 91 * li + (uint64_t)i);
            const kvq_wx16 xs = kvq_wtype_prep_x16(KVQ_ISA_REF, x, n, scratch);
            x16_values(&xs, n, xhat);
            float want[23], got[25], exact[23];
            kvq_wmatvec_x16_ref(t, w, rb, &xs, n, r0, r1, want);
            kvq_wmatvec_ref(t, w, rb, x, n, r0, r1, exact);
            struct {
                const char *name;
                kvq_wmatvec_x16_fn mv;
                int ok;
            } paths[KVQ_ISA_COUNT + 1];
            int np = 0;
            for (int isa = 0; isa < KVQ_ISA_COUNT; isa++)
                paths[np].name = kvq_isa_name((kvq_isa)isa), paths[np].mv = t->matvec_x16[isa],
                paths[np++].ok = kvq_isa_supported((kvq_isa)isa);
#if KVQ_HAVE_X86
            paths[np].name = "avx512vnni", paths[np].mv = kvq_wmatvec_x16_avx512vnni;
            paths[np++].ok = kvq_isa_supported(KVQ_ISA_AVX512) && kvq_cpu_has_vnni();
#endif
            for (int p = 0; p < np && !kvq_test_failed(); p++) {
                if (!paths[p].ok) continue;
                for (int j = 0; j < 25; j++) got[j] = -777.0f;
                paths[p].mv(t, w, rb, &xs, n, r0, r1, got + 1);
                CHECKF(got[0] == -777.0f && got[r1 - r0 + 1] == -777.0f, "%s %s: wrote outside [r0, r1)", t->name,
                       paths[p].name);
                for (int64_t r = r0; r < r1; r++) {
                    const uint8_t *row = w + (size_t)r * rb;
                    const float g = got[r - r0 + 1];
                    t->dequant(row, v, n / 32);
                    double scale = 0, xbound = 0;
                    for (int64_t k = 0; k < n; k++) {
                        scale += fabs((double)v[k] * xhat[k]);
                        xbound += xs.e[k / 32] * fabs((double)v[k]);
                    }
                    const double err = fabs((double)g - want[r - r0]) / scale;
                    CHECKF(err <= BOUND, "%s %s n=%lld row %lld: %g vs %g (rel %g)", t->name, paths[p].name,
                           (long long)n, (long long)r, g, want[r - r0], err);
                    const double qerr = fabs((double)g - exact[r - r0]) - xbound * (1 + 1e-4);
                    CHECKF(qerr <= BOUND * scale, "%s %s n=%lld row %lld: %g vs float %g beyond the x rounding",
                           t->name, paths[p].name, (long long)n, (long long)r, g, exact[r - r0]);
                }
            }
            free(w), free(x), free(v), free(xhat), kvq_free_aligned(scratch);
        }
    }
}
