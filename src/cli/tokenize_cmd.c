/* `trident tokenize`: text files to token shards with a byte-level BPE
 * (gpt2, cl100k or o200k; bpe.h) or a tokenizer.json's. Each input file is
 * a document: <|endoftext|> (a tokenizer.json's document-start token,
 * td_bpe_bos), then its text's ordinary encoding (llm.c's convention; a
 * literal <|endoftext|> inside is text).
 * The documents' tokens, in input order, are split train / val by
 * --val-fraction (the last fraction is val, as `train` splits a text file)
 * and written as NAME_train_000000.bin, ..., NAME_val_000000.bin, ... of at
 * most --shard-tokens tokens each: --format llmc (the default) writes llm.c
 * files (256 int32 header: 20240520, 1, count; then uint16 tokens; uint32
 * under 20240801, 7 for vocabularies above 65536), --format megatron
 * Megatron-LM .bin files of uint16 (int32 above 65536 ids) tokens, each with
 * its .idx (formats_indexed.h) whose sequences are the pieces of documents
 * in that shard (a document cut by a shard or the train/val boundary is a
 * sequence on each side), each its own document in the index. Every format
 * holds the same token stream. Threads encode chunks split where the
 * pattern splits anyway (a tokenizer.json's regexes: pieces cut by one
 * thread, merged by all), so every thread count writes the same bytes.
 * DIR/data.json (formats_data_manifest.h) says what the shards are: the
 * tokenizer, the shard format, the counts, each shard's size and XXH3;
 * `train --data DIR` reads the tokenizer from it and checks every shard
 * against it. */
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "trident/base.h"
#include "trident/bpe.h"
#include "trident/cli.h"
#include "trident/data.h"
#include "trident/files.h"
#include "trident/flags.h"
#include "trident/formats_data.h"
#include "trident/formats_hash.h"

/* Text is encoded in segments of about this size, so progress shows and
 * the int scratch stays small; every segment is split over the threads. */
#define SEGMENT (16u << 20)
/* Inputs from this size on get a progress line on stderr. */
#define PROGRESS_MIN (16u << 20)

/* The ids as int whatever the vocabulary, so that any tokenizer's ids fit
 * (4 bytes a token in memory; the files take 2 where the vocabulary allows). */
typedef struct {
    int *tok;
    size_t n, cap;
} tokens;

static void push(tokens *t, const int *ids, size_t k) {
    if (t->n + k > t->cap) {
        t->cap = (t->n + k) * 3 / 2 + 1024;
        t->tok = realloc(t->tok, t->cap * sizeof *t->tok);
        TD_CHECK(t->tok, "tokenize: out of memory for %zu tokens (4 bytes each)", t->cap);
    }
    memcpy(t->tok + t->n, ids, k * sizeof *ids);
    t->n += k;
}

typedef struct {
    double t0, last, encode_ms;
    uint64_t done, total, ntok;
    int show, tty;
} progress;

static void progress_print(progress *p, int final) {
    double now = td_now_ms();
    if (!p->show || (!final && now - p->last < (p->tty ? 250 : 5000))) return;
    p->last = now;
    double s = (now - p->t0) / 1e3, rate = s > 0 ? p->done / s : 0;
    double eta = rate > 0 ? (p->total - p->done) / rate : 0;
    fprintf(stderr,
            "%stokenize: %6.1f%% %8.1f / %.1f MB  %6.1f MB/s  %6.2f M tokens/s  ETA %4.0f s%s",
            p->tty ? "\r" : "", 100.0 * p->done / (p->total ? p->total : 1), p->done / 1e6,
            p->total / 1e6, rate / 1e6, s > 0 ? p->ntok / s / 1e6 : 0.0, eta,
            p->tty && !final ? "" : "\n");
    fflush(stderr);
}

/* Encodes one input file as a document onto t (it starts at t->n). A
 * tokenizer.json's regexes have no split point known to be safe, so its
 * text is one segment (the scratch grows to hold it). */
