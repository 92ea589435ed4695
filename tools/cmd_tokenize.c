/* cmd_tokenize.c — `kvq tokenize`: text to token ids (like llama-tokenize),
 * and --decode: ids back to text. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: kvq tokenize [-m FILE] (-p TEXT | -f FILE) [-o ids|json] [options]\n"
            "\n"
            "Prints the token ids of the text with the model's tokenizer. Adds no BOS\n"
            "and reads no special tokens unless asked.\n"
            "\n"
            "  -p, --prompt TEXT   the text            -f, --file FILE   read it (- = stdin)\n"
            "  -o ids|json         ids: one line, comma-separated (default);\n"
            "                      json: {\"ids\": [...]}\n"
            "  --add-bos           prepend the model's BOS token\n"
            "  --parse-special     read special-token texts (<|im_start|>) as specials\n"
            "  --decode            the input is comma-separated ids: print their text\n"
            "  -m, --model FILE    GGUF model (default: the cached default model)\n");
}

static int decode_ids(const kvq_tokenizer *tok, const char *text) {
    const char *p = text;
    char piece[1024];
    while (*p) {
        char *end;
        const long id = strtol(p, &end, 10);
        if (end == p || id < 0 || id >= kvq_tokenizer_n_vocab(tok) || (*end && *end != ',' && *end != '\n')) {
            fprintf(stderr, "kvq tokenize: --decode: bad token id at '%.20s'\n", p);
            return 0;
        }
        size_t n;
        if (kvq_tokenizer_token_to_piece(tok, (int32_t)id, 1, piece, sizeof piece, &n) != KVQ_OK) {
            fprintf(stderr, "kvq tokenize: %s\n", kvq_last_error());
            return 0;
        }
        fwrite(piece, 1, n, stdout);
        p = *end ? end + 1 : end;
    }
    putchar('\n');
    return 1;
}

int cmd_tokenize(int argc, char **argv) {
    cli_model_opts o;
    cli_model_opts_init(&o);
    o.mmap = 1; /* only the tokenizer's metadata is read: no need to load the weights */
    const char *prompt = NULL, *file = NULL;
    int json = 0, add_bos = 0, parse_special = 0, decode = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (val && (!strcmp(a, "-m") || !strcmp(a, "--model"))) {
            o.model = argv[++i];
        } else if (val && (!strcmp(a, "-p") || !strcmp(a, "--prompt"))) {
            prompt = argv[++i];
        } else if (val && (!strcmp(a, "-f") || !strcmp(a, "--file"))) {
            file = argv[++i];
        } else if (val && !strcmp(a, "-o")) {
            if (!strcmp(val, "json")) json = 1;
            else if (strcmp(val, "ids")) {
                fprintf(stderr, "kvq tokenize: -o takes ids or json, not '%s'\n", val);
                return 2;
            }
            i++;
        } else if (!strcmp(a, "--add-bos")) {
            add_bos = 1;
        } else if (!strcmp(a, "--parse-special")) {
            parse_special = 1;
        } else if (!strcmp(a, "--decode")) {
            decode = 1;
        } else {
            fprintf(stderr, "kvq tokenize: unknown option '%s' (see kvq tokenize --help)\n", a);
            return 2;
        }
    }
    if (!prompt == !file) {
        fprintf(stderr, "kvq tokenize: give exactly one of -p TEXT or -f FILE\n");
        return 2;
    }
    size_t len = prompt ? strlen(prompt) : 0;
    char *text = file ? cli_read_file(file, &len) : NULL;
    if (file && !text) return 1;
    kvq_model *model = NULL;
    kvq_tokenizer *tok = NULL;
    int32_t *ids = NULL;
    int n = 0, rc = 1;
    if (!cli_model_load(&o, &model)) goto done;
    if (kvq_model_tokenizer(model, &tok) != KVQ_OK) {
        fprintf(stderr, "kvq tokenize: %s\n", kvq_last_error());
        goto done;
    }
    if (decode) {
        rc = decode_ids(tok, text ? text : prompt) ? 0 : 1;
        goto done;
    }
    if (!cli_tokenize(tok, text ? text : prompt, len, add_bos, parse_special, &ids, &n)) goto done;
    fputs(json ? "{\"ids\": [" : "", stdout);
    for (int i = 0; i < n; i++) printf("%s%d", i ? (json ? ", " : ",") : "", ids[i]);
    puts(json ? "]}" : "");
    rc = 0;
done:
    free(text);
    free(ids);
    kvq_tokenizer_free(tok);
    kvq_model_free(model);
    return rc;
}
