/* bf16 and fp16 linear layers through oneDNN's matmul primitive
 * (kernels_bf16.h, kernels_f16.h). One implementation: the element type is
 * part of each GEMM's key, and the public bf16 / fp16 functions are
 * wrappers naming it.
 *
 * Every GEMM of the layer is one form, C[M,N] (+)= A[M,K] @ B[K,N], with A
 * and B read through strides (transposed views cost nothing):
 *   forward  out = inp @ w^T:   A = inp [N,C],     B = w viewed [C,OC]
 *   dinp    += dout @ w:        A = dout [N,OC],   B = w [OC,C]
 *   dw      += dout^T @ inp:    A = dout viewed [OC,N], B = inp [N,C]
 * "+=" is oneDNN's sum post-op (dst = acc + dst, the accumulator fp32), so
 * dw accumulates in the fp32 master-grad buffer without a bf16 rounding.
 *
 * Primitives are cached by (shape, views, data types, bias, sum, threads)
 * and created once: creation costs ~0.1-1 ms (JIT) against ~0.1-5 ms per
 * GEMM. The thread count is part of the key because oneDNN's brgemm matmul
 * fixes its work partition for the thread count at creation. oneDNN runs on
 * the same libgomp as our kernels (its threading runtime is OpenMP) and
 * takes its thread count from omp_get_max_threads(); we set that to
 * td_kernels_threads() around creation and execution and restore it, so it
 * follows td_kernels_set_threads. OpenBLAS stays pinned to one thread
 * (threads.c), so the two never run pools at the same time.
 *
 * The scratchpad is user-managed: one buffer from td_alloc, grown to the
 * largest need, so the accounting allocator sees oneDNN's workspace (its
 * copies of B in blocked layout live there).
 *
 * Where oneDNN has no kernel for a 16-bit type (fp16 in oneDNN 2.6.3 on
 * this avx512_core_bf16 CPU: creation reports "unimplemented"; bf16 below
 * AVX-512), the GEMM is "converted": its 16-bit operands are copied to
 * fp32 once per GEMM and the fp32 primitive of the same shape runs; a
 * 16-bit C is converted in (when summed into) and rounded back once.
 * Products of fp16 (11-bit) or bf16 (8-bit) values are exact in fp32, so
 * this computes what a native kernel with fp32 accumulation would, up to
 * the order of the sums. The copies live in one persistent buffer
 * (td_alloc, TD_MEM_OTHER) grown to the largest need,
 * td_matmul_f16_convert_bytes of the largest shape: a fresh allocation per
 * call cost as much as the GEMM itself (page faults and zeroing of ~10 MB:
 * 9 ms against 18 ms for the qkv forward at 1 thread, on the loaded shared
 * machine), the conversions themselves ~0.5 ms. */
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "trident/base.h"
#include "trident/kernels_bf16.h"

