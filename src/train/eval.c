/* `trident eval`: a checkpoint's loss on a split of --data, in any layout
 * (--task FILE.jsonl: a multiple-choice task's accuracy instead, eval_task.c).
 *
 * The split's tokens t[0..n) are cut into windows of T + 1 tokens starting
 * at 0, T, 2T, ... (T the model's context): window w feeds t[wT .. wT + T)
 * and predicts t[wT + 1 .. wT + T], so consecutive windows share one token
 * and every token after the first is predicted exactly once. The last
 * window is partial: its positions past the end have target -1, which the
 * cross-entropy ignores (kernels.h), as are whole rows past the last window
 * in the last global batch; so are end-of-text targets under a checkpoint
 * trained with --eod-mask-loss (the mean then over the others, the run's
 * validation divisor). --max-tokens N predicts t[1..N] only. The
 * forward passes run in the layout of train's flags (td_train_run with the
 * checkpoint loaded through --resume, td_layout_pass_forward), so a layout
 * changes only the model's fp32 arithmetic, not which tokens count. It
 * measures the model, not a training run: the checkpoint's precision unless
 * --precision says otherwise, every token routed to its experts (no
 * capacity), and a forward's memory (no gradients or moments: the dp
 * strategy's forward_only, set for a layout pass; block recomputation's
 * activation buffers). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/base.h"
#include "trident/ckpt.h"
#include "trident/comm.h"
#include "trident/data.h"
#include "trident/flags.h"
#include "trident/formats_json.h"
#include "trident/formats_manifest.h"
#include "trident/train.h"
#include "eval_task.h"

/* train's flags that choose the layout (and how it computes), for eval */
static const char *const LAYOUT_FLAGS[] = {
    "--dp", "--tp", "--pp", "--cp", "--ep", "--grid-order", "--sequence-parallel", "--zero", "--precision", "--schedule", "--virtual-stages",
    "--pp-partition", "--micro-batches", "--grad-accum", "--threads", "--piece-mb", "--comm-timeout",
    "--heartbeat-timeout", "--verbose", "--device",
};

typedef struct {
    const char *ckpt, *split, *log;
    const char *task_path, *task_out; /* --task, --task-out */
    td_task *task;
    unsigned long long max_tokens; /* 0: all */
    td_checkpoint ck;
    FILE *logf;
    /* the pass: the split's tokens, the predicted count, windows */
    const int *tok;
    int *joined; /* train + val for --split all */
    size_t predicted, windows, forwards;
    int eod_loss, eod;   /* trained with --eod-mask-loss, and its --eod (-1: the tokenizer's) */
    int loss_eod;        /* the end-of-text id not scored; -1: every target is */
    size_t scored;       /* the predicted targets scored: the divisor */
    int T, B;
    size_t batch; /* the global batch fill is asked for */
    double loss_sum;
    uint64_t bytes; /* UTF-8 bytes of the predicted tokens' text (text input) */
    int text, world_rank, dp, tp, pp, cp, ep;
    const char *used; /* the precision it runs in */
    char precision[16]; /* the checkpoint's (its manifest's layout) */
} eval_run;

/* Rows first .. first + count - 1 of global batch e->batch. */
static void fill_windows(void *ctx, int first, int count, int T, int *in, int *tg) {
    const eval_run *e = ctx;
    for (int r = 0; r < count; r++) {
        size_t w = e->batch * (size_t)e->B + (size_t)(first + r);
        for (int j = 0; j < T; j++) {
            size_t pos = w * (size_t)T + (size_t)j; /* the input's index in the split */
            int live = w < e->windows && pos < e->predicted;
            in[(size_t)r * T + j] = live ? e->tok[pos] : 0;
            int t = live ? e->tok[pos + 1] : -1; /* ignored past the end */
            tg[(size_t)r * T + j] = t == e->loss_eod ? -1 : t; /* --eod-mask-loss as trained */
        }
    }
}

