/* tile_layout.c — the interleaved tile layouts of q4_0, iq4_nl (q4_0's) and
 * q8_0 (layout and reasons: docs/ATTN_PROTO.md). The bytes of a tile are exactly its T ggml
 * rows' bytes, moved so that the VNNI attention kernel (decode_vnni.c) reads
 * 64-byte vectors whose lanes are tokens (K) or dims (V):
 *
 * K, per group of 16 tokens (16 row_bytes each), block b of 32 dims:
 *   q4_0: codes at 64 (4b + m), m = 0..3: byte 4t + j = code(t, 32b + 8m + j)
 *         | code(t, 32b + 8m + 4 + j) << 4 (u8 codes 0..15, value d (c - 8));
 *   q8_0: codes at 64 (8b + m), m = 0..7: byte 4t + j = code(t, 32b + 4m + j)
 *         ^ 0x80 (u8 = s8 code + 128);
 *   then 16 fp16 block scales per block, token order.
 * V, per quad of 4 tokens j:
 *   q4_0: block b at 64 (j NB + b): byte 4l + i = code(4j + i, 32b + l)
 *         | code(4j + i, 32b + 16 + l) << 4, l = 0..15;
 *   q8_0: dims 16c.. at 64 (j 2NB + c): byte 4l + i = code(4j + i, 16c + l)
 *         (plain s8: the kernel's p is the unsigned operand);
 *   then the fp16 scales, T per block, token order.
 * Packing (every flush) runs direct loops; unpacking one row (truncate,
 * kvq_kv_read, sessions) asks code_place where each value lives; decoding a
 * whole tile to floats (attention's scratch paths) runs direct loops again.
 * The tests check all three against each other and the documented offsets. */
#include <string.h>

#include "codec/ggml_blocks.h"
#include "common/fp16.h"
#include "kv/kvstore.h"

int kvq_kv_interleavable(const kvq_codec *c) {
    return c && !c->qjl && c->desc->family == &kvq_family_ggml &&
           (c->desc->param == KVQ_GGML_Q4_0 || c->desc->param == KVQ_GGML_Q8_0 || c->desc->param == KVQ_GGML_IQ4_NL);
}

typedef struct place {
    size_t byte;
    int shift; /* q4_0: 0 low nibble, 4 high; q8_0: 0 */
} place;

/* Where value i of row r of a tile of T rows lives (side 0 K, 1 V). */
static inline place code_place(int q8, int side, int T, int nb, int r, int i) {
    const int b = i / 32, e = i % 32;
    if (side == 0) {
        const size_t grp = (size_t)(r / 16) * 16 * (size_t)nb * (q8 ? 34 : 18);
        const int t = r % 16;
        if (q8) return (place){grp + 64 * (size_t)(8 * b + e / 4) + 4 * t + e % 4, 0};
        return (place){grp + 64 * (size_t)(4 * b + e / 8) + 4 * t + e % 4, e % 8 >= 4 ? 4 : 0};
    }
    const int j = r / 4, ti = r % 4;
    if (q8) return (place){64 * ((size_t)j * 2 * nb + i / 16) + 4 * (i % 16) + ti, 0};
    return (place){64 * ((size_t)j * nb + b) + 4 * (e % 16) + ti, e >= 16 ? 4 : 0};
}

/* Where the fp16 scale of block b of row r lives. */
static inline size_t scale_place(int q8, int side, int T, int nb, int r, int b) {
    if (side == 0) {
        const size_t grp = (size_t)(r / 16) * 16 * (size_t)nb * (q8 ? 34 : 18);
        return grp + 16 * (size_t)nb * (q8 ? 32 : 16) + 32 * (size_t)b + 2 * (size_t)(r % 16);
    }
    return (size_t)T * nb * (q8 ? 32 : 16) + 2 * ((size_t)b * T + r);
}

/* The nibble code of value e (0..31) of a q4_0 / iq4_nl block's 16 code bytes. */
static inline uint8_t nibble(const uint8_t *qs, int e) { return e < 16 ? qs[e] & 15 : qs[e - 16] >> 4; }

/* Writes every byte of the tile (codes and scales cover it exactly). Direct
 * loops rather than code_place: it runs on every flush. */
void kvq_kv_tile_pack(const kvq_codec *c, int side, int T, const uint8_t *rows, uint8_t *tile) {
    const int q8 = c->desc->param == KVQ_GGML_Q8_0, nb = c->head_dim / 32, bb = q8 ? 34 : 18;
    if (side == 0) {
        const size_t gb = (size_t)16 * nb * bb, gc = (size_t)16 * nb * (q8 ? 32 : 16);
        for (int r = 0; r < T; r++) {
            const uint8_t *row = rows + (size_t)r * c->row_bytes;
            uint8_t *grp = tile + (size_t)(r / 16) * gb;
            const int t = r % 16;
            for (int b = 0; b < nb; b++) {
                const uint8_t *blk = row + bb * b, *qs = blk + 2;
                memcpy(grp + gc + 32 * b + 2 * t, blk, 2);
                for (int m = 0; m < (q8 ? 8 : 4); m++)
                    for (int j = 0; j < 4; j++)
                        grp[64 * (size_t)((q8 ? 8 : 4) * b + m) + 4 * t + j] =
                            q8 ? (uint8_t)(qs[4 * m + j] ^ 0x80)
                               : (uint8_t)(nibble(qs, 8 * m + j) | nibble(qs, 8 * m + 4 + j) << 4);
            }
        }
        return;
    }
    uint8_t *scales = tile + (size_t)T * nb * (q8 ? 32 : 16);
    for (int r = 0; r < T; r++) {
        const uint8_t *row = rows + (size_t)r * c->row_bytes;
        const int j = r / 4, i = r % 4;
        for (int b = 0; b < nb; b++) {
            const uint8_t *blk = row + bb * b, *qs = blk + 2;
            memcpy(scales + 2 * ((size_t)b * T + r), blk, 2);
            for (int l = 0; l < 16; l++) {
                if (q8) {
                    tile[64 * ((size_t)j * 2 * nb + 2 * b) + 4 * l + i] = qs[l];
                    tile[64 * ((size_t)j * 2 * nb + 2 * b + 1) + 4 * l + i] = qs[16 + l];
                } else {
                    tile[64 * ((size_t)j * nb + b) + 4 * l + i] = qs[l]; /* lo: value l, hi: value 16 + l */
                }
            }
        }
    }
}

