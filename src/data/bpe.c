/* Byte-level BPE (GPT-2's, cl100k_base's, o200k_base's, a tokenizer.json's):
 * the tables and the merge (the hand-written patterns are in bpe_pretok.c
 * and bpe_pretok_tiktoken.c, a tokenizer.json's regexes in bpe_regex.c).
 * Two hash tables make the merge fast: the tokens by their bytes (a piece
 * that is a whole token, the common case, costs one probe), and the pairs of
 * tokens that merge, by the pair of ids, with their priority and the token
 * they make (so a merge step never joins bytes). A rank file's pairs are
 * every split of a token into two tokens, priority and result its rank
 * (tiktoken); a tokenizer.json's are its merges list (bpe_hfjson.c). Each
 * encoder keeps a cache of the pieces it has merged, as the reference
 * implementations do. */
#include <errno.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bpe_internal.h"
#include "trident/base.h"
#include "trident/bpe.h"
#include "trident/files.h"
#include "trident/formats_bpe.h"
#include "trident/formats_data.h"

#ifndef TD_BPE_DATA_DIR
#define TD_BPE_DATA_DIR "data"
#endif

struct td_bpe {
    unsigned char *bytes; /* the file; f points into it */
    td_bpe_file f;
    int max_len;        /* the longest token, in bytes */
    uint32_t *tok_slot; /* [tok_mask + 1] ranks by bytes; UINT32_MAX = empty */
    uint32_t tok_mask;
    uint64_t *pair_key;  /* [pair_mask + 1] (left << 32 | right); UINT64_MAX = empty */
    uint32_t *pair_rank; /* the pair's merge priority (lower merges first) */
    uint32_t *pair_tok;  /* the token it makes (a rank file: pair_rank itself) */
    uint32_t pair_mask;
    int vocab, eot, bos;
    int whole_piece;      /* a piece that is a token as a whole is that token */
    td_bpe_regex *regex;  /* a tokenizer.json's pre-tokenizer; NULL: a hand-written pattern */
    unsigned char *hashed; /* [n_ranks] 0 for ids the token table leaves out (NULL: none) */
    td_bpe_kind kind;                                          /* whose pattern (rank files) */
    size_t (*pretok)(const unsigned char *, size_t, size_t); /* that pattern */
};

/* ---- hashing ------------------------------------------------------------ */

static inline uint64_t load_le(const unsigned char *p, size_t k) {
    uint64_t w = 0;
    memcpy(&w, p, k); /* little-endian hosts: the bytes in order */
    return w;
}

/* A fast hash of short byte strings: 8 bytes per multiply. */
static inline uint64_t hash_bytes(const unsigned char *p, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (n * 0xFF51AFD7ED558CCDULL);
    for (; n >= 8; p += 8, n -= 8) h = (h ^ load_le(p, 8)) * 0xC4CEB9FE1A85EC53ULL, h ^= h >> 29;
    if (n) h = (h ^ load_le(p, n)) * 0xC4CEB9FE1A85EC53ULL;
    return h ^ (h >> 32);
}

static inline uint64_t hash_pair(uint64_t key) {
    key *= 0x9E3779B97F4A7C15ULL;
    return key ^ (key >> 31);
}

static size_t pow2_at_least(size_t n) {
    size_t c = 1;
    while (c < n) c <<= 1;
    return c;
}

static inline const unsigned char *tok_bytes(const td_bpe *b, uint32_t r, size_t *len) {
    *len = b->f.offset[r + 1] - b->f.offset[r];
    return b->f.data + b->f.offset[r];
}

/* The rank of the token with bytes p[0..n), or UINT32_MAX. */
static inline uint32_t find_token(const td_bpe *b, const unsigned char *p, size_t n) {
    if (n > (size_t)b->max_len) return UINT32_MAX;
    for (size_t i = hash_bytes(p, n) & b->tok_mask;; i = (i + 1) & b->tok_mask) {
        uint32_t r = b->tok_slot[i];
        if (r == UINT32_MAX) return r;
        size_t len;
        const unsigned char *t = tok_bytes(b, r, &len);
        if (len == n && memcmp(t, p, n) == 0) return r;
    }
}

