/* The default thread count from the CPUs this process may really use, and
 * OpenMP's waiting policy (trident/cpus.h). Online processors overcount
 * both under a launcher that binds ranks (the affinity mask) and in a
 * container (the cgroup's quota). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trident/cpus.h"

static int ceil_div(long long q, long long p) {
    if (q <= 0 || p <= 0) return 0;
    long long c = (q + p - 1) / p;
    return c > 1 << 20 ? 1 << 20 : (int)c;
}

int td_cpus_cgroup_v2(const char *cpu_max) {
    long long q, p = 100000; /* the period is optional in the file's syntax */
    char *end;
    if (!cpu_max || strncmp(cpu_max, "max", 3) == 0) return 0;
    q = strtoll(cpu_max, &end, 10);
    if (end == cpu_max) return 0;
    if (*end == ' ' || *end == '\t') {
        char *e2;
        long long pp = strtoll(end, &e2, 10);
        if (e2 != end) p = pp;
    }
    return ceil_div(q, p);
}

int td_cpus_cgroup_v1(const char *quota, const char *period) {
    if (!quota || !period) return 0;
    char *e1, *e2;
    long long q = strtoll(quota, &e1, 10), p = strtoll(period, &e2, 10);
    if (e1 == quota || e2 == period) return 0;
    return ceil_div(q, p); /* -1: no quota */
}

static int read_text(const char *path, char *buf, size_t n) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t k = fread(buf, 1, n - 1, f);
    fclose(f);
    buf[k] = 0;
    return 0;
}

/* This process's cgroup quota in CPUs, 0: none found */
static int cgroup_cpus(void) {
    char line[4096], path[4200], a[128], b[128];
    /* v2: "0::/PATH" in /proc/self/cgroup; the file is at the root in a container */
    if (read_text("/proc/self/cgroup", line, sizeof line) == 0) {
        char *p = strstr(line, "0::");
        if (p && (p == line || p[-1] == '\n')) {
            p += 3;
            p[strcspn(p, "\n")] = 0;
            snprintf(path, sizeof path, "/sys/fs/cgroup%s/cpu.max", strcmp(p, "/") ? p : "");
            if (read_text(path, a, sizeof a) == 0) return td_cpus_cgroup_v2(a);
        }
    }
    if (read_text("/sys/fs/cgroup/cpu.max", a, sizeof a) == 0) return td_cpus_cgroup_v2(a);
    static const char *v1[] = {"/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/cpu"};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/cpu.cfs_quota_us", v1[i]);
        if (read_text(path, a, sizeof a) != 0) continue;
        snprintf(path, sizeof path, "%s/cpu.cfs_period_us", v1[i]);
        if (read_text(path, b, sizeof b) == 0) return td_cpus_cgroup_v1(a, b);
    }
    return 0;
}

int td_cpus_default_threads(int local_ranks) {
    int ranks = local_ranks > 0 ? local_ranks : 1;
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t set;
    int mask = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : (int)online;
    /* a rank bound to its own CPUs uses them; ranks that share a mask (none
     * bound, or several to one socket) take the node's CPUs in equal parts */
    int share = (int)(online / ranks), t = mask < share ? mask : share;
    int quota = cgroup_cpus();
    if (quota > 0 && quota / ranks < t) t = quota / ranks;
    return t > 0 ? t : 1;
}

void td_cpus_bounded_spin(char **argv) {
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT") || getenv("TD_OPENMP_REEXEC")) return;
    setenv("GOMP_SPINCOUNT", TD_OPENMP_SPINCOUNT, 1);
    setenv("TD_OPENMP_REEXEC", "1", 1); /* once: never a loop if the runtime ignores it */
    execv("/proc/self/exe", argv);
    unsetenv("GOMP_SPINCOUNT"); /* exec failed: carry on as before */
}
