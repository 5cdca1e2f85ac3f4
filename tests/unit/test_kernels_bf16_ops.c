/* The bf16 non-GEMM kernels (src/kernels/lowp_ops.c) against the fp32
 * kernels of kernels.h run on the same bf16-valued inputs (converted to
 * fp32), and 1 vs 2 threads bitwise.
 *
 * Tolerances:
 *  TOL_ROUND = 2^-8 relative, no floor, for every bf16 output. bf16 keeps 8
 *   significand bits, so rounding to nearest moves x in [2^e, 2^(e+1)) by at
 *   most half an ulp = 2^(e-8) <= 2^-8 |x| (unit roundoff u = 2^-8; normal
 *   range, which the data stays in). The bf16 kernels compute exactly the
 *   fp32 kernel's value and round it once (gradients added into a bf16
 *   buffer: old bf16 value + fp32 term, rounded once), so one u bounds the
 *   difference; a wrong term or a double rounding of a tie-free value
 *   exceeds it somewhere in 10^4-10^5 elements.
 *  TOL_PSUM = 1e-5 with the 0.1 rms floor, fp32 parameter gradients of
 *   layernorm: the bf16 version sums each tile of rows (in double, as the
 *   fp32 kernel) and adds the tile sums into the float output, one float
 *   rounding per tile (<= 4 here): <= 4 x 2^-24 ~ 2.4e-7 of the magnitude of
 *   the sums; 1e-5 leaves room for cancellation and still catches a lost
 *   tile (>= 10% off).
 *  Embedding gradients are compared bitwise: the tiles visit rows in the
 *   fp32 kernel's order and each element receives the same float adds. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "trident/kernels.h"
#include "trident/kernels_bf16.h"

#define TOL_ROUND (1.0 / 256)
#define TOL_PSUM 1e-5
#define FLOOR 0.1

/* A bf16 tensor and its exact fp32 value. */
typedef struct {
    td_bf16 *b;
    float *f;
} pair;

static pair rand_pair(size_t n, uint64_t stream, float scale) {
    pair p = {TU_NEW(td_bf16, n), TU_NEW(float, n)};
    tu_randn(p.f, n, stream, scale);
    td_bf16_from_float_n(p.b, p.f, n);
    td_bf16_to_float_n(p.f, p.b, n);
    return p;
}

static void check_round(const char *name, const td_bf16 *got, const float *exp, size_t n) {
    float *g = TU_NEW(float, n);
    td_bf16_to_float_n(g, got, n);
    tu_check_close_f(name, g, exp, n, TOL_ROUND, 0.0);
}

/* The outputs of one run, kept to compare thread counts byte for byte. */
#define MAX_OUT 8
typedef struct {
    const void *p[MAX_OUT];
    size_t bytes[MAX_OUT];
    int n;
} outputs;
#define TU_ASSERT_ROOM(o) \
    do { if ((o)->n == MAX_OUT) { printf("too many outputs\n"); exit(1); } } while (0)
static void keep(outputs *o, const void *p, size_t bytes) {
    TU_ASSERT_ROOM(o);
    o->p[o->n] = p;
    o->bytes[o->n++] = bytes;
}

/* Each case runs the bf16 kernels (and, when `check`, the fp32 kernels and
 * the comparisons) and records its bf16-side outputs. */
typedef void (*case_fn)(int check, outputs *o);

static void case_gelu_residual(int check, outputs *o) {
    const size_t n = 200003; /* 4 tiles, the last partial, odd length */
    pair x = rand_pair(n, 1, 2.0f), y = rand_pair(n, 2, 1.0f), g = rand_pair(n, 3, 1.0f);
    pair dx = rand_pair(n, 4, 0.1f), da = rand_pair(n, 5, 0.1f), db = rand_pair(n, 6, 0.1f);
    td_bf16 *out = TU_NEW(td_bf16, n), *sum = TU_NEW(td_bf16, n);
    td_gelu_bf16_forward(out, x.b, n);
    td_gelu_bf16_backward(dx.b, x.b, g.b, n);
    td_residual_bf16_forward(sum, x.b, y.b, n);
    td_residual_bf16_backward(da.b, db.b, g.b, n);
    keep(o, out, n * 2), keep(o, dx.b, n * 2), keep(o, sum, n * 2), keep(o, da.b, n * 2),
        keep(o, db.b, n * 2);
    if (!check) return;
    float *fo = TU_NEW(float, n), *fs = TU_NEW(float, n);
    td_gelu_forward(fo, x.f, n);
    td_gelu_backward(dx.f, x.f, g.f, n);
    td_residual_forward(fs, x.f, y.f, n);
    td_residual_backward(da.f, db.f, g.f, n);
    check_round("gelu_bf16 fwd vs fp32", out, fo, n);
    check_round("gelu_bf16 bwd (+= dinp) vs fp32", dx.b, dx.f, n);
    check_round("residual_bf16 fwd vs fp32", sum, fs, n);
    check_round("residual_bf16 bwd da += vs fp32", da.b, da.f, n);
    check_round("residual_bf16 bwd db += vs fp32", db.b, db.f, n);
}

