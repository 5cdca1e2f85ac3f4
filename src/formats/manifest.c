/* The manifest.json parser (formats_manifest.h): every field checked, every
 * error one sentence naming the field. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/formats_hash.h"
#include "trident/formats_json.h"
#include "trident/formats_manifest.h"

const char *const td_mf_section_names[TD_MF_NSECTIONS] = {"params", "adam_m", "adam_v"};
void td_mf_section_name(int section, char *buf, size_t cap) {
    if (section >= 0 && section < TD_MF_NSECTIONS) {
        snprintf(buf, cap, "%s", td_mf_section_names[section]);
        return;
    }
    int i = (section - TD_MF_NSECTIONS) / TD_MF_RANK_KINDS, r = i % TD_MF_MAX_TP, dt = i / TD_MF_MAX_TP;
    char tp[16] = "";
    if (r > 0) snprintf(tp, sizeof tp, "_tp%d", r);
    snprintf(buf, cap, "rs%d_dp%d%s%s", (section - TD_MF_NSECTIONS) % TD_MF_RANK_KINDS, dt / 2, tp,
             dt % 2 ? "_tied" : "");
}

/* the section id of a name; -1: none (rank state of a dp rank >= dp, a
 * replica of a tp rank >= tp) */
static int section_id(const char *s, int dp, int tp) {
    for (int k = 0; k < TD_MF_NSECTIONS; k++)
        if (strcmp(s, td_mf_section_names[k]) == 0) return k;
    unsigned kind, d, r = 0;
    int used = 0, more = 0;
    if (sscanf(s, "rs%1u_dp%5u%n", &kind, &d, &used) != 2 || kind >= TD_MF_RANK_KINDS || d >= (unsigned)dp ||
        d >= TD_MF_MAX_DP)
        return -1;
    if (sscanf(s + used, "_tp%4u%n", &r, &more) == 1) used += more;
    if (r >= (unsigned)tp || r >= TD_MF_MAX_TP) return -1;
    int tied = strcmp(s + used, "_tied") == 0, id = td_mf_rank_section((int)kind, (int)d, tied, (int)r);
    char canon[32]; /* one spelling only: no leading zeros, signs, _tp0 or other suffixes */
    td_mf_section_name(id, canon, sizeof canon);
    return strcmp(canon, s) == 0 ? id : -1;
}

/* td_tokenizer_kind's names, in its order */
static const char *const tok_names[] = {"char", "byte", "ids", "gpt2", "cl100k", "o200k", "hf"};
enum { TOK_HF = 6 };

#define BIG (INT64_C(1) << 40) /* element counts and offsets: far beyond any model here */

/* e already says which field; prefix the object it is in */
static int in(td_err *e, const char *where, int idx) {
    char m[512];
    snprintf(m, sizeof m, "%s", e->msg);
    if (idx >= 0) return td_err_set(e, "%s %d: %s", where, idx, m);
    return td_err_set(e, "%s: %s", where, m);
}

static int get_i(const td_jv *o, const char *k, int64_t lo, int64_t hi, int *out, td_err *e) {
    int64_t v;
    if (td_json_get_int(o, k, lo, hi, &v, e) != 0) return -1;
    *out = (int)v;
    return 0;
}

static int get_obj(const td_jv *o, const char *k, td_jv_type type, const td_jv **out, td_err *e) {
    *out = td_json_get(o, k);
    if (!*out) return td_err_set(e, "field %s: missing", k);
    if ((*out)->type != type)
        return td_err_set(e, "field %s: must be %s", k, type == TD_JV_OBJ ? "an object" : "an array");
    return 0;
}

static int get_num(const td_jv *o, const char *k, double lo, double hi, double *out, td_err *e) {
    const td_jv *v = td_json_get(o, k);
    if (!v) return td_err_set(e, "field %s: missing", k);
    if (v->type != TD_JV_NUM || !(v->num >= lo && v->num <= hi))
        return td_err_set(e, "field %s: must be a number in [%g, %g]", k, lo, hi);
    *out = v->num;
    return 0;
}

static int copy_str(const td_jv *o, const char *k, char *dst, size_t cap, td_err *e);