/* The priority of merging tokens x and y (UINT32_MAX: they do not merge),
 * and in *joined the token they make. */
static inline uint32_t find_pair(const td_bpe *b, uint32_t x, uint32_t y, uint32_t *joined) {
    uint64_t key = (uint64_t)x << 32 | y;
    for (size_t i = hash_pair(key) & b->pair_mask;; i = (i + 1) & b->pair_mask) {
        if (b->pair_key[i] == key) return *joined = b->pair_tok[i], b->pair_rank[i];
        if (b->pair_key[i] == UINT64_MAX) return UINT32_MAX;
    }
}

/* Adds pair (x, y) -> joined at priority `rank`; -1 if it is there already. */
static int add_pair(td_bpe *b, uint32_t x, uint32_t y, uint32_t rank, uint32_t joined) {
    uint64_t key = (uint64_t)x << 32 | y;
    size_t i = hash_pair(key) & b->pair_mask;
    for (; b->pair_key[i] != UINT64_MAX; i = (i + 1) & b->pair_mask)
        if (b->pair_key[i] == key) return -1;
    b->pair_key[i] = key;
    b->pair_rank[i] = rank;
    if (b->pair_tok != b->pair_rank) b->pair_tok[i] = joined;
    return 0;
}

/* ---- loading ------------------------------------------------------------ */

/* The token table (ids whose `hashed` entry is 0 left out) and room for
 * `pairs` pairs; pair_tok separate when `own_results`. */
static int build_tables(td_bpe *b, size_t pairs, int own_results, td_err *e) {
    const td_bpe_file *f = &b->f;
    size_t cap = pow2_at_least(2 * (size_t)f->n_ranks);
    b->tok_mask = (uint32_t)(cap - 1);
    b->tok_slot = malloc(cap * sizeof *b->tok_slot);
    if (!b->tok_slot) return td_err_set(e, "out of memory for the token table");
    memset(b->tok_slot, 0xFF, cap * sizeof *b->tok_slot);
    for (uint32_t r = 0; r < f->n_ranks; r++) {
        size_t len;
        const unsigned char *t = tok_bytes(b, r, &len);
        if (b->hashed && !b->hashed[r]) continue;
        if ((int)len > b->max_len) b->max_len = (int)len;
        size_t i = hash_bytes(t, len) & b->tok_mask;
        while (b->tok_slot[i] != UINT32_MAX) i = (i + 1) & b->tok_mask;
        b->tok_slot[i] = r; /* the parsers have refused duplicates */
    }
    cap = pow2_at_least(2 * pairs + 2);
    b->pair_mask = (uint32_t)(cap - 1);
    b->pair_key = malloc(cap * sizeof *b->pair_key);
    b->pair_rank = malloc(cap * sizeof *b->pair_rank);
    b->pair_tok = own_results ? malloc(cap * sizeof *b->pair_tok) : b->pair_rank;
    if (!b->pair_key || !b->pair_rank || !b->pair_tok)
        return td_err_set(e, "out of memory for the pair table");
    memset(b->pair_key, 0xFF, cap * sizeof *b->pair_key);
    return 0;
}

