/* tokenizer.c — byte-level BPE and SentencePiece tokenizers built from the
 * arrays of GGUF's tokenizer.ggml.* keys, following llama.cpp's behaviour
 * (which, for byte-level BPE, is that of HF tokenizers). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "text/tokenizer.h"
#include "text/unicode.h"

enum { MODEL_BPE, MODEL_SPM };

struct kvq_tokenizer {
    int model;
    kvq_pretok pre;
    int32_t n_vocab;
    char *text;            // (text_off[n_vocab]) every token's text, back to back
    uint32_t *text_off;    // (n_vocab + 1)
    char *piece;           // decoded bytes of every token (empty for CONTROL)
    uint32_t *piece_off;   // (n_vocab + 1)
    uint8_t *type;         // (n_vocab) kvq_token_type
    float *score;          // (n_vocab) SPM only
    // Open-addressed text -> id map; slot holds id + 1, 0 = empty.
    uint32_t *str_slot;    // (str_cap)
    size_t str_cap;
    // Open-addressed (left id, right id) -> merge; key 0 = empty, as no pair
    // packs to 0 after the +1 offsets.
    uint64_t *mrg_key;     // (mrg_cap)
    uint32_t *mrg_rank;    // (mrg_cap)
    int32_t *mrg_res;      // (mrg_cap)
    size_t mrg_cap;
    uint32_t byte_cp[256]; // GPT-2's byte -> code point map
    int32_t byte_tok[256]; // byte -> token (BPE: the mapped char; SPM: <0xXX>), -1 none
    int32_t *special;      // (n_special) matchable specials, longest text first
    int32_t n_special;
    uint8_t special_first[256]; // 1 if some special text starts with that byte
    int ignore_merges;
    int add_bos, add_space_prefix;
    int32_t ids[5];        // kvq_special order
};

/* ------------------------------------------------------------ byte map */

/* GPT-2's byte -> code point map: printable Latin-1 bytes stand for
 * themselves, the other 68 are moved to U+0100.. in byte order. */
static void byte_map(uint32_t to_cp[256]) {
    uint32_t next = 256;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        to_cp[b] = printable ? (uint32_t)b : next++;
    }
}

/* The inverse on U+0000..U+0143: inv[cp] is the byte, or -1. */
static void byte_map_inverse(int16_t inv[324]) {
    uint32_t to_cp[256];
    byte_map(to_cp);
    for (int i = 0; i < 324; i++) inv[i] = -1;
    for (int b = 0; b < 256; b++) inv[to_cp[b]] = (int16_t)b;
}

/* ------------------------------------------------------------- hashing */

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    return h ^ (h >> 29);
}

static uint64_t hash_u64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

static size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n) c *= 2;
    return c;
}

static int32_t lookup(const kvq_tokenizer *t, const char *s, size_t n) {
    size_t mask = t->str_cap - 1;
    for (size_t h = hash_bytes(s, n) & mask;; h = (h + 1) & mask) {
        uint32_t v = t->str_slot[h];
        if (v == 0) return -1;
        int32_t id = (int32_t)v - 1;
        size_t len = t->text_off[id + 1] - t->text_off[id];
        if (len == n && memcmp(t->text + t->text_off[id], s, n) == 0) return id;
    }
}

/* Later duplicates replace earlier ones, as in llama.cpp's token_to_id. */
static void insert_text(kvq_tokenizer *t, int32_t id) {
    const char *s = t->text + t->text_off[id];
    size_t n = t->text_off[id + 1] - t->text_off[id];
    size_t mask = t->str_cap - 1;
    for (size_t h = hash_bytes(s, n) & mask;; h = (h + 1) & mask) {
        uint32_t v = t->str_slot[h];
        if (v != 0) {
            int32_t o = (int32_t)v - 1;
            size_t len = t->text_off[o + 1] - t->text_off[o];
            if (len != n || memcmp(t->text + t->text_off[o], s, n) != 0) continue;
        }
        t->str_slot[h] = (uint32_t)id + 1;
        return;
    }
}

static uint64_t pair_key(int32_t a, int32_t b) {
    return ((uint64_t)(uint32_t)(a + 1) << 32) | (uint32_t)(b + 1);
}

/* The slot of a pair: where it is, or the empty slot it would go in. */
static size_t merge_slot(const kvq_tokenizer *t, uint64_t key) {
    size_t mask = t->mrg_cap - 1;
    size_t h = hash_u64(key) & mask;
    while (t->mrg_key[h] != 0 && t->mrg_key[h] != key) h = (h + 1) & mask;
    return h;
}

