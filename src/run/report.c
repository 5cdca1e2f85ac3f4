/* Step lines, JSON log, memory report. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "report.h"

#include "trident/backend.h"
#include "trident/base.h"
#include "trident/files.h"
#include "trident/comm.h"
#include "trident/kernels.h"
#include "trident/kernels_bf16.h"

/* Every block of --log lines ends here: a failed write (a full disk) is
 * remembered, the file closed and nothing more written to it; the run
 * stops at its next agreed point (td_report_log_error). */
static void log_flush(td_report *r) {
    if (!r->log) return;
    errno = 0;
    int bad = fflush(r->log) != 0 || ferror(r->log);
    if (!bad) return;
    int err = errno ? errno : EIO;
    fclose(r->log);
    r->log = NULL;
    if (!r->log_err) r->log_err = err;
}

int td_report_log_error(const td_report *r) {
    return r->log_err ? r->log_err : r->tb ? r->tb->err : r->tb_err;
}

/* trident eval's forwards (a layout pass: the dp config's forward_only,
 * mem_plan.c): no optimizer, gradients or activation gradients to report. */
static int forward_only(const td_run_spec *spec) { return spec->hooks.layout_pass != NULL; }

/* TRIDENT_PEAK_GFLOPS: one thread's peak GFLOP/s for the run's GEMM type,
 * stated instead of measured (as GPU users state a data-sheet peak): MFU is
 * then comparable across runs and machines' moods, and the run skips the
 * measurement (>= 70 ms per rank, the test suite sets it). 0: unset. */
static double stated_peak_gflops(void) {
    const char *s = getenv("TRIDENT_PEAK_GFLOPS");
    if (!s || !*s) return 0;
    char *end;
    double v = strtod(s, &end);
    TD_CHECK(*end == 0 && v > 0 && isfinite(v),
             "TRIDENT_PEAK_GFLOPS='%s' is not a peak; give one thread's GFLOP/s as a positive number, e.g. 50", s);
    return v;
}

