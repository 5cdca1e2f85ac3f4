/* --format hf-llama: a Llama-family checkpoint as a Hugging Face
 * LlamaForCausalLM directory and back (ckpt_interop.h,
 * docs/export-import.md). The parameter table's rows already carry
 * LlamaForCausalLM's names and shapes (src/model/arch.c: nn.Linear weights
 * [out, in] as trident stores them, the vocabulary's real rows), so a
 * tensor is written and read as it lies in the canonical buffer; what this
 * file adds is LlamaConfig's config.json, sharding with
 * model.safetensors.index.json, and the checks of a directory from
 * elsewhere. */
#include <errno.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "interop.h"
#include "trident/base.h"
#include "trident/formats_json.h"

#define INDEX_NAME "model.safetensors.index.json"
#define DEFAULT_SHARD_MB 5000.0 /* save_pretrained's max_shard_size "5GB" */

/* ---- config.json ----------------------------------------------------------- */

/* The shortest decimal that reads back (strtod, then to float for a float)
 * as x, so config.json says 1e-05 and 500000.0, not 9.99999975e-06. */
static void shortest(char *buf, size_t cap, double x, int is_float) {
    if (x == floor(x) && fabs(x) < 1e15) { /* 500000.0, as Python writes a float */
        snprintf(buf, cap, "%.1f", x);
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, cap, "%.*g", prec, x);
        double back = strtod(buf, NULL);
        if (is_float ? (float)back == (float)x : back == x) return;
    }
}

static char *config_format(const td_checkpoint *ck, const td_hf_config *hc, int bf16) {
    const td_gpt_config *c = &ck->cfg;
    size_t cap = 4096 + (hc->chars ? 12 * (size_t)c->V : 0), len = 0;
    char *s = malloc(cap), eps[32], theta[32], rs[512];
    if (!s) return NULL;
    shortest(eps, sizeof eps, c->norm_eps, 1);
    shortest(theta, sizeof theta, c->rope_theta, 0);
    const td_rope_scaling *r = &c->rope_scaling;
    if (r->factor > 0) {
        char f[32], lo[32], hi[32];
        shortest(f, sizeof f, r->factor, 0);
        shortest(lo, sizeof lo, r->low_freq_factor, 0);
        shortest(hi, sizeof hi, r->high_freq_factor, 0);
        snprintf(rs, sizeof rs, "{\n    \"rope_type\": \"llama3\",\n    \"factor\": %s,\n    \"low_freq_factor\": %s,\n"
                 "    \"high_freq_factor\": %s,\n    \"original_max_position_embeddings\": %d\n  }", f, lo, hi,
                 r->orig_max_pos);
    } else {
        snprintf(rs, sizeof rs, "null");
    }
    int gpt2 = strcmp(hc->tokenizer, "gpt2") == 0;
    len += (size_t)snprintf(s, cap,
        "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"model_type\": \"llama\",\n"
        "  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n  \"num_hidden_layers\": %d,\n"
        "  \"num_attention_heads\": %d,\n  \"num_key_value_heads\": %d,\n  \"head_dim\": %d,\n"
        "  \"hidden_act\": \"silu\",\n  \"max_position_embeddings\": %d,\n  \"vocab_size\": %d,\n"
        "  \"rms_norm_eps\": %s,\n  \"rope_theta\": %s,\n  \"rope_scaling\": %s,\n"
        "  \"attention_bias\": false,\n  \"attention_dropout\": 0.0,\n  \"mlp_bias\": false,\n"
        "  \"pretraining_tp\": 1,\n  \"initializer_range\": 0.02,\n  \"use_cache\": true,\n"
        "  \"tie_word_embeddings\": %s,\n  \"torch_dtype\": \"%s\",\n%s"
        "  \"trident_tokenizer\": \"%s\"",
        c->C, c->F, c->L, c->H, c->KV, c->C / c->H, c->T, c->V, eps, theta, rs,
        td_gpt_tied(c) ? "true" : "false", bf16 ? "bfloat16" : "float32",
        /* LlamaConfig defaults them to 1 and 2: ids of some other vocabulary */
        gpt2 ? "  \"bos_token_id\": 50256,\n  \"eos_token_id\": 50256,\n"
             : "  \"bos_token_id\": null,\n  \"eos_token_id\": null,\n",
        hc->tokenizer);
    len = td_hf_trident_chars_format(s, cap, len, hc);
    snprintf(s + len, cap - len, "\n}\n");
    return s;
}

