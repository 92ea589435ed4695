/* rotation.c — building the seeded rotations, the reference float kernels and
 * the float64 versions. The format and the arithmetic order are in
 * rotation.h. */
#include <math.h>
#include <string.h>

#include "codec/rotation.h"
#include "common/rng.h"

static void quat_mul(const double a[4], const double b[4], double out[4]) {
    out[0] = a[0] * b[0] - a[1] * b[1] - a[2] * b[2] - a[3] * b[3];
    out[1] = a[0] * b[1] + a[1] * b[0] + a[2] * b[3] - a[3] * b[2];
    out[2] = a[0] * b[2] - a[1] * b[3] + a[2] * b[0] + a[3] * b[1];
    out[3] = a[0] * b[3] + a[1] * b[2] - a[2] * b[1] + a[3] * b[0];
}

static void quat_random_unit(uint64_t *state, double q[4]) {
    for (;;) {
        double n2 = 0;
        for (int i = 0; i < 4; i++) {
            q[i] = kvq_rng_normal(state);
            n2 += q[i] * q[i];
        }
        if (n2 >= 1e-24) {
            const double inv = 1.0 / sqrt(n2);
            for (int i = 0; i < 4; i++) q[i] *= inv;
            return;
        }
    }
}

/* Places the m x m block matrix M (row-major) at dims [o, o+m) of the band. */
static void band_put(kvq_rotation *r, int o, int m, const double *M) {
    const int w = r->band, d = r->d;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < m; j++) {
            r->fwd64[(size_t)(j - i + w) * d + o + i] = M[i * m + j];
            r->inv64[(size_t)(i - j + w) * d + o + j] = M[i * m + j];
        }
}

static void build_quat4(kvq_rotation *r, uint64_t *state) {
    for (int b = 0; b < r->d / 4; b++) {
        double ql[4], qr[4], M[16];
        quat_random_unit(state, ql);
        quat_random_unit(state, qr);
        const double cqr[4] = {qr[0], -qr[1], -qr[2], -qr[3]};
        for (int j = 0; j < 4; j++) {
            double e[4] = {0, 0, 0, 0}, t[4], col[4];
            e[j] = 1;
            quat_mul(ql, e, t);
            quat_mul(t, cqr, col);
            for (int i = 0; i < 4; i++) M[i * 4 + j] = col[i];
        }
        band_put(r, 4 * b, 4, M);
    }
}

static void build_givens(kvq_rotation *r, uint64_t *state) {
    for (int p = 0; p < r->d / 2; p++) {
        const double t = 6.283185307179586 * kvq_rng_uniform(state);
        const double M[4] = {cos(t), -sin(t), sin(t), cos(t)};
        band_put(r, 2 * p, 2, M);
    }
}

static void build_rotor3(kvq_rotation *r, uint64_t *state) {
    const int groups = r->d / 3;
    for (int g = 0; g < groups; g++) {
        double q[4], M[9];
        quat_random_unit(state, q);
        const double cq[4] = {q[0], -q[1], -q[2], -q[3]};
        for (int j = 0; j < 3; j++) {
            double e[4] = {0, 0, 0, 0}, t[4], col[4];
            e[j + 1] = 1;
            quat_mul(q, e, t);
            quat_mul(t, cq, col);
            for (int i = 0; i < 3; i++) M[i * 3 + j] = col[i + 1];
        }
        band_put(r, 3 * g, 3, M);
    }
    for (int i = 3 * groups; i < r->d; i++) {
        const double one = 1.0;
        band_put(r, i, 1, &one);
    }
}

kvq_status kvq_rotation_init(kvq_rotation *r, int kind, int d, uint64_t seed) {
    KVQ_RETURN_IF(!r, KVQ_ERR_INVALID_ARG, "kvq_rotation_init: r is NULL");
    memset(r, 0, sizeof *r);
    KVQ_RETURN_IF(d < 32 || d > KVQ_MAX_HEAD_DIM || d % 32 != 0, KVQ_ERR_INVALID_ARG,
                  "rotation: d %d is not a multiple of 32 in [32, %d]", d, KVQ_MAX_HEAD_DIM);
    static const int bands[] = {[KVQ_ROT_QUAT4] = 3, [KVQ_ROT_GIVENS] = 1, [KVQ_ROT_ROTOR3] = 2};
    KVQ_RETURN_IF(kind < KVQ_ROT_WHT || kind > KVQ_ROT_ROTOR3, KVQ_ERR_INVALID_ARG, "rotation: unknown kind %d",
                  kind);
    r->kind = kind;
    r->d = d;
    uint64_t state = seed;
    if (kind == KVQ_ROT_WHT) {
        r->block = d & -d;
        r->scale64 = 1.0 / sqrt((double)r->block);
        r->scale = (float)r->scale64;
        r->sign = kvq_alloc_aligned(sizeof(float) * (size_t)d);
        KVQ_RETURN_IF(!r->sign, KVQ_ERR_NOMEM, "rotation: out of memory");
        for (int i = 0; i < d; i++) r->sign[i] = kvq_splitmix64(&state) >> 63 ? -1.0f : 1.0f;
        return KVQ_OK;
    }
    r->band = bands[kind];
    const size_t n = (size_t)(2 * r->band + 1) * (size_t)d;
    r->fwd = kvq_alloc_aligned(sizeof(float) * n);
    r->inv = kvq_alloc_aligned(sizeof(float) * n);
    r->fwd64 = kvq_alloc_aligned(sizeof(double) * n);
    r->inv64 = kvq_alloc_aligned(sizeof(double) * n);
    if (!r->fwd || !r->inv || !r->fwd64 || !r->inv64) {
        kvq_rotation_free(r);
        return kvq_fail(KVQ_ERR_NOMEM, "rotation: out of memory");
    }
    memset(r->fwd64, 0, sizeof(double) * n);
    memset(r->inv64, 0, sizeof(double) * n);
    if (kind == KVQ_ROT_QUAT4) build_quat4(r, &state);
    else if (kind == KVQ_ROT_GIVENS) build_givens(r, &state);
    else build_rotor3(r, &state);
    for (size_t i = 0; i < n; i++) {
        r->fwd[i] = (float)r->fwd64[i];
        r->inv[i] = (float)r->inv64[i];
    }
    return KVQ_OK;
}

