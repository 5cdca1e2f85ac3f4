/* Checkpoint round trip and layout agreement.
 *
 *   test_ckpt_roundtrip save DIR [trainer flags]   (under mpirun)
 *     trains through the real trainer with --out DIR, keeping the final state
 *     in-process; rank 0 loads DIR back (td_ckpt_load follows latest) and
 *     requires: parameters and AdamW moments bit for bit equal to the trained
 *     state, the loss on a fixed validation batch bit for bit equal, and the
 *     same sampled text. Every rank checks that the save stayed within what
 *     it held before plus what it reports (res.save_unit: its piece list; a
 *     gathered save under parameter servers one unit more) and 32 KiB.
 *   test_ckpt_roundtrip compare REF DIR...
 *     checkpoints of the same run written by different layouts agree with
 *     REF within 1e-5 of each tensor's largest element (parameters, m, v). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report.h"
#include "trident/base.h"
#include "trident/ckpt.h"
#include "trident/comm.h"
#include "trident/data.h"
#include "trident/train.h"

#ifndef TD_DATA_DIR
#error "TD_DATA_DIR must name the repository's data/ folder"
#endif

/* Mean loss of params (canonical layout) on validation batch 0. */
static double fixed_batch_loss(const td_gpt_config *cfg, const float *params, const td_dataset *d) {
    td_param_table t;
    td_param_table_build(&t, cfg, 1);
    int B = 4, T = cfg->T;
    td_gpt m;
    td_gpt_create(&m, &t, B, 0);
    td_gpt_bind_flat(&m, (float *)params, NULL);
    int *in = malloc(sizeof(int) * B * T), *tg = malloc(sizeof(int) * B * T);
    td_data_batch(d, 1, 1234, 0, 0, B, T, in, tg);
    double loss = td_gpt_forward(&m, in, tg) / (B * T);
    free(in);
    free(tg);
    td_gpt_destroy(&m);
    td_param_table_free(&t);
    return loss;
}

static char *sample_text(const td_gpt_config *cfg, const float *params, const td_tokenizer *tok) {
    td_param_table t;
    td_param_table_build(&t, cfg, 1);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    td_sampling sp = {.prompt = "", .tokens = 40, .temperature = 1.0f, .seed = 7};
    td_generate(&t, params, tok, &sp, f);
    fclose(f);
    td_param_table_free(&t);
    return buf;
}

static int first_diff(const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], 4) != 0) return (int)i;
    return -1;
}

static int save_main(const char *dir, int argc, char **argv) {
    td_train_opts o;
    td_train_opts_default(&o);
    o.data = TD_DATA_DIR "/tinyshakespeare.txt";
    o.layers = 2, o.heads = 4, o.embd = 64, o.seq = 16, o.batch = 8, o.steps = 8;
    o.optim.warmup = 4;
    /* AdamW eps 1e-6 rather than 1e-8: with 1e-8, gradient elements of
     * rounding size (the key bias's true gradient is exactly 0) turn the
     * different summation orders of dp1 and dp2 into update differences near
     * lr (measured 3.3e-4 of c_attn.bias's largest element, 3.5e-5 of
     * h.0.mlp.c_proj.weight's, after 2 steps); 1e-6 bounds that
     * amplification, so "compare" measures the checkpoint path and not
     * Adam's conditioning (measured worst 4.5e-6 at step 8, 5.3e-6 at 6). */
    o.optim.eps = 1e-6f;
    o.eval_every = 0, o.threads = 1, o.quiet = 1, o.log_every = 1000;
    o.out = dir;
    td_train_opts_parse(&o, argc, argv);
    td_train_result res;
    td_train_run(&o, &res, 1);
    int fails = 0, rank = td_log_rank();

    /* the save added at most what it reports to what this rank held before
     * it (a sharded save: the list of its pieces; gathered: one unit more);
     * the writer's own fixed bookkeeping (path buffers, the canonical table)
     * is allowed 32 KiB. A gather of whole buffers would add the full state
     * (>= 1.2 MiB here). */
    size_t added = res.save_peak - res.save_start, bound = res.save_unit + 32768;
    printf("rank %d: save peak %zu bytes = %zu at its start + %zu added; plan %zu + one unit %zu = %zu; "
           "added bound one unit + 32 KiB = %zu\n", rank, res.save_peak, res.save_start, added,
           res.save_plan, res.save_unit, res.save_plan + res.save_unit, bound);
    if (res.save_peak < res.save_start || added > bound) {
        printf("FAIL rank %d: the save added %zu bytes, more than %zu\n", rank, added, bound);
        fails++;
    }
    if (rank == 0) {
        td_checkpoint ck;
        td_ckpt_load(&ck, dir);
        if (ck.numel != res.numel || !ck.m || ck.step != o.steps) {
            printf("FAIL loaded %zu elements (step %d, moments %s), trained %zu (step %d)\n", ck.numel, ck.step,
                   ck.m ? "yes" : "no", res.numel, o.steps);
            return 1;
        }
        const float *a[3] = {ck.params, ck.m, ck.v}, *b[3] = {res.final_params, res.final_m, res.final_v};
        const char *names[3] = {"params", "adam_m", "adam_v"};
        for (int s = 0; s < 3; s++) {
            int i = first_diff(a[s], b[s], res.numel);
            if (i >= 0) {
                printf("FAIL %s element %d: loaded %a, trained %a (want identical bits)\n", names[s], i,
                       a[s][i], b[s][i]);
                fails++;
            }
        }
        td_dataset d;
        td_data_load(&d, o.data, o.tokenizer, 0, o.seq);
        double l_loaded = fixed_batch_loss(&ck.cfg, ck.params, &d);
        double l_trained = fixed_batch_loss(&ck.cfg, res.final_params, &d);
        printf("fixed-batch loss: loaded %a, trained %a\n", l_loaded, l_trained);
        if (memcmp(&l_loaded, &l_trained, sizeof(double)) != 0) {
            printf("FAIL the loaded model's loss differs from the trained model's\n");
            fails++;
        }
        char *s1 = sample_text(&ck.cfg, ck.params, &ck.tok), *s2 = sample_text(&ck.cfg, res.final_params, &d.tok);
        printf("sample: \"%s\"\n", s1);
        if (strcmp(s1, s2) != 0) {
            printf("FAIL sampled text differs: loaded \"%s\", trained \"%s\"\n", s1, s2);
            fails++;
        }
        free(s1);
        free(s2);
        td_data_free(&d);
        td_ckpt_free(&ck);
    }
    td_train_result_free(&res);
    float f = (float)fails;
    td_allreduce(td_comm_world(), &f, 1, TD_F32, TD_SUM);
    if (rank == 0) printf(f == 0 ? "roundtrip %s: ok\n" : "roundtrip %s: FAILED\n", dir);
    return f != 0;
}

