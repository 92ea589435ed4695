/* cmd_codecs.c — `kvq codecs`: every KV codec with its bits/value, measured
 * round-trip error on Gaussian and outlier-channel data, and speed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "kvq.h"

#define N_ROWS 1024

static uint64_t rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static float rng_normal(uint64_t *s) {
    double u1 = ((double)(rng_next(s) >> 11) + 0.5) / 9007199254740992.0;
    double u2 = (double)(rng_next(s) >> 11) / 9007199254740992.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

/* Rows of N(0,1); with outliers, 4 fixed channels scaled by 10..50. */
static void make_rows(float *x, int d, int outliers, uint64_t seed) {
    uint64_t s = seed;
    for (int i = 0; i < N_ROWS * d; i++) x[i] = rng_normal(&s);
    if (!outliers) return;
    for (int k = 0; k < 4; k++) {
        const int ch = (int)(rng_next(&s) % (uint64_t)d);
        const float gain = 10.0f + 40.0f * (float)((rng_next(&s) >> 11) / 9007199254740992.0);
        for (int r = 0; r < N_ROWS; r++) x[(size_t)r * d + ch] *= gain;
    }
}

typedef struct {
    double rel_mse_gauss, rel_mse_outlier, encode_ns, decode_ns;
} codec_stats;

static double rel_mse(kvq_codec *c, const float *x, int d, uint8_t *rows, float *y) {
    const size_t rb = kvq_codec_row_bytes(c);
    double err = 0, ref = 0;
    for (int r = 0; r < N_ROWS; r++) {
        kvq_codec_encode_row(c, x + (size_t)r * d, rows + r * rb);
        kvq_codec_decode_row(c, rows + r * rb, y);
        for (int i = 0; i < d; i++) {
            const double xi = x[(size_t)r * d + i];
            err += (xi - y[i]) * (xi - y[i]);
            ref += xi * xi;
        }
    }
    return err / ref;
}

/* Median over 7 passes of N_ROWS rows, in ns per row. */
static void time_codec(kvq_codec *c, const float *x, int d, uint8_t *rows, float *y, codec_stats *st) {
    const size_t rb = kvq_codec_row_bytes(c);
    double enc[7], dec[7];
    for (int pass = 0; pass < 7; pass++) {
        double t0 = cli_now();
        for (int r = 0; r < N_ROWS; r++) kvq_codec_encode_row(c, x + (size_t)r * d, rows + r * rb);
        double t1 = cli_now();
        for (int r = 0; r < N_ROWS; r++) kvq_codec_decode_row(c, rows + r * rb, y);
        double t2 = cli_now();
        enc[pass] = (t1 - t0) * 1e9 / N_ROWS;
        dec[pass] = (t2 - t1) * 1e9 / N_ROWS;
    }
    for (int i = 1; i < 7; i++)
        for (int j = i; j > 0 && enc[j] < enc[j - 1]; j--) {
            double t = enc[j]; enc[j] = enc[j - 1]; enc[j - 1] = t;
        }
    for (int i = 1; i < 7; i++)
        for (int j = i; j > 0 && dec[j] < dec[j - 1]; j--) {
            double t = dec[j]; dec[j] = dec[j - 1]; dec[j - 1] = t;
        }
    st->encode_ns = enc[3];
    st->decode_ns = dec[3];
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: kvq codecs [--head-dim D] [--qjl] [-o md|json]\n"
            "\n"
            "Lists every KV codec (the names --ctk/--ctv take) with, at head_dim D:\n"
            "  bpv          bits per value, scales included\n"
            "  mse_gauss    round-trip relative MSE, sum (x-y)^2 / sum x^2, on N(0,1) rows\n"
            "  mse_outlier  the same on rows with 4 outlier channels scaled 10-50x (as K caches have)\n"
            "  enc_ns       encode time per row (median of 7 passes of %d rows)\n"
            "  dec_ns       decode time per row\n"
            "\n"
            "  --head-dim D  64 by default; a multiple of 32 up to %d\n"
            "  --qjl         also list every quantized codec with +qjl (K residual sketch)\n"
            "  -o FORMAT     md (default) or json (one object per line)\n"
            "The ISA path is the best this CPU has; KVQ_ISA=ref|avx2 forces a lower one.\n",
            N_ROWS, KVQ_MAX_HEAD_DIM);
}