static int utf8_len(uint32_t c) { return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4; }

/* The bytes of text the scored tokens of t[1..P] stand for (all but
 * skip's; -1: all). */
static uint64_t text_bytes(const td_tokenizer *tk, const int *t, size_t P, int skip) {
    uint64_t n = 0;
    char buf[256];
    for (size_t i = 1; i <= P; i++)
        n += t[i] == skip ? 0u : tk->kind == TD_TOK_BYTE   ? 1u
             : tk->kind == TD_TOK_CHAR ? (uint64_t)utf8_len(tk->chars[t[i]])
                                       : (uint64_t)td_tokenizer_decode(tk, t[i], buf, sizeof buf);
    return n;
}

static void pass(void *ctx, td_layout_pass *p) {
    eval_run *e = ctx;
    const td_dataset *d = td_layout_pass_data(p);
    td_layout_pass_grid(p, &e->world_rank, &e->dp, &e->tp, &e->pp);
    size_t n = strcmp(e->split, "train") == 0 ? d->n_train : strcmp(e->split, "val") == 0 ? d->n_val
                                                                                          : d->n_train + d->n_val;
    if (strcmp(e->split, "all") == 0) { /* train then val: a text file's whole text */
        e->joined = td_alloc(sizeof(int) * n, TD_MEM_OTHER);
        memcpy(e->joined, d->train, sizeof(int) * d->n_train);
        memcpy(e->joined + d->n_train, d->val, sizeof(int) * d->n_val);
        e->tok = e->joined;
    } else
        e->tok = strcmp(e->split, "train") == 0 ? d->train : d->val;
    e->predicted = n - 1; /* the loader checked n > T >= 1 */
    if (e->max_tokens > 0 && e->max_tokens < e->predicted) e->predicted = (size_t)e->max_tokens;
    e->windows = (e->predicted + (size_t)e->T - 1) / (size_t)e->T;
    e->forwards = (e->windows + (size_t)e->B - 1) / (size_t)e->B;
    /* --eod-mask-loss as trained: end-of-text targets are not scored, the
     * loss the mean over the others (the run's validation divisor) */
    e->loss_eod = e->eod_loss ? td_run_doc_eod(&(td_run_data){.eod = e->eod, .eod_mask_loss = 1}, &d->tok) : -1;
    e->scored = 0;
    for (size_t i = 1; i <= e->predicted; i++) e->scored += e->tok[i] != e->loss_eod;
    TD_CHECK(e->scored > 0, "eval: every target of the %zu predicted is the end-of-text token %d, which "
             "--eod-mask-loss (as trained) does not score", e->predicted, e->loss_eod);
    if (e->text) e->bytes = text_bytes(&d->tok, e->tok, e->predicted, e->loss_eod);
    td_log("eval: %s (step %d), %s split of %s: %zu tokens predicted in %zu windows of %d + 1 tokens, "
           "%zu forwards of --batch %d; dp %d x tp %d x pp %d x cp %d, ep %d; %s\n",
           e->ck.dir, e->ck.step, e->split, d->description, e->predicted, e->windows, e->T, e->forwards, e->B,
           e->dp, e->tp, e->pp, e->cp, e->ep, e->used);
    double t0 = td_now_ms(), shown = t0;
    e->loss_sum = 0.0;
    for (e->batch = 0; e->batch < e->forwards; e->batch++) {
        e->loss_sum += td_layout_pass_forward(p, fill_windows, e);
        double now = td_now_ms();
        if (now - shown >= 10000.0 && e->batch + 1 < e->forwards) { /* long runs: a line every 10 s */
            size_t done = td_min_sz((e->batch + 1) * (size_t)e->B * (size_t)e->T, e->predicted);
            td_log("eval: %zu/%zu tokens (%.0f%%), mean loss so far %.6f, %.1f s\n", done, e->predicted,
                   100.0 * (double)done / (double)e->predicted,
                   e->loss_sum / (double)done * (double)e->predicted / (double)e->scored, (now - t0) / 1000.0);
            fflush(stdout);
            shown = now;
        }
    }
}

