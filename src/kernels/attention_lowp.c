/* Blocked attention on bf16 and fp16 tensors (trident/attention.h): one
 * implementation, the element type a descriptor as in lowp_ops.c.
 *
 * The block products are 16-bit GEMMs with fp32 accumulation through
 * oneDNN (td_dn_slot_gemm: matmul_bf16.c's primitive cache, one-thread
 * primitives run from inside our tasks), as the linear layers' are:
 * forward S = Q K^T and O += P V, backward S, dP = dO V^T, dV += P^T dO,
 * dK += dS^T Q, dQ += dS K. Everything else is fp32: scores, the online
 * softmax's running max, sum and rescaling, lse, D = rowsum(dO * O), the O,
 * dQ, dK, dV accumulators. P (forward and backward) and dS are rounded to
 * the 16-bit type before their GEMMs, as FlashAttention does on GPUs; the
 * row sum l is taken from the fp32 P before rounding.
 *
 * Each call first copies q, k, v (and dout) into packed 16-bit arrays
 * [B, heads, T padded to the block, hs] with zero rows past T, so that
 * every GEMM has one of three fixed shapes (few primitives, created before
 * the parallel region) and dense operands; the copies are O(B T C), as are
 * the backward's fp32 dq accumulator and D. Outputs are rounded once: out
 * per row after the merge (in fp32), dk / dv per key block as old value +
 * the block's fp32 sum, dq at the end as old value + the fp32 sum over all
 * key blocks. Tasks are those of the fp32 kernel (forward: batch, head,
 * query block; backward: batch, kv head), each GEMM single-threaded with
 * shapes fixed by the problem, so results are bitwise independent of the
 * thread count. Where oneDNN has no 16-bit kernel (fp16 here; bf16 below
 * AVX-512), the slot GEMM converts its operands to fp32, so P and dS are
 * rounded all the same and the results are those of the native path up to
 * summation order. */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "internal.h"
#include "trident/attention.h"
#include "trident/base.h"

/* The largest blocks: query rows, and key rows (more than the fp32
 * kernel's, for oneDNN's per-call cost). A call's blocks are these, or its
 * Tq / Tk rounded up to LB_B0 where shorter (short sequences and cp's
 * chunks would otherwise multiply zero padding: T 64 ran 1.16x slower in
 * 64 x 128 blocks than the materialized kernel). They depend on the shape
 * alone, never on the thread count. */
#define LB_BQ 64
#define LB_BK 128
#define LB_B0 16
_Static_assert(LB_BK >= LB_BQ, "the forward's O [BQ,hs] lives in a [BK,hs] scratch");
static int block_of(int T, int max) {
    int r = (T + LB_B0 - 1) / LB_B0 * LB_B0;
    return r < max ? (r > 0 ? r : LB_B0) : max;
}

static size_t al64(size_t bytes) { return (bytes + 63) / 64 * 64; }

/* Persistent buffers, grown to the largest request (a fresh allocation per
 * call faults and zeroes its pages each time). */
enum { B_Q, B_K, B_V, B_DO, B_D, B_DQ, B_WS, B_SLOTS };
static void *g_buf[B_SLOTS];
static size_t g_cap[B_SLOTS];

static void *buf(int slot, size_t bytes) {
    if (g_cap[slot] < bytes) {
        td_free(g_buf[slot]);
        g_buf[slot] = td_alloc(bytes ? bytes : 1, TD_MEM_OTHER);
        g_cap[slot] = bytes;
    }
    return g_buf[slot];
}

void td_attn_release_scratch(void) {
    for (int i = 0; i < B_SLOTS; i++) td_free(g_buf[i]), g_buf[i] = NULL, g_cap[i] = 0;
    td_attn_blocked_release_scratch();
}

