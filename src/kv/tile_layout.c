/* tile_layout.c — the interleaved tile layouts of q4_0 (and iq4_nl, q4_1,
 * q5_0, q5_1 in its arrangement), q8_0 and the rotated codecs' b-bit
 * indices (layout and reasons:
 * docs/ATTN_PROTO.md). The bytes of a tile are exactly its T rows' bytes,
 * moved so that the VNNI attention kernel (decode_vnni.c) reads 64-byte
 * vectors whose lanes are tokens (K) or dims (V):
 *
 * K, per group of 16 tokens (16 row_bytes each), block b of 32 dims:
 *   q4_0: codes at 64 (4b + m), m = 0..3: byte 4t + j = code(t, 32b + 8m + j)
 *         | code(t, 32b + 8m + 4 + j) << 4 (u8 codes 0..15, value d (c - 8));
 *   q8_0: codes at 64 (8b + m), m = 0..7: byte 4t + j = code(t, 32b + 4m + j)
 *         ^ 0x80 (u8 = s8 code + 128);
 *   q5_0, q5_1: also, after all codes, one vector per block b at
 *         16 NB 16 + 64 b (NB blocks): byte 4t + j bit k = bit 4 of
 *         code(t, 32b + 4k + j) (codes 0..31: value d (c - 16), d c + m);
 *   then 16 fp16 block scales d per block, token order (at 16 NB CB + 32 b,
 *   CB the bytes of codes and fifth bits per (token, block): 32 q8_0, 20
 *   q5, else 16); q4_1, q5_1 (value d c + m): then the 16 m per block
 *   likewise (at 16 NB CB + 32 (NB + b)).
 * V, per quad of 4 tokens j:
 *   q4_0: block b at 64 (j NB + b): byte 4l + i = code(4j + i, 32b + l)
 *         | code(4j + i, 32b + 16 + l) << 4, l = 0..15;
 *   q8_0: dims 16c.. at 64 (j 2NB + c): byte 4l + i = code(4j + i, 16c + l)
 *         (plain s8: the kernel's p is the unsigned operand);
 *   q5_0, q5_1: after all codes, per 16 tokens o and block b, at
 *         T NB 16 + 64 (o NB + b): byte 4l + i bit 2k + h = bit 4 of
 *         code(16o + 4k + i, 32b + 16h + l);
 *   then the fp16 scales d, T per block, token order (at T NB CB); q4_1,
 *   q5_1: then the m likewise (at T NB CB + 2 T NB).
 * Rotated codecs (index k(t, i) of b bits, one fp16 scale per row): the same
 * lanes, the bits of one byte spread over dims (rot_walk below):
 *   K, per group of 16 tokens: b = 4 as q4_0 (vector m = i / 8); b = 2:
 *   vector m = i / 16, byte 4t + j bits 2k.. = k(t, 16m + 4k + j); b = 3:
 *   per 32 dims c, vectors 3c.. 3c + 2 hold byte triples (rot3_walk: eight
 *   slots of 3 bits in 3 bytes), slot s of byte 4t + j = k(t, 32c + 4s + j);
 *   then the 16 row scales.
 *   V: b = 4 as q4_0; b = 2: per quad j and 64 dims c, byte 4l + i bits 2k..
 *   = k(4j + i, 64c + 16k + l); b = 3: per octet o of tokens and 64 dims c,
 *   vectors 3(o NC + c).. byte triples, slot 4h + k of byte 4l + i =
 *   k(8o + 4h + i, 64c + 16k + l); then the T row scales.
 * Packing (every flush) runs direct loops; unpacking one row (truncate,
 * kvq_kv_read, sessions) asks code_place where each value lives (ggml) or
 * walks the row's group (rotated); decoding a whole tile to floats
 * (attention's scratch paths) runs direct loops again. The tests check all
 * three against each other and the documented offsets. */
#include <string.h>

#include "codec/ggml_blocks.h"
#include "codec/rotated.h"
#include "common/fp16.h"
#include "kv/kvstore.h"

/* Index bits of a rotated codec's rows, or 0 for the ggml codecs. */
static int rot_bits(const kvq_codec *c) { return c->desc->family == &kvq_family_rot ? c->desc->param : 0; }

