/* attn_proto.c — measured prototype of a decode-attention kernel over
 * token-lane interleaved tiles with AVX512-VNNI (`make bench-attn-proto`;
 * docs/ATTN_PROTO.md has the layout, op counts and results).
 *
 * Compared, at head_dim 64 and G = 3 query heads per KV head:
 *   ref     scalar float64 attention over the decoded rows (exact softmax);
 *   row     libkvq's kvq_attn_fused_avx512 over the codec's ggml rows (the
 *           real kernel, linked);
 *   vnni-a  interleaved K tile, scores with vpdpbusd; P x V with float FMAs
 *           over the ggml V rows (row layout kept for V);
 *   vnni-b  interleaved K and V tiles, both products with vpdpbusd: each V
 *           token's block scale folded into p, p quantized to s8 per
 *           (head, block, tile);
 *   -bq     plus the query's int8 residual (a second K product);
 *   -bqp    plus p's residual too (a second P x V product);
 *   -bu/bqu q8_0 only: p as the u8 operand and V codes as plain s8 (q8_0
 *           scales are >= 0), no offset correction.
 * For each: ns/token with one tile repeated (L1-resident) and streaming over
 * 90 caches (30 layers x 3 KV heads, SmolLM2-135M) of 32768 tokens, on 1 and
 * 2 threads (tokens split), bytes/token, GB/s, and the relative error of the
 * output against ref over random inputs (scores ~ N(0, sigma), 4096 tokens).
 * Usage: build/attn-proto [reps] (min and median of reps timings). */
#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attn/attn_kernels.h"
#include "attn/softmax_avx512.h"
#include "common/fp16.h"
#include "common/rng.h"
#include "kvq.h"

#define D 64          /* head_dim */
#define NB (D / 32)   /* 32-value blocks per row */
#define G 3           /* query heads per KV head */
#define DEPTH 32768   /* streaming: tokens per cache */
#define NCACHE 90     /* streaming: caches read per step (30 layers x 3 KV heads) */
#define ACC_N 4096    /* accuracy: tokens */
#define L1_PER_REP 8  /* L1 timings per round */

#define VNNI __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")))
#define INL inline __attribute__((always_inline))

enum { C_F16, C_Q8_0, C_Q4_0 };
static const char *const codec_names[] = {"f16", "q8_0", "q4_0"};
static const int lib_fmt[] = {KVQ_FMT_F16, KVQ_FMT_Q8_0, KVQ_FMT_Q4_0};
/* u8 code = value + off in the interleaved tiles (q8_0 stores c ^ 0x80). */
static const int code_off[] = {0, 128, 8};

