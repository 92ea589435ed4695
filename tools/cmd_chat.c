/* cmd_chat.c — `kvq chat`: an interactive, multi-turn chat that keeps the
 * KV cache between turns, so each turn prefills only its new tokens. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static volatile int stop_requested; /* set by SIGINT */

static void on_sigint(int sig) {
    (void)sig;
    stop_requested = 1;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: kvq chat [options]\n"
            "\n"
            "Chats with the model in its chat template (ChatML). Each line you type is a\n"
            "user turn; the reply streams back. The KV cache is kept between turns, so a\n"
            "turn only processes its new tokens. Reads turns from stdin when it is not a\n"
            "terminal (one turn per line).\n"
            "\n"
            "  /reset   forget the conversation     /exit or Ctrl-D   quit\n"
            "  Ctrl-C   stops a reply being generated (at the prompt: quits)\n"
            "\n"
            "  -n, --n-predict N     most tokens per reply (default 512)\n"
            "  --system TEXT         system prompt (default: the template's own, if any)\n"
            "  --session FILE        continue the conversation whose KV cache FILE holds (if\n"
            "                        it exists) without its prefill; save it at exit\n"
            "\n%s\n%s",
            cli_model_opts_help(), cli_sample_opts_help());
}

typedef struct {
    kvq_chat_msg *msgs;
    int n, cap;
} history;

static int history_add(history *h, const char *role, const char *content) {
    if (h->n == h->cap) {
        const int cap = h->cap ? 2 * h->cap : 16;
        kvq_chat_msg *m = realloc(h->msgs, sizeof *m * (size_t)cap);
        if (!m) return 0;
        h->msgs = m;
        h->cap = cap;
    }
    char *copy = strdup(content);
    if (!copy) return 0;
    h->msgs[h->n].role = role;
    h->msgs[h->n].content = copy;
    h->n++;
    return 1;
}

static void history_clear(history *h, int keep) {
    for (int i = keep; i < h->n; i++) free((char *)h->msgs[i].content);
    h->n = keep;
}

