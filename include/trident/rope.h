/* rope: rotary position embeddings (RoPE) for the Llama family, in the
 * convention of Hugging Face's Llama (rotate_half), so that HF checkpoints
 * load without permuting the rows of their q and k projections.
 *
 * For a head vector x of hs elements (hs even, half = hs/2), position p and
 * the table inv_freq[half]:
 *   angle_i = fp32(p) * inv_freq[i]           (one fp32 product)
 *   c_i = cosf(angle_i), s_i = sinf(angle_i)  (fp32)
 *   x1 = x[0, half), x2 = x[half, hs)
 *   out[i]        = x1[i] c_i - x2[i] s_i
 *   out[i + half] = x2[i] c_i + x1[i] s_i     (i in [0, half))
 * i.e. each pair (x[i], x[i + half]) is turned by angle_i. The backward is
 * the transpose, the turn by -angle_i:
 *   dx[i]        = g[i] c_i + g[i + half] s_i
 *   dx[i + half] = g[i + half] c_i - g[i] s_i.
 * The op is linear in x, so the backward needs nothing saved but the
 * positions (or the table below).
 *
 * AGREEMENT WITH PYTORCH. Every fp32 operation is the one HF's code runs
 * (LlamaRotaryEmbedding.forward and apply_rotary_pos_emb, with the
 * rotary embedding forced to fp32): the angle is the single fp32 product
 * pos.float() * inv_freq (HF's [half,1] @ [1,T] matmul has K = 1), and each
 * output is fl(fl(x1 c) - fl(x2 s)) as q*cos + rotate_half(q)*sin rounds
 * it (the build has fp contraction off, so no FMA merges the two). At large
 * positions the fp32 angle is off from the exact p * theta^(-2i/hs) by half
 * an ulp of the angle (p = 131072 with inv_freq = 1: ~1.3e5 rad, ulp 2^-7,
 * up to 0.004 rad) plus p times inv_freq's own fp32 error (a few ulp):
 * test_rope measures up to 9e-3 rad at position 131071 with Llama 3.1's
 * table. That is HF's behaviour too, so imported models see the
 * same rotation as in PyTorch. The only difference left is the cos/sin
 * libraries: glibc's cosf/sinf here, SLEEF's (CPU) or CUDA's there, each
 * within about 1 ulp of the exact cos/sin of the same fp32 angle.
 * (HF then casts cos and sin to the model dtype and rotates in it, so for
 * bf16/fp16 models PyTorch rounds cos, sin, both products and the sum to 16
 * bits; the 16-bit kernels below round once, at the end, and are the more
 * accurate of the two.)
 *
 * LAYOUT. x holds B*T rows; row n = b*T + t starts at x + n*stride; the
 * heads to turn are `heads` vectors of hs elements starting at column col
 * (head h at columns col + h*hs). For the fused qkv[B,T,3C] of
 * attention.h with NH query heads and NKV kv heads of hs each
 * (C = NH*hs, k taking NKV*hs columns at C under grouped-query attention):
 * q is (col 0, heads NH), k is (col C, heads NKV), stride = the qkv row
 * width. Row t of every batch element has the GLOBAL position pos[t] (the
 * same for each b): under context parallelism a rank's rows are not one
 * contiguous range (rank r of N holds chunks r and 2N-1-r), so positions
 * are an array, not an offset. Columns outside [col, col + heads*hs) are
 * never read or written.
 *
 * OWNERSHIP. The kernels work IN PLACE on the caller's buffer and keep
 * nothing: forward turns x (q or k, in the qkv buffer the attention then
 * reads), backward turns a gradient buffer (dq or dk, holding the gradient
 * w.r.t. the turned values) into the gradient w.r.t. the values before the
 * turn. Unlike the other backwards of kernels.h the backward therefore
 * OVERWRITES rather than adds: it is a change of basis of a gradient that
 * the attention's backward has just summed into that buffer.
 *
 * The cos/sin table cs[T, hs] (row t: c_0..c_{half-1} then s_0..s_{half-1}
 * for position pos[t]) depends only on the positions and inv_freq, so a
 * caller makes it once per step (td_rope_table) and reuses it for every
 * layer, for q and k, forward and backward: the cosf/sinf calls (scalar in
 * glibc) cost far more than the turn itself. It is the caller's buffer.
 *
 * Results are bitwise independent of the thread count
 * (td_kernels_set_threads): every element is computed alone. The _ref
 * versions are plain loops over the definition (cos/sin computed in place
 * from pos and inv_freq) and give the same bits as table + fast kernel. */
