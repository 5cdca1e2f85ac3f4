/* The model as blocks, linked against trident_model alone (no MPI): the
 * whole pass against the per-block functions called by hand in the same
 * order, and against the range entry points split as two pipeline stages
 * would run them; a block's forward recomputed from its saved input; the
 * staged cross-entropy against the fused kernel; the whole pass with
 * --recompute block (one shared set of saved tensors); the communication table's
 * calls (an identity table must change no bit); the tensors the model finds
 * through the table at the offsets the flat buffer has always had; the
 * activation plan against what create allocates; a forward-only model
 * (no activation gradients) against the whole pass. Every comparison is
 * bitwise: the same kernels run on the same inputs in the same order. */
#include "test_util.h"
#include "trident/kernels.h"
#include "trident/model.h"

static const td_gpt_config CFG0 = {.L = 2, .H = 2, .C = 16, .T = 8, .V = 37}; /* L H C T V; Vp = 48 */
enum { B = 3 };

static void check_int(const char *name, long long got, long long exp) {
    tu_checks++;
    if (got == exp) {
        printf("PASS  %-52s %lld\n", name, got);
        return;
    }
    tu_failures++;
    printf("FAIL  %-52s got %lld expected %lld\n", name, got, exp);
}

/* ---- unit hook: record the events ---- */
typedef struct {
    int n;
    int ev[64], unit[64];
} event_log;

static void record(void *ctx, td_unit_event ev, int unit) {
    event_log *e = ctx;
    if (e->n < 64) e->ev[e->n] = ev, e->unit[e->n] = unit;
    e->n++;
}

/* model.h's order: FWD_BEGIN(0), each block's BEGIN/END, FWD_BEGIN(L+1),
 * FWD_END(L+1), FWD_END(0); BWD_BEGIN(0), BWD_BEGIN(L+1), BWD_END(L+1),
 * blocks L..1, BWD_END(0). */
static void check_events(const event_log *e, int L) {
    event_log x = {0};
    record(&x, TD_FWD_BEGIN, 0);
    for (int u = 1; u <= L; u++) record(&x, TD_FWD_BEGIN, u), record(&x, TD_FWD_END, u);
    record(&x, TD_FWD_BEGIN, L + 1), record(&x, TD_FWD_END, L + 1), record(&x, TD_FWD_END, 0);
    record(&x, TD_BWD_BEGIN, 0), record(&x, TD_BWD_BEGIN, L + 1), record(&x, TD_BWD_END, L + 1);
    for (int u = L; u >= 1; u--) record(&x, TD_BWD_BEGIN, u), record(&x, TD_BWD_END, u);
    record(&x, TD_BWD_END, 0);
    int bad = -1;
    for (int i = 0; i < x.n && bad < 0; i++)
        if (i >= e->n || e->ev[i] != x.ev[i] || e->unit[i] != x.unit[i]) bad = i;
    if (bad < 0 && e->n != x.n) bad = x.n;
    check_int("hook events: first index out of model.h's order (-1 none)", bad, -1);
}

/* ---- communication table: identity ops that count their calls ---- */
typedef struct {
    int sum_calls, max_calls;
    size_t sum_elems;
} comm_count;

static void count_allreduce(void *ctx, float *buf, size_t n, td_reduce_op op) {
    comm_count *c = ctx;
    (void)buf; /* one rank: the reduction is the identity */
    if (op == TD_REDUCE_MAX) c->max_calls++;
    else c->sum_calls++, c->sum_elems += n;
}

/* ---- helpers ---- */
/* td_block_acts is read as an array of its 15 tensors (then the moe pointer) */
_Static_assert(sizeof(td_block_acts) == 16 * sizeof(float *), "td_block_acts: 15 tensors and moe");
static size_t block_acts_len(const td_gpt *m, int field) {
    size_t N = (size_t)m->B * m->cfg.T, C = m->cfg.C;
    static const int kind[15] = {1, 0, 0, 3, 1, 9, 1, 1, 1, 0, 0, 4, 4, 1, 1};
    switch (kind[field]) {
    case 0: return N;
    case 1: return N * C;
    case 3: return N * 3 * C;
    case 4: return N * 4 * C;
    default: return (size_t)m->B * m->cfg.H * m->cfg.T; /* lse */
    }
}
static const char *FIELD[15] = {"ln1", "ln1_mean", "ln1_rstd", "qkv", "atty", "lse", "attproj",
                                "res2", "ln2", "ln2_mean", "ln2_rstd", "fch", "fch_gelu",
                                "fcproj", "res3"};

typedef struct {
    td_param_table t;
    td_gpt m;
    float *params, *grads;
} model;

