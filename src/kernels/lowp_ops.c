/* The non-GEMM kernels on 16-bit activations, bf16 and fp16
 * (kernels_bf16.h, kernels_f16.h): one implementation, two element types.
 *
 * Each converts a tile of its 16-bit inputs to fp32, runs the fp32 kernel of
 * kernels.h on the tile and rounds the outputs back (parameter gradients and
 * saved statistics stay fp32 and are passed straight through). So the math
 * is the fp32 kernels' own, computed in fp32, and a 16-bit output is exactly
 * the rounding of what the fp32 kernel gives on the same (16-bit-valued)
 * inputs; the tests check that. Tiles are fixed by the shapes alone (never
 * by the thread count) and the fp32 kernels are bitwise independent of the
 * thread count, so these are too. The cost is an extra pass over each tile
 * in and out (cache-resident at TD_LP_TILE), paid for one code path per op;
 * fused loops can replace a tile loop later if a profile asks.
 *
 * The element type is a descriptor (its size and its two bulk conversions)
 * passed to static implementations; the public bf16 and fp16 functions at
 * the end are one-line wrappers. Only the conversions differ between the
 * two: bf16 (8 significand bits, fp32's range) and fp16 (11 bits, range
 * 2^-24..65504, overflow to inf) round the same fp32 tile differently.
 * Scratch comes from a pool of persistent buffers (scratch() below). */
#include <limits.h>

#include "internal.h"
#include "trident/base.h"
#include "trident/kernels_bf16.h"

/* fp32 elements per tile buffer: 256 KiB, a few buffers stay in L2. */
#define TD_LP_TILE 65536

static void bf16_to(float *d, const void *s, size_t n) { td_bf16_to_float_n(d, s, n); }
static void bf16_from(void *d, const float *s, size_t n) { td_bf16_from_float_n(d, s, n); }
static void f16_to(float *d, const void *s, size_t n) { td_f16_to_float_n(d, s, n); }
static void f16_from(void *d, const float *s, size_t n) { td_f16_from_float_n(d, s, n); }

static void bf16_to_1t(float *d, const void *s, size_t n) { td_bf16_to_float_serial(d, s, n); }
static void bf16_from_1t(void *d, const float *s, size_t n) { td_bf16_from_float_serial(d, s, n); }
static void f16_to_1t(float *d, const void *s, size_t n) { td_f16_to_float_serial(d, s, n); }
static void f16_from_1t(void *d, const float *s, size_t n) { td_f16_from_float_serial(d, s, n); }

const td_lp_type TD_LP_BF16 = {sizeof(td_bf16), bf16_to, bf16_from, TD_K_BF16, bf16_to_1t,
                               bf16_from_1t};
const td_lp_type TD_LP_F16 = {sizeof(td_f16), f16_to, f16_from, TD_K_F16, f16_to_1t, f16_from_1t};

/* Element i of a 16-bit array (the byte offset by the type's size). */
static void *at(const td_lp_type *t, void *p, size_t i) { return (char *)p + i * t->size; }
static const void *at_c(const td_lp_type *t, const void *p, size_t i) {
    return (const char *)p + i * t->size;
}

/* Tile buffers: a few fp32 buffers kept between calls, each grown to the
 * largest request. A fresh td_alloc per call zeroed and faulted its pages
 * every time (profiled: a sixth of a bf16 training step). scratch() hands
 * out the next buffer and release() gives it back; a kernel holds at most
 * LP_SLOTS at once. The kernels run on the caller's thread, one at a time
 * (never from inside a parallel region), so the pool needs no lock. The
 * buffers are TD_MEM_OTHER and stay until td_lowp_release_scratch. */
#define LP_SLOTS 6
static float *g_slot[LP_SLOTS];
static size_t g_cap[LP_SLOTS];
static int g_used;

static float *scratch(size_t n) {
    TD_ASSERT(g_used < LP_SLOTS);
    int i = g_used++;
    if (g_cap[i] < n) {
        td_free(g_slot[i]);
        g_slot[i] = td_alloc(n * sizeof(float), TD_MEM_OTHER);
        g_cap[i] = n;
    }
    return g_slot[i];
}

static void release(float *p) {
    if (p) g_used--;
}

