/* rotated.c — the rotated codebook codecs (turbo, iso, planar, rotor): a
 * seeded rotation spreads each row over all channels, so that after scaling
 * to unit variance its coordinates are close to N(0,1) and a fixed Lloyd-Max
 * codebook fits them. Row format and arithmetic order: rotated.h. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codec/rotated.h"
#include "common/fp16.h"

const float kvq_rot_centroids_2[4] = {-1.5104f, -0.4528f, 0.4528f, 1.5104f};
const float kvq_rot_centroids_3[8] = {-2.1520f, -1.3439f, -0.7560f, -0.2451f, 0.2451f, 0.7560f, 1.3439f, 2.1520f};
const float kvq_rot_centroids_4[16] = {-2.7326f, -2.0690f, -1.6181f, -1.2562f, -0.9424f, -0.6568f, -0.3881f, -0.1284f,
                                       0.1284f,  0.3881f,  0.6568f,  0.9424f,  1.2562f,  1.6181f,  2.0690f,  2.7326f};

static size_t rot_row_bytes(const kvq_codec_desc *desc, int head_dim) {
    return 2 + (size_t)head_dim * (size_t)desc->param / 8;
}

/* kvq_rot_state.step and step_code (see there) of side (0 K, 1 V). A
 * score's or an output's error is the sum of q_i or p_i times these
 * roundings; the worst, in units of the N(0,1) codebook, and what they add
 * to the codec's mean squared error (cells weighted by their mass): V (64..127
 * steps) 2 bits 0.0003 at 120 steps, 3 bits 0.0021 at 88 (+0.01%), 4 bits
 * 0.0079 at 111 (+0.4%); K 2 bits 0.0003 at 30, 3 bits 0.0196 at 26 (+0.4%),
 * 4 bits 0.0132 at 63 (+0.6%). */
static void int8_steps(kvq_rot_state *st, int side) {
    const float *cent = st->centroid; /* ascending, padded with the largest */
    const float top = fabsf(cent[0]) > fabsf(cent[15]) ? fabsf(cent[0]) : fabsf(cent[15]);
    const int most = KVQ_ROT_CODE_MAX(st->bits, side);
    double best = INFINITY;
    for (int steps = (most + 1) / 2; steps <= most; steps++) {
        const double u = top / steps;
        double worst = 0;
        for (int j = 0; j < 16; j++) {
            const double x = cent[j] / u, e = fabs(x - nearbyint(x)) * u;
            if (e > worst) worst = e;
        }
        if (worst < best) {
            best = worst;
            st->step[side] = (float)u;
        }
    }
    for (int j = 0; j < 16; j++) st->step_code[side][j] = (uint8_t)(lrintf(cent[j] / st->step[side]) + 128);
}

static kvq_status rot_init(kvq_codec *c) {
    kvq_rot_state *st = calloc(1, sizeof *st);
    KVQ_RETURN_IF(!st, KVQ_ERR_NOMEM, "codec %s: out of memory", c->name);
    kvq_status s = kvq_rotation_init(&st->rot, c->desc->rotation, c->head_dim, c->seed);
    if (s != KVQ_OK) {
        free(st);
        return s;
    }
    const int b = c->desc->param, k = 1 << b;
    const float *cent = b == 2 ? kvq_rot_centroids_2 : b == 3 ? kvq_rot_centroids_3 : kvq_rot_centroids_4;
    st->bits = b;
    st->sqrt_d = (float)sqrt((double)c->head_dim);
    for (int i = 0; i < 16; i++) {
        st->centroid[i] = cent[i < k ? i : k - 1];
        st->threshold[i] = i < k - 1 ? (cent[i] + cent[i + 1]) * 0.5f : INFINITY;
    }
    int8_steps(st, 0);
    int8_steps(st, 1);
    c->state = st;
    return KVQ_OK;
}

static void rot_fini(kvq_codec *c) {
    kvq_rot_state *st = c->state;
    if (!st) return;
    kvq_rotation_free(&st->rot);
    free(st);
    c->state = NULL;
}

void kvq_rot_zero_row(const kvq_codec *c, void *dst) { memset(dst, 0, c->base_bytes); }

kvq_status kvq_rot_finish(const kvq_codec *c, const uint8_t *idx, float yc, float cc, void *dst) {
    switch (((const kvq_rot_state *)c->state)->bits) {
    case 2: return kvq_rot_finish_bits(c, idx, yc, cc, dst, 2);
    case 3: return kvq_rot_finish_bits(c, idx, yc, cc, dst, 3);
    default: return kvq_rot_finish_bits(c, idx, yc, cc, dst, 4);
    }
}

