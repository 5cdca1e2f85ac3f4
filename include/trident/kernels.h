/* kernels: forward and backward of every op of the GPT-2 and Llama models on the CPU.
 *
 * Conventions (docs/design.md): outputs first, then saved statistics, then inputs,
 * weights, sizes. All tensors are row-major fp32 in flat buffers. Every
 * backward ADDS into all of its gradient outputs (inputs' and parameters'),
 * so gradient accumulation and residual branches need no extra copies; the
 * caller zeroes what must start from zero. A NULL gradient output is skipped.
 *
 * Fast versions use OpenBLAS (single-threaded calls split across our own
 * OpenMP threads) and OpenMP; *_ref versions are plain loops kept beside them
 * as the oracle for tests (ggml style). Sizes: B batch, T time, C channels,
 * NH heads, OC output channels, V real vocab, Vp padded vocab, N = B*T rows. */
#ifndef TRIDENT_KERNELS_H
#define TRIDENT_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Threads used by the kernels (OpenMP). OpenBLAS is always driven with one
 * thread per call so the two thread pools never compete. */
void td_kernels_set_threads(int n);
int td_kernels_threads(void);

/* out[B,T,C] = wte[tokens[b,t], :] + wpe[t, :] */
void td_embedding_forward(float *out, const int *tokens, const float *wte, const float *wpe,
                          int B, int T, int C);
void td_embedding_backward(float *dwte, float *dwpe, const float *dout, const int *tokens,
                           int B, int T, int C);
/* The same in two parts, for a vocab-parallel embedding (a rank holds wte
 * rows [lo, lo + rows)) and rows split along the sequence:
 *   shard_forward:  out[n] = wte[tokens[n] - lo], 0 where the token is not
 *                   in the shard (the tp ranks' outputs sum to the lookup);
 *   position_forward: out[n] += wpe[pos[(n0 + n) % T]] for n in [0, N) (rows
 *                   of a micro-batch starting at global row n0; pos[T] the
 *                   distinct positions of a sequence's T rows, as context
 *                   parallelism's chunks hold them; NULL: 0..T-1);
 *   shard_backward: dwte[tokens[n] - lo] += dout[n] for tokens in the shard;
 *   position_backward: dwpe[pos[(n0 + n) % T]] += dout[n].
 * Each element receives its terms in the fused kernels' order, so with
 * lo = 0 and n0 = 0 the two parts give their bits. */
void td_embedding_shard_forward(float *out, const int *tokens, const float *wte, int lo, int rows,
                                int N, int C);
void td_position_forward(float *out, const float *wpe, const int *pos, int n0, int N, int T,
                         int C);
void td_embedding_shard_backward(float *dwte, const float *dout, const int *tokens, int lo, int rows,
                                 int N, int C);
void td_position_backward(float *dwpe, const float *dout, const int *pos, int n0, int N, int T,
                          int C);

/* out[N,C] = (inp - mean) * rstd * w + b; saves mean[N], rstd[N]. eps = 1e-5. */
void td_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                          const float *w, const float *b, int N, int C);
void td_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                           const float *inp, const float *w, const float *mean,
                           const float *rstd, int N, int C);

/* RMSNorm (Llama): out[N,C] = inp * rstd * w, rstd = 1 / sqrt(mean(inp^2) +
 * eps) per row, saved in rstd[N] (fp32; may be NULL in the forward). No
 * bias, no centring. eps is the model's (Llama 1: 1e-6, Llama 2/3: 1e-5).
 * The backward ADDS dinp += rstd (w dout - xh mean(w dout xh)), xh = inp
 * rstd, and dw += sum over rows of dout inp rstd. The _ref versions are
 * plain loops (one running sum per row), the oracle for the tests. */
void td_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N, int C,
                        float eps);
void td_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp,
                         const float *w, const float *rstd, int N, int C);
void td_rmsnorm_forward_ref(float *out, float *rstd, const float *inp, const float *w, int N, int C,
                            float eps);
void td_rmsnorm_backward_ref(float *dinp, float *dw, const float *dout, const float *inp,
                             const float *w, const float *rstd, int N, int C);

