/* ggml_blocks.c — q8_0, q4_0, q4_1, q5_0, q5_1 and iq4_nl rows, bit-exact with
 * ggml's reference quantizers (quantize_row_*_ref; iq4_nl: quantize_iq4_nl
 * with ntry = 7 and no importance weights) and its dequantizers.
 *
 * A row of head_dim values is head_dim/32 blocks stored back to back exactly
 * as ggml stores them (little-endian):
 *   q8_0   d:f16  qs:int8[32]                         34 bytes
 *   q4_0   d:f16  qs:u8[16]                           18 bytes
 *   q4_1   d:f16  m:f16  qs:u8[16]                    20 bytes
 *   q5_0   d:f16  qh:u32  qs:u8[16]                   22 bytes
 *   q5_1   d:f16  m:f16  qh:u32  qs:u8[16]            24 bytes
 *   iq4_nl d:f16  qs:u8[16] (codebook indices)        18 bytes
 * qs[j] holds value j in its low nibble and value j + 16 in its high one; bit
 * j of qh is bit 4 of value j.
 *
 * Where this deviates from ggml (degenerate blocks only; kvq.h's input rules):
 * - A block whose fp16 scale d rounds to zero while d itself does not (max |x|
 *   below about 2^-22, denormals) stores the zero block's quantized values
 *   (those ggml stores for an all-zero block) with d's fp16 bytes as ggml
 *   stores them; ggml would quantize with 1/d, which overflows for denormal d
 *   and makes the float -> int conversion undefined. Decoding gives the same
 *   values either way, up to the sign of zero.
 * - A block whose fp16 d (or m) overflows makes the row KVQ_ERR_RANGE (ggml
 *   stores an Inf scale); iq4_nl refuses max |x| >= 2^32 before its search,
 *   where ggml's scale would overflow fp16 anyway.
 * Zero blocks match ggml byte for byte, including d = -0 of q4_0 and q5_0
 * (max / -8 with max = +0). */
#include <math.h>
#include <string.h>

#include "codec/ggml_blocks.h"
#include "common/fp16.h"

#define QK KVQ_GGML_QK
#define MIN(a, b) ((a) < (b) ? (a) : (b))

const int8_t kvq_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* ggml_blocks.h: bucket b spans [9 b - 144, 9 b - 135). test_codec checks
 * both tables against the codebook's midpoints. */
const int32_t kvq_iq4nl_bucket_base[32] = {0, 0, 0,  0,  1,  1,  2,  2,  3,  3,  4,  4,  5,  6,  6,  7,
                                           8, 9, 9, 10, 11, 11, 12, 13, 13, 14, 14, 14, 15, 15, 15, 15};
#define NONE INFINITY
const float kvq_iq4nl_bucket_mid[32] = {NONE, NONE,  NONE,  -115.5f, NONE,  -93.5f, NONE,  -74.0f,
                                        NONE, -57.0f, NONE, -42.0f,  -28.5f, NONE,   -16.0f, -4.5f,
                                        7.0f, NONE,  19.0f, 31.5f,   NONE,  45.5f,  61.0f, NONE,
                                        79.0f, NONE, NONE,  101.0f,  NONE,  NONE,   NONE,  NONE};
#undef NONE

size_t kvq_ggml_block_bytes(int kind) {
    switch (kind) {
    case KVQ_GGML_Q8_0: return 2 + QK;
    case KVQ_GGML_Q4_1: return 4 + QK / 2;
    case KVQ_GGML_Q5_0: return 6 + QK / 2;
    case KVQ_GGML_Q5_1: return 8 + QK / 2;
    default: return 2 + QK / 2; /* q4_0, iq4_nl */
    }
}

static size_t ggml_row_bytes(const kvq_codec_desc *desc, int head_dim) {
    return (size_t)(head_dim / QK) * kvq_ggml_block_bytes(desc->param);
}

