/* ggml_blocks_avx2.c — ggml block codecs with AVX2: one block of 32 values is
 * four 8-lane vectors. Bit-exact with ggml_blocks.c: the same fp32 operations
 * in the same order (separate mul and add, truncating conversion, ggml's
 * first-occurrence max), scales converted by the scalar fp16 code. */
#include "codec/ggml_blocks.h"
#include "common/fp16.h"

#if KVQ_HAVE_X86
#include <immintrin.h>

#define QK KVQ_GGML_QK

static inline KVQ_TARGET_AVX2 float hmax(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}

static inline KVQ_TARGET_AVX2 float hmin(__m256 v) {
    __m128 m = _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_min_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_min_ss(m, _mm_movehdup_ps(m)));
}

static inline KVQ_TARGET_AVX2 __m256 vabs(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

/* Bit i set where lane i of the block (32 lanes in v[0..3]) equals e. */
static inline KVQ_TARGET_AVX2 uint32_t lanes_equal(const __m256 v[4], float e) {
    uint32_t m = 0;
    for (int k = 0; k < 4; k++)
        m |= (uint32_t)_mm256_movemask_ps(_mm256_cmp_ps(v[k], _mm256_set1_ps(e), _CMP_EQ_OQ)) << (8 * k);
    return m;
}

/* The first value of largest magnitude (ggml's `if (amax < |v|)` scan); +0
 * when all are zero. */
static inline KVQ_TARGET_AVX2 float first_absmax(const float *x, const __m256 v[4]) {
    const __m256 a[4] = {vabs(v[0]), vabs(v[1]), vabs(v[2]), vabs(v[3])};
    const float amax = hmax(_mm256_max_ps(_mm256_max_ps(a[0], a[1]), _mm256_max_ps(a[2], a[3])));
    if (amax == 0.0f) return 0.0f;
    return x[__builtin_ctz(lanes_equal(a, amax))];
}

/* ggml keeps the first of equal extremes: only the sign of a zero differs. */
static inline KVQ_TARGET_AVX2 float first_equal(const float *x, const __m256 v[4], float e) {
    return e != 0.0f ? e : x[__builtin_ctz(lanes_equal(v, 0.0f))];
}

static inline KVQ_TARGET_AVX2 void load_block(const float *x, __m256 v[4]) {
    for (int k = 0; k < 4; k++) v[k] = _mm256_loadu_ps(x + 8 * k);
}

/* (int8_t)(v * id + offset), then MIN(qmax, .): inputs are >= 0 here. */
static inline KVQ_TARGET_AVX2 __m256i quant_trunc(__m256 v, __m256 id, __m256 offset, int qmax) {
    const __m256i q = _mm256_cvttps_epi32(_mm256_add_ps(_mm256_mul_ps(v, id), offset));
    return _mm256_min_epi32(q, _mm256_set1_epi32(qmax));
}

/* Packs 32 values < 2^bits (q[0..3]): low nibbles into qs, bit 4 into qh. */
static inline KVQ_TARGET_AVX2 uint32_t pack_nibbles(const __m256i q[4], uint8_t *qs) {
    const __m256i lo = _mm256_set1_epi32(0x0F);
    __m256i b[2];
    uint32_t qh = 0;
    for (int k = 0; k < 2; k++)
        b[k] = _mm256_or_si256(_mm256_and_si256(q[k], lo), _mm256_slli_epi32(_mm256_and_si256(q[k + 2], lo), 4));
    const __m256i w = _mm256_permute4x64_epi64(_mm256_packus_epi32(b[0], b[1]), 0xD8);
    _mm_storeu_si128((__m128i *)qs, _mm_packus_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1)));
    for (int k = 0; k < 4; k++)
        qh |= (uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_slli_epi32(q[k], 27))) << (8 * k);
    return qh;
}

