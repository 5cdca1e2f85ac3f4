/* The GEMMs of the CUDA rows through cuBLASLt.
 *
 * - Compute type CUBLAS_COMPUTE_32F always (never the _FAST_TF32 modes):
 *   fp32 on the GPU is fp32, and bf16/fp16 inputs accumulate in fp32.
 * - One algorithm per shape, pinned: the first the heuristic returns for
 *   the shape's key (shape, types, and the operands' pointer alignment up to
 *   256 bytes; the heuristic is a function of those, the device and the
 *   library version), cached, so every later call of the shape runs the
 *   same kernel. Split-K partial sums may only be reduced in
 *   the compute type (fp32) in the workspace: never "in place" in a 16-bit
 *   output, and never with atomics, so results are deterministic.
 * - The trident shapes are row-major; cuBLASLt's column-major view of a
 *   row-major [R, S] matrix is [S, R], so out[N,OC] = inp[N,C] w[OC,C]^T
 *   is, column-major, out[OC,N] = T(w[C,OC]) inp[C,N].
 *
 * COMPILED, NEVER RUN ON A GPU (docs/cuda.md). */
#include <cublasLt.h>
#include <string.h>

#include "cuda_internal.h"

#define GEMM_WORKSPACE ((size_t)32 << 20)
#define GEMM_PLANS 512

static cublasLtHandle_t g_lt;
static void *g_ws;

static void lt_check(cublasStatus_t s, const char *what, int line) {
    if (s != CUBLAS_STATUS_SUCCESS)
        td_cu_fail("--device cuda: cuBLASLt %s: status %d (src/cuda/cuda_gemm.cu:%d)", what, (int)s, line);
}
#define LT(call) lt_check((call), #call, __LINE__)

void td_cu_gemm_init(void) {
    LT(cublasLtCreate(&g_lt));
    g_ws = td_cu_alloc_counted(GEMM_WORKSPACE, TD_MEM_OTHER, "cuBLASLt workspace");
}

/* A GEMM's shape in cuBLASLt's terms: D[m,n] = op(A) op(B) (+ beta C)
 * (+ bias[m]), column-major, C and D the same buffer. */
typedef struct {
    int m, n, k, lda, ldb, ldc;
    int ta, tb; /* 1: transposed */
    int ab, cd; /* cudaDataType_t of A and B, of C and D */
    int beta1;  /* C = D read back (the backward adds into its outputs) */
    int bias;   /* epilogue bias, fp32 */
    int align_a, align_b, align_d; /* the pointers' alignment (bytes, at most 256) */
} gemm_key;

typedef struct {
    gemm_key key;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulAlgo_t algo;
} gemm_plan;

static gemm_plan g_plans[GEMM_PLANS];
static int g_nplans;

static cudaDataType_t dtype(td_ktype k) {
    return k == TD_K_F32 ? CUDA_R_32F : k == TD_K_BF16 ? CUDA_R_16BF : CUDA_R_16F;
}

/* The plan of key, made on first use: NULL when cuBLASLt has no algorithm
 * for it (the caller falls back, see mm_fwd's bias). */
static const gemm_plan *plan_for(const gemm_key *key) {
    for (int i = 0; i < g_nplans; i++)
        if (memcmp(&g_plans[i].key, key, sizeof *key) == 0) return &g_plans[i];
    if (g_nplans == GEMM_PLANS)
        td_cu_fail("--device cuda: more than %d GEMM shapes (raise GEMM_PLANS in src/cuda/cuda_gemm.cu)",
                   GEMM_PLANS);
    gemm_plan p;
    memset(&p, 0, sizeof p);
    p.key = *key;
    LT(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = key->ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = key->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    LT(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LT(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    if (key->bias) {
        cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_BIAS;
        cudaDataType_t bt = CUDA_R_32F; /* the row's bias is fp32 in every precision */
        LT(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep));
        LT(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
    }
    cudaDataType_t ab = (cudaDataType_t)key->ab, cd = (cudaDataType_t)key->cd;
    LT(cublasLtMatrixLayoutCreate(&p.a, ab, key->ta ? key->k : key->m, key->ta ? key->m : key->k, key->lda));
    LT(cublasLtMatrixLayoutCreate(&p.b, ab, key->tb ? key->n : key->k, key->tb ? key->k : key->n, key->ldb));
    LT(cublasLtMatrixLayoutCreate(&p.c, cd, key->m, key->n, key->ldc));
    cublasLtMatmulPreference_t pref;
    LT(cublasLtMatmulPreferenceCreate(&pref));
    size_t ws = GEMM_WORKSPACE;
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    /* callers pass offset pointers (backend.h): the heuristic assumes 256
     * unless told, and an algorithm needing more than a pointer has fails */
    uint32_t al[3] = {(uint32_t)key->align_a, (uint32_t)key->align_b, (uint32_t)key->align_d};
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al[0], 4));
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al[1], 4));
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al[2], 4));
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al[2], 4));
    uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes,
                                            sizeof schemes));
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(g_lt, p.desc, p.a, p.b, p.c, p.c, pref, 1, &res, &found);
    LT(cublasLtMatmulPreferenceDestroy(pref));
    if (s != CUBLAS_STATUS_SUCCESS || found == 0) {
        cublasLtMatrixLayoutDestroy(p.a), cublasLtMatrixLayoutDestroy(p.b), cublasLtMatrixLayoutDestroy(p.c);
        cublasLtMatmulDescDestroy(p.desc);
        return NULL;
    }
    p.algo = res.algo;
    g_plans[g_nplans] = p;
    return &g_plans[g_nplans++];
}

