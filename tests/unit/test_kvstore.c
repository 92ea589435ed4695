/* test_kvstore.c — the KV store (tiles, staging, sinks, centering, policy,
 * truncate, byte accounting), the thread pool and the float64 reference. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "attn/attn_ref.h"
#include "attn_test_util.h"
#include "common/rng.h"
#include "common/threadpool.h"
#include "kv/kv_session.h"
#include "test.h"

static kvq_kv_params small_params(const char *codec) {
    kvq_kv_params p;
    kvq_kv_params_default(&p);
    p.n_layer = 2;
    p.n_kv_head = 2;
    p.head_dim = 64;
    p.ctk = p.ctv = codec;
    p.n_sinks = 3;
    p.seed = 5;
    return p;
}

/* 1 if two stores hold the same live data (tiles, staging, sinks, means). */
static int same_state(const kvq_kv *a, const kvq_kv *b) {
    const int H = a->p.n_kv_head, d = a->p.head_dim, T = a->p.tile_tokens;
    for (int l = 0; l < a->p.n_layer; l++) {
        const kvq_kv_layer *la = &a->layers[l], *lb = &b->layers[l];
        if (la->n_tokens != lb->n_tokens || la->n_tiles != lb->n_tiles || la->has_mean != lb->has_mean) return 0;
        const size_t sunk = (size_t)kvq_kv_n_sunk(a, la), staged = (size_t)kvq_kv_n_staged(a, la);
        for (int s = 0; s < 2 * H; s++) {
            const kvq_kv_stream *sa = &la->streams[s], *sb = &lb->streams[s];
            const size_t rb = la->codec[s & 1]->row_bytes;
            for (int t = 0; t < la->n_tiles; t++)
                if (memcmp(sa->tiles[t], sb->tiles[t], rb * T)) return 0;
            if (memcmp(sa->stage, sb->stage, staged * d * 2) || (sunk && memcmp(sa->sink, sb->sink, sunk * d * 2)))
                return 0;
            if (la->has_mean && la->centered[s & 1] && memcmp(sa->mean, sb->mean, sizeof(float) * d)) return 0;
        }
    }
    return 1;
}

/* Cuts in the sinks, on tile boundaries, inside staging: re-appending the
 * same tokens rebuilds the same store, for every codec. Plain codecs decode
 * exactly, so for them any cut (also inside a compressed tile) works. */
TEST(kvstore_truncate_then_reappend_equals_never_appended) {
    const int n = 150;
    for (int ci = 0; ci < kvq_codec_count(); ci++) {
        kvq_kv_params p = small_params(kvq_codec_name_at(ci));
        float *k, *v;
        kvq_test_kv_data(&p, n, 77, &k, &v);
        kvq_kv *full = NULL;
        CHECK_OK(kvq_kv_create(&p, &full));
        CHECK_OK(kvq_test_fill(full, n, k, v, NULL));
        kvq_codec *c = full->layers[0].codec[0];
        const int plain = !kvq_codec_is_quantized(c);
        static const int cuts[] = {0, 2, 3, 35, 67, 130, 140, 149, 150, 20, 50, 100};
        for (size_t i = 0; i < KVQ_ARRAY_LEN(cuts); i++) {
            const int cut = cuts[i];
            const int in_tile = cut > 3 && (cut - 3) % 32 != 0 && cut < 3 + 4 * 32;
            if (in_tile && !plain) continue;
            kvq_kv *kv = NULL;
            CHECK_OK(kvq_kv_create(&p, &kv));
            CHECK_OK(kvq_test_fill(kv, n, k, v, NULL));
            CHECK_OK(kvq_kv_truncate(kv, cut));
            CHECK(kvq_kv_n_tokens(kv, 1) == cut);
            const size_t tok = (size_t)p.n_kv_head * p.head_dim;
            for (int l = 0; l < p.n_layer; l++)
                for (int t = cut; t < n; t++)
                    CHECK_OK(kvq_kv_append(kv, l, NULL, k + ((size_t)l * n + t) * tok, v + ((size_t)l * n + t) * tok));
            CHECKF(same_state(kv, full), "%s: cut at %d then re-append differs", kvq_codec_name(c), cut);
            CHECK(kvq_kv_bytes_used(kv) == kvq_kv_bytes_used(full));
            kvq_kv_free(kv);
        }
        kvq_kv_free(full);
        free(k);
        free(v);
    }
}

/* A flush over a thread pool (its K and V streams encoded in parallel)
 * builds the same store as one on the calling thread, for every codec in
 * both tile layouts. */
