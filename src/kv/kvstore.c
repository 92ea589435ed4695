/* kvstore.c — tiles, staging, sinks, per-layer policy and byte accounting. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fp16.h"
#include "common/threadpool.h"
#include "kv/kvstore.h"

/* A stream's segment k holds min(SEG_FIRST << k, the tiles of SEG_MAX_BYTES)
 * tiles (at least SEG_FIRST): a short context holds little, a long one makes
 * few allocations, and the unused tail of the last segment is bounded. */
#define SEG_FIRST 4
#define SEG_MAX_BYTES ((size_t)256 << 10)

static int seg_tiles(int k, size_t tile_bytes) {
    const size_t cap = SEG_MAX_BYTES / tile_bytes > SEG_FIRST ? SEG_MAX_BYTES / tile_bytes : SEG_FIRST;
    const size_t n = k < 16 ? (size_t)SEG_FIRST << k : cap;
    return (int)(n < cap ? n : cap);
}

/* Tiles a stream's segments hold. */
static int stream_cap(const kvq_kv_stream *st, size_t tile_bytes) {
    int n = 0;
    for (int k = 0; k < st->n_segs; k++) n += seg_tiles(k, tile_bytes);
    return n;
}

/* Makes room for tile n_tiles in the stream (a new segment when full). */
static kvq_status stream_reserve(kvq_kv_stream *st, int n_tiles, size_t tile_bytes) {
    const int cap = stream_cap(st, tile_bytes);
    if (n_tiles < cap) return KVQ_OK;
    const int n = seg_tiles(st->n_segs, tile_bytes);
    uint8_t **segs = realloc(st->segs, sizeof *segs * (size_t)(st->n_segs + 1));
    KVQ_RETURN_IF(!segs, KVQ_ERR_NOMEM, "kv store: out of memory");
    st->segs = segs;
    uint8_t **tiles = realloc(st->tiles, sizeof *tiles * (size_t)(cap + n));
    KVQ_RETURN_IF(!tiles, KVQ_ERR_NOMEM, "kv store: out of memory");
    st->tiles = tiles;
    uint8_t *mem = kvq_alloc_aligned(kvq_mul_size((size_t)n, tile_bytes));
    KVQ_RETURN_IF(!mem, KVQ_ERR_NOMEM, "kv store: out of memory for a tile");
    st->segs[st->n_segs++] = mem;
    for (int i = 0; i < n; i++) st->tiles[cap + i] = mem + (size_t)i * tile_bytes;
    return KVQ_OK;
}

kvq_status kvq_kv_reserve_tiles(kvq_kv *kv, int layer, int n_tiles) {
    kvq_kv_layer *L = &kv->layers[layer];
    for (int s = 0; s < 2 * kv->p.n_kv_head; s++)
        for (int t = 0; t < n_tiles; t++) KVQ_FORWARD(stream_reserve(&L->streams[s], t, L->tile_bytes[s & 1]));
    return KVQ_OK;
}