/* ------------------------------------------------------------- create */

void kvq_tokenizer_free(kvq_tokenizer *t) {
    if (!t) return;
    free(t->text);
    free(t->text_off);
    free(t->piece);
    free(t->piece_off);
    free(t->type);
    free(t->score);
    free(t->str_slot);
    free(t->mrg_key);
    free(t->mrg_rank);
    free(t->mrg_res);
    free(t->special);
    free(t);
}

static kvq_status copy_texts(kvq_tokenizer *t, const kvq_tokenizer_params *p) {
    size_t total = 0;
    for (int32_t i = 0; i < p->n_vocab; i++) {
        KVQ_RETURN_IF(p->tokens[i] == NULL, KVQ_ERR_FORMAT, "tokenizer: token %d is NULL", i);
        total += p->token_lens ? p->token_lens[i] : strlen(p->tokens[i]);
        KVQ_RETURN_IF(total > UINT32_MAX / 2, KVQ_ERR_FORMAT,
                      "tokenizer: token texts exceed 2 GiB");
    }
    t->text = malloc(total + 1);
    t->text_off = malloc(sizeof(uint32_t) * ((size_t)p->n_vocab + 1));
    KVQ_RETURN_IF(!t->text || !t->text_off, KVQ_ERR_NOMEM, "tokenizer: out of memory");
    uint32_t off = 0;
    for (int32_t i = 0; i < p->n_vocab; i++) {
        size_t n = p->token_lens ? p->token_lens[i] : strlen(p->tokens[i]);
        t->text_off[i] = off;
        memcpy(t->text + off, p->tokens[i], n);
        off += (uint32_t)n;
    }
    t->text_off[p->n_vocab] = off;
    return KVQ_OK;
}

/* "<0xAB>" -> 0xAB, or -1. */
static int parse_byte_token(const char *s, size_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10
              : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* What a token decodes to (CONTROL tokens and BPE UNKNOWN ones decode to
 * nothing; token_to_piece gives their text when asked for specials). */
static size_t decode_token(const kvq_tokenizer *t, const int16_t inv[324], int32_t id, char *out) {
    const char *s = t->text + t->text_off[id];
    size_t n = t->text_off[id + 1] - t->text_off[id];
    int type = t->type[id];
    if (type == KVQ_TOKEN_CONTROL) return 0;
    if (type == KVQ_TOKEN_USER_DEFINED) {
        memcpy(out, s, n);
        return n;
    }
    if (t->model == MODEL_SPM) {
        if (type == KVQ_TOKEN_UNKNOWN) {
            memcpy(out, "\xe2\x96\x85", 3);  // U+2585, llama.cpp's mark for unk
            return 3;
        }
        int b = type == KVQ_TOKEN_BYTE ? parse_byte_token(s, n) : -1;
        if (b >= 0) {
            out[0] = (char)b;
            return 1;
        }
        size_t o = 0;
        for (size_t i = 0; i < n;) {
            if (i + 3 <= n && memcmp(s + i, "\xe2\x96\x81", 3) == 0) {
                out[o++] = ' ';
                i += 3;
            } else {
                out[o++] = s[i++];
            }
        }
        return o;
    }
    if (type == KVQ_TOKEN_UNKNOWN) return 0;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t l = kvq_utf8_decode((const unsigned char *)s + i, n - i, &cp);
        int b = cp < 324 ? inv[cp] : -1;
        if (b >= 0) {
            out[o++] = (char)b;
        } else {
            memcpy(out + o, s + i, l);  // not from the byte map: kept as written
            o += l;
        }
        i += l;
    }
    return o;
}

static kvq_status build_pieces(kvq_tokenizer *t) {
    // A decoded piece is never longer than the token's text.
    t->piece = malloc((size_t)t->text_off[t->n_vocab] + 3 * (size_t)t->n_vocab + 1);
    t->piece_off = malloc(sizeof(uint32_t) * ((size_t)t->n_vocab + 1));
    KVQ_RETURN_IF(!t->piece || !t->piece_off, KVQ_ERR_NOMEM, "tokenizer: out of memory");
    int16_t inv[324];
    byte_map_inverse(inv);
    uint32_t off = 0;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        t->piece_off[i] = off;
        off += (uint32_t)decode_token(t, inv, i, t->piece + off);
    }
    t->piece_off[t->n_vocab] = off;
    return KVQ_OK;
}