#define DN_CHECK(call)                                                                    \
    do {                                                                                  \
        dnnl_status_t st_ = (call);                                                       \
        TD_CHECK(st_ == dnnl_success, "oneDNN call %s failed (status %d)", #call, (int)st_); \
    } while (0)

typedef struct {
    int M, K, N;
    int a_trans, b_trans; /* A stored [K,M] / B stored [N,K] */
    td_ktype ta, tb, tc;
    int bias, sum, threads;
} gemm_key;

typedef struct {
    gemm_key key;
    int converted; /* no oneDNN kernel for these types: run the fp32 entry */
    dnnl_primitive_t prim;
    dnnl_memory_t a, b, c, bias, scratch;
    size_t scratch_bytes;
    char impl[96];
} gemm_entry;

#define DN_MAX_ENTRIES 256 /* a model needs ~5 shapes x 3 kinds per thread count */
static gemm_entry g_cache[DN_MAX_ENTRIES];
static int g_entries = 0;
static dnnl_engine_t g_engine;
static dnnl_stream_t g_stream;
static void *g_scratch;
static size_t g_scratch_bytes;
static float *g_conv; /* fp32 copies of a converting GEMM's 16-bit operands */
static size_t g_conv_bytes;

static void dn_init(void) {
    if (g_engine) return;
    DN_CHECK(dnnl_engine_create(&g_engine, dnnl_cpu, 0));
    DN_CHECK(dnnl_stream_create(&g_stream, g_engine, dnnl_stream_default_flags));
}

static dnnl_data_type_t dn_type(td_ktype t) {
    return t == TD_K_BF16 ? dnnl_bf16 : t == TD_K_F16 ? dnnl_f16 : dnnl_f32;
}

static const char *tname(td_ktype t) {
    return t == TD_K_BF16 ? "bf16" : t == TD_K_F16 ? "f16" : "f32";
}

/* The 16-bit operand type of a key (TD_K_F32 when all fp32). */
static td_ktype lowp_of(const gemm_key *k) { return k->ta != TD_K_F32 ? k->ta : k->tb; }

/* rows x cols matrix, row-major, or the transposed view of a row-major
 * [cols, rows] array. */
static void dn_md(dnnl_memory_desc_t *md, int rows, int cols, int trans, td_ktype t) {
    dnnl_dims_t dims = {rows, cols};
    dnnl_dims_t strides = {trans ? 1 : cols, trans ? rows : 1};
    DN_CHECK(dnnl_memory_desc_init_by_strides(md, 2, dims, dn_type(t), strides));
}

/* Creates the primitive for k; returns 0 when oneDNN has no implementation
 * for these data types on this CPU but its reference loops (bf16 before
 * AVX-512: under ONEDNN_MAX_CPU_ISA=AVX2 here it reports unimplemented;
 * fp16 here, in 2.6.3). */
static int dn_create(gemm_entry *e) {
    const gemm_key *k = &e->key;
    dnnl_memory_desc_t a_md, b_md, c_md, bias_md;
    dn_md(&a_md, k->M, k->K, k->a_trans, k->ta);
    dn_md(&b_md, k->K, k->N, k->b_trans, k->tb);
    dn_md(&c_md, k->M, k->N, 0, k->tc);
    dn_md(&bias_md, 1, k->N, 0, TD_K_F32);
    dnnl_matmul_desc_t desc;
    DN_CHECK(dnnl_matmul_desc_init(&desc, &a_md, &b_md, k->bias ? &bias_md : NULL, &c_md));
    dnnl_primitive_attr_t attr;
    DN_CHECK(dnnl_primitive_attr_create(&attr));
    DN_CHECK(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user));
    dnnl_post_ops_t po = NULL;
    if (k->sum) {
        DN_CHECK(dnnl_post_ops_create(&po));
        DN_CHECK(dnnl_post_ops_append_sum(po, 1.0f));
        DN_CHECK(dnnl_primitive_attr_set_post_ops(attr, po));
    }
    dnnl_primitive_desc_t pd;
    dnnl_status_t st = dnnl_primitive_desc_create(&pd, &desc, attr, g_engine, NULL);
    if (po) dnnl_post_ops_destroy(po);
    dnnl_primitive_attr_destroy(attr);
    if (st == dnnl_unimplemented) return 0;
    DN_CHECK(st);
    const char *impl = NULL;
    DN_CHECK(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl));
    snprintf(e->impl, sizeof e->impl, "%s", impl ? impl : "?");
    /* oneDNN's reference loops ("ref:any") take any type but run ~100x
     * slower than converting to fp32 and using its fp32 GEMM. */
    if (!strncmp(e->impl, "ref", 3) && lowp_of(k) != TD_K_F32) {
        dnnl_primitive_desc_destroy(pd);
        return 0;
    }
    const dnnl_memory_desc_t *sp = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    e->scratch_bytes = sp ? dnnl_memory_desc_get_size(sp) : 0;
    DN_CHECK(dnnl_primitive_create(&e->prim, pd));
    DN_CHECK(dnnl_memory_create(&e->a, &a_md, g_engine, DNNL_MEMORY_NONE));
    DN_CHECK(dnnl_memory_create(&e->b, &b_md, g_engine, DNNL_MEMORY_NONE));
    DN_CHECK(dnnl_memory_create(&e->c, &c_md, g_engine, DNNL_MEMORY_NONE));
    if (k->bias) DN_CHECK(dnnl_memory_create(&e->bias, &bias_md, g_engine, DNNL_MEMORY_NONE));
    if (e->scratch_bytes) DN_CHECK(dnnl_memory_create(&e->scratch, sp, g_engine, DNNL_MEMORY_NONE));
    dnnl_primitive_desc_destroy(pd);
    return 1;
}

