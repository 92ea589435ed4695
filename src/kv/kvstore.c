/* kvstore.c — tiles, staging, sinks, per-layer policy and byte accounting. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/fp16.h"
#include "kv/kvstore.h"

/* Tiles of one byte size, carved from chunks that grow geometrically so a
 * short context holds little and a long one makes few allocations. Freed
 * tiles go to a free list (linked through their first bytes). */
struct kvq_kv_pool {
    size_t tile_bytes;  /* rounded up to 64 for alignment */
    void *free_list;
    void **chunks;      /* (n_chunks) */
    int n_chunks, cap_chunks;
    size_t next_chunk_tiles;
};

#define POOL_FIRST_CHUNK 16
#define POOL_MAX_CHUNK 1024

static kvq_kv_pool *pool_create(size_t tile_bytes) {
    kvq_kv_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->tile_bytes = (tile_bytes + 63) & ~(size_t)63;
    p->next_chunk_tiles = POOL_FIRST_CHUNK;
    return p;
}

static void pool_free(kvq_kv_pool *p) {
    if (!p) return;
    for (int i = 0; i < p->n_chunks; i++) kvq_free_aligned(p->chunks[i]);
    free(p->chunks);
    free(p);
}

static uint8_t *pool_get(kvq_kv_pool *p) {
    if (!p->free_list) {
        if (p->n_chunks == p->cap_chunks) {
            const int cap = p->cap_chunks ? 2 * p->cap_chunks : 8;
            void **c = realloc(p->chunks, sizeof *c * (size_t)cap);
            if (!c) return NULL;
            p->chunks = c;
            p->cap_chunks = cap;
        }
        const size_t n = p->next_chunk_tiles;
        uint8_t *chunk = kvq_alloc_aligned(kvq_mul_size(n, p->tile_bytes));
        if (!chunk) return NULL;
        p->chunks[p->n_chunks++] = chunk;
        if (p->next_chunk_tiles < POOL_MAX_CHUNK) p->next_chunk_tiles *= 2;
        /* Pushed in reverse so tiles come out in address order. */
        for (size_t i = n; i-- > 0;) {
            void *t = chunk + i * p->tile_bytes;
            memcpy(t, &p->free_list, sizeof(void *));
            p->free_list = t;
        }
    }
    uint8_t *t = p->free_list;
    memcpy(&p->free_list, t, sizeof(void *));
    return t;
}

static void pool_put(kvq_kv_pool *p, uint8_t *t) {
    memcpy(t, &p->free_list, sizeof(void *));
    p->free_list = t;
}

void kvq_kv_params_default(kvq_kv_params *p) {
    if (!p) return;
    memset(p, 0, sizeof *p);
    p->centering = 1;
    p->tile_tokens = 32;
}

/* The store's codec of that name, created on first use. */
static kvq_status kv_codec(kvq_kv *kv, const char *name, kvq_codec **out) {
    int i = 0;
    for (; i < 4 && kv->codecs[i]; i++)
        if (strcmp(kvq_codec_name(kv->codecs[i]), name) == 0) break;
    if (i < 4 && !kv->codecs[i]) KVQ_FORWARD(kvq_codec_create(name, kv->p.head_dim, kv->p.seed, &kv->codecs[i]));
    *out = kv->codecs[i];
    return KVQ_OK;
}

static kvq_status kv_pool(kvq_kv *kv, size_t tile_bytes, kvq_kv_pool **out) {
    const size_t rounded = (tile_bytes + 63) & ~(size_t)63;
    int i = 0;
    for (; i < 4 && kv->pools[i]; i++)
        if (kv->pools[i]->tile_bytes == rounded) break;
    if (!kv->pools[i]) kv->pools[i] = pool_create(tile_bytes);
    KVQ_RETURN_IF(!kv->pools[i], KVQ_ERR_NOMEM, "kv store: out of memory");
    *out = kv->pools[i];
    return KVQ_OK;
}

