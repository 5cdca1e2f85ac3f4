/* The one table of combination rules (compat.h). Pure and MPI-free: this
 * file sits under src/parallel/ but CMakeLists.txt compiles it into
 * trident_model, the lowest library the planner, the schedules, the model
 * and option parsing all link, so none of them depends on comm to reach it.
 *
 * A row is an id, the sites that consult it, a predicate (1: the config
 * keeps the rule) and its error text, word for word the message the check
 * printed before the table existed. Rows of one site keep that site's old
 * order. A new "does not combine" / "needs --" rule belongs here, never in
 * a TD_CHECK elsewhere (tests/lint/check_rules.py fails on one). */
#include "trident/compat.h"

#include <stdio.h>
#include <string.h>

#include "trident/base.h"
#include "trident/optim.h"
#include "trident/schedule.h"

const char *td_dp_mode_name(td_dp_mode m) {
    return m == TD_DP_ALLREDUCE          ? "allreduce"
           : m == TD_DP_REDUCE_BROADCAST ? "reduce-broadcast"
                                         : "ps";
}

void td_compat_cfg_init(td_compat_cfg *c) {
    memset(c, 0, sizeof *c);
    c->dp = c->tp = c->pp = c->cp = 1;
    c->ep = c->etp = 1;
    c->virtual_stages = c->micro_batches = 1;
    c->dp_mode = TD_DP_ALLREDUCE;
    c->schedule = -1;
    c->device_name = "cpu";
}

static const char *S(const char *s) { return s ? s : "?"; }

#define OK(name) static int ok_##name(const td_compat_cfg *c)
#define SAY(name) static void say_##name(const td_compat_cfg *c, char *buf, size_t n)
#define BRIEF(name) static void brief_##name(const td_compat_cfg *c, char *buf, size_t n)

/* the rows of compat_recipes.c: a device's and the training recipes' */
#include "compat_internal.h"

/* ---- the flags alone (td_train_opts_check) ------------------------------ */

/* the calibrated profile measured fp32 at one layout family: --auto picks
 * the layout itself */
OK(auto_fixed) {
    return !c->autoplan || (c->dp == 0 && c->tp == 1 && c->pp == 1 && c->zero == 0 &&
                            c->micro_batches == 1 && !c->seq_parallel && c->precision == 0);
}
SAY(auto_fixed) {
    snprintf(
        buf, n,
        "--auto picks --dp --tp --pp --zero --micro-batches --sequence-parallel itself for fp32 "
        "(the calibrated profile's arithmetic); drop them and --precision");
}

OK(save_every_out) { return c->save_every == 0 || c->out; }
SAY(save_every_out) {
    snprintf(buf, n, "--save-every %d needs --out DIR to save into", c->save_every);
}

OK(keep_out) { return c->keep == 0 || c->out; }
SAY(keep_out) { snprintf(buf, n, "--keep %d needs --out DIR", c->keep); }

OK(stop_after_out) { return c->stop_after == 0 || c->out; }
SAY(stop_after_out) {
    snprintf(buf, n, "--stop-after %d needs --out DIR to save the checkpoint into", c->stop_after);
}

OK(overwrite_out) { return !c->overwrite || c->out; }
SAY(overwrite_out) {
    snprintf(buf, n, "--overwrite needs --out DIR (it replaces DIR's checkpoints)");
}

OK(overwrite_resume) { return !c->overwrite || !c->resume; }
SAY(overwrite_resume) {
    snprintf(buf, n,
             "--overwrite does not combine with --resume %s: a resumed run continues "
             "--out's checkpoints, --overwrite would remove them; drop one of the two",
             S(c->resume));
}

OK(resume_latest_out) { return !c->resume || strcmp(c->resume, "latest") != 0 || c->out; }
SAY(resume_latest_out) {
    snprintf(buf, n, "--resume latest needs --out DIR (latest is its newest checkpoint)");
}

/* zb-h1's weight half (W) reads a block's saved tensors long after its
 * input half: recomputing them for W is not done */
OK(recompute_zbh1) { return c->pp == 1 || c->recompute == 0 || c->schedule != TD_SCHED_ZBH1; }
SAY(recompute_zbh1) {
    snprintf(
        buf, n,
        "--recompute %s does not combine with --schedule zb-h1 (its weight-gradient half needs "
        "every block's saved tensors); use gpipe, 1f1b or interleaved, or --recompute none",
        S(c->recompute_name));
}

