/* The non-GEMM kernels on bf16 activations (kernels_bf16.h).
 *
 * Each converts a tile of its bf16 inputs to fp32, runs the fp32 kernel of
 * kernels.h on the tile and rounds the outputs back to bf16 (parameter
 * gradients and saved statistics stay fp32 and are passed straight through).
 * So the math is the fp32 kernels' own, computed in fp32, and a bf16 output
 * is exactly the rounding of what the fp32 kernel gives on the same
 * (bf16-valued) inputs; the tests check that. Tiles are fixed by the shapes
 * alone (never by the thread count) and the fp32 kernels are bitwise
 * independent of the thread count, so these are too. The cost is an extra
 * pass over each tile in and out (cache-resident at TD_BF16_TILE), paid for
 * one code path per op; fused loops can replace a tile loop later if a
 * profile asks.
 * Scratch comes from td_alloc (TD_MEM_OTHER) per call, as the fp32
 * layernorm backward does. */
#include <limits.h>

#include "internal.h"
#include "trident/base.h"
#include "trident/kernels_bf16.h"

/* fp32 elements per tile buffer: 256 KiB, a few buffers stay in L2. */
#define TD_BF16_TILE 65536

static float *scratch(size_t n) { return td_alloc(n * sizeof(float), TD_MEM_OTHER); }

/* Rows per tile for rows of `width` elements (at least one row). */
static int tile_rows(int width) {
    int r = TD_BF16_TILE / (width > 0 ? width : 1);
    return r > 0 ? r : 1;
}

static void to_f(float *dst, const td_bf16 *src, size_t n) { td_bf16_to_float_n(dst, src, n); }
static void to_b(td_bf16 *dst, const float *src, size_t n) { td_bf16_from_float_n(dst, src, n); }

/* ---- elementwise ---- */

void td_gelu_bf16_forward(td_bf16 *out, const td_bf16 *inp, size_t n) {
    float *x = scratch(TD_BF16_TILE), *y = scratch(TD_BF16_TILE);
    for (size_t i = 0; i < n; i += TD_BF16_TILE) {
        size_t len = td_min_sz(TD_BF16_TILE, n - i);
        to_f(x, inp + i, len);
        td_gelu_forward(y, x, len);
        to_b(out + i, y, len);
    }
    td_free(x);
    td_free(y);
}

void td_gelu_bf16_backward(td_bf16 *dinp, const td_bf16 *inp, const td_bf16 *dout, size_t n) {
    float *x = scratch(TD_BF16_TILE), *g = scratch(TD_BF16_TILE), *dx = scratch(TD_BF16_TILE);
    for (size_t i = 0; i < n; i += TD_BF16_TILE) {
        size_t len = td_min_sz(TD_BF16_TILE, n - i);
        to_f(x, inp + i, len);
        to_f(g, dout + i, len);
        to_f(dx, dinp + i, len); /* the kernel adds into dinp */
        td_gelu_backward(dx, x, g, len);
        to_b(dinp + i, dx, len);
    }
    td_free(x);
    td_free(g);
    td_free(dx);
}

void td_residual_bf16_forward(td_bf16 *out, const td_bf16 *a, const td_bf16 *b, size_t n) {
    float *x = scratch(TD_BF16_TILE), *y = scratch(TD_BF16_TILE);
    for (size_t i = 0; i < n; i += TD_BF16_TILE) {
        size_t len = td_min_sz(TD_BF16_TILE, n - i);
        to_f(x, a + i, len);
        to_f(y, b + i, len);
        td_residual_forward(x, x, y, len);
        to_b(out + i, x, len);
    }
    td_free(x);
    td_free(y);
}

void td_residual_bf16_backward(td_bf16 *da, td_bf16 *db, const td_bf16 *dout, size_t n) {
    float *g = scratch(TD_BF16_TILE), *x = scratch(TD_BF16_TILE), *y = scratch(TD_BF16_TILE);
    for (size_t i = 0; i < n; i += TD_BF16_TILE) {
        size_t len = td_min_sz(TD_BF16_TILE, n - i);
        to_f(g, dout + i, len);
        if (da) to_f(x, da + i, len);
        if (db) to_f(y, db + i, len);
        td_residual_backward(da ? x : NULL, db ? y : NULL, g, len);
        if (da) to_b(da + i, x, len);
        if (db) to_b(db + i, y, len);
    }
    td_free(g);
    td_free(x);
    td_free(y);
}

/* ---- layernorm: tiles of whole rows ---- */

void td_layernorm_bf16_forward(td_bf16 *out, float *mean, float *rstd, const td_bf16 *inp,
                               const float *w, const float *b, int N, int C) {
    int R = tile_rows(C);
    float *x = scratch((size_t)R * C), *y = scratch((size_t)R * C);
    for (int n0 = 0; n0 < N; n0 += R) {
        int rows = N - n0 < R ? N - n0 : R;
        size_t off = (size_t)n0 * C, len = (size_t)rows * C;
        to_f(x, inp + off, len);
        td_layernorm_forward(y, mean ? mean + n0 : NULL, rstd ? rstd + n0 : NULL, x, w, b, rows, C);
        to_b(out + off, y, len);
    }
    td_free(x);
    td_free(y);
}

