/* A mixture of experts in place of a block's MLP (model.h, td_moe_config):
 *   out[t] = sum_k w[t,k] expert_{idx[t,k]}(x[t]) + shared(x[t])
 * over every row of ln2 (all N rows on every tp rank: the experts are
 * replicated over tp and computed redundantly there, so their gradients
 * need no tp reduction; tp rank 0 alone passes the input gradient on).
 *
 * Dispatch: the K assignments of each token are put in expert order (stably,
 * so by (token, k) within an expert): the send order. With expert
 * parallelism the experts [r E/ep, (r+1) E/ep) live on ep rank r, so the send
 * order is also by destination; rows go there by all-to-all-v and come back
 * in the same order (td_model_comm.ep_*). A rank's received rows are put
 * expert-major (by expert, then source rank, then send order) and each
 * expert is one GEMM per projection: a loop of GEMMs of variable sizes.
 *
 * The routing statistics (tokens per expert, mean scores, the number of
 * tokens, sum of squared log-sum-exps) are summed over the ranks that share
 * the micro-batch (td_model_comm.moe_stats_allreduce, dp x cp), so the aux
 * and z losses, and their gradients, are those of one process holding the
 * whole micro-batch. */
#include <math.h>
#include <string.h>

#include "moe_internal.h"
#include "trident/fault.h"
#include "trident/kernels_moe.h"

/* ---- the state: saved tensors of one block, scratch of the model ---- */

static size_t scratch_rows(const td_gpt_dims *d, const td_gpt_config *c, int ep);
static size_t scratch_width(const td_gpt_config *c, int C);
static size_t A(const td_gpt_dims *d, size_t n);
static size_t tile_elems(const td_gpt_dims *d, const td_gpt_config *c);
static size_t f0_elems(const td_gpt_dims *d, const td_gpt_config *c, size_t rows);

/* Host memory (routing decisions, counts, pointers), zeroed. */
static void *zalloc(size_t bytes) {
    void *p = td_alloc(bytes, TD_MEM_OTHER);
    memset(p, 0, bytes);
    return p;
}

void td_moe_state_create(td_gpt *m) {
    if (m->cfg.moe.E == 0) return;
    struct td_moe_state *s = zalloc(sizeof *s);
    int E = m->cfg.moe.E, L = m->cfg.L;
    s->st.load = zalloc(sizeof(double) * (size_t)L * E);
    s->st.E = E, s->st.L = L;
    s->dloss = 1.0f / (float)m->d.N;
    s->aux_w = 1.0f;
    int ep = m->table->ep;
    s->cap = scratch_rows(&m->d, &m->cfg, ep);
    size_t w = A(&m->d, s->cap * scratch_width(&m->cfg, m->d.C));
    s->scratch = td_dev_alloc(td_moe_scratch_bytes(&m->d, &m->cfg, ep), TD_MEM_ACTS, "moe scratch");
    size_t nhf = (size_t)m->d.N > 2 * (size_t)E ? (size_t)m->d.N : 2 * (size_t)E;
    s->hf = zalloc(sizeof(float) * nhf);
    s->b0 = s->scratch, s->b1 = (char *)s->scratch + w, s->b2 = (char *)s->scratch + 2 * w;
    s->f0 = (float *)((char *)s->scratch + 3 * w);
    char *t = (char *)(s->f0 + f0_elems(&m->d, &m->cfg, s->cap));
    if (m->d.lp) {
        size_t tb = A(&m->d, tile_elems(&m->d, &m->cfg));
        s->t0 = t, s->t1 = t + tb, s->t2 = t + 2 * tb;
        t += 3 * tb;
    }
    s->b3 = m->cfg.moe.shared ? t : NULL;
    m->moe = s;
}

void td_moe_state_destroy(td_gpt *m) {
    struct td_moe_state *s = m->moe;
    if (!s) return;
    for (int i = 0; i < s->n_pool; i++) {
        td_moe_acts *a = s->pool[i];
        td_dev_free(a->mem);
        td_free(a->hmem);
        td_free(a);
    }
    td_free(s->pool);
    td_dev_free(s->scratch);
    td_free(s->hf);
    td_free(s->st.load);
    td_free(s);
    m->moe = NULL;
}

