/* meminfo.c — how much memory this process may still take.
 *
 * MemAvailable counts the whole machine; inside a container the cgroup's
 * limit is often far lower, and past it the OOM killer ends the process
 * hours into a run instead of kvq refusing the context at the start
 * (ctx_mem.c) or mapping the model instead of reading it in (gguf.c). So
 * the answer is the lower of MemAvailable and the room that every memory
 * cgroup from the process's own up to its hierarchy's mount leaves: v2
 * memory.max - memory.current, v1 memory.limit_in_bytes -
 * memory.usage_in_bytes, each plus the cgroup's inactive file pages, which
 * the kernel reclaims before it kills. v2's memory.high counts as a limit
 * too: past it the kernel does not kill but throttles the cgroup and
 * reclaims its pages, and a KV cache or model paged out and back each
 * token runs orders of magnitude slower than a refused context. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"

/* A small file's text into buf (NUL-terminated); its length, 0 if none. */
static size_t read_text(const char *path, char *buf, size_t size) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    const size_t n = fread(buf, 1, size - 1, f);
    fclose(f);
    buf[n] = '\0';
    return n;
}

/* The number after "key " at the start of a line of text, or -1. */
static long long text_field(const char *text, const char *key) {
    const size_t k = strlen(key);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (strncmp(p, key, k) != 0 || p[k] != ' ') continue;
        char *end;
        const unsigned long long v = strtoull(p + k + 1, &end, 10);
        return end > p + k + 1 && v <= (unsigned long long)INT64_MAX ? (long long)v : -1;
    }
    return -1;
}

size_t kvq_cgroup_room(const char *limit, const char *usage, const char *stat) {
    if (!limit || !usage) return SIZE_MAX;
    char *end;
    const unsigned long long lim = strtoull(limit, &end, 10);
    if (end == limit || lim >= (1ULL << 62)) return SIZE_MAX; /* "max", or v1's "none": 2^63 - 4096 */
    const unsigned long long use = strtoull(usage, &end, 10);
    if (end == usage) return SIZE_MAX;
    long long inactive = stat ? text_field(stat, "total_inactive_file") : -1; /* v1, with the children's */
    if (inactive < 0 && stat) inactive = text_field(stat, "inactive_file");   /* v2 */
    const unsigned long long used = inactive > 0 && (unsigned long long)inactive < use ? use - (unsigned long long)inactive : use;
    return used >= lim ? 0 : (size_t)(lim - used);
}

size_t kvq_cgroup_mount_dir(const char *cgroup, const char *line, char *dir, size_t size) {
    /* mountinfo: id parent major:minor root mountpoint options... - fstype source superoptions */
    char root[512], point[512], fstype[32], super[512];
    const char *dash = strstr(line, " - ");
    if (!dash || sscanf(line, "%*s %*s %*s %511s %511s", root, point) != 2 ||
        sscanf(dash + 3, "%31s %*s %511s", fstype, super) != 2)
        return 0;
    const int v2 = strcmp(fstype, "cgroup2") == 0;
    if (!v2 && (strcmp(fstype, "cgroup") != 0 || !strstr(super, "memory"))) return 0;
    /* /proc/self/cgroup: "0::/path" (v2), "N:a,memory,b:/path" (v1) */
    for (const char *c = cgroup; c && *c; c = strchr(c, '\n'), c = c ? c + 1 : NULL) {
        const char *eol = strchr(c, '\n'), *c1 = strchr(c, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2 || (eol && c2 > eol)) continue;
        char ctl[256];
        const size_t ctl_len = (size_t)(c2 - c1 - 1);
        if (ctl_len >= sizeof ctl) continue;
        memcpy(ctl, c1 + 1, ctl_len);
        ctl[ctl_len] = '\0';
        int match = v2 && ctl_len == 0 && c1 - c == 1 && c[0] == '0';
        for (char *save = NULL, *tok = v2 ? NULL : strtok_r(ctl, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
            match |= strcmp(tok, "memory") == 0;
        if (!match) continue;
        char path[512];
        const size_t len = eol ? (size_t)(eol - c2 - 1) : strlen(c2 + 1);
        if (len >= sizeof path) return 0;
        memcpy(path, c2 + 1, len);
        path[len] = '\0';
        /* The mount shows the hierarchy from root down: the process's cgroup
         * lies below it, or the mount is all a namespaced container sees. */
        const size_t r = strcmp(root, "/") == 0 ? 0 : strlen(root);
        const char *below = strncmp(path, root, r) == 0 && (path[r] == '/' || path[r] == '\0') ? path + r : "";
        if (snprintf(dir, size, "%s%s", point, strcmp(below, "/") == 0 ? "" : below) >= (int)size) return 0;
        return strlen(point);
    }
    return 0;
}

size_t kvq_cgroup_hierarchy_room(char *dir, size_t mount_len) {
    /* per version: the limit files, then the usage file */
    static const char *const files[2][3] = {{"memory.max", "memory.high", "memory.current"},
                                            {"memory.limit_in_bytes", NULL, "memory.usage_in_bytes"}};
    char path[640], limit[64], usage[64];
    char *stat = malloc(16384);
    size_t room = SIZE_MAX;
    for (;;) {
        for (int v = 0; v < 2; v++) {
            snprintf(path, sizeof path, "%s/%s", dir, files[v][2]);
            if (!read_text(path, usage, sizeof usage)) continue;
            snprintf(path, sizeof path, "%s/memory.stat", dir);
            const char *st = stat && read_text(path, stat, 16384) ? stat : NULL;
            for (int l = 0; l < 2 && files[v][l]; l++) {
                snprintf(path, sizeof path, "%s/%s", dir, files[v][l]);
                const size_t r = read_text(path, limit, sizeof limit) ? kvq_cgroup_room(limit, usage, st) : SIZE_MAX;
                if (r < room) room = r;
            }
            break;
        }
        char *slash = strrchr(dir, '/');
        if (!slash || (size_t)(slash - dir) < mount_len) break;
        *slash = '\0';
    }
    free(stat);
    return room;
}

size_t kvq_mem_available(void) {
    char text[4096];
    const long long kib = read_text("/proc/meminfo", text, sizeof text) ? text_field(text, "MemAvailable:") : -1;
    size_t avail = kib > 0 ? (size_t)kib * 1024 : 0;
    char cgroup[4096], line[2048], dir[512];
    FILE *f = read_text("/proc/self/cgroup", cgroup, sizeof cgroup) ? fopen("/proc/self/mountinfo", "r") : NULL;
    int whole = 1; /* the line read starts a line (an overlay's options can outrun the buffer) */
    while (f && fgets(line, sizeof line, f)) {
        const int starts = whole;
        whole = strchr(line, '\n') != NULL;
        if (!starts) continue;
        const size_t mount_len = kvq_cgroup_mount_dir(cgroup, line, dir, sizeof dir);
        if (!mount_len) continue;
        size_t room = kvq_cgroup_hierarchy_room(dir, mount_len);
        if (room == 0) room = 1; /* full: the callers read 0 as "unknown" */
        if (room != SIZE_MAX && (!avail || room < avail)) avail = room;
    }
    if (f) fclose(f);
    return avail;
}
