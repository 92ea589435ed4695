/* wtype.c — the weight type table, reference dequantization and the
 * reference matvec / matmul. */
#include "model/wtype.h"

#include <math.h>

#include "model/wtype_blocks.h"

#define KVQ_WTYPE(ID, ggml_id, name, bs, bytes)                                        \
    void kvq_wdequant_##ID##_ref(const void *src, float *dst, int64_t n_blocks) {     \
        const uint8_t *b = src;                                                       \
        for (int64_t i = 0; i < n_blocks; i++) kvq_wblock_##ID(b + i * (bytes), dst + i * (bs)); \
    }
#include "model/wtypes.def"
#undef KVQ_WTYPE

#if KVQ_HAVE_X86
#define KVQ_WSLOTS(ID, kind) {kvq_##kind##_##ID##_ref, kvq_##kind##_##ID##_avx2, kvq_##kind##_##ID##_avx512}
#define KVQ_WKERNELS(kind) {kvq_##kind##_ref, kvq_##kind##_avx2, kvq_##kind##_avx512}
#define KVQ_WQKERNELS(kind) {kvq_##kind##_q_ref, kvq_##kind##_q_avx2, kvq_##kind##_q_avx512}
#else
#define KVQ_WSLOTS(ID, kind) {kvq_##kind##_##ID##_ref, kvq_##kind##_##ID##_ref, kvq_##kind##_##ID##_ref}
#define KVQ_WKERNELS(kind) {kvq_##kind##_ref, kvq_##kind##_ref, kvq_##kind##_ref}
#define KVQ_WQKERNELS(kind) {kvq_##kind##_q_ref, kvq_##kind##_q_ref, kvq_##kind##_q_ref}
#endif
/* The integer route serves the 32-value block types. */
#define KVQ_WQ_SLOTS(bs, kind) .kind##_q = KVQ_WQKERNELS_IF_##bs(kind)
#define KVQ_WQKERNELS_IF_1(kind) {NULL}
#define KVQ_WQKERNELS_IF_32(kind) KVQ_WQKERNELS(w##kind)
#define KVQ_WQKERNELS_IF_256(kind) {NULL}
#if KVQ_HAVE_X86
#define KVQ_WX16_SLOTS_IF_32 {kvq_wmatvec_x16_ref, kvq_wmatvec_x16_avx2, kvq_wmatvec_x16_avx512}
#else
#define KVQ_WX16_SLOTS_IF_32 {kvq_wmatvec_x16_ref, kvq_wmatvec_x16_ref, kvq_wmatvec_x16_ref}
#endif
#define KVQ_WX16_SLOTS_IF_1 {NULL}
#define KVQ_WX16_SLOTS_IF_256 {NULL}
#define KVQ_WX16_SLOTS(bs) .matvec_x16 = KVQ_WX16_SLOTS_IF_##bs

static const kvq_wtype_traits table[] = {
#define KVQ_WTYPE(ID, ggml_id, nm, bs, bytes)                                          \
    {.type = ggml_id,                                                                  \
     .name = nm,                                                                       \
     .block_size = bs,                                                                 \
     .block_bytes = bytes,                                                             \
     .dequant = kvq_wdequant_##ID##_ref,                                               \
     .dequant_isa = KVQ_WSLOTS(ID, wdequant),                                          \
     .matvec = KVQ_WKERNELS(wmatvec),                                                  \
     .matmul = KVQ_WKERNELS(wmatmul),                                                  \
     KVQ_WQ_SLOTS(bs, matvec),                                                         \
     KVQ_WQ_SLOTS(bs, matmul),                                                         \
     KVQ_WX16_SLOTS(bs)},
#include "model/wtypes.def"
#undef KVQ_WTYPE
};

const kvq_wtype_traits *kvq_wtype_find(int type) {
    for (size_t i = 0; i < KVQ_ARRAY_LEN(table); i++)
        if (table[i].type == type) return &table[i];
    return NULL;
}

int kvq_wtype_count(void) { return (int)KVQ_ARRAY_LEN(table); }

const kvq_wtype_traits *kvq_wtype_at(int index) {
    return index >= 0 && index < kvq_wtype_count() ? &table[index] : NULL;
}

