/* Every comm op against a direct computation, fp32 and bf16, at sizes around
 * the piece boundaries, blocking and nonblocking, on world and a split group.
 *
 * Data: v(rank, i) = k/64 with integer |k| <= 255. These are exact in bf16
 * (8 significant bits) and any sum of them over fewer than 2^16 ranks is exact
 * in fp32 (at most 24 significant bits), in any order. So fp32 results are
 * compared exactly whatever algorithm MPI picks, and a bf16 reduction must
 * equal bf16(exact sum): rounded once, as the comm layer promises (reducing
 * in bf16 would round at every step and miss on 3-4 ranks). */
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_collectives.h"
#include "test_values.h"
#include "trident/base.h"
#include "trident/comm.h"

int R, N; /* world rank and size */

float v(int rank, size_t i, int salt) { return tv_value((uint64_t)salt, (uint64_t)rank, i); }

float get(const void *buf, td_dtype dt, size_t i) { return tv_get(buf, dt, i); }
void fill(void *buf, td_dtype dt, size_t n, int rank, int salt, size_t base) {
    for (size_t i = 0; i < n; i++) tv_put(buf, dt, i, v(rank, base + i, salt));
}
static const char *dtn(td_dtype dt) { return dt == TD_F32 ? "fp32" : "bf16"; }

/* Exact comparison (see the top comment); the expected value goes through
 * bf16 once when the payload is bf16. Prints the worst element and ends the
 * job on mismatch. */
void expect(const char *what, td_dtype dt, size_t count, const void *got, const float *want,
            size_t n) {
    size_t worst = 0, bad = 0;
    double wd = -1;
    for (size_t i = 0; i < n; i++) {
        float w = dt == TD_F32 ? want[i] : td_bf16_to_f32(td_f32_to_bf16(want[i]));
        double d = (double)get(got, dt, i) - w;
        if (d < 0) d = -d;
        if (!(d == 0)) bad++;
        if (!(d <= wd)) wd = d, worst = i;
    }
    if (!bad) return;
    float w = dt == TD_F32 ? want[worst] : td_bf16_to_f32(td_f32_to_bf16(want[worst]));
    fprintf(stderr,
            "FAIL %s %s count %zu on rank %d of %d (piece %zu B, in-flight %d): %zu of %zu "
            "elements differ; worst [%zu] got %.9g want %.9g\n",
            what, dtn(dt), count, R, N, td_comm_piece_bytes(), td_comm_inflight(), bad, n, worst,
            get(got, dt, worst), w);
    td_die(1);
}

typedef struct {
    td_comm *c;
    td_dtype dt;
    size_t count;
    int salt, nb; /* nb: nonblocking form (start + wait) */
} ctx;

float *wantbuf(size_t n) { return td_alloc(td_max_sz(n, 1) * sizeof(float), TD_MEM_OTHER); }
void *databuf(size_t n) { return td_alloc(td_max_sz(n, 1) * 4, TD_MEM_OTHER); }
static int gr(const ctx *x, int r) { return td_comm_world_rank_of(x->c, r); } /* data key */

static void run(td_request *q, int nb) {
    if (nb) td_wait(q);
}

