/* cli_session.c — `--session FILE` for run and chat: load the saved cache
 * at start (the saved tokens need no prefill), save it again at exit. */
#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>

#include "cli.h"

int cli_session_load(kvq_ctx *ctx, const char *path, int *n_cached) {
    *n_cached = 0;
    struct stat st;
    if (stat(path, &st) != 0 && errno == ENOENT) return 1; /* the first run: nothing saved yet */
    int n = 0;
    if (kvq_ctx_session_load(ctx, path, NULL, &n) != KVQ_OK) {
        fprintf(stderr, "kvq: --session: %s (delete the file to start over)\n", kvq_last_error());
        return 0;
    }
    *n_cached = n;
    return 1;
}

int cli_session_reuse(kvq_ctx *ctx, const int32_t *prompt, int n_prompt) {
    int n = 0;
    const int32_t *cached = kvq_ctx_tokens(ctx, &n);
    int same = 0;
    while (same < n && same < n_prompt && cached[same] == prompt[same]) same++;
    /* The last prompt token is evaluated again: its logits start the reply. */
    if (same == n_prompt && same > 0) same--;
    kvq_ctx_truncate(ctx, same);
    return same;
}

int cli_session_save(const kvq_ctx *ctx, const char *path) {
    if (kvq_ctx_session_save(ctx, path) != KVQ_OK) {
        fprintf(stderr, "kvq: --session: %s\n", kvq_last_error());
        return 0;
    }
    return 1;
}
