/* --resume supplies the model flags: a checkpoint records its model config,
 * tokenizer and seed (and, since run_config, every flag), so a resume
 * needs none of them and a contradicting one is refused before any work. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "run_config.h"
#include "trident/base.h"
#include "trident/ckpt.h"
#include "trident/comm.h"
#include "trident/formats_json.h"

/* " (from --config F)" or " (on the command line)": where a contradicting value came from */
static const char *origin(const td_flags_info *info, int from, char *buf, size_t cap) {
    if (from == TD_FROM_CONFIG) snprintf(buf, cap, " (--config %s)", info->config);
    else snprintf(buf, cap, "%s", "");
    return buf;
}

/* The mixture of experts' flags: the checkpoint's where not given (its
 * coefficients too, so that the run continues as it was; a given one may
 * change them, an architecture flag that contradicts the checkpoint is
 * refused at the load). */
static void resume_moe(td_train_opts *o, const td_flag *flags, int n, const td_flags_info *info,
                       const td_moe_config *saved) {
    if (td_flags_from(flags, n, info, &o->moe.E) != TD_FROM_DEFAULT && o->moe.E != saved->E)
        return; /* another model: the load names the difference */
    struct {
        void *value;
        int is_float;
        double saved;
    } f[] = {{&o->moe.E, 0, saved->E},           {&o->moe.K, 0, saved->K},
             {&o->moe.every, 0, saved->every},   {&o->moe.F, 0, saved->F},
             {&o->moe.shared, 0, saved->shared}, {&o->moe.aux_coef, 1, saved->aux_coef},
             {&o->moe.z_coef, 1, saved->z_coef}, {&o->moe.bias_rate, 1, saved->bias_rate},
             {&o->moe.capacity, 1, saved->capacity}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        if (td_flags_from(flags, n, info, f[i].value) != TD_FROM_DEFAULT) continue;
        if (f[i].is_float) *(float *)f[i].value = (float)f[i].saved;
        else *(int *)f[i].value = (int)f[i].saved;
    }
    if (saved->E == 0) return; /* the router flags of a dense model stay unset */
    if (td_flags_from(flags, n, info, &o->moe_router) == TD_FROM_DEFAULT)
        o->moe_router = saved->router == TD_ROUTER_SIGMOID ? "sigmoid" : "softmax";
    if (td_flags_from(flags, n, info, &o->moe_norm_topk) == TD_FROM_DEFAULT)
        o->moe_norm_topk = saved->norm_topk == TD_TIE_ON ? "on" : "off";
}

/* The model family's flags: the checkpoint's where not given (a given one
 * that contradicts it is refused at the load, td_ckpt_resume_check), and
 * its rope scaling, which no flag sets. */
static void resume_family(td_train_opts *o, const td_flag *flags, int n, const td_flags_info *info,
                          const td_manifest *m, const char *dir) {
    td_gpt_config saved;
    td_ckpt_manifest_config(m, dir, &saved);
    if (td_flags_from(flags, n, info, &o->arch) != TD_FROM_DEFAULT && td_arch_parse(o->arch) != (int)saved.arch)
        return; /* another family: the load names the difference */
    o->arch = td_arch_name(saved.arch);
    o->rope_scaling = saved.rope_scaling;
    resume_moe(o, flags, n, info, &saved.moe);
    if (saved.arch == TD_ARCH_GPT2) return;
    if (td_flags_from(flags, n, info, &o->kv_heads) == TD_FROM_DEFAULT) o->kv_heads = saved.KV;
    if (td_flags_from(flags, n, info, &o->ffn_hidden) == TD_FROM_DEFAULT) o->ffn_hidden = saved.F;
    if (td_flags_from(flags, n, info, &o->norm_eps) == TD_FROM_DEFAULT) o->norm_eps = saved.norm_eps;
    if (td_flags_from(flags, n, info, &o->rope_theta) == TD_FROM_DEFAULT) o->rope_theta = saved.rope_theta;
    if (td_flags_from(flags, n, info, &o->tie_embeddings) == TD_FROM_DEFAULT)
        o->tie_embeddings = td_gpt_tied(&saved) ? "on" : "off";
}