static int compare_main(int n, char **dirs) {
    td_checkpoint ref;
    td_ckpt_load(&ref, dirs[0]);
    td_param_table t;
    td_param_table_build(&t, &ref.cfg, 1);
    int fails = 0;
    for (int k = 1; k < n; k++) {
        td_checkpoint ck;
        td_ckpt_load(&ck, dirs[k]);
        if (ck.numel != ref.numel || memcmp(&ck.cfg, &ref.cfg, sizeof ck.cfg) != 0 || !ck.m || !ref.m) {
            printf("FAIL %s is not a checkpoint of the same model as %s\n", dirs[k], dirs[0]);
            fails++;
            continue;
        }
        const float *a[3] = {ck.params, ck.m, ck.v}, *b[3] = {ref.params, ref.m, ref.v};
        const char *names[3] = {"params", "adam_m", "adam_v"};
        double worst = 0;
        const char *wname = "", *wsec = "";
        for (int s = 0; s < 3; s++)
            for (int r = 0; r < t.n_rows; r++) {
                const td_param *p = &t.rows[r];
                double mb = 0, md = 0;
                for (size_t i = 0; i < p->numel; i++) mb = fmax(mb, fabs(b[s][p->offset + i]));
                for (size_t i = 0; i < p->numel; i++)
                    md = fmax(md, fabs((double)a[s][p->offset + i] - b[s][p->offset + i]));
                double rel = mb > 0 ? md / mb : md;
                /* 1e-5 of the tensor's largest element: layouts sum the same
                 * gradients in different orders, so the state differs by
                 * float reassociation only, ~1e-7 per step relative */
                if (rel > 1e-5) {
                    printf("FAIL %s %s %s: max |diff| %.3g = %.3g of its largest element (bound 1e-5)\n",
                           dirs[k], names[s], p->name, md, rel);
                    fails++;
                }
                if (rel > worst) worst = rel, wname = p->name, wsec = names[s];
            }
        printf("%s vs %s: worst tensor %s %s, %.3g of its largest element\n", dirs[k], dirs[0], wsec, wname, worst);
        td_ckpt_free(&ck);
    }
    td_param_table_free(&t);
    td_ckpt_free(&ref);
    printf(fails ? "layouts agree: FAILED\n" : "layouts agree: ok\n");
    return fails != 0;
}

int main(int argc, char **argv) {
    if (argc >= 4 && strcmp(argv[1], "compare") == 0) return compare_main(argc - 2, argv + 2);
    if (argc < 3 || strcmp(argv[1], "save") != 0) {
        fprintf(stderr, "usage: test_ckpt_roundtrip save DIR [trainer flags] | compare REF DIR...\n");
        return 2;
    }
    td_comm_init(&argc, &argv);
    int rc = save_main(argv[2], argc - 3, argv + 3);
    td_comm_finalize();
    return rc;
}
