/* cpu.c — detect the ISA path once (cpuid + xgetbv) and honour KVQ_ISA. */
#include <stdlib.h>
#include <string.h>

#include "common/common.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

static uint64_t read_xcr0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static kvq_isa detect(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return KVQ_ISA_REF;
    const int osxsave = (c >> 27) & 1, fma = (c >> 12) & 1, f16c = (c >> 29) & 1;
    if (!osxsave) return KVQ_ISA_REF;
    const uint64_t xcr0 = read_xcr0();
    const int os_ymm = (xcr0 & 0x6) == 0x6;    /* SSE + AVX state */
    const int os_zmm = (xcr0 & 0xE6) == 0xE6;  /* + opmask, ZMM_Hi256, Hi16_ZMM */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return KVQ_ISA_REF;
    const int avx2 = (b >> 5) & 1;
    const int avx512f = (b >> 16) & 1, avx512dq = (b >> 17) & 1;
    const int avx512bw = (b >> 30) & 1, avx512vl = (b >> 31) & 1;
    if (!(os_ymm && avx2 && fma && f16c)) return KVQ_ISA_REF;
    if (os_zmm && avx512f && avx512dq && avx512bw && avx512vl) return KVQ_ISA_AVX512;
    return KVQ_ISA_AVX2;
}

/* CPUID.7.0:ECX bit `bit` on a machine with the AVX-512 path. */
static int detect_avx512_ecx(int bit) {
    unsigned a, b, c, d;
    if (detect() != KVQ_ISA_AVX512 || !__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    return (c >> bit) & 1;
}
#else
static kvq_isa detect(void) { return KVQ_ISA_REF; }
static int detect_avx512_ecx(int bit) { return 0; }
#endif

int kvq_cpu_has_vnni(void) {
    static volatile int cached = -1;
    if (cached < 0) cached = detect_avx512_ecx(11);
    return cached;
}

static volatile int vbmi_off;

int kvq_cpu_has_vbmi(void) {
    static volatile int cached = -1;
    if (cached < 0) cached = detect_avx512_ecx(1);
    return cached && !vbmi_off;
}

void kvq_cpu_vbmi_off(int off) { vbmi_off = off; }

kvq_isa kvq_isa_detected(void) {
    /* Racing first calls compute the same value; the store is idempotent. */
    static volatile int cached = -1;
    if (cached < 0) cached = (int)detect();
    return (kvq_isa)cached;
}

kvq_isa kvq_isa_default(void) {
    kvq_isa best = kvq_isa_detected();
    const char *env = getenv("KVQ_ISA");
    kvq_isa forced;
    if (env && *env && kvq_isa_parse(env, &forced) == KVQ_OK && forced < best) return forced;
    return best;
}

int kvq_isa_supported(kvq_isa isa) {
    return (int)isa >= 0 && isa <= kvq_isa_detected();
}

const char *kvq_isa_name(kvq_isa isa) {
    switch (isa) {
    case KVQ_ISA_REF: return "ref";
    case KVQ_ISA_AVX2: return "avx2";
    case KVQ_ISA_AVX512: return "avx512";
    }
    return NULL;
}

kvq_status kvq_isa_parse(const char *name, kvq_isa *out) {
    KVQ_RETURN_IF(!name || !out, KVQ_ERR_INVALID_ARG, "kvq_isa_parse: NULL argument");
    for (int i = 0; i < KVQ_ISA_COUNT; i++) {
        if (strcmp(name, kvq_isa_name((kvq_isa)i)) == 0) {
            *out = (kvq_isa)i;
            return KVQ_OK;
        }
    }
    return kvq_fail(KVQ_ERR_INVALID_ARG, "unknown ISA '%s' (expected ref, avx2 or avx512)", name);
}
