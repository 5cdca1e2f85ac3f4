/* DIR/data.json on disk (formats_data_manifest.h holds the format): found
 * for a --data path, read, written atomically by tokenize, and the shards
 * checked against it as they load; and the checksums that fingerprint a
 * run's data (data.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data_internal.h"
#include "trident/base.h"
#include "trident/bpe.h"
#include "trident/files.h"
#include "trident/formats_hash.h"

/* The directory whose data.json describes path: a directory itself, the
 * directory part of a pattern (when it has no pattern characters of its
 * own) or of a file; "" when there is none to look in. */
static void manifest_dir(const char *path, char *dir, size_t cap) {
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(dir, cap, "%s", path);
        return;
    }
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(dir, cap, ".");
    else snprintf(dir, cap, "%.*s", (int)(slash - path), path);
    if (slash == path) snprintf(dir, cap, "/");
    if (strpbrk(dir, "*?[")) dir[0] = 0;
}

int td_data_manifest_of(const char *path, td_data_manifest *m, char *json, size_t cap) {
    memset(m, 0, sizeof *m);
    char dir[4096];
    manifest_dir(path, dir, sizeof dir);
    if (!dir[0]) return 0;
    snprintf(json, cap, "%s/%s", dir, TD_DATA_MANIFEST_NAME);
    struct stat st;
    if (lstat(json, &st) != 0 && errno == ENOENT) return 0;
    const char *why;
    int fd = td_open_input(json, &st, &why);
    TD_CHECK(fd >= 0, "--data %s: its manifest %s cannot be read: %s", path, json, why);
    TD_CHECK((uint64_t)st.st_size <= TD_DATA_MANIFEST_MAX_BYTES, "--data %s: its manifest %s has %lld bytes; a data "
             "manifest is at most 64 MiB", path, json, (long long)st.st_size);
    size_t n = (size_t)st.st_size;
    char *text = td_alloc(n + 1, TD_MEM_OTHER);
    TD_CHECK(td_pread_all(fd, text, n, 0) == 0, "--data %s: reading its manifest %s failed: %s", path, json,
             strerror(errno));
    close(fd);
    td_err e;
    TD_CHECK(td_data_manifest_parse(text, n, m, &e) == 0, "--data %s: its manifest %s: %s; tokenize the text again "
             "(trident tokenize), or remove %s to read the shards without it", path, json, e.msg, json);
    td_free(text);
    return 1;
}

const char *td_data_tokenizer_for(const td_data_manifest *m, const char *json, const char *tokenizer) {
    if (strncmp(m->tokenizer, "hf:", 3) == 0) { /* td_data_load compares the file's XXH3 */
        TD_CHECK(td_tokenizer_is_file(tokenizer), "%s: the shards were tokenized with a tokenizer.json "
                 "(XXH3 %s); give that file as --tokenizer FILE.json", json, m->tokenizer + 3);
        return tokenizer;
    }
    int k = td_bpe_kind_parse(m->tokenizer);
    TD_CHECK(k >= 0 && m->vocab == td_bpe_kind_vocab((td_bpe_kind)k),
             "%s: tokenizer %s (vocabulary %d): this build reads token shards of gpt2 (vocabulary 50257), "
             "cl100k (100277) or o200k (200019) only", json, m->tokenizer, m->vocab);
    TD_CHECK(!tokenizer || strcmp(tokenizer, m->tokenizer) == 0,
             "--tokenizer %s contradicts %s, which says the shards were tokenized with %s; drop --tokenizer",
             tokenizer, json, m->tokenizer);
    return td_bpe_kind_name((td_bpe_kind)k);
}

int td_data_manifest_write(const char *dir, const td_data_manifest *m, int *err) {
    size_t len;
    char *text = td_data_manifest_format(m, &len);
    if (!text) return *err = ENOMEM, -1;
    char path[4400], tmp[4500];
    snprintf(path, sizeof path, "%s/%s", dir, TD_DATA_MANIFEST_NAME);
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    const char *why;
    int fd = td_open_output(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644, &why);
    int ok = fd >= 0 && td_write_all(fd, text, len) == 0;
    *err = errno;
    ok = fd >= 0 && close(fd) == 0 && ok;
    if (ok && rename(tmp, path) != 0) ok = 0;
    if (!ok) {
        *err = errno ? errno : *err;
        unlink(tmp);
    }
    free(text);
    return ok ? 0 : -1;
}

uint64_t td_data_file_hash(const char *path, const char *label, uint64_t *size, td_hash_stream *all) {
    struct stat st;
    const char *why;
    int fd = td_open_input(path, &st, &why);
    TD_CHECK(fd >= 0, "%s cannot be read: %s", label, why);
    td_hash_stream *one = td_hash_stream_new();
    enum { CHUNK = 1 << 20 };
    char *buf = td_alloc(CHUNK, TD_MEM_OTHER);
    TD_CHECK(one, "%s: out of memory for its checksum", label);
    uint64_t n = (uint64_t)st.st_size;
    for (uint64_t at = 0; at < n;) {
        size_t k = n - at < CHUNK ? (size_t)(n - at) : CHUNK;
        TD_CHECK(td_pread_all(fd, buf, k, at) == 0, "%s: read failed at byte %llu: %s", label,
                 (unsigned long long)at, errno ? strerror(errno) : "the file shrank while it was read");
        td_hash_stream_add(one, buf, k);
        if (all) td_hash_stream_add(all, buf, k);
        at += k;
    }
    close(fd);
    td_free(buf);
    uint64_t h = td_hash_stream_value(one);
    td_hash_stream_free(one);
    *size = n;
    return h;
}

void td_data_shard_check(const td_data_manifest *m, const char *json, const char *path, const char *label,
                         uint64_t size, uint64_t xxh3) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const td_dm_shard *x = td_data_manifest_find(m, base);
    TD_CHECK(x, "%s is not listed in %s (a shard of another run?); remove it, or tokenize the text again", label,
             json);
    TD_CHECK(x->size == size, "%s has %llu bytes, %s records %llu: the shard was changed or truncated; tokenize the "
             "text again", label, (unsigned long long)size, json, (unsigned long long)x->size);
    char have[TD_HASH_HEX + 1], want[TD_HASH_HEX + 1];
    td_hash_hex(xxh3, have);
    td_hash_hex(x->xxh3, want);
    TD_CHECK(x->xxh3 == xxh3, "%s: its XXH3 is %s, %s records %s: the shard is corrupt or was changed; tokenize the "
             "text again", label, have, json, want);
    /* the loader reads a .bin with an .idx beside it as Megatron's: the
     * index must be there exactly when the manifest says so */
    char idx[4200];
    struct stat st;
    snprintf(idx, sizeof idx, "%.*s.idx", (int)strlen(path) - 4, path);
    int has_idx = stat(idx, &st) == 0;
    TD_CHECK(has_idx == m->megatron, "%s: %s says its shards are %s files, but %s %s; tokenize the text again",
             label, json, m->megatron ? "Megatron" : "llm.c", idx, has_idx ? "is beside it" : "is missing");
}