/* Frees the segments that hold no tile below n_tiles. */
static void stream_shrink(kvq_kv_stream *st, int n_tiles, size_t tile_bytes) {
    int first = stream_cap(st, tile_bytes);
    while (st->n_segs > 0) {
        first -= seg_tiles(st->n_segs - 1, tile_bytes);
        if (first < n_tiles) break;
        kvq_free_aligned(st->segs[--st->n_segs]);
    }
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

static kvq_status kv_init(kvq_kv *kv) {
    const kvq_kv_params *p = &kv->p;
    const int T = p->tile_tokens, d = p->head_dim, H = p->n_kv_head;
    /* AUTO: only where an integer attention kernel reads the layout (AVX2
     * and up: decode_int_avx2.c, decode_vnni.c); the scalar path would
     * have to unpack every tile to rows. */
    const int want_interleaved = p->tile_layout == KVQ_TILES_INTERLEAVED ||
                                 (p->tile_layout == KVQ_TILES_AUTO && kvq_isa_default() >= KVQ_ISA_AVX2);
    for (int l = 0; l < p->n_layer; l++) {
        kvq_kv_layer *L = &kv->layers[l];
        const int boundary = l < p->boundary_layers || l >= p->n_layer - p->boundary_layers;
        KVQ_FORWARD(kv_codec(kv, boundary ? kv->boundary : kv->ctk, &L->codec[0]));
        KVQ_FORWARD(kv_codec(kv, boundary ? kv->boundary : kv->ctv, &L->codec[1]));
        L->streams = calloc((size_t)H * 2, sizeof *L->streams);
        KVQ_RETURN_IF(!L->streams, KVQ_ERR_NOMEM, "kv store: out of memory");
        for (int kvi = 0; kvi < 2; kvi++) {
            const kvq_codec *c = L->codec[kvi];
            L->tile_bytes[kvi] = ((size_t)T * c->row_bytes + 63) & ~(size_t)63;
            L->centered[kvi] = p->centering && c->desc->family->quantized;
            if (c->row_bytes > kv->max_row_bytes) kv->max_row_bytes = c->row_bytes;
        }
        /* K interleaves where V does, and also over f16 V rows (the K-only
         * presets, k_iso3 ...): the integer kernel scores the K tiles and
         * runs P x V over the rows in float, so the layer reads only its
         * bytes. A per-side flag rather than an identity "layout" for f16:
         * V rows stay rows everywhere (flush, read, truncate, sessions,
         * the float paths), and f16/f16 layers keep the float kernel. */
        const int k_ok = want_interleaved && T % 16 == 0 && kvq_kv_interleavable(L->codec[0]);
        L->interleaved[1] = k_ok && kvq_kv_interleavable(L->codec[1]);
        L->interleaved[0] = L->interleaved[1] || (k_ok && kvq_kv_f16_rows(L->codec[1]));
        for (int s = 0; s < 2 * H; s++) {
            kvq_kv_stream *st = &L->streams[s];
            st->stage = kvq_alloc_aligned(sizeof(uint16_t) * (size_t)T * d);
            st->mean = kvq_alloc_aligned(sizeof(float) * (size_t)d);
            if (p->n_sinks) st->sink = kvq_alloc_aligned(sizeof(uint16_t) * (size_t)p->n_sinks * d);
            KVQ_RETURN_IF(!st->stage || !st->mean || (p->n_sinks && !st->sink), KVQ_ERR_NOMEM,
                          "kv store: out of memory");
        }
    }
    kv->rows = kvq_alloc_aligned((size_t)T * kv->max_row_bytes);
    KVQ_RETURN_IF(!kv->rows, KVQ_ERR_NOMEM, "kv store: out of memory");
    return kvq_codec_create("f16", d, 0, &kv->f16);
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
    KVQ_RETURN_IF(p->tile_layout < KVQ_TILES_AUTO || p->tile_layout > KVQ_TILES_INTERLEAVED, KVQ_ERR_INVALID_ARG,
                  "kv store: tile_layout %d is not a KVQ_TILES_* value", p->tile_layout);
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
    for (int s = 0; s < 2 * kv->p.n_kv_head; s++) stream_shrink(&L->streams[s], keep, L->tile_bytes[s & 1]);
    L->n_tiles = keep;
}

void kvq_kv_free(kvq_kv *kv) {
    if (!kv) return;
    for (int l = 0; kv->layers && l < kv->p.n_layer; l++) {
        kvq_kv_layer *L = &kv->layers[l];
        for (int s = 0; L->streams && s < 2 * kv->p.n_kv_head; s++) {
            stream_shrink(&L->streams[s], 0, L->tile_bytes[s & 1]);
            free(L->streams[s].segs);
            free(L->streams[s].tiles);
            kvq_free_aligned(L->streams[s].stage);
            kvq_free_aligned(L->streams[s].sink);
            kvq_free_aligned(L->streams[s].mean);
        }
        free(L->streams);
    }
    free(kv->layers);
    kvq_free_aligned(kv->rows);
    kvq_codec_free(kv->f16);
    kvq_scratch_free(&kv->attn);
    kvq_scratch_free(&kv->flush);
    for (int i = 0; i < 4; i++) kvq_codec_free(kv->codecs[i]);
    free(kv);
}

/* One stream's part of a flush: its staging tile decoded to floats x (T, d),
 * centred, encoded to codec rows (in rows when the layer interleaves, else
 * in place), packed. The first encode error is returned; its rows hold zeros. */
/* x -= mean over d values (a multiple of 32), in 16s and through restrict
 * parameters: what gcc -O2 vectorizes (a loop over d, or restrict locals,
 * stayed scalar). */
static void subtract_mean(float *restrict x, const float *restrict mean, int d) {
    for (int i = 0; i < d; i += 16)
        for (int j = 0; j < 16; j++) x[i + j] -= mean[i + j];
}

static kvq_status flush_stream(const kvq_kv *kv, kvq_kv_layer *L, int s, int first, float *x, uint8_t *rows) {
    const int T = kv->p.tile_tokens, d = kv->p.head_dim;
    kvq_kv_stream *st = &L->streams[s];
    const kvq_codec *c = L->codec[s & 1];
    const int centered = L->centered[s & 1];
    for (int r = 0; r < T; r++) kv->f16->decode(kv->f16, st->stage + (size_t)r * d, x + (size_t)r * d);
    if (centered && first) {
        for (int i = 0; i < d; i++) {
            double sum = 0;
            for (int r = 0; r < T; r++) sum += x[(size_t)r * d + i];
            st->mean[i] = (float)(sum / T);
        }
    }
    if (!L->interleaved[s & 1]) rows = st->tiles[L->n_tiles];
    kvq_status status = KVQ_OK;
    for (int r = 0; r < T; r++) {
        float *xr = x + (size_t)r * d;
        if (centered) subtract_mean(xr, st->mean, d);
        const kvq_status e = kvq_codec_encode_row(c, xr, rows + (size_t)r * c->row_bytes);
        if (status == KVQ_OK) status = e;
    }
    if (L->interleaved[s & 1]) {
#if KVQ_HAVE_X86
        if (c->isa >= KVQ_ISA_AVX512) kvq_kv_tile_pack_avx512(c, s & 1, T, rows, st->tiles[L->n_tiles]);
        else
#endif
            kvq_kv_tile_pack(c, s & 1, T, rows, st->tiles[L->n_tiles]);
    }
    return status;
}

/* A flush's streams as pool tasks, each with its own scratch slot. A task's
 * error message is per thread (kvq_last_error), so it is kept with its
 * status for the caller. */
enum { FLUSH_MSG = 256 };
typedef struct flush_job {
    const kvq_kv *kv;
    kvq_kv_layer *L;
    int first;
    uint8_t *block;       /* (2 n_kv_head) slots of slot bytes */
    size_t slot;          /* (T, d) floats, (T, max_row_bytes) rows, FLUSH_MSG message */
    kvq_status *status;   /* (2 n_kv_head) */
} flush_job;

/* Where a slot's rows and message start (the floats come first). */
static size_t flush_rows_at(const kvq_kv *kv) { return sizeof(float) * (size_t)kv->p.tile_tokens * kv->p.head_dim; }
static size_t flush_msg_at(const kvq_kv *kv) {
    return flush_rows_at(kv) + (size_t)kv->p.tile_tokens * kv->max_row_bytes;
}

static void flush_task(int s, int worker, void *arg) {
    (void)worker;
    flush_job *j = arg;
    uint8_t *slot = j->block + (size_t)s * j->slot;
    j->status[s] = flush_stream(j->kv, j->L, s, j->first, (float *)(void *)slot, slot + flush_rows_at(j->kv));
    if (j->status[s] != KVQ_OK) snprintf((char *)slot + flush_msg_at(j->kv), FLUSH_MSG, "%s", kvq_last_error());
}

/* Compresses the full staging tiles of a layer, its streams as tasks of
 * pool (NULL: on the calling thread). All tiles are taken before
 * anything changes, so running out of memory leaves the store as it was. */
static kvq_status flush(kvq_kv *kv, kvq_kv_layer *L, kvq_threadpool *pool) {
    const int H = kv->p.n_kv_head;
    /* A failed reservation leaves at most a spare segment behind: the store
     * is unchanged. */
    for (int s = 0; s < 2 * H; s++) KVQ_FORWARD(stream_reserve(&L->streams[s], L->n_tiles, L->tile_bytes[s & 1]));
    const int first = !L->has_mean;
    kvq_status status = KVQ_OK;
    flush_job j = {.kv = kv, .L = L, .first = first};
    j.slot = (flush_msg_at(kv) + FLUSH_MSG + 63) & ~(size_t)63;
    const size_t status_at = (size_t)2 * H * j.slot;
    j.block = kvq_scratch_take(&kv->flush, status_at + sizeof(kvq_status) * 2 * (size_t)H);
    KVQ_RETURN_IF(!j.block, KVQ_ERR_NOMEM, "kv store: out of memory");
    j.status = (kvq_status *)(void *)(j.block + status_at);
    kvq_threadpool_run(pool, 2 * H, flush_task, &j); /* NULL pool: here, in stream order */
    for (int s = 0; s < 2 * H && status == KVQ_OK; s++)
        if (j.status[s] != KVQ_OK)
            status = kvq_fail(j.status[s], "%s", (const char *)j.block + (size_t)s * j.slot + flush_msg_at(kv));
    kvq_scratch_give(&kv->flush, j.block);
    L->has_mean = 1;
    L->n_tiles++;
    return status;
}

/* KVQ_OK if the n values (a multiple of 32) fit a quantized codec's
 * fp16-based scales: finite and within f16 range. One pass without early
 * exit, in 16s (gcc -O2 vectorizes a fixed count); the first offender is
 * looked for only when there is one. */
static kvq_status check_values(const float *x, size_t n, int layer, const char *which) {
    int bad = 0;
    for (size_t i = 0; i < n; i += 16)
        for (int j = 0; j < 16; j++) bad |= !(fabsf(x[i + j]) <= 65504.0f);
    if (!bad) return KVQ_OK;
    for (size_t i = 0; i < n; i++) {
        KVQ_RETURN_IF(!isfinite(x[i]), KVQ_ERR_NONFINITE, "kv store: layer %d %s holds NaN or Inf", layer, which);
        KVQ_RETURN_IF(fabsf(x[i]) > 65504.0f, KVQ_ERR_RANGE, "kv store: layer %d %s value %g beyond f16 range",
                      layer, which, (double)x[i]);
    }
    return KVQ_OK;
}

kvq_status kvq_kv_append(kvq_kv *kv, int layer, kvq_threadpool *pool, const float *k, const float *v) {
    KVQ_RETURN_IF(!kv || !k || !v, KVQ_ERR_INVALID_ARG, "kvq_kv_append: NULL argument");
    KVQ_RETURN_IF(layer < 0 || layer >= kv->p.n_layer, KVQ_ERR_INVALID_ARG, "kvq_kv_append: layer %d not in [0, %d)",
                  layer, kv->p.n_layer);
    kvq_kv_layer *L = &kv->layers[layer];
    KVQ_RETURN_IF(L->n_tokens == 0x7FFFFFFF, KVQ_ERR_RANGE, "kv store: layer %d is full", layer);
    const int H = kv->p.n_kv_head, d = kv->p.head_dim, T = kv->p.tile_tokens;
    for (int kvi = 0; kvi < 2; kvi++)
        if (L->codec[kvi]->desc->family->quantized)
            KVQ_FORWARD(check_values(kvi ? v : k, (size_t)H * d, layer, kvi ? "v" : "k"));
    const int sunk = kvq_kv_n_sunk(kv, L);
    const int to_sink = L->n_tokens < kv->p.n_sinks;
    const int row = to_sink ? sunk : kvq_kv_n_staged(kv, L);
    for (int h = 0; h < H; h++) {
        for (int kvi = 0; kvi < 2; kvi++) {
            kvq_kv_stream *st = &L->streams[h * 2 + kvi];
            uint16_t *dst = (to_sink ? st->sink : st->stage) + (size_t)row * d; /* (head_dim) */
            kv->f16->encode(kv->f16, (kvi ? v : k) + (size_t)h * d, dst);
        }
    }
    L->n_tokens++;
    if (!to_sink && row + 1 == T) {
        const kvq_status s = flush(kv, L, pool);
        if (s == KVQ_ERR_NOMEM) L->n_tokens--;
        return s;
    }
    return KVQ_OK;
}

int kvq_kv_n_tokens(const kvq_kv *kv, int layer) {
    return kv && layer >= 0 && layer < kv->p.n_layer ? kv->layers[layer].n_tokens : 0;
}

/* Row r of tile t of stream s as attention sees it: decoded, mean added back. */
static void tile_row(const kvq_kv_layer *L, int T, int s, int t, int r, float *y) {
    const kvq_codec *c = L->codec[s & 1];
    const kvq_kv_stream *st = &L->streams[s];
    uint8_t row[KVQ_KV_MAX_ILEAVED_ROW];
    const int il = L->interleaved[s & 1];
    if (il) kvq_kv_tile_unpack_row(c, s & 1, T, st->tiles[t], r, row);
    kvq_codec_decode_row(c, il ? row : st->tiles[t] + (size_t)r * c->row_bytes, y);
    if (L->centered[s & 1])
        for (int i = 0; i < c->head_dim; i++) y[i] += st->mean[i];
}

/* Decodes the first n rows of tile t back into staging (original space). */
static void unstage(kvq_kv *kv, kvq_kv_layer *L, int t, int n) {
    const int d = kv->p.head_dim;
    for (int s = 0; s < 2 * kv->p.n_kv_head; s++) {
        float y[KVQ_MAX_HEAD_DIM];
        for (int r = 0; r < n; r++) {
            tile_row(L, kv->p.tile_tokens, s, t, r, y);
            for (int i = 0; i < d; i++) L->streams[s].stage[(size_t)r * d + i] = kvq_f32_to_f16(y[i]);
        }
    }
}

kvq_status kvq_kv_read(const kvq_kv *kv, int layer, int pos, float *k, float *v) {
    KVQ_RETURN_IF(!kv || !k || !v, KVQ_ERR_INVALID_ARG, "kvq_kv_read: NULL argument");
    KVQ_RETURN_IF(layer < 0 || layer >= kv->p.n_layer, KVQ_ERR_INVALID_ARG, "kvq_kv_read: layer %d not in [0, %d)",
                  layer, kv->p.n_layer);
    const kvq_kv_layer *L = &kv->layers[layer];
    KVQ_RETURN_IF(pos < 0 || pos >= L->n_tokens, KVQ_ERR_INVALID_ARG,
                  "kvq_kv_read: position %d but layer %d holds %d tokens", pos, layer, L->n_tokens);
    const int d = kv->p.head_dim, T = kv->p.tile_tokens, n_sunk = kvq_kv_n_sunk(kv, L);
    const int rel = pos - n_sunk, t = rel / T;
    for (int s = 0; s < 2 * kv->p.n_kv_head; s++) {
        float *y = (s & 1 ? v : k) + (size_t)(s / 2) * d;
        const kvq_kv_stream *st = &L->streams[s];
        const uint16_t *f16 = pos < n_sunk ? st->sink + (size_t)pos * d
                              : t >= L->n_tiles ? st->stage + (size_t)(rel - L->n_tiles * T) * d
                                                : NULL;
        if (f16)
            for (int i = 0; i < d; i++) y[i] = kvq_f16_to_f32(f16[i]);
        else
            tile_row(L, T, s, t, rel % T, y);
    }
    return KVQ_OK;
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

int kvq_kv_n_f16_tokens(const kvq_kv *kv) {
    if (!kv) return 0;
    /* Between evaluations every layer holds the same tokens: layer 0 speaks for all. */
    return kvq_kv_n_sunk(kv, &kv->layers[0]) + kvq_kv_n_staged(kv, &kv->layers[0]);
}

size_t kvq_kv_bytes_f16(const kvq_kv *kv) {
    if (!kv) return 0;
    size_t total = 0;
    for (int l = 0; l < kv->p.n_layer; l++)
        total += (size_t)kv->layers[l].n_tokens * (size_t)kv->p.n_kv_head * (size_t)kv->p.head_dim * 4;
    return total;
}