/* ---- export ---------------------------------------------------------------- */

/* --overwrite replaces a directory that holds only what this export writes */
int td_hf_llama_file(const char *name) {
    static const char *const fixed[] = {"model.safetensors", INDEX_NAME, "config.json", "generation_config.json"};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        if (strcmp(name, fixed[i]) == 0) return 1;
    for (int i = 0; i < TD_TOK_FILES; i++)
        if (strcmp(name, td_tok_file_names[i]) == 0) return 1;
    unsigned a, b;
    int end = 0;
    return sscanf(name, "model-%5u-of-%5u.safetensors%n", &a, &b, &end) == 2 && end == (int)strlen(name) &&
           strlen(name) == strlen("model-00001-of-00002.safetensors");
}

void td_export_hf_llama(const td_checkpoint *ck, const td_param_table *t, const td_export_opts *o) {
    /* shards as save_pretrained cuts them: tensors in order, a new shard
     * when the next would take this one past the limit (a tensor larger
     * than the limit alone in its own) */
    double limit = (o->shard_mb > 0 ? o->shard_mb : DEFAULT_SHARD_MB) * 1e6;
    size_t elem = o->bf16 ? 2 : 4, total = 0, size = 0;
    int *first = td_alloc(sizeof(int) * (size_t)(t->n_rows + 1), TD_MEM_OTHER), n = 0;
    for (int r = 0; r < t->n_rows; r++) {
        const td_param *p = &t->rows[r];
        size_t bytes = elem * (size_t)p->shape[0] * (p->ndim == 2 ? (size_t)p->shape[1] : 1);
        if (n == 0 || (size > 0 && (double)(size + bytes) > limit)) first[n++] = r, size = 0;
        size += bytes, total += bytes;
    }
    first[n] = t->n_rows;
    TD_CHECK(n <= 99999, "export: --shard-mb %g cuts the model into %d files; save_pretrained's names number "
             "at most 99999", o->shard_mb, n);
    td_st_plan *plans = td_alloc(sizeof *plans * (size_t)n, TD_MEM_OTHER);
    char (*files)[48] = td_alloc(sizeof *files * (size_t)n, TD_MEM_OTHER);
    for (int i = 0; i < n; i++) {
        td_st_plan_prepare(&plans[i], t, first[i], first[i + 1], "", o->bf16 ? TD_ST_BF16 : TD_ST_F32);
        if (n == 1) snprintf(files[i], sizeof files[i], "model.safetensors");
        else snprintf(files[i], sizeof files[i], "model-%05d-of-%05d.safetensors", i + 1, n);
    }
    void *scratch = td_st_plan_scratch(plans, n);
    char *index = NULL;
    size_t ilen = 0;
    if (n > 1) { /* save_pretrained's index: total_size is the tensors' bytes */
        size_t cap = 128 + (size_t)t->n_rows * (sizeof t->rows[0].name + 64);
        index = td_export_checked(malloc(cap), INDEX_NAME);
        ilen = (size_t)snprintf(index, cap, "{\n  \"metadata\": {\n    \"total_size\": %zu\n  },\n"
                                "  \"weight_map\": {", total);
        for (int i = 0; i < n; i++)
            for (int r = first[i]; r < first[i + 1]; r++) {
                ilen += (size_t)snprintf(index + ilen, cap - ilen, "%s\n    ", r ? "," : "");
                int k = td_json_put_str(index, cap, ilen, t->rows[r].name);
                TD_ASSERT(k > 0);
                ilen = (size_t)k;
                ilen += (size_t)snprintf(index + ilen, cap - ilen, ": \"%s\"", files[i]);
            }
        ilen += (size_t)snprintf(index + ilen, cap - ilen, "\n  }\n}\n");
    }
    td_hf_config hc = td_export_hf_config(ck);
    char *config = td_export_checked(config_format(ck, &hc, o->bf16), "config.json");
    char *gen = td_export_checked(td_hf_generation_config_format(&hc), "generation_config.json");
    char *tok[TD_TOK_FILES];
    size_t tok_len[TD_TOK_FILES];
    int merges;
    td_export_tok_files(ck, &hc, tok, tok_len, &merges);

    td_staged d;
    td_staged_begin(&d, "export", o->out, 1, o->overwrite);
    size_t bytes = 0;
    for (int i = 0; i < n; i++) {
        int fd = td_staged_create(&d, files[i]);
        td_st_plan_write(&plans[i], t, ck->params, scratch, &d, fd, files[i]);
        td_staged_close(&d, fd, files[i]);
        bytes += plans[i].bytes;
    }
    if (index) td_export_put(&d, INDEX_NAME, index, ilen);
    td_export_put(&d, "config.json", config, strlen(config));
    td_export_put(&d, "generation_config.json", gen, strlen(gen));
    for (int f = 0; f < TD_TOK_FILES; f++)
        if (tok[f]) td_export_put(&d, td_tok_file_names[f], tok[f], tok_len[f]);
    td_staged_commit(&d);

    printf("export: wrote %s/ (Hugging Face LlamaForCausalLM, %s: ", o->out, o->bf16 ? "bf16" : "fp32");
    if (n == 1) printf("model.safetensors %d tensors %zu bytes", t->n_rows, bytes);
    else printf("%d shards cut at %g MB, %zu bytes, and %s", n, limit / 1e6, bytes, INDEX_NAME);
    printf(", config.json, generation_config.json");
    td_export_tok_summary(ck, merges);
    for (int f = 0; f < TD_TOK_FILES; f++) free(tok[f]);
    free(gen);
    free(config);
    free(index);
    for (int i = 0; i < n; i++) td_st_plan_free(&plans[i]);
    td_free(scratch);
    td_free(files);
    td_free(plans);
    td_free(first);
}

