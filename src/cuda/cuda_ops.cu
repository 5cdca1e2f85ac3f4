/* The CUDA backend's rows (backend.h's td_ops): so far the GEMMs
 * (cuda_gemm.cu), the casts, GELU, the residual, LayerNorm and RMSNorm
 * forward and backward, SwiGLU forward and backward, RoPE, the embedding's and
 * the positions' forward, and the fp32 range operations (fill, scale, add,
 * sum, sum of squares, the non-finite check, AdamW).
 * The other entries are NULL, so trident refuses --device cuda for a run
 * (src/backend/cuda_load.c) and tests/gpu/test_cuda_ops.c checks only
 * these (docs/cuda.md).
 *
 * Each op is the CPU kernel's arithmetic in fp32 on widened inputs, its
 * outputs rounded to the row's type, as src/kernels/lowp_ops.c does on the
 * CPU. Deterministic: no atomics; every reduction is a fixed tree over a
 * fixed block of TD_CU_THREADS (never sized from the device), or one
 * thread's loop in index order. nvcc contracts a*b+c into FMAs (the CPU
 * build does not), so elementwise results differ from the CPU's by an ulp
 * or so: the op check's tolerances allow for it.
 *
 * COMPILED, NEVER RUN ON A GPU (docs/cuda.md). */
#include <math.h>
#include <stdlib.h>

#include "cuda_internal.h"

#define GELU_S 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_A 0.044715f
#define LN_EPS 1e-5f

