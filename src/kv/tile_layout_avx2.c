/* tile_layout_avx2.c — a whole interleaved tile (layouts: tile_layout.c)
 * decoded to floats with AVX2, bit-exact with kvq_kv_tile_decode: the same
 * one product code value x fp16 scale. The scales convert by F16C, which
 * gives the scalar kvq_f16_to_f32's bits for all 65536 inputs (NaNs
 * quieted, payload kept, by both); one scale at a time, as the AVX-512
 * file does, the q4_1 / q5_1 K tiles took half as long again. The port of
 * tile_layout_avx512.c's decode to 256-bit vectors, for the scratch paths
 * of AVX2-only CPUs.
 *
 * Both sides end in vectors whose 128-bit lanes hold 16 codes of one token
 * over 16 consecutive dims (emit):
 *   K: the 64-byte vector of a group is two halves of 8 tokens; a half's
 *      dword lanes are tokens, a 4 x 4 dword transpose of four halves
 *      (within 128-bit lanes) gives per token its four dwords, which hold
 *      16 codes to sort (nibbles, 2-bit fields, high bits);
 *   V: a vector's dword lane l holds byte l of 4 tokens; one vpshufb per
 *      half, one dword permutation each and a qword unpack give per token
 *      its 16 bytes, l in order, in one lane of two vectors.
 * Where AVX-512 looks codes up in 16 floats with one vpermps, AVX2 has 8:
 * the ggml 4-bit kinds' values are int8, so one vpshufb maps the codes to
 * them and they convert as q8_0's; the rotated codecs' centroids take one
 * vpermps (2, 3 bits) or two and a blend (4 bits).
 * q4_1, q5_0 and q5_1 (emit_lin: code x d + m computed, not looked up) add
 * their fifth bits to the nibbles in those same lanes. */
#include "codec/ggml_blocks.h"
#include "codec/rotated.h"
#include "kv/kvstore.h"

#if KVQ_HAVE_X86
#include <immintrin.h>

/* What a code means (emit): the int8 values of the ggml 4-bit codes, or
 * the rotated codecs' centroids 0..7 and 8..15. */
typedef struct table {
    __m128i book;
    __m256 lo, hi;
} table;

/* (a, b, c, d) in every 128-bit lane, dword 0 first. */
static KVQ_TARGET_AVX2 KVQ_ALWAYS_INLINE __m256i rep4(int a, int b, int c, int d) {
    return _mm256_setr_epi32(a, b, c, d, a, b, c, d);
}

/* a, b, c, d -> o_k: in lane L, dwords (a, b, c, d)[4L + k]. */
static KVQ_TARGET_AVX2 KVQ_ALWAYS_INLINE void transpose4(__m256i a, __m256i b, __m256i c, __m256i d, __m256i o[4]) {
    const __m256i t0 = _mm256_unpacklo_epi32(a, b), t1 = _mm256_unpackhi_epi32(a, b);
    const __m256i t2 = _mm256_unpacklo_epi32(c, d), t3 = _mm256_unpackhi_epi32(c, d);
    o[0] = _mm256_unpacklo_epi64(t0, t2);
    o[1] = _mm256_unpackhi_epi64(t0, t2);
    o[2] = _mm256_unpacklo_epi64(t1, t3);
    o[3] = _mm256_unpackhi_epi64(t1, t3);
}

/* A V vector (64 bytes at p) -> lane L of x[h]: token 2h + L's 16 bytes.
 * After the byte transpose, dword i of each 128-bit lane holds token i's
 * four bytes of that lane's dims; the permutation pairs a token's two
 * dwords of a half into one qword (tokens 0, 2 in the low lane, 1, 3 in
 * the high), and the unpacks join the two halves' qwords. */
static KVQ_TARGET_AVX2 KVQ_ALWAYS_INLINE void quad_tokens(const uint8_t *p, __m256i x[2]) {
    const __m256i bytes = _mm256_broadcastsi128_si256(_mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15));
    const __m256i pairs = _mm256_setr_epi32(0, 4, 2, 6, 1, 5, 3, 7);
    const __m256i a = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(_mm256_loadu_si256((const __m256i *)p), bytes), pairs);
    const __m256i b = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(_mm256_loadu_si256((const __m256i *)(p + 32)), bytes), pairs);
    x[0] = _mm256_unpacklo_epi64(a, b);
    x[1] = _mm256_unpackhi_epi64(a, b);
}

