/* Context parallelism: the load-balanced split and ring attention
 * (trident/cp.h). */
#include "trident/cp.h"

#include <stdio.h>
#include <string.h>

#include "trident/backend.h"
#include "trident/base.h"
#include "trident/timeline.h"

enum { TAG_FWD_KV = 71, TAG_BWD_KV = 72, TAG_BWD_DKV = 73 };

/* ---- the split ---------------------------------------------------------- */

int td_cp_seq_ok(int T, int n) { return n >= 1 && T > 0 && T % (2 * n) == 0; }

void td_cp_chunk_pos(int T, int n, int r, long pos[2]) {
    TD_CHECK(td_cp_seq_ok(T, n) && r >= 0 && r < n,
             "cp: %d ranks cannot split a sequence of %d into %d equal chunks", n, T, 2 * n);
    long Tc = T / (2 * n);
    pos[0] = (long)r * Tc, pos[1] = (long)(2 * n - 1 - r) * Tc;
}

/* dir 0: take (dst local, src whole), 1: put (dst whole, src local). */
static void move_chunks(void *dst, const void *src, int B, int T, int n, int r, size_t es, int dir) {
    long pos[2];
    td_cp_chunk_pos(T, n, r, pos);
    size_t Tl = (size_t)T / (size_t)n, chunk = Tl / 2 * es;
    for (int b = 0; b < B; b++)
        for (int c = 0; c < 2; c++) {
            size_t whole = ((size_t)b * T + (size_t)pos[c]) * es, local = (size_t)b * Tl * es + c * chunk;
            if (dir == 0)
                memmove((char *)dst + local, (const char *)src + whole, chunk);
            else
                memmove((char *)dst + whole, (const char *)src + local, chunk);
        }
}

void td_cp_take_local(void *dst, const void *src, int B, int T, int n, int r, size_t es) {
    move_chunks(dst, src, B, T, n, r, es, 0);
}

void td_cp_put_local(void *dst, const void *src, int B, int T, int n, int r, size_t es) {
    move_chunks(dst, src, B, T, n, r, es, 1);
}

/* ---- the ring ----------------------------------------------------------- */

struct td_cp_ring {
    td_comm *c;
    int n, r;
    void *kv[2], *dkv[2];   /* K/V blocks [B, T, 2KVC] and their gradients, double-buffered */
    void *own[4];           /* the ring's own blocks, where the lent scratch is too small */
    size_t cap;             /* bytes of each of own */
    void *lent;             /* td_cp_ring_lend's scratch, or NULL */
    size_t lent_bytes;
    td_request *send, *recv, *dsend, *drecv;
    td_cp_stats st;
};

td_cp_ring *td_cp_ring_new(td_comm *c) {
    td_cp_ring *g = td_alloc(sizeof *g, TD_MEM_OTHER);
    memset(g, 0, sizeof *g);
    g->c = c;
    g->n = td_comm_size(c), g->r = td_comm_rank(c);
    g->send = td_request_new(), g->recv = td_request_new();
    g->dsend = td_request_new(), g->drecv = td_request_new();
    return g;
}

void td_cp_ring_free(td_cp_ring *g) {
    if (!g) return;
    for (int i = 0; i < 4; i++) td_dev_free(g->own[i]);
    td_request_free(g->send), td_request_free(g->recv);
    td_request_free(g->dsend), td_request_free(g->drecv);
    td_free(g);
}

static size_t elem_bytes(td_precision p) { return p == TD_PREC_FP32 ? 4 : 2; }
/* columns of k (and of v) and of a qkv row */
static size_t kv_cols(const td_cp_shape *s) {
    return (size_t)(s->NKV > 0 ? s->NKV : s->NH) * (size_t)(s->C / s->NH);
}
static size_t row_cols(const td_cp_shape *s) { return (size_t)s->C + 2 * kv_cols(s); }
static size_t block_bytes(const td_cp_shape *s) {
    return (size_t)s->B * s->T * 2 * kv_cols(s) * elem_bytes(s->prec);
}

size_t td_cp_ring_plan_bytes(const td_cp_shape *s, int n, size_t lent) {
    /* ensure()'s four buffers, each as the device takes it */
    return n > 1 && 4 * block_bytes(s) > lent ? 4 * td_dev_footprint(block_bytes(s)) : 0;
}