static double clock_s(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static double now(void) { return clock_s(CLOCK_MONOTONIC); }
/* This thread's CPU seconds: on the shared 2-core machine a thread is often
 * descheduled for others, which wall time would count. */
static double cpu_now(void) { return clock_s(CLOCK_THREAD_CPUTIME_ID); }

static void *xalloc(size_t n) {
    void *p = kvq_alloc_aligned(n);
    if (!p) {
        fprintf(stderr, "attn-proto: out of memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

/* ------------------------------------------------------------------ layout
 *
 * Interleaved K tile, per 16-token group (q4_0: 576 B, q8_0: 1088 B):
 *   codes: for block b, quad-pair m: 64 B = 16 dwords, dword lane = token;
 *     q4_0 (m < 4): byte j = code[32b+8m+j] | code[32b+8m+4+j] << 4
 *     q8_0 (m < 8): byte j = code[32b+4m+j] ^ 0x80
 *   scales: for block b, 16 fp16 (the tokens' block scales).
 * Interleaved V tile of T tokens (q4_0: 36 T B, q8_0: 34 T B):
 *   codes: for token quad j (tokens 4j..4j+3):
 *     q4_0, block b: 64 B, dword lane l, byte i = code[4j+i][32b+l] | code[4j+i][32b+16+l] << 4
 *     q8_0, dim group c (16 dims): 64 B, dword lane l, byte i = code[4j+i][16c+l] ^ 0x80
 *       (plain s8 code for the u8-p kernels: p is then the u8 operand)
 *   scales: for block b, T fp16.
 * Row bytes are the same as ggml's: the layout costs no memory. */

static size_t row_bytes(int c) { return c == C_F16 ? 2 * D : c == C_Q8_0 ? NB * 34 : NB * 18; }
static size_t kgroup_codes(int c) { return c == C_Q8_0 ? 16 * D : 8 * D; }
static size_t kgroup_bytes(int c) { return kgroup_codes(c) + 32 * NB; }
static size_t vcodes_bytes(int c, int T) { return (size_t)T * (c == C_Q8_0 ? D : D / 2); }

/* Code (value + off) of value i of a ggml row, and its block scale. */
static int row_code(int c, const uint8_t *row, int i) {
    const int b = i / 32, j = i % 32;
    if (c == C_Q8_0) return (int)(int8_t)row[34 * b + 2 + j] + 128;
    const uint8_t x = row[18 * b + 2 + j % 16];
    return j < 16 ? x & 15 : x >> 4;
}
static uint16_t row_scale(int c, const uint8_t *row, int b) {
    const uint8_t *p = row + (c == C_Q8_0 ? 34 : 18) * b;
    return (uint16_t)(p[0] | p[1] << 8);
}

/* T ggml rows -> interleaved K tile. */
static void interleave_k(int c, const uint8_t *rows, int T, uint8_t *dst) {
    const size_t rb = row_bytes(c);
    for (int h = 0; h < T / 16; h++) {
        uint8_t *grp = dst + h * kgroup_bytes(c);
        for (int t = 0; t < 16; t++) {
            const uint8_t *row = rows + (size_t)(16 * h + t) * rb;
            for (int b = 0; b < NB; b++) {
                if (c == C_Q8_0)
                    for (int m = 0; m < 8; m++)
                        for (int j = 0; j < 4; j++)
                            grp[(b * 8 + m) * 64 + 4 * t + j] = (uint8_t)row_code(c, row, 32 * b + 4 * m + j);
                else
                    for (int m = 0; m < 4; m++)
                        for (int j = 0; j < 4; j++)
                            grp[(b * 4 + m) * 64 + 4 * t + j] =
                                (uint8_t)(row_code(c, row, 32 * b + 8 * m + j) |
                                          row_code(c, row, 32 * b + 8 * m + 4 + j) << 4);
                const uint16_t s = row_scale(c, row, b);
                memcpy(grp + kgroup_codes(c) + 32 * b + 2 * t, &s, 2);
            }
        }
    }
}

/* T ggml rows -> interleaved V tile. */
static void interleave_v(int c, const uint8_t *rows, int T, int plain, uint8_t *dst) {
    const size_t rb = row_bytes(c);
    for (int t = 0; t < T; t++) {
        const uint8_t *row = rows + (size_t)t * rb;
        const int j = t / 4, i = t % 4;
        for (int l = 0; l < 16; l++) {
            if (c == C_Q8_0)
                for (int g16 = 0; g16 < D / 16; g16++)
                    dst[(j * (D / 16) + g16) * 64 + 4 * l + i] = (uint8_t)(row_code(c, row, 16 * g16 + l) ^ (plain ? 0x80 : 0));
            else
                for (int b = 0; b < NB; b++)
                    dst[(j * NB + b) * 64 + 4 * l + i] =
                        (uint8_t)(row_code(c, row, 32 * b + l) | row_code(c, row, 32 * b + 16 + l) << 4);
        }
        for (int b = 0; b < NB; b++) {
            const uint16_t s = row_scale(c, row, b);
            memcpy(dst + vcodes_bytes(c, T) + 2 * ((size_t)b * T + t), &s, 2);
        }
    }
}

/* The query of G heads prepared once per step: int8 per 32-dim block with
 * scale max|q| / 127, and the offset correction -off * sum(q) per block. */
typedef struct vq_query {
    int32_t qw[2][G][D / 4]; /* (2, G, D/4): 4 int8 dims a dword; [1]: the residual x 254 */
    float qs[G][NB];         /* (G, NB) block scales */
    int32_t qoff[2][G][NB];  /* (2, G, NB) -off * sum of the block's int8 */
} vq_query;

static void vq_prep(const float *q, int off, vq_query *out) {
    for (int g = 0; g < G; g++)
        for (int b = 0; b < NB; b++) {
            const float *x = q + g * D + 32 * b;
            float amax = 0;
            for (int i = 0; i < 32; i++) amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
            const float s = amax / 127, inv = amax > 0 ? 127 / amax : 0;
            int8_t qi[2][32];
            int sum[2] = {0, 0};
            for (int i = 0; i < 32; i++) {
                const float y = x[i] * inv;
                qi[0][i] = (int8_t)lrintf(y);
                qi[1][i] = (int8_t)lrintf((y - qi[0][i]) * 254);
                sum[0] += qi[0][i];
                sum[1] += qi[1][i];
            }
            out->qs[g][b] = s;
            for (int h = 0; h < 2; h++) {
                memcpy(&out->qw[h][g][8 * b], qi[h], 32);
                out->qoff[h][g][b] = -off * sum[h];
            }
        }
}

/* ------------------------------------------------------- shared AVX-512 */

/* exp16 and softmax_update: libkvq's (attn/softmax_avx512.h). */

static INL int32_t ld32(const void *p) {
    int32_t x;
    memcpy(&x, p, 4);
    return x;
}

/* ------------------------------------------------------ the VNNI kernels */

/* s (G, T): scores of an interleaved K tile. pf: the next tile, or NULL. */
VNNI static INL void vq_scores(const int KC, const int T, const int QP, const vq_query *qq, const uint8_t *kt,
                               const uint8_t *pf, float *s) {
    const __m512i lo4 = _mm512_set1_epi8(0x0F);
    for (int h = 0; h < T / 16; h++) {
        const uint8_t *grp = kt + h * kgroup_bytes(KC);
        __m512i a[G][NB], r[G][NB]; /* r: the residual's products (QP = 2) */
#pragma GCC unroll 4
        for (int g = 0; g < G; g++)
#pragma GCC unroll 4
            for (int b = 0; b < NB; b++) {
                a[g][b] = _mm512_set1_epi32(qq->qoff[0][g][b]);
                r[g][b] = _mm512_set1_epi32(qq->qoff[1][g][b]);
            }
#pragma GCC unroll 4
        for (int b = 0; b < NB; b++) {
            if (KC == C_Q4_0) {
#pragma GCC unroll 4
                for (int m = 0; m < 4; m++) {
                    const size_t o = (size_t)h * kgroup_bytes(KC) + (b * 4 + m) * 64;
                    if (pf) _mm_prefetch((const char *)pf + o, _MM_HINT_T0);
                    const __m512i z = _mm512_load_si512(kt + o);
                    const __m512i c0 = _mm512_and_si512(z, lo4), c1 = _mm512_and_si512(_mm512_srli_epi16(z, 4), lo4);
#pragma GCC unroll 4
                    for (int g = 0; g < G; g++) {
                        a[g][b] = _mm512_dpbusd_epi32(a[g][b], c0, _mm512_set1_epi32(qq->qw[0][g][8 * b + 2 * m]));
                        a[g][b] = _mm512_dpbusd_epi32(a[g][b], c1, _mm512_set1_epi32(qq->qw[0][g][8 * b + 2 * m + 1]));
                        if (QP == 2) {
                            r[g][b] = _mm512_dpbusd_epi32(r[g][b], c0, _mm512_set1_epi32(qq->qw[1][g][8 * b + 2 * m]));
                            r[g][b] =
                                _mm512_dpbusd_epi32(r[g][b], c1, _mm512_set1_epi32(qq->qw[1][g][8 * b + 2 * m + 1]));
                        }
                    }
                }
            } else {
#pragma GCC unroll 8
                for (int m = 0; m < 8; m++) {
                    const size_t o = (size_t)h * kgroup_bytes(KC) + (b * 8 + m) * 64;
                    if (pf) _mm_prefetch((const char *)pf + o, _MM_HINT_T0);
                    const __m512i z = _mm512_load_si512(kt + o);
#pragma GCC unroll 4
                    for (int g = 0; g < G; g++) {
                        a[g][b] = _mm512_dpbusd_epi32(a[g][b], z, _mm512_set1_epi32(qq->qw[0][g][8 * b + m]));
                        if (QP == 2)
                            r[g][b] = _mm512_dpbusd_epi32(r[g][b], z, _mm512_set1_epi32(qq->qw[1][g][8 * b + m]));
                    }
                }
            }
        }
        if (pf) _mm_prefetch((const char *)pf + h * kgroup_bytes(KC) + kgroup_codes(KC), _MM_HINT_T0);
        __m512 dk[NB];
#pragma GCC unroll 4
        for (int b = 0; b < NB; b++)
            dk[b] = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(grp + kgroup_codes(KC) + 32 * b)));
#pragma GCC unroll 4
        for (int g = 0; g < G; g++) {
            __m512 sc = _mm512_setzero_ps();
#pragma GCC unroll 4
            for (int b = 0; b < NB; b++) {
                __m512 x = _mm512_cvtepi32_ps(a[g][b]);
                if (QP == 2) x = _mm512_fmadd_ps(_mm512_cvtepi32_ps(r[g][b]), _mm512_set1_ps(1.0f / 254), x);
                sc = _mm512_fmadd_ps(x, _mm512_mul_ps(dk[b], _mm512_set1_ps(qq->qs[g][b])), sc);
            }
            _mm512_store_ps(s + g * T + 16 * h, sc);
        }
    }
}

/* acc (G, D) += p (G, T) x interleaved V tile, in integers: p' = p * (the
 * token's V block scale) quantized to s8 per (head, block) of the tile
 * (PP = 2: plus its residual x 254). PP = 3 (q8_0 only, whose scales are
 * >= 0): p' as u8, the V codes stored as plain s8, no offset correction. */
VNNI static INL void vq_pv_int(const int VC, const int T, const int PP, const float *p, const uint8_t *vt,
                               const uint8_t *pf, float *acc) {
    int8_t pq[2][G][NB][64] __attribute__((aligned(64))); /* (2, G, NB, T <= 64); [1]: the residual x 254 */
    float sp[G][NB];
    int32_t corr[2][G][NB];
    const int off = PP == 3 ? 0 : VC == C_Q8_0 ? 128 : 8;
    const uint8_t *vs = vt + vcodes_bytes(VC, T);
    __m512 dv[NB][4];
#pragma GCC unroll 4
    for (int b = 0; b < NB; b++)
#pragma GCC unroll 4
        for (int h = 0; h < T / 16; h++)
            dv[b][h] = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(vs + 2 * (b * T + 16 * h))));
#pragma GCC unroll 4
    for (int g = 0; g < G; g++)
#pragma GCC unroll 4
        for (int b = 0; b < NB; b++) {
            __m512 pp[4];
            __m512 mx = _mm512_setzero_ps();
#pragma GCC unroll 4
            for (int h = 0; h < T / 16; h++) {
                pp[h] = _mm512_mul_ps(_mm512_load_ps(p + g * T + 16 * h), dv[b][h]);
                mx = _mm512_max_ps(mx, _mm512_abs_ps(pp[h]));
            }
            const float amax = _mm512_reduce_max_ps(mx), lv = PP == 3 ? 255.0f : 127.0f;
            const __m512 inv = _mm512_set1_ps(amax > 0 ? lv / amax : 0.0f);
            sp[g][b] = amax / lv;
            __m512i sum = _mm512_setzero_si512(), sum2 = _mm512_setzero_si512();
#pragma GCC unroll 4
            for (int h = 0; h < T / 16; h++) {
                const __m512 y = _mm512_mul_ps(pp[h], inv);
                const __m512i qi = _mm512_cvtps_epi32(y);
                sum = _mm512_add_epi32(sum, qi);
                _mm_store_si128((__m128i *)&pq[0][g][b][16 * h],
                                PP == 3 ? _mm512_cvtusepi32_epi8(qi) : _mm512_cvtepi32_epi8(qi));
                if (PP == 2) {
                    const __m512i qr = _mm512_cvtps_epi32(
                        _mm512_mul_ps(_mm512_sub_ps(y, _mm512_cvtepi32_ps(qi)), _mm512_set1_ps(254.0f)));
                    sum2 = _mm512_add_epi32(sum2, qr);
                    _mm_store_si128((__m128i *)&pq[1][g][b][16 * h], _mm512_cvtepi32_epi8(qr));
                }
            }
            corr[0][g][b] = PP == 3 ? 0 : -off * _mm512_reduce_add_epi32(sum);
            corr[1][g][b] = PP == 2 ? -off * _mm512_reduce_add_epi32(sum2) : 0;
        }
    const __m512i lo4 = _mm512_set1_epi8(0x0F);
    __m512i a[G][D / 16], a2[G][D / 16]; /* a2: the residual's products (PP = 2) */
#pragma GCC unroll 4
    for (int g = 0; g < G; g++)
#pragma GCC unroll 4
        for (int c = 0; c < D / 16; c++) {
            a[g][c] = _mm512_set1_epi32(corr[0][g][c / 2]);
            a2[g][c] = _mm512_set1_epi32(corr[1][g][c / 2]);
        }
#pragma GCC unroll 16
    for (int j = 0; j < T / 4; j++) {
        if (VC == C_Q4_0) {
#pragma GCC unroll 4
            for (int b = 0; b < NB; b++) {
                const size_t o = (size_t)(j * NB + b) * 64;
                if (pf) _mm_prefetch((const char *)pf + o, _MM_HINT_T0);
                const __m512i z = _mm512_load_si512(vt + o);
                const __m512i c0 = _mm512_and_si512(z, lo4), c1 = _mm512_and_si512(_mm512_srli_epi16(z, 4), lo4);
#pragma GCC unroll 4
                for (int g = 0; g < G; g++) {
                    const __m512i pb = _mm512_set1_epi32(ld32(&pq[0][g][b][4 * j]));
                    a[g][2 * b] = _mm512_dpbusd_epi32(a[g][2 * b], c0, pb);
                    a[g][2 * b + 1] = _mm512_dpbusd_epi32(a[g][2 * b + 1], c1, pb);
                    if (PP == 2) {
                        const __m512i pr = _mm512_set1_epi32(ld32(&pq[1][g][b][4 * j]));
                        a2[g][2 * b] = _mm512_dpbusd_epi32(a2[g][2 * b], c0, pr);
                        a2[g][2 * b + 1] = _mm512_dpbusd_epi32(a2[g][2 * b + 1], c1, pr);
                    }
                }
            }
        } else {
#pragma GCC unroll 4
            for (int c = 0; c < D / 16; c++) {
                const size_t o = (size_t)(j * (D / 16) + c) * 64;
                if (pf) _mm_prefetch((const char *)pf + o, _MM_HINT_T0);
                const __m512i z = _mm512_load_si512(vt + o);
#pragma GCC unroll 4
                for (int g = 0; g < G; g++) {
                    if (PP == 3) { /* p: the u8 operand; codes: s8 */
                        a[g][c] = _mm512_dpbusd_epi32(a[g][c], _mm512_set1_epi32(ld32(&pq[0][g][c / 2][4 * j])), z);
                        continue;
                    }
                    a[g][c] = _mm512_dpbusd_epi32(a[g][c], z, _mm512_set1_epi32(ld32(&pq[0][g][c / 2][4 * j])));
                    if (PP == 2)
                        a2[g][c] = _mm512_dpbusd_epi32(a2[g][c], z, _mm512_set1_epi32(ld32(&pq[1][g][c / 2][4 * j])));
                }
            }
        }
    }
    if (pf)
        for (size_t o = vcodes_bytes(VC, T); o < vcodes_bytes(VC, T) + 2 * NB * (size_t)T; o += 64)
            _mm_prefetch((const char *)pf + o, _MM_HINT_T0);
#pragma GCC unroll 4
    for (int g = 0; g < G; g++)
#pragma GCC unroll 4
        for (int c = 0; c < D / 16; c++) {
            __m512 x = _mm512_cvtepi32_ps(a[g][c]);
            if (PP == 2) x = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a2[g][c]), _mm512_set1_ps(1.0f / 254), x);
            _mm512_storeu_ps(acc + g * D + 16 * c,
                             _mm512_fmadd_ps(x, _mm512_set1_ps(sp[g][c / 2]), _mm512_loadu_ps(acc + g * D + 16 * c)));
        }
}

