/* `trident train` flags: defaults are nanoGPT's shakespeare-char CPU recipe. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "trident/backend.h"
#include "trident/base.h"
#include "trident/data.h"
#include "trident/compat.h"
#include "trident/flags.h"
#include "trident/loss_scale.h"
#include "trident/model.h"
#include "trident/parallel.h"
#include "trident/planner.h"
#include "trident/train.h"
#include "run_config.h"

void td_train_opts_default(td_train_opts *o) {
    memset(o, 0, sizeof *o);
    o->tokenizer = NULL; /* NULL: not given (text files use char; token files refuse one) */
    o->vocab = -1;       /* unset: a token file's max id + 1 (an explicit --vocab is >= 1) */
    o->layers = 4, o->heads = 4, o->embd = 128, o->seq = 64;
    o->eod = -1;
    o->arch = "gpt2";
    o->batch = 12, o->grad_accum = 1, o->steps = 2000;
    o->optim = (td_optim_config){.lr = 1e-3f, .min_lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.99f,
                                 .eps = 1e-8f, .weight_decay = 0.1f, .clip = 1.0f, .warmup = 100,
                                 .decay_fraction = 0.2f, .muon_lr = 0.02f,
                                 .muon_momentum = 0.95f, .muon_nesterov = 1};
    o->lr_schedule = "cosine", o->lr_decay_shape = "linear";
    o->eval_every = 250, o->eval_iters = 20, o->log_every = 10;
    o->seed = 1337;
    o->threads = 0; /* 0: cores / ranks on this node */
    o->dp = 0, o->tp = 1, o->pp = 1, o->cp = 1;
    o->dp_mode = "allreduce";
    o->recompute = "none";
    o->precision = "fp32";
    o->device = "cpu";
    o->schedule = "1f1b";
    o->pp_partition = "uniform";
    o->grid_order = TD_GRID_ORDER_DEFAULT;
    o->virtual_stages = 1;
    o->bucket_mb = 0.0; /* 0: measured default */
    o->grad_reduce_dtype = "fp32";
    o->grad_compress = "none";
    o->loss_scale = "auto";
    o->comm_timeout = 300.0;
    o->heartbeat_timeout = 60.0;
    o->sample_prompt = "";
    o->timing_skip = 1;
    o->moe.aux_coef = 0.01f;
    o->ep = 1, o->moe_etp = 1;
    td_train_opts_choices(o);
}

/* Flag ranges quote the model's maxima (plain literals, see model.h). */
#define STR_(x) #x
#define STR(x) STR_(x)
#define POS "[1, 2147483647]"
#define NONNEG "[0, 2147483647]"

