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
 *   with KVQ_ERR_RANGE (so is a +qjl row whose residual norm would overflow
 *   fp16); in both cases dst is filled with the encoding of an
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

/* ---- gguf ---- */

/* A GGUF model file (v2 or v3), mapped read-only and fully validated at open:
 * header, every key/value, every tensor's type, dims, size, alignment and
 * position (inside the file, no overlaps), unique keys and names. A file
 * that fails a check gets KVQ_ERR_FORMAT and a message naming the field and
 * its byte offset; a file that cannot be read gets KVQ_ERR_IO. */
typedef struct kvq_gguf kvq_gguf;

kvq_status kvq_gguf_open(const char *path, kvq_gguf **out);
void kvq_gguf_close(kvq_gguf *g); /* NULL is fine */

uint32_t kvq_gguf_version(const kvq_gguf *g);      /* 2 or 3 */
uint64_t kvq_gguf_file_size(const kvq_gguf *g);
uint64_t kvq_gguf_alignment(const kvq_gguf *g);    /* general.alignment, or 32 */
uint64_t kvq_gguf_data_offset(const kvq_gguf *g);  /* file offset of the tensor data section */
int64_t kvq_gguf_kv_count(const kvq_gguf *g);
int64_t kvq_gguf_tensor_count(const kvq_gguf *g);

/* Key/value i, 0 <= i < kv_count (NULL / KVQ_ERR_INVALID_ARG outside). */
const char *kvq_gguf_kv_key(const kvq_gguf *g, int64_t i);
/* "u8" "i8" "u16" "i16" "u32" "i32" "u64" "i64" "f32" "f64" "bool" "string",
 * or "array[ELEM]" with ELEM one of those or "array". */
const char *kvq_gguf_kv_type_name(const kvq_gguf *g, int64_t i);
/* The value as one line of text into buf (cap bytes, NUL included):
 * integers in decimal, floats with %.9g (f32) / %.17g (f64), true/false,
 * strings in double quotes with \\ \" \n \r \t \xNN escapes, arrays as
 * "[ELEM x N] item, item, ..." (the first few items; nested arrays as their
 * own "[ELEM x N]"). Text that does not fit ends with "...". */
kvq_status kvq_gguf_kv_value_text(const kvq_gguf *g, int64_t i, char *buf, size_t cap);

/* Tensor i, 0 <= i < tensor_count, in file order (NULL / -1 / 0 outside). */
const char *kvq_gguf_tensor_name(const kvq_gguf *g, int64_t i);
int kvq_gguf_tensor_type(const kvq_gguf *g, int64_t i);             /* ggml type id */
const char *kvq_gguf_tensor_type_name(const kvq_gguf *g, int64_t i); /* "f32", "q4_1", "q4_K", ... */
int kvq_gguf_tensor_n_dims(const kvq_gguf *g, int64_t i);           /* 1..4 */
int64_t kvq_gguf_tensor_dim(const kvq_gguf *g, int64_t i, int d);  /* ne[d], ne[0] fastest; 1 past n_dims */
uint64_t kvq_gguf_tensor_offset(const kvq_gguf *g, int64_t i);     /* from the start of the file */
uint64_t kvq_gguf_tensor_bytes(const kvq_gguf *g, int64_t i);
/* 1 if kvq's model code can compute with the tensor's type, else 0. */
int kvq_gguf_tensor_type_supported(const kvq_gguf *g, int64_t i);

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
 * for the newest tokens; a full staging tile is compressed in one go. A
 * stream's tiles are carved in order from segments allocated as the context
 * grows: memory follows the used context.
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
    int tile_layout;        /* KVQ_TILES_*: how q4_0 / q8_0 tiles are laid out */
} kvq_kv_params;

/* Tile layouts. A side whose codec is a ggml block kind or a rotated one
 * (without QJL) can store its tiles interleaved (tokens or dims as vector
 * lanes), which the integer attention kernels (AVX512-VNNI, AVX2) read; the
 * bytes are the same. Their scores and P x V round the query and the
 * softmax weights to 8 bits (AVX2: up to 15 for some kinds; docs/PERF.md
 * and docs/ATTN_PROTO.md state the error). */