/* acc (G, D) += p (G, T) x ggml V rows with float FMAs (libkvq's fused_pv
 * for q4_0 / q8_0 at BB = 2: the G x 4 accumulators stay in registers). */
VNNI static INL void row_pv_float(const int VC, const int T, const float *p, const uint8_t *vr, const uint8_t *pf,
                                  float *acc) {
    const size_t rb = row_bytes(VC);
    __m512 a[G][4];
#pragma GCC unroll 4
    for (int g = 0; g < G; g++)
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) a[g][c] = _mm512_loadu_ps(acc + g * D + 16 * c);
    for (int t = 0; t < T; t++) {
        const uint8_t *row = vr + (size_t)t * rb;
        if (pf && (t * rb) % 64 < rb) _mm_prefetch((const char *)pf + ((t * rb) & ~(size_t)63), _MM_HINT_T0);
        __m512 v[4];
#pragma GCC unroll 2
        for (int b = 0; b < 2; b++) {
            if (VC == C_Q8_0) {
                const uint8_t *blk = row + 34 * b;
                const __m512 d = _mm512_cvtph_ps(_mm256_set1_epi16((short)(blk[0] | blk[1] << 8)));
                v[2 * b] = _mm512_mul_ps(
                    _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(blk + 2)))), d);
                v[2 * b + 1] = _mm512_mul_ps(
                    _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(blk + 18)))), d);
            } else {
                const uint8_t *blk = row + 18 * b;
                const __m512 d = _mm512_cvtph_ps(_mm256_set1_epi16((short)(blk[0] | blk[1] << 8)));
                const __m512i x = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(blk + 2)));
                const __m512i h = _mm512_set1_epi32(8);
                v[2 * b] = _mm512_mul_ps(
                    _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_and_si512(x, _mm512_set1_epi32(15)), h)), d);
                v[2 * b + 1] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_srli_epi32(x, 4), h)), d);
            }
        }
