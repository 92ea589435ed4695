/* codec.c — the codec table, codec objects, and what every codec shares:
 * argument checks, the non-finite rule, centering and the QJL residual. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/codec_impl.h"
#include "common/fp16.h"
#include "common/rng.h"

static const kvq_codec_desc codec_table[] = {
#define KVQ_CODEC(id, name, family, param, rotation) {id, name, &kvq_family_##family, param, rotation},
#include "codec/codecs.def"
#undef KVQ_CODEC
};

#define QJL_SUFFIX "+qjl"

int kvq_codec_count(void) { return (int)KVQ_ARRAY_LEN(codec_table); }

const kvq_codec_desc *kvq_codec_desc_at(int index) {
    return index >= 0 && index < kvq_codec_count() ? &codec_table[index] : NULL;
}

const char *kvq_codec_name_at(int index) {
    const kvq_codec_desc *d = kvq_codec_desc_at(index);
    return d ? d->name : NULL;
}

const kvq_codec_desc *kvq_codec_desc_find(const char *base_name) {
    for (int i = 0; i < kvq_codec_count(); i++)
        if (strcmp(codec_table[i].name, base_name) == 0) return &codec_table[i];
    return NULL;
}

/* The QJL sketch: S (head_dim, head_dim), i.i.d. N(0,1), from the seed. The
 * stream is offset from the rotation's so the two never share draws. */
static kvq_status qjl_init(kvq_codec *c) {
    const size_t d = (size_t)c->head_dim;
    c->qjl_sketch = kvq_alloc_aligned(sizeof(float) * d * d);
    c->qjl_sketch_t = kvq_alloc_aligned(sizeof(float) * d * d);
    KVQ_RETURN_IF(!c->qjl_sketch || !c->qjl_sketch_t, KVQ_ERR_NOMEM, "codec %s: out of memory for the QJL sketch",
                  c->name);
    uint64_t state = c->seed ^ 0x514A4C736B657463ull; /* "QJLsketc" */
    for (size_t i = 0; i < d; i++)
        for (size_t j = 0; j < d; j++) {
            const float s = (float)kvq_rng_normal(&state);
            c->qjl_sketch[i * d + j] = s;
            c->qjl_sketch_t[j * d + i] = s;
        }
    return KVQ_OK;
}

static void qjl_signs_ref(const kvq_codec *c, const float *r, uint8_t *bits) {
    const int d = c->head_dim;
    memset(bits, 0, (size_t)d / 8);
    for (int i = 0; i < d; i++) {
        const float *s = c->qjl_sketch + (size_t)i * d;
        float dot = 0;
        for (int j = 0; j < d; j++) dot += s[j] * r[j];
        if (dot >= 0) bits[i / 8] |= (uint8_t)(1u << (i % 8));
    }
}

static void qjl_add_ref(const kvq_codec *c, const uint8_t *bits, float k, float *y) {
    const int d = c->head_dim;
    for (int i = 0; i < d; i++) {
        const float sign = (bits[i / 8] >> (i % 8)) & 1 ? k : -k;
        const float *s = c->qjl_sketch + (size_t)i * d;
        for (int j = 0; j < d; j++) y[j] += sign * s[j];
    }
}

/* Per-ISA QJL kernels (qjl_avx2.c, qjl_avx512.c). */
void kvq_qjl_signs_avx2(const kvq_codec *c, const float *r, uint8_t *bits);
void kvq_qjl_add_avx2(const kvq_codec *c, const uint8_t *bits, float k, float *y);
void kvq_qjl_signs_avx512(const kvq_codec *c, const float *r, uint8_t *bits);
void kvq_qjl_add_avx512(const kvq_codec *c, const uint8_t *bits, float k, float *y);

static void decode_tile_generic(const kvq_codec *c, const void *src, int n_rows, float *y) {
    const uint8_t *in = src;
    for (int r = 0; r < n_rows; r++) c->decode_domain(c, in + (size_t)r * c->row_bytes, y + (size_t)r * c->head_dim);
}

/* Every kernel slot is filled after select(): families set only what they
 * have a fast kernel for. */
static void codec_select(kvq_codec *c) {
    c->decode_tile_domain = NULL;
    c->desc->family->select(c);
    if (!c->decode_tile_domain) c->decode_tile_domain = decode_tile_generic;
    c->qjl_signs = qjl_signs_ref;
    c->qjl_add = qjl_add_ref;
#if KVQ_HAVE_X86
    if (c->isa >= KVQ_ISA_AVX2) {
        c->qjl_signs = kvq_qjl_signs_avx2;
        c->qjl_add = kvq_qjl_add_avx2;
    }
    if (c->isa >= KVQ_ISA_AVX512) {
        c->qjl_signs = kvq_qjl_signs_avx512;
        c->qjl_add = kvq_qjl_add_avx512;
    }
#endif
}

