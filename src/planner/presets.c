/* Model and cluster presets of `trident plan`. Every cluster figure is the
 * vendor's data-sheet value, cited beside it; the one figure no data sheet
 * gives (the achievable GEMM fraction of peak) is cited from its measurement. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include "trident/base.h"
#include "trident/compat.h"
#include "trident/files.h"
#include "trident/planner.h"
#include "trident/schedule.h"

typedef struct {
    td_plan_model m;
    const char *note;
    double rope_theta;     /* llama: the rotary base (0: gpt2) */
    td_rope_scaling scale; /* llama 3.1's long-context scaling (factor 0: none) */
} model_row;

/* Llama 3.1's rope_scaling (rope_type "llama3") in both config.json files */
#define LLAMA31_SCALING {8.0, 1.0, 4.0, 8192}
#define LLAMA TD_ARCH_LLAMA
#define NO_SCALING {0, 0, 0, 0}
/* a gpt2 row: learned positions, a tied head, no rotary base */
#define GPT2_ROW(name, l, h, c, v, t, note) {{name, l, h, c, v, t, TD_ARCH_GPT2, 0, 0, TD_TIE_ON, 0, 0, 0, 0, 0}, note, 0, NO_SCALING}

static const model_row models[] = {
    /* GPT-2 (Radford et al. 2019, table 2; "350m" is the 24-layer 1024-wide
     * model, "1.5b" the 48-layer one), vocabulary 50257, context 1024 */
    GPT2_ROW("gpt2-124m", 12, 12, 768, 50257, 1024, "GPT-2 small, Radford et al. 2019, table 2"),
    GPT2_ROW("gpt2-350m", 24, 16, 1024, 50257, 1024, "GPT-2 medium, Radford et al. 2019, table 2"),
    GPT2_ROW("gpt2-1.5b", 48, 25, 1600, 50257, 1024, "GPT-2, Radford et al. 2019, table 2"),
    /* GPT-3: Brown et al. 2020, "Language Models are Few-Shot Learners",
     * table 2.1 (n_layers, d_model, n_heads, d_head), context 2048 (n_ctx,
     * section 2.1), GPT-2's vocabulary of 50257. Two rows of the table do
     * not add up and are taken as d_head says: GPT-3 XL lists 24 heads of
     * d_head 128 for d_model 2048, and 2048 does not divide by 24: 16 heads
     * (2048 / 128); GPT-3 13B lists d_model 5140 with 40 heads of 128, and
     * 5140 does not divide by 40: d_model 5120 (40 x 128). Parameters and
     * FLOPs do not depend on the head count; tp must divide it. */
    GPT2_ROW("gpt3-125m", 12, 12, 768, 50257, 2048, "GPT-3 Small, Brown et al. 2020, table 2.1"),
    GPT2_ROW("gpt3-350m", 24, 16, 1024, 50257, 2048, "GPT-3 Medium, Brown et al. 2020, table 2.1"),
    GPT2_ROW("gpt3-760m", 24, 16, 1536, 50257, 2048, "GPT-3 Large, Brown et al. 2020, table 2.1"),
    GPT2_ROW("gpt3-1.3b", 24, 16, 2048, 50257, 2048,
     "GPT-3 XL, Brown et al. 2020, table 2.1, with 16 heads: the table's 24 do not divide d_model 2048; "
     "16 are its d_head 128"),
    GPT2_ROW("gpt3-2.7b", 32, 32, 2560, 50257, 2048, "GPT-3 2.7B, Brown et al. 2020, table 2.1"),
    GPT2_ROW("gpt3-6.7b", 32, 32, 4096, 50257, 2048, "GPT-3 6.7B, Brown et al. 2020, table 2.1"),
    GPT2_ROW("gpt3-13b", 40, 40, 5120, 50257, 2048,
     "GPT-3 13B, Brown et al. 2020, table 2.1, with d_model 5120: the table's 5140 does not divide by its "
     "40 heads; 5120 is 40 x its d_head 128"),
    GPT2_ROW("gpt3-175b", 96, 96, 12288, 50257, 2048, "GPT-3 175B, Brown et al. 2020, table 2.1"),
    /* Megatron-LM (Narayanan et al. 2021) table 1: vocabulary 51200, sequence 2048 */
    GPT2_ROW("megatron-1.7b", 24, 24, 2304, 51200, 2048, "Megatron-LM, Narayanan et al. 2021, table 1"),
    GPT2_ROW("megatron-3.6b", 30, 32, 3072, 51200, 2048, "Megatron-LM, Narayanan et al. 2021, table 1"),
    GPT2_ROW("megatron-7.5b", 36, 32, 4096, 51200, 2048, "Megatron-LM, Narayanan et al. 2021, table 1"),
    GPT2_ROW("megatron-18b", 40, 48, 6144, 51200, 2048, "Megatron-LM, Narayanan et al. 2021, table 1"),
    GPT2_ROW("megatron-39b", 48, 64, 8192, 51200, 2048, "Megatron-LM, Narayanan et al. 2021, table 1"),
    GPT2_ROW("megatron-76b", 60, 80, 10240, 51200, 2048, "Megatron-LM, Narayanan et al. 2021, table 1"),
    GPT2_ROW("megatron-145b", 80, 96, 12288, 51200, 2048, "Megatron-LM, Narayanan et al. 2021, table 1"),
    GPT2_ROW("megatron-310b", 96, 128, 16384, 51200, 2048, "Megatron-LM, Narayanan et al. 2021, table 1"),
    GPT2_ROW("megatron-530b", 105, 128, 20480, 51200, 2048, "Megatron-LM, Narayanan et al. 2021, table 1"),
    GPT2_ROW("megatron-1t", 128, 160, 25600, 51200, 2048, "Megatron-LM, Narayanan et al. 2021, table 1"),
    /* The Llama family as its Hugging Face config.json files publish it
     * (num_hidden_layers, num_attention_heads, num_key_value_heads,
     * hidden_size, intermediate_size, vocab_size, max_position_embeddings,
     * rope_theta, tie_word_embeddings; rms_norm_eps is 1e-5 in each, the
     * model's default). The planner's parameter counts are printed beside
     * the published sizes in docs/planner-cli.md. */
    {{"smollm-135m", 30, 9, 576, 49152, 2048, LLAMA, 3, 1536, TD_TIE_ON, 0, 0, 0, 0, 0},
     "SmolLM-135M, HuggingFaceTB/SmolLM-135M config.json (Allal et al. 2024, the SmolLM blog post)", 10000, NO_SCALING},
    {{"tinyllama-1.1b", 22, 32, 2048, 32000, 2048, LLAMA, 4, 5632, TD_TIE_OFF, 0, 0, 0, 0, 0},
     "TinyLlama-1.1B, TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T config.json (Zhang et al. 2024)",
     10000, NO_SCALING},
    {{"llama2-7b", 32, 32, 4096, 32000, 4096, LLAMA, 32, 11008, TD_TIE_OFF, 0, 0, 0, 0, 0},
     "Llama 2 7B, meta-llama/Llama-2-7b-hf config.json (Touvron et al. 2023, table 1)", 10000, NO_SCALING},
    {{"llama3-8b", 32, 32, 4096, 128256, 8192, LLAMA, 8, 14336, TD_TIE_OFF, 0, 0, 0, 0, 0},
     "Llama 3 8B, meta-llama/Meta-Llama-3-8B config.json (Dubey et al. 2024, table 3)", 500000, NO_SCALING},
    {{"llama3.1-70b", 80, 64, 8192, 128256, 131072, LLAMA, 8, 28672, TD_TIE_OFF, 0, 0, 0, 0, 0},
     "Llama 3.1 70B, meta-llama/Llama-3.1-70B config.json (Dubey et al. 2024, table 3), rope_scaling llama3: "
     "factor 8, low 1, high 4, original context 8192",
     500000, LLAMA31_SCALING},
    {{"llama3.1-405b", 126, 128, 16384, 128256, 131072, LLAMA, 8, 53248, TD_TIE_OFF, 0, 0, 0, 0, 0},
     "Llama 3.1 405B, meta-llama/Llama-3.1-405B config.json (Dubey et al. 2024, table 3), rope_scaling llama3: "
     "factor 8, low 1, high 4, original context 8192",
     500000, LLAMA31_SCALING},
    /* Mixture of experts, Llama blocks with E SwiGLU experts of moe_ffn
     * (here the config's intermediate_size) in every block: num_local_experts
     * (num_experts), num_experts_per_tok from the same config.json files.
     * Mixtral's sequence is the one Megatron-core's published run trained
     * (4096; max_position_embeddings is 32768): the run the plan is
     * compared with. OLMoE normalizes q and k (q_norm, k_norm: 4096
     * parameters a block, 65,536 in all, 0.001%), which is not modelled. */
    {{"mixtral-8x7b", 32, 32, 4096, 32000, 4096, LLAMA, 8, 14336, TD_TIE_OFF, 8, 2, 1, 14336, 0},
     "Mixtral 8x7B, mistralai/Mixtral-8x7B-v0.1 config.json (Jiang et al. 2024), sequence 4096 as Megatron-core's "
     "published run (max_position_embeddings 32768)",
     1e6, NO_SCALING},
    {{"olmoe-1b-7b", 16, 16, 2048, 50304, 4096, LLAMA, 16, 1024, TD_TIE_OFF, 64, 8, 1, 1024, 0},
     "OLMoE-1B-7B, allenai/OLMoE-1B-7B-0924 config.json (Muennighoff et al. 2024), without its q and k norms "
     "(65,536 parameters)",
     10000, NO_SCALING},
};
#define N_MODELS ((int)(sizeof models / sizeof models[0]))

