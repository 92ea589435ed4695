/* kv_session.c — writes and parses the session file (layout in
 * kv_session.h). Parsing trusts nothing: every count is checked against
 * the bytes left and against the context it is loaded into before anything
 * is allocated, and every stored value is checked the way the store checks
 * what is appended to it, so a file that passes is a store kvq could have
 * built itself. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/fp16.h"
#include "common/hash.h"
#include "kv/kv_session.h"

/* Rows are written as the store holds them (f16 and codec bytes in host
 * order); the format is little-endian, so refuse to build where that
 * would differ rather than write files other hosts misread. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "session files assume a little-endian host");

static const char MAGIC[8] = {'K', 'V', 'Q', 'S', 'E', 'S', 'S', '\n'};

#define TAG(a, b, c, d) ((uint32_t)(a) | (uint32_t)(b) << 8 | (uint32_t)(c) << 16 | (uint32_t)(d) << 24)
#define TAG_FPRT TAG('F', 'P', 'R', 'T')
#define TAG_PARM TAG('P', 'A', 'R', 'M')
#define TAG_TOKS TAG('T', 'O', 'K', 'S')
#define TAG_LAYR TAG('L', 'A', 'Y', 'R')
#define SECTION_HEADER 16
#define NAME_BYTES 32
#define FPRT_BYTES (16 + 6 * 4 + 8)
#define PARM_FIXED (7 * 4 + 8 + 2 * NAME_BYTES)
#define PARM_PER_LAYER (2 * NAME_BYTES + 2 * 4)
#define LAYR_FIXED (4 * 4)

/* Body bytes of layer l's section. */
static uint64_t layer_bytes(const kvq_kv *kv, const kvq_kv_layer *L, int n_tiles, int has_mean, int sunk,
                            int staged) {
    const uint64_t d = (uint64_t)kv->p.head_dim, T = (uint64_t)kv->p.tile_tokens;
    uint64_t n = LAYR_FIXED;
    for (int kvi = 0; kvi < 2; kvi++) {
        uint64_t per = ((uint64_t)sunk + (uint64_t)staged) * d * 2 + (uint64_t)n_tiles * T * L->codec[kvi]->row_bytes;
        if (L->centered[kvi] && has_mean) per += d * 4;
        n += per * (uint64_t)kv->p.n_kv_head;
    }
    return n;
}

/* ------------------------------------------------------------------ write */

typedef struct writer {
    FILE *f;
    uint64_t hash;
    int failed;
} writer;

static void put(writer *w, const void *p, size_t n) {
    if (w->failed || !n) return;
    w->hash = kvq_fnv1a64(w->hash, p, n);
    if (fwrite(p, 1, n, w->f) != n) w->failed = 1;
}

static void put_le(writer *w, uint64_t v, int n) {
    uint8_t b[8];
    for (int i = 0; i < n; i++) b[i] = (uint8_t)(v >> (8 * i));
    put(w, b, (size_t)n);
}

static void put_name(writer *w, const char *s) {
    char b[NAME_BYTES] = {0};
    strncpy(b, s, NAME_BYTES - 1);
    put(w, b, NAME_BYTES);
}

static void put_section(writer *w, uint32_t tag, uint64_t bytes) {
    put_le(w, tag, 4);
    put_le(w, 0, 4);
    put_le(w, bytes, 8);
}

