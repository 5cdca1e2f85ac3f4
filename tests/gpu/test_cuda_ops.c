/* The CUDA backend's ops against the CPU backend's (the oracle), op by op,
 * on the same inputs, in each precision row the CUDA module fills
 * (docs/cuda.md); each CUDA op run twice from the same state must give the
 * same bits (no atomics, launch shapes fixed). Exits 77 (ctest's
 * SKIP_RETURN_CODE: reported skipped, never passed) when there is no
 * usable GPU, naming what CUDA said.
 *
 * Tolerances, from tests/unit/test_kernels.c's (|got - exp| <= tol *
 * (|exp| + FLOOR * rms(exp))): the CPU and CUDA results are each within
 * test_kernels' bound of the exact value (TOL_FWD for a forward, TOL_FD for
 * a backward, TOL_FAST for a GEMM of <= 64 terms, both fp32 with another
 * order of sums, another exp, FMAs on the GPU), so they are within twice
 * it of each other. A 16-bit output is that fp32 value rounded on each
 * side: two roundings of values that close differ by at most one ulp of
 * the type, 2^-7 relative for bf16 and 2^-10 for fp16, added. Ops that
 * round once from the same fp32 operation (casts, residual, fill, scale,
 * add, the embedding's copy) must be bitwise equal.
 *
 * Modes: none, the CPU and CUDA backends in one process (needs the CPU
 * backend's libraries); --guard, the harness itself against the guard
 * device, with no GPU; --write FILE, the same as --guard, recording every
 * input and every CPU result in FILE; --replay FILE, CUDA against FILE's
 * CPU results, built as cuda_ops_replay without trident's CPU libraries
 * (OpenBLAS, oneDNN, MPI) for a GPU machine that has none of them
 * (scripts/gpu-check.sh carries it with the file and the module);
 * --replay-guard FILE, the guard against FILE, so that the replay's
 * reading is checked here too.
 *
 * Shapes are odd on purpose: N = 37 rows (no multiple of a block), C = 300
 * for the norms (more than a block's 256 threads, so each thread sums
 * several terms). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../unit/test_util.h"
#include "trident/backend.h"
#include "trident/cuda_module.h"

#define TOL_FWD 1e-5
#define TOL_FD 2e-5
#define TOL_FAST 1e-5
#define FLOOR 0.1
#define SKIP 77

static const td_backend *g_be;
static FILE *g_tape; /* --write or --replay */
static int g_replay;

#ifdef TD_CUDA_OPS_REPLAY_ONLY
#define CPU_ROW(k) ((const td_ops *)NULL) /* every CPU result comes from the file */
#else
#define CPU_ROW(k) td_ops_cpu(k)
#endif
/* A CPU oracle's call: made, or (--replay) its results read from the file. */
#define CPU(call)                                                                                  \
    do {                                                                                           \
        if (!g_replay) call;                                                                       \
    } while (0)

/* One record of the file: what, its size, its bytes; written (--write) or
 * read back into p (--replay) in the same order. */
static void tape(const char *what, void *p, size_t bytes) {
    if (!g_tape) return;
    char name[64] = {0};
    uint64_t nb = bytes;
    if (!g_replay) {
        snprintf(name, sizeof name, "%s", what);
        if (fwrite(name, sizeof name, 1, g_tape) != 1 || fwrite(&nb, 8, 1, g_tape) != 1 ||
            (bytes && fwrite(p, bytes, 1, g_tape) != 1)) {
            fprintf(stderr, "test_cuda_ops: cannot write the reference file\n");
            exit(1);
        }
        return;
    }
    if (fread(name, sizeof name, 1, g_tape) != 1 || fread(&nb, 8, 1, g_tape) != 1 || strcmp(name, what) != 0 ||
        nb != bytes || (bytes && fread(p, bytes, 1, g_tape) != 1)) {
        fprintf(stderr, "test_cuda_ops: the reference file does not match this program at '%s' (write it again "
                        "with --write)\n", what);
        exit(1);
    }
}
static void tape_f(const char *what, float *p, size_t n) { tape(what, p, n * 4); }
static const char *const g_kname[3] = {"fp32", "bf16", "fp16"};

static TD_NORETURN void host_fail(const char *line) {
    fprintf(stderr, "trident: error: %s\n", line);
    exit(1);
}

/* ---- device buffers ---------------------------------------------------- */

/* The module's table, or (--guard, --write) the guard device through
 * td_dev_*. */
