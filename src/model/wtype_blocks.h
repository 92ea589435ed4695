/* wtype_blocks.h — one block of each weight type to floats, bit-exact with
 * ggml's dequantize_row_* (same operations in the same order; the build has
 * -std=c11, so no FMA contraction changes the rounding).
 *
 * Bodies are force-inlined so that wtype.c (reference) and the per-ISA files
 * instantiate the very same arithmetic; the ISA files get it vectorized by
 * the compiler under their target attribute, still bit-exact. */
#ifndef KVQ_WTYPE_BLOCKS_H
#define KVQ_WTYPE_BLOCKS_H

#include <stdint.h>
#include <string.h>

#include "common/common.h"
#include "common/fp16.h"

static KVQ_ALWAYS_INLINE void kvq_wblock_F32(const uint8_t *b, float *y) { memcpy(y, b, 4); }

static KVQ_ALWAYS_INLINE void kvq_wblock_F16(const uint8_t *b, float *y) {
    y[0] = kvq_f16_to_f32(kvq_load_u16(b));
}

static KVQ_ALWAYS_INLINE void kvq_wblock_BF16(const uint8_t *b, float *y) {
    y[0] = kvq_bf16_to_f32(kvq_load_u16(b));
}

/* block_q4_0: fp16 d, qs[16]; value j in the low nibble of qs[j], j+16 high. */
static KVQ_ALWAYS_INLINE void kvq_wblock_Q4_0(const uint8_t *b, float *y) {
    const float d = kvq_f16_to_f32(kvq_load_u16(b));
    const uint8_t *qs = b + 2;
    for (int j = 0; j < 16; j++) {
        y[j] = (float)((qs[j] & 0x0F) - 8) * d;
        y[j + 16] = (float)((qs[j] >> 4) - 8) * d;
    }
}

/* block_q4_1: fp16 d, fp16 m, qs[16]. */
static KVQ_ALWAYS_INLINE void kvq_wblock_Q4_1(const uint8_t *b, float *y) {
    const float d = kvq_f16_to_f32(kvq_load_u16(b));
    const float m = kvq_f16_to_f32(kvq_load_u16(b + 2));
    const uint8_t *qs = b + 4;
    for (int j = 0; j < 16; j++) {
        y[j] = (float)(qs[j] & 0x0F) * d + m;
        y[j + 16] = (float)(qs[j] >> 4) * d + m;
    }
}

/* block_q5_0: fp16 d, qh (32 high bits, little-endian), qs[16]. */
static KVQ_ALWAYS_INLINE void kvq_wblock_Q5_0(const uint8_t *b, float *y) {
    const float d = kvq_f16_to_f32(kvq_load_u16(b));
    uint32_t qh;
    memcpy(&qh, b + 2, 4);
    const uint8_t *qs = b + 6;
    for (int j = 0; j < 16; j++) {
        const int h0 = (int)(((qh >> j) << 4) & 0x10);
        const int h1 = (int)((qh >> (j + 12)) & 0x10);
        y[j] = (float)(((qs[j] & 0x0F) | h0) - 16) * d;
        y[j + 16] = (float)(((qs[j] >> 4) | h1) - 16) * d;
    }
}

/* block_q5_1: fp16 d, fp16 m, qh, qs[16]. */
static KVQ_ALWAYS_INLINE void kvq_wblock_Q5_1(const uint8_t *b, float *y) {
    const float d = kvq_f16_to_f32(kvq_load_u16(b));
    const float m = kvq_f16_to_f32(kvq_load_u16(b + 2));
    uint32_t qh;
    memcpy(&qh, b + 4, 4);
    const uint8_t *qs = b + 8;
    for (int j = 0; j < 16; j++) {
        const int h0 = (int)(((qh >> j) << 4) & 0x10);
        const int h1 = (int)((qh >> (j + 12)) & 0x10);
        y[j] = (float)((qs[j] & 0x0F) | h0) * d + m;
        y[j + 16] = (float)((qs[j] >> 4) | h1) * d + m;
    }
}