enum {
    KVQ_TILES_AUTO = 0,    /* interleaved where the default ISA path is AVX2 or better (and tile_tokens % 16 == 0) */
    KVQ_TILES_ROWS,        /* always codec rows: float kernels */
    KVQ_TILES_INTERLEAVED  /* interleaved where the codecs and tile_tokens allow, on any ISA */
};

/* Defaults: f16/f16, no sinks, no boundary layers, centering on, seed 0,
 * 32-token tiles, KVQ_TILES_AUTO; the shape fields are 0 and must be set. */
void kvq_kv_params_default(kvq_kv_params *p);

kvq_status kvq_kv_create(const kvq_kv_params *p, kvq_kv **out);
void kvq_kv_free(kvq_kv *kv);

/* Appends one token to one layer. k, v: (n_kv_head, head_dim). Layers are
 * filled independently (a forward pass appends layer by layer). Values must
 * be finite and within f16 range for quantized codecs (else
 * KVQ_ERR_NONFINITE / KVQ_ERR_RANGE and nothing is appended). Every
 * tile_tokens-th token compresses the staging tile: its K and V streams are
 * encoded in parallel over pool (NULL: on the calling thread; the result is
 * the same). */
kvq_status kvq_kv_append(kvq_kv *kv, int layer, kvq_threadpool *pool, const float *k, const float *v);
/* Tokens held by a layer. */
int kvq_kv_n_tokens(const kvq_kv *kv, int layer);
/* Keeps the first n_tokens tokens of every layer. Tokens appended afterwards
 * go through staging again, so re-appending the same values rebuilds the
 * same store — exactly when the cut falls in the staging tile, in the sinks
 * or on a tile boundary; a cut inside a compressed tile decodes that tile's
 * kept rows back into staging (one more rounding for quantized codecs). */
kvq_status kvq_kv_truncate(kvq_kv *kv, int n_tokens);
/* Reads token pos of a layer back as attention sees it: k, v (n_kv_head,
 * head_dim), compressed rows decoded and the centering mean added back. */
kvq_status kvq_kv_read(const kvq_kv *kv, int layer, int pos, float *k, float *v);
/* Bytes of live data: compressed rows + staged and sink rows (f16) +
 * centering means; and what the same tokens take as f16 K and V. */
size_t kvq_kv_bytes_used(const kvq_kv *kv);
size_t kvq_kv_bytes_f16(const kvq_kv *kv);
/* Tokens every layer holds as f16 rows rather than in its codecs: the sinks
 * plus the staging tile (the newest tokens, up to tile_tokens - 1, until
 * their tile fills). A short cache is mostly these, so its bytes are not
 * yet the codec's ratio. */
int kvq_kv_n_f16_tokens(const kvq_kv *kv);

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

/* ---- tokenizer and sampling ---- */

/* A tokenizer is built from the arrays a GGUF file holds under
 * tokenizer.ggml.*; it is read-only afterwards, so one tokenizer may encode
 * and decode on many threads at once.
 *
 * model "gpt2": byte-level BPE. pre (tokenizer.ggml.pre) picks the split
 *   rules, as llama.cpp reads them: "gpt2", "smollm" (every digit alone,
 *   then gpt2's rules), "llama-bpe" (Llama 3), "qwen2", or NULL/"default"
 *   (llama.cpp's fallback for BPE files without a pre name).
 * model "llama": SentencePiece with scores: spaces become U+2581, a space is
 *   prepended (add_space_prefix), unknown characters fall back to the byte
 *   tokens <0xXX> (or to unk_id when the byte token is missing). pre is
 *   ignored.
 * Special tokens (type CONTROL or UNKNOWN) are recognized in input text only
 * when encode's parse_special is set; USER_DEFINED tokens always are (as in
 * llama.cpp). Where several match at one position the longest wins. */
typedef struct kvq_tokenizer kvq_tokenizer;

/* GGUF's tokenizer.ggml.token_type values. */
typedef enum kvq_token_type {
    KVQ_TOKEN_UNDEFINED = 0,   /* read as NORMAL */
    KVQ_TOKEN_NORMAL = 1,
    KVQ_TOKEN_UNKNOWN = 2,
    KVQ_TOKEN_CONTROL = 3,
    KVQ_TOKEN_USER_DEFINED = 4,
    KVQ_TOKEN_UNUSED = 5,
    KVQ_TOKEN_BYTE = 6
} kvq_token_type;

