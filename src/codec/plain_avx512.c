/* plain_avx512.c — f16/bf16 row conversion with AVX-512. */
#include "codec/codec_impl.h"

#if KVQ_HAVE_X86
#include <immintrin.h>

/* head_dim is a multiple of 32: whole 16-lane vectors only. */
KVQ_TARGET_AVX512 kvq_status kvq_encode_f16_avx512(const kvq_codec *c, const float *x, void *dst) {
    uint8_t *out = dst;
    for (int i = 0; i < c->head_dim; i += 16) {
        const __m512 v = _mm512_loadu_ps(x + i);
        __m256i h = _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
        const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        if (nan) {
            const __m256i canon = _mm256_or_si256(_mm256_and_si256(h, _mm256_set1_epi16((short)0x8000)),
                                                  _mm256_set1_epi16(0x7E00));
            h = _mm256_mask_blend_epi16(nan, h, canon);
        }
        _mm256_storeu_si256((__m256i *)(out + 2 * i), h);
    }
    return KVQ_OK;
}

KVQ_TARGET_AVX512 void kvq_decode_f16_avx512(const kvq_codec *c, const void *src, float *y) {
    const uint8_t *in = src;
    for (int i = 0; i < c->head_dim; i += 16)
        _mm512_storeu_ps(y + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(in + 2 * i))));
}

KVQ_TARGET_AVX512 kvq_status kvq_encode_bf16_avx512(const kvq_codec *c, const float *x, void *dst) {
    uint8_t *out = dst;
    for (int i = 0; i < c->head_dim; i += 16) {
        const __m512i u = _mm512_castps_si512(_mm512_loadu_ps(x + i));
        const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
        __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF))), 16);
        const __mmask16 is_nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF)),
                                                         _mm512_set1_epi32(0x7F800000));
        r = _mm512_mask_or_epi32(r, is_nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(64));
        _mm256_storeu_si256((__m256i *)(out + 2 * i), _mm512_cvtepi32_epi16(r));
    }
    return KVQ_OK;
}
KVQ_TARGET_AVX512 void kvq_decode_tile_f16_avx512(const kvq_codec *c, const void *src, int n_rows, float *y) {
    const uint8_t *in = src;
    const size_t n = (size_t)n_rows * (size_t)c->head_dim;
    for (size_t i = 0; i < n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(in + 2 * i))));
}

KVQ_TARGET_AVX512 void kvq_decode_tile_bf16_avx512(const kvq_codec *c, const void *src, int n_rows, float *y) {
    const uint8_t *in = src;
    const size_t n = (size_t)n_rows * (size_t)c->head_dim;
    for (size_t i = 0; i < n; i += 16) {
        const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(in + 2 * i)));
        _mm512_storeu_ps(y + i, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
    }
}
#endif
