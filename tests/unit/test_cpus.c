/* The default thread count's inputs (trident/cpus.h): the cgroup quota
 * parsers on sample file contents (v2 cpu.max, v1 cfs_quota_us and
 * cfs_period_us), and the default under this process's own affinity mask,
 * narrowed here to one CPU. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <sched.h>
#include <stdio.h>

#include "trident/cpus.h"

static int fails;
static void eq(const char *what, int got, int want) {
    printf("%s %s: %d (want %d)\n", got == want ? "ok" : "FAIL", what, got, want);
    fails += got != want;
}

int main(void) {
    eq("v2 'max 100000'", td_cpus_cgroup_v2("max 100000\n"), 0);
    eq("v2 '200000 100000'", td_cpus_cgroup_v2("200000 100000\n"), 2);
    eq("v2 '150000 100000' rounds up", td_cpus_cgroup_v2("150000 100000\n"), 2);
    eq("v2 '50000 100000' rounds up", td_cpus_cgroup_v2("50000 100000\n"), 1);
    eq("v2 '400000' (default period)", td_cpus_cgroup_v2("400000\n"), 4);
    eq("v2 '' not understood", td_cpus_cgroup_v2(""), 0);
    eq("v1 '-1' '100000'", td_cpus_cgroup_v1("-1\n", "100000\n"), 0);
    eq("v1 '250000' '100000'", td_cpus_cgroup_v1("250000\n", "100000\n"), 3);
    eq("v1 '300000' '100000'", td_cpus_cgroup_v1("300000\n", "100000\n"), 3);
    eq("v1 'x' '100000'", td_cpus_cgroup_v1("x", "100000"), 0);
    /* one CPU in the mask: a bound rank keeps it, whatever the ranks */
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int first = 0;
        while (!CPU_ISSET(first, &set)) first++;
        CPU_ZERO(&set);
        CPU_SET(first, &set);
        if (sched_setaffinity(0, sizeof set, &set) == 0) {
            eq("bound to one CPU, 1 local rank", td_cpus_default_threads(1), 1);
            eq("bound to one CPU, 4 local ranks", td_cpus_default_threads(4), 1);
        }
    }
    printf("%s\n", fails ? "FAILED" : "all passed");
    return fails != 0;
}
