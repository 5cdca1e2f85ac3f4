/* Blocked attention on bf16 and fp16 tensors (trident/attention.h): one
 * implementation, the element type a descriptor as in lowp_ops.c.
 *
 * A call's rows (every batch element's, strided views included) are
 * converted to dense fp32 rows in one parallel region per tensor, the fp32
 * blocked kernel runs on them (dense strides) and the outputs are rounded
 * back once; lse is fp32 and passed straight through. So a 16-bit result is
 * exactly the rounding of what the fp32 kernel gives on the same
 * 16-bit-valued inputs laid out densely (the tests check that), and thread
 * independence is the fp32 kernel's (its tasks are per batch element, head
 * and query block, so converting B elements at once changes no bit).
 * Buffers are O(B T C), never O(T^2).
 *
 * The block products are fp32 sgemms on converted data, not bf16 GEMMs
 * through oneDNN (matmul_bf16.c): that variant is not written yet, so this
 * path costs the fp32 kernel plus the conversions (bench_attention). */
#include "internal.h"
#include "trident/attention.h"
#include "trident/base.h"

/* Persistent fp32 row buffers, grown to the largest request (a fresh
 * allocation per call faults and zeroes its pages each time). */
#define AL_SLOTS 8
static float *g_buf[AL_SLOTS];
static size_t g_cap[AL_SLOTS];

static float *buf(int slot, size_t n) {
    if (g_cap[slot] < n) {
        td_free(g_buf[slot]);
        g_buf[slot] = td_alloc((n ? n : 1) * sizeof(float), TD_MEM_OTHER);
        g_cap[slot] = n;
    }
    return g_buf[slot];
}

void td_attn_release_scratch(void) {
    for (int i = 0; i < AL_SLOTS; i++) td_free(g_buf[i]), g_buf[i] = NULL, g_cap[i] = 0;
    td_attn_blocked_release_scratch();
}

/* dst [rows, width] dense fp32 <- src rows of `width` elements at `stride`.
 * Rows are split over the threads here: each row alone is too short for
 * the conversion's own threading, and elementwise work is exact anyway. */
/* The rows of all B batch elements, each `rows` rows at a pitch of `pitch`
 * rows (q_rows / kv_rows) of `stride` elements, to or from dense fp32
 * [B * rows, width]: one parallel region per tensor and call. */
typedef struct {
    int B, rows, pitch, width, stride;
} view;

static const char *row_at(const td_lp_type *t, const void *p, const view *w, size_t i) {
    size_t b = i / (size_t)w->rows, r = i % (size_t)w->rows;
    return (const char *)p + ((b * (size_t)w->pitch + r) * (size_t)w->stride) * t->size;
}

static void rows_in(const td_lp_type *t, float *dst, const void *src, const view *w) {
    size_t n = (size_t)w->B * w->rows;
    int nt = td_k_threads_for(n * (size_t)w->width);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (size_t i = 0; i < n; i++) t->to_f32(dst + i * w->width, row_at(t, src, w, i), (size_t)w->width);
}

static void rows_out(const td_lp_type *t, void *dst, const float *src, const view *w) {
    size_t n = (size_t)w->B * w->rows;
    int nt = td_k_threads_for(n * (size_t)w->width);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (size_t i = 0; i < n; i++)
        t->from_f32((char *)row_at(t, dst, w, i), src + i * w->width, (size_t)w->width);
}

/* The fp32 kernels' shape on the dense converted rows. */
static td_attn_shape dense(const td_attn_shape *s) {
    td_attn_shape d = *s;
    d.q_stride = d.o_stride = s->NH * s->hs;
    d.kv_stride = s->NKV * s->hs;
    d.q_rows = d.kv_rows = 0;
    return d;
}

typedef struct {
    view q, o, kv; /* q and dq; out and dout; k, v, dk, dv */
} views;

