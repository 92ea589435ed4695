/* test_tokenizer.c — tokenizers on hand-made vocabularies: merge order,
 * pre-tokenizer splits, byte fallback, special tokens, streaming decode.
 * The real vocabulary is checked against HF tokenizers in
 * tests/oracle/test_tokenizer.py. */
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "common/rng.h"
#include "test.h"
#include "text/tokenizer.h"
#include "text/unicode.h"

/* A vocabulary under construction: texts live in a pool. */
typedef struct {
    const char *tok[400];
    int32_t type[400];
    float score[400];
    int32_t n;
    char pool[8192];
    size_t used;
    const char *merge[16];
    int32_t n_merges;
} vocab;

static int32_t add(vocab *v, const char *text, int32_t type, float score) {
    size_t n = strlen(text) + 1;
    char *p = v->pool + v->used;
    memcpy(p, text, n);
    v->used += n;
    v->tok[v->n] = p;
    v->type[v->n] = type;
    v->score[v->n] = score;
    return v->n++;
}

/* GPT-2's byte -> code point map, written out again so the test does not
 * share the code it checks. */
static uint32_t gpt2_cp(int b) {
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE) return (uint32_t)b;
    uint32_t n = 256;
    for (int i = 0; i < b; i++)
        if (!((i >= 0x21 && i <= 0x7E) || (i >= 0xA1 && i <= 0xAC) || i >= 0xAE)) n++;
    return n;
}

/* Byte-level vocabulary: ids 0..255 are the bytes, then "<|end|>"
 * (CONTROL, 256), "<user>" (USER_DEFINED, 257). */
static void bpe_vocab(vocab *v) {
    memset(v, 0, sizeof *v);
    for (int b = 0; b < 256; b++) {
        char u[5] = {0};
        kvq_utf8_encode(gpt2_cp(b), u);
        add(v, u, KVQ_TOKEN_NORMAL, 0.0f);
    }
    add(v, "<|end|>", KVQ_TOKEN_CONTROL, 0.0f);
    add(v, "<user>", KVQ_TOKEN_USER_DEFINED, 0.0f);
}

static kvq_status make_bpe(vocab *v, const char *pre, kvq_tokenizer **t) {
    kvq_tokenizer_params p = {0};
    p.model = "gpt2";
    p.pre = pre;
    p.n_vocab = v->n;
    p.tokens = v->tok;
    p.token_types = v->type;
    p.n_merges = v->n_merges;
    p.merges = v->merge;
    p.bos_id = 256;
    p.eos_id = 256;
    p.eot_id = p.unk_id = p.pad_id = -1;
    p.add_space_prefix = -1;
    return kvq_tokenizer_create(&p, t);
}

static size_t encode(kvq_tokenizer *t, const char *s, size_t len, int parse_special, int32_t *ids,
                     size_t cap) {
    size_t n = 0;
    if (kvq_tokenizer_encode(t, s, len, 0, parse_special, ids, cap, &n) != KVQ_OK) return SIZE_MAX;
    return n;
}

/* Concatenated pieces of ids; returns the length. */
static size_t decode(kvq_tokenizer *t, const int32_t *ids, size_t n, int special, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        size_t k;
        if (kvq_tokenizer_token_to_piece(t, ids[i], special, out + o, 256, &k) != KVQ_OK)
            return SIZE_MAX;
        o += k;
    }
    return o;
}

TEST(tokenizer_bpe_merge_rank_order) {
    vocab v;
    bpe_vocab(&v);
    int32_t ab = add(&v, "ab", 1, 0), bc = add(&v, "bc", 1, 0), abc = add(&v, "abc", 1, 0);
    // "b c" ranks first: "abc" -> a + bc, as no "a bc" merge exists.
    v.merge[0] = "b c";
    v.merge[1] = "a b";
    v.merge[2] = "ab c";
    v.n_merges = 3;
    kvq_tokenizer *t;
    CHECK_OK(make_bpe(&v, "gpt2", &t));
    int32_t ids[16];
    CHECK(encode(t, "abc", 3, 0, ids, 16) == 2);
    CHECK(ids[0] == 'a' && ids[1] == bc);
    kvq_tokenizer_free(t);
    // "a b" first: ab, then "ab c" -> abc.
    v.merge[0] = "a b";
    v.merge[1] = "b c";
    CHECK_OK(make_bpe(&v, "gpt2", &t));
    CHECK(encode(t, "abc", 3, 0, ids, 16) == 1);
    CHECK(ids[0] == abc);
    CHECK(encode(t, "abab", 4, 0, ids, 16) == 2);
    CHECK(ids[0] == ab && ids[1] == ab);
    kvq_tokenizer_free(t);
}

