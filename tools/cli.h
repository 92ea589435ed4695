/* cli.h — subcommands and small helpers shared by the CLI. */
#ifndef KVQ_CLI_H
#define KVQ_CLI_H

#include <stddef.h>
#include <stdint.h>

#include "kvq.h"

int cmd_codecs(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_attn_bench(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_ppl(int argc, char **argv);

/* Monotonic time in seconds. */
double cli_now(void);
/* Parses a whole decimal integer in [lo, hi]; on failure prints an error
 * naming the flag and returns 0. */
int cli_parse_int(const char *flag, const char *text, long lo, long hi, long *out);
/* The same for a finite decimal number in [lo, hi]. */
int cli_parse_float(const char *flag, const char *text, double lo, double hi, double *out);
/* A numeric macro as a string literal, for help texts that quote the
 * library's defaults (so they cannot drift from them). */
#define CLI_STR_(x) #x
#define CLI_STR(x) CLI_STR_(x)
/* A comma-separated list option ("f16,q8_0,turbo4"). */
#define CLI_LIST_MAX 64
typedef struct cli_str_list {
    const char *v[CLI_LIST_MAX];
    int n;
} cli_str_list;
/* Appends the names of text to l; they point into a copy of text that is
 * stored in *store (the caller frees it). On an empty name, too many names
 * or no memory, prints "kvq CMD: FLAG: ..." and returns 0. */
int cli_parse_str_list(const char *cmd, const char *flag, const char *text, cli_str_list *l, char **store);
/* Reads a whole file (or "-" for stdin) into a NUL-terminated buffer. */
char *cli_read_file(const char *path, size_t *len);

/* The default model: $KVQ_MODEL if set, else
 * ${KVQ_CACHE:-$HOME/.cache/kvq}/CLI_DEFAULT_MODEL_NAME (what `make model`
 * fetches). Writes its path into buf; if the file is not there, prints how
 * to get it and returns 0. */
#define CLI_DEFAULT_MODEL_NAME "SmolLM2-135M-Instruct.Q4_1.gguf"
int cli_default_model(char *buf, size_t cap);

/* Options shared by the model commands. */
typedef struct cli_model_opts {
    const char *model;       /* NULL until given or defaulted */
    const char *kv_preset;   /* the --kv name, if given */
    int mmap;                /* --mmap: map the model file, do not read it in */
    kvq_ctx_params ctx;
    char model_buf[4096];
} cli_model_opts;

void cli_model_opts_init(cli_model_opts *o);
/* The options' --help text. */
const char *cli_model_opts_help(void);
/* Parses argv[*i] (and its value, advancing *i): 1 if it was a model
 * option, 0 if not, -1 after printing an error. */
int cli_model_opts_parse(cli_model_opts *o, int argc, char **argv, int *i);
/* Loads o->model (or the default model): 1 on success, else prints why. */
int cli_model_load(cli_model_opts *o, kvq_model **model);
/* Loads path as o says (--mmap): 1 on success, else prints why; notes a
 * resident load that had to map. */
int cli_model_load_path(const cli_model_opts *o, const char *path, kvq_model **model);
/* "K q8_0, V q4_0" or "k8v4 (K q8_0, V q4_0)". */
const char *cli_kv_label(const cli_model_opts *o, char *buf, size_t cap);

/* Sampling options (llama.cpp's flags) into p: 1 consumed, 0 not, -1 error. */
const char *cli_sample_opts_help(void);
int cli_sample_opts_parse(kvq_sampler_params *p, int argc, char **argv, int *i);

/* Tokenizes text into a new array: 1 on success, else prints why. */
int cli_tokenize(const kvq_tokenizer *tok, const char *text, size_t len, int add_bos, int parse_special,
                 int32_t **ids, int *n);

/* The messages in the model's chat template, as a new string (its length in
 * *len), or NULL after printing why. */
char *cli_chat_render(const kvq_model *m, const kvq_chat_msg *msgs, int n, int add_assistant, size_t *len);

/* The generation loop shared by run and chat. */
typedef struct cli_gen {
    kvq_ctx *ctx;
    const kvq_tokenizer *tok;
    kvq_sampler *sampler;
    kvq_detok *detok;
    float *logits;                /* (n_vocab) */
    int32_t n_vocab;
    volatile int *stop;           /* set (by a signal handler) to stop early */
    int32_t pending;              /* end-of-generation token sampled but not evaluated, or -1 */
    int32_t *record;              /* if set, generated ids are stored here (n_predict) */
    char *text;                   /* if capture is set: the generated text, NUL-terminated */
    size_t text_len, text_cap;
    int capture;
} cli_gen;

typedef struct cli_gen_stats {
    int n_prompt, n_gen, stopped_eog, stopped_ctx;
    double prompt_s, gen_s;
} cli_gen_stats;

/* Evaluates the prompt, then samples up to n_predict tokens, streaming text
 * to stdout; stops at an end-of-generation token, a full context or *stop.
 * 1 on success, else prints why. */
int cli_generate(cli_gen *g, const int32_t *prompt, int n_prompt, int n_predict, cli_gen_stats *st);
/* The summary line: speeds and KV memory next to f16's. */
void cli_print_stats(const cli_gen *g, const cli_model_opts *o, const cli_gen_stats *st);

/* --session FILE. load: restores FILE into ctx if it exists (*n_cached gets
 * its token count; 0 when there is no file yet); 1 on success, else prints
 * why. reuse: keeps the longest prefix of the cache that the prompt starts
 * with (short of the prompt's last token, whose logits are needed) and
 * returns its length: evaluate prompt from there. save: 1 on success. */
int cli_session_load(kvq_ctx *ctx, const char *path, int *n_cached);
int cli_session_reuse(kvq_ctx *ctx, const int32_t *prompt, int n_prompt);
int cli_session_save(const kvq_ctx *ctx, const char *path);

#endif
