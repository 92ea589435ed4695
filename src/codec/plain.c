/* plain.c — f32, f16 and bf16 rows: the uncompressed baselines. */
#include <string.h>

#include "codec/codec_impl.h"
#include "common/fp16.h"

static size_t plain_row_bytes(const kvq_codec_desc *desc, int head_dim) {
    return (size_t)head_dim * (desc->param == KVQ_PLAIN_F32 ? 4 : 2);
}

static kvq_status encode_f32(const kvq_codec *c, const float *x, void *dst) {
    memcpy(dst, x, sizeof(float) * (size_t)c->head_dim);
    return KVQ_OK;
}

static void decode_f32(const kvq_codec *c, const void *src, float *y) {
    memcpy(y, src, sizeof(float) * (size_t)c->head_dim);
}

static kvq_status encode_f16_ref(const kvq_codec *c, const float *x, void *dst) {
    uint8_t *out = dst;
    for (int i = 0; i < c->head_dim; i++) kvq_store_u16(out + 2 * i, kvq_f32_to_f16(x[i]));
    return KVQ_OK;
}

static void decode_f16_ref(const kvq_codec *c, const void *src, float *y) {
    const uint8_t *in = src;
    for (int i = 0; i < c->head_dim; i++) y[i] = kvq_f16_to_f32(kvq_load_u16(in + 2 * i));
}

static kvq_status encode_bf16_ref(const kvq_codec *c, const float *x, void *dst) {
    uint8_t *out = dst;
    for (int i = 0; i < c->head_dim; i++) kvq_store_u16(out + 2 * i, kvq_f32_to_bf16(x[i]));
    return KVQ_OK;
}

static void decode_bf16_ref(const kvq_codec *c, const void *src, float *y) {
    const uint8_t *in = src;
    for (int i = 0; i < c->head_dim; i++) y[i] = kvq_bf16_to_f32(kvq_load_u16(in + 2 * i));
}

/* Rows of a plain tile are contiguous values: a tile is one long row. */
static void decode_tile_f32(const kvq_codec *c, const void *src, int n_rows, float *y) {
    memcpy(y, src, sizeof(float) * (size_t)n_rows * (size_t)c->head_dim);
}

static void decode_tile_f16_ref(const kvq_codec *c, const void *src, int n_rows, float *y) {
    const uint8_t *in = src;
    const size_t n = (size_t)n_rows * (size_t)c->head_dim;
    for (size_t i = 0; i < n; i++) y[i] = kvq_f16_to_f32(kvq_load_u16(in + 2 * i));
}

static void decode_tile_bf16_ref(const kvq_codec *c, const void *src, int n_rows, float *y) {
    const uint8_t *in = src;
    const size_t n = (size_t)n_rows * (size_t)c->head_dim;
    for (size_t i = 0; i < n; i++) y[i] = kvq_bf16_to_f32(kvq_load_u16(in + 2 * i));
}

static void plain_pick(kvq_codec *c);

/* Per-ISA kernels (plain_avx2.c, plain_avx512.c). */
kvq_status kvq_encode_f16_avx2(const kvq_codec *c, const float *x, void *dst);
void kvq_decode_f16_avx2(const kvq_codec *c, const void *src, float *y);
kvq_status kvq_encode_bf16_avx2(const kvq_codec *c, const float *x, void *dst);
kvq_status kvq_encode_f16_avx512(const kvq_codec *c, const float *x, void *dst);
void kvq_decode_f16_avx512(const kvq_codec *c, const void *src, float *y);
kvq_status kvq_encode_bf16_avx512(const kvq_codec *c, const float *x, void *dst);
void kvq_decode_tile_f16_avx2(const kvq_codec *c, const void *src, int n_rows, float *y);
void kvq_decode_tile_bf16_avx2(const kvq_codec *c, const void *src, int n_rows, float *y);
void kvq_decode_tile_f16_avx512(const kvq_codec *c, const void *src, int n_rows, float *y);
void kvq_decode_tile_bf16_avx512(const kvq_codec *c, const void *src, int n_rows, float *y);

#if KVQ_HAVE_X86
/* One row is a tile of one: -O2 does not vectorize the reference's shift loop. */
static void decode_bf16_avx2(const kvq_codec *c, const void *src, float *y) { kvq_decode_tile_bf16_avx2(c, src, 1, y); }
static void decode_bf16_avx512(const kvq_codec *c, const void *src, float *y) {
    kvq_decode_tile_bf16_avx512(c, src, 1, y);
}
#endif

static void plain_select(kvq_codec *c) {
    plain_pick(c);
    c->decode_domain = c->decode;
}

static void plain_pick(kvq_codec *c) {
    switch (c->desc->param) {
    case KVQ_PLAIN_F32:
        c->encode = encode_f32;
        c->decode = decode_f32;
        c->decode_tile_domain = decode_tile_f32;
        return;
    case KVQ_PLAIN_F16:
        c->encode = encode_f16_ref;
        c->decode = decode_f16_ref;
        c->decode_tile_domain = decode_tile_f16_ref;
#if KVQ_HAVE_X86
        if (c->isa >= KVQ_ISA_AVX2) {
            c->encode = kvq_encode_f16_avx2;
            c->decode = kvq_decode_f16_avx2;
            c->decode_tile_domain = kvq_decode_tile_f16_avx2;
        }
        if (c->isa >= KVQ_ISA_AVX512) {
            c->encode = kvq_encode_f16_avx512;
            c->decode = kvq_decode_f16_avx512;
            c->decode_tile_domain = kvq_decode_tile_f16_avx512;
        }
#endif
        return;
    default: /* KVQ_PLAIN_BF16 */
        c->encode = encode_bf16_ref;
        c->decode = decode_bf16_ref;
        c->decode_tile_domain = decode_tile_bf16_ref;
#if KVQ_HAVE_X86
        if (c->isa >= KVQ_ISA_AVX2) {
            c->encode = kvq_encode_bf16_avx2;
            c->decode = decode_bf16_avx2;
            c->decode_tile_domain = kvq_decode_tile_bf16_avx2;
        }
        if (c->isa >= KVQ_ISA_AVX512) {
            c->encode = kvq_encode_bf16_avx512;
            c->decode = decode_bf16_avx512;
            c->decode_tile_domain = kvq_decode_tile_bf16_avx512;
        }
#endif
        return;
    }
}

const kvq_family_ops kvq_family_plain = {
    .quantized = 0,
    .row_bytes = plain_row_bytes,
    .select = plain_select,
};
