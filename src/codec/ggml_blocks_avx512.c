/* ggml_blocks_avx512.c — ggml block codecs with AVX-512: one block of 32
 * values is two 16-lane vectors. Bit-exact with ggml_blocks.c: the same fp32
 * operations in the same order (separate mul and add, truncating conversion,
 * ggml's first-occurrence max), scales converted by the scalar fp16 code. */
#include "codec/ggml_blocks.h"
#include "common/fp16.h"

#if KVQ_HAVE_X86
#include <immintrin.h>

#define QK KVQ_GGML_QK

/* The first value of largest magnitude (ggml's `if (amax < |v|)` scan); +0
 * when all are zero. */
static inline KVQ_TARGET_AVX512 float first_absmax(const float *x, __m512 v0, __m512 v1) {
    const __m512 a0 = _mm512_abs_ps(v0), a1 = _mm512_abs_ps(v1);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(a0, a1));
    if (amax == 0.0f) return 0.0f;
    const uint32_t hit = _mm512_cmp_ps_mask(a0, _mm512_set1_ps(amax), _CMP_EQ_OQ) |
                         (uint32_t)_mm512_cmp_ps_mask(a1, _mm512_set1_ps(amax), _CMP_EQ_OQ) << 16;
    return x[__builtin_ctz(hit)];
}

/* ggml keeps the first of equal extremes: only the sign of a zero differs. */
static inline KVQ_TARGET_AVX512 float first_equal(const float *x, __m512 v0, __m512 v1, float v) {
    if (v != 0.0f) return v;
    const uint32_t hit = _mm512_cmp_ps_mask(v0, _mm512_setzero_ps(), _CMP_EQ_OQ) |
                         (uint32_t)_mm512_cmp_ps_mask(v1, _mm512_setzero_ps(), _CMP_EQ_OQ) << 16;
    return x[__builtin_ctz(hit)];
}

/* (int8_t)(v * id + offset), then MIN(qmax, .): inputs are >= 0 here. */
static inline KVQ_TARGET_AVX512 __m512i quant_trunc(__m512 v, __m512 id, __m512 offset, int qmax) {
    const __m512i q = _mm512_cvttps_epi32(_mm512_add_ps(_mm512_mul_ps(v, id), offset));
    return _mm512_min_epi32(q, _mm512_set1_epi32(qmax));
}

/* Packs 32 values < 2^bits: low nibbles into qs, bit 4 into qh. */
static inline KVQ_TARGET_AVX512 uint32_t pack_nibbles(__m512i q0, __m512i q1, uint8_t *qs) {
    const __m512i lo = _mm512_set1_epi32(0x0F);
    const __m512i b = _mm512_or_si512(_mm512_and_si512(q0, lo), _mm512_slli_epi32(_mm512_and_si512(q1, lo), 4));
    _mm_storeu_si128((__m128i *)qs, _mm512_cvtepi32_epi8(b));
    const __m512i b4 = _mm512_set1_epi32(0x10);
    return _mm512_test_epi32_mask(q0, b4) | (uint32_t)_mm512_test_epi32_mask(q1, b4) << 16;
}

KVQ_TARGET_AVX512 kvq_status kvq_encode_q8_0_avx512(const kvq_codec *c, const float *x, void *dst) {
    uint8_t *out = dst;
    const int nb = c->head_dim / QK;
    const __m512 half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f);
    /* Scales first: the blocks' reductions are independent and overlap. */
    float ids[KVQ_MAX_HEAD_DIM / QK];
    for (int b = 0; b < nb; b++) {
        const __m512 a = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(x + QK * b)),
                                       _mm512_abs_ps(_mm512_loadu_ps(x + QK * b + 16)));
        const float d = _mm512_reduce_max_ps(a) / 127;
        const uint16_t h = kvq_f32_to_f16(d);
        if (kvq_ggml_f16_is_inf(h)) return KVQ_ERR_RANGE;
        ids[b] = kvq_ggml_inv_scale(d, h);
        kvq_store_u16(out + (2 + QK) * b, h);
    }
    for (int b = 0; b < nb; b++, x += QK, out += 2 + QK) {
        const __m512 id = _mm512_set1_ps(ids[b]);
        for (int k = 0; k < 2; k++) {
            /* roundf: truncate, then step away from zero when the exact
             * remainder is at least one half */
            const __m512 s = _mm512_mul_ps(_mm512_loadu_ps(x + 16 * k), id);
            __m512 t = _mm512_roundscale_ps(s, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
            const __mmask16 up = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(s, t)), half, _CMP_GE_OQ);
            const __m512 step = _mm512_or_ps(one, _mm512_and_ps(s, _mm512_set1_ps(-0.0f)));
            t = _mm512_mask_add_ps(t, up, t, step);
            _mm_storeu_si128((__m128i *)(out + 2 + 16 * k), _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(t)));
        }
    }
    return KVQ_OK;
}

