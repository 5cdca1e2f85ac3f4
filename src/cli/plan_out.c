/* `trident plan`'s output: the ranked plans (a table or JSON) with the
 * validation's error band beside each prediction, the ZeRO-3-only plan
 * beside the best, and the `trident train` command that runs a plan. A
 * mixture-of-experts model's rows carry ep and etp, its costs the
 * all-to-all; a dense model's output leaves them out. */
#include "plan_out.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "trident/model.h"
#include "trident/schedule.h"

static const char *rc_name(int rc) {
    return rc == TD_PLAN_RC_FULL ? "full" : rc == TD_PLAN_RC_SELECTIVE ? "selective" : "none";
}

static const char *sched_label(const td_plan_layout *l, char *buf, size_t n) {
    if (l->sched == TD_PLAN_NO_SCHED) snprintf(buf, n, "-");
    else if (l->sched == TD_SCHED_INTERLEAVED) snprintf(buf, n, "interleaved:%d", l->v);
    else snprintf(buf, n, "%s", td_sched_name((td_sched_kind)l->sched));
    return buf;
}

/* the dominant cost's seconds (dp: its whole time when not all hidden) */
static double dominant_s(const td_plan_eval *e) {
    return e->dominant == TD_COST_DP ? e->dp_traffic_s : e->t[e->dominant];
}

/* The validation's error band, (predicted - measured) / measured: of the
 * step time, and of throughput (TFLOP/s and MFU), which scales as its
 * inverse: 1 / (1 + x) - 1 turns the step's [lo, hi] into [.., ..]. */
static void band_tput(const td_plan_validation *v, double *lo, double *hi) {
    *lo = 1 / (1 + v->hi) - 1, *hi = 1 / (1 + v->lo) - 1;
}
static const char *band_str(double lo, double hi, char *buf, size_t n) {
    if (fabs(lo + hi) < 0.005) snprintf(buf, n, "+-%.0f%%", 100 * hi);
    else snprintf(buf, n, "%+.0f..%+.0f%%", 100 * lo, 100 * hi);
    return buf;
}

/* the costs a model has: a dense model's leave the experts' all-to-all out */
static int n_costs(const td_plan_out *o) { return o->m->E > 0 ? TD_COST_N : TD_COST_EP; }

static void print_row(const td_plan_out *o, const char *tag, const td_plan_eval *e) {
    char s[32], bs[24] = "-", bt[24] = "-";
    const td_plan_layout *l = &e->lay;
    const td_plan_validation *v = o->c->validation;
    if (v) {
        double lo, hi;
        band_str(v->lo, v->hi, bs, sizeof bs);
        band_tput(v, &lo, &hi);
        band_str(lo, hi, bt, sizeof bt);
    }
    char zero[16];
    if (l->shard) snprintf(zero, sizeof zero, "%d/%d", l->zero, l->shard); /* hybrid: ZeRO over shards of N */
    else snprintf(zero, sizeof zero, "%d", l->zero);
    char ep[32] = "";
    if (o->m->E > 0) snprintf(ep, sizeof ep, " %3d %3d", td_plan_ep(l), td_plan_etp(l));
    printf("%-5s %5d %3d %3d %3d%s %5s %4d %5d  %-14s %-9s %-3s %8.3g %9.3g %-9s %8.3g %-9s %5.1f%%  %s (%.0f%%)\n", tag,
           l->dp, l->tp, l->pp, td_plan_cp(l), ep, zero, l->micro_batch, l->micro_batches, sched_label(l, s, sizeof s), rc_name(l->rc),
           l->sp ? "yes" : "no", e->mem_bytes / 1e9, e->step_s, bs, e->tflops_per_device, bt, 100 * e->mfu,
           td_plan_cost_name(e->dominant), 100 * dominant_s(e) / e->step_s);
}

static void print_costs(const td_plan_out *o, const char *tag, const td_plan_eval *e) {
    int n = n_costs(o);
    printf("  %-7s", tag);
    for (int k = 0; k < n; k++) printf(" %s %.3g%s", td_plan_cost_name(k), e->t[k], k + 1 < n ? "," : "\n");
}