void td_report_open(td_report *r, const td_run_spec *spec, const td_grid *g,
                    const td_gpt_config *cfg, const td_param_table *t, const td_dataset *d,
                    int threads, int Bm) {
    memset(r, 0, sizeof *r);
    r->spec = spec, r->g = g, r->cfg = cfg, r->Bm = Bm;
    r->data = d;
    r->first_step = -1, r->last_step = -1;
    r->flops_per_step = td_gpt_flops_per_token(cfg) * (double)spec->schedule.batch * cfg->T;
    /* capacity = one core's sgemm rate x compute threads. Measured after a
     * barrier (a rank still loading data would slow its neighbour's
     * measurement: a 2x low reading was seen) and the best rank's rate taken.
     * (`trident bench sgemm` also prints the in-process concurrent rate) */
    td_precision prec = spec->precision.precision;
    double stated = stated_peak_gflops();
    /* on every rank, stated or not: a node whose environment lacks the
     * variable measures, and the collectives must still pair up */
    if (g->world_size > 1) td_barrier(g->world);
    /* the peak of the GEMMs the run computes with: fp32 sgemm, oneDNN bf16,
     * or fp16 operands converted to fp32 */
    float peak = g->is_server ? 0.0f
                 : stated > 0 ? (float)stated
                 : prec == TD_PREC_FP32 ? (float)td_sgemm_peak_gflops(1)
                 : (float)td_matmul_lowp_peak_gflops(prec == TD_PREC_BF16 ? TD_K_BF16 : TD_K_F16);
    if (g->world_size > 1) td_allreduce(g->world, &peak, 1, TD_F32, TD_MAX);
    r->peak_gflops = peak;
    r->peak_flops = peak * 1e9 * threads * (td_grid_workers(g));
    if (g->world_rank == 0 && spec->output.log) {
        const char *why;
        r->log = td_fopen_output(spec->output.log, &why);
        TD_CHECK(r->log, "--log %s cannot be written: %s", spec->output.log, why);
    }
    if (g->world_rank == 0 && spec->output.tensorboard) td_report_tb_open(r);
    td_grid_print(g);
    if (spec->output.run_config)
        td_log("config: %s\n", spec->output.run_config); /* every flag's value (docs/config.md) */
    if (spec->output.notes) td_log("%s", spec->output.notes);
    if (spec->output.note_unsaved)
        td_log("note: no --out: this run saves no checkpoint (give --out DIR to keep what it "
               "trains)\n");
    td_log("data: %s; %zu train / %zu val tokens\n", d->description, d->n_train, d->n_val);
    if (cfg->arch == TD_ARCH_GPT2)
        td_log("model: L=%d H=%d C=%d T=%d V=%d (padded %d); %zu parameters (%.2fM)\n", cfg->L, cfg->H, cfg->C,
               cfg->T, cfg->V, t->Vp, t->n_global, t->n_global / 1e6);
    else
        td_log("model: %s L=%d H=%d KV=%d C=%d F=%d T=%d V=%d (padded %d), head %s, rope theta %g%s; %zu parameters "
               "(%.2fM)\n", td_arch_name(cfg->arch), cfg->L, cfg->H, cfg->KV, cfg->C, cfg->F, cfg->T, cfg->V, t->Vp,
               td_gpt_tied(cfg) ? "tied" : "untied", cfg->rope_theta,
               cfg->rope_scaling.factor > 0 ? " (llama3 scaling)" : "", t->n_global, t->n_global / 1e6);
    const td_moe_config *e = &cfg->moe;
    if (e->E > 0) { /* active: what a token meets (K routed and the shared experts, the router) */
        double per = (double)e->F * cfg->C * (cfg->arch == TD_ARCH_LLAMA ? 3 : 2), active = (double)t->n_global;
        for (int l = 0; l < cfg->L; l++)
            if (td_gpt_moe_layer(cfg, l)) active -= per * (e->E - e->K);
        char every[24] = "";
        if (e->every > 1) snprintf(every, sizeof every, " %d-th", e->every);
        td_log("experts: %d of F=%d in every%s block, top-%d (%s router%s), %d shared; aux %g, z %g%s%s; %.2fM "
               "parameters active per token; ep %d (%d experts per rank)\n",
               e->E, e->F, every, e->K, e->router == TD_ROUTER_SIGMOID ? "sigmoid" : "softmax",
               e->norm_topk == TD_TIE_ON ? ", renormalised" : "", e->shared, e->aux_coef, e->z_coef,
               e->bias_rate > 0 ? ", bias balancing" : "", e->capacity > 0 ? ", capacity" : ", dropless", active / 1e6,
               t->ep, e->E / t->ep);
    }
    if (g->axis[TD_TP].size > 1)
        td_log("tensor parallel: tp %d%s; %zu parameters per tp rank (heads %d, MLP features %d, "
               "vocabulary rows %d of %d)\n",
               g->axis[TD_TP].size, spec->layout.seq_parallel ? ", sequence parallel" : "",
               t->n_real, cfg->H / g->axis[TD_TP].size, cfg->F / g->axis[TD_TP].size,
               t->vocab_local, t->Vp);
    td_log("batch: %d sequences x %d tokens per step = %d replicas x %d micro-batches x %d; "
           "%d threads per rank; dp-mode %s, zero %d, recompute %s\n",
           spec->schedule.batch, cfg->T, g->axis[TD_DP].size, spec->schedule.grad_accum, Bm,
           threads, td_dp_mode_name(spec->layout.dp_mode), spec->layout.zero,
           (spec->precision.recompute == TD_RECOMPUTE_BLOCK ? "block" : "none"));
    const td_batch_rampup *ru = &spec->schedule.rampup;
    if (ru->start > 0) {
        int full_at = 0;
        while (td_batch_at(ru, spec->schedule.batch, full_at) < spec->schedule.batch) full_at++;
        td_log("batch ramp-up: %d sequences, + %d each %g samples, to %d from step %d (the micro-batches per "
               "replica follow, up to %d; memory planned at the full batch: the micro-batch's size does not change)\n",
               ru->start, ru->increment, (double)ru->samples / ((spec->schedule.batch - ru->start) / ru->increment),
               spec->schedule.batch, full_at, spec->schedule.grad_accum);
    }
    /* the schedule after the warm-up and where it ends (optim.h) */
    const td_optim_config *oc = &spec->optim;
    char lr_text[96];
    if (oc->schedule == TD_LR_WSD)
        snprintf(lr_text, sizeof lr_text, "wsd: stable to step %d, %s decay to step %d", td_lr_wsd_decay_start(oc),
                 td_lr_decay_shape_name(oc->decay_shape), oc->max_steps);
    else if (oc->schedule == TD_LR_CONSTANT || oc->schedule == TD_LR_INVERSE_SQRT)
        snprintf(lr_text, sizeof lr_text, "%s", td_lr_schedule_name(oc->schedule));
    else
        snprintf(lr_text, sizeof lr_text, "%s to step %d", td_lr_schedule_name(oc->schedule), oc->max_steps);
    const char *gemm = prec == TD_PREC_FP32 ? "sgemm" : prec == TD_PREC_BF16 ? "bf16 GEMM" : "fp16 GEMM (via fp32)";
    const char *how = stated > 0 ? "stated by TRIDENT_PEAK_GFLOPS" : "measured";
    if (forward_only(spec))
        td_log("forwards only: no optimizer, gradients or activation gradients; %s peak %.1f GFLOP/s per thread "
               "(%s)\n", gemm, r->peak_gflops, how);
    else
        td_log("optimizer: %sAdamW lr %g -> %g (warm-up %d, %s), betas (%g, %g), wd %g, clip %g; "
               "%s peak %.1f GFLOP/s per thread (%s)\n",
               spec->optim.optimizer != TD_OPT_MUON ? "" : spec->optim.muon_ns_k == TD_K_BF16
                   ? "Muon (Newton-Schulz in bf16) for the blocks' matrices, " : "Muon (Newton-Schulz in fp32) for the blocks' matrices, ",
               spec->optim.lr, spec->optim.min_lr, spec->optim.warmup, lr_text, spec->optim.beta1,
               spec->optim.beta2, spec->optim.weight_decay, spec->optim.clip, gemm, r->peak_gflops, how);
    if (r->log) {
        fprintf(r->log,
                "{\"event\": \"start\", \"world\": %d, \"dp\": %d, \"tp\": %d, \"pp\": %d, "
                "\"ps_servers\": %d, \"dp_mode\": \"%s\", \"zero\": %d, \"layers\": %d, "
                "\"heads\": %d, \"embd\": %d, \"seq\": %d, \"vocab\": %d, \"params\": %zu, "
                "\"batch\": %d, \"grad_accum\": %d, \"threads\": %d, \"steps\": %d, "
                "\"recompute\": \"%s\"",
                g->world_size, g->axis[TD_DP].size, g->axis[TD_TP].size, g->axis[TD_PP].size,
                g->n_servers, td_dp_mode_name(spec->layout.dp_mode), spec->layout.zero, cfg->L,
                cfg->H, cfg->C, cfg->T, cfg->V, t->n_global, spec->schedule.batch,
                spec->schedule.grad_accum, threads, spec->schedule.steps,
                (spec->precision.recompute == TD_RECOMPUTE_BLOCK ? "block" : "none"));
        if (spec->output.run_config)
            fprintf(r->log, ", \"run_config\": %s", spec->output.run_config);
        log_flush(r); /* the memory plan closes this object */
    }
}

