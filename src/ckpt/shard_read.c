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
#include "trident/backend.h"
#include "trident/base.h"
#include "trident/files.h"
#include "trident/formats_hash.h"

static void read_exact(int fd, void *p, uint64_t n, uint64_t off, const char *path, const char *what) {
    char *c = p;
    while (n > 0) {
        ssize_t k = pread(fd, c, n > (1u << 30) ? (1u << 30) : (size_t)n, (off_t)off);
        if (k < 0 && errno == EINTR) continue;
        TD_CHECK(k > 0, "%s: %s: %s", path, what, k < 0 ? strerror(errno) : "the file is shorter than its header says");
        c += k, n -= (uint64_t)k, off += (uint64_t)k;
    }
}

/* DIR/latest: the step directory it names, into r->dir. trident writes a
 * relative link (step-NNNNNNNN). An absolute link is accepted when it
 * resolves to a directory directly inside DIR (the same checkpoint named
 * the long way); one that leads out of DIR, absolute or relative, is
 * refused: that is a copied or moved checkpoint directory whose latest
 * still names the original, and resuming from it would read another
 * directory's state unawares. */
static void resolve_latest(td_ckpt_reader *r, const char *path, const char *what) {
    char link[PATH_MAX + 16], target[PATH_MAX], real_dir[PATH_MAX], real_step[PATH_MAX], file[PATH_MAX + 64];
    struct stat st;
    snprintf(link, sizeof link, "%s/latest", path);
    TD_CHECK(lstat(link, &st) != 0 || S_ISLNK(st.st_mode),
             "%s %s: its latest is %s, not the symbolic link to a step directory that 'trident train --out' writes", what,
             path, td_file_kind(st.st_mode));
    ssize_t n = readlink(link, target, sizeof target - 1);
    TD_CHECK(n > 0, "%s %s: cannot open it as a step directory (no manifest.json) or as a directory written by "
             "'trident train --out' (no latest link): %s", what, path, strerror(errno));
    target[n] = 0;
    int k = target[0] == '/' ? snprintf(r->dir, sizeof r->dir, "%s", target)
                             : snprintf(r->dir, sizeof r->dir, "%s/%s", path, target);
    TD_CHECK(k > 0 && (size_t)k < sizeof r->dir, "%s %s: latest names %.64s..., too long a path", what, path, target);
    TD_CHECK(realpath(r->dir, real_step) && realpath(path, real_dir), "%s %s: latest names %s, which cannot be opened: %s",
             what, path, target, strerror(errno));
    char *slash = strrchr(real_step, '/');
    size_t parent = slash ? (size_t)(slash - real_step) : 0;
    TD_CHECK(parent == strlen(real_dir) && strncmp(real_step, real_dir, parent) == 0,
             "%s %s: latest names %s, which is not a step directory inside %s (a copied or moved checkpoint "
             "directory?); give that step directory itself, or point latest at a step directory of %s (ln -sfn step-NNNNNNNN "
             "%s/latest)", what, path, target, path, path, path);
    snprintf(file, sizeof file, "%s/manifest.json", r->dir);
    TD_CHECK(stat(file, &st) == 0, "%s %s: latest names %s, which holds no manifest.json: %s", what, path, target,
             strerror(errno));
}

