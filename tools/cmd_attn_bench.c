/* cmd_attn_bench.c — `kvq attn-bench`: the attention kernel alone over a
 * synthetic cache, against the machine's measured read bandwidth.
 *
 * Method: the read bandwidth is measured first (a 2 GiB sum split over the
 * threads, best of 3). Each cell (depth, ctk, ctv, threads) is timed
 * interleaved with the f16/f16 cell of the same depth and threads as the
 * control arm, so drift hits both alike. A sample is one decode step: every
 * layer's attention for one new token (or, with --prefill N, N tokens). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "kvq.h"

#define MAX_LIST 32
#define BW_BYTES (2ull << 30)

typedef struct {
    const char *name;
    int n_layer, n_head, n_kv_head, head_dim;
    int tile_tokens; /* of the synthetic cache; 0: the store's default */
} shape;

static const shape shapes[] = {
    {"smollm2-135m", 30, 9, 3, 64, 0},
    {"llama-3.2-1b", 16, 32, 8, 64, 0},
    {"qwen2.5-1.5b", 28, 12, 2, 128, 0},
};

/* ---------------------------------------------------------- bandwidth */

typedef struct {
    const uint64_t *p;
    size_t n;
    uint64_t sum;
} bw_arg;

static void *bw_sum(void *varg) {
    bw_arg *a = varg;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i + 4 <= a->n; i += 4) {
        s0 += a->p[i];
        s1 += a->p[i + 1];
        s2 += a->p[i + 2];
        s3 += a->p[i + 3];
    }
    a->sum = s0 + s1 + s2 + s3;
    return NULL;
}

/* Read bandwidth in bytes/s with n_threads readers (best of 3 passes). */
static double measure_bandwidth(int n_threads) {
    uint64_t *buf = malloc(BW_BYTES);
    if (!buf) return 0;
    const size_t n = BW_BYTES / 8;
    for (size_t i = 0; i < n; i++) buf[i] = i;
    double best = 0;
    pthread_t th[64];
    bw_arg args[64];
    for (int pass = 0; pass < 3; pass++) {
        const double t0 = cli_now();
        for (int i = 0; i < n_threads; i++) {
            args[i].p = buf + n / n_threads * i;
            args[i].n = n / n_threads;
            pthread_create(&th[i], NULL, bw_sum, &args[i]);
        }
        uint64_t total = 0;
        for (int i = 0; i < n_threads; i++) {
            pthread_join(th[i], NULL);
            total += args[i].sum;
        }
        const double dt = cli_now() - t0;
        if (total == 1) fprintf(stderr, " "); /* keeps the sums live */
        if (BW_BYTES / dt > best) best = BW_BYTES / dt;
    }
    free(buf);
    return best;
}

/* ---------------------------------------------------------------- cells */

typedef struct {
    kvq_kv *kv;
    double *ms;      /* (reps) */
    double append_s; /* seconds spent appending the depth tokens */
} arm;

static uint64_t rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

#define NOISE 65536

/* A synthetic cache of depth tokens per layer: V ~ N(0,1); K ~ N(0,1) plus
 * a per-channel offset, with 4 outlier channels per (layer, head) scaled
 * x10..x50 as in real post-RoPE keys. */
static int build_cache(const shape *sh, int depth, const char *ctk, const char *ctv, const float *noise,
                       kvq_threadpool *pool, kvq_kv **out, double *append_s) {
    kvq_kv_params p;
    kvq_kv_params_default(&p);
    p.n_layer = sh->n_layer;
    p.n_kv_head = sh->n_kv_head;
    p.head_dim = sh->head_dim;
    p.tile_tokens = sh->tile_tokens;
    p.ctk = ctk;
    p.ctv = ctv;
    p.seed = 42;
    if (kvq_kv_create(&p, out) != KVQ_OK) {
        fprintf(stderr, "kvq attn-bench: %s\n", kvq_last_error());
        return 0;
    }
    const int H = sh->n_kv_head, d = sh->head_dim;
    float *k = malloc(sizeof(float) * H * d), *v = malloc(sizeof(float) * H * d); /* (n_kv_head, head_dim) */
    float *gain = malloc(sizeof(float) * H * d);                                   /* (n_kv_head, head_dim) */
    uint64_t s = 1;
    int ok = 1;
    for (int l = 0; l < sh->n_layer && ok; l++) {
        for (int i = 0; i < H * d; i++) gain[i] = 1.0f;
        for (int h = 0; h < H; h++)
            for (int j = 0; j < 4; j++) gain[h * d + (int)(rng_next(&s) % (uint64_t)d)] = 10.0f + (float)(rng_next(&s) % 40);
        for (int t = 0; t < depth && ok; t++) {
            size_t o = rng_next(&s) % (NOISE - 2 * (size_t)H * d);
            for (int i = 0; i < H * d; i++) {
                k[i] = noise[o + i] * gain[i] + 0.3f * (float)(i % 5);
                v[i] = noise[o + H * d + i];
            }
            const double t0 = cli_now();
            if (kvq_kv_append(*out, l, pool, k, v) != KVQ_OK) {
                fprintf(stderr, "kvq attn-bench: %s\n", kvq_last_error());
                ok = 0;
            }
            *append_s += cli_now() - t0;
        }
    }
    free(k);
    free(v);
    free(gain);
    return ok;
}