/* n 64-bit values of every rank, rank-major, on every rank (raw payload
 * moved as pairs of 32-bit words: no reduction touches it). */
static void gather_u64(const td_grid *g, const uint64_t *mine, int n, uint64_t *all) {
    if (g->world_size == 1) {
        memcpy(all, mine, sizeof(uint64_t) * (size_t)n);
        return;
    }
    td_all_gather(g->world, mine, all, (size_t)n * 2, TD_F32);
}

/* All ranks' category bytes on rank 0: [rank][cat] planned and measured. */
static void gather_bytes(const td_grid *g, const size_t *mine, uint64_t *all) {
    uint64_t buf[TD_MEM_NCAT];
    for (int c = 0; c < TD_MEM_NCAT; c++) buf[c] = mine[c];
    gather_u64(g, buf, TD_MEM_NCAT, all);
}

/* The categories the table shows: the main ones, all with --memory-report;
 * a forward-only run has no gradients or moments to show. */
static int shown(int c, int detail, int fwd) {
    if (fwd && (c == TD_MEM_GRADS || c == TD_MEM_OPTIM)) return 0;
    return detail || c <= TD_MEM_ACTS || c == TD_MEM_COMM;
}

void td_report_memory(td_report *r, const td_mem_plan *plan, int measured) {
    const td_grid *g = r->g;
    int W = g->world_size;
    uint64_t *pl = td_alloc(sizeof(uint64_t) * TD_MEM_NCAT * W, TD_MEM_OTHER);
    uint64_t *ms = td_alloc(sizeof(uint64_t) * TD_MEM_NCAT * W, TD_MEM_OTHER);
    size_t peaks[TD_MEM_NCAT];
    for (int c = 0; c < TD_MEM_NCAT; c++) peaks[c] = td_mem_peak(c);
    if (!measured) {
        r->planned_total = 0;
        for (int c = 0; c < TD_MEM_NCAT; c++) r->planned_total += plan->bytes[c];
    }
    gather_bytes(g, plan->bytes, pl);
    gather_bytes(g, peaks, ms);
    /* the split by where the bytes live, [side][rank][cat]: planned device,
     * planned host, measured device, measured host */
    uint64_t *sp = td_alloc(sizeof(uint64_t) * 4 * TD_MEM_NCAT * W, TD_MEM_OTHER);
    size_t side[4][TD_MEM_NCAT];
    for (int c = 0; c < TD_MEM_NCAT; c++)
        side[0][c] = plan->device[c], side[1][c] = plan->bytes[c] - plan->device[c],
        side[2][c] = td_mem_peak_device(c), side[3][c] = td_mem_peak_host(c);
    for (int k = 0; k < 4; k++) gather_bytes(g, side[k], sp + (size_t)k * TD_MEM_NCAT * W);
    char b1[32], b2[32];
    if (g->world_rank == 0) {
        int detail = r->spec->output.memory_report, fwd = forward_only(r->spec);
        td_log("memory per rank (%s):\n", measured ? "planned vs measured peak after step 1" : "plan");
        td_log("  %-5s", "rank");
        for (int c = 0; c < TD_MEM_NCAT; c++)
            if (shown(c, detail, fwd)) td_log(" %20s", td_mem_cat_name(c));
        td_log(" %20s\n", "model state");
        for (int w = 0; w < W; w++) {
            td_log("  %-5d", w);
            uint64_t state_p = 0, state_m = 0;
            for (int c = 0; c < TD_MEM_NCAT; c++) {
                uint64_t p = pl[w * TD_MEM_NCAT + c], m = ms[w * TD_MEM_NCAT + c];
                if (c <= TD_MEM_GATHER) state_p += p, state_m += m;
                if (!shown(c, detail, fwd)) continue;
                if (measured) {
                    char cell[48];
                    snprintf(cell, sizeof cell, "%s/%s", td_fmt_bytes(b1, 32, (double)p),
                             td_fmt_bytes(b2, 32, (double)m));
                    td_log(" %20s", cell);
                } else {
                    td_log(" %20s", td_fmt_bytes(b1, 32, (double)p));
                }
            }
            if (measured) {
                char cell[48];
                snprintf(cell, sizeof cell, "%s/%s", td_fmt_bytes(b1, 32, (double)state_p),
                         td_fmt_bytes(b2, 32, (double)state_m));
                td_log(" %20s\n", cell);
            } else {
                td_log(" %20s\n", td_fmt_bytes(b1, 32, (double)state_p));
            }
        }
        if (td_backend_is_device()) /* on cpu every byte is host memory: nothing to add */
            for (int w = 0; w < W; w++) {
                uint64_t t[4] = {0, 0, 0, 0};
                for (int k = 0; k < 4; k++)
                    for (int c = 0; c < TD_MEM_NCAT; c++)
                        if (c != TD_MEM_OTHER) t[k] += sp[((size_t)k * W + w) * TD_MEM_NCAT + c];
                char b3[32], b4[32];
                if (measured)
                    td_log("  rank %d on --device %s (planned/measured, other apart): device %s/%s, host %s/%s\n", w,
                           td_device_name(td_backend_device()), td_fmt_bytes(b1, 32, (double)t[0]),
                           td_fmt_bytes(b2, 32, (double)t[2]), td_fmt_bytes(b3, 32, (double)t[1]),
                           td_fmt_bytes(b4, 32, (double)t[3]));
                else
                    td_log("  rank %d on --device %s (other apart): device %s, host %s\n", w,
                           td_device_name(td_backend_device()), td_fmt_bytes(b1, 32, (double)t[0]),
                           td_fmt_bytes(b2, 32, (double)t[1]));
            }
        if (r->log) {
            fprintf(r->log, measured ? "{\"event\": \"memory\", \"ranks\": [" : ", \"memory_plan\": [");
            /* per rank: the categories' wholes (and _peak), then "device" and
             * "host" (and "device_peak", "host_peak") by category */
            static const char *const sides[4] = {"device", "host", "device_peak", "host_peak"};
            for (int w = 0; w < W; w++) {
                fprintf(r->log, "%s{", w ? ", " : "");
                for (int c = 0; c < TD_MEM_NCAT; c++) {
                    fprintf(r->log, "%s\"%s\": %llu", c ? ", " : "", td_mem_cat_name(c),
                            (unsigned long long)pl[w * TD_MEM_NCAT + c]);
                    if (measured)
                        fprintf(r->log, ", \"%s_peak\": %llu", td_mem_cat_name(c),
                                (unsigned long long)ms[w * TD_MEM_NCAT + c]);
                }
                for (int k = 0; k < (measured ? 4 : 2); k++) {
                    fprintf(r->log, ", \"%s\": {", sides[k]);
                    for (int c = 0; c < TD_MEM_NCAT; c++)
                        fprintf(r->log, "%s\"%s\": %llu", c ? ", " : "", td_mem_cat_name(c),
                                (unsigned long long)sp[((size_t)k * W + w) * TD_MEM_NCAT + c]);
                    fprintf(r->log, "}");
                }
                fprintf(r->log, "}");
            }
            fprintf(r->log, "]}\n");
            log_flush(r);
        }
        if (measured) td_report_tb_memory(r, ms, W);
    }
    td_free(pl);
    td_free(ms);
    td_free(sp);
}