int td_train_flag_table(td_train_opts *o, td_flag *out, int cap) {
    const td_flag flags[] = {
        {"--data", TD_FLAG_STR, &o->data, "text file (UTF-8), token file (.bin: nanoGPT uint16 or llm.c), or a directory or glob of *_train_*.bin / *_val_*.bin shards; W:PATH,W:PATH,... blends sources of one tokenizer by weight (docs/recipe-data-blend.md)", NULL},
        {"--tokenizer", TD_FLAG_STR, &o->tokenizer, "char (default), byte, gpt2 (GPT-2 BPE, vocabulary 50257), cl100k or o200k (tiktoken's cl100k_base, 100277; o200k_base, 200019) or FILE.json (a Hugging Face tokenizer.json, byte-level BPE) for text files; gpt2, cl100k and o200k also mark token files of their ids, FILE.json the shards tokenized with it", NULL},
        {"--vocab", TD_FLAG_INT, &o->vocab, "vocabulary size of a token file (default: max id + 1)",
         "[1, " STR(TD_MAX_VOCAB) "]"},
        {"--doc-mask", TD_FLAG_BOOL, &o->doc_mask, "document masking: attention stays within documents, a document beginning after each end-of-text token (--eod; docs/recipe-doc-mask.md)", NULL},
        {"--eod-mask-loss", TD_FLAG_BOOL, &o->eod_mask_loss, "no loss on targets equal to the end-of-text token (--eod), the loss the mean over the global batch's other targets (docs/recipe-doc-mask.md)", NULL},
        {"--eod", TD_FLAG_INT, &o->eod, "with --doc-mask: the end-of-text token id (default: the tokenizer's <|endoftext|>; char and byte tokenizers have none and need it)", "[-1, " STR(TD_MAX_VOCAB) "]"},
        {"--doc-positions", TD_FLAG_STR, &o->doc_positions, "with --doc-mask: continue (default: the packed sequence's positions) or reset (positions, rotary or learned, restart at 0 at each document start; docs/recipe-doc-mask.md)", NULL},
        {"--model", TD_FLAG_STR, &o->model, "a model preset of `trident plan --list-models` (gpt2-124m, llama3-8b, smollm-135m, ...): sets --layers --heads --embd --seq --arch --kv-heads --ffn-hidden --rope-theta --tie-embeddings (and Llama 3.1's rope scaling); flags given on the command line or in --config win; the vocabulary stays the data's", NULL},
        {"--layers", TD_FLAG_INT, &o->layers, "transformer blocks L (4)", "[1, " STR(TD_MAX_LAYERS) "]"},
        {"--heads", TD_FLAG_INT, &o->heads, "attention heads H (4)", "[1, " STR(TD_MAX_EMBD) "]"},
        {"--embd", TD_FLAG_INT, &o->embd, "channels C, divisible by H (128)", "[1, " STR(TD_MAX_EMBD) "]"},
        {"--seq", TD_FLAG_INT, &o->seq, "context length T (64)", "[1, " STR(TD_MAX_SEQ) "]"},
        {"--arch", TD_FLAG_STR, &o->arch, "model family: gpt2 (default: LayerNorm, learned positions, GELU MLP, biases, tied head) or llama (RMSNorm, rotary positions, SwiGLU MLP, grouped-query attention, no biases, untied head)", NULL},
        {"--kv-heads", TD_FLAG_INT, &o->kv_heads, "llama: key/value heads, dividing --heads (default: --heads; 1 = multi-query)", NONNEG},
        {"--ffn-hidden", TD_FLAG_INT, &o->ffn_hidden, "llama: MLP hidden features (default: 8C/3 rounded up to a multiple of 256)", NONNEG},
        {"--norm-eps", TD_FLAG_FLOAT, &o->norm_eps, "llama: RMSNorm epsilon (1e-5)", "(0, 1]"},
        {"--rope-theta", TD_FLAG_DOUBLE, &o->rope_theta, "llama: rotary embedding base (10000)", "(0, 1e30]"},
        {"--tie-embeddings", TD_FLAG_STR, &o->tie_embeddings, "on or off: the LM head is the token embedding (default: on for gpt2, which has no other, off for llama)", NULL},
        {"--moe-experts", TD_FLAG_INT, &o->moe.E, "mixture of experts: E routed experts in place of each MLP (0: dense)", "[0, 4096]"},
        {"--moe-top-k", TD_FLAG_INT, &o->moe.K, "mixture of experts: experts per token K (1)", "[0, 4096]"},
        {"--moe-every", TD_FLAG_INT, &o->moe.every, "mixture of experts: every N-th block (blocks l with l % N == 0) has experts, the others the dense MLP (1)", "[0, 256]"},
        {"--moe-ffn-hidden", TD_FLAG_INT, &o->moe.F, "mixture of experts: hidden features of each expert (default: the dense MLP's)", NONNEG},
        {"--moe-shared-experts", TD_FLAG_INT, &o->moe.shared, "mixture of experts: always-active shared experts, --moe-ffn-hidden features each (0)", "[0, 64]"},
        {"--moe-router", TD_FLAG_STR, &o->moe_router, "mixture of experts: softmax (default) or sigmoid scores of the router", NULL},
        {"--moe-norm-topk", TD_FLAG_STR, &o->moe_norm_topk, "on or off: renormalise the chosen experts' weights to sum 1 (default: on for top-k >= 2, off for 1)", NULL},
        {"--moe-aux-coef", TD_FLAG_FLOAT, &o->moe.aux_coef, "mixture of experts: load-balancing loss coefficient (0.01)", "[0, inf)"},
        {"--moe-z-coef", TD_FLAG_FLOAT, &o->moe.z_coef, "mixture of experts: router z-loss coefficient (0)", "[0, inf)"},
        {"--moe-bias-balance", TD_FLAG_FLOAT, &o->moe.bias_rate, "mixture of experts: auxiliary-loss-free balancing (DeepSeek-V3): a per-expert selection bias moved by RATE x the sign of its load error after each step (0: off)", "[0, inf)"},
        {"--moe-capacity", TD_FLAG_FLOAT, &o->moe.capacity, "mixture of experts: capacity factor F: each expert keeps its first ceil(F x tokens x K / E) assignments (0: dropless)", "[0, inf)"},
        {"--batch", TD_FLAG_INT, &o->batch, "global batch in sequences per step (12)", POS},
        {"--batch-rampup", TD_FLAG_STR, &o->batch_rampup, "START:INCREMENT:SAMPLES (Megatron's): the global batch starts at START sequences and grows by INCREMENT, in equal shares of SAMPLES consumed samples, to --batch; the micro-batches per step follow (START and INCREMENT must be multiples of dp x the micro-batch's sequences, x pp with --schedule interleaved); docs/recipe-schedules.md", NULL},
        {"--grad-accum", TD_FLAG_INT, &o->grad_accum, "micro-batches per step per replica (1); the pipeline's micro-batches", POS},
        {"--micro-batches", TD_FLAG_INT, &o->grad_accum, "the same as --grad-accum: micro-batches per step per replica, which a pipeline schedule runs in flight", POS},
        {"--steps", TD_FLAG_INT, &o->steps, "the step to stop at: optimizer steps counted from step 0 (2000; a resume continues to the checkpoint's)", POS},
        {"--schedule-steps", TD_FLAG_INT, &o->schedule_steps, "the learning rate schedule's horizon: warm-up, then --lr-schedule's decay to --min-lr at step N, which --steps may pass or stop short of (0 = --steps; a resume keeps the checkpoint's, and a larger one given to a wsd resume lengthens the stable phase and moves the decay)", NONNEG},
        {"--lr-schedule", TD_FLAG_STR, &o->lr_schedule, "the learning rate after --warmup: cosine (default: cosine decay to --min-lr at the horizon), linear (linear decay to it), wsd (warm-up, stable at --lr, then the last --lr-decay-fraction of the horizon decays to --min-lr), constant (--lr) or inverse-sqrt (--lr x sqrt((warmup + 1) / (step + 1)), at least --min-lr); docs/recipe-schedules.md", NULL},
        {"--lr-decay-fraction", TD_FLAG_FLOAT, &o->optim.decay_fraction, "wsd: the share of the horizon (--schedule-steps) that decays (0.2)", "[0, 1]"},
        {"--lr-decay-shape", TD_FLAG_STR, &o->lr_decay_shape, "wsd: the decay's shape over its fraction p: linear (default: 1 - p), cosine ((1 + cos(pi p)) / 2) or 1-sqrt (1 - sqrt(p))", NULL},
        {"--lr", TD_FLAG_FLOAT, &o->optim.lr, "peak learning rate (1e-3)", "(0, inf)"},
        {"--optimizer", TD_FLAG_STR, &o->optimizer, "adamw (default: AdamW for every parameter) or muon (Muon, the speedrun's momentum orthogonalized by 5 Newton-Schulz steps, for the blocks' 2-D matrices, each logical one on its own (each expert's too), and AdamW with --lr for the rest; Newton-Schulz in bf16 in bf16 runs, fp32 otherwise; docs/recipe-muon.md)", NULL},
        {"--muon-lr", TD_FLAG_FLOAT, &o->optim.muon_lr, "muon: the peak learning rate of Muon's matrices (0.02), on --lr-schedule's curve", "(0, inf)"},
        {"--muon-momentum", TD_FLAG_FLOAT, &o->optim.muon_momentum, "muon: the momentum (0.95)", "[0, 1)"},
        {"--muon-weight-decay", TD_FLAG_FLOAT, &o->optim.muon_wd, "muon: decoupled weight decay of Muon's matrices, p *= 1 - lr wd (0)", "[0, inf)"},
        {"--muon-nesterov", TD_FLAG_INT, &o->optim.muon_nesterov, "muon: 1 (default) Nesterov momentum as the speedrun, 0 plain momentum", "[0, 1]"},
        {"--min-lr", TD_FLAG_FLOAT, &o->optim.min_lr, "final learning rate of the decay (the floor of inverse-sqrt), <= lr (1e-4)", "[0, inf)"},
        {"--warmup", TD_FLAG_INT, &o->optim.warmup, "linear warm-up steps (100)", NONNEG},
        {"--weight-decay", TD_FLAG_FLOAT, &o->optim.weight_decay, "AdamW decoupled weight decay, 2-D weights only (0.1)", "[0, inf)"},
        {"--beta1", TD_FLAG_FLOAT, &o->optim.beta1, "AdamW beta1 (0.9)", "[0, 1)"},
        {"--beta2", TD_FLAG_FLOAT, &o->optim.beta2, "AdamW beta2 (0.99)", "[0, 1)"},
        /* eps = 0 divides 0 by 0 for a parameter whose gradient stays 0 */
        {"--eps", TD_FLAG_FLOAT, &o->optim.eps, "AdamW epsilon (1e-8)", "(0, inf)"},
        {"--clip", TD_FLAG_FLOAT, &o->optim.clip, "global gradient-norm clip, 0 = off (1.0)", "[0, inf)"},
        {"--eval-every", TD_FLAG_INT, &o->eval_every, "steps between validation evals, 0 = never (250)", NONNEG},
        {"--eval-iters", TD_FLAG_INT, &o->eval_iters, "validation batches per eval (20)", POS},
        {"--log-every", TD_FLAG_INT, &o->log_every, "steps between step lines on stdout (10)", POS},
        {"--seed", TD_FLAG_U64, &o->seed, "seed for init and the data sampler (1337)", NULL},
        {"--threads", TD_FLAG_INT, &o->threads, "compute threads per rank, 0 = default (usable CPUs / local ranks)", "[0, 4096]"},
        {"--dp", TD_FLAG_INT, &o->dp, "data-parallel size, 0 = default (ranks / (tp*cp*pp))", NONNEG},
        {"--tp", TD_FLAG_INT, &o->tp, "tensor-parallel size (1): Megatron layers, heads and vocabulary split over tp ranks", POS},
        {"--moe-etp", TD_FLAG_INT, &o->moe_etp, "mixture of experts: tensor-parallel ranks per expert (1: experts replicated over tp; larger is not implemented)", POS},
        {"--ep", TD_FLAG_INT, &o->ep, "expert-parallel size (1): the experts of each mixture-of-experts block split over ep ranks of the data-parallel axis (ep divides --moe-experts and dp x cp), tokens sent to their experts by all-to-all", POS},
        {"--cp", TD_FLAG_INT, &o->cp, "context-parallel size (1): each sequence split over cp ranks in 2 cp chunks (rank r holds chunks r and 2cp-1-r), attention by ring attention; --seq must be a multiple of 2 cp", POS},
        {"--dp-shard", TD_FLAG_INT, &o->dp_shard, "hybrid sharding (0 = off): ZeRO 1-3 shard the model state within runs of N ranks of dp x cp and the N-rank shards' replicas all-reduce the gradients (N divides dp x cp; torchtitan's HSDP, DeepSpeed's MiCS)", NONNEG},
        {"--sequence-parallel", TD_FLAG_BOOL, &o->seq_parallel, "split LayerNorm and residual activations along the sequence over the tp ranks (needs --tp >= 2)", NULL},
        {"--device", TD_FLAG_STR, &o->device, "where the step's tensors live and its ops run: cpu (default), guard (the CPU's kernels with every device buffer unreachable from host code outside a backend call: a host access dies naming the buffer; for tests) or cuda (an NVIDIA GPU through the CUDA module where the build has it; partial, refused for runs so far: docs/cuda.md)", NULL},
        {"--precision", TD_FLAG_STR, &o->precision, "arithmetic of forward and backward: fp32 (default), bf16 (bf16 weight copies, activations and GEMMs through oneDNN; fp32 master weights, gradients and AdamW) or fp16 (the same in fp16, GEMMs converted to fp32 here, dynamic loss scaling)", NULL},
        {"--gemm-stats", TD_FLAG_BOOL, &o->gemm_stats, "time every GEMM of the model and print the achieved GEMM rate per step", NULL},
        {"--recompute", TD_FLAG_STR, &o->recompute, "activation recomputation: none (default) or block (keep each block's input, rerun its forward in the backward)", NULL},
        {"--pp", TD_FLAG_INT, &o->pp, "pipeline-parallel size (1): contiguous chunks of blocks per stage", POS},
        {"--schedule", TD_FLAG_STR, &o->schedule, "pipeline schedule: gpipe, 1f1b (default), interleaved or zb-h1 (`trident schedule` draws them)", NULL},
        {"--virtual-stages", TD_FLAG_INT, &o->virtual_stages, "model chunks per stage, with --schedule interleaved (1)", "[1, " STR(TD_MAX_LAYERS) "]"},
        {"--pp-partition", TD_FLAG_STR, &o->pp_partition, "blocks per stage: uniform (default), auto (measured costs, the slowest stage minimized) or a,b,c (one count per stage and chunk)", NULL},
        {"--grid-order", TD_FLAG_STR, &o->grid_order, "how world ranks map to the axes: a '-'-joined order of tp, cp, dp, pp, fastest first (" TD_GRID_ORDER_DEFAULT ", the default, keeps tensor-parallel peers on neighbouring ranks)", NULL},
        {"--dp-mode", TD_FLAG_STR, &o->dp_mode, "allreduce (default), reduce-broadcast or ps", NULL},
        {"--ps-servers", TD_FLAG_INT, &o->ps_servers, "parameter-server ranks, with --dp-mode ps", NONNEG},
        /* a server keeps K+1 gradient slices */
        {"--ps-staleness", TD_FLAG_INT, &o->ps_staleness, "steps a ps worker may run ahead (0 = synchronous)", "[0, 1024]"},
        {"--zero", TD_FLAG_INT, &o->zero, "ZeRO stage 0..3 (0 = replicated)", NULL},
        /* MiB become bytes in size_t: bounded well below its range */
        {"--bucket-mb", TD_FLAG_DOUBLE, &o->bucket_mb, "gradient bucket size in MiB, 0 = default (from measurement)", "[0, 1048576]"},
        {"--piece-mb", TD_FLAG_DOUBLE, &o->piece_mb, "bytes per MPI call in MiB, 0 = default (from measurement)", "[0, 1048576]"},
        {"--grad-reduce-dtype", TD_FLAG_STR, &o->grad_reduce_dtype, "payload of the data-parallel gradient reduction: fp32 (default) or bf16 (half the bytes, summed in fp32; --zero 0)", NULL},
        {"--loss-scale", TD_FLAG_STR, &o->loss_scale, "loss scaling: auto (default: dynamic with fp16, else none), dynamic (2^16, halved on a non-finite gradient, whose step is skipped; doubled after 1000 clean steps), none, or a static scale S in [1, 2^32]", NULL},
        {"--grad-compress", TD_FLAG_STR, &o->grad_compress, "none (default), topk:R (each rank's local AdamW update, each bucket's R share of largest as index/value pairs, the rest fed back next step; 0 < R <= 1; --zero 0 or 1), topk:R:grad (the gradient's largest instead, AdamW after the sum); :noef drops the rest", NULL},
        {"--auto", TD_FLAG_BOOL, &o->autoplan, "pick dp, tp, pp, ZeRO, micro-batches and schedule for the world size from the planner's --cluster local (trident plan --calibrate) and print the predicted step time and memory beside the measured", NULL},
        {"--no-overlap", TD_FLAG_BOOL, &o->no_overlap, "start gradient communication after backward (for measuring overlap)", NULL},
        {"--comm-timeout", TD_FLAG_DOUBLE, &o->comm_timeout, "seconds before a stuck collective aborts the job, 0 = wait forever (300)", "[0, 1e9]"},
        {"--heartbeat-timeout", TD_FLAG_DOUBLE, &o->heartbeat_timeout, "seconds without a heartbeat before a rank is taken for stopped and the job ends, 0 = only deaths end it (60)", "[0, 1e9]"},
        {"--out", TD_FLAG_STR, &o->out, "checkpoint directory: DIR/step-NNNNNNNN/ per save, DIR/latest the newest (created if missing; its parent must exist)", NULL},
        {"--save-every", TD_FLAG_INT, &o->save_every, "also save to --out every K steps, 0 = at the end only (0)", NONNEG},
        {"--keep", TD_FLAG_INT, &o->keep, "keep the N newest step directories under --out, removing older ones after each save, 0 = all (0)", NONNEG},
        {"--resume", TD_FLAG_STR, &o->resume, "continue from a checkpoint: a step directory, an --out directory (its latest), or 'latest' (--out's newest); any layout, same model", NULL},
        {"--stop-after", TD_FLAG_INT, &o->stop_after, "end after K steps (counted from step 0) with a checkpoint in --out, as a preemption would; exit 0 (0 = run --steps)", NONNEG},
        {"--log", TD_FLAG_STR, &o->log, "JSON-lines metrics file", NULL},
        {"--tensorboard", TD_FLAG_STR, &o->tensorboard, "write the step's scalars (loss, lr, gradient norm, tokens/s, MFU, memory, loss scale, MoE load, eval loss) as a TensorBoard event file in DIR (created if missing; its parent must exist); a resume adds a new file", NULL},
        {"--trace", TD_FLAG_STR, &o->trace, "Chrome trace-event JSON of the run, one lane per rank (Perfetto, chrome://tracing; at most 1M events per rank)", NULL},
        {"--memory-report", TD_FLAG_BOOL, &o->memory_report, "print the per-rank memory plan in detail", NULL},
        {"--verbose", TD_FLAG_BOOL, &o->verbose, "every rank logs, prefixed with its grid position", NULL},
        {"--sample-tokens", TD_FLAG_INT, &o->sample_tokens, "print a sample of N tokens at the end (0)", "[0, 10000000]"},
        {"--sample-prompt", TD_FLAG_STR, &o->sample_prompt, "prompt for that sample", NULL},
        {"--strict-data", TD_FLAG_BOOL, &o->strict_data, "--resume onto data other than the checkpoint's (its recorded size and XXH3), or onto a checkpoint that records none, is an error instead of a note", NULL},
        {"--max-loss", TD_FLAG_FLOAT, &o->max_loss, "stop the run (exit 3, with a checkpoint in --out) when the training loss stays above X for 20 steps in a row (off)", "(0, inf)"},
        {"--overwrite", TD_FLAG_BOOL, &o->overwrite, "a new run into an --out that holds checkpoints replaces them (its step directories and latest are removed before the first save); without it such a run is refused", NULL},
    };
    int n = (int)(sizeof flags / sizeof flags[0]);
    TD_ASSERT(n <= cap);
    memcpy(out, flags, sizeof flags);
    return n;
}

