/* attention: blocked (FlashAttention-style) multi-head attention.
 *
 * The forward walks the keys in blocks with an online softmax (running row
 * max and sum) and keeps, besides the output, only the log-sum-exp of each
 * query row; the backward recomputes the scores block by block from it. No
 * [T,T] matrix is ever stored, so memory is O(T) per head instead of the
 * materialized kernel's O(T^2) (td_attention_forward, which stays as the
 * oracle).
 *
 * One call handles one (query block, key block) pair of a sequence, placed
 * in it by global positions, so that
 *  - ring attention (context parallelism) calls the forward once per K/V
 *    piece, merging each into the running (out, lse) with accumulate = 1,
 *    and the backward once per piece with the FINAL out and lse;
 *  - grouped-query attention shares each kv head among NH/NKV query heads.
 *
 * Layout: q [B,Tq,*] with query head h at columns h*hs of each row (row
 * stride q_stride), k and v [B,Tk,*] with kv head g at columns g*hs (row
 * stride kv_stride), out and dout [B,Tq,*] with head h at h*hs (o_stride);
 * lse [B,NH,Tq] fp32, dense. For the model's fused qkv[B,T,3C]: q = qkv,
 * k = qkv + C, v = qkv + 2C, q_stride = kv_stride = 3C, o_stride = C.
 * Scores are (q . k) / sqrt(hs). Results are bitwise independent of the
 * thread count (td_kernels_set_threads). */
#ifndef TRIDENT_ATTENTION_H
#define TRIDENT_ATTENTION_H

#include "trident/kernels_bf16.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { TD_ATTN_CAUSAL, TD_ATTN_NONE } td_attn_mask;

typedef struct {
    int B, Tq, Tk;                     /* batch, query rows, key rows in this block pair */
    int NH, NKV, hs;                   /* query heads, kv heads (NH % NKV == 0; query head h
                                          uses kv head h / (NH/NKV)), head size */
    int q_stride, kv_stride, o_stride; /* row strides in elements of q (and dq),
                                          of k and v (dk, dv), of out (dout) */
    long q_pos, k_pos;                 /* global position of the first query row / key row
                                          (causal: key j visible to query i iff
                                          k_pos + j <= q_pos + i) */
    td_attn_mask mask;
    int q_rows, kv_rows;               /* rows per batch element in the buffers of q, out
                                          (dq, dout) and of k, v (dk, dv), when the Tq / Tk
                                          rows are a view inside longer sequences (context
                                          parallelism's chunks); 0: Tq, Tk. lse stays
                                          dense [B,NH,Tq] */
    const int *doc_start;              /* document masking, or NULL: [B, doc_len] int32, for
                                          each global position of each sequence the global
                                          position where its document begins (nondecreasing;
                                          a device buffer). Key j is visible to query i only
                                          if also k_pos + j >= doc_start[b][q_pos + i];
                                          key blocks hidden from every row are skipped.
                                          Causal mask only (a document's end is then the
                                          query itself) */
    int doc_len;                       /* positions per sequence in doc_start */
} td_attn_shape;

/* out[B,Tq,NH*hs] (row stride o_stride), lse[B,NH,Tq]: the attention of
 * this block pair and the log-sum-exp of each row's scaled scores over the
 * visible keys. accumulate = 0 overwrites out and lse; accumulate = 1 merges
 * this pair's result into the (out, lse) already there, as if the keys of
 * both calls had been one call. A row with no visible key in this call
 * gets lse = -INFINITY and out = 0 (accumulate = 0), or is left unchanged
 * (accumulate = 1); merging -inf with -inf stays -inf, without NaN. Key
 * blocks that the causal mask hides entirely are skipped. */
void td_attn_forward(float *out, float *lse, const float *q, const float *k, const float *v,
                     const td_attn_shape *s, int accumulate);

/* ADDS into dq (layout of q), dk and dv (layout of k, v): the gradients of
 * this block pair given dout, and the FINAL out and lse of the whole row
 * (after every piece's forward was merged), so that the per-piece calls of
 * ring attention sum to the gradient of the whole: with P = exp(q k^T /
 * sqrt(hs) - lse), D = rowsum(dout * out), dS = P (dP - D) / sqrt(hs):
 * dv += P^T dout, dq += dS k, dk += dS^T q. Rows with lse = -inf contribute
 * nothing. The caller zeroes what must start from zero. */
void td_attn_backward(float *dq, float *dk, float *dv, const float *dout, const float *out,
                      const float *lse, const float *q, const float *k, const float *v,
                      const td_attn_shape *s);

/* 16-bit versions: q, k, v, out, dout, dq, dk, dv in bf16 / fp16, lse fp32,
 * the same shape and semantics. The block products (forward S = Q K^T,
 * O += P V; backward S, dP = dO V^T, dV += P^T dO, dK += dS^T Q, dQ += dS
 * K) are 16-bit GEMMs with fp32 accumulation through oneDNN, as the linear
 * layers' (fp16 here and bf16 below AVX-512: operands converted to fp32,
 * oneDNN having no such kernel). The softmax statistics (running max, sum,
 * rescaling, lse) and D = rowsum(dout * out) are fp32. ROUNDING: P (forward
 * and backward) and dS are rounded to the 16-bit type before their GEMMs,
 * as FlashAttention does on GPUs (the row sum is of the fp32 P), so a
 * result differs from the fp32 kernel's on the same inputs by up to about
 * u sum_j |P_ij v_j| (out; u = 2^-8 bf16, 2^-11 fp16), u sum |dS| |k| (dq),
 * and so on, besides the final rounding of each output: out once per row,
 * gradients as old value + this call's fp32 sum, rounded once (dk, dv per
 * key block; dq at the end). test_attention_lowp.c derives the bounds. */
void td_attn_bf16_forward(td_bf16 *out, float *lse, const td_bf16 *q, const td_bf16 *k,
                          const td_bf16 *v, const td_attn_shape *s, int accumulate);
void td_attn_bf16_backward(td_bf16 *dq, td_bf16 *dk, td_bf16 *dv, const td_bf16 *dout,
                           const td_bf16 *out, const float *lse, const td_bf16 *q, const td_bf16 *k,
                           const td_bf16 *v, const td_attn_shape *s);
void td_attn_f16_forward(td_f16 *out, float *lse, const td_f16 *q, const td_f16 *k, const td_f16 *v,
                         const td_attn_shape *s, int accumulate);
void td_attn_f16_backward(td_f16 *dq, td_f16 *dk, td_f16 *dv, const td_f16 *dout, const td_f16 *out,
                          const float *lse, const td_f16 *q, const td_f16 *k, const td_f16 *v,
                          const td_attn_shape *s);

/* Frees the per-thread block scratch and the 16-bit kernels' packed
 * copies kept between calls (TD_MEM_OTHER); their oneDNN primitives go
 * with td_matmul_bf16_release. */
void td_attn_release_scratch(void);

#ifdef __cplusplus
}
#endif

#endif
