/* Blocked (FlashAttention-style) attention, fp32 (trident/attention.h).
 *
 * Forward: one task per (batch, query head, block of ATT_BQ query rows).
 * The task walks the visible keys in blocks of ATT_BK: S = scale Q K^T,
 * then per row the online softmax (new max m', alpha = exp(m - m'), the
 * running sum l = alpha l + sum exp(S - m'), the accumulator O = alpha O +
 * P V), and at the end O / l and lse = m + log l. Products are
 * single-threaded sgemm calls on strided views of q, k, v.
 *
 * Backward: one task per (batch, kv head). For each key block it visits
 * the group's query heads and, for each, the query blocks that see the key
 * block, in a fixed order; it recomputes S and P = exp(S - lse), dP = dO
 * V^T and dS = P (dP - D) scale, with D = rowsum(dO * O), and adds
 * dV_blk += P^T dO, dK_blk += dS^T Q, dQ += dS K. dK_blk and dV_blk sum in
 * task-local buffers and are added into dk, dv once per key block. Every
 * output element is owned by one task (dq rows of the group's query heads,
 * dk/dv rows of its kv head), so there are no atomics or reductions across
 * threads.
 *
 * Determinism: a task's calls and their shapes depend only on the problem
 * (blocks at fixed multiples of ATT_BQ / ATT_BK), never on the thread that
 * runs it or on the thread count, and tasks share no outputs; so results
 * are bitwise independent of the thread count. Scratch buffers of all
 * threads are 64-byte aligned and equally sized, so a task sees the same
 * alignment on any thread.
 *
 * Block sizes 64 x 64 are a first choice, not yet tuned by measurement
 * (bench/bench_attention.c is the tool for it): large enough for the
 * sgemm micro-kernels, small enough that S, P and the O accumulator of a
 * task stay in L1/L2. */
#include <cblas.h>
#include <math.h>
#include <omp.h>

#include "internal.h"
#include "trident/attention.h"
#include "trident/base.h"

#define ATT_BQ 64 /* query rows per block */
#define ATT_BK 64 /* key rows per block (the row stride of the score buffers) */

/* Per-thread scratch, kept between calls and grown to the largest need: a
 * fresh allocation per call would fault and zero its pages every time. The
 * kernels run one call at a time on the caller's thread, so no lock. */
static float *g_ws;
static size_t g_ws_floats; /* whole buffer */

static size_t round64(size_t floats) { return (floats + 15) / 16 * 16; }

/* nt slices of `per` floats each (per already a multiple of 16 floats). */
static float *workspace(int nt, size_t per) {
    size_t need = (size_t)nt * per;
    if (need > g_ws_floats) {
        td_free(g_ws);
        g_ws = td_alloc(need * sizeof(float), TD_MEM_OTHER);
        g_ws_floats = need;
    }
    return g_ws;
}

void td_attn_blocked_release_scratch(void) {
    td_free(g_ws);
    g_ws = NULL;
    g_ws_floats = 0;
}

/* Rows per batch element in the buffers (td_attn_shape.q_rows, kv_rows). */
static size_t q_rows(const td_attn_shape *s) { return (size_t)(s->q_rows > 0 ? s->q_rows : s->Tq); }
static size_t kv_rows(const td_attn_shape *s) { return (size_t)(s->kv_rows > 0 ? s->kv_rows : s->Tk); }

void td_attn_check_shape(const td_attn_shape *s) {
    TD_CHECK(s->B >= 0 && s->Tq >= 0 && s->Tk >= 0 && s->hs >= 1, "attention: bad sizes");
    TD_CHECK(s->NKV >= 1 && s->NH >= s->NKV && s->NH % s->NKV == 0,
             "attention: NH (%d) must be a multiple of NKV (%d)", s->NH, s->NKV);
    TD_CHECK(s->q_stride >= s->NH * s->hs && s->o_stride >= s->NH * s->hs &&
                 s->kv_stride >= s->NKV * s->hs,
             "attention: a row stride is shorter than its heads");
    TD_CHECK(!s->doc_start || (s->mask == TD_ATTN_CAUSAL && s->doc_len >= 1 && s->q_pos >= 0 &&
                               s->q_pos + s->Tq <= s->doc_len && s->k_pos >= 0),
             "attention: document masking needs the causal mask and positions inside doc_len");
}


/* ---- forward ---- */