static kvq_status build_merges(kvq_tokenizer *t, const kvq_tokenizer_params *p) {
    KVQ_RETURN_IF(p->n_merges < 0 || (p->n_merges > 0 && p->merges == NULL), KVQ_ERR_FORMAT,
                  "tokenizer: bad merges array (%d)", p->n_merges);
    t->mrg_cap = pow2_at_least(2 * (size_t)p->n_merges + 1);
    t->mrg_key = calloc(t->mrg_cap, sizeof(uint64_t));
    t->mrg_rank = malloc(t->mrg_cap * sizeof(uint32_t));
    t->mrg_res = malloc(t->mrg_cap * sizeof(int32_t));
    KVQ_RETURN_IF(!t->mrg_key || !t->mrg_rank || !t->mrg_res, KVQ_ERR_NOMEM,
                  "tokenizer: out of memory");
    char *cat = NULL;
    size_t cat_cap = 0;
    kvq_status st = KVQ_OK;
    for (int32_t r = 0; r < p->n_merges && st == KVQ_OK; r++) {
        const char *m = p->merges[r];
        if (m == NULL) {
            st = kvq_fail(KVQ_ERR_FORMAT, "tokenizer: merge %d is NULL", r);
            break;
        }
        size_t n = p->merge_lens ? p->merge_lens[r] : strlen(m);
        // The separator is the first space after the first byte (llama.cpp),
        // so a left part may itself start with a space.
        const char *sp = n > 1 ? memchr(m + 1, ' ', n - 1) : NULL;
        if (sp == NULL) {
            st = kvq_fail(KVQ_ERR_FORMAT, "tokenizer: merge %d has no space", r);
            break;
        }
        size_t nl = (size_t)(sp - m), nr = n - nl - 1;
        int32_t a = lookup(t, m, nl), b = lookup(t, sp + 1, nr);
        if (nl + nr > cat_cap) {
            cat_cap = 2 * (nl + nr);
            char *c = realloc(cat, cat_cap);
            if (!c) {
                st = kvq_fail(KVQ_ERR_NOMEM, "tokenizer: out of memory");
                break;
            }
            cat = c;
        }
        memcpy(cat, m, nl);
        memcpy(cat + nl, sp + 1, nr);
        int32_t res = lookup(t, cat, nl + nr);
        if (a < 0 || b < 0 || res < 0) {
            st = kvq_fail(KVQ_ERR_FORMAT,
                          "tokenizer: merge %d (\"%.*s\") names a %s that is not a token", r,
                          (int)(n > 40 ? 40 : n), m, res < 0 && a >= 0 && b >= 0 ? "result" : "part");
            break;
        }
        uint64_t key = pair_key(a, b);
        size_t h = merge_slot(t, key);
        if (t->mrg_key[h] == key) continue;  // first rank wins, as in llama.cpp
        t->mrg_key[h] = key;
        t->mrg_rank[h] = (uint32_t)r;
        t->mrg_res[h] = res;
    }
    free(cat);
    return st;
}