/* The dispatch's worst case under dropless routing: every assignment of
 * the ep group's tokens may come to this rank's experts. */
static size_t recv_rows(const td_gpt_dims *d, const td_gpt_config *c, int ep) {
    return (size_t)ep * (size_t)d->N * (size_t)c->moe.K;
}

static size_t scratch_rows(const td_gpt_dims *d, const td_gpt_config *c, int ep) {
    size_t r = recv_rows(d, c, ep);
    return r > (size_t)d->N ? r : (size_t)d->N;
}

/* f0's floats: cap + 1 rows of C, and at least place()'s 2E per-expert
 * counts (E may exceed the rows x C of a small model: 4096 experts of a
 * 32-wide model at batch 1). */
static size_t f0_elems(const td_gpt_dims *d, const td_gpt_config *c, size_t rows) {
    size_t f = (rows + 1) * (size_t)d->C, e2 = 2 * (size_t)c->moe.E;
    return f > e2 ? f : e2;
}

static size_t scratch_width(const td_gpt_config *c, int C) {
    size_t f1 = (size_t)c->moe.F * (size_t)td_arch_mlp_parts(c->arch),
           w = f1 > (size_t)C ? f1 : (size_t)C;
    return (size_t)c->moe.shared * f1 > w ? (size_t)c->moe.shared * f1 : w;
}

static size_t tile_elems(const td_gpt_dims *d, const td_gpt_config *c) {
    size_t f1 = (size_t)c->moe.F * (size_t)td_arch_mlp_parts(c->arch);
    return TD_MOE_TILE * (f1 > (size_t)d->C ? f1 : (size_t)d->C);
}

/* Bytes of activations, 4-byte aligned like gpt.c's. */
static size_t A(const td_gpt_dims *d, size_t n) { return td_round_up(n * d->es, 4); }

size_t td_moe_block_bytes(const td_gpt_dims *d, const td_gpt_config *c, int ep) {
    const td_moe_config *e = &c->moe;
    if (e->E == 0) return 0;
    size_t N = (size_t)d->N, E = (size_t)e->E, K = (size_t)e->K, S = (size_t)e->shared,
           F = (size_t)e->F;
    size_t F1 = F * (size_t)td_arch_mlp_parts(c->arch), C = (size_t)d->C, R = recv_rows(d, c, ep);
    return 4 * (2 * N * E + 4 * N * K + 4 * E +
                3) /* logits, scores; idx, gate, wts, pos; the bias's slot, stats */
           + (S ? A(d, N * S * F1) + A(d, N * S * F) : 0) /* the shared experts' hidden */
           + 2 * A(d, N * K * C)                          /* sent and returned rows */
           + (ep > 1 ? 2 * A(d, R * C) : 0)               /* received rows, their outputs */
           + A(d, R * F1) + A(d, R * F);                  /* the experts' hidden */
}

size_t td_moe_scratch_bytes(const td_gpt_dims *d, const td_gpt_config *c, int ep) {
    if (c->moe.E == 0) return 0;
    size_t rows = scratch_rows(d, c, ep);
    size_t sh = (size_t)c->moe.shared * (size_t)c->moe.F * (size_t)td_arch_mlp_parts(c->arch);
    return 3 * A(d, rows * scratch_width(c, d->C)) + 4 * f0_elems(d, c, rows) +
           (d->lp ? 3 * A(d, tile_elems(d, c)) : 0) + (sh ? A(d, (size_t)d->N * sh) : 0);
}

