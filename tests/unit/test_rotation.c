/* test_rotation.c — the seeded rotations (orthogonality, determinism, ISA
 * twins, float vs float64), the rotated codecs' attention domain and the
 * Lloyd-Max codebooks they share. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codec/rotated.h"
#include "common/rng.h"
#include "test.h"

static const int kinds[] = {KVQ_ROT_WHT, KVQ_ROT_QUAT4, KVQ_ROT_GIVENS, KVQ_ROT_ROTOR3};
static const int dims[] = {64, 96, 128, 160, 256};

TEST(rotation_is_orthogonal_in_float64) {
    double *m = malloc(sizeof(double) * KVQ_MAX_HEAD_DIM * KVQ_MAX_HEAD_DIM); /* (d, d) column j = R e_j */
    for (size_t a = 0; a < KVQ_ARRAY_LEN(kinds); a++)
        for (size_t b = 0; b < KVQ_ARRAY_LEN(dims); b++) {
            const int d = dims[b];
            kvq_rotation r;
            CHECK_OK(kvq_rotation_init(&r, kinds[a], d, 1234));
            double e[KVQ_MAX_HEAD_DIM], back[KVQ_MAX_HEAD_DIM];
            double worst = 0, worst_inv = 0;
            for (int j = 0; j < d; j++) {
                memset(e, 0, sizeof e);
                e[j] = 1;
                kvq_rotation_forward_f64(&r, e, m + (size_t)j * d);
                kvq_rotation_inverse_f64(&r, m + (size_t)j * d, back);
                for (int i = 0; i < d; i++) worst_inv = fmax(worst_inv, fabs(back[i] - e[i]));
            }
            for (int i = 0; i < d; i++)
                for (int j = 0; j < d; j++) {
                    double dot = 0;
                    for (int k = 0; k < d; k++) dot += m[(size_t)i * d + k] * m[(size_t)j * d + k];
                    worst = fmax(worst, fabs(dot - (i == j)));
                }
            kvq_rotation_free(&r);
            CHECKF(worst < 1e-6 && worst_inv < 1e-6, "kind %d d=%d: |R^T R - I| %.3g, |R^T R e - e| %.3g", kinds[a], d,
                   worst, worst_inv);
        }
    free(m);
}

TEST(rotation_depends_on_seed_only) {
    uint64_t s = 3;
    double x[KVQ_MAX_HEAD_DIM], y1[KVQ_MAX_HEAD_DIM], y2[KVQ_MAX_HEAD_DIM], y3[KVQ_MAX_HEAD_DIM];
    for (int i = 0; i < KVQ_MAX_HEAD_DIM; i++) x[i] = kvq_test_normal(&s);
    for (size_t a = 0; a < KVQ_ARRAY_LEN(kinds); a++)
        for (size_t b = 0; b < KVQ_ARRAY_LEN(dims); b++) {
            const int d = dims[b];
            kvq_rotation r1, r2, r3;
            CHECK_OK(kvq_rotation_init(&r1, kinds[a], d, 77));
            CHECK_OK(kvq_rotation_init(&r2, kinds[a], d, 77));
            CHECK_OK(kvq_rotation_init(&r3, kinds[a], d, 78));
            kvq_rotation_forward_f64(&r1, x, y1);
            kvq_rotation_forward_f64(&r2, x, y2);
            kvq_rotation_forward_f64(&r3, x, y3);
            double diff = 0;
            for (int i = 0; i < d; i++) diff += fabs(y1[i] - y3[i]);
            kvq_rotation_free(&r1);
            kvq_rotation_free(&r2);
            kvq_rotation_free(&r3);
            CHECKF(memcmp(y1, y2, sizeof(double) * (size_t)d) == 0, "kind %d d=%d: same seed, other rotation", kinds[a], d);
            CHECKF(diff > 1e-3 * d, "kind %d d=%d: seeds 77 and 78 give the same rotation", kinds[a], d);
        }
}

TEST(rotation_rejects_bad_arguments) {
    kvq_rotation r;
    CHECK(kvq_rotation_init(&r, KVQ_ROT_NONE, 64, 0) == KVQ_ERR_INVALID_ARG);
    CHECK(kvq_rotation_init(&r, KVQ_ROT_ROTOR3 + 1, 64, 0) == KVQ_ERR_INVALID_ARG);
    CHECK(kvq_rotation_init(&r, KVQ_ROT_WHT, 48, 0) == KVQ_ERR_INVALID_ARG);
    CHECK(kvq_rotation_init(&r, KVQ_ROT_WHT, KVQ_MAX_HEAD_DIM + 32, 0) == KVQ_ERR_INVALID_ARG);
    CHECK(kvq_rotation_init(NULL, KVQ_ROT_WHT, 64, 0) == KVQ_ERR_INVALID_ARG);
}

