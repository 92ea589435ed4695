/* act_avx512.c — SwiGLU with AVX-512: libm's scalar expf was ~6% of a
 * prompt chunk (perf, pp512 at depth 0). */
#include "model/act.h"

#include "attn/softmax_avx512.h"

#if KVQ_HAVE_X86
/* silu(g) = g sigmoid(g) with e = exp(-|g|) <= 1 (exp16 takes x <= 0):
 * sigmoid(g) = 1 / (1 + e) for g >= 0, e / (1 + e) below. exp16's ~3e-7
 * relative error reaches sigmoid damped by 1 / (1 + e); below g = -69 e
 * flushes to 0 and so does the product (true value < 1e-28 |u|). */
KVQ_TARGET_AVX512 static KVQ_ALWAYS_INLINE __m512 swiglu16(__m512 g, __m512 u) {
    const __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_abs_ps(g)));
    const __mmask16 neg = _mm512_cmp_ps_mask(g, _mm512_setzero_ps(), _CMP_LT_OQ);
    const __m512 num = _mm512_mask_mov_ps(_mm512_set1_ps(1.0f), neg, e);
    const __m512 sig = _mm512_div_ps(num, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
    return _mm512_mul_ps(_mm512_mul_ps(g, sig), u);
}

KVQ_TARGET_AVX512 void kvq_swiglu_avx512(float *g, const float *u, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(g + i, swiglu16(_mm512_loadu_ps(g + i), _mm512_loadu_ps(u + i)));
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(g + i, m, swiglu16(_mm512_maskz_loadu_ps(m, g + i), _mm512_maskz_loadu_ps(m, u + i)));
    }
}
#endif
