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

int cli_parse_float(const char *flag, const char *text, double lo, double hi, double *out) {
    if (!text) {
        fprintf(stderr, "kvq: %s needs a value\n", flag);
        return 0;
    }
    char *end;
    errno = 0;
    const double v = strtod(text, &end);
    if (errno || end == text || *end != '\0' || !(v >= lo && v <= hi)) {
        fprintf(stderr, "kvq: %s: '%s' is not a number in [%g, %g]\n", flag, text, lo, hi);
        return 0;
    }
    *out = v;
    return 1;
}

char *cli_read_file(const char *path, size_t *len) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) {
        fprintf(stderr, "kvq: cannot open %s: %s\n", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n + 1 >= cap) {
            char *b = realloc(buf, cap *= 2);
            if (!b) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = b;
        }
        const size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) break;
    }
    const int err = ferror(f);
    if (f != stdin) fclose(f);
    if (!buf || err) {
        fprintf(stderr, "kvq: cannot read %s%s\n", path, buf ? "" : ": out of memory");
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

int cli_parse_str_list(const char *cmd, const char *flag, const char *text, cli_str_list *l, char **store) {
    if (!text || !*text) {
        fprintf(stderr, "kvq %s: %s needs a value\n", cmd, flag);
        return 0;
    }
    char *s = strdup(text);
    if (!s) {
        fprintf(stderr, "kvq %s: out of memory\n", cmd);
        return 0;
    }
    *store = s;
    for (char *tok = s;;) {
        char *comma = strchr(tok, ',');
        if (comma) *comma = '\0';
        if (!*tok) {
            fprintf(stderr, "kvq %s: %s: empty name in '%s'\n", cmd, flag, text);
            return 0;
        }
        if (l->n == CLI_LIST_MAX) {
            fprintf(stderr, "kvq %s: %s: more than %d values\n", cmd, flag, CLI_LIST_MAX);
            return 0;
        }
        l->v[l->n++] = tok;
        if (!comma) return 1;
        tok = comma + 1;
    }
}