void td_lowp_release_scratch(void) {
    TD_ASSERT(g_used == 0);
    for (int i = 0; i < LP_SLOTS; i++) td_free(g_slot[i]), g_slot[i] = NULL, g_cap[i] = 0;
}

/* Rows per tile for rows of `width` elements (at least one row). */
static int tile_rows(int width) {
    int r = TD_LP_TILE / (width > 0 ? width : 1);
    return r > 0 ? r : 1;
}

/* ---- elementwise ---- */

static void gelu_fwd(const td_lp_type *t, void *out, const void *inp, size_t n) {
    float *x = scratch(TD_LP_TILE), *y = scratch(TD_LP_TILE);
    for (size_t i = 0; i < n; i += TD_LP_TILE) {
        size_t len = td_min_sz(TD_LP_TILE, n - i);
        t->to_f32(x, at_c(t, inp, i), len);
        td_gelu_forward(y, x, len);
        t->from_f32(at(t, out, i), y, len);
    }
    release(x);
    release(y);
}

static void gelu_bwd(const td_lp_type *t, void *dinp, const void *inp, const void *dout, size_t n) {
    float *x = scratch(TD_LP_TILE), *g = scratch(TD_LP_TILE), *dx = scratch(TD_LP_TILE);
    for (size_t i = 0; i < n; i += TD_LP_TILE) {
        size_t len = td_min_sz(TD_LP_TILE, n - i);
        t->to_f32(x, at_c(t, inp, i), len);
        t->to_f32(g, at_c(t, dout, i), len);
        t->to_f32(dx, at(t, dinp, i), len); /* the kernel adds into dinp */
        td_gelu_backward(dx, x, g, len);
        t->from_f32(at(t, dinp, i), dx, len);
    }
    release(x);
    release(g);
    release(dx);
}

static void residual_fwd(const td_lp_type *t, void *out, const void *a, const void *b, size_t n) {
    float *x = scratch(TD_LP_TILE), *y = scratch(TD_LP_TILE);
    for (size_t i = 0; i < n; i += TD_LP_TILE) {
        size_t len = td_min_sz(TD_LP_TILE, n - i);
        t->to_f32(x, at_c(t, a, i), len);
        t->to_f32(y, at_c(t, b, i), len);
        td_residual_forward(x, x, y, len);
        t->from_f32(at(t, out, i), x, len);
    }
    release(x);
    release(y);
}

static void residual_bwd(const td_lp_type *t, void *da, void *db, const void *dout, size_t n) {
    float *g = scratch(TD_LP_TILE), *x = scratch(TD_LP_TILE), *y = scratch(TD_LP_TILE);
    for (size_t i = 0; i < n; i += TD_LP_TILE) {
        size_t len = td_min_sz(TD_LP_TILE, n - i);
        t->to_f32(g, at_c(t, dout, i), len);
        if (da) t->to_f32(x, at(t, da, i), len);
        if (db) t->to_f32(y, at(t, db, i), len);
        td_residual_backward(da ? x : NULL, db ? y : NULL, g, len);
        if (da) t->from_f32(at(t, da, i), x, len);
        if (db) t->from_f32(at(t, db, i), y, len);
    }
    release(g);
    release(x);
    release(y);
}

/* ---- layernorm: tiles of whole rows ---- */

static void layernorm_fwd(const td_lp_type *t, void *out, float *mean, float *rstd, const void *inp,
                          const float *w, const float *b, int N, int C) {
    int R = tile_rows(C);
    float *x = scratch((size_t)R * C), *y = scratch((size_t)R * C);
    for (int n0 = 0; n0 < N; n0 += R) {
        int rows = N - n0 < R ? N - n0 : R;
        size_t off = (size_t)n0 * C, len = (size_t)rows * C;
        t->to_f32(x, at_c(t, inp, off), len);
        td_layernorm_forward(y, mean ? mean + n0 : NULL, rstd ? rstd + n0 : NULL, x, w, b, rows, C);
        t->from_f32(at(t, out, off), y, len);
    }
    release(x);
    release(y);
}