static void case_layernorm(int check, outputs *o) {
    const int N = 513, C = 384; /* 170-row tiles: 4, the last of 3 rows */
    size_t n = (size_t)N * C;
    pair x = rand_pair(n, 11, 1.0f), g = rand_pair(n, 12, 1.0f), dx = rand_pair(n, 13, 0.1f);
    for (int r = 0; r < N; r++) /* rows with an offset: the centring matters */
        for (int c = 0; c < C; c++) x.f[(size_t)r * C + c] += (float)(r % 7);
    td_bf16_from_float_n(x.b, x.f, n);
    td_bf16_to_float_n(x.f, x.b, n);
    float *w = TU_NEW(float, C), *b = TU_NEW(float, C), *dw = TU_NEW(float, C), *dbb = TU_NEW(float, C);
    tu_randn(w, C, 14, 1.0f);
    tu_randn(b, C, 15, 1.0f);
    tu_randn(dw, C, 16, 1.0f);
    tu_randn(dbb, C, 17, 1.0f);
    float *dw_f = tu_copy(dw, C), *db_f = tu_copy(dbb, C);
    td_bf16 *out = TU_NEW(td_bf16, n);
    float *mean = TU_NEW(float, N), *rstd = TU_NEW(float, N);
    td_layernorm_bf16_forward(out, mean, rstd, x.b, w, b, N, C);
    td_layernorm_bf16_backward(dx.b, dw, dbb, g.b, x.b, w, mean, rstd, N, C);
    keep(o, out, n * 2), keep(o, mean, N * 4), keep(o, rstd, N * 4), keep(o, dx.b, n * 2),
        keep(o, dw, C * 4), keep(o, dbb, C * 4);
    if (!check) return;
    float *fo = TU_NEW(float, n), *fm = TU_NEW(float, N), *fr = TU_NEW(float, N);
    td_layernorm_forward(fo, fm, fr, x.f, w, b, N, C);
    td_layernorm_backward(dx.f, dw_f, db_f, g.f, x.f, w, fm, fr, N, C);
    check_round("layernorm_bf16 fwd vs fp32", out, fo, n);
    tu_check_bitwise("layernorm_bf16 mean (fp32, same rows) vs fp32", mean, fm, N);
    tu_check_bitwise("layernorm_bf16 rstd (fp32, same rows) vs fp32", rstd, fr, N);
    check_round("layernorm_bf16 bwd dinp += vs fp32", dx.b, dx.f, n);
    tu_check_close_f("layernorm_bf16 bwd dw (fp32, 4 tiles) vs fp32", dw, dw_f, C, TOL_PSUM, FLOOR);
    tu_check_close_f("layernorm_bf16 bwd db (fp32, 4 tiles) vs fp32", dbb, db_f, C, TOL_PSUM, FLOOR);
}

static void case_attention(int check, outputs *o) {
    const int B = 3, T = 33, C = 48, NH = 4;
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
    pair qkv = rand_pair(nq, 21, 1.0f), g = rand_pair(no, 22, 1.0f), dq = rand_pair(nq, 23, 0.1f);
    td_bf16 *out = TU_NEW(td_bf16, no), *att = TU_NEW(td_bf16, na);
    td_attention_bf16_forward(out, att, qkv.b, B, T, C, NH);
    td_attention_bf16_backward(dq.b, g.b, qkv.b, att, B, T, C, NH);
    keep(o, out, no * 2), keep(o, att, na * 2), keep(o, dq.b, nq * 2);
    if (!check) return;
    float *fo = TU_NEW(float, no), *fa = TU_NEW(float, na), *datt = TU_NEW(float, na);
    td_attention_forward(fo, fa, qkv.f, B, T, C, NH);
    check_round("attention_bf16 fwd out vs fp32", out, fo, no);
    check_round("attention_bf16 fwd att (probabilities) vs fp32", att, fa, na);
    /* the backward reads the saved probabilities: give the fp32 kernel the
     * same (bf16) ones */
    td_bf16_to_float_n(fa, att, na);
    td_attention_backward(dq.f, datt, g.f, qkv.f, fa, B, T, C, NH);
    check_round("attention_bf16 bwd dqkv += vs fp32 (same att)", dq.b, dq.f, nq);
}