/* Longest first, then lowest id, so the first match is the longest. */
static int cmp_special(const void *a, const void *b) {
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static kvq_status build_specials(kvq_tokenizer *t) {
    t->special = malloc(sizeof(int32_t) * (size_t)t->n_vocab);
    uint64_t *order = malloc(sizeof(uint64_t) * (size_t)t->n_vocab);  // (~len << 32 | id)
    if (!t->special || !order) {
        free(order);
        return kvq_fail(KVQ_ERR_NOMEM, "tokenizer: out of memory");
    }
    for (int32_t i = 0; i < t->n_vocab; i++) {
        int ty = t->type[i];
        uint32_t len = t->text_off[i + 1] - t->text_off[i];
        if (len == 0) continue;
        if (ty == KVQ_TOKEN_CONTROL || ty == KVQ_TOKEN_UNKNOWN || ty == KVQ_TOKEN_USER_DEFINED) {
            order[t->n_special++] = ((uint64_t)(UINT32_MAX - len) << 32) | (uint32_t)i;
            t->special_first[(unsigned char)t->text[t->text_off[i]]] = 1;
        }
    }
    qsort(order, (size_t)t->n_special, sizeof(uint64_t), cmp_special);
    for (int32_t k = 0; k < t->n_special; k++) t->special[k] = (int32_t)(uint32_t)order[k];
    free(order);
    return KVQ_OK;
}

static kvq_status validate(const kvq_tokenizer_params *p, int *model, int *pre) {
    KVQ_RETURN_IF(p == NULL || p->model == NULL, KVQ_ERR_INVALID_ARG,
                  "tokenizer: params or model name is NULL");
    if (strcmp(p->model, "gpt2") == 0) *model = MODEL_BPE;
    else if (strcmp(p->model, "llama") == 0) *model = MODEL_SPM;
    else return kvq_fail(KVQ_ERR_UNSUPPORTED, "tokenizer: unknown model \"%s\"", p->model);
    *pre = *model == MODEL_BPE ? kvq_pretok_parse(p->pre) : KVQ_PRETOK_DEFAULT;
    KVQ_RETURN_IF(*pre < 0, KVQ_ERR_UNSUPPORTED, "tokenizer: unknown pre-tokenizer \"%s\"",
                  p->pre);
    KVQ_RETURN_IF(p->n_vocab <= 0 || p->n_vocab > (1 << 30), KVQ_ERR_FORMAT,
                  "tokenizer: vocabulary size %d out of range", p->n_vocab);
    KVQ_RETURN_IF(p->tokens == NULL, KVQ_ERR_FORMAT, "tokenizer: no tokens");
    KVQ_RETURN_IF(*model == MODEL_SPM && p->scores == NULL, KVQ_ERR_FORMAT,
                  "tokenizer: a llama (SentencePiece) vocabulary needs scores");
    const int32_t ids[5] = {p->bos_id, p->eos_id, p->eot_id, p->unk_id, p->pad_id};
    static const char *names[5] = {"bos", "eos", "eot", "unk", "pad"};
    for (int i = 0; i < 5; i++)
        KVQ_RETURN_IF(ids[i] < -1 || ids[i] >= p->n_vocab, KVQ_ERR_FORMAT,
                      "tokenizer: %s id %d out of range [-1, %d)", names[i], ids[i], p->n_vocab);
    KVQ_RETURN_IF(p->add_space_prefix < -1 || p->add_space_prefix > 1, KVQ_ERR_INVALID_ARG,
                  "tokenizer: add_space_prefix must be -1, 0 or 1");
    for (int32_t i = 0; p->token_types && i < p->n_vocab; i++)
        KVQ_RETURN_IF(p->token_types[i] < 0 || p->token_types[i] > KVQ_TOKEN_BYTE,
                      KVQ_ERR_FORMAT, "tokenizer: token %d has unknown type %d", i,
                      p->token_types[i]);
    for (int32_t i = 0; *model == MODEL_SPM && i < p->n_vocab; i++)
        KVQ_RETURN_IF(isnan(p->scores[i]), KVQ_ERR_FORMAT, "tokenizer: score of token %d is NaN",
                      i);
    return KVQ_OK;
}

static kvq_status build(kvq_tokenizer *t, const kvq_tokenizer_params *p) {
    KVQ_FORWARD(copy_texts(t, p));
    t->type = malloc((size_t)p->n_vocab);
    KVQ_RETURN_IF(!t->type, KVQ_ERR_NOMEM, "tokenizer: out of memory");
    for (int32_t i = 0; i < p->n_vocab; i++) {
        int ty = p->token_types ? p->token_types[i] : KVQ_TOKEN_NORMAL;
        t->type[i] = (uint8_t)(ty == KVQ_TOKEN_UNDEFINED ? KVQ_TOKEN_NORMAL : ty);
    }
    if (t->model == MODEL_SPM) {
        t->score = malloc(sizeof(float) * (size_t)p->n_vocab);
        KVQ_RETURN_IF(!t->score, KVQ_ERR_NOMEM, "tokenizer: out of memory");
        memcpy(t->score, p->scores, sizeof(float) * (size_t)p->n_vocab);
    }
    t->str_cap = pow2_at_least(2 * (size_t)p->n_vocab);
    t->str_slot = calloc(t->str_cap, sizeof(uint32_t));
    KVQ_RETURN_IF(!t->str_slot, KVQ_ERR_NOMEM, "tokenizer: out of memory");
    for (int32_t i = 0; i < p->n_vocab; i++) insert_text(t, i);

    int32_t unk = p->unk_id;
    if (t->model == MODEL_BPE) {
        byte_map(t->byte_cp);
        for (int b = 0; b < 256; b++) {
            char u[4];
            t->byte_tok[b] = lookup(t, u, kvq_utf8_encode(t->byte_cp[b], u));
        }
        KVQ_FORWARD(build_merges(t, p));
    } else {
        for (int b = 0; b < 256; b++) {
            char u[8];
            snprintf(u, sizeof u, "<0x%02X>", b);
            t->byte_tok[b] = lookup(t, u, 6);
        }
        t->mrg_cap = 0;
    }
    // SPM falls back on unk for a byte without a <0xXX> token; byte-level
    // BPE drops such a byte, as HF tokenizers (with no unk) and llama.cpp do:
    // SmolLM2's vocabulary lacks 21 of the 256 byte tokens.
    for (int b = 0; t->model == MODEL_SPM && b < 256; b++)
        KVQ_RETURN_IF(t->byte_tok[b] < 0 && unk < 0, KVQ_ERR_FORMAT,
                      "tokenizer: no token for byte 0x%02x and no unk token", b);
    KVQ_FORWARD(build_pieces(t));
    return build_specials(t);
}

kvq_status kvq_tokenizer_create(const kvq_tokenizer_params *p, kvq_tokenizer **out) {
    KVQ_RETURN_IF(out == NULL, KVQ_ERR_INVALID_ARG, "tokenizer: out is NULL");
    *out = NULL;
    int model = 0, pre = 0;
    KVQ_FORWARD(validate(p, &model, &pre));
    kvq_tokenizer *t = calloc(1, sizeof *t);
    KVQ_RETURN_IF(!t, KVQ_ERR_NOMEM, "tokenizer: out of memory");
    t->model = model;
    t->pre = (kvq_pretok)pre;
    t->n_vocab = p->n_vocab;
    // Llama 3's tokenizer.json sets ignore_merges: a word that is a token is
    // taken whole (llama.cpp does the same for this pre-tokenizer).
    t->ignore_merges = model == MODEL_BPE && pre == KVQ_PRETOK_LLAMA3;
    t->add_bos = p->add_bos != 0;
    t->add_space_prefix = p->add_space_prefix >= 0 ? p->add_space_prefix : model == MODEL_SPM;
    t->ids[KVQ_SPECIAL_BOS] = p->bos_id;
    t->ids[KVQ_SPECIAL_EOS] = p->eos_id;
    t->ids[KVQ_SPECIAL_EOT] = p->eot_id;
    t->ids[KVQ_SPECIAL_UNK] = p->unk_id;
    t->ids[KVQ_SPECIAL_PAD] = p->pad_id;
    kvq_status st = build(t, p);
    if (st != KVQ_OK) {
        kvq_tokenizer_free(t);
        return st;
    }
    *out = t;
    return KVQ_OK;
}

int kvq_tokenizer_prepends_space(const kvq_tokenizer *t) {
    return t->model == MODEL_SPM && t->add_space_prefix;
}

int32_t kvq_tokenizer_n_vocab(const kvq_tokenizer *t) { return t ? t->n_vocab : 0; }

int32_t kvq_tokenizer_special_id(const kvq_tokenizer *t, kvq_special which) {
    if (!t || (int)which < 0 || (int)which > KVQ_SPECIAL_PAD) return -1;
    return t->ids[which];
}

int kvq_tokenizer_is_eog(const kvq_tokenizer *t, int32_t id) {
    return t && id >= 0 && (id == t->ids[KVQ_SPECIAL_EOS] || id == t->ids[KVQ_SPECIAL_EOT]);
}

void kvq_tokenizer_piece(const kvq_tokenizer *t, int32_t id, int special, const char **s,
                         size_t *n) {
    int ty = t->type[id];
    if (special && (ty == KVQ_TOKEN_CONTROL || (ty == KVQ_TOKEN_UNKNOWN && t->model == MODEL_BPE))) {
        *s = t->text + t->text_off[id];
        *n = t->text_off[id + 1] - t->text_off[id];
    } else {
        *s = t->piece + t->piece_off[id];
        *n = t->piece_off[id + 1] - t->piece_off[id];
    }
}

kvq_status kvq_tokenizer_token_to_piece(const kvq_tokenizer *t, int32_t id, int special,
                                        char *buf, size_t capacity, size_t *n) {
    KVQ_RETURN_IF(!t || !n || (capacity > 0 && !buf), KVQ_ERR_INVALID_ARG,
                  "token_to_piece: NULL argument");
    KVQ_RETURN_IF(id < 0 || id >= t->n_vocab, KVQ_ERR_INVALID_ARG,
                  "token_to_piece: id %d out of range [0, %d)", id, t->n_vocab);
    const char *s;
    kvq_tokenizer_piece(t, id, special, &s, n);
    KVQ_RETURN_IF(*n > capacity, KVQ_ERR_RANGE, "token_to_piece: needs %zu bytes, have %zu",
                  *n, capacity);
    memcpy(buf, s, *n);
    return KVQ_OK;
}

/* -------------------------------------------------------------- encode */

typedef struct {
    int32_t *ids;
    size_t cap, n;
} sink;

static void emit(sink *o, int32_t id) {
    if (o->n < o->cap) o->ids[o->n] = id;
    o->n++;
}

/* Scratch for one encode call: the unit arrays sized for the whole text,
 * the symbol arrays grown to the longest word (BPE) or fragment (SPM). */
typedef struct {
    uint32_t *cp;     // (len) units
    uint8_t *cls;     // (len)
    uint32_t *off;    // (len + 1) byte offset of each unit
    uint32_t *ends;   // (len) word ends
    uint32_t *tmp;    // (len)
    char *buf;        // (3 * len + 4) SPM escaped text, or a BPE word's mapped text
    size_t sym_cap;
    int32_t *sym;     // (sym_cap) symbol ids (BPE) or starts (SPM)
    int32_t *len;     // (sym_cap) symbol byte lengths (SPM)
    int32_t *prev;    // (sym_cap)
    int32_t *next;    // (sym_cap)
    struct heap_item *heap;  // (3 * sym_cap): a merge queues at most two new pairs
} scratch;

/* A candidate merge; for BPE key is the rank (lower first), for SPM minus
 * the score (so lower first too). Ties go to the leftmost pair. */
struct heap_item {
    float key_f;
    uint32_t key_u;
    int32_t left;
    int32_t a, b;     // BPE: left and right ids; SPM: left and right lengths
    int32_t res;      // BPE: merged id; SPM: merged token id
};

static int item_less(const struct heap_item *x, const struct heap_item *y) {
    if (x->key_f != y->key_f) return x->key_f < y->key_f;
    if (x->key_u != y->key_u) return x->key_u < y->key_u;
    return x->left < y->left;
}

static void heap_push(struct heap_item *h, size_t *n, struct heap_item it) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!item_less(&it, &h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = it;
}

static struct heap_item heap_pop(struct heap_item *h, size_t *n) {
    struct heap_item top = h[0], last = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && item_less(&h[c + 1], &h[c])) c++;
        if (!item_less(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n > 0) h[i] = last;
    return top;
}

static void scratch_free(scratch *s) {
    free(s->cp);
    free(s->cls);
    free(s->off);
    free(s->ends);
    free(s->tmp);
    free(s->buf);
    free(s->sym);
    free(s->len);
    free(s->prev);
    free(s->next);
    free(s->heap);
}

static kvq_status scratch_alloc(scratch *s, size_t len) {
    s->cp = malloc(sizeof(uint32_t) * (len + 1));
    s->cls = malloc(len + 1);
    s->off = malloc(sizeof(uint32_t) * (len + 1));
    s->ends = malloc(sizeof(uint32_t) * (len + 1));
    s->tmp = malloc(sizeof(uint32_t) * (len + 1));
    s->buf = malloc(3 * len + 4);
    if (!s->cp || !s->cls || !s->off || !s->ends || !s->tmp || !s->buf) {
        scratch_free(s);
        return kvq_fail(KVQ_ERR_NOMEM, "encode: out of memory for %zu bytes of text", len);
    }
    return KVQ_OK;
}

static kvq_status scratch_reserve(scratch *s, size_t n) {
    if (n <= s->sym_cap) return KVQ_OK;
    size_t cap = n < 64 ? 64 : n + n / 2;
    int32_t *sym = realloc(s->sym, sizeof(int32_t) * cap);
    if (sym) s->sym = sym;
    int32_t *len = realloc(s->len, sizeof(int32_t) * cap);
    if (len) s->len = len;
    int32_t *prev = realloc(s->prev, sizeof(int32_t) * cap);
    if (prev) s->prev = prev;
    int32_t *next = realloc(s->next, sizeof(int32_t) * cap);
    if (next) s->next = next;
    struct heap_item *heap = realloc(s->heap, sizeof(struct heap_item) * 3 * cap);
    if (heap) s->heap = heap;
    KVQ_RETURN_IF(!sym || !len || !prev || !next || !heap, KVQ_ERR_NOMEM,
                  "encode: out of memory for a word of %zu symbols", n);
    s->sym_cap = cap;
    return KVQ_OK;
}

static void bpe_try_pair(const kvq_tokenizer *t, scratch *s, size_t *nh, int32_t left) {
    int32_t right = s->next[left];
    if (left < 0 || right < 0) return;
    int32_t a = s->sym[left], b = s->sym[right];
    if (a < 0 || b < 0) return;
    uint64_t key = pair_key(a, b);
    size_t h = merge_slot(t, key);
    if (t->mrg_key[h] != key) return;
    struct heap_item it = {0.0f, t->mrg_rank[h], left, a, b, t->mrg_res[h]};
    heap_push(s->heap, nh, it);
}

static kvq_status bpe_word(const kvq_tokenizer *t, scratch *s, const unsigned char *w, size_t n,
                           sink *o) {
    if (n == 1) {
        if (t->byte_tok[w[0]] >= 0) emit(o, t->byte_tok[w[0]]);
        return KVQ_OK;
    }
    if (t->ignore_merges) {
        size_t m = 0;
        for (size_t i = 0; i < n; i++) m += kvq_utf8_encode(t->byte_cp[w[i]], s->buf + m);
        int32_t id = lookup(t, s->buf, m);
        if (id >= 0) {
            emit(o, id);
            return KVQ_OK;
        }
    }
    KVQ_FORWARD(scratch_reserve(s, n));
    // A byte without a token is dropped before merging, so its neighbours
    // may merge across it (HF tokenizers' BPE with no unk token).
    int32_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (t->byte_tok[w[i]] < 0) continue;
        s->sym[m] = t->byte_tok[w[i]];
        s->prev[m] = m - 1;
        s->next[m] = m + 1;
        m++;
    }
    if (m == 0) return KVQ_OK;
    s->next[m - 1] = -1;
    size_t nh = 0;
    if (t->mrg_cap > 0)
        for (int32_t i = 0; i + 1 < m; i++) bpe_try_pair(t, s, &nh, i);
    while (nh > 0) {
        struct heap_item it = heap_pop(s->heap, &nh);
        int32_t l = it.left, r = s->next[l];
        // Stale entries: the left symbol was absorbed (-2) or either side
        // has changed since the pair was queued.
        if (s->sym[l] != it.a || r < 0 || s->sym[r] != it.b) continue;
        s->sym[l] = it.res;
        s->sym[r] = -2;
        s->next[l] = s->next[r];
        if (s->next[r] >= 0) s->prev[s->next[r]] = l;
        if (s->prev[l] >= 0) bpe_try_pair(t, s, &nh, s->prev[l]);
        bpe_try_pair(t, s, &nh, l);
    }
    for (int32_t i = 0; i >= 0; i = s->next[i]) emit(o, s->sym[i]);
    return KVQ_OK;
}

