/* Shared by the CUDA module's files (src/cuda/, CUDA C++): the stream every op
 * and copy is queued on, error checks that end the process through
 * trident's error exit, and the rows' entry points. Compiled as CUDA C++
 * by nvcc; nothing here is seen by trident itself (cuda_module.h is the
 * seam). */
#ifndef TD_CUDA_INTERNAL_H
#define TD_CUDA_INTERNAL_H

#include <cuda_runtime_api.h>

#include "trident/backend.h"
#include "trident/cuda_module.h"

/* The one compute stream (backend.h: everything queued in call order). */
extern cudaStream_t td_cu_stream;

/* One error line through the host's td_fail: "CUDA: <what>: <CUDA's
 * words> (<code>) at file:line". */
[[noreturn]] void td_cu_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void td_cu_check_at(cudaError_t e, const char *what, const char *file, int line);
#define TD_CU(call) td_cu_check_at((call), #call, __FILE__, __LINE__)
/* After a kernel launch: a bad configuration shows here. */
#define TD_CU_LAUNCHED(name) td_cu_check_at(cudaGetLastError(), name, __FILE__, __LINE__)

/* Device scratch for the GEMMs (cuBLASLt's workspace), allocated at open. */
void *td_cu_alloc_counted(size_t bytes, td_mem_cat cat, const char *name);

/* cuda_gemm.cu: the handle, workspace and per-shape plans; the rows' GEMMs. */
void td_cu_gemm_init(void);
void td_cu_mm_fwd(td_ktype k, void *out, td_ktype out_type, const void *inp, const void *w,
                  const float *bias, int N, int C, int OC);
void td_cu_mm_bwd(td_ktype k, void *dinp, td_ktype dinp_type, float *dw, float *dbias,
                  const void *dout, const void *inp, const void *w, int N, int C, int OC);

/* cuda_ops.cu: the backend's rows. */
const td_ops *td_cu_ops(td_ktype k);

/* Launch shape of the elementwise kernels: fixed (never from the device's
 * properties), so that every reduction's order, and so its bits, is the
 * same on every GPU. */
#define TD_CU_THREADS 256

/* An element of a row's type to fp32 and back (round to nearest even, as
 * the CPU's td_bf16_from_float and td_f16_from_float round). */
#ifdef __CUDACC__
#include <cuda_bf16.h>
#include <cuda_fp16.h>
template <typename T> __device__ __forceinline__ float to_f(T x);
template <> __device__ __forceinline__ float to_f<float>(float x) { return x; }
template <> __device__ __forceinline__ float to_f<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }
template <> __device__ __forceinline__ float to_f<__half>(__half x) { return __half2float(x); }
template <typename T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ float from_f<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <> __device__ __forceinline__ __half from_f<__half>(float x) { return __float2half_rn(x); }
#endif

#endif
