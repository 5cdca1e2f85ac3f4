/* kernels_f16: the fp16 (IEEE binary16) kernel family beside the bf16 one
 * (issue 11, --precision fp16). Included by kernels_bf16.h; every function
 * has the signature of its bf16 twin with td_bf16 replaced by td_f16, and
 * the conventions there hold (outputs first, backward ADDS into gradient
 * outputs, NULL gradient outputs skipped, parameters and their gradients
 * and saved statistics fp32).
 *
 * fp16 keeps 11 significand bits (unit roundoff 2^-11) but only 5 exponent
 * bits: the largest finite value is 65504, normals start at 2^-14 and
 * subnormals reach down to 2^-24. Overflow rounds to inf and is NOT
 * saturated: an inf in the activations or gradients is what tells the
 * loss scaler to skip the step and lower the scale, as on GPUs.
 *
 * This CPU has no fp16 arithmetic (no AVX512-FP16) and oneDNN 2.6.3 has no
 * fp16 matmul for it (primitive creation reports "unimplemented"), so the
 * GEMMs convert their fp16 operands to fp32 once per GEMM (into a
 * persistent buffer) and run oneDNN's fp32 matmul (td_matmul_dnnl_f32_*),
 * at about its rate; td_matmul_bf16_describe lists these as "f16
 * converted to f32". The other kernels share bf16's implementation
 * (tiles converted to fp32, the fp32 kernel, rounding back). fp16 is here
 * for its loss-scaling semantics, not for speed. */
#ifndef TRIDENT_KERNELS_F16_H
#define TRIDENT_KERNELS_F16_H

#include <stddef.h>
#include <stdint.h>

#include "trident/kernels_bf16.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef uint16_t td_f16;

/* ---- conversions ---------------------------------------------------------
 * fp32 -> fp16 rounds to nearest, ties to even; |x| >= 65520 (65504 plus
 * half an ulp) becomes inf; results below 2^-14 are kept as subnormals
 * (gradual underflow, no flush to zero); NaN stays NaN (quiet bit forced,
 * the top 9 payload bits kept, as F16C's vcvtps2ph does). fp16 -> fp32 is
 * exact (a NaN comes back quiet). Where the build targets F16C / AVX-512 the
 * conversions use vcvtps2ph / vcvtph2ps; the _ref forms are the portable
 * definitions in integer arithmetic (the tests' oracles, and the fallback
 * without F16C).
 * The _n forms are split over the kernel threads for large n. */
td_f16 td_f16_from_float(float x);
float td_f16_to_float(td_f16 x);
td_f16 td_f16_from_float_ref(float x);
float td_f16_to_float_ref(td_f16 x);
void td_f16_from_float_n(td_f16 *dst, const float *src, size_t n);
void td_f16_to_float_n(float *dst, const td_f16 *src, size_t n);

/* ---- GEMMs ---------------------------------------------------------------
 * As td_matmul_bf16_*: out is float* for TD_K_F32, td_f16* for TD_K_F16;
 * dw and dbias fp32, accumulated in fp32 (oneDNN's sum post-op). */
void td_matmul_f16_forward(void *out, td_ktype out_type, const td_f16 *inp, const td_f16 *w,
                           const float *bias, int N, int C, int OC);
void td_matmul_f16_backward(void *dinp, td_ktype dinp_type, float *dw, float *dbias,
                            const td_f16 *dout, const td_f16 *inp, const td_f16 *w, int N, int C,
                            int OC);
void td_matmul_f16_forward_ref(void *out, td_ktype out_type, const td_f16 *inp, const td_f16 *w,
                               const float *bias, int N, int C, int OC);
void td_matmul_f16_backward_ref(void *dinp, td_ktype dinp_type, float *dw, float *dbias,
                                const td_f16 *dout, const td_f16 *inp, const td_f16 *w, int N,
                                int C, int OC);
/* 1 when oneDNN has a non-reference fp16 matmul on this CPU (probed once),
 * 0 when the GEMMs convert to fp32 (oneDNN 2.6.3 on this avx512_core_bf16
 * CPU). */
int td_f16_native(void);
/* Bytes of fp32 copies a converting fp16 GEMM needs at (N, C, OC), for
 * any of forward and backward with fp32 or fp16 outputs: 4 (N C + OC C +
 * N OC), each term rounded up to 16 floats, reached by forward to fp16 and
 * by dinp in fp16 (two operands and the fp32 image of the output). The
 * copies live in one persistent buffer (TD_MEM_OTHER) grown to the largest
 * need and freed by td_matmul_bf16_release; so the memory plan reserves
 * the maximum of this pure function over the model's linear layers. */
size_t td_matmul_f16_convert_bytes(int N, int C, int OC);
/* Bytes of that buffer now (shared with bf16's converting fallback). */
size_t td_matmul_convert_scratch_bytes(void);

/* ---- other kernels: fp16 activations, fp32 math and parameters ---------- */

void td_embedding_f16_forward(td_f16 *out, const int *tokens, const float *wte, const float *wpe,
                              int B, int T, int C);
void td_embedding_f16_backward(float *dwte, float *dwpe, const td_f16 *dout, const int *tokens,
                               int B, int T, int C);
void td_layernorm_f16_forward(td_f16 *out, float *mean, float *rstd, const td_f16 *inp,
                              const float *w, const float *b, int N, int C);
void td_layernorm_f16_backward(td_f16 *dinp, float *dw, float *db, const td_f16 *dout,
                               const td_f16 *inp, const float *w, const float *mean,
                               const float *rstd, int N, int C);
void td_rmsnorm_f16_forward(td_f16 *out, float *rstd, const td_f16 *inp, const float *w, int N,
                            int C, float eps);
void td_rmsnorm_f16_backward(td_f16 *dinp, float *dw, const td_f16 *dout, const td_f16 *inp,
                             const float *w, const float *rstd, int N, int C);
void td_swiglu_f16_forward(td_f16 *h, const td_f16 *gu, int N, int F);
void td_swiglu_f16_backward(td_f16 *dgu, const td_f16 *dh, const td_f16 *gu, int N, int F);
void td_gelu_f16_forward(td_f16 *out, const td_f16 *inp, size_t n);
void td_gelu_f16_backward(td_f16 *dinp, const td_f16 *inp, const td_f16 *dout, size_t n);
void td_residual_f16_forward(td_f16 *out, const td_f16 *a, const td_f16 *b, size_t n);
void td_residual_f16_backward(td_f16 *da, td_f16 *db, const td_f16 *dout, size_t n);
/* att [B,NH,T,T]: probabilities in fp16; those below 2^-24 / 2 round to 0
 * (fp16's underflow), which the fp32 softmax would have kept. */
void td_attention_f16_forward(td_f16 *out, td_f16 *att, const td_f16 *qkv, int B, int T, int C,
                              int NH);
void td_attention_f16_backward(td_f16 *dqkv, const td_f16 *dout, const td_f16 *qkv,
                               const td_f16 *att, int B, int T, int C, int NH);
void td_softmax_xent_f16_forward(float *losses, td_f16 *probs, const td_f16 *logits,
                                 const int *targets, int N, int V, int Vp);
void td_softmax_xent_f16_backward(td_f16 *dlogits, const td_f16 *probs, const int *targets,
                                  const float *dloss, int N, int V, int Vp);

#ifdef __cplusplus
}
#endif

#endif