/* 128-bit lane L of v. */
static KVQ_TARGET_AVX2 KVQ_ALWAYS_INLINE __m128i lane(__m256i v, int L) {
    return L == 0 ? _mm256_castsi256_si128(v) : _mm256_extracti128_si256(v, 1); /* the lane index must be a constant */
}

/* 16 codes (lane L of v) -> y[0..15] = value(code) x s. b = 8: s8 codes
 * (flip: stored as u8 = s8 + 128); 0: ggml 4-bit codes, int8 values by
 * tab.book; 2, 3, 4: rotated indices, centroids by tab.lo (and tab.hi). */
static KVQ_TARGET_AVX2 KVQ_ALWAYS_INLINE void emit(const int b, const int flip, __m256i v, int L, table tab, float s,
                                                    float *y) {
    __m128i x = lane(v, L);
    if (b == 0) x = _mm_shuffle_epi8(tab.book, x);
    if (b == 8 && flip) x = _mm_xor_si128(x, _mm_set1_epi8((char)0x80));
    const __m128i half[2] = {x, _mm_unpackhi_epi64(x, x)};
    for (int h = 0; h < 2; h++) {
        __m256 f;
        if (b == 0 || b == 8) {
            f = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(half[h]));
        } else {
            const __m256i i = _mm256_cvtepu8_epi32(half[h]);
            f = _mm256_permutevar8x32_ps(tab.lo, i);
            if (b == 4) /* bit 3 of the index picks the upper eight */
                f = _mm256_blendv_ps(f, _mm256_permutevar8x32_ps(tab.hi, i), _mm256_castsi256_ps(_mm256_slli_epi32(i, 28)));
        }
        _mm256_storeu_ps(y + 8 * h, _mm256_mul_ps(f, _mm256_set1_ps(s)));
    }
}

/* 16 u8 codes (lane L of v) of q4_1, q5_0 or q5_1 -> y[0..15] = (code -
 * off) x s, + mn where min: the operations of their row decode (a mul and
 * an add, not an FMA: the row decode rounds the product). */
static KVQ_TARGET_AVX2 KVQ_ALWAYS_INLINE void emit_lin(const int off, const int min, __m256i v, int L, float s,
                                                        float mn, float *y) {
    const __m128i x = lane(v, L), half[2] = {x, _mm_unpackhi_epi64(x, x)};
    for (int h = 0; h < 2; h++) {
        const __m256i c = _mm256_sub_epi32(_mm256_cvtepu8_epi32(half[h]), _mm256_set1_epi32(off));
        __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(c), _mm256_set1_ps(s));
        if (min) f = _mm256_add_ps(f, _mm256_set1_ps(mn));
        _mm256_storeu_ps(y + 8 * h, f);
    }
}

/* Every lane of the four transposed vectors o (token 4L + k of 8 at y,
 * dims at `dim`), with the half's 8 token scales sc. */
static KVQ_TARGET_AVX2 KVQ_ALWAYS_INLINE void emit_tokens(const int b, const int flip, const __m256i o[4], table tab,
                                                           const float *sc, int d, int dim, float *y) {
    for (int k = 0; k < 4; k++)
        for (int L = 0; L < 2; L++) emit(b, flip, o[k], L, tab, sc[4 * L + k], y + (size_t)(4 * L + k) * d + dim);
}

static KVQ_TARGET_AVX2 KVQ_ALWAYS_INLINE __m256i bytes_srl(__m256i v, int n, int mask) {
    return _mm256_and_si256(_mm256_srli_epi32(v, n), _mm256_set1_epi8((char)mask));
}

/* Slots e (dword 0) and 4 + e (dword 1) of 3-bit triples, one index per
 * byte, from x whose dwords 0..2 in each 128-bit lane are a token's bytes
 * of the triple (tile_layout.c rot3_walk): slot s < 6 is bits 3 (s % 2)..
 * of dword s / 2, slot 6 (7) bits 6-7 of dword 0 (1) and bit 6 (7) of
 * dword 2. */