#ifdef TD_CUDA_OPS_REPLAY_ONLY
#define g_guard 0
#define GUARD(call) ((void)0)
#else
static int g_guard;
#define GUARD(call) call
#endif
static void *dalloc(size_t bytes) {
    void *p = NULL;
    if (g_guard) GUARD(p = td_dev_alloc(bytes, TD_MEM_OTHER, "test"));
    else p = g_be->alloc(bytes, TD_MEM_OTHER, "test", __FILE__);
    return p;
}
static void dfree(void *p) {
    if (g_guard) GUARD(td_dev_free(p));
    else g_be->free(p);
}
static void dcopy_2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height) {
    if (g_guard) GUARD(td_dev_copy_2d(dst, dpitch, src, spitch, width, height));
    else g_be->copy_2d(dst, dpitch, src, spitch, width, height);
}
static void *up(const void *host, size_t bytes) {
    void *d = dalloc(bytes);
    if (bytes) dcopy_2d(d, bytes, host, bytes, bytes, 1);
    return d;
}
static void down(void *host, const void *dev, size_t bytes) {
    if (g_guard) {
        GUARD(td_dev_download(host, dev, bytes, TD_HOST_OTHER));
        GUARD(td_dev_sync());
        return;
    }
    g_be->download(host, dev, bytes);
    g_be->sync();
}

static size_t es_of(td_ktype t) { return t == TD_K_F32 ? 4 : 2; }

/* fp32 values of n elements of type t (host memory): bf16 is fp32's top
 * half; fp16 widened by its fields (the file mode has no CPU row). */
static float half_to_float(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 1023;
    float v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(m | 1024), e - 25);
    return (h & 0x8000) ? -v : v;
}
static float *widen(td_ktype t, const void *x, size_t n) {
    float *f = TU_NEW(float, n);
    const uint16_t *h = x;
    for (size_t i = 0; i < n; i++) {
        if (t == TD_K_F32) {
            memcpy(&f[i], (const char *)x + 4 * i, 4);
        } else if (t == TD_K_BF16) {
            uint32_t u = (uint32_t)h[i] << 16;
            memcpy(&f[i], &u, 4);
        } else {
            f[i] = half_to_float(h[i]);
        }
    }
    return f;
}
/* Random inputs (recorded, or read back under --replay). */
static void randn(float *x, size_t n, uint64_t stream, float scale) {
#ifndef TD_CUDA_OPS_REPLAY_ONLY
    if (!g_replay) tu_randn(x, n, stream, scale);
#endif
    tape_f("input", x, n);
}
static void rand_ints(int *x, size_t n, uint64_t stream, int hi) {
#ifndef TD_CUDA_OPS_REPLAY_ONLY
    if (!g_replay) tu_rand_ints(x, n, stream, hi);
#endif
    tape("ints", x, n * sizeof(int));
}
/* n random values in k's type (std scale). */
static void *rand_k(td_ktype k, size_t n, uint64_t stream, float scale) {
    void *x = tu_alloc(n * 4);
#ifndef TD_CUDA_OPS_REPLAY_ONLY
    if (!g_replay) {
        float *f = TU_NEW(float, n);
        tu_randn(f, n, stream, scale);
        td_ops_cpu(k)->round_n(x, f, n);
    }
#endif
    tape("input", x, n * es_of(k));
    return x;
}

static double tol_of(td_ktype k, double tol32) {
    return 2.0 * tol32 + (k == TD_K_BF16 ? 0x1p-7 : k == TD_K_F16 ? 0x1p-10 : 0.0);
}

/* got (device, n elements of type t) against exp (host, type t): within
 * tol, or bitwise when tol is 0. */
static void compare(const char *what, td_ktype k, td_ktype t, const void *got_dev, const void *exp, size_t n,
                    double tol) {
    size_t es = t == TD_K_F32 ? 4 : 2;
    void *got = tu_alloc(n * es + 4);
    down(got, got_dev, n * es);
    char name[96];
    snprintf(name, sizeof name, "%s %s", what, g_kname[k]);
    float *g = widen(t, got, n), *e = widen(t, exp, n);
    if (tol == 0.0)
        tu_check_bitwise(name, g, e, n);
    else
        tu_check_close_f(name, g, e, n, tol, FLOOR);
}

/* The same device op twice from the same starting bytes of its output. */
static void twice_bitwise(const char *what, td_ktype k, void *out_dev, size_t bytes, const void *start,
                          void (*op)(void *ctx), void *ctx) {
    void *a = tu_alloc(bytes + 4), *b = tu_alloc(bytes + 4);
    dcopy_2d(out_dev, bytes, start, bytes, bytes, 1);
    op(ctx);
    down(a, out_dev, bytes);
    dcopy_2d(out_dev, bytes, start, bytes, bytes, 1);
    op(ctx);
    down(b, out_dev, bytes);
    char name[96];
    snprintf(name, sizeof name, "%s %s twice", what, g_kname[k]);
    tu_checks++;
    if (memcmp(a, b, bytes) == 0) {
        printf("PASS  %-52s %zu bytes bitwise equal\n", name, bytes);
    } else {
        tu_failures++;
        printf("FAIL  %-52s two runs differ\n", name);
    }
}

/* ---- the ops ------------------------------------------------------------- */

typedef struct {
    const td_ops *o;
    void *out;
    td_ktype ot;
    const void *inp, *w;
    const float *bias;
    int N, C, OC;
} mm_ctx;
static void run_mm_fwd(void *c) {
    mm_ctx *m = c;
    m->o->mm_fwd(m->out, m->ot, m->inp, m->w, m->bias, m->N, m->C, m->OC);
}

