/* loss_scale: the loss scaler of fp16 training (pure state, no MPI).
 *
 * The trainer multiplies the loss gradient (dloss) by `scale`, so small
 * gradients survive fp16's narrow range; the step pipeline (step.c) divides
 * the gradients by it again inside its norm pass, before clipping and AdamW.
 *
 *   none     scale 1, nothing changes (fp32 and bf16 runs)
 *   static   a fixed scale S; a non-finite gradient stops the run as with
 *            none (no step is skipped)
 *   dynamic  starts at 2^16; a step whose gradient holds a non-finite value
 *            on any rank is skipped on every rank and the scale halves; after
 *            `window` clean steps in a row it doubles (capped at 2^24). The
 *            run stops after TD_LOSS_SCALE_MAX_SKIPS skips in a row or when
 *            the scale falls below 1.
 *
 * Every rank runs the same updates from the same agreed overflow flag, so
 * the scale is identical everywhere without communicating it. Powers of two
 * keep the scaling exact in fp32: gradients scaled by 2^k and unscaled again
 * are bitwise those of an unscaled run unless a value under- or overflows. */
#ifndef TRIDENT_LOSS_SCALE_H
#define TRIDENT_LOSS_SCALE_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { TD_LOSS_SCALE_NONE = 0, TD_LOSS_SCALE_STATIC, TD_LOSS_SCALE_DYNAMIC } td_loss_scale_mode;

#define TD_LOSS_SCALE_INIT 65536.0f   /* 2^16, as PyTorch's GradScaler */
#define TD_LOSS_SCALE_MAX 16777216.0f /* 2^24: growth stops here */
#define TD_LOSS_SCALE_WINDOW 1000     /* clean steps before the scale doubles */
#define TD_LOSS_SCALE_MAX_SKIPS 10    /* skips in a row that stop the run */
#define TD_LOSS_SCALE_STATIC_MAX 4294967296.0 /* 2^32: a static --loss-scale's upper bound */

typedef struct {
    td_loss_scale_mode mode;
    float scale;     /* the current scale (1 under none) */
    int window;      /* clean steps before growth */
    int clean;       /* clean steps since the last change of the scale */
    int consecutive; /* skipped steps in a row (0 after a clean step) */
    int skipped;     /* skipped steps in all */
} td_loss_scaler;

/* --loss-scale auto|dynamic|none|S: auto is dynamic when fp16 is set, none
 * otherwise; S is a static scale in [1, 2^32]. A bad value is a user error
 * naming the flag. *value: the static scale (else unset). */
td_loss_scale_mode td_loss_scale_parse(const char *s, int fp16, float *value);
const char *td_loss_scale_mode_name(td_loss_scale_mode m);
/* The growth window: TRIDENT_LOSS_SCALE_WINDOW (a test switch: a positive
 * integer, else a user error naming it) or TD_LOSS_SCALE_WINDOW. */
int td_loss_scale_window_env(void);

/* init: the starting scale of static and dynamic (ignored under none). */
void td_loss_scaler_init(td_loss_scaler *s, td_loss_scale_mode mode, float init, int window);
/* Whether a step with a non-finite gradient is skipped (dynamic) rather
 * than stopping the run. */
int td_loss_scaler_skips(const td_loss_scaler *s);

enum { TD_LOSS_SCALE_OK = 0, TD_LOSS_SCALE_TOO_MANY_SKIPS, TD_LOSS_SCALE_BELOW_ONE };
/* After a step every rank agrees on: overflow = 1 backs off (dynamic only),
 * 0 counts a clean step and grows the scale at the window. Returns OK or
 * why the run must stop. */
int td_loss_scaler_update(td_loss_scaler *s, int overflow);

#ifdef __cplusplus
}
#endif

#endif