typedef struct kvq_tokenizer_params {
    const char *model;             /* "gpt2" or "llama" */
    const char *pre;               /* see above; NULL = "default" */
    int32_t n_vocab;
    const char *const *tokens;     /* (n_vocab) UTF-8 texts */
    const uint32_t *token_lens;    /* (n_vocab) byte lengths; NULL: tokens are NUL-terminated */
    const int32_t *token_types;    /* (n_vocab) kvq_token_type; NULL: all NORMAL */
    const float *scores;           /* (n_vocab); needed by "llama", ignored by "gpt2" */
    int32_t n_merges;
    const char *const *merges;     /* (n_merges) "left right", rank = index; "gpt2" only */
    const uint32_t *merge_lens;    /* (n_merges) byte lengths; NULL: NUL-terminated */
    int32_t bos_id, eos_id, eot_id, unk_id, pad_id;  /* -1 where absent */
    int add_bos;                   /* the model's default for encode's add_bos < 0 */
    int add_space_prefix;          /* -1: the model's default (1 for llama, 0 for gpt2) */
} kvq_tokenizer_params;

/* Validates everything (ids in range, types known, merges naming known
 * tokens whose concatenation is a token, scores not NaN) and builds the
 * lookup tables. KVQ_ERR_FORMAT with a message on bad data. */
kvq_status kvq_tokenizer_create(const kvq_tokenizer_params *p, kvq_tokenizer **out);
void kvq_tokenizer_free(kvq_tokenizer *t);

int32_t kvq_tokenizer_n_vocab(const kvq_tokenizer *t);

typedef enum kvq_special {
    KVQ_SPECIAL_BOS = 0,
    KVQ_SPECIAL_EOS = 1,
    KVQ_SPECIAL_EOT = 2,
    KVQ_SPECIAL_UNK = 3,
    KVQ_SPECIAL_PAD = 4
} kvq_special;

/* The id of a special token, -1 if the vocabulary has none. */
int32_t kvq_tokenizer_special_id(const kvq_tokenizer *t, kvq_special which);

/* 1 for ids that end a generation (eos, eot). */
int kvq_tokenizer_is_eog(const kvq_tokenizer *t, int32_t id);

/* Encodes text[0..len) (any bytes: ill-formed UTF-8 goes through the byte
 * tokens, so decoding gives the same bytes back, except that "gpt2" drops a
 * byte the vocabulary has no token for, as HF tokenizers and llama.cpp do). add_bos: 1 prepend bos,
 * 0 not, -1 the model's default. Writes up to capacity ids and sets *n_ids
 * to the number the text needs; if that exceeds capacity it returns
 * KVQ_ERR_RANGE (ids may be NULL with capacity 0 to ask for the size). */
kvq_status kvq_tokenizer_encode(const kvq_tokenizer *t, const char *text, size_t len,
                                int add_bos, int parse_special, int32_t *ids,
                                size_t capacity, size_t *n_ids);

/* The bytes of one token: its text with the model's encoding undone (byte
 * level mapping, U+2581, <0xXX>). CONTROL tokens give their text only when
 * special is set, else nothing. Sets *n to the length; KVQ_ERR_RANGE if it
 * exceeds capacity. The bytes need not be valid UTF-8 alone. */
kvq_status kvq_tokenizer_token_to_piece(const kvq_tokenizer *t, int32_t id, int special,
                                        char *buf, size_t capacity, size_t *n);

/* Streaming detokenizer for display: it emits only complete UTF-8. A
 * multi-byte character split across tokens is held back until it completes;
 * bytes that cannot start or continue a well-formed sequence are emitted as
 * U+FFFD, one per maximal ill-formed part (as the Unicode standard
 * recommends), and kvq_detok_flush turns a still-incomplete tail into one
 * U+FFFD. So the output is always valid UTF-8; for the exact bytes, use
 * kvq_tokenizer_token_to_piece. For "llama" tokenizers with a space prefix
 * the space encode prepended to the text is dropped from the first piece. */
typedef struct kvq_detok kvq_detok;

kvq_status kvq_detok_create(const kvq_tokenizer *t, int special, kvq_detok **out);
void kvq_detok_free(kvq_detok *d);
/* Adds one token; *text and *len receive the UTF-8 now complete (valid until
 * the next call on d; *len may be 0). */
