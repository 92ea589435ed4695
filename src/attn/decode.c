/* decode.c — fused split-K flash-decode over the compressed store.
 *
 * Work is split into tasks of (kv head, run of tiles); each task decodes a
 * tile ONCE (or reads f16 rows in place) and runs the tile kernel for all G
 * query heads of the group, keeping per head a running max, sum and
 * accumulator. One more task per kv head covers the f16 rows (sinks and
 * staging), which are in the original space. Partials are merged by
 * log-sum-exp in task order, so the result does not depend on the number of
 * threads. Rotations and the V mean are applied once per head at the end. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "attn/attn_kernels.h"
#include "codec/ggml_blocks.h"
#include "codec/rotated.h"
#include "common/fp16.h"

/* ------------------------------------------------------------ ref kernels */

static float row_value(const void *rows, size_t j, int kind) {
    if (kind == KVQ_ROWS_F16) return kvq_f16_to_f32(((const uint16_t *)rows)[j]);
    if (kind == KVQ_ROWS_BF16) return kvq_bf16_to_f32(((const uint16_t *)rows)[j]);
    return ((const float *)rows)[j];
}

static void tile_ref(int G, int d, int n, const float *q, const void *k, const void *v, float *m, float *l,
                     float *acc, int kind) {
    float s[KVQ_KV_MAX_TILE]; /* (n) */
    for (int g = 0; g < G; g++) {
        const float *qg = q + (size_t)g * d;
        float mt = -INFINITY;
        for (int t = 0; t < n; t++) {
            float dot = 0;
            for (int i = 0; i < d; i++) {
                const size_t j = (size_t)t * d + i;
                const float kv = row_value(k, j, kind);
                dot += qg[i] * kv;
            }
            s[t] = dot;
            if (dot > mt) mt = dot;
        }
        const float m_new = mt > m[g] ? mt : m[g];
        const float alpha = expf(m[g] - m_new);
        float sum = 0;
        for (int t = 0; t < n; t++) {
            s[t] = expf(s[t] - m_new);
            sum += s[t];
        }
        l[g] = l[g] * alpha + sum;
        m[g] = m_new;
        float *a = acc + (size_t)g * d;
        for (int i = 0; i < d; i++) a[i] *= alpha;
        for (int t = 0; t < n; t++)
            for (int i = 0; i < d; i++) {
                const size_t j = (size_t)t * d + i;
                const float vv = row_value(v, j, kind);
                a[i] += s[t] * vv;
            }
    }
}

void kvq_attn_tile_f32_ref(int G, int d, int n, const float *q, const void *k, const void *v, const void *k_next,
                           const void *v_next, float *m, float *l, float *acc) {
    (void)k_next, (void)v_next;
    tile_ref(G, d, n, q, k, v, m, l, acc, KVQ_ROWS_F32);
}

void kvq_attn_tile_f16_ref(int G, int d, int n, const float *q, const void *k, const void *v, const void *k_next,
                           const void *v_next, float *m, float *l, float *acc) {
    (void)k_next, (void)v_next;
    tile_ref(G, d, n, q, k, v, m, l, acc, KVQ_ROWS_F16);
}

void kvq_attn_tile_bf16_ref(int G, int d, int n, const float *q, const void *k, const void *v, const void *k_next,
                            const void *v_next, float *m, float *l, float *acc) {
    (void)k_next, (void)v_next;
    tile_ref(G, d, n, q, k, v, m, l, acc, KVQ_ROWS_BF16);
}

void kvq_attn_kernels_get(kvq_isa isa, kvq_attn_kernels *out) {
    *out = (kvq_attn_kernels){0};
    out->tile[KVQ_ROWS_F32] = kvq_attn_tile_f32_ref;
    out->tile[KVQ_ROWS_F16] = kvq_attn_tile_f16_ref;
    out->tile[KVQ_ROWS_BF16] = kvq_attn_tile_bf16_ref;
    out->tile_decode = kvq_kv_tile_decode;
#if KVQ_HAVE_X86
    if (isa >= KVQ_ISA_AVX2) {
        out->tile[KVQ_ROWS_F32] = kvq_attn_tile_f32_avx2;
        out->tile[KVQ_ROWS_F16] = kvq_attn_tile_f16_avx2;
        out->tile[KVQ_ROWS_BF16] = kvq_attn_tile_bf16_avx2;
        out->tile_decode = kvq_kv_tile_decode_avx2;
        out->block = kvq_attn_block_avx2;
        out->integer = kvq_attn_int_avx2;
        out->qi8 = kvq_attn_qi8_prepare_avx2;
    }
    if (isa >= KVQ_ISA_AVX512) {
        out->tile[KVQ_ROWS_F32] = kvq_attn_tile_f32_avx512;
        out->tile[KVQ_ROWS_F16] = kvq_attn_tile_f16_avx512;
        out->fused = kvq_attn_fused_avx512;
        out->block = kvq_attn_block_avx512;
        out->tile_decode = kvq_kv_tile_decode_avx512;
        if (kvq_cpu_has_vnni()) {
            out->integer = kvq_attn_vnni_avx512;
            out->qi8 = kvq_attn_qi8_prepare_avx512;
        }
    }
#endif
}