/* Grid of a grid-stride loop over n elements. */
static unsigned grid(size_t n) {
    size_t b = (n + TD_CU_THREADS - 1) / TD_CU_THREADS;
    return (unsigned)(b < 65536 ? (b ? b : 1) : 65536);
}
#define FOR_EACH(i, n)                                                                             \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)
#define LAUNCH(kernel, n, ...)                                                                     \
    do {                                                                                           \
        kernel<<<grid(n), TD_CU_THREADS, 0, td_cu_stream>>>(__VA_ARGS__);                         \
        TD_CU_LAUNCHED(#kernel);                                                                   \
    } while (0)

/* ---- elementwise --------------------------------------------------------- */

template <typename T> __global__ void k_round(T *dst, const float *src, size_t n) {
    FOR_EACH(i, n) dst[i] = from_f<T>(src[i]);
}
template <typename T> __global__ void k_widen(float *dst, const T *src, size_t n) {
    FOR_EACH(i, n) dst[i] = to_f<T>(src[i]);
}

/* src/kernels/elementwise.c's form: x sigmoid(2u), u = S (x + A x^3). */
template <typename T> __global__ void k_gelu_fwd(T *out, const T *inp, size_t n) {
    FOR_EACH(i, n) {
        float x = to_f<T>(inp[i]);
        float u = GELU_S * (x + GELU_A * x * x * x);
        out[i] = from_f<T>(x / (1.0f + expf(-2.0f * u)));
    }
}
template <typename T> __global__ void k_gelu_bwd(T *dinp, const T *inp, const T *dout, size_t n) {
    FOR_EACH(i, n) {
        float x = to_f<T>(inp[i]);
        float u = GELU_S * (x + GELU_A * x * x * x);
        float e = expf(-2.0f * u);
        float sg = 1.0f / (1.0f + e);
        float du = GELU_S * (1.0f + 3.0f * GELU_A * x * x);
        float grad = sg + 2.0f * x * du * sg * (e * sg);
        dinp[i] = from_f<T>(to_f<T>(dinp[i]) + grad * to_f<T>(dout[i]));
    }
}
template <typename T> __global__ void k_residual(T *out, const T *a, const T *b, size_t n) {
    FOR_EACH(i, n) out[i] = from_f<T>(to_f<T>(a[i]) + to_f<T>(b[i]));
}

__global__ void k_fill(float *x, float v, size_t n) { FOR_EACH(i, n) x[i] = v; }
__global__ void k_scale(float *x, float s, size_t n) { FOR_EACH(i, n) x[i] *= s; }
__global__ void k_add(float *dst, const float *src, size_t n) { FOR_EACH(i, n) dst[i] += src[i]; }

/* out[n] = wte[tokens[n] - lo], 0 where the token is not in [lo, lo + rows). */
__global__ void k_emb_fwd(float *out, const int *tokens, const float *wte, int lo, int rows, int N, int C) {
    FOR_EACH(i, (size_t)N * C) {
        int tok = tokens[i / C] - lo;
        out[i] = tok >= 0 && tok < rows ? wte[(size_t)tok * C + i % C] : 0.0f;
    }
}

/* ---- LayerNorm --------------------------------------------------------------
 * One block per row; the row's sums are each thread's strided terms in
 * order, then a fixed tree over the block. */

__device__ float block_sum(float v, float *sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = TD_CU_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    float r = sh[0];
    __syncthreads(); /* sh is reused by the next sum */
    return r;
}

template <typename T>
__global__ void k_ln_fwd(T *out, float *mean, float *rstd, const T *inp, const float *w, const float *b, int C) {
    __shared__ float sh[TD_CU_THREADS];
    const T *x = inp + (size_t)blockIdx.x * C;
    T *o = out + (size_t)blockIdx.x * C;
    float s = 0.0f;
    for (int c = threadIdx.x; c < C; c += TD_CU_THREADS) s += to_f<T>(x[c]);
    float m = block_sum(s, sh) / C;
    float v = 0.0f;
    for (int c = threadIdx.x; c < C; c += TD_CU_THREADS) {
        float d = to_f<T>(x[c]) - m;
        v += d * d;
    }
    float r = 1.0f / sqrtf(block_sum(v, sh) / C + LN_EPS);
    for (int c = threadIdx.x; c < C; c += TD_CU_THREADS) o[c] = from_f<T>((to_f<T>(x[c]) - m) * r * w[c] + b[c]);
    if (threadIdx.x == 0) {
        if (mean) mean[blockIdx.x] = m;
        if (rstd) rstd[blockIdx.x] = r;
    }
}

/* dinp += (dn - mean(dn) - xh mean(dn xh)) rstd, dn = w dout, xh the
 * normalized input (src/kernels/layernorm.c). */
template <typename T>
__global__ void k_ln_bwd_rows(T *dinp, const T *dout, const T *inp, const float *w, const float *mean,
                              const float *rstd, int C) {
    __shared__ float sh[TD_CU_THREADS];
    size_t row = (size_t)blockIdx.x * C;
    float m = mean[blockIdx.x], r = rstd[blockIdx.x];
    float s1 = 0.0f, s2 = 0.0f;
    for (int c = threadIdx.x; c < C; c += TD_CU_THREADS) {
        float xh = (to_f<T>(inp[row + c]) - m) * r, dn = w[c] * to_f<T>(dout[row + c]);
        s1 += dn, s2 += dn * xh;
    }
    float dn_mean = block_sum(s1, sh) / C, dn_xh_mean = block_sum(s2, sh) / C;
    for (int c = threadIdx.x; c < C; c += TD_CU_THREADS) {
        float xh = (to_f<T>(inp[row + c]) - m) * r, dn = w[c] * to_f<T>(dout[row + c]);
        dinp[row + c] = from_f<T>(to_f<T>(dinp[row + c]) + (dn - dn_mean - xh * dn_xh_mean) * r);
    }
}

/* dw, db: one thread per column, rows 0..N-1 in double (as the CPU). */
template <typename T>
__global__ void k_ln_bwd_cols(float *dw, float *db, const T *dout, const T *inp, const float *mean,
                              const float *rstd, int N, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    double aw = 0.0, ab = 0.0;
    for (int n = 0; n < N; n++) {
        float g = to_f<T>(dout[(size_t)n * C + c]);
        aw += (double)((to_f<T>(inp[(size_t)n * C + c]) - mean[n]) * rstd[n] * g);
        ab += g;
    }
    if (dw) dw[c] = (float)(dw[c] + aw);
    if (db) db[c] = (float)(db[c] + ab);
}

/* ---- RMSNorm (src/kernels/rmsnorm.c): LayerNorm without the centring ---- */

template <typename T>
__global__ void k_rms_fwd(T *out, float *rstd, const T *inp, const float *w, int C, float eps) {
    __shared__ float sh[TD_CU_THREADS];
    const T *x = inp + (size_t)blockIdx.x * C;
    T *o = out + (size_t)blockIdx.x * C;
    float v = 0.0f;
    for (int c = threadIdx.x; c < C; c += TD_CU_THREADS) v += to_f<T>(x[c]) * to_f<T>(x[c]);
    float r = 1.0f / sqrtf(block_sum(v, sh) / C + eps);
    for (int c = threadIdx.x; c < C; c += TD_CU_THREADS) o[c] = from_f<T>(to_f<T>(x[c]) * r * w[c]);
    if (threadIdx.x == 0 && rstd) rstd[blockIdx.x] = r;
}

/* dinp += (dn - xh mean(dn xh)) rstd, dn = w dout, xh = x rstd. */
template <typename T>
__global__ void k_rms_bwd_rows(T *dinp, const T *dout, const T *inp, const float *w, const float *rstd, int C) {
    __shared__ float sh[TD_CU_THREADS];
    size_t row = (size_t)blockIdx.x * C;
    float r = rstd[blockIdx.x], s = 0.0f;
    for (int c = threadIdx.x; c < C; c += TD_CU_THREADS)
        s += w[c] * to_f<T>(dout[row + c]) * (to_f<T>(inp[row + c]) * r);
    float dn_xh_mean = block_sum(s, sh) / C;
    for (int c = threadIdx.x; c < C; c += TD_CU_THREADS) {
        float xh = to_f<T>(inp[row + c]) * r, dn = w[c] * to_f<T>(dout[row + c]);
        dinp[row + c] = from_f<T>(to_f<T>(dinp[row + c]) + (dn - xh * dn_xh_mean) * r);
    }
}

/* dw: one thread per column, rows 0..N-1 in double. */
template <typename T>
__global__ void k_rms_bwd_cols(float *dw, const T *dout, const T *inp, const float *rstd, int N, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    double aw = 0.0;
    for (int n = 0; n < N; n++)
        aw += (double)(to_f<T>(inp[(size_t)n * C + c]) * rstd[n] * to_f<T>(dout[(size_t)n * C + c]));
    dw[c] = (float)(dw[c] + aw);
}

/* ---- SwiGLU (src/kernels/swiglu.c): h = silu(g) u on gu[N, 2F] = g | u;
 * e^-g with its argument clamped to [-80, 80] and g clamped where the CPU
 * clamps it, so that large |g| gives the CPU's finite values. ---- */

__device__ __forceinline__ float clamp80(float x) { return fminf(fmaxf(x, -80.0f), 80.0f); }

template <typename T> __global__ void k_swiglu_fwd(T *h, const T *gu, int F, size_t n) {
    FOR_EACH(i, n) {
        size_t row = i / F, f = i % F;
        float x = to_f<T>(gu[row * 2 * F + f]), u = to_f<T>(gu[row * 2 * F + F + f]);
        h[i] = from_f<T>(fmaxf(x, -80.0f) / (1.0f + expf(clamp80(-x))) * u);
    }
}
/* Overwrites dgu (as the CPU's does); dgu may be gu. */
template <typename T> __global__ void k_swiglu_bwd(T *dgu, const T *dh, const T *gu, int F, size_t n) {
    FOR_EACH(i, n) {
        size_t row = i / F, f = i % F, gi = row * 2 * F + f;
        float x = to_f<T>(gu[gi]), y = to_f<T>(gu[gi + F]), dd = to_f<T>(dh[i]);
        float e = expf(clamp80(-x)), s = 1.0f / (1.0f + e);
        float ds = s * (1.0f + clamp80(x) * (e * s));
        dgu[gi] = from_f<T>(dd * y * ds);
        dgu[gi + F] = from_f<T>(dd * (fmaxf(x, -80.0f) * s));
    }
}

/* RoPE in place (src/kernels/rope.c): row n of x (stride apart, heads of
 * hs from column col) turned by cs[n % T] = cos | sin; one thread per pair,
 * each product rounded alone as the CPU's, so the same bits. */
template <typename T>
__global__ void k_rope(T *x, const float *cs, int Tn, int stride, int col, int heads, int hs, int bwd, size_t n) {
    int half = hs / 2;
    FOR_EACH(j, n) {
        size_t row = j / ((size_t)heads * half);
        int h = (int)(j / half % heads), i = (int)(j % half);
        const float *c = cs + (row % Tn) * hs;
        T *v = x + row * stride + col + (size_t)h * hs;
        float a = to_f<T>(v[i]), b = to_f<T>(v[i + half]), cc = c[i], ss = c[half + i];
        float sa = bwd ? -1.0f : 1.0f; /* bwd turns the other way */
        v[i] = from_f<T>(__fsub_rn(__fmul_rn(a, cc), sa * __fmul_rn(b, ss)));
        v[i + half] = from_f<T>(__fadd_rn(__fmul_rn(b, cc), sa * __fmul_rn(a, ss)));
    }
}

/* out[n] += wpe[pos[(n0 + n) % T]] (pos NULL: the row's t). */
__global__ void k_pos_fwd(float *out, const float *wpe, const int *pos, int n0, int T, int C, size_t n) {
    FOR_EACH(i, n) {
        int t = (int)((n0 + i / C) % T);
        out[i] += wpe[(size_t)(pos ? pos[t] : t) * C + i % C];
    }
}

/* ---- the optimizer's range operations (src/kernels/range_ops.c) ------------
 * In the CPU's order and with its roundings, so the same bits: each product
 * and sum rounded alone (__fmul_rn, __dadd_rn, ...: nvcc would otherwise
 * contract them into FMAs, which the CPU build never does); sqrtf and the
 * division are IEEE's in nvcc's default modes. The reductions take the
 * CPU's blocks of 4096 elements, one thread each, then the blocks in order
 * by one thread: slow for a GPU, exact against the oracle; speed is the next
 * issue's. */

#define RANGE_BLK 4096

__global__ void k_sumsq_blocks(double *part, const float *x, size_t n) {
    size_t b = (size_t)blockIdx.x * blockDim.x + threadIdx.x, s = b * RANGE_BLK;
    if (s >= n) return;
    size_t e = s + RANGE_BLK < n ? s + RANGE_BLK : n;
    double acc = 0.0;
    for (size_t i = s; i < e; i++) acc = __dadd_rn(acc, __dmul_rn((double)x[i], (double)x[i]));
    part[b] = acc;
}
__global__ void k_sum_parts(double *dst, const double *part, size_t nb) {
    double t = 0.0;
    for (size_t b = 0; b < nb; b++) t = __dadd_rn(t, part[b]);
    *dst = t;
}
/* x[0] + ... + x[n-1] in index order, in double (cpu_sum's bits). */
__global__ void k_sum_serial(double *dst, const float *x, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s = __dadd_rn(s, (double)x[i]);
    *dst = s;
}
__global__ void k_nonfinite_blocks(int64_t *part, const float *x, size_t n) {
    size_t b = (size_t)blockIdx.x * blockDim.x + threadIdx.x, s = b * RANGE_BLK;
    if (s >= n) return;
    size_t e = s + RANGE_BLK < n ? s + RANGE_BLK : n;
    int64_t first = -1;
    for (size_t i = s; i < e && first < 0; i++)
        if ((__float_as_uint(x[i]) & 0x7f800000u) == 0x7f800000u) first = (int64_t)i;
    part[b] = first;
}
__global__ void k_first_part(int64_t *dst, const int64_t *part, size_t nb) {
    int64_t r = -1;
    for (size_t b = 0; b < nb && r < 0; b++) r = part[b];
    *dst = r;
}

/* Per-call scratch of the reductions' partials, grown as needed. */
static void *g_scratch;
static size_t g_scratch_bytes;
static void *scratch(size_t bytes) {
    if (bytes <= g_scratch_bytes) return g_scratch;
    if (g_scratch) TD_CU(cudaFree(g_scratch)); /* synchronizes: no queued op still uses it */
    TD_CU(cudaMalloc(&g_scratch, bytes));
    g_scratch_bytes = bytes;
    return g_scratch;
}

static void e_sumsq(double *dst, const float *x, size_t n) {
    size_t nb = (n + RANGE_BLK - 1) / RANGE_BLK;
    if (!nb) {
        TD_CU(cudaMemsetAsync(dst, 0, sizeof *dst, td_cu_stream));
        return;
    }
    double *part = (double *)scratch(nb * sizeof(double));
    k_sumsq_blocks<<<(unsigned)((nb + 63) / 64), 64, 0, td_cu_stream>>>(part, x, n);
    TD_CU_LAUNCHED("k_sumsq_blocks");
    k_sum_parts<<<1, 1, 0, td_cu_stream>>>(dst, part, nb);
    TD_CU_LAUNCHED("k_sum_parts");
}
static void e_first_nonfinite(int64_t *dst, const float *x, size_t n) {
    size_t nb = (n + RANGE_BLK - 1) / RANGE_BLK;
    if (!nb) {
        TD_CU(cudaMemsetAsync(dst, 0xff, sizeof *dst, td_cu_stream)); /* -1 */
        return;
    }
    int64_t *part = (int64_t *)scratch(nb * sizeof(int64_t));
    k_nonfinite_blocks<<<(unsigned)((nb + 63) / 64), 64, 0, td_cu_stream>>>(part, x, n);
    TD_CU_LAUNCHED("k_nonfinite_blocks");
    k_first_part<<<1, 1, 0, td_cu_stream>>>(dst, part, nb);
    TD_CU_LAUNCHED("k_first_part");
}
static void e_sum(double *dst, const float *x, size_t n) {
    k_sum_serial<<<1, 1, 0, td_cu_stream>>>(dst, x, n);
    TD_CU_LAUNCHED("k_sum_serial");
}

/* AdamW over every span in one launch: blockIdx.y is the span. */
typedef struct {
    float *p, *m, *v;
    const float *g;
    size_t n;
    float decay; /* 1 - lr wd */
} adamw_dev_span;

__global__ void k_adamw(const adamw_dev_span *spans, float b1, float b2, float eps, float step_size,
                        float bc2_sqrt, float scale) {
    adamw_dev_span s = spans[blockIdx.y];
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < s.n; i += (size_t)gridDim.x * blockDim.x) {
        float gi = __fmul_rn(s.g[i], scale);
        float mi = __fadd_rn(__fmul_rn(b1, s.m[i]), __fmul_rn(__fsub_rn(1.0f, b1), gi));
        float vi = __fadd_rn(__fmul_rn(b2, s.v[i]), __fmul_rn(__fmul_rn(__fsub_rn(1.0f, b2), gi), gi));
        s.m[i] = mi;
        s.v[i] = vi;
        float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), bc2_sqrt), eps);
        s.p[i] = __fsub_rn(__fmul_rn(s.p[i], s.decay), __fdiv_rn(__fmul_rn(step_size, mi), denom));
    }
}

