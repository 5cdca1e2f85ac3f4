/* Slices of the parameter table's units (see param_slices.h). */
#include <string.h>

#include "trident/base.h"
#include "trident/param_slices.h"

size_t td_param_unit_slice(const td_param_table *t, int u, int parts, int s, size_t *len) {
    TD_ASSERT(u >= 0 && u < t->n_units && parts >= 1 && s >= 0 && s < parts);
    size_t n = td_unit_numel(t, u);
    TD_ASSERT(n % (size_t)parts == 0); /* the table pads units for this */
    *len = n / (size_t)parts;
    return t->unit_offset[u] + (size_t)s * *len;
}

int td_param_unit_pieces(const td_param_table *t, int u, size_t lo[TD_UNIT_PIECES], size_t len[TD_UNIT_PIECES],
                         int expert[TD_UNIT_PIECES]) {
    TD_ASSERT(u >= 0 && u < t->n_units);
    int n = 1;
    lo[0] = t->unit_offset[u], expert[0] = 0;
    for (int i = 0; i < t->n_rows && t->ep > 1; i++) {
        const td_param *p = &t->rows[i];
        if (p->unit != u || p->numel == 0) continue;
        int e = p->split == TD_SPLIT_EXPERT;
        if (p->offset == lo[0]) expert[0] = e; /* the unit's first row */
        else if (e != expert[n - 1]) {
            TD_ASSERT(n < TD_UNIT_PIECES); /* dense, experts, dense (arch.c's order) */
            lo[n] = p->offset, expert[n++] = e;
        }
    }
    for (int k = 0; k < n; k++) len[k] = (k + 1 < n ? lo[k + 1] : t->unit_offset[u + 1]) - lo[k];
    return n;
}

void td_param_slices_pack(const td_param_table *t, int parts, int s, const float *flat,
                          float *packed) {
    size_t k = 0, len;
    for (int u = 0; u < t->n_units; u++) {
        size_t off = td_param_unit_slice(t, u, parts, s, &len);
        memcpy(packed + k, flat + off, len * sizeof(float));
        k += len;
    }
}

void td_param_slices_unpack(const td_param_table *t, int parts, int s, const float *packed,
                            float *flat) {
    size_t k = 0, len;
    for (int u = 0; u < t->n_units; u++) {
        size_t off = td_param_unit_slice(t, u, parts, s, &len);
        memcpy(flat + off, packed + k, len * sizeof(float));
        k += len;
    }
}