static td_moe_acts *acts_new(td_gpt *m) {
    struct td_moe_state *s = m->moe;
    const td_gpt_dims *d = &m->d;
    const td_moe_config *e = &m->cfg.moe;
    int ep = m->table->ep;
    td_moe_acts *a = zalloc(sizeof *a);
    size_t N = (size_t)d->N, E = (size_t)e->E, K = (size_t)e->K, S = (size_t)e->shared,
           C = (size_t)d->C;
    size_t R = recv_rows(d, &m->cfg, ep);
    a->N = d->N;
    a->mem = td_dev_alloc(td_moe_block_bytes(d, &m->cfg, ep), TD_MEM_ACTS, "moe block activations");
    /* the routing half, the same layout on both sides (one copy each way) */
    size_t route_bytes = 4 * (2 * N * E + 4 * N * K + 2 * E + 2 * E + 3);
    a->hmem = zalloc(route_bytes + 2 * sizeof(int) * E);
    char *cur = a->hmem;
#define CARVE(p, bytes) (p = (void *)cur, cur += (bytes))
    for (int side = 0; side < 2; side++) {
        float *lg, *sc, *bi, *ga, *wt, *stt;
        int *ix, *ps;
        CARVE(lg, 4 * N * E);
        CARVE(sc, 4 * N * E);
        CARVE(bi, 4 * 2 * E); /* a slot of 2E: the counts' bytes of the plan */
        CARVE(ix, 4 * N * K);
        CARVE(ga, 4 * N * K);
        CARVE(wt, 4 * N * K);
        CARVE(ps, 4 * N * K);
        CARVE(stt, 4 * (2 * E + 3));
        if (side == 0) {
            a->logits = lg, a->scores = sc, a->bias = bi, a->idx = ix, a->gate = ga, a->wts = wt;
            a->pos = ps, a->stats = stt;
            CARVE(a->cnt, sizeof(int) * E);
            CARVE(a->rcnt, sizeof(int) * E);
            cur = a->mem;
        } else {
            a->d_logits = lg, a->d_scores = sc, a->d_bias = bi, a->d_idx = ix, a->d_gate = ga;
            a->d_wts = wt, a->d_pos = ps, a->d_stats = stt;
        }
    }
    if (S) {
        CARVE(a->sh_h, A(d, N * S * F1e(m)));
        CARVE(a->sh_a, A(d, N * S * (size_t)e->F));
    }
    CARVE(a->xsend, A(d, N * K * C));
    CARVE(a->ysend, A(d, N * K * C));
    if (ep > 1) {
        CARVE(a->xs, A(d, R * C));
        CARVE(a->y, A(d, R * C));
    } else {
        a->xs = a->xsend, a->y = a->ysend;
    }
    CARVE(a->h, A(d, R * F1e(m)));
    CARVE(a->a, A(d, R * (size_t)e->F));
#undef CARVE
    TD_ASSERT((size_t)(cur - (char *)a->mem) == td_moe_block_bytes(d, &m->cfg, ep));
    if (s->n_pool == s->cap_pool) {
        s->cap_pool = s->cap_pool ? 2 * s->cap_pool : 16;
        td_moe_acts **p = td_alloc(sizeof *p * (size_t)s->cap_pool, TD_MEM_OTHER);
        if (s->n_pool) memcpy(p, s->pool, sizeof *p * (size_t)s->n_pool);
        td_free(s->pool);
        s->pool = p;
    }
    s->pool[s->n_pool++] = a;
    return a;
}

/* ---- routing ---- */

static td_moe_route_probe g_probe;
static void *g_probe_ctx;

void td_gpt_set_route_probe(td_moe_route_probe fn, void *ctx) {
    g_probe = fn;
    g_probe_ctx = ctx;
}

static td_moe_route_override g_override;
static void *g_override_ctx;

/* Top K by score + bias (ties to the lower id): K passes of a max. */
static void select_token(int E, int K, const float *sc, const float *bias, int *idx, float *g) {
    for (int k = 0; k < K; k++) {
        int best = -1;
        float bv = 0.0f;
        for (int i = 0; i < E; i++) {
            int taken = 0;
            for (int j = 0; j < k; j++) taken |= idx[j] == i;
            float v = sc[i] + (bias ? bias[i] : 0.0f);
            if (!taken && (best < 0 || v > bv)) best = i, bv = v;
        }
        idx[k] = best;
        g[k] = sc[best];
    }
}

void td_moe_route_token(int router, int E, int K, const float *lg, const float *bias, float *sc, int *idx,
                        float *g) {
    td_ops_cpu(TD_K_F32)->moe_scores(sc, lg, 1, E, router == TD_ROUTER_SOFTMAX); /* host memory */
    select_token(E, K, sc, bias, idx, g);
}

void td_gpt_set_route_override(td_moe_route_override fn, void *ctx) {
    g_override = fn;
    g_override_ctx = ctx;
}