/* Both encoders compute every block's scales first (independent
 * reductions that overlap), then quantize. */
static inline KVQ_TARGET_AVX512 kvq_status encode_sym(const kvq_codec *c, const float *x, uint8_t *out, int bits) {
    const int half = 1 << (bits - 1), qmax = (1 << bits) - 1, nb = c->head_dim / QK;
    const size_t bb = kvq_ggml_block_bytes(bits == 4 ? KVQ_GGML_Q4_0 : KVQ_GGML_Q5_0);
    const __m512 offset = _mm512_set1_ps((float)half + 0.5f);
    float ids[KVQ_MAX_HEAD_DIM / QK];
    for (int b = 0; b < nb; b++) {
        const float *xb = x + QK * b;
        const float d = first_absmax(xb, _mm512_loadu_ps(xb), _mm512_loadu_ps(xb + 16)) / -half;
        const uint16_t h = kvq_f32_to_f16(d);
        if (kvq_ggml_f16_is_inf(h)) return KVQ_ERR_RANGE;
        ids[b] = kvq_ggml_inv_scale(d, h);
        kvq_store_u16(out + bb * b, h);
    }
    for (int b = 0; b < nb; b++, x += QK, out += bb) {
        const __m512 id = _mm512_set1_ps(ids[b]);
        const uint32_t qh = pack_nibbles(quant_trunc(_mm512_loadu_ps(x), id, offset, qmax),
                                         quant_trunc(_mm512_loadu_ps(x + 16), id, offset, qmax), out + bb - QK / 2);
        if (bits == 5) memcpy(out + 2, &qh, 4);
    }
    return KVQ_OK;
}

static inline KVQ_TARGET_AVX512 kvq_status encode_asym(const kvq_codec *c, const float *x, uint8_t *out, int bits) {
    const int qmax = (1 << bits) - 1, nb = c->head_dim / QK;
    const size_t bb = kvq_ggml_block_bytes(bits == 4 ? KVQ_GGML_Q4_1 : KVQ_GGML_Q5_1);
    const __m512 offset = _mm512_set1_ps(0.5f);
    float ids[KVQ_MAX_HEAD_DIM / QK], mins[KVQ_MAX_HEAD_DIM / QK];
    for (int b = 0; b < nb; b++) {
        const float *xb = x + QK * b;
        const __m512 v0 = _mm512_loadu_ps(xb), v1 = _mm512_loadu_ps(xb + 16);
        const float min = first_equal(xb, v0, v1, _mm512_reduce_min_ps(_mm512_min_ps(v0, v1)));
        const float max = first_equal(xb, v0, v1, _mm512_reduce_max_ps(_mm512_max_ps(v0, v1)));
        const float d = (max - min) / qmax;
        const uint16_t h = kvq_f32_to_f16(d), hm = kvq_f32_to_f16(min);
        if (kvq_ggml_f16_is_inf(h) || kvq_ggml_f16_is_inf(hm)) return KVQ_ERR_RANGE;
        ids[b] = kvq_ggml_inv_scale(d, h);
        mins[b] = min;
        kvq_store_u16(out + bb * b, h);
        kvq_store_u16(out + bb * b + 2, hm);
    }
    for (int b = 0; b < nb; b++, x += QK, out += bb) {
        const __m512 id = _mm512_set1_ps(ids[b]), vmin = _mm512_set1_ps(mins[b]);
        const uint32_t qh = pack_nibbles(quant_trunc(_mm512_sub_ps(_mm512_loadu_ps(x), vmin), id, offset, qmax),
                                         quant_trunc(_mm512_sub_ps(_mm512_loadu_ps(x + 16), vmin), id, offset, qmax),
                                         out + bb - QK / 2);
        if (bits == 5) memcpy(out + 4, &qh, 4);
    }
    return KVQ_OK;
}

