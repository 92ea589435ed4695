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

#ifdef __cplusplus
}
#endif
#endif /* KVQ_H */
