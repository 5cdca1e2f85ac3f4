/* trident eval --task FILE.jsonl: multiple-choice scoring as llm.c's
 * dev/data/hellaswag.py does it. Each line is one example in HellaSwag's
 * schema: ctx (the context), endings (the candidates), label (the right
 * one's index; the other fields are not read). Candidate i is the
 * sequence tokenize(ctx) + tokenize(" " + endings[i]); its loss is the sum
 * of the cross-entropies of the ending's tokens only (the context's targets
 * are ignored, -1), and the prediction is the candidate of least summed
 * loss (acc) and of least mean loss per ending token (acc_norm). Every
 * candidate is one row of a global batch, right-padded with ignored
 * targets, run by td_layout_pass_forward_rows in the run's layout and
 * precision, so a layout changes only the model's arithmetic, never which
 * tokens count. A candidate longer than T + 1 tokens loses context tokens
 * from the left (counted and reported); an ending that does not fit with
 * one context token is an error. */
#include "eval_task.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "trident/base.h"
#include "trident/formats_data.h"
#include "trident/formats_json.h"

#define TD_TASK_MAX_ENDINGS 64

typedef struct {
    int line;       /* 1-based line of the file */
    long long ind;  /* its "ind" field, -1 when absent */
    int label, n_end;
    int row0;       /* its first candidate row */
} task_ex;

struct td_task {
    const char *path;
    int T, batch;
    int n, cap;
    task_ex *ex;
    int rows, rows_cap;
    size_t *off;     /* [rows] where row r's tokens start in tok */
    int *len, *ctx;  /* [rows] its tokens, the context's share of them */
    int *tok;
    size_t n_tok, tok_cap;
    int truncated;   /* candidates whose context was cut from the left */
    double *loss;    /* [rows] summed loss over the ending's tokens */
    size_t forwards, at; /* global batches; the one being filled */
    int world_rank, dp, tp, pp;
};

static void *grow(void *p, size_t elem, int *cap, int need) {
    if (need <= *cap) return p;
    int c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    p = realloc(p, elem * (size_t)c);
    TD_CHECK(p, "eval: out of memory reading a --task file");
    *cap = c;
    return p;
}

/* text's tokens into *ids (td_alloc'd); a character a character-level
 * model does not know is an error naming the line and the field. */
static size_t encode(const td_task *t, const td_tokenizer *tk, const char *text, size_t n, int line, const char *what,
                     int **ids) {
    if (tk->kind != TD_TOK_CHAR) return td_tokenizer_encode(tk, text, n, ids);
    *ids = td_alloc(sizeof(int) * (n ? n : 1), TD_MEM_OTHER);
    size_t count;
    td_err e;
    TD_CHECK(td_utf8_encode_ids(tk->chars, (size_t)tk->V, (const unsigned char *)text, n, *ids, &count, &e) == 0,
             "eval --task %s line %d: field %s: %s (a character-level model knows only the characters it was "
             "trained on)", t->path, line, what, e.msg);
    return count;
}

/* One candidate row: ctx's tokens then the ending's, cut to T + 1. */
static void add_row(td_task *t, const int *c, size_t nc, const int *e, size_t ne, int line, int i) {
    TD_CHECK(ne <= (size_t)t->T, "eval --task %s line %d: endings[%d] is %zu tokens, and with one token of "
             "context that is more than the model's context of %d + 1", t->path, line, i, ne, t->T);
    size_t drop = nc + ne - 1 > (size_t)t->T ? nc + ne - 1 - (size_t)t->T : 0;
    t->truncated += drop > 0;
    t->off = grow(t->off, sizeof(size_t), &t->rows_cap, t->rows + 1);
    int cap = t->rows_cap; /* the three per-row arrays grow together */
    t->len = realloc(t->len, sizeof(int) * (size_t)cap), t->ctx = realloc(t->ctx, sizeof(int) * (size_t)cap);
    TD_CHECK(t->len && t->ctx, "eval: out of memory reading --task %s", t->path);
    size_t need = t->n_tok + nc - drop + ne;
    if (need > t->tok_cap) {
        while (t->tok_cap < need) t->tok_cap = t->tok_cap ? 2 * t->tok_cap : 4096;
        TD_CHECK((t->tok = realloc(t->tok, sizeof(int) * t->tok_cap)), "eval: out of memory reading --task %s", t->path);
    }
    t->off[t->rows] = t->n_tok;
    memcpy(t->tok + t->n_tok, c + drop, sizeof(int) * (nc - drop));
    memcpy(t->tok + t->n_tok + nc - drop, e, sizeof(int) * ne);
    t->len[t->rows] = (int)(nc - drop + ne), t->ctx[t->rows] = (int)(nc - drop);
    t->n_tok = need;
    t->rows++;
}