void td_cp_ring_lend(td_cp_ring *g, void *ws, size_t bytes) {
    g->lent = ws, g->lent_bytes = ws ? bytes : 0;
    /* blocks of its own from earlier calls would be held beside the lent
     * ones, which the plan does not count: they are made again if needed */
    for (int i = 0; i < 4; i++) td_dev_free(g->own[i]), g->own[i] = NULL;
    g->cap = 0;
}

void td_cp_ring_formula(const td_cp_shape *s, int n, uint64_t *fwd, uint64_t *bwd) {
    uint64_t blk = block_bytes(s);
    *fwd = n > 1 ? (uint64_t)(n - 1) * blk : 0;
    *bwd = n > 1 ? (uint64_t)(2 * n - 1) * blk : 0;
}

/* The four blocks: in the lent scratch where they fit, else the ring's
 * own, sized once for the largest shape (the plan's 4 blocks). */
static void ensure(td_cp_ring *g, const td_cp_shape *s) {
    size_t need = block_bytes(s);
    void **blk[4] = {&g->kv[0], &g->kv[1], &g->dkv[0], &g->dkv[1]};
    if (g->lent && 4 * need <= g->lent_bytes) {
        for (int i = 0; i < 4; i++) *blk[i] = (char *)g->lent + i * need;
        return;
    }
    if (need > g->cap) {
        for (int i = 0; i < 4; i++)
            td_dev_free(g->own[i]), g->own[i] = td_dev_alloc(need, TD_MEM_COMM, "cp ring K/V block");
        g->cap = need;
    }
    for (int i = 0; i < 4; i++) *blk[i] = g->own[i];
}

td_cp_stats td_cp_ring_stats(const td_cp_ring *g) { return g->st; }
void td_cp_ring_reset_stats(td_cp_ring *g) { memset(&g->st, 0, sizeof g->st); }

/* This rank's K and V columns of qkv [B, T, C + 2KVC] into kv [B, T, 2KVC]. */
static void pack_kv(void *kv, const void *qkv, const td_cp_shape *s) {
    size_t es = elem_bytes(s->prec), C = (size_t)s->C, rows = (size_t)s->B * s->T;
    size_t kvc = kv_cols(s), row = row_cols(s);
    td_dev_copy_2d(kv, 2 * kvc * es, (const char *)qkv + C * es, row * es, 2 * kvc * es, rows);
}

/* A block message (count in 2-byte or 4-byte elements: p2p copies bytes). */
static void post(td_cp_ring *g, td_request *q, void *buf, const td_cp_shape *s, int send, int tag,
                 const char *what, int step) {
    size_t es = elem_bytes(s->prec), count = block_bytes(s) / es;
    td_dtype dt = es == 4 ? TD_F32 : TD_BF16;
    int peer = send ? (g->r + 1) % g->n : (g->r - 1 + g->n) % g->n;
    char note[64]; /* td_comm_note keeps 47 characters; these need ~40 */
    snprintf(note, sizeof note, "ring %s step %d/%d %s cp rank %d", what, step + 1, g->n,
             send ? "to" : "from", peer);
    td_comm_note(note);
    if (send) {
        td_send_start(q, g->c, buf, count, dt, peer, tag);
        g->st.bytes_sent += block_bytes(s);
    } else {
        td_recv_start(q, g->c, buf, count, dt, peer, tag);
        if (td_timeline_enabled()) {
            double t = td_timeline_now_us();
            td_timeline_add("cp recv posted", "p2p", t, t, step, -1);
        }
    }
    td_comm_note(NULL);
}

static void progress(td_cp_ring *g) {
    td_request *q[4] = {g->send, g->recv, g->dsend, g->drecv};
    for (int i = 0; i < 4; i++)
        if (td_request_active(q[i])) td_test(q[i]);
}

static void wait_all(td_cp_ring *g, int step) {
    double t0 = td_now_ms(), u0 = td_timeline_enabled() ? td_timeline_now_us() : 0;
    td_request *q[4] = {g->recv, g->drecv, g->send, g->dsend};
    for (int i = 0; i < 4; i++)
        if (td_request_active(q[i])) td_wait(q[i]);
    g->st.wait_ms += td_now_ms() - t0;
    if (td_timeline_enabled()) td_timeline_add("cp wait", "p2p", u0, td_timeline_now_us(), step, -1);
}

