/* GEMM rates of the model's linear layers: fp32 through OpenBLAS (the fp32
 * kernel td_matmul_*) and oneDNN, bf16 through oneDNN (td_matmul_bf16_*),
 * against the measured peaks of each, at 1 and 2 threads; and fp16
 * (td_matmul_f16_*: converted to fp32 here, no fp16 matmul in oneDNN), whose
 * rate is reported beside them, with no peak of its own.
 *
 * Shapes: L6 H6 C384 T256 batch 8, so N = 2048 rows, C = 384: qkv C->3C,
 * attention projection C->C, fc C->4C, fc projection 4C->C, head C->Vp (V =
 * 65 padded to 80). Kinds: forward (out = inp w^T), dinp (+= dout w), dw
 * (+= dout^T inp); 2 N C OC flops each.
 * Peaks: OpenBLAS = td_sgemm_peak_gflops (threads x 512^3 single-threaded
 * sgemms at once: the MFU denominator); oneDNN f32 and bf16 = one 1024^3
 * matmul on all threads. Rates are the best of >= 5 timed calls (>= 150 ms)
 * after a warm-up: interference from other processes only slows a call.
 * Never fails on speed; exit 0 unless something cannot run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/base.h"
#include "trident/kernels.h"
#include "trident/kernels_bf16.h"

enum { ENG_BLAS, ENG_DNNL_F32, ENG_DNNL_BF16, ENG_DNNL_F16, NENG };
enum { K_FWD, K_DINP, K_DW, NKIND };
static const char *kind_name[NKIND] = {"fwd", "dinp", "dw"};

typedef struct {
    int N, C, OC, eng, kind;
    float *x, *w, *g, *out, *dx, *dw; /* fp32 operands */
    td_bf16 *xb, *wb, *gb, *outb, *dxb;
    td_f16 *xh, *wh, *gh, *outh, *dxh;
} job;

static void run(const job *j) {
    int N = j->N, C = j->C, OC = j->OC;
    switch (j->eng * NKIND + j->kind) {
    case ENG_BLAS * NKIND + K_FWD: td_matmul_forward(j->out, j->x, j->w, NULL, N, C, OC); break;
    case ENG_BLAS * NKIND + K_DINP: td_matmul_backward(j->dx, NULL, NULL, j->g, j->x, j->w, N, C, OC); break;
    case ENG_BLAS * NKIND + K_DW: td_matmul_backward(NULL, j->dw, NULL, j->g, j->x, j->w, N, C, OC); break;
    case ENG_DNNL_F32 * NKIND + K_FWD: td_matmul_dnnl_f32_forward(j->out, j->x, j->w, NULL, N, C, OC); break;
    case ENG_DNNL_F32 * NKIND + K_DINP: td_matmul_dnnl_f32_backward(j->dx, NULL, j->g, j->x, j->w, N, C, OC); break;
    case ENG_DNNL_F32 * NKIND + K_DW: td_matmul_dnnl_f32_backward(NULL, j->dw, j->g, j->x, j->w, N, C, OC); break;
    case ENG_DNNL_BF16 * NKIND + K_FWD:
        td_matmul_bf16_forward(j->outb, TD_K_BF16, j->xb, j->wb, NULL, N, C, OC);
        break;
    case ENG_DNNL_BF16 * NKIND + K_DINP:
        td_matmul_bf16_backward(j->dxb, TD_K_BF16, NULL, NULL, j->gb, j->xb, j->wb, N, C, OC);
        break;
    case ENG_DNNL_BF16 * NKIND + K_DW:
        td_matmul_bf16_backward(NULL, TD_K_BF16, j->dw, NULL, j->gb, j->xb, j->wb, N, C, OC);
        break;
    case ENG_DNNL_F16 * NKIND + K_FWD:
        td_matmul_f16_forward(j->outh, TD_K_F16, j->xh, j->wh, NULL, N, C, OC);
        break;
    case ENG_DNNL_F16 * NKIND + K_DINP:
        td_matmul_f16_backward(j->dxh, TD_K_F16, NULL, NULL, j->gh, j->xh, j->wh, N, C, OC);
        break;
    case ENG_DNNL_F16 * NKIND + K_DW:
        td_matmul_f16_backward(NULL, TD_K_F16, j->dw, NULL, j->gh, j->xh, j->wh, N, C, OC);
        break;
    }
}

static double gflops(const job *j) {
    double t0 = td_now_ms();
    while (td_now_ms() - t0 < 30.0) run(j); /* warm-up: primitive creation, clocks */
    double best = 1e30, start = td_now_ms();
    for (int rep = 0; rep < 5 || td_now_ms() - start < 150.0; rep++) {
        double a = td_now_ms();
        run(j);
        double dt = td_now_ms() - a;
        if (dt < best) best = dt;
    }
    return 2.0 * j->N * (double)j->C * j->OC / (best * 1e-3) / 1e9;
}

/* n elements of type t (TD_K_F32, TD_K_BF16, TD_K_F16). */
static void *fill(size_t n, td_ktype t, uint64_t stream) {
    void *p = td_alloc(n * (t == TD_K_F32 ? 4 : 2), TD_MEM_OTHER);
    for (size_t i = 0; i < n; i++) {
        float v = 0.1f * (float)td_rng_normal(20260101ULL, stream, i);
        if (t == TD_K_BF16)
            ((td_bf16 *)p)[i] = td_bf16_from_float(v);
        else if (t == TD_K_F16)
            ((td_f16 *)p)[i] = td_f16_from_float(v);
        else
            ((float *)p)[i] = v;
    }
    return p;
}

