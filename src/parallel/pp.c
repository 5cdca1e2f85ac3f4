/* The pipeline executor: one stage runs its action list (schedule.h) for a
 * step, with nonblocking point-to-point transfers over the grid's pp group.
 *
 * Slots. A micro-batch chunk holds a slot of activations (model.h) from its
 * forward (or the receive of its input) until its backward (zb-h1: its
 * weight-gradient half) is done and the gradient it sent has left. Slots are
 * taken strictly in the order of the action list, by a scan that runs ahead
 * of execution and posts each input receive as soon as a slot is free, so
 * transfers overlap compute; a stage never holds more slots than the
 * schedule's peak.
 *
 * Why it cannot hang when the schedule is valid (td_schedule_validate
 * simulates it): sends never block; a stage blocks only (a) on a receive
 * its list consumes next, which the peer's list sends, and (b) for a slot,
 * on the gradient send of a finished chunk, whose receive the peer posted
 * right after that chunk's forward, before it could have been sent. */
#include <stdlib.h>
#include <string.h>

#include "trident/base.h"
#include "trident/comm.h"
#include "trident/fault.h"
#include "trident/pipeline.h"
#include "trident/timeline.h"
#include "trident/moe.h"

enum { ACT = 0, GRAD = 1 };

typedef struct {
    td_gpt_slot s;
    td_gpt_docs docs;     /* --doc-mask: its micro-batch's document starts (td_gpt_docs_use) */
    int mb, chunk;        /* -1: free */
    int done;             /* its backward (weight half) ran and its input's gradient was sent
                             (or needs none): free once `send` completes */
    int computed, sent;   /* the two halves of done */
    td_request *recv_act, *recv_grad, *send;
} slot;

struct td_pp {
    const td_grid *g;
    td_gpt *m;
    td_dp *dp;
    const td_schedule *sched; /* the one running: `full`, or a ramp's (td_pp_set_micro) */
    const td_schedule *full;  /* td_pp_create's: the slots are sized for it */
    td_schedule **by_m;   /* [M + 1] --batch-rampup's schedules of fewer micro-batches, built on first use */
    td_pp_split sp;
    int P, V, M, s, L;    /* stages, chunks, micro-batches (full's), this stage, layers */
    int n_slots;
    slot *slots;
    int *slot_of;         /* [M*V] slot index of (mb, chunk), -1 none */
    int scan;             /* next action the slot scan looks at */
    int *final_bwd;       /* [n actions] 1: the last backward (weight) action of its chunk */
    int *final_head;      /* [n actions] 1: the last backward action that runs the head */
    double loss;
    td_pp_batch_fn batch;
    void *batch_ctx;
    int *tok_host;        /* [2N] the batch's inputs and targets on the host, uploaded into a slot */
    float dloss;
    td_pp_stats st;
};

/* ---- where things are ---------------------------------------------------- */

static int vstage(const td_pp *pp, int chunk) { return chunk * pp->P + pp->s; }
static int block_lo(const td_pp *pp, int chunk) { return pp->sp.first[vstage(pp, chunk)]; }
static int block_hi(const td_pp *pp, int chunk) { return pp->sp.first[vstage(pp, chunk) + 1]; }
static int is_first(const td_pp *pp, int chunk) { return vstage(pp, chunk) == 0; }
static int is_last(const td_pp *pp, int chunk) { return vstage(pp, chunk) == pp->P * pp->V - 1; }

/* A message's tag: which boundary (the virtual stage that produced the
 * activation), which micro-batch, activation or gradient. */
static int tag_of(const td_pp *pp, int kind, int mb, int producer_v) {
    return 2 * (mb * pp->P * pp->V + producer_v) + kind;
}

static int pp_peer_next(const td_pp *pp) { return (pp->s + 1) % pp->P; }
static int pp_peer_prev(const td_pp *pp) { return (pp->s + pp->P - 1) % pp->P; }

static size_t act_count(const td_pp *pp) { return (size_t)pp->m->d.Ns * (size_t)pp->m->d.C; }
/* Activations and their gradients travel in the model's precision: fp32,
 * or 2-byte elements (p2p moves them unchanged; TD_BF16 names the size). */
