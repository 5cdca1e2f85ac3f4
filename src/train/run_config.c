/* --resume supplies the model flags: a checkpoint records its model config,
 * tokenizer and seed (and, since run_config, every flag), so a resume
 * needs none of them and a contradicting one is refused before any work. */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* The lines a resume prints at the run's start (after its config line, so
 * that a refusal before it stays one line): where it saves, each change. */
static char g_notes[4096];

static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void note(const char *fmt, ...) {
    size_t n = strlen(g_notes);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_notes + n, sizeof g_notes - n, fmt, ap);
    va_end(ap);
}

/* ---- what a resume continues: its training settings and its output ---- */

static const td_flag *flag_named(const td_flag *flags, int n, const char *key) {
    for (int i = 0; i < n; i++)
        if (strcmp(flags[i].name + 2, key) == 0) return &flags[i];
    return NULL;
}

/* v as a value of f's type into *out (f's own storage type); 0: v does not
 * fit (another type: a hand-edited manifest), so the flag keeps its value */
static int jv_value(const td_flag *f, const td_jv *v, void *out) {
    if (!v) return 0;
    if (f->type == TD_FLAG_STR) {
        if (v->type != TD_JV_STR) return 0;
        *(const char **)out = v->str;
        return 1;
    }
    if (f->type == TD_FLAG_BOOL) {
        if (v->type != TD_JV_BOOL) return 0;
        *(int *)out = v->boolean;
        return 1;
    }
    if (v->type != TD_JV_NUM) return 0;
    if (f->type == TD_FLAG_INT) {
        if (v->num != (double)(int)v->num) return 0;
        *(int *)out = (int)v->num;
    } else if (f->type == TD_FLAG_FLOAT) {
        *(float *)out = (float)v->num;
    } else {
        return 0; /* no other type is continued */
    }
    return 1;
}

/* the value at p (of f's type) as text */
static const char *value_text(const td_flag *f, const void *p, char *buf, size_t cap) {
    if (f->type == TD_FLAG_STR) snprintf(buf, cap, "%s", *(const char *const *)p ? *(const char *const *)p : "(none)");
    else if (f->type == TD_FLAG_INT) snprintf(buf, cap, "%d", *(const int *)p);
    else if (f->type == TD_FLAG_BOOL) snprintf(buf, cap, "%s", *(const int *)p ? "on" : "off");
    else snprintf(buf, cap, "%g", (double)*(const float *)p);
    return buf;
}

static int same_value(const td_flag *f, const void *a, const void *b) {
    if (f->type == TD_FLAG_STR) {
        const char *x = *(const char *const *)a, *y = *(const char *const *)b;
        return x && y ? strcmp(x, y) == 0 : x == y;
    }
    if (f->type == TD_FLAG_INT || f->type == TD_FLAG_BOOL) return *(const int *)a == *(const int *)b;
    return *(const float *)a == *(const float *)b;
}

/* The training settings a resume continues: precision, batch, micro-batches,
 * the schedule and the optimizer, document masking, and the output's cadence. Each flag not
 * given takes the checkpoint's value (its run_config's); a given one that
 * differs is one line, so a change is never silent. --steps is the step to
 * stop at; the schedule's horizon (--schedule-steps) stays the checkpoint's
 * unless given, so a longer run does not re-stretch the decay. A manifest
 * without run_config gives none of them (the defaults, as before it). */
static void resume_training(td_train_opts *o, const td_flag *flags, int n, const td_flags_info *info,
                            const td_jv *rc) {
    if (!rc) return;
    static const char *const continued[] = {"precision", "loss-scale", "batch", "grad-accum",   "steps",
                                            "lr",        "min-lr",     "warmup", "lr-schedule", "lr-decay-fraction", "lr-decay-shape", "batch-rampup", "weight-decay", "beta1",
                                            "beta2",     "eps",        "clip",   "eval-every",   "eval-iters",
                                            "save-every", "keep", "optimizer", "muon-lr", "muon-momentum",
                                            "muon-weight-decay", "muon-nesterov", "doc-mask", "eod", "eod-mask-loss", "doc-positions"};
    char a[128], b[128];
    for (size_t i = 0; i < sizeof continued / sizeof continued[0]; i++) {
        const td_flag *f = flag_named(flags, n, continued[i]);
        TD_ASSERT(f);
        /* the output's cadence belongs to the directory saved into */
        int output = strcmp(continued[i], "save-every") == 0 || strcmp(continued[i], "keep") == 0;
        if (output && !o->out) continue;
        union {
            int i;
            float f;
            const char *s;
        } saved;
        if (!jv_value(f, td_json_get(rc, continued[i]), &saved)) continue;
        if (td_flags_from(flags, n, info, f->ptr) == TD_FROM_DEFAULT) {
            if (f->type == TD_FLAG_STR) *(const char **)f->ptr = td_flags_strdup(saved.s);
            else if (f->type == TD_FLAG_INT || f->type == TD_FLAG_BOOL) *(int *)f->ptr = saved.i;
            else *(float *)f->ptr = saved.f;
        } else if (!same_value(f, f->ptr, &saved)) {
            note("resume: %s %s instead of the checkpoint's %s%s\n", f->name, value_text(f, f->ptr, a, sizeof a),
                   value_text(f, &saved, b, sizeof b),
                   strcmp(continued[i], "steps") == 0 ? " (the step to stop at; the schedule's horizon is "
                                                       "--schedule-steps)" : "");
        }
    }
    /* the optimizer's state is its own: Muon's momentum buffers are not
     * AdamW's moments (a checkpoint before --optimizer is AdamW's) */
    union {
        const char *s;
        int i;
    } opt = {0};
    const char *was = jv_value(flag_named(flags, n, "optimizer"), td_json_get(rc, "optimizer"), &opt) && opt.s
                          ? opt.s : "adamw";
    const char *now = o->optimizer ? o->optimizer : "adamw";
    TD_CHECK(strcmp(was, now) == 0,
             "--optimizer %s: the checkpoint was trained with --optimizer %s, whose state it holds; valid: %s "
             "(or a new run without --resume)", now, was, was);
    /* the horizon: the checkpoint's --schedule-steps, or, before that flag,
     * its --steps (the horizon then) */
    const td_flag *sf = flag_named(flags, n, "schedule-steps"), *stf = flag_named(flags, n, "steps");
    union {
        int i;
        const char *s;
    } saved = {0};
    if (!jv_value(sf, td_json_get(rc, "schedule-steps"), &saved) || saved.i <= 0)
        if (!jv_value(stf, td_json_get(rc, "steps"), &saved)) return;
    int horizon = saved.i;
    if (td_flags_from(flags, n, info, &o->schedule_steps) == TD_FROM_DEFAULT) o->schedule_steps = horizon;
    else if (o->schedule_steps != horizon)
        note("resume: --schedule-steps %d instead of the checkpoint's %d: the learning rate schedule's horizon "
               "moves\n", o->schedule_steps, horizon);
}

