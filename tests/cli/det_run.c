/* Helper of test_determinism.sh: the exact bits of a training run.
 *
 *   det_run OUT [trident train flags]   (under mpirun for dp > 1)
 *     trains with td_train_run, as `trident train` does, and writes on world
 *     rank 0 the raw float32 bits: int32 steps, losses[steps], grad
 *     norms[steps], uint64 numel, final parameters, Adam m, Adam v (the
 *     canonical layout). No checkpoint format involved.
 *   det_run --compare A B
 *     exit 0 if A and B are byte-identical; else prints the first element
 *     that differs in each section (as hex floats) and exits 1. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/base.h"
#include "trident/comm.h"
#include "trident/train.h"

typedef struct {
    int32_t steps;
    float *losses, *norms;
    uint64_t numel;
    float *p, *m, *v;
} run_bits;

static int load(const char *path, run_bits *r) {
    FILE *f = fopen(path, "rb");
    if (!f) return fprintf(stderr, "det_run: cannot read %s\n", path), 0;
    int ok = fread(&r->steps, 4, 1, f) == 1 && r->steps > 0 && r->steps < (1 << 24);
    if (ok) {
        r->losses = malloc(4 * (size_t)r->steps), r->norms = malloc(4 * (size_t)r->steps);
        ok = r->losses && r->norms && fread(r->losses, 4, (size_t)r->steps, f) == (size_t)r->steps &&
             fread(r->norms, 4, (size_t)r->steps, f) == (size_t)r->steps && fread(&r->numel, 8, 1, f) == 1 &&
             r->numel < ((uint64_t)1 << 32);
    }
    if (ok) {
        r->p = malloc(4 * r->numel), r->m = malloc(4 * r->numel), r->v = malloc(4 * r->numel);
        ok = r->p && r->m && r->v && fread(r->p, 4, r->numel, f) == r->numel &&
             fread(r->m, 4, r->numel, f) == r->numel && fread(r->v, 4, r->numel, f) == r->numel &&
             fgetc(f) == EOF;
    }
    fclose(f);
    if (!ok) fprintf(stderr, "det_run: %s is truncated or malformed\n", path);
    return ok;
}

/* 1 if the arrays' bits differ; prints the first element that does. */
static int diff(const char *what, const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], 4) != 0) {
            printf("  %s differ: first at element %zu: %a vs %a (%.9g vs %.9g)\n", what, i, a[i], b[i], a[i],
                   b[i]);
            return 1;
        }
    return 0;
}

static void run_bits_free(run_bits *r) {
    free(r->losses), free(r->norms), free(r->p), free(r->m), free(r->v);
}

static int compare_loaded(const run_bits *pa, const run_bits *pb);

static int compare(const char *pa, const char *pb) {
    run_bits a = {0}, b = {0};
    int rc = load(pa, &a) && load(pb, &b) ? compare_loaded(&a, &b) : 2;
    run_bits_free(&a);
    run_bits_free(&b);
    return rc;
}

static int compare_loaded(const run_bits *pa, const run_bits *pb) {
    run_bits a = *pa, b = *pb;
    if (a.steps != b.steps || a.numel != b.numel) {
        printf("  runs differ in shape: %d steps / %llu parameters vs %d / %llu\n", a.steps,
               (unsigned long long)a.numel, b.steps, (unsigned long long)b.numel);
        return 1;
    }
    int d = diff("losses", a.losses, b.losses, (size_t)a.steps);
    d |= diff("grad norms", a.norms, b.norms, (size_t)a.steps);
    d |= diff("final parameters", a.p, b.p, a.numel);
    d |= diff("Adam m", a.m, b.m, a.numel);
    d |= diff("Adam v", a.v, b.v, a.numel);
    if (!d)
        printf("  identical bits: %d losses and grad norms, %llu parameters, Adam m and v\n", a.steps,
               (unsigned long long)a.numel);
    return d;
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "--compare") == 0) return compare(argv[2], argv[3]);
    if (argc < 2 || argv[1][0] == '-') {
        fprintf(stderr, "usage: det_run OUT [train flags] | det_run --compare A B\n");
        return 2;
    }
    td_comm_init(&argc, &argv);
    td_train_opts o;
    td_train_opts_default(&o);
    td_train_opts_parse(&o, argc - 2, argv + 2);
    td_train_result res;
    td_train_run(&o, &res, 1);
    if (td_comm_rank(td_comm_world()) == 0) {
        FILE *f = fopen(argv[1], "wb");
        TD_CHECK(f, "det_run: cannot write %s", argv[1]);
        int32_t steps = res.steps_done;
        uint64_t numel = res.numel;
        int ok = fwrite(&steps, 4, 1, f) == 1 && fwrite(res.losses, 4, (size_t)steps, f) == (size_t)steps &&
                 fwrite(res.grad_norms, 4, (size_t)steps, f) == (size_t)steps && fwrite(&numel, 8, 1, f) == 1 &&
                 fwrite(res.final_params, 4, numel, f) == numel && fwrite(res.final_m, 4, numel, f) == numel &&
                 fwrite(res.final_v, 4, numel, f) == numel;
        TD_CHECK(fclose(f) == 0 && ok, "det_run: writing %s failed", argv[1]);
    }
    td_train_result_free(&res);
    td_comm_finalize();
    return 0;
}
