/* Document masking's starts (model.h: td_gpt_doc_mask): computed on the
 * host from the micro-batch's whole sequences, uploaded by a named copy,
 * read by the attention kernels through td_attn_shape.doc_start. */
#include "trident/backend.h"
#include "trident/base.h"
#include "trident/model.h"

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
    td_dev_free(m->doc_start), m->doc_start = NULL;
    td_free(m->doc_host), m->doc_host = NULL;
    m->doc_eod = eod < 0 ? -1 : eod;
    if (eod < 0) return;
    size_t n = (size_t)m->d.B * (size_t)m->cfg.T;
    m->doc_host = td_alloc(n * sizeof(int), TD_MEM_OTHER);
    m->doc_start = td_dev_alloc(n * sizeof(int), TD_MEM_OTHER, "document starts");
}

void td_gpt_set_documents(td_gpt *m, const int *whole_inputs) {
    if (m->doc_eod < 0) return;
    td_doc_starts(m->doc_host, whole_inputs, m->d.B, m->cfg.T, m->doc_eod);
    td_dev_upload(m->doc_start, m->doc_host, (size_t)m->d.B * (size_t)m->cfg.T * sizeof(int), TD_HOST_TOKENS);
}

long td_doc_mask_targets(int *targets, size_t n, int eod) {
    long kept = 0;
    for (size_t i = 0; i < n; i++) {
        if (targets[i] == eod) targets[i] = -1;
        kept += targets[i] >= 0;
    }
    return kept;
}
