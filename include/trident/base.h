/* base: errors and checks, rank-prefixed logging, the accounting allocator,
 * counter-based random numbers and timers. Everything else depends on this;
 * it depends on nothing (MPI reaches it only through the abort hook). */
#ifndef TRIDENT_BASE_H
#define TRIDENT_BASE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- errors ------------------------------------------------------------ */

/* A function that never returns, in both languages that include this
 * header: C11's _Noreturn, C++'s [[noreturn]] (a CUDA file is C++). */
#ifdef __cplusplus
#define TD_NORETURN [[noreturn]]
#else
#define TD_NORETURN _Noreturn
#endif

/* Exit code for bad user input (flags, files); programmer errors abort(). */
#define TD_EXIT_USAGE 2
/* Exit code for a write that failed (a full disk, an I/O error): a
 * checkpoint save, --log, --trace (sysexits' EX_IOERR). */
#define TD_EXIT_IO 74

/* Called instead of exit() when set: the comm layer installs MPI_Abort here
 * so that one rank's error never leaves its peers hanging. */
void td_set_abort_hook(void (*hook)(int code));
TD_NORETURN void td_die(int code);
/* The end of an error exit (after the hook): flush, exit with `code`. */
TD_NORETURN void td_exit(int code);
/* A successful early exit (--help, --print-config): flush, run the exit
 * hook (the comm layer's MPI_Finalize, so mpirun sees every rank end
 * cleanly; every rank must take this path together), then exit 0. */
void td_set_exit_hook(void (*hook)(void));
TD_NORETURN void td_exit_ok(void);

/* User-facing failure: one line "trident: error: <msg>" and a non-zero exit.
 * The message should say what is wrong and what would be valid. */
#define TD_CHECK(cond, ...)                                                   \
    do {                                                                      \
        if (!(cond)) td_fail(__VA_ARGS__);                                    \
    } while (0)
