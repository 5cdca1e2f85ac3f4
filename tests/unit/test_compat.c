/* The rules table (compat.h), row by row: a base config keeps every rule;
 * for each row a config that breaks that row and no other is refused by it,
 * with its text word for word, at the sites the row names (td_compat_first)
 * and as a user error (td_compat_check in a child: exit 2, the text on
 * stderr). A row added to the table without a case here fails the test.
 * Links trident_model alone: the table needs no MPI. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "trident/base.h"
#include "trident/compat.h"
#include "trident/schedule.h"

static int fails;
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            printf("FAIL: " __VA_ARGS__);                                                          \
            printf("\n");                                                                          \
            fails++;                                                                               \
        }                                                                                          \
    } while (0)

/* The config that breaks row `id` alone, and that row's expected text. */
static const char *breaking(td_rule_id id, td_compat_cfg *c) {
    td_compat_cfg_init(c);
    switch (id) {
    case TD_RULE_AUTO_FIXED:
        c->autoplan = 1, c->dp = 0, c->zero = 1;
        return "--auto picks --dp --tp --pp --zero --micro-batches --sequence-parallel itself for "
               "fp32 "
               "(the calibrated profile's arithmetic); drop them and --precision";
    case TD_RULE_SAVE_EVERY_OUT:
        c->save_every = 5;
        return "--save-every 5 needs --out DIR to save into";
    case TD_RULE_KEEP_OUT:
        c->keep = 3;
        return "--keep 3 needs --out DIR";
    case TD_RULE_STOP_AFTER_OUT:
        c->stop_after = 7;
        return "--stop-after 7 needs --out DIR to save the checkpoint into";
    case TD_RULE_OVERWRITE_OUT:
        c->overwrite = 1;
        return "--overwrite needs --out DIR (it replaces DIR's checkpoints)";
    case TD_RULE_OVERWRITE_RESUME:
        c->overwrite = 1, c->out = 1, c->resume = "runs/a";
        return "--overwrite does not combine with --resume runs/a: a resumed run continues --out's "
               "checkpoints, --overwrite would remove them; drop one of the two";
    case TD_RULE_RESUME_LATEST_OUT:
        c->resume = "latest";
        return "--resume latest needs --out DIR (latest is its newest checkpoint)";
    case TD_RULE_RECOMPUTE_ZBH1:
        c->pp = 2, c->recompute = 1, c->schedule = TD_SCHED_ZBH1, c->recompute_name = "block";
        return "--recompute block does not combine with --schedule zb-h1 (its weight-gradient half "
               "needs "
               "every block's saved tensors); use gpipe, 1f1b or interleaved, or --recompute none";
    case TD_RULE_TOPK_TP_PP:
        c->topk_ratio = 0.01, c->tp = 2, c->grad_compress_text = "topk:0.01";
        return "--grad-compress topk:0.01 does not combine with --tp 2 --pp 1 yet: every holder of "
               "a "
               "replicated tensor (tp-replicated rows, the tied embedding on the first and last "
               "stage) "
               "would select its own top-k and the copies would drift apart; use tp = pp = 1, or "
               "--grad-compress none (--grad-reduce-dtype bf16 halves the payload in any layout)";
    case TD_RULE_AUTO_DP_MODE:
        c->autoplan = 1, c->dp = 0, c->dp_mode = TD_DP_REDUCE_BROADCAST,
        c->dp_mode_text = "reduce-broadcast";
        return "--auto plans --dp-mode allreduce layouts; drop --dp-mode reduce-broadcast";
    case TD_RULE_PS_SERVERS_MODE:
        c->ps_servers = 2;
        return "--ps-servers needs --dp-mode ps";
    case TD_RULE_PS_NEEDS_SERVERS:
        c->dp_mode = TD_DP_PS;
        return "--dp-mode ps needs --ps-servers S >= 1";
    case TD_RULE_PS_TP:
        c->dp_mode = TD_DP_PS, c->ps_servers = 1, c->tp = 2;
        return "--dp-mode ps is data-parallel only and does not combine with --tp 2; use --dp-mode "
               "allreduce or reduce-broadcast with tensor parallelism";
    case TD_RULE_ZERO_PP:
        c->zero = 2, c->pp = 2;
        return "--zero 2 with --pp 2: ZeRO-2 and ZeRO-3 shard gradients (and parameters) per "
               "micro-batch, "
               "which a pipeline schedule interleaves; use --zero 0 or 1 with pipeline parallelism";
    case TD_RULE_PS_PP:
        c->dp_mode = TD_DP_PS, c->ps_servers = 1, c->pp = 4;
        return "--dp-mode ps does not combine with --pp 4; use --dp-mode allreduce or "
               "reduce-broadcast "
               "with pipeline parallelism";
    case TD_RULE_ZERO_MODE:
        c->zero = 1, c->dp_mode = TD_DP_REDUCE_BROADCAST;
        return "--zero 1 needs --dp-mode allreduce (ZeRO shards over the all-reduce group; "
               "reduce-broadcast has its own placement)";
    case TD_RULE_LOSS_SCALE_PS:
        c->dp_mode = TD_DP_PS, c->ps_servers = 1, c->loss_scale_mode = 2;
        c->loss_scale_text = "dynamic", c->loss_scale_name = "dynamic";
        return "--loss-scale dynamic (dynamic) does not combine with --dp-mode ps: its servers "
               "apply each "
               "worker's gradients on their own, so no step can be skipped or unscaled on every "
               "rank "
               "together; use --dp-mode allreduce or reduce-broadcast, or --loss-scale none";
    case TD_RULE_LOSS_SCALE_TOPK_EF:
        c->loss_scale_mode = 1, c->topk_ratio = 0.1;
        c->loss_scale_text = "1024", c->loss_scale_name = "static",
        c->grad_compress_text = "topk:0.1";
        return "--loss-scale 1024 (static) does not combine with --grad-compress topk:0.1: its "
               "error-feedback residual would carry gradients of another scale (and a skipped "
               "step's "
               "infinities) into later steps; use --grad-compress topk:R:noef, or --loss-scale "
               "none";
    case TD_RULE_PS_CHECKPOINT:
        c->dp_mode = TD_DP_PS, c->ps_servers = 1, c->stop_after = 5, c->out = 1;
        return "--stop-after does not combine with --dp-mode ps: its servers apply each worker's "
               "gradients "
               "in their own loop, which a checkpoint cannot resume exactly; use --dp-mode "
               "allreduce or "
               "reduce-broadcast";
    case TD_RULE_TOPK_BF16:
        c->topk_ratio = 0.1, c->grad_bf16 = 1;
        return "--grad-compress topk sends fp32 values; use it with --grad-reduce-dtype fp32";
    case TD_RULE_PAYLOAD_MODE:
        c->grad_bf16 = 1, c->dp_mode = TD_DP_REDUCE_BROADCAST;
        return "--grad-reduce-dtype bf16 needs --dp-mode allreduce (reduce-broadcast reduces "
               "gradients its "
               "own way)";
    case TD_RULE_PAYLOAD_ZERO:
        c->topk_ratio = 0.1, c->zero = 2;
        return "--grad-compress topk works with --zero 0 or 1, not --zero 2";
    case TD_RULE_CHUNKS_NEED_INTERLEAVED:
        c->schedule = TD_SCHED_1F1B, c->virtual_stages = 2, c->schedule_name = "1f1b";
        return "--virtual-stages 2 needs --schedule interleaved (1f1b runs 1 chunk per stage)";
    case TD_RULE_INTERLEAVED_CHUNKS:
        c->schedule = TD_SCHED_INTERLEAVED, c->pp = 2, c->micro_batches = 2;
        return "--virtual-stages 1: the interleaved schedule needs at least 2 chunks per stage";
    case TD_RULE_INTERLEAVED_MICRO:
        c->schedule = TD_SCHED_INTERLEAVED, c->pp = 2, c->virtual_stages = 2, c->micro_batches = 3;
        return "--micro-batches 3 is not a multiple of --pp 2, which the interleaved schedule "
               "needs";
    case TD_RULE_INTERLEAVED_EQUAL_CHUNKS:
        c->schedule = TD_SCHED_INTERLEAVED, c->virtual_stages = 2, c->unequal_chunks = 1;
        c->pp_partition_text = "1,3";
        return "--pp-partition 1,3: the interleaved schedule needs equal chunks";
    case TD_RULE_SP_TP:
        c->seq_parallel = 1, c->seq = 64;
        return "--sequence-parallel needs --tp 2 or more (it splits the sequence over the tp "
               "ranks)";
    case TD_RULE_SP_SEQ:
        c->seq_parallel = 1, c->tp = 2, c->seq = 63;
        return "--sequence-parallel: --tp 2 does not divide --seq 63; use a sequence length that "
               "is a "
               "multiple of 2";
    case TD_RULE_LOWP_TP_ROWS:
        c->precision = 1, c->tp = 2, c->rows = 3, c->embd = 5, c->precision_name = "bf16";
        return "--precision bf16 with --tp needs an even number of elements per rank's rows "
               "(--seq x --channels); got 3 x 5";
    case TD_RULE_CP_SEQ:
        c->cp = 2, c->seq = 6;
        return "--cp 2 splits each sequence into 4 equal chunks (2 per rank, for causal load "
               "balance), which --seq 6 does not divide; use a sequence length that is a multiple "
               "of 4";
    case TD_RULE_CP_PS:
        c->cp = 2, c->seq = 8, c->dp_mode = TD_DP_PS, c->ps_servers = 1;
        return "--dp-mode ps does not combine with --cp 2: its servers expect every worker's "
               "gradient of whole sequences; use --dp-mode allreduce (or reduce-broadcast) with "
               "context parallelism";
    case TD_RULE_CP_TOPK:
        c->cp = 2, c->seq = 8, c->topk_ratio = 0.01, c->grad_compress_text = "topk:0.01";
        return "--grad-compress topk:0.01 does not combine with --cp 2: a context-parallel rank's "
               "gradient covers only its chunks of each sequence, so its own top-k is not an "
               "estimate of the step's; use --grad-compress none (--grad-reduce-dtype bf16 halves "
               "the payload)";
    case TD_RULE_SAMPLE_PROMPT_IDS:
        c->sample_prompt = 1, c->data_token_ids = 1, c->data_text = "train.bin";
        return "--sample-prompt needs a text tokenizer, but --data train.bin holds token ids; "
               "leave "
               "--sample-prompt out (the sample then starts from token 0)";
    case TD_RULE_DP_SHARD_ZERO:
        c->dp = 4, c->dp_shard = 2;
        return "--dp-shard 2 splits ZeRO's state within shards of 2 ranks; it needs --zero 1, 2 or 3";
    case TD_RULE_DP_SHARD_PAYLOAD:
        c->dp = 4, c->dp_shard = 2, c->zero = 1, c->topk_ratio = 0.01;
        return "--dp-shard 2 reduces fp32 gradients (within each shard, then over the replicas); "
               "--grad-compress topk does not combine with it";
    case TD_RULE_DP_SHARD_DIVIDES:
        c->dp = 3, c->cp = 2, c->dp_shard = 4, c->zero = 1;
        return "--dp-shard 4 does not divide the 6 ranks of dp x cp (dp 3, cp 2) into equal shards; "
               "use a divisor of 6";
    case TD_RULE_ARCH_FLAGS:
        c->llama_flag_text = "--kv-heads 2";
        return "--kv-heads 2 needs --arch llama (gpt2 has H kv heads, a 4C GELU MLP, LayerNorm, learned "
               "positions and a tied head)";
    case TD_RULE_MOE_FLAGS:
        c->moe_flag_text = "--moe-top-k 2";
        return "--moe-top-k 2 needs --moe-experts E (it shapes the experts of a mixture-of-experts model; a "
               "dense model has none)";
    case TD_RULE_EP_MOE:
        c->ep = 2, c->dp = 2;
        return "--ep 2 needs --moe-experts E (expert parallelism splits the experts of a mixture-of-experts "
               "model; a dense model has none)";
    case TD_RULE_EP_EXPERTS:
        c->experts = 8, c->ep = 3, c->dp = 3;
        return "--ep 3 does not divide --moe-experts 8: each ep rank holds an equal share of the experts; use "
               "a divisor of 8";
    case TD_RULE_ETP_TP:
        c->experts = 8, c->etp = 2, c->tp = 3, c->seq_parallel = 1, c->seq = 6;
        return "--moe-etp 2 does not divide --tp 3: the experts' tensor-parallel groups fold into the dense "
               "part's; use a divisor of 3";
    case TD_RULE_EP_GRID:
        c->experts = 8, c->ep = 4, c->dp = 2;
        return "--ep 4 does not divide tp x cp x dp / etp = 1 x 1 x 2 / 1: the experts' grid etp x ep x edp "
               "folds into the dense part's tp x cp x dp";
    case TD_RULE_MOE_TP_SP:
        c->experts = 8, c->tp = 2;
        return "--moe-experts 8 with --tp 2 needs --sequence-parallel: each tp rank routes and dispatches its "
               "own share of the sequence";
    case TD_RULE_MOE_ETP:
        c->etp = 2, c->tp = 2, c->experts = 4, c->seq_parallel = 1, c->seq = 16;
        return "--moe-etp 2: experts split over tensor-parallel ranks are not implemented; the experts are "
               "replicated over tp (etp 1) and --ep shares them out over dp x cp";
    case TD_RULE_MOE_CAPACITY_CP:
        c->moe_capacity = 1, c->cp = 2, c->experts = 4, c->seq = 64;
        return "--moe-capacity does not combine with --cp 2: the capacity keeps each expert's first assignments "
               "in token order, which spans the cp ranks' chunks; drop one of the two (dropless routing works "
               "with cp)";
    case TD_RULE_EP_PS:
        c->ep = 2, c->dp = 2, c->experts = 4, c->dp_mode = TD_DP_PS, c->ps_servers = 1;
        return "--ep 2 does not combine with --dp-mode ps: its servers hold one copy of every parameter";
    case TD_RULE_MOE_BIAS_PS:
        c->moe_bias = 1, c->experts = 4, c->dp_mode = TD_DP_PS, c->ps_servers = 1;
        return "--moe-bias-balance does not combine with --dp-mode ps: the servers own the parameters";
    case TD_RULE_EP_PAYLOAD:
        c->ep = 2, c->dp = 2, c->experts = 4, c->grad_bf16 = 1, c->grad_compress_text = "none";
        return "--ep 2 does not combine with --grad-reduce-dtype bf16 or --grad-compress none: the expert rows "
               "are summed over their own group in fp32";
    case TD_RULE_EP_DIVIDES:
        c->ep = 2, c->tp = 2, c->seq_parallel = 1, c->seq = 16, c->experts = 4; /* ep-grid's tp x cp x dp keeps it */
        return "--ep 2 does not divide dp x cp = 1: the experts are shared out over runs of ep data-parallel (and "
               "context-parallel) ranks; use an ep that divides 1";
    case TD_RULE_EP_DP_SHARD:
        c->dp = 4, c->ep = 2, c->dp_shard = 2, c->zero = 1, c->experts = 4;
        return "--dp-shard 2 does not combine with --ep 2 yet: ZeRO shards the expert stacks over the "
               "ranks holding the same experts, which cross the shards; drop --dp-shard";
    case TD_RULE_TOPK_DEVICE:
        c->topk_ratio = 0.01, c->grad_compress_text = "topk:0.01", c->device = 1, c->device_name = "guard";
        return "--grad-compress topk:0.01 does not combine with --device guard yet: top-k selects, packs and "
               "sums the gradients on the host; use --device cpu, or --grad-compress none (--grad-reduce-dtype "
               "bf16 halves the payload on any device)";
    case TD_RULE_RAMPUP_LAYOUT:
        c->dp = 2, c->dp_mode = TD_DP_PS, c->ps_servers = 1, c->rampup_start = 4, c->rampup_text = "4:4:64";
        return "--batch-rampup 4:4:64 does not combine with --dp-mode ps yet: the micro-batches per step change "
               "with the batch, and parameter-server workers step on their own; drop --batch-rampup, or use "
               "--dp-mode allreduce";
    case TD_RULE_RAMPUP_DIVIDES:
        c->dp = 2, c->batch = 12, c->rampup_start = 3, c->rampup_increment = 3, c->rampup_text = "3:3:60";
        return "--batch-rampup 3:3:60: START 3 and INCREMENT 3 must be multiples of dp 2 x 6 sequences per "
               "micro-batch (--batch 12 / (dp x --micro-batches 1)) = 12, so that every size is whole micro-batches";
    case TD_RULE_RAMPUP_INTERLEAVED: /* micro-batches of 2: START 4 is 2 of them, INCREMENT 2 one */
        c->pp = 2, c->schedule = TD_SCHED_INTERLEAVED, c->virtual_stages = 2, c->micro_batches = 4, c->batch = 8;
        c->rampup_start = 4, c->rampup_increment = 2, c->rampup_text = "4:2:64";
        return "--batch-rampup 4:2:64 with --schedule interleaved: START 4 and INCREMENT 2 must be multiples of dp 1 "
               "x 2 sequences per micro-batch x --pp 2 = 4, so that every size's micro-batches per replica are a "
               "multiple of pp, as the interleaved schedule needs; or use --schedule 1f1b";
    case TD_RULE_MUON_LAYOUT:
        c->optimizer = 1, c->dp = 2, c->dp_mode = TD_DP_REDUCE_BROADCAST;
        return "--optimizer muon does not combine with a --dp-mode other than allreduce yet: its gradients and "
               "state live on a root or on servers, for which the owners' exchange is not written; use --dp-mode "
               "allreduce (with --zero for sharded state), or --optimizer adamw";
    case TD_RULE_MUON_DEVICE:
        c->optimizer = 1, c->device = 2, c->device_name = "cuda";
        return "--optimizer muon does not combine with --device cuda yet: the CUDA backend has no Muon kernels "
               "(Newton-Schulz, the momentum, the update); use --device cpu or guard, or --optimizer adamw";
    case TD_RULE_DOC_POSITIONS_MASK:
        c->doc_pos_reset = 1;
        return "--doc-positions reset restarts positions at the document starts of --doc-mask; add --doc-mask "
               "(or drop --doc-positions reset)";
    case TD_RULE_N:
        break;
    }
    return NULL;
}

