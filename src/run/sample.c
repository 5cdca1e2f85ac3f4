/* Text generation from a trained model (`trident sample` and the end of a
 * training run). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "report.h"
#include "trident/base.h"
#include "trident/bpe.h"
#include "trident/decode.h"
#include "trident/kernels.h"

/* Tokens by weight, largest first, ties by id (top-p's order; glibc's
 * qsort_r passes the weights). */
static int by_weight(const void *a, const void *b, void *weights) {
    const float *w = weights;
    int i = *(const int *)a, j = *(const int *)b;
    float wi = w[i], wj = w[j];
    return wi > wj ? -1 : wi < wj ? 1 : (i > j) - (i < j);
}

double td_sample_weights(float *w, const float *logits, int V, float temperature, int top_k,
                         float top_p) {
    float maxv = -INFINITY;
    int arg = 0;
    for (int i = 0; i < V; i++)
        if (logits[i] > maxv) maxv = logits[i], arg = i;
    if (temperature == 0.0f) { /* greedy: the first of the largest logits alone */
        for (int i = 0; i < V; i++) w[i] = i == arg ? 1.0f : 0.0f;
        return 1.0;
    }
    float kth = -INFINITY;
    if (top_k > 0 && top_k < V) { /* threshold = k-th largest logit */
        float *tmp = malloc(sizeof(float) * (size_t)V);
        TD_ASSERT(tmp);
        memcpy(tmp, logits, sizeof(float) * (size_t)V);
        for (int k = 0; k < top_k; k++) {
            int best = 0;
            for (int i = 1; i < V; i++) if (tmp[i] > tmp[best]) best = i;
            kth = tmp[best];
            tmp[best] = -INFINITY;
        }
        free(tmp);
    }
    double sum = 0.0;
    for (int i = 0; i < V; i++) {
        w[i] = logits[i] < kth ? 0.0f : expf((logits[i] - maxv) / temperature);
        sum += w[i];
    }
    if (top_p <= 0.0f || top_p >= 1.0f) return sum;
    /* top-p over what temperature and top-k left: keep tokens in order while
     * the mass before them is below top_p of the whole */
    int *order = malloc(sizeof(int) * (size_t)V);
    TD_ASSERT(order);
    for (int i = 0; i < V; i++) order[i] = i;
    qsort_r(order, (size_t)V, sizeof(int), by_weight, w);
    double acc = 0.0, goal = (double)top_p * sum, kept = 0.0;
    for (int r = 0; r < V; r++) {
        int i = order[r];
        if (acc < goal) {
            acc += w[i];
            kept += w[i];
        } else {
            w[i] = 0.0f;
        }
    }
    free(order);
    return kept;
}

/* A token drawn from the weights with uniform u in [0, 1). */
static int sample_token(const float *logits, int V, const td_sampling *sp, double u) {
    float *p = malloc(sizeof(float) * (size_t)V);
    TD_ASSERT(p);
    double sum = td_sample_weights(p, logits, V, sp->temperature, sp->top_k, sp->top_p);
    double acc = 0.0, target = u * sum;
    int tok = -1;
    for (int i = 0; i < V; i++) {
        if (p[i] > 0.0f) tok = i; /* the last kept, should rounding leave acc <= target */
        acc += p[i];
        if (acc > target) break;
    }
    TD_ASSERT(tok >= 0);
    free(p);
    return tok;
}

/* The model's next-token logits: the whole window for every token (the
 * oracle), or incrementally with the key/value cache. */
typedef struct {
    const td_gpt_config *c;
    td_gpt m;           /* no_cache */
    int *window;        /* [T] no_cache */
    float *row;         /* [Vp] no_cache: the last row's logits, downloaded */
    td_decode dec;      /* the cache */
    int cached;
    int eod;            /* --doc-mask's end-of-text id; -1: no document masking */
    int doc, scanned;   /* the current document's first position; seq[0..scanned) looked at */
    int start;          /* the last call's window start (-1: none yet) */
    FILE *progress;
    td_sample_stats st;
} next_logits;

/* The cache restarts from seq[start..len): the prompt, or the window after
 * it slid past T (positions shift, so every row is recomputed as the whole
 * pass would). */
static const float *prefill(next_logits *g, const int *seq, int start, int len, int is_prompt) {
    const float *lg = NULL;
    int n = len - start, lines = is_prompt && g->progress && n > TD_SAMPLE_CHUNK;
    double t0 = td_now_ms();
    td_decode_reset(&g->dec);
    for (int i = 0; i < n; i += g->dec.chunk) {
        int k = n - i < g->dec.chunk ? n - i : g->dec.chunk;
        lg = td_decode_step(&g->dec, seq + start + i, k);
        if (lines)
            fprintf(g->progress, "trident: sample: prompt %d/%d tokens (%.1f s)\n", i + k, n,
                    (td_now_ms() - t0) / 1000.0);
    }
    if (lines) fflush(g->progress);
    return lg;
}

/* The window's start: the last T tokens, and under document masking not
 * before the current document. The query (the last token) is in the
 * document after the last end-of-text token before it (an end-of-text token
 * ends its own document), which sees nothing of earlier ones: with the
 * document at position 0 that is the document run alone (--doc-positions
 * reset's positions; rotary attention is relative, so continue's up to
 * rounding). */
