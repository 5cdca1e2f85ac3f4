/* Writing a checkpoint's files: the temporary step directory, one
 * safetensors shard per writing rank, and the failure path that removes the
 * partial save. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_internal.h"
#include "trident/base.h"
#include "trident/out_lock.h"
#include "trident/fault.h"
#include "trident/files.h"
#include "trident/formats_hash.h"

void td_ckpt_dir_init(td_ckpt_dir *d, const char *out, int step, const char *tag) {
    TD_CHECK(strlen(out) < PATH_MAX - 64, "--out %.64s...: the path is too long", out);
    memset(d, 0, sizeof *d);
    d->step = step;
    snprintf(d->out, sizeof d->out, "%s", out);
    snprintf(d->name, sizeof d->name, "step-%08d", step);
    snprintf(d->tmp, sizeof d->tmp, "%s/.%s.tmp.%s", out, d->name, tag);
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

void td_ckpt_retire_dir(const char *out, const char *name) {
    char from[PATH_MAX + 300], to[PATH_MAX + 400];
    snprintf(from, sizeof from, "%s/%s", out, name);
    snprintf(to, sizeof to, "%s/.%s.old.tmp.%s", out, name, td_job_id());
    td_ckpt_remove_dir(rename(from, to) == 0 ? to : from);
}

_Noreturn void td_ckpt_save_failed(const td_ckpt_dir *d, const char *what, int err) {
    td_ckpt_remove_dir(d->tmp);
    char link[PATH_MAX + 16], target[256];
    snprintf(link, sizeof link, "%s/latest", d->out);
    ssize_t n = readlink(link, target, sizeof target - 1);
    td_fail_code(TD_EXIT_IO, "saving checkpoint %s/%s failed: %s: %s; the partial save was removed and %s", d->out, d->name,
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

void td_piece_key(char *buf, size_t cap, int section, const char *name, int tp, int tp_rank, int ep, int ep_rank,
                  size_t begin) {
    /* the parser checks keys against the same */
    td_mf_piece_key(buf, cap, section, name, tp, tp_rank, ep, ep_rank, begin);
}

double td_ckpt_hash_ms;

