/* Fuzz target: arbitrary bytes as a checkpoint's manifest.json
 * (src/formats/manifest.c). The parser must return 0 or -1 with a message
 * for any input: no crash, no read past the buffer, no undefined behaviour,
 * no leak on any error path.
 * Seed (tests/fuzz/corpus/ckpt/): the manifest of a tiny run (L1 H2 C16 T4,
 * a char vocabulary), written by trident train --out with dp 2, tp 2 and
 * --grad-compress topk:0.5:grad (its per-dp-rank sections: rs0_dp0, rs0_dp0_tp1...). */
#include <stdint.h>
#include <string.h>

#include "trident/formats_manifest.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    td_manifest m;
    td_err e;
    if (td_manifest_parse((const char *)data, size, &m, &e) == 0) {
        /* what a valid manifest promises its reader */
        for (int i = 0; i < m.n_tensors; i++)
            for (int k = 0; k < m.tensors[i].n_pieces; k++) {
                const td_mf_piece *p = &m.tensors[i].pieces[k];
                if (p->file < 0 || p->file >= m.n_files || p->begin > p->end || p->tp_rank >= p->tp) __builtin_trap();
            }
        td_manifest_free(&m);
    }
    return 0;
}
