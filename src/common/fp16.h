/* fp16.h — exact scalar conversions between float and fp16 / bf16.
 *
 * fp32 -> fp16 rounds to nearest even like F16C's VCVTPS2PH (and ggml and
 * numpy), so the reference and SIMD paths produce identical bytes. Overflow
 * gives +-Inf; every NaN becomes the quiet NaN 0x7E00 (sign kept). */
#ifndef KVQ_FP16_H
#define KVQ_FP16_H

#include <stdint.h>
#include <string.h>

static inline uint32_t kvq_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float kvq_f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint16_t kvq_f32_to_f16(float f) {
    /* Rounding is done by the FPU: scale the magnitude so that the fp16
     * mantissa lands at a fixed fp32 exponent, add, and read the bits. */
    const float scale_to_inf = 0x1.0p+112f;
    const float scale_to_zero = 0x1.0p-110f;
    float base = (__builtin_fabsf(f) * scale_to_inf) * scale_to_zero;
    const uint32_t w = kvq_f32_bits(f);
    const uint32_t shl1_w = w + w;
    const uint32_t sign = w & 0x80000000u;
    uint32_t bias = shl1_w & 0xFF000000u;
    if (bias < 0x71000000u) bias = 0x71000000u;
    base = kvq_f32_from_bits((bias >> 1) + 0x07800000u) + base;
    const uint32_t bits = kvq_f32_bits(base);
    const uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
    const uint32_t mantissa_bits = bits & 0x00000FFFu;
    const uint32_t nonsign = exp_bits + mantissa_bits;
    return (uint16_t)((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

static inline float kvq_f16_to_f32(uint16_t h) {
    const uint32_t w = (uint32_t)h << 16;
    const uint32_t sign = w & 0x80000000u;
    const uint32_t two_w = w + w;
    const uint32_t exp_offset = 0xE0u << 23;
    const float exp_scale = 0x1.0p-112f;
    const float normalized = kvq_f32_from_bits((two_w >> 4) + exp_offset) * exp_scale;
    const uint32_t magic_mask = 126u << 23;
    const float denormalized = kvq_f32_from_bits((two_w >> 17) | magic_mask) - 0.5f;
    const uint32_t denormalized_cutoff = 1u << 27;
    const uint32_t result =
        sign | (two_w < denormalized_cutoff ? kvq_f32_bits(denormalized) : kvq_f32_bits(normalized));
    return kvq_f32_from_bits(result);
}

/* fp32 -> bf16, round to nearest even; NaN stays a quiet NaN (as ggml). */
static inline uint16_t kvq_f32_to_bf16(float f) {
    const uint32_t u = kvq_f32_bits(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 64);
    return (uint16_t)((u + (0x7FFFu + ((u >> 16) & 1))) >> 16);
}

static inline float kvq_bf16_to_f32(uint16_t h) {
    return kvq_f32_from_bits((uint32_t)h << 16);
}

/* Little-endian fp16 load/store at any alignment (rows are packed bytes). */
static inline uint16_t kvq_load_u16(const void *p) {
    uint16_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void kvq_store_u16(void *p, uint16_t v) { memcpy(p, &v, sizeof v); }

#endif
