/* Fuzz target: arbitrary bytes as a checkpoint's manifest.json
 * (src/formats/manifest.c). The parser must return 0 or -1 with a message
 * for any input: no crash, no read past the buffer, no undefined behaviour,
 * no leak on any error path.
 * Seeds (tests/fuzz/corpus/ckpt/): the manifests (version 5: the run id,
 * shard entries with sizes and header checksums, the seal) of two tiny runs
 * (L1 H2 C16 T4, a char vocabulary) written by trident train --out: dp 2
 * with --grad-compress topk:0.5:grad (its per-dp-rank sections rs0_dp0 ...)
 * and tp 2. Mutations rarely keep the seal, so the target also parses each
 * input resealed (td_manifest_seal) to reach the field checks behind it. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "trident/formats_manifest.h"

static void parse(const char *text, size_t size) {
    td_manifest m;
    td_err e;
    if (td_manifest_parse(text, size, &m, &e) == 0) {
        /* what a valid manifest promises its reader */
        for (int f = 0; f < m.n_files; f++)
            if (!m.files[f] || m.files[f] != m.shards[f].name || m.shards[f].rank < 0 ||
                m.shards[f].rank >= m.ranks)
                __builtin_trap();
        for (int i = 0; i < m.n_tensors; i++)
            for (int k = 0; k < m.tensors[i].n_pieces; k++) {
                const td_mf_piece *p = &m.tensors[i].pieces[k];
                char key[256];
                td_mf_piece_key(key, sizeof key, p->section, m.tensors[i].name, p->tp, p->tp_rank, p->ep, p->ep_rank,
                                p->begin);
                if (p->file < 0 || p->file >= m.n_files || p->begin > p->end || p->tp_rank >= p->tp ||
                    p->ep < 1 || p->ep_rank < 0 || p->ep_rank >= p->ep ||
                    strcmp(key, p->key) != 0)
                    __builtin_trap();
            }
        td_manifest_free(&m);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    parse((const char *)data, size);
    /* the same text resealed: cut at the last "manifest_xxh3" member (or
     * the last '}') and sealed again, as a writer would */
    const char *t = (const char *)data;
    size_t cut = size;
    for (size_t i = size; i-- > 0;)
        if (t[i] == '}') {
            cut = i;
            break;
        }
    static const char key[] = ",\n \"manifest_xxh3\": ";
    for (size_t i = 0; i + sizeof key - 1 <= size; i++)
        if (memcmp(t + i, key, sizeof key - 1) == 0) cut = i;
    char *buf = malloc(cut + 64);
    if (!buf) return 0;
    size_t n = td_manifest_seal(t, cut, buf, cut + 64);
    if (n) parse(buf, n);
    free(buf);
    return 0;
}