static kvq_status encode_bpe(const kvq_tokenizer *t, scratch *s, const unsigned char *x, size_t len,
                       sink *o) {
    size_t n = 0;
    for (size_t i = 0; i < len; n++) {
        s->off[n] = (uint32_t)i;
        i += kvq_utf8_decode(x + i, len - i, &s->cp[n]);
        s->cls[n] = (uint8_t)kvq_uc_class(s->cp[n]);
    }
    s->off[n] = (uint32_t)len;
    size_t nw = kvq_pretok_split(t->pre, s->cp, s->cls, n, s->ends, s->tmp);
    size_t a = 0;
    for (size_t k = 0; k < nw; k++) {
        size_t b = s->ends[k];
        KVQ_FORWARD(bpe_word(t, s, x + s->off[a], s->off[b] - s->off[a], o));
        a = b;
    }
    return KVQ_OK;
}

static void spm_try_pair(const kvq_tokenizer *t, scratch *s, size_t *nh, int32_t left) {
    int32_t right = s->next[left];
    if (left < 0 || right < 0) return;
    int32_t id = lookup(t, s->buf + s->sym[left], (size_t)(s->len[left] + s->len[right]));
    if (id < 0) return;
    struct heap_item it = {-t->score[id], 0, left, s->len[left], s->len[right], id};
    heap_push(s->heap, nh, it);
}

