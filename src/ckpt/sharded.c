/* The sharded save and the resharding resume of a running job: what each
 * rank writes and reads comes from its strategy's ranges (td_dp_ranges). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt_internal.h"
#include "trident/backend.h"
#include "trident/base.h"
#include "trident/comm.h"
#include "trident/out_lock.h"

_Static_assert(TD_DP_RANK_STATES == TD_MF_RANK_KINDS, "the manifest's rank-state kinds are td_dp_rank_state's");

/* MAX over every training rank: sharded saves have no parameter servers,
 * so the world is the dp x tp x pp grid. */
static void workers_max(const td_grid *g, float *x, int n) {
    TD_ASSERT(g->n_servers == 0);
    if (td_comm_size(g->world) > 1) td_allreduce(g->world, x, (size_t)n, TD_F32, TD_MAX);
}

typedef struct {
    int n, cap;
    td_ckpt_range *r;
} range_list;

static void add_range(void *ctx, size_t lo, size_t n, float *data) {
    range_list *l = ctx;
    if (l->n == l->cap) {
        l->cap = 2 * l->cap + 16;
        td_ckpt_range *r = td_alloc(sizeof *r * (size_t)l->cap, TD_MEM_OTHER);
        if (l->n) memcpy(r, l->r, sizeof *r * (size_t)l->n);
        td_free(l->r);
        l->r = r;
    }
    l->r[l->n++] = (td_ckpt_range){lo, n, data};
}

/* Row p's piece key: its tp slice, and for the experts' rows the ep slice */
static void piece_key(td_shard_item *it, int section, const td_param_table *t, const td_param *p, size_t begin) {
    int ex = p->split == TD_SPLIT_EXPERT;
    td_piece_key(it->key, sizeof it->key, section, p->name, t->tp, t->tp_rank, ex ? t->ep : 1, ex ? t->ep_rank : 0,
                 begin);
}

/* The pieces of one section: ranges of this rank's flat layout cut at
 * tensor boundaries, without what another rank writes (tensors replicated
 * over tp, the experts' rows among them: tp rank 0; the tied embedding of
 * the last pipeline stage: the first's). Counts when items is NULL. */
static int section_pieces(const td_shard_src *src, int s, td_shard_item *items, const float **data) {
    const td_param_table *t = src->t;
    const td_ckpt_range *r = src->ranges[s];
    int n = 0;
    for (int j = 0; j < src->n_ranges[s]; j++)
        for (int i = 0; i < t->n_rows; i++) {
            const td_param *p = &t->rows[i];
            if (p->numel == 0 || (td_param_tp_replicated(p) && src->tp_rank != 0) || (p->unit == 0 && src->pp_rank != 0))
                continue;
            size_t lo = td_max_sz(r[j].lo, p->offset), hi = td_min_sz(r[j].lo + r[j].n, p->offset + p->numel);
            if (lo >= hi) continue;
            if (items) {
                piece_key(&items[n], s, t, p, lo - p->offset);
                items[n].n = hi - lo;
                data[n] = r[j].data + (lo - r[j].lo);
            }
            n++;
        }
    return n;
}

/* Per-dp-rank state is not replicated where the model is: each holder of a
 * replicated tensor (tp ranks, the tied embedding's last stage) selected
 * its own top-k. The section of this rank's copy of row p: */
static int state_section(int dp_rank, int tp_rank, int pp_rank, const td_param *p, int kind) {
    return td_mf_rank_section(kind, dp_rank, p->unit == 0 && pp_rank != 0, td_param_tp_replicated(p) ? tp_rank : 0);
}

/* This rank's pieces: the owner ranges of each model section, then its
 * per-dp-rank state, every row whole, in its copy's section. Counts when
 * items is NULL. */
