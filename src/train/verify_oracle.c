/* trident verify's oracle (verify.h): one fp32 process that takes a step
 * as training takes it (the global batch, or the step's under --batch-rampup,
 * in the same micro-batches, each
 * holding every replica's rows of it, so the aux loss, the routing
 * statistics and capacity see the tokens training's micro-batch sees; AdamW;
 * then auxiliary-loss-free balancing's bias update), from a state given to
 * it: the layout's, gathered at the step's start. */
#include <math.h>
#include <string.h>

#include "trident/base.h"
#include "trident/kernels.h"
#include "trident/moe.h"
#include "trident/optim.h"
#include "verify.h"

void verify_oracle_open(verify_oracle *or, const td_train_opts *o, int D) {
    memset(or, 0, sizeof *or);
    or->o = o;
    td_data_load(&or->d, o->data, o->tokenizer, o->vocab, o->seq);
    td_data_set_batch(&or->d, o->batch);
    td_train_model_config(o, or->d.tok.V, &or->cfg);
    td_param_table_build(&or->t, &or->cfg, 1);
    or->B = o->batch, or->T = o->seq, or->M = o->grad_accum > 0 ? o->grad_accum : 1, or->D = D;
    TD_ASSERT(or->B % (D * or->M) == 0); /* the run checked it */
    td_gpt_create(&or->model, &or->t, or->B / or->M, 0);
    td_run_data docs = {.doc_mask = o->doc_mask, .eod = o->eod, .eod_mask_loss = o->eod_mask_loss};
    int eod = td_run_doc_eod(&docs, &or->d.tok);
    td_gpt_doc_mask(&or->model, o->doc_mask ? eod : -1);
    td_gpt_doc_positions(&or->model, o->doc_mask && o->ch.doc_pos_reset);
    or->loss_eod = o->eod_mask_loss ? eod : -1;
    size_t n = or->t.numel;
    or->g = td_alloc(n * 4, TD_MEM_OTHER);
    or->gu = td_alloc(n * 4, TD_MEM_OTHER);
    size_t tok = (size_t)or->B * or->T;
    or->in = td_alloc(sizeof(int) * tok, TD_MEM_OTHER), or->tg = td_alloc(sizeof(int) * tok, TD_MEM_OTHER);
    or->min = td_alloc(sizeof(int) * tok, TD_MEM_OTHER), or->mtg = td_alloc(sizeof(int) * tok, TD_MEM_OTHER);
    if (or->cfg.moe.E > 0) or->load = td_alloc(sizeof(double) * (size_t)or->cfg.L * or->cfg.moe.E, TD_MEM_OTHER);
}

void verify_oracle_close(verify_oracle *or) {
    td_gpt_destroy(&or->model);
    td_free(or->g), td_free(or->gu), td_free(or->in), td_free(or->tg), td_free(or->min), td_free(or->mtg);
    td_free(or->load);
    td_param_table_free(&or->t);
    td_data_free(&or->d);
}

/* moe_run.c's update: b_i += rate sign(mean load - load_i), per layer. */
static void bias_update(verify_oracle *or, float *P) {
    const td_param_table *t = &or->t;
    int E = or->cfg.moe.E;
    for (int i = 0; i < t->n_rows; i++) {
        const td_param *p = &t->rows[i];
        if (p->kind != TD_T_ROUTERB || p->numel == 0) continue;
        /* the layout's arithmetic: float loads, float quotients */
        const double *ld = or->load + (size_t)p->layer * E;
        double mean = 0.0;
        for (int e = 0; e < E; e++) mean += (float)ld[e] / E;
        for (size_t k = 0; k < p->numel; k++) {
            double err = mean - (float)ld[k];
            P[p->offset + k] += err > 0 ? or->cfg.moe.bias_rate : err < 0 ? -or->cfg.moe.bias_rate : 0.0f;
        }
    }
}

double verify_oracle_step(verify_oracle *or, int s, float *P, float *M, float *V, float *grads,
                          const float *update_grad) {
    const td_train_opts *o = or->o;
    const td_param_table *t = &or->t;
    size_t n = t->numel;
    /* --batch-rampup: the step's batch in micro-batches of the full batch's
     * rows, fewer of them per replica, as td_run_step takes it */
    int B = td_batch_at(&o->ch.rampup, or->B, s), T = or->T, D = or->D, Bm = or->B / (D * or->M), Bl = B / D;
    int Mk = Bl / Bm;
    TD_ASSERT(Mk >= 1 && Mk * Bm == Bl && Bl * D == B); /* the rules table's rampup-divides row */
    td_gpt_bind_flat(&or->model, P, or->g);
    td_gpt_params_changed(&or->model);
    memset(or->g, 0, n * 4);
    td_data_batch(&or->d, 0, o->seed, s, 0, B, T, or->in, or->tg);
    double kept = or->loss_eod >= 0 ? (double)td_doc_mask_targets(or->tg, (size_t)B * T, or->loss_eod) : (double)B * T;
    td_gpt_moe_stats_reset(&or->model);
    float aux_w = (float)(kept / ((double)B * T)); /* the run's: aux and z over every token */
    td_gpt_set_aux_weight(&or->model, aux_w);
    double sum = 0.0;
    for (int k = 0; k < Mk; k++) {
        /* micro-batch k: replica r's rows [r Bl + k Bm, + Bm) at rows [r Bm, + Bm) */
        for (int r = 0; r < D; r++) {
            size_t from = ((size_t)r * Bl + (size_t)k * Bm) * T, to = (size_t)r * Bm * T;
            memcpy(or->min + to, or->in + from, sizeof(int) * (size_t)Bm * T);
            memcpy(or->mtg + to, or->tg + from, sizeof(int) * (size_t)Bm * T);
        }
        if (or->routes) or->routes->o_step = s, or->routes->o_micro = k; /* the replay's place */
        td_gpt_set_documents(&or->model, or->min);
        sum += td_gpt_forward(&or->model, or->min, or->mtg);
        td_gpt_backward(&or->model, 1.0f / (float)kept);
    }
    td_moe_stats *st = td_gpt_moe_stats(&or->model);
    if (st) sum += st->loss_sum * aux_w; /* the aux and z losses */
    memcpy(grads, or->g, n * 4);
    const float *gu = update_grad ? update_grad : or->g;
    const td_ops *cpu = td_ops_cpu(TD_K_F32);
    double norm = sqrt(td_sumsq_host(cpu, gu, n));
    memcpy(or->gu, gu, n * 4); /* AdamW reads g only, but not through const */
    if (o->optim.optimizer == TD_OPT_MUON) /* the whole table: every matrix whole */
        td_muon_update_on(td_ops_cpu((td_ktype)o->optim.muon_ns_k), P, or->gu, M, V, 0, n, t, &o->optim,
                          td_lr_at(&o->optim, s), s + 1, td_clip_scale(norm, o->optim.clip), 0);
    else
        td_adamw_update_on(cpu, P, or->gu, M, V, 0, n, t, &o->optim, td_lr_at(&o->optim, s), s + 1,
                           td_clip_scale(norm, o->optim.clip), 0);
    if (st && or->cfg.moe.bias_rate > 0.0f) {
        for (size_t i = 0; i < (size_t)or->cfg.L * or->cfg.moe.E; i++) or->load[i] = st->load[i];
        bias_update(or, P);
    }
    return sum / kept;
}
