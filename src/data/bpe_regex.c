/* A tokenizer.json's pre-tokenizer regexes through PCRE2 (Debian's
 * libpcre2-8), not a hand-written engine: the patterns are the file's own
 * (Llama 3's, GPT-2's implied by ByteLevel), written for Rust's Oniguruma
 * binding, whose syntax for them PCRE2 shares. Hugging Face splits each
 * piece as a string of its own, so a stage matches inside one piece (a
 * lookahead never sees the next piece).
 *
 * The work of each piece is bounded: PCRE2's match limit counts per start
 * position (it resets at each), so an unanchored search that fails at
 * every position of a long line is quadratic however it is set. Instead
 * the search here tries each start position itself (anchored), each try
 * under a match limit that doubles from a few steps, and charges every
 * try's limit to a budget of TD_BPE_REGEX_STEPS_PER_BYTE per byte of the
 * piece (plus TD_BPE_REGEX_STEPS_BASE): a charge at most four times the
 * steps taken. Past the budget the text is refused, naming the pattern. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bpe_internal.h"
#include "trident/base.h"

struct td_bpe_regex {
    int n;
    pcre2_code *code[TD_BPE_REGEX_STAGES];
    char *pattern[TD_BPE_REGEX_STAGES]; /* as written, for the refusal */
};

struct td_bpe_regex_scratch {
    pcre2_match_data *md[TD_BPE_REGEX_STAGES];
    pcre2_match_context *mc;
    pcre2_jit_stack *stack; /* JIT frames beyond the default 32 KiB: long runs of a class */
    uint64_t per_byte;      /* the budget's steps per byte (tests lower it) */
    uint64_t used, budget;  /* the piece with the largest share of its budget used so far */
};

td_bpe_regex *td_bpe_regex_new(void) { return calloc(1, sizeof(td_bpe_regex)); }

int td_bpe_regex_add(td_bpe_regex *r, const char *pattern, size_t len, int literal, td_err *e) {
    if (r->n == TD_BPE_REGEX_STAGES)
        return td_err_set(e, "more than %d splitting stages", TD_BPE_REGEX_STAGES);
    int err;
    PCRE2_SIZE at;
    /* PCRE2 allows UTF but not UCP beside LITERAL (a literal has no classes) */
    uint32_t opts = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    /* anchored when compiled: the search tries each start itself (below),
     * and PCRE2_ANCHORED given only at match time would bypass the JIT */
    opts |= PCRE2_ANCHORED;
    pcre2_code *c = pcre2_compile((PCRE2_SPTR)pattern, len, opts, &err, &at, NULL);
    if (!c) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        return td_err_set(e, "PCRE2 cannot compile it: %s at offset %zu", (const char *)msg,
                          (size_t)at);
    }
    /* JIT is an optimisation only: without it (no JIT on this platform)
     * pcre2_match interprets the same pattern */
    (void)pcre2_jit_compile(c, PCRE2_JIT_COMPLETE);
    char *pat = malloc(len + 1);
    if (!pat) {
        pcre2_code_free(c);
        return td_err_set(e, "out of memory");
    }
    memcpy(pat, pattern, len);
    pat[len] = 0;
    r->pattern[r->n] = pat;
    r->code[r->n++] = c;
    return 0;
}

int td_bpe_regex_stages(const td_bpe_regex *r) { return r->n; }

void td_bpe_regex_free(td_bpe_regex *r) {
    if (!r) return;
    for (int k = 0; k < r->n; k++) pcre2_code_free(r->code[k]), free(r->pattern[k]);
    free(r);
}

td_bpe_regex_scratch *td_bpe_regex_scratch_new(const td_bpe_regex *r) {
    td_bpe_regex_scratch *sc = calloc(1, sizeof *sc);
    TD_CHECK(sc, "out of memory for a tokenizer's regex state");
    for (int k = 0; k < r->n; k++) {
        sc->md[k] = pcre2_match_data_create_from_pattern(r->code[k], NULL);
        TD_CHECK(sc->md[k], "out of memory for a tokenizer's regex state");
    }
    sc->mc = pcre2_match_context_create(NULL);
    sc->stack = pcre2_jit_stack_create(32 * 1024, 64 * 1024 * 1024, NULL);
    TD_CHECK(sc->mc && sc->stack, "out of memory for a tokenizer's regex state");
    pcre2_jit_stack_assign(sc->mc, NULL, sc->stack);
    /* the interpreter's frames (no JIT here): a bound beside the steps' */
    pcre2_set_heap_limit(sc->mc, 256 * 1024); /* KiB */
    sc->per_byte = TD_BPE_REGEX_STEPS_PER_BYTE;
    return sc;
}

void td_bpe_regex_scratch_free(td_bpe_regex_scratch *sc) {
    if (!sc) return;
    for (int k = 0; k < TD_BPE_REGEX_STAGES; k++) pcre2_match_data_free(sc->md[k]);
    pcre2_match_context_free(sc->mc);
    pcre2_jit_stack_free(sc->stack);
    free(sc);
}

