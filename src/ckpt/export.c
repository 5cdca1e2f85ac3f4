/* `trident export`: a checkpoint's parameters as Hugging Face GPT-2
 * safetensors (+ config.json) or as llm.c's GPT-2 checkpoint
 * (ckpt_interop.h). Reads through td_ckpt_load only. Files are written
 * under a temporary name and renamed into place, so a failed export leaves
 * no partial file behind. */
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpt2_names.h"
#include "trident/base.h"
#include "trident/ckpt.h"
#include "trident/ckpt_interop.h"
#include "trident/flags.h"
#include "trident/formats_gpt2.h"
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

/* ---- a file written under a temporary name, renamed when complete ------ */
typedef struct {
    FILE *f;
    const char *path;
    char tmp[PATH_MAX + 32];
} out_file;

_Noreturn static void out_failed(out_file *o, const char *what, int err) {
    if (o->f) fclose(o->f);
    unlink(o->tmp);
    td_fail("export: --out %s: %s: %s; nothing was written", o->path, what, strerror(err));
}
static void out_open(out_file *o, const char *path) {
    o->path = path;
    o->f = NULL;
    TD_CHECK(strlen(path) < PATH_MAX, "export: --out %.64s...: the path is too long", path);
    snprintf(o->tmp, sizeof o->tmp, "%s.tmp.%d", path, (int)getpid());
    o->f = fopen(o->tmp, "wb");
    if (!o->f) out_failed(o, "cannot create it", errno);
}
static void out_write(out_file *o, const void *p, size_t n) {
    if (n && fwrite(p, 1, n, o->f) != n) out_failed(o, "write failed", errno ? errno : EIO);
}
static void out_commit(out_file *o) {
    if (fflush(o->f) != 0 || fsync(fileno(o->f)) != 0) out_failed(o, "write failed", errno);
    int rc = fclose(o->f);
    o->f = NULL;
    if (rc != 0) out_failed(o, "closing it failed", errno);
    if (rename(o->tmp, o->path) != 0) out_failed(o, "renaming it into place failed", errno);
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

static void export_safetensors(const td_param_table *t, const float *params, const td_tokenizer *tok,
                               const char *path) {
    const td_gpt_config *cfg = &t->cfg;
    td_st_tensor *st = td_alloc(sizeof *st * (size_t)t->n_rows, TD_MEM_OTHER);
    char (*names)[96] = td_alloc(sizeof *names * (size_t)t->n_rows, TD_MEM_OTHER);
    size_t most = 0;
    for (int i = 0; i < t->n_rows; i++) { /* rows are in forward order: wte, wpe, h.0..., ln_f */
        const td_param *p = &t->rows[i];
        td_hf_name(names[i], sizeof names[i], p);
        st[i] = (td_st_tensor){.name = names[i], .dtype = TD_ST_F32};
        st[i].ndim = td_hf_shape(p, st[i].shape);
        most = td_max_sz(most, (size_t)p->shape[0] * (p->ndim == 2 ? (size_t)p->shape[1] : 1));
    }
    const char *mk[] = {"format", "producer"}, *mv[] = {"pt", "trident export"};
    char *hdr;
    size_t hlen;
    td_err e;
    TD_CHECK(td_st_header_format(st, t->n_rows, mk, mv, 2, &hdr, &hlen, &e) == 0, "export: %s", e.msg);
    out_file o;
    out_open(&o, path);
    out_write(&o, hdr, hlen);
    free(hdr);
    float *buf = td_alloc(sizeof(float) * most, TD_MEM_OTHER);
    for (int i = 0; i < t->n_rows; i++) {
        hf_tensor(buf, &t->rows[i], params);
        out_write(&o, buf, st[i].end - st[i].begin);
    }
    td_free(buf);

    /* config.json beside FILE, written after the model so a reader never
     * finds a config without its weights */
    td_hf_config hc = {cfg->L, cfg->H, cfg->C, cfg->T, cfg->V, "", tok->kind == TD_TOK_CHAR ? tok->chars : NULL};
    snprintf(hc.tokenizer, sizeof hc.tokenizer, "%s", td_tokenizer_name(tok->kind));
    char *text = td_hf_config_format(&hc);
    TD_CHECK(text, "export: out of memory formatting config.json");
    char dir[PATH_MAX], cpath[PATH_MAX + 16];
    snprintf(dir, sizeof dir, "%s", path);
    snprintf(cpath, sizeof cpath, "%s/config.json", dirname(dir));
    out_file oc;
    out_open(&oc, cpath);
    out_write(&oc, text, strlen(text));
    out_commit(&o);
    out_commit(&oc);
    free(text);
    printf("export: wrote %s (%d tensors, %zu bytes) and %s\n", path, t->n_rows,
           (size_t)(hlen + st[t->n_rows - 1].end), cpath);
    td_free(names);
    td_free(st);
}

static void export_llmc(const td_param_table *t, const float *params, const char *path) {
    const td_gpt_config *cfg = &t->cfg;
    td_llmc_header h = {cfg->T, cfg->V, cfg->L, cfg->H, cfg->C,
                        (int32_t)td_round_up((size_t)cfg->V, TD_LLMC_VOCAB_PAD), 0};
    unsigned char hdr[TD_LLMC_HEADER_BYTES];
    td_llmc_header_encode(&h, hdr);
    out_file o;
    out_open(&o, path);
    out_write(&o, hdr, sizeof hdr);
    size_t bytes = sizeof hdr;
    /* grouped by kind across layers: td_tensor_kind is llm.c's order */
    for (int k = 0; k < TD_T_COUNT; k++) {
        int layers = (k == TD_T_WTE || k == TD_T_WPE || k == TD_T_LNFW || k == TD_T_LNFB) ? 1 : cfg->L;
        for (int l = 0; l < layers; l++) {
            const td_param *p = td_param_lookup(t, (td_tensor_kind)k, l);
            size_t n = (size_t)p->shape[0] * (p->ndim == 2 ? (size_t)p->shape[1] : 1);
            out_write(&o, params + p->offset, sizeof(float) * n);
            bytes += sizeof(float) * n;
        }
        if (k == TD_T_WTE) { /* llm.c's padding rows, zero */
            size_t pad = (size_t)(h.Vp - cfg->V) * (size_t)cfg->C;
            float *zero = td_alloc(sizeof(float) * td_max_sz(pad, 1), TD_MEM_OTHER);
            memset(zero, 0, sizeof(float) * td_max_sz(pad, 1));
            out_write(&o, zero, sizeof(float) * pad);
            bytes += sizeof(float) * pad;
            td_free(zero);
        }
    }
    out_commit(&o);
    printf("export: wrote %s (llm.c GPT-2 checkpoint, version 3, vocabulary %d padded to %d, %zu bytes)\n",
           path, cfg->V, h.Vp, bytes);
}

int td_export_main(int argc, char **argv) {
    const char *ckpt = NULL, *format = NULL, *out = NULL;
    const td_flag flags[] = {
        {"--ckpt", TD_FLAG_STR, &ckpt, "checkpoint DIR written by train --out (follows DIR/latest) or one of its step directories", NULL},
        {"--format", TD_FLAG_STR, &format, "safetensors (Hugging Face GPT-2, with config.json beside --out) or llmc (llm.c's GPT-2 checkpoint)", NULL},
        {"--out", TD_FLAG_STR, &out, "FILE to write (replaced atomically)", NULL},
    };
    td_flags_parse("export", flags, (int)(sizeof flags / sizeof flags[0]), argc, argv);
    TD_CHECK(ckpt, "export: --ckpt DIR is required (a directory written by 'trident train --out DIR')");
    TD_CHECK(out, "export: --out FILE is required");
    TD_CHECK(format && (strcmp(format, "safetensors") == 0 || strcmp(format, "llmc") == 0),
             "export: --format %s is not known; use safetensors or llmc", format ? format : "(missing)");
    const char *base = strrchr(out, '/') ? strrchr(out, '/') + 1 : out;
    TD_CHECK(strcmp(format, "llmc") == 0 || strcmp(base, "config.json") != 0,
             "export: --out %s: safetensors writes config.json beside the model; name the model otherwise", out);
    td_checkpoint ck;
    td_ckpt_load(&ck, ckpt);
    td_param_table canon;
    td_param_table_build(&canon, &ck.cfg, 1);
    if (strcmp(format, "safetensors") == 0) export_safetensors(&canon, ck.params, &ck.tok, out);
    else export_llmc(&canon, ck.params, out);
    td_param_table_free(&canon);
    td_ckpt_free(&ck);
    return 0;
}
