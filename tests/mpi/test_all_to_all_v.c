/* All-to-all(-v) against an exact oracle, on every transport the rank count
 * and environment give (registered at 2, 3 and 4 ranks, as 2 emulated nodes
 * of 2, and with TRIDENT_COMM_SHM=0).
 *
 * Element i of the block group rank s sends group rank d is
 * val(world(s), world(d), i) = k/64, |k| <= 255: exact in bf16, so every
 * element is compared exactly. Receive buffers start as guard bytes (0xA5);
 * afterwards every byte outside the receive blocks must still be 0xA5: the
 * guards before and after and the gaps between blocks, whose displacements
 * are out of rank order and apart. Counts: uniform ones of every size class
 * (0, 1, 7, around the 4 KiB piece the test sets, above it), ragged ones
 * with empty pairs, one rank sending everything to one rank, one rank
 * sending to all, the own block only. Each case first exchanges its counts
 * with td_all_to_all_counts, as a mixture-of-experts dispatcher does, then
 * moves fp32 or bf16, blocking or started, with the send buffer plain (MPI)
 * or in a td_comm_alloc_shared buffer (straight between the ranks where the
 * group is on one node), on world and on a group in reverse rank order.
 * Then several started at once (with an all-reduce between them), waited
 * on in an order that differs per rank, and the fixed-count form. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_values.h"
#include "trident/base.h"
#include "trident/comm.h"

enum { MAXN = 16, GUARD = 0xA5 };
enum { UNIFORM, RAGGED, ONE_TO_ONE, ONE_TO_ALL, OWN_ONLY };
#define AREA ((size_t)64 << 10) /* elements of one shared send area */

static int R; /* world rank, for messages */

static float val(int src, int dst, size_t i) { return tv_value((uint64_t)src, (uint64_t)dst, i); }

/* Elements group rank s sends group rank d. */
static size_t cnt(int pat, size_t k, int s, int d, int n) {
    uint64_t h = td_rng_u64(77, (uint64_t)s, (uint64_t)d + k);
    switch (pat) {
    case UNIFORM:
        return k;
    case RAGGED:
        return h % 4 == 0 ? 0 : (size_t)(h % 2600); /* empty pairs, up to 2.5 pieces */
    case ONE_TO_ONE:
        return s == 0 && d == n - 1 ? 5000 : 0;
    case ONE_TO_ALL:
        return s == 0 ? 300 + 700 * (size_t)d : 0;
    default:
        return s == d ? 300 : 0;
    }
}

typedef struct {
    td_comm *c;
    int n, me, pat, shared;
    size_t k;
    td_dtype dt;
    size_t sc[MAXN], sd[MAXN], rc[MAXN], rd[MAXN], s_len, r_len;
    char *send;           /* plain, or in the group's shared area */
    unsigned char *recv;  /* r_len elements, guard bytes outside the blocks */
    unsigned char *plain; /* the plain send buffer */
    td_request *q;
    char what[96];
} a2a_case;

static int wr(const a2a_case *x, int r) { return td_comm_world_rank_of(x->c, r); }

/* Counts (exchanged as a dispatcher would), layout, send data, guards. */
static void setup(a2a_case *x, td_comm *c, int pat, size_t k, td_dtype dt, int shared, char *area) {
    memset(x, 0, sizeof *x);
    x->c = c, x->n = td_comm_size(c), x->me = td_comm_rank(c), x->pat = pat, x->k = k;
    x->dt = dt, x->shared = shared && area;
    TD_CHECK(x->n <= MAXN, "test supports up to %d ranks", MAXN);
    int n = x->n, me = x->me;
    for (int j = 0; j < n; j++) x->sc[j] = cnt(pat, k, me, j, n);
    td_all_to_all_counts(c, x->sc, x->rc);
    for (int j = 0; j < n; j++)
        TD_CHECK(x->rc[j] == cnt(pat, k, j, me, n),
                 "counts exchange on %s: rank %d got %zu from %d, want %zu", td_comm_name(c), me,
                 x->rc[j], j, cnt(pat, k, j, me, n));
    /* send blocks in reverse rank order, receive blocks rotated by rank,
     * with gaps between them and guards around */
    size_t pos = 2;
    for (int i = n - 1; i >= 0; i--) x->sd[i] = pos, pos += x->sc[i] + (size_t)(i % 3);
    x->s_len = pos + 2;
    pos = 3;
    for (int i = 0; i < n; i++) {
        int j = (me + i) % n;
        x->rd[j] = pos, pos += x->rc[j] + 1 + (size_t)(j % 2);
    }
    x->r_len = pos + 3;
    size_t es = td_dtype_size(dt);
    x->plain = td_alloc(x->s_len * es, TD_MEM_OTHER);
    x->recv = td_alloc(x->r_len * es, TD_MEM_OTHER);
    memset(x->plain, 0x5A, x->s_len * es);
    memset(x->recv, GUARD, x->r_len * es);
    TD_CHECK(x->s_len + 3 * (size_t)me + 1 <= AREA, "shared area too small");
    /* at an offset that differs per rank: peers find it by the descriptors */
    x->send = x->shared ? area + (3 * (size_t)me + 1) * es : (char *)x->plain;
    for (int j = 0; j < n; j++)
        for (size_t i = 0; i < x->sc[j]; i++)
            tv_put(x->plain, dt, x->sd[j] + i, val(wr(x, me), wr(x, j), i));
    if (x->shared) memcpy(x->send, x->plain, x->s_len * es);
    x->q = td_request_new();
    snprintf(x->what, sizeof x->what, "%s pattern %d k %zu %s%s", td_comm_name(c), pat, k,
             dt == TD_F32 ? "fp32" : "bf16", x->shared ? " shared" : "");
}