#pragma GCC unroll 4
        for (int g = 0; g < G; g++) {
            const __m512 pg = _mm512_set1_ps(p[g * T + t]);
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++) a[g][c] = _mm512_fmadd_ps(pg, v[c], a[g][c]);
        }
    }
#pragma GCC unroll 4
    for (int g = 0; g < G; g++)
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) _mm512_storeu_ps(acc + g * D + 16 * c, a[g][c]);
}

/* One tile: k interleaved; v interleaved (PVI = 1: p as s8, 2: p as s8 plus
 * its residual x 254) or ggml rows (PVI = 0). QP = 2 adds the query residual.
 * kn, vn: the next tiles to prefetch, or NULL. */
VNNI static INL void vq_tile(const int KC, const int VC, const int T, const int QP, const int PVI, const vq_query *qq,
                             const uint8_t *k, const uint8_t *v, const uint8_t *kn, const uint8_t *vn, float *m,
                             float *l, float *acc) {
    float s[G * 64] __attribute__((aligned(64))); /* (G, T <= 64) */
    vq_scores(KC, T, QP, qq, k, kn, s);
    softmax_update(0, G, D, T, s, m, l, acc);
    if (PVI) vq_pv_int(VC, T, PVI, s, v, vn, acc);  /* PVI: PP */
    else row_pv_float(VC, T, s, v, vn, acc);
}