KVQ_TARGET_AVX512 kvq_status kvq_encode_q4_0_avx512(const kvq_codec *c, const float *x, void *dst) {
    return encode_sym(c, x, dst, 4);
}
KVQ_TARGET_AVX512 kvq_status kvq_encode_q5_0_avx512(const kvq_codec *c, const float *x, void *dst) {
    return encode_sym(c, x, dst, 5);
}
KVQ_TARGET_AVX512 kvq_status kvq_encode_q4_1_avx512(const kvq_codec *c, const float *x, void *dst) {
    return encode_asym(c, x, dst, 4);
}
KVQ_TARGET_AVX512 kvq_status kvq_encode_q5_1_avx512(const kvq_codec *c, const float *x, void *dst) {
    return encode_asym(c, x, dst, 5);
}

/* ggml_blocks.h's iq4_nl buckets in registers: midpoints, bases and the
 * codebook value at each base, for buckets 0..15 and 16..31. */
typedef struct {
    __m512 mid_lo, mid_hi, val_lo, val_hi;
    __m512i base_lo, base_hi;
} iq4nl_buckets;

static inline KVQ_TARGET_AVX512 iq4nl_buckets iq4nl_buckets_load(void) {
    const __m512 kv = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)kvq_iq4nl_values)));
    iq4nl_buckets bk;
    bk.mid_lo = _mm512_loadu_ps(kvq_iq4nl_bucket_mid);
    bk.mid_hi = _mm512_loadu_ps(kvq_iq4nl_bucket_mid + 16);
    bk.base_lo = _mm512_loadu_si512(kvq_iq4nl_bucket_base);
    bk.base_hi = _mm512_loadu_si512(kvq_iq4nl_bucket_base + 16);
    bk.val_lo = _mm512_permutexvar_ps(bk.base_lo, kv);
    bk.val_hi = _mm512_permutexvar_ps(bk.base_hi, kv);
    return bk;
}

/* Per lane, the bucket b of x plus one where x reaches b's midpoint: a
 * bucket whose base is ggml's best_index_int8 of x, since bucket b + 1's
 * base counts b's midpoint (bucket 31 has none). With clamp 0 every |x| must
 * be < 144, which the trial scales guarantee; the final quantization's scale
 * is a least-squares fit with no such proof (its x stayed within 135
 * wherever we looked), so it clamps the bucket to 0..31 rather than let
 * vpermt2 wrap it. */
