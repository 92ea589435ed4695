/* alloc.c — aligned allocation. */
#include <stdlib.h>

#include "common/common.h"

void *kvq_alloc_aligned(size_t size) {
    if (size == 0 || size > SIZE_MAX - 63) return NULL;
    size_t rounded = (size + 63) & ~(size_t)63; /* aligned_alloc wants a multiple */
    return aligned_alloc(64, rounded);
}

void kvq_free_aligned(void *p) { free(p); }
