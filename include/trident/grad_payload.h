/* grad_payload: what a data-parallel gradient reduction puts on the wire
 * when it is not the plain fp32 sum (--grad-reduce-dtype, --grad-compress).
 *
 *   bf16: every element rounded to bf16 (nearest even), summed in fp32 by the
 *         comm layer and rounded once (comm.h); half the bytes of fp32.
 *   top-k: each rank sends only the k largest of a bucket as (index,
 *         value) pairs; every rank gathers all ranks' pairs and adds them in
 *         rank order into a dense zero bucket, so every rank gets the same
 *         bits. With error feedback the rest (what was not sent) is kept and
 *         added to the next step's, so nothing is lost, only delayed.
 *         topk:R sparsifies each rank's AdamW update, computed from its own
 *         gradient with its own moments (AdamW normalises each coordinate, so
 *         a gradient that arrives once in ~1/R steps, however large, moves
 *         it by about one step: feeding the gradient back buys nothing;
 *         feeding the update back delivers all of it); the ranks apply the
 *         mean of the gathered updates. topk:R:grad sparsifies the gradient
 *         and AdamW runs on the dense sum.
 *
 * These are the pure pieces (no MPI), used by src/parallel/grad_payload.c
 * and tested on their own. */
#ifndef TRIDENT_GRAD_PAYLOAD_H
#define TRIDENT_GRAD_PAYLOAD_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Pairs a rank sends for a bucket of n elements at ratio R (0 < R <= 1):
 * ceil(R n), at least 1 and at most n (0 when n = 0). */
size_t td_topk_count(double ratio, size_t n);

/* The indices of the k largest |v[i]| (k <= n), ties broken by the smaller
 * index, written to idx[0..k) in increasing index order. NaN counts as the
 * largest (so a broken gradient is sent, and the step's check sees it).
 * Deterministic: a radix select on the bits of |v| (O(n), no sort). */
void td_topk_select(const float *v, size_t n, size_t k, uint32_t *idx);

/* One rank's side of a top-k bucket: g[0..n) += residual (when residual is
 * not NULL), the k largest go to pairs[0..2k) as (index bits, value), and the
 * residual becomes g with the sent elements zeroed. idx: k scratch entries.
 * Without residual (no error feedback) the unsent part is dropped. */
void td_topk_pack(float *g, float *residual, size_t n, size_t k, uint32_t *idx, float *pairs);

/* The k largest |v[i]| (td_topk_select) to pairs[0..2k) as (index bits,
 * value), and zeroed in v: v keeps what was not sent. idx: k scratch. */
void td_topk_take(float *v, size_t n, size_t k, uint32_t *idx, float *pairs);

/* out[0..n) = the sum of D ranks' pairs (gathered: rank r's 2k floats at
 * 2k r), added in rank order into zeros. */
void td_topk_unpack_sum(float *out, size_t n, const float *gathered, int D, size_t k);

#ifdef __cplusplus
}
#endif

#endif
