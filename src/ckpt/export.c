/* Export: a checkpoint's parameters as a Hugging Face GPT-2 directory, a
 * safetensors file (+ config.json) or llm.c's GPT-2 checkpoint
 * (ckpt_interop.h), and the safetensors writer and tokenizer files that
 * hf_llama.c's Llama directory shares (interop.h). Reads through
 * td_ckpt_load only. Everything an output
 * holds is prepared in memory first, so that between creating its
 * temporary and renaming it into place only writes can fail, and each
 * failure removes the temporaries (staged.h). */
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt2_names.h"
#include "interop.h"
#include "staged.h"
#include "trident/base.h"
#include "trident/bpe.h"
#include "trident/ckpt.h"
#include "trident/ckpt_interop.h"
#include "trident/formats_gpt2.h"
#include "trident/formats_hash.h"
#include "trident/formats_safetensors.h"
#include "trident/kernels_bf16.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "both formats are little-endian; so is this writer");

const td_hf_kind td_hf_kinds[TD_T_COUNT] = {
    [TD_T_WTE] = {"wte.weight", 0},          [TD_T_WPE] = {"wpe.weight", 0},
    [TD_T_LN1W] = {"ln_1.weight", 0},        [TD_T_LN1B] = {"ln_1.bias", 0},
    [TD_T_QKVW] = {"attn.c_attn.weight", 1}, [TD_T_QKVB] = {"attn.c_attn.bias", 0},
    [TD_T_ATTPROJW] = {"attn.c_proj.weight", 1}, [TD_T_ATTPROJB] = {"attn.c_proj.bias", 0},
    [TD_T_LN2W] = {"ln_2.weight", 0},        [TD_T_LN2B] = {"ln_2.bias", 0},
    [TD_T_FCW] = {"mlp.c_fc.weight", 1},     [TD_T_FCB] = {"mlp.c_fc.bias", 0},
    [TD_T_FCPROJW] = {"mlp.c_proj.weight", 1}, [TD_T_FCPROJB] = {"mlp.c_proj.bias", 0},
    [TD_T_LNFW] = {"ln_f.weight", 0},        [TD_T_LNFB] = {"ln_f.bias", 0},
};

void td_hf_name(char *buf, size_t cap, const td_param *p) {
    if (p->layer >= 0 && p->kind != TD_T_LNFW && p->kind != TD_T_LNFB)
        snprintf(buf, cap, "h.%d.%s", p->layer, td_hf_kinds[p->kind].name);
    else
        snprintf(buf, cap, "%s", td_hf_kinds[p->kind].name);
}

int td_hf_shape(const td_param *p, int64_t shape[2]) {
    int t = td_hf_kinds[p->kind].transposed;
    shape[0] = p->shape[t ? 1 : 0];
    if (p->ndim == 2) shape[1] = p->shape[t ? 0 : 1];
    return p->ndim;
}

/* An item of the canonical buffer in HF's layout into dst (GPT-2's
 * Conv1D weights transposed; the vocabulary's real rows only). */
static void hf_tensor(float *dst, const td_hf_item *it, const float *params) {
    const float *src = params + it->off;
    if (!it->transposed) {
        memcpy(dst, src, sizeof(float) * td_hf_item_numel(it));
        return;
    }
    size_t rows = (size_t)it->shape[1], cols = (size_t)it->shape[0]; /* trident: [out, in] */
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) dst[c * rows + r] = src[r * cols + c];
}


/* ---- the model as safetensors: prepared, then written ------------------- */

size_t td_hf_item_numel(const td_hf_item *it) {
    return (size_t)it->shape[0] * (it->ndim == 2 ? (size_t)it->shape[1] : 1);
}

/* GPT-2's names are prefix + GPT2Model's name ("" for the file export,
 * "transformer." in a GPT2LMHeadModel directory); Llama's rows carry
 * LlamaForCausalLM's own names and shapes. */