kvq_status kvq_wtype_check_n(const kvq_wtype_traits *t, int64_t n) {
    KVQ_RETURN_IF(!t, KVQ_ERR_INVALID_ARG, "weight type: NULL traits");
    KVQ_RETURN_IF(n <= 0 || n % t->block_size != 0 || n % 32 != 0, KVQ_ERR_UNSUPPORTED,
                  "weight type %s: row length %lld is not a positive multiple of %d and 32",
                  t->name, (long long)n, t->block_size);
    return KVQ_OK;
}

kvq_status kvq_wtype_dequantize_row(int type, const void *src, float *dst, int64_t n) {
    const kvq_wtype_traits *t = kvq_wtype_find(type);
    KVQ_RETURN_IF(!t, KVQ_ERR_INVALID_ARG, "unknown or unsupported weight type %d", type);
    KVQ_RETURN_IF(!src || !dst, KVQ_ERR_INVALID_ARG, "kvq_wtype_dequantize_row: NULL argument");
    KVQ_RETURN_IF(n <= 0 || n % t->block_size != 0, KVQ_ERR_INVALID_ARG,
                  "weight type %s: row length %lld is not a positive multiple of %d", t->name,
                  (long long)n, t->block_size);
    t->dequant(src, dst, n / t->block_size);
    return KVQ_OK;
}

/* Values dequantized per step: a multiple of every block size. */
#define KVQ_WREF_CHUNK 256

void kvq_wmatvec_ref(const kvq_wtype_traits *t, const void *w, size_t row_bytes, const float *x,
                     int64_t n, int64_t r0, int64_t r1, float *y) {
    float buf[KVQ_WREF_CHUNK]; // (chunk) one row's dequantized values
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *row = (const uint8_t *)w + (size_t)r * row_bytes;
        double acc = 0;
        for (int64_t k0 = 0; k0 < n; k0 += KVQ_WREF_CHUNK) {
            const int64_t len = n - k0 < KVQ_WREF_CHUNK ? n - k0 : KVQ_WREF_CHUNK;
            t->dequant(row + (size_t)(k0 / t->block_size) * t->block_bytes, buf, len / t->block_size);
            for (int64_t k = 0; k < len; k++) acc += (double)buf[k] * x[k0 + k];
        }
        y[r - r0] = (float)acc;
    }
}

void kvq_wmatmul_ref(const kvq_wtype_traits *t, const void *w, size_t row_bytes, const float *x,
                     int64_t n_tok, int64_t n, int64_t r0, int64_t r1, float *y, int64_t ldy) {
    for (int64_t i = 0; i < n_tok; i++)
        kvq_wmatvec_ref(t, w, row_bytes, x + i * n, n, r0, r1, y + i * ldy + r0);
}

void kvq_wquantize_x_ref(const float *x, int64_t n, int8_t *q, float *d, float *s) {
    for (int64_t b = 0; b < n / 32; b++) {
        const float *xb = x + 32 * b;
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(xb[j]));
        /* ggml's q8_0 scale; nearbyintf rounds half to even like the SIMD
         * paths, so every ISA produces these bits. */
        const float db = amax / 127.0f, id = db != 0.0f ? 1.0f / db : 0.0f;
        int sum = 0;
        for (int j = 0; j < 32; j++) {
            const int v = (int)nearbyintf(xb[j] * id);
            q[32 * b + j] = (int8_t)v;
            sum += v;
        }
        d[b] = db;
        s[b] = db * (float)sum;
    }
}

kvq_wxq kvq_wtype_prep_x(kvq_isa isa, const float *x, int64_t n_tok, int64_t n, void *scratch) {
    return kvq_wtype_prep_x_range(isa, x, n_tok, n, 0, n_tok, scratch);
}

kvq_wxq kvq_wtype_prep_x_range(kvq_isa isa, const float *x, int64_t n_tok, int64_t n, int64_t t0,
                               int64_t t1, void *scratch) {
    int8_t *q = scratch;                          // (n_tok, n)
    float *d = (float *)(q + n_tok * n);          // (n_tok, n / 32)
    float *s = d + n_tok * (n / 32);              // (n_tok, n / 32)
    for (int64_t i = t0; i < t1; i++) {
        int8_t *qi = q + i * n;
        float *di = d + i * (n / 32), *si = s + i * (n / 32);
#if KVQ_HAVE_X86
        if (isa == KVQ_ISA_AVX512) kvq_wquantize_x_avx512(x + i * n, n, qi, di, si);
        else if (isa == KVQ_ISA_AVX2) kvq_wquantize_x_avx2(x + i * n, n, qi, di, si);
        else kvq_wquantize_x_ref(x + i * n, n, qi, di, si);
#else
        kvq_wquantize_x_ref(x + i * n, n, qi, di, si);
#endif
    }
    return (kvq_wxq){q, d, s};
}

