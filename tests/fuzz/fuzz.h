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

#include "kvq.h"

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

/* The tiny in-repo model (tests/data/tiny-llama.gguf, from gen_corpus.py),
 * loaded once per process: $KVQ_TINY_MODEL, else the path from the repo
 * root, where make runs the fuzzers and the replay. Missing, it is a setup
 * error, not a finding: say so and stop. */
static inline const kvq_model *fuzz_tiny_model(void) {
    static kvq_model *m;
    if (m) return m;
    const char *path = getenv("KVQ_TINY_MODEL");
    if (!path) path = "tests/data/tiny-llama.gguf";
    if (kvq_model_load(path, &m) != KVQ_OK) {
        fprintf(stderr, "fuzz: cannot load the tiny model %s: %s (run from the repo root)\n", path, kvq_last_error());
        exit(2);
    }
    return m;
}

#endif
