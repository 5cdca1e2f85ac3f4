/* The compute side of `plan --calibrate`: rates of the engine's own kernels
 * on this machine, as the trainer runs them (operands streamed from memory,
 * not cache-resident), for the planner's `local` cluster. */
#ifndef TRIDENT_TRAIN_CALIBRATE_RATES_H
#define TRIDENT_TRAIN_CALIBRATE_RATES_H

#include <stddef.h>

/* Bytes read + written per second by `threads` threads side by side, each
 * copying its own `bytes`, GB/s. */
double td_calib_copy_gbs(int threads, size_t bytes);
/* The engine's linear layer (td_matmul_forward, then td_matmul_backward:
 * the input and weight gradients) on n x n x n products, on `threads`
 * threads side by side as ranks run (each single-threaded, its own
 * layers), cycling through enough layers that the operands come from
 * memory as a model's do: GFLOP/s of all threads (6 n^3 per layer). */
double td_calib_linear_gflops(int threads, int n);
/* The engine's optimizer step per element (the sum of squares of the gradients,
 * then td_adamw_update_on) over a ~100 MB state per thread, `threads` side by side:
 * millions of elements per second of all threads. */
double td_calib_optimizer_melems(int threads);

#endif
