/* trident verify's tolerances (verify.h), each derived from the precision
 * of the stage it covers: the compute type, the gradient reduction's type,
 * fp32 reordering; docs/verify-precision.md has the measured margins. */
#include <math.h>

#include "trident/base.h"
#include "verify.h"

/* fp32. A layout only reorders sums. Every reduction of the engine
 * accumulates in fp32 in every precision (a GEMM's K = C or 4C, attention's
 * T, a weight gradient's N = B x T tokens, the micro-batches, dp ranks and
 * tp partial products summed after them: model.h), and reordering a sum of
 * K terms moves it by at most K x 2^-24 of the sum of its terms'
 * magnitudes, sqrt(K) x 2^-24 when the roundings' signs are independent
 * (Higham and Mary 2019, "A new approach to probabilistic rounding error
 * analysis"): 1.2e-6 at K = 384 tokens, where layouts measure 2e-7 to 1e-6
 * of a tensor's max (docs/verify-precision.md). GRAD_TOL keeps a factor 85
 * above that, for reductions 7000 times longer; a missing or doubled
 * reduction is O(1) of the max (the skip-embed-sum fault: 1.09). The loss
 * is a mean of such sums: ~1e-7 per step. */
#define LOSS_TOL 1e-5
#define GRAD_TOL 1e-4

/* --precision bf16 | fp16: the oracle stays one fp32 process, so the
 * comparison sees the 16-bit arithmetic's own error as well as the
 * layout's. u is the type's unit roundoff under round-to-nearest, 2^-p for
 * p bits of significand: bf16 p = 8, u = 2^-8 = 3.9e-3; fp16 p = 11,
 * u = 2^-11 = 4.9e-4. No sum runs in 16 bits (above), so nothing of u grows
 * with a reduction's length: u enters where a value is stored in the
 * 16-bit type, one rounding of at most u of it. A weight gradient is a sum
 * over tokens of x_n dy_n: x_n was rounded when stored (1), dy_n is the
 * rounded result (1) of a GEMM of the rounded gradient above it (1) and the
 * rounded weight copy (1): 4 roundings, 4u of the term where they align.
 * Each factor also inherits the roundings of the layers before it (forward)
 * or after it (backward); LayerNorm (RMSNorm) renormalises every block's
 * input, so they are counted once more: ROUNDINGS_16 = 2 x 4. Relative to
 * the tensor's max the term errors add no faster than the terms
 * (independent signs: sqrt(N) against the gradient's coherent N), so the
 * bound is per term. Measured (docs/verify-precision.md): the worst element
 * at 1.7u to 2.7u for 2 to 8 layers and 128 to 2048 tokens per step. */
#define ROUNDINGS_16 8

/* --grad-reduce-dtype bf16: each of the P ranks of the gradient group
 * rounds its partial gradient to bf16 before it travels (one rounding of at
 * most u of it), the sum runs in fp32, and the reduced value is rounded
 * once more where it travels back: u (sum_r |g_r| + |g|). A replica's
 * gradient is a mean over its 1/P of the tokens, so sum_r |g_r| stays near
 * |g| where the replicas agree and below P max |g| where they cancel: the
 * bound takes (P + 1) u of the tensor's max. */

/* Near ties of a mixture of experts' routing. fp32: 1e-4, 1700 units of
 * fp32's roundoff of a selection value in [0, 1], far above what reordering
 * moves one (the sums behind a router logit run over C <= 4096 terms:
 * sqrt(C) 2^-24 < 4e-6). 16-bit: a router logit carries the ROUNDINGS_16 u
 * of any GEMM output (above); a softmax or sigmoid score moves by at most
 * its logit's error, and the margin is the difference of two scores:
 * 2 ROUNDINGS_16 u. */
#define TIE_FP32 1e-4
/* The share of a run's routings that may differ at near ties before
 * verify fails anyway: a router that is broken moves tokens with wide
 * margins as well, and a 16-bit one rounding near ties moves a few percent
 * at most (docs/verify-precision.md measures the share). */
#define TIE_SHARE 0.05

static double unit_roundoff(td_precision p) {
    return p == TD_PREC_BF16 ? 0x1p-8 : p == TD_PREC_FP16 ? 0x1p-11 : 0.0;
}

void verify_tol_init(verify_tol *t, td_precision p, int grad_bf16, int grad_ranks) {
    t->u = unit_roundoff(p);
    t->u_red = grad_bf16 && grad_ranks > 1 ? 0x1p-8 : 0.0;
    t->red_terms = grad_ranks + 1;
    t->grad = GRAD_TOL + ROUNDINGS_16 * t->u + t->red_terms * t->u_red;
    t->loss_abs = LOSS_TOL;
    t->tie = t->u > 0 ? 2.0 * ROUNDINGS_16 * t->u : TIE_FP32;
    t->tie_share = TIE_SHARE;
}

