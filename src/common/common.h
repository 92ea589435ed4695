/* common.h — internal helpers shared by every part of libkvq. */
#ifndef KVQ_COMMON_H
#define KVQ_COMMON_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include "kvq.h"

/* Records a message for kvq_last_error() and returns the status. */
kvq_status kvq_fail(kvq_status s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Return-on-error helpers in the style of zstd's RETURN_ERROR_IF. */
#define KVQ_RETURN_IF(cond, status, ...)                                      \
    do {                                                                     \
        if (cond) return kvq_fail((status), __VA_ARGS__);                    \
    } while (0)

#define KVQ_FORWARD(expr)                                                     \
    do {                                                                     \
        kvq_status kvq_fwd_s_ = (expr);                                      \
        if (kvq_fwd_s_ != KVQ_OK) return kvq_fwd_s_;                         \
    } while (0)

/* Per-ISA kernel files compile with these per-function targets, so the
 * library itself stays portable x86-64 and picks kernels at run time. */
#if defined(__x86_64__)
#define KVQ_HAVE_X86 1
#define KVQ_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#define KVQ_TARGET_AVX512 \
    __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl")))
/* The AVX-512 set plus VNNI (vpdpbusd); only behind kvq_cpu_has_vnni(). */
#define KVQ_TARGET_AVX512VNNI \
    __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")))
#else
#define KVQ_HAVE_X86 0
#endif

/* 1 if the AVX-512 path may use AVX512-VNNI (CPUID.7.0:ECX bit 11), not
 * part of kvq_isa: KVQ_ISA=avx512 means the AVX-512 path either way. */
int kvq_cpu_has_vnni(void);
/* 1 if it may use AVX512-VBMI (CPUID.7.0:ECX bit 1; the integer attention
 * kernel's 3- and 2-bit decode) and kvq_cpu_vbmi_off has not turned it off: tests
 * run the kernel's VNNI-only variant on a VBMI machine with it. */
int kvq_cpu_has_vbmi(void);
void kvq_cpu_vbmi_off(int off);

#define KVQ_ALWAYS_INLINE inline __attribute__((always_inline))
#define KVQ_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* Cache-line aligned allocation (64 bytes); NULL on failure or size 0. */
void *kvq_alloc_aligned(size_t size);
void kvq_free_aligned(void *p);

/* Bytes this process may still take (meminfo.c): MemAvailable of
 * /proc/meminfo, or the room its memory cgroups leave where that is less;
 * 0 where neither says. */
size_t kvq_mem_available(void);

/* The room one cgroup leaves, from the text of its limit file (v2
 * memory.max: a number or "max"; v1 memory.limit_in_bytes), its usage
 * file and its memory.stat (NULL if unread): limit - usage + inactive
 * file pages, 0 when full; SIZE_MAX for no limit or unreadable text. */
size_t kvq_cgroup_room(const char *limit, const char *usage, const char *stat);

/* For one line of /proc/self/mountinfo that mounts a memory cgroup
 * hierarchy (cgroup2, or cgroup with the memory controller), the directory
 * of this process's cgroup in it, from /proc/self/cgroup's text, into dir:
 * returns the mount point's length, or 0 for any other line (or a dir too small). */
size_t kvq_cgroup_mount_dir(const char *cgroup, const char *line, char *dir, size_t size);

/* The least room the cgroups from directory dir up to its hierarchy's mount
 * point (dir's first mount_len bytes) leave, counting v2's memory.high as a
 * limit too; SIZE_MAX where none has one. dir is cut back as the walk goes
 * up. */
size_t kvq_cgroup_hierarchy_room(char *dir, size_t mount_len);

/* One block kept between calls of a hot path (attention's per-call buffers:
 * mapped, faulted and zeroed afresh they were 14% of a prefill). take
 * returns it when it holds size bytes (else frees it and allocates a new
 * one; NULL when out of memory), give puts one back (freeing the one already
 * there). Both are one atomic exchange, so concurrent callers each get a
 * block of their own. Zero-initialised is empty. */
typedef struct kvq_scratch {
    _Atomic(void *) block;
} kvq_scratch;
void *kvq_scratch_take(kvq_scratch *s, size_t size);
void kvq_scratch_give(kvq_scratch *s, void *p);
void kvq_scratch_free(kvq_scratch *s);

/* a * b, or SIZE_MAX on overflow. */
static inline size_t kvq_mul_size(size_t a, size_t b) {
    size_t r;
    return __builtin_mul_overflow(a, b, &r) ? SIZE_MAX : r;
}

#endif