void kvq_iq4nl_trial_ids(float max, float id[16]) {
    const float d = -max / kvq_iq4nl_values[0];
    id[0] = 1 / d;
    for (int k = 1; k < 16; k++) id[k] = (k - 8 + kvq_iq4nl_values[0]) / max;
}

float kvq_iq4nl_pick_scale(const float sumqx[16], const float sumq2[16]) {
    float d = sumqx[0] / sumq2[0];
    float best = d * sumqx[0];
    for (int k = 1; k < 16; k++) {
        if (sumq2[k] > 0 && sumqx[k] * sumqx[k] > best * sumq2[k]) {
            d = sumqx[k] / sumq2[k];
            best = d * sumqx[k];
        }
    }
    return d;
}

/* ggml's best_index_int8 over the iq4_nl codebook. */
static int iq4nl_best_index(float x) {
    const int8_t *val = kvq_iq4nl_values;
    if (x <= val[0]) return 0;
    if (x >= val[15]) return 15;
    int ml = 0, mu = 15;
    while (mu - ml > 1) {
        const int mav = (ml + mu) / 2;
        if (x < val[mav]) mu = mav;
        else ml = mav;
    }
    return x - val[mu - 1] < val[mu] - x ? mu - 1 : mu;
}

/* ------------------------------------------------------------- reference */

static kvq_status encode_q8_0_ref(const kvq_codec *c, const float *x, void *dst) {
    uint8_t *out = dst;
    for (int b = 0; b < c->head_dim / QK; b++, x += QK, out += 2 + QK) {
        float amax = 0.0f;
        for (int j = 0; j < QK; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127;
        const uint16_t h = kvq_f32_to_f16(d);
        if (kvq_ggml_f16_is_inf(h)) return KVQ_ERR_RANGE;
        const float id = kvq_ggml_inv_scale(d, h);
        kvq_store_u16(out, h);
        for (int j = 0; j < QK; j++) out[2 + j] = (uint8_t)(int8_t)roundf(x[j] * id);
    }
    return KVQ_OK;
}

/* q4_0 (bits 4) and q5_0 (bits 5): d = max / -2^(bits-1), max the first
 * value of largest magnitude. */
static KVQ_ALWAYS_INLINE kvq_status encode_sym_ref(const kvq_codec *c, const float *x, uint8_t *out, int bits) {
    const int half = 1 << (bits - 1), qmax = (1 << bits) - 1;
    const size_t bb = kvq_ggml_block_bytes(bits == 4 ? KVQ_GGML_Q4_0 : KVQ_GGML_Q5_0);
    for (int b = 0; b < c->head_dim / QK; b++, x += QK, out += bb) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QK; j++) {
            if (amax < fabsf(x[j])) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        const float d = max / -half;
        const uint16_t h = kvq_f32_to_f16(d);
        if (kvq_ggml_f16_is_inf(h)) return KVQ_ERR_RANGE;
        const float id = kvq_ggml_inv_scale(d, h);
        const float offset = (float)half + 0.5f;
        uint8_t *qs = out + bb - QK / 2;
        uint32_t qh = 0;
        kvq_store_u16(out, h);
        for (int j = 0; j < QK / 2; j++) {
            const uint8_t q0 = (uint8_t)MIN(qmax, (int8_t)(x[j] * id + offset));
            const uint8_t q1 = (uint8_t)MIN(qmax, (int8_t)(x[j + QK / 2] * id + offset));
            qs[j] = (uint8_t)((q0 & 0x0F) | (q1 << 4));
            qh |= (uint32_t)(q0 >> 4) << j | (uint32_t)(q1 >> 4) << (j + QK / 2);
        }
        if (bits == 5) memcpy(out + 2, &qh, 4);
    }
    return KVQ_OK;
}