kvq_status kvq_detok_push(kvq_detok *d, int32_t id, const char **text, size_t *len);
/* Ends the stream: returns what is left and resets d for a new one. */
kvq_status kvq_detok_flush(kvq_detok *d, const char **text, size_t *len);

/* Sampling with llama.cpp's semantics and names. Each step runs, in
 * llama.cpp's default chain order: repeat penalty, top-k, top-p, min-p,
 * temperature, then a draw from the softmax of what is left. temp <= 0 is
 * greedy: the argmax after the penalty (lowest id on ties). */
typedef struct kvq_sampler kvq_sampler;

typedef struct kvq_sampler_params {
    float temp;            /* <= 0: greedy */
    int32_t top_k;         /* <= 0: off */
    float top_p;           /* >= 1: off */
    float min_p;           /* <= 0: off */
    float repeat_penalty;  /* 1: off; positive logits divided, negative multiplied */
    int32_t repeat_last_n; /* accepted tokens the penalty looks back on; 0: off */
    uint64_t seed;         /* same seed, same logits -> same choices */
} kvq_sampler_params;

/* llama.cpp's defaults: temp 0.8, top_k 40, top_p 0.95, min_p 0.05,
 * repeat_penalty 1.0, repeat_last_n 64, seed 0. */
kvq_sampler_params kvq_sampler_default_params(void);

kvq_status kvq_sampler_create(const kvq_sampler_params *p, kvq_sampler **out);
void kvq_sampler_free(kvq_sampler *s);
/* logits: (n_vocab) floats, not modified. -Inf masks a token; NaN, +Inf or
 * all -Inf give KVQ_ERR_NONFINITE. The chosen id goes to *id; it is not
 * accepted (call kvq_sampler_accept). */
kvq_status kvq_sampler_sample(kvq_sampler *s, const float *logits, int32_t n_vocab,
                              int32_t *id);
/* Records a token (prompt or generated) in the penalty history. */
void kvq_sampler_accept(kvq_sampler *s, int32_t id);

/* ---- model and inference context ---- */

/* A model loaded from a GGUF file (llama, qwen2, qwen3 architectures). One
 * model may serve several contexts. */
typedef struct kvq_model kvq_model;

/* How a model holds its file while it lives.
 * RESIDENT (kvq_model_load's): read whole into memory of its own at load,
 * advised for 2 MiB pages. Decode reads every weight once a token, and
 * a 2 MiB page covers what 512 small ones do: 14-18% more tokens a second
 * on SmolLM2-135M at depth 0 (docs/PERF.md). Falls back to MAPPED where the
 * file would take more than 3/4 of MemAvailable or the memory cannot be
 * had.
 * MAPPED: memory-mapped read-only, paged in on first use: starts at once
 * and shares its pages with the page cache, in 4 KiB pages. */
typedef enum { KVQ_WEIGHTS_RESIDENT = 0, KVQ_WEIGHTS_MAPPED = 1 } kvq_weights_mode;

typedef struct kvq_model_info {
    const char *arch;   /* "llama", "qwen2", "qwen3" */
    int n_layer, n_embd, n_head, n_kv_head, head_dim, n_ff, n_vocab;
    int n_ctx_train;    /* the context length the model was trained for */
    size_t weight_bytes; /* bytes of weights read per token */
} kvq_model_info;

kvq_status kvq_model_load(const char *path, kvq_model **out); /* RESIDENT */
kvq_status kvq_model_load_with(const char *path, kvq_weights_mode mode, kvq_model **out);
/* The mode the model got (RESIDENT may have fallen back to MAPPED). */
kvq_weights_mode kvq_model_weights_mode(const kvq_model *m);
void kvq_model_free(kvq_model *m);
void kvq_model_get_info(const kvq_model *m, kvq_model_info *info);
/* The model's GGUF file, for metadata lookups. */
const kvq_gguf *kvq_model_gguf(const kvq_model *m);
/* The model's tokenizer, built from its tokenizer.ggml.* metadata; the
 * caller frees it with kvq_tokenizer_free. */
kvq_status kvq_model_tokenizer(const kvq_model *m, kvq_tokenizer **out);