static void e_adamw(const td_adamw_span *sp, int n, const td_adamw_hyper *h) {
    if (n <= 0) return;
    if (h->step < 1 || n > 65535) td_cu_fail("--device cuda: adamw of %d spans at step %d", n, h->step);
    /* bias corrections in double, as cpu_adamw (torch's Python floats) */
    float bc1 = (float)(1.0 - pow((double)h->beta1, h->step));
    float bc2_sqrt = (float)sqrt(1.0 - pow((double)h->beta2, h->step));
    float step_size = h->lr / bc1;
    adamw_dev_span *host = (adamw_dev_span *)malloc((size_t)n * sizeof *host);
    if (!host) td_cu_fail("--device cuda: out of host memory for %d adamw spans", n);
    size_t most = 0;
    for (int i = 0; i < n; i++) {
        host[i] = {sp[i].p, sp[i].m, sp[i].v, sp[i].g, sp[i].n, 1.0f - h->lr * sp[i].wd};
        most = sp[i].n > most ? sp[i].n : most;
    }
    /* the span table after the reductions' partials' use: one scratch */
    adamw_dev_span *dev = (adamw_dev_span *)scratch((size_t)n * sizeof *dev);
    TD_CU(cudaMemcpyAsync(dev, host, (size_t)n * sizeof *dev, cudaMemcpyHostToDevice, td_cu_stream));
    free(host); /* staged before the call returned (pageable source) */
    dim3 g(grid(most), (unsigned)n);
    k_adamw<<<g, TD_CU_THREADS, 0, td_cu_stream>>>(dev, h->beta1, h->beta2, h->eps, step_size, bc2_sqrt, h->grad_scale);
    TD_CU_LAUNCHED("k_adamw");
}

