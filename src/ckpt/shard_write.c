/* Writing a checkpoint's files: the temporary step directory, one
 * safetensors shard per writing rank, and the failure path that removes the
 * partial save. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_internal.h"
#include "trident/base.h"
#include "trident/fault.h"

void td_ckpt_dir_init(td_ckpt_dir *d, const char *out, int step, long tag) {
    TD_CHECK(strlen(out) < PATH_MAX - 64, "--out %.64s...: the path is too long", out);
    memset(d, 0, sizeof *d);
    d->step = step;
    snprintf(d->out, sizeof d->out, "%s", out);
    snprintf(d->name, sizeof d->name, "step-%08d", step);
    snprintf(d->tmp, sizeof d->tmp, "%s/.%s.tmp.%ld", out, d->name, tag);
    snprintf(d->final, sizeof d->final, "%s/%s", out, d->name);
}

/* Removes a step directory this code wrote: its plain files, then itself. */
void td_ckpt_remove_dir(const char *dir) {
    DIR *dd = opendir(dir);
    if (!dd) return;
    struct dirent *de;
    char p[PATH_MAX + 300];
    while ((de = readdir(dd)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        unlink(p);
    }
    closedir(dd);
    rmdir(dir);
}

_Noreturn void td_ckpt_save_failed(const td_ckpt_dir *d, const char *what, int err) {
    td_ckpt_remove_dir(d->tmp);
    char link[PATH_MAX + 16], target[256];
    snprintf(link, sizeof link, "%s/latest", d->out);
    ssize_t n = readlink(link, target, sizeof target - 1);
    td_fail("saving checkpoint %s/%s failed: %s: %s; the partial save was removed and %s", d->out, d->name,
            what, strerror(err),
            n >= 0 ? "--out's latest still names the previous checkpoint" : "no earlier checkpoint exists");
}

void td_ckpt_dir_create(td_ckpt_dir *d) {
    if (mkdir(d->out, 0755) != 0 && errno != EEXIST)
        td_fail("--out %s cannot be created: %s", d->out, strerror(errno));
    struct stat st;
    TD_CHECK(stat(d->out, &st) == 0 && S_ISDIR(st.st_mode), "--out %s exists and is not a directory", d->out);
    td_ckpt_remove_dir(d->tmp); /* a leftover of a killed save with the same tag */
    if (mkdir(d->tmp, 0755) != 0) td_ckpt_save_failed(d, "creating the temporary directory", errno);
}

void td_shard_name(char *buf, size_t cap, int file_index) {
    snprintf(buf, cap, "shard-%05d.safetensors", file_index);
}

void td_piece_key(char *buf, size_t cap, int section, const char *name, int tp, int tp_rank, size_t begin) {
    char sec[32];
    td_mf_section_name(section, sec, sizeof sec);
    snprintf(buf, cap, "%s/%s/%d/%d/%zu", sec, name, tp, tp_rank, begin);
}

struct td_shard {
    const td_ckpt_dir *d;
    char file[64];
    int fd, n, put;
    uint64_t *off;   /* [n] file offset of each tensor */
    uint64_t *len;   /* [n] its bytes */
    uint64_t total, done;
};

static void write_at(td_shard *s, const void *p, uint64_t n, uint64_t off) {
    const char *c = p;
    while (n > 0) {
        ssize_t k = pwrite(s->fd, c, n > (1u << 30) ? (1u << 30) : (size_t)n, (off_t)off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            char what[96];
            snprintf(what, sizeof what, "writing %s", s->file);
            td_ckpt_save_failed(s->d, what, k < 0 ? errno : EIO);
        }
        c += k, n -= (uint64_t)k, off += (uint64_t)k;
    }
}

td_shard *td_shard_create(const td_ckpt_dir *d, int file_index, const td_shard_item *items, int n) {
    td_shard *s = td_alloc(sizeof *s, TD_MEM_OTHER);
    memset(s, 0, sizeof *s);
    s->d = d;
    s->n = n;
    td_shard_name(s->file, sizeof s->file, file_index);
    td_st_tensor *t = td_alloc(sizeof *t * (size_t)(n + 1), TD_MEM_OTHER);
    for (int i = 0; i < n; i++)
        t[i] = (td_st_tensor){(char *)items[i].key, TD_ST_F32, 1, {(int64_t)items[i].n}, 0, 0};
    char *hdr;
    size_t hlen;
    td_err e;
    const char *mk[1] = {"writer"}, *mv[1] = {"trident"};
    TD_CHECK(td_st_header_format(t, n, mk, mv, 1, &hdr, &hlen, &e) == 0, "saving checkpoint %s: %s: %s",
             d->final, s->file, e.msg);
    s->off = td_alloc(sizeof(uint64_t) * 2 * (size_t)(n + 1), TD_MEM_OTHER);
    s->len = s->off + n + 1;
    for (int i = 0; i < n; i++) {
        s->off[i] = hlen + t[i].begin;
        s->len[i] = t[i].end - t[i].begin;
        s->total += s->len[i];
    }
    td_free(t);
    char path[PATH_MAX + 160];
    snprintf(path, sizeof path, "%s/%s", d->tmp, s->file);
    s->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (s->fd < 0) {
        char what[96];
        snprintf(what, sizeof what, "creating %s", s->file);
        td_ckpt_save_failed(d, what, errno);
    }
    write_at(s, hdr, hlen, 0);
    free(hdr);
    return s;
}

void td_shard_put(td_shard *s, int i, const float *data) {
    TD_ASSERT(i >= 0 && i < s->n);
    if (td_fault_at(TD_FAULT_SAVE_FAIL, s->d->step, -1)) { /* test-only: as on a full disk */
        char what[96];
        snprintf(what, sizeof what, "writing %s", s->file);
        td_ckpt_save_failed(s->d, what, ENOSPC);
    }
    /* test-only: this rank dies with half its shard written */
    if (s->done + s->len[i] > s->total / 2 && td_fault_at(TD_FAULT_SAVE_KILL, s->d->step, td_log_rank())) {
        write_at(s, data, s->len[i] / 2, s->off[i]);
        fsync(s->fd);
        raise(SIGKILL);
    }
    write_at(s, data, s->len[i], s->off[i]);
    s->done += s->len[i];
    s->put++;
}

size_t td_shard_bookkeeping(int n) {
    return (size_t)(n + 1) * (sizeof(td_shard_item) + sizeof(float *) + sizeof(td_st_tensor) + 2 * sizeof(uint64_t));
}

void td_shard_close(td_shard *s) {
    TD_ASSERT(s->put == s->n);
    char what[96];
    snprintf(what, sizeof what, "fsync of %s", s->file);
    if (fsync(s->fd) != 0) td_ckpt_save_failed(s->d, what, errno);
    snprintf(what, sizeof what, "closing %s", s->file);
    if (close(s->fd) != 0) td_ckpt_save_failed(s->d, what, errno);
    td_free(s->off);
    td_free(s);
}