/* A run of n_tiles tiles (K and V each contiguous, tile_k / tile_v bytes). */
typedef void (*run_fn)(const vq_query *qq, const float *qf, const uint8_t *k, const uint8_t *v, int n_tiles,
                       int prefetch, float *m, float *l, float *acc);

#define VQ_RUN(name, KC, VC, T, QP, PVI)                                                                       \
    VNNI static void name(const vq_query *qq, const float *qf, const uint8_t *k, const uint8_t *v, int n_tiles, \
                          int prefetch, float *m, float *l, float *acc) {                                     \
        const size_t tk = (size_t)T * row_bytes(KC), tv = (size_t)T * row_bytes(VC);                           \
        for (int i = 0; i < n_tiles; i++) {                                                                    \
            const int more = prefetch && i + 1 < n_tiles;                                                      \
            vq_tile(KC, VC, T, QP, PVI, qq, k + i * tk, v + i * tv, more ? k + (i + 1) * tk : NULL,               \
                    more ? v + (i + 1) * tv : NULL, m, l, acc);                                                \
        }                                                                                                      \
    }
VQ_RUN(run_b_q4_32, C_Q4_0, C_Q4_0, 32, 1, 1)
VQ_RUN(run_b_q8_32, C_Q8_0, C_Q8_0, 32, 1, 1)
VQ_RUN(run_b_q4_64, C_Q4_0, C_Q4_0, 64, 1, 1)
VQ_RUN(run_b_q8_64, C_Q8_0, C_Q8_0, 64, 1, 1)
VQ_RUN(run_a_q4_32, C_Q4_0, C_Q4_0, 32, 1, 0)
VQ_RUN(run_a_q8_32, C_Q8_0, C_Q8_0, 32, 1, 0)
VQ_RUN(run_b2_q4_32, C_Q4_0, C_Q4_0, 32, 2, 1)
VQ_RUN(run_b2_q8_32, C_Q8_0, C_Q8_0, 32, 2, 1)
VQ_RUN(run_b22_q4_32, C_Q4_0, C_Q4_0, 32, 2, 2)
VQ_RUN(run_b22_q8_32, C_Q8_0, C_Q8_0, 32, 2, 2)
VQ_RUN(run_bu_q8_32, C_Q8_0, C_Q8_0, 32, 1, 3)
VQ_RUN(run_bqu_q8_32, C_Q8_0, C_Q8_0, 32, 2, 3)

/* The real kernel over ggml (or f16) rows, one call per tile as decode.c. */
static int g_lib_codec, g_lib_T;
static void run_row(const vq_query *qq, const float *qf, const uint8_t *k, const uint8_t *v, int n_tiles,
                    int prefetch, float *m, float *l, float *acc) {
    const int c = g_lib_codec, T = g_lib_T;
    const size_t rb = row_bytes(c), tb = (size_t)T * rb;
    for (int i = 0; i < n_tiles; i++) {
        const int more = prefetch && i + 1 < n_tiles;
        const kvq_attn_rows kr = {k + i * tb, rb, NULL, lib_fmt[c], more ? k + (i + 1) * tb : NULL};
        const kvq_attn_rows vr = {v + i * tb, rb, NULL, lib_fmt[c], more ? v + (i + 1) * tb : NULL};
        kvq_attn_fused_avx512(G, D, T, qf, &kr, &vr, m, l, acc);
    }
}

/* ------------------------------------------------------------- kernels */

typedef struct kernel {
    const char *name;
    int codec, T;
    int k_il, v_il; /* K / V tiles interleaved (else ggml rows); v_il 2: q8_0 V codes as plain s8 */
    run_fn run;
} kernel;

static const kernel kernels[] = {
    {"row f16 (lib)", C_F16, 32, 0, 0, run_row},
    {"row q8_0 (lib)", C_Q8_0, 32, 0, 0, run_row},
    {"vnni-a q8_0 T32", C_Q8_0, 32, 1, 0, run_a_q8_32},
    {"vnni-b q8_0 T32", C_Q8_0, 32, 1, 1, run_b_q8_32},
    {"vnni-b q8_0 T64", C_Q8_0, 64, 1, 1, run_b_q8_64},
    {"vnni-bq q8_0 T32", C_Q8_0, 32, 1, 1, run_b2_q8_32},
    {"vnni-bqp q8_0 T32", C_Q8_0, 32, 1, 1, run_b22_q8_32},
    {"vnni-bu q8_0 T32", C_Q8_0, 32, 1, 2, run_bu_q8_32},
    {"vnni-bqu q8_0 T32", C_Q8_0, 32, 1, 2, run_bqu_q8_32},
    {"row q4_0 (lib)", C_Q4_0, 32, 0, 0, run_row},
    {"vnni-a q4_0 T32", C_Q4_0, 32, 1, 0, run_a_q4_32},
    {"vnni-b q4_0 T32", C_Q4_0, 32, 1, 1, run_b_q4_32},
    {"vnni-b q4_0 T64", C_Q4_0, 64, 1, 1, run_b_q4_64},
    {"vnni-bq q4_0 T32", C_Q4_0, 32, 1, 1, run_b2_q4_32},
    {"vnni-bqp q4_0 T32", C_Q4_0, 32, 1, 1, run_b22_q4_32},
};
#define N_KERNELS ((int)(sizeof kernels / sizeof kernels[0]))

/* A cache of n tokens in a kernel's layout: K and V tiles, contiguous. */
typedef struct cache {
    uint8_t *k, *v;
    int n_tiles;
} cache;

