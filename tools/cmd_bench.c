/* cmd_bench.c — `kvq bench`: llama-bench-compatible throughput over a grid of
 * models, thread counts, KV configs, depths, prompt and generation lengths.
 *
 * The method (reports/004): the f16/f16 KV arm is always measured in the same
 * run as a control, and it runs before and after every other run (f16 A f16
 * B f16 ... f16), so each run of a config has a control on either side: its
 * ratio to f16 is paired with the control of its own moment, and machine
 * drift over a long round does not read as a difference between configs.
 * Each depth is prefilled once per KV config into a context that stays
 * alive, and every measurement truncates back to that depth, so deep sweeps
 * pay the prefill once. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "bench_stats.h"
#include "cli.h"

#define LIST_MAX 64
#define CV_WARN 0.05
#define REPS_MAX 1000

static void usage(FILE *f) {
    fprintf(f, "usage: kvq bench [options]\n"
               "\n"
               "Measures prompt processing (pp) and generation (tg) speed over the cartesian\n"
               "product of the list options, like llama-bench. Tokens are random ids from a\n"
               "fixed seed. Depth d means d tokens already in the KV cache: each depth is\n"
               "prefilled once per KV config and every run truncates back to it.\n"
               "(--fill copy: only the f16 control prefills; the other configs take its K/V\n"
               "rows, encoded in their codecs: same bytes to read, far less set-up at depth.)\n"
               "The f16/f16 KV config is always measured as a control and runs between every\n"
               "two other runs (f16 A f16 B f16 ... f16): each run of a config is compared\n"
               "with the mean of the control runs on either side of it, so machine drift\n"
               "does not read as a difference between configs. (The control takes about\n"
               "half of a sweep's runs.)\n"
               "\n"
               "List options take comma-separated values and may be repeated:\n"
               "  -m, --model FILES     GGUF models (default: the default model, see below)\n"
               "  -p, --n-prompt N      prompt lengths: a pp test evaluates N tokens at depth d\n"
               "                        (default 512; 0 = no pp test)\n"
               "  -n, --n-gen N         generation lengths: a tg test evaluates N tokens one at\n"
               "                        a time at depth d (default 128; 0 = no tg test)\n"
               "  -d, --n-depth D       depths: tokens in the cache before each test (default 0)\n"
               "  -ctk, --ctk, --cache-type-k T   K codecs (default f16)\n"
               "  -ctv, --ctv, --cache-type-v T   V codecs (default f16); the KV configs are\n"
               "                        every -ctk x -ctv pair plus every --kv preset\n"
               "  --kv NAMES            KV presets: a codec name (K = V) or k8v4, k_iso3, k_iso4,\n"
               "                        k_rotor3, k_rotor4, iso3_sym, iso4_sym, rotor3_sym,\n"
               "                        rotor4_sym, rot_k_tq4v, auto\n"
               "  -t, --threads N       thread counts (default: every core)\n"
               "Single-valued options:\n"
               "  -r, --repetitions N   runs per test (default 5)\n"
               "  -o, --output FMT      md (default; table then summary), csv, json, jsonl\n"
               "  --plot FILE.svg       draw generation t/s against depth, one line per KV config\n"
               "  --fill prefill|copy   how configs reach a depth: each prefills (default, as\n"
               "                        llama-bench), or each copies the f16 control's rows\n"
               "  -c, --ctx-size N      context length (default: largest depth + longest test)\n"
               "  -b, --batch-size N    prompt tokens per forward chunk (default " CLI_STR(KVQ_DEFAULT_N_BATCH) ")\n"
               "  --kv-sinks N, --kv-boundary L, --kv-no-center, --kv-seed N, --kv-layout L\n"
               "                        as in `kvq run --help`, applied to every KV config\n"
               "  --mmap                map the model files instead of reading them into huge\n"
               "                        pages (as `kvq run --help` says)\n"
               "\n"
               "Output fields (csv/json/jsonl) use llama-bench's names: model_filename,\n"
               "model_type, model_size (bytes), model_n_params, n_batch, n_threads, type_k,\n"
               "type_v, n_prompt, n_gen, n_depth, test_time, avg_ns, stddev_ns, avg_ts,\n"
               "stddev_ts, samples_ns, samples_ts; and kvq's own: kv_preset, kv_bytes (cache\n"
               "bytes at the end of a run: depth + test tokens), kv_bytes_f16 (what f16 would\n"
               "take), peak_rss_bytes (the process's peak resident memory so far: every KV\n"
               "config's context is alive at once), isa, attn_frac (share of the run's time\n"
               "spent in fused attention over the cache), cv (stddev_ts / avg_ts), vs_f16\n"
               "(speed over the f16 control's: the median over repetitions of the bracketing\n"
               "control runs' mean time over the run's time; 1 for the control), vs_f16_cv\n"
               "(the CV of those paired ratios; 0 for the control).\n"
               "\n"
               "The md summary fits, per KV config, decode ms/token = a + b x depth over the\n"
               "depths measured (b in ms per 1k KV tokens, with R^2), and gives vs_f16 for tg\n"
               "and the KV MiB at each depth; for each -p size, the pp t/s and its vs_f16 at\n"
               "each depth. Cells whose CV exceeds 5%% are flagged, and so is a vs_f16 whose\n"
               "paired ratios' CV does. A progress line goes to stderr.\n"
               "\n"
               "example: kvq bench -p 512 -n 128 -d 0,4096,32768 --kv f16,q8_0,turbo4 -r 3 \\\n"
               "             --plot tg.svg\n"
               "\n"
               "The default model: $KVQ_MODEL, else the cached SmolLM2-135M-Instruct Q4_1\n"
               "(`make model` fetches it).\n");
}

/* ------------------------------------------------------------ options */

typedef struct {
    long v[LIST_MAX];
    int n;
} int_list;

typedef cli_str_list str_list;

/* Appends the comma-separated whole numbers of text to l. */
static int parse_int_list(const char *flag, const char *text, long lo, long hi, int_list *l) {
    if (!text) {
        fprintf(stderr, "kvq bench: %s needs a value\n", flag);
        return 0;
    }
    const char *p = text;
    for (;;) {
        char *end;
        errno = 0;
        const long v = strtol(p, &end, 10);
        if (end == p || errno || v < lo || v > hi || (*end && *end != ',')) {
            fprintf(stderr, "kvq bench: %s: '%s' is not a comma-separated list of whole numbers in [%ld, %ld]\n", flag,
                    text, lo, hi);
            return 0;
        }
        if (l->n == LIST_MAX) {
            fprintf(stderr, "kvq bench: %s: more than %d values\n", flag, LIST_MAX);
            return 0;
        }
        l->v[l->n++] = v;
        if (!*end) return 1;
        p = end + 1;
    }
}

static int is(const char *a, const char *s1, const char *s2) { return !strcmp(a, s1) || (s2 && !strcmp(a, s2)); }

/* ------------------------------------------------------------ the grid */

typedef struct {
    const char *ctk, *ctv;
    const char *preset; /* the --kv name, or NULL */
    char label[64];     /* the preset name, or "K/V" */
} kv_cfg;

typedef enum { FMT_MD, FMT_CSV, FMT_JSON, FMT_JSONL } out_fmt;