static inline KVQ_TARGET_AVX512 __m512i iq4nl_index_bucket(__m512 x, const iq4nl_buckets *bk, int clamp) {
    __m512 t = _mm512_fmadd_ps(x, _mm512_set1_ps(1.0f / KVQ_IQ4NL_BUCKET_WIDTH),
                               _mm512_set1_ps(-KVQ_IQ4NL_BUCKET_LO / KVQ_IQ4NL_BUCKET_WIDTH));
    if (clamp) t = _mm512_max_ps(_mm512_min_ps(t, _mm512_set1_ps(31.5f)), _mm512_setzero_ps());
    const __m512i b = _mm512_cvt_roundps_epi32(t, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    const __mmask16 up = _mm512_cmp_ps_mask(x, _mm512_permutex2var_ps(bk->mid_lo, b, bk->mid_hi), _CMP_GE_OQ);
    return _mm512_mask_add_epi32(b, up, b, _mm512_set1_epi32(1));
}

/* kvq_iq4nl_trial_ids in lanes: the same IEEE divisions. */
static inline KVQ_TARGET_AVX512 __m512 iq4nl_trial_ids(float max) {
    const __m512i k = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512 itry = _mm512_cvtepi32_ps(_mm512_add_epi32(k, _mm512_set1_epi32(kvq_iq4nl_values[0] - 8)));
    const float d0 = -max / kvq_iq4nl_values[0];
    return _mm512_mask_mov_ps(_mm512_div_ps(itry, _mm512_set1_ps(max)), 1, _mm512_set1_ps(1 / d0));
}

/* kvq_iq4nl_pick_scale in lanes, without branches. The scalar scan keeps
 * trial cur until the first later trial k that beats it (sumq2[k] > 0 and
 * sumqx[k]^2 > best[cur] sumq2[k]), then goes on from k: so it ends at
 * next(next(...next(0))), where next(j) is the first k > j that beats j, or
 * j itself if none does, applied as often as the chain is long (at most 15
 * times). next is built in lanes (k downwards, so the first k wins) and
 * squared four times (next^16); every comparison is the scalar code's own
 * (same IEEE operations), so it picks the same trial. */
static inline KVQ_TARGET_AVX512 float iq4nl_pick_scale(__m512 sumqx, __m512 sumq2) {
    const __m512 d = _mm512_div_ps(sumqx, sumq2);
    const __m512 best = _mm512_mul_ps(d, sumqx);
    float sq[16], q2[16];
    _mm512_storeu_ps(sq, _mm512_mul_ps(sumqx, sumqx));
    _mm512_storeu_ps(q2, sumq2);
    const uint32_t valid = _mm512_cmp_ps_mask(sumq2, _mm512_setzero_ps(), _CMP_GT_OQ);
    __m512i next = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    for (int k = 15; k >= 1; k--) {
        const __mmask16 earlier = (__mmask16)((valid >> k & 1) ? (1u << k) - 1 : 0);
        const __mmask16 beaten =
            _mm512_mask_cmp_ps_mask(earlier, _mm512_set1_ps(sq[k]), _mm512_mul_ps(best, _mm512_set1_ps(q2[k])), _CMP_GT_OQ);
        next = _mm512_mask_mov_epi32(next, beaten, _mm512_set1_epi32(k));
    }
    for (int i = 0; i < 4; i++) next = _mm512_permutexvar_epi32(next, next);
    return _mm512_cvtss_f32(_mm512_permutexvar_ps(next, d));
}

/* ggml's search for blocks xa and xb (32 values each, first largest values
 * maxa, maxb): the scale of the trial each picks. The 16 lanes run ggml's 16
 * trials (initial + itry -7..7) side by side, each summing over j in ggml's
 * order. Two blocks at once: one block's search is a chain of dependent
 * steps (divisions, 32 ordered sums, the pick) that leaves the vector ports
 * idle about half the time; the other block's fills them. */
static inline KVQ_TARGET_AVX512 void iq4nl_search2(const float *xa, const float *xb, float maxa, float maxb,
                                                   const iq4nl_buckets *bk, float *da, float *db) {
    const __m512 ida = iq4nl_trial_ids(maxa), idb = iq4nl_trial_ids(maxb);
    float wa[QK], wb[QK]; /* ggml's weights x^2, broadcast from memory below */
    for (int h = 0; h < QK; h += 16) {
        const __m512 va = _mm512_loadu_ps(xa + h), vb = _mm512_loadu_ps(xb + h);
        _mm512_storeu_ps(wa + h, _mm512_mul_ps(va, va));
        _mm512_storeu_ps(wb + h, _mm512_mul_ps(vb, vb));
    }
    __m512 sqxa = _mm512_setzero_ps(), sq2a = _mm512_setzero_ps();
    __m512 sqxb = _mm512_setzero_ps(), sq2b = _mm512_setzero_ps();
    for (int j = 0; j < QK; j++) {
        const __m512 xaj = _mm512_set1_ps(xa[j]), xbj = _mm512_set1_ps(xb[j]);
        const __m512i ba = iq4nl_index_bucket(_mm512_mul_ps(ida, xaj), bk, 0);
        const __m512i bb = iq4nl_index_bucket(_mm512_mul_ps(idb, xbj), bk, 0);
        const __m512 qa = _mm512_permutex2var_ps(bk->val_lo, ba, bk->val_hi);
        const __m512 qb = _mm512_permutex2var_ps(bk->val_lo, bb, bk->val_hi);
        const __m512 wqa = _mm512_mul_ps(_mm512_set1_ps(wa[j]), qa), wqb = _mm512_mul_ps(_mm512_set1_ps(wb[j]), qb);
        sqxa = _mm512_add_ps(sqxa, _mm512_mul_ps(wqa, xaj));
        sq2a = _mm512_add_ps(sq2a, _mm512_mul_ps(wqa, qa));
        sqxb = _mm512_add_ps(sqxb, _mm512_mul_ps(wqb, xbj));
        sq2b = _mm512_add_ps(sq2b, _mm512_mul_ps(wqb, qb));
    }
    *da = iq4nl_pick_scale(sqxa, sq2a);
    *db = iq4nl_pick_scale(sqxb, sq2b);
}

/* Every block's max first (a row beyond the range is refused before any
 * search), then the searches two blocks at a time (an odd last one beside
 * itself) over the blocks at or above ggml's EPS (the others get scale 0,
 * as in ggml, and no search: a zero max would make it divide by zero),
 * then the codes. */
KVQ_TARGET_AVX512 kvq_status kvq_encode_iq4_nl_avx512(const kvq_codec *c, const float *x, void *dst) {
    uint8_t *out = dst;
    const int nb = c->head_dim / QK;
    const iq4nl_buckets bk = iq4nl_buckets_load();
    float max[KVQ_MAX_HEAD_DIM / QK], d[KVQ_MAX_HEAD_DIM / QK];
    int search[KVQ_MAX_HEAD_DIM / QK], n_search = 0;
    for (int b = 0; b < nb; b++) {
        const float *xb = x + QK * b;
        max[b] = first_absmax(xb, _mm512_loadu_ps(xb), _mm512_loadu_ps(xb + 16));
        if (__builtin_fabsf(max[b]) >= KVQ_IQ4NL_RANGE) return KVQ_ERR_RANGE;
        d[b] = 0.0f;
        if (__builtin_fabsf(max[b]) >= KVQ_IQ4NL_EPS) search[n_search++] = b;
    }
    for (int i = 0; i < n_search; i += 2) {
        const int b = search[i], b2 = search[i + 1 < n_search ? i + 1 : i];
        float d2;
        iq4nl_search2(x + QK * b, x + QK * b2, max[b], max[b2], &bk, &d[b], &d2);
        d[b2] = d2;
    }
    for (int b = 0; b < nb; b++, x += QK, out += 2 + QK / 2) {
        const uint16_t h = kvq_f32_to_f16(d[b]);
        if (kvq_ggml_f16_is_inf(h)) return KVQ_ERR_RANGE;
        const __m512 id = _mm512_set1_ps(kvq_ggml_inv_scale(d[b], h));
        kvq_store_u16(out, h);
        const __m512i b0 = iq4nl_index_bucket(_mm512_mul_ps(id, _mm512_loadu_ps(x)), &bk, 1);
        const __m512i b1 = iq4nl_index_bucket(_mm512_mul_ps(id, _mm512_loadu_ps(x + 16)), &bk, 1);
        pack_nibbles(_mm512_permutex2var_epi32(bk.base_lo, b0, bk.base_hi),
                     _mm512_permutex2var_epi32(bk.base_lo, b1, bk.base_hi), out + 2);
    }
    return KVQ_OK;
}

/* ------------------------------------------------------------------ decode */

KVQ_TARGET_AVX512 void kvq_decode_q8_0_avx512(const kvq_codec *c, const void *src, float *y) {
    const uint8_t *in = src;
    for (int b = 0; b < c->head_dim / QK; b++, in += 2 + QK, y += QK) {
        const __m512 d = _mm512_set1_ps(kvq_f16_to_f32(kvq_load_u16(in)));
        for (int k = 0; k < 2; k++) {
            const __m512i q = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(in + 2 + 16 * k)));
            _mm512_storeu_ps(y + 16 * k, _mm512_mul_ps(_mm512_cvtepi32_ps(q), d));
        }
    }
}