/* --model: every model flag not given (on the command line or in --config)
 * takes the preset's value; a given one wins, as the command line wins
 * over --config (docs/config.md). The preset's vocabulary is not a flag:
 * the data's is the model's (the run notes a difference: src/run/run.c). */
static void apply_model_preset(td_train_opts *o, const td_flag *flags, int n, const td_flags_info *info) {
    td_gpt_config p;
    if (!o->model) return;
    int rc = td_plan_model_preset_config(o->model, &p);
    TD_CHECK(rc == 0, "--model '%s' is not a preset; use %s", o->model, td_plan_model_presets());
    int llama = p.arch == TD_ARCH_LLAMA;
#define FROM_PRESET(field, value) \
    if (td_flags_from(flags, n, info, &o->field) == TD_FROM_DEFAULT) o->field = (value)
    FROM_PRESET(layers, p.L);
    FROM_PRESET(heads, p.H);
    FROM_PRESET(embd, p.C);
    FROM_PRESET(seq, p.T);
    FROM_PRESET(arch, td_arch_name(p.arch));
    FROM_PRESET(kv_heads, llama ? p.KV : 0);
    FROM_PRESET(ffn_hidden, llama ? p.F : 0);
    FROM_PRESET(rope_theta, p.rope_theta);
    FROM_PRESET(tie_embeddings, !llama ? NULL : p.tie == TD_TIE_ON ? "on" : "off");
    FROM_PRESET(moe.E, p.moe.E); /* a mixture of experts' shape (all 0: dense) */
    FROM_PRESET(moe.K, p.moe.K);
    FROM_PRESET(moe.every, p.moe.every);
    FROM_PRESET(moe.F, p.moe.F);
    FROM_PRESET(moe.shared, p.moe.shared);
#undef FROM_PRESET
    /* Llama 3.1's scaling has no flag: the preset's while the family stays
     * its own (a resumed checkpoint's replaces it, run_config.c) */
    if (llama && strcmp(o->arch, "llama") == 0) o->rope_scaling = p.rope_scaling;
}