KVQ_TARGET_AVX2 kvq_status kvq_encode_q8_0_avx2(const kvq_codec *c, const float *x, void *dst) {
    uint8_t *out = dst;
    const __m256 half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
    for (int b = 0; b < c->head_dim / QK; b++, x += QK, out += 2 + QK) {
        __m256 v[4];
        load_block(x, v);
        const float amax = hmax(_mm256_max_ps(_mm256_max_ps(vabs(v[0]), vabs(v[1])),
                                              _mm256_max_ps(vabs(v[2]), vabs(v[3]))));
        const float d = amax / 127;
        const uint16_t h = kvq_f32_to_f16(d);
        if (kvq_ggml_f16_is_inf(h)) return KVQ_ERR_RANGE;
        const __m256 id = _mm256_set1_ps(kvq_ggml_inv_scale(d, h));
        kvq_store_u16(out, h);
        __m256i q[4];
        for (int k = 0; k < 4; k++) {
            /* roundf: truncate, then step away from zero when the exact
             * remainder is at least one half */
            const __m256 s = _mm256_mul_ps(v[k], id);
            const __m256 t = _mm256_round_ps(s, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
            const __m256 up = _mm256_cmp_ps(vabs(_mm256_sub_ps(s, t)), half, _CMP_GE_OQ);
            const __m256 step = _mm256_and_ps(up, _mm256_or_ps(one, _mm256_and_ps(s, sign)));
            q[k] = _mm256_cvtps_epi32(_mm256_add_ps(t, step));
        }
        const __m256i w0 = _mm256_permute4x64_epi64(_mm256_packs_epi32(q[0], q[1]), 0xD8);
        const __m256i w1 = _mm256_permute4x64_epi64(_mm256_packs_epi32(q[2], q[3]), 0xD8);
        _mm256_storeu_si256((__m256i *)(out + 2), _mm256_permute4x64_epi64(_mm256_packs_epi16(w0, w1), 0xD8));
    }
    return KVQ_OK;
}

static inline KVQ_TARGET_AVX2 kvq_status encode_sym(const kvq_codec *c, const float *x, uint8_t *out, int bits) {
    const int half = 1 << (bits - 1), qmax = (1 << bits) - 1;
    const size_t bb = kvq_ggml_block_bytes(bits == 4 ? KVQ_GGML_Q4_0 : KVQ_GGML_Q5_0);
    const __m256 offset = _mm256_set1_ps((float)half + 0.5f);
    for (int b = 0; b < c->head_dim / QK; b++, x += QK, out += bb) {
        __m256 v[4];
        load_block(x, v);
        const float d = first_absmax(x, v) / -half;
        const uint16_t h = kvq_f32_to_f16(d);
        if (kvq_ggml_f16_is_inf(h)) return KVQ_ERR_RANGE;
        const __m256 id = _mm256_set1_ps(kvq_ggml_inv_scale(d, h));
        kvq_store_u16(out, h);
        __m256i q[4];
        for (int k = 0; k < 4; k++) q[k] = quant_trunc(v[k], id, offset, qmax);
        const uint32_t qh = pack_nibbles(q, out + bb - QK / 2);
        if (bits == 5) memcpy(out + 2, &qh, 4);
    }
    return KVQ_OK;
}

static inline KVQ_TARGET_AVX2 kvq_status encode_asym(const kvq_codec *c, const float *x, uint8_t *out, int bits) {
    const int qmax = (1 << bits) - 1;
    const size_t bb = kvq_ggml_block_bytes(bits == 4 ? KVQ_GGML_Q4_1 : KVQ_GGML_Q5_1);
    const __m256 offset = _mm256_set1_ps(0.5f);
    for (int b = 0; b < c->head_dim / QK; b++, x += QK, out += bb) {
        __m256 v[4];
        load_block(x, v);
        const float min = first_equal(x, v, hmin(_mm256_min_ps(_mm256_min_ps(v[0], v[1]), _mm256_min_ps(v[2], v[3]))));
        const float max = first_equal(x, v, hmax(_mm256_max_ps(_mm256_max_ps(v[0], v[1]), _mm256_max_ps(v[2], v[3]))));
        const float d = (max - min) / qmax;
        const uint16_t h = kvq_f32_to_f16(d), hm = kvq_f32_to_f16(min);
        if (kvq_ggml_f16_is_inf(h) || kvq_ggml_f16_is_inf(hm)) return KVQ_ERR_RANGE;
        const __m256 id = _mm256_set1_ps(kvq_ggml_inv_scale(d, h)), vmin = _mm256_set1_ps(min);
        kvq_store_u16(out, h);
        kvq_store_u16(out + 2, hm);
        __m256i q[4];
        for (int k = 0; k < 4; k++) q[k] = quant_trunc(_mm256_sub_ps(v[k], vmin), id, offset, qmax);
        const uint32_t qh = pack_nibbles(q, out + bb - QK / 2);
        if (bits == 5) memcpy(out + 4, &qh, 4);
    }
    return KVQ_OK;
}

KVQ_TARGET_AVX2 kvq_status kvq_encode_q4_0_avx2(const kvq_codec *c, const float *x, void *dst) {
    return encode_sym(c, x, dst, 4);
}
KVQ_TARGET_AVX2 kvq_status kvq_encode_q5_0_avx2(const kvq_codec *c, const float *x, void *dst) {
    return encode_sym(c, x, dst, 5);
}
KVQ_TARGET_AVX2 kvq_status kvq_encode_q4_1_avx2(const kvq_codec *c, const float *x, void *dst) {
    return encode_asym(c, x, dst, 4);
}
KVQ_TARGET_AVX2 kvq_status kvq_encode_q5_1_avx2(const kvq_codec *c, const float *x, void *dst) {
    return encode_asym(c, x, dst, 5);
}

/* ggml_blocks.h's iq4_nl buckets as four vectors of 8 (buckets 0..31):
 * midpoints, bases, and the codebook value at each base. */
typedef struct {
    __m256 mid[4], val[4], base[4]; /* base: int32 bits */
} iq4nl_buckets;

static inline KVQ_TARGET_AVX2 iq4nl_buckets iq4nl_buckets_load(void) {
    iq4nl_buckets bk;
    for (int i = 0; i < 4; i++) {
        float val[8];
        for (int k = 0; k < 8; k++) val[k] = (float)kvq_iq4nl_values[kvq_iq4nl_bucket_base[8 * i + k]];
        bk.mid[i] = _mm256_loadu_ps(kvq_iq4nl_bucket_mid + 8 * i);
        bk.val[i] = _mm256_loadu_ps(val);
        bk.base[i] = _mm256_castsi256_ps(_mm256_loadu_si256((const __m256i *)(kvq_iq4nl_bucket_base + 8 * i)));
    }
    return bk;
}

/* Entry b (0..31) of a 32-entry table per lane: vpermps takes 3 index bits,
 * bits 3 and 4 pick among the four. */
static inline KVQ_TARGET_AVX2 __m256 lookup32(const __m256 t[4], __m256i b) {
    const __m256 bit3 = _mm256_castsi256_ps(_mm256_slli_epi32(b, 28)), bit4 = _mm256_castsi256_ps(_mm256_slli_epi32(b, 27));
    const __m256 lo = _mm256_blendv_ps(_mm256_permutevar8x32_ps(t[0], b), _mm256_permutevar8x32_ps(t[1], b), bit3);
    const __m256 hi = _mm256_blendv_ps(_mm256_permutevar8x32_ps(t[2], b), _mm256_permutevar8x32_ps(t[3], b), bit3);
    return _mm256_blendv_ps(lo, hi, bit4);
}

/* Per lane, x's bucket plus one where x reaches its midpoint: a bucket
 * whose base is ggml's best_index_int8 of x (ggml_blocks_avx512.c
 * iq4nl_index_bucket, where the clamp is explained). */
static inline KVQ_TARGET_AVX2 __m256i iq4nl_index_bucket(__m256 x, const iq4nl_buckets *bk, int clamp) {
    __m256 t = _mm256_fmadd_ps(x, _mm256_set1_ps(1.0f / KVQ_IQ4NL_BUCKET_WIDTH),
                               _mm256_set1_ps(-KVQ_IQ4NL_BUCKET_LO / KVQ_IQ4NL_BUCKET_WIDTH));
    if (clamp) t = _mm256_max_ps(_mm256_min_ps(t, _mm256_set1_ps(31.5f)), _mm256_setzero_ps());
    const __m256i b = _mm256_cvtps_epi32(_mm256_round_ps(t, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC));
    const __m256 up = _mm256_cmp_ps(x, lookup32(bk->mid, b), _CMP_GE_OQ);
    return _mm256_sub_epi32(b, _mm256_castps_si256(up));
}

/* Lanes run ggml's 16 trials (initial + itry -7..7) side by side in two
 * vectors, each summing over j in ggml's order; the codebook index by
 * buckets (one vpermps lookup each for midpoint and value, where a search
 * over the 15 entries took 14 compares). */
KVQ_TARGET_AVX2 kvq_status kvq_encode_iq4_nl_avx2(const kvq_codec *c, const float *x, void *dst) {
    uint8_t *out = dst;
    const iq4nl_buckets bk = iq4nl_buckets_load();
    for (int b = 0; b < c->head_dim / QK; b++, x += QK, out += 2 + QK / 2) {
        __m256 v[4];
        load_block(x, v);
        const float max = first_absmax(x, v);
        if (__builtin_fabsf(max) >= KVQ_IQ4NL_RANGE) return KVQ_ERR_RANGE;
        float d = 0.0f;
        if (__builtin_fabsf(max) >= KVQ_IQ4NL_EPS) {
            float ids[16], sumqx[16], sumq2[16];
            kvq_iq4nl_trial_ids(max, ids);
            const __m256 id0 = _mm256_loadu_ps(ids), id1 = _mm256_loadu_ps(ids + 8);
            __m256 sqx0 = _mm256_setzero_ps(), sq20 = _mm256_setzero_ps();
            __m256 sqx1 = _mm256_setzero_ps(), sq21 = _mm256_setzero_ps();
            for (int j = 0; j < QK; j++) { /* both halves of the trials: independent chains */
                const __m256 xj = _mm256_set1_ps(x[j]), w = _mm256_set1_ps(x[j] * x[j]);
                const __m256 q0 = lookup32(bk.val, iq4nl_index_bucket(_mm256_mul_ps(id0, xj), &bk, 0));
                const __m256 q1 = lookup32(bk.val, iq4nl_index_bucket(_mm256_mul_ps(id1, xj), &bk, 0));
                const __m256 wq0 = _mm256_mul_ps(w, q0), wq1 = _mm256_mul_ps(w, q1);
                sqx0 = _mm256_add_ps(sqx0, _mm256_mul_ps(wq0, xj));
                sq20 = _mm256_add_ps(sq20, _mm256_mul_ps(wq0, q0));
                sqx1 = _mm256_add_ps(sqx1, _mm256_mul_ps(wq1, xj));
                sq21 = _mm256_add_ps(sq21, _mm256_mul_ps(wq1, q1));
            }
            _mm256_storeu_ps(sumqx, sqx0);
            _mm256_storeu_ps(sumq2, sq20);
            _mm256_storeu_ps(sumqx + 8, sqx1);
            _mm256_storeu_ps(sumq2 + 8, sq21);
            d = kvq_iq4nl_pick_scale(sumqx, sumq2);
        }
        const uint16_t h = kvq_f32_to_f16(d);
        if (kvq_ggml_f16_is_inf(h)) return KVQ_ERR_RANGE;
        const __m256 id = _mm256_set1_ps(kvq_ggml_inv_scale(d, h));
        kvq_store_u16(out, h);
        __m256i l[4];
        for (int k = 0; k < 4; k++)
            l[k] = _mm256_castps_si256(lookup32(bk.base, iq4nl_index_bucket(_mm256_mul_ps(id, v[k]), &bk, 1)));
        pack_nibbles(l, out + 2);
    }
    return KVQ_OK;
}

/* ------------------------------------------------------------------ decode
 * On the AVX2 path attention decodes every compressed tile to floats
 * (there is no integer kernel), so these are its hot loop: a tile is
 * decoded by one call (kvq_ggml_decode_tile_avx2, not a call per row), the
 * fp16 scales by F16C (exact, as the scalar conversion), and a block's 16
 * nibble bytes are loaded once. */

static inline KVQ_TARGET_AVX2 __m256 scale8(const uint8_t *p) { return _mm256_set1_ps(_cvtsh_ss(kvq_load_u16(p))); }

static inline KVQ_TARGET_AVX2 void decode_q8_0_row(const kvq_codec *c, const uint8_t *in, float *y) {
    for (int b = 0; b < c->head_dim / QK; b++, in += 2 + QK, y += QK) {
        const __m256 d = scale8(in);
        for (int k = 0; k < 4; k++) {
            const __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(in + 2 + 8 * k)));
            _mm256_storeu_ps(y + 8 * k, _mm256_mul_ps(_mm256_cvtepi32_ps(q), d));
        }
    }
}