/* ---- the rows' entries ------------------------------------------------------ */

template <typename T> struct cu_type;
template <> struct cu_type<float> { static constexpr td_ktype k = TD_K_F32; };
template <> struct cu_type<__nv_bfloat16> { static constexpr td_ktype k = TD_K_BF16; };
template <> struct cu_type<__half> { static constexpr td_ktype k = TD_K_F16; };

template <typename T> static void e_round(void *dst, const float *src, size_t n) {
    if (n) LAUNCH(k_round<T>, n, (T *)dst, src, n);
}
template <typename T> static void e_widen(float *dst, const void *src, size_t n) {
    if (n) LAUNCH(k_widen<T>, n, dst, (const T *)src, n);
}
static void f32_copy_n(void *dst, const float *src, size_t n) {
    if (n && dst != src) TD_CU(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, td_cu_stream));
}
static void f32_widen_n(float *dst, const void *src, size_t n) { f32_copy_n(dst, (const float *)src, n); }

template <typename T>
static void e_mm_fwd(void *out, td_ktype out_type, const void *inp, const void *w, const float *bias, int N,
                     int C, int OC) {
    td_cu_mm_fwd(cu_type<T>::k, out, out_type, inp, w, bias, N, C, OC);
}
template <typename T>
static void e_mm_bwd(void *dinp, td_ktype dinp_type, float *dw, float *dbias, const void *dout, const void *inp,
                     const void *w, int N, int C, int OC) {
    td_cu_mm_bwd(cu_type<T>::k, dinp, dinp_type, dw, dbias, dout, inp, w, N, C, OC);
}
template <typename T>
static void e_ln_fwd(void *out, float *mean, float *rstd, const void *inp, const float *w, const float *b, int N,
                     int C) {
    if (!N) return;
    k_ln_fwd<T><<<N, TD_CU_THREADS, 0, td_cu_stream>>>((T *)out, mean, rstd, (const T *)inp, w, b, C);
    TD_CU_LAUNCHED("k_ln_fwd");
}
template <typename T>
static void e_ln_bwd(void *dinp, float *dw, float *db, const void *dout, const void *inp, const float *w,
                     const float *mean, const float *rstd, int N, int C) {
    if (!N) return;
    if (dinp) {
        k_ln_bwd_rows<T><<<N, TD_CU_THREADS, 0, td_cu_stream>>>((T *)dinp, (const T *)dout, (const T *)inp, w,
                                                                 mean, rstd, C);
        TD_CU_LAUNCHED("k_ln_bwd_rows");
    }
    if (dw || db) {
        k_ln_bwd_cols<T><<<(C + TD_CU_THREADS - 1) / TD_CU_THREADS, TD_CU_THREADS, 0, td_cu_stream>>>(
            dw, db, (const T *)dout, (const T *)inp, mean, rstd, N, C);
        TD_CU_LAUNCHED("k_ln_bwd_cols");
    }
}
template <typename T> static void e_gelu_fwd(void *out, const void *inp, size_t n) {
    if (n) LAUNCH(k_gelu_fwd<T>, n, (T *)out, (const T *)inp, n);
}
template <typename T> static void e_gelu_bwd(void *dinp, const void *inp, const void *dout, size_t n) {
    if (n) LAUNCH(k_gelu_bwd<T>, n, (T *)dinp, (const T *)inp, (const T *)dout, n);
}
template <typename T> static void e_res_fwd(void *out, const void *a, const void *b, size_t n) {
    if (n) LAUNCH(k_residual<T>, n, (T *)out, (const T *)a, (const T *)b, n);
}
template <typename T>
static void e_rms_fwd(void *out, float *rstd, const void *inp, const float *w, int N, int C, float eps) {
    if (!N) return;
    k_rms_fwd<T><<<N, TD_CU_THREADS, 0, td_cu_stream>>>((T *)out, rstd, (const T *)inp, w, C, eps);
    TD_CU_LAUNCHED("k_rms_fwd");
}
template <typename T>
static void e_rms_bwd(void *dinp, float *dw, const void *dout, const void *inp, const float *w, const float *rstd,
                      int N, int C) {
    if (!N) return;
    if (dinp) {
        k_rms_bwd_rows<T><<<N, TD_CU_THREADS, 0, td_cu_stream>>>((T *)dinp, (const T *)dout, (const T *)inp, w,
                                                                  rstd, C);
        TD_CU_LAUNCHED("k_rms_bwd_rows");
    }
    if (dw) {
        k_rms_bwd_cols<T><<<(C + TD_CU_THREADS - 1) / TD_CU_THREADS, TD_CU_THREADS, 0, td_cu_stream>>>(
            dw, (const T *)dout, (const T *)inp, rstd, N, C);
        TD_CU_LAUNCHED("k_rms_bwd_cols");
    }
}
template <typename T> static void e_swiglu_fwd(void *h, const void *gu, int N, int F) {
    size_t n = (size_t)N * F;
    if (n) LAUNCH(k_swiglu_fwd<T>, n, (T *)h, (const T *)gu, F, n);
}
template <typename T> static void e_swiglu_bwd(void *dgu, const void *dh, const void *gu, int N, int F) {
    size_t n = (size_t)N * F;
    if (n) LAUNCH(k_swiglu_bwd<T>, n, (T *)dgu, (const T *)dh, (const T *)gu, F, n);
}
template <typename T>
static void e_rope(void *x, const float *cs, int B, int Tn, int stride, int col, int heads, int hs, int bwd) {
    size_t n = (size_t)B * Tn * heads * (hs / 2);
    if (n) LAUNCH(k_rope<T>, n, (T *)x, cs, Tn, stride, col, heads, hs, bwd, n);
}
template <typename T>
static void e_rope_fwd(void *x, const float *cs, int B, int Tn, int stride, int col, int heads, int hs) {
    e_rope<T>(x, cs, B, Tn, stride, col, heads, hs, 0);
}
template <typename T>
static void e_rope_bwd(void *g, const float *cs, int B, int Tn, int stride, int col, int heads, int hs) {
    e_rope<T>(g, cs, B, Tn, stride, col, heads, hs, 1);
}
static void e_pos_fwd(float *out, const float *wpe, const int *pos, int n0, int N, int T, int C) {
    size_t n = (size_t)N * C;
    if (n) LAUNCH(k_pos_fwd, n, out, wpe, pos, n0, T, C, n);
}
static void e_emb_fwd(float *out, const int *tokens, const float *wte, int lo, int rows, int N, int C) {
    size_t n = (size_t)N * C;
    if (n) LAUNCH(k_emb_fwd, n, out, tokens, wte, lo, rows, N, C);
}
static void e_scale(float *x, float s, size_t n) {
    if (n) LAUNCH(k_scale, n, x, s, n);
}
static void e_add(float *dst, const float *src, size_t n) {
    if (n) LAUNCH(k_add, n, dst, src, n);
}
static void e_fill(float *x, float v, size_t n) {
    if (n) LAUNCH(k_fill, n, x, v, n);
}

