/* The guard device (backend.h, src/backend/guard.c): its buffer half
 * (zeroed allocations, copies both ways and on the device, traffic counted
 * by purpose, events, accounting in pages), the two planted mistakes (a
 * host read of a device buffer outside a call dies naming it; a download's
 * destination read before the sync holds the poison), and ops through
 * td_ops_for under guard bitwise equal to td_ops_cpu. Mistakes run in
 * forked children whose stderr and status the parent checks. */
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "trident/backend.h"
#include "unit/guard_child.h"
#include "unit/test_util.h"

static void read_float(void *p) { g_sink = ((volatile float *)p)[0]; }
static void write_float(void *p) { ((volatile float *)p)[0] = 1.0f; }

/* Host code inside a bracket that runs off the end of the open buffer. */
static void read_past_end(void *p) {
    const td_dev_range r[1] = {{p, 1000 * sizeof(float)}};
    td_backend_current()->enter(r, 1);
    g_sink = ((volatile float *)p)[1024 + 3]; /* the buffer is 1000 floats: one page past */
}

static void download_into_device(void *p) { td_dev_download(p, (char *)p + 64, 16, TD_HOST_OTHER); }

static void test_planted_host_read(void) {
    float *a = td_dev_alloc(1000 * sizeof(float), TD_MEM_ACTS, "activations of block 3");
    float *w = td_dev_alloc(64 * sizeof(float), TD_MEM_PARAMS, "wte");
    char site[64];
    /* the allocation site is this file, the line of the first alloc above */
    snprintf(site, sizeof site, "allocated at tests/unit/test_guard.c:%d\n", __LINE__ - 4);

    child_result r = in_child(read_float, a + 100);
    char want[512];
    snprintf(want, sizeof want,
             "trident: error: host access to device memory: buffer 'activations of block 3' "
             "(activations), offset 400 of 4000, allocated at ");
    expect_fault_line("read of a[100]", r, want);
    printf("a host read outside a call: %s", r.err);
    TU_EXPECT(strstr(r.err, site) != NULL, "the line names the allocation site %s: '%s'", site, r.err);

    r = in_child(write_float, w + 7);
    expect_fault_line("write of wte[7]", r,
                      "buffer 'wte' (params), offset 28 of 256, allocated at ");

    r = in_child(read_past_end, a);
    expect_fault_line("a read past the end of an open buffer", r,
                      "buffer 'activations of block 3' (activations), offset 4108 of 4000");

    /* Faults outside guard memory go to the previous handler (the default:
     * killed by SIGSEGV; in a sanitizer build AddressSanitizer's, which
     * reports the SEGV and exits 1), without a guard line. */
    void *other = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    TD_ASSERT(other != MAP_FAILED);
    r = in_child(read_float, other);
#if defined(__SANITIZE_ADDRESS__)
    TU_EXPECT(WIFEXITED(r.status) && WEXITSTATUS(r.status) != 0 && strstr(r.err, "AddressSanitizer: SEGV"),
              "a fault outside guard memory is passed on (to AddressSanitizer), got status %#x", r.status);
#else
    TU_EXPECT(WIFSIGNALED(r.status) && WTERMSIG(r.status) == SIGSEGV,
              "a fault outside guard memory is passed on (SIGSEGV), got status %#x", r.status);
#endif
    TU_EXPECT(strstr(r.err, "device memory") == NULL, "no guard line for it: '%s'", r.err);
    munmap(other, 4096);

    /* A download whose destination is device memory is a programmer error. */
    r = in_child(download_into_device, a);
    TU_EXPECT(WIFSIGNALED(r.status) && WTERMSIG(r.status) == SIGABRT && strstr(r.err, "assertion"),
              "download into device memory asserts, got status %#x '%s'", r.status, r.err);

    /* Closed again after a call: the same read in a child after a copy. */
    td_dev_zero(a, 16);
    r = in_child(read_float, a);
    expect_fault_line("read after td_dev_zero returned", r, "offset 0 of 4000");
    td_dev_free(a);
    td_dev_free(w);
}

/* Nesting: an enter inside an enter; the inner leave keeps the outer's
 * buffer open and closes its own. */
