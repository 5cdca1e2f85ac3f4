/* Blended data (--data W:PATH,W:PATH,...): several sources of one tokenizer
 * drawn by weight, sample by sample, by Megatron-LM's greedy rule
 * (data.h), so that the realized mix tracks the weights at every step and
 * the run's sample index is the whole cursor. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data_internal.h"
#include "trident/base.h"
#include "trident/formats_hash.h"

/* Where the greedy count stands: the counts of samples 0..g-1 per source.
 * One per split for the batches and one per split for the reports, so
 * neither makes the other replay. */
typedef struct {
    int64_t g;
    int64_t *count;
} blend_cursor;

struct td_data_blend {
    int n, batch;
    double *weight;
    char **path;
    size_t *off[2], *len[2]; /* each source's split inside d->train / d->val */
    blend_cursor cur[2][2];  /* [split][0: batches, 1: reports] */
};

/* ---- parsing --data ---- */

/* The weight before a part's first colon, when what precedes it reads as a
 * number (else the part is a path: synthetic:V, a path holding a colon).
 * Returns 1 with *w and *path set. */
static int weighted_part(char *part, double *w, char **path) {
    char *colon = strchr(part, ':');
    if (!colon || colon == part || !strchr("0123456789.+-", part[0])) return 0;
    char *end;
    *colon = 0;
    double v = strtod(part, &end);
    int ok = end == colon;
    *colon = ':';
    if (!ok) return 0;
    *w = v, *path = colon + 1;
    return 1;
}

int td_data_blend_parse(const char *arg, td_data_blend_spec *s, const char *flag) {
    memset(s, 0, sizeof *s);
    if (!arg) return 0;
    size_t len = strlen(arg);
    int parts = 1, weighted = 0;
    for (const char *p = arg; *p; p++) parts += *p == ',';
    char *buf = td_alloc(len + 1, TD_MEM_OTHER);
    memcpy(buf, arg, len + 1);
    double w;
    char *path, *save = NULL;
    for (char *part = strtok_r(buf, ",", &save); part; part = strtok_r(NULL, ",", &save))
        weighted += weighted_part(part, &w, &path);
    if (!weighted) {
        td_free(buf);
        struct stat st;
        /* a plain path, even one with commas, when it is there */
        TD_CHECK(parts == 1 || stat(arg, &st) == 0,
                 "%s %s: a blend gives every source a weight, W:PATH,W:PATH,... (W > 0); a bare PATH is "
                 "one source only when alone", flag, arg);
        return 0;
    }
    memcpy(buf, arg, len + 1);
    s->weight = td_alloc(sizeof(double) * (size_t)parts, TD_MEM_OTHER);
    s->path = td_alloc(sizeof(char *) * (size_t)parts, TD_MEM_OTHER);
    s->buf = buf;
    double sum = 0;
    const char *p = arg;
    for (int i = 0; i < parts; i++) {
        const char *comma = strchr(p, ',');
        int plen = comma ? (int)(comma - p) : (int)strlen(p);
        char *part = buf + (p - arg);
        part[plen] = 0;
        TD_CHECK(plen > 0, "%s %s: source %d is empty; give W:PATH,W:PATH,... (W > 0)", flag, arg, i + 1);
        TD_CHECK(weighted_part(part, &w, &path), "%s %s: '%.*s' has no weight; in a blend every source is W:PATH "
                 "(W > 0)", flag, arg, plen, p);
        TD_CHECK(isfinite(w) && w > 0, "%s %s: '%.*s' has weight %g; a weight is a finite number above 0", flag,
                 arg, plen, p, w);
        TD_CHECK(*path, "%s %s: '%.*s' names no file; give W:PATH", flag, arg, plen, p);
        for (int j = 0; j < i; j++)
            TD_CHECK(strcmp(s->path[j], path) != 0, "%s %s: %s is given twice; give each source once with "
                     "its whole weight", flag, arg, path);
        s->weight[i] = w, s->path[i] = path;
        sum += w;
        p += plen + 1;
    }
    for (int i = 0; i < parts; i++) s->weight[i] /= sum;
    s->n = parts;
    return 1;
}

void td_data_blend_spec_free(td_data_blend_spec *s) {
    td_free(s->weight);
    td_free(s->path);
    td_free(s->buf);
    memset(s, 0, sizeof *s);
}

/* ---- one tokenizer ---- */

/* Code point c for an error line: itself when printable ASCII, else U+XXXX. */
static size_t put_char(char *buf, size_t cap, size_t k, uint32_t c) {
    if (k >= cap) return k;
    int n = c > 0x20 && c < 0x7f ? snprintf(buf + k, cap - k, "%s'%c'", k ? " " : "", (char)c)
                                 : snprintf(buf + k, cap - k, "%sU+%04X", k ? " " : "", (unsigned)c);
    return k + (size_t)n < cap ? k + (size_t)n : cap - 1;
}

