/* --data DIR or --data 'PATTERN': every token shard of a set, such as the
 * NAME_train_000000.bin, NAME_val_000000.bin, ... that `trident tokenize`
 * (and llm.c's data scripts) write, read in name order and concatenated. */
#include <glob.h>
#include <string.h>
#include <sys/stat.h>

#include "data_internal.h"
#include "trident/base.h"
#include "trident/formats_data.h"

int td_data_is_shard_set(const char *path) {
    struct stat st;
    if (stat(path, &st) == 0) return S_ISDIR(st.st_mode);
    return strpbrk(path, "*?[") != NULL; /* a pattern (a file of that name would have matched) */
}

/* 0 train, 1 val, -1 neither (by the file's name, not its directory's) */
static int split_of(const char *path) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    if (strncmp(base, "val", 3) == 0 || strstr(base, "_val")) return 1;
    if (strncmp(base, "train", 5) == 0 || strstr(base, "_train")) return 0;
    return -1;
}

/* What each shard is checked against and hashed into (NULL m: no manifest). */
typedef struct {
    const td_data_manifest *m;
    const char *json;
    td_hash_stream *all;
} shard_checks;

/* Appends the tokens of each file of one split to *ids. */
static size_t load_split(char **files, size_t nfiles, int split, int vocab, int **ids, int *max_id,
                         int *nused, const shard_checks *c) {
    size_t total = 0, cap = 0;
    *ids = NULL;
    for (size_t i = 0; i < nfiles; i++) {
        if (split_of(files[i]) != split) continue;
        char label[4200];
        snprintf(label, sizeof label, "--data: %s shard %s", split ? "validation" : "training",
                 files[i]);
        /* the whole file is hashed before any of it is believed */
        uint64_t size, h = td_data_file_hash(files[i], label, &size, c->all);
        if (c->m) td_data_shard_check(c->m, c->json, files[i], label, size, h);
        int *part, mx;
        size_t n = td_data_load_bin(files[i], label, vocab, &part, &mx);
        td_err e;
        if (vocab > 0)
            TD_CHECK(td_tokfile_check_ids(part, n, vocab, &e) == 0, "%s: %s; valid ids: 0 .. %d",
                     label, e.msg, vocab - 1);
        if (total + n > cap) {
            cap = (total + n) * 2;
            int *grown = td_alloc(sizeof(int) * cap, TD_MEM_OTHER);
            if (total) memcpy(grown, *ids, sizeof(int) * total);
            td_free(*ids);
            *ids = grown;
        }
        memcpy(*ids + total, part, sizeof(int) * n);
        td_free(part);
        total += n;
        if (mx > *max_id) *max_id = mx;
        (*nused)++;
    }
    return total;
}

int td_data_load_shards(td_dataset *d, const char *path, int vocab, const td_data_manifest *m, const char *json,
                        td_hash_stream *all) {
    char pattern[4200];
    struct stat st;
    int is_dir = stat(path, &st) == 0 && S_ISDIR(st.st_mode);
    snprintf(pattern, sizeof pattern, is_dir ? "%s/*.bin" : "%s", path);
    glob_t g;
    int rc = glob(pattern, 0, NULL, &g);
    TD_CHECK(rc == 0 || rc == GLOB_NOMATCH, "--data %s: cannot list %s", path, pattern);
    size_t nfiles = rc == 0 ? g.gl_pathc : 0;
    TD_CHECK(nfiles > 0,
             "--data %s: %s; give a directory or pattern of token shards "
             "(NAME_train_000000.bin, NAME_val_000000.bin, ..., as trident tokenize writes), "
             "a text file or a .bin token file",
             path, is_dir ? "a directory without .bin token files" : "the pattern matches no file");
    for (size_t i = 0; i < nfiles; i++)
        TD_CHECK(split_of(g.gl_pathv[i]) >= 0,
                 "--data %s: %s is neither a training nor a validation shard; shard names hold "
                 "_train or _val (or start with train or val)",
                 path, g.gl_pathv[i]);
    /* a directory is the set its manifest lists: a shard gone missing is
     * an error, not a smaller corpus (a pattern picks some on purpose) */
    for (int k = 0; m && is_dir && k < m->n_shards; k++) {
        int found = 0;
        for (size_t i = 0; i < nfiles && !found; i++) {
            const char *base = strrchr(g.gl_pathv[i], '/');
            found = strcmp(base ? base + 1 : g.gl_pathv[i], m->shards[k].name) == 0;
        }
        TD_CHECK(found, "--data %s: shard %s/%s, listed in %s, is missing; tokenize the text again", path, path,
                 m->shards[k].name, json);
    }
    shard_checks c = {m, json, all};
    int max_id = -1, ntrain = 0, nval = 0;
    int *train, *val;
    size_t n_train = load_split(g.gl_pathv, nfiles, 0, vocab, &train, &max_id, &ntrain, &c);
    size_t n_val = load_split(g.gl_pathv, nfiles, 1, vocab, &val, &max_id, &nval, &c);
    globfree(&g);
    TD_CHECK(ntrain > 0,
             "--data %s: %d validation shards but no training shard (a name holding _train)", path,
             nval);
    if (nval > 0) {
        d->train = train, d->n_train = n_train, d->val = val, d->n_val = n_val;
        snprintf(d->description, sizeof d->description, "%s: %d train + %d val shards (token ids)",
                 path, ntrain, nval);
    } else {
        size_t k = n_train * 9 / 10;
        d->train = train, d->n_train = k;
        d->val = td_alloc(sizeof(int) * (n_train - k + 1), TD_MEM_OTHER);
        memcpy(d->val, train + k, sizeof(int) * (n_train - k));
        d->n_val = n_train - k;
        snprintf(d->description, sizeof d->description,
                 "%s: %d train shards (token ids, split 90/10)", path, ntrain);
    }
    return max_id;
}