kvq_status kvq_kv_session_write(FILE *f, const kvq_session_fp *fp, const kvq_kv *kv, const int32_t *tokens,
                                int n_tokens) {
    KVQ_RETURN_IF(!f || !fp || !kv || (n_tokens && !tokens) || n_tokens < 0, KVQ_ERR_INVALID_ARG,
                  "session: bad arguments");
    const kvq_kv_params *p = &kv->p;
    for (int l = 0; l < p->n_layer; l++)
        KVQ_RETURN_IF(kv->layers[l].n_tokens != n_tokens, KVQ_ERR_INVALID_ARG,
                      "session: layer %d holds %d tokens, not %d", l, kv->layers[l].n_tokens, n_tokens);
    uint64_t payload = SECTION_HEADER + FPRT_BYTES + SECTION_HEADER + PARM_FIXED +
                       (uint64_t)p->n_layer * PARM_PER_LAYER + SECTION_HEADER + 4 + 4 * (uint64_t)n_tokens;
    for (int l = 0; l < p->n_layer; l++) {
        const kvq_kv_layer *L = &kv->layers[l];
        payload += SECTION_HEADER + layer_bytes(kv, L, L->n_tiles, L->has_mean, kvq_kv_n_sunk(kv, L),
                                                kvq_kv_n_staged(kv, L));
    }

    /* The header's checksum is patched in once the payload is written. The
     * store's flush scratch holds each tile's rows on the way out. */
    uint8_t *rows = kv->rows;
    writer w = {.f = f};
    put(&w, MAGIC, 8);
    put_le(&w, KVQ_SESSION_VERSION, 4);
    put_le(&w, 0, 4);
    put_le(&w, payload, 8);
    put_le(&w, 0, 8);
    w.hash = KVQ_FNV64_INIT;

    put_section(&w, TAG_FPRT, FPRT_BYTES);
    put(&w, fp->arch, sizeof fp->arch);
    const uint32_t dims[6] = {fp->n_layer, fp->n_embd, fp->n_head, fp->n_kv_head, fp->head_dim, fp->n_vocab};
    for (int i = 0; i < 6; i++) put_le(&w, dims[i], 4);
    put_le(&w, fp->meta_hash, 8);

    put_section(&w, TAG_PARM, PARM_FIXED + (uint64_t)p->n_layer * PARM_PER_LAYER);
    const int fields[7] = {p->n_layer,     p->n_kv_head,         p->head_dim,  p->tile_tokens,
                           p->n_sinks,     p->boundary_layers,   p->centering};
    for (int i = 0; i < 7; i++) put_le(&w, (uint32_t)fields[i], 4);
    put_le(&w, p->seed, 8);
    put_name(&w, p->ctk);
    put_name(&w, p->ctv);
    for (int l = 0; l < p->n_layer; l++) {
        const kvq_kv_layer *L = &kv->layers[l];
        for (int kvi = 0; kvi < 2; kvi++) put_name(&w, kvq_codec_name(L->codec[kvi]));
        for (int kvi = 0; kvi < 2; kvi++) put_le(&w, L->codec[kvi]->row_bytes, 4);
    }

    put_section(&w, TAG_TOKS, 4 + 4 * (uint64_t)n_tokens);
    put_le(&w, (uint32_t)n_tokens, 4);
    for (int i = 0; i < n_tokens; i++) put_le(&w, (uint32_t)tokens[i], 4);

    const size_t d = (size_t)p->head_dim, T = (size_t)p->tile_tokens;
    for (int l = 0; l < p->n_layer; l++) {
        const kvq_kv_layer *L = &kv->layers[l];
        const int sunk = kvq_kv_n_sunk(kv, L), staged = kvq_kv_n_staged(kv, L);
        put_section(&w, TAG_LAYR, layer_bytes(kv, L, L->n_tiles, L->has_mean, sunk, staged));
        put_le(&w, (uint32_t)l, 4);
        put_le(&w, (uint32_t)L->n_tokens, 4);
        put_le(&w, (uint32_t)L->n_tiles, 4);
        put_le(&w, (uint32_t)L->has_mean, 4);
        for (int s = 0; s < 2 * p->n_kv_head; s++) {
            const kvq_kv_stream *st = &L->streams[s];
            const size_t row = L->codec[s & 1]->row_bytes;
            if (L->centered[s & 1] && L->has_mean) put(&w, st->mean, d * sizeof(float));
            put(&w, st->sink, (size_t)sunk * d * 2);
            /* Files hold codec rows whatever the tile layout, so they load
             * on hosts that lay tiles out differently. */
            for (int t = 0; t < L->n_tiles && !w.failed; t++) {
                kvq_kv_tile_rows(L, s & 1, (int)T, st->tiles[t], rows);
                put(&w, rows, T * row);
            }
            put(&w, st->stage, (size_t)staged * d * 2);
        }
    }
    const uint64_t sum = w.hash;
    uint8_t b[8];
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(sum >> (8 * i));
    if (!w.failed && (fseek(f, 24, SEEK_SET) != 0 || fwrite(b, 1, 8, f) != 8)) w.failed = 1;
    KVQ_RETURN_IF(w.failed, KVQ_ERR_IO, "session: write failed");
    return KVQ_OK;
}

/* ------------------------------------------------------------------- read */