/* q4_1 and q5_1: d = (max - min) / (2^bits - 1), m = min. */
static KVQ_ALWAYS_INLINE kvq_status encode_asym_ref(const kvq_codec *c, const float *x, uint8_t *out, int bits) {
    const int qmax = (1 << bits) - 1;
    const size_t bb = kvq_ggml_block_bytes(bits == 4 ? KVQ_GGML_Q4_1 : KVQ_GGML_Q5_1);
    for (int b = 0; b < c->head_dim / QK; b++, x += QK, out += bb) {
        float min = 3.402823466e+38f, max = -3.402823466e+38f;
        for (int j = 0; j < QK; j++) {
            if (x[j] < min) min = x[j];
            if (x[j] > max) max = x[j];
        }
        const float d = (max - min) / qmax;
        const uint16_t h = kvq_f32_to_f16(d), hm = kvq_f32_to_f16(min);
        if (kvq_ggml_f16_is_inf(h) || kvq_ggml_f16_is_inf(hm)) return KVQ_ERR_RANGE;
        const float id = kvq_ggml_inv_scale(d, h);
        uint8_t *qs = out + bb - QK / 2;
        uint32_t qh = 0;
        kvq_store_u16(out, h);
        kvq_store_u16(out + 2, hm);
        for (int j = 0; j < QK / 2; j++) {
            const uint8_t q0 = (uint8_t)MIN(qmax, (int8_t)((x[j] - min) * id + 0.5f));
            const uint8_t q1 = (uint8_t)MIN(qmax, (int8_t)((x[j + QK / 2] - min) * id + 0.5f));
            qs[j] = (uint8_t)((q0 & 0x0F) | (q1 << 4));
            qh |= (uint32_t)(q0 >> 4) << j | (uint32_t)(q1 >> 4) << (j + QK / 2);
        }
        if (bits == 5) memcpy(out + 4, &qh, 4);
    }
    return KVQ_OK;
}

static kvq_status encode_q4_0_ref(const kvq_codec *c, const float *x, void *dst) {
    return encode_sym_ref(c, x, dst, 4);
}
static kvq_status encode_q5_0_ref(const kvq_codec *c, const float *x, void *dst) {
    return encode_sym_ref(c, x, dst, 5);
}
static kvq_status encode_q4_1_ref(const kvq_codec *c, const float *x, void *dst) {
    return encode_asym_ref(c, x, dst, 4);
}
static kvq_status encode_q5_1_ref(const kvq_codec *c, const float *x, void *dst) {
    return encode_asym_ref(c, x, dst, 5);
}

static kvq_status encode_iq4_nl_ref(const kvq_codec *c, const float *x, void *dst) {
    uint8_t *out = dst;
    for (int b = 0; b < c->head_dim / QK; b++, x += QK, out += 2 + QK / 2) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QK; j++) {
            if (fabsf(x[j]) > amax) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        if (amax >= KVQ_IQ4NL_RANGE) return KVQ_ERR_RANGE;
        float d = 0.0f;
        if (amax >= KVQ_IQ4NL_EPS) {
            float id[16], sumqx[16], sumq2[16];
            kvq_iq4nl_trial_ids(max, id);
            for (int k = 0; k < 16; k++) {
                sumqx[k] = sumq2[k] = 0.0f;
                for (int j = 0; j < QK; j++) {
                    const float q = kvq_iq4nl_values[iq4nl_best_index(id[k] * x[j])];
                    const float w = x[j] * x[j];
                    sumqx[k] += w * q * x[j];
                    sumq2[k] += w * q * q;
                }
            }
            d = kvq_iq4nl_pick_scale(sumqx, sumq2);
        }
        const uint16_t h = kvq_f32_to_f16(d);
        if (kvq_ggml_f16_is_inf(h)) return KVQ_ERR_RANGE;
        const float id = kvq_ggml_inv_scale(d, h);
        kvq_store_u16(out, h);
        for (int j = 0; j < QK / 2; j++)
            out[2 + j] = (uint8_t)(iq4nl_best_index(id * x[j]) | iq4nl_best_index(id * x[j + QK / 2]) << 4);
    }
    return KVQ_OK;
}