int kvq_attn_rows_fmt(const kvq_codec *c) {
    if (c->qjl) return -1; /* the residual sketch needs the full decode */
    const kvq_family_ops *f = c->desc->family;
    if (f == &kvq_family_plain)
        return c->desc->param == KVQ_PLAIN_F32 ? KVQ_FMT_F32 : c->desc->param == KVQ_PLAIN_F16 ? KVQ_FMT_F16 : KVQ_FMT_BF16;
    if (f == &kvq_family_rot) return KVQ_FMT_ROT2 + ((const kvq_rot_state *)c->state)->bits - 2;
    static const int ggml_fmt[] = {[KVQ_GGML_Q8_0] = KVQ_FMT_Q8_0, [KVQ_GGML_Q4_0] = KVQ_FMT_Q4_0,
                                   [KVQ_GGML_Q4_1] = KVQ_FMT_Q4_1, [KVQ_GGML_Q5_0] = KVQ_FMT_Q5_0,
                                   [KVQ_GGML_Q5_1] = KVQ_FMT_Q5_1, [KVQ_GGML_IQ4_NL] = KVQ_FMT_IQ4_NL};
    return ggml_fmt[c->desc->param];
}

/* The 16-entry table a format's rows index (see kvq_attn_rows.lut). */
static void rows_lut(const kvq_codec *c, int fmt, float lut[16]) {
    for (int j = 0; j < 16; j++) {
        if (fmt == KVQ_FMT_IQ4_NL) lut[j] = (float)kvq_iq4nl_values[j];
        else if (fmt >= KVQ_FMT_ROT2) lut[j] = ((const kvq_rot_state *)c->state)->centroid[j & ((4 << (fmt - KVQ_FMT_ROT2)) - 1)];
        else lut[j] = 0;
    }
}

/* ---------------------------------------------------------------- driver */

/* Tiles per task: fixed by the depth, never by the thread count (the
 * integer kernel pairs tiles within a task, so the chunking is part of the
 * result). Each kv head's tiles are cut into chunks that halve in size (half
 * of the tiles left, down to a floor), and the tasks are numbered chunk-major
 * — every head's first chunk, then every head's second, ..., then the f16
 * rows — so the threads claim long tasks first and finish on short ones
 * together. The rule before (~2 equal chunks per head, head-major) left the
 * threads finishing a layer 260 us apart at depth 32768 (f16, smollm2-135m
 * shapes, 2 threads: 13% of a layer), and the caller often asleep on the
 * futex by then (48 us a layer to wake it); now 35 us and 1 us, and attention
 * at depth 32768 takes f16 56.4 -> 44.8 ms a step, turbo3 13.1 -> 10.9.
 * The floor keeps tasks long at shallow depth, where each task's cold start
 * (its first tiles arrive unprefetched) and partial for the merge weigh
 * most: 16 equal chunks per head took turbo3 at depth 4096 2.3 ms a step
 * against 1.6 with 2, and a floor of 32 tiles against 16 took 3-5% off
 * q4_0 and turbo3 at depth 4096 (chunks of 64, 32, 32 against 64, 32, 16,
 * 16), 2-4% at 16384. */
#define CHUNK_MIN_TILES 32
#define CHUNK_MIN_SHARE 32 /* the floor is also >= 1/32 of the head's tiles */
#define MAX_CHUNKS 16

/* Fills start[0..n] with the chunk boundaries of n_tiles tiles; returns n. */
static int chunk_schedule(int n_tiles, int start[MAX_CHUNKS + 1]) {
    int min_size = n_tiles / CHUNK_MIN_SHARE;
    if (min_size < CHUNK_MIN_TILES) min_size = CHUNK_MIN_TILES;
    /* Two chunks a head at least, from 8 tiles: with one, the 3 kv heads of
     * smollm2-135m shapes leave one of 2 threads idle for a third of a layer. */
    if (min_size > n_tiles / 2 && n_tiles >= 8) min_size = n_tiles / 2;
    int n = 0, t = 0;
    while (t < n_tiles) {
        const int left = n_tiles - t;
        int size = (left + 1) / 2;
        if (size < min_size) size = min_size;
        size += size & 1; /* even: the integer kernel takes tiles in pairs */
        if (size > left || n == MAX_CHUNKS - 1) size = left;
        start[n++] = t;
        t += size;
    }
    start[n] = n_tiles;
    return n;
}

