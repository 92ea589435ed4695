/* fuzz_codec_decode.c — every KV codec on arbitrary bytes.
 *
 * Input: byte 0 picks the codec (and +qjl for quantized ones), byte 1 the
 * head_dim (32..512), byte 2 the ISA path and whether a centering mean is
 * set; the rest is the payload. The payload is decoded as rows of encoded
 * bytes (decoding must accept any bytes), then read as floats and encoded,
 * checking kvq.h's input rules: a quantized codec refuses a non-finite row
 * with KVQ_ERR_NONFINITE, an overflowing one with KVQ_ERR_RANGE, and in
 * both cases stores the all-zero row; an accepted row decodes to finite
 * values; f32 stores bits exactly. */
#include <math.h>
#include <string.h>

#include "fuzz.h"
#include "kvq.h"

#define HEADER 3

/* Payload bytes beyond this are ignored (keeps each run short). */
#define MAX_PAYLOAD (8 * KVQ_MAX_HEAD_DIM * 4)

static int all_finite(const float *x, int n) {
    for (int i = 0; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

/* zero_row: the encoding of the all-zero row, made before any mean was set;
 * zero_y: its decoding (under the mean, if set). */
static void check_encode(kvq_codec *c, const float *x, const float *mean, uint8_t *row, const uint8_t *zero_row,
                         const float *zero_y, float *y) {
    const int d = kvq_codec_head_dim(c);
    const size_t rb = kvq_codec_row_bytes(c);
    const char *name = kvq_codec_name(c);
    const kvq_status s = kvq_codec_encode_row(c, x, row);
    if (!kvq_codec_is_quantized(c)) {
        FUZZ_REQUIRE(s == KVQ_OK, "%s refused a row: %s", name, kvq_last_error());
        FUZZ_REQUIRE(kvq_codec_decode_row(c, row, y) == KVQ_OK, "%s decode", name);
        if (!mean && !strcmp(name, "f32")) FUZZ_REQUIRE(!memcmp(x, y, sizeof(float) * (size_t)d), "f32 not exact");
        return;
    }
    if (!all_finite(x, d)) {
        FUZZ_REQUIRE(s == KVQ_ERR_NONFINITE, "%s: non-finite row gave %s", name, kvq_status_name(s));
    } else {
        FUZZ_REQUIRE(s == KVQ_OK || s == KVQ_ERR_RANGE, "%s: finite row gave %s: %s", name, kvq_status_name(s),
                     kvq_last_error());
    }
    if (s != KVQ_OK) {
        FUZZ_REQUIRE(kvq_last_error()[0], "%s: refusal without a message", name);
        /* The +qjl sketch of a refused row is zeroed, while encoding zeros sets
         * its sign bits; either way its norm is 0, so compare what decodes. */
        if (!strstr(name, "+qjl")) FUZZ_REQUIRE(!memcmp(row, zero_row, rb), "%s: refused row not the zero row", name);
        FUZZ_REQUIRE(kvq_codec_decode_row(c, row, y) == KVQ_OK, "%s decode", name);
        FUZZ_REQUIRE(!memcmp(y, zero_y, sizeof(float) * (size_t)d), "%s: refused row does not decode as zeros", name);
        return;
    }
    FUZZ_REQUIRE(kvq_codec_decode_row(c, row, y) == KVQ_OK, "%s decode", name);
    FUZZ_REQUIRE(all_finite(y, d), "%s: accepted row decodes to non-finite values", name);
}

/* Codecs are made once per (codec, head_dim) and kept: building rotations
 * and QJL sketches dominates a run otherwise. Each run resets what it sets
 * (ISA, mean). The cache is reachable until exit, so it is no leak. */
#define N_DIMS (KVQ_MAX_HEAD_DIM / 32)
static kvq_codec **cache; // (2 * codec count, N_DIMS); NULL = not made yet

static kvq_codec *cached_codec(const char *name, int pick, int d) {
    if (!cache) {
        cache = calloc((size_t)(2 * kvq_codec_count() * N_DIMS), sizeof *cache);
        FUZZ_REQUIRE(cache, "out of memory");
    }
    kvq_codec **slot = &cache[pick * N_DIMS + d / 32 - 1];
    if (!*slot && kvq_codec_create(name, d, 0x5eed, slot) != KVQ_OK) {
        FUZZ_REQUIRE(pick >= kvq_codec_count(), "%s at head_dim %d refused: %s", name, d, kvq_last_error());
        return NULL;
    }
    return *slot;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < HEADER) return 0;
    const int n_codecs = kvq_codec_count();
    const int pick = data[0] % (2 * n_codecs);
    const int d = 32 * (1 + data[1] % N_DIMS);
    const kvq_isa isa = (kvq_isa)((data[2] & 3) % KVQ_ISA_COUNT);
    const int centered = (data[2] >> 2) & 1;
    const uint8_t *payload = data + HEADER;
    size_t n_payload = size - HEADER;
    if (n_payload > MAX_PAYLOAD) n_payload = MAX_PAYLOAD;

    char name[64];
    snprintf(name, sizeof name, "%s%s", kvq_codec_name_at(pick % n_codecs), pick >= n_codecs ? "+qjl" : "");
    kvq_codec *c = cached_codec(name, pick, d);
    if (!c) return 0; /* +qjl on a plain codec */
    FUZZ_REQUIRE(kvq_codec_set_isa(c, kvq_isa_supported(isa) ? isa : kvq_isa_default()) == KVQ_OK, "%s set_isa",
                 name);
    FUZZ_REQUIRE(kvq_codec_set_mean(c, NULL) == KVQ_OK, "%s clear mean", name);
    const size_t rb = kvq_codec_row_bytes(c);

    /* Exact-size heap buffers, so the sanitizers see any overrun. */
    uint8_t *row = malloc(rb);                       // (row_bytes)
    uint8_t *zero_row = malloc(rb);                  // (row_bytes)
    float *x = calloc((size_t)d, sizeof *x);         // (head_dim)
    float *y = malloc(sizeof *y * (size_t)d);        // (head_dim)
    float *mean = malloc(sizeof *mean * (size_t)d);  // (head_dim)
    float *zero_y = malloc(sizeof *zero_y * (size_t)d); // (head_dim)
    FUZZ_REQUIRE(row && zero_row && x && y && mean && zero_y, "out of memory");
    FUZZ_REQUIRE(kvq_codec_encode_row(c, x, zero_row) == KVQ_OK, "%s refused the zero row", name);

    if (centered) {
        /* A small finite mean from the payload's first bytes. */
        for (int i = 0; i < d; i++) mean[i] = (float)(int8_t)(i < (int)n_payload ? payload[i] : 0) / 16.0f;
        FUZZ_REQUIRE(kvq_codec_set_mean(c, mean) == KVQ_OK, "%s set_mean", name);
    }
    FUZZ_REQUIRE(kvq_codec_decode_row(c, zero_row, zero_y) == KVQ_OK, "%s decode", name);

    /* Decode: every whole row of the payload, and a zero-padded tail. */
    for (size_t off = 0; off < n_payload; off += rb) {
        const size_t n = n_payload - off < rb ? n_payload - off : rb;
        memset(row, 0, rb);
        memcpy(row, payload + off, n);
        FUZZ_REQUIRE(kvq_codec_decode_row(c, row, y) == KVQ_OK, "%s decode refused bytes", name);
    }

    /* Encode: the payload as rows of floats (the last zero-padded). */
    for (size_t off = 0; off < n_payload || off == 0; off += sizeof(float) * (size_t)d) {
        const size_t n = n_payload - off < sizeof(float) * (size_t)d ? n_payload - off : sizeof(float) * (size_t)d;
        memset(x, 0, sizeof(float) * (size_t)d);
        memcpy(x, payload + off, n);
        check_encode(c, x, centered ? mean : NULL, row, zero_row, zero_y, y);
    }

    free(row);
    free(zero_row);
    free(x);
    free(y);
    free(mean);
    free(zero_y);
    return 0;
}
