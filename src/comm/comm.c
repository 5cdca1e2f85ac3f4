/* comm core: MPI start-up and shutdown, the error policy (every failure takes
 * the whole job down through MPI_Abort, or where this thread may not call MPI
 * a non-zero _exit that mpirun answers the same way; never an exit that
 * leaves peers hanging), groups with printable names, and the tunables. */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm_internal.h"

/* Bytes per MPI call, from the piece sweep of `trident bench comm` on the
 * development machine (2 cores, Open MPI 4.1.4, shared memory): all-reduce
 * of 64 MiB on 2 ranks is within 10% of its best (~5.5 GB/s) from 512 KiB to
 * 4 MiB pieces, and on 4 ranks (oversubscribed) peaks at 1 MiB; a single
 * 64 MiB call gets 1.7 GB/s. Larger pieces also cost more scratch (bf16). */
#define TD_COMM_DEFAULT_PIECE ((size_t)1 << 20)
/* Pieces of nonblocking collectives in MPI at once, per group. 1, 2 and 4
 * were within noise at 1 MiB pieces in the sweep (2 cores share one memory
 * bus); at 8 MiB+ pieces 2+ lost half. Each costs a scratch piece for bf16. */
#define TD_COMM_DEFAULT_INFLIGHT 2

static int g_initialized, g_we_initialized_mpi, g_world_rank, g_world_size = 1;
static int g_thread_level = MPI_THREAD_SINGLE; /* what MPI provides */
static pthread_t g_main_thread;                /* the one that initialised MPI */
static double g_t0_ms;
static td_comm *g_world;
static size_t g_piece = TD_COMM_DEFAULT_PIECE;
static int g_inflight = TD_COMM_DEFAULT_INFLIGHT;
static _Atomic double g_timeout = 300.0; /* read by the watchdog thread */

int td_comm_world_rank(void) { return g_world_rank; }
double td_comm_since_init_ms(void) { return td_now_ms() - g_t0_ms; }
int td_comm_initialized(void) { return g_initialized; }

_Noreturn void td_mpi_failed(int rc, const char *what, const char *file, int line) {
    char msg[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "code %d", rc);
    const char *base = strrchr(file, '/');
    fflush(stdout);
    fprintf(stderr, "trident: rank %d: MPI error in %s at %s:%d: %s\n", g_world_rank, what,
            base ? base + 1 : file, line, msg);
    td_comm_dump(16);
    td_comm_abort(1);
}

/* MPI calls are the main thread's under FUNNELED; MPI_THREAD_MULTIPLE lets
 * any thread make them (the watchdog's MPI_Abort among them). */
static int may_call_mpi(void) {
    return g_thread_level >= MPI_THREAD_MULTIPLE || pthread_equal(pthread_self(), g_main_thread);
}

_Noreturn void td_comm_abort(int code) {
    fflush(stdout);
    fflush(stderr);
    td_heartbeat_abort_notice();
    if (may_call_mpi()) MPI_Abort(MPI_COMM_WORLD, code);
    _exit(code); /* another thread: mpirun ends the job on this non-zero exit */
}

/* td_fail / TD_ASSERT on any rank end the job on every rank. */
static void abort_hook(int code) {
    fflush(stdout);
    fflush(stderr);
    /* alone there are no peers to take down, and a singleton's MPI_Abort
     * only adds runtime noise after the one clear error line */
    if (g_world_size == 1 && may_call_mpi()) {
        MPI_Finalize();
        td_exit(code ? code : 1);
    }
    td_comm_abort(code ? code : 1);
}

/* "dp{0,1}", "world{0-7}", "dp{0,2,4,...,62}": the world ranks in brackets,
 * runs of 3+ consecutive ranks as a-b, cut with "..." when too long. */