static gemm_entry *dn_lookup(const gemm_key *k) {
    for (int i = 0; i < g_entries; i++)
        if (!memcmp(&g_cache[i].key, k, sizeof *k)) return &g_cache[i];
    TD_CHECK(g_entries < DN_MAX_ENTRIES,
             "internal: more than %d distinct oneDNN GEMM shapes cached; td_matmul_bf16_release between "
             "shape sweeps", DN_MAX_ENTRIES);
    dn_init();
    gemm_entry *e = &g_cache[g_entries++];
    memset(e, 0, sizeof *e);
    e->key = *k;
    if (!dn_create(e)) {
        td_ktype t = lowp_of(k);
        TD_ASSERT(t != TD_K_F32);
        e->converted = 1;
        snprintf(e->impl, sizeof e->impl, "no %s matmul on this CPU: %s converted to f32",
                 tname(t), tname(t));
    }
    if (e->scratch_bytes > g_scratch_bytes) {
        td_free(g_scratch);
        g_scratch = td_alloc(e->scratch_bytes, TD_MEM_OTHER);
        g_scratch_bytes = e->scratch_bytes;
    }
    return e;
}

/* n 16-bit elements of type t to fp32 and back (bulk, threaded). */
static void lowp_to_f32(float *dst, const void *src, td_ktype t, size_t n) {
    if (t == TD_K_BF16)
        td_bf16_to_float_n(dst, src, n);
    else
        td_f16_to_float_n(dst, src, n);
}
static void lowp_from_f32(void *dst, td_ktype t, const float *src, size_t n) {
    if (t == TD_K_BF16)
        td_bf16_from_float_n(dst, src, n);
    else
        td_f16_from_float_n(dst, src, n);
}

/* Floats reserved in g_conv for an operand of n elements of type t: none
 * when fp32, else n rounded up to whole 64-byte lines (each copy starts
 * aligned for oneDNN's loads). */
static size_t conv_floats(td_ktype t, size_t n) { return t == TD_K_F32 ? 0 : (n + 15) / 16 * 16; }

/* The fp32 image of n elements of type t: the pointer itself when fp32,
 * else a copy at *next in g_conv (advanced past it). */
static float *as_f32(const void *p, td_ktype t, size_t n, float **next) {
    if (t == TD_K_F32) return (float *)p;
    float *f = *next;
    *next += conv_floats(t, n);
    lowp_to_f32(f, p, t, n);
    return f;
}

size_t td_matmul_f16_convert_bytes(int N, int C, int OC) {
    /* forward: inp, w, out; dinp: dout, w, dinp; dw: dout, inp (+ fp32 dw) */
    return sizeof(float) * (conv_floats(TD_K_F16, (size_t)N * C) +
                            conv_floats(TD_K_F16, (size_t)OC * C) +
                            conv_floats(TD_K_F16, (size_t)N * OC));
}

size_t td_matmul_convert_scratch_bytes(void) { return g_conv_bytes; }

static void dn_gemm(const gemm_key *k0, void *c, const void *a, const void *b, const float *bias) {
    gemm_key k = *k0;
    k.threads = td_kernels_threads();
    int saved = omp_get_max_threads();
    omp_set_num_threads(k.threads);
    gemm_entry *e = dn_lookup(&k);
    if (e->converted) {
        /* Without a 16-bit kernel: convert the operands (and a 16-bit C
         * that is summed into) to fp32 in g_conv, run the fp32 primitive,
         * round C back. */
        size_t na = (size_t)k.M * k.K, nb = (size_t)k.K * k.N, nc = (size_t)k.M * k.N;
        size_t need = sizeof(float) * (conv_floats(k.ta, na) + conv_floats(k.tb, nb) +
                                       conv_floats(k.tc, nc));
        if (need > g_conv_bytes) {
            td_free(g_conv);
            g_conv = td_alloc(need, TD_MEM_OTHER);
            g_conv_bytes = need;
        }
        float *next = g_conv;
        const float *pa = as_f32(a, k.ta, na, &next), *pb = as_f32(b, k.tb, nb, &next);
        float *pc = k.tc == TD_K_F32 ? c : next;
        if (k.tc != TD_K_F32 && k.sum) lowp_to_f32(pc, c, k.tc, nc);
        gemm_key kf = k;
        kf.ta = kf.tb = kf.tc = TD_K_F32;
        omp_set_num_threads(saved);
        dn_gemm(&kf, pc, pa, pb, bias);
        if (k.tc != TD_K_F32) lowp_from_f32(c, k.tc, pc, nc);
        return;
    }
    DN_CHECK(dnnl_memory_set_data_handle(e->a, (void *)a));
    DN_CHECK(dnnl_memory_set_data_handle(e->b, (void *)b));
    DN_CHECK(dnnl_memory_set_data_handle(e->c, c));
    dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, e->a}, {DNNL_ARG_WEIGHTS, e->b}, {DNNL_ARG_DST, e->c}};
    int nargs = 3;
    if (k.bias) {
        DN_CHECK(dnnl_memory_set_data_handle(e->bias, (void *)bias));
        args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, e->bias};
    }
    if (e->scratch) {
        DN_CHECK(dnnl_memory_set_data_handle(e->scratch, g_scratch));
        args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, e->scratch};
    }
    DN_CHECK(dnnl_primitive_execute(e->prim, g_stream, nargs, args));
    DN_CHECK(dnnl_stream_wait(g_stream));
    omp_set_num_threads(saved);
}

