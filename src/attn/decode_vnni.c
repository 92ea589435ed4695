/* decode_vnni.c — decode attention over interleaved q4_0 / q8_0 tiles with
 * AVX512-VNNI (design and measurements: docs/ATTN_PROTO.md).
 *
 * Scores: a K vector holds 4 dims of 16 tokens (dword lane = token), so one
 * vpdpbusd with 4 query int8 values broadcast adds 4 products to 16 scores:
 * no dequantization, no horizontal sums. The codes' offset (q4_0: 8, q8_0:
 * 128) is the accumulator's initial value, -off x sum(q int8), prepared once.
 * P x V: a V vector holds 16 dims of 4 tokens (byte = token); each token's V
 * block scale is folded into its softmax weight, and the products rounded to
 * 8 bits per (head, block, tile): signed against q4_0's u8 codes (offset
 * corrected), unsigned against q8_0's s8 codes (its scales are >= 0).
 * iq4_nl has q4_0's layout; one vpshufb turns its nibbles into codebook
 * value + 128 (u8), used as q8_0's K codes and as q4_0's V codes. q4_1,
 * q5_0 and q5_1 have it too, the q5 kinds' fifth bits merged into the
 * codes (fifth_bit), q4_1 / q5_1's min m added in float per block (scores)
 * or per (head, block) (P x V).
 * The rotated codecs' b-bit indices (b = 2, 3, 4) go through the same kind
 * of table, into their centroids rounded to int8 + 128 (kvq_attn_itiles.lut;
 * K's to 6-7 bits, the integers of AVX2's scores: rotated.h KVQ_ROT_CODE_MAX);
 * their one scale per row lets the query take one scale per head and p one
 * per (head, tile), so their int32 sums span the whole head; P x V reads
 * those tables as s8 centroids against u8 p.
 * The int32 sums become floats once per block (scores) or tile (P x V).
 * V may also be f16 rows beside interleaved K (the K-only presets): P x V
 * then runs in float over the rows (pv_f16), after the same integer scores. */
#include <math.h>
#include <string.h>

#include "attn/attn_kernels.h"
#include "attn/softmax_avx512.h"
#include "codec/ggml_blocks.h"

#if KVQ_HAVE_X86

/* Per 32-dim block: y = q x 127 / max|q|, q0 = round(y), q1 = round((y - q0)
 * x 254) (|y - q0| <= 0.5, so |q1| <= 127), rounding to nearest even (the
 * default mode, what lrintf would do). It runs for every query head of
 * every layer at every step: scalar, it was a visible share of a decode
 * step at small depths. */
KVQ_TARGET_AVX512VNNI void kvq_attn_qi8_prepare_avx512(const float *q, int d, int code_off, int one_scale,
                                                       kvq_attn_qi8 *out) {
    float head_max = 0;
    if (one_scale) {
        __m512 mx = _mm512_setzero_ps();
        for (int i = 0; i < d; i += 16) mx = _mm512_max_ps(mx, _mm512_abs_ps(_mm512_loadu_ps(q + i)));
        head_max = _mm512_reduce_max_ps(mx);
    }
    out->off_all = 0;
    for (int b = 0; b < d / 32; b++) {
        const __m512 x[2] = {_mm512_loadu_ps(q + 32 * b), _mm512_loadu_ps(q + 32 * b + 16)};
        const float amax =
            one_scale ? head_max : _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x[0]), _mm512_abs_ps(x[1])));
        const __m512 inv = _mm512_set1_ps(amax > 0 ? 127.0f / amax : 0.0f);
        __m512i sum[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
        for (int h = 0; h < 2; h++) {
            const __m512 y = _mm512_mul_ps(x[h], inv);
            const __m512i q0 = _mm512_cvtps_epi32(y);
            const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_sub_ps(y, _mm512_cvtepi32_ps(q0)), _mm512_set1_ps(254.0f)));
            _mm_storeu_si128((__m128i *)(out->q[0] + 32 * b + 16 * h), _mm512_cvtepi32_epi8(q0));
            _mm_storeu_si128((__m128i *)(out->q[1] + 32 * b + 16 * h), _mm512_cvtepi32_epi8(q1));
            sum[0] = _mm512_add_epi32(sum[0], q0);
            sum[1] = _mm512_add_epi32(sum[1], q1);
        }
        out->scale[b] = amax / 127.0f;
        out->sum[b] = out->scale[b] * (float)_mm512_reduce_add_epi32(sum[0]);
        out->off[0][b] = -code_off * _mm512_reduce_add_epi32(sum[0]);
        out->off[1][b] = -code_off * _mm512_reduce_add_epi32(sum[1]);
        out->off_all += out->off[0][b];
    }
}

/* The 3- and 2-bit kinds decoded with AVX512-VBMI's vpermb (where
 * kvq_cpu_has_vbmi()): kernel variants, not tile kinds. Each instantiation
 * is one variant V; the kernels take its tile kind and VBMI. (iq4_nl's
 * nibbles through vpermb instead of mask + vpshufb measured no faster.) */
enum { ROT3_VBMI = KVQ_ITILE_COUNT, ROT2_VBMI, VNNI_VARIANTS };
static inline int is_vbmi(int V) { return V >= ROT3_VBMI; }
static inline int base_kind(int V) { return V == ROT3_VBMI ? KVQ_ITILE_ROT3 : V == ROT2_VBMI ? KVQ_ITILE_ROT2 : V; }
static inline int vbmi_variant(int kind) {
    return kind == KVQ_ITILE_ROT3 ? ROT3_VBMI : kind == KVQ_ITILE_ROT2 ? ROT2_VBMI : kind;
}

/* vpermb: byte i = table byte (idx byte i & 63). Inline asm rather than the
 * intrinsic: one kernel body serves the VBMI variant and the VNNI-only one,
 * and the intrinsic's target check rejects it in the latter even in a dead
 * branch. Only the VBMI variants run it. */
KVQ_TARGET_AVX512VNNI static KVQ_ALWAYS_INLINE __m512i vpermb(__m512i idx, __m512i table) {
    __m512i r;
    __asm__("vpermb %2, %1, %0" : "=v"(r) : "v"(idx), "v"(table));
    return r;
}

/* A code table (16 bytes) in each 128-bit lane: vpshufb indexes within lanes. */
KVQ_TARGET_AVX512VNNI static KVQ_ALWAYS_INLINE __m512i lane_lut(const uint8_t *t) {
    return _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)t));
}

/* The u8 codes of a vector of nibbles: low and high nibbles (q4_0), through
 * the codebook for iq4_nl. */
KVQ_TARGET_AVX512VNNI static KVQ_ALWAYS_INLINE void nibble_codes(const int KIND, __m512i z, __m512i lut, __m512i *c0,
                                                                 __m512i *c1) {
    const __m512i lo4 = _mm512_set1_epi8(0x0F);
    *c0 = _mm512_and_si512(z, lo4);
    *c1 = _mm512_and_si512(_mm512_srli_epi16(z, 4), lo4);
    if (KIND == KVQ_ITILE_IQ4_NL) {
        *c0 = _mm512_shuffle_epi8(lut, *c0);
        *c1 = _mm512_shuffle_epi8(lut, *c1);
    }
}