typedef struct {
    const char *path;
    char type[96];     /* "llama 135M Q4_1" */
    uint64_t size;     /* bytes of all tensors */
    uint64_t n_params; /* elements of all tensors */
    kvq_model_info info;
} model_meta;

/* One measured cell: a KV config at one (threads, depth, test). */
typedef struct {
    int model, threads, cfg;
    int n_prompt, n_gen, depth;
    double *ns, *ts; /* (n_done) each run's wall time and tokens per second */
    double *ctrl_ns; /* (n_done) the mean of the control runs either side of each run; NULL for the control */
    int n_done;
    double attn_s, run_s; /* summed over the runs */
    size_t kv_bytes, kv_bytes_f16, peak_rss;
    char isa[16];
    char test_time[32];
} cell;

typedef struct {
    int_list prompts, gens, depths, threads;
    str_list models, ctks, ctvs, presets;
    long reps;
    out_fmt fmt;
    const char *plot;
    int fill_copy; /* --fill copy: deeper configs copy the f16 control's rows */
    cli_model_opts mo; /* -c, -b, --kv-sinks, --kv-boundary, --kv-no-center, --kv-seed, --mmap */
    kv_cfg cfgs[LIST_MAX * 2];
    int n_cfg;
    cell *cells;
    int n_cells, cap_cells;
    model_meta *meta;
    int json_rows; /* rows written so far (json separators, md header) */
    /* Progress and ETA. */
    int is_tty;
    long runs_done, cells_total;
    double runs_s; /* the runs' own seconds (the elapsed time holds the prefills too) */
    double t_start;
    double *last_run_s;            /* (n_tests, n_cfg): the latest run's seconds, for the ETA */
    long *runs_left;               /* (n_tests, n_cfg) */
    /* Prefill for the ETA: a token at position t costs about a + b t (the
     * weights, then attention over the t tokens before it); a is measured
     * as the time outside attention per token, b as attention's time per
     * token-position. One average rate had the deep prefills, where
     * attention is most of the time, run minutes past the estimate. */
    double prefill_rest_s, prefill_attn_s; /* measured: outside attention, in it */
    double prefill_tok, prefill_pos;       /* measured: tokens, the sum of their positions */
    double prefill_tok_left, prefill_pos_left;
} bench;

static int add_cfg(bench *b, const char *ctk, const char *ctv, const char *preset) {
    for (int i = 0; i < b->n_cfg; i++)
        if (!strcmp(b->cfgs[i].ctk, ctk) && !strcmp(b->cfgs[i].ctv, ctv)) return 1;
    if (b->n_cfg == (int)(sizeof b->cfgs / sizeof b->cfgs[0])) {
        fprintf(stderr, "kvq bench: more than %d KV configs\n", b->n_cfg);
        return 0;
    }
    kv_cfg *c = &b->cfgs[b->n_cfg++];
    c->ctk = ctk;
    c->ctv = ctv;
    c->preset = preset;
    if (preset)
        snprintf(c->label, sizeof c->label, "%s", preset);
    else
        snprintf(c->label, sizeof c->label, "%s/%s", ctk, ctv);
    return 1;
}

/* The KV configs: f16/f16 first (the control), then every -ctk x -ctv pair,
 * then every --kv preset, duplicates dropped. */
static int build_cfgs(bench *b) {
    if (!add_cfg(b, "f16", "f16", NULL)) return 0;
    if (b->ctks.n || b->ctvs.n) {
        const char *dflt = "f16";
        const int nk = b->ctks.n ? b->ctks.n : 1, nv = b->ctvs.n ? b->ctvs.n : 1;
        for (int i = 0; i < nk; i++)
            for (int j = 0; j < nv; j++)
                if (!add_cfg(b, b->ctks.n ? b->ctks.v[i] : dflt, b->ctvs.n ? b->ctvs.v[j] : dflt, NULL)) return 0;
    }
    for (int i = 0; i < b->presets.n; i++) {
        const char *k, *v;
        if (kvq_kv_preset(b->presets.v[i], &k, &v) != KVQ_OK) {
            fprintf(stderr, "kvq bench: --kv: %s\n", kvq_last_error());
            return 0;
        }
        if (!add_cfg(b, k, v, b->presets.v[i])) return 0;
    }
    return 1;
}

/* Every codec name must configure for the model's head_dim. */
static int check_codecs(const bench *b, int head_dim) {
    for (int i = 0; i < b->n_cfg; i++) {
        const char *names[2] = {b->cfgs[i].ctk, b->cfgs[i].ctv};
        for (int j = 0; j < 2; j++) {
            kvq_codec *c = NULL;
            if (kvq_codec_create(names[j], head_dim, 0, &c) != KVQ_OK) {
                fprintf(stderr, "kvq bench: %s: %s\n", j ? "-ctv" : "-ctk", kvq_last_error());
                return 0;
            }
            kvq_codec_free(c);
        }
    }
    return 1;
}

/* ------------------------------------------------------------ model facts */

static void describe_model(const kvq_model *m, const char *path, model_meta *mm) {
    const kvq_gguf *g = kvq_model_gguf(m);
    mm->path = path;
    kvq_model_get_info(m, &mm->info);
    mm->size = mm->n_params = 0;
    /* The file type as llama.cpp names it: the type holding the most bytes. */
    const char *ftype = "?";
    uint64_t best = 0;
    const int64_t nt = kvq_gguf_tensor_count(g);
    for (int64_t i = 0; i < nt; i++) {
        uint64_t el = 1;
        for (int d = 0; d < kvq_gguf_tensor_n_dims(g, i); d++) el *= (uint64_t)kvq_gguf_tensor_dim(g, i, d);
        const uint64_t bytes = kvq_gguf_tensor_bytes(g, i);
        mm->n_params += el;
        mm->size += bytes;
        uint64_t same = 0;
        for (int64_t j = 0; j < nt; j++)
            if (kvq_gguf_tensor_type(g, j) == kvq_gguf_tensor_type(g, i)) same += kvq_gguf_tensor_bytes(g, j);
        if (same > best) {
            best = same;
            ftype = kvq_gguf_tensor_type_name(g, i);
        }
    }
    char up[16];
    size_t k = 0;
    for (; ftype[k] && k + 1 < sizeof up; k++)
        up[k] = (char)(ftype[k] >= 'a' && ftype[k] <= 'z' ? ftype[k] - 32 : ftype[k]);
    up[k] = '\0';
    char params[16];
    if (mm->n_params >= 1000000000ull)
        snprintf(params, sizeof params, "%.1fB", mm->n_params / 1e9);
    else
        snprintf(params, sizeof params, "%.0fM", mm->n_params / 1e6);
    snprintf(mm->type, sizeof mm->type, "%s %s %s", mm->info.arch, params, up);
}

/* The process's peak resident bytes (VmHWM), else getrusage's. */
static size_t peak_rss_bytes(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    size_t kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6)) kb = (size_t)strtoull(line + 6, NULL, 10);
    if (f) fclose(f);
    if (kb == 0) {
        struct rusage ru;
        if (getrusage(RUSAGE_SELF, &ru) == 0) kb = (size_t)ru.ru_maxrss;
    }
    return kb * 1024;
}

/* ------------------------------------------------------------ output */

static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        const unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

static void csv_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"') fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

