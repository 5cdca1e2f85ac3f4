/* backend: the compute device behind a run, as a table (docs/design.md,
 * principle 12). A backend owns the memory of the step's tensors and runs
 * the ops of a step on it; host code reaches that memory only through the
 * named copies below, and the report counts them.
 *
 * Layering: base <- kernels <- backend <- {model, parallel, comm}. The CPU
 * backend's ops are src/kernels (same bits); the guard backend is the CPU's
 * kernels with every device buffer unreachable from host code between
 * backend calls, so that CI catches what a GPU would punish; the CUDA
 * backend is a module loaded on demand (cuda_module.h, docs/cuda.md).
 *
 * One process runs one backend, chosen once by td_backend_use before the
 * first device allocation (train's --device). Nothing here is collective.
 *
 * Ownership and time:
 *  - td_dev_alloc returns device memory owned by the caller until
 *    td_dev_free; its bytes start zero. It is not host memory: on a device
 *    other than cpu, a host read or write of it outside a backend call is a
 *    bug (the guard device kills the process naming the buffer).
 *  - Ops and copies are queued on the backend's one compute stream in call
 *    order. Host-to-device copies read their source before they return (the
 *    host buffer may be reused at once). A device-to-host copy's destination
 *    may be read only after td_dev_sync or a wait on an event recorded after
 *    the copy: until then it holds garbage (the guard device fills it with a
 *    poison pattern, as an asynchronous copy would leave it).
 *  - Pointers into a device buffer may be offset (p + k) and passed to ops
 *    and copies; td_dev_free takes the pointer td_dev_alloc returned.
 *
 * The guard device: each buffer its own mapping (rounded up to pages, the
 * rounded bytes counted in its category), followed by a page that is never
 * opened; a backend call opens only the pages its arguments' extents span
 * (an op's follow from its shape arguments by its rule in
 * src/backend/guard_ops.c, a copy's are its ranges) and closes them when it
 * returns. A host access outside a call,
 * or an op's access outside the pages its call opened, ends the process
 * (status 3) with one line naming the buffer, its category, the offset and
 * the allocation site. A download's destination holds the
 * poison until the sync: byte 0xF4 at even addresses and 0xFF at odd ones,
 * so that an aligned fp32, fp64, bf16 or fp16 reads NaN, an int32 -720908
 * and an int64 about -3.1e15 (not -1, first_nonfinite's "none").
 * What it cannot catch: a host access made while a backend call that opened
 * the same pages runs (another host thread of the process, e.g. a comm
 * progress thread, reading pages an op has open: mprotect is per process,
 * not per thread); an access outside an argument's extent but inside a page
 * the call has open (pages, not bytes, are the granularity: an overrun
 * inside the last opened page, or into a neighbour sharing a page with the
 * argument, or between the rows of a strided argument, whose extent is the
 * span from its first to its last row); where an extent is data-dependent
 * (an embedding's or MoE's rows picked by ids, positions given as an
 * array) the rule opens the whole table or the rest of its buffer, so an
 * index past the rows it should reach, inside that, passes; a host write
 * into a download's destination before its sync (the sync overwrites it,
 * as a real copy would); accesses to memory the backend did not allocate
 * (host metadata, MPI's own buffers). Faults from MPI or a library outside
 * guard memory go to the handler that was there before the guard's.
 * Failures: allocation failure is td_fail naming bytes and category; a bad
 * pointer (not the backend's, freed twice) is TD_ASSERT. */
#ifndef TRIDENT_BACKEND_H
#define TRIDENT_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "trident/base.h"
#include "trident/attention.h" /* td_attn_shape, td_ktype */
#include "trident/kernels_moe.h" /* td_moe_router_shape */

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { TD_DEVICE_CPU = 0, TD_DEVICE_GUARD = 1, TD_DEVICE_CUDA = 2 } td_device;
#define TD_DEVICE_N 3

