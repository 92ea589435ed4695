/* int_kernel_bench.c — the decode integer kernel alone, its tiles in L1 / L2
 * (`make bench-int-kernel`, or build/int-kernel-bench [-G LIST] [-d D]
 * [-k KERNEL] [CODEC...]). Per codec (K = V = CODEC), per integer kernel this CPU runs
 * (AVX2's; AVX512-VNNI's where the CPU has it) and per GQA group size G;
 * for f16 and bf16, the control the integer kernels are measured against,
 * the tile kernel that reads their rows in place (decode's, this CPU's best):
 * one layer, one kv head, 512 tokens in 16 interleaved tiles of 32 (random
 * rows, outlier channels in K), G queries; the kernel over the 16 tiles in
 * runs of two (as decode calls it; f16 / bf16: tile by tile, the tile two
 * ahead prefetched, as decode), best of 400 passes. Prints ns a token
 * (and kv head), the same in core cycles at the clock timed just before the
 * row (a dependent chain of adds: one a cycle), and a hash of the kernel's
 * output (m, l, acc) to tell a bit-identical change from one that is not.
 * The tiles stay in cache, so this is the kernel's compute cost without
 * memory; `kvq attn-bench` measures it at depth. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attn/attn_kernels.h"
#include "common/rng.h"

enum { T = 32, N_TILES = 16, N_TOKENS = T * N_TILES, PASSES = 400 };

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The core clock in GHz: 4 dependent adds an iteration, one a cycle; the
 * loop's own counter runs beside them. Best of 5. 0 off x86. */
static double core_ghz(void) {
#if KVQ_HAVE_X86
    const long n = 5000000;
    double best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        uint64_t x = 0;
        const double t0 = now();
        for (long i = 0; i < n; i++) __asm__ volatile("add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0" : "+r"(x));
        const double dt = now() - t0;
        if (dt < best) best = dt;
    }
    return 4.0 * (double)n / best * 1e-9;
#else
    return 0;
#endif
}

static uint64_t fnv1a(uint64_t h, const void *p, size_t n) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

typedef struct result {
    double ns_per_token;
    uint64_t hash;
} result;

/* The kernel of kern over the layer's 16 tiles, G queries: the integer
 * kernel's qi, or (rows: the tiles' row kind, else -1) the tile kernel's q
 * (G, d). */
static result time_kernel(const kvq_attn_kernels *kern, const kvq_kv_layer *L, const kvq_attn_itiles *setup, int G,
                          int d, const kvq_attn_qi8 *qi, int rows, const float *q) {
    static float m[KVQ_ATTN_MAX_G], l[KVQ_ATTN_MAX_G], acc[KVQ_ATTN_MAX_G * KVQ_MAX_HEAD_DIM];
    kvq_attn_itiles runs[N_TILES / 2];
    for (int r = 0; r < N_TILES / 2; r++) {
        kvq_attn_itiles *it = &runs[r];
        *it = *setup;
        it->T = T;
        it->NT = 2;
        for (int i = 0; i < 2; i++) {
            const int t = 2 * r + i, next = t + 2;
            it->k[i] = L->streams[0].tiles[t];
            it->v[i] = L->streams[1].tiles[t];
            it->k_next[i] = next < N_TILES ? L->streams[0].tiles[next] : NULL;
            it->v_next[i] = next < N_TILES ? L->streams[1].tiles[next] : NULL;
        }
    }
    result res = {1e30, 0xcbf29ce484222325ull};
    for (int pass = 0; pass < PASSES; pass++) {
        for (int g = 0; g < G; g++) m[g] = -1e30f, l[g] = 0;
        memset(acc, 0, sizeof(float) * (size_t)G * d);
        const double t0 = now();
        if (rows >= 0)
            for (int t = 0; t < N_TILES; t++) {
                const uint8_t *const *k = (const uint8_t *const *)L->streams[0].tiles;
                const uint8_t *const *v = (const uint8_t *const *)L->streams[1].tiles;
                const int ahead = t + 2 < N_TILES;
                kern->tile[rows](G, d, T, q, k[t], v[t], ahead ? k[t + 2] : NULL, ahead ? v[t + 2] : NULL, m, l, acc);
            }
        else
            for (int r = 0; r < N_TILES / 2; r++) kern->integer(G, d, 2 * T, qi, &runs[r], m, l, acc);
        const double dt = now() - t0;
        if (dt < res.ns_per_token) res.ns_per_token = dt;
        __asm__ volatile("" ::"r"(acc) : "memory");
        if (pass == 0) {
            res.hash = fnv1a(res.hash, m, sizeof(float) * G);
            res.hash = fnv1a(res.hash, l, sizeof(float) * G);
            res.hash = fnv1a(res.hash, acc, sizeof(float) * (size_t)G * d);
        }
    }
    res.ns_per_token *= 1e9 / N_TOKENS;
    return res;
}