/* A line of the next tile run, prefetched while this run is computed: into
 * L1 for the rotated kinds (<= 4 bits a value and one scale a row: the
 * kernel's instructions, not its bytes, bound them, and loads that hit L1
 * shorten them), into L2 for the ggml kinds (4.5 to 8.5 bits a value: bound
 * by their bytes, and a prefetch into L1 holds an L1 miss buffer until its
 * line arrives, so fewer lines are in flight). Measured on an AMD EPYC
 * (Zen 4) host, depth 32768, smollm2-135m shapes, 2 threads, 8 alternated
 * rounds: all into L2 against all into L1, q8_0 18.4 -> 13.1 ms a step,
 * q4_0 8.35 -> 7.81, iq4_nl 8.38 -> 7.92, turbo4 / turbo3 level, turbo2
 * 5.95 -> 6.27 (docs/PERF.md). */
static inline int prefetch_into_l1(int KIND) { return KIND >= KVQ_ITILE_ROT2; }

KVQ_TARGET_AVX512VNNI static KVQ_ALWAYS_INLINE void prefetch_line(const int KIND, const uint8_t *p) {
    if (prefetch_into_l1(KIND)) _mm_prefetch((const char *)p, _MM_HINT_T0);
    else _mm_prefetch((const char *)p, _MM_HINT_T1);
}

/* The code vector at base + o, prefetching the same line of the next tile
 * (pf, or NULL): tiles of a stream share the layout. */
KVQ_TARGET_AVX512VNNI static KVQ_ALWAYS_INLINE __m512i load_line(const int KIND, const uint8_t *base, const uint8_t *pf,
                                                              size_t o) {
    if (pf) prefetch_line(KIND, pf + o);
    return _mm512_loadu_si512(base + o);
}

/* The ggml kinds' parts (tile_layout.c): q5_0 / q5_1 store a fifth bit per
 * code, q4_1 / q5_1 a min m per block (value d c + m, c >= 0, d >= 0). */
static inline int has_hi(int KIND) { return KIND == KVQ_ITILE_Q5_0 || KIND == KVQ_ITILE_Q5_1; }
static inline int has_min(int KIND) { return KIND == KVQ_ITILE_Q4_1 || KIND == KVQ_ITILE_Q5_1; }
/* Bytes per (token, block): codes with their fifth bits, and in all. */
static inline int bits_bytes(int KIND) { return KIND == KVQ_ITILE_Q8_0 ? 32 : has_hi(KIND) ? 20 : 16; }
static inline int block_bytes(int KIND) { return bits_bytes(KIND) + 2 + 2 * has_min(KIND); }

/* Bytes of a K group of 16 tokens, and of its codes before its scales
 * (the fifth bits' vector of block b at 16 nb 16 + 64 b). */
static inline size_t k_group_bytes(int KIND, int nb) { return (size_t)16 * nb * block_bytes(KIND); }
static inline size_t k_group_codes(int KIND, int nb) { return (size_t)16 * nb * bits_bytes(KIND); }
/* Bytes of a V tile's codes (nibbles, then the fifth bits) before its scales. */
static inline size_t v_codes(int KIND, int nb, int T) { return (size_t)T * nb * bits_bytes(KIND); }

/* v shifted (16-bit lanes) so that bit `from` of each byte lands on bit `to`
 * (|from - to| <= 4): bits crossing into the next byte land below `to`, so
 * masking `to` alone never sees them. */
KVQ_TARGET_AVX512VNNI static KVQ_ALWAYS_INLINE __m512i bit_to(__m512i v, int from, int to) {
    return from > to ? _mm512_srli_epi16(v, (unsigned)(from - to)) : from < to ? _mm512_slli_epi16(v, (unsigned)(to - from)) : v;
}

/* u8 code c (0..15) with bit 4 from bit `from` of each byte of hi: one
 * ternlog (C ? A : B per bit, C = 0x10). */
KVQ_TARGET_AVX512VNNI static KVQ_ALWAYS_INLINE __m512i fifth_bit(__m512i c, __m512i hi, int from) {
    return _mm512_ternarylogic_epi32(bit_to(hi, from, 4), c, _mm512_set1_epi8(0x10), 0xE4);
}

static KVQ_ALWAYS_INLINE int32_t ld32(const void *p) {
    int32_t x;
    memcpy(&x, p, 4);
    return x;
}

/* s (G, NT T): the scores of tokens [0, n) of NT interleaved K tiles, -Inf past n.
 * The query residual (a second product, ~15 bits of query) only for q8_0 K,
 * whose own error is small enough for 8 bits of query to show. */
KVQ_TARGET_AVX512VNNI static KVQ_ALWAYS_INLINE void scores(const int KIND, const int G, int nb, int T, int NT, int n,
                                                           const kvq_attn_qi8 *q, const kvq_attn_itiles *it,
                                                           float *s) {
    const int KQ8 = KIND == KVQ_ITILE_Q8_0, QP = KQ8 ? 2 : 1, ST = NT * T;
    const __m512i lut = KIND == KVQ_ITILE_IQ4_NL ? lane_lut(it->lut[0]) : _mm512_setzero_si512();
    const size_t gb = k_group_bytes(KIND, nb), gc = k_group_codes(KIND, nb);
    for (int i = 0; i < NT; i++) {
    const uint8_t *kt = it->k[i], *pf = it->k_next[i];
#pragma GCC unroll 2
    for (int h = 0; h < T / 16; h++) {
        const uint8_t *grp = kt + h * gb, *pg = pf ? pf + h * gb : NULL;
        __m512 sc[KVQ_ATTN_MAX_G];
#pragma GCC unroll 8
        for (int g = 0; g < G; g++) sc[g] = _mm512_setzero_ps();
#pragma GCC unroll 2
        for (int b = 0; b < nb; b++) {
            __m512i a[KVQ_ATTN_MAX_G], r[KVQ_ATTN_MAX_G]; /* r: the residual's products */
#pragma GCC unroll 8
            for (int g = 0; g < G; g++) {
                a[g] = _mm512_set1_epi32(q[g].off[0][b]);
                r[g] = _mm512_set1_epi32(q[g].off[1][b]);
            }
            if (!KQ8) {
                /* q5: byte 4t + j bit k of the block's fifth-bit vector: dim 4k + j, so
                 * vector m's low nibbles take bit 2m, its high ones bit 2m + 1. */
                const __m512i hi = has_hi(KIND) ? load_line(KIND, grp, pg, (size_t)16 * nb * 16 + 64 * (size_t)b)
                                                : _mm512_setzero_si512();
#pragma GCC unroll 4
                for (int m = 0; m < 4; m++) {
                    const size_t o = (size_t)(4 * b + m) * 64;
                    const __m512i z = load_line(KIND, grp, pg, o);
                    __m512i c0, c1;
                    nibble_codes(KIND, z, lut, &c0, &c1);
                    if (has_hi(KIND)) {
                        c0 = fifth_bit(c0, hi, 2 * m);
                        c1 = fifth_bit(c1, hi, 2 * m + 1);
                    }
#pragma GCC unroll 8
                    for (int g = 0; g < G; g++) {
                        const int8_t *qb = q[g].q[0] + 32 * b + 8 * m;
                        a[g] = _mm512_dpbusd_epi32(a[g], c0, _mm512_set1_epi32(ld32(qb)));
                        a[g] = _mm512_dpbusd_epi32(a[g], c1, _mm512_set1_epi32(ld32(qb + 4)));
                    }
                }
            } else {
#pragma GCC unroll 8
                for (int m = 0; m < 8; m++) {
                    const size_t o = (size_t)(8 * b + m) * 64;
                    const __m512i z = load_line(KIND, grp, pg, o);
#pragma GCC unroll 8
                    for (int g = 0; g < G; g++) {
                        a[g] = _mm512_dpbusd_epi32(a[g], z, _mm512_set1_epi32(ld32(q[g].q[0] + 32 * b + 4 * m)));
                        if (QP == 2)
                            r[g] = _mm512_dpbusd_epi32(r[g], z, _mm512_set1_epi32(ld32(q[g].q[1] + 32 * b + 4 * m)));
                    }
                }
            }
            const __m512 dk = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(grp + gc + 32 * b)));
            /* q4_1 / q5_1: + m x the block's query sum (kvq_attn_qi8.sum), m after every block's d */
            const __m512 mk = has_min(KIND) ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(grp + gc + 32 * (size_t)(nb + b))))
                                            : _mm512_setzero_ps();