static void print_header(const td_plan_out *o) {
    printf("%-5s %5s %3s %3s %3s%s %5s %4s %5s  %-14s %-9s %-3s %8s %9s %-9s %8s %-9s %6s  %s\n", "rank", "dp", "tp",
           "pp", "cp", o->m->E > 0 ? "  ep etp" : "", "zero", "b", "m", "schedule", "recompute", "sp", "mem GB",
           "step s", "err band", "TFLOP/s", "err band", "MFU", "dominant cost");
}

/* What the error band columns mean, once above the table. */
static void print_validation(const td_plan_out *o) {
    const td_plan_validation *v = o->c->validation;
    if (!v) {
        printf("error band: none (%s)\n", o->no_band ? o->no_band : "no validation applies");
        return;
    }
    char bs[24], bt[24];
    double lo, hi;
    band_tput(v, &lo, &hi);
    printf("error band (the prediction's error in validation %s, (predicted - measured) / measured): step time %s, "
           "TFLOP/s and MFU %s; %s%s%s%s\n",
           v->name, band_str(v->lo, v->hi, bs, sizeof bs), band_str(lo, hi, bt, sizeof bt), v->source,
           strcmp(o->c->validated_on, o->c->name) ? "; measured on " : "",
           strcmp(o->c->validated_on, o->c->name) ? o->c->validated_on : "",
           strcmp(o->c->validated_on, o->c->name) ? ", not this preset's network" : "");
}

void td_plan_print_table(const td_plan_out *o, const td_plan_result *r, int top) {
    print_validation(o);
    print_header(o);
    char tag[16];
    for (int i = 0; i < r->n && i < top; i++) {
        snprintf(tag, sizeof tag, "%d", i + 1);
        print_row(o, tag, &r->plans[i]);
    }
}

void td_plan_print_json(const td_plan_out *o, const td_plan_result *r, int top) {
    const td_plan_validation *v = o->c->validation;
    printf("[");
    for (int i = 0; i < r->n && i < top; i++) {
        const td_plan_eval *e = &r->plans[i];
        const td_plan_layout *l = &e->lay;
        printf("%s\n  {\"dp\": %d, \"tp\": %d, \"pp\": %d, \"cp\": %d, \"zero\": %d, \"dp_shard\": %d, "
               "\"micro_batch\": %d, \"micro_batches\": %d, "
               "\"schedule\": \"%s\", \"virtual_stages\": %d, \"recompute\": \"%s\", \"sequence_parallel\": %s, "
               "\"memory_bytes\": %.0f, \"step_s\": %.6g, \"tflops_per_device\": %.6g, \"mfu\": %.4f, "
               "\"dominant\": \"%s\", \"costs_s\": {",
               i ? "," : "", l->dp, l->tp, l->pp, td_plan_cp(l), l->zero, l->shard, l->micro_batch, l->micro_batches,
               l->sched == TD_PLAN_NO_SCHED ? "none" : td_sched_name((td_sched_kind)l->sched), l->v, rc_name(l->rc),
               l->sp ? "true" : "false", e->mem_bytes, e->step_s, e->tflops_per_device, e->mfu,
               td_plan_cost_name(e->dominant));
        for (int k = 0; k < n_costs(o); k++) printf("%s\"%s\": %.6g", k ? ", " : "", td_plan_cost_name(k), e->t[k]);
        printf("}, ");
        if (o->m->E > 0) printf("\"ep\": %d, \"etp\": %d, \"edp\": %d, ", td_plan_ep(l), td_plan_etp(l), td_plan_edp(l));
        if (v) {
            double lo, hi;
            band_tput(v, &lo, &hi);
            printf("\"validation\": \"%s\", \"validation_source\": \"%s\", \"step_s_error_band\": [%.4f, %.4f], "
                   "\"tflops_error_band\": [%.4f, %.4f], ",
                   v->name, v->source, v->lo, v->hi, lo, hi);
        } else
            printf("\"validation\": null, \"step_s_error_band\": null, \"tflops_error_band\": null, ");
        char cmd[1024];
        const char *why;
        if (td_plan_train_command(o, l, cmd, sizeof cmd, &why) == 0) printf("\"command\": \"%s\"}", cmd);
        else printf("\"command\": null, \"command_note\": \"%s\"}", why);
    }
    printf("\n]\n");
}

