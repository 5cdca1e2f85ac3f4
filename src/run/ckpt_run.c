/* Checkpoints from the trainer's side (ckpt_run.h). */
#include <string.h>

#include "ckpt_run.h"
#include "trident/base.h"
#include "trident/comm.h"
#include "trident/pipeline.h"
#include "trident/stop.h"

/* The id of the run this process trains: one run per td_run_train, which
 * sets it at its start (td_run_id_start) or from the checkpoint it resumes.
 * (A run object will hold it; until then it is this module's.) */
static uint64_t g_run_id;
/* the run's data (td_run_set_data), likewise */
static const char *g_data_path;
static td_data_fingerprint g_data_fp;

void td_run_set_data(const char *path, const td_data_fingerprint *fp) {
    g_data_path = path;
    g_data_fp = *fp;
}

void td_run_id_start(const td_grid *g) {
    /* world rank 0's random id, in four exact 16-bit halves of floats */
    float part[4] = {0, 0, 0, 0};
    uint64_t id = 0;
    if (g->world_rank == 0) {
        id = td_random_id();
        for (int k = 0; k < 4; k++) part[k] = (float)((id >> (16 * k)) & 0xffff);
    }
    if (td_comm_size(g->world) > 1) td_allreduce(g->world, part, 4, TD_F32, TD_MAX);
    id = 0;
    for (int k = 0; k < 4; k++) id |= (uint64_t)part[k] << (16 * k);
    g_run_id = id;
}

void td_run_ckpt_meta(const td_run_spec *spec, const td_grid *g, const td_loss_scaler *s,
                      int steps_done, td_ckpt_meta *m) {
    td_ckpt_meta_default(m, steps_done);
    m->run = g_run_id;
    m->seed = spec->schedule.seed;
    m->scaler = *s;
    m->dp = g->axis[TD_DP].size, m->cp = g->axis[TD_CP].size, m->tp = g->axis[TD_TP].size,
    m->pp = g->axis[TD_PP].size, m->zero = spec->layout.zero;
    m->ranks = td_grid_workers(g);
    m->precision = td_precision_name(spec->precision.precision);
    m->dp_mode = td_dp_mode_name(spec->layout.dp_mode);
    m->grad_compress = spec->layout.grad_compress ? spec->layout.grad_compress : "none";
    m->keep = spec->output.keep;
    m->data_path = g_data_path;
    m->data_bytes = g_data_fp.bytes, m->data_xxh3 = g_data_fp.xxh3;
    m->strict_data = spec->data.strict;
    m->batch = spec->schedule.batch;
    m->run_config = spec->output.run_config;
}

/* --resume: the state of a checkpoint in this layout; returns the step to
 * continue at (0 without --resume). */
void td_run_resume_check(const td_run_spec *spec, const td_gpt_config *cfg,
                         const td_tokenizer *tok) {
    if (!spec->output.resume) return;
    int step = td_ckpt_resume_check(
        strcmp(spec->output.resume, "latest") == 0 ? spec->output.out : spec->output.resume, cfg,
        tok, spec->schedule.seed);
    TD_CHECK(step < spec->schedule.steps,
             "--resume %s: the checkpoint is at step %d, and --steps %d leaves nothing to "
             "train; pass a larger --steps",
             spec->output.resume, step, spec->schedule.steps);
    TD_CHECK(spec->schedule.stop_after == 0 || spec->schedule.stop_after >= step,
             "--stop-after %d: the checkpoint is already at "
             "step %d (--stop-after counts from step 0; at the checkpoint's step, it is saved "
             "again in this layout)",
             spec->schedule.stop_after, step);
}

int td_run_resume(td_run *r) {
    const td_run_spec *spec = r->spec;
    td_dp *dp = r->dp;
    const td_grid *g = &r->g;
    const td_param_table *t = &r->table;
    const td_gpt_config *cfg = &r->cfg;
    const td_tokenizer *tok = &r->data.tok;
    td_loss_scaler *scaler = &r->scaler;
    if (!spec->output.resume) return 0;
    td_ckpt_meta meta;
    td_run_ckpt_meta(spec, g, scaler, 0, &meta);
    td_ckpt_state st = {dp, g, t, cfg, tok};
    td_ckpt_resume(
        &st, strcmp(spec->output.resume, "latest") == 0 ? spec->output.out : spec->output.resume,
        &meta);
    TD_ASSERT(meta.step < spec->schedule.steps); /* td_run_resume_check, in td_preflight */
    *scaler = meta.scaler;
    g_run_id = meta.run; /* a resumed run goes on as the same run */
    return meta.step;
}

/* Parameter servers hold the state in their own loop: world rank 0 gathers
 * one unit at a time (no rank holds the state twice) and writes one shard. */
