/* qjl_avx512.c — the QJL residual sketch with AVX-512: 16 rows of S at once
 * for the signs, 16 elements of y at once for the estimate. Products and sums
 * are separate (no FMA) and run in the reference's order, so the results are
 * the reference's bits. */
#include "codec/codec_impl.h"

#if KVQ_HAVE_X86
#include <immintrin.h>

/* Four independent 16-row sums per pass: one chain would wait on the add
 * latency at every step. */
KVQ_TARGET_AVX512 void kvq_qjl_signs_avx512(const kvq_codec *c, const float *r, uint8_t *bits) {
    const int d = c->head_dim;
    for (int i0 = 0; i0 < d; i0 += 64) {
        const int nv = d - i0 < 64 ? (d - i0) / 16 : 4;
        __m512 dot[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
        for (int j = 0; j < d; j++) {
            const __m512 rj = _mm512_set1_ps(r[j]);
            const float *s = c->qjl_sketch_t + (size_t)j * d + i0;
            for (int v = 0; v < nv; v++) dot[v] = _mm512_add_ps(dot[v], _mm512_mul_ps(_mm512_loadu_ps(s + 16 * v), rj));
        }
        for (int v = 0; v < nv; v++) {
            const __mmask16 ge = _mm512_cmp_ps_mask(dot[v], _mm512_setzero_ps(), _CMP_GE_OQ);
            bits[(i0 + 16 * v) / 8] = (uint8_t)ge;
            bits[(i0 + 16 * v) / 8 + 1] = (uint8_t)(ge >> 8);
        }
    }
}

KVQ_TARGET_AVX512 void kvq_qjl_add_avx512(const kvq_codec *c, const uint8_t *bits, float k, float *y) {
    const int d = c->head_dim;
    for (int j0 = 0; j0 < d; j0 += 64) {
        const int nv = d - j0 < 64 ? (d - j0) / 16 : 4;
        __m512 acc[4];
        for (int v = 0; v < nv; v++) acc[v] = _mm512_loadu_ps(y + j0 + 16 * v);
        for (int i = 0; i < d; i++) {
            const __m512 sign = _mm512_set1_ps((bits[i / 8] >> (i % 8)) & 1 ? k : -k);
            const float *s = c->qjl_sketch + (size_t)i * d + j0;
            for (int v = 0; v < nv; v++) acc[v] = _mm512_add_ps(acc[v], _mm512_mul_ps(sign, _mm512_loadu_ps(s + 16 * v)));
        }
        for (int v = 0; v < nv; v++) _mm512_storeu_ps(y + j0 + 16 * v, acc[v]);
    }
}
#endif