static void check_matmul(td_ktype k) {
    const td_ops *cpu = CPU_ROW(k), *gpu = g_be->ops(k);
    const int N = 37, C = 64, OC = 48;
    size_t es = es_of(k);
    void *inp = rand_k(k, (size_t)N * C, 1, 1.0f), *w = rand_k(k, (size_t)OC * C, 2, 0.1f);
    float *bias = TU_NEW(float, OC);
    randn(bias, OC, 3, 0.5f);
    void *d_inp = up(inp, (size_t)N * C * es), *d_w = up(w, (size_t)OC * C * es);
    float *d_bias = up(bias, OC * 4);
    for (int ot = 0; ot < 2; ot++)
        for (int with_bias = 0; with_bias < 2; with_bias++) {
            td_ktype t = ot ? k : TD_K_F32;
            if (t == TD_K_F32 && ot) continue; /* the fp32 row has one output type */
            size_t tes = t == TD_K_F32 ? 4 : 2;
            void *exp = tu_alloc((size_t)N * OC * tes);
            CPU(cpu->mm_fwd(exp, t, inp, w, with_bias ? bias : NULL, N, C, OC));
            tape("mm_fwd", exp, (size_t)N * OC * tes);
            void *d_out = dalloc((size_t)N * OC * tes);
            mm_ctx m = {gpu, d_out, t, d_inp, d_w, with_bias ? d_bias : NULL, N, C, OC};
            run_mm_fwd(&m);
            char what[64];
            snprintf(what, sizeof what, "mm_fwd out %s%s", g_kname[t], with_bias ? " bias" : "");
            compare(what, k, t, d_out, exp, (size_t)N * OC, tol_of(t, TOL_FAST));
            twice_bitwise(what, k, d_out, (size_t)N * OC * tes, exp, run_mm_fwd, &m);
            dfree(d_out);
        }
    /* operands one element off their buffers' alignment (callers pass
     * offset pointers): the GEMM plans for the pointers it is given */
    {
        size_t nin = (size_t)N * C;
        float *exp = TU_NEW(float, (size_t)N * OC);
        CPU(cpu->mm_fwd(exp, TD_K_F32, inp, w, bias, N, C, OC));
        tape_f("mm_fwd offset", exp, (size_t)N * OC);
        char *d_in1 = dalloc((nin + 1) * es), *d_out1 = dalloc(((size_t)N * OC + 1) * 4);
        dcopy_2d(d_in1 + es, nin * es, inp, nin * es, nin * es, 1);
        gpu->mm_fwd(d_out1 + 4, TD_K_F32, d_in1 + es, d_w, d_bias, N, C, OC);
        compare("mm_fwd offset operands", k, TD_K_F32, d_out1 + 4, exp, (size_t)N * OC, tol_of(TD_K_F32, TOL_FAST));
        dfree(d_in1), dfree(d_out1);
    }
    /* backward: dinp (the row's type), dw and dbias (fp32) added into
     * non-zero starting values */
    void *dout = rand_k(k, (size_t)N * OC, 4, 1.0f), *dinp = rand_k(k, (size_t)N * C, 5, 1.0f);
    float *dw = TU_NEW(float, (size_t)OC * C), *dbias = TU_NEW(float, OC);
    randn(dw, (size_t)OC * C, 6, 1.0f);
    randn(dbias, OC, 7, 1.0f);
    void *d_dout = up(dout, (size_t)N * OC * es), *d_dinp = up(dinp, (size_t)N * C * es);
    float *d_dw = up(dw, (size_t)OC * C * 4), *d_dbias = up(dbias, OC * 4);
    CPU(cpu->mm_bwd(dinp, k, dw, dbias, dout, inp, w, N, C, OC));
    tape("mm_bwd dinp", dinp, (size_t)N * C * es), tape_f("mm_bwd dw", dw, (size_t)OC * C), tape_f("mm_bwd dbias", dbias, OC);
    gpu->mm_bwd(d_dinp, k, d_dw, d_dbias, d_dout, d_inp, d_w, N, C, OC);
    compare("mm_bwd dinp", k, k, d_dinp, dinp, (size_t)N * C, tol_of(k, TOL_FAST));
    compare("mm_bwd dw", k, TD_K_F32, d_dw, dw, (size_t)OC * C, tol_of(TD_K_F32, TOL_FAST));
    compare("mm_bwd dbias", k, TD_K_F32, d_dbias, dbias, OC, tol_of(TD_K_F32, TOL_FAST));
    dfree(d_inp), dfree(d_w), dfree(d_bias), dfree(d_dout), dfree(d_dinp);
    dfree(d_dw), dfree(d_dbias);
}

typedef struct {
    const td_ops *o;
    void *out;
    float *mean, *rstd;
    const void *inp;
    const float *w, *b;
    int N, C;
} ln_ctx;
static void run_ln_fwd(void *c) {
    ln_ctx *l = c;
    l->o->ln_fwd(l->out, l->mean, l->rstd, l->inp, l->w, l->b, l->N, l->C);
}