int kvq_kv_interleavable(const kvq_codec *c) {
    if (!c || c->qjl) return 0;
    /* b = 2 and 3 pack 64 dims per V vector (rot_walk). */
    if (c->desc->family == &kvq_family_rot) return c->head_dim % (c->desc->param == 4 ? 32 : 64) == 0;
    return c->desc->family == &kvq_family_ggml; /* every kind: head_dim is a multiple of 32 */
}

/* ------------------------------------------------------- rotated codecs */

/* Tokens a walk covers at once: a K group, a V octet. */
static inline int rot_span(int side) { return side == 0 ? 16 : 8; }

/* The 3-bit layout's byte triple (p[0], p[64], p[128]) of eight slots'
 * indices, slot s at e[(s / 4) step4 + (s % 4) step]: slots 0..5 in bits
 * 3 (s % 2).. of byte s / 2; slots 6 and 7 their low two bits in bits 6-7
 * of bytes 0 and 1, their third bit in bits 6 and 7 of byte 2. The VNNI
 * kernel reads slots 0..5 with one table lookup each (vpermb takes 6 index
 * bits; decode_vnni.c rot3_slot), 6 and 7 after one merge. write = 1
 * builds the bytes from e, 0 reads e back. */
static KVQ_ALWAYS_INLINE void rot3_walk(uint8_t *p, uint8_t *e, size_t step, size_t step4, const int write) {
    uint8_t *v[8];
    for (int s = 0; s < 8; s++) v[s] = e + (s / 4) * step4 + (s % 4) * step;
    if (write) {
        p[0] = (uint8_t)(*v[0] | *v[1] << 3 | (*v[6] & 3) << 6);
        p[64] = (uint8_t)(*v[2] | *v[3] << 3 | (*v[7] & 3) << 6);
        p[128] = (uint8_t)(*v[4] | *v[5] << 3 | (*v[6] >> 2) << 6 | (*v[7] >> 2) << 7);
    } else {
        const unsigned u[3] = {p[0], p[64], p[128]};
        for (int s = 0; s < 6; s++) *v[s] = (uint8_t)((u[s / 2] >> 3 * (s % 2)) & 7);
        *v[6] = (uint8_t)(u[0] >> 6 | ((u[2] >> 6) & 1) << 2);
        *v[7] = (uint8_t)(u[1] >> 6 | (u[2] >> 7) << 2);
    }
}

/* Moves the indices idx (span, d) of tokens [span g, span (g + 1)) between
 * the codes of a tile (codes: the tile's start) and idx: write = 1 builds
 * every code byte of the span from idx, write = 0 reads idx back. b is a
 * constant at each call. */
