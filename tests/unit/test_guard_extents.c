/* The guard device's extents (backend.h, src/backend/guard_ops.c): a call
 * opens only the pages its arguments' extents span, so a kernel straying
 * outside them inside the same buffer (planted through a test row behind
 * the guard's wrappers, td_guard_set_inner) dies naming the buffer and the
 * offset; an overrun inside the last opened page passes (pages are the
 * granularity); correct calls on sub-ranges of a packed buffer, ranges of
 * one page merged and nested ranges work. Mistakes run in forked children
 * whose stderr and status the parent checks. */
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "trident/backend.h"
#include "unit/guard_child.h"
#include "unit/test_util.h"

/* A packed parameter buffer of three [OC, C] matrices and a bias, each
 * matrix two pages (C 32, OC a page's floats / 16), as a model packs its
 * layers' weights into one buffer. */
enum { XC = 32 };
static size_t g_page;
static int xoc(void) { return (int)(g_page / sizeof(float) / 16); }
static size_t xmat(void) { return (size_t)xoc() * XC; } /* floats of one matrix */

typedef struct {
    float *params, *inp, *out;
} mm_args;

/* Planted kernels (a test row behind the guard's wrappers): a matmul that
 * reads the NEXT matrix of the packed buffer (a wrong weight offset inside
 * the kernel), and a scale that also reads `stray` floats past its n. */
static void mm_fwd_next_matrix(void *out, td_ktype ot, const void *inp, const void *w,
                               const float *bias, int N, int C, int OC) {
    td_ops_cpu(TD_K_F32)->mm_fwd(out, ot, inp, (const float *)w + (size_t)OC * C, bias, N, C, OC);
}
static size_t g_stray;
static void scale_stray(float *x, float s, size_t n) {
    td_ops_cpu(TD_K_F32)->scale(x, s, n);
    g_sink = ((volatile float *)x)[n - 1 + g_stray];
}
static td_ops g_planted;

static void call_planted_mm(void *arg) {
    mm_args *a = arg;
    td_guard_set_inner(TD_K_F32, &g_planted);
    td_ops_for(TD_K_F32)->mm_fwd(a->out, TD_K_F32, a->inp, a->params, NULL, 4, XC, xoc());
}
static void call_planted_scale(void *arg) {
    td_guard_set_inner(TD_K_F32, &g_planted);
    td_ops_for(TD_K_F32)->scale(arg, 2.0f, 16);
}
/* A bracket over page 2 of a buffer; host code in it reads page 1. */
static void read_outside_range(void *p) {
    const td_dev_range r[1] = {{(char *)p + 2 * g_page + 8, 16}};
    td_backend_current()->enter(r, 1);
    g_sink = ((volatile float *)p)[2 * g_page / sizeof(float) + 3]; /* inside: fine */
    g_sink = ((volatile float *)p)[g_page / sizeof(float)];
}