/* td_compat_check in a child: its exit status and what it wrote to stderr. */
static int check_in_child(const td_compat_cfg *c, unsigned sites, char *err, size_t n) {
    int fd[2];
    if (pipe(fd) != 0) return -1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        dup2(fd[1], 2);
        td_compat_check(c, sites);
        _exit(0);
    }
    close(fd[1]);
    size_t got = 0;
    ssize_t r;
    while (got + 1 < n && (r = read(fd[0], err + got, n - 1 - got)) > 0) got += (size_t)r;
    err[got] = 0;
    close(fd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int main(void) {
    const td_compat_rule *rules = td_compat_rules();
    td_compat_cfg base;
    td_compat_cfg_init(&base);
    char why[1024], err[2048];
    CHECK(td_compat_first(&base, TD_COMPAT_AT_ANY, why, sizeof why) < 0,
          "the base config breaks: %s", why);
    CHECK(td_compat_ok(&base, TD_COMPAT_AT_ANY), "td_compat_ok refuses the base config");
    for (int i = 0; i < TD_RULE_N; i++) {
        const td_compat_rule *r = &rules[i];
        CHECK(r->id == (td_rule_id)i && r->name && r->sites && r->ok && r->say,
              "row %d is incomplete", i);
        for (int j = 0; j < i; j++)
            CHECK(strcmp(rules[j].name, r->name) != 0, "rows %d and %d are both %s", j, i, r->name);
        td_compat_cfg c;
        const char *want = breaking((td_rule_id)i, &c);
        if (!want) {
            CHECK(0, "row %s has no breaking config in this test", r->name);
            continue;
        }
        int broken = 0;
        for (int j = 0; j < TD_RULE_N; j++)
            if (!rules[j].ok(&c)) {
                broken++;
                CHECK(j == i, "the config for %s also breaks %s", r->name, rules[j].name);
            }
        CHECK(broken == 1, "the config for %s breaks %d rows", r->name, broken);
        int first = td_compat_first(&c, TD_COMPAT_AT_ANY, why, sizeof why);
        CHECK(first == i, "%s: the table answers row %d", r->name, first);
        CHECK(first != i || strcmp(why, want) == 0, "%s: text\n  '%s'\n  want '%s'", r->name, why,
              want);
        CHECK(td_compat_first(&c, r->sites, NULL, 0) == i, "%s: not refused at its own sites",
              r->name);
        CHECK(td_compat_first(&c, TD_COMPAT_AT_ANY & ~r->sites, NULL, 0) < 0,
              "%s: refused at sites it does not name", r->name);
        CHECK(!td_compat_ok(&c, r->sites), "%s: td_compat_ok says yes", r->name);
        CHECK(!td_compat_rule_ok(r->id, &c, why, sizeof why) && why[0], "%s: td_compat_rule_ok",
              r->name);
        /* as a user error: exit 2 and one line with the row's text */
        int code = check_in_child(&c, r->sites, err, sizeof err);
        char line[1200];
        snprintf(line, sizeof line, "trident: error: %s\n", want);
        CHECK(code == TD_EXIT_USAGE && strstr(err, line),
              "%s: td_compat_check exit %d, stderr '%s'", r->name, code, err);
    }
    /* a mixture of experts ramps up (dp 2 = ep 2): the rampup-layout row
     * refuses only the parameter server (cli_lr_schedules verifies it) */
    td_compat_cfg moe = base;
    moe.dp = 2, moe.ep = 2, moe.experts = 4, moe.batch = 12, moe.micro_batches = 3;
    moe.rampup_start = 4, moe.rampup_increment = 4, moe.rampup_text = "4:4:8";
    CHECK(td_compat_first(&moe, TD_COMPAT_AT_ANY, why, sizeof why) < 0, "a MoE ramp at dp 2 = ep 2: %s", why);
    /* the base passes td_compat_check at every site */
    CHECK(check_in_child(&base, TD_COMPAT_AT_ANY, err, sizeof err) == 0,
          "td_compat_check fails the base: %s", err);
    printf(fails ? "test_compat: FAILED (%d)\n"
                 : "test_compat: %d rows, all refused with their texts\n",
           fails ? fails : TD_RULE_N);
    return fails != 0;
}
