/* decode_int_avx2.c — decode attention over the interleaved tiles
 * (tile_layout.c) in integers with AVX2: what decode_vnni.c does with
 * AVX512-VNNI, for CPUs without AVX-512. Without it every compressed tile
 * was decoded to float rows first and attention over a compressed cache ran
 * slower than over f16 (docs/PERF.md, "On CPUs without AVX-512").
 *
 * The tiles are read as they are: a 64-byte vector of the layout is two
 * 256-bit halves, 8 tokens each (K: dword lane = token, 4 dims) or 8 dims
 * each (V: dword lane = dim, 4 tokens). AVX2 has no vpdpbusd; vpmaddubsw
 * (u8 x s8, pairs added in s16) serves where its pairs cannot saturate:
 * the q4 / q5 kinds' small codes against 8-bit weights, the rotated
 * kinds' K centroids (kept to 6-7 bits: rotated.h KVQ_ROT_CODE_MAX) + an
 * offset as u8 against the 8-bit query (scores), their V centroids as s8
 * (|c| <= 127) against p x V scale rounded to as many u8 levels as keep
 * a pair inside s16 (P x V), and iq4_nl's V values as s8 against 8-bit p
 * (pv_bytes). q8_0's codes and iq4_nl's K span 0..255 as u8, so they are
 * widened to 16 bits by one unpack against zero per 16 bytes and
 * multiplied by a 16-bit weight with vpmaddwd: the query
 * (kvq_attn_qi8.w, ~15 bits per block) for scores, p x V scale rounded
 * to 15 bits per (head, block, run) for P x V. The unpacks keep 128-bit
 * lanes, so a vpmaddwd leaves two partial sums per token (K) or dim (V)
 * in adjacent dwords, and one vphaddd per 8 scores or 8 dims puts them in
 * order. Codes carry an offset (q4_0: 8, q5_0: 16, q8_0 and iq4_nl stored
 * + 128 as u8; q4_1 / q5_1: none, their min added in float; the rotated
 * kinds' K: 64 or 32, once per head; their V: none), corrected once per
 * block (scores) or per (head, block) (P x V) by -offset x the weights'
 * sum. f16 V rows (the K-only presets) run P x V in float (decode_avx2.c). */
#include <math.h>
#include <string.h>

#include "attn/attn_kernels.h"
#include "attn/softmax_avx2.h"
#include "codec/rotated.h"

#if KVQ_HAVE_X86
#include <immintrin.h>

/* Heads one scores or P x V pass keeps in registers (2 accumulators each);
 * larger groups take more passes over the same (L1-resident) tile. */
#define INT_PASS_G 4

/* The int32 sums' headroom, at the largest legal codes and weights: P x V
 * sums a run (<= KVQ_KV_MAX_TILE tokens) of 15-bit p times u8 codes per
 * dim (2.14e9 of 2.147e9 today); the 16-bit query's block sums and the
 * rotated kinds' whole-head sums of 8-bit queries are far inside. Raising
 * the tile or head limits must revisit these. */
_Static_assert((int64_t)KVQ_KV_MAX_TILE * 255 * 32767 <= INT32_MAX, "P x V int32 sums");
_Static_assert((int64_t)32 * 255 * 32385 + (int64_t)128 * 32 * 32385 <= INT32_MAX, "scores: 16-bit query block sums");
_Static_assert((int64_t)KVQ_MAX_HEAD_DIM * 127 * 127 <= INT32_MAX, "scores: rotated whole-head sums");
/* The rotated K's u8 codes (c + KVQ_ROT_CODE_MAX + 1) x 8-bit query in
 * vpmaddubsw's s16: one pair (4 bits), two pairs (2, 3 bits: mac_u8_pair). */
_Static_assert(2 * (2 * KVQ_ROT_CODE_MAX(4, 0) + 1) * 127 <= INT16_MAX, "scores: rotated 4-bit pairs");
_Static_assert(4 * (2 * KVQ_ROT_CODE_MAX(3, 0) + 1) * 127 <= INT16_MAX, "scores: rotated 3-bit pairs of pairs");
_Static_assert(KVQ_ROT_CODE_MAX(2, 0) == KVQ_ROT_CODE_MAX(3, 0), "scores: rotated 2-bit pairs of pairs");

KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE int32_t hsum8i(__m256i x) {
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(x), _mm256_extracti128_si256(x, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
    return _mm_cvtsi128_si32(s4);
}

/* Per 32-dim block: y = q x 127 / max|q|, q0 = round(y), q1 = round((y -
 * q0) x 254) (decode_vnni.c's rounding), w = 254 q0 + q1 (|w| <= 32385)
 * for the 16-bit path; q0 itself (q[0], off[0], scale, sum) for the
 * vpmaddubsw kinds. one_scale (the rotated kinds, whose sums span the
 * head): q0 alone, over the head's max, as VNNI's. */
KVQ_TARGET_AVX2 void kvq_attn_qi8_prepare_avx2(const float *q, int d, int code_off, int one_scale,
                                               kvq_attn_qi8 *out) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    float head_max = 0;
    out->off_all = 0;
    if (one_scale) {
        __m256 mx = _mm256_setzero_ps();
        for (int i = 0; i < d; i += 8) mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, _mm256_loadu_ps(q + i)));
        head_max = hmax8(mx);
    }
    for (int b = 0; b < d / 32; b++) {
        __m256 x[4], mx = _mm256_setzero_ps();
        for (int h = 0; h < 4; h++) {
            x[h] = _mm256_loadu_ps(q + 32 * b + 8 * h);
            mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, x[h]));
        }
        const float amax = one_scale ? head_max : hmax8(mx);
        const __m256 inv = _mm256_set1_ps(amax > 0 ? 127.0f / amax : 0.0f);
        __m256i sum = _mm256_setzero_si256(), sum0 = _mm256_setzero_si256();
        for (int h = 0; h < 4; h++) {
            const __m256 y = _mm256_mul_ps(x[h], inv);
            const __m256i q0 = _mm256_cvtps_epi32(y);
            sum0 = _mm256_add_epi32(sum0, q0);
            const __m256i q0w = _mm256_packs_epi32(q0, q0), q0b = _mm256_packs_epi16(q0w, q0w);
            /* bytes 0-3 of each lane hold q0's 8 values: dwords 0 and 4 */
            const __m256i q8 = _mm256_permutevar8x32_epi32(q0b, _mm256_setr_epi32(0, 4, 0, 0, 0, 0, 0, 0));
            _mm_storel_epi64((__m128i *)(void *)(out->q[0] + 32 * b + 8 * h), _mm256_castsi256_si128(q8));
            if (one_scale) continue;
            const __m256i q1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_sub_ps(y, _mm256_cvtepi32_ps(q0)), _mm256_set1_ps(254.0f)));
            const __m256i w = _mm256_add_epi32(_mm256_mullo_epi32(q0, _mm256_set1_epi32(254)), q1);
            sum = _mm256_add_epi32(sum, w);
            /* packs works within 128-bit lanes: words 0-3 then 8-11 hold w's 8 values */
            const __m256i p = _mm256_packs_epi32(w, w);
            _mm_storeu_si128((__m128i *)(out->w + 32 * b + 8 * h),
                             _mm256_castsi256_si128(_mm256_permute4x64_epi64(p, 0x08)));
        }
        const int32_t wsum = hsum8i(sum), sum8 = hsum8i(sum0);
        out->scale[b] = amax / 127.0f;
        out->sum[b] = out->scale[b] * (float)sum8;
        out->off[0][b] = -code_off * sum8;
        out->off_all += out->off[0][b];
        out->wscale[b] = amax / 127.0f / 254.0f;
        out->wsum[b] = out->wscale[b] * (float)wsum;
        out->w_off[b] = -code_off * wsum;
    }
}

