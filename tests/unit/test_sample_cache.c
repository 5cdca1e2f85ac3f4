/* The sampler's key/value cache (trident/decode.h, src/run/sample.c) against
 * the whole-window path it replaces, on tiny random models of each family:
 * GPT-2 (learned positions, LayerNorm, GELU), Llama (RoPE with Llama 3.1's
 * scaling, RMSNorm, SwiGLU, grouped-query kv heads) and mixtures of experts
 * (softmax router with a shared expert; sigmoid router with a balancing
 * bias). Counts, never times:
 *   - the cache's logits at every position against the whole pass's
 *     (td_gpt_forward over the sequence), to rounding;
 *   - greedy (top-k 1) and seeded sampling give the same text with and
 *     without the cache, also past the model's T (the window slides);
 *   - rows computed: the prompt once, then 1 row per generated token (the
 *     old path: T per token);
 *   - memory: the cache holds prompt + tokens positions, not T (a Llama of
 *     T 131072, as an imported Llama 3.1 has);
 *   - top-p's kept set against a reference written from the definition;
 *   - the progress lines of a long prompt (one per TD_SAMPLE_CHUNK tokens);
 *   - document masking (--doc-mask checkpoints): the context is the current
 *     document alone, against the plain sampler on that document. */
#include <stdio.h>

#include "report.h"
#include "test_util.h"
#include "trident/data.h"
#include "trident/decode.h"
#include "trident/kernels.h"
#include "trident/model.h"

static void check_ll(const char *name, long long got, long long exp) {
    tu_checks++;
    if (got == exp) {
        printf("PASS  %-60s %lld\n", name, got);
        return;
    }
    tu_failures++;
    printf("FAIL  %-60s got %lld expected %lld\n", name, got, exp);
}

static void check_true(const char *name, int ok, const char *detail) {
    tu_checks++;
    printf("%s  %-60s %s\n", ok ? "PASS" : "FAIL", name, ok ? "" : detail);
    if (!ok) tu_failures++;
}

typedef struct {
    const char *name;
    td_gpt_config cfg;
} model_case;

/* Params: the model's init scaled up (peaked distributions, so greedy text
 * is not a sequence of near-ties), a random balancing bias for the router. */
static float *make_params(const td_param_table *t) {
    float *p = TU_NEW(float, t->numel);
    td_param_init_range(t, 4321, 0, t->numel, p);
    for (size_t i = 0; i < t->numel; i++) p[i] *= 6.0f;
    for (int l = 0; l < t->cfg.L; l++) {
        const td_param *b = td_param_lookup_opt(t, TD_T_ROUTERB, l);
        if (b) tu_randn(p + b->offset, b->numel, 900 + (uint64_t)l, 0.05f);
    }
    return p;
}

/* eod >= 0: a checkpoint trained with --doc-mask --eod eod */
static char *generate_docs(const td_param_table *t, const float *p, const char *prompt, int tokens,
                           int top_k, int no_cache, td_sample_stats *st, FILE *progress, int eod) {
    td_tokenizer tok = {.kind = TD_TOK_BYTE, .V = 256};
    char *buf = NULL;
    size_t n = 0;
    FILE *out = open_memstream(&buf, &n);
    td_sampling sp = {prompt, tokens, 1.0f, top_k, 7, 0.0f, no_cache, progress, st, eod >= 0, eod};
    td_generate(t, p, &tok, &sp, out);
    fclose(out);
    return buf;
}

static char *generate(const td_param_table *t, const float *p, const char *prompt, int tokens,
                      int top_k, int no_cache, td_sample_stats *st, FILE *progress) {
    return generate_docs(t, p, prompt, tokens, top_k, no_cache, st, progress, -1);
}

/* (f) --doc-mask: greedy text after "docA|docB" ('|' the end-of-text
 * byte) is the plain sampler's after "docB" alone, with and without the
 * cache, where unmasked the prefix changes it; after "docA|" the first
 * token t1 comes from docA| and the rest is the plain sampler's after "t1"
 * alone (a fresh document mid-generation restarts the cache). */
