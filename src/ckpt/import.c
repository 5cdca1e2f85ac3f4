/* Import: Hugging Face GPT-2 safetensors (+ config.json), an llm.c GPT-2
 * checkpoint or (read by hf_llama.c) a Hugging Face Llama or Mixtral
 * directory into a new checkpoint directory, parameters only (ckpt_interop.h). Everything is read and checked before anything is
 * written: bad input is one error line naming the file and what is wrong,
 * and --out stays untouched. Writes through td_ckpt_save only, into a
 * staged directory (staged.h). */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpt2_names.h"
#include "interop.h"
#include "staged.h"
#include "trident/base.h"
#include "trident/bpe.h"
#include "trident/ckpt.h"
#include "trident/ckpt_interop.h"
#include "trident/files.h"
#include "trident/formats_gpt2.h"
#include "trident/formats_safetensors.h"
#include "trident/kernels_bf16.h"
#include "trident/kernels_f16.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "both formats are little-endian; so is this reader");

/* The whole file (untrusted: its size comes from fstat, not from it). */
unsigned char *td_import_read_all(const char *path, size_t *len) {
    struct stat st;
    const char *why;
    int fd = td_open_input(path, &st, &why);
    TD_CHECK(fd >= 0, "import: %s: cannot read it: %s", path, why);
    *len = (size_t)st.st_size;
    unsigned char *buf = td_alloc(*len ? *len : 1, TD_MEM_OTHER);
    for (size_t got = 0; got < *len;) {
        ssize_t k = read(fd, buf + got, *len - got > (1u << 30) ? (1u << 30) : *len - got);
        if (k < 0 && errno == EINTR) continue;
        TD_CHECK(k > 0, "import: %s: read failed: %s", path, k < 0 ? strerror(errno) : "the file shrank");
        got += (size_t)k;
    }
    close(fd);
    return buf;
}

/* n elements of dtype at src (unaligned, little-endian) as floats; every
 * value must be finite, as td_ckpt_load will require. */
void td_import_to_float(float *dst, const unsigned char *src, size_t n, td_st_dtype dt, const char *path,
                        const char *name) {
    for (size_t i = 0; i < n; i++) {
        uint32_t u32;
        uint16_t u16;
        if (dt == TD_ST_F32) memcpy(&u32, src + 4 * i, 4), memcpy(&dst[i], &u32, 4);
        else memcpy(&u16, src + 2 * i, 2), dst[i] = dt == TD_ST_BF16 ? td_bf16_to_float(u16) : td_f16_to_float(u16);
        TD_CHECK(isfinite(dst[i]), "import: %s: tensor %s: element %zu is not finite", path, name, i);
    }
}

/* HF layout (src) into row p of the canonical buffer. */
static void place(float *params, const td_param *p, const float *src) {
    float *dst = params + p->offset;
    size_t rows = (size_t)p->shape[0], cols = p->ndim == 2 ? (size_t)p->shape[1] : 1;
    if (!td_hf_kinds[p->kind].transposed) {
        memcpy(dst, src, sizeof(float) * rows * cols);
        return;
    }
    for (size_t r = 0; r < rows; r++) /* HF [in, out] -> trident [out, in] */
        for (size_t c = 0; c < cols; c++) dst[r * cols + c] = src[c * rows + r];
}

/* The row a GPT-2 name means: "wte.weight", "h.3.mlp.c_fc.bias", ... with
 * or without GPT2LMHeadModel's "transformer." prefix. NULL if none. */
static const td_param *lookup(const td_param_table *t, const char *name, int *bad_layer) {
    *bad_layer = -1;
    if (strncmp(name, "transformer.", 12) == 0) name += 12;
    int layer = -1;
    if (name[0] == 'h' && name[1] == '.') {
        char *end;
        long l = strtol(name + 2, &end, 10);
        if (end == name + 2 || *end != '.' || name[2] == '-' || name[2] == '+' || (name[2] == '0' && end != name + 3))
            return NULL;
        if (l >= t->cfg.L) {
            *bad_layer = (int)(l > INT_MAX ? INT_MAX : l);
            return NULL;
        }
        layer = (int)l;
        name = end + 1;
    }
    for (int k = 0; k <= TD_T_LNFB; k++) { /* GPT-2's kinds */
        int block = k != TD_T_WTE && k != TD_T_WPE && k != TD_T_LNFW && k != TD_T_LNFB;
        if (block == (layer >= 0) && strcmp(name, td_hf_kinds[k].name) == 0)
            return td_param_lookup(t, (td_tensor_kind)k, layer);
    }
    return NULL;
}

/* Older GPT-2 files store each block's causal mask ("h.N.attn.bias",
 * "h.N.attn.masked_bias"): buffers, not weights. */