static void model_open_rc(model *x, const td_gpt_config *cfg, int align, const float *params,
                          td_recompute rc) {
    td_param_table_build(&x->t, cfg, align);
    x->params = TU_NEW(float, x->t.numel);
    x->grads = TU_NEW(float, x->t.numel);
    memcpy(x->params, params, sizeof(float) * x->t.numel);
    size_t before = td_mem_current(TD_MEM_ACTS);
    td_gpt_create_rc(&x->m, &x->t, B, 0, rc);
    long long got = (long long)(td_mem_current(TD_MEM_ACTS) - before);
    check_int(rc == TD_RECOMPUTE_BLOCK ? "activation bytes allocated == planned (recompute block)"
                                       : "activation bytes allocated == planned",
              got, (long long)td_gpt_activation_bytes_rc(&x->t, B, 0, rc));
    td_gpt_bind_flat(&x->m, x->params, x->grads);
}

static void model_open(model *x, const td_gpt_config *cfg, int align, const float *params) {
    model_open_rc(x, cfg, align, params, TD_RECOMPUTE_NONE);
}

static void model_close(model *x) {
    td_gpt_destroy(&x->m);
    td_param_table_free(&x->t);
}

/* Whole-model comparison: loss bits and the whole gradient buffer. */
static void compare(const char *what, double la, const model *a, double lb, const model *b) {
    char nm[96];
    snprintf(nm, sizeof nm, "%s: loss sum", what);
    tu_checks++;
    if (memcmp(&la, &lb, sizeof la) == 0) printf("PASS  %-52s %.17g bitwise equal\n", nm, la);
    else tu_failures++, printf("FAIL  %-52s %.17g vs %.17g\n", nm, la, lb);
    snprintf(nm, sizeof nm, "%s: every gradient", what);
    tu_check_bitwise(nm, b->grads, a->grads, a->t.numel);
    snprintf(nm, sizeof nm, "%s: probabilities/dlogits", what);
    tu_check_bitwise(nm, b->m.head.logits, a->m.head.logits,
                     (size_t)B * a->m.cfg.T * a->m.cfg.Vp);
}

/* The offsets the flat buffer has always had (checkpoints and the strategies
 * depend on them): wpe right after wte's Vp rows, ln_f bias right after its
 * weight, the block tensors in nanoGPT's order. */
static void check_layout(const td_gpt *m) {
    size_t C = m->cfg.C, Vp = m->cfg.Vp;
    size_t exp[TD_T_COUNT] = {0,         Vp * C, /* wte, wpe */
                              0,         C,      /* ln_1 */
                              2 * C,             2 * C + 3 * C * C,  /* c_attn */
                              5 * C + 3 * C * C, 5 * C + 4 * C * C,  /* attn c_proj */
                              6 * C + 4 * C * C, 7 * C + 4 * C * C,  /* ln_2 */
                              8 * C + 4 * C * C, 8 * C + 8 * C * C,  /* c_fc */
                              12 * C + 8 * C * C, 12 * C + 12 * C * C, /* mlp c_proj */
                              0,         C};     /* ln_f */
    for (int k = TD_T_LNFB + 1; k < TD_T_COUNT; k++) exp[k] = TD_NO_TENSOR; /* Llama's and the untied head */
    int bad = -1;
    for (int k = 0; k < TD_T_COUNT; k++)
        if (m->off[k] != exp[k] && bad < 0) bad = k;
    check_int("in-unit offsets found through the table (bad kind, -1 none)", bad, -1);
    int badrow = -1;
    for (int l = 0; l < m->cfg.L; l++)
        for (int k = TD_T_LN1W; k <= TD_T_FCPROJB; k++) {
            const td_param *p = td_param_lookup(m->table, (td_tensor_kind)k, l);
            if (p->layer != l || p->unit != l + 1 || p->kind != k) badrow = k;
        }
    check_int("td_param_lookup rows: kind, layer, unit (bad kind, -1 none)", badrow, -1);
}

