/* act_avx2.c — SwiGLU with AVX2, as act_avx512.c: libm's scalar expf was
 * 1.6% of a decode step at depth 0 on a Zen 3 host (perf). */
#include "model/act.h"

#include "attn/softmax_avx2.h"

#if KVQ_HAVE_X86
/* silu(g) = g sigmoid(g) with e = exp(-|g|) <= 1 (exp8 takes x <= 0):
 * sigmoid(g) = 1 / (1 + e) for g >= 0, e / (1 + e) below. exp8's ~2e-7
 * relative error reaches sigmoid damped by 1 / (1 + e); below g = -87 e
 * flushes to 0 and so does the product (true value < 1e-36 |u|). */
KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE __m256 swiglu8(__m256 g, __m256 u) {
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), _mm256_andnot_ps(_mm256_set1_ps(-0.0f), g)));
    const __m256 num = _mm256_blendv_ps(one, e, _mm256_cmp_ps(g, _mm256_setzero_ps(), _CMP_LT_OQ));
    return _mm256_mul_ps(_mm256_mul_ps(g, _mm256_div_ps(num, _mm256_add_ps(one, e))), u);
}

KVQ_TARGET_AVX2 void kvq_swiglu_avx2(float *g, const float *u, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(g + i, swiglu8(_mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i)));
    if (i < n) {
        const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n - i)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        _mm256_maskstore_ps(g + i, m, swiglu8(_mm256_maskload_ps(g + i, m), _mm256_maskload_ps(u + i, m)));
    }
}
#endif
