/* test_golden.c — one committed vector per codec (input, encoded bytes,
 * decoded floats) so that no format can drift silently. A new codec's file
 * is written by `KVQ_UPDATE_GOLDEN=1 build/kvq-test golden` (then review and
 * commit it); an existing file is never rewritten unless its codec's is
 * missing. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/fp16.h"
#include "common/rng.h"
#include "kvq.h"
#include "test.h"

#define GOLDEN_DIR "tests/data/golden"
#define GOLDEN_D 64
#define GOLDEN_SEED 1234

static void golden_input(float *x) {
    uint64_t s = 4242;
    for (int i = 0; i < GOLDEN_D; i++) x[i] = (float)kvq_rng_normal(&s);
    x[5] *= 23.0f; /* an outlier channel, as K caches have */
    x[40] = -x[40] * 11.0f;
}

static void write_hex_bytes(FILE *f, const char *tag, const uint8_t *b, size_t n) {
    fprintf(f, "%s", tag);
    for (size_t i = 0; i < n; i++) fprintf(f, "%s%02x", i % 32 ? "" : " ", b[i]);
    fprintf(f, "\n");
}

static void write_hex_floats(FILE *f, const char *tag, const float *x, int n) {
    fprintf(f, "%s", tag);
    for (int i = 0; i < n; i++) fprintf(f, " %08x", (unsigned)kvq_f32_bits(x[i]));
    fprintf(f, "\n");
}

/* Reads the hex digits after `tag` on its line into out (n bytes). */
static int read_hex_line(FILE *f, const char *tag, uint8_t *out, size_t n) {
    char line[16384];
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#') continue;
        const size_t tl = strlen(tag);
        if (strncmp(line, tag, tl) != 0) return 0;
        size_t k = 0;
        int hi = -1;
        for (const char *p = line + tl; *p && *p != '\n'; p++) {
            int v;
            if (*p >= '0' && *p <= '9') v = *p - '0';
            else if (*p >= 'a' && *p <= 'f') v = *p - 'a' + 10;
            else if (*p == ' ') continue;
            else return 0;
            if (hi < 0) hi = v;
            else {
                if (k == n) return 0;
                out[k++] = (uint8_t)(hi << 4 | v);
                hi = -1;
            }
        }
        return k == n && hi < 0;
    }
    return 0;
}

/* Floats are written as big-endian hex words; convert to values. */
static void words_to_floats(const uint8_t *b, float *x, int n) {
    for (int i = 0; i < n; i++) {
        const uint32_t u = (uint32_t)b[4 * i] << 24 | (uint32_t)b[4 * i + 1] << 16 | (uint32_t)b[4 * i + 2] << 8 |
                           b[4 * i + 3];
        x[i] = kvq_f32_from_bits(u);
    }
}

TEST(golden_vectors_per_codec) {
    const int update = getenv("KVQ_UPDATE_GOLDEN") != NULL;
    float x[GOLDEN_D], y[GOLDEN_D], want_x[GOLDEN_D], want_y[GOLDEN_D];
    uint8_t enc[4 * GOLDEN_D + 64], want_enc[4 * GOLDEN_D + 64], words[4 * GOLDEN_D];
    golden_input(x);
    for (int i = 0; i < kvq_codec_count(); i++) {
        const char *name = kvq_codec_name_at(i);
        char path[256];
        snprintf(path, sizeof path, GOLDEN_DIR "/%s-d%d.txt", name, GOLDEN_D);
        kvq_codec *c = NULL;
        CHECK_OK(kvq_codec_create(name, GOLDEN_D, GOLDEN_SEED, &c));
        CHECK_OK(kvq_codec_set_isa(c, KVQ_ISA_REF));
        const size_t rb = kvq_codec_row_bytes(c);
        CHECK_OK(kvq_codec_encode_row(c, x, enc));
        CHECK_OK(kvq_codec_decode_row(c, enc, y));
        FILE *f = fopen(path, "r");
        if (!f && update) {
            FILE *w = fopen(path, "w");
            CHECKF(w, "cannot write %s: %s", path, strerror(errno));
            fprintf(w, "# kvq golden vector: codec %s, head_dim %d, seed %d (reference path)\n", name, GOLDEN_D,
                    GOLDEN_SEED);
            write_hex_floats(w, "input", x, GOLDEN_D);
            write_hex_bytes(w, "encoded", enc, rb);
            write_hex_floats(w, "decoded", y, GOLDEN_D);
            fclose(w);
            kvq_test_skip("wrote %s: review and commit it", path);
            kvq_codec_free(c);
            continue;
        }
        CHECKF(f, "missing %s: run KVQ_UPDATE_GOLDEN=1 build/kvq-test golden, review, commit", path);
        const int ok_in = read_hex_line(f, "input", words, sizeof(float) * GOLDEN_D);
        const int ok_enc = ok_in && read_hex_line(f, "encoded", want_enc, rb);
        words_to_floats(words, want_x, GOLDEN_D);
        const int ok_dec = ok_enc && read_hex_line(f, "decoded", words, sizeof(float) * GOLDEN_D);
        words_to_floats(words, want_y, GOLDEN_D);
        fclose(f);
        CHECKF(ok_dec, "%s: malformed golden file (or row size changed)", path);
        CHECKF(memcmp(want_x, x, sizeof x) == 0, "%s: input generator changed", path);
        /* Every ISA path must produce the golden bytes and floats. */
        for (int isa = 0; isa < KVQ_ISA_COUNT; isa++) {
            if (!kvq_isa_supported((kvq_isa)isa)) continue;
            CHECK_OK(kvq_codec_set_isa(c, (kvq_isa)isa));
            CHECK_OK(kvq_codec_encode_row(c, want_x, enc));
            CHECKF(memcmp(enc, want_enc, rb) == 0, "%s: encoded bytes drifted (isa %s)", name,
                   kvq_isa_name((kvq_isa)isa));
            CHECK_OK(kvq_codec_decode_row(c, want_enc, y));
            CHECKF(memcmp(y, want_y, sizeof y) == 0, "%s: decoded floats drifted (isa %s)", name,
                   kvq_isa_name((kvq_isa)isa));
        }
        kvq_codec_free(c);
    }
}