/* ------------------------------------------------------------ primitives */

KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE __m256i ld256(const uint8_t *p) {
    return _mm256_loadu_si256((const __m256i *)(const void *)p);
}

/* Four int8 weights (4 bytes at p) in every 32-bit lane. */
KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE __m256i bcast4b(const int8_t *p) {
    int32_t x;
    memcpy(&x, p, 4);
    return _mm256_set1_epi32(x);
}

/* Four int16 weights (8 bytes at p) in every 64-bit lane. */
KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE __m256i bcast4w(const int16_t *p) {
    long long x;
    memcpy(&x, p, 8);
    return _mm256_set1_epi64x(x);
}

/* 16 fp16 values at p as floats (8 of them). */
KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE __m256 ld8h(const uint8_t *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p));
}

/* u8 codes widened to int16 within 128-bit lanes: lo takes bytes 0-7 of
 * each lane, hi bytes 8-15. */
typedef struct {
    __m256i lo, hi;
} wide;

KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE wide widen(__m256i x) {
    const __m256i z = _mm256_setzero_si256();
    return (wide){_mm256_unpacklo_epi8(x, z), _mm256_unpackhi_epi8(x, z)};
}

/* a[0], a[1] += the codes x w (4 weights repeated): two partial sums per
 * dword group of 4 codes. The empty asm pins each sum in its register:
 * integer adds reassociate, and GCC otherwise kept every product of an
 * unrolled block alive to add them as a tree, spilling most of them
 * (q4_0: 12.4 ns a token and kv head). */
KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE void mac(wide x, __m256i w, __m256i a[2]) {
    a[0] = _mm256_add_epi32(a[0], _mm256_madd_epi16(x.lo, w));
    a[1] = _mm256_add_epi32(a[1], _mm256_madd_epi16(x.hi, w));
    __asm__("" : "+x"(a[0]), "+x"(a[1]));
}

/* The partials of mac -> 8 sums in lane order (tokens of a K half, dims of
 * a V half). */
KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE __m256i fold(const __m256i a[2]) { return _mm256_hadd_epi32(a[0], a[1]); }

KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE __m256i srl16(__m256i v, int n) {
    return n ? _mm256_srli_epi16(v, n) : v;
}

/* Bit `from` of each byte of hi moved to bit 4 (|from - 4| <= 4), alone. */
KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE __m256i fifth_bit(__m256i hi, int from) {
    const __m256i v = from > 4 ? _mm256_srli_epi16(hi, from - 4) : from < 4 ? _mm256_slli_epi16(hi, 4 - from) : hi;
    return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}

/* u8 codes x0 (a K half: 8 tokens x 4 dims) against q's 4 dims and x1
 * against the next 4: vpmaddubsw's pair sums of both added in s16. */
KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE __m256i dot8_s16(__m256i x0, __m256i x1, const int8_t *q) {
    return _mm256_add_epi16(_mm256_maddubs_epi16(x0, bcast4b(q)), _mm256_maddubs_epi16(x1, bcast4b(q + 4)));
}

/* a16 += the s16 pair sums t, pinned as mac's sums are. */
KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE void acc16(__m256i *a16, __m256i t) {
    *a16 = _mm256_add_epi16(*a16, t);
    __asm__("" : "+x"(*a16));
}

/* a32 += the s16 pair sums a16 summed in pairs (one int32 per dword). */
KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE void flush16(__m256i *a32, __m256i *a16) {
    *a32 = _mm256_add_epi32(*a32, _mm256_madd_epi16(*a16, _mm256_set1_epi16(1)));
    *a16 = _mm256_setzero_si256();
}

/* The ggml kinds' parts, as decode_vnni.c: q5 store a fifth bit per code,
 * q4_1 / q5_1 a min per block. */
static inline int has_hi(int KIND) { return KIND == KVQ_ITILE_Q5_0 || KIND == KVQ_ITILE_Q5_1; }
static inline int has_min(int KIND) { return KIND == KVQ_ITILE_Q4_1 || KIND == KVQ_ITILE_Q5_1; }
static inline int bits_bytes(int KIND) { return KIND == KVQ_ITILE_Q8_0 ? 32 : has_hi(KIND) ? 20 : 16; }
static inline int block_bytes(int KIND) { return bits_bytes(KIND) + 2 + 2 * has_min(KIND); }
static inline int rot_bits(int KIND) { return KIND - KVQ_ITILE_ROT2 + 2; }
static inline int is_rot(int KIND) { return KIND >= KVQ_ITILE_ROT2 && KIND <= KVQ_ITILE_ROT4; }
/* nibbles through a 16-entry code table */
static inline int has_lut(int KIND) { return KIND == KVQ_ITILE_IQ4_NL || is_rot(KIND); }

/* The kinds whose codes are small (0..15, q5: 0..31): vpmaddubsw against
 * 8-bit weights cannot saturate, its s16 sums can be added a few times
 * before one vpmaddwd widens them, and each code needs no widening: about
 * half the operations of the 16-bit path. Their query and p are 8 bits
 * (decode_vnni.c's rounding and bounds). Of the others, the rotated kinds
 * (8-bit query, mac_u8) and iq4_nl's V (pv_bytes) take bytes too;
 * q8_0 and iq4_nl's K take 16 bits. */
static inline int bytes_path(int KIND) {
    return KIND == KVQ_ITILE_Q4_0 || KIND == KVQ_ITILE_Q5_0 || KIND == KVQ_ITILE_Q4_1 || KIND == KVQ_ITILE_Q5_1;
}

/* The offset a kind's codes carry on this path (V as well as K: q8_0's V
 * codes are flipped to u8 here). */
