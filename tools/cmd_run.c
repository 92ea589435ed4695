/* cmd_run.c — `kvq run`: generate from a prompt with a compressed KV cache,
 * then one summary line: prompt and generation speed, KV bytes vs f16. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: kvq run [options] (--tokens IDS | -p TEXT)\n"
            "\n"
            "Runs the prompt through the model, then generates -n tokens greedily,\n"
            "streaming them to stdout. Ends with a summary line on stderr: prompt and\n"
            "generation speed, and the KV cache's bytes next to what f16 would take.\n"
            "\n"
            "  --tokens IDS          prompt as comma-separated token ids\n"
            "  -n, --n-predict N     tokens to generate (default 64; 0 = prompt only)\n"
            "  --dump-logits FILE    write float32 logits of every prompt position,\n"
            "                        row-major [n_prompt][n_vocab], little endian\n"
            "  --dump-tokens FILE    write the int32 ids of prompt and generated tokens\n"
            "\n%s",
            cli_model_opts_help());
}

/* Parses "1,2,3" into a new array. */
static int parse_ids(const char *text, int32_t **ids, int *n) {
    int cap = 16, len = 0;
    int32_t *a = malloc(sizeof *a * (size_t)cap);
    const char *p = text;
    while (a && *p) {
        char *end;
        errno = 0;
        const long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX || (*end && *end != ',')) {
            fprintf(stderr, "kvq run: --tokens: '%s' is not a comma-separated list of token ids\n", text);
            free(a);
            return 0;
        }
        if (len == cap) {
            int32_t *b = realloc(a, sizeof *a * (size_t)(cap *= 2));
            if (!b) break;
            a = b;
        }
        a[len++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    if (!a || len == 0) {
        fprintf(stderr, "kvq run: --tokens: %s\n", a ? "no token ids given" : "out of memory");
        free(a);
        return 0;
    }
    *ids = a;
    *n = len;
    return 1;
}

static int write_file(const char *path, const void *data, size_t bytes) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, bytes, f) != bytes || fclose(f) != 0) {
        fprintf(stderr, "kvq run: cannot write %s: %s\n", path, strerror(errno));
        if (f) fclose(f);
        return 0;
    }
    return 1;
}

static int32_t argmax(const float *x, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

int cmd_run(int argc, char **argv) {
    cli_model_opts o;
    cli_model_opts_init(&o);
    const char *tokens_arg = NULL, *dump_logits = NULL, *dump_tokens = NULL;
    long n_predict = 64;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const int r = cli_model_opts_parse(&o, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--tokens") && val) {
            tokens_arg = argv[++i];
        } else if ((!strcmp(a, "-n") || !strcmp(a, "--n-predict"))) {
            if (!cli_parse_int(a, val, 0, 1 << 24, &n_predict)) return 2;
            i++;
        } else if (!strcmp(a, "--dump-logits") && val) {
            dump_logits = argv[++i];
        } else if (!strcmp(a, "--dump-tokens") && val) {
            dump_tokens = argv[++i];
        } else {
            fprintf(stderr, "kvq run: %s '%s' (see kvq run --help)\n", val || a[0] != '-' ? "unknown option" : "missing value for", a);
            return 2;
        }
    }
    if (!tokens_arg) {
        fprintf(stderr, "kvq run: give a prompt with --tokens IDS (see kvq run --help)\n");
        return 2;
    }
    int32_t *prompt = NULL;
    int n_prompt = 0;
    if (!parse_ids(tokens_arg, &prompt, &n_prompt)) return 2;

    kvq_model *model = NULL;
    kvq_ctx *ctx = NULL;
    float *logits = NULL;
    int32_t *all = NULL;
    int rc = 1;
    if (!cli_model_load(&o, &model)) goto done;
    kvq_model_info info;
    kvq_model_get_info(model, &info);
    if (kvq_ctx_create(model, &o.ctx, &ctx) != KVQ_OK) {
        fprintf(stderr, "kvq run: %s\n", kvq_last_error());
        goto done;
    }
    const size_t V = (size_t)info.n_vocab;
    logits = malloc(sizeof(float) * V * (dump_logits ? (size_t)n_prompt : 1));
    all = malloc(sizeof(int32_t) * ((size_t)n_prompt + (size_t)n_predict));
    if (!logits || !all) {
        fprintf(stderr, "kvq run: out of memory for %d prompt logits\n", n_prompt);
        goto done;
    }
    memcpy(all, prompt, sizeof(int32_t) * (size_t)n_prompt);

    const double t0 = cli_now();
    if (kvq_ctx_eval(ctx, prompt, n_prompt, logits, dump_logits != NULL) != KVQ_OK) {
        fprintf(stderr, "kvq run: %s\n", kvq_last_error());
        goto done;
    }
    const double t1 = cli_now();
    if (dump_logits && !write_file(dump_logits, logits, sizeof(float) * V * (size_t)n_prompt)) goto done;
    const float *last = logits + (dump_logits ? (size_t)(n_prompt - 1) * V : 0);
    int n_gen = 0;
    int32_t next = argmax(last, (int)V);
    while (n_gen < n_predict) {
        all[n_prompt + n_gen++] = next;
        printf("%s%d", n_gen > 1 ? " " : "", next);
        fflush(stdout);
        if (n_gen == n_predict) break;
        if (kvq_ctx_eval(ctx, &next, 1, logits, 0) != KVQ_OK) {
            fprintf(stderr, "\nkvq run: %s\n", kvq_last_error());
            break;
        }
        next = argmax(logits, (int)V);
    }
    if (n_gen) printf("\n");
    fflush(stdout);
    const double t2 = cli_now();
    if (dump_tokens && !write_file(dump_tokens, all, sizeof(int32_t) * (size_t)(n_prompt + n_gen))) goto done;

    char label[128];
    const double kv = (double)kvq_ctx_kv_bytes(ctx), kv16 = (double)kvq_ctx_kv_bytes_f16(ctx);
    fprintf(stderr,
            "prompt %d tokens %.1f t/s | generation %d tokens %.1f t/s | KV %s: %.2f MiB, f16 would be %.2f MiB "
            "(%.2fx smaller) | %d threads, %s\n",
            n_prompt, n_prompt / (t1 - t0), n_gen, n_gen > 1 ? (n_gen - 1) / (t2 - t1) : 0.0,
            cli_kv_label(&o, label, sizeof label), kv / 1048576.0, kv16 / 1048576.0, kv > 0 ? kv16 / kv : 1.0,
            o.ctx.n_threads ? o.ctx.n_threads : 0, kvq_isa_name(kvq_ctx_isa(ctx)));
    rc = 0;
done:
    free(prompt);
    free(all);
    free(logits);
    kvq_ctx_free(ctx);
    kvq_model_free(model);
    return rc;
}