static void check_docs(const model_case *mc, const td_param_table *t, const float *p) {
    const int eod = '|', n = 12;
    const char *a = "First Citizen:|Before we", *b = a + 15, *a_only = "First Citizen:|";
    char name[128];
    td_sample_stats st;
    char *plain_b = generate(t, p, b, n, 1, 0, &st, NULL), *plain_a = generate(t, p, a, n, 1, 0, &st, NULL);
    const char *gen = plain_b + strlen(b);
    snprintf(name, sizeof name, "%s: unmasked, the prefix before '|' changes the text", mc->name);
    check_true(name, strcmp(plain_a + strlen(a), gen) != 0, "the same: the check below could not fail");
    snprintf(name, sizeof name, "%s: no '|' generated (the oracle's premise)", mc->name);
    check_true(name, strchr(gen, eod) == NULL, gen);
    for (int nc = 0; nc < 2; nc++) {
        char *x = generate_docs(t, p, a, n, 1, nc, &st, NULL, eod);
        snprintf(name, sizeof name, "%s: doc-masked after docA|docB = plain after docB (%s)", mc->name,
                 nc ? "no cache" : "cache");
        check_true(name, strcmp(x + strlen(a), gen) == 0, x);
        char *y = generate_docs(t, p, a_only, n, 1, nc, &st, NULL, eod);
        char first[2] = {y[strlen(a_only)], 0};
        char *z = generate(t, p, first, n - 1, 1, 0, &st, NULL);
        snprintf(name, sizeof name, "%s: after docA|, t1 then plain after t1 (%s)", mc->name,
                 nc ? "no cache" : "cache");
        check_true(name, first[0] != 0 && strchr(y + strlen(a_only), eod) == NULL && strcmp(y + strlen(a_only), z) == 0, y);
        free(x), free(y), free(z);
    }
    free(plain_a), free(plain_b);
}

/* The cache's logits at positions 0..n-1 (prefill of the first `pre` in
 * one call, then one row per call) against the whole pass over the
 * sequence (positions >= n padded, which causality ignores). */
static void check_logits(const model_case *mc, const td_param_table *t, const float *p) {
    const td_gpt_config *c = &t->cfg;
    int n = c->T < 40 ? c->T : 40, pre = 9, Vp = t->Vp;
    int *seq = TU_NEW(int, c->T);
    tu_rand_ints(seq, (size_t)n, 55, c->V);
    td_gpt m;
    td_gpt_create(&m, t, 1, 0);
    td_gpt_bind_flat(&m, (float *)p, NULL);
    td_gpt_forward(&m, seq, NULL);
    float *got = TU_NEW(float, (size_t)n * Vp);
    td_decode d;
    td_decode_create(&d, t, p, n, pre);
    memcpy(got + (size_t)(pre - 1) * Vp, td_decode_step(&d, seq, pre), sizeof(float) * Vp);
    for (int i = pre; i < n; i++)
        memcpy(got + (size_t)i * Vp, td_decode_step(&d, seq + i, 1), sizeof(float) * Vp);
    char name[96];
    snprintf(name, sizeof name, "%s: cached logits = whole pass's (positions %d..%d)", mc->name,
             pre - 1, n - 1);
    /* errors relative to the logits' rms (floor 1): GEMMs of 1 row and of T
     * rows round differently (OpenBLAS picks its kernel by shape); measured
     * up to 4e-6 of the rms here, where a wrong position, mask or cached
     * row is of the order of the rms itself */
    tu_check_close_f(name, got + (size_t)(pre - 1) * Vp, m.logits + (size_t)(pre - 1) * Vp,
                     (size_t)(n - pre + 1) * Vp, 5e-5, 1.0);
    snprintf(name, sizeof name, "%s: rows computed for %d positions", mc->name, n);
    check_ll(name, d.rows, n);
    td_decode_destroy(&d);
    td_gpt_destroy(&m);
}

static void check_model(const model_case *mc) {
    int mark = tu_mark();
    td_gpt_config cfg = mc->cfg;
    td_gpt_config_finish(&cfg);
    td_param_table t;
    td_param_table_build(&t, &cfg, 1);
    float *p = make_params(&t);
    check_logits(mc, &t, p);
    check_docs(mc, &t, p);
    char name[128];
    /* greedy and seeded, within T and past it (the window slides) */
    struct { const char *prompt; int tokens, top_k; } runs[] = {
        {"First Citizen:", 24, 1}, {"First Citizen:", 24, 0}, {"", 12, 1},
        {"Before we proceed any further, hear me speak. All: Speak, speak.", 20, 1},
    };
    for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
        td_sample_stats a, b;
        char *x = generate(&t, p, runs[r].prompt, runs[r].tokens, runs[r].top_k, 0, &a, NULL);
        char *y = generate(&t, p, runs[r].prompt, runs[r].tokens, runs[r].top_k, 1, &b, NULL);
        int past = (int)strlen(runs[r].prompt) + runs[r].tokens > cfg.T;
        snprintf(name, sizeof name, "%s: %s%s text with cache = without", mc->name,
                 runs[r].top_k == 1 ? "greedy" : "sampled", past ? " past T" : "");
        check_true(name, strcmp(x, y) == 0, "texts differ");
        if (strcmp(x, y) != 0) printf("      cache: %s\n      whole: %s\n", x, y);
        if (r == 0) { /* (a) the prompt once, then one row per token */
            int np = (int)strlen(runs[r].prompt);
            snprintf(name, sizeof name, "%s: prompt rows (processed once)", mc->name);
            check_ll(name, a.prompt_rows, np);
            snprintf(name, sizeof name, "%s: rows per generated token after the prompt", mc->name);
            check_ll(name, a.step_rows, a.steps);
            check_ll("  forwards after the prompt", a.steps, runs[r].tokens - 1);
            snprintf(name, sizeof name, "%s: without the cache, rows per token (T)", mc->name);
            check_ll(name, b.step_rows, b.steps * (long long)cfg.T);
            snprintf(name, sizeof name, "%s: cache rows = prompt + tokens", mc->name);
            check_ll(name, a.cache_rows, np + runs[r].tokens);
        }
        free(x);
        free(y);
    }
    td_param_table_free(&t);
    tu_release(mark);
}