typedef struct {
    double avg_ns, sd_ns, avg_ts, sd_ts, cv, attn_frac;
    double vs_f16; /* speed over the control's, paired run by run; 1 for the control */
    double vs_cv;  /* the paired ratios' CV; 0 for the control */
} cell_stats;

static void stats_of(const cell *c, cell_stats *s) {
    const int n = c->n_done;
    memset(s, 0, sizeof *s);
    if (n == 0) return; /* a cell a failed run left empty */
    bench_mean_sd(c->ns, n, &s->avg_ns, &s->sd_ns);
    bench_mean_sd(c->ts, n, &s->avg_ts, &s->sd_ts);
    s->cv = bench_cv(s->avg_ts, s->sd_ts);
    s->attn_frac = c->run_s > 0 ? c->attn_s / c->run_s : 0.0;
    s->vs_f16 = 1.0;
    if (c->ctrl_ns) {
        /* The median: one run hit by a burst of outside load moves a mean
         * ratio, not the median. A config's cell holds at most REPS_MAX runs. */
        double ratio[REPS_MAX], mean, sd;
        for (int i = 0; i < n; i++) ratio[i] = c->ctrl_ns[i] / c->ns[i];
        bench_mean_sd(ratio, n, &mean, &sd);
        s->vs_cv = bench_cv(mean, sd);
        s->vs_f16 = bench_median(ratio, n);
    }
}

static const char *test_name(const cell *c, char *buf, size_t cap) {
    if (c->n_prompt)
        snprintf(buf, cap, "pp%d", c->n_prompt);
    else
        snprintf(buf, cap, "tg%d", c->n_gen);
    if (c->depth) {
        const size_t len = strlen(buf);
        snprintf(buf + len, cap - len, " @ d%d", c->depth);
    }
    return buf;
}

static const char *human_bytes(double bytes, char *buf, size_t cap) {
    if (bytes >= 1024.0 * 1024 * 1024)
        snprintf(buf, cap, "%.2f GiB", bytes / (1024.0 * 1024 * 1024));
    else
        snprintf(buf, cap, "%.2f MiB", bytes / (1024.0 * 1024));
    return buf;
}

/* The batch the contexts run (-b, or the library's default). */
static int n_batch_of(const bench *b) { return b->mo.ctx.n_batch ? b->mo.ctx.n_batch : KVQ_DEFAULT_N_BATCH; }

static void write_row(bench *b, const cell *c) {
    const model_meta *mm = &b->meta[c->model];
    const kv_cfg *k = &b->cfgs[c->cfg];
    cell_stats s;
    stats_of(c, &s);
    const int n_batch = n_batch_of(b);
    FILE *f = stdout;
    if (b->fmt == FMT_MD) {
        if (b->json_rows++ == 0)
            printf("| model | size | params | backend | threads | type_k | type_v | test | t/s |\n"
                   "| --- | ---: | ---: | --- | ---: | --- | --- | ---: | ---: |\n");
        char size[32], test[48];
        printf("| %s | %s | %.2f %s | CPU | %d | %s | %s | %s | %.2f ± %.2f%s |\n", mm->type,
               human_bytes((double)mm->size, size, sizeof size),
               mm->n_params >= 1000000000ull ? mm->n_params / 1e9 : mm->n_params / 1e6,
               mm->n_params >= 1000000000ull ? "B" : "M", c->threads, k->ctk, k->ctv, test_name(c, test, sizeof test),
               s.avg_ts, s.sd_ts, s.cv > CV_WARN ? " (!)" : "");
    } else if (b->fmt == FMT_CSV) {
        if (b->json_rows++ == 0)
            printf("model_filename,model_type,model_size,model_n_params,backends,n_batch,n_threads,type_k,type_v,"
                   "kv_preset,n_prompt,n_gen,n_depth,test_time,avg_ns,stddev_ns,avg_ts,stddev_ts,samples_ts,"
                   "kv_bytes,kv_bytes_f16,peak_rss_bytes,isa,attn_frac,cv,vs_f16,vs_f16_cv\n");
        csv_str(f, mm->path);
        fputc(',', f);
        csv_str(f, mm->type);
        printf(",%llu,%llu,\"CPU\",%d,%d,", (unsigned long long)mm->size, (unsigned long long)mm->n_params, n_batch,
               c->threads);
        csv_str(f, k->ctk);
        fputc(',', f);
        csv_str(f, k->ctv);
        fputc(',', f);
        csv_str(f, k->preset ? k->preset : "");
        printf(",%d,%d,%d,\"%s\",%.0f,%.0f,%.6f,%.6f,\"", c->n_prompt, c->n_gen, c->depth, c->test_time, s.avg_ns,
               s.sd_ns, s.avg_ts, s.sd_ts);
        for (int i = 0; i < c->n_done; i++) printf("%s%.6f", i ? ";" : "", c->ts[i]);
        printf("\",%zu,%zu,%zu,\"%s\",%.6f,%.6f,%.6f,%.6f\n", c->kv_bytes, c->kv_bytes_f16, c->peak_rss, c->isa,
               s.attn_frac, s.cv, s.vs_f16, s.vs_cv);
    } else {
        if (b->fmt == FMT_JSON) printf(b->json_rows ? ",\n  " : "[\n  ");
        b->json_rows++;
        printf("{\"model_filename\": ");
        json_str(f, mm->path);
        printf(", \"model_type\": ");
        json_str(f, mm->type);
        printf(", \"model_size\": %llu, \"model_n_params\": %llu, \"backends\": \"CPU\", \"n_batch\": %d, "
               "\"n_threads\": %d, \"type_k\": ",
               (unsigned long long)mm->size, (unsigned long long)mm->n_params, n_batch, c->threads);
        json_str(f, k->ctk);
        printf(", \"type_v\": ");
        json_str(f, k->ctv);
        printf(", \"kv_preset\": ");
        if (k->preset)
            json_str(f, k->preset);
        else
            printf("null");
        printf(", \"n_prompt\": %d, \"n_gen\": %d, \"n_depth\": %d, \"test_time\": \"%s\", \"avg_ns\": %.0f, "
               "\"stddev_ns\": %.0f, \"avg_ts\": %.6f, \"stddev_ts\": %.6f, \"samples_ns\": [",
               c->n_prompt, c->n_gen, c->depth, c->test_time, s.avg_ns, s.sd_ns, s.avg_ts, s.sd_ts);
        for (int i = 0; i < c->n_done; i++) printf("%s%.0f", i ? ", " : "", c->ns[i]);
        printf("], \"samples_ts\": [");
        for (int i = 0; i < c->n_done; i++) printf("%s%.6f", i ? ", " : "", c->ts[i]);
        printf("], \"kv_bytes\": %zu, \"kv_bytes_f16\": %zu, \"peak_rss_bytes\": %zu, \"isa\": \"%s\", "
               "\"attn_frac\": %.6f, \"cv\": %.6f, \"vs_f16\": %.6f, \"vs_f16_cv\": %.6f}",
               c->kv_bytes, c->kv_bytes_f16, c->peak_rss, c->isa, s.attn_frac, s.cv, s.vs_f16, s.vs_cv);
        if (b->fmt == FMT_JSONL) printf("\n");
    }
    fflush(stdout);
}

