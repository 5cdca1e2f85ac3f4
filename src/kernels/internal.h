/* Private helpers shared by the kernel files: thread splitting, the
 * vectorisable exp, and fixed-order row sums. Not part of the public API. */
#ifndef TRIDENT_KERNELS_INTERNAL_H
#define TRIDENT_KERNELS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "trident/attention.h"
#include "trident/kernels.h"
#include "trident/kernels_bf16.h"

/* Below this many floats touched, an OpenMP fork/join (~1-3 us) costs more
 * than the loop itself, so the kernels run on the calling thread. */
#define TD_K_PAR_MIN_ELEMS 16384

/* Threads to use for a loop touching `work` elements. */
static inline int td_k_threads_for(size_t work) {
    int nt = td_kernels_threads();
    return work < TD_K_PAR_MIN_ELEMS ? 1 : nt;
}

/* Part i of nt of [0, n): boundaries rounded to multiples of `align` so that
 * every part but the last starts on a vector / cache-line boundary (no false
 * sharing between threads, full BLAS micro-kernel tiles). */
static inline void td_k_split(int n, int nt, int i, int align, int *lo, int *hi) {
    long per = ((long)n + nt - 1) / nt;
    per = (per + align - 1) / align * align;
    long a = per * i, b = per * (i + 1);
    *lo = (int)(a < n ? a : n);
    *hi = (int)(b < n ? b : n);
}

/* Monotone map of a float's bits to int32 (and its inverse, the same
 * formula): clamping in this integer domain vectorises, while a float
 * compare-and-select does not under gcc's default -ftrapping-math. */
static inline int32_t td_k_ford(float x) {
    int32_t i;
    memcpy(&i, &x, sizeof i);
    return i ^ ((i >> 31) & 0x7fffffff);
}
static inline float td_k_fromord(int32_t o) {
    int32_t i = o ^ ((o >> 31) & 0x7fffffff);
    float x;
    memcpy(&x, &i, sizeof x);
    return x;
}

/* expf without libm calls, so loops using it auto-vectorise (glibc's expf
 * is scalar-only without -ffast-math). Cephes expf: Cody-Waite reduction
 * x = n ln2 + r, |r| <= ln2/2, degree-7 polynomial; relative error a few
 * ulp (checked against double exp by the tests through softmax and GELU).
 * Inputs are clamped to [-80, 80]: exp(-80) ~ 1.8e-35 stands in for exact
 * underflow and keeps every result and its reciprocal a normal float
 * (subnormals are slow); that is harmless where it is used (softmax terms
 * beside a row max of 1, GELU's sigmoid). NaN in gives NaN out, so a
 * diverged run still shows NaN; +-inf act as +-80. The same operations run
 * in the scalar and vector versions of a loop, so results do not depend on
 * where a loop is split. */
static inline float td_k_expf(float x0) {
    int32_t o = td_k_ford(x0);
    const int32_t lo = td_k_ford(-80.0f), hi = td_k_ford(80.0f);
    o = o < lo ? lo : o;
    o = o > hi ? hi : o;
    float x = td_k_fromord(o);
    /* round to nearest via the 1.5*2^23 trick: vectorises, unlike rintf */
    float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = x - n * 0.693359375f;  /* ln2 high part: n*hi is exact */
    r = r - n * -2.12194440e-4f;     /* ln2 low part */
    float r2 = r * r;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r2 + r + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    float y = p * scale;
    /* NaN stays NaN. Pure integer arithmetic (the sign of inf - |x| bits
     * is the NaN test): a select here would make gcc branch around the
     * float work and refuse to vectorise. */
    int32_t xb, yb;
    memcpy(&xb, &x0, sizeof xb);
    memcpy(&yb, &y, sizeof yb);
    int32_t nan_mask = (0x7f800000 - (xb & 0x7fffffff)) >> 31;
    yb |= nan_mask & 0x7fc00000;
    memcpy(&y, &yb, sizeof y);
    return y;
}