#pragma GCC unroll 8
            for (int g = 0; g < G; g++) {
                __m512 x = _mm512_cvtepi32_ps(a[g]);
                if (QP == 2) x = _mm512_fmadd_ps(_mm512_cvtepi32_ps(r[g]), _mm512_set1_ps(1.0f / 254), x);
                sc[g] = _mm512_fmadd_ps(x, _mm512_mul_ps(dk, _mm512_set1_ps(q[g].scale[b])), sc[g]);
                if (has_min(KIND)) sc[g] = _mm512_fmadd_ps(mk, _mm512_set1_ps(q[g].sum[b]), sc[g]);
            }
        }
        if (pg)
            for (size_t o = gc; o < gb; o += 64) prefetch_line(KIND, pg + o);
        const int valid = n - i * T - 16 * h;
        const __mmask16 keep = valid >= 16 ? 0xFFFF : valid <= 0 ? 0 : (__mmask16)((1u << valid) - 1);
#pragma GCC unroll 8
        for (int g = 0; g < G; g++)
            _mm512_store_ps(s + g * ST + i * T + 16 * h, _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), keep, sc[g]));
    }
    }
}

/* The fp16 values at sc[i] (T for tile i of NT) as np = NT T floats:
 * converted once per block rather than once per head. */
KVQ_TARGET_AVX512VNNI static KVQ_ALWAYS_INLINE void scales_f32(const uint8_t *const sc[2], int NT, int T, float *out) {
    for (int i = 0; i < NT; i++)
#pragma GCC unroll 2
        for (int h = 0; h < T; h += 16)
            _mm512_store_ps(out + i * T + h, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(sc[i] + 2 * h))));
}

/* Horizontal reductions of n <= 16 vectors at once (OP: the largest value,
 * the float or the int32 sum). The vectors are folded pairwise, two lane
 * shuffles and one OP per pair at each of four levels: 6 vectors (3 heads x
 * 2 blocks) take 24 operations where a reduction each took 48, and their
 * latencies overlap. Vector i ends in lane hr_lane(i); lanes of i >= n
 * hold leftovers. */
enum { HR_MAX_PS, HR_ADD_PS, HR_ADD_EPI32 };
static inline int hr_lane(int i) { return 4 * (i % 4) + i / 4; }

KVQ_TARGET_AVX512VNNI static KVQ_ALWAYS_INLINE __m512 hr_op(const int OP, __m512 a, __m512 b) {
    if (OP == HR_MAX_PS) return _mm512_max_ps(a, b);
    if (OP == HR_ADD_PS) return _mm512_add_ps(a, b);
    return _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(a), _mm512_castps_si512(b)));
}

KVQ_TARGET_AVX512VNNI static KVQ_ALWAYS_INLINE __m512 hreduce(const int OP, int n, const __m512 *v) {
    /* level 1: 128-bit lanes 0-1 of l1[i] hold v[2i]'s partials, 2-3 v[2i + 1]'s;
     * level 2: lane k of l2[i] v[4i + k]'s; levels 3 and 4 within lanes, so
     * element e of lane k ends as v[4e + k]'s. A missing partner is the
     * vector itself (its results land in unused lanes). */
    const int n1 = (n + 1) / 2, n2 = (n1 + 1) / 2, n3 = (n2 + 1) / 2;
    __m512 l1[8], l2[4], l3[2];
    /* set so that GCC sees them set (unused ones are dropped once n is known) */
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) l1[i] = l2[i / 2] = l3[i / 4] = _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++)
        if (i < n1) {
            const __m512 a = v[2 * i], b = 2 * i + 1 < n ? v[2 * i + 1] : a;
            l1[i] = hr_op(OP, _mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
        }
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
        if (i < n2) {
            const __m512 a = l1[2 * i], b = 2 * i + 1 < n1 ? l1[2 * i + 1] : a;
            l2[i] = hr_op(OP, _mm512_shuffle_f32x4(a, b, 0x88), _mm512_shuffle_f32x4(a, b, 0xDD));
        }
#pragma GCC unroll 2
    for (int i = 0; i < 2; i++)
        if (i < n3) {
            const __m512 a = l2[2 * i], b = 2 * i + 1 < n2 ? l2[2 * i + 1] : a;
            l3[i] = hr_op(OP, _mm512_shuffle_ps(a, b, 0x44), _mm512_shuffle_ps(a, b, 0xEE));
        }
    const __m512 a = l3[0], b = n3 > 1 ? l3[1] : a;
    return hr_op(OP, _mm512_shuffle_ps(a, b, 0x88), _mm512_shuffle_ps(a, b, 0xDD));
}

/* Softmax weights p (np) times the tokens' V scales ds (np), stored to x;
 * returns their largest magnitudes lane-wise (vrangeps: one operation). */
KVQ_TARGET_AVX512VNNI static KVQ_ALWAYS_INLINE __m512 scale_p(const float *p, const float *ds, int np, float *x) {
    __m512 mx = _mm512_setzero_ps();
#pragma GCC unroll 4
    for (int i = 0; i < np; i += 16) {
        const __m512 xi = _mm512_mul_ps(_mm512_load_ps(p + i), _mm512_load_ps(ds + i));
        _mm512_store_ps(x + i, xi);
        mx = _mm512_range_ps(mx, xi, 0x0B); /* max |.|, sign cleared */
    }
    return mx;
}

/* x (np) rounded to 8 bits (s8, or u8 where U8: one bit more for
 * non-negative x) with inverse step inv: stores the codes in out and
 * returns their sums lane-wise (for the codes' offset correction). Four
 * vectors of codes are packed into one 64-byte store (vpmovdb is two uops
 * each). */
