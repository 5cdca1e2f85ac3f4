/* decode: the model's forward one new token at a time, for generation, with
 * a key/value cache (src/model/decode.c). One process, fp32 (the
 * checkpoint's fp32 parameters; no reduced-precision copy).
 *
 * td_gpt_forward computes all T rows of a window, so sampling with it costs
 * a whole window per token, and its activations are sized for the model's
 * T (774 MB at T 131072 for a tiny model). Here each call appends rows at
 * positions len .. len+n-1: every block writes their keys and values (after
 * the rotary turn, for Llama) into its cache and attends over the cached
 * positions 0 .. len+n-1 with the blocked kernel (q_pos = len), so a
 * generated token costs one row. Memory is sized for `cap` positions (the
 * prompt + the tokens to generate, at most T) and `chunk` rows per call,
 * never for T: the cache is 2 L cap KV hs floats.
 *
 * The rows are the same functions of the same parameters as the whole
 * pass's (GPT-2's learned positions and LayerNorm, Llama's RMSNorm, rotary
 * table incl. Llama 3.1's scaling, SwiGLU, grouped-query attention, and a
 * mixture of experts' routing: top K of score + balancing bias, shared
 * experts), through the same kernels; GEMMs of one row may round
 * differently from those of T rows, so logits agree to rounding, not bit
 * for bit. A mixture of experts runs dropless here (--moe-capacity drops
 * depend on the micro-batch, which generation does not have).
 *
 * Errors: a call beyond cap or chunk is a programming error (TD_ASSERT). */
#ifndef TRIDENT_DECODE_H
#define TRIDENT_DECODE_H

#include <stddef.h>

#include "trident/model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    td_gpt_config cfg;
    const td_param_table *t; /* the canonical (tp 1) table of params; not owned */
    const float *params;     /* not owned; read only */
    int cap;                 /* positions the cache holds: 0 .. cap-1 (cap <= cfg.T) */
    int chunk;               /* most rows one td_decode_step computes */
    int len;                 /* positions cached so far */
    long long rows;          /* rows computed since create (the sampler's counter) */
    size_t cache_bytes;      /* the key/value cache: 2 L cap KV hs floats */
    size_t bytes;            /* everything allocated (cache, rotary table, scratch) */
    float *k, *v;            /* [L, cap, KV hs] */
    float *rope_cs;          /* [cap, hs] the rotary table of positions 0..cap-1; NULL: gpt2 */
    float *x, *ln, *qkv, *att, *res2, *proj, *h, *ha, *mean, *rstd, *lse; /* [chunk, ...] */
    float *moe_lg, *moe_sc, *moe_y, *moe_h, *moe_a; /* one row's router and expert scratch */
    float *lnf, *logits;     /* [C], [Vp]: the last row's final norm and logits */
    size_t *woff;            /* [L, TD_T_COUNT] each tensor's offset in params, or
                                TD_NO_TENSOR (the ends' kinds in every layer's row) */
    void *mem;               /* the one allocation */
} td_decode;

/* Bytes td_decode_create allocates for these sizes (the plan, and the
 * figure the sampler reports). */
size_t td_decode_bytes(const td_param_table *t, int cap, int chunk);
/* cap in [1, cfg.T], chunk in [1, cap]. The table must be tp 1 (canonical). */
void td_decode_create(td_decode *d, const td_param_table *t, const float *params, int cap,
                      int chunk);
void td_decode_destroy(td_decode *d);
/* Forgets the cached positions (len = 0); the counter keeps counting. */
void td_decode_reset(td_decode *d);
/* Appends tokens[0..n) at positions len .. len+n-1 (1 <= n <= chunk,
 * len + n <= cap) and returns the logits [t->Vp] of the last of them (valid
 * until the next call). */
const float *td_decode_step(td_decode *d, const int *tokens, int n);

#ifdef __cplusplus
}
#endif

#endif
