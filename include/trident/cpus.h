/* The CPUs this process may use, for the default thread count, and
 * OpenMP's waiting policy. Local calls, no MPI; the readers never fail
 * (a file that is not there or not understood: no limit from it). */
#ifndef TRIDENT_CPUS_H
#define TRIDENT_CPUS_H

#ifdef __cplusplus
extern "C" {
#endif

/* CPUs of a cgroup quota, rounded up: cgroup v2's cpu.max text ("QUOTA
 * PERIOD", "max PERIOD": no quota) or v1's cfs_quota_us and cfs_period_us
 * texts (quota -1: none). 0: no quota or a text not understood. */
int td_cpus_cgroup_v2(const char *cpu_max);
int td_cpus_cgroup_v1(const char *quota, const char *period);

/* Threads per rank by default: the CPUs of this process's affinity mask
 * (sched_getaffinity; a rank bound by Slurm or mpirun has its own), at most
 * the node's online CPUs over its local_ranks ranks (unbound ranks, or
 * several bound to one socket, share them), and at most the cgroup's quota
 * over the local ranks. At least 1. */
int td_cpus_default_threads(int local_ranks);

/* OpenMP's runtime reads OMP_WAIT_POLICY and GOMP_SPINCOUNT once, as it is
 * loaded, before main: a rank whose threads spin on cores another rank
 * needs slows both (sample --threads 2 under contention: 2-24 s against
 * 3 s), while threads that sleep at once (OMP_WAIT_POLICY=passive) cost an
 * uncontended step 5-7% in wake-ups (L4 C128 at 2 threads: 45.6-46.5 ms
 * against 42.9-43.8 ms spinning; 2026-12-07). A spin of TD_OPENMP_SPINCOUNT
 * iterations (microseconds, libgomp's default is 300000) keeps the
 * uncontended speed and bounds the waste. Unless the user set either, this
 * sets GOMP_SPINCOUNT and executes the program again (argv as given), so
 * the runtime starts with it; it returns when nothing was to be done or
 * exec failed. First thing in main, before MPI starts. */
#define TD_OPENMP_SPINCOUNT "10000"
void td_cpus_bounded_spin(char **argv);

#ifdef __cplusplus
}
#endif

#endif