typedef struct reader {
    const uint8_t *p;
    size_t size, pos;
} reader;

static uint64_t le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static uint32_t get_u32(reader *r) {
    const uint32_t v = (uint32_t)le(r->p + r->pos, 4);
    r->pos += 4;
    return v;
}

/* Opens the next section, which must be `tag` with `want` body bytes (or
 * any length when want is 0: *len gets it). Names the section on failure. */
static kvq_status section(reader *r, uint32_t tag, const char *what, uint64_t want, uint64_t *len) {
    char name[5] = {(char)tag, (char)(tag >> 8), (char)(tag >> 16), (char)(tag >> 24), 0};
    KVQ_RETURN_IF(r->size - r->pos < SECTION_HEADER, KVQ_ERR_FORMAT,
                  "session: truncated before section %s (%s) at byte %zu", name, what,
                  r->pos + KVQ_SESSION_HEADER_BYTES);
    const uint32_t got = (uint32_t)le(r->p + r->pos, 4);
    const uint32_t zero = (uint32_t)le(r->p + r->pos + 4, 4);
    const uint64_t n = le(r->p + r->pos + 8, 8);
    KVQ_RETURN_IF(got != tag || zero, KVQ_ERR_FORMAT, "session: byte %zu: expected section %s (%s)",
                  r->pos + KVQ_SESSION_HEADER_BYTES, name, what);
    r->pos += SECTION_HEADER;
    KVQ_RETURN_IF(n > r->size - r->pos, KVQ_ERR_FORMAT,
                  "session: section %s (%s) of %llu bytes is truncated: %zu bytes left", name, what,
                  (unsigned long long)n, r->size - r->pos);
    KVQ_RETURN_IF(want && n != want, KVQ_ERR_FORMAT, "session: section %s (%s) has %llu bytes, expected %llu", name,
                  what, (unsigned long long)n, (unsigned long long)want);
    if (len) *len = n;
    return KVQ_OK;
}

static kvq_status check_fingerprint(reader *r, const kvq_session_fp *want) {
    KVQ_FORWARD(section(r, TAG_FPRT, "model fingerprint", FPRT_BYTES, NULL));
    char arch[17] = {0};
    memcpy(arch, r->p + r->pos, 16);
    r->pos += 16;
    KVQ_RETURN_IF(memcmp(arch, want->arch, 16) != 0, KVQ_ERR_UNSUPPORTED,
                  "session: made with another model: architecture '%.16s', this model is '%.16s'", arch, want->arch);
    static const char *const names[6] = {"n_layer", "n_embd", "n_head", "n_kv_head", "head_dim", "n_vocab"};
    const uint32_t have[6] = {want->n_layer, want->n_embd, want->n_head, want->n_kv_head, want->head_dim,
                              want->n_vocab};
    for (int i = 0; i < 6; i++) {
        const uint32_t v = get_u32(r);
        KVQ_RETURN_IF(v != have[i], KVQ_ERR_UNSUPPORTED, "session: made with another model: %s %u, this model has %u",
                      names[i], v, have[i]);
    }
    const uint64_t h = le(r->p + r->pos, 8);
    r->pos += 8;
    KVQ_RETURN_IF(h != want->meta_hash, KVQ_ERR_UNSUPPORTED,
                  "session: made with another model file: metadata/tokenizer hash %016llx, this model's is %016llx",
                  (unsigned long long)h, (unsigned long long)want->meta_hash);
    return KVQ_OK;
}

/* A stored codec name: NUL-terminated within its field. */
static kvq_status get_name(reader *r, const char *what, char out[NAME_BYTES]) {
    memcpy(out, r->p + r->pos, NAME_BYTES);
    r->pos += NAME_BYTES;
    KVQ_RETURN_IF(memchr(out, 0, NAME_BYTES) == NULL, KVQ_ERR_FORMAT, "session: %s name is not terminated", what);
    return KVQ_OK;
}