TD_NORETURN void td_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Programmer error: file:line and the failed condition, then abort. */
#define TD_ASSERT(cond)                                                       \
    do {                                                                      \
        if (!(cond)) td_assert_failed(#cond, __FILE__, __LINE__);             \
    } while (0)
TD_NORETURN void td_assert_failed(const char *cond, const char *file, int line);
/* td_fail with another exit code (TD_EXIT_IO for failed writes). */
TD_NORETURN void td_fail_code(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Called by td_die before the abort hook (at most 4, in the order set):
 * what an error exit must undo in this process, say the --out lock's
 * record. Each must be safe to run at any point of the run. */
void td_set_fail_cleanup(void (*fn)(void));

/* ---- logging ----------------------------------------------------------- */

/* Identity of this process in the grid, set once by the runtime. Single-rank
 * runs keep the defaults (rank 0, no prefix). coords: the grid's description
 * of this rank ("dp=1 pp=0 tp=1", see td_grid_describe), or NULL. */
void td_log_set_identity(int rank, const char *coords, int verbose);
void td_log_set_verbose(int verbose);
int td_log_rank(void);
int td_log_verbose(void);
/* Printed by rank 0 only (the step line, reports). */
void td_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Printed by every rank when --verbose, prefixed "[rank r dp=i pp=j tp=k]". */
void td_vlog(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- accounting allocator --------------------------------------------- */

/* Every large allocation names what it is for, so predicted and measured
 * memory can be printed side by side (docs/design.md principle 2). */
typedef enum {
    TD_MEM_PARAMS = 0, /* model weights as used by forward/backward */
    TD_MEM_GRADS,      /* parameter gradients */
    TD_MEM_OPTIM,      /* optimizer moments (Adam m and v) */
    TD_MEM_MASTER,     /* fp32 master weights when training in low precision */
    TD_MEM_GATHER,     /* gathered-parameter buffers (ZeRO-3) */
    TD_MEM_ACTS,       /* activations and their gradients */
    TD_MEM_COMM,       /* communication buffers */
    TD_MEM_OTHER,      /* data, scratch, host metadata and staging (checkpoint reads) */
    TD_MEM_NCAT
} td_mem_cat;

const char *td_mem_cat_name(td_mem_cat cat);
/* 64-byte aligned, zero-filled. Dies with a clear message when out of memory. */
void *td_alloc(size_t bytes, td_mem_cat cat);
void td_free(void *ptr);
/* For memory that does not come from td_alloc (shared windows): counted in
 * `cat` like td_alloc's blocks; delta < 0 when it is given back. */
void td_mem_account(td_mem_cat cat, ptrdiff_t delta);
/* Device memory (a backend's buffers on a device other than cpu:
 * src/backend only): counted in `cat` as td_mem_account does, and on the
 * device side of the split below. */
void td_mem_account_device(td_mem_cat cat, ptrdiff_t delta);
size_t td_mem_current(td_mem_cat cat);
size_t td_mem_peak(td_mem_cat cat);
/* A category's peak on each side: device bytes (td_mem_account_device) and
 * host bytes (the rest: td_alloc, shared windows). On --device cpu every
 * byte is host memory and the device peaks stay 0. */
size_t td_mem_peak_device(td_mem_cat cat);
size_t td_mem_peak_host(td_mem_cat cat);
size_t td_mem_total_current(void);
size_t td_mem_total_peak(void);
/* Peak of the sum over categories (not the sum of per-category peaks). */
void td_mem_reset_peaks(void);
/* Restarts td_mem_total_peak only (a run measures its own peak; the
 * per-category peaks are left alone). */
void td_mem_reset_total_peak(void);

/* ---- memory facts (sysmem.c; Linux /proc and cgroups, 0 = unknown) ----- */

/* Resident set of this process now, and its high-water mark (VmHWM). */
size_t td_rss_bytes(void);
size_t td_rss_peak_bytes(void);
/* Restarts the high-water mark at the current resident set; 0 if the
 * kernel would not. */
int td_rss_reset_peak(void);
/* Memory this node can still give: the smaller of MemAvailable and the
 * room under the tightest cgroup limit (v2 memory.max or v1
 * memory.limit_in_bytes, minus usage not counting inactive page cache).
 * source gets a description of where the figure came from. */
size_t td_node_memory_available(char *source, size_t cap);
/* Ranks of this job on this node (sharing its cores and memory): what
 * td_set_local_ranks last set, 1 before. td_comm_init sets it, counted with
 * MPI_Comm_split_type(MPI_COMM_TYPE_SHARED), alike under mpirun and srun.
 * n < 1 counts as 1. Not thread-safe: set once at start-up. */
int td_local_ranks(void);
void td_set_local_ranks(int n);
/* "1073741824", "512K", "64M", "4G", "1T" (powers of 1024; "MiB"/"MB"
 * read the same) into *out; 0 when s is not such a positive byte count. */
int td_parse_bytes(const char *s, size_t *out);

/* ---- random numbers ---------------------------------------------------- */

/* Counter-based: the value depends only on (seed, stream, index), so any
 * shard or rank can reproduce any element without generating the others. */
uint64_t td_rng_u64(uint64_t seed, uint64_t stream, uint64_t index);
/* Uniform in [0, 1). */
double td_rng_uniform(uint64_t seed, uint64_t stream, uint64_t index);
/* Standard normal (Box-Muller on two counters). */
double td_rng_normal(uint64_t seed, uint64_t stream, uint64_t index);

/* ---- timers ------------------------------------------------------------ */

double td_now_ms(void); /* monotonic clock */
/* 64 random bits from the kernel (getrandom), for ids that must differ
 * between runs (a checkpoint's run id); never 0. */
uint64_t td_random_id(void);

/* ---- small helpers ----------------------------------------------------- */

static inline size_t td_round_up(size_t x, size_t m) { return (x + m - 1) / m * m; }
static inline size_t td_min_sz(size_t a, size_t b) { return a < b ? a : b; }
static inline size_t td_max_sz(size_t a, size_t b) { return a > b ? a : b; }
/* Human-readable bytes into buf ("12.3 MiB"). Returns buf. */
char *td_fmt_bytes(char *buf, size_t n, double bytes);

#ifdef __cplusplus
}
#endif

#endif
