/* pretok.c — the pre-tokenizer split rules of byte-level BPE, written out
 * by hand instead of with a regex engine. Each matcher returns where the
 * regex's leftmost-first match starting at i ends, inside the piece [i, b);
 * the piece end acts as the end of the text (so (?!\S) holds there), which
 * is how both HF tokenizers and llama.cpp apply a split to earlier pieces. */
#include <string.h>

#include "text/tokenizer.h"
#include "text/unicode.h"

int kvq_pretok_parse(const char *name) {
    if (name == NULL || strcmp(name, "default") == 0) return KVQ_PRETOK_DEFAULT;
    if (strcmp(name, "gpt2") == 0) return KVQ_PRETOK_GPT2;
    if (strcmp(name, "smollm") == 0) return KVQ_PRETOK_SMOLLM;
    if (strcmp(name, "llama-bpe") == 0 || strcmp(name, "llama3") == 0) return KVQ_PRETOK_LLAMA3;
    if (strcmp(name, "qwen2") == 0) return KVQ_PRETOK_QWEN2;
    return -1;
}

#define IS_L(c) ((c) == KVQ_UC_LETTER)
#define IS_N(c) ((c) == KVQ_UC_NUMBER)
#define IS_S(c) ((c) == KVQ_UC_SPACE)
/* [^\s\p{L}\p{N}] */
#define IS_O(c) ((c) == KVQ_UC_OTHER || (c) == KVQ_UC_PUNCT)

