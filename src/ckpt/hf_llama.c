/* A Hugging Face directory of the Llama family (interop.h's td_hf_family):
 * --format hf-llama's LlamaForCausalLM here, hf_mixtral.c's
 * MixtralForCausalLM over the same code (ckpt_interop.h,
 * docs/export-import.md). The parameter table's rows already carry
 * LlamaForCausalLM's names and shapes (src/model/arch.c: nn.Linear weights
 * [out, in] as trident stores them, the vocabulary's real rows), so a
 * tensor is written and read as it lies in the canonical buffer (a family
 * may cut a row into several tensors: td_hf_item); what this file adds is
 * config.json's common fields, sharding with model.safetensors.index.json,
 * and the checks of a directory from elsewhere. */
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

void td_hf_shortest(char *buf, size_t cap, double x, int is_float) {
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

/* The fields every family's config.json has, the family's own (after
 * rope_theta), then the tokenizer's. */
static char *config_format(const td_hf_family *f, const td_checkpoint *ck, const td_hf_config *hc, int bf16) {
    const td_gpt_config *c = &ck->cfg;
    char *own = f->config_format(ck);
    if (!own) return NULL;
    size_t cap = 4096 + strlen(own) + (hc->chars ? 12 * (size_t)c->V : 0), len = 0;
    char *s = malloc(cap), eps[32], theta[32];
    if (!s) {
        free(own);
        return NULL;
    }
    td_hf_shortest(eps, sizeof eps, c->norm_eps, 1);
    td_hf_shortest(theta, sizeof theta, c->rope_theta, 0);
    char ids[96];
    int64_t id = td_hf_eos_id(hc);
    if (id >= 0)
        snprintf(ids, sizeof ids, "  \"bos_token_id\": %" PRId64 ",\n  \"eos_token_id\": %" PRId64 ",\n", id, id);
    else
        snprintf(ids, sizeof ids, "  \"bos_token_id\": null,\n  \"eos_token_id\": null,\n");
    len += (size_t)snprintf(s, cap,
        "{\n  \"architectures\": [\"%s\"],\n  \"model_type\": \"%s\",\n"
        "  \"hidden_size\": %d,\n  \"intermediate_size\": %d,\n  \"num_hidden_layers\": %d,\n"
        "  \"num_attention_heads\": %d,\n  \"num_key_value_heads\": %d,\n  \"head_dim\": %d,\n"
        "  \"hidden_act\": \"silu\",\n  \"max_position_embeddings\": %d,\n  \"vocab_size\": %d,\n"
        "  \"rms_norm_eps\": %s,\n  \"rope_theta\": %s,%s\n"
        "  \"attention_dropout\": 0.0,\n  \"initializer_range\": 0.02,\n  \"use_cache\": true,\n"
        "  \"tie_word_embeddings\": %s,\n  \"torch_dtype\": \"%s\",\n%s"
        "  \"trident_tokenizer\": \"%s\"",
        f->cls, f->model_type, c->C, c->moe.E > 0 ? c->moe.F : c->F, c->L, c->H, c->KV, c->C / c->H, c->T, c->V,
        eps, theta, own, td_gpt_tied(c) ? "true" : "false", bf16 ? "bfloat16" : "float32",
        /* LlamaConfig defaults them to 1 and 2: ids of some other vocabulary */
        ids, hc->tokenizer);
    free(own);
    len = td_hf_trident_chars_format(s, cap, len, hc);
    snprintf(s + len, cap - len, "\n}\n");
    return s;
}

/* Llama's own: rope scaling (Llama 3.1's), no biases */
static char *llama_config_format(const td_checkpoint *ck) {
    char rs[512], *s = malloc(768);
    const td_rope_scaling *r = &ck->cfg.rope_scaling;
    if (r->factor > 0) {
        char f[32], lo[32], hi[32];
        td_hf_shortest(f, sizeof f, r->factor, 0);
        td_hf_shortest(lo, sizeof lo, r->low_freq_factor, 0);
        td_hf_shortest(hi, sizeof hi, r->high_freq_factor, 0);
        snprintf(rs, sizeof rs, "{\n    \"rope_type\": \"llama3\",\n    \"factor\": %s,\n    \"low_freq_factor\": %s,\n"
                 "    \"high_freq_factor\": %s,\n    \"original_max_position_embeddings\": %d\n  }", f, lo, hi,
                 r->orig_max_pos);
    } else {
        snprintf(rs, sizeof rs, "null");
    }
    if (s) snprintf(s, 768, "\n  \"rope_scaling\": %s,\n  \"attention_bias\": false,\n  \"mlp_bias\": false,\n"
                    "  \"pretraining_tp\": 1,", rs);
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

void td_hf_family_export(const td_hf_family *fam, const td_checkpoint *ck, const td_param_table *t,
                         const td_export_opts *o) {
    int n_items = fam->items(t, NULL);
    td_hf_item *items = td_alloc(sizeof *items * (size_t)n_items, TD_MEM_OTHER);
    fam->items(t, items);
    /* shards as save_pretrained cuts them: tensors in order, a new shard
     * when the next would take this one past the limit (a tensor larger
     * than the limit alone in its own) */
    double limit = (o->shard_mb > 0 ? o->shard_mb : DEFAULT_SHARD_MB) * 1e6;
    size_t elem = o->bf16 ? 2 : 4, total = 0, size = 0;
    int *first = td_alloc(sizeof(int) * (size_t)(n_items + 1), TD_MEM_OTHER), n = 0;
    for (int r = 0; r < n_items; r++) {
        size_t bytes = elem * td_hf_item_numel(&items[r]);
        if (n == 0 || (size > 0 && (double)(size + bytes) > limit)) first[n++] = r, size = 0;
        size += bytes, total += bytes;
    }
    first[n] = n_items;
    TD_CHECK(n <= 99999, "export: --shard-mb %g cuts the model into %d files; save_pretrained's names number "
             "at most 99999", o->shard_mb, n);
    td_st_plan *plans = td_alloc(sizeof *plans * (size_t)n, TD_MEM_OTHER);
    char (*files)[48] = td_alloc(sizeof *files * (size_t)n, TD_MEM_OTHER);
    for (int i = 0; i < n; i++) {
        td_st_plan_prepare(&plans[i], items + first[i], first[i + 1] - first[i], o->bf16 ? TD_ST_BF16 : TD_ST_F32);
        if (n == 1) snprintf(files[i], sizeof files[i], "model.safetensors");
        else snprintf(files[i], sizeof files[i], "model-%05d-of-%05d.safetensors", i + 1, n);
    }
    void *scratch = td_st_plan_scratch(plans, n);
    char *index = NULL;
    size_t ilen = 0;
    if (n > 1) { /* save_pretrained's index: total_size is the tensors' bytes */
        size_t cap = 128 + (size_t)n_items * (sizeof items[0].name + 64);
        index = td_export_checked(malloc(cap), INDEX_NAME);
        ilen = (size_t)snprintf(index, cap, "{\n  \"metadata\": {\n    \"total_size\": %zu\n  },\n"
                                "  \"weight_map\": {", total);
        for (int i = 0; i < n; i++)
            for (int r = first[i]; r < first[i + 1]; r++) {
                ilen += (size_t)snprintf(index + ilen, cap - ilen, "%s\n    ", r ? "," : "");
                int k = td_json_put_str(index, cap, ilen, items[r].name);
                TD_ASSERT(k > 0);
                ilen = (size_t)k;
                ilen += (size_t)snprintf(index + ilen, cap - ilen, ": \"%s\"", files[i]);
            }
        ilen += (size_t)snprintf(index + ilen, cap - ilen, "\n  }\n}\n");
    }
    td_hf_config hc = td_export_hf_config(ck);
    char *config = td_export_checked(config_format(fam, ck, &hc, o->bf16), "config.json");
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
        td_st_plan_write(&plans[i], ck->params, scratch, &d, fd, files[i]);
        td_staged_close(&d, fd, files[i]);
        bytes += plans[i].bytes;
    }
    if (index) td_export_put(&d, INDEX_NAME, index, ilen);
    td_export_put(&d, "config.json", config, strlen(config));
    td_export_put(&d, "generation_config.json", gen, strlen(gen));
    for (int f = 0; f < TD_TOK_FILES; f++)
        if (tok[f]) td_export_put(&d, td_tok_file_names[f], tok[f], tok_len[f]);
    td_staged_commit(&d);

    printf("export: wrote %s/ (Hugging Face %s, %s: ", o->out, fam->cls, o->bf16 ? "bf16" : "fp32");
    if (n == 1) printf("model.safetensors %d tensors %zu bytes", n_items, bytes);
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
    td_free(items);
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

int td_hf_get_int(const td_jv *o, const char *key, int64_t lo, int64_t hi, const char *path) {
    int64_t x;
    td_err e;
    TD_CHECK(td_json_get_int(o, key, lo, hi, &x, &e) == 0, "import: %s: %s", path, e.msg);
    return (int)x;
}

double td_hf_get_num(const td_jv *o, const char *key, double lo, double hi, double def, const char *path,
                     const char *in) {
    const td_jv *v = td_json_get(o, key);
    TD_CHECK(v || def >= 0, "import: %s: field %s%s: missing", path, in, key);
    if (!v) return def;
    TD_CHECK(v->type == TD_JV_NUM && v->num >= lo && v->num <= hi, "import: %s: field %s%s: not a number in "
             "[%g, %g]", path, in, key, lo, hi);
    return v->num;
}

/* A field that, when present, must have the one value trident's model has. */
static void want(const td_jv *o, const char *key, const char *str, int boolean, const char *path, const char *model) {
    const td_jv *v = td_json_get(o, key);
    if (!v) return;
    if (str)
        TD_CHECK(v->type == TD_JV_STR && strcmp(v->str, str) == 0, "import: %s: field %s: %s%s%s; trident's %s "
                 "has \"%s\"", path, key, v->type == TD_JV_STR ? "\"" : "", v->type == TD_JV_STR ? v->str : "not a string",
                 v->type == TD_JV_STR ? "\"" : "", model, str);
    else
        TD_CHECK(v->type == TD_JV_BOOL && v->boolean == boolean, "import: %s: field %s: %s; trident's %s has "
                 "none (%s)", path, key, v->type == TD_JV_BOOL ? (v->boolean ? "true" : "false") : "not a boolean",
                 model, boolean ? "true" : "false");
}

/* Llama's own: no biases, rope_scaling null or llama3 */
static void llama_config_parse(const td_jv *o, const char *path, td_gpt_config *c) {
    want(o, "attention_bias", NULL, 0, path, "Llama");
    want(o, "mlp_bias", NULL, 0, path, "Llama");
    const td_jv *rs = td_json_get(o, "rope_scaling");
    if (!rs || rs->type == TD_JV_NULL) return;
    TD_CHECK(rs->type == TD_JV_OBJ, "import: %s: field rope_scaling: must be an object or null", path);
    /* "type" is the older transformers' name of "rope_type" */
    const td_jv *ty = td_json_get(rs, "rope_type") ? td_json_get(rs, "rope_type") : td_json_get(rs, "type");
    TD_CHECK(ty && ty->type == TD_JV_STR && strcmp(ty->str, "llama3") == 0,
             "import: %s: field rope_scaling: rope_type %s%s%s is not supported; trident implements \"llama3\" "
             "(Llama 3.1's) only, or null", path, ty && ty->type == TD_JV_STR ? "\"" : "",
             ty ? (ty->type == TD_JV_STR ? ty->str : "(not a string)") : "(missing)",
             ty && ty->type == TD_JV_STR ? "\"" : "");
    td_rope_scaling *r = &c->rope_scaling;
    r->factor = td_hf_get_num(rs, "factor", 1e-30, 1e30, -1, path, "rope_scaling.");
    r->low_freq_factor = td_hf_get_num(rs, "low_freq_factor", 1e-30, 1e30, -1, path, "rope_scaling.");
    r->high_freq_factor = td_hf_get_num(rs, "high_freq_factor", 1e-30, 1e30, -1, path, "rope_scaling.");
    TD_CHECK(r->high_freq_factor > r->low_freq_factor, "import: %s: field rope_scaling.high_freq_factor: %g "
             "is not above low_freq_factor %g", path, r->high_freq_factor, r->low_freq_factor);
    r->orig_max_pos = td_hf_get_int(rs, "original_max_position_embeddings", 1, 1 << 30, path);
}

/* The common fields into a Llama config (HF's defaults where its config
 * class has one and the file has none), then the family's own, every size
 * checked against what trident builds, so td_gpt_config_finish cannot
 * refuse it. */
static void parse_config(const td_hf_family *f, const char *path, int seq, td_gpt_config *cfg, td_hf_config *hc) {
    td_jv *o = read_json(path);
    const char *model = f->model;
    want(o, "model_type", f->model_type, 0, path, model);
    want(o, "hidden_act", "silu", 0, path, model);
    td_gpt_config c = {.arch = TD_ARCH_LLAMA};
    c.L = td_hf_get_int(o, "num_hidden_layers", 1, TD_MAX_LAYERS, path);
    c.C = td_hf_get_int(o, "hidden_size", 1, TD_MAX_EMBD, path);
    c.H = td_hf_get_int(o, "num_attention_heads", 1, c.C, path);
    TD_CHECK(c.C % c.H == 0, "import: %s: field hidden_size: %d is not divisible by num_attention_heads %d", path,
             c.C, c.H);
    c.KV = td_json_get(o, "num_key_value_heads") ? td_hf_get_int(o, "num_key_value_heads", 1, c.H, path) : c.H;
    TD_CHECK(c.H % c.KV == 0, "import: %s: field num_key_value_heads: %d does not divide num_attention_heads %d",
             path, c.KV, c.H);
    const td_jv *hd = td_json_get(o, "head_dim");
    TD_CHECK(!hd || hd->type == TD_JV_NULL || (hd->type == TD_JV_NUM && hd->is_int && hd->i == c.C / c.H),
             "import: %s: field head_dim: trident's heads are hidden_size / num_attention_heads = %d", path,
             c.C / c.H);
    TD_CHECK((c.C / c.H) % 2 == 0, "import: %s: field hidden_size: the head size %d / %d = %d is odd; rotary "
             "positions need it even", path, c.C, c.H, c.C / c.H);
    c.F = td_hf_get_int(o, "intermediate_size", 1, 4 * TD_MAX_EMBD, path);
    c.V = td_hf_get_int(o, "vocab_size", 1, TD_MAX_VOCAB, path);
    int maxpos = td_hf_get_int(o, "max_position_embeddings", 1, INT32_MAX, path);
    TD_CHECK(seq > 0 || maxpos <= TD_MAX_SEQ, "import: %s: field max_position_embeddings: %d is past trident's "
             "%d; pass --seq N (the context to train at)", path, maxpos, TD_MAX_SEQ);
    c.T = seq > 0 ? seq : maxpos;
    /* LlamaConfig's defaults: rms_norm_eps 1e-6, rope_theta 10000, untied */
    c.norm_eps = (float)td_hf_get_num(o, "rms_norm_eps", 1e-30, 1.0, 1e-6, path, "");
    c.rope_theta = td_hf_get_num(o, "rope_theta", 1e-30, 1e30, 10000.0, path, "");
    const td_jv *tie = td_json_get(o, "tie_word_embeddings");
    TD_CHECK(!tie || tie->type == TD_JV_BOOL, "import: %s: field tie_word_embeddings: not a boolean", path);
    c.tie = tie && tie->boolean ? TD_TIE_ON : TD_TIE_OFF;
    f->config_parse(o, path, &c);
    hc->V = c.V;
    td_err e;
    TD_CHECK(td_hf_trident_fields_parse(o, hc, &e) == 0, "import: %s: %s", path, e.msg);
    td_json_free(o);
    td_gpt_config_finish(&c); /* cannot fail: every field was checked above */
    *cfg = c;
}

/* ---- import: the tensors ----------------------------------------------------- */

typedef struct {
    const td_hf_family *fam;
    const td_param_table *t;
    const td_hf_item *items; /* the family's tensors of the config */
    int n_items;
    int *by_name;         /* [n_items] item indices sorted by name */
    float *params;
    unsigned char *seen;  /* [n_items] */
    const char *config;   /* its path, for messages */
    const td_jv *map;     /* the index's weight_map, or NULL */
    const char *index;    /* its path */
    unsigned char *found; /* [map->n]: the index's entries met in their file */
    float *head;          /* a tied model's stored lm_head.weight, to check */
    char head_file[PATH_MAX];
} reader;

static const td_hf_item *g_sort_items; /* qsort's context */
static int by_name(const void *a, const void *b) {
    return strcmp(g_sort_items[*(const int *)a].name, g_sort_items[*(const int *)b].name);
}

/* the family's tensor of this name, or -1 */
static int find_item(const reader *rd, const char *name) {
    int lo = 0, hi = rd->n_items - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2, c = strcmp(name, rd->items[rd->by_name[mid]].name);
        if (c == 0) return rd->by_name[mid];
        if (c < 0) hi = mid - 1;
        else lo = mid + 1;
    }
    return -1;
}

/* Older save_pretrained files hold each layer's rotary table
 * ("model.layers.N.self_attn.rotary_emb.inv_freq"): a buffer computed from
 * rope_theta, not a weight. */
static int rotary_buffer(const char *name) {
    const char *tail = ".self_attn.rotary_emb.inv_freq";
    size_t n = strlen(name), k = strlen(tail);
    return strncmp(name, "model.layers.", 13) == 0 && n > k && strcmp(name + n - k, tail) == 0;
}

/* A tensor of a known form past the config's sizes: its layer (or expert) */
static void check_past(const reader *rd, const char *path, const char *name) {
    const td_gpt_config *c = &rd->t->cfg;
    int layer = -1, expert = -1;
    if (sscanf(name, "model.layers.%d.", &layer) != 1) return;
    TD_CHECK(layer < c->L || layer < 0, "import: %s: tensor \"%s\": layer %d, but %s says num_hidden_layers %d", path,
             name, layer, rd->config, c->L);
    TD_CHECK(c->moe.E == 0 || sscanf(name, "model.layers.%*d.block_sparse_moe.experts.%d.", &expert) != 1 ||
                 expert < c->moe.E || expert < 0,
             "import: %s: tensor \"%s\": expert %d, but %s says num_local_experts %d", path, name, expert, rd->config,
             c->moe.E);
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
        int k = find_item(rd, s->name);
        int tied_head = k < 0 && td_gpt_tied(&t->cfg) && strcmp(s->name, "lm_head.weight") == 0;
        if (tied_head) k = find_item(rd, td_param_lookup(t, TD_T_WTE, 0)->name); /* stored anyway: it must be embed_tokens */
        if (k < 0) check_past(rd, path, s->name);
        char note[160];
        rd->fam->names_note(&t->cfg, note, sizeof note);
        TD_CHECK(k >= 0, "import: %s: tensor \"%s\" is not a %s tensor trident knows (%s says tie_word_embeddings %s%s)",
                 path, s->name, rd->fam->cls, rd->config, td_gpt_tied(&t->cfg) ? "true" : "false", note);
        const td_hf_item *it = &rd->items[k];
        TD_CHECK(tied_head || !rd->seen[k], "import: %s: tensor \"%s\" appears twice", path, s->name);
        TD_CHECK(s->ndim == it->ndim && s->shape[0] == it->shape[0] && (it->ndim == 1 || s->shape[1] == it->shape[1]),
                 "import: %s: tensor \"%s\": shape [%" PRId64 "%s%" PRId64 "]%s, but %s's sizes need [%" PRId64 "%s%"
                 PRId64 "]", path, s->name, s->ndim ? s->shape[0] : 0, s->ndim > 1 ? ", " : "",
                 s->ndim > 1 ? s->shape[1] : 0, s->ndim > 2 ? " (more dimensions)" : "", rd->config, it->shape[0],
                 it->ndim > 1 ? ", " : "", it->ndim > 1 ? it->shape[1] : 0);
        TD_CHECK(s->dtype == TD_ST_F32 || s->dtype == TD_ST_BF16 || s->dtype == TD_ST_F16,
                 "import: %s: tensor \"%s\": dtype %s; trident reads F32, BF16 or F16", path, s->name,
                 td_st_dtype_name(s->dtype));
        size_t numel = td_hf_item_numel(it);
        if (tied_head) {
            rd->head = td_alloc(sizeof(float) * numel, TD_MEM_OTHER);
            snprintf(rd->head_file, sizeof rd->head_file, "%s", path);
            td_import_to_float(rd->head, buf + h.data_off + s->begin, numel, s->dtype, path, s->name);
            continue;
        }
        rd->seen[k] = 1;
        /* the canonical buffer is the file's layout: [out, in], the real
         * vocabulary rows first (the padding rows stay zero) */
        td_import_to_float(rd->params + it->off, buf + h.data_off + s->begin, numel, s->dtype, path, s->name);
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

/* Every file the index names, once each, in the order it first names them;
 * every entry met in its file. */
static void read_indexed(reader *rd, const char *dir, const char *index, td_jv **idx) {
    *idx = read_json(index);
    rd->map = td_json_get(*idx, "weight_map");
    rd->index = index;
    TD_CHECK(rd->map && rd->map->type == TD_JV_OBJ && rd->map->n > 0, "import: %s: field weight_map: missing, "
             "empty or not an object", index);
    rd->found = td_alloc((size_t)rd->map->n, TD_MEM_OTHER);
    memset(rd->found, 0, (size_t)rd->map->n);
    for (int i = 0; i < rd->map->n; i++) { /* every name checked before any is opened */
        const td_jv *f = &rd->map->items[i];
        TD_CHECK(f->type == TD_JV_STR, "import: %s: weight_map: tensor \"%s\": the file is not a string", index,
                 rd->map->keys[i]);
        check_file_name(index, f->str, rd->map->keys[i]);
    }
    for (int i = 0; i < rd->map->n; i++) {
        const td_jv *f = &rd->map->items[i];
        int again = 0;
        for (int j = 0; j < i && !again; j++) again = strcmp(rd->map->items[j].str, f->str) == 0;
        if (again) continue;
        char path[PATH_MAX + 64];
        snprintf(path, sizeof path, "%s/%s", dir, f->str);
        read_file(rd, path, f->str);
    }
    for (int i = 0; i < rd->map->n; i++)
        TD_CHECK(rd->found[i], "import: %s: weight_map: tensor \"%s\" is not in %s", index, rd->map->keys[i],
                 rd->map->items[i].str);
}

void td_hf_family_import(const td_hf_family *fam, const td_import_opts *o, td_gpt_config *cfg, td_hf_config *hc,
                         float **params, td_param_table *t) {
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
    parse_config(fam, cpath, o->seq, cfg, hc);
    td_param_table_build(t, cfg, 1);

    reader rd = {.fam = fam, .t = t, .config = cpath};
    rd.n_items = fam->items(t, NULL);
    td_hf_item *items = td_alloc(sizeof *items * (size_t)rd.n_items, TD_MEM_OTHER);
    fam->items(t, items);
    rd.items = items;
    rd.by_name = td_alloc(sizeof(int) * (size_t)rd.n_items, TD_MEM_OTHER);
    for (int i = 0; i < rd.n_items; i++) rd.by_name[i] = i;
    g_sort_items = items;
    qsort(rd.by_name, (size_t)rd.n_items, sizeof(int), by_name);
    rd.params = td_alloc(sizeof(float) * t->numel, TD_MEM_OTHER); /* host staging: written to a checkpoint */
    memset(rd.params, 0, sizeof(float) * t->numel); /* what no tensor holds stays zero */
    rd.seen = td_alloc((size_t)rd.n_items, TD_MEM_OTHER);
    memset(rd.seen, 0, (size_t)rd.n_items);
    td_jv *idx = NULL;
    if (index[0]) read_indexed(&rd, dir, index, &idx);
    else read_file(&rd, model, NULL);
    char note[160];
    fam->names_note(cfg, note, sizeof note);
    for (int r = 0; r < rd.n_items; r++)
        TD_CHECK(rd.seen[r], "import: %s: tensor \"%s\" is missing (%s says num_hidden_layers %d, "
                 "tie_word_embeddings %s%s)", index[0] ? index : model, items[r].name, cpath, cfg->L,
                 td_gpt_tied(cfg) ? "true" : "false", note);
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
    td_free(rd.by_name);
    td_free(items);
    *params = rd.params;
}

/* ---- the family ---------------------------------------------------------------- */

static int llama_items(const td_param_table *t, td_hf_item *out) {
    if (out) td_hf_items_of_rows(t, 0, t->n_rows, "", out);
    return t->n_rows;
}

static void llama_names_note(const td_gpt_config *c, char *buf, size_t cap) {
    (void)c;
    snprintf(buf, cap, ", attention_bias and mlp_bias false");
}

const td_hf_family td_hf_llama_family = {"LlamaForCausalLM", "llama", "Llama", llama_config_format, llama_config_parse,
                                         llama_items, llama_names_note};