KVQ_TARGET_AVX512VNNI static KVQ_ALWAYS_INLINE __m512i code_p(const float *x, int np, float inv_step, const int U8,
                                                             int8_t *out) {
    const __m512 inv = _mm512_set1_ps(inv_step);
    /* packs work within 128-bit lanes: dword 4 i + k of the packed vector
     * holds codes 4 i .. 4 i + 3 of vector k; this puts them at 4 k + i. */
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    __m512i sum = _mm512_setzero_si512();
    int i = 0;
#pragma GCC unroll 4
    for (; i + 4 <= np / 16; i += 4) {
        __m512i qi[4];
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            qi[k] = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_load_ps(x + 16 * (i + k)), inv));
            sum = _mm512_add_epi32(sum, qi[k]);
        }
        const __m512i w01 = _mm512_packs_epi32(qi[0], qi[1]), w23 = _mm512_packs_epi32(qi[2], qi[3]);
        const __m512i b = U8 ? _mm512_packus_epi16(w01, w23) : _mm512_packs_epi16(w01, w23);
        _mm512_storeu_si512(out + 16 * i, _mm512_permutexvar_epi32(order, b));
    }
    for (; i < np / 16; i++) {
        const __m512i qi = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_load_ps(x + 16 * i), inv));
        sum = _mm512_add_epi32(sum, qi);
        _mm_storeu_si128((__m128i *)(out + 16 * i), U8 ? _mm512_cvtusepi32_epi8(qi) : _mm512_cvtepi32_epi8(qi));
    }
    return sum;
}

/* Softmax weights p (G, ST) times V scales, rounded to 8 bits per (head,
 * block): pair k = g nb + b (n = G nb pairs) takes p + g ST and the scales
 * ds + b ST. Stores the codes at pq + k ST, the step (largest magnitude /
 * levels) in step[k] and, where the codes carry an offset off, their sum
 * times -off in corr[k] (0 where off is 0; corr may then be NULL). The
 * pairs go 16 at a time so that their horizontal maxima and sums are
 * reduced together (hreduce): -2 to -7% a token for the ggml kinds. */
KVQ_TARGET_AVX512VNNI static KVQ_ALWAYS_INLINE void round_p(int n, int nb, int ST, const float *p, const float *ds,
                                                           const int U8, const int off, int8_t *pq, float *step,
                                                           int32_t *corr) {
    const float levels = U8 ? 255.0f : 127.0f;
    for (int k0 = 0; k0 < n; k0 += 16) {
        const int nk = n - k0 < 16 ? n - k0 : 16;
        _Alignas(64) float x[16 * KVQ_KV_MAX_TILE]; /* p ds of pair k0 + k at x + k ST */
        __m512 v[16];
#pragma GCC unroll 8
        for (int k = 0; k < nk; k++) v[k] = scale_p(p + (k0 + k) / nb * ST, ds + (k0 + k) % nb * ST, ST, x + k * ST);
        const __m512 amax = hreduce(HR_MAX_PS, nk, v);
        _Alignas(64) float inv[16], st[16];
        const __mmask16 nonzero = _mm512_cmp_ps_mask(amax, _mm512_setzero_ps(), _CMP_GT_OQ);
        _mm512_store_ps(inv, _mm512_maskz_div_ps(nonzero, _mm512_set1_ps(levels), amax));
        _mm512_store_ps(st, _mm512_mul_ps(amax, _mm512_set1_ps(1.0f / levels)));
#pragma GCC unroll 8
        for (int k = 0; k < nk; k++) {
            v[k] = _mm512_castsi512_ps(code_p(x + k * ST, ST, inv[hr_lane(k)], U8, pq + (size_t)(k0 + k) * ST));
            step[k0 + k] = st[hr_lane(k)];
        }
        if (!off) {
            if (corr)
                for (int k = 0; k < nk; k++) corr[k0 + k] = 0;
            continue;
        }
        _Alignas(64) int32_t sum[16];
        _mm512_store_si512(sum, _mm512_castps_si512(hreduce(HR_ADD_EPI32, nk, v)));
#pragma GCC unroll 8
        for (int k = 0; k < nk; k++) corr[k0 + k] = -off * sum[hr_lane(k)];
    }
}

/* sum_t p (g, t) ms (b, t) for the n = G nb pairs k = g nb + b, into
 * out[k], reduced 16 at a time. */
KVQ_TARGET_AVX512VNNI static KVQ_ALWAYS_INLINE void p_dots(int n, int nb, int ST, const float *p, const float *ms,
                                                          float *out) {
    for (int k0 = 0; k0 < n; k0 += 16) {
        const int nk = n - k0 < 16 ? n - k0 : 16;
        __m512 v[16];
#pragma GCC unroll 8
        for (int k = 0; k < nk; k++) {
            const float *pg = p + (k0 + k) / nb * ST, *mb = ms + (k0 + k) % nb * ST;
            v[k] = _mm512_setzero_ps();
#pragma GCC unroll 4
            for (int t = 0; t < ST; t += 16) v[k] = _mm512_fmadd_ps(_mm512_load_ps(pg + t), _mm512_load_ps(mb + t), v[k]);
        }
        _Alignas(64) float s[16];
        _mm512_store_ps(s, hreduce(HR_ADD_PS, nk, v));
#pragma GCC unroll 8
        for (int k = 0; k < nk; k++) out[k0 + k] = s[hr_lane(k)];
    }
}

/* acc (G, d) += p (G, NT T) x NT interleaved V tiles. q4_1 / q5_1 (value
 * d c + m = d (c - off) + (m + off d)): p d against the codes as q4_0 (the
 * codes centred by off = 8 / 16 as q4_0's and q5_0's, so p d's rounding
 * errors meet values as small as theirs: uncentred codes 0..31 doubled the
 * worst error of the tests' cases), plus sum p (m + off d) per (head,
 * block) added to the block's dims in float. */