/* 16 bytes: 16 where bit j of the 16 bits is set (byte j), else 0. */
static inline KVQ_TARGET_AVX2 __m128i bit4_bytes(uint32_t bits16) {
    const __m128i v = _mm_shuffle_epi8(_mm_cvtsi32_si128((int)bits16),
                                       _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1));
    const __m128i sel = _mm_setr_epi8(1, 2, 4, 8, 16, 32, 64, -128, 1, 2, 4, 8, 16, 32, 64, -128);
    return _mm_and_si128(_mm_cmpeq_epi8(_mm_and_si128(v, sel), sel), _mm_set1_epi8(16));
}

/* A block's values 0-15 (lo) and 16-31 (hi) as bytes 0..2^bits-1: the
 * nibbles of its 16 bytes qs, with bit 4 from qh where bits = 5 (bit j of
 * qh is value j's). */
static inline KVQ_TARGET_AVX2 void nibbles(const uint8_t *qs, uint32_t qh, int bits, __m128i *lo, __m128i *hi) {
    const __m128i raw = _mm_loadu_si128((const __m128i *)qs), m = _mm_set1_epi8(0x0F);
    *lo = _mm_and_si128(raw, m);
    *hi = _mm_and_si128(_mm_srli_epi16(raw, 4), m);
    if (bits == 5) {
        *lo = _mm_or_si128(*lo, bit4_bytes(qh & 0xFFFF));
        *hi = _mm_or_si128(*hi, bit4_bytes(qh >> 16));
    }
}

