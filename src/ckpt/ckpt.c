/* The consolidated checkpoint: one shard of whole tensors in the canonical
 * layout, written by one rank (gathered saves, imports), and the loader of
 * any checkpoint into the canonical flat buffers (sampling, export, tests). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt_internal.h"
#include "trident/base.h"
#include "trident/formats_json.h"
#include "trident/out_lock.h"

struct td_ckpt_writer {
    td_ckpt_dir d;
    td_ckpt_meta meta;
    td_gpt_config cfg;
    const td_tokenizer *tok;
    td_param_table canon;
    td_shard *shard;
    td_shard_item *items; /* the shard's list, until the commit */
    int n_sections;
};

void td_ckpt_meta_default(td_ckpt_meta *m, int step) {
    memset(m, 0, sizeof *m);
    m->step = step;
    td_loss_scaler_init(&m->scaler, TD_LOSS_SCALE_NONE, 1.0f, 1);
    m->dp = m->cp = m->tp = m->pp = m->ep = m->ranks = 1;
    m->precision = "fp32", m->dp_mode = "allreduce", m->grad_compress = "none";
    m->run = td_random_id(); /* a new run unless the caller says whose it is */
}

td_ckpt_writer *td_ckpt_writer_open(const char *out, const td_gpt_config *cfg,
                                    const td_tokenizer *tok, int step, int has_optimizer) {
    td_ckpt_writer *w = td_alloc(sizeof *w, TD_MEM_OTHER);
    memset(w, 0, sizeof *w);
    td_ckpt_dir_init(&w->d, out, step, td_job_id());
    td_ckpt_meta_default(&w->meta, step);
    w->d.run = w->meta.run;
    w->cfg = *cfg;
    w->tok = tok;
    w->n_sections = has_optimizer ? 3 : 1;
    td_param_table_build(&w->canon, cfg, 1);
    td_ckpt_dir_create(&w->d);
    int n = w->n_sections * w->canon.n_rows;
    td_shard_item *items = td_alloc(sizeof *items * (size_t)n, TD_MEM_OTHER);
    for (int s = 0; s < w->n_sections; s++)
        for (int i = 0; i < w->canon.n_rows; i++) {
            td_shard_item *it = &items[s * w->canon.n_rows + i];
            td_piece_key(it->key, sizeof it->key, s, w->canon.rows[i].name, 1, 0, 1, 0, 0);
            it->n = w->canon.rows[i].numel;
        }
    w->shard = td_shard_create(&w->d, 0, "", items, n);
    w->items = items;
    return w;
}

size_t td_ckpt_writer_bookkeeping(int n_rows) { return td_shard_bookkeeping(3 * n_rows); }

void td_ckpt_writer_meta(td_ckpt_writer *w, const td_ckpt_meta *meta) {
    int step = w->meta.step;
    w->meta = *meta;
    w->meta.step = step;
    w->d.run = meta->run; /* the shard's header is rewritten with it at the commit */
}

void td_ckpt_writer_put(td_ckpt_writer *w, int section, const td_param_table *t, int u,
                        const float *buf) {
    TD_ASSERT(section >= 0 && section < w->n_sections);
    TD_ASSERT(t->n_rows == w->canon.n_rows && u >= 0 && u < t->n_units);
    /* rows of one unit are contiguous in both layouts, only padding differs */
    for (int i = 0; i < t->n_rows; i++) {
        const td_param *r = &t->rows[i];
        if (r->unit != u) continue;
        TD_ASSERT(r->numel == w->canon.rows[i].numel);
        td_shard_put(w->shard, section * t->n_rows + i, buf + (r->offset - t->unit_offset[u]));
    }
}

void td_ckpt_writer_commit(td_ckpt_writer *w, char *path, size_t cap) {
    td_shard_close(w->shard);
    td_free(w->items);
    td_ckpt_finish(&w->d, 1, &w->meta, &w->cfg, w->tok, &w->canon, path, cap);
    td_param_table_free(&w->canon);
    td_free(w);
}

void td_ckpt_save(const char *out, const td_gpt_config *cfg, const td_tokenizer *tok, int step,
                  const float *params, const float *m, const float *v, size_t numel) {
    td_ckpt_writer *w = td_ckpt_writer_open(out, cfg, tok, step, m != NULL);
    TD_ASSERT(numel == w->canon.numel);
    const float *bufs[3] = {params, m, v};
    for (int s = 0; s < (m ? 3 : 1); s++)
        for (int u = 0; u < w->canon.n_units; u++)
            td_ckpt_writer_put(w, s, &w->canon, u, bufs[s] + w->canon.unit_offset[u]);
    td_ckpt_writer_commit(w, NULL, 0);
}