static td_dtype act_dtype(const td_pp *pp) { return pp->m->d.lp ? TD_BF16 : TD_F32; }

/* ---- slots --------------------------------------------------------------- */

static int slot_free(slot *sl) {
    if (sl->mb >= 0 && !sl->done) return 0;
    if (td_request_active(sl->send) && !td_test(sl->send)) return 0;
    if (sl->mb >= 0) sl->mb = -1; /* its gradient has left: reusable */
    return 1;
}

/* A free slot for (mb, chunk), or -1; `wait`: block on the oldest finished
 * slot's send instead of failing (see (b) above). */
static int slot_take(td_pp *pp, int mb, int chunk, int wait) {
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < pp->n_slots; i++) {
            slot *sl = &pp->slots[i];
            if (pass == 1 && sl->done && sl->mb >= 0) {
                double t0 = td_now_ms();
                td_wait(sl->send);
                pp->st.wait_ms += td_now_ms() - t0;
            }
            if (slot_free(sl)) {
                sl->mb = mb, sl->chunk = chunk, sl->done = sl->computed = sl->sent = 0;
                pp->slot_of[mb * pp->V + chunk] = i;
                int held = 0;
                for (int k = 0; k < pp->n_slots; k++) held += pp->slots[k].mb >= 0;
                if (held > pp->st.max_inflight) pp->st.max_inflight = held;
                return i;
            }
        }
        if (!wait) return -1;
    }
    TD_ASSERT(!"pipeline: more micro-batches in flight than the schedule's peak");
    return -1;
}

static slot *slot_get(td_pp *pp, int mb, int chunk) {
    int i = pp->slot_of[mb * pp->V + chunk];
    TD_ASSERT(i >= 0);
    return &pp->slots[i];
}

static void post_recv_act(td_pp *pp, slot *sl) {
    int v = vstage(pp, sl->chunk);
    td_recv_start(sl->recv_act, pp->g->axis[TD_PP].comm, sl->s.x, act_count(pp), act_dtype(pp),
                  pp_peer_prev(pp), tag_of(pp, ACT, sl->mb, v - 1));
}

/* Takes slots (and posts input receives) in list order, as far as free
 * slots allow; with `upto` >= 0 it must get at least to that action. */
static void scan(td_pp *pp, int upto) {
    const td_action *a = pp->sched->a[pp->s];
    int n = pp->sched->n[pp->s];
    while (pp->scan < n) {
        const td_action *x = &a[pp->scan];
        int needs = (x->kind == TD_A_RECV_ACT) || (x->kind == TD_A_FWD && is_first(pp, x->chunk));
        if (needs && pp->slot_of[x->mb * pp->V + x->chunk] < 0) {
            int i = slot_take(pp, x->mb, x->chunk, pp->scan <= upto);
            if (i < 0) return;
            if (x->kind == TD_A_RECV_ACT) post_recv_act(pp, &pp->slots[i]);
        }
        pp->scan++;
    }
}

/* ---- unit events (the strategy's hook) ----------------------------------- */

/* MPI moves a large message only while both ends are inside an MPI call:
 * a peer computing a whole chunk would hold a transfer (and the slot whose
 * gradient is leaving) for that long. Every block boundary gives pending
 * transfers a turn. */
static void progress(td_pp *pp) {
    for (int i = 0; i < pp->n_slots; i++) {
        slot *sl = &pp->slots[i];
        if (td_request_active(sl->send)) td_test(sl->send);
        if (td_request_active(sl->recv_act)) td_test(sl->recv_act);
        if (td_request_active(sl->recv_grad)) td_test(sl->recv_grad);
    }
}

static void event(td_pp *pp, td_unit_event ev, int unit) {
    progress(pp);
    if (pp->m->hook) pp->m->hook(pp->m->hook_ctx, ev, unit);
}

/* ---- the actions ----------------------------------------------------------- */

