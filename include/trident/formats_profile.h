/* formats_profile: this machine's calibration profile, written by `trident
 * plan --calibrate` and read by the planner's `local` cluster. A JSON object
 * (the file is the user's, so it is parsed as untrusted input: never exits
 * or prints, fuzzed by tests/fuzz/fuzz_safetensors.c):
 *   {"format": "trident-profile", "version": 2, "cores": 2, "mem_bytes": 8e9,
 *    "gemm": [{"threads": 1, "n": 128, "gflops": 30.5}, ...],
 *    "mem_bw": [{"threads": 1, "bytes": 1048576, "gbs": 9.1}, ...],
 *    "optimizer": [{"threads": 1, "melems": 350}, ...],
 *    "p2p": {"alpha_us": 1.5, "gbs": 4.2},
 *    "collectives": [{"op": "allreduce", "ranks": 2, "alpha_us": 3, "gbs": 5}, ...]}
 * gemm: the engine's fp32 linear layer (forward and both backward products,
 * td_matmul_forward/backward) on n x n x n operands streamed from memory,
 * per thread count (GFLOP/s of all threads together); optimizer: the
 * engine's AdamW step (gradient sum of squares and update, td_sumsq and
 * td_adamw_update) in millions of elements per second; mem_bw: a copy's bytes read + written per second,
 * all threads together, each thread copying `bytes` (in cache or not); p2p: one message of b bytes takes alpha + b / gbs; collectives:
 * the whole call over `ranks` ranks takes alpha + bus-bytes / gbs, bus
 * bytes as nccl-tests counts them (all-reduce 2 (n-1)/n of the buffer,
 * all-gather (n-1)/n); none when calibrated in one process. */
#ifndef TRIDENT_FORMATS_PROFILE_H
#define TRIDENT_FORMATS_PROFILE_H

#include <stddef.h>

#include "trident/formats.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TD_PROFILE_MAX 32

typedef enum { TD_PROF_ALLREDUCE, TD_PROF_ALLGATHER, TD_PROF_NOPS } td_prof_op;

typedef struct {
    int cores;
    double mem_bytes;
    int n_gemm, n_bw, n_coll, n_opt;
    struct { int threads, n; double gflops; } gemm[TD_PROFILE_MAX];
    struct { int threads; double bytes, gbs; } bw[TD_PROFILE_MAX];
    struct { int threads; double melems; } opt[TD_PROFILE_MAX];
    double p2p_alpha_us, p2p_gbs;
    struct { int op, ranks; double alpha_us, gbs; } coll[TD_PROFILE_MAX];
} td_profile;

/* 0, or -1 with "field ...: what" in e. Every number must be finite and in
 * range (rates and sizes positive, threads and ranks within limits). */
int td_profile_parse(const char *text, size_t n, td_profile *p, td_err *e);
/* The profile as JSON text (malloc'd, NUL-terminated); NULL when out of
 * memory. td_profile_parse reads it back equal to %.17g. */
char *td_profile_format(const td_profile *p);
const char *td_prof_op_name(int op);

#ifdef __cplusplus
}
#endif

#endif
