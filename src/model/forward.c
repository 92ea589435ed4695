/* forward.c — the inference context and the transformer forward pass over
 * the compressed KV cache. Reads top to bottom: embed, then per layer
 * attention (norm, QKV, bias / QK-norm, RoPE, append to the cache, fused
 * attention, output projection) and SwiGLU FFN, then the output head.
 * Prompts run in chunks of n_batch tokens with matmuls; one token with
 * matvecs. */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/threadpool.h"
#include "model/act.h"
#include "model/ctx.h"

void kvq_ctx_params_default(kvq_ctx_params *p) {
    memset(p, 0, sizeof *p);
    p->centering = 1;
}

/* Monotonic seconds; a vDSO call (~20 ns), cheap next to a layer's attention. */
static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ------------------------------------------------------------ threading */

/* Up to three matrices applied to the same input in one dispatch (Q, K, V;
 * gate, up). Their rows form one range (job j's after job j - 1's) that
 * the threads claim in shrinking pieces ("guided" scheduling): a claim is
 * 1/(2 n_threads) of the rows left, rounded up to 16 and cut at its job's
 * end, so the first pieces are long (few cold starts of the row prefetch)
 * and the last are 16 rows (the threads finish together). One thread
 * takes each job whole. */
typedef struct {
    const kvq_weight *w;
    float *y;          /* (n_tok, w->rows) */
    int64_t first;     /* the job's first row in the dispatch's range */
} linear_job;

typedef struct {
    linear_job job[3];
    int n_jobs;
    int swiglu;        /* jobs 0 (gate) and 1 (up) share their rows; y0 = silu(y0) * y1 */
    const float *x;    /* (n_tok, n) */
    const kvq_wxq *xq; /* x prepared for the integer kernels, or NULL */
    const kvq_wx16 *xs; /* one token's x prepared for the int16 matvec, or NULL */
    int n_tok;
    int n_threads;
    kvq_isa isa;
    int64_t total;     /* rows in the range */
    _Atomic int64_t next; /* the first row not yet claimed */
} linear_batch;

static void linear_rows(const linear_batch *b, const linear_job *lj, int64_t r0, int64_t r1) {
    const kvq_weight *w = lj->w;
    if (b->xs)
        w->t->matvec_x16[b->isa](w->t, w->data, w->row_bytes, b->xs, w->n, r0, r1, lj->y + r0);
    else if (b->n_tok == 1)
        w->t->matvec[b->isa](w->t, w->data, w->row_bytes, b->x, w->n, r0, r1, lj->y + r0);
    else if (b->xq)
        w->t->matmul_q[b->isa](w->t, w->data, w->row_bytes, b->xq, b->n_tok, w->n, r0, r1, lj->y, w->rows);
    else
        w->t->matmul[b->isa](w->t, w->data, w->row_bytes, b->x, b->n_tok, w->n, r0, r1, lj->y, w->rows);
}

/* Claims the next piece of the range: its job and rows [*r0, *r1) of it;
 * 0 when every row is taken. Pieces start at multiples of 16 in their job. */
static int linear_claim(linear_batch *b, const linear_job **lj, int64_t *r0, int64_t *r1) {
    int64_t at = atomic_load_explicit(&b->next, memory_order_relaxed);
    for (;;) {
        if (at >= b->total) return 0;
        int j = b->n_jobs - 1;
        while (b->job[j].first > at) j--;
        const int64_t end = b->job[j].first + b->job[j].w->rows;
        int64_t take = b->n_threads == 1 ? end - at : (b->total - at + 2 * b->n_threads - 1) / (2 * b->n_threads);
        take = (take + 15) / 16 * 16;
        const int64_t stop = at + take < end ? at + take : end;
        if (atomic_compare_exchange_weak_explicit(&b->next, &at, stop, memory_order_relaxed, memory_order_relaxed)) {
            *lj = &b->job[j];
            *r0 = at - b->job[j].first;
            *r1 = stop - b->job[j].first;
            return 1;
        }
    }
}

