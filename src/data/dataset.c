/* Loading a corpus: text files and the token-file formats people have. */
#include <errno.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data_internal.h"
#include "trident/base.h"
#include "trident/bpe.h"
#include "trident/data.h"
#include "trident/files.h"
#include "trident/formats_data.h"
#include "trident/formats_hash.h"
#include "trident/formats_indexed.h"

/* Opens a corpus file; `label` says how errors name it ("--data PATH", or
 * the validation file found beside it). */
static FILE *open_regular(const char *path, const char *label, uint64_t *size) {
    struct stat st;
    const char *why;
    FILE *f = td_fopen_input(path, &st, &why);
    TD_CHECK(f, "%s cannot be read: %s; give a text file or a .bin token file", label, why);
    TD_CHECK(st.st_size > 0, "%s is empty; give a non-empty text file or token file", label);
    *size = (uint64_t)st.st_size;
    return f;
}

static void read_exact(FILE *f, void *buf, size_t n, const char *label) {
    size_t got = fread(buf, 1, n, f);
    TD_CHECK(got == n, "%s: read failed after %zu of %zu bytes (%s)", label, got, n,
             ferror(f) ? strerror(errno) : "the file shrank while it was read");
}

/* Reads a whole file; errors name the file and the reason. */
static char *read_file(const char *path, const char *label, size_t *n) {
    uint64_t size;
    FILE *f = open_regular(path, label, &size);
    char *buf = td_alloc((size_t)size + 1, TD_MEM_OTHER);
    read_exact(f, buf, (size_t)size, label);
    fclose(f);
    *n = (size_t)size;
    return buf;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* PATH.idx when path is PREFIX.bin and that index exists: the .bin is then
 * a Megatron-LM indexed dataset's (formats_indexed.h), not a raw file. */
static int megatron_idx_of(const char *path, char *idx, size_t cap) {
    size_t n = strlen(path);
    if (n < 4 || strcmp(path + n - 4, ".bin") != 0 || n >= cap) return 0;
    snprintf(idx, cap, "%.*s.idx", (int)(n - 4), path);
    struct stat st;
    return stat(idx, &st) == 0;
}

/* The Megatron index of a .bin of bin_size bytes, read whole and checked
 * against it; errors name the index. */
static td_mmidx read_megatron_idx(const char *idx, const char *label, uint64_t bin_size) {
    char ilabel[8600];
    snprintf(ilabel, sizeof ilabel, "%s: its Megatron index %s", label, idx);
    size_t n;
    unsigned char *bytes = (unsigned char *)read_file(idx, ilabel, &n);
    td_mmidx x;
    td_err e;
    TD_CHECK(td_mmidx_parse(bytes, n, bin_size, &x, &e) == 0, "%s: %s", ilabel, e.msg);
    td_free(bytes);
    return x;
}

/* Tokens of one .bin file (llm.c, raw uint16, or a Megatron .bin beside its
 * .idx) into *out; returns the count. The header (or the index) is checked
 * before anything is allocated (src/formats decides the format and checks
 * the sizes), then the tokens are read in chunks so the file's bytes are
 * never held beside its ids. vocab > 0: a uint16 file cannot serve a
 * vocabulary above 65536. */
size_t td_data_load_bin(const char *path, const char *label, int vocab, int **out, int *max_id) {
    uint64_t size;
    FILE *f = open_regular(path, label, &size);
    char idx[4200];
    td_err e;
    uint64_t offset, count64;
    int width;
    const char *what;
    if (megatron_idx_of(path, idx, sizeof idx)) {
        td_mmidx x = read_megatron_idx(idx, label, size);
        offset = 0, count64 = x.tokens, width = x.width;
        what = width == 2 ? "this Megatron dataset (dtype uint16)" : "this Megatron dataset (dtype int32)";
    } else {
        unsigned char head[TD_TOKFILE_PROBE_BYTES];
        size_t head_n = size < sizeof head ? (size_t)size : sizeof head;
        read_exact(f, head, head_n, label);
        td_tokfile tf;
        TD_CHECK(td_tokfile_probe(head, head_n, size, &tf, &e) == 0, "%s: %s", label, e.msg);
        offset = tf.offset, count64 = tf.count, width = tf.width;
        what = tf.kind == TD_TOKFILE_RAW ? "this raw token file" : "this llm.c token file";
    }
    if (vocab > 0) TD_CHECK(td_tokfile_check_width(width, vocab, what, &e) == 0, "%s: %s", label, e.msg);
    size_t count = (size_t)count64;
    int *ids = td_alloc(sizeof(int) * (count ? count : 1), TD_MEM_OTHER);
    enum { CHUNK_TOKENS = 1 << 19 };
    unsigned char *chunk = td_alloc((size_t)width * CHUNK_TOKENS, TD_MEM_OTHER);
    TD_CHECK(fseeko(f, (off_t)offset, SEEK_SET) == 0, "%s: seek failed: %s", label, strerror(errno));
    int mx = -1;
    for (size_t done = 0; done < count;) {
        size_t k = count - done < CHUNK_TOKENS ? count - done : CHUNK_TOKENS;
        int m;
        read_exact(f, chunk, (size_t)width * k, label);
        size_t bad = td_tokfile_decode(chunk, k, width, ids + done, &m);
        TD_CHECK(bad == k, "%s: token %zu is %d as int32 (%u as uint32), not a token id", label, done + bad,
                 ids[done + bad], (unsigned)ids[done + bad]);
        if (m > mx) mx = m;
        done += k;
    }
    td_free(chunk);
    fclose(f);
    *out = ids;
    *max_id = mx;
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

/* A text file as BPE tokens (d->tok: gpt2, cl100k, o200k or a
 * tokenizer.json's): the token a document starts with (<|endoftext|> for
 * the rank files, as `trident tokenize` writes a document; td_bpe_bos),
 * then the text's ordinary encoding, on all threads. */
static size_t encode_bpe(td_dataset *d, const char *text, size_t n, const char *label, int **out) {
    size_t bad;
    td_err e;
    TD_CHECK(td_utf8_check((const unsigned char *)text, n, &bad, &e) == 0,
             "%s: %s; --tokenizer %s reads UTF-8 text (use --tokenizer byte for other bytes)", label,
             e.msg, d->tok.kind == TD_TOK_HF ? d->tok.file : td_tokenizer_name(d->tok.kind));
    int threads = omp_get_max_threads();
    td_bpe_enc **encs = td_alloc(sizeof *encs * (size_t)threads, TD_MEM_OTHER);
    for (int t = 0; t < threads; t++) encs[t] = td_bpe_enc_new(d->tok.bpe);
    int *ids = td_alloc(sizeof(int) * (n + 1), TD_MEM_OTHER), bos = td_bpe_bos(d->tok.bpe);
    size_t count = bos >= 0;
    if (bos >= 0) ids[0] = bos;
    count += td_bpe_encode_threads(encs, threads, (const unsigned char *)text, n, ids + count);
    for (int t = 0; t < threads; t++) td_bpe_enc_free(encs[t]);
    td_free(encs);
    *out = ids;
    return count;
}

/* The tokenizer.json that shards of one were made with: its bytes (XXH3)
 * and vocabulary as their data.json records them. */
static void shards_tokenizer_json(td_dataset *d, const td_data_manifest *man, const char *path) {
    td_tokenizer_hf(&d->tok, path, "--tokenizer");
    char hx[32];
    snprintf(hx, sizeof hx, "hf:%016llx", (unsigned long long)d->tok.file_xxh3);
    TD_CHECK(strcmp(hx, man->tokenizer) == 0 && d->tok.V == man->vocab,
             "--tokenizer %s (XXH3 %s, vocabulary %d) is not the tokenizer.json the shards were made with "
             "(%s says XXH3 %s, vocabulary %d)", path, hx + 3, d->tok.V, d->manifest, man->tokenizer + 3,
             man->vocab);
}

/* Megatron-LM names a dataset by its prefix: PREFIX, when no such file
 * exists but PREFIX.bin and PREFIX.idx do, is read as PREFIX.bin (into
 * buf); any other path is itself. */
static const char *megatron_prefix_bin(const char *path, char *buf, size_t cap) {
    struct stat st;
    char idx[4200];
    if (stat(path, &st) == 0 || strlen(path) + 5 > cap) return path;
    snprintf(buf, cap, "%s.bin", path);
    return megatron_idx_of(buf, idx, sizeof idx) && stat(buf, &st) == 0 ? buf : path;
}

void td_data_load(td_dataset *d, const char *path, const char *tokenizer, int vocab, int T) {
    td_data_blend_spec bs;
    if (!td_data_blend_parse(path, &bs, "--data")) {
        td_data_load_one(d, path, tokenizer, vocab, T);
        return;
    }
    memset(d, 0, sizeof *d);
    td_data_load_blend(d, &bs, tokenizer, vocab, T);
    td_data_blend_spec_free(&bs);
}

/* tokenizer is NULL when the user gave none: text files then use "char",
 * and token files / synthetic data refuse one (their tokens are ids). */
void td_data_load_one(td_dataset *d, const char *path, const char *tokenizer, int vocab, int T) {
    memset(d, 0, sizeof *d);
    TD_CHECK(path && *path, "--data needs a path to a text file or a .bin token file");
    char prefixed[4200];
    path = megatron_prefix_bin(path, prefixed, sizeof prefixed);
    td_err e;
    if (strncmp(path, "synthetic:", 10) == 0) {
        /* uniform random tokens, for benchmarks: synthetic:V */
        int V;
        TD_CHECK(td_synthetic_parse(path, &V, &e) == 0, "--data %s: %s", path, e.msg);
        TD_CHECK(!tokenizer, "--tokenizer %s applies to text files only; --data %s gives token ids; "
                             "drop --tokenizer", tokenizer, path);
        size_t n = (size_t)1 << 20;
        int *ids = td_alloc(sizeof(int) * n, TD_MEM_OTHER);
        for (size_t i = 0; i < n; i++) ids[i] = (int)(td_rng_u64(7, 99, i) % (uint64_t)V);
        split_90_10(d, ids, n);
        d->tok.kind = TD_TOK_IDS;
        d->tok.V = V;
        d->fp.xxh3 = td_xxh3(path, strlen(path)); /* the spec says it all */
        snprintf(d->description, sizeof d->description, "synthetic uniform tokens, vocab %d", V);
        return;
    }
    char label[4200], vlabel[8448];
    snprintf(label, sizeof label, "--data %s", path);
    /* a shard set that `trident tokenize` wrote says how it was tokenized */
    td_data_manifest man;
    int shards = td_data_is_shard_set(path), has_man = 0;
    if (shards || ends_with(path, ".bin")) {
        has_man = td_data_manifest_of(path, &man, d->manifest, sizeof d->manifest);
        const char *base = strrchr(path, '/');
        if (has_man && !shards && !td_data_manifest_find(&man, base ? base + 1 : path)) {
            td_data_manifest_free(&man); /* a file it does not describe */
            has_man = 0;
        }
        if (has_man) tokenizer = td_data_tokenizer_for(&man, d->manifest, tokenizer);
        else d->manifest[0] = 0;
    }
    td_hash_stream *all = td_hash_stream_new();
    TD_CHECK(all, "--data %s: out of memory for its checksum", path);
    /* token files of a BPE's ids (gpt2, cl100k, o200k) may say so: its
     * vocabulary, samples decoded */
    int gpt2 = tokenizer && strcmp(tokenizer, "gpt2") == 0;
    int bpe_kind = td_bpe_kind_parse(tokenizer), bpe = bpe_kind >= 0;
    /* token shards of a tokenizer.json: their data.json names it by XXH3 */
    int hf_ids = has_man && strncmp(man.tokenizer, "hf:", 3) == 0;
    if (hf_ids) vocab = man.vocab;
    if (bpe) {
        int V = td_bpe_kind_vocab((td_bpe_kind)bpe_kind);
        TD_CHECK(vocab <= 0 || vocab == V, "--vocab %d with --tokenizer %s, whose vocabulary is %d; leave "
                 "--vocab out", vocab, tokenizer, V);
        if (vocab <= 0) vocab = V;
    }
    if (shards) {
        TD_CHECK(!tokenizer || bpe || hf_ids, "--tokenizer %s applies to text files only; --data %s is a set of "
                 "token shards; drop --tokenizer, or give gpt2, cl100k or o200k for their ids", tokenizer, path);
        int max_id = td_data_load_shards(d, path, vocab, has_man ? &man : NULL, d->manifest, all);
        if (hf_ids) shards_tokenizer_json(d, &man, tokenizer);
        else if (bpe) td_tokenizer_bpe(&d->tok, tokenizer);
        else d->tok.kind = TD_TOK_IDS, d->tok.V = vocab > 0 ? vocab : max_id + 1;
    } else if (ends_with(path, ".bin")) {
        TD_CHECK(!tokenizer || bpe || hf_ids, "--tokenizer %s applies to text files only; --data %s is a token "
                 "file (.bin) of ids already; drop --tokenizer, or give gpt2, cl100k or o200k for their ids",
                 tokenizer, path);
        int max_train, max_val = -1, *ids;
        uint64_t size, h = td_data_file_hash(path, label, &size, all);
        if (has_man) td_data_shard_check(&man, d->manifest, path, label, size, h);
        size_t n = td_data_load_bin(path, label, vocab, &ids, &max_train);
        char vpath[4096];
        int has_val = val_path_for(path, vpath, sizeof vpath);
        if (has_val) {
            snprintf(vlabel, sizeof vlabel, "--data %s: its validation file %s", path, vpath);
            td_data_file_hash(vpath, vlabel, &size, all);
            d->n_val = td_data_load_bin(vpath, vlabel, vocab, &d->val, &max_val);
        }
        int max_id = max_train > max_val ? max_train : max_val;
        /* each file is checked on its own, so an error names the file that
         * holds the bad id */
        if (vocab > 0) {
            TD_CHECK(td_tokfile_check_ids(ids, n, vocab, &e) == 0, "%s: %s; use --vocab %d or more", label,
                     e.msg, max_id + 1);
            if (has_val)
                TD_CHECK(td_tokfile_check_ids(d->val, d->n_val, vocab, &e) == 0,
                         "%s: %s; use --vocab %d or more", vlabel, e.msg, max_id + 1);
        }
        if (has_val) {
            d->train = ids, d->n_train = n;
            snprintf(d->description, sizeof d->description, "%s + %s (token ids)", path, vpath);
        } else {
            split_90_10(d, ids, n);
            snprintf(d->description, sizeof d->description, "%s (token ids, split 90/10)", path);
        }
        if (hf_ids) shards_tokenizer_json(d, &man, tokenizer);
        else if (bpe) td_tokenizer_bpe(&d->tok, tokenizer);
        else d->tok.kind = TD_TOK_IDS, d->tok.V = vocab > 0 ? vocab : max_id + 1;
    } else {
        const char *tk = tokenizer ? tokenizer : "char";
        int hf = td_tokenizer_is_file(tk);
        TD_CHECK(strcmp(tk, "char") == 0 || strcmp(tk, "byte") == 0 || bpe || hf,
                 "--tokenizer %s is not known; use char, byte, gpt2, cl100k, o200k or a tokenizer.json file", tk);
        TD_CHECK(vocab <= 0 || bpe, "--vocab applies to token files (.bin) only; text files build their own");
        size_t n;
        char *text = read_file(path, label, &n);
        td_hash_stream_add(all, text, n);
        int *ids;
        size_t count;
        if (bpe || hf) {
            if (hf) td_tokenizer_hf(&d->tok, tk, "--tokenizer");
            else td_tokenizer_bpe(&d->tok, tk);
            count = encode_bpe(d, text, n, label, &ids);
        } else {
            if (strcmp(tk, "char") == 0) {
                td_tokenizer_build_char(&d->tok, text, n, label); /* strict UTF-8, errors name the offset */
            } else {
                d->tok.kind = TD_TOK_BYTE; /* any bytes */
                d->tok.V = 256;
            }
            count = td_tokenizer_encode(&d->tok, text, n, &ids);
        }
        td_free(text);
        split_90_10(d, ids, count);
        snprintf(d->description, sizeof d->description, "%s (%s, vocab %d, split 90/10)", path,
                 d->tok.kind == TD_TOK_CHAR ? "character-level" : gpt2 ? "GPT-2 BPE"
                 : hf ? "BPE of the tokenizer.json" : bpe ? td_tokenizer_name(d->tok.kind) : "byte-level",
                 d->tok.V);
    }
    d->fp.xxh3 = td_hash_stream_value(all);
    d->fp.bytes = td_hash_stream_bytes(all);
    td_hash_stream_free(all);
    if (has_man) {
        size_t k = strlen(d->description);
        snprintf(d->description + k, sizeof d->description - k, "; %s from %s, every shard's XXH3 checked",
                 man.tokenizer, d->manifest);
        td_data_manifest_free(&man);
    }
    TD_CHECK(d->n_train > (size_t)T && d->n_val > (size_t)T,
             "--data %s is too short for --seq %d: the train split has %zu tokens and the val split "
             "%zu, each needs more than %d; use a longer corpus or a smaller --seq",
             path, T, d->n_train, d->n_val, T);
}

static int is_tokens_one(const char *path) {
    char prefixed[4200];
    path = megatron_prefix_bin(path, prefixed, sizeof prefixed);
    /* the order of td_data_load's branches */
    return strncmp(path, "synthetic:", 10) == 0 || td_data_is_shard_set(path) || ends_with(path, ".bin");
}

int td_data_is_tokens(const char *path) {
    td_data_blend_spec bs;
    if (!td_data_blend_parse(path, &bs, "--data")) return is_tokens_one(path);
    int tokens = is_tokens_one(bs.path[0]); /* one tokenizer: the first source says */
    td_data_blend_spec_free(&bs);
    return tokens;
}

void td_data_of_tokenizer(td_dataset *d, const td_tokenizer *tok, int T) {
    memset(d, 0, sizeof *d);
    td_tokenizer_copy(&d->tok, tok);
    d->n_train = d->n_val = (size_t)T + 1;
    d->train = td_alloc(sizeof(int) * d->n_train, TD_MEM_OTHER); /* zeroed */
    d->val = td_alloc(sizeof(int) * d->n_val, TD_MEM_OTHER);
    memset(d->train, 0, sizeof(int) * d->n_train);
    memset(d->val, 0, sizeof(int) * d->n_val);
    snprintf(d->description, sizeof d->description, "no data (the %s tokenizer of the checkpoint, vocab %d)",
             tok->kind == TD_TOK_HF ? "tokenizer.json" : td_tokenizer_name(tok->kind), tok->V);
}

void td_data_free(td_dataset *d) {
    td_free(d->train);
    td_free(d->val);
    td_tokenizer_free(&d->tok);
    td_data_blend_free(d->blend);
    memset(d, 0, sizeof *d);
}

void td_data_batch(const td_dataset *d, int split, uint64_t seed, int64_t step, int first,
                   int count, int T, int *inputs, int *targets) {
    if (d->blend) {
        td_data_blend_batch(d, split, seed, step, first, count, T, inputs, targets);
        return;
    }
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