kvq_status kvq_codec_create(const char *name, int head_dim, uint64_t seed, kvq_codec **out) {
    KVQ_RETURN_IF(!out, KVQ_ERR_INVALID_ARG, "kvq_codec_create: out is NULL");
    *out = NULL;
    KVQ_RETURN_IF(!name, KVQ_ERR_INVALID_ARG, "kvq_codec_create: name is NULL");
    KVQ_RETURN_IF(head_dim < 32 || head_dim > KVQ_MAX_HEAD_DIM || head_dim % 32 != 0, KVQ_ERR_INVALID_ARG,
                  "codec %s: head_dim %d is not a multiple of 32 in [32, %d]", name, head_dim,
                  KVQ_MAX_HEAD_DIM);

    char base[32];
    const size_t len = strlen(name);
    KVQ_RETURN_IF(len == 0 || len >= sizeof base, KVQ_ERR_INVALID_ARG, "unknown KV codec '%s'", name);
    memcpy(base, name, len + 1);
    int qjl = 0;
    const size_t slen = strlen(QJL_SUFFIX);
    if (len > slen && strcmp(base + len - slen, QJL_SUFFIX) == 0) {
        base[len - slen] = '\0';
        qjl = 1;
    }
    const kvq_codec_desc *desc = kvq_codec_desc_find(base);
    KVQ_RETURN_IF(!desc, KVQ_ERR_INVALID_ARG, "unknown KV codec '%s' (see `kvq codecs`)", name);
    KVQ_RETURN_IF(qjl && !desc->family->quantized, KVQ_ERR_INVALID_ARG,
                  "codec %s: +qjl applies to quantized codecs only", name);

    kvq_codec *c = calloc(1, sizeof *c);
    KVQ_RETURN_IF(!c, KVQ_ERR_NOMEM, "codec %s: out of memory", name);
    c->desc = desc;
    memcpy(c->name, name, len + 1);
    c->head_dim = head_dim;
    c->seed = seed;
    c->qjl = qjl;
    c->isa = kvq_isa_default();
    c->base_bytes = desc->family->row_bytes(desc, head_dim);
    c->row_bytes = c->base_bytes + (qjl ? (size_t)head_dim / 8 + 2 : 0);

    kvq_status s = KVQ_OK;
    if (desc->family->init) s = desc->family->init(c);
    if (s == KVQ_OK && qjl) s = qjl_init(c);
    if (s != KVQ_OK) {
        kvq_codec_free(c);
        return s;
    }
    codec_select(c);
    *out = c;
    return KVQ_OK;
}

void kvq_codec_free(kvq_codec *c) {
    if (!c) return;
    if (c->desc->family->fini) c->desc->family->fini(c);
    kvq_free_aligned(c->mean);
    kvq_free_aligned(c->qjl_sketch);
    kvq_free_aligned(c->qjl_sketch_t);
    free(c);
}

const char *kvq_codec_name(const kvq_codec *c) { return c ? c->name : NULL; }
int kvq_codec_head_dim(const kvq_codec *c) { return c ? c->head_dim : 0; }
size_t kvq_codec_row_bytes(const kvq_codec *c) { return c ? c->row_bytes : 0; }
int kvq_codec_is_quantized(const kvq_codec *c) { return c ? c->desc->family->quantized : 0; }
kvq_isa kvq_codec_isa(const kvq_codec *c) { return c ? c->isa : KVQ_ISA_REF; }

double kvq_codec_bits_per_value(const kvq_codec *c) {
    return c ? (double)c->row_bytes * 8.0 / c->head_dim : 0.0;
}

kvq_status kvq_codec_set_isa(kvq_codec *c, kvq_isa isa) {
    KVQ_RETURN_IF(!c, KVQ_ERR_INVALID_ARG, "kvq_codec_set_isa: codec is NULL");
    KVQ_RETURN_IF(!kvq_isa_name(isa), KVQ_ERR_INVALID_ARG, "kvq_codec_set_isa: bad ISA %d", (int)isa);
    KVQ_RETURN_IF(!kvq_isa_supported(isa), KVQ_ERR_UNSUPPORTED, "ISA %s is not supported by this CPU",
                  kvq_isa_name(isa));
    c->isa = isa;
    codec_select(c);
    return KVQ_OK;
}

/* n is a multiple of 16 (head_dim is one of 32): the fixed inner count is
 * what gcc -O2 vectorizes; a plain loop over n stayed scalar, ~10% of an
 * iq4_nl encode. */
static int all_finite(const float *x, int n) {
    uint32_t bad = 0;
    for (int i = 0; i < n; i += 16) {
        for (int j = 0; j < 16; j++) {
            uint32_t u;
            memcpy(&u, &x[i + j], sizeof u);
            bad |= (uint32_t)((u & 0x7F800000u) == 0x7F800000u);
        }
    }
    return !bad;
}