/* dw, db (fp32) receive one partial sum per tile, tiles in row order. */
void td_layernorm_bf16_backward(td_bf16 *dinp, float *dw, float *db, const td_bf16 *dout,
                                const td_bf16 *inp, const float *w, const float *mean,
                                const float *rstd, int N, int C) {
    int R = tile_rows(C);
    float *x = scratch((size_t)R * C), *g = scratch((size_t)R * C);
    float *dx = dinp ? scratch((size_t)R * C) : NULL;
    for (int n0 = 0; n0 < N; n0 += R) {
        int rows = N - n0 < R ? N - n0 : R;
        size_t off = (size_t)n0 * C, len = (size_t)rows * C;
        to_f(x, inp + off, len);
        to_f(g, dout + off, len);
        if (dx) to_f(dx, dinp + off, len);
        td_layernorm_backward(dx, dw, db, g, x, w, mean + n0, rstd + n0, rows, C);
        if (dx) to_b(dinp + off, dx, len);
    }
    td_free(x);
    td_free(g);
    td_free(dx);
}

/* ---- attention: one batch row (all heads) per tile ---- */

void td_attention_bf16_forward(td_bf16 *out, td_bf16 *att, const td_bf16 *qkv, int B, int T,
                               int C, int NH) {
    size_t nq = (size_t)T * 3 * C, no = (size_t)T * C, na = (size_t)NH * T * T;
    float *q = scratch(nq), *o = scratch(no), *a = scratch(na);
    for (int b = 0; b < B; b++) {
        to_f(q, qkv + b * nq, nq);
        td_attention_forward(o, a, q, 1, T, C, NH);
        to_b(out + b * no, o, no);
        to_b(att + b * na, a, na);
    }
    td_free(q);
    td_free(o);
    td_free(a);
}

void td_attention_bf16_backward(td_bf16 *dqkv, const td_bf16 *dout, const td_bf16 *qkv,
                                const td_bf16 *att, int B, int T, int C, int NH) {
    size_t nq = (size_t)T * 3 * C, no = (size_t)T * C, na = (size_t)NH * T * T;
    float *q = scratch(nq), *dq = scratch(nq), *g = scratch(no), *a = scratch(na);
    float *da = scratch(na);
    for (int b = 0; b < B; b++) {
        to_f(q, qkv + b * nq, nq);
        to_f(dq, dqkv + b * nq, nq); /* the kernel adds into dqkv */
        to_f(g, dout + b * no, no);
        to_f(a, att + b * na, na);
        td_attention_backward(dq, da, g, q, a, 1, T, C, NH);
        to_b(dqkv + b * nq, dq, nq);
    }
    td_free(q);
    td_free(dq);
    td_free(g);
    td_free(a);
    td_free(da);
}

/* ---- embedding: tiles of rows; wte, wpe and their gradients fp32 ---- */

void td_embedding_bf16_forward(td_bf16 *out, const int *tokens, const float *wte,
                               const float *wpe, int B, int T, int C) {
    int N = B * T, R = tile_rows(C);
    float *y = scratch((size_t)R * C);
    for (int n0 = 0; n0 < N; n0 += R) {
        int rows = N - n0 < R ? N - n0 : R;
        /* the lookup (one shard holding every row), then the positions */
        td_embedding_shard_forward(y, tokens + n0, wte, 0, INT_MAX, rows, C);
        td_position_forward(y, wpe, n0, rows, T, C);
        to_b(out + (size_t)n0 * C, y, (size_t)rows * C);
    }
    td_free(y);
}

void td_embedding_bf16_backward(float *dwte, float *dwpe, const td_bf16 *dout, const int *tokens,
                                int B, int T, int C) {
    int N = B * T, R = tile_rows(C);
    float *g = scratch((size_t)R * C);
    for (int n0 = 0; n0 < N; n0 += R) {
        int rows = N - n0 < R ? N - n0 : R;
        to_f(g, dout + (size_t)n0 * C, (size_t)rows * C);
        if (dwte) td_embedding_shard_backward(dwte, g, tokens + n0, 0, INT_MAX, rows, C);
        if (dwpe) td_position_backward(dwpe, g, n0, rows, T, C);
    }
    td_free(g);
}

/* ---- softmax + cross-entropy: tiles of rows ---- */

void td_softmax_xent_bf16_forward(float *losses, td_bf16 *probs, const td_bf16 *logits,
                                  const int *targets, int N, int V, int Vp) {
    int R = tile_rows(Vp);
    float *x = scratch((size_t)R * Vp);
    for (int n0 = 0; n0 < N; n0 += R) {
        int rows = N - n0 < R ? N - n0 : R;
        size_t off = (size_t)n0 * Vp, len = (size_t)rows * Vp;
        to_f(x, logits + off, len);
        td_softmax_xent_forward(losses ? losses + n0 : NULL, x, x, targets ? targets + n0 : NULL,
                                rows, V, Vp);
        to_b(probs + off, x, len); /* after the read: probs may alias logits */
    }
    td_free(x);
}

void td_softmax_xent_bf16_backward(td_bf16 *dlogits, const td_bf16 *probs, const int *targets,
                                   const float *dloss, int N, int V, int Vp) {
    int R = tile_rows(Vp);
    float *p = scratch((size_t)R * Vp);
    for (int n0 = 0; n0 < N; n0 += R) {
        int rows = N - n0 < R ? N - n0 : R;
        size_t off = (size_t)n0 * Vp, len = (size_t)rows * Vp;
        to_f(p, probs + off, len);
        td_softmax_xent_backward(p, p, targets + n0, dloss + n0, rows, V, Vp);
        to_b(dlogits + off, p, len);
    }
    td_free(p);
}