static void encode_file(const char *path, const char *tokenizer, td_bpe_enc **encs, int threads,
                        tokens *t, progress *p, int **scratch) {
    struct stat st;
    const char *why;
    int fd = td_open_input(path, &st, &why);
    TD_CHECK(fd >= 0, "tokenize: input %s: %s; give text files", path, why);
    size_t n = (size_t)st.st_size;
    const unsigned char *s = NULL;
    if (n) {
        s = mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0);
        TD_CHECK(s != MAP_FAILED, "tokenize: input %s cannot be read: %s", path, strerror(errno));
    }
    close(fd);
    size_t bad;
    td_err e;
    TD_CHECK(td_utf8_check(s, n, &bad, &e) == 0, "tokenize: input %s: %s; %s reads UTF-8 text",
             path, e.msg, tokenizer);
    const td_bpe *bpe = td_bpe_enc_tables(encs[0]);
    int bos = td_bpe_bos(bpe), whole = td_bpe_has_regex(bpe);
    if (bos >= 0) push(t, &bos, 1);
    if (whole && n > SEGMENT + (1u << 20)) {
        free(*scratch);
        TD_CHECK((*scratch = malloc(sizeof(int) * n)), "tokenize: out of memory for %zu tokens", n);
    }
    for (size_t a = 0; a < n;) {
        size_t b = n - a <= SEGMENT || whole ? n : td_bpe_split_point(bpe, s, n, a + SEGMENT);
        double t0 = td_now_ms();
        size_t k = td_bpe_encode_threads(encs, threads, s + a, b - a, *scratch);
        p->encode_ms += td_now_ms() - t0;
        push(t, *scratch, k);
        p->done += b - a, p->ntok += k;
        progress_print(p, 0);
        a = b;
    }
    if (n) munmap((void *)s, n);
}

/* The documents of the whole stream: doc[0..ndoc) are where each starts. */
typedef struct {
    const size_t *start;
    int n;
} documents;

/* Writes tok[first..first+n) of the stream, split s, as shards
 * NAME_SPLIT_%06d.bin (Megatron: each with its .idx, a sequence per piece of
 * a document in the shard), each one's entry (size, tokens, XXH3 of its
 * bytes) appended to man. Returns 0, or -1 with the failed file in failed
 * and errno in *err (nothing of it left; the shards written before it are
 * in man, for the caller to remove). */
static int write_shards(const char *dir, const char *name, int s, const int *tok, size_t first, size_t n,
                        size_t per, const documents *docs, td_data_manifest *man, char *failed, size_t cap,
                        int *err) {
    static const char *const split[2] = {"train", "val"};
    size_t *seq = malloc(sizeof(size_t) * ((size_t)docs->n + 1));
    TD_CHECK(seq, "tokenize: out of memory");
    for (size_t at = 0; at < n; at += per) {
        size_t m = n - at < per ? n - at : per, a = first + at, nseq = 0;
        /* a shard starts a sequence, and so does each document starting in it */
        seq[nseq++] = 0;
        for (int d = 0; d < docs->n; d++)
            if (docs->start[d] > a && docs->start[d] < a + m) seq[nseq++] = docs->start[d] - a;
        char path[4400];
        snprintf(path, sizeof path, "%s/%s_%s_%06d.bin", dir, name, split[s], man->split_shards[s]);
        uint64_t size, h;
        if (td_token_file_write(path, man->megatron ? TD_TOKFMT_MEGATRON : TD_TOKFMT_LLMC, man->vocab, tok + a, m,
                                seq, nseq, &size, &h, err) != 0) {
            snprintf(failed, cap, "%s", path);
            free(seq);
            return -1;
        }
        td_dm_shard *x = &man->shards[man->n_shards++];
        x->name = strdup(strrchr(path, '/') + 1);
        TD_CHECK(x->name, "tokenize: out of memory");
        x->split = s, x->size = size, x->tokens = m, x->xxh3 = h;
        man->split_shards[s]++;
        man->split_tokens[s] += m;
    }
    free(seq);
    return 0;
}

