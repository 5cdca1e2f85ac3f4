/* Verifying a checkpoint without a model (ckpt.h td_ckpt_check): every
 * byte the readers would use is read once and checked as they check it. */
#include <stdio.h>
#include <string.h>

#include "ckpt_internal.h"
#include "trident/base.h"
#include "trident/formats_hash.h"

static void report_block(void *ctx, const char *path, int rank, const char *key, size_t block, size_t off, size_t len,
                         uint64_t have, uint64_t want) {
    td_ckpt_summary *s = ctx;
    s->bad_blocks++;
    fflush(stdout);
    fprintf(stderr, "ckpt check: %s (rank %d): tensor %s: bytes %zu..%zu (block %zu) hash to %016llx, the shard "
            "records %016llx\n", path, rank, key, off, off + len, block + 1, (unsigned long long)have,
            (unsigned long long)want);
}

void td_ckpt_check(const char *path, td_ckpt_summary *s) {
    double t0 = td_now_ms();
    memset(s, 0, sizeof *s);
    td_ckpt_reader r;
    td_ckpt_reader_open(&r, path, "ckpt check");
    r.report = report_block, r.report_ctx = s;
    const td_manifest *m = &r.m;
    snprintf(s->dir, sizeof s->dir, "%s", r.dir);
    s->step = m->step, s->seed = m->seed, s->n_files = m->n_files, s->n_tensors = m->n_tensors;
    s->layers = m->layers, s->heads = m->heads, s->embd = m->embd, s->seq = m->seq, s->vocab = m->vocab;
    s->dp = m->dp, s->cp = m->cp, s->tp = m->tp, s->pp = m->pp, s->ep = m->ep, s->zero = m->zero, s->ranks = m->ranks;
    snprintf(s->precision, sizeof s->precision, "%s", m->precision);
    snprintf(s->dp_mode, sizeof s->dp_mode, "%s", m->dp_mode);
    snprintf(s->grad_compress, sizeof s->grad_compress, "%s", m->grad_compress);
    snprintf(s->tokenizer, sizeof s->tokenizer, "%s", td_tokenizer_name((td_tokenizer_kind)m->tok_kind));
    td_hash_hex(m->run, s->run);
    td_gpt_config cfg;
    td_ckpt_manifest_config(m, r.dir, &cfg);
    if (cfg.moe.E > 0) td_ckpt_moe_text(&cfg.moe, 1, s->moe, sizeof s->moe);
    td_param_table canon;
    td_param_table_build(&canon, &cfg, 1);
    /* every section the manifest names, each tensor put together once */
    int *secs = td_alloc(sizeof(int) * 64, TD_MEM_OTHER), n_secs = 0, cap = 64;
    for (int i = 0; i < m->n_tensors; i++)
        for (int k = 0; k < m->tensors[i].n_pieces; k++) {
            int sec = m->tensors[i].pieces[k].section, seen = 0;
            for (int j = 0; j < n_secs && !seen; j++) seen = secs[j] == sec;
            if (seen) continue;
            if (n_secs == cap) {
                int *b = td_alloc(sizeof(int) * (size_t)(2 * cap), TD_MEM_OTHER);
                memcpy(b, secs, sizeof(int) * (size_t)cap);
                td_free(secs);
                secs = b, cap *= 2;
            }
            secs[n_secs++] = sec;
        }
    TD_CHECK(td_manifest_tensor(m, canon.rows[0].name), "%s/manifest.json: tensor %s is missing", r.dir,
             canon.rows[0].name);
    size_t biggest = 0;
    for (int i = 0; i < canon.n_rows; i++) biggest = td_max_sz(biggest, canon.rows[i].numel);
    float *buf = td_alloc(sizeof(float) * (biggest + 1), TD_MEM_OTHER);
    int have_params = 0;
    for (int j = 0; j < n_secs; j++) {
        for (int i = 0; i < canon.n_rows; i++) {
            const td_param *p = &canon.rows[i];
            if (p->numel == 0) continue;
            td_ckpt_range rg = {p->offset, p->numel, buf};
            td_ckpt_reader_fill(&r, &canon, secs[j], &rg, 1);
            if (secs[j] < 3) s->elements[secs[j]] += p->numel;
        }
        have_params |= secs[j] == TD_MF_PARAMS;
    }
    TD_CHECK(have_params, "%s/manifest.json: no tensor has a params piece", r.dir);
    s->n_sections = n_secs;
    /* every piece was read once: its bytes and blocks */
    for (int i = 0; i < m->n_tensors; i++)
        for (int k = 0; k < m->tensors[i].n_pieces; k++) {
            uint64_t b = 4 * (m->tensors[i].pieces[k].end - m->tensors[i].pieces[k].begin);
            s->bytes += b, s->blocks += td_hash_n_blocks(b);
        }
    td_free(buf);
    td_free(secs);
    td_param_table_free(&canon);
    td_ckpt_reader_close(&r);
    s->seconds = (td_now_ms() - t0) / 1000.0;
}
