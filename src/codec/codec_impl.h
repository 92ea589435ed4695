/* codec_impl.h — what a codec family implements, and the codec object. */
#ifndef KVQ_CODEC_IMPL_H
#define KVQ_CODEC_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "common/common.h"

typedef struct kvq_codec_desc kvq_codec_desc;

/* Encodes one finite row x (head_dim) into dst (base row bytes, without the
 * QJL part). Returns KVQ_OK, or KVQ_ERR_RANGE when a scale overflows fp16
 * (the caller then stores the all-zero encoding). Records no message. */
typedef kvq_status (*kvq_encode_fn)(const kvq_codec *c, const float *x, void *dst);
/* Decodes any bytes src (base row bytes) into y (head_dim). Never fails. */
typedef void (*kvq_decode_fn)(const kvq_codec *c, const void *src, float *y);
/* Decodes n_rows contiguous rows src (n_rows * row_bytes) into y
 * (n_rows, head_dim). Never fails. */
typedef void (*kvq_decode_tile_fn)(const kvq_codec *c, const void *src, int n_rows, float *y);

typedef struct kvq_family_ops {
    int quantized;
    /* Encoded bytes of one row of head_dim values. */
    size_t (*row_bytes)(const kvq_codec_desc *desc, int head_dim);
    /* Optional: builds c->state (rotation tables, codebooks). */
    kvq_status (*init)(kvq_codec *c);
    /* Optional: frees c->state. */
    void (*fini)(kvq_codec *c);
    /* Sets c->encode and c->decode for c->isa; a slot without a kernel for
     * that path takes the next lower one, down to the reference. */
    void (*select)(kvq_codec *c);
    /* Optional, rotated families: y = R x and y = R^T x (x, y may alias). */
    void (*to_domain)(const kvq_codec *c, const float *x, float *y);
    void (*from_domain)(const kvq_codec *c, const float *x, float *y);
} kvq_family_ops;

struct kvq_codec_desc {
    int id;
    const char *name;
    const kvq_family_ops *family;
    int param;
    int rotation;
};

struct kvq_codec {
    const kvq_codec_desc *desc;
    char name[32];          /* as created, with "+qjl" if set */
    int head_dim;
    uint64_t seed;
    int qjl;
    kvq_isa isa;
    size_t base_bytes;      /* family row bytes */
    size_t row_bytes;       /* base_bytes + QJL part */
    float *mean;            /* (head_dim) centering mean, or NULL */
    float *qjl_sketch;      /* (head_dim, head_dim) Gaussian QJL matrix S, or NULL */
    float *qjl_sketch_t;    /* S transposed: SIMD sign sketches run over 16 rows of S at once */
    /* bits = sign(S r) (bit i set when (S r)_i >= 0), and y += k S^T (2 bits - 1).
     * Every path sums in the reference's order (SIMD lanes are rows of S, or
     * elements of y), so the bytes and floats match the reference exactly. */
    void (*qjl_signs)(const kvq_codec *c, const float *r, uint8_t *bits);
    void (*qjl_add)(const kvq_codec *c, const uint8_t *bits, float k, float *y);
    void *state;            /* family-owned */
    kvq_encode_fn encode;
    kvq_decode_fn decode;
    /* Decodes a row into the attention domain: the rotated space R x for
     * rotated codecs (no inverse rotation, no mean), x itself otherwise.
     * Attention rotates the query instead (q.k = Rq.Rk) and inverse-rotates
     * the output once. Set by select(); equals decode for unrotated codecs. */
    kvq_decode_fn decode_domain;
    /* decode_domain over a tile of contiguous base rows (codecs with +qjl:
     * base part only; attention decodes those with kvq_codec_decode_row).
     * Attention calls this once per tile so its inner loop makes no per-row
     * calls. select() may set a fast one; codec.c installs a loop over
     * decode_domain when it leaves the slot NULL. */
    kvq_decode_tile_fn decode_tile_domain;
};

/* y = R x (to the attention domain) and y = R^T x (back). The identity for
 * unrotated codecs; x and y may alias. */
void kvq_codec_to_domain(const kvq_codec *c, const float *x, float *y);
void kvq_codec_from_domain(const kvq_codec *c, const float *x, float *y);

/* Plain kinds (param of the plain family). */
enum { KVQ_PLAIN_F32, KVQ_PLAIN_F16, KVQ_PLAIN_BF16 };

/* ggml block kinds (param of the ggml family). */
enum { KVQ_GGML_Q8_0, KVQ_GGML_Q4_0, KVQ_GGML_Q4_1, KVQ_GGML_Q5_0, KVQ_GGML_Q5_1, KVQ_GGML_IQ4_NL };

/* Rotation kinds (rotation column of rotated codecs). */
enum { KVQ_ROT_NONE, KVQ_ROT_WHT, KVQ_ROT_QUAT4, KVQ_ROT_GIVENS, KVQ_ROT_ROTOR3 };

#define KVQ_FAMILY(f) extern const kvq_family_ops kvq_family_##f;
KVQ_FAMILY(plain)
KVQ_FAMILY(ggml)
KVQ_FAMILY(rot)
#undef KVQ_FAMILY

/* The table, in codecs.def order. */
const kvq_codec_desc *kvq_codec_desc_at(int index);
const kvq_codec_desc *kvq_codec_desc_find(const char *base_name);

#endif