/* The fused kernel dequantizes a row each time a query reads it; a block of
 * prefill queries shares one decode of the tile into scratch instead (the
 * float rows then stay in L1 for every query of the block). */
#define FUSED_MAX_QUERIES 2

typedef struct run_ctx {
    const kvq_kv *kv;
    const kvq_kv_layer *L;
    kvq_attn_kernels kern;
    int G, d, T, n_q, pos0;
    int n_chunks, tasks_per_head;
    int chunk_start[MAX_CHUNKS + 1]; /* tile ranges of a head's chunks (chunk_schedule) */
    int direct[2];     /* K / V tiles' row kind where the tile kernel reads them in place (KVQ_ROWS_F16, _BF16), else -1 */
    int fmt[2];        /* K / V fused row formats; -1 when the fused kernel cannot read them */
    int in_place;      /* the fused kernel reads the tiles' rows in place (see FUSED_MAX_QUERIES) */
    int integer;       /* the integer kernel reads the interleaved tiles in place (same rule) */
    kvq_attn_itiles itiles; /* the integer kernel's view of the tiles, but for T, NT and the tile pointers (when integer) */
    uint8_t icodes[2][256]; /* K / V code tables of the integer kernel (itiles.lut points here) */
    float lut[2][16];  /* K / V row tables (kvq_attn_rows.lut) */
    const float *qd;   /* (n_q, n_head, head_dim) scaled, in the K domain */
    const float *qr;   /* (n_q, n_head, head_dim) scaled, original space */
    const kvq_attn_qi8 *qi; /* (n_q, n_head) qd prepared for the integer kernel, when integer */
    float *part;       /* (n_tasks, n_q, G, head_dim + 2): m (G), l (G), acc (G, head_dim) */
    float *scratch;    /* (n_workers, 2, tile_tokens, head_dim) */
    _Atomic int *left; /* (n_kv_head): tasks of the head not yet ended (run_task) */
    float *out;        /* (n_q, n_head, head_dim) */
} run_ctx;

static size_t part_floats(const run_ctx *c) { return (size_t)c->G * ((size_t)c->d + 2); }

/* Decodes a tile of K (side 0) or V (side 1) into floats in the attention
 * domain; +qjl codecs decode fully (their domain is the identity). */
static void decode_tile(const run_ctx *rc, int side, const uint8_t *src, float *y) {
    const kvq_codec *c = rc->L->codec[side];
    const int n = rc->T;
    if (rc->L->interleaved[side]) {
        rc->kern.tile_decode(c, side, n, src, y); /* attention-domain values, as decode_tile_domain's */
    } else if (c->qjl) {
        for (int r = 0; r < n; r++) kvq_codec_decode_row(c, src + (size_t)r * c->row_bytes, y + (size_t)r * c->head_dim);
    } else {
        c->decode_tile_domain(c, src, n, y);
    }
}

/* Runs the kernel over rows [0, n) at positions pos.. for every query whose
 * causal window reaches them; q is the query set for this row space. Rows
 * are read in place by the fused kernel where the path has one; otherwise
 * they are contiguous f32 or f16 rows (kind). */
static void attend_rows(const run_ctx *c, int kvh, int kind, int pos, int n, const kvq_attn_rows *k,
                        const kvq_attn_rows *v, const float *q, float *part) {
    const int n_head = c->G * c->kv->p.n_kv_head;
    /* Past FUSED_MAX_QUERIES the rows are always f32 scratch or f16 (in_place is off). */
    if (c->kern.block && c->n_q > FUSED_MAX_QUERIES) {
        kvq_attn_qrow rows[KVQ_ATTN_BLOCK_ROWS];
        int R = 0;
        for (int i = 0; i < c->n_q; i++) {
            const int n_valid = c->pos0 + i - pos + 1 < n ? c->pos0 + i - pos + 1 : n;
            if (n_valid <= 0) continue;
            float *p = part + (size_t)i * part_floats(c);
            for (int g = 0; g < c->G; g++) {
                rows[R++] = (kvq_attn_qrow){q + ((size_t)i * n_head + (size_t)kvh * c->G + g) * c->d, p + g,
                                            p + c->G + g, p + 2 * c->G + (size_t)g * c->d, n_valid};
                if (R == KVQ_ATTN_BLOCK_ROWS) {
                    c->kern.block(R, rows, c->d, n, k, v);
                    R = 0;
                }
            }
        }
        if (R) c->kern.block(R, rows, c->d, n, k, v);
        return;
    }
    for (int i = 0; i < c->n_q; i++) {
        const int n_valid = c->pos0 + i - pos + 1 < n ? c->pos0 + i - pos + 1 : n;
        if (n_valid <= 0) continue;
        float *p = part + (size_t)i * part_floats(c);
        for (int g0 = 0; g0 < c->G; g0 += KVQ_ATTN_MAX_G) {
            const int gn = c->G - g0 < KVQ_ATTN_MAX_G ? c->G - g0 : KVQ_ATTN_MAX_G;
            const float *qg = q + ((size_t)i * n_head + (size_t)kvh * c->G + g0) * c->d;
            float *m = p + g0, *l = p + c->G + g0, *acc = p + 2 * c->G + (size_t)g0 * c->d;
            if (c->kern.fused) c->kern.fused(gn, c->d, n_valid, qg, k, v, m, l, acc);
            else c->kern.tile[kind](gn, c->d, n_valid, qg, k->base, v->base, k->next, v->next, m, l, acc);
        }
    }
}