/* each holder of a replicated tensor (tp-replicated rows, the tied
 * embedding on the first and last stage) would select its own top-k in
 * buckets that differ per rank, and the copies would drift apart */
OK(topk_tp_pp) { return c->topk_ratio == 0 || (c->tp == 1 && c->pp == 1); }
SAY(topk_tp_pp) {
    snprintf(
        buf, n,
        "--grad-compress %s does not combine with --tp %d --pp %d yet: every holder of a "
        "replicated "
        "tensor (tp-replicated rows, the tied embedding on the first and last stage) would select "
        "its own top-k and the copies would drift apart; use tp = pp = 1, or --grad-compress none "
        "(--grad-reduce-dtype bf16 halves the payload in any layout)",
        S(c->grad_compress_text), c->tp, c->pp);
}

/* ---- --auto (td_auto_choose, after the profile is loaded) --------------- */

OK(auto_dp_mode) { return !c->autoplan || c->dp_mode == TD_DP_ALLREDUCE; }
SAY(auto_dp_mode) {
    snprintf(buf, n, "--auto plans --dp-mode allreduce layouts; drop --dp-mode %s",
             S(c->dp_mode_text));
}

/* ---- the run's start (td_train_run) and td_dp_create -------------------- */

OK(ps_servers_mode) { return c->dp_mode == TD_DP_PS || c->ps_servers == 0; }
SAY(ps_servers_mode) { snprintf(buf, n, "--ps-servers needs --dp-mode ps"); }

OK(ps_needs_servers) { return c->dp_mode != TD_DP_PS || c->ps_servers > 0; }
SAY(ps_needs_servers) { snprintf(buf, n, "--dp-mode ps needs --ps-servers S >= 1"); }

OK(ps_tp) { return c->dp_mode != TD_DP_PS || c->tp == 1; }
SAY(ps_tp) {
    snprintf(buf, n,
             "--dp-mode ps is data-parallel only and does not combine with --tp %d; use --dp-mode "
             "allreduce or reduce-broadcast with tensor parallelism",
             c->tp);
}

/* ZeRO-2 and 3 reduce-scatter each micro-batch's gradients, which a
 * pipeline schedule interleaves across stages */
OK(zero_pp) { return c->pp == 1 || c->zero <= 1; }
SAY(zero_pp) {
    snprintf(buf, n,
             "--zero %d with --pp %d: ZeRO-2 and ZeRO-3 shard gradients (and parameters) per "
             "micro-batch, which a pipeline schedule interleaves; use --zero 0 or 1 with pipeline "
             "parallelism",
             c->zero, c->pp);
}
BRIEF(zero_pp) {
    snprintf(buf, n, "zero %d shards per micro-batch, which a pipeline interleaves", c->zero);
}

OK(ps_pp) { return c->pp == 1 || c->dp_mode != TD_DP_PS; }
SAY(ps_pp) {
    snprintf(buf, n,
             "--dp-mode ps does not combine with --pp %d; use --dp-mode allreduce or "
             "reduce-broadcast with pipeline parallelism",
             c->pp);
}

OK(zero_mode) { return c->zero == 0 || c->dp_mode == TD_DP_ALLREDUCE; }
SAY(zero_mode) {
    snprintf(buf, n,
             "--zero %d needs --dp-mode allreduce (ZeRO shards over the all-reduce group; %s has "
             "its own placement)",
             c->zero, td_dp_mode_name((td_dp_mode)c->dp_mode));
}

OK(loss_scale_ps) { return c->loss_scale_mode == 0 || c->dp_mode != TD_DP_PS; }
SAY(loss_scale_ps) {
    snprintf(buf, n,
             "--loss-scale %s (%s) does not combine with --dp-mode ps: its servers apply each "
             "worker's gradients on their own, so no step can be skipped or unscaled on every rank "
             "together; use --dp-mode allreduce or reduce-broadcast, or --loss-scale none",
             S(c->loss_scale_text), S(c->loss_scale_name));
}

OK(loss_scale_topk_ef) { return c->loss_scale_mode == 0 || c->topk_ratio == 0 || c->topk_no_ef; }
SAY(loss_scale_topk_ef) {
    snprintf(
        buf, n,
        "--loss-scale %s (%s) does not combine with --grad-compress %s: its error-feedback "
        "residual would carry gradients of another scale (and a skipped step's infinities) into "
        "later steps; use --grad-compress topk:R:noef, or --loss-scale none",
        S(c->loss_scale_text), S(c->loss_scale_name), S(c->grad_compress_text));
}

