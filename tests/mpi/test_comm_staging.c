/* Comm carries device tensors (issue 39): on a device whose memory is not
 * host memory (the guard), every collective and message of a 2-rank group
 * whose transport reads host memory only runs on host copies of the device
 * buffers, and gives the same bits as the same call on host buffers; the
 * traffic counters show exactly the staged bytes as TD_HOST_COMM (inputs
 * down, outputs up). A copy made by a host memcpy instead of the named
 * copies would die under the guard; a copy read before its download landed
 * would hold the guard's NaN poison and differ.
 *
 * On one node the group's shared ring is the staging pool: the copies go in
 * pieces of the ring's chunk and the pool is the ring's, whatever the
 * payload (td_comm_staging_plan_bytes).
 *
 *   test_comm_staging guard   the above (2 ranks; 4 ranks: the all-reduces)
 *   test_comm_staging cpu     the cpu device: nothing staged, no comm traffic
 *   test_comm_staging refuse_table  (planted) a device pointer as an
 *       all-to-all-v count table: refused naming the buffer
 *   test_comm_staging refuse_mpi    (planted) a device-native row that
 *       leaves its all-reduce to MPI hands MPI a device pointer: refused
 *       naming the buffer before the MPI call
 *   test_comm_staging refuse_free   (planted) a device buffer handed to
 *       td_comm_free_shared: refused naming it */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "comm_internal.h" /* refuse_mpi plugs a row in */
#include "trident/backend.h"
#include "trident/comm.h"

static int g_fail;
#define CHECK(cond, ...)                                                                          \
    do {                                                                                          \
        if (!(cond)) {                                                                            \
            fprintf(stderr, "rank %d: FAIL %s:%d: ", td_comm_rank(td_comm_world()), __FILE__,    \
                    __LINE__);                                                                    \
            fprintf(stderr, __VA_ARGS__);                                                         \
            fprintf(stderr, "\n");                                                                \
            g_fail = 1;                                                                           \
        }                                                                                         \
    } while (0)

static void fill(void *p, size_t n, td_dtype dt, int salt) {
    for (size_t i = 0; i < n; i++) {
        float v = sinf(0.37f * (float)i + (float)salt) * (float)(1 + (i + salt) % 7) / 3.0f;
        if (dt == TD_BF16)
            ((uint16_t *)p)[i] = td_f32_to_bf16(v);
        else
            ((float *)p)[i] = v;
    }
}

/* A device copy of host memory (set-up traffic, not comm's). */
static void *dev_of(const void *host, size_t bytes, const char *name) {
    void *d = td_dev_alloc(bytes, TD_MEM_GRADS, name);
    td_dev_upload(d, host, bytes, TD_HOST_OTHER);
    return d;
}

static void fetch(void *host, const void *dev, size_t bytes) {
    td_dev_download(host, dev, bytes, TD_HOST_OTHER);
    td_dev_sync();
}

/* Comm's staging traffic since the last reset (bytes; the copies' calls
 * in g_down_calls, g_up_calls), then a reset. */
static uint64_t g_down_calls, g_up_calls;
static void comm_traffic(uint64_t *down, uint64_t *up) {
    td_host_traffic t;
    td_dev_traffic(&t);
    *down = t.down_bytes[TD_HOST_COMM];
    *up = t.up_bytes[TD_HOST_COMM];
    g_down_calls = t.down_calls[TD_HOST_COMM];
    g_up_calls = t.up_calls[TD_HOST_COMM];
    td_dev_traffic_reset();
}

/* On one node (shared memory) the group's ring is the staging pool: the
 * copies go a chunk at a time (CHUNK bytes, set in main), so their calls
 * are the pieces' count, and the pool stays the ring's size whatever the
 * payload. Elsewhere (MPI) a whole buffer is one copy. */
enum { CHUNK = 4096 };
static void pieces(const char *what, uint64_t want_down, uint64_t want_up) {
    CHECK(g_down_calls == want_down && g_up_calls == want_up,
          "%s: %llu downloads and %llu uploads, expected %llu and %llu (one per piece)", what,
          (unsigned long long)g_down_calls, (unsigned long long)g_up_calls,
          (unsigned long long)want_down, (unsigned long long)want_up);
}
static void ring_pool(const char *what, td_dtype dt) {
    size_t want = td_comm_staging_plan_bytes(1, dt);
    CHECK(td_comm_staging_bytes() == want, "%s: staging pool of %zu bytes, the ring's plan is %zu",
          what, td_comm_staging_bytes(), want);
}