/* The label: an integer, or a string of one (as some copies of the data
 * write it), in [0, n). */
static int read_label(const td_task *t, const td_jv *o, int line, int n) {
    const td_jv *l = td_json_get(o, "label");
    TD_CHECK(l, "eval --task %s line %d: field label: missing (the right ending's index; HellaSwag's test "
             "split has no labels)", t->path, line);
    long long v = -1;
    if (l->type == TD_JV_NUM && l->is_int) v = l->i;
    else if (l->type == TD_JV_STR && l->len > 0 && l->len < 10 && strspn(l->str, "0123456789") == l->len)
        v = atoll(l->str);
    else
        td_fail("eval --task %s line %d: field label: not an integer", t->path, line);
    TD_CHECK(v >= 0 && v < n, "eval --task %s line %d: field label: %lld is not in [0, %d) (the endings' "
             "indices)", t->path, line, v, n);
    return (int)v;
}

static void read_example(td_task *t, const td_tokenizer *tk, const char *text, size_t n, int line) {
    td_jv *v;
    td_err e;
    TD_CHECK(td_json_parse(text, n, &v, &e) == 0, "eval --task %s line %d: not JSON: %s", t->path, line, e.msg);
    TD_CHECK(v->type == TD_JV_OBJ, "eval --task %s line %d: not a JSON object (one example per line)", t->path, line);
    const char *ctx;
    TD_CHECK(td_json_get_str(v, "ctx", &ctx, &e) == 0, "eval --task %s line %d: %s", t->path, line, e.msg);
    const td_jv *ends = td_json_get(v, "endings");
    TD_CHECK(ends && ends->type == TD_JV_ARR && ends->n >= 2 && ends->n <= TD_TASK_MAX_ENDINGS,
             "eval --task %s line %d: field endings: %s", t->path, line,
             !ends ? "missing" : ends->type != TD_JV_ARR ? "not an array" : ends->n < 2 ? "fewer than 2 candidates"
                                                                                        : "more than 64 candidates");
    for (int i = 0; i < ends->n; i++)
        TD_CHECK(ends->items[i].type == TD_JV_STR, "eval --task %s line %d: field endings[%d]: not a string",
                 t->path, line, i);
    t->ex = grow(t->ex, sizeof(task_ex), &t->cap, t->n + 1);
    task_ex *x = &t->ex[t->n++];
    const td_jv *ind = td_json_get(v, "ind");
    *x = (task_ex){line, ind && ind->type == TD_JV_NUM && ind->is_int ? (long long)ind->i : -1,
                   read_label(t, v, line, ends->n), ends->n, t->rows};
    int *c;
    size_t nc = encode(t, tk, ctx, strlen(ctx), line, "ctx", &c);
    TD_CHECK(nc > 0, "eval --task %s line %d: field ctx: empty (an ending's first token is scored after the "
             "context's last)", t->path, line);
    for (int i = 0; i < ends->n; i++) {
        const td_jv *s = &ends->items[i];
        char *spaced = td_alloc(s->len + 2, TD_MEM_OTHER); /* " " + ending, as llm.c tokenizes it */
        spaced[0] = ' ';
        memcpy(spaced + 1, s->str, s->len + 1);
        char what[32];
        snprintf(what, sizeof what, "endings[%d]", i);
        int *ids;
        size_t ne = encode(t, tk, spaced, s->len + 1, line, what, &ids);
        add_row(t, c, nc, ids, ne, line, i);
        td_free(ids), td_free(spaced);
    }
    td_free(c);
    td_json_free(v);
}