static KVQ_TARGET_AVX2 KVQ_ALWAYS_INLINE __m256i rot3_fields(__m256i x, int e) {
    const __m256i lane4 = _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4);
    const int top = e >= 2; /* slot 4 + e: 6 or 7 */
    const __m256i src = _mm256_permutevar8x32_epi32(x, _mm256_add_epi32(lane4, rep4(e / 2, top ? e - 2 : 2, 3, 3)));
    __m256i f = _mm256_and_si256(_mm256_srlv_epi32(src, rep4(3 * (e % 2), top ? 6 : 3 * e, 0, 0)),
                                 rep4(0x07070707, top ? 0x03030303 : 0x07070707, 0, 0));
    if (top) {
        const __m256i b2 = _mm256_permutevar8x32_epi32(x, _mm256_add_epi32(lane4, _mm256_set1_epi32(2)));
        f = _mm256_or_si256(f, _mm256_and_si256(_mm256_srlv_epi32(b2, rep4(0, e + 2, 0, 0)), rep4(0, 0x04040404, 0, 0)));
    }
    return f;
}

/* Codes of 8 tokens of a K group (grp: the group's start + 32 bytes per
 * half), a 32-dim block at a time, of kind b (0 for the ggml q4_0 /
 * iq4_nl nibbles, 8 for q8_0, else rotated bits); sc_of_block: the 8
 * tokens' scales of block 0, sc_stride floats to the next block's. */
static KVQ_TARGET_AVX2 KVQ_ALWAYS_INLINE void k_group(const int b, const uint8_t *grp, int d, table tab,
                                                       const float *sc_of_block, int sc_stride, float *y) {
#define VEC(m) _mm256_loadu_si256((const __m256i *)(grp + 64 * (size_t)(m)))
    const __m256i zero = _mm256_setzero_si256();
    if (b == 8) { /* q8_0: vector 8 blk + m holds dims 4m.. */
        for (int blk = 0; blk < d / 32; blk++) {
            const float *sc = sc_of_block + (size_t)blk * sc_stride;
            __m256i o[4];
            transpose4(VEC(8 * blk), VEC(8 * blk + 1), VEC(8 * blk + 2), VEC(8 * blk + 3), o);
            emit_tokens(8, 1, o, tab, sc, d, 32 * blk, y);
            transpose4(VEC(8 * blk + 4), VEC(8 * blk + 5), VEC(8 * blk + 6), VEC(8 * blk + 7), o);
            emit_tokens(8, 1, o, tab, sc, d, 32 * blk + 16, y);
        }
    } else if (b == 0 || b == 4) { /* vector 4 blk + m: low nibbles dims 8m + j, high 8m + 4 + j */
        for (int blk = 0; blk < d / 32; blk++) {
            const float *sc = sc_of_block + (size_t)blk * sc_stride;
            __m256i o[4], lo[4], hi[4];
            transpose4(VEC(4 * blk), VEC(4 * blk + 1), VEC(4 * blk + 2), VEC(4 * blk + 3), o);
            for (int k = 0; k < 4; k++) {
                const __m256i l = bytes_srl(o[k], 0, 15), h = bytes_srl(o[k], 4, 15);
                lo[k] = _mm256_unpacklo_epi32(l, h);
                hi[k] = _mm256_unpackhi_epi32(l, h);
            }
            emit_tokens(b, 0, lo, tab, sc, d, 32 * blk, y);
            emit_tokens(b, 0, hi, tab, sc, d, 32 * blk + 16, y);
        }
    } else if (b == 2) { /* vector m: byte j bits 2k = dim 16m + 4k + j */
        for (int c = 0; c < d / 64; c++) {
            __m256i o[4];
            transpose4(VEC(4 * c), VEC(4 * c + 1), VEC(4 * c + 2), VEC(4 * c + 3), o);
            for (int k = 0; k < 4; k++) {
                __m256i f[4];
                /* transposing the fields of token 4L + k: dword m of f is dims 16m + 4k' + j, k' = 0..3 */
                transpose4(bytes_srl(o[k], 0, 3), bytes_srl(o[k], 2, 3), bytes_srl(o[k], 4, 3), bytes_srl(o[k], 6, 3), f);
                for (int m = 0; m < 4; m++)
                    for (int L = 0; L < 2; L++)
                        emit(2, 0, f[m], L, tab, sc_of_block[4 * L + k], y + (size_t)(4 * L + k) * d + 64 * c + 16 * m);
            }
        }
    } else { /* b == 3: per 32 dims c, vectors 3c.. a triple per byte, slot k: dims 4k + j (rot3_walk) */
        for (int c = 0; c < d / 32; c++) {
            __m256i o[4];
            transpose4(VEC(3 * c), VEC(3 * c + 1), VEC(3 * c + 2), zero, o);
            for (int k = 0; k < 4; k++) {
                __m256i f[4], r[4];
                for (int e = 0; e < 4; e++) f[e] = rot3_fields(o[k], e);
                transpose4(f[0], f[1], f[2], f[3], r); /* r[hh]: dims 16hh.. of token 4L + k */
                for (int hh = 0; hh < 2; hh++)
                    for (int L = 0; L < 2; L++)
                        emit(3, 0, r[hh], L, tab, sc_of_block[4 * L + k], y + (size_t)(4 * L + k) * d + 32 * c + 16 * hh);
            }
        }
    }
#undef VEC
}

