/* fuzz_tokenizer.c — arbitrary bytes through encode, decode and the
 * streaming detokenizer.
 *
 * Input: one flag byte, then the text. Flags: bit 0 picks the tokenizer
 * (0: the tiny model's byte-level BPE with its merges and ChatML specials;
 * 1: a SentencePiece vocabulary built here, with byte fallback), bit 1
 * parse_special, bit 2 add_bos. Checks: encode accepts any bytes, the size
 * query agrees with the encode, every id is in the vocabulary, the BPE
 * pieces give the text back byte for byte (its vocabulary has every byte),
 * and the detokenizer emits valid UTF-8 only. */
#include <string.h>

#include "fuzz.h"

/* A SentencePiece vocabulary: <unk> <s> </s>, the 256 byte tokens, a few
 * scored pieces with and without the U+2581 space mark. */
static kvq_tokenizer *spm(void) {
    static kvq_tokenizer *t;
    if (t) return t;
    static char bytes[256][7];
    static const char *pieces[] = {"\xe2\x96\x81the", "\xe2\x96\x81", "th", "e", "h", "t", "\xe2\x96\x81t",
                                   "\xc3\xa9", "ab", "a", "b", "\xe2\x96\x81" "a"};
    enum { N_PIECES = sizeof pieces / sizeof pieces[0], N = 3 + 256 + N_PIECES };
    static const char *tokens[N];
    static int32_t types[N];
    static float scores[N];
    tokens[0] = "<unk>";
    tokens[1] = "<s>";
    tokens[2] = "</s>";
    types[0] = KVQ_TOKEN_UNKNOWN;
    types[1] = types[2] = KVQ_TOKEN_CONTROL;
    for (int b = 0; b < 256; b++) {
        snprintf(bytes[b], sizeof bytes[b], "<0x%02X>", b);
        tokens[3 + b] = bytes[b];
        types[3 + b] = KVQ_TOKEN_BYTE;
    }
    for (int i = 0; i < N_PIECES; i++) {
        tokens[259 + i] = pieces[i];
        types[259 + i] = KVQ_TOKEN_NORMAL;
        scores[259 + i] = -(float)i;
    }
    kvq_tokenizer_params p = {0};
    p.model = "llama";
    p.n_vocab = N;
    p.tokens = tokens;
    p.token_types = types;
    p.scores = scores;
    p.bos_id = 1;
    p.eos_id = 2;
    p.unk_id = 0;
    p.eot_id = p.pad_id = -1;
    p.add_bos = 1;
    p.add_space_prefix = -1;
    FUZZ_REQUIRE(kvq_tokenizer_create(&p, &t) == KVQ_OK, "spm vocabulary: %s", kvq_last_error());
    return t;
}

static kvq_tokenizer *bpe(void) {
    static kvq_tokenizer *t;
    if (!t) FUZZ_REQUIRE(kvq_model_tokenizer(fuzz_tiny_model(), &t) == KVQ_OK, "tiny model: %s", kvq_last_error());
    return t;
}

/* Length of the valid UTF-8 prefix of s (n bytes): n if all of it is. */
static size_t utf8_valid(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        const unsigned c = s[i];
        size_t k = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
        if (!k || i + k > n) return i;
        for (size_t j = 1; j < k; j++)
            if ((s[i + j] & 0xC0) != 0x80) return i;
        if ((c == 0xE0 && s[i + 1] < 0xA0) || (c == 0xED && s[i + 1] > 0x9F) || (c == 0xF0 && s[i + 1] < 0x90) ||
            (c == 0xF4 && s[i + 1] > 0x8F))
            return i;
        i += k;
    }
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > 4096) return 0;
    const int flags = data[0], use_spm = flags & 1, special = (flags >> 1) & 1, add_bos = (flags >> 2) & 1;
    const char *text = (const char *)data + 1;
    const size_t len = size - 1;
    const kvq_tokenizer *t = use_spm ? spm() : bpe();
    const int32_t n_vocab = kvq_tokenizer_n_vocab(t);

    size_t need = 0;
    const kvq_status q = kvq_tokenizer_encode(t, text, len, add_bos, special, NULL, 0, &need);
    FUZZ_REQUIRE(q == KVQ_OK || q == KVQ_ERR_RANGE, "size query: %s", kvq_last_error());
    FUZZ_REQUIRE(need <= 2 * len + 2, "%zu ids for %zu bytes", need, len);
    int32_t *ids = malloc(sizeof *ids * (need + 1)); // (need + 1)
    if (!ids) return 0;
    size_t n = 0;
    FUZZ_REQUIRE(kvq_tokenizer_encode(t, text, len, add_bos, special, ids, need + 1, &n) == KVQ_OK, "encode: %s",
                 kvq_last_error());
    FUZZ_REQUIRE(n == need, "encode gave %zu ids, the size query %zu", n, need);
    if (n) FUZZ_REQUIRE(kvq_tokenizer_encode(t, text, len, add_bos, special, ids, n - 1, &n) == KVQ_ERR_RANGE,
                        "a short buffer was not refused");

    /* Pieces back to bytes; the BPE vocabulary holds every byte, so the
     * text comes back whole (after a bos the flags asked for). */
    char *back = malloc(len + 64 * (n + 1)); // the decoded bytes
    size_t got = 0;
    for (size_t i = 0; back && i < n; i++) {
        FUZZ_REQUIRE(ids[i] >= 0 && ids[i] < n_vocab, "id %d not in [0, %d)", ids[i], n_vocab);
        size_t k = 0;
        FUZZ_REQUIRE(kvq_tokenizer_token_to_piece(t, ids[i], 1, back + got, 64, &k) == KVQ_OK, "piece of %d: %s",
                     ids[i], kvq_last_error());
        got += k;
    }
    if (back && !use_spm) {
        const int32_t bos = kvq_tokenizer_special_id(t, KVQ_SPECIAL_BOS);
        size_t skip = 0;
        if (add_bos && n && ids[0] == bos) kvq_tokenizer_token_to_piece(t, bos, 1, back, 64, &skip);
        FUZZ_REQUIRE(got - skip == len && memcmp(back + skip, text, len) == 0, "round trip: %zu bytes in, %zu out",
                     len, got - skip);
    }
    free(back);

    /* The display stream is valid UTF-8 whatever the ids. */
    kvq_detok *d = NULL;
    if (kvq_detok_create(t, special, &d) == KVQ_OK) {
        for (size_t i = 0; i <= n; i++) {
            const char *out;
            size_t k;
            const kvq_status s = i < n ? kvq_detok_push(d, ids[i], &out, &k) : kvq_detok_flush(d, &out, &k);
            FUZZ_REQUIRE(s == KVQ_OK, "detok: %s", kvq_last_error());
            FUZZ_REQUIRE(utf8_valid((const unsigned char *)out, k) == k, "detok emitted ill-formed UTF-8");
        }
        kvq_detok_free(d);
    }
    free(ids);
    return 0;
}
