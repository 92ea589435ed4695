/* cmd_ppl.c — `kvq ppl`: perplexity and KL divergence of each KV config
 * against an f16 KV base, with llama-perplexity's semantics: the text is
 * tokenized once and cut into non-overlapping chunks of -c tokens; each
 * chunk starts from an empty cache (its first token replaced by BOS when the
 * model adds one, as llama-perplexity does) and is scored on its second
 * half, logits at position j predicting token j + 1.
 *
 * The loop is chunk-major: for each chunk the f16 base is evaluated first
 * and its log-softmax rows are kept in memory (exactly, f32, one chunk at a
 * time: (c/2) x n_vocab x 4 bytes), then every config is evaluated over the
 * same tokens and compared row by row over the full vocabulary.
 *
 * The base file (--save-logits / --kl-base) is compact instead: per scored
 * position the base's log-probability of the correct token and its top
 * PPL_TOPK log-probabilities (8 bytes each), 8 MB per chunk of 2048 where
 * llama.cpp's full uint16 rows would take 100 MB. KLD against a file
 * is therefore the divergence coarsened to those tokens plus one bucket for
 * the rest (ppl_kld_topk): a lower bound of the full KLD; docs/QUALITY.md
 * says how close it is on the default model. PPL, PPL ratio, same-top-1 and
 * RMS dp need only the stored values and are exact. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "ppl_stats.h"

/* Base tokens kept per scored position in a base file. On the default
 * model the coarsened KLD reads 0.5% below the full one with 1024 (2% with
 * 256); docs/QUALITY.md has the comparison. */
#define PPL_TOPK 1024
/* Scored positions per all-logits evaluation: (PIECE, n_vocab) floats. */
#define PIECE 256
#define MAX_CFG 256

static void usage(FILE *f) {
    fprintf(f,
            "usage: kvq ppl -f TEXT [-c CTX] [--chunks N] [--kv LIST] [--ctk LIST --ctv LIST]\n"
            "               [--save-logits BASE.bin | --kl-base BASE.bin] [-o md|json] [options]\n"
            "\n"
            "Perplexity and KL divergence of KV cache configs against an f16 KV base, as\n"
            "llama-perplexity computes them: the text is tokenized once and cut into\n"
            "non-overlapping chunks of CTX tokens, each evaluated from an empty cache (first\n"
            "token BOS when the model adds one) and scored on its second half.\n"
            "\n"
            "  -f, --file FILE       the text (- for stdin); scripts/prepare-kjv.sh makes one\n"
            "  -c, --ctx-size N      tokens per chunk (default 2048)\n"
            "  --chunks N            evaluate the first N chunks (default: all the text holds)\n"
            "  --kv NAMES            KV configs, comma-separated: presets (a codec name means\n"
            "                        K = V; k8v4, k_iso3, ..., auto) or K/V pairs (q8_0/q4_0)\n"
            "  -ctk, --ctk NAMES     K codecs; with -ctv every K x V pair is a config\n"
            "  -ctv, --ctv NAMES     V codecs (the side not given is f16)\n"
            "  --save-logits FILE    write the base (compact: top %d log-probs per position)\n"
            "  --kl-base FILE        read the base from FILE instead of evaluating it; -c and\n"
            "                        --chunks default to the file's, and model, text, -c and\n"
            "                        --chunks must match it\n"
            "  -o, --output FMT      md (default) or json (an array, one object per config)\n"
            "  -m, --model FILE      GGUF model (default: $KVQ_MODEL, else the cached default\n"
            "                        model; `make model` fetches it)\n"
            "  -t, --threads N       threads (default: every core)\n"
            "  -b, --batch-size N    prompt tokens per forward chunk (default " CLI_STR(KVQ_DEFAULT_N_BATCH) ")\n"
            "  --kv-sinks N, --kv-boundary L, --kv-no-center, --kv-seed N, --kv-layout L,\n"
            "  --int8-prefill, --float-decode, --mmap\n"
            "                        as in `kvq run --help`\n"
            "\n"
            "The base is f16 K and V with no sinks or boundary layers; --kv-sinks,\n"
            "--kv-boundary, --kv-no-center and --kv-seed apply to every other config.\n"
            "Columns: bits/value of K, V and their mean (the codec's row bytes, scales\n"
            "included, weighted over boundary layers), PPL, PPL ratio to the base, mean KLD\n"
            "(nats) with its standard error, 99th percentile and max KLD, the share of\n"
            "positions whose most likely token is the base's, and the RMS of the change in\n"
            "the probability of the correct token. Progress and an ETA go to stderr.\n"
            "docs/QUALITY.md has the tables for every codec and preset.\n"
            "\nexample:\n"
            "  scripts/prepare-kjv.sh /tmp/kjv.txt\n"
            "  kvq ppl -f /tmp/kjv.txt -c 2048 --chunks 4 --kv q8_0,q4_0,turbo4,k8v4,q8_0/turbo3\n",
            PPL_TOPK);
}

