/* A mixture of experts' routing under a layout against the single process
 * (test_layouts.c): every token's chosen experts at every step and layer,
 * recorded through the model's route probe (model.h), gathered on rank 0
 * and matched by (step, layer, token of the oracle's micro-batch). A token
 * routed differently fails when both runs' top-k margins are 1e-4 or more
 * (a real difference, not a near tie that fp32 reordering may flip); the
 * oracle replays the layout's choice of a near tie (route_replay). */
#ifndef TEST_MOE_ROUTES_H
#define TEST_MOE_ROUTES_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/comm.h"
#include "trident/model.h"
#include "trident/moe.h"

#define ROUTE_K 8 /* the tests' top-k stays below */

typedef struct {
    int step, layer, tok;
    int idx[ROUTE_K];
    float margin;
} route_rec;

typedef struct {
    route_rec *r;
    size_t n, cap;
    int calls[TD_MAX_LAYERS];
    int M, Bm, T;  /* micro-batches per step, this rank's sequences per micro-batch, the model's T */
    int replica;   /* this rank's replica: its sequences come after the replicas' before it */
    int tp, world; /* for the replica: the order tp-cp-dp-pp */
} routes;

/* The oracle's token of local row i: replica r's sequences come first in
 * each micro-batch, a cp rank's rows sit at their global positions. */
static void route_probe(void *ctx, const td_gpt *m, int layer, int N, int K, const int *idx, const float *margin) {
    routes *rs = ctx;
    if (m->d.tp_rank != 0 || K > ROUTE_K) return; /* the tp ranks route alike */
    int c = rs->calls[layer]++, Tl = m->d.T;
    for (int i = 0; i < N; i++) {
        if (rs->n == rs->cap) {
            rs->cap = rs->cap ? 2 * rs->cap : 4096;
            rs->r = realloc(rs->r, sizeof(route_rec) * rs->cap);
        }
        route_rec *x = &rs->r[rs->n++];
        memset(x, 0, sizeof *x);
        /* the load-balanced split of cp.h (chunks r and 2cp-1-r of 2cp),
         * not m->pos: that is device memory (--device guard) */
        int b = i / Tl, j = i % Tl, r = m->d.cp_rank, Tc = Tl / 2;
        int pos = m->d.cp <= 1 ? j : j < Tc ? r * Tc + j : (2 * m->d.cp - 1 - r) * Tc + (j - Tc);
        x->step = c / rs->M, x->layer = layer;
        x->tok = ((c % rs->M) * 100000) + (rs->replica * rs->Bm + b) * rs->T + pos;
        memcpy(x->idx, idx + (size_t)i * K, sizeof(int) * (size_t)K);
        x->margin = margin[i];
    }
}

static int route_cmp(const void *a, const void *b) {
    const route_rec *x = a, *y = b;
    if (x->step != y->step) return x->step - y->step;
    if (x->layer != y->layer) return x->layer - y->layer;
    return x->tok - y->tok;
}

/* Every rank's records to rank 0 (collective over the world). */
static void routes_gather(routes *rs) {
    td_comm *w = td_comm_world();
    int me = td_comm_rank(w), n = td_comm_size(w);
    size_t per = sizeof(route_rec) / sizeof(float);
    if (me != 0) {
        float cnt = (float)rs->n;
        td_send(w, &cnt, 1, TD_F32, 0, 900);
        if (rs->n) td_send(w, rs->r, rs->n * per, TD_F32, 0, 901);
        return;
    }
    for (int r = 1; r < n; r++) {
        float cnt;
        td_recv(w, &cnt, 1, TD_F32, r, 900);
        size_t k = (size_t)cnt;
        if (!k) continue;
        if (rs->n + k > rs->cap) rs->cap = rs->n + k, rs->r = realloc(rs->r, sizeof(route_rec) * rs->cap);
        td_recv(w, rs->r + rs->n, k * per, TD_F32, r, 901);
        rs->n += k;
    }
}