static KVQ_ALWAYS_INLINE void rot_walk(const int b, const int side, int d, int g, uint8_t *codes, uint8_t *idx,
                                       const int write) {
#define ROT_BYTE(at, expr_build, stmt_read) \
    do {                                    \
        uint8_t *const p_ = (at);           \
        if (write) *p_ = (uint8_t)(expr_build); \
        else {                              \
            const unsigned u_ = *p_;        \
            stmt_read;                      \
        }                                   \
    } while (0)
    if (side == 0) {
        uint8_t *base = codes + (size_t)g * 16 * (2 + (size_t)d * b / 8);
        for (int t = 0; t < 16; t++) {
            uint8_t *x = idx + (size_t)t * d;
            for (int j = 0; j < 4; j++) {
                if (b == 4) {
                    for (int m = 0; m < d / 8; m++)
                        ROT_BYTE(base + 64 * (size_t)m + 4 * t + j, x[8 * m + j] | x[8 * m + 4 + j] << 4,
                                 (x[8 * m + j] = u_ & 15, x[8 * m + 4 + j] = u_ >> 4));
                } else if (b == 2) {
                    for (int m = 0; m < d / 16; m++) {
                        uint8_t *e = x + 16 * m + j;
                        ROT_BYTE(base + 64 * (size_t)m + 4 * t + j, e[0] | e[4] << 2 | e[8] << 4 | e[12] << 6,
                                 for (int k = 0; k < 4; k++) e[4 * k] = (u_ >> 2 * k) & 3);
                    }
                } else {
                    for (int c = 0; c < d / 32; c++) /* slot k: dims 32c + 4k + j */
                        rot3_walk(base + 64 * (size_t)(3 * c) + 4 * t + j, x + 32 * c + j, 4, 16, write);
                }
            }
        }
        return;
    }
    uint8_t *base = codes + (size_t)g * 8 * d * b / 8;
    if (b == 3) { /* slot 4h + k: quad h, dims 64c + 16k + l */
        for (int c = 0; c < d / 64; c++)
            for (int l = 0; l < 16; l++)
                for (int i = 0; i < 4; i++)
                    rot3_walk(base + 64 * (3 * (size_t)c) + 4 * l + i, idx + (size_t)i * d + 64 * c + l, 16,
                              (size_t)4 * d, write);
        return;
    }
    for (int h = 0; h < 2; h++) /* quad 2g + h */
        for (int i = 0; i < 4; i++) {
            uint8_t *x = idx + (size_t)(4 * h + i) * d;
            for (int l = 0; l < 16; l++) {
                if (b == 4) {
                    for (int c = 0; c < d / 32; c++)
                        ROT_BYTE(base + 64 * ((size_t)h * (d / 32) + c) + 4 * l + i, x[32 * c + l] | x[32 * c + 16 + l] << 4,
                                 (x[32 * c + l] = u_ & 15, x[32 * c + 16 + l] = u_ >> 4));
                } else {
                    for (int c = 0; c < d / 64; c++) {
                        uint8_t *e = x + 64 * c + l;
                        ROT_BYTE(base + 64 * ((size_t)h * (d / 64) + c) + 4 * l + i,
                                 e[0] | e[16] << 2 | e[32] << 4 | e[48] << 6,
                                 for (int k = 0; k < 4; k++) e[16 * k] = (u_ >> 2 * k) & 3);
                    }
                }
            }
        }
#undef ROT_BYTE
}

/* rot_walk with b, side and the direction constant in each body (the walk
 * runs on every flush and on every tile prefill decodes). */
#define ROT_WALK_SIDES(B, W)                                    \
    (side == 0 ? rot_walk(B, 0, d, g, codes, idx, W) : rot_walk(B, 1, d, g, codes, idx, W))
static void rot_walk_b(int b, int side, int d, int g, uint8_t *codes, uint8_t *idx, int write) {
    if (write) {
        if (b == 2) ROT_WALK_SIDES(2, 1);
        else if (b == 3) ROT_WALK_SIDES(3, 1);
        else ROT_WALK_SIDES(4, 1);
    } else {
        if (b == 2) ROT_WALK_SIDES(2, 0);
        else if (b == 3) ROT_WALK_SIDES(3, 0);
        else ROT_WALK_SIDES(4, 0);
    }
}
#undef ROT_WALK_SIDES

/* Where row r's fp16 scale lives in a rotated tile. */
static inline size_t rot_scale_place(int b, int side, int T, int d, int r) {
    const size_t rb = 2 + (size_t)d * b / 8;
    if (side == 0) return (size_t)(r / 16) * 16 * rb + 2 * (size_t)d * b + 2 * (size_t)(r % 16);
    return (size_t)T * d * b / 8 + 2 * (size_t)r;
}

static void rot_pack(const kvq_codec *c, int side, int T, const uint8_t *rows, uint8_t *tile) {
    const int b = rot_bits(c), d = c->head_dim, span = rot_span(side);
    uint8_t idx[16 * KVQ_MAX_HEAD_DIM];
    for (int g = 0; g < T / span; g++) {
        for (int t = 0; t < span; t++) {
            const uint8_t *row = rows + (size_t)(span * g + t) * c->row_bytes;
            kvq_rot_unpack_indices(b, d, row + 2, idx + (size_t)t * d);
            memcpy(tile + rot_scale_place(b, side, T, d, span * g + t), row, 2);
        }
        rot_walk_b(b, side, d, g, tile, idx, 1);
    }
}

/* Indices of the span holding row r (idx: (span, d)). */
static void rot_span_indices(const kvq_codec *c, int side, const uint8_t *tile, int g, uint8_t *idx) {
    memset(idx, 0, (size_t)rot_span(side) * c->head_dim);
    rot_walk_b(rot_bits(c), side, c->head_dim, g, (uint8_t *)tile, idx, 0);
}

