/* Rotary position embeddings (rope.h): the inv_freq tables, the cos/sin
 * table, the in-place turn of head vectors forward and backward, fp32 and
 * 16-bit (one body for bf16 and fp16 through td_lp_type), and the _ref
 * loops.
 *
 * Every output element is computed alone from its own inputs (one pair of
 * the head vector and one table entry), so results are bitwise independent
 * of how rows are split over threads. The fp32 operations and their order
 * are the ones rope.h describes (HF's); the build's -ffp-contract=off keeps
 * the compiler from fusing a product into the following add. */
#include <math.h>

#include "internal.h"
#include "trident/base.h"
#include "trident/rope.h"

static void check_shape(int B, int T, int stride, int col, int heads, int hs) {
    TD_CHECK(hs >= 2 && hs % 2 == 0, "rope: head size %d must be even and >= 2", hs);
    TD_CHECK(B >= 0 && T >= 0 && heads >= 0 && col >= 0, "rope: bad sizes");
    TD_CHECK((long)col + (long)heads * hs <= stride,
             "rope: heads [%d, %ld) do not fit in a row of %d", col, (long)col + (long)heads * hs,
             stride);
}

/* ---- tables ---- */

void td_rope_inv_freq(float *inv_freq, double theta, int hs) {
    TD_CHECK(hs >= 2 && hs % 2 == 0, "rope: head size %d must be even and >= 2", hs);
    TD_CHECK(theta > 0.0, "rope: theta %g must be > 0", theta);
    const float base = (float)theta, dim = (float)hs;
    for (int i = 0; i < hs / 2; i++) {
        float e = (float)(2 * i) / dim;                /* arange(0, dim, 2).float() / dim */
        float p = (float)pow((double)base, (double)e); /* base ** e, fp32 */
        inv_freq[i] = 1.0f / p;                        /* 1.0 / (...) */
    }
}

void td_rope_llama3_scale(float *inv_freq, int hs, double factor, double low_freq_factor,
                          double high_freq_factor, double orig_max_pos) {
    TD_CHECK(hs >= 2 && hs % 2 == 0, "rope: head size %d must be even and >= 2", hs);
    TD_CHECK(factor > 0.0 && low_freq_factor > 0.0 && high_freq_factor > low_freq_factor &&
                 orig_max_pos > 0.0,
             "rope: llama3 scaling needs factor > 0, high_freq_factor > low_freq_factor > 0 "
             "and original_max_position_embeddings > 0 (got %g, %g, %g, %g)",
             factor, low_freq_factor, high_freq_factor, orig_max_pos);
    /* Python-side doubles, rounded to fp32 where they meet the fp32 tensor */
    const float low_wl = (float)(orig_max_pos / low_freq_factor);
    const float high_wl = (float)(orig_max_pos / high_freq_factor);
    const float two_pi = (float)(2.0 * M_PI), orig = (float)orig_max_pos;
    const float low = (float)low_freq_factor, span = (float)(high_freq_factor - low_freq_factor);
    const float f = (float)factor;
    for (int i = 0; i < hs / 2; i++) {
        float inv = inv_freq[i];
        float wavelen = (1.0f / inv) * two_pi; /* 2*math.pi / inv_freq */
        if (wavelen < high_wl) continue;       /* high frequency: kept */
        if (wavelen > low_wl) {                /* low frequency: divided */
            inv_freq[i] = inv / f;
            continue;
        }
        float smooth = ((1.0f / wavelen) * orig - low) / span;
        inv_freq[i] = ((1.0f - smooth) * inv) / f + smooth * inv;
    }
}

/* sincos are ~tens of flops each (scalar glibc calls): weigh the table's
 * elements accordingly when deciding whether to fork. */
#define TD_ROPE_TRIG_WEIGHT 16

void td_rope_table(float *cs, const int *pos, const float *inv_freq, int T, int hs) {
    TD_CHECK(hs >= 2 && hs % 2 == 0, "rope: head size %d must be even and >= 2", hs);
    TD_CHECK(T >= 0, "rope: bad sizes");
    const int half = hs / 2;
    int nt = td_k_threads_for((size_t)T * hs * TD_ROPE_TRIG_WEIGHT);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (int t = 0; t < T; t++) {
        const float p = (float)pos[t];
        float *c = cs + (size_t)t * hs, *s = c + half;
        for (int i = 0; i < half; i++) {
            float a = p * inv_freq[i];
            c[i] = cosf(a);
            s[i] = sinf(a);
        }
    }
}

/* ---- the turn: one head vector, fp32 ---- */

/* x1 = x[0, half), x2 = x[half, hs): disjoint, hence restrict. */
static inline void turn_fwd(float *restrict x1, float *restrict x2, const float *restrict c,
                            const float *restrict s, int half) {
    for (int i = 0; i < half; i++) {
        float a = x1[i], b = x2[i];
        x1[i] = a * c[i] - b * s[i];
        x2[i] = b * c[i] + a * s[i];
    }
}

static inline void turn_bwd(float *restrict g1, float *restrict g2, const float *restrict c,
                            const float *restrict s, int half) {
    for (int i = 0; i < half; i++) {
        float a = g1[i], b = g2[i];
        g1[i] = a * c[i] + b * s[i];
        g2[i] = b * c[i] - a * s[i];
    }
}