/* One md cell per depth: v[i] in fmt where depth i was measured, else empty. */
static void print_cells(int nd, const int *have, const double *v, const char *fmt) {
    for (int i = 0; i < nd; i++)
        if (have[i]) printf(fmt, v[i]);
        else printf(" |");
}

/* One md cell per depth: vs_f16, flagged where its paired ratios' CV exceeds CV_WARN. */
static void print_ratios(int nd, const int *have, const double *vs, const double *vs_cv) {
    for (int i = 0; i < nd; i++)
        if (have[i]) printf(" %.3f%s |", vs[i], vs_cv[i] > CV_WARN ? " (!)" : "");
        else printf(" |");
}

/* The md summary for one (model, threads, n_gen) group of tg cells. */
static void summarize_group(const bench *b, int model, int threads, int n_gen) {
    const int nd = b->depths.n;
    printf("\ndecode cost vs depth: %s, %d threads, tg%d; fit ms/token = a + b x depth over depths",
           b->meta[model].type, threads, n_gen);
    for (int i = 0; i < nd; i++) printf("%s%ld", i ? "," : " ", b->depths.v[i]);
    printf("\n\n| KV | a (ms/token) | b (ms per 1k KV tokens) | R² |");
    for (int i = 0; i < nd; i++) printf(" vs f16 @ d%ld |", b->depths.v[i]);
    for (int i = 0; i < nd; i++) printf(" KV MiB @ d%ld |", b->depths.v[i]);
    printf(" attn %% @ d%ld |\n|---|---:|---:|---:|", b->depths.v[nd - 1]);
    for (int i = 0; i < 2 * nd + 1; i++) printf("---:|");
    printf("\n");
    for (int cfg = 0; cfg < b->n_cfg; cfg++) {
        double x[LIST_MAX], y[LIST_MAX], vs[LIST_MAX], vs_cv[LIST_MAX], mib[LIST_MAX], attn_last = -1;
        int have[LIST_MAX] = {0}, n = 0;
        for (int i = 0; i < b->n_cells; i++) {
            const cell *c = &b->cells[i];
            if (c->model != model || c->threads != threads || c->n_gen != n_gen || c->n_prompt || c->cfg != cfg ||
                !c->n_done)
                continue;
            int di = 0;
            while (b->depths.v[di] != c->depth) di++;
            cell_stats s;
            stats_of(c, &s);
            x[n] = c->depth;
            y[n++] = s.avg_ns / 1e6 / n_gen;
            have[di] = 1;
            vs[di] = s.vs_f16;
            vs_cv[di] = s.vs_cv;
            mib[di] = c->kv_bytes / 1048576.0;
            if (di == nd - 1) attn_last = s.attn_frac;
        }
        double a, slope, r2;
        printf("| %s |", b->cfgs[cfg].label);
        if (bench_linfit(x, y, n, &a, &slope, &r2))
            printf(" %.3f | %.4f | %.3f |", a, slope * 1000.0, r2);
        else if (n)
            printf(" %.3f | n/a (one depth) | |", y[0]);
        else
            printf(" | | |");
        print_ratios(nd, have, vs, vs_cv);
        print_cells(nd, have, mib, " %.2f |");
        if (attn_last >= 0)
            printf(" %.1f |\n", 100.0 * attn_last);
        else
            printf(" |\n");
    }
}

/* The md summary for one (model, threads, n_prompt) group of pp cells: prompt
   processing has no per-token fit, only its ratio to the f16 control. */
static void summarize_pp_group(const bench *b, int model, int threads, int n_prompt) {
    const int nd = b->depths.n;
    printf("\nprompt processing vs depth: %s, %d threads, pp%d\n\n| KV |", b->meta[model].type, threads, n_prompt);
    for (int i = 0; i < nd; i++) printf(" pp t/s @ d%ld |", b->depths.v[i]);
    for (int i = 0; i < nd; i++) printf(" vs f16 @ d%ld |", b->depths.v[i]);
    printf("\n|---|");
    for (int i = 0; i < 2 * nd; i++) printf("---:|");
    printf("\n");
    for (int cfg = 0; cfg < b->n_cfg; cfg++) {
        double ts[LIST_MAX], vs[LIST_MAX], vs_cv[LIST_MAX];
        int have[LIST_MAX] = {0};
        for (int i = 0; i < b->n_cells; i++) {
            const cell *c = &b->cells[i];
            if (c->model != model || c->threads != threads || c->n_prompt != n_prompt || c->cfg != cfg || !c->n_done)
                continue;
            int di = 0;
            while (b->depths.v[di] != c->depth) di++;
            cell_stats s;
            stats_of(c, &s);
            have[di] = 1;
            ts[di] = s.avg_ts;
            vs[di] = s.vs_f16;
            vs_cv[di] = s.vs_cv;
        }
        printf("| %s |", b->cfgs[cfg].label);
        print_cells(nd, have, ts, " %.1f |");
        print_ratios(nd, have, vs, vs_cv);
        printf("\n");
    }
}

static void print_summary(const bench *b) {
    for (int m = 0; m < b->models.n; m++)
        for (int t = 0; t < b->threads.n; t++) {
            for (int g = 0; g < b->gens.n; g++)
                if (b->gens.v[g] > 0) summarize_group(b, m, (int)b->threads.v[t], (int)b->gens.v[g]);
            for (int p = 0; p < b->prompts.n; p++)
                if (b->prompts.v[p] > 0) summarize_pp_group(b, m, (int)b->threads.v[t], (int)b->prompts.v[p]);
        }
    printf("\nKV MiB: the cache after depth + n_gen tokens. vs f16: speed over the f16/f16 control's, run by run:\n"
           "the median over repetitions of the mean time of the control runs either side over the run's time,\n"
           "(!) where those paired ratios' CV exceeds 5%%.\n"
           "attn %%: share of decode time in fused attention over the cache.\n");
    int noisy = 0;
    for (int i = 0; i < b->n_cells; i++) {
        cell_stats s;
        stats_of(&b->cells[i], &s);
        if (s.cv <= CV_WARN) continue;
        char test[48];
        printf("%s %s %s, %d threads: CV %.1f%%\n",
               noisy++ ? "                                  " : "(!) CV > 5% (noisy; raise -r or quiet the machine):",
               b->cfgs[b->cells[i].cfg].label, test_name(&b->cells[i], test, sizeof test), b->cells[i].threads,
               100.0 * s.cv);
    }
    if (!noisy) printf("Every cell's CV is within 5%%.\n");
}

/* ------------------------------------------------------------ plot */

static const char *const plot_colors[] = {"#000000", "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                          "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f"};

static void svg_text(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '<')
            fputs("&lt;", f);
        else if (*s == '>')
            fputs("&gt;", f);
        else if (*s == '&')
            fputs("&amp;", f);
        else
            fputc(*s, f);
    }
}

/* Generation t/s against depth on a log axis. Depth 0 has no logarithm: it
 * sits at the left edge, half a decade (or more, for wide sweeps) left of the
 * smallest nonzero depth, labelled "0". */