/* "cpu", "guard", "cuda"; parse returns -1 for anything else. */
const char *td_device_name(td_device d);
int td_device_parse(const char *s);
/* --device's value (NULL: cpu): an unknown name, or cuda in a build
 * without the CUDA module, is one error line (td_fail) naming the valid
 * ones. */
td_device td_device_flag(const char *s);

/* Why host code touched device memory: every named copy says which, and
 * the report prints bytes and calls per step by purpose. COMM is the comm
 * layer's staging of device buffers for a host transport, printed apart. */
typedef enum {
    TD_HOST_TOKENS = 0, /* input and target ids up */
    TD_HOST_SCALARS,    /* loss, gradient norm, non-finite flag, loss scale down */
    TD_HOST_MOE,        /* routing inputs and counts down, decisions up */
    TD_HOST_INIT,       /* parameter init, import */
    TD_HOST_CKPT,       /* checkpoint save and load ranges */
    TD_HOST_EVAL,       /* eval and sample */
    TD_HOST_EXPORT,     /* export, final state gathers, verify's oracle */
    TD_HOST_COMM,       /* staging for a host-only transport */
    TD_HOST_OTHER,      /* named by the call site's comment; kept at zero in a step */
    TD_HOST_NPURPOSE
} td_host_purpose;

const char *td_host_purpose_name(td_host_purpose p);

/* Counters since the last reset: bytes and calls each way, by purpose. */
typedef struct {
    uint64_t up_bytes[TD_HOST_NPURPOSE], down_bytes[TD_HOST_NPURPOSE];
    uint64_t up_calls[TD_HOST_NPURPOSE], down_calls[TD_HOST_NPURPOSE];
} td_host_traffic;

/* An event marks a point of the compute stream (a value, not an
 * allocation). */
typedef struct {
    uint64_t seq;
} td_dev_event;

/* ---- buffers ------------------------------------------------------------ */

/* The run's backend. td_backend_use may be called once, before the first
 * td_dev_alloc (TD_ASSERT otherwise); the default is cpu. cuda: loads the
 * module and takes this rank's GPU (td_fail naming what CUDA said, or that
 * this build has no CUDA backend). guard: installs its fault handler
 * (call after MPI_Init, so that it sits in front of MPI's). */
void td_backend_use(td_device d);
td_device td_backend_device(void);
/* 1 when device memory is not host memory (guard, cuda). */
int td_backend_is_device(void);

/* Allocate device memory for a step tensor; zeroed. name says what it is
 * ("params", "activations of block 3"); the allocation site (file:line) is
 * recorded for the guard's fault line. */
#define td_dev_alloc(bytes, cat, name) td_dev_alloc_at((bytes), (cat), (name), __FILE__ ":" TD_STR(__LINE__))
#define TD_STR(x) TD_STR_(x)
#define TD_STR_(x) #x
void *td_dev_alloc_at(size_t bytes, td_mem_cat cat, const char *name, const char *site);
void td_dev_free(void *p);
/* What td_dev_alloc(bytes) adds to its category's count on the run's
 * backend: bytes on cpu, whole pages on the guard; for memory plans that
 * must equal the measured counts. */
size_t td_dev_footprint(size_t bytes);

/* 1 when p lies in device memory of a backend other than cpu (name and
 * offset set when not NULL). */
int td_dev_is_device(const void *p, const char **name, size_t *offset);

/* Device-side fills and copies (queued): zero, d2d, 2-D d2d (height rows of
 * width bytes, each pitch apart). */
void td_dev_zero(void *dst, size_t bytes);
void td_dev_copy(void *dst, const void *src, size_t bytes);
void td_dev_copy_2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                    size_t height);

/* The named copies between host and device. up: the host source is read
 * before the call returns. down: dst may be read after td_dev_sync (or a
 * wait on an event recorded after it). */