/* The n (4, 8 or 16) consecutive fp16 scales at p as floats. */
static KVQ_TARGET_AVX2 KVQ_ALWAYS_INLINE void scales_f16(const uint8_t *p, const int n, float *sc) {
    if (n == 4) {
        _mm_storeu_ps(sc, _mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)(const void *)p)));
        return;
    }
    for (int i = 0; i < n; i += 8)
        _mm256_storeu_ps(sc + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(p + 2 * i))));
}

/* q4_1 / q5_0 / q5_1 tiles (off: q5_0's 16; five: the fifth bits; min: the
 * m after the d). K: q4_0's nibbles as k_group sorts them, per token 16
 * dims a lane in dwords of 4; the fifth bits' dword of token 4L + k (byte
 * j bit k': dim 4k' + j) broadcast to its lane, dword p shifted by p (dims
 * 4p..) or 4 + p (dims 16 + 4p..) puts each byte's bit on bit 0. */
static KVQ_TARGET_AVX2 KVQ_ALWAYS_INLINE void decode_k_lin(const int five, const int off, const int min,
                                                            const kvq_codec *codec, int T, const uint8_t *tile,
                                                            float *y) {
    const int d = codec->head_dim, nb = d / 32, cb = five ? 20 : 16;
    const size_t gb = (size_t)16 * nb * (cb + 2 + 2 * min), gc = (size_t)16 * nb * cb;
    const __m256i quads = _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4);
    const __m256i shift[2] = {rep4(0, 1, 2, 3), rep4(4, 5, 6, 7)};
    for (int g = 0; g < T / 16; g++) {
        const uint8_t *grp = tile + g * gb;
        for (int blk = 0; blk < nb; blk++) {
            float sc[16], mc[16] = {0};
            scales_f16(grp + gc + 32 * blk, 16, sc);
            if (min) scales_f16(grp + gc + 32 * (size_t)(nb + blk), 16, mc);
            for (int half = 0; half < 2; half++) { /* tokens 8 half.. */
                const uint8_t *v = grp + 64 * (size_t)(4 * blk) + 32 * half;
                __m256i o[4];
                transpose4(_mm256_loadu_si256((const __m256i *)v), _mm256_loadu_si256((const __m256i *)(v + 64)),
                           _mm256_loadu_si256((const __m256i *)(v + 128)), _mm256_loadu_si256((const __m256i *)(v + 192)), o);
                const __m256i hv = five ? _mm256_loadu_si256((const __m256i *)(grp + 256 * (size_t)nb + 64 * (size_t)blk + 32 * half))
                                        : _mm256_setzero_si256();
                for (int k = 0; k < 4; k++) {
                    const __m256i l = bytes_srl(o[k], 0, 15), h = bytes_srl(o[k], 4, 15);
                    __m256i x[2] = {_mm256_unpacklo_epi32(l, h), _mm256_unpackhi_epi32(l, h)}; /* dims 0.., 16.. */
                    if (five) {
                        const __m256i f = _mm256_permutevar8x32_epi32(hv, _mm256_add_epi32(quads, _mm256_set1_epi32(k)));
                        for (int u = 0; u < 2; u++)
                            x[u] = _mm256_or_si256(x[u], _mm256_slli_epi32(_mm256_and_si256(_mm256_srlv_epi32(f, shift[u]),
                                                                                            _mm256_set1_epi8(1)), 4));
                    }
                    for (int u = 0; u < 2; u++)
                        for (int L = 0; L < 2; L++) {
                            const int t = 8 * half + 4 * L + k;
                            emit_lin(off, min, x[u], L, sc[t], mc[t], y + (size_t)(16 * g + t) * d + 32 * blk + 16 * u);
                        }
                }
            }
        }
    }
}

/* V: q4_0's nibbles through quad_tokens; the fifth bits' vector of the 16
 * tokens (byte 4l + i bit 2 (j % 4) + h) through quad_tokens too. */