/* --log's members that say what ran: the layout, the precision and the
 * memory by category (planned, and the peak from the model's allocation on). */
static void log_run(const eval_run *e, const td_train_result *res) {
    fprintf(e->logf, "\"dp\": %d, \"tp\": %d, \"pp\": %d, \"cp\": %d, \"ep\": %d, \"precision\": \"%s\"", e->dp,
            e->tp, e->pp, e->cp, e->ep, e->used);
    /* the whole per category, then its device and host parts */
    static const char *const keys[6] = {"mem_planned", "mem_peak", "mem_planned_device", "mem_peak_device",
                                        "mem_planned_host", "mem_peak_host"};
    const size_t *vals[6] = {res->mem_planned, res->mem_peak, res->mem_planned_device, res->mem_peak_device,
                             res->mem_planned_host, res->mem_peak_host};
    for (int k = 0; k < 6; k++) {
        fprintf(e->logf, ", \"%s\": {", keys[k]);
        for (int c = 0; c < TD_MEM_NCAT; c++)
            fprintf(e->logf, "%s\"%s\": %zu", c ? ", " : "", td_mem_cat_name(c), vals[k][c]);
        fprintf(e->logf, "}");
    }
}

/* --log FILE: one JSON object of the results (world rank 0). */
static void write_log(const eval_run *e, const char *data, double mean, double ppl, double bpb,
                      const td_train_result *res) {
    char ck[8400] = "", dp[8400] = "";
    TD_CHECK(td_json_put_str(ck, sizeof ck, 0, e->ck.dir) > 0 && td_json_put_str(dp, sizeof dp, 0, data) > 0,
             "eval --log %s: the checkpoint or data path is too long to record", e->log);
    fprintf(e->logf,
            "{\"ckpt\": %s, \"step\": %d, \"data\": %s, \"split\": \"%s\", \"tokens\": %zu, \"windows\": %zu, "
            "\"scored\": %zu, \"batch\": %d, \"seq\": %d, \"loss_sum\": %.17g, \"loss\": %.17g, "
            "\"perplexity\": %.17g, ",
            ck, e->ck.step, dp, e->split, e->predicted, e->windows, e->scored, e->B, e->T, e->loss_sum, mean, ppl);
    if (e->text) fprintf(e->logf, "\"bytes\": %llu, \"bits_per_byte\": %.17g, ", (unsigned long long)e->bytes, bpb);
    else fprintf(e->logf, "\"bytes\": null, \"bits_per_byte\": null, ");
    log_run(e, res);
    fprintf(e->logf, "}\n");
    TD_CHECK(fflush(e->logf) == 0 && !ferror(e->logf) && fclose(e->logf) == 0, "eval --log %s: writing failed: %s",
             e->log, strerror(errno));
}

/* --task: the checkpoint's scores on a multiple-choice task (eval_task.c)
 * instead of the loss on --data's split; --log gets the run's members, then
 * the task's. */
static void report_task(eval_run *e, const td_train_result *res) {
    if (e->logf) {
        char ck[8400] = "";
        TD_CHECK(td_json_put_str(ck, sizeof ck, 0, e->ck.dir) > 0, "eval --log %s: the checkpoint path is too long "
                 "to record", e->log);
        fprintf(e->logf, "{\"ckpt\": %s, \"step\": %d, \"batch\": %d, \"seq\": %d, ", ck, e->ck.step, e->B, e->T);
        log_run(e, res);
    }
    td_task_report(e->task, e->logf, e->log, e->task_out);
}

/* Document masking as the checkpoint was trained (its run_config's
 * --doc-mask, --eod, --doc-positions and --eod-mask-loss): the loss
 * measured is the one it learned. */