static void check_layernorm(td_ktype k) {
    const td_ops *cpu = CPU_ROW(k), *gpu = g_be->ops(k);
    const int N = 37, C = 300;
    size_t es = es_of(k), n = (size_t)N * C;
    void *inp = rand_k(k, n, 11, 2.0f);
    float *w = TU_NEW(float, C), *b = TU_NEW(float, C), *mean = TU_NEW(float, N), *rstd = TU_NEW(float, N);
    randn(w, C, 12, 1.0f);
    randn(b, C, 13, 1.0f);
    void *out = tu_alloc(n * es);
    CPU(cpu->ln_fwd(out, mean, rstd, inp, w, b, N, C));
    tape("ln_fwd", out, n * es), tape_f("ln_fwd mean", mean, N), tape_f("ln_fwd rstd", rstd, N);
    void *d_inp = up(inp, n * es), *d_out = dalloc(n * es);
    float *d_w = up(w, C * 4), *d_b = up(b, C * 4);
    float *d_mean = dalloc(N * 4), *d_rstd = dalloc(N * 4);
    ln_ctx l = {gpu, d_out, d_mean, d_rstd, d_inp, d_w, d_b, N, C};
    run_ln_fwd(&l);
    compare("ln_fwd out", k, k, d_out, out, n, tol_of(k, TOL_FWD));
    compare("ln_fwd mean", k, TD_K_F32, d_mean, mean, N, tol_of(TD_K_F32, TOL_FWD));
    compare("ln_fwd rstd", k, TD_K_F32, d_rstd, rstd, N, tol_of(TD_K_F32, TOL_FWD));
    twice_bitwise("ln_fwd", k, d_out, n * es, out, run_ln_fwd, &l);
    /* backward from the CPU's statistics (the same on both sides) */
    void *dout = rand_k(k, n, 14, 1.0f), *dinp = rand_k(k, n, 15, 1.0f);
    float *dw = TU_NEW(float, C), *db = TU_NEW(float, C);
    randn(dw, C, 16, 1.0f);
    randn(db, C, 17, 1.0f);
    void *d_dout = up(dout, n * es), *d_dinp = up(dinp, n * es);
    float *d_dw = up(dw, C * 4), *d_db = up(db, C * 4);
    float *d_mean2 = up(mean, N * 4), *d_rstd2 = up(rstd, N * 4);
    CPU(cpu->ln_bwd(dinp, dw, db, dout, inp, w, mean, rstd, N, C));
    tape("ln_bwd dinp", dinp, n * es), tape_f("ln_bwd dw", dw, C), tape_f("ln_bwd db", db, C);
    gpu->ln_bwd(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, d_mean2, d_rstd2, N, C);
    compare("ln_bwd dinp", k, k, d_dinp, dinp, n, tol_of(k, TOL_FD));
    compare("ln_bwd dw", k, TD_K_F32, d_dw, dw, C, tol_of(TD_K_F32, TOL_FD));
    compare("ln_bwd db", k, TD_K_F32, d_db, db, C, tol_of(TD_K_F32, TOL_FD));
    void *bufs[] = {d_inp, d_out, d_w, d_b, d_mean, d_rstd, d_dout, d_dinp, d_dw, d_db, d_mean2, d_rstd2};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) dfree(bufs[i]);
}

static void check_rmsnorm(td_ktype k) {
    const td_ops *cpu = CPU_ROW(k), *gpu = g_be->ops(k);
    const int N = 37, C = 300;
    size_t es = es_of(k), n = (size_t)N * C;
    void *inp = rand_k(k, n, 41, 2.0f), *out = tu_alloc(n * es);
    float *w = TU_NEW(float, C), *rstd = TU_NEW(float, N);
    randn(w, C, 42, 1.0f);
    CPU(cpu->rms_fwd(out, rstd, inp, w, N, C, 1e-5f));
    tape("rms_fwd", out, n * es), tape_f("rms_fwd rstd", rstd, N);
    void *d_inp = up(inp, n * es), *d_out = dalloc(n * es);
    float *d_w = up(w, C * 4), *d_rstd = dalloc(N * 4);
    gpu->rms_fwd(d_out, d_rstd, d_inp, d_w, N, C, 1e-5f);
    compare("rms_fwd out", k, k, d_out, out, n, tol_of(k, TOL_FWD));
    compare("rms_fwd rstd", k, TD_K_F32, d_rstd, rstd, N, tol_of(TD_K_F32, TOL_FWD));
    void *dout = rand_k(k, n, 43, 1.0f), *dinp = rand_k(k, n, 44, 1.0f);
    float *dw = TU_NEW(float, C);
    randn(dw, C, 45, 1.0f);
    void *d_dout = up(dout, n * es), *d_dinp = up(dinp, n * es);
    float *d_dw = up(dw, C * 4), *d_rstd2 = up(rstd, N * 4);
    CPU(cpu->rms_bwd(dinp, dw, dout, inp, w, rstd, N, C));
    tape("rms_bwd dinp", dinp, n * es), tape_f("rms_bwd dw", dw, C);
    gpu->rms_bwd(d_dinp, d_dw, d_dout, d_inp, d_w, d_rstd2, N, C);
    compare("rms_bwd dinp", k, k, d_dinp, dinp, n, tol_of(k, TOL_FD));
    compare("rms_bwd dw", k, TD_K_F32, d_dw, dw, C, tol_of(TD_K_F32, TOL_FD));
    void *bufs[] = {d_inp, d_out, d_w, d_rstd, d_dout, d_dinp, d_dw, d_rstd2};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) dfree(bufs[i]);
}