static kvq_status encode_spm(const kvq_tokenizer *t, scratch *s, const unsigned char *x, size_t len,
                       int prefix, sink *o) {
    // Spaces become U+2581, and a leading one is added (add_space_prefix).
    size_t m = 0;
    if (prefix) {
        memcpy(s->buf, "\xe2\x96\x81", 3);
        m = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (x[i] == ' ') {
            memcpy(s->buf + m, "\xe2\x96\x81", 3);
            m += 3;
        } else {
            s->buf[m++] = (char)x[i];
        }
    }
    KVQ_FORWARD(scratch_reserve(s, m));
    int32_t n = 0;
    for (size_t i = 0; i < m; n++) {
        uint32_t cp;
        size_t l = kvq_utf8_decode((const unsigned char *)s->buf + i, m - i, &cp);
        s->sym[n] = (int32_t)i;
        s->len[n] = (int32_t)l;
        s->prev[n] = n - 1;
        s->next[n] = n + 1;
        i += l;
    }
    if (n == 0) return KVQ_OK;
    s->next[n - 1] = -1;
    size_t nh = 0;
    for (int32_t i = 0; i + 1 < n; i++) spm_try_pair(t, s, &nh, i);
    while (nh > 0) {
        struct heap_item it = heap_pop(s->heap, &nh);
        int32_t l = it.left, r = s->next[l];
        if (s->len[l] != it.a || r < 0 || s->len[r] != it.b) continue;
        s->len[l] += s->len[r];
        s->len[r] = 0;
        s->next[l] = s->next[r];
        if (s->next[r] >= 0) s->prev[s->next[r]] = l;
        if (s->prev[l] >= 0) spm_try_pair(t, s, &nh, s->prev[l]);
        spm_try_pair(t, s, &nh, l);
    }
    for (int32_t i = 0; i >= 0; i = s->next[i]) {
        const char *p = s->buf + s->sym[i];
        int32_t id = lookup(t, p, (size_t)s->len[i]);
        if (id >= 0) {
            emit(o, id);
            continue;
        }
        for (int32_t k = 0; k < s->len[i]; k++) {
            int32_t b = t->byte_tok[(unsigned char)p[k]];
            emit(o, b >= 0 ? b : t->ids[KVQ_SPECIAL_UNK]);
        }
    }
    return KVQ_OK;
}

