/* Reading a checkpoint in any layout: the manifest says where each piece of
 * each tensor lies; a rank puts together one global tensor at a time from
 * the pieces and copies the elements it holds in its own layout. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_internal.h"
#include "trident/base.h"
#include "trident/files.h"

static void read_exact(int fd, void *p, uint64_t n, uint64_t off, const char *path, const char *what) {
    char *c = p;
    while (n > 0) {
        ssize_t k = pread(fd, c, n > (1u << 30) ? (1u << 30) : (size_t)n, (off_t)off);
        if (k < 0 && errno == EINTR) continue;
        TD_CHECK(k > 0, "%s: %s: %s", path, what, k < 0 ? strerror(errno) : "the file is shorter than its header says");
        c += k, n -= (uint64_t)k, off += (uint64_t)k;
    }
}

void td_ckpt_reader_open(td_ckpt_reader *r, const char *path, const char *what) {
    memset(r, 0, sizeof *r);
    TD_CHECK(path && *path, "%s needs a directory written by 'trident train --out' or one of its step directories",
             what);
    TD_CHECK(strlen(path) < PATH_MAX - 64, "%s %.64s...: the path is too long", what, path);
    char file[PATH_MAX + 64];
    struct stat st;
    snprintf(file, sizeof file, "%s/manifest.json", path);
    if (stat(file, &st) == 0) {
        snprintf(r->dir, sizeof r->dir, "%s", path);
    } else {
        char link[PATH_MAX + 16], target[PATH_MAX];
        snprintf(link, sizeof link, "%s/latest", path);
        ssize_t n = readlink(link, target, sizeof target - 1);
        TD_CHECK(n > 0, "%s %s: cannot open it as a step directory (no manifest.json) or as a directory written by "
                 "'trident train --out' (no latest link): %s", what, path, strerror(errno));
        target[n] = 0;
        int k = snprintf(r->dir, sizeof r->dir, "%s/%s", path, target);
        TD_CHECK(k > 0 && (size_t)k < sizeof r->dir, "%s %s: latest names %.64s..., too long a path", what, path, target);
        snprintf(file, sizeof file, "%s/manifest.json", r->dir);
        TD_CHECK(stat(file, &st) == 0, "%s %s: latest names %s, which holds no manifest.json: %s", what, path, target,
                 strerror(errno));
    }
    const char *why;
    int fd = td_open_input(file, &st, &why);
    TD_CHECK(fd >= 0, "%s: cannot read it: %s", file, why);
    TD_CHECK((uint64_t)st.st_size <= TD_MANIFEST_MAX_BYTES, "%s: %lld bytes; a manifest is at most 256 MiB", file,
             (long long)st.st_size);
    char *text = td_alloc((size_t)st.st_size + 1, TD_MEM_OTHER);
    read_exact(fd, text, (uint64_t)st.st_size, 0, file, "reading it");
    close(fd);
    td_err e;
    TD_CHECK(td_manifest_parse(text, (size_t)st.st_size, &r->m, &e) == 0, "%s: %s", file, e.msg);
    td_free(text);
    int n = r->m.n_files;
    r->fd = td_alloc(sizeof(int) * (size_t)n, TD_MEM_OTHER);
    r->hdr = td_alloc(sizeof(td_st_header) * (size_t)n, TD_MEM_OTHER);
    r->flen = td_alloc(sizeof(uint64_t) * (size_t)n, TD_MEM_OTHER);
    memset(r->hdr, 0, sizeof(td_st_header) * (size_t)n);
    for (int f = 0; f < n; f++) r->fd[f] = -1;
}

void td_ckpt_reader_close(td_ckpt_reader *r) {
    for (int f = 0; f < r->m.n_files; f++)
        if (r->fd[f] >= 0) {
            close(r->fd[f]);
            td_st_header_free(&r->hdr[f]);
        }
    td_free(r->fd);
    td_free(r->hdr);
    td_free(r->flen);
    td_manifest_free(&r->m);
    memset(r, 0, sizeof *r);
}

static void open_file(td_ckpt_reader *r, int f, char *path, size_t cap) {
    snprintf(path, cap, "%s/%s", r->dir, r->m.files[f]);
    if (r->fd[f] >= 0) return;
    struct stat st;
    const char *why;
    int fd = td_open_input(path, &st, &why);
    TD_CHECK(fd >= 0, "%s: cannot read this shard of the checkpoint: %s", path, why);
    unsigned char first8[8] = {0};
    uint64_t n, len = (uint64_t)st.st_size;
    td_err e;
    read_exact(fd, first8, len < 8 ? len : 8, 0, path, "header length");
    TD_CHECK(td_st_header_len(first8, len, &n, &e) == 0, "%s: %s", path, e.msg);
    char *h = td_alloc(n + 1, TD_MEM_OTHER);
    read_exact(fd, h, n, 8, path, "header");
    TD_CHECK(td_st_header_parse(h, n, len, &r->hdr[f], &e) == 0, "%s: %s", path, e.msg);
    td_free(h);
    r->fd[f] = fd;
    r->flen[f] = len;
}

void td_ckpt_reader_get(td_ckpt_reader *r, int f, const char *key, uint64_t n, float *dst) {
    char path[PATH_MAX + 64];
    open_file(r, f, path, sizeof path);
    const td_st_tensor *x = td_st_find(&r->hdr[f], key);
    TD_CHECK(x, "%s: tensor %s (named by manifest.json) is missing", path, key);
    TD_CHECK(x->dtype == TD_ST_F32 && x->end - x->begin == 4 * n, "%s: tensor %s: %s with %llu bytes, but the manifest "
             "says %llu F32 elements", path, key, td_st_dtype_name(x->dtype),
             (unsigned long long)(x->end - x->begin), (unsigned long long)n);
    read_exact(r->fd[f], dst, 4 * n, r->hdr[f].data_off + x->begin, path, key);
}

/* the tables of the source layout (one per tp size: a row's element ->
 * global index mapping needs the slicing of that tp) */
