/* ZeRO stages 1-3: placeholder until the ZeRO issue's implementation lands. */
#include "dp_internal.h"

void td_zero_create(td_dp *dp) { td_fail("--zero %d is not implemented yet", dp->cfg.zero); }
void td_zero_destroy(td_dp *dp) {}
void td_zero_hook(void *ctx, td_unit_event ev, int unit) {}
double td_zero_finish_step(td_dp *dp, int step, float lr) { return 0; }
void td_zero_gather_state(td_dp *dp, float *params, float *m, float *v) {}
void td_zero_plan(const td_dp_config *cfg, const td_param_table *t, int D, td_mem_plan *p) {}