static int build(td_bpe *b, td_err *e) {
    const td_bpe_file *f = &b->f;
    size_t splits = 0;
    for (uint32_t r = 0; r < f->n_ranks; r++) splits += f->offset[r + 1] - f->offset[r] - 1;
    /* every split of every token into two tokens: at most `splits` pairs */
    if (build_tables(b, splits, 0, e) != 0) return -1;
    for (uint32_t r = 0; r < f->n_ranks; r++) {
        size_t len;
        const unsigned char *t = tok_bytes(b, r, &len);
        for (size_t k = 1; k < len; k++) {
            /* most prefixes are no token: skip the suffix's probe then */
            uint32_t x = find_token(b, t, k), y = x == UINT32_MAX ? x : find_token(b, t + k, len - k);
            /* (x, y) joins to one byte string: never twice */
            if (x != UINT32_MAX && y != UINT32_MAX) add_pair(b, x, y, r, r);
        }
    }
    b->whole_piece = 1;
    b->vocab = (int)f->n_ranks;
    b->eot = b->bos = -1;
    for (uint32_t k = 0; k < f->n_special; k++) {
        const td_bpe_special *s = &f->special[k];
        if ((int)s->id >= b->vocab) b->vocab = (int)s->id + 1;
        if (s->len == 13 && memcmp(s->text, "<|endoftext|>", 13) == 0) b->eot = (int)s->id;
    }
    b->bos = b->eot; /* GPT-2 starts a document with <|endoftext|> */
    return 0;
}

int td_bpe_from_tables(td_bpe_tables *t, td_bpe **out, td_err *e) {
    *out = NULL;
    td_bpe *b = calloc(1, sizeof *b);
    if (!b) {
        free(t->data), free(t->offset), free(t->hashed), td_bpe_regex_free(t->regex);
        return td_err_set(e, "out of memory");
    }
    b->bytes = t->data, b->f.data = t->data, b->f.offset = t->offset;
    b->f.n_ranks = t->n_tokens, b->hashed = t->hashed, b->regex = t->regex;
    memcpy(b->f.byte_rank, t->byte_id, sizeof b->f.byte_rank);
    b->whole_piece = t->whole_piece, b->eot = t->eot, b->bos = t->bos;
    b->vocab = (int)t->n_tokens;
    int rc = build_tables(b, t->n_merges, 1, e);
    for (size_t k = 0; rc == 0 && k < t->n_merges; k++) {
        const td_bpe_merge *m = &t->merges[k];
        if (add_pair(b, m->left, m->right, (uint32_t)k, m->joined) != 0)
            rc = td_err_set(e, "merge %zu repeats the pair of an earlier merge", k);
    }
    if (rc != 0) return td_bpe_free(b), -1;
    *out = b;
    return 0;
}

unsigned char *td_bpe_read_file(const char *path, size_t *n, td_err *e) {
    struct stat st;
    const char *why;
    FILE *fp = td_fopen_input(path, &st, &why);
    if (!fp) return td_err_set(e, "cannot be read: %s", why), NULL;
    unsigned char *bytes = malloc((size_t)st.st_size + 1);
    if (!bytes) {
        fclose(fp);
        td_err_set(e, "out of memory for %lld bytes", (long long)st.st_size);
        return NULL;
    }
    size_t got = fread(bytes, 1, (size_t)st.st_size, fp);
    int rerr = ferror(fp);
    fclose(fp);
    if (got != (size_t)st.st_size) {
        td_err_set(e, "read %zu of %lld bytes (%s)", got, (long long)st.st_size,
                   rerr ? strerror(errno) : "the file shrank while it was read");
        free(bytes);
        return NULL;
    }
    bytes[got] = 0;
    *n = got;
    return bytes;
}

static size_t (*const pretok_of[TD_BPE_KINDS])(const unsigned char *, size_t, size_t) = {
    td_bpe_pretok_gpt2, td_bpe_pretok_cl100k, td_bpe_pretok_o200k};

int td_bpe_load(const char *path, td_bpe_kind kind, td_bpe **out, td_err *e) {
    *out = NULL;
    TD_ASSERT(kind >= 0 && kind < TD_BPE_KINDS);
    td_bpe *b = calloc(1, sizeof *b);
    if (!b) return td_err_set(e, "out of memory");
    size_t n;
    b->bytes = td_bpe_read_file(path, &n, e);
    int rc = !b->bytes ? -1 : td_bpe_file_parse(b->bytes, n, &b->f, e) != 0 ? -1 : build(b, e);
    if (rc != 0) return td_bpe_free(b), -1;
    b->kind = kind;
    b->pretok = pretok_of[kind];
    *out = b;
    return 0;
}