static void rot_unpack_row(const kvq_codec *c, int side, int T, const uint8_t *tile, int r, uint8_t *row) {
    const int b = rot_bits(c), d = c->head_dim, span = rot_span(side);
    uint8_t idx[16 * KVQ_MAX_HEAD_DIM];
    rot_span_indices(c, side, tile, r / span, idx);
    memcpy(row, tile + rot_scale_place(b, side, T, d, r), 2);
    kvq_rot_pack_indices(b, d, idx + (size_t)(r % span) * d, row + 2);
}

/* Domain values s x centroid, the product the codec's tile decode computes. */
static void rot_decode(const kvq_codec *c, int side, int T, const uint8_t *tile, float *y) {
    const kvq_rot_state *st = c->state;
    const int b = rot_bits(c), d = c->head_dim, span = rot_span(side);
    uint8_t idx[16 * KVQ_MAX_HEAD_DIM];
    for (int g = 0; g < T / span; g++) {
        rot_span_indices(c, side, tile, g, idx);
        for (int t = 0; t < span; t++) {
            const int r = span * g + t;
            const float s = kvq_f16_to_f32(kvq_load_u16(tile + rot_scale_place(b, side, T, d, r)));
            for (int i = 0; i < d; i++) y[(size_t)r * d + i] = s * st->centroid[idx[(size_t)t * d + i]];
        }
    }
}

/* Bytes per (token, 32-dim block) of a ggml kind's parts in a tile: codes
 * (q8_0's bytes, else nibbles), the q5 kinds' fifth bits, the fp16 d (and
 * m of q4_1 / q5_1); they add up to the block's bytes. */
static inline int is_q8(int kind) { return kind == KVQ_GGML_Q8_0; }
static inline int has_hi(int kind) { return kind == KVQ_GGML_Q5_0 || kind == KVQ_GGML_Q5_1; }
static inline int has_min(int kind) { return kind == KVQ_GGML_Q4_1 || kind == KVQ_GGML_Q5_1; }
static inline int code_bytes(int kind) { return is_q8(kind) ? 32 : 16; }
static inline int bits_bytes(int kind) { return code_bytes(kind) + (has_hi(kind) ? 4 : 0); } /* codes + fifth bits */

/* Where the parts sit in a row's block of bb bytes (ggml_blocks.c): d at 0,
 * m at 2, qh before the 16 nibble bytes, the codes last. */
static inline const uint8_t *row_codes(int kind, const uint8_t *blk, int bb) { return blk + bb - code_bytes(kind); }
static inline size_t row_qh(int bb) { return (size_t)bb - 20; }
static inline uint32_t row_qh_bits(const uint8_t *blk, int bb) { /* bit e: value e (little-endian, as ggml) */
    uint32_t x;
    memcpy(&x, blk + row_qh(bb), 4);
    return x;
}

typedef struct place {
    size_t byte;
    int shift; /* nibbles: 0 low, 4 high; q8_0: 0; fifth bits: the bit */
} place;

/* Where value i of row r of a tile of T rows lives (side 0 K, 1 V): its
 * code (hi = 0: q8_0's byte or the nibble) or its fifth bit (hi = 1). */
static inline place code_place(int kind, int side, int T, int nb, int r, int i, int hi) {
    const int b = i / 32, e = i % 32, q8 = is_q8(kind);
    if (side == 0) {
        const size_t grp = (size_t)(r / 16) * 16 * nb * kvq_ggml_block_bytes(kind);
        const int t = r % 16;
        if (hi) return (place){grp + 16 * (size_t)nb * code_bytes(kind) + 64 * (size_t)b + 4 * t + e % 4, e / 4};
        if (q8) return (place){grp + 64 * (size_t)(8 * b + e / 4) + 4 * t + e % 4, 0};
        return (place){grp + 64 * (size_t)(4 * b + e / 8) + 4 * t + e % 4, e % 8 >= 4 ? 4 : 0};
    }
    const int j = r / 4, ti = r % 4;
    if (hi)
        return (place){(size_t)T * nb * code_bytes(kind) + 64 * ((size_t)(r / 16) * nb + b) + 4 * (e % 16) + ti,
                       2 * (j % 4) + e / 16};
    if (q8) return (place){64 * ((size_t)j * 2 * nb + i / 16) + 4 * (i % 16) + ti, 0};
    return (place){64 * ((size_t)j * nb + b) + 4 * (e % 16) + ti, e >= 16 ? 4 : 0};
}