/* The model family's fields of "config": none for gpt2 (older manifests),
 * all of them for llama. */
static int get_family(const td_jv *c, td_manifest *m, td_err *e) {
    snprintf(m->arch, sizeof m->arch, "gpt2");
    if (!td_json_get(c, "arch")) return 0;
    if (copy_str(c, "arch", m->arch, sizeof m->arch, e) != 0) return -1;
    if (strcmp(m->arch, "gpt2") == 0) return 0;
    if (strcmp(m->arch, "llama") != 0) return td_err_set(e, "field arch: \"%s\", valid is gpt2 or llama", m->arch);
    const td_jv *tie = td_json_get(c, "tie_embeddings"), *rs = td_json_get(c, "rope_scaling");
    if (!tie || tie->type != TD_JV_BOOL) return td_err_set(e, "field tie_embeddings: must be true or false");
    m->tie = tie->boolean ? 1 : 2;
    if (get_i(c, "kv_heads", 1, 65536, &m->kv_heads, e) || get_i(c, "ffn_hidden", 1, 1 << 18, &m->ffn_hidden, e) ||
        get_num(c, "norm_eps", 1e-30, 1.0, &m->norm_eps, e) || get_num(c, "rope_theta", 1e-30, 1e30, &m->rope_theta, e))
        return -1;
    if (!rs || rs->type == TD_JV_NULL) return 0;
    if (rs->type != TD_JV_OBJ) return td_err_set(e, "field rope_scaling: must be an object or null");
    if (get_num(rs, "factor", 1e-30, 1e30, &m->rope_factor, e) ||
        get_num(rs, "low_freq_factor", 1e-30, 1e30, &m->rope_low_freq, e) ||
        get_num(rs, "high_freq_factor", 1e-30, 1e30, &m->rope_high_freq, e) ||
        get_i(rs, "original_max_position_embeddings", 1, 1 << 30, &m->rope_orig_max_pos, e))
        return in(e, "rope_scaling", -1);
    return 0;
}

/* "moe" of "config": a mixture of experts' fields, all of them (absent: dense) */
static int get_moe(const td_jv *c, td_manifest *m, td_err *e) {
    const td_jv *o = td_json_get(c, "moe"), *nt;
    if (!o) return 0;
    if (o->type != TD_JV_OBJ) return td_err_set(e, "field moe: must be an object");
    char router[16];
    if (get_i(o, "experts", 2, 4096, &m->moe_experts, e) || get_i(o, "top_k", 1, m->moe_experts, &m->moe_top_k, e) ||
        get_i(o, "every", 1, 256, &m->moe_every, e) || get_i(o, "ffn_hidden", 1, 1 << 18, &m->moe_ffn_hidden, e) ||
        get_i(o, "shared", 0, 64, &m->moe_shared, e) || copy_str(o, "router", router, sizeof router, e) ||
        get_num(o, "aux_coef", 0, 1e30, &m->moe_aux_coef, e) || get_num(o, "z_coef", 0, 1e30, &m->moe_z_coef, e) ||
        get_num(o, "bias_rate", 0, 1e30, &m->moe_bias_rate, e) || get_num(o, "capacity", 0, 1e30, &m->moe_capacity, e))
        return in(e, "moe", -1);
    if (strcmp(router, "softmax") != 0 && strcmp(router, "sigmoid") != 0)
        return td_err_set(e, "moe: field router: \"%s\", valid is softmax or sigmoid", router);
    m->moe_router = strcmp(router, "sigmoid") == 0;
    if (!(nt = td_json_get(o, "norm_topk")) || nt->type != TD_JV_BOOL)
        return td_err_set(e, "moe: field norm_topk: must be true or false");
    m->moe_norm_topk = nt->boolean ? 1 : 2;
    return 0;
}

static int copy_str(const td_jv *o, const char *k, char *dst, size_t cap, td_err *e) {
    const char *s;
    if (td_json_get_str(o, k, &s, e) != 0) return -1;
    if (strlen(s) >= cap) return td_err_set(e, "field %s: longer than %zu bytes", k, cap - 1);
    memcpy(dst, s, strlen(s) + 1);
    return 0;
}