/* What one case computed on host buffers and on device buffers. */
static void same(const char *what, const void *host, const void *dev, size_t bytes, uint64_t down,
                 uint64_t want_down, uint64_t up, uint64_t want_up, int staging) {
    char got[1 << 16];
    TD_ASSERT(bytes <= sizeof got);
    fetch(got, dev, bytes);
    CHECK(memcmp(got, host, bytes) == 0, "%s: device result differs from the host result", what);
    if (!staging) want_down = want_up = 0;
    CHECK(down == want_down && up == want_up,
          "%s: comm traffic down %llu up %llu bytes, expected %llu and %llu", what,
          (unsigned long long)down, (unsigned long long)up, (unsigned long long)want_down,
          (unsigned long long)want_up);
}

enum { N = 3000 };

static void run_cases(int staging) {
    td_comm *w = td_comm_world();
    int me = td_comm_rank(w), P = td_comm_size(w);
    static float h[2 * N], g[2 * N];
    uint64_t down, up;
    td_dev_traffic_reset();

    /* all-reduce fp32, blocking */
    fill(h, N, TD_F32, me);
    float *d = dev_of(h, N * 4, "grads");
    td_dev_traffic_reset();
    td_allreduce(w, h, N, TD_F32, TD_SUM);
    td_allreduce(w, d, N, TD_F32, TD_SUM);
    comm_traffic(&down, &up);
    same("all-reduce fp32", h, d, N * 4, down, N * 4, up, N * 4, staging);
    /* ring: 1024-element pieces; MPI: one copy each way; cpu: none */
    int ring = staging && td_comm_transport(w) == TD_TRANSPORT_SHM;
    if (staging && P == 2) pieces("all-reduce fp32", ring ? 3 : 1, ring ? 3 : 1);
    /* hierarchical (2 nodes of 2): rounds of 2 x 1024 elements in the node ring */
    if (staging && P == 4) pieces("hierarchical all-reduce fp32", 2, 2);
    if (ring) ring_pool("all-reduce fp32", TD_F32);
    size_t pool = td_comm_staging_bytes(); /* allocated once, kept */
    CHECK(staging ? pool >= N * 4 : pool == 0, "staging pool of %zu bytes", pool);
    CHECK(td_mem_current(TD_MEM_COMM) >= pool, "the pool's %zu bytes are not in the comm category (%zu)",
          pool, td_mem_current(TD_MEM_COMM));

    /* two nonblocking all-reduces in flight (sum, max), waited in reverse */
    fill(h, N, TD_F32, 3 * me), fill(g, N, TD_F32, 5 + me);
    float *d1 = dev_of(h, N * 4, "bucket 1"), *d2 = dev_of(g, N * 4, "bucket 2");
    td_request *r1 = td_request_new(), *r2 = td_request_new(), *r3 = td_request_new(),
               *r4 = td_request_new();
    td_dev_traffic_reset();
    td_allreduce_start(r1, w, d1, N, TD_F32, TD_SUM);
    td_allreduce_start(r2, w, d2, N, TD_F32, TD_MAX);
    td_allreduce_start(r3, w, h, N, TD_F32, TD_SUM);
    td_allreduce_start(r4, w, g, N, TD_F32, TD_MAX);
    td_wait(r4), td_wait(r3), td_wait(r2), td_wait(r1);
    comm_traffic(&down, &up);
    same("nonblocking all-reduces", h, d1, N * 4, down, 2 * N * 4, up, 2 * N * 4, staging);
    same("nonblocking all-reduce max", g, d2, N * 4, 0, 0, 0, 0, staging);

    /* all-reduce bf16 */
    fill(h, N, TD_BF16, me);
    void *db = dev_of(h, N * 2, "bf16 grads");
    td_dev_traffic_reset();
    td_allreduce(w, h, N, TD_BF16, TD_SUM);
    td_allreduce_start(r1, w, db, N, TD_BF16, TD_SUM);
    td_wait(r1);
    comm_traffic(&down, &up);
    same("all-reduce bf16", h, db, N * 2, down, N * 2, up, N * 2, staging);
    if (ring) pieces("all-reduce bf16", 3, 3), ring_pool("all-reduce bf16", TD_BF16);
    td_request_free(r2), td_request_free(r3), td_request_free(r4);
    if (P != 2) { /* 2 "nodes" of 2: the all-reduces above ran hierarchically */
        CHECK(td_comm_transport(w) == TD_TRANSPORT_HIER, "world's transport is not hierarchical");
        td_request_free(r1);
        float *all[] = {d, d1, d2, db};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) td_dev_free(all[i]);
        return;
    }

    /* reduce-scatter in place (ZeRO's shard): send[2N], recv = send + me*N */
    fill(h, 2 * N, TD_F32, 7 + me);
    float *ds = dev_of(h, 2 * N * 4, "zero grads");
    td_dev_traffic_reset();
    td_reduce_scatter(w, h, h + (size_t)me * N, N, TD_F32);
    td_reduce_scatter_start(r1, w, ds, ds + (size_t)me * N, N, TD_F32);
    td_wait(r1);
    comm_traffic(&down, &up);
    same("reduce-scatter in place", h + (size_t)me * N, ds + (size_t)me * N, N * 4, down,
         2 * N * 4, up, N * 4, staging);
    /* ring: 512 elements of each block a piece (6 pieces through 4 slots) */
    if (ring) pieces("reduce-scatter in place", 6, 6), ring_pool("reduce-scatter", TD_BF16);

    /* all-gather in place: send = recv + me*N */
    fill(h, 2 * N, TD_F32, 11 + me);
    float *dg = dev_of(h, 2 * N * 4, "zero params");
    td_dev_traffic_reset();
    td_all_gather(w, h + (size_t)me * N, h, N, TD_F32);
    td_all_gather(w, dg + (size_t)me * N, dg, N, TD_F32);
    comm_traffic(&down, &up);
    /* ring: the other rank's block up a piece at a time (mine is there) */
    same("all-gather in place", h, dg, 2 * N * 4, down, N * 4, up, (ring ? 1 : 2) * N * 4, staging);
    if (ring) pieces("all-gather in place", 3, 3), ring_pool("all-gather", TD_BF16);

    /* reduce-scatter and all-gather into other buffers (ZeRO-2/3's gradient
     * units into the shard, the shard into a gathered unit) */
    fill(h, 2 * N, TD_F32, 31 + me);
    float *dsa = dev_of(h, 2 * N * 4, "gradient unit"), *dsh = dev_of(g, N * 4, "gradient shard");
    td_dev_traffic_reset();
    td_reduce_scatter(w, h, g, N, TD_F32);
    td_reduce_scatter_start(r1, w, dsa, dsh, N, TD_F32);
    td_wait(r1);
    comm_traffic(&down, &up);
    same("reduce-scatter", g, dsh, N * 4, down, 2 * N * 4, up, N * 4, staging);
    if (ring) pieces("reduce-scatter", 6, 6);
    fill(g, N, TD_F32, 37 + me);
    float *dps = dev_of(g, N * 4, "parameter shard"), *dgu = dev_of(h, 2 * N * 4, "gathered unit");
    td_dev_traffic_reset();
    td_all_gather(w, g, h, N, TD_F32);
    td_all_gather_start(r1, w, dps, dgu, N, TD_F32);
    td_wait(r1);
    comm_traffic(&down, &up);
    same("all-gather", h, dgu, 2 * N * 4, down, N * 4, up, 2 * N * 4, staging);
    if (ring) pieces("all-gather", 3, 6), ring_pool("all-gather", TD_BF16);

    /* broadcast from rank 1: its payload down, the others' result up */
    fill(h, N, TD_F32, 13 + me);
    float *dc = dev_of(h, N * 4, "bcast");
    td_dev_traffic_reset();
    td_broadcast(w, h, N, TD_F32, 1);
    td_broadcast(w, dc, N, TD_F32, 1);
    comm_traffic(&down, &up);
    same("broadcast", h, dc, N * 4, down, me == 1 ? N * 4 : 0, up, me == 1 ? 0 : N * 4, staging);
    /* a blocking broadcast of a device buffer goes in slices of one piece
     * (CHUNK bytes): the pool grows by one piece, not by the payload */
    if (staging) pieces("broadcast", me == 1 ? 3 : 0, me == 1 ? 0 : 3);
    if (ring)
        CHECK(td_comm_staging_bytes() == td_comm_staging_plan_bytes(1, TD_BF16) + CHUNK,
              "broadcast: staging pool of %zu bytes, expected the ring's %zu and one %d-byte piece",
              td_comm_staging_bytes(), td_comm_staging_plan_bytes(1, TD_BF16), CHUNK);

    /* send / recv (the pipeline's activations): 0 -> 1 */
    fill(h, N, TD_F32, 17 + me);
    float *dp = dev_of(h, N * 4, "activations");
    td_dev_traffic_reset();
    if (me == 0) {
        td_send(w, h, N, TD_F32, 1, 5);
        td_send_start(r1, w, dp, N, TD_F32, 1, 6);
        td_wait(r1);
    } else {
        td_recv(w, h, N, TD_F32, 0, 5);
        td_recv(w, dp, N, TD_F32, 0, 6);
    }
    comm_traffic(&down, &up);
    same("send/recv", h, dp, N * 4, down, me == 0 ? N * 4 : 0, up, me == 0 ? 0 : N * 4, staging);
    /* a shorter message than the receive's count: the rest stays as it was */
    fill(g, N, TD_F32, 29 + me);
    float *dq = dev_of(g, N * 4, "activations 2");
    td_dev_traffic_reset();
    if (me == 0) {
        td_send(w, h, N / 2, TD_F32, 1, 7);
        td_send(w, dp, N / 2, TD_F32, 1, 8);
    } else {
        td_recv(w, g, N, TD_F32, 0, 7);
        td_recv(w, dq, N, TD_F32, 0, 8);
    }
    comm_traffic(&down, &up);
    same("short message", g, dq, N * 4, down, me == 0 ? N / 2 * 4 : 0, up, me == 0 ? 0 : N / 2 * 4,
         staging);

    /* all-to-all-v with gaps in the receive buffer, which must survive */
    size_t sc[2] = {100 + 50 * (size_t)me, 200}, sd[2] = {0, 400};
    size_t rc[2] = {me == 0 ? 100 : 200, me == 0 ? 150 : 200}, rd[2] = {10, 1000};
    size_t sbytes = 600 * 4, rbytes = (1000 + rc[1]) * 4;
    fill(h, 600, TD_F32, 19 + me);
    fill(g, 1000 + rc[1], TD_F32, 23 + me); /* the gaps' old contents */
    float *dsend = dev_of(h, sbytes, "tokens out"), *drecv = dev_of(g, rbytes, "tokens in");
    td_dev_traffic_reset();
    td_all_to_all_v(w, h, sc, sd, g, rc, rd, TD_F32);
    td_all_to_all_v(w, dsend, sc, sd, drecv, rc, rd, TD_F32);
    comm_traffic(&down, &up);
    same("all-to-all-v", g, drecv, rbytes, down, sbytes + rbytes, up, rbytes, staging);

    td_request_free(r1);
    float *all[] = {d, d1, d2, db, ds, dg, dsa, dsh, dps, dgu, dc, dp, dq, dsend, drecv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) td_dev_free(all[i]);
}

