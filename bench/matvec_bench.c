/* matvec_bench.c — matvec throughput of the weight kernels against the
 * machine's single-thread read bandwidth (`make bench-matvec`).
 *
 * For each shape: "hot" repeats one matrix (cache-resident when small);
 * "stream" cycles through copies totalling >= 256 MB, as a forward pass does.
 * Then a SmolLM2-135M-shaped decode step (30 layers of q,k,v,o,gate,up,down
 * + the 49152x576 output) on 1 and 2 threads gives the matvec-bound tokens/s,
 * for the type alone and for the default model's mix (q4_1 layers, q8_0
 * output). Last, prompt processing: the 30 layers' matmuls over 512 tokens
 * on 1 and 2 threads, on the integer route (x prepared once per matmul,
 * tokens split between the threads, then rows split) and on the exact
 * float route (rows split).
 * Usage: build/matvec-bench [type-name] (default q4_1). */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/rng.h"
#include "model/wtype.h"

/* CPU seconds of the whole process: on a shared machine, wall time over
 * threads counts time the scheduler gave to others; CPU time does not. */
static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Random bytes with every 2-byte field a small fp16 are valid blocks of any
 * quantized type and keep plain types finite. */
static void fill(uint8_t *p, size_t bytes, uint64_t seed) {
    for (size_t i = 0; i + 1 < bytes; i += 2) {
        const uint16_t h = (uint16_t)(0x1c00 + (kvq_splitmix64(&seed) & 0x03ff));
        memcpy(p + i, &h, 2);
    }
}

/* Single-thread read bandwidth: a sum over a 512 MB buffer, 8 independent
 * scalar 64-bit streams (enough loads per cycle to saturate memory). */
static double read_bandwidth(void) {
    const size_t n = (size_t)64 << 20; // (n) uint64 words = 512 MB
    uint64_t *a = kvq_alloc_aligned(n * 8);
    if (!a) return 0;
    memset(a, 1, n * 8);
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        uint64_t s[8] = {0};
        const double t0 = now();
        for (size_t i = 0; i < n; i += 8)
            for (int j = 0; j < 8; j++) s[j] += a[i + j];
        const double dt = now() - t0;
        volatile uint64_t sink = s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
        (void)sink;
        if (n * 8 / dt > best) best = (double)(n * 8) / dt;
    }
    kvq_free_aligned(a);
    return best / 1e9;
}

typedef struct {
    int64_t rows, n;
} shape;

/* One matvec on the float route, or (x16) on int16-prepared x. */
static void run_matvec(const kvq_wtype_traits *t, kvq_isa isa, const kvq_wx16 *xs, const uint8_t *w, size_t rb,
                       const float *x, shape s, int64_t r0, int64_t r1, float *y) {
    if (xs) t->matvec_x16[isa](t, w, rb, xs, s.n, r0, r1, y);
    else t->matvec[isa](t, w, rb, x, s.n, r0, r1, y);
}

static void bench_shape(const kvq_wtype_traits *t, kvq_isa isa, shape s, double bw, int x16) {
    const size_t rb = kvq_wtype_row_bytes(t, s.n), mb = rb * (size_t)s.rows;
    const size_t copies = ((size_t)256 << 20) / mb + 1;
    uint8_t *w = kvq_alloc_aligned(mb * copies); // (copies, rows, row_bytes)
    float *x = kvq_alloc_aligned(sizeof(float) * (size_t)s.n);  // (n)
    float *y = kvq_alloc_aligned(sizeof(float) * (size_t)s.rows); // (rows)
    fill(w, mb * copies, 1);
    for (int64_t k = 0; k < s.n; k++) x[k] = (float)k / (float)s.n - 0.5f;
    void *xs_buf = kvq_alloc_aligned(kvq_wtype_prep_x16_bytes(s.n));
    const kvq_wx16 xs_v = kvq_wtype_prep_x16(isa, x, s.n, xs_buf), *xs = x16 ? &xs_v : NULL;
    double hot = 0, hot_cpu = 0, stream = 0;
    for (int rep = 0; rep < 3; rep++) {
        const int iters = (int)(((size_t)64 << 20) / mb) + 4;
        double t0 = now();
        const double c0 = cpu_now();
        for (int i = 0; i < iters; i++) run_matvec(t, isa, xs, w, rb, x, s, 0, s.rows, y);
        double g = (double)mb * iters / (now() - t0) / 1e9;
        const double gc = (double)mb * iters / (cpu_now() - c0) / 1e9;
        if (g > hot) hot = g;
        if (gc > hot_cpu) hot_cpu = gc;
        t0 = now();
        for (size_t c = 0; c < copies; c++) run_matvec(t, isa, xs, w + c * mb, rb, x, s, 0, s.rows, y);
        g = (double)mb * (double)copies / (now() - t0) / 1e9;
        if (g > stream) stream = g;
    }
    printf("%-6s %-6s %-5s %6lldx%-5lld %7.2f MB  hot %6.2f GB/s (per CPU time %6.2f)  stream %6.2f GB/s "
           "(%3.0f%% of read bw)\n",
           t->name, kvq_isa_name(isa), x16 ? "x16" : "float", (long long)s.rows, (long long)s.n, (double)mb / 1e6,
           hot, hot_cpu, stream, 100 * stream / bw);
    kvq_free_aligned(w), kvq_free_aligned(x), kvq_free_aligned(y), kvq_free_aligned(xs_buf);
}