static int window_start(next_logits *g, const int *seq, int len) {
    for (; g->eod >= 0 && g->scanned < len - 1; g->scanned++)
        if (seq[g->scanned] == g->eod) g->doc = g->scanned + 1;
    int start = len > g->c->T ? len - g->c->T : 0;
    return start > g->doc ? start : g->doc;
}

static const float *logits_of(next_logits *g, const int *seq, int len, int first) {
    const td_gpt_config *c = g->c;
    int start = window_start(g, seq, len), n = len - start;
    long long rows;
    const float *lg;
    if (!g->cached) {
        memset(g->window, 0, sizeof(int) * c->T);
        memcpy(g->window, seq + start, sizeof(int) * n);
        td_gpt_forward(&g->m, g->window, NULL); /* causal: positions >= n do not matter */
        td_dev_download(g->row, g->m.logits + (size_t)(n - 1) * c->Vp, sizeof(float) * (size_t)c->Vp,
                        TD_HOST_EVAL);
        td_dev_sync();
        lg = g->row;
        rows = c->T; /* every forward computes the T rows of the window */
    } else {
        long long rows0 = g->dec.rows;
        if (first || start != g->start) /* the prompt, a window that slid or a new document */
            lg = prefill(g, seq, start, len, first);
        else
            lg = td_decode_step(&g->dec, seq + len - 1, 1);
        rows = g->dec.rows - rows0;
    }
    g->start = start;
    if (first) {
        g->st.prompt_tokens = n;
        g->st.prompt_rows = rows;
    } else {
        g->st.steps++;
        g->st.step_rows += rows;
    }
    return lg;
}

void td_generate(const td_param_table *canon, const float *params, const td_tokenizer *tok,
                 const td_sampling *sp, FILE *out) {
    const char *prompt = sp->prompt;
    int n_tokens = sp->tokens;
    unsigned long long seed = sp->seed;
    const td_gpt_config *c = &canon->cfg;
    int cap = (int)strlen(prompt) + n_tokens + 1;
    int *seq = td_alloc(sizeof(int) * (size_t)cap, TD_MEM_OTHER);
    int len = 0;
    if (prompt && *prompt) {
        int *ids;
        size_t n = td_tokenizer_encode(tok, prompt, strlen(prompt), &ids);
        memcpy(seq, ids, sizeof(int) * n);
        len = (int)n;
        td_free(ids);
        fputs(prompt, out);
    } else {
        /* start from a newline when the vocabulary has one, as nanoGPT does */
        int nl = 0;
        if (tok->kind == TD_TOK_BYTE) nl = '\n';
        if (tok->kind == TD_TOK_CHAR)
            for (int i = 0; i < tok->V; i++) if (tok->chars[i] == '\n') nl = i;
        /* a BPE's document-start token (GPT-2's <|endoftext|>), as its documents begin */
        if (td_tokenizer_has_bpe(tok->kind) && td_bpe_bos(tok->bpe) >= 0) nl = td_bpe_bos(tok->bpe);
        seq[len++] = nl;
    }
    next_logits g;
    memset(&g, 0, sizeof g);
    g.c = c, g.cached = !sp->no_cache, g.progress = sp->progress;
    g.eod = sp->doc_mask ? sp->eod : -1, g.start = -1;
    if (g.cached) { /* positions for the prompt and the tokens, at most the model's T */
        long long want = (long long)len + n_tokens;
        int rows = want < c->T ? (int)want : c->T;
        int chunk = rows < TD_SAMPLE_CHUNK ? rows : TD_SAMPLE_CHUNK;
        td_decode_create(&g.dec, canon, params, rows, chunk);
        g.st.cache_rows = rows;
        g.st.cache_bytes = g.dec.cache_bytes;
        g.st.bytes = g.dec.bytes;
    } else {
        td_gpt_create(&g.m, canon, 1, 0);
        td_gpt_bind_flat(&g.m, (float *)params, NULL);
        g.window = td_alloc(sizeof(int) * c->T, TD_MEM_OTHER);
        g.row = td_alloc(sizeof(float) * (size_t)c->Vp, TD_MEM_OTHER);
        g.st.bytes = td_gpt_activation_bytes(canon, 1, 0);
    }
    char buf[256];
    td_utf8_out text = {{0}, 0}; /* BPE tokens can end inside a character */
    for (int i = 0; i < n_tokens; i++) {
        const float *logits = logits_of(&g, seq, len, i == 0);
        int next = sample_token(logits, c->V, sp, td_rng_uniform(seed, 77, (uint64_t)i));
        seq[len++] = next;
        int k = td_tokenizer_decode(tok, next, buf, sizeof buf);
        if (td_tokenizer_has_bpe(tok->kind)) td_utf8_out_write(&text, buf, k, out);
        else fwrite(buf, 1, (size_t)k, out);
        if (tok->kind == TD_TOK_IDS) fputc(' ', out);
    }
    td_utf8_out_flush(&text, out);
    fflush(out);
    if (sp->stats) *sp->stats = g.st;
    if (g.cached) {
        td_decode_destroy(&g.dec);
    } else {
        td_free(g.window);
        td_free(g.row);
        td_gpt_destroy(&g.m);
    }
    td_free(seq);
}