static int collect(const td_shard_src *src, td_shard_item *items, const float **data) {
    const td_param_table *t = src->t;
    int n = 0;
    for (int s = 0; s < TD_MF_NSECTIONS; s++)
        n += section_pieces(src, s, items ? items + n : NULL, data ? data + n : NULL);
    for (int k = 0; k < TD_MF_RANK_KINDS; k++) {
        const float *x = src->state[k];
        for (int i = 0; x && i < t->n_rows; i++) {
            const td_param *p = &t->rows[i];
            if (p->numel == 0) continue;
            if (items) {
                piece_key(&items[n], state_section(src->dp_rank, src->tp_rank, src->pp_rank, p, k), t, p, 0);
                items[n].n = p->numel;
                data[n] = x + p->offset;
            }
            n++;
        }
    }
    return n;
}

size_t td_ckpt_write_shard(const td_ckpt_dir *d, const td_shard_src *src) {
    int n = collect(src, NULL, NULL);
    td_shard_item *items = td_alloc(sizeof *items * (size_t)(n + 1), TD_MEM_OTHER);
    const float **data = td_alloc(sizeof *data * (size_t)(n + 1), TD_MEM_OTHER);
    collect(src, items, data);
    char grid[64];
    snprintf(grid, sizeof grid, "dp %d tp %d pp %d", src->dp_rank, src->tp_rank, src->pp_rank);
    if (src->t->ep > 1) /* its experts' slice */
        snprintf(grid + strlen(grid), sizeof grid - strlen(grid), " ep %d", src->t->ep_rank);
    td_shard *s = td_shard_create(d, src->world_rank, grid, items, n);
    /* the model sections' pieces are the strategy's buffers: on a device
     * each comes down into host memory first (a named download); the
     * per-dp-rank state is host memory (top-k runs on the host) */
    int n_sec = 0;
    for (int k = 0; k < TD_MF_NSECTIONS; k++) n_sec += section_pieces(src, k, NULL, NULL);
    for (int i = 0; i < n; i++) {
        float *host = NULL;
        if (i < n_sec && td_backend_is_device()) {
            host = td_alloc(items[i].n * sizeof(float), TD_MEM_OTHER);
            td_dev_download(host, data[i], items[i].n * sizeof(float), TD_HOST_CKPT);
            td_dev_sync();
        }
        td_shard_put(s, i, host ? host : data[i]);
        td_free(host);
    }
    td_shard_close(s);
    td_free(items);
    td_free((void *)data);
    return td_shard_bookkeeping(n);
}

/* Fills this rank's per-dp-rank state of kind k (x) from the checkpoint:
 * every row from the first holder's copy, then the rows of another copy
 * from that copy's own section where the checkpoint has it (a layout with
 * that tp rank, that pipeline). Returns 0 when it holds no such state. */
static int fill_state(td_ckpt_reader *r, const td_grid *g, const td_param_table *t, int k, float *x) {
    td_ckpt_range all = {0, t->numel, x};
    if (!td_ckpt_reader_fill(r, t, td_mf_rank_section(k, g->axis[TD_DP].rank, 0, 0), &all, 1))
        return 0;
    td_ckpt_range *rg = td_alloc(sizeof *rg * (size_t)(t->n_rows + 1), TD_MEM_OTHER);
    int first = td_mf_rank_section(k, g->axis[TD_DP].rank, 0, 0), done[4] = {first}, n_done = 1;
    int dr = g->axis[TD_DP].rank, tr = g->axis[TD_TP].rank, pr = g->axis[TD_PP].rank;
    for (int i = 0; i < t->n_rows; i++) {
        int sec = state_section(dr, tr, pr, &t->rows[i], k), n = 0, seen = 0;
        for (int j = 0; j < n_done; j++) seen |= done[j] == sec;
        if (seen || t->rows[i].numel == 0) continue;
        TD_ASSERT(n_done < 4); /* a rank holds at most (tp replica, tied) x 2 copies */
        done[n_done++] = sec;
        for (int j = i; j < t->n_rows; j++) {
            const td_param *p = &t->rows[j];
            if (p->numel > 0 && state_section(dr, tr, pr, p, k) == sec)
                rg[n++] = (td_ckpt_range){p->offset, p->numel, x + p->offset};
        }
        td_ckpt_reader_fill(r, t, sec, rg, n);
    }
    td_free(rg);
    return 1;
}