static void docs_for_checkpoint(eval_run *e, td_train_opts *o, const td_manifest *m, const char *dir) {
    td_ckpt_docs d;
    td_ckpt_manifest_docs(m, dir, &d);
    o->doc_mask = d.doc_mask, e->eod_loss = d.eod_mask_loss;
    if (d.doc_mask || d.eod_mask_loss) o->eod = d.eod;
    e->eod = o->eod;
    if (d.pos_reset) o->doc_positions = "reset";
    if (o->doc_mask)
        td_log("eval: document masking as trained (--eod %d; -1: the tokenizer's%s)\n", o->eod,
               o->doc_positions ? "; --doc-positions reset" : "");
    if (e->eod_loss)
        td_log("eval: end-of-text targets not scored, as trained (--eod-mask-loss, --eod %d; -1: the "
               "tokenizer's): the loss is the mean over the others\n", o->eod);
}

/* The arithmetic: the checkpoint's precision unless --precision names
 * one (then a line says which, when they differ). A bf16 model is measured
 * as it was trained, and at bf16's speed; fp32 arithmetic remains a flag. */
static void precision_for_checkpoint(eval_run *e, td_train_opts *o) {
    td_manifest m;
    char dir[4096];
    td_ckpt_read_manifest(e->ckpt, "--ckpt", &m, dir, sizeof dir);
    snprintf(e->precision, sizeof e->precision, "%s", m.precision[0] ? m.precision : "fp32");
    docs_for_checkpoint(e, o, &m, dir);
    td_manifest_free(&m);
    if (!o->precision)
        o->precision = e->precision;
    else if (strcmp(o->precision, e->precision) != 0)
        td_log("eval: --precision %s, not the checkpoint's %s\n", o->precision, e->precision);
}

/* A character-level checkpoint reads text of exactly its characters (train
 * builds the vocabulary from the text, the checkpoint records it): source
 * `path` of --data must have them. */
static void same_chars(const eval_run *e, const char *path) {
    const td_tokenizer *tk = &e->ck.tok;
    FILE *f = fopen(path, "rb");
    TD_CHECK(f, "eval: --data %s cannot be read: %s", path, strerror(errno));
    size_t cap = 1 << 16, len = 0, k;
    char *text = malloc(cap);
    TD_CHECK(text, "eval: out of memory reading --data %s", path);
    while ((k = fread(text + len, 1, cap - len, f)) > 0)
        if ((len += k) == cap) TD_CHECK((text = realloc(text, cap *= 2)), "eval: out of memory reading --data %s", path);
    TD_CHECK(!ferror(f), "eval: --data %s: reading failed: %s", path, strerror(errno));
    fclose(f);
    td_tokenizer own;
    td_tokenizer_build_char(&own, text, len, "--data");
    free(text);
    TD_CHECK(own.V == tk->V && memcmp(own.chars, tk->chars, sizeof(uint32_t) * (size_t)tk->V) == 0,
             "eval: --data %s has %d distinct characters, not the %d of --ckpt %s's character vocabulary; a "
             "character-level model reads text of exactly its characters (the text it was trained on, or one "
             "like it)", path, own.V, tk->V, e->ckpt);
    td_tokenizer_free(&own);
}

/* The checkpoint's tokenizer decides how --data is read: token ids or text,
 * and for text which tokenizer. A blend (W:PATH,...) is checked source by
 * source (the loader then holds them to one tokenizer). */