OK(ps_checkpoint) { return c->dp_mode != TD_DP_PS || (!c->resume && !c->stop_after); }
SAY(ps_checkpoint) {
    snprintf(buf, n,
             "--%s does not combine with --dp-mode ps: its servers apply each worker's gradients "
             "in their "
             "own loop, which a checkpoint cannot resume exactly; use --dp-mode allreduce or "
             "reduce-broadcast",
             c->resume ? "resume" : "stop-after");
}

/* ---- the gradient payload (td_dp_payload_check, td_dp_create) ----------- */

OK(topk_bf16) { return !(c->topk_ratio > 0 && c->grad_bf16); }
SAY(topk_bf16) {
    snprintf(buf, n,
             "--grad-compress topk sends fp32 values; use it with --grad-reduce-dtype fp32");
}

static const char *payload_flag(const td_compat_cfg *c) {
    return c->topk_ratio > 0 ? "--grad-compress topk" : "--grad-reduce-dtype bf16";
}
OK(payload_mode) { return !(c->topk_ratio > 0 || c->grad_bf16) || c->dp_mode == TD_DP_ALLREDUCE; }
SAY(payload_mode) {
    snprintf(buf, n, "%s needs --dp-mode allreduce (%s reduces gradients its own way)",
             payload_flag(c), td_dp_mode_name((td_dp_mode)c->dp_mode));
}

/* top-k's residual lives per replicated unit: ZeRO-1 keeps whole
 * gradients, 2 and 3 do not; bf16 rounds the reduce-scatter's sums */
OK(payload_zero) {
    int topk = c->topk_ratio > 0;
    return !(topk || c->grad_bf16) || c->zero <= (topk ? 1 : 0);
}
SAY(payload_zero) {
    int topk = c->topk_ratio > 0;
    snprintf(buf, n, "%s works with --zero %s, not --zero %d", payload_flag(c),
             topk ? "0 or 1" : "0", c->zero);
}

/* ---- the schedule (td_schedule_build) ----------------------------------- */

OK(chunks_need_interleaved) {
    return c->schedule == TD_SCHED_INTERLEAVED || c->virtual_stages == 1;
}
SAY(chunks_need_interleaved) {
    snprintf(buf, n, "--virtual-stages %d needs --schedule interleaved (%s runs 1 chunk per stage)",
             c->virtual_stages, S(c->schedule_name));
}
BRIEF(chunks_need_interleaved) {
    snprintf(buf, n, "chunks per stage other than 1 need the interleaved schedule");
}

OK(interleaved_chunks) { return c->schedule != TD_SCHED_INTERLEAVED || c->virtual_stages >= 2; }
SAY(interleaved_chunks) {
    snprintf(buf, n,
             "--virtual-stages %d: the interleaved schedule needs at least 2 chunks per stage",
             c->virtual_stages);
}
BRIEF(interleaved_chunks) { snprintf(buf, n, "interleaved needs 2 or more chunks per stage"); }

/* its groups of pp micro-batches go round the stages once per chunk */
OK(interleaved_micro) {
    return c->schedule != TD_SCHED_INTERLEAVED || c->pp < 1 || c->micro_batches % c->pp == 0;
}
SAY(interleaved_micro) {
    snprintf(
        buf, n,
        "--micro-batches %d is not a multiple of --pp %d, which the interleaved schedule needs",
        c->micro_batches, c->pp);
}
BRIEF(interleaved_micro) {
    snprintf(buf, n, "interleaved needs micro-batches a multiple of pp %d", c->pp);
}

/* every slot of the interleaved schedule holds one chunk of the model */
OK(interleaved_equal_chunks) { return c->virtual_stages == 1 || !c->unequal_chunks; }
SAY(interleaved_equal_chunks) {
    snprintf(buf, n, "--pp-partition %s: the interleaved schedule needs equal chunks",
             S(c->pp_partition_text));
}

/* ---- the model's family (td_gpt_config_finish) ---------------------------- */

/* GPT-2 as published: grouped-query attention, the MLP's width, RMSNorm and
 * rotary positions belong to the Llama family */
OK(arch_flags) { return !c->llama_flag_text; }
SAY(arch_flags) {
    snprintf(buf, n, "%s needs --arch llama (gpt2 has H kv heads, a 4C GELU MLP, LayerNorm, learned positions and a tied head)",
             S(c->llama_flag_text));
}

/* ---- the model's shape (td_gpt_check_tp, td_gpt_dims_of) ---------------- */