static int mask_buffer(const char *name) {
    if (strncmp(name, "transformer.", 12) == 0) name += 12;
    if (strncmp(name, "h.", 2) != 0) return 0;
    name += 2;
    while (*name >= '0' && *name <= '9') name++;
    return strcmp(name, ".attn.bias") == 0 || strcmp(name, ".attn.masked_bias") == 0;
}

static void import_safetensors(const char *path, const char *config, td_gpt_config *cfg,
                               td_hf_config *hc, float **params_out, td_param_table *t) {
    size_t clen;
    char *ctext = (char *)td_import_read_all(config, &clen);
    td_err e;
    TD_CHECK(td_hf_config_parse(ctext, clen, hc, &e) == 0, "import: %s: %s", config, e.msg);
    td_free(ctext);
    *cfg = (td_gpt_config){.L = (int)hc->L, .H = (int)hc->H, .C = (int)hc->C, .T = (int)hc->T, .V = (int)hc->V};
    td_gpt_config_finish(cfg); /* cannot fail: the parser checked the same ranges */
    td_param_table_build(t, cfg, 1);

    size_t len;
    unsigned char *file = td_import_read_all(path, &len);
    uint64_t n;
    td_st_header h;
    TD_CHECK(td_st_header_len(file, len, &n, &e) == 0 &&
             td_st_header_parse((const char *)file + 8, n, len, &h, &e) == 0, "import: %s: %s", path, e.msg);
    float *params = td_alloc(sizeof(float) * t->numel, TD_MEM_OTHER); /* host staging: written to a checkpoint */
    memset(params, 0, sizeof(float) * t->numel); /* wte's padding rows stay zero */
    unsigned char *seen = td_alloc((size_t)t->n_rows, TD_MEM_OTHER);
    memset(seen, 0, (size_t)t->n_rows);
    const td_st_tensor *head = NULL;
    for (int i = 0; i < h.n; i++) {
        const td_st_tensor *s = &h.t[i];
        if (mask_buffer(s->name)) continue;
        if (strcmp(s->name, "lm_head.weight") == 0) {
            head = s;
            continue;
        }
        int bad_layer;
        const td_param *p = lookup(t, s->name, &bad_layer);
        TD_CHECK(bad_layer < 0, "import: %s: tensor \"%s\": layer %d, but %s says n_layer %d", path, s->name,
                 bad_layer, config, cfg->L);
        TD_CHECK(p, "import: %s: tensor \"%s\" is not a GPT-2 tensor trident knows", path, s->name);
        int r = (int)(p - t->rows);
        TD_CHECK(!seen[r], "import: %s: tensor \"%s\" appears twice (with and without \"transformer.\")", path,
                 s->name);
        seen[r] = 1;
        int64_t want[2];
        int nd = td_hf_shape(p, want);
        TD_CHECK(s->ndim == nd && s->shape[0] == want[0] && (nd == 1 || s->shape[1] == want[1]),
                 "import: %s: tensor \"%s\": shape [%lld%s%lld], but %s's sizes need [%lld%s%lld]", path,
                 s->name, (long long)s->shape[0], s->ndim > 1 ? ", " : "", s->ndim > 1 ? (long long)s->shape[1] : 0LL,
                 config, (long long)want[0], nd > 1 ? ", " : "", nd > 1 ? (long long)want[1] : 0LL);
        TD_CHECK(s->dtype == TD_ST_F32 || s->dtype == TD_ST_BF16 || s->dtype == TD_ST_F16,
                 "import: %s: tensor \"%s\": dtype %s; trident reads F32, BF16 or F16", path, s->name,
                 td_st_dtype_name(s->dtype));
        size_t numel = (size_t)want[0] * (nd > 1 ? (size_t)want[1] : 1);
        float *tmp = td_alloc(sizeof(float) * numel, TD_MEM_OTHER);
        td_import_to_float(tmp, file + h.data_off + s->begin, numel, s->dtype, path, s->name);
        place(params, p, tmp);
        td_free(tmp);
    }
    for (int r = 0; r < t->n_rows; r++) {
        char name[96];
        td_hf_name(name, sizeof name, &t->rows[r]);
        TD_CHECK(seen[r], "import: %s: tensor \"%s\" is missing (%s says n_layer %d)", path, name, config, cfg->L);
    }
    if (head) { /* GPT2LMHeadModel may store its tied head: it must be wte */
        const td_param *wte = td_param_lookup(t, TD_T_WTE, 0);
        size_t numel = (size_t)cfg->V * (size_t)cfg->C;
        float *tmp = td_alloc(sizeof(float) * numel, TD_MEM_OTHER);
        TD_CHECK(head->ndim == 2 && head->shape[0] == cfg->V && head->shape[1] == cfg->C &&
                     (head->dtype == TD_ST_F32 || head->dtype == TD_ST_BF16 || head->dtype == TD_ST_F16),
                 "import: %s: tensor \"lm_head.weight\": not a [%d, %d] float tensor", path, cfg->V, cfg->C);
        td_import_to_float(tmp, file + h.data_off + head->begin, numel, head->dtype, path, "lm_head.weight");
        TD_CHECK(memcmp(tmp, params + wte->offset, sizeof(float) * numel) == 0,
                 "import: %s: tensor \"lm_head.weight\" differs from \"wte.weight\"; trident's head is tied "
                 "to the token embedding", path);
        td_free(tmp);
    }
    td_free(seen);
    td_st_header_free(&h);
    td_free(file);
    *params_out = params;
}

