/* The training loop: every layout runs this same code; the strategy (dp.c)
 * decides where state lives and how gradients move. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "preflight.h"
#include "report.h"
#include "trident/base.h"
#include "trident/ckpt.h"
#include "trident/comm.h"
#include "trident/data.h"
#include "trident/kernels.h"
#include "trident/train.h"

/* Default threads: the cores of this node shared by the ranks on it. */
static int default_threads(void) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    int ranks = local ? atoi(local) : 1;
    int t = (int)(cores / (ranks > 0 ? ranks : 1));
    return t > 0 ? t : 1;
}

/* Per-replica batch split; a global batch that does not divide is a clear
 * error listing sizes that would work. */
static void split_batch(const td_train_opts *o, int D, int *Bl, int *Bm) {
    long long unit = (long long)D * o->grad_accum; /* in int, dp x K could wrap */
    TD_CHECK(o->batch % unit == 0,
             "--batch %d does not split over %d data-parallel replicas x %d micro-batches; "
             "use a multiple of %lld (e.g. %lld or %lld)",
             o->batch, D, o->grad_accum, unit, unit * (o->batch / unit > 0 ? o->batch / unit : 1),
             unit * (o->batch / unit + 1));
    *Bl = o->batch / D;
    *Bm = *Bl / o->grad_accum;
}

typedef struct {
    const td_train_opts *o;
    td_grid *g;
    td_dataset *data;
    td_gpt *model;
    td_dp *dp;
    int Bl, Bm, K;
} run_ctx;

/* Mean validation loss over eval_iters global batches (every token once). */
static double evaluate(run_ctx *c) {
    const td_train_opts *o = c->o;
    int T = o->seq, N = c->Bm * T;
    int *in = td_alloc(sizeof(int) * N, TD_MEM_OTHER), *tg = td_alloc(sizeof(int) * N, TD_MEM_OTHER);
    td_dp_set_training(c->dp, 0);
    double sum = 0.0;
    for (int it = 0; it < o->eval_iters; it++)
        for (int k = 0; k < c->K; k++) {
            td_data_batch(c->data, 1, o->seed, it, c->g->dp_rank * c->Bl + k * c->Bm, c->Bm, T, in, tg);
            sum += td_gpt_forward(c->model, in, tg);
        }
    td_dp_set_training(c->dp, 1);
    float s = (float)sum; /* float sum of per-rank sums: the order is fixed */
    double total = sum;
    if (c->g->dp > 1) {
        td_allreduce(c->g->dp_comm, &s, 1, TD_F32, TD_SUM);
        total = s;
    }
    td_free(in);
    td_free(tg);
    return total / ((double)o->eval_iters * o->batch * T);
}

