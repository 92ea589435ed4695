/* ggml_blocks.h — what the reference and the per-ISA kernels of the ggml
 * family share: block sizes, the fp16 scale rules and the iq4_nl search. */
#ifndef KVQ_GGML_BLOCKS_H
#define KVQ_GGML_BLOCKS_H

#include <stddef.h>
#include <stdint.h>

#include "codec/codec_impl.h"

#define KVQ_GGML_QK 32

/* iq4_nl's non-linear codebook (ggml's kvalues_iq4nl), ascending. */
extern const int8_t kvq_iq4nl_values[16];

/* ggml's best_index_int8(x) over that codebook equals, for every non-NaN
 * float x (all 2^32 bit patterns checked), the number of midpoints between
 * neighbouring entries that are <= x: near a midpoint x - lo and hi - x are
 * exact, and ties go up. SIMD paths find that count through buckets: bucket
 * b = floor((x - KVQ_IQ4NL_BUCKET_LO) / KVQ_IQ4NL_BUCKET_WIDTH) of 32 holds at
 * most one midpoint, kvq_iq4nl_bucket_mid[b] (+Inf if none), and
 * kvq_iq4nl_bucket_base[b] midpoints lie below it; so the index is the base
 * plus (x >= mid). No midpoint lies within 0.5 of a bucket edge, so a bucket
 * computed with rounding error (one off at an edge) gives the same count.
 * The buckets span [-144, 144): every x the 16 trial scales produce (|x| <=
 * 135 max |x| / max |x|); the final quantization clamps the bucket. */
#define KVQ_IQ4NL_BUCKET_LO (-144.0f)
#define KVQ_IQ4NL_BUCKET_WIDTH 9.0f
extern const int32_t kvq_iq4nl_bucket_base[32];
extern const float kvq_iq4nl_bucket_mid[32];

/* ggml's GROUP_MAX_EPS: a block with max |x| below it has scale 0. */
#define KVQ_IQ4NL_EPS 1e-15f
/* At max |x| >= 2^32 the iq4_nl scale is provably beyond fp16 (it is at least
 * about 2.2e-4 max |x|), while below it every sum of the search stays finite
 * in fp32; so larger blocks are refused before the search. */
#define KVQ_IQ4NL_RANGE 0x1p32f

/* Bytes of one block of 32 values of the given KVQ_GGML_* kind. */
size_t kvq_ggml_block_bytes(int kind);

/* 1 if an fp16 scale is +-Inf: the row is refused with KVQ_ERR_RANGE. */
static inline int kvq_ggml_f16_is_inf(uint16_t h) { return (h & 0x7FFFu) == 0x7C00u; }

/* ggml's `id = d ? 1/d : 0`, but 0 already when the stored fp16 scale h is
 * zero: then 1/d could overflow, and the block stores the zero encoding. */
static inline float kvq_ggml_inv_scale(float d, uint16_t h) { return (h & 0x7FFFu) ? 1.0f / d : 0.0f; }

/* The 16 inverse scales iq4_nl tries for a block whose first largest |x| is
 * max: [0] ggml's initial 1/(max/127), [k] (k - 8 - 127)/max for itry = k - 8. */
void kvq_iq4nl_trial_ids(float max, float id[16]);

/* ggml's choice among the 16 trials (same order, same fp32 comparisons),
 * given each trial's sum w q x and sum w q^2 (w = x^2): the block scale. */
float kvq_iq4nl_pick_scale(const float sumqx[16], const float sumq2[16]);

#endif