void kvq_rotation_free(kvq_rotation *r) {
    if (!r) return;
    kvq_free_aligned(r->sign);
    kvq_free_aligned(r->fwd);
    kvq_free_aligned(r->inv);
    kvq_free_aligned(r->fwd64);
    kvq_free_aligned(r->inv64);
    memset(r, 0, sizeof *r);
}

static void wht_butterflies(float *t, int d, int n) {
    for (int b = 0; b < d; b += n)
        for (int h = 1; h < n; h *= 2)
            for (int j = b; j < b + n; j += 2 * h)
                for (int k = j; k < j + h; k++) {
                    const float a = t[k], c = t[k + h];
                    t[k] = a + c;
                    t[k + h] = a - c;
                }
}

static void apply_ref(const kvq_rotation *r, int inverse, const float *x, float *y) {
    const int d = r->d;
    if (r->kind == KVQ_ROT_WHT) {
        float t[KVQ_MAX_HEAD_DIM]; /* (d) */
        for (int i = 0; i < d; i++) t[i] = inverse ? x[i] : x[i] * r->sign[i];
        wht_butterflies(t, d, r->block);
        for (int i = 0; i < d; i++) y[i] = inverse ? (t[i] * r->scale) * r->sign[i] : t[i] * r->scale;
        return;
    }
    const int w = r->band;
    float xp[KVQ_MAX_HEAD_DIM + 2 * KVQ_ROT_MAX_BAND]; /* (w + d + w) x zero-padded */
    for (int k = 0; k < w; k++) xp[k] = xp[w + d + k] = 0.0f;
    memcpy(xp + w, x, sizeof(float) * (size_t)d);
    const float *B = inverse ? r->inv : r->fwd;
    for (int i = 0; i < d; i++) {
        float acc = B[i] * xp[i];
        for (int k = 1; k <= 2 * w; k++) acc = acc + B[(size_t)k * d + i] * xp[i + k];
        y[i] = acc;
    }
}

static void apply(const kvq_rotation *r, kvq_isa isa, int inverse, const float *x, float *y) {
#if KVQ_HAVE_X86
    if (isa >= KVQ_ISA_AVX512) {
        kvq_rotation_apply_avx512(r, inverse, x, y);
        return;
    }
    if (isa >= KVQ_ISA_AVX2) {
        kvq_rotation_apply_avx2(r, inverse, x, y);
        return;
    }
#endif
    (void)isa;
    apply_ref(r, inverse, x, y);
}

void kvq_rotation_forward(const kvq_rotation *r, kvq_isa isa, const float *x, float *y) { apply(r, isa, 0, x, y); }
void kvq_rotation_inverse(const kvq_rotation *r, kvq_isa isa, const float *x, float *y) { apply(r, isa, 1, x, y); }

static void apply_f64(const kvq_rotation *r, int inverse, const double *x, double *y) {
    const int d = r->d;
    if (r->kind == KVQ_ROT_WHT) {
        double t[KVQ_MAX_HEAD_DIM]; /* (d) */
        for (int i = 0; i < d; i++) t[i] = inverse ? x[i] : x[i] * r->sign[i];
        const int n = r->block;
        for (int b = 0; b < d; b += n)
            for (int h = 1; h < n; h *= 2)
                for (int j = b; j < b + n; j += 2 * h)
                    for (int k = j; k < j + h; k++) {
                        const double a = t[k], c = t[k + h];
                        t[k] = a + c;
                        t[k + h] = a - c;
                    }
        for (int i = 0; i < d; i++) y[i] = t[i] * r->scale64 * (inverse ? r->sign[i] : 1.0);
        return;
    }
    const int w = r->band;
    double xp[KVQ_MAX_HEAD_DIM + 2 * KVQ_ROT_MAX_BAND] = {0}; /* (w + d + w) */
    memcpy(xp + w, x, sizeof(double) * (size_t)d);
    const double *B = inverse ? r->inv64 : r->fwd64;
    for (int i = 0; i < d; i++) {
        double acc = 0;
        for (int k = 0; k <= 2 * w; k++) acc += B[(size_t)k * d + i] * xp[i + k];
        y[i] = acc;
    }
}

void kvq_rotation_forward_f64(const kvq_rotation *r, const double *x, double *y) { apply_f64(r, 0, x, y); }
void kvq_rotation_inverse_f64(const kvq_rotation *r, const double *x, double *y) { apply_f64(r, 1, x, y); }
