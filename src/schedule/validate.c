/* Structural validation of a schedule: what an executor that runs the lists
 * in order relies on, checked without timing, then a simulation for
 * deadlocks and the stash peaks. */
#include <stdlib.h>
#include <string.h>

#include "trident/base.h"
#include "trident/schedule.h"

#define NKIND 8

static const char *kname(td_action_kind k) {
    static const char *names[] = {"FWD",      "BWD",      "BWD_INPUT", "BWD_WEIGHT",
                                  "RECV_ACT", "SEND_ACT", "RECV_GRAD", "SEND_GRAD"};
    return (unsigned)k < NKIND ? names[k] : "?";
}

/* The peer an action must name, or -2 when the action has no place at all
 * (a message to a virtual stage beyond either end, or to this very stage). */
static int expected_peer(const td_schedule *s, int stage, const td_action *a) {
    int P = s->P, VP = P * s->V, v = a->chunk * P + stage;
    switch (a->kind) {
    case TD_A_FWD:
    case TD_A_BWD:
    case TD_A_BWD_INPUT:
    case TD_A_BWD_WEIGHT: return -1;
    case TD_A_RECV_ACT:
    case TD_A_SEND_GRAD: return v > 0 && P > 1 ? (v - 1) % P : -2;
    case TD_A_SEND_ACT:
    case TD_A_RECV_GRAD: return v < VP - 1 && P > 1 ? (v + 1) % P : -2;
    }
    return -2;
}

/* Checks one stage's list; pos is scratch [NKIND][M V]. */
static int check_stage(const td_schedule *s, int st, int *pos, char *err, size_t errlen) {
    int P = s->P, M = s->M, V = s->V, MV = M * V, VP = P * V;
    const td_action *a = s->a[st];
    for (int i = 0; i < NKIND * MV; i++) pos[i] = -1;
    for (int i = 0; i < s->n[st]; i++) {
        if ((unsigned)a[i].kind >= NKIND || a[i].mb < 0 || a[i].mb >= M || a[i].chunk < 0 || a[i].chunk >= V) {
            snprintf(err, errlen, "stage %d action %d: kind %d mb %d chunk %d out of range (M %d, V %d)", st, i,
                     (int)a[i].kind, a[i].mb, a[i].chunk, M, V);
            return -1;
        }
        int want = expected_peer(s, st, &a[i]);
        if (want == -2 || a[i].peer != want) {
            snprintf(err, errlen, "stage %d action %d: %s of mb %d chunk %d %s (peer %d)", st, i, kname(a[i].kind),
                     a[i].mb, a[i].chunk, want == -2 ? "has no peer stage" : "names the wrong peer", a[i].peer);
            return -1;
        }
        int *p = &pos[a[i].kind * MV + a[i].mb * V + a[i].chunk];
        if (*p >= 0) {
            snprintf(err, errlen, "stage %d actions %d and %d: two %s of mb %d chunk %d", st, *p, i,
                     kname(a[i].kind), a[i].mb, a[i].chunk);
            return -1;
        }
        *p = i;
    }
#define POS(k, m, c) pos[(k) * MV + (m) * V + (c)]
    for (int m = 0; m < M; m++)
        for (int c = 0; c < V; c++) {
            int v = c * P + st, f = POS(TD_A_FWD, m, c);
            int b = POS(TD_A_BWD, m, c), bi = POS(TD_A_BWD_INPUT, m, c), bw = POS(TD_A_BWD_WEIGHT, m, c);
            const char *why = NULL;
            if (f < 0) why = "has no FWD";
            else if (!((b >= 0 && bi < 0 && bw < 0) || (b < 0 && bi >= 0 && bw >= 0)))
                why = "needs one BWD, or one BWD_INPUT and one BWD_WEIGHT";
            if (!why) {
                int bb = b >= 0 ? b : bi; /* the backward that consumes the gradient */
                if (bb < f) why = "runs its backward before its forward";
                else if (b < 0 && bw < bi) why = "runs BWD_WEIGHT before BWD_INPUT";
                else if (P > 1 && v > 0 && POS(TD_A_RECV_ACT, m, c) < 0) why = "has no RECV_ACT";
                else if (P > 1 && v > 0 && POS(TD_A_RECV_ACT, m, c) > f) why = "receives its activation after FWD";
                else if (P == 1 && v > 0 && POS(TD_A_FWD, m, c - 1) > f)
                    why = "runs FWD before the previous chunk's FWD";
                else if (P > 1 && v < VP - 1 && POS(TD_A_SEND_ACT, m, c) < 0) why = "has no SEND_ACT";
                else if (P > 1 && v < VP - 1 && POS(TD_A_SEND_ACT, m, c) < f) why = "sends its activation before FWD";
                else if (P > 1 && v < VP - 1 && POS(TD_A_RECV_GRAD, m, c) < 0) why = "has no RECV_GRAD";
                else if (P > 1 && v < VP - 1 && POS(TD_A_RECV_GRAD, m, c) > bb)
                    why = "receives its gradient after the backward";
                else if (P == 1 && v < VP - 1 &&
                         (POS(TD_A_BWD, m, c + 1) >= 0 ? POS(TD_A_BWD, m, c + 1) : POS(TD_A_BWD_INPUT, m, c + 1)) > bb)
                    why = "runs its backward before the next chunk's";
                else if (P > 1 && v > 0 && POS(TD_A_SEND_GRAD, m, c) < 0) why = "has no SEND_GRAD";
                else if (P > 1 && v > 0 && POS(TD_A_SEND_GRAD, m, c) < bb) why = "sends its gradient before the backward";
            }
            if (why) {
                snprintf(err, errlen, "stage %d: mb %d chunk %d %s", st, m, c, why);
                return -1;
            }
        }
#undef POS
    return 0;
}

