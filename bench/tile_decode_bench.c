/* tile_decode_bench.c — ns per row of each codec's tile decode (to floats in
 * the attention domain, as attention does on paths without an integer
 * kernel), per ISA path: `make bench-tile-decode`. One tile of 32 rows of
 * head_dim 64 (random rows, a few outlier channels), decoded 20 times per
 * rep; the fastest of 2000 reps, so a noisy machine only adds. First the
 * codecs' row-major decode, then the interleaved tiles' (kvq_kv_tile_decode
 * and its SIMD versions, K and V sides), which the scratch paths read. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "codec/codec_impl.h"
#include "common/rng.h"
#include "kv/kvstore.h"

enum { D = 64, ROWS = 32, INNER = 20, REPS = 2000 };

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One decode to time: the codec's row decode of src, or (tile set) the
 * interleaved tile decode of src as side. */
typedef struct job {
    const kvq_codec *c;
    kvq_kv_tile_decode_fn tile;
    int side;
    const uint8_t *src;
    float *y;
} job;

static double ns_per_row(const job *j) {
    double best = 1e30;
    for (int rep = 0; rep < REPS; rep++) {
        const double t0 = now();
        for (int k = 0; k < INNER; k++) {
            if (j->tile) j->tile(j->c, j->side, ROWS, j->src, j->y);
            else j->c->decode_tile_domain(j->c, j->src, ROWS, j->y);
        }
        const double dt = now() - t0;
        if (dt < best) best = dt;
        __asm__ volatile("" ::"r"(j->y) : "memory");
    }
    return best / INNER / ROWS * 1e9;
}

/* ROWS random rows of c (a few outlier channels), or NULL. */
static uint8_t *random_rows(kvq_codec *c) {
    static float x[D];
    const size_t rb = kvq_codec_row_bytes(c);
    uint8_t *rows = malloc(rb * ROWS);
    if (!rows) return NULL;
    uint64_t seed = 7;
    for (int r = 0; r < ROWS; r++) {
        for (int j = 0; j < D; j++) x[j] = (float)kvq_rng_normal(&seed) * (j % 7 == 0 ? 8.0f : 1.0f);
        kvq_codec_encode_row(c, x, rows + r * rb);
    }
    return rows;
}

int main(void) {
    static float y[ROWS * D];
    printf("%-8s", "codec");
    for (int isa = kvq_isa_default(); isa >= 0; isa--) printf(" %10s", kvq_isa_name((kvq_isa)isa));
    printf("   (ns per row, d %d)\n", D);
    for (int i = 0; i < kvq_codec_count(); i++) {
        const char *name = kvq_codec_name_at(i);
        printf("%-8s", name);
        for (int isa = kvq_isa_default(); isa >= 0; isa--) {
            kvq_codec *c;
            if (kvq_codec_create(name, D, 1, &c) != KVQ_OK || kvq_codec_set_isa(c, (kvq_isa)isa) != KVQ_OK) {
                fprintf(stderr, "tile-decode-bench: %s: %s\n", name, kvq_last_error());
                return 1;
            }
            uint8_t *rows = random_rows(c);
            if (!rows) return 1;
            printf(" %10.1f", ns_per_row(&(job){c, NULL, 0, rows, y}));
            free(rows);
            kvq_codec_free(c);
        }
        printf("\n");
    }

    /* Indexed by kvq_isa; the ISAs without one are left out. */
    const kvq_kv_tile_decode_fn tile_decode[KVQ_ISA_COUNT] = {
        kvq_kv_tile_decode,
#if KVQ_HAVE_X86
        kvq_kv_tile_decode_avx2, kvq_kv_tile_decode_avx512,
#endif
    };
    printf("\n%-10s", "tile");
    for (int isa = kvq_isa_default(); isa >= 0; isa--)
        if (tile_decode[isa]) printf(" %10s", kvq_isa_name((kvq_isa)isa));
    printf("   (interleaved, ns per row, d %d, T %d)\n", D, ROWS);
    for (int i = 0; i < kvq_codec_count(); i++) {
        const char *name = kvq_codec_name_at(i);
        kvq_codec *c;
        if (kvq_codec_create(name, D, 1, &c) != KVQ_OK) {
            fprintf(stderr, "tile-decode-bench: %s: %s\n", name, kvq_last_error());
            return 1;
        }
        if (kvq_kv_interleavable(c)) {
            uint8_t *rows = random_rows(c), *tile = malloc(kvq_codec_row_bytes(c) * ROWS);
            if (!rows || !tile) return 1;
            for (int side = 0; side < 2; side++) {
                kvq_kv_tile_pack(c, side, ROWS, rows, tile);
                printf("%-8s %c", name, "KV"[side]);
                for (int isa = kvq_isa_default(); isa >= 0; isa--)
                    if (tile_decode[isa]) printf(" %10.1f", ns_per_row(&(job){c, tile_decode[isa], side, tile, y}));
                printf("\n");
            }
            free(rows);
            free(tile);
        }
        kvq_codec_free(c);
    }
    return 0;
}
