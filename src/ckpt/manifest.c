/* The manifest writer and the commit of a save (world rank 0, after every
 * shard is fsynced): the pieces are read back from the shards' own headers,
 * so the manifest describes exactly what was written. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_internal.h"
#include "trident/base.h"
#include "trident/files.h"
#include "trident/formats_hash.h"
#include "trident/formats_json.h"
#include "trident/out_lock.h"

typedef struct {
    char *p;
    size_t n, cap;
} sbuf;

static void put(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(sbuf *b, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->p + b->n, b->cap - b->n, fmt, ap);
        va_end(ap);
        TD_ASSERT(k >= 0);
        if ((size_t)k < b->cap - b->n) {
            b->n += (size_t)k;
            return;
        }
        b->cap = 2 * b->cap + (size_t)k + 1024;
        b->p = realloc(b->p, b->cap);
        TD_CHECK(b->p, "saving a checkpoint: out of memory for the manifest");
    }
}

static void put_str(sbuf *b, const char *s) {
    int k;
    while ((k = td_json_put_str(b->p, b->cap, b->n, s)) < 0) { /* grow and try again */
        b->cap = 2 * b->cap + 6 * strlen(s) + 8;
        b->p = realloc(b->p, b->cap);
        TD_CHECK(b->p, "saving a checkpoint: out of memory for the manifest");
    }
    b->n = (size_t)k;
}

/* One shard's header, read back (errors are the save's): its parsed table,
 * the file's size and the XXH3-64 of its first 8 + N bytes, which the
 * manifest records. */
typedef struct {
    td_st_header h;
    uint64_t size, xxh3;
} shard_back;

static void read_header(const td_ckpt_dir *d, int f, shard_back *b) {
    char name[64], path[PATH_MAX + 128];
    td_shard_name(name, sizeof name, f);
    snprintf(path, sizeof path, "%s/%s", d->tmp, name);
    struct stat st;
    const char *why;
    int fd = td_open_input(path, &st, &why);
    unsigned char first8[8];
    td_err e;
    uint64_t n;
    if (fd < 0) td_fail("saving checkpoint %s: reading %s back: %s", d->final, name, why);
    if (td_pread_all(fd, first8, 8, 0) != 0) td_ckpt_save_failed(d, name, errno);
    TD_CHECK(td_st_header_len(first8, (uint64_t)st.st_size, &n, &e) == 0, "%s: %s", path, e.msg);
    char *hdr = td_alloc(n + 8, TD_MEM_OTHER);
    TD_CHECK(td_pread_all(fd, hdr, n + 8, 0) == 0, "%s: the header could not be read back", path);
    b->xxh3 = td_xxh3(hdr, n + 8);
    b->size = (uint64_t)st.st_size;
    TD_CHECK(td_st_header_parse(hdr + 8, n, (uint64_t)st.st_size, &b->h, &e) == 0, "%s: %s", path, e.msg);
    td_free(hdr);
    close(fd);
}

static const char *meta_of(const td_st_header *h, const char *key) {
    for (int k = 0; k < h->n_meta; k++)
        if (strcmp(h->meta_key[k], key) == 0) return h->meta_val[k];
    return "";
}