/* Document masking. Every stage's attention needs the micro-batch's
 * document starts, in its forward, backward and recomputation, while other
 * micro-batches run between them: each slot keeps its own (td_gpt_docs),
 * and every stage, middle ones too, reads the micro-batch's tokens itself
 * (the batch is a pure function of its sample index, a host read of B x T
 * tokens), so no starts travel with the activations and no stage waits for
 * them. The slot's buffers are the model's for the slot's actions only (zb-h1's
 * weight half runs no attention and needs none). */
static td_gpt_docs slot_docs(td_pp *pp, slot *sl) { return td_gpt_docs_use(pp->m, sl->docs); }

static void forward(td_pp *pp, slot *sl, int training) {
    td_gpt *m = pp->m;
    int c = sl->chunk, l0 = block_lo(pp, c), l1 = block_hi(pp, c);
    td_gpt_docs own = slot_docs(pp, sl);
    if (is_first(pp, c) || is_last(pp, c) || m->doc_eod >= 0) { /* the batch sets the slot's starts */
        int *in = pp->tok_host, *tg = in + m->d.N;
        pp->batch(pp->batch_ctx, sl->mb, in, tg);
        if (is_first(pp, c) || is_last(pp, c)) td_gpt_upload_tokens(m, sl->s.inputs, in, sl->s.targets, tg);
    }
    if (is_first(pp, c)) {
        event(pp, TD_FWD_BEGIN, 0);
        td_embed_acts e = {sl->s.x};
        td_embed_forward(m, sl->s.inputs, &e);
        event(pp, TD_FWD_END, 0);
    }
    const float *x = sl->s.x;
    for (int l = l0; l < l1; l++) {
        event(pp, TD_FWD_BEGIN, l + 1);
        td_block_forward(m, l, x, &sl->s.blocks[l - l0]);
        x = sl->s.blocks[l - l0].res3;
        event(pp, TD_FWD_END, l + 1);
    }
    if (is_last(pp, c)) {
        int L = pp->L;
        event(pp, TD_FWD_BEGIN, L + 1);
        pp->loss += td_head_forward(m, x, sl->s.targets, &sl->s.head);
        event(pp, TD_FWD_END, L + 1);
    } else if (training) {
        /* the gradient of this output will come back: its receive is posted
         * now, before the peer can send it (see (b) above) */
        td_recv_start(sl->recv_grad, pp->g->axis[TD_PP].comm, sl->s.dx, act_count(pp),
                      act_dtype(pp), pp_peer_next(pp), tag_of(pp, GRAD, sl->mb, vstage(pp, c)));
    }
    td_gpt_docs_use(m, own);
}

static const float *chunk_output(const td_pp *pp, const slot *sl) {
    int n = block_hi(pp, sl->chunk) - block_lo(pp, sl->chunk);
    return sl->s.blocks[n - 1].res3;
}

/* The backward of one chunk: the whole of it, or zb-h1's input half
 * (split), whose block weight gradients wait in the slot's stashes for
 * weight_grads. Unit events for blocks come with their last half, so the
 * strategy sees BWD_END when a unit's gradient of this micro-batch is done. */
static void backward(td_pp *pp, slot *sl, int final, int head_final, int split) {
    td_gpt *m = pp->m;
    int c = sl->chunk, l0 = block_lo(pp, c), l1 = block_hi(pp, c), L = pp->L;
    td_gpt_docs own = slot_docs(pp, sl);
    td_dp_set_final_backward(pp->dp, head_final);
    if (is_last(pp, c)) {
        event(pp, TD_BWD_BEGIN, L + 1);
        td_head_backward(m, chunk_output(pp, sl), sl->s.targets, &sl->s.head, pp->dloss, sl->s.dx);
        event(pp, TD_BWD_END, L + 1);
    }
    td_dp_set_final_backward(pp->dp, final);
    for (int l = l1 - 1; l >= l0; l--) {
        const float *x = l > l0 ? sl->s.blocks[l - l0 - 1].res3 : sl->s.x;
        if (split) {
            td_block_backward_input(m, l, x, &sl->s.blocks[l - l0], sl->s.dx, &sl->s.w[l - l0]);
            continue;
        }
        event(pp, TD_BWD_BEGIN, l + 1);
        const td_block_acts *a = &sl->s.blocks[l - l0];
        if (sl->s.shape.recompute) { /* the slot kept the output only: rebuild the rest */
            td_gpt_recompute_block(m, l, x, &m->rc_set);
            a = &m->rc_set;
        }
        td_block_backward(m, l, x, a, sl->s.dx);
        event(pp, TD_BWD_END, l + 1);
    }
    /* the embedding's gradient (unit 0) is final only after the embedding
     * group's sum: its BWD_END comes at the end of the step */
    if (is_first(pp, c)) td_embed_backward(m, sl->s.inputs, sl->s.dx);
    td_dp_set_final_backward(pp->dp, 0);
    td_gpt_docs_use(m, own);
}