static void linear_task(int task, int worker, void *arg) {
    (void)task, (void)worker;
    linear_batch *b = arg;
    const linear_job *lj;
    int64_t r0, r1;
    while (linear_claim(b, &lj, &r0, &r1)) {
        linear_rows(b, lj, r0, r1);
        if (!b->swiglu) continue;
        /* SwiGLU on the rows just made, while they are in this core's cache
         * (done serially after the dispatch it was 4% of a -t 2 step). */
        const linear_job *up = &b->job[1];
        const int64_t rows = lj->w->rows;
        linear_rows(b, up, r0, r1);
        for (int t = 0; t < b->n_tok; t++) kvq_swiglu(b->isa, lj->y + t * rows + r0, up->y + t * rows + r0, r1 - r0);
    }
}

/* y_j = x W_j^T for each (W_j, y_j) pair given, on every thread.
 * Prompt chunks use float activations (exact to float rounding). With
 * int8_prefill, they run the integer kernels where every matrix has them:
 * x quantized once to int8 blocks of 32, as ggml does — faster, but it
 * moves logits by about 1 on SmolLM2-135M (mean KLD 0.007, more than q8_0
 * KV costs), enough to change greedy answers, so it is opt-in.
 * One token (decode) quantizes x once to 16-bit codes per block of 32
 * (kvq_wx16, error <= max|x_b| / 32512 per value, 256 times finer than
 * int8) where every matrix has the int16 kernel and it is fast here
 * (AVX2, AVX-512 VNNI): decode is bound by reading the weights, and the integer
 * kernel keeps up with memory where the float one did not (docs/PERF.md).
 * The float route stays where it is not fast, and with float_decode.
 * swiglu: w0, w1 are gate and up of the same shape, and y0 becomes
 * silu(y0) * y1 (y1 keeps x W_1^T). */
static void linear(kvq_ctx *c, const float *x, int n_tok, int swiglu, const kvq_weight *w0, float *y0,
                   const kvq_weight *w1, float *y1, const kvq_weight *w2, float *y2) {
    linear_batch b = {.x = x, .n_tok = n_tok, .isa = c->isa, .swiglu = swiglu, .n_threads = c->n_threads};
    const kvq_weight *ws[3] = {w0, w1, w2};
    float *ys[3] = {y0, y1, y2};
    int integer = n_tok > 1 && c->p.int8_prefill;
    int x16 = n_tok == 1 && !c->p.float_decode && kvq_wtype_x16_fast(c->isa);
    for (int j = 0; j < 3 && ws[j]; j++) {
        linear_job *lj = &b.job[b.n_jobs++];
        lj->w = ws[j];
        lj->y = ys[j];
        lj->first = b.total;
        integer &= ws[j]->t->matmul_q[c->isa] != NULL;
        x16 &= ws[j]->t->matvec_x16[c->isa] != NULL;
        if (!swiglu || j == 0) b.total += ws[j]->rows;
    }
    if (swiglu) b.n_jobs = 1; /* up's rows go with gate's (linear_task) */
    atomic_init(&b.next, 0);
    kvq_wxq xq;
    kvq_wx16 xs;
    if (x16) {
        xs = kvq_wtype_prep_x16(c->isa, x, w0->n, c->x16_scratch);
        b.xs = &xs;
    } else if (integer) {
        xq = kvq_wtype_prep_x(c->isa, x, n_tok, w0->n, c->xq_scratch);
        b.xq = &xq;
    }
    kvq_threadpool_run(c->pool, c->n_threads, linear_task, &b);
}

/* --------------------------------------------------------------- pieces */

static void rmsnorm(float *out, const float *x, const float *w, int n, float eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    const float inv = (float)(1.0 / sqrt(ss / n + eps));
    for (int i = 0; i < n; i++) out[i] = x[i] * inv * w[i];
}

/* cos/sin of every rotated pair at positions pos0 .. pos0 + n - 1. */
static void rope_table(const kvq_model *m, int pos0, int n, float *tab) {
    const int half = m->n_rot / 2;
    for (int t = 0; t < n; t++) {
        const double pos = (double)(pos0 + t) * m->rope_freq_scale;
        for (int i = 0; i < half; i++) {
            double theta = pos * pow(m->rope_theta, -2.0 * i / m->n_rot);
            if (m->rope_freq_factors) theta /= m->rope_freq_factors[i];
            tab[((size_t)t * half + i) * 2] = (float)cos(theta);
            tab[((size_t)t * half + i) * 2 + 1] = (float)sin(theta);
        }
    }
}