/* One call's state, shared read-only by its tasks. */
typedef struct {
    const td_lp_type *t;
    const td_attn_shape *s;
    int bq, bk;                 /* this call's blocks (block_of), bk >= bq or bk = Tk's */
    int Tqp, Tkp;               /* Tq, Tk rounded up to bq, bk */
    char *Q, *K, *V, *dO;       /* packed 16-bit [B, NH or NKV, Tqp or Tkp, hs] */
    float *D, *dQ;              /* [B,NH,Tq] rowsum(dO * O); [B,NH,Tqp,hs] fp32 dq sums */
    td_slot_gemm *qk, *pv, *tn; /* [BQ,hs]x[BK,hs]^T, [BQ,BK]x[BK,hs], [BQ,BK]^Tx[BQ,hs] */
    char *ws;                   /* per-thread scratch, ws_per bytes each */
    size_t ws_per;
    float scale;
} ctx;

static size_t q_rows(const td_attn_shape *s) { return (size_t)(s->q_rows > 0 ? s->q_rows : s->Tq); }
static size_t kv_rows(const td_attn_shape *s) {
    return (size_t)(s->kv_rows > 0 ? s->kv_rows : s->Tk);
}

/* The 16-bit head slice of row i of batch element b in a strided tensor. */
static char *slice(const ctx *c, const void *p, int b, size_t pitch, size_t i, int stride, int h) {
    return (char *)p +
           (((size_t)b * pitch + i) * (size_t)stride + (size_t)h * c->s->hs) * c->t->size;
}

/* dst [B, heads, Tp, hs] <- the head slices of src; rows past T zero. */
static void pack(const ctx *c, char *dst, const void *src, int heads, int T, int Tp, size_t pitch,
                 int stride) {
    size_t row = (size_t)c->s->hs * c->t->size, n = (size_t)c->s->B * heads * Tp;
    int nt = td_k_threads_for(n * c->s->hs);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (size_t r = 0; r < n; r++) {
        int i = (int)(r % (size_t)Tp), h = (int)(r / (size_t)Tp % (size_t)heads);
        int b = (int)(r / ((size_t)Tp * heads));
        if (i < T)
            memcpy(dst + r * row, slice(c, src, b, pitch, (size_t)i, stride, h), row);
        else
            memset(dst + r * row, 0, row);
    }
}

/* Scratch of one task: S and dP fp32 [BQ,BK], P and dS 16-bit [BQ,BK], O
 * (forward) or dK_blk, dV_blk (backward) fp32, m, l [BQ], two fp32 rows. */
static size_t ws_bytes(const td_lp_type *t, int hs) {
    size_t f = sizeof(float), bk = (size_t)LB_BQ * LB_BK;
    return 2 * al64(bk * f) + 2 * al64(bk * t->size) + 2 * al64((size_t)LB_BK * hs * f) +
           2 * al64(LB_BQ * f) + 2 * al64((size_t)hs * f);
}

typedef struct {
    float *S, *dP;
    char *P, *dS;
    float *A, *B; /* forward: O [BQ,hs] in A; backward: dK_blk, dV_blk [BK,hs] */
    float *m, *l, *r0, *r1;
} scratch;

static scratch carve(const ctx *c, int slot) {
    size_t f = sizeof(float), bk = (size_t)LB_BQ * LB_BK, hs = (size_t)c->s->hs;
    char *p = c->ws + (size_t)slot * c->ws_per;
    scratch w;
    w.S = (float *)p, p += al64(bk * f);
    w.dP = (float *)p, p += al64(bk * f);
    w.P = p, p += al64(bk * c->t->size);
    w.dS = p, p += al64(bk * c->t->size);
    w.A = (float *)p, p += al64(LB_BK * hs * f);
    w.B = (float *)p, p += al64(LB_BK * hs * f);
    w.m = (float *)p, p += al64(LB_BQ * f);
    w.l = (float *)p, p += al64(LB_BQ * f);
    w.r0 = (float *)p, p += al64(hs * f);
    w.r1 = (float *)p;
    return w;
}

/* Shared setup: padded sizes, the three GEMMs and nt threads' scratch. */
static ctx setup(const td_lp_type *t, const td_attn_shape *s, int nt) {
    ctx c = {.t = t, .s = s, .scale = 1.0f / sqrtf((float)s->hs)};
    c.bq = block_of(s->Tq, LB_BQ), c.bk = block_of(s->Tk, LB_BK);
    c.Tqp = (s->Tq + c.bq - 1) / c.bq * c.bq;
    c.Tkp = (s->Tk + c.bk - 1) / c.bk * c.bk;
    int hs = s->hs;
    c.qk = td_dn_slot_gemm(t->k, c.bq, hs, c.bk, 0, 1, 0, nt);
    c.pv = td_dn_slot_gemm(t->k, c.bq, c.bk, hs, 0, 0, 1, nt);
    c.tn = td_dn_slot_gemm(t->k, c.bk, c.bq, hs, 1, 0, 1, nt);
    c.ws_per = ws_bytes(t, hs);
    c.ws = buf(B_WS, (size_t)nt * c.ws_per);
    return c;
}

