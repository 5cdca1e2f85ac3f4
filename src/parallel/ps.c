/* Parameter server: placeholder until implemented. */
#include "dp_internal.h"

void td_ps_create(td_dp *dp) { td_fail("--dp-mode ps is not implemented yet"); }
void td_ps_destroy(td_dp *dp) {}
void td_ps_begin_step(td_dp *dp, int step) {}
double td_ps_finish_step(td_dp *dp, int step, float lr) { return 0; }
void td_ps_serve(td_dp *dp, int steps) {}
void td_ps_gather_state(td_dp *dp, float *params, float *m, float *v) {}
void td_ps_plan(const td_dp_config *cfg, const td_grid *g, const td_param_table *t, td_mem_plan *p) {}
void td_ps_staleness(const td_dp *dp, int *max_seen, double *mean_seen) { *max_seen = 0; *mean_seen = 0; }