/* Rotates the first n_rot dims of each of n_heads head vectors. llama's GGUF
 * layout pairs adjacent dims; qwen2/qwen3 (NeoX) pair i with i + n_rot/2. */
static void rope_apply(const kvq_model *m, const float *tab, float *x, int n_heads) {
    const int half = m->n_rot / 2, hd = m->head_dim;
    for (int h = 0; h < n_heads; h++) {
        float *v = x + (size_t)h * hd;
        for (int i = 0; i < half; i++) {
            const float cs = tab[2 * i], sn = tab[2 * i + 1];
            const int a = m->rope_neox ? i : 2 * i, b = m->rope_neox ? i + half : 2 * i + 1;
            const float x0 = v[a], x1 = v[b];
            v[a] = x0 * cs - x1 * sn;
            v[b] = x0 * sn + x1 * cs;
        }
    }
}

static void add_bias(float *x, const float *b, int n) {
    if (b)
        for (int i = 0; i < n; i++) x[i] += b[i];
}

/* ----------------------------------------------------------- the forward */

/* Runs one chunk of n tokens (n <= n_batch) at positions n_past.. and
 * appends them to every layer's cache. logits: NULL, or the last token's
 * (all_logits = 0) or every token's rows. */
static kvq_status forward_chunk(kvq_ctx *c, const int32_t *tokens, int n, float *logits, int all_logits) {
    const kvq_model *m = c->m;
    const int E = m->n_embd, hd = m->head_dim, H = m->n_head, KH = m->n_kv_head;
    const int qd = H * hd, kvd = KH * hd;

    for (int t = 0; t < n; t++) { /* embedding rows */
        const kvq_weight *w = &m->tok_embd;
        w->t->dequant((const uint8_t *)w->data + (size_t)tokens[t] * w->row_bytes, c->x + (size_t)t * E,
                      E / w->t->block_size);
    }
    rope_table(m, c->n_past, n, c->rope);

    for (int il = 0; il < m->n_layer; il++) {
        const kvq_layer *L = &m->layers[il];
        for (int t = 0; t < n; t++) rmsnorm(c->xn + (size_t)t * E, c->x + (size_t)t * E, L->attn_norm, E, m->norm_eps);
        linear(c, c->xn, n, 0, &L->wq, c->q, &L->wk, c->k, &L->wv, c->v);
        for (int t = 0; t < n; t++) {
            float *q = c->q + (size_t)t * qd, *k = c->k + (size_t)t * kvd, *v = c->v + (size_t)t * kvd;
            add_bias(q, L->bq, qd);
            add_bias(k, L->bk, kvd);
            add_bias(v, L->bv, kvd);
            if (L->q_norm) {
                for (int h = 0; h < H; h++) rmsnorm(q + (size_t)h * hd, q + (size_t)h * hd, L->q_norm, hd, m->norm_eps);
                for (int h = 0; h < KH; h++) rmsnorm(k + (size_t)h * hd, k + (size_t)h * hd, L->k_norm, hd, m->norm_eps);
            }
            const float *tab = c->rope + (size_t)t * m->n_rot;
            rope_apply(m, tab, q, H);
            rope_apply(m, tab, k, KH);
            KVQ_FORWARD(kvq_kv_append(c->kv, il, c->pool, k, v));
        }
        const double ta = now_seconds();
        if (n == 1) KVQ_FORWARD(kvq_attn_decode(c->kv, il, c->pool, H, c->q, c->att));
        else KVQ_FORWARD(kvq_attn_prefill(c->kv, il, c->pool, n, H, c->q, c->att));
        c->attn_seconds += now_seconds() - ta;
        linear(c, c->att, n, 0, &L->wo, c->xn, NULL, NULL, NULL, NULL);
        for (size_t i = 0; i < (size_t)n * E; i++) c->x[i] += c->xn[i];

        for (int t = 0; t < n; t++) rmsnorm(c->xn + (size_t)t * E, c->x + (size_t)t * E, L->ffn_norm, E, m->norm_eps);
        linear(c, c->xn, n, 1, &L->gate, c->gate, &L->up, c->up, NULL, NULL); /* gate = silu(gate) * up */
        linear(c, c->gate, n, 0, &L->down, c->xn, NULL, NULL, NULL, NULL);
        for (size_t i = 0; i < (size_t)n * E; i++) c->x[i] += c->xn[i];
    }
    c->n_past += n;

    if (!logits) return KVQ_OK;
    const int first = all_logits ? 0 : n - 1, n_out = n - first;
    for (int t = first; t < n; t++)
        rmsnorm(c->xn + (size_t)(t - first) * E, c->x + (size_t)t * E, m->output_norm, E, m->norm_eps);
    linear(c, c->xn, n_out, 0, &m->output, logits, NULL, NULL, NULL, NULL);
    return KVQ_OK;
}