size_t td_ckpt_save_sharded(const td_ckpt_state *st, const char *out, const td_ckpt_meta *meta, char *path,
                            size_t cap) {
    td_dp *dp = st->dp;
    const td_grid *g = st->g;
    const td_param_table *t = st->t;
    const td_gpt_config *cfg = st->cfg;
    const td_tokenizer *tok = st->tok;
    /* world rank 0 names the temporary directory after its job id and
     * creates it; the others learn the name (its bytes, one per float)
     * once it exists */
    enum { TAG = 64 };
    float tag[TAG];
    char job[TAG];
    memset(tag, 0, sizeof tag);
    td_ckpt_dir d;
    if (g->world_rank == 0) {
        const char *id = td_job_id();
        for (int i = 0; id[i] && i < TAG - 1; i++) tag[i] = (float)(unsigned char)id[i];
        td_ckpt_dir_init(&d, out, meta->step, id);
        td_ckpt_dir_create(&d);
    }
    workers_max(g, tag, TAG);
    for (int i = 0; i < TAG; i++) job[i] = (char)(int)tag[i];
    job[TAG - 1] = 0;
    td_ckpt_dir_init(&d, out, meta->step, job);
    d.run = meta->run;
    /* this rank's owner ranges of each model section and its per-dp-rank state */
    td_shard_src src = {.world_rank = g->world_rank, .dp_rank = g->axis[TD_DP].rank, .tp_rank = g->axis[TD_TP].rank,
                        .pp_rank = g->axis[TD_PP].rank, .t = t};
    range_list l[TD_MF_NSECTIONS];
    for (int s = 0; s < TD_MF_NSECTIONS; s++) {
        l[s] = (range_list){0, 0, NULL};
        TD_ASSERT(td_dp_ranges(dp, s, 1, add_range, &l[s]));
        src.ranges[s] = l[s].r, src.n_ranges[s] = l[s].n;
    }
    TD_CHECK(td_dp_rank_state(dp, 0) == NULL ||
                 (g->axis[TD_DP].size <= TD_MF_MAX_DP && g->axis[TD_TP].size <= TD_MF_MAX_TP),
             "--out: a checkpoint holds the per-dp-rank state of at most %d dp ranks and %d tp ranks", TD_MF_MAX_DP,
             TD_MF_MAX_TP);
    for (int k = 0; k < TD_DP_RANK_STATES; k++) src.state[k] = td_dp_rank_state(dp, k);
    size_t held = td_ckpt_write_shard(&d, &src);
    for (int s = 0; s < TD_MF_NSECTIONS; s++) td_free(l[s].r);
    float done = 1.0f; /* every shard is on disk (a failed rank aborts the job instead) */
    workers_max(g, &done, 1);
    td_ckpt_meta m = *meta;
    m.ep = t->ep; /* the layout the experts' rows were saved under */
    if (g->world_rank == 0) td_ckpt_finish(&d, td_grid_workers(g), &m, cfg, tok, t, path, cap);
    return held;
}