static void case_embedding(int check, outputs *o) {
    const int B = 4, T = 100, C = 384, V = 50; /* 400 rows: tiles of 170 */
    size_t n = (size_t)B * T * C;
    int *tok = TU_NEW(int, B * T);
    tu_rand_ints(tok, B * T, 31, V);
    float *wte = TU_NEW(float, (size_t)V * C), *wpe = TU_NEW(float, (size_t)T * C);
    tu_randn(wte, (size_t)V * C, 32, 1.0f);
    tu_randn(wpe, (size_t)T * C, 33, 1.0f);
    pair g = rand_pair(n, 34, 1.0f);
    float *dwte = TU_NEW(float, (size_t)V * C), *dwpe = TU_NEW(float, (size_t)T * C);
    tu_randn(dwte, (size_t)V * C, 35, 1.0f);
    tu_randn(dwpe, (size_t)T * C, 36, 1.0f);
    float *dwte_f = tu_copy(dwte, (size_t)V * C), *dwpe_f = tu_copy(dwpe, (size_t)T * C);
    td_bf16 *out = TU_NEW(td_bf16, n);
    td_embedding_bf16_forward(out, tok, wte, wpe, B, T, C);
    td_embedding_bf16_backward(dwte, dwpe, g.b, tok, B, T, C);
    keep(o, out, n * 2), keep(o, dwte, (size_t)V * C * 4), keep(o, dwpe, (size_t)T * C * 4);
    if (!check) return;
    float *fo = TU_NEW(float, n);
    td_embedding_forward(fo, tok, wte, wpe, B, T, C);
    td_embedding_backward(dwte_f, dwpe_f, g.f, tok, B, T, C);
    check_round("embedding_bf16 fwd vs fp32", out, fo, n);
    tu_check_bitwise("embedding_bf16 bwd dwte += (fp32) vs fp32", dwte, dwte_f, (size_t)V * C);
    tu_check_bitwise("embedding_bf16 bwd dwpe += (fp32) vs fp32", dwpe, dwpe_f, (size_t)T * C);
}

static void case_xent(int check, outputs *o) {
    const int N = 1000, V = 65, Vp = 80; /* tiles of 819 rows */
    size_t n = (size_t)N * Vp;
    pair x = rand_pair(n, 41, 3.0f);
    int *tgt = TU_NEW(int, N);
    tu_rand_ints(tgt, N, 42, V);
    float *dloss = TU_NEW(float, N), *loss = TU_NEW(float, N);
    for (int i = 0; i < N; i++) dloss[i] = 1.0f / N;
    td_bf16 *probs = TU_NEW(td_bf16, n), *dl = TU_NEW(td_bf16, n);
    td_softmax_xent_bf16_forward(loss, probs, x.b, tgt, N, V, Vp);
    td_softmax_xent_bf16_backward(dl, probs, tgt, dloss, N, V, Vp);
    keep(o, loss, N * 4), keep(o, probs, n * 2), keep(o, dl, n * 2);
    /* in place, as the model runs it: probs over logits, dlogits over probs */
    td_bf16 *inplace = TU_NEW(td_bf16, n);
    memcpy(inplace, x.b, n * 2);
    float *loss2 = TU_NEW(float, N);
    td_softmax_xent_bf16_forward(loss2, inplace, inplace, tgt, N, V, Vp);
    int same_fwd = !memcmp(inplace, probs, n * 2) && !memcmp(loss2, loss, N * 4);
    td_softmax_xent_bf16_backward(inplace, inplace, tgt, dloss, N, V, Vp);
    int same = same_fwd && !memcmp(inplace, dl, n * 2);
    if (!check) return;
    tu_checks++;
    if (!same) tu_failures++;
    printf("%s  %-52s\n", same ? "PASS" : "FAIL", "softmax_xent_bf16 in place = out of place, bitwise");
    float *fl = TU_NEW(float, N), *fp = TU_NEW(float, n), *fd = TU_NEW(float, n);
    td_softmax_xent_forward(fl, fp, x.f, tgt, N, V, Vp);
    tu_check_bitwise("softmax_xent_bf16 losses (fp32) vs fp32", loss, fl, N);
    check_round("softmax_xent_bf16 probs vs fp32", probs, fp, n);
    td_bf16_to_float_n(fp, probs, n); /* same saved probabilities */
    td_softmax_xent_backward(fd, fp, tgt, dloss, N, V, Vp);
    check_round("softmax_xent_bf16 bwd dlogits vs fp32 (same probs)", dl, fd, n);
}

static void run_case(const char *name, case_fn fn) {
    int mark = tu_mark();
    outputs o1 = {0}, o2 = {0};
    td_kernels_set_threads(2);
    fn(1, &o2);
    td_kernels_set_threads(1);
    fn(0, &o1);
    size_t bad = 0;
    for (int i = 0; i < o1.n; i++) bad += o1.bytes[i] != o2.bytes[i] || memcmp(o1.p[i], o2.p[i], o1.bytes[i]);
    tu_checks++;
    if (bad) tu_failures++;
    char label[96];
    snprintf(label, sizeof label, "%s: all outputs 2 threads vs 1", name);
    printf("%s  %-52s %d outputs, %zu differ bitwise\n", bad ? "FAIL" : "PASS", label, o1.n, bad);
    tu_release(mark);
}

int main(void) {
    run_case("gelu+residual", case_gelu_residual);
    run_case("layernorm", case_layernorm);
    run_case("attention", case_attention);
    run_case("embedding", case_embedding);
    run_case("softmax_xent", case_xent);
    return tu_finish("test_kernels_bf16_ops");
}
