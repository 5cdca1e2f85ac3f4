/* trident verify's routing check (verify.h): the layout's routing of every
 * token, recorded through the model's route probe and gathered on rank 0,
 * and the oracle's replay of it at near ties. A near tie is a token whose
 * top-k margin (the last chosen expert's selection value over the best one
 * left out) is below the threshold in either run: the two runs' arithmetic
 * may order those experts either way, so the oracle takes the layout's
 * choice and the step stays comparable. A token routed apart with a margin
 * above it in both runs is a real difference. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/base.h"
#include "trident/comm.h"
#include "trident/moe.h"
#include "verify.h"

static void push(verify_routes *v, const verify_route *x) {
    if (v->n == v->cap) {
        v->cap = v->cap ? 2 * v->cap : 4096;
        v->r = realloc(v->r, sizeof(verify_route) * v->cap);
        TD_CHECK(v->r, "verify: out of memory for the routing records");
    }
    v->r[v->n++] = *x;
}

/* The token's key: the oracle's micro-batch k holds replica r's
 * sequences of the layout's micro-batch k at rows [r Bm, r Bm + Bm). */
static int token_key(const verify_routes *v, int micro, int row, int pos) {
    return (micro * v->o_rows + row) * v->T + pos;
}

/* tp ranks route alike: rank 0 of tp records. A cp rank's rows sit at
 * their global positions (m->pos). The micro-batches of a step reach each
 * layer in order, so a layer's call count is the micro-batch. */
void verify_routes_probe(void *ctx, const td_gpt *m, int layer, int N, int K, const int *idx, const float *margin) {
    verify_routes *v = ctx;
    if (m->d.tp_rank != 0) return;
    TD_ASSERT(K <= VERIFY_ROUTE_K);
    int micro = v->calls[layer]++, Tl = m->d.T;
    for (int i = 0; i < N; i++) {
        verify_route x;
        memset(&x, 0, sizeof x);
        int b = i / Tl, j = i % Tl, pos = m->pos ? m->pos[j] : j;
        x.step = v->step, x.layer = layer;
        x.tok = token_key(v, micro, v->dp_rank * v->Bm + b, pos);
        memcpy(x.idx, idx + (size_t)i * K, sizeof(int) * (size_t)K);
        x.margin = margin[i];
        push(v, &x);
    }
}

/* A step attempt starts: a skipped attempt's records go. */
void verify_routes_begin_step(verify_routes *v, int step, int dp_rank) {
    if (step == v->step && v->n > 0) v->n = v->step_start; /* the same step again: the last attempt was skipped */
    v->step = step, v->dp_rank = dp_rank, v->step_start = v->n;
    memset(v->calls, 0, sizeof v->calls);
}

static int route_cmp(const void *a, const void *b) {
    const verify_route *x = a, *y = b;
    if (x->step != y->step) return x->step < y->step ? -1 : 1;
    if (x->layer != y->layer) return x->layer < y->layer ? -1 : 1;
    return x->tok < y->tok ? -1 : x->tok > y->tok;
}

void verify_routes_gather(verify_routes *v) {
    td_comm *w = td_comm_world();
    int me = td_comm_rank(w), n = td_comm_size(w);
    size_t per = sizeof(verify_route) / sizeof(float); /* the bytes travel unchanged */
    if (me != 0) {
        float cnt = (float)v->n;
        td_send(w, &cnt, 1, TD_F32, 0, 910);
        if (v->n) td_send(w, v->r, v->n * per, TD_F32, 0, 911);
        return;
    }
    for (int r = 1; r < n; r++) {
        float cnt;
        td_recv(w, &cnt, 1, TD_F32, r, 910);
        size_t k = (size_t)cnt;
        if (!k) continue;
        if (v->n + k > v->cap) {
            v->cap = v->n + k;
            v->r = realloc(v->r, sizeof(verify_route) * v->cap);
            TD_CHECK(v->r, "verify: out of memory for the routing records");
        }
        td_recv(w, v->r + v->n, k * per, TD_F32, r, 911);
        v->n += k;
    }
    qsort(v->r, v->n, sizeof(verify_route), route_cmp);
}

static const char *experts(const int *idx, int K, char *buf) {
    int n = 0;
    for (int k = 0; k < K; k++) n += snprintf(buf + n, 16, "%s%d", k ? "," : "", idx[k]);
    return buf;
}

void verify_routes_override(void *ctx, const td_gpt *m, int layer, int t, int K, int *idx, float margin) {
    verify_routes *v = ctx;
    char a[16 * VERIFY_ROUTE_K], b[16 * VERIFY_ROUTE_K];
    (void)m;
    verify_route key = {.step = v->o_step, .layer = layer, .tok = token_key(v, v->o_micro, t / v->T, t % v->T)};
    const verify_route *x = bsearch(&key, v->r, v->n, sizeof(verify_route), route_cmp);
    v->routings++;
    if (!x) { /* the layout did not route this token: a count that differs */
        v->differ++;
        if (v->differ_shown++ < 3)
            printf("verify: routing: step %d layer %d token %d: the layout recorded no routing\n", key.step, layer,
                   key.tok);
        return;
    }
    float mg = fminf(margin, x->margin);
    if (mg < v->thr) v->near++;
    if (mg < v->thr && (v->near == 1 || mg < v->closest_margin)) { /* named in the summary */
        v->closest_margin = mg;
        snprintf(v->closest, sizeof v->closest, "step %d, layer %d, micro-batch %d, sequence %d, position %d "
                 "(margin %.2g)", key.step, layer, v->o_micro, t / v->T, t % v->T, mg);
    }
    if (!memcmp(x->idx, idx, sizeof(int) * (size_t)K)) return;
    if (mg < v->thr) { /* a near tie: the layout's choice, replayed */
        v->ties++;
        if (v->tie_shown++ < 5)
            printf("verify: near tie replayed: step %d, layer %d, micro-batch %d, sequence %d, position %d: the "
                   "layout chose experts %s, one process %s (top-k margins %.2g and %.2g, below %.2g)\n",
                   key.step, layer, v->o_micro, t / v->T, t % v->T, experts(x->idx, K, a), experts(idx, K, b),
                   x->margin, margin, v->thr);
        memcpy(idx, x->idx, sizeof(int) * (size_t)K);
        return;
    }
    v->differ++;
    if (v->differ_shown++ < 3)
        printf("verify: routing differs: step %d, layer %d, micro-batch %d, sequence %d, position %d: top-k margins "
               "%.3g (layout) and %.3g (one process), above %.2g\n",
               key.step, layer, v->o_micro, t / v->T, t % v->T, x->margin, margin, v->thr);
}
