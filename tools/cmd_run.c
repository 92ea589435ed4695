/* cmd_run.c — `kvq run`: generate from a prompt with a compressed KV cache,
 * then one summary line: prompt and generation speed, KV bytes vs f16. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: kvq run [options] (-p TEXT | -f FILE | --tokens IDS)\n"
            "\n"
            "Runs the prompt through the model, then generates up to -n tokens,\n"
            "streaming the text to stdout. Ends with a summary line on stderr: prompt\n"
            "and generation speed, and the KV cache's bytes next to what f16 would take.\n"
            "\n"
            "  -p, --prompt TEXT     the prompt\n"
            "  -f, --file FILE       read the prompt from FILE (- for stdin)\n"
            "  --tokens IDS          the prompt as comma-separated token ids\n"
            "  --chat                wrap -p/-f as one user turn in the model's chat template\n"
            "  -n, --n-predict N     tokens to generate (default 128; 0 = prompt only)\n"
            "  --dump-logits FILE    write float32 logits of every prompt position,\n"
            "                        row-major [n_prompt][n_vocab], little endian\n"
            "  --dump-tokens FILE    write the int32 ids of prompt and generated tokens\n"
            "  --session FILE        load the KV cache saved in FILE (if it exists) and skip\n"
            "                        the prefill of the prompt prefix it holds; save it at exit\n"
            "\n%s\n%s"
            "\nexample:\n"
            "  kvq run --kv q4_0 --chat -p \"What is the capital of France?\" --temp 0\n",
            cli_model_opts_help(), cli_sample_opts_help());
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
            if (!b) {
                free(a);
                a = NULL;
                break;
            }
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

/* The prompt's tokens: ids as given, or text (optionally as a chat turn). */
static int prompt_tokens(const kvq_model *model, const kvq_tokenizer *tok, const char *ids_arg, const char *text,
                         size_t text_len, int chat, int32_t **ids, int *n) {
    if (ids_arg) return parse_ids(ids_arg, ids, n);
    if (!chat) return cli_tokenize(tok, text, text_len, -1, 0, ids, n);
    const kvq_chat_msg msg = {"user", text};
    size_t need = 0;
    char *formatted = cli_chat_render(model, &msg, 1, 1, &need);
    if (!formatted) return 0;
    const int ok = cli_tokenize(tok, formatted, need, 0, 1, ids, n);
    free(formatted);
    return ok;
}