static void t_allreduce(const ctx *x, td_redop op) {
    int me = td_comm_rank(x->c), n = td_comm_size(x->c);
    /* guard bytes before and after the payload must stay untouched (the
     * hierarchical path stages and unstages it in rounds) */
    size_t es = td_dtype_size(x->dt);
    unsigned char *raw = databuf(x->count + 2);
    memset(raw, 0xA5, (x->count + 2) * es);
    void *b = raw + es;
    float *w = wantbuf(x->count);
    fill(b, x->dt, x->count, gr(x, me), x->salt, 0);
    for (size_t i = 0; i < x->count; i++) {
        float acc = v(gr(x, 0), i, x->salt);
        for (int r = 1; r < n; r++) {
            float y = v(gr(x, r), i, x->salt);
            acc = op == TD_SUM ? acc + y : (y > acc ? y : acc);
        }
        w[i] = acc;
    }
    td_request *q = td_request_new();
    if (x->nb)
        td_allreduce_start(q, x->c, b, x->count, x->dt, op);
    else
        td_allreduce(x->c, b, x->count, x->dt, op);
    run(q, x->nb);
    expect(op == TD_SUM ? "allreduce sum" : "allreduce max", x->dt, x->count, b, w, x->count);
    for (size_t i = 0; i < es; i++)
        TD_CHECK(raw[i] == 0xA5 && raw[(x->count + 1) * es + i] == 0xA5,
                 "all-reduce of %zu on %s wrote outside its payload", x->count, td_comm_name(x->c));
    if (x->dt == TD_F32) {
        /* Again inside a shared buffer (straight between ranks where the
         * group is on one node), at an offset that differs per rank and is
         * off the cache lines: each rank must find the others' data by
         * their descriptors, not by its own layout. */
        size_t off = 3 * (size_t)me + 1, bytes = (off + x->count + 5) * sizeof(float);
        float *sh = td_comm_alloc_shared(x->c, bytes, TD_MEM_OTHER);
        fill(sh + off, TD_F32, x->count, gr(x, me), x->salt, 0);
        sh[off - 1] = sh[off + x->count] = 42.0f; /* guards: must stay untouched */
        if (x->nb)
            td_allreduce_start(q, x->c, sh + off, x->count, TD_F32, op);
        else
            td_allreduce(x->c, sh + off, x->count, TD_F32, op);
        run(q, x->nb);
        expect(op == TD_SUM ? "allreduce sum, shared buffer" : "allreduce max, shared buffer",
               TD_F32, x->count, sh + off, w, x->count);
        TD_CHECK(sh[off - 1] == 42.0f && sh[off + x->count] == 42.0f,
                 "shared-buffer all-reduce wrote outside its range");
        td_comm_free_shared(x->c, sh, TD_MEM_OTHER);
    }
    td_request_free(q), td_free(raw), td_free(w);
}

static void t_reduce_bcast(const ctx *x) {
    int me = td_comm_rank(x->c), n = td_comm_size(x->c), root = (int)(x->count % (size_t)n);
    void *b = databuf(x->count);
    float *w = wantbuf(x->count);
    td_request *q = td_request_new();
    fill(b, x->dt, x->count, gr(x, me), x->salt, 0);
    for (size_t i = 0; i < x->count; i++) {
        w[i] = v(gr(x, me), i, x->salt); /* non-roots keep what they sent */
        if (me == root) {
            w[i] = 0;
            for (int r = 0; r < n; r++) w[i] += v(gr(x, r), i, x->salt);
        }
    }
    if (x->nb)
        td_reduce_start(q, x->c, b, x->count, x->dt, root);
    else
        td_reduce(x->c, b, x->count, x->dt, root);
    run(q, x->nb);
    expect("reduce", x->dt, x->count, b, w, x->count);
    /* Broadcast from another root; the others start from different bytes. */
    root = (root + 1) % n;
    fill(b, x->dt, x->count, gr(x, me), x->salt + 1, 0);
    for (size_t i = 0; i < x->count; i++) w[i] = v(gr(x, root), i, x->salt + 1);
    if (x->nb)
        td_broadcast_start(q, x->c, b, x->count, x->dt, root);
    else
        td_broadcast(x->c, b, x->count, x->dt, root);
    run(q, x->nb);
    expect("broadcast", x->dt, x->count, b, w, x->count);
    td_request_free(q), td_free(b), td_free(w);
}

/* shared: all three buffers inside one td_comm_alloc_shared buffer, at an
 * offset that differs per rank (fp32 goes straight between the ranks'
 * buffers; bf16 stays on MPI). */
