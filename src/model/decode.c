/* The incremental forward with a key/value cache (include/trident/decode.h).
 * A block's rows are the whole pass's (block.c, moe.c) written out for one
 * process in fp32, with the attention reading its keys and values from the
 * cache instead of the rows of this call: the blocked kernel places the new
 * query rows at q_pos = len against cached keys from position 0, so the
 * causal mask is the whole pass's. */
#include <math.h>
#include <string.h>

#include "internal.h"
#include "trident/attention.h"
#include "trident/backend.h"
#include "trident/decode.h"
#include "trident/rope.h"

/* The decoder keeps its cache and rows in host memory (sampling runs on
 * the host, one token at a time), so its kernels are the CPU backend's
 * fp32 row whatever the run's device. */
static const td_ops *cpu(void) { return td_ops_cpu(TD_K_F32); }

/* Sizes of one process's model (tp 1). */
typedef struct {
    int C, H, KV, hs, KVC, QKV, F, F1, Vp, E, Fe, F1e, SF, SF1, parts;
} dsz;

static dsz sizes_of(const td_param_table *t) {
    const td_gpt_config *c = &t->cfg;
    dsz s;
    s.C = c->C, s.H = c->H, s.KV = c->KV, s.hs = c->C / c->H;
    s.KVC = s.KV * s.hs;
    s.QKV = s.C + 2 * s.KVC;
    s.parts = td_arch_mlp_parts(c->arch);
    s.F = c->F, s.F1 = c->F * s.parts;
    s.Vp = t->Vp;
    s.E = c->moe.E;
    s.Fe = s.E ? c->moe.F : 0, s.F1e = s.Fe * s.parts;
    s.SF = s.E ? c->moe.shared * c->moe.F : 0, s.SF1 = s.SF * s.parts;
    return s;
}

/* A tensor of block `layer` (the ends' kinds: any layer), NULL for a kind
 * the model has not; looked up once, at create. */
static const float *W(const td_decode *d, td_tensor_kind k, int layer) {
    int l = layer < 0 ? 0 : layer >= d->cfg.L ? d->cfg.L - 1 : layer;
    size_t off = d->woff[(size_t)l * TD_T_COUNT + k];
    return off == TD_NO_TENSOR ? NULL : d->params + off;
}

static size_t imax(size_t a, size_t b) { return a > b ? a : b; }

/* Floats of each buffer, in carve order (td_decode_bytes and create agree). */
static size_t layout(const td_param_table *t, int cap, int chunk, size_t n[]) {
    const td_gpt_config *c = &t->cfg;
    dsz s = sizes_of(t);
    int rope = td_arch_desc_of(c->arch)->rope;
    size_t ch = (size_t)chunk, kv = (size_t)c->L * (size_t)cap * (size_t)s.KVC;
    size_t sizes[] = {
        kv, kv, rope ? (size_t)cap * s.hs : 0,
        ch * s.C, ch * s.C, ch * s.QKV, ch * s.C, ch * s.C, ch * s.C, ch * s.F1, ch * s.F, ch, ch,
        ch * s.H,
        (size_t)s.E, (size_t)s.E, (size_t)s.C, imax((size_t)s.F1e, (size_t)s.SF1),
        imax((size_t)s.Fe, (size_t)s.SF), (size_t)s.C, (size_t)s.Vp,
    };
    size_t total = 0, k = sizeof sizes / sizeof sizes[0];
    for (size_t i = 0; i < k; i++) {
        if (n) n[i] = sizes[i];
        total += td_round_up(sizes[i], 16); /* 64-byte aligned buffers */
    }
    return total;
}

size_t td_decode_bytes(const td_param_table *t, int cap, int chunk) {
    return layout(t, cap, chunk, NULL) * sizeof(float);
}