void td_hf_items_of_rows(const td_param_table *t, int lo, int hi, const char *prefix, td_hf_item *out) {
    int gpt2 = t->cfg.arch == TD_ARCH_GPT2;
    for (int r = lo; r < hi; r++) { /* rows are in forward order: embeddings, blocks, final norm (head) */
        const td_param *p = &t->rows[r];
        td_hf_item *it = &out[r - lo];
        memset(it, 0, sizeof *it);
        it->off = p->offset;
        if (gpt2) {
            char base[96];
            td_hf_name(base, sizeof base, p);
            snprintf(it->name, sizeof it->name, "%s%s", prefix, base);
            it->ndim = td_hf_shape(p, it->shape);
            it->transposed = td_hf_kinds[p->kind].transposed;
        } else {
            snprintf(it->name, sizeof it->name, "%s", p->name);
            it->ndim = p->ndim;
            it->shape[0] = p->shape[0];
            if (p->ndim == 2) it->shape[1] = p->shape[1];
        }
    }
}

void td_st_plan_prepare(td_st_plan *sp, const td_hf_item *items, int n, td_st_dtype dtype) {
    TD_ASSERT(n > 0 && (dtype == TD_ST_F32 || dtype == TD_ST_BF16));
    sp->items = items, sp->n = n, sp->dtype = dtype;
    sp->st = td_alloc(sizeof *sp->st * (size_t)n, TD_MEM_OTHER);
    size_t most = 0;
    for (int i = 0; i < n; i++) {
        td_st_tensor *st = &sp->st[i];
        memset(st, 0, sizeof *st);
        st->name = (char *)items[i].name, st->dtype = dtype, st->ndim = items[i].ndim;
        st->shape[0] = items[i].shape[0], st->shape[1] = items[i].shape[1];
        most = td_max_sz(most, td_hf_item_numel(&items[i]));
    }
    const char *mk[] = {"format", "producer"}, *mv[] = {"pt", "trident export"};
    td_err e;
    TD_CHECK(td_st_header_format(sp->st, n, mk, mv, 2, &sp->hdr, &sp->hlen, &e) == 0, "export: %s", e.msg);
    sp->bytes = sp->hlen + (size_t)sp->st[n - 1].end;
    /* the fp32 tensor, then (bf16) its rounded form after it */
    sp->scratch = (sizeof(float) + (dtype == TD_ST_BF16 ? sizeof(td_bf16) : 0)) * most;
}

void *td_st_plan_scratch(const td_st_plan *plans, int n) {
    size_t most = 0;
    for (int i = 0; i < n; i++) most = td_max_sz(most, plans[i].scratch);
    return td_alloc(most, TD_MEM_OTHER);
}

void td_st_plan_write(const td_st_plan *sp, const float *params, void *scratch, td_staged *s, int fd,
                      const char *name) {
    td_staged_write(s, fd, name, sp->hdr, sp->hlen);
    for (int i = 0; i < sp->n; i++) {
        const td_st_tensor *st = &sp->st[i];
        float *f = scratch;
        hf_tensor(f, &sp->items[i], params);
        size_t n = (size_t)(st->end - st->begin);
        if (sp->dtype == TD_ST_BF16) {
            td_bf16 *h = (td_bf16 *)(f + n / sizeof(td_bf16)); /* past the n/2 floats */
            td_bf16_from_float_n(h, f, n / sizeof(td_bf16));
            td_staged_write(s, fd, name, h, n);
        } else {
            td_staged_write(s, fd, name, f, n);
        }
    }
}

void td_st_plan_free(td_st_plan *sp) {
    free(sp->hdr);
    td_free(sp->st);
}

/* A plan of every row of a canonical table (GPT-2's one-file forms); the
 * items are freed with it by the caller (*items). */
static void plan_rows(td_st_plan *sp, td_hf_item **items, const td_param_table *t, const char *prefix) {
    *items = td_alloc(sizeof **items * (size_t)t->n_rows, TD_MEM_OTHER);
    td_hf_items_of_rows(t, 0, t->n_rows, prefix, *items);
    td_st_plan_prepare(sp, *items, t->n_rows, TD_ST_F32);
}