OK(sp_tp) { return !c->seq_parallel || c->tp > 1; }
SAY(sp_tp) {
    snprintf(buf, n,
             "--sequence-parallel needs --tp 2 or more (it splits the sequence over the tp ranks)");
}
BRIEF(sp_tp) { snprintf(buf, n, "sequence parallelism needs tp >= 2"); }

/* under cp the tp ranks split each cp rank's seq / cp rows */
OK(sp_seq) { return !c->seq_parallel || c->tp < 1 || c->cp < 1 || (c->seq / c->cp) % c->tp == 0; }
SAY(sp_seq) {
    snprintf(buf, n,
             "--sequence-parallel: --tp %d does not divide --seq %d; use a sequence length that "
             "is a multiple of %d",
             c->tp, c->seq, c->tp);
}
BRIEF(sp_seq) {
    snprintf(buf, n,
             "sequence parallelism splits the sequence %d over tp %d, which does not divide it",
             c->seq, c->tp);
}

/* the tensor-parallel collectives move reduced-precision rows as fp32
 * pairs (model/internal.h: td_m_gather_rows) */
OK(lowp_tp_rows) {
    return c->precision == 0 || c->tp == 1 || ((size_t)c->rows * (size_t)c->embd) % 2 == 0;
}
SAY(lowp_tp_rows) {
    snprintf(buf, n,
             "--precision %s with --tp needs an even number of elements per rank's rows "
             "(--seq x --channels); got %d x %d",
             S(c->precision_name), c->rows, c->embd);
}

/* ---- context parallelism (cp.h) ------------------------------------------- */

/* the load-balanced causal split: 2 cp chunks of equal length, rank r
 * holding chunks r and 2cp-1-r */
OK(cp_seq) { return c->cp <= 1 || c->seq % (2 * c->cp) == 0; }
SAY(cp_seq) {
    snprintf(buf, n,
             "--cp %d splits each sequence into %d equal chunks (2 per rank, for causal load "
             "balance), which --seq %d does not divide; use a sequence length that is a multiple "
             "of %d",
             c->cp, 2 * c->cp, c->seq, 2 * c->cp);
}
BRIEF(cp_seq) {
    snprintf(buf, n, "cp %d needs the sequence %d to be a multiple of %d", c->cp, c->seq, 2 * c->cp);
}

/* the servers shard over dp workers that each hold whole sequences */
OK(cp_ps) { return c->cp <= 1 || c->dp_mode != TD_DP_PS; }
SAY(cp_ps) {
    snprintf(buf, n,
             "--dp-mode ps does not combine with --cp %d: its servers expect every worker's "
             "gradient of whole sequences; use --dp-mode allreduce (or reduce-broadcast) with "
             "context parallelism",
             c->cp);
}

/* top-k selects on each rank's own update, an estimate of the whole batch's;
 * a cp rank's gradient is a partial sum over its chunks, not an estimate */
OK(cp_topk) { return c->cp <= 1 || c->topk_ratio == 0; }
SAY(cp_topk) {
    snprintf(buf, n,
             "--grad-compress %s does not combine with --cp %d: a context-parallel rank's gradient "
             "covers only its chunks of each sequence, so its own top-k is not an estimate of the "
             "step's; use --grad-compress none (--grad-reduce-dtype bf16 halves the payload)",
             S(c->grad_compress_text), c->cp);
}

/* ---- hybrid sharding (--dp-shard) ------------------------------------------ */

/* the shards split ZeRO's state; without ZeRO there is nothing to split */
OK(dp_shard_zero) { return c->dp_shard == 0 || c->zero >= 1; }
SAY(dp_shard_zero) {
    snprintf(buf, n,
             "--dp-shard %d splits ZeRO's state within shards of %d ranks; it needs --zero 1, 2 "
             "or 3",
             c->dp_shard, c->dp_shard);
}
BRIEF(dp_shard_zero) { snprintf(buf, n, "hybrid sharding needs ZeRO 1-3"); }

/* the replicas sum the shards' fp32 gradients; the payloads reduce their
 * own way over the whole group */
OK(dp_shard_payload) { return c->dp_shard == 0 || (c->topk_ratio == 0 && !c->grad_bf16); }
SAY(dp_shard_payload) {
    snprintf(buf, n,
             "--dp-shard %d reduces fp32 gradients (within each shard, then over the replicas); "
             "%s does not combine with it",
             c->dp_shard, payload_flag(c));
}