void td_train_opts_parse(td_train_opts *o, int argc, char **argv) {
    td_flag flags[TD_TRAIN_MAX_FLAGS];
    int n = td_train_flag_table(o, flags, TD_TRAIN_MAX_FLAGS);
    unsigned char from[TD_TRAIN_MAX_FLAGS];
    td_flags_info info = {from, NULL, 0};
    td_flags_parse_info("train", flags, n, argc, argv, &info);
    apply_model_preset(o, flags, n, &info);       /* --model: the flags not given */
    td_train_resume_defaults(o, flags, n, &info); /* --resume: the model, tokenizer, data of the checkpoint */
    td_train_opts_check(o);
    o->run_config = td_flags_json(flags, n);
    o->print_config = info.print_config;
}

void td_train_model_config(const td_train_opts *o, int V, td_gpt_config *cfg) {
    td_train_model_fields(o, cfg);
    cfg->V = V;
    td_gpt_config_finish(cfg);
}

void td_train_model_fields(const td_train_opts *o, td_gpt_config *cfg) {
    *cfg = (td_gpt_config){.L = o->layers, .H = o->heads, .C = o->embd, .T = o->seq};
    cfg->arch = o->ch.arch; /* the choices, parsed once (td_train_opts_choices) */
    cfg->KV = o->kv_heads, cfg->F = o->ffn_hidden;
    cfg->norm_eps = o->norm_eps, cfg->rope_theta = o->rope_theta;
    cfg->rope_scaling = o->rope_scaling;
    cfg->tie = o->ch.tie;
    cfg->moe = o->moe;
    cfg->moe.router = o->ch.moe_router, cfg->moe.norm_topk = o->ch.moe_norm_topk;
    if (cfg->moe.E == 0) cfg->moe.aux_coef = 0.0f; /* the default coefficient of a dense model */
}