/* zb-h1's weight half of a chunk's backward. */
static void weight_grads(td_pp *pp, slot *sl, int final) {
    int l0 = block_lo(pp, sl->chunk), l1 = block_hi(pp, sl->chunk);
    td_dp_set_final_backward(pp->dp, final);
    for (int l = l1 - 1; l >= l0; l--) {
        event(pp, TD_BWD_BEGIN, l + 1);
        td_block_backward_weight(pp->m, l, &sl->s.blocks[l - l0], &sl->s.w[l - l0]);
        event(pp, TD_BWD_END, l + 1);
    }
    td_dp_set_final_backward(pp->dp, 0);
}

static void send(td_pp *pp, slot *sl, int kind) {
    int v = vstage(pp, sl->chunk);
    if (kind == ACT)
        td_send_start(sl->send, pp->g->axis[TD_PP].comm, chunk_output(pp, sl), act_count(pp),
                      act_dtype(pp), pp_peer_next(pp), tag_of(pp, ACT, sl->mb, v));
    else
        td_send_start(sl->send, pp->g->axis[TD_PP].comm, sl->s.dx, act_count(pp), act_dtype(pp),
                      pp_peer_prev(pp), tag_of(pp, GRAD, sl->mb, v - 1));
}

static void wait_recv(td_pp *pp, td_request *r, const char *what, int mb, int chunk) {
    double t0 = td_now_ms(), u0 = td_timeline_enabled() ? td_timeline_now_us() : 0;
    td_wait(r);
    pp->st.wait_ms += td_now_ms() - t0;
    if (td_timeline_enabled()) td_timeline_add(what, "p2p", u0, td_timeline_now_us(), mb, chunk);
}

/* --trace: one event per compute action, "F mb k" / "B mb k" / "W mb k"
 * (with the chunk when there are several): the lanes draw the schedule. */
static void trace_compute(const td_pp *pp, const char *what, const td_action *x, double u0) {
    if (!td_timeline_enabled()) return;
    char name[48];
    if (pp->V > 1)
        snprintf(name, sizeof name, "%s mb %d chunk %d", what, x->mb, x->chunk);
    else
        snprintf(name, sizeof name, "%s mb %d", what, x->mb);
    td_timeline_add(name, "compute", u0, td_timeline_now_us(), x->mb, x->chunk);
}