/* block_q8_0: fp16 d, int8 qs[32]. */
static KVQ_ALWAYS_INLINE void kvq_wblock_Q8_0(const uint8_t *b, float *y) {
    const float d = kvq_f16_to_f32(kvq_load_u16(b));
    const int8_t *qs = (const int8_t *)(b + 2);
    for (int j = 0; j < 32; j++) y[j] = (float)qs[j] * d;
}

/* The 12 bytes of packed 6-bit scales and mins of q4_K/q5_K (ggml's
 * get_scale_min_k4), for sub-block j in [0, 8). */
static KVQ_ALWAYS_INLINE void kvq_wscale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* block_q4_K: fp16 d, fp16 dmin, scales[12], qs[128]; 8 sub-blocks of 32:
 * sub-blocks 2i and 2i+1 are the low and high nibbles of qs[32i .. 32i+32). */
static KVQ_ALWAYS_INLINE void kvq_wblock_Q4_K(const uint8_t *b, float *y) {
    const float d = kvq_f16_to_f32(kvq_load_u16(b));
    const float dmin = kvq_f16_to_f32(kvq_load_u16(b + 2));
    const uint8_t *scales = b + 4, *q = b + 16;
    for (int j = 0; j < 8; j += 2) {
        uint8_t sc, m;
        kvq_wscale_min_k4(j, scales, &sc, &m);
        const float d1 = d * sc, m1 = dmin * m;
        kvq_wscale_min_k4(j + 1, scales, &sc, &m);
        const float d2 = d * sc, m2 = dmin * m;
        for (int l = 0; l < 32; l++) y[l] = d1 * (float)(q[l] & 0xF) - m1;
        for (int l = 0; l < 32; l++) y[l + 32] = d2 * (float)(q[l] >> 4) - m2;
        q += 32;
        y += 64;
    }
}

/* block_q5_K: fp16 d, fp16 dmin, scales[12], qh[32], qs[128]; bit j of
 * qh[l] is the fifth bit of value l of sub-block j. */
static KVQ_ALWAYS_INLINE void kvq_wblock_Q5_K(const uint8_t *b, float *y) {
    const float d = kvq_f16_to_f32(kvq_load_u16(b));
    const float dmin = kvq_f16_to_f32(kvq_load_u16(b + 2));
    const uint8_t *scales = b + 4, *qh = b + 16, *ql = b + 48;
    for (int j = 0; j < 8; j += 2) {
        uint8_t sc, m;
        kvq_wscale_min_k4(j, scales, &sc, &m);
        const float d1 = d * sc, m1 = dmin * m;
        kvq_wscale_min_k4(j + 1, scales, &sc, &m);
        const float d2 = d * sc, m2 = dmin * m;
        for (int l = 0; l < 32; l++)
            y[l] = d1 * (float)((ql[l] & 0xF) + (((qh[l] >> j) & 1) << 4)) - m1;
        for (int l = 0; l < 32; l++)
            y[l + 32] = d2 * (float)((ql[l] >> 4) + (((qh[l] >> (j + 1)) & 1) << 4)) - m2;
        ql += 32;
        y += 64;
    }
}

/* block_q6_K: ql[128] (low 4 bits), qh[64] (high 2 bits), int8 scales[16]
 * (one per 16 values), fp16 d; two halves of 128 values. */
static KVQ_ALWAYS_INLINE void kvq_wblock_Q6_K(const uint8_t *b, float *y) {
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *sc = (const int8_t *)(b + 192);
    const float d = kvq_f16_to_f32(kvq_load_u16(b + 208));
    for (int half = 0; half < 2; half++) {
        for (int l = 0; l < 32; l++) {
            const int is = l / 16;
            const int q1 = (int)((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
            const int q2 = (int)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
            const int q3 = (int)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            const int q4 = (int)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            y[l] = d * sc[is + 0] * q1;
            y[l + 32] = d * sc[is + 2] * q2;
            y[l + 64] = d * sc[is + 4] * q3;
            y[l + 96] = d * sc[is + 6] * q4;
        }
        y += 128;
        ql += 64;
        qh += 32;
        sc += 8;
    }
}

#endif
