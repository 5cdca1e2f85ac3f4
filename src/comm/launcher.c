/* Launchers MPI_Init cannot work under, refused before it with one line.
 * Debian's Open MPI 4.1 reaches Slurm only through PMIx: a task srun starts
 * without --mpi=pmix (slurm.conf's MpiDefault=none, or --mpi=pmi2) fails
 * inside MPI_Init_thread with a page of Open MPI's text per rank ("OMPI was
 * not built with SLURM's PMI support", or "An error occurred in
 * MPI_Init_thread"), which names neither the cause nor the flag. */
#include <stdlib.h>

#include "comm_internal.h"

void td_launcher_check(void) {
    /* an srun step's task (SLURM_STEP_ID) that no PMIx server serves
     * (PMIX_RANK) and that mpirun did not start (OMPI_COMM_WORLD_SIZE: a
     * job script's mpirun starts its ranks under its own PMIx) */
    if (!getenv("SLURM_STEP_ID") || getenv("PMIX_RANK") || getenv("OMPI_COMM_WORLD_SIZE")) return;
    const char *type = getenv("SLURM_MPI_TYPE"), *rank = getenv("SLURM_PROCID");
    /* no MPI yet, so no agreement: task 0 speaks for all, every task exits */
    if (!rank || atoi(rank) == 0) {
        fprintf(stderr,
                "trident: error: started by srun with --mpi=%s, but Open MPI needs Slurm's PMIx: use srun "
                "--mpi=pmix (or MpiDefault=pmix in slurm.conf); docs/slurm.md\n",
                type && *type ? type : "none");
    }
    td_exit(TD_EXIT_USAGE);
}