void td_ckpt_reader_open(td_ckpt_reader *r, const char *path, const char *what) {
    memset(r, 0, sizeof *r);
    TD_CHECK(path && *path, "%s needs a directory written by 'trident train --out' or one of its step directories",
             what);
    TD_CHECK(strlen(path) < PATH_MAX - 64, "%s %.64s...: the path is too long", what, path);
    char file[PATH_MAX + 64];
    struct stat st;
    TD_CHECK(stat(path, &st) != 0 || S_ISDIR(st.st_mode), "%s %s is %s, not a directory; give a directory written by "
             "'trident train --out' or one of its step directories", what, path, td_file_kind(st.st_mode));
    snprintf(file, sizeof file, "%s/manifest.json", path);
    if (stat(file, &st) == 0)
        snprintf(r->dir, sizeof r->dir, "%s", path);
    else
        resolve_latest(r, path, what);
    snprintf(file, sizeof file, "%s/manifest.json", r->dir);
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
    /* the output directory's copy of a tokenizer.json, beside the step
     * directories: found from anywhere, unlike the path typed at train */
    if (r->m.tok_copy) {
        char tp[2 * PATH_MAX];
        snprintf(tp, sizeof tp, "%s/../%s", r->dir, r->m.tok_copy);
        free(r->m.tok_file);
        r->m.tok_file = strdup(tp);
        TD_CHECK(r->m.tok_file, "%s: out of memory", file);
    }
    /* a step directory's name is its step: a manifest moved into another
     * one (or edited) would resume the wrong point of the schedule */
    const char *base = strrchr(r->dir, '/') ? strrchr(r->dir, '/') + 1 : r->dir;
    int named = -1, used = 0;
    if (sscanf(base, "step-%8d%n", &named, &used) == 1 && used == 13 && base[13] == 0)
        TD_CHECK(named == r->m.step, "%s: field step: %d, but its directory is %s: the manifest is of another step",
                 file, r->m.step, base);
    int n = r->m.n_files;
    r->fd = td_alloc(sizeof(int) * (size_t)n, TD_MEM_OTHER);
    r->hdr = td_alloc(sizeof(td_st_header) * (size_t)n, TD_MEM_OTHER);
    r->flen = td_alloc(sizeof(uint64_t) * (size_t)n, TD_MEM_OTHER);
    memset(r->hdr, 0, sizeof(td_st_header) * (size_t)n);
    for (int f = 0; f < n; f++) r->fd[f] = -1;
}

static void open_file(td_ckpt_reader *r, int f, char *path, size_t cap);