void td_train_opts_set_model(td_train_opts *o, const td_gpt_config *cfg) {
    o->layers = cfg->L, o->heads = cfg->H, o->embd = cfg->C, o->seq = cfg->T;
    o->arch = td_arch_name(cfg->arch);
    o->rope_scaling = cfg->rope_scaling;
    o->moe = cfg->moe;
    o->moe_router = cfg->moe.router == TD_ROUTER_SIGMOID ? "sigmoid" : "softmax";
    o->moe_norm_topk = cfg->moe.E == 0 ? NULL : cfg->moe.norm_topk == TD_TIE_ON ? "on" : "off";
    if (cfg->arch == TD_ARCH_GPT2) return; /* the rest are llama's flags */
    o->kv_heads = cfg->KV, o->ffn_hidden = cfg->F, o->norm_eps = cfg->norm_eps, o->rope_theta = cfg->rope_theta;
    o->tie_embeddings = td_gpt_tied(cfg) ? "on" : "off";
}

void td_train_opts_check(td_train_opts *o) {
    /* each number is in its range (td_flags_parse); what is left relates
     * two flags */
    TD_CHECK(o->data || o->tokenizer_only, "train: --data is required (a UTF-8 text file or a .bin token file); "
                      "scripts/run.sh uses an English corpus from Debian's fortunes package");
    TD_CHECK(o->optim.min_lr <= o->optim.lr, "--min-lr %g is above --lr %g; valid: [0, lr]",
             (double)o->optim.min_lr, (double)o->optim.lr);
    TD_CHECK(o->grad_accum <= o->batch,
             "--grad-accum %d (--micro-batches) is more micro-batches than --batch %d has sequences; valid: [1, %d]",
             o->grad_accum, o->batch, o->batch);
    /* a rank's forward and backward count rows (batch x seq) and attention
     * pairs (batch x heads) in int */
    TD_CHECK((long long)o->batch * o->seq <= INT_MAX,
             "--batch %d x --seq %d = %lld tokens per step; valid: at most %d", o->batch, o->seq,
             (long long)o->batch * o->seq, INT_MAX);
    TD_CHECK((long long)o->batch * o->heads <= INT_MAX,
             "--batch %d x --heads %d = %lld attention maps per step; valid: at most %d", o->batch,
             o->heads, (long long)o->batch * o->heads, INT_MAX);
    td_axis_id order[TD_AXES];
    char why[128];
    TD_CHECK(td_grid_order_parse(o->grid_order, order, why, sizeof why),
             "--grid-order '%s' is not an order of the axes: %s; use a '-'-joined permutation of tp, cp, dp, pp, "
             "fastest first (default %s)", o->grid_order, why, TD_GRID_ORDER_DEFAULT);
    TD_CHECK(o->zero >= 0 && o->zero <= 3, "--zero %d is not a ZeRO stage; use 0, 1, 2 or 3", o->zero);
    /* each choice is a known value, then no two flags are a combination
     * the rules table refuses (--auto with a layout, checkpoint flags
     * without --out, zb-h1 recomputing, top-k with tp or pp) */
    td_train_opts_choices(o);
    td_device dev = td_train_device(o); /* a known device, before its rows */
    td_compat_cfg c;
    td_train_compat_cfg(o, &c);
    td_compat_check(&c, TD_COMPAT_AT_OPTIONS);
    /* the device before anything is allocated (MPI is up: the guard's
     * fault handler goes in front of MPI's) */
    td_backend_use(dev);
    o->optim.max_steps = o->schedule_steps > 0 ? o->schedule_steps : o->steps;
}