/* One sample: every layer's attention, in ms. */
static double time_step(kvq_kv *kv, const shape *sh, kvq_threadpool *pool, int n_q, const float *q, float *out) {
    const double t0 = cli_now();
    for (int l = 0; l < sh->n_layer; l++) {
        kvq_status s = n_q == 1 ? kvq_attn_decode(kv, l, pool, sh->n_head, q, out)
                                : kvq_attn_prefill(kv, l, pool, n_q, sh->n_head, q, out);
        if (s != KVQ_OK) {
            fprintf(stderr, "kvq attn-bench: %s\n", kvq_last_error());
            return NAN;
        }
    }
    return (cli_now() - t0) * 1e3;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(const double *x, int n) {
    double *c = malloc(sizeof(double) * n);
    memcpy(c, x, sizeof(double) * n);
    qsort(c, n, sizeof(double), cmp_double);
    const double m = n % 2 ? c[n / 2] : 0.5 * (c[n / 2 - 1] + c[n / 2]);
    free(c);
    return m;
}

static double cv(const double *x, int n) {
    double mean = 0, var = 0;
    for (int i = 0; i < n; i++) mean += x[i];
    mean /= n;
    for (int i = 0; i < n; i++) var += (x[i] - mean) * (x[i] - mean);
    return n > 1 ? sqrt(var / (n - 1)) / mean : 0;
}

/* The items of a comma list, or -1 (with a message) past MAX_LIST: a list
 * is never cut short silently. */
static int split_list(const char *opt, char *text, const char **items) {
    int n = 0;
    for (char *tok = strtok(text, ","); tok; tok = strtok(NULL, ",")) {
        if (n == MAX_LIST) {
            fprintf(stderr, "kvq attn-bench: %s takes at most %d items\n", opt, MAX_LIST);
            return -1;
        }
        items[n++] = tok;
    }
    return n;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: kvq attn-bench [options]\n"
            "  --shape NAME        smollm2-135m | llama-3.2-1b | qwen2.5-1.5b (default smollm2-135m)\n"
            "  --n-layer N --n-head N --n-kv-head N --head-dim N   explicit shape (override --shape)\n"
            "  -d LIST             depths in tokens (default 4096,32768)\n"
            "  --ctk LIST          K codecs (default f16)\n"
            "  --ctv LIST          V codecs (default: each K codec paired with itself)\n"
            "  -t LIST             threads (default 1)\n"
            "  -r N                samples per cell (default 10)\n"
            "  --prefill N         time prefill attention of N new tokens instead of decode\n"
            "  --tile N            tokens per compressed tile, 1..256 (default: the store's, 32);\n"
            "                      the integer kernel needs a multiple of 16\n"
            "  -o md|json          output format (default md)\n"
            "\n"
            "Per cell: ms per step over all layers (median), bytes of KV read, GB/s and its\n"
            "fraction of the read bandwidth measured first, speedup over the f16 cell run\n"
            "interleaved with it, CV of the samples, and the cost of appending one token to\n"
            "every layer (staging + the amortized tile encode over the cell's threads,\n"
            "measured while the synthetic cache is built) in us and as a share of one step.\n");
}

