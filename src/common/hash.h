/* hash.h — FNV-1a 64: the session file's checksum and the model
 * fingerprint's metadata hash. Stored in files, so never change it. */
#ifndef KVQ_HASH_H
#define KVQ_HASH_H

#include <stddef.h>
#include <stdint.h>

#define KVQ_FNV64_INIT 0xCBF29CE484222325ull

/* Continues hash h over n bytes of p (start from KVQ_FNV64_INIT). */
static inline uint64_t kvq_fnv1a64(uint64_t h, const void *p, size_t n) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001B3ull;
    return h;
}

#endif