/* The decode-step model: every matrix of SmolLM2-135M, one after another,
 * rows split between the threads, a spin barrier after each matvec. */
enum { N_LAYERS = 30, N_MAT = 7 };
static const shape layer_shapes[N_MAT] = {{576, 576}, {192, 576}, {192, 576}, {576, 576},
                                          {1536, 576}, {1536, 576}, {576, 1536}};
static const shape out_shape = {49152, 576};

typedef struct {
    const kvq_wtype_traits *t, *out_t; /* layers, output matrix */
    kvq_isa isa;
    uint8_t *w;
    const float *x;
    const kvq_wx16 *xs; /* int16-prepared x, or NULL: float route */
    float *y;
    int n_threads, steps;
    /* Own cache line: spinning on it must not evict the fields above. */
    _Alignas(64) atomic_int arrived;
    char pad[60];
} model_run;

typedef struct {
    model_run *m;
    int id;
} worker_arg;

static void barrier(model_run *m, int *gen) {
    *gen += m->n_threads;
    atomic_fetch_add(&m->arrived, 1);
    /* Spin briefly, then yield: a pure spin starves the other worker
     * whenever the 2 cores are shared with anything else. */
    for (int spins = 0; atomic_load(&m->arrived) < *gen; spins++)
        if (spins > 2000) sched_yield();
}

static void matvec_part(model_run *m, const kvq_wtype_traits *t, int id, const uint8_t *w, shape s) {
    const size_t rb = kvq_wtype_row_bytes(t, s.n);
    const int64_t per = (s.rows + m->n_threads - 1) / m->n_threads;
    const int64_t r0 = per * id, r1 = r0 + per < s.rows ? r0 + per : s.rows;
    if (r0 < r1) run_matvec(t, m->isa, m->xs, w, rb, m->x, s, r0, r1, m->y + r0);
}

static void *model_worker(void *p) {
    worker_arg *a = p;
    model_run *m = a->m;
    int gen = 0;
    for (int step = 0; step < m->steps; step++) {
        const uint8_t *w = m->w;
        for (int l = 0; l < N_LAYERS; l++) {
            for (int j = 0; j < N_MAT; j++) {
                matvec_part(m, m->t, a->id, w, layer_shapes[j]);
                w += kvq_wtype_row_bytes(m->t, layer_shapes[j].n) * (size_t)layer_shapes[j].rows;
                barrier(m, &gen);
            }
        }
        matvec_part(m, m->out_t, a->id, w, out_shape);
        barrier(m, &gen);
    }
    return NULL;
}