/* The layer's forward with 16-bit operands of type t. */
static void lowp_forward(td_ktype t, void *out, td_ktype out_type, const void *inp, const void *w,
                         const float *bias, int N, int C, int OC) {
    gemm_key k = {.M = N, .K = C, .N = OC, .b_trans = 1, .ta = t, .tb = t, .tc = out_type,
                  .bias = bias != NULL};
    dn_gemm(&k, out, inp, w, bias);
}

void td_matmul_dnnl_f32_forward(float *out, const float *inp, const float *w, const float *bias,
                                int N, int C, int OC) {
    gemm_key k = {.M = N, .K = C, .N = OC, .b_trans = 1, .ta = TD_K_F32, .tb = TD_K_F32,
                  .tc = TD_K_F32, .bias = bias != NULL};
    dn_gemm(&k, out, inp, w, bias);
}

void td_matmul_dnnl_f32_backward(float *dinp, float *dw, const float *dout, const float *inp,
                                 const float *w, int N, int C, int OC) {
    if (dinp) {
        gemm_key k = {.M = N, .K = OC, .N = C, .ta = TD_K_F32, .tb = TD_K_F32, .tc = TD_K_F32,
                      .sum = 1};
        dn_gemm(&k, dinp, dout, w, NULL);
    }
    if (dw) {
        gemm_key k = {.M = OC, .K = N, .N = C, .a_trans = 1, .ta = TD_K_F32, .tb = TD_K_F32,
                      .tc = TD_K_F32, .sum = 1};
        dn_gemm(&k, dw, dout, inp, NULL);
    }
}

/* dbias[o] += sum over rows of dout[:, o], in double per 64 columns (as the
 * fp32 kernel), rows in order: the same bits for any thread count. */
static void dbias_lowp(float *dbias, const void *dout, td_ktype t, int N, int OC) {
    int nt = td_k_threads_for((size_t)N * OC);
    int nblk = (OC + 63) / 64;
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (int blk = 0; blk < nblk; blk++) {
        int j0 = blk * 64, len = j0 + 64 < OC ? 64 : OC - j0;
        double acc[64] = {0};
        if (t == TD_K_BF16) { /* bf16 widens by a shift: inline, so the loop vectorises */
            const uint16_t *d = dout;
            for (int n = 0; n < N; n++) {
                const uint16_t *r = d + (size_t)n * OC + j0;
                for (int j = 0; j < len; j++) {
                    uint32_t u = (uint32_t)r[j] << 16;
                    float f;
                    memcpy(&f, &u, 4);
                    acc[j] += f;
                }
            }
        } else {
            const td_f16 *d = dout;
            for (int n = 0; n < N; n++)
                for (int j = 0; j < len; j++) acc[j] += td_f16_to_float(d[(size_t)n * OC + j0 + j]);
        }
        for (int j = 0; j < len; j++) dbias[j0 + j] = (float)(dbias[j0 + j] + acc[j]);
    }
}

static void lowp_backward(td_ktype t, void *dinp, td_ktype dinp_type, float *dw, float *dbias,
                          const void *dout, const void *inp, const void *w, int N, int C, int OC) {
    if (dinp) {
        gemm_key k = {.M = N, .K = OC, .N = C, .ta = t, .tb = t, .tc = dinp_type, .sum = 1};
        dn_gemm(&k, dinp, dout, w, NULL);
    }
    if (dw) {
        gemm_key k = {.M = OC, .K = N, .N = C, .a_trans = 1, .ta = t, .tb = t, .tc = TD_K_F32,
                      .sum = 1};
        dn_gemm(&k, dw, dout, inp, NULL);
    }
    if (dbias) dbias_lowp(dbias, dout, t, N, OC);
}