/* A device-native row (reads device memory) that leaves its all-reduce to
 * the MPI pieces: the pieces refuse the device pointer. */
static void refuse_mpi(void) {
    static td_transport_ops row;
    td_comm *w = td_comm_world();
    row = *w->ops;
    row.name = "a device-native test row";
    row.host_only = 0;
    row.begin = NULL, row.run = NULL, row.a2a_begin = NULL;
    w->ops = &row;
    float *d = td_dev_alloc(N * 4, TD_MEM_GRADS, "grads of block 2");
    td_allreduce(w, d + 16, N - 16, TD_F32, TD_SUM);
}

static void refuse_table(void) {
    td_comm *w = td_comm_world();
    size_t sc[2] = {1, 1}, sd[2] = {0, 1}, rd[2] = {0, 1};
    size_t *rc = td_dev_alloc(2 * sizeof(size_t), TD_MEM_OTHER, "expert counts");
    float s[2] = {0}, r[2];
    td_all_to_all_v(w, s, sc, sd, r, rc, rd, TD_F32);
}

/* A device buffer handed to td_comm_free_shared (which would td_free it). */
static void refuse_free(void) {
    void *d = td_dev_alloc(4096, TD_MEM_GRADS, "grads");
    td_comm_free_shared(td_comm_world(), d, TD_MEM_GRADS);
}