td_task *td_task_open(const char *path, const td_tokenizer *tk, int T, int batch) {
    TD_CHECK(tk->kind != TD_TOK_IDS, "eval --task %s: the checkpoint is a model of token ids, with no tokenizer "
             "for a task's text", path);
    td_task *t = td_alloc(sizeof *t, TD_MEM_OTHER);
    memset(t, 0, sizeof *t);
    t->path = path, t->T = T, t->batch = batch;
    FILE *f = fopen(path, "rb");
    TD_CHECK(f, "eval --task %s cannot be read: %s", path, strerror(errno));
    size_t cap = 1 << 16, len = 0, k;
    char *text = malloc(cap + 1);
    TD_CHECK(text, "eval: out of memory reading --task %s", path);
    while ((k = fread(text + len, 1, cap - len, f)) > 0)
        if ((len += k) == cap) TD_CHECK((text = realloc(text, (cap *= 2) + 1)), "eval: out of memory reading --task %s", path);
    TD_CHECK(!ferror(f), "eval --task %s: reading failed: %s", path, strerror(errno));
    fclose(f);
    text[len] = '\0';
    int line = 0;
    for (size_t at = 0; at < len;) {
        size_t end = at;
        while (end < len && text[end] != '\n') end++;
        line++;
        if (strspn(text + at, " \t\r") < end - at) read_example(t, tk, text + at, end - at, line); /* blank lines skipped */
        at = end + 1;
    }
    free(text);
    TD_CHECK(t->n > 0, "eval --task %s: no examples (one JSON object per line, HellaSwag's schema)", path);
    t->loss = td_alloc(sizeof(double) * (size_t)t->rows, TD_MEM_OTHER);
    t->forwards = ((size_t)t->rows + (size_t)batch - 1) / (size_t)batch;
    return t;
}

/* Rows first .. first + count - 1 of global batch t->at: a candidate's
 * tokens, its ending's targets only, ignored padding after it. */
static void fill(void *ctx, int first, int count, int T, int *in, int *tg) {
    const td_task *t = ctx;
    for (int r = 0; r < count; r++) {
        size_t q = t->at * (size_t)t->batch + (size_t)(first + r);
        int L = q < (size_t)t->rows ? t->len[q] : 0, c = q < (size_t)t->rows ? t->ctx[q] : 0;
        const int *s = q < (size_t)t->rows ? t->tok + t->off[q] : NULL;
        for (int j = 0; j < T; j++) {
            int live = j < L - 1;
            in[(size_t)r * T + j] = live ? s[j] : 0;
            tg[(size_t)r * T + j] = live && j + 1 >= c ? s[j + 1] : -1; /* position j predicts token j + 1 */
        }
    }
}

void td_task_pass(void *ctx, td_layout_pass *p) {
    td_task *t = ctx;
    td_layout_pass_grid(p, &t->world_rank, &t->dp, &t->tp, &t->pp);
    TD_ASSERT(td_layout_pass_rows(p) == t->batch);
    td_log("eval: task %s: %d examples, %d candidates of at most %d + 1 tokens (%d with their context cut from "
           "the left), %zu forwards of --batch %d\n",
           t->path, t->n, t->rows, t->T, t->truncated, t->forwards, t->batch);
    double *rows = td_alloc(sizeof(double) * (size_t)t->batch, TD_MEM_OTHER);
    for (t->at = 0; t->at < t->forwards; t->at++) {
        td_layout_pass_forward_rows(p, fill, t, rows);
        size_t r0 = t->at * (size_t)t->batch;
        for (size_t r = 0; r < (size_t)t->batch && r0 + r < (size_t)t->rows; r++) t->loss[r0 + r] = rows[r];
    }
    td_free(rows);
}

