/* `trident plan`: the planner's command line. Needs no MPI. */
#include <stdio.h>
#include <string.h>

#include "plan_out.h"
#include "trident/base.h"
#include "trident/cli.h"
#include "trident/compat.h"
#include "trident/flags.h"
#include "trident/model.h"
#include "trident/planner.h"
#include "trident/schedule.h"

static int rc_parse(const char *s) {
    if (strcmp(s, "none") == 0) return TD_PLAN_RC_NONE;
    if (strcmp(s, "selective") == 0) return TD_PLAN_RC_SELECTIVE;
    if (strcmp(s, "block") == 0 || strcmp(s, "full") == 0) return TD_PLAN_RC_FULL;
    td_fail("--recompute '%s' is not a mode; valid: none, selective, block (= full)", s);
}

int td_plan_main(int argc, char **argv) {
    const char *model_s = NULL, *cluster_s = "a100-hdr", *sched_s = NULL, *rc_s = NULL, *arch_s = NULL, *tie_s = NULL;
    int L = 0, H = 0, C = 0, V = 0, T = 0, KV = 0, F = 0, batch = 0, gpus = 0, gpn = 0, top = 5, json = 0, calibrate = 0, sp = 0;
    int threads = 1, list_models = 0, E = 0, K = 0, every = 0, moe_ffn = 0, S = 0;
    double mem_gb = 0, tflops = 0, intra = 0, inter = 0, eff = 0, hbm = 0, intra_us = -1, inter_us = -1;
    td_plan_fixed fix;
    td_plan_fixed_init(&fix);
    td_flag flags[] = {
        {"--model", TD_FLAG_STR, &model_s, "preset: gpt2-124m, gpt2-350m, gpt2-1.5b; gpt3-125m, -350m, -760m, "
         "-1.3b, -2.7b, -6.7b, -13b, -175b (Brown et al. 2020, table 2.1; 13B at d_model 5120, not the table's "
         "5140, which 40 heads do not divide; XL with 16 heads, not 24); megatron-1.7b ... megatron-1t "
         "(Narayanan et al. 2021, table 1); llama: smollm-135m, tinyllama-1.1b, llama2-7b, llama3-8b, llama3.1-70b, "
         "llama3.1-405b; mixture of experts: mixtral-8x7b, olmoe-1b-7b (their Hugging Face config.json); "
         "--list-models prints them", NULL},
        {"--list-models", TD_FLAG_BOOL, &list_models, "print the model presets with their sizes and sources", NULL},
        {"--layers", TD_FLAG_INT, &L, "transformer blocks (overrides the preset)", "[1, 100000]"},
        {"--heads", TD_FLAG_INT, &H, "attention heads", "[1, 100000]"},
        {"--embd", TD_FLAG_INT, &C, "hidden size, divisible by heads", "[1, 1000000]"},
        {"--vocab", TD_FLAG_INT, &V, "vocabulary", "[1, 100000000]"},
        {"--seq", TD_FLAG_INT, &T, "sequence length", "[1, 10000000]"},
        {"--arch", TD_FLAG_STR, &arch_s, "model family: gpt2 or llama (the preset's; gpt2 without one)", NULL},
        {"--kv-heads", TD_FLAG_INT, &KV, "llama: key/value heads, dividing --heads (default: --heads)", "[1, 100000]"},
        {"--ffn-hidden", TD_FLAG_INT, &F, "llama: MLP hidden features (default: 8C/3 rounded up to a multiple of 256)",
         "[1, 4000000]"},
        {"--tie-embeddings", TD_FLAG_STR, &tie_s, "on or off: the LM head is the token embedding (default: on for "
         "gpt2, off for llama)", NULL},
        {"--moe-experts", TD_FLAG_INT, &E, "mixture of experts: E experts of the family's MLP (GELU for gpt2, SwiGLU "
         "for llama) replace the MLP of every MoE block, with a router C -> E (default: none, a dense model)",
         "[1, 100000]"},
        {"--moe-top-k", TD_FLAG_INT, &K, "experts each token is routed to (default: 2)", "[1, 100000]"},
        {"--moe-every", TD_FLAG_INT, &every, "every N-th block is an MoE block, blocks 0, N, 2N, ... (default: 1, "
         "every block)", "[1, 100000]"},
        {"--moe-ffn-hidden", TD_FLAG_INT, &moe_ffn, "hidden features of one expert (default: --ffn-hidden's)",
         "[1, 4000000]"},
        {"--moe-shared-experts", TD_FLAG_INT, &S, "experts every token passes through beside its routed ones, of "
         "--moe-ffn-hidden each (default: 0)", "[0, 100000]"},
        {"--global-batch", TD_FLAG_INT, &batch, "sequences per optimizer step (required, but for a preset with a "
         "published run: that run's)", "[1, 100000000]"},
        {"--gpus", TD_FLAG_INT, &gpus, "devices (required)", "[1, 10000000]"},
        {"--gpus-per-node", TD_FLAG_INT, &gpn, "devices per node (the preset's: 8)", "[1, 1024]"},
        {"--cluster", TD_FLAG_STR, &cluster_s, "a100-edr, a100-hdr (default), a100-ndr, h100-ndr or local; "
         "the flags below override its figures", NULL},
        {"--device-mem", TD_FLAG_DOUBLE, &mem_gb, "device memory in GB (overrides the preset)", "(0, inf)"},
        {"--device-tflops", TD_FLAG_DOUBLE, &tflops, "dense bf16 peak TFLOP/s per device", "(0, inf)"},
        {"--intra-bw", TD_FLAG_DOUBLE, &intra, "GB/s per device per direction inside a node", "(0, inf)"},
        {"--inter-bw", TD_FLAG_DOUBLE, &inter, "GB/s per device per direction between nodes", "(0, inf)"},
        {"--gemm-efficiency", TD_FLAG_DOUBLE, &eff, "achievable fraction of peak for large GEMMs", "(0, 1]"},
        {"--mem-bw", TD_FLAG_DOUBLE, &hbm, "device memory bandwidth in GB/s", "(0, inf)"},
        {"--intra-lat", TD_FLAG_DOUBLE, &intra_us, "microseconds per ring step inside a node", "[0, 1e6]"},
        {"--inter-lat", TD_FLAG_DOUBLE, &inter_us, "microseconds per ring step between nodes", "[0, 1e6]"},
        {"--dp", TD_FLAG_INT, &fix.dp, "fix the data-parallel size", "[1, 10000000]"},
        {"--tp", TD_FLAG_INT, &fix.tp, "fix the tensor-parallel size", "[1, 1024]"},
        {"--pp", TD_FLAG_INT, &fix.pp, "fix the pipeline stages", "[1, 100000]"},
        {"--zero", TD_FLAG_INT, &fix.zero, "fix the ZeRO stage", "[0, 3]"},
        {"--cp", TD_FLAG_INT, &fix.cp, "fix the context-parallel size", "[1, 1024]"},
        {"--ep", TD_FLAG_INT, &fix.ep, "fix the expert-parallel size (the experts split over ep ranks)",
         "[1, 100000]"},
        {"--moe-etp", TD_FLAG_INT, &fix.etp, "fix the experts' tensor-parallel size, dividing --tp", "[1, 1024]"},
        {"--dp-shard", TD_FLAG_INT, &fix.shard, "fix hybrid sharding: ZeRO over shards of N devices (0: none)", "[0, 10000000]"},
        {"--micro-batches", TD_FLAG_INT, &fix.micro_batches, "fix the micro-batches per replica", "[1, 100000000]"},
        {"--schedule", TD_FLAG_STR, &sched_s, "fix the schedule: gpipe, 1f1b or interleaved", NULL},
        {"--virtual-stages", TD_FLAG_INT, &fix.v, "fix the chunks per stage of interleaved", "[2, 100000]"},
        {"--recompute", TD_FLAG_STR, &rc_s, "fix recomputation: none, selective or block (full)", NULL},
        {"--sequence-parallel", TD_FLAG_BOOL, &sp, "only plans with sequence parallelism", NULL},
        {"--tp-across-nodes", TD_FLAG_BOOL, &fix.tp_across_nodes, "allow tp groups larger than a node", NULL},
        {"--top", TD_FLAG_INT, &top, "plans to print (5)", "[1, 1000000]"},
        {"--json", TD_FLAG_BOOL, &json, "print the ranked plans as a JSON array", NULL},
        {"--calibrate", TD_FLAG_BOOL, &calibrate, "measure this machine for --cluster local (under mpirun; "
         "--out FILE)", NULL},
        {"--threads", TD_FLAG_INT, &threads, "--cluster local: threads per rank (1)", "[1, 1024]"},
    };
    td_flags_parse("plan", flags, (int)(sizeof flags / sizeof flags[0]), argc, argv);
    TD_CHECK(!calibrate, "internal: plan --calibrate is trident's (apps/trident.c), not td_plan_main's");
    if (list_models) {
        td_plan_model_presets_print();
        return 0;
    }
    td_plan_model m = {"custom", 0, 0, 0, 0, 0, TD_ARCH_GPT2, 0, 0, 0, 0, 0, 0, 0, 0};
    if (model_s)
        TD_CHECK(td_plan_model_preset(model_s, &m) == 0, "--model '%s' is not a preset; use %s", model_s,
                 td_plan_model_presets());
    if (L) m.L = L;
    if (H) m.H = H;
    if (C) m.C = C;
    if (V) m.V = V;
    if (T) m.T = T;
    if (arch_s) {
        int a = td_arch_parse(arch_s);
        TD_CHECK(a >= 0, "--arch %s: unknown model family; valid: gpt2, llama", arch_s);
        if (a != m.arch) m.KV = m.F = m.tie = 0; /* the other family's defaults, not the preset's */
        m.arch = a;
    }
    if (KV) m.KV = KV;
    if (F) m.F = F;
    if (tie_s) {
        TD_CHECK(strcmp(tie_s, "on") == 0 || strcmp(tie_s, "off") == 0, "--tie-embeddings %s: valid: on, off", tie_s);
        m.tie = strcmp(tie_s, "on") == 0 ? TD_TIE_ON : TD_TIE_OFF;
    }
    if (E) m.E = E;
    if (K) m.K = K;
    if (every) m.moe_every = every;
    if (moe_ffn) m.moe_ffn = moe_ffn;
    if (S) m.S = S;
    TD_CHECK(m.L && m.H && m.C && m.V && m.T, "plan: give --model PRESET or all of --layers --heads --embd --vocab --seq");
    TD_CHECK(m.C % m.H == 0, "--embd %d is not divisible by --heads %d", m.C, m.H);
    td_plan_model_finish(&m);
    /* a preset's published run gives the batch the comparison needs */
    int n_pub = 0, batch_note = 0;
    const td_plan_published *pub = model_s ? td_plan_published_runs(model_s, &n_pub) : NULL;
    if (!batch && pub) batch = pub->global_batch, batch_note = 1;
    TD_CHECK(batch > 0, "plan: --global-batch N is required (sequences per step)");
    { /* --ep and --moe-etp against the model (and a fixed --tp): the rules
       * table's rows, as the trainer will word them */
        td_compat_cfg cc;
        td_compat_cfg_init(&cc);
        cc.experts = m.E, cc.ep = fix.ep ? fix.ep : 1, cc.etp = fix.etp ? fix.etp : 1;
        cc.tp = fix.tp ? fix.tp : cc.etp;
        static const td_rule_id rows[] = {TD_RULE_EP_MOE, TD_RULE_EP_EXPERTS, TD_RULE_ETP_TP};
        for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
            const td_compat_rule *r = &td_compat_rules()[rows[i]];
            if (r->ok(&cc)) continue;
            char why[512];
            r->say(&cc, why, sizeof why);
            td_fail("plan: %s", why);
        }
    }
    TD_CHECK(gpus > 0, "plan: --gpus N is required");
    td_plan_cluster c;
    char err[512];
    TD_CHECK(td_plan_cluster_preset(cluster_s, &c, err, sizeof err) == 0, "%s", err);
    if (strcmp(cluster_s, "local") == 0) { /* the profile for these ranks and threads */
        td_profile prof;
        td_err e;
        td_plan_profile_path(err, sizeof err);
        TD_CHECK(td_plan_profile_load(err, &prof, &e) == 0, "--cluster local: %s", e.msg);
        td_plan_cluster_local(&prof, gpus, threads, &c);
    }
    c.gpus = gpus;
    if (gpn) c.gpus_per_node = gpn;
    if (c.gpus_per_node > gpus) c.gpus_per_node = gpus;
    /* a figure of the preset overridden: its validation no longer applies */
    int overridden = mem_gb > 0 || tflops > 0 || intra > 0 || inter > 0 || eff > 0 || hbm > 0 || intra_us >= 0 ||
                     inter_us >= 0;
    if (mem_gb > 0) c.mem_bytes = mem_gb * 1e9;
    if (tflops > 0) c.peak_flops = tflops * 1e12;
    if (intra > 0) c.intra_bw = intra * 1e9;
    if (inter > 0) c.inter_bw = inter * 1e9;
    if (eff > 0) c.gemm_eff = eff;
    if (hbm > 0) c.hbm_bw = hbm * 1e9, c.n_bws = 0; /* one figure for every size */
    if (intra_us >= 0) c.intra_lat = intra_us * 1e-6;
    if (inter_us >= 0) c.inter_lat = inter_us * 1e-6;
    const char *no_band = c.validation ? NULL : "no published run on this preset has been predicted";
    if (overridden && c.validation) c.validation = NULL, no_band = "the preset's figures were overridden";
    if (m.E > 0 && pub && !c.validation && !overridden)
        no_band = "one published run of this model is predicted below: a single point, not a band";
    if (sched_s) {
        td_sched_kind k = td_sched_parse(sched_s);
        TD_CHECK(k != TD_SCHED_ZBH1, "--schedule zb-h1: the planner models gpipe, 1f1b and interleaved");
        fix.sched = k;
    }
    TD_CHECK(!fix.v || fix.sched < 0 || fix.sched == TD_SCHED_INTERLEAVED,
             "--virtual-stages %d: chunks per stage are the interleaved schedule's, not --schedule %s's; give "
             "--schedule interleaved or drop --virtual-stages", fix.v, sched_s);
    if (rc_s) fix.rc = rc_parse(rc_s);
    if (sp) fix.sp = 1;
    char why[512];
    TD_CHECK(td_plan_fixed_check(&m, &c, batch, &fix, why, sizeof why) == 0, "plan: %s", why);
    int fixed = fix.dp || fix.tp || fix.pp || fix.cp || fix.shard >= 0 || fix.zero >= 0 || fix.micro_batches || fix.sched >= 0 || fix.v ||
                fix.rc >= 0 || fix.sp >= 0 || fix.ep || fix.etp;
    td_plan_out out = {&m, &c, batch, strcmp(cluster_s, "local") == 0 ? threads : 0, fixed, no_band, overridden};

    td_plan_result r;
    td_plan_search(&m, &c, batch, &fix, &r);
    if (r.n == 0) { /* the fixed choices have valid layouts (checked): memory is why */
        char inv[200] = "";
        if (r.invalid) snprintf(inv, sizeof inv, " (first: %s)", r.first_invalid);
        td_fail("plan: no layout fits: %ld too big for %.0f GB per device (the smallest needs %.1f GB), %ld invalid%s; "
                "give more --gpus, a smaller model or fewer fixed choices",
                r.too_big, c.mem_bytes / 1e9, r.smallest_too_big / 1e9, r.invalid, inv);
    }
    if (json) {
        td_plan_print_json(&out, &r, top);
        td_plan_result_free(&r);
        return 0;
    }
    const char *note = model_s ? td_plan_model_note(model_s) : NULL;
    if (m.E > 0) {
        char blocks[96];
        if (td_plan_moe_layers(&m) == m.L) snprintf(blocks, sizeof blocks, "in every block");
        else
            snprintf(blocks, sizeof blocks, "in %d of the %d blocks (0, %d, ...; the others dense, MLP hidden %d)",
                     td_plan_moe_layers(&m), m.L, m.moe_every, m.F ? m.F : 4 * m.C);
        printf("model %s%s%s%s: %s, %d layers, %d heads, %d kv heads, hidden %d, mixture of experts: %d experts of "
               "MLP hidden %d, top-%d, %d shared, %s, vocabulary %d, sequence %d, %s head: %.3fB parameters, %.3fB "
               "active per token\n",
               m.name, note ? " (" : "", note ? note : "", note ? ")" : "", m.arch == TD_ARCH_LLAMA ? "llama" : "gpt2",
               m.L, m.H, m.KV ? m.KV : m.H, m.C, m.E, m.moe_ffn, m.K, m.S, blocks, m.V, m.T,
               m.tie == TD_TIE_ON ? "tied" : "untied", td_plan_params(&m) / 1e9, td_plan_params_active(&m) / 1e9);
    } else if (m.arch == TD_ARCH_LLAMA)
        printf("model %s%s%s%s: llama, %d layers, %d heads, %d kv heads, hidden %d, MLP hidden %d, vocabulary %d, "
               "sequence %d, %s head: %.3fB parameters (the model's table)\n",
               m.name, note ? " (" : "", note ? note : "", note ? ")" : "", m.L, m.H, m.KV, m.C, m.F, m.V, m.T,
               m.tie == TD_TIE_ON ? "tied" : "untied", td_plan_params(&m) / 1e9);
    else
        printf("model %s%s%s%s: %d layers, %d heads, hidden %d, vocabulary %d, sequence %d: %.2fB parameters "
               "(Megatron eq. 2)\n",
               m.name, note ? " (" : "", note ? note : "", note ? ")" : "", m.L, m.H, m.C, m.V, m.T,
               td_plan_params(&m) / 1e9);
    printf("cluster %s: %d devices, %d per node, %.0f GB at %.0f GB/s, %.1f TFLOP/s peak (GEMMs at %.1f%%), "
           "%.0f GB/s and %.3g us in a node, %.1f GB/s and %.3g us between nodes; global batch %d\n",
           c.name, c.gpus, c.gpus_per_node, c.mem_bytes / 1e9, c.hbm_bw / 1e9, c.peak_flops / 1e12,
           100 * c.gemm_eff, c.intra_bw / 1e9, c.intra_lat * 1e6, c.inter_bw / 1e9, c.inter_lat * 1e6, batch);
    if (batch_note) printf("global batch %d: the published run's (%s; --global-batch sets another)\n", batch, pub->name);
    printf("%d layouts fit; %ld do not fit in memory", r.n, r.too_big);
    if (r.too_big) printf(" (the smallest needs %.1f GB)", r.smallest_too_big / 1e9);
    printf("; %ld invalid", r.invalid);
    if (r.invalid) printf(" (first: %s)", r.first_invalid);
    printf("\n");
    if (m.E > 0)
        printf("TFLOP/s per device counts the model's active FLOPs (6 per weight a token meets: K + S experts of each "
               "MoE block and its router, + attention's; 4/3 of them with full recomputation); MFU counts them "
               "without\n");
    else if (m.arch == TD_ARCH_LLAMA)
        printf("TFLOP/s per device counts the model's FLOPs (6 per weight and token + attention's, "
               "td_gpt_flops_per_token; 4/3 of them with full recomputation); MFU counts them without\n");
    else
        printf("TFLOP/s per device counts Megatron's FLOPs (eq. 3: 96 with full recomputation, 72 without); "
               "MFU counts the model's (72)\n");
    td_plan_print_table(&out, &r, top);
    td_plan_print_command(&out, &r);
    const td_plan_eval *best = &r.plans[0];
    if (best->lay.tp > 1 || best->lay.pp > 1 || td_plan_cp(&best->lay) > 1) td_plan_print_zero3(&out, best);
    if (m.E > 0) td_plan_print_moe(&out, &fix, pub, n_pub);
    td_plan_result_free(&r);
    return 0;
}