static inline int code_off(int KIND) {
    return KIND == KVQ_ITILE_Q4_0 ? 8 : KIND == KVQ_ITILE_Q5_0 ? 16 : has_min(KIND) ? 0 : 128;
}

/* Into L1 for the rotated kinds, L2 for the ggml ones (decode_vnni.c
 * prefetch_line: bound by instructions vs by bytes). */
KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE void prefetch_line(const int KIND, const uint8_t *p) {
    if (is_rot(KIND)) _mm_prefetch((const char *)p, _MM_HINT_T0);
    else _mm_prefetch((const char *)p, _MM_HINT_T1);
}

/* A 16-byte table in both lanes (vpshufb indexes within lanes); the
 * rotated kinds' first 16 bytes of kvq_attn_itiles.lut serve: their 3- and
 * 2-bit tables repeat the codes (decode.c itile_codes). */
KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE __m256i lane_lut(const uint8_t *t) {
    return _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)t));
}

/* The low (nib 0) or high nibbles of z, through lut where the kind has one. */
KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE __m256i nibbles(const int KIND, __m256i z, int nib, __m256i lut) {
    const __m256i c = _mm256_and_si256(nib ? _mm256_srli_epi16(z, 4) : z, _mm256_set1_epi8(0x0F));
    return has_lut(KIND) ? _mm256_shuffle_epi8(lut, c) : c;
}

/* Both nibbles of z as codes c[0], c[1]; q5: with their fifth bits, bits
 * from and from + 1 of hi's bytes (the K and V layouts alike). */
KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE void nibble_pair(const int KIND, __m256i z, __m256i hi, int from,
                                                          __m256i lut, __m256i c[2]) {
    for (int nib = 0; nib < 2; nib++) {
        c[nib] = nibbles(KIND, z, nib, lut);
        if (has_hi(KIND)) c[nib] = _mm256_or_si256(c[nib], fifth_bit(hi, from + nib));
    }
}

/* u8 codes of slot s of 3-bit triples v[0..2] (tile_layout.c rot3_walk;
 * decode_vnni.c rot3_slot without VBMI). */
KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE __m256i rot3_slot(int s, const __m256i v[3], __m256i lut) {
    __m256i x;
    if (s < 6) x = s % 2 ? _mm256_srli_epi16(v[s / 2], 3) : v[s / 2];
    else
        x = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v[s - 6], 6), _mm256_set1_epi8(0x03)),
                            _mm256_and_si256(_mm256_srli_epi16(v[2], s - 2), _mm256_set1_epi8(0x04)));
    return _mm256_shuffle_epi8(lut, _mm256_and_si256(x, _mm256_set1_epi8(7)));
}

/* u8 codes of the 2-bit fields k (bits 2k, 2k + 1) of z. */
KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE __m256i rot2_field(int k, __m256i z, __m256i lut) {
    return _mm256_shuffle_epi8(lut, _mm256_and_si256(srl16(z, 2 * k), _mm256_set1_epi8(0x03)));
}

/* A V table with its codes as s8 (iq4_nl's values; the rotated kinds'
 * centroid / unit, |c| <= 127: rotated.c int8_steps), so their sums need
 * no offset correction. */
KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE __m256i signed_lut(const uint8_t *t) {
    return _mm256_xor_si256(lane_lut(t), _mm256_set1_epi8((char)0x80));
}

/* The rotated kinds' K: the table's centroids (|c| <= KVQ_ROT_CODE_MAX)
 * moved to u8 by rot_k_off, vpmaddubsw's u8 side against the 8-bit query,
 * and the offset corrected once per head (rot_k_corr). 4 bits: c + 64 <=
 * 127, a pair of products <= 2 x 127 x 127 fits s16; 2 and 3 bits: c + 32
 * <= 63, so two slots' pairs add in s16 before the one vpmaddwd that
 * widens them (mac_u8_pair): per head and code vector 1.5 multiplies,
 * where the s8 centroids against |q| with q's signs on the codes (the
 * sign trick) took 2 and a vpsignb. */
static inline int rot_k_off(int KIND) { return KVQ_ROT_CODE_MAX(rot_bits(KIND), 0) + 1; }

KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE __m256i rot_k_lut(const int KIND, const uint8_t *t) {
    return _mm256_sub_epi8(lane_lut(t), _mm256_set1_epi8((char)(128 - rot_k_off(KIND))));
}

/* -rot_k_off x the head's int8 query summed (prepared as -128 x it). */
static inline int32_t rot_k_corr(const int KIND, const kvq_attn_qi8 *q) { return q->off_all / 128 * rot_k_off(KIND); }

/* *a += u8 codes x (a K half: 8 tokens x 4 dims) dotted with one head's
 * 8-bit query q for those 4 dims, one int32 per token. */
KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE void mac_u8(__m256i x, const int8_t *q, __m256i *a) {
    *a = _mm256_add_epi32(*a, _mm256_madd_epi16(_mm256_maddubs_epi16(x, bcast4b(q)), _mm256_set1_epi16(1)));
    __asm__("" : "+x"(*a));
}

/* mac_u8 of codes x0 against q's 4 dims and x1 against the next 4 (dot8_s16). */
KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE void mac_u8_pair(__m256i x0, __m256i x1, const int8_t *q, __m256i *a) {
    *a = _mm256_add_epi32(*a, _mm256_madd_epi16(dot8_s16(x0, x1, q), _mm256_set1_epi16(1)));
    __asm__("" : "+x"(*a));
}

/* ---------------------------------------------------------------- scores */

/* Bytes of a K group of 16 tokens, and of its codes before its scales. */
static inline size_t k_group_bytes(int KIND, int nb, int d) {
    return is_rot(KIND) ? 2 * (size_t)d * rot_bits(KIND) + 32 : (size_t)16 * nb * block_bytes(KIND);
}
static inline size_t k_group_codes(int KIND, int nb, int d) {
    return is_rot(KIND) ? 2 * (size_t)d * rot_bits(KIND) : (size_t)16 * nb * bits_bytes(KIND);
}

/* s (G, NT T) for heads g0.. g0 + G of q (G <= INT_PASS_G): scores of
 * tokens [0, n) of NT interleaved K tiles, -Inf past n. Per half group of
 * 8 tokens and block (the rotated kinds: the whole head, one scale), the
 * codes of each 64-byte vector's half are widened and multiplied with
 * every head's 4 weights for their dims. */
KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE void scores(const int KIND, const int G, int d, int T, int NT, int n,
                                                     const kvq_attn_qi8 *q, const kvq_attn_itiles *it, float *s,
                                                     int ST) {
    const int nb = d / 32, rot = is_rot(KIND);
    const size_t gb = k_group_bytes(KIND, nb, d), gc = k_group_codes(KIND, nb, d);
    const __m256i lut = rot ? rot_k_lut(KIND, it->lut[0]) : has_lut(KIND) ? lane_lut(it->lut[0]) : _mm256_setzero_si256();
    const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256 qs[INT_PASS_G];    /* rotated: the query's step x the codes' */
    int32_t corr[INT_PASS_G]; /* rotated: rot_k_corr */
#pragma GCC unroll 4
    for (int g = 0; g < G; g++) {
        qs[g] = _mm256_set1_ps(q[g].scale[0] * it->unit[0]);
        corr[g] = rot ? rot_k_corr(KIND, &q[g]) : 0;
    }
    for (int i = 0; i < NT; i++)
#pragma GCC unroll 2
        for (int h = 0; h < T / 16; h++) {
            const uint8_t *grp0 = it->k[i] + h * gb, *pg = it->k_next[i] ? it->k_next[i] + h * gb : NULL;
            if (pg)
                for (size_t o = 0; o < gb; o += 64) prefetch_line(KIND, pg + o);
#pragma GCC unroll 2
            for (int half = 0; half < 2; half++) {
                const uint8_t *grp = grp0 + 32 * half;
                __m256 sc[INT_PASS_G];
                __m256i a[INT_PASS_G][2];
#pragma GCC unroll 4
                for (int g = 0; g < G; g++) {
                    sc[g] = _mm256_setzero_ps();
                    a[g][0] = _mm256_set1_epi32(corr[g]);
                    a[g][1] = _mm256_setzero_si256();
                }
                if (KIND == KVQ_ITILE_ROT3) {
                    /* unrolled: as a loop (two groups at d 64) its accumulators went through the stack */
#pragma GCC unroll 2
                    for (int c = 0; c < d / 32; c++) { /* slot k: dims 32c + 4k.. */
                        const __m256i v[3] = {ld256(grp + 64 * (size_t)(3 * c)), ld256(grp + 64 * (size_t)(3 * c + 1)),
                                              ld256(grp + 64 * (size_t)(3 * c + 2))};
#pragma GCC unroll 4
                        for (int k = 0; k < 8; k += 2) {
                            const __m256i x0 = rot3_slot(k, v, lut), x1 = rot3_slot(k + 1, v, lut);
#pragma GCC unroll 4
                            for (int g = 0; g < G; g++) mac_u8_pair(x0, x1, q[g].q[0] + 32 * c + 4 * k, &a[g][0]);
                        }
                    }
                } else if (KIND == KVQ_ITILE_ROT2) {
                    for (int m = 0; m < d / 16; m++) { /* field k: dims 16m + 4k.. */
                        const __m256i z = ld256(grp + 64 * (size_t)m);
#pragma GCC unroll 2
                        for (int k = 0; k < 4; k += 2) {
                            const __m256i x0 = rot2_field(k, z, lut), x1 = rot2_field(k + 1, z, lut);
#pragma GCC unroll 4
                            for (int g = 0; g < G; g++) mac_u8_pair(x0, x1, q[g].q[0] + 16 * m + 4 * k, &a[g][0]);
                        }
                    }
                } else if (KIND == KVQ_ITILE_ROT4) {
                    for (int m = 0; m < d / 8; m++) { /* low nibbles dims 8m.., high 8m + 4.. */
                        const __m256i z = ld256(grp + 64 * (size_t)m);
#pragma GCC unroll 2
                        for (int nib = 0; nib < 2; nib++) {
                            const __m256i x = nibbles(KIND, z, nib, lut);
#pragma GCC unroll 4
                            for (int g = 0; g < G; g++) mac_u8(x, q[g].q[0] + 8 * m + 4 * nib, &a[g][0]);
                        }
                    }
                } else {
#pragma GCC unroll 2
                    for (int b = 0; b < nb; b++) {
                        if (KIND == KVQ_ITILE_Q8_0) {
#pragma GCC unroll 8
                            for (int m = 0; m < 8; m++) { /* dims 32b + 4m.. */
                                const wide x = widen(ld256(grp + (size_t)(8 * b + m) * 64));
#pragma GCC unroll 4
                                for (int g = 0; g < G; g++) mac(x, bcast4w(q[g].w + 32 * b + 4 * m), a[g]);
                            }
                        } else if (bytes_path(KIND)) {
                            /* q5: bit k of byte 4t + j of the block's fifth-bit vector: dim 4k + j */
                            const __m256i hi = has_hi(KIND) ? ld256(grp + (size_t)16 * nb * 16 + 64 * (size_t)b)
                                                            : _mm256_setzero_si256();
                            __m256i a16[INT_PASS_G];
#pragma GCC unroll 4
                            for (int g = 0; g < G; g++) a16[g] = _mm256_setzero_si256();
#pragma GCC unroll 4
                            for (int m = 0; m < 4; m++) { /* low nibbles dims 32b + 8m.., high + 4 */
                                __m256i c[2];
                                nibble_pair(KIND, ld256(grp + (size_t)(4 * b + m) * 64), hi, 2 * m, lut, c);
#pragma GCC unroll 4
                                for (int g = 0; g < G; g++) acc16(&a16[g], dot8_s16(c[0], c[1], q[g].q[0] + 32 * b + 8 * m));
                                /* |sum| per line <= 2 x 2 x 15 x 127 (q5: 31 x 127): four lines fit s16, q5 two */
                                if (m == 3 || (has_hi(KIND) && m == 1))
#pragma GCC unroll 4
                                    for (int g = 0; g < G; g++) flush16(&a[g][0], &a16[g]);
                            }
                        } else { /* iq4_nl: its values + 128 span 0..255 as u8, so 16 bits */
#pragma GCC unroll 4
                            for (int m = 0; m < 4; m++) { /* low nibbles dims 32b + 8m.., high + 4 */
                                __m256i c[2];
                                const __m256i z = ld256(grp + (size_t)(4 * b + m) * 64);
                                nibble_pair(KIND, z, _mm256_setzero_si256(), 0, lut, c);
#pragma GCC unroll 2
                                for (int nib = 0; nib < 2; nib++) {
                                    const wide x = widen(c[nib]);
#pragma GCC unroll 4
                                    for (int g = 0; g < G; g++) mac(x, bcast4w(q[g].w + 32 * b + 8 * m + 4 * nib), a[g]);
                                }
                            }
                        }
                        /* block b's sums to floats: (sum + offset) x d x the query's step (+ m x sum w) */
                        const __m256 dk = ld8h(grp0 + gc + 32 * b + 16 * half);
                        const __m256 mk = has_min(KIND) ? ld8h(grp0 + gc + 32 * (size_t)(nb + b) + 16 * half)
                                                        : _mm256_setzero_ps();
#pragma GCC unroll 4
                        for (int g = 0; g < G; g++) {
                            /* the byte path's sums are in token order in a[g][0] already */
                            const __m256i t = bytes_path(KIND) ? _mm256_add_epi32(a[g][0], _mm256_set1_epi32(q[g].off[0][b]))
                                                               : _mm256_add_epi32(fold(a[g]), _mm256_set1_epi32(q[g].w_off[b]));
                            const float step = bytes_path(KIND) ? q[g].scale[b] : q[g].wscale[b];
                            sc[g] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), _mm256_mul_ps(dk, _mm256_set1_ps(step)), sc[g]);
                            if (has_min(KIND))
                                sc[g] = _mm256_fmadd_ps(mk, _mm256_set1_ps(bytes_path(KIND) ? q[g].sum[b] : q[g].wsum[b]), sc[g]);
                            a[g][0] = a[g][1] = _mm256_setzero_si256();
                        }
                    }
                }
                if (rot) {
                    const __m256 dk = ld8h(grp0 + gc + 16 * half);
#pragma GCC unroll 4
                    for (int g = 0; g < G; g++) /* in token order already */
                        sc[g] = _mm256_mul_ps(_mm256_cvtepi32_ps(a[g][0]), _mm256_mul_ps(dk, qs[g]));
                }
                const int valid = n - i * T - 16 * h - 8 * half;
                const __m256 keep = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(valid), iota));