static void run_action(td_pp *pp, int i) {
    const td_action *x = &pp->sched->a[pp->s][i];
    scan(pp, i);
    double t0 = td_now_ms(), u0 = td_timeline_enabled() ? td_timeline_now_us() : 0;
    switch (x->kind) {
    case TD_A_RECV_ACT:
        wait_recv(pp, slot_get(pp, x->mb, x->chunk)->recv_act, "wait activation", x->mb, x->chunk);
        return;
    case TD_A_RECV_GRAD:
        wait_recv(pp, slot_get(pp, x->mb, x->chunk)->recv_grad, "wait gradient", x->mb, x->chunk);
        return;
    case TD_A_SEND_ACT:
    case TD_A_SEND_GRAD: {
        slot *sl = slot_get(pp, x->mb, x->chunk);
        /* the activation's send has completed by the time the gradient is
         * back (the peer received it before computing that gradient) */
        if (td_request_active(sl->send)) td_wait(sl->send);
        send(pp, sl, x->kind == TD_A_SEND_ACT ? ACT : GRAD);
        if (x->kind == TD_A_SEND_GRAD) {
            sl->sent = 1;
            sl->done = sl->computed;
        }
        pp->st.send_ms += td_now_ms() - t0;
        return;
    }
    case TD_A_FWD:
        forward(pp, slot_get(pp, x->mb, x->chunk), 1);
        pp->st.fwd_ms += td_now_ms() - t0;
        trace_compute(pp, "F", x, u0);
        break;
    case TD_A_BWD:
    case TD_A_BWD_INPUT: {
        slot *sl = slot_get(pp, x->mb, x->chunk);
        int split = x->kind == TD_A_BWD_INPUT;
        backward(pp, sl, pp->final_bwd[i], pp->final_head[i], split);
        sl->computed = !split;
        sl->sent |= is_first(pp, sl->chunk); /* the first chunk's gradient goes nowhere */
        sl->done = sl->sent && sl->computed;
        pp->st.bwd_ms += td_now_ms() - t0;
        trace_compute(pp, "B", x, u0);
        break;
    }
    case TD_A_BWD_WEIGHT: {
        slot *sl = slot_get(pp, x->mb, x->chunk);
        weight_grads(pp, sl, pp->final_bwd[i]);
        sl->computed = 1;
        sl->done = sl->sent;
        pp->st.wgrad_ms += td_now_ms() - t0;
        trace_compute(pp, "W", x, u0);
        break;
    }
    }
    pp->st.compute_ms += td_now_ms() - t0;
}

/* ---- create / step ----------------------------------------------------------- */

/* A unit's gradient is final after the last backward (zb-h1: weight)
 * action of its chunk; the head's after the last that runs the head: marked
 * in the running schedule's list. */
static void mark_finals(td_pp *pp) {
    const td_schedule *sched = pp->sched;
    int n = sched->n[pp->s];
    td_free(pp->final_bwd);
    td_free(pp->final_head);
    pp->final_bwd = td_alloc(sizeof(int) * (size_t)(n > 0 ? n : 1), TD_MEM_OTHER);
    pp->final_head = td_alloc(sizeof(int) * (size_t)(n > 0 ? n : 1), TD_MEM_OTHER);
    memset(pp->final_bwd, 0, sizeof(int) * (size_t)(n > 0 ? n : 1));
    memset(pp->final_head, 0, sizeof(int) * (size_t)(n > 0 ? n : 1));
    for (int c = 0; c < pp->V; c++) {
        int last = -1, last_head = -1;
        for (int i = 0; i < n; i++) {
            const td_action *x = &sched->a[pp->s][i];
            if (x->chunk != c) continue;
            if (x->kind == TD_A_BWD || x->kind == TD_A_BWD_WEIGHT) last = i;
            if (x->kind == TD_A_BWD || x->kind == TD_A_BWD_INPUT) last_head = i;
        }
        if (last >= 0) pp->final_bwd[last] = 1;
        if (last_head >= 0 && is_last(pp, c)) pp->final_head[last_head] = 1;
    }
}

td_pp *td_pp_create(const td_grid *g, td_gpt *model, td_dp *dp, const td_schedule *sched,
                    const td_pp_split *sp) {
    td_pp *pp = td_alloc(sizeof *pp, TD_MEM_OTHER);
    memset(pp, 0, sizeof *pp);
    pp->g = g, pp->m = model, pp->dp = dp, pp->sched = pp->full = sched, pp->sp = *sp;
    pp->P = sched->P, pp->V = sched->V, pp->M = sched->M, pp->s = g->axis[TD_PP].rank,
    pp->L = model->cfg.L;
    TD_ASSERT(pp->P == g->axis[TD_PP].size && sp->P == pp->P && sp->V == pp->V);
    /* a forward-only model runs td_pp_forward_only alone: one chunk at a time */
    pp->n_slots = model->use == TD_GPT_FORWARD ? 1 : sched->peak[pp->s];
    pp->st.stage = pp->s;
    pp->slots = td_alloc(sizeof(slot) * (size_t)pp->n_slots, TD_MEM_OTHER);
    td_slot_shape sh = td_pp_slot_shape(sp, sched, pp->s);
    sh.recompute = model->recompute == TD_RECOMPUTE_BLOCK;
    td_pp_slot_shape_use(&sh, model->use);
    TD_ASSERT(!sh.recompute || !sh.wstash); /* refused with zb-h1 (options.c) */
    for (int i = 0; i < pp->n_slots; i++) {
        slot *sl = &pp->slots[i];
        td_gpt_slot_create(&sl->s, model, &sh);
        td_gpt_docs_create(&sl->docs, model); /* after td_gpt_doc_mask (run.c) */
        sl->mb = sl->chunk = -1;
        sl->recv_act = td_request_new();
        sl->recv_grad = td_request_new();
        sl->send = td_request_new();
    }
    pp->slot_of = td_alloc(sizeof(int) * (size_t)(pp->M * pp->V), TD_MEM_OTHER);
    pp->tok_host = td_alloc(2 * sizeof(int) * (size_t)model->d.N, TD_MEM_OTHER);
    memset(pp->tok_host, 0, 2 * sizeof(int) * (size_t)model->d.N);
    mark_finals(pp);
    return pp;
}

