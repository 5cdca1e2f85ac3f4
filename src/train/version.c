/* `trident --version`: what a bug report needs to name the build: trident's
 * version and commit, and the versions of the libraries that do the work. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>

#include "td_git_commit.h" /* generated at build time (cmake/version.cmake) */
#include "trident/cuda_module.h"
#include "trident/train.h"

int td_version_main(int argc, char **argv) {
    (void)argc, (void)argv;
    printf("trident %s (commit %s)\n", TD_VERSION, TD_GIT_COMMIT);
    const dnnl_version_t *d = dnnl_version();
    printf("  oneDNN %d.%d.%d\n", d->major, d->minor, d->patch);
    /* "OpenBLAS 0.3.21 DYNAMIC_ARCH ... Haswell MAX_THREADS=64": the core
     * type it picked, which moves every fp32 GEMM rate */
    printf("  %s\n", openblas_get_config());
    /* MPI_Get_library_version is one of the few calls allowed before
     * MPI_Init, so --version needs no MPI start-up; only the first line
     * ("Open MPI v4.1.4, package: ..."), up to its first comma. */
    char mpi[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    if (MPI_Get_library_version(mpi, &len) == MPI_SUCCESS) {
        mpi[strcspn(mpi, ",\n")] = '\0';
        printf("  %s\n", mpi);
    }
    /* The CUDA module is loaded here and for --device cuda only (a plain
     * run never maps the CUDA runtime or cuBLASLt). */
    char err[1024];
    const td_cuda_module *m = td_cuda_module_load(err, sizeof err);
    if (m) {
        char lines[2048];
        m->describe(lines, sizeof lines);
        fputs(lines, stdout);
    } else {
        printf("  CUDA backend: %s\n", err);
    }
    return 0;
}