void td_dev_upload(void *dst_dev, const void *src_host, size_t bytes, td_host_purpose why);
void td_dev_download(void *dst_host, const void *src_dev, size_t bytes, td_host_purpose why);
void td_dev_upload_2d(void *dst_dev, size_t dpitch, const void *src_host, size_t spitch,
                      size_t width, size_t height, td_host_purpose why);
void td_dev_download_2d(void *dst_host, size_t dpitch, const void *src_dev, size_t spitch,
                        size_t width, size_t height, td_host_purpose why);

/* Wait until everything queued has run and every download has landed. */
void td_dev_sync(void);
/* Record the current end of the stream; wait for it from the host (its
 * downloads land); make the compute stream wait for it (a no-op with one
 * stream, kept for a device with several). */
td_dev_event td_dev_event_record(void);
void td_dev_event_wait(td_dev_event e);
void td_dev_stream_wait(td_dev_event e);

/* Host traffic counters (this process): snapshot and reset. */
void td_dev_traffic(td_host_traffic *out);
void td_dev_traffic_reset(void);

/* ---- ops ---------------------------------------------------------------- */

/* AdamW over spans (host arrays of device pointers), one call for all:
 * optim.h's td_adamw_update arithmetic on each span (g scaled by
 * grad_scale first; wd 0 on the spans the table does not decay). */
typedef struct td_adamw_span {
    float *p, *m, *v;
    const float *g;
    size_t n;
    float wd;
} td_adamw_span;
typedef struct td_adamw_hyper {
    float lr, beta1, beta2, eps, grad_scale;
    int step; /* 1-based */
} td_adamw_hyper;
/* muon: one logical 2-D matrix [rows, cols] (row-major, p, g and its
 * momentum buffer m), the speedrun's Muon step (kernels.h td_muon_*). */
typedef struct td_muon_span {
    float *p, *m;
    const float *g;
    int rows, cols;
    float wd;
} td_muon_span;
typedef struct td_muon_hyper {
    float lr, momentum, grad_scale;
    int nesterov;
} td_muon_hyper;

/* One precision's ops. Activations are void* in the row's type (float for
 * F32, td_bf16 / td_f16 for the 16-bit rows); parameters, their gradients,
 * norms' statistics, lse and losses are float in every row. Every pointer
 * argument is device memory. Backward ops add into parameter gradients as
 * the kernels do (kernels.h). NULL: the op is not in this row (callers
 * assert). */
