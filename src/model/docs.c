/* Document masking's starts (model.h: td_gpt_doc_mask): computed on the
 * host from the micro-batch's whole sequences, uploaded by a named copy,
 * read by the attention kernels through td_attn_shape.doc_start; under
 * --doc-positions reset also each row's position counted from its
 * document's start: the rotary table of the micro-batch's rows, or for
 * learned positions the rows' positions themselves (the wpe rows that the
 * embedding adds, embed_head.c). */
#include "internal.h"
#include "trident/backend.h"
#include "trident/base.h"
#include "trident/model.h"
#include "trident/rope.h"

void td_doc_starts(int *start, const int *tokens, int B, int T, int eod) {
    for (int b = 0; b < B; b++) {
        const int *x = tokens + (size_t)b * T;
        int *st = start + (size_t)b * T, cur = 0;
        for (int t = 0; t < T; t++) {
            if (t > 0 && x[t - 1] == eod) cur = t; /* a document begins after each end-of-text */
            st[t] = cur;
        }
    }
}

void td_gpt_doc_mask(td_gpt *m, int eod) {
    td_gpt_doc_positions(m, 0);
    td_dev_free(m->doc_start), m->doc_start = NULL;
    td_free(m->doc_host), m->doc_host = NULL;
    m->doc_eod = eod < 0 ? -1 : eod;
    if (eod < 0) return;
    size_t n = (size_t)m->d.B * (size_t)m->cfg.T;
    m->doc_host = td_alloc(n * sizeof(int), TD_MEM_OTHER);
    m->doc_start = td_dev_alloc(n * sizeof(int), TD_MEM_OTHER, "document starts");
}

void td_gpt_doc_positions(td_gpt *m, int reset) {
    td_dev_free(m->rope_doc), m->rope_doc = NULL;
    td_free(m->rope_doc_host), m->rope_doc_host = NULL;
    td_dev_free(m->doc_pos), m->doc_pos = NULL;
    td_free(m->doc_pos_host), m->doc_pos_host = NULL;
    if (!reset) return;
    TD_ASSERT(m->doc_eod >= 0); /* rules row doc-positions-mask */
    size_t rows = (size_t)m->d.B * (size_t)m->d.T;
    m->doc_pos_host = td_alloc(rows * sizeof(int), TD_MEM_OTHER);
    if (!m->arch->rope) { /* learned: the embedding reads the rows' positions */
        m->doc_pos = td_dev_alloc(rows * sizeof(int), TD_MEM_OTHER, "document positions");
        return;
    }
    size_t n = rows * (size_t)m->d.hs;
    m->rope_doc_host = td_alloc(n * sizeof(float), TD_MEM_OTHER);
    m->rope_doc = td_dev_alloc(n * sizeof(float), TD_MEM_OTHER, "document rotary table");
}

void td_gpt_docs_create(td_gpt_docs *d, const td_gpt *m) {
    d->start = NULL, d->rope = NULL, d->pos = NULL;
    if (m->doc_start)
        d->start = td_dev_alloc((size_t)m->d.B * (size_t)m->cfg.T * sizeof(int), TD_MEM_OTHER, "document starts");
    if (m->rope_doc)
        d->rope = td_dev_alloc((size_t)m->d.B * (size_t)m->d.T * (size_t)m->d.hs * sizeof(float), TD_MEM_OTHER,
                               "document rotary table");
    if (m->doc_pos)
        d->pos = td_dev_alloc((size_t)m->d.B * (size_t)m->d.T * sizeof(int), TD_MEM_OTHER, "document positions");
}

void td_gpt_docs_destroy(td_gpt_docs *d) {
    td_dev_free(d->start), td_dev_free(d->rope), td_dev_free(d->pos);
    d->start = NULL, d->rope = NULL, d->pos = NULL;
}

td_gpt_docs td_gpt_docs_use(td_gpt *m, td_gpt_docs d) {
    td_gpt_docs was = {m->doc_start, m->rope_doc, m->doc_pos};
    m->doc_start = d.start, m->rope_doc = d.rope, m->doc_pos = d.pos;
    return was;
}

/* Each local row's position t - start(t) of its global position t, so a
 * cp chunk's rows turn (or add wpe rows) exactly as the one-process run's
 * same rows. */
static void doc_rows(td_gpt *m) {
    int B = m->d.B, T = m->d.T, hs = m->d.hs;
    int *gpos = td_alloc(sizeof(int) * (size_t)T, TD_MEM_OTHER), *pos = m->doc_pos_host;
    td_gpt_positions(m, gpos);
    for (int b = 0; b < B; b++) {
        const int *st = m->doc_host + (size_t)b * m->cfg.T;
        for (int i = 0; i < T; i++) pos[(size_t)b * T + i] = gpos[i] - st[gpos[i]];
    }
    td_free(gpos);
    if (m->doc_pos) {
        td_dev_upload(m->doc_pos, pos, sizeof(int) * (size_t)B * T, TD_HOST_TOKENS);
        return;
    }
    float *inv = td_alloc(sizeof(float) * (size_t)(hs / 2), TD_MEM_OTHER);
    td_gpt_rope_freqs(&m->cfg, hs, inv);
    for (int b = 0; b < B; b++)
        td_rope_table(m->rope_doc_host + (size_t)b * T * hs, pos + (size_t)b * T, inv, T, hs);
    td_dev_upload(m->rope_doc, m->rope_doc_host, sizeof(float) * (size_t)B * T * hs, TD_HOST_TOKENS);
    td_free(inv);
}

void td_gpt_set_documents(td_gpt *m, const int *whole_inputs) {
    if (m->doc_eod < 0) return;
    td_doc_starts(m->doc_host, whole_inputs, m->d.B, m->cfg.T, m->doc_eod);
    td_dev_upload(m->doc_start, m->doc_host, (size_t)m->d.B * (size_t)m->cfg.T * sizeof(int), TD_HOST_TOKENS);
    if (m->doc_pos_host) doc_rows(m);
}

long td_doc_mask_targets(int *targets, size_t n, int eod) {
    long kept = 0;
    for (size_t i = 0; i < n; i++) {
        if (targets[i] == eod) targets[i] = -1;
        kept += targets[i] >= 0;
    }
    return kept;
}