TEST(kvstore_append_over_a_pool_equals_inline) {
    const int n = 150;
    kvq_threadpool *pool = NULL;
    CHECK_OK(kvq_threadpool_create(3, &pool));
    for (int ci = 0; ci < kvq_codec_count() && !kvq_test_failed(); ci++)
        for (int layout = KVQ_TILES_ROWS; layout <= KVQ_TILES_INTERLEAVED; layout++) {
            kvq_kv_params p = small_params(kvq_codec_name_at(ci));
            p.tile_layout = layout;
            float *k, *v;
            kvq_test_kv_data(&p, n, 79, &k, &v);
            kvq_kv *a = NULL, *b = NULL;
            CHECK_OK(kvq_kv_create(&p, &a));
            CHECK_OK(kvq_kv_create(&p, &b));
            CHECK_OK(kvq_test_fill(a, n, k, v, NULL));
            CHECK_OK(kvq_test_fill(b, n, k, v, pool));
            CHECK(a->layers[0].n_tiles == 4);
            CHECKF(same_state(a, b), "%s, layout %d: the pool's flush differs", kvq_codec_name_at(ci), layout);
            kvq_kv_free(a);
            kvq_kv_free(b);
            free(k);
            free(v);
        }
    kvq_threadpool_free(pool);
}

/* kvq_kv_read gives every position as the decoded cache does (sinks, tiles
 * with their mean, staging), and a store copied through it row by row holds
 * the same state. */
TEST(kvstore_read_matches_decoded_cache) {
    const int n = 150;
    for (int ci = 0; ci < kvq_codec_count(); ci++) {
        kvq_kv_params p = small_params(kvq_codec_name_at(ci));
        float *k, *v;
        kvq_test_kv_data(&p, n, 78, &k, &v);
        kvq_kv *kv = NULL, *copy = NULL;
        CHECK_OK(kvq_kv_create(&p, &kv));
        CHECK_OK(kvq_kv_create(&p, &copy));
        CHECK_OK(kvq_test_fill(kv, n, k, v, NULL));
        const int H = p.n_kv_head, d = p.head_dim;
        float *kd = malloc(sizeof(float) * (size_t)H * n * d), *vd = malloc(sizeof(float) * (size_t)H * n * d);
        float *kr = malloc(sizeof(float) * (size_t)H * d), *vr = malloc(sizeof(float) * (size_t)H * d);
        for (int l = 0; l < p.n_layer && !kvq_test_failed(); l++) {
            kvq_test_decoded(kv, l, kd, vd);
            for (int t = 0; t < n; t++) {
                CHECK_OK(kvq_kv_read(kv, l, t, kr, vr));
                for (int h = 0; h < H; h++)
                    CHECKF(!memcmp(kr + (size_t)h * d, kd + ((size_t)h * n + t) * d, sizeof(float) * d) &&
                               !memcmp(vr + (size_t)h * d, vd + ((size_t)h * n + t) * d, sizeof(float) * d),
                           "%s layer %d pos %d head %d: read differs from the decoded cache", kvq_codec_name_at(ci),
                           l, t, h);
                CHECK_OK(kvq_kv_append(copy, l, NULL, kr, vr));
            }
        }
        /* Decoded rows re-encode to themselves for the plain codecs. */
        if (!kvq_codec_is_quantized(kv->layers[0].codec[0]))
            CHECKF(same_state(copy, kv), "%s: a copy through kvq_kv_read differs", kvq_codec_name_at(ci));
        CHECK(kvq_kv_read(kv, 0, n, kr, vr) == KVQ_ERR_INVALID_ARG);
        CHECK(kvq_kv_read(kv, -1, 0, kr, vr) == KVQ_ERR_INVALID_ARG);
        free(kd);
        free(vd);
        free(kr);
        free(vr);
        free(k);
        free(v);
        kvq_kv_free(kv);
        kvq_kv_free(copy);
        if (kvq_test_failed()) return;
    }
}

