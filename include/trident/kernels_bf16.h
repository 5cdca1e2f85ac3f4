/* kernels_bf16: the reduced-precision kernel layer (issue 11).
 *
 * bf16 is stored as uint16_t (the top half of an fp32). GEMMs run through
 * oneDNN's matmul primitive (one primitive per shape, kind, data types and
 * thread count, created on first use and reused); every other kernel reads
 * and writes bf16 activations but computes in fp32, by converting a tile of
 * rows to fp32, running the fp32 kernel of kernels.h on it and rounding the
 * result back. Accumulation inside GEMMs and reductions is fp32; parameters
 * (LayerNorm weights, embeddings, biases) and their gradients stay fp32.
 * Conventions are those of kernels.h: outputs first, backward ADDS into every
 * gradient output, NULL gradient outputs are skipped. Sizes as there.
 *
 * Where the CPU has no native bf16 (AVX512-BF16), the same build still runs:
 * oneDNN emulates bf16 on AVX-512, and where it has no bf16 matmul at all
 * (AVX2 and older) the GEMMs convert to fp32 and run oneDNN's fp32 matmul;
 * td_matmul_bf16_describe says which. */
#ifndef TRIDENT_KERNELS_BF16_H
#define TRIDENT_KERNELS_BF16_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef uint16_t td_bf16;

/* Element type of a GEMM operand or of an activation gradient (TD_K_F16:
 * the fp16 family of kernels_f16.h). */
typedef enum { TD_K_F32 = 0, TD_K_BF16 = 1, TD_K_F16 = 2 } td_ktype;

/* ---- conversions ---------------------------------------------------------
 * fp32 -> bf16 rounds to nearest, ties to even, on the 16 dropped bits;
 * subnormals are rounded like any other value (no flush to zero); overflow
 * rounds to inf; NaN stays NaN (quiet bit forced, so a NaN whose payload
 * sits in the low bits does not become inf). bf16 -> fp32 is exact. The _n
 * forms are branch-free loops the compiler vectorises, split over the
 * kernel threads for large n; the _ref form is the plain definition. */
td_bf16 td_bf16_from_float(float x);
float td_bf16_to_float(td_bf16 x);
td_bf16 td_bf16_from_float_ref(float x);
void td_bf16_from_float_n(td_bf16 *dst, const float *src, size_t n);
void td_bf16_to_float_n(float *dst, const td_bf16 *src, size_t n);

/* ---- GEMMs (oneDNN) ------------------------------------------------------
 * out[N,OC] = inp[N,C] @ w[OC,C]^T + bias[OC] (bias fp32, may be NULL);
 * out is float* when out_type is TD_K_F32, td_bf16* when TD_K_BF16. */
void td_matmul_bf16_forward(void *out, td_ktype out_type, const td_bf16 *inp, const td_bf16 *w,
                            const float *bias, int N, int C, int OC);
/* dinp[N,C] += dout @ w (dinp of dinp_type); dw[OC,C] += dout^T @ inp and
 * dbias[OC] += column sums of dout, both fp32 (the master-grad buffers):
 * the GEMMs add through oneDNN's sum post-op, so the fp32 accumulator is
 * never rounded to bf16. */
void td_matmul_bf16_backward(void *dinp, td_ktype dinp_type, float *dw, float *dbias,
                             const td_bf16 *dout, const td_bf16 *inp, const td_bf16 *w, int N,
                             int C, int OC);
/* Oracles: convert to fp32 and run td_matmul_*_ref (outputs rounded to
 * out_type / dinp_type at the end). */
void td_matmul_bf16_forward_ref(void *out, td_ktype out_type, const td_bf16 *inp,
                                const td_bf16 *w, const float *bias, int N, int C, int OC);
void td_matmul_bf16_backward_ref(void *dinp, td_ktype dinp_type, float *dw, float *dbias,
                                 const td_bf16 *dout, const td_bf16 *inp, const td_bf16 *w,
                                 int N, int C, int OC);
/* The same GEMMs through oneDNN's fp32 matmul (the benchmark's baseline
 * and the fallback's engine). */
void td_matmul_dnnl_f32_forward(float *out, const float *inp, const float *w, const float *bias,
                                int N, int C, int OC);
/* dinp += dout @ w; dw += dout^T @ inp (no dbias), oneDNN fp32. */
void td_matmul_dnnl_f32_backward(float *dinp, float *dw, const float *dout, const float *inp,
                                 const float *w, int N, int C, int OC);

/* One thread's measured GEMM rate with 16-bit operands of type t
 * (TD_K_BF16: oneDNN's bf16 kernel; TD_K_F16: converted to fp32), GFLOP/s:
 * the MFU denominator under --precision bf16|fp16. */