int td_plan_train_command(const td_plan_out *o, const td_plan_layout *l, char *buf, size_t n, const char **why) {
    const td_plan_model *m = o->m;
    if (l->rc == TD_PLAN_RC_SELECTIVE)
        return *why = "selective recomputation: trident train recomputes whole blocks (--recompute block) or none", -1;
    /* train's flag ranges (src/train/options.c) and its data's vocabulary */
    if (m->V < 2 || m->V > TD_VOCAB_MAX) return *why = "trident train's vocabulary is 2 .. 2^24", -1;
    if (m->L > TD_MAX_LAYERS || m->C > TD_MAX_EMBD || m->H > TD_MAX_EMBD || m->T > TD_MAX_SEQ ||
        m->F > 4 * TD_MAX_EMBD)
        return *why = "beyond trident train's model limits (layers, width, sequence)", -1;
    if ((long long)o->batch * m->T > INT_MAX || (long long)o->batch * m->H > INT_MAX)
        return *why = "beyond trident train's limit of 2^31 - 1 tokens or attention maps per step", -1;
    int k = snprintf(buf, n,
                     "mpirun -np %d trident train --data synthetic:%d --layers %d --heads %d --embd %d --seq %d "
                     "--batch %d --dp %d --tp %d --pp %d --zero %d --micro-batches %d",
                     l->dp * l->tp * l->pp * td_plan_cp(l), m->V, m->L, m->H, m->C, m->T, o->batch, l->dp, l->tp, l->pp, l->zero,
                     l->micro_batches);
    /* llama's family flags; a preset's name brings its rope theta and
     * scaling, which the planner does not model (the flags beside it are
     * the preset's own sizes or plan's overrides of them, which win) */
    if (m->arch == TD_ARCH_LLAMA && k < (int)n)
        k += snprintf(buf + k, n - (size_t)k, "%s%s --arch llama --kv-heads %d --ffn-hidden %d --tie-embeddings %s",
                      td_plan_model_note(m->name) ? " --model " : "", td_plan_model_note(m->name) ? m->name : "",
                      m->KV, m->F, m->tie == TD_TIE_ON ? "on" : "off");
    if (l->cp > 1 && k < (int)n) k += snprintf(buf + k, n - (size_t)k, " --cp %d", l->cp);
    if (l->shard && k < (int)n) k += snprintf(buf + k, n - (size_t)k, " --dp-shard %d", l->shard);
    if (l->pp > 1 && k < (int)n)
        k += snprintf(buf + k, n - (size_t)k, " --schedule %s", td_sched_name((td_sched_kind)l->sched));
    if (l->sched == TD_SCHED_INTERLEAVED && k < (int)n)
        k += snprintf(buf + k, n - (size_t)k, " --virtual-stages %d", l->v);
    if (l->sp && k < (int)n) k += snprintf(buf + k, n - (size_t)k, " --sequence-parallel");
    if (l->rc == TD_PLAN_RC_FULL && k < (int)n) k += snprintf(buf + k, n - (size_t)k, " --recompute block");
    /* the arithmetic the costs assume: local measured the fp32 engine; the
     * GPU presets count 2-byte mixed precision */
    if (o->c->elem_bytes != 4 && k < (int)n) k += snprintf(buf + k, n - (size_t)k, " --precision bf16");
    if (o->threads > 0 && k < (int)n) k += snprintf(buf + k, n - (size_t)k, " --threads %d", o->threads);
    if (k >= (int)n) return *why = "the command is longer than its buffer", -1;
    return 0;
}

void td_plan_print_command(const td_plan_out *o, const td_plan_result *r) {
    char cmd[1024];
    const char *why = NULL, *first = NULL;
    for (int i = 0; i < r->n; i++) {
        if (td_plan_train_command(o, &r->plans[i].lay, cmd, sizeof cmd, &why) != 0) {
            if (!first) first = why;
            continue;
        }
        if (i == 0) printf("run plan 1 with trident train:\n");
        else printf("plan 1 is not what trident train runs (%s); the fastest plan it runs is plan %d:\n", first, i + 1);
        printf("  %s\n", cmd);
        printf("  (--data synthetic:%d trains on uniform random tokens of the planned vocabulary; for real data give "
               "a token file with --vocab %d%s; add --steps, --out ...)\n",
               o->m->V, o->m->V, o->m->V == 50257 ? ", or --tokenizer gpt2 with a text or GPT-2 token file" : "");
        return;
    }
    printf("no ranked plan is one trident train runs (%s)\n", first ? first : "none ranked");
}