/* Every channel (src -> dst, kind) carries, in order, what the receiver
 * expects: the k-th SEND matches the k-th RECV. recvs of each stage are
 * bucketed by (peer, kind) so the check is linear in the actions. */
static int check_channels(const td_schedule *s, char *err, size_t errlen) {
    int P = s->P, rc = 0;
    int *cnt = calloc((size_t)P * P * 2, sizeof *cnt), *off = calloc((size_t)P * P * 2 + 1, sizeof *off);
    TD_CHECK(cnt && off, "schedule: out of memory validating %d stages", P);
    size_t total = 0;
    for (int st = 0; st < P; st++) total += (size_t)s->n[st];
    int *idx = malloc((total + 1) * sizeof *idx), *fill = calloc((size_t)P * P * 2, sizeof *fill);
    TD_CHECK(idx && fill, "schedule: out of memory validating %zu actions", total);
    /* channel id: (src * P + dst) * 2 + grad; idx[off[c]..off[c + 1]) are
     * the positions of channel c's receives in dst's list */
    for (int dst = 0; dst < P; dst++)
        for (int i = 0; i < s->n[dst]; i++) {
            const td_action *a = &s->a[dst][i];
            if (a->kind == TD_A_RECV_ACT || a->kind == TD_A_RECV_GRAD)
                cnt[((size_t)a->peer * P + dst) * 2 + (a->kind == TD_A_RECV_GRAD)]++;
        }
    for (int c = 0; c < P * P * 2; c++) off[c + 1] = off[c] + cnt[c];
    for (int dst = 0; dst < P; dst++)
        for (int i = 0; i < s->n[dst]; i++) {
            const td_action *a = &s->a[dst][i];
            if (a->kind == TD_A_RECV_ACT || a->kind == TD_A_RECV_GRAD) {
                int c = (a->peer * P + dst) * 2 + (a->kind == TD_A_RECV_GRAD);
                idx[off[c] + fill[c]++] = i;
            }
        }
    memset(fill, 0, (size_t)P * P * 2 * sizeof *fill);
    for (int src = 0; src < P && !rc; src++)
        for (int i = 0; i < s->n[src] && !rc; i++) {
            const td_action *a = &s->a[src][i];
            if (a->kind != TD_A_SEND_ACT && a->kind != TD_A_SEND_GRAD) continue;
            int grad = a->kind == TD_A_SEND_GRAD, dst = a->peer, c = (src * P + dst) * 2 + grad;
            if (fill[c] == cnt[c]) {
                snprintf(err, errlen, "stage %d action %d: %s of mb %d chunk %d has no matching %s on stage %d", src,
                         i, kname(a->kind), a->mb, a->chunk, grad ? "RECV_GRAD" : "RECV_ACT", dst);
                rc = -1;
                break;
            }
            int j = idx[off[c] + fill[c]++];
            const td_action *r = &s->a[dst][j];
            int vs = a->chunk * P + src, vr = r->chunk * P + dst;
            if (r->mb != a->mb || vr != (grad ? vs - 1 : vs + 1)) {
                snprintf(err, errlen,
                         "channel %d->%d %s out of order: stage %d action %d sends mb %d chunk %d, stage %d action %d "
                         "receives it as mb %d chunk %d",
                         src, dst, grad ? "gradients" : "activations", src, i, a->mb, a->chunk, dst, j, r->mb,
                         r->chunk);
                rc = -1;
            }
        }
    for (int c = 0; c < P * P * 2 && !rc; c++)
        if (fill[c] != cnt[c]) {
            snprintf(err, errlen, "stage %d has %d %s from stage %d that are never sent", c / 2 % P, cnt[c] - fill[c],
                     c % 2 ? "RECV_GRAD" : "RECV_ACT", c / 2 / P);
            rc = -1;
        }
    free(cnt), free(off), free(idx), free(fill);
    return rc;
}

int td_schedule_validate(const td_schedule *s, char *err, size_t errlen) {
    if (s->P < 1 || s->M < 1 || s->V < 1 || !s->n || !s->a || !s->peak) {
        snprintf(err, errlen, "empty schedule (P %d, M %d, V %d)", s->P, s->M, s->V);
        return -1;
    }
    int *pos = malloc((size_t)NKIND * s->M * s->V * sizeof *pos);
    TD_CHECK(pos, "schedule: out of memory validating %d micro-batch-chunks", s->M * s->V);
    int rc = 0;
    for (int st = 0; st < s->P && !rc; st++) rc = check_stage(s, st, pos, err, errlen);
    free(pos);
    if (!rc) rc = check_channels(s, err, errlen);
    if (rc) return rc;
    td_sched_sim sim;
    rc = td_schedule_simulate(s, 1, 1, 1, &sim, err, errlen);
    for (int st = 0; st < s->P && !rc; st++) {
        if (sim.peak[st] != s->peak[st]) {
            snprintf(err, errlen, "stage %d: peak[] says %d in flight, the simulation sees %d", st, s->peak[st],
                     sim.peak[st]);
            rc = -1;
        } else if (s->peak[st] > s->bound) {
            snprintf(err, errlen, "stage %d: %d micro-batch-chunks in flight, over the %s bound %d", st, s->peak[st],
                     td_sched_name(s->kind), s->bound);
            rc = -1;
        }
    }
    td_sched_sim_free(&sim);
    return rc;
}
