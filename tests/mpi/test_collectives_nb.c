/* Overlapping nonblocking requests: several collectives in flight on two
 * groups, waited on in a different order on every rank (pieces must still be
 * issued in start order per group); a blocking call while requests are
 * pending on its group; receives from any source; two messages with the same
 * tag arriving in order. Same data and exactness argument as
 * test_collectives.c. */
#include <stdio.h>
#include <string.h>

#include "test_collectives.h"
#include "trident/base.h"
#include "trident/comm.h"

enum { NREQ = 8 };

typedef struct {
    const char *what;
    td_comm *c;
    td_dtype dt;
    size_t count; /* per-rank count */
    /* 0 allreduce sum, 1 allreduce max, 2 all_gather, 3 reduce_scatter, 4 bcast, 5 reduce */
    int kind;
    int root;
    void *in, *out;
    td_request *q;
} job;

static int wr(td_comm *c, int r) { return td_comm_world_rank_of(c, r); }

static void job_start(job *j, int salt) {
    int me = td_comm_rank(j->c), n = td_comm_size(j->c);
    size_t all = j->count * (size_t)n;
    j->in = databuf(all);
    j->out = databuf(all);
    j->q = td_request_new();
    fill(j->in, j->dt, all, wr(j->c, me), salt, 0);
    switch (j->kind) {
    case 0:
        td_allreduce_start(j->q, j->c, j->in, j->count, j->dt, TD_SUM);
        break;
    case 1:
        td_allreduce_start(j->q, j->c, j->in, j->count, j->dt, TD_MAX);
        break;
    case 2:
        td_all_gather_start(j->q, j->c, j->in, j->out, j->count, j->dt);
        break;
    case 3:
        td_reduce_scatter_start(j->q, j->c, j->in, j->out, j->count, j->dt);
        break;
    case 4:
        td_broadcast_start(j->q, j->c, j->in, j->count, j->dt, j->root);
        break;
    case 5:
        td_reduce_start(j->q, j->c, j->in, j->count, j->dt, j->root);
        break;
    }
}

static void job_check(job *j, int salt) {
    int me = td_comm_rank(j->c), n = td_comm_size(j->c);
    size_t cnt = j->count, total = j->kind == 2 ? cnt * (size_t)n : cnt;
    float *w = wantbuf(total);
    for (size_t i = 0; i < total; i++) {
        float acc = 0;
        switch (j->kind) {
        case 0:
        case 5:
            for (int r = 0; r < n; r++) acc += v(wr(j->c, r), i, salt);
            if (j->kind == 5 && me != j->root) acc = v(wr(j->c, me), i, salt);
            break;
        case 1:
            acc = -1e30f;
            for (int r = 0; r < n; r++) {
                float y = v(wr(j->c, r), i, salt);
                if (y > acc) acc = y;
            }
            break;
        case 2:
            acc = v(wr(j->c, (int)(i / cnt)), i % cnt, salt);
            break;
        case 3:
            for (int r = 0; r < n; r++) acc += v(wr(j->c, r), (size_t)me * cnt + i, salt);
            break;
        case 4:
            acc = v(wr(j->c, j->root), i, salt);
            break;
        }
        w[i] = acc;
    }
    const void *got = (j->kind == 2 || j->kind == 3) ? j->out : j->in;
    expect(j->what, j->dt, cnt, got, w, total);
    td_free(w), td_free(j->in), td_free(j->out), td_request_free(j->q);
}

static void t_many_in_flight(td_comm *w, td_comm *h) {
    int n = td_comm_size(w);
    job jobs[NREQ] = {
        {.what = "overlap allreduce sum",
         .c = w,
         .dt = TD_F32,
         .count = 3584,
         .kind = 0,
         .root = 0},
        {.what = "overlap allreduce max",
         .c = w,
         .dt = TD_BF16,
         .count = 2049,
         .kind = 1,
         .root = 0},
        {.what = "overlap allreduce on half",
         .c = h,
         .dt = TD_F32,
         .count = 5000,
         .kind = 0,
         .root = 0},
        {.what = "overlap all_gather", .c = w, .dt = TD_F32, .count = 1025, .kind = 2, .root = 0},
        {.what = "overlap reduce_scatter",
         .c = w,
         .dt = TD_BF16,
         .count = 777,
         .kind = 3,
         .root = 0},
        {.what = "overlap bf16 sum on half",
         .c = h,
         .dt = TD_BF16,
         .count = 2500,
         .kind = 0,
         .root = 0},
        {.what = "overlap broadcast",
         .c = w,
         .dt = TD_F32,
         .count = 3000,
         .kind = 4,
         .root = n - 1},
        {.what = "overlap reduce", .c = w, .dt = TD_BF16, .count = 2500, .kind = 5, .root = 0},
    };
    for (int k = 0; k < NREQ; k++) job_start(&jobs[k], 900 + k);
    /* Every rank waits in its own order (3 is coprime with NREQ), half of
     * them by polling td_test. */
    for (int k = 0; k < NREQ; k++) {
        job *j = &jobs[(k * 3 + R) % NREQ];
        if (k % 2)
            while (!td_test(j->q)) {
            }
        else
            td_wait(j->q);
        TD_CHECK(!td_request_active(j->q) && td_test(j->q), "request still active after wait");
    }
    for (int k = 0; k < NREQ; k++) job_check(&jobs[k], 900 + k);
}