typedef struct {
    td_ktype k;
    size_t es; /* bytes per activation element */
    void (*round_n)(void *dst, const float *src, size_t n);
    void (*widen_n)(float *dst, const void *src, size_t n);
    /* out[N,OC] = inp[N,C] w[OC,C]^T + bias; out_type F32 or the row's k;
     * w in the row's type (fp32 master when k is F32). */
    void (*mm_fwd)(void *out, td_ktype out_type, const void *inp, const void *w, const float *bias,
                   int N, int C, int OC);
    void (*mm_bwd)(void *dinp, td_ktype dinp_type, float *dw, float *dbias, const void *dout,
                   const void *inp, const void *w, int N, int C, int OC);
    void (*ln_fwd)(void *out, float *mean, float *rstd, const void *inp, const float *w,
                   const float *b, int N, int C);
    void (*ln_bwd)(void *dinp, float *dw, float *db, const void *dout, const void *inp,
                   const float *w, const float *mean, const float *rstd, int N, int C);
    void (*rms_fwd)(void *out, float *rstd, const void *inp, const float *w, int N, int C, float eps);
    void (*rms_bwd)(void *dinp, float *dw, const void *dout, const void *inp, const float *w,
                    const float *rstd, int N, int C);
    void (*gelu_fwd)(void *out, const void *inp, size_t n);
    void (*gelu_bwd)(void *dinp, const void *inp, const void *dout, size_t n);
    void (*swiglu_fwd)(void *h, const void *gu, int N, int F);
    void (*swiglu_bwd)(void *dgu, const void *dh, const void *gu, int N, int F);
    void (*res_fwd)(void *out, const void *a, const void *b, size_t n);
    void (*rope_fwd)(void *x, const float *cs, int B, int T, int stride, int col, int heads, int hs);
    void (*rope_bwd)(void *g, const float *cs, int B, int T, int stride, int col, int heads, int hs);
    /* attention_blocked.c's contract (attention.h's td_attn_shape). */
    void (*att_fwd)(void *out, float *lse, const void *q, const void *k, const void *v,
                    const td_attn_shape *s, int accumulate);
    void (*att_bwd)(void *dq, void *dk, void *dv, const void *dout, const void *out,
                    const float *lse, const void *q, const void *k, const void *v,
                    const td_attn_shape *s);

    /* fp32 in every row (kernels.h's contracts). */
    void (*emb_fwd)(float *out, const int *tokens, const float *wte, int lo, int rows, int N, int C);
    void (*emb_bwd)(float *dwte, const float *dout, const int *tokens, int lo, int rows, int N, int C);
    void (*pos_fwd)(float *out, const float *wpe, const int *pos, int n0, int N, int T, int C);
    void (*pos_bwd)(float *dwpe, const float *dout, const int *pos, int n0, int N, int T, int C);
    void (*xent_max)(float *mx, const float *logits, int N, int V, int Vp);
    void (*xent_exp_sum)(float *sum, float *xt, float *probs, const float *logits, const float *mx,
                         const int *targets, int lo, int N, int V, int Vp);
    void (*xent_finish)(float *losses, float *probs, const float *sum, const float *xt,
                        const float *mx, const int *targets, int N, int V, int Vp);
    void (*xent_bwd)(float *dlogits, const float *probs, const int *targets, int lo,
                     const float *dloss, int N, int V, int Vp);

    /* The optimizer's range operations (fp32 state in every row). Results
     * that the host needs are written to device memory and fetched by a
     * named download (TD_HOST_SCALARS). */
    void (*sumsq)(double *dst, const float *x, size_t n);             /* td_sumsq's order */
    void (*first_nonfinite)(int64_t *dst, const float *x, size_t n); /* index, or -1 */
    void (*scale)(float *x, float s, size_t n);
    void (*add)(float *dst, const float *src, size_t n); /* dst += src */
    void (*adamw)(const struct td_adamw_span *spans, int n, const struct td_adamw_hyper *h);

    /* model-ops: the model's former host loops over step tensors (fp32 in
     * every row). sum: *dst = x[0] + ... + x[n-1] in index order, in double
     * (the loss sum's bits as the host loop gave them); fill: x[i] = v. */
    void (*sum)(double *dst, const float *x, size_t n);
    void (*fill)(float *x, float v, size_t n);
    /* moe (kernels_moe.h's contracts): the mixture of experts' device half.
     * Rows are C elements of the row's type; pos, idx [N,K] int; the rest
     * fp32. The routing decisions they take (idx, gate, wts, pos, stats)
     * are the host's, uploaded (TD_HOST_MOE). */
    void (*moe_scores)(float *sc, const float *logits, int N, int E, int softmax);
    void (*moe_gather)(void *dst, const void *src, const int *pos, int N, int K, int C);
    void (*moe_combine)(float *out, int shared, const void *y, const int *pos, const float *wts,
                        int row0, int Ns, int K, int C);
    void (*moe_combine_bwd)(float *dw, void *dy, const void *dout, const void *y, const int *pos,
                            const float *wts, int N, int K, int C);
    void (*moe_scatter_add)(float *dst, const void *dx, const int *pos, int N, int K, int C);
    void (*moe_router_bwd)(float *dl, const float *dw, const float *logits, const float *sc,
                           const int *idx, const float *gate, const float *wts,
                           const float *stats, const td_moe_router_shape *s);
    /* muon (issue 42): Muon's step on each span (fp32 state in every row;
     * the Newton-Schulz iterations bf16 in the bf16 row, the speedrun's,
     * fp32 in the others: td_optim_config.muon_ns_k picks the row) */
    void (*muon)(const struct td_muon_span *spans, int n, const struct td_muon_hyper *h);
    /* the same step in its three parts, for a matrix cut over ranks
     * (kernels.h td_muon_momentum, td_muon_ns with 5 steps, td_muon_apply):
     * the elementwise halves on a shard, the orthogonalization of the
     * gathered [rows, cols] matrix x on its owner */
    void (*muon_momentum)(float *u, const float *g, float *m, size_t n,
                          const struct td_muon_hyper *h);
    void (*muon_ns)(float *x, int rows, int cols);
    void (*muon_apply)(float *p, const float *u, size_t n, int rows, int cols, float lr, float wd);
} td_ops;