OK(dp_shard_divides) {
    return c->dp_shard == 0 || (c->dp >= 1 && c->cp >= 1 && (c->dp * c->cp) % c->dp_shard == 0);
}
SAY(dp_shard_divides) {
    snprintf(buf, n,
             "--dp-shard %d does not divide the %d ranks of dp x cp (dp %d, cp %d) into equal "
             "shards; use a divisor of %d",
             c->dp_shard, c->dp * c->cp, c->dp, c->cp, c->dp * c->cp);
}
BRIEF(dp_shard_divides) {
    snprintf(buf, n, "shards of %d do not divide dp x cp %d", c->dp_shard, c->dp * c->cp);
}

/* ---- expert parallelism (--ep) ---------------------------------------------- */

/* the ranks of an ep run hold different experts at the same offsets: every
 * strategy sums and places the expert stacks over edp apart from the rest */
OK(ep_dp_shard) { return c->ep <= 1 || c->dp_shard == 0; }
SAY(ep_dp_shard) {
    snprintf(buf, n,
             "--dp-shard %d does not combine with --ep %d yet: ZeRO shards the expert stacks over the "
             "ranks holding the same experts, which cross the shards; drop --dp-shard",
             c->dp_shard, c->ep);
}

/* ---- the data (td_preflight) -------------------------------------------- */

/* the sample at the end encodes the prompt with the run's tokenizer; token
 * ids come with none */
OK(sample_prompt_ids) { return !c->sample_prompt || !c->data_token_ids; }
SAY(sample_prompt_ids) {
    snprintf(buf, n,
             "--sample-prompt needs a text tokenizer, but --data %s holds token ids; "
             "leave --sample-prompt out (the sample then starts from token 0)",
             S(c->data_text));
}

/* ---- mixture of experts (the planner; the trainer's flags to come) --------- */

/* --moe-top-k, --moe-every, --moe-ffn-hidden, --moe-shared-experts shape
 * the experts a dense model does not have */
OK(moe_flags) { return !c->moe_flag_text; }
SAY(moe_flags) {
    snprintf(buf, n, "%s needs --moe-experts E (it shapes the experts of a mixture-of-experts model; a dense "
             "model has none)", S(c->moe_flag_text));
}

/* ep and etp split experts; a dense model has none to split */
OK(ep_moe) { return c->experts > 0 || (c->ep <= 1 && c->etp <= 1); }
SAY(ep_moe) {
    if (c->ep > 1)
        snprintf(buf, n, "--ep %d needs --moe-experts E (expert parallelism splits the experts of a "
                 "mixture-of-experts model; a dense model has none)", c->ep);
    else
        snprintf(buf, n, "--moe-etp %d needs --moe-experts E (it splits each expert of a mixture-of-experts "
                 "model; a dense model has none)", c->etp);
}
BRIEF(ep_moe) { snprintf(buf, n, "ep %d and etp %d need a mixture-of-experts model", c->ep, c->etp); }

/* each ep rank holds an equal share of the experts */
OK(ep_experts) { return c->experts <= 0 || c->ep < 1 || c->experts % c->ep == 0; }
SAY(ep_experts) {
    snprintf(buf, n, "--ep %d does not divide --moe-experts %d: each ep rank holds an equal share of the "
             "experts; use a divisor of %d", c->ep, c->experts, c->experts);
}
BRIEF(ep_experts) { snprintf(buf, n, "ep %d does not divide the %d experts", c->ep, c->experts); }

/* the experts' tensor-parallel groups are groups of the dense part's
 * (Megatron-core's parallel folding) */
OK(etp_tp) { return c->etp < 1 || c->tp < 1 || c->tp % c->etp == 0; }
SAY(etp_tp) {
    snprintf(buf, n, "--moe-etp %d does not divide --tp %d: the experts' tensor-parallel groups fold into the "
             "dense part's; use a divisor of %d", c->etp, c->tp, c->tp);
}
BRIEF(etp_tp) { snprintf(buf, n, "etp %d does not divide tp %d", c->etp, c->tp); }

/* etp x ep x edp is the dense part's tp x cp x dp, folded */
OK(ep_grid) {
    if (c->experts <= 0 || c->etp < 1 || c->ep < 1 || c->tp < 1 || c->tp % c->etp) return 1;
    long fold = (long)c->tp * c->cp * c->dp / c->etp;
    return fold % c->ep == 0;
}
SAY(ep_grid) {
    snprintf(buf, n, "--ep %d does not divide tp x cp x dp / etp = %d x %d x %d / %d: the experts' grid "
             "etp x ep x edp folds into the dense part's tp x cp x dp", c->ep, c->tp, c->cp, c->dp, c->etp);
}
BRIEF(ep_grid) {
    snprintf(buf, n, "ep %d does not divide tp x cp x dp / etp (%d x %d x %d / %d)", c->ep, c->tp, c->cp, c->dp,
             c->etp);
}

