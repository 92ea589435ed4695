/* fuzz_session.c — arbitrary bytes as a session file, loaded into a
 * context on the tiny in-repo model.
 *
 * Input: one byte, then the file. The byte's low bits pick the context's
 * cache configuration (configs[] below, which gen_corpus.py mirrors to
 * write valid seeds); with bit 7 set the header's size and checksum are
 * rewritten to match the bytes, so mutations reach the checks behind the
 * checksum instead of stopping at it.
 * Checks: a refused file names the problem and leaves the context exactly
 * as it was (tokens and cache bytes); an accepted one holds as many tokens
 * as the context reports, and the next token evaluates through the loaded
 * cache (attention reads every tile, sink and staged row). */
#include <string.h>

#include "common/hash.h"
#include "fuzz.h"
#include "kv/kv_session.h"
#include "model/ctx.h"

static const struct {
    const char *ctk, *ctv;
    int n_sinks, boundary;
} configs[] = {
    {"f16", "f16", 0, 0},
    {"q8_0", "q8_0", 3, 0},
    {"q4_0", "turbo3", 2, 0},
    {"f32", "f16", 0, 1},
};
#define N_CONFIGS (int)(sizeof configs / sizeof configs[0])

static kvq_ctx *context(int k) {
    static kvq_ctx *ctx[N_CONFIGS];
    if (ctx[k]) return ctx[k];
    kvq_ctx_params p;
    kvq_ctx_params_default(&p);
    p.n_ctx = 256;
    p.n_threads = 1;
    p.ctk = configs[k].ctk;
    p.ctv = configs[k].ctv;
    p.n_sinks = configs[k].n_sinks;
    p.boundary_layers = configs[k].boundary;
    p.seed = 7;
    FUZZ_REQUIRE(kvq_ctx_create(fuzz_tiny_model(), &p, &ctx[k]) == KVQ_OK, "context: %s", kvq_last_error());
    return ctx[k];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    kvq_ctx *c = context((data[0] & 0x7F) % N_CONFIGS);
    /* The context's state before, to compare after a refusal. */
    int n_before;
    const int32_t *t = kvq_ctx_tokens(c, &n_before);
    int32_t *before = malloc(sizeof *before * (size_t)(n_before + 1)); // (n_before)
    if (!before) return 0;
    if (n_before) memcpy(before, t, sizeof *t * (size_t)n_before);
    const size_t bytes_before = kvq_ctx_kv_bytes(c);

    uint8_t *file = malloc(size - 1 ? size - 1 : 1); // (size - 1) exact, for ASan
    if (!file) {
        free(before);
        return 0;
    }
    memcpy(file, data + 1, size - 1);
    if ((data[0] & 0x80) && size - 1 >= KVQ_SESSION_HEADER_BYTES) {
        const uint64_t n = size - 1 - KVQ_SESSION_HEADER_BYTES;
        const uint64_t h = kvq_fnv1a64(KVQ_FNV64_INIT, file + KVQ_SESSION_HEADER_BYTES, (size_t)n);
        for (int i = 0; i < 8; i++) {
            file[16 + i] = (uint8_t)(n >> (8 * i));
            file[24 + i] = (uint8_t)(h >> (8 * i));
        }
    }
    const kvq_status s = kvq_ctx_session_load_bytes(c, file, size - 1);
    free(file);
    int n_after;
    t = kvq_ctx_tokens(c, &n_after);
    if (s != KVQ_OK) {
        FUZZ_REQUIRE(kvq_last_error()[0], "refused (%s) without a message", kvq_status_name(s));
        FUZZ_REQUIRE(n_after == n_before && (!n_before || memcmp(t, before, sizeof *t * (size_t)n_before) == 0) &&
                         kvq_ctx_kv_bytes(c) == bytes_before,
                     "a refused session changed the context: %s", kvq_last_error());
    } else {
        FUZZ_REQUIRE(n_after == kvq_ctx_n_past(c) && n_after <= kvq_ctx_n_ctx(c), "%d tokens", n_after);
        if (n_after < kvq_ctx_n_ctx(c)) {
            const int32_t next = 1;
            const kvq_status e = kvq_ctx_eval(c, &next, 1, NULL, 0);
            FUZZ_REQUIRE(e == KVQ_OK || kvq_last_error()[0], "eval failed without a message");
        }
    }
    free(before);
    return 0;
}