/* n rows of K and V (ggml rows) -> the kernel's layout. */
static void make_cache(const kernel *kn, const uint8_t *krows, const uint8_t *vrows, int n, cache *out) {
    const size_t rb = row_bytes(kn->codec), tb = (size_t)kn->T * rb;
    out->n_tiles = n / kn->T;
    out->k = xalloc(out->n_tiles * tb);
    out->v = xalloc(out->n_tiles * tb);
    for (int i = 0; i < out->n_tiles; i++) {
        const size_t o = i * tb;
        if (kn->k_il) interleave_k(kn->codec, krows + o, kn->T, out->k + o);
        else memcpy(out->k + o, krows + o, tb);
        if (kn->v_il) interleave_v(kn->codec, vrows + o, kn->T, kn->v_il == 2, out->v + o);
        else memcpy(out->v + o, vrows + o, tb);
    }
}

static void free_cache(cache *c) {
    kvq_free_aligned(c->k);
    kvq_free_aligned(c->v);
}

typedef struct state {
    float m[G], l[G], acc[G * D];
} state;

static void state_init(state *s) {
    for (int g = 0; g < G; g++) s->m[g] = -INFINITY, s->l[g] = 0;
    memset(s->acc, 0, sizeof s->acc);
}

static void run_cache(const kernel *kn, const float *q, const cache *c, int t0, int t1, int prefetch, state *st) {
    vq_query qq;
    vq_prep(q, code_off[kn->codec], &qq);
    g_lib_codec = kn->codec;
    g_lib_T = kn->T;
    const size_t tb = (size_t)kn->T * row_bytes(kn->codec);
    kn->run(&qq, q, c->k + t0 * tb, c->v + t0 * tb, t1 - t0, prefetch, st->m, st->l, st->acc);
}

/* ------------------------------------------------------------- inputs */

/* n tokens of K and V rows (d floats each): N(0, 1), with outliers set
 * outlier channels (every 16th channel of K x 6 + 2, of V x 3), and G
 * queries N(0, 1) scaled so that the scores q.k have standard deviation
 * sigma over these keys. */
static void gen_inputs(int n, double sigma, int outliers, uint64_t seed, float *k, float *v, float *q) {
    for (int t = 0; t < n; t++)
        for (int i = 0; i < D; i++) {
            const int ok = outliers && i % 16 == 3, ov = outliers && i % 16 == 7;
            k[t * D + i] = (float)(kvq_rng_normal(&seed) * (ok ? 6.0 : 1.0) + (ok ? 2.0 : 0.0));
            v[t * D + i] = (float)(kvq_rng_normal(&seed) * (ov ? 3.0 : 1.0));
        }
    for (int g = 0; g < G; g++) {
        float *qg = q + g * D;
        for (int i = 0; i < D; i++) qg[i] = (float)kvq_rng_normal(&seed);
        double s1 = 0, s2 = 0;
        for (int t = 0; t < n; t++) {
            double dot = 0;
            for (int i = 0; i < D; i++) dot += (double)qg[i] * k[t * D + i];
            s1 += dot, s2 += dot * dot;
        }
        const double sd = sqrt(s2 / n - (s1 / n) * (s1 / n));
        for (int i = 0; i < D; i++) qg[i] = (float)(qg[i] * sigma / sd);
    }
}

/* Encodes n rows with libkvq's codec (bit-exact ggml); y: the decoded rows. */
static void encode_rows(int codec, const float *x, int n, uint8_t *rows, float *y) {
    kvq_codec *c;
    if (kvq_codec_create(codec_names[codec], D, 0, &c) != KVQ_OK) {
        fprintf(stderr, "attn-proto: codec %s: %s\n", codec_names[codec], kvq_last_error());
        exit(1);
    }
    const size_t rb = kvq_codec_row_bytes(c);
    if (rb != row_bytes(codec)) {
        fprintf(stderr, "attn-proto: %s rows are %zu bytes, expected %zu\n", codec_names[codec], rb, row_bytes(codec));
        exit(1);
    }
    for (int t = 0; t < n; t++) {
        kvq_codec_encode_row(c, x + (size_t)t * D, rows + t * rb);
        if (y) kvq_codec_decode_row(c, rows + t * rb, y + (size_t)t * D);
    }
    kvq_codec_free(c);
}

/* Float64 attention of G heads over n rows: out (G, D). */
static void ref_attn(const float *q, const float *k, const float *v, int n, double *out) {
    double *s = malloc(sizeof(double) * n);
    for (int g = 0; g < G; g++) {
        double mx = -INFINITY, l = 0;
        for (int t = 0; t < n; t++) {
            double dot = 0;
            for (int i = 0; i < D; i++) dot += (double)q[g * D + i] * k[(size_t)t * D + i];
            s[t] = dot;
            mx = dot > mx ? dot : mx;
        }
        for (int i = 0; i < D; i++) out[g * D + i] = 0;
        for (int t = 0; t < n; t++) {
            const double p = exp(s[t] - mx);
            l += p;
            for (int i = 0; i < D; i++) out[g * D + i] += p * v[(size_t)t * D + i];
        }
        for (int i = 0; i < D; i++) out[g * D + i] /= l;
    }
    free(s);
}

static double rel_err(const float *o, const double *r) {
    double e = 0, n = 0;
    for (int i = 0; i < D; i++) e += (o[i] - r[i]) * (o[i] - r[i]), n += r[i] * r[i];
    return sqrt(e / n);
}

/* ------------------------------------------------------------- timing */

typedef struct timing {
    double min, med;
} timing;

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static timing summarize(double *t, int n) {
    qsort(t, n, sizeof *t, cmp_d);
    return (timing){t[0], n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2])};
}

/* Two threads: the main one and one worker, each over its half of the
 * tiles of every cache; a pass ends when both are done. */
typedef struct pass {
    const kernel *kn;
    const float *q;
    const cache *caches;
    int n_caches, n_threads;
    state *st;     /* (n_threads) */
    double cpu[2]; /* CPU seconds of each thread's part of the last pass */
    pthread_barrier_t start, done;
    int quit;
} pass;