static void launch(a2a_case *x, int nb) {
    uint64_t b0 = td_comm_bytes(), s0 = td_comm_sent_bytes(), sum = 0;
    if (nb)
        td_all_to_all_v_start(x->q, x->c, x->send, x->sc, x->sd, x->recv, x->rc, x->rd, x->dt);
    else
        td_all_to_all_v(x->c, x->send, x->sc, x->sd, x->recv, x->rc, x->rd, x->dt);
    for (int j = 0; j < x->n; j++) sum += x->sc[j] * td_dtype_size(x->dt);
    TD_CHECK(td_comm_bytes() - b0 == sum && td_comm_sent_bytes() - s0 == sum,
             "%s: traced %llu B (sent %llu), want %llu", x->what,
             (unsigned long long)(td_comm_bytes() - b0),
             (unsigned long long)(td_comm_sent_bytes() - s0), (unsigned long long)sum);
}

/* Every received element exactly, every other byte still a guard. */
static void check(a2a_case *x) {
    td_wait(x->q);
    size_t es = td_dtype_size(x->dt);
    char *mine = calloc(x->r_len, 1);
    TD_ASSERT(mine);
    for (int j = 0; j < x->n; j++)
        for (size_t i = 0; i < x->rc[j]; i++) {
            float got = tv_get(x->recv, x->dt, x->rd[j] + i), want = val(wr(x, j), wr(x, x->me), i);
            TD_CHECK(got == want, "FAIL %s (%d ranks): rank %d, block from %d, [%zu] = %g, want %g",
                     x->what, x->n, x->me, j, i, got, want);
            mine[x->rd[j] + i] = 1;
        }
    for (size_t e = 0; e < x->r_len; e++)
        for (size_t b = 0; b < es && !mine[e]; b++)
            TD_CHECK(x->recv[e * es + b] == GUARD,
                     "FAIL %s: rank %d: element %zu of %zu outside every block was written",
                     x->what, x->me, e, x->r_len);
    free(mine);
    td_request_free(x->q);
    td_free(x->plain), td_free(x->recv);
}

static void suite(td_comm *c, char *area) {
    size_t sizes[] = {0, 1, 7, 1023, 1024, 1025, 2049}; /* piece: 1024 fp32, 2048 bf16 */
    struct {
        int pat;
        size_t k;
    } cases[16];
    int nc = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        cases[nc].pat = UNIFORM, cases[nc++].k = sizes[i];
    for (int p = RAGGED; p <= OWN_ONLY; p++) cases[nc].pat = p, cases[nc++].k = 0;
    /* v: started (bit 0), shared send (bit 1). Each case runs plain and
     * shared in both dtypes, blocking in one dtype and started in the other
     * (alternating per case): every combination, at half the runs. */
    for (int i = 0; i < nc; i++)
        for (int d = 0; d < 2; d++)
            for (int v = (i + d) % 2; v < 4; v += 2) {
                a2a_case x;
                setup(&x, c, cases[i].pat, cases[i].k, d ? TD_BF16 : TD_F32, v & 2, area);
                launch(&x, v & 1);
                check(&x);
            }
}

/* Several started at once on two groups, an all-reduce on world between
 * them and two straight between shared buffers back to back; each rank
 * waits in its own order. */
