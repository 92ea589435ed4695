/* tile_layout_avx512.c — a whole interleaved tile (layouts: tile_layout.c)
 * decoded to floats with AVX-512, bit-exact with kvq_kv_tile_decode: the
 * same one product code value x fp16 scale (converted by the scalar fp16
 * code). Prefill decodes every tile once per block of queries; the scalar
 * walk was 14% of a turbo3 prefill at depth 4096.
 *
 * Both sides end in vectors whose 128-bit lanes hold 16 codes of one token
 * over 16 consecutive dims (emit):
 *   K: a vector's dword lanes are 16 tokens; a 4 x 4 dword transpose of
 *      four vectors (within 128-bit lanes) gives per token its four dwords,
 *      which hold 16 codes to sort (nibbles, 2-bit fields, high bits);
 *   V: a vector's dword lane l holds byte l of 4 tokens; one vpshufb and one
 *      dword permutation give per token its 16 bytes, l in order.
 * q4_1, q5_0 and q5_1 (emit_lin: code x d + m computed, not looked up) add
 * their fifth bits to the nibbles in those same lanes. */
#include <string.h>

#include "codec/ggml_blocks.h"
#include "codec/rotated.h"
#include "common/fp16.h"
#include "kv/kvstore.h"

#if KVQ_HAVE_X86
#include <immintrin.h>

/* a, b, c, d -> o_k: in lane L, dwords (a, b, c, d)[4L + k]. */
static KVQ_TARGET_AVX512 KVQ_ALWAYS_INLINE void transpose4(__m512i a, __m512i b, __m512i c, __m512i d,
                                                            __m512i o[4]) {
    const __m512i t0 = _mm512_unpacklo_epi32(a, b), t1 = _mm512_unpackhi_epi32(a, b);
    const __m512i t2 = _mm512_unpacklo_epi32(c, d), t3 = _mm512_unpackhi_epi32(c, d);
    o[0] = _mm512_unpacklo_epi64(t0, t2);
    o[1] = _mm512_unpackhi_epi64(t0, t2);
    o[2] = _mm512_unpacklo_epi64(t1, t3);
    o[3] = _mm512_unpackhi_epi64(t1, t3);
}

/* The two 4 x 4 transposes between a V vector (dword l: byte i of token i)
 * and per-token lanes: of bytes within each 128-bit lane, and of dwords
 * across lanes. Each is its own inverse, so unpacking applies bytes then
 * dwords and packing dwords then bytes. */
static KVQ_TARGET_AVX512 KVQ_ALWAYS_INLINE __m512i transpose_bytes(__m512i v) {
    return _mm512_shuffle_epi8(v, _mm512_broadcast_i32x4(_mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15)));
}
static KVQ_TARGET_AVX512 KVQ_ALWAYS_INLINE __m512i transpose_dwords(__m512i v) {
    return _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), v);
}

/* A V vector -> lane i: token i's 16 bytes. */
static KVQ_TARGET_AVX512 KVQ_ALWAYS_INLINE __m512i quad_tokens(const uint8_t *p) {
    return transpose_dwords(transpose_bytes(_mm512_loadu_si512(p)));
}

/* 128-bit lane L of v. */
static KVQ_TARGET_AVX512 KVQ_ALWAYS_INLINE __m128i lane(__m512i v, int L) {
    switch (L) { /* the lane index must be a constant */
    case 0: return _mm512_castsi512_si128(v);
    case 1: return _mm512_extracti32x4_epi32(v, 1);
    case 2: return _mm512_extracti32x4_epi32(v, 2);
    default: return _mm512_extracti32x4_epi32(v, 3);
    }
}

/* 16 codes (lane L of v) -> y[0..15] = value(code) x s: q8 codes are s8
 * (flip: stored as u8 = s8 + 128), others index the 16 floats tab. */
static KVQ_TARGET_AVX512 KVQ_ALWAYS_INLINE void emit(const int q8, const int flip, __m512i v, int L, __m512 tab,
                                                      float s, float *y) {
    __m128i x = lane(v, L);
    __m512 f;
    if (q8) {
        if (flip) x = _mm_xor_si128(x, _mm_set1_epi8((char)0x80));
        f = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(x));
    } else {
        f = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(x), tab);
    }
    _mm512_storeu_ps(y, _mm512_mul_ps(f, _mm512_set1_ps(s)));
}

