/* rotated.h — what the rotated codec family's reference and ISA kernels
 * share (rotated.c, rotated_avx2.c, rotated_avx512.c).
 *
 * Row format (base_bytes = 2 + d * b / 8):
 *   bytes 0-1  s, the least-squares scale, fp16 little-endian
 *   bytes 2-   the d codebook indices of b bits, packed densely: index i sits
 *              at bits [i b, i b + b) of the byte string, bit k of the string
 *              being bit (k mod 8) of byte k / 8 (LSB first). Every 8 indices
 *              fill exactly b bytes.
 * Index k means centroid kvq_rot_centroids[b][k]; centroids ascend, so index
 * 0 is the most negative. The all-zero row (s = 0, indices 0) decodes to 0.
 *
 * Encode arithmetic (every ISA path does exactly this; see rotation.h too):
 *   n2 = sum x_i^2 and later <y, c>, <c, c> are each summed in 16 lanes
 *   (lane l takes i = l, l+16, ... in ascending i, acc = acc + p with p
 *   rounded first) and the lanes reduced by kvq_rot_reduce16's fixed tree;
 *   n2 beyond FLT_MAX -> KVQ_ERR_RANGE; n2 < KVQ_ROT_TINY -> the zero row
 *   (its fp16 scale would be 0 anyway);
 *   y = R x; inv = (float)sqrt(d) / sqrtf(n2); u_i = y_i * inv;
 *   k_i = number of thresholds t_j < u_i (t_j = (c_j + c_{j+1}) * 0.5f);
 *   s = <y, c> / <c, c>; fp16(s) Inf -> KVQ_ERR_RANGE, fp16(s) = +-0 -> zero row.
 */
#ifndef KVQ_ROTATED_H
#define KVQ_ROTATED_H

#include <stdint.h>
#include <string.h>

#include "codec/rotation.h"
#include "common/fp16.h"

