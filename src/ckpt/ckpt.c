/* Checkpoints: the streaming writer with its atomic commit, and the loader
 * (the parsing and every check live in src/formats/ckpt_format.c). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "trident/base.h"
#include "trident/ckpt.h"
#include "trident/fault.h"
#include "trident/formats_ckpt.h"

struct td_ckpt_writer {
    char out[PATH_MAX], tmp[PATH_MAX + 64], final[PATH_MAX + 64], name[32];
    int fd, step, has_optimizer;
    td_ckpt_header h;
    td_ckpt_layout lay;
    td_param_table canon;
    size_t written[3]; /* elements put per section */
};

static void remove_tmp(td_ckpt_writer *w) {
    char p[PATH_MAX + 128];
    if (w->fd >= 0) close(w->fd);
    w->fd = -1;
    snprintf(p, sizeof p, "%s/model.bin", w->tmp);
    unlink(p);
    snprintf(p, sizeof p, "%s/config.json", w->tmp);
    unlink(p);
    rmdir(w->tmp);
}

/* A failed save: nothing of it stays, the earlier checkpoints and `latest`
 * are untouched, and the run stops with one line. */
_Noreturn static void save_failed(td_ckpt_writer *w, const char *what, int err) {
    remove_tmp(w);
    char link[PATH_MAX + 16], target[256];
    snprintf(link, sizeof link, "%s/latest", w->out);
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n >= 0) target[n] = 0;
    td_fail("saving checkpoint %s/%s failed: %s: %s; the partial save was removed and %s",
            w->out, w->name, what, strerror(err),
            n >= 0 ? "--out's latest still names the previous checkpoint" : "no earlier checkpoint exists");
}

static void write_at(td_ckpt_writer *w, const void *p, size_t n, uint64_t off, const char *what) {
    const char *c = p;
    while (n > 0) {
        ssize_t k = pwrite(w->fd, c, n, (off_t)off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) save_failed(w, what, k < 0 ? errno : EIO);
        c += k, n -= (size_t)k, off += (uint64_t)k;
    }
}

static void fsync_dir(td_ckpt_writer *w, const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0 || fsync(fd) != 0) {
        int err = errno;
        if (fd >= 0) close(fd);
        save_failed(w, dir, err);
    }
    close(fd);
}

td_ckpt_writer *td_ckpt_writer_open(const char *out, const td_gpt_config *cfg,
                                    const td_tokenizer *tok, int step, int has_optimizer) {
    TD_CHECK(strlen(out) < PATH_MAX - 64, "--out %.64s...: the path is too long", out);
    if (mkdir(out, 0755) != 0 && errno != EEXIST)
        td_fail("--out %s cannot be created: %s", out, strerror(errno));
    struct stat st;
    TD_CHECK(stat(out, &st) == 0 && S_ISDIR(st.st_mode), "--out %s exists and is not a directory", out);
    td_ckpt_writer *w = td_alloc(sizeof *w, TD_MEM_OTHER);
    memset(w, 0, sizeof *w);
    w->fd = -1;
    w->step = step;
    w->has_optimizer = has_optimizer;
    snprintf(w->out, sizeof w->out, "%s", out);
    snprintf(w->name, sizeof w->name, "step-%08d", step);
    snprintf(w->tmp, sizeof w->tmp, "%s/.%s.tmp.%d", out, w->name, (int)getpid());
    snprintf(w->final, sizeof w->final, "%s/%s", out, w->name);
    td_param_table_build(&w->canon, cfg, 1);
    w->h = (td_ckpt_header){TD_CKPT_VERSION, cfg->L, cfg->H, cfg->C, cfg->T, cfg->V, cfg->Vp, step,
                            (int32_t)tok->kind, tok->V, has_optimizer ? 1 : 0, 0, w->canon.numel};
    TD_ASSERT(td_ckpt_numel(cfg->L, cfg->C, cfg->T, cfg->Vp) == w->canon.numel);
    if (mkdir(w->tmp, 0755) != 0) save_failed(w, "creating the temporary directory", errno);
    char path[PATH_MAX + 128];
    snprintf(path, sizeof path, "%s/model.bin", w->tmp);
    w->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (w->fd < 0) save_failed(w, "creating model.bin", errno);
    unsigned char hdr[TD_CKPT_HEADER_BYTES];
    td_ckpt_header_encode(&w->h, hdr);
    /* the layout of the file being written comes from the parser, so the
     * writer and the reader cannot disagree about it */
    td_err e;
    uint64_t total = TD_CKPT_HEADER_BYTES + (tok->kind == TD_TOK_CHAR ? 4 * (uint64_t)tok->V : 0) +
                     4 * (uint64_t)w->canon.numel * (has_optimizer ? 3 : 1);
    TD_ASSERT(td_ckpt_header_parse(hdr, sizeof hdr, total, &w->h, &w->lay, &e) == 0);
    write_at(w, hdr, sizeof hdr, 0, "writing model.bin's header");
    if (tok->kind == TD_TOK_CHAR)
        write_at(w, tok->chars, 4 * (size_t)tok->V, w->lay.vocab_off, "writing model.bin's vocabulary");
    return w;
}