void td_bpe_free(td_bpe *b) {
    if (!b) return;
    td_bpe_file_free(&b->f);
    free(b->tok_slot);
    free(b->pair_key);
    if (b->pair_tok != b->pair_rank) free(b->pair_tok);
    free(b->pair_rank);
    free(b->hashed);
    td_bpe_regex_free(b->regex);
    free(b->bytes);
    free(b);
}

/* What each tokenizer's file must hold, so that a file of another
 * tokenizer (or another version) is refused by name. */
static const struct {
    const char *name, *title, *file, *env; /* title: how errors name it */
    uint32_t ranks, specials;
    int eot, vocab;
} expect[TD_BPE_KINDS] = {
    {"gpt2", "GPT-2", "gpt2.bpe", "TRIDENT_GPT2_BPE", 50256, 1, 50256, 50257},
    {"cl100k", "cl100k_base", "cl100k.bpe", "TRIDENT_CL100K_BPE", 100256, 5, 100257, 100277},
    {"o200k", "o200k_base", "o200k.bpe", "TRIDENT_O200K_BPE", 199998, 2, 199999, 200019},
};

const char *td_bpe_kind_name(td_bpe_kind k) { return expect[k].name; }
int td_bpe_kind_vocab(td_bpe_kind k) { return expect[k].vocab; }

int td_bpe_kind_parse(const char *name) {
    for (int k = 0; k < TD_BPE_KINDS; k++)
        if (name && strcmp(name, expect[k].name) == 0) return k;
    return -1;
}

td_bpe_kind td_bpe_kind_of(const td_bpe *b) { return b->kind; }

const char *td_bpe_path(td_bpe_kind k) {
    static char path[TD_BPE_KINDS][4096];
    const char *env = getenv(expect[k].env);
    if (env && *env) return env;
    if (!path[k][0]) snprintf(path[k], sizeof path[k], "%s/%s", TD_BPE_DATA_DIR, expect[k].file);
    return path[k];
}

const td_bpe *td_bpe_get(td_bpe_kind k) {
    static td_bpe *loaded[TD_BPE_KINDS];
    TD_ASSERT(k >= 0 && k < TD_BPE_KINDS);
    if (loaded[k]) return loaded[k];
    const char *path = td_bpe_path(k), *env = expect[k].env, *file = expect[k].file;
    char fix[256];
    if (getenv(env) && *getenv(env))
        snprintf(fix, sizeof fix, "unset %s or point it at data/%s of a trident checkout", env, file);
    else
        snprintf(fix, sizeof fix, "set %s to data/%s of a trident checkout", env, file);
    td_err e;
    td_bpe *b;
    TD_CHECK(td_bpe_load(path, k, &b, &e) == 0, "%s tokenizer file %s: %s; %s", expect[k].title,
             path, e.msg, fix);
    TD_CHECK(b->f.n_ranks == expect[k].ranks && b->f.n_special == expect[k].specials &&
                 b->eot == expect[k].eot && b->vocab == expect[k].vocab,
             "%s tokenizer file %s holds %u ranks and %u special tokens (<|endoftext|> = %d, "
             "vocabulary %d), not %s's %u, %u (<|endoftext|> = %d, vocabulary %d); %s",
             expect[k].title, path, b->f.n_ranks, b->f.n_special, b->eot, b->vocab,
             expect[k].title, expect[k].ranks, expect[k].specials, expect[k].eot, expect[k].vocab,
             fix);
    return loaded[k] = b;
}

const td_bpe *td_bpe_gpt2(void) { return td_bpe_get(TD_BPE_GPT2); }

int td_bpe_vocab(const td_bpe *b) { return b->vocab; }
int td_bpe_eot(const td_bpe *b) { return b->eot; }
int td_bpe_bos(const td_bpe *b) { return b->bos; }
int td_bpe_has_regex(const td_bpe *b) { return b->regex != NULL; }
int td_bpe_ranks(const td_bpe *b) { return (int)b->f.n_ranks; }