/* the GPT-3 paper's model names */
static const struct {
    const char *alias, *name;
} aliases[] = {{"gpt3-small", "gpt3-125m"}, {"gpt3-medium", "gpt3-350m"}, {"gpt3-large", "gpt3-760m"},
               {"gpt3-xl", "gpt3-1.3b"}};

static const model_row *find_model(const char *name) {
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (strcmp(aliases[i].alias, name) == 0) name = aliases[i].name;
    for (int i = 0; i < N_MODELS; i++)
        if (strcmp(models[i].m.name, name) == 0) return &models[i];
    return NULL;
}

/* The MoE fields: a dense model's are the rules table's moe-flags (it has
 * no experts to shape); an MoE model's defaults (top-2, every block, the
 * dense F) and sizes. */
static void moe_finish(td_plan_model *m) {
    if (m->E <= 0) {
        char flag[64] = "";
        if (m->K) snprintf(flag, sizeof flag, "--moe-top-k %d", m->K);
        else if (m->moe_every) snprintf(flag, sizeof flag, "--moe-every %d", m->moe_every);
        else if (m->moe_ffn) snprintf(flag, sizeof flag, "--moe-ffn-hidden %d", m->moe_ffn);
        else if (m->S) snprintf(flag, sizeof flag, "--moe-shared-experts %d", m->S);
        td_compat_cfg c;
        td_compat_cfg_init(&c);
        c.moe_flag_text = flag[0] ? flag : NULL;
        td_compat_check(&c, TD_COMPAT_AT_OPTIONS);
        return;
    }
    if (!m->K) m->K = 2; /* Megatron-core's --moe-router-topk default */
    if (!m->moe_every) m->moe_every = 1;
    if (!m->moe_ffn) m->moe_ffn = m->F ? m->F : 4 * m->C;
    TD_CHECK(m->K >= 1 && m->K <= m->E, "--moe-top-k %d: a token's experts are 1 to the %d of --moe-experts", m->K,
             m->E);
    TD_CHECK(m->moe_every >= 1 && m->moe_ffn >= 1 && m->S >= 0,
             "--moe-every, --moe-ffn-hidden must be positive, --moe-shared-experts not negative");
}