int main(int argc, char **argv) {
    td_comm_init(&argc, &argv);
    const char *mode = argc > 1 ? argv[1] : "guard";
    if (strcmp(mode, "cpu") != 0) td_backend_use(TD_DEVICE_GUARD);
    /* several pieces per call (the ring's chunk, the hierarchical round's
     * piece; the host reference alike) */
    td_comm_set_shm_chunk(CHUNK), td_comm_set_piece_bytes(CHUNK);
    if (!strcmp(mode, "refuse_mpi")) refuse_mpi();
    if (!strcmp(mode, "refuse_table")) refuse_table();
    if (!strcmp(mode, "refuse_free")) refuse_free();
    run_cases(td_backend_is_device());
    CHECK(td_comm_staging_bytes() == 0 || td_backend_is_device(), "cpu staged %zu bytes",
          td_comm_staging_bytes());
    float bad = g_fail ? 1.0f : 0.0f;
    td_allreduce(td_comm_world(), &bad, 1, TD_F32, TD_MAX);
    int any = bad != 0.0f;
    if (td_comm_rank(td_comm_world()) == 0)
        printf("%s: %s\n", mode, any || g_fail ? "FAILED" : "all staging cases passed");
    td_comm_finalize();
    if (td_comm_staging_bytes() != 0) {
        fprintf(stderr, "FAIL: %zu bytes of staging pool left after finalize\n", td_comm_staging_bytes());
        g_fail = 1;
    }
    return any || g_fail;
}