typedef struct {
    const char *ctk, *ctv, *preset;
    char label[96];
    int base;             /* the f16 reference row */
    double bpv_k, bpv_v;  /* codec bits/value, weighted over boundary layers */
    size_t kv_bytes;      /* the store's bytes after the last chunk */
    int kv_tokens;
    double seconds;
    ppl_acc acc;
} ppl_cfg;

typedef struct {
    cli_model_opts mo;
    cli_str_list ctks, ctvs, presets;
    const char *text_path, *save_path, *base_path;
    long n_chunks;
    int json;
    kvq_model *model;
    kvq_model_info info;
    int n_ctx, first, n_scored; /* scored positions per chunk: first .. n_ctx - 2 */
    ppl_cfg cfgs[MAX_CFG];
    int n_cfg;
    /* The base of the chunk being scored. */
    float *base_lp;    /* (n_scored, n_vocab) log-softmax rows, when evaluated here */
    unsigned char *rec; /* (n_scored, rec_bytes) records, with --kl-base or --save-logits */
    size_t rec_bytes;
    double *base_nll;  /* (n_scored) */
    int32_t *base_top1; /* (n_scored) */
    float *logits;     /* (PIECE, n_vocab) */
    float *row;        /* (n_vocab) */
    /* Progress. */
    int is_tty;
    double t_start, eval_s;
    long evals_done, evals_total;
} ppl_run;

/* ------------------------------------------------------------ configs */

static int add_cfg(ppl_run *R, const char *ctk, const char *ctv, const char *preset, int base) {
    for (int i = 0; i < R->n_cfg; i++)
        if (!strcmp(R->cfgs[i].ctk, ctk) && !strcmp(R->cfgs[i].ctv, ctv) && R->cfgs[i].base == base) return 1;
    if (R->n_cfg == MAX_CFG) {
        fprintf(stderr, "kvq ppl: more than %d KV configs\n", MAX_CFG);
        return 0;
    }
    ppl_cfg *c = &R->cfgs[R->n_cfg++];
    memset(c, 0, sizeof *c);
    c->ctk = ctk;
    c->ctv = ctv;
    c->preset = preset;
    c->base = base;
    const kvq_ctx_params *p = &R->mo.ctx;
    int n = base ? snprintf(c->label, sizeof c->label, "f16 (base)")
                 : preset ? snprintf(c->label, sizeof c->label, "%s", preset)
                          : snprintf(c->label, sizeof c->label, "%s/%s", ctk, ctv);
    if (!base && p->n_sinks && n < (int)sizeof c->label)
        n += snprintf(c->label + n, sizeof c->label - (size_t)n, " sinks=%d", p->n_sinks);
    if (!base && p->boundary_layers && n < (int)sizeof c->label)
        n += snprintf(c->label + n, sizeof c->label - (size_t)n, " boundary=%d", p->boundary_layers);
    if (!base && !p->centering && n < (int)sizeof c->label)
        snprintf(c->label + n, sizeof c->label - (size_t)n, " no-center");
    return 1;
}

/* The base (unless read from a file), every -ctk x -ctv pair, then every
 * --kv item: a preset name or "K/V" (split in place; the names live in the
 * list's store). */
static int build_cfgs(ppl_run *R) {
    if (!R->base_path && !add_cfg(R, "f16", "f16", NULL, 1)) return 0;
    if (R->ctks.n || R->ctvs.n) {
        const int nk = R->ctks.n ? R->ctks.n : 1, nv = R->ctvs.n ? R->ctvs.n : 1;
        for (int i = 0; i < nk; i++)
            for (int j = 0; j < nv; j++)
                if (!add_cfg(R, R->ctks.n ? R->ctks.v[i] : "f16", R->ctvs.n ? R->ctvs.v[j] : "f16", NULL, 0))
                    return 0;
    }
    for (int i = 0; i < R->presets.n; i++) {
        char *name = (char *)R->presets.v[i], *slash = strchr(name, '/');
        const char *k, *v;
        if (slash) {
            *slash = '\0';
            k = name;
            v = slash + 1;
            if (!*k || !*v) {
                fprintf(stderr, "kvq ppl: --kv: '%s/%s' is not a K/V pair of codec names\n", k, v);
                return 0;
            }
            if (!add_cfg(R, k, v, NULL, 0)) return 0;
        } else {
            if (kvq_kv_preset(name, &k, &v) != KVQ_OK) {
                fprintf(stderr, "kvq ppl: --kv: %s\n", kvq_last_error());
                return 0;
            }
            if (!add_cfg(R, k, v, name, 0)) return 0;
        }
    }
    if (R->n_cfg == 0) {
        fprintf(stderr, "kvq ppl: --kl-base needs KV configs to compare (--kv, -ctk, -ctv)\n");
        return 0;
    }
    return 1;
}