static void import_llmc(const char *path, td_gpt_config *cfg, float **params_out, td_param_table *t) {
    size_t len;
    unsigned char *file = td_import_read_all(path, &len);
    td_llmc_header h;
    td_err e;
    TD_CHECK(td_llmc_header_parse(file, len, len, &h, &e) == 0, "import: %s: %s", path, e.msg);
    *cfg = (td_gpt_config){.L = h.L, .H = h.H, .C = h.C, .T = h.maxT, .V = h.V};
    td_gpt_config_finish(cfg);
    td_param_table_build(t, cfg, 1);
    float *params = td_alloc(sizeof(float) * t->numel, TD_MEM_OTHER); /* host staging: written to a checkpoint */
    memset(params, 0, sizeof(float) * t->numel);
    const unsigned char *at = file + TD_LLMC_HEADER_BYTES;
    for (int k = 0; k <= TD_T_LNFB; k++) { /* the GPT-2 kinds are in llm.c's order */
        int layers = (k == TD_T_WTE || k == TD_T_WPE || k == TD_T_LNFW || k == TD_T_LNFB) ? 1 : h.L;
        for (int l = 0; l < layers; l++) {
            const td_param *p = td_param_lookup(t, (td_tensor_kind)k, l);
            size_t n = (size_t)p->shape[0] * (p->ndim == 2 ? (size_t)p->shape[1] : 1);
            char name[96];
            td_hf_name(name, sizeof name, p);
            td_import_to_float(params + p->offset, at, n, TD_ST_F32, path, name);
            at += 4 * n;
        }
        if (k == TD_T_WTE) at += 4 * (size_t)(h.Vp - h.V) * (size_t)h.C; /* llm.c's padding rows */
    }
    TD_ASSERT(at == file + len); /* the parser checked the length against these sizes */
    td_free(file);
    *params_out = params;
}

/* The tokenizer the checkpoint will carry: --tokenizer, else config.json's
 * trident_tokenizer, else GPT-2's when V is 50257, else plain ids. */
static void pick_tokenizer(td_tokenizer *tok, const char *flag, const char *data, const td_hf_config *hc, int V) {
    memset(tok, 0, sizeof *tok);
    const char *kind = flag ? flag : hc && hc->tokenizer[0] ? hc->tokenizer : V == 50257 ? "gpt2" : "ids";
    if (strcmp(kind, "char") == 0 && !flag && hc && hc->chars) {
        tok->kind = TD_TOK_CHAR;
        tok->V = V;
        tok->chars = td_alloc(sizeof(uint32_t) * (size_t)V, TD_MEM_OTHER);
        memcpy(tok->chars, hc->chars, sizeof(uint32_t) * (size_t)V);
        return;
    }
    if (strcmp(kind, "char") == 0) {
        TD_CHECK(data, "import: --tokenizer char needs --data TEXT, the text whose characters are the vocabulary");
        size_t n;
        char *text = (char *)td_import_read_all(data, &n);
        td_tokenizer_build_char(tok, text, n, "--data");
        td_free(text);
        TD_CHECK(tok->V == V, "import: --data %s has %d distinct characters, but the model's vocabulary is %d",
                 data, tok->V, V);
    } else if (strcmp(kind, "hf") == 0) { /* config.json of an export of such a checkpoint */
        TD_CHECK(0, "import: config.json says the model's tokenizer is a tokenizer.json; give it as "
                 "--tokenizer FILE.json (an export writes it beside config.json)");
    } else if (td_tokenizer_is_file(kind)) { /* the model's own tokenizer.json */
        td_tokenizer_hf(tok, kind, "import: --tokenizer");
        TD_CHECK(tok->V == V, "import: --tokenizer %s has %d tokens (its largest id + 1), but the model's "
                 "vocabulary is %d", kind, tok->V, V);
    } else if (td_bpe_kind_parse(kind) >= 0) { /* gpt2, cl100k, o200k */
        int bv = td_bpe_kind_vocab((td_bpe_kind)td_bpe_kind_parse(kind));
        TD_CHECK(V == bv, "import: --tokenizer %s has %d tokens, but the model's vocabulary is %d", kind, bv, V);
        td_tokenizer_bpe(tok, kind);
    } else if (strcmp(kind, "byte") == 0) {
        TD_CHECK(V == 256, "import: --tokenizer byte has 256 tokens, but the model's vocabulary is %d", V);
        tok->kind = TD_TOK_BYTE, tok->V = 256;
    } else {
        TD_CHECK(strcmp(kind, "ids") == 0, "import: --tokenizer %s is not known; use char, byte, ids, gpt2, cl100k, "
                 "o200k or a tokenizer.json file", kind);
        tok->kind = TD_TOK_IDS, tok->V = V;
    }
}

