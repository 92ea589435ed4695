/* kvq.h — the only public header of libkvq.
 *
 * kvq stores the KV cache of an LLM compressed and reads it directly in
 * attention. This header is the whole library boundary: the CLI (tools/) uses
 * nothing else.
 *
 * Conventions
 * - Fallible functions return a kvq_status. On failure, kvq_last_error()
 *   returns a one-line message for the calling thread that says what was
 *   wrong; it stays valid until the next failing kvq call on that thread.
 * - The library never exits or aborts on bad input.
 * - Status numbers, once published, never change.
 */
#ifndef KVQ_H
#define KVQ_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ status */

typedef enum kvq_status {
    KVQ_OK = 0,
    KVQ_ERR_INVALID_ARG = 1,  /* a NULL pointer, a size out of range, an unknown name */
    KVQ_ERR_NOMEM = 2,        /* an allocation failed */
    KVQ_ERR_IO = 3,           /* a file could not be opened, read or written */
    KVQ_ERR_FORMAT = 4,       /* malformed input data (file, encoded bytes) */
    KVQ_ERR_UNSUPPORTED = 5,  /* valid request this build or CPU cannot do */
    KVQ_ERR_NONFINITE = 6,    /* NaN or Inf where the operation needs finite values */
    KVQ_ERR_RANGE = 7         /* a finite value too large for the format */
} kvq_status;

/* A short name for a status ("ok", "invalid argument", ...). Never NULL. */
const char *kvq_status_name(kvq_status s);

/* The calling thread's message for its last failing kvq call ("" if none). */
const char *kvq_last_error(void);

/* --------------------------------------------------------------------- isa */

/* Instruction-set paths. Each optimized kernel has a reference (scalar)
 * twin; a higher path is used only where the CPU and OS support it. */
typedef enum kvq_isa {
    KVQ_ISA_REF = 0,     /* portable C */
    KVQ_ISA_AVX2 = 1,    /* AVX2 + FMA + F16C */
    KVQ_ISA_AVX512 = 2   /* AVX-512 F/BW/DQ/VL (+ VNNI, BF16 where present) */
} kvq_isa;

#define KVQ_ISA_COUNT 3

/* Best path this CPU and OS support, detected once (cpuid + xgetbv). */
kvq_isa kvq_isa_detected(void);

/* The path new objects use: kvq_isa_detected(), lowered by the environment
 * variable KVQ_ISA=ref|avx2|avx512 when it names a lower path. */
kvq_isa kvq_isa_default(void);

/* 1 if the path can run here, else 0. */
int kvq_isa_supported(kvq_isa isa);

/* "ref", "avx2", "avx512"; NULL for a value outside the enum. */
const char *kvq_isa_name(kvq_isa isa);

/* Parses "ref", "avx2" or "avx512". */
kvq_status kvq_isa_parse(const char *name, kvq_isa *out);

/* ------------------------------------------------------------------- codec */

/* A KV codec encodes one row: one token's vector of head_dim values for one
 * KV head. head_dim must be a multiple of 32 in [32, KVQ_MAX_HEAD_DIM].
 *
 * Names (what users type after --ctk / --ctv):
 *   f32 f16 bf16                          plain
 *   q8_0 q4_0 q4_1 q5_0 q5_1 iq4_nl       ggml blocks of 32, bit-exact with
 *                                         ggml's reference quantizers
 *   turbo2 turbo3 turbo4                  randomized Walsh-Hadamard rotation
 *   iso3 iso4                             quaternion SO(4) rotation per 4 dims
 *   planar3 planar4                       Givens rotation per 2 dims
 *   rotor3 rotor4                         Cl(3,0) rotor per 3 dims
 * The rotated codecs store b bits per value (Lloyd-Max N(0,1) codebook) plus
 * one fp16 scale per row. Any quantized codec accepts the suffix "+qjl"
 * ("turbo3+qjl"): a 1-bit sign sketch of the residual and its fp16 norm are
 * added to the row (+1 bit/value + 16 bits), giving unbiased inner products.
 *
 * Input values:
 * - f32 stores anything bit for bit.
 * - f16 and bf16 round to nearest even; values beyond their range become
 *   +-Inf, NaN stays NaN (as a hardware conversion does).
 * - every quantized codec (all others) needs finite input: a row holding NaN
 *   or +-Inf is refused with KVQ_ERR_NONFINITE, and one whose scale would
 *   overflow fp16 (|x| beyond about 65504 times the codec's largest level)
 *   with KVQ_ERR_RANGE; in both cases dst is filled with the encoding of an
 *   all-zero row, so nothing undefined is ever stored.
 * - zero rows, constant rows and denormals are valid: a block whose scale
 *   rounds to zero in fp16 is stored as zero.
 * Decoding never fails on any bytes: arbitrary input decodes to some floats
 * (possibly NaN or Inf when the stored fp16 scales are).
 */
#define KVQ_MAX_HEAD_DIM 512

typedef struct kvq_codec kvq_codec;

/* Number of codecs in the table, and the name of the i-th (NULL past the end).
 * The table order is stable; new codecs are appended. */
int kvq_codec_count(void);
const char *kvq_codec_name_at(int index);

/* A codec configured for one head_dim. seed fixes the rotation (and the QJL
 * sketch) of rotated codecs; plain and ggml codecs ignore it. The ISA path
 * is kvq_isa_default(). */
kvq_status kvq_codec_create(const char *name, int head_dim, uint64_t seed,
                            kvq_codec **out);