void td_plan_model_finish(td_plan_model *m) {
    /* gpt2's defaults; sizes beyond the engine's limits stay plannable */
    if (m->arch != TD_ARCH_LLAMA && !m->KV && !m->F && m->tie != TD_TIE_OFF) {
        TD_CHECK(m->arch == TD_ARCH_GPT2, "unknown architecture %d", m->arch);
        if (!m->tie) m->tie = TD_TIE_ON;
        moe_finish(m);
        return;
    }
    /* the model's own defaults and checks; L, T and V play no part in them
     * (a copy within the engine's limits, which the planner need not keep) */
    td_gpt_config cfg = {.L = 1, .H = m->H, .C = m->C, .T = 1, .V = 1, .arch = (td_arch)m->arch,
                         .KV = m->KV, .F = m->F, .tie = m->tie};
    td_gpt_config_finish(&cfg);
    m->KV = cfg.KV, m->F = cfg.F, m->tie = cfg.tie;
    moe_finish(m);
}

int td_plan_model_preset(const char *name, td_plan_model *m) {
    const model_row *r = find_model(name);
    if (!r) return -1;
    *m = r->m;
    td_plan_model_finish(m);
    return 0;
}

int td_plan_model_preset_config(const char *name, td_gpt_config *cfg) {
    const model_row *r = find_model(name);
    if (!r) return -1;
    const td_plan_model *m = &r->m;
    *cfg = (td_gpt_config){.L = m->L, .H = m->H, .C = m->C, .T = m->T, .V = m->V, .arch = (td_arch)m->arch,
                           .KV = m->KV, .F = m->F, .tie = m->tie, .rope_theta = r->rope_theta,
                           .rope_scaling = r->scale,
                           .moe = {.E = m->E, .K = m->K, .every = m->moe_every, .F = m->moe_ffn, .shared = m->S}};
    return 0;
}

const char *td_plan_model_note(const char *name) {
    const model_row *r = find_model(name);
    return r ? r->note : NULL;
}