/* The largest power of two up to 256 that divides p's address. */
static int align_of(const void *p) {
    uintptr_t u = (uintptr_t)p;
    int a = 1;
    while (a < 256 && u % (uintptr_t)(2 * a) == 0) a *= 2;
    return a;
}

static void gemm(gemm_key *key, void *d, const void *a, const void *b, const float *bias) {
    key->align_a = align_of(a), key->align_b = align_of(b), key->align_d = align_of(d);
    const gemm_plan *p = plan_for(key);
    if (!p)
        td_cu_fail("--device cuda: cuBLASLt has no algorithm for the GEMM m %d n %d k %d (types %d/%d, bias %d)",
                   key->m, key->n, key->k, key->ab, key->cd, key->bias);
    if (bias) LT(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    float alpha = 1.0f, beta = key->beta1 ? 1.0f : 0.0f;
    LT(cublasLtMatmul(g_lt, p->desc, &alpha, a, p->a, b, p->b, &beta, d, p->c, d, p->c, &p->algo, g_ws,
                      GEMM_WORKSPACE, td_cu_stream));
}

/* ---- the bias: epilogue, or a kernel where cuBLASLt has none ------------- */

template <typename T> __global__ void add_bias(T *out, const float *bias, int N, int OC) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < (size_t)N * OC) out[i] = from_f<T>(to_f<T>(out[i]) + bias[i % OC]);
}

/* dbias[o] += sum over rows of dout[n, o]: one thread per column, rows in
 * order 0..N-1 in double (no atomics: the same bits every run). */
template <typename T> __global__ void bias_grad(float *dbias, const T *dout, int N, int OC) {
    int o = blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= OC) return;
    double s = 0.0;
    for (int n = 0; n < N; n++) s += (double)to_f<T>(dout[(size_t)n * OC + o]);
    dbias[o] = (float)(dbias[o] + s);
}

static int blocks(size_t n) { return (int)((n + TD_CU_THREADS - 1) / TD_CU_THREADS); }

void td_cu_mm_fwd(td_ktype k, void *out, td_ktype out_type, const void *inp, const void *w,
                  const float *bias, int N, int C, int OC) {
    if (!N || !OC) return;
    gemm_key key;
    memset(&key, 0, sizeof key);
    key.m = OC, key.n = N, key.k = C, key.lda = C, key.ldb = C, key.ldc = OC, key.ta = 1, key.tb = 0;
    key.ab = dtype(k), key.cd = dtype(out_type), key.bias = bias != NULL;
    key.align_a = align_of(w), key.align_b = align_of(inp), key.align_d = align_of(out);
    if (!bias || plan_for(&key)) {
        gemm(&key, out, w, inp, bias);
        return;
    }
    key.bias = 0; /* no bias epilogue for these types: the GEMM, then the add */
    gemm(&key, out, w, inp, NULL);
    size_t n = (size_t)N * OC;
    if (out_type == TD_K_F32)
        add_bias<float><<<blocks(n), TD_CU_THREADS, 0, td_cu_stream>>>((float *)out, bias, N, OC);
    else if (out_type == TD_K_BF16)
        add_bias<__nv_bfloat16><<<blocks(n), TD_CU_THREADS, 0, td_cu_stream>>>((__nv_bfloat16 *)out, bias, N, OC);
    else
        add_bias<__half><<<blocks(n), TD_CU_THREADS, 0, td_cu_stream>>>((__half *)out, bias, N, OC);
    TD_CU_LAUNCHED("add_bias");
}

void td_cu_mm_bwd(td_ktype k, void *dinp, td_ktype dinp_type, float *dw, float *dbias,
                  const void *dout, const void *inp, const void *w, int N, int C, int OC) {
    if (!N) return;
    gemm_key key;
    if (dinp) { /* dinp[N,C] += dout[N,OC] w[OC,C]: column-major [C,N] = w[C,OC] dout[OC,N] */
        memset(&key, 0, sizeof key);
        key.m = C, key.n = N, key.k = OC, key.lda = C, key.ldb = OC, key.ldc = C;
        key.ab = dtype(k), key.cd = dtype(dinp_type), key.beta1 = 1;
        gemm(&key, dinp, w, dout, NULL);
    }
    if (dw) { /* dw[OC,C] += dout^T inp: column-major [C,OC] = inp[C,N] (dout[OC,N])^T */
        memset(&key, 0, sizeof key);
        key.m = C, key.n = OC, key.k = N, key.lda = C, key.ldb = OC, key.ldc = C, key.tb = 1;
        key.ab = dtype(k), key.cd = CUDA_R_32F, key.beta1 = 1;
        gemm(&key, dw, inp, dout, NULL);
    }
    if (dbias) {
        if (k == TD_K_F32)
            bias_grad<float><<<blocks(OC), TD_CU_THREADS, 0, td_cu_stream>>>(dbias, (const float *)dout, N, OC);
        else if (k == TD_K_BF16)
            bias_grad<__nv_bfloat16><<<blocks(OC), TD_CU_THREADS, 0, td_cu_stream>>>(
                dbias, (const __nv_bfloat16 *)dout, N, OC);
        else
            bias_grad<__half><<<blocks(OC), TD_CU_THREADS, 0, td_cu_stream>>>(dbias, (const __half *)dout, N, OC);
        TD_CU_LAUNCHED("bias_grad");
    }
}
