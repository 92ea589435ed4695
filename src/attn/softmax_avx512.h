/* softmax_avx512.h — the exponential and the online-softmax step the
 * AVX-512 attention kernels share (decode_avx512.c, decode_vnni.c). Static
 * inline: each kernel inlines them with its own target. */
#ifndef KVQ_SOFTMAX_AVX512_H
#define KVQ_SOFTMAX_AVX512_H

#include <math.h>

#include "common/common.h"

#if KVQ_HAVE_X86
#include <immintrin.h>

/* 2^t for t <= 0 (and -Inf or NaN: 0) as 2^n 2^f, n = round(t), 2^f by a
 * fit of degree DEGREE on [-1/2, 1/2]: 5 for exp16 (relative error ~3e-7),
 * 3 for the integer kernel's p (7.5e-5: its p are rounded to 8 bits next,
 * steps of 1/255 or 1/127 of a run's largest; two operations fewer).
 * Below t = -100: 0. Such a p is nothing next to the largest (1), but
 * times a V value or scale (an fp16 scale can be 2^-24) it would make a
 * denormal product, and every multiply that makes one is a microcode
 * assist: flushing at t = -125 instead left iq4_nl's P x V (small scales)
 * 22% slower at depth 32768 on Llama-1B shapes (24.3-25.6 -> 18.5-20.4 ms
 * a step) and f16 ~5% slower. */
KVQ_TARGET_AVX512 static KVQ_ALWAYS_INLINE __m512 exp2_poly16(const int DEGREE, __m512 t) {
    const __mmask16 normal = _mm512_cmp_ps_mask(t, _mm512_set1_ps(-100.0f), _CMP_GE_OQ);
    t = _mm512_max_ps(t, _mm512_set1_ps(-100.0f));
    const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 f = _mm512_sub_ps(t, n);
    __m512 p;
    if (DEGREE == 5) {
        p = _mm512_set1_ps(1.3275318779051304e-03f);
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.675144217908382e-03f));
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.550713464617729e-02f));
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.402212768793106e-01f));
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.931469440460205e-01f));
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0000001192092896f));
    } else {
        p = _mm512_set1_ps(5.517132207751274e-02f);
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4261054396629333e-01f));
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.932609677314758e-01f));
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.999281167984009e-01f));
    }
    return _mm512_maskz_scalef_ps(normal, p, n);
}

/* exp(x) for x <= 0 (and -Inf or NaN: 0), relative error ~3e-7 near 0 and
 * growing with |x| (t = x log2 e is rounded once: ~4e-6 at x = -69, on
 * values 1e-30 of the largest); 0 below x = -69.3. 11 operations where a
 * Cody-Waite reduction and a degree-7 series took 15: one per score, a
 * visible share of the integer kernel. */
KVQ_TARGET_AVX512 static KVQ_ALWAYS_INLINE __m512 exp16(__m512 x) {
    return exp2_poly16(5, _mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)));
}

/* Online softmax over the scores s (G, np) of a tile: turns them into
 * p = exp(s - m_new) in place and rescales the running sum and accumulator.
 * COARSE (the integer kernel): p by the degree-3 exp2_poly16, with s log2 e - m log2 e
 * one FMA (its rounding adds ~1e-7 x |s| log2 e to the exponent). */
KVQ_TARGET_AVX512 static KVQ_ALWAYS_INLINE void softmax_update(const int COARSE, const int G, int d, int np, float *s,
                                                               float *m, float *l, float *acc) {
    for (int g = 0; g < G; g++) {
        float *sg = s + g * np;
        __m512 mx = _mm512_set1_ps(-INFINITY);
        for (int t = 0; t < np; t += 16) mx = _mm512_max_ps(mx, _mm512_load_ps(sg + t));
        /* At depth a run rarely holds a new maximum: then m stays and alpha
         * is 1 (as expf(0) would give) without the horizontal max and expf,
         * and the predicted branch lets the exponentials start at once. */
        float m_new = m[g], alpha = 1.0f;
        if (_mm512_cmp_ps_mask(mx, _mm512_set1_ps(m[g]), _CMP_GT_OQ)) {
            const float mt = _mm512_reduce_max_ps(mx);
            m_new = mt > m[g] ? mt : m[g];
            alpha = expf(m[g] - m_new);
        }
        __m512 sum = _mm512_setzero_ps();
        const __m512 mv = _mm512_set1_ps(m_new), log2e = _mm512_set1_ps(1.44269504088896341f);
        const __m512 mlog2e = _mm512_set1_ps(-m_new * 1.44269504088896341f);
        for (int t = 0; t < np; t += 16) {
            const __m512 st = _mm512_load_ps(sg + t);
            const __m512 p = COARSE ? exp2_poly16(3, _mm512_fmadd_ps(st, log2e, mlog2e)) : exp16(_mm512_sub_ps(st, mv));
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