char *td_manifest_format(const td_ckpt_dir *d, int n_files, const td_ckpt_meta *meta, const td_gpt_config *cfg,
                         const td_tokenizer *tok, const td_param_table *t, size_t *len) {
    sbuf b = {malloc(4096), 0, 4096};
    TD_CHECK(b.p, "saving a checkpoint: out of memory for the manifest");
    char run[TD_HASH_HEX + 1];
    td_hash_hex(meta->run, run);
    put(&b, "{\"format\": \"trident-checkpoint\", \"version\": %d, \"step\": %d, \"lr_step\": %d, \"seed\": %llu, "
        "\"run\": \"%s\",\n", TD_MANIFEST_VERSION, meta->step, meta->step, meta->seed, run);
    put(&b, " \"config\": {\"layers\": %d, \"heads\": %d, \"embd\": %d, \"seq\": %d, \"vocab\": %d", cfg->L, cfg->H,
        cfg->C, cfg->T, cfg->V);
    if (cfg->arch != TD_ARCH_GPT2) { /* GPT-2's manifests stay as they were */
        put(&b, ", \"arch\": \"%s\", \"kv_heads\": %d, \"ffn_hidden\": %d, \"tie_embeddings\": %s, \"norm_eps\": %.9g, "
            "\"rope_theta\": %.17g, \"rope_scaling\": ", td_arch_name(cfg->arch), cfg->KV, cfg->F,
            td_gpt_tied(cfg) ? "true" : "false", (double)cfg->norm_eps, cfg->rope_theta);
        const td_rope_scaling *r = &cfg->rope_scaling;
        if (r->factor > 0)
            put(&b, "{\"rope_type\": \"llama3\", \"factor\": %.17g, \"low_freq_factor\": %.17g, \"high_freq_factor\": "
                "%.17g, \"original_max_position_embeddings\": %d}", r->factor, r->low_freq_factor, r->high_freq_factor,
                r->orig_max_pos);
        else
            put(&b, "null");
    }
    const td_moe_config *e = &cfg->moe;
    if (e->E > 0) /* a dense model's manifest names none */
        put(&b, ", \"moe\": {\"experts\": %d, \"top_k\": %d, \"every\": %d, \"ffn_hidden\": %d, \"shared\": %d, "
            "\"router\": \"%s\", \"norm_topk\": %s, \"aux_coef\": %.9g, \"z_coef\": %.9g, \"bias_rate\": %.9g, "
            "\"capacity\": %.9g}", e->E, e->K, e->every, e->F, e->shared,
            e->router == TD_ROUTER_SIGMOID ? "sigmoid" : "softmax", e->norm_topk == TD_TIE_ON ? "true" : "false",
            (double)e->aux_coef, (double)e->z_coef, (double)e->bias_rate, (double)e->capacity);
    put(&b, "},\n");
    put(&b, " \"tokenizer\": {\"kind\": \"%s\", \"vocab\": %d", td_tokenizer_name(tok->kind), tok->V);
    if (tok->kind == TD_TOK_CHAR) {
        put(&b, ", \"chars\": [");
        for (int i = 0; i < tok->V; i++) put(&b, "%s%u", i ? ", " : "", tok->chars[i]);
        put(&b, "]");
    }
    if (tok->kind == TD_TOK_HF) { /* the file, to load again, and its checksum, to know it is the same */
        char hx[TD_HASH_HEX + 1];
        td_hash_hex(tok->file_xxh3, hx);
        put(&b, ", \"file\": ");
        put_str(&b, tok->file);
        put(&b, ", \"xxh3\": \"%s\", \"copy\": \"tokenizer-%s.json\"", hx, hx);
    }
    /* %.9g: a float's exact value comes back through a double */
    const td_loss_scaler *s = &meta->scaler;
    put(&b, "},\n \"loss_scale\": {\"mode\": %d, \"scale\": %.9g, \"clean\": %d, \"consecutive\": %d, \"skipped\": %d},\n",
        (int)s->mode, (double)s->scale, s->clean, s->consecutive, s->skipped);
    put(&b, " \"layout\": {\"dp\": %d, \"cp\": %d, \"tp\": %d, \"pp\": %d, \"ep\": %d, \"zero\": %d, \"ranks\": %d, "
        "\"precision\": ", meta->dp, meta->cp, meta->tp, meta->pp, meta->ep > 0 ? meta->ep : 1, meta->zero, meta->ranks);
    put_str(&b, meta->precision);
    put(&b, ", \"dp_mode\": ");
    put_str(&b, meta->dp_mode);
    put(&b, ", \"grad_compress\": ");
    put_str(&b, meta->grad_compress);
    put(&b, "}");
    if (meta->run_config) put(&b, ",\n \"run_config\": %s", meta->run_config); /* td_flags_json: one line */
    shard_back *sb = td_alloc(sizeof *sb * (size_t)n_files, TD_MEM_OTHER);
    if (meta->data_path) { /* the training data's fingerprint (absent: not recorded) */
        char hx[TD_HASH_HEX + 1];
        td_hash_hex(meta->data_xxh3, hx);
        put(&b, ",\n \"data\": {\"path\": ");
        put_str(&b, meta->data_path);
        put(&b, ", \"bytes\": %llu, \"xxh3\": \"%s\"}", (unsigned long long)meta->data_bytes, hx);
    }
    put(&b, ",\n \"files\": [");
    for (int f = 0; f < n_files; f++) {
        char name[64], hx[TD_HASH_HEX + 1];
        td_shard_name(name, sizeof name, f);
        read_header(d, f, &sb[f]);
        const td_st_header *h = &sb[f].h;
        /* each shard says what it is; a disagreement here is a bug */
        TD_ASSERT(atoi(meta_of(h, TD_SHARD_META_STEP)) == meta->step && atoi(meta_of(h, TD_SHARD_META_RANK)) == f &&
                  strcmp(meta_of(h, TD_SHARD_META_RUN), run) == 0);
        td_hash_hex(sb[f].xxh3, hx);
        put(&b, "%s\n  {\"name\": \"%s\", \"rank\": %d, \"grid\": ", f ? "," : "", name, f);
        put_str(&b, meta_of(h, TD_SHARD_META_GRID));
        put(&b, ", \"size\": %llu, \"header_xxh3\": \"%s\"}", (unsigned long long)sb[f].size, hx);
    }
    put(&b, "],\n");
    /* tensors in table order; each one's pieces from every file */
    put(&b, " \"tensors\": [");
    for (int i = 0; i < t->n_rows; i++) {
        const td_param *r = &t->rows[i];
        put(&b, "%s\n  {\"name\": \"%s\", \"dtype\": \"F32\", \"shape\": [%d", i ? "," : "", r->name, r->shape[0]);
        if (r->ndim == 2) put(&b, ", %d", r->shape[1]);
        put(&b, "], \"pieces\": [");
        int np = 0;
        for (int f = 0; f < n_files; f++)
            for (int k = 0; k < sb[f].h.n; k++) {
                char sec[32], nm[80];
                int tp, tpr, ep = 1, epr = 0, used = 0;
                size_t begin;
                const td_st_tensor *x = &sb[f].h.t[k];
                /* SECTION/NAME/TP/TP_RANK/[EP/EP_RANK/]BEGIN (td_mf_piece_key) */
                if (sscanf(x->name, "%31[^/]/%79[^/]/%d/%d/%n", sec, nm, &tp, &tpr, &used) != 4 ||
                    strcmp(nm, r->name) != 0)
                    continue;
                const char *tail = x->name + used;
                if (strchr(tail, '/'))
                    TD_ASSERT(sscanf(tail, "%d/%d/%zu", &ep, &epr, &begin) == 3);
                else
                    TD_ASSERT(sscanf(tail, "%zu", &begin) == 1);
                put(&b, "%s\n   {\"section\": \"%s\", \"file\": %d, \"key\": ", np++ ? "," : "", sec, f);
                put_str(&b, x->name);
                put(&b, ", \"tp\": %d, \"tp_rank\": %d", tp, tpr);
                if (r->split == TD_SPLIT_EXPERT) put(&b, ", \"ep\": %d, \"ep_rank\": %d", ep, epr);
                put(&b, ", \"split_dim\": %d, \"groups\": %d, \"begin\": %zu, \"end\": %llu}", r->split_dim, r->groups,
                    begin, (unsigned long long)(begin + (x->end - x->begin) / sizeof(float)));
            }
        put(&b, "]}");
    }
    put(&b, "]");
    for (int f = 0; f < n_files; f++) td_st_header_free(&sb[f].h);
    td_free(sb);
    /* the manifest's own checksum closes it */
    put(&b, "%*s", TD_HASH_HEX + 64, "");
    *len = td_manifest_seal(b.p, b.n - (TD_HASH_HEX + 64), b.p, b.cap);
    TD_ASSERT(*len > 0);
    return b.p;
}

