/* rotation_avx512.c — the rotation kernels with AVX-512, bit-identical with
 * the reference (rotation.h gives the arithmetic order). */
#include <string.h>

#include "codec/rotation.h"

#if KVQ_HAVE_X86
#include <immintrin.h>

/* One butterfly stage inside a 16-lane vector: partner p = lane ^ h; low
 * lanes get p + x (= a + b), high lanes p + (-x) (= a - b, exactly). The
 * sign flip runs beside the shuffle, so a stage costs one add of latency. */
#define KVQ_WHT_STAGE(v, perm, high)                                             \
    do {                                                                         \
        const __m512 p_ = (perm);                                                \
        v = _mm512_add_ps(p_, _mm512_xor_ps(v, (high)));                         \
    } while (0)

/* nv vectors of 16, blocks of vb vectors: constants at each call, so v[]
 * lives in registers. */
KVQ_TARGET_AVX512 static KVQ_ALWAYS_INLINE void wht_body(const kvq_rotation *r, int inverse, const float *x, float *y,
                                                         const int nv, const int vb) {
    __m512 v[KVQ_MAX_HEAD_DIM / 16]; /* (d / 16, 16) */
    const __m512 neg = _mm512_set1_ps(-0.0f), zero = _mm512_setzero_ps();
    const __m512 h1 = _mm512_mask_blend_ps(0xAAAA, zero, neg), h2 = _mm512_mask_blend_ps(0xCCCC, zero, neg);
    const __m512 h4 = _mm512_mask_blend_ps(0xF0F0, zero, neg), h8 = _mm512_mask_blend_ps(0xFF00, zero, neg);
    for (int i = 0; i < nv; i++) {
        __m512 t = _mm512_loadu_ps(x + 16 * i);
        if (!inverse) t = _mm512_mul_ps(t, _mm512_load_ps(r->sign + 16 * i));
        KVQ_WHT_STAGE(t, _mm512_permute_ps(t, 0xB1), h1);
        KVQ_WHT_STAGE(t, _mm512_permute_ps(t, 0x4E), h2);
        KVQ_WHT_STAGE(t, _mm512_shuffle_f32x4(t, t, _MM_SHUFFLE(2, 3, 0, 1)), h4);
        KVQ_WHT_STAGE(t, _mm512_shuffle_f32x4(t, t, _MM_SHUFFLE(1, 0, 3, 2)), h8);
        v[i] = t;
    }
    for (int b = 0; b < nv; b += vb)
        for (int h = 1; h < vb; h *= 2)
            for (int j = b; j < b + vb; j += 2 * h)
                for (int k = j; k < j + h; k++) {
                    const __m512 a = v[k], c = v[k + h];
                    v[k] = _mm512_add_ps(a, c);
                    v[k + h] = _mm512_sub_ps(a, c);
                }
    const __m512 s = _mm512_set1_ps(r->scale);
    for (int i = 0; i < nv; i++) {
        __m512 t = _mm512_mul_ps(v[i], s);
        if (inverse) t = _mm512_mul_ps(t, _mm512_load_ps(r->sign + 16 * i));
        _mm512_storeu_ps(y + 16 * i, t);
    }
}

KVQ_TARGET_AVX512 static void wht_avx512(const kvq_rotation *r, int inverse, const float *x, float *y) {
    if (r->d == r->block) {
        switch (r->d) {
        case 64: wht_body(r, inverse, x, y, 4, 4); return;
        case 128: wht_body(r, inverse, x, y, 8, 8); return;
        case 256: wht_body(r, inverse, x, y, 16, 16); return;
        default: break;
        }
    }
    wht_body(r, inverse, x, y, r->d / 16, r->block / 16);
}

KVQ_TARGET_AVX512 static void band_avx512(const kvq_rotation *r, int inverse, const float *x, float *y) {
    const int d = r->d, w = r->band;
    float xp[KVQ_MAX_HEAD_DIM + 2 * KVQ_ROT_MAX_BAND]; /* (w + d + w) x zero-padded */
    for (int k = 0; k < w; k++) xp[k] = xp[w + d + k] = 0.0f;
    memcpy(xp + w, x, sizeof(float) * (size_t)d);
    const float *B = inverse ? r->inv : r->fwd;
    for (int i = 0; i < d; i += 16) {
        __m512 acc = _mm512_mul_ps(_mm512_load_ps(B + i), _mm512_loadu_ps(xp + i));
        for (int k = 1; k <= 2 * w; k++)
            acc = _mm512_add_ps(acc, _mm512_mul_ps(_mm512_load_ps(B + (size_t)k * d + i), _mm512_loadu_ps(xp + i + k)));
        _mm512_storeu_ps(y + i, acc);
    }
}

KVQ_TARGET_AVX512 void kvq_rotation_apply_avx512(const kvq_rotation *r, int inverse, const float *x, float *y) {
    if (r->kind == KVQ_ROT_WHT) wht_avx512(r, inverse, x, y);
    else band_avx512(r, inverse, x, y);
}
#endif
