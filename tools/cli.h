/* cli.h — subcommands and small helpers shared by the CLI. */
#ifndef KVQ_CLI_H
#define KVQ_CLI_H

#include <stddef.h>
#include <stdint.h>

int cmd_codecs(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_attn_bench(int argc, char **argv);

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

#endif