KVQ_TARGET_AVX512VNNI static KVQ_ALWAYS_INLINE void pv(const int KIND, const int G, int d, int nb, int T, int NT,
                                                       const float *p, const kvq_attn_itiles *it, float *acc) {
    const int VQ8 = KIND == KVQ_ITILE_Q8_0, ST = NT * T;
    const int off = VQ8 ? 0 : KIND == KVQ_ITILE_IQ4_NL ? 128 : has_hi(KIND) ? 16 : 8;
    /* p unsigned (one bit more) where the V scales are >= 0: q8_0 against its
     * s8 codes, q4_1 / q5_1 against their codes 0..31, s8 as well. */
    const int U8 = VQ8 || has_min(KIND);
    const size_t scales = v_codes(KIND, nb, T), nib = (size_t)T * nb * 16;
    /* p x V scale of head g, block b, token t of the run, rounded:
     * pq[(g nb + b) ST + t], packed (rows 4 KiB apart would alias the stores
     * they follow). */
    _Alignas(64) int8_t pq[KVQ_ATTN_MAX_G * KVQ_MAX_HEAD_DIM / 32 * KVQ_KV_MAX_TILE];
    /* per (head g, block b) at g nb + b: the step of its codes, the codes'
     * offset correction, sum p (m + off d) (block b's dims' share of the mins) */
    float sp[KVQ_ATTN_MAX_G * KVQ_MAX_HEAD_DIM / 32], pm[KVQ_ATTN_MAX_G * KVQ_MAX_HEAD_DIM / 32];
    int32_t corr[KVQ_ATTN_MAX_G * KVQ_MAX_HEAD_DIM / 32];
    /* the tokens' V scales ds (nb, ST), and ms = m + off d (nb, ST) */
    _Alignas(64) float ds[KVQ_MAX_HEAD_DIM / 32 * KVQ_KV_MAX_TILE], ms[KVQ_MAX_HEAD_DIM / 32 * KVQ_KV_MAX_TILE];
#pragma GCC unroll 2
    for (int b = 0; b < nb; b++) {
        const size_t at = scales + 2 * (size_t)b * T;
        const uint8_t *const vs[2] = {it->v[0] + at, NT > 1 ? it->v[1] + at : NULL};
        float *dsb = ds + b * ST, *msb = ms + b * ST;
        scales_f32(vs, NT, T, dsb);
        if (has_min(KIND)) { /* m after every block's d */
            const uint8_t *const vm[2] = {vs[0] + 2 * (size_t)nb * T, NT > 1 ? vs[1] + 2 * (size_t)nb * T : NULL};
            scales_f32(vm, NT, T, msb);
            /* ms = m + off d: one dot product with p per (head, block) */
#pragma GCC unroll 4
            for (int t = 0; t < ST; t += 16)
                _mm512_store_ps(msb + t, _mm512_fmadd_ps(_mm512_load_ps(dsb + t), _mm512_set1_ps((float)off),
                                                         _mm512_load_ps(msb + t)));
        }
    }
    round_p(G * nb, nb, ST, p, ds, U8, off, pq, sp, corr);
    if (has_min(KIND)) p_dots(G * nb, nb, ST, p, ms, pm);
    /* Blocks per pass over the tile: 2 BB accumulators per head stay in registers. */
    const int BB = G == 1 ? 8 : G == 2 ? 4 : G <= 4 ? 2 : 1;
    const __m512i lut = KIND == KVQ_ITILE_IQ4_NL ? lane_lut(it->lut[1]) : _mm512_setzero_si512();
    for (int b0 = 0; b0 < nb; b0 += BB) {
        __m512i a[KVQ_ATTN_MAX_G][16];
#pragma GCC unroll 8
        for (int g = 0; g < G; g++)
#pragma GCC unroll 16
            for (int k = 0; k < 2 * BB; k++) a[g][k] = _mm512_set1_epi32(b0 + k / 2 < nb ? corr[g * nb + b0 + k / 2] : 0);
        for (int i = 0; i < NT; i++) {
        const uint8_t *vt = it->v[i], *pf = it->v_next[i];
        const int8_t *pqi = pq + (size_t)i * T;
#pragma GCC unroll 8
        for (int j = 0; j < T / 4; j++) {
#pragma GCC unroll 8
            for (int kb = 0; kb < BB; kb++) {
                const int b = b0 + kb;
                if (b >= nb) break;
                if (!VQ8) {
                    const size_t o = ((size_t)j * nb + b) * 64;
                    const __m512i z = load_line(KIND, vt, pf, o);
                    __m512i c0, c1;
                    nibble_codes(KIND, z, lut, &c0, &c1);
                    if (has_hi(KIND)) {
                        /* Per 16 tokens, byte 4l + i bit 2 (j % 4) + h: dim 16h + l of token 4j + i
                         * (one vector for 4 quads: prefetched with the first). */
                        const __m512i hi = load_line(KIND, vt, j % 4 ? NULL : pf, nib + 64 * ((size_t)(j / 4) * nb + b));
                        c0 = fifth_bit(c0, hi, 2 * (j % 4));
                        c1 = fifth_bit(c1, hi, 2 * (j % 4) + 1);
                    }
#pragma GCC unroll 8
                    for (int g = 0; g < G; g++) {
                        const __m512i pb = _mm512_set1_epi32(ld32(&pqi[((size_t)g * nb + b) * ST + 4 * j]));
                        if (U8) { /* p is the unsigned operand */
                            a[g][2 * kb] = _mm512_dpbusd_epi32(a[g][2 * kb], pb, c0);
                            a[g][2 * kb + 1] = _mm512_dpbusd_epi32(a[g][2 * kb + 1], pb, c1);
                        } else {
                            a[g][2 * kb] = _mm512_dpbusd_epi32(a[g][2 * kb], c0, pb);
                            a[g][2 * kb + 1] = _mm512_dpbusd_epi32(a[g][2 * kb + 1], c1, pb);
                        }
                    }
                } else {
#pragma GCC unroll 2
                    for (int half = 0; half < 2; half++) {
                        const size_t o = ((size_t)j * 2 * nb + 2 * b + half) * 64;
                        const __m512i z = load_line(KIND, vt, pf, o);
#pragma GCC unroll 8
                        for (int g = 0; g < G; g++)
                            a[g][2 * kb + half] =
                                _mm512_dpbusd_epi32(a[g][2 * kb + half], _mm512_set1_epi32(ld32(&pqi[((size_t)g * nb + b) * ST + 4 * j])), z);
                    }
                }
            }
        }
        }
#pragma GCC unroll 8
        for (int g = 0; g < G; g++)
#pragma GCC unroll 16
            for (int k = 0; k < 2 * BB; k++) {
                const int b = b0 + k / 2;
                if (b >= nb) break;
                float *dst = acc + (size_t)g * d + 32 * b + 16 * (k % 2);
                __m512 base = _mm512_loadu_ps(dst);
                if (has_min(KIND)) base = _mm512_add_ps(base, _mm512_set1_ps(pm[g * nb + b]));
                _mm512_storeu_ps(dst, _mm512_fmadd_ps(_mm512_cvtepi32_ps(a[g][k]), _mm512_set1_ps(sp[g * nb + b]), base));
            }
    }
    for (int i = 0; i < NT; i++)
        if (it->v_next[i])
            for (size_t o = scales; o < scales + 2 * (size_t)nb * T * (1 + has_min(KIND)); o += 64)
                prefetch_line(KIND, it->v_next[i] + o);
}

/* ------------------------------------------------------- rotated codecs */

static inline int rot_bits(int KIND) { return KIND - KVQ_ITILE_ROT2 + 2; }

/* u8 codes of slot s of 3-bit triples v[0..2] (tile_layout.c rot3_walk:
 * slot s < 6 in bits 3 (s % 2).. of v[s / 2]; 6 and 7 in bits 6-7 of
 * v[s - 6], their third bit bit s of v[2]). With VBMI, vpermb reads 6
 * index bits: slots 0..5 are one lookup each (tab[0]: index bits 0-2,
 * tab[1]: 3-5); 6 and 7 merge v[s - 6] >> 4 (bits 2-3) with
 * top = v[2] >> 2 (bits 4, 5; tab[2], tab[3]). Without, vpshufb (4 index
 * bits, bit 7 zeroes; tab[0]'s lanes are the 8 codes twice) after each
 * slot is cut to its 3 bits. */