/* Room for n tokens in the token history (n <= n_ctx). */
static kvq_status reserve_tokens(kvq_ctx *c, int n) {
    if (n <= c->cap_tokens) return KVQ_OK;
    int cap = c->cap_tokens ? c->cap_tokens : 256;
    while (cap < n) cap = cap > c->p.n_ctx / 2 ? c->p.n_ctx : 2 * cap;
    int32_t *t = realloc(c->tokens, sizeof *t * (size_t)cap);
    KVQ_RETURN_IF(!t, KVQ_ERR_NOMEM, "context: out of memory for the token history");
    c->tokens = t;
    c->cap_tokens = cap;
    return KVQ_OK;
}

kvq_status kvq_ctx_eval(kvq_ctx *c, const int32_t *tokens, int n, float *logits, int all_logits) {
    KVQ_RETURN_IF(!c || (!tokens && n > 0) || n < 0, KVQ_ERR_INVALID_ARG, "kvq_ctx_eval: bad arguments");
    KVQ_RETURN_IF(n > c->p.n_ctx - c->n_past, KVQ_ERR_RANGE,
                  "context full: %d tokens held + %d new > n_ctx %d (raise -c or start a new context)", c->n_past,
                  n, c->p.n_ctx);
    for (int i = 0; i < n; i++)
        KVQ_RETURN_IF(tokens[i] < 0 || tokens[i] >= c->m->n_vocab, KVQ_ERR_INVALID_ARG,
                      "token %d at index %d is not in the vocabulary [0, %d)", tokens[i], i, c->m->n_vocab);
    KVQ_FORWARD(reserve_tokens(c, c->n_past + n));
    const int start = c->n_past;
    for (int done = 0; done < n;) {
        const int chunk = n - done < c->p.n_batch ? n - done : c->p.n_batch;
        const int last = done + chunk == n;
        float *out = NULL;
        if (logits && all_logits) out = logits + (size_t)done * c->m->n_vocab;
        else if (logits && last) out = logits;
        kvq_status s = forward_chunk(c, tokens + done, chunk, out, all_logits);
        if (s != KVQ_OK) {
            const char *why = kvq_last_error();
            char msg[400];
            snprintf(msg, sizeof msg, "%s", why);
            kvq_kv_truncate(c->kv, start);
            c->n_past = start;
            return kvq_fail(s, "eval at position %d: %s", start + done, msg);
        }
        done += chunk;
    }
    if (n) memcpy(c->tokens + start, tokens, sizeof *tokens * (size_t)n);
    return KVQ_OK;
}

/* ------------------------------------------------------------- lifetime */