/* Sum of x[0..n) with 16 independent lanes combined in a fixed order: the
 * lanes vectorise (a single float accumulator does not without
 * -ffast-math) and are more accurate than one running sum. The result
 * depends only on n and the data, never on threads. */
static inline float td_k_sum(const float *x, int n) {
    float acc[16] = {0};
    int i = 0;
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; j++) acc[j] += x[i + j];
    for (int j = 0; j < 8; j++) acc[j] += acc[j + 8];
    for (int j = 0; j < 4; j++) acc[j] += acc[j + 4];
    float s = (acc[0] + acc[2]) + (acc[1] + acc[3]);
    for (; i < n; i++) s += x[i];
    return s;
}

/* Sum of x[i]*y[i], same lane scheme as td_k_sum. */
static inline float td_k_dot(const float *x, const float *y, int n) {
    float acc[16] = {0};
    int i = 0;
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; j++) acc[j] += x[i + j] * y[i + j];
    for (int j = 0; j < 8; j++) acc[j] += acc[j + 8];
    for (int j = 0; j < 4; j++) acc[j] += acc[j + 4];
    float s = (acc[0] + acc[2]) + (acc[1] + acc[3]);
    for (; i < n; i++) s += x[i] * y[i];
    return s;
}

/* Max of x[0..n), n >= 1, as an integer max over td_k_ford (vectorises;
 * a float max does not). A NaN with the sign bit clear wins, so a NaN row
 * turns into NaN downstream instead of being skipped. */
static inline float td_k_max(const float *x, int n) {
    int32_t m = td_k_ford(x[0]);
    for (int i = 1; i < n; i++) {
        int32_t o = td_k_ford(x[i]);
        m = o > m ? o : m;
    }
    return td_k_fromord(m);
}

/* Frees the fp32 blocked attention's scratch (attention_blocked.c); called
 * by td_attn_release_scratch with the 16-bit kernels' buffers. */
void td_attn_blocked_release_scratch(void);

/* Shared by the fp32 (attention_blocked.c, which defines them) and 16-bit
 * (attention_lowp.c) blocked attention: the shape's checks, and the merge
 * of one row's new (o_new = O / l, lse_new) into (out_row, *lse). */
void td_attn_check_shape(const td_attn_shape *s);
void td_attn_merge_row(float *restrict out_row, float *lse, const float *restrict o_new,
                       float lse_new, int hs, int accumulate);

/* Keys of the call visible to local query row i: [0, vis). Causal
 * visibility is monotone in i, so a block's last row bounds the block. */
static inline int td_attn_visible(const td_attn_shape *s, int i) {
    if (s->mask == TD_ATTN_NONE) return s->Tk;
    long n = s->q_pos + i - s->k_pos + 1;
    return n <= 0 ? 0 : n >= s->Tk ? s->Tk : (int)n;
}

/* The backward's first query block (of bq rows) that sees key j0, as its
 * start row; -1 when no query row sees key j0 or any later key (causal:
 * the key loop ends there). */
static inline int td_attn_first_qblock(const td_attn_shape *s, int j0, int bq) {
    if (s->Tq == 0) return -1;
    if (s->mask != TD_ATTN_CAUSAL) return 0;
    long f = s->k_pos + j0 - s->q_pos;
    if (f >= s->Tq) return -1;
    return f <= 0 ? 0 : (int)(f / bq) * bq;
}

/* Document masking (td_attn_shape.doc_start): the first key of the call
 * visible to local query row i of sequence b, in [0, Tk]; 0 without. Its
 * document's start is nondecreasing in i, so a block's first row bounds
 * the block. */
static inline int td_attn_doc_first(const td_attn_shape *s, int b, int i) {
    if (!s->doc_start) return 0;
    long f = s->doc_start[(size_t)b * (size_t)s->doc_len + (size_t)(s->q_pos + i)] - s->k_pos;
    return f <= 0 ? 0 : f >= s->Tk ? s->Tk : (int)f;
}

