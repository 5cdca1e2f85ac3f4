/* Rows of the one combination table (compat.c, compat.h) for what a
 * device other than cpu does not run yet and for the training recipes (Muon,
 * batch ramp-up): compat.c had grown past 700 lines. Pure and MPI-free like
 * compat.c, and compiled into trident_model beside it. */
#include <stdio.h>

#include "compat_internal.h"
#include "trident/optim.h"
#include "trident/schedule.h"

static const char *S(const char *s) { return s ? s : "?"; }

#define OK(name) int ok_##name(const td_compat_cfg *c)
#define SAY(name) void say_##name(const td_compat_cfg *c, char *buf, size_t n)
#define BRIEF(name) void brief_##name(const td_compat_cfg *c, char *buf, size_t n)

/* ---- what a device other than cpu does not run yet (issue 39) ---------- */

/* top-k selects, packs and sums on the host over host buffers (the comm
 * layer's shared windows), reading the step's gradients and AdamW state in
 * place: on a device those are not host memory */
OK(topk_device) { return c->topk_ratio == 0 || c->device <= 0; }
SAY(topk_device) {
    snprintf(buf, n,
             "--grad-compress %s does not combine with --device %s yet: top-k selects, packs and sums "
             "the gradients on the host; use --device cpu, or --grad-compress none (--grad-reduce-dtype "
             "bf16 halves the payload on any device)",
             S(c->grad_compress_text), S(c->device_name));
}

/* ---- --optimizer muon (issue 42) ----------------------------------
 * Muon orthogonalizes whole logical matrices: src/parallel/muon_shard.c
 * gathers each one to an owner over ZeRO's shard group (edp for the
 * experts' matrices), over tp, or both chained (tp blocks each in ZeRO
 * shards; an expert is whole on every tp rank, so never chained). Not
 * yet: the modes whose state lives on a root or on servers, and top-k
 * (its reduction carries AdamW updates, not gradients). Every precision
 * runs: Newton-Schulz iterates in bf16 in bf16 runs (the speedrun's), in
 * fp32 in fp32 and fp16 runs (cpu.c's rows). */
static const char *muon_breaks(const td_compat_cfg *c) {
    if (c->dp_mode != TD_DP_ALLREDUCE) return "a --dp-mode other than allreduce";
    if (c->topk_ratio > 0) return "--grad-compress topk";
    return NULL;
}
static const char *muon_why(const td_compat_cfg *c) {
    if (c->dp_mode != TD_DP_ALLREDUCE)
        return "its gradients and state live on a root or on servers, for which the owners' exchange is not "
               "written; use --dp-mode allreduce (with --zero for sharded state)";
    return "its reduction carries AdamW updates, not the gradients Muon orthogonalizes; use --grad-compress none";
}
OK(muon_layout) { return c->optimizer != TD_OPT_MUON || muon_breaks(c) == NULL; }
SAY(muon_layout) {
    snprintf(buf, n, "--optimizer muon does not combine with %s yet: %s, or --optimizer adamw", S(muon_breaks(c)),
             muon_why(c));
}
/* the CUDA backend has none of Muon's ops (muon, and the sharded step's
 * muon_momentum, muon_ns, muon_apply); the guard device runs every layout,
 * its exchange staged through the comm layer's pool (td_muon_staging) */
OK(muon_device) { return c->optimizer != TD_OPT_MUON || c->device != 2; }
SAY(muon_device) {
    snprintf(buf, n,
             "--optimizer muon does not combine with --device %s yet: the CUDA backend has no Muon kernels "
             "(Newton-Schulz, the momentum, the update); use --device cpu or guard, or --optimizer adamw",
             S(c->device_name));
}

/* ---- --batch-rampup (issue 42) --------------------------------------- */

/* the step's micro-batch count varies with the batch: a parameter
 * server's workers step on their own (a pipeline runs the schedule of each
 * count: td_pp_set_micro, and the rampup-interleaved row; a mixture of
 * experts' aux losses are per micro-batch, averaged by the step's targets) */
OK(rampup_layout) { return c->rampup_start <= 0 || c->dp_mode != TD_DP_PS; }
SAY(rampup_layout) {
    snprintf(buf, n,
             "--batch-rampup %s does not combine with --dp-mode ps yet: the micro-batches per step change with the "
             "batch, and parameter-server workers step on their own; drop --batch-rampup, or use --dp-mode allreduce",
             S(c->rampup_text));
}

/* every size START + k INCREMENT splits over dp replicas into micro-batches
 * of the full batch's rows (--batch / (dp x --micro-batches)), whose memory
 * is the one planned */
static int rampup_unit(const td_compat_cfg *c) {
    int dp = c->dp > 0 ? c->dp : 1, mb = c->micro_batches > 0 ? c->micro_batches : 1;
    long long split = (long long)dp * mb;
    return c->batch > 0 && c->batch % split == 0 ? dp * (int)(c->batch / split) : 0;
}
OK(rampup_divides) {
    int u = rampup_unit(c);
    return c->rampup_start <= 0 || u == 0 || (c->rampup_start % u == 0 && c->rampup_increment % u == 0);
}
SAY(rampup_divides) {
    int u = rampup_unit(c), dp = c->dp > 0 ? c->dp : 1;
    snprintf(buf, n,
             "--batch-rampup %s: START %d and INCREMENT %d must be multiples of dp %d x %d sequences per "
             "micro-batch (--batch %d / (dp x --micro-batches %d)) = %d, so that every size is whole micro-batches",
             S(c->rampup_text), c->rampup_start, c->rampup_increment, dp, u / dp, c->batch, c->micro_batches, u);
}
BRIEF(rampup_divides) {
    snprintf(buf, n, "batch ramp-up sizes are not multiples of dp x micro-batch = %d", rampup_unit(c));
}

/* the interleaved schedule's groups of pp micro-batches (interleaved-micro)
 * at every size: each size's micro-batches per replica a multiple of pp */
OK(rampup_interleaved) {
    int u = rampup_unit(c);
    if (c->rampup_start <= 0 || c->schedule != TD_SCHED_INTERLEAVED || c->pp <= 1 || u == 0) return 1;
    long long step = (long long)u * c->pp;
    return c->rampup_start % step == 0 && c->rampup_increment % step == 0;
}
SAY(rampup_interleaved) {
    int u = rampup_unit(c), dp = c->dp > 0 ? c->dp : 1;
    snprintf(buf, n,
             "--batch-rampup %s with --schedule interleaved: START %d and INCREMENT %d must be multiples of dp %d x "
             "%d sequences per micro-batch x --pp %d = %d, so that every size's micro-batches per replica are a "
             "multiple of pp, as the interleaved schedule needs; or use --schedule 1f1b",
             S(c->rampup_text), c->rampup_start, c->rampup_increment, dp, u / dp, c->pp, u * c->pp);
}
BRIEF(rampup_interleaved) {
    snprintf(buf, n, "batch ramp-up sizes are not multiples of dp x micro-batch x pp = %d", rampup_unit(c) * c->pp);
}

/* ---- --doc-mask (issue 42) ------------------------------------------- */

/* the positions restart at the document starts --doc-mask computes */
OK(doc_positions_mask) { return !c->doc_pos_reset || c->doc_mask; }
SAY(doc_positions_mask) {
    (void)c;
    snprintf(buf, n, "--doc-positions reset restarts positions at the document starts of --doc-mask; add --doc-mask "
                     "(or drop --doc-positions reset)");
}