static kvq_status kv_init(kvq_kv *kv) {
    const kvq_kv_params *p = &kv->p;
    const int T = p->tile_tokens, d = p->head_dim, H = p->n_kv_head;
    for (int l = 0; l < p->n_layer; l++) {
        kvq_kv_layer *L = &kv->layers[l];
        const int boundary = l < p->boundary_layers || l >= p->n_layer - p->boundary_layers;
        KVQ_FORWARD(kv_codec(kv, boundary ? kv->boundary : kv->ctk, &L->codec[0]));
        KVQ_FORWARD(kv_codec(kv, boundary ? kv->boundary : kv->ctv, &L->codec[1]));
        L->streams = calloc((size_t)H * 2, sizeof *L->streams);
        KVQ_RETURN_IF(!L->streams, KVQ_ERR_NOMEM, "kv store: out of memory");
        for (int kvi = 0; kvi < 2; kvi++) {
            const kvq_codec *c = L->codec[kvi];
            KVQ_FORWARD(kv_pool(kv, (size_t)T * c->row_bytes, &L->pool[kvi]));
            L->centered[kvi] = p->centering && c->desc->family->quantized;
        }
        for (int s = 0; s < 2 * H; s++) {
            kvq_kv_stream *st = &L->streams[s];
            st->stage = kvq_alloc_aligned(sizeof(uint16_t) * (size_t)T * d);
            st->mean = kvq_alloc_aligned(sizeof(float) * (size_t)d);
            if (p->n_sinks) st->sink = kvq_alloc_aligned(sizeof(uint16_t) * (size_t)p->n_sinks * d);
            KVQ_RETURN_IF(!st->stage || !st->mean || (p->n_sinks && !st->sink), KVQ_ERR_NOMEM,
                          "kv store: out of memory");
        }
    }
    return KVQ_OK;
}

kvq_status kvq_kv_create(const kvq_kv_params *p, kvq_kv **out) {
    KVQ_RETURN_IF(!p || !out, KVQ_ERR_INVALID_ARG, "kvq_kv_create: NULL argument");
    *out = NULL;
    KVQ_RETURN_IF(p->n_layer < 1 || p->n_kv_head < 1 || p->n_layer > 4096 || p->n_kv_head > 4096,
                  KVQ_ERR_INVALID_ARG, "kv store: n_layer %d / n_kv_head %d out of range", p->n_layer,
                  p->n_kv_head);
    KVQ_RETURN_IF(p->head_dim < 32 || p->head_dim > KVQ_MAX_HEAD_DIM || p->head_dim % 32, KVQ_ERR_INVALID_ARG,
                  "kv store: head_dim %d is not a multiple of 32 in [32, %d]", p->head_dim, KVQ_MAX_HEAD_DIM);
    const int T = p->tile_tokens ? p->tile_tokens : 32;
    KVQ_RETURN_IF(T < 1 || T > KVQ_KV_MAX_TILE, KVQ_ERR_INVALID_ARG, "kv store: tile_tokens %d not in [1, %d]",
                  p->tile_tokens, KVQ_KV_MAX_TILE);
    KVQ_RETURN_IF(p->n_sinks < 0 || p->n_sinks > 1 << 20, KVQ_ERR_INVALID_ARG, "kv store: n_sinks %d out of range",
                  p->n_sinks);
    KVQ_RETURN_IF(p->boundary_layers < 0, KVQ_ERR_INVALID_ARG, "kv store: boundary_layers %d < 0",
                  p->boundary_layers);
    const char *ctk = p->ctk ? p->ctk : "f16", *ctv = p->ctv ? p->ctv : "f16";
    KVQ_RETURN_IF(strlen(ctk) >= 32 || strlen(ctv) >= 32, KVQ_ERR_INVALID_ARG, "kv store: codec name too long");

    kvq_kv *kv = calloc(1, sizeof *kv);
    KVQ_RETURN_IF(!kv, KVQ_ERR_NOMEM, "kv store: out of memory");
    kv->p = *p;
    kv->p.tile_tokens = T;
    strcpy(kv->ctk, ctk);
    strcpy(kv->ctv, ctv);
    strcpy(kv->boundary, kvq_codec_desc_find("q8_0") ? "q8_0" : "f16");
    kv->p.ctk = kv->ctk;
    kv->p.ctv = kv->ctv;
    kv->layers = calloc((size_t)p->n_layer, sizeof *kv->layers);
    kvq_status s = kv->layers ? kv_init(kv) : kvq_fail(KVQ_ERR_NOMEM, "kv store: out of memory");
    if (s != KVQ_OK) {
        kvq_kv_free(kv);
        return s;
    }
    *out = kv;
    return KVQ_OK;
}

static void free_tiles(kvq_kv *kv, kvq_kv_layer *L, int keep) {
    for (int s = 0; s < 2 * kv->p.n_kv_head; s++)
        for (int t = keep; t < L->n_tiles; t++) pool_put(L->pool[s & 1], L->streams[s].tiles[t]);
    L->n_tiles = keep;
}