void td_matmul_bf16_forward(void *out, td_ktype out_type, const td_bf16 *inp, const td_bf16 *w,
                            const float *bias, int N, int C, int OC) {
    lowp_forward(TD_K_BF16, out, out_type, inp, w, bias, N, C, OC);
}
void td_matmul_bf16_backward(void *dinp, td_ktype dinp_type, float *dw, float *dbias,
                             const td_bf16 *dout, const td_bf16 *inp, const td_bf16 *w, int N,
                             int C, int OC) {
    lowp_backward(TD_K_BF16, dinp, dinp_type, dw, dbias, dout, inp, w, N, C, OC);
}
void td_matmul_f16_forward(void *out, td_ktype out_type, const td_f16 *inp, const td_f16 *w,
                           const float *bias, int N, int C, int OC) {
    lowp_forward(TD_K_F16, out, out_type, inp, w, bias, N, C, OC);
}
void td_matmul_f16_backward(void *dinp, td_ktype dinp_type, float *dw, float *dbias,
                            const td_f16 *dout, const td_f16 *inp, const td_f16 *w, int N, int C,
                            int OC) {
    lowp_backward(TD_K_F16, dinp, dinp_type, dw, dbias, dout, inp, w, N, C, OC);
}

/* ---- slot GEMMs: many small ones from inside a caller's parallel tasks ---- */

/* Per-slot execution state of one cached GEMM (internal.h): memory objects
 * and scratchpad may not be shared by concurrent executions, the primitive
 * may. Streams are per slot for all slot GEMMs. */
struct td_slot_gemm {
    gemm_entry *e;   /* the GEMM's entry (one thread) */
    gemm_entry *run; /* what executes: e, or the fp32 entry when e is converted */
    int slots;
    dnnl_memory_t (*mem)[4]; /* [slots]: a, b, c, scratchpad */
    void **scratch;          /* [slots] scratchpad buffers */
    float **conv;            /* [slots] fp32 copies of A and B (converted only) */
};

/* 3 per (16-bit type, head size, attention block pair): a run meets a
 * few; the tests' sweeps of shapes the most */
#define DN_MAX_SLOT_GEMMS 128
#define DN_MAX_SLOTS 256
static struct td_slot_gemm g_slot_gemm[DN_MAX_SLOT_GEMMS];
static int g_slot_gemms;
static dnnl_stream_t g_slot_stream[DN_MAX_SLOTS];

/* The entry of k created for one thread: oneDNN fixes a primitive's work
 * split for omp_get_max_threads() at creation, and slot GEMMs run
 * single-threaded inside the caller's tasks. */
static gemm_entry *lookup_1t(const gemm_key *k) {
    int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    gemm_entry *e = dn_lookup(k);
    omp_set_num_threads(saved);
    return e;
}

static void slot_grow(struct td_slot_gemm *g, int slots) {
    const gemm_key *k = &g->run->key;
    dnnl_memory_desc_t md[4];
    dn_md(&md[0], k->M, k->K, k->a_trans, k->ta);
    dn_md(&md[1], k->K, k->N, k->b_trans, k->tb);
    dn_md(&md[2], k->M, k->N, 0, k->tc);
    if (g->run->scratch) {
        const dnnl_memory_desc_t *sp;
        DN_CHECK(dnnl_memory_get_memory_desc(g->run->scratch, &sp));
        md[3] = *sp;
    }
    g->mem = realloc(g->mem, sizeof *g->mem * (size_t)slots);
    g->scratch = realloc(g->scratch, sizeof *g->scratch * (size_t)slots);
    g->conv = realloc(g->conv, sizeof *g->conv * (size_t)slots);
    TD_CHECK(g->mem && g->scratch && g->conv, "out of memory (slot GEMM state)");
    size_t conv = g->e->converted ? (size_t)k->M * k->K + (size_t)k->K * k->N + 16 : 0;
    for (int i = g->slots; i < slots; i++) {
        for (int j = 0; j < 3; j++)
            DN_CHECK(dnnl_memory_create(&g->mem[i][j], &md[j], g_engine, DNNL_MEMORY_NONE));
        g->scratch[i] =
            g->run->scratch_bytes ? td_alloc(g->run->scratch_bytes, TD_MEM_OTHER) : NULL;
        g->mem[i][3] = NULL;
        if (g->scratch[i])
            DN_CHECK(dnnl_memory_create(&g->mem[i][3], &md[3], g_engine, g->scratch[i]));
        g->conv[i] = conv ? td_alloc(conv * sizeof(float), TD_MEM_OTHER) : NULL;
        if (!g_slot_stream[i])
            DN_CHECK(dnnl_stream_create(&g_slot_stream[i], g_engine, dnnl_stream_default_flags));
    }
    g->slots = slots;
}