/* Where the fp16 d (min = 0) or m (min = 1) of block b of row r lives. */
static inline size_t scale_place(int kind, int side, int T, int nb, int r, int b, int min) {
    if (side == 0) {
        const size_t grp = (size_t)(r / 16) * 16 * nb * kvq_ggml_block_bytes(kind);
        return grp + 16 * (size_t)nb * bits_bytes(kind) + 32 * ((size_t)min * nb + b) + 2 * (size_t)(r % 16);
    }
    return (size_t)T * nb * bits_bytes(kind) + 2 * (((size_t)min * nb + b) * T + r);
}

/* Writes every byte of the tile (codes, fifth bits and scales cover it
 * exactly). Direct loops rather than code_place: it runs on every flush. */
void kvq_kv_tile_pack(const kvq_codec *c, int side, int T, const uint8_t *rows, uint8_t *tile) {
    if (rot_bits(c)) {
        rot_pack(c, side, T, rows, tile);
        return;
    }
    const int kind = c->desc->param, q8 = is_q8(kind), nb = c->head_dim / 32, bb = (int)kvq_ggml_block_bytes(kind);
    const int cb = code_bytes(kind);
    if (side == 0) {
        const size_t gb = (size_t)16 * nb * bb, gc = (size_t)16 * nb * cb;
        for (int r = 0; r < T; r++) {
            const uint8_t *row = rows + (size_t)r * c->row_bytes;
            uint8_t *grp = tile + (size_t)(r / 16) * gb;
            const int t = r % 16;
            for (int b = 0; b < nb; b++) {
                const uint8_t *blk = row + bb * b, *qs = row_codes(kind, blk, bb);
                for (int w = 0; w <= has_min(kind); w++)
                    memcpy(tile + scale_place(kind, 0, T, nb, r, b, w), blk + 2 * w, 2);
                /* Four values a word. q8_0: its bytes flipped to unsigned.
                 * Nibbles: word m holds values 8m + j (low) and 8m + 4 + j
                 * (high), j = 0..3, the low nibbles of row bytes 8m + j and
                 * 8m + 4 + j for m = 0, 1 and the high ones of bytes
                 * 8(m - 2) + j and 8(m - 2) + 4 + j for m = 2, 3. Byte-wise
                 * masks and in-byte shifts: the same bytes in any byte order. */
                uint8_t *dst = grp + 64 * (size_t)((q8 ? 8 : 4) * b) + 4 * t;
                for (int m = 0; m < (q8 ? 8 : 4); m++, dst += 64) {
                    uint32_t lo, hi, word;
                    memcpy(&lo, qs + (q8 ? 4 * m : 8 * (m % 2)), 4);
                    if (q8) {
                        word = lo ^ 0x80808080u;
                    } else {
                        memcpy(&hi, qs + 8 * (m % 2) + 4, 4);
                        word = m < 2 ? (lo & 0x0F0F0F0Fu) | (hi & 0x0F0F0F0Fu) << 4
                                     : (lo >> 4 & 0x0F0F0F0Fu) | (hi & 0xF0F0F0F0u);
                    }
                    memcpy(dst, &word, 4);
                }
                if (has_hi(kind)) { /* byte j bit k: value 4k + j */
                    const uint32_t qh = row_qh_bits(blk, bb);
                    for (int j = 0; j < 4; j++) {
                        unsigned x = 0;
                        for (int k = 0; k < 8; k++) x |= ((qh >> (4 * k + j)) & 1) << k;
                        grp[gc + 64 * (size_t)b + 4 * t + j] = (uint8_t)x;
                    }
                }
            }
        }
        return;
    }
    uint8_t *his = tile + (size_t)T * nb * cb; /* the fifth bits: 4 rows of a group share each byte */
    if (has_hi(kind)) memset(his, 0, (size_t)T * nb * 4);
    for (int r = 0; r < T; r++) {
        const uint8_t *row = rows + (size_t)r * c->row_bytes;
        const int j = r / 4, i = r % 4;
        for (int b = 0; b < nb; b++) {
            const uint8_t *blk = row + bb * b, *qs = row_codes(kind, blk, bb);
            for (int w = 0; w <= has_min(kind); w++) memcpy(tile + scale_place(kind, 1, T, nb, r, b, w), blk + 2 * w, 2);
            for (int l = 0; l < 16; l++) {
                if (q8) {
                    tile[64 * ((size_t)j * 2 * nb + 2 * b) + 4 * l + i] = qs[l];
                    tile[64 * ((size_t)j * 2 * nb + 2 * b + 1) + 4 * l + i] = qs[16 + l];
                } else {
                    tile[64 * ((size_t)j * nb + b) + 4 * l + i] = qs[l]; /* lo: value l, hi: value 16 + l */
                }
            }
            if (has_hi(kind)) { /* byte 4l + i bit 2(j % 4) + h: value 16h + l */
                const uint32_t qh = row_qh_bits(blk, bb);
                uint8_t *hv = his + 64 * ((size_t)(r / 16) * nb + b) + i;
                for (int l = 0; l < 16; l++)
                    hv[4 * l] |= (uint8_t)(((qh >> l) & 1) << 2 * (j % 4) | ((qh >> (16 + l)) & 1) << (2 * (j % 4) + 1));
            }
        }
    }
}

