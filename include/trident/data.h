/* data: tokenizers (char, byte, GPT-2 BPE, a tokenizer.json's BPE), token
 * files (nanoGPT raw uint16 .bin, llm.c .bin with its 256-int32 header,
 * Megatron-LM .bin + .idx; read and written) and the deterministic global
 * sampler. */
#ifndef TRIDENT_DATA_H
#define TRIDENT_DATA_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "trident/formats_data_manifest.h"

#ifdef __cplusplus
extern "C" {
#endif

/* gpt2, cl100k and o200k are the byte-level BPE tokenizers of rank files
 * (bpe.h); hf is a Hugging Face tokenizer.json's byte-level BPE */
typedef enum {
    TD_TOK_CHAR = 0,
    TD_TOK_BYTE = 1,
    TD_TOK_IDS = 2,
    TD_TOK_GPT2 = 3,
    TD_TOK_CL100K = 4,
    TD_TOK_O200K = 5,
    TD_TOK_HF = 6
} td_tokenizer_kind;
#define TD_TOK_KINDS 7

struct td_bpe;
typedef struct {
    td_tokenizer_kind kind;
    int V;               /* vocabulary size */
    uint32_t *chars;     /* [V] code points (char tokenizer only, sorted) */
    const struct td_bpe *bpe; /* the BPE tables (gpt2, cl100k, o200k: shared, never freed; hf: own) */
    char *file;          /* hf: the tokenizer.json as given (td_alloc'd) */
    uint64_t file_xxh3;  /* hf: the XXH3-64 of its bytes */
} td_tokenizer;

const char *td_tokenizer_name(td_tokenizer_kind k);
/* Char vocabulary = the sorted distinct code points of strict UTF-8 text;
 * `what` prefixes errors (e.g. "--data PATH"). Sets every field of tk. */
void td_tokenizer_build_char(td_tokenizer *tk, const char *text, size_t n, const char *what);
/* GPT-2's byte-level BPE (vocabulary 50257; src/data/bpe.c), its tables
 * loaded from td_bpe_path() (a missing or corrupt file is an error). */
void td_tokenizer_gpt2(td_tokenizer *tk);
/* Whether --tokenizer NAME names a tokenizer.json file (it ends in .json). */
int td_tokenizer_is_file(const char *name);
/* A Hugging Face tokenizer.json of the byte-level BPE kind (bpe.h's
 * td_bpe_load_hf; vocabulary = its largest id + 1). Any problem with the
 * file is one error line naming `flag` (e.g. "--tokenizer"), the path and
 * the field. */
void td_tokenizer_hf(td_tokenizer *tk, const char *path, const char *flag);
/* The byte-level BPE tokenizer `name` names (gpt2, cl100k, o200k) into tk;
 * returns 0, or -1 (tk untouched) for a name that is none of them. */
int td_tokenizer_bpe(td_tokenizer *tk, const char *name);
/* Whether kind is one of the byte-level BPE tokenizers, and the kind of the
 * tokenizer name (-1: not a BPE tokenizer's name). */
int td_tokenizer_is_bpe(td_tokenizer_kind kind);
int td_tokenizer_bpe_kind(const char *name);
/* Whether tk->bpe encodes and decodes for kind: a rank file's BPE or a
 * tokenizer.json's (hf). */
int td_tokenizer_has_bpe(td_tokenizer_kind kind);
/* Encode UTF-8 text; unknown characters are a user error naming them
 * (gpt2, hf: text that is not UTF-8 is an error giving the byte offset; the
 * encoding is ordinary, a literal <|endoftext|> is text). Returns the token
 * count; *out is td_alloc'd. */
size_t td_tokenizer_encode(const td_tokenizer *tk, const char *text, size_t n, int **out);
/* Decode one token into buf (ids print as "<123>"): UTF-8, except that a
 * gpt2 or hf token may hold part of a character (print through td_utf8_out).
 * cap >= 256 holds any token. Returns the length. */
int td_tokenizer_decode(const td_tokenizer *tk, int token, char *buf, int cap);
void td_tokenizer_free(td_tokenizer *tk);
/* dst (uninitialized) becomes a tokenizer equal to src, its own to free: a
 * char vocabulary copied, a BPE's tables looked up again, a tokenizer.json
 * read again (its XXH3 checked against src's). */
void td_tokenizer_copy(td_tokenizer *dst, const td_tokenizer *src);

/* Printing decoded tokens as valid UTF-8: bytes of a character split across
 * tokens are held until it is complete; bytes that cannot start or continue
 * one print as U+FFFD. Flush at the end (an unfinished character: U+FFFD). */
typedef struct {
    unsigned char held[4];
    int n;
} td_utf8_out;
void td_utf8_out_write(td_utf8_out *u, const char *bytes, int n, FILE *out);
void td_utf8_out_flush(td_utf8_out *u, FILE *out);

/* What a run's data is, so that a resume can tell other data from its own:
 * the XXH3-64 of the data's bytes, its files concatenated in load order (a
 * text file; a token file, then its val file; a shard set's training, then
 * its validation shards, each in name order), and their total size.
 * synthetic:V: the XXH3 of that text, 0 bytes. */
typedef struct {
    uint64_t bytes, xxh3;
} td_data_fingerprint;

struct td_data_blend;
typedef struct {
    td_tokenizer tok;
    int *train, *val;    /* token ids (a blend: its sources' splits one after another) */
    size_t n_train, n_val;
    char description[8448]; /* fits two full paths */
    td_data_fingerprint fp; /* what the data is (a checkpoint records it) */
    char manifest[4200];    /* the data.json the shards were checked against ("": none) */
    struct td_data_blend *blend; /* --data W:PATH,...: the sources and their weights; NULL: one source */
} td_dataset;

/* Loads PATH: a UTF-8 text file (tokenizer "char" or "byte", split 90/10),
 * a nanoGPT train.bin (raw uint16, val.bin beside it), an llm.c .bin
 * (magic 20240520 uint16 or 20240801 uint32; *_train.bin with *_val.bin
 * beside it) or a Megatron-LM .bin with its .idx beside it, or their
 * PREFIX as Megatron names them (formats_indexed.h; its sequences
 * concatenated in index order); a token
 * file without a val file beside it is split 90/10. A uint16 file for a
 * vocab above 65536 is an error. vocab > 0 fixes V for token
 * files (else max id + 1). Every failure is one clear error. T is checked
 * against both splits (each must hold one sequence plus its target).
 * "synthetic:V" gives 2^20 uniform random tokens (for benchmarks).
 * tokenizer NULL means the user gave none: "char" for text; token files and
 * synthetic data refuse a tokenizer. The bytes are parsed by src/formats
 * (formats_data.h): llm.c-looking headers with a wrong magic or version are
 * refused, an id >= vocab names the file that holds it, text is strict
 * UTF-8 (errors give the byte offset). A shard set (or .bin file) with a
 * data.json (td_data_manifest_of) takes its tokenizer from it (a
 * contradicting tokenizer is an error naming both) and every shard is
 * checked against it as it loads: listed, its size and its XXH3 (an error
 * naming the shard); a directory must hold exactly the shards listed.
 * d->fp is the data's fingerprint. PATH may be a blend, W:PATH,W:PATH,...
 * (td_data_blend_parse below): each source loaded as above, all of one
 * tokenizer (else one error naming the two sources and, for character-level
 * texts, the characters each has that the other lacks), d->fp that of the
 * sources in order (not of the weights). */
void td_data_load(td_dataset *d, const char *path, const char *tokenizer, int vocab, int T);
void td_data_free(td_dataset *d);
/* A dataset of no text, for a run that reads none (eval --task without
 * --data: its examples bring their own text): a copy of tok, and train and
 * val splits of T + 1 tokens of id 0 each, so that the run opens as it does
 * on data; its fingerprint is zero. */
void td_data_of_tokenizer(td_dataset *d, const td_tokenizer *tok, int T);
/* Blended data: --data W:PATH,W:PATH,... (each PATH a source td_data_load
 * reads; W a positive number, the weights normalized to sum 1). A part is
 * weighted when what precedes its first colon reads as a number, so
 * synthetic:V and paths holding colons stay paths; a bare PATH is one source
 * only when alone. */
typedef struct {
    int n;          /* sources (0: arg is one plain source) */
    double *weight; /* [n] normalized */
    char **path;    /* [n] */
    char *buf;      /* owns the paths */
} td_data_blend_spec;
/* Returns 0 (s->n = 0, nothing to free) when arg is one plain source, 1 for
 * a blend (free with td_data_blend_spec_free). A malformed blend (a weight
 * <= 0 or not finite, a part without a weight, an empty path) is one error
 * naming `flag`, the part and what is valid. No I/O. */
int td_data_blend_parse(const char *arg, td_data_blend_spec *s, const char *flag);
void td_data_blend_spec_free(td_data_blend_spec *s);
/* The samples of a blend: sample g of the run (g = step * batch + the
 * sample's place in the global batch) comes from the source whose count of
 * samples before g is furthest below weight * (g + 1), the first such
 * (Megatron-LM's BlendedDataset, greedy), and is that source's next
 * sample, drawn as a run on that source alone with the same seed and batch
 * would draw its sample of that number. So every sample is a function of
 * (seed, weights, batch, g): a resume at step s goes on from g = s * batch.
 * The counts are replayed from 0 (O(g x sources), once per split; then one
 * step further per sample). td_data_set_batch gives a blend its global
 * batch (sequences per step) before the first td_data_batch; one source
 * ignores it. */
void td_data_set_batch(td_dataset *d, int batch);
/* Sources of d (0: one plain source), each one's path as given and its
 * normalized weight. */
int td_data_sources(const td_dataset *d);
const char *td_data_source_path(const td_dataset *d, int s);
double td_data_source_weight(const td_dataset *d, int s);
/* counts[s]: how many of the first `samples` samples of split (0 train,
 * 1 val) source s gives (the greedy rule above). No communication. */
void td_data_source_counts(const td_dataset *d, int split, int64_t samples, int64_t *counts);

/* Whether td_data_load reads PATH as token ids (synthetic:V, a .bin token
 * file, a set of shards) rather than as a text file. */
int td_data_is_tokens(const char *path);

/* The manifest (data.json, formats_data_manifest.h) that `trident tokenize`
 * wrote for --data PATH: a shard directory's own, or the one in the
 * directory of a pattern (DIR/NAME_*.bin) or of a .bin file. Returns 1 with
 * m filled (free it with td_data_manifest_free) and its path in json; 0
 * when there is none (older shard sets, nanoGPT / llm.c files, text). One
 * that cannot be read or parsed is an error naming it. It reads data.json
 * only: td_data_load checks each shard's size and XXH3 against it as the
 * shard loads (an error naming the shard). No communication. */
int td_data_manifest_of(const char *path, td_data_manifest *m, char *json, size_t cap);
/* The tokenizer to use for data described by manifest m (at json):
 * tokenizer (the user's --tokenizer, NULL: none) must agree with it, else
 * one error naming both; a tokenizer this build cannot read shards of is an
 * error. Returns a static name ("gpt2"), or for shards of a tokenizer.json
 * the user's FILE.json (required; td_data_load checks its XXH3 against the
 * manifest's). td_data_load applies this rule;
 * commands that load data themselves (eval) call it to do the same. */
const char *td_data_tokenizer_for(const td_data_manifest *m, const char *json, const char *tokenizer);

/* The global sampler: sequence `sample` of the global batch at `step` starts
 * at a position that depends only on (seed, split, step, sample), so every
 * layout sees the same global batch. Fills inputs/targets [count, T] for
 * samples first .. first+count-1. split: 0 train, 1 val. */
void td_data_batch(const td_dataset *d, int split, uint64_t seed, int64_t step, int first,
                   int count, int T, int *inputs, int *targets);

/* Writing token files, for `trident tokenize` and any tokenizer: ids (each
 * in [0, vocab)) and a vocabulary size in, one file out. llm.c: the 256
 * int32 header, then uint16 tokens (magic 20240520, version 1) for a
 * vocabulary up to 65536, uint32 (magic 20240801, version 7) above.
 * Megatron: PATH (a .bin) of uint16 or int32 tokens by the same rule, and
 * its PREFIX.idx (formats_indexed.h) whose sequences start at
 * seq_starts[0..nseq) (0 first, rising, below n), each sequence one
 * document. Every file goes to a temporary renamed into place. Returns 0
 * with the .bin's *size and the XXH3 of its bytes, or -1 with errno in *err
 * (nothing of the file is left; EOVERFLOW: a sequence above 2^31 - 1 tokens). */
typedef enum { TD_TOKFMT_LLMC = 0, TD_TOKFMT_MEGATRON = 1 } td_token_format;
int td_token_file_write(const char *path, td_token_format fmt, int vocab, const int *ids, size_t n,
                        const size_t *seq_starts, size_t nseq, uint64_t *size, uint64_t *xxh3, int *err);

/* DIR/data.json (formats_data_manifest.h) written atomically (a temporary
 * file renamed into place); -1 with *err an errno when it could not be (no
 * temporary is left). `trident tokenize` writes it beside its shards. */
int td_data_manifest_write(const char *dir, const td_data_manifest *m, int *err);

#ifdef __cplusplus
}
#endif

#endif