/* The characters of a's alphabet that b's lacks (the first 24), into buf. */
static void chars_missing(const td_tokenizer *a, const td_tokenizer *b, char *buf, size_t cap) {
    size_t k = 0;
    int shown = 0, more = 0;
    buf[0] = 0;
    for (int i = 0, j = 0; i < a->V; i++) {
        while (j < b->V && b->chars[j] < a->chars[i]) j++;
        if (j < b->V && b->chars[j] == a->chars[i]) continue;
        if (shown < 24) k = put_char(buf, cap, k, a->chars[i]), shown++;
        else more++;
    }
    if (more) snprintf(buf + k, cap - k, " and %d more", more);
    if (!shown) snprintf(buf, cap, "none");
}

/* Source s (path p) must be read by the tokenizer of source 0 (path p0). */
static void same_tokenizer(const td_tokenizer *t0, const char *p0, const td_tokenizer *t, const char *p) {
    TD_CHECK(t->kind == t0->kind, "--data: a blend's sources share one tokenizer, but %s is read as %s and %s as "
             "%s; give sources of one tokenizer", p0, td_tokenizer_name(t0->kind), p, td_tokenizer_name(t->kind));
    if (t->kind == TD_TOK_HF)
        TD_CHECK(t->file_xxh3 == t0->file_xxh3, "--data: %s and %s were made with different tokenizer.json files; "
                 "give sources of one tokenizer", p0, p);
    if (t->kind != TD_TOK_CHAR) return;
    int same = t->V == t0->V;
    for (int i = 0; same && i < t->V; i++) same = t->chars[i] == t0->chars[i];
    if (same) return;
    char only0[512], only1[512];
    chars_missing(t0, t, only0, sizeof only0);
    chars_missing(t, t0, only1, sizeof only1);
    TD_CHECK(0, "--data: %s and %s are character-level texts of different alphabets (%s has %s that %s lacks; %s "
             "has %s that %s lacks); a blend needs one tokenizer: give texts of one alphabet, or --tokenizer byte "
             "or a BPE tokenizer", p0, p, p0, only0, p, p, only1, p0);
}

/* ---- loading ---- */

void td_data_load_blend(td_dataset *d, const td_data_blend_spec *bs, const char *tokenizer, int vocab, int T) {
    int n = bs->n;
    td_dataset *src = td_alloc(sizeof *src * (size_t)n, TD_MEM_OTHER);
    struct td_data_blend *b = td_alloc(sizeof *b, TD_MEM_OTHER);
    b->n = n;
    b->weight = td_alloc(sizeof(double) * (size_t)n, TD_MEM_OTHER);
    b->path = td_alloc(sizeof(char *) * (size_t)n, TD_MEM_OTHER);
    for (int sp = 0; sp < 2; sp++) {
        b->off[sp] = td_alloc(sizeof(size_t) * (size_t)n, TD_MEM_OTHER);
        b->len[sp] = td_alloc(sizeof(size_t) * (size_t)n, TD_MEM_OTHER);
        for (int k = 0; k < 2; k++) b->cur[sp][k].count = td_alloc(sizeof(int64_t) * (size_t)n, TD_MEM_OTHER);
    }
    td_hash_stream *all = td_hash_stream_new();
    TD_CHECK(all, "--data: out of memory for its checksum");
    size_t n_train = 0, n_val = 0;
    uint64_t bytes = 0;
    int V = 0;
    for (int s = 0; s < n; s++) {
        td_data_load(&src[s], bs->path[s], tokenizer, vocab, T); /* each split checked against T */
        if (s) same_tokenizer(&src[0].tok, bs->path[0], &src[s].tok, bs->path[s]);
        size_t pl = strlen(bs->path[s]) + 1;
        b->path[s] = td_alloc(pl, TD_MEM_OTHER);
        memcpy(b->path[s], bs->path[s], pl);
        b->weight[s] = bs->weight[s];
        b->off[0][s] = n_train, b->len[0][s] = src[s].n_train, n_train += src[s].n_train;
        b->off[1][s] = n_val, b->len[1][s] = src[s].n_val, n_val += src[s].n_val;
        /* the data is its sources in order; the weights are not data (a
         * resume under other weights is told apart by --data, not here) */
        td_hash_stream_add(all, &src[s].fp, sizeof src[s].fp);
        bytes += src[s].fp.bytes;
        if (src[s].tok.V > V) V = src[s].tok.V;
    }
    d->train = td_alloc(sizeof(int) * n_train, TD_MEM_OTHER);
    d->val = td_alloc(sizeof(int) * n_val, TD_MEM_OTHER);
    d->n_train = n_train, d->n_val = n_val;
    size_t k = (size_t)snprintf(d->description, sizeof d->description, "a blend of %d sources by weight:", n);
    for (int s = 0; s < n; s++) {
        memcpy(d->train + b->off[0][s], src[s].train, sizeof(int) * src[s].n_train);
        memcpy(d->val + b->off[1][s], src[s].val, sizeof(int) * src[s].n_val);
        if (k < sizeof d->description)
            k += (size_t)snprintf(d->description + k, sizeof d->description - k, "%s %.4g %s", s ? ";" : "",
                                  b->weight[s], src[s].description);
    }
    d->tok = src[0].tok; /* moved: ids take the largest vocabulary of the sources */
    memset(&src[0].tok, 0, sizeof src[0].tok);
    if (d->tok.kind == TD_TOK_IDS) d->tok.V = V;
    d->fp.xxh3 = td_hash_stream_value(all);
    d->fp.bytes = bytes;
    td_hash_stream_free(all);
    for (int s = 0; s < n; s++) td_data_free(&src[s]);
    td_free(src);
    d->blend = b;
}