void td_ckpt_reader_open_shards(td_ckpt_reader *r) {
    char path[PATH_MAX + 300];
    for (int f = 0; f < r->m.n_files; f++) open_file(r, f, path, sizeof path);
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

double td_ckpt_verify_ms;

void td_ckpt_checksum_ms(double *write_ms, double *read_ms) {
    if (write_ms) *write_ms = td_ckpt_hash_ms;
    if (read_ms) *read_ms = td_ckpt_verify_ms;
}

static const char *meta_of(const td_st_header *h, const char *key) {
    for (int k = 0; k < h->n_meta; k++)
        if (strcmp(h->meta_key[k], key) == 0) return h->meta_val[k];
    return NULL;
}

/* A shard is what the manifest says it is before any of its data is used:
 * its size, the step, run and rank its header records, and the checksum of
 * that header, which holds every block's checksum. */
static void open_file(td_ckpt_reader *r, int f, char *path, size_t cap) {
    snprintf(path, cap, "%s/%s", r->dir, r->m.files[f]);
    if (r->fd[f] >= 0) return;
    const td_mf_file *mf = &r->m.shards[f];
    struct stat st;
    const char *why;
    int fd = td_open_input(path, &st, &why);
    TD_CHECK(fd >= 0, "%s: cannot read this shard of the checkpoint: %s", path, why);
    unsigned char first8[8] = {0};
    uint64_t n, len = (uint64_t)st.st_size;
    td_err e;
    TD_CHECK(len == mf->size, "%s (rank %d): %llu bytes, but manifest.json records %llu: the shard is truncated or "
             "not this checkpoint's", path, mf->rank, (unsigned long long)len, (unsigned long long)mf->size);
    read_exact(fd, first8, len < 8 ? len : 8, 0, path, "header length");
    TD_CHECK(td_st_header_len(first8, len, &n, &e) == 0, "%s: %s", path, e.msg);
    char *h = td_alloc(n + 8, TD_MEM_OTHER);
    read_exact(fd, h, n + 8, 0, path, "header");
    uint64_t sum = td_xxh3(h, n + 8);
    if (td_st_header_parse(h + 8, n, len, &r->hdr[f], &e) != 0) {
        /* a header that does not parse is named as corrupt when its checksum says so */
        TD_CHECK(sum == mf->header_xxh3, "%s (rank %d): its header hashes to %016llx, manifest.json records %016llx: "
                 "the shard's header is corrupt or was changed (%s)", path, mf->rank, (unsigned long long)sum,
                 (unsigned long long)mf->header_xxh3, e.msg);
        td_fail("%s: %s", path, e.msg);
    }
    td_free(h);
    const td_st_header *hd = &r->hdr[f];
    const char *step = meta_of(hd, TD_SHARD_META_STEP), *run = meta_of(hd, TD_SHARD_META_RUN),
               *rank = meta_of(hd, TD_SHARD_META_RANK);
    char want_run[TD_HASH_HEX + 1];
    td_hash_hex(r->m.run, want_run);
    TD_CHECK(step && run && rank, "%s (rank %d): its header does not say which step, run and rank it is (%s, %s, "
             "%s missing): not a shard of a trident checkpoint of this version", path, mf->rank,
             TD_SHARD_META_STEP, TD_SHARD_META_RUN, TD_SHARD_META_RANK);
    TD_CHECK(strcmp(run, want_run) == 0, "%s (rank %d): the shard is of run %s, the manifest's run is %s: a shard of "
             "another training run", path, mf->rank, run, want_run);
    TD_CHECK(atoi(step) == r->m.step, "%s (rank %d): the shard is of step %s, the manifest's step is %d: a shard of "
             "another checkpoint", path, mf->rank, step, r->m.step);
    TD_CHECK(atoi(rank) == mf->rank, "%s: the shard was written by rank %s, the manifest names rank %d for it", path,
             rank, mf->rank);
    TD_CHECK(sum == mf->header_xxh3, "%s (rank %d): its header hashes to %016llx, manifest.json records %016llx: the "
             "shard's header is corrupt or was changed", path, mf->rank, (unsigned long long)sum,
             (unsigned long long)mf->header_xxh3);
    r->fd[f] = fd;
    r->flen[f] = len;
}

void td_ckpt_reader_get(td_ckpt_reader *r, int f, const char *key, uint64_t n, float *dst) {
    char path[PATH_MAX + 64];
    open_file(r, f, path, sizeof path);
    const td_st_header *hd = &r->hdr[f];
    const td_st_tensor *x = td_st_find(hd, key);
    TD_CHECK(x, "%s: tensor %s (named by manifest.json) is missing", path, key);
    TD_CHECK(x->dtype == TD_ST_F32 && x->end - x->begin == 4 * n, "%s: tensor %s: %s with %llu bytes, but the manifest "
             "says %llu F32 elements", path, key, td_st_dtype_name(x->dtype),
             (unsigned long long)(x->end - x->begin), (unsigned long long)n);
    /* the blocks' checksums, from the header the manifest vouched for */
    char mkey[256];
    snprintf(mkey, sizeof mkey, "%s%s", TD_SHARD_META_SUM, key);
    const char *list = meta_of(hd, mkey);
    int rank = r->m.shards[f].rank;
    TD_CHECK(list, "%s (rank %d): tensor %s has no checksums in its header", path, rank, key);
    size_t nb = td_hash_n_blocks(4 * n);
    uint64_t *want = td_alloc(sizeof(uint64_t) * (nb + 1), TD_MEM_OTHER);
    td_err e;
    TD_CHECK(td_hash_list_parse(list, nb, want, &e) == 0, "%s (rank %d): tensor %s: its checksums: %s", path, rank, key,
             e.msg);
    /* block by block: each one is hashed while the read left it in the cache */
    for (size_t b = 0; b < nb; b++) {
        size_t off = b * TD_HASH_BLOCK, len = 4 * n - off < TD_HASH_BLOCK ? 4 * n - off : TD_HASH_BLOCK;
        read_exact(r->fd[f], (char *)dst + off, len, hd->data_off + x->begin + off, path, key);
        double t0 = td_now_ms();
        uint64_t h = td_xxh3((const char *)dst + off, len);
        td_ckpt_verify_ms += td_now_ms() - t0;
        if (h == want[b]) continue;
        if (r->report) { /* ckpt check: every bad block is listed */
            r->report(r->report_ctx, path, rank, key, b, off, len, h, want[b]);
            continue;
        }
        td_fail("%s (rank %d): tensor %s: bytes %zu..%zu (block %zu of %zu) hash to %016llx, the shard records "
                "%016llx: the checkpoint is corrupt", path, rank, key, off, off + len, b + 1, nb,
                (unsigned long long)h, (unsigned long long)want[b]);
    }
    td_free(want);
}

/* The tables of the source layout, one per (tp, ep, ep rank) of its
 * pieces: a row's element -> global index mapping needs the slicing of that
 * tp (and, for the experts' rows, that ep slice). A few are kept, the
 * oldest made again when needed (an ep of many ranks). */
enum { N_SOURCE = 8 };
typedef struct {
    td_param_table t[N_SOURCE];
    int n, next;
} source_cache;

static const td_param_table *source_table(source_cache *c, const td_ckpt_reader *r, const td_gpt_config *cfg,
                                          const td_mf_piece *pc) {
    for (int i = 0; i < c->n; i++)
        if (c->t[i].tp == pc->tp && c->t[i].ep == pc->ep && c->t[i].ep_rank == pc->ep_rank) return &c->t[i];
    int kv = cfg->KV ? cfg->KV : cfg->H;
    TD_CHECK(cfg->H % pc->tp == 0 && kv % pc->tp == 0 && cfg->F % pc->tp == 0,
             "%s/manifest.json: piece %s: tp %d does not divide the model", r->dir, pc->key, pc->tp);
    TD_CHECK(pc->ep == 1 || (cfg->moe.E > 0 && cfg->moe.E % pc->ep == 0),
             "%s/manifest.json: piece %s: ep %d does not divide the model's %d experts", r->dir, pc->key, pc->ep,
             cfg->moe.E);
    int i;
    if (c->n < N_SOURCE) {
        i = c->n++;
    } else { /* the oldest goes */
        i = c->next;
        c->next = (c->next + 1) % N_SOURCE;
        td_param_table_free(&c->t[i]);
    }
    td_table_layout lay = {.unit_align = 1, .tp = pc->tp, .prec = TD_PREC_FP32, .cp = 1, .ep = pc->ep,
                           .ep_rank = pc->ep_rank};
    td_param_table_build_layout(&c->t[i], cfg, &lay);
    return &c->t[i];
}

enum { FILL_STAGE = 1 << 16 }; /* floats per staged upload */

int td_ckpt_reader_fill(td_ckpt_reader *r, const td_param_table *t, int section, const td_ckpt_range *rg,
                        int n_ranges) {
    int any = 0;
    for (int i = 0; i < r->m.n_tensors; i++)
        for (int k = 0; k < r->m.tensors[i].n_pieces; k++) any |= r->m.tensors[i].pieces[k].section == section;
    if (!any) return 0;
    source_cache cache;
    memset(&cache, 0, sizeof cache);
    float *stage = td_alloc(FILL_STAGE * sizeof(float), TD_MEM_OTHER);
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
            const td_param_table *src = source_table(&cache, r, &t->cfg, pc);
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
        /* the ranges are the strategy's (device) buffers: this rank's
         * elements are put together on the host and go up in staged
         * pieces (named uploads) */
        for (int j = 0; j < n_ranges; j++) {
            size_t lo = td_max_sz(rg[j].lo, p->offset), hi = td_min_sz(rg[j].lo + rg[j].n, p->offset + p->numel);
            for (size_t a = lo; a < hi; a += FILL_STAGE) {
                size_t b = td_min_sz(hi, a + FILL_STAGE);
                for (size_t e = a; e < b; e++) {
                    long long gi = td_param_global_index(t, p, t->tp_rank, e - p->offset);
                    stage[e - a] = gi < 0 ? 0.0f : global[gi];
                }
                td_dev_upload(rg[j].data + (a - rg[j].lo), stage, (b - a) * sizeof(float), TD_HOST_CKPT);
            }
        }
        td_free(seen);
        td_free(global);
    }
    for (int i = 0; i < cache.n; i++) td_param_table_free(&cache.t[i]);
    td_free(stage);
    return 1;
}
