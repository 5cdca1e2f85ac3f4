/* Agreement on every shared-memory group op: each rank publishes a
 * descriptor of each all-reduce, reduce-scatter and all-gather it starts on a
 * group with a ring (what it computes, and how this rank runs it: staging
 * ring, straight between shared buffers, or MPI), and no data moves until
 * every rank's descriptor of that op matches.
 *
 * Why: the path is a per-rank choice (a buffer inside a td_comm_alloc_shared
 * allocation goes direct, bf16 or a plain buffer goes through the ring or
 * MPI, td_comm_set_shm can turn shared memory off), and ranks that choose
 * differently would wait for each other in different places until the comm
 * timeout. With the descriptors they stop at once with one line naming the
 * group, the op, both call sites and both descriptors.
 *
 * Ops are numbered k = 1, 2, ... per group across every path. Descriptor k
 * lives in desc[k % TD_SHM_DESCS] of its owner's control block; `entered`
 * says it is published, `finished` that the owner checked op k (for a direct
 * op: did its part) and so no longer reads anyone's descriptor k. Checks
 * happen in op order on each rank. The cost on the MPI path is one look at
 * the peers' counters before the first piece: MPI's collective waits for
 * them anyway. */
#include <stdio.h>
#include <string.h>

#include "shm_internal.h"

void td_shm_announce(td_shm_op *op, td_shm_path path, const td_shm_region *g, uint64_t offset) {
    td_shm *s = op->shm;
    uint64_t k = s->started + 1;
    /* desc[k % 64] last held op k-64: every rank must be past it before it
     * is reused. With 64+ ops in flight (a deep model's buckets) that means
     * waiting here, progressing every request meanwhile: the older ops only
     * need the ranks' own turns to finish. */
    double since = 0;
    unsigned idle = 0;
    while (k > TD_SHM_DESCS &&
           !td_shm_all_reached(s, offsetof(td_shm_ctl, finished), k - TD_SHM_DESCS))
        td_shm_idle(&idle, &since, op->seq);
    s->started = k;
    td_shm_ctl *mine = s->ctl[s->me];
    td_shm_desc *d = &mine->desc[k % TD_SHM_DESCS];
    d->region = g ? g->id : 0;
    d->offset = offset;
    d->count = op->count;
    d->kind = (uint8_t)op->kind;
    d->dt = (uint8_t)op->dt;
    d->redop = (uint8_t)op->redop;
    d->path = (uint8_t)path;
    d->line = op->line;
    if (s->desc_file[k % TD_SHM_DESCS] != op->file) { /* the name costs more than a small op */
        const char *f = op->file ? strrchr(op->file, '/') : NULL;
        snprintf(d->file, sizeof d->file, "%s", f ? f + 1 : op->file ? op->file : "?");
        s->desc_file[k % TD_SHM_DESCS] = op->file;
    }
    td_shm_publish(&mine->entered, k); /* release: the descriptor is visible first */
    op->k = k;
    op->direct = path == TD_PATH_DIRECT;
}

/* "an fp32 all-reduce (sum) of 1024 elements through the staging ring";
 * an all-to-all's count is what this rank sends (it may differ per rank) */
static void describe(char *out, size_t cap, const td_shm_desc *d) {
    static const char *kinds[] = {"all-reduce", "reduce-scatter", "all-gather", "all-to-all"};
    static const char *paths[] = {"the staging ring (buffer not in a shared allocation)",
                                  "shared buffers (buffer inside a td_comm_alloc_shared one)",
                                  "MPI"};
    snprintf(out, cap, "%s %s%s of %llu elements%s through %s", td_dtype_name((td_dtype)d->dt),
             d->kind < 4 ? kinds[d->kind] : "unknown op",
             d->kind == TD_SHM_ALLREDUCE ? (d->redop == TD_MAX ? " (max)" : " (sum)") : "",
             (unsigned long long)d->count, d->kind == TD_SHM_ALL_TO_ALL ? " sent" : "",
             d->path < 3 ? paths[d->path] : "an unknown path");
}

void td_shm_check_peers(const td_shm_op *op) {
    const td_shm *s = op->shm;
    const td_shm_desc *me = &s->ctl[s->me]->desc[op->k % TD_SHM_DESCS];
    for (int j = 0; j < s->n; j++) {
        const td_shm_desc *d = &s->ctl[j]->desc[op->k % TD_SHM_DESCS];
        int count_ok = d->count == me->count || me->kind == TD_SHM_ALL_TO_ALL;
        if (count_ok && d->kind == me->kind && d->dt == me->dt && d->redop == me->redop &&
            d->path == me->path)
            continue;
        char here[160], there[160], file[sizeof d->file];
        describe(here, sizeof here, me);
        describe(there, sizeof there, d);
        memcpy(file, d->file, sizeof file);
        file[sizeof file - 1] = 0;
        td_comm_dump(4); /* this rank's recent calls, the mismatched one last */
        td_fail("ranks disagree on op %llu of group %s: here (group rank %d, %s:%d): %s; "
                "group rank %d (world rank %d, %s:%d): %s (every rank must make the same "
                "calls in the same order, with the same count and dtype, and buffers placed "
                "alike: all inside td_comm_alloc_shared allocations of the group, or none)",
                (unsigned long long)op->k, s->label, s->me, me->file, (int)me->line, here, j,
                s->world_ranks[j], file, (int)d->line, there);
    }
}

int td_shm_agreed(td_shm_op *op) {
    td_shm *s = op->shm;
    if (s->finished != op->k - 1 || !td_shm_all_reached(s, offsetof(td_shm_ctl, entered), op->k))
        return 0;
    td_shm_check_peers(op);
    s->finished = op->k;
    td_shm_publish(&s->ctl[s->me]->finished, op->k);
    return 1;
}

void td_shm_agree_wait(td_shm_op *op) {
    double since = 0;
    unsigned idle = 0;
    while (!td_shm_agreed(op)) td_shm_idle(&idle, &since, op->seq);
}