/* "0.42s", "12.4s", "3m05s", "2h07m": a duration to the precision a reader wants. */
static void format_duration(char *buf, size_t cap, double s) {
    if (!(s >= 0.0)) s = 0.0;
    if (s < 10.0) snprintf(buf, cap, "%.2fs", s);
    else if (s < 60.0) snprintf(buf, cap, "%.1fs", s);
    else if (s < 3600.0) snprintf(buf, cap, "%dm%02ds", (int)(s / 60.0), (int)fmod(s, 60.0));
    else snprintf(buf, cap, "%dh%02dm", (int)(s / 3600.0), (int)fmod(s / 60.0, 60.0));
}

/* The step's host traffic in --log: "host_traffic": {purpose: {"up":
 * [bytes, calls], "down": [bytes, calls]}} for each purpose that moved
 * anything, the comm layer's staging apart as "comm_staging". */
static void log_traffic(FILE *f, const td_host_traffic *t) {
    fprintf(f, ", \"host_traffic\": {");
    int first = 1;
    for (int p = 0; p < TD_HOST_NPURPOSE; p++) {
        if (p == TD_HOST_COMM || !(t->up_calls[p] || t->down_calls[p])) continue;
        fprintf(f, "%s\"%s\": {\"up\": [%llu, %llu], \"down\": [%llu, %llu]}", first ? "" : ", ",
                td_host_purpose_name((td_host_purpose)p), (unsigned long long)t->up_bytes[p],
                (unsigned long long)t->up_calls[p], (unsigned long long)t->down_bytes[p],
                (unsigned long long)t->down_calls[p]);
        first = 0;
    }
    int c = TD_HOST_COMM;
    fprintf(f, "}, \"comm_staging\": {\"up\": [%llu, %llu], \"down\": [%llu, %llu]}",
            (unsigned long long)t->up_bytes[c], (unsigned long long)t->up_calls[c],
            (unsigned long long)t->down_bytes[c], (unsigned long long)t->down_calls[c]);
}

/* The same for the summary: one line, purposes that moved anything. */
static void report_traffic(const td_host_traffic *t) {
    td_log("host traffic per step (rank 0, last step):");
    int any = 0;
    for (int p = 0; p < TD_HOST_NPURPOSE; p++) {
        if (p == TD_HOST_COMM || !(t->up_calls[p] || t->down_calls[p])) continue;
        td_log("%s %s %llu B up in %llu, %llu B down in %llu", any ? ";" : "",
               td_host_purpose_name((td_host_purpose)p), (unsigned long long)t->up_bytes[p],
               (unsigned long long)t->up_calls[p], (unsigned long long)t->down_bytes[p],
               (unsigned long long)t->down_calls[p]);
        any = 1;
    }
    int c = TD_HOST_COMM;
    td_log("%s; comm staging %llu B up, %llu B down\n", any ? "" : " none",
           (unsigned long long)t->up_bytes[c], (unsigned long long)t->down_bytes[c]);
}

