/* rotation_avx2.c — the rotation kernels with AVX2, bit-identical with the
 * reference (rotation.h gives the arithmetic order). */
#include <string.h>

#include "codec/rotation.h"

#if KVQ_HAVE_X86
#include <immintrin.h>

/* One butterfly stage inside an 8-lane vector: partner p = lane ^ h; low
 * lanes get p + x (= a + b), high lanes p + (-x) (= a - b, exactly). */
#define KVQ_WHT_STAGE8(v, perm, high)                                            \
    do {                                                                         \
        const __m256 p_ = (perm);                                                \
        v = _mm256_add_ps(p_, _mm256_xor_ps(v, (high)));                          \
    } while (0)

/* nv vectors of 8, blocks of vb vectors: constants at each call. */
KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE void wht_body(const kvq_rotation *r, int inverse, const float *x, float *y,
                                                       const int nv, const int vb) {
    __m256 v[KVQ_MAX_HEAD_DIM / 8]; /* (d / 8, 8) */
    const __m256 neg = _mm256_set1_ps(-0.0f), zero = _mm256_setzero_ps();
    const __m256 h1 = _mm256_blend_ps(zero, neg, 0xAA), h2 = _mm256_blend_ps(zero, neg, 0xCC);
    const __m256 h4 = _mm256_blend_ps(zero, neg, 0xF0);
    for (int i = 0; i < nv; i++) {
        __m256 t = _mm256_loadu_ps(x + 8 * i);
        if (!inverse) t = _mm256_mul_ps(t, _mm256_load_ps(r->sign + 8 * i));
        KVQ_WHT_STAGE8(t, _mm256_permute_ps(t, 0xB1), h1);
        KVQ_WHT_STAGE8(t, _mm256_permute_ps(t, 0x4E), h2);
        KVQ_WHT_STAGE8(t, _mm256_permute2f128_ps(t, t, 0x01), h4);
        v[i] = t;
    }
    for (int b = 0; b < nv; b += vb)
        for (int h = 1; h < vb; h *= 2)
            for (int j = b; j < b + vb; j += 2 * h)
                for (int k = j; k < j + h; k++) {
                    const __m256 a = v[k], c = v[k + h];
                    v[k] = _mm256_add_ps(a, c);
                    v[k + h] = _mm256_sub_ps(a, c);
                }
    const __m256 s = _mm256_set1_ps(r->scale);
    for (int i = 0; i < nv; i++) {
        __m256 t = _mm256_mul_ps(v[i], s);
        if (inverse) t = _mm256_mul_ps(t, _mm256_load_ps(r->sign + 8 * i));
        _mm256_storeu_ps(y + 8 * i, t);
    }
}

KVQ_TARGET_AVX2 static void wht_avx2(const kvq_rotation *r, int inverse, const float *x, float *y) {
    if (r->d == r->block) {
        switch (r->d) {
        case 64: wht_body(r, inverse, x, y, 8, 8); return;
        case 128: wht_body(r, inverse, x, y, 16, 16); return;
        default: break;
        }
    }
    wht_body(r, inverse, x, y, r->d / 8, r->block / 8);
}

KVQ_TARGET_AVX2 static void band_avx2(const kvq_rotation *r, int inverse, const float *x, float *y) {
    const int d = r->d, w = r->band;
    float xp[KVQ_MAX_HEAD_DIM + 2 * KVQ_ROT_MAX_BAND]; /* (w + d + w) x zero-padded */
    for (int k = 0; k < w; k++) xp[k] = xp[w + d + k] = 0.0f;
    memcpy(xp + w, x, sizeof(float) * (size_t)d);
    const float *B = inverse ? r->inv : r->fwd;
    for (int i = 0; i < d; i += 8) {
        __m256 acc = _mm256_mul_ps(_mm256_load_ps(B + i), _mm256_loadu_ps(xp + i));
        for (int k = 1; k <= 2 * w; k++)
            acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_load_ps(B + (size_t)k * d + i), _mm256_loadu_ps(xp + i + k)));
        _mm256_storeu_ps(y + i, acc);
    }
}

KVQ_TARGET_AVX2 void kvq_rotation_apply_avx2(const kvq_rotation *r, int inverse, const float *x, float *y) {
    if (r->kind == KVQ_ROT_WHT) wht_avx2(r, inverse, x, y);
    else band_avx2(r, inverse, x, y);
}
#endif