static KVQ_TARGET_AVX2 KVQ_ALWAYS_INLINE void decode_v_lin(const int five, const int off, const int min,
                                                            const kvq_codec *codec, int T, const uint8_t *tile,
                                                            float *y) {
    const int d = codec->head_dim, nb = d / 32, cb = five ? 20 : 16;
    const uint8_t *scales = tile + (size_t)T * nb * cb, *mins = scales + 2 * (size_t)nb * T;
    for (int j = 0; j < T / 4; j++)
        for (int blk = 0; blk < nb; blk++) {
            float s[4], m[4] = {0};
            scales_f16(scales + 2 * ((size_t)blk * T + 4 * j), 4, s);
            if (min) scales_f16(mins + 2 * ((size_t)blk * T + 4 * j), 4, m);
            __m256i x[2], f[2];
            quad_tokens(tile + 64 * ((size_t)j * nb + blk), x);
            if (five) quad_tokens(tile + (size_t)T * nb * 16 + 64 * ((size_t)(j / 4) * nb + blk), f);
            float *yq = y + (size_t)4 * j * d + 32 * blk;
            for (int q = 0; q < 2; q++) {
                __m256i lo = bytes_srl(x[q], 0, 15), hi = bytes_srl(x[q], 4, 15);
                if (five) {
                    lo = _mm256_or_si256(lo, _mm256_slli_epi32(bytes_srl(f[q], 2 * (j % 4), 1), 4));
                    hi = _mm256_or_si256(hi, _mm256_slli_epi32(bytes_srl(f[q], 2 * (j % 4) + 1, 1), 4));
                }
                for (int L = 0; L < 2; L++) {
                    const int i = 2 * q + L;
                    emit_lin(off, min, lo, L, s[i], m[i], yq + (size_t)i * d);
                    emit_lin(off, min, hi, L, s[i], m[i], yq + (size_t)i * d + 16);
                }
            }
        }
}

static KVQ_TARGET_AVX2 KVQ_ALWAYS_INLINE void decode_k(const int b, const kvq_codec *codec, int T, const uint8_t *tile,
                                                        table tab, float *y) {
    const int d = codec->head_dim, nb = d / 32;
    float sc[KVQ_MAX_HEAD_DIM / 32][16];
    for (int g = 0; g < T / 16; g++) {
        float *yg = y + (size_t)16 * g * d;
        if (b == 0 || b == 8) {
            const size_t gb = (size_t)16 * nb * (b == 8 ? 34 : 18), gc = (size_t)16 * nb * (b == 8 ? 32 : 16);
            const uint8_t *grp = tile + g * gb;
            for (int blk = 0; blk < nb; blk++) scales_f16(grp + gc + 32 * blk, 16, sc[blk]);
            for (int half = 0; half < 2; half++)
                k_group(b, grp + 32 * half, d, tab, sc[0] + 8 * half, 16, yg + (size_t)8 * half * d);
        } else {
            const size_t rb = 2 + (size_t)d * b / 8;
            const uint8_t *grp = tile + g * 16 * rb;
            scales_f16(grp + 2 * (size_t)d * b, 16, sc[0]);
            for (int half = 0; half < 2; half++)
                k_group(b, grp + 32 * half, d, tab, sc[0] + 8 * half, 0, yg + (size_t)8 * half * d);
        }
    }
}

/* One V vector of q4_0's layout (q4_0, iq4_nl: b 0; 4-bit rotated: b 4)
 * at v: 4 tokens x 32 dims, token i's scale s[i], to yq (row stride d). */
static KVQ_TARGET_AVX2 KVQ_ALWAYS_INLINE void nibble_quad(const int b, const uint8_t *v, table tab, const float s[4],
                                                           int d, float *yq) {
    __m256i x[2];
    quad_tokens(v, x);
    for (int q = 0; q < 2; q++) {
        const __m256i lo = bytes_srl(x[q], 0, 15), hi = bytes_srl(x[q], 4, 15);
        for (int L = 0; L < 2; L++) {
            emit(b, 0, lo, L, tab, s[2 * q + L], yq + (size_t)(2 * q + L) * d);
            emit(b, 0, hi, L, tab, s[2 * q + L], yq + (size_t)(2 * q + L) * d + 16);
        }
    }
}

