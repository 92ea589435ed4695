/* fuzz_wtype.c — the weight kernels on arbitrary blocks.
 *
 * Input: byte 0 picks the weight type, byte 1 the ISA path; the rest is
 * blocks of that type (a partial last block is dropped, an empty payload
 * is one zero block). Every ISA's dequantization must give the reference's
 * bits (wtype.h promises bit-exact; any NaN matches any NaN); matvec and matmul on the blocks as a
 * matrix must not trap (NaN and Inf results are allowed: arbitrary fp16
 * scales hold them). */
#include <math.h>
#include <string.h>

#include "fuzz.h"
#include "model/wtype.h"

#define HEADER 2
/* At most this many blocks per run (a K-type block holds 256 values). */
#define MAX_BLOCKS 64

/* Equal bits, or both NaN: NaN payloads are not part of the promise. */
static int same_bits(float a, float b) {
    return !memcmp(&a, &b, sizeof a) || (isnan(a) && isnan(b));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < HEADER) return 0;
    const kvq_wtype_traits *t = kvq_wtype_at(data[0] % kvq_wtype_count());
    const kvq_isa isa = (kvq_isa)(data[1] % KVQ_ISA_COUNT);
    if (!kvq_isa_supported(isa)) return 0;
    const size_t bb = (size_t)t->block_bytes;
    int64_t n_blocks = (int64_t)((size - HEADER) / bb);
    if (n_blocks > MAX_BLOCKS) n_blocks = MAX_BLOCKS;
    if (n_blocks == 0) n_blocks = 1;
    const int64_t n_values = n_blocks * t->block_size;

    /* Exact-size heap copies, so the sanitizers see any overread. */
    uint8_t *w = calloc((size_t)n_blocks, bb);              // (n_blocks, block_bytes)
    float *ref = malloc(sizeof *ref * (size_t)n_values);   // (n_values)
    float *got = malloc(sizeof *got * (size_t)n_values);   // (n_values)
    FUZZ_REQUIRE(w && ref && got, "out of memory");
    const size_t have = size - HEADER < (size_t)n_blocks * bb ? size - HEADER : (size_t)n_blocks * bb;
    memcpy(w, data + HEADER, have);

    FUZZ_REQUIRE(kvq_wtype_dequantize_row(t->type, w, ref, n_values) == KVQ_OK, "%s dequantize", t->name);
    t->dequant_isa[isa](w, got, n_blocks);
    for (int64_t i = 0; i < n_values; i++)
        FUZZ_REQUIRE(same_bits(ref[i], got[i]), "%s: %s dequantization differs from ref at %lld: %a vs %a",
                     t->name, kvq_isa_name(isa), (long long)i, ref[i], got[i]);

    /* The blocks as a matrix of rows of n values, n the shortest row the
     * kernels take: a multiple of the block size and of 32. */
    const int64_t n = t->block_size > 32 ? t->block_size : 32;
    const int64_t rows = n_values / n;
    if (rows > 0) {
        FUZZ_REQUIRE(kvq_wtype_check_n(t, n) == KVQ_OK, "%s check_n(%lld)", t->name, (long long)n);
        const size_t row_bytes = kvq_wtype_row_bytes(t, n);
        enum { N_TOK = 3 };
        float *x = malloc(sizeof *x * (size_t)(N_TOK * n));       // (n_tok, n)
        float *y = malloc(sizeof *y * (size_t)(N_TOK * rows));    // (n_tok, rows)
        FUZZ_REQUIRE(x && y, "out of memory");
        for (int64_t k = 0; k < N_TOK * n; k++) x[k] = (float)((k * 7919) % 61 - 30) / 8.0f;
        t->matvec[isa](t, w, row_bytes, x, n, 0, rows, y);
        /* An odd row range, as a thread's share of the rows would be. */
        if (rows > 1) t->matvec[isa](t, w, row_bytes, x, n, 1, rows, y);
        t->matmul[isa](t, w, row_bytes, x, N_TOK, n, 0, rows, y, rows);
        free(x);
        free(y);
    }
    free(w);
    free(ref);
    free(got);
    return 0;
}
