/* Text generation from a trained model (`trident sample` and the end of a
 * training run). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "report.h"
#include "trident/base.h"
#include "trident/bpe.h"
#include "trident/kernels.h"

/* Index sampled from probs[0..V) restricted to the top_k largest (0 = all). */
static int sample_token(const float *logits, int V, float temperature, int top_k, double u) {
    float *p = malloc(sizeof(float) * (size_t)V);
    TD_ASSERT(p);
    float maxv = -INFINITY;
    for (int i = 0; i < V; i++) maxv = fmaxf(maxv, logits[i]);
    float kth = -INFINITY;
    if (top_k > 0 && top_k < V) { /* threshold = k-th largest logit */
        float *tmp = malloc(sizeof(float) * (size_t)V);
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
        p[i] = logits[i] < kth ? 0.0f : expf((logits[i] - maxv) / temperature);
        sum += p[i];
    }
    double acc = 0.0, target = u * sum;
    int tok = V - 1;
    for (int i = 0; i < V; i++) {
        acc += p[i];
        if (acc > target) { tok = i; break; }
    }
    free(p);
    return tok;
}

void td_generate(const td_param_table *canon, const float *params, const td_tokenizer *tok,
                 const td_sampling *sp, FILE *out) {
    const char *prompt = sp->prompt;
    int n_tokens = sp->tokens, top_k = sp->top_k;
    float temperature = sp->temperature;
    unsigned long long seed = sp->seed;
    const td_gpt_config *c = &canon->cfg;
    td_gpt m;
    td_gpt_create(&m, canon, 1, 0);
    td_gpt_bind_flat(&m, (float *)params, NULL);
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
    int *window = td_alloc(sizeof(int) * c->T, TD_MEM_OTHER);
    char buf[256];
    td_utf8_out text = {{0}, 0}; /* BPE tokens can end inside a character */
    for (int i = 0; i < n_tokens; i++) {
        int start = len > c->T ? len - c->T : 0, n = len - start;
        memset(window, 0, sizeof(int) * c->T);
        memcpy(window, seq + start, sizeof(int) * n);
        td_gpt_forward(&m, window, NULL); /* causal: positions >= n do not matter */
        const float *logits = m.logits + (size_t)(n - 1) * c->Vp;
        int next = sample_token(logits, c->V, temperature, top_k, td_rng_uniform(seed, 77, (uint64_t)i));
        seq[len++] = next;
        int k = td_tokenizer_decode(tok, next, buf, sizeof buf);
        if (td_tokenizer_has_bpe(tok->kind)) td_utf8_out_write(&text, buf, k, out);
        else fwrite(buf, 1, (size_t)k, out);
        if (tok->kind == TD_TOK_IDS) fputc(' ', out);
    }
    td_utf8_out_flush(&text, out);
    fflush(out);
    td_free(window);
    td_free(seq);
    td_gpt_destroy(&m);
}
