/* attn_kernels.h — the per-ISA tile kernels of attention, and what decode.c
 * and prefill.c share. */
#ifndef KVQ_ATTN_KERNELS_H
#define KVQ_ATTN_KERNELS_H

#include "common/threadpool.h"
#include "kv/kvstore.h"

/* Query heads one kernel call serves; larger groups are split. */
#define KVQ_ATTN_MAX_G 8

/* How the kernel reads K and V rows: floats, or f16 / bf16 straight from a
 * tile (f16 codec tiles, staging, sinks; bf16 tiles where the path has no
 * fused kernel) with no float copy. */
enum { KVQ_ROWS_F32, KVQ_ROWS_F16, KVQ_ROWS_BF16, KVQ_ROWS_COUNT };

/* Online-softmax attention of G <= KVQ_ATTN_MAX_G query heads over n rows
 * (1 <= n <= KVQ_KV_MAX_TILE) of one tile. q: (G, head_dim), prepared
 * (scaled, in the K domain); k, v: (n, head_dim) of the row kind. Updates the
 * running max m (G), sum l (G) and accumulator acc (G, head_dim).
 * k_next, v_next: rows of a later tile of the same streams (at least n of
 * them), prefetched while these are read; or NULL. */
typedef void (*kvq_attn_tile_fn)(int G, int d, int n, const float *q, const void *k, const void *v,
                                 const void *k_next, const void *v_next, float *m, float *l, float *acc);

/* Row formats the fused kernel reads in place, dequantizing in registers:
 * one per codec layout (kvq_attn_rows_fmt maps a codec to its format). */
enum {
    KVQ_FMT_F32, KVQ_FMT_F16, KVQ_FMT_BF16, KVQ_FMT_Q8_0, KVQ_FMT_Q4_0, KVQ_FMT_Q4_1, KVQ_FMT_Q5_0, KVQ_FMT_Q5_1,
    KVQ_FMT_IQ4_NL, KVQ_FMT_ROT2, KVQ_FMT_ROT3, KVQ_FMT_ROT4, KVQ_FMT_COUNT
};

/* n rows of one format, in place in a tile (or staging / sinks). */
typedef struct kvq_attn_rows {
    const uint8_t *base; /* row 0 */
    size_t stride;       /* bytes from one row to the next */
    const float *lut;    /* (16) codebook of IQ4_NL / ROT rows, replicated to 16 entries; else NULL */
    int fmt;             /* KVQ_FMT_* */
    const uint8_t *next; /* a tile further on in the stream (same stride), prefetched while these are read; or NULL */
} kvq_attn_rows;

/* The tile kernel over rows of any formats: decodes each K and V row once,
 * in registers, for all G heads. Same contract as kvq_attn_tile_fn. */
typedef void (*kvq_attn_fused_fn)(int G, int d, int n, const float *q, const kvq_attn_rows *k,
                                  const kvq_attn_rows *v, float *m, float *l, float *acc);

/* One query head of a block of queries: its prepared query (head_dim), its
 * running max, sum and accumulator (head_dim), and how many of the rows it
 * may see (causal mask; <= 0: none). */
typedef struct kvq_attn_qrow {
    const float *q;
    float *m, *l, *acc;
    int n_valid;
} kvq_attn_qrow;

/* Query heads one block-kernel call takes at most. */
#define KVQ_ATTN_BLOCK_ROWS 512

/* Online-softmax attention of R <= KVQ_ATTN_BLOCK_ROWS query heads (any mix
 * of queries and heads) over n rows of F32 or F16 format (AVX2: BF16 too;
 * K and V of one format): scores and P x V
 * as register-blocked products over 32-row slices, each K / V row loaded
 * once for all R heads. Prefill's kernel. */
typedef void (*kvq_attn_block_fn)(int R, const kvq_attn_qrow *rows, int d, int n, const kvq_attn_rows *k,
                                  const kvq_attn_rows *v);

/* A query head prepared for the integer kernel: per 32-dim block, int8
 * values with scale max|q| / 127 (one_scale: max over the whole head, every
 * block's scale the same) and their residual ((q / scale - q8) x 254,
 * int8), each with -off x (sum of the block's int8 values) for K codes
 * stored as value + off; off_all sums the int8 values' terms over blocks.
 * sum: the block's int8 values summed times its scale (what the int8 dot
 * products see), which K blocks with a min (q4_1, q5_1: value d c + m)
 * multiply by m. */