#pragma GCC unroll 4
                for (int g = 0; g < G; g++)
                    _mm256_store_ps(s + g * ST + i * T + 16 * h + 8 * half,
                                    _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), sc[g], keep));
            }
        }
}

/* ------------------------------------------------------------------ P x V */

/* x (np) = p (np) x the tokens' scales ds (np), rounded to int16 codes
 * (levels 32767 of the largest magnitude) at out: returns the step and
 * sets *sum to the codes' sum. */
KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE float round_p16(const float *p, const float *ds, int np, int16_t *out,
                                                         int32_t *sum) {
    _Alignas(32) float x[KVQ_KV_MAX_TILE];
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 mx = _mm256_setzero_ps();
    for (int t = 0; t < np; t += 8) {
        const __m256 xt = _mm256_mul_ps(_mm256_load_ps(p + t), _mm256_load_ps(ds + t));
        _mm256_store_ps(x + t, xt);
        mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, xt));
    }
    const float amax = hmax8(mx);
    const __m256 inv = _mm256_set1_ps(amax > 0 ? 32767.0f / amax : 0.0f);
    __m256i acc = _mm256_setzero_si256();
    for (int t = 0; t < np; t += 16) {
        const __m256i c0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_load_ps(x + t), inv));
        const __m256i c1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_load_ps(x + t + 8), inv));
        acc = _mm256_add_epi32(acc, _mm256_add_epi32(c0, c1));
        /* packs within lanes: 64-bit groups c0 lo, c1 lo, c0 hi, c1 hi */
        _mm256_storeu_si256((__m256i *)(void *)(out + t), _mm256_permute4x64_epi64(_mm256_packs_epi32(c0, c1), 0xD8));
    }
    *sum = hsum8i(acc);
    return amax / 32767.0f;
}

/* u8 codes of column col (8 dims: 8 col..) of token quad j of a V tile:
 * 32 bytes, byte 4 l + i = code(4j + i, 8 col + l). Layouts: tile_layout.c.
 * q8_0 only: the byte kinds take two columns at once (v_column_pair). */
KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE __m256i v_column(const uint8_t *vt, int d, int j, int col) {
    /* dims 16c.. at 64 (j 2nb + c): s8 codes, flipped to u8 */
    return _mm256_xor_si256(ld256(vt + ((size_t)j * (d / 16) + col / 2) * 64 + 32 * (col % 2)),
                            _mm256_set1_epi8((char)0x80));
}

/* The byte kinds' codes of columns col and col + 2 (col % 4 < 2) of token
 * quad j, as v_column's, into c[0] and c[1]: in every layout but q8_0's
 * the two share their bytes (the other nibble, field or slot), so they are
 * loaded once, and the pass over them shares the p broadcasts (same block).
 * SUB: col / 2 % 4, a constant where it picks rot2's field or rot3's slot
 * (pv_bytes). */
KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE void v_column_pair(const int KIND, const uint8_t *vt, int d, int T, int j,
                                                            int col, const int SUB, __m256i lut, __m256i c[2]) {
    const int nb = d / 32, half = col % 2;
    if (KIND == KVQ_ITILE_ROT2) { /* per quad j and 64 dims c, bits 2k.. of byte 4l + i: dim 64c + 16k + l */
        const __m256i z = ld256(vt + (size_t)j * d + 64 * (size_t)(col / 8) + 32 * half);
        for (int k = 0; k < 2; k++) c[k] = rot2_field(SUB + k, z, lut);
        return;
    }
    if (KIND == KVQ_ITILE_ROT3) { /* per octet o and 64 dims c, slot 4 (j % 2) + k: dim 64c + 16k + l */
        const uint8_t *at = vt + (size_t)(j / 2) * 3 * d + 64 * 3 * (size_t)(col / 8) + 32 * half;
        const __m256i v[3] = {ld256(at), ld256(at + 64), ld256(at + 128)};
        for (int k = 0; k < 2; k++) c[k] = rot3_slot(4 * (j % 2) + SUB + k, v, lut);
        return;
    }
    /* q4_0's layout: block b at 64 (j nb + b), low nibbles dims 32b + l, high 32b + 16 + l */
    const int b = col / 4;
    /* q5: per 16 tokens o and block b, bit 2 (j % 4) + nib of byte 4l + i */
    const __m256i hi = has_hi(KIND) ? ld256(vt + (size_t)T * nb * 16 + 64 * ((size_t)(j / 4) * nb + b) + 32 * half)
                                    : _mm256_setzero_si256();
    nibble_pair(KIND, ld256(vt + ((size_t)j * nb + b) * 64 + 32 * half), hi, 2 * (j % 4), lut, c);
}

/* Bytes of a V tile's codes (before its scales). */
static inline size_t v_codes(int KIND, int d, int T) {
    return is_rot(KIND) ? (size_t)T * d * rot_bits(KIND) / 8 : (size_t)T * (d / 32) * bits_bytes(KIND);
}

/* x (np) = p (np) x ds (np) rounded to 8 bits at out (s8 codes; U8: u8,
 * for x >= 0), levels steps of the largest magnitude (<= 127, U8 255):
 * returns the step and sets *sum to the codes' sum. */
KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE float round_p8(const float *p, const float *ds, int np, float levels,
                                                        const int U8, int8_t *out, int32_t *sum) {
    _Alignas(32) float x[KVQ_KV_MAX_TILE];
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 mx = _mm256_setzero_ps();
    for (int t = 0; t < np; t += 8) {
        const __m256 xt = _mm256_mul_ps(_mm256_load_ps(p + t), _mm256_load_ps(ds + t));
        _mm256_store_ps(x + t, xt);
        mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, xt));
    }
    const float amax = hmax8(mx);
    const __m256 inv = _mm256_set1_ps(amax > 0 ? levels / amax : 0.0f);
    /* packs work within 128-bit lanes: dword k of the packed vector holds
     * codes 4 (k / 2).. of vector k % 4 ... this puts them in order */
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    __m256i acc = _mm256_setzero_si256();
    for (int t = 0; t < np; t += 16) {
        const __m256i c0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_load_ps(x + t), inv));
        const __m256i c1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_load_ps(x + t + 8), inv));
        acc = _mm256_add_epi32(acc, _mm256_add_epi32(c0, c1));
        const __m256i w = _mm256_packs_epi32(c0, c1);
        const __m256i b = U8 ? _mm256_packus_epi16(w, w) : _mm256_packs_epi16(w, w);
        _mm_storeu_si128((__m128i *)(void *)(out + t), _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(b, order)));
    }
    *sum = hsum8i(acc);
    return amax / levels;
}

/* The levels of the rotated kinds' p x V scale (centroids as s8 against
 * u8 p): vpmaddubsw's pair must fit s16, so 32767 / (2 max |c|): 136 /
 * 186 / 147 for 2 / 3 / 4 bits (their largest codes 120 / 88 / 111;
 * VNNI: 255, vpdpbusd adds in int32). */
static inline float rot_p_levels(int code_max) {
    const float levels = floorf(32767.0f / (float)(2 * (code_max > 0 ? code_max : 1)));
    return levels < 255.0f ? levels : 255.0f;
}

/* pv for the kinds whose V codes meet p in bytes (decode_vnni.c's
 * arithmetic): q4_0 / q5_0 codes (u8) against p ds as s8 (offset
 * corrected); q4_1 / q5_1 codes centred by 8 / 16 (s8) against p d as u8,
 * plus sum p (m + off d) per (head, block) in float; the table kinds'
 * values as s8 against p |d| as u8, no offset: the rotated kinds' per
 * (head, run) (their rows' scales are >= 0: every index has its
 * coordinate's sign, rotated.h), iq4_nl's per (head, block) with each
 * block scale's sign put on its codes (ggml's iq4_nl scales take either
 * sign): VNNI's integers, its s8 p d against u8 codes - 128. Per pair of
 * columns of 8 dims sharing their code bytes (v_column_pair) and token
 * quad, one p broadcast and two vpmaddubsw per head, their s16 sums
 * widened every 8 quads (q5: 4; table kinds: every quad). In pairs: -10
 * to -13% of the kernel's instructions for the ggml kinds, -5 to -7% for
 * the rotated ones (callgrind, G 3, d 64). */
KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE void pv_bytes(const int KIND, const int G, int d, int T, int NT,
                                                       const float *p, int ST, const kvq_attn_itiles *it, float *acc) {
    const int nb = d / 32, rot = is_rot(KIND), nsc = rot ? 1 : nb; /* scale groups: blocks, or the row */
    const int MIN = has_min(KIND), LUT = has_lut(KIND), SGN = KIND == KVQ_ITILE_IQ4_NL;
    const int U8 = MIN || LUT, off = LUT ? 0 : has_hi(KIND) ? 16 : 8;
    /* |sum| per quad <= 2 x 31 x 127 (q5), 2 x 255 x 16 (q5_1); table kinds: one quad fills s16 (2 x 127 x 127) */
    const int N = LUT ? 1 : has_hi(KIND) ? 4 : 8;
    /* iq4_nl: 127, VNNI's integers (its s8 p x d against codes - 128) */
    const float levels = rot ? rot_p_levels(it->code_max[1]) : U8 && !SGN ? 255.0f : 127.0f;
    const size_t scales = v_codes(KIND, d, T);
    /* the tokens' V scales ds (nsc, ST) (SGN: their magnitudes, and their
     * signs sg as +-1 bytes) and m + off d ms (nb, ST) */
    _Alignas(32) float ds[KVQ_MAX_HEAD_DIM / 32 * KVQ_KV_MAX_TILE], ms[KVQ_MAX_HEAD_DIM / 32 * KVQ_KV_MAX_TILE];
    _Alignas(32) int8_t sg[KVQ_MAX_HEAD_DIM / 32 * KVQ_KV_MAX_TILE];
    for (int b = 0; b < nsc; b++)
        for (int i = 0; i < NT; i++)
            for (int t = 0; t < T; t += 8) {
                const uint8_t *sc = it->v[i] + scales + 2 * ((size_t)b * T + t);
                __m256 dv = ld8h(sc);
                if (SGN) {
                    /* an fp16's sign bit, shifted across its word: -1 or 0, | 1 */
                    const __m128i h = _mm_loadu_si128((const __m128i *)(const void *)sc);
                    const __m128i pm1 = _mm_or_si128(_mm_srai_epi16(h, 15), _mm_set1_epi16(1));
                    _mm_storel_epi64((__m128i *)(void *)(sg + b * ST + i * T + t), _mm_packs_epi16(pm1, pm1));
                    dv = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), dv);
                }
                _mm256_store_ps(ds + b * ST + i * T + t, dv);
                if (MIN)
                    _mm256_store_ps(ms + b * ST + i * T + t,
                                    _mm256_fmadd_ps(dv, _mm256_set1_ps((float)off), ld8h(sc + 2 * (size_t)nb * T)));
            }
    /* per (head, group) at g nsc + b: p ds rounded (pq), the step, the
     * offset correction, and sum p (m + off d) (the mins' share, in float) */
    _Alignas(32) int8_t pq[INT_PASS_G * KVQ_MAX_HEAD_DIM / 32 * KVQ_KV_MAX_TILE];
    float sp[INT_PASS_G * KVQ_MAX_HEAD_DIM / 32], pm[INT_PASS_G * KVQ_MAX_HEAD_DIM / 32];
    int32_t corr[INT_PASS_G * KVQ_MAX_HEAD_DIM / 32];
    for (int g = 0; g < G; g++)
        for (int b = 0; b < nsc; b++) {
            const int k = g * nsc + b;
            int32_t sum;
            sp[k] = round_p8(p + g * ST, ds + b * ST, ST, levels, U8, pq + (size_t)k * ST, &sum) *
                    (rot ? it->unit[1] : 1.0f);
            corr[k] = U8 ? 0 : -off * sum; /* U8: codes centred, or none */
            pm[k] = 0;
            if (MIN) {
                __m256 v = _mm256_setzero_ps();
                for (int t = 0; t < ST; t += 8)
                    v = _mm256_fmadd_ps(_mm256_load_ps(p + g * ST + t), _mm256_load_ps(ms + b * ST + t), v);
                pm[k] = hsum8(v);
            }
        }
    const __m256i lut = LUT ? signed_lut(it->lut[1]) : _mm256_setzero_si256();
    /* the next tiles' lines, spread over the column pairs' passes (a burst
     * of a whole tile's prefetches would stall: decode.c PREFETCH_TILES) */
    const size_t v_lines = (scales + 2 * (size_t)T * nsc * (1 + MIN) + 63) / 64;
    const size_t per_pass = (v_lines + (size_t)d / 16 - 1) / ((size_t)d / 16);
    /* rot2 / rot3 take the pairs with field or slot SUB = col / 2 % 4 = 0,
     * then those with 2, so that SUB is a constant: as a variable it put
     * rot3's three code vectors on the stack to index them (turbo3: 2 stores
     * and 3 loads a token more). The pairs are independent: the same sums. */
    const int SPLIT = KIND == KVQ_ITILE_ROT2 || KIND == KVQ_ITILE_ROT3;
