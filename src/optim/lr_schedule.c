/* The learning-rate schedules (optim.h): one pure function of the config
 * and the step, so every layout and a resume compute the same lr. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/base.h"
#include "trident/optim.h"

static const char *const schedule_names[] = {"cosine", "linear", "wsd", "constant", "inverse-sqrt"};
static const char *const shape_names[] = {"linear", "cosine", "1-sqrt"};

static int find(const char *const *names, int n, const char *name) {
    for (int i = 0; name && i < n; i++)
        if (strcmp(names[i], name) == 0) return i;
    return -1;
}

int td_lr_schedule_parse(const char *name) { return find(schedule_names, 5, name); }
const char *td_lr_schedule_name(td_lr_schedule s) { return (unsigned)s < 5 ? schedule_names[s] : "?"; }
int td_lr_decay_shape_parse(const char *name) { return find(shape_names, 3, name); }
const char *td_lr_decay_shape_name(td_lr_decay_shape d) { return (unsigned)d < 3 ? shape_names[d] : "?"; }

int td_lr_wsd_decay_start(const td_optim_config *o) {
    /* rounded, not truncated: 0.7f x 10 is 6.9999998 */
    int decay = (int)floor((double)o->decay_fraction * o->max_steps + 0.5);
    int start = o->max_steps - decay;
    return start > o->warmup ? start : o->warmup;
}

/* The decay's factor over its fraction p in [0, 1]: 1 at p = 0, 0 at 1. */
static double decay_factor(td_lr_decay_shape shape, double p) {
    switch (shape) {
    case TD_DECAY_COSINE: return 0.5 * (1.0 + cos(M_PI * p));
    case TD_DECAY_1_SQRT: return 1.0 - sqrt(p);
    case TD_DECAY_LINEAR: break;
    }
    return 1.0 - p;
}

float td_lr_at(const td_optim_config *o, int step) {
    /* the float expressions of the cosine schedule before the others came,
     * kept so that its runs keep their bits */
    if (step < o->warmup) return o->lr * (float)(step + 1) / (float)(o->warmup + 1);
    switch (o->schedule) {
    case TD_LR_CONSTANT: return o->lr;
    case TD_LR_INVERSE_SQRT: {
        double v = o->lr * sqrt((double)(o->warmup + 1) / (double)(step + 1));
        return v > o->min_lr ? (float)v : o->min_lr;
    }
    case TD_LR_WSD: {
        if (step >= o->max_steps) return o->min_lr;
        int start = td_lr_wsd_decay_start(o);
        if (step < start) return o->lr;
        double p = (double)(step - start) / (double)(o->max_steps - start);
        return (float)(o->min_lr + decay_factor(o->decay_shape, p) * (o->lr - o->min_lr));
    }
    case TD_LR_COSINE:
    case TD_LR_LINEAR: break;
    }
    if (step >= o->max_steps) return o->min_lr;
    double p = (double)(step - o->warmup) / (double)(o->max_steps - o->warmup);
    td_lr_decay_shape shape = o->schedule == TD_LR_LINEAR ? TD_DECAY_LINEAR : TD_DECAY_COSINE;
    return (float)(o->min_lr + decay_factor(shape, p) * (o->lr - o->min_lr));
}

/* Megatron's RampupBatchsizeNumMicroBatchesCalculator: the batch steps up by
 * increment every samples / increments consumed samples. */
static double per_increment(const td_batch_rampup *r, int full) {
    return (double)r->samples / ((full - r->start) / r->increment);
}
static int batch_for_consumed(const td_batch_rampup *r, int full, long long consumed) {
    if (r->start <= 0 || r->start >= full || consumed > r->samples) return full;
    long long k = (long long)((double)consumed / per_increment(r, full));
    long long b = r->start + k * r->increment;
    return b < full ? (int)b : full;
}

/* Walks the steps from 0, a level of the ramp at a time: the steps well
 * inside a level (n of them, one step's margin before the level's end) are
 * skipped at once, the ones near its end taken singly, so a step costs
 * O(levels + step / (steps per level)) and not O(step). */
int td_batch_at(const td_batch_rampup *r, int full, int step) {
    long long consumed = 0, s = 0;
    for (;;) {
        int b = batch_for_consumed(r, full, consumed);
        if (b == full) return full; /* the ramp is over: every later step is full */
        if (s == step) return b;
        double per = per_increment(r, full), k = floor((double)consumed / per);
        double end = fmin((k + 1) * per, (double)r->samples + 1);
        long long n = (long long)((end - (double)consumed) / b) - 1; /* steps s .. s + n - 1 are at b */
        if (n > 1) {
            if (step < s + n) return b;
            consumed += n * b, s += n;
        } else {
            consumed += b, s++;
        }
    }
}

int td_batch_rampup_parse(const char *text, int full, td_batch_rampup *r, char *why, size_t n) {
    long long v[3];
    const char *p = text;
    for (int i = 0; i < 3; i++) {
        char *end;
        v[i] = strtoll(p, &end, 10);
        if (end == p || v[i] <= 0 || v[i] > 2147483647LL || *end != (i < 2 ? ':' : 0)) {
            snprintf(why, n, "not three positive integers START:INCREMENT:SAMPLES");
            return -1;
        }
        p = end + 1;
    }
    if (v[0] > full) {
        snprintf(why, n, "START %lld is above --batch %d", v[0], full);
        return -1;
    }
    if ((full - v[0]) % v[1] != 0) {
        snprintf(why, n, "--batch %d - START %lld is not a multiple of INCREMENT %lld", full, v[0], v[1]);
        return -1;
    }
    *r = (td_batch_rampup){(int)v[0], (int)v[1], v[2]};
    return 0;
}