void td_bpe_regex_scratch_budget(td_bpe_regex_scratch *sc, uint64_t per_byte) {
    sc->per_byte = per_byte;
}

void td_bpe_regex_scratch_usage(const td_bpe_regex_scratch *sc, uint64_t *used, uint64_t *budget) {
    *used = sc->used, *budget = sc->budget;
}

typedef struct {
    const td_bpe_regex *r;
    td_bpe_regex_scratch *sc;
    const unsigned char *s;
    void (*piece)(void *, size_t, size_t);
    void *ctx;
} splitter;

static void split(const splitter *x, int stage, size_t a, size_t b);

static void emit(const splitter *x, int stage, size_t a, size_t b) {
    if (b <= a) return; /* Hugging Face drops empty pieces */
    if (stage + 1 == x->r->n) x->piece(x->ctx, a, b);
    else split(x, stage + 1, a, b);
}

/* The first match of stage `stage` in p[0..n) at or after `at`: its start
 * and end, 0 when there is none. Each UTF-8 character's start is tried in
 * turn, anchored (the leftmost match, as an unanchored search finds it),
 * charging *left; past it the text is refused. */
static int find(const splitter *x, int stage, const unsigned char *p, size_t n, size_t at,
                uint64_t *left, size_t *s0, size_t *e0) {
    pcre2_match_data *md = x->sc->md[stage];
    for (;;) {
        int rc;
        for (uint64_t lim = 8;; lim *= 2) { /* the try's limit doubles until it decides */
            if (lim > *left) lim = *left;
            pcre2_set_match_limit(x->sc->mc, (uint32_t)(lim < UINT32_MAX ? lim : UINT32_MAX));
            pcre2_set_depth_limit(x->sc->mc, (uint32_t)(lim < UINT32_MAX ? lim : UINT32_MAX));
            rc = pcre2_match(x->r->code[stage], p, n, at, PCRE2_NO_UTF_CHECK, md, x->sc->mc);
            *left -= lim;
            if (rc != PCRE2_ERROR_MATCHLIMIT && rc != PCRE2_ERROR_DEPTHLIMIT) break;
            unsigned long long per = x->sc->per_byte, budget = per * n + TD_BPE_REGEX_STEPS_BASE;
            TD_CHECK(*left > 0,
                     "the tokenizer's pre-tokenizer regex '%.200s' needs more than its budget "
                     "of %llu steps (%llu a byte) on a piece of %zu bytes; a pattern that "
                     "backtracks over the whole text is refused (GPT-2's, cl100k's and Llama "
                     "3's need a few steps a byte)",
                     x->r->pattern[stage], budget, per, n);
        }
        if (rc >= 0) {
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
            *s0 = ov[0], *e0 = ov[1];
            return 1;
        }
        if (rc != PCRE2_ERROR_NOMATCH) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            TD_CHECK(0, "the tokenizer's pre-tokenizer regex '%.200s' failed on the text: %s",
                     x->r->pattern[stage], (const char *)msg);
        }
        if (at >= n) return 0;
        at++;
        while (at < n && (p[at] & 0xC0) == 0x80) at++;
    }
}

/* The matches of stage `stage` in piece s[a..b), each one and each gap a
 * piece for the next stage. After an empty match the search resumes one
 * character on, as Rust's find_iter does. */
static void split(const splitter *x, int stage, size_t a, size_t b) {
    const unsigned char *p = x->s + a;
    size_t n = b - a, at = 0, gap = 0, s0, e0;
    uint64_t budget = x->sc->per_byte * n + TD_BPE_REGEX_STEPS_BASE, left = budget;
    while (at <= n && find(x, stage, p, n, at, &left, &s0, &e0)) {
        emit(x, stage, a + gap, a + s0);
        emit(x, stage, a + s0, a + e0);
        gap = e0;
        if (e0 > s0) {
            at = e0;
        } else { /* an empty match: step over one UTF-8 character */
            if (e0 >= n) break;
            at = e0 + 1;
            while (at < n && (p[at] & 0xC0) == 0x80) at++;
        }
    }
    /* the largest share of a budget so far (used / budget, compared crosswise) */
    uint64_t used = budget - left;
    if (!x->sc->budget || (double)used * x->sc->budget > (double)x->sc->used * budget)
        x->sc->used = used, x->sc->budget = budget;
    emit(x, stage, a + gap, b);
}

void td_bpe_regex_split(const td_bpe_regex *r, td_bpe_regex_scratch *sc, const unsigned char *s,
                        size_t n, void (*piece)(void *ctx, size_t start, size_t end), void *ctx) {
    if (r->n == 0) {
        if (n) piece(ctx, 0, n);
        return;
    }
    splitter x = {r, sc, s, piece, ctx};
    split(&x, 0, 0, n);
}
