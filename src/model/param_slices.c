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