/* --keep N: the N newest step directories stay (the new one among them) */
static int keep_newest(const td_ckpt_dir *d, int keep) {
    if (keep <= 0) return 0;
    DIR *dd = opendir(d->out);
    if (!dd) return 0;
    int steps[4096], n = 0, s;
    struct dirent *de;
    char tail;
    while ((de = readdir(dd)) != NULL && n < 4096)
        if (strlen(de->d_name) == 13 && sscanf(de->d_name, "step-%8d%c", &s, &tail) == 1) steps[n++] = s;
    closedir(dd);
    int removed = 0;
    for (int i = 0; i < n; i++) {
        int newer = 0;
        for (int j = 0; j < n; j++) newer += steps[j] > steps[i];
        if (newer < keep || steps[i] == d->step) continue;
        char name[32];
        snprintf(name, sizeof name, "step-%08d", steps[i]);
        td_ckpt_retire_dir(d->out, name);
        removed++;
    }
    return removed;
}

/* Temporary directories of saves that were killed half-way (a rank died,
 * the job was cut off) never become checkpoints: the next commit removes
 * them. Without --out's lock only this job's own (its id ends the name):
 * another job may be saving into the same directory right now. Holding
 * the lock, every other job that wrote here is dead, so all are leftovers. */
static void remove_stale(const td_ckpt_dir *d) {
    DIR *dd = opendir(d->out);
    if (!dd) return;
    int locked = td_out_lock_held(d->out);
    char mine[96];
    snprintf(mine, sizeof mine, ".tmp.%s", td_job_id());
    size_t nm = strlen(mine);
    struct dirent *de;
    char p[PATH_MAX + 300];
    while ((de = readdir(dd)) != NULL) {
        const char *s = de->d_name, *t = strstr(s, ".tmp.");
        int temp = t && (strncmp(s, ".step-", 6) == 0 || strncmp(s, ".latest.tmp.", 12) == 0 ||
                         strncmp(s, ".tokenizer.tmp.", 15) == 0); /* copy_tokenizer's */
        size_t n = strlen(s);
        if (!temp || !(locked || (n >= nm && strcmp(s + n - nm, mine) == 0))) continue;
        snprintf(p, sizeof p, "%s/%s", d->out, s);
        struct stat st;
        if (lstat(p, &st) != 0) continue;
        if (S_ISDIR(st.st_mode))
            td_ckpt_remove_dir(p);
        else
            unlink(p); /* a .latest.tmp link */
    }
    closedir(dd);
}