static void test_nesting(void) {
    const td_backend *be = td_backend_current();
    float *a = td_dev_alloc(256, TD_MEM_ACTS, "outer"), *b = td_dev_alloc(256, TD_MEM_ACTS, "inner");
    int host = 0;
    /* host memory passed to a call is left alone */
    const td_dev_range pa[2] = {{a, 256}, {&host, sizeof host}};
    const td_dev_range pab[3] = {{a + 1, 4}, {NULL, 8}, {b, 44}};
    be->enter(pa, 2);
    a[0] = 5.0f;
    be->enter(pab, 3);
    b[0] = a[0];
    be->leave();
    TU_EXPECT(a[0] == 5.0f, "outer buffer still open after the inner leave");
    child_result r = in_child(read_float, b);
    expect_fault_line("inner buffer closed after its leave", r, "buffer 'inner'");
    be->leave();
    r = in_child(read_float, a);
    expect_fault_line("outer buffer closed after its leave", r, "buffer 'outer'");
    float got[2];
    td_dev_download(got, a, 4, TD_HOST_OTHER);
    td_dev_download(got + 1, b, 4, TD_HOST_OTHER);
    td_dev_sync();
    TU_EXPECT(got[0] == 5.0f && got[1] == 5.0f, "writes inside the brackets kept: %g %g", got[0], got[1]);
    td_dev_free(a);
    td_dev_free(b);
}

/* ---- planted mistake 2: the poison --------------------------------------- */

static void test_planted_early_read(void) {
    float host[37];
    for (int i = 0; i < 37; i++) host[i] = (float)i + 0.5f;
    float *d = td_dev_alloc(sizeof host, TD_MEM_ACTS, "loss");
    td_dev_upload(d, host, sizeof host, TD_HOST_OTHER);
    float out[37];
    memset(out, 0, sizeof out);
    td_dev_download(out, d, sizeof out, TD_HOST_SCALARS);
    int nan = 0;
    for (int i = 0; i < 37; i++) nan += isnan(out[i]);
    TU_EXPECT(nan == 37, "before the sync every float of the destination is NaN (%d of 37)", nan);
    td_dev_sync();
    TU_EXPECT(memcmp(out, host, sizeof host) == 0, "after the sync the right bytes");

    /* the poison as other types, at an odd offset of the source too */
    int64_t idx = 7, idx_out;
    int32_t i32_out[3];
    double sq = 2.5, sq_out;
    uint16_t h_out[3];
    char *raw = td_dev_alloc(64, TD_MEM_OTHER, "scalars");
    td_dev_upload(raw, &idx, 8, TD_HOST_OTHER);
    td_dev_upload(raw + 8, &sq, 8, TD_HOST_OTHER);
    td_dev_download(&idx_out, raw, 8, TD_HOST_SCALARS);
    td_dev_download(&sq_out, raw + 8, 8, TD_HOST_SCALARS);
    td_dev_download(i32_out, raw + 1, 12, TD_HOST_SCALARS);
    td_dev_download(h_out, raw + 3, 6, TD_HOST_SCALARS);
    TU_EXPECT(idx_out != -1 && (idx_out < -1000000000000LL || idx_out > 1000000000000LL),
              "an int64 before the sync is huge and not -1: %lld", (long long)idx_out);
    TU_EXPECT(isnan(sq_out), "a double before the sync is NaN: %g", sq_out);
    TU_EXPECT(i32_out[0] == -720908 && i32_out[2] == -720908, "int32 poison: %d", i32_out[0]);
    TU_EXPECT(h_out[0] == 0xFFF4 && h_out[2] == 0xFFF4, "16-bit poison (bf16 and fp16 NaN): %#x",
              h_out[0]);
    /* an event wait lands them as a sync does */
    td_dev_event e = td_dev_event_record();
    td_dev_event_wait(e);
    TU_EXPECT(idx_out == 7 && sq_out == 2.5, "after the event wait: %lld %g", (long long)idx_out, sq_out);
    td_dev_free(d);
    td_dev_free(raw);
}

/* ---- the buffer half ------------------------------------------------------ */