const char *td_plan_model_presets(void) {
    static char list[1024];
    if (!list[0]) {
        size_t n = 0;
        for (int i = 0; i < N_MODELS; i++)
            n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", i ? ", " : "", models[i].m.name);
        for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
            n += (size_t)snprintf(list + n, sizeof list - n, ", %s (= %s)", aliases[i].alias, aliases[i].name);
    }
    return list;
}

void td_plan_model_presets_print(void) {
    printf("model presets (--model): layers, heads, hidden, vocabulary, sequence; source\n");
    for (int i = 0; i < N_MODELS; i++) {
        const td_plan_model *m = &models[i].m;
        if (m->arch == TD_ARCH_LLAMA) continue;
        printf("  %-14s %4d %4d %6d %6d %5d  %s\n", m->name, m->L, m->H, m->C, m->V, m->T, models[i].note);
    }
    printf("llama presets: layers, heads, kv heads, hidden, MLP hidden, vocabulary, sequence, rope theta, "
           "tied head; source\n");
    for (int i = 0; i < N_MODELS; i++) {
        const td_plan_model *m = &models[i].m;
        if (m->arch != TD_ARCH_LLAMA || m->E) continue;
        printf("  %-14s %4d %4d %3d %6d %6d %6d %6d %6.0f %-3s  %s\n", m->name, m->L, m->H, m->KV, m->C, m->F,
               m->V, m->T, models[i].rope_theta, m->tie == TD_TIE_ON ? "yes" : "no", models[i].note);
    }
    printf("mixture-of-experts presets (llama blocks): layers, heads, kv heads, hidden, expert MLP hidden, experts, "
           "active per token, vocabulary, sequence, rope theta, tied head; source\n");
    for (int i = 0; i < N_MODELS; i++) {
        const td_plan_model *m = &models[i].m;
        if (!m->E) continue;
        printf("  %-14s %4d %4d %3d %6d %6d %4d %3d %6d %6d %7.0f %-3s  %s\n", m->name, m->L, m->H, m->KV, m->C,
               m->moe_ffn, m->E, m->K, m->V, m->T, models[i].rope_theta, m->tie == TD_TIE_ON ? "yes" : "no",
               models[i].note);
    }
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        printf("  %-14s = %s\n", aliases[i].alias, aliases[i].name);
}

/* What each cluster preset's step times were checked against, as
 * (predicted - measured) / measured over the validated layouts.
 * - A100: Megatron-LM's table 1 (Narayanan et al. 2021), six rows as its
 *   scripts ran them on Selene (DGX A100 80GB, 8 HDR ports per node: the
 *   a100-hdr preset), `test_planner megatron`: predicted throughput 10.8%
 *   (39.1B: 152.9 TFLOP/s against 138 published) to 20.1% (1.7B: 164.5
 *   against 137) above the paper's, so step times 9.7% to 16.7% short
 *   (2026-12-02, commit 0da7671; test_planner checks these bounds against
 *   the rows). Only A100 with HDR was measured; the EDR and NDR presets
 *   differ in the network.
 * - local: bench/bench_plan.sh, nine layouts on 2 and 4 ranks of the
 *   2-core machine the model was built on: every layout within 11% on a
 *   quiet run (MAPE 2.1%), within 18% on a loaded one (MAPE 7.3%) (README,
 *   published at commit 83272fe, 2026-12-02). The band is the wider run's.
 * - H100: no published run of a dense model has been predicted; no band.
 *   One published mixture-of-experts run (Megatron-core's Mixtral 8x7B,
 *   td_plan_published_runs below) is predicted beside MoE plans: a single
 *   point, which makes no band. */
static const td_plan_validation megatron_t1 = {
    "megatron-t1", 137.0 / 164.5 - 1, 138.0 / 152.9 - 1,
    "Megatron-LM table 1 (Narayanan et al. 2021): 6 rows on A100 80GB with HDR as its scripts ran them "
    "(full recomputation, fp16, tp <= 8, pp <= 64, no ZeRO or sequence parallelism: other kinds of layout "
    "were not measured), predicted 10.8-20.1% above the published TFLOP/s (test_planner megatron, "
    "2026-12-02, commit 0da7671)"};
static const td_plan_validation bench_plan = {
    "bench_plan", -0.18, 0.18,
    "bench/bench_plan.sh: 9 layouts on 2 and 4 ranks of a 2-core machine (the one the model was built on), "
    "every layout within 11% on a quiet run (MAPE 2.1%) and 18% on a loaded one (MAPE 7.3%) "
    "(README, commit 83272fe, 2026-12-02); another machine's calibration is not validated"};