static kvq_status check_params(reader *r, const kvq_kv_params *want) {
    const uint64_t n = PARM_FIXED + (uint64_t)want->n_layer * PARM_PER_LAYER;
    KVQ_FORWARD(section(r, TAG_PARM, "cache parameters", n, NULL));
    static const char *const names[7] = {"n_layer", "n_kv_head", "head_dim", "tile_tokens", "kv sinks",
                                         "boundary layers", "centering"};
    const int have[7] = {want->n_layer,     want->n_kv_head,       want->head_dim, want->tile_tokens,
                         want->n_sinks,     want->boundary_layers, want->centering};
    for (int i = 0; i < 7; i++) {
        const uint32_t v = get_u32(r);
        KVQ_RETURN_IF(v != (uint32_t)have[i], KVQ_ERR_UNSUPPORTED,
                      "session: cache %s is %u in the file, %d in this context", names[i], v, have[i]);
    }
    const uint64_t seed = le(r->p + r->pos, 8);
    r->pos += 8;
    KVQ_RETURN_IF(seed != want->seed, KVQ_ERR_UNSUPPORTED,
                  "session: rotation seed is %llu in the file, %llu in this context", (unsigned long long)seed,
                  (unsigned long long)want->seed);
    char ctk[NAME_BYTES], ctv[NAME_BYTES];
    KVQ_FORWARD(get_name(r, "K codec", ctk));
    KVQ_FORWARD(get_name(r, "V codec", ctv));
    KVQ_RETURN_IF(strcmp(ctk, want->ctk) || strcmp(ctv, want->ctv), KVQ_ERR_UNSUPPORTED,
                  "session: cache codecs are K %s, V %s in the file; this context uses K %s, V %s", ctk, ctv,
                  want->ctk, want->ctv);
    return KVQ_OK;
}

/* Every layer's codecs as written against those the fresh store picked. */
static kvq_status check_layer_codecs(reader *r, const kvq_kv *kv) {
    for (int l = 0; l < kv->p.n_layer; l++) {
        const kvq_kv_layer *L = &kv->layers[l];
        for (int kvi = 0; kvi < 2; kvi++) {
            char name[NAME_BYTES];
            KVQ_FORWARD(get_name(r, "layer codec", name));
            KVQ_RETURN_IF(strcmp(name, kvq_codec_name(L->codec[kvi])), KVQ_ERR_UNSUPPORTED,
                          "session: layer %d %s codec is %s in the file, %s in this context", l, kvi ? "V" : "K",
                          name, kvq_codec_name(L->codec[kvi]));
        }
        for (int kvi = 0; kvi < 2; kvi++) {
            const uint32_t row = get_u32(r);
            KVQ_RETURN_IF(row != L->codec[kvi]->row_bytes, KVQ_ERR_UNSUPPORTED,
                          "session: layer %d %s rows are %u bytes in the file, %zu in this build", l,
                          kvi ? "V" : "K", row, L->codec[kvi]->row_bytes);
        }
    }
    return KVQ_OK;
}

static kvq_status read_tokens(reader *r, const kvq_session_fp *fp, int n_ctx, int32_t **out, int *n_out) {
    uint64_t len;
    KVQ_FORWARD(section(r, TAG_TOKS, "tokens", 0, &len));
    KVQ_RETURN_IF(len < 4, KVQ_ERR_FORMAT, "session: section TOKS (tokens) has %llu bytes, fewer than its count",
                  (unsigned long long)len);
    const uint32_t n = get_u32(r);
    KVQ_RETURN_IF(len != 4 + 4 * (uint64_t)n, KVQ_ERR_FORMAT,
                  "session: %u tokens do not fill section TOKS (tokens) of %llu bytes", n, (unsigned long long)len);
    KVQ_RETURN_IF(n > (uint32_t)n_ctx, KVQ_ERR_RANGE, "session: holds %u tokens, more than this context's %d", n,
                  n_ctx);
    int32_t *t = malloc(sizeof *t * (n ? n : 1));
    KVQ_RETURN_IF(!t, KVQ_ERR_NOMEM, "session: out of memory for %u tokens", n);
    for (uint32_t i = 0; i < n; i++) {
        const uint32_t id = get_u32(r);
        if (id >= fp->n_vocab) {
            free(t);
            return kvq_fail(KVQ_ERR_FORMAT, "session: token %u at index %u is not in the vocabulary [0, %u)", id, i,
                            fp->n_vocab);
        }
        t[i] = (int32_t)id;
    }
    *out = t;
    *n_out = (int)n;
    return KVQ_OK;
}

/* f16 rows (n values) as a quantized codec's input must be: finite. */
static int f16_finite(const uint16_t *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if ((x[i] & 0x7C00) == 0x7C00) return 0;
    return 1;
}

