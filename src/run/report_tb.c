/* --tensorboard: the report's values under TensorBoard's tags (report.h).
 * Called where --log writes the same numbers, so the two agree by
 * construction; the file itself is tensorboard.c's. */
#include <string.h>

#include "report.h"
#include "trident/base.h"

void td_report_tb_open(td_report *r) {
    const char *dir = r->spec->output.tensorboard;
    char why[512];
    r->tb = td_alloc(sizeof *r->tb, TD_MEM_OTHER);
    TD_CHECK(td_tensorboard_open(r->tb, dir, why, sizeof why) == 0, "--tensorboard %s: %s", dir, why);
    snprintf(r->tb_file, sizeof r->tb_file, "%s", r->tb->path);
}

void td_report_resumed(td_report *r, int step) {
    if (r->tb && r->spec->output.resume) td_tensorboard_start(r->tb, step);
}

void td_report_tb_step(td_report *r, int step, float loss, float lr, double norm, double ms, double tps,
                       double mfu) {
    td_tensorboard *tb = r->tb;
    if (!tb) return;
    td_tensorboard_begin(tb, step);
    td_tensorboard_scalar(tb, "train/loss", loss);
    td_tensorboard_scalar(tb, "train/lr", lr);
    td_tensorboard_scalar(tb, "train/grad_norm", norm);
    if (r->loss_scale > 0) td_tensorboard_scalar(tb, "train/loss_scale", r->loss_scale);
    td_tensorboard_scalar(tb, "perf/step_ms", ms);
    td_tensorboard_scalar(tb, "perf/tokens_per_s", tps);
    td_tensorboard_scalar(tb, "perf/mfu", mfu);
    if (r->moe) {
        td_tensorboard_scalar(tb, "moe/aux", r->moe->moe_aux);
        td_tensorboard_scalar(tb, "moe/z", r->moe->moe_z);
        td_tensorboard_scalar(tb, "moe/load_min", r->moe->moe_load_min);
        td_tensorboard_scalar(tb, "moe/load_max", r->moe->moe_load_max);
        td_tensorboard_scalar(tb, "moe/dropped", r->moe->moe_dropped);
    }
    td_tensorboard_end(tb);
}

void td_report_tb_scalars(td_report *r, int step, int n, const char *const *tags, const double *values) {
    if (!r->tb) return;
    td_tensorboard_begin(r->tb, step);
    for (int i = 0; i < n; i++) td_tensorboard_scalar(r->tb, tags[i], values[i]);
    td_tensorboard_end(r->tb);
}

void td_report_tb_memory(td_report *r, const uint64_t *peaks, int W) {
    if (!r->tb || r->last_step < 0) return;
    td_tensorboard_begin(r->tb, r->last_step);
    for (int c = 0; c < TD_MEM_NCAT; c++) {
        uint64_t hi = 0;
        for (int w = 0; w < W; w++)
            if (peaks[w * TD_MEM_NCAT + c] > hi) hi = peaks[w * TD_MEM_NCAT + c];
        char tag[64];
        snprintf(tag, sizeof tag, "mem/%s_peak", td_mem_cat_name(c));
        td_tensorboard_scalar(r->tb, tag, (double)hi);
    }
    td_tensorboard_end(r->tb);
}

void td_report_io_msg(const td_report *r, char *msg, size_t cap) {
    int tb = r->tb ? r->tb->err : r->tb_err;
    if (r->log_err)
        snprintf(msg, cap, "--log %s: writing it failed: %s", r->spec->output.log, strerror(r->log_err));
    else if (tb)
        snprintf(msg, cap, "--tensorboard %s: writing %s failed: %s", r->spec->output.tensorboard, r->tb_file,
                 strerror(tb));
    else if (cap)
        msg[0] = 0;
}

void td_report_tb_close(td_report *r) {
    if (!r->tb) return;
    r->tb_err = td_tensorboard_close(r->tb);
    td_free(r->tb);
    r->tb = NULL;
}
