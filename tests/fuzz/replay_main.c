/* replay_main.c — replays a fuzz target's corpus as a regression test,
 * without libFuzzer: linked with one tests/fuzz/fuzz_*.c, it calls
 * LLVMFuzzerTestOneInput on every file of the directories given.
 *
 * Each file runs in its own child process, so a crash or sanitizer abort
 * fails that file alone and the rest still run. The input is an exact-size
 * heap copy, as libFuzzer gives it, so overreads show under ASan. Prints
 * "ok   FILE" / "FAIL FILE (why)" and closes with "N passed, N failed". */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fuzz.h"

static int run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cannot open %s: %s\n", path, strerror(errno));
        return 0;
    }
    size_t cap = 4096, len = 0;
    uint8_t *buf = malloc(cap); // (cap) the file's bytes
    size_t got;
    while (buf && (got = fread(buf + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap) {
            uint8_t *p = realloc(buf, cap * 2);
            if (!p) free(buf);
            buf = p;
            cap *= 2;
        }
    }
    const int read_error = ferror(f);
    fclose(f);
    if (!buf || read_error) {
        fprintf(stderr, "cannot read %s\n", path);
        free(buf);
        return 0;
    }
    uint8_t *exact = malloc(len ? len : 1); // (len) what the target sees
    if (!exact) {
        free(buf);
        return 0;
    }
    memcpy(exact, buf, len);
    free(buf);
    LLVMFuzzerTestOneInput(exact, len);
    free(exact);
    return 1;
}

/* File-scope, so that LeakSanitizer in a child sees the list as reachable. */
static char **names; // (files in the directory)

static int by_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR...\n", argv[0]);
        return 2;
    }
    int passed = 0, failed = 0;
    for (int a = 1; a < argc; a++) {
        DIR *dir = opendir(argv[a]);
        if (!dir) {
            printf("FAIL %s (cannot open: %s)\n", argv[a], strerror(errno));
            failed++;
            continue;
        }
        names = NULL;
        size_t n = 0;
        struct dirent *e;
        while ((e = readdir(dir))) {
            if (e->d_name[0] == '.') continue;
            char **p = realloc(names, sizeof *names * (n + 1));
            if (!p || !(p[n] = strdup(e->d_name))) {
                fprintf(stderr, "out of memory\n");
                return 2;
            }
            names = p;
            n++;
        }
        closedir(dir);
        if (n == 0) {
            printf("FAIL %s (empty corpus)\n", argv[a]);
            failed++;
        }
        qsort(names, n, sizeof *names, by_name);
        for (size_t i = 0; i < n; i++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[a], names[i]);
            fflush(stdout);
            const pid_t pid = fork();
            /* exit(), not _exit(): LeakSanitizer checks at exit. */
            if (pid == 0) exit(run_file(path) ? 0 : 3);
            int st = 0;
            if (pid < 0 || waitpid(pid, &st, 0) != pid) {
                printf("FAIL %s (cannot fork)\n", path);
                failed++;
            } else if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
                printf("ok   %s\n", path);
                passed++;
            } else if (WIFSIGNALED(st)) {
                printf("FAIL %s (signal %d)\n", path, WTERMSIG(st));
                failed++;
            } else {
                printf("FAIL %s (exit %d)\n", path, WEXITSTATUS(st));
                failed++;
            }
            free(names[i]);
        }
        free(names);
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