/* Merges one row's new result (o_new[hs] = O / l, lse_new) into out_row and
 * *lse (shared with attention_lowp.c through internal.h). Scalar libm
 * exp/log: once per row, so accuracy is worth it. */
void td_attn_merge_row(float *restrict out_row, float *lse, const float *restrict o_new,
                       float lse_new, int hs, int accumulate) {
    float lse_old = *lse;
    if (lse_new == -INFINITY) { /* nothing visible in this call */
        if (!accumulate) {
            for (int d = 0; d < hs; d++) out_row[d] = 0.0f;
            *lse = -INFINITY;
        }
        return;
    }
    if (!accumulate || lse_old == -INFINITY) {
        for (int d = 0; d < hs; d++) out_row[d] = o_new[d];
        *lse = lse_new;
        return;
    }
    /* weights exp(lse_x - lse) of the two parts, lse = logaddexp(old, new) */
    float mx = fmaxf(lse_old, lse_new), mn = fminf(lse_old, lse_new);
    float e = expf(mn - mx), w_big = 1.0f / (1.0f + e), w_small = e * w_big;
    float w_old = lse_old >= lse_new ? w_big : w_small;
    float w_new = lse_old >= lse_new ? w_small : w_big;
    for (int d = 0; d < hs; d++) out_row[d] = out_row[d] * w_old + o_new[d] * w_new;
    *lse = mx + log1pf(e);
}

/* Floats of one forward task's scratch: S [BQ,BK], O [BQ,hs], m, l [BQ]. */
static size_t fwd_scratch(int hs) {
    return round64((size_t)ATT_BQ * ATT_BK) + round64((size_t)ATT_BQ * hs) + 2 * round64(ATT_BQ);
}

static void fwd_task(float *out, float *lse, const float *q, const float *k, const float *v,
                     const td_attn_shape *s, int b, int h, int i0, int accumulate, float *ws) {
    int hs = s->hs, g = h / (s->NH / s->NKV), nq = s->Tq - i0 < ATT_BQ ? s->Tq - i0 : ATT_BQ;
    float scale = 1.0f / sqrtf((float)hs);
    /* views: Q [nq,hs] at q_stride; K, V [Tk,hs] at kv_stride */
    const float *Q = q + ((size_t)b * q_rows(s) + i0) * s->q_stride + (size_t)h * hs;
    const float *K = k + (size_t)b * kv_rows(s) * s->kv_stride + (size_t)g * hs;
    const float *V = v + (size_t)b * kv_rows(s) * s->kv_stride + (size_t)g * hs;
    float *S = ws;                                   /* [nq, BK] scores, then P */
    float *O = S + round64((size_t)ATT_BQ * ATT_BK); /* [nq, hs] unnormalised out */
    float *m = O + round64((size_t)ATT_BQ * hs);     /* [nq] running max */
    float *l = m + round64(ATT_BQ);                  /* [nq] running sum */
    for (int r = 0; r < nq; r++) m[r] = -INFINITY, l[r] = 0.0f;
    for (size_t i = 0; i < (size_t)nq * hs; i++) O[i] = 0.0f;
    int kend = td_attn_visible(s, i0 + nq - 1); /* keys any row of the block sees */
    /* key blocks wholly before the first row's document: no row sees them */
    int kbeg = td_attn_doc_first(s, b, i0) / ATT_BK * ATT_BK;
    for (int j0 = kbeg; j0 < kend; j0 += ATT_BK) {
        int nk = kend - j0 < ATT_BK ? kend - j0 : ATT_BK;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, hs, scale, Q, s->q_stride,
                    K + (size_t)j0 * s->kv_stride, s->kv_stride, 0.0f, S, ATT_BK);
        for (int r = 0; r < nq; r++) {
            float *restrict row = S + (size_t)r * ATT_BK;
            int f, L = td_attn_row_keys(s, b, i0 + r, j0, nk, &f); /* visible: [f, L) */
            if (f == L) { /* P = 0; the row's O, m, l stay as they are */
                for (int j = 0; j < nk; j++) row[j] = 0.0f;
                continue;
            }
            float mx = td_k_max(row + f, L - f);
            mx = td_k_ford(mx) > td_k_ford(m[r]) ? mx : m[r];
            /* exp(-inf - mx) would be td_k_expf's clamp value, not 0 */
            float alpha = m[r] == -INFINITY ? 0.0f : td_k_expf(m[r] - mx);
            for (int j = 0; j < f; j++) row[j] = 0.0f; /* another document: exactly 0 */
            for (int j = f; j < L; j++) row[j] = td_k_expf(row[j] - mx);
            for (int j = L; j < nk; j++) row[j] = 0.0f; /* masked: exactly 0 */
            l[r] = l[r] * alpha + td_k_sum(row + f, L - f);
            m[r] = mx;
            if (alpha != 1.0f) {
                float *restrict o = O + (size_t)r * hs;
                for (int d = 0; d < hs; d++) o[d] *= alpha;
            }
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, hs, nk, 1.0f, S, ATT_BK,
                    V + (size_t)j0 * s->kv_stride, s->kv_stride, 1.0f, O, hs);
    }
    for (int r = 0; r < nq; r++) {
        float *restrict o = O + (size_t)r * hs;
        float lse_new = -INFINITY;
        if (l[r] > 0.0f) {
            float inv = 1.0f / l[r];
            for (int d = 0; d < hs; d++) o[d] *= inv;
            lse_new = m[r] + logf(l[r]);
        }
        td_attn_merge_row(out + ((size_t)b * q_rows(s) + i0 + r) * s->o_stride + (size_t)h * hs,
                  lse + ((size_t)b * s->NH + h) * s->Tq + i0 + r, o, lse_new, hs, accumulate);
    }
}