/* Bytes used = compressed rows + f16 sink and staging rows + means, exactly. */
TEST(kvstore_byte_accounting_is_exact) {
    for (int ci = 0; ci < kvq_codec_count(); ci++) {
        kvq_kv_params p = small_params(kvq_codec_name_at(ci));
        p.n_layer = 3;
        p.boundary_layers = 1;
        float *k, *v;
        const int n = 100;
        kvq_test_kv_data(&p, n, 3, &k, &v);
        kvq_kv *kv = NULL;
        CHECK_OK(kvq_kv_create(&p, &kv));
        CHECK(kvq_kv_bytes_used(kv) == 0 && kvq_kv_bytes_f16(kv) == 0);
        for (int t = 1; t <= n; t++) {
            const size_t tok = (size_t)p.n_kv_head * p.head_dim;
            for (int l = 0; l < p.n_layer; l++)
                CHECK_OK(kvq_kv_append(kv, l, NULL, k + ((size_t)l * n + t - 1) * tok, v + ((size_t)l * n + t - 1) * tok));
            const size_t H = 2, d = 64, T = 32;
            const size_t sunk = t < 3 ? (size_t)t : 3, tiles = ((size_t)t - sunk) / T;
            const size_t staged = (size_t)t - sunk - tiles * T;
            size_t want = 0;
            for (int l = 0; l < p.n_layer; l++) {
                const kvq_kv_layer *L = &kv->layers[l];
                const size_t rb = L->codec[0]->row_bytes + L->codec[1]->row_bytes;
                want += H * tiles * T * rb + H * 2 * (sunk + staged) * d * 2;
                if (tiles) want += H * (size_t)(L->centered[0] + L->centered[1]) * d * 4;
            }
            CHECKF(kvq_kv_bytes_used(kv) == want, "%s t=%d: %zu bytes, want %zu", p.ctk, t, kvq_kv_bytes_used(kv),
                   want);
            CHECK(kvq_kv_bytes_f16(kv) == (size_t)p.n_layer * t * H * d * 4);
            CHECKF(kvq_kv_n_f16_tokens(kv) == (int)(sunk + staged), "%s t=%d: %d f16 tokens, want %zu", p.ctk, t,
                   kvq_kv_n_f16_tokens(kv), sunk + staged);
        }
        kvq_kv_free(kv);
        free(k);
        free(v);
    }
}

/* Boundary layers take q8_0 (f16 while this build has no q8_0); the middle
 * layer keeps the chosen codec; centering applies to quantized codecs only;
 * no tile exists before the first one fills. */
TEST(kvstore_policy_boundary_centering_and_lazy_tiles) {
    kvq_kv_params p = small_params("bf16");
    p.n_layer = 3;
    p.boundary_layers = 1;
    kvq_kv *kv = NULL;
    CHECK_OK(kvq_kv_create(&p, &kv));
    const char *bname = kvq_codec_desc_find("q8_0") ? "q8_0" : "f16";
    CHECK(!strcmp(kvq_codec_name(kv->layers[0].codec[0]), bname));
    CHECK(!strcmp(kvq_codec_name(kv->layers[2].codec[1]), bname));
    CHECK(!strcmp(kvq_codec_name(kv->layers[1].codec[0]), "bf16"));
    CHECK(kv->layers[1].centered[0] == 0);
    CHECK(kv->layers[1].n_tiles == 0 && kv->layers[1].streams[0].n_segs == 0);
    kvq_kv_free(kv);
}

TEST(kvstore_rejects_bad_input) {
    kvq_kv_params p = small_params("nope");
    kvq_kv *kv = NULL;
    CHECK(kvq_kv_create(&p, &kv) == KVQ_ERR_INVALID_ARG && kv == NULL);
    p = small_params("f16");
    p.head_dim = 48;
    CHECK(kvq_kv_create(&p, &kv) == KVQ_ERR_INVALID_ARG);
    p = small_params("f16");
    p.tile_tokens = 300;
    CHECK(kvq_kv_create(&p, &kv) == KVQ_ERR_INVALID_ARG);
    p = small_params("f16");
    CHECK_OK(kvq_kv_create(&p, &kv));
    float x[2 * 64] = {0};
    CHECK(kvq_kv_append(kv, 2, NULL, x, x) == KVQ_ERR_INVALID_ARG);
    CHECK(kvq_kv_truncate(kv, -1) == KVQ_ERR_INVALID_ARG);
    kvq_kv_free(kv);
    for (int ci = 0; ci < kvq_codec_count(); ci++) {
        p = small_params(kvq_codec_name_at(ci));
        CHECK_OK(kvq_kv_create(&p, &kv));
        if (kvq_codec_is_quantized(kv->layers[0].codec[0])) {
            x[5] = NAN;
            CHECK(kvq_kv_append(kv, 0, NULL, x, x) == KVQ_ERR_NONFINITE);
            x[5] = 1e6f;
            CHECK(kvq_kv_append(kv, 0, NULL, x, x) == KVQ_ERR_RANGE);
            x[5] = 0;
            x[2 * 64 - 1] = -INFINITY; /* the last value of the last head */
            CHECK(kvq_kv_append(kv, 0, NULL, x, x) == KVQ_ERR_NONFINITE);
            x[3] = 70000.0f; /* the first offender names the error */
            CHECK(kvq_kv_append(kv, 0, NULL, x, x) == KVQ_ERR_RANGE);
            x[3] = 65504.0f; /* f16's largest value is accepted */
            x[2 * 64 - 1] = 0;
            CHECK_OK(kvq_kv_append(kv, 0, NULL, x, x));
            CHECK_OK(kvq_kv_truncate(kv, 0));
            CHECK(kvq_kv_n_tokens(kv, 0) == 0);
            x[3] = 0;
        }
        kvq_kv_free(kv);
    }
}

/* ---------------------------------------------------------- thread pool */

typedef struct {
    _Atomic int hits[1000];
    _Atomic int bad_worker;
    int n_threads;
} pool_probe;