static void make_label(td_comm *c) {
    char *out = c->label;
    size_t cap = sizeof c->label, n = 0;
    n += (size_t)snprintf(out + n, cap - n, "%s{", c->name);
    for (int i = 0; i < c->size && n < cap; i++) {
        int j = i;
        while (j + 1 < c->size && c->world_ranks[j + 1] == c->world_ranks[j] + 1) j++;
        char item[32];
        if (j - i >= 2)
            snprintf(item, sizeof item, "%s%d-%d", i ? "," : "", c->world_ranks[i],
                     c->world_ranks[j]);
        else
            snprintf(item, sizeof item, "%s%d", i ? "," : "", c->world_ranks[i]), j = i;
        /* Room for the item, ",...,last}" and the terminator. */
        if (n + strlen(item) + 16 >= cap) {
            snprintf(out + n, cap - n, ",...,%d}", c->world_ranks[c->size - 1]);
            return;
        }
        n += (size_t)snprintf(out + n, cap - n, "%s", item);
        i = j;
    }
    snprintf(out + n, cap - n, "}");
}

/* Every open group, for the staging reservation (stage.c): its shared ring,
 * if it has one, is part of the staging pool on a device. */
static td_comm **g_open;
static int g_n_open, g_cap_open;

int td_comm_open_groups(td_comm ***out) {
    *out = g_open;
    return g_n_open;
}

td_comm *td_comm_wrap(MPI_Comm mpi, const char *name) {
    td_comm *c = calloc(1, sizeof *c);
    TD_ASSERT(c);
    c->mpi = mpi;
    TD_MPI(MPI_Comm_rank(mpi, &c->rank));
    TD_MPI(MPI_Comm_size(mpi, &c->size));
    snprintf(c->name, sizeof c->name, "%s", name && *name ? name : "group");
    c->world_ranks = calloc((size_t)c->size, sizeof(int));
    int *mine = calloc((size_t)c->size, sizeof(int));
    TD_ASSERT(c->world_ranks && mine);
    for (int i = 0; i < c->size; i++) mine[i] = i;
    MPI_Group g, wg;
    TD_MPI(MPI_Comm_group(mpi, &g));
    TD_MPI(MPI_Comm_group(MPI_COMM_WORLD, &wg));
    TD_MPI(MPI_Group_translate_ranks(g, c->size, mine, wg, c->world_ranks));
    TD_MPI(MPI_Group_free(&g));
    TD_MPI(MPI_Group_free(&wg));
    free(mine);
    make_label(c);
    td_comm_choose_transport(c);
    if (g_n_open == g_cap_open) {
        g_cap_open = g_cap_open ? 2 * g_cap_open : 16;
        g_open = realloc(g_open, (size_t)g_cap_open * sizeof *g_open);
        TD_ASSERT(g_open);
    }
    g_open[g_n_open++] = c;
    return c;
}

void td_comm_init(int *argc, char ***argv) {
    if (g_initialized) return;
    int already = 0, provided = 0;
    TD_MPI(MPI_Initialized(&already));
    if (!already) {
        td_launcher_check(); /* srun without --mpi=pmix: one line, not Open MPI's page */
        /* Open MPI's libnbc runs every in-place MPI_Iallreduce (and every one
         * below 4 ranks) as a binomial reduce-then-broadcast; its ring ran our
         * nonblocking pieces ~1.4x faster (`trident bench comm` sweep, 2
         * ranks). Only a default: a value set by the user or by mpirun --mca
         * wins, and other MPIs ignore the variable. */
        setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "1", 0);
        /* FUNNELED: only the main thread calls MPI; the watchdog and
         * heartbeat threads never do (td_comm_abort exits instead). */
        int rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
        if (rc != MPI_SUCCESS) {
            fprintf(stderr, "trident: error: MPI_Init_thread failed (code %d)\n", rc);
            exit(1);
        }
        g_we_initialized_mpi = 1;
    } else {
        TD_MPI(MPI_Query_thread(&provided));
    }
    g_thread_level = provided;
    g_main_thread = pthread_self();
    /* Return codes instead of MPI's default abort-with-a-generic-message, so
     * every failure says which call and where (TD_MPI). Communicators made
     * from world inherit the handler. */
    TD_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    TD_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &g_world_rank));
    TD_MPI(MPI_Comm_size(MPI_COMM_WORLD, &g_world_size));
    td_set_abort_hook(abort_hook);
    td_set_exit_hook(td_comm_finalize);
    td_log_set_identity(g_world_rank, NULL, 0);
    g_t0_ms = td_now_ms();
    td_nodes_init();
    MPI_Comm dup;
    /* Our own copy of world, so trident's traffic cannot match anything a
     * library linked beside it sends on MPI_COMM_WORLD. */
    TD_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    g_world = td_comm_wrap(dup, "world");
    td_a2a_tags_init(MPI_COMM_WORLD);
    g_initialized = 1;
    td_watchdog_start();
    td_heartbeat_start(g_world->mpi);
}