static int write_plot(const bench *b, const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "kvq bench: cannot write %s: %s\n", path, strerror(errno));
        return 0;
    }
    const double W = 760, H = 460, L = 80, R = 200, T = 50, B = 60;
    const double pw = W - L - R, ph = H - T - B;
    double dmin = 0, dmax = 0, ymax = 0;
    for (int i = 0; i < b->depths.n; i++) {
        const double d = (double)b->depths.v[i];
        if (d > 0 && (dmin == 0 || d < dmin)) dmin = d;
        if (d > dmax) dmax = d;
    }
    for (int i = 0; i < b->n_cells; i++) {
        const cell *c = &b->cells[i];
        if (c->n_prompt || !c->n_done) continue;
        cell_stats s;
        stats_of(c, &s);
        if (s.avg_ts + s.sd_ts > ymax) ymax = s.avg_ts + s.sd_ts;
    }
    /* x is log10(depth); depth 0 sits at x0, with 5% padding at both ends so
     * the end points stay off the frame. */
    double x0 = 0, x1 = 1;
    if (dmin > 0) {
        x1 = log10(dmax);
        const double span = x1 - log10(dmin);
        x0 = log10(dmin) - (span * 0.15 > 0.5 ? span * 0.15 : 0.5);
    }
    const double lo = x0 - 0.05 * (x1 - x0), hi = x1 + 0.05 * (x1 - x0);
    /* About five y ticks at 1, 2 or 5 times a power of ten. */
    if (ymax <= 0) ymax = 1;
    const double raw = ymax / 5, mag = pow(10, floor(log10(raw))), norm = raw / mag;
    const double step = (norm < 1.5 ? 1 : norm < 3.5 ? 2 : norm < 7.5 ? 5 : 10) * mag;
    const double ytop = ceil(ymax * 1.05 / step) * step;
#define PX(d) (L + pw * (((d) > 0 ? log10(d) : x0) - lo) / (hi - lo))
#define PY(v) (T + ph * (1 - (v) / ytop))
    const model_meta *mm = &b->meta[0];
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
            "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
            W, H, W, H);
    fprintf(f,
            "<text x=\"%.0f\" y=\"24\" font-size=\"15\" text-anchor=\"middle\">kvq bench: generation speed vs KV depth"
            " — ",
            L + pw / 2);
    svg_text(f, b->models.n > 1 ? "several models" : mm->type);
    if (b->threads.n == 1) fprintf(f, ", %ld threads", b->threads.v[0]);
    fprintf(f, "</text>\n");
    /* Grid and y ticks. */
    for (double v = 0; v <= ytop + step / 2; v += step) {
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", L, PY(v), L + pw,
                PY(v));
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n", L - 6, PY(v) + 4, v);
    }
    for (int i = 0; i < b->depths.n; i++) {
        const double d = (double)b->depths.v[i], x = PX(d);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", x, T, x, T + ph);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%ld</text>\n", x, T + ph + 16, b->depths.v[i]);
    }
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#333\"/>\n", L, T, pw,
            ph);
    /* Decade ticks show the scale is logarithmic; a break mark separates 0. */
    for (double e = ceil(log10(dmin > 0 ? dmin : 1)); dmin > 0 && e <= x1 + 1e-9; e++)
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\"/>\n", PX(pow(10, e)),
                T + ph, PX(pow(10, e)), T + ph - 6);
    if (dmin > 0 && b->depths.v[0] == 0) {
        const double xb = (PX(0) + PX(dmin)) / 2, yb = T + ph;
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"10\" fill=\"white\"/>\n", xb - 7, yb - 5);
        for (int j = -1; j <= 1; j += 2)
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\"/>\n", xb + 3 * j - 3,
                    yb + 5, xb + 3 * j + 3, yb - 5);
    }
    fprintf(f,
            "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">KV depth (tokens in the cache, log scale; 0 at the "
            "left edge)</text>\n",
            L + pw / 2, H - 18);
    fprintf(f,
            "<text transform=\"translate(22 %.1f) rotate(-90)\" text-anchor=\"middle\">generation speed "
            "(tokens/s)</text>\n",
            T + ph / 2);
    /* One series per (KV config, n_gen, threads, model). */
    int series = 0;
    for (int m = 0; m < b->models.n; m++)
        for (int t = 0; t < b->threads.n; t++)
            for (int g = 0; g < b->gens.n; g++)
                for (int cfg = 0; cfg < b->n_cfg; cfg++) {
                    const int n_colors = (int)(sizeof plot_colors / sizeof plot_colors[0]);
                    const char *col = plot_colors[series % n_colors];
                    /* Past the palette, series repeat a colour with a dash pattern. */
                    const char *dash = series / n_colors % 2 ? " stroke-dasharray=\"6 3\"" : "";
                    int npt = 0;
                    for (int di = 0; di < b->depths.n; di++)
                        for (int i = 0; i < b->n_cells; i++) {
                            const cell *c = &b->cells[i];
                            if (c->model != m || c->cfg != cfg || c->n_prompt || c->n_gen != b->gens.v[g] ||
                                c->depth != b->depths.v[di] || !c->n_done || c->threads != b->threads.v[t])
                                continue;
                            cell_stats s;
                            stats_of(c, &s);
                            const double x = PX(c->depth);
                            fprintf(f, "%s%.1f,%.1f",
                                    npt++ ? " " : "<polyline fill=\"none\" stroke-width=\"2\" points=\"", x,
                                    PY(s.avg_ts));
                        }
                    if (!npt) continue;
                    fprintf(f, "\" stroke=\"%s\"%s/>\n", col, dash);
                    for (int i = 0; i < b->n_cells; i++) {
                        const cell *c = &b->cells[i];
                        if (c->model != m || c->cfg != cfg || c->n_prompt || c->n_gen != b->gens.v[g] || !c->n_done ||
                            c->threads != b->threads.v[t])
                            continue;
                        cell_stats s;
                        stats_of(c, &s);
                        const double x = PX(c->depth);
                        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", x, PY(s.avg_ts), col);
                        if (s.sd_ts > 0)
                            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\"/>\n", x,
                                    PY(s.avg_ts - s.sd_ts), x, PY(s.avg_ts + s.sd_ts), col);
                    }
                    const double ly = T + 10 + 18 * series;
                    fprintf(
                        f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\"%s/>\n",
                        L + pw + 12, ly, L + pw + 36, ly, col, dash);
                    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">%s", L + pw + 42, ly + 4, b->cfgs[cfg].label);
                    if (b->gens.n > 1) fprintf(f, " tg%ld", b->gens.v[g]);
                    if (b->threads.n > 1) fprintf(f, " t%ld", b->threads.v[t]);
                    if (b->models.n > 1) fprintf(f, " m%d", m + 1);
                    fprintf(f, "</text>\n");
                    series++;
                }
#undef PX
#undef PY
    fprintf(f, "</svg>\n");
    if (fclose(f) != 0) {
        fprintf(stderr, "kvq bench: cannot write %s: %s\n", path, strerror(errno));
        return 0;
    }
    return 1;
}

/* ------------------------------------------------------------ progress */

/* The sum of the positions t0 .. t1 - 1. */
static double positions(long t0, long t1) { return 0.5 * (double)(t1 - t0) * (double)(t0 + t1 - 1); }

/* On a terminal the line is rewritten in place for every run; in a log, one
 * line per cell (its first repetition) and per prefill. */