void td_data_blend_free(struct td_data_blend *b) {
    if (!b) return;
    for (int s = 0; s < b->n; s++) td_free(b->path[s]);
    for (int sp = 0; sp < 2; sp++) {
        td_free(b->off[sp]);
        td_free(b->len[sp]);
        for (int k = 0; k < 2; k++) td_free(b->cur[sp][k].count);
    }
    td_free(b->weight);
    td_free(b->path);
    td_free(b);
}

/* ---- drawing ---- */

/* The source of sample g, given the counts of samples 0..g-1: the one
 * furthest below its share of g + 1 samples, the first of equals. */
static int choose(const struct td_data_blend *b, const int64_t *count, int64_t g) {
    int best = 0;
    double most = b->weight[0] * (double)(g + 1) - (double)count[0];
    for (int s = 1; s < b->n; s++) {
        double e = b->weight[s] * (double)(g + 1) - (double)count[s];
        if (e > most) most = e, best = s;
    }
    return best;
}

/* Moves c to sample g: onwards from where it is, or replayed from 0. */
static void seek(const struct td_data_blend *b, blend_cursor *c, int64_t g) {
    if (c->g > g) {
        c->g = 0;
        memset(c->count, 0, sizeof(int64_t) * (size_t)b->n);
    }
    for (; c->g < g; c->g++) c->count[choose(b, c->count, c->g)]++;
}

void td_data_set_batch(td_dataset *d, int batch) {
    if (d->blend) d->blend->batch = batch;
}

void td_data_blend_batch(const td_dataset *d, int split, uint64_t seed, int64_t step, int first, int count, int T,
                         int *inputs, int *targets) {
    struct td_data_blend *b = d->blend;
    int64_t B = b->batch;
    TD_ASSERT(B > 0 && first >= 0 && first + count <= B); /* td_data_set_batch first */
    blend_cursor *c = &b->cur[split][0];
    const int *all = split == 0 ? d->train : d->val;
    for (int i = 0; i < count; i++) {
        int64_t g = step * B + first + i;
        seek(b, c, g);
        int s = choose(b, c->count, g);
        int64_t k = c->count[s]++; /* this source's sample number */
        c->g++;
        /* the start a run on source s alone would draw for its sample k */
        uint64_t index = ((uint64_t)(k / B) << 24) | (uint64_t)(k % B);
        size_t span = b->len[split][s] - (size_t)T;
        size_t start = b->off[split][s] + (size_t)(td_rng_u64(seed, 0x5A3D1E00ULL + (uint64_t)split, index) % span);
        memcpy(inputs + (size_t)i * T, all + start, sizeof(int) * (size_t)T);
        memcpy(targets + (size_t)i * T, all + start + 1, sizeof(int) * (size_t)T);
    }
}

int td_data_sources(const td_dataset *d) { return d->blend ? d->blend->n : 0; }
const char *td_data_source_path(const td_dataset *d, int s) { return d->blend->path[s]; }
double td_data_source_weight(const td_dataset *d, int s) { return d->blend->weight[s]; }

void td_data_source_counts(const td_dataset *d, int split, int64_t samples, int64_t *counts) {
    struct td_data_blend *b = d->blend;
    blend_cursor *c = &b->cur[split][1];
    seek(b, c, samples);
    memcpy(counts, c->count, sizeof(int64_t) * (size_t)b->n);
}
