/* Fused softmax + cross-entropy over the first V of Vp logit columns.
 *
 * loss = logsumexp(x) - x[target] = log(sum exp(x - max)) - (x[target] -
 * max), so nothing overflows; the exp terms are summed in fixed-order lanes.
 * Rows are independent, so results are bitwise identical for any thread
 * count. probs may alias logits: each row reads logits[target] before it
 * overwrites the row. A target < 0 is ignored (trident eval's masked
 * positions): its loss is 0 and its row's gradient 0, the probabilities as
 * for any row. */
#include <float.h>
#include <math.h>

#include "internal.h"
#include "trident/base.h"

void td_softmax_xent_forward(float *losses, float *probs, const float *logits,
                             const int *targets, int N, int V, int Vp) {
    TD_ASSERT(V >= 1 && V <= Vp);
    int nt = td_k_threads_for((size_t)N * Vp * 4);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * Vp;
        float *p = probs + (size_t)n * Vp;
        int tgt = targets ? targets[n] : -1;
        TD_ASSERT(tgt < V); /* < 0: ignored */
        float mx = td_k_max(x, V);
        float xt = tgt >= 0 ? x[tgt] : 0.0f; /* before p (maybe == x) is written */
        for (int v = 0; v < V; v++) p[v] = td_k_expf(x[v] - mx);
        float sum = td_k_sum(p, V);
        float inv = 1.0f / sum;
        for (int v = 0; v < V; v++) p[v] *= inv;
        for (int v = V; v < Vp; v++) p[v] = 0.0f;
        /* log(sum) - (x_t - max): x_t - max is exact for nearby values, so
         * large logits cost no precision (log(sum) + max would round at
         * the scale of max) */
        if (losses && targets) losses[n] = tgt >= 0 ? logf(sum) - (xt - mx) : 0.0f;
    }
}

/* The fused forward in three stages (kernels.h). Each stage keeps the fused
 * kernel's per-row operations and order, so with nothing between them the
 * bits are the same; rows stay independent, so any thread count gives them. */
void td_xent_max(float *mx, const float *logits, int N, int V, int Vp) {
    TD_ASSERT(V >= 0 && V <= Vp);
    if (V == 0) { /* a shard of padding only: the max over tp ignores it */
        for (int n = 0; n < N; n++) mx[n] = -FLT_MAX;
        return;
    }
    int nt = td_k_threads_for((size_t)N * V);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (int n = 0; n < N; n++) mx[n] = td_k_max(logits + (size_t)n * Vp, V);
}

void td_xent_exp_sum(float *sum, float *xt, float *probs, const float *logits, const float *mx,
                     const int *targets, int lo, int N, int V, int Vp) {
    int nt = td_k_threads_for((size_t)N * Vp * 3);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * Vp;
        float *p = probs + (size_t)n * Vp;
        int tgt = targets ? targets[n] - lo : -1;
        xt[n] = tgt >= 0 && tgt < V ? x[tgt] : 0.0f; /* before p (maybe == x) is written */
        float m = mx[n];
        for (int v = 0; v < V; v++) p[v] = td_k_expf(x[v] - m);
        sum[n] = td_k_sum(p, V);
    }
}

void td_xent_finish(float *losses, float *probs, const float *sum, const float *xt,
                    const float *mx, const int *targets, int N, int V, int Vp) {
    int nt = td_k_threads_for((size_t)N * Vp);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (int n = 0; n < N; n++) {
        float *p = probs + (size_t)n * Vp;
        float inv = 1.0f / sum[n];
        for (int v = 0; v < V; v++) p[v] *= inv;
        for (int v = V; v < Vp; v++) p[v] = 0.0f;
        /* as in the fused kernel: x_t - max first, so large logits cost no
         * precision */
        if (losses && targets) losses[n] = targets[n] >= 0 ? logf(sum[n]) - (xt[n] - mx[n]) : 0.0f;
    }
}

void td_softmax_xent_backward(float *dlogits, const float *probs, const int *targets,
                              const float *dloss, int N, int V, int Vp) {
    for (int n = 0; n < N; n++) TD_ASSERT(targets[n] < V); /* < 0: ignored */
    td_xent_backward(dlogits, probs, targets, 0, dloss, N, V, Vp);
}

void td_xent_backward(float *dlogits, const float *probs, const int *targets, int lo,
                      const float *dloss, int N, int V, int Vp) {
    int nt = td_k_threads_for((size_t)N * Vp);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (int n = 0; n < N; n++) {
        const float *p = probs + (size_t)n * Vp;
        float *d = dlogits + (size_t)n * Vp;
        float g = targets[n] >= 0 ? dloss[n] : 0.0f; /* an ignored row has no gradient */
        int tgt = targets[n] - lo;
        int mine = tgt >= 0 && tgt < V;
        float pt = mine ? p[tgt] : 0.0f; /* before d (maybe == p) is written */
        for (int v = 0; v < V; v++) d[v] = p[v] * g;
        if (mine) d[tgt] = (pt - 1.0f) * g;
        for (int v = V; v < Vp; v++) d[v] = 0.0f;
    }
}