static int parse_piece(const td_jv *p, const td_mf_tensor *t, int n_files, int dp, int tp, td_mf_piece *out,
                       td_err *e) {
    if (p->type != TD_JV_OBJ) return td_err_set(e, "must be an object");
    const char *sec, *key;
    if (td_json_get_str(p, "section", &sec, e) != 0 || td_json_get_str(p, "key", &key, e) != 0) return -1;
    out->section = section_id(sec, dp, tp);
    if (out->section < 0)
        return td_err_set(e, "field section: \"%.40s\", valid is params, adam_m, adam_v or "
                          "rsK_dpD[_tpR][_tied] (K < %d, D < layout's dp %d, 0 < R < its tp %d)", sec,
                          TD_MF_RANK_KINDS, dp, tp);
    int64_t b, en;
    if (get_i(p, "file", 0, n_files - 1, &out->file, e) != 0 || get_i(p, "tp", 1, 4096, &out->tp, e) != 0 ||
        get_i(p, "tp_rank", 0, out->tp - 1, &out->tp_rank, e) != 0 ||
        get_i(p, "split_dim", -1, 1, &out->split_dim, e) != 0 || get_i(p, "groups", 1, 3, &out->groups, e) != 0 ||
        td_json_get_int(p, "begin", 0, BIG, &b, e) != 0 || td_json_get_int(p, "end", b, BIG, &en, e) != 0)
        return -1;
    out->ep = 1, out->ep_rank = 0; /* a piece of no expert-parallel slice */
    if ((td_json_get(p, "ep") || td_json_get(p, "ep_rank")) &&
        (get_i(p, "ep", 1, 4096, &out->ep, e) != 0 || get_i(p, "ep_rank", 0, out->ep - 1, &out->ep_rank, e) != 0))
        return -1;
    int64_t numel = t->shape[0] * (t->ndim == 2 ? t->shape[1] : 1);
    /* a slice holds at most its share plus vocabulary padding rows */
    int64_t cap = numel + (int64_t)16 * out->tp * (t->ndim == 2 ? t->shape[1] : 1);
    if (en > cap) return td_err_set(e, "field end: %lld is beyond the slice of a [%lld] tensor", (long long)en,
                                    (long long)numel);
    out->begin = (uint64_t)b, out->end = (uint64_t)en;
    /* the key says what the piece is; a key of another section, tensor,
     * slice or offset (keys swapped, an adam_m piece naming a params/ key)
     * would put the wrong numbers in place */
    char want[256];
    td_mf_piece_key(want, sizeof want, out->section, t->name, out->tp, out->tp_rank, out->ep, out->ep_rank, out->begin);
    if (strcmp(key, want) != 0)
        return td_err_set(e, "field key: \"%.120s\" is not this piece's (section %s, tp %d, tp_rank %d, ep %d, "
                          "ep_rank %d, begin %llu): want \"%.120s\"", key, sec, out->tp, out->tp_rank, out->ep,
                          out->ep_rank, (unsigned long long)out->begin, want);
    out->key = strdup(key);
    return out->key ? 0 : td_err_set(e, "out of memory");
}

static int parse_tensor(const td_jv *o, int n_files, int dp, int tp, td_mf_tensor *t, td_err *e) {
    if (o->type != TD_JV_OBJ) return td_err_set(e, "must be an object");
    const char *name, *dtype;
    const td_jv *shape, *pieces;
    if (td_json_get_str(o, "name", &name, e) != 0) return -1;
    t->name = strdup(name);
    if (!t->name) return td_err_set(e, "out of memory");
    if (td_json_get_str(o, "dtype", &dtype, e) != 0) return -1;
    if (strcmp(dtype, "F32") != 0) return td_err_set(e, "field dtype: \"%.20s\"; trident saves F32", dtype);
    if (get_obj(o, "shape", TD_JV_ARR, &shape, e) != 0 || get_obj(o, "pieces", TD_JV_ARR, &pieces, e) != 0)
        return -1;
    if (shape->n < 1 || shape->n > 2) return td_err_set(e, "field shape: %d dimensions, want 1 or 2", shape->n);
    t->ndim = shape->n;
    for (int d = 0; d < shape->n; d++) {
        const td_jv *x = &shape->items[d];
        if (x->type != TD_JV_NUM || !x->is_int || x->i < 1 || x->i > (1 << 24))
            return td_err_set(e, "field shape: dimension %d must be an integer in [1, 16777216]", d);
        t->shape[d] = x->i;
    }
    if (pieces->n > 1 << 20) return td_err_set(e, "field pieces: %d pieces", pieces->n);
    t->pieces = calloc((size_t)pieces->n + 1, sizeof *t->pieces);
    if (!t->pieces) return td_err_set(e, "out of memory");
    for (int i = 0; i < pieces->n; i++, t->n_pieces++)
        if (parse_piece(&pieces->items[i], t, n_files, dp, tp, &t->pieces[i], e) != 0) return in(e, "piece", i);
    return 0;
}