int main(void) {
    td_gpt_config cfg = CFG0;
    td_gpt_config_finish(&cfg);
    int N = B * cfg.T, L = cfg.L;
    /* unit_align 5: in-unit offsets must not depend on unit padding */
    td_param_table ref;
    td_param_table_build(&ref, &cfg, 5);
    float *p0 = TU_NEW(float, ref.numel);
    td_param_init_range(&ref, 1234, 0, ref.numel, p0);
    /* LayerNorm gains and biases away from 1 and 0 so their gradients matter */
    for (int i = 0; i < ref.n_rows; i++)
        if (ref.rows[i].ndim == 1)
            tu_randn(p0 + ref.rows[i].offset, ref.rows[i].numel, 100 + i, 0.3f);
    int *in = TU_NEW(int, N), *tg = TU_NEW(int, N);
    tu_rand_ints(in, N, 1, cfg.V);
    tu_rand_ints(tg, N, 2, cfg.V);
    float dloss = 1.0f / (float)N;

    /* A: the whole pass, with the hook recording */
    model a, b, c, d;
    model_open(&a, &cfg, 5, p0);
    check_layout(&a.m);
    event_log ev = {0};
    a.m.hook = record, a.m.hook_ctx = &ev;
    double la = td_gpt_forward(&a.m, in, tg);
    td_gpt_backward(&a.m, dloss);
    check_events(&ev, L);

    /* B: the per-block functions by hand, in the driver's order */
    model_open(&b, &cfg, 5, p0);
    td_gpt *m = &b.m;
    td_embed_forward(m, in, &m->embed);
    const float *x = m->embed.encoded;
    for (int l = 0; l < L; l++) td_block_forward(m, l, x, &m->blocks[l]), x = m->blocks[l].res3;
    double lb = td_head_forward(m, x, tg, &m->head);
    td_head_backward(m, x, tg, &m->head, dloss, m->s.dres);
    for (int l = L - 1; l >= 0; l--)
        td_block_backward(m, l, l ? m->blocks[l - 1].res3 : m->embed.encoded, &m->blocks[l],
                          m->s.dres);
    td_embed_backward(m, in, m->s.dres);
    compare("per-block functions by hand", la, &a, lb, &b);

    /* C: two "stages": blocks [0,1) and [1,L) through the range entry
     * points, the second stage's input copied out as if received */
    model_open(&c, &cfg, 5, p0);
    m = &c.m;
    float *recv = TU_NEW(float, (size_t)N * cfg.C), *dsend = TU_NEW(float, (size_t)N * cfg.C);
    td_embed_forward(m, in, &m->embed);
    memcpy(recv, td_gpt_forward_blocks(m, 0, 1, m->embed.encoded), sizeof(float) * N * cfg.C);
    double lc = td_head_forward(m, td_gpt_forward_blocks(m, 1, L, recv), tg, &m->head);
    td_head_backward(m, m->blocks[L - 1].res3, tg, &m->head, dloss, dsend);
    td_gpt_backward_blocks(m, 1, L, recv, dsend);
    memcpy(m->s.dres, dsend, sizeof(float) * N * cfg.C);
    td_gpt_backward_blocks(m, 0, 1, m->embed.encoded, m->s.dres);
    td_embed_backward(m, in, m->s.dres);
    compare("range entry points, 2 stages", la, &a, lc, &c);

    /* D: with tp = 1 a communication table changes no bit and is never
     * called (where it is called under tp > 1, and what it moves, is
     * checked by the tensor-parallel tests under mpirun) */
    model_open(&d, &cfg, 5, p0);
    comm_count cnt = {0};
    td_model_comm comm = {.ctx = &cnt, .tp_allreduce = count_allreduce};
    d.m.comm = &comm;
    double ld = td_gpt_forward(&d.m, in, tg);
    td_gpt_backward(&d.m, dloss);
    compare("communication table at tp 1", la, &a, ld, &d);
    check_int("tp_allreduce calls at tp 1", cnt.sum_calls + cnt.max_calls, 0);

    /* E: --recompute block, the whole pass: the same loss, gradients and
     * dlogits bit for bit, the hook's events in the same order (the rerun
     * happens inside each block's BWD_BEGIN..BWD_END), and (L - 1) blocks'
     * saved tensors but their outputs fewer bytes planned and allocated */
    model e;
    model_open_rc(&e, &cfg, 5, p0, TD_RECOMPUTE_BLOCK);
    event_log eve = {0};
    e.m.hook = record, e.m.hook_ctx = &eve;
    double le = td_gpt_forward(&e.m, in, tg);
    td_gpt_backward(&e.m, dloss);
    compare("recompute block, whole pass", la, &a, le, &e);
    check_events(&eve, L);
    {
        size_t saved = 0;
        for (int i = 0; i < 14; i++) saved += block_acts_len(&a.m, i); /* all but res3 */
        check_int("recompute block: activation bytes saved",
                  (long long)td_gpt_activation_bytes(&a.t, B, 0) -
                      (long long)td_gpt_activation_bytes_rc(&e.t, B, 0, TD_RECOMPUTE_BLOCK),
                  (long long)((L - 1) * saved * sizeof(float)));
    }

    /* F: a forward-only model (TD_GPT_FORWARD, trident eval's) with block
     * recomputation's buffers: the same loss and probabilities bit for bit,
     * and exactly the backward's scratch fewer bytes, planned and allocated;
     * no activation-gradient buffer, nothing to lend a cp ring */
    {
        model f;
        td_param_table_build(&f.t, &cfg, 5);
        size_t before = td_mem_current(TD_MEM_ACTS);
        td_gpt_create_use(&f.m, &f.t, B, 0, TD_RECOMPUTE_BLOCK, TD_GPT_FORWARD);
        size_t plan = td_gpt_activation_bytes_use(&f.t, B, 0, TD_RECOMPUTE_BLOCK, TD_GPT_FORWARD);
        check_int("forward only: activation bytes allocated == planned",
                  (long long)(td_mem_current(TD_MEM_ACTS) - before), (long long)plan);
        check_int("forward only: planned bytes, recompute block's less the backward scratch", (long long)plan,
                  (long long)(td_gpt_activation_bytes_rc(&e.t, B, 0, TD_RECOMPUTE_BLOCK) -
                              td_gpt_scratch_bytes(&e.t, B, 0)));
        f.params = tu_copy(p0, f.t.numel), f.grads = NULL;
        td_gpt_bind_flat(&f.m, f.params, NULL);
        double lf = td_gpt_forward(&f.m, in, tg);
        tu_checks++;
        if (memcmp(&la, &lf, sizeof la) == 0) printf("PASS  %-52s %.17g bitwise equal\n", "forward only: loss sum", lf);
        else tu_failures++, printf("FAIL  %-52s %.17g vs %.17g\n", "forward only: loss sum", lf, la);
        /* A's logits hold dlogits after its backward: E's forward-time
         * probabilities are gone too; rerun A's forward */
        td_gpt_forward(&a.m, in, tg);
        tu_check_bitwise("forward only: probabilities", f.m.head.logits, a.m.head.logits,
                         (size_t)B * cfg.T * cfg.Vp);
        size_t lent = 1;
        check_int("forward only: no dres, dln, dqkv, dfch", f.m.s.dres || f.m.s.dln || f.m.s.dqkv || f.m.s.dfch, 0);
        check_int("forward only: cp scratch lent (bytes)", td_gpt_cp_scratch(&f.m, &lent) ? -1 : (long long)lent, 0);
        model_close(&f);
    }

    /* Recomputation: rerun each block's forward from its saved input into
     * fresh buffers; every saved tensor must come back bit for bit */
    for (int l = 0; l < L; l++) {
        td_block_acts fresh;
        float **f = (float **)&fresh;
        for (int i = 0; i < 15; i++) f[i] = TU_NEW(float, block_acts_len(&b.m, i));
        td_block_forward(&b.m, l, l ? b.m.blocks[l - 1].res3 : b.m.embed.encoded, &fresh);
        float **saved = (float **)&b.m.blocks[l];
        for (int i = 0; i < 15; i++) {
            char nm[64];
            snprintf(nm, sizeof nm, "recompute block %d: %s", l, FIELD[i]);
            tu_check_bitwise(nm, f[i], saved[i], block_acts_len(&b.m, i));
        }
    }

    /* The staged cross-entropy against the fused kernel */
    {
        float *lg = TU_NEW(float, (size_t)N * cfg.Vp);
        tu_randn(lg, (size_t)N * cfg.Vp, 7, 3.0f);
        float *p1 = tu_copy(lg, (size_t)N * cfg.Vp), *l1 = TU_NEW(float, N);
        td_softmax_xent_forward(l1, p1, p1, tg, N, cfg.V, cfg.Vp);
        float *p2 = tu_copy(lg, (size_t)N * cfg.Vp), *l2 = TU_NEW(float, N);
        float *mx = TU_NEW(float, N), *sum = TU_NEW(float, N), *xt = TU_NEW(float, N);
        td_xent_max(mx, p2, N, cfg.V, cfg.Vp);
        td_xent_exp_sum(sum, xt, p2, p2, mx, tg, 0, N, cfg.V, cfg.Vp);
        td_xent_finish(l2, p2, sum, xt, mx, tg, N, cfg.V, cfg.Vp);
        tu_check_bitwise("staged xent: losses vs fused", l2, l1, N);
        tu_check_bitwise("staged xent: probabilities vs fused", p2, p1, (size_t)N * cfg.Vp);
    }

    model_close(&a), model_close(&b), model_close(&c), model_close(&d), model_close(&e);
    td_param_table_free(&ref);
    return tu_finish("test_model_blocks");
}
