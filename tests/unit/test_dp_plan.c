/* The memory plan is a pure function of (config, layout, options): called
 * here with hand-made layouts and no MPI at all (no MPI_Init). Sharded modes
 * must split the model exactly: the shares of the dp ranks (ZeRO) or of the
 * servers (ps) sum to the whole model's bytes; reduce-broadcast keeps AdamW
 * moments on dp rank 0 only; a dp group that shares memory never plans more
 * staging than one that does not. (That the engine allocates exactly the
 * plan is checked on every rank by the layout tests.) Exact byte counts: no
 * tolerance. */
#include <stdio.h>

#include "test_util.h"
#include "trident/parallel.h"

static int fails = 0;

static void expect(const char *what, size_t got, size_t want) {
    if (got != want) {
        printf("FAIL %s: %zu bytes, want %zu\n", what, got, want);
        fails++;
    }
}

int main(void) {
    td_gpt_config cfg = {.L = 2, .H = 4, .C = 64, .T = 32, .V = 65};
    td_gpt_config_finish(&cfg);
    td_dp_config o = {.mode = TD_DP_ALLREDUCE, .bucket_bytes = 1 << 20};
    char what[128];
    for (int D = 2; D <= 4; D++)
        for (int zero = 1; zero <= 3; zero++)
            for (int shm = 0; shm <= 1; shm++) {
                o.mode = TD_DP_ALLREDUCE, o.zero = zero;
                td_layout lay = {D, 1, 1, 0, 0, 0, shm, 1, 0, 1};
                td_param_table t;
                td_param_table_build(&t, &cfg, td_dp_unit_align(&o, &lay));
                size_t n = t.numel * sizeof(float), sum[TD_MEM_NCAT] = {0};
                for (int r = 0; r < D; r++) {
                    lay.dp_rank = r;
                    td_mem_plan p = td_dp_memory_plan(&o, &lay, &t);
                    for (int c = 0; c < TD_MEM_NCAT; c++) sum[c] += p.bytes[c];
                    lay.dp_shares_memory = !shm;
                    td_mem_plan q = td_dp_memory_plan(&o, &lay, &t);
                    lay.dp_shares_memory = shm;
                    const td_mem_plan *sh = shm ? &p : &q, *mpi = shm ? &q : &p;
                    if (sh->bytes[TD_MEM_COMM] > mpi->bytes[TD_MEM_COMM]) {
                        printf("FAIL zero %d dp %d: shared memory plans %zu comm bytes, MPI %zu\n",
                               zero, D, sh->bytes[TD_MEM_COMM], mpi->bytes[TD_MEM_COMM]);
                        fails++;
                    }
                }
                snprintf(what, sizeof what, "zero %d dp %d shm %d: AdamW over the dp ranks", zero,
                         D, shm);
                expect(what, sum[TD_MEM_OPTIM], 2 * n);
                snprintf(what, sizeof what, "zero %d dp %d shm %d: gradients over the dp ranks",
                         zero, D, shm);
                expect(what, sum[TD_MEM_GRADS], zero == 1 ? D * n : n);
                snprintf(what, sizeof what, "zero %d dp %d shm %d: parameters over the dp ranks",
                         zero, D, shm);
                expect(what, sum[TD_MEM_PARAMS], zero == 3 ? n : D * n);
                td_param_table_free(&t);
            }
    /* hybrid sharding: dp 4 (or dp 2 x cp 2) in shards of 2 plans each
     * rank's model state as ZeRO over 2 ranks does (the replicas repeat it) */
    for (int zero = 1; zero <= 3; zero++)
        for (int cp = 1; cp <= 2; cp++) {
            o.mode = TD_DP_ALLREDUCE, o.zero = zero;
            td_layout hy = {4 / cp, 1, 1, 0, 0, 0, 1, cp, 2, 1}, two = {2, 1, 1, 0, 0, 0, 1, 1, 0, 1};
            snprintf(what, sizeof what, "zero %d dp %d cp %d shard 2: unit padding", zero, 4 / cp, cp);
            expect(what, (size_t)td_dp_unit_align(&o, &hy), (size_t)td_dp_unit_align(&o, &two));
            td_param_table t;
            td_param_table_build(&t, &cfg, td_dp_unit_align(&o, &hy));
            td_mem_plan a = td_dp_memory_plan(&o, &hy, &t), b = td_dp_memory_plan(&o, &two, &t);
            for (int c = TD_MEM_PARAMS; c <= TD_MEM_GATHER; c++) {
                snprintf(what, sizeof what, "zero %d dp %d cp %d shard 2: %s as zero over 2 ranks", zero,
                         4 / cp, cp, td_mem_cat_name(c));
                expect(what, a.bytes[c], b.bytes[c]);
            }
            td_param_table_free(&t);
        }
    for (int S = 1; S <= 3; S++) {
        o.mode = TD_DP_PS, o.zero = 0;
        td_layout lay = {2, 1, 1, S, 0, 0, 0, 1, 0, 1};
        td_param_table t;
        td_param_table_build(&t, &cfg, td_dp_unit_align(&o, &lay));
        size_t n = t.numel * sizeof(float), params = 0, optim = 0;
        for (int s = 0; s < S; s++) {
            td_layout srv = {2, 1, 1, S, -1, 1, 0, 1, 0, 1};
            td_mem_plan p = td_dp_memory_plan(&o, &srv, &t);
            params += p.bytes[TD_MEM_PARAMS], optim += p.bytes[TD_MEM_OPTIM];
        }
        td_mem_plan w = td_dp_memory_plan(&o, &lay, &t);
        snprintf(what, sizeof what, "ps servers %d: parameters over the servers", S);
        expect(what, params, n);
        snprintf(what, sizeof what, "ps servers %d: AdamW over the servers", S);
        expect(what, optim, 2 * n);
        snprintf(what, sizeof what, "ps servers %d: a worker's parameters", S);
        expect(what, w.bytes[TD_MEM_PARAMS], n);
        snprintf(what, sizeof what, "ps servers %d: a worker's AdamW", S);
        expect(what, w.bytes[TD_MEM_OPTIM], 0);
        td_param_table_free(&t);
    }
    o.mode = TD_DP_REDUCE_BROADCAST, o.zero = 0;
    td_param_table t;
    td_layout lay = {3, 1, 1, 0, 0, 0, 1, 1, 0, 1};
    td_param_table_build(&t, &cfg, td_dp_unit_align(&o, &lay));
    for (int r = 0; r < 3; r++) {
        lay.dp_rank = r;
        td_mem_plan p = td_dp_memory_plan(&o, &lay, &t);
        snprintf(what, sizeof what, "reduce-broadcast dp rank %d: AdamW", r);
        expect(what, p.bytes[TD_MEM_OPTIM], r == 0 ? 2 * t.numel * sizeof(float) : 0);
    }
    td_param_table_free(&t);
    printf("%s: memory plans of ZeRO 1-3 (dp 2-4), ps (1-3 servers) and reduce-broadcast, no MPI\n",
           fails ? "FAIL" : "ok");
    return fails ? 1 : 0;
}