/* A refused write leaves nothing behind: the shards written so far (and
 * their indexes), and --out when this run created it. */
static void remove_written(const char *dir, const td_data_manifest *man, int made_dir) {
    char p[4400];
    for (int i = 0; i < man->n_shards; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, man->shards[i].name);
        unlink(p);
        if (man->megatron) {
            snprintf(p, sizeof p, "%s/%.*s.idx", dir, (int)strlen(man->shards[i].name) - 4, man->shards[i].name);
            unlink(p);
        }
    }
    if (made_dir) rmdir(dir);
}

int td_tokenize_main(int argc, char **argv) {
    const char *tokenizer = NULL, *out = NULL, *name = NULL, *format = "llmc";
    int shard_tokens = 100000000, threads = 0;
    double val_fraction = 0.1;
    const td_flag flags[] = {
        {"--tokenizer", TD_FLAG_STR, &tokenizer,
         "gpt2, cl100k, o200k (GPT-2's byte-level BPE, tiktoken's cl100k_base or o200k_base) or FILE.json (a "
         "Hugging Face tokenizer.json, byte-level BPE); required", NULL},
        {"--out", TD_FLAG_STR, &out,
         "directory for the shards (created if missing; its parent must exist)", NULL},
        {"--name", TD_FLAG_STR, &name,
         "shard name prefix (default: the first input's name without extension)", NULL},
        {"--shard-tokens", TD_FLAG_INT, &shard_tokens, "tokens per shard (100000000)",
         "[1, 2147483647]"},
        {"--val-fraction", TD_FLAG_DOUBLE, &val_fraction,
         "last fraction of the tokens for validation (0.1)", "[0, 1)"},
        {"--threads", TD_FLAG_INT, &threads, "encoding threads, 0 = one per core (0)", "[0, 256]"},
        {"--format", TD_FLAG_STR, &format,
         "shard files: llmc (llm.c .bin, uint16; uint32 above 65536 ids) or megatron (Megatron-LM .bin + .idx, "
         "uint16; int32 above 65536 ids) (llmc)",
         NULL},
    };
    int nflags = (int)(sizeof flags / sizeof flags[0]);
    /* IN... are the arguments that are neither flags nor their values */
    char **fargv = malloc(sizeof(char *) * (size_t)(argc + 1)),
         **in = malloc(sizeof(char *) * (size_t)(argc + 1));
    int fargc = 0, nin = 0;
    for (int i = 0; i < argc; i++) {
        if (strncmp(argv[i], "--", 2) != 0 && strcmp(argv[i], "-h") != 0) {
            in[nin++] = argv[i];
            continue;
        }
        fargv[fargc++] = argv[i];
        for (int k = 0; k < nflags; k++)
            if (strcmp(argv[i], flags[k].name) == 0 && flags[k].type != TD_FLAG_BOOL &&
                i + 1 < argc)
                fargv[fargc++] = argv[++i];
    }
    for (int i = 0; i < fargc; i++)
        if (strcmp(fargv[i], "--help") == 0 || strcmp(fargv[i], "-h") == 0) {
            /* the inputs are positional, so the usage line names them */
            printf("usage: trident tokenize --tokenizer gpt2|cl100k|o200k|FILE.json IN... --out DIR [flags]\n"
                   "  IN...                  text files (UTF-8), each one document (<|endoftext|>, then its "
                   "text), in the order given; at least one\n");
            td_flags_print_table(flags, nflags);
            exit(0);
        }
    td_flags_parse("tokenize", flags, nflags, fargc, fargv);
    TD_CHECK(tokenizer, "tokenize: --tokenizer is required; valid: gpt2, cl100k, o200k or a tokenizer.json file");
    int hf = td_tokenizer_is_file(tokenizer);
    TD_CHECK(td_bpe_kind_parse(tokenizer) >= 0 || hf,
             "tokenize --tokenizer %s is not known; valid: gpt2, cl100k, o200k or a tokenizer.json file", tokenizer);
    TD_CHECK(strcmp(format, "llmc") == 0 || strcmp(format, "megatron") == 0,
             "tokenize --format %s is not known; valid: llmc, megatron", format);
    TD_CHECK(nin > 0,
             "tokenize: no input files; usage: trident tokenize --tokenizer gpt2 IN... --out DIR");
    TD_CHECK(out, "tokenize: --out DIR is required (the directory for the shards)");
    for (int i = 0; i < nin; i++) {
        struct stat st;
        TD_CHECK(stat(in[i], &st) == 0, "tokenize: input %s: %s", in[i], strerror(errno));
        TD_CHECK(S_ISREG(st.st_mode), "tokenize: input %s is %s, not a regular file; give text files",
                 in[i], td_file_kind(st.st_mode));
    }
    char base[256];
    if (!name) {
        const char *b = strrchr(in[0], '/');
        b = b ? b + 1 : in[0];
        snprintf(base, sizeof base, "%s", b);
        char *dot = strrchr(base, '.');
        if (dot && dot != base) *dot = '\0';
        name = base;
    }
    TD_CHECK(*name && !strchr(name, '/'),
             "tokenize --name '%s': give a file name prefix without '/'", name);
    /* --out is created only once there is something to write (a refused
     * run leaves no directory behind); its parent is checked now */
    struct stat st;
    int made_dir = stat(out, &st) != 0, out_errno = errno;
    if (made_dir) {
        char parent[4096];
        const char *slash = strrchr(out, '/');
        snprintf(parent, sizeof parent, "%.*s", slash ? (int)(slash - out) : 1, slash ? out : ".");
        if (slash == out) snprintf(parent, sizeof parent, "/");
        struct stat ps;
        TD_CHECK(out_errno == ENOENT && stat(parent, &ps) == 0 && S_ISDIR(ps.st_mode),
                 "tokenize --out %s: cannot create it: %s (its parent must exist)", out,
                 out_errno == ENOENT ? "its parent is not a directory" : strerror(out_errno));
    } else {
        TD_CHECK(S_ISDIR(st.st_mode), "tokenize --out %s is %s, not a directory", out,
                 S_ISREG(st.st_mode) ? "an existing file" : td_file_kind(st.st_mode));
    }
    /* a directory holds one shard set, which its data.json describes; stale
     * shards of an earlier run would be read by `train --data DIR` */
    char pattern[4400];
    snprintf(pattern, sizeof pattern, "%s/*.bin", out);
    glob_t g;
    int old = !made_dir && glob(pattern, 0, NULL, &g) == 0 ? (int)g.gl_pathc : 0;
    TD_CHECK(old == 0,
             "tokenize --out %s already holds %d shard(s) (e.g. %s); a directory holds one shard set: "
             "remove them or choose another --out",
             out, old, old ? g.gl_pathv[0] : "");
    if (!made_dir) globfree(&g);

    td_tokenizer tk;
    if (hf) td_tokenizer_hf(&tk, tokenizer, "tokenize --tokenizer");
    else td_tokenizer_bpe(&tk, tokenizer);
    const td_bpe *bpe = tk.bpe;
    if (threads == 0) threads = omp_get_num_procs();
    td_bpe_enc **encs = malloc(sizeof *encs * (size_t)threads);
    for (int t = 0; t < threads; t++) encs[t] = td_bpe_enc_new(bpe);
    int *scratch = malloc(sizeof(int) * (SEGMENT + (1u << 20)));
    TD_CHECK(encs && scratch, "tokenize: out of memory");
    progress p = {.t0 = td_now_ms(), .tty = isatty(2)};
    for (int i = 0; i < nin; i++) {
        stat(in[i], &st);
        p.total += (uint64_t)st.st_size;
    }
    p.show = p.total >= PROGRESS_MIN;
    p.last = p.t0;
    tokens t = {0};
    size_t *doc_start = malloc(sizeof(size_t) * (size_t)nin);
    TD_CHECK(doc_start, "tokenize: out of memory");
    for (int i = 0; i < nin; i++) {
        doc_start[i] = t.n;
        encode_file(in[i], tokenizer, encs, threads, &t, &p, &scratch);
    }
    progress_print(&p, 1);
    TD_CHECK(p.total > 0, "tokenize: %s empty; give text to tokenize",
             nin == 1 ? "the input is" : "every input is");

    /* n_train = floor(n (1 - F)) in integers (F to a millionth), so F = 0.1
     * splits exactly as `train` splits a text file (n * 9 / 10) */
    unsigned long long ppm = (unsigned long long)(val_fraction * 1e6 + 0.5);
    size_t n_train = (size_t)((unsigned __int128)t.n * (1000000 - ppm) / 1000000);
    TD_CHECK(n_train > 0, "tokenize --val-fraction %g leaves no training tokens of the %zu; give more text or a "
             "smaller --val-fraction", val_fraction, t.n);
    td_data_manifest man = {.vocab = tk.V, .megatron = strcmp(format, "megatron") == 0, .tokens = t.n,
                            .documents = (uint64_t)nin};
    /* a tokenizer.json by its checksum: its path may differ where it is read */
    if (hf) snprintf(man.tokenizer, sizeof man.tokenizer, "hf:%016llx", (unsigned long long)tk.file_xxh3);
    else snprintf(man.tokenizer, sizeof man.tokenizer, "%s", tokenizer);
    for (int i = 0; i < nin; i++) man.split_documents[doc_start[i] >= n_train]++;
    size_t per = (size_t)shard_tokens, nshards = (n_train + per - 1) / per + (t.n - n_train + per - 1) / per;
    man.shards = calloc(nshards, sizeof *man.shards);
    TD_CHECK(man.shards, "tokenize: out of memory");
    TD_CHECK(!made_dir || mkdir(out, 0777) == 0, "tokenize --out %s: cannot create it: %s", out, strerror(errno));
    char failed[4400];
    int err = 0;
    documents docs = {doc_start, nin};
    if (write_shards(out, name, 0, t.tok, 0, n_train, per, &docs, &man, failed, sizeof failed, &err) != 0 ||
        write_shards(out, name, 1, t.tok, n_train, t.n - n_train, per, &docs, &man, failed, sizeof failed, &err) != 0 ||
        (snprintf(failed, sizeof failed, "%s/%s", out, TD_DATA_MANIFEST_NAME),
         td_data_manifest_write(out, &man, &err) != 0)) {
        remove_written(out, &man, made_dir);
        TD_CHECK(0, "tokenize --out %s: writing %s failed: %s%s", out, failed, strerror(err),
                 made_dir ? " (nothing is left of the run)" : " (the shards written are removed)");
    }
    int ktrain = man.split_shards[0], kval = man.split_shards[1];
    double secs = (td_now_ms() - p.t0) / 1e3, enc_s = p.encode_ms / 1e3;
    printf(
        "tokenize: %d file(s), %llu bytes -> %zu tokens (train %zu in %d shard(s), val %zu in %d) "
        "in %s/%s_*.bin, described by %s/%s\n",
        nin, (unsigned long long)p.total, t.n, n_train, ktrain, t.n - n_train, kval, out, name, out,
        TD_DATA_MANIFEST_NAME);
    printf("tokenize: encoding %.2f MB/s, %.2f M tokens/s at %d thread(s) (%.3f s); whole run %.3f "
           "s\n",
           enc_s > 0 ? p.total / 1e6 / enc_s : 0.0, enc_s > 0 ? t.n / 1e6 / enc_s : 0.0, threads,
           enc_s, secs);
    for (int i = 0; i < threads; i++) td_bpe_enc_free(encs[i]);
    free(encs), free(scratch), td_tokenizer_free(&tk), free(t.tok), free(fargv), free(in), free(doc_start);
    td_data_manifest_free(&man);
    return 0;
}