/* SwiGLU on gu[N, 2F]; g spans past the CPU's clamps at +-80. */
static void check_swiglu(td_ktype k) {
    const td_ops *cpu = CPU_ROW(k), *gpu = g_be->ops(k);
    const int N = 37, F = 301;
    size_t es = es_of(k), n = (size_t)N * F;
    void *gu = rand_k(k, 2 * n, 51, 4.0f), *dh = rand_k(k, n, 52, 1.0f);
    if (!g_replay && k != TD_K_F16) { /* a few gates past the clamps (fp16 cannot hold 90 * 2^k) */
        float big[4] = {90.0f, -90.0f, 1e4f, -1e4f};
        for (int i = 0; i < 4; i++) CPU(cpu->round_n((char *)gu + (size_t)i * 2 * F * es, &big[i], 1));
    }
    tape("swiglu gu", gu, 2 * n * es);
    void *h = tu_alloc(n * es), *dgu = tu_alloc(2 * n * es);
    CPU(cpu->swiglu_fwd(h, gu, N, F));
    CPU(cpu->swiglu_bwd(dgu, dh, gu, N, F));
    tape("swiglu_fwd", h, n * es), tape("swiglu_bwd", dgu, 2 * n * es);
    void *d_gu = up(gu, 2 * n * es), *d_dh = up(dh, n * es), *d_h = dalloc(n * es), *d_dgu = dalloc(2 * n * es);
    gpu->swiglu_fwd(d_h, d_gu, N, F);
    gpu->swiglu_bwd(d_dgu, d_dh, d_gu, N, F);
    compare("swiglu_fwd", k, k, d_h, h, n, tol_of(k, TOL_FWD));
    compare("swiglu_bwd", k, k, d_dgu, dgu, 2 * n, tol_of(k, TOL_FD));
    dfree(d_gu), dfree(d_dh), dfree(d_h), dfree(d_dgu);
}

/* RoPE in place on a strided view (heads from column col of wider rows),
 * forward then backward: each product rounded alone on both sides. */
static void check_rope(td_ktype k) {
    const td_ops *cpu = CPU_ROW(k), *gpu = g_be->ops(k);
    const int B = 2, T = 5, heads = 3, hs = 8, col = 4, stride = heads * hs + 7;
    size_t es = es_of(k), n = (size_t)B * T * stride;
    void *x = rand_k(k, n, 81, 1.0f);
    float *cs = TU_NEW(float, (size_t)T * hs);
    randn(cs, (size_t)T * hs, 82, 0.7f);
    void *d_x = up(x, n * es);
    float *d_cs = up(cs, (size_t)T * hs * 4);
    for (int bwd = 0; bwd < 2; bwd++) {
        CPU((bwd ? cpu->rope_bwd : cpu->rope_fwd)(x, cs, B, T, stride, col, heads, hs));
        tape("rope", x, n * es);
        (bwd ? gpu->rope_bwd : gpu->rope_fwd)(d_x, d_cs, B, T, stride, col, heads, hs);
        compare(bwd ? "rope_bwd" : "rope_fwd", k, k, d_x, x, n, 0.0);
    }
    dfree(d_x), dfree(d_cs);
}

static void check_elementwise(td_ktype k) {
    const td_ops *cpu = CPU_ROW(k), *gpu = g_be->ops(k);
    const size_t n = 70001; /* more than one launch's first wave, odd */
    size_t es = es_of(k);
    void *a = rand_k(k, n, 21, 2.0f), *b = rand_k(k, n, 22, 1.0f), *g0 = rand_k(k, n, 23, 1.0f);
    void *d_a = up(a, n * es), *d_b = up(b, n * es), *d_out = dalloc(n * es);
    void *out = tu_alloc(n * es);
    CPU(cpu->gelu_fwd(out, a, n));
    tape("gelu_fwd", out, n * es);
    gpu->gelu_fwd(d_out, d_a, n);
    compare("gelu_fwd", k, k, d_out, out, n, tol_of(k, TOL_FWD));
    void *d_g = up(g0, n * es);
    CPU(cpu->gelu_bwd(g0, a, b, n)); /* dinp += gelu'(a) * b */
    tape("gelu_bwd", g0, n * es);
    gpu->gelu_bwd(d_g, d_a, d_b, n);
    compare("gelu_bwd", k, k, d_g, g0, n, tol_of(k, TOL_FD));
    CPU(cpu->res_fwd(out, a, b, n));
    tape("res_fwd", out, n * es);
    gpu->res_fwd(d_out, d_a, d_b, n);
    compare("res_fwd", k, k, d_out, out, n, 0.0);
    /* the casts: fp32 to the row's type and back */
    float *f = TU_NEW(float, n), *fw = TU_NEW(float, n);
    randn(f, n, 24, 3.0f);
    float *d_f = up(f, n * 4), *d_fw = dalloc(n * 4);
    CPU(cpu->round_n(out, f, n));
    tape("round_n", out, n * es);
    gpu->round_n(d_out, d_f, n);
    compare("round_n", k, k, d_out, out, n, 0.0);
    CPU(cpu->widen_n(fw, out, n));
    tape_f("widen_n", fw, n);
    gpu->widen_n(d_fw, d_out, n);
    compare("widen_n", k, TD_K_F32, d_fw, fw, n, 0.0);
    void *bufs[] = {d_a, d_b, d_out, d_g, d_f, d_fw};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) dfree(bufs[i]);
}