/* The run's backend's row for a precision (never NULL: every backend has
 * all three, or td_fail names the missing one). td_ops_cpu is the CPU
 * backend's row whatever the run's device: the oracles (verify,
 * tests/layouts) call it explicitly. */
const td_ops *td_ops_for(td_ktype k);
const td_ops *td_ops_cpu(td_ktype k);


/* ---- the table ------------------------------------------------------------ */

/* A byte range a backend call touches: [p, p + bytes), or from p to the end
 * of its buffer when bytes is TD_DEV_REST (an extent that depends on data,
 * such as rows picked by ids). */
typedef struct {
    const void *p;
    size_t bytes;
} td_dev_range;
#define TD_DEV_REST SIZE_MAX

/* A backend. NULL entries: the CPU's behaviour (host memory through
 * td_alloc, memset/memcpy, nothing pending, nothing to look up). */
typedef struct {
    td_device device;
    void *(*alloc)(size_t bytes, td_mem_cat cat, const char *name, const char *site);
    void (*free)(void *p);
    /* enter/leave bracket every copy and fill of the buffer half (the ops'
     * rows bracket their own calls): the guard opens the pages that
     * r[0..n) span (NULL pointers, zero bytes and host memory skipped) and
     * closes them after. */
    void (*enter)(const td_dev_range *r, int n);
    void (*leave)(void);
    /* A device-to-host copy (the source read now, the destination filled
     * by the next sync); sync lands every pending one. */
    void (*download)(void *dst_host, const void *src_dev, size_t bytes);
    /* Memory the host cannot write (cuda): zero bytes, and a 2-D copy in
     * any direction but device to host (height rows of width bytes, each
     * pitch apart; a host source read before it returns; overlapping rows
     * as memmove). NULL: memset and memmove under enter/leave. */
    void (*zero)(void *dst, size_t bytes);
    void (*copy_2d)(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                    size_t height);
    void (*sync)(void);
    /* Which device buffer holds p: its name and p's offset in it; 0 when p
     * is not device memory. */
    int (*lookup)(const void *p, const char **name, size_t *offset);
    const td_ops *(*ops)(td_ktype k); /* never NULL */
    /* The device's rounding: the bytes an allocation of `bytes` takes and
     * is counted as in its category, what the memory plan adds per buffer
     * (td_plan_dev). The guard rounds each buffer up to whole pages (0
     * bytes: one page); a CUDA backend gives its allocator's granularity.
     * NULL: bytes (the cpu: host memory as asked). */
    size_t (*footprint)(size_t bytes);
} td_backend;

const td_backend *td_backend_current(void);
extern const td_backend td_backend_cpu;
/* The guard (src/backend/guard.c). The CUDA backend is a module loaded on
 * demand (trident/cuda_module.h). */
const td_backend *td_backend_guard(void);
/* Tests only (tests/unit/test_guard.c): the row whose entries the guard's
 * wrappers call for precision k, in place of td_ops_cpu(k) (NULL: back to
 * it), so that a test can plant a kernel that strays outside its extent. */
void td_guard_set_inner(td_ktype k, const td_ops *inner);

#ifdef __cplusplus
}
#endif

#endif