/* Float paths: every ISA bit-identical with the reference (in place too),
 * all within float rounding of float64, and dot products preserved. */
TEST(rotation_float_paths_match) {
    float x[KVQ_MAX_HEAD_DIM], k[KVQ_MAX_HEAD_DIM], ref[KVQ_MAX_HEAD_DIM], y[KVQ_MAX_HEAD_DIM];
    float rq[KVQ_MAX_HEAD_DIM], rk[KVQ_MAX_HEAD_DIM];
    double x64[KVQ_MAX_HEAD_DIM], y64[KVQ_MAX_HEAD_DIM];
    for (size_t a = 0; a < KVQ_ARRAY_LEN(kinds); a++)
        for (size_t b = 0; b < KVQ_ARRAY_LEN(dims); b++) {
            const int d = dims[b];
            kvq_rotation r;
            CHECK_OK(kvq_rotation_init(&r, kinds[a], d, 5));
            for (int trial = 0; trial < 8 && !kvq_test_failed(); trial++) {
                kvq_test_outlier_rows(x, 1, d, (uint64_t)trial);
                kvq_test_outlier_rows(k, 1, d, (uint64_t)trial + 100);
                double nx = 0, dot = 0, dot_rot = 0, nk = 0;
                for (int i = 0; i < d; i++) {
                    x64[i] = x[i];
                    nx += (double)x[i] * x[i];
                    nk += (double)k[i] * k[i];
                    dot += (double)x[i] * k[i];
                }
                for (int inverse = 0; inverse < 2; inverse++) {
                    void (*f)(const kvq_rotation *, kvq_isa, const float *, float *) =
                        inverse ? kvq_rotation_inverse : kvq_rotation_forward;
                    f(&r, KVQ_ISA_REF, x, ref);
                    (inverse ? kvq_rotation_inverse_f64 : kvq_rotation_forward_f64)(&r, x64, y64);
                    double err = 0;
                    for (int i = 0; i < d; i++) err = fmax(err, fabs(ref[i] - y64[i]));
                    CHECKF(err <= 1e-6 * sqrt(nx), "kind %d d=%d inverse %d: float vs float64 %.3g", kinds[a], d,
                           inverse, err);
                    for (int isa = KVQ_ISA_AVX2; isa < KVQ_ISA_COUNT; isa++) {
                        if (!kvq_isa_supported((kvq_isa)isa)) continue;
                        f(&r, (kvq_isa)isa, x, y);
                        CHECKF(memcmp(y, ref, sizeof(float) * (size_t)d) == 0, "kind %d d=%d isa %s inverse %d",
                               kinds[a], d, kvq_isa_name((kvq_isa)isa), inverse);
                        memcpy(y, x, sizeof x);
                        f(&r, (kvq_isa)isa, y, y);
                        CHECKF(memcmp(y, ref, sizeof(float) * (size_t)d) == 0, "kind %d d=%d isa %s in place",
                               kinds[a], d, kvq_isa_name((kvq_isa)isa));
                    }
                }
                kvq_rotation_forward(&r, KVQ_ISA_REF, x, rq);
                kvq_rotation_forward(&r, KVQ_ISA_REF, k, rk);
                for (int i = 0; i < d; i++) dot_rot += (double)rq[i] * rk[i];
                CHECKF(fabs(dot_rot - dot) <= 1e-5 * sqrt(nx * nk), "kind %d d=%d: q.k %.9g, Rq.Rk %.9g", kinds[a], d,
                       dot, dot_rot);
            }
            kvq_rotation_free(&r);
        }
}

/* Attention reads decode_domain rows and inverse-rotates once: that must be
 * the codec's decoding; to_domain must be the encoder's rotation. */
TEST(rotation_codec_domain_round_trip) {
    float x[KVQ_MAX_HEAD_DIM], y[KVQ_MAX_HEAD_DIM], z[KVQ_MAX_HEAD_DIM];
    uint8_t row[KVQ_MAX_HEAD_DIM];
    int n_rot = 0;
    for (int i = 0; i < kvq_codec_count(); i++) {
        const kvq_codec_desc *desc = kvq_codec_desc_at(i);
        if (desc->family != &kvq_family_rot) continue;
        n_rot++;
        for (int d = 64; d <= 256; d *= 2)
            for (int isa = KVQ_ISA_REF; isa < KVQ_ISA_COUNT; isa++) {
                if (!kvq_isa_supported((kvq_isa)isa)) continue;
                kvq_codec *c = NULL;
                CHECK_OK(kvq_codec_create(desc->name, d, 21, &c));
                CHECK_OK(kvq_codec_set_isa(c, (kvq_isa)isa));
                kvq_test_outlier_rows(x, 1, d, (uint64_t)(d + isa));
                CHECK_OK(kvq_codec_encode_row(c, x, row));
                CHECK_OK(kvq_codec_decode_row(c, row, y));
                c->decode_domain(c, row, z);
                double nz = 0;
                for (int j = 0; j < d; j++) nz += (double)z[j] * z[j];
                kvq_codec_from_domain(c, z, z);
                for (int j = 0; j < d; j++)
                    CHECKF(fabsf(y[j] - z[j]) <= 1e-6f * (float)sqrt(nz), "%s d=%d isa %s: %g vs %g", desc->name, d,
                           kvq_isa_name((kvq_isa)isa), y[j], z[j]);
                /* to_domain is the encoder's R: the decoded row rotated
                 * forward is the domain row. */
                kvq_codec_to_domain(c, y, y);
                c->decode_domain(c, row, z);
                for (int j = 0; j < d; j++)
                    CHECKF(fabsf(y[j] - z[j]) <= 1e-5f * (float)sqrt(nz), "%s d=%d: to_domain %g vs %g", desc->name, d,
                           y[j], z[j]);
                kvq_codec_free(c);
            }
    }
    CHECK(n_rot == 9);
}