kvq_status kvq_codec_set_mean(kvq_codec *c, const float *mean) {
    KVQ_RETURN_IF(!c, KVQ_ERR_INVALID_ARG, "kvq_codec_set_mean: codec is NULL");
    if (!mean) {
        kvq_free_aligned(c->mean);
        c->mean = NULL;
        return KVQ_OK;
    }
    KVQ_RETURN_IF(!all_finite(mean, c->head_dim), KVQ_ERR_NONFINITE, "codec %s: centering mean is not finite",
                  c->name);
    if (!c->mean) {
        c->mean = kvq_alloc_aligned(sizeof(float) * (size_t)c->head_dim);
        KVQ_RETURN_IF(!c->mean, KVQ_ERR_NOMEM, "codec %s: out of memory", c->name);
    }
    memcpy(c->mean, mean, sizeof(float) * (size_t)c->head_dim);
    return KVQ_OK;
}

/* QJL residual part: sign bits of S r (bit set = non-negative) then ||r|| as
 * fp16, where r is the centered row minus its base decoding. */
static kvq_status qjl_encode(const kvq_codec *c, const float *xc, const void *base_row, uint8_t *dst) {
    const int d = c->head_dim;
    float r[KVQ_MAX_HEAD_DIM];
    c->decode(c, base_row, r);
    double norm2 = 0;
    for (int i = 0; i < d; i++) {
        r[i] = xc[i] - r[i];
        norm2 += (double)r[i] * r[i];
    }
    c->qjl_signs(c, r, dst);
    /* A row the base codec accepts can still leave a residual whose norm
     * overflows fp16 (values near the base scale's limit): an Inf norm
     * would decode to Inf, so such a row is refused like a base overflow. */
    const uint16_t norm = kvq_f32_to_f16((float)sqrt(norm2));
    if ((norm & 0x7FFFu) >= 0x7C00u) return KVQ_ERR_RANGE;
    kvq_store_u16(dst + d / 8, norm);
    return KVQ_OK;
}

/* Adds the unbiased residual estimate sqrt(pi/2)/d * ||r|| * S^T sign(S r). */
static void qjl_decode_add(const kvq_codec *c, const uint8_t *src, float *y) {
    const int d = c->head_dim;
    const float norm = kvq_f16_to_f32(kvq_load_u16(src + d / 8));
    const float k = 1.2533141373155003f * norm / (float)d; /* sqrt(pi/2) */
    c->qjl_add(c, src, k, y);
}

kvq_status kvq_codec_encode_row(const kvq_codec *c, const float *x, void *dst) {
    KVQ_RETURN_IF(!c || !x || !dst, KVQ_ERR_INVALID_ARG, "kvq_codec_encode_row: NULL argument");
    const int d = c->head_dim;
    float centered[KVQ_MAX_HEAD_DIM];
    const float *xc = x;
    if (c->desc->family->quantized) {
        kvq_status s = KVQ_OK;
        if (!all_finite(x, d)) s = KVQ_ERR_NONFINITE;
        if (s == KVQ_OK && c->mean) {
            for (int i = 0; i < d; i++) centered[i] = x[i] - c->mean[i];
            xc = centered;
            if (!all_finite(xc, d)) s = KVQ_ERR_RANGE;
        }
        if (s == KVQ_OK) s = c->encode(c, xc, dst);
        if (s == KVQ_OK && c->qjl) s = qjl_encode(c, xc, dst, (uint8_t *)dst + c->base_bytes);
        if (s != KVQ_OK) {
            memset(centered, 0, sizeof(float) * (size_t)d);
            c->encode(c, centered, dst);
            if (c->qjl) memset((uint8_t *)dst + c->base_bytes, 0, c->row_bytes - c->base_bytes);
            return s == KVQ_ERR_NONFINITE
                       ? kvq_fail(s, "codec %s: row holds NaN or Inf; stored as zeros", c->name)
                       : kvq_fail(s, "codec %s: row values too large for the fp16 scale; stored as zeros",
                                  c->name);
        }
        return KVQ_OK;
    }
    if (c->mean) {
        for (int i = 0; i < d; i++) centered[i] = x[i] - c->mean[i];
        xc = centered;
    }
    return c->encode(c, xc, dst);
}

kvq_status kvq_codec_decode_row(const kvq_codec *c, const void *src, float *y) {
    KVQ_RETURN_IF(!c || !src || !y, KVQ_ERR_INVALID_ARG, "kvq_codec_decode_row: NULL argument");
    c->decode(c, src, y);
    if (c->qjl) qjl_decode_add(c, (const uint8_t *)src + c->base_bytes, y);
    if (c->mean)
        for (int i = 0; i < c->head_dim; i++) y[i] += c->mean[i];
    return KVQ_OK;
}

void kvq_codec_to_domain(const kvq_codec *c, const float *x, float *y) {
    if (c->desc->family->to_domain) c->desc->family->to_domain(c, x, y);
    else if (x != y) memmove(y, x, sizeof(float) * (size_t)c->head_dim);
}

void kvq_codec_from_domain(const kvq_codec *c, const float *x, float *y) {
    if (c->desc->family->from_domain) c->desc->family->from_domain(c, x, y);
    else if (x != y) memmove(y, x, sizeof(float) * (size_t)c->head_dim);
}