const unsigned char *td_bpe_token(const td_bpe *b, int id, int *len) {
    if (id >= 0 && (uint32_t)id < b->f.n_ranks) {
        size_t n;
        const unsigned char *t = tok_bytes(b, (uint32_t)id, &n);
        if (n) return *len = (int)n, t; /* 0: an id a tokenizer.json leaves out */
    }
    for (uint32_t k = 0; k < b->f.n_special; k++)
        if ((int)b->f.special[k].id == id)
            return *len = (int)b->f.special[k].len, b->f.special[k].text;
    return *len = 0, NULL;
}

/* ---- the merge ---------------------------------------------------------- */

/* Pieces up to this many bytes merge by scanning an array (the scan is
 * quadratic but tiny); longer ones through a heap, so a megabyte-long word
 * stays n log n. Both pick the same pair at every step. */
#define SCAN_MAX 256

/* Merges only pairs that join to a rank below `limit` (UINT32_MAX: all). */
static size_t merge_scan(const td_bpe *b, const unsigned char *p, size_t n, int *out,
                         uint32_t limit) {
    uint32_t tok[SCAN_MAX], rank[SCAN_MAX], joined[SCAN_MAX];
    for (size_t i = 0; i < n; i++) tok[i] = b->f.byte_rank[p[i]];
    for (size_t i = 0; i + 1 < n; i++) rank[i] = find_pair(b, tok[i], tok[i + 1], &joined[i]);
    while (n > 1) {
        size_t best = 0;
        for (size_t i = 1; i + 1 < n; i++)
            if (rank[i] < rank[best]) best = i;
        if (rank[best] >= limit) break;
        tok[best] = joined[best];
        memmove(tok + best + 1, tok + best + 2, (n - best - 2) * sizeof *tok);
        memmove(rank + best, rank + best + 1, (n - best - 2) * sizeof *rank);
        memmove(joined + best, joined + best + 1, (n - best - 2) * sizeof *joined);
        n--;
        if (best > 0) rank[best - 1] = find_pair(b, tok[best - 1], tok[best], &joined[best - 1]);
        if (best + 1 < n) rank[best] = find_pair(b, tok[best], tok[best + 1], &joined[best]);
    }
    for (size_t i = 0; i < n; i++) out[i] = (int)tok[i];
    return n;
}

typedef struct {
    uint32_t rank, pos, left, right, joined; /* the pair (left, right) of parts starting at pos */
} heap_item;

static inline int before(const heap_item *a, const heap_item *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void heap_push(heap_item *h, size_t *n, heap_item x) {
    size_t i = (*n)++;
    while (i > 0 && before(&x, &h[(i - 1) / 2])) h[i] = h[(i - 1) / 2], i = (i - 1) / 2;
    h[i] = x;
}

static heap_item heap_pop(heap_item *h, size_t *n) {
    heap_item top = h[0], x = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && before(&h[c + 1], &h[c])) c++;
        if (!before(&h[c], &x)) break;
        h[i] = h[c], i = c;
    }
    h[i] = x;
    return top;
}

/* Parts as a linked list over their first byte's position; heap entries go
 * stale when a part merges and are skipped when popped: an entry is live
 * while its part and the next still hold the tokens it names (a part's
 * token only grows, so the same ids mean the same bytes). */