void kvq_codec_free(kvq_codec *c);

const char *kvq_codec_name(const kvq_codec *c);      /* as given, e.g. "turbo3+qjl" */
int kvq_codec_head_dim(const kvq_codec *c);
size_t kvq_codec_row_bytes(const kvq_codec *c);     /* encoded bytes per row */
double kvq_codec_bits_per_value(const kvq_codec *c); /* row_bytes * 8 / head_dim */
int kvq_codec_is_quantized(const kvq_codec *c);      /* 0 for f32/f16/bf16 */

/* Forces an ISA path (tests compare every path with the reference).
 * KVQ_ERR_UNSUPPORTED if this CPU cannot run it. */
kvq_status kvq_codec_set_isa(kvq_codec *c, kvq_isa isa);
kvq_isa kvq_codec_isa(const kvq_codec *c);

/* Centering: with a mean set, rows are encoded as x - mean and decoded with
 * the mean added back. mean has head_dim finite values; NULL clears it. */
kvq_status kvq_codec_set_mean(kvq_codec *c, const float *mean);

/* x: (head_dim) floats -> dst: (row_bytes) bytes. */
kvq_status kvq_codec_encode_row(const kvq_codec *c, const float *x, void *dst);
/* src: (row_bytes) bytes -> y: (head_dim) floats. */
kvq_status kvq_codec_decode_row(const kvq_codec *c, const void *src, float *y);

/* ---- kv store and attention ---- */

/* A pool of worker threads, created once and reused by every attention call.
 * n_threads counts the calling thread; 1 runs everything on the caller. */
typedef struct kvq_threadpool kvq_threadpool;
kvq_status kvq_threadpool_create(int n_threads, kvq_threadpool **out);
void kvq_threadpool_free(kvq_threadpool *pool);

/* The KV cache of one sequence, stored compressed.
 *
 * Per (layer, kv head) the store keeps a list of compressed tiles of
 * tile_tokens tokens (rows in the codec's format) and one f16 staging tile
 * for the newest tokens; a full staging tile is compressed in one go. Tiles
 * come from a pool that grows on demand: memory follows the used context.
 * Values are rounded to f16 on append (the staging format), so an f32
 * codec stores f16-exact values. */
typedef struct kvq_kv kvq_kv;

typedef struct kvq_kv_params {
    int n_layer, n_kv_head, head_dim;
    const char *ctk, *ctv;  /* K and V codec names (kvq_codec_name_at); NULL = "f16" */
    int n_sinks;            /* the first n_sinks tokens are kept f16 */
    int boundary_layers;    /* the first and last L layers use q8_0 for K and V
                               (f16 where this build has no q8_0 codec) */
    int centering;          /* 1: quantized codecs store x - mean, the per (layer,
                               kv head) channel mean of the first full tile */
    uint64_t seed;          /* fixes the rotations of rotated codecs */
    int tile_tokens;        /* tokens per tile, 1..256; 0 = 32 */
} kvq_kv_params;

/* Defaults: f16/f16, no sinks, no boundary layers, centering on, seed 0,
 * 32-token tiles; the shape fields are 0 and must be set. */
void kvq_kv_params_default(kvq_kv_params *p);

kvq_status kvq_kv_create(const kvq_kv_params *p, kvq_kv **out);
void kvq_kv_free(kvq_kv *kv);

/* Appends one token to one layer. k, v: (n_kv_head, head_dim). Layers are
 * filled independently (a forward pass appends layer by layer). Values must
 * be finite and within f16 range for quantized codecs (else
 * KVQ_ERR_NONFINITE / KVQ_ERR_RANGE and nothing is appended). */
kvq_status kvq_kv_append(kvq_kv *kv, int layer, const float *k, const float *v);
/* Tokens held by a layer. */
int kvq_kv_n_tokens(const kvq_kv *kv, int layer);
/* Keeps the first n_tokens tokens of every layer. Tokens appended afterwards
 * go through staging again, so re-appending the same values rebuilds the
 * same store — exactly when the cut falls in the staging tile, in the sinks
 * or on a tile boundary; a cut inside a compressed tile decodes that tile's
 * kept rows back into staging (one more rounding for quantized codecs). */
kvq_status kvq_kv_truncate(kvq_kv *kv, int n_tokens);
/* Bytes of live data: compressed rows + staged and sink rows (f16) +
 * centering means; and what the same tokens take as f16 K and V. */
size_t kvq_kv_bytes_used(const kvq_kv *kv);
size_t kvq_kv_bytes_f16(const kvq_kv *kv);

/* Attention of one new query position over everything the layer holds (append
 * the token's k and v first). q: (n_head, head_dim) with n_head a multiple
 * of n_kv_head (query head h reads kv head h / (n_head / n_kv_head));
 * out: (n_head, head_dim). Softmax scale 1/sqrt(head_dim). pool may be NULL
 * (single thread). */
kvq_status kvq_attn_decode(const kvq_kv *kv, int layer, kvq_threadpool *pool, int n_head, const float *q,
                           float *out);

/* Causal attention of the last n_q tokens of the layer (append them first):
 * query i sits at position n_tokens - n_q + i and sees positions <= its own.
 * q, out: (n_q, n_head, head_dim). */
kvq_status kvq_attn_prefill(const kvq_kv *kv, int layer, kvq_threadpool *pool, int n_q, int n_head,
                            const float *q, float *out);

#ifdef __cplusplus
}
#endif
#endif /* KVQ_H */
