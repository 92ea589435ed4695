/* cli_util.c — helpers shared by the subcommands. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

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