void kvq_kv_free(kvq_kv *kv) {
    if (!kv) return;
    for (int l = 0; kv->layers && l < kv->p.n_layer; l++) {
        kvq_kv_layer *L = &kv->layers[l];
        for (int s = 0; L->streams && s < 2 * kv->p.n_kv_head; s++) {
            free(L->streams[s].tiles);
            kvq_free_aligned(L->streams[s].stage);
            kvq_free_aligned(L->streams[s].sink);
            kvq_free_aligned(L->streams[s].mean);
        }
        free(L->streams);
    }
    free(kv->layers);
    for (int i = 0; i < 4; i++) {
        kvq_codec_free(kv->codecs[i]);
        pool_free(kv->pools[i]);
    }
    free(kv);
}

/* Compresses the full staging tiles of a layer. All tiles are taken before
 * anything changes, so running out of memory leaves the store as it was. */
static kvq_status flush(kvq_kv *kv, kvq_kv_layer *L) {
    const int H = kv->p.n_kv_head, T = kv->p.tile_tokens, d = kv->p.head_dim;
    if (L->n_tiles == L->cap_tiles) {
        const int cap = L->cap_tiles ? 2 * L->cap_tiles : 16;
        for (int s = 0; s < 2 * H; s++) {
            uint8_t **t = realloc(L->streams[s].tiles, sizeof *t * (size_t)cap);
            KVQ_RETURN_IF(!t, KVQ_ERR_NOMEM, "kv store: out of memory");
            L->streams[s].tiles = t;
        }
        L->cap_tiles = cap;
    }
    for (int s = 0; s < 2 * H; s++) {
        uint8_t *t = pool_get(L->pool[s & 1]);
        if (!t) {
            for (int r = 0; r < s; r++) pool_put(L->pool[r & 1], L->streams[r].tiles[L->n_tiles]);
            return kvq_fail(KVQ_ERR_NOMEM, "kv store: out of memory for a tile");
        }
        L->streams[s].tiles[L->n_tiles] = t;
    }
    const int first = !L->has_mean;
    kvq_status status = KVQ_OK;
    for (int s = 0; s < 2 * H; s++) {
        kvq_kv_stream *st = &L->streams[s];
        const kvq_codec *c = L->codec[s & 1];
        const int centered = L->centered[s & 1];
        if (centered && first) {
            for (int i = 0; i < d; i++) {
                double sum = 0;
                for (int r = 0; r < T; r++) sum += kvq_f16_to_f32(st->stage[(size_t)r * d + i]);
                st->mean[i] = (float)(sum / T);
            }
        }
        float x[KVQ_MAX_HEAD_DIM];
        for (int r = 0; r < T; r++) {
            for (int i = 0; i < d; i++)
                x[i] = kvq_f16_to_f32(st->stage[(size_t)r * d + i]) - (centered ? st->mean[i] : 0.0f);
            const kvq_status e = kvq_codec_encode_row(c, x, st->tiles[L->n_tiles] + (size_t)r * c->row_bytes);
            if (status == KVQ_OK) status = e;
        }
    }
    L->has_mean = 1;
    L->n_tiles++;
    return status;
}

kvq_status kvq_kv_append(kvq_kv *kv, int layer, const float *k, const float *v) {
    KVQ_RETURN_IF(!kv || !k || !v, KVQ_ERR_INVALID_ARG, "kvq_kv_append: NULL argument");
    KVQ_RETURN_IF(layer < 0 || layer >= kv->p.n_layer, KVQ_ERR_INVALID_ARG, "kvq_kv_append: layer %d not in [0, %d)",
                  layer, kv->p.n_layer);
    kvq_kv_layer *L = &kv->layers[layer];
    KVQ_RETURN_IF(L->n_tokens == 0x7FFFFFFF, KVQ_ERR_RANGE, "kv store: layer %d is full", layer);
    const int H = kv->p.n_kv_head, d = kv->p.head_dim, T = kv->p.tile_tokens;
    for (int kvi = 0; kvi < 2; kvi++) {
        if (!L->codec[kvi]->desc->family->quantized) continue;
        const float *x = kvi ? v : k;
        for (size_t i = 0; i < (size_t)H * d; i++) {
            KVQ_RETURN_IF(!isfinite(x[i]), KVQ_ERR_NONFINITE, "kv store: layer %d %s holds NaN or Inf", layer,
                          kvi ? "v" : "k");
            KVQ_RETURN_IF(fabsf(x[i]) > 65504.0f, KVQ_ERR_RANGE, "kv store: layer %d %s value %g beyond f16 range",
                          layer, kvi ? "v" : "k", (double)x[i]);
        }
    }
    const int sunk = kvq_kv_n_sunk(kv, L);
    const int to_sink = L->n_tokens < kv->p.n_sinks;
    const int row = to_sink ? sunk : kvq_kv_n_staged(kv, L);
    for (int h = 0; h < H; h++) {
        for (int kvi = 0; kvi < 2; kvi++) {
            kvq_kv_stream *st = &L->streams[h * 2 + kvi];
            uint16_t *dst = (to_sink ? st->sink : st->stage) + (size_t)row * d; /* (head_dim) */
            const float *x = (kvi ? v : k) + (size_t)h * d;
            for (int i = 0; i < d; i++) dst[i] = kvq_f32_to_f16(x[i]);
        }
    }
    L->n_tokens++;
    if (!to_sink && row + 1 == T) {
        const kvq_status s = flush(kv, L);
        if (s == KVQ_ERR_NOMEM) L->n_tokens--;
        return s;
    }
    return KVQ_OK;
}