td_slot_gemm *td_dn_slot_gemm(td_ktype t, int M, int K, int N, int a_trans, int b_trans, int sum,
                              int slots) {
    TD_ASSERT(slots >= 1 && slots <= DN_MAX_SLOTS);
    gemm_key k = {.M = M,
                  .K = K,
                  .N = N,
                  .a_trans = a_trans,
                  .b_trans = b_trans,
                  .ta = t,
                  .tb = t,
                  .tc = TD_K_F32,
                  .sum = sum,
                  .threads = 1};
    struct td_slot_gemm *g = NULL;
    for (int i = 0; i < g_slot_gemms && !g; i++)
        if (!memcmp(&g_slot_gemm[i].e->key, &k, sizeof k)) g = &g_slot_gemm[i];
    if (!g) {
        TD_CHECK(g_slot_gemms < DN_MAX_SLOT_GEMMS,
                 "internal: more than %d distinct slot GEMM shapes (attention's 16-bit block products); "
                 "td_matmul_bf16_release between shape sweeps", DN_MAX_SLOT_GEMMS);
        g = &g_slot_gemm[g_slot_gemms++];
        memset(g, 0, sizeof *g);
        g->e = g->run = lookup_1t(&k);
        if (g->e->converted) {
            gemm_key kf = k;
            kf.ta = kf.tb = TD_K_F32;
            g->run = lookup_1t(&kf);
        }
    }
    if (slots > g->slots) slot_grow(g, slots);
    return g;
}

void td_dn_slot_gemm_run(td_slot_gemm *g, int slot, float *c, const void *a, const void *b) {
    TD_ASSERT(slot >= 0 && slot < g->slots);
    if (g->e->converted) { /* A then B, each from a 64-byte line */
        const gemm_key *k = &g->e->key;
        size_t na = (size_t)k->M * k->K, nb = (size_t)k->K * k->N;
        float *fa = g->conv[slot], *fb = fa + conv_floats(k->ta, na);
        if (k->ta == TD_K_BF16)
            td_bf16_to_float_serial(fa, a, na), td_bf16_to_float_serial(fb, b, nb);
        else
            td_f16_to_float_serial(fa, a, na), td_f16_to_float_serial(fb, b, nb);
        a = fa, b = fb;
    }
    dnnl_memory_t *m = g->mem[slot];
    DN_CHECK(dnnl_memory_set_data_handle(m[0], (void *)a));
    DN_CHECK(dnnl_memory_set_data_handle(m[1], (void *)b));
    DN_CHECK(dnnl_memory_set_data_handle(m[2], c));
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, m[0]},
                               {DNNL_ARG_WEIGHTS, m[1]},
                               {DNNL_ARG_DST, m[2]},
                               {DNNL_ARG_SCRATCHPAD, m[3]}};
    /* One thread also outside a parallel region (the caller's one-thread
     * case): oneDNN's gemm-based fp32 matmul (the converting fallback)
     * takes its thread count at execution, and more would change its
     * summation order with the caller's thread count. */
    int saved = omp_get_max_threads();
    if (saved != 1) omp_set_num_threads(1);
    DN_CHECK(dnnl_primitive_execute(g->run->prim, g_slot_stream[slot], m[3] ? 4 : 3, args));
    DN_CHECK(dnnl_stream_wait(g_slot_stream[slot]));
    if (saved != 1) omp_set_num_threads(saved);
}

static void slot_release(void) {
    for (int i = 0; i < g_slot_gemms; i++) {
        struct td_slot_gemm *g = &g_slot_gemm[i];
        for (int s = 0; s < g->slots; s++) {
            for (int j = 0; j < 4; j++)
                if (g->mem[s][j]) dnnl_memory_destroy(g->mem[s][j]);
            td_free(g->scratch[s]);
            td_free(g->conv[s]);
        }
        free(g->mem), free(g->scratch), free(g->conv);
    }
    g_slot_gemms = 0;
    for (int i = 0; i < DN_MAX_SLOTS; i++)
        if (g_slot_stream[i]) dnnl_stream_destroy(g_slot_stream[i]), g_slot_stream[i] = NULL;
}

