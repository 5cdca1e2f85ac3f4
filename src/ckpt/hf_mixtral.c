/* --format hf-mixtral: a Llama-family mixture of experts as a Hugging Face
 * MixtralForCausalLM directory and back (ckpt_interop.h,
 * docs/export-import.md), over hf_llama.c's directory code.
 *
 * Mixtral's block is trident's Llama block with every MLP a mixture: a
 * router block_sparse_moe.gate [E, C] (trident's own row name), softmax
 * over all E logits, the top K renormalised to sum 1, and E SwiGLU experts
 * w2(silu(w1 x) * w3 x). trident stacks the experts: experts.w13 [E 2F, C]
 * holds expert e's w1 (gate) rows then its w3 (up) rows at rows
 * [2F e, 2F e + F) and [2F e + F, 2F (e + 1)), experts.w2 [E C, F] its w2
 * at rows [C e, C (e + 1)); each Hugging Face tensor is one contiguous
 * slice of a stacked row, written and read in place (td_hf_item). What
 * MixtralForCausalLM cannot compute is refused at the export: shared
 * experts, experts in some blocks only, a sigmoid router, weights not
 * renormalised (Mixtral renormalises even one expert's: weight 1), a
 * non-zero balancing bias, rope scaling. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "interop.h"
#include "trident/base.h"
#include "trident/formats_json.h"

/* ---- the tensors ---------------------------------------------------------------- */

static void item(td_hf_item *out, int *n, const char *name, int64_t d0, int64_t d1, size_t off) {
    if (out) {
        td_hf_item *it = &out[*n];
        memset(it, 0, sizeof *it);
        snprintf(it->name, sizeof it->name, "%s", name);
        it->ndim = 2, it->shape[0] = d0, it->shape[1] = d1, it->off = off;
    }
    ++*n;
}

/* The table's rows in order, the stacked experts cut into each expert's
 * w1, w2, w3 (MixtralBlockSparseTop2MLP's order), the balancing bias
 * (zero: checked at the export) left out. */
static int mixtral_items(const td_param_table *t, td_hf_item *out) {
    const td_moe_config *e = &t->cfg.moe;
    size_t C = (size_t)t->cfg.C, F = (size_t)e->F;
    int n = 0;
    for (int r = 0; r < t->n_rows; r++) {
        const td_param *p = &t->rows[r];
        if (p->kind == TD_T_ROUTERB || p->kind == TD_T_EXPPROJW) continue;
        if (p->kind != TD_T_EXPFCW) {
            if (out) td_hf_items_of_rows(t, r, r + 1, "", &out[n]);
            n++;
            continue;
        }
        const td_param *w2 = td_param_lookup(t, TD_T_EXPPROJW, p->layer);
        char name[112];
        for (int x = 0; x < e->E; x++) {
            size_t w13 = p->offset + (size_t)x * 2 * F * C;
            snprintf(name, sizeof name, "model.layers.%d.block_sparse_moe.experts.%d.w1.weight", p->layer, x);
            item(out, &n, name, (int64_t)F, (int64_t)C, w13);
            snprintf(name, sizeof name, "model.layers.%d.block_sparse_moe.experts.%d.w2.weight", p->layer, x);
            item(out, &n, name, (int64_t)C, (int64_t)F, w2->offset + (size_t)x * C * F);
            snprintf(name, sizeof name, "model.layers.%d.block_sparse_moe.experts.%d.w3.weight", p->layer, x);
            item(out, &n, name, (int64_t)F, (int64_t)C, w13 + F * C);
        }
    }
    return n;
}

static void mixtral_names_note(const td_gpt_config *c, char *buf, size_t cap) {
    snprintf(buf, cap, ", num_local_experts %d", c->moe.E);
}

/* ---- the export's refusals ---------------------------------------------------------- */

void td_hf_mixtral_check(const td_checkpoint *ck, const td_param_table *t) {
    const td_gpt_config *c = &ck->cfg;
    const td_moe_config *e = &c->moe;
    const char *dir = ck->dir;
    TD_ASSERT(c->arch == TD_ARCH_LLAMA && e->E > 0); /* td_export's family check */
    TD_CHECK(e->shared == 0, "export: %s: --moe-shared-experts %d: MixtralForCausalLM has no shared experts", dir,
             e->shared);
    TD_CHECK(e->every == 1, "export: %s: --moe-every %d: every MixtralForCausalLM block is a mixture of experts "
             "(--moe-every 1)", dir, e->every);
    TD_CHECK(e->router == TD_ROUTER_SOFTMAX, "export: %s: --moe-router sigmoid: Mixtral's router is a softmax", dir);
    TD_CHECK(e->norm_topk == TD_TIE_ON, "export: %s: --moe-norm-topk off: Mixtral renormalises the chosen experts' "
             "weights to sum 1 (weight 1 at --moe-top-k 1); train with --moe-norm-topk on", dir);
    TD_CHECK(c->rope_scaling.factor == 0, "export: %s: rope scaling (llama3): MixtralConfig has no rope_scaling", dir);
    for (int l = 0; l < c->L; l++) {
        const td_param *b = td_param_lookup(t, TD_T_ROUTERB, l);
        for (int i = 0; i < e->E; i++)
            TD_CHECK(ck->params[b->offset + (size_t)i] == 0.0f, "export: %s: %s[%d] is %g, not 0 (--moe-bias-balance "
                     "moved it): Mixtral's router selects by score alone, without a balancing bias", dir, b->name, i,
                     (double)ck->params[b->offset + (size_t)i]);
    }
}

