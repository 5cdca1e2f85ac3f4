/* Model-state bytes per data-parallel rank by ZeRO stage (state_plan.h):
 * the sharding strategy's arithmetic, so it lives with ZeRO rather than in
 * the model, which knows only tensors and their sizes. */
#include "trident/state_plan.h"

td_state_elem td_state_elem_engine(int master) {
    td_state_elem e = {4, 4, 0, 8};
    if (master) e.param = 0, e.master = 4;
    return e;
}

td_state_elem td_state_elem_mixed(void) {
    td_state_elem e = {2, 2, 4, 8};
    return e;
}

td_state_bytes td_state_plan(double numel, int D, int zero, td_state_elem e) {
    double shard = numel / D;
    td_state_bytes b;
    b.optim = e.optim * (zero >= 1 ? shard : numel);
    b.master = e.master * (zero >= 1 ? shard : numel);
    b.grads = e.grad * (zero >= 2 ? shard : numel);
    b.params = e.param * (zero >= 3 ? shard : numel);
    return b;
}
