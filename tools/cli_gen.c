/* cli_gen.c — what run and chat share: sampling options, tokenizing a
 * prompt, and the generation loop that streams text and counts time. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* The defaults quoted from the library's, so the help cannot drift from
 * them; built once (run and chat print it once). */
const char *cli_sample_opts_help(void) {
    static char text[1024];
    const kvq_sampler_params d = kvq_sampler_default_params();
    snprintf(text, sizeof text,
             "sampling options (llama.cpp's names; --temp 0 is greedy):\n"
             "  --temp T              temperature (default %g)\n"
             "  --top-k N             keep the N most likely tokens (default %d; 0 = off)\n"
             "  --top-p P             keep the smallest set with probability >= P (default %g)\n"
             "  --min-p P             drop tokens below P x the top probability (default %g)\n"
             "  --repeat-penalty R    penalize the last --repeat-last-n tokens (default %.1f%s)\n"
             "  --repeat-last-n N     window of the repeat penalty (default %d)\n"
             "  -s, --seed N          sampling seed: the same seed gives the same text (default %llu)\n",
             (double)d.temp, (int)d.top_k, (double)d.top_p, (double)d.min_p, (double)d.repeat_penalty,
             d.repeat_penalty == 1.0f ? " = off" : "", (int)d.repeat_last_n, (unsigned long long)d.seed);
    return text;
}

int cli_sample_opts_parse(kvq_sampler_params *p, int argc, char **argv, int *i) {
    const char *a = argv[*i], *val = *i + 1 < argc ? argv[*i + 1] : NULL;
    long v;
    double f;
    if (!strcmp(a, "--temp")) {
        if (!cli_parse_float(a, val, 0.0, 100.0, &f)) return -1;
        p->temp = (float)f;
    } else if (!strcmp(a, "--top-k")) {
        if (!cli_parse_int(a, val, 0, 1 << 24, &v)) return -1;
        p->top_k = (int32_t)v;
    } else if (!strcmp(a, "--top-p")) {
        if (!cli_parse_float(a, val, 0.0, 1.0, &f)) return -1;
        p->top_p = (float)f;
    } else if (!strcmp(a, "--min-p")) {
        if (!cli_parse_float(a, val, 0.0, 1.0, &f)) return -1;
        p->min_p = (float)f;
    } else if (!strcmp(a, "--repeat-penalty")) {
        if (!cli_parse_float(a, val, 0.0, 100.0, &f)) return -1;
        p->repeat_penalty = (float)f;
    } else if (!strcmp(a, "--repeat-last-n")) {
        if (!cli_parse_int(a, val, 0, 1 << 20, &v)) return -1;
        p->repeat_last_n = (int32_t)v;
    } else if (!strcmp(a, "-s") || !strcmp(a, "--seed")) {
        if (!cli_parse_int(a, val, 0, 0x7FFFFFFFL, &v)) return -1;
        p->seed = (uint64_t)v;
    } else {
        return 0;
    }
    (*i)++;
    return 1;
}

int cli_tokenize(const kvq_tokenizer *tok, const char *text, size_t len, int add_bos, int parse_special,
                 int32_t **ids, int *n) {
    size_t need = 0;
    kvq_status s = kvq_tokenizer_encode(tok, text, len, add_bos, parse_special, NULL, 0, &need);
    if (s != KVQ_OK && s != KVQ_ERR_RANGE) goto fail;
    if (need > (size_t)1 << 28) {
        fprintf(stderr, "kvq: text of %zu tokens is too long\n", need);
        return 0;
    }
    *ids = malloc(sizeof(int32_t) * (need ? need : 1));
    if (!*ids) {
        fprintf(stderr, "kvq: out of memory for %zu tokens\n", need);
        return 0;
    }
    s = kvq_tokenizer_encode(tok, text, len, add_bos, parse_special, *ids, need, &need);
    if (s != KVQ_OK) {
        free(*ids);
        goto fail;
    }
    *n = (int)need;
    return 1;
fail:
    fprintf(stderr, "kvq: tokenizing: %s\n", kvq_last_error());
    return 0;
}

static void emit(cli_gen *g, const char *text, size_t len) {
    if (!len) return;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    if (!g->capture) return;
    if (g->text_len + len + 1 > g->text_cap) {
        const size_t cap = (g->text_len + len + 1) * 2;
        char *b = realloc(g->text, cap);
        if (!b) return; /* the reply is shown; only chat history loses it */
        g->text = b;
        g->text_cap = cap;
    }
    memcpy(g->text + g->text_len, text, len);
    g->text_len += len;
    g->text[g->text_len] = '\0';
}