/* The integer kernel over a run of interleaved tiles at positions pos..,
 * for every query whose causal window reaches them. */
static void attend_itiles(const run_ctx *c, int kvh, int pos, const kvq_attn_itiles *it, float *part) {
    const int n_head = c->G * c->kv->p.n_kv_head, run = it->NT * it->T;
    for (int i = 0; i < c->n_q; i++) {
        const int n_valid = c->pos0 + i - pos + 1 < run ? c->pos0 + i - pos + 1 : run;
        if (n_valid <= 0) continue;
        float *p = part + (size_t)i * part_floats(c);
        for (int g0 = 0; g0 < c->G; g0 += KVQ_ATTN_MAX_G) {
            const int gn = c->G - g0 < KVQ_ATTN_MAX_G ? c->G - g0 : KVQ_ATTN_MAX_G;
            const kvq_attn_qi8 *qg = c->qi + (size_t)i * n_head + (size_t)kvh * c->G + g0;
            c->kern.integer(gn, c->d, n_valid, qg, it, p + g0, p + c->G + g0, p + 2 * c->G + (size_t)g0 * c->d);
        }
    }
}

/* f16 rows (sinks, staging) of a stream. */
static kvq_attn_rows f16_rows(const uint16_t *rows, int d) {
    return (kvq_attn_rows){(const uint8_t *)rows, sizeof(uint16_t) * (size_t)d, NULL, KVQ_FMT_F16, NULL};
}

/* How far ahead the float kernels prefetch, in tiles of the stream. Two
 * (into L2, see decode_avx512.c) against one: f16 smollm2-135m shapes at
 * depth 32768 38.8 -> 37.7 ms with 2 threads, 66.5 -> 64.6 with one;
 * three gained nothing more. */
#define PREFETCH_TILES 2

/* One task: a chunk of a kv head's tiles, or its f16 rows (j == n_chunks),
 * for every query, into the task's partial. */