/* dw, db (fp32) receive one partial sum per tile, tiles in row order. */
static void layernorm_bwd(const td_lp_type *t, void *dinp, float *dw, float *db, const void *dout,
                          const void *inp, const float *w, const float *mean, const float *rstd,
                          int N, int C) {
    int R = tile_rows(C);
    float *x = scratch((size_t)R * C), *g = scratch((size_t)R * C);
    float *dx = dinp ? scratch((size_t)R * C) : NULL;
    for (int n0 = 0; n0 < N; n0 += R) {
        int rows = N - n0 < R ? N - n0 : R;
        size_t off = (size_t)n0 * C, len = (size_t)rows * C;
        t->to_f32(x, at_c(t, inp, off), len);
        t->to_f32(g, at_c(t, dout, off), len);
        if (dx) t->to_f32(dx, at(t, dinp, off), len);
        td_layernorm_backward(dx, dw, db, g, x, w, mean + n0, rstd + n0, rows, C);
        if (dx) t->from_f32(at(t, dinp, off), dx, len);
    }
    release(x);
    release(g);
    release(dx);
}

/* ---- rmsnorm (Llama): tiles of whole rows, as layernorm ---- */

static void rmsnorm_fwd(const td_lp_type *t, void *out, float *rstd, const void *inp,
                        const float *w, int N, int C, float eps) {
    int R = tile_rows(C);
    float *x = scratch((size_t)R * C), *y = scratch((size_t)R * C);
    for (int n0 = 0; n0 < N; n0 += R) {
        int rows = N - n0 < R ? N - n0 : R;
        size_t off = (size_t)n0 * C, len = (size_t)rows * C;
        t->to_f32(x, at_c(t, inp, off), len);
        td_rmsnorm_forward(y, rstd ? rstd + n0 : NULL, x, w, rows, C, eps);
        t->from_f32(at(t, out, off), y, len);
    }
    release(x);
    release(y);
}

/* dw (fp32) receives one partial sum per tile, tiles in row order. */
static void rmsnorm_bwd(const td_lp_type *t, void *dinp, float *dw, const void *dout,
                        const void *inp, const float *w, const float *rstd, int N, int C) {
    int R = tile_rows(C);
    float *x = scratch((size_t)R * C), *g = scratch((size_t)R * C);
    float *dx = dinp ? scratch((size_t)R * C) : NULL;
    for (int n0 = 0; n0 < N; n0 += R) {
        int rows = N - n0 < R ? N - n0 : R;
        size_t off = (size_t)n0 * C, len = (size_t)rows * C;
        t->to_f32(x, at_c(t, inp, off), len);
        t->to_f32(g, at_c(t, dout, off), len);
        if (dx) t->to_f32(dx, at(t, dinp, off), len); /* the kernel adds into dinp */
        td_rmsnorm_backward(dx, dw, g, x, w, rstd + n0, rows, C);
        if (dx) t->from_f32(at(t, dinp, off), dx, len);
    }
    release(x);
    release(g);
    release(dx);
}

/* ---- swiglu (Llama): tiles of whole rows of the fused gate|up [N, 2F] ---- */

static void swiglu_fwd(const td_lp_type *t, void *h, const void *gu, int N, int F) {
    int R = tile_rows(2 * F);
    float *x = scratch((size_t)R * 2 * F), *y = scratch((size_t)R * F);
    for (int n0 = 0; n0 < N; n0 += R) {
        int rows = N - n0 < R ? N - n0 : R;
        t->to_f32(x, at_c(t, gu, (size_t)n0 * 2 * F), (size_t)rows * 2 * F);
        td_swiglu_forward(y, x, rows, F);
        t->from_f32(at(t, h, (size_t)n0 * F), y, (size_t)rows * F);
    }
    release(x);
    release(y);
}

/* dgu is written, and may alias gu: each tile of gu is read before the
 * same tile of dgu is written. */
static void swiglu_bwd(const td_lp_type *t, void *dgu, const void *dh, const void *gu, int N,
                       int F) {
    int R = tile_rows(2 * F);
    float *x = scratch((size_t)R * 2 * F), *g = scratch((size_t)R * F);
    float *dx = scratch((size_t)R * 2 * F);
    for (int n0 = 0; n0 < N; n0 += R) {
        int rows = N - n0 < R ? N - n0 : R;
        size_t off = (size_t)n0 * 2 * F, len = (size_t)rows * 2 * F;
        t->to_f32(x, at_c(t, gu, off), len);
        t->to_f32(g, at_c(t, dh, (size_t)n0 * F), (size_t)rows * F);
        td_swiglu_backward(dx, g, x, rows, F);
        t->from_f32(at(t, dgu, off), dx, len);
    }
    release(x);
    release(g);
    release(dx);
}