/* The strings td_train_opts_choices parses, in the order of ch.from. */
static void choice_strings(const td_train_opts *o, const char *s[TD_TRAIN_CHOICES]) {
    s[0] = o->precision, s[1] = o->recompute, s[2] = o->schedule, s[3] = o->pp_partition;
    s[4] = o->dp_mode, s[5] = o->grad_reduce_dtype, s[6] = o->grad_compress, s[7] = o->loss_scale;
    s[8] = o->arch, s[9] = o->tie_embeddings, s[10] = o->moe_router, s[11] = o->moe_norm_topk;
    s[12] = o->lr_schedule, s[13] = o->lr_decay_shape, s[14] = o->batch_rampup;
    s[15] = o->optimizer, s[16] = o->doc_positions;
}

/* --lr-schedule and --lr-decay-shape into the optimizer's config (NULL:
 * options filled in by hand, cosine and linear). */
static void lr_choices(td_train_opts *o) {
    int s = td_lr_schedule_parse(o->lr_schedule ? o->lr_schedule : "cosine");
    TD_CHECK(s >= 0, "--lr-schedule '%s' is not a schedule; valid: " TD_LR_SCHEDULE_NAMES, o->lr_schedule);
    int d = td_lr_decay_shape_parse(o->lr_decay_shape ? o->lr_decay_shape : "linear");
    TD_CHECK(d >= 0, "--lr-decay-shape '%s' is not a decay shape; valid: " TD_LR_DECAY_SHAPE_NAMES, o->lr_decay_shape);
    o->optim.schedule = (td_lr_schedule)s, o->optim.decay_shape = (td_lr_decay_shape)d;
    int opt = td_optimizer_parse(o->optimizer ? o->optimizer : "adamw");
    TD_CHECK(opt >= 0, "--optimizer '%s' is not an optimizer; valid: " TD_OPTIMIZER_NAMES, o->optimizer);
    o->optim.optimizer = (td_optimizer)opt;
    o->optim.muon_ns_k = o->ch.precision == TD_PREC_BF16 ? TD_K_BF16 : TD_K_F32;
    char why[128];
    o->ch.rampup = (td_batch_rampup){0, 0, 0};
    TD_CHECK(!o->batch_rampup || td_batch_rampup_parse(o->batch_rampup, o->batch, &o->ch.rampup, why, sizeof why) == 0,
             "--batch-rampup '%s': %s; valid: START:INCREMENT:SAMPLES, START <= --batch %d, (--batch - START) a "
             "multiple of INCREMENT", o->batch_rampup, why, o->batch);
}