/* ---- import: config.json --------------------------------------------------- */

static td_jv *read_json(const char *path) {
    size_t n;
    char *text = (char *)td_import_read_all(path, &n);
    td_jv *v;
    td_err e;
    TD_CHECK(td_json_parse(text, n, &v, &e) == 0, "import: %s: %s", path, e.msg);
    td_free(text);
    TD_CHECK(v->type == TD_JV_OBJ, "import: %s: the JSON is not an object", path);
    return v;
}

static int get_int(const td_jv *o, const char *key, int64_t lo, int64_t hi, const char *path) {
    int64_t x;
    td_err e;
    TD_CHECK(td_json_get_int(o, key, lo, hi, &x, &e) == 0, "import: %s: %s", path, e.msg);
    return (int)x;
}

/* A number in [lo, hi]; def when the field is absent (def < 0: required). */
static double get_num(const td_jv *o, const char *key, double lo, double hi, double def, const char *path,
                      const char *in) {
    const td_jv *v = td_json_get(o, key);
    TD_CHECK(v || def >= 0, "import: %s: field %s%s: missing", path, in, key);
    if (!v) return def;
    TD_CHECK(v->type == TD_JV_NUM && v->num >= lo && v->num <= hi, "import: %s: field %s%s: not a number in "
             "[%g, %g]", path, in, key, lo, hi);
    return v->num;
}