/* 16 u8 codes (lane L of v) of q4_1, q5_0 or q5_1 -> y[0..15] = (code -
 * off) x s, + mn where min: the operations of their row decode. */
static KVQ_TARGET_AVX512 KVQ_ALWAYS_INLINE void emit_lin(const int off, const int min, __m512i v, int L, float s,
                                                          float mn, float *y) {
    const __m512i c = _mm512_sub_epi32(_mm512_cvtepu8_epi32(lane(v, L)), _mm512_set1_epi32(off));
    __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(c), _mm512_set1_ps(s));
    if (min) f = _mm512_add_ps(f, _mm512_set1_ps(mn));
    _mm512_storeu_ps(y, f);
}

/* Every lane of the four transposed vectors o (token 4L + k of 16 at y,
 * dims at `dim`), with the group's 16 token scales sc. */
static KVQ_TARGET_AVX512 KVQ_ALWAYS_INLINE void emit_tokens(const int q8, const int flip, const __m512i o[4],
                                                             __m512 tab, const float sc[16], int d, int dim,
                                                             float *y) {
    for (int k = 0; k < 4; k++)
        for (int L = 0; L < 4; L++) emit(q8, flip, o[k], L, tab, sc[4 * L + k], y + (size_t)(4 * L + k) * d + dim);
}

static KVQ_TARGET_AVX512 KVQ_ALWAYS_INLINE __m512i bytes_srl(__m512i v, int n, int mask) {
    return _mm512_and_si512(_mm512_srli_epi32(v, (unsigned)n), _mm512_set1_epi8((char)mask));
}

/* Slots e (dword 0) and 4 + e (dword 1) of 3-bit triples, one index per
 * byte, from x whose dwords 0..2 in each 128-bit lane are a token's bytes
 * of the triple (tile_layout.c rot3_walk): slot s < 6 is bits 3 (s % 2)..
 * of dword s / 2, slot 6 (7) bits 6-7 of dword 0 (1) and bit 6 (7) of
 * dword 2. */
static KVQ_TARGET_AVX512 KVQ_ALWAYS_INLINE __m512i rot3_fields(__m512i x, int e) {
    const __m512i lane = _mm512_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12);
    const int top = e >= 2; /* slot 4 + e: 6 or 7 */
    const __m512i src = _mm512_permutexvar_epi32(_mm512_add_epi32(lane, _mm512_set4_epi32(3, 3, top ? e - 2 : 2, e / 2)), x);
    __m512i f = _mm512_and_si512(_mm512_srlv_epi32(src, _mm512_set4_epi32(0, 0, top ? 6 : 3 * e, 3 * (e % 2))),
                                 _mm512_set4_epi32(0, 0, top ? 0x03030303 : 0x07070707, 0x07070707));
    if (top) {
        const __m512i b2 = _mm512_permutexvar_epi32(_mm512_add_epi32(lane, _mm512_set1_epi32(2)), x);
        f = _mm512_or_si512(f, _mm512_and_si512(_mm512_srlv_epi32(b2, _mm512_set4_epi32(0, 0, e + 2, 0)),
                                                _mm512_set4_epi32(0, 0, 0x04040404, 0)));
    }
    return f;
}

/* Codes of K group g (16 tokens, dims 32-dim block at a time) of kind
 * (b = 0 for the ggml q4_0 / iq4_nl nibbles, 8 for q8_0, else rotated bits). */
