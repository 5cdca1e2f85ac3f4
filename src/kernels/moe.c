/* The mixture of experts' device half (kernels_moe.h): the loops that
 * model/moe.c ran over its step tensors on the host, moved here unchanged
 * (same order of every sum, same widening and rounding of each row) so the
 * bits do not move. */
#include "trident/kernels_moe.h"

#include <math.h>
#include <string.h>

#include "trident/base.h"
#include "trident/kernels_f16.h"

static size_t esize(td_ktype k) { return k == TD_K_F32 ? 4 : 2; }

static const void *row_at(td_ktype k, const void *p, size_t i, int C) {
    return (const char *)p + i * (size_t)C * esize(k);
}

/* A row to fp32: bf16 is the top half of an fp32, widened inline (the
 * _n conversion opens a threaded region per call: too dear per row). */
static void widen(td_ktype k, float *dst, const void *src, int C) {
    if (k == TD_K_BF16) {
        const uint16_t *h = src;
        for (int i = 0; i < C; i++) {
            uint32_t u = (uint32_t)h[i] << 16;
            memcpy(dst + i, &u, 4);
        }
    } else if (k == TD_K_F16) {
        td_f16_to_float_n(dst, src, (size_t)C);
    } else {
        memcpy(dst, src, sizeof(float) * (size_t)C);
    }
}

static void narrow(td_ktype k, void *dst, const float *src, int C) {
    if (k == TD_K_BF16)
        td_bf16_from_float_n(dst, src, (size_t)C);
    else if (k == TD_K_F16)
        td_f16_from_float_n(dst, src, (size_t)C);
    else
        memcpy(dst, src, sizeof(float) * (size_t)C);
}

double td_moe_log_sum_exp(const float *lg, int E) {
    float mx = lg[0];
    for (int i = 1; i < E; i++) mx = lg[i] > mx ? lg[i] : mx;
    double s = 0.0;
    for (int i = 0; i < E; i++) s += exp((double)lg[i] - mx);
    return mx + log(s);
}

void td_moe_router_scores(float *sc_all, const float *logits, int N, int E, int softmax) {
    for (int t = 0; t < N; t++) {
        const float *lg = logits + (size_t)t * E;
        float *sc = sc_all + (size_t)t * E;
        if (softmax) {
            float mx = lg[0];
            for (int i = 1; i < E; i++) mx = lg[i] > mx ? lg[i] : mx;
            double sum = 0.0;
            for (int i = 0; i < E; i++) sum += (sc[i] = expf(lg[i] - mx));
            for (int i = 0; i < E; i++) sc[i] = (float)(sc[i] / sum);
        } else {
            for (int i = 0; i < E; i++) sc[i] = 1.0f / (1.0f + expf(-lg[i]));
        }
    }
}

void td_moe_gather(td_ktype k, void *dst, const void *src, const int *pos, int N, int K, int C) {
    size_t rb = (size_t)C * esize(k);
    for (size_t j = 0; j < (size_t)N * K; j++)
        if (pos[j] >= 0) memcpy((char *)dst + (size_t)pos[j] * rb, (const char *)src + j / (size_t)K * rb, rb);
}

void td_moe_combine(td_ktype k, float *out, int shared, const void *y, const int *pos,
                    const float *wts, int row0, int Ns, int K, int C) {
    float *yrow = td_alloc(sizeof(float) * (size_t)C, TD_MEM_OTHER);
    for (int r = 0; r < Ns; r++) {
        size_t t = (size_t)(row0 + r);
        float *o = out + (size_t)r * C;
        if (shared)
            memmove(o, out + t * C, sizeof(float) * (size_t)C);
        else
            memset(o, 0, sizeof(float) * (size_t)C);
        for (int kk = 0; kk < K; kk++) {
            int p = pos[t * K + kk];
            if (p < 0) continue;
            widen(k, yrow, row_at(k, y, (size_t)p, C), C);
            float w = wts[t * K + kk];
            for (int c = 0; c < C; c++) o[c] += w * yrow[c];
        }
    }
    td_free(yrow);
}

void td_moe_combine_backward(td_ktype k, float *dw, void *dy, const void *dout, const void *y,
                             const int *pos, const float *wts, int N, int K, int C) {
    float *dt = td_alloc(sizeof(float) * 2 * (size_t)C, TD_MEM_OTHER), *yt = dt + C;
    for (int t = 0; t < N; t++) {
        widen(k, dt, row_at(k, dout, (size_t)t, C), C);
        for (int kk = 0; kk < K; kk++) {
            size_t j = (size_t)t * K + kk;
            int p = pos[j];
            dw[j] = 0.0f;
            if (p < 0) continue;
            widen(k, yt, row_at(k, y, (size_t)p, C), C);
            double dot = 0.0;
            for (int c = 0; c < C; c++) dot += (double)dt[c] * yt[c];
            dw[j] = (float)dot;
            for (int c = 0; c < C; c++) yt[c] = wts[j] * dt[c];
            narrow(k, (char *)dy + (size_t)p * C * esize(k), yt, C);
        }
    }
    td_free(dt);
}

void td_moe_scatter_add(td_ktype k, float *dst, const void *dx, const int *pos, int N, int K,
                        int C) {
    float *yt = td_alloc(sizeof(float) * (size_t)C, TD_MEM_OTHER);
    for (size_t j = 0; j < (size_t)N * K; j++) {
        if (pos[j] < 0) continue;
        widen(k, yt, row_at(k, dx, (size_t)pos[j], C), C);
        float *o = dst + (j / (size_t)K) * C;
        for (int c = 0; c < C; c++) o[c] += yt[c];
    }
    td_free(yt);
}

void td_moe_router_backward(float *dl, const float *dw, const float *logits, const float *sc_all,
                            const int *idx_all, const float *gate, const float *wts,
                            const float *st, const td_moe_router_shape *s) {
    int N = s->N, E = s->E, K = s->K;
    double ntot = st[2 * E];
    for (int t = 0; t < N; t++) {
        const float *sc = sc_all + (size_t)t * E, *g = gate + (size_t)t * K,
                    *w = wts + (size_t)t * K, *dwt = dw + (size_t)t * K;
        const int *idx = idx_all + (size_t)t * K;
        float *ds = dl + (size_t)t * E; /* the scores' gradient, then the logits' in place */
        for (int i = 0; i < E; i++) ds[i] = s->dloss * s->aux_coef * E * (float)(st[i] / (ntot * K));
        double gs = 0.0, dot = 0.0;
        for (int k = 0; k < K; k++) gs += g[k], dot += (double)dwt[k] * w[k];
        for (int k = 0; k < K; k++) ds[idx[k]] += s->norm_topk ? (float)((dwt[k] - dot) / gs) : dwt[k];
        if (s->softmax) {
            double sd = 0.0;
            for (int i = 0; i < E; i++) sd += (double)ds[i] * sc[i];
            for (int i = 0; i < E; i++) ds[i] = sc[i] * (float)(ds[i] - sd);
        } else {
            for (int i = 0; i < E; i++) ds[i] = ds[i] * sc[i] * (1.0f - sc[i]);
        }
        if (s->z_coef > 0.0f) {
            const float *lg = logits + (size_t)t * E;
            double lse = td_moe_log_sum_exp(lg, E);
            for (int i = 0; i < E; i++)
                ds[i] += (float)(s->dloss * 2.0 * s->z_coef * lse * exp((double)lg[i] - lse));
        }
    }
}