/* A field that, when present, must have the one value trident's Llama has. */
static void want(const td_jv *o, const char *key, const char *str, int boolean, const char *path) {
    const td_jv *v = td_json_get(o, key);
    if (!v) return;
    if (str)
        TD_CHECK(v->type == TD_JV_STR && strcmp(v->str, str) == 0, "import: %s: field %s: %s%s%s; trident's Llama "
                 "has \"%s\"", path, key, v->type == TD_JV_STR ? "\"" : "", v->type == TD_JV_STR ? v->str : "not a string",
                 v->type == TD_JV_STR ? "\"" : "", str);
    else
        TD_CHECK(v->type == TD_JV_BOOL && v->boolean == boolean, "import: %s: field %s: %s; trident's Llama has "
                 "none (%s)", path, key, v->type == TD_JV_BOOL ? (v->boolean ? "true" : "false") : "not a boolean",
                 boolean ? "true" : "false");
}

/* LlamaConfig's fields into a Llama config (its defaults where HF's
 * LlamaConfig has one and the file has none), every size checked against
 * what trident builds, so td_gpt_config_finish cannot refuse it. */
static void parse_config(const char *path, int seq, td_gpt_config *cfg, td_hf_config *hc) {
    td_jv *o = read_json(path);
    want(o, "model_type", "llama", 0, path);
    want(o, "hidden_act", "silu", 0, path);
    want(o, "attention_bias", NULL, 0, path);
    want(o, "mlp_bias", NULL, 0, path);
    td_gpt_config c = {.arch = TD_ARCH_LLAMA};
    c.L = get_int(o, "num_hidden_layers", 1, TD_MAX_LAYERS, path);
    c.C = get_int(o, "hidden_size", 1, TD_MAX_EMBD, path);
    c.H = get_int(o, "num_attention_heads", 1, c.C, path);
    TD_CHECK(c.C % c.H == 0, "import: %s: field hidden_size: %d is not divisible by num_attention_heads %d", path,
             c.C, c.H);
    c.KV = td_json_get(o, "num_key_value_heads") ? get_int(o, "num_key_value_heads", 1, c.H, path) : c.H;
    TD_CHECK(c.H % c.KV == 0, "import: %s: field num_key_value_heads: %d does not divide num_attention_heads %d",
             path, c.KV, c.H);
    const td_jv *hd = td_json_get(o, "head_dim");
    TD_CHECK(!hd || hd->type == TD_JV_NULL || (hd->type == TD_JV_NUM && hd->is_int && hd->i == c.C / c.H),
             "import: %s: field head_dim: trident's heads are hidden_size / num_attention_heads = %d", path,
             c.C / c.H);
    TD_CHECK((c.C / c.H) % 2 == 0, "import: %s: field hidden_size: the head size %d / %d = %d is odd; rotary "
             "positions need it even", path, c.C, c.H, c.C / c.H);
    c.F = get_int(o, "intermediate_size", 1, 4 * TD_MAX_EMBD, path);
    c.V = get_int(o, "vocab_size", 1, TD_MAX_VOCAB, path);
    int maxpos = get_int(o, "max_position_embeddings", 1, INT32_MAX, path);
    TD_CHECK(seq > 0 || maxpos <= TD_MAX_SEQ, "import: %s: field max_position_embeddings: %d is past trident's "
             "%d; pass --seq N (the context to train at)", path, maxpos, TD_MAX_SEQ);
    c.T = seq > 0 ? seq : maxpos;
    /* LlamaConfig's defaults: rms_norm_eps 1e-6, rope_theta 10000, untied */
    c.norm_eps = (float)get_num(o, "rms_norm_eps", 1e-30, 1.0, 1e-6, path, "");
    c.rope_theta = get_num(o, "rope_theta", 1e-30, 1e30, 10000.0, path, "");
    const td_jv *tie = td_json_get(o, "tie_word_embeddings");
    TD_CHECK(!tie || tie->type == TD_JV_BOOL, "import: %s: field tie_word_embeddings: not a boolean", path);
    c.tie = tie && tie->boolean ? TD_TIE_ON : TD_TIE_OFF;
    const td_jv *rs = td_json_get(o, "rope_scaling");
    if (rs && rs->type != TD_JV_NULL) {
        TD_CHECK(rs->type == TD_JV_OBJ, "import: %s: field rope_scaling: must be an object or null", path);
        /* "type" is the older transformers' name of "rope_type" */
        const td_jv *ty = td_json_get(rs, "rope_type") ? td_json_get(rs, "rope_type") : td_json_get(rs, "type");
        TD_CHECK(ty && ty->type == TD_JV_STR && strcmp(ty->str, "llama3") == 0,
                 "import: %s: field rope_scaling: rope_type %s%s%s is not supported; trident implements \"llama3\" "
                 "(Llama 3.1's) only, or null", path, ty && ty->type == TD_JV_STR ? "\"" : "",
                 ty ? (ty->type == TD_JV_STR ? ty->str : "(not a string)") : "(missing)",
                 ty && ty->type == TD_JV_STR ? "\"" : "");
        td_rope_scaling *r = &c.rope_scaling;
        r->factor = get_num(rs, "factor", 1e-30, 1e30, -1, path, "rope_scaling.");
        r->low_freq_factor = get_num(rs, "low_freq_factor", 1e-30, 1e30, -1, path, "rope_scaling.");
        r->high_freq_factor = get_num(rs, "high_freq_factor", 1e-30, 1e30, -1, path, "rope_scaling.");
        TD_CHECK(r->high_freq_factor > r->low_freq_factor, "import: %s: field rope_scaling.high_freq_factor: %g "
                 "is not above low_freq_factor %g", path, r->high_freq_factor, r->low_freq_factor);
        r->orig_max_pos = get_int(rs, "original_max_position_embeddings", 1, 1 << 30, path);
    }
    hc->V = c.V;
    td_err e;
    TD_CHECK(td_hf_trident_fields_parse(o, hc, &e) == 0, "import: %s: %s", path, e.msg);
    td_json_free(o);
    td_gpt_config_finish(&c); /* cannot fail: every field was checked above */
    *cfg = c;
}