/* Published runs of the presets (td_plan_published_runs).
 * - Mixtral 8x7B: NVIDIA/Megatron-LM, megatron/core/transformer/moe/README.md.
 *   As of Megatron-core v0.8 (the file at commit 0b4c4cf) it reads "This
 *   boosts Mixtral 8X7B bf16 training to achieve 438 TFLOPS as of MCore
 *   v0.8", and under "Reference Best Parallel Mapping" of MCore v0.8:
 *   Mixtral 8x7B (dropless), vocabulary 32K, all-to-all dispatcher, BF16,
 *   64 GPUs, sequence 4096, TP 1, EP 8, PP 4, VP 8, MBS 1, GBS 256, on
 *   8xH100 80GB HBM3 servers with 4th-generation NVLink and 8x400 Gbit/s
 *   InfiniBand (the h100-ndr preset), PyTorch 24.04 container with
 *   TransformerEngine 1.9. A later version of the file (commit 022bcb5)
 *   reads 468 TFLOPS with MCore v0.9, the same mapping table, PyTorch 24.09
 *   and TransformerEngine 1.11. The document gives the figure and the
 *   mapping side by side; it does not say in so many words that the figure
 *   was measured with that mapping. Laid out here: dp 16 (edp 2), pp 4
 *   interleaved with VP 8 read as 8 chunks of one layer per stage
 *   (Megatron's virtual pipeline size), micro-batch 1, 16 micro-batches,
 *   the distributed optimizer (ZeRO-1: the README's end-to-end practice and
 *   its example script use --use-distributed-optimizer with
 *   --overlap-grad-reduce --overlap-param-gather). It names no recomputation;
 *   its attention is TransformerEngine's fused (flash) attention, which
 *   keeps no s x s scores and recomputes them in its backward: the
 *   planner's selective recomputation (the scores' memory dropped, their
 *   GEMMs and softmax run again). */
#define MIXTRAL_MCORE_LAYOUT {16, 1, 4, 1, 1, 16, TD_SCHED_INTERLEAVED, 8, TD_PLAN_RC_SELECTIVE, 0, 1, 0, 8, 1}
#define MIXTRAL_MCORE_RUN "Mixtral 8x7B bf16, dropless, all-to-all dispatcher, 64 H100 80GB (8 per node, NVLink 4, " \
    "8x400 Gb/s InfiniBand), sequence 4096, TP 1 EP 8 PP 4 VP 8, micro-batch 1, global batch 256"
static const td_plan_published published_runs[] = {
    {"mixtral-8x7b", "h100-ndr", 64, 256, MIXTRAL_MCORE_LAYOUT, 438, "mcore-0.8",
     "NVIDIA/Megatron-LM megatron/core/transformer/moe/README.md as of MCore v0.8 (commit 0b4c4cf): 438 TFLOPS "
     "per GPU; " MIXTRAL_MCORE_RUN "; PyTorch 24.04, TransformerEngine 1.9"},
    {"mixtral-8x7b", "h100-ndr", 64, 256, MIXTRAL_MCORE_LAYOUT, 468, "mcore-0.9",
     "the same README as of MCore v0.9 (commit 022bcb5): 468 TFLOPS per GPU, the same mapping table; "
     "PyTorch 24.09, TransformerEngine 1.11"},
};

const td_plan_published *td_plan_published_runs(const char *model, int *n) {
    const int all = (int)(sizeof published_runs / sizeof published_runs[0]);
    int first = -1;
    *n = 0;
    for (int i = 0; i < all; i++)
        if (strcmp(published_runs[i].model, model) == 0) {
            if (first < 0) first = i;
            ++*n;
        }
    return first < 0 ? NULL : &published_runs[first];
}

