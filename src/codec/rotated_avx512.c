/* rotated_avx512.c — rotated codec kernels with AVX-512: the reference's
 * arithmetic lane for lane (rotated.h), so the bytes are the same. */
#include <float.h>
#include <math.h>

#include "codec/rotated.h"
#include "common/fp16.h"

#if KVQ_HAVE_X86
#include <immintrin.h>

KVQ_TARGET_AVX512 static float reduce_avx512(__m512 v) {
    float p[16];
    _mm512_storeu_ps(p, v);
    return kvq_rot_reduce16(p);
}

KVQ_TARGET_AVX512 static KVQ_ALWAYS_INLINE kvq_status encode_bits(const kvq_codec *c, const float *x, void *dst,
                                                                    const int b) {
    const kvq_rot_state *st = c->state;
    const int d = c->head_dim;
    __m512 acc = _mm512_setzero_ps();
    for (int i = 0; i < d; i += 16) {
        const __m512 v = _mm512_loadu_ps(x + i);
        acc = _mm512_add_ps(acc, _mm512_mul_ps(v, v));
    }
    const float n2 = reduce_avx512(acc);
    if (!(n2 <= FLT_MAX)) return KVQ_ERR_RANGE;
    if (n2 < KVQ_ROT_TINY) {
        kvq_rot_zero_row(c, dst);
        return KVQ_OK;
    }
    float y[KVQ_MAX_HEAD_DIM];     /* (d) R x */
    uint8_t idx[KVQ_MAX_HEAD_DIM]; /* (d) codebook indices */
    kvq_rotation_apply_avx512(&st->rot, 0, x, y);
    const __m512 inv = _mm512_set1_ps(st->sqrt_d / sqrtf(n2));
    const __m512 thr = _mm512_loadu_ps(st->threshold), cen = _mm512_loadu_ps(st->centroid);
    __m512 ayc = _mm512_setzero_ps(), acc2 = _mm512_setzero_ps();
    for (int i = 0; i < d; i += 16) {
        const __m512 yv = _mm512_loadu_ps(y + i);
        const __m512 u = _mm512_mul_ps(yv, inv);
        /* Branchless binary search: q ends as the count of thresholds < u. */
        __m512i q = _mm512_setzero_si512();
        for (int half = 1 << (b - 1); half; half >>= 1) {
            const __m512 t = _mm512_permutexvar_ps(_mm512_add_epi32(q, _mm512_set1_epi32(half - 1)), thr);
            q = _mm512_mask_add_epi32(q, _mm512_cmp_ps_mask(u, t, _CMP_GT_OQ), q, _mm512_set1_epi32(half));
        }
        const __m512 cv = _mm512_permutexvar_ps(q, cen);
        ayc = _mm512_add_ps(ayc, _mm512_mul_ps(yv, cv));
        acc2 = _mm512_add_ps(acc2, _mm512_mul_ps(cv, cv));
        _mm_storeu_si128((__m128i *)(idx + i), _mm512_cvtepi32_epi8(q));
    }
    return kvq_rot_finish_bits(c, idx, reduce_avx512(ayc), reduce_avx512(acc2), dst, b);
}

KVQ_TARGET_AVX512 kvq_status kvq_rot_encode_avx512(const kvq_codec *c, const float *x, void *dst) {
    switch (((const kvq_rot_state *)c->state)->bits) {
    case 2: return encode_bits(c, x, dst, 2);
    case 3: return encode_bits(c, x, dst, 3);
    default: return encode_bits(c, x, dst, 4);
    }
}

/* 16 indices of b bits (2b <= 8 bytes) per step: the 2b bytes are one
 * 64-bit word w broadcast to every lane; 64-bit lane k shifts it right by
 * 2k b (index 2k lands in its low dword) and by (2k + 1) b then left by 32
 * (index 2k + 1 lands in its high dword). vpermps reads the low 4 bits of
 * each dword, so the codebook is replicated to 16 entries (entry j =
 * centroid j mod 2^b) and no masking is needed; it is pre-multiplied by the
 * row's scale, which is the reference's s * centroid product exactly. */
KVQ_TARGET_AVX512 static KVQ_ALWAYS_INLINE void decode_rows(const kvq_codec *c, const uint8_t *in, int n_rows,
                                                             float *y, const int b) {
    const kvq_rot_state *st = c->state;
    const int d = c->head_dim;
    const __m512 cen = _mm512_permutexvar_ps(_mm512_and_si512(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5,
                                                                               4, 3, 2, 1, 0),
                                                              _mm512_set1_epi32((1 << b) - 1)),
                                             _mm512_loadu_ps(st->centroid));
    const __m512i even_shift = _mm512_mullo_epi64(_mm512_set_epi64(14, 12, 10, 8, 6, 4, 2, 0), _mm512_set1_epi64(b));
    const __m512i odd_shift = _mm512_add_epi64(even_shift, _mm512_set1_epi64(b));
    const __mmask16 bytes = (__mmask16)((1u << (2 * b)) - 1u);
    for (int r = 0; r < n_rows; r++, in += c->row_bytes, y += d) {
        const __m512 cs = _mm512_mul_ps(_mm512_set1_ps(kvq_f16_to_f32(kvq_load_u16(in))), cen);
        const uint8_t *p = in + 2;
        for (int i = 0; i < d; i += 16, p += 2 * b) {
            const __m512i w = _mm512_broadcastq_epi64(_mm_maskz_loadu_epi8(bytes, p));
            const __m512i lo = _mm512_srlv_epi64(w, even_shift);
            const __m512i hi = _mm512_slli_epi64(_mm512_srlv_epi64(w, odd_shift), 32);
            _mm512_storeu_ps(y + i, _mm512_permutexvar_ps(_mm512_mask_blend_epi32(0xAAAA, lo, hi), cs));
        }
    }
}

KVQ_TARGET_AVX512 void kvq_rot_decode_domain_avx512(const kvq_codec *c, const void *src, float *y) {
    kvq_rot_decode_tile_avx512(c, src, 1, y);
}

KVQ_TARGET_AVX512 void kvq_rot_decode_tile_avx512(const kvq_codec *c, const void *src, int n_rows, float *y) {
    switch (((const kvq_rot_state *)c->state)->bits) {
    case 2: decode_rows(c, src, n_rows, y, 2); break;
    case 3: decode_rows(c, src, n_rows, y, 3); break;
    default: decode_rows(c, src, n_rows, y, 4); break;
    }
}
#endif