/* Checks every codec name at the model's head_dim and fills in bits/value:
 * boundary layers hold q8_0 for both K and V. */
static int cfg_bits(ppl_run *R) {
    const int L = R->info.n_layer, bl = R->mo.ctx.boundary_layers;
    int n_boundary = 0;
    for (int l = 0; l < L; l++) n_boundary += l < bl || l >= L - bl;
    double q8 = 16.0;
    kvq_codec *c = NULL;
    if (kvq_codec_create("q8_0", R->info.head_dim, 0, &c) == KVQ_OK) q8 = kvq_codec_bits_per_value(c);
    kvq_codec_free(c);
    for (int i = 0; i < R->n_cfg; i++) {
        ppl_cfg *g = &R->cfgs[i];
        const char *names[2] = {g->ctk, g->ctv};
        double *bits[2] = {&g->bpv_k, &g->bpv_v};
        for (int j = 0; j < 2; j++) {
            if (kvq_codec_create(names[j], R->info.head_dim, 0, &c) != KVQ_OK) {
                fprintf(stderr, "kvq ppl: %s: %s\n", j ? "V codec" : "K codec", kvq_last_error());
                return 0;
            }
            const double b = kvq_codec_bits_per_value(c);
            kvq_codec_free(c);
            const int nb = g->base ? 0 : n_boundary;
            *bits[j] = ((double)nb * q8 + (double)(L - nb) * b) / L;
        }
    }
    return 1;
}

/* ------------------------------------------------------------ base file */

/* Little-endian layout, 64-byte header:
 *   0  "KVQPPLB1"       8  u32 n_vocab      12 u32 n_ctx
 *   16 u32 n_chunks     20 u32 first        24 u32 top_k     28 u32 0
 *   32 u64 model hash (FNV-1a 64 of the model file)
 *   40 u64 token hash (FNV-1a 64 of every evaluated chunk's ids)
 *   48 16 zero bytes
 * then per chunk, per scored position: f32 -log p(correct token), top_k
 * i32 token ids (most likely first), top_k f32 log-probabilities. */
#define HDR_BYTES 64
static const char file_magic[8] = {'K', 'V', 'Q', 'P', 'P', 'L', 'B', '1'};

static void put32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get32(const unsigned char *p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
    return v;
}
static uint64_t get64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}
static float getf(const unsigned char *p) {
    const uint32_t u = get32(p);
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static void putf(unsigned char *p, float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    put32(p, u);
}

static uint64_t fnv1a(uint64_t h, const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}
#define FNV_OFFSET 0xcbf29ce484222325ull

static int hash_file(const char *path, uint64_t *out) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "kvq ppl: cannot open %s: %s\n", path, strerror(errno));
        return 0;
    }
    static unsigned char buf[1 << 20];
    uint64_t h = FNV_OFFSET;
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, f)) > 0) h = fnv1a(h, buf, got);
    const int err = ferror(f);
    fclose(f);
    if (err) {
        fprintf(stderr, "kvq ppl: cannot read %s\n", path);
        return 0;
    }
    *out = h;
    return 1;
}

static uint64_t hash_tokens(const int32_t *ids, size_t n) {
    uint64_t h = FNV_OFFSET;
    unsigned char b[4];
    for (size_t i = 0; i < n; i++) {
        put32(b, (uint32_t)ids[i]);
        h = fnv1a(h, b, 4);
    }
    return h;
}

typedef struct {
    uint32_t n_vocab, n_ctx, n_chunks, first, top_k;
    uint64_t model_hash, token_hash;
} base_hdr;

static int write_hdr(FILE *f, const base_hdr *h) {
    unsigned char b[HDR_BYTES] = {0};
    memcpy(b, file_magic, 8);
    put32(b + 8, h->n_vocab);
    put32(b + 12, h->n_ctx);
    put32(b + 16, h->n_chunks);
    put32(b + 20, h->first);
    put32(b + 24, h->top_k);
    put64(b + 32, h->model_hash);
    put64(b + 40, h->token_hash);
    return fwrite(b, 1, HDR_BYTES, f) == HDR_BYTES;
}