/* ---- forward ---- */

static void fwd_task(const ctx *c, void *out, float *lse, int accumulate, int b, int h, int i0,
                     int slot) {
    const td_attn_shape *s = c->s;
    const td_lp_type *t = c->t;
    int BQ = c->bq, BK = c->bk, hs = s->hs, g = h / (s->NH / s->NKV);
    int nq = s->Tq - i0 < BQ ? s->Tq - i0 : BQ;
    size_t z = t->size;
    const char *Q = c->Q + (((size_t)b * s->NH + h) * c->Tqp + i0) * hs * z;
    const char *K = c->K + ((size_t)b * s->NKV + g) * c->Tkp * hs * z;
    const char *V = c->V + ((size_t)b * s->NKV + g) * c->Tkp * hs * z;
    scratch w = carve(c, slot);
    float *O = w.A;
    for (int r = 0; r < nq; r++) w.m[r] = -INFINITY, w.l[r] = 0.0f;
    memset(O, 0, sizeof(float) * BQ * hs);
    memset(w.P + (size_t)nq * BK * z, 0, (size_t)(BQ - nq) * BK * z); /* padding rows */
    int kend = td_attn_visible(s, i0 + nq - 1); /* keys any row of the block sees */
    /* key blocks wholly before the first row's document: no row sees them */
    int kbeg = td_attn_doc_first(s, b, i0) / BK * BK;
    for (int j0 = kbeg; j0 < kend; j0 += BK) {
        int nk = kend - j0 < BK ? kend - j0 : BK;
        td_dn_slot_gemm_run(c->qk, slot, w.S, Q, K + (size_t)j0 * hs * z);
        for (int r = 0; r < nq; r++) {
            float *restrict row = w.S + (size_t)r * BK;
            char *prow = w.P + (size_t)r * BK * z;
            int f, L = td_attn_row_keys(s, b, i0 + r, j0, nk, &f); /* visible: [f, L) */
            if (f == L) { /* P = 0; the row's O, m, l stay as they are */
                memset(prow, 0, BK * z);
                continue;
            }
            for (int j = f; j < L; j++) row[j] *= c->scale;
            float mx = td_k_max(row + f, L - f), m = w.m[r];
            mx = td_k_ford(mx) > td_k_ford(m) ? mx : m;
            /* exp(-inf - mx) would be td_k_expf's clamp value, not 0 */
            float alpha = m == -INFINITY ? 0.0f : td_k_expf(m - mx);
            for (int j = 0; j < f; j++) row[j] = 0.0f; /* another document: exactly 0 */
            for (int j = f; j < L; j++) row[j] = td_k_expf(row[j] - mx);
            for (int j = L; j < BK; j++) row[j] = 0.0f; /* masked or past the keys: exactly 0 */
            w.l[r] = w.l[r] * alpha + td_k_sum(row + f, L - f);
            w.m[r] = mx;
            if (alpha != 1.0f) {
                float *restrict o = O + (size_t)r * hs;
                for (int d = 0; d < hs; d++) o[d] *= alpha;
            }
            t->from_f32_1t(prow, row, BK); /* P rounded to 16 bits for its GEMM */
        }
        td_dn_slot_gemm_run(c->pv, slot, O, w.P, V + (size_t)j0 * hs * z);
    }
    for (int r = 0; r < nq; r++) {
        float *restrict o = O + (size_t)r * hs;
        float lse_new = -INFINITY;
        if (w.l[r] > 0.0f) {
            float inv = 1.0f / w.l[r];
            for (int d = 0; d < hs; d++) o[d] *= inv;
            lse_new = w.m[r] + logf(w.l[r]);
        }
        /* merged in fp32, rounded once; a row left unchanged round-trips exactly */
        char *orow = slice(c, out, b, q_rows(s), (size_t)(i0 + r), s->o_stride, h);
        if (accumulate) t->to_f32_1t(w.r0, orow, hs);
        td_attn_merge_row(w.r0, lse + ((size_t)b * s->NH + h) * s->Tq + i0 + r, o, lse_new, hs,
                          accumulate);
        t->from_f32_1t(orow, w.r0, hs);
    }
}

