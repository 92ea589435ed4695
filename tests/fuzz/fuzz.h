/* fuzz.h — shared by the fuzz targets (tests/fuzz/fuzz_*.c).
 *
 * Each target defines LLVMFuzzerTestOneInput. It is built twice: with
 * libFuzzer (`make fuzz-build`, clang) to search for crashes, and with
 * replay_main.c (any compiler, `make test`) to replay its committed corpus
 * tests/fuzz/corpus/<target>/ as a regression test. */
#ifndef KVQ_FUZZ_H
#define KVQ_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A property the library promises was broken: report and abort, which both
 * libFuzzer and the replay driver record as a failing input. */
#define FUZZ_REQUIRE(cond, ...)                                                  \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fprintf(stderr, "%s:%d: broken: %s: ", __FILE__, __LINE__, #cond);   \
            fprintf(stderr, __VA_ARGS__);                                        \
            fprintf(stderr, "\n");                                               \
            abort();                                                             \
        }                                                                        \
    } while (0)

#endif