/* Reads and checks the header and that the file holds all its records. */
static int read_hdr(FILE *f, const char *path, base_hdr *h) {
    unsigned char b[HDR_BYTES];
    if (fread(b, 1, HDR_BYTES, f) != HDR_BYTES || memcmp(b, file_magic, 8) != 0) {
        fprintf(stderr, "kvq ppl: --kl-base %s: not a kvq ppl base file (make one with --save-logits)\n", path);
        return 0;
    }
    h->n_vocab = get32(b + 8);
    h->n_ctx = get32(b + 12);
    h->n_chunks = get32(b + 16);
    h->first = get32(b + 20);
    h->top_k = get32(b + 24);
    h->model_hash = get64(b + 32);
    h->token_hash = get64(b + 40);
    if (h->n_ctx < 4 || h->n_ctx > (1u << 24) || h->first != h->n_ctx / 2 || h->n_chunks == 0 || h->top_k == 0 ||
        h->top_k > h->n_vocab || h->n_vocab > (1u << 24)) {
        fprintf(stderr, "kvq ppl: --kl-base %s: corrupt header\n", path);
        return 0;
    }
    const double want = HDR_BYTES + (double)h->n_chunks * (h->n_ctx - h->first - 1) * (4.0 + 8.0 * h->top_k);
    if (fseek(f, 0, SEEK_END) != 0 || (double)ftell(f) != want || fseek(f, HDR_BYTES, SEEK_SET) != 0) {
        fprintf(stderr, "kvq ppl: --kl-base %s: truncated or oversized (want %.0f bytes)\n", path, want);
        return 0;
    }
    return 1;
}

/* Reads one chunk's records into R->rec and checks each: ids in range,
 * log-probs finite and <= 0, most likely first. */
static int read_chunk(ppl_run *R, FILE *f, int chunk) {
    const size_t n = (size_t)R->n_scored;
    if (fread(R->rec, R->rec_bytes, n, f) != n) {
        fprintf(stderr, "kvq ppl: --kl-base %s: cannot read chunk %d\n", R->base_path, chunk + 1);
        return 0;
    }
    for (size_t j = 0; j < n; j++) {
        const unsigned char *r = R->rec + j * R->rec_bytes;
        const float nll = getf(r);
        int ok = isfinite(nll) && nll >= -1e-3f;
        float prev = 0.0f;
        for (int i = 0; ok && i < PPL_TOPK; i++) {
            const uint32_t id = get32(r + 4 + 4 * (size_t)i);
            const float lp = getf(r + 4 + 4 * (size_t)PPL_TOPK + 4 * (size_t)i);
            ok = id < (uint32_t)R->info.n_vocab && isfinite(lp) && lp <= 1e-3f && (i == 0 || lp <= prev);
            prev = lp;
        }
        if (!ok) {
            fprintf(stderr, "kvq ppl: --kl-base %s: corrupt record %zu of chunk %d\n", R->base_path, j, chunk + 1);
            return 0;
        }
        R->base_nll[j] = nll;
        R->base_top1[j] = (int32_t)get32(r + 4);
    }
    return 1;
}

/* ------------------------------------------------------------ scoring */

static void progress(ppl_run *R, int chunk, int n_chunks, const ppl_cfg *c) {
    const double el = cli_now() - R->t_start;
    char eta[32] = "ETA unknown until one run ends";
    if (R->evals_done)
        snprintf(eta, sizeof eta, "ETA %.0f s",
                 R->eval_s / (double)R->evals_done * (double)(R->evals_total - R->evals_done));
    fprintf(stderr, "%skvq ppl: chunk %d/%d, %s (%ld/%ld) | %.0f s elapsed, %s%s", R->is_tty ? "\r" : "", chunk + 1,
            n_chunks, c->label, R->evals_done + 1, R->evals_total, el, eta, R->is_tty ? "\033[K" : "\n");
}

/* One scored row: the base keeps it (and writes its record), a config is
 * compared with the base. j: scored position, target: the correct token. */