/* The block kernels of each precision: the run's backend's row. */
static const td_ops *ops_of(td_precision p) {
    return td_ops_for(p == TD_PREC_BF16 ? TD_K_BF16 : p == TD_PREC_FP16 ? TD_K_F16 : TD_K_F32);
}

/* One ring step's chunk pairs: this rank's two query chunks against the
 * two chunks of rank src's K/V block, each pair one kernel call over all B
 * sequences (chunks are views of T/2 rows inside the T local rows of each;
 * lse is [2 chunks][B, NH, T/2]). Forward when p->dqkv is NULL, else the
 * backward into dqkv's q columns and the block's gradient dkv. first: the
 * ring's first step, whose first pair of each query chunk overwrites. */
typedef struct {
    td_cp_ring *g;
    const td_cp_shape *s;
    void *out;
    float *lse;
    const void *qkv, *dout;
    void *dqkv;
} pass;

static void step_pairs(pass *p, int src, const void *kv, void *dkv, int first) {
    const td_cp_shape *s = p->s;
    td_cp_ring *g = p->g;
    size_t es = elem_bytes(s->prec), C = (size_t)s->C, Tc = (size_t)s->T / 2;
    size_t kvc = kv_cols(s), row = row_cols(s);
    long qpos[2], kpos[2];
    td_cp_chunk_pos(s->T * g->n, g->n, g->r, qpos);
    td_cp_chunk_pos(s->T * g->n, g->n, src, kpos);
    td_attn_shape a = {.B = s->B, .Tq = (int)Tc, .Tk = (int)Tc, .NH = s->NH, .NKV = (int)(kvc / (C / s->NH)),
                       .hs = s->C / s->NH, .q_stride = (int)row, .kv_stride = (int)(2 * kvc),
                       .o_stride = s->C, .mask = TD_ATTN_CAUSAL, .q_rows = s->T, .kv_rows = s->T,
                       .doc_start = s->doc_start, .doc_len = s->doc_len};
    /* document masking: a pair wholly across a document boundary costs the
     * kernel a look at its first query row's start per query block, every
     * key block skipped (its positions are global, so chunks agree) */
    for (int qc = 0; qc < 2; qc++)
        for (int kc = 0; kc < 2; kc++) {
            if (kpos[kc] > qpos[qc]) { /* equal chunks: every key after every query */
                g->st.skipped++;
                continue;
            }
            a.q_pos = qpos[qc], a.k_pos = kpos[kc];
            const char *q = (const char *)p->qkv + (size_t)qc * Tc * row * es;
            const char *k = (const char *)kv + (size_t)kc * Tc * 2 * kvc * es;
            char *o = (char *)p->out + (size_t)qc * Tc * C * es;
            float *l = p->lse + (size_t)qc * s->B * s->NH * Tc;
            if (!p->dqkv) {
                /* step 0 starts each query chunk with chunk 0 of its own block (at
                 * or before both of this rank's chunks) */
                ops_of(s->prec)->att_fwd(o, l, q, k, k + kvc * es, &a, !(first && kc == 0));
            } else {
                char *dq = (char *)p->dqkv + (size_t)qc * Tc * row * es;
                char *dk = (char *)dkv + (size_t)kc * Tc * 2 * kvc * es;
                ops_of(s->prec)->att_bwd(dq, dk, dk + kvc * es, (const char *)p->dout + (size_t)qc * Tc * C * es,
                           o, l, q, k, k + kvc * es, &a);
            }
            g->st.pairs++;
            progress(g); /* Open MPI moves the ring's messages only inside MPI calls */
        }
}

static void check_shape(const td_cp_ring *g, const td_cp_shape *s) {
    TD_CHECK(s->B >= 1 && s->T >= 2 && s->T % 2 == 0 && s->NH >= 1 && s->C % s->NH == 0 && s->NKV >= 0 &&
                 (s->NKV == 0 || s->NH % s->NKV == 0),
             "cp: bad attention shape (B %d, T %d local rows, C %d, NH %d, NKV %d)", s->B, s->T, s->C, s->NH, s->NKV);
    (void)g;
}