static void attend_task(const run_ctx *c, int kvh, int j, int worker) {
    const kvq_kv *kv = c->kv;
    const kvq_kv_layer *L = c->L;
    const int d = c->d, T = c->T;
    float *part = c->part + (size_t)(kvh * c->tasks_per_head + j) * c->n_q * part_floats(c); /* (n_q, G, head_dim + 2) */
    for (int i = 0; i < c->n_q; i++) {
        float *p = part + (size_t)i * part_floats(c);
        for (int g = 0; g < c->G; g++) p[g] = -INFINITY;
        memset(p + c->G, 0, sizeof(float) * ((size_t)c->G + (size_t)c->G * d));
    }
    const kvq_kv_stream *sk = &L->streams[kvh * 2], *sv = &L->streams[kvh * 2 + 1];
    const int n_sunk = kvq_kv_n_sunk(kv, L);
    if (j == c->n_chunks) {
        if (n_sunk) {
            const kvq_attn_rows k = f16_rows(sk->sink, d), v = f16_rows(sv->sink, d);
            attend_rows(c, kvh, KVQ_ROWS_F16, 0, n_sunk, &k, &v, c->qr, part);
        }
        const int n_staged = kvq_kv_n_staged(kv, L);
        if (n_staged) {
            const kvq_attn_rows k = f16_rows(sk->stage, d), v = f16_rows(sv->stage, d);
            attend_rows(c, kvh, KVQ_ROWS_F16, n_sunk + L->n_tiles * T, n_staged, &k, &v, c->qr, part);
        }
        return;
    }
    float *kbuf = c->scratch + (size_t)worker * 2 * T * d; /* (tile_tokens, head_dim) */
    float *vbuf = kbuf + (size_t)T * d;                    /* (tile_tokens, head_dim) */
    const int t_end = c->chunk_start[j + 1];
    for (int t = c->chunk_start[j]; t < t_end; t++) {
        const int pos = n_sunk + t * T;
        if (pos > c->pos0 + c->n_q - 1) break;
        if (c->integer) {
            /* Tiles in pairs where the task has two left (kvq_attn_itiles). */
            const int NT = t + 1 < t_end && 2 * T <= KVQ_KV_MAX_TILE ? 2 : 1;
            kvq_attn_itiles it = c->itiles;
            it.T = T;
            it.NT = NT;
            for (int i = 0; i < NT; i++) {
                const int next = t + NT + i;
                it.k[i] = sk->tiles[t + i];
                it.v[i] = sv->tiles[t + i];
                it.k_next[i] = next < t_end ? sk->tiles[next] : NULL;
                it.v_next[i] = next < t_end ? sv->tiles[next] : NULL;
            }
            attend_itiles(c, kvh, pos, &it, part);
            t += NT - 1;
            continue;
        }
        /* Kernels that read rows in place prefetch the tile PREFETCH_TILES
         * ahead row by row as they compute this one: a burst of prefetches
         * for a whole tile fills the line fill buffers and stalls the core,
         * so memory and compute would not overlap; and a tile of f16 rows at
         * head_dim 64 is 4 KiB, a page, where the hardware prefetchers stop,
         * so they start cold on nearly every tile. */
        const int more = t + PREFETCH_TILES < t_end;
        const uint8_t *k_ahead = more ? sk->tiles[t + PREFETCH_TILES] : NULL;
        const uint8_t *v_ahead = more ? sv->tiles[t + PREFETCH_TILES] : NULL;
        if (c->in_place) {
            const kvq_attn_rows k = {sk->tiles[t], L->codec[0]->row_bytes, c->lut[0], c->fmt[0], k_ahead};
            const kvq_attn_rows v = {sv->tiles[t], L->codec[1]->row_bytes, c->lut[1], c->fmt[1], v_ahead};
            attend_rows(c, kvh, KVQ_ROWS_F32, pos, T, &k, &v, c->qd, part);
            continue;
        }
        const void *k = sk->tiles[t], *v = sv->tiles[t];
        /* Both sides in place where they are rows of one kind; otherwise
         * both as floats (a mixed pair converts its f16 / bf16 side too). */
        const int kind = c->direct[0] >= 0 && c->direct[0] == c->direct[1] ? c->direct[0] : KVQ_ROWS_F32;
        if (kind == KVQ_ROWS_F32) {
            decode_tile(c, 0, k, kbuf);
            decode_tile(c, 1, v, vbuf);
            k = kbuf;
            v = vbuf;
        }
        const int fmt = kind == KVQ_ROWS_F16 ? KVQ_FMT_F16 : kind == KVQ_ROWS_BF16 ? KVQ_FMT_BF16 : KVQ_FMT_F32;
        const size_t stride = (kind == KVQ_ROWS_F32 ? sizeof(float) : sizeof(uint16_t)) * (size_t)d;
        const int in_tile = kind != KVQ_ROWS_F32; /* else the rows are scratch */
        const kvq_attn_rows kr = {k, stride, NULL, fmt, in_tile ? k_ahead : NULL};
        const kvq_attn_rows vr = {v, stride, NULL, fmt, in_tile ? v_ahead : NULL};
        attend_rows(c, kvh, kind, pos, T, &kr, &vr, c->qd, part);
    }
}

/* The integer kernel's name for a side of a layer: an interleavable codec,
 * or f16 V rows beside interleaved K (kv_init's rule). */
static int itile_kind(const kvq_kv_layer *L, int side) {
    const kvq_codec *c = L->codec[side];
    if (!L->interleaved[side]) return KVQ_ITILE_F16;
    if (c->desc->family == &kvq_family_rot) return KVQ_ITILE_ROT2 + ((const kvq_rot_state *)c->state)->bits - 2;
    static const int kind[] = {[KVQ_GGML_Q8_0] = KVQ_ITILE_Q8_0, [KVQ_GGML_Q4_0] = KVQ_ITILE_Q4_0,
                               [KVQ_GGML_Q4_1] = KVQ_ITILE_Q4_1, [KVQ_GGML_Q5_0] = KVQ_ITILE_Q5_0,
                               [KVQ_GGML_Q5_1] = KVQ_ITILE_Q5_1, [KVQ_GGML_IQ4_NL] = KVQ_ITILE_IQ4_NL};
    return kind[c->desc->param];
}

/* The offset K codes of a kind carry (value (c - off) x scale; q4_1 / q5_1
 * codes are the value's steps above the min, no offset). */