/* Devices.
 * A100 SXM4 80GB, NVIDIA A100 Tensor Core GPU data sheet (2021): BF16/FP16
 *   tensor core 312 TFLOPS dense (624 with sparsity), 80 GB HBM2e at
 *   2,039 GB/s, NVLink 600 GB/s (bidirectional: 300 GB/s per direction).
 * H100 SXM5 80GB, NVIDIA H100 Tensor Core GPU data sheet: BF16 tensor core
 *   1,979 TFLOPS with sparsity (989.4 dense), 80 GB HBM3 at 3.35 TB/s,
 *   NVLink 900 GB/s (450 GB/s per direction).
 * Achievable fraction of peak for large GEMMs: the best bf16 matmul over a
 *   sweep of shapes, S. Bekman, "Machine Learning Engineering", chapter
 *   compute/accelerator, "Maximum Achievable Matmul FLOPS comparison table"
 *   (mamf-finder.py): A100 SXM 267.9 of 312 TFLOPS (85.9%), H100 SXM 792.1
 *   of 989 (80.1%), CUDA 12.1.
 * Networks: one InfiniBand port per GPU (DGX A100 and DGX H100 system data
 *   sheets: 8 single-port compute adapters per 8-GPU node), per direction
 *   EDR 100 Gb/s = 12.5 GB/s, HDR 200 Gb/s = 25 GB/s, NDR 400 Gb/s = 50 GB/s
 *   (InfiniBand Trade Association roadmap; Mellanox ConnectX-5/6/7 data
 *   sheets).
 * What software achieves of those peaks (measurements, not data sheets):
 * - memory: a streaming read on an A100-SXM4-80GB reaches 1.80 of its
 *   2.04 TB/s, 88% (Nsight Compute agrees; NVIDIA developer forums, "Trouble
 *   to reach peak bandwidth of A100", which also cites a GTC talk's best
 *   kernel at about 90%). The elementwise, softmax and dropout kernels are
 *   charged at 88% of the data sheet. H100: no measurement here; the same
 *   fraction is assumed.
 * - attention's batched GEMMs (one per head, inner size h/a = 64-160):
 *   torch.bmm fp16 of shape 512 x 1024 x 1024 x 128 runs at 132.4 TFLOP/s
 *   on an A100 (CUDA 11.7; pytorch/pytorch issue 83272), 42% of peak: each
 *   element of the s x s scores costs 2 h/a FLOPs per 2 bytes written or
 *   read, below the A100's 153 FLOP/byte ridge. H100: the same fraction of
 *   peak is assumed.
 * - NCCL all-reduce bus bandwidth on 8 A100-SXM4-80GB over NVLink/NVSwitch:
 *   about 200 GB/s of the 300 (nccl-tests issues 149 and 178: ~200 and
 *   208 GB/s), 2/3; between nodes over HDR, 96 GB/s of a node's 100 GB/s
 *   of ports at the largest message (nccl-tests issue 119: 3 nodes of 8
 *   A100 with 4 HDR ports each), 96%. Both fractions are applied to every
 *   preset's links.
 * Latencies are no data-sheet figure: a ring step costs the collective
 *   library's per-step software latency more than the wire's (ConnectX-6:
 *   under 600 ns); 2 us inside a node and 5 us between nodes are
 *   order-of-magnitude values, and change the large messages planned here
 *   by well under 1%. */
/* Gradient accumulation: PyTorch's autograd steals a parameter's first
 * gradient and adds each later one in place ("variable_grad += new_grad",
 * torch/csrc/autograd/functions/accumulate_grad.h), a separate pass that
 * reads both 2-byte gradients and writes the sum: 6 bytes per parameter per
 * micro-batch after the first. Megatron-LM 2021 accumulated so: Float16Module
 * makes the parameters and their gradients fp16, and they stayed in
 * param.grad (FP16OptimizerWithFP16Params copies model_param.grad to the fp32
 * main gradients; the contiguous-buffer DDP that came later in 2021 was off
 * by default, use_contiguous_buffers_in_ddp False). Software that adds into
 * the accumulated gradient inside the weight-gradient GEMM (beta = 1) moves
 * none of it. */
#define GRAD_ACC_BYTES 6.0

typedef struct {
    const char *name;
    double mem_gb, tflops, eff, hbm_gbs, nvlink_gbs, ib_gbs;
} cluster_row;

#define HBM_ACHIEVED (1.80 / 2.04)
#define BMM_FRACTION (132.4 / 312)
#define NVLINK_ACHIEVED (200.0 / 300)
#define IB_ACHIEVED (96.0 / 100)

static const cluster_row clusters[] = {
    {"a100-edr", 80, 312, 267.9 / 312, 2039, 300, 12.5},
    {"a100-hdr", 80, 312, 267.9 / 312, 2039, 300, 25},
    {"a100-ndr", 80, 312, 267.9 / 312, 2039, 300, 50},
    {"h100-ndr", 80, 989.4, 792.1 / 989, 3350, 450, 50},
};
#define N_CLUSTERS ((int)(sizeof clusters / sizeof clusters[0]))

const char *td_plan_cluster_presets(void) { return "a100-edr, a100-hdr, a100-ndr, h100-ndr, local"; }