static void probe_task(int task, int worker, void *arg) {
    pool_probe *pp = arg;
    atomic_fetch_add(&pp->hits[task], 1);
    if (worker < 0 || worker >= pp->n_threads) atomic_store(&pp->bad_worker, 1);
}

TEST(threadpool_runs_every_task_once) {
    for (int nt = 1; nt <= 3; nt++) {
        kvq_threadpool *pool = NULL;
        CHECK_OK(kvq_threadpool_create(nt, &pool));
        CHECK(kvq_threadpool_size(pool) == nt);
        pool_probe *pp = calloc(1, sizeof *pp);
        pp->n_threads = nt;
        for (int rep = 0; rep < 200; rep++) kvq_threadpool_run(pool, 1 + rep % 1000 * 5 % 997, probe_task, pp);
        for (int t = 0; t < 1000; t++) {
            int want = 0;
            for (int rep = 0; rep < 200; rep++) want += t < 1 + rep % 1000 * 5 % 997;
            CHECKF(atomic_load(&pp->hits[t]) == want, "threads %d task %d ran %d times, want %d", nt, t,
                   atomic_load(&pp->hits[t]), want);
        }
        CHECK(!atomic_load(&pp->bad_worker));
        free(pp);
        kvq_threadpool_free(pool);
    }
    kvq_threadpool *pool = NULL;
    CHECK(kvq_threadpool_create(0, &pool) == KVQ_ERR_INVALID_ARG && pool == NULL);
}

/* --------------------------------------------------- float64 reference */

TEST(attn_ref_hand_computed_cases) {
    /* One token: the output is its value row. */
    const float q1[2] = {1, 2}, k1[2] = {3, -1}, v1[2] = {0.5f, -4};
    double out[8]; /* (4 heads, head_dim 2) at most */
    kvq_attn_ref(1, 1, 2, 1, 1.0, q1, k1, v1, out);
    CHECK(out[0] == 0.5 && out[1] == -4);
    /* Two tokens, scores 0 and ln 3 (scale 1): weights 1/4 and 3/4. */
    const float q2[2] = {1, 0}, k2[4] = {0, 5, (float)log(3.0), 7}, v2[4] = {4, 8, 0, -4};
    kvq_attn_ref(1, 1, 2, 2, 1.0, q2, k2, v2, out);
    CHECKF(fabs(out[0] - 1.0) < 1e-7 && fabs(out[1] - (-1.0)) < 1e-7, "got %g %g", out[0], out[1]);
    /* Grouped heads: 2 query heads share kv head 0, the 3rd and 4th kv head 1. */
    const float q4[4 * 2] = {1, 0, 0, 1, 1, 0, 0, 1};
    const float k4[2 * 2 * 2] = {0, 0, 0, 0, 0, 0, 0, 0}, v4[2 * 2 * 2] = {1, 2, 3, 4, 10, 20, 30, 40};
    kvq_attn_ref(4, 2, 2, 2, 1.0, q4, k4, v4, out);
    CHECK(out[0] == 2 && out[1] == 3);
    double out4[8];
    kvq_attn_ref(4, 2, 2, 2, 1.0, q4, k4, v4, out4);
    CHECK(out4[4] == 20 && out4[5] == 30 && out4[6] == 20 && out4[7] == 30);
}

/* Against the direct formula: weights exp(s) / sum exp(s), no max shift
 * (safe here: small scores), computed with long double. */
TEST(attn_ref_matches_direct_two_pass_formula) {
    const int n_head = 6, H = 2, d = 32, n = 50;
    uint64_t s = 1;
    float *q = malloc(sizeof(float) * n_head * d), *k = malloc(sizeof(float) * H * n * d),
          *v = malloc(sizeof(float) * H * n * d);
    for (int i = 0; i < n_head * d; i++) q[i] = kvq_test_normal(&s);
    for (int i = 0; i < H * n * d; i++) k[i] = kvq_test_normal(&s), v[i] = kvq_test_normal(&s);
    double out[6 * 32];
    const double scale = 0.125;
    kvq_attn_ref(n_head, H, d, n, scale, q, k, v, out);
    for (int h = 0; h < n_head; h++) {
        const int kvh = h / (n_head / H);
        long double w[50], sum = 0;
        for (int t = 0; t < n; t++) {
            long double dot = 0;
            for (int i = 0; i < d; i++) dot += (long double)q[h * d + i] * k[(kvh * n + t) * d + i];
            w[t] = expl(dot * scale);
            sum += w[t];
        }
        for (int i = 0; i < d; i++) {
            long double o = 0;
            for (int t = 0; t < n; t++) o += w[t] / sum * v[(kvh * n + t) * d + i];
            CHECKF(fabsl(o - out[h * d + i]) < 1e-12L, "head %d ch %d: %Lg vs %g", h, i, o, out[h * d + i]);
        }
    }
    free(q);
    free(k);
    free(v);
}

