/* formats_json: a small bounded JSON DOM parser (RFC 8259) for the headers
 * of untrusted files (safetensors, checkpoint manifests). Like every parser
 * in src/formats it never exits or prints (formats.h) and is fuzzed
 * (tests/fuzz/fuzz_safetensors.c). It allocates with malloc, not td_alloc,
 * so src/formats links alone. */
#ifndef TRIDENT_FORMATS_JSON_H
#define TRIDENT_FORMATS_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "trident/formats.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TD_JSON_MAX_DEPTH 64
#define TD_JSON_MAX_STRING (1u << 20) /* bytes of one string, as written */
#define TD_JSON_MAX_NODES (1 << 20)

typedef enum { TD_JV_NULL, TD_JV_BOOL, TD_JV_NUM, TD_JV_STR, TD_JV_ARR, TD_JV_OBJ } td_jv_type;
typedef struct td_jv td_jv;
struct td_jv {
    td_jv_type type;
    int boolean;
    double num;            /* TD_JV_NUM */
    int is_int;            /* the number was written as an integer that fits int64 */
    int64_t i;             /* its value when is_int */
    char *str; size_t len; /* TD_JV_STR: unescaped UTF-8, NUL-terminated (len excludes NUL) */
    int n;                 /* ARR/OBJ: number of items */
    td_jv *items;          /* [n] */
    char **keys;           /* OBJ: [n] NUL-terminated keys (duplicates are a parse error) */
    size_t at, end;        /* the value's bytes [at, end) in the parsed text (a config's or a
                              manifest's object can be kept verbatim, a checksum cover a prefix) */
};

/* Parses exactly one JSON value (RFC 8259; whitespace around it allowed,
 * nothing else after). Strings must be valid UTF-8 without unpaired
 * surrogate escapes; keys may not contain \u0000 (they are C strings).
 * Limits: depth <= 64, string <= 1 MiB, total nodes <= 1<<20. On error
 * returns -1 with "byte N: what" in e and *out = NULL. */
int td_json_parse(const char *text, size_t n, td_jv **out, td_err *e);
void td_json_free(td_jv *v);
/* The value of key in obj; NULL if absent or obj is not an object. */
const td_jv *td_json_get(const td_jv *obj, const char *key);
/* Typed getters: return -1 with e = "field KEY: missing / not an integer /
 * out of [lo,hi]" (or "not a string"). */
int td_json_get_int(const td_jv *obj, const char *key, int64_t lo, int64_t hi, int64_t *out,
                    td_err *e);
int td_json_get_str(const td_jv *obj, const char *key, const char **out, td_err *e);
/* Writing: appends the JSON string literal of s (quoted, escaped) to buf,
 * which holds len bytes of cap, keeping it NUL-terminated; returns the new
 * length, or -1 if it does not fit (buf is then unchanged up to len). */
int td_json_put_str(char *buf, size_t cap, size_t len, const char *s);

#ifdef __cplusplus
}
#endif

#endif