/* Argmin, the first of equals (torch's argmin on CPU). */
static int argmin(const double *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] < x[b]) b = i;
    return b;
}

void td_task_report(const td_task *t, FILE *log, const char *log_path, const char *out_path) {
    FILE *out = NULL;
    if (out_path) {
        out = fopen(out_path, "w");
        TD_CHECK(out, "eval --task-out %s cannot be written: %s", out_path, strerror(errno));
    }
    int correct = 0, correct_norm = 0;
    for (int k = 0; k < t->n; k++) {
        const task_ex *x = &t->ex[k];
        double sum[TD_TASK_MAX_ENDINGS], mean[TD_TASK_MAX_ENDINGS];
        int n = x->n_end;
        for (int i = 0; i < n; i++) {
            int q = x->row0 + i;
            sum[i] = t->loss[q];
            mean[i] = sum[i] / (double)(t->len[q] - t->ctx[q]);
        }
        int pred = argmin(sum, n), pred_norm = argmin(mean, n);
        correct += pred == x->label, correct_norm += pred_norm == x->label;
        if (!out) continue;
        fprintf(out, "{\"line\": %d, \"ind\": ", x->line);
        if (x->ind >= 0) fprintf(out, "%lld", x->ind);
        else fprintf(out, "null");
        fprintf(out, ", \"label\": %d, \"pred\": %d, \"pred_norm\": %d, \"tokens\": [", x->label, pred, pred_norm);
        for (int i = 0; i < n; i++) fprintf(out, "%s%d", i ? ", " : "", t->len[x->row0 + i] - t->ctx[x->row0 + i]);
        fprintf(out, "], \"loss_sum\": [");
        for (int i = 0; i < n; i++) fprintf(out, "%s%.17g", i ? ", " : "", sum[i]);
        fprintf(out, "], \"loss_mean\": [");
        for (int i = 0; i < n; i++) fprintf(out, "%s%.17g", i ? ", " : "", mean[i]);
        fprintf(out, "]}\n");
    }
    if (out)
        TD_CHECK(fflush(out) == 0 && !ferror(out) && fclose(out) == 0, "eval --task-out %s: writing failed: %s",
                 out_path, strerror(errno));
    double acc = (double)correct / t->n, acc_norm = (double)correct_norm / t->n;
    printf("eval: task %s: %d examples | acc %.4f (%d right, least summed loss) | acc_norm %.4f (%d right, least "
           "mean loss per token)\n", t->path, t->n, acc, correct, acc_norm, correct_norm);
    fflush(stdout);
    if (!log) return;
    char tp[8400] = "";
    TD_CHECK(td_json_put_str(tp, sizeof tp, 0, t->path) > 0, "eval --log %s: the --task path is too long to record",
             log_path);
    fprintf(log, ", \"task\": %s, \"examples\": %d, \"candidates\": %d, \"truncated\": %d, \"forwards\": %zu, "
            "\"correct\": %d, \"acc\": %.17g, \"correct_norm\": %d, \"acc_norm\": %.17g}\n",
            tp, t->n, t->rows, t->truncated, t->forwards, correct, acc, correct_norm, acc_norm);
    TD_CHECK(fflush(log) == 0 && !ferror(log) && fclose(log) == 0, "eval --log %s: writing failed: %s", log_path,
             strerror(errno));
}

void td_task_grid(const td_task *t, int *world_rank, int *dp, int *tp, int *pp) {
    *world_rank = t->world_rank, *dp = t->dp, *tp = t->tp, *pp = t->pp;
}

void td_task_close(td_task *t) {
    if (!t) return;
    free(t->ex), free(t->off), free(t->len), free(t->ctx), free(t->tok);
    td_free(t->loss);
    td_free(t);
}