/* One files[] entry: a plain name (a manifest never points outside its
 * directory), the writing rank, its grid position, size and header checksum. */
static int parse_file(const td_jv *f, int ranks, td_mf_file *out, td_err *e) {
    if (f->type != TD_JV_OBJ) return td_err_set(e, "must be an object");
    const char *name, *hx;
    unsigned k;
    char tail;
    if (td_json_get_str(f, "name", &name, e) != 0) return -1;
    if (strlen(name) != 23 || sscanf(name, "shard-%5u.safetensor%c", &k, &tail) != 2 || tail != 's' ||
        strchr(name, '/'))
        return td_err_set(e, "field name: must be \"shard-NNNNN.safetensors\"");
    int64_t size;
    if (get_i(f, "rank", 0, ranks - 1, &out->rank, e) != 0 || td_json_get_int(f, "size", 8, BIG, &size, e) != 0 ||
        copy_str(f, "grid", out->grid, sizeof out->grid, e) != 0 || td_json_get_str(f, "header_xxh3", &hx, e) != 0)
        return -1;
    if (strlen(hx) != TD_HASH_HEX || td_hash_parse_hex(hx, &out->header_xxh3) != 0)
        return td_err_set(e, "field header_xxh3: must be 16 hex digits");
    if ((int)k != out->rank) return td_err_set(e, "field rank: %d, but the file is named for rank %u", out->rank, k);
    out->size = (uint64_t)size;
    out->name = strdup(name);
    return out->name ? 0 : td_err_set(e, "out of memory");
}

/* manifest_xxh3: the last member, the checksum of every byte before its
 * value (formats_manifest.h). Checked before anything else is believed. */
static int check_seal(const char *text, size_t n, const td_jv *j, td_err *e) {
    const td_jv *v = td_json_get(j, "manifest_xxh3");
    uint64_t want;
    if (!v) return td_err_set(e, "field manifest_xxh3: missing (the manifest's own checksum)");
    if (v->type != TD_JV_STR || v->len != TD_HASH_HEX || td_hash_parse_hex(v->str, &want) != 0)
        return td_err_set(e, "field manifest_xxh3: must be 16 hex digits");
    size_t k = v->end;
    while (k < n && (text[k] == ' ' || text[k] == '\n' || text[k] == '\r' || text[k] == '\t')) k++;
    if (k >= n || text[k] != '}') return td_err_set(e, "field manifest_xxh3: must be the last member");
    uint64_t have = td_xxh3(text, v->at);
    if (have != want)
        return td_err_set(e, "field manifest_xxh3: the text hashes to %016llx, the manifest records %016llx: "
                          "manifest.json was edited or is corrupt", (unsigned long long)have, (unsigned long long)want);
    return 0;
}

/* "data": the training data's path and fingerprint (data.h) */
static int parse_data(const td_jv *o, td_manifest *m, td_err *e) {
    const char *path, *hx;
    int64_t bytes;
    if (o->type != TD_JV_OBJ) return td_err_set(e, "must be an object");
    if (td_json_get_str(o, "path", &path, e) || td_json_get_int(o, "bytes", 0, INT64_MAX, &bytes, e) ||
        td_json_get_str(o, "xxh3", &hx, e))
        return -1;
    if (strlen(hx) != TD_HASH_HEX || td_hash_parse_hex(hx, &m->data_xxh3) != 0)
        return td_err_set(e, "field xxh3: must be 16 hex digits");
    m->data_path = strdup(path);
    if (!m->data_path) return td_err_set(e, "out of memory");
    m->data_bytes = (uint64_t)bytes, m->has_data = 1;
    return 0;
}