static void t_in_flight(td_comm *w, td_comm *h, char *area_w, char *area_h, char *area_w2) {
    enum { K = 5 };
    a2a_case x[K];
    setup(&x[0], w, RAGGED, 1, TD_F32, 0, NULL);
    launch(&x[0], 1);
    int n = td_comm_size(w);
    float ar[300];
    for (int i = 0; i < 300; i++) ar[i] = (float)(R + i);
    td_request *qa = td_request_new();
    td_allreduce_start(qa, w, ar, 300, TD_F32, TD_SUM);
    setup(&x[1], w, ONE_TO_ALL, 0, TD_BF16, 1, area_w);
    launch(&x[1], 1);
    setup(&x[2], w, RAGGED, 2, TD_F32, 1, area_w2); /* right behind the other shared one */
    launch(&x[2], 1);
    setup(&x[3], h, ONE_TO_ONE, 0, TD_BF16, 1, area_h);
    launch(&x[3], 1);
    setup(&x[4], h, UNIFORM, 1025, TD_F32, 0, NULL);
    launch(&x[4], 1);
    for (int k = 0; k < K; k++) td_wait(x[(k * 3 + R) % K].q);
    td_wait(qa);
    for (int i = 0; i < 300; i++)
        TD_CHECK(ar[i] == (float)(n * (n - 1) / 2 + n * i), "all-reduce between all-to-alls");
    td_request_free(qa);
    for (int k = 0; k < K; k++) check(&x[k]);
}

/* td_all_to_all: `k` elements per peer, blocks back to back, guards around. */
static void t_fixed(td_comm *c, size_t k, int nb) {
    int n = td_comm_size(c), me = td_comm_rank(c);
    float *send = td_alloc((k * n + 1) * 4, TD_MEM_OTHER),
          *buf = td_alloc((k * n + 2) * 4, TD_MEM_OTHER);
    for (int j = 0; j < n; j++)
        for (size_t i = 0; i < k; i++)
            send[j * k + i] = val(td_comm_world_rank_of(c, me), td_comm_world_rank_of(c, j), i);
    memset(buf, GUARD, (k * n + 2) * 4);
    td_request *q = td_request_new();
    if (nb)
        td_all_to_all_start(q, c, send, buf + 1, k, TD_F32);
    else
        td_all_to_all(c, send, buf + 1, k, TD_F32);
    td_wait(q);
    for (int j = 0; j < n; j++)
        for (size_t i = 0; i < k; i++)
            TD_CHECK(buf[1 + j * k + i] ==
                         val(td_comm_world_rank_of(c, j), td_comm_world_rank_of(c, me), i),
                     "FAIL all_to_all k %zu on %s: block %d [%zu]", k, td_comm_name(c), j, i);
    const unsigned char *g = (const unsigned char *)buf;
    for (int b = 0; b < 4; b++)
        TD_CHECK(g[b] == GUARD && g[(k * n + 1) * 4 + b] == GUARD,
                 "FAIL all_to_all k %zu on %s wrote outside its buffer", k, td_comm_name(c));
    td_request_free(q), td_free(send), td_free(buf);
}

int main(int argc, char **argv) {
    td_comm_init(&argc, &argv);
    td_comm *w = td_comm_world();
    R = td_comm_rank(w);
    int N = td_comm_size(w);
    td_comm_set_piece_bytes(4096);
    /* world ranks in reverse order: group and world ranks differ */
    td_comm *h = td_comm_split(w, R % 2, N - R, "half");
    char d1[128], d2[128];
    td_log("transports: %s %s, %s %s\n", td_comm_name(w), td_comm_transport_desc(w, d1, sizeof d1),
           td_comm_name(h), td_comm_transport_desc(h, d2, sizeof d2));
    size_t area_bytes = 3 * AREA * sizeof(float);
    char *aw = td_comm_alloc_shared(w, area_bytes, TD_MEM_OTHER);
    char *ah = td_comm_alloc_shared(h, area_bytes, TD_MEM_OTHER);
    suite(w, aw);
    suite(h, ah);
    t_in_flight(w, h, aw, ah, aw + 2 * AREA * sizeof(float));
    for (int nb = 0; nb < 2; nb++) {
        t_fixed(w, 0, nb), t_fixed(w, 1, nb), t_fixed(w, 1025, nb), t_fixed(h, 3, nb);
    }
    td_comm_free_shared(w, aw, TD_MEM_OTHER);
    td_comm_free_shared(h, ah, TD_MEM_OTHER);
    td_comm_free(h);
    td_barrier(w);
    td_log("test_all_to_all_v: %d ranks, %s: all ok\n", N, td_comm_name(w));
    td_comm_finalize();
    return 0;
}
