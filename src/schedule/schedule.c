/* Pipeline schedules as per-stage action lists. Each builder emits a stage's
 * compute order (FWD / BWD / BWD_INPUT / BWD_WEIGHT of (mb, chunk)); emit()
 * then wraps every compute in the communication it needs, a RECV right
 * before and a SEND right after, so that the lists are complete for an
 * executor that runs them in order. */
#include <stdlib.h>
#include <string.h>

#include "trident/base.h"
#include "trident/compat.h"
#include "trident/schedule.h"

/* Keeps a mistyped --micro-batches from asking for gigabytes of actions. */
#define MAX_COMPUTE (1 << 24)

int td_sched_find(const char *s) {
    if (strcmp(s, "gpipe") == 0) return TD_SCHED_GPIPE;
    if (strcmp(s, "1f1b") == 0) return TD_SCHED_1F1B;
    if (strcmp(s, "interleaved") == 0) return TD_SCHED_INTERLEAVED;
    if (strcmp(s, "zb-h1") == 0) return TD_SCHED_ZBH1;
    return -1;
}

td_sched_kind td_sched_parse(const char *s) {
    int k = td_sched_find(s);
    if (k >= 0) return (td_sched_kind)k;
    td_fail("--schedule '%s' is not a schedule; valid: gpipe, 1f1b, interleaved, zb-h1", s);
}

const char *td_sched_name(td_sched_kind k) {
    switch (k) {
    case TD_SCHED_GPIPE: return "gpipe";
    case TD_SCHED_1F1B: return "1f1b";
    case TD_SCHED_INTERLEAVED: return "interleaved";
    case TD_SCHED_ZBH1: return "zb-h1";
    }
    return "?";
}

/* One stage's list under construction. */
typedef struct {
    const td_schedule *s;
    int stage;
    td_action *a; /* [cap] */
    int n, cap;
} builder;

static void push(builder *b, td_action_kind kind, int mb, int chunk, int peer) {
    TD_ASSERT(b->n < b->cap);
    b->a[b->n++] = (td_action){kind, mb, chunk, peer};
}

/* A compute action with its communication. With P = 1 the neighbouring
 * virtual stages are this stage: no message, the list order is the hand-over. */
static void emit(builder *b, td_action_kind kind, int mb, int chunk) {
    int P = b->s->P, VP = P * b->s->V, v = chunk * P + b->stage;
    int prev = (v + P - 1) % P, next = (v + 1) % P; /* stages of v - 1 and v + 1 */
    int remote = P > 1;
    if (kind == TD_A_FWD && v > 0 && remote) push(b, TD_A_RECV_ACT, mb, chunk, prev);
    if ((kind == TD_A_BWD || kind == TD_A_BWD_INPUT) && v < VP - 1 && remote)
        push(b, TD_A_RECV_GRAD, mb, chunk, next);
    push(b, kind, mb, chunk, -1);
    if (kind == TD_A_FWD && v < VP - 1 && remote) push(b, TD_A_SEND_ACT, mb, chunk, next);
    if ((kind == TD_A_BWD || kind == TD_A_BWD_INPUT) && v > 0 && remote)
        push(b, TD_A_SEND_GRAD, mb, chunk, prev);
}

static int min_i(int a, int b) { return a < b ? a : b; }

static void build_gpipe(builder *b) {
    for (int m = 0; m < b->s->M; m++) emit(b, TD_A_FWD, m, 0);
    for (int m = 0; m < b->s->M; m++) emit(b, TD_A_BWD, m, 0);
}

/* PipeDream-flush: warm-up forwards fill the pipe below this stage, then one
 * forward and one backward alternate, then the remaining backwards drain. */
static void build_1f1b(builder *b) {
    int M = b->s->M, w = min_i(b->s->P - b->stage - 1, M), f = 0, k = 0;
    while (f < w) emit(b, TD_A_FWD, f++, 0);
    while (f < M) {
        emit(b, TD_A_FWD, f++, 0);
        emit(b, TD_A_BWD, k++, 0);
    }
    while (k < M) emit(b, TD_A_BWD, k++, 0);
}

/* ZB-H1: 1f1b's forwards and backwards, the backward being the input-gradient
 * half B only, so the gradient travels up the pipe at tb per stage instead of
 * tb + tw. Stage s holds back its first s weight halves W: it starts with
 * P - s - 1 warm-up forwards, so at most (P - s) + s = P micro-batches are in
 * flight, 1f1b's peak on stage 0. The held-back W fill the cool-down, where
 * 1f1b would wait for gradients. With tw <= min(tf, tb) and M >= P this
 * leaves (P - 1)(tf + tb - tw) idle per stage (the paper's figure). */
static void build_zbh1(builder *b) {
    int M = b->s->M, w = min_i(b->s->P - b->stage - 1, M), held = min_i(b->stage, M);
    int f = 0, k = 0, wk = 0;
    while (f < w) emit(b, TD_A_FWD, f++, 0);
    while (k < M) {
        if (f < M) emit(b, TD_A_FWD, f++, 0);
        emit(b, TD_A_BWD_INPUT, k++, 0);
        if (k - wk > held) emit(b, TD_A_BWD_WEIGHT, wk++, 0);
    }
    while (wk < M) emit(b, TD_A_BWD_WEIGHT, wk++, 0);
}

/* Megatron-LM's warm-up for the interleaved schedule: M == P runs all
 * forwards first; otherwise 2 (P - s - 1) + (V - 1) P, capped at M V. */