/* Block values 8k..8k+7 (k = 0..3) as int32 from nibbles' bytes. */
static inline KVQ_TARGET_AVX2 __m256i unpack(__m128i lo, __m128i hi, int k) {
    const __m128i h = k < 2 ? lo : hi;
    return _mm256_cvtepu8_epi32(k & 1 ? _mm_srli_si128(h, 8) : h);
}

static inline KVQ_TARGET_AVX2 void decode_sym(const kvq_codec *c, const uint8_t *in, float *y, int bits) {
    const size_t bb = kvq_ggml_block_bytes(bits == 4 ? KVQ_GGML_Q4_0 : KVQ_GGML_Q5_0);
    const __m256i half = _mm256_set1_epi32(1 << (bits - 1));
    for (int b = 0; b < c->head_dim / QK; b++, in += bb, y += QK) {
        const __m256 d = scale8(in);
        uint32_t qh = 0;
        if (bits == 5) memcpy(&qh, in + 2, 4);
        __m128i lo, hi;
        nibbles(in + bb - QK / 2, qh, bits, &lo, &hi);
        for (int k = 0; k < 4; k++) {
            const __m256i q = _mm256_sub_epi32(unpack(lo, hi, k), half);
            _mm256_storeu_ps(y + 8 * k, _mm256_mul_ps(_mm256_cvtepi32_ps(q), d));
        }
    }
}