void td_ckpt_writer_put(td_ckpt_writer *w, int section, const td_param_table *t, int u,
                        const float *buf) {
    TD_ASSERT(section >= 0 && section < (w->has_optimizer ? 3 : 1));
    TD_ASSERT(t->n_rows == w->canon.n_rows && u >= 0 && u < t->n_units);
    if (td_fault_at(TD_FAULT_SAVE_FAIL, w->step, -1)) { /* test-only: as on a full disk */
        errno = ENOSPC;
        save_failed(w, "writing model.bin", ENOSPC);
    }
    uint64_t base = section == 0 ? w->lay.params_off : section == 1 ? w->lay.m_off : w->lay.v_off;
    static const char *what[3] = {"writing model.bin's params", "writing model.bin's adam_m",
                                  "writing model.bin's adam_v"};
    /* rows of one unit are contiguous in both layouts, only padding differs */
    for (int i = 0; i < t->n_rows; i++) {
        const td_param *r = &t->rows[i];
        if (r->unit != u) continue;
        TD_ASSERT(r->numel == w->canon.rows[i].numel);
        write_at(w, buf + (r->offset - t->unit_offset[u]), r->numel * sizeof(float),
                 base + 4 * (uint64_t)w->canon.rows[i].offset, what[section]);
        w->written[section] += r->numel;
    }
}