void td_plan_profile_path(char *buf, size_t n) {
    const char *env = getenv("TRIDENT_PROFILE"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (env && *env)
        snprintf(buf, n, "%s", env);
    else if (xdg && *xdg)
        snprintf(buf, n, "%s/trident/profile.json", xdg);
    else
        snprintf(buf, n, "%s/.cache/trident/profile.json", home && *home ? home : ".");
}

int td_plan_profile_load(const char *path, td_profile *p, td_err *e) {
    const char *why;
    FILE *f = td_fopen_input(path, NULL, &why);
    if (!f) return td_err_set(e, "cannot open the calibration profile %s: %s", path, why);
    enum { CAP = 1 << 20 };
    char *buf = malloc(CAP);
    size_t n = buf ? fread(buf, 1, CAP, f) : 0;
    int big = n == CAP;
    fclose(f);
    if (!buf) return td_err_set(e, "out of memory reading %s", path);
    int rc = big ? td_err_set(e, "%s: larger than 1 MiB, not a profile", path) : td_profile_parse(buf, n, p, e);
    if (rc && !big) {
        char msg[sizeof e->msg];
        snprintf(msg, sizeof msg, "%s", e->msg);
        td_err_set(e, "calibration profile %s: %s", path, msg);
    }
    free(buf);
    return rc;
}

void td_plan_cluster_local(const td_profile *p, int ranks, int threads, td_plan_cluster *c) {
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "local");
    int total = ranks * threads, busy = total < p->cores ? total : p->cores, bt = 0;
    c->gpus = ranks;
    c->gpus_per_node = ranks; /* one machine */
    c->mem_bytes = p->mem_bytes / ranks;
    c->elem_bytes = 4;
    c->gemm_eff = 1;
    /* the shared-memory transport's copies run on the cores the compute
     * needs: nothing overlaps */
    c->dp_serial = 1;
    /* bt threads side by side reached R in all; busy threads reach R busy /
     * bt, shared by the total threads (time-sliced beyond the cores) */
    for (int k = 0; k < p->n_gemm; k++)
        if (p->gemm[k].threads <= busy && p->gemm[k].threads > bt) bt = p->gemm[k].threads;
    if (!bt) bt = p->gemm[0].threads;
    double share = (double)busy / bt * threads / total;
    for (int k = 0; k < p->n_gemm && c->n_rates < 8; k++) {
        if (p->gemm[k].threads != bt) continue;
        int i = c->n_rates++;
        while (i > 0 && c->rate_n[i - 1] > p->gemm[k].n) { /* sorted by n */
            c->rate_n[i] = c->rate_n[i - 1], c->rate_flops[i] = c->rate_flops[i - 1];
            i--;
        }
        /* t threads reach at least what fewer reached (they could idle):
         * a lower figure is another job's interference during calibration */
        double g = p->gemm[k].gflops;
        for (int j = 0; j < p->n_gemm; j++)
            if (p->gemm[j].n == p->gemm[k].n && p->gemm[j].threads < bt && p->gemm[j].gflops > g) g = p->gemm[j].gflops;
        c->rate_n[i] = p->gemm[k].n;
        c->rate_flops[i] = g * 1e9 * share;
    }
    c->peak_flops = c->rate_flops[c->n_rates - 1];
    /* memory bandwidth by copy size, scaled alike */
    int mt = 0;
    for (int k = 0; k < p->n_bw; k++)
        if (p->bw[k].threads <= busy && p->bw[k].threads > mt) mt = p->bw[k].threads;
    if (!mt) mt = p->bw[0].threads;
    for (int k = 0; k < p->n_bw && c->n_bws < 8; k++) {
        if (p->bw[k].threads != mt) continue;
        int i = c->n_bws++;
        while (i > 0 && c->bw_bytes[i - 1] > p->bw[k].bytes) {
            c->bw_bytes[i] = c->bw_bytes[i - 1], c->bw_rate[i] = c->bw_rate[i - 1];
            i--;
        }
        double g = p->bw[k].gbs; /* at least what fewer threads reached, as above */
        for (int j = 0; j < p->n_bw; j++)
            if (p->bw[j].bytes == p->bw[k].bytes && p->bw[j].threads < mt && p->bw[j].gbs > g) g = p->bw[j].gbs;
        c->bw_bytes[i] = p->bw[k].bytes;
        c->bw_rate[i] = g * 1e9 * busy / mt * threads / total;
    }
    c->hbm_bw = c->bw_rate[c->n_bws - 1];
    /* the optimizer step per element, scaled alike (the measurement at the
     * most threads up to busy, at least what fewer reached). Measured, not
     * derived from bandwidth: here one thread stepped 286M elements/s, 8 GB/s
     * of its 28 bytes each, where a copy ran at 41 GB/s, so the step is
     * bound by its square root and division, not by memory */
    int ot = 0;
    for (int k = 0; k < p->n_opt; k++)
        if (p->opt[k].threads <= busy && p->opt[k].threads > ot) ot = p->opt[k].threads;
    if (!ot) ot = p->opt[0].threads;
    double orate = 0;
    for (int k = 0; k < p->n_opt; k++)
        if (p->opt[k].threads <= ot && p->opt[k].melems > orate) orate = p->opt[k].melems;
    c->optim_rate = orate * 1e6 * busy / ot * threads / total;
    /* the all-reduce fit of the largest group up to ranks: bus bandwidth
     * and the per-ring-step latency of td_plan_allreduce_s */
    int gr = 0;
    for (int k = 0; k < p->n_coll; k++)
        if (p->coll[k].op == TD_PROF_ALLREDUCE && p->coll[k].ranks <= (ranks > 2 ? ranks : 2) &&
            p->coll[k].ranks > gr) {
            gr = p->coll[k].ranks;
            c->intra_bw = c->inter_bw = p->coll[k].gbs * 1e9;
            c->intra_lat = c->inter_lat = p->coll[k].alpha_us * 1e-6 / (2.0 * (gr - 1));
        }
    if (!gr) c->intra_bw = c->inter_bw = p->p2p_gbs * 1e9, c->intra_lat = c->inter_lat = p->p2p_alpha_us * 1e-6;
    c->oversub = total > p->cores ? (double)total / p->cores : 0;
    c->p2p_bw = p->p2p_gbs * 1e9;
    c->p2p_lat = p->p2p_alpha_us * 1e-6;
    c->validation = &bench_plan;
    snprintf(c->validated_on, sizeof c->validated_on, "local");
}

