/* Export: a checkpoint's parameters as a Hugging Face GPT-2 directory, a
 * safetensors file (+ config.json) or llm.c's GPT-2 checkpoint
 * (ckpt_interop.h). Reads through td_ckpt_load only. Everything an output
 * holds is prepared in memory first, so that between creating its
 * temporary and renaming it into place only writes can fail, and each
 * failure removes the temporaries (staged.h). */
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt2_names.h"
#include "staged.h"
#include "trident/base.h"
#include "trident/bpe.h"
#include "trident/ckpt.h"
#include "trident/ckpt_interop.h"
#include "trident/formats_gpt2.h"
#include "trident/formats_hash.h"
#include "trident/formats_safetensors.h"

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

/* Row p of the canonical buffer in HF's layout into dst (transposed for
 * Conv1D weights; wte's real rows only). */
static void hf_tensor(float *dst, const td_param *p, const float *params) {
    const float *src = params + p->offset;
    if (!td_hf_kinds[p->kind].transposed) {
        memcpy(dst, src, sizeof(float) * (size_t)p->shape[0] * (p->ndim == 2 ? (size_t)p->shape[1] : 1));
        return;
    }
    size_t rows = (size_t)p->shape[0], cols = (size_t)p->shape[1]; /* trident: [out, in] */
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) dst[c * rows + r] = src[r * cols + c];
}


/* ---- the model as safetensors: prepared, then written ------------------- */

typedef struct {
    td_st_tensor *st;
    char (*names)[112];
    char *hdr;      /* u64 length + JSON header */
    size_t hlen;    /* its bytes */
    size_t bytes;   /* the whole file */
    float *buf;     /* room for the largest tensor */
} st_plan;

/* The header for t's rows named prefix + GPT2Model's name ("" for the
 * file export, "transformer." in a GPT2LMHeadModel directory). */
static void st_prepare(st_plan *sp, const td_param_table *t, const char *prefix) {
    sp->st = td_alloc(sizeof *sp->st * (size_t)t->n_rows, TD_MEM_OTHER);
    sp->names = td_alloc(sizeof *sp->names * (size_t)t->n_rows, TD_MEM_OTHER);
    size_t most = 0;
    for (int i = 0; i < t->n_rows; i++) { /* rows are in forward order: wte, wpe, h.0..., ln_f */
        const td_param *p = &t->rows[i];
        char base[96];
        td_hf_name(base, sizeof base, p);
        snprintf(sp->names[i], sizeof sp->names[i], "%s%s", prefix, base);
        sp->st[i] = (td_st_tensor){.name = sp->names[i], .dtype = TD_ST_F32};
        sp->st[i].ndim = td_hf_shape(p, sp->st[i].shape);
        most = td_max_sz(most, (size_t)p->shape[0] * (p->ndim == 2 ? (size_t)p->shape[1] : 1));
    }
    const char *mk[] = {"format", "producer"}, *mv[] = {"pt", "trident export"};
    td_err e;
    TD_CHECK(td_st_header_format(sp->st, t->n_rows, mk, mv, 2, &sp->hdr, &sp->hlen, &e) == 0,
             "export: %s", e.msg);
    sp->bytes = sp->hlen + (size_t)sp->st[t->n_rows - 1].end;
    sp->buf = td_alloc(sizeof(float) * most, TD_MEM_OTHER);
}

static void st_write(const st_plan *sp, const td_param_table *t, const float *params, td_staged *s,
                     int fd, const char *name) {
    td_staged_write(s, fd, name, sp->hdr, sp->hlen);
    for (int i = 0; i < t->n_rows; i++) {
        hf_tensor(sp->buf, &t->rows[i], params);
        td_staged_write(s, fd, name, sp->buf, sp->st[i].end - sp->st[i].begin);
    }
}

static void st_free(st_plan *sp) {
    free(sp->hdr);
    td_free(sp->buf);
    td_free(sp->names);
    td_free(sp->st);
}