static size_t merge_heap(const td_bpe *b, const unsigned char *p, size_t n, int *out) {
    uint32_t *tok = malloc(n * sizeof *tok), *next = malloc(n * sizeof *next),
             *prev = malloc(n * sizeof *prev);
    heap_item *h = malloc(3 * n * sizeof *h); /* n - 1 pairs, then at most 2 per merge */
    TD_CHECK(tok && next && prev && h, "out of memory merging a %zu-byte piece of text", n);
    size_t hn = 0;
    for (size_t i = 0; i < n; i++)
        tok[i] = b->f.byte_rank[p[i]], next[i] = (uint32_t)(i + 1), prev[i] = (uint32_t)i - 1;
    uint32_t j2;
    for (size_t i = 0; i + 1 < n; i++) {
        uint32_t r = find_pair(b, tok[i], tok[i + 1], &j2);
        if (r != UINT32_MAX) heap_push(h, &hn, (heap_item){r, (uint32_t)i, tok[i], tok[i + 1], j2});
    }
    while (hn) {
        heap_item it = heap_pop(h, &hn);
        uint32_t i = it.pos, j = next[i];
        if (tok[i] != it.left || j >= n || tok[j] != it.right) continue;
        tok[i] = it.joined;
        tok[j] = UINT32_MAX; /* dead: no live entry can name it */
        next[i] = next[j];
        if (next[i] < n) prev[next[i]] = i;
        if (i > 0) {
            uint32_t q = prev[i], r = find_pair(b, tok[q], tok[i], &j2);
            if (r != UINT32_MAX) heap_push(h, &hn, (heap_item){r, q, tok[q], tok[i], j2});
        }
        if (next[i] < n) {
            uint32_t q = next[i], r = find_pair(b, tok[i], tok[q], &j2);
            if (r != UINT32_MAX) heap_push(h, &hn, (heap_item){r, i, tok[i], tok[q], j2});
        }
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i = next[i]) out[k++] = (int)tok[i];
    free(tok), free(next), free(prev), free(h);
    return k;
}

long td_bpe_rank_of(const td_bpe *b, const unsigned char *p, size_t n) {
    uint32_t r = find_token(b, p, n);
    return r == UINT32_MAX ? -1 : (long)r;
}

size_t td_bpe_merge_with(const td_bpe *b, const unsigned char *p, size_t n, int *out, int heap) {
    TD_ASSERT(n >= 2 && (heap || n <= SCAN_MAX));
    return heap ? merge_heap(b, p, n, out) : merge_scan(b, p, n, out, UINT32_MAX);
}

int td_bpe_merge_pair(const td_bpe *b, int id, int pair[2]) {
    /* a merges list's priorities are not ids: no limit to stop below */
    if (id < 0 || (uint32_t)id >= b->f.n_ranks || b->pair_tok != b->pair_rank) return -1;
    size_t n;
    const unsigned char *t = tok_bytes(b, (uint32_t)id, &n);
    if (n < 2 || n > SCAN_MAX) return -1; /* the parser caps tokens at 255 bytes */
    int out[SCAN_MAX];
    /* the merge of the token's own bytes, stopped before its own rank: what
     * is left is the pair BPE joins into it, or more parts if none does */
    if (merge_scan(b, t, n, out, (uint32_t)id) != 2) return -1;
    pair[0] = out[0], pair[1] = out[1];
    return 0;
}

/* ---- encoders with a cache of pieces ----------------------------------- */

/* Pieces of up to this many bytes are cached; the cache starts over when
 * it holds CACHE_SLOTS / 2 pieces or its arenas fill. */
#define CACHE_PIECE_MAX 64
#define CACHE_SLOTS (1u << 17)
#define CACHE_BYTES (CACHE_SLOTS / 2 * 16)

typedef struct {
    uint64_t hash;
    uint32_t off, len;   /* the piece: bytes[off .. off + len) */
    uint32_t toff, ntok; /* its tokens: toks[toff .. toff + ntok) */
} cache_entry;

struct td_bpe_enc {
    const td_bpe *b;
    td_bpe_regex_scratch *scratch; /* a regex pre-tokenizer's match state */
    cache_entry *slot; /* [CACHE_SLOTS]; len 0 = empty */
    unsigned char *bytes;
    int *toks;
    size_t used, nbytes, ntoks;
};

td_bpe_enc *td_bpe_enc_new(const td_bpe *b) {
    td_bpe_enc *enc = calloc(1, sizeof *enc);
    TD_CHECK(enc, "out of memory for a tokenizer cache");
    enc->b = b;
    enc->slot = calloc(CACHE_SLOTS, sizeof *enc->slot);
    enc->bytes = malloc(CACHE_BYTES);
    enc->toks = malloc(CACHE_BYTES * sizeof *enc->toks);
    TD_CHECK(enc->slot && enc->bytes && enc->toks, "out of memory for a tokenizer cache");
    if (b->regex) enc->scratch = td_bpe_regex_scratch_new(b->regex);
    return enc;
}

