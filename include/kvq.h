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

#ifdef __cplusplus
}
#endif
#endif /* KVQ_H */