/* A blocking call on a group with a request still issuing pieces there. */
static void t_blocking_behind_request(td_comm *w, td_comm *h) {
    job a = {.what = "request before blocking",
             .c = w,
             .dt = TD_F32,
             .count = 7000,
             .kind = 0,
             .root = 0};
    job b = {.what = "request on half", .c = h, .dt = TD_BF16, .count = 3000, .kind = 0, .root = 0};
    job_start(&a, 70);
    job_start(&b, 71);
    size_t cnt = 3001;
    float *x = databuf(cnt), *want = wantbuf(cnt);
    fill(x, TD_F32, cnt, R, 72, 0);
    for (size_t i = 0; i < cnt; i++) {
        want[i] = 0;
        for (int r = 0; r < N; r++) want[i] += v(r, i, 72);
    }
    td_allreduce(w, x, cnt, TD_F32, TD_SUM);
    expect("blocking behind request", TD_F32, cnt, x, want, cnt);
    td_wait(b.q);
    job_check(&b, 71);
    td_wait(a.q);
    job_check(&a, 70);
    td_free(x), td_free(want);
}

/* Rank 0 receives one message from every other rank, from any source; the
 * sizes differ per sender so a mix-up shows. */
static void t_any_source(td_comm *w) {
    int me = td_comm_rank(w), n = td_comm_size(w);
    size_t maxc = 100 * (size_t)n + 5;
    if (me != 0) {
        size_t cnt = 100 * (size_t)me + 5;
        float *s = databuf(cnt);
        fill(s, TD_F32, cnt, me, 80, 0);
        td_request *q = td_request_new();
        td_send_start(q, w, s, cnt, TD_F32, 0, 7);
        td_wait(q);
        td_request_free(q), td_free(s);
        return;
    }
    td_request *q[64];
    float *buf[64];
    int seen[64] = {0};
    TD_CHECK(n <= 64, "test supports up to 64 ranks");
    for (int k = 1; k < n; k++) {
        buf[k] = databuf(maxc);
        q[k] = td_request_new();
        td_recv_start(q[k], w, buf[k], maxc, TD_F32, TD_ANY_SOURCE, 7);
    }
    for (int k = n - 1; k >= 1; k--) {
        td_wait(q[k]);
        int src = td_request_source(q[k]);
        TD_CHECK(src >= 1 && src < n && !seen[src], "any-source recv: bad or repeated source %d",
                 src);
        seen[src] = 1;
        size_t cnt = 100 * (size_t)src + 5;
        float *want = wantbuf(cnt);
        for (size_t i = 0; i < cnt; i++) want[i] = v(src, i, 80);
        expect("recv from any source", TD_F32, cnt, buf[k], want, cnt);
        td_free(want), td_free(buf[k]), td_request_free(q[k]);
    }
}

/* Two messages, same peer and tag: the first receive gets the first message
 * even when the second receive is waited on first. */
static void t_same_tag_order(td_comm *w) {
    int me = td_comm_rank(w), n = td_comm_size(w);
    int next = (me + 1) % n, prev = (me + n - 1) % n;
    size_t cnt = 5000;
    float *s1 = databuf(cnt), *s2 = databuf(cnt), *r1 = databuf(cnt), *r2 = databuf(cnt);
    fill(s1, TD_F32, cnt, me, 91, 0);
    fill(s2, TD_F32, cnt, me, 92, 0);
    td_request *q[4];
    for (int k = 0; k < 4; k++) q[k] = td_request_new();
    td_recv_start(q[0], w, r1, cnt, TD_F32, prev, 9);
    td_recv_start(q[1], w, r2, cnt, TD_F32, prev, 9);
    td_send_start(q[2], w, s1, cnt, TD_F32, next, 9);
    td_send_start(q[3], w, s2, cnt, TD_F32, next, 9);
    for (int k = 3; k >= 0; k--) td_wait(q[k]);
    float *want = wantbuf(cnt);
    for (size_t i = 0; i < cnt; i++) want[i] = v(prev, i, 91);
    expect("same-tag first message", TD_F32, cnt, r1, want, cnt);
    for (size_t i = 0; i < cnt; i++) want[i] = v(prev, i, 92);
    expect("same-tag second message", TD_F32, cnt, r2, want, cnt);
    for (int k = 0; k < 4; k++) td_request_free(q[k]);
    td_free(s1), td_free(s2), td_free(r1), td_free(r2), td_free(want);
}

/* More all-reduces in flight inside one shared buffer than the direct path
 * has descriptor slots (64): starting the 65th must wait for the oldest,
 * not fail or reuse a slot still read. Waited on newest first. */
static void t_deep_shared(td_comm *c, int salt) {
    enum { NOPS = 100, LEN = 37 };
    int n = td_comm_size(c);
    float *sh = td_comm_alloc_shared(c, NOPS * LEN * sizeof(float), TD_MEM_OTHER);
    float *w = wantbuf(NOPS * LEN);
    td_request *q[NOPS];
    fill(sh, TD_F32, NOPS * LEN, wr(c, td_comm_rank(c)), salt, 0);
    for (size_t i = 0; i < NOPS * LEN; i++) {
        w[i] = 0;
        for (int r = 0; r < n; r++) w[i] += v(wr(c, r), i, salt);
    }
    for (int k = 0; k < NOPS; k++) {
        q[k] = td_request_new();
        td_allreduce_start(q[k], c, sh + k * LEN, LEN, TD_F32, TD_SUM);
    }
    for (int k = NOPS - 1; k >= 0; k--) td_request_free(q[k]); /* waits */
    expect("100 all-reduces in flight in a shared buffer", TD_F32, NOPS * LEN, sh, w, NOPS * LEN);
    td_comm_free_shared(c, sh, TD_MEM_OTHER);
    td_free(w);
}

void test_overlap(td_comm *w, td_comm *half) {
    t_deep_shared(w, 900);
    t_deep_shared(half, 950);
    t_many_in_flight(w, half);
    t_blocking_behind_request(w, half);
    if (td_comm_size(w) > 1) {
        t_any_source(w);
        t_same_tag_order(w);
    }
}
