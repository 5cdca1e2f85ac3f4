/* A tokenizer.json's pre-tokenizer regexes through PCRE2 (Debian's
 * libpcre2-8), not a hand-written engine: the patterns are the file's own
 * (Llama 3's, GPT-2's implied by ByteLevel), written for Rust's Oniguruma
 * binding, whose syntax for them PCRE2 shares. Hugging Face splits each
 * piece as a string of its own, so a stage matches inside one piece (a
 * lookahead never sees the next piece). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

#include "bpe_internal.h"
#include "trident/base.h"

struct td_bpe_regex {
    int n;
    pcre2_code *code[TD_BPE_REGEX_STAGES];
};

struct td_bpe_regex_scratch {
    pcre2_match_data *md[TD_BPE_REGEX_STAGES];
    pcre2_match_context *mc;
    pcre2_jit_stack *stack; /* JIT frames beyond the default 32 KiB: long runs of a class */
};

td_bpe_regex *td_bpe_regex_new(void) { return calloc(1, sizeof(td_bpe_regex)); }

int td_bpe_regex_add(td_bpe_regex *r, const char *pattern, size_t len, int literal, td_err *e) {
    if (r->n == TD_BPE_REGEX_STAGES)
        return td_err_set(e, "more than %d splitting stages", TD_BPE_REGEX_STAGES);
    int err;
    PCRE2_SIZE at;
    /* PCRE2 allows UTF but not UCP beside LITERAL (a literal has no classes) */
    uint32_t opts = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
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
    r->code[r->n++] = c;
    return 0;
}

int td_bpe_regex_stages(const td_bpe_regex *r) { return r->n; }

void td_bpe_regex_free(td_bpe_regex *r) {
    if (!r) return;
    for (int k = 0; k < r->n; k++) pcre2_code_free(r->code[k]);
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
    return sc;
}

void td_bpe_regex_scratch_free(td_bpe_regex_scratch *sc) {
    if (!sc) return;
    for (int k = 0; k < TD_BPE_REGEX_STAGES; k++) pcre2_match_data_free(sc->md[k]);
    pcre2_match_context_free(sc->mc);
    pcre2_jit_stack_free(sc->stack);
    free(sc);
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

/* The matches of stage `stage` in piece s[a..b), each one and each gap a
 * piece for the next stage. After an empty match the search resumes one
 * character on, as Rust's find_iter does. */
static void split(const splitter *x, int stage, size_t a, size_t b) {
    const unsigned char *p = x->s + a;
    size_t n = b - a, at = 0, gap = 0;
    pcre2_match_data *md = x->sc->md[stage];
    while (at <= n) {
        int rc = pcre2_match(x->r->code[stage], p, n, at, PCRE2_NO_UTF_CHECK, md, x->sc->mc);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            TD_CHECK(0, "the tokenizer's pre-tokenizer regex failed on the text at byte %zu: %s",
                     a + at, (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t s0 = ov[0], e0 = ov[1];
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