/* --overwrite replaces a directory of checkpoints: step directories, the
 * latest link, and the temporaries of saves killed half-way */
static int ckpt_entry(const char *name) {
    return strcmp(name, "latest") == 0 || strncmp(name, "step-", 5) == 0 ||
           strncmp(name, ".step-", 6) == 0 || strncmp(name, ".latest.tmp.", 12) == 0;
}

void td_import(const td_import_opts *o) {
    const char *format = o->format, *config = o->config, *tokenizer = o->tokenizer, *data = o->data;
    TD_CHECK(format && (strcmp(format, "safetensors") == 0 || strcmp(format, "llmc") == 0 ||
                        strcmp(format, "hf-llama") == 0 || strcmp(format, "hf-mixtral") == 0),
             "import: --format %s is not known; use safetensors, hf-llama, hf-mixtral or llmc",
             format ? format : "(missing)");
    const td_hf_family *fam = strcmp(format, "hf-llama") == 0     ? &td_hf_llama_family
                              : strcmp(format, "hf-mixtral") == 0 ? &td_hf_mixtral_family
                                                                  : NULL;
    int llama = fam != NULL, st = strcmp(format, "safetensors") == 0;
    TD_CHECK(o->in, "import: --in %s is required", llama ? "DIR (or FILE)" : "FILE");
    TD_CHECK(o->out, "import: --out DIR is required");
    TD_CHECK(!config || strcmp(format, "llmc") != 0,
             "import: --config applies to --format safetensors, hf-llama and hf-mixtral (an llm.c file holds its sizes)");
    TD_CHECK(!o->seq || llama, "import: --seq applies to --format hf-llama and hf-mixtral (GPT-2's positions are "
             "weights of n_positions rows)");
    TD_CHECK(!data || (tokenizer && strcmp(tokenizer, "char") == 0),
             "import: --data applies to --tokenizer char only (its characters are the vocabulary)");
    /* never mix an import into existing checkpoints: a new or empty DIR, or
     * with --overwrite an earlier checkpoint directory, replaced whole */
    char what[PATH_MAX + 16];
    snprintf(what, sizeof what, "--out %s", o->out);
    td_staged_check("import", what, o->out, 1, o->overwrite, ckpt_entry);
    char cpath[PATH_MAX + 16];
    if (!config && st) {
        char dir[PATH_MAX];
        snprintf(dir, sizeof dir, "%s", o->in);
        snprintf(cpath, sizeof cpath, "%s/config.json", dirname(dir));
        config = cpath;
    }
    td_gpt_config cfg;
    td_param_table t;
    td_hf_config hc = {0};
    float *params;
    if (st) import_safetensors(o->in, config, &cfg, &hc, &params, &t);
    else if (llama) td_hf_family_import(fam, o, &cfg, &hc, &params, &t);
    else import_llmc(o->in, &cfg, &params, &t);
    td_tokenizer tok;
    pick_tokenizer(&tok, tokenizer, data, st || llama ? &hc : NULL, cfg.V);
    /* saved into DIR.tmp.PID, then renamed into place: an error inside the
     * save ends the process through the abort hook, which removes it */
    td_staged s;
    td_staged_begin(&s, "import", o->out, 1, o->overwrite);
    td_ckpt_save(s.tmp, &cfg, &tok, 0, params, NULL, NULL, t.numel);
    td_staged_commit(&s);
    char moe[48] = "";
    if (cfg.moe.E > 0) snprintf(moe, sizeof moe, " experts %d top-%d", cfg.moe.E, cfg.moe.K);
    printf("import: wrote %s/step-00000000 (%s L %d H %d C %d T %d V %d%s, %zu parameters, tokenizer %s)\n",
           o->out, td_arch_name(cfg.arch), cfg.L, cfg.H, cfg.C, cfg.T, cfg.V, moe, t.n_global,
           td_tokenizer_name(tok.kind));
    td_hf_config_free(&hc);
    td_tokenizer_free(&tok);
    td_param_table_free(&t);
    td_free(params);
}