static void bench_model(const kvq_wtype_traits *t, const kvq_wtype_traits *out_t, kvq_isa isa, int n_threads,
                        int x16) {
    size_t bytes = kvq_wtype_row_bytes(out_t, out_shape.n) * (size_t)out_shape.rows;
    for (int j = 0; j < N_MAT; j++)
        bytes += N_LAYERS * kvq_wtype_row_bytes(t, layer_shapes[j].n) * (size_t)layer_shapes[j].rows;
    model_run m = {.t = t, .out_t = out_t, .isa = isa, .n_threads = n_threads, .steps = 20};
    m.w = kvq_alloc_aligned(bytes);
    float *x = kvq_alloc_aligned(sizeof(float) * 1536);
    m.y = kvq_alloc_aligned(sizeof(float) * (size_t)out_shape.rows);
    fill(m.w, bytes, 2);
    for (int k = 0; k < 1536; k++) x[k] = (float)k / 1536.0f - 0.5f;
    m.x = x;
    /* x prepared once: in the forward pass it is once per input (~1 us). */
    void *xs_buf = kvq_alloc_aligned(kvq_wtype_prep_x16_bytes(1536));
    const kvq_wx16 xs = kvq_wtype_prep_x16(isa, x, 1536, xs_buf);
    m.xs = x16 ? &xs : NULL;
    pthread_t th[2];
    worker_arg args[2];
    const double t0 = now(), c0 = cpu_now();
    for (int i = 0; i < n_threads; i++) {
        args[i] = (worker_arg){&m, i};
        pthread_create(&th[i], NULL, model_worker, &args[i]);
    }
    for (int i = 0; i < n_threads; i++) pthread_join(th[i], NULL);
    const double dt = (now() - t0) / m.steps, dc = (cpu_now() - c0) / m.steps / n_threads;
    printf("%-6s %-6s SmolLM2-135M decode matvecs (%s x, output %s), %d thread%s: %.1f MB/token, %.2f ms/token, "
           "%.0f tokens/s, %.2f GB/s (per CPU time: %.0f tokens/s)\n",
           t->name, kvq_isa_name(isa), x16 ? "int16" : "float", out_t->name, n_threads, n_threads > 1 ? "s" : "", (double)bytes / 1e6,
           dt * 1e3, 1 / dt, (double)bytes / dt / 1e9, 1 / dc);
    kvq_free_aligned(m.w), kvq_free_aligned(x), kvq_free_aligned(m.y), kvq_free_aligned(xs_buf);
}

/* Prompt processing: every layer matrix as a matmul over PP_TOK tokens. */
enum { PP_TOK = 512 };

typedef struct {
    model_run *m;
    const float *x;  /* (PP_TOK, 1536) activations */
    uint8_t *xq_buf; /* prepared activations */
    int exact;       /* float route: t->matmul on x */
    float *y;        /* (PP_TOK, 1536) */
} prefill_run;

typedef struct {
    prefill_run *p;
    int id;
} prefill_arg;

static void *prefill_worker(void *arg) {
    prefill_arg *a = arg;
    prefill_run *p = a->p;
    model_run *m = p->m;
    int gen = 0;
    const uint8_t *w = m->w;
    for (int l = 0; l < N_LAYERS; l++) {
        for (int j = 0; j < N_MAT; j++) {
            const shape s = layer_shapes[j];
            const size_t rb = kvq_wtype_row_bytes(m->t, s.n);
            const int64_t rper = (s.rows + m->n_threads - 1) / m->n_threads;
            const int64_t r0 = rper * a->id, r1 = r0 + rper < s.rows ? r0 + rper : s.rows;
            if (p->exact) {
                if (r0 < r1) m->t->matmul[m->isa](m->t, w, rb, p->x, PP_TOK, s.n, r0, r1, p->y, s.rows);
                w += rb * (size_t)s.rows;
                barrier(m, &gen);
                continue;
            }
            /* Each thread quantizes its share of the tokens into the one
             * prepared buffer, then every thread reads all of it. */
            const int64_t per = (PP_TOK + m->n_threads - 1) / m->n_threads;
            const int64_t t0 = per * a->id, t1 = t0 + per < PP_TOK ? t0 + per : PP_TOK;
            const kvq_wxq all = kvq_wtype_prep_x_range(m->isa, p->x, PP_TOK, s.n, t0, t1, p->xq_buf);
            barrier(m, &gen);
            if (r0 < r1) m->t->matmul_q[m->isa](m->t, w, rb, &all, PP_TOK, s.n, r0, r1, p->y, s.rows);
            w += rb * (size_t)s.rows;
            barrier(m, &gen);
        }
    }
    return NULL;
}