/* The checkpoint of r against this run: the model, the tokenizer, the seed. */
static void check_same_model(const td_ckpt_reader *r, const td_gpt_config *cfg, const td_tokenizer *tok,
                             unsigned long long seed) {
    const td_manifest *m = &r->m;
    int got[5] = {m->layers, m->heads, m->embd, m->seq, m->vocab}, want[5] = {cfg->L, cfg->H, cfg->C, cfg->T, cfg->V};
    static const char *field[5] = {"--layers", "--heads", "--embd", "--seq", "the vocabulary size of --data"};
    for (int i = 0; i < 5; i++)
        TD_CHECK(got[i] == want[i], "--resume %s: the checkpoint is of another model: it has %s %d, this run %d",
                 r->dir, field[i], got[i], want[i]);
    td_gpt_config saved;
    td_ckpt_manifest_config(m, r->dir, &saved);
    TD_CHECK(saved.arch == cfg->arch && saved.KV == cfg->KV && saved.F == cfg->F && saved.tie == cfg->tie &&
                 saved.norm_eps == cfg->norm_eps && saved.rope_theta == cfg->rope_theta &&
                 memcmp(&saved.rope_scaling, &cfg->rope_scaling, sizeof saved.rope_scaling) == 0,
             "--resume %s: the checkpoint is of another model: it is --arch %s --kv-heads %d --ffn-hidden %d "
             "--tie-embeddings %s --norm-eps %g --rope-theta %g, this run --arch %s --kv-heads %d --ffn-hidden %d "
             "--tie-embeddings %s --norm-eps %g --rope-theta %g", r->dir, td_arch_name(saved.arch), saved.KV, saved.F,
             td_gpt_tied(&saved) ? "on" : "off", saved.norm_eps, saved.rope_theta, td_arch_name(cfg->arch), cfg->KV,
             cfg->F, td_gpt_tied(cfg) ? "on" : "off", cfg->norm_eps, cfg->rope_theta);
    /* the experts' architecture (the coefficients, --moe-aux-coef and the
     * like, are training settings a resume may change, as --lr) */
    const td_moe_config *a = &saved.moe, *b = &cfg->moe;
    char was[256], now[256];
    td_ckpt_moe_text(a, 0, was, sizeof was);
    td_ckpt_moe_text(b, 0, now, sizeof now);
    TD_CHECK(strcmp(was, now) == 0, "--resume %s: the checkpoint is of another model: it has %s, this run %s", r->dir,
             was, now);
    TD_CHECK(m->tok_kind == (int)tok->kind &&
                 (tok->kind != TD_TOK_CHAR ||
                  memcmp(m->chars, tok->chars, sizeof(uint32_t) * (size_t)tok->V) == 0) &&
                 (tok->kind != TD_TOK_HF || m->tok_xxh3 == tok->file_xxh3),
             "--resume %s: the checkpoint's tokenizer (%s) differs from this run's (--data, --tokenizer)", r->dir,
             td_tokenizer_name((td_tokenizer_kind)m->tok_kind));
    /* the data order of the steps to come depends on the seed; a step-0
     * checkpoint (an imported model) has no order to continue */
    TD_CHECK(m->seed == seed || m->step == 0, "--resume %s: the checkpoint was trained with --seed %llu, this run has --seed "
             "%llu; the data order depends on it", r->dir, (unsigned long long)m->seed, seed);
}

int td_ckpt_resume_check(const char *path, const td_gpt_config *cfg, const td_tokenizer *tok, unsigned long long seed) {
    td_ckpt_reader r;
    td_ckpt_reader_open(&r, path, "--resume");
    check_same_model(&r, cfg, tok, seed);
    td_ckpt_reader_open_shards(&r);
    int step = r.m.step;
    td_ckpt_reader_close(&r);
    return step;
}