td_hf_config td_export_hf_config(const td_checkpoint *ck) {
    const td_gpt_config *c = &ck->cfg;
    td_hf_config hc = {c->L, c->H, c->C, c->T, c->V, "", ck->tok.kind == TD_TOK_CHAR ? ck->tok.chars : NULL, 0};
    snprintf(hc.tokenizer, sizeof hc.tokenizer, "%s", td_tokenizer_name(ck->tok.kind));
    if ((ck->tok.kind == TD_TOK_CL100K || ck->tok.kind == TD_TOK_O200K) && ck->tok.bpe) {
        int eot = td_bpe_eot(ck->tok.bpe);
        hc.eot = eot > 0 ? eot : 0;
    }
    return hc;
}

char *td_export_checked(char *text, const char *what) {
    TD_CHECK(text, "export: out of memory formatting %s", what);
    return text;
}

void td_export_put(td_staged *d, const char *name, const char *text, size_t len) {
    int fd = td_staged_create(d, name);
    td_staged_write(d, fd, name, text, len);
    td_staged_close(d, fd, name);
}

/* ---- the three formats -------------------------------------------------- */

static void config_path(char *buf, size_t cap, const char *out) {
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", out);
    snprintf(buf, cap, "%s/config.json", dirname(dir));
}

static void export_safetensors(const td_checkpoint *ck, const td_param_table *t, const td_export_opts *o) {
    char cpath[PATH_MAX + 16];
    config_path(cpath, sizeof cpath, o->out);
    td_st_plan sp;
    td_hf_item *items;
    plan_rows(&sp, &items, t, "");
    void *scratch = td_st_plan_scratch(&sp, 1);
    td_hf_config hc = td_export_hf_config(ck);
    char *text = td_export_checked(td_hf_config_format(&hc), "config.json");
    td_staged m, c;
    td_staged_begin(&m, "export", o->out, 0, o->overwrite);
    td_staged_begin(&c, "export", cpath, 0, o->overwrite);
    td_st_plan_write(&sp, ck->params, scratch, &m, m.fd, NULL);
    td_staged_write(&c, c.fd, NULL, text, strlen(text));
    /* the model first, so a reader never finds a new config without its weights */
    td_staged_commit(&m);
    td_staged_commit(&c);
    printf("export: wrote %s (%d tensors, %zu bytes) and %s\n", o->out, t->n_rows, sp.bytes, cpath);
    free(text);
    td_free(scratch);
    td_st_plan_free(&sp);
    td_free(items);
}

static void export_llmc(const td_checkpoint *ck, const td_param_table *t, const td_export_opts *o) {
    const td_gpt_config *cfg = &ck->cfg;
    td_llmc_header h = {cfg->T, cfg->V, cfg->L, cfg->H, cfg->C,
                        (int32_t)td_round_up((size_t)cfg->V, TD_LLMC_VOCAB_PAD), 0};
    unsigned char hdr[TD_LLMC_HEADER_BYTES];
    td_llmc_header_encode(&h, hdr);
    size_t pad = (size_t)(h.Vp - cfg->V) * (size_t)cfg->C; /* llm.c's padding rows, zero */
    float *zero = td_alloc(sizeof(float) * td_max_sz(pad, 1), TD_MEM_OTHER);
    memset(zero, 0, sizeof(float) * td_max_sz(pad, 1));
    td_staged s;
    td_staged_begin(&s, "export", o->out, 0, o->overwrite);
    td_staged_write(&s, s.fd, NULL, hdr, sizeof hdr);
    size_t bytes = sizeof hdr;
    /* grouped by kind across layers: td_tensor_kind's GPT-2 kinds are llm.c's order */
    for (int k = 0; k <= TD_T_LNFB; k++) {
        int layers = (k == TD_T_WTE || k == TD_T_WPE || k == TD_T_LNFW || k == TD_T_LNFB) ? 1 : cfg->L;
        for (int l = 0; l < layers; l++) {
            const td_param *p = td_param_lookup(t, (td_tensor_kind)k, l);
            size_t n = (size_t)p->shape[0] * (p->ndim == 2 ? (size_t)p->shape[1] : 1);
            td_staged_write(&s, s.fd, NULL, ck->params + p->offset, sizeof(float) * n);
            bytes += sizeof(float) * n;
        }
        if (k == TD_T_WTE) {
            td_staged_write(&s, s.fd, NULL, zero, sizeof(float) * pad);
            bytes += sizeof(float) * pad;
        }
    }
    td_staged_commit(&s);
    td_free(zero);
    printf("export: wrote %s (llm.c GPT-2 checkpoint, version 3, vocabulary %d padded to %d, %zu bytes)\n",
           o->out, cfg->V, h.Vp, bytes);
}