/* out[N,OC] = inp[N,C] @ w[OC,C]^T + bias[OC] (bias may be NULL). */
void td_matmul_forward(float *out, const float *inp, const float *w, const float *bias,
                       int N, int C, int OC);
void td_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout,
                        const float *inp, const float *w, int N, int C, int OC);
void td_matmul_forward_ref(float *out, const float *inp, const float *w, const float *bias,
                           int N, int C, int OC);
void td_matmul_backward_ref(float *dinp, float *dw, float *dbias, const float *dout,
                            const float *inp, const float *w, int N, int C, int OC);

/* Causal multi-head self-attention on a fused qkv[B,T,3C] (q, k, v each C
 * wide, head h at columns h*C/NH). out[B,T,C]; att[B,NH,T,T] saves the
 * softmax probabilities (fp32, entries above the diagonal are zero).
 * scale = 1/sqrt(C/NH). */
void td_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH);
/* datt[B,NH,T,T] is scratch (overwritten, not accumulated). */
void td_attention_backward(float *dqkv, float *datt, const float *dout, const float *qkv,
                           const float *att, int B, int T, int C, int NH);
void td_attention_forward_ref(float *out, float *att, const float *qkv, int B, int T, int C,
                              int NH);
void td_attention_backward_ref(float *dqkv, float *datt, const float *dout, const float *qkv,
                               const float *att, int B, int T, int C, int NH);

/* GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
void td_gelu_forward(float *out, const float *inp, size_t n);
void td_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);

/* SwiGLU (Llama's MLP): h[N,F] = silu(g) * u, silu(g) = g sigmoid(g), read
 * from the FUSED gate|up activation gu[N, 2F]: row n holds g in columns
 * [0, F) and u in [F, 2F), as one GEMM with the weight [gate; up] (2F rows,
 * gate first) writes it; under tensor parallelism each rank's gu is
 * [N, 2 F/tp] laid out the same way from its own gate and up shards.
 * The backward WRITES (the exception to the add rule, like dlogits: gu has
 * no other consumer) dgu[N, 2F] in the same layout: dg = dh u silu'(g),
 * silu'(g) = sigmoid(g) (1 + g (1 - sigmoid(g))), du = dh silu(g). dgu may
 * alias gu. Safe for any |g| (no inf / NaN from finite inputs, see
 * swiglu.c). The _ref versions are plain loops on libm's expf. */
void td_swiglu_forward(float *h, const float *gu, int N, int F);
void td_swiglu_backward(float *dgu, const float *dh, const float *gu, int N, int F);
void td_swiglu_forward_ref(float *h, const float *gu, int N, int F);
void td_swiglu_backward_ref(float *dgu, const float *dh, const float *gu, int N, int F);

/* out = a + b */
void td_residual_forward(float *out, const float *a, const float *b, size_t n);
/* da += dout; db += dout */
void td_residual_backward(float *da, float *db, const float *dout, size_t n);

/* Fused softmax + cross-entropy over the first V of Vp logit columns (the
 * padded columns are masked out of the softmax). losses[N] per row. probs[N,Vp]
 * may alias logits (in place); padded columns of probs are set to 0. A
 * target < 0 is ignored: its loss is 0 and its row of dlogits 0 (all the
 * functions below). */
void td_softmax_xent_forward(float *losses, float *probs, const float *logits,
                             const int *targets, int N, int V, int Vp);
/* The same loss in three stages, so that a vocab-parallel head can reduce
 * each row's max, sum of exponentials and target logit over tp between them.
 * Run back to back they give bit for bit the fused kernel's losses and
 * probabilities (same operations in the same order per row).
 * Under a vocab-parallel head a rank holds columns [lo, lo + Vp) of the
 * vocabulary, of which the first V are real (V may be 0 on a rank holding
 * only padding); targets stay global ids.
 *   td_xent_max:     mx[n] = max of the row's first V logits (-FLT_MAX when
 *                    V = 0, so the max over tp ranks ignores it).
 *   td_xent_exp_sum: xt[n] = the row's target logit (0 when targets is NULL
 *                    or the target is not in [lo, lo + V)), probs =
 *                    exp(x - mx), sum[n] = their sum. probs may alias logits.
 *   td_xent_finish:  probs /= sum, padded columns 0; losses[n] (with
 *                    targets) = log(sum) - (xt - mx). */
