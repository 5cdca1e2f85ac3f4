/* Activation recomputation (--recompute block) computes the same step as
 * keeping every block's activations: on the same layout, trained twice in
 * one process (none, then block), the losses and gradient norms of every
 * step and the final parameters and AdamW moments (gathered into the
 * canonical layout) are equal bit for bit. The recomputed forward reruns the
 * same kernels on the same input and parameters (and, under tp, the same
 * collectives on the same data), so any difference at all means the backward
 * read a tensor of another block or a stale one: no tolerance.
 *
 * Memory, on every rank: the activations the accounting allocator measured
 * equal the plan in both runs, and recomputation saves exactly (L - 1) sets
 * of a block's saved tensors other than its output, by the formula below
 * (written from td_block_acts' shapes, independently of gpt.c's plan); a
 * pipeline stage saves them in every slot, less one shared block.
 * Under tp the traffic of the last step equals td_tp_formula plus the
 * recomputed forwards' (td_tp_formula_add_recompute) in both runs.
 * Usage (under mpirun): test_recompute [train flags] */
#include <stdio.h>
#include <string.h>

#include "trident/base.h"
#include "trident/comm.h"
#include "trident/train.h"

#ifndef TD_DATA_DIR
#error "TD_DATA_DIR must name the repository's data/ folder"
#endif

enum { STEPS = 8 };

static void run(td_train_opts *o, const char *mode, int argc, char **argv, td_train_result *res) {
    td_train_opts_default(o);
    o->data = TD_DATA_DIR "/tinyshakespeare.txt";
    o->layers = 4, o->heads = 4, o->embd = 64, o->seq = 32, o->batch = 12, o->steps = STEPS;
    o->optim.warmup = 3;
    o->eval_every = 0, o->threads = 1, o->quiet = 1, o->log_every = 1000;
    td_train_opts_parse(o, argc - 1, argv + 1);
    o->recompute = mode;
    td_train_opts_choices(o);
    td_train_run(o, res, 1);
}

/* Bytes of one block's saved tensors other than res3 on this rank (the
 * shapes in model.h's td_block_acts), for micro-batch Bm. */
static size_t block_saved_bytes(const td_train_opts *o, int Bm) {
    size_t tp = (size_t)o->tp, N = (size_t)Bm * o->seq, C = (size_t)o->embd;
    size_t Ns = o->seq_parallel ? N / tp : N, Ca = C / tp, Ha = (size_t)o->heads / tp,
           F = 4 * C / tp;
    size_t floats = 2 * N * C + 4 * Ns    /* ln1, ln2 [N,C]; their mean and rstd [Ns] */
                    + N * 3 * Ca + N * Ca /* qkv, atty */
                    + (size_t)Bm * Ha * o->seq          /* attention lse */
                    + 3 * Ns * C                        /* attproj, res2, fcproj */
                    + 2 * N * F;                        /* fch, fch_gelu */
    return floats * sizeof(float);
}

static int traffic_ok(const td_train_result *r, const char *mode, int me) {
    int ok = 1;
    for (int k = 0; k < TD_TP_NOPS; k++)
        if (r->tp_measured.calls[k] != r->tp_formula.calls[k] ||
            r->tp_measured.bytes[k] != r->tp_formula.bytes[k]) {
            printf("FAIL rank %d recompute %s: tp op %d moved %llu calls / %llu B, formula %llu / "
                   "%llu\n",
                   me, mode, k, (unsigned long long)r->tp_measured.calls[k],
                   (unsigned long long)r->tp_measured.bytes[k],
                   (unsigned long long)r->tp_formula.calls[k],
                   (unsigned long long)r->tp_formula.bytes[k]);
            ok = 0;
        }
    return ok;
}

