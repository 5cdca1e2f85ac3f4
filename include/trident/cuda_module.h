/* cuda_module: the seam between trident and its CUDA backend, a shared
 * module (libtrident_cuda.so, src/cuda/) that trident loads with dlopen only
 * for --device cuda and --version, so that a plain run never pays for
 * loading the CUDA runtime and cuBLASLt (docs/cuda.md).
 *
 * The module links nothing of trident: what it needs from the process (the
 * memory accounting, the error exit) comes in a td_cuda_host table, and it
 * returns its backend (backend.h's td_backend, the same table the cpu and
 * guard devices fill) through td_cuda_module. Both sides check the ABI
 * number, so a stale module is one error line, not a crash. */
#ifndef TRIDENT_CUDA_MODULE_H
#define TRIDENT_CUDA_MODULE_H

#include <stddef.h>

#include "trident/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TD_CUDA_ABI 1
#define TD_CUDA_MODULE_SYMBOL "td_cuda_module_entry"
#define TD_CUDA_MODULE_FILE "libtrident_cuda.so"

/* What trident lends the module. fail: one error line and the process's
 * error exit (td_fail); it does not return (a function pointer cannot say
 * so in both languages). */
typedef struct {
    int abi;
    void (*account)(td_mem_cat cat, ptrdiff_t bytes);
    const char *(*cat_name)(td_mem_cat cat);
    void (*fail)(const char *line);
} td_cuda_host;

typedef struct {
    int abi;
    /* --version's lines (each "  ...\n"): the CUDA runtime and cuBLASLt
     * the module was built with and loaded, the driver, and the GPUs, or
     * what CUDA said when there are none. Starts nothing it keeps. */
    void (*describe)(char *buf, size_t n);
    /* Take GPU (local_rank mod the visible devices) and return the
     * backend; NULL with one line in err when there is no usable GPU
     * ("no usable GPU: cudaGetDeviceCount: <what CUDA said> (<code>)"). */
    const td_backend *(*open)(const td_cuda_host *h, int local_rank, char *err, size_t n);
} td_cuda_module;

typedef const td_cuda_module *(*td_cuda_module_fn)(void);

/* The GPU a rank takes: local_rank mod count (count > 0), so that ranks
 * beyond the GPUs share them round-robin. */
static inline int td_cuda_pick_device(int local_rank, int count) {
    return (local_rank % count + count) % count;
}

/* ---- trident's side (src/backend/cuda_load.c) ----------------------------- */

/* 1 when this build has the module (-DTRIDENT_CUDA). */
int td_cuda_built(void);
/* The module, loaded once: NULL with err set when it cannot be loaded.
 * Searched: $TRIDENT_CUDA_MODULE, then beside the executable, then the
 * build tree's copy. */
const td_cuda_module *td_cuda_module_load(char *err, size_t n);
/* This process's rank on its node from the launcher's environment
 * (OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, SLURM_LOCALID), else 0. */
int td_cuda_local_rank(void);
/* The CUDA backend for this process (td_fail naming what CUDA said when
 * there is none); what td_backend_use(TD_DEVICE_CUDA) installs. */
const td_backend *td_backend_cuda(void);
/* The entries a row lacks, comma-separated into buf ("" when complete);
 * returns how many. */
int td_ops_missing(const td_ops *o, char *buf, size_t n);

#ifdef __cplusplus
}
#endif

#endif