static void pass_part(pass *p, int who) {
    const double c0 = cpu_now();
    for (int c = 0; c < p->n_caches; c++) {
        const int nt = p->caches[c].n_tiles, mid = nt / 2;
        const int t0 = p->n_threads == 1 ? 0 : who ? mid : 0, t1 = p->n_threads == 1 ? nt : who ? nt : mid;
        state_init(&p->st[who]);
        run_cache(p->kn, p->q, &p->caches[c], t0, t1, 1, &p->st[who]);
    }
    p->cpu[who] = cpu_now() - c0;
}

static void *worker(void *arg) {
    pass *p = arg;
    for (;;) {
        pthread_barrier_wait(&p->start);
        if (p->quit) return NULL;
        pass_part(p, 1);
        pthread_barrier_wait(&p->done);
    }
}

/* One pass: its wall seconds; *cpu: the larger thread's CPU seconds. */
static double now_pass(pass *p, double *cpu) {
    const double t0 = now();
    if (p->n_threads == 2) pthread_barrier_wait(&p->start);
    pass_part(p, 0);
    if (p->n_threads == 2) pthread_barrier_wait(&p->done);
    *cpu = p->n_threads == 2 && p->cpu[1] > p->cpu[0] ? p->cpu[1] : p->cpu[0];
    return now() - t0;
}

static volatile float g_sink;

/* ns/token of CPU time with one tile repeated (16384 tokens). */
static double time_l1(const kernel *kn, const float *q, const cache *c, state *st) {
    const int inner = 16384 / kn->T;
    vq_query qq;
    vq_prep(q, code_off[kn->codec], &qq);
    g_lib_codec = kn->codec;
    g_lib_T = kn->T;
    const double t0 = cpu_now();
    for (int i = 0; i < inner; i++) kn->run(&qq, q, c->k, c->v, 1, 0, st->m, st->l, st->acc);
    const double dt = cpu_now() - t0;
    g_sink = st->acc[0];
    return dt * 1e9 / (inner * kn->T);
}