/* The row kind of the codecs the tile kernel reads in place, else -1. */
static int row_kind(const char *name) {
    return !strcmp(name, "f16") ? KVQ_ROWS_F16 : !strcmp(name, "bf16") ? KVQ_ROWS_BF16 : -1;
}

/* One layer, one kv head of codec K = V = name at head_dim d, holding
 * N_TOKENS random tokens in interleaved tiles (f16 / bf16: rows); NULL (and
 * a message) if the codec has neither or anything fails. */
static kvq_kv *filled_cache(const char *name, int d) {
    kvq_kv_params p;
    kvq_kv_params_default(&p);
    p.n_layer = 1;
    p.n_kv_head = 1;
    p.head_dim = d;
    p.tile_tokens = T;
    p.ctk = p.ctv = name;
    p.tile_layout = KVQ_TILES_INTERLEAVED;
    kvq_kv *kv = NULL;
    if (kvq_kv_create(&p, &kv) != KVQ_OK) {
        fprintf(stderr, "int-kernel-bench: %s: %s\n", name, kvq_last_error());
        return NULL;
    }
    float k[KVQ_MAX_HEAD_DIM], v[KVQ_MAX_HEAD_DIM];
    uint64_t seed = 7;
    for (int t = 0; t < N_TOKENS; t++) {
        for (int j = 0; j < d; j++) {
            k[j] = (float)kvq_rng_normal(&seed) * (j % 7 == 0 ? 8.0f : 1.0f) + (j % 5 == 0 ? 2.0f : 0.0f);
            v[j] = (float)kvq_rng_normal(&seed);
        }
        if (kvq_kv_append(kv, 0, NULL, k, v) != KVQ_OK) {
            fprintf(stderr, "int-kernel-bench: %s: %s\n", name, kvq_last_error());
            kvq_kv_free(kv);
            return NULL;
        }
    }
    if ((!kv->layers[0].interleaved[0] && row_kind(name) < 0) || kv->layers[0].n_tiles != N_TILES) {
        fprintf(stderr, "int-kernel-bench: %s has no interleaved tiles at head_dim %d: skipped\n", name, d);
        kvq_kv_free(kv);
        return NULL;
    }
    return kv;
}

/* One row of the table; ghz timed just before the kernel ran (the clock drifts). */
static void print_row(const char *codec, const char *kernel, int G, double ghz, result r) {
    printf("%-8s %-8s %2d %9.2f %9.1f %6.2f  %016llx\n", codec, kernel, G, r.ns_per_token, r.ns_per_token * ghz, ghz,
           (unsigned long long)r.hash);
    fflush(stdout);
}

static void usage(FILE *f) {
    fprintf(f, "usage: int-kernel-bench [-G LIST] [-d HEAD_DIM] [-k KERNEL] [CODEC...]\n"
               "  The decode integer kernel alone over 512 cached tokens (L1 / L2), K = V = CODEC;\n"
               "  f16 and bf16: the tile kernel that reads their rows (the integer kernels' control).\n"
               "  -G LIST      query heads per kv head, comma-separated (default 3,4)\n"
               "  -d HEAD_DIM  head_dim (default 64)\n"
               "  -k KERNEL    only this kernel: avx2 or avx512 (VNNI) (default: each the CPU runs;\n"
               "               f16 / bf16 run the CPU's best tile kernel whatever -k says)\n"
               "  CODEC...     default: f16 q8_0 q4_0 q4_1 q5_0 q5_1 iq4_nl turbo2 turbo3 turbo4\n");
}