/* each tp rank routes and dispatches its own share of the sequence: the
 * block's input is sequence-parallel (Megatron-core refuses expert with
 * tensor parallelism without it). The planner's cost model assumes it;
 * trident train's experts (replicated over tp) need not. */
OK(moe_tp_sp) { return c->experts <= 0 || c->tp <= 1 || c->seq_parallel; }
SAY(moe_tp_sp) {
    snprintf(buf, n, "--moe-experts %d with --tp %d needs --sequence-parallel: each tp rank routes and "
             "dispatches its own share of the sequence", c->experts, c->tp);
}
BRIEF(moe_tp_sp) {
    snprintf(buf, n, "experts with tp %d need sequence parallelism (each tp rank routes its share)", c->tp);
}

/* ---- the table ------------------------------------------------------------ */

enum {
    OPT = TD_COMPAT_AT_OPTIONS,
    AUTO = TD_COMPAT_AT_AUTO,
    RUN = TD_COMPAT_AT_RUN,
    DPC = TD_COMPAT_AT_DP_CONFIG,
    DPN = TD_COMPAT_AT_DP_CREATE,
    SCH = TD_COMPAT_AT_SCHEDULE,
    MTP = TD_COMPAT_AT_MODEL_TP,
    MDIM = TD_COMPAT_AT_MODEL_DIMS,
    PPS = TD_COMPAT_AT_PP_SPLIT,
    CKL = TD_COMPAT_AT_CKPT_LOAD,
    PRE = TD_COMPAT_AT_PREFLIGHT,
    GRD = TD_COMPAT_AT_GRID,
    MCF = TD_COMPAT_AT_MODEL_CONFIG,
    PLN = TD_COMPAT_AT_PLAN
};
/* ---- mixture of experts and expert parallelism (ep.h) --------------------- */

/* the experts are replicated over tp: the tp ranks compute them together
 * (an etp that does not divide tp is etp-tp's to refuse) */
OK(moe_etp) { return c->etp <= 1 || (c->tp >= 1 && c->tp % c->etp != 0); }
SAY(moe_etp) {
    snprintf(buf, n,
             "--moe-etp %d: experts split over tensor-parallel ranks are not implemented; the experts are "
             "replicated over tp (etp 1) and --ep shares them out over dp x cp",
             c->etp);
}

/* capacity keeps each expert's first assignments in token order, and a
 * sequence's tokens lie on every cp rank (two chunks each) */
OK(moe_capacity_cp) { return !c->moe_capacity || c->cp <= 1; }
SAY(moe_capacity_cp) {
    snprintf(buf, n,
             "--moe-capacity does not combine with --cp %d: the capacity keeps each expert's first assignments in "
             "token order, which spans the cp ranks' chunks; drop one of the two (dropless routing works with cp)",
             c->cp);
}

OK(ep_ps) { return c->ep <= 1 || c->dp_mode != TD_DP_PS; }
SAY(ep_ps) {
    snprintf(buf, n, "--ep %d does not combine with --dp-mode ps: its servers hold one copy of every parameter",
             c->ep);
}

/* the bias moves on every copy a rank keeps (td_dp_ranges), which the
 * servers' workers do not */
OK(moe_bias_ps) { return !c->moe_bias || c->dp_mode != TD_DP_PS; }
SAY(moe_bias_ps) {
    snprintf(buf, n, "--moe-bias-balance does not combine with --dp-mode ps: the servers own the parameters");
}

/* the payloads pack whole buckets; expert rows are buckets of their own,
 * summed over another group */
OK(ep_payload) { return c->ep <= 1 || (!c->grad_bf16 && c->topk_ratio == 0.0); }
SAY(ep_payload) {
    snprintf(buf, n, "--ep %d does not combine with --grad-reduce-dtype bf16 or --grad-compress %s: the expert "
                     "rows are summed over their own group in fp32",
             c->ep, S(c->grad_compress_text));
}

/* trident's ep runs over dp x cp only (an ep that does not even fit
 * Megatron-core's folding is ep-grid's to refuse) */
