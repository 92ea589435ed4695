/* act.c — the reference activation and the per-ISA choice. */
#include "model/act.h"

#include <math.h>

void kvq_swiglu_ref(float *g, const float *u, int64_t n) {
    for (int64_t i = 0; i < n; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

void kvq_swiglu(kvq_isa isa, float *g, const float *u, int64_t n) {
#if KVQ_HAVE_X86
    if (isa == KVQ_ISA_AVX512) {
        kvq_swiglu_avx512(g, u, n);
        return;
    }
    if (isa == KVQ_ISA_AVX2) {
        kvq_swiglu_avx2(g, u, n);
        return;
    }
#endif
    (void)isa;
    kvq_swiglu_ref(g, u, n);
}