static job make_job(int N, int C, int OC) {
    job j = {.N = N, .C = C, .OC = OC};
    size_t ni = (size_t)N * C, nw = (size_t)OC * C, no = (size_t)N * OC;
    j.x = fill(ni, TD_K_F32, 1), j.w = fill(nw, TD_K_F32, 2), j.g = fill(no, TD_K_F32, 3);
    j.out = fill(no, TD_K_F32, 4), j.dx = fill(ni, TD_K_F32, 5), j.dw = fill(nw, TD_K_F32, 6);
    j.xb = fill(ni, TD_K_BF16, 1), j.wb = fill(nw, TD_K_BF16, 2), j.gb = fill(no, TD_K_BF16, 3);
    j.outb = fill(no, TD_K_BF16, 4), j.dxb = fill(ni, TD_K_BF16, 5);
    j.xh = fill(ni, TD_K_F16, 1), j.wh = fill(nw, TD_K_F16, 2), j.gh = fill(no, TD_K_F16, 3);
    j.outh = fill(no, TD_K_F16, 4), j.dxh = fill(ni, TD_K_F16, 5);
    return j;
}

static void free_job(job *j) {
    void *p[] = {j->x,  j->w,  j->g,  j->out,  j->dx,  j->dw, j->xb, j->wb,
                 j->gb, j->outb, j->dxb, j->xh, j->wh, j->gh, j->outh, j->dxh};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) td_free(p[i]);
}

static void print_line(const char *line, void *ctx) { printf("#   %s\n", line); }

int main(int argc, char **argv) {
    int max_threads = argc > 1 ? atoi(argv[1]) : 2;
    const char *ct = getenv("OPENBLAS_CORETYPE");
    printf("# bench_gemm: GFLOP/s (best of >= 5 calls), OPENBLAS_CORETYPE=%s, oneDNN bf16 %s\n",
           ct ? ct : "(unset)", td_bf16_native() ? "native" : "NOT native");
    printf("# timings taken on a shared 2-core machine: other processes may run beside it\n");
    const int shapes[][3] = {{2048, 384, 1152}, {2048, 384, 384}, {2048, 384, 1536},
                             {2048, 1536, 384}, {2048, 384, 80}};
    const char *names[] = {"qkv", "attproj", "fc", "fcproj", "head"};
    for (int t = 1; t <= max_threads; t++) {
        td_kernels_set_threads(t);
        job pk = make_job(1024, 1024, 1024);
        double peak[NENG] = {0}; /* no fp16 peak: it runs the fp32 primitive */
        peak[ENG_BLAS] = td_sgemm_peak_gflops(t);
        pk.eng = ENG_DNNL_F32, pk.kind = K_FWD;
        peak[ENG_DNNL_F32] = gflops(&pk);
        pk.eng = ENG_DNNL_BF16;
        peak[ENG_DNNL_BF16] = gflops(&pk);
        free_job(&pk);
        double pf32 = peak[ENG_BLAS] > peak[ENG_DNNL_F32] ? peak[ENG_BLAS] : peak[ENG_DNNL_F32];
        printf("\nthreads %d  peaks: openblas f32 %.0f (%d x 512^3)  onednn f32 %.0f (1024^3)  "
               "onednn bf16 %.0f (1024^3)  bf16/f32 peak %.2fx\n",
               t, peak[ENG_BLAS], t, peak[ENG_DNNL_F32], peak[ENG_DNNL_BF16],
               peak[ENG_DNNL_BF16] / pf32);
        printf("%-8s %-16s %-5s %9s %9s %9s %8s %8s %8s %9s %8s\n", "layer", "N x C -> OC", "kind",
               "blas_f32", "dnnl_f32", "dnnl_bf16", "bf16/f32", "f32%pk", "bf16%pk", "f16_conv",
               "f16/f32");
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            job j = make_job(shapes[s][0], shapes[s][1], shapes[s][2]);
            char shape[32];
            snprintf(shape, sizeof shape, "%dx%d->%d", j.N, j.C, j.OC);
            for (int k = 0; k < NKIND; k++) {
                double r[NENG];
                for (int e = 0; e < NENG; e++) {
                    j.eng = e, j.kind = k;
                    r[e] = gflops(&j);
                }
                double bf32 = r[ENG_BLAS] > r[ENG_DNNL_F32] ? r[ENG_BLAS] : r[ENG_DNNL_F32];
                printf("%-8s %-16s %-5s %9.0f %9.0f %9.0f %7.2fx %7.0f%% %7.0f%% %9.0f %7.2fx\n",
                       names[s], shape, kind_name[k], r[ENG_BLAS], r[ENG_DNNL_F32],
                       r[ENG_DNNL_BF16], r[ENG_DNNL_BF16] / bf32, 100.0 * bf32 / pf32,
                       100.0 * r[ENG_DNNL_BF16] / peak[ENG_DNNL_BF16], r[ENG_DNNL_F16],
                       r[ENG_DNNL_F16] / bf32);
            }
            free_job(&j);
        }
    }
    printf("\n# bf16/f32: bf16 rate over the faster fp32 engine; f32%%pk: that fp32 rate over the\n"
           "# higher fp32 peak; bf16%%pk: bf16 rate over the bf16 peak; f16_conv: fp16 GEMM\n"
           "# (operands converted to fp32, oneDNN f32), f16/f32 its rate over the faster fp32\n"
           "# engine. oneDNN primitives used:\n");
    td_matmul_bf16_describe(print_line, NULL);
    td_matmul_bf16_release();
    return 0;
}