static void test_buffers(void) {
    size_t acts0 = td_mem_current(TD_MEM_ACTS);
    enum { N = 3000 };
    float *a = td_dev_alloc(N * sizeof(float), TD_MEM_ACTS, "a");
    float *b = td_dev_alloc(N * sizeof(float), TD_MEM_ACTS, "b");
    size_t page = (size_t)sysconf(_SC_PAGESIZE), rounded = (N * sizeof(float) + page - 1) / page * page;
    TU_EXPECT(td_mem_current(TD_MEM_ACTS) - acts0 == 2 * rounded,
              "accounted in pages: %zu bytes, want %zu", td_mem_current(TD_MEM_ACTS) - acts0, 2 * rounded);
    /* on the device side of the accounting, beside a host block of the
     * same category (host side, its bytes as asked) */
    td_mem_reset_peaks();
    size_t dev0 = td_mem_peak_device(TD_MEM_ACTS), host0 = td_mem_peak_host(TD_MEM_ACTS);
    void *hb = td_alloc(100, TD_MEM_ACTS);
    float *c = td_dev_alloc(N * sizeof(float), TD_MEM_ACTS, "c");
    TU_EXPECT(td_mem_peak_device(TD_MEM_ACTS) - dev0 == rounded && td_mem_peak_host(TD_MEM_ACTS) - host0 == 100,
              "device side +%zu (want %zu), host side +%zu (want 100)", td_mem_peak_device(TD_MEM_ACTS) - dev0,
              rounded, td_mem_peak_host(TD_MEM_ACTS) - host0);
    td_dev_free(c);
    td_free(hb);
    TU_EXPECT(td_dev_footprint(N * sizeof(float)) == rounded && td_dev_footprint(0) == page &&
                  td_dev_footprint(page) == page,
              "td_dev_footprint says the pages: %zu for %zu bytes", td_dev_footprint(N * sizeof(float)),
              (size_t)N * sizeof(float));
    TU_EXPECT(((uintptr_t)a % page) == 0, "page-aligned");
    const char *name = NULL;
    size_t off = 0;
    TU_EXPECT(td_dev_is_device(a + 10, &name, &off) && strcmp(name, "a") == 0 && off == 40,
              "is_device names the buffer and offset: %s %zu", name ? name : "-", off);
    TU_EXPECT(!td_dev_is_device(&off, NULL, NULL), "host memory is not device memory");

    float *h = TU_NEW(float, N), *g = TU_NEW(float, N);
    td_dev_traffic_reset();
    td_dev_download(g, a, N * sizeof(float), TD_HOST_EVAL);
    td_dev_sync();
    tu_check_zero("alloc is zeroed", g, N);

    for (int i = 0; i < N; i++) h[i] = (float)i;
    td_dev_upload(a, h, N * sizeof(float), TD_HOST_INIT);
    td_dev_copy(b, a, N * sizeof(float));
    td_dev_zero(b + 100, 50 * sizeof(float));
    td_dev_download(g, b, N * sizeof(float), TD_HOST_EVAL);
    td_dev_sync();
    for (int i = 100; i < 150; i++) h[i] = 0;
    tu_check_bitwise("upload, copy, zero, download", g, h, N);

    /* 2-D: 10 rows of 7 floats, pitches 30 and 20 floats */
    td_dev_copy_2d(b, 20 * sizeof(float), a, 30 * sizeof(float), 7 * sizeof(float), 10);
    float *h2 = TU_NEW(float, 70);
    td_dev_download_2d(h2, 7 * sizeof(float), b, 20 * sizeof(float), 7 * sizeof(float), 10, TD_HOST_EXPORT);
    td_dev_sync();
    int bad = 0;
    for (int r = 0; r < 10; r++)
        for (int c = 0; c < 7; c++) bad += h2[r * 7 + c] != (float)(r * 30 + c);
    TU_EXPECT(bad == 0, "copy_2d and download_2d: %d wrong", bad);
    for (int i = 0; i < 70; i++) h2[i] = -(float)i;
    td_dev_upload_2d(a + 1, 40 * sizeof(float), h2, 7 * sizeof(float), 7 * sizeof(float), 10, TD_HOST_CKPT);
    td_dev_download(g, a, N * sizeof(float), TD_HOST_EVAL);
    td_dev_sync();
    bad = 0;
    for (int r = 0; r < 10; r++)
        for (int c = 0; c < 7; c++) bad += g[1 + r * 40 + c] != -(float)(r * 7 + c);
    bad += g[0] != 0.0f || g[8] != 8.0f;
    TU_EXPECT(bad == 0, "upload_2d: %d wrong", bad);

    td_host_traffic t;
    td_dev_traffic(&t);
    size_t fb = N * sizeof(float);
    TU_EXPECT(t.up_bytes[TD_HOST_INIT] == fb && t.up_calls[TD_HOST_INIT] == 1, "init up %llu/%llu",
              (unsigned long long)t.up_bytes[TD_HOST_INIT], (unsigned long long)t.up_calls[TD_HOST_INIT]);
    TU_EXPECT(t.down_bytes[TD_HOST_EVAL] == 3 * fb && t.down_calls[TD_HOST_EVAL] == 3, "eval down %llu/%llu",
              (unsigned long long)t.down_bytes[TD_HOST_EVAL], (unsigned long long)t.down_calls[TD_HOST_EVAL]);
    TU_EXPECT(t.down_bytes[TD_HOST_EXPORT] == 280 && t.down_calls[TD_HOST_EXPORT] == 1, "export down");
    TU_EXPECT(t.up_bytes[TD_HOST_CKPT] == 280 && t.up_calls[TD_HOST_CKPT] == 1, "ckpt up");
    uint64_t others = 0;
    for (int p = 0; p < TD_HOST_NPURPOSE; p++)
        if (p != TD_HOST_INIT && p != TD_HOST_CKPT) others += t.up_bytes[p] + t.up_calls[p];
    for (int p = 0; p < TD_HOST_NPURPOSE; p++)
        if (p != TD_HOST_EVAL && p != TD_HOST_EXPORT) others += t.down_bytes[p] + t.down_calls[p];
    TU_EXPECT(others == 0, "device-side copies and fills count no host traffic (%llu)",
              (unsigned long long)others);
    td_dev_traffic_reset();
    td_dev_traffic(&t);
    TU_EXPECT(t.down_calls[TD_HOST_EVAL] == 0, "reset");
    td_dev_download_2d(h2, 0, b, 0, 0, 3, TD_HOST_EXPORT); /* rows of width 0: nothing to copy */
    td_dev_sync();

    td_dev_free(a);
    td_dev_free(b);
    TU_EXPECT(td_mem_current(TD_MEM_ACTS) == acts0, "freed: accounting back to %zu", acts0);
}