/* ---- import: the tensors ----------------------------------------------------- */

typedef struct {
    const td_param_table *t;
    float *params;
    unsigned char *seen;  /* [n_rows] */
    const char *config;   /* its path, for messages */
    const td_jv *map;     /* the index's weight_map, or NULL */
    const char *index;    /* its path */
    unsigned char *found; /* [map->n]: the index's entries met in their file */
    float *head;          /* a tied model's stored lm_head.weight, to check */
    char head_file[PATH_MAX];
} reader;

/* Older save_pretrained files hold each layer's rotary table
 * ("model.layers.N.self_attn.rotary_emb.inv_freq"): a buffer computed from
 * rope_theta, not a weight. */
static int rotary_buffer(const char *name) {
    const char *tail = ".self_attn.rotary_emb.inv_freq";
    size_t n = strlen(name), k = strlen(tail);
    return strncmp(name, "model.layers.", 13) == 0 && n > k && strcmp(name + n - k, tail) == 0;
}

static void read_file(reader *rd, const char *path, const char *file) {
    const td_param_table *t = rd->t;
    size_t len;
    unsigned char *buf = td_import_read_all(path, &len);
    uint64_t n;
    td_st_header h;
    td_err e;
    TD_CHECK(td_st_header_len(buf, len, &n, &e) == 0 &&
             td_st_header_parse((const char *)buf + 8, n, len, &h, &e) == 0, "import: %s: %s", path, e.msg);
    for (int i = 0; i < h.n; i++) {
        const td_st_tensor *s = &h.t[i];
        if (rd->map) { /* the index must say where each tensor is */
            const td_jv *m = td_json_get(rd->map, s->name);
            TD_CHECK(m && m->type == TD_JV_STR && strcmp(m->str, file) == 0, "import: %s: tensor \"%s\" is in %s, "
                     "but %s maps it to %s", path, s->name, file, rd->index,
                     !m ? "nothing" : m->type == TD_JV_STR ? m->str : "a non-string");
            rd->found[m - rd->map->items] = 1;
        }
        if (rotary_buffer(s->name)) continue;
        const td_param *p = td_param_find(t, s->name);
        int tied_head = !p && td_gpt_tied(&t->cfg) && strcmp(s->name, "lm_head.weight") == 0;
        if (tied_head) p = td_param_lookup(t, TD_T_WTE, 0); /* stored anyway: it must be embed_tokens */
        int layer = -1;
        TD_CHECK(p || sscanf(s->name, "model.layers.%d.", &layer) != 1 || layer < t->cfg.L || layer < 0,
                 "import: %s: tensor \"%s\": layer %d, but %s says num_hidden_layers %d", path, s->name, layer,
                 rd->config, t->cfg.L);
        TD_CHECK(p, "import: %s: tensor \"%s\" is not a LlamaForCausalLM tensor trident knows (%s says "
                 "tie_word_embeddings %s, attention_bias and mlp_bias false)", path, s->name, rd->config,
                 td_gpt_tied(&t->cfg) ? "true" : "false");
        int r = (int)(p - t->rows);
        TD_CHECK(tied_head || !rd->seen[r], "import: %s: tensor \"%s\" appears twice", path, s->name);
        TD_CHECK(s->ndim == p->ndim && s->shape[0] == p->shape[0] && (p->ndim == 1 || s->shape[1] == p->shape[1]),
                 "import: %s: tensor \"%s\": shape [%" PRId64 "%s%" PRId64 "]%s, but %s's sizes need [%d%s%d]", path,
                 s->name, s->ndim ? s->shape[0] : 0, s->ndim > 1 ? ", " : "", s->ndim > 1 ? s->shape[1] : 0,
                 s->ndim > 2 ? " (more dimensions)" : "", rd->config, p->shape[0], p->ndim > 1 ? ", " : "",
                 p->ndim > 1 ? p->shape[1] : 0);
        TD_CHECK(s->dtype == TD_ST_F32 || s->dtype == TD_ST_BF16 || s->dtype == TD_ST_F16,
                 "import: %s: tensor \"%s\": dtype %s; trident reads F32, BF16 or F16", path, s->name,
                 td_st_dtype_name(s->dtype));
        size_t numel = (size_t)p->shape[0] * (p->ndim == 2 ? (size_t)p->shape[1] : 1);
        if (tied_head) {
            rd->head = td_alloc(sizeof(float) * numel, TD_MEM_OTHER);
            snprintf(rd->head_file, sizeof rd->head_file, "%s", path);
            td_import_to_float(rd->head, buf + h.data_off + s->begin, numel, s->dtype, path, s->name);
            continue;
        }
        rd->seen[r] = 1;
        /* the canonical buffer is the file's layout: [out, in], the real
         * vocabulary rows first (the padding rows stay zero) */
        td_import_to_float(rd->params + p->offset, buf + h.data_off + s->begin, numel, s->dtype, path, s->name);
    }
    td_st_header_free(&h);
    td_free(buf);
}