static int parse_top(const td_jv *j, td_manifest *m, td_err *e) {
    const char *fmt;
    if (j->type != TD_JV_OBJ) return td_err_set(e, "not a JSON object");
    if (td_json_get_str(j, "format", &fmt, e) != 0) return -1;
    if (strcmp(fmt, "trident-checkpoint") != 0)
        return td_err_set(e, "field format: \"%.40s\"; not a trident checkpoint manifest", fmt);
    if (get_i(j, "version", 0, 1 << 30, &m->version, e) != 0) return -1;
    if (m->version != TD_MANIFEST_VERSION)
        return td_err_set(e, "field version: %d; this build reads version %d", m->version, TD_MANIFEST_VERSION);
    int64_t seed;
    if (get_i(j, "step", 0, 1 << 30, &m->step, e) != 0 || get_i(j, "lr_step", 0, 1 << 30, &m->lr_step, e) != 0 ||
        td_json_get_int(j, "seed", 0, INT64_MAX, &seed, e) != 0)
        return -1;
    m->seed = (uint64_t)seed;
    const char *run;
    if (td_json_get_str(j, "run", &run, e) != 0) return -1;
    if (strlen(run) != TD_HASH_HEX || td_hash_parse_hex(run, &m->run) != 0)
        return td_err_set(e, "field run: must be 16 hex digits (the run's id)");
    const td_jv *c, *tok, *ls, *lay, *files, *tensors;
    if (get_obj(j, "config", TD_JV_OBJ, &c, e) != 0) return -1;
    if (get_i(c, "layers", 1, 256, &m->layers, e) || get_i(c, "heads", 1, 65536, &m->heads, e) ||
        get_i(c, "embd", 1, 65536, &m->embd, e) || get_i(c, "seq", 1, 1048576, &m->seq, e) ||
        get_i(c, "vocab", 1, 1 << 24, &m->vocab, e) || get_family(c, m, e) || get_moe(c, m, e))
        return in(e, "config", -1);
    if (get_obj(j, "tokenizer", TD_JV_OBJ, &tok, e) != 0) return -1;
    const char *kind;
    if (td_json_get_str(tok, "kind", &kind, e) || get_i(tok, "vocab", 1, 1 << 24, &m->tok_vocab, e))
        return in(e, "tokenizer", -1);
    m->tok_kind = -1;
    for (int k = 0; k < (int)(sizeof tok_names / sizeof tok_names[0]); k++)
        if (strcmp(kind, tok_names[k]) == 0) m->tok_kind = k;
    if (m->tok_kind < 0)
        return td_err_set(e, "tokenizer: field kind: \"%.20s\", valid is char, byte, ids, gpt2, cl100k, o200k or hf",
                          kind);
    if (m->tok_kind == TOK_HF) { /* a tokenizer.json: where it was, and its checksum */
        const char *file, *hx;
        if (td_json_get_str(tok, "file", &file, e) || td_json_get_str(tok, "xxh3", &hx, e))
            return in(e, "tokenizer", -1);
        if (strlen(hx) != TD_HASH_HEX || td_hash_parse_hex(hx, &m->tok_xxh3) != 0)
            return td_err_set(e, "tokenizer: field xxh3: must be 16 hex digits");
        if (!*file || !(m->tok_file = strdup(file))) return td_err_set(e, "tokenizer: field file: empty");
        const td_jv *cp = td_json_get(tok, "copy"); /* optional: older manifests hold only the path */
        if (cp) {
            if (cp->type != TD_JV_STR || !*cp->str || strchr(cp->str, '/') || cp->str[0] == '.')
                return td_err_set(e, "tokenizer: field copy: must be a file name in the output directory");
            if (!(m->tok_copy = strdup(cp->str))) return td_err_set(e, "out of memory");
        }
    }
    if (m->tok_vocab != m->vocab)
        return td_err_set(e, "tokenizer: field vocab: %d, but config says %d", m->tok_vocab, m->vocab);
    if (m->tok_kind == 0) {
        const td_jv *ch;
        if (get_obj(tok, "chars", TD_JV_ARR, &ch, e) != 0) return in(e, "tokenizer", -1);
        if (ch->n != m->tok_vocab)
            return td_err_set(e, "tokenizer: field chars: %d entries, vocab says %d", ch->n, m->tok_vocab);
        m->chars = malloc(sizeof(uint32_t) * (size_t)ch->n);
        if (!m->chars) return td_err_set(e, "out of memory");
        for (int i = 0; i < ch->n; i++) {
            const td_jv *x = &ch->items[i];
            if (x->type != TD_JV_NUM || !x->is_int || x->i < 0 || x->i > 0x10FFFF || (i > 0 && x->i <= m->chars[i - 1]))
                return td_err_set(e, "tokenizer: field chars: entry %d must be a code point, strictly increasing", i);
            m->chars[i] = (uint32_t)x->i;
        }
    }
    if (get_obj(j, "loss_scale", TD_JV_OBJ, &ls, e) != 0) return -1;
    const td_jv *sc = td_json_get(ls, "scale");
    if (get_i(ls, "mode", 0, 2, &m->ls_mode, e) || get_i(ls, "clean", 0, 1 << 30, &m->ls_clean, e) ||
        get_i(ls, "consecutive", 0, 1 << 30, &m->ls_consecutive, e) ||
        get_i(ls, "skipped", 0, 1 << 30, &m->ls_skipped, e))
        return in(e, "loss_scale", -1);
    if (!sc || sc->type != TD_JV_NUM || !(sc->num >= 1.0 && sc->num <= 4294967296.0))
        return td_err_set(e, "loss_scale: field scale: must be a number in [1, 2^32]");
    m->ls_scale = (float)sc->num;
    if (get_obj(j, "layout", TD_JV_OBJ, &lay, e) != 0) return -1;
    if (get_i(lay, "dp", 1, 1 << 20, &m->dp, e) || get_i(lay, "tp", 1, 4096, &m->tp, e) ||
        get_i(lay, "pp", 1, 4096, &m->pp, e) || get_i(lay, "zero", 0, 3, &m->zero, e) ||
        get_i(lay, "ranks", 1, 1 << 20, &m->ranks, e) ||
        copy_str(lay, "precision", m->precision, sizeof m->precision, e) ||
        copy_str(lay, "dp_mode", m->dp_mode, sizeof m->dp_mode, e) ||
        copy_str(lay, "grad_compress", m->grad_compress, sizeof m->grad_compress, e))
        return in(e, "layout", -1);
    m->cp = m->ep = 1; /* manifests written before context or expert parallelism name no cp, ep */
    if ((td_json_get(lay, "cp") && get_i(lay, "cp", 1, 1 << 20, &m->cp, e)) ||
        (td_json_get(lay, "ep") && get_i(lay, "ep", 1, 4096, &m->ep, e)))
        return in(e, "layout", -1);
    if (td_json_get(j, "data") && parse_data(td_json_get(j, "data"), m, e) != 0) return in(e, "data", -1);
    if (get_obj(j, "files", TD_JV_ARR, &files, e) != 0) return -1;
    if (files->n < 1 || files->n > 1 << 20) return td_err_set(e, "field files: %d files", files->n);
    m->files = calloc((size_t)files->n, sizeof(char *));
    m->shards = calloc((size_t)files->n, sizeof *m->shards);
    if (!m->files || !m->shards) return td_err_set(e, "out of memory");
    m->n_files = files->n; /* entries not yet parsed are NULL: td_manifest_free frees them all */
    for (int i = 0; i < files->n; i++)
        if (parse_file(&files->items[i], m->ranks, &m->shards[i], e) != 0) return in(e, "file", i);
        else m->files[i] = m->shards[i].name;
    if (get_obj(j, "tensors", TD_JV_ARR, &tensors, e) != 0) return -1;
    if (tensors->n < 1 || tensors->n > 1 << 16) return td_err_set(e, "field tensors: %d tensors", tensors->n);
    m->tensors = calloc((size_t)tensors->n, sizeof *m->tensors);
    if (!m->tensors) return td_err_set(e, "out of memory");
    m->n_tensors = tensors->n;
    for (int i = 0; i < tensors->n; i++) {
        if (parse_tensor(&tensors->items[i], m->n_files, m->dp, m->tp, &m->tensors[i], e) != 0) return in(e, "tensor", i);
        for (int k = 0; k < i; k++)
            if (strcmp(m->tensors[k].name, m->tensors[i].name) == 0)
                return td_err_set(e, "tensor %d: name \"%.64s\" appears twice", i, m->tensors[i].name);
    }
    return 0;
}

