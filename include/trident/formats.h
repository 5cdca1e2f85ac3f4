/* formats: the parsers of untrusted files (token-file headers, UTF-8 text,
 * checkpoints, config.json). They link without MPI and without the rest of
 * trident, never exit and never print: each returns 0 on success, or -1 with
 * one sentence in td_err saying what is wrong (the caller adds the file name
 * and turns it into its one-line "trident: error: ..."). They are fuzzed
 * with libFuzzer (tests/fuzz/), so they must hold for any input bytes. */
#ifndef TRIDENT_FORMATS_H
#define TRIDENT_FORMATS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    char msg[512];
} td_err;

/* Formats msg into e (e may be NULL) and returns -1, so a parser can write
 * `return td_err_set(e, "...", ...);`. */
int td_err_set(td_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#ifdef __cplusplus
}
#endif

#endif