kvq_status kvq_ctx_create(const kvq_model *m, const kvq_ctx_params *p, kvq_ctx **out) {
    KVQ_RETURN_IF(!m || !p || !out, KVQ_ERR_INVALID_ARG, "kvq_ctx_create: NULL argument");
    *out = NULL;
    kvq_ctx_params cp = *p;
    if (cp.n_ctx == 0) cp.n_ctx = m->n_ctx_train;
    KVQ_RETURN_IF(cp.n_ctx < 1 || cp.n_ctx > (1 << 24), KVQ_ERR_INVALID_ARG, "context length %d not in [1, %d]",
                  cp.n_ctx, 1 << 24);
    if (cp.n_threads == 0) {
        const long cores = sysconf(_SC_NPROCESSORS_ONLN);
        cp.n_threads = cores > 0 ? (int)(cores < 256 ? cores : 256) : 1;
    }
    KVQ_RETURN_IF(cp.n_threads < 1 || cp.n_threads > 256, KVQ_ERR_INVALID_ARG, "thread count %d not in [1, 256]",
                  cp.n_threads);
    if (cp.n_batch == 0) cp.n_batch = KVQ_DEFAULT_N_BATCH;
    KVQ_RETURN_IF(cp.n_batch < 1 || cp.n_batch > 4096, KVQ_ERR_INVALID_ARG, "batch size %d not in [1, 4096]",
                  cp.n_batch);
    if (cp.n_batch > cp.n_ctx) cp.n_batch = cp.n_ctx;
    KVQ_FORWARD(kvq_ctx_check_memory(m, &cp));

    kvq_ctx *c = calloc(1, sizeof *c);
    KVQ_RETURN_IF(!c, KVQ_ERR_NOMEM, "context: out of memory");
    c->m = m;
    c->p = cp;
    c->n_threads = cp.n_threads;
    c->isa = kvq_isa_default();

    kvq_kv_params kp;
    kvq_kv_params_default(&kp);
    kp.n_layer = m->n_layer;
    kp.n_kv_head = m->n_kv_head;
    kp.head_dim = m->head_dim;
    kp.ctk = cp.ctk;
    kp.ctv = cp.ctv;
    kp.n_sinks = cp.n_sinks;
    kp.boundary_layers = cp.boundary_layers;
    kp.centering = cp.centering;
    kp.seed = cp.seed;
    kp.tile_layout = cp.kv_tile_layout;
    kvq_status s = kvq_kv_create(&kp, &c->kv);
    if (s == KVQ_OK) s = kvq_threadpool_create(cp.n_threads, &c->pool);
    if (s == KVQ_OK) {
        const size_t B = (size_t)cp.n_batch;
        const size_t qd = (size_t)m->n_head * m->head_dim, kvd = (size_t)m->n_kv_head * m->head_dim;
        c->x = kvq_alloc_aligned(sizeof(float) * B * m->n_embd);
        c->xn = kvq_alloc_aligned(sizeof(float) * B * ((size_t)m->n_embd > qd ? (size_t)m->n_embd : qd));
        c->q = kvq_alloc_aligned(sizeof(float) * B * qd);
        c->k = kvq_alloc_aligned(sizeof(float) * B * kvd);
        c->v = kvq_alloc_aligned(sizeof(float) * B * kvd);
        c->att = kvq_alloc_aligned(sizeof(float) * B * qd);
        c->gate = kvq_alloc_aligned(sizeof(float) * B * m->n_ff);
        c->up = kvq_alloc_aligned(sizeof(float) * B * m->n_ff);
        c->rope = kvq_alloc_aligned(sizeof(float) * B * m->n_rot);
        const int64_t widest = m->n_ff > m->n_embd ? m->n_ff : m->n_embd;
        const int64_t widest_in = widest > (int64_t)qd ? widest : (int64_t)qd;
        c->xq_scratch = kvq_alloc_aligned(kvq_wtype_prep_bytes((int64_t)B, widest_in));
        c->x16_scratch = kvq_alloc_aligned(kvq_wtype_prep_x16_bytes(widest_in));
        if (!c->x || !c->xn || !c->q || !c->k || !c->v || !c->att || !c->gate || !c->up || !c->rope || !c->xq_scratch ||
            !c->x16_scratch)
            s = kvq_fail(KVQ_ERR_NOMEM, "context: out of memory for scratch buffers");
    }
    if (s != KVQ_OK) {
        kvq_ctx_free(c);
        return s;
    }
    *out = c;
    return KVQ_OK;
}

void kvq_ctx_free(kvq_ctx *c) {
    if (!c) return;
    kvq_kv_free(c->kv);
    free(c->tokens);
    kvq_threadpool_free(c->pool);
    kvq_free_aligned(c->x);
    kvq_free_aligned(c->xn);
    kvq_free_aligned(c->q);
    kvq_free_aligned(c->k);
    kvq_free_aligned(c->v);
    kvq_free_aligned(c->att);
    kvq_free_aligned(c->gate);
    kvq_free_aligned(c->up);
    kvq_free_aligned(c->rope);
    kvq_free_aligned(c->xq_scratch);
    kvq_free_aligned(c->x16_scratch);
    free(c);
}