int main(int argc, char **argv) {
    td_comm_init(&argc, &argv);
    int me = td_comm_rank(td_comm_world()), world = td_comm_size(td_comm_world());
    td_train_opts o;
    td_train_result none, block;
    run(&o, "none", argc, argv, &none);
    run(&o, "block", argc, argv, &block);
    int fails = 0;

    /* memory: planned = measured in both runs, and the saving by formula */
    const td_train_result *rs[2] = {&none, &block};
    const char *names[2] = {"none", "block"};
    for (int k = 0; k < 2; k++)
        if (rs[k]->mem_peak[TD_MEM_ACTS] != rs[k]->mem_planned[TD_MEM_ACTS]) {
            printf("FAIL rank %d recompute %s: activations measured %zu B, planned %zu B\n", me,
                   names[k], rs[k]->mem_peak[TD_MEM_ACTS], rs[k]->mem_planned[TD_MEM_ACTS]);
            fails++;
        }
    /* parameter servers (the last ranks of the grid) hold no activations */
    int server = me >= world - o.ps_servers;
    int dp = (world - o.ps_servers) / (o.tp * o.pp), Bm = o.batch / dp / o.grad_accum;
    size_t blk = block_saved_bytes(&o, Bm),
           out = (size_t)Bm * o.seq / (o.seq_parallel ? o.tp : 1) * o.embd * 4;
    long long want = server ? 0 : (long long)(o.layers - 1) * (long long)blk;
    int exact = 1;
    if (o.pp > 1) {
        /* a stage keeps slots of micro-batch chunks: each slot saves its n
         * blocks' tensors but for their outputs, and the stage adds one whole
         * shared block (its output included) to recompute into. Slots:
         * GPipe M, 1F1B min(P - s, M) (test_layouts checks those counts);
         * other schedules and uneven splits are only required to save. */
        int P = o.pp, M = o.grad_accum, st = block.pp_stats.stage,
            n = o.layers / (P * o.virtual_stages);
        int slots = strcmp(o.schedule, "gpipe") == 0  ? M
                    : strcmp(o.schedule, "1f1b") == 0 ? (P - st < M ? P - st : M)
                                                      : -1;
        exact = slots > 0 && o.layers % (P * o.virtual_stages) == 0 &&
                strcmp(o.pp_partition, "uniform") == 0;
        want = (long long)slots * n * (long long)blk - (long long)(blk + out);
    }
    long long saved =
        (long long)none.mem_peak[TD_MEM_ACTS] - (long long)block.mem_peak[TD_MEM_ACTS];
    if ((!server && saved <= 0) || (exact && saved != want)) {
        printf("FAIL rank %d: activations %zu B without recomputation, %zu B with: saved %lld B, "
               "formula %lld B%s\n",
               me, none.mem_peak[TD_MEM_ACTS], block.mem_peak[TD_MEM_ACTS], saved, want,
               exact ? "" : " (not checked exactly here)");
        fails++;
    } else if (!server && (me == 0 || o.pp > 1)) {
        printf("rank %d activations (measured = planned): %.2f KiB -> %.2f KiB with recompute "
               "block (saved %lld B%s)\n",
               me, none.mem_peak[TD_MEM_ACTS] / 1024.0, block.mem_peak[TD_MEM_ACTS] / 1024.0, saved,
               exact ? " = formula" : "");
    }
    if (o.tp > 1) fails += !traffic_ok(&none, "none", me) + !traffic_ok(&block, "block", me);

    if (me == 0) {
        /* losses and gradient norms of every step, bit for bit */
        int same = none.steps_done == STEPS && block.steps_done == STEPS;
        for (int s = 0; s < STEPS && same; s++)
            if (memcmp(&none.losses[s], &block.losses[s], sizeof(float)) ||
                memcmp(&none.grad_norms[s], &block.grad_norms[s], sizeof(float))) {
                printf(
                    "FAIL step %d: recompute block loss %.9g norm %.9g, none loss %.9g norm %.9g\n",
                    s, block.losses[s], block.grad_norms[s], none.losses[s], none.grad_norms[s]);
                same = 0;
            }
        fails += !same;
        printf("losses and gradient norms: %d steps %s (last loss %.7f, norm %.7f)\n", STEPS,
               same ? "bit for bit equal" : "DIFFERENT", none.losses[STEPS - 1],
               none.grad_norms[STEPS - 1]);
        /* final state: parameters and both moments, every element */
        const char *what[3] = {"params", "adam m", "adam v"};
        const float *a[3] = {none.final_params, none.final_m, none.final_v};
        const float *b[3] = {block.final_params, block.final_m, block.final_v};
        for (int k = 0; k < 3; k++) {
            size_t diff = 0, first = 0;
            for (size_t i = 0; i < none.numel; i++)
                if (memcmp(&a[k][i], &b[k][i], sizeof(float)) && diff++ == 0) first = i;
            if (diff) {
                printf("FAIL final %s: %zu of %zu elements differ, first %zu: %.9g with recompute, "
                       "%.9g without\n",
                       what[k], diff, none.numel, first, b[k][first], a[k][first]);
                fails++;
            } else
                printf("final %s: %zu elements bit for bit equal\n", what[k], none.numel);
        }
        printf("recompute %s: %s\n", argc > 1 ? argv[1] : "np1", fails ? "FAILED" : "passed");
    }
    td_train_result_free(&none);
    td_train_result_free(&block);
    float f = (float)fails;
    td_allreduce(td_comm_world(), &f, 1, TD_F32, TD_MAX);
    td_comm_finalize();
    return f > 0 ? 1 : 0;
}