static void decode_q8_0_ref(const kvq_codec *c, const void *src, float *y) {
    const uint8_t *in = src;
    for (int b = 0; b < c->head_dim / QK; b++, in += 2 + QK, y += QK) {
        const float d = kvq_f16_to_f32(kvq_load_u16(in));
        for (int j = 0; j < QK; j++) y[j] = (int8_t)in[2 + j] * d;
    }
}

/* Values 0..2^bits-1 of a block: low nibbles from qs, bit 4 from qh. */
static KVQ_ALWAYS_INLINE void unpack_block(const uint8_t *qs, uint32_t qh, int q[QK]) {
    for (int j = 0; j < QK / 2; j++) {
        q[j] = (qs[j] & 0x0F) | (int)((qh >> j) & 1) << 4;
        q[j + QK / 2] = (qs[j] >> 4) | (int)((qh >> (j + QK / 2)) & 1) << 4;
    }
}

static KVQ_ALWAYS_INLINE void decode_sym_ref(const kvq_codec *c, const uint8_t *in, float *y, int bits) {
    const size_t bb = kvq_ggml_block_bytes(bits == 4 ? KVQ_GGML_Q4_0 : KVQ_GGML_Q5_0);
    const int half = 1 << (bits - 1);
    for (int b = 0; b < c->head_dim / QK; b++, in += bb, y += QK) {
        const float d = kvq_f16_to_f32(kvq_load_u16(in));
        uint32_t qh = 0;
        if (bits == 5) memcpy(&qh, in + 2, 4);
        int q[QK];
        unpack_block(in + bb - QK / 2, qh, q);
        for (int j = 0; j < QK; j++) y[j] = (q[j] - half) * d;
    }
}

static KVQ_ALWAYS_INLINE void decode_asym_ref(const kvq_codec *c, const uint8_t *in, float *y, int bits) {
    const size_t bb = kvq_ggml_block_bytes(bits == 4 ? KVQ_GGML_Q4_1 : KVQ_GGML_Q5_1);
    for (int b = 0; b < c->head_dim / QK; b++, in += bb, y += QK) {
        const float d = kvq_f16_to_f32(kvq_load_u16(in));
        const float m = kvq_f16_to_f32(kvq_load_u16(in + 2));
        uint32_t qh = 0;
        if (bits == 5) memcpy(&qh, in + 4, 4);
        int q[QK];
        unpack_block(in + bb - QK / 2, qh, q);
        for (int j = 0; j < QK; j++) y[j] = q[j] * d + m;
    }
}

static void decode_q4_0_ref(const kvq_codec *c, const void *src, float *y) { decode_sym_ref(c, src, y, 4); }
static void decode_q5_0_ref(const kvq_codec *c, const void *src, float *y) { decode_sym_ref(c, src, y, 5); }
static void decode_q4_1_ref(const kvq_codec *c, const void *src, float *y) { decode_asym_ref(c, src, y, 4); }
static void decode_q5_1_ref(const kvq_codec *c, const void *src, float *y) { decode_asym_ref(c, src, y, 5); }

static void decode_iq4_nl_ref(const kvq_codec *c, const void *src, float *y) {
    const uint8_t *in = src;
    for (int b = 0; b < c->head_dim / QK; b++, in += 2 + QK / 2, y += QK) {
        const float d = kvq_f16_to_f32(kvq_load_u16(in));
        for (int j = 0; j < QK / 2; j++) {
            y[j] = d * kvq_iq4nl_values[in[2 + j] & 0x0F];
            y[j + QK / 2] = d * kvq_iq4nl_values[in[2 + j] >> 4];
        }
    }
}

/* --------------------------------------------------------------- kernels */