/* Layer l's section into the fresh store's layer (same shape). */
static kvq_status read_layer(reader *r, kvq_kv *kv, int l, int n_tokens) {
    kvq_kv_layer *L = &kv->layers[l];
    const kvq_kv_params *p = &kv->p;
    const int T = p->tile_tokens, d = p->head_dim;
    const int sunk = n_tokens < p->n_sinks ? n_tokens : p->n_sinks;
    const int n_tiles = (n_tokens - sunk) / T, staged = n_tokens - sunk - n_tiles * T;
    const int has_mean = n_tiles > 0;
    uint64_t len;
    KVQ_FORWARD(section(r, TAG_LAYR, "layer", 0, &len));
    KVQ_RETURN_IF(len < LAYR_FIXED, KVQ_ERR_FORMAT, "session: layer %d section of %llu bytes is too short", l,
                  (unsigned long long)len);
    const uint32_t idx = get_u32(r), nt = get_u32(r), ntiles = get_u32(r), hm = get_u32(r);
    KVQ_RETURN_IF(idx != (uint32_t)l, KVQ_ERR_FORMAT, "session: layer section %d says it is layer %u", l, idx);
    KVQ_RETURN_IF(nt != (uint32_t)n_tokens || ntiles != (uint32_t)n_tiles || hm != (uint32_t)has_mean,
                  KVQ_ERR_FORMAT,
                  "session: layer %d holds %u tokens in %u tiles (mean %u); %d tokens need %d tiles (mean %d)", l,
                  nt, ntiles, hm, n_tokens, n_tiles, has_mean);
    const uint64_t want = layer_bytes(kv, L, n_tiles, has_mean, sunk, staged);
    KVQ_RETURN_IF(len != want, KVQ_ERR_FORMAT, "session: layer %d section has %llu bytes, expected %llu", l,
                  (unsigned long long)len, (unsigned long long)want);
    KVQ_FORWARD(kvq_kv_reserve_tiles(kv, l, n_tiles));
    float y[KVQ_MAX_HEAD_DIM];
    for (int s = 0; s < 2 * p->n_kv_head; s++) {
        kvq_kv_stream *st = &L->streams[s];
        const kvq_codec *c = L->codec[s & 1];
        const int quantized = c->desc->family->quantized;
        const char *what = s & 1 ? "V" : "K";
        if (L->centered[s & 1] && has_mean) {
            memcpy(st->mean, r->p + r->pos, (size_t)d * sizeof(float));
            r->pos += (size_t)d * sizeof(float);
            for (int i = 0; i < d; i++)
                KVQ_RETURN_IF(!isfinite(st->mean[i]), KVQ_ERR_FORMAT,
                              "session: layer %d head %d %s centering mean holds NaN or Inf", l, s / 2, what);
        }
        const size_t sink_bytes = (size_t)sunk * d * 2, stage_bytes = (size_t)staged * d * 2;
        if (sink_bytes) memcpy(st->sink, r->p + r->pos, sink_bytes);
        r->pos += sink_bytes;
        const int q8 = c->desc->family == &kvq_family_ggml && c->desc->param == KVQ_GGML_Q8_0 && !c->qjl;
        for (int t = 0; t < n_tiles; t++) {
            const uint8_t *rows = r->p + r->pos;
            r->pos += (size_t)T * c->row_bytes;
            /* Decoding accepts any bytes; a row that decodes to NaN or Inf
             * could not have come from the store's encoder, nor a q8_0 block
             * scale with its sign bit set (max |x| / 127; the integer
             * kernel's P x V relies on it). */
            for (int row = 0; quantized && row < T; row++) {
                const uint8_t *src = rows + (size_t)row * c->row_bytes;
                kvq_codec_decode_row(c, src, y);
                for (int i = 0; i < d; i++)
                    KVQ_RETURN_IF(!isfinite(y[i]), KVQ_ERR_FORMAT,
                                  "session: layer %d head %d %s tile %d row %d decodes to NaN or Inf", l, s / 2, what,
                                  t, row);
                for (int b = 0; q8 && b < d / 32; b++)
                    KVQ_RETURN_IF(src[34 * b + 1] & 0x80, KVQ_ERR_FORMAT,
                                  "session: layer %d head %d %s tile %d row %d has a negative q8_0 scale", l, s / 2,
                                  what, t, row);
            }
            if (L->interleaved[s & 1]) kvq_kv_tile_pack(c, s & 1, T, rows, st->tiles[t]);
            else memcpy(st->tiles[t], rows, (size_t)T * c->row_bytes);
        }
        if (stage_bytes) memcpy(st->stage, r->p + r->pos, stage_bytes);
        r->pos += stage_bytes;
        KVQ_RETURN_IF(quantized && (!f16_finite(st->sink, (size_t)sunk * d) ||
                                    !f16_finite(st->stage, (size_t)staged * d)),
                      KVQ_ERR_FORMAT, "session: layer %d head %d %s sink or staging rows hold NaN or Inf", l, s / 2,
                      what);
    }
    L->n_tokens = n_tokens;
    L->n_tiles = n_tiles;
    L->has_mean = has_mean;
    return KVQ_OK;
}

