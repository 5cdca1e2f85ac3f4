/* Layout equivalence: a parallel layout (dp-mode, zero stage, servers, grad
 * accumulation, tensor parallelism with or without sequence parallelism)
 * trained for N steps through the real trainer must match a plain
 * single-process loop over the same global batches: losses and gradient
 * norms within 1e-5 relative at every step, final parameters and AdamW
 * moments (gathered from every rank into the canonical layout) within a
 * stated tolerance. Usage (under mpirun): test_layouts [trainer flags]. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/backend.h"
#include "trident/base.h"
#include "trident/comm.h"
#include "trident/data.h"
#include "trident/kernels.h"
#include "trident/train.h"
#include "trident/moe.h"
#include "moe_routes.h"

#ifndef TD_DATA_DIR
#error "TD_DATA_DIR must name the repository's data/ folder"
#endif

/* The oracle: one process, the whole global batch, no strategy. */
static void reference(const td_train_opts *o, float *losses, float *norms, float **P, float **M,
                      float **V, td_param_table *t, routes *rt, routes *run, route_replay *rr) {
    td_dataset d;
    td_data_load(&d, o->data, o->tokenizer, 0, o->seq);
    td_gpt_config cfg;
    td_train_model_config(o, d.tok.V, &cfg); /* the family's flags too (--arch llama) */
    td_param_table_build(t, &cfg, 1);
    size_t n = t->numel;
    float *p = td_alloc(n * 4, TD_MEM_PARAMS), *g = td_alloc(n * 4, TD_MEM_GRADS);
    float *m = td_alloc(n * 4, TD_MEM_OPTIM), *v = td_alloc(n * 4, TD_MEM_OPTIM);
    td_param_init_range(t, o->seed, 0, n, p);
    int B = o->batch, T = o->seq;
    /* A mixture of experts' aux loss is one of each micro-batch of every
     * replica's tokens together (model.h): the oracle runs those M batches
     * of D x Bm sequences, replica r's rows [r Bl + k Bm, + Bm) in the k-th. */
    int Mk = cfg.moe.E ? o->grad_accum : 1, D = td_comm_size(td_comm_world()) / (o->tp * o->pp * o->cp);
    int Bk = B / Mk, Bm = B / (D * Mk);
    /* --batch-rampup (dense models): step s trains td_batch_at's first Bs
     * samples of its batch, in chunks of U rows (U divides every size) */
    const td_batch_rampup *ru = &o->ch.rampup;
    int U = 0;
    if (ru->start > 0) {
        TD_ASSERT(!cfg.moe.E);
        U = B;
        for (int a = ru->start, b = ru->increment; b;) { int r = a % b; a = b, b = r, U = a; }
        while (B % U) U--; /* the gcd of START, INCREMENT and --batch */
        Bk = U;
    }
    td_gpt model;
    td_gpt_create(&model, t, Bk, 0);
    td_gpt_bind_flat(&model, p, g);
    *rt = (routes){.M = Mk, .Bm = Bk, .T = T};
    if (cfg.moe.E) td_gpt_set_route_probe(route_probe, rt), route_replay_begin(rr, run, Mk, T);
    int *in = malloc(sizeof(int) * B * T), *tg = malloc(sizeof(int) * B * T);
    int *kin = malloc(sizeof(int) * Bk * T), *ktg = malloc(sizeof(int) * Bk * T);
    for (int s = 0; s < o->steps; s++) {
        td_data_batch(&d, 0, o->seed, s, 0, B, T, in, tg);
        td_gpt_moe_stats_reset(&model);
        double sum = 0.0;
        int Bs = U ? td_batch_at(ru, B, s) : B;
        for (int c = 0; U && c < Bs / U; c++) { /* the ramp's step: its own mean */
            sum += td_gpt_forward(&model, in + (size_t)c * U * T, tg + (size_t)c * U * T);
            td_gpt_backward(&model, 1.0f / ((float)Bs * T));
        }
        for (int k = 0; k < (U ? 0 : Mk); k++) {
            for (int r = 0; r < (Mk > 1 ? D : 1); r++) {
                size_t from = Mk > 1 ? (size_t)(r * (B / D) + k * Bm) * T : 0, n = Mk > 1 ? (size_t)Bm * T : (size_t)B * T;
                memcpy(kin + (size_t)r * n, in + from, sizeof(int) * n);
                memcpy(ktg + (size_t)r * n, tg + from, sizeof(int) * n);
            }
            sum += td_gpt_forward(&model, kin, ktg);
            td_gpt_backward(&model, 1.0f / ((float)B * T));
        }
        if (td_gpt_moe_stats(&model)) sum += td_gpt_moe_stats(&model)->loss_sum; /* aux and z losses */
        double norm = sqrt(td_sumsq_host(td_ops_cpu(TD_K_F32), g, n));
        td_adamw_update_on(td_ops_cpu(TD_K_F32), p, g, m, v, 0, n, t, &o->optim, td_lr_at(&o->optim, s), s + 1,
                           td_clip_scale(norm, o->optim.clip), 0);
        if (cfg.moe.bias_rate > 0) /* DeepSeek-V3's update, written out: b_i += rate sign(mean load - load_i) */
            for (int l = 0; l < cfg.L; l++) {
                const td_param *bp = td_param_lookup_opt(t, TD_T_ROUTERB, l);
                if (!bp) continue;
                const double *ld = td_gpt_moe_stats(&model)->load + (size_t)l * cfg.moe.E;
                double mean = 0;
                for (int e = 0; e < cfg.moe.E; e++) mean += ld[e] / cfg.moe.E;
                for (int e = 0; e < cfg.moe.E; e++)
                    p[bp->offset + e] += mean > ld[e] ? cfg.moe.bias_rate : mean < ld[e] ? -cfg.moe.bias_rate : 0.0f;
            }
        memset(g, 0, n * 4);
        losses[s] = (float)(sum / ((double)Bs * T));
        norms[s] = (float)norm;
    }
    free(in);
    free(tg);
    free(kin);
    free(ktg);
    td_gpt_set_route_probe(NULL, NULL);
    td_gpt_set_route_override(NULL, NULL);
    td_gpt_destroy(&model);
    td_free(g);
    td_data_free(&d);
    *P = p, *M = m, *V = v;
}