double td_matmul_lowp_peak_gflops(td_ktype t);
/* 1 when oneDNN runs bf16 natively here (AVX512-BF16 or newer and not
 * capped by ONEDNN_MAX_CPU_ISA), 0 when it emulates or converts. */
int td_bf16_native(void);
/* One line per cached primitive: "<kind> MxKxN <types> threads=t: <impl>",
 * plus a first line naming the CPU ISA oneDNN uses; calls fn per line (the
 * startup report). Returns the number of primitives. The cache, this report,
 * the scratchpad and release are shared with the fp16 GEMMs (kernels_f16.h),
 * whose entries read "f16 converted to f32" where oneDNN has no fp16 matmul. */
int td_matmul_bf16_describe(void (*fn)(const char *line, void *ctx), void *ctx);
/* Bytes of the oneDNN scratchpad buffer (user mode: allocated through
 * td_alloc, TD_MEM_OTHER), the largest any cached primitive needs. */
size_t td_matmul_bf16_scratch_bytes(void);
/* Destroys every cached primitive and frees the scratchpad. */
void td_matmul_bf16_release(void);
/* Frees the tile buffers the non-GEMM 16-bit kernels keep between calls
 * (TD_MEM_OTHER, grown to the largest tile any call needed). */
void td_lowp_release_scratch(void);

/* ---- other kernels: bf16 activations, fp32 math and parameters ---------- */

/* out[B,T,C] = wte[tokens] + wpe[t] (wte, wpe fp32) */
void td_embedding_bf16_forward(td_bf16 *out, const int *tokens, const float *wte,
                               const float *wpe, int B, int T, int C);
void td_embedding_bf16_backward(float *dwte, float *dwpe, const td_bf16 *dout, const int *tokens,
                                int B, int T, int C);

/* mean, rstd [N] fp32 (saved statistics); w, b, dw, db fp32. */
void td_layernorm_bf16_forward(td_bf16 *out, float *mean, float *rstd, const td_bf16 *inp,
                               const float *w, const float *b, int N, int C);
void td_layernorm_bf16_backward(td_bf16 *dinp, float *dw, float *db, const td_bf16 *dout,
                                const td_bf16 *inp, const float *w, const float *mean,
                                const float *rstd, int N, int C);

/* RMSNorm (Llama), as td_rmsnorm_*: rstd [N] fp32 (saved statistics);
 * w, dw fp32; dinp bf16, added into. */
void td_rmsnorm_bf16_forward(td_bf16 *out, float *rstd, const td_bf16 *inp, const float *w, int N,
                             int C, float eps);
void td_rmsnorm_bf16_backward(td_bf16 *dinp, float *dw, const td_bf16 *dout, const td_bf16 *inp,
                              const float *w, const float *rstd, int N, int C);

/* SwiGLU (Llama), as td_swiglu_*: h[N,F] from the fused gate|up gu[N,2F]
 * (g in columns [0, F), u in [F, 2F)); dgu written in that layout, may
 * alias gu. */
void td_swiglu_bf16_forward(td_bf16 *h, const td_bf16 *gu, int N, int F);
void td_swiglu_bf16_backward(td_bf16 *dgu, const td_bf16 *dh, const td_bf16 *gu, int N, int F);

void td_gelu_bf16_forward(td_bf16 *out, const td_bf16 *inp, size_t n);
void td_gelu_bf16_backward(td_bf16 *dinp, const td_bf16 *inp, const td_bf16 *dout, size_t n);
void td_residual_bf16_forward(td_bf16 *out, const td_bf16 *a, const td_bf16 *b, size_t n);
void td_residual_bf16_backward(td_bf16 *da, td_bf16 *db, const td_bf16 *dout, size_t n);

/* att[B,NH,T,T] holds the softmax probabilities in bf16 (the largest
 * activation at long T; halving it is the point). The backward needs no
 * datt argument: its scratch is per batch row and internal. */
void td_attention_bf16_forward(td_bf16 *out, td_bf16 *att, const td_bf16 *qkv, int B, int T,
                               int C, int NH);
void td_attention_bf16_backward(td_bf16 *dqkv, const td_bf16 *dout, const td_bf16 *qkv,
                                const td_bf16 *att, int B, int T, int C, int NH);

/* Logits bf16; losses fp32; probs bf16 (may alias logits); dlogits bf16,
 * written (not added) as in kernels.h, and may alias probs. */
void td_softmax_xent_bf16_forward(float *losses, td_bf16 *probs, const td_bf16 *logits,
                                  const int *targets, int N, int V, int Vp);
void td_softmax_xent_bf16_backward(td_bf16 *dlogits, const td_bf16 *probs, const int *targets,
                                   const float *dloss, int N, int V, int Vp);

#ifdef __cplusplus
}
#endif

/* The fp16 family: the same kernels with td_f16 in place of td_bf16. */
#include "trident/kernels_f16.h"

#endif
