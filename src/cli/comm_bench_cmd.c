/* `trident bench comm`: the command line of the collective benchmark; the
 * measurement is src/comm/comm_bench.c's (it reads the transports' own
 * buffers, so it lives beside them). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/base.h"
#include "trident/cli.h"
#include "trident/comm.h"

static const char *usage =
    "usage: trident bench comm [--min BYTES] [--max BYTES] [--iters N] [--trials N] "
    "[--piece BYTES] [--ops allreduce,reduce_scatter,all_gather,broadcast,all_to_all_v] [--no-sweep] [--hier]  (run "
    "under mpirun -np 2 or more)";

static size_t parse_bytes(const char *flag, const char *s) {
    char *end;
    double v = strtod(s, &end);
    double mul = 1;
    if (*end == 'k' || *end == 'K')
        mul = 1024, end++;
    else if (*end == 'm' || *end == 'M')
        mul = 1024 * 1024, end++;
    else if (*end == 'g' || *end == 'G')
        mul = 1024.0 * 1024 * 1024, end++;
    if (*end == 'i' || *end == 'B') end++;
    if (*end == 'B') end++;
    TD_CHECK(end != s && *end == 0 && v > 0, "%s %s: expected a byte count such as 4096, 64K or 1M",
             flag, s);
    return (size_t)(v * mul);
}

int td_comm_bench_main(int argc, char **argv) {
    int own = !td_comm_initialized();
    if (own) td_comm_init(NULL, NULL);
    td_comm_bench_opts b = {.lo = 4096, .hi = (size_t)64 << 20, .trials = 3, .sweep = 1};
    int words = 1; /* leading words ("trident", "bench", "comm") are the caller's to keep */
    for (int i = 0; i < argc; i++) {
        const char *f = argv[i];
        int has = i + 1 < argc;
        if (words && f[0] != '-') continue;
        words = 0;
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) {
            if (td_comm_rank(td_comm_world()) == 0) printf("%s\n", usage);
            if (own) td_comm_finalize();
            return 0;
        }
        if (!strcmp(f, "--min") && has)
            b.lo = parse_bytes(f, argv[++i]);
        else if (!strcmp(f, "--max") && has)
            b.hi = parse_bytes(f, argv[++i]);
        else if (!strcmp(f, "--piece") && has)
            b.piece = parse_bytes(f, argv[++i]);
        else if (!strcmp(f, "--iters") && has)
            b.iters = atoi(argv[++i]);
        else if (!strcmp(f, "--trials") && has)
            b.trials = atoi(argv[++i]);
        else if (!strcmp(f, "--no-sweep"))
            b.sweep = 0;
        else if (!strcmp(f, "--hier"))
            b.hier = 1;
        else if (!strcmp(f, "--ops") && has)
            b.ops = argv[++i];
        else
            td_fail("bench comm: unknown or incomplete option '%s'; %s", f, usage);
    }
    int rc = td_comm_bench_run(&b);
    if (own) td_comm_finalize();
    return rc;
}