int cli_generate(cli_gen *g, const int32_t *prompt, int n_prompt, int n_predict, cli_gen_stats *st) {
    memset(st, 0, sizeof *st);
    const double t0 = cli_now();
    if (n_prompt && kvq_ctx_eval(g->ctx, prompt, n_prompt, g->logits, 0) != KVQ_OK) {
        fprintf(stderr, "kvq: %s\n", kvq_last_error()); /* nothing streamed yet: no line break */
        return 0;
    }
    for (int i = 0; i < n_prompt; i++) kvq_sampler_accept(g->sampler, prompt[i]);
    st->n_prompt = n_prompt;
    st->prompt_s = cli_now() - t0;
    const double t1 = cli_now();
    const char *text;
    size_t len;
    g->pending = -1;
    g->text_len = 0;
    if (g->text) g->text[0] = '\0';
    while (st->n_gen < n_predict && !(g->stop && *g->stop)) {
        int32_t id;
        if (kvq_sampler_sample(g->sampler, g->logits, g->n_vocab, &id) != KVQ_OK) {
            fprintf(stderr, "\nkvq: sampling: %s\n", kvq_last_error());
            return 0;
        }
        kvq_sampler_accept(g->sampler, id);
        if (kvq_tokenizer_is_eog(g->tok, id)) {
            g->pending = id; /* not in the cache yet: chat evaluates it with the next turn */
            st->stopped_eog = 1;
            break;
        }
        if (g->record) g->record[st->n_gen] = id;
        st->n_gen++;
        if (kvq_detok_push(g->detok, id, &text, &len) == KVQ_OK) emit(g, text, len);
        if (kvq_ctx_n_past(g->ctx) >= kvq_ctx_n_ctx(g->ctx)) {
            st->stopped_ctx = 1;
            break;
        }
        if (kvq_ctx_eval(g->ctx, &id, 1, g->logits, 0) != KVQ_OK) {
            fprintf(stderr, "\nkvq: %s\n", kvq_last_error());
            return 0;
        }
    }
    if (kvq_detok_flush(g->detok, &text, &len) == KVQ_OK) emit(g, text, len);
    st->gen_s = cli_now() - t1;
    return 1;
}

void cli_print_stats(const cli_gen *g, const cli_model_opts *o, const cli_gen_stats *st) {
    char label[160], staged[96] = "";
    const double kv = (double)kvq_ctx_kv_bytes(g->ctx), kv16 = (double)kvq_ctx_kv_bytes_f16(g->ctx);
    /* A short cache is mostly f16 staging: say so, or the ratio reads as the codec's. */
    const int n_f16 = kvq_ctx_kv_n_f16_tokens(g->ctx), n_past = kvq_ctx_n_past(g->ctx);
    if (n_f16 > 0 && n_f16 < n_past && kv16 > kv)
        snprintf(staged, sizeof staged, "; %d of %d tokens still f16 until their tile fills", n_f16, n_past);
    fprintf(stderr,
            "prompt %d tokens %.1f t/s | generation %d tokens %.1f t/s | KV %s: %.2f MiB, f16 would take %.2f MiB "
            "(%.2fx%s) | %s\n",
            st->n_prompt, st->prompt_s > 0 ? st->n_prompt / st->prompt_s : 0.0, st->n_gen,
            st->gen_s > 0 ? st->n_gen / st->gen_s : 0.0, cli_kv_label(o, label, sizeof label), kv / 1048576.0,
            kv16 / 1048576.0, kv > 0 ? kv16 / kv : 1.0, staged, kvq_isa_name(kvq_ctx_isa(g->ctx)));
    if (st->stopped_ctx)
        fprintf(stderr, "kvq: stopped: the context is full (%d tokens); raise -c\n", kvq_ctx_n_ctx(g->ctx));
}

char *cli_chat_render(const kvq_model *m, const kvq_chat_msg *msgs, int n, int add_assistant, size_t *len) {
    kvq_chat_apply(m, msgs, n, add_assistant, NULL, 0, len);
    char *buf = malloc(*len + 1);
    if (!buf || kvq_chat_apply(m, msgs, n, add_assistant, buf, *len + 1, len) != KVQ_OK) {
        fprintf(stderr, "kvq: chat template: %s\n", buf ? kvq_last_error() : "out of memory");
        free(buf);
        return NULL;
    }
    return buf;
}