/* fp32 in every row: checked once, through the fp32 row. */
static void check_fp32_entries(void) {
    const td_ops *cpu = CPU_ROW(TD_K_F32), *gpu = g_be->ops(TD_K_F32);
    const size_t n = 5003;
    float *x = TU_NEW(float, n), *y = TU_NEW(float, n);
    randn(x, n, 31, 1.0f);
    randn(y, n, 32, 1.0f);
    float *d_x = up(x, n * 4), *d_y = up(y, n * 4);
    CPU(cpu->scale(x, 0.37f, n));
    tape_f("scale", x, n);
    gpu->scale(d_x, 0.37f, n);
    compare("scale", TD_K_F32, TD_K_F32, d_x, x, n, 0.0);
    CPU(cpu->add(x, y, n));
    tape_f("add", x, n);
    gpu->add(d_x, d_y, n);
    compare("add", TD_K_F32, TD_K_F32, d_x, x, n, 0.0);
    CPU(cpu->fill(x, -1.25f, n));
    tape_f("fill", x, n);
    gpu->fill(d_x, -1.25f, n);
    compare("fill", TD_K_F32, TD_K_F32, d_x, x, n, 0.0);
    dfree(d_x), dfree(d_y);
    /* the embedding of a vocab shard [lo, lo + rows): tokens outside give 0 */
    const int N = 37, C = 40, V = 50, lo = 10, rows = 25;
    int *tok = TU_NEW(int, N);
    rand_ints(tok, N, 33, V);
    float *wte = TU_NEW(float, (size_t)rows * C), *out = TU_NEW(float, (size_t)N * C);
    randn(wte, (size_t)rows * C, 34, 1.0f);
    int *d_tok = up(tok, N * sizeof(int));
    float *d_wte = up(wte, (size_t)rows * C * 4), *d_out = dalloc((size_t)N * C * 4);
    CPU(cpu->emb_fwd(out, tok, wte, lo, rows, N, C));
    tape_f("emb_fwd", out, (size_t)N * C);
    gpu->emb_fwd(d_out, d_tok, d_wte, lo, rows, N, C);
    compare("emb_fwd", TD_K_F32, TD_K_F32, d_out, out, (size_t)N * C, 0.0);
    dfree(d_tok), dfree(d_wte), dfree(d_out);
    /* the positions' add: rows of a micro-batch from global row n0, with
     * the positions given (a context-parallel chunk's) and not */
    const int T = 16, n0 = 21;
    int *pos = TU_NEW(int, T);
    rand_ints(pos, T, 35, T);
    float *wpe = TU_NEW(float, (size_t)T * C), *acc = TU_NEW(float, (size_t)N * C);
    randn(wpe, (size_t)T * C, 36, 1.0f);
    randn(acc, (size_t)N * C, 37, 1.0f);
    int *d_pos = up(pos, T * sizeof(int));
    float *d_wpe = up(wpe, (size_t)T * C * 4), *d_acc = up(acc, (size_t)N * C * 4);
    for (int with_pos = 0; with_pos < 2; with_pos++) {
        CPU(cpu->pos_fwd(acc, wpe, with_pos ? pos : NULL, n0, N, T, C));
        tape_f("pos_fwd", acc, (size_t)N * C);
        gpu->pos_fwd(d_acc, d_wpe, with_pos ? d_pos : NULL, n0, N, T, C);
        compare(with_pos ? "pos_fwd positions" : "pos_fwd", TD_K_F32, TD_K_F32, d_acc, acc, (size_t)N * C, 0.0);
    }
    dfree(d_pos), dfree(d_wpe), dfree(d_acc);
}

/* The optimizer's range operations, in the CPU's order and roundings: the
 * same bits (double and int64 results compared as their bytes). */
