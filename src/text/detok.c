/* detok.c — streaming detokenizer: token pieces in, complete UTF-8 out. */
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "text/tokenizer.h"
#include "text/unicode.h"

struct kvq_detok {
    const kvq_tokenizer *tok;
    int special;
    int strip_space;       // drop the leading space of the first piece
    int started;           // a non-empty piece has been seen
    unsigned char pend[4]; // an incomplete sequence held back
    size_t n_pend;
    char *out;             // (out_cap) what the last call returned
    size_t out_cap;
};

kvq_status kvq_detok_create(const kvq_tokenizer *t, int special, kvq_detok **out) {
    KVQ_RETURN_IF(!t || !out, KVQ_ERR_INVALID_ARG, "detok: NULL argument");
    kvq_detok *d = calloc(1, sizeof *d);
    KVQ_RETURN_IF(!d, KVQ_ERR_NOMEM, "detok: out of memory");
    d->tok = t;
    d->special = special;
    d->strip_space = kvq_tokenizer_prepends_space(t);
    *out = d;
    return KVQ_OK;
}

void kvq_detok_free(kvq_detok *d) {
    if (!d) return;
    free(d->out);
    free(d);
}

static kvq_status reserve(kvq_detok *d, size_t n) {
    if (n <= d->out_cap) return KVQ_OK;
    size_t cap = n < 256 ? 256 : 2 * n;
    char *p = realloc(d->out, cap);
    KVQ_RETURN_IF(!p, KVQ_ERR_NOMEM, "detok: out of memory");
    d->out = p;
    d->out_cap = cap;
    return KVQ_OK;
}

static const char replacement[3] = {(char)0xEF, (char)0xBF, (char)0xBD};  // U+FFFD

/* Moves the complete sequences of s[0..n) to out (ill-formed parts become
 * U+FFFD) and keeps a trailing incomplete prefix in d->pend. out must hold
 * 3 * n bytes (a lone byte may become 3). Returns the bytes written. */
static size_t drain(kvq_detok *d, const unsigned char *s, size_t n, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t len, ok = kvq_utf8_check(s + i, n - i, &len);
        if (len > 0 && ok == len) {
            memcpy(out + o, s + i, len);
            o += len;
            i += len;
        } else if (len > 0 && ok == n - i) {
            memcpy(d->pend, s + i, ok);
            d->n_pend = ok;
            break;
        } else {
            // The maximal ill-formed part: the lead byte and the
            // continuation bytes that were still possible after it.
            memcpy(out + o, replacement, 3);
            o += 3;
            i += ok > 0 ? ok : 1;
        }
    }
    return o;
}

kvq_status kvq_detok_push(kvq_detok *d, int32_t id, const char **text, size_t *len) {
    KVQ_RETURN_IF(!d || !text || !len, KVQ_ERR_INVALID_ARG, "detok: NULL argument");
    KVQ_RETURN_IF(id < 0 || id >= kvq_tokenizer_n_vocab(d->tok), KVQ_ERR_INVALID_ARG,
                  "detok: id %d out of range [0, %d)", id, kvq_tokenizer_n_vocab(d->tok));
    const char *piece;
    size_t n;
    kvq_tokenizer_piece(d->tok, id, d->special, &piece, &n);
    // (n_pend + n) input bytes; each may grow to 3 output bytes.
    KVQ_FORWARD(reserve(d, 4 * (d->n_pend + n) + 4));
    unsigned char *in = (unsigned char *)d->out + 3 * (d->n_pend + n) + 3;
    memcpy(in, d->pend, d->n_pend);
    memcpy(in + d->n_pend, piece, n);
    size_t m = d->n_pend + n;
    if (n > 0 && !d->started) {
        d->started = 1;
        if (d->strip_space && in[d->n_pend] == ' ') {
            memmove(in + d->n_pend, in + d->n_pend + 1, n - 1);
            m--;
        }
    }
    d->n_pend = 0;
    *len = drain(d, in, m, d->out);
    *text = d->out;
    return KVQ_OK;
}

kvq_status kvq_detok_flush(kvq_detok *d, const char **text, size_t *len) {
    KVQ_RETURN_IF(!d || !text || !len, KVQ_ERR_INVALID_ARG, "detok: NULL argument");
    KVQ_FORWARD(reserve(d, 3));
    *len = 0;
    if (d->n_pend > 0) {
        memcpy(d->out, replacement, 3);
        *len = 3;
    }
    *text = d->out;
    d->n_pend = 0;
    d->started = 0;
    return KVQ_OK;
}