int kvq_kv_n_tokens(const kvq_kv *kv, int layer) {
    return kv && layer >= 0 && layer < kv->p.n_layer ? kv->layers[layer].n_tokens : 0;
}

/* Decodes the first n rows of tile t back into staging (original space). */
static void unstage(kvq_kv *kv, kvq_kv_layer *L, int t, int n) {
    const int d = kv->p.head_dim;
    for (int s = 0; s < 2 * kv->p.n_kv_head; s++) {
        kvq_kv_stream *st = &L->streams[s];
        const kvq_codec *c = L->codec[s & 1];
        float y[KVQ_MAX_HEAD_DIM];
        for (int r = 0; r < n; r++) {
            kvq_codec_decode_row(c, st->tiles[t] + (size_t)r * c->row_bytes, y);
            for (int i = 0; i < d; i++) {
                const float x = y[i] + (L->centered[s & 1] ? st->mean[i] : 0.0f);
                st->stage[(size_t)r * d + i] = kvq_f32_to_f16(x);
            }
        }
    }
}

kvq_status kvq_kv_truncate(kvq_kv *kv, int n_tokens) {
    KVQ_RETURN_IF(!kv, KVQ_ERR_INVALID_ARG, "kvq_kv_truncate: kv is NULL");
    KVQ_RETURN_IF(n_tokens < 0, KVQ_ERR_INVALID_ARG, "kvq_kv_truncate: n_tokens %d < 0", n_tokens);
    const int T = kv->p.tile_tokens;
    for (int l = 0; l < kv->p.n_layer; l++) {
        kvq_kv_layer *L = &kv->layers[l];
        if (L->n_tokens <= n_tokens) continue;
        const int rel = n_tokens - kv->p.n_sinks; /* position after the sinks */
        const int keep = rel > 0 ? rel / T : 0;
        const int rem = rel > 0 ? rel % T : 0;
        if (keep < L->n_tiles) {
            if (rem) unstage(kv, L, keep, rem);
            free_tiles(kv, L, keep);
        }
        if (L->n_tiles == 0) L->has_mean = 0;
        L->n_tokens = n_tokens;
    }
    return KVQ_OK;
}

size_t kvq_kv_bytes_used(const kvq_kv *kv) {
    if (!kv) return 0;
    const size_t H = (size_t)kv->p.n_kv_head, d = (size_t)kv->p.head_dim, T = (size_t)kv->p.tile_tokens;
    size_t total = 0;
    for (int l = 0; l < kv->p.n_layer; l++) {
        const kvq_kv_layer *L = &kv->layers[l];
        const size_t f16_rows = (size_t)(kvq_kv_n_sunk(kv, L) + kvq_kv_n_staged(kv, L));
        total += H * (size_t)L->n_tiles * T * (L->codec[0]->row_bytes + L->codec[1]->row_bytes);
        total += H * 2 * f16_rows * d * 2;
        if (L->has_mean) total += H * (size_t)(L->centered[0] + L->centered[1]) * d * sizeof(float);
    }
    return total;
}

size_t kvq_kv_bytes_f16(const kvq_kv *kv) {
    if (!kv) return 0;
    size_t total = 0;
    for (int l = 0; l < kv->p.n_layer; l++)
        total += (size_t)kv->layers[l].n_tokens * (size_t)kv->p.n_kv_head * (size_t)kv->p.head_dim * 4;
    return total;
}