static views views_of(const td_attn_shape *s) {
    int qr = s->q_rows > 0 ? s->q_rows : s->Tq, kr = s->kv_rows > 0 ? s->kv_rows : s->Tk;
    views v = {{s->B, s->Tq, qr, s->NH * s->hs, s->q_stride},
               {s->B, s->Tq, qr, s->NH * s->hs, s->o_stride},
               {s->B, s->Tk, kr, s->NKV * s->hs, s->kv_stride}};
    return v;
}

static void lp_forward(const td_lp_type *t, void *out, float *lse, const void *q, const void *k,
                       const void *v, const td_attn_shape *s, int accumulate) {
    td_attn_shape d = dense(s);
    views w = views_of(s);
    size_t nq = (size_t)s->B * s->Tq * w.q.width, nk = (size_t)s->B * s->Tk * w.kv.width;
    float *qf = buf(0, nq), *of = buf(1, nq), *kf = buf(2, nk), *vf = buf(3, nk);
    rows_in(t, qf, q, &w.q);
    rows_in(t, kf, k, &w.kv);
    rows_in(t, vf, v, &w.kv);
    if (accumulate) rows_in(t, of, out, &w.o);
    td_attn_forward(of, lse, qf, kf, vf, &d, accumulate);
    rows_out(t, out, of, &w.o);
}

static void lp_backward(const td_lp_type *t, void *dq, void *dk, void *dv, const void *dout,
                        const void *out, const float *lse, const void *q, const void *k,
                        const void *v, const td_attn_shape *s) {
    td_attn_shape d = dense(s);
    views w = views_of(s);
    size_t nq = (size_t)s->B * s->Tq * w.q.width, nk = (size_t)s->B * s->Tk * w.kv.width;
    float *qf = buf(0, nq), *of = buf(1, nq), *gf = buf(4, nq), *dqf = buf(5, nq);
    float *kf = buf(2, nk), *vf = buf(3, nk), *dkf = buf(6, nk), *dvf = buf(7, nk);
    rows_in(t, qf, q, &w.q);
    rows_in(t, of, out, &w.o);
    rows_in(t, gf, dout, &w.o);
    rows_in(t, kf, k, &w.kv);
    rows_in(t, vf, v, &w.kv);
    /* the kernel adds into the gradients: start from their values */
    rows_in(t, dqf, dq, &w.q);
    rows_in(t, dkf, dk, &w.kv);
    rows_in(t, dvf, dv, &w.kv);
    td_attn_backward(dqf, dkf, dvf, gf, of, lse, qf, kf, vf, &d);
    rows_out(t, dq, dqf, &w.q);
    rows_out(t, dk, dkf, &w.kv);
    rows_out(t, dv, dvf, &w.kv);
}

void td_attn_bf16_forward(td_bf16 *out, float *lse, const td_bf16 *q, const td_bf16 *k,
                          const td_bf16 *v, const td_attn_shape *s, int accumulate) {
    lp_forward(&TD_LP_BF16, out, lse, q, k, v, s, accumulate);
}
void td_attn_bf16_backward(td_bf16 *dq, td_bf16 *dk, td_bf16 *dv, const td_bf16 *dout,
                           const td_bf16 *out, const float *lse, const td_bf16 *q, const td_bf16 *k,
                           const td_bf16 *v, const td_attn_shape *s) {
    lp_backward(&TD_LP_BF16, dq, dk, dv, dout, out, lse, q, k, v, s);
}
void td_attn_f16_forward(td_f16 *out, float *lse, const td_f16 *q, const td_f16 *k, const td_f16 *v,
                         const td_attn_shape *s, int accumulate) {
    lp_forward(&TD_LP_F16, out, lse, q, k, v, s, accumulate);
}
void td_attn_f16_backward(td_f16 *dq, td_f16 *dk, td_f16 *dv, const td_f16 *dout, const td_f16 *out,
                          const float *lse, const td_f16 *q, const td_f16 *k, const td_f16 *v,
                          const td_attn_shape *s) {
    lp_backward(&TD_LP_F16, dq, dk, dv, dout, out, lse, q, k, v, s);
}