/* Designated in td_ops's order (C++20); the entries not named are NULL. */
#define CU_ROW(T, ES, ROUND, WIDEN)                                                                \
    {                                                                                              \
        .k = cu_type<T>::k, .es = ES, .round_n = ROUND, .widen_n = WIDEN, .mm_fwd = e_mm_fwd<T>,   \
        .mm_bwd = e_mm_bwd<T>, .ln_fwd = e_ln_fwd<T>, .ln_bwd = e_ln_bwd<T>,                       \
        .rms_fwd = e_rms_fwd<T>, .rms_bwd = e_rms_bwd<T>, .gelu_fwd = e_gelu_fwd<T>,               \
        .gelu_bwd = e_gelu_bwd<T>, .swiglu_fwd = e_swiglu_fwd<T>, .swiglu_bwd = e_swiglu_bwd<T>,   \
        .res_fwd = e_res_fwd<T>, .rope_fwd = e_rope_fwd<T>, .rope_bwd = e_rope_bwd<T>,            \
        .emb_fwd = e_emb_fwd, .pos_fwd = e_pos_fwd, .sumsq = e_sumsq,     \
        .first_nonfinite = e_first_nonfinite, .scale = e_scale, .add = e_add, .adamw = e_adamw,    \
        .sum = e_sum, .fill = e_fill                                                               \
    }

static const td_ops g_rows[3] = {CU_ROW(float, 4, f32_copy_n, f32_widen_n),
                                 CU_ROW(__nv_bfloat16, 2, e_round<__nv_bfloat16>, e_widen<__nv_bfloat16>),
                                 CU_ROW(__half, 2, e_round<__half>, e_widen<__half>)};

const td_ops *td_cu_ops(td_ktype k) { return &g_rows[k]; }