/* The two halves of a block as integers 0..2^bits-1: low nibbles of qs
 * with bit 4 from qh. */
static inline KVQ_TARGET_AVX512 void unpack(const uint8_t *qs, uint32_t qh, __m512i *q0, __m512i *q1) {
    const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)qs));
    const __m512i bit4 = _mm512_set1_epi32(0x10);
    *q0 = _mm512_and_si512(b, _mm512_set1_epi32(0x0F));
    *q1 = _mm512_srli_epi32(b, 4);
    *q0 = _mm512_mask_or_epi32(*q0, (__mmask16)qh, *q0, bit4);
    *q1 = _mm512_mask_or_epi32(*q1, (__mmask16)(qh >> 16), *q1, bit4);
}

static inline KVQ_TARGET_AVX512 void decode_sym(const kvq_codec *c, const uint8_t *in, float *y, int bits) {
    const size_t bb = kvq_ggml_block_bytes(bits == 4 ? KVQ_GGML_Q4_0 : KVQ_GGML_Q5_0);
    const __m512i half = _mm512_set1_epi32(1 << (bits - 1));
    for (int b = 0; b < c->head_dim / QK; b++, in += bb, y += QK) {
        const __m512 d = _mm512_set1_ps(kvq_f16_to_f32(kvq_load_u16(in)));
        uint32_t qh = 0;
        if (bits == 5) memcpy(&qh, in + 2, 4);
        __m512i q0, q1;
        unpack(in + bb - QK / 2, qh, &q0, &q1);
        _mm512_storeu_ps(y, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(q0, half)), d));
        _mm512_storeu_ps(y + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(q1, half)), d));
    }
}

