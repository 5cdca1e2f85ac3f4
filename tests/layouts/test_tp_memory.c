/* Tensor parallelism, what a rank holds (run under mpirun with tp = ranks):
 *  - parameters: the measured bytes equal the split share plus the
 *    replicated tensors, by a formula written here from the config (not
 *    from the parameter table);
 *  - activations and communication buffers: measured = planned exactly,
 *    with and without sequence parallelism (whose reduce-scatters, split in
 *    small MPI pieces here, need the comm layer's packing scratch), and
 *    sequence parallelism saves exactly what its formula says (the residual
 *    stream's tensors divided by tp, less its scratch);
 *  - initialization: one step at learning rate 0 leaves the initial
 *    parameters; gathered from every tp rank into the canonical layout they
 *    equal the single-process init bit for bit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/base.h"
#include "trident/comm.h"
#include "trident/train.h"

#ifndef TD_DATA_DIR
#error "TD_DATA_DIR must name the repository's data/ folder"
#endif

static int fails;

static void check_eq(int rank, const char *what, size_t got, size_t want) {
    if (got != want) {
        printf("FAIL rank %d %s: %zu B, expected %zu B\n", rank, what, got, want);
        fails++;
    } else if (rank == 0) {
        printf("ok   %s: %zu B\n", what, got);
    }
}

static size_t up16(size_t n) { return (n + 15) / 16 * 16; }

int main(int argc, char **argv) {
    td_comm_init(&argc, &argv);
    int rank = td_comm_rank(td_comm_world()), tp = td_comm_size(td_comm_world());
    td_train_opts o;
    td_train_opts_default(&o);
    o.data = TD_DATA_DIR "/tinyshakespeare.txt";
    o.layers = 2, o.heads = 4, o.embd = 32, o.seq = 16, o.batch = 4, o.steps = 1;
    o.tp = tp;
    o.eval_every = 0;
    o.threads = 1;
    o.quiet = 1;
    o.log_every = 1000;
    o.optim.lr = o.optim.min_lr = 0.0f; /* the step leaves the initial parameters */
    td_train_result res[2];
    for (int sp = 0; sp < 2; sp++) {
        o.seq_parallel = sp;
        /* 4 KiB MPI pieces: the reduce-scatters of sequence parallelism then
         * span several pieces and the comm layer packs them in scratch,
         * which the plan must hold */
        o.piece_mb = sp ? 4096.0 / 1048576.0 : 0.0;
        td_train_run(&o, &res[sp], 1);
    }

    /* parameters per rank: split tensors / tp, replicated whole, each unit
     * padded to 16 floats (V = 65 characters, padded to 16 x tp) */
    size_t L = o.layers, C = o.embd, T = o.seq, V = 65,
           Vp = (V + 16 * tp - 1) / (16 * tp) * (16 * tp);
    size_t unit0 = up16(Vp / tp * C + T * C);
    size_t block = up16((12 * C * C + 7 * C) / tp + 6 * C);
    size_t params = (unit0 + L * block + up16(2 * C)) * sizeof(float);
    for (int sp = 0; sp < 2; sp++) {
        check_eq(rank, sp ? "params (sequence parallel)" : "params",
                 res[sp].mem_peak[TD_MEM_PARAMS], params);
        check_eq(rank,
                 sp ? "activations measured = planned (sequence parallel)"
                    : "activations measured = planned",
                 res[sp].mem_peak[TD_MEM_ACTS], res[sp].mem_planned[TD_MEM_ACTS]);
        check_eq(rank,
                 sp ? "comm buffers measured = planned (sequence parallel, 4 KiB pieces)"
                    : "comm buffers measured = planned",
                 res[sp].mem_peak[TD_MEM_COMM], res[sp].mem_planned[TD_MEM_COMM]);
    }
    /* what sequence parallelism saves per rank: of N = B*T rows it keeps
     * Ns = N/tp in the residual stream: per block attproj, res2, fcproj,
     * res3 [.,C] and the two norms' mean and rstd; the embedding's output and
     * ln_f's statistics; dres. It adds scratch: a full [N,C] buffer, the
     * reduced input gradient [Ns,C] and the norms' partial gradients [2C]. */
    size_t N = o.batch * T, Ns = N / tp, d = N - Ns;
    long long saved = (long long)(L * (4 * d * C + 4 * d) + d * C + 2 * d + d * C) -
                      (long long)(N * C + Ns * C + 2 * C);
    saved *= (long long)sizeof(float);
    long long got =
        (long long)res[0].mem_peak[TD_MEM_ACTS] - (long long)res[1].mem_peak[TD_MEM_ACTS];
    if (got != saved || saved <= 0) {
        printf("FAIL rank %d sequence parallelism saves %lld B of activations, formula %lld B\n",
               rank, got, saved);
        fails++;
    } else if (rank == 0) {
        printf("ok   sequence parallelism: activations %zu B -> %zu B per rank (saves %lld B = "
               "formula)\n",
               res[0].mem_peak[TD_MEM_ACTS], res[1].mem_peak[TD_MEM_ACTS], got);
    }

    if (rank == 0) { /* the gathered parameters against the single-process init */
        td_gpt_config cfg = {.L = o.layers, .H = o.heads, .C = o.embd, .T = o.seq, .V = (int)V};
        td_gpt_config_finish(&cfg);
        td_param_table canon;
        td_param_table_build(&canon, &cfg, 1);
        float *init = td_alloc(canon.numel * sizeof(float), TD_MEM_OTHER);
        td_param_init_range(&canon, o.seed, 0, canon.numel, init);
        for (int sp = 0; sp < 2; sp++) {
            size_t bad = 0, first = 0;
            for (size_t i = 0; i < canon.numel; i++)
                if (memcmp(&init[i], &res[sp].final_params[i], sizeof(float)) != 0 && bad++ == 0)
                    first = i;
            if (bad || res[sp].numel != canon.numel) {
                printf("FAIL init (tp %d%s): %zu of %zu elements differ, first %zu: %.9g vs %.9g\n",
                       tp, sp ? ", sequence parallel" : "", bad, canon.numel, first,
                       res[sp].final_params[first], init[first]);
                fails++;
            } else {
                printf("ok   init (tp %d%s): gathered parameters equal the single-process init bit "
                       "for bit "
                       "(%zu elements)\n",
                       tp, sp ? ", sequence parallel" : "", canon.numel);
            }
        }
        td_free(init);
        td_param_table_free(&canon);
    }
    td_train_result_free(&res[0]);
    td_train_result_free(&res[1]);
    float f = (float)fails;
    td_allreduce(td_comm_world(), &f, 1, TD_F32, TD_SUM);
    if (rank == 0) printf("test_tp_memory: %s\n", f > 0 ? "FAILED" : "passed");
    td_comm_finalize();
    return f > 0 ? 1 : 0;
}