int cmd_chat(int argc, char **argv) {
    cli_model_opts o;
    cli_model_opts_init(&o);
    kvq_sampler_params sp = kvq_sampler_default_params();
    long n_predict = 512;
    const char *system = NULL, *session = NULL;
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
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
            if (!cli_parse_int(a, val, 1, 1 << 24, &n_predict)) return 2;
            i++;
        } else if (val && !strcmp(a, "--system")) {
            system = argv[++i];
        } else if (val && !strcmp(a, "--session")) {
            session = argv[++i];
        } else {
            fprintf(stderr, "kvq chat: unknown option '%s' (see kvq chat --help)\n", a);
            return 2;
        }
    }
    const int tty = isatty(STDIN_FILENO);
    kvq_model *model = NULL;
    kvq_tokenizer *tok = NULL;
    cli_gen g = {0};
    history h = {0};
    char *line = NULL, *before = NULL, *after = NULL;
    size_t line_cap = 0;
    int rc = 1, turns = 0;
    cli_gen_stats total = {0};
    if (!cli_model_load(&o, &model)) goto done;
    kvq_model_info info;
    kvq_model_get_info(model, &info);
    g.tok = tok;
    g.n_vocab = info.n_vocab;
    g.capture = 1;
    g.stop = &stop_requested;
    if (kvq_model_tokenizer(model, &tok) != KVQ_OK || kvq_ctx_create(model, &o.ctx, &g.ctx) != KVQ_OK ||
        kvq_sampler_create(&sp, &g.sampler) != KVQ_OK || kvq_detok_create(tok, 0, &g.detok) != KVQ_OK) {
        fprintf(stderr, "kvq chat: %s\n", kvq_last_error());
        goto done;
    }
    g.tok = tok;
    g.logits = malloc(sizeof(float) * (size_t)info.n_vocab);
    if (!g.logits || (system && !history_add(&h, "system", system))) {
        fprintf(stderr, "kvq chat: out of memory\n");
        goto done;
    }
    /* Ctrl-C interrupts a reply, not the program: no SA_RESTART, so a read
     * at the prompt returns and we quit there. */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, NULL);
    const int base = h.n; /* messages /reset keeps */
    int n_cached = 0;
    if (session && !cli_session_load(g.ctx, session, &n_cached)) goto done;
    /* The saved conversation's text is not kept, only its cache. A stand-in
     * earlier turn makes each new turn render to the same tokens it would
     * after the real one: a turn's tokens are what its rendering adds. */
    if (n_cached && (!history_add(&h, "user", "(earlier turns)") || !history_add(&h, "assistant", "(in the session)")))
        goto done;
    if (n_cached) turns = 1;
    if (session && tty) fprintf(stderr, "kvq chat: session %s: %d tokens restored\n", session, n_cached);
    if (tty)
        fprintf(stderr, "kvq chat: %s, KV %s. /reset, /exit or Ctrl-D to quit.\n", info.arch,
                cli_kv_label(&o, (char[160]){0}, 160));
    for (;;) {
        if (tty) {
            fputs("> ", stdout);
            fflush(stdout);
        }
        stop_requested = 0;
        errno = 0;
        const ssize_t got = getline(&line, &line_cap, stdin);
        if (got < 0) {
            if (tty) putchar('\n');
            break; /* Ctrl-D, end of input, or Ctrl-C at the prompt */
        }
        size_t len = (size_t)got;
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
        if (!len) continue;
        if (!strcmp(line, "/exit")) break;
        if (!strcmp(line, "/reset")) {
            history_clear(&h, base);
            kvq_ctx_truncate(g.ctx, 0);
            if (tty) fprintf(stderr, "(conversation reset)\n");
            continue;
        }
        /* The new turn's tokens: what the conversation renders to now, past
         * what the cache already holds (the previous reply without its
         * closing "<|im_end|>\n", which the new text supplies). */
        size_t before_len = 0, after_len = 0;
        free(before);
        before = turns ? cli_chat_render(model, h.msgs, h.n, 0, &before_len) : strdup("");
        if (!before || !history_add(&h, "user", line) || !(after = cli_chat_render(model, h.msgs, h.n, 1, &after_len))) goto done;
        static const char close_turn[] = "<|im_end|>\n";
        size_t cached = before_len;
        if (turns && cached >= sizeof close_turn - 1) cached -= sizeof close_turn - 1;
        int32_t *ids = NULL;
        int n_ids = 0;
        if (cached > after_len || !cli_tokenize(tok, after + cached, after_len - cached, 0, 1, &ids, &n_ids)) {
            free(after);
            after = NULL;
            goto done;
        }
        free(after);
        after = NULL;
        if (kvq_ctx_n_past(g.ctx) + n_ids >= kvq_ctx_n_ctx(g.ctx)) {
            fprintf(stderr, "kvq chat: the context is full (%d of %d tokens); /reset to start over or raise -c\n",
                    kvq_ctx_n_past(g.ctx), kvq_ctx_n_ctx(g.ctx));
            free(ids);
            history_clear(&h, h.n - 1);
            continue;
        }
        cli_gen_stats st;
        const int ok = cli_generate(&g, ids, n_ids, (int)n_predict, &st);
        free(ids);
        putchar('\n');
        fflush(stdout);
        if (!ok) goto done;
        if (stop_requested && tty) fprintf(stderr, "(stopped)\n");
        if (st.stopped_ctx)
            fprintf(stderr, "kvq chat: the reply stopped: the context is full (%d tokens); /reset or raise -c\n",
                    kvq_ctx_n_ctx(g.ctx));
        if (!history_add(&h, "assistant", g.text ? g.text : "")) goto done;
        turns++;
        total.n_prompt += st.n_prompt;
        total.n_gen += st.n_gen;
        total.prompt_s += st.prompt_s;
        total.gen_s += st.gen_s;
    }
    if (total.n_prompt) cli_print_stats(&g, &o, &total);
    rc = session && !cli_session_save(g.ctx, session);
done:
    free(line);
    free(before);
    free(after);
    history_clear(&h, 0);
    free(h.msgs);
    free(g.logits);
    free(g.text);
    kvq_detok_free(g.detok);
    kvq_sampler_free(g.sampler);
    kvq_ctx_free(g.ctx);
    kvq_tokenizer_free(tok);
    kvq_model_free(model);
    return rc;
}
