/* Thread count of the kernels. OpenBLAS runs single-threaded inside each of
 * our OpenMP threads: two thread pools on two cores would oversubscribe and
 * OpenBLAS's own splitting of these small GEMMs costs more than it saves. */
#include <cblas.h>

#include "trident/base.h"
#include "trident/kernels.h"

/* OpenBLAS extension (its cblas.h has it too; repeated so that any cblas.h
 * will do). */
void openblas_set_num_threads(int num_threads);

static int g_threads = 1;
static int g_blas_ready = 0;

static void td_k_blas_single(void) {
    openblas_set_num_threads(1);
    g_blas_ready = 1;
}

void td_kernels_set_threads(int n) {
    TD_ASSERT(n >= 1);
    g_threads = n;
    td_k_blas_single();
}

/* Every kernel asks this first, so OpenBLAS is pinned to one thread even if
 * nobody called td_kernels_set_threads (its default is one per core). Called
 * from the thread that launches the kernels, outside parallel regions. */
int td_kernels_threads(void) {
    if (!g_blas_ready) td_k_blas_single();
    return g_threads;
}