static inline uint64_t kvq_load_le64(const void *p) {
    uint64_t v;
    memcpy(&v, p, sizeof v);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

static inline void kvq_store_le64(void *p, uint64_t v) {
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    memcpy(p, &v, sizeof v);
}

/* A row's index string (the format above) to one byte per index and back:
 * the one statement of that packing, used by the codec's encode and scalar
 * decode and by the tile layouts (kv/tile_layout.c). d is a multiple of 8;
 * packed holds d * bits / 8 bytes, idx d. Every idx[i] < 2^bits: pack folds
 * neighbours together, so a wider index would spill into the next. Here
 * rather than in rotated.c, and force-inlined, because encode calls pack with
 * bits a constant (kvq_rot_finish_bits) and wants its shifts and masks
 * specialized; the other callers pass bits at run time. */
static KVQ_ALWAYS_INLINE void kvq_rot_pack_indices(const int bits, int d, const uint8_t *idx, uint8_t *packed) {
    /* Eight b-bit indices in eight bytes fold into b bytes by merging
     * neighbours: pairs in 16-bit units, quads in 32, octets in 64. */
    const uint64_t m1 = 0x0001000100010001ull * ((1u << 2 * bits) - 1);
    const uint64_t m2 = 0x0000000100000001ull * ((1u << 4 * bits) - 1);
    const uint64_t m3 = (1ull << 8 * bits) - 1;
    for (int g = 0; g < d; g += 8, packed += bits) {
        uint64_t w = kvq_load_le64(idx + g);
        w = (w | w >> (8 - bits)) & m1;
        w = (w | w >> (16 - 2 * bits)) & m2;
        w = (w | w >> (32 - 4 * bits)) & m3;
        uint8_t bytes[8];
        kvq_store_le64(bytes, w);
        memcpy(packed, bytes, (size_t)bits);
    }
}

static inline void kvq_rot_unpack_indices(int bits, int d, const uint8_t *packed, uint8_t *idx) {
    const uint64_t mask = (1u << bits) - 1;
    for (int g = 0; g < d; g += 8, packed += bits) {
        uint8_t bytes[8] = {0};
        memcpy(bytes, packed, (size_t)bits);
        const uint64_t w = kvq_load_le64(bytes);
        for (int j = 0; j < 8; j++) idx[g + j] = (uint8_t)((w >> (j * bits)) & mask);
    }
}

/* ||x||^2 below this gives |s| < 2^-50: zero in fp16. Keeps 1/||x|| finite. */
#define KVQ_ROT_TINY 0x1p-100f

typedef struct kvq_rot_state {
    kvq_rotation rot;
    int bits;
    float sqrt_d;
    float centroid[16];  /* (2^bits) ascending, padded with the last */
    float threshold[16]; /* (2^bits - 1) midpoints, padded with +Inf */
    /* The centroids as u8 codes of a step, for the integer attention
     * kernels (decode_vnni.c, decode_int_avx2.c), K's [0] and V's [1]:
     * step_code[s][j] = round(centroid[j] / step[s]) + 128, the step chosen
     * once here (rot_init) so that the largest centroid is at most
     * KVQ_ROT_CODE_MAX(bits, s) steps (and at least half that) and the
     * worst rounding of any centroid is least. */
    uint8_t step_code[2][16];
    float step[2];
} kvq_rot_state;

/* The largest |step_code - 128| of a table: V's 127 (int8); K's smaller, so
 * that AVX2's scores can take the codes + code_max + 1 as vpmaddubsw's u8
 * side against the 8-bit query without saturating s16 (decode_int_avx2.c):
 * 4 bits 63 (one product a pair), 2 and 3 bits 31 (two products summed in
 * s16). The cost in the codebook's precision: rotated.c int8_steps. */
#define KVQ_ROT_CODE_MAX(bits, side) ((side) ? 127 : (bits) == 4 ? 63 : 31)

/* Lloyd-Max centroids of N(0,1) for 2, 3 and 4 bits (ascending). */
extern const float kvq_rot_centroids_2[4], kvq_rot_centroids_3[8], kvq_rot_centroids_4[16];

/* The fixed reduction tree of 16 lane sums: halves, quarters, eighths, pair. */
static inline float kvq_rot_reduce16(const float p[16]) {
    float a[8];
    for (int l = 0; l < 8; l++) a[l] = p[l] + p[l + 8];
    for (int l = 0; l < 4; l++) a[l] = a[l] + a[l + 4];
    for (int l = 0; l < 2; l++) a[l] = a[l] + a[l + 2];
    return a[0] + a[1];
}

/* The zero row. */
void kvq_rot_zero_row(const kvq_codec *c, void *dst);

/* Finishes an encode from the indices idx (d) and the two reduced sums:
 * stores s and packs the indices, or returns KVQ_ERR_RANGE. b = bits, a
 * constant at each call so the packing specializes. */
static KVQ_ALWAYS_INLINE kvq_status kvq_rot_finish_bits(const kvq_codec *c, const uint8_t *idx, float yc, float cc,
                                                        void *dst, const int b) {
    const uint16_t h = kvq_f32_to_f16(yc / cc);
    if ((h & 0x7FFFu) >= 0x7C00u) return KVQ_ERR_RANGE;
    if ((h & 0x7FFFu) == 0) {
        kvq_rot_zero_row(c, dst);
        return KVQ_OK;
    }
    uint8_t *out = dst;
    kvq_store_u16(out, h);
    kvq_rot_pack_indices(b, c->head_dim, idx, out + 2);
    return KVQ_OK;
}

/* Generic entry (bits from the state). */
kvq_status kvq_rot_finish(const kvq_codec *c, const uint8_t *idx, float yc, float cc, void *dst);

kvq_status kvq_rot_encode_avx2(const kvq_codec *c, const float *x, void *dst);
kvq_status kvq_rot_encode_avx512(const kvq_codec *c, const float *x, void *dst);
void kvq_rot_decode_domain_avx2(const kvq_codec *c, const void *src, float *y);
void kvq_rot_decode_tile_avx2(const kvq_codec *c, const void *src, int n_rows, float *y);
void kvq_rot_decode_domain_avx512(const kvq_codec *c, const void *src, float *y);
void kvq_rot_decode_tile_avx512(const kvq_codec *c, const void *src, int n_rows, float *y);

#endif