void td_comm_finalize(void) {
    if (!g_initialized) return;
    td_watchdog_stop();
    td_requests_shutdown();
    td_comm_free(g_world);
    g_world = NULL;
    td_nodes_free();
    g_initialized = 0;
    td_set_abort_hook(NULL);
    td_set_exit_hook(NULL);
    if (g_we_initialized_mpi) TD_MPI(MPI_Finalize());
    /* after MPI_Finalize, which waits for the others: a rank that dies
     * meanwhile is still reported */
    td_heartbeat_stop();
}

td_comm *td_comm_world(void) {
    TD_ASSERT(g_initialized);
    return g_world;
}

td_comm *td_comm_split(td_comm *parent, int color, int key, const char *name) {
    TD_ASSERT(parent);
    /* A collective over parent: pieces still waiting to be issued there go
     * first, or ranks would see the split and those pieces in different orders. */
    td_comm_flush(parent);
    MPI_Comm out;
    TD_MPI(MPI_Comm_split(parent->mpi, color < 0 ? MPI_UNDEFINED : color, key, &out));
    if (out == MPI_COMM_NULL) return NULL;
    return td_comm_wrap(out, name);
}

void td_comm_free(td_comm *c) {
    if (!c) return;
    TD_CHECK(c->n_active == 0,
             "td_comm_free(%s) with %d requests still active; wait for them first", c->label,
             c->n_active);
    for (int i = 0; i < g_n_open; i++)
        if (g_open[i] == c) g_open[i] = g_open[--g_n_open];
    td_hier_free(c);
    td_shm_close(c->shm);
    TD_MPI(MPI_Comm_free(&c->mpi));
    free(c->world_ranks);
    free(c);
}

int td_comm_rank(const td_comm *c) { return c->rank; }
int td_comm_size(const td_comm *c) { return c->size; }
const char *td_comm_name(const td_comm *c) { return c->label; }

int td_comm_world_rank_of(const td_comm *c, int r) {
    TD_ASSERT(r >= 0 && r < c->size);
    return c->world_ranks[r];
}

void td_comm_set_piece_bytes(size_t bytes) {
    /* Lower bound keeps per-call overhead sane; the upper one keeps MPI's int
     * counts safe for every dtype. */
    if (bytes == 0) bytes = TD_COMM_DEFAULT_PIECE;
    if (bytes < 256) bytes = 256;
    if (bytes > ((size_t)1 << 30)) bytes = (size_t)1 << 30;
    g_piece = bytes;
}
size_t td_comm_piece_bytes(void) { return g_piece; }

void td_comm_set_inflight(int pieces) {
    if (pieces <= 0) pieces = TD_COMM_DEFAULT_INFLIGHT;
    g_inflight = pieces > TD_MAX_INFLIGHT ? TD_MAX_INFLIGHT : pieces;
}
int td_comm_inflight(void) { return g_inflight; }

void td_comm_set_timeout(double seconds) { g_timeout = seconds; }
double td_comm_timeout(void) { return g_timeout; }