/* ---- attention: one batch row (all heads) per tile ---- */

static void attention_fwd(const td_lp_type *t, void *out, void *att, const void *qkv, int B, int T,
                          int C, int NH) {
    size_t nq = (size_t)T * 3 * C, no = (size_t)T * C, na = (size_t)NH * T * T;
    float *q = scratch(nq), *o = scratch(no), *a = scratch(na);
    for (int b = 0; b < B; b++) {
        t->to_f32(q, at_c(t, qkv, b * nq), nq);
        td_attention_forward(o, a, q, 1, T, C, NH);
        t->from_f32(at(t, out, b * no), o, no);
        t->from_f32(at(t, att, b * na), a, na);
    }
    release(q);
    release(o);
    release(a);
}

static void attention_bwd(const td_lp_type *t, void *dqkv, const void *dout, const void *qkv,
                          const void *att, int B, int T, int C, int NH) {
    size_t nq = (size_t)T * 3 * C, no = (size_t)T * C, na = (size_t)NH * T * T;
    float *q = scratch(nq), *dq = scratch(nq), *g = scratch(no), *a = scratch(na);
    float *da = scratch(na);
    for (int b = 0; b < B; b++) {
        t->to_f32(q, at_c(t, qkv, b * nq), nq);
        t->to_f32(dq, at(t, dqkv, b * nq), nq); /* the kernel adds into dqkv */
        t->to_f32(g, at_c(t, dout, b * no), no);
        t->to_f32(a, at_c(t, att, b * na), na);
        td_attention_backward(dq, da, g, q, a, 1, T, C, NH);
        t->from_f32(at(t, dqkv, b * nq), dq, nq);
    }
    release(q);
    release(dq);
    release(g);
    release(a);
    release(da);
}

/* ---- embedding: tiles of rows; wte, wpe and their gradients fp32 ---- */

static void embedding_fwd(const td_lp_type *t, void *out, const int *tokens, const float *wte,
                          const float *wpe, int B, int T, int C) {
    int N = B * T, R = tile_rows(C);
    float *y = scratch((size_t)R * C);
    for (int n0 = 0; n0 < N; n0 += R) {
        int rows = N - n0 < R ? N - n0 : R;
        /* the lookup (one shard holding every row), then the positions */
        td_embedding_shard_forward(y, tokens + n0, wte, 0, INT_MAX, rows, C);
        td_position_forward(y, wpe, NULL, n0, rows, T, C);
        t->from_f32(at(t, out, (size_t)n0 * C), y, (size_t)rows * C);
    }
    release(y);
}

static void embedding_bwd(const td_lp_type *t, float *dwte, float *dwpe, const void *dout,
                          const int *tokens, int B, int T, int C) {
    int N = B * T, R = tile_rows(C);
    float *g = scratch((size_t)R * C);
    for (int n0 = 0; n0 < N; n0 += R) {
        int rows = N - n0 < R ? N - n0 : R;
        t->to_f32(g, at_c(t, dout, (size_t)n0 * C), (size_t)rows * C);
        if (dwte) td_embedding_shard_backward(dwte, g, tokens + n0, 0, INT_MAX, rows, C);
        if (dwpe) td_position_backward(dwpe, g, NULL, n0, rows, T, C);
    }
    release(g);
}

/* ---- softmax + cross-entropy: tiles of rows ---- */

static void xent_fwd(const td_lp_type *t, float *losses, void *probs, const void *logits,
                     const int *targets, int N, int V, int Vp) {
    int R = tile_rows(Vp);
    float *x = scratch((size_t)R * Vp);
    for (int n0 = 0; n0 < N; n0 += R) {
        int rows = N - n0 < R ? N - n0 : R;
        size_t off = (size_t)n0 * Vp, len = (size_t)rows * Vp;
        t->to_f32(x, at_c(t, logits, off), len);
        td_softmax_xent_forward(losses ? losses + n0 : NULL, x, x, targets ? targets + n0 : NULL,
                                rows, V, Vp);
        t->from_f32(at(t, probs, off), x, len); /* after the read: probs may alias logits */
    }
    release(x);
}