TEST(tokenizer_bpe_leftmost_tie) {
    vocab v;
    bpe_vocab(&v);
    int32_t aa = add(&v, "aa", 1, 0);
    v.merge[0] = "a a";
    v.n_merges = 1;
    kvq_tokenizer *t;
    CHECK_OK(make_bpe(&v, "gpt2", &t));
    int32_t ids[16];
    CHECK(encode(t, "aaa", 3, 0, ids, 16) == 2);
    CHECK(ids[0] == aa && ids[1] == 'a');
    kvq_tokenizer_free(t);
}

TEST(tokenizer_bpe_space_is_mapped) {
    vocab v;
    bpe_vocab(&v);
    // " a" is "\xc4\xa0" + "a" in byte-level text (space -> U+0120).
    int32_t sa = add(&v, "\xc4\xa0" "a", 1, 0);
    v.merge[0] = "\xc4\xa0 a";
    v.n_merges = 1;
    kvq_tokenizer *t;
    CHECK_OK(make_bpe(&v, "gpt2", &t));
    int32_t ids[16];
    char out[64];
    CHECK(encode(t, "a a", 3, 0, ids, 16) == 2);
    CHECK(ids[0] == 'a' && ids[1] == sa);
    CHECK(decode(t, ids, 2, 0, out) == 3 && memcmp(out, "a a", 3) == 0);
    kvq_tokenizer_free(t);
}

TEST(tokenizer_rejects_bad_vocabularies) {
    vocab v;
    bpe_vocab(&v);
    kvq_tokenizer *t = NULL;
    v.merge[0] = "a q";  // "aq" is not a token
    v.n_merges = 1;
    CHECK(make_bpe(&v, "gpt2", &t) == KVQ_ERR_FORMAT && t == NULL);
    v.merge[0] = "a b";  // "ab" is not a token
    CHECK(make_bpe(&v, "gpt2", &t) == KVQ_ERR_FORMAT);
    v.merge[0] = "ab";  // no separator
    CHECK(make_bpe(&v, "gpt2", &t) == KVQ_ERR_FORMAT);
    v.n_merges = 0;
    CHECK(make_bpe(&v, "no-such-pre", &t) == KVQ_ERR_UNSUPPORTED);
    v.type[3] = 9;
    CHECK(make_bpe(&v, "gpt2", &t) == KVQ_ERR_FORMAT);
    v.type[3] = 1;
    kvq_tokenizer_params p = {0};
    p.model = "gpt2";
    p.n_vocab = v.n;
    p.tokens = v.tok;
    p.bos_id = v.n;  // out of range
    p.eos_id = p.eot_id = p.unk_id = p.pad_id = -1;
    CHECK(kvq_tokenizer_create(&p, &t) == KVQ_ERR_FORMAT);
    CHECK(strstr(kvq_last_error(), "bos") != NULL);
    p.bos_id = -1;
    p.model = "llama";  // needs scores
    CHECK(kvq_tokenizer_create(&p, &t) == KVQ_ERR_FORMAT);
}

TEST(tokenizer_bpe_drops_bytes_without_token) {
    vocab v;
    bpe_vocab(&v);
    v.tok[0xFF] = "<unused>";  // byte 0xFF has no token now
    int32_t bang_q = add(&v, "!?", 1, 0);
    v.merge[0] = "! ?";
    v.n_merges = 1;
    kvq_tokenizer *t;
    CHECK_OK(make_bpe(&v, "gpt2", &t));
    int32_t ids[16];
    // One word; the byte is dropped before the merges run, so "!" and "?"
    // meet and merge.
    CHECK(encode(t, "a!\xff\xff?", 5, 0, ids, 16) == 2);
    CHECK(ids[0] == 'a' && ids[1] == bang_q);
    CHECK(encode(t, "\xff", 1, 0, ids, 16) == 0);
    kvq_tokenizer_free(t);
}