const td_bpe *td_bpe_enc_tables(const td_bpe_enc *enc) { return enc->b; }

void td_bpe_enc_free(td_bpe_enc *enc) {
    if (!enc) return;
    td_bpe_regex_scratch_free(enc->scratch);
    free(enc->slot), free(enc->bytes), free(enc->toks), free(enc);
}

/* Tokens of one piece p[0..n) into out; returns their count. */
static size_t encode_piece(td_bpe_enc *enc, const unsigned char *p, size_t n, int *out) {
    const td_bpe *b = enc->b;
    uint32_t r = b->whole_piece ? find_token(b, p, n) : UINT32_MAX;
    if (r != UINT32_MAX) return out[0] = (int)r, 1;
    if (n == 1) return out[0] = (int)b->f.byte_rank[p[0]], 1;
    if (n > CACHE_PIECE_MAX)
        return n > SCAN_MAX ? merge_heap(b, p, n, out) : merge_scan(b, p, n, out, UINT32_MAX);
    uint64_t h = hash_bytes(p, n);
    size_t i = h & (CACHE_SLOTS - 1);
    for (; enc->slot[i].len; i = (i + 1) & (CACHE_SLOTS - 1)) {
        cache_entry *c = &enc->slot[i];
        if (c->hash == h && c->len == n && memcmp(enc->bytes + c->off, p, n) == 0) {
            memcpy(out, enc->toks + c->toff, c->ntok * sizeof *out);
            return c->ntok;
        }
    }
    size_t k = merge_scan(b, p, n, out, UINT32_MAX);
    if (enc->used + 1 > CACHE_SLOTS / 2 || enc->nbytes + n > CACHE_BYTES ||
        enc->ntoks + k > CACHE_BYTES) {
        memset(enc->slot, 0, CACHE_SLOTS * sizeof *enc->slot);
        enc->used = enc->nbytes = enc->ntoks = 0;
        i = h & (CACHE_SLOTS - 1);
    }
    memcpy(enc->bytes + enc->nbytes, p, n);
    memcpy(enc->toks + enc->ntoks, out, k * sizeof *out);
    enc->slot[i] =
        (cache_entry){h, (uint32_t)enc->nbytes, (uint32_t)n, (uint32_t)enc->ntoks, (uint32_t)k};
    enc->used++, enc->nbytes += n, enc->ntoks += k;
    return k;
}

/* Piece ends found by a tokenizer.json's regexes, collected in order. */
typedef struct {
    size_t *end;
    size_t n, cap;
} piece_ends;

static void add_end(void *ctx, size_t start, size_t end) {
    (void)start;
    piece_ends *pe = ctx;
    if (pe->n == pe->cap) {
        pe->cap = pe->cap ? 2 * pe->cap : 4096;
        pe->end = realloc(pe->end, pe->cap * sizeof *pe->end);
        TD_CHECK(pe->end, "out of memory for %zu pieces of text", pe->cap);
    }
    pe->end[pe->n++] = end;
}

/* Tokens of pieces [from, to) of s (piece k is s[end[k-1] .. end[k])). */
static size_t encode_pieces(td_bpe_enc *enc, const unsigned char *s, const size_t *end,
                            size_t from, size_t to, int *ids) {
    size_t count = 0;
    for (size_t k = from; k < to; k++) {
        size_t a = k ? end[k - 1] : 0;
        count += encode_piece(enc, s + a, end[k] - a, ids + count);
    }
    return count;
}

/* The pieces of text a regex pre-tokenizer cuts; PCRE2 reads it unchecked
 * (a check per match would cost O(n) each), so it is checked here once. */
static piece_ends regex_pieces(td_bpe_enc *enc, const unsigned char *s, size_t n) {
    size_t bad;
    td_err e;
    TD_CHECK(td_utf8_check(s, n, &bad, &e) == 0, "the text to encode: %s", e.msg);
    piece_ends pe = {0};
    td_bpe_regex_split(enc->b->regex, enc->scratch, s, n, add_end, &pe);
    return pe;
}