void td_xent_max(float *mx, const float *logits, int N, int V, int Vp);
void td_xent_exp_sum(float *sum, float *xt, float *probs, const float *logits, const float *mx,
                     const int *targets, int lo, int N, int V, int Vp);
void td_xent_finish(float *losses, float *probs, const float *sum, const float *xt,
                    const float *mx, const int *targets, int N, int V, int Vp);
/* dlogits[N,Vp] = (probs - onehot(target)) * dloss[row]; padded columns get
 * 0. The logits have no other consumer, so this one WRITES (the exception to
 * the add rule) and dlogits may alias probs. */
void td_softmax_xent_backward(float *dlogits, const float *probs, const int *targets,
                              const float *dloss, int N, int V, int Vp);
/* The same for a vocab shard [lo, lo + Vp) with V real columns: targets
 * outside the shard take no one-hot term. */
void td_xent_backward(float *dlogits, const float *probs, const int *targets, int lo,
                      const float *dloss, int N, int V, int Vp);

/* Measured sgemm rate in GFLOP/s of `threads` single-threaded 512^3 GEMMs
 * running at once (all of them together), cached: the denominator of MFU. */
double td_sgemm_peak_gflops(int threads);
/* The same at n x n x n, measured afresh (`trident plan --calibrate`). */
double td_sgemm_rate_gflops(int threads, int n);

/* The optimizer's range operations (range_ops.c), over flat fp32 buffers.
 *   adamw:  torch.optim.AdamW on n elements: g multiplied by scale first;
 *           bc1 = 1 - b1^step, bc2_sqrt = sqrt(1 - b2^step) (the caller's,
 *           computed in double as torch does); decoupled decay 1 - lr wd;
 *   sumsq:  sum of x^2 in double, blocks of 4096 summed in sequence (the
 *           result does not depend on the thread count);
 *   first_nonfinite: index of the first NaN or infinity, or -1;
 *   scale:  x *= s;  add: dst += src. */
void td_range_adamw(float *p, const float *g, float *m, float *v, size_t n, float lr, float b1,
                    float b2, float eps, float wd, float bc1, float bc2_sqrt, float scale);
double td_range_sumsq(const float *x, size_t n);
/* Muon (kernels/muon.c): td_muon_ns orthogonalizes x [rows, cols] in place
 * by `steps` Newton-Schulz iterations of the speedrun's quintic (x / (||x||_F
 * + 1e-7), transposed when rows > cols); _ref: the same in double. A
 * matrix's Muon step is td_muon_momentum, then td_muon_ns (or _bf16), then
 * td_muon_apply (the backend rows' muon entry). */
void td_muon_ns(float *x, int rows, int cols, int steps);
/* The speedrun's bf16 iterations (bf16 runs): x rounded to bf16, every
 * product of bf16 values accumulated in fp32 and rounded to bf16, every
 * elementwise op in fp32 and rounded, as its eager X.bfloat16() code on a
 * GPU; x [rows, cols] fp32 in and out (bf16 values out). */
void td_muon_ns_bf16(float *x, int rows, int cols, int steps);
void td_muon_ns_ref(double *x, int rows, int cols, int steps);
/* The step's halves around td_muon_ns, elementwise (a shard at a
 * time): the momentum (buf, and u the matrix to orthogonalize) and the
 * update p = p (1 - lr wd) - lr sqrt(max(1, rows/cols)) u, rows and cols
 * the whole logical matrix's. */
void td_muon_momentum(float *u, const float *g, float *buf, size_t n, float momentum,
                      int nesterov, float grad_scale);
void td_muon_apply(float *p, const float *u, size_t n, int rows, int cols, float lr, float wd);
int64_t td_range_first_nonfinite(const float *x, size_t n);
void td_range_scale(float *x, float s, size_t n);
void td_range_add(float *dst, const float *src, size_t n);

#ifdef __cplusplus
}
#endif

#endif