/* Scores, the top K (ties to the lower id), the combine weights; block l's
 * (for the override). */
static void route(td_gpt *m, int l, td_moe_acts *a, const float *bias) {
    const td_moe_config *e = &m->cfg.moe;
    int N = a->N, E = e->E, K = e->K;
    for (int t = 0; t < N; t++) {
        float *sc = a->scores + (size_t)t * E;
        int *idx = a->idx + (size_t)t * K;
        float *g = a->gate + (size_t)t * K, *w = a->wts + (size_t)t * K;
        select_token(E, K, sc, bias, idx, g);
        if (g_probe || g_override) { /* the margin: the last chosen's selection value over the best left out */
            float last = sc[idx[K - 1]] + (bias ? bias[idx[K - 1]] : 0.0f), next = -INFINITY;
            for (int i = 0; i < E; i++) {
                int taken = 0;
                for (int j = 0; j < K; j++) taken |= idx[j] == i;
                float v = sc[i] + (bias ? bias[i] : 0.0f);
                if (!taken && v > next) next = v;
            }
            m->moe->hf[t] = last - next;
        }
        if (m->moe->flip && K < E) { /* TRIDENT_FAULT=route-flip: the last chosen for the best left out */
            int alt = -1;
            for (int i = 0; i < E; i++) {
                int taken = 0;
                for (int j = 0; j < K; j++) taken |= idx[j] == i;
                float v = sc[i] + (bias ? bias[i] : 0.0f);
                if (!taken && (alt < 0 || v > sc[alt] + (bias ? bias[alt] : 0.0f))) alt = i;
            }
            idx[K - 1] = alt, g[K - 1] = sc[alt];
        }
        if (g_override) {
            g_override(g_override_ctx, m, l, t, K, idx, m->moe->hf[t]);
            for (int k = 0; k < K; k++) g[k] = sc[idx[k]];
        }
        double gs = 0.0;
        for (int k = 0; k < K; k++) gs += g[k];
        for (int k = 0; k < K; k++) w[k] = e->norm_topk == TD_TIE_ON ? (float)(g[k] / gs) : g[k];
    }
}

/* The statistics of every rank's tokens of this micro-batch: per expert
 * the assignments and the summed score, the tokens, the sum of squared
 * log-sum-exps of the router's logits (z-loss). */
static void reduce_stats(td_gpt *m, td_moe_acts *a) {
    float *st = a->stats;
    int N = a->N, E = m->cfg.moe.E, K = m->cfg.moe.K;
    memset(st, 0, sizeof(float) * (size_t)(2 * E + 3));
    for (int t = 0; t < N; t++) {
        for (int k = 0; k < K; k++) st[a->idx[(size_t)t * K + k]] += 1.0f;
        for (int i = 0; i < E; i++) st[E + i] += a->scores[(size_t)t * E + i];
        double lse = td_moe_log_sum_exp(a->logits + (size_t)t * E, E);
        st[2 * E + 1] += (float)(lse * lse);
    }
    st[2 * E] = (float)N;
    if (m->comm && m->comm->moe_stats_allreduce)
        m->comm->moe_stats_allreduce(m->comm->moe_ctx, st, (size_t)(2 * E + 3));
}

/* Capacity: keep the first ceil(F N K / E) assignments of each expert in
 * order of (token, k) over the whole micro-batch (the ranks before this one
 * in the grad group hold the tokens before its own: their assignments of
 * each expert, summed, come first); the others are dropped (pos -1). */