static const td_param_table *source_table(td_param_table *cache, int *n_cache, const td_gpt_config *cfg, int tp) {
    for (int i = 0; i < *n_cache; i++)
        if (cache[i].tp == tp) return &cache[i];
    TD_CHECK(*n_cache < 8 && cfg->H % tp == 0, "manifest: a piece's tp %d does not divide the model", tp);
    td_table_layout lay = {1, tp, 0, NULL, TD_PREC_FP32};
    td_param_table_build_layout(&cache[*n_cache], cfg, &lay);
    return &cache[(*n_cache)++];
}

int td_ckpt_reader_fill(td_ckpt_reader *r, const td_param_table *t, int section, const td_ckpt_range *rg,
                        int n_ranges) {
    int any = 0;
    for (int i = 0; i < r->m.n_tensors; i++)
        for (int k = 0; k < r->m.tensors[i].n_pieces; k++) any |= r->m.tensors[i].pieces[k].section == section;
    if (!any) return 0;
    td_param_table cache[8];
    int n_cache = 0;
    char sec[32];
    td_mf_section_name(section, sec, sizeof sec);
    for (int i = 0; i < t->n_rows; i++) {
        const td_param *p = &t->rows[i];
        int wanted = 0;
        for (int j = 0; j < n_ranges && !wanted; j++)
            wanted = p->numel > 0 && rg[j].lo < p->offset + p->numel && p->offset < rg[j].lo + rg[j].n;
        if (!wanted) continue;
        const td_mf_tensor *mt = td_manifest_tensor(&r->m, p->name);
        TD_CHECK(mt, "%s/manifest.json: tensor %s is missing", r->dir, p->name);
        size_t numel = (size_t)p->shape[0] * (size_t)(p->ndim == 2 ? p->shape[1] : 1);
        TD_CHECK(mt->ndim == p->ndim && mt->shape[0] == p->shape[0] && (p->ndim == 1 || mt->shape[1] == p->shape[1]),
                 "%s/manifest.json: tensor %s has shape [%lld%s%lld], this model's is [%d%s%d]", r->dir, p->name,
                 (long long)mt->shape[0], mt->ndim == 2 ? ", " : "", mt->ndim == 2 ? (long long)mt->shape[1] : 0LL,
                 p->shape[0], p->ndim == 2 ? ", " : "", p->ndim == 2 ? p->shape[1] : 0);
        /* the global tensor, then this rank's elements of it */
        float *global = td_alloc(numel * sizeof(float), TD_MEM_OTHER);
        unsigned char *seen = td_alloc(numel, TD_MEM_OTHER);
        memset(seen, 0, numel);
        size_t covered = 0;
        for (int k = 0; k < mt->n_pieces; k++) {
            const td_mf_piece *pc = &mt->pieces[k];
            if (pc->section != section) continue;
            const td_param_table *src = source_table(cache, &n_cache, &t->cfg, pc->tp);
            const td_param *sp = &src->rows[i];
            TD_CHECK(pc->end <= sp->numel, "%s/manifest.json: tensor %s: piece %s ends at %llu, beyond tp rank %d's "
                     "slice of %zu elements", r->dir, p->name, pc->key, (unsigned long long)pc->end, pc->tp_rank,
                     sp->numel);
            size_t n = (size_t)(pc->end - pc->begin);
            float *buf = td_alloc(n * sizeof(float) + 1, TD_MEM_OTHER);
            td_ckpt_reader_get(r, pc->file, pc->key, n, buf);
            for (size_t e = 0; e < n; e++) {
                long long gi = td_param_global_index(src, sp, pc->tp_rank, pc->begin + e);
                if (gi < 0) continue; /* vocabulary padding */
                float x = buf[e];
                TD_CHECK(isfinite(x) && !(section == 2 && x < 0), "%s/%s: tensor %s: element %zu is %g%s", r->dir,
                         r->m.files[pc->file], pc->key, e, (double)x,
                         section == 2 && x < 0 ? "; second moments are >= 0" : "");
                TD_CHECK(!seen[gi], "%s/manifest.json: tensor %s (%s): element %lld is in two pieces", r->dir,
                         p->name, sec, gi);
                seen[gi] = 1, covered++;
                global[gi] = x;
            }
            td_free(buf);
        }
        TD_CHECK(covered == numel, "%s/manifest.json: tensor %s (%s): the pieces hold %zu of its %zu elements", r->dir,
                 p->name, sec, covered, numel);
        for (int j = 0; j < n_ranges; j++) {
            size_t lo = td_max_sz(rg[j].lo, p->offset), hi = td_min_sz(rg[j].lo + rg[j].n, p->offset + p->numel);
            for (size_t e = lo; e < hi; e++) {
                long long gi = td_param_global_index(t, p, t->tp_rank, e - p->offset);
                rg[j].data[e - rg[j].lo] = gi < 0 ? 0.0f : global[gi];
            }
        }
        td_free(seen);
        td_free(global);
    }
    for (int i = 0; i < n_cache; i++) td_param_table_free(&cache[i]);
    return 1;
}