void kvq_kv_tile_unpack_row(const kvq_codec *c, int side, int T, const uint8_t *tile, int r, uint8_t *row) {
    const int q8 = c->desc->param == KVQ_GGML_Q8_0, nb = c->head_dim / 32, bb = q8 ? 34 : 18;
    memset(row, 0, c->row_bytes);
    for (int b = 0; b < nb; b++) memcpy(row + bb * b, tile + scale_place(q8, side, T, nb, r, b), 2);
    for (int i = 0; i < c->head_dim; i++) {
        const place p = code_place(q8, side, T, nb, r, i);
        const int b = i / 32, e = i % 32;
        if (q8) {
            row[bb * b + 2 + e] = (uint8_t)(tile[p.byte] ^ (side == 0 ? 0x80 : 0));
        } else {
            const uint8_t code = (tile[p.byte] >> p.shift) & 15;
            row[bb * b + 2 + e % 16] |= (uint8_t)(e < 16 ? code : code << 4);
        }
    }
}

void kvq_kv_tile_rows(const kvq_kv_layer *L, int side, int T, const uint8_t *tile, uint8_t *rows) {
    const kvq_codec *c = L->codec[side];
    if (!L->interleaved) {
        memcpy(rows, tile, (size_t)T * c->row_bytes);
        return;
    }
    for (int r = 0; r < T; r++) kvq_kv_tile_unpack_row(c, side, T, tile, r, rows + (size_t)r * c->row_bytes);
}

/* Value of code u (as the layout stores it) times d, as the codec's row
 * decode computes it (bit-exact: the same one product). */
static inline float value(int kind, int side, uint8_t u, float d) {
    if (kind == KVQ_GGML_Q8_0) return (int8_t)(side == 0 ? u ^ 0x80 : u) * d;
    if (kind == KVQ_GGML_IQ4_NL) return d * kvq_iq4nl_values[u];
    return (u - 8) * d;
}

void kvq_kv_tile_decode(const kvq_codec *c, int side, int T, const uint8_t *tile, float *y) {
    const int kind = c->desc->param, q8 = kind == KVQ_GGML_Q8_0, nb = c->head_dim / 32, d = c->head_dim;
    if (side == 0) {
        const size_t gb = (size_t)16 * nb * (q8 ? 34 : 18), gc = (size_t)16 * nb * (q8 ? 32 : 16);
        for (int r = 0; r < T; r++) {
            const uint8_t *grp = tile + (size_t)(r / 16) * gb;
            const int t = r % 16;
            float *yr = y + (size_t)r * d;
            for (int b = 0; b < nb; b++) {
                const float s = kvq_f16_to_f32(kvq_load_u16(grp + gc + 32 * b + 2 * t));
                for (int m = 0; m < (q8 ? 8 : 4); m++)
                    for (int j = 0; j < 4; j++) {
                        const uint8_t u = grp[64 * (size_t)((q8 ? 8 : 4) * b + m) + 4 * t + j];
                        if (q8) {
                            yr[32 * b + 4 * m + j] = value(kind, 0, u, s);
                        } else {
                            yr[32 * b + 8 * m + j] = value(kind, 0, u & 15, s);
                            yr[32 * b + 8 * m + 4 + j] = value(kind, 0, u >> 4, s);
                        }
                    }
            }
        }
        return;
    }
    const uint8_t *scales = tile + (size_t)T * nb * (q8 ? 32 : 16);
    for (int r = 0; r < T; r++) {
        const int j = r / 4, i = r % 4;
        float *yr = y + (size_t)r * d;
        for (int b = 0; b < nb; b++) {
            const float s = kvq_f16_to_f32(kvq_load_u16(scales + 2 * ((size_t)b * T + r)));
            for (int l = 0; l < 16; l++) {
                if (q8) {
                    yr[32 * b + l] = value(kind, 1, tile[64 * ((size_t)j * 2 * nb + 2 * b) + 4 * l + i], s);
                    yr[32 * b + 16 + l] = value(kind, 1, tile[64 * ((size_t)j * 2 * nb + 2 * b + 1) + 4 * l + i], s);
                } else {
                    const uint8_t u = tile[64 * ((size_t)j * nb + b) + 4 * l + i];
                    yr[32 * b + l] = value(kind, 1, u & 15, s);
                    yr[32 * b + 16 + l] = value(kind, 1, u >> 4, s);
                }
            }
        }
    }
}
