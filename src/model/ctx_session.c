/* ctx_session.c — saves a context's cache to a session file and loads it
 * back: the model's fingerprint, the atomic write (temp file, fsync,
 * rename, fsync of the directory) and the all-or-nothing load. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kv/kv_session.h"
#include "model/ctx.h"

static void fingerprint(const kvq_model *m, kvq_session_fp *fp) {
    memset(fp, 0, sizeof *fp);
    memcpy(fp->arch, m->arch_name, strnlen(m->arch_name, sizeof fp->arch - 1));
    fp->n_layer = (uint32_t)m->n_layer;
    fp->n_embd = (uint32_t)m->n_embd;
    fp->n_head = (uint32_t)m->n_head;
    fp->n_kv_head = (uint32_t)m->n_kv_head;
    fp->head_dim = (uint32_t)m->head_dim;
    fp->n_vocab = (uint32_t)m->n_vocab;
    fp->meta_hash = kvq_gguf_meta_hash(m->gguf);
}

/* fsync of the directory holding path, so the rename itself is durable. */
static int sync_dir(const char *path) {
    char dir[4096];
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == path) snprintf(dir, sizeof dir, "/");
    else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    const int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    const int r = fsync(fd);
    close(fd);
    return r;
}

kvq_status kvq_ctx_session_save(const kvq_ctx *c, const char *path) {
    KVQ_RETURN_IF(!c || !path || !path[0], KVQ_ERR_INVALID_ARG, "kvq_ctx_session_save: NULL argument");
    char tmp[4200];
    KVQ_RETURN_IF((size_t)snprintf(tmp, sizeof tmp, "%s.tmp-%ld", path, (long)getpid()) >= sizeof tmp,
                  KVQ_ERR_INVALID_ARG, "session: path '%.64s...' is too long", path);
    kvq_session_fp fp;
    fingerprint(c->m, &fp);
    FILE *f = fopen(tmp, "wb");
    KVQ_RETURN_IF(!f, KVQ_ERR_IO, "session: cannot create '%s': %s", tmp, strerror(errno));
    kvq_status s = kvq_kv_session_write(f, &fp, c->kv, c->tokens, c->n_past);
    /* fflush + fsync before the rename: otherwise a crash can leave the
     * new name pointing at a file whose data never reached the disk. */
    int e = 0;
    if (s == KVQ_OK && (fflush(f) != 0 || fsync(fileno(f)) != 0)) e = errno;
    if (fclose(f) != 0 && s == KVQ_OK && !e) e = errno;
    if (s == KVQ_OK && e) s = kvq_fail(KVQ_ERR_IO, "session: cannot write '%s': %s", tmp, strerror(e));
    else if (s != KVQ_OK) {
        char why[400];
        snprintf(why, sizeof why, "%s", kvq_last_error()); /* kvq_fail overwrites it */
        s = kvq_fail(s, "session: cannot write '%s': %s", tmp, why);
    }
    if (s == KVQ_OK && rename(tmp, path) != 0)
        s = kvq_fail(KVQ_ERR_IO, "session: cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
    if (s != KVQ_OK) {
        unlink(tmp);
        return s;
    }
    KVQ_RETURN_IF(sync_dir(path) != 0, KVQ_ERR_IO, "session: '%s' written, but syncing its directory failed: %s",
                  path, strerror(errno));
    return KVQ_OK;
}

/* The session bytes already in memory (the fuzz target calls this). */
kvq_status kvq_ctx_session_load_bytes(kvq_ctx *c, const uint8_t *data, size_t size) {
    kvq_session_fp fp;
    fingerprint(c->m, &fp);
    kvq_kv *kv;
    int32_t *tokens;
    int n;
    KVQ_FORWARD(kvq_kv_session_parse(data, size, &fp, &c->kv->p, c->p.n_ctx, &kv, &tokens, &n));
    kvq_ctx_adopt(c, kv, tokens, n);
    return KVQ_OK;
}

kvq_status kvq_ctx_session_load(kvq_ctx *c, const char *path, const int32_t **tokens, int *n_tokens) {
    KVQ_RETURN_IF(!c || !path, KVQ_ERR_INVALID_ARG, "kvq_ctx_session_load: NULL argument");
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    KVQ_RETURN_IF(fd < 0, KVQ_ERR_IO, "session: cannot open '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return kvq_fail(KVQ_ERR_IO, "session: '%s' is not a regular file", path);
    }
    const size_t size = (size_t)st.st_size;
    uint8_t *data = malloc(size ? size : 1);
    if (!data) {
        close(fd);
        return kvq_fail(KVQ_ERR_NOMEM, "session: out of memory for '%s' (%zu bytes)", path, size);
    }
    size_t got = 0;
    while (got < size) {
        const ssize_t r = read(fd, data + got, size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    const int e = errno;
    close(fd);
    kvq_status s = got == size ? kvq_ctx_session_load_bytes(c, data, size)
                               : kvq_fail(KVQ_ERR_IO, "session: cannot read '%s': %s", path, strerror(e));
    free(data);
    if (s != KVQ_OK && s != KVQ_ERR_IO) {
        char why[400];
        snprintf(why, sizeof why, "%s", kvq_last_error()); /* kvq_fail overwrites it */
        s = kvq_fail(s, "%s: %s", path, why);
    }
    if (s == KVQ_OK) {
        if (tokens) *tokens = c->tokens;
        if (n_tokens) *n_tokens = c->n_past;
    }
    return s;
}