/* The longest matchable special token at x[0..n), or -1. */
static int32_t match_special(const kvq_tokenizer *t, const char *x, size_t n, int parse_special) {
    if (!t->special_first[(unsigned char)x[0]]) return -1;
    for (int32_t k = 0; k < t->n_special; k++) {
        int32_t id = t->special[k];
        size_t l = t->text_off[id + 1] - t->text_off[id];
        if (l > n) continue;
        if (!parse_special && t->type[id] != KVQ_TOKEN_USER_DEFINED) continue;
        if (memcmp(x, t->text + t->text_off[id], l) == 0) return id;
    }
    return -1;
}

/* Text between special tokens. SPM prefixes every such fragment with a
 * space, as llama.cpp does (each follows the start or a special token). */
static kvq_status encode_fragment(const kvq_tokenizer *t, scratch *s, const char *x, size_t len,
                                  sink *o) {
    if (t->model == MODEL_BPE) return encode_bpe(t, s, (const unsigned char *)x, len, o);
    return encode_spm(t, s, (const unsigned char *)x, len, t->add_space_prefix, o);
}

kvq_status kvq_tokenizer_encode(const kvq_tokenizer *t, const char *text, size_t len,
                                int add_bos, int parse_special, int32_t *ids,
                                size_t capacity, size_t *n_ids) {
    KVQ_RETURN_IF(!t || !n_ids || (len > 0 && !text) || (capacity > 0 && !ids),
                  KVQ_ERR_INVALID_ARG, "encode: NULL argument");
    KVQ_RETURN_IF(len >= UINT32_MAX / 4, KVQ_ERR_INVALID_ARG, "encode: text of %zu bytes too long",
                  len);
    sink o = {ids, capacity, 0};
    if (add_bos < 0) add_bos = t->add_bos;
    if (add_bos && t->ids[KVQ_SPECIAL_BOS] >= 0) emit(&o, t->ids[KVQ_SPECIAL_BOS]);
    scratch s = {0};
    KVQ_FORWARD(scratch_alloc(&s, len));
    size_t start = 0;
    kvq_status st = KVQ_OK;
    for (size_t i = 0; i < len;) {
        int32_t sp = match_special(t, text + i, len - i, parse_special);
        if (sp < 0) {
            i++;
            continue;
        }
        if (i > start) st = encode_fragment(t, &s, text + start, i - start, &o);
        if (st != KVQ_OK) break;
        emit(&o, sp);
        i += t->text_off[sp + 1] - t->text_off[sp];
        start = i;
    }
    if (st == KVQ_OK && len > start) st = encode_fragment(t, &s, text + start, len - start, &o);
    scratch_free(&s);
    KVQ_FORWARD(st);
    *n_ids = o.n;
    KVQ_RETURN_IF(o.n > capacity, KVQ_ERR_RANGE, "encode: needs %zu ids, capacity is %zu", o.n,
                  capacity);
    return KVQ_OK;
}