/* The interleaved layouts (q4_0, q8_0, iq4_nl, q4_1, q5_0, q5_1 and the
 * rotated codecs of 2, 3 and 4 bits; K and V sides; head_dim 32..512;
 * several T): every row comes
 * back bit-exact from a packed tile, the tile decodes to the same
 * attention-domain floats as its rows, and a few values sit where
 * tile_layout.c's header says (formulas written out here, apart from
 * tile_layout.c's). */
TEST(kvstore_interleaved_tiles_round_trip_and_match_the_documented_layout) {
    static const char *const names[] = {"q4_0", "q8_0", "iq4_nl", "q4_1", "q5_0", "q5_1",
                                        "turbo2", "iso3", "rotor4", "turbo3"};
    static const int dims[] = {32, 64, 128, 256, 512}, tiles[] = {16, 32, 48, 256};
    uint64_t s = 11;
    for (size_t ci = 0; ci < KVQ_ARRAY_LEN(names); ci++)
        for (size_t di = 0; di < KVQ_ARRAY_LEN(dims); di++) {
            kvq_codec *c = NULL;
            CHECK_OK(kvq_codec_create(names[ci], dims[di], 0, &c));
            const int rot = c->desc->family == &kvq_family_rot, bits = rot ? c->desc->param : 0, d = dims[di];
            if (!kvq_kv_interleavable(c)) {
                CHECKF(rot && bits < 4 && d % 64, "%s d=%d: not interleavable", names[ci], d);
                kvq_codec_free(c);
                continue;
            }
            const size_t rb = c->row_bytes;
            const int q8 = ci == 1, nb = d / 32, bb = rot ? 0 : (int)rb / nb; /* ggml block bytes */
            const int kind = rot ? -1 : c->desc->param;
            const int q5 = kind == KVQ_GGML_Q5_0 || kind == KVQ_GGML_Q5_1;
            const int with_min = kind == KVQ_GGML_Q4_1 || kind == KVQ_GGML_Q5_1;
            for (size_t ti = 0; ti < KVQ_ARRAY_LEN(tiles); ti++) {
                const int T = tiles[ti];
                uint8_t *rows = malloc((size_t)T * rb), *tile = malloc((size_t)T * rb), *back = malloc(rb);
                float *y = malloc(sizeof(float) * (size_t)T * d), *yr = malloc(sizeof(float) * (size_t)T * d);
                float *ysimd = malloc(sizeof(float) * (size_t)T * d);
                for (size_t i = 0; i < (size_t)T * rb; i++) rows[i] = (uint8_t)kvq_splitmix64(&s);
                /* Finite scales: NaN payloads need not survive every path. */
                for (int r = 0; r < T; r++)
                    for (int b = 0; b < (rot ? 1 : nb); b++) {
                        rows[(size_t)r * rb + bb * b + 1] &= 0x3B;
                        if (with_min) rows[(size_t)r * rb + bb * b + 3] &= 0x3B;
                    }
                c->decode_tile_domain(c, rows, T, yr);
                for (int side = 0; side < 2; side++) {
                    memset(tile, 0xEE, (size_t)T * rb);
                    kvq_kv_tile_pack(c, side, T, rows, tile);
                    kvq_kv_tile_decode(c, side, T, tile, y);
#if KVQ_HAVE_X86
                    if (kvq_isa_supported(KVQ_ISA_AVX512)) {
                        uint8_t *simd = malloc((size_t)T * rb);
                        memset(simd, 0x11, (size_t)T * rb);
                        kvq_kv_tile_pack_avx512(c, side, T, rows, simd);
                        for (size_t i = 0; i < (size_t)T * rb; i++)
                            CHECKF(simd[i] == tile[i], "%s d=%d T=%d side %d: AVX-512 pack differs at byte %zu",
                                   names[ci], d, T, side, i);
                        free(simd);
                        kvq_kv_tile_decode_avx512(c, side, T, tile, ysimd);
                        for (size_t i = 0; i < (size_t)T * d; i++)
                            CHECKF(!memcmp(&y[i], &ysimd[i], sizeof(float)),
                                   "%s d=%d T=%d side %d: AVX-512 tile decode differs at row %zu dim %zu: %g vs %g",
                                   names[ci], d, T, side, i / d, i % d, ysimd[i], y[i]);
                    }
                    if (kvq_isa_supported(KVQ_ISA_AVX2)) {
                        memset(ysimd, 0x11, sizeof(float) * (size_t)T * d);
                        kvq_kv_tile_decode_avx2(c, side, T, tile, ysimd);
                        for (size_t i = 0; i < (size_t)T * d; i++)
                            CHECKF(!memcmp(&y[i], &ysimd[i], sizeof(float)),
                                   "%s d=%d T=%d side %d: AVX2 tile decode differs at row %zu dim %zu: %g vs %g",
                                   names[ci], d, T, side, i / d, i % d, ysimd[i], y[i]);
                    }
#endif
                    for (int r = 0; r < T; r++) {
                        kvq_kv_tile_unpack_row(c, side, T, tile, r, back);
                        CHECKF(!memcmp(back, rows + (size_t)r * rb, rb), "%s d=%d T=%d side %d: row %d differs",
                               names[ci], d, T, side, r);
                        CHECKF(!memcmp(yr + (size_t)r * d, y + (size_t)r * d, sizeof(float) * d),
                               "%s d=%d T=%d side %d: tile decode of row %d differs from the row's", names[ci], d,
                               T, side, r);
                    }
                    /* Spot checks: the last row's last value and (block) scale. */
                    const int r = T - 1, i = d - 1, b = nb - 1;
                    const uint8_t *row = rows + (size_t)r * rb;
                    size_t at, sat;
                    int got, code;
                    if (rot) {
                        /* Index d - 1: the top bits of the row's last byte. */
                        code = row[rb - 1] >> (8 - bits);
                        if (side == 0) {
                            const size_t grp = (size_t)(r / 16) * 16 * rb;
                            const int t = r % 16; /* dims 4k + j: j = 3 */
                            if (bits == 4) {
                                at = grp + 64 * (size_t)(d / 8 - 1) + 4 * t + 3;
                                got = tile[at] >> 4;
                            } else if (bits == 2) {
                                at = grp + 64 * (size_t)(d / 16 - 1) + 4 * t + 3;
                                got = tile[at] >> 6;
                            } else { /* block c = d / 32 - 1, slot 7: low bits 6-7 of vector 3c + 1, bit 7 of 3c + 2 */
                                at = grp + 64 * (size_t)(3 * (d / 32 - 1) + 1) + 4 * t + 3;
                                got = (tile[at] >> 6) | (tile[grp + 64 * (size_t)(3 * (d / 32 - 1) + 2) + 4 * t + 3] >> 7) << 2;
                            }
                            sat = grp + 2 * (size_t)d * bits + 2 * t;
                        } else {
                            const int j = r / 4, l = 15, ti4 = r % 4; /* dim d - 1 = 64c + 16 x 3 + 15 */
                            if (bits == 4) {
                                at = 64 * ((size_t)j * nb + b) + 4 * l + ti4;
                                got = tile[at] >> 4;
                            } else if (bits == 2) {
                                at = 64 * ((size_t)j * (d / 64) + d / 64 - 1) + 4 * l + ti4;
                                got = tile[at] >> 6;
                            } else {
                                const size_t v = 3 * ((size_t)(r / 8) * (d / 64) + d / 64 - 1);
                                /* slot 4h + 3 of quad h = 1 (T is a multiple of 16): slot 7, as K's */
                                CHECK((r / 4) % 2 == 1);
                                at = 64 * (v + 1) + 4 * l + ti4;
                                got = (tile[at] >> 6) | (tile[64 * (v + 2) + 4 * l + ti4] >> 7) << 2;
                            }
                            sat = (size_t)T * d * bits / 8 + 2 * (size_t)r;
                        }
                    } else {
                        /* Value 31 of the last block: q8_0's last byte, else the high nibble of
                         * the last code byte, and for q5 bit 31 of qh (the 4 bytes before the codes). */
                        const int cb = q8 ? 32 : 16, hb = q5 ? 4 : 0;
                        code = q8 ? row[bb * b + bb - 1] : row[bb * b + bb - 1] >> 4;
                        if (q5) code |= (row[bb * b + bb - 17] >> 7) << 4;
                        if (side == 0) {
                            const size_t grp = (size_t)(r / 16) * 16 * rb;
                            const int t = r % 16;
                            at = q8 ? grp + 64 * (size_t)(8 * b + 7) + 4 * t + 3 : grp + 64 * (size_t)(4 * b + 3) + 4 * t + 3;
                            got = q8 ? tile[at] ^ 0x80 : tile[at] >> 4;
                            /* fifth bits: byte 4t + j bit k of the block's vector: dim 4k + j */
                            if (q5) got |= (tile[grp + 16 * (size_t)nb * cb + 64 * (size_t)b + 4 * t + 3] >> 7) << 4;
                            sat = grp + 16 * (size_t)nb * (cb + hb) + 32 * (size_t)b + 2 * t;
                        } else {
                            const int j = r / 4, l = 15;
                            at = q8 ? 64 * ((size_t)j * 2 * nb + (size_t)i / 16) + 4 * l + r % 4
                                    : 64 * ((size_t)j * nb + b) + 4 * l + r % 4;
                            got = q8 ? tile[at] : tile[at] >> 4;
                            /* fifth bits: per 16 tokens, byte 4l + i bit 2 (j % 4) + 1: dim 16 + l */
                            if (q5)
                                got |= ((tile[(size_t)T * nb * cb + 64 * ((size_t)(r / 16) * nb + b) + 4 * l + r % 4] >>
                                         (2 * (j % 4) + 1)) & 1) << 4;
                            sat = (size_t)T * nb * (cb + hb) + 2 * ((size_t)b * T + r);
                        }
                    }
                    CHECKF(got == code, "%s d=%d T=%d side %d: last code %d at byte %zu, want %d", names[ci], d, T,
                           side, got, at, code);
                    CHECKF(!memcmp(tile + sat, row + (rot ? 0 : bb * b), 2),
                           "%s d=%d T=%d side %d: scale misplaced", names[ci], d, T, side);
                    /* m after every block's d: K 32 nb bytes on in the group, V 2 nb T. */
                    if (with_min)
                        CHECKF(!memcmp(tile + sat + (side == 0 ? 32 * (size_t)nb : 2 * (size_t)nb * T), row + bb * b + 2, 2),
                               "%s d=%d T=%d side %d: min misplaced", names[ci], d, T, side);
                }
                free(rows);
                free(tile);
                free(back);
                free(y);
                free(yr);
                free(ysimd);
            }
            kvq_codec_free(c);
            if (kvq_test_failed()) return;
        }
}

