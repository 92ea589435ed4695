/* softmax_avx2.h — the exponential and the online-softmax step the AVX2
 * attention kernels share (decode_avx2.c, decode_int_avx2.c); the AVX-512
 * ones are in softmax_avx512.h. Static inline: each kernel inlines them
 * with its own target. */
#ifndef KVQ_SOFTMAX_AVX2_H
#define KVQ_SOFTMAX_AVX2_H

#include <math.h>

#include "common/common.h"

#if KVQ_HAVE_X86
#include <immintrin.h>

KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE float hsum8(__m256 x) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE float hmax8(__m256 x) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* exp(x) for x <= 0, relative error ~2e-7; below -87 gives 0. */
KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE __m256 exp8(__m256 x) {
    const __m256 tiny = _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_LT_OQ);
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187e-06f), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(tiny, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

/* 2^t for t <= 0 by a degree-3 fit of 2^f on [-1/2, 1/2] (relative error
 * 7.5e-5, softmax_avx512.h exp2_poly16's): the integer kernel's p, rounded
 * next to steps far coarser. 0 below t = -100 (a denormal product later
 * would cost a microcode assist per multiply). */
KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE __m256 exp2_coarse8(__m256 t) {
    const __m256 tiny = _mm256_cmp_ps(t, _mm256_set1_ps(-100.0f), _CMP_LT_OQ);
    t = _mm256_max_ps(t, _mm256_set1_ps(-100.0f));
    const __m256 n = _mm256_round_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 f = _mm256_sub_ps(t, n);
    __m256 p = _mm256_set1_ps(5.517132207751274e-02f);
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.4261054396629333e-01f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(6.932609677314758e-01f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.999281167984009e-01f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(tiny, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

/* Online softmax over the scores s (G, np) of a tile (np a multiple of 8,
 * s 32-byte aligned): turns them into p = exp(s - m_new) in place and
 * rescales the running sum and accumulator. COARSE (the integer kernel):
 * p by exp2_coarse8, s log2 e - m log2 e one FMA. */
KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE void softmax_update_avx2(const int COARSE, const int G, int d, int np,
                                                                  float *s, float *m, float *l, float *acc) {
#pragma GCC unroll 8
    for (int g = 0; g < G; g++) {
        float *sg = s + g * np;
        __m256 mx = _mm256_set1_ps(-INFINITY);
        for (int t = 0; t < np; t += 8) mx = _mm256_max_ps(mx, _mm256_load_ps(sg + t));
        /* At depth a run rarely holds a new maximum: then m stays and alpha
         * is 1 without the horizontal max and expf (softmax_avx512.h). */
        float m_new = m[g], alpha = 1.0f;
        if (_mm256_movemask_ps(_mm256_cmp_ps(mx, _mm256_set1_ps(m[g]), _CMP_GT_OQ))) {
            const float mt = hmax8(mx);
            m_new = mt > m[g] ? mt : m[g];
            alpha = expf(m[g] - m_new);
        }
        __m256 sum = _mm256_setzero_ps();
        const __m256 mv = _mm256_set1_ps(m_new), log2e = _mm256_set1_ps(1.44269504088896341f);
        const __m256 mlog2e = _mm256_set1_ps(-m_new * 1.44269504088896341f);
        for (int t = 0; t < np; t += 8) {
            const __m256 st = _mm256_load_ps(sg + t);
            const __m256 p = COARSE ? exp2_coarse8(_mm256_fmadd_ps(st, log2e, mlog2e)) : exp8(_mm256_sub_ps(st, mv));
            _mm256_store_ps(sg + t, p);
            sum = _mm256_add_ps(sum, p);
        }
        l[g] = l[g] * alpha + hsum8(sum);
        m[g] = m_new;
        if (alpha != 1.0f) {
            const __m256 av = _mm256_set1_ps(alpha);
            for (int c = 0; c < d; c += 8)
                _mm256_storeu_ps(acc + g * d + c, _mm256_mul_ps(_mm256_loadu_ps(acc + g * d + c), av));
        }
    }
}

#endif
#endif
