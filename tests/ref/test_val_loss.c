/* The validation loss the trainer reports, against PyTorch: train a few
 * steps in-process (any layout: trainer flags are passed through), take the
 * final weights (canonical layout, rank 0) and the reported final val loss,
 * rebuild the exact validation sequences the trainer evaluates (the same
 * sampler calls as evaluate() in src/train/train.c: split 1, the run's seed,
 * iteration it, sequences 0..batch-1 of the global batch), and have
 * tests/ref/gpt_ref.py compute the mean loss over those tokens with nanoGPT's
 * model. A wrong split, stale weights, a missing rank's share or a wrong
 * normaliser all change the loss by far more than the tolerance.
 *
 * Usage: test_val_loss [trident train flags], under mpirun. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ref_io.h"
#include "trident/base.h"
#include "trident/comm.h"
#include "trident/data.h"
#include "trident/model.h"
#include "trident/train.h"

#ifndef TD_SOURCE_DIR
#define TD_SOURCE_DIR "."
#endif
#ifndef TD_DATA_DIR
#error "TD_DATA_DIR must name the repository's data/ folder"
#endif

int main(int argc, char **argv) {
    td_comm_init(&argc, &argv);
    /* A small model trained 12 steps with a high lr, so the weights are far
     * from their initialisation (eval on the initial weights would differ). */
    const char *base[] = {"--data", TD_DATA_DIR "/tinyshakespeare.txt", "--layers", "2", "--heads", "4",
                          "--embd", "32", "--seq", "32", "--batch", "8", "--steps", "12", "--warmup",
                          "2", "--lr", "1e-2", "--eval-every", "12", "--eval-iters", "4", "--threads",
                          "1"};
    int nb = (int)(sizeof base / sizeof base[0]), na = nb + argc - 1;
    char **args = malloc(sizeof(char *) * (size_t)na);
    TD_ASSERT(args);
    for (int i = 0; i < nb; i++) args[i] = (char *)base[i];
    for (int i = 1; i < argc; i++) args[nb + i - 1] = argv[i];
    td_train_opts o;
    td_train_opts_default(&o);
    td_train_opts_parse(&o, na, args);
    free(args); /* the options keep the strings, not the array */
    o.quiet = 1;
    td_train_result res;
    td_train_run(&o, &res, 1);
    int rank = td_comm_rank(td_comm_world());

    char in_path[] = "/tmp/td_val_in_XXXXXX", out_path[256];
    int nseq = o.eval_iters * o.batch, T = o.seq;
    if (rank == 0) {
        TD_ASSERT(res.final_params);
        /* the same data and model shape as the trainer's */
        td_dataset data;
        td_data_load(&data, o.data, o.tokenizer, o.vocab, T);
        td_gpt_config cfg = {.L = o.layers, .H = o.heads, .C = o.embd, .T = T, .V = data.tok.V};
        td_gpt_config_finish(&cfg);
        td_param_table t;
        td_param_table_build(&t, &cfg, 1);
        TD_ASSERT(t.numel == res.numel);
        int *in = malloc(sizeof(int) * (size_t)nseq * T), *tg = malloc(sizeof(int) * (size_t)nseq * T);
        TD_ASSERT(in && tg);
        for (int it = 0; it < o.eval_iters; it++)
            td_data_batch(&data, 1, o.seed, it, 0, o.batch, T, in + (size_t)it * o.batch * T,
                          tg + (size_t)it * o.batch * T);
        int fd = mkstemp(in_path);
        TD_ASSERT(fd >= 0);
        FILE *f = fdopen(fd, "wb");
        TD_ASSERT(f);
        int32_t hdr[7] = {0x4C415654, cfg.L, cfg.H, cfg.C, T, cfg.V, nseq};
        ref_write(f, hdr, sizeof hdr);
        ref_write_tensors(f, &t, res.final_params, cfg.V, cfg.C);
        ref_write(f, in, sizeof(int) * (size_t)nseq * T);
        ref_write(f, tg, sizeof(int) * (size_t)nseq * T);
        TD_ASSERT(fclose(f) == 0);
        free(in);
        free(tg);
        td_param_table_free(&t);
        td_data_free(&data);
    }
    double val = res.final_val_loss;
    td_train_result_free(&res);
    td_comm_finalize(); /* PyTorch runs in a child process: after MPI is done */
    if (rank != 0) return 0;

    snprintf(out_path, sizeof out_path, "%s.out", in_path);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/tests/ref/gpt_ref.py %s %s", TD_SOURCE_DIR, in_path,
             out_path);
    if (system(cmd) != 0) {
        fprintf(stderr, "FAIL: the PyTorch reference did not run (%s); install python3-torch\n", cmd);
        remove(in_path);
        return 1;
    }
    double ref[2];
    FILE *f = fopen(out_path, "rb");
    TD_ASSERT(f);
    if (fread(ref, sizeof ref, 1, f) != 1) {
        fprintf(stderr, "FAIL: reference output %s truncated\n", out_path);
        return 1;
    }
    fclose(f);
    remove(in_path);
    remove(out_path);
    /* Tolerance 1e-6 relative: both sides compute each token's loss in
     * float32 (~1e-7 relative apart, as test_vs_torch measures) and sum
     * nseq*T = 1024 of them in different orders (trident: per rank in
     * double, then a float32 sum of the ranks' sums: ~6e-8). What this test
     * is for moves the loss by much more (measured): the weights of one
     * step earlier 1.1e-2, the train split instead of val 7e-3, one rank's
     * share left out of the dp=2 sum 0.5. */
    const double tol = 1e-6;
    double rel = fabs(val - ref[0]) / ref[0];
    int bad = !(rel <= tol) || ref[1] != (double)nseq * T;
    printf("val loss over %d sequences x %d tokens: trident %.9f torch %.9f rel %.2e (tol %.0e) %s\n", nseq,
           T, val, ref[0], rel, tol, bad ? "FAIL" : "ok");
    return bad;
}