int td_manifest_parse(const char *text, size_t n, td_manifest *m, td_err *e) {
    memset(m, 0, sizeof *m);
    if (n > TD_MANIFEST_MAX_BYTES) return td_err_set(e, "%zu bytes; a manifest is at most 256 MiB", n);
    td_jv *j;
    if (td_json_parse(text, n, &j, e) != 0) return -1;
    /* the version first: an older manifest has no checksum to check */
    const td_jv *ver = td_json_get(j, "version");
    int rc = ver && ver->type == TD_JV_NUM && ver->is_int && ver->i != TD_MANIFEST_VERSION ? 0 : check_seal(text, n, j, e);
    if (rc == 0) rc = parse_top(j, m, e);
    const td_jv *run_config = td_json_get(j, "run_config");
    if (rc == 0 && run_config && run_config->type != TD_JV_OBJ)
        rc = td_err_set(e, "field run_config: not an object (the run's flag values)");
    if (rc == 0 && run_config) {
        m->run_config = strndup(text + run_config->at, run_config->end - run_config->at);
        if (!m->run_config) rc = td_err_set(e, "out of memory");
    }
    td_json_free(j);
    if (rc != 0) td_manifest_free(m);
    return rc;
}

void td_manifest_free(td_manifest *m) {
    for (int i = 0; i < m->n_files; i++) free(m->shards[i].name); /* files[i] points at it */
    free(m->shards);
    for (int i = 0; i < m->n_tensors; i++) {
        td_mf_tensor *t = &m->tensors[i];
        for (int k = 0; k < t->n_pieces; k++) free(t->pieces[k].key);
        free(t->pieces);
        free(t->name);
    }
    free(m->tensors);
    free(m->files);
    free(m->chars);
    free(m->tok_file);
    free(m->tok_copy);
    free(m->data_path);
    free(m->run_config);
    memset(m, 0, sizeof *m);
}

