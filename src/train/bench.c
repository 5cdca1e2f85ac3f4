/* `trident bench`: train (throughput of the real training loop on synthetic
 * tokens), sgemm (the machine's GEMM rate), comm (collective bandwidth). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trident/base.h"
#include "trident/cli.h"
#include "trident/comm.h"
#include "trident/flags.h"
#include "trident/kernels.h"
#include "trident/train.h"

static int bench_train(int argc, char **argv) {
    td_train_opts o;
    td_train_opts_default(&o);
    int vocab = 65, warmup_steps = 5, steps = 50;
    td_flag flags[] = {
        {"--layers", TD_FLAG_INT, &o.layers, "blocks (4)", NULL},
        {"--heads", TD_FLAG_INT, &o.heads, "heads (4)", NULL},
        {"--embd", TD_FLAG_INT, &o.embd, "channels (128)", NULL},
        {"--seq", TD_FLAG_INT, &o.seq, "context (64)", NULL},
        {"--batch", TD_FLAG_INT, &o.batch, "global batch (12)", NULL},
        {"--grad-accum", TD_FLAG_INT, &o.grad_accum, "micro-batches (1)", NULL},
        {"--vocab", TD_FLAG_INT, &vocab, "vocabulary of the synthetic tokens (65)", NULL},
        {"--steps", TD_FLAG_INT, &steps, "timed steps (50)", NULL},
        {"--warmup-steps", TD_FLAG_INT, &warmup_steps, "untimed steps first (5)", NULL},
        {"--threads", TD_FLAG_INT, &o.threads, "threads per rank", NULL},
        {"--dp", TD_FLAG_INT, &o.dp, "data-parallel size", NULL},
        {"--tp", TD_FLAG_INT, &o.tp, "tensor-parallel size", NULL},
        {"--sequence-parallel", TD_FLAG_BOOL, &o.seq_parallel, "sequence parallelism (tp >= 2)", NULL},
        {"--dp-mode", TD_FLAG_STR, &o.dp_mode, "allreduce, reduce-broadcast, ps", NULL},
        {"--ps-servers", TD_FLAG_INT, &o.ps_servers, "parameter servers", NULL},
        {"--ps-staleness", TD_FLAG_INT, &o.ps_staleness, "ps staleness bound", NULL},
        {"--zero", TD_FLAG_INT, &o.zero, "ZeRO stage", NULL},
        {"--dp-shard", TD_FLAG_INT, &o.dp_shard, "hybrid sharding: ZeRO within shards of N ranks (0: none)", NULL},
        {"--cp", TD_FLAG_INT, &o.cp, "context-parallel size", NULL},
        {"--bucket-mb", TD_FLAG_DOUBLE, &o.bucket_mb, "bucket MiB", NULL},
        {"--no-overlap", TD_FLAG_BOOL, &o.no_overlap, "communicate after backward", NULL},
        {"--memory-report", TD_FLAG_BOOL, &o.memory_report, "detailed memory table", NULL},
        {"--log", TD_FLAG_STR, &o.log, "JSON-lines metrics file (memory plan and measurement)", NULL},
    };
    td_flags_parse("bench train", flags, (int)(sizeof flags / sizeof flags[0]), argc, argv);
    td_train_opts_choices(&o); /* --dp-mode */
    TD_CHECK(steps > 0 && warmup_steps >= 0, "bench train: --steps must be positive");
    char data[32];
    snprintf(data, sizeof data, "synthetic:%d", vocab);
    o.data = data;
    o.steps = warmup_steps + steps;
    o.timing_skip = warmup_steps;
    o.eval_every = 0;
    o.quiet = 1;
    o.optim.warmup = 0;
    o.optim.max_steps = o.steps;
    td_train_result res;
    td_train_run(&o, &res, 0);
    if (td_log_rank() == 0)
        printf("bench train: threads=%d step_ms=%.3f tokens_per_s=%.1f mfu=%.4f exposed_comm_ms=%.3f "
               "comm_ms=%.3f max_staleness=%d\n",
               o.threads > 0 ? o.threads : 1, res.step_ms, res.tokens_per_s, res.mfu, res.exposed_comm_ms,
               res.comm_ms, res.max_staleness);
    td_train_result_free(&res);
    return 0;
}

static int bench_sgemm(void) {
    const char *ct = getenv("OPENBLAS_CORETYPE");
    int cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    for (int t = 1; t <= cores && t < 64; t *= 2)
        printf("bench sgemm: threads=%d n=512 gflops=%.1f per_thread=%.1f (single-threaded OpenBLAS GEMMs "
               "side by side, OPENBLAS_CORETYPE=%s)\n",
               t, td_sgemm_peak_gflops(t), td_sgemm_peak_gflops(t) / t, ct ? ct : "unset");
    return 0;
}

int td_bench_main(int argc, char **argv) {
    TD_CHECK(argc >= 1, "bench: say what to measure: train, sgemm or comm");
    if (strcmp(argv[0], "--help") == 0 || strcmp(argv[0], "-h") == 0) {
        printf("usage: trident bench train|sgemm|comm [flags]\n"
               "  train                  the training loop's throughput on synthetic tokens (bench train --help)\n"
               "  sgemm                  this machine's single-threaded OpenBLAS GEMM rate, 1, 2, 4 ... threads side by side\n"
               "  comm                   collective bus bandwidth per op and size, under mpirun (bench comm --help)\n");
        return 0;
    }
    if (strcmp(argv[0], "train") == 0) return bench_train(argc - 1, argv + 1);
    if (strcmp(argv[0], "sgemm") == 0) return bench_sgemm();
    if (strcmp(argv[0], "comm") == 0) return td_comm_bench_main(argc - 1, argv + 1);
    td_fail("bench: unknown benchmark '%s'; use train, sgemm or comm", argv[0]);
}