static void test_extents(void) {
    g_page = (size_t)sysconf(_SC_PAGESIZE);
    size_t nm = xmat();
    float *params = td_dev_alloc((3 * nm + (size_t)xoc()) * sizeof(float), TD_MEM_PARAMS, "packed params");
    float *inp = td_dev_alloc(4 * XC * sizeof(float), TD_MEM_ACTS, "inp");
    float *out = td_dev_alloc(4 * (size_t)xoc() * sizeof(float), TD_MEM_ACTS, "out");
    size_t pbytes = (3 * nm + (size_t)xoc()) * sizeof(float);
    g_planted = *td_ops_cpu(TD_K_F32);
    g_planted.mm_fwd = mm_fwd_next_matrix;
    g_planted.scale = scale_stray;
    char want[256];

    /* the planted mistakes, in children (before any op starts threads) */
    mm_args a = {params, inp, out};
    child_result r = in_child(call_planted_mm, &a);
    expect_fault_line("a matmul reading the next matrix of its packed buffer", r,
                      "buffer 'packed params' (params), offset ");
    /* which element faults first is the GEMM's order: one of the next matrix */
    const char *at = strstr(r.err, "offset ");
    size_t off = 0, of = 0;
    TU_EXPECT(at && sscanf(at, "offset %zu of %zu", &off, &of) == 2 && of == pbytes &&
                  off >= nm * sizeof(float) && off < 2 * nm * sizeof(float),
              "the offset lies in the next matrix [%zu, %zu): '%s'", nm * sizeof(float),
              2 * nm * sizeof(float), r.err);
    printf("a kernel outside its extent: %s", r.err);

    g_stray = g_page / sizeof(float); /* a page past its last element */
    float *x = params + nm;          /* 16 floats at the second matrix's start */
    r = in_child(call_planted_scale, x);
    snprintf(want, sizeof want, "buffer 'packed params' (params), offset %zu of %zu",
             (nm + 15 + g_stray) * sizeof(float), pbytes);
    expect_fault_line("a scale reading a page past its n", r, want);
    g_stray = 1; /* inside the last opened page: pages are the granularity */
    r = in_child(call_planted_scale, x);
    TU_EXPECT(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0,
              "an overrun inside the last opened page passes (status %#x: '%s')", r.status, r.err);

    float *acts = td_dev_alloc(4 * g_page, TD_MEM_ACTS, "ranges");
    r = in_child(read_outside_range, acts);
    snprintf(want, sizeof want, "buffer 'ranges' (activations), offset %zu of %zu", g_page, 4 * g_page);
    expect_fault_line("host code in a bracket reading outside its range", r, want);

    /* correct calls on sub-ranges: the second matrix and the bias of the
     * packed buffer, bitwise equal to the CPU row on host copies */
    int mark = tu_mark();
    float *hp = TU_NEW(float, 3 * nm + (size_t)xoc()), *hi = TU_NEW(float, 4 * XC);
    float *ho = TU_NEW(float, 4 * (size_t)xoc()), *got = TU_NEW(float, 4 * (size_t)xoc());
    tu_randn(hp, 3 * nm + (size_t)xoc(), 7, 1.0f);
    tu_randn(hi, 4 * XC, 8, 1.0f);
    td_dev_upload(params, hp, pbytes, TD_HOST_OTHER);
    td_dev_upload(inp, hi, 4 * XC * sizeof(float), TD_HOST_OTHER);
    td_ops_cpu(TD_K_F32)->mm_fwd(ho, TD_K_F32, hi, hp + nm, hp + 3 * nm, 4, XC, xoc());
    td_ops_for(TD_K_F32)->mm_fwd(out, TD_K_F32, inp, params + nm, params + 3 * nm, 4, XC, xoc());
    td_dev_download(got, out, 4 * (size_t)xoc() * sizeof(float), TD_HOST_OTHER);
    td_dev_sync();
    tu_check_bitwise("matmul on a sub-range of a packed buffer", got, ho, 4 * (size_t)xoc());

    /* two ranges of one page merged; nested ranges keep the outer's page */
    td_ops_for(TD_K_F32)->add(params + 10, params + 20, 5);
    const td_dev_range outer[1] = {{acts + g_page / sizeof(float), 8}};
    td_backend_current()->enter(outer, 1);
    acts[g_page / sizeof(float)] = 3.0f;
    td_ops_for(TD_K_F32)->fill(acts + g_page / sizeof(float) + 1, 1.5f, g_page / sizeof(float));
    float kept = acts[g_page / sizeof(float)] + acts[g_page / sizeof(float) + 1];
    td_backend_current()->leave();
    TU_EXPECT(kept == 4.5f, "the outer range's page stays open after an inner call on it: %g", kept);
    float back[3];
    td_dev_download(back, params + 10, sizeof back, TD_HOST_OTHER);
    td_dev_download(back + 2, acts + 2 * g_page / sizeof(float), 4, TD_HOST_OTHER);
    td_dev_sync();
    TU_EXPECT(back[0] == hp[10] + hp[20] && back[1] == hp[11] + hp[21] && back[2] == 1.5f,
              "add within one page and fill across pages: %g %g %g", back[0], back[1], back[2]);
    tu_release(mark);
    td_dev_free(params);
    td_dev_free(inp);
    td_dev_free(out);
    td_dev_free(acts);
}

int main(void) {
    td_backend_use(TD_DEVICE_GUARD);
    test_extents();
    return tu_finish("test_guard_extents");
}