void td_attn_forward(float *out, float *lse, const float *q, const float *k, const float *v,
                     const td_attn_shape *s, int accumulate) {
    td_attn_check_shape(s);
    int nqb = (s->Tq + ATT_BQ - 1) / ATT_BQ;
    long tasks = (long)s->B * s->NH * nqb;
    if (tasks == 0) return;
    int nt = td_k_threads_for((size_t)s->B * s->NH * s->Tq * (size_t)s->Tk * s->hs / 8);
    if (nt > tasks) nt = (int)tasks;
    size_t per = fwd_scratch(s->hs);
    float *ws = workspace(nt, per);
    /* dynamic: causal blocks differ in cost; which thread runs a task does
     * not change its result */
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(dynamic, 1)
    for (long t = 0; t < tasks; t++) {
        /* the last query blocks (the most keys) first, for balance */
        int qb = nqb - 1 - (int)(t % nqb), bh = (int)(t / nqb);
        fwd_task(out, lse, q, k, v, s, bh / s->NH, bh % s->NH, qb * ATT_BQ, accumulate,
                 ws + (size_t)omp_get_thread_num() * per);
    }
}

/* ---- backward ---- */

/* Floats of one backward task's scratch: P, dS [BQ,BK], dK_blk, dV_blk
 * [BK,hs], D [BQ]. */
static size_t bwd_scratch(int hs) {
    return 2 * round64((size_t)ATT_BQ * ATT_BK) + 2 * round64((size_t)ATT_BK * hs) +
           round64(ATT_BQ);
}

/* One (query head h, query block i0) against the key block [j0, j0+nk). */
static void bwd_pair(float *dq, const float *dout, const float *out, const float *lse,
                     const float *q, const float *Kb, const float *Vb, float *dKb, float *dVb,
                     const td_attn_shape *s, int b, int h, int i0, int j0, int nk, float *ws) {
    int hs = s->hs, nq = s->Tq - i0 < ATT_BQ ? s->Tq - i0 : ATT_BQ;
    float scale = 1.0f / sqrtf((float)hs);
    float *P = ws;                                    /* [nq, BK] probabilities */
    float *dS = P + round64((size_t)ATT_BQ * ATT_BK); /* [nq, BK] dP, then dS */
    float *D = dS + round64((size_t)ATT_BQ * ATT_BK) + 2 * round64((size_t)ATT_BK * hs); /* [nq] */
    size_t qrow = (size_t)b * q_rows(s) + i0;
    const float *Q = q + qrow * s->q_stride + (size_t)h * hs;     /* [nq, hs] */
    const float *dO = dout + qrow * s->o_stride + (size_t)h * hs; /* [nq, hs] */
    const float *Ob = out + qrow * s->o_stride + (size_t)h * hs;  /* [nq, hs] */
    const float *lr = lse + ((size_t)b * s->NH + h) * s->Tq + i0; /* [nq] */
    float *dQ = dq + qrow * s->q_stride + (size_t)h * hs;         /* [nq, hs] */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, hs, scale, Q, s->q_stride, Kb,
                s->kv_stride, 0.0f, P, ATT_BK);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, hs, 1.0f, dO, s->o_stride, Vb,
                s->kv_stride, 0.0f, dS, ATT_BK);
    for (int r = 0; r < nq; r++)
        D[r] = td_k_dot(dO + (size_t)r * s->o_stride, Ob + (size_t)r * s->o_stride, hs);
    for (int r = 0; r < nq; r++) {
        float *restrict p = P + (size_t)r * ATT_BK, *restrict g = dS + (size_t)r * ATT_BK;
        float m = lr[r], Dr = D[r];
        /* a row that saw no key anywhere (lse -inf) has P = 0 */
        int f, L = td_attn_row_keys(s, b, i0 + r, j0, nk, &f);
        if (m == -INFINITY) f = L = 0;
        for (int j = 0; j < f; j++) p[j] = 0.0f;
        for (int j = f; j < L; j++) p[j] = td_k_expf(p[j] - m);
        for (int j = L; j < nk; j++) p[j] = 0.0f;
        for (int j = 0; j < nk; j++) g[j] = p[j] * (g[j] - Dr) * scale;
    }
    /* dV_blk += P^T dO;  dK_blk += dS^T Q;  dQ += dS K_blk */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, hs, nq, 1.0f, P, ATT_BK, dO,
                s->o_stride, 1.0f, dVb, hs);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, hs, nq, 1.0f, dS, ATT_BK, Q,
                s->q_stride, 1.0f, dKb, hs);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, hs, nk, 1.0f, dS, ATT_BK, Kb,
                s->kv_stride, 1.0f, dQ, s->q_stride);
}