/* (c) A tiny Llama of T 131072: the cache and the scratch are sized for
 * prompt + tokens, where the whole window's activations would be T rows. */
static void check_memory(void) {
    int mark = tu_mark();
    td_gpt_config cfg = {.L = 2, .H = 4, .C = 32, .T = 131072, .V = 256, .arch = TD_ARCH_LLAMA,
                         .KV = 2,
                         .rope_theta = 500000.0,
                         .rope_scaling = {.factor = 8, .low_freq_factor = 1, .high_freq_factor = 4,
                                          .orig_max_pos = 8192}};
    td_gpt_config_finish(&cfg);
    td_param_table t;
    td_param_table_build(&t, &cfg, 1);
    float *p = make_params(&t);
    td_sample_stats st;
    char *x = generate(&t, p, "KING", 8, 1, 0, &st, NULL);
    check_ll("T 131072 llama: cache rows (prompt 4 + tokens 8)", st.cache_rows, 12);
    size_t kv = 2 * (size_t)cfg.L * 12 * (size_t)cfg.KV * (cfg.C / cfg.H) * sizeof(float);
    check_ll("T 131072 llama: cache bytes = 2 L rows KV hs floats", (long long)st.cache_bytes,
             (long long)kv);
    check_ll("T 131072 llama: working memory = td_decode_bytes", (long long)st.bytes,
             (long long)td_decode_bytes(&t, 12, 12));
    size_t whole = td_gpt_activation_bytes(&t, 1, 0);
    printf("      working memory %zu bytes; the whole window's activations would be %zu\n", st.bytes,
           whole);
    check_true("T 131072 llama: working memory < 1/1000 of the window's", st.bytes * 1000 < whole,
               "too big");
    check_ll("T 131072 llama: 8 tokens generated", (long long)strlen(x), 4 + 8);
    free(x);
    td_param_table_free(&t);
    tu_release(mark);
}

/* (d) top-p from its definition: after temperature and top-k (ties with
 * the k-th logit kept), probabilities q in double; token i is kept when the
 * mass of the tokens ranked before it (larger q, or equal q and lower id)
 * is below p. */
static void ref_keep(unsigned char *keep, const float *lg, int V, double temp, int top_k,
                     double top_p) {
    double mx = -INFINITY, sum = 0.0;
    double *q = malloc(sizeof(double) * (size_t)V);
    for (int i = 0; i < V; i++) mx = lg[i] > mx ? lg[i] : mx;
    for (int i = 0; i < V; i++) {
        int above = 0;
        for (int j = 0; j < V; j++) above += lg[j] > lg[i];
        q[i] = top_k > 0 && above >= top_k ? 0.0 : exp((lg[i] - mx) / temp);
        sum += q[i];
    }
    for (int i = 0; i < V; i++) {
        double before = 0.0;
        for (int j = 0; j < V; j++)
            if (q[j] > q[i] || (q[j] == q[i] && j < i)) before += q[j];
        keep[i] = q[i] > 0.0 && (top_p >= 1.0 || before / sum < top_p);
    }
    free(q);
}

