/* plain_avx2.c — f16/bf16 row conversion with AVX2 + F16C. */
#include "codec/codec_impl.h"

#if KVQ_HAVE_X86
#include <immintrin.h>

/* VCVTPS2PH with round-to-nearest-even matches kvq_f32_to_f16 except for NaN
 * payloads, which the reference canonicalizes: fix those lanes up. */
KVQ_TARGET_AVX2 kvq_status kvq_encode_f16_avx2(const kvq_codec *c, const float *x, void *dst) {
    uint8_t *out = dst;
    for (int i = 0; i < c->head_dim; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
        const __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
        if (_mm256_movemask_ps(nan)) {
            const __m128i nan16 = _mm_packs_epi32(_mm256_castsi256_si128(_mm256_castps_si256(nan)),
                                                  _mm256_extracti128_si256(_mm256_castps_si256(nan), 1));
            const __m128i canon = _mm_or_si128(_mm_and_si128(h, _mm_set1_epi16((short)0x8000)),
                                               _mm_set1_epi16(0x7E00));
            h = _mm_blendv_epi8(h, canon, nan16);
        }
        _mm_storeu_si128((__m128i *)(out + 2 * i), h);
    }
    return KVQ_OK;
}

KVQ_TARGET_AVX2 void kvq_decode_f16_avx2(const kvq_codec *c, const void *src, float *y) {
    const uint8_t *in = src;
    for (int i = 0; i < c->head_dim; i += 8)
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(in + 2 * i))));
}

/* Round to nearest even: (u + 0x7FFF + ((u >> 16) & 1)) >> 16, NaN -> quiet. */
KVQ_TARGET_AVX2 kvq_status kvq_encode_bf16_avx2(const kvq_codec *c, const float *x, void *dst) {
    uint8_t *out = dst;
    const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF), inf = _mm256_set1_epi32(0x7F800000);
    for (int i = 0; i < c->head_dim; i += 8) {
        const __m256i u = _mm256_castps_si256(_mm256_loadu_ps(x + i));
        const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
        __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF))), 16);
        const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
        const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(64));
        r = _mm256_blendv_epi8(r, quiet, is_nan);
        /* pack 32 -> 16 bits without saturation: keep the low halves */
        r = _mm256_and_si256(r, _mm256_set1_epi32(0xFFFF));
        const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
        _mm_storeu_si128((__m128i *)(out + 2 * i), packed);
    }
    return KVQ_OK;
}
/* head_dim is a multiple of 32, so a tile is whole 8-lane vectors. */
KVQ_TARGET_AVX2 void kvq_decode_tile_f16_avx2(const kvq_codec *c, const void *src, int n_rows, float *y) {
    const uint8_t *in = src;
    const size_t n = (size_t)n_rows * (size_t)c->head_dim;
    for (size_t i = 0; i < n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(in + 2 * i))));
}

KVQ_TARGET_AVX2 void kvq_decode_tile_bf16_avx2(const kvq_codec *c, const void *src, int n_rows, float *y) {
    const uint8_t *in = src;
    const size_t n = (size_t)n_rows * (size_t)c->head_dim;
    for (size_t i = 0; i < n; i += 8) {
        const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(in + 2 * i)));
        _mm256_storeu_ps(y + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
    }
}
#endif