struct td_shard {
    const td_ckpt_dir *d;
    char file[64], grid[64];
    int fd, n, put, rank;
    const td_shard_item *items; /* the caller's list, alive until close */
    uint64_t *off;   /* [n] file offset of each tensor */
    uint64_t *len;   /* [n] its bytes */
    uint64_t *sum0;  /* [n + 1] index of each tensor's first block checksum in sums */
    uint64_t *sums;  /* every block's XXH3-64, filled as the data is put */
    uint64_t total, done;
    size_t hlen;     /* header bytes (8 + N): the same with placeholders and with the checksums */
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

/* The header: the tensor table, and metadata saying what the shard is
 * (step, run, rank, grid position) with every piece's block checksums
 * ("xxh3/KEY": hex lists, fixed width, so that the header written first
 * with zeros has the length of the final one). hlen gets 8 + N. */
static char *format_header(td_shard *s, size_t *hlen) {
    enum { FIXED = 6 };
    int n = s->n, nm = FIXED + n;
    td_st_tensor *t = td_alloc(sizeof *t * (size_t)(n + 1), TD_MEM_OTHER);
    char **mk = td_alloc(sizeof(char *) * (size_t)nm, TD_MEM_OTHER), **mv = td_alloc(sizeof(char *) * (size_t)nm, TD_MEM_OTHER);
    char step[16], run[TD_HASH_HEX + 1], rank[16], block[24];
    snprintf(step, sizeof step, "%d", s->d->step);
    td_hash_hex(s->d->run, run);
    snprintf(rank, sizeof rank, "%d", s->rank);
    snprintf(block, sizeof block, "%zu", TD_HASH_BLOCK);
    const char *fk[FIXED] = {"writer", TD_SHARD_META_STEP, TD_SHARD_META_RUN, TD_SHARD_META_RANK, TD_SHARD_META_GRID,
                             TD_SHARD_META_BLOCK};
    const char *fv[FIXED] = {"trident", step, run, rank, s->grid, block};
    for (int k = 0; k < FIXED; k++) mk[k] = (char *)fk[k], mv[k] = (char *)fv[k];
    for (int i = 0; i < n; i++) {
        t[i] = (td_st_tensor){(char *)s->items[i].key, TD_ST_F32, 1, {(int64_t)s->items[i].n}, 0, 0};
        size_t kl = strlen(TD_SHARD_META_SUM) + strlen(s->items[i].key) + 1;
        mk[FIXED + i] = td_alloc(kl, TD_MEM_OTHER);
        snprintf(mk[FIXED + i], kl, "%s%s", TD_SHARD_META_SUM, s->items[i].key);
        mv[FIXED + i] = td_hash_list_format(s->sums + s->sum0[i], s->sum0[i + 1] - s->sum0[i]);
        TD_CHECK(mv[FIXED + i], "saving checkpoint %s: out of memory for the checksums", s->d->final);
    }
    char *hdr;
    td_err e;
    TD_CHECK(td_st_header_format(t, n, (const char *const *)mk, (const char *const *)mv, nm, &hdr, hlen, &e) == 0,
             "saving checkpoint %s: %s: %s", s->d->final, s->file, e.msg);
    for (int i = 0; i < n; i++) {
        td_free(mk[FIXED + i]);
        free(mv[FIXED + i]);
    }
    td_free(mk);
    td_free(mv);
    if (s->off[0] == 0 && n > 0) /* first call: the offsets */
        for (int i = 0; i < n; i++) s->off[i] = *hlen + t[i].begin, s->len[i] = t[i].end - t[i].begin;
    td_free(t);
    return hdr;
}

td_shard *td_shard_create(const td_ckpt_dir *d, int file_index, const char *grid, const td_shard_item *items, int n) {
    td_shard *s = td_alloc(sizeof *s, TD_MEM_OTHER);
    memset(s, 0, sizeof *s);
    s->d = d;
    s->n = n;
    s->rank = file_index;
    s->items = items;
    snprintf(s->grid, sizeof s->grid, "%s", grid ? grid : "");
    td_shard_name(s->file, sizeof s->file, file_index);
    s->off = td_alloc(sizeof(uint64_t) * 3 * (size_t)(n + 1), TD_MEM_OTHER);
    s->len = s->off + n + 1;
    s->sum0 = s->len + n + 1;
    for (int i = 0; i < n; i++) s->sum0[i + 1] = s->sum0[i] + td_hash_n_blocks(4 * items[i].n);
    s->sums = td_alloc(sizeof(uint64_t) * (s->sum0[n] + 1), TD_MEM_OTHER);
    char *hdr = format_header(s, &s->hlen); /* zeros where the checksums go */
    for (int i = 0; i < n; i++) s->total += s->len[i];
    char path[PATH_MAX + 160];
    snprintf(path, sizeof path, "%s/%s", d->tmp, s->file);
    const char *why;
    s->fd = td_open_output(path, O_RDWR | O_CREAT | O_TRUNC, 0644, &why);
    if (s->fd < 0) {
        char what[128];
        snprintf(what, sizeof what, "creating %s: %s", s->file, why);
        td_ckpt_save_failed(d, what, errno);
    }
    write_at(s, hdr, s->hlen, 0);
    free(hdr);
    return s;
}

/* A piece's hashing on a second thread: it hashes each block once the
 * writer has put it (written counts the bytes, under mu). */
typedef struct {
    const char *c;
    uint64_t len, written;
    uint64_t *sum; /* [blocks] */
    pthread_mutex_t mu;
    pthread_cond_t cv;
} hash_trail;

static void *hash_worker(void *arg) {
    hash_trail *h = arg;
    for (uint64_t off = 0; off < h->len; off += TD_HASH_BLOCK) {
        size_t n = h->len - off < TD_HASH_BLOCK ? (size_t)(h->len - off) : TD_HASH_BLOCK;
        pthread_mutex_lock(&h->mu);
        while (h->written < off + n) pthread_cond_wait(&h->cv, &h->mu);
        pthread_mutex_unlock(&h->mu);
        h->sum[off / TD_HASH_BLOCK] = td_xxh3(h->c + off, n);
    }
    return NULL;
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
    /* block by block, each block hashed right after its write: the write's
     * copy brought it into the cache, so the checksums cost no second pass
     * over memory (hashing first measured 1.4x as long: it paid the fetch).
     * A piece of two blocks or more is hashed on a second thread trailing
     * the writes by a block, so a save into page cache does not wait for
     * it (on the writing thread the checksums were 5.7-6.1% of such a
     * save); td_ckpt_hash_ms counts only the writer's wait for it. */
    const char *c = (const char *)data;
    uint64_t *sum = s->sums + s->sum0[i];
    hash_trail h = {.c = c, .len = s->len[i], .sum = sum};
    pthread_t worker;
    int trail = s->len[i] > TD_HASH_BLOCK && pthread_mutex_init(&h.mu, NULL) == 0;
    if (trail && pthread_cond_init(&h.cv, NULL) != 0) {
        pthread_mutex_destroy(&h.mu);
        trail = 0;
    }
    if (trail && pthread_create(&worker, NULL, hash_worker, &h) != 0) {
        pthread_cond_destroy(&h.cv);
        pthread_mutex_destroy(&h.mu);
        trail = 0;
    }
    for (uint64_t off = 0; off < s->len[i]; off += TD_HASH_BLOCK) {
        size_t n = s->len[i] - off < TD_HASH_BLOCK ? (size_t)(s->len[i] - off) : TD_HASH_BLOCK;
        write_at(s, c + off, n, s->off[i] + off);
        if (trail) {
            pthread_mutex_lock(&h.mu);
            h.written = off + n;
            pthread_cond_signal(&h.cv);
            pthread_mutex_unlock(&h.mu);
            continue;
        }
        double t0 = td_now_ms();
        *sum++ = td_xxh3(c + off, n);
        td_ckpt_hash_ms += td_now_ms() - t0;
    }
    if (trail) {
        double t0 = td_now_ms();
        pthread_join(worker, NULL);
        td_ckpt_hash_ms += td_now_ms() - t0;
        pthread_cond_destroy(&h.cv);
        pthread_mutex_destroy(&h.mu);
    }
    s->done += s->len[i];
    s->put++;
}

size_t td_shard_bookkeeping(int n) {
    /* the item list, data pointers, the header's tensor table, offsets and
     * each piece's checksum key and list (one block per piece; pieces over
     * 4 MiB add 8 bytes a block, not counted) */
    return (size_t)(n + 1) * (2 * sizeof(td_shard_item) + sizeof(float *) + sizeof(td_st_tensor) + 4 * sizeof(uint64_t) +
                              2 * sizeof(char *) + 64);
}

void td_shard_close(td_shard *s) {
    TD_ASSERT(s->put == s->n);
    size_t hlen;
    char *hdr = format_header(s, &hlen); /* now with the checksums */
    TD_ASSERT(hlen == s->hlen);
    write_at(s, hdr, hlen, 0);
    free(hdr);
    char what[96];
    snprintf(what, sizeof what, "fsync of %s", s->file);
    if (fsync(s->fd) != 0) td_ckpt_save_failed(s->d, what, errno);
    snprintf(what, sizeof what, "closing %s", s->file);
    if (close(s->fd) != 0) td_ckpt_save_failed(s->d, what, errno);
    td_free(s->off);
    td_free(s->sums);
    td_free(s);
}