static int score_row(ppl_run *R, ppl_cfg *c, int j, const float *logits, int32_t target, FILE *save) {
    const int V = R->info.n_vocab;
    if (c->base) {
        float *lp = R->base_lp + (size_t)j * V;
        ppl_log_softmax(logits, V, lp);
        R->base_nll[j] = -(double)lp[target];
        R->base_top1[j] = ppl_argmax(logits, V);
        if (save) {
            unsigned char *r = R->rec;
            int32_t ids[PPL_TOPK];
            float vals[PPL_TOPK];
            ppl_topk(lp, V, PPL_TOPK, ids, vals);
            putf(r, -lp[target]);
            for (int i = 0; i < PPL_TOPK; i++) {
                put32(r + 4 + 4 * (size_t)i, (uint32_t)ids[i]);
                putf(r + 4 + 4 * (size_t)PPL_TOPK + 4 * (size_t)i, vals[i]);
            }
            if (fwrite(r, R->rec_bytes, 1, save) != 1) {
                fprintf(stderr, "%skvq ppl: cannot write %s: %s\n", R->is_tty ? "\n" : "", R->save_path,
                        strerror(errno));
                return 0;
            }
        }
        return ppl_acc_add(&c->acc, R->base_nll[j], R->base_nll[j], 0.0, 1);
    }
    ppl_log_softmax(logits, V, R->row);
    double kld;
    if (R->base_lp) {
        kld = ppl_kld(R->base_lp + (size_t)j * V, R->row, V);
    } else {
        const unsigned char *r = R->rec + (size_t)j * R->rec_bytes;
        int32_t ids[PPL_TOPK];
        float vals[PPL_TOPK];
        for (int i = 0; i < PPL_TOPK; i++) {
            ids[i] = (int32_t)get32(r + 4 + 4 * (size_t)i);
            vals[i] = getf(r + 4 + 4 * (size_t)PPL_TOPK + 4 * (size_t)i);
        }
        kld = ppl_kld_topk(ids, vals, PPL_TOPK, R->row);
    }
    return ppl_acc_add(&c->acc, R->base_nll[j], -(double)R->row[target], kld,
                       ppl_argmax(logits, V) == R->base_top1[j]);
}

/* Evaluates one chunk for config c in a fresh context: the first half
 * without logits, the rest PIECE positions at a time. The last token's
 * logits score nothing, but it is evaluated as llama-perplexity does:
 * within a batch every token is appended before attention, so a tile it
 * completes is compressed before the positions before it attend to it. */
static int eval_chunk(ppl_run *R, ppl_cfg *c, const int32_t *toks, FILE *save) {
    kvq_ctx_params p = R->mo.ctx;
    p.n_ctx = R->n_ctx;
    p.ctk = c->ctk;
    p.ctv = c->ctv;
    if (c->base) p.n_sinks = p.boundary_layers = 0;
    kvq_ctx *ctx = NULL;
    const double t0 = cli_now();
    int ok = 0;
    if (kvq_ctx_create(R->model, &p, &ctx) != KVQ_OK) goto fail;
    if (kvq_ctx_eval(ctx, toks, R->first, NULL, 0) != KVQ_OK) goto fail;
    const int V = R->info.n_vocab;
    for (int p0 = R->first; p0 < R->n_ctx; p0 += PIECE) {
        const int n = R->n_ctx - p0 < PIECE ? R->n_ctx - p0 : PIECE;
        if (kvq_ctx_eval(ctx, toks + p0, n, R->logits, 1) != KVQ_OK) goto fail;
        for (int r = 0; r < n && p0 + r + 1 < R->n_ctx; r++)
            if (!score_row(R, c, p0 - R->first + r, R->logits + (size_t)r * V, toks[p0 + r + 1], save)) goto done;
    }
    c->kv_bytes = kvq_ctx_kv_bytes(ctx);
    c->kv_tokens = kvq_ctx_n_past(ctx);
    ok = 1;
    goto done;
fail:
    fprintf(stderr, "%skvq ppl: %s: %s\n", R->is_tty ? "\n" : "", c->label, kvq_last_error());
done:
    kvq_ctx_free(ctx);
    const double dt = cli_now() - t0;
    c->seconds += dt;
    R->eval_s += dt;
    R->evals_done++;
    return ok;
}

/* ------------------------------------------------------------ output */

static double bpv_store(const ppl_run *R, const ppl_cfg *c) {
    const double values = 2.0 * R->info.n_layer * R->info.n_kv_head * R->info.head_dim * (double)c->kv_tokens;
    return values > 0 ? (double)c->kv_bytes * 8.0 / values : 0.0;
}

static void json_str(const char *s) {
    putchar('"');
    for (; *s; s++) {
        const unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') printf("\\%c", ch);
        else if (ch < 0x20) printf("\\u%04x", ch);
        else putchar(ch);
    }
    putchar('"');
}