/* ---- reference: fp32 copies through the plain loops ---- */

static float *to_f32_copy(const void *p, td_ktype t, size_t n) {
    float *f = td_alloc(n * sizeof(float), TD_MEM_OTHER);
    for (size_t i = 0; i < n; i++) {
        if (t == TD_K_F32)
            f[i] = ((const float *)p)[i];
        else if (t == TD_K_BF16)
            f[i] = td_bf16_to_float(((const td_bf16 *)p)[i]);
        else
            f[i] = td_f16_to_float_ref(((const td_f16 *)p)[i]);
    }
    return f;
}

static void store(void *dst, td_ktype t, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (t == TD_K_F32)
            ((float *)dst)[i] = src[i];
        else if (t == TD_K_BF16)
            ((td_bf16 *)dst)[i] = td_bf16_from_float_ref(src[i]);
        else
            ((td_f16 *)dst)[i] = td_f16_from_float_ref(src[i]);
    }
}

static void lowp_forward_ref(td_ktype t, void *out, td_ktype out_type, const void *inp,
                             const void *w, const float *bias, int N, int C, int OC) {
    float *fi = to_f32_copy(inp, t, (size_t)N * C), *fw = to_f32_copy(w, t, (size_t)OC * C);
    float *fo = td_alloc((size_t)N * OC * sizeof(float), TD_MEM_OTHER);
    td_matmul_forward_ref(fo, fi, fw, bias, N, C, OC);
    store(out, out_type, fo, (size_t)N * OC);
    td_free(fi);
    td_free(fw);
    td_free(fo);
}

static void lowp_backward_ref(td_ktype t, void *dinp, td_ktype dinp_type, float *dw, float *dbias,
                              const void *dout, const void *inp, const void *w, int N, int C,
                              int OC) {
    float *fd = to_f32_copy(dout, t, (size_t)N * OC), *fi = to_f32_copy(inp, t, (size_t)N * C);
    float *fw = to_f32_copy(w, t, (size_t)OC * C);
    /* the fp32 ref adds into dinp: start from its current value */
    float *fdi = dinp ? to_f32_copy(dinp, dinp_type, (size_t)N * C) : NULL;
    td_matmul_backward_ref(fdi, dw, dbias, fd, fi, fw, N, C, OC);
    if (dinp) store(dinp, dinp_type, fdi, (size_t)N * C);
    td_free(fd);
    td_free(fi);
    td_free(fw);
    td_free(fdi);
}

void td_matmul_bf16_forward_ref(void *out, td_ktype out_type, const td_bf16 *inp,
                                const td_bf16 *w, const float *bias, int N, int C, int OC) {
    lowp_forward_ref(TD_K_BF16, out, out_type, inp, w, bias, N, C, OC);
}
void td_matmul_bf16_backward_ref(void *dinp, td_ktype dinp_type, float *dw, float *dbias,
                                 const td_bf16 *dout, const td_bf16 *inp, const td_bf16 *w,
                                 int N, int C, int OC) {
    lowp_backward_ref(TD_K_BF16, dinp, dinp_type, dw, dbias, dout, inp, w, N, C, OC);
}
void td_matmul_f16_forward_ref(void *out, td_ktype out_type, const td_f16 *inp, const td_f16 *w,
                               const float *bias, int N, int C, int OC) {
    lowp_forward_ref(TD_K_F16, out, out_type, inp, w, bias, N, C, OC);
}
void td_matmul_f16_backward_ref(void *dinp, td_ktype dinp_type, float *dw, float *dbias,
                                const td_f16 *dout, const td_f16 *inp, const td_f16 *w, int N,
                                int C, int OC) {
    lowp_backward_ref(TD_K_F16, dinp, dinp_type, dw, dbias, dout, inp, w, N, C, OC);
}

/* ---- reports ---- */

int td_bf16_native(void) {
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    return ((unsigned)isa & (unsigned)dnnl_cpu_isa_avx512_core_bf16) ==
           (unsigned)dnnl_cpu_isa_avx512_core_bf16;
}

