/* The loss scaler (loss_scale.h): parse, growth and back-off. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "trident/base.h"
#include "trident/loss_scale.h"

td_loss_scale_mode td_loss_scale_parse(const char *s, int fp16, float *value) {
    if (strcmp(s, "auto") == 0) return fp16 ? TD_LOSS_SCALE_DYNAMIC : TD_LOSS_SCALE_NONE;
    if (strcmp(s, "dynamic") == 0) return TD_LOSS_SCALE_DYNAMIC;
    if (strcmp(s, "none") == 0) return TD_LOSS_SCALE_NONE;
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    int ok = end != s && *end == 0 && errno == 0 && isfinite(v) && v >= 1.0 && v <= TD_LOSS_SCALE_STATIC_MAX;
    TD_CHECK(ok, "--loss-scale %s is not valid; use auto, dynamic, none or a static scale S with "
                 "1 <= S <= 4294967296 (a power of two keeps the scaling exact, e.g. 1024)", s);
    *value = (float)v;
    return TD_LOSS_SCALE_STATIC;
}

const char *td_loss_scale_mode_name(td_loss_scale_mode m) {
    return m == TD_LOSS_SCALE_DYNAMIC ? "dynamic" : m == TD_LOSS_SCALE_STATIC ? "static" : "none";
}

int td_loss_scale_window_env(void) {
    const char *s = getenv("TRIDENT_LOSS_SCALE_WINDOW");
    if (!s || !*s) return TD_LOSS_SCALE_WINDOW;
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    TD_CHECK(end != s && *end == 0 && errno == 0 && v >= 1 && v <= 1000000000,
             "TRIDENT_LOSS_SCALE_WINDOW=%s is not valid; use an integer in [1, 1000000000] "
             "(clean steps before the dynamic loss scale doubles; default %d)", s, TD_LOSS_SCALE_WINDOW);
    return (int)v;
}

void td_loss_scaler_init(td_loss_scaler *s, td_loss_scale_mode mode, float init, int window) {
    memset(s, 0, sizeof *s);
    s->mode = mode;
    s->scale = mode == TD_LOSS_SCALE_NONE ? 1.0f : init;
    s->window = window;
}

int td_loss_scaler_skips(const td_loss_scaler *s) { return s->mode == TD_LOSS_SCALE_DYNAMIC; }

int td_loss_scaler_update(td_loss_scaler *s, int overflow) {
    if (s->mode != TD_LOSS_SCALE_DYNAMIC) return TD_LOSS_SCALE_OK;
    if (overflow) {
        s->scale *= 0.5f;
        s->clean = 0;
        s->consecutive++;
        s->skipped++;
        if (s->scale < 1.0f) return TD_LOSS_SCALE_BELOW_ONE;
        if (s->consecutive >= TD_LOSS_SCALE_MAX_SKIPS) return TD_LOSS_SCALE_TOO_MANY_SKIPS;
        return TD_LOSS_SCALE_OK;
    }
    s->consecutive = 0;
    if (++s->clean >= s->window) {
        s->clean = 0;
        /* past 2^24 a larger scale only brings fp16 closer to overflow */
        if (s->scale * 2.0f <= TD_LOSS_SCALE_MAX) s->scale *= 2.0f;
    }
    return TD_LOSS_SCALE_OK;
}