KVQ_TARGET_AVX512VNNI static KVQ_ALWAYS_INLINE __m512i rot3_slot(const int VBMI, int s, const __m512i v[3],
                                                                  __m512i top, const __m512i tab[4]) {
    if (VBMI) {
        if (s < 6) return vpermb(v[s / 2], tab[s % 2]);
        return vpermb(_mm512_ternarylogic_epi32(_mm512_srli_epi16(v[s - 6], 4), top, _mm512_set1_epi8(0x0C), 0xE4),
                      tab[s - 4]);
    }
    const __m512i x = s < 6 ? (s % 2 ? _mm512_srli_epi16(v[s / 2], 3) : v[s / 2])
                            : _mm512_ternarylogic_epi32(_mm512_srli_epi16(v[s - 6], 6), _mm512_srli_epi16(v[2], (unsigned)(s - 2)),
                                                        _mm512_set1_epi8(0x03), 0xE4);
    return _mm512_shuffle_epi8(tab[0], _mm512_and_si512(x, _mm512_set1_epi8(7)));
}

/* The tables of rot3_slot (b = 3) or rot_codes (b = 2, 4): decode.c
 * itile_codes writes four of 64 bytes for 3 bits, three for 2, one 16-byte
 * table for 4 (in every 128-bit lane). */
KVQ_TARGET_AVX512VNNI static KVQ_ALWAYS_INLINE void rot_tables(int b, const uint8_t *lut, __m512i tab[4]) {
    if (b == 4) tab[0] = lane_lut(lut);
    else
        for (int i = 0; i < b + 1; i++) tab[i] = _mm512_loadu_si512(lut + 64 * i);
}

/* u8 codes (index -> table) of dims 4k.. of the vector z holding the b-bit
 * indices of 4 dims per dword (tile_layout.c): b = 4 nibbles (k even low,
 * odd high), b = 2 bit pairs (k = 0..3). With VBMI (b = 2), pairs 0..2
 * are one vpermb each through tab[k] (index bits 2k, 2k + 1), pair 3 one
 * shift more (bits 6-7 to 4-5, tab[2]); else vpshufb after a mask, tab[0]'s
 * lanes the codes repeated. b = 3: rot3_slot. */
KVQ_TARGET_AVX512VNNI static KVQ_ALWAYS_INLINE __m512i rot_codes(const int VBMI, const int b, int k, __m512i z,
                                                                 const __m512i tab[4]) {
    if (VBMI) return k < 3 ? vpermb(z, tab[k]) : vpermb(_mm512_srli_epi16(z, 2), tab[2]);
    const __m512i x = b == 4 ? _mm512_and_si512(k & 1 ? _mm512_srli_epi16(z, 4) : z, _mm512_set1_epi8(0x0F))
                             : _mm512_and_si512(k ? _mm512_srli_epi16(z, 2 * k) : z, _mm512_set1_epi8(0x03));
    return _mm512_shuffle_epi8(tab[0], x);
}

/* s (G, NT T) over NT rotated K tiles: per group of 16 tokens, the codes of 4
 * dims x 16 tokens per vpdpbusd; one float conversion per group. */
KVQ_TARGET_AVX512VNNI static KVQ_ALWAYS_INLINE void scores_rot(const int KIND, const int VBMI, const int G, int d, int T, int NT, int n,
                                                               const kvq_attn_qi8 *q, const kvq_attn_itiles *it,
                                                               float *s) {
    const int b = rot_bits(KIND), ST = NT * T;
    const size_t codes = 2 * (size_t)d * b, gb = codes + 32;
    __m512i tab[4];
    rot_tables(b, it->lut[0], tab);
    __m512 qs[KVQ_ATTN_MAX_G];
#pragma GCC unroll 8
    for (int g = 0; g < G; g++) qs[g] = _mm512_set1_ps(q[g].scale[0] * it->unit[0]);
    for (int i = 0; i < NT; i++) {
#pragma GCC unroll 2
    for (int h = 0; h < T / 16; h++) {
        const uint8_t *grp = it->k[i] + h * gb, *pg = it->k_next[i] ? it->k_next[i] + h * gb : NULL;
        __m512i a[KVQ_ATTN_MAX_G];
#pragma GCC unroll 8
        for (int g = 0; g < G; g++) a[g] = _mm512_set1_epi32(q[g].off_all);
        if (b == 3) {
#pragma GCC unroll 2
            for (int c = 0; c < d / 32; c++) { /* slot k: dims 32c + 4k.. */
                const __m512i v[3] = {load_line(KIND, grp, pg, 64 * (size_t)(3 * c)), load_line(KIND, grp, pg, 64 * (size_t)(3 * c + 1)),
                                      load_line(KIND, grp, pg, 64 * (size_t)(3 * c + 2))};
                const __m512i top = _mm512_srli_epi16(v[2], 2);
#pragma GCC unroll 8
                for (int k = 0; k < 8; k++) {
                    const __m512i x = rot3_slot(VBMI, k, v, top, tab);
#pragma GCC unroll 8
                    for (int g = 0; g < G; g++)
                        a[g] = _mm512_dpbusd_epi32(a[g], x, _mm512_set1_epi32(ld32(q[g].q[0] + 32 * c + 4 * k)));
                }
            }
        } else {
            const int dims = b == 4 ? 8 : 16, per = dims / 4; /* dims per vector, dword quads per vector */
            for (int m = 0; m < d / dims; m++) {
                const __m512i z = load_line(KIND, grp, pg, 64 * (size_t)m);
#pragma GCC unroll 4
                for (int k = 0; k < per; k++) {
                    const __m512i x = rot_codes(VBMI, b, k, z, tab);
#pragma GCC unroll 8
                    for (int g = 0; g < G; g++)
                        a[g] = _mm512_dpbusd_epi32(a[g], x, _mm512_set1_epi32(ld32(q[g].q[0] + dims * m + 4 * k)));
                }
            }
        }
        if (pg) prefetch_line(KIND, pg + codes);
        const __m512 dk = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(grp + codes)));
        const int valid = n - i * T - 16 * h;
        const __mmask16 keep = valid >= 16 ? 0xFFFF : valid <= 0 ? 0 : (__mmask16)((1u << valid) - 1);
#pragma GCC unroll 8
        for (int g = 0; g < G; g++)
            _mm512_store_ps(s + g * ST + i * T + 16 * h,
                            _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), keep,
                                               _mm512_mul_ps(_mm512_cvtepi32_ps(a[g]), _mm512_mul_ps(dk, qs[g]))));
    }
    }
}

/* a[g][u] += p quad (pb[g]) x the codes k of z, for G heads. */
KVQ_TARGET_AVX512VNNI static KVQ_ALWAYS_INLINE void rot_pv_unit(const int VBMI, const int b, const int G, int k, int u,
                                                                 __m512i z, const __m512i tab[4], const __m512i pb[4],
                                                                 __m512i a[4][4]) {
    const __m512i x = rot_codes(VBMI, b, k, z, tab);
#pragma GCC unroll 4
    for (int g = 0; g < G; g++) a[g][u] = _mm512_dpbusd_epi32(a[g][u], pb[g], x);
}