void td_ckpt_writer_commit(td_ckpt_writer *w, char *path, size_t cap) {
    for (int s = 0; s < (w->has_optimizer ? 3 : 1); s++) TD_ASSERT(w->written[s] == w->canon.numel);
    if (fsync(w->fd) != 0) save_failed(w, "fsync of model.bin", errno);
    int fd = w->fd;
    w->fd = -1;
    if (close(fd) != 0) save_failed(w, "closing model.bin", errno);

    char p[PATH_MAX + 128], json[1024];
    int n = td_ckpt_config_format(&w->h, json, sizeof json);
    TD_ASSERT(n > 0);
    snprintf(p, sizeof p, "%s/config.json", w->tmp);
    w->fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (w->fd < 0) save_failed(w, "creating config.json", errno);
    write_at(w, json, (size_t)n, 0, "writing config.json");
    if (fsync(w->fd) != 0) save_failed(w, "fsync of config.json", errno);
    fd = w->fd;
    w->fd = -1;
    if (close(fd) != 0) save_failed(w, "closing config.json", errno);
    fsync_dir(w, w->tmp);

    /* into place; a step directory of the same name (a run repeated into the
     * same --out) is exchanged atomically, then removed */
    if (rename(w->tmp, w->final) != 0) {
        if (errno != ENOTEMPTY && errno != EEXIST) save_failed(w, "renaming into place", errno);
        if (renameat2(AT_FDCWD, w->tmp, AT_FDCWD, w->final, RENAME_EXCHANGE) != 0)
            save_failed(w, "replacing the step directory of the same name", errno);
        remove_tmp(w); /* now the old one */
    }
    /* the new step directory is complete; `latest` moves to it atomically */
    char link_tmp[PATH_MAX + 64], link[PATH_MAX + 16];
    snprintf(link_tmp, sizeof link_tmp, "%s/.latest.tmp.%d", w->out, (int)getpid());
    snprintf(link, sizeof link, "%s/latest", w->out);
    unlink(link_tmp);
    TD_CHECK(symlink(w->name, link_tmp) == 0 && rename(link_tmp, link) == 0,
             "saving checkpoint %s: %s was written but pointing %s at it failed: %s", w->final,
             w->name, link, strerror(errno));
    int dfd = open(w->out, O_RDONLY | O_DIRECTORY);
    TD_CHECK(dfd >= 0 && fsync(dfd) == 0, "saving checkpoint %s: fsync of --out %s failed: %s",
             w->final, w->out, strerror(errno));
    close(dfd);
    if (path) snprintf(path, cap, "%s", w->final);
    td_param_table_free(&w->canon);
    td_free(w);
}

void td_ckpt_save(const char *out, const td_gpt_config *cfg, const td_tokenizer *tok, int step,
                  const float *params, const float *m, const float *v, size_t numel) {
    td_ckpt_writer *w = td_ckpt_writer_open(out, cfg, tok, step, m != NULL);
    TD_ASSERT(numel == w->canon.numel);
    const float *bufs[3] = {params, m, v};
    for (int s = 0; s < (m ? 3 : 1); s++)
        for (int u = 0; u < w->canon.n_units; u++)
            td_ckpt_writer_put(w, s, &w->canon, u, bufs[s] + w->canon.unit_offset[u]);
    td_ckpt_writer_commit(w, NULL, 0);
}

/* ---- loading ------------------------------------------------------------ */

static void read_exact(int fd, void *p, uint64_t n, uint64_t off, const char *path, const char *field) {
    char *c = p;
    while (n > 0) {
        ssize_t k = pread(fd, c, n > (1u << 30) ? (1u << 30) : (size_t)n, (off_t)off);
        if (k < 0 && errno == EINTR) continue;
        TD_CHECK(k > 0, "%s: field %s: %s", path, field,
                 k < 0 ? strerror(errno) : "the file shrank while it was read");
        c += k, n -= (uint64_t)k, off += (uint64_t)k;
    }
}

static float *read_floats(int fd, const td_ckpt_header *h, uint64_t off, const char *path,
                          const char *field, td_mem_cat cat) {
    float *x = td_alloc(sizeof(float) * h->numel, cat);
    read_exact(fd, x, 4 * h->numel, off, path, field);
    td_err e;
    TD_CHECK(td_ckpt_finite_check(x, h->numel, field, strcmp(field, "adam_v") == 0, &e) == 0, "%s: %s",
             path, e.msg);
    return x;
}