static KVQ_TARGET_AVX512 KVQ_ALWAYS_INLINE void k_group(const int b, const uint8_t *grp, int d, __m512 tab,
                                                         const float *sc_of_block, int sc_stride, float *y) {
#define VEC(m) _mm512_loadu_si512(grp + 64 * (size_t)(m))
    const __m512i zero = _mm512_setzero_si512();
    if (b == 8) { /* q8_0: vector 8 blk + m holds dims 4m.. */
        for (int blk = 0; blk < d / 32; blk++) {
            const float *sc = sc_of_block + (size_t)blk * sc_stride;
            __m512i o[4];
            transpose4(VEC(8 * blk), VEC(8 * blk + 1), VEC(8 * blk + 2), VEC(8 * blk + 3), o);
            emit_tokens(1, 1, o, tab, sc, d, 32 * blk, y);
            transpose4(VEC(8 * blk + 4), VEC(8 * blk + 5), VEC(8 * blk + 6), VEC(8 * blk + 7), o);
            emit_tokens(1, 1, o, tab, sc, d, 32 * blk + 16, y);
        }
    } else if (b == 0 || b == 4) { /* vector 4 blk + m: low nibbles dims 8m + j, high 8m + 4 + j */
        for (int blk = 0; blk < d / 32; blk++) {
            const float *sc = sc_of_block + (size_t)blk * sc_stride;
            __m512i o[4], lo[4], hi[4];
            transpose4(VEC(4 * blk), VEC(4 * blk + 1), VEC(4 * blk + 2), VEC(4 * blk + 3), o);
            for (int k = 0; k < 4; k++) {
                const __m512i l = bytes_srl(o[k], 0, 15), h = bytes_srl(o[k], 4, 15);
                lo[k] = _mm512_unpacklo_epi32(l, h);
                hi[k] = _mm512_unpackhi_epi32(l, h);
            }
            emit_tokens(0, 0, lo, tab, sc, d, 32 * blk, y);
            emit_tokens(0, 0, hi, tab, sc, d, 32 * blk + 16, y);
        }
    } else if (b == 2) { /* vector m: byte j bits 2k = dim 16m + 4k + j */
        for (int c = 0; c < d / 64; c++) {
            __m512i o[4];
            transpose4(VEC(4 * c), VEC(4 * c + 1), VEC(4 * c + 2), VEC(4 * c + 3), o);
            for (int k = 0; k < 4; k++) {
                __m512i f[4];
                /* transposing the fields of token 4L + k: dword m of f is dims 16m + 4k' + j, k' = 0..3 */
                transpose4(bytes_srl(o[k], 0, 3), bytes_srl(o[k], 2, 3), bytes_srl(o[k], 4, 3), bytes_srl(o[k], 6, 3), f);
                for (int m = 0; m < 4; m++)
                    for (int L = 0; L < 4; L++)
                        emit(0, 0, f[m], L, tab, sc_of_block[4 * L + k], y + (size_t)(4 * L + k) * d + 64 * c + 16 * m);
            }
        }
    } else { /* b == 3: per 32 dims c, vectors 3c.. a triple per byte, slot k: dims 4k + j (rot3_walk) */
        for (int c = 0; c < d / 32; c++) {
            __m512i o[4];
            transpose4(VEC(3 * c), VEC(3 * c + 1), VEC(3 * c + 2), zero, o);
            for (int k = 0; k < 4; k++) {
                __m512i f[4], r[4];
                for (int e = 0; e < 4; e++) f[e] = rot3_fields(o[k], e);
                transpose4(f[0], f[1], f[2], f[3], r); /* r[hh]: dims 16hh.. of token 4L + k */
                for (int hh = 0; hh < 2; hh++)
                    for (int L = 0; L < 4; L++)
                        emit(0, 0, r[hh], L, tab, sc_of_block[4 * L + k], y + (size_t)(4 * L + k) * d + 32 * c + 16 * hh);
            }
        }
    }
#undef VEC
}

/* The 16 fp16 scales at p (stride 2 bytes) as floats. */
static void scales16(const uint8_t *p, float sc[16]) {
    for (int t = 0; t < 16; t++) sc[t] = kvq_f16_to_f32(kvq_load_u16(p + 2 * t));
}

/* q4_1 / q5_0 / q5_1 tiles (off: q5_0's 16; five: the fifth bits; min: the
 * m after the d). K: q4_0's nibbles as k_group sorts them, per token 16
 * dims a lane in dwords of 4; the fifth bits' dword of token 4L + k (byte
 * j bit k': dim 4k' + j) broadcast to its lane, dword p shifted by p (dims
 * 4p..) or 4 + p (dims 16 + 4p..) puts each byte's bit on bit 0. */