/* The query rows [0, end) of sequence b whose documents begin at or before
 * local key j (the only rows that may see it); Tq without masking. */
static inline int td_attn_doc_qend(const td_attn_shape *s, int b, int j) {
    if (!s->doc_start) return s->Tq;
    const int *ds = s->doc_start + (size_t)b * (size_t)s->doc_len + (size_t)s->q_pos;
    long key = s->k_pos + j;
    int lo = 0, hi = s->Tq; /* first row with ds > key, by bisection */
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (ds[mid] > key) hi = mid; else lo = mid + 1;
    }
    return lo;
}

/* Local query row i's visible keys in the key block [j0, j0 + nk):
 * [*first, end) relative to j0 (causal and document masks), end returned;
 * *first == end when it sees none. */
static inline int td_attn_row_keys(const td_attn_shape *s, int b, int i, int j0, int nk, int *first) {
    int end = td_attn_visible(s, i) - j0, f = td_attn_doc_first(s, b, i) - j0;
    end = end < 0 ? 0 : end > nk ? nk : end;
    f = f < 0 ? 0 : f > end ? end : f;
    *first = f;
    return end;
}

/* Conversions on the calling thread only (no OpenMP region, not even an
 * inactive one): for rows converted inside a kernel's own parallel tasks.
 * The _n versions in kernels_bf16.h / kernels_f16.h split these over
 * threads; the bits are the same. */
void td_bf16_from_float_serial(td_bf16 *dst, const float *src, size_t n);
void td_bf16_to_float_serial(float *dst, const td_bf16 *src, size_t n);
void td_f16_from_float_serial(td_f16 *dst, const float *src, size_t n);
void td_f16_to_float_serial(float *dst, const td_f16 *src, size_t n);

/* A 16-bit element type: bytes per element, its GEMM type, its bulk
 * conversions (threaded) and its serial ones, so one body serves bf16 and
 * fp16 (lowp_ops.c defines the two; attention_lowp.c uses them too). */
typedef struct {
    size_t size;
    void (*to_f32)(float *dst, const void *src, size_t n);
    void (*from_f32)(void *dst, const float *src, size_t n);
    td_ktype k;
    void (*to_f32_1t)(float *dst, const void *src, size_t n);
    void (*from_f32_1t)(void *dst, const float *src, size_t n);
} td_lp_type;
extern const td_lp_type TD_LP_BF16, TD_LP_F16;

/* Small GEMMs of a few fixed shapes, run many times from inside a kernel's
 * own OpenMP tasks (the 16-bit blocked attention's block products), through
 * matmul_bf16.c's primitive cache: C[M,N] (+)= A[M,K] @ B[K,N], A and B of
 * type t, dense row-major (a_trans: A stored [K,M]; b_trans: B stored
 * [N,K]), C fp32 dense, "+=" with sum = 1 (fp32 accumulation throughout).
 * td_dn_slot_gemm runs outside any parallel region, on the calling thread:
 * it finds or creates the one-thread primitive and `slots` sets of
 * execution state (memory objects, stream, scratchpad). Then
 * td_dn_slot_gemm_run may run concurrently for distinct slots (a thread
 * uses its omp_get_thread_num()). Where oneDNN has no kernel for t, the run
 * converts A and B to fp32 in the slot's buffer and runs the fp32
 * primitive, as the linear layers do. Handles live until
 * td_matmul_bf16_release. */
typedef struct td_slot_gemm td_slot_gemm;
td_slot_gemm *td_dn_slot_gemm(td_ktype t, int M, int K, int N, int a_trans, int b_trans, int sum,
                              int slots);
void td_dn_slot_gemm_run(td_slot_gemm *g, int slot, float *c, const void *a, const void *b);

#endif