/* The 16-bit loss: a token's loss is logsumexp(z) - z_y of fp32 logits z, so
 * an error dz moves it by sum_v p_v dz_v - dz_y, at most 2 max |dz|. A logit
 * z_v is the fp32 dot product of the stored final hidden state h (1
 * rounding) and the head's weight copy w_v (1), twice that with what h
 * inherits (as above): LOGIT_ROUNDINGS_16 u of sum_c |h_c w_vc| <= |h| |w_v|
 * (Cauchy-Schwarz); h = gamma x + beta with x the final norm's normalised
 * row (LayerNorm's or RMSNorm's: |x| <= sqrt(C)), so |h| <= sqrt(C)
 * max|gamma| + |beta| (Llama's RMSNorm has no beta). The bound is taken
 * from the oracle's parameters at each step, relative to its loss. It is
 * loose (the layouts' losses measure 1/300 of it and less: the per-token
 * errors average out over the tokens, which a bound cannot count on): the
 * gradients are the sharp check. */
#define LOGIT_ROUNDINGS_16 4

static const td_param *row_of_kind(const td_param_table *t, td_tensor_kind k) {
    for (int i = 0; i < t->n_rows; i++)
        if (t->rows[i].kind == k) return &t->rows[i];
    return NULL;
}

static double head_scale(const td_param_table *t, const float *p) {
    const td_param *g = row_of_kind(t, TD_T_LNFW), *b = row_of_kind(t, TD_T_LNFB);
    const td_param *w = row_of_kind(t, TD_T_HEAD);
    if (!w) w = row_of_kind(t, TD_T_WTE); /* tied: the embedding is the head */
    TD_ASSERT(g && w);
    double gmax = 0, bsq = 0, wmax = 0;
    for (size_t k = 0; k < g->numel; k++) gmax = fmax(gmax, fabs(p[g->offset + k]));
    for (size_t k = 0; b && k < b->numel; k++) bsq += (double)p[b->offset + k] * p[b->offset + k];
    size_t C = (size_t)w->shape[1];
    for (size_t r = 0; r < (size_t)w->shape[0]; r++) {
        double sq = 0;
        for (size_t c = 0; c < C; c++) sq += (double)p[w->offset + r * C + c] * p[w->offset + r * C + c];
        wmax = fmax(wmax, sq);
    }
    return (sqrt((double)C) * gmax + sqrt(bsq)) * sqrt(wmax);
}

double verify_tol_loss(const verify_tol *t, const td_param_table *c, const float *P, double loss) {
    double hs = t->u > 0 ? head_scale(c, P) : 0.0;
    return t->loss_abs + 2.0 * LOGIT_ROUNDINGS_16 * t->u * hs / fabs(loss);
}

/* The update checked on its own: the oracle applies the layout's reduced
 * gradient to the layout's state, so both run AdamW's same fp32 formula on
 * the same numbers. What may differ: the evaluation (vector lanes, fused
 * multiply-adds), a few roundings of the operands, 16 units of 2^-24 of
 * |prev| + |ref| at most; and the clipping coefficient, from a norm summed
 * in another order (relative error n 2^-24 at worst, ~1e-7 measured),
 * which scales the step's change ref - prev by as much: 2^-18 of it. */
double verify_tol_state(double x, double ref, double prev) {
    double tol = 0x1p-20 * (fabs(prev) + fabs(ref)) + 0x1p-18 * fabs(ref - prev);
    double d = fabs(x - ref);
    return d == 0 ? 0.0 : tol > 0 ? d / tol : INFINITY;
}

/* Muon's matrices: the clipping coefficient's relative difference (2^-18
 * at most, as above) changes u = (1 - m^2) c g + m^2 buf, the matrix that
 * Newton-Schulz orthogonalizes, by as much relative to its gradient part.
 * NS5 normalizes u and then applies the speedrun's quintic 5 times; a
 * perturbation of the normalized matrix grows at most by the quintic's
 * largest slope over the singular values it passes through, its linear
 * coefficient a = 3.4445 at small ones (where the quintic is steepest),
 * so by a^5 ~ 486 over the 5 steps. The update lr sqrt(max(1, R/C)) NS5(u)
 * then moves each element by a share of the matrix's largest move: the
 * tolerance is 2^-18 a^5 of that move (~1.9e-3 of it), beside the
 * roundings of prev and ref. With --clip 0 the coefficient is 1 and the
 * sharded step is bitwise one process's (tests/cli/test_muon.sh).
 * bf16 iterations (bf16 runs) round u to bf16 first: a coefficient 2^-18
 * apart turns an element that lies near a rounding boundary into the next
 * bf16 value, and one rounding moved changes the orthogonalized matrix by
 * up to ~8% of its largest element (tests/unit/test_muon.c: 6.7% when one
 * rounding of the iterations is moved; bf16 against fp64 iterations, 8.1%):
 * 0.1 of the move. Still bitwise with --clip 0 (test_muon.sh, tp2 x cp2). */
double verify_tol_state_muon(double x, double ref, double prev, double move, int bf16) {
    const double a5 = 3.4445 * 3.4445 * 3.4445 * 3.4445 * 3.4445;
    double tol = 0x1p-20 * (fabs(prev) + fabs(ref)) + (bf16 ? 0.1 : 0x1p-18 * a5) * move;
    double d = fabs(x - ref);
    return d == 0 ? 0.0 : tol > 0 ? d / tol : INFINITY;
}
