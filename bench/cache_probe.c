/* cache_probe.c — how much of a decode step's non-attention time depends on
 * the weights staying in the shared L3 (`make bench-cache-probe`).
 *
 * At depth 0 the default model's 96 MB of weights can stay in a large L3
 * between tokens; at depth, attention streams 0.1-0.8 GB of KV through the
 * caches every token and evicts them. This times decode steps of the default
 * model at depth 64 (attention negligible: a q4_0 cache of 64 tokens), each
 * after streaming S MB of an unrelated buffer, untimed, as attention over a
 * deep cache would. With a prefetch hint, the stream is also prefetched
 * non-temporally (prefetchnta) a distance ahead, to see whether that keeps
 * the weights cached. Wall-clock medians of 40 steps per row; run it on a
 * quiet machine.
 * Usage: build/cache-probe MODEL.gguf [threads (2)] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvq.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#define STEPS 40

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sums n floats (a multiple of 16) so the reads cannot be dropped;
 * nta_ahead > 0: prefetchnta that many bytes ahead of each line read. */
static float stream(const float *b, size_t n, size_t nta_ahead) {
    float acc[16] = {0};
    for (size_t i = 0; i < n; i += 16) {
#if defined(__x86_64__)
        if (nta_ahead) _mm_prefetch((const char *)(b + i) + nta_ahead, _MM_HINT_NTA);
#endif
        for (int j = 0; j < 16; j++) acc[j] += b[i + j];
    }
    float s = 0;
    for (int j = 0; j < 16; j++) s += acc[j];
    return s;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL.gguf [threads]\n", argv[0]);
        return 2;
    }
    kvq_model *m = NULL;
    if (kvq_model_load(argv[1], &m) != KVQ_OK) {
        fprintf(stderr, "cache-probe: %s\n", kvq_last_error());
        return 1;
    }
    kvq_ctx_params p;
    kvq_ctx_params_default(&p);
    p.n_threads = argc > 2 ? atoi(argv[2]) : 2;
    p.n_ctx = 512;
    p.ctk = p.ctv = "q4_0";
    kvq_ctx *c = NULL;
    if (kvq_ctx_create(m, &p, &c) != KVQ_OK) {
        fprintf(stderr, "cache-probe: %s\n", kvq_last_error());
        return 1;
    }
    int32_t prompt[64];
    for (int i = 0; i < 64; i++) prompt[i] = 100 + 7 * i;
    if (kvq_ctx_eval(c, prompt, 64, NULL, 0) != KVQ_OK) {
        fprintf(stderr, "cache-probe: %s\n", kvq_last_error());
        return 1;
    }
    static const size_t mbs[] = {0, 128, 256, 512, 1024}, aheads[] = {0, 1024, 16384};
    const size_t max_floats = ((size_t)1024 << 20) / sizeof(float);
    float *buf = malloc(max_floats * sizeof(float));
    if (!buf) return 1;
    for (size_t i = 0; i < max_floats; i++) buf[i] = (float)(i & 7);
    volatile float sink = 0;
    printf("| streamed between steps | prefetchnta ahead | step ms (median) | min |\n|---:|---:|---:|---:|\n");
    for (size_t a = 0; a < sizeof aheads / sizeof *aheads; a++)
        for (size_t k = 0; k < sizeof mbs / sizeof *mbs; k++) {
            if (aheads[a] && !mbs[k]) continue;
            double t[STEPS];
            for (int s = 0; s < STEPS; s++) {
                sink += stream(buf, (mbs[k] << 20) / sizeof(float), aheads[a]);
                const int32_t tok = 200 + s;
                const double t0 = now();
                if (kvq_ctx_eval(c, &tok, 1, NULL, 0) != KVQ_OK) {
                    fprintf(stderr, "cache-probe: %s\n", kvq_last_error());
                    return 1;
                }
                t[s] = now() - t0;
            }
            kvq_ctx_truncate(c, 64);
            qsort(t, STEPS, sizeof *t, cmp_double);
            printf("| %zu MB | %s | %.3f | %.3f |\n", mbs[k], aheads[a] ? (aheads[a] == 1024 ? "1 KiB" : "16 KiB") : "-",
                   1e3 * t[STEPS / 2], 1e3 * t[0]);
        }
    (void)sink;
    free(buf);
    kvq_ctx_free(c);
    kvq_model_free(m);
    return 0;
}
