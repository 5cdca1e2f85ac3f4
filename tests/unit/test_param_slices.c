/* "Slice s of every unit" (param_slices.h): for parts 1..4 over tables padded
 * for them, the parts' slices of every unit are equal, adjacent and in part
 * order, cover the unit exactly once, and pack/unpack moves exactly those
 * elements (every element of the flat buffer comes back, bit for bit, from
 * the union of the parts' packed shards). Exact integer and bit comparisons:
 * no tolerance. */
#include <stdio.h>
#include <string.h>

#include "test_util.h"
#include "trident/param_slices.h"

static int check_parts(const td_gpt_config *cfg, int parts) {
    td_param_table t;
    td_param_table_build(&t, cfg, 16 * parts);
    int bad = 0;
    for (int u = 0; u < t.n_units && !bad; u++) {
        size_t len0, next = t.unit_offset[u];
        for (int s = 0; s < parts; s++) {
            size_t len, off = td_param_unit_slice(&t, u, parts, s, &len);
            if (s == 0) len0 = len;
            if (off != next || len != len0) {
                printf("FAIL parts %d unit %d slice %d: offset %zu length %zu, want %zu and %zu\n",
                       parts, u, s, off, len, next, len0);
                bad = 1;
                break;
            }
            next = off + len;
        }
        if (!bad && next != t.unit_offset[u + 1]) {
            printf("FAIL parts %d unit %d: slices end at %zu, the unit at %zu\n", parts, u, next,
                   t.unit_offset[u + 1]);
            bad = 1;
        }
    }
    size_t n = t.numel, shard = n / (size_t)parts;
    float *flat = td_alloc(n * sizeof(float), TD_MEM_OTHER),
          *back = td_alloc(n * sizeof(float), TD_MEM_OTHER);
    float *packed = td_alloc(shard * sizeof(float), TD_MEM_OTHER);
    for (size_t i = 0; i < n; i++) flat[i] = (float)i + 0.5f; /* distinct, exact in float here */
    for (size_t i = 0; i < n; i++) back[i] = -1.0f;
    for (int s = 0; s < parts; s++) {
        td_param_slices_pack(&t, parts, s, flat, packed);
        td_param_slices_unpack(&t, parts, s, packed, back);
    }
    for (size_t i = 0; i < n && !bad; i++)
        if (memcmp(&flat[i], &back[i], sizeof(float)) != 0) {
            printf("FAIL parts %d: element %zu came back as %g, want %g\n", parts, i, back[i],
                   flat[i]);
            bad = 1;
        }
    printf("%s parts %d: %d units, %zu elements, shards of %zu\n", bad ? "FAIL" : "ok  ", parts,
           t.n_units, n, shard);
    td_free(flat);
    td_free(back);
    td_free(packed);
    td_param_table_free(&t);
    return bad;
}

int main(void) {
    td_gpt_config cfg = {.L = 2, .H = 4, .C = 64, .T = 32, .V = 65}; /* V 65: the padded vocabulary pads unit 0 */
    td_gpt_config_finish(&cfg);
    int fails = 0;
    for (int parts = 1; parts <= 4; parts++) fails += check_parts(&cfg, parts);
    return fails ? 1 : 0;
}