/* 1 if every position of a layer reads the same from two stores. */
static int same_reads(const kvq_kv *a, const kvq_kv *b, int layer) {
    const size_t n = (size_t)a->p.n_kv_head * a->p.head_dim;
    float *ka = malloc(sizeof(float) * 4 * n), *va = ka + n, *kb = va + n, *vb = kb + n;
    int same = kvq_kv_n_tokens(a, layer) == kvq_kv_n_tokens(b, layer);
    for (int t = 0; same && t < kvq_kv_n_tokens(a, layer); t++)
        same = kvq_kv_read(a, layer, t, ka, va) == KVQ_OK && kvq_kv_read(b, layer, t, kb, vb) == KVQ_OK &&
               !memcmp(ka, kb, sizeof(float) * 2 * n);
    free(ka);
    return same;
}

/* A store with interleaved tiles holds what a row store holds: the same
 * positions through kvq_kv_read, and the same session bytes. Mixed layers
 * (K interleaved over f16 V rows) too. */
TEST(kvstore_interleaved_layout_reads_and_saves_like_rows) {
    static const struct {
        const char *k, *v;
        int il_k, il_v; /* the layer's interleaved[] when asked for the layout */
    } pairs[] = {{"q4_0", "q4_0", 1, 1},   {"q8_0", "q8_0", 1, 1},     {"q8_0", "q4_0", 1, 1},
                 {"q4_0", "q8_0", 1, 1},   {"iq4_nl", "q8_0", 1, 1},   {"q4_0", "turbo3", 1, 1},
                 {"rotor4", "turbo2", 1, 1}, {"iso3", "iso3", 1, 1},   {"q4_1", "q5_0", 1, 1},
                 {"q5_1", "q4_0", 1, 1},   {"iso3", "f16", 1, 0},      {"rotor4", "f16", 1, 0},
                 {"q8_0", "f16", 1, 0},    {"q5_0", "f16", 1, 0},      {"f16", "f16", 0, 0},
                 {"f16", "q8_0", 0, 0},    {"iso3", "bf16", 0, 0}};
    const int n = 150;
    for (size_t k = 0; k < KVQ_ARRAY_LEN(pairs); k++) {
        kvq_kv_params p = small_params(pairs[k].k);
        p.ctv = pairs[k].v;
        float *kx, *vx;
        kvq_test_kv_data(&p, n, 31, &kx, &vx);
        kvq_kv *a = NULL, *b = NULL;
        p.tile_layout = KVQ_TILES_ROWS;
        CHECK_OK(kvq_kv_create(&p, &a));
        p.tile_layout = KVQ_TILES_INTERLEAVED;
        CHECK_OK(kvq_kv_create(&p, &b));
        CHECK(!a->layers[0].interleaved[0] && !a->layers[0].interleaved[1]);
        /* K where both codecs can, or over f16 V: f16 K or bf16 V stay rows. */
        CHECKF(b->layers[0].interleaved[0] == pairs[k].il_k && b->layers[0].interleaved[1] == pairs[k].il_v,
               "%s/%s: interleaved %d %d", pairs[k].k, pairs[k].v, b->layers[0].interleaved[0],
               b->layers[0].interleaved[1]);
        CHECK_OK(kvq_test_fill(a, n, kx, vx, NULL));
        CHECK_OK(kvq_test_fill(b, n, kx, vx, NULL));
        for (int l = 0; l < p.n_layer; l++)
            CHECKF(same_reads(a, b, l), "%s/%s layer %d: the layouts read differently", pairs[k].k, pairs[k].v, l);
        /* Session files hold rows: the same bytes from either layout, and a
         * rows file loads into an interleaved store. */
        kvq_session_fp fp = {.arch = "test", .n_layer = (uint32_t)p.n_layer, .n_vocab = 10};
        int32_t *toks = calloc(n, sizeof *toks);
        FILE *fa = tmpfile(), *fb = tmpfile();
        CHECK(fa && fb);
        CHECK_OK(kvq_kv_session_write(fa, &fp, a, toks, n));
        CHECK_OK(kvq_kv_session_write(fb, &fp, b, toks, n));
        CHECK(fseek(fa, 0, SEEK_END) == 0 && fseek(fb, 0, SEEK_END) == 0);
        const long size = ftell(fa);
        CHECK(size > 0 && size == ftell(fb));
        uint8_t *da = malloc((size_t)size), *db = malloc((size_t)size);
        rewind(fa);
        rewind(fb);
        CHECK(fread(da, 1, (size_t)size, fa) == (size_t)size && fread(db, 1, (size_t)size, fb) == (size_t)size);
        CHECKF(!memcmp(da, db, (size_t)size), "%s/%s: session bytes depend on the tile layout", pairs[k].k,
               pairs[k].v);
        kvq_kv *loaded = NULL;
        int32_t *ltoks = NULL;
        int n_loaded = 0;
        CHECK_OK(kvq_kv_session_parse(da, (size_t)size, &fp, &b->p, n, &loaded, &ltoks, &n_loaded));
        if (loaded)
            CHECKF(same_reads(b, loaded, 0), "%s/%s: the loaded store reads differently", pairs[k].k, pairs[k].v);
        kvq_kv_free(loaded);
        free(ltoks);
        free(da);
        free(db);
        free(toks);
        fclose(fa);
        fclose(fb);
        /* Truncating inside a tile unpacks it the same way. */
        CHECK_OK(kvq_kv_truncate(a, 77));
        CHECK_OK(kvq_kv_truncate(b, 77));
        CHECKF(same_reads(a, b, 1), "%s/%s: the layouts read differently after a truncate", pairs[k].k, pairs[k].v);
        free(kx);
        free(vx);
        kvq_kv_free(a);
        kvq_kv_free(b);
        if (kvq_test_failed()) return;
    }
}