typedef struct kvq_attn_qi8 {
    _Alignas(64) int8_t q[2][KVQ_MAX_HEAD_DIM];
    float scale[KVQ_MAX_HEAD_DIM / 32];
    float sum[KVQ_MAX_HEAD_DIM / 32];
    int32_t off[2][KVQ_MAX_HEAD_DIM / 32];
    int32_t off_all;
    /* The AVX2 kernel's 16-bit query (decode_int_avx2.c; not with
     * one_scale): w = 254 q0 + q1 per block (~15 bits); wscale: what one
     * step of w stands for; w_off, wsum: as off[0] and sum, for w. */
    _Alignas(64) int16_t w[KVQ_MAX_HEAD_DIM];
    float wscale[KVQ_MAX_HEAD_DIM / 32];
    float wsum[KVQ_MAX_HEAD_DIM / 32];
    int32_t w_off[KVQ_MAX_HEAD_DIM / 32];
} kvq_attn_qi8;

typedef void (*kvq_attn_qi8_fn)(const float *q, int d, int code_off, int one_scale, kvq_attn_qi8 *out);

/* NT (1 or 2, NT T <= KVQ_KV_MAX_TILE) consecutive interleaved K tiles and
 * V tiles (tile_layout.c) of T tokens (a multiple of 16) of q4_0, q8_0,
 * iq4_nl, q4_1, q5_0, q5_1 or a rotated codec of 2, 3 or 4 bits, with the
 * tiles after them in their streams to prefetch (or NULL). Two tiles share
 * one softmax step and one p rounding: the per-tile reductions were most of
 * the kernel's time past the bytes (a 64-token run: -28% per token for
 * turbo4). iq4_nl and the rotated kinds index a table of 16 u8 codes
 * (codebook value x 1 / unit, rounded, + 128); a code c stands for
 * (c - 128) x unit. V may instead be KVQ_ITILE_F16: tiles of T f16 rows
 * (not interleaved), P x V in float. The kinds before KVQ_ITILE_K_COUNT are
 * the ones K can take; the rotated kinds come last among them. */
enum {
    KVQ_ITILE_Q4_0, KVQ_ITILE_Q8_0, KVQ_ITILE_IQ4_NL, KVQ_ITILE_Q4_1, KVQ_ITILE_Q5_0, KVQ_ITILE_Q5_1,
    KVQ_ITILE_ROT2, KVQ_ITILE_ROT3, KVQ_ITILE_ROT4,
    KVQ_ITILE_F16, KVQ_ITILE_COUNT, KVQ_ITILE_K_COUNT = KVQ_ITILE_F16
};
typedef struct kvq_attn_itiles {
    const uint8_t *k[2], *v[2], *k_next[2], *v_next[2];
    int T, NT;
    int k_kind, v_kind;      /* KVQ_ITILE_* */
    const uint8_t *lut[2];   /* K / V code tables (16; ROT3 / ROT2: four / three of 64, decode_vnni.c rot_tables), where the kind has one */
    float unit[2];           /* K / V: the value of one step of a table's codes */
    int code_max[2];         /* K / V: a table's largest |code - 128| (0 without one) */
} kvq_attn_itiles;

/* Online-softmax attention of G <= KVQ_ATTN_MAX_G query heads over the first
 * n tokens of interleaved tiles, in integers. AVX512-VNNI (decode_vnni.c):
 * scores from the int8 query (and its residual where K is q8_0), P x V
 * from the softmax weights times each token's V scale rounded to 8 bits
 * per (head, block, NT tiles) (rotated V: per (head, NT tiles)). AVX2
 * (decode_int_avx2.c): the same for q4_0 / q4_1 / q5_0 / q5_1, 16-bit
 * query and weights for the others. f16 V rows: P x V in float. Same
 * running state as kvq_attn_tile_fn. */
typedef void (*kvq_attn_int_fn)(int G, int d, int n, const kvq_attn_qi8 *q, const kvq_attn_itiles *t, float *m,
                                float *l, float *acc);

typedef struct kvq_attn_kernels {
    kvq_attn_tile_fn tile[KVQ_ROWS_COUNT]; /* by row kind */
    kvq_attn_fused_fn fused;  /* NULL where the path has none: tiles are decoded to floats first */
    kvq_attn_block_fn block;  /* NULL where the path has none: queries run one by one */
    kvq_attn_int_fn integer;  /* the integer kernel (AVX2, AVX512-VNNI); NULL on the scalar path: tiles are decoded to rows */
    kvq_attn_qi8_fn qi8;      /* the queries for it (with it) */
    kvq_kv_tile_decode_fn tile_decode; /* interleaved tiles to floats (prefill, or no integer kernel) */
} kvq_attn_kernels;

/* The fused format of a codec's attention-domain rows, or -1 (+qjl). */
int kvq_attn_rows_fmt(const kvq_codec *c);

