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
int cmd_bench(int argc, char **argv);

/* Monotonic time in seconds. */
double cli_now(void);
/* Parses a whole decimal integer in [lo, hi]; on failure prints an error
 * naming the flag and returns 0. */
int cli_parse_int(const char *flag, const char *text, long lo, long hi, long *out);

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
/* "K q8_0, V q4_0" or "k8v4 (K q8_0, V q4_0)". */
const char *cli_kv_label(const cli_model_opts *o, char *buf, size_t cap);

#endif