void kvq_kv_tile_unpack_row(const kvq_codec *c, int side, int T, const uint8_t *tile, int r, uint8_t *row) {
    if (rot_bits(c)) {
        rot_unpack_row(c, side, T, tile, r, row);
        return;
    }
    const int kind = c->desc->param, q8 = is_q8(kind), nb = c->head_dim / 32, bb = (int)kvq_ggml_block_bytes(kind);
    memset(row, 0, c->row_bytes);
    for (int b = 0; b < nb; b++)
        for (int w = 0; w <= has_min(kind); w++) memcpy(row + bb * b + 2 * w, tile + scale_place(kind, side, T, nb, r, b, w), 2);
    for (int i = 0; i < c->head_dim; i++) {
        const place p = code_place(kind, side, T, nb, r, i, 0);
        const int b = i / 32, e = i % 32;
        uint8_t *qs = row + bb * b + bb - code_bytes(kind);
        if (q8) {
            qs[e] = (uint8_t)(tile[p.byte] ^ (side == 0 ? 0x80 : 0));
        } else {
            const uint8_t code = (tile[p.byte] >> p.shift) & 15;
            qs[e % 16] |= (uint8_t)(e < 16 ? code : code << 4);
        }
        if (has_hi(kind)) {
            const place h = code_place(kind, side, T, nb, r, i, 1);
            row[bb * b + row_qh(bb) + e / 8] |= (uint8_t)(((tile[h.byte] >> h.shift) & 1) << e % 8);
        }
    }
}

void kvq_kv_tile_rows(const kvq_kv_layer *L, int side, int T, const uint8_t *tile, uint8_t *rows) {
    const kvq_codec *c = L->codec[side];
    if (!L->interleaved[side]) {
        memcpy(rows, tile, (size_t)T * c->row_bytes);
        return;
    }
    for (int r = 0; r < T; r++) kvq_kv_tile_unpack_row(c, side, T, tile, r, rows + (size_t)r * c->row_bytes);
}

/* Value of code u (as the layout stores it, with its fifth bit) for scales
 * d, m, as the codec's row decode computes it (bit-exact: the same
 * operations in the same order). */
static inline float value(int kind, int side, unsigned u, float d, float m) {
    switch (kind) {
    case KVQ_GGML_Q8_0: return (int8_t)(side == 0 ? u ^ 0x80 : u) * d;
    case KVQ_GGML_IQ4_NL: return d * kvq_iq4nl_values[u];
    case KVQ_GGML_Q4_1:
    case KVQ_GGML_Q5_1: return (float)u * d + m;
    case KVQ_GGML_Q5_0: return ((int)u - 16) * d;
    default: return ((int)u - 8) * d;
    }
}

/* The body of kvq_kv_tile_decode for the ggml kinds, kind and side constant
 * at each call. */
