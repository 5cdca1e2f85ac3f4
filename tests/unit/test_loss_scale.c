/* The loss scaler's state machine (loss_scale.h) without MPI, against the
 * issue's rules written out here: start 2^16, x0.5 on an overflow, x2 after
 * `window` clean steps in a row (an overflow restarts the count), growth
 * capped at 2^24, stop after 10 skips in a row or below 1; static and none
 * never change. Scales are powers of two: compared exactly. */
#include <stdio.h>
#include <string.h>

#include "trident/loss_scale.h"

static int fails;
#define CHECK(c, ...)                                  \
    do {                                               \
        if (!(c)) {                                    \
            printf("FAIL line %d: ", __LINE__);        \
            printf(__VA_ARGS__);                       \
            printf("\n");                              \
            fails++;                                   \
        }                                              \
    } while (0)

int main(void) {
    float v = 0;
    CHECK(td_loss_scale_parse("auto", 0, &v) == TD_LOSS_SCALE_NONE, "auto without fp16 is none");
    CHECK(td_loss_scale_parse("auto", 1, &v) == TD_LOSS_SCALE_DYNAMIC, "auto with fp16 is dynamic");
    CHECK(td_loss_scale_parse("none", 1, &v) == TD_LOSS_SCALE_NONE, "none");
    CHECK(td_loss_scale_parse("dynamic", 0, &v) == TD_LOSS_SCALE_DYNAMIC, "dynamic");
    CHECK(td_loss_scale_parse("1024", 0, &v) == TD_LOSS_SCALE_STATIC && v == 1024.0f, "static 1024: %g", v);

    /* growth: window 3, 10 clean steps -> 3 doublings */
    td_loss_scaler s;
    td_loss_scaler_init(&s, TD_LOSS_SCALE_DYNAMIC, TD_LOSS_SCALE_INIT, 3);
    CHECK(s.scale == 65536.0f, "initial %g", s.scale);
    for (int i = 0; i < 10; i++) CHECK(td_loss_scaler_update(&s, 0) == TD_LOSS_SCALE_OK, "clean step");
    CHECK(s.scale == 65536.0f * 8, "after 10 clean steps at window 3: %g, want %g", s.scale, 65536.0f * 8);
    /* an overflow halves and restarts the window: 2 clean steps do not grow */
    CHECK(td_loss_scaler_update(&s, 1) == TD_LOSS_SCALE_OK, "one skip");
    CHECK(s.scale == 65536.0f * 4 && s.skipped == 1 && s.consecutive == 1, "after a skip: %g", s.scale);
    td_loss_scaler_update(&s, 0);
    td_loss_scaler_update(&s, 0);
    CHECK(s.scale == 65536.0f * 4, "2 clean steps after a skip at window 3: %g", s.scale);
    td_loss_scaler_update(&s, 0);
    CHECK(s.scale == 65536.0f * 8 && s.consecutive == 0, "3rd clean step grows: %g", s.scale);
    /* the cap */
    td_loss_scaler_init(&s, TD_LOSS_SCALE_DYNAMIC, TD_LOSS_SCALE_MAX, 1);
    td_loss_scaler_update(&s, 0);
    CHECK(s.scale == TD_LOSS_SCALE_MAX, "growth past the cap: %g", s.scale);
    /* 10 skips in a row stop; 9 do not */
    td_loss_scaler_init(&s, TD_LOSS_SCALE_DYNAMIC, TD_LOSS_SCALE_INIT, 1000);
    for (int i = 0; i < 9; i++) CHECK(td_loss_scaler_update(&s, 1) == TD_LOSS_SCALE_OK, "skip %d", i + 1);
    CHECK(td_loss_scaler_update(&s, 1) == TD_LOSS_SCALE_TOO_MANY_SKIPS, "the 10th skip in a row stops");
    CHECK(s.scale == 64.0f && s.skipped == 10, "after 10 skips: %g, %d", s.scale, s.skipped);
    /* a clean step in between restarts the count */
    td_loss_scaler_init(&s, TD_LOSS_SCALE_DYNAMIC, TD_LOSS_SCALE_INIT, 1000);
    for (int i = 0; i < 9; i++) td_loss_scaler_update(&s, 1);
    td_loss_scaler_update(&s, 0);
    CHECK(td_loss_scaler_update(&s, 1) == TD_LOSS_SCALE_OK && s.skipped == 10, "9 + clean + 1 skips go on");
    /* below 1 */
    td_loss_scaler_init(&s, TD_LOSS_SCALE_DYNAMIC, 2.0f, 1000);
    CHECK(td_loss_scaler_update(&s, 1) == TD_LOSS_SCALE_OK && s.scale == 1.0f, "2 -> 1 goes on");
    CHECK(td_loss_scaler_update(&s, 1) == TD_LOSS_SCALE_BELOW_ONE && s.scale == 0.5f, "1 -> 0.5 stops");
    /* static and none never change nor skip */
    td_loss_scaler_init(&s, TD_LOSS_SCALE_STATIC, 1024.0f, 1);
    td_loss_scaler_update(&s, 0);
    CHECK(td_loss_scaler_update(&s, 1) == TD_LOSS_SCALE_OK && s.scale == 1024.0f && !td_loss_scaler_skips(&s),
          "static: %g", s.scale);
    td_loss_scaler_init(&s, TD_LOSS_SCALE_NONE, 1024.0f, 1);
    CHECK(s.scale == 1.0f && !td_loss_scaler_skips(&s), "none: %g", s.scale);
    if (fails) {
        printf("loss scaler: %d checks failed\n", fails);
        return 1;
    }
    printf("loss scaler: all checks passed\n");
    return 0;
}
