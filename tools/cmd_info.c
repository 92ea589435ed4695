/* cmd_info.c — `kvq info`: a GGUF file's header, metadata and tensor table. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "kvq.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: kvq info [-m FILE]\n"
            "\n"
            "Prints a GGUF file's version, its metadata (arrays summarized: element\n"
            "type, length, first items) and its tensor table (name, type, dims, bytes,\n"
            "file offset), then totals per tensor type.\n"
            "\n"
            "  -m, --model FILE  the GGUF file; by default $KVQ_MODEL, else the default\n"
            "                    model that `make model` caches:\n"
            "                    ${KVQ_CACHE:-~/.cache/kvq}/%s\n",
            CLI_DEFAULT_MODEL_NAME);
}

/* Per ggml type: tensors, elements and bytes. */
typedef struct {
    int type;
    const char *name;
    int supported;
    int64_t tensors, elements;
    uint64_t bytes;
} type_total;

static void print_tensors(const kvq_gguf *g) {
    type_total totals[64];
    int n_types = 0;
    int64_t all_elements = 0;
    uint64_t all_bytes = 0;
    const int64_t n = kvq_gguf_tensor_count(g);
    printf("\ntensors (%" PRId64 "):\n", n);
    printf("%5s  %-34s %-8s %-24s %12s %12s\n", "#", "name", "type", "dims", "bytes", "offset");
    for (int64_t i = 0; i < n; i++) {
        char dims[64];
        int len = 0;
        int64_t elements = 1;
        for (int d = 0; d < kvq_gguf_tensor_n_dims(g, i); d++) {
            const int64_t ne = kvq_gguf_tensor_dim(g, i, d);
            elements *= ne; /* the library checked the product fits */
            len += snprintf(dims + len, sizeof dims - (size_t)len, "%s%" PRId64, d ? " x " : "", ne);
        }
        const int type = kvq_gguf_tensor_type(g, i);
        const uint64_t bytes = kvq_gguf_tensor_bytes(g, i);
        printf("%5" PRId64 "  %-34s %-8s %-24s %12" PRIu64 " %12" PRIu64 "%s\n", i, kvq_gguf_tensor_name(g, i),
               kvq_gguf_tensor_type_name(g, i), dims, bytes, kvq_gguf_tensor_offset(g, i),
               kvq_gguf_tensor_type_supported(g, i) ? "" : "  (type unsupported)");
        all_elements += elements;
        all_bytes += bytes;
        int k = 0;
        while (k < n_types && totals[k].type != type) k++;
        if (k == n_types && n_types < (int)(sizeof totals / sizeof totals[0]))
            totals[n_types++] = (type_total){type, kvq_gguf_tensor_type_name(g, i),
                                             kvq_gguf_tensor_type_supported(g, i), 0, 0, 0};
        if (k < n_types) {
            totals[k].tensors++;
            totals[k].elements += elements;
            totals[k].bytes += bytes;
        }
    }
    printf("\ntotals:\n");
    for (int k = 0; k < n_types; k++)
        printf("  %-8s %5" PRId64 " tensors %14" PRId64 " values %14" PRIu64 " bytes (%.2f bits/value)%s\n",
               totals[k].name, totals[k].tensors, totals[k].elements, totals[k].bytes,
               8.0 * (double)totals[k].bytes / (double)totals[k].elements,
               totals[k].supported ? "" : "  unsupported");
    printf("  %-8s %5" PRId64 " tensors %14" PRId64 " values %14" PRIu64 " bytes (%.2f MiB)\n", "all", n,
           all_elements, all_bytes, (double)all_bytes / (1024.0 * 1024.0));
}

int cmd_info(int argc, char **argv) {
    const char *model = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "kvq info: %s needs a file\n", a);
                return 2;
            }
            model = argv[++i];
        } else {
            fprintf(stderr, "kvq info: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    char path[4096];
    if (!model) {
        if (!cli_default_model(path, sizeof path)) return 1;
        model = path;
    }
    kvq_gguf *g = NULL;
    if (kvq_gguf_open(model, &g) != KVQ_OK) {
        fprintf(stderr, "kvq info: %s\n", kvq_last_error());
        return 1;
    }
    printf("file: %s\n", model);
    printf("gguf version %" PRIu32 ", %" PRIu64 " bytes, alignment %" PRIu64 ", tensor data at offset %" PRIu64 "\n",
           kvq_gguf_version(g), kvq_gguf_file_size(g), kvq_gguf_alignment(g), kvq_gguf_data_offset(g));
    printf("\nmetadata (%" PRId64 " keys):\n", kvq_gguf_kv_count(g));
    char value[160];
    for (int64_t i = 0; i < kvq_gguf_kv_count(g); i++) {
        kvq_gguf_kv_value_text(g, i, value, sizeof value);
        printf("  %-40s %-14s %s\n", kvq_gguf_kv_key(g, i), kvq_gguf_kv_type_name(g, i), value);
    }
    print_tensors(g);
    kvq_gguf_close(g);
    return 0;
}