static void progress(bench *b, const char *what, int log_it) {
    if (!b->is_tty && !log_it) return;
    const double el = cli_now() - b->t_start;
    /* a config not yet run is estimated at the mean of the runs so far */
    double eta = 0, mean = b->runs_done ? b->runs_s / (double)b->runs_done : 0;
    const int nt = b->prompts.n + b->gens.n;
    long runs_left = 0;
    for (int i = 0; i < nt * b->n_cfg; i++) {
        eta += b->runs_left[i] * (b->last_run_s[i] > 0 ? b->last_run_s[i] : mean);
        runs_left += b->runs_left[i];
    }
    if (b->prefill_tok > 0) eta += b->prefill_tok_left * b->prefill_rest_s / b->prefill_tok;
    if (b->prefill_pos > 0) eta += b->prefill_pos_left * b->prefill_attn_s / b->prefill_pos;
    char line[256];
    if (b->runs_done || !runs_left)
        snprintf(line, sizeof line, "%s | %.1f s elapsed, ETA %.0f s", what, el, eta);
    else if (b->prefill_tok > 0 && b->prefill_tok_left > 0) /* the prefills are timed, the runs not yet */
        snprintf(line, sizeof line, "%s | %.1f s elapsed, ETA %.0f s + the runs (after the first)", what, el, eta);
    else /* nothing measured yet to estimate from */
        snprintf(line, sizeof line, "%s | %.1f s elapsed, ETA after the first piece", what, el);
    if (b->is_tty)
        fprintf(stderr, "\r%s\033[K", line);
    else
        fprintf(stderr, "%s\n", line);
}

/* ------------------------------------------------------------ measuring */

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void random_tokens(int32_t *t, long n, int n_vocab, uint64_t seed) {
    for (long i = 0; i < n; i++) t[i] = (int32_t)(splitmix(&seed) % (uint64_t)n_vocab);
}

/* max_runs: the runs the cell will hold; with_ctrl: room for each run's control. */
static cell *new_cell(bench *b, long max_runs, int with_ctrl) {
    if (b->n_cells == b->cap_cells) {
        const int cap = b->cap_cells ? 2 * b->cap_cells : 64;
        cell *c = realloc(b->cells, sizeof *c * (size_t)cap);
        if (!c) return NULL;
        b->cells = c;
        b->cap_cells = cap;
    }
    cell *c = &b->cells[b->n_cells];
    memset(c, 0, sizeof *c);
    b->n_cells++; /* counted now, so a failed allocation below is still freed */
    c->ns = calloc((size_t)max_runs, sizeof *c->ns);
    c->ts = calloc((size_t)max_runs, sizeof *c->ts);
    if (with_ctrl) c->ctrl_ns = calloc((size_t)max_runs, sizeof *c->ctrl_ns);
    if (!c->ns || !c->ts || (with_ctrl && !c->ctrl_ns)) return NULL;
    return c;
}

static long max_of(const int_list *l) {
    long m = 0;
    for (int i = 0; i < l->n; i++)
        if (l->v[i] > m) m = l->v[i];
    return m;
}

static void fail_eval(const bench *b, const char *what, const kv_cfg *k) {
    fprintf(stderr, "%skvq bench: %s (%s): %s\n", b->is_tty ? "\n" : "", what, k->label, kvq_last_error());
}

/* Measures every (depth, test, rep, KV config) for one model at one thread
 * count; one context per KV config, alive for the whole sweep. */
static int bench_threads(bench *b, int mi, const kvq_model *model, int threads, const int32_t *depth_tok,
                         const int32_t *prompt_tok, const int32_t *gen_tok, float *logits) {
    kvq_ctx *ctx[LIST_MAX * 2] = {0};
    int ok = 0;
    const long need =
        max_of(&b->depths) + (max_of(&b->prompts) > max_of(&b->gens) ? max_of(&b->prompts) : max_of(&b->gens));
    for (int k = 0; k < b->n_cfg; k++) {
        kvq_ctx_params p = b->mo.ctx;
        p.n_ctx = b->mo.ctx.n_ctx ? b->mo.ctx.n_ctx : (int)(need + 1);
        p.n_threads = threads;
        p.ctk = b->cfgs[k].ctk;
        p.ctv = b->cfgs[k].ctv;
        if (kvq_ctx_create(model, &p, &ctx[k]) != KVQ_OK) {
            fprintf(stderr, "kvq bench: context for %s: %s\n", b->cfgs[k].label, kvq_last_error());
            goto done;
        }
    }
    const int nt = b->prompts.n + b->gens.n;
    int depth_now = 0;
    for (int di = 0; di < b->depths.n; di++) {
        const int d = (int)b->depths.v[di];
        char what[160];
        /* Extend each context from the previous depth (depths are sorted). */
        for (int k = 0; k < b->n_cfg; k++) {
            if (d > depth_now && b->fill_copy && k > 0) {
                /* ctx[0] is the f16 control, already at depth d. */
                snprintf(what, sizeof what, "copy the f16 rows into %s to depth %d", b->cfgs[k].label, d);
                progress(b, what, 1);
                if (kvq_ctx_copy_kv(ctx[k], ctx[0], d) != KVQ_OK) {
                    fail_eval(b, "copy", &b->cfgs[k]);
                    goto done;
                }
            } else if (d > depth_now) {
                /* In pieces, so a deep prefill shows progress and the ETA
                 * learns from its first piece; whole batches, so the
                 * forward pass splits the tokens where one call would. */
                const int n_batch = n_batch_of(b);
                const int piece = n_batch * (4096 / n_batch > 1 ? 4096 / n_batch : 1);
                for (int t = depth_now; t < d; t += piece) {
                    const int t1 = d - t < piece ? d : t + piece;
                    snprintf(what, sizeof what, "prefill %s to depth %d (%d done)", b->cfgs[k].label, d, t);
                    progress(b, what, 1);
                    const double a0 = kvq_ctx_attn_seconds(ctx[k]), t0 = cli_now();
                    if (kvq_ctx_eval(ctx[k], depth_tok + t, t1 - t, NULL, 0) != KVQ_OK) {
                        fail_eval(b, "prefill", &b->cfgs[k]);
                        goto done;
                    }
                    const double attn = kvq_ctx_attn_seconds(ctx[k]) - a0, tok = t1 - t, pos = positions(t, t1);
                    b->prefill_rest_s += cli_now() - t0 - attn;
                    b->prefill_attn_s += attn;
                    b->prefill_tok += tok;
                    b->prefill_pos += pos;
                    b->prefill_tok_left -= tok;
                    b->prefill_pos_left -= pos;
                }
            }
            /* Warm-up: one untimed token, so first-touch costs stay out of the runs. */
            if (kvq_ctx_eval(ctx[k], gen_tok, 1, logits, 0) != KVQ_OK || kvq_ctx_truncate(ctx[k], d) != KVQ_OK) {
                fail_eval(b, "warm-up", &b->cfgs[k]);
                goto done;
            }
        }
        depth_now = d;
        for (int ti = 0; ti < nt; ti++) {
            const int is_pp = ti < b->prompts.n;
            const int len = (int)(is_pp ? b->prompts.v[ti] : b->gens.v[ti - b->prompts.n]);
            if (len == 0) continue;
            /* The control runs before and after every other run: f16 A f16 B
             * ... f16, round after round, and one closing f16. */
            const int n_other = b->n_cfg - 1;
            const long ctrl_runs = n_other ? b->reps * n_other + 1 : b->reps;
            const long n_runs = n_other ? 2 * b->reps * n_other + 1 : b->reps;
            const int first = b->n_cells;
            for (int k = 0; k < b->n_cfg; k++) {
                cell *c = new_cell(b, k ? b->reps : ctrl_runs, k > 0);
                if (!c) {
                    fprintf(stderr, "kvq bench: out of memory\n");
                    goto done;
                }
                c->model = mi;
                c->threads = threads;
                c->cfg = k;
                c->depth = d;
                c->n_prompt = is_pp ? len : 0;
                c->n_gen = is_pp ? 0 : len;
                snprintf(c->isa, sizeof c->isa, "%s", kvq_isa_name(kvq_ctx_isa(ctx[k])));
            }
            cell *waiting = NULL; /* the last run's cell, until the next control closes its bracket */
            double ctrl_before = 0;
            for (long i = 0; i < n_runs; i++) {
                const int k = n_other && i % 2 ? 1 + (int)(i / 2 % n_other) : 0;
                const long rep = n_other ? i / (2 * n_other) : i;
                cell *c = &b->cells[first + k];
                char test[48];
                if (rep == b->reps)
                    snprintf(what, sizeof what, "cell %d/%ld closing control (%s)", first + 1, b->cells_total,
                             test_name(c, test, sizeof test));
                else
                    snprintf(what, sizeof what, "cell %d/%ld rep %ld/%ld (%s, %s)", first + k + 1, b->cells_total,
                             rep + 1, b->reps, b->cfgs[k].label, test_name(c, test, sizeof test));
                progress(b, what, 1);
                const double a0 = kvq_ctx_attn_seconds(ctx[k]);
                const double t0 = cli_now();
                if (is_pp) {
                    if (kvq_ctx_eval(ctx[k], prompt_tok, len, logits, 0) != KVQ_OK) {
                        fail_eval(b, test, &b->cfgs[k]);
                        goto done;
                    }
                } else {
                    for (int j = 0; j < len; j++)
                        if (kvq_ctx_eval(ctx[k], gen_tok + j, 1, logits, 0) != KVQ_OK) {
                            fail_eval(b, test, &b->cfgs[k]);
                            goto done;
                        }
                }
                const double t1 = cli_now();
                const double ns = (t1 - t0) * 1e9;
                c->ns[c->n_done] = ns;
                c->ts[c->n_done++] = len * 1e9 / ns;
                c->run_s += t1 - t0;
                c->attn_s += kvq_ctx_attn_seconds(ctx[k]) - a0;
                c->kv_bytes = kvq_ctx_kv_bytes(ctx[k]);
                c->kv_bytes_f16 = kvq_ctx_kv_bytes_f16(ctx[k]);
                if (kvq_ctx_truncate(ctx[k], d) != KVQ_OK) {
                    fail_eval(b, "truncate", &b->cfgs[k]);
                    goto done;
                }
                if (k == 0) {
                    if (waiting) waiting->ctrl_ns[waiting->n_done - 1] = 0.5 * (ctrl_before + ns);
                    waiting = NULL;
                    ctrl_before = ns;
                } else {
                    waiting = c;
                }
                b->runs_done++;
                b->runs_s += t1 - t0;
                b->last_run_s[ti * b->n_cfg + k] = t1 - t0;
                b->runs_left[ti * b->n_cfg + k]--;
            }
            for (int k = 0; k < b->n_cfg; k++) {
                cell *c = &b->cells[first + k];
                c->peak_rss = peak_rss_bytes();
                const time_t now = time(NULL);
                struct tm tm;
                gmtime_r(&now, &tm);
                strftime(c->test_time, sizeof c->test_time, "%Y-%m-%dT%H:%M:%SZ", &tm);
                if (b->is_tty) fprintf(stderr, "\r\033[K");
                write_row(b, c);
            }
        }
    }
    ok = 1;
done:
    for (int k = 0; k < b->n_cfg; k++) kvq_ctx_free(ctx[k]);
    return ok;
}

