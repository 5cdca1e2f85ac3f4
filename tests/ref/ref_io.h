/* Writing trident's weights in tests/ref/gpt_ref.py's input format: per
 * tensor int32 namelen, name, int32 ndim, int32 shape[ndim], float32 data,
 * the table's names and global shapes (the vocabulary rows without
 * trident's padding). */
#ifndef TD_TESTS_REF_IO_H
#define TD_TESTS_REF_IO_H

#include <stdio.h>
#include <string.h>

#include "trident/base.h"
#include "trident/model.h"

static inline void ref_write(FILE *f, const void *p, size_t n) { TD_ASSERT(fwrite(p, 1, n, f) == n); }

/* params: the canonical (unit_align 1) flat layout of t; V: the real vocabulary. */
static inline void ref_write_tensors(FILE *f, const td_param_table *t, const float *params, int V, int C) {
    int32_t nt = t->n_rows;
    ref_write(f, &nt, 4);
    for (int i = 0; i < t->n_rows; i++) {
        const td_param *p = &t->rows[i];
        int32_t nl = (int32_t)strlen(p->name), nd = p->ndim;
        int32_t sh[2] = {p->shape[0], p->shape[1]};
        size_t n = p->numel;
        if (p->split == TD_SPLIT_VOCAB) sh[0] = V, n = (size_t)V * C; /* embedding, untied head */
        ref_write(f, &nl, 4);
        ref_write(f, p->name, (size_t)nl);
        ref_write(f, &nd, 4);
        ref_write(f, sh, 4 * (size_t)nd);
        ref_write(f, params + p->offset, 4 * n);
    }
}

#endif