/* Per-ISA kernels (ggml_blocks_avx2.c, ggml_blocks_avx512.c), by kind. */
#define KVQ_GGML_KERNELS(isa)                                                                        \
    kvq_status kvq_encode_q8_0_##isa(const kvq_codec *c, const float *x, void *dst);               \
    kvq_status kvq_encode_q4_0_##isa(const kvq_codec *c, const float *x, void *dst);               \
    kvq_status kvq_encode_q4_1_##isa(const kvq_codec *c, const float *x, void *dst);               \
    kvq_status kvq_encode_q5_0_##isa(const kvq_codec *c, const float *x, void *dst);               \
    kvq_status kvq_encode_q5_1_##isa(const kvq_codec *c, const float *x, void *dst);               \
    kvq_status kvq_encode_iq4_nl_##isa(const kvq_codec *c, const float *x, void *dst);             \
    void kvq_decode_q8_0_##isa(const kvq_codec *c, const void *src, float *y);                     \
    void kvq_decode_q4_0_##isa(const kvq_codec *c, const void *src, float *y);                     \
    void kvq_decode_q4_1_##isa(const kvq_codec *c, const void *src, float *y);                     \
    void kvq_decode_q5_0_##isa(const kvq_codec *c, const void *src, float *y);                     \
    void kvq_decode_q5_1_##isa(const kvq_codec *c, const void *src, float *y);                     \
    void kvq_decode_iq4_nl_##isa(const kvq_codec *c, const void *src, float *y);
#if KVQ_HAVE_X86
KVQ_GGML_KERNELS(avx2)
KVQ_GGML_KERNELS(avx512)
void kvq_ggml_decode_tile_avx2(const kvq_codec *c, const void *src, int n_rows, float *y);
#endif

typedef struct {
    kvq_encode_fn encode;
    kvq_decode_fn decode;
} ggml_kernels;

/* [isa][kind], kinds in KVQ_GGML_* order. */
#define KVQ_GGML_ROW(isa)                                                                         \
    {{kvq_encode_q8_0_##isa, kvq_decode_q8_0_##isa}, {kvq_encode_q4_0_##isa, kvq_decode_q4_0_##isa}, \
     {kvq_encode_q4_1_##isa, kvq_decode_q4_1_##isa}, {kvq_encode_q5_0_##isa, kvq_decode_q5_0_##isa}, \
     {kvq_encode_q5_1_##isa, kvq_decode_q5_1_##isa}, {kvq_encode_iq4_nl_##isa, kvq_decode_iq4_nl_##isa}}

static const ggml_kernels ggml_ref[6] = {
    {encode_q8_0_ref, decode_q8_0_ref},   {encode_q4_0_ref, decode_q4_0_ref},
    {encode_q4_1_ref, decode_q4_1_ref},   {encode_q5_0_ref, decode_q5_0_ref},
    {encode_q5_1_ref, decode_q5_1_ref},   {encode_iq4_nl_ref, decode_iq4_nl_ref},
};
#if KVQ_HAVE_X86
static const ggml_kernels ggml_simd[2][6] = {
    KVQ_GGML_ROW(avx2),
    KVQ_GGML_ROW(avx512),
};
#endif

static void ggml_select(kvq_codec *c) {
    ggml_kernels k = ggml_ref[c->desc->param];
#if KVQ_HAVE_X86
    if (c->isa >= KVQ_ISA_AVX2) k = ggml_simd[c->isa == KVQ_ISA_AVX512][c->desc->param];
#endif
    c->encode = k.encode;
    c->decode = k.decode;
    c->decode_domain = k.decode;
#if KVQ_HAVE_X86
    /* Whole tiles in one call (attention decodes rows-layout tiles so;
     * on AVX-512 too: it beats the per-row AVX-512 calls there). */
    if (c->isa >= KVQ_ISA_AVX2) c->decode_tile_domain = kvq_ggml_decode_tile_avx2;
#endif
}

const kvq_family_ops kvq_family_ggml = {
    .quantized = 1,
    .row_bytes = ggml_row_bytes,
    .select = ggml_select,
};