static uint32_t ascii_lower(uint32_t c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

/* 's|'t|'re|'ve|'m|'ll|'d, optionally ASCII case-insensitive; 0 if none. */
static size_t match_contraction(const uint32_t *cp, size_t i, size_t b, int fold) {
    if (cp[i] != '\'' || i + 1 >= b) return 0;
    uint32_t c1 = fold ? ascii_lower(cp[i + 1]) : cp[i + 1];
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return i + 2;
    if (i + 2 >= b) return 0;
    uint32_t c2 = fold ? ascii_lower(cp[i + 2]) : cp[i + 2];
    if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l'))
        return i + 3;
    return 0;
}

/* \s+(?!\S)|\s+ at a whitespace unit i: the whole run if it reaches the
 * piece end, else the run minus its last unit (which then leads the next
 * word), or the single unit when the run is one long. */
static size_t match_space_run(const uint8_t *cls, size_t i, size_t b) {
    size_t k = i;
    while (k < b && IS_S(cls[k])) k++;
    if (k == b || k - i == 1) return k;
    return k - 1;
}

static size_t match_gpt2(const uint32_t *cp, const uint8_t *cls, size_t i, size_t b) {
    size_t e = match_contraction(cp, i, b, 0);
    if (e) return e;
    size_t j = i;
    if (cp[i] == ' ' && i + 1 < b && !IS_S(cls[i + 1])) j = i + 1;
    uint8_t c = cls[j];
    if (IS_L(c) || IS_N(c)) {  // ?\p{L}+ and ?\p{N}+
        while (j < b && cls[j] == c) j++;
        return j;
    }
    if (IS_O(c)) {  // ?[^\s\p{L}\p{N}]+
        while (j < b && IS_O(cls[j])) j++;
        return j;
    }
    return match_space_run(cls, i, b);
}

static int is_crlf(uint32_t c) { return c == '\r' || c == '\n'; }

static size_t match_llama3(const uint32_t *cp, const uint8_t *cls, size_t i, size_t b,
                           size_t max_digits) {
    size_t e = match_contraction(cp, i, b, 1);
    if (e) return e;
    uint8_t c = cls[i];
    // [^\r\n\p{L}\p{N}]?\p{L}+
    size_t j = i;
    if (!IS_L(c) && !IS_N(c) && !is_crlf(cp[i]) && i + 1 < b && IS_L(cls[i + 1])) j = i + 1;
    if (IS_L(cls[j])) {
        while (j < b && IS_L(cls[j])) j++;
        return j;
    }
    if (IS_N(c)) {  // \p{N}{1,max}
        while (j < b && j - i < max_digits && IS_N(cls[j])) j++;
        return j;
    }
    //  ?[^\s\p{L}\p{N}]+[\r\n]*
    if (cp[i] == ' ' && i + 1 < b && IS_O(cls[i + 1])) j = i + 1;
    if (IS_O(cls[j])) {
        while (j < b && IS_O(cls[j])) j++;
        while (j < b && is_crlf(cp[j])) j++;
        return j;
    }
    // \s*[\r\n]+ : the longest \s* that a line break follows, so the match
    // ends just after the run's last \r or \n.
    size_t k = i;
    size_t last_nl = b;
    while (k < b && IS_S(cls[k])) {
        if (is_crlf(cp[k])) last_nl = k;
        k++;
    }
    if (last_nl != b) return last_nl + 1;
    return match_space_run(cls, i, b);
}

/* The isolated-match split: matches of `rule` become words, so do the gaps. */
enum rule { RULE_GPT2, RULE_LLAMA3, RULE_QWEN2, RULE_DIGIT, RULE_DIGIT_RUN, RULE_PUNCT_RUN,
            RULE_TRIPLE };

static int is_punct_sym(uint32_t c, uint8_t k) {
    return k == KVQ_UC_PUNCT || c == '$' || c == '+' || c == '<' || c == '=' || c == '>' ||
           c == '^' || c == '~' || c == '|';
}

static int is_ascii_digit(uint32_t c) { return c >= '0' && c <= '9'; }

/* Match end at i for the rules that may not match (0 = no match at i). */
static size_t match_partial(enum rule r, const uint32_t *cp, const uint8_t *cls, size_t i,
                            size_t b) {
    size_t j = i;
    switch (r) {
    case RULE_DIGIT: return IS_N(cls[i]) ? i + 1 : 0;
    case RULE_DIGIT_RUN:
        while (j < b && IS_N(cls[j])) j++;
        return j > i ? j : 0;
    case RULE_PUNCT_RUN:
        while (j < b && is_punct_sym(cp[j], cls[j])) j++;
        return j > i ? j : 0;
    case RULE_TRIPLE:
        return i + 3 <= b && is_ascii_digit(cp[i]) && is_ascii_digit(cp[i + 1]) &&
                       is_ascii_digit(cp[i + 2])
                   ? i + 3
                   : 0;
    default: return 0;
    }
}

/* Splits every piece of `in` (n_in ends) by one rule into `out`. */
static size_t split_pass(enum rule r, const uint32_t *cp, const uint8_t *cls,
                         const uint32_t *in, size_t n_in, uint32_t *out) {
    size_t n_out = 0;
    size_t a = 0;
    for (size_t p = 0; p < n_in; p++) {
        size_t b = in[p];
        size_t i = a, gap = a;
        while (i < b) {
            size_t e;
            switch (r) {
            case RULE_GPT2: e = match_gpt2(cp, cls, i, b); break;
            case RULE_LLAMA3: e = match_llama3(cp, cls, i, b, 3); break;
            case RULE_QWEN2: e = match_llama3(cp, cls, i, b, 1); break;
            default: e = match_partial(r, cp, cls, i, b); break;
            }
            if (e == 0) {
                i++;
                continue;
            }
            if (gap < i) out[n_out++] = (uint32_t)i;
            out[n_out++] = (uint32_t)e;
            i = gap = e;
        }
        if (gap < b) out[n_out++] = (uint32_t)b;
        a = b;
    }
    return n_out;
}

size_t kvq_pretok_split(kvq_pretok pre, const uint32_t *cp, const uint8_t *cls, size_t n,
                        uint32_t *ends, uint32_t *tmp) {
    static const enum rule pipes[][4] = {
        [KVQ_PRETOK_DEFAULT] = {RULE_PUNCT_RUN, RULE_GPT2, RULE_DIGIT_RUN, RULE_TRIPLE},
        [KVQ_PRETOK_GPT2] = {RULE_GPT2},
        [KVQ_PRETOK_SMOLLM] = {RULE_DIGIT, RULE_GPT2},
        [KVQ_PRETOK_LLAMA3] = {RULE_LLAMA3},
        [KVQ_PRETOK_QWEN2] = {RULE_QWEN2},
    };
    static const int pipe_len[] = {4, 1, 2, 1, 1};
    if (n == 0) return 0;
    // Alternate between the two buffers so the last pass lands in ends.
    int steps = pipe_len[pre];
    uint32_t *bufs[2] = {steps % 2 ? tmp : ends, steps % 2 ? ends : tmp};
    bufs[0][0] = (uint32_t)n;
    size_t count = 1;
    for (int s = 0; s < steps; s++)
        count = split_pass(pipes[pre][s], cp, cls, bufs[s % 2], count, bufs[(s + 1) % 2]);
    return count;
}