/* ---- ops: guard bitwise equal to the CPU row ----------------------------- */

/* An op test: slots of float or activation (row type) elements, all random;
 * call runs the op(s) on the slots' pointers. The CPU row runs on host
 * copies, the guard row on device copies; every slot must come back with
 * the same bytes. */
enum { NN = 24, C = 32, OC = 48, B = 2, T = 12, NH = 4, HS = 8, VOC = 16 };
enum { F32 = 0, ACT = 1, IDS = 2 }; /* a slot of floats, of the row's type, of ids < VOC */
typedef struct {
    size_t n;
    int act;
} slot;
typedef void (*op_call)(const td_ops *o, void **p);

static void run_op(const char *what, td_ktype k, const slot *s, int ns, op_call call) {
    const td_ops *cpu = td_ops_cpu(k), *dev = td_ops_for(k);
    TU_EXPECT(dev != cpu && dev->k == k, "%s: the guard has its own row", what);
    void *hp[16], *dp[16], *back[16];
    size_t bytes[16];
    int mark = tu_mark();
    for (int i = 0; i < ns; i++) {
        bytes[i] = s[i].n * (s[i].act == ACT ? cpu->es : sizeof(float));
        float *f = TU_NEW(float, s[i].n);
        tu_randn(f, s[i].n, 100 + (uint64_t)i, 1.0f);
        hp[i] = tu_alloc(bytes[i]);
        if (s[i].act == ACT)
            cpu->round_n(hp[i], f, s[i].n);
        else if (s[i].act == IDS)
            tu_rand_ints(hp[i], s[i].n, 100 + (uint64_t)i, VOC);
        else
            memcpy(hp[i], f, bytes[i]);
        dp[i] = td_dev_alloc(bytes[i], s[i].act == ACT ? TD_MEM_ACTS : TD_MEM_PARAMS, what);
        td_dev_upload(dp[i], hp[i], bytes[i], TD_HOST_OTHER);
        back[i] = tu_alloc(bytes[i]);
    }
    call(cpu, hp);
    call(dev, dp);
    for (int i = 0; i < ns; i++) td_dev_download(back[i], dp[i], bytes[i], TD_HOST_OTHER);
    td_dev_sync();
    int same = 1;
    for (int i = 0; i < ns; i++) {
        same &= memcmp(back[i], hp[i], bytes[i]) == 0;
        td_dev_free(dp[i]);
    }
    TU_EXPECT(same, "%s (%s row): guard bitwise equal to the CPU", what, k == TD_K_F32 ? "f32" : k == TD_K_BF16 ? "bf16" : "f16");
    tu_release(mark);
}