/* Conditional mean of N(0,1) over [lo, hi]: (phi(lo) - phi(hi)) / (Phi(hi) - Phi(lo)),
 * both by Simpson integration so the check does not trust a closed form. */
static double cell_mean(double lo, double hi) {
    if (lo < -12) lo = -12;
    if (hi > 12) hi = 12;
    const int n = 20000;
    const double h = (hi - lo) / n;
    double m0 = 0, m1 = 0;
    for (int i = 0; i <= n; i++) {
        const double t = lo + i * h, w = (i == 0 || i == n) ? 1 : (i % 2 ? 4 : 2);
        const double p = exp(-0.5 * t * t);
        m0 += w * p;
        m1 += w * t * p;
    }
    return m1 / m0;
}

TEST(rotation_codebooks_are_lloyd_max) {
    const float *tables[] = {kvq_rot_centroids_2, kvq_rot_centroids_3, kvq_rot_centroids_4};
    for (int b = 2; b <= 4; b++) {
        const float *cent = tables[b - 2];
        const int k = 1 << b;
        kvq_codec *c = NULL;
        CHECK_OK(kvq_codec_create(b == 2 ? "turbo2" : b == 3 ? "turbo3" : "turbo4", 64, 0, &c));
        const kvq_rot_state *st = c->state;
        for (int j = 0; j < k; j++) {
            CHECK(st->centroid[j] == cent[j] && cent[j] == -cent[k - 1 - j]);
            if (j > 0) CHECK(cent[j] > cent[j - 1]);
            if (j < k - 1) CHECKF(st->threshold[j] == (cent[j] + cent[j + 1]) * 0.5f, "b=%d threshold %d", b, j);
            const double lo = j ? st->threshold[j - 1] : -INFINITY, hi = j < k - 1 ? st->threshold[j] : INFINITY;
            const double m = cell_mean(lo, hi);
            CHECKF(fabs(m - cent[j]) < 1e-3, "b=%d centroid %d: %.5f, cell mean %.5f", b, j, cent[j], m);
        }
        kvq_codec_free(c);
    }
}

/* The integer kernels' centroid tables (rotated.c int8_steps): within
 * KVQ_ROT_CODE_MAX steps per side (AVX2's K scores saturate s16 past it:
 * decode_int_avx2.c's static asserts), the largest at least half of it,
 * and each centroid within the worst rounding the comments state (K 2 / 3
 * / 4 bits 0.0003 / 0.0196 / 0.0132, V 0.0003 / 0.0021 / 0.0079). */
TEST(rotation_integer_tables_within_their_steps) {
    static const double worst[2][3] = {{0.0003, 0.0196, 0.0132}, {0.0003, 0.0021, 0.0079}};
    for (int b = 2; b <= 4; b++) {
        kvq_codec *c = NULL;
        CHECK_OK(kvq_codec_create(b == 2 ? "turbo2" : b == 3 ? "turbo3" : "turbo4", 64, 0, &c));
        const kvq_rot_state *st = c->state;
        for (int side = 0; side < 2; side++) {
            const int most = KVQ_ROT_CODE_MAX(b, side);
            int top = 0;
            double err = 0;
            for (int j = 0; j < 16; j++) {
                const int code = st->step_code[side][j] - 128;
                top = abs(code) > top ? abs(code) : top;
                err = fmax(err, fabs(code * (double)st->step[side] - st->centroid[j]));
            }
            CHECKF(top <= most && 2 * top >= most, "b=%d side %d: largest code %d of %d", b, side, top, most);
            CHECKF(err <= worst[side][b - 2] + 5e-5, "b=%d side %d: worst rounding %.5f", b, side, err);
        }
        kvq_codec_free(c);
    }
}