/* kvq_alloc_aligned: 64-byte aligned and writable on both sides of its
 * mmap threshold; 0 and overflowing sizes give NULL; NULL frees. */
TEST(alloc_aligned_small_large_and_refused) {
    static const size_t sizes[] = {1, 100, (256 << 10) - 64 - 63, (256 << 10) - 64, 256 << 10, 10u << 20};
    for (size_t i = 0; i < KVQ_ARRAY_LEN(sizes); i++) {
        unsigned char *p = kvq_alloc_aligned(sizes[i]);
        CHECKF(p && ((uintptr_t)p & 63) == 0, "size %zu: %p", sizes[i], (void *)p);
        if (p) memset(p, 0xA5, sizes[i]);
        kvq_free_aligned(p);
    }
    CHECK(kvq_alloc_aligned(0) == NULL);
    CHECK(kvq_alloc_aligned(SIZE_MAX) == NULL);
    CHECK(kvq_alloc_aligned(SIZE_MAX - 100) == NULL);
    kvq_free_aligned(NULL);
}

/* kvq_scratch: a block given back comes back while it is big enough (whole
 * capacity writable), a bigger request replaces it, two takers never share
 * one, and a refused size leaves nothing held. */
TEST(scratch_block_is_reused_grown_and_never_shared) {
    kvq_scratch s = {0};
    uint8_t *a = kvq_scratch_take(&s, 1000);
    CHECK(a && ((uintptr_t)a & 63) == 0);
    if (!a) return;
    memset(a, 1, 1000);
    uint8_t *b = kvq_scratch_take(&s, 1000); /* a is out: a new block */
    CHECK(b && b != a);
    kvq_scratch_give(&s, a);
    kvq_scratch_give(&s, b); /* frees a */
    uint8_t *c = kvq_scratch_take(&s, 1024); /* b's capacity is 1024 (64-byte multiples) */
    CHECK(c == b);
    if (c) memset(c, 2, 1024);
    kvq_scratch_give(&s, c);
    uint8_t *big = kvq_scratch_take(&s, 1 << 20);
    CHECK(big && big != b);
    if (big) memset(big, 3, 1 << 20);
    kvq_scratch_give(&s, big);
    CHECK(kvq_scratch_take(&s, SIZE_MAX) == NULL); /* frees big, holds nothing */
    CHECK(atomic_load(&s.block) == NULL);
    kvq_scratch_free(&s);
}