const td_mf_tensor *td_manifest_tensor(const td_manifest *m, const char *name) {
    for (int i = 0; i < m->n_tensors; i++)
        if (strcmp(m->tensors[i].name, name) == 0) return &m->tensors[i];
    return NULL;
}

void td_mf_piece_key(char *buf, size_t cap, int section, const char *name, int tp, int tp_rank, int ep, int ep_rank,
                     uint64_t begin) {
    char sec[32];
    td_mf_section_name(section, sec, sizeof sec);
    if (ep > 1)
        snprintf(buf, cap, "%s/%s/%d/%d/%d/%d/%llu", sec, name, tp, tp_rank, ep, ep_rank, (unsigned long long)begin);
    else
        snprintf(buf, cap, "%s/%s/%d/%d/%llu", sec, name, tp, tp_rank, (unsigned long long)begin);
}

size_t td_manifest_seal(const char *text, size_t n, char *out, size_t cap) {
    static const char key[] = ",\n \"manifest_xxh3\": ";
    size_t k = n + sizeof key - 1;
    if (cap < k + TD_HASH_HEX + 5) return 0;
    if (out != text) memmove(out, text, n);
    memcpy(out + n, key, sizeof key - 1);
    char hex[TD_HASH_HEX + 1];
    td_hash_hex(td_xxh3(out, k), hex);
    snprintf(out + k, cap - k, "\"%s\"}\n", hex);
    return k + TD_HASH_HEX + 4;
}