static inline KVQ_TARGET_AVX512 void decode_asym(const kvq_codec *c, const uint8_t *in, float *y, int bits) {
    const size_t bb = kvq_ggml_block_bytes(bits == 4 ? KVQ_GGML_Q4_1 : KVQ_GGML_Q5_1);
    for (int b = 0; b < c->head_dim / QK; b++, in += bb, y += QK) {
        const __m512 d = _mm512_set1_ps(kvq_f16_to_f32(kvq_load_u16(in)));
        const __m512 m = _mm512_set1_ps(kvq_f16_to_f32(kvq_load_u16(in + 2)));
        uint32_t qh = 0;
        if (bits == 5) memcpy(&qh, in + 4, 4);
        __m512i q0, q1;
        unpack(in + bb - QK / 2, qh, &q0, &q1);
        _mm512_storeu_ps(y, _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(q0), d), m));
        _mm512_storeu_ps(y + 16, _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(q1), d), m));
    }
}

KVQ_TARGET_AVX512 void kvq_decode_q4_0_avx512(const kvq_codec *c, const void *src, float *y) {
    decode_sym(c, src, y, 4);
}
KVQ_TARGET_AVX512 void kvq_decode_q5_0_avx512(const kvq_codec *c, const void *src, float *y) {
    decode_sym(c, src, y, 5);
}
KVQ_TARGET_AVX512 void kvq_decode_q4_1_avx512(const kvq_codec *c, const void *src, float *y) {
    decode_asym(c, src, y, 4);
}
KVQ_TARGET_AVX512 void kvq_decode_q5_1_avx512(const kvq_codec *c, const void *src, float *y) {
    decode_asym(c, src, y, 5);
}

KVQ_TARGET_AVX512 void kvq_decode_iq4_nl_avx512(const kvq_codec *c, const void *src, float *y) {
    const uint8_t *in = src;
    const __m512 kv = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)kvq_iq4nl_values)));
    for (int b = 0; b < c->head_dim / QK; b++, in += 2 + QK / 2, y += QK) {
        const __m512 d = _mm512_set1_ps(kvq_f16_to_f32(kvq_load_u16(in)));
        __m512i q0, q1;
        unpack(in + 2, 0, &q0, &q1);
        _mm512_storeu_ps(y, _mm512_mul_ps(d, _mm512_permutexvar_ps(q0, kv)));
        _mm512_storeu_ps(y + 16, _mm512_mul_ps(d, _mm512_permutexvar_ps(q1, kv)));
    }
}
#endif