static void bwd_task(float *dq, float *dk, float *dv, const float *dout, const float *out,
                     const float *lse, const float *q, const float *k, const float *v,
                     const td_attn_shape *s, int b, int g, float *ws) {
    int hs = s->hs, G = s->NH / s->NKV;
    float *dKb = ws + 2 * round64((size_t)ATT_BQ * ATT_BK); /* [BK, hs] */
    float *dVb = dKb + round64((size_t)ATT_BK * hs);        /* [BK, hs] */
    for (int j0 = 0; j0 < s->Tk; j0 += ATT_BK) {
        int nk = s->Tk - j0 < ATT_BK ? s->Tk - j0 : ATT_BK;
        int i_first = td_attn_first_qblock(s, j0, ATT_BQ);
        if (i_first < 0) break; /* this and later key blocks: seen by no query */
        int i_end = td_attn_doc_qend(s, b, j0 + nk - 1); /* later rows: other documents */
        if (i_end <= i_first) continue;
        size_t krow = (size_t)b * kv_rows(s) + j0;
        const float *Kb = k + krow * s->kv_stride + (size_t)g * hs; /* [nk, hs] */
        const float *Vb = v + krow * s->kv_stride + (size_t)g * hs; /* [nk, hs] */
        for (size_t i = 0; i < (size_t)nk * hs; i++) dKb[i] = 0.0f, dVb[i] = 0.0f;
        for (int hh = 0; hh < G; hh++)
            for (int i0 = i_first; i0 < i_end; i0 += ATT_BQ)
                bwd_pair(dq, dout, out, lse, q, Kb, Vb, dKb, dVb, s, b, g * G + hh, i0, j0, nk, ws);
        for (int j = 0; j < nk; j++) {
            float *restrict a = dk + (krow + j) * s->kv_stride + (size_t)g * hs;
            float *restrict c = dv + (krow + j) * s->kv_stride + (size_t)g * hs;
            const float *x = dKb + (size_t)j * hs, *y = dVb + (size_t)j * hs;
            for (int d = 0; d < hs; d++) a[d] += x[d], c[d] += y[d];
        }
    }
}

void td_attn_backward(float *dq, float *dk, float *dv, const float *dout, const float *out,
                      const float *lse, const float *q, const float *k, const float *v,
                      const td_attn_shape *s) {
    td_attn_check_shape(s);
    int tasks = s->B * s->NKV;
    if (tasks == 0) return;
    int nt = td_k_threads_for((size_t)s->B * s->NH * s->Tq * (size_t)s->Tk * s->hs / 4);
    if (nt > tasks) nt = tasks;
    size_t per = bwd_scratch(s->hs);
    float *ws = workspace(nt, per);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(dynamic, 1)
    for (int t = 0; t < tasks; t++)
        bwd_task(dq, dk, dv, dout, out, lse, q, k, v, s, t / s->NKV, t % s->NKV,
                 ws + (size_t)omp_get_thread_num() * per);
}
