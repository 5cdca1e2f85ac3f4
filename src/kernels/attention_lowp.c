/* Blocked attention on bf16 and fp16 tensors (trident/attention.h): one
 * implementation, the element type a descriptor as in lowp_ops.c.
 *
 * Each batch row's heads are converted to dense fp32 rows, the fp32
 * blocked kernel runs on them (B = 1, dense strides) and the outputs are
 * rounded back once; lse is fp32 and passed straight through. So a 16-bit
 * result is exactly the rounding of what the fp32 kernel gives on the same
 * 16-bit-valued inputs laid out densely (the tests check that), and thread
 * independence is the fp32 kernel's. Buffers are O(T C) per batch row,
 * never O(T^2).
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
static void rows_in(const td_lp_type *t, float *dst, const void *src, int rows, int width,
                    int stride) {
    int nt = td_k_threads_for((size_t)rows * width);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (int r = 0; r < rows; r++)
        t->to_f32(dst + (size_t)r * width, (const char *)src + (size_t)r * stride * t->size,
                  (size_t)width);
}

static void rows_out(const td_lp_type *t, void *dst, const float *src, int rows, int width,
                     int stride) {
    int nt = td_k_threads_for((size_t)rows * width);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (int r = 0; r < rows; r++)
        t->from_f32((char *)dst + (size_t)r * stride * t->size, src + (size_t)r * width,
                    (size_t)width);
}

/* Element offset of batch row b of a [B, T, *] tensor at row stride st. */
static const void *brow(const td_lp_type *t, const void *p, int b, int T, int st) {
    return (const char *)p + (size_t)b * T * st * t->size;
}

/* The fp32 shape of one batch row in dense buffers. */
static td_attn_shape dense(const td_attn_shape *s) {
    td_attn_shape d = *s;
    d.B = 1;
    d.q_stride = d.o_stride = s->NH * s->hs;
    d.kv_stride = s->NKV * s->hs;
    return d;
}

static void lp_forward(const td_lp_type *t, void *out, float *lse, const void *q, const void *k,
                       const void *v, const td_attn_shape *s, int accumulate) {
    td_attn_shape d = dense(s);
    int wq = s->NH * s->hs, wk = s->NKV * s->hs;
    float *qf = buf(0, (size_t)s->Tq * wq), *of = buf(1, (size_t)s->Tq * wq); /* [Tq, NH*hs] */
    float *kf = buf(2, (size_t)s->Tk * wk), *vf = buf(3, (size_t)s->Tk * wk); /* [Tk, NKV*hs] */
    for (int b = 0; b < s->B; b++) {
        rows_in(t, qf, brow(t, q, b, s->Tq, s->q_stride), s->Tq, wq, s->q_stride);
        rows_in(t, kf, brow(t, k, b, s->Tk, s->kv_stride), s->Tk, wk, s->kv_stride);
        rows_in(t, vf, brow(t, v, b, s->Tk, s->kv_stride), s->Tk, wk, s->kv_stride);
        void *ob = (void *)brow(t, out, b, s->Tq, s->o_stride);
        if (accumulate) rows_in(t, of, ob, s->Tq, wq, s->o_stride);
        td_attn_forward(of, lse + (size_t)b * s->NH * s->Tq, qf, kf, vf, &d, accumulate);
        rows_out(t, ob, of, s->Tq, wq, s->o_stride);
    }
}

static void lp_backward(const td_lp_type *t, void *dq, void *dk, void *dv, const void *dout,
                        const void *out, const float *lse, const void *q, const void *k,
                        const void *v, const td_attn_shape *s) {
    td_attn_shape d = dense(s);
    int wq = s->NH * s->hs, wk = s->NKV * s->hs;
    size_t nq = (size_t)s->Tq * wq, nk = (size_t)s->Tk * wk;
    float *qf = buf(0, nq), *of = buf(1, nq), *gf = buf(4, nq), *dqf = buf(5, nq); /* [Tq, NH*hs] */
    float *kf = buf(2, nk), *vf = buf(3, nk), *dkf = buf(6, nk),
          *dvf = buf(7, nk); /* [Tk, NKV*hs] */
    for (int b = 0; b < s->B; b++) {
        rows_in(t, qf, brow(t, q, b, s->Tq, s->q_stride), s->Tq, wq, s->q_stride);
        rows_in(t, of, brow(t, out, b, s->Tq, s->o_stride), s->Tq, wq, s->o_stride);
        rows_in(t, gf, brow(t, dout, b, s->Tq, s->o_stride), s->Tq, wq, s->o_stride);
        rows_in(t, kf, brow(t, k, b, s->Tk, s->kv_stride), s->Tk, wk, s->kv_stride);
        rows_in(t, vf, brow(t, v, b, s->Tk, s->kv_stride), s->Tk, wk, s->kv_stride);
        /* the kernel adds into the gradients: start from their values */
        void *dqb = (void *)brow(t, dq, b, s->Tq, s->q_stride);
        void *dkb = (void *)brow(t, dk, b, s->Tk, s->kv_stride);
        void *dvb = (void *)brow(t, dv, b, s->Tk, s->kv_stride);
        rows_in(t, dqf, dqb, s->Tq, wq, s->q_stride);
        rows_in(t, dkf, dkb, s->Tk, wk, s->kv_stride);
        rows_in(t, dvf, dvb, s->Tk, wk, s->kv_stride);
        td_attn_backward(dqf, dkf, dvf, gf, of, lse + (size_t)b * s->NH * s->Tq, qf, kf, vf, &d);
        rows_out(t, dqb, dqf, s->Tq, wq, s->q_stride);
        rows_out(t, dkb, dkf, s->Tk, wk, s->kv_stride);
        rows_out(t, dvb, dvf, s->Tk, wk, s->kv_stride);
    }
}

/* ---- the public functions ---- */

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