static void xent_bwd(const td_lp_type *t, void *dlogits, const void *probs, const int *targets,
                     const float *dloss, int N, int V, int Vp) {
    int R = tile_rows(Vp);
    float *p = scratch((size_t)R * Vp);
    for (int n0 = 0; n0 < N; n0 += R) {
        int rows = N - n0 < R ? N - n0 : R;
        size_t off = (size_t)n0 * Vp, len = (size_t)rows * Vp;
        t->to_f32(p, at_c(t, probs, off), len);
        td_softmax_xent_backward(p, p, targets + n0, dloss + n0, rows, V, Vp);
        t->from_f32(at(t, dlogits, off), p, len);
    }
    release(p);
}

/* ---- the public functions: bf16 ---- */

void td_gelu_bf16_forward(td_bf16 *out, const td_bf16 *inp, size_t n) {
    gelu_fwd(&TD_LP_BF16, out, inp, n);
}
void td_gelu_bf16_backward(td_bf16 *dinp, const td_bf16 *inp, const td_bf16 *dout, size_t n) {
    gelu_bwd(&TD_LP_BF16, dinp, inp, dout, n);
}
void td_residual_bf16_forward(td_bf16 *out, const td_bf16 *a, const td_bf16 *b, size_t n) {
    residual_fwd(&TD_LP_BF16, out, a, b, n);
}
void td_residual_bf16_backward(td_bf16 *da, td_bf16 *db, const td_bf16 *dout, size_t n) {
    residual_bwd(&TD_LP_BF16, da, db, dout, n);
}
void td_layernorm_bf16_forward(td_bf16 *out, float *mean, float *rstd, const td_bf16 *inp,
                               const float *w, const float *b, int N, int C) {
    layernorm_fwd(&TD_LP_BF16, out, mean, rstd, inp, w, b, N, C);
}
void td_layernorm_bf16_backward(td_bf16 *dinp, float *dw, float *db, const td_bf16 *dout,
                                const td_bf16 *inp, const float *w, const float *mean,
                                const float *rstd, int N, int C) {
    layernorm_bwd(&TD_LP_BF16, dinp, dw, db, dout, inp, w, mean, rstd, N, C);
}
void td_attention_bf16_forward(td_bf16 *out, td_bf16 *att, const td_bf16 *qkv, int B, int T,
                               int C, int NH) {
    attention_fwd(&TD_LP_BF16, out, att, qkv, B, T, C, NH);
}
void td_attention_bf16_backward(td_bf16 *dqkv, const td_bf16 *dout, const td_bf16 *qkv,
                                const td_bf16 *att, int B, int T, int C, int NH) {
    attention_bwd(&TD_LP_BF16, dqkv, dout, qkv, att, B, T, C, NH);
}
void td_embedding_bf16_forward(td_bf16 *out, const int *tokens, const float *wte,
                               const float *wpe, int B, int T, int C) {
    embedding_fwd(&TD_LP_BF16, out, tokens, wte, wpe, B, T, C);
}
void td_embedding_bf16_backward(float *dwte, float *dwpe, const td_bf16 *dout, const int *tokens,
                                int B, int T, int C) {
    embedding_bwd(&TD_LP_BF16, dwte, dwpe, dout, tokens, B, T, C);
}
void td_softmax_xent_bf16_forward(float *losses, td_bf16 *probs, const td_bf16 *logits,
                                  const int *targets, int N, int V, int Vp) {
    xent_fwd(&TD_LP_BF16, losses, probs, logits, targets, N, V, Vp);
}
void td_softmax_xent_bf16_backward(td_bf16 *dlogits, const td_bf16 *probs, const int *targets,
                                   const float *dloss, int N, int V, int Vp) {
    xent_bwd(&TD_LP_BF16, dlogits, probs, targets, dloss, N, V, Vp);
}

void td_rmsnorm_bf16_forward(td_bf16 *out, float *rstd, const td_bf16 *inp, const float *w, int N,
                             int C, float eps) {
    rmsnorm_fwd(&TD_LP_BF16, out, rstd, inp, w, N, C, eps);
}
void td_rmsnorm_bf16_backward(td_bf16 *dinp, float *dw, const td_bf16 *dout, const td_bf16 *inp,
                              const float *w, const float *rstd, int N, int C) {
    rmsnorm_bwd(&TD_LP_BF16, dinp, dw, dout, inp, w, rstd, N, C);
}
void td_swiglu_bf16_forward(td_bf16 *h, const td_bf16 *gu, int N, int F) {
    swiglu_fwd(&TD_LP_BF16, h, gu, N, F);
}
void td_swiglu_bf16_backward(td_bf16 *dgu, const td_bf16 *dh, const td_bf16 *gu, int N, int F) {
    swiglu_bwd(&TD_LP_BF16, dgu, dh, gu, N, F);
}