OK(ep_divides) {
    int G = (c->dp > 0 ? c->dp : 1) * (c->cp > 0 ? c->cp : 1);
    return c->ep <= 1 || G % c->ep == 0 || !ok_ep_grid(c);
}
SAY(ep_divides) {
    int G = (c->dp > 0 ? c->dp : 1) * (c->cp > 0 ? c->cp : 1);
    snprintf(buf, n,
             "--ep %d does not divide dp x cp = %d: the experts are shared out over runs of ep data-parallel (and "
             "context-parallel) ranks; use an ep that divides %d",
             c->ep, G, G);
}
BRIEF(ep_divides) {
    int G = (c->dp > 0 ? c->dp : 1) * (c->cp > 0 ? c->cp : 1);
    snprintf(buf, n, "ep %d does not divide dp x cp = %d", c->ep, G);
}

#define ROW(ID, name, sites, fn)                                                                   \
    { ID, name, sites, ok_##fn, say_##fn, NULL }
#define ROWB(ID, name, sites, fn)                                                                  \
    { ID, name, sites, ok_##fn, say_##fn, brief_##fn }

static const td_compat_rule rules[TD_RULE_N] = {
    ROW(TD_RULE_AUTO_FIXED, "auto-fixed", OPT, auto_fixed),
    ROW(TD_RULE_SAVE_EVERY_OUT, "save-every-out", OPT, save_every_out),
    ROW(TD_RULE_KEEP_OUT, "keep-out", OPT, keep_out),
    ROW(TD_RULE_STOP_AFTER_OUT, "stop-after-out", OPT, stop_after_out),
    ROW(TD_RULE_OVERWRITE_OUT, "overwrite-out", OPT, overwrite_out),
    ROW(TD_RULE_OVERWRITE_RESUME, "overwrite-resume", OPT, overwrite_resume),
    ROW(TD_RULE_RESUME_LATEST_OUT, "resume-latest-out", OPT, resume_latest_out),
    ROW(TD_RULE_RECOMPUTE_ZBH1, "recompute-zbh1", OPT, recompute_zbh1),
    ROW(TD_RULE_TOPK_TP_PP, "topk-tp-pp", OPT, topk_tp_pp),
    ROW(TD_RULE_AUTO_DP_MODE, "auto-dp-mode", AUTO, auto_dp_mode),
    ROW(TD_RULE_PS_SERVERS_MODE, "ps-servers-mode", RUN, ps_servers_mode),
    ROW(TD_RULE_PS_NEEDS_SERVERS, "ps-needs-servers", RUN, ps_needs_servers),
    ROW(TD_RULE_PS_TP, "ps-tp", RUN | DPN, ps_tp),
    ROWB(TD_RULE_ZERO_PP, "zero-pp", DPN, zero_pp),
    ROW(TD_RULE_PS_PP, "ps-pp", RUN | DPN, ps_pp),
    ROW(TD_RULE_ZERO_MODE, "zero-mode", DPN, zero_mode),
    ROW(TD_RULE_LOSS_SCALE_PS, "loss-scale-ps", RUN, loss_scale_ps),
    ROW(TD_RULE_LOSS_SCALE_TOPK_EF, "loss-scale-topk-ef", RUN, loss_scale_topk_ef),
    ROW(TD_RULE_PS_CHECKPOINT, "ps-checkpoint", RUN | CKL, ps_checkpoint),
    ROW(TD_RULE_TOPK_BF16, "topk-bf16", DPC | DPN, topk_bf16),
    ROW(TD_RULE_PAYLOAD_MODE, "payload-mode", DPC | DPN, payload_mode),
    ROW(TD_RULE_PAYLOAD_ZERO, "payload-zero", DPC | DPN, payload_zero),
    ROWB(TD_RULE_CHUNKS_NEED_INTERLEAVED, "chunks-need-interleaved", SCH, chunks_need_interleaved),
    ROWB(TD_RULE_INTERLEAVED_CHUNKS, "interleaved-chunks", SCH, interleaved_chunks),
    ROWB(TD_RULE_INTERLEAVED_MICRO, "interleaved-micro", SCH, interleaved_micro),
    ROW(TD_RULE_INTERLEAVED_EQUAL_CHUNKS, "interleaved-equal-chunks", PPS,
        interleaved_equal_chunks),
    ROWB(TD_RULE_SP_TP, "sp-tp", MTP, sp_tp),
    ROWB(TD_RULE_SP_SEQ, "sp-seq", MTP, sp_seq),
    ROW(TD_RULE_LOWP_TP_ROWS, "lowp-tp-rows", MDIM, lowp_tp_rows),
    ROWB(TD_RULE_CP_SEQ, "cp-seq", OPT | MDIM, cp_seq),
    ROW(TD_RULE_CP_PS, "cp-ps", RUN | DPN, cp_ps),
    ROW(TD_RULE_CP_TOPK, "cp-topk", RUN | DPC | DPN, cp_topk),
    ROW(TD_RULE_SAMPLE_PROMPT_IDS, "sample-prompt-ids", PRE, sample_prompt_ids),
    ROWB(TD_RULE_DP_SHARD_ZERO, "dp-shard-zero", OPT | DPN, dp_shard_zero),
    ROW(TD_RULE_DP_SHARD_PAYLOAD, "dp-shard-payload", OPT | DPN, dp_shard_payload),
    ROWB(TD_RULE_DP_SHARD_DIVIDES, "dp-shard-divides", GRD | DPN, dp_shard_divides),
    ROW(TD_RULE_ARCH_FLAGS, "arch-flags", MCF, arch_flags),
    ROW(TD_RULE_MOE_FLAGS, "moe-flags", OPT, moe_flags),
    ROWB(TD_RULE_EP_MOE, "ep-moe", OPT, ep_moe),
    ROWB(TD_RULE_EP_EXPERTS, "ep-experts", OPT, ep_experts),
    ROWB(TD_RULE_ETP_TP, "etp-tp", OPT, etp_tp),
    ROWB(TD_RULE_EP_GRID, "ep-grid", GRD, ep_grid),
    ROWB(TD_RULE_MOE_TP_SP, "moe-tp-sp", PLN, moe_tp_sp), /* trident train runs tp without sp too */
    ROW(TD_RULE_MOE_ETP, "moe-etp", OPT, moe_etp),
    ROW(TD_RULE_MOE_CAPACITY_CP, "moe-capacity-cp", OPT, moe_capacity_cp),
    ROW(TD_RULE_EP_PS, "ep-ps", RUN, ep_ps),
    ROW(TD_RULE_MOE_BIAS_PS, "moe-bias-ps", RUN, moe_bias_ps),
    ROW(TD_RULE_EP_PAYLOAD, "ep-payload", RUN, ep_payload),
    ROW(TD_RULE_EP_DP_SHARD, "ep-dp-shard", OPT | DPN, ep_dp_shard),
    ROWB(TD_RULE_EP_DIVIDES, "ep-divides", GRD, ep_divides),
    ROW(TD_RULE_TOPK_DEVICE, "topk-device", OPT, topk_device),
    ROW(TD_RULE_RAMPUP_LAYOUT, "rampup-layout", OPT | RUN, rampup_layout),
    ROWB(TD_RULE_RAMPUP_DIVIDES, "rampup-divides", GRD, rampup_divides),
    ROWB(TD_RULE_RAMPUP_INTERLEAVED, "rampup-interleaved", GRD, rampup_interleaved),
    ROW(TD_RULE_MUON_LAYOUT, "muon-layout", OPT, muon_layout),
    ROW(TD_RULE_MUON_DEVICE, "muon-device", OPT, muon_device),
    ROW(TD_RULE_DOC_POSITIONS_MASK, "doc-positions-mask", OPT, doc_positions_mask),
};

const td_compat_rule *td_compat_rules(void) { return rules; }

int td_compat_first(const td_compat_cfg *c, unsigned sites, char *why, size_t n) {
    for (int i = 0; i < TD_RULE_N; i++) {
        if (!(rules[i].sites & sites) || rules[i].ok(c)) continue;
        if (why && n) rules[i].say(c, why, n);
        return i;
    }
    return -1;
}

int td_compat_ok(const td_compat_cfg *c, unsigned sites) {
    return td_compat_first(c, sites, NULL, 0) < 0;
}

void td_compat_check(const td_compat_cfg *c, unsigned site) {
    char why[1024];
    if (td_compat_first(c, site, why, sizeof why) >= 0) td_fail("%s", why);
}

int td_compat_rule_ok(td_rule_id id, const td_compat_cfg *c, char *why, size_t n) {
    TD_ASSERT(id >= 0 && id < TD_RULE_N);
    const td_compat_rule *r = &rules[id];
    if (r->ok(c)) return 1;
    if (why && n) (r->brief ? r->brief : r->say)(c, why, n);
    return 0;
}