void td_report_step(td_report *r, int step, float loss, float lr, double norm, double ms) {
    double tps = (double)r->spec->schedule.batch * r->cfg->T / (ms * 1e-3);
    double mfu = r->flops_per_step / (ms * 1e-3) / r->peak_flops;
    double now = td_now_ms();
    if (r->first_step < 0) r->first_step = step, r->t_first_ms = now - ms;
    /* the run's pace so far (evaluations, saves and skipped attempts
     * included) over the steps it has left */
    int last =
        r->spec->schedule.stop_after > 0 && r->spec->schedule.stop_after < r->spec->schedule.steps
            ? r->spec->schedule.stop_after
            : r->spec->schedule.steps;
    double elapsed_s = (now - r->t_first_ms) * 1e-3;
    int done = step - r->first_step + 1, left = last - 1 - step;
    double eta_s = left > 0 && done > 0 ? elapsed_s / done * left : 0.0;
    if (r->log) {
        fprintf(r->log,
                "{\"step\": %d, \"loss\": %.9g, \"lr\": %.9g, \"grad_norm\": %.9g, \"step_ms\": %.3f, "
                "\"tokens_per_s\": %.1f, \"mfu\": %.4f",
                step, loss, lr, norm, ms, tps, mfu);
        if (r->loss_scale > 0) fprintf(r->log, ", \"loss_scale\": %.9g", r->loss_scale);
        if (r->step_batch > 0) fprintf(r->log, ", \"batch\": %d", r->step_batch);
        if (r->moe)
            fprintf(r->log, ", \"moe_aux\": %.9g, \"moe_z\": %.9g, \"moe_load_min\": %.4f, \"moe_load_max\": %.4f, "
                            "\"moe_dropped\": %.6f", r->moe->moe_aux, r->moe->moe_z, r->moe->moe_load_min,
                    r->moe->moe_load_max, r->moe->moe_dropped);
        log_traffic(r->log, &r->traffic);
        td_report_data_tokens_json(r, step + 1, r->log);
        fprintf(r->log, ", \"elapsed_s\": %.3f, \"eta_s\": %.3f}\n", elapsed_s, eta_s);
        log_flush(r);
    }
    r->last_step = step;
    td_report_tb_step(r, step, loss, lr, norm, ms, tps, mfu);
    if (!r->spec->output.quiet &&
        (step % r->spec->schedule.log_every == 0 || step == r->spec->schedule.steps - 1)) {
        char el[32], eta[32];
        format_duration(el, sizeof el, elapsed_s);
        format_duration(eta, sizeof eta, eta_s);
        char moe[96] = "";
        if (r->moe) /* the load of the idlest and busiest expert, 1 = an even share */
            snprintf(moe, sizeof moe, "aux %.4f | load %.2f-%.2f | ", r->moe->moe_aux, r->moe->moe_load_min,
                     r->moe->moe_load_max);
        if (r->moe && r->spec->model.cfg.moe.capacity > 0)
            snprintf(moe + strlen(moe), sizeof moe - strlen(moe), "dropped %.1f%% | ", 100.0 * r->moe->moe_dropped);
        td_log("step %5d/%d | loss %.4f | %slr %.2e | norm %.4f | %7.1f ms | %8.0f tok/s | MFU "
               "%4.1f%% | "
               "%s elapsed, ETA %s\n",
               step, r->spec->schedule.steps, loss, moe, lr, norm, ms, tps, 100.0 * mfu, el, eta);
    }
    td_vlog("step %d loss %.6f norm %.6f %.1f ms\n", step, loss, norm, ms);
}

void td_report_precision(td_report *r, const td_mem_plan *plan) {
    const td_run_spec *spec = r->spec;
    td_precision p = spec->precision.precision;
    const char *rt = td_precision_name(p);
    int lp = p != TD_PREC_FP32,
        zero = spec->layout.dp_mode == TD_DP_ALLREDUCE ? spec->layout.zero : 0;
    int ps = spec->layout.dp_mode == TD_DP_PS;
    char reduce[96];
    if (spec->layout.topk_ratio > 0)
        snprintf(reduce, sizeof reduce, "fp32 (index, value) pairs, %s",
                 spec->layout.grad_compress);
    else if (spec->layout.grad_dtype == TD_BF16)
        snprintf(reduce, sizeof reduce, "bf16 payload, summed in fp32");
    else
        snprintf(reduce, sizeof reduce, "fp32");
    td_log("precision %s: dtype of each stage of the step\n", rt);
    int fwd = forward_only(spec);
    if (lp)
        td_log("  parameter storage   fp32 master weights + %s compute copies of every weight "
               "(%.2f MiB per rank, %s)\n",
               rt, plan->bytes[TD_MEM_PARAMS] / 1048576.0, fwd ? "made from the loaded weights" : "refreshed after each update");
    else
        td_log("  parameter storage   fp32\n");
    if (lp)
        td_log("  compute             GEMMs %s x %s -> fp32 accumulation (oneDNN matmul, %s); "
               "LayerNorm, softmax, GELU, attention, loss in fp32 on %s inputs\n",
               rt, rt,
               p == TD_PREC_FP16 ? (td_f16_native() ? "native fp16" : "no fp16 matmul here: operands converted to fp32")
               : td_bf16_native() ? "native AVX512-BF16" : "no native bf16 here: emulated/converted",
               rt);
    else
        td_log("  compute             fp32 (OpenBLAS sgemm and trident's kernels)\n");
    td_log("  activations         %s%s\n", rt,
           lp ? " (LayerNorm statistics, logits and the loss in fp32)" : "");
    if (!fwd) {
        td_log("  gradient accum.     fp32 (the GEMMs add into the fp32 gradient buffers)\n");
        td_log("  gradient reduction  %s\n", r->g->axis[TD_DP].size > 1 ? reduce : "none (dp 1)");
    }
    td_log("  master weights      %s\n",
           !lp ? "none (the fp32 parameters are the weights)"
           : ps ? "fp32 on the parameter servers, pulled by workers"
           : zero == 3 ? "fp32, sharded over dp (ZeRO-3)" : "fp32, replicated over dp");
    if (fwd)
        td_log("  gradients           none (forwards only)\n");
    else
        td_log("  optimizer moments   fp32 AdamW m and v%s\n",
               ps ? " on the parameter servers" : zero >= 1 ? ", sharded over dp" : "");
    if (r->log) {
        fprintf(r->log, ", \"precision\": \"%s\", \"native\": %d", rt,
                p == TD_PREC_FP16 ? td_f16_native() : lp ? td_bf16_native() : 0);
        log_flush(r);
    }
}