static int interleaved_warmup(int P, int M, int V, int stage) {
    if (M == P) return M * V;
    return min_i((P - stage - 1) * 2 + (V - 1) * P, M * V);
}

/* Megatron's get_model_chunk_id: the k-th forward (or backward) of a stage
 * takes micro-batches in groups of P per chunk, chunks ascending for the
 * forward and descending for the backward. */
static void interleaved_id(int P, int V, int k, int forward, int *mb, int *chunk) {
    int in_group = k % (P * V);
    *chunk = forward ? in_group / P : V - 1 - in_group / P;
    *mb = k / (P * V) * P + in_group % P;
}

static void build_interleaved(builder *b) {
    int P = b->s->P, M = b->s->M, V = b->s->V, total = M * V;
    int w = interleaved_warmup(P, M, V, b->stage), mb, c;
    for (int k = 0; k < w; k++) {
        interleaved_id(P, V, k, 1, &mb, &c);
        emit(b, TD_A_FWD, mb, c);
    }
    for (int k = 0; k < total; k++) {
        if (w + k < total) {
            interleaved_id(P, V, w + k, 1, &mb, &c);
            emit(b, TD_A_FWD, mb, c);
        }
        interleaved_id(P, V, k, 0, &mb, &c);
        emit(b, TD_A_BWD, mb, c);
    }
}

static int fail(char *err, size_t errlen, const char *msg) {
    snprintf(err, errlen, "%s", msg);
    return -1;
}

/* The rules table's rows of a schedule (compat.h, TD_COMPAT_AT_SCHEDULE). */
static int compat_ok(td_sched_kind kind, int P, int M, int V, char *msg, size_t n) {
    td_compat_cfg c;
    td_compat_cfg_init(&c);
    c.schedule = kind, c.pp = P, c.micro_batches = M, c.virtual_stages = V;
    c.schedule_name = td_sched_name(kind);
    return td_compat_first(&c, TD_COMPAT_AT_SCHEDULE, msg, n) < 0;
}

int td_schedule_build(td_schedule *s, td_sched_kind kind, int P, int M, int V, char *err, size_t errlen) {
    char msg[256];
    memset(s, 0, sizeof *s);
    if (P < 1) snprintf(msg, sizeof msg, "--pp %d: the pipeline needs at least 1 stage", P);
    else if (M < 1) snprintf(msg, sizeof msg, "--micro-batches %d: a schedule needs at least 1 micro-batch", M);
    else if (!compat_ok(kind, P, M, V, msg, sizeof msg)) {
        /* chunks and micro-batches against the kind: the rules table's */
    } else if ((long long)P * M * V > MAX_COMPUTE)
        snprintf(msg, sizeof msg, "--pp %d x --micro-batches %d x --virtual-stages %d is over %d micro-batch-chunks",
                 P, M, V, MAX_COMPUTE);
    else msg[0] = '\0';
    if (msg[0]) return fail(err, errlen, msg);

    s->kind = kind;
    s->P = P, s->M = M, s->V = V;
    s->n = calloc((size_t)P, sizeof *s->n);
    s->a = calloc((size_t)P, sizeof *s->a);
    s->peak = calloc((size_t)P, sizeof *s->peak);
    TD_CHECK(s->n && s->a && s->peak, "schedule: out of memory for %d stages", P);
    for (int st = 0; st < P; st++) {
        /* per (mb, chunk): at most 3 computes (F, B, W) and 4 messages */
        builder b = {s, st, NULL, 0, 7 * M * V};
        b.a = malloc((size_t)b.cap * sizeof *b.a);
        TD_CHECK(b.a, "schedule: out of memory for %d actions", b.cap);
        switch (kind) {
        case TD_SCHED_GPIPE: build_gpipe(&b); break;
        case TD_SCHED_1F1B: build_1f1b(&b); break;
        case TD_SCHED_INTERLEAVED: build_interleaved(&b); break;
        case TD_SCHED_ZBH1: build_zbh1(&b); break;
        }
        s->a[st] = b.a;
        s->n[st] = b.n;
        int live = 0;
        for (int i = 0; i < b.n; i++) {
            td_action_kind k = b.a[i].kind;
            live += k == TD_A_FWD;
            live -= k == TD_A_BWD || k == TD_A_BWD_WEIGHT;
            if (live > s->peak[st]) s->peak[st] = live;
        }
    }
    switch (kind) {
    case TD_SCHED_GPIPE: s->bound = M; break;
    case TD_SCHED_1F1B:
    case TD_SCHED_ZBH1: s->bound = min_i(M, P); break;
    case TD_SCHED_INTERLEAVED: s->bound = min_i(interleaved_warmup(P, M, V, 0) + 1, M * V); break;
    }
    return 0;
}

void td_schedule_free(td_schedule *s) {
    if (s->a)
        for (int st = 0; st < s->P; st++) free(s->a[st]);
    free(s->a);
    free(s->n);
    free(s->peak);
    memset(s, 0, sizeof *s);
}

double td_schedule_bubble_theory(td_sched_kind kind, int P, int M, int V, double tf, double tb, double tw) {
    switch (kind) {
    case TD_SCHED_GPIPE:
    case TD_SCHED_1F1B: return (double)(P - 1) / M;
    case TD_SCHED_INTERLEAVED: return (double)(P - 1) / ((double)V * M);
    case TD_SCHED_ZBH1: return (P - 1) * (tf + tb - tw) / (M * (tf + tb + tw));
    }
    return 0;
}
