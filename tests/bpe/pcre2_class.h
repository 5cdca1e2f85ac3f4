/* The class PCRE2 (UTF, UCP) gives a code point, as td_bpe_uc_class's
 * TD_UC_* (bpe_internal.h). A tokenizer.json's pre-tokenizer runs through
 * PCRE2, whose Unicode tables are older than the hand-written matchers'
 * (and whose \s is not JavaScript's: U+FEFF), so the stress texts leave out
 * the code points the two classify differently. Header-only, for the
 * tests that build such texts (bpe_tool, test_bpe_hfjson). */
#ifndef TD_TESTS_PCRE2_CLASS_H
#define TD_TESTS_PCRE2_CLASS_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "../../src/data/bpe_internal.h"
#include "trident/base.h"
#include "trident/formats_data.h"

typedef struct {
    pcre2_code *re[8]; /* \p{Lu} .. \s, in TD_UC_* order from TD_UC_LU */
    pcre2_match_data *md;
} pcre2_classes;

static inline void pcre2_classes_init(pcre2_classes *c) {
    static const char *const pat[8] = {"^\\p{Lu}$", "^\\p{Ll}$", "^\\p{Lt}$", "^\\p{Lm}$",
                                       "^\\p{Lo}$", "^\\p{M}$",  "^\\p{N}$",  "^\\s$"};
    for (int k = 0; k < 8; k++) {
        int err;
        PCRE2_SIZE at;
        c->re[k] = pcre2_compile((PCRE2_SPTR)pat[k], PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
                                 &err, &at, NULL);
        TD_CHECK(c->re[k], "pcre2_compile %s", pat[k]);
    }
    c->md = pcre2_match_data_create(4, NULL);
    TD_CHECK(c->md, "out of memory");
}

static inline int pcre2_class_of(const pcre2_classes *c, uint32_t cp) {
    unsigned char u[4];
    int n = td_utf8_put(cp, u);
    for (int k = 0; k < 8; k++)
        if (pcre2_match(c->re[k], u, (size_t)n, 0, 0, c->md, NULL) >= 0) return TD_UC_LU + k;
    return TD_UC_OTHER;
}

static inline void pcre2_classes_free(pcre2_classes *c) {
    for (int k = 0; k < 8; k++) pcre2_code_free(c->re[k]);
    pcre2_match_data_free(c->md);
}

#endif