void td_report_skip(td_report *r, int step, const char *where, const td_run_result *res,
                    float scale_before, float scale_after) {
    int row = res->skip_row, rank = res->skip_rank, micro = res->skip_micro, skipped = res->skipped_steps;
    /* always printed: a skip is rare and every one matters */
    td_log("step %5d/%d skipped | %s | loss scale %g -> %g | %d skipped so far\n", step,
           r->spec->schedule.steps, where, (double)scale_before, (double)scale_after, skipped);
    if (r->log) {
        fprintf(r->log,
                "{\"event\": \"skip\", \"step\": %d, \"tensor_row\": %d, \"rank\": %d, "
                "\"micro_batch\": %d, \"loss_scale_before\": %.9g, \"loss_scale\": %.9g, "
                "\"skipped\": %d, \"reason\": \"%s\"}\n",
                step, row, rank, micro, scale_before, scale_after, skipped, where);
        log_flush(r);
    }
    /* the count only: the step trained again next carries the new scale */
    static const char *const tag = "train/skipped_steps";
    td_report_tb_scalars(r, step, 1, &tag, (const double[]){skipped});
}

static void print_line(const char *line, void *ctx) {
    (void)ctx;
    td_log("  %s\n", line);
}

void td_report_gemm_impl(td_report *r) {
    if (r->spec->precision.precision == TD_PREC_FP32 || r->g->is_server) return;
    td_log("GEMMs (oneDNN primitives, one per shape):\n");
    td_matmul_bf16_describe(print_line, NULL);
}

void td_report_eval(td_report *r, int step, double val_loss) {
    td_log("eval  %5d | val loss %.4f (%d batches of %d sequences)\n", step, val_loss,
           r->spec->schedule.eval_iters, r->spec->schedule.batch);
    if (r->log) {
        fprintf(r->log, "{\"step\": %d, \"val_loss\": %.6f}\n", step, val_loss);
        log_flush(r);
    }
    static const char *const tag = "eval/val_loss";
    td_report_tb_scalars(r, step, 1, &tag, &val_loss);
}

/* The experts' load over the run, per layer (tokens per expert relative to
 * an even share), and the expert-parallel exchange beside its formula. */
static void report_moe(td_report *r, const td_run_result *res) {
    const td_moe_config *e = &r->cfg->moe;
    td_log("experts: %d, top-%d; last step: aux loss %.5f, z-loss %.5f, load %.2f-%.2f of an even share", e->E, e->K,
           res->moe_aux, res->moe_z, res->moe_load_min, res->moe_load_max);
    if (e->capacity > 0) td_log(", %.2f%% of assignments dropped", 100.0 * res->moe_dropped);
    td_log("\n");
    for (int l = 0; l < r->cfg->L && res->moe_load; l++) {
        if (!td_gpt_moe_layer(r->cfg, l)) continue;
        const double *ld = res->moe_load + (size_t)l * e->E;
        double sum = 0.0, lo = INFINITY, hi = 0.0;
        for (int i = 0; i < e->E; i++) sum += ld[i], lo = fmin(lo, ld[i]), hi = fmax(hi, ld[i]);
        char list[256] = "";
        for (int i = 0, k = 0; i < e->E && i < 16; i++)
            k += snprintf(list + k, sizeof list - (size_t)k, "%s%.0f", i ? " " : "", ld[i]);
        td_log("  layer %d: assignments per expert over the run %s%s (min %.2f, max %.2f of an even share)\n", l,
               list, e->E > 16 ? " ..." : "", sum > 0 ? lo / (sum / e->E) : 0.0, sum > 0 ? hi / (sum / e->E) : 0.0);
    }
    if (res->ep_formula_bytes > 0)
        td_log("ep exchange (rank 0, last step): %.0f bytes sent to other ranks; the formula from the routing %.0f, "
               "for a uniform router %.0f\n", res->ep_sent_bytes, res->ep_formula_bytes, res->ep_uniform_bytes);
    if (r->log)
        fprintf(r->log, "{\"event\": \"moe\", \"aux\": %.9g, \"z\": %.9g, \"load_min\": %.4f, \"load_max\": %.4f, "
                        "\"dropped\": %.6f, \"ep_sent_bytes\": %.0f, \"ep_formula_bytes\": %.0f, \"ep_uniform_bytes\": %.0f}\n",
                res->moe_aux, res->moe_z, res->moe_load_min, res->moe_load_max, res->moe_dropped,
                res->ep_sent_bytes, res->ep_formula_bytes, res->ep_uniform_bytes);
}