static int report(const char *name, int d, int json, const float *gauss, const float *outl, uint8_t *rows,
                  float *y) {
    kvq_codec *c = NULL;
    if (kvq_codec_create(name, d, 1234, &c) != KVQ_OK) {
        fprintf(stderr, "kvq codecs: %s\n", kvq_last_error());
        return 1;
    }
    codec_stats st;
    st.rel_mse_gauss = rel_mse(c, gauss, d, rows, y);
    st.rel_mse_outlier = rel_mse(c, outl, d, rows, y);
    time_codec(c, gauss, d, rows, y, &st);
    const double bpv = kvq_codec_bits_per_value(c);
    if (json)
        printf("{\"codec\": \"%s\", \"head_dim\": %d, \"bits_per_value\": %.4f, \"rel_mse_gauss\": %.4g, "
               "\"rel_mse_outlier\": %.4g, \"encode_ns\": %.1f, \"decode_ns\": %.1f, \"isa\": \"%s\"}\n",
               name, d, bpv, st.rel_mse_gauss, st.rel_mse_outlier, st.encode_ns, st.decode_ns,
               kvq_isa_name(kvq_codec_isa(c)));
    else
        printf("| %-12s | %6.3f | %10.3g | %11.3g | %7.1f | %7.1f |\n", name, bpv, st.rel_mse_gauss,
               st.rel_mse_outlier, st.encode_ns, st.decode_ns);
    kvq_codec_free(c);
    return 0;
}

int cmd_codecs(int argc, char **argv) {
    long d = 64;
    int json = 0, qjl = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--head-dim")) {
            if (!cli_parse_int(a, i + 1 < argc ? argv[++i] : NULL, 32, KVQ_MAX_HEAD_DIM, &d)) return 2;
            if (d % 32) {
                fprintf(stderr, "kvq codecs: --head-dim %ld is not a multiple of 32\n", d);
                return 2;
            }
        } else if (!strcmp(a, "--qjl")) {
            qjl = 1;
        } else if (!strcmp(a, "-o")) {
            const char *v = i + 1 < argc ? argv[++i] : "";
            if (!strcmp(v, "json")) json = 1;
            else if (!strcmp(v, "md")) json = 0;
            else {
                fprintf(stderr, "kvq codecs: -o takes md or json, not '%s'\n", v);
                return 2;
            }
        } else {
            fprintf(stderr, "kvq codecs: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    const int dim = (int)d;
    float *gauss = malloc(sizeof(float) * N_ROWS * dim), *outl = malloc(sizeof(float) * N_ROWS * dim);
    float *y = malloc(sizeof(float) * dim);
    uint8_t *rows = malloc((size_t)N_ROWS * dim * 4 + (size_t)N_ROWS * 64);
    if (!gauss || !outl || !y || !rows) {
        fprintf(stderr, "kvq codecs: out of memory\n");
        return 1;
    }
    make_rows(gauss, dim, 0, 1);
    make_rows(outl, dim, 1, 2);
    if (!json) {
        printf("head_dim %d, isa %s\n\n", dim, kvq_isa_name(kvq_isa_default()));
        printf("| codec        |    bpv |  mse_gauss | mse_outlier |  enc_ns |  dec_ns |\n");
        printf("|--------------|-------:|-----------:|------------:|--------:|--------:|\n");
    }
    int rc = 0;
    for (int i = 0; i < kvq_codec_count() && !rc; i++) {
        const char *name = kvq_codec_name_at(i);
        rc = report(name, dim, json, gauss, outl, rows, y);
        if (!rc && qjl) {
            char q[64];
            snprintf(q, sizeof q, "%s+qjl", name);
            kvq_codec *probe = NULL;
            if (kvq_codec_create(q, dim, 0, &probe) == KVQ_OK) {
                kvq_codec_free(probe);
                rc = report(q, dim, json, gauss, outl, rows, y);
            }
        }
    }
    free(gauss);
    free(outl);
    free(y);
    free(rows);
    return rc;
}
