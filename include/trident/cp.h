/* cp: context parallelism. Every sequence of T rows is split over the n
 * ranks of the cp group with the load-balanced causal split: 2n chunks of
 * Tc = T / (2n) rows, rank r holding chunks r and 2n-1-r (its T/n local
 * rows: chunk r first), so that every rank has the same share of the causal
 * mask's work. Position ids stay global (td_cp_chunk_pos).
 *
 * Ring attention: each rank's queries must meet the keys and values of
 * every earlier position. The K/V of each rank's local rows travel around
 * the ring (rank r sends to r+1, receives from r-1); at ring step i a rank
 * holds the K/V of rank r - i and merges that block's attention into its
 * running (out, lse) with the blocked kernel's online softmax
 * (trident/attention.h, accumulate = 1). Each step's receive is posted
 * before the step's compute and progressed with td_test between kernel
 * calls (Open MPI here has no asynchronous progress). Chunk pairs the causal
 * mask hides entirely are skipped. The backward passes K/V together with
 * their gradient accumulators dK/dV: at step i a rank adds its queries'
 * share to the dK/dV of rank r - i's block, and one more hop after the last
 * step brings every block's dK/dV home.
 *
 * Traffic per call and rank (B sequences, T/n local rows, C = the model's
 * attention width on this rank, es bytes per element): a K/V block is
 * 2 B (T/n) C es bytes; forward n - 1 blocks, backward n - 1 K/V blocks and
 * n dK/dV blocks (td_cp_ring_formula).
 *
 * Collective over the cp group: every rank calls the same sequence of
 * forwards and backwards. Hang reports name the ring step, the direction
 * and the peer of every blocking wait (td_comm_note). */
#ifndef TRIDENT_CP_H
#define TRIDENT_CP_H

#include <stddef.h>
#include <stdint.h>

#include "trident/attention.h"
#include "trident/comm.h"
#include "trident/model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when n ranks can split a sequence of T rows (T a multiple of 2n). */
int td_cp_seq_ok(int T, int n);
/* Global position of local chunk 0 and 1 of rank r (chunks of T/(2n) rows). */
void td_cp_chunk_pos(int T, int n, int r, long pos[2]);
/* Rank r's rows: of each of B sequences of T rows of es bytes in src,
 * chunks r and 2n-1-r, into dst [B, T/n] (chunk r first). dst may be src
 * (rows only move towards the front). T must split (td_cp_seq_ok). */
void td_cp_take_local(void *dst, const void *src, int B, int T, int n, int r, size_t es);
/* The inverse: rank r's local rows [B, T/n] into their places in dst
 * [B, T]; other rows are left alone. */
void td_cp_put_local(void *dst, const void *src, int B, int T, int n, int r, size_t es);

/* One micro-batch's attention on this rank: B sequences of T local rows
 * (2 chunks) of the fused qkv [B, T, C + 2 KVC], C = NH * hs query columns,
 * KVC = NKV * hs columns each of k and v (grouped-query attention; NKV 0:
 * NH, the fused [B, T, 3C]). The ring's K/V blocks are [B, T, 2 KVC]. */
typedef struct {
    int B, T, C, NH;
    td_precision prec;
    int NKV;
    const int *doc_start; /* document masking (attention.h's td_attn_shape.doc_start, global
                             positions [B, doc_len]: the same on every cp rank), or NULL */
    int doc_len;
} td_cp_shape;

typedef struct {
    double wait_ms;         /* blocked in td_wait on the ring's messages */
    uint64_t bytes_sent;    /* payload this rank sent */
    uint64_t pairs, skipped; /* chunk pairs computed / hidden by the mask */
} td_cp_stats;

typedef struct td_cp_ring td_cp_ring;

/* A ring over the cp group c (borrowed; n = td_comm_size(c) >= 1). Its
 * buffers grow to the largest shape seen (TD_MEM_COMM), unless lent. */
td_cp_ring *td_cp_ring_new(td_comm *c);
void td_cp_ring_free(td_cp_ring *ring); /* NULL: nothing to do */
/* Lends the ring `bytes` of scratch for its four blocks in the calls that
 * follow, in place of its own memory (the model lends its MLP backward's
 * scratch, dead while attention runs: td_gpt_cp_scratch). Borrowed: the
 * ring frees none of it and no message of its is in flight on it once a
 * call returns. A shape whose blocks do not fit uses the ring's own
 * buffers; NULL: always its own. */
void td_cp_ring_lend(td_cp_ring *ring, void *ws, size_t bytes);

/* out [B, T, C] and lse (B * NH * T floats, in the ring's own layout: only
 * td_cp_attn_backward reads it) of this rank's rows attending causally to
 * the whole sequence. */
void td_cp_attn_forward(td_cp_ring *ring, void *out, float *lse, const void *qkv,
                        const td_cp_shape *s);
/* dqkv [B, T, 3C] (overwritten): dq of the local rows and dk, dv of the
 * local rows summed over every rank's queries, given the forward's out and
 * lse. */
void td_cp_attn_backward(td_cp_ring *ring, void *dqkv, const void *dout, const void *out,
                         const float *lse, const void *qkv, const td_cp_shape *s);

td_cp_stats td_cp_ring_stats(const td_cp_ring *ring);
void td_cp_ring_reset_stats(td_cp_ring *ring);
/* Bytes one rank sends in one forward and one backward of shape s over n
 * ranks (the header's formula). */
void td_cp_ring_formula(const td_cp_shape *s, int n, uint64_t *fwd, uint64_t *bwd);
/* The ring's own buffers for shape s over n ranks when `lent` bytes are
 * lent (the memory plan's comm category): 0 where its blocks fit there. */
size_t td_cp_ring_plan_bytes(const td_cp_shape *s, int n, size_t lent);

/* Binds the ring to the model's communication table (model.h's
 * cp_attention_* hooks), so that td_gpt_forward/backward run ring attention. */
void td_cp_bind_model(td_cp_ring *ring, td_model_comm *ops);

#ifdef __cplusplus
}
#endif

#endif
