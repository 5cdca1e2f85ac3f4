/* The timing simulation and the structural validator of schedules. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "trident/base.h"
#include "trident/schedule.h"

static const char *kind_name(td_action_kind k) {
    static const char *names[] = {"FWD",      "BWD",      "BWD_INPUT", "BWD_WEIGHT",
                                  "RECV_ACT", "SEND_ACT", "RECV_GRAD", "SEND_GRAD"};
    return (unsigned)k < 8 ? names[k] : "?";
}

static int is_compute(td_action_kind k) { return k <= TD_A_BWD_WEIGHT; }

/* "stage 2 action 7 (RECV_ACT mb 3 chunk 0 peer 1)" */
static void describe(char *buf, size_t len, int stage, int i, const td_action *a) {
    snprintf(buf, len, "stage %d action %d (%s mb %d chunk %d peer %d)", stage, i, kind_name(a->kind), a->mb,
             a->chunk, a->peer);
}

/* Messages sent on one channel (src -> dst, activations or gradients), in
 * send order; the k-th receive on the channel takes the k-th. */
typedef struct {
    double *t;      /* [cap] time each message was sent */
    int *mb, *vs;   /* [cap] its micro-batch and the virtual stage it is for */
    int sent, taken, cap;
} channel;

static channel *chan(channel *ch, int P, int src, int dst, int grad) {
    return &ch[((size_t)src * P + dst) * 2 + grad];
}

static double duration(td_action_kind k, double tf, double tb, double tw) {
    switch (k) {
    case TD_A_FWD: return tf;
    case TD_A_BWD: return tb + tw;
    case TD_A_BWD_INPUT: return tb;
    case TD_A_BWD_WEIGHT: return tw;
    default: return 0;
    }
}

