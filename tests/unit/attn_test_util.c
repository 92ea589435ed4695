/* attn_test_util.c — see attn_test_util.h. */
#include <stdlib.h>

#include "attn_test_util.h"
#include "common/fp16.h"
#include "test.h"

kvq_status kvq_test_fill(kvq_kv *kv, int n, const float *k, const float *v, kvq_threadpool *pool) {
    const size_t tok = (size_t)kv->p.n_kv_head * kv->p.head_dim;
    for (int l = 0; l < kv->p.n_layer; l++)
        for (int t = 0; t < n; t++) {
            const size_t off = ((size_t)l * n + t) * tok;
            KVQ_FORWARD(kvq_kv_append(kv, l, pool, k + off, v + off));
        }
    return KVQ_OK;
}

void kvq_test_kv_data(const kvq_kv_params *p, int n, uint64_t seed, float **k, float **v) {
    const int H = p->n_kv_head, d = p->head_dim;
    const size_t per_layer = (size_t)n * H * d;
    *k = malloc(sizeof(float) * per_layer * p->n_layer + 1);
    *v = malloc(sizeof(float) * per_layer * p->n_layer + 1);
    float *rows = malloc(sizeof(float) * (size_t)n * d + 1); /* (n, head_dim) one head's keys */
    uint64_t s = seed;
    for (int l = 0; l < p->n_layer; l++)
        for (int h = 0; h < H; h++) {
            /* Outlier channels fixed per (layer, head), as in real K caches,
             * plus a constant offset that centering removes. */
            kvq_test_outlier_rows(rows, n, d, seed + 97 * (uint64_t)(l * H + h));
            for (int t = 0; t < n; t++)
                for (int i = 0; i < d; i++) {
                    const size_t o = (size_t)l * per_layer + ((size_t)t * H + h) * d + i;
                    (*k)[o] = rows[(size_t)t * d + i] + (float)(i % 7) * 0.5f;
                    (*v)[o] = kvq_test_normal(&s) + (float)(i % 5) * 0.3f;
                }
        }
    free(rows);
}

void kvq_test_decoded(const kvq_kv *kv, int layer, float *k, float *v) {
    const kvq_kv_layer *L = &kv->layers[layer];
    const int H = kv->p.n_kv_head, d = kv->p.head_dim, T = kv->p.tile_tokens, n = L->n_tokens;
    const int sunk = kvq_kv_n_sunk(kv, L);
    for (int h = 0; h < H; h++)
        for (int kvi = 0; kvi < 2; kvi++) {
            const kvq_kv_stream *st = &L->streams[h * 2 + kvi];
            const kvq_codec *c = L->codec[kvi];
            float *dst = (kvi ? v : k) + (size_t)h * n * d; /* (n_tokens, head_dim) */
            for (int t = 0; t < n; t++) {
                float *y = dst + (size_t)t * d;
                if (t < sunk) {
                    for (int i = 0; i < d; i++) y[i] = kvq_f16_to_f32(st->sink[(size_t)t * d + i]);
                } else if (t < sunk + L->n_tiles * T) {
                    const int tile = (t - sunk) / T, r = (t - sunk) % T;
                    uint8_t row[KVQ_KV_MAX_ILEAVED_ROW];
                    if (L->interleaved[kvi]) kvq_kv_tile_unpack_row(c, kvi, T, st->tiles[tile], r, row);
                    kvq_codec_decode_row(c, L->interleaved[kvi] ? row : st->tiles[tile] + (size_t)r * c->row_bytes, y);
                    if (L->centered[kvi])
                        for (int i = 0; i < d; i++) y[i] += st->mean[i];
                } else {
                    const int r = t - sunk - L->n_tiles * T;
                    for (int i = 0; i < d; i++) y[i] = kvq_f16_to_f32(st->stage[(size_t)r * d + i]);
                }
            }
        }
}