static int itile_code_off(int kind) {
    return kind == KVQ_ITILE_Q4_0 ? 8 : kind == KVQ_ITILE_Q5_0 ? 16 : kind == KVQ_ITILE_Q4_1 || kind == KVQ_ITILE_Q5_1 ? 0 : 128;
}

/* The integer kernel's code table of a kind on side (0 K, 1 V)
 * (kvq_attn_itiles.lut), the value of one step of its codes and their
 * largest |code - 128| (0 without a table): iq4_nl's int8 codebook as it
 * is; the rotated codecs' centroids in the steps their codec chose once for
 * that side (kvq_rot_state.step_code). */
static void itile_codes(const kvq_codec *c, int kind, int side, uint8_t codes[256], float *unit, int *code_max) {
    *unit = 1.0f;
    memset(codes, 0, 256);
    if (kind == KVQ_ITILE_IQ4_NL) {
        for (int j = 0; j < 16; j++) codes[j] = (uint8_t)(kvq_iq4nl_values[j] + 128);
    } else if (kind == KVQ_ITILE_ROT3) {
        /* 4 tables of 64 (decode_vnni.c rot3_slot): the index in bits 0-2,
         * 3-5, 2-4, and 2-3 with 5 */
        const kvq_rot_state *st = c->state;
        for (int i = 0; i < 64; i++) {
            codes[i] = st->step_code[side][i & 7];
            codes[64 + i] = st->step_code[side][(i >> 3) & 7];
            codes[128 + i] = st->step_code[side][(i >> 2) & 7];
            codes[192 + i] = st->step_code[side][((i >> 2) & 3) | ((i >> 3) & 4)];
        }
        *unit = st->step[side];
    } else if (kind == KVQ_ITILE_ROT2) {
        /* 3 tables of 64 (decode_vnni.c rot_codes): the index in bits 2k, 2k + 1 */
        const kvq_rot_state *st = c->state;
        for (int k = 0; k < 3; k++)
            for (int i = 0; i < 64; i++) codes[64 * k + i] = st->step_code[side][(i >> 2 * k) & 3];
        *unit = st->step[side];
    } else if (kind == KVQ_ITILE_ROT4) {
        const kvq_rot_state *st = c->state;
        memcpy(codes, st->step_code[side], 16);
        *unit = st->step[side];
    }
    /* every table's first 16 entries hold all its codes */
    *code_max = 0;
    if (kind == KVQ_ITILE_IQ4_NL || (kind >= KVQ_ITILE_ROT2 && kind <= KVQ_ITILE_ROT4))
        for (int j = 0; j < 16; j++) *code_max = abs(codes[j] - 128) > *code_max ? abs(codes[j] - 128) : *code_max;
}

void kvq_attn_itiles_setup(const kvq_kv_layer *L, uint8_t codes[2][256], kvq_attn_itiles *it) {
    memset(it, 0, sizeof(*it));
    it->k_kind = itile_kind(L, 0);
    it->v_kind = itile_kind(L, 1);
    itile_codes(L->codec[0], it->k_kind, 0, codes[0], &it->unit[0], &it->code_max[0]);
    itile_codes(L->codec[1], it->v_kind, 1, codes[1], &it->unit[1], &it->code_max[1]);
    it->lut[0] = codes[0];
    it->lut[1] = codes[1];
}

void kvq_attn_itiles_query(const kvq_attn_kernels *kern, const kvq_attn_itiles *it, const float *qd, int d,
                           kvq_attn_qi8 *out) {
    kern->qi8(qd, d, itile_code_off(it->k_kind), it->k_kind >= KVQ_ITILE_ROT2, out);
}

static size_t pad64(size_t n) { return (n + 63) & ~(size_t)63; }

/* Merges the partials of kv head kvh's tasks (log-sum-exp) into its rows of
 * the output, for every query. */