/* ---- config.json ------------------------------------------------------------------ */

/* MixtralConfig's own fields, and trident's coefficients as trident_moe.
 * router_aux_loss_coef is Hugging Face's scale of the same loss: its
 * load_balancing_loss_func sums the K choices' shares per expert (K x
 * trident's f_i, the share of the K N assignments), so its coefficient is
 * trident's / K (and it pools every layer's tokens where trident sums the
 * layers' losses: the same for one layer only). */
static char *mixtral_config_format(const td_checkpoint *ck) {
    const td_moe_config *e = &ck->cfg.moe;
    char aux[32], hf_aux[32], z[32], rate[32], cap[32], *s = malloc(1024);
    td_hf_shortest(aux, sizeof aux, e->aux_coef, 1);
    td_hf_shortest(hf_aux, sizeof hf_aux, e->aux_coef / (float)e->K, 1);
    td_hf_shortest(z, sizeof z, e->z_coef, 1);
    td_hf_shortest(rate, sizeof rate, e->bias_rate, 1);
    td_hf_shortest(cap, sizeof cap, e->capacity, 1);
    if (s)
        snprintf(s, 1024, "\n  \"num_local_experts\": %d,\n  \"num_experts_per_tok\": %d,\n"
                 "  \"router_aux_loss_coef\": %s,\n  \"output_router_logits\": false,\n  \"router_jitter_noise\": 0.0,\n"
                 "  \"sliding_window\": null,\n  \"trident_moe\": {\"aux_coef\": %s, \"z_coef\": %s, \"bias_rate\": %s, "
                 "\"capacity\": %s},", e->E, e->K, hf_aux, aux, z, rate, cap);
    return s;
}

static float trident_coef(const td_jv *tm, const char *key, double def, const char *path) {
    return tm ? (float)td_hf_get_num(tm, key, 0, 1e30, def, path, "trident_moe.") : (float)def;
}

/* A MixtralConfig: every block E experts of intermediate_size features
 * (the dense --ffn-hidden, which no block uses, the same), the top K of a
 * softmax renormalised; trident_moe's coefficients where an export of
 * trident's wrote them. */
static void mixtral_config_parse(const td_jv *o, const char *path, td_gpt_config *c) {
    td_moe_config *e = &c->moe;
    e->E = td_hf_get_int(o, "num_local_experts", 2, 4096, path);
    e->K = td_hf_get_int(o, "num_experts_per_tok", 1, e->E, path);
    e->every = 1, e->F = c->F, e->router = TD_ROUTER_SOFTMAX, e->norm_topk = TD_TIE_ON;
    const td_jv *rs = td_json_get(o, "rope_scaling"), *sw = td_json_get(o, "sliding_window");
    TD_CHECK(!rs || rs->type == TD_JV_NULL, "import: %s: field rope_scaling: trident's Mixtral has none (null)", path);
    /* a window at least the context attends to everything before: full causal attention */
    TD_CHECK(!sw || sw->type == TD_JV_NULL || (sw->type == TD_JV_NUM && sw->is_int && sw->i >= c->T),
             "import: %s: field sliding_window: trident's attention is full causal; the window must be null or at "
             "least the context %d (--seq)", path, c->T);
    double hf_aux = td_hf_get_num(o, "router_aux_loss_coef", 0, 1e30, 0.001, path, ""); /* MixtralConfig's default */
    const td_jv *tm = td_json_get(o, "trident_moe");
    TD_CHECK(!tm || tm->type == TD_JV_OBJ, "import: %s: field trident_moe: not an object", path);
    e->aux_coef = trident_coef(tm, "aux_coef", hf_aux * e->K, path);
    e->z_coef = trident_coef(tm, "z_coef", 0.0, path);
    e->bias_rate = trident_coef(tm, "bias_rate", 0.0, path);
    e->capacity = trident_coef(tm, "capacity", 0.0, path);
}

const td_hf_family td_hf_mixtral_family = {"MixtralForCausalLM", "mixtral", "Mixtral", mixtral_config_format,
                                           mixtral_config_parse, mixtral_items, mixtral_names_note};