/* A file name from the index: a plain name in the index's directory. */
static void check_file_name(const char *index, const char *name, const char *tensor) {
    TD_CHECK(name[0] && !strchr(name, '/') && strcmp(name, ".") && strcmp(name, ".."),
             "import: %s: weight_map: tensor \"%s\": file \"%s\" is not a file name in the index's directory",
             index, tensor, name);
}

void td_import_hf_llama(const td_import_opts *o, td_gpt_config *cfg, td_hf_config *hc, float **params,
                        td_param_table *t) {
    /* --in: a directory (its index if it has one, else its
     * model.safetensors), an index, or one safetensors file */
    char dir[PATH_MAX], index[PATH_MAX + 64], model[PATH_MAX + 64], config[PATH_MAX + 64];
    struct stat st;
    TD_CHECK(stat(o->in, &st) == 0, "import: --in %s: cannot read it: %s", o->in, strerror(errno));
    index[0] = 0;
    if (S_ISDIR(st.st_mode)) {
        snprintf(dir, sizeof dir, "%s", o->in);
        snprintf(index, sizeof index, "%s/%s", dir, INDEX_NAME);
        if (stat(index, &st) != 0) index[0] = 0;
        snprintf(model, sizeof model, "%s/model.safetensors", dir);
    } else {
        char tmp[PATH_MAX];
        snprintf(tmp, sizeof tmp, "%s", o->in);
        snprintf(dir, sizeof dir, "%s", dirname(tmp));
        size_t n = strlen(o->in);
        if (n >= 5 && strcmp(o->in + n - 5, ".json") == 0) snprintf(index, sizeof index, "%s", o->in);
        else snprintf(model, sizeof model, "%s", o->in);
    }
    snprintf(config, sizeof config, "%s/config.json", dir);
    const char *cpath = o->config ? o->config : config;
    parse_config(cpath, o->seq, cfg, hc);
    td_param_table_build(t, cfg, 1);

    reader rd = {.t = t, .config = cpath};
    rd.params = td_alloc(sizeof(float) * t->numel, TD_MEM_PARAMS);
    memset(rd.params, 0, sizeof(float) * t->numel);
    rd.seen = td_alloc((size_t)t->n_rows, TD_MEM_OTHER);
    memset(rd.seen, 0, (size_t)t->n_rows);
    td_jv *idx = NULL;
    if (index[0]) {
        idx = read_json(index);
        rd.map = td_json_get(idx, "weight_map");
        rd.index = index;
        TD_CHECK(rd.map && rd.map->type == TD_JV_OBJ && rd.map->n > 0, "import: %s: field weight_map: missing, "
                 "empty or not an object", index);
        rd.found = td_alloc((size_t)rd.map->n, TD_MEM_OTHER);
        memset(rd.found, 0, (size_t)rd.map->n);
        for (int i = 0; i < rd.map->n; i++) { /* every name checked before any is opened */
            const td_jv *f = &rd.map->items[i];
            TD_CHECK(f->type == TD_JV_STR, "import: %s: weight_map: tensor \"%s\": the file is not a string", index,
                     rd.map->keys[i]);
            check_file_name(index, f->str, rd.map->keys[i]);
        }
        /* each file once, in the order the index first names it */
        for (int i = 0; i < rd.map->n; i++) {
            const td_jv *f = &rd.map->items[i];
            int again = 0;
            for (int j = 0; j < i && !again; j++) again = strcmp(rd.map->items[j].str, f->str) == 0;
            if (again) continue;
            char path[PATH_MAX + 64];
            snprintf(path, sizeof path, "%s/%s", dir, f->str);
            read_file(&rd, path, f->str);
        }
        for (int i = 0; i < rd.map->n; i++)
            TD_CHECK(rd.found[i], "import: %s: weight_map: tensor \"%s\" is not in %s", index, rd.map->keys[i],
                     rd.map->items[i].str);
    } else {
        read_file(&rd, model, NULL);
    }
    for (int r = 0; r < t->n_rows; r++)
        TD_CHECK(rd.seen[r], "import: %s: tensor \"%s\" is missing (%s says num_hidden_layers %d, "
                 "tie_word_embeddings %s)", index[0] ? index : model, t->rows[r].name, cpath, cfg->L,
                 td_gpt_tied(cfg) ? "true" : "false");
    if (rd.head) { /* a tied head stored anyway must be the embedding */
        const td_param *wte = td_param_lookup(t, TD_T_WTE, 0);
        TD_CHECK(memcmp(rd.head, rd.params + wte->offset, sizeof(float) * (size_t)cfg->V * (size_t)cfg->C) == 0,
                 "import: %s: tensor \"lm_head.weight\" differs from \"model.embed_tokens.weight\", but %s says "
                 "tie_word_embeddings true", rd.head_file, cpath);
        td_free(rd.head);
    }
    td_free(rd.found);
    td_json_free(idx);
    td_free(rd.seen);
    *params = rd.params;
}