static KVQ_TARGET_AVX2 KVQ_ALWAYS_INLINE void decode_v(const int b, const kvq_codec *codec, int T, const uint8_t *tile,
                                                        table tab, float *y) {
    const int d = codec->head_dim, nb = d / 32, nc = d / 64;
    __m256i x[2];
    if (b == 0 || b == 8) {
        const uint8_t *scales = tile + (size_t)T * nb * (b == 8 ? 32 : 16);
        for (int j = 0; j < T / 4; j++)
            for (int blk = 0; blk < nb; blk++) {
                float s[4];
                scales_f16(scales + 2 * ((size_t)blk * T + 4 * j), 4, s);
                float *yq = y + (size_t)4 * j * d + 32 * blk;
                if (b == 8) {
                    for (int h = 0; h < 2; h++) {
                        quad_tokens(tile + 64 * ((size_t)j * 2 * nb + 2 * blk + h), x);
                        for (int i = 0; i < 4; i++) emit(8, 0, x[i / 2], i % 2, tab, s[i], yq + (size_t)i * d + 16 * h);
                    }
                } else {
                    nibble_quad(0, tile + 64 * ((size_t)j * nb + blk), tab, s, d, yq);
                }
            }
        return;
    }
    const uint8_t *scales = tile + (size_t)T * d * b / 8;
    if (b == 4) { /* q4_0's layout, one scale per row */
        for (int j = 0; j < T / 4; j++) {
            float s[4];
            scales_f16(scales + 2 * ((size_t)4 * j), 4, s);
            for (int blk = 0; blk < nb; blk++)
                nibble_quad(4, tile + 64 * ((size_t)j * nb + blk), tab, s, d, y + (size_t)4 * j * d + 32 * blk);
        }
        return;
    }
    for (int o = 0; o < T / 8; o++) { /* b = 2, 3: an octet of tokens (two quads) at a time */
        float s[8];
        scales_f16(scales + 2 * ((size_t)8 * o), 8, s);
        for (int c = 0; c < nc; c++) {
            if (b == 2) {
                for (int h = 0; h < 2; h++) {
                    quad_tokens(tile + 64 * ((size_t)(2 * o + h) * nc + c), x);
                    for (int k = 0; k < 4; k++)
                        for (int i = 0; i < 4; i++)
                            emit(2, 0, bytes_srl(x[i / 2], 2 * k, 3), i % 2, tab, s[4 * h + i],
                                 y + (size_t)(8 * o + 4 * h + i) * d + 64 * c + 16 * k);
                }
                continue;
            }
            /* b = 3: slot 4h + k (quad h, dims 16k..) of the triple (rot3_walk) */
            const uint8_t *v3 = tile + 64 * 3 * ((size_t)o * nc + c);
            __m256i x3[3][2];
            for (int p = 0; p < 3; p++) quad_tokens(v3 + 64 * p, x3[p]);
            for (int sl = 0; sl < 8; sl++)
                for (int q = 0; q < 2; q++) {
                    const __m256i f = sl < 6 ? bytes_srl(x3[sl / 2][q], 3 * (sl % 2), 7)
                                             : _mm256_or_si256(bytes_srl(x3[sl - 6][q], 6, 3),
                                                               _mm256_slli_epi32(bytes_srl(x3[2][q], sl, 1), 2));
                    for (int L = 0; L < 2; L++) {
                        const int i = 4 * (sl / 4) + 2 * q + L;
                        emit(3, 0, f, L, tab, s[i], y + (size_t)(8 * o + i) * d + 64 * c + 16 * (sl % 4));
                    }
                }
        }
    }
}

#define DECODE_SIDES(B) (side == 0 ? decode_k(B, c, T, tile, tab, y) : decode_v(B, c, T, tile, tab, y))

KVQ_TARGET_AVX2 void kvq_kv_tile_decode_avx2(const kvq_codec *c, int side, int T, const uint8_t *tile, float *y) {
    table tab = {_mm_setzero_si128(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    int b;
    if (c->desc->family == &kvq_family_rot) {
        const float *cen = ((const kvq_rot_state *)c->state)->centroid;
        b = c->desc->param;
        tab.lo = _mm256_loadu_ps(cen);
        tab.hi = _mm256_loadu_ps(cen + 8);
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
        tab.book = c->desc->param == KVQ_GGML_IQ4_NL
                       ? _mm_loadu_si128((const __m128i *)(const void *)kvq_iq4nl_values)
                       : _mm_setr_epi8(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
    }
    switch (b) {
    case 8: DECODE_SIDES(8); break;
    case 2: DECODE_SIDES(2); break;
    case 3: DECODE_SIDES(3); break;
    case 4: DECODE_SIDES(4); break;
    default: DECODE_SIDES(0); break;
    }
}
#undef DECODE_SIDES

#endif