static void lp_forward(const td_lp_type *t, void *out, float *lse, const void *q, const void *k,
                       const void *v, const td_attn_shape *s, int accumulate) {
    td_attn_check_shape(s);
    long bh = (long)s->B * s->NH;
    if (bh == 0 || s->Tq == 0) return;
    int nt = td_k_threads_for((size_t)s->B * s->NH * s->Tq * (size_t)s->Tk * s->hs / 8);
    int nqb = (s->Tq + block_of(s->Tq, LB_BQ) - 1) / block_of(s->Tq, LB_BQ);
    long tasks = bh * nqb;
    if (nt > tasks) nt = (int)tasks;
    ctx c = setup(t, s, nt);
    size_t z = t->size, nq = (size_t)s->B * s->NH * c.Tqp * s->hs;
    size_t nk = (size_t)s->B * s->NKV * c.Tkp * s->hs;
    c.Q = buf(B_Q, nq * z), c.K = buf(B_K, nk * z), c.V = buf(B_V, nk * z);
    pack(&c, c.Q, q, s->NH, s->Tq, c.Tqp, q_rows(s), s->q_stride);
    pack(&c, c.K, k, s->NKV, s->Tk, c.Tkp, kv_rows(s), s->kv_stride);
    pack(&c, c.V, v, s->NKV, s->Tk, c.Tkp, kv_rows(s), s->kv_stride);
    /* dynamic: causal blocks differ in cost; which thread runs a task does
     * not change its result */
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(dynamic, 1)
    for (long i = 0; i < tasks; i++) {
        /* the last query blocks (the most keys) first, for balance */
        int qb = nqb - 1 - (int)(i % nqb), bhi = (int)(i / nqb);
        fwd_task(&c, out, lse, accumulate, bhi / s->NH, bhi % s->NH, qb * c.bq, omp_get_thread_num());
    }
}

/* ---- backward ---- */

/* One (query head h, query block i0) against the key block at j0 (nk keys;
 * Kb, Vb its packed rows): adds into dKb, dVb (the task's) and c->dQ. */
static void bwd_pair(const ctx *c, const float *lse, const char *Kb, const char *Vb,
                     const scratch *w, int b, int h, int i0, int j0, int nk, int slot) {
    const td_attn_shape *s = c->s;
    const td_lp_type *t = c->t;
    int BQ = c->bq, BK = c->bk, hs = s->hs, nq = s->Tq - i0 < BQ ? s->Tq - i0 : BQ;
    size_t z = t->size, prow = ((size_t)b * s->NH + h) * c->Tqp + i0;
    const char *Q = c->Q + prow * hs * z, *dO = c->dO + prow * hs * z; /* [BQ, hs] */
    const float *lr = lse + ((size_t)b * s->NH + h) * s->Tq + i0;      /* [nq] */
    const float *Dr = c->D + ((size_t)b * s->NH + h) * s->Tq + i0;     /* [nq] */
    td_dn_slot_gemm_run(c->qk, slot, w->S, Q, Kb);
    td_dn_slot_gemm_run(c->qk, slot, w->dP, dO, Vb);
    for (int r = 0; r < nq; r++) {
        float *restrict p = w->S + (size_t)r * BK, *restrict g = w->dP + (size_t)r * BK;
        float m = lr[r], D = Dr[r];
        /* a row that saw no key anywhere (lse -inf) has P = 0 */
        int f, L = td_attn_row_keys(s, b, i0 + r, j0, nk, &f);
        if (m == -INFINITY) f = L = 0;
        for (int j = 0; j < f; j++) p[j] = 0.0f;
        for (int j = f; j < L; j++) p[j] = td_k_expf(p[j] * c->scale - m);
        for (int j = L; j < BK; j++) p[j] = 0.0f;
        for (int j = 0; j < BK; j++) g[j] = p[j] * (g[j] - D) * c->scale;
        /* P and dS rounded to 16 bits for their GEMMs */
        t->from_f32_1t(w->P + (size_t)r * BK * z, p, BK);
        t->from_f32_1t(w->dS + (size_t)r * BK * z, g, BK);
    }
    size_t pad = (size_t)(BQ - nq) * BK * z; /* query rows past Tq add nothing */
    memset(w->P + (size_t)nq * BK * z, 0, pad);
    memset(w->dS + (size_t)nq * BK * z, 0, pad);
    /* dV_blk += P^T dO;  dK_blk += dS^T Q;  dQ += dS K_blk */
    td_dn_slot_gemm_run(c->tn, slot, w->B, w->P, dO);
    td_dn_slot_gemm_run(c->tn, slot, w->A, w->dS, Q);
    td_dn_slot_gemm_run(c->pv, slot, c->dQ + prow * hs, w->dS, Kb);
}