void td_pp_destroy(td_pp *pp) {
    if (!pp) return;
    for (int i = 0; i < pp->n_slots; i++) {
        slot *sl = &pp->slots[i];
        td_gpt_slot_destroy(&sl->s);
        td_gpt_docs_destroy(&sl->docs);
        td_request_free(sl->recv_act);
        td_request_free(sl->recv_grad);
        td_request_free(sl->send);
    }
    td_free(pp->slots);
    td_free(pp->slot_of);
    td_free(pp->tok_host);
    td_free(pp->final_bwd);
    td_free(pp->final_head);
    for (int m = 0; pp->by_m && m <= pp->M; m++)
        if (pp->by_m[m]) td_schedule_free(pp->by_m[m]), free(pp->by_m[m]);
    td_free(pp->by_m);
    td_free(pp);
}

void td_pp_set_micro(td_pp *pp, int n_micro) {
    TD_ASSERT(n_micro >= 1 && n_micro <= pp->M);
    if (n_micro == pp->sched->M) return;
    if (n_micro == pp->M) {
        pp->sched = pp->full;
    } else {
        if (!pp->by_m) {
            pp->by_m = td_alloc(sizeof(td_schedule *) * (size_t)(pp->M + 1), TD_MEM_OTHER);
            memset(pp->by_m, 0, sizeof(td_schedule *) * (size_t)(pp->M + 1));
        }
        if (!pp->by_m[n_micro]) {
            td_schedule *s = malloc(sizeof *s);
            char err[512];
            TD_CHECK(s, "pipeline: out of memory for the schedule of %d micro-batches", n_micro);
            /* the rules table's rampup rows made every size a valid count */
            TD_CHECK(td_schedule_build(s, pp->full->kind, pp->P, n_micro, pp->V, err, sizeof err) == 0,
                     "--batch-rampup: %s", err);
            TD_CHECK(td_schedule_validate(s, err, sizeof err) == 0, "internal: the %s schedule of %d micro-batches "
                     "is invalid: %s", td_sched_name(s->kind), n_micro, err);
            pp->by_m[n_micro] = s;
        }
        pp->sched = pp->by_m[n_micro];
    }
    /* the slots (and the memory plan) are the full schedule's: fewer
     * micro-batches never hold more in flight */
    TD_CHECK(pp->sched->peak[pp->s] <= pp->n_slots, "internal: the %s schedule of %d micro-batches holds %d in flight "
             "on stage %d, over the %d slots of %d", td_sched_name(pp->sched->kind), n_micro,
             pp->sched->peak[pp->s], pp->s, pp->n_slots, pp->M);
    mark_finals(pp);
}

static void begin(td_pp *pp, td_pp_batch_fn batch, void *ctx) {
    pp->batch = batch, pp->batch_ctx = ctx;
    pp->loss = 0.0;
    pp->scan = 0;
    for (int i = 0; i < pp->M * pp->V; i++) pp->slot_of[i] = -1;
    for (int i = 0; i < pp->n_slots; i++) pp->slots[i].mb = -1;
}

