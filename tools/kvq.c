/* kvq.c — the command-line tool: dispatches to subcommands. Uses only
 * include/kvq.h. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} commands[] = {
    {"run", cmd_run, "generate from a prompt with a compressed KV cache"},
    {"chat", cmd_chat, "interactive chat; keeps the compressed cache between turns"},
    {"tokenize", cmd_tokenize, "text to token ids and back"},
    {"bench", cmd_bench, "llama-bench-style pp/tg throughput over KV configs and depths, f16 control"},
    {"ppl", cmd_ppl, "perplexity and KL divergence from an f16 base for each KV config"},
    {"codecs", cmd_codecs, "list KV codecs: bits/value, round-trip error, encode speed"},
    {"info", cmd_info, "GGUF file: version, metadata, tensor table"},
    {"attn-bench", cmd_attn_bench, "attention over a synthetic compressed cache vs measured bandwidth"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: kvq COMMAND [options]   (kvq COMMAND --help for its options)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "kvq: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