static void rope_f32(float *x, const float *cs, int B, int T, int stride, int col, int heads,
                     int hs, int backward) {
    check_shape(B, T, stride, col, heads, hs);
    const int half = hs / 2;
    const long rows = (long)B * T;
    int nt = td_k_threads_for((size_t)rows * heads * hs);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (long n = 0; n < rows; n++) {
        const float *c = cs + (size_t)(n % T) * hs, *s = c + half;
        float *row = x + (size_t)n * stride + col;
        for (int h = 0; h < heads; h++) {
            float *v = row + (size_t)h * hs;
            if (backward)
                turn_bwd(v, v + half, c, s, half);
            else
                turn_fwd(v, v + half, c, s, half);
        }
    }
}

void td_rope_forward(float *x, const float *cs, int B, int T, int stride, int col, int heads,
                     int hs) {
    rope_f32(x, cs, B, T, stride, col, heads, hs, 0);
}

void td_rope_backward(float *g, const float *cs, int B, int T, int stride, int col, int heads,
                      int hs) {
    rope_f32(g, cs, B, T, stride, col, heads, hs, 1);
}

/* ---- the oracles: the definition, element by element ---- */

static void rope_ref(float *x, const int *pos, const float *inv_freq, int B, int T, int stride,
                     int col, int heads, int hs, int backward) {
    check_shape(B, T, stride, col, heads, hs);
    const int half = hs / 2;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < heads; h++) {
                float *v = x + ((size_t)b * T + t) * stride + col + (size_t)h * hs;
                for (int i = 0; i < half; i++) {
                    float a = (float)pos[t] * inv_freq[i];
                    float c = cosf(a), s = sinf(a);
                    float x1 = v[i], x2 = v[i + half];
                    if (backward) {
                        v[i] = x1 * c + x2 * s;
                        v[i + half] = x2 * c - x1 * s;
                    } else {
                        v[i] = x1 * c - x2 * s;
                        v[i + half] = x2 * c + x1 * s;
                    }
                }
            }
}

void td_rope_forward_ref(float *x, const int *pos, const float *inv_freq, int B, int T, int stride,
                         int col, int heads, int hs) {
    rope_ref(x, pos, inv_freq, B, T, stride, col, heads, hs, 0);
}

void td_rope_backward_ref(float *g, const int *pos, const float *inv_freq, int B, int T, int stride,
                          int col, int heads, int hs) {
    rope_ref(g, pos, inv_freq, B, T, stride, col, heads, hs, 1);
}

/* ---- 16-bit: one body for bf16 and fp16 ---- */

/* Pairs converted at once: a fixed stack buffer of 2 x 256 floats serves
 * any head size, and head sizes up to 512 go in one piece. */
#define TD_ROPE_LP_PAIRS 256

static void rope_lp(const td_lp_type *t, void *x, const float *cs, int B, int T, int stride,
                    int col, int heads, int hs, int backward) {
    check_shape(B, T, stride, col, heads, hs);
    const int half = hs / 2;
    const long rows = (long)B * T;
    const size_t es = t->size;
    int nt = td_k_threads_for((size_t)rows * heads * hs);
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
    for (long n = 0; n < rows; n++) {
        float x1[TD_ROPE_LP_PAIRS], x2[TD_ROPE_LP_PAIRS];
        const float *c = cs + (size_t)(n % T) * hs, *s = c + half;
        char *row = (char *)x + ((size_t)n * stride + col) * es;
        for (int h = 0; h < heads; h++) {
            char *v1 = row + (size_t)h * hs * es, *v2 = v1 + (size_t)half * es;
            for (int i0 = 0; i0 < half; i0 += TD_ROPE_LP_PAIRS) {
                int len = half - i0 < TD_ROPE_LP_PAIRS ? half - i0 : TD_ROPE_LP_PAIRS;
                t->to_f32_1t(x1, v1 + (size_t)i0 * es, (size_t)len);
                t->to_f32_1t(x2, v2 + (size_t)i0 * es, (size_t)len);
                if (backward)
                    turn_bwd(x1, x2, c + i0, s + i0, len);
                else
                    turn_fwd(x1, x2, c + i0, s + i0, len);
                t->from_f32_1t(v1 + (size_t)i0 * es, x1, (size_t)len);
                t->from_f32_1t(v2 + (size_t)i0 * es, x2, (size_t)len);
            }
        }
    }
}

void td_rope_bf16_forward(td_bf16 *x, const float *cs, int B, int T, int stride, int col, int heads,
                          int hs) {
    rope_lp(&TD_LP_BF16, x, cs, B, T, stride, col, heads, hs, 0);
}
void td_rope_bf16_backward(td_bf16 *g, const float *cs, int B, int T, int stride, int col,
                           int heads, int hs) {
    rope_lp(&TD_LP_BF16, g, cs, B, T, stride, col, heads, hs, 1);
}
void td_rope_f16_forward(td_f16 *x, const float *cs, int B, int T, int stride, int col, int heads,
                         int hs) {
    rope_lp(&TD_LP_F16, x, cs, B, T, stride, col, heads, hs, 0);
}
void td_rope_f16_backward(td_f16 *g, const float *cs, int B, int T, int stride, int col, int heads,
                          int hs) {
    rope_lp(&TD_LP_F16, g, cs, B, T, stride, col, heads, hs, 1);
}