/* The model family's choices: --arch, --tie-embeddings, --moe-router,
 * --moe-norm-topk (NULL: the family's default, the router's softmax, on
 * for top-k >= 2). */
static void model_choices(const td_train_opts *o, td_train_choices *c) {
    int arch = td_arch_parse(o->arch ? o->arch : "gpt2");
    TD_CHECK(arch >= 0, "--arch %s: unknown model family; valid: gpt2, llama", o->arch);
    c->arch = (td_arch)arch;
    const char *tie = o->tie_embeddings, *r = o->moe_router, *n = o->moe_norm_topk;
    TD_CHECK(!tie || strcmp(tie, "on") == 0 || strcmp(tie, "off") == 0, "--tie-embeddings %s: valid: on, off", tie);
    c->tie = !tie ? TD_TIE_DEFAULT : strcmp(tie, "on") == 0 ? TD_TIE_ON : TD_TIE_OFF;
    TD_CHECK(!r || strcmp(r, "softmax") == 0 || strcmp(r, "sigmoid") == 0, "--moe-router %s: valid: softmax, sigmoid", r);
    c->moe_router = r && strcmp(r, "sigmoid") == 0 ? TD_ROUTER_SIGMOID : TD_ROUTER_SOFTMAX;
    TD_CHECK(!n || strcmp(n, "on") == 0 || strcmp(n, "off") == 0, "--moe-norm-topk %s: valid: on, off", n);
    c->moe_norm_topk = !n ? TD_TIE_DEFAULT : strcmp(n, "on") == 0 ? TD_TIE_ON : TD_TIE_OFF;
    const char *dp = o->doc_positions;
    TD_CHECK(!dp || strcmp(dp, "continue") == 0 || strcmp(dp, "reset") == 0, "--doc-positions %s: valid: continue, reset", dp);
    c->doc_pos_reset = dp && strcmp(dp, "reset") == 0;
}

td_device td_train_device(const td_train_opts *o) { return td_device_flag(o->device); }

