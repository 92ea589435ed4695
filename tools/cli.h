/* cli.h — subcommands and small helpers shared by the CLI. */
#ifndef KVQ_CLI_H
#define KVQ_CLI_H

#include <stdint.h>

int cmd_codecs(int argc, char **argv);
int cmd_attn_bench(int argc, char **argv);

/* Monotonic time in seconds. */
double cli_now(void);
/* Parses a whole decimal integer in [lo, hi]; on failure prints an error
 * naming the flag and returns 0. */
int cli_parse_int(const char *flag, const char *text, long lo, long hi, long *out);

#endif