#pragma GCC unroll 2
    for (int su = 0; su <= SPLIT; su++)
    for (int n = 0; n < (SPLIT ? d / 32 : d / 16); n++) {
        const int pair = SPLIT ? 4 * (n / 2) + 2 * su + n % 2 : n;
        const int col = pair / 2 * 4 + pair % 2, b = rot ? 0 : col / 4; /* and col + 2 */
        const int SUB = SPLIT ? 2 * su : 0;
        __m256i a16[INT_PASS_G][2], a32[INT_PASS_G][2];
#pragma GCC unroll 4
        for (int g = 0; g < G; g++) a16[g][0] = a16[g][1] = a32[g][0] = a32[g][1] = _mm256_setzero_si256();
        for (int i = 0; i < NT; i++) {
            const uint8_t *vt = it->v[i], *pf = it->v_next[i];
            const int8_t *pqi = pq + (size_t)i * T;
            if (pf)
                for (size_t line = pair * per_pass; line < (pair + 1) * per_pass && line < v_lines; line++)
                    prefetch_line(KIND, pf + 64 * line);
#pragma GCC unroll 8
            for (int j = 0; j < T / 4; j++) {
                __m256i c[2];
                v_column_pair(KIND, vt, d, T, j, col, SUB, lut, c);
                const __m256i sign = SGN ? bcast4b(sg + (size_t)b * ST + i * T + 4 * j) : _mm256_setzero_si256();
                for (int h = 0; h < 2; h++) {
                    if (MIN) c[h] = _mm256_sub_epi8(c[h], _mm256_set1_epi8((char)off));
                    if (SGN) c[h] = _mm256_sign_epi8(c[h], sign);
                }
#pragma GCC unroll 4
                for (int g = 0; g < G; g++) {
                    const __m256i pb = bcast4b(pqi + (size_t)(g * nsc + b) * ST + 4 * j);
                    for (int h = 0; h < 2; h++) {
                        const __m256i t = U8 ? _mm256_maddubs_epi16(pb, c[h]) : _mm256_maddubs_epi16(c[h], pb);
                        if (N == 1) {
                            a32[g][h] = _mm256_add_epi32(a32[g][h], _mm256_madd_epi16(t, _mm256_set1_epi16(1)));
                            __asm__("" : "+x"(a32[g][h])); /* mac's reason */
                        } else {
                            acc16(&a16[g][h], t);
                        }
                    }
                }
                if (N > 1 && ((j + 1) % N == 0 || j == T / 4 - 1))
#pragma GCC unroll 4
                    for (int g = 0; g < G; g++)
                        for (int h = 0; h < 2; h++) flush16(&a32[g][h], &a16[g][h]);
            }
        }
#pragma GCC unroll 4
        for (int g = 0; g < G; g++) {
            const int k = g * nsc + b;
            for (int h = 0; h < 2; h++) {
                float *dst = acc + (size_t)g * d + 8 * (col + 2 * h);
                const __m256i t = _mm256_add_epi32(a32[g][h], _mm256_set1_epi32(corr[k]));
                __m256 base = _mm256_loadu_ps(dst);
                if (MIN) base = _mm256_add_ps(base, _mm256_set1_ps(pm[k]));
                _mm256_storeu_ps(dst, _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), _mm256_set1_ps(sp[k]), base));
            }
        }
    }
}

/* acc (G, d) += p (G, ST) x NT V tiles for heads g0.. of a pass (G <=
 * INT_PASS_G; p and acc already offset). q8_0: per (head, block) p x V
 * scale is rounded to int16 over the run (p x d at 129 u8 levels against
 * its s8 codes would cost its precision: VNNI keeps 255); per column of 8
 * dims the codes of every token quad are widened once for all heads. */
KVQ_TARGET_AVX2 static KVQ_ALWAYS_INLINE void pv(const int KIND, const int G, int d, int T, int NT, const float *p,
                                                 int ST, const kvq_attn_itiles *it, float *acc) {
    if (KIND != KVQ_ITILE_Q8_0) {
        pv_bytes(KIND, G, d, T, NT, p, ST, it, acc);
        return;
    }
    const int nb = d / 32;
    const size_t scales = v_codes(KIND, d, T);
    _Alignas(32) float ds[KVQ_MAX_HEAD_DIM / 32 * KVQ_KV_MAX_TILE]; /* the tokens' V scales (nb, ST) */
    for (int b = 0; b < nb; b++)
        for (int i = 0; i < NT; i++)
            for (int t = 0; t < T; t += 8)
                _mm256_store_ps(ds + b * ST + i * T + t, ld8h(it->v[i] + scales + 2 * ((size_t)b * T + t)));
    /* per (head, block) at g nb + b: p ds rounded (pq), the step and the
     * offset correction */
    _Alignas(32) int16_t pq[INT_PASS_G * KVQ_MAX_HEAD_DIM / 32 * KVQ_KV_MAX_TILE];
    float sp[INT_PASS_G * KVQ_MAX_HEAD_DIM / 32];
    int32_t corr[INT_PASS_G * KVQ_MAX_HEAD_DIM / 32];
    for (int g = 0; g < G; g++)
        for (int b = 0; b < nb; b++) {
            const int k = g * nb + b;
            int32_t sum;
            sp[k] = round_p16(p + g * ST, ds + b * ST, ST, pq + (size_t)k * ST, &sum);
            corr[k] = -code_off(KIND) * sum;
        }
    const size_t v_lines = (scales + 2 * (size_t)T * nb + 63) / 64;
    const size_t per_col = (v_lines + (size_t)d / 8 - 1) / ((size_t)d / 8);
    for (int col = 0; col < d / 8; col++) {
        const int b = col / 4;
        __m256i a[INT_PASS_G][2];
#pragma GCC unroll 4
        for (int g = 0; g < G; g++) a[g][0] = a[g][1] = _mm256_setzero_si256();
        for (int i = 0; i < NT; i++) {
            const uint8_t *vt = it->v[i], *pf = it->v_next[i];
            const int16_t *pqi = pq + (size_t)i * T;
            if (pf)
                for (size_t line = col * per_col; line < (col + 1) * per_col && line < v_lines; line++)
                    prefetch_line(KIND, pf + 64 * line);
#pragma GCC unroll 8
            for (int j = 0; j < T / 4; j++) {
                const wide x = widen(v_column(vt, d, j, col));
#pragma GCC unroll 4
                for (int g = 0; g < G; g++) mac(x, bcast4w(pqi + (size_t)(g * nb + b) * ST + 4 * j), a[g]);
            }
        }
#pragma GCC unroll 4
        for (int g = 0; g < G; g++) {
            float *dst = acc + (size_t)g * d + 8 * col;
            const __m256i t = _mm256_add_epi32(fold(a[g]), _mm256_set1_epi32(corr[g * nb + b]));
            _mm256_storeu_ps(dst, _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), _mm256_set1_ps(sp[g * nb + b]), _mm256_loadu_ps(dst)));
        }
    }
}