/* Worst |a-b| over a tensor relative to the tensor's max |b|, skipping
 * [skip_lo, skip_hi). */
static double tensor_err(const float *a, const float *b, size_t n, size_t skip_lo, size_t skip_hi,
                         size_t *worst) {
    double mb = 0, md = 0;
    for (size_t i = 0; i < n; i++) mb = fmax(mb, fabs(b[i]));
    for (size_t i = 0; i < n; i++)
        if ((i < skip_lo || i >= skip_hi) && fabs((double)a[i] - b[i]) > md)
            md = fabs((double)a[i] - b[i]), *worst = i;
    return mb > 0 ? md / mb : md;
}

/* The key bias (c_attn.bias [C, 2C)) has an exactly zero gradient: adding a
 * constant to every key shifts each score row by a constant, which softmax
 * ignores. Its computed gradient is rounding noise, which Adam normalises
 * into real updates, so layouts that round differently drift apart there by
 * noise alone. Those elements are held to an absolute bound instead: they
 * must stay near their zero init in both runs (measured ~2e-6 after 20
 * steps; a real gradient would move them by ~lr = 1e-3 per step). */
static int key_bias_ok(const td_param *p, const float *a, const float *b, int C) {
    size_t n = strlen(p->name);
    if (n < 16 || strcmp(p->name + n - 16, "attn.c_attn.bias") != 0) return 1;
    for (int i = C; i < 2 * C; i++)
        if (fabs(a[i]) > 1e-4 || fabs(b[i]) > 1e-4 || fabs((double)a[i] - b[i]) > 2e-5) {
            printf("FAIL %s key-bias element %d: %.3g vs single process %.3g (bound 2e-5)\n", p->name, i,
                   a[i], b[i]);
            return 0;
        }
    return 1;
}