static td_hf_config hf_config(const td_checkpoint *ck) {
    const td_gpt_config *c = &ck->cfg;
    td_hf_config hc = {c->L, c->H, c->C, c->T, c->V, "", ck->tok.kind == TD_TOK_CHAR ? ck->tok.chars : NULL};
    snprintf(hc.tokenizer, sizeof hc.tokenizer, "%s", td_tokenizer_name(ck->tok.kind));
    return hc;
}

static char *checked(char *text, const char *what) {
    TD_CHECK(text, "export: out of memory formatting %s", what);
    return text;
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
    st_plan sp;
    st_prepare(&sp, t, "");
    td_hf_config hc = hf_config(ck);
    char *text = checked(td_hf_config_format(&hc), "config.json");
    td_staged m, c;
    td_staged_begin(&m, "export", o->out, 0, o->overwrite);
    td_staged_begin(&c, "export", cpath, 0, o->overwrite);
    st_write(&sp, t, ck->params, &m, m.fd, NULL);
    td_staged_write(&c, c.fd, NULL, text, strlen(text));
    /* the model first, so a reader never finds a new config without its weights */
    td_staged_commit(&m);
    td_staged_commit(&c);
    printf("export: wrote %s (%d tensors, %zu bytes) and %s\n", o->out, t->n_rows, sp.bytes, cpath);
    free(text);
    st_free(&sp);
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

/* The files of a Hugging Face GPT-2 directory, in the order written. */
enum { F_MODEL, F_CONFIG, F_GENERATION, F_VOCAB, F_MERGES, F_TOKENIZER, F_SPECIAL, F_HF_JSON, F_COUNT };
static const char *const hf_files[F_COUNT] = {"model.safetensors", "config.json", "generation_config.json",
                                               "vocab.json", "merges.txt", "tokenizer_config.json",
                                               "special_tokens_map.json", "tokenizer.json"};
/* --overwrite replaces a directory that holds only these */
static int hf_file(const char *name) {
    for (int i = 0; i < F_COUNT; i++)
        if (strcmp(name, hf_files[i]) == 0) return 1;
    return 0;
}

static void export_hf_dir(const td_checkpoint *ck, const td_param_table *t, const td_export_opts *o) {
    st_plan sp;
    /* GPT2LMHeadModel's own names: what its save_pretrained writes (the tied
     * lm_head.weight left out), so loaders keyed on that class's state dict
     * need no prefix rule (HF's loader also takes GPT2Model's bare names) */
    st_prepare(&sp, t, "transformer.");
    td_hf_config hc = hf_config(ck);
    char *text[F_COUNT] = {NULL};
    size_t len[F_COUNT] = {0};
    text[F_CONFIG] = checked(td_hf_config_format(&hc), "config.json");
    text[F_GENERATION] = checked(td_hf_generation_config_format(&hc), "generation_config.json");
    int gpt2 = ck->tok.kind == TD_TOK_GPT2, merges = 0;
    if (gpt2) {
        td_err e;
        TD_CHECK(td_bpe_vocab(ck->tok.bpe) == ck->cfg.V, "export: the checkpoint's vocabulary is %d, but "
                 "GPT-2's tokenizer has %d tokens", ck->cfg.V, td_bpe_vocab(ck->tok.bpe));
        text[F_VOCAB] = td_bpe_hf_vocab_json(ck->tok.bpe, &len[F_VOCAB], &e);
        TD_CHECK(text[F_VOCAB], "export: vocab.json: %s", e.msg);
        text[F_MERGES] = td_bpe_hf_merges_txt(ck->tok.bpe, &len[F_MERGES], &merges, &e);
        TD_CHECK(text[F_MERGES], "export: merges.txt: %s", e.msg);
        text[F_TOKENIZER] = checked(td_hf_tokenizer_config_format(&hc), "tokenizer_config.json");
        text[F_SPECIAL] = checked(strdup(td_hf_special_tokens_map), "special_tokens_map.json");
    }
    if (ck->tok.kind == TD_TOK_HF) { /* the model's tokenizer.json, which Hugging Face reads as it is */
        td_err e;
        text[F_HF_JSON] = (char *)td_bpe_read_file(ck->tok.file, &len[F_HF_JSON], &e);
        TD_CHECK(text[F_HF_JSON], "export: the checkpoint's tokenizer %s %s", ck->tok.file, e.msg);
        TD_CHECK(td_xxh3(text[F_HF_JSON], len[F_HF_JSON]) == ck->tok.file_xxh3,
                 "export: the checkpoint's tokenizer %s has changed since it was loaded", ck->tok.file);
    }
    for (int f = F_CONFIG; f < F_COUNT; f++)
        if (text[f] && !len[f]) len[f] = strlen(text[f]);

    td_staged d;
    td_staged_begin(&d, "export", o->out, 1, o->overwrite);
    int fd = td_staged_create(&d, hf_files[F_MODEL]);
    st_write(&sp, t, ck->params, &d, fd, hf_files[F_MODEL]);
    td_staged_close(&d, fd, hf_files[F_MODEL]);
    for (int f = F_CONFIG; f < F_COUNT; f++) {
        if (!text[f]) continue;
        fd = td_staged_create(&d, hf_files[f]);
        td_staged_write(&d, fd, hf_files[f], text[f], len[f]);
        td_staged_close(&d, fd, hf_files[f]);
    }
    td_staged_commit(&d);

    printf("export: wrote %s/ (Hugging Face GPT2LMHeadModel: model.safetensors %d tensors %zu bytes, "
           "config.json, generation_config.json", o->out, t->n_rows, sp.bytes);
    if (gpt2)
        printf(", vocab.json %d tokens, merges.txt %d merges, tokenizer_config.json, "
               "special_tokens_map.json)\n", td_bpe_vocab(ck->tok.bpe), merges);
    else if (ck->tok.kind == TD_TOK_HF)
        printf(", tokenizer.json: %s as the checkpoint recorded it)\n", ck->tok.file);
    else
        printf(")\nexport: note: no tokenizer files: the model's vocabulary is trident's %s, which no "
               "Hugging Face tokenizer reproduces; %s\n",
               ck->tok.kind == TD_TOK_CHAR ? "char tokenizer (token i = the i-th character of its text)"
               : ck->tok.kind == TD_TOK_BYTE ? "byte tokenizer (token i = byte i)"
                                              : "plain ids of a token file (no text tokenizer)",
               ck->tok.kind == TD_TOK_CHAR ? "config.json's trident_chars lists the characters"
                                           : "config.json's trident_tokenizer names it");
    for (int f = 0; f < F_COUNT; f++) free(text[f]);
    st_free(&sp);
}

void td_export(const td_export_opts *o) {
    const char *base = strrchr(o->out, '/') ? strrchr(o->out, '/') + 1 : o->out;
    char what[PATH_MAX + 64];
    snprintf(what, sizeof what, "--out %s", o->out);
    /* refusals first: nothing is loaded for an output that would be refused */
    if (o->format == TD_EXPORT_HF_GPT2) {
        td_staged_check("export", what, o->out, 1, o->overwrite, hf_file);
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
    td_param_table canon;
    td_param_table_build(&canon, &ck.cfg, 1);
    if (o->format == TD_EXPORT_HF_GPT2) export_hf_dir(&ck, &canon, o);
    else if (o->format == TD_EXPORT_SAFETENSORS) export_safetensors(&ck, &canon, o);
    else export_llmc(&ck, &canon, o);
    td_param_table_free(&canon);
    td_ckpt_free(&ck);
}

void td_interop_abort_cleanup(int code) {
    (void)code;
    td_staged_remove_all();
}