/* The files of a Hugging Face GPT-2 directory, in the order written (the
 * tokenizer's after these). */
enum { F_MODEL, F_CONFIG, F_GENERATION, F_COUNT };
static const char *const hf_files[F_COUNT] = {"model.safetensors", "config.json", "generation_config.json"};
const char *const td_tok_file_names[TD_TOK_FILES] = {"vocab.json", "merges.txt", "tokenizer_config.json",
                                                     "special_tokens_map.json", "tokenizer.json"};
/* --overwrite replaces a directory that holds only these */
static int hf_file(const char *name) {
    for (int i = 0; i < F_COUNT; i++)
        if (strcmp(name, hf_files[i]) == 0) return 1;
    for (int i = 0; i < TD_TOK_FILES; i++)
        if (strcmp(name, td_tok_file_names[i]) == 0) return 1;
    return 0;
}

void td_export_tok_files(const td_checkpoint *ck, const td_hf_config *hc, char *texts[TD_TOK_FILES],
                         size_t lens[TD_TOK_FILES], int *merges) {
    memset(texts, 0, sizeof(char *) * TD_TOK_FILES);
    memset(lens, 0, sizeof(size_t) * TD_TOK_FILES);
    *merges = 0;
    td_err e;
    if (ck->tok.kind == TD_TOK_HF) { /* the model's tokenizer.json, which Hugging Face reads as it is */
        texts[4] = (char *)td_bpe_read_file(ck->tok.file, &lens[4], &e);
        TD_CHECK(texts[4], "export: the checkpoint's tokenizer %s %s", ck->tok.file, e.msg);
        TD_CHECK(td_xxh3(texts[4], lens[4]) == ck->tok.file_xxh3,
                 "export: the checkpoint's tokenizer %s has changed since it was loaded", ck->tok.file);
        return;
    }
    if (ck->tok.kind == TD_TOK_CL100K || ck->tok.kind == TD_TOK_O200K) {
        /* GPT-2's vocab.json and merges.txt cannot carry tiktoken's pattern;
         * a tokenizer.json's Split can */
        TD_CHECK(td_bpe_vocab(ck->tok.bpe) == ck->cfg.V, "export: the checkpoint's vocabulary is %d, "
                 "but its tokenizer has %d tokens", ck->cfg.V, td_bpe_vocab(ck->tok.bpe));
        texts[4] = td_bpe_hf_tokenizer_json(ck->tok.bpe, &lens[4], merges, &e);
        TD_CHECK(texts[4], "export: tokenizer.json: %s", e.msg);
        if (hc->eot > 0) { /* what AutoTokenizer reads first: the class and <|endoftext|> */
            texts[2] = td_export_checked(td_hf_tokenizer_config_fast_format(hc), "tokenizer_config.json");
            lens[2] = strlen(texts[2]);
        }
        return;
    }
    if (ck->tok.kind != TD_TOK_GPT2) return;
    TD_CHECK(td_bpe_vocab(ck->tok.bpe) == ck->cfg.V, "export: the checkpoint's vocabulary is %d, but "
             "GPT-2's tokenizer has %d tokens", ck->cfg.V, td_bpe_vocab(ck->tok.bpe));
    texts[0] = td_bpe_hf_vocab_json(ck->tok.bpe, &lens[0], &e);
    TD_CHECK(texts[0], "export: vocab.json: %s", e.msg);
    texts[1] = td_bpe_hf_merges_txt(ck->tok.bpe, &lens[1], merges, &e);
    TD_CHECK(texts[1], "export: merges.txt: %s", e.msg);
    texts[2] = td_export_checked(td_hf_tokenizer_config_format(hc), "tokenizer_config.json");
    texts[3] = td_export_checked(strdup(td_hf_special_tokens_map), "special_tokens_map.json");
    lens[2] = strlen(texts[2]), lens[3] = strlen(texts[3]);
}