/* What the manifest says of the model and its tokenizer. */
static void describe(td_checkpoint *ck, const td_ckpt_reader *r) {
    const td_manifest *m = &r->m;
    snprintf(ck->dir, sizeof ck->dir, "%s", r->dir);
    td_ckpt_manifest_config(m, r->dir, &ck->cfg);
    ck->step = m->step;
    ck->tok.kind = (td_tokenizer_kind)m->tok_kind;
    ck->tok.V = m->tok_vocab;
    if (m->tok_kind == TD_TOK_CHAR) {
        ck->tok.chars = td_alloc(sizeof(uint32_t) * (size_t)m->tok_vocab, TD_MEM_OTHER);
        memcpy(ck->tok.chars, m->chars, sizeof(uint32_t) * (size_t)m->tok_vocab);
    }
    /* a BPE's tables, to decode samples */
    if (td_tokenizer_is_bpe(ck->tok.kind)) td_tokenizer_bpe(&ck->tok, td_tokenizer_name(ck->tok.kind));
    if (m->tok_kind == TD_TOK_HF) { /* the same file, or the ids would mean other tokens */
        char what[4200];
        snprintf(what, sizeof what, "%s/manifest.json: the checkpoint's tokenizer", r->dir);
        td_tokenizer_hf(&ck->tok, m->tok_file, what);
        TD_CHECK(ck->tok.file_xxh3 == m->tok_xxh3 && ck->tok.V == m->tok_vocab,
                 "%s %s has changed since the checkpoint was saved (its XXH3 or vocabulary differs); "
                 "restore that file", what, m->tok_file);
    }
    ck->seed = m->seed;
}

void td_ckpt_describe(td_checkpoint *ck, const char *path) {
    memset(ck, 0, sizeof *ck);
    td_ckpt_reader r;
    td_ckpt_reader_open(&r, path, "--ckpt");
    describe(ck, &r);
    td_ckpt_reader_close(&r);
}

void td_ckpt_load(td_checkpoint *ck, const char *path) {
    memset(ck, 0, sizeof *ck);
    td_ckpt_reader r;
    td_ckpt_reader_open(&r, path, "--ckpt");
    describe(ck, &r);
    td_param_table canon;
    td_param_table_build(&canon, &ck->cfg, 1);
    ck->numel = canon.numel;
    float **dst[3] = {&ck->params, &ck->m, &ck->v};
    /* host copies of the file's ranges (the run uploads them through the
     * checkpoint's staged ranges): host staging, not the step's tensors */
    for (int s = 0; s < 3; s++) {
        float *b = td_alloc(sizeof(float) * canon.numel, TD_MEM_OTHER);
        memset(b, 0, sizeof(float) * canon.numel);
        td_ckpt_range rg = {0, canon.numel, b};
        if (td_ckpt_reader_fill(&r, &canon, s, &rg, 1)) {
            *dst[s] = b;
        } else {
            TD_CHECK(s > 0, "%s/manifest.json: no tensor has a params piece", r.dir);
            td_free(b);
        }
    }
    TD_CHECK(!ck->m == !ck->v, "%s/manifest.json: adam_m and adam_v must both be there or both absent", r.dir);
    td_param_table_free(&canon);
    td_ckpt_reader_close(&r);
}

void td_ckpt_free(td_checkpoint *ck) {
    td_free(ck->params);
    td_free(ck->m);
    td_free(ck->v);
    td_tokenizer_free(&ck->tok);
    memset(ck, 0, sizeof *ck);
}

void td_ckpt_read_manifest(const char *path, const char *what, td_manifest *m, char *dir, size_t cap) {
    td_ckpt_reader r;
    td_ckpt_reader_open(&r, path, what);
    *m = r.m; /* the reader's manifest becomes the caller's */
    memset(&r.m, 0, sizeof r.m);
    snprintf(dir, cap, "%s", r.dir);
    td_ckpt_reader_close(&r);
}

void td_ckpt_manifest_docs(const td_manifest *m, const char *dir, td_ckpt_docs *d) {
    *d = (td_ckpt_docs){0, 0, -1, 0};
    if (!m->run_config) return;
    td_jv *rc = NULL;
    td_err err;
    TD_CHECK(td_json_parse(m->run_config, strlen(m->run_config), &rc, &err) == 0, "%s/manifest.json: run_config: %s",
             dir, err.msg);
    const td_jv *dm = td_json_get(rc, "doc-mask"), *el = td_json_get(rc, "eod-mask-loss");
    const td_jv *eod = td_json_get(rc, "eod"), *dp = td_json_get(rc, "doc-positions");
    d->doc_mask = dm && dm->type == TD_JV_BOOL && dm->boolean;
    d->eod_mask_loss = el && el->type == TD_JV_BOOL && el->boolean;
    if ((d->doc_mask || d->eod_mask_loss) && eod && eod->type == TD_JV_NUM) d->eod = (int)eod->num;
    d->pos_reset = d->doc_mask && dp && dp->type == TD_JV_STR && strcmp(dp->str, "reset") == 0;
    td_json_free(rc);
}