void td_decode_create(td_decode *d, const td_param_table *t, const float *params, int cap,
                      int chunk) {
    TD_ASSERT(t->tp == 1 && t->cp <= 1 && t->ep <= 1);
    TD_ASSERT(cap >= 1 && cap <= t->cfg.T && chunk >= 1 && chunk <= cap);
    memset(d, 0, sizeof *d);
    d->cfg = t->cfg, d->t = t, d->params = params, d->cap = cap, d->chunk = chunk;
    float **bufs[] = {&d->k, &d->v, &d->rope_cs, &d->x, &d->ln, &d->qkv, &d->att, &d->res2,
                      &d->proj, &d->h, &d->ha, &d->mean, &d->rstd, &d->lse, &d->moe_lg, &d->moe_sc,
                      &d->moe_y, &d->moe_h, &d->moe_a, &d->lnf, &d->logits};
    size_t n[sizeof bufs / sizeof bufs[0]];
    size_t total = layout(t, cap, chunk, n);
    d->bytes = total * sizeof(float);
    d->cache_bytes = 2 * n[0] * sizeof(float);
    d->mem = td_alloc(d->bytes, TD_MEM_OTHER); /* the host decoder's cache and rows: host memory */
    memset(d->mem, 0, d->bytes);
    float *cur = d->mem;
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        *bufs[i] = n[i] ? cur : NULL;
        cur += td_round_up(n[i], 16);
    }
    d->woff = td_alloc(sizeof(size_t) * (size_t)t->cfg.L * TD_T_COUNT, TD_MEM_OTHER);
    for (int l = 0; l < t->cfg.L; l++)
        for (int k = 0; k < TD_T_COUNT; k++) {
            const td_param *p = td_param_lookup_opt(t, (td_tensor_kind)k, l);
            d->woff[(size_t)l * TD_T_COUNT + k] = p ? p->offset : TD_NO_TENSOR;
        }
    if (d->rope_cs) { /* as gpt.c's rope_table, for positions 0..cap-1 */
        const td_gpt_config *c = &d->cfg;
        int hs = c->C / c->H;
        float *inv = td_alloc(sizeof(float) * (size_t)(hs / 2), TD_MEM_OTHER);
        int *pos = td_alloc(sizeof(int) * (size_t)cap, TD_MEM_OTHER);
        td_gpt_rope_freqs(c, hs, inv);
        for (int i = 0; i < cap; i++) pos[i] = i;
        td_rope_table(d->rope_cs, pos, inv, cap, hs);
        td_free(pos);
        td_free(inv);
    }
}

void td_decode_destroy(td_decode *d) {
    td_free(d->woff);
    td_free(d->mem);
    memset(d, 0, sizeof *d);
}

void td_decode_reset(td_decode *d) { d->len = 0; }


static void norm(const td_decode *d, float *out, const float *x, int n, const float *w,
                 const float *b) {
    if (td_arch_desc_of(d->cfg.arch)->norm == TD_NORM_RMS)
        cpu()->rms_fwd(out, d->rstd, x, w, n, d->cfg.C, d->cfg.norm_eps);
    else
        cpu()->ln_fwd(out, d->mean, d->rstd, x, w, b, n, d->cfg.C);
}

static void mlp_act(const td_decode *d, float *out, const float *inp, int n, int F) {
    if (td_arch_desc_of(d->cfg.arch)->mlp == TD_MLP_SWIGLU)
        cpu()->swiglu_fwd(out, inp, n, F);
    else
        cpu()->gelu_fwd(out, inp, (size_t)n * F);
}

/* The mixture of experts' output of n rows of d->ln into out [n,C], as
 * moe.c's forward computes each row (dropless): the shared experts, then
 * the K chosen experts' outputs weighted by their (renormalised) scores. */
static void moe_rows(td_decode *d, int l, float *out, int n) {
    const td_moe_config *e = &d->cfg.moe;
    dsz s = sizes_of(d->t);
    int C = s.C, E = e->E, K = e->K;
    const float *rw = W(d, TD_T_ROUTERW, l), *bias = W(d, TD_T_ROUTERB, l);
    const float *fcw = W(d, TD_T_EXPFCW, l), *fcb = W(d, TD_T_EXPFCB, l);
    const float *pw = W(d, TD_T_EXPPROJW, l), *pb = W(d, TD_T_EXPPROJB, l);
    for (int r = 0; r < n; r++) {
        const float *x = d->ln + (size_t)r * C;
        float *o = out + (size_t)r * C, *lg = d->moe_lg, *sc = d->moe_sc;
        cpu()->mm_fwd(lg, TD_K_F32, x, rw, NULL, 1, C, E);
        int idx[64];
        float g[64];
        TD_ASSERT(K <= 64);
        td_moe_route_token(e->router, E, K, lg, bias, sc, idx, g); /* as training routes */
        double gs = 0.0;
        for (int k = 0; k < K; k++) gs += g[k];
        if (e->shared) {
            cpu()->mm_fwd(d->moe_h, TD_K_F32, x, W(d, TD_T_SHFCW, l), W(d, TD_T_SHFCB, l), 1, C, s.SF1);
            mlp_act(d, d->moe_a, d->moe_h, 1, s.SF);
            cpu()->mm_fwd(o, TD_K_F32, d->moe_a, W(d, TD_T_SHPROJW, l), W(d, TD_T_SHPROJB, l), 1, s.SF,
                              C);
        } else {
            memset(o, 0, sizeof(float) * (size_t)C);
        }
        for (int k = 0; k < K; k++) {
            size_t j = (size_t)idx[k];
            cpu()->mm_fwd(d->moe_h, TD_K_F32, x, fcw + j * s.F1e * C, fcb ? fcb + j * s.F1e : NULL, 1, C,
                              s.F1e);
            mlp_act(d, d->moe_a, d->moe_h, 1, s.Fe);
            cpu()->mm_fwd(d->moe_y, TD_K_F32, d->moe_a, pw + j * C * s.Fe, pb ? pb + j * C : NULL, 1,
                              s.Fe, C);
            float w = e->norm_topk == TD_TIE_ON ? (float)(g[k] / gs) : g[k];
            for (int c = 0; c < C; c++) o[c] += w * d->moe_y[c];
        }
    }
}