static void place(td_gpt *m, td_moe_acts *a, int *dropped) {
    const td_moe_config *e = &m->cfg.moe;
    int N = a->N, E = e->E, K = e->K;
    float ntot = a->stats[2 * E];
    long cap = e->capacity > 0.0f ? (long)ceil((double)e->capacity * ntot * K / E) : -1;
    int *per = a->rcnt; /* borrowed: assignments counted per expert so far */
    memset(per, 0, sizeof(int) * (size_t)E);
    float *before = m->moe->hf; /* the earlier ranks' assignments per expert, then this rank's */
    memset(before, 0, sizeof(float) * (size_t)E);
    if (cap >= 0 && m->comm && m->comm->moe_stats_exscan) {
        float *mine = before + E;
        memset(mine, 0, sizeof(float) * (size_t)E);
        for (size_t j = 0; j < (size_t)N * K; j++) mine[a->idx[j]] += 1.0f;
        m->comm->moe_stats_exscan(m->comm->moe_ctx, mine, before, (size_t)E);
    }
    *dropped = 0;
    for (int t = 0; t < N; t++)
        for (int k = 0; k < K; k++) {
            int i = a->idx[(size_t)t * K + k];
            if (cap >= 0 && per[i] + (long)before[i] >= cap) {
                a->pos[(size_t)t * K + k] = -1;
                ++*dropped;
            } else
                a->pos[(size_t)t * K + k] = per[i]++;
        }
    /* runs of the send order: expert i's rows start after every lower expert's */
    int off = 0;
    for (int i = 0; i < E; i++) {
        a->cnt[i] = per[i];
        int c = per[i];
        per[i] = off;
        off += c;
    }
    for (size_t j = 0; j < (size_t)N * K; j++)
        if (a->pos[j] >= 0) a->pos[j] += per[a->idx[j]];
}

/* The shared experts (an MLP of S F features) of all N rows: out [N,C]
 * fp32, their hidden kept in a. The first half (to the hidden) and the
 * second run on either side of an exchange's wait. */
static void shared_forward(td_gpt *m, int u, const td_block_acts *ba, td_moe_acts *a, float *out,
                           int half) {
    const td_moe_config *e = &m->cfg.moe;
    int N = m->d.N, C = m->d.C, SF = e->shared * e->F, SF1 = SF * td_arch_mlp_parts(m->cfg.arch);
    if (!e->shared) return;
    if (half == 0) {
        td_m_matmul_forward(m, a->sh_h, 0, ba->ln2, u, TD_T_SHFCW, td_m_w(m, u, TD_T_SHFCB), N, C,
                            SF1);
        td_m_mlp_act_forward(m, a->sh_a, a->sh_h, N, SF);
    } else {
        td_m_matmul_forward(m, out, 1, a->sh_a, u, TD_T_SHPROJW, td_m_w(m, u, TD_T_SHPROJB), N, SF,
                            C);
    }
}

/* ---- forward ---- */

static void experts_forward(td_gpt *m, int u, td_moe_acts *a) {
    const td_moe_config *e = &m->cfg.moe;
    int El = n_local(m), ep = m->table->ep, C = m->d.C, F = e->F, F1 = (int)F1e(m);
    const float *b1 = td_m_w(m, u, TD_T_EXPFCB), *b2 = td_m_w(m, u, TD_T_EXPPROJB);
    size_t o = 0;
    for (int j = 0; j < El; j++) {
        int n = 0;
        for (int r = 0; r < ep; r++) n += a->rcnt[r * El + j];
        if (n > 0) {
            td_moe_mm_forward(m, row(m, a->h, o, (size_t)F1), row(m, a->xs, o, (size_t)C), u,
                              TD_T_EXPFCW, (size_t)j * F1 * C, b1 ? b1 + (size_t)j * F1 : NULL, n,
                              C, F1);
            td_m_mlp_act_forward(m, row(m, a->a, o, (size_t)F), row(m, a->h, o, (size_t)F1), n, F);
            td_moe_mm_forward(m, row(m, a->y, o, (size_t)C), row(m, a->a, o, (size_t)F), u,
                              TD_T_EXPPROJW, (size_t)j * C * F, b2 ? b2 + (size_t)j * C : NULL, n,
                              F, C);
        }
        o += (size_t)n;
    }
}

/* Rows this rank sends to other ranks in the block's forward: its
 * assignments of other ranks' experts, then the rows of other ranks it
 * returns (the backward sends as many again). */
static double off_rank_rows(const td_gpt *m, const td_moe_acts *a) {
    int ep = m->table->ep, El = n_local(m), me = m->table->ep_rank;
    double off = 0.0;
    for (int r = 0; r < ep; r++)
        for (int j = 0; j < El && r != me; j++) off += a->cnt[r * El + j] + a->rcnt[r * El + j];
    return off;
}