static void fsync_dir(const td_ckpt_dir *d, const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0 || fsync(fd) != 0) td_ckpt_save_failed(d, dir, errno);
    close(fd);
}

/* The output directory's copy of a tokenizer.json, OUT/tokenizer-XXH3.json,
 * which every step's manifest names ("copy"): sample, eval and export find
 * it from any directory, where the path typed at train is relative to
 * where train ran. Written once (the name is its checksum), through a
 * temporary name; bytes that no longer have the checksum are refused. */
static void copy_tokenizer(const td_ckpt_dir *d, const td_tokenizer *tok) {
    char hx[TD_HASH_HEX + 1], dst[PATH_MAX + 64], tmp[PATH_MAX + 128];
    td_hash_hex(tok->file_xxh3, hx);
    snprintf(dst, sizeof dst, "%s/tokenizer-%s.json", d->out, hx);
    struct stat st;
    if (stat(dst, &st) == 0) return;
    FILE *f = fopen(tok->file, "rb");
    TD_CHECK(f, "saving checkpoint %s: cannot read the tokenizer %s to copy it: %s", d->final, tok->file,
             strerror(errno));
    size_t cap = 1 << 20, n = 0, k;
    char *buf = malloc(cap);
    TD_CHECK(buf, "saving a checkpoint: out of memory for the tokenizer's copy");
    while ((k = fread(buf + n, 1, cap - n, f)) > 0)
        if ((n += k) == cap) {
            buf = realloc(buf, cap *= 2);
            TD_CHECK(buf, "saving a checkpoint: out of memory for the tokenizer's copy");
        }
    fclose(f);
    TD_CHECK(td_xxh3(buf, n) == tok->file_xxh3, "saving checkpoint %s: the tokenizer %s has changed since the "
             "run read it (its XXH3 differs); restore that file", d->final, tok->file);
    snprintf(tmp, sizeof tmp, "%s/.tokenizer.tmp.%s", d->out, td_job_id());
    const char *why;
    int fd = td_open_output(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644, &why);
    if (fd < 0) td_ckpt_save_failed(d, "creating the tokenizer's copy", errno);
    if (td_write_all(fd, buf, n) != 0) td_ckpt_save_failed(d, "writing the tokenizer's copy", errno);
    free(buf);
    if (fsync(fd) != 0 || close(fd) != 0) td_ckpt_save_failed(d, "fsync of the tokenizer's copy", errno);
    if (rename(tmp, dst) != 0) td_ckpt_save_failed(d, "renaming the tokenizer's copy into place", errno);
}

void td_ckpt_finish(const td_ckpt_dir *d, int n_files, const td_ckpt_meta *meta, const td_gpt_config *cfg,
                    const td_tokenizer *tok, const td_param_table *t, char *path, size_t cap) {
    if (tok->kind == TD_TOK_HF) copy_tokenizer(d, tok);
    size_t len;
    char *json = td_manifest_format(d, n_files, meta, cfg, tok, t, &len);
    char p[PATH_MAX + 128];
    snprintf(p, sizeof p, "%s/manifest.json", d->tmp);
    const char *why;
    int fd = td_open_output(p, O_WRONLY | O_CREAT | O_TRUNC, 0644, &why);
    if (fd < 0) td_ckpt_save_failed(d, "creating manifest.json", errno);
    if (td_write_all(fd, json, len) != 0) td_ckpt_save_failed(d, "writing manifest.json", errno);
    free(json);
    if (fsync(fd) != 0 || close(fd) != 0) td_ckpt_save_failed(d, "fsync of manifest.json", errno);
    fsync_dir(d, d->tmp);
    /* into place; a step directory of the same name (a run repeated into the
     * same --out) is exchanged atomically, then removed */
    if (rename(d->tmp, d->final) != 0) {
        if (errno != ENOTEMPTY && errno != EEXIST) td_ckpt_save_failed(d, "renaming into place", errno);
        if (renameat2(AT_FDCWD, d->tmp, AT_FDCWD, d->final, RENAME_EXCHANGE) != 0)
            td_ckpt_save_failed(d, "replacing the step directory of the same name", errno);
        td_ckpt_remove_dir(d->tmp); /* now the old one */
    }
    /* the new step directory is complete; `latest` moves to it atomically */
    char link_tmp[PATH_MAX + 64], link[PATH_MAX + 16];
    snprintf(link_tmp, sizeof link_tmp, "%s/.latest.tmp.%s", d->out, td_job_id());
    snprintf(link, sizeof link, "%s/latest", d->out);
    unlink(link_tmp);
    TD_CHECK(symlink(d->name, link_tmp) == 0 && rename(link_tmp, link) == 0,
             "saving checkpoint %s: %s was written but pointing %s at it failed: %s", d->final, d->name, link,
             strerror(errno));
    int dfd = open(d->out, O_RDONLY | O_DIRECTORY);
    TD_CHECK(dfd >= 0 && fsync(dfd) == 0, "saving checkpoint %s: fsync of --out %s failed: %s", d->final, d->out,
             strerror(errno));
    close(dfd);
    if (path) snprintf(path, cap, "%s", d->final);
}