size_t td_bpe_encode(td_bpe_enc *enc, const unsigned char *s, size_t n, int *ids) {
    size_t count = 0;
    if (enc->b->regex) {
        piece_ends pe = regex_pieces(enc, s, n);
        count = encode_pieces(enc, s, pe.end, 0, pe.n, ids);
        free(pe.end);
        return count;
    }
    for (size_t i = 0; i < n;) {
        size_t j = enc->b->pretok(s, n, i);
        count += encode_piece(enc, s + i, j - i, ids + count);
        i = j;
    }
    return count;
}

/* A regex pre-tokenizer has no split point known to be safe (td_bpe_split_
 * point is GPT-2's), so one thread cuts all the pieces, then the threads
 * merge runs of them: chunks of about 64 KiB or more, 8 per thread. */
static size_t encode_regex_threads(td_bpe_enc **encs, int threads, const unsigned char *s,
                                   size_t n, int *ids) {
    piece_ends pe = regex_pieces(encs[0], s, n);
    size_t target = n / ((size_t)threads * 8);
    if (target < (1u << 16)) target = 1u << 16;
    size_t cap = n / target + 2, nchunks = 0;
    size_t *first = malloc((cap + 1) * sizeof *first), *count = malloc(cap * sizeof *count);
    TD_CHECK(first && count, "out of memory splitting %zu bytes of text", n);
    for (size_t k = 0, next = target; k < pe.n; k++)
        if (k == 0 || (pe.end[k - 1] >= next && nchunks < cap)) {
            first[nchunks++] = k;
            next = (k ? pe.end[k - 1] : 0) + target;
        }
    first[nchunks] = pe.n;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (size_t c = 0; c < nchunks; c++) {
        size_t at = first[c] ? pe.end[first[c] - 1] : 0; /* the chunk's first byte */
        count[c] = encode_pieces(encs[omp_get_thread_num()], s, pe.end, first[c], first[c + 1],
                                 ids + at);
    }
    size_t total = 0;
    for (size_t c = 0; c < nchunks; c++) {
        memmove(ids + total, ids + (first[c] ? pe.end[first[c] - 1] : 0), count[c] * sizeof *ids);
        total += count[c];
    }
    free(first), free(count), free(pe.end);
    return total;
}

size_t td_bpe_encode_threads(td_bpe_enc **encs, int threads, const unsigned char *s, size_t n,
                             int *ids) {
    if (threads <= 1 || n < (1u << 16)) return td_bpe_encode(encs[0], s, n, ids);
    if (encs[0]->b->regex) return encode_regex_threads(encs, threads, s, n, ids);
    /* chunks of at least 64 KiB, about 8 per thread for balance; each is
     * encoded into its own slice of ids (room for its bytes), then packed */
    size_t target = n / ((size_t)threads * 8);
    if (target < (1u << 16)) target = 1u << 16;
    size_t cap = n / target + 2, nchunks = 0;
    size_t *start = malloc((cap + 1) * sizeof *start), *count = malloc(cap * sizeof *count);
    TD_CHECK(start && count, "out of memory splitting %zu bytes of text", n);
    for (size_t p = 0; p < n && nchunks < cap;) {
        start[nchunks++] = p;
        p = p + target >= n ? n : td_bpe_split_point(encs[0]->b, s, n, p + target);
    }
    start[nchunks] = n;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (size_t c = 0; c < nchunks; c++) {
        td_bpe_enc *enc = encs[omp_get_thread_num()];
        count[c] = td_bpe_encode(enc, s + start[c], start[c + 1] - start[c], ids + start[c]);
    }
    size_t total = 0;
    for (size_t c = 0; c < nchunks; c++) {
        memmove(ids + total, ids + start[c], count[c] * sizeof *ids);
        total += count[c];
    }
    free(start), free(count);
    return total;
}
