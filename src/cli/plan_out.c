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
    /* trident train's experts: replicated over tp, shared out over dp x cp */
    if (m->E > 0 && td_plan_etp(l) > 1) return *why = "experts split over tp (etp > 1): trident train replicates them", -1;
    if (m->E > 0 && (l->dp * td_plan_cp(l)) % td_plan_ep(l))
        return *why = "ep carved out of tp: trident train shares the experts out over dp x cp only", -1;
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
    if (m->E > 0 && k < (int)n)
        k += snprintf(buf + k, n - (size_t)k, " --moe-experts %d --moe-top-k %d --moe-ffn-hidden %d --moe-every %d "
                      "--moe-shared-experts %d --ep %d", m->E, m->K, m->moe_ffn, m->moe_every, m->S, td_plan_ep(l));
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

/* The fastest plan of a search under the fixed choices f with ep > 1
 * (want_ep) or ep = 1, into e: 1, or 0 with the smallest memory that did
 * not fit (0: none valid) in *smallest. */
static int best_of(const td_plan_out *o, const td_plan_fixed *f, int want_ep, td_plan_eval *e, double *smallest) {
    td_plan_result r;
    td_plan_search(o->m, o->c, o->batch, f, &r);
    int found = 0;
    for (int i = 0; i < r.n && !found; i++)
        if ((td_plan_ep(&r.plans[i].lay) > 1) == want_ep) *e = r.plans[i], found = 1;
    *smallest = r.too_big ? r.smallest_too_big : 0;
    td_plan_result_free(&r);
    return found;
}

/* Why this plan is not the published run's (NULL: it is): the preset's
 * model unchanged, its cluster preset's figures, devices and batch. */
static const char *other_run(const td_plan_out *o, const td_plan_published *p) {
    td_plan_model a, b = *o->m;
    if (td_plan_model_preset(p->model, &a) != 0) return "no such preset";
    memset(a.name, 0, sizeof a.name), memset(b.name, 0, sizeof b.name);
    if (memcmp(&a, &b, sizeof a) != 0) return "the model's sizes differ from the preset's";
    if (strcmp(o->c->name, p->cluster) != 0 || o->overridden) return "another cluster, or the preset's figures overridden";
    if (o->c->gpus != p->gpus) return "another number of devices";
    if (o->batch != p->global_batch) return "another global batch";
    return NULL;
}

static void print_memory(const char *tag, const td_plan_eval *e) {
    printf("  %-7s memory %.3g GB: model states %.3g, activations %.3g, buffers %.3g\n", tag, e->mem_bytes / 1e9,
           e->mem_states / 1e9, e->mem_acts / 1e9, e->mem_comm / 1e9);
}

void td_plan_print_moe(const td_plan_out *o, const td_plan_fixed *fix, const td_plan_published *pub, int n_pub) {
    td_plan_fixed f = *fix;
    td_plan_eval with, without, pe;
    double small_with, small_without;
    if (f.ep == 1) f.ep = 0; /* --ep 1: the comparison still looks for ep > 1 */
    int has_ep = best_of(o, &f, 1, &with, &small_with);
    f = *fix;
    f.ep = 1;
    int has_no = best_of(o, &f, 0, &without, &small_without);
    const char *other = n_pub ? other_run(o, pub) : "";
    int has_pub = 0;
    char why[160] = "";
    if (n_pub && !other) {
        td_plan_layout l = pub->lay;
        if (td_plan_check(o->m, o->c, o->batch, 0, &l, why, sizeof why) == 0) {
            td_plan_evaluate(o->m, o->c, o->batch, &l, &pe);
            has_pub = 1;
        }
    }
    printf("expert parallelism: the best layout with ep > 1 (ep), the best with ep = 1 (ep=1)%s; predicted, not "
           "measured%s:\n",
           has_pub ? " and the published run's layout (pub)" : "", fix->ep ? " (--ep set aside for the comparison)" : "");
    print_header(o);
    if (has_ep) print_row(o, "ep", &with);
    else printf("ep    none fits with ep > 1 (the smallest needs %.1f GB)\n", small_with / 1e9);
    if (has_no) print_row(o, "ep=1", &without);
    else printf("ep=1  none fits with ep = 1 (the smallest needs %.1f GB)\n", small_without / 1e9);
    if (has_pub) print_row(o, "pub", &pe);
    printf("Seconds per step by cost, and memory per device:\n");
    if (has_ep) print_costs(o, "ep", &with), print_memory("ep", &with);
    if (has_no) print_costs(o, "ep=1", &without), print_memory("ep=1", &without);
    if (has_pub) print_costs(o, "pub", &pe), print_memory("pub", &pe);
    if (has_ep && has_no) {
        double r = with.step_s / without.step_s;
        printf("the ep layout's step takes %.2fx the ep = 1 layout's (%.0f%% %s); its all-to-all %.3g s per step\n", r,
               100 * fabs(r - 1), r <= 1 ? "shorter" : "longer", with.t[TD_COST_EP]);
    }
    for (int i = 0; i < n_pub; i++) {
        printf("published %s: %.0f TFLOP/s per GPU; %s\n", pub[i].name, pub[i].tflops, pub[i].source);
        if (has_pub)
            printf("  predicted / published: %.2f for its layout (pub, %.0f TFLOP/s per GPU)%s", pe.tflops_per_device /
                   pub[i].tflops, pe.tflops_per_device, has_ep ? "" : "\n");
        else
            printf("  not predicted here: %s%s", other ? other : why, has_ep ? "" : "\n");
        if (has_ep)
            printf("; %.2f for the ep layout (%.0f TFLOP/s per GPU)\n", with.tflops_per_device / pub[i].tflops,
                   with.tflops_per_device);
    }
}