int td_schedule_simulate(const td_schedule *s, double tf, double tb, double tw, td_sched_sim *out,
                         char *err, size_t errlen) {
    int P = s->P;
    TD_ASSERT(isfinite(tf) && isfinite(tb) && isfinite(tw) && tf > 0 && tb > 0 && tw >= 0);
    memset(out, 0, sizeof *out);
    out->busy = calloc((size_t)P, sizeof *out->busy);
    out->end = calloc((size_t)P, sizeof *out->end);
    out->peak = calloc((size_t)P, sizeof *out->peak);
    out->start = calloc((size_t)P, sizeof *out->start);
    int *next = calloc((size_t)P, sizeof *next), *live = calloc((size_t)P, sizeof *live);
    channel *ch = calloc((size_t)P * P * 2, sizeof *ch);
    TD_CHECK(out->busy && out->end && out->peak && out->start && next && live && ch,
             "schedule: out of memory simulating %d stages", P);
    /* one block for all stages, so that freeing needs no P */
    size_t total = 1;
    for (int st = 0; st < P; st++) total += (size_t)s->n[st];
    out->start[0] = calloc(total, sizeof **out->start);
    TD_CHECK(out->start[0], "schedule: out of memory simulating %zu actions", total);
    for (int st = 1; st < P; st++) out->start[st] = out->start[st - 1] + s->n[st - 1];
    int rc = 0;
    char what[160];
    /* Every stage runs as far as it can; a pass that moves nothing with work
     * left is a deadlock. A stage's times depend only on its list and the
     * send times it waits for, so the visiting order does not matter. */
    for (int moved = 1; moved && !rc;) {
        moved = 0;
        for (int st = 0; st < P && !rc; st++) {
            double *clock = &out->end[st];
            for (; next[st] < s->n[st]; next[st]++) {
                int i = next[st];
                const td_action *a = &s->a[st][i];
                int v = a->chunk * P + st;
                if (a->kind == TD_A_RECV_ACT || a->kind == TD_A_RECV_GRAD) {
                    int grad = a->kind == TD_A_RECV_GRAD;
                    if (a->peer < 0 || a->peer >= P) {
                        describe(what, sizeof what, st, i, a);
                        snprintf(err, errlen, "%s: peer out of range", what);
                        rc = -1;
                        break;
                    }
                    channel *c = chan(ch, P, a->peer, st, grad);
                    if (c->taken == c->sent) break; /* blocks */
                    int k = c->taken++;
                    if (c->mb[k] != a->mb || c->vs[k] != v) {
                        describe(what, sizeof what, st, i, a);
                        snprintf(err, errlen, "%s receives the message for mb %d virtual stage %d", what,
                                 c->mb[k], c->vs[k]);
                        rc = -1;
                        break;
                    }
                    if (c->t[k] > *clock) *clock = c->t[k];
                    out->start[st][i] = *clock;
                } else if (a->kind == TD_A_SEND_ACT || a->kind == TD_A_SEND_GRAD) {
                    int grad = a->kind == TD_A_SEND_GRAD;
                    if (a->peer < 0 || a->peer >= P) {
                        describe(what, sizeof what, st, i, a);
                        snprintf(err, errlen, "%s: peer out of range", what);
                        rc = -1;
                        break;
                    }
                    channel *c = chan(ch, P, st, a->peer, grad);
                    if (c->sent == c->cap) {
                        c->cap = c->cap ? 2 * c->cap : 16;
                        c->t = realloc(c->t, c->cap * sizeof *c->t);
                        c->mb = realloc(c->mb, c->cap * sizeof *c->mb);
                        c->vs = realloc(c->vs, c->cap * sizeof *c->vs);
                        TD_CHECK(c->t && c->mb && c->vs, "schedule: out of memory for %d messages", c->cap);
                    }
                    c->t[c->sent] = *clock;
                    c->mb[c->sent] = a->mb;
                    c->vs[c->sent++] = grad ? v - 1 : v + 1; /* the receiver's virtual stage */
                    out->start[st][i] = *clock;
                } else if (is_compute(a->kind)) {
                    double d = duration(a->kind, tf, tb, tw);
                    out->start[st][i] = *clock;
                    *clock += d;
                    out->busy[st] += d;
                    live[st] += a->kind == TD_A_FWD;
                    live[st] -= a->kind == TD_A_BWD || a->kind == TD_A_BWD_WEIGHT;
                    if (live[st] > out->peak[st]) out->peak[st] = live[st];
                } else {
                    describe(what, sizeof what, st, i, a);
                    snprintf(err, errlen, "%s: unknown action kind", what);
                    rc = -1;
                    break;
                }
                moved = 1;
            }
        }
    }
    for (int st = 0; st < P && !rc; st++)
        if (next[st] < s->n[st]) {
            describe(what, sizeof what, st, next[st], &s->a[st][next[st]]);
            snprintf(err, errlen, "deadlock: %s blocks, and so does every other unfinished stage", what);
            rc = -1;
        }
    for (int c = 0; c < P * P * 2 && !rc; c++)
        if (ch[c].taken != ch[c].sent) {
            snprintf(err, errlen, "stage %d sends %d %s messages to stage %d that are never received",
                     c / 2 / P, ch[c].sent - ch[c].taken, c % 2 ? "gradient" : "activation", c / 2 % P);
            rc = -1;
        }
    if (!rc) {
        out->ok = 1;
        for (int st = 0; st < P; st++)
            if (out->end[st] > out->makespan) out->makespan = out->end[st];
        for (int st = 0; st < P; st++)
            out->bubble += (out->makespan - out->busy[st]) / out->busy[st] / P;
    }
    for (int c = 0; c < P * P * 2; c++) free(ch[c].t), free(ch[c].mb), free(ch[c].vs);
    free(ch);
    free(next);
    free(live);
    return rc;
}

void td_sched_sim_free(td_sched_sim *r) {
    if (r->start) free(r->start[0]);
    free(r->busy);
    free(r->end);
    free(r->peak);
    free(r->start);
    memset(r, 0, sizeof *r);
}