static void t_scatter_gather(const ctx *x, int in_place, int shared) {
    int me = td_comm_rank(x->c), n = td_comm_size(x->c);
    size_t cnt = x->count, es = td_dtype_size(x->dt), all = cnt * (size_t)n;
    void *send, *full, *recv;
    char *region = NULL;
    if (shared) {
        size_t off = (3 * (size_t)me + 1) * es;
        region = td_comm_alloc_shared(x->c, off + (2 * all + cnt + 1) * es, TD_MEM_OTHER);
        send = region + off, full = (char *)send + all * es, recv = (char *)full + all * es;
    } else {
        send = databuf(all), full = databuf(all), recv = databuf(cnt);
    }
    float *w = wantbuf(all);
    td_request *q = td_request_new();
    /* reduce_scatter: block r of the sum lands on rank r. */
    fill(send, x->dt, all, gr(x, me), x->salt, 0);
    for (size_t i = 0; i < cnt; i++) {
        w[i] = 0;
        for (int r = 0; r < n; r++) w[i] += v(gr(x, r), (size_t)me * cnt + i, x->salt);
    }
    void *out = in_place ? (char *)send + (size_t)me * cnt * es : recv;
    if (x->nb)
        td_reduce_scatter_start(q, x->c, send, out, cnt, x->dt);
    else
        td_reduce_scatter(x->c, send, out, cnt, x->dt);
    run(q, x->nb);
    expect(in_place ? (shared ? "reduce_scatter in place, shared" : "reduce_scatter in place")
                    : (shared ? "reduce_scatter, shared" : "reduce_scatter"),
           x->dt, cnt, out, w, cnt);
    /* all_gather: block r of the output is rank r's input. */
    memset(full, 0xff, all * es);
    void *in = in_place ? (char *)full + (size_t)me * cnt * es : recv;
    fill(in, x->dt, cnt, gr(x, me), x->salt + 2, 0);
    for (int r = 0; r < n; r++)
        for (size_t i = 0; i < cnt; i++) w[(size_t)r * cnt + i] = v(gr(x, r), i, x->salt + 2);
    if (x->nb)
        td_all_gather_start(q, x->c, in, full, cnt, x->dt);
    else
        td_all_gather(x->c, in, full, cnt, x->dt);
    run(q, x->nb);
    expect(in_place ? (shared ? "all_gather in place, shared" : "all_gather in place")
                    : (shared ? "all_gather, shared" : "all_gather"),
           x->dt, cnt, full, w, all);
    if (shared)
        td_comm_free_shared(x->c, region, TD_MEM_OTHER);
    else
        td_free(send), td_free(full), td_free(recv);
    td_request_free(q), td_free(w);
}

/* A token around the ring with blocking calls (rank 0 sends first, so it
 * cannot deadlock), then every rank at once with nonblocking ones. */
static void t_p2p(const ctx *x) {
    int me = td_comm_rank(x->c), n = td_comm_size(x->c);
    int next = (me + 1) % n, prev = (me + n - 1) % n;
    void *s = databuf(x->count), *r = databuf(x->count);
    float *w = wantbuf(x->count);
    fill(s, x->dt, x->count, gr(x, me), x->salt, 0);
    for (size_t i = 0; i < x->count; i++) w[i] = v(gr(x, prev), i, x->salt);
    if (me == 0) td_send(x->c, s, x->count, x->dt, next, 3);
    TD_CHECK(td_recv(x->c, r, x->count, x->dt, prev, 3) == prev, "recv source");
    if (me != 0) td_send(x->c, s, x->count, x->dt, next, 3);
    expect("send/recv blocking", x->dt, x->count, r, w, x->count);
    td_request *qs = td_request_new(), *qr = td_request_new();
    memset(r, 0, td_max_sz(x->count, 1) * 4);
    td_recv_start(qr, x->c, r, x->count, x->dt, prev, 4);
    td_send_start(qs, x->c, s, x->count, x->dt, next, 4);
    while (!td_test(qr)) {
    }
    td_wait(qs);
    expect("send/recv nonblocking", x->dt, x->count, r, w, x->count);
    td_request_free(qs), td_request_free(qr), td_free(s), td_free(r), td_free(w);
}

static void suite(td_comm *c, int salt) {
    size_t sizes[] = {0, 1, 7, 1023, 1024, 1025, 2047, 2048, 2049, 3584, 7173};
    for (int d = 0; d < 2; d++)
        for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++)
            for (int nb = 0; nb < 2; nb++) {
                ctx x = {c, d ? TD_BF16 : TD_F32, sizes[k], salt + (int)k * 10, nb};
                t_allreduce(&x, TD_SUM);
                t_allreduce(&x, TD_MAX);
                t_reduce_bcast(&x);
                for (int shared = 0; shared < 2; shared++) {
                    t_scatter_gather(&x, 0, shared);
                    t_scatter_gather(&x, 1, shared);
                }
                if (td_comm_size(c) > 1) t_p2p(&x);
            }
}