static void merge_head(const run_ctx *c, int kvh) {
    const kvq_kv *kv = c->kv;
    const kvq_kv_layer *L = c->L;
    const int d = c->d, G = c->G, H = kv->p.n_kv_head, n_head = G * H;
    const kvq_codec *cv = L->codec[1];
    const int v_centered = L->centered[1] && L->n_tiles > 0;
    const int k_centered = L->centered[0] && L->n_tiles > 0;
    for (int i = 0; i < c->n_q; i++) {
        for (int g = 0; g < G; g++) {
            /* Compressed tiles hold k - mu_K, so their scores lack q.mu_K
             * against the f16 rows (sinks, staging): a partial's running
             * max carries the shift, so add it there, once per head. */
            double k_shift = 0;
            if (k_centered) {
                const float *qr = c->qr + ((size_t)i * n_head + (size_t)kvh * G + g) * d;
                const float *mu_k = L->streams[kvh * 2].mean;
                for (int e = 0; e < d; e++) k_shift += (double)qr[e] * mu_k[e];
            }
            double dom[KVQ_MAX_HEAD_DIM], raw[KVQ_MAX_HEAD_DIM]; /* (d): zeroing all 512 cost more than the merge */
            for (int e = 0; e < d; e++) dom[e] = raw[e] = 0.0;
            double mx = -INFINITY, lsum = 0, dom_mass = 0;
            for (int j = 0; j < c->tasks_per_head; j++) {
                const float *p = c->part + ((size_t)(kvh * c->tasks_per_head + j) * c->n_q + i) * part_floats(c);
                const double pm = p[g] + (j == c->n_chunks ? 0.0 : k_shift);
                if (p[G + g] > 0 && pm > mx) mx = pm;
            }
            for (int j = 0; j < c->tasks_per_head; j++) {
                const float *p = c->part + ((size_t)(kvh * c->tasks_per_head + j) * c->n_q + i) * part_floats(c);
                if (!(p[G + g] > 0)) continue;
                const double w = exp((double)p[g] + (j == c->n_chunks ? 0.0 : k_shift) - mx);
                const float *a = p + 2 * G + (size_t)g * d;
                double *dst = j == c->n_chunks ? raw : dom;
                for (int e = 0; e < d; e++) dst[e] += w * a[e];
                lsum += w * p[G + g];
                if (j != c->n_chunks) dom_mass += w * p[G + g];
            }
            float tmp[KVQ_MAX_HEAD_DIM];
            for (int e = 0; e < d; e++) tmp[e] = (float)dom[e];
            if (!cv->qjl) kvq_codec_from_domain(cv, tmp, tmp);
            const float *mu = L->streams[kvh * 2 + 1].mean;
            float *o = c->out + ((size_t)i * n_head + (size_t)kvh * G + g) * d;
            const double inv = lsum > 0 ? 1.0 / lsum : 0.0;
            for (int e = 0; e < d; e++)
                o[e] = (float)((tmp[e] + raw[e] + (v_centered ? mu[e] * dom_mass : 0.0)) * inv);
        }
    }
}

/* The last of a head's tasks to end merges the head, on whichever thread
 * ran it: the merges run beside the other heads' tasks instead of after all
 * of them on the caller (6.4 us a layer at smollm2-135m shapes, 13% of a
 * turbo3 layer at depth 4096). */
static void run_task(int task, int worker, void *arg) {
    const run_ctx *c = arg;
    const int H = c->kv->p.n_kv_head, kvh = task % H, j = task / H; /* chunk-major (chunk_schedule) */
    attend_task(c, kvh, j, worker);
    if (atomic_fetch_sub_explicit(&c->left[kvh], 1, memory_order_acq_rel) == 1) merge_head(c, kvh);
}

