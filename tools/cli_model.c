/* cli_model.c — the options every model command shares (run, chat, bench,
 * ppl): model path, threads, context, batch and the KV cache config. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

void cli_model_opts_init(cli_model_opts *o) {
    memset(o, 0, sizeof *o);
    kvq_ctx_params_default(&o->ctx);
}

const char *cli_model_opts_help(void) {
    return "model and cache options:\n"
           "  -m, --model FILE      GGUF model (default: $KVQ_MODEL, else the cached default\n"
           "                        model; `make model` fetches it)\n"
           "  -t, --threads N       threads (default: every core)\n"
           "  -c, --ctx-size N      context length (default: the model's trained length)\n"
           "  -b, --batch-size N    prompt tokens per forward chunk (default " CLI_STR(KVQ_DEFAULT_N_BATCH) ")\n"
           "  -ctk, --cache-type-k T  K codec (default f16); `kvq codecs` lists them\n"
           "  -ctv, --cache-type-v T  V codec (default f16)\n"
           "  --kv NAME             preset for both: a codec name (K = V) or k8v4, k_iso3,\n"
           "                        k_iso4, k_rotor3, k_rotor4, iso3_sym, iso4_sym,\n"
           "                        rotor3_sym, rotor4_sym, rot_k_tq4v, auto\n"
           "  --kv-sinks N          keep the first N tokens in f16 (default 0)\n"
           "  --kv-boundary L       first and last L layers use q8_0 (default 0)\n"
           "  --kv-no-center        do not remove per-channel means before quantizing\n"
           "  --kv-seed N           rotation seed of rotated codecs (default 0)\n"
           "  --kv-layout L         auto (default), rows or interleaved: how compressed\n"
           "                        tiles are stored. interleaved feeds the integer\n"
           "                        attention kernel, auto picks it where the CPU has\n"
           "                        AVX2 or better; it rounds the query and the softmax\n"
           "                        weights to 8 bits (AVX-512 VNNI) or up to 15 (AVX2).\n"
           "                        rows keeps float attention\n"
           "  --int8-prefill        int8 activations in prompt matmuls, as ggml does:\n"
           "                        faster prompts, logits move (default: float)\n"
           "  --float-decode        float activations in decode matvecs (default: 16-bit\n"
           "                        integer codes per block of 32 on AVX2 and AVX-512\n"
           "                        VNNI CPUs)\n"
           "  --mmap                map the model file instead of reading it into memory\n"
           "                        in huge pages: starts at once and shares the page\n"
           "                        cache, but decodes ~13% slower at depth 0 (4 KiB pages)\n";
}

static int is(const char *a, const char *s1, const char *s2) {
    return !strcmp(a, s1) || (s2 && !strcmp(a, s2));
}

int cli_model_opts_parse(cli_model_opts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    const char *val = *i + 1 < argc ? argv[*i + 1] : NULL;
    long v;
    if (is(a, "-m", "--model")) {
        if (!val) goto missing;
        o->model = val;
    } else if (is(a, "-t", "--threads")) {
        if (!cli_parse_int(a, val, 1, 256, &v)) return -1;
        o->ctx.n_threads = (int)v;
    } else if (is(a, "-c", "--ctx-size")) {
        if (!cli_parse_int(a, val, 1, 1 << 24, &v)) return -1;
        o->ctx.n_ctx = (int)v;
    } else if (is(a, "-b", "--batch-size")) {
        if (!cli_parse_int(a, val, 1, 4096, &v)) return -1;
        o->ctx.n_batch = (int)v;
    } else if (is(a, "-ctk", "--cache-type-k") || !strcmp(a, "--ctk")) {
        if (!val) goto missing;
        o->ctx.ctk = val;
    } else if (is(a, "-ctv", "--cache-type-v") || !strcmp(a, "--ctv")) {
        if (!val) goto missing;
        o->ctx.ctv = val;
    } else if (is(a, "--kv", NULL)) {
        if (!val) goto missing;
        if (kvq_kv_preset(val, &o->ctx.ctk, &o->ctx.ctv) != KVQ_OK) {
            fprintf(stderr, "kvq: --kv: %s\n", kvq_last_error());
            return -1;
        }
        o->kv_preset = val;
    } else if (is(a, "--kv-sinks", NULL)) {
        if (!cli_parse_int(a, val, 0, 1 << 20, &v)) return -1;
        o->ctx.n_sinks = (int)v;
    } else if (is(a, "--kv-boundary", NULL)) {
        if (!cli_parse_int(a, val, 0, 4096, &v)) return -1;
        o->ctx.boundary_layers = (int)v;
    } else if (is(a, "--kv-seed", NULL)) {
        if (!cli_parse_int(a, val, 0, 2147483647L, &v)) return -1;
        o->ctx.seed = (uint64_t)v;
    } else if (is(a, "--kv-layout", NULL)) {
        if (!val) goto missing;
        static const char *const layouts[] = {"auto", "rows", "interleaved"};
        static const int values[] = {KVQ_TILES_AUTO, KVQ_TILES_ROWS, KVQ_TILES_INTERLEAVED};
        int k = 0;
        while (k < 3 && strcmp(val, layouts[k])) k++;
        if (k == 3) {
            fprintf(stderr, "kvq: --kv-layout: '%s' is not auto, rows or interleaved\n", val);
            return -1;
        }
        o->ctx.kv_tile_layout = values[k];
    } else if (is(a, "--int8-prefill", NULL)) {
        o->ctx.int8_prefill = 1;
        return 1;
    } else if (is(a, "--float-decode", NULL)) {
        o->ctx.float_decode = 1;
        return 1;
    } else if (is(a, "--mmap", NULL)) {
        o->mmap = 1;
        return 1;
    } else if (is(a, "--kv-no-center", NULL)) {
        o->ctx.centering = 0;
        return 1;
    } else {
        return 0;
    }
    (*i)++;
    return 1;
missing:
    fprintf(stderr, "kvq: %s needs a value\n", a);
    return -1;
}

int cli_model_load_path(const cli_model_opts *o, const char *path, kvq_model **model) {
    if (kvq_model_load_with(path, o->mmap ? KVQ_WEIGHTS_MAPPED : KVQ_WEIGHTS_RESIDENT, model) != KVQ_OK) {
        fprintf(stderr, "kvq: %s: %s\n", path, kvq_last_error());
        return 0;
    }
    if (!o->mmap && kvq_model_weights_mode(*model) == KVQ_WEIGHTS_MAPPED)
        fprintf(stderr, "kvq: note: %s is mapped, not read into memory (it would take most of the free memory,"
                        " the free memory is unknown, or the allocation was refused): decode reads it through small"
                        " pages, slower\n", path);
    return 1;
}

int cli_model_load(cli_model_opts *o, kvq_model **model) {
    if (!o->model) {
        if (!cli_default_model(o->model_buf, sizeof o->model_buf)) return 0;
        o->model = o->model_buf;
    }
    return cli_model_load_path(o, o->model, model);
}

const char *cli_kv_label(const cli_model_opts *o, char *buf, size_t cap) {
    const char *k = o->ctx.ctk ? o->ctx.ctk : "f16", *v = o->ctx.ctv ? o->ctx.ctv : "f16";
    if (o->kv_preset) snprintf(buf, cap, "%s (K %s, V %s)", o->kv_preset, k, v);
    else snprintf(buf, cap, "K %s, V %s", k, v);
    return buf;
}