int main(int argc, char **argv) {
    static const char *const default_codecs[] = {"f16",  "q8_0",   "q4_0",   "q4_1",   "q5_0",
                                                 "q5_1", "iq4_nl", "turbo2", "turbo3", "turbo4"};
    int groups[KVQ_ATTN_MAX_G], n_groups = 0, d = 64;
    const char *only = NULL; /* -k */
    const char *codecs[64];
    int n_codecs = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "-G") && i + 1 < argc) {
            for (char *s = argv[++i], *end; *s; s = *end == ',' ? end + 1 : end) {
                const long G = strtol(s, &end, 10);
                if (end == s || G < 1 || G > KVQ_ATTN_MAX_G || n_groups == KVQ_ATTN_MAX_G) {
                    fprintf(stderr, "int-kernel-bench: -G wants up to %d sizes in 1..%d: '%s'\n", KVQ_ATTN_MAX_G,
                            KVQ_ATTN_MAX_G, argv[i]);
                    return 2;
                }
                groups[n_groups++] = (int)G;
            }
        } else if (!strcmp(argv[i], "-d") && i + 1 < argc) {
            char *end;
            const long v = strtol(argv[++i], &end, 10);
            if (*end || v < 32 || v > KVQ_MAX_HEAD_DIM || v % 32) {
                fprintf(stderr, "int-kernel-bench: -d wants a multiple of 32 in 32..%d: '%s'\n", KVQ_MAX_HEAD_DIM,
                        argv[i]);
                return 2;
            }
            d = (int)v;
        } else if (!strcmp(argv[i], "-k") && i + 1 < argc) {
            only = argv[++i];
            if (strcmp(only, "avx2") && strcmp(only, "avx512")) {
                fprintf(stderr, "int-kernel-bench: -k wants avx2 or avx512: '%s'\n", only);
                return 2;
            }
        } else if (argv[i][0] == '-' || n_codecs == (int)KVQ_ARRAY_LEN(codecs)) {
            usage(stderr);
            return 2;
        } else {
            codecs[n_codecs++] = argv[i];
        }
    }
    if (!n_groups) groups[n_groups++] = 3, groups[n_groups++] = 4;
    if (!n_codecs)
        for (size_t i = 0; i < KVQ_ARRAY_LEN(default_codecs); i++) codecs[n_codecs++] = default_codecs[i];

    printf("%-8s %-8s %2s %9s %9s %6s  %-16s  (d %d, %d tokens in tiles of %d, best of %d)\n", "codec", "kernel", "G",
           "ns/token", "cyc/token", "GHz", "hash", d, N_TOKENS, T, PASSES);
    int ran = 0;
    for (int ci = 0; ci < n_codecs; ci++) {
        kvq_kv *kv = filled_cache(codecs[ci], d);
        if (!kv) continue;
        const kvq_kv_layer *L = &kv->layers[0];
        const int rows = row_kind(codecs[ci]);
        uint8_t codes[2][256];
        kvq_attn_itiles setup = {0};
        if (rows < 0) kvq_attn_itiles_setup(L, codes, &setup);
        if (rows >= 0) { /* decode's tile kernel: the CPU's best */
            kvq_attn_kernels kern;
            kvq_attn_kernels_get(kvq_isa_default(), &kern);
            for (int gi = 0; gi < n_groups; gi++) {
                const int G = groups[gi];
                float q[KVQ_ATTN_MAX_G * KVQ_MAX_HEAD_DIM];
                uint64_t seed = 11 + (uint64_t)G;
                for (int j = 0; j < G * d; j++) q[j] = 0.25f * (float)kvq_rng_normal(&seed) / 8.0f;
                const double ghz = core_ghz();
                print_row(codecs[ci], kvq_isa_name(kvq_isa_default()), G, ghz,
                          time_kernel(&kern, L, &setup, G, d, NULL, rows, q));
                ran++;
            }
        }
        for (int isa = kvq_isa_default(); rows < 0 && isa >= 0; isa--) {
            kvq_attn_kernels kern;
            kvq_attn_kernels_get((kvq_isa)isa, &kern);
            if (!kern.integer || (only && strcmp(only, kvq_isa_name((kvq_isa)isa)))) continue;
            /* a path without a kernel of its own borrows the next lower one's: list each kernel once */
            kvq_attn_kernels lower = {0};
            if (isa > 0) kvq_attn_kernels_get((kvq_isa)(isa - 1), &lower);
            if (lower.integer == kern.integer) continue;
            for (int gi = 0; gi < n_groups; gi++) {
                const int G = groups[gi];
                kvq_attn_qi8 qi[KVQ_ATTN_MAX_G];
                uint64_t seed = 11 + (uint64_t)G;
                for (int g = 0; g < G; g++) {
                    float q[KVQ_MAX_HEAD_DIM], qd[KVQ_MAX_HEAD_DIM];
                    for (int j = 0; j < d; j++) q[j] = 0.25f * (float)kvq_rng_normal(&seed) / 8.0f; /* x 1 / sqrt(64) */
                    kvq_codec_to_domain(L->codec[0], q, qd);
                    kvq_attn_itiles_query(&kern, &setup, qd, d, &qi[g]);
                }
                const double ghz = core_ghz();
                print_row(codecs[ci], kvq_isa_name((kvq_isa)isa), G, ghz,
                          time_kernel(&kern, L, &setup, G, d, qi, -1, NULL));
                ran++;
            }
        }
        kvq_kv_free(kv);
    }
    if (!ran) fprintf(stderr, "int-kernel-bench: nothing ran (no integer kernel on this CPU, or no codec with one)\n");
    return ran ? 0 : 1;
}