/* Chat: formats messages with the model's chat template. kvq recognizes
 * template families (ChatML today) rather than running Jinja; an unknown
 * template is KVQ_ERR_UNSUPPORTED with a message. When the first message is
 * not a system message and the template has a default system prompt, it is
 * inserted. add_assistant appends the header that starts the reply. Writes
 * a NUL-terminated string; *len gets its length without the NUL. If it does
 * not fit in cap bytes: KVQ_ERR_RANGE, *len still says how long it is. */
typedef struct kvq_chat_msg {
    const char *role;     /* "system", "user", "assistant" */
    const char *content;
} kvq_chat_msg;
kvq_status kvq_chat_apply(const kvq_model *m, const kvq_chat_msg *msgs, int n_msgs, int add_assistant, char *buf,
                          size_t cap, size_t *len);

/* KV cache presets (--kv NAME): sugar for a K/V codec pair. Every codec
 * name is a preset with K = V; the named ones: k8v4 (q8_0 K, q4_0 V),
 * k_iso3/k_iso4/k_rotor3/k_rotor4 (that K, f16 V), iso3_sym/iso4_sym/
 * rotor3_sym/rotor4_sym (K = V), rot_k_tq4v (rotor4 K, turbo4 V), and auto
 * (the measured best quality per byte, see docs/QUALITY.md). */
int kvq_kv_preset_count(void);                 /* named presets only */
const char *kvq_kv_preset_name(int index);      /* NULL past the end */
kvq_status kvq_kv_preset(const char *name, const char **ctk, const char **ctv);

/* An inference context: one sequence, its compressed KV cache, a thread
 * pool and scratch buffers. */
typedef struct kvq_ctx kvq_ctx;

/* Prompt tokens per forward chunk when kvq_ctx_params.n_batch is 0. */
#define KVQ_DEFAULT_N_BATCH 256

typedef struct kvq_ctx_params {
    int n_ctx;            /* most tokens the context may hold; 0 = the model's trained length */
    int n_threads;        /* 0 = every online core */
    int n_batch;          /* prompt tokens per forward chunk; 0 = KVQ_DEFAULT_N_BATCH */
    const char *ctk, *ctv; /* K and V codecs; NULL = "f16" */
    int n_sinks;          /* first tokens kept f16 */
    int boundary_layers;  /* first and last L layers use q8_0 */
    int centering;        /* per-channel mean removal for quantized codecs */
    uint64_t seed;        /* rotation seed of rotated codecs */
    int kv_tile_layout;   /* KVQ_TILES_* of the store (0: auto, interleaved tiles
                             for the integer kernels where the CPU has AVX2 or
                             better) */
    int int8_prefill;     /* 1: prompt chunks quantize activations to int8 blocks
                             (faster prefill, logits move; see docs/PERF.md);
                             0: float activations in prompt chunks */
    int float_decode;     /* 1: decode matvecs on float activations; 0: on 16-bit
                             integer codes per block of 32 where the CPU has a fast
                             kernel (AVX2, AVX-512 VNNI; error <= max|x_b| / 32512) */
    size_t mem_limit;     /* bytes the context may plan for (weights + KV + scratch);
                             0 = MemAvailable from /proc/meminfo, or the room the
                             process's memory cgroups leave if less (no check where unknown) */
} kvq_ctx_params;

/* Defaults: n_ctx 0, n_threads 0, n_batch 0, f16/f16, no sinks, no boundary
 * layers, centering on, seed 0, mem_limit 0. */
void kvq_ctx_params_default(kvq_ctx_params *p);

/* What a context with these parameters needs when its cache is full: the
 * model's weights (mapped, but they must fit in memory to run at speed),
 * the KV cache at n_ctx tokens in its codecs (sinks and the staging tile in
 * f16, tiles padded as the store pads them), and scratch buffers plus the
 * token history. available is mem_limit, or MemAvailable (the cgroups'
 * room where less), or 0 if unknown. */
typedef struct kvq_mem_estimate {
    int n_ctx;              /* the context length estimated (0 resolved) */
    size_t weight_bytes, kv_bytes, scratch_bytes;
    size_t total_bytes;     /* the sum of the three */
    size_t available_bytes;
} kvq_mem_estimate;

/* KVQ_ERR_INVALID_ARG for parameters kvq_ctx_create would refuse. */
kvq_status kvq_ctx_estimate(const kvq_model *m, const kvq_ctx_params *p, kvq_mem_estimate *out);