static void check_range_ops(void) {
    const td_ops *cpu = CPU_ROW(TD_K_F32), *gpu = g_be->ops(TD_K_F32);
    const size_t n = 3 * 4096 + 123; /* four of the CPU's blocks, the last short */
    float *x = TU_NEW(float, n);
    randn(x, n, 61, 3.0f);
    float *d_x = up(x, n * 4);
    double r[2] = {0, 0};
    int64_t f[3] = {0, 0, 0};
    double *d_r = dalloc(sizeof r);
    int64_t *d_f = dalloc(sizeof f);
    CPU(cpu->sumsq(&r[0], x, n));
    CPU(cpu->sum(&r[1], x, n));
    gpu->sumsq(d_r, d_x, n);
    gpu->sum(d_r + 1, d_x, n);
    CPU(cpu->first_nonfinite(&f[0], x, n)); /* none: -1 */
    gpu->first_nonfinite(d_f, d_x, n);
    /* a NaN in the third block and an infinity after it: the NaN's index */
    float bad[2] = {NAN, INFINITY};
    size_t at[2] = {2 * 4096 + 77, 3 * 4096 + 5};
    for (int i = 0; i < 2; i++) x[at[i]] = bad[i], dcopy_2d(d_x + at[i], 4, &bad[i], 4, 4, 1);
    CPU(cpu->first_nonfinite(&f[1], x, n));
    CPU(cpu->first_nonfinite(&f[2], x + at[0] + 1, n - at[0] - 1)); /* the infinity, from a later start */
    gpu->first_nonfinite(d_f + 1, d_x, n);
    gpu->first_nonfinite(d_f + 2, d_x + at[0] + 1, n - at[0] - 1);
    tape("sumsq, sum", r, sizeof r), tape("first_nonfinite", f, sizeof f);
    compare("sumsq, sum (double bytes)", TD_K_F32, TD_K_F32, d_r, r, sizeof r / 4, 0.0);
    compare("first_nonfinite (int64 bytes)", TD_K_F32, TD_K_F32, d_f, f, sizeof f / 4, 0.0);
    dfree(d_x), dfree(d_r), dfree(d_f);
    /* AdamW over three spans in one call, one without decay, step 3 */
    const size_t sn[3] = {1000, 4097, 7};
    const float wd[3] = {0.1f, 0.0f, 0.05f};
    td_adamw_span hs[3], ds[3];
    float *dev[3][4];
    for (int i = 0; i < 3; i++) {
        float *a[4];
        for (int j = 0; j < 4; j++) {
            a[j] = TU_NEW(float, sn[i]);
            randn(a[j], sn[i], 70 + 4 * i + j, j == 2 ? 0.01f : 1.0f);
            if (j == 2)
                for (size_t e = 0; e < sn[i]; e++) a[j][e] = a[j][e] * a[j][e]; /* v >= 0 */
            dev[i][j] = up(a[j], sn[i] * 4);
        }
        hs[i] = (td_adamw_span){a[0], a[1], a[2], a[3], sn[i], wd[i]};
        ds[i] = (td_adamw_span){dev[i][0], dev[i][1], dev[i][2], dev[i][3], sn[i], wd[i]};
    }
    td_adamw_hyper h = {.lr = 3e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .grad_scale = 0.5f, .step = 3};
    CPU(cpu->adamw(hs, 3, &h));
    gpu->adamw(ds, 3, &h);
    for (int i = 0; i < 3; i++) {
        const char *what[3] = {"adamw p", "adamw m", "adamw v"};
        for (int j = 0; j < 3; j++) {
            float *hp = j == 0 ? hs[i].p : j == 1 ? hs[i].m : hs[i].v;
            tape_f(what[j], hp, sn[i]);
            compare(what[j], TD_K_F32, TD_K_F32, dev[i][j], hp, sn[i], 0.0);
        }
        for (int j = 0; j < 4; j++) dfree(dev[i][j]);
    }
}

/* The buffer half: a buffer starts zero; 2-D copies up, across and down. */
static void check_buffers(void) {
    const size_t w = 24, h = 5, sp = 40, dp = 56;
    unsigned char *src = tu_alloc(sp * h), *got = tu_alloc(dp * h), *zero = tu_alloc(dp * h);
    for (size_t i = 0; i < sp * h; i++) src[i] = (unsigned char)(i * 7 + 1);
    unsigned char *d1 = dalloc(sp * h), *d2 = dalloc(dp * h);
    down(got, d2, dp * h);
    tu_checks++;
    if (memcmp(got, zero, dp * h) == 0) printf("PASS  %-52s\n", "a new buffer reads zero");
    else tu_failures++, printf("FAIL  a new buffer is not zero\n");
    dcopy_2d(d1, sp, src, sp, sp, h);
    dcopy_2d(d2, dp, d1, sp, w, h);
    down(got, d2, dp * h);
    int bad = 0;
    for (size_t r = 0; r < h; r++)
        for (size_t c = 0; c < dp; c++) bad |= got[r * dp + c] != (c < w ? src[r * sp + c] : 0);
    tu_checks++;
    if (!bad) printf("PASS  %-52s\n", "copy_2d up, device to device, down");
    else tu_failures++, printf("FAIL  copy_2d: rows or their gaps wrong\n");
    /* an overlapping device copy moves as memmove */
    dcopy_2d(d1 + 1, sp * h - 1, d1, sp * h - 1, sp * h - 1, 1);
    down(got, d1, sp * h);
    bad = got[0] != src[0] || memcmp(got + 1, src, sp * h - 1) != 0;
    tu_checks++;
    if (!bad) printf("PASS  %-52s\n", "overlapping copy as memmove");
    else tu_failures++, printf("FAIL  overlapping copy\n");
    dfree(d1), dfree(d2);
}