void td_train_opts_choices(td_train_opts *o) {
    td_train_choices *c = &o->ch;
    memset(c, 0, sizeof *c);
    const char *prec = o->precision ? o->precision : "fp32";
    TD_CHECK(strcmp(prec, "fp32") == 0 || strcmp(prec, "bf16") == 0 || strcmp(prec, "fp16") == 0,
             "--precision '%s' is not a precision; valid: fp32, bf16, fp16", prec);
    c->precision = strcmp(prec, "bf16") == 0   ? TD_PREC_BF16
                   : strcmp(prec, "fp16") == 0 ? TD_PREC_FP16
                                               : TD_PREC_FP32;
    o->fp16 = c->precision == TD_PREC_FP16; /* dynamic loss scaling under --loss-scale auto */
    /* NULL: options filled in by hand, the default */
    const char *rc = o->recompute ? o->recompute : "none";
    TD_CHECK(strcmp(rc, "none") == 0 || strcmp(rc, "block") == 0,
             "--recompute '%s' is not a mode; valid: none, block", rc);
    c->recompute = strcmp(rc, "block") == 0 ? TD_RECOMPUTE_BLOCK : TD_RECOMPUTE_NONE;
    c->schedule = o->schedule ? td_sched_find(o->schedule) : TD_SCHED_1F1B;
    c->pp_partition_auto = o->pp_partition && strcmp(o->pp_partition, "auto") == 0;
    c->dp_mode = o->dp_mode ? td_dp_mode_find(o->dp_mode) : TD_DP_ALLREDUCE;
    /* the payload flags alone (their combination with the layout: the rules table) */
    c->grad_dtype = td_grad_dtype_parse(o->grad_reduce_dtype ? o->grad_reduce_dtype : "fp32");
    td_grad_compress_parse(o->grad_compress ? o->grad_compress : "none", &c->topk_ratio, &c->topk_no_ef,
                           &c->topk_grad);
    c->loss_scale_static = 1.0f;
    c->loss_scale =
        td_loss_scale_parse(o->loss_scale ? o->loss_scale : "auto", o->fp16, &c->loss_scale_static);
    model_choices(o, c);
    lr_choices(o);
    choice_strings(o, c->from);
}

void td_train_compat_cfg(const td_train_opts *o, td_compat_cfg *c) {
    const td_train_choices *ch = &o->ch;
    td_compat_cfg_init(c);
    c->dp = o->dp, c->tp = o->tp, c->pp = o->pp, c->zero = o->zero, c->seq_parallel = o->seq_parallel;
    c->cp = o->cp, c->dp_shard = o->dp_shard, c->ep = o->ep;
    c->ps_servers = o->ps_servers;
    c->dp_mode = ch->dp_mode, c->schedule = ch->schedule, c->virtual_stages = o->virtual_stages;
    c->micro_batches = o->grad_accum, c->recompute = ch->recompute, c->precision = ch->precision;
    c->batch = o->batch, c->rampup_start = ch->rampup.start, c->rampup_increment = ch->rampup.increment;
    c->rampup_text = o->batch_rampup;
    c->optimizer = o->optim.optimizer;
    c->doc_mask = o->doc_mask, c->eod_mask_loss = o->eod_mask_loss;
    c->doc_pos_reset = ch->doc_pos_reset;
    c->seq = o->seq, c->embd = o->embd;
    c->grad_bf16 = ch->grad_dtype == TD_BF16;
    c->topk_ratio = ch->topk_ratio, c->topk_no_ef = ch->topk_no_ef;
    c->loss_scale_mode = ch->loss_scale;
    c->autoplan = o->autoplan, c->out = o->out != NULL, c->save_every = o->save_every, c->keep = o->keep;
    c->stop_after = o->stop_after, c->overwrite = o->overwrite, c->resume = o->resume;
    c->dp_mode_text = o->dp_mode, c->schedule_name = o->schedule, c->recompute_name = o->recompute;
    c->precision_name = o->precision, c->grad_compress_text = o->grad_compress;
    c->loss_scale_text = o->loss_scale ? o->loss_scale : "auto"; /* opts filled in by hand */
    c->loss_scale_name = td_loss_scale_mode_name(ch->loss_scale);
    c->experts = o->moe.E, c->ep = o->ep, c->etp = o->moe_etp;
    static char moe_flag[48]; /* the first flag that shapes experts a dense model lacks */
    const td_moe_config *e = &o->moe;
    moe_flag[0] = 0;
    if (e->E == 0 && e->K) snprintf(moe_flag, sizeof moe_flag, "--moe-top-k %d", e->K);
    else if (e->E == 0 && e->every) snprintf(moe_flag, sizeof moe_flag, "--moe-every %d", e->every);
    else if (e->E == 0 && e->F) snprintf(moe_flag, sizeof moe_flag, "--moe-ffn-hidden %d", e->F);
    else if (e->E == 0 && e->shared) snprintf(moe_flag, sizeof moe_flag, "--moe-shared-experts %d", e->shared);
    c->moe_flag_text = moe_flag[0] ? moe_flag : NULL;
    c->moe_capacity = o->moe.capacity > 0.0f, c->moe_bias = o->moe.bias_rate > 0.0f;
    c->device_name = o->device ? o->device : "cpu";
    c->device = td_device_parse(c->device_name); /* -1 for an unknown name: refused later */
}

int td_train_choices_current(const td_train_opts *o) {
    const char *s[TD_TRAIN_CHOICES];
    choice_strings(o, s);
    return memcmp(s, o->ch.from, sizeof s) == 0;
}

td_dp_mode td_train_dp_mode(const td_train_opts *o) {
    /* a bad name is refused by the parse's own text */
    return o->ch.dp_mode >= 0 ? (td_dp_mode)o->ch.dp_mode : td_dp_mode_parse(o->dp_mode);
}

td_sched_kind td_train_schedule(const td_train_opts *o) {
    return o->ch.schedule >= 0 ? (td_sched_kind)o->ch.schedule : td_sched_parse(o->schedule);
}

td_precision td_train_precision(const td_train_opts *o) { return o->ch.precision; }

td_recompute td_train_recompute(const td_train_opts *o) { return o->ch.recompute; }