/* 16-bit row x <- round(x + add), hs elements, tmp an fp32 row. */
static void add_round(const td_lp_type *t, char *x, const float *add, float *tmp, int hs) {
    t->to_f32_1t(tmp, x, hs);
    for (int d = 0; d < hs; d++) tmp[d] += add[d];
    t->from_f32_1t(x, tmp, hs);
}

static void bwd_task(const ctx *c, void *dk, void *dv, const float *lse, int b, int g, int slot) {
    const td_attn_shape *s = c->s;
    int hs = s->hs, G = s->NH / s->NKV;
    size_t z = c->t->size;
    scratch w = carve(c, slot);
    const char *K = c->K + ((size_t)b * s->NKV + g) * c->Tkp * hs * z;
    const char *V = c->V + ((size_t)b * s->NKV + g) * c->Tkp * hs * z;
    int BQ = c->bq, BK = c->bk;
    for (int j0 = 0; j0 < s->Tk; j0 += BK) {
        int nk = s->Tk - j0 < BK ? s->Tk - j0 : BK;
        int i_first = td_attn_first_qblock(s, j0, BQ);
        if (i_first < 0) break; /* this and later key blocks: seen by no query */
        int i_end = td_attn_doc_qend(s, b, j0 + nk - 1); /* later rows: other documents */
        if (i_end <= i_first) continue;
        memset(w.A, 0, sizeof(float) * BK * hs);
        memset(w.B, 0, sizeof(float) * BK * hs);
        for (int hh = 0; hh < G; hh++)
            for (int i0 = i_first; i0 < i_end; i0 += BQ)
                bwd_pair(c, lse, K + (size_t)j0 * hs * z, V + (size_t)j0 * hs * z, &w, b,
                         g * G + hh, i0, j0, nk, slot);
        for (int j = 0; j < nk; j++) { /* old value + this block's fp32 sum, rounded once */
            size_t i = (size_t)(j0 + j);
            add_round(c->t, slice(c, dk, b, kv_rows(s), i, s->kv_stride, g), w.A + (size_t)j * hs,
                      w.r0, hs);
            add_round(c->t, slice(c, dv, b, kv_rows(s), i, s->kv_stride, g), w.B + (size_t)j * hs,
                      w.r0, hs);
        }
    }
}