static inline KVQ_TARGET_AVX2 void decode_asym(const kvq_codec *c, const uint8_t *in, float *y, int bits) {
    const size_t bb = kvq_ggml_block_bytes(bits == 4 ? KVQ_GGML_Q4_1 : KVQ_GGML_Q5_1);
    for (int b = 0; b < c->head_dim / QK; b++, in += bb, y += QK) {
        const __m256 d = scale8(in), m = scale8(in + 2);
        uint32_t qh = 0;
        if (bits == 5) memcpy(&qh, in + 4, 4);
        __m128i lo, hi;
        nibbles(in + bb - QK / 2, qh, bits, &lo, &hi);
        for (int k = 0; k < 4; k++) {
            const __m256 q = _mm256_cvtepi32_ps(unpack(lo, hi, k));
            _mm256_storeu_ps(y + 8 * k, _mm256_add_ps(_mm256_mul_ps(q, d), m));
        }
    }
}

/* iq4_nl: the codebook is int8, so one vpshufb maps 16 nibbles to their
 * values; d times the value converted, as the reference. */
static inline KVQ_TARGET_AVX2 void decode_iq4_nl_row(const kvq_codec *c, const uint8_t *in, float *y) {
    const __m128i book = _mm_loadu_si128((const __m128i *)kvq_iq4nl_values);
    for (int b = 0; b < c->head_dim / QK; b++, in += 2 + QK / 2, y += QK) {
        const __m256 d = scale8(in);
        __m128i lo, hi;
        nibbles(in + 2, 0, 4, &lo, &hi);
        lo = _mm_shuffle_epi8(book, lo);
        hi = _mm_shuffle_epi8(book, hi);
        for (int k = 0; k < 4; k++) {
            const __m128i h = k < 2 ? lo : hi;
            const __m256i v = _mm256_cvtepi8_epi32(k & 1 ? _mm_srli_si128(h, 8) : h);
            _mm256_storeu_ps(y + 8 * k, _mm256_mul_ps(d, _mm256_cvtepi32_ps(v)));
        }
    }
}