static void count_stats(td_gpt *m, int l, const td_moe_acts *a, int dropped) {
    struct td_moe_state *s = m->moe;
    const td_moe_config *e = &m->cfg.moe;
    int E = e->E;
    const float *st = a->stats;
    double ntot = st[2 * E], aux = 0.0;
    for (int i = 0; i < E; i++) aux += (st[i] / (ntot * e->K)) * (st[E + i] / ntot);
    aux *= (double)e->aux_coef * E;
    double z = (double)e->z_coef * st[2 * E + 1] / ntot;
    if (s->quiet) return; /* a recomputing forward: counted the first time */
    s->st.loss_sum += (double)a->N * (aux + z);
    for (int i = 0; i < E; i++) s->st.load[(size_t)l * E + i] += st[i];
    s->st.assigned += ntot * e->K;
    s->st.dropped += dropped;
    s->st.off_rank_rows += off_rank_rows(m, a);
    s->st.aux += aux, s->st.z += z, s->st.n++;
}

void td_moe_forward(td_gpt *m, int l, td_block_acts *ba) {
    const td_gpt_dims *d = &m->d;
    const td_moe_config *e = &m->cfg.moe;
    int u = td_m_block_unit(l), N = d->N, C = d->C, E = e->E, K = e->K, ep = m->table->ep;
    if (!ba->moe) ba->moe = acts_new(m);
    td_moe_acts *a = ba->moe;
    TD_ASSERT(a->N == N && ep <= TD_MOE_MAX_EP);
    const td_ops *o = moe_ops(m);
    /* the router on the device; its logits, scores and bias down, the
     * decisions made here up: one named copy each way */
    td_m_matmul_forward(m, a->d_logits, 1, ba->ln2, u, TD_T_ROUTERW, NULL, N, C, E);
    o->moe_scores(a->d_scores, a->d_logits, N, E, e->router == TD_ROUTER_SOFTMAX);
    const float *rb = td_m_w(m, u, TD_T_ROUTERB);
    if (rb) td_dev_copy(a->d_bias, rb, sizeof(float) * (size_t)E);
    td_dev_download(a->logits, a->d_logits, sizeof(float) * (2 * (size_t)N * E + (rb ? (size_t)E : 0)),
                    TD_HOST_MOE);
    td_dev_sync();
    route(m, l, a, rb ? a->bias : NULL);
    if (g_probe && !m->moe->quiet) g_probe(g_probe_ctx, m, l, N, K, a->idx, m->moe->hf);
    reduce_stats(m, a);
    int dropped;
    place(m, a, &dropped);
    td_dev_upload(a->d_idx, a->idx, (size_t)((char *)(a->stats + 2 * E + 3) - (char *)a->idx),
                  TD_HOST_MOE);
    /* the counts, then the rows, travel while the shared experts compute */
    float *out = m->moe->f0;
    if (ep > 1)
        m->comm->ep_counts_start(m->comm->moe_ctx, a->cnt, a->rcnt, n_local(m));
    else
        memcpy(a->rcnt, a->cnt, sizeof(int) * (size_t)E);
    o->moe_gather(a->xsend, ba->ln2, a->d_pos, N, K, C);
    shared_forward(m, u, ba, a, out, 0);
    if (ep > 1) m->comm->ep_wait(m->comm->moe_ctx);
    a->R = 0;
    for (int i = 0; i < E; i++) a->R += a->rcnt[i];
    TD_ASSERT((size_t)a->R <= recv_rows(d, &m->cfg, ep));
    if (ep > 1) td_moe_dispatch_start(m, a, a->xs, a->xsend, m->moe->b0, 0);
    shared_forward(m, u, ba, a, out, 1);
    if (ep > 1) td_moe_dispatch_finish(m, a, a->xs, m->moe->b0);
    experts_forward(m, u, a);
    if (ep > 1) td_moe_dispatch_start(m, a, a->ysend, a->y, m->moe->b0, 1);
    /* the output of this rank's rows, summed in fp32: shared experts, then the K chosen */
    o->moe_combine(out, e->shared > 0, a->ysend, a->d_pos, a->d_wts, d->row0, d->Ns, K, C);
    o->round_n(ba->fcproj, out, (size_t)d->Ns * C);
    count_stats(m, l, a, dropped);
}