static KVQ_TARGET_AVX512 KVQ_ALWAYS_INLINE void decode_k_lin(const int five, const int off, const int min,
                                                              const kvq_codec *codec, int T, const uint8_t *tile,
                                                              float *y) {
    const int d = codec->head_dim, nb = d / 32, cb = five ? 20 : 16;
    const size_t gb = (size_t)16 * nb * (cb + 2 + 2 * min), gc = (size_t)16 * nb * cb;
    const __m512i quads = _mm512_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12);
    const __m512i shift[2] = {_mm512_setr_epi32(0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3),
                              _mm512_setr_epi32(4, 5, 6, 7, 4, 5, 6, 7, 4, 5, 6, 7, 4, 5, 6, 7)};
    for (int g = 0; g < T / 16; g++) {
        const uint8_t *grp = tile + g * gb;
        for (int blk = 0; blk < nb; blk++) {
            float sc[16], mc[16] = {0};
            scales16(grp + gc + 32 * blk, sc);
            if (min) scales16(grp + gc + 32 * (size_t)(nb + blk), mc);
            const __m512i *v = (const __m512i *)(const void *)(grp + 64 * (size_t)(4 * blk));
            __m512i o[4];
            transpose4(_mm512_loadu_si512(v), _mm512_loadu_si512(v + 1), _mm512_loadu_si512(v + 2),
                       _mm512_loadu_si512(v + 3), o);
            const __m512i hv = five ? _mm512_loadu_si512(grp + 256 * (size_t)nb + 64 * (size_t)blk) : _mm512_setzero_si512();
            for (int k = 0; k < 4; k++) {
                const __m512i l = bytes_srl(o[k], 0, 15), h = bytes_srl(o[k], 4, 15);
                __m512i x[2] = {_mm512_unpacklo_epi32(l, h), _mm512_unpackhi_epi32(l, h)}; /* dims 0.., 16.. */
                if (five) {
                    const __m512i f = _mm512_permutexvar_epi32(_mm512_add_epi32(quads, _mm512_set1_epi32(k)), hv);
                    for (int u = 0; u < 2; u++)
                        x[u] = _mm512_or_si512(x[u], _mm512_slli_epi32(_mm512_and_si512(_mm512_srlv_epi32(f, shift[u]),
                                                                                        _mm512_set1_epi8(1)), 4));
                }
                for (int u = 0; u < 2; u++)
                    for (int L = 0; L < 4; L++)
                        emit_lin(off, min, x[u], L, sc[4 * L + k], mc[4 * L + k],
                                 y + (size_t)(16 * g + 4 * L + k) * d + 32 * blk + 16 * u);
            }
        }
    }
}

/* V: q4_0's nibbles through quad_tokens; the fifth bits' vector of the 16
 * tokens (byte 4l + i bit 2 (j % 4) + h) through quad_tokens too. */
static KVQ_TARGET_AVX512 KVQ_ALWAYS_INLINE void decode_v_lin(const int five, const int off, const int min,
                                                              const kvq_codec *codec, int T, const uint8_t *tile,
                                                              float *y) {
    const int d = codec->head_dim, nb = d / 32, cb = five ? 20 : 16;
    const uint8_t *scales = tile + (size_t)T * nb * cb, *mins = scales + 2 * (size_t)nb * T;
    for (int j = 0; j < T / 4; j++)
        for (int blk = 0; blk < nb; blk++) {
            float s[4], m[4] = {0};
            for (int i = 0; i < 4; i++) {
                s[i] = kvq_f16_to_f32(kvq_load_u16(scales + 2 * ((size_t)blk * T + 4 * j + i)));
                if (min) m[i] = kvq_f16_to_f32(kvq_load_u16(mins + 2 * ((size_t)blk * T + 4 * j + i)));
            }
            const __m512i x = quad_tokens(tile + 64 * ((size_t)j * nb + blk));
            __m512i lo = bytes_srl(x, 0, 15), hi = bytes_srl(x, 4, 15);
            if (five) {
                const __m512i f = quad_tokens(tile + (size_t)T * nb * 16 + 64 * ((size_t)(j / 4) * nb + blk));
                lo = _mm512_or_si512(lo, _mm512_slli_epi32(bytes_srl(f, 2 * (j % 4), 1), 4));
                hi = _mm512_or_si512(hi, _mm512_slli_epi32(bytes_srl(f, 2 * (j % 4) + 1, 1), 4));
            }
            float *yq = y + (size_t)4 * j * d + 32 * blk;
            for (int i = 0; i < 4; i++) {
                emit_lin(off, min, lo, i, s[i], m[i], yq + (size_t)i * d);
                emit_lin(off, min, hi, i, s[i], m[i], yq + (size_t)i * d + 16);
            }
        }
}