void td_ckpt_load(td_checkpoint *ck, const char *path) {
    memset(ck, 0, sizeof *ck);
    TD_CHECK(path && *path, "--ckpt needs a directory written by 'trident train --out' or one of its "
                            "step directories");
    struct stat st;
    char file[PATH_MAX + 64];
    TD_CHECK(strlen(path) < PATH_MAX - 64, "--ckpt %.64s...: the path is too long", path);
    snprintf(file, sizeof file, "%s/model.bin", path);
    if (stat(file, &st) == 0) {
        snprintf(ck->dir, sizeof ck->dir, "%s", path);
    } else {
        char link[PATH_MAX + 16], target[PATH_MAX];
        snprintf(link, sizeof link, "%s/latest", path);
        ssize_t n = readlink(link, target, sizeof target - 1);
        TD_CHECK(n > 0, "--ckpt %s: cannot open it as a step directory (no model.bin) or as a "
                 "directory written by 'trident train --out' (no latest link): %s", path, strerror(errno));
        target[n] = 0;
        snprintf(ck->dir, sizeof ck->dir, "%s/latest", path);
        snprintf(file, sizeof file, "%s/model.bin", ck->dir);
        TD_CHECK(stat(file, &st) == 0, "--ckpt %s: latest names %s, which holds no model.bin: %s", path,
                 target, strerror(errno));
    }
    int fd = open(file, O_RDONLY);
    TD_CHECK(fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode), "%s: cannot read it: %s", file,
             fd < 0 ? strerror(errno) : "not a regular file");
    unsigned char hdr[TD_CKPT_HEADER_BYTES];
    uint64_t len = (uint64_t)st.st_size;
    size_t avail = len < sizeof hdr ? (size_t)len : sizeof hdr;
    read_exact(fd, hdr, avail, 0, file, "header");
    td_ckpt_header h;
    td_ckpt_layout lay;
    td_err e;
    TD_CHECK(td_ckpt_header_parse(hdr, avail, len, &h, &lay, &e) == 0, "%s: %s", file, e.msg);
    ck->cfg = (td_gpt_config){h.layers, h.heads, h.embd, h.seq, h.vocab, h.vocab_padded};
    ck->step = h.step;
    ck->numel = h.numel;
    ck->tok.kind = (td_tokenizer_kind)h.tokenizer;
    ck->tok.V = h.tokenizer_vocab;
    if (h.tokenizer == TD_TOK_CHAR) {
        ck->tok.chars = td_alloc(lay.vocab_bytes, TD_MEM_OTHER);
        read_exact(fd, ck->tok.chars, lay.vocab_bytes, lay.vocab_off, file, "vocabulary");
        TD_CHECK(td_ckpt_vocab_check(ck->tok.chars, (uint64_t)h.vocab, &e) == 0, "%s: %s", file, e.msg);
    }
    if (h.tokenizer == TD_TOK_GPT2) td_tokenizer_gpt2(&ck->tok); /* its tables, to decode samples */
    ck->params = read_floats(fd, &h, lay.params_off, file, "params", TD_MEM_PARAMS);
    if (h.has_optimizer) {
        ck->m = read_floats(fd, &h, lay.m_off, file, "adam_m", TD_MEM_OPTIM);
        ck->v = read_floats(fd, &h, lay.v_off, file, "adam_v", TD_MEM_OPTIM);
    }
    close(fd);

    /* config.json must say the same as model.bin */
    snprintf(file, sizeof file, "%s/config.json", ck->dir);
    fd = open(file, O_RDONLY);
    TD_CHECK(fd >= 0 && fstat(fd, &st) == 0, "%s: cannot read it: %s", file, strerror(errno));
    TD_CHECK(st.st_size <= 65536, "%s: %lld bytes; trident writes well under 64 KiB", file,
             (long long)st.st_size);
    char *text = td_alloc((size_t)st.st_size + 1, TD_MEM_OTHER);
    read_exact(fd, text, (uint64_t)st.st_size, 0, file, "text");
    close(fd);
    TD_CHECK(td_ckpt_config_check(text, (size_t)st.st_size, &h, &e) == 0, "%s: %s", file, e.msg);
    td_free(text);

    /* the model's own size checks must hold for anything the parser passed */
    td_gpt_config check = ck->cfg;
    td_gpt_config_finish(&check);
    TD_ASSERT(check.Vp == ck->cfg.Vp);
}

void td_ckpt_free(td_checkpoint *ck) {
    td_free(ck->params);
    td_free(ck->m);
    td_free(ck->v);
    td_tokenizer_free(&ck->tok);
    memset(ck, 0, sizeof *ck);
}