#ifndef TD_CUDA_OPS_REPLAY_ONLY
/* Device choice (no GPU needed): the launcher's local rank, mod the
 * visible devices. */
static void check_device_choice(void) {
    unsetenv("OMPI_COMM_WORLD_LOCAL_RANK"), unsetenv("MPI_LOCALRANKID"), unsetenv("SLURM_LOCALID");
    int r0 = td_cuda_local_rank();
    setenv("SLURM_LOCALID", "5", 1);
    int r1 = td_cuda_local_rank();
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "3", 1); /* mpirun's, ahead of Slurm's */
    int r2 = td_cuda_local_rank();
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "x", 1); /* not a number: the next one */
    int r3 = td_cuda_local_rank();
    unsetenv("OMPI_COMM_WORLD_LOCAL_RANK"), unsetenv("SLURM_LOCALID");
    TU_EXPECT(r0 == 0 && r1 == 5 && r2 == 3 && r3 == 5, "local ranks %d %d %d %d, want 0 5 3 5", r0, r1, r2, r3);
    TU_EXPECT(td_cuda_pick_device(0, 1) == 0 && td_cuda_pick_device(5, 1) == 0 && td_cuda_pick_device(5, 4) == 1 &&
                  td_cuda_pick_device(7, 8) == 7,
              "local rank mod device count");
    printf("PASS  %-52s\n", "device choice: local rank mod visible devices");
}
#endif

static void check_all(void) {
    check_buffers();
    check_fp32_entries();
    check_range_ops();
    for (int k = 0; k < 3; k++) {
        check_matmul((td_ktype)k);
        check_layernorm((td_ktype)k);
        check_rmsnorm((td_ktype)k);
        check_swiglu((td_ktype)k);
        check_rope((td_ktype)k);
        check_elementwise((td_ktype)k);
    }
}

int main(int argc, char **argv) {
    char err[1024];
    const char *mode = argc > 1 ? argv[1] : "";
    const char *file = argc > 2 ? argv[2] : NULL;
#ifndef TD_CUDA_OPS_REPLAY_ONLY
    /* --guard: the harness itself, here, against the guard device (the
     * CPU's kernels behind unreachable buffers): every argument must be a
     * device buffer reached only through the named copies, and the checks
     * must pass against the oracle's own kernels. --write FILE: the same,
     * recording the inputs and the CPU's results for --replay. */
    int replay_guard = strcmp(mode, "--replay-guard") == 0; /* the file read back, here */
    if (strcmp(mode, "--guard") == 0 || strcmp(mode, "--write") == 0 || replay_guard) {
        g_replay = replay_guard;
        if (mode[2] != 'g' && !(file && (g_tape = fopen(file, replay_guard ? "rb" : "wb")))) {
            fprintf(stderr, "usage: test_cuda_ops %s FILE (cannot open '%s')\n", mode, file ? file : "");
            return 2;
        }
        g_guard = 1;
        td_backend_use(TD_DEVICE_GUARD);
        g_be = td_backend_current();
        check_device_choice();
        check_all();
        if (g_tape && fclose(g_tape) != 0) return 1;
        return tu_finish(mode[2] == 'w' ? "test_cuda_ops --write" : replay_guard ? "test_cuda_ops --replay-guard" : "test_cuda_ops --guard");
    }
#endif
    if (strcmp(mode, "--replay") == 0) {
        g_replay = 1;
        if (!file || !(g_tape = fopen(file, "rb"))) {
            fprintf(stderr, "usage: %s --replay FILE (cannot read '%s')\n", argv[0], file ? file : "");
            return 2;
        }
    } else if (strcmp(mode, "--query") != 0 && *mode) {
        fprintf(stderr, "usage: %s [--guard | --write FILE | --replay FILE | --query]\n", argv[0]);
        return 2;
    }
    const td_cuda_module *m = td_cuda_module_load(err, sizeof err);
    if (!m) {
        printf("SKIPPED: no CUDA module: %s\n", err);
        return SKIP;
    }
    char lines[2048];
    m->describe(lines, sizeof lines);
    fputs(lines, stdout);
    static const td_cuda_host host = {TD_CUDA_ABI, td_mem_account_device, td_mem_cat_name, host_fail};
    g_be = m->open(&host, td_cuda_local_rank(), err, sizeof err);
    if (!g_be) {
        printf("SKIPPED: %s\n", err);
        return SKIP;
    }
    if (strcmp(mode, "--query") == 0) return 0;
    check_all();
    for (int k = 0; k < 3; k++) {
        char missing[1024];
        int n = td_ops_missing(g_be->ops((td_ktype)k), missing, sizeof missing);
        printf("not in the CUDA %s row yet (%d): %s\n", g_kname[k], n, missing);
    }
    return tu_finish(g_replay ? "test_cuda_ops --replay" : "test_cuda_ops");
}