static void print_results(ppl_run *R, int n_chunks) {
    const kvq_ctx_params *p = &R->mo.ctx;
    char mode[32];
    if (R->base_lp) snprintf(mode, sizeof mode, "full");
    else snprintf(mode, sizeof mode, "top%d", PPL_TOPK);
    if (R->json) printf("[\n");
    for (int i = 0; i < R->n_cfg; i++) {
        ppl_cfg *c = &R->cfgs[i];
        ppl_summary s;
        ppl_acc_summary(&c->acc, &s);
        if (R->json) {
            printf("  {\"label\": ");
            json_str(c->label);
            printf(", \"ctk\": ");
            json_str(c->ctk);
            printf(", \"ctv\": ");
            json_str(c->ctv);
            printf(", \"kv_preset\": ");
            if (c->preset) json_str(c->preset);
            else printf("null");
            printf(", \"base\": %s, \"n_sinks\": %d, \"boundary_layers\": %d, \"centering\": %s, ",
                   c->base ? "true" : "false", c->base ? 0 : p->n_sinks, c->base ? 0 : p->boundary_layers,
                   p->centering ? "true" : "false");
            printf("\"bpv_k\": %.4f, \"bpv_v\": %.4f, \"bpv\": %.4f, \"bpv_store\": %.4f, ", c->bpv_k, c->bpv_v,
                   (c->bpv_k + c->bpv_v) / 2, bpv_store(R, c));
            printf("\"ppl\": %.6f, \"ppl_stderr\": %.6f, \"ppl_ratio\": %.6f, \"ppl_ratio_stderr\": %.6f, ", s.ppl,
                   s.ppl_se, s.ppl_ratio, s.ppl_ratio_se);
            printf("\"kld_mean\": %.8f, \"kld_stderr\": %.8f, \"kld_p99\": %.8f, \"kld_max\": %.8f, ", s.kld_mean,
                   s.kld_se, s.kld_p99, s.kld_max);
            printf("\"top1_pct\": %.4f, \"top1_stderr\": %.4f, \"rms_dp\": %.8f, \"rms_dp_stderr\": %.8f, ",
                   s.top1_pct, s.top1_se, s.rms_dp, s.rms_dp_se);
            printf("\"kld_mode\": \"%s\", \"n_ctx\": %d, \"n_chunks\": %d, \"n_scored\": %zu, \"seconds\": %.2f}%s\n",
                   mode, R->n_ctx, n_chunks, s.n, c->seconds, i + 1 < R->n_cfg ? "," : "");
            continue;
        }
        if (i == 0) {
            printf("model %s | -c %d | %d chunk%s | %zu scored tokens | base PPL %.4f +- %.4f | KLD over %s\n\n",
                   R->mo.model, R->n_ctx, n_chunks, n_chunks == 1 ? "" : "s", s.n, s.base_ppl, s.base_ppl_se,
                   R->base_lp ? "the full vocabulary" : "the base file's top tokens + the rest (a lower bound)");
            printf("| KV config | K | V | bpv K | bpv V | bpv | PPL | PPL ratio | KLD mean | KLD p99 | KLD max "
                   "| same top-1 %% | RMS dp %% |\n"
                   "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
        }
        printf("| %s | %s | %s | %.2f | %.2f | %.2f | %.4f | %.4f | %.5f +- %.5f | %.4f | %.3f | %.2f +- %.2f "
               "| %.3f +- %.3f |\n",
               c->label, c->ctk, c->ctv, c->bpv_k, c->bpv_v, (c->bpv_k + c->bpv_v) / 2, s.ppl, s.ppl_ratio,
               s.kld_mean, s.kld_se, s.kld_p99, s.kld_max, s.top1_pct, s.top1_se, 100 * s.rms_dp,
               100 * s.rms_dp_se);
    }
    if (R->json) printf("]\n");
}

/* ------------------------------------------------------------ main */

static int is(const char *a, const char *s1, const char *s2) { return !strcmp(a, s1) || (s2 && !strcmp(a, s2)); }

static int parse_args(ppl_run *R, int argc, char **argv, char **store, int *n_store) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        cli_str_list *list = NULL;
        if (is(a, "-h", "--help")) {
            usage(stdout);
            return 0;
        } else if (is(a, "-ctk", "--ctk") || is(a, "--cache-type-k", NULL)) {
            list = &R->ctks;
        } else if (is(a, "-ctv", "--ctv") || is(a, "--cache-type-v", NULL)) {
            list = &R->ctvs;
        } else if (is(a, "--kv", NULL)) {
            list = &R->presets;
        } else if (is(a, "--chunks", NULL)) {
            if (!cli_parse_int(a, val, 1, 1 << 20, &R->n_chunks)) return -1;
            i++;
            continue;
        } else if (is(a, "-o", "--output")) {
            if (!val || (strcmp(val, "md") && strcmp(val, "json"))) {
                fprintf(stderr, "kvq ppl: -o takes md or json%s%s%s\n", val ? ", not '" : "", val ? val : "",
                        val ? "'" : "");
                return -1;
            }
            R->json = !strcmp(val, "json");
            i++;
            continue;
        } else if (is(a, "-f", "--file") || is(a, "--save-logits", NULL) || is(a, "--kl-base", NULL)) {
            if (!val) {
                fprintf(stderr, "kvq ppl: %s needs a file\n", a);
                return -1;
            }
            *(is(a, "-f", "--file") ? &R->text_path : is(a, "--save-logits", NULL) ? &R->save_path : &R->base_path) =
                val;
            i++;
            continue;
        } else {
            const int r = cli_model_opts_parse(&R->mo, argc, argv, &i);
            if (r < 0) return -1;
            if (r == 0) {
                fprintf(stderr, "kvq ppl: unknown option '%s' (see kvq ppl --help)\n", a);
                return -1;
            }
            continue;
        }
        if (*n_store >= 3 * CLI_LIST_MAX) {
            fprintf(stderr, "kvq ppl: too many list options\n");
            return -1;
        }
        if (!cli_parse_str_list("ppl", a, val, list, &store[(*n_store)++])) return -1;
        i++;
    }
    if (!R->text_path) {
        fprintf(stderr, "kvq ppl: give the text with -f FILE (see kvq ppl --help)\n");
        return -1;
    }
    if (R->save_path && R->base_path) {
        fprintf(stderr, "kvq ppl: --save-logits and --kl-base exclude each other (the base is either made or read)\n");
        return -1;
    }
    if (R->mo.ctx.n_ctx && R->mo.ctx.n_ctx < 4) {
        fprintf(stderr, "kvq ppl: -c %d is too small: a chunk needs at least 4 tokens\n", R->mo.ctx.n_ctx);
        return -1;
    }
    return 1;
}