TEST(tokenizer_special_tokens_parse_flag) {
    vocab v;
    bpe_vocab(&v);
    kvq_tokenizer *t;
    CHECK_OK(make_bpe(&v, "gpt2", &t));
    const char *s = "x<|end|>y<user>";
    int32_t ids[64];
    char out[128];
    // Off: the control token's text is ordinary text; the user-defined
    // token is always matched (llama.cpp's rule).
    size_t n = encode(t, s, strlen(s), 0, ids, 64);
    CHECK(n == 1 + 7 + 1 + 1);
    CHECK(ids[1] == '<' && ids[9] == 257);
    CHECK(decode(t, ids, n, 0, out) == strlen(s) && memcmp(out, s, strlen(s)) == 0);
    n = encode(t, s, strlen(s), 1, ids, 64);
    CHECK(n == 4);
    CHECK(ids[0] == 'x' && ids[1] == 256 && ids[2] == 'y' && ids[3] == 257);
    // A control token decodes to nothing unless specials are asked for.
    CHECK(decode(t, ids, n, 0, out) == 8 && memcmp(out, "xy<user>", 8) == 0);
    CHECK(decode(t, ids, n, 1, out) == strlen(s) && memcmp(out, s, strlen(s)) == 0);
    // add_bos, and asking for the size first.
    size_t need = 0;
    CHECK(kvq_tokenizer_encode(t, "ab", 2, 1, 0, NULL, 0, &need) == KVQ_ERR_RANGE);
    CHECK(need == 3);
    CHECK_OK(kvq_tokenizer_encode(t, "ab", 2, 1, 0, ids, need, &need));
    CHECK(ids[0] == 256 && ids[1] == 'a' && ids[2] == 'b');
    CHECK(kvq_tokenizer_is_eog(t, 256) && !kvq_tokenizer_is_eog(t, 'a'));
    kvq_tokenizer_free(t);
}

TEST(tokenizer_bpe_invalid_utf8_round_trip) {
    vocab v;
    bpe_vocab(&v);
    kvq_tokenizer *t;
    CHECK_OK(make_bpe(&v, "smollm", &t));
    uint64_t st = 7;
    for (int rep = 0; rep < 200; rep++) {
        unsigned char x[64];
        size_t len = (size_t)(kvq_splitmix64(&st) % 64);
        for (size_t i = 0; i < len; i++) {
            uint64_t r = kvq_splitmix64(&st);
            // Mostly bytes that make ill-formed or partial sequences.
            static const unsigned char pick[] = {0x80, 0xBF, 0xC0, 0xC3, 0xE2, 0xED, 0xF0, 0xF4,
                                                 0xF5, 0xFF, ' ', 'a', '1', '\n', '\'', 0xA9};
            x[i] = pick[r % sizeof pick];
        }
        int32_t ids[128];
        char out[256];
        size_t n = encode(t, (const char *)x, len, 0, ids, 128);
        CHECK(n <= len);
        CHECK(decode(t, ids, n, 0, out) == len);
        CHECKF(memcmp(out, x, len) == 0, "round trip differs at rep %d", rep);
    }
    kvq_tokenizer_free(t);
}

/* The words pre splits s into, joined with '|'. */
static void split(kvq_pretok pre, const char *s, char *out) {
    size_t len = strlen(s), n = 0;
    uint32_t cp[256], off[257], ends[256], tmp[256];
    uint8_t cls[256];
    for (size_t i = 0; i < len; n++) {
        off[n] = (uint32_t)i;
        i += kvq_utf8_decode((const unsigned char *)s + i, len - i, &cp[n]);
        cls[n] = (uint8_t)kvq_uc_class(cp[n]);
    }
    off[n] = (uint32_t)len;
    size_t nw = kvq_pretok_split(pre, cp, cls, n, ends, tmp), a = 0, o = 0;
    for (size_t k = 0; k < nw; k++) {
        if (k) out[o++] = '|';
        memcpy(out + o, s + off[a], off[ends[k]] - off[a]);
        o += off[ends[k]] - off[a];
        a = ends[k];
    }
    out[o] = 0;
}

