/* kvstore.h — the KV store's layout, shared with attention (src/attn). */
#ifndef KVQ_KVSTORE_H
#define KVQ_KVSTORE_H

#include "codec/codec_impl.h"

#define KVQ_KV_MAX_TILE 256
/* Bytes of the widest row an interleaved tile holds (q8_0 at the widest head). */
#define KVQ_KV_MAX_ILEAVED_ROW (34 * KVQ_MAX_HEAD_DIM / 32)

/* K or V of one (layer, kv head). Its tiles are carved in order from its
 * own segments, so consecutive tiles are consecutive in memory and decode
 * streams through one address range (hardware prefetchers follow it; tiles
 * scattered over a shared pool left decode latency bound at half the
 * machine's bandwidth). Segments grow geometrically up to a cap, so memory
 * follows the used context. */
typedef struct kvq_kv_stream {
    uint8_t **tiles;  /* (cap_tiles) -> (tile_tokens, row_bytes) codec rows */
    uint8_t **segs;   /* (n_segs) segment k holds kvq_kv_seg_tiles(k) tiles */
    int n_segs;
    uint16_t *stage;  /* (tile_tokens, head_dim) f16: the newest tokens */
    uint16_t *sink;   /* (n_sinks, head_dim) f16: the first tokens */
    float *mean;      /* (head_dim) centering mean of the first tile, when layer->has_mean */
} kvq_kv_stream;

typedef struct kvq_kv_layer {
    kvq_codec *codec[2];  /* K, V; owned by the store, shared between layers */
    size_t tile_bytes[2]; /* K, V: tile_tokens * row_bytes, rounded up to 64 */
    int centered[2];      /* tiles of K / V hold x - mean once has_mean */
    int has_mean;
    int interleaved[2];   /* K / V tiles are in the interleaved layouts (tile_layout.c), not rows:
                           * both, neither, or K alone over f16 V rows (see kv_init) */
    int n_tokens;
    int n_tiles, cap_tiles;
    kvq_kv_stream *streams; /* (n_kv_head, 2): [h * 2 + 0] K, [h * 2 + 1] V */
} kvq_kv_layer;

struct kvq_kv {
    kvq_kv_params p;        /* ctk/ctv point at names below */
    char ctk[32], ctv[32], boundary[32];
    kvq_codec *codecs[4];   /* distinct codecs in use */
    kvq_kv_layer *layers;   /* (n_layer) */
    size_t max_row_bytes;   /* of the codecs in use */
    uint8_t *rows;          /* (tile_tokens, max_row_bytes) a session's codec rows on the way out */
    kvq_codec *f16;         /* staging's f32 <-> f16 rows (the f16 codec: SIMD, bit-exact with fp16.h) */
    kvq_scratch attn;       /* attention's per-call buffers, kept between calls (reading a const kv may take it) */
    kvq_scratch flush;      /* a flush's per-stream scratch (floats, rows, error message), kept between flushes */
};

/* Tokens of a layer in the sinks, the compressed tiles and the staging
 * tile, in position order. */
static inline int kvq_kv_n_sunk(const kvq_kv *kv, const kvq_kv_layer *L) {
    return L->n_tokens < kv->p.n_sinks ? L->n_tokens : kv->p.n_sinks;
}
static inline int kvq_kv_n_staged(const kvq_kv *kv, const kvq_kv_layer *L) {
    return L->n_tokens - kvq_kv_n_sunk(kv, L) - L->n_tiles * kv->p.tile_tokens;
}

/* 1 if tiles of this codec can take the interleaved layout (the ggml
 * codecs; the rotated ones at head_dim a multiple of 32 (4 bits) or 64). */
int kvq_kv_interleavable(const kvq_codec *c);
/* 1 if the codec's rows are plain f16 (attention reads them in place; the
 * integer kernel reads them as V rows beside interleaved K). */
static inline int kvq_kv_f16_rows(const kvq_codec *c) {
    return !c->qjl && !c->mean && c->desc->family == &kvq_family_plain && c->desc->param == KVQ_PLAIN_F16;
}
/* T ggml rows (T a multiple of 16) -> one interleaved tile of side 0 (K) or
 * 1 (V), and row r of such a tile back to its ggml bytes (bit-exact). */
void kvq_kv_tile_pack(const kvq_codec *c, int side, int T, const uint8_t *rows, uint8_t *tile);
void kvq_kv_tile_unpack_row(const kvq_codec *c, int side, int T, const uint8_t *tile, int r, uint8_t *row);
/* A whole interleaved tile decoded to floats y (T, head_dim), bit-exact with
 * the codec's row decode of the unpacked rows (attention's scratch path). */
void kvq_kv_tile_decode(const kvq_codec *c, int side, int T, const uint8_t *tile, float *y);
typedef void (*kvq_kv_tile_decode_fn)(const kvq_codec *c, int side, int T, const uint8_t *tile, float *y);
/* The same with AVX-512 (tile_layout_avx512.c), bit-exact with it. */
void kvq_kv_tile_decode_avx512(const kvq_codec *c, int side, int T, const uint8_t *tile, float *y);
/* The same with AVX2, FMA and F16C (tile_layout_avx2.c), bit-exact with it. */
void kvq_kv_tile_decode_avx2(const kvq_codec *c, int side, int T, const uint8_t *tile, float *y);
/* kvq_kv_tile_pack with AVX-512 and BMI2 for the rotated codecs at head_dim
 * a multiple of 64 (the same bytes; the others go to kvq_kv_tile_pack). */
void kvq_kv_tile_pack_avx512(const kvq_codec *c, int side, int T, const uint8_t *rows, uint8_t *tile);
/* The T rows of a tile of layer L as codec rows, whatever the layer's layout. */
void kvq_kv_tile_rows(const kvq_kv_layer *L, int side, int T, const uint8_t *tile, uint8_t *rows);

/* Makes room for tiles 0..n_tiles-1 in every stream of a layer without
 * changing what it holds (session load fills them in place). */
kvq_status kvq_kv_reserve_tiles(kvq_kv *kv, int layer, int n_tiles);

#endif
