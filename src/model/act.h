/* act.h — the feed-forward activation, per ISA. */
#ifndef KVQ_ACT_H
#define KVQ_ACT_H

#include <stdint.h>

#include "common/common.h"

/* SwiGLU in place: g[i] = silu(g[i]) u[i] = g[i] / (1 + exp(-g[i])) u[i],
 * for i < n. The reference is that expression in float with libm's expf;
 * the AVX-512 and AVX2 paths agree within (1e-6 + 6e-8 |g|) relative
 * (AVX-512's exp's error grows with |x|: softmax_avx512.h), or 1e-27 |u|
 * where g < -69 (AVX2: -87) gives 0 (the exp flushes there); the same
 * infinities and NaNs. Paths without a kernel run the reference. */
void kvq_swiglu(kvq_isa isa, float *g, const float *u, int64_t n);

void kvq_swiglu_ref(float *g, const float *u, int64_t n);
void kvq_swiglu_avx2(float *g, const float *u, int64_t n);
void kvq_swiglu_avx512(float *g, const float *u, int64_t n);

#endif