/* Model-state bytes of psi fp32 elements sharded over N ranks at a ZeRO
 * stage (4 + 4 + 8 per element): stage 1: 8 psi + 8 psi/N, stage 2:
 * 4 psi + 12 psi/N, stage 3: 16 psi/N. */
static double zero_state(int zero, double psi, double N) {
    return zero == 1 ? 8 * psi + 8 * psi / N : zero == 2 ? 4 * psi + 12 * psi / N : 16 * psi / N;
}

int main(int argc, char **argv) {
    td_comm_init(&argc, &argv);
    td_train_opts o;
    td_train_opts_default(&o);
    o.data = TD_DATA_DIR "/tinyshakespeare.txt";
    o.layers = 2, o.heads = 4, o.embd = 44, o.seq = 16, o.batch = 12, o.steps = 20;
    o.optim.warmup = 5;
    o.eval_every = 0;
    o.threads = 1;
    o.quiet = 1;
    o.log_every = 1000;
    td_train_opts_parse(&o, argc - 1, argv + 1);
    /* a mixture of experts: every token's routing, beside the oracle's */
    int world = td_comm_size(td_comm_world()), D = world / (o.tp * o.pp * o.cp);
    routes run = {.M = o.grad_accum, .Bm = o.batch / (D * o.grad_accum), .T = o.seq,
                  .replica = (td_comm_rank(td_comm_world()) / (o.tp * o.cp)) % D};
    if (o.moe.E) td_gpt_set_route_probe(route_probe, &run);
    td_train_result res;
    td_train_run(&o, &res, 1);
    td_gpt_set_route_probe(NULL, NULL);
    if (o.moe.E) routes_gather(&run);

    int fails = 0;
    /* A device other than cpu (--device guard) rounds each buffer up to
     * whole pages and counts the rounding: the plan states it buffer by
     * buffer (td_mem_plan.device), so there every category's device bytes
     * and host bytes each equal the measured peak of their side, the comm
     * layer's staging included (reserved at the plan's size, td_run). The
     * run is also held to the same layout on cpu bit for bit
     * (TD_LAYOUT_DUMP below). */
    int paged = td_backend_is_device();
    for (int c = 0; c < TD_MEM_NCAT && paged; c++) {
        if (c == TD_MEM_OTHER) continue;
        if (res.mem_peak_device[c] != res.mem_planned_device[c] ||
            res.mem_peak_host[c] != res.mem_planned_host[c]) {
            printf("FAIL rank %d memory %s under --device %s: device measured %zu B planned %zu B, host "
                   "measured %zu B planned %zu B\n",
                   td_comm_rank(td_comm_world()), td_mem_cat_name(c), o.device, res.mem_peak_device[c],
                   res.mem_planned_device[c], res.mem_peak_host[c], res.mem_planned_host[c]);
            fails++;
        }
    }
    /* Memory: every model-state category measured by the accounting
     * allocator equals the plan exactly on every rank (the plan is computed
     * before allocation from the same formulas), and with ZeRO the model
     * state equals the fp32 (4 + 4 + 8) psi formula over the padded layout:
     * stage 1: 8 psi + 8 psi/N, stage 2: 4 psi + 12 psi/N, stage 3: 16 psi/N. */
    for (int c = TD_MEM_PARAMS; c <= TD_MEM_GATHER && !paged; c++)
        if (res.mem_peak[c] != res.mem_planned[c]) {
            printf("FAIL rank %d memory %s: measured peak %zu B, planned %zu B\n", td_comm_rank(td_comm_world()),
                   td_mem_cat_name(c), res.mem_peak[c], res.mem_planned[c]);
            fails++;
        }
    /* The whole measured peak (model state, buffers, activations) within 5% of
     * the predicted peak; data and scratch (other) are not planned. */
    size_t planned = 0, measured = 0;
    for (int c = 0; c < TD_MEM_NCAT; c++)
        if (c != TD_MEM_OTHER) planned += res.mem_planned[c], measured += res.mem_peak[c];
    if (paged) {
    } else if (fabs((double)measured - planned) > 0.05 * planned) {
        printf("FAIL rank %d: measured peak %zu B, predicted %zu B (more than 5%% apart)\n",
               td_comm_rank(td_comm_world()), measured, planned);
        for (int c = 0; c < TD_MEM_NCAT; c++)
            printf("  %s: planned %zu measured %zu\n", td_mem_cat_name(c), res.mem_planned[c], res.mem_peak[c]);
        fails++;
    } else if (td_comm_rank(td_comm_world()) == 0) {
        printf("memory: measured peak %zu B vs predicted %zu B (%.2f%%)\n", measured, planned,
               100.0 * ((double)measured - planned) / planned);
    }
    if (o.zero > 0 && !paged) {
        /* ZeRO shards each tp rank's slices over its dp group; under ep the
         * expert stacks (psi_e of psi, padded) over edp, the N / ep ranks
         * holding the same experts, and the rest (psi_d) over all N */
        double psi = (double)res.numel_layout, N = td_comm_size(td_comm_world()) / (o.tp * o.pp);
        if (o.dp_shard > 0) N = o.dp_shard; /* hybrid sharding: over a shard */
        double pe = (double)res.numel_expert, pd = psi - pe, NE = o.ep > 1 ? N / o.ep : N;
        double f = zero_state(o.zero, pd, N) + zero_state(o.zero, pe, NE);
        size_t state = res.mem_peak[TD_MEM_PARAMS] + res.mem_peak[TD_MEM_GRADS] + res.mem_peak[TD_MEM_OPTIM];
        if ((double)state != f) {
            printf("FAIL zero %d: model state %zu B, formula %.0f B\n", o.zero, state, f);
            fails++;
        } else if (td_comm_rank(td_comm_world()) == 0) {
            printf("memory: zero %d model state %zu B = formula over the padded layout (psi %zu, experts %zu)\n",
                   o.zero, state, res.numel_layout, res.numel_expert);
        }
        /* the gradient payload a rank hands its collectives per step: the
         * reduce-scatter of every unit (4 psi; ZeRO-2/3 once per
         * micro-batch; the expert stacks only where edp has 2 ranks or
         * more), plus under hybrid sharding the replicas' all-reduce of its
         * shard (4 psi / N, once per step) */
        int hybrid = o.dp_shard > 0 && o.dp_shard < td_comm_size(td_comm_world()) / (o.tp * o.pp);
        double reduced = pd + (NE > 1 ? pe : 0);
        double pay = 4 * reduced * ((o.zero == 1 ? 1 : o.grad_accum) + (hybrid ? 1 / N : 0));
        int fp32 = (!o.grad_compress || !strcmp(o.grad_compress, "none")) &&
                   (!o.grad_reduce_dtype || !strcmp(o.grad_reduce_dtype, "fp32"));
        if (o.tp == 1 && o.pp == 1 && fp32 && res.grad_sent_bytes != pay) {
            printf("FAIL zero %d: gradient payload %.0f B per step, formula %.0f B\n", o.zero,
                   res.grad_sent_bytes, pay);
            fails++;
        } else if (o.tp == 1 && o.pp == 1 && fp32 && td_comm_rank(td_comm_world()) == 0) {
            printf("traffic: zero %d gradient payload %.0f B per step = formula\n", o.zero, res.grad_sent_bytes);
        }
    }
    if (o.cp > 1) {
        /* the ring's bytes in the last step, as the comm layer counted
         * them, equal the formula of this rank's blocks and micro-batches */
        if (res.cp_sent_bytes != res.cp_formula_bytes || res.cp_sent_bytes == 0) {
            printf("FAIL rank %d: the cp ring sent %llu bytes in a step, formula %llu\n",
                   td_comm_rank(td_comm_world()), (unsigned long long)res.cp_sent_bytes,
                   (unsigned long long)res.cp_formula_bytes);
            fails++;
        } else if (td_comm_rank(td_comm_world()) == 0) {
            printf("cp ring: %llu bytes per step = formula (%llu chunk pairs computed, %llu skipped)\n",
                   (unsigned long long)res.cp_sent_bytes, (unsigned long long)res.cp_pairs,
                   (unsigned long long)res.cp_skipped);
        }
    }
    if (o.ep > 1) {
        /* the experts' exchange in the last step, as the comm layer counted
         * it (less the block a rank keeps), equals the formula from this
         * rank's routing */
        if (res.ep_sent_bytes != res.ep_formula_bytes || res.ep_sent_bytes == 0) {
            printf("FAIL rank %d: the ep exchange sent %.0f bytes to other ranks in a step, formula %.0f\n",
                   td_comm_rank(td_comm_world()), res.ep_sent_bytes, res.ep_formula_bytes);
            fails++;
        } else if (td_comm_rank(td_comm_world()) == 0) {
            printf("ep exchange: %.0f bytes per step to other ranks = formula (a uniform router's: %.0f)\n",
                   res.ep_sent_bytes, res.ep_uniform_bytes);
        }
    }
    if (o.pp > 1) {
        /* Activations a stage stashes, by the slots the executor held at
         * once (each slot one micro-batch chunk; ACTS above equals the plan):
         * GPipe all M micro-batches, 1F1B P - s on stage s, zb-h1 at most P
         * (its weight-gradient halves fill the bubble without raising the
         * peak), interleaved within its schedule's bound. */
        const td_pp_stats *ps = &res.pp_stats;
        int P = o.pp, M = o.grad_accum, s = ps->stage;
        int is_gpipe = strcmp(o.schedule, "gpipe") == 0, is_1f1b = strcmp(o.schedule, "1f1b") == 0;
        int want = is_gpipe ? M : is_1f1b ? (P - s < M ? P - s : M) : -1;
        int cap = strcmp(o.schedule, "zb-h1") == 0 ? (P < M ? P : M) : want >= 0 ? want : o.virtual_stages * M;
        if ((want >= 0 && ps->max_inflight != want) || ps->max_inflight > cap || ps->max_inflight < 1) {
            printf("FAIL rank %d stage %d (%s, pp %d, %d micro-batches): %d micro-batch chunks in flight, "
                   "expected %s %d\n", td_comm_rank(td_comm_world()), s, o.schedule, P, M, ps->max_inflight,
                   want >= 0 ? "exactly" : "at most", want >= 0 ? want : cap);
            fails++;
        } else {
            printf("pipeline stage %d: %d micro-batch chunks in flight (%s, pp %d, M %d)\n", s,
                   ps->max_inflight, o.schedule, P, M);
        }
    }
    if (td_comm_rank(td_comm_world()) == 0) {
        float *ref_losses = malloc(sizeof(float) * o.steps), *ref_norms = malloc(sizeof(float) * o.steps);
        float *P, *M, *V;
        td_param_table t;
        routes oracle;
        route_replay rr;
        memset(&rr, 0, sizeof rr);
        reference(&o, ref_losses, ref_norms, &P, &M, &V, &t, &oracle, &run, &rr);
        if (o.moe.E) fails += routes_compare(&run, &oracle, o.moe.K, &rr);
        free(oracle.r);
        /* Losses: 1e-5 relative (the bound): layouts only reorder
         * fp32 sums (GEMM rows, replica sums), ~1e-7 per step. */
        double worst = 0;
        for (int s = 0; s < o.steps; s++) {
            double rel = fabs(res.losses[s] - ref_losses[s]) / fabs(ref_losses[s]);
            if (rel > worst) worst = rel;
            if (rel > 1e-5) {
                printf("FAIL step %d: loss %.7f, single process %.7f (rel %.2e)\n", s, res.losses[s],
                       ref_losses[s], rel);
                fails++;
            }
        }
        printf("losses: %d steps, worst relative difference %.2e (tol 1e-5)\n", o.steps, worst);
        /* Gradient norms (before clipping), the same bound: a norm that
         * counted a replicated tensor on every tp rank, or missed a slice,
         * is off by far more */
        worst = 0;
        for (int s = 0; s < o.steps; s++) {
            double rel = fabs(res.grad_norms[s] - ref_norms[s]) / fabs(ref_norms[s]);
            if (rel > worst) worst = rel;
            if (rel > 1e-5) {
                printf("FAIL step %d: gradient norm %.7f, single process %.7f (rel %.2e)\n", s,
                       res.grad_norms[s], ref_norms[s], rel);
                fails++;
            }
        }
        printf("gradient norms: %d steps, worst relative difference %.2e (tol 1e-5)\n", o.steps, worst);
        /* Parameters and moments after 20 AdamW steps: 1e-4 of each tensor's
         * largest element. Adam divides by sqrt(v), so an fp32 reordering of
         * a gradient element that is near zero moves its update by up to lr;
         * over 20 steps that stays far below 1e-4 of the weights' scale
         * (measured ~1e-6), while a wrong shard or a missed reduction is
         * off by O(1). */
        const char *what[3] = {"params", "adam m", "adam v"};
        float *mine[3] = {res.final_params, res.final_m, res.final_v}, *ref[3] = {P, M, V};
        for (int k = 0; k < 3; k++) {
            double w = 0;
            for (int i = 0; i < t.n_rows; i++) {
                const td_param *p = &t.rows[i];
                size_t at = 0, klo = 0, khi = 0;
                if (k == 0 && !key_bias_ok(p, mine[k] + p->offset, ref[k] + p->offset, o.embd)) fails++;
                if (k == 0 && strstr(p->name, "attn.c_attn.bias")) klo = o.embd, khi = 2 * o.embd;
                double e = tensor_err(mine[k] + p->offset, ref[k] + p->offset, p->numel, klo, khi, &at);
                if (e > w) w = e;
                if (e > 1e-4) {
                    printf("FAIL %s %s: element %zu is %.8g, single process %.8g (err %.2e of max)\n",
                           what[k], p->name, at, mine[k][p->offset + at], ref[k][p->offset + at], e);
                    fails++;
                }
            }
            printf("final %s: worst error %.2e of the tensor max (tol 1e-4)\n", what[k], w);
        }
        /* The run's bits (losses, norms, final params and moments), then
         * the oracle's, for a script to compare across devices:
         * TD_LAYOUT_DUMP=FILE. The oracle runs in this process, so on the
         * run's backend (one per process): a dump from --device guard equal
         * to one from --device cpu holds both the layout and the oracle to
         * the CPU backend's bits. */
        const char *dump = getenv("TD_LAYOUT_DUMP");
        if (dump && *dump) {
            FILE *f = fopen(dump, "wb");
            size_t n = t.numel, w = 0;
            if (f) {
                w += fwrite(res.losses, sizeof(float), (size_t)o.steps, f);
                w += fwrite(res.grad_norms, sizeof(float), (size_t)o.steps, f);
                for (int k = 0; k < 3; k++) w += fwrite(mine[k], sizeof(float), n, f);
                w += fwrite(ref_losses, sizeof(float), (size_t)o.steps, f);
                w += fwrite(ref_norms, sizeof(float), (size_t)o.steps, f);
                for (int k = 0; k < 3; k++) w += fwrite(ref[k], sizeof(float), n, f);
            }
            if (!f || fclose(f) != 0 || w != 2 * (2 * (size_t)o.steps + 3 * n)) {
                printf("FAIL cannot write TD_LAYOUT_DUMP %s\n", dump);
                fails++;
            }
        }
        printf("%s: %s\n", argc > 1 ? argv[1] : "layout", fails ? "FAILED" : "passed");
        free(ref_losses);
        free(ref_norms);
        td_free(P), td_free(M), td_free(V);
        td_param_table_free(&t);
    }
    free(run.r);
    td_train_result_free(&res);
    td_comm_finalize();
    return fails ? 1 : 0;
}