static KVQ_TARGET_AVX512 KVQ_ALWAYS_INLINE void decode_k(const int b, const kvq_codec *codec, int T, const uint8_t *tile,
                                                          __m512 tab, float *y) {
    const int d = codec->head_dim, nb = d / 32;
    float sc[KVQ_MAX_HEAD_DIM / 32][16];
    for (int g = 0; g < T / 16; g++) {
        float *yg = y + (size_t)16 * g * d;
        if (b == 0 || b == 8) {
            const size_t gb = (size_t)16 * nb * (b == 8 ? 34 : 18), gc = (size_t)16 * nb * (b == 8 ? 32 : 16);
            const uint8_t *grp = tile + g * gb;
            for (int blk = 0; blk < nb; blk++) scales16(grp + gc + 32 * blk, sc[blk]);
            k_group(b, grp, d, tab, sc[0], 16, yg);
        } else {
            const size_t rb = 2 + (size_t)d * b / 8;
            const uint8_t *grp = tile + g * 16 * rb;
            scales16(grp + 2 * (size_t)d * b, sc[0]);
            k_group(b, grp, d, tab, sc[0], 0, yg);
        }
    }
}

static KVQ_TARGET_AVX512 KVQ_ALWAYS_INLINE void decode_v(const int b, const kvq_codec *codec, int T, const uint8_t *tile,
                                                          __m512 tab, float *y) {
    const int d = codec->head_dim, nb = d / 32, nc = d / 64;
    if (b == 0 || b == 8) {
        const uint8_t *scales = tile + (size_t)T * nb * (b == 8 ? 32 : 16);
        for (int j = 0; j < T / 4; j++)
            for (int blk = 0; blk < nb; blk++) {
                float s[4];
                for (int i = 0; i < 4; i++) s[i] = kvq_f16_to_f32(kvq_load_u16(scales + 2 * ((size_t)blk * T + 4 * j + i)));
                float *yq = y + (size_t)4 * j * d + 32 * blk;
                if (b == 8) {
                    for (int h = 0; h < 2; h++) {
                        const __m512i x = quad_tokens(tile + 64 * ((size_t)j * 2 * nb + 2 * blk + h));
                        for (int i = 0; i < 4; i++) emit(1, 0, x, i, tab, s[i], yq + (size_t)i * d + 16 * h);
                    }
                } else {
                    const __m512i x = quad_tokens(tile + 64 * ((size_t)j * nb + blk));
                    const __m512i lo = bytes_srl(x, 0, 15), hi = bytes_srl(x, 4, 15);
                    for (int i = 0; i < 4; i++) {
                        emit(0, 0, lo, i, tab, s[i], yq + (size_t)i * d);
                        emit(0, 0, hi, i, tab, s[i], yq + (size_t)i * d + 16);
                    }
                }
            }
        return;
    }
    const uint8_t *scales = tile + (size_t)T * d * b / 8;
    if (b == 4) { /* q4_0's layout, one scale per row */
        for (int j = 0; j < T / 4; j++) {
            float s[4];
            for (int i = 0; i < 4; i++) s[i] = kvq_f16_to_f32(kvq_load_u16(scales + 2 * ((size_t)4 * j + i)));
            for (int blk = 0; blk < nb; blk++) {
                const __m512i x = quad_tokens(tile + 64 * ((size_t)j * nb + blk));
                const __m512i lo = bytes_srl(x, 0, 15), hi = bytes_srl(x, 4, 15);
                float *yq = y + (size_t)4 * j * d + 32 * blk;
                for (int i = 0; i < 4; i++) {
                    emit(0, 0, lo, i, tab, s[i], yq + (size_t)i * d);
                    emit(0, 0, hi, i, tab, s[i], yq + (size_t)i * d + 16);
                }
            }
        }
        return;
    }
    for (int o = 0; o < T / 8; o++) { /* b = 2, 3: an octet of tokens (two quads) at a time */
        float s[8];
        for (int i = 0; i < 8; i++) s[i] = kvq_f16_to_f32(kvq_load_u16(scales + 2 * ((size_t)8 * o + i)));
        for (int c = 0; c < nc; c++) {
            if (b == 2) {
                for (int h = 0; h < 2; h++) {
                    const __m512i x = quad_tokens(tile + 64 * ((size_t)(2 * o + h) * nc + c));
                    for (int k = 0; k < 4; k++)
                        for (int i = 0; i < 4; i++)
                            emit(0, 0, bytes_srl(x, 2 * k, 3), i, tab, s[4 * h + i],
                                 y + (size_t)(8 * o + 4 * h + i) * d + 64 * c + 16 * k);
                }
                continue;
            }
            /* b = 3: slot 4h + k (quad h, dims 16k..) of the triple (rot3_walk) */
            const uint8_t *v3 = tile + 64 * 3 * ((size_t)o * nc + c);
            const __m512i x[3] = {quad_tokens(v3), quad_tokens(v3 + 64), quad_tokens(v3 + 128)};
            for (int sl = 0; sl < 8; sl++) {
                const __m512i f = sl < 6 ? bytes_srl(x[sl / 2], 3 * (sl % 2), 7)
                                         : _mm512_or_si512(bytes_srl(x[sl - 6], 6, 3),
                                                           _mm512_slli_epi32(bytes_srl(x[2], sl, 1), 2));
                for (int i = 0; i < 4; i++)
                    emit(0, 0, f, i, tab, s[4 * (sl / 4) + i], y + (size_t)(8 * o + 4 * (sl / 4) + i) * d + 64 * c + 16 * (sl % 4));
            }
        }
    }
}