static void check_top_p(void) {
    enum { V = 61 };
    float lg[V], w[V];
    unsigned char ref[V];
    int bad = 0, cases = 0, partial = 0;
    double temps[] = {1.0, 0.7, 2.5};
    int ks[] = {0, 1, 5, 40};
    double ps[] = {0.05, 0.3, 0.5, 0.9, 0.99, 1.0};
    for (int s = 0; s < 8; s++) {
        tu_randn(lg, V, 700 + (uint64_t)s, 2.0f);
        if (s == 7)
            for (int i = 0; i < V; i++) lg[i] = (float)(i % 4); /* ties */
        for (size_t a = 0; a < 3; a++)
            for (size_t b = 0; b < 4; b++)
                for (size_t c = 0; c < 6; c++) {
                    td_sample_weights(w, lg, V, (float)temps[a], ks[b], (float)ps[c]);
                    ref_keep(ref, lg, V, (float)temps[a], ks[b], (float)ps[c]);
                    int n = 0;
                    for (int i = 0; i < V; i++) {
                        bad += (w[i] > 0.0f) != ref[i];
                        n += ref[i];
                    }
                    partial += n > 1 && n < V;
                    cases++;
                }
    }
    printf("      %d cases, %d of them keep more than 1 and fewer than V tokens\n", cases, partial);
    check_ll("top-p kept sets = the reference's (mismatched tokens)", bad, 0);
    /* four equal logits at p = 0.5: exactly the first two (mass 0.5 reached) */
    float eq[4] = {1, 1, 1, 1}, we[4];
    td_sample_weights(we, eq, 4, 1.0f, 0, 0.5f);
    check_true("top-p 0.5 of four equal tokens keeps ids 0 and 1",
               we[0] > 0 && we[1] > 0 && we[2] == 0 && we[3] == 0, "wrong set");
    /* temperature 0: the first of the largest logits alone, whatever k and p */
    float g[5] = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f}, wg[5];
    double sg = td_sample_weights(wg, g, 5, 0.0f, 3, 0.5f);
    check_true("temperature 0 keeps the first largest logit alone",
               sg == 1.0 && wg[1] == 1.0f && wg[0] == 0 && wg[2] == 0 && wg[3] == 0 && wg[4] == 0,
               "not one-hot at id 1");
}

/* (e) progress: a line per TD_SAMPLE_CHUNK prompt tokens beyond one chunk. */
static void check_progress(void) {
    int mark = tu_mark();
    td_gpt_config cfg = {.L = 1, .H = 2, .C = 16, .T = 2048, .V = 256};
    td_gpt_config_finish(&cfg);
    td_param_table t;
    td_param_table_build(&t, &cfg, 1);
    float *p = make_params(&t);
    int n = 2 * TD_SAMPLE_CHUNK + 100;
    char *prompt = TU_NEW(char, n + 1);
    for (int i = 0; i < n; i++) prompt[i] = (char)('a' + i % 26);
    char *lines = NULL;
    size_t len = 0;
    FILE *pf = open_memstream(&lines, &len);
    td_sample_stats st, st2;
    free(generate(&t, p, prompt, 3, 1, 0, &st, pf));
    free(generate(&t, p, "short", 3, 1, 0, &st2, pf)); /* no line */
    fclose(pf);
    int count = 0;
    for (const char *c = lines; (c = strstr(c, "trident: sample: prompt ")); c++) count++;
    check_ll("progress lines for a prompt of 2 chunks + 100 tokens", count, 3);
    check_true("the last reads the whole prompt", strstr(lines, "prompt 1124/1124 tokens") != NULL,
               lines);
    check_ll("  its rows computed once", st.prompt_rows, n);
    free(lines);
    td_param_table_free(&t);
    tu_release(mark);
}

int main(void) {
    td_kernels_set_threads(1);
    const model_case cases[] = {
        {"gpt2", {.L = 2, .H = 2, .C = 32, .T = 64, .V = 256}},
        {"llama", {.L = 2, .H = 4, .C = 32, .T = 64, .V = 256, .arch = TD_ARCH_LLAMA, .KV = 2,
                   .rope_theta = 500000.0,
                   .rope_scaling = {.factor = 8, .low_freq_factor = 1, .high_freq_factor = 4,
                                    .orig_max_pos = 32}}},
        {"gpt2 moe", {.L = 2, .H = 2, .C = 32, .T = 64, .V = 256,
                      .moe = {.E = 4, .K = 2, .shared = 1, .F = 48}}},
        {"llama moe", {.L = 2, .H = 4, .C = 32, .T = 64, .V = 256, .arch = TD_ARCH_LLAMA, .KV = 1,
                       .moe = {.E = 4, .K = 2, .every = 2, .router = TD_ROUTER_SIGMOID}}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_model(&cases[i]);
    check_memory();
    check_top_p();
    check_progress();
    return tu_finish("test_sample_cache");
}