void td_report_summary(td_report *r, const td_run_result *res) {
    if (r->g->is_server) return;
    if (res->step_ms <= 0.0) { /* no step ran (a checkpoint saved again): no rates to give */
        td_log("done: %d steps, none of them in this run\n", res->steps_done);
        return;
    }
    td_log("done: %d steps, %.1f ms/step, %.0f tokens/s, MFU %.1f%%", res->steps_done, res->step_ms,
           res->tokens_per_s, 100.0 * r->flops_per_step / (res->step_ms * 1e-3) / r->peak_flops);
    if (!isnan(res->final_val_loss)) td_log(", final val loss %.4f", res->final_val_loss);
    td_log("\n");
    report_traffic(&res->host_traffic);
    td_report_data_tokens_line(r, res->steps_done);
    if (r->spec->precision.gemm_stats && res->gemm_ms > 0)
        td_log("gemm: %.3e flop/step, %.1f ms/step, %.1f GFLOP/s (rank 0, timed steps, every GEMM "
               "of forward and backward)\n",
               res->gemm_flops, res->gemm_ms, res->gemm_flops / (res->gemm_ms * 1e6));
    if (r->moe) report_moe(r, res);
    if (r->loss_scale > 0) {
        td_log("loss scaling (%s): final scale %g, skipped steps %d\n",
               r->spec->precision.loss_scale_text ? r->spec->precision.loss_scale_text : "auto",
               (double)res->loss_scale, res->skipped_steps);
        if (r->log)
            fprintf(r->log, "{\"event\": \"loss_scale\", \"loss_scale\": %.9g, \"skipped\": %d}\n",
                    res->loss_scale, res->skipped_steps);
    }
    if (r->g->axis[TD_DP].size > 1 && res->grad_dense_bytes > 0) {
        /* what the comm layer counted for the gradient reduction, beside fp32 */
        td_log("dp gradient traffic per step (rank 0, %s payload, %s): %.0f bytes sent, dense fp32 "
               "%.0f bytes (%.2f%%)\n",
               (r->spec->layout.grad_dtype == TD_BF16 ? "bf16" : "fp32"),
               r->spec->layout.grad_compress, res->grad_sent_bytes, res->grad_dense_bytes,
               100.0 * res->grad_sent_bytes / res->grad_dense_bytes);
        if (r->log) {
            fprintf(r->log,
                    "{\"event\": \"grad_traffic\", \"grad_reduce_dtype\": \"%s\", "
                    "\"grad_compress\": \"%s\", \"sent_bytes\": %.0f, \"dense_bytes\": %.0f}\n",
                    (r->spec->layout.grad_dtype == TD_BF16 ? "bf16" : "fp32"),
                    r->spec->layout.grad_compress, res->grad_sent_bytes, res->grad_dense_bytes);
            log_flush(r);
        }
    }
    if (r->g->axis[TD_TP].size > 1) {
        /* what the comm layer recorded in the last step beside the formula */
        static const char *op[TD_TP_NOPS] = {"all-reduce", "all-gather", "reduce-scatter"};
        for (int k = 0; k < TD_TP_NOPS; k++)
            if (res->tp_measured.calls[k] || res->tp_formula.calls[k])
                td_log("tp traffic per step: %-14s %5llu calls %12llu bytes (formula %llu calls %llu "
                       "bytes)\n",
                       op[k], (unsigned long long)res->tp_measured.calls[k],
                       (unsigned long long)res->tp_measured.bytes[k],
                       (unsigned long long)res->tp_formula.calls[k],
                       (unsigned long long)res->tp_formula.bytes[k]);
        if (r->log) {
            fprintf(r->log, "{\"event\": \"tp_traffic\"");
            for (int k = 0; k < TD_TP_NOPS; k++)
                fprintf(r->log, ", \"%s_calls\": %llu, \"%s_bytes\": %llu, \"%s_formula_bytes\": %llu",
                        op[k], (unsigned long long)res->tp_measured.calls[k], op[k],
                        (unsigned long long)res->tp_measured.bytes[k], op[k],
                        (unsigned long long)res->tp_formula.bytes[k]);
            fprintf(r->log, "}\n");
            log_flush(r);
        }
    }
    if (res->muon_sent_bytes || res->muon_formula_bytes) {
        /* each matrix to its owner and back (docs/recipe-muon.md's formula) */
        td_log("muon exchange per step (rank 0): %llu bytes sent (formula %llu)\n",
               (unsigned long long)res->muon_sent_bytes, (unsigned long long)res->muon_formula_bytes);
        if (r->log) {
            fprintf(r->log, "{\"event\": \"muon_traffic\", \"sent_bytes\": %llu, \"formula_bytes\": %llu}\n",
                    (unsigned long long)res->muon_sent_bytes, (unsigned long long)res->muon_formula_bytes);
            log_flush(r);
        }
    }
    if (r->g->axis[TD_CP].size > 1) {
        /* the ring's bytes of the last step beside the formula, and its waits */
        td_log("cp ring per step (rank 0): %llu bytes sent (formula %llu), wait %.1f ms, chunk pairs %llu "
               "computed, %llu skipped by the causal mask\n",
               (unsigned long long)res->cp_sent_bytes, (unsigned long long)res->cp_formula_bytes, res->cp_wait_ms,
               (unsigned long long)res->cp_pairs, (unsigned long long)res->cp_skipped);
        if (r->log) {
            fprintf(r->log, "{\"event\": \"cp_ring\", \"sent_bytes\": %llu, \"formula_bytes\": %llu, "
                            "\"wait_ms\": %.3f, \"pairs\": %llu, \"skipped\": %llu}\n",
                    (unsigned long long)res->cp_sent_bytes, (unsigned long long)res->cp_formula_bytes,
                    res->cp_wait_ms, (unsigned long long)res->cp_pairs, (unsigned long long)res->cp_skipped);
            log_flush(r);
        }
    }
    if (r->g->axis[TD_PP].size > 1 && r->log) {
        fprintf(
            r->log,
            "{\"event\": \"pipeline\", \"schedule\": \"%s\", \"pp\": %d, \"micro_batches\": %d, "
            "\"virtual_stages\": %d, \"bubble\": %.6f, \"bubble_theory\": %.6f, \"stage_bubble\": "
            "[",
            td_sched_name((td_sched_kind)r->spec->layout.pp_schedule), r->g->axis[TD_PP].size,
            r->spec->schedule.grad_accum, r->spec->layout.virtual_stages, res->pp_bubble,
            res->pp_bubble_theory);
        for (int s = 0; s < r->g->axis[TD_PP].size && s < TD_MAX_PP_REPORT; s++)
            fprintf(r->log, "%s%.6f", s ? ", " : "", res->pp_stage_bubble[s]);
        fprintf(r->log, "]}\n");
        log_flush(r);
    }
    if (r->spec->layout.dp_mode == TD_DP_PS)
        td_log("ps: staleness observed max %d, mean %.2f steps (bound --ps-staleness %d)\n",
               res->max_staleness, res->mean_staleness, r->spec->layout.ps_staleness);
}