#define DECODE_SIDES(B) (side == 0 ? decode_k(B, c, T, tile, tab, y) : decode_v(B, c, T, tile, tab, y))

KVQ_TARGET_AVX512 void kvq_kv_tile_decode_avx512(const kvq_codec *c, int side, int T, const uint8_t *tile, float *y) {
    float t[16];
    int b;
    if (c->desc->family == &kvq_family_rot) {
        b = c->desc->param;
        for (int j = 0; j < 16; j++) t[j] = ((const kvq_rot_state *)c->state)->centroid[j];
    } else if (c->desc->param == KVQ_GGML_Q4_1 || c->desc->param == KVQ_GGML_Q5_0 || c->desc->param == KVQ_GGML_Q5_1) {
#define LIN_SIDES(FIVE, OFF, MIN) \
    (side == 0 ? decode_k_lin(FIVE, OFF, MIN, c, T, tile, y) : decode_v_lin(FIVE, OFF, MIN, c, T, tile, y))
        switch (c->desc->param) {
        case KVQ_GGML_Q4_1: LIN_SIDES(0, 0, 1); break;
        case KVQ_GGML_Q5_0: LIN_SIDES(1, 16, 0); break;
        default: LIN_SIDES(1, 0, 1); break;
        }
#undef LIN_SIDES
        return;
    } else {
        b = c->desc->param == KVQ_GGML_Q8_0 ? 8 : 0;
        for (int j = 0; j < 16; j++) t[j] = c->desc->param == KVQ_GGML_IQ4_NL ? (float)kvq_iq4nl_values[j] : (float)(j - 8);
    }
    const __m512 tab = _mm512_loadu_ps(t);
    switch (b) {
    case 8: DECODE_SIDES(8); break;
    case 2: DECODE_SIDES(2); break;
    case 3: DECODE_SIDES(3); break;
    case 4: DECODE_SIDES(4); break;
    default: DECODE_SIDES(0); break;
    }
}
#undef DECODE_SIDES

/* ---------------------------------------------------------------- pack */

/* The rotated codecs' pack (every flush), the same bytes as
 * kvq_kv_tile_pack: rows' b-bit indices spread to one byte each (BMI2 pdep:
 * 8 indices from b bytes), then tile_layout.c's walk done on vectors: K by a
 * 16 x 16 dword transpose of 16 tokens x 64 dims, V by a 4 x 4 transpose of
 * 128-bit lanes and the inverse of quad_tokens' shuffles. The scalar walk
 * took as long as the encode (turbo3, head_dim 64: 130 ns a row). */
#define PACK_TARGET __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,bmi2")))

static PACK_TARGET KVQ_ALWAYS_INLINE void unpack_row(const int b, int d, const uint8_t *packed, uint8_t *idx) {
    const uint64_t mask = 0x0101010101010101ull * ((1u << b) - 1);
    /* Up to 16 groups of 8 indices (16 b bytes) at a time through one vector
     * store, so the 8-byte loads below forward from it (3-byte copies into a
     * word stalled on store forwarding: 50 vs 6 ns a row). */
    _Alignas(64) uint8_t buf[128]; /* the last 8-byte load of b = 4 ends at byte 68 */
    _mm512_store_si512(buf + 64, _mm512_setzero_si512());
    for (int g0 = 0; g0 < d / 8; g0 += 16) {
        const int ng = d / 8 - g0 < 16 ? d / 8 - g0 : 16, n = ng * b;
        _mm512_store_si512(buf, _mm512_maskz_loadu_epi8(n == 64 ? ~0ull : (1ull << n) - 1, packed + (size_t)g0 * b));
        for (int g = 0; g < ng; g++) {
            uint64_t w; /* little-endian (x86): index i at bits [i b, i b + b); pdep takes the low 8 b */
            memcpy(&w, buf + g * b, 8);
            const uint64_t x = _pdep_u64(w, mask);
            memcpy(idx + 8 * (g0 + g), &x, 8);
        }
    }
}