/* Reference rows against integer x: per block b, x^ = scale[b] * q
 * (q2 NULL) or scale[b] * (256 q + q2), dot products in double. */
static void ref_rows_int_x(const kvq_wtype_traits *t, const void *w, size_t row_bytes, const int8_t *q,
                           const int8_t *q2, const float *scale, int64_t n, int64_t r0, int64_t r1, float *y) {
    float wb[32]; // (32) one dequantized block
    for (int64_t r = r0; r < r1; r++) {
        const uint8_t *row = (const uint8_t *)w + (size_t)r * row_bytes;
        double acc = 0;
        for (int64_t b = 0; b < n / 32; b++) {
            t->dequant(row + (size_t)b * t->block_bytes, wb, 1);
            double ab = 0;
            for (int j = 0; j < 32; j++) {
                const int64_t k = 32 * b + j;
                ab += (double)wb[j] * (q2 ? 256.0 * q[k] + q2[k] : (double)q[k]);
            }
            acc += ab * scale[b];
        }
        y[r - r0] = (float)acc;
    }
}

void kvq_wmatvec_q_ref(const kvq_wtype_traits *t, const void *w, size_t row_bytes, const kvq_wxq *xq,
                       int64_t n, int64_t r0, int64_t r1, float *y) {
    ref_rows_int_x(t, w, row_bytes, xq->q, NULL, xq->d, n, r0, r1, y);
}

/* Token i of prepared activations of row length n. */
static kvq_wxq xq_token(const kvq_wxq *xq, int64_t i, int64_t n) {
    return (kvq_wxq){xq->q + i * n, xq->d + i * (n / 32), xq->s + i * (n / 32)};
}

void kvq_wmatmul_q_ref(const kvq_wtype_traits *t, const void *w, size_t row_bytes, const kvq_wxq *xq,
                       int64_t n_tok, int64_t n, int64_t r0, int64_t r1, float *y, int64_t ldy) {
    for (int64_t i = 0; i < n_tok; i++) {
        const kvq_wxq xi = xq_token(xq, i, n);
        kvq_wmatvec_q_ref(t, w, row_bytes, &xi, n, r0, r1, y + i * ldy + r0);
    }
}

void kvq_wmatmul_q_by_rows(const kvq_wtype_traits *t, kvq_wmatvec_q_fn mv, const void *w,
                           size_t row_bytes, const kvq_wxq *xq, int64_t n_tok, int64_t n,
                           int64_t r0, int64_t r1, float *y, int64_t ldy) {
    /* Row slabs small enough to stay in L1 while every token passes. */
    const int64_t slab = 16;
    for (int64_t rb = r0; rb < r1; rb += slab) {
        const int64_t re = r1 - rb < slab ? r1 : rb + slab;
        for (int64_t i = 0; i < n_tok; i++) {
            const kvq_wxq xi = xq_token(xq, i, n);
            mv(t, w, row_bytes, &xi, n, rb, re, y + i * ldy + rb);
        }
    }
}

/* ------------------------------------------------------- int16 route */

int kvq_wtype_x16_fast(kvq_isa isa) {
    return isa == KVQ_ISA_AVX2 || (isa == KVQ_ISA_AVX512 && kvq_cpu_has_vnni());
}

void kvq_wquantize_x16_ref(const float *x, int64_t n, int8_t *h, int8_t *l, float *e, float *s) {
    for (int64_t b = 0; b < n / 32; b++) {
        const float *xb = x + 32 * b;
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(xb[j]));
        const float db = amax / 127.0f, id = db != 0.0f ? 1.0f / db : 0.0f;
        const float eb = db / 256.0f, ie = id * 256.0f;
        int sum = 0;
        for (int j = 0; j < 32; j++) {
            const float hv = nearbyintf(xb[j] * id);
            float lv = nearbyintf((xb[j] - db * hv) * ie);
            lv = lv > 127.0f ? 127.0f : lv < -127.0f ? -127.0f : lv;
            h[32 * b + j] = (int8_t)hv, l[32 * b + j] = (int8_t)lv;
            sum += 256 * (int)hv + (int)lv;
        }
        e[b] = eb;
        s[b] = eb * (float)sum;
    }
}