KVQ_TARGET_AVX2 void kvq_decode_q8_0_avx2(const kvq_codec *c, const void *src, float *y) { decode_q8_0_row(c, src, y); }
KVQ_TARGET_AVX2 void kvq_decode_q4_0_avx2(const kvq_codec *c, const void *src, float *y) { decode_sym(c, src, y, 4); }
KVQ_TARGET_AVX2 void kvq_decode_q5_0_avx2(const kvq_codec *c, const void *src, float *y) { decode_sym(c, src, y, 5); }
KVQ_TARGET_AVX2 void kvq_decode_q4_1_avx2(const kvq_codec *c, const void *src, float *y) { decode_asym(c, src, y, 4); }
KVQ_TARGET_AVX2 void kvq_decode_q5_1_avx2(const kvq_codec *c, const void *src, float *y) { decode_asym(c, src, y, 5); }
KVQ_TARGET_AVX2 void kvq_decode_iq4_nl_avx2(const kvq_codec *c, const void *src, float *y) { decode_iq4_nl_row(c, src, y); }

KVQ_TARGET_AVX2 void kvq_ggml_decode_tile_avx2(const kvq_codec *c, const void *src, int n_rows, float *y) {
    const uint8_t *in = src;
    const size_t rb = c->row_bytes, d = (size_t)c->head_dim;
    switch (c->desc->param) {
    case KVQ_GGML_Q8_0: for (int r = 0; r < n_rows; r++) decode_q8_0_row(c, in + r * rb, y + r * d); break;
    case KVQ_GGML_Q4_0: for (int r = 0; r < n_rows; r++) decode_sym(c, in + r * rb, y + r * d, 4); break;
    case KVQ_GGML_Q5_0: for (int r = 0; r < n_rows; r++) decode_sym(c, in + r * rb, y + r * d, 5); break;
    case KVQ_GGML_Q4_1: for (int r = 0; r < n_rows; r++) decode_asym(c, in + r * rb, y + r * d, 4); break;
    case KVQ_GGML_Q5_1: for (int r = 0; r < n_rows; r++) decode_asym(c, in + r * rb, y + r * d, 5); break;
    default: for (int r = 0; r < n_rows; r++) decode_iq4_nl_row(c, in + r * rb, y + r * d); break;
    }
}
#endif