/* Checks the parameters (n_ctx in [1, 2^24], n_threads in [1, 256],
 * n_batch in [1, 4096], codec names) and, before allocating anything, that
 * kvq_ctx_estimate's total fits in the available memory: if not,
 * KVQ_ERR_NOMEM with a message saying what is needed, what is available
 * and which smaller KV codec (or shorter context) would fit. */
kvq_status kvq_ctx_create(const kvq_model *m, const kvq_ctx_params *p, kvq_ctx **out);
void kvq_ctx_free(kvq_ctx *ctx);

/* Runs the model over n tokens at positions n_past .. n_past + n - 1 and
 * appends them to the cache. logits: NULL, or (n_vocab) floats for the last
 * token, or with all_logits (n, n_vocab) for every token. KVQ_ERR_RANGE when
 * the tokens would not fit in n_ctx (nothing is appended then). On any other
 * error the context is truncated back to where it was. */
kvq_status kvq_ctx_eval(kvq_ctx *ctx, const int32_t *tokens, int n, float *logits, int all_logits);

/* Tokens held, and the context's capacity. */
int kvq_ctx_n_past(const kvq_ctx *ctx);
int kvq_ctx_n_ctx(const kvq_ctx *ctx);
/* The ids the cache holds, in order (*n gets kvq_ctx_n_past); valid until
 * the next eval, truncate, session load or free. */
const int32_t *kvq_ctx_tokens(const kvq_ctx *ctx, int *n);

/* Sessions: the context's tokens and its compressed KV cache (tiles,
 * staging and sink rows, centering means, rotation seed, codec names per
 * layer) in one file with a model fingerprint (architecture, dimensions,
 * vocabulary size, hash of the GGUF metadata and tokenizer), a format
 * version and an FNV-1a 64 checksum; docs/RELIABILITY.md has the layout.
 *
 * save writes PATH.tmp-PID beside PATH, fsyncs it, renames it over PATH and
 * fsyncs the directory: PATH is the old file or the new one, never half of
 * one. load reads and checks the whole file into new memory first (size,
 * version, checksum, fingerprint, cache parameters against this context,
 * every count and value) and replaces the context's cache and tokens only
 * when all of it holds; otherwise the context is unchanged and the message
 * names what did not match (KVQ_ERR_FORMAT for a damaged file,
 * KVQ_ERR_UNSUPPORTED for another version, model or cache configuration,
 * KVQ_ERR_RANGE for more tokens than n_ctx, KVQ_ERR_IO when unreadable).
 * On success *tokens / *n_tokens (either may be NULL) give the tokens now
 * held, as kvq_ctx_tokens does: evaluation continues after them. */
kvq_status kvq_ctx_session_save(const kvq_ctx *ctx, const char *path);
kvq_status kvq_ctx_session_load(kvq_ctx *ctx, const char *path, const int32_t **tokens, int *n_tokens);
/* Keeps the first n tokens (regeneration, benchmark reuse). */
kvq_status kvq_ctx_truncate(kvq_ctx *ctx, int n);
/* Extends dst from its n_past to n tokens with src's KV rows at those
 * positions, re-encoded in dst's codecs, instead of evaluating them: a
 * benchmark's shortcut to a deep cache (one prefill serves every KV config;
 * the rows are the ones src's own cache produced). Same model; src must hold
 * at least n tokens. */
kvq_status kvq_ctx_copy_kv(kvq_ctx *dst, const kvq_ctx *src, int n);
/* Bytes the KV cache holds now, and what an f16 cache would hold. */
size_t kvq_ctx_kv_bytes(const kvq_ctx *ctx);
size_t kvq_ctx_kv_bytes_f16(const kvq_ctx *ctx);
/* kvq_kv_n_f16_tokens of the context's cache. */
int kvq_ctx_kv_n_f16_tokens(const kvq_ctx *ctx);
/* The ISA path the context's kernels use. */
kvq_isa kvq_ctx_isa(const kvq_ctx *ctx);
/* Wall seconds spent in fused attention (reading the compressed cache) since
 * the context was created; benchmarks diff it around a run to get the share
 * of time attention takes. */
double kvq_ctx_attn_seconds(const kvq_ctx *ctx);
#ifdef __cplusplus
}
#endif
#endif /* KVQ_H */