/* acc (G, d) += p (G, NT T) x the first n rows of NT tiles of f16 V rows. */
static void pv_f16(int G, int d, int T, int n, const float *p, const kvq_attn_itiles *it, float *acc) {
    for (int i = 0; i < it->NT && n > i * T; i++)
        kvq_attn_rows_pv_f16_avx2(G, d, n - i * T < T ? n - i * T : T, it->NT * T, p + i * T,
                                  (const uint16_t *)(const void *)it->v[i], acc);
}

/* ----------------------------------------------------------- dispatch */

/* One pass of at most INT_PASS_G heads, instantiated per kind and G, with
 * d, T and NT constants for the common case (head_dim 64, two 32-token
 * tiles) and a general one. */
typedef void (*scores_fn)(int d, int T, int NT, int n, const kvq_attn_qi8 *q, const kvq_attn_itiles *it, float *s,
                          int ST);
typedef void (*pv_fn)(int d, int T, int NT, const float *p, int ST, const kvq_attn_itiles *it, float *acc);

#define INT_SCORES(KIND, G)                                                                                  \
    KVQ_TARGET_AVX2 static void scores_##KIND##_##G(int d, int T, int NT, int n, const kvq_attn_qi8 *q,      \
                                                    const kvq_attn_itiles *it, float *s, int ST) {           \
        if (d == 64 && T == 32 && NT == 2) scores(KIND, G, 64, 32, 2, n, q, it, s, 64);                      \
        else scores(KIND, G, d, T, NT, n, q, it, s, ST);                                                     \
    }
#define INT_PV(KIND, G)                                                                                      \
    KVQ_TARGET_AVX2 static void pv_##KIND##_##G(int d, int T, int NT, const float *p, int ST,               \
                                                const kvq_attn_itiles *it, float *acc) {                     \
        if (d == 64 && T == 32 && NT == 2) pv(KIND, G, 64, 32, 2, p, 64, it, acc);                           \
        else pv(KIND, G, d, T, NT, p, ST, it, acc);                                                          \
    }
#define INT_GS(F, KIND) F(KIND, 1) F(KIND, 2) F(KIND, 3) F(KIND, 4)
#define INT_FNS(KIND) INT_GS(INT_SCORES, KIND) INT_GS(INT_PV, KIND)
INT_FNS(0)
INT_FNS(1)
INT_FNS(2)
INT_FNS(3)
INT_FNS(4)
INT_FNS(5)
INT_FNS(6)
INT_FNS(7)
INT_FNS(8)
#define INT_ROW(F, KIND) {F##_##KIND##_1, F##_##KIND##_2, F##_##KIND##_3, F##_##KIND##_4}

KVQ_TARGET_AVX2 void kvq_attn_int_avx2(int G, int d, int n, const kvq_attn_qi8 *q, const kvq_attn_itiles *t,
                                       float *m, float *l, float *acc) {
    _Static_assert(KVQ_ITILE_Q4_0 == 0 && KVQ_ITILE_Q8_0 == 1 && KVQ_ITILE_IQ4_NL == 2 && KVQ_ITILE_Q4_1 == 3 &&
                       KVQ_ITILE_Q5_0 == 4 && KVQ_ITILE_Q5_1 == 5 && KVQ_ITILE_ROT2 == 6 && KVQ_ITILE_ROT3 == 7 &&
                       KVQ_ITILE_ROT4 == 8 && KVQ_ITILE_K_COUNT == 9,
                   "table order");
    static const scores_fn score_table[KVQ_ITILE_K_COUNT][INT_PASS_G] = {
        INT_ROW(scores, 0), INT_ROW(scores, 1), INT_ROW(scores, 2), INT_ROW(scores, 3), INT_ROW(scores, 4),
        INT_ROW(scores, 5), INT_ROW(scores, 6), INT_ROW(scores, 7), INT_ROW(scores, 8)};
    static const pv_fn pv_table[KVQ_ITILE_K_COUNT][INT_PASS_G] = {
        INT_ROW(pv, 0), INT_ROW(pv, 1), INT_ROW(pv, 2), INT_ROW(pv, 3), INT_ROW(pv, 4),
        INT_ROW(pv, 5), INT_ROW(pv, 6), INT_ROW(pv, 7), INT_ROW(pv, 8)};
    const int ST = t->NT * t->T;
    _Alignas(32) float s[KVQ_ATTN_MAX_G * KVQ_KV_MAX_TILE]; /* (G, ST) */
    for (int g0 = 0; g0 < G; g0 += INT_PASS_G) {
        const int gn = G - g0 < INT_PASS_G ? G - g0 : INT_PASS_G;
        score_table[t->k_kind][gn - 1](d, t->T, t->NT, n, q + g0, t, s + g0 * ST, ST);
    }
    softmax_update_avx2(1, G, d, ST, s, m, l, acc);
    if (t->v_kind == KVQ_ITILE_F16) {
        pv_f16(G, d, t->T, n, s, t, acc);
        return;
    }
    for (int g0 = 0; g0 < G; g0 += INT_PASS_G) {
        const int gn = G - g0 < INT_PASS_G ? G - g0 : INT_PASS_G;
        pv_table[t->v_kind][gn - 1](d, t->T, t->NT, s + g0 * ST, ST, t, acc + (size_t)g0 * d);
    }
}
#undef INT_ROW
#undef INT_FNS
#undef INT_GS
#undef INT_PV
#undef INT_SCORES

#endif