#define CHECK_SPLIT(pre, s, want)                                                  \
    do {                                                                           \
        char got_[512];                                                            \
        split(pre, s, got_);                                                       \
        CHECKF(strcmp(got_, want) == 0, "%s: got \"%s\", want \"%s\"", #pre, got_, want); \
    } while (0)

TEST(pretok_split_rules) {
    CHECK_SPLIT(KVQ_PRETOK_GPT2, "Hello world's  123 !!\n\n x",
                "Hello| world|'s| | 123| !!|\n\n| x");
    CHECK_SPLIT(KVQ_PRETOK_GPT2, "I'M ok  ", "I|'|M| ok|  ");
    CHECK_SPLIT(KVQ_PRETOK_GPT2, "a\tb", "a|\t|b");
    CHECK_SPLIT(KVQ_PRETOK_GPT2, "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac",
                "caf\xc3\xa9| \xe6\x97\xa5\xe6\x9c\xac");
    // smollm: every digit alone, and the space before a number stands alone.
    CHECK_SPLIT(KVQ_PRETOK_SMOLLM, "a 123, x1", "a| |1|2|3|,| x|1");
    CHECK_SPLIT(KVQ_PRETOK_LLAMA3, "I'M 12345\r\n\nok", "I|'M| |123|45|\r\n\n|ok");
    CHECK_SPLIT(KVQ_PRETOK_LLAMA3, "(hello) \n  x", "(hello|)| \n| | x");
    CHECK_SPLIT(KVQ_PRETOK_LLAMA3, "a ...\n\nb", "a| ...\n\n|b");
    CHECK_SPLIT(KVQ_PRETOK_QWEN2, "x 12345", "x| |1|2|3|4|5");
    CHECK_SPLIT(KVQ_PRETOK_DEFAULT, "a+=b 1234", "a|+=|b| |123|4");
}

/* A SentencePiece vocabulary: <unk>, <s>, </s>, the 256 byte tokens, then
 * pieces with scores. */
static kvq_status make_spm(vocab *v, kvq_tokenizer **t) {
    memset(v, 0, sizeof *v);
    add(v, "<unk>", KVQ_TOKEN_UNKNOWN, 0);
    add(v, "<s>", KVQ_TOKEN_CONTROL, 0);
    add(v, "</s>", KVQ_TOKEN_CONTROL, 0);
    for (int b = 0; b < 256; b++) {
        char s[8];
        snprintf(s, sizeof s, "<0x%02X>", b);
        add(v, s, KVQ_TOKEN_BYTE, 0);
    }
    add(v, "\xe2\x96\x81", 1, -1.0f);      // 259 "▁"
    add(v, "a", 1, -2.0f);                 // 260
    add(v, "b", 1, -2.0f);                 // 261
    add(v, "\xe2\x96\x81" "a", 1, -1.5f);  // 262 "▁a"
    add(v, "ab", 1, -0.5f);                // 263
    add(v, "\xe2\x96\x81" "ab", 1, -3.0f); // 264 "▁ab"
    kvq_tokenizer_params p = {0};
    p.model = "llama";
    p.n_vocab = v->n;
    p.tokens = v->tok;
    p.token_types = v->type;
    p.scores = v->score;
    p.bos_id = 1;
    p.eos_id = 2;
    p.unk_id = 0;
    p.eot_id = p.pad_id = -1;
    p.add_bos = 1;
    p.add_space_prefix = -1;
    return kvq_tokenizer_create(&p, t);
}

TEST(tokenizer_spm_scores_and_byte_fallback) {
    vocab v;
    kvq_tokenizer *t;
    CHECK_OK(make_spm(&v, &t));
    int32_t ids[32];
    size_t n = 0;
    // "▁ab": "ab" (-0.5) beats "▁a" (-1.5); then "▁" + "ab" -> "▁ab".
    CHECK_OK(kvq_tokenizer_encode(t, "ab", 2, -1, 0, ids, 32, &n));
    CHECK(n == 2 && ids[0] == 1 && ids[1] == 264);
    // "▁a▁b": "▁a" then "▁" "b" (no "▁b"); é has no piece: its bytes.
    CHECK_OK(kvq_tokenizer_encode(t, "a b\xc3\xa9", 5, 0, 0, ids, 32, &n));
    CHECK(n == 5);
    CHECK(ids[0] == 262 && ids[1] == 259 && ids[2] == 261);
    CHECK(ids[3] == 3 + 0xC3 && ids[4] == 3 + 0xA9);
    char out[64];
    size_t k = decode(t, ids, n, 0, out);
    CHECK(k == 6 && memcmp(out, " a b\xc3\xa9", 6) == 0);
    kvq_tokenizer_free(t);
}

/* Streams ids through a detokenizer; returns the concatenated output. */
static size_t stream(kvq_detok *d, const int32_t *ids, size_t n, char *out, size_t *first_len) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        const char *s;
        size_t len;
        if (kvq_detok_push(d, ids[i], &s, &len) != KVQ_OK) return SIZE_MAX;
        if (i == 0 && first_len) *first_len = len;
        memcpy(out + o, s, len);
        o += len;
    }
    const char *s;
    size_t len;
    if (kvq_detok_flush(d, &s, &len) != KVQ_OK) return SIZE_MAX;
    memcpy(out + o, s, len);
    return o + len;
}