/* Why the ZeRO-3-only plan computes longer than plan 1 per step, by
 * factor: the busiest replica's share of the batch against the average
 * device's, the recomputation that fits its activations (Megatron's FLOP
 * factor: 96 with full recomputation, 72 without; selective recomputes only
 * attention's scores, counted as 72), and what remains (GEMM shapes, the
 * head, elementwise work). */
static void explain_compute(const td_plan_eval *z, const td_plan_eval *best, int batch, int gpus) {
    double ratio = z->t[TD_COST_COMPUTE] / best->t[TD_COST_COMPUTE];
    if (ratio <= 1.05) return;
    double seqs = (double)z->lay.micro_batch * z->lay.micro_batches, avg = (double)batch / gpus;
    double rc = (z->lay.rc == TD_PLAN_RC_FULL ? 96.0 : 72.0) / (best->lay.rc == TD_PLAN_RC_FULL ? 96.0 : 72.0);
    printf("its compute is %.2fx plan 1's: the busiest replica runs %.0f sequences where the average device's "
           "share is %.3g (%.2fx); recomputation %s against plan 1's %s (%.2fx); the rest %.2fx\n",
           ratio, seqs, avg, seqs / avg, rc_name(z->lay.rc), rc_name(best->lay.rc), rc, ratio / (seqs / avg * rc));
}

/* "1.62x plan 1's step (62% longer)" or "0.76x ... (24% shorter ...)":
 * right in both directions. A faster ZeRO-3-only plan is one the ranking
 * left out: an uneven batch split (dp not dividing it), or fixed choices. */
static void compare_step(const td_plan_out *o, const td_plan_eval *z, const td_plan_eval *best) {
    double ratio = z->step_s / best->step_s;
    printf("its step takes %.2fx plan 1's ", ratio);
    if (ratio > 1.005) printf("(%.0f%% longer)", 100 * (ratio - 1));
    else if (ratio < 0.995) {
        printf("(%.0f%% shorter; it is not among the ranked plans: %s)", 100 * (1 - ratio),
               o->batch % z->lay.dp ? "its dp does not divide the global batch, which the ranked plans need"
               : o->fixed            ? "the fixed choices exclude it"
                                     : "the ranking has it elsewhere");
    } else printf("(as long)");
}

void td_plan_print_zero3(const td_plan_out *o, const td_plan_eval *best) {
    td_plan_fixed z;
    td_plan_fixed_init(&z);
    z.zero3_only = 1;
    td_plan_result zr;
    td_plan_search(o->m, o->c, o->batch, &z, &zr);
    if (zr.n == 0) {
        printf("ZeRO-3 only (tp = pp = cp = 1): nothing fits (smallest needs %.1f GB)\n", zr.smallest_too_big / 1e9);
        td_plan_result_free(&zr);
        return;
    }
    const td_plan_eval *e = &zr.plans[0];
    int gpus = o->c->gpus;
    printf("best ZeRO-3-only plan (tp = pp = cp = 1)%s:\n",
           o->batch % gpus ? ", the busiest replica's share of an uneven batch" : "");
    print_row(o, "z3", e);
    compare_step(o, e, best);
    printf("; dominant cost %s (%.3g s). Seconds per step by cost (dp comm: the part not hidden behind compute):\n",
           td_plan_cost_name(e->dominant), dominant_s(e));
    print_costs(o, "plan 1", best);
    print_costs(o, "z3", e);
    printf("ZeRO-3's collectives take %.3g s per step (%.3g s not hidden behind compute); plan 1's dp "
           "collectives %.3g s, its tp collectives %.3g s\n",
           e->dp_traffic_s, e->t[TD_COST_DP], best->dp_traffic_s, best->t[TD_COST_TP]);
    explain_compute(e, best, o->batch, gpus);
    td_plan_result_free(&zr);
}