int main(int argc, char **argv) {
    const int reps = argc > 1 ? atoi(argv[1]) : 15;
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512vnni")) {
        printf("attn-proto: needs AVX-512 with VNNI; nothing to measure here\n");
        return 0;
    }
    printf("kvq attention prototype: d=%d G=%d; L1 = one tile repeated, stream = %d caches x %d tokens\n", D, G,
           NCACHE, DEPTH);

    /* Accuracy: per input set, 2 sigmas x 4 seeds x G heads over ACC_N tokens. */
    enum { N_SET = 2, N_SIG = 2, N_SEED = 4 };
    const char *const set_names[N_SET] = {"gaussian", "outlier channels"};
    const double sigmas[N_SIG] = {2.0, 4.0};
    double err_max[N_SET][N_KERNELS] = {{0}}, err_sum[N_SET][N_KERNELS] = {{0}};
    double codec_max[N_SET][3] = {{0}}, codec_sum[N_SET][3] = {{0}};
    const int n_err = N_SIG * N_SEED * G;
    {
        float *kx = xalloc(sizeof(float) * ACC_N * D), *vx = xalloc(sizeof(float) * ACC_N * D);
        float *ky = xalloc(sizeof(float) * ACC_N * D), *vy = xalloc(sizeof(float) * ACC_N * D);
        uint8_t *kr = xalloc(ACC_N * row_bytes(C_F16)), *vr = xalloc(ACC_N * row_bytes(C_F16));
        float q[G * D];
        for (int set = 0; set < N_SET; set++)
            for (int si = 0; si < N_SIG; si++)
                for (int seed = 0; seed < N_SEED; seed++) {
                    gen_inputs(ACC_N, sigmas[si], set, 1000 + 17 * seed + si, kx, vx, q);
                    double exact[G * D];
                    ref_attn(q, kx, vx, ACC_N, exact);
                    for (int c = 0; c < 3; c++) {
                        encode_rows(c, kx, ACC_N, kr, ky);
                        encode_rows(c, vx, ACC_N, vr, vy);
                        double ref[G * D];
                        ref_attn(q, ky, vy, ACC_N, ref);
                        for (int g = 0; g < G; g++) {
                            float o[D];
                            for (int i = 0; i < D; i++) o[i] = (float)ref[g * D + i];
                            const double e = rel_err(o, exact + g * D);
                            codec_max[set][c] = e > codec_max[set][c] ? e : codec_max[set][c];
                            codec_sum[set][c] += e;
                        }
                        for (int ki = 0; ki < N_KERNELS; ki++) {
                            const kernel *kn = &kernels[ki];
                            if (kn->codec != c) continue;
                            cache ca;
                            make_cache(kn, kr, vr, ACC_N, &ca);
                            state st;
                            state_init(&st);
                            run_cache(kn, q, &ca, 0, ca.n_tiles, 1, &st);
                            for (int g = 0; g < G; g++) {
                                float o[D];
                                for (int i = 0; i < D; i++) o[i] = st.acc[g * D + i] / st.l[g];
                                const double e = rel_err(o, ref + g * D);
                                err_max[set][ki] = e > err_max[set][ki] ? e : err_max[set][ki];
                                err_sum[set][ki] += e;
                            }
                            free_cache(&ca);
                        }
                    }
                }
        printf("\naccuracy: relative L2 error ||o - o_ref|| / ||o_ref|| of each head's output, o_ref = float64\n"
               "attention over the same decoded rows; %d heads a set (sigma in {2, 4} x %d seeds x G=%d), %d tokens.\n"
               "codec error: o_ref against float64 attention over the original float rows.\n",
               n_err, N_SEED, G, ACC_N);
        printf("%-18s | %-19s | %-19s\n", "", set_names[0], set_names[1]);
        printf("%-18s | %9s %9s | %9s %9s\n", "", "max", "mean", "max", "mean");
        for (int c = 0; c < 3; c++)
            printf("codec error %-6s | %9.2e %9.2e | %9.2e %9.2e\n", codec_names[c], codec_max[0][c],
                   codec_sum[0][c] / n_err, codec_max[1][c], codec_sum[1][c] / n_err);
        for (int ki = 0; ki < N_KERNELS; ki++)
            printf("%-18s | %9.2e %9.2e | %9.2e %9.2e\n", kernels[ki].name, err_max[0][ki], err_sum[0][ki] / n_err,
                   err_max[1][ki], err_sum[1][ki] / n_err);
        kvq_free_aligned(kx), kvq_free_aligned(vx), kvq_free_aligned(ky), kvq_free_aligned(vy);
        kvq_free_aligned(kr), kvq_free_aligned(vr);
    }

    /* Timing: per codec, the caches of all its kernels at once (NCACHE
     * copies of one DEPTH-token cache each), measured round-robin so that
     * every kernel of a codec sees the same load on the shared machine. */
    float *kx = xalloc(sizeof(float) * DEPTH * D), *vx = xalloc(sizeof(float) * DEPTH * D), q[G * D];
    gen_inputs(DEPTH, 3.0, 1, 7, kx, vx, q);
    printf("\ntiming: ns/token of thread CPU time (2T: the larger thread's), min and median of %d (L1: of %d),\n"
           "kernels of a codec measured round-robin; GB/s = bytes/token / min;\n"
           "wall = min wall ns/token (inflated when the machine is shared)\n",
           reps, L1_PER_REP * reps);
    printf("%-18s %5s | %-13s | %-28s | %-28s\n", "kernel", "B/tok", "L1 ns/tok", "stream 1T ns/tok  GB/s  wall",
           "stream 2T ns/tok  GB/s  wall");
    printf("%-18s %5s | %6s %6s | %6s %6s %6s %6s | %6s %6s %6s %6s\n", "", "", "min", "med", "min", "med", "", "",
           "min", "med", "", "");
    state sts[2];
    pass p = {.q = q, .n_caches = NCACHE, .st = sts};
    pthread_t th;
    pthread_barrier_init(&p.start, NULL, 2);
    pthread_barrier_init(&p.done, NULL, 2);
    pthread_create(&th, NULL, worker, &p);
    for (int codec = 0; codec < 3; codec++) {
        int ks[N_KERNELS], nk = 0;
        for (int ki = 0; ki < N_KERNELS; ki++)
            if (kernels[ki].codec == codec) ks[nk++] = ki;
        const size_t rb = row_bytes(codec);
        uint8_t *kr = xalloc(DEPTH * rb), *vr = xalloc(DEPTH * rb);
        encode_rows(codec, kx, DEPTH, kr, NULL);
        encode_rows(codec, vx, DEPTH, vr, NULL);
        cache *caches = xalloc(sizeof(cache) * NCACHE * nk); /* (nk, NCACHE) */
        for (int i = 0; i < nk; i++) {
            const kernel *kn = &kernels[ks[i]];
            cache *cs = caches + i * NCACHE;
            make_cache(kn, kr, vr, DEPTH, &cs[0]);
            const size_t cb = (size_t)cs[0].n_tiles * kn->T * rb;
            for (int c = 1; c < NCACHE; c++) {
                cs[c] = (cache){xalloc(cb), xalloc(cb), cs[0].n_tiles};
                memcpy(cs[c].k, cs[0].k, cb);
                memcpy(cs[c].v, cs[0].v, cb);
            }
        }
        kvq_free_aligned(kr), kvq_free_aligned(vr);
        double *l1 = malloc(sizeof(double) * nk * L1_PER_REP * reps), *s1 = malloc(sizeof(double) * nk * reps);
        double *s2 = malloc(sizeof(double) * nk * reps), *w1 = malloc(sizeof(double) * nk * reps);
        double *w2 = malloc(sizeof(double) * nk * reps);
        state st;
        for (int r = -1; r < reps; r++) /* r = -1: warm-up */
            for (int i = 0; i < nk; i++) {
                const kernel *kn = &kernels[ks[i]];
                state_init(&st);
                for (int j = 0; j < L1_PER_REP; j++) {
                    const double t = time_l1(kn, q, &caches[i * NCACHE], &st);
                    if (r >= 0) l1[(i * reps + r) * L1_PER_REP + j] = t;
                }
                p.kn = kn;
                p.caches = caches + i * NCACHE;
                for (int nt = 1; nt <= 2; nt++) {
                    p.n_threads = nt;
                    double cpu;
                    const double w = now_pass(&p, &cpu) * 1e9 / ((double)NCACHE * DEPTH);
                    if (r < 0) continue;
                    (nt == 1 ? s1 : s2)[i * reps + r] = cpu * 1e9 / ((double)NCACHE * DEPTH);
                    (nt == 1 ? w1 : w2)[i * reps + r] = w;
                }
            }
        for (int i = 0; i < nk; i++) {
            const kernel *kn = &kernels[ks[i]];
            const timing a = summarize(l1 + i * L1_PER_REP * reps, L1_PER_REP * reps);
            const timing b = summarize(s1 + i * reps, reps), c = summarize(s2 + i * reps, reps);
            const double bw1 = summarize(w1 + i * reps, reps).min, bw2 = summarize(w2 + i * reps, reps).min;
            const double bpt = 2.0 * rb;
            printf("%-18s %5.0f | %6.2f %6.2f | %6.2f %6.2f %6.2f %6.1f | %6.2f %6.2f %6.2f %6.1f\n", kn->name, bpt,
                   a.min, a.med, b.min, b.med, bpt / b.min, bw1, c.min, c.med, bpt / c.min, bw2);
        }
        fflush(stdout);
        free(l1), free(s1), free(s2), free(w1), free(w2);
        for (int c = 0; c < NCACHE * nk; c++) free_cache(&caches[c]);
        kvq_free_aligned(caches);
    }
    p.quit = 1;
    pthread_barrier_wait(&p.start);
    pthread_join(th, NULL);
    kvq_free_aligned(kx), kvq_free_aligned(vx);
    return 0;
}