/* ---- backward ---- */

/* The experts' backward, expert-major: dy [R,C] (overwritten by the input
 * gradient dxs), the weight gradients added. */
static void experts_backward(td_gpt *m, int u, const td_moe_acts *a, td_act *dy) {
    struct td_moe_state *s = m->moe;
    const td_moe_config *e = &m->cfg.moe;
    int El = n_local(m), ep = m->table->ep, C = m->d.C, F = e->F, F1 = (int)F1e(m);
    float *g1 = td_m_g(m, u, TD_T_EXPFCW), *gb1 = td_m_g(m, u, TD_T_EXPFCB);
    float *g2 = td_m_g(m, u, TD_T_EXPPROJW), *gb2 = td_m_g(m, u, TD_T_EXPPROJB);
    size_t o = 0, es = m->d.es;
    for (int j = 0; j < El; j++) {
        int n = 0;
        for (int r = 0; r < ep; r++) n += a->rcnt[r * El + j];
        if (n > 0) {
            td_act *dyj = row(m, dy, o, (size_t)C);
            td_dev_zero(s->b1, es * (size_t)n * F);
            td_moe_mm_backward(m, s->b1, g2 + (size_t)j * C * F, gb2 ? gb2 + (size_t)j * C : NULL,
                               dyj, row(m, a->a, o, (size_t)F), u, TD_T_EXPPROJW, (size_t)j * C * F,
                               n, F, C);
            td_dev_zero(s->b2, es * (size_t)n * F1);
            td_m_mlp_act_backward(m, s->b2, row(m, a->h, o, (size_t)F1), s->b1, n, F);
            td_dev_zero(dyj, es * (size_t)n * C);
            td_moe_mm_backward(m, dyj, g1 + (size_t)j * F1 * C, gb1 ? gb1 + (size_t)j * F1 : NULL,
                               s->b2, row(m, a->xs, o, (size_t)C), u, TD_T_EXPFCW,
                               (size_t)j * F1 * C, n, C, F1);
        }
        o += (size_t)n;
    }
}

/* The router's logits' gradient [N,E] (fp32, device memory the caller
 * frees) from the combine weights' gradient dw [N,K], the aux loss and the
 * z-loss. */
static float *router_grad(td_gpt *m, const td_moe_acts *a, const float *dw) {
    const td_moe_config *e = &m->cfg.moe;
    int N = a->N, E = e->E;
    float *dl = td_dev_alloc(sizeof(float) * (size_t)N * E, TD_MEM_OTHER, "moe router logits' gradient");
    td_moe_router_shape sh = {N, E, e->K, e->router == TD_ROUTER_SOFTMAX, e->norm_topk == TD_TIE_ON,
                              e->aux_coef, e->z_coef, m->moe->dloss};
    moe_ops(m)->moe_router_bwd(dl, dw, a->d_logits, a->d_scores, a->d_idx, a->d_gate, a->d_wts,
                               a->d_stats, &sh);
    return dl;
}

/* The shared experts' backward from dout [N,C]: their weight gradients,
 * and on tp rank 0 their input gradient added into dln; b0 and b3 as
 * scratch (b0 is free until the dispatched gradients arrive in it). */
static void shared_backward(td_gpt *m, int u, const td_block_acts *ba, const td_act *dout,
                            float *dln) {
    struct td_moe_state *s = m->moe;
    const td_moe_config *e = &m->cfg.moe;
    const td_gpt_dims *d = &m->d;
    if (!e->shared) return;
    int N = d->N, C = d->C, SF = e->shared * e->F, SF1 = SF * td_arch_mlp_parts(m->cfg.arch);
    td_dev_zero(s->b0, d->es * (size_t)N * SF);
    td_m_matmul_backward(m, s->b0, 0, td_m_g(m, u, TD_T_SHPROJW), td_m_g(m, u, TD_T_SHPROJB), dout,
                         ba->moe->sh_a, u, TD_T_SHPROJW, N, SF, C);
    td_dev_zero(s->b3, d->es * (size_t)N * SF1);
    td_m_mlp_act_backward(m, s->b3, ba->moe->sh_h, s->b0, N, SF);
    td_m_matmul_backward(m, d->tp_rank == 0 ? dln : NULL, 1, td_m_g(m, u, TD_T_SHFCW),
                         td_m_g(m, u, TD_T_SHFCB), s->b3, ba->ln2, u, TD_T_SHFCW, N, C, SF1);
}

