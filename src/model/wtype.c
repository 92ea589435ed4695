/* wtype.c — the weight type table, reference dequantization and the
 * reference matvec / matmul. */
#include "model/wtype.h"

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
#else
#define KVQ_WSLOTS(ID, kind) {kvq_##kind##_##ID##_ref, kvq_##kind##_##ID##_ref, kvq_##kind##_##ID##_ref}
#define KVQ_WKERNELS(kind) {kvq_##kind##_ref, kvq_##kind##_ref, kvq_##kind##_ref}
#endif

static const kvq_wtype_traits table[] = {
#define KVQ_WTYPE(ID, ggml_id, nm, bs, bytes)                                          \
    {.type = ggml_id,                                                                  \
     .name = nm,                                                                       \
     .block_size = bs,                                                                 \
     .block_bytes = bytes,                                                             \
     .dequant = kvq_wdequant_##ID##_ref,                                               \
     .dequant_isa = KVQ_WSLOTS(ID, wdequant),                                          \
     .matvec = KVQ_WKERNELS(wmatvec),                                                  \
     .matmul = KVQ_WKERNELS(wmatmul)},
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