void td_cp_attn_forward(td_cp_ring *g, void *out, float *lse, const void *qkv, const td_cp_shape *s) {
    check_shape(g, s);
    ensure(g, s);
    pass p = {g, s, out, lse, qkv, NULL, NULL};
    int cur = 0;
    pack_kv(g->kv[cur], qkv, s);
    for (int i = 0; i < g->n; i++) {
        int src = (g->r - i + g->n) % g->n, more = i < g->n - 1;
        if (more) { /* the next block is on its way while this one computes */
            post(g, g->send, g->kv[cur], s, 1, TAG_FWD_KV, "fwd K/V", i);
            post(g, g->recv, g->kv[cur ^ 1], s, 0, TAG_FWD_KV, "fwd K/V", i);
        }
        double u0 = td_timeline_enabled() ? td_timeline_now_us() : 0;
        step_pairs(&p, src, g->kv[cur], NULL, i == 0);
        if (td_timeline_enabled()) td_timeline_add("cp attn fwd", "compute", u0, td_timeline_now_us(), i, -1);
        if (more) wait_all(g, i);
        cur ^= 1;
    }
}

void td_cp_attn_backward(td_cp_ring *g, void *dqkv, const void *dout, const void *out,
                         const float *lse, const void *qkv, const td_cp_shape *s) {
    check_shape(g, s);
    ensure(g, s);
    size_t es = elem_bytes(s->prec), C = (size_t)s->C, rows = (size_t)s->B * s->T;
    size_t kvc = kv_cols(s), row = row_cols(s);
    pass p = {g, s, (void *)out, (float *)lse, qkv, dout, dqkv};
    td_dev_zero(dqkv, rows * row * es);
    int cur = 0;
    pack_kv(g->kv[cur], qkv, s);
    td_dev_zero(g->dkv[cur], block_bytes(s));
    for (int i = 0; i < g->n; i++) {
        int src = (g->r - i + g->n) % g->n, more = i < g->n - 1;
        if (more) {
            post(g, g->send, g->kv[cur], s, 1, TAG_BWD_KV, "bwd K/V", i);
            post(g, g->recv, g->kv[cur ^ 1], s, 0, TAG_BWD_KV, "bwd K/V", i);
        }
        double u0 = td_timeline_enabled() ? td_timeline_now_us() : 0;
        step_pairs(&p, src, g->kv[cur], g->dkv[cur], i == 0);
        if (td_timeline_enabled()) td_timeline_add("cp attn bwd", "compute", u0, td_timeline_now_us(), i, -1);
        /* the block's gradient goes on to the next rank (after the last step:
         * home, since rank r + 1 owns the block this rank holds then) */
        if (g->n > 1) {
            post(g, g->dsend, g->dkv[cur], s, 1, TAG_BWD_DKV, "bwd dK/dV", i);
            post(g, g->drecv, g->dkv[cur ^ 1], s, 0, TAG_BWD_DKV, "bwd dK/dV", i);
            wait_all(g, i);
        }
        cur ^= 1;
    }
    /* with n = 1 the block never moved: cur flipped once, the gradient is in dkv[0] */
    const char *mine = g->n > 1 ? g->dkv[cur] : g->dkv[0];
    td_dev_copy_2d((char *)dqkv + C * es, row * es, mine, 2 * kvc * es, 2 * kvc * es, rows);
}

/* ---- the model's hooks -------------------------------------------------- */

static td_cp_shape shape_of(const td_attn_shape *a, td_precision prec) {
    td_cp_shape s = {a->B, a->Tq, a->NH * a->hs, a->NH, prec, a->NKV, a->doc_start, a->doc_len};
    return s;
}

static void model_forward(void *ctx, void *out, float *lse, const void *qkv, const td_attn_shape *a,
                          td_precision prec) {
    td_cp_shape s = shape_of(a, prec);
    td_cp_attn_forward(ctx, out, lse, qkv, &s);
}

static void model_backward(void *ctx, void *dqkv, const void *dout, const void *out, const float *lse,
                           const void *qkv, const td_attn_shape *a, td_precision prec) {
    td_cp_shape s = shape_of(a, prec);
    td_cp_attn_backward(ctx, dqkv, dout, out, lse, qkv, &s);
}

void td_cp_bind_model(td_cp_ring *ring, td_model_comm *ops) {
    ops->cp_ctx = ring;
    ops->cp_attention_forward = model_forward;
    ops->cp_attention_backward = model_backward;
}