void td_train_run(const td_train_opts *o, td_train_result *res, int keep_state) {
    memset(res, 0, sizeof *res);
    res->final_val_loss = NAN;
    td_dp_mode mode = td_dp_mode_parse(o->dp_mode);
    TD_CHECK(mode == TD_DP_PS || o->ps_servers == 0, "--ps-servers needs --dp-mode ps");
    TD_CHECK(mode != TD_DP_PS || o->ps_servers > 0, "--dp-mode ps needs --ps-servers S >= 1");
    td_grid g;
    td_grid_create(&g, o->dp, o->tp, o->pp, mode == TD_DP_PS ? o->ps_servers : 0);
    TD_CHECK(g.tp == 1 && g.pp == 1,
             "--tp %d --pp %d: tensor and pipeline parallelism are not in this build yet; use --tp 1 --pp 1",
             g.tp, g.pp);
    td_log_set_identity(g.world_rank, g.dp_rank, g.pp_rank, g.tp_rank, o->verbose);
    td_comm_set_timeout(o->comm_timeout);
    if (o->piece_mb > 0) td_comm_set_piece_bytes((size_t)(o->piece_mb * 1048576.0));
    int threads = o->threads > 0 ? o->threads : default_threads();
    td_kernels_set_threads(threads);

    td_dataset data;
    td_data_load(&data, o->data, o->tokenizer, o->vocab, o->seq);
    td_gpt_config cfg = {o->layers, o->heads, o->embd, o->seq, data.tok.V, 0};
    td_gpt_config_finish(&cfg);
    int Bl, Bm;
    split_batch(o, g.dp, &Bl, &Bm);

    td_dp_config dcfg = {.mode = mode, .zero = o->zero, .ps_staleness = o->ps_staleness,
                         .seed = o->seed, .optim = o->optim, .no_overlap = o->no_overlap};
    dcfg.bucket_bytes = (size_t)((o->bucket_mb > 0 ? o->bucket_mb : TD_DEFAULT_BUCKET_MB) * 1048576.0);
    td_param_table table, canon;
    td_param_table_build(&table, &cfg, td_dp_unit_align(&dcfg, &g));
    td_param_table_build(&canon, &cfg, 1);

    td_mem_plan plan = td_dp_memory_plan(&dcfg, &g, &table);
    if (!g.is_server) plan.bytes[TD_MEM_ACTS] += td_gpt_activation_bytes(&cfg, Bm);
    /* every check that needs no model, before the model is allocated */
    td_preflight_result pf = td_preflight(o, &g, &cfg, &data, &plan, Bm);

    td_gpt model;
    memset(&model, 0, sizeof model);
    if (!g.is_server) td_gpt_create(&model, &table, Bm);
    td_dp *dp = td_dp_create(&dcfg, &g, &table, g.is_server ? NULL : &model);

    td_report rep;
    td_report_open(&rep, o, &g, &cfg, &table, &data, threads, Bm);
    rep.baseline = pf;
    td_report_memory(&rep, &plan, 0);

    res->losses = td_alloc(sizeof(float) * o->steps, TD_MEM_OTHER);
    res->grad_norms = td_alloc(sizeof(float) * o->steps, TD_MEM_OTHER);
    if (g.is_server) {
        td_dp_serve(dp, o->steps);
    } else {
        run_ctx c = {o, &g, &data, &model, dp, Bl, Bm, o->grad_accum};
        int T = o->seq, N = Bm * T;
        int *in = td_alloc(sizeof(int) * N, TD_MEM_OTHER), *tg = td_alloc(sizeof(int) * N, TD_MEM_OTHER);
        float dloss = 1.0f / ((float)o->batch * T); /* global mean over all tokens */
        double timed_ms = 0.0;
        for (int step = 0; step < o->steps; step++) {
            double t0 = td_now_ms();
            float lr = td_lr_at(&o->optim, step);
            td_dp_begin_step(dp, step);
            double loss_sum = 0.0;
            for (int k = 0; k < c.K; k++) {
                td_dp_begin_micro(dp, k, c.K);
                td_data_batch(&data, 0, o->seed, step, g.dp_rank * Bl + k * Bm, Bm, T, in, tg);
                loss_sum += td_gpt_forward(&model, in, tg);
                td_gpt_backward(&model, dloss);
            }
            double norm = td_dp_finish_step(dp, step, lr);
            float ls = (float)loss_sum;
            if (g.dp > 1) td_allreduce(g.dp_comm, &ls, 1, TD_F32, TD_SUM);
            float loss = g.dp > 1 ? ls / ((float)o->batch * T) : (float)(loss_sum / ((double)o->batch * T));
            double ms = td_now_ms() - t0;
            if (step >= o->timing_skip || o->steps <= o->timing_skip) timed_ms += ms;
            res->losses[step] = loss;
            res->grad_norms[step] = (float)norm;
            res->steps_done = step + 1;
            td_report_step(&rep, step, loss, lr, norm, ms);
            if (step == 0 && mode != TD_DP_PS) td_report_memory(&rep, &plan, 1);
            int last = step == o->steps - 1;
            if (o->eval_every > 0 && ((step + 1) % o->eval_every == 0 || last)) {
                if (mode == TD_DP_PS) td_dp_begin_step(dp, step + 1); /* pull the fresh weights */
                double vl = evaluate(&c);
                td_report_eval(&rep, step, vl);
                if (last) res->final_val_loss = vl;
            }
        }
        int timed = o->steps > o->timing_skip ? o->steps - o->timing_skip : o->steps;
        res->step_ms = timed_ms / timed;
        res->tokens_per_s = (double)o->batch * T / (res->step_ms * 1e-3);
        res->mfu = rep.flops_per_step / (res->step_ms * 1e-3) / rep.peak_flops;
        td_dp_staleness(dp, &res->max_staleness, &res->mean_staleness);
        td_dp_overlap_stats(dp, &res->exposed_comm_ms, &res->comm_ms);
        td_free(in);
        td_free(tg);
    }
    res->numel_layout = table.numel;
    for (int c = 0; c < TD_MEM_NCAT; c++) res->mem_planned[c] = plan.bytes[c], res->mem_peak[c] = td_mem_peak(c);
    /* servers run their own loop, so with ps the measured report waits for the end */
    if (mode == TD_DP_PS) td_report_memory(&rep, &plan, 1);
    td_report_summary(&rep, res);

    /* final state, canonical layout, on world rank 0 */
    int root = g.world_rank == 0;
    float *P = NULL, *M = NULL, *Vv = NULL;
    int want_state = keep_state || o->out || o->sample_tokens > 0;
    if (want_state) {
        if (root) {
            P = td_alloc(sizeof(float) * canon.numel, TD_MEM_OTHER);
            M = td_alloc(sizeof(float) * canon.numel, TD_MEM_OTHER);
            Vv = td_alloc(sizeof(float) * canon.numel, TD_MEM_OTHER);
        }
        td_dp_gather_state(dp, &canon, P, M, Vv);
    }
    if (root && o->out) {
        td_ckpt_save(o->out, &cfg, &data.tok, o->steps, P, M, Vv, canon.numel);
        td_log("checkpoint: %s/model.bin (%zu parameters, step %d)\n", o->out, canon.n_real, o->steps);
    }
    if (root && o->sample_tokens > 0) td_report_sample(&rep, &canon, P, &data.tok, o);
    if (keep_state && root) {
        res->final_params = P, res->final_m = M, res->final_v = Vv;
        res->numel = canon.numel;
    } else {
        td_free(P);
        td_free(M);
        td_free(Vv);
    }
    td_report_close(&rep);
    td_dp_destroy(dp);
    if (!g.is_server) td_gpt_destroy(&model);
    td_param_table_free(&table);
    td_param_table_free(&canon);
    td_data_free(&data);
    td_grid_destroy(&g);
}

void td_train_result_free(td_train_result *r) {
    td_free(r->losses);
    td_free(r->grad_norms);
    td_free(r->final_params);
    td_free(r->final_m);
    td_free(r->final_v);
    memset(r, 0, sizeof *r);
}

int td_train_main(int argc, char **argv) {
    td_train_opts o;
    td_train_opts_default(&o);
    td_train_opts_parse(&o, argc, argv);
    td_train_result res;
    td_train_run(&o, &res, 0);
    td_train_result_free(&res);
    return 0;
}
