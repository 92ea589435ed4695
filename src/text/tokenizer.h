/* tokenizer.h — internals of the tokenizers (the API is in kvq.h). */
#ifndef KVQ_TOKENIZER_H
#define KVQ_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "kvq.h"

/* Pre-tokenizers of byte-level BPE: how text is cut into words before the
 * merges run. Each is a pipeline of splits, as llama.cpp's regex lists are
 * (every split refines the pieces of the one before). */
typedef enum kvq_pretok {
    KVQ_PRETOK_DEFAULT = 0,  /* [\p{P}$+<=>^~|]+, gpt2, \p{N}+, [0-9]{3} */
    KVQ_PRETOK_GPT2 = 1,     /* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
    KVQ_PRETOK_SMOLLM = 2,   /* \p{N} (each digit alone), then gpt2 */
    KVQ_PRETOK_LLAMA3 = 3,   /* (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
                                 ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
    KVQ_PRETOK_QWEN2 = 4     /* as LLAMA3 with \p{N} (one digit) for \p{N}{1,3} */
} kvq_pretok;

/* Known differences from the regexes as HF tokenizers (Oniguruma) runs them:
 * (?i) folds ASCII only (Oniguruma would also let 'ſ' match 's'), and the
 * classes are those of scripts/gen_unicode.py's Unicode version, so code
 * points assigned later may be classed differently. */

/* Parses a tokenizer.ggml.pre name (NULL = "default"); -1 if unknown. */
int kvq_pretok_parse(const char *name);

/* Cuts units [0, n) (code points, or KVQ_UC_INVALID bytes) into words.
 * cp, cls: (n) units and their classes. ends: (n) out, the end index of
 * each word, ascending, the last one n; tmp: (n) scratch.
 * Returns the number of words (0 when n is 0). */
size_t kvq_pretok_split(kvq_pretok pre, const uint32_t *cp, const uint8_t *cls, size_t n,
                        uint32_t *ends, uint32_t *tmp);

/* The bytes of token id (0 <= id < n_vocab), as kvq_tokenizer_token_to_piece
 * gives them, without a copy: *s points into t. */
void kvq_tokenizer_piece(const kvq_tokenizer *t, int32_t id, int special, const char **s,
                         size_t *n);

/* 1 if encode puts a space before the text that decoding gives back (SPM
 * with add_space_prefix), so a detokenizer should drop it. */
int kvq_tokenizer_prepends_space(const kvq_tokenizer *t);

#endif