void td_report_sample(td_report *r, const td_param_table *canon, const float *params,
                      const td_tokenizer *tok, const td_run_spec *spec) {
    printf("sample (%d tokens, temperature 1.0, top-k 0):\n", spec->output.sample_tokens);
    td_sampling sp = {.prompt = spec->output.sample_prompt,
                      .tokens = spec->output.sample_tokens,
                      .temperature = 1.0f,
                      .seed = spec->schedule.seed, .doc_mask = spec->data.doc_mask, /* as it trained */
                      .eod = td_run_doc_eod(&spec->data, tok)};
    td_generate(canon, params, tok, &sp, stdout);
    printf("\n");
    fflush(stdout);
}

/* The process as the kernel sees it beside the plan. The high-water mark
 * counts what the allocator does not: the program, libraries and their
 * buffers (OpenBLAS, OpenMP, Open MPI's shared-memory transport), malloc
 * outside td_alloc, and pages of other ranks' shared windows this rank
 * touched; growth = high-water - baseline is the run's own. */
static void report_rss(td_report *r) {
    enum { HWM, BASE, PLAN, ALLOC, NV };
    const td_grid *g = r->g;
    size_t peak = td_mem_total_peak();
    uint64_t mine[NV] = {td_rss_peak_bytes(), r->baseline.rss_baseline, r->planned_total,
                         peak > r->baseline.alloc_baseline ? peak - r->baseline.alloc_baseline : 0};
    uint64_t *all = td_alloc(sizeof(uint64_t) * NV * (size_t)g->world_size, TD_MEM_OTHER);
    gather_u64(g, mine, NV, all);
    if (g->world_rank == 0) {
        char b[4][32];
        td_log("resident set per rank (kernel's high-water mark; baseline = before the model was "
               "allocated; allocator peak above its own baseline):\n");
        td_log("  %-5s %12s %12s %12s %12s %24s\n", "rank", "high-water", "baseline", "planned",
               "allocator", "(high-water-base)/plan");
        for (int w = 0; w < g->world_size; w++) {
            const uint64_t *x = all + (size_t)w * NV;
            double ratio = x[PLAN] ? ((double)x[HWM] - (double)x[BASE]) / (double)x[PLAN] : 0.0;
            td_log("  %-5d %12s %12s %12s %12s %24.2f\n", w, td_fmt_bytes(b[0], 32, (double)x[HWM]),
                   td_fmt_bytes(b[1], 32, (double)x[BASE]), td_fmt_bytes(b[2], 32, (double)x[PLAN]),
                   td_fmt_bytes(b[3], 32, (double)x[ALLOC]), ratio);
        }
        if (r->log) {
            fprintf(r->log, "{\"event\": \"rss\", \"ranks\": [");
            for (int w = 0; w < g->world_size; w++) {
                const uint64_t *x = all + (size_t)w * NV;
                fprintf(r->log,
                        "%s{\"rss_peak\": %llu, \"rss_baseline\": %llu, \"planned\": %llu, "
                        "\"alloc_peak\": %llu}",
                        w ? ", " : "", (unsigned long long)x[HWM], (unsigned long long)x[BASE],
                        (unsigned long long)x[PLAN], (unsigned long long)x[ALLOC]);
            }
            fprintf(r->log, "]}\n");
        }
        double hi = 0.0; /* the busiest rank's high-water mark */
        for (int w = 0; w < g->world_size; w++) hi = fmax(hi, (double)all[(size_t)w * NV + HWM]);
        static const char *const tag = "mem/rss_peak";
        if (r->last_step >= 0) td_report_tb_scalars(r, r->last_step, 1, &tag, &hi);
    }
    td_free(all);
}

void td_report_close(td_report *r) {
    report_rss(r);
    log_flush(r);
    if (r->log && fclose(r->log) != 0 && !r->log_err) r->log_err = errno ? errno : EIO;
    r->log = NULL;
    td_report_tb_close(r);
}