int cmd_run(int argc, char **argv) {
    cli_model_opts o;
    cli_model_opts_init(&o);
    kvq_sampler_params sp = kvq_sampler_default_params();
    const char *tokens_arg = NULL, *prompt_arg = NULL, *file_arg = NULL, *dump_logits = NULL, *dump_tokens = NULL,
               *session = NULL;
    long n_predict = 128;
    int chat = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int r = cli_model_opts_parse(&o, argc, argv, &i);
        if (!r) r = cli_sample_opts_parse(&sp, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--chat")) {
            chat = 1;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
            if (!cli_parse_int(a, val, 0, 1 << 24, &n_predict)) return 2;
            i++;
        } else if (val && !strcmp(a, "--tokens")) {
            tokens_arg = argv[++i];
        } else if (val && (!strcmp(a, "-p") || !strcmp(a, "--prompt"))) {
            prompt_arg = argv[++i];
        } else if (val && (!strcmp(a, "-f") || !strcmp(a, "--file"))) {
            file_arg = argv[++i];
        } else if (val && !strcmp(a, "--dump-logits")) {
            dump_logits = argv[++i];
        } else if (val && !strcmp(a, "--dump-tokens")) {
            dump_tokens = argv[++i];
        } else if (val && !strcmp(a, "--session")) {
            session = argv[++i];
        } else {
            fprintf(stderr, "kvq run: %s '%s' (see kvq run --help)\n",
                    a[0] == '-' && !val ? "missing value or unknown option" : "unknown option", a);
            return 2;
        }
    }
    if (!!tokens_arg + !!prompt_arg + !!file_arg != 1) {
        fprintf(stderr, "kvq run: give exactly one prompt: -p TEXT, -f FILE or --tokens IDS (see kvq run --help)\n");
        return 2;
    }
    if (session && dump_logits) {
        fprintf(stderr, "kvq run: --dump-logits evaluates every prompt position; it does not go with --session\n");
        return 2;
    }
    if (chat && tokens_arg) {
        fprintf(stderr, "kvq run: --chat takes a text prompt (-p or -f), not --tokens\n");
        return 2;
    }

    kvq_model *model = NULL;
    kvq_tokenizer *tok = NULL;
    cli_gen g = {0};
    int32_t *prompt = NULL, *all = NULL;
    float *prompt_logits = NULL;
    char *file_text = NULL;
    int n_prompt = 0, rc = 1;
    size_t text_len = prompt_arg ? strlen(prompt_arg) : 0;
    if (file_arg && !(file_text = cli_read_file(file_arg, &text_len))) goto done;
    if (!cli_model_load(&o, &model)) goto done;
    kvq_model_info info;
    kvq_model_get_info(model, &info);
    if (kvq_model_tokenizer(model, &tok) != KVQ_OK) {
        fprintf(stderr, "kvq run: %s\n", kvq_last_error());
        goto done;
    }
    if (!prompt_tokens(model, tok, tokens_arg, file_text ? file_text : prompt_arg, text_len, chat, &prompt,
                       &n_prompt))
        goto done;
    if (n_prompt == 0) {
        fprintf(stderr, "kvq run: the prompt is empty\n");
        goto done;
    }
    g.tok = tok;
    g.n_vocab = info.n_vocab;
    if (kvq_ctx_create(model, &o.ctx, &g.ctx) != KVQ_OK || kvq_sampler_create(&sp, &g.sampler) != KVQ_OK ||
        kvq_detok_create(tok, 0, &g.detok) != KVQ_OK) {
        fprintf(stderr, "kvq run: %s\n", kvq_last_error());
        goto done;
    }
    const size_t V = (size_t)info.n_vocab;
    g.logits = malloc(sizeof(float) * V);
    all = malloc(sizeof(int32_t) * ((size_t)n_prompt + (size_t)n_predict));
    if (dump_logits) prompt_logits = malloc(sizeof(float) * V * (size_t)n_prompt);
    if (!g.logits || !all || (dump_logits && !prompt_logits)) {
        fprintf(stderr, "kvq run: out of memory for %d prompt tokens\n", n_prompt);
        goto done;
    }

    memcpy(all, prompt, sizeof(int32_t) * (size_t)n_prompt);
    g.record = all + n_prompt;
    cli_gen_stats st;
    if (dump_logits) {
        /* Every prompt position's logits: evaluate the prompt here, then
         * generate from its last row. */
        const double t0 = cli_now();
        if (kvq_ctx_eval(g.ctx, prompt, n_prompt, prompt_logits, 1) != KVQ_OK) {
            fprintf(stderr, "kvq run: %s\n", kvq_last_error());
            goto done;
        }
        const double prompt_s = cli_now() - t0;
        if (!write_file(dump_logits, prompt_logits, sizeof(float) * V * (size_t)n_prompt)) goto done;
        memcpy(g.logits, prompt_logits + (size_t)(n_prompt - 1) * V, sizeof(float) * V);
        for (int i = 0; i < n_prompt; i++) kvq_sampler_accept(g.sampler, prompt[i]);
        if (!cli_generate(&g, NULL, 0, (int)n_predict, &st)) goto done;
        st.n_prompt = n_prompt;
        st.prompt_s = prompt_s;
    } else {
        int reused = 0, n_cached = 0;
        if (session) {
            if (!cli_session_load(g.ctx, session, &n_cached)) goto done;
            reused = cli_session_reuse(g.ctx, prompt, n_prompt);
            fprintf(stderr, "kvq: session %s: %d tokens saved, %d of the prompt's %d reused\n", session, n_cached,
                    reused, n_prompt);
            for (int i = 0; i < reused; i++) kvq_sampler_accept(g.sampler, prompt[i]);
        }
        if (!cli_generate(&g, prompt + reused, n_prompt - reused, (int)n_predict, &st)) goto done;
    }
    printf("\n");
    fflush(stdout);
    if (dump_tokens && !write_file(dump_tokens, all, sizeof(int32_t) * (size_t)(n_prompt + st.n_gen))) goto done;
    cli_print_stats(&g, &o, &st);
    if (session && !cli_session_save(g.ctx, session)) goto done;
    rc = 0;
done:
    free(file_text);
    free(prompt);
    free(all);
    free(prompt_logits);
    free(g.logits);
    kvq_detok_free(g.detok);
    kvq_sampler_free(g.sampler);
    kvq_ctx_free(g.ctx);
    kvq_tokenizer_free(tok);
    kvq_model_free(model);
    return rc;
}