/* Block l on n rows at positions d->len ..: x [n,C] in, its output back in x. */
static void block_rows(td_decode *d, int l, int n) {
    const td_arch_desc *a = td_arch_desc_of(d->cfg.arch);
    dsz s = sizes_of(d->t);
    int C = s.C, p0 = d->len;
    size_t nc = (size_t)n * C;
    norm(d, d->ln, d->x, n, W(d, TD_T_LN1W, l), W(d, TD_T_LN1B, l));
    cpu()->mm_fwd(d->qkv, TD_K_F32, d->ln, W(d, a->qkv, l), W(d, TD_T_QKVB, l), n, C, s.QKV);
    if (a->rope) {
        const float *cs = d->rope_cs + (size_t)p0 * s.hs;
        cpu()->rope_fwd(d->qkv, cs, 1, n, s.QKV, 0, s.H, s.hs);
        cpu()->rope_fwd(d->qkv, cs, 1, n, s.QKV, C, s.KV, s.hs);
    }
    float *kc = d->k + (size_t)l * d->cap * s.KVC, *vc = d->v + (size_t)l * d->cap * s.KVC;
    for (int r = 0; r < n; r++) {
        const float *row = d->qkv + (size_t)r * s.QKV;
        memcpy(kc + (size_t)(p0 + r) * s.KVC, row + C, sizeof(float) * (size_t)s.KVC);
        memcpy(vc + (size_t)(p0 + r) * s.KVC, row + C + s.KVC, sizeof(float) * (size_t)s.KVC);
    }
    td_attn_shape sh = {.B = 1, .Tq = n, .Tk = p0 + n, .NH = s.H, .NKV = s.KV, .hs = s.hs,
                        .q_stride = s.QKV, .kv_stride = s.KVC, .o_stride = C, .q_pos = p0,
                        .k_pos = 0, .mask = TD_ATTN_CAUSAL};
    cpu()->att_fwd(d->att, d->lse, d->qkv, kc, vc, &sh, 0);
    cpu()->mm_fwd(d->proj, TD_K_F32, d->att, W(d, TD_T_ATTPROJW, l), W(d, TD_T_ATTPROJB, l), n, C, C);
    cpu()->res_fwd(d->res2, d->x, d->proj, nc);
    norm(d, d->ln, d->res2, n, W(d, TD_T_LN2W, l), W(d, TD_T_LN2B, l));
    if (td_gpt_moe_layer(&d->cfg, l)) {
        moe_rows(d, l, d->proj, n);
    } else {
        cpu()->mm_fwd(d->h, TD_K_F32, d->ln, W(d, a->fc, l), W(d, TD_T_FCB, l), n, C, s.F1);
        mlp_act(d, d->ha, d->h, n, s.F);
        cpu()->mm_fwd(d->proj, TD_K_F32, d->ha, W(d, TD_T_FCPROJW, l), W(d, TD_T_FCPROJB, l), n, s.F, C);
    }
    cpu()->res_fwd(d->x, d->res2, d->proj, nc);
}

const float *td_decode_step(td_decode *d, const int *tokens, int n) {
    TD_ASSERT(n >= 1 && n <= d->chunk && d->len + n <= d->cap);
    const td_gpt_config *c = &d->cfg;
    dsz s = sizes_of(d->t);
    for (int i = 0; i < n; i++) TD_ASSERT(tokens[i] >= 0 && tokens[i] < c->V);
    cpu()->emb_fwd(d->x, tokens, W(d, TD_T_WTE, -1), 0, s.Vp, n, s.C);
    const float *wpe = W(d, TD_T_WPE, -1);
    if (wpe) cpu()->pos_fwd(d->x, wpe, NULL, d->len, n, c->T, s.C);
    for (int l = 0; l < c->L; l++) block_rows(d, l, n);
    /* the head of the last row only: the sampler reads no other */
    const float *last = d->x + (size_t)(n - 1) * s.C;
    norm(d, d->lnf, last, 1, W(d, TD_T_LNFW, c->L), W(d, TD_T_LNFB, c->L));
    const float *head = td_gpt_tied(c) ? W(d, TD_T_WTE, -1) : W(d, TD_T_HEAD, c->L);
    cpu()->mm_fwd(d->logits, TD_K_F32, d->lnf, head, NULL, 1, s.C, s.Vp);
    d->len += n;
    d->rows += n;
    return d->logits;
}