/* y at x, log-linear in x between the measured points xs (ascending),
 * flat beyond them */
static double interp(const double *xs, const double *ys, int n, double x) {
    if (x <= xs[0] || n == 1) return ys[0];
    for (int i = 1; i < n; i++)
        if (x <= xs[i]) {
            double f = log(x / xs[i - 1]) / log(xs[i] / xs[i - 1]);
            return ys[i - 1] + f * (ys[i] - ys[i - 1]);
        }
    return ys[n - 1];
}

double td_plan_gemm_rate(const td_plan_cluster *c, double M, double N, double K) {
    if (c->n_rates == 0) return c->peak_flops * c->gemm_eff;
    /* the cube of the same arithmetic intensity (a model of the measured
     * cubes, not a measurement of other shapes): an M x N x K product does
     * 2 MNK FLOPs per MK + NK + MN elements moved (and packed), a cube 2n/3
     * per element; a thin product (few rows: one sequence's tokens) packs
     * its whole weight for few FLOPs and runs at a small cube's rate */
    return interp(c->rate_n, c->rate_flops, c->n_rates, 3 * M * N * K / (M * K + N * K + M * N));
}

double td_plan_mem_rate(const td_plan_cluster *c, double bytes) {
    if (c->n_bws == 0) return c->hbm_bw;
    return interp(c->bw_bytes, c->bw_rate, c->n_bws, bytes);
}

int td_plan_cluster_preset(const char *name, td_plan_cluster *c, char *err, size_t errlen) {
    memset(c, 0, sizeof *c);
    if (strcmp(name, "local") == 0) {
        char path[512];
        td_profile p;
        td_err e;
        td_plan_profile_path(path, sizeof path);
        if (td_plan_profile_load(path, &p, &e) != 0) {
            snprintf(err, errlen, "--cluster local: %s; run `trident plan --calibrate` on this machine first "
                     "(or set TRIDENT_PROFILE)", e.msg);
            return -1;
        }
        td_plan_cluster_local(&p, 1, 1, c);
        return 0;
    }
    for (int i = 0; i < N_CLUSTERS; i++) {
        const cluster_row *r = &clusters[i];
        if (strcmp(r->name, name) != 0) continue;
        snprintf(c->name, sizeof c->name, "%s", r->name);
        c->gpus_per_node = 8;
        c->mem_bytes = r->mem_gb * 1e9;
        c->peak_flops = r->tflops * 1e12;
        c->gemm_eff = r->eff;
        c->bmm_flops = r->tflops * 1e12 * BMM_FRACTION;
        c->hbm_bw = r->hbm_gbs * 1e9 * HBM_ACHIEVED;
        c->intra_bw = r->nvlink_gbs * 1e9 * NVLINK_ACHIEVED;
        c->inter_bw = r->ib_gbs * 1e9 * IB_ACHIEVED;
        c->grad_acc_bytes = GRAD_ACC_BYTES;
        c->intra_lat = 2e-6;
        c->inter_lat = 5e-6;
        if (strncmp(r->name, "a100", 4) == 0) {
            c->validation = &megatron_t1;
            snprintf(c->validated_on, sizeof c->validated_on, "a100-hdr");
        }
        return 0;
    }
    snprintf(err, errlen, "--cluster '%s' is not a preset; use %s", name, td_plan_cluster_presets());
    return -1;
}