void td_ckpt_resume(const td_ckpt_state *st, const char *path, td_ckpt_meta *meta) {
    td_dp *dp = st->dp;
    const td_grid *g = st->g;
    const td_param_table *t = st->t;
    const td_gpt_config *cfg = st->cfg;
    const td_tokenizer *tok = st->tok;
    double t0 = td_now_ms(), v0 = td_ckpt_verify_ms;
    size_t start = td_mem_total_current();
    td_mem_reset_peaks();
    td_ckpt_reader r;
    td_ckpt_reader_open(&r, path, "--resume");
    const td_manifest *m = &r.m;
    check_same_model(&r, cfg, tok, meta->seed);
    td_ckpt_resume_data_check(m, meta, r.dir, g->world_rank == 0);
    for (int s = 0; s < TD_MF_NSECTIONS; s++) {
        range_list l = {0, 0, NULL};
        if (!td_dp_ranges(dp, s, 0, add_range, &l)) { /* ps keeps no ranges: the rules table's ps-checkpoint */
            td_compat_cfg c;
            td_compat_cfg_init(&c);
            c.dp_mode = TD_DP_PS, c.resume = path;
            td_compat_check(&c, TD_COMPAT_AT_CKPT_LOAD);
            TD_ASSERT(0); /* a mode without ranges other than ps */
        }
        int read = td_ckpt_reader_fill(&r, t, s, l.r, l.n);
        TD_CHECK(read || s > 0, "%s/manifest.json: no tensor has a params piece", r.dir);
        if (!read && s == 1 && l.n > 0 && g->world_rank == 0) /* l.n 0: a forward-only run asks for none */
            td_log("resume: %s holds no AdamW moments (an imported model?); they start at zero\n", r.dir);
        td_free(l.r);
    }
    /* per-dp-rank state belongs to a dp rank, not to the model: it
     * reshards like the model (tp, pp, zero, precision) while dp stays */
    int saved = 0, dropped = 0, here = 0;
    for (int i = 0; i < m->n_tensors; i++)
        for (int k = 0; k < m->tensors[i].n_pieces; k++) saved |= m->tensors[i].pieces[k].section >= TD_MF_NSECTIONS;
    for (int k = 0; k < TD_DP_RANK_STATES; k++) {
        float *x = td_dp_rank_state(dp, k);
        if (!x) continue;
        here = 1;
        if (m->dp != g->axis[TD_DP].size || !fill_state(&r, g, t, k, x))
            dropped = 1; /* starts at zero, as in a fresh run */
    }
    meta->step = m->step;
    meta->run = m->run;
    td_loss_scaler *sc = &meta->scaler;
    if (sc->mode == (td_loss_scale_mode)m->ls_mode && sc->mode != TD_LOSS_SCALE_NONE) {
        sc->scale = m->ls_scale, sc->clean = m->ls_clean;
        sc->consecutive = m->ls_consecutive, sc->skipped = m->ls_skipped;
    }
    if (g->world_rank == 0) {
        if (saved && m->dp != g->axis[TD_DP].size)
            td_log("resume: dp changed from %d to %d: the checkpoint's per-dp-rank state (top-k "
                   "residuals, local "
                   "moments) belongs to its dp ranks and is dropped%s\n",
                   m->dp, g->axis[TD_DP].size, dropped ? "; this run's starts at zero" : "");
        else if (dropped)
            td_log("resume: %s holds no per-dp-rank state for this run's --grad-compress %s (saved with %s); it "
                   "starts at zero\n", r.dir, meta->grad_compress, m->grad_compress);
        else if (saved && !here)
            td_log("resume: this run keeps no per-dp-rank state (--grad-compress %s); the checkpoint's (%s) is "
                   "dropped\n", meta->grad_compress, m->grad_compress);
        char cp[24] = "", ep[24] = ""; /* named where they split something */
        if (m->cp > 1) snprintf(cp, sizeof cp, " cp %d", m->cp);
        if (m->ep > 1) snprintf(ep, sizeof ep, " ep %d", m->ep);
        td_log("resume: %s (step %d, saved under dp %d%s tp %d pp %d%s zero %d %s) in %.2f s (checksums verified in "
               "%.3f s); memory during the load: peak %.3f MiB, %.3f MiB at its start\n",
               r.dir, m->step, m->dp, cp, m->tp, m->pp, ep, m->zero, m->precision, (td_now_ms() - t0) / 1000.0,
               (td_ckpt_verify_ms - v0) / 1000.0, td_mem_total_peak() / 1048576.0, start / 1048576.0);
    }
    td_ckpt_reader_close(&r);
}