static void t_bf16_rounding(void) {
    struct {
        float x;
        uint16_t want;
    } cases[] = {
        {1.0f, 0x3f80},
        {1.0f + 1.0f / 256, 0x3f80} /* tie: to even */,
        {1.0f + 3.0f / 256, 0x3f82} /* tie: to even, upward */,
        {-2.0f, 0xc000},
        {FLT_MAX, 0x7f80} /* rounds up to infinity */,
        {1.0f / 0.0f, 0x7f80},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        TD_CHECK(td_f32_to_bf16(cases[i].x) == cases[i].want, "bf16(%g) = 0x%04x, want 0x%04x",
                 cases[i].x, td_f32_to_bf16(cases[i].x), cases[i].want);
    uint16_t nan = td_f32_to_bf16(0.0f / 0.0f);
    TD_CHECK((nan & 0x7f80) == 0x7f80 && (nan & 0x7f), "bf16(NaN) = 0x%04x is not a NaN", nan);
}

int main(int argc, char **argv) {
    td_comm_init(&argc, &argv);
    td_comm *w = td_comm_world();
    R = td_comm_rank(w), N = td_comm_size(w);
    t_bf16_rounding();
    /* A split group: world ranks in reverse order, so group and world ranks
     * differ and the data keys (world ranks) catch any mix-up. */
    td_comm *half = td_comm_split(w, R % 2, N - R, "half");
    TD_CHECK(td_comm_world_rank_of(half, td_comm_rank(half)) == R, "world_rank_of(self)");
    /* TRIDENT_RANKS_PER_NODE=2 on 4 ranks: world spans 2 "nodes" of 2 and
     * all-reduces hierarchically; the halves ({0,2}, {1,3}) cross nodes with
     * one member on each: MPI. Without it every group is on this node. */
    const char *rpn = getenv("TRIDENT_RANKS_PER_NODE");
    char d1[128], d2[128];
    td_log("transports: %s %s, %s %s\n", td_comm_name(w), td_comm_transport_desc(w, d1, sizeof d1),
           td_comm_name(half), td_comm_transport_desc(half, d2, sizeof d2));
    if (rpn && !strcmp(rpn, "2") && N == 4)
        TD_CHECK(td_comm_transport(w) == TD_TRANSPORT_HIER &&
                     td_comm_transport(half) == TD_TRANSPORT_MPI,
                 "TRIDENT_RANKS_PER_NODE=2 on 4 ranks: world is %s, half is %s", d1, d2);
    else
        TD_CHECK(td_comm_transport(w) == TD_TRANSPORT_SHM || N == 1 || !td_comm_shm(),
                 "one node: world is %s", d1);
    { /* a call counts its payload once, whatever its transport is made of */
        float x[1000] = {0};
        uint64_t b0 = td_comm_bytes(), s0 = td_comm_sent_bytes();
        td_allreduce(w, x, 1000, TD_F32, TD_SUM);
        TD_CHECK(td_comm_bytes() - b0 == 4000 && td_comm_sent_bytes() - s0 == 4000,
                 "all-reduce of 4000 B on %s counted %llu B (sent %llu B)", d1,
                 (unsigned long long)(td_comm_bytes() - b0),
                 (unsigned long long)(td_comm_sent_bytes() - s0));
    }
    /* shm: all-reduce through the shared ring (every group here is on one
     * node) with chunks of shm_chunk bytes, small enough that the ring wraps
     * many times; or through MPI pieces like every other op. */
    struct {
        size_t piece;
        int inflight, shm;
        size_t shm_chunk;
    } passes[] = {{4096, 2, 1, 256}, {4100, 3, 1, 1280}, {4096, 1, 0, 0}, {0, 0, 1, 0}};
    for (int p = 0; p < 4; p++) {
        td_comm_set_piece_bytes(passes[p].piece);
        td_comm_set_inflight(passes[p].inflight);
        td_comm_set_shm(passes[p].shm);
        td_comm_set_shm_chunk(passes[p].shm_chunk);
        suite(w, 100 * p);
        suite(half, 100 * p + 50);
        test_overlap(w, half);
        td_log("pass %d (piece %zu B, in-flight %d, all-reduce through %s): ok\n", p,
               td_comm_piece_bytes(), td_comm_inflight(), td_comm_shm() ? "shared memory" : "MPI");
    }
    uint64_t calls = td_comm_calls();
    TD_CHECK(calls > 1000, "only %llu comm calls recorded", (unsigned long long)calls);
    if (R == 0) td_comm_dump(3);
    td_comm_free(half);
    td_barrier(w);
    td_log("test_collectives: %d ranks, %s: all ok\n", N, td_comm_name(w));
    td_comm_finalize();
    return 0;
}