static size_t save_gathered(const td_run *r, const td_ckpt_meta *meta, char *path, size_t cap) {
    td_dp *dp = r->dp;
    const td_grid *g = &r->g;
    const td_param_table *t = &r->table, *canon = &r->canon;
    const char *out = r->spec->output.out;
    size_t scratch_n = td_pp_gather_scratch_floats(t, canon);
    float *scratch = td_alloc(scratch_n * sizeof(float), TD_MEM_OTHER);
    td_ckpt_writer *w = g->world_rank == 0 ? td_ckpt_writer_open(out, &r->cfg, &r->data.tok, meta->step, 1) : NULL;
    if (w) td_ckpt_writer_meta(w, meta);
    for (int s = 0; s < 3; s++)
        for (int u = 0; u < t->n_units; u++) {
            const td_param_table *in;
            const float *b = td_pp_gather_unit(dp, g, t, canon, s, u, scratch, &in);
            if (w) td_ckpt_writer_put(w, s, in, u, b);
        }
    if (w) td_ckpt_writer_commit(w, path, cap);
    td_free(scratch);
    return scratch_n * sizeof(float) + td_ckpt_writer_bookkeeping(t->n_rows);
}

void td_run_save(const td_run *r, int steps_done, int measure) {
    td_dp *dp = r->dp;
    const td_grid *g = &r->g;
    const td_param_table *t = &r->table;
    const td_gpt_config *cfg = &r->cfg;
    const td_tokenizer *tok = &r->data.tok;
    const td_run_spec *spec = r->spec;
    const td_loss_scaler *sc = &r->scaler;
    const td_mem_plan *plan = &r->plan;
    td_run_result *res = r->res;
    size_t plan_total = 0, start = td_mem_total_current(), extra = 0;
    for (int c = 0; c < TD_MEM_NCAT; c++) plan_total += plan->bytes[c];
    if (measure) td_mem_reset_peaks(); /* after the run's own peaks were taken */
    td_ckpt_meta meta;
    td_run_ckpt_meta(spec, g, sc, steps_done, &meta);
    char path[8192] = "";
    double h0, h1;
    td_ckpt_checksum_ms(&h0, NULL);
    double t0 = td_now_ms();
    int sharded = spec->layout.dp_mode != TD_DP_PS;
    td_ckpt_state state = {dp, g, t, cfg, tok};
    if (sharded)
        extra = td_ckpt_save_sharded(&state, spec->output.out, &meta, path, sizeof path);
    else
        extra = save_gathered(r, &meta, path, sizeof path);
    double secs = (td_now_ms() - t0) / 1000.0, t1 = td_now_ms();
    td_ckpt_checksum_ms(&h1, NULL);
    double hash_s = (h1 - h0) / 1000.0; /* this rank's (rank 0's, printed) */
    int removed =
        g->world_rank == 0 ? td_ckpt_prune(spec->output.out, steps_done, spec->output.keep) : 0;
    char pruned[96] = "";
    if (removed > 0)
        snprintf(pruned, sizeof pruned, "; --keep %d removed %d older in %.2f s", spec->output.keep,
                 removed, (td_now_ms() - t1) / 1000.0);
    if (!measure) {
        td_log("checkpoint: %s (step %d, %.2f s, checksums %.3f s%s)\n", path, steps_done, secs, hash_s, pruned);
        return;
    }
    res->save_peak = td_mem_total_peak();
    res->save_start = start;
    res->save_plan = plan_total;
    /* gathered: one unit (with tp its slices and assembly); sharded: no
     * copy of the state, only the list of its pieces */
    res->save_unit = extra;
    td_log("checkpoint: %s (%zu parameters, step %d, %s, %.2f s, checksums %.3f s%s); memory during the save: "
           "peak %.3f MiB, %.3f MiB at its start, plan %.3f MiB + %s %.3f MiB\n",
           path, t->n_global, steps_done, sharded ? "one shard per rank" : "gathered to rank 0", secs, hash_s, pruned,
           res->save_peak / 1048576.0, start / 1048576.0, plan_total / 1048576.0,
           sharded ? "piece list" : "one unit and piece list", extra / 1048576.0);
}

int td_stop_agreed(const td_grid *g, int io_failed) {
    /* stoppable runs have no parameter servers: the world is the workers */
    TD_ASSERT(g->n_servers == 0);
    float x[2] = {td_stop_signal() ? 1.0f : 0.0f, io_failed ? 1.0f : 0.0f};
    if (td_comm_size(g->world) > 1) td_allreduce(g->world, x, 2, TD_F32, TD_MAX);
    return (x[0] > 0.0f ? TD_STOP_SIGNAL : 0) | (x[1] > 0.0f ? TD_STOP_IO : 0);
}