/* Where a resume saves: --out if given; else the trident output directory
 * it resumed from (the step directory's parent, which has latest), so that
 * a resume never trains and drops its work. A checkpoint that is not in
 * such a directory (an import, a copied step directory, a manifest without
 * run_config) or one that cannot be written needs --out: the run is
 * refused before any work (td_preflight, after the checkpoint's own checks,
 * which name a damaged checkpoint first). */
static void resume_out(td_train_opts *o, const td_manifest *m, const char *dir) {
    if (o->out) return;
    char parent[PATH_MAX], link[PATH_MAX + 16], real_parent[PATH_MAX], real_step[PATH_MAX], why[PATH_MAX + 512];
    snprintf(parent, sizeof parent, "%s", dir);
    size_t len = strlen(parent);
    while (len > 1 && parent[len - 1] == '/') parent[--len] = 0;
    char *slash = strrchr(parent, '/');
    if (!slash) snprintf(parent, sizeof parent, ".");
    else if (slash == parent) parent[1] = 0;
    else *slash = 0;
    snprintf(link, sizeof link, "%s/latest", parent);
    struct stat st;
    const char *rs = realpath(dir, real_step), *rp = realpath(parent, real_parent);
    const char *base = rs ? strrchr(real_step, '/') + 1 : "";
    why[0] = 0;
    if (!m->run_config)
        snprintf(why, sizeof why, "it was not saved by 'trident train' (an import, or a checkpoint from before "
                 "run_config: its manifest has no run_config)");
    else if (!rs || !rp || strncmp(base, "step-", 5) != 0 || lstat(link, &st) != 0 || !S_ISLNK(st.st_mode))
        snprintf(why, sizeof why, "it is not a step directory of a 'trident train --out' directory (no %s link)", link);
    else if (access(parent, W_OK) != 0)
        snprintf(why, sizeof why, "%s, the directory it was saved in, cannot be written (%s)", parent, strerror(errno));
    if (why[0]) {
        char msg[sizeof why + PATH_MAX + 128];
        snprintf(msg, sizeof msg, "--resume %s: %s; give --out DIR to save the resumed run", dir, why);
        o->resume_needs_out = td_flags_strdup(msg);
        return;
    }
    o->out = td_flags_strdup(parent);
    note("resume: saving into %s, the directory resumed from (--out DIR saves elsewhere)\n", o->out);
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
    /* the data, the training settings and the output: only run_config
     * records them */
    td_jv *rc = NULL;
    td_err e;
    if (m.run_config) {
        TD_CHECK(td_json_parse(m.run_config, strlen(m.run_config), &rc, &e) == 0, "%s/manifest.json: run_config: %s",
                 dir, e.msg);
        const td_jv *d = td_json_get(rc, "data");
        if (!o->data && td_flags_from(flags, n, info, &o->data) == TD_FROM_DEFAULT && d && d->type == TD_JV_STR)
            o->data = td_flags_strdup(d->str); /* a flag value: lives until exit */
    }
    g_notes[0] = 0;
    resume_out(o, &m, dir);
    resume_training(o, flags, n, info, rc);
    td_json_free(rc);
    o->resume_notes = g_notes[0] ? td_flags_strdup(g_notes) : NULL;
    td_manifest_free(&m);
}

int td_train_print_config(const td_train_opts *o) {
    if (td_comm_rank(td_comm_world()) == 0) {
        printf("%s\n", o->run_config);
        fflush(stdout);
    }
    return 0;
}