void kvq_attn_fused_avx512(int G, int d, int n, const float *q, const kvq_attn_rows *k, const kvq_attn_rows *v,
                           float *m, float *l, float *acc);

/* The fused kernel's P x V alone: acc (G, d) += p (G, row stride np) x the
 * first n rows of v (the integer kernel's P x V over f16 V rows). */
void kvq_attn_rows_pv_avx512(int G, int d, int n, int np, const float *p, const kvq_attn_rows *v, float *acc);

void kvq_attn_block_avx2(int R, const kvq_attn_qrow *rows, int d, int n, const kvq_attn_rows *k,
                         const kvq_attn_rows *v);
void kvq_attn_block_avx512(int R, const kvq_attn_qrow *rows, int d, int n, const kvq_attn_rows *k,
                           const kvq_attn_rows *v);

void kvq_attn_vnni_avx512(int G, int d, int n, const kvq_attn_qi8 *q, const kvq_attn_itiles *t, float *m, float *l,
                          float *acc);
void kvq_attn_qi8_prepare_avx512(const float *q, int d, int code_off, int one_scale, kvq_attn_qi8 *out);

void kvq_attn_int_avx2(int G, int d, int n, const kvq_attn_qi8 *q, const kvq_attn_itiles *t, float *m, float *l,
                       float *acc);
void kvq_attn_qi8_prepare_avx2(const float *q, int d, int code_off, int one_scale, kvq_attn_qi8 *out);
/* acc (G, d) += p (G, row stride np) x the first n f16 rows of v (stride
 * head_dim): decode_avx2.c's P x V, for the AVX2 integer kernel's f16 V. */
void kvq_attn_rows_pv_f16_avx2(int G, int d, int n, int np, const float *p, const uint16_t *v, float *acc);

/* The kernels of a path (the next lower one where a path lacks a kernel). */
void kvq_attn_kernels_get(kvq_isa isa, kvq_attn_kernels *out);

void kvq_attn_tile_f32_ref(int G, int d, int n, const float *q, const void *k, const void *v, const void *k_next,
                           const void *v_next, float *m, float *l, float *acc);
void kvq_attn_tile_f16_ref(int G, int d, int n, const float *q, const void *k, const void *v, const void *k_next,
                           const void *v_next, float *m, float *l, float *acc);
void kvq_attn_tile_f32_avx2(int G, int d, int n, const float *q, const void *k, const void *v, const void *k_next,
                            const void *v_next, float *m, float *l, float *acc);
void kvq_attn_tile_f16_avx2(int G, int d, int n, const float *q, const void *k, const void *v, const void *k_next,
                            const void *v_next, float *m, float *l, float *acc);
void kvq_attn_tile_bf16_ref(int G, int d, int n, const float *q, const void *k, const void *v, const void *k_next,
                            const void *v_next, float *m, float *l, float *acc);
void kvq_attn_tile_bf16_avx2(int G, int d, int n, const float *q, const void *k, const void *v, const void *k_next,
                             const void *v_next, float *m, float *l, float *acc);
void kvq_attn_tile_f32_avx512(int G, int d, int n, const float *q, const void *k, const void *v, const void *k_next,
                              const void *v_next, float *m, float *l, float *acc);
void kvq_attn_tile_f16_avx512(int G, int d, int n, const float *q, const void *k, const void *v, const void *k_next,
                              const void *v_next, float *m, float *l, float *acc);

/* The integer kernel's view of layer L's interleaved tiles (L->interleaved[0]):
 * their kinds, code tables (written to codes, which must outlive it), units
 * and largest codes; T, NT and the tile pointers are left to the caller.
 * kvq_attn_itiles_query prepares a query in K's domain (scaled, rotated)
 * for the kernel of kern over such tiles. Decode's own setup, and
 * bench/int_kernel_bench.c's. */
void kvq_attn_itiles_setup(const kvq_kv_layer *L, uint8_t codes[2][256], kvq_attn_itiles *it);
void kvq_attn_itiles_query(const kvq_attn_kernels *kern, const kvq_attn_itiles *it, const float *qd, int d,
                           kvq_attn_qi8 *out);

/* Causal attention of n_q queries at positions pos0.. (each sees positions
 * up to its own; decode is n_q = 1 at the last token) over one layer.
 * q, out: (n_q, n_head, head_dim). isa picks the kernels (tests force each
 * path). */
kvq_status kvq_attn_run(const kvq_kv *kv, int layer, kvq_threadpool *pool, kvq_isa isa, int pos0, int n_q,
                        int n_head, const float *q, float *out);

#endif