static void call_mm(const td_ops *o, void **p) {
    o->mm_fwd(p[0], o->k, p[1], p[2], p[3], NN, C, OC);
    o->mm_bwd(p[4], o->k, p[5], p[6], p[7], p[1], p[2], NN, C, OC);
}
static void call_ln(const td_ops *o, void **p) {
    o->ln_fwd(p[0], p[1], p[2], p[3], p[4], p[5], NN, C);
    o->ln_bwd(p[6], p[7], p[8], p[9], p[3], p[4], p[1], p[2], NN, C);
}
static void call_att(const td_ops *o, void **p) {
    td_attn_shape s = {B, T, T, NH, NH, HS, 3 * NH * HS, 3 * NH * HS, NH * HS, 0, 0, TD_ATTN_CAUSAL, 0, 0, NULL, 0};
    size_t c = (size_t)NH * HS * o->es;
    char *qkv = p[2], *dqkv = p[3];
    o->att_fwd(p[0], p[1], qkv, qkv + c, qkv + 2 * c, &s, 0);
    o->att_bwd(dqkv, dqkv + c, dqkv + 2 * c, p[4], p[0], p[1], qkv, qkv + c, qkv + 2 * c, &s);
}
static void call_elementwise(const td_ops *o, void **p) {
    o->gelu_fwd(p[0], p[1], (size_t)NN * C);
    o->gelu_bwd(p[2], p[1], p[0], (size_t)NN * C);
    o->res_fwd(p[3], p[0], p[2], (size_t)NN * C);
}
/* fp32 in every row: embedding and the vocab-parallel cross-entropy. */
static void call_emb_xent(const td_ops *o, void **p) {
    o->emb_fwd(p[0], p[1], p[2], 0, VOC, NN, C);
    o->emb_bwd(p[3], p[0], p[1], 0, VOC, NN, C);
    o->xent_max(p[4], p[5], NN, VOC - 2, VOC);
    o->xent_exp_sum(p[6], p[7], p[8], p[5], p[4], p[1], 0, NN, VOC - 2, VOC);
    o->xent_finish(p[9], p[8], p[6], p[7], p[4], p[1], NN, VOC - 2, VOC);
    o->xent_bwd(p[10], p[8], p[1], 0, p[9], NN, VOC - 2, VOC);
}

static void test_ops(void) {
    for (int k = 0; k < 3; k++) {
        slot mm[8] = {{NN * OC, ACT}, {NN * C, ACT}, {OC * C, ACT}, {OC, F32},
                      {NN * C, ACT},  {OC * C, F32}, {OC, F32},   {NN * OC, ACT}};
        run_op("matmul forward and backward", k, mm, 8, call_mm);
        slot ln[10] = {{NN * C, 1}, {NN, 0}, {NN, 0}, {NN * C, 1}, {C, 0},
                       {C, 0},      {NN * C, 1}, {C, 0}, {C, 0},  {NN * C, 1}};
        run_op("layernorm forward and backward", k, ln, 10, call_ln);
        size_t nq = (size_t)B * T * NH * HS;
        slot att[5] = {{nq, 1}, {(size_t)B * NH * T, 0}, {3 * nq, 1}, {3 * nq, 1}, {nq, 1}};
        run_op("attention forward and backward", k, att, 5, call_att);
        slot ew[4] = {{NN * C, ACT}, {NN * C, ACT}, {NN * C, ACT}, {NN * C, ACT}};
        run_op("gelu and residual", k, ew, 4, call_elementwise);
        slot ex[11] = {{NN * C, F32}, {NN, IDS},  {VOC * C, F32},  {VOC * C, F32},
                       {NN, F32},     {NN * VOC, F32}, {NN, F32}, {NN, F32},
                       {NN * VOC, F32}, {NN, F32}, {NN * VOC, F32}};
        run_op("embedding and cross-entropy", k, ex, 11, call_emb_xent);
    }
    /* every entry the CPU has, the guard has; none it lacks */
    for (int k = 0; k < 3; k++) {
        const td_ops *cpu = td_ops_cpu(k), *dev = td_ops_for(k);
        size_t first = offsetof(td_ops, round_n), n = (sizeof(td_ops) - first) / sizeof(void (*)(void));
        int bad = 0;
        for (size_t i = 0; i < n; i++) {
            void (*a)(void), (*b)(void);
            memcpy(&a, (const char *)dev + first + i * sizeof a, sizeof a);
            memcpy(&b, (const char *)cpu + first + i * sizeof b, sizeof b);
            bad += (a == NULL) != (b == NULL) || (a && a == b);
        }
        TU_EXPECT(bad == 0 && dev->es == cpu->es, "row %d: a wrapper for every CPU entry (%d wrong)", k, bad);
    }
}

int main(void) {
    td_backend_use(TD_DEVICE_GUARD);
    TU_EXPECT(td_backend_device() == TD_DEVICE_GUARD && td_backend_is_device(), "the guard is the backend");
    /* children first: forking after OpenMP has started its threads is not safe */
    test_planted_host_read();
    test_nesting();
    test_planted_early_read();
    test_buffers();
    test_ops();
    return tu_finish("test_guard");
}
