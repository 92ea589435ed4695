/* kv_session.h — the session file: a KV store, the tokens it holds and the
 * fingerprint of the model that made it, in one checksummed file.
 *
 * Layout (version 1, little-endian; docs/RELIABILITY.md):
 *   header   "KVQSESS\n", u32 version, u32 0, u64 payload bytes,
 *            u64 FNV-1a 64 of the payload                          32 bytes
 *   payload  sections "FPRT" (fingerprint), "PARM" (cache parameters and
 *            the codec of every layer's K and V), "TOKS" (the token ids),
 *            then one "LAYR" per layer (counts, then per (kv head, K|V)
 *            stream: centering mean, sink rows, compressed tiles, staging
 *            rows). Each section: u32 tag, u32 0, u64 body bytes, body.
 * The model layer (src/model/ctx_session.c) fills the fingerprint and
 * does the atomic file handling; this file knows the store's insides. */
#ifndef KVQ_KV_SESSION_H
#define KVQ_KV_SESSION_H

#include <stdio.h>

#include "kv/kvstore.h"

#define KVQ_SESSION_VERSION 1
#define KVQ_SESSION_HEADER_BYTES 32

/* What identifies a model: a session made with another one is refused. */
typedef struct kvq_session_fp {
    char arch[16];          /* NUL-padded */
    uint32_t n_layer, n_embd, n_head, n_kv_head, head_dim, n_vocab;
    uint64_t meta_hash;     /* kvq_gguf_meta_hash: metadata + tokenizer */
} kvq_session_fp;

/* Writes the whole file to f (a new file, positioned at 0): every layer of
 * kv must hold n_tokens tokens, tokens[0..n_tokens). KVQ_ERR_IO when a
 * write fails. */
kvq_status kvq_kv_session_write(FILE *f, const kvq_session_fp *fp, const kvq_kv *kv, const int32_t *tokens,
                                int n_tokens);

/* Parses and checks a whole file (data, size bytes) for a context whose
 * model has fingerprint want_fp and whose store has parameters want (its
 * kv->p), holding at most n_ctx tokens. On success *kv is a new store
 * equal to the saved one and *tokens a new array (malloc) of *n_tokens
 * ids; on failure nothing is allocated and the message names the field
 * that was wrong or did not match. */
kvq_status kvq_kv_session_parse(const uint8_t *data, size_t size, const kvq_session_fp *want_fp,
                                const kvq_kv_params *want, int n_ctx, kvq_kv **kv, int32_t **tokens,
                                int *n_tokens);

#endif