kvq_status kvq_attn_run(const kvq_kv *kv, int layer, kvq_threadpool *pool, kvq_isa isa, int pos0, int n_q,
                        int n_head, const float *q, float *out) {
    KVQ_RETURN_IF(!kv || !q || !out, KVQ_ERR_INVALID_ARG, "attention: NULL argument");
    KVQ_RETURN_IF(layer < 0 || layer >= kv->p.n_layer, KVQ_ERR_INVALID_ARG, "attention: layer %d not in [0, %d)",
                  layer, kv->p.n_layer);
    const int H = kv->p.n_kv_head, d = kv->p.head_dim;
    KVQ_RETURN_IF(n_head < H || n_head % H, KVQ_ERR_INVALID_ARG,
                  "attention: n_head %d is not a multiple of n_kv_head %d", n_head, H);
    const kvq_kv_layer *L = &kv->layers[layer];
    KVQ_RETURN_IF(n_q < 1 || pos0 < 0 || pos0 > L->n_tokens - n_q, KVQ_ERR_INVALID_ARG,
                  "attention: queries at %d..%d but layer %d holds %d tokens (append first)", pos0, pos0 + n_q - 1,
                  layer, L->n_tokens);
    KVQ_RETURN_IF(!kvq_isa_supported(isa), KVQ_ERR_UNSUPPORTED, "attention: ISA %s not supported here",
                  kvq_isa_name(isa) ? kvq_isa_name(isa) : "?");

    run_ctx c = {.kv = kv, .L = L, .G = n_head / H, .d = d, .T = kv->p.tile_tokens, .n_q = n_q};
    kvq_attn_kernels_get(isa, &c.kern);
    c.pos0 = pos0;
    c.n_chunks = chunk_schedule(L->n_tiles, c.chunk_start);
    c.tasks_per_head = c.n_chunks + 1;
    /* bf16 rows in place only where no fused kernel reads them (AVX-512's,
     * like its block kernel, reads f32 and f16 rows only): the AVX2 and
     * scalar paths. */
    for (int i = 0; i < 2; i++) {
        const kvq_codec *cd = L->codec[i];
        const int bf16 = !cd->qjl && !cd->mean && cd->desc->family == &kvq_family_plain && cd->desc->param == KVQ_PLAIN_BF16;
        c.direct[i] = kvq_kv_f16_rows(cd) ? KVQ_ROWS_F16 : bf16 && !c.kern.fused ? KVQ_ROWS_BF16 : -1;
    }
    for (int i = 0; i < 2; i++) {
        c.fmt[i] = kvq_attn_rows_fmt(L->codec[i]);
        if (c.fmt[i] >= 0) rows_lut(L->codec[i], c.fmt[i], c.lut[i]);
    }
    /* K is interleaved wherever V is (kv_init), so K's flag says whether the
     * tiles are rows the fused kernel reads. */
    c.in_place = c.kern.fused && c.fmt[0] >= 0 && c.fmt[1] >= 0 && n_q <= FUSED_MAX_QUERIES && !L->interleaved[0];
    /* No compressed tiles yet (the first tile_tokens tokens): nothing for the
     * integer kernel, so no int8 query either. */
    c.integer = c.kern.integer && L->interleaved[0] && n_q <= FUSED_MAX_QUERIES && L->n_tiles > 0;
    if (c.integer) {
        kvq_attn_itiles_setup(L, c.icodes, &c.itiles);
    }
    const int n_workers = kvq_threadpool_size(pool);
    const size_t n_tasks = (size_t)H * c.tasks_per_head;
    const size_t qn = (size_t)n_q * n_head * d;
    /* One block, kept in the store between calls, cut into 64-byte aligned pieces. */
    const size_t qd_bytes = pad64(sizeof(float) * 2 * qn);
    const size_t part_bytes = pad64(sizeof(float) * n_tasks * n_q * part_floats(&c));
    const size_t scratch_bytes = pad64(sizeof(float) * (size_t)n_workers * 2 * c.T * d);
    const size_t qi_bytes = c.integer ? sizeof(kvq_attn_qi8) * (size_t)n_q * n_head : 0;
    const size_t left_bytes = pad64(sizeof(_Atomic int) * (size_t)H);
    kvq_scratch *held = (kvq_scratch *)&kv->attn; /* mutable by design: see kvq_scratch */
    uint8_t *block = kvq_scratch_take(held, qd_bytes + part_bytes + scratch_bytes + left_bytes + qi_bytes);
    KVQ_RETURN_IF(!block, KVQ_ERR_NOMEM, "attention: out of memory");
    float *qd = (float *)(void *)block;
    float *part = (float *)(void *)(block + qd_bytes);
    float *scratch = (float *)(void *)(block + qd_bytes + part_bytes);
    _Atomic int *left = (_Atomic int *)(void *)(block + qd_bytes + part_bytes + scratch_bytes);
    kvq_attn_qi8 *qi = c.integer ? (kvq_attn_qi8 *)(void *)(block + qd_bytes + part_bytes + scratch_bytes + left_bytes) : NULL;
    const float scale = 1.0f / sqrtf((float)d);
    float *qr = qd + qn;
    for (size_t r = 0; r < (size_t)n_q * n_head; r++) {
        for (int e = 0; e < d; e++) qr[r * d + e] = q[r * d + e] * scale;
        if (L->codec[0]->qjl) memcpy(qd + r * d, qr + r * d, sizeof(float) * d);
        else kvq_codec_to_domain(L->codec[0], qr + r * d, qd + r * d);
    }
    for (size_t r = 0; qi && r < (size_t)n_q * n_head; r++)
        kvq_attn_itiles_query(&c.kern, &c.itiles, qd + r * d, d, &qi[r]);
    c.qd = qd;
    c.qr = qr;
    c.qi = qi;
    c.part = part;
    c.scratch = scratch;
    for (int h = 0; h < H; h++) atomic_init(&left[h], c.tasks_per_head);
    c.left = left;
    c.out = out;
    kvq_threadpool_run(pool, (int)n_tasks, run_task, &c);
    kvq_scratch_give(held, block);
    return KVQ_OK;
}

kvq_status kvq_attn_decode(const kvq_kv *kv, int layer, kvq_threadpool *pool, int n_head, const float *q,
                           float *out) {
    KVQ_RETURN_IF(!kv, KVQ_ERR_INVALID_ARG, "kvq_attn_decode: kv is NULL");
    return kvq_attn_run(kv, layer, pool, kvq_isa_default(), kvq_kv_n_tokens(kv, layer) - 1, 1, n_head, q, out);
}