static int cmp_long(const void *a, const void *b) {
    const long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

/* Sorted ascending, duplicates dropped: contexts extend depth by depth, and
 * a repeated value would only measure the same cell twice. */
static void sort_unique(int_list *l) {
    qsort(l->v, (size_t)l->n, sizeof l->v[0], cmp_long);
    int n = 0;
    for (int i = 0; i < l->n; i++)
        if (n == 0 || l->v[i] != l->v[n - 1]) l->v[n++] = l->v[i];
    l->n = n;
}

int cmd_bench(int argc, char **argv) {
    bench b;
    memset(&b, 0, sizeof b);
    cli_model_opts_init(&b.mo);
    b.reps = 5;
    char *store[LIST_MAX * 4] = {0};
    int n_store = 0, rc = 2;
    kvq_model **models = NULL;
    int32_t *depth_tok = NULL, *prompt_tok = NULL, *gen_tok = NULL;
    float *logits = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        int ok = 1;
        if (is(a, "-h", "--help")) {
            usage(stdout);
            rc = 0;
            goto done;
        } else if (n_store >= LIST_MAX * 4 - 1 &&
                   (is(a, "-m", "--model") || is(a, "-ctk", "--ctk") || is(a, "--cache-type-k", NULL) ||
                    is(a, "-ctv", "--ctv") || is(a, "--cache-type-v", NULL) || is(a, "--kv", NULL))) {
            fprintf(stderr, "kvq bench: too many list options\n");
            goto done;
        } else if (is(a, "-m", "--model")) {
            ok = cli_parse_str_list("bench", a, val, &b.models, &store[n_store++]);
        } else if (is(a, "-ctk", "--ctk") || is(a, "--cache-type-k", NULL)) {
            ok = cli_parse_str_list("bench", a, val, &b.ctks, &store[n_store++]);
        } else if (is(a, "-ctv", "--ctv") || is(a, "--cache-type-v", NULL)) {
            ok = cli_parse_str_list("bench", a, val, &b.ctvs, &store[n_store++]);
        } else if (is(a, "--kv", NULL)) {
            ok = cli_parse_str_list("bench", a, val, &b.presets, &store[n_store++]);
        } else if (is(a, "-p", "--n-prompt")) {
            ok = parse_int_list(a, val, 0, 1 << 20, &b.prompts);
        } else if (is(a, "-n", "--n-gen")) {
            ok = parse_int_list(a, val, 0, 1 << 20, &b.gens);
        } else if (is(a, "-d", "--n-depth")) {
            ok = parse_int_list(a, val, 0, 1 << 24, &b.depths);
        } else if (is(a, "-t", "--threads")) {
            ok = parse_int_list(a, val, 1, 256, &b.threads);
        } else if (is(a, "-r", "--repetitions")) {
            if (!cli_parse_int(a, val, 1, REPS_MAX, &b.reps)) goto done;
        } else if (is(a, "-o", "--output")) {
            if (!val)
                ok = 0, fprintf(stderr, "kvq bench: %s needs a value\n", a);
            else if (!strcmp(val, "md"))
                b.fmt = FMT_MD;
            else if (!strcmp(val, "csv"))
                b.fmt = FMT_CSV;
            else if (!strcmp(val, "json"))
                b.fmt = FMT_JSON;
            else if (!strcmp(val, "jsonl"))
                b.fmt = FMT_JSONL;
            else
                ok = 0, fprintf(stderr, "kvq bench: -o: '%s' is not md, csv, json or jsonl\n", val);
        } else if (is(a, "--plot", NULL)) {
            if (!val) ok = 0, fprintf(stderr, "kvq bench: %s needs a value\n", a);
            b.plot = val;
        } else if (is(a, "--fill", NULL)) {
            if (val && !strcmp(val, "copy")) b.fill_copy = 1;
            else if (val && !strcmp(val, "prefill")) b.fill_copy = 0;
            else ok = 0, fprintf(stderr, "kvq bench: --fill: '%s' is not prefill or copy\n", val ? val : "");
        } else {
            const int r = cli_model_opts_parse(&b.mo, argc, argv, &i);
            if (r < 0) goto done;
            if (r == 0) {
                fprintf(stderr, "kvq bench: unknown option '%s' (see kvq bench --help)\n", a);
                goto done;
            }
            continue;
        }
        if (!ok) goto done;
        i++;
    }
    if (!b.prompts.n) b.prompts.v[b.prompts.n++] = 512;
    if (!b.gens.n) b.gens.v[b.gens.n++] = 128;
    if (!b.depths.n) b.depths.v[b.depths.n++] = 0;
    if (!b.threads.n) {
        const long cores = sysconf(_SC_NPROCESSORS_ONLN);
        b.threads.v[b.threads.n++] = cores > 0 ? (cores < 256 ? cores : 256) : 1;
    }
    sort_unique(&b.depths);
    sort_unique(&b.prompts);
    sort_unique(&b.gens);
    sort_unique(&b.threads);
    if (max_of(&b.prompts) == 0 && max_of(&b.gens) == 0) {
        fprintf(stderr, "kvq bench: nothing to measure: every -p and -n is 0\n");
        goto done;
    }
    if (!build_cfgs(&b)) goto done;
    const long need = max_of(&b.depths) + (max_of(&b.prompts) > max_of(&b.gens) ? max_of(&b.prompts) : max_of(&b.gens));
    if (b.mo.ctx.n_ctx && b.mo.ctx.n_ctx < need + 1) {
        fprintf(stderr, "kvq bench: -c %d is too small: the largest depth plus the longest test needs %ld\n",
                b.mo.ctx.n_ctx, need + 1);
        goto done;
    }
    if (!b.models.n) {
        if (!cli_default_model(b.mo.model_buf, sizeof b.mo.model_buf)) goto done;
        b.models.v[b.models.n++] = b.mo.model_buf;
    }

    rc = 1;
    models = calloc((size_t)b.models.n, sizeof *models);
    b.meta = calloc((size_t)b.models.n, sizeof *b.meta);
    const int nt = b.prompts.n + b.gens.n;
    b.last_run_s = calloc((size_t)(nt * b.n_cfg), sizeof *b.last_run_s);
    b.runs_left = calloc((size_t)(nt * b.n_cfg), sizeof *b.runs_left);
    if (!models || !b.meta || !b.last_run_s || !b.runs_left) {
        fprintf(stderr, "kvq bench: out of memory\n");
        goto done;
    }
    for (int m = 0; m < b.models.n; m++) {
        if (!cli_model_load_path(&b.mo, b.models.v[m], &models[m])) goto done;
        describe_model(models[m], b.models.v[m], &b.meta[m]);
        if (!check_codecs(&b, b.meta[m].info.head_dim)) {
            rc = 2;
            goto done;
        }
        if (max_of(&b.depths) > b.meta[m].info.n_ctx_train)
            fprintf(stderr,
                    "kvq bench: note: depth %ld is past %s's trained context (%d); speed is still "
                    "meaningful, the text would not be\n",
                    max_of(&b.depths), b.models.v[m], b.meta[m].info.n_ctx_train);
    }
    const long groups = (long)b.models.n * b.threads.n * b.depths.n; /* each measures every test */
    for (int ti = 0; ti < nt; ti++) {
        const long len = ti < b.prompts.n ? b.prompts.v[ti] : b.gens.v[ti - b.prompts.n];
        if (!len) continue;
        b.cells_total += groups * b.n_cfg;
        for (int k = 0; k < b.n_cfg; k++)
            b.runs_left[ti * b.n_cfg + k] = groups * (k || b.n_cfg == 1 ? b.reps : b.reps * (b.n_cfg - 1) + 1);
    }
    const double prefills = (double)b.models.n * b.threads.n * (b.fill_copy ? 1 : b.n_cfg);
    b.prefill_tok_left = prefills * (double)max_of(&b.depths);
    b.prefill_pos_left = prefills * positions(0, max_of(&b.depths));
    b.is_tty = isatty(STDERR_FILENO);
    b.t_start = cli_now();

    int max_vocab = 1;
    for (int m = 0; m < b.models.n; m++)
        if (b.meta[m].info.n_vocab > max_vocab) max_vocab = b.meta[m].info.n_vocab;
    depth_tok = malloc(sizeof *depth_tok * (size_t)(max_of(&b.depths) + 1));
    prompt_tok = malloc(sizeof *prompt_tok * (size_t)(max_of(&b.prompts) + 1));
    gen_tok = malloc(sizeof *gen_tok * (size_t)(max_of(&b.gens) + 1));
    logits = malloc(sizeof *logits * (size_t)max_vocab);
    if (!depth_tok || !prompt_tok || !gen_tok || !logits) {
        fprintf(stderr, "kvq bench: out of memory\n");
        goto done;
    }
    for (int m = 0; m < b.models.n; m++) {
        /* The same ids for every KV config and thread count: only the cache differs. */
        const int V = b.meta[m].info.n_vocab;
        random_tokens(depth_tok, max_of(&b.depths) + 1, V, 1);
        random_tokens(prompt_tok, max_of(&b.prompts) + 1, V, 2);
        random_tokens(gen_tok, max_of(&b.gens) + 1, V, 3);
        for (int t = 0; t < b.threads.n; t++)
            if (!bench_threads(&b, m, models[m], (int)b.threads.v[t], depth_tok, prompt_tok, gen_tok, logits))
                goto done;
    }
    if (b.is_tty) fprintf(stderr, "\r\033[K");
    fprintf(stderr, "kvq bench: %ld runs in %.1f s\n", b.runs_done, cli_now() - b.t_start);
    if (b.fmt == FMT_JSON) printf(b.json_rows ? "\n]\n" : "[]\n");
    if (b.fmt == FMT_MD) print_summary(&b);
    if (b.plot && !write_plot(&b, b.plot)) goto done;
    rc = 0;
done:
    if (rc == 1 && b.fmt == FMT_JSON && b.json_rows) printf("\n]\n");
    for (int i = 0; i < n_store; i++) free(store[i]);
    for (int i = 0; i < b.n_cells; i++) {
        free(b.cells[i].ns);
        free(b.cells[i].ts);
        free(b.cells[i].ctrl_ns);
    }
    free(b.cells);
    for (int m = 0; models && m < b.models.n; m++) kvq_model_free(models[m]);
    free(models);
    free(b.meta);
    free(b.last_run_s);
    free(b.runs_left);
    free(depth_tok);
    free(prompt_tok);
    free(gen_tok);
    free(logits);
    return rc;
}