/* Probed once: can oneDNN create a non-reference fp16 matmul here? */
int td_f16_native(void) {
    static int native = -1;
    if (native < 0) {
        dn_init();
        gemm_entry e;
        memset(&e, 0, sizeof e);
        e.key = (gemm_key){.M = 16, .K = 16, .N = 16, .ta = TD_K_F16, .tb = TD_K_F16,
                           .tc = TD_K_F32};
        native = dn_create(&e);
        if (native) { /* only the probe: release what it made */
            dnnl_primitive_destroy(e.prim);
            dnnl_memory_t mems[5] = {e.a, e.b, e.c, e.bias, e.scratch};
            for (int j = 0; j < 5; j++)
                if (mems[j]) dnnl_memory_destroy(mems[j]);
        }
    }
    return native;
}

int td_matmul_bf16_describe(void (*fn)(const char *line, void *ctx), void *ctx) {
    char line[256];
    const dnnl_version_t *v = dnnl_version();
    snprintf(line, sizeof line, "oneDNN %d.%d.%d, cpu isa 0x%x: bf16 %s; f16 %s", v->major,
             v->minor, v->patch, (unsigned)dnnl_get_effective_cpu_isa(),
             td_bf16_native() ? "native (avx512_bf16)" : "not native (emulated or converted to fp32)",
             td_f16_native() ? "native" : "converted to f32 (no f16 matmul in oneDNN here)");
    fn(line, ctx);
    for (int i = 0; i < g_entries; i++) {
        const gemm_key *k = &g_cache[i].key;
        snprintf(line, sizeof line, "matmul %dx%dx%d %s%s*%s%s->%s%s%s threads=%d: %s", k->M, k->K,
                 k->N, tname(k->ta), k->a_trans ? "^T" : "", tname(k->tb), k->b_trans ? "^T" : "",
                 tname(k->tc), k->bias ? " +bias" : "", k->sum ? " +=" : "", k->threads,
                 g_cache[i].impl);
        fn(line, ctx);
    }
    return g_entries;
}

size_t td_matmul_bf16_scratch_bytes(void) { return g_scratch_bytes; }

void td_matmul_bf16_release(void) {
    slot_release();
    for (int i = 0; i < g_entries; i++) {
        gemm_entry *e = &g_cache[i];
        if (e->prim) dnnl_primitive_destroy(e->prim);
        dnnl_memory_t mems[5] = {e->a, e->b, e->c, e->bias, e->scratch};
        for (int j = 0; j < 5; j++)
            if (mems[j]) dnnl_memory_destroy(mems[j]);
    }
    g_entries = 0;
    td_free(g_scratch);
    g_scratch = NULL;
    g_scratch_bytes = 0;
    td_free(g_conv);
    g_conv = NULL;
    g_conv_bytes = 0;
    if (g_stream) dnnl_stream_destroy(g_stream);
    if (g_engine) dnnl_engine_destroy(g_engine);
    g_stream = NULL;
    g_engine = NULL;
}

/* One thread's rate of a 1024^3 GEMM with operands of type t (oneDNN's bf16
 * kernel, or fp16 converted to fp32), best of 5 after ~30 ms of warm-up:
 * the MFU denominator of a reduced-precision run, as td_sgemm_peak_gflops
 * is fp32's. Cached per type. */
double td_matmul_lowp_peak_gflops(td_ktype t) {
    enum { N = 1024 };
    static double cached[3];
    TD_ASSERT(t == TD_K_BF16 || t == TD_K_F16);
    if (cached[t] > 0) return cached[t];
    int saved = td_kernels_threads();
    td_kernels_set_threads(1);
    uint16_t *a = td_alloc(sizeof(uint16_t) * N * N, TD_MEM_OTHER);
    uint16_t *b = td_alloc(sizeof(uint16_t) * N * N, TD_MEM_OTHER);
    float *c = td_alloc(sizeof(float) * N * N, TD_MEM_OTHER);
    for (int i = 0; i < N * N; i++) a[i] = b[i] = 0x3f80; /* 1.0 in bf16; 1.875 in fp16 */
    double best = 1e30, start = td_now_ms();
    for (int rep = 0; rep < 5 || td_now_ms() - start < 30.0; rep++) {
        double t0 = td_now_ms();
        lowp_forward(t, c, TD_K_F32, a, b, NULL, N, N, N);
        double dt = td_now_ms() - t0;
        if (rep > 0 && dt < best) best = dt; /* the first call creates the primitive */
        if (rep > 50) break;
    }
    td_free(a);
    td_free(b);
    td_free(c);
    td_kernels_set_threads(saved);
    return cached[t] = 2.0 * N * N * (double)N / (best * 1e-3) / 1e9;
}