static kvq_status parse_payload(reader *r, const kvq_session_fp *want_fp, const kvq_kv_params *want, int n_ctx,
                                kvq_kv **kv, int32_t **tokens, int *n_tokens) {
    KVQ_FORWARD(check_fingerprint(r, want_fp));
    KVQ_FORWARD(check_params(r, want));
    KVQ_FORWARD(kvq_kv_create(want, kv));
    KVQ_FORWARD(check_layer_codecs(r, *kv));
    KVQ_FORWARD(read_tokens(r, want_fp, n_ctx, tokens, n_tokens));
    for (int l = 0; l < want->n_layer; l++) KVQ_FORWARD(read_layer(r, *kv, l, *n_tokens));
    KVQ_RETURN_IF(r->pos != r->size, KVQ_ERR_FORMAT, "session: %zu bytes after the last layer", r->size - r->pos);
    return KVQ_OK;
}

kvq_status kvq_kv_session_parse(const uint8_t *data, size_t size, const kvq_session_fp *want_fp,
                                const kvq_kv_params *want, int n_ctx, kvq_kv **kv, int32_t **tokens,
                                int *n_tokens) {
    KVQ_RETURN_IF(!want_fp || !want || !kv || !tokens || !n_tokens || (!data && size), KVQ_ERR_INVALID_ARG,
                  "session: NULL argument");
    *kv = NULL;
    *tokens = NULL;
    *n_tokens = 0;
    KVQ_RETURN_IF(size < KVQ_SESSION_HEADER_BYTES, KVQ_ERR_FORMAT,
                  "session: %zu bytes, fewer than the %d-byte header", size, KVQ_SESSION_HEADER_BYTES);
    KVQ_RETURN_IF(memcmp(data, MAGIC, 8) != 0, KVQ_ERR_FORMAT, "session: not a kvq session file (bad magic)");
    const uint32_t version = (uint32_t)le(data + 8, 4);
    KVQ_RETURN_IF(version != KVQ_SESSION_VERSION, KVQ_ERR_UNSUPPORTED,
                  "session: format version %u; this kvq reads version %d", version, KVQ_SESSION_VERSION);
    KVQ_RETURN_IF(le(data + 12, 4) != 0, KVQ_ERR_FORMAT, "session: reserved header field is not 0");
    const uint64_t payload = le(data + 16, 8);
    KVQ_RETURN_IF(payload != size - KVQ_SESSION_HEADER_BYTES, KVQ_ERR_FORMAT,
                  "session: header says %llu payload bytes, the file has %zu (truncated or appended to)",
                  (unsigned long long)payload, size - KVQ_SESSION_HEADER_BYTES);
    const uint64_t sum = le(data + 24, 8);
    const uint64_t got = kvq_fnv1a64(KVQ_FNV64_INIT, data + KVQ_SESSION_HEADER_BYTES, (size_t)payload);
    KVQ_RETURN_IF(sum != got, KVQ_ERR_FORMAT, "session: checksum mismatch (stored %016llx, computed %016llx): damaged",
                  (unsigned long long)sum, (unsigned long long)got);
    reader r = {data + KVQ_SESSION_HEADER_BYTES, (size_t)payload, 0};
    const kvq_status s = parse_payload(&r, want_fp, want, n_ctx, kv, tokens, n_tokens);
    if (s != KVQ_OK) {
        kvq_kv_free(*kv);
        free(*tokens);
        *kv = NULL;
        *tokens = NULL;
        *n_tokens = 0;
    }
    return s;
}