void kvq_ctx_adopt(kvq_ctx *c, kvq_kv *kv, int32_t *tokens, int n) {
    kvq_kv_free(c->kv);
    free(c->tokens);
    c->kv = kv;
    c->tokens = tokens;
    c->cap_tokens = n;
    c->n_past = n;
}

int kvq_ctx_n_past(const kvq_ctx *c) { return c ? c->n_past : 0; }

const int32_t *kvq_ctx_tokens(const kvq_ctx *c, int *n) {
    if (n) *n = c ? c->n_past : 0;
    return c ? c->tokens : NULL;
}
int kvq_ctx_n_ctx(const kvq_ctx *c) { return c ? c->p.n_ctx : 0; }
kvq_isa kvq_ctx_isa(const kvq_ctx *c) { return c ? c->isa : KVQ_ISA_REF; }
double kvq_ctx_attn_seconds(const kvq_ctx *c) { return c ? c->attn_seconds : 0.0; }
size_t kvq_ctx_kv_bytes(const kvq_ctx *c) { return c ? kvq_kv_bytes_used(c->kv) : 0; }
size_t kvq_ctx_kv_bytes_f16(const kvq_ctx *c) { return c ? kvq_kv_bytes_f16(c->kv) : 0; }
int kvq_ctx_kv_n_f16_tokens(const kvq_ctx *c) { return c ? kvq_kv_n_f16_tokens(c->kv) : 0; }

kvq_status kvq_ctx_copy_kv(kvq_ctx *dst, const kvq_ctx *src, int n) {
    KVQ_RETURN_IF(!dst || !src, KVQ_ERR_INVALID_ARG, "kvq_ctx_copy_kv: NULL context");
    KVQ_RETURN_IF(dst->m != src->m, KVQ_ERR_INVALID_ARG, "kvq_ctx_copy_kv: the contexts are of different models");
    KVQ_RETURN_IF(n < dst->n_past || n > src->n_past || n > dst->p.n_ctx, KVQ_ERR_INVALID_ARG,
                  "kvq_ctx_copy_kv: to %d tokens, but the target holds %d (context %d) and the source %d", n,
                  dst->n_past, dst->p.n_ctx, src->n_past);
    KVQ_FORWARD(reserve_tokens(dst, n));
    const kvq_model *m = dst->m;
    const size_t row = (size_t)m->n_kv_head * m->head_dim;
    float *k = malloc(sizeof(float) * 2 * row);
    KVQ_RETURN_IF(!k, KVQ_ERR_NOMEM, "kvq_ctx_copy_kv: out of memory");
    float *v = k + row;
    kvq_status s = KVQ_OK;
    for (int l = 0; l < m->n_layer && s == KVQ_OK; l++)
        for (int t = dst->n_past; t < n && s == KVQ_OK; t++) {
            s = kvq_kv_read(src->kv, l, t, k, v);
            if (s == KVQ_OK) s = kvq_kv_append(dst->kv, l, dst->pool, k, v);
        }
    free(k);
    if (s != KVQ_OK) {
        kvq_kv_truncate(dst->kv, dst->n_past); /* all or nothing */
        return s;
    }
    if (n > dst->n_past)
        memcpy(dst->tokens + dst->n_past, src->tokens + dst->n_past, sizeof *dst->tokens * (size_t)(n - dst->n_past));
    dst->n_past = n;
    return KVQ_OK;
}

kvq_status kvq_ctx_truncate(kvq_ctx *c, int n) {
    KVQ_RETURN_IF(!c, KVQ_ERR_INVALID_ARG, "kvq_ctx_truncate: NULL context");
    KVQ_RETURN_IF(n < 0 || n > c->n_past, KVQ_ERR_INVALID_ARG, "truncate to %d: context holds %d tokens", n,
                  c->n_past);
    KVQ_FORWARD(kvq_kv_truncate(c->kv, n));
    c->n_past = n;
    return KVQ_OK;
}