/* Every send has left (its receive was posted by a peer still running). */
static void drain(td_pp *pp) {
    double t0 = td_now_ms();
    for (int i = 0; i < pp->n_slots; i++)
        if (td_request_active(pp->slots[i].send)) td_wait(pp->slots[i].send);
    pp->st.send_ms += td_now_ms() - t0;
}

double td_pp_train_step(td_pp *pp, int step, float dloss, td_pp_batch_fn batch, void *ctx) {
    TD_ASSERT(pp->m->use == TD_GPT_TRAIN); /* a forward-only stage has one slot, no dx */
    double t0 = td_now_ms();
    begin(pp, batch, ctx);
    pp->dloss = dloss;
    td_gpt_set_dloss(pp->m, dloss);
    td_dp_begin_pipeline(pp->dp);
    int n = pp->sched->n[pp->s];
    for (int i = 0, fired = 0; i < n; i++) {
        td_action_kind k = pp->sched->a[pp->s][i].kind;
        if (!fired && (k == TD_A_BWD || k == TD_A_BWD_INPUT)) { /* test faults kill / stop: */
            fired = 1; /* between the stage's first forward and its first backward */
            td_fault_signal_at(step, pp->g->world_rank);
        }
        run_action(pp, i);
    }
    drain(pp);
    /* a stage's step lasts until the pipeline has flushed (the global norm
     * waits for every stage): the longest stage's time, all stages having
     * started together after the previous step's pp-wide reductions */
    float ms = (float)(td_now_ms() - t0);
    pp->st.own_ms += ms;
    td_allreduce(pp->g->axis[TD_PP].comm, &ms, 1, TD_F32, TD_MAX);
    pp->st.step_ms += ms;
    pp->st.steps++;
    /* the tied embedding: first and last stage sum their gradients, then it
     * is final and its data-parallel reduction may start (untied: the first
     * stage alone holds it) */
    const td_param_table *t = pp->m->table;
    if (t->held[0]) {
        event(pp, TD_BWD_BEGIN, 0);
        if (pp->g->embed_comm && td_gpt_tied(&pp->m->cfg) && !td_fault_at(TD_FAULT_SKIP_EMBED_SUM, step, -1))
            td_allreduce(pp->g->embed_comm, pp->m->unit_grads[0], td_unit_numel(t, 0), TD_F32, TD_SUM);
        td_dp_set_final_backward(pp->dp, 1);
        event(pp, TD_BWD_END, 0);
        td_dp_set_final_backward(pp->dp, 0);
    }
    return pp->loss;
}

double td_pp_forward_only(td_pp *pp, int n_micro, td_pp_batch_fn batch, void *ctx) {
    begin(pp, batch, ctx);
    slot *sl = &pp->slots[0];
    td_comm *c = pp->g->axis[TD_PP].comm;
    for (int mb = 0; mb < n_micro; mb++)
        for (int ch = 0; ch < pp->V; ch++) {
            int v = vstage(pp, ch);
            sl->mb = mb, sl->chunk = ch;
            if (!is_first(pp, ch))
                td_recv(c, sl->s.x, act_count(pp), act_dtype(pp), pp_peer_prev(pp), tag_of(pp, ACT, mb, v - 1));
            forward(pp, sl, 0);
            if (!is_last(pp, ch))
                td_send(c, chunk_output(pp, sl), act_count(pp), act_dtype(pp), pp_peer_next(pp), tag_of(pp, ACT, mb, v));
        }
    sl->mb = -1;
    return pp->loss;
}

const float *td_pp_head_losses(const td_pp *pp) {
    return is_last(pp, pp->V - 1) ? pp->slots[0].s.head.losses : NULL; /* forward-only: slot 0 alone */
}

void td_pp_stats_get(const td_pp *pp, td_pp_stats *s) { *s = pp->st; }
void td_pp_stats_reset(td_pp *pp) {
    int keep = pp->st.max_inflight;
    memset(&pp->st, 0, sizeof pp->st);
    pp->st.stage = pp->s;
    pp->st.max_inflight = keep; /* a high-water mark over the whole run */
}
