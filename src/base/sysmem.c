/* Memory facts of this process and this machine, read from Linux's /proc
 * and the cgroup file systems: the resident set (now and its high-water
 * mark) and the memory the ranks on this node may still use. Every reader
 * returns "unknown" (0) instead of failing: a figure the kernel does not
 * give is no reason to refuse a run. */
#include <ctype.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trident/base.h"

/* The number after "KEY<sep>" on its own line of a /proc or cgroup file
 * ("VmRSS:   123 kB", "inactive_file 4096"); 0 when absent. */
static size_t keyed_number(const char *path, const char *key, char sep) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[256];
    size_t n = strlen(key), v = 0;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, n) == 0 && line[n] == sep) {
            v = strtoull(line + n + 1, NULL, 10);
            break;
        }
    fclose(f);
    return v;
}

/* "Key:   123 kB" from a /proc file, in bytes; 0 when absent. */
static size_t proc_kb(const char *path, const char *key) { return keyed_number(path, key, ':') * 1024; }

size_t td_rss_bytes(void) { return proc_kb("/proc/self/status", "VmRSS"); }
size_t td_rss_peak_bytes(void) { return proc_kb("/proc/self/status", "VmHWM"); }

int td_rss_reset_peak(void) {
    /* "5" resets VmHWM to the current RSS (Linux 4.0+): a process that runs
     * several trainings (the tests) then measures each from its own start */
    int fd = open("/proc/self/clear_refs", O_WRONLY);
    if (fd < 0) return 0;
    int ok = write(fd, "5", 1) == 1;
    close(fd);
    return ok;
}

int td_parse_bytes(const char *s, size_t *out) {
    if (!s || !isdigit((unsigned char)s[0])) return 0;
    char *end;
    unsigned long long x = strtoull(s, &end, 10);
    unsigned shift = 0;
    if (*end) {
        const char *units = "KMGT";
        const char *u = strchr(units, toupper((unsigned char)*end));
        if (!u || !*u) return 0;
        shift = 10 * (unsigned)(u - units + 1);
        end++;
        if (*end == 'i' || *end == 'I') end++; /* "64MiB" */
        if (*end == 'b' || *end == 'B') end++; /* "64MB", "64M" */
        if (*end) return 0;
    }
    if (x == 0 || x > (~0ULL >> shift)) return 0;
    *out = (size_t)(x << shift);
    return 1;
}

/* One number from a cgroup file; 0 when missing or "max". */
static size_t read_u64_file(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char buf[64] = {0};
    size_t v = 0;
    if (fgets(buf, sizeof buf, f) && isdigit((unsigned char)buf[0])) v = strtoull(buf, NULL, 10);
    fclose(f);
    return v;
}

/* Page cache the kernel drops before it kills (memory.stat's inactive
 * file pages): charged to the cgroup, but not in the way. */
static size_t inactive_file(const char *dir, const char *key) {
    char path[4200];
    snprintf(path, sizeof path, "%s/memory.stat", dir);
    return keyed_number(path, key, ' ');
}

/* The tightest (limit - usage) over dir and its ancestors up to root; the
 * limit a cgroup sets holds for everything below it. 0 when no level sets
 * one. */
static size_t cgroup_room(const char *root, const char *rel, const char *limit_file,
                          const char *usage_file, const char *stat_key, char *where, size_t wcap) {
    char dir[4096], path[4200];
    snprintf(dir, sizeof dir, "%s%s", root, rel);
    size_t best = 0;
    for (;;) {
        snprintf(path, sizeof path, "%s/%s", dir, limit_file);
        size_t lim = read_u64_file(path);
        /* v1 writes "no limit" as a huge page-rounded number */
        if (lim > 0 && lim < ((size_t)1 << 60)) {
            snprintf(path, sizeof path, "%s/%s", dir, usage_file);
            size_t use = read_u64_file(path), cache = inactive_file(dir, stat_key);
            use = use > cache ? use - cache : 0;
            size_t room = lim > use ? lim - use : 0;
            if (best == 0 || room < best) {
                best = room ? room : 1;
                char b1[32], b2[32];
                snprintf(where, wcap, "cgroup %s: limit %s, %s in use", dir,
                         td_fmt_bytes(b1, sizeof b1, (double)lim), td_fmt_bytes(b2, sizeof b2, (double)use));
            }
        }
        if (strlen(dir) <= strlen(root)) break;
        char *slash = strrchr(dir, '/');
        if (!slash || slash < dir + strlen(root)) break;
        *slash = '\0';
    }
    return best;
}

/* The cgroup of this process for the memory controller: v2 ("0::/path")
 * under /sys/fs/cgroup, v1 ("N:...memory...:/path") under
 * /sys/fs/cgroup/memory. In a container the path may not exist under the
 * mount (a namespace shows the container's cgroup as the mount's root): the
 * root is read then. */
static size_t cgroup_available(char *where, size_t wcap) {
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f) return 0;
    char line[4096];
    size_t best = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2) continue;
        *c2 = '\0';
        const char *ctrls = c1 + 1, *rel = c2 + 1;
        int v2 = ctrls[0] == '\0';
        int v1 = 0;
        for (const char *p = ctrls; (p = strstr(p, "memory")); p += 6)
            if ((p == ctrls || p[-1] == ',') && (p[6] == '\0' || p[6] == ',')) v1 = 1;
        if (!v1 && !v2) continue;
        const char *root = v1 ? "/sys/fs/cgroup/memory" : "/sys/fs/cgroup";
        char dir[4200];
        snprintf(dir, sizeof dir, "%s%s", root, strcmp(rel, "/") == 0 ? "" : rel);
        if (access(dir, F_OK) != 0) rel = "";
        if (strcmp(rel, "/") == 0) rel = "";
        size_t room = v1 ? cgroup_room(root, rel, "memory.limit_in_bytes", "memory.usage_in_bytes",
                                       "total_inactive_file", where, wcap)
                         : cgroup_room(root, rel, "memory.max", "memory.current", "inactive_file",
                                       where, wcap);
        if (room && (best == 0 || room < best)) best = room;
    }
    fclose(f);
    return best;
}

size_t td_node_memory_available(char *source, size_t cap) {
    char b[32];
    size_t avail = proc_kb("/proc/meminfo", "MemAvailable");
    snprintf(source, cap, "MemAvailable %s", td_fmt_bytes(b, sizeof b, (double)avail));
    char where[4500] = "";
    size_t cg = cgroup_available(where, sizeof where);
    if (cg && (avail == 0 || cg < avail)) {
        avail = cg;
        snprintf(source, cap, "%s", where);
    }
    return avail;
}

/* Counted by the communication layer above (td_comm_init) and handed down,
 * so base needs no MPI and no launcher's environment: srun need not set
 * Open MPI's OMPI_COMM_WORLD_LOCAL_SIZE. */
static int g_local_ranks = 1;

void td_set_local_ranks(int n) { g_local_ranks = n > 0 ? n : 1; }

int td_local_ranks(void) { return g_local_ranks; }