static KVQ_ALWAYS_INLINE void ggml_decode(const kvq_codec *c, const int kind, const int side, int T,
                                          const uint8_t *tile, float *y) {
    const int q8 = is_q8(kind), hb = has_hi(kind), nb = c->head_dim / 32, d = c->head_dim;
    if (side == 0) {
        const size_t gb = (size_t)16 * nb * kvq_ggml_block_bytes(kind), gc = (size_t)16 * nb * code_bytes(kind);
        for (int r = 0; r < T; r++) {
            const uint8_t *grp = tile + (size_t)(r / 16) * gb;
            const int t = r % 16;
            float *yr = y + (size_t)r * d;
            for (int b = 0; b < nb; b++) {
                const float s = kvq_f16_to_f32(kvq_load_u16(tile + scale_place(kind, 0, T, nb, r, b, 0)));
                const float mn = has_min(kind) ? kvq_f16_to_f32(kvq_load_u16(tile + scale_place(kind, 0, T, nb, r, b, 1))) : 0;
                for (int m = 0; m < (q8 ? 8 : 4); m++)
                    for (int j = 0; j < 4; j++) {
                        const uint8_t u = grp[64 * (size_t)((q8 ? 8 : 4) * b + m) + 4 * t + j];
                        if (q8) {
                            yr[32 * b + 4 * m + j] = value(kind, 0, u, s, mn);
                        } else {
                            const unsigned h = hb ? grp[gc + 64 * (size_t)b + 4 * t + j] >> 2 * m : 0;
                            yr[32 * b + 8 * m + j] = value(kind, 0, (u & 15) | (h & 1) << 4, s, mn);
                            yr[32 * b + 8 * m + 4 + j] = value(kind, 0, (u >> 4) | (h & 2) << 3, s, mn);
                        }
                    }
            }
        }
        return;
    }
    const uint8_t *his = tile + (size_t)T * nb * code_bytes(kind);
    for (int r = 0; r < T; r++) {
        const int j = r / 4, i = r % 4;
        float *yr = y + (size_t)r * d;
        for (int b = 0; b < nb; b++) {
            const float s = kvq_f16_to_f32(kvq_load_u16(tile + scale_place(kind, 1, T, nb, r, b, 0)));
            const float mn = has_min(kind) ? kvq_f16_to_f32(kvq_load_u16(tile + scale_place(kind, 1, T, nb, r, b, 1))) : 0;
            for (int l = 0; l < 16; l++) {
                if (q8) {
                    yr[32 * b + l] = value(kind, 1, tile[64 * ((size_t)j * 2 * nb + 2 * b) + 4 * l + i], s, mn);
                    yr[32 * b + 16 + l] = value(kind, 1, tile[64 * ((size_t)j * 2 * nb + 2 * b + 1) + 4 * l + i], s, mn);
                } else {
                    const uint8_t u = tile[64 * ((size_t)j * nb + b) + 4 * l + i];
                    const unsigned h = hb ? his[64 * ((size_t)(r / 16) * nb + b) + 4 * l + i] >> 2 * (j % 4) : 0;
                    yr[32 * b + l] = value(kind, 1, (u & 15) | (h & 1) << 4, s, mn);
                    yr[32 * b + 16 + l] = value(kind, 1, (u >> 4) | (h & 2) << 3, s, mn);
                }
            }
        }
    }
}

void kvq_kv_tile_decode(const kvq_codec *c, int side, int T, const uint8_t *tile, float *y) {
    if (rot_bits(c)) {
        rot_decode(c, side, T, tile, y);
        return;
    }
#define GGML_DECODE_SIDES(KIND) \
    (side == 0 ? ggml_decode(c, KIND, 0, T, tile, y) : ggml_decode(c, KIND, 1, T, tile, y))
    switch (c->desc->param) {
    case KVQ_GGML_Q8_0: GGML_DECODE_SIDES(KVQ_GGML_Q8_0); break;
    case KVQ_GGML_IQ4_NL: GGML_DECODE_SIDES(KVQ_GGML_IQ4_NL); break;
    case KVQ_GGML_Q4_1: GGML_DECODE_SIDES(KVQ_GGML_Q4_1); break;
    case KVQ_GGML_Q5_0: GGML_DECODE_SIDES(KVQ_GGML_Q5_0); break;
    case KVQ_GGML_Q5_1: GGML_DECODE_SIDES(KVQ_GGML_Q5_1); break;
    default: GGML_DECODE_SIDES(KVQ_GGML_Q4_0); break;
    }
#undef GGML_DECODE_SIDES
}