#ifndef TRIDENT_ROPE_H
#define TRIDENT_ROPE_H

#include "trident/kernels_bf16.h"

#ifdef __cplusplus
extern "C" {
#endif

/* inv_freq[i] = 1 / theta^(2i/hs), i in [0, hs/2), as HF computes it in
 * fp32 (`1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))`): the
 * exponent e = fp32(2i) / fp32(hs) rounded to fp32, the base rounded to
 * fp32, fp32(theta^e) (taken as pow in double rounded once: the correctly
 * rounded value, which torch's powf, within 1 ulp, nearly always gives),
 * then the fp32 reciprocal. With td_rope_llama3_scale it gives Llama 3.1's
 * table bit for bit as torch does with HF's code (test_rope). hs even, >= 2; theta > 0. */
void td_rope_inv_freq(float *inv_freq, double theta, int hs);

/* Llama 3.1's rope_scaling (rope_type "llama3"), applied in place to a
 * table of td_rope_inv_freq, in the fp32 arithmetic of HF's
 * _compute_llama3_parameters (transformers' modeling_rope_utils.py):
 *   low_wl  = orig / low_freq_factor, high_wl = orig / high_freq_factor
 *   wavelen = 2 pi / inv                (torch: inv.reciprocal() * fp32(2 pi))
 *   wavelen <  high_wl: inv             (high frequencies kept)
 *   wavelen >  low_wl:  inv / factor    (low frequencies interpolated)
 *   otherwise: smooth = (orig / wavelen - low_freq_factor)
 *                       / (high_freq_factor - low_freq_factor)
 *              inv = (1 - smooth) * inv / factor + smooth * inv
 *   (evaluated left to right: ((1 - smooth) * inv) / factor; orig / wavelen
 *   as wavelen.reciprocal() * orig, torch's reverse division)
 * The two limits meet the ends of the blend: wavelen = high_wl gives smooth
 * = 1 (inv), wavelen = low_wl gives smooth = 0 (inv / factor). Scalars are
 * rounded to fp32 where torch rounds them (against an fp32 tensor).
 * Llama 3.1: factor 8, low 1, high 4, orig 8192 (theta 500000, hs 128).
 * Requires high_freq_factor > low_freq_factor > 0, factor > 0, orig > 0. */
void td_rope_llama3_scale(float *inv_freq, int hs, double factor, double low_freq_factor,
                          double high_freq_factor, double orig_max_pos);

/* cs[T, hs]: row t = cosf(fp32(pos[t]) * inv_freq[i]) for i < hs/2, then
 * sinf of the same angles. pos[T] >= 0 and below 2^24 (exact in fp32). */
void td_rope_table(float *cs, const int *pos, const float *inv_freq, int T, int hs);

/* In place on x[B*T rows of `stride`], heads at columns col + h*hs, h <
 * heads; cs from td_rope_table for these T rows. */
void td_rope_forward(float *x, const float *cs, int B, int T, int stride, int col, int heads,
                     int hs);
/* g: the gradient w.r.t. the turned values, overwritten with the gradient
 * w.r.t. the inputs (the turn by -angle). */
void td_rope_backward(float *g, const float *cs, int B, int T, int stride, int col, int heads,
                      int hs);
/* The oracles: the same results from pos and inv_freq, no table. */
void td_rope_forward_ref(float *x, const int *pos, const float *inv_freq, int B, int T, int stride,
                         int col, int heads, int hs);
void td_rope_backward_ref(float *g, const int *pos, const float *inv_freq, int B, int T, int stride,
                          int col, int heads, int hs);

/* 16-bit activations (bf16 / fp16), the fp32 table: each head vector is
 * converted to fp32, turned by the fp32 kernel's arithmetic and rounded
 * once, so the result is exactly the rounding of what td_rope_forward /
 * td_rope_backward give on the same (16-bit-valued) inputs. */
void td_rope_bf16_forward(td_bf16 *x, const float *cs, int B, int T, int stride, int col, int heads,
                          int hs);
void td_rope_bf16_backward(td_bf16 *g, const float *cs, int B, int T, int stride, int col,
                           int heads, int hs);
void td_rope_f16_forward(td_f16 *x, const float *cs, int B, int T, int stride, int col, int heads,
                         int hs);
void td_rope_f16_backward(td_f16 *g, const float *cs, int B, int T, int stride, int col, int heads,
                          int hs);

#ifdef __cplusplus
}
#endif

#endif