static void bench_prefill(const kvq_wtype_traits *t, kvq_isa isa, int n_threads, int exact) {
    size_t bytes = 0;
    for (int j = 0; j < N_MAT; j++)
        bytes += N_LAYERS * kvq_wtype_row_bytes(t, layer_shapes[j].n) * (size_t)layer_shapes[j].rows;
    model_run m = {.t = t, .isa = isa, .n_threads = n_threads};
    m.w = kvq_alloc_aligned(bytes);
    fill(m.w, bytes, 3);
    prefill_run p = {.m = &m, .exact = exact};
    float *x = kvq_alloc_aligned(sizeof(float) * PP_TOK * 1536);
    uint64_t seed = 9;
    for (int64_t k = 0; k < PP_TOK * 1536; k++) x[k] = (float)kvq_rng_uniform(&seed) - 0.5f;
    p.x = x;
    p.xq_buf = kvq_alloc_aligned(kvq_wtype_prep_bytes(PP_TOK, 1536));
    p.y = kvq_alloc_aligned(sizeof(float) * PP_TOK * 1536);
    pthread_t th[2];
    prefill_arg args[2];
    const double t0 = now(), c0 = cpu_now();
    for (int i = 0; i < n_threads; i++) {
        args[i] = (prefill_arg){&p, i};
        pthread_create(&th[i], NULL, prefill_worker, &args[i]);
    }
    for (int i = 0; i < n_threads; i++) pthread_join(th[i], NULL);
    const double dt = now() - t0, dc = (cpu_now() - c0) / n_threads;
    printf("%-6s %-6s SmolLM2-135M prefill layer matmuls (%s), %d tokens, %d thread%s: %.1f ms, %.0f tokens/s "
           "(per CPU time: %.0f tokens/s)\n",
           t->name, kvq_isa_name(isa), exact ? "float x" : "int8 x", PP_TOK, n_threads, n_threads > 1 ? "s" : "", dt * 1e3, PP_TOK / dt,
           PP_TOK / dc);
    kvq_free_aligned(m.w), kvq_free_aligned(x), kvq_free_aligned(p.xq_buf), kvq_free_aligned(p.y);
}

int main(int argc, char **argv) {
    const char *name = argc > 1 ? argv[1] : "q4_1";
    const kvq_wtype_traits *t = NULL;
    for (int i = 0; i < kvq_wtype_count(); i++)
        if (strcmp(kvq_wtype_at(i)->name, name) == 0) t = kvq_wtype_at(i);
    if (!t) {
        fprintf(stderr, "unknown weight type '%s'\n", name);
        return 2;
    }
    const double bw = read_bandwidth();
    printf("single-thread read bandwidth (512 MB sum): %.2f GB/s\n", bw);
    const shape shapes[] = {{576, 1536}, {1536, 576}, {49152, 576}};
    for (int isa = kvq_isa_default(); isa >= 0; isa--) {
        for (size_t i = 0; i < KVQ_ARRAY_LEN(shapes); i++) {
            if (kvq_wtype_check_n(t, shapes[i].n) != KVQ_OK) continue;
            bench_shape(t, (kvq_isa)isa, shapes[i], bw, 0);
            if (t->matvec_x16[0] && kvq_wtype_x16_fast((kvq_isa)isa)) bench_shape(t, (kvq_isa)isa, shapes[i], bw, 1);
        }
    }
    if (kvq_wtype_check_n(t, 576) == KVQ_OK) {
        const kvq_wtype_traits *q8 = kvq_wtype_find(KVQ_WTYPE_Q8_0);
        const int x16 = t->matvec_x16[0] && kvq_wtype_x16_fast(kvq_isa_default());
        for (int r = 0; r <= x16; r++) {
            for (int th = 1; th <= 2; th++) bench_model(t, t, kvq_isa_default(), th, r);
            if (t != q8)
                for (int th = 1; th <= 2; th++) bench_model(t, q8, kvq_isa_default(), th, r);
        }
        for (int th = 1; th <= 2; th++) bench_prefill(t, kvq_isa_default(), th, 1);
        if (t->matmul_q[0])
            for (int th = 1; th <= 2; th++) bench_prefill(t, kvq_isa_default(), th, 0);
    }
    return 0;
}
