/* softmax_avx512.h — the exponential and the online-softmax step the
 * AVX-512 attention kernels share (decode_avx512.c, decode_vnni.c). Static
 * inline: each kernel inlines them with its own target. */
#ifndef KVQ_SOFTMAX_AVX512_H
#define KVQ_SOFTMAX_AVX512_H

#include <math.h>

#include "common/common.h"

#if KVQ_HAVE_X86
#include <immintrin.h>

/* exp(x) for x <= 0, relative error ~2e-7. Below -87 the result would be
 * denormal and every later multiply by it a microcode assist (tokens far
 * below the running max are most of a deep cache): flushed to 0 instead. */
KVQ_TARGET_AVX512 static KVQ_ALWAYS_INLINE __m512 exp16(__m512 x) {
    const __mmask16 normal = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_GE_OQ);
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_maskz_mov_ps(normal, _mm512_scalef_ps(p, n));
}

/* Online softmax over the scores s (G, np) of a tile: turns them into
 * p = exp(s - m_new) in place and rescales the running sum and accumulator. */
KVQ_TARGET_AVX512 static KVQ_ALWAYS_INLINE void softmax_update(const int G, int d, int np, float *s, float *m,
                                                               float *l, float *acc) {
    for (int g = 0; g < G; g++) {
        float *sg = s + g * np;
        __m512 mx = _mm512_set1_ps(-INFINITY);
        for (int t = 0; t < np; t += 16) mx = _mm512_max_ps(mx, _mm512_load_ps(sg + t));
        const float mt = _mm512_reduce_max_ps(mx);
        const float m_new = mt > m[g] ? mt : m[g];
        const float alpha = expf(m[g] - m_new);
        __m512 sum = _mm512_setzero_ps();
        const __m512 mv = _mm512_set1_ps(m_new);
        for (int t = 0; t < np; t += 16) {
            const __m512 p = exp16(_mm512_sub_ps(_mm512_load_ps(sg + t), mv));
            _mm512_store_ps(sg + t, p);
            sum = _mm512_add_ps(sum, p);
        }
        l[g] = l[g] * alpha + _mm512_reduce_add_ps(sum);
        m[g] = m_new;
        if (alpha != 1.0f) {
            const __m512 av = _mm512_set1_ps(alpha);
            for (int c = 0; c < d; c += 16)
                _mm512_storeu_ps(acc + g * d + c, _mm512_mul_ps(_mm512_loadu_ps(acc + g * d + c), av));
        }
    }
}

#endif
#endif