static kvq_status encode_ref(const kvq_codec *c, const float *x, void *dst) {
    const kvq_rot_state *st = c->state;
    const int d = c->head_dim, k = 1 << st->bits;
    float p[16] = {0};
    for (int i = 0; i < d; i++) p[i % 16] = p[i % 16] + x[i] * x[i];
    const float n2 = kvq_rot_reduce16(p);
    if (!(n2 <= FLT_MAX)) return KVQ_ERR_RANGE;
    if (n2 < KVQ_ROT_TINY) {
        kvq_rot_zero_row(c, dst);
        return KVQ_OK;
    }
    float y[KVQ_MAX_HEAD_DIM];   /* (d) R x */
    uint8_t idx[KVQ_MAX_HEAD_DIM]; /* (d) codebook indices */
    kvq_rotation_forward(&st->rot, KVQ_ISA_REF, x, y);
    const float inv = st->sqrt_d / sqrtf(n2);
    float pyc[16] = {0}, pcc[16] = {0};
    for (int i = 0; i < d; i++) {
        const float u = y[i] * inv;
        int q = 0;
        for (int j = 0; j < k - 1; j++) q += u > st->threshold[j];
        idx[i] = (uint8_t)q;
        const float cv = st->centroid[q];
        pyc[i % 16] = pyc[i % 16] + y[i] * cv;
        pcc[i % 16] = pcc[i % 16] + cv * cv;
    }
    return kvq_rot_finish(c, idx, kvq_rot_reduce16(pyc), kvq_rot_reduce16(pcc), dst);
}

static void decode_domain_ref(const kvq_codec *c, const void *src, float *y) {
    const kvq_rot_state *st = c->state;
    const uint8_t *in = src;
    const float s = kvq_f16_to_f32(kvq_load_u16(in));
    uint8_t idx[KVQ_MAX_HEAD_DIM]; /* (d) codebook indices */
    kvq_rot_unpack_indices(st->bits, c->head_dim, in + 2, idx);
    for (int i = 0; i < c->head_dim; i++) y[i] = s * st->centroid[idx[i]];
}

static void decode_ref(const kvq_codec *c, const void *src, float *y) {
    decode_domain_ref(c, src, y);
    kvq_rotation_inverse(&((const kvq_rot_state *)c->state)->rot, KVQ_ISA_REF, y, y);
}

#if KVQ_HAVE_X86
static void decode_avx2(const kvq_codec *c, const void *src, float *y) {
    kvq_rot_decode_domain_avx2(c, src, y);
    kvq_rotation_inverse(&((const kvq_rot_state *)c->state)->rot, KVQ_ISA_AVX2, y, y);
}

static void decode_avx512(const kvq_codec *c, const void *src, float *y) {
    kvq_rot_decode_domain_avx512(c, src, y);
    kvq_rotation_inverse(&((const kvq_rot_state *)c->state)->rot, KVQ_ISA_AVX512, y, y);
}
#endif

static void rot_select(kvq_codec *c) {
    c->encode = encode_ref;
    c->decode = decode_ref;
    c->decode_domain = decode_domain_ref;
#if KVQ_HAVE_X86
    if (c->isa >= KVQ_ISA_AVX2) {
        c->encode = kvq_rot_encode_avx2;
        c->decode = decode_avx2;
        c->decode_domain = kvq_rot_decode_domain_avx2;
        c->decode_tile_domain = kvq_rot_decode_tile_avx2;
    }
    if (c->isa >= KVQ_ISA_AVX512) {
        c->encode = kvq_rot_encode_avx512;
        c->decode = decode_avx512;
        c->decode_domain = kvq_rot_decode_domain_avx512;
        c->decode_tile_domain = kvq_rot_decode_tile_avx512;
    }
#endif
}

static void rot_to_domain(const kvq_codec *c, const float *x, float *y) {
    kvq_rotation_forward(&((const kvq_rot_state *)c->state)->rot, c->isa, x, y);
}

static void rot_from_domain(const kvq_codec *c, const float *x, float *y) {
    kvq_rotation_inverse(&((const kvq_rot_state *)c->state)->rot, c->isa, x, y);
}

const kvq_family_ops kvq_family_rot = {
    .quantized = 1,
    .row_bytes = rot_row_bytes,
    .init = rot_init,
    .fini = rot_fini,
    .select = rot_select,
    .to_domain = rot_to_domain,
    .from_domain = rot_from_domain,
};
