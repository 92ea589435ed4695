/* rotated_avx2.c — rotated codec encode and decode with AVX2: the
 * reference's arithmetic lane for lane (rotated.h; lanes 0-7 and 8-15 of the
 * 16 partial sums are two vectors), so the bytes are the same. */
#include <float.h>
#include <math.h>

#include "codec/rotated.h"
#include "common/fp16.h"

#if KVQ_HAVE_X86
#include <immintrin.h>

KVQ_TARGET_AVX2 static float reduce_avx2(__m256 lo, __m256 hi) {
    float p[16];
    _mm256_storeu_ps(p, lo);
    _mm256_storeu_ps(p + 8, hi);
    return kvq_rot_reduce16(p);
}

/* A 16-entry table lookup: two 8-entry permutes, bit 3 of q picks. */
KVQ_TARGET_AVX2 static __m256 lut16(__m256 lo, __m256 hi, __m256i q) {
    return _mm256_blendv_ps(_mm256_permutevar8x32_ps(lo, q), _mm256_permutevar8x32_ps(hi, q),
                            _mm256_castsi256_ps(_mm256_slli_epi32(q, 28)));
}

KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE kvq_status encode_bits(const kvq_codec *c, const float *x, void *dst,
                                                                  const int b) {
    const kvq_rot_state *st = c->state;
    const int d = c->head_dim;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    for (int i = 0; i < d; i += 16) {
        const __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
        a0 = _mm256_add_ps(a0, _mm256_mul_ps(v0, v0));
        a1 = _mm256_add_ps(a1, _mm256_mul_ps(v1, v1));
    }
    const float n2 = reduce_avx2(a0, a1);
    if (!(n2 <= FLT_MAX)) return KVQ_ERR_RANGE;
    if (n2 < KVQ_ROT_TINY) {
        kvq_rot_zero_row(c, dst);
        return KVQ_OK;
    }
    float y[KVQ_MAX_HEAD_DIM];     /* (d) R x */
    uint8_t idx[KVQ_MAX_HEAD_DIM]; /* (d) codebook indices */
    kvq_rotation_apply_avx2(&st->rot, 0, x, y);
    const __m256 inv = _mm256_set1_ps(st->sqrt_d / sqrtf(n2));
    const __m256 t_lo = _mm256_loadu_ps(st->threshold), t_hi = _mm256_loadu_ps(st->threshold + 8);
    const __m256 c_lo = _mm256_loadu_ps(st->centroid), c_hi = _mm256_loadu_ps(st->centroid + 8);
    __m256 yc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()}, cc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int i = 0; i < d; i += 8) {
        const int lane = (i / 8) & 1;
        const __m256 yv = _mm256_loadu_ps(y + i);
        const __m256 u = _mm256_mul_ps(yv, inv);
        /* Branchless binary search: q ends as the count of thresholds < u. */
        __m256i q = _mm256_setzero_si256();
        for (int half = 1 << (b - 1); half; half >>= 1) {
            const __m256 t = lut16(t_lo, t_hi, _mm256_add_epi32(q, _mm256_set1_epi32(half - 1)));
            const __m256i gt = _mm256_castps_si256(_mm256_cmp_ps(u, t, _CMP_GT_OQ));
            q = _mm256_add_epi32(q, _mm256_and_si256(gt, _mm256_set1_epi32(half)));
        }
        const __m256 cv = lut16(c_lo, c_hi, q);
        yc[lane] = _mm256_add_ps(yc[lane], _mm256_mul_ps(yv, cv));
        cc[lane] = _mm256_add_ps(cc[lane], _mm256_mul_ps(cv, cv));
        const __m128i q16 = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
        _mm_storel_epi64((__m128i *)(idx + i), _mm_packus_epi16(q16, q16));
    }
    return kvq_rot_finish_bits(c, idx, reduce_avx2(yc[0], yc[1]), reduce_avx2(cc[0], cc[1]), dst, b);
}

KVQ_TARGET_AVX2 kvq_status kvq_rot_encode_avx2(const kvq_codec *c, const float *x, void *dst) {
    switch (((const kvq_rot_state *)c->state)->bits) {
    case 2: return encode_bits(c, x, dst, 2);
    case 3: return encode_bits(c, x, dst, 3);
    default: return encode_bits(c, x, dst, 4);
    }
}

/* 8 indices of b bits (b bytes) per step: the bytes as one word w in every
 * lane, lane k shifted right by k b and masked. The codebook is
 * pre-multiplied by the row's scale, the reference's s * centroid product
 * exactly. Without this (the scalar reference) the AVX2 path's attention
 * over turbo3 ran at 0.14x f16 (`KVQ_ISA=avx2 build/kvq attn-bench`). */
KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE void decode_rows(const kvq_codec *c, const uint8_t *in, int n_rows,
                                                           float *y, const int b) {
    const kvq_rot_state *st = c->state;
    const int d = c->head_dim;
    const __m256 cen_lo = _mm256_loadu_ps(st->centroid), cen_hi = _mm256_loadu_ps(st->centroid + 8);
    const __m256i shift = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(b));
    const __m256i mask = _mm256_set1_epi32((1 << b) - 1);
    for (int r = 0; r < n_rows; r++, in += c->row_bytes, y += d) {
        const __m256 s = _mm256_set1_ps(_cvtsh_ss(kvq_load_u16(in))); /* F16C: exact, as the scalar conversion */
        const __m256 lo = _mm256_mul_ps(s, cen_lo), hi = _mm256_mul_ps(s, cen_hi);
        const uint8_t *p = in + 2;
        for (int i = 0; i < d; i += 8, p += b) {
            /* b bytes (the row's last group ends there), assembled in
             * registers: a memcpy of 3 went through the stack and stalled
             * the broadcast on store forwarding (3x slower). */
            uint32_t w = kvq_load_u16(p);
            if (b == 3) w |= (uint32_t)p[2] << 16;
            if (b == 4) w |= (uint32_t)kvq_load_u16(p + 2) << 16;
            const __m256i q = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)w), shift), mask);
            _mm256_storeu_ps(y + i, b == 4 ? lut16(lo, hi, q) : _mm256_permutevar8x32_ps(lo, q));
        }
    }
}

KVQ_TARGET_AVX2 void kvq_rot_decode_tile_avx2(const kvq_codec *c, const void *src, int n_rows, float *y) {
    switch (((const kvq_rot_state *)c->state)->bits) {
    case 2: decode_rows(c, src, n_rows, y, 2); break;
    case 3: decode_rows(c, src, n_rows, y, 3); break;
    default: decode_rows(c, src, n_rows, y, 4); break;
    }
}

KVQ_TARGET_AVX2 void kvq_rot_decode_domain_avx2(const kvq_codec *c, const void *src, float *y) {
    kvq_rot_decode_tile_avx2(c, src, 1, y);
}
#endif
