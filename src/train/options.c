/* `trident train` flags: defaults are nanoGPT's shakespeare-char CPU recipe. */
#include <stdlib.h>
#include <string.h>

#include "trident/base.h"
#include "trident/flags.h"
#include "trident/train.h"

void td_train_opts_default(td_train_opts *o) {
    memset(o, 0, sizeof *o);
    o->tokenizer = "char";
    o->layers = 4, o->heads = 4, o->embd = 128, o->seq = 64;
    o->batch = 12, o->grad_accum = 1, o->steps = 2000;
    o->optim = (td_optim_config){.lr = 1e-3f, .min_lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.99f,
                                 .eps = 1e-8f, .weight_decay = 0.1f, .clip = 1.0f, .warmup = 100};
    o->eval_every = 250, o->eval_iters = 20, o->log_every = 10;
    o->seed = 1337;
    o->threads = 0; /* 0: cores / ranks on this node */
    o->dp = 0, o->tp = 1, o->pp = 1;
    o->dp_mode = "allreduce";
    o->bucket_mb = 0.0; /* 0: measured default */
    o->comm_timeout = 300.0;
    o->sample_prompt = "";
    o->timing_skip = 1;
}

void td_train_opts_parse(td_train_opts *o, int argc, char **argv) {
    const td_flag flags[] = {
        {"--data", TD_FLAG_STR, &o->data, "text file (UTF-8) or token file (.bin: nanoGPT uint16 or llm.c)"},
        {"--tokenizer", TD_FLAG_STR, &o->tokenizer, "char (default) or byte, for text files"},
        {"--vocab", TD_FLAG_INT, &o->vocab, "vocabulary size of a token file (default: max id + 1)"},
        {"--layers", TD_FLAG_INT, &o->layers, "transformer blocks L (4)"},
        {"--heads", TD_FLAG_INT, &o->heads, "attention heads H (4)"},
        {"--embd", TD_FLAG_INT, &o->embd, "channels C, divisible by H (128)"},
        {"--seq", TD_FLAG_INT, &o->seq, "context length T (64)"},
        {"--batch", TD_FLAG_INT, &o->batch, "global batch in sequences per step (12)"},
        {"--grad-accum", TD_FLAG_INT, &o->grad_accum, "micro-batches per step per replica (1)"},
        {"--steps", TD_FLAG_INT, &o->steps, "optimizer steps (2000)"},
        {"--lr", TD_FLAG_FLOAT, &o->optim.lr, "peak learning rate (1e-3)"},
        {"--min-lr", TD_FLAG_FLOAT, &o->optim.min_lr, "final learning rate of the cosine decay (1e-4)"},
        {"--warmup", TD_FLAG_INT, &o->optim.warmup, "linear warm-up steps (100)"},
        {"--weight-decay", TD_FLAG_FLOAT, &o->optim.weight_decay, "AdamW decoupled weight decay, 2-D weights only (0.1)"},
        {"--beta1", TD_FLAG_FLOAT, &o->optim.beta1, "AdamW beta1 (0.9)"},
        {"--beta2", TD_FLAG_FLOAT, &o->optim.beta2, "AdamW beta2 (0.99)"},
        {"--eps", TD_FLAG_FLOAT, &o->optim.eps, "AdamW epsilon (1e-8)"},
        {"--clip", TD_FLAG_FLOAT, &o->optim.clip, "global gradient-norm clip, 0 = off (1.0)"},
        {"--eval-every", TD_FLAG_INT, &o->eval_every, "steps between validation evals, 0 = never (250)"},
        {"--eval-iters", TD_FLAG_INT, &o->eval_iters, "validation batches per eval (20)"},
        {"--log-every", TD_FLAG_INT, &o->log_every, "steps between step lines on stdout (10)"},
        {"--seed", TD_FLAG_U64, &o->seed, "seed for init and the data sampler (1337)"},
        {"--threads", TD_FLAG_INT, &o->threads, "compute threads per rank (default: cores / local ranks)"},
        {"--dp", TD_FLAG_INT, &o->dp, "data-parallel size (default: ranks / (tp*pp))"},
        {"--tp", TD_FLAG_INT, &o->tp, "tensor-parallel size (1)"},
        {"--pp", TD_FLAG_INT, &o->pp, "pipeline-parallel size (1)"},
        {"--dp-mode", TD_FLAG_STR, &o->dp_mode, "allreduce (default), reduce-broadcast or ps"},
        {"--ps-servers", TD_FLAG_INT, &o->ps_servers, "parameter-server ranks, with --dp-mode ps"},
        {"--ps-staleness", TD_FLAG_INT, &o->ps_staleness, "steps a ps worker may run ahead (0 = synchronous)"},
        {"--zero", TD_FLAG_INT, &o->zero, "ZeRO stage 0..3 (0 = replicated)"},
        {"--bucket-mb", TD_FLAG_DOUBLE, &o->bucket_mb, "gradient bucket size in MiB (default from measurement)"},
        {"--piece-mb", TD_FLAG_DOUBLE, &o->piece_mb, "bytes per MPI call in MiB (default from measurement)"},
        {"--no-overlap", TD_FLAG_BOOL, &o->no_overlap, "start gradient communication after backward (for measuring overlap)"},
        {"--comm-timeout", TD_FLAG_DOUBLE, &o->comm_timeout, "seconds before a stuck collective aborts the job (300)"},
        {"--out", TD_FLAG_STR, &o->out, "checkpoint directory: DIR/step-NNNNNNNN/ per save, DIR/latest the newest"},
        {"--save-every", TD_FLAG_INT, &o->save_every, "also save to --out every K steps (0 = at the end only)"},
        {"--log", TD_FLAG_STR, &o->log, "JSON-lines metrics file"},
        {"--memory-report", TD_FLAG_BOOL, &o->memory_report, "print the per-rank memory plan in detail"},
        {"--verbose", TD_FLAG_BOOL, &o->verbose, "every rank logs, prefixed with its grid position"},
        {"--sample-tokens", TD_FLAG_INT, &o->sample_tokens, "print a sample of N tokens at the end (0)"},
        {"--sample-prompt", TD_FLAG_STR, &o->sample_prompt, "prompt for that sample"},
    };
    td_flags_parse("train", flags, (int)(sizeof flags / sizeof flags[0]), argc, argv);

    TD_CHECK(o->data, "train: --data is required (a UTF-8 text file or a .bin token file); "
                      "scripts/run.sh uses an English corpus from Debian's fortunes package");
    TD_CHECK(o->batch > 0, "--batch must be a positive number of sequences (got %d)", o->batch);
    TD_CHECK(o->grad_accum > 0, "--grad-accum must be positive (got %d)", o->grad_accum);
    TD_CHECK(o->steps > 0, "--steps must be positive (got %d)", o->steps);
    TD_CHECK(o->optim.lr > 0 && o->optim.min_lr >= 0 && o->optim.min_lr <= o->optim.lr,
             "--lr must be positive and --min-lr in [0, lr] (got %g, %g)", o->optim.lr, o->optim.min_lr);
    TD_CHECK(o->optim.warmup >= 0, "--warmup must be >= 0 (got %d)", o->optim.warmup);
    TD_CHECK(o->optim.beta1 >= 0 && o->optim.beta1 < 1 && o->optim.beta2 >= 0 && o->optim.beta2 < 1,
             "--beta1/--beta2 must be in [0, 1)");
    TD_CHECK(o->optim.weight_decay >= 0, "--weight-decay must be >= 0");
    TD_CHECK(o->eval_every >= 0, "--eval-every must be >= 0 (0 disables evaluation)");
    TD_CHECK(o->eval_iters > 0 || o->eval_every == 0, "--eval-iters must be positive");
    TD_CHECK(o->log_every > 0, "--log-every must be positive");
    TD_CHECK(o->threads >= 0, "--threads must be positive");
    TD_CHECK(o->tp > 0 && o->pp > 0 && o->dp >= 0, "--dp, --tp and --pp must be positive");
    TD_CHECK(o->zero >= 0 && o->zero <= 3, "--zero %d is not a ZeRO stage; use 0, 1, 2 or 3", o->zero);
    TD_CHECK(o->ps_servers >= 0 && o->ps_staleness >= 0, "--ps-servers and --ps-staleness must be >= 0");
    TD_CHECK(o->bucket_mb >= 0 && o->piece_mb >= 0, "--bucket-mb and --piece-mb must be >= 0");
    TD_CHECK(o->sample_tokens >= 0, "--sample-tokens must be >= 0");
    TD_CHECK(o->save_every >= 0, "--save-every must be >= 0 (0 = save at the end only; got %d)", o->save_every);
    TD_CHECK(o->save_every == 0 || o->out, "--save-every %d needs --out DIR to save into", o->save_every);
    o->optim.max_steps = o->steps;
}