/* ---- the public functions: fp16 ---- */

void td_gelu_f16_forward(td_f16 *out, const td_f16 *inp, size_t n) {
    gelu_fwd(&TD_LP_F16, out, inp, n);
}
void td_gelu_f16_backward(td_f16 *dinp, const td_f16 *inp, const td_f16 *dout, size_t n) {
    gelu_bwd(&TD_LP_F16, dinp, inp, dout, n);
}
void td_residual_f16_forward(td_f16 *out, const td_f16 *a, const td_f16 *b, size_t n) {
    residual_fwd(&TD_LP_F16, out, a, b, n);
}
void td_residual_f16_backward(td_f16 *da, td_f16 *db, const td_f16 *dout, size_t n) {
    residual_bwd(&TD_LP_F16, da, db, dout, n);
}
void td_layernorm_f16_forward(td_f16 *out, float *mean, float *rstd, const td_f16 *inp,
                              const float *w, const float *b, int N, int C) {
    layernorm_fwd(&TD_LP_F16, out, mean, rstd, inp, w, b, N, C);
}
void td_layernorm_f16_backward(td_f16 *dinp, float *dw, float *db, const td_f16 *dout,
                               const td_f16 *inp, const float *w, const float *mean,
                               const float *rstd, int N, int C) {
    layernorm_bwd(&TD_LP_F16, dinp, dw, db, dout, inp, w, mean, rstd, N, C);
}
void td_attention_f16_forward(td_f16 *out, td_f16 *att, const td_f16 *qkv, int B, int T, int C,
                              int NH) {
    attention_fwd(&TD_LP_F16, out, att, qkv, B, T, C, NH);
}
void td_attention_f16_backward(td_f16 *dqkv, const td_f16 *dout, const td_f16 *qkv,
                               const td_f16 *att, int B, int T, int C, int NH) {
    attention_bwd(&TD_LP_F16, dqkv, dout, qkv, att, B, T, C, NH);
}
void td_embedding_f16_forward(td_f16 *out, const int *tokens, const float *wte, const float *wpe,
                              int B, int T, int C) {
    embedding_fwd(&TD_LP_F16, out, tokens, wte, wpe, B, T, C);
}
void td_embedding_f16_backward(float *dwte, float *dwpe, const td_f16 *dout, const int *tokens,
                               int B, int T, int C) {
    embedding_bwd(&TD_LP_F16, dwte, dwpe, dout, tokens, B, T, C);
}
void td_softmax_xent_f16_forward(float *losses, td_f16 *probs, const td_f16 *logits,
                                 const int *targets, int N, int V, int Vp) {
    xent_fwd(&TD_LP_F16, losses, probs, logits, targets, N, V, Vp);
}
void td_softmax_xent_f16_backward(td_f16 *dlogits, const td_f16 *probs, const int *targets,
                                  const float *dloss, int N, int V, int Vp) {
    xent_bwd(&TD_LP_F16, dlogits, probs, targets, dloss, N, V, Vp);
}
void td_rmsnorm_f16_forward(td_f16 *out, float *rstd, const td_f16 *inp, const float *w, int N,
                            int C, float eps) {
    rmsnorm_fwd(&TD_LP_F16, out, rstd, inp, w, N, C, eps);
}
void td_rmsnorm_f16_backward(td_f16 *dinp, float *dw, const td_f16 *dout, const td_f16 *inp,
                             const float *w, const float *rstd, int N, int C) {
    rmsnorm_bwd(&TD_LP_F16, dinp, dw, dout, inp, w, rstd, N, C);
}
void td_swiglu_f16_forward(td_f16 *h, const td_f16 *gu, int N, int F) {
    swiglu_fwd(&TD_LP_F16, h, gu, N, F);
}
void td_swiglu_f16_backward(td_f16 *dgu, const td_f16 *dh, const td_f16 *gu, int N, int F) {
    swiglu_bwd(&TD_LP_F16, dgu, dh, gu, N, F);
}