static void lp_backward(const td_lp_type *t, void *dq, void *dk, void *dv, const void *dout,
                        const void *out, const float *lse, const void *q, const void *k,
                        const void *v, const td_attn_shape *s) {
    td_attn_check_shape(s);
    int tasks = s->B * s->NKV;
    if (tasks == 0 || s->Tq == 0) return;
    int nt = td_k_threads_for((size_t)s->B * s->NH * s->Tq * (size_t)s->Tk * s->hs / 4);
    int nrow = td_kernels_threads(); /* the row loops below may use all threads */
    ctx c = setup(t, s, nt > nrow ? nt : nrow);
    if (nt > tasks) nt = tasks;
    int hs = s->hs, NH = s->NH;
    size_t z = t->size, nq = (size_t)s->B * NH * c.Tqp * hs;
    size_t nk = (size_t)s->B * s->NKV * c.Tkp * hs;
    c.Q = buf(B_Q, nq * z), c.dO = buf(B_DO, nq * z);
    c.K = buf(B_K, nk * z), c.V = buf(B_V, nk * z);
    c.D = buf(B_D, sizeof(float) * s->B * NH * s->Tq), c.dQ = buf(B_DQ, sizeof(float) * nq);
    pack(&c, c.Q, q, NH, s->Tq, c.Tqp, q_rows(s), s->q_stride);
    pack(&c, c.dO, dout, NH, s->Tq, c.Tqp, q_rows(s), s->o_stride);
    pack(&c, c.K, k, s->NKV, s->Tk, c.Tkp, kv_rows(s), s->kv_stride);
    pack(&c, c.V, v, s->NKV, s->Tk, c.Tkp, kv_rows(s), s->kv_stride);
    size_t rows = (size_t)s->B * NH * s->Tq;
    int nr = td_k_threads_for(rows * hs);
    /* D = rowsum(dO * O) in fp32, once per row */
#pragma omp parallel for num_threads(nr) if (nr > 1) schedule(static)
    for (size_t r = 0; r < rows; r++) {
        int i = (int)(r % (size_t)s->Tq), h = (int)(r / (size_t)s->Tq % (size_t)NH);
        int b = (int)(r / ((size_t)s->Tq * NH));
        scratch w = carve(&c, omp_get_thread_num());
        t->to_f32_1t(w.r0, slice(&c, dout, b, q_rows(s), (size_t)i, s->o_stride, h), hs);
        t->to_f32_1t(w.r1, slice(&c, out, b, q_rows(s), (size_t)i, s->o_stride, h), hs);
        c.D[r] = td_k_dot(w.r0, w.r1, hs);
    }
    memset(c.dQ, 0, sizeof(float) * nq); /* padding rows too: their GEMM sums stay finite */
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(dynamic, 1)
    for (int i = 0; i < tasks; i++)
        bwd_task(&c, dk, dv, lse, i / s->NKV, i % s->NKV, omp_get_thread_num());
        /* dq = old value + the fp32 sum over all key blocks, rounded once */
#pragma omp parallel for num_threads(nr) if (nr > 1) schedule(static)
    for (size_t r = 0; r < rows; r++) {
        int i = (int)(r % (size_t)s->Tq), h = (int)(r / (size_t)s->Tq % (size_t)NH);
        int b = (int)(r / ((size_t)s->Tq * NH));
        scratch w = carve(&c, omp_get_thread_num());
        add_round(t, slice(&c, dq, b, q_rows(s), (size_t)i, s->q_stride, h),
                  c.dQ + (((size_t)b * NH + h) * c.Tqp + i) * hs, w.r0, hs);
    }
}

void td_attn_bf16_forward(td_bf16 *out, float *lse, const td_bf16 *q, const td_bf16 *k,
                          const td_bf16 *v, const td_attn_shape *s, int accumulate) {
    lp_forward(&TD_LP_BF16, out, lse, q, k, v, s, accumulate);
}
void td_attn_bf16_backward(td_bf16 *dq, td_bf16 *dk, td_bf16 *dv, const td_bf16 *dout,
                           const td_bf16 *out, const float *lse, const td_bf16 *q, const td_bf16 *k,
                           const td_bf16 *v, const td_attn_shape *s) {
    lp_backward(&TD_LP_BF16, dq, dk, dv, dout, out, lse, q, k, v, s);
}
void td_attn_f16_forward(td_f16 *out, float *lse, const td_f16 *q, const td_f16 *k, const td_f16 *v,
                         const td_attn_shape *s, int accumulate) {
    lp_forward(&TD_LP_F16, out, lse, q, k, v, s, accumulate);
}
void td_attn_f16_backward(td_f16 *dq, td_f16 *dk, td_f16 *dv, const td_f16 *dout, const td_f16 *out,
                          const float *lse, const td_f16 *q, const td_f16 *k, const td_f16 *v,
                          const td_attn_shape *s) {
    lp_backward(&TD_LP_F16, dq, dk, dv, dout, out, lse, q, k, v, s);
}