TEST(detok_holds_partial_utf8) {
    vocab v;
    bpe_vocab(&v);
    kvq_tokenizer *t;
    CHECK_OK(make_bpe(&v, "gpt2", &t));
    kvq_detok *d;
    CHECK_OK(kvq_detok_create(t, 0, &d));
    char out[64];
    size_t first = 99;
    // "é€" byte by byte: nothing until each character completes.
    const int32_t euro[] = {0xC3, 0xA9, 0xE2, 0x82, 0xAC};
    const char *s;
    size_t len;
    CHECK_OK(kvq_detok_push(d, euro[0], &s, &len));
    CHECK(len == 0);
    CHECK_OK(kvq_detok_push(d, euro[1], &s, &len));
    CHECK(len == 2 && memcmp(s, "\xc3\xa9", 2) == 0);
    CHECK_OK(kvq_detok_push(d, euro[2], &s, &len));
    CHECK(len == 0);
    CHECK_OK(kvq_detok_push(d, euro[3], &s, &len));
    CHECK(len == 0);
    CHECK_OK(kvq_detok_push(d, euro[4], &s, &len));
    CHECK(len == 3 && memcmp(s, "\xe2\x82\xac", 3) == 0);
    // Ill-formed: a stray continuation byte, a truncated sequence broken
    // by ASCII (one U+FFFD for the maximal part E2 82), a bad lead byte.
    const int32_t bad[] = {0x80, 0xE2, 0x82, 'A', 0xFF, 'b'};
    size_t n = stream(d, bad, 6, out, &first);
    CHECK(first == 3);
    CHECK(n == 3 + 3 + 1 + 3 + 1);
    CHECK(memcmp(out, "\xef\xbf\xbd\xef\xbf\xbd" "A\xef\xbf\xbd" "b", n) == 0);
    // A tail still incomplete at flush becomes one U+FFFD.
    const int32_t tail[] = {'x', 0xF0, 0x9F};
    n = stream(d, tail, 3, out, NULL);
    CHECK(n == 4 && memcmp(out, "x\xef\xbf\xbd", 4) == 0);
    kvq_detok_free(d);
    kvq_tokenizer_free(t);
}

TEST(detok_spm_drops_prefix_space) {
    vocab v;
    kvq_tokenizer *t;
    CHECK_OK(make_spm(&v, &t));
    int32_t ids[32];
    size_t n = 0;
    CHECK_OK(kvq_tokenizer_encode(t, "ab a", 4, 1, 0, ids, 32, &n));
    kvq_detok *d;
    CHECK_OK(kvq_detok_create(t, 0, &d));
    char out[64];
    size_t k = stream(d, ids, n, out, NULL);
    CHECK(k == 4 && memcmp(out, "ab a", 4) == 0);
    kvq_detok_free(d);
    kvq_tokenizer_free(t);
}