static void data_for_checkpoint(eval_run *e, td_train_opts *o) {
    const td_tokenizer *tk = &e->ck.tok;
    int tokens = td_data_is_tokens(o->data);
    e->text = !tokens;
    if (td_tokenizer_is_bpe(tk->kind)) { o->tokenizer = td_tokenizer_name(tk->kind); return; }
    if (tk->kind == TD_TOK_HF) { o->tokenizer = tk->file; return; } /* the checkpoint's tokenizer.json */
    if (tokens) {
        TD_CHECK(tk->kind == TD_TOK_IDS, "eval: --data %s is token ids, but --ckpt %s was trained on text (tokenizer "
                 "%s); give a text file", o->data, e->ckpt, td_tokenizer_name(tk->kind));
        o->vocab = tk->V; /* ids at or above the model's vocabulary are refused by the loader */
        return;
    }
    TD_CHECK(tk->kind != TD_TOK_IDS, "eval: --ckpt %s is a model of token ids (no tokenizer), but --data %s is a "
             "text file; give a .bin token file or a set of shards", e->ckpt, o->data);
    o->tokenizer = tk->kind == TD_TOK_CHAR ? "char" : "byte";
    if (tk->kind != TD_TOK_CHAR) return;
    td_data_blend_spec bs;
    if (!td_data_blend_parse(o->data, &bs, "eval: --data")) {
        same_chars(e, o->data);
        return;
    }
    for (int s = 0; s < bs.n; s++) same_chars(e, bs.path[s]);
    td_data_blend_spec_free(&bs);
}