/* v << n for bytes whose values fit in 8 - n bits (nothing crosses a byte). */
static PACK_TARGET KVQ_ALWAYS_INLINE __m512i shl(__m512i v, int n) { return _mm512_slli_epi32(v, (unsigned)n); }
static PACK_TARGET KVQ_ALWAYS_INLINE __m512i low2(__m512i v) { return _mm512_and_si512(v, _mm512_set1_epi8(3)); }
static PACK_TARGET KVQ_ALWAYS_INLINE __m512i bit2(__m512i v) {
    return _mm512_and_si512(_mm512_srli_epi32(v, 2), _mm512_set1_epi8(1));
}

/* Eight slots e[0..7] of 3-bit indices (one per byte) as the byte triple
 * vectors at v, v + 64, v + 128 (tile_layout.c rot3_walk). */
static PACK_TARGET KVQ_ALWAYS_INLINE void store_rot3(const __m512i e[8], uint8_t *v) {
    _mm512_storeu_si512(v, _mm512_or_si512(_mm512_or_si512(e[0], shl(e[1], 3)), shl(low2(e[6]), 6)));
    _mm512_storeu_si512(v + 64, _mm512_or_si512(_mm512_or_si512(e[2], shl(e[3], 3)), shl(low2(e[7]), 6)));
    _mm512_storeu_si512(v + 128, _mm512_or_si512(_mm512_or_si512(e[4], shl(e[5], 3)),
                                                 _mm512_or_si512(shl(bit2(e[6]), 6), shl(bit2(e[7]), 7))));
}

/* 4 x 4 transpose of 128-bit lanes: lane i of o[u] = lane u of x[i]. */
static PACK_TARGET KVQ_ALWAYS_INLINE void lanes4(const __m512i x[4], __m512i o[4]) {
    const __m512i y0 = _mm512_shuffle_i32x4(x[0], x[1], 0x44), y1 = _mm512_shuffle_i32x4(x[0], x[1], 0xEE);
    const __m512i y2 = _mm512_shuffle_i32x4(x[2], x[3], 0x44), y3 = _mm512_shuffle_i32x4(x[2], x[3], 0xEE);
    o[0] = _mm512_shuffle_i32x4(y0, y2, 0x88);
    o[1] = _mm512_shuffle_i32x4(y0, y2, 0xDD);
    o[2] = _mm512_shuffle_i32x4(y1, y3, 0x88);
    o[3] = _mm512_shuffle_i32x4(y1, y3, 0xDD);
}