void td_moe_backward(td_gpt *m, int l, const td_block_acts *ba, const td_act *dout, float *dln) {
    struct td_moe_state *s = m->moe;
    const td_gpt_dims *d = &m->d;
    const td_moe_config *e = &m->cfg.moe;
    const td_moe_acts *a = ba->moe;
    int u = td_m_block_unit(l), N = d->N, C = d->C, E = e->E, K = e->K, ep = m->table->ep;
    int first = d->tp_rank == 0; /* the input gradient is added once over tp (summed there) */
    const td_ops *o = moe_ops(m);
    if (ep == 1)
        shared_backward(m, u, ba, dout,
                        dln); /* first, as under ep (the same order of sums in dln) */
    /* the combine's backward: each kept assignment's output gradient w dout[t]
     * (in send order into b0, or b1 under ep) and its weight's, dout . y */
    float *dw = td_dev_alloc(sizeof(float) * (size_t)N * K, TD_MEM_OTHER, "moe combine weights' gradient");
    td_act *dysend = ep > 1 ? s->b1 : s->b0;
    o->moe_combine_bwd(dw, dysend, dout, a->ysend, a->d_pos, a->d_wts, N, K, C);
    td_act *dy = s->b0;
    if (ep > 1) { /* the rows travel while the shared experts' backward runs */
        td_moe_dispatch_start(m, (td_moe_acts *)a, dy, dysend, s->b2, 0);
        shared_backward(m, u, ba, dout, dln);
        td_moe_dispatch_finish(m, a, dy, s->b2);
    }
    experts_backward(m, u, a, dy); /* dy now holds the inputs' gradients, expert-major */
    td_act *dxsend = dy;
    if (ep > 1) {
        dxsend = s->b1;
        td_moe_dispatch_start(m, (td_moe_acts *)a, dxsend, dy, s->b2, 1);
    }
    if (first) o->moe_scatter_add(dln, dxsend, a->d_pos, N, K, C);
    /* the router */
    float *dl = router_grad(m, a, dw);
    td_dev_free(dw);
    /* rounded into a buffer of its own: in place, the rounding's threads (N E
     * >= 16384 elements) overwrote fp32 elements another thread had yet to read */
    td_act *dlr = d->lp ? td_dev_alloc(d->es * (size_t)N * E, TD_MEM_OTHER, "moe router logits' gradient, rounded") : dl;
    if (d->lp) o->round_n(dlr, dl, (size_t)N * E);
    td_m_matmul_backward(m, first ? dln : NULL, 1, td_m_g(m, u, TD_T_ROUTERW), NULL, dlr, ba->ln2, u,
                         TD_T_ROUTERW, N, C, E);
    if (d->lp) td_dev_free(dlr);
    td_dev_free(dl);
}

/* ---- the model's side ---- */

td_moe_stats *td_gpt_moe_stats(td_gpt *m) { return m->moe ? &m->moe->st : NULL; }

void td_gpt_moe_stats_reset(td_gpt *m) {
    if (!m->moe) return;
    td_moe_stats *st = &m->moe->st;
    memset(st->load, 0, sizeof(double) * (size_t)st->L * st->E);
    st->dropped = st->assigned = st->aux = st->z = st->loss_sum = st->off_rank_rows = 0.0;
    st->n = 0;
    m->moe->flip = td_fault_at(TD_FAULT_ROUTE_FLIP, m->moe->resets++, td_log_rank());
}

void td_gpt_set_dloss(td_gpt *m, float dloss) {
    if (m->moe) m->moe->dloss = dloss * m->moe->aux_w;
}

void td_gpt_set_aux_weight(td_gpt *m, float w) {
    if (m->moe) m->moe->aux_w = w;
}

void td_moe_set_quiet(td_gpt *m, int quiet) {
    if (m->moe) m->moe->quiet = quiet;
}

const int *td_moe_chosen(const td_block_acts *a) { return a->moe ? a->moe->idx : NULL; }