/* The near-tie rule of trident verify (src/train/verify_routes.c): a token
 * whose top-k margin is below 1e-4 in either run may be ordered either way
 * by the runs' fp32 sums, so the oracle replays the layout's choice for it
 * (the model's route override) and its trajectory stays comparable; the
 * ties routed apart are counted, and more than 5% of the routings fails. */
#define ROUTE_TIE 1e-4f
typedef struct {
    routes *run;     /* the layout's records, sorted */
    int M, T;
    int calls[TD_MAX_LAYERS];
    size_t routings, replayed;
} route_replay;

/* The oracle's token t of a layer's call c: step c / M, micro-batch c % M. */
static void route_replay_fn(void *ctx, const td_gpt *m, int layer, int t, int K, int *idx, float margin) {
    route_replay *rr = ctx;
    (void)m;
    if (t == 0) rr->calls[layer]++;
    int c = rr->calls[layer] - 1;
    route_rec key = {.step = c / rr->M, .layer = layer, .tok = (c % rr->M) * 100000 + t};
    const route_rec *x = bsearch(&key, rr->run->r, rr->run->n, sizeof(route_rec), route_cmp);
    rr->routings++;
    if (!x || !memcmp(x->idx, idx, sizeof(int) * (size_t)K)) return;
    if ((x->margin < margin ? x->margin : margin) >= ROUTE_TIE) return; /* a real difference: compared below */
    if (rr->replayed++ < 3)
        printf("routing: near tie replayed: step %d layer %d token %d (margins %.2g and %.2g)\n", key.step, layer,
               key.tok, x->margin, margin);
    memcpy(idx, x->idx, sizeof(int) * (size_t)K);
}

static void route_replay_begin(route_replay *rr, routes *run, int M, int T) {
    memset(rr, 0, sizeof *rr);
    rr->run = run, rr->M = M, rr->T = T;
    qsort(run->r, run->n, sizeof(route_rec), route_cmp);
    td_gpt_set_route_override(route_replay_fn, rr);
}

/* The failures: differently routed tokens with a margin of 1e-4 or more in
 * both runs (the oracle replayed the others), or replayed ties above 5%. */
static int routes_compare(routes *run, routes *ref, int K, const route_replay *rr) {
    qsort(run->r, run->n, sizeof(route_rec), route_cmp);
    qsort(ref->r, ref->n, sizeof(route_rec), route_cmp);
    int fails = 0;
    size_t close = 0, differ = 0;
    float worst = 0.0f;
    if (run->n != ref->n) {
        printf("FAIL routing: %zu token routings recorded, single process %zu\n", run->n, ref->n);
        return 1;
    }
    for (size_t i = 0; i < run->n; i++) {
        const route_rec *a = &run->r[i], *b = &ref->r[i];
        if (route_cmp(a, b) != 0) {
            printf("FAIL routing: token records do not match (step %d layer %d token %d vs %d)\n", a->step, a->layer,
                   a->tok, b->tok);
            return 1;
        }
        if (!memcmp(a->idx, b->idx, sizeof(int) * (size_t)K)) continue;
        differ++;
        float mg = a->margin < b->margin ? a->margin : b->margin;
        if (mg >= ROUTE_TIE) {
            if (fails++ < 5)
                printf("FAIL routing: step %d layer %d token %d: experts differ with top-k margin %.3g\n", a->step,
                       a->layer, a->tok, mg);
        } else {
            close++;
            if (mg > worst) worst = mg;
        }
    }
    printf("routing: %zu token routings, %zu differ (%zu within the 1e-4 margin, largest %.2g); %zu near ties "
           "replayed\n", run->n, differ, close, worst, rr->replayed);
    if (rr->replayed > 0.05 * (double)run->n) {
        printf("FAIL routing: %zu near ties replayed, above 5%% of the routings\n", rr->replayed);
        fails++;
    }
    return fails;
}

#endif