int td_ckpt_prune(const char *out, int step, int keep) {
    td_ckpt_dir d;
    td_ckpt_dir_init(&d, out, step, "");
    int removed = keep_newest(&d, keep);
    remove_stale(&d);
    return removed;
}

void td_ckpt_moe_text(const td_moe_config *e, int coefs, char *buf, size_t cap) {
    if (e->E == 0) {
        snprintf(buf, cap, "no experts");
        return;
    }
    int n = snprintf(buf, cap, "--moe-experts %d --moe-top-k %d --moe-every %d --moe-ffn-hidden %d --moe-shared-experts %d "
                     "--moe-router %s --moe-norm-topk %s", e->E, e->K, e->every, e->F, e->shared,
                     e->router == TD_ROUTER_SIGMOID ? "sigmoid" : "softmax", e->norm_topk == TD_TIE_ON ? "on" : "off");
    if (coefs && n > 0 && (size_t)n < cap)
        snprintf(buf + n, cap - (size_t)n, " --moe-aux-coef %g --moe-z-coef %g --moe-bias-balance %g --moe-capacity %g",
                 (double)e->aux_coef, (double)e->z_coef, (double)e->bias_rate, (double)e->capacity);
}

void td_ckpt_manifest_config(const td_manifest *m, const char *dir, td_gpt_config *cfg) {
    /* the model's own size checks must hold: a bad config is the file's error */
    TD_CHECK(m->embd % m->heads == 0, "%s/manifest.json: config: embd %d is not a multiple of heads %d", dir,
             m->embd, m->heads);
    TD_CHECK(m->kv_heads == 0 || m->heads % m->kv_heads == 0,
             "%s/manifest.json: config: heads %d is not a multiple of kv_heads %d", dir, m->heads, m->kv_heads);
    *cfg = (td_gpt_config){.L = m->layers, .H = m->heads, .C = m->embd, .T = m->seq, .V = m->vocab};
    int arch = td_arch_parse(m->arch[0] ? m->arch : "gpt2");
    TD_CHECK(arch >= 0, "%s/manifest.json: config: unknown arch \"%s\"", dir, m->arch);
    cfg->arch = (td_arch)arch;
    if (cfg->arch != TD_ARCH_GPT2) {
        cfg->KV = m->kv_heads, cfg->F = m->ffn_hidden, cfg->tie = m->tie;
        cfg->norm_eps = (float)m->norm_eps, cfg->rope_theta = m->rope_theta;
        cfg->rope_scaling = (td_rope_scaling){m->rope_factor, m->rope_low_freq, m->rope_high_freq, m->rope_orig_max_pos};
    }
    if (m->moe_experts > 0) {
        TD_CHECK(m->moe_every <= m->layers, "%s/manifest.json: config: moe: every %d is past layers %d", dir,
                 m->moe_every, m->layers);
        cfg->moe = (td_moe_config){.E = m->moe_experts, .K = m->moe_top_k, .every = m->moe_every,
                                   .F = m->moe_ffn_hidden, .shared = m->moe_shared, .router = m->moe_router,
                                   .norm_topk = m->moe_norm_topk, .aux_coef = (float)m->moe_aux_coef,
                                   .z_coef = (float)m->moe_z_coef, .bias_rate = (float)m->moe_bias_rate,
                                   .capacity = (float)m->moe_capacity};
    }
    td_gpt_config_finish(cfg);
}