/* The model adds BOS when encoding nothing yields one token. */
static int model_adds_bos(const kvq_tokenizer *tok) {
    size_t n = 0;
    const kvq_status s = kvq_tokenizer_encode(tok, "", 0, -1, 0, NULL, 0, &n);
    return (s == KVQ_OK || s == KVQ_ERR_RANGE) && n == 1;
}

int cmd_ppl(int argc, char **argv) {
    static ppl_run R; /* MAX_CFG accumulators: too big for the stack */
    memset(&R, 0, sizeof R);
    cli_model_opts_init(&R.mo);
    char *store[3 * CLI_LIST_MAX] = {0};
    int n_store = 0, rc = 2;
    char *text = NULL;
    int32_t *ids = NULL;
    kvq_tokenizer *tok = NULL;
    FILE *save = NULL, *basef = NULL;
    const int pa = parse_args(&R, argc, argv, store, &n_store);
    if (pa <= 0) {
        rc = pa < 0 ? 2 : 0;
        goto done;
    }
    if (!build_cfgs(&R)) goto done;
    rc = 1;
    base_hdr fh = {0};
    if (R.base_path) {
        if (!(basef = fopen(R.base_path, "rb"))) {
            fprintf(stderr, "kvq ppl: cannot open %s: %s\n", R.base_path, strerror(errno));
            goto done;
        }
        if (!read_hdr(basef, R.base_path, &fh)) goto done;
        if (R.mo.ctx.n_ctx && (uint32_t)R.mo.ctx.n_ctx != fh.n_ctx) {
            fprintf(stderr, "kvq ppl: --kl-base %s was made with -c %u, not -c %d\n", R.base_path, fh.n_ctx,
                    R.mo.ctx.n_ctx);
            goto done;
        }
        if (R.n_chunks && (uint32_t)R.n_chunks != fh.n_chunks) {
            fprintf(stderr, "kvq ppl: --kl-base %s holds %u chunks, not --chunks %ld\n", R.base_path, fh.n_chunks,
                    R.n_chunks);
            goto done;
        }
        if (fh.top_k != PPL_TOPK) {
            fprintf(stderr, "kvq ppl: --kl-base %s keeps the top %u tokens; this kvq reads top %d\n", R.base_path,
                    fh.top_k, PPL_TOPK);
            goto done;
        }
        R.mo.ctx.n_ctx = (int)fh.n_ctx;
        R.n_chunks = fh.n_chunks;
    }
    R.n_ctx = R.mo.ctx.n_ctx ? R.mo.ctx.n_ctx : 2048;
    R.first = R.n_ctx / 2;
    R.n_scored = R.n_ctx - R.first - 1;

    size_t text_len = 0;
    if (!(text = cli_read_file(R.text_path, &text_len))) goto done;
    if (!cli_model_load(&R.mo, &R.model)) goto done;
    kvq_model_get_info(R.model, &R.info);
    if (!cfg_bits(&R)) {
        rc = 2;
        goto done;
    }
    if (kvq_model_tokenizer(R.model, &tok) != KVQ_OK) {
        fprintf(stderr, "kvq ppl: %s\n", kvq_last_error());
        goto done;
    }
    int n_ids = 0;
    if (!cli_tokenize(tok, text, text_len, -1, 0, &ids, &n_ids)) goto done;
    const long avail = n_ids / R.n_ctx;
    if (avail == 0) {
        fprintf(stderr, "kvq ppl: %s holds %d tokens, fewer than one chunk of -c %d\n", R.text_path, n_ids, R.n_ctx);
        goto done;
    }
    if (R.n_chunks > avail) {
        fprintf(stderr, "kvq ppl: --chunks %ld: %s holds only %ld chunks of %d tokens\n", R.n_chunks, R.text_path,
                avail, R.n_ctx);
        goto done;
    }
    const int n_chunks = (int)(R.n_chunks ? R.n_chunks : avail);
    if (R.n_ctx > R.info.n_ctx_train)
        fprintf(stderr, "kvq ppl: note: -c %d is past the model's trained context (%d)\n", R.n_ctx,
                R.info.n_ctx_train);
    /* Each chunk starts with BOS where the model adds one (llama-perplexity). */
    const int32_t bos = kvq_tokenizer_special_id(tok, KVQ_SPECIAL_BOS);
    if (model_adds_bos(tok) && bos >= 0)
        for (int c = 0; c < n_chunks; c++) ids[(size_t)c * R.n_ctx] = bos;

    const size_t V = (size_t)R.info.n_vocab;
    R.rec_bytes = 4 + 8 * (size_t)PPL_TOPK;
    R.logits = malloc(sizeof(float) * V * PIECE);
    R.row = malloc(sizeof(float) * V);
    R.base_nll = malloc(sizeof(double) * (size_t)R.n_scored);
    R.base_top1 = malloc(sizeof(int32_t) * (size_t)R.n_scored);
    R.rec = malloc(R.rec_bytes * (size_t)(R.base_path ? R.n_scored : 1));
    if (!R.base_path) R.base_lp = malloc(sizeof(float) * V * (size_t)R.n_scored);
    if (!R.logits || !R.row || !R.base_nll || !R.base_top1 || !R.rec || (!R.base_path && !R.base_lp)) {
        fprintf(stderr, "kvq ppl: out of memory for %d scored positions x %zu vocabulary\n", R.n_scored, V);
        goto done;
    }

    if (R.base_path || R.save_path) {
        base_hdr h = {(uint32_t)V, (uint32_t)R.n_ctx, (uint32_t)n_chunks, (uint32_t)R.first, PPL_TOPK, 0,
                      hash_tokens(ids, (size_t)n_chunks * R.n_ctx)};
        if (!hash_file(R.mo.model, &h.model_hash)) goto done;
        if (R.base_path) {
            if (fh.n_vocab != h.n_vocab || fh.model_hash != h.model_hash) {
                fprintf(stderr, "kvq ppl: --kl-base %s was made with another model than %s\n", R.base_path,
                        R.mo.model);
                goto done;
            }
            if (fh.token_hash != h.token_hash) {
                fprintf(stderr, "kvq ppl: --kl-base %s was made from another text than %s\n", R.base_path,
                        R.text_path);
                goto done;
            }
        } else if (!(save = fopen(R.save_path, "wb")) || !write_hdr(save, &h)) {
            fprintf(stderr, "kvq ppl: cannot write %s: %s\n", R.save_path, strerror(errno));
            goto done;
        }
    }

    R.is_tty = isatty(STDERR_FILENO);
    R.t_start = cli_now();
    R.evals_total = (long)n_chunks * R.n_cfg;
    for (int c = 0; c < n_chunks; c++) {
        const int32_t *toks = ids + (size_t)c * R.n_ctx;
        if (R.base_path && !read_chunk(&R, basef, c)) goto done;
        for (int k = 0; k < R.n_cfg; k++) {
            progress(&R, c, n_chunks, &R.cfgs[k]);
            if (!eval_chunk(&R, &R.cfgs[k], toks, R.cfgs[k].base ? save : NULL)) goto done;
        }
    }
    if (R.is_tty) fprintf(stderr, "\r\033[K");
    fprintf(stderr, "kvq ppl: %d chunk%s x %d configs in %.1f s\n", n_chunks, n_chunks == 1 ? "" : "s", R.n_cfg,
            cli_now() - R.t_start);
    if (save) {
        const int bad = fclose(save) != 0;
        save = NULL;
        if (bad) {
            fprintf(stderr, "kvq ppl: cannot write %s: %s\n", R.save_path, strerror(errno));
            goto done;
        }
    }
    print_results(&R, n_chunks);
    rc = 0;
done:
    if (save) fclose(save);
    if (basef) fclose(basef);
    for (int i = 0; i < n_store; i++) free(store[i]);
    for (int k = 0; k < R.n_cfg; k++) ppl_acc_free(&R.cfgs[k].acc);
    free(R.logits);
    free(R.row);
    free(R.base_nll);
    free(R.base_top1);
    free(R.rec);
    free(R.base_lp);
    free(ids);
    free(text);
    kvq_tokenizer_free(tok);
    kvq_model_free(R.model);
    return rc;
}