int td_eval_main(int argc, char **argv) {
    td_train_opts o;
    td_train_opts_default(&o);
    eval_run e;
    memset(&e, 0, sizeof e);
    e.loss_eod = -1;
    o.batch = 8;
    td_flag train[TD_TRAIN_MAX_FLAGS], flags[TD_TRAIN_MAX_FLAGS];
    int n_train = td_train_flag_table(&o, train, TD_TRAIN_MAX_FLAGS), n = 0;
    const td_flag own[] = {
        {"--ckpt", TD_FLAG_STR, &e.ckpt, "checkpoint: a directory written by train --out (follows DIR/latest), one of its step directories, or one written by import", NULL},
        {"--data", TD_FLAG_STR, &o.data, "text file (UTF-8), token file (.bin), shard set or blend (W:PATH,...), read as train reads it with the checkpoint's tokenizer (not needed with --task)", NULL},
        {"--split", TD_FLAG_STR, &e.split, "val (default: the split train validates on), train, or all (train then val)", NULL},
        {"--batch", TD_FLAG_INT, &o.batch, "windows of T + 1 tokens (with --task: candidates) per forward over all ranks, a multiple of dp x micro-batches (8)", "[1, 2147483647]"},
        {"--max-tokens", TD_FLAG_U64, &e.max_tokens, "predict only the first N tokens after the split's first: t[1..N] (default: all n - 1)", "[1, inf)"},
        {"--log", TD_FLAG_STR, &e.log, "write the results as one JSON object to FILE", NULL},
        {"--task", TD_FLAG_STR, &e.task_path, "score a multiple-choice task instead: FILE.jsonl in HellaSwag's schema (ctx, endings, label), accuracy by each ending's summed and mean loss", NULL},
        {"--task-out", TD_FLAG_STR, &e.task_out, "with --task: one JSON line per example to FILE (label, predictions, each ending's token count, summed and mean loss)", NULL},
    };
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++) flags[n++] = own[i];
    for (size_t k = 0; k < sizeof LAYOUT_FLAGS / sizeof LAYOUT_FLAGS[0]; k++)
        for (int i = 0; i < n_train; i++)
            if (strcmp(train[i].name, LAYOUT_FLAGS[k]) == 0) flags[n++] = train[i];
    for (int i = 0; i < n; i++) /* eval's default is not train's */
        if (strcmp(flags[i].name, "--precision") == 0)
            flags[i].help = "arithmetic of the forward passes: fp32, bf16 or fp16 (default: the checkpoint's, from its "
                            "manifest)";
    o.precision = NULL; /* given or not: the checkpoint's by default */
    td_flags_parse("eval", flags, n, argc, argv);
    TD_CHECK(e.ckpt, "eval: --ckpt DIR is required (a directory written by 'trident train --out DIR' or "
             "'trident import', or one of its step directories)");
    TD_CHECK(o.data || e.task_path, "eval: --data PATH is required (the text or token file to evaluate on), "
             "or --task FILE.jsonl (scored with the checkpoint's tokenizer)");
    TD_CHECK(!e.task_out || e.task_path, "eval: --task-out %s needs --task FILE.jsonl", e.task_out);
    TD_CHECK(!e.task_path || (!e.split && e.max_tokens == 0), "eval: --%s scores --data's split, not a --task; "
             "drop it", e.split ? "split" : "max-tokens");
    if (!e.split) e.split = "val";
    TD_CHECK(strcmp(e.split, "val") == 0 || strcmp(e.split, "train") == 0 || strcmp(e.split, "all") == 0,
             "eval: --split '%s' is not a split; valid: val, train, all", e.split);
    td_ckpt_describe(&e.ck, e.ckpt);
    precision_for_checkpoint(&e, &o);
    /* the model and the run it continues come from the checkpoint */
    td_train_opts_set_model(&o, &e.ck.cfg);
    o.seed = e.ck.seed;
    o.resume = e.ck.dir;
    /* eval measures the model: every token reaches its experts (training's
     * capacity would drop assignments by the micro-batch's size) */
    o.moe.capacity = 0.0f;
    o.steps = e.ck.step + 1; /* one step beyond it: none is run */
    o.eval_every = 0, o.sample_tokens = 0, o.quiet = 1;
    /* a forward keeps no block's activations past its end: the block
     * recomputation mode's buffers (one block's tensors and the block
     * inputs), the same arithmetic; zb-h1 refuses it and keeps its own */
    if (!o.schedule || strcmp(o.schedule, "zb-h1") != 0) o.recompute = "block";
    if (o.data) data_for_checkpoint(&e, &o);
    else o.tokenizer_only = &e.ck.tok; /* --task alone: its examples are the text */
    td_train_opts_check(&o);
    e.T = e.ck.cfg.T, e.B = o.batch, e.cp = o.cp, e.ep = o.ep, e.used = o.precision;
    if (e.log && td_comm_rank(td_comm_world()) == 0) { /* before the work, not after it */
        e.logf = fopen(e.log, "w");
        TD_CHECK(e.logf, "eval --log %s cannot be written: %s", e.log, strerror(errno));
    }
    if (e.task_path) e.task = td_task_open(e.task_path, &e.ck.tok, e.T, e.B);
    o.layout_pass = e.task ? td_task_pass : pass, o.layout_pass_ctx = e.task ? (void *)e.task : &e;
    td_train_result res;
    td_train_run(&o, &res, 0);
    int rc = res.stop_step >= 0 ? 3 : 0;
    if (rc == 0 && e.task) {
        td_task_grid(e.task, &e.world_rank, &e.dp, &e.tp, &e.pp);
        if (e.world_rank == 0) report_task(&e, &res);
    } else if (rc == 0 && e.world_rank == 0) {
        double mean = e.loss_sum / (double)e.scored, ppl = exp(mean);
        double bpb = e.text ? e.loss_sum / log(2.0) / (double)e.bytes : NAN;
        printf("eval: tokens %zu", e.predicted);
        if (e.scored < e.predicted) printf(" (%zu scored: end-of-text targets not)", e.scored);
        printf(" | loss %.6f nats/token | perplexity %.4f | ", mean, ppl);
        if (e.text) printf("%.6f bits per byte (%llu bytes of text)\n", bpb, (unsigned long long)e.bytes);
        else printf("bits per byte unknown (a token file: the bytes of its text are not known)\n");
        fflush(stdout);
        if (e.logf) write_log(&e, o.data, mean, ppl, bpb, &res);
    }
    td_train_result_free(&res);
    td_free(e.joined);
    td_task_close(e.task);
    td_ckpt_free(&e.ck);
    return rc;
}
