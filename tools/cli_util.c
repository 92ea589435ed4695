/* cli_util.c — helpers shared by the subcommands. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

double cli_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int cli_parse_int(const char *flag, const char *text, long lo, long hi, long *out) {
    if (!text) {
        fprintf(stderr, "kvq: %s needs a value\n", flag);
        return 0;
    }
    char *end;
    errno = 0;
    const long v = strtol(text, &end, 10);
    if (errno || end == text || *end != '\0' || v < lo || v > hi) {
        fprintf(stderr, "kvq: %s: '%s' is not a whole number in [%ld, %ld]\n", flag, text, lo, hi);
        return 0;
    }
    *out = v;
    return 1;
}

int cli_default_model(char *buf, size_t cap) {
    const char *env = getenv("KVQ_MODEL");
    int n;
    if (env && *env) {
        n = snprintf(buf, cap, "%s", env);
    } else {
        const char *cache = getenv("KVQ_CACHE");
        const char *home = getenv("HOME");
        if (cache && *cache) n = snprintf(buf, cap, "%s/%s", cache, CLI_DEFAULT_MODEL_NAME);
        else if (home && *home) n = snprintf(buf, cap, "%s/.cache/kvq/%s", home, CLI_DEFAULT_MODEL_NAME);
        else {
            fprintf(stderr, "kvq: no model given, and neither KVQ_MODEL, KVQ_CACHE nor HOME is set; pass -m FILE\n");
            return 0;
        }
    }
    if (n < 0 || (size_t)n >= cap) {
        fprintf(stderr, "kvq: the default model path is too long\n");
        return 0;
    }
    if (access(buf, R_OK) != 0) {
        if (env && *env)
            fprintf(stderr, "kvq: KVQ_MODEL=%s: %s\n", buf, strerror(errno));
        else
            fprintf(stderr, "kvq: no model at %s\n     run `make model` to fetch the default model, or pass -m FILE\n",
                    buf);
        return 0;
    }
    return 1;
}