void td_train_resume_defaults(td_train_opts *o, const td_flag *flags, int n, const td_flags_info *info) {
    if (!o->resume) return;
    int latest = strcmp(o->resume, "latest") == 0;
    if (latest && !o->out) return; /* refused by the checks after the parse */
    td_manifest m;
    char dir[PATH_MAX], where[PATH_MAX + 64];
    td_ckpt_read_manifest(latest ? o->out : o->resume, "--resume", &m, dir, sizeof dir);
    struct {
        int *value;
        const char *flag;
        int saved;
    } model[] = {{&o->layers, "--layers", m.layers}, {&o->heads, "--heads", m.heads},
                 {&o->embd, "--embd", m.embd},       {&o->seq, "--seq", m.seq},
                 {&o->vocab, "--vocab", m.vocab}};
    for (int i = 0; i < 5; i++) {
        int from = td_flags_from(flags, n, info, model[i].value);
        /* only a token file of ids has a --vocab to give (gpt2's is fixed,
         * text builds its own) */
        if (model[i].value == &o->vocab && from == TD_FROM_DEFAULT && m.tok_kind != TD_TOK_IDS) continue;
        if (from == TD_FROM_DEFAULT) *model[i].value = model[i].saved;
        TD_CHECK(*model[i].value == model[i].saved,
                 "--resume %s: the checkpoint is of another model: it has %s %d, this run %d%s; leave %s out (a "
                 "resume takes it from the checkpoint) or give %d", dir, model[i].flag, model[i].saved,
                 *model[i].value, origin(info, from, where, sizeof where), model[i].flag, model[i].saved);
    }
    resume_family(o, flags, n, info, &m, dir);
    /* a tokenizer.json: its file (the resume compares its XXH3, so another
     * path to the same bytes is fine) */
    const char *kind = m.tok_kind == TD_TOK_HF ? td_flags_strdup(m.tok_file) /* outlives m */
                                               : td_tokenizer_name((td_tokenizer_kind)m.tok_kind);
    int from = td_flags_from(flags, n, info, &o->tokenizer);
    if (from == TD_FROM_DEFAULT && m.tok_kind != TD_TOK_IDS) o->tokenizer = kind;
    int same_file = m.tok_kind == TD_TOK_HF && td_tokenizer_is_file(o->tokenizer);
    TD_CHECK(!o->tokenizer || same_file || strcmp(o->tokenizer, kind) == 0,
             "--resume %s: --tokenizer %s%s contradicts the checkpoint's tokenizer %s%s; leave it out (a resume "
             "takes it from the checkpoint)", dir, o->tokenizer, origin(info, from, where, sizeof where), kind,
             m.tok_kind == TD_TOK_IDS ? " (token ids, no --tokenizer)" : "");
    /* the data order of the steps to come is a function of the seed; a
     * step-0 checkpoint (an import) has none yet */
    from = td_flags_from(flags, n, info, &o->seed);
    if (m.step > 0 && from == TD_FROM_DEFAULT) o->seed = m.seed;
    TD_CHECK(m.step == 0 || o->seed == m.seed,
             "--resume %s: --seed %llu%s contradicts the checkpoint's --seed %llu (the data order depends on it); "
             "leave it out or give %llu", dir, o->seed, origin(info, from, where, sizeof where),
             (unsigned long long)m.seed, (unsigned long long)m.seed);
    /* the data: only run_config records it (a path as it was given; files
     * may have moved, so a different --data is no contradiction) */
    td_jv *rc = NULL;
    td_err e;
    if (m.run_config && !o->data && td_flags_from(flags, n, info, &o->data) == TD_FROM_DEFAULT) {
        TD_CHECK(td_json_parse(m.run_config, strlen(m.run_config), &rc, &e) == 0, "%s/manifest.json: run_config: %s",
                 dir, e.msg);
        const td_jv *d = td_json_get(rc, "data");
        if (d && d->type == TD_JV_STR) {
            o->data = td_flags_strdup(d->str); /* a flag value: lives until exit */
        }
        td_json_free(rc);
    }
    td_manifest_free(&m);
}

int td_train_print_config(const td_train_opts *o) {
    if (td_comm_rank(td_comm_world()) == 0) {
        printf("%s\n", o->run_config);
        fflush(stdout);
    }
    return 0;
}