void td_export_tok_summary(const td_checkpoint *ck, int merges) {
    if (ck->tok.kind == TD_TOK_GPT2)
        printf(", vocab.json %d tokens, merges.txt %d merges, tokenizer_config.json, "
               "special_tokens_map.json)\n", td_bpe_vocab(ck->tok.bpe), merges);
    else if (ck->tok.kind == TD_TOK_HF)
        printf(", tokenizer.json: %s as the checkpoint recorded it)\n", ck->tok.file);
    else if (ck->tok.kind == TD_TOK_CL100K || ck->tok.kind == TD_TOK_O200K)
        printf(", tokenizer.json: tiktoken's %s, %d tokens, %d merges, tokenizer_config.json)\n",
               ck->tok.kind == TD_TOK_CL100K ? "cl100k_base" : "o200k_base", td_bpe_vocab(ck->tok.bpe),
               merges);
    else
        printf(")\nexport: note: no tokenizer files: the model's vocabulary is trident's %s, which no "
               "Hugging Face tokenizer reproduces; %s\n",
               ck->tok.kind == TD_TOK_CHAR ? "char tokenizer (token i = the i-th character of its text)"
               : ck->tok.kind == TD_TOK_BYTE ? "byte tokenizer (token i = byte i)"
                                              : "plain ids of a token file (no text tokenizer)",
               ck->tok.kind == TD_TOK_CHAR ? "config.json's trident_chars lists the characters"
                                           : "config.json's trident_tokenizer names it");
}

static void export_hf_dir(const td_checkpoint *ck, const td_param_table *t, const td_export_opts *o) {
    td_st_plan sp;
    /* GPT2LMHeadModel's own names: what its save_pretrained writes (the tied
     * lm_head.weight left out), so loaders keyed on that class's state dict
     * need no prefix rule (HF's loader also takes GPT2Model's bare names) */
    td_hf_item *items;
    plan_rows(&sp, &items, t, "transformer.");
    void *scratch = td_st_plan_scratch(&sp, 1);
    td_hf_config hc = td_export_hf_config(ck);
    char *text[F_COUNT] = {NULL}, *tok[TD_TOK_FILES];
    size_t tok_len[TD_TOK_FILES];
    int merges;
    text[F_CONFIG] = td_export_checked(td_hf_config_format(&hc), "config.json");
    text[F_GENERATION] = td_export_checked(td_hf_generation_config_format(&hc), "generation_config.json");
    td_export_tok_files(ck, &hc, tok, tok_len, &merges);

    td_staged d;
    td_staged_begin(&d, "export", o->out, 1, o->overwrite);
    int fd = td_staged_create(&d, hf_files[F_MODEL]);
    td_st_plan_write(&sp, ck->params, scratch, &d, fd, hf_files[F_MODEL]);
    td_staged_close(&d, fd, hf_files[F_MODEL]);
    for (int f = F_CONFIG; f < F_COUNT; f++) td_export_put(&d, hf_files[f], text[f], strlen(text[f]));
    for (int f = 0; f < TD_TOK_FILES; f++)
        if (tok[f]) td_export_put(&d, td_tok_file_names[f], tok[f], tok_len[f]);
    td_staged_commit(&d);

    printf("export: wrote %s/ (Hugging Face GPT2LMHeadModel: model.safetensors %d tensors %zu bytes, "
           "config.json, generation_config.json", o->out, t->n_rows, sp.bytes);
    td_export_tok_summary(ck, merges);
    for (int f = 0; f < F_COUNT; f++) free(text[f]);
    for (int f = 0; f < TD_TOK_FILES; f++) free(tok[f]);
    td_free(scratch);
    td_st_plan_free(&sp);
    td_free(items);
}

static const char *format_name(td_export_format f) {
    return f == TD_EXPORT_HF_LLAMA ? "hf-llama" : f == TD_EXPORT_HF_MIXTRAL ? "hf-mixtral" : f == TD_EXPORT_HF_GPT2 ? "hf-gpt2"
           : f == TD_EXPORT_LLMC ? "llmc" : "safetensors";
}

