/* Shared by the model's files: a tensor's weights and gradient by kind, and
 * the communication table's calls (no-ops without one). */
#ifndef TRIDENT_MODEL_INTERNAL_H
#define TRIDENT_MODEL_INTERNAL_H

#include "trident/model.h"

/* Unit of block l (units: 0 embeddings, 1..L blocks, L+1 final norm). */
static inline int td_m_block_unit(int l) { return l + 1; }

static inline const float *td_m_w(const td_gpt *m, int unit, td_tensor_kind k) {
    return m->unit_params[unit] + m->off[k];
}

static inline float *td_m_g(const td_gpt *m, int unit, td_tensor_kind k) {
    return m->unit_grads[unit] + m->off[k];
}

static inline void td_m_tp_allreduce(const td_gpt *m, float *buf, size_t n, td_reduce_op op) {
    if (m->comm && m->comm->tp_allreduce) m->comm->tp_allreduce(m->comm->ctx, buf, n, op);
}

#endif
