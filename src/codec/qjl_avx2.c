/* qjl_avx2.c — the QJL residual sketch with AVX2: 8 rows of S at once for
 * the signs, 8 elements of y at once for the estimate. Products and sums are
 * separate (no FMA) and run in the reference's order, so the results are the
 * reference's bits. */
#include "codec/codec_impl.h"

#if KVQ_HAVE_X86
#include <immintrin.h>

/* Four independent 8-row sums per pass: one chain would wait on the add
 * latency at every step. */
KVQ_TARGET_AVX2 void kvq_qjl_signs_avx2(const kvq_codec *c, const float *r, uint8_t *bits) {
    const int d = c->head_dim;
    for (int i0 = 0; i0 < d; i0 += 32) {
        __m256 dot[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
        for (int j = 0; j < d; j++) {
            const __m256 rj = _mm256_set1_ps(r[j]);
            const float *s = c->qjl_sketch_t + (size_t)j * d + i0;
            for (int v = 0; v < 4; v++) dot[v] = _mm256_add_ps(dot[v], _mm256_mul_ps(_mm256_loadu_ps(s + 8 * v), rj));
        }
        for (int v = 0; v < 4; v++)
            bits[i0 / 8 + v] = (uint8_t)_mm256_movemask_ps(_mm256_cmp_ps(dot[v], _mm256_setzero_ps(), _CMP_GE_OQ));
    }
}

KVQ_TARGET_AVX2 void kvq_qjl_add_avx2(const kvq_codec *c, const uint8_t *bits, float k, float *y) {
    const int d = c->head_dim;
    for (int j0 = 0; j0 < d; j0 += 32) {
        __m256 acc[4];
        for (int v = 0; v < 4; v++) acc[v] = _mm256_loadu_ps(y + j0 + 8 * v);
        for (int i = 0; i < d; i++) {
            const __m256 sign = _mm256_set1_ps((bits[i / 8] >> (i % 8)) & 1 ? k : -k);
            const float *s = c->qjl_sketch + (size_t)i * d + j0;
            for (int v = 0; v < 4; v++) acc[v] = _mm256_add_ps(acc[v], _mm256_mul_ps(sign, _mm256_loadu_ps(s + 8 * v)));
        }
        for (int v = 0; v < 4; v++) _mm256_storeu_ps(y + j0 + 8 * v, acc[v]);
    }
}
#endif