/* D[m], m = 0..15: dword t = dword m of r[t] (dims 4m.. of token t). */
static PACK_TARGET KVQ_ALWAYS_INLINE void transpose16(const __m512i r[16], __m512i D[16]) {
    __m512i a[16], c[16];
    for (int i = 0; i < 16; i += 2) {
        a[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        a[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    /* c[4q + k], lane L: tokens 4q..4q+3 of dword 4L + pos[k]. */
    static const int pos[4] = {0, 2, 1, 3};
    for (int i = 0; i < 16; i += 4)
        for (int k = 0; k < 2; k++) {
            c[i + k] = _mm512_unpacklo_epi64(a[i + k], a[i + 2 + k]);
            c[i + 2 + k] = _mm512_unpackhi_epi64(a[i + k], a[i + 2 + k]);
        }
    for (int k = 0; k < 4; k++) {
        const __m512i x[4] = {c[k], c[4 + k], c[8 + k], c[12 + k]};
        __m512i o[4];
        lanes4(x, o);
        for (int L = 0; L < 4; L++) D[4 * L + pos[k]] = o[L];
    }
}

/* K group of 16 tokens (idx: (16, d)) -> its code vectors at grp. */
static PACK_TARGET KVQ_ALWAYS_INLINE void pack_k_group(const int b, int d, const uint8_t *idx, uint8_t *grp) {
    for (int q = 0; q < d / 64; q++) {
        __m512i r[16], D[16];
        for (int t = 0; t < 16; t++) r[t] = _mm512_loadu_si512(idx + (size_t)t * d + 64 * q);
        transpose16(r, D);
        if (b == 4) {
            for (int u = 0; u < 8; u++)
                _mm512_storeu_si512(grp + 64 * (size_t)(8 * q + u), _mm512_or_si512(D[2 * u], shl(D[2 * u + 1], 4)));
        } else if (b == 2) {
            for (int u = 0; u < 4; u++)
                _mm512_storeu_si512(grp + 64 * (size_t)(4 * q + u),
                                    _mm512_or_si512(_mm512_or_si512(D[4 * u], shl(D[4 * u + 1], 2)),
                                                    _mm512_or_si512(shl(D[4 * u + 2], 4), shl(D[4 * u + 3], 6))));
        } else {
            for (int cc = 0; cc < 2; cc++) { /* 32 dims c = 2q + cc: slot k is D[8 cc + k] (tile_layout.c rot3_walk) */
                store_rot3(D + 8 * cc, grp + 64 * (size_t)(3 * (2 * q + cc)));
            }
        }
    }
}

/* V octet of 8 tokens (idx: (8, d)) -> its code vectors at base. */
static PACK_TARGET KVQ_ALWAYS_INLINE void pack_v_octet(const int b, int d, const uint8_t *idx, uint8_t *base) {
    for (int c = 0; c < d / 64; c++) {
        __m512i P[8]; /* P[4h + u]: quad h, dims 64c + 16u.. */
        for (int h = 0; h < 2; h++) { /* quad h: tokens 4h.. */
            __m512i R[4], T4[4];
            for (int i = 0; i < 4; i++) R[i] = _mm512_loadu_si512(idx + (size_t)(4 * h + i) * d + 64 * c);
            lanes4(R, T4);
            /* byte 4l + i: token 4h + i, dim 64c + 16u + l */
            for (int u = 0; u < 4; u++) P[4 * h + u] = transpose_bytes(transpose_dwords(T4[u]));
            if (b == 4) {
                for (int w = 0; w < 2; w++)
                    _mm512_storeu_si512(base + 64 * ((size_t)h * (d / 32) + 2 * c + w),
                                        _mm512_or_si512(P[4 * h + 2 * w], shl(P[4 * h + 2 * w + 1], 4)));
            } else if (b == 2) {
                _mm512_storeu_si512(base + 64 * ((size_t)h * (d / 64) + c),
                                    _mm512_or_si512(_mm512_or_si512(P[4 * h], shl(P[4 * h + 1], 2)),
                                                    _mm512_or_si512(shl(P[4 * h + 2], 4), shl(P[4 * h + 3], 6))));
            }
        }
        if (b == 3) store_rot3(P, base + 64 * (3 * (size_t)c)); /* slot 4h + u is P[4h + u] (rot3_walk) */
    }
}

static PACK_TARGET KVQ_ALWAYS_INLINE void pack_rot(const int b, const int side, const kvq_codec *c, int T,
                                                    const uint8_t *rows, uint8_t *tile) {
    const int d = c->head_dim, span = side ? 8 : 16;
    const size_t rb = c->row_bytes;
    _Alignas(64) uint8_t idx[16 * KVQ_MAX_HEAD_DIM]; /* (span, d) */
    for (int g = 0; g < T / span; g++) {
        for (int t = 0; t < span; t++) {
            const int r = span * g + t;
            const uint8_t *row = rows + (size_t)r * rb;
            unpack_row(b, d, row + 2, idx + (size_t)t * d);
            /* the row's fp16 scale: K after its group's codes, V after all codes */
            memcpy(tile + (side == 0 ? (size_t)g * 16 * rb + 2 * (size_t)d * b + 2 * (size_t)t
                                     : (size_t)T * d * b / 8 + 2 * (size_t)r),
                   row, 2);
        }
        if (side == 0) pack_k_group(b, d, idx, tile + (size_t)g * 16 * rb);
        else pack_v_octet(b, d, idx, tile + (size_t)g * d * b);
    }
}

#define PACK_SIDES(B) (side == 0 ? pack_rot(B, 0, c, T, rows, tile) : pack_rot(B, 1, c, T, rows, tile))

PACK_TARGET void kvq_kv_tile_pack_avx512(const kvq_codec *c, int side, int T, const uint8_t *rows, uint8_t *tile) {
    if (c->desc->family != &kvq_family_rot || c->head_dim % 64) {
        kvq_kv_tile_pack(c, side, T, rows, tile);
        return;
    }
    switch (c->desc->param) {
    case 2: PACK_SIDES(2); break;
    case 3: PACK_SIDES(3); break;
    default: PACK_SIDES(4); break;
    }
}
#undef PACK_SIDES

#endif
