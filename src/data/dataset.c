/* Loading a corpus: text files and the token-file formats people have. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "trident/base.h"
#include "trident/data.h"

#define LLMC_MAGIC 20240520
#define LLMC_HEADER_INTS 256

/* Reads a whole file; errors name the file and the reason. */
static char *read_file(const char *path, size_t *n) {
    struct stat st;
    TD_CHECK(stat(path, &st) == 0, "--data %s: %s", path, strerror(errno));
    TD_CHECK(S_ISREG(st.st_mode), "--data %s is not a regular file; give a text file or a .bin token file",
             path);
    FILE *f = fopen(path, "rb");
    TD_CHECK(f, "--data %s cannot be read: %s", path, strerror(errno));
    char *buf = td_alloc((size_t)st.st_size + 1, TD_MEM_OTHER);
    size_t got = fread(buf, 1, (size_t)st.st_size, f);
    int err = ferror(f);
    fclose(f);
    TD_CHECK(!err && got == (size_t)st.st_size, "--data %s: read failed", path);
    TD_CHECK(got > 0, "--data %s is empty; give a non-empty text file or token file", path);
    *n = got;
    return buf;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* Tokens of one .bin file (either format) into *out; returns the count. */
static size_t load_bin(const char *path, int **out, int *max_id) {
    size_t n;
    char *buf = read_file(path, &n);
    const unsigned char *data = (const unsigned char *)buf;
    size_t count;
    int32_t magic = 0;
    if (n >= sizeof magic) memcpy(&magic, buf, sizeof magic);
    if (magic == LLMC_MAGIC) {
        TD_CHECK(n >= LLMC_HEADER_INTS * 4, "--data %s: llm.c header is truncated", path);
        int32_t hdr[LLMC_HEADER_INTS];
        memcpy(hdr, buf, sizeof hdr);
        TD_CHECK(hdr[1] == 1, "--data %s: llm.c token file version %d is not supported (want 1, uint16)",
                 path, hdr[1]);
        count = (size_t)(uint32_t)hdr[2];
        TD_CHECK(n >= LLMC_HEADER_INTS * 4 + count * 2,
                 "--data %s: header says %zu tokens but the file holds %zu", path, count,
                 (n - LLMC_HEADER_INTS * 4) / 2);
        data += LLMC_HEADER_INTS * 4;
    } else {
        TD_CHECK(n % 2 == 0, "--data %s: a raw uint16 token file must have an even size (has %zu bytes)",
                 path, n);
        count = n / 2;
    }
    int *ids = td_alloc(sizeof(int) * count, TD_MEM_OTHER);
    for (size_t i = 0; i < count; i++) {
        ids[i] = data[2 * i] | (data[2 * i + 1] << 8);
        if (ids[i] > *max_id) *max_id = ids[i];
    }
    td_free(buf);
    *out = ids;
    return count;
}

/* The validation file that goes with a training token file, if any. */
static int val_path_for(const char *path, char *out, size_t cap) {
    const char *pairs[][2] = {{"_train.bin", "_val.bin"}, {"train.bin", "val.bin"}};
    for (int i = 0; i < 2; i++) {
        size_t n = strlen(path), m = strlen(pairs[i][0]);
        if (n >= m && strcmp(path + n - m, pairs[i][0]) == 0) {
            snprintf(out, cap, "%.*s%s", (int)(n - m), path, pairs[i][1]);
            struct stat st;
            return stat(out, &st) == 0;
        }
    }
    return 0;
}

static void split_90_10(td_dataset *d, int *ids, size_t n) {
    size_t n_train = n * 9 / 10;
    d->n_train = n_train;
    d->n_val = n - n_train;
    d->train = td_alloc(sizeof(int) * (n_train ? n_train : 1), TD_MEM_OTHER);
    d->val = td_alloc(sizeof(int) * (d->n_val ? d->n_val : 1), TD_MEM_OTHER);
    memcpy(d->train, ids, sizeof(int) * n_train);
    memcpy(d->val, ids + n_train, sizeof(int) * d->n_val);
    td_free(ids);
}

void td_data_load(td_dataset *d, const char *path, const char *tokenizer, int vocab, int T) {
    memset(d, 0, sizeof *d);
    TD_CHECK(path && *path, "--data needs a path to a text file or a .bin token file");
    if (strncmp(path, "synthetic:", 10) == 0) {
        /* uniform random tokens, for benchmarks: synthetic:V */
        int V = atoi(path + 10);
        TD_CHECK(V > 1, "--data %s: use synthetic:V with a vocabulary V > 1", path);
        size_t n = (size_t)1 << 20;
        int *ids = td_alloc(sizeof(int) * n, TD_MEM_OTHER);
        for (size_t i = 0; i < n; i++) ids[i] = (int)(td_rng_u64(7, 99, i) % (uint64_t)V);
        split_90_10(d, ids, n);
        d->tok.kind = TD_TOK_IDS;
        d->tok.V = V;
        snprintf(d->description, sizeof d->description, "synthetic uniform tokens, vocab %d", V);
        return;
    }
    if (ends_with(path, ".bin")) {
        int max_id = -1, *ids;
        size_t n = load_bin(path, &ids, &max_id);
        char vpath[4096];
        if (val_path_for(path, vpath, sizeof vpath)) {
            d->train = ids, d->n_train = n;
            d->n_val = load_bin(vpath, &d->val, &max_id);
            snprintf(d->description, sizeof d->description, "%s + %s (token ids)", path, vpath);
        } else {
            split_90_10(d, ids, n);
            snprintf(d->description, sizeof d->description, "%s (token ids, split 90/10)", path);
        }
        TD_CHECK(vocab <= 0 || max_id < vocab,
                 "--data %s holds token id %d, which does not fit --vocab %d; use --vocab %d or more",
                 path, max_id, vocab, max_id + 1);
        d->tok.kind = TD_TOK_IDS;
        d->tok.V = vocab > 0 ? vocab : max_id + 1;
    } else {
        TD_CHECK(vocab <= 0, "--vocab applies to token files (.bin) only; text files build their own");
        size_t n;
        char *text = read_file(path, &n);
        const char *tk = tokenizer ? tokenizer : "char";
        if (strcmp(tk, "char") == 0) {
            td_tokenizer_build_char(&d->tok, text, n, path);
        } else {
            TD_CHECK(strcmp(tk, "byte") == 0, "--tokenizer %s is not known; use char or byte", tk);
            d->tok.kind = TD_TOK_BYTE;
            d->tok.V = 256;
        }
        int *ids;
        size_t count = td_tokenizer_encode(&d->tok, text, n, &ids);
        td_free(text);
        split_90_10(d, ids, count);
        snprintf(d->description, sizeof d->description, "%s (%s-level, vocab %d, split 90/10)", path,
                 d->tok.kind == TD_TOK_CHAR ? "character" : "byte", d->tok.V);
    }
    TD_CHECK(d->n_train > (size_t)T && d->n_val > (size_t)T,
             "--data %s is too short for --seq %d: the train split has %zu tokens and the val split "
             "%zu, each needs more than %d; use a longer corpus or a smaller --seq",
             path, T, d->n_train, d->n_val, T);
}

void td_data_free(td_dataset *d) {
    td_free(d->train);
    td_free(d->val);
    td_tokenizer_free(&d->tok);
    memset(d, 0, sizeof *d);
}

void td_data_batch(const td_dataset *d, int split, uint64_t seed, int64_t step, int first,
                   int count, int T, int *inputs, int *targets) {
    const int *src = split == 0 ? d->train : d->val;
    size_t n = split == 0 ? d->n_train : d->n_val;
    size_t span = n - (size_t)T; /* start positions with a full target row */
    for (int s = 0; s < count; s++) {
        uint64_t index = ((uint64_t)step << 24) | (uint64_t)(first + s);
        size_t start = (size_t)(td_rng_u64(seed, 0x5A3D1E00ULL + (uint64_t)split, index) % span);
        memcpy(inputs + (size_t)s * T, src + start, sizeof(int) * (size_t)T);
        memcpy(targets + (size_t)s * T, src + start + 1, sizeof(int) * (size_t)T);
    }
}