/* acc (G, d) += p (G, NT T) x NT rotated V tiles: p times each token's scale
 * rounded to u8 per (head, run) (both >= 0, so 255 levels and no offset to
 * correct), against the centroids as s8. G <= 4 (callers split): 4
 * accumulators of 16 dims per head for each 64 dims in flight. */
KVQ_TARGET_AVX512VNNI static KVQ_ALWAYS_INLINE void pv_rot(const int KIND, const int VBMI, const int G, int d, int T, int NT,
                                                           const float *p, const kvq_attn_itiles *it, float *acc) {
    const int b = rot_bits(KIND), ST = NT * T;
    _Alignas(64) int8_t pq[4 * KVQ_KV_MAX_TILE]; /* (G, ST) */
    float sp[4];
    const size_t scales = (size_t)T * d * b / 8;
    const uint8_t *const vs[2] = {it->v[0] + scales, NT > 1 ? it->v[1] + scales : NULL};
    _Alignas(64) float ds[KVQ_KV_MAX_TILE];
    scales_f32(vs, NT, T, ds);
    round_p(G, 1, ST, p, ds, 1, 0, pq, sp, NULL);
#pragma GCC unroll 4
    for (int g = 0; g < G; g++) sp[g] *= it->unit[1];
    /* The centroids as s8 (the tables hold them + 128). The rows' least-
     * squares scales are >= 0: every index has its coordinate's sign
     * (rotated.h), so <y, c> >= 0. */
    __m512i tab[4];
    rot_tables(b, it->lut[1], tab);
    for (int i = 0; i < (b == 4 ? 1 : b + 1); i++) tab[i] = _mm512_xor_si512(tab[i], _mm512_set1_epi8((char)0x80));
    /* 64 dims per pass (b = 4: two blocks of 32), one vector each (b = 3: per
     * octet of tokens, 3 vectors for its 2 quads). */
    const size_t quad_bytes = (size_t)d * b / 2; /* 4 tokens */
    for (int c = 0; c < d / 64 + (d % 64 != 0); c++) {
        const int U = b == 4 && 64 * c + 32 >= d ? 2 : 4; /* 16-dim units in this pass */
        __m512i a[4][4];
#pragma GCC unroll 4
        for (int g = 0; g < G; g++)
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++) a[g][u] = _mm512_setzero_si512();
        for (int i = 0; i < NT; i++) {
        const uint8_t *vt = it->v[i], *pf = it->v_next[i];
        if (b == 3) {
#pragma GCC unroll 2
            for (int o = 0; o < T / 8; o++) {
                const size_t at = (size_t)o * 2 * quad_bytes + 64 * 3 * (size_t)c;
                const __m512i v[3] = {load_line(KIND, vt, pf, at), load_line(KIND, vt, pf, at + 64), load_line(KIND, vt, pf, at + 128)};
                const __m512i top = _mm512_srli_epi16(v[2], 2);
#pragma GCC unroll 2
                for (int h = 0; h < 2; h++) { /* quad h: slots 4h + k, dims 64c + 16k.. */
                    __m512i pb[4];
#pragma GCC unroll 4
                    for (int g = 0; g < G; g++) pb[g] = _mm512_set1_epi32(ld32(&pq[g * ST + i * T + 8 * o + 4 * h]));
#pragma GCC unroll 4
                    for (int k = 0; k < 4; k++) {
                        const __m512i x = rot3_slot(VBMI, 4 * h + k, v, top, tab);
#pragma GCC unroll 4
                        for (int g = 0; g < G; g++) a[g][k] = _mm512_dpbusd_epi32(a[g][k], pb[g], x);
                    }
                }
            }
        } else {
#pragma GCC unroll 4
            for (int j = 0; j < T / 4; j++) {
                __m512i pb[4];
#pragma GCC unroll 4
                for (int g = 0; g < G; g++) pb[g] = _mm512_set1_epi32(ld32(&pq[g * ST + i * T + 4 * j]));
                /* b = 4: units 0, 1 from the pass's first vector, 2, 3 from its
                 * second (where U = 4); b = 2: units 0..3 from one vector. Spelt
                 * out: GCC kept the accumulators in memory when the units came
                 * from loops it would not unroll. */
                const size_t at = (size_t)j * quad_bytes + 64 * ((b == 4 ? 2 : 1) * (size_t)c);
                const __m512i z = load_line(KIND, vt, pf, at);
                rot_pv_unit(VBMI, b, G, 0, 0, z, tab, pb, a);
                rot_pv_unit(VBMI, b, G, 1, 1, z, tab, pb, a);
                if (b == 2) {
                    rot_pv_unit(VBMI, b, G, 2, 2, z, tab, pb, a);
                    rot_pv_unit(VBMI, b, G, 3, 3, z, tab, pb, a);
                } else if (U == 4) {
                    const __m512i z1 = load_line(KIND, vt, pf, at + 64);
                    rot_pv_unit(VBMI, b, G, 0, 2, z1, tab, pb, a);
                    rot_pv_unit(VBMI, b, G, 1, 3, z1, tab, pb, a);
                }
            }
        }
        }
        /* b = 4: unit u of vector w covers dims 32 (2c + w) + 16 (u % 2), i.e. 64c + 16u. */
#pragma GCC unroll 4
        for (int g = 0; g < G; g++)
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++) {
                if (u >= U) continue;
                float *dst = acc + (size_t)g * d + 64 * c + 16 * u;
                _mm512_storeu_ps(dst, _mm512_fmadd_ps(_mm512_cvtepi32_ps(a[g][u]), _mm512_set1_ps(sp[g]),
                                                      _mm512_loadu_ps(dst)));
            }
    }
    for (int i = 0; i < NT; i++)
        if (it->v_next[i])
            for (size_t o = scales; o < scales + 2 * (size_t)T; o += 64) prefetch_line(KIND, it->v_next[i] + o);
}

/* ------------------------------------------------------- f16 V rows */

/* acc (G, d) += p (G, NT T) x the first n rows of NT tiles of f16 V rows
 * (the K-only presets: K interleaved, V f16): the fused kernel's P x V
 * (decode_avx512.c fused_pv) tile by tile, which prefetches each row's
 * lines in the next tiles (it->v_next, NT tiles ahead) into L2. The rows
 * past n are not read (p is 0 there, but an f16 row may hold Inf, and
 * 0 x Inf would poison acc). */
static void pv_f16(int G, int d, int T, int n, const float *p, const kvq_attn_itiles *it, float *acc) {
    for (int i = 0; i < it->NT && n > i * T; i++) {
        const kvq_attn_rows v = {it->v[i], 2 * (size_t)d, NULL, KVQ_FMT_F16, it->v_next[i]};
        kvq_attn_rows_pv_avx512(G, d, n - i * T < T ? n - i * T : T, it->NT * T, p + i * T, &v, acc);
    }
}

