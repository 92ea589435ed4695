/* alloc.c — aligned allocation.
 *
 * Blocks of ALLOC_MMAP_MIN bytes and more (the KV store's segments,
 * attention's per-call scratch) come straight from mmap and go back to the
 * system on free. From malloc, glibc's rising mmap threshold puts them in
 * the heap once one was freed, where later KV segments pin the freed
 * scratch: it stayed resident (kvq run, q4_0 cache, 4805 tokens: peak RSS
 * 161 MiB; 143 MiB this way, of which 92 weights and 30 KV). A 64-byte
 * header before each block records its size and origin, so the block itself
 * stays 64-byte aligned. */
#include <stdlib.h>
#include <sys/mman.h>

#include "common/common.h"

#define ALLOC_MMAP_MIN ((size_t)256 << 10)
#define ALLOC_HEADER 64

void *kvq_alloc_aligned(size_t size) {
    if (size == 0 || size > SIZE_MAX - 2 * ALLOC_HEADER - 63) return NULL;
    const size_t total = ((size + 63) & ~(size_t)63) + ALLOC_HEADER; /* aligned_alloc wants a multiple of 64 */
    const int mapped = total >= ALLOC_MMAP_MIN;
    unsigned char *base;
    if (mapped) {
        void *m = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        base = m == MAP_FAILED ? NULL : m;
    } else {
        base = aligned_alloc(64, total);
    }
    if (!base) return NULL;
    size_t *h = (size_t *)(void *)base;
    h[0] = total;
    h[1] = (size_t)mapped;
    return base + ALLOC_HEADER;
}

/* Bytes a block from kvq_alloc_aligned can hold. */
static size_t block_capacity(const void *p) {
    return ((const size_t *)(const void *)((const unsigned char *)p - ALLOC_HEADER))[0] - ALLOC_HEADER;
}

void *kvq_scratch_take(kvq_scratch *s, size_t size) {
    void *p = atomic_exchange(&s->block, NULL);
    if (p && block_capacity(p) >= size) return p;
    kvq_free_aligned(p);
    return kvq_alloc_aligned(size);
}

void kvq_scratch_give(kvq_scratch *s, void *p) { kvq_free_aligned(atomic_exchange(&s->block, p)); }

void kvq_scratch_free(kvq_scratch *s) { kvq_scratch_give(s, NULL); }

void kvq_free_aligned(void *p) {
    if (!p) return;
    unsigned char *base = (unsigned char *)p - ALLOC_HEADER;
    const size_t *h = (const size_t *)(void *)base;
    if (h[1]) munmap(base, h[0]);
    else free(base);
}