int cmd_attn_bench(int argc, char **argv) {
    shape sh = shapes[0];
    const char *depth_s[MAX_LIST], *ctk[MAX_LIST], *ctv[MAX_LIST], *thr_s[MAX_LIST];
    char dbuf[1024] = "4096,32768", kbuf[1024] = "f16", vbuf[1024] = "", tbuf[1024] = "1";
    long reps = 10, prefill = 0, v;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!val) {
            fprintf(stderr, "kvq attn-bench: %s needs a value\n", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "--shape")) {
            size_t j = 0;
            while (j < sizeof shapes / sizeof shapes[0] && strcmp(shapes[j].name, val)) j++;
            if (j == sizeof shapes / sizeof shapes[0]) {
                fprintf(stderr, "kvq attn-bench: unknown shape '%s'\n", val);
                return 2;
            }
            sh = shapes[j];
        } else if (!strcmp(a, "--n-layer") && cli_parse_int(a, val, 1, 1024, &v)) sh.n_layer = (int)v, sh.name = "custom";
        else if (!strcmp(a, "--n-head") && cli_parse_int(a, val, 1, 1024, &v)) sh.n_head = (int)v, sh.name = "custom";
        else if (!strcmp(a, "--n-kv-head") && cli_parse_int(a, val, 1, 1024, &v)) sh.n_kv_head = (int)v, sh.name = "custom";
        else if (!strcmp(a, "--head-dim") && cli_parse_int(a, val, 32, 512, &v)) sh.head_dim = (int)v, sh.name = "custom";
        else if (!strcmp(a, "--tile") && cli_parse_int(a, val, 1, 256, &v)) sh.tile_tokens = (int)v;
        else if (strlen(val) >= sizeof dbuf && (!strcmp(a, "-d") || !strcmp(a, "-t") || strstr(a, "ct"))) {
            fprintf(stderr, "kvq attn-bench: %s: list longer than %zu characters\n", a, sizeof dbuf - 1);
            return 2;
        } else if (!strcmp(a, "-d")) snprintf(dbuf, sizeof dbuf, "%s", val);
        else if (!strcmp(a, "--ctk") || !strcmp(a, "-ctk")) snprintf(kbuf, sizeof kbuf, "%s", val);
        else if (!strcmp(a, "--ctv") || !strcmp(a, "-ctv")) snprintf(vbuf, sizeof vbuf, "%s", val);
        else if (!strcmp(a, "-t")) snprintf(tbuf, sizeof tbuf, "%s", val);
        else if (!strcmp(a, "-r") && cli_parse_int(a, val, 1, 10000, &reps)) continue;
        else if (!strcmp(a, "--prefill") && cli_parse_int(a, val, 1, 1 << 20, &prefill)) continue;
        else if (!strcmp(a, "-o") && (!strcmp(val, "md") || !strcmp(val, "json"))) json = !strcmp(val, "json");
        else {
            fprintf(stderr, "kvq attn-bench: bad option %s %s\n", a, val);
            usage(stderr);
            return 2;
        }
    }
    const int nd = split_list("-d", dbuf, depth_s), nk = split_list("--ctk", kbuf, ctk);
    const int nt = split_list("-t", tbuf, thr_s);
    const int paired = vbuf[0] == '\0';
    const int nv = paired ? 1 : split_list("--ctv", vbuf, ctv);
    if (nd < 0 || nk < 0 || nt < 0 || nv < 0) return 2;
    long depths[MAX_LIST], threads[MAX_LIST];
    for (int i = 0; i < nd; i++)
        if (!cli_parse_int("-d", depth_s[i], 1, 1 << 24, &depths[i])) return 2;
    for (int i = 0; i < nt; i++)
        if (!cli_parse_int("-t", thr_s[i], 1, 64, &threads[i])) return 2;
    const int n_q = prefill ? (int)prefill : 1;

    float *noise = malloc(sizeof(float) * NOISE);
    uint64_t s = 7;
    for (int i = 0; i < NOISE; i++) {
        const double u1 = ((double)(rng_next(&s) >> 11) + 0.5) / 9007199254740992.0;
        const double u2 = (double)(rng_next(&s) >> 11) / 9007199254740992.0;
        noise[i] = (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
    }
    const size_t qn = (size_t)n_q * sh.n_head * sh.head_dim;
    float *q = malloc(sizeof(float) * qn), *out = malloc(sizeof(float) * qn);
    for (size_t i = 0; i < qn; i++) q[i] = noise[i % NOISE];

    if (sh.tile_tokens) fprintf(stderr, "kvq attn-bench: tiles of %d tokens\n", sh.tile_tokens);
    if (!json)
        printf("| shape | depth | ctk | ctv | threads | ms | MB read | GB/s | of bw | vs f16 | CV | append us | append/step |\n"
               "|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (int ti = 0; ti < nt; ti++) {
        const int n_threads = (int)threads[ti];
        const double bw = measure_bandwidth(n_threads);
        fprintf(stderr, "read bandwidth, %d thread(s): %.2f GB/s\n", n_threads, bw / 1e9);
        kvq_threadpool *pool = NULL;
        if (kvq_threadpool_create(n_threads, &pool) != KVQ_OK) {
            fprintf(stderr, "kvq attn-bench: %s\n", kvq_last_error());
            return 1;
        }
        for (int di = 0; di < nd; di++) {
            const int depth = (int)depths[di] + (n_q > 1 ? n_q : 0);
            arm ctl = {0};
            if (!build_cache(&sh, depth, "f16", "f16", noise, pool, &ctl.kv, &ctl.append_s)) return 1;
            ctl.ms = malloc(sizeof(double) * reps);
            for (int ki = 0; ki < nk; ki++)
                for (int vi = 0; vi < nv; vi++) {
                    const char *vk = paired ? ctk[ki] : ctv[vi];
                    fprintf(stderr, "attn-bench: depth %d %s/%s, %d thread(s)...\n", depth, ctk[ki], vk, n_threads);
                    arm cell = {0};
                    const int is_ctl = !strcmp(ctk[ki], "f16") && !strcmp(vk, "f16");
                    if (!is_ctl && !build_cache(&sh, depth, ctk[ki], vk, noise, pool, &cell.kv, &cell.append_s)) return 1;
                    if (is_ctl) cell.kv = ctl.kv, cell.append_s = ctl.append_s;
                    cell.ms = malloc(sizeof(double) * reps);
                    time_step(ctl.kv, &sh, pool, n_q, q, out); /* warm-up */
                    time_step(cell.kv, &sh, pool, n_q, q, out);
                    for (int r = 0; r < reps; r++) {
                        ctl.ms[r] = time_step(ctl.kv, &sh, pool, n_q, q, out);
                        cell.ms[r] = is_ctl ? ctl.ms[r] : time_step(cell.kv, &sh, pool, n_q, q, out);
                    }
                    const double ms = median(cell.ms, (int)reps), ms_ctl = median(ctl.ms, (int)reps);
                    const double bytes = (double)kvq_kv_bytes_used(cell.kv);
                    const double gbps = bytes / (ms * 1e-3) / 1e9;
                    /* Appending one token to every layer (staging + the amortized tile encode). */
                    const double append_us = 1e6 * cell.append_s / depth;
                    if (json)
                        printf("{\"shape\":\"%s\",\"depth\":%ld,\"ctk\":\"%s\",\"ctv\":\"%s\",\"threads\":%d,"
                               "\"n_q\":%d,\"ms_median\":%.4f,\"ms_cv\":%.4f,\"bytes\":%.0f,\"gbps\":%.3f,"
                               "\"roofline_frac\":%.4f,\"speedup_vs_f16\":%.4f,\"append_us\":%.3f,"
                               "\"append_frac\":%.5f}\n",
                               sh.name, depths[di], ctk[ki], vk, n_threads, n_q, ms, cv(cell.ms, (int)reps), bytes,
                               gbps, gbps * 1e9 / bw, ms_ctl / ms, append_us, append_us / (1e3 * ms));
                    else
                        printf("| %s | %ld | %s | %s | %d | %.3f | %.1f | %.2f | %.3f | %.3f | %.1f%% | %.1f | %.2f%% |\n",
                               sh.name, depths[di], ctk[ki], vk, n_threads, ms, bytes / 1e6, gbps, gbps * 1e9 / bw,
                               ms_ctl / ms, 100 * cv(cell.ms, (int)reps), append_us, append_us / (10 * ms));
                    fflush(stdout);
                    if (!is_ctl) kvq_kv_free(cell.kv);
                    free(cell.ms);
                }
            kvq_kv_free(ctl.kv);
            free(ctl.ms);
        }
        kvq_threadpool_free(pool);
    }
    free(noise);
    free(q);
    free(out);
    return 0;
}