/* Scores and P x V are instantiated per codec kind and G, each with d, T and
 * NT constants for the common case (head_dim 64, a pair of 32-token tiles:
 * the loops over blocks, tiles and token groups unroll) and a general one. */
typedef void (*scores_fn)(int d, int T, int n, const kvq_attn_qi8 *q, const kvq_attn_itiles *it, float *s);
typedef void (*pv_fn)(int d, int T, int n, const float *p, const kvq_attn_itiles *it, float *acc);

#define VNNI_SCORES(V, G)                                                                                    \
    KVQ_TARGET_AVX512VNNI static void scores_##V##_##G(int d, int T, int n, const kvq_attn_qi8 *q,            \
                                                       const kvq_attn_itiles *it, float *s) {                \
        const int KIND = base_kind(V), VBMI = is_vbmi(V);                                                    \
        const int common = d == 64 && T == 32 && it->NT == 2;                                                \
        if (KIND >= KVQ_ITILE_ROT2) {                                                                        \
            if (common) scores_rot(KIND, VBMI, G, 64, 32, 2, n, q, it, s);                                   \
            else scores_rot(KIND, VBMI, G, d, T, it->NT, n, q, it, s);                                       \
        } else if (common) scores(KIND, G, 2, 32, 2, n, q, it, s);                                           \
        else scores(KIND, G, d / 32, T, it->NT, n, q, it, s);                                                \
    }
#define VNNI_PV(V, G)                                                                                        \
    KVQ_TARGET_AVX512VNNI static void pv_##V##_##G(int d, int T, int n, const float *p,                     \
                                                   const kvq_attn_itiles *it, float *acc) {                  \
        const int KIND = base_kind(V), VBMI = is_vbmi(V);                                                    \
        const int common = d == 64 && T == 32 && it->NT == 2;                                                \
        if (KIND == KVQ_ITILE_F16) {                                                                         \
            pv_f16(G, d, T, n, p, it, acc);                                                                  \
        } else if (KIND >= KVQ_ITILE_ROT2) {                                                                 \
            const int G1 = G < 4 ? G : 4, G2 = G - G1; /* pv_rot takes 4 heads at most */                   \
            if (common) {                                                                                    \
                pv_rot(KIND, VBMI, G1, 64, 32, 2, p, it, acc);                                               \
                if (G2) pv_rot(KIND, VBMI, G2, 64, 32, 2, p + G1 * 64, it, acc + G1 * 64);                   \
            } else {                                                                                         \
                pv_rot(KIND, VBMI, G1, d, T, it->NT, p, it, acc);                                            \
                if (G2) pv_rot(KIND, VBMI, G2, d, T, it->NT, p + G1 * T * it->NT, it, acc + (size_t)G1 * d); \
            }                                                                                                \
        } else if (common) pv(KIND, G, 64, 2, 32, 2, p, it, acc);                                            \
        else pv(KIND, G, d, d / 32, T, it->NT, p, it, acc);                                                  \
    }
#define VNNI_GS(F, KIND) F(KIND, 1) F(KIND, 2) F(KIND, 3) F(KIND, 4) F(KIND, 5) F(KIND, 6) F(KIND, 7) F(KIND, 8)
#define VNNI_FNS(KIND) VNNI_GS(VNNI_SCORES, KIND) VNNI_GS(VNNI_PV, KIND)
VNNI_FNS(0)
VNNI_FNS(1)
VNNI_FNS(2)
VNNI_FNS(3)
VNNI_FNS(4)
VNNI_FNS(5)
VNNI_FNS(6)
VNNI_FNS(7)
VNNI_FNS(8)
VNNI_GS(VNNI_PV, 9) /* f16 V rows: no K kind */
VNNI_FNS(10)        /* ROT3_VBMI */
VNNI_FNS(11)        /* ROT2_VBMI */
#define VNNI_ROW(F, KIND) {F##_##KIND##_1, F##_##KIND##_2, F##_##KIND##_3, F##_##KIND##_4, \
                           F##_##KIND##_5, F##_##KIND##_6, F##_##KIND##_7, F##_##KIND##_8}

KVQ_TARGET_AVX512VNNI void kvq_attn_vnni_avx512(int G, int d, int n, const kvq_attn_qi8 *q,
                                                const kvq_attn_itiles *t, float *m, float *l, float *acc) {
    _Static_assert(KVQ_ITILE_Q4_0 == 0 && KVQ_ITILE_Q8_0 == 1 && KVQ_ITILE_IQ4_NL == 2 && KVQ_ITILE_Q4_1 == 3 &&
                       KVQ_ITILE_Q5_0 == 4 && KVQ_ITILE_Q5_1 == 5 && KVQ_ITILE_ROT2 == 6 && KVQ_ITILE_ROT3 == 7 &&
                       KVQ_ITILE_ROT4 == 8 && KVQ_ITILE_F16 == 9 && KVQ_ITILE_COUNT == 10 && KVQ_ITILE_K_COUNT == 9,
                   "table order");
    _Static_assert(ROT3_VBMI == 10 && ROT2_VBMI == 11 && VNNI_VARIANTS == 12, "variant order");
    /* by variant; the scores of F16 (no K kind) are never called */
    static const scores_fn score_table[VNNI_VARIANTS][KVQ_ATTN_MAX_G] = {
        VNNI_ROW(scores, 0), VNNI_ROW(scores, 1),  VNNI_ROW(scores, 2),  VNNI_ROW(scores, 3),  VNNI_ROW(scores, 4),
        VNNI_ROW(scores, 5), VNNI_ROW(scores, 6),  VNNI_ROW(scores, 7),  VNNI_ROW(scores, 8),  {NULL},
        VNNI_ROW(scores, 10), VNNI_ROW(scores, 11)};
    static const pv_fn pv_table[VNNI_VARIANTS][KVQ_ATTN_MAX_G] = {
        VNNI_ROW(pv, 0), VNNI_ROW(pv, 1), VNNI_ROW(pv, 2),   VNNI_ROW(pv, 3),   VNNI_ROW(pv, 4),
        VNNI_ROW(pv, 5), VNNI_ROW(pv, 6), VNNI_ROW(pv, 7),   VNNI_ROW(pv, 8),   VNNI_ROW(pv, 9),
        VNNI_ROW(pv, 10), VNNI_ROW(pv, 11)};
    const int vbmi = kvq_cpu_has_vbmi();
    const int kk = vbmi ? vbmi_variant(t->k_kind) : t->k_kind, vk = vbmi ? vbmi_variant(t->v_kind) : t->v_kind;
    _Alignas(64) float s[KVQ_ATTN_MAX_G * KVQ_KV_MAX_TILE]; /* (G, NT T) */
    score_table[kk][G - 1](d, t->T, n, q, t, s);
    softmax_update(1, G, d, t->NT * t->T, s, m, l, acc);
    pv_table[vk][G - 1](d, t->T, n, s, t, acc);
}
#undef VNNI_ROW
#undef VNNI_FNS
#undef VNNI_GS
#undef VNNI_PV
#undef VNNI_SCORES

#endif