/* Each format holds one family's tensors: GPT-2's (dense), Llama's dense
 * MLPs, or Llama's mixture of experts. */
static void check_family(const td_checkpoint *ck, td_export_format f) {
    int llama = ck->cfg.arch == TD_ARCH_LLAMA, moe = ck->cfg.moe.E > 0;
    int llama_format = f == TD_EXPORT_HF_LLAMA || f == TD_EXPORT_HF_MIXTRAL;
    TD_CHECK(!moe || llama, "export: %s: the checkpoint is a gpt2 mixture-of-experts model (--moe-experts %d); no "
             "export format holds GPT-2's experts (hf-mixtral is the llama family's)", ck->dir, ck->cfg.moe.E);
    TD_CHECK(llama == llama_format, "export: %s: the checkpoint is a %s model; --format %s writes %s, so use %s", ck->dir,
             td_arch_name(ck->cfg.arch), format_name(f), llama ? "GPT-2's tensors" : "Llama's tensors",
             !llama ? "--format hf-gpt2, safetensors or llmc" : moe ? "--format hf-mixtral" : "--format hf-llama");
    TD_CHECK(moe == (f == TD_EXPORT_HF_MIXTRAL), "export: %s: the checkpoint is a %s llama model; --format %s writes %s, "
             "so use --format %s", ck->dir, moe ? "mixture-of-experts" : "dense", format_name(f),
             moe ? "LlamaForCausalLM's dense MLPs" : "MixtralForCausalLM's experts", moe ? "hf-mixtral" : "hf-llama");
}

void td_export(const td_export_opts *o) {
    const char *base = strrchr(o->out, '/') ? strrchr(o->out, '/') + 1 : o->out;
    char what[PATH_MAX + 64];
    snprintf(what, sizeof what, "--out %s", o->out);
    /* refusals first: nothing is loaded for an output that would be refused */
    if (o->format == TD_EXPORT_HF_GPT2 || o->format == TD_EXPORT_HF_LLAMA || o->format == TD_EXPORT_HF_MIXTRAL) {
        td_staged_check("export", what, o->out, 1, o->overwrite,
                        o->format == TD_EXPORT_HF_GPT2 ? hf_file : td_hf_llama_file);
    } else {
        TD_CHECK(o->format == TD_EXPORT_LLMC || strcmp(base, "config.json") != 0,
                 "export: --out %s: safetensors writes config.json beside the model; name the model otherwise",
                 o->out);
        td_staged_check("export", what, o->out, 0, o->overwrite, NULL);
        if (o->format == TD_EXPORT_SAFETENSORS) {
            char cpath[PATH_MAX + 16], cwhat[PATH_MAX + 64];
            config_path(cpath, sizeof cpath, o->out);
            snprintf(cwhat, sizeof cwhat, "--out %s: the config.json beside it, %s,", o->out, cpath);
            td_staged_check("export", cwhat, cpath, 0, o->overwrite, NULL);
        }
    }
    td_checkpoint ck;
    td_ckpt_load(&ck, o->ckpt);
    check_family(&ck, o->format);
    td_param_table canon;
    td_param_table_build(&canon, &ck.cfg, 1);
    if (o->format == TD_EXPORT_HF_GPT2) export_hf_dir(&ck, &canon, o);
    else if (o->format == TD_EXPORT_HF_LLAMA) td_hf_family_export(&td_hf_llama_family, &ck, &canon, o);
    else if (o->format == TD_EXPORT_HF_MIXTRAL) {
        td_hf_mixtral_check(&ck, &canon);
        td_hf_family_export(&td_hf_mixtral_family, &ck, &canon, o);
    }
    else if (o->format == TD_EXPORT_SAFETENSORS) export_safetensors(&ck, &canon, o);
    else export_llmc(&ck, &canon, o);
    td_param_table_free(&canon);
    td_ckpt_free(&ck);
}

void td_interop_abort_cleanup(int code) {
    (void)code;
    td_staged_remove_all();
}