/* n copies of v from dst. */
static void fill_f32(uint8_t *dst, float v, int n) {
    for (int i = 0; i < n; i++) memcpy(dst + 4 * i, &v, 4);
}

kvq_wx16 kvq_wtype_prep_x16(kvq_isa isa, const float *x, int64_t n, void *scratch) {
    const int64_t pad = (n + 127) / 128 * 128, nb = n / 32;
    uint8_t *g = scratch, *p = g + 6 * pad;
    int8_t *h = (int8_t *)(p + 4 * pad), *l = h + pad;
    float *e = (float *)(l + pad), *s = e + pad / 32;
#if KVQ_HAVE_X86
    if (isa == KVQ_ISA_AVX512) kvq_wquantize_x16_avx512(x, n, h, l, e, s);
    else if (isa == KVQ_ISA_AVX2) kvq_wquantize_x16_avx2(x, n, h, l, e, s);
    else kvq_wquantize_x16_ref(x, n, h, l, e, s);
#else
    (void)isa;
    kvq_wquantize_x16_ref(x, n, h, l, e, s);
#endif
    memset(h + n, 0, (size_t)(pad - n)), memset(l + n, 0, (size_t)(pad - n));
    for (int64_t b = nb; b < pad / 32; b++) e[b] = s[b] = 0.0f;
    for (int64_t b = 0; b < pad / 32; b++) { /* pairs */
        uint8_t *pp = p + 256 * (b / 2);
        const int k = (int)(b % 2);
        memcpy(pp + 32 * k, h + 32 * b, 32), memcpy(pp + 64 + 32 * k, l + 32 * b, 32);
        fill_f32(pp + 128 + 32 * k, e[b], 8), fill_f32(pp + 192 + 32 * k, s[b] / 8.0f, 8);
    }
    const int twice = nb % 4 == 2;
    for (int64_t q = 0; q < 2 * pad / 32; q++) { /* groups: slot q of x, or of x twice; -1: zeros */
        const int64_t b = twice ? (q < 2 * nb ? q % nb : -1) : (q < nb ? q : -1);
        uint8_t *gg = g + 384 * (q / 4) + 16 * (q % 4);
        for (int part = 0; part < 4; part++) { /* h 0-15, h 16-31, l 0-15, l 16-31 */
            if (b < 0) memset(gg + 64 * part, 0, 16);
            else memcpy(gg + 64 * part, (part < 2 ? h : l) + 32 * b + 16 * (part % 2), 16);
        }
        fill_f32(gg + 256, b < 0 ? 0.0f : e[b], 4);
        fill_f32(gg + 320, b < 0 ? 0.0f : s[b] / 4.0f, 4);
    }
    return (kvq_wx16){g, p, h, l, e, s};
}

void kvq_wmatvec_x16_ref(const kvq_wtype_traits *t, const void *w, size_t row_bytes, const kvq_wx16 *xs,
                         int64_t n, int64_t r0, int64_t r1, float *y) {
    ref_rows_int_x(t, w, row_bytes, xs->h, xs->l, xs->e, n, r0, r1, y);
}

void kvq_wmatmul_dequant_tile(const kvq_wtype_traits *t, kvq_wdequant_fn dq, const void *w, size_t row_bytes,
                              int64_t rb, int nr, int tile_rows, int64_t k0, int64_t len, float *buf,
                              int64_t stride, const float **wr) {
    for (int a = 0; a < tile_rows; a++) {
        const int ra = a < nr ? a : nr - 1;
        const uint8_t *row = (const uint8_t *)w + (size_t)(rb + ra) * row_bytes +
                             (size_t)(k0 / t->block_size) * (size_t)t->block_bytes;
        if (a < nr) dq(row, buf + a * stride, len / t->block_size);
        wr[a] = buf + ra * stride;
    }
}
