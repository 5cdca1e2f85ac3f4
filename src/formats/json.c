/* A bounded JSON DOM parser (formats_json.h): recursive descent over the
 * RFC 8259 grammar. Bounds on depth, string length and node count keep a
 * hostile header from exhausting the stack or memory; duplicate keys are
 * refused because a format that names tensors by key must not let two
 * entries disagree about one name. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/formats_data.h"
#include "trident/formats_json.h"

typedef struct {
    const unsigned char *s;
    size_t n, pos;
    int nodes;
    td_err *e;
} parser;

/* "byte N: what", N the offset where the offending token starts */
#define FAILAT(at, fmt, ...) return td_err_set(P->e, "byte %zu: " fmt, (size_t)(at), ##__VA_ARGS__)

static void skip_ws(parser *P) {
    while (P->pos < P->n && (P->s[P->pos] == ' ' || P->s[P->pos] == '\t' || P->s[P->pos] == '\n' ||
                             P->s[P->pos] == '\r'))
        P->pos++;
}

static int hex4(const unsigned char *p, uint32_t *v) {
    *v = 0;
    for (int i = 0; i < 4; i++) {
        int c = p[i], d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                                     : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        *v = *v << 4 | (uint32_t)d;
    }
    return 0;
}

/* A string literal at P->pos (the opening quote) into a malloc'd,
 * NUL-terminated buffer. Raw bytes are checked as UTF-8 per run between
 * escapes; escapes are decoded, surrogate pairs joined. */
static int parse_string(parser *P, char **out, size_t *out_len) {
    size_t start = P->pos++;
    size_t end = P->pos;
    while (end < P->n && P->s[end] != '"') {
        if (P->s[end] == '\\') end++;
        end++;
    }
    if (end >= P->n) FAILAT(start, "unterminated string");
    if (end - start - 1 > TD_JSON_MAX_STRING)
        FAILAT(start, "string longer than 1 MiB");
    char *buf = malloc(end - start); /* decoded is never longer than written */
    if (!buf) FAILAT(start, "out of memory");
    size_t len = 0;
    while (P->pos < end) {
        size_t run = P->pos;
        while (P->pos < end && P->s[P->pos] != '\\') {
            if (P->s[P->pos] < 0x20) {
                free(buf);
                FAILAT(P->pos, "control character in a string (must be escaped)");
            }
            P->pos++;
        }
        size_t bad;
        td_err ue;
        if (td_utf8_check(P->s + run, P->pos - run, &bad, &ue) != 0) {
            free(buf);
            FAILAT(run + bad, "invalid UTF-8 in a string");
        }
        memcpy(buf + len, P->s + run, P->pos - run);
        len += P->pos - run;
        if (P->pos == end) break;
        size_t esc = P->pos++; /* the backslash; the loop above kept pos+1 < = end */
        unsigned char c = P->s[P->pos++];
        const char *simple = strchr("\"\\/bfnrt", c);
        if (c && simple) {
            static const char map[] = "\"\\/\b\f\n\r\t";
            buf[len++] = map[simple - "\"\\/bfnrt"];
            continue;
        }
        uint32_t cp, lo;
        if (c != 'u' || P->pos + 4 > end || hex4(P->s + P->pos, &cp)) {
            free(buf);
            FAILAT(esc, "invalid escape in a string");
        }
        P->pos += 4;
        if (cp >= 0xD800 && cp < 0xDC00) {
            if (P->pos + 6 > end || P->s[P->pos] != '\\' || P->s[P->pos + 1] != 'u' ||
                hex4(P->s + P->pos + 2, &lo) || lo < 0xDC00 || lo > 0xDFFF) {
                free(buf);
                FAILAT(esc, "unpaired surrogate escape in a string");
            }
            P->pos += 6;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            free(buf);
            FAILAT(esc, "unpaired surrogate escape in a string");
        }
        len += (size_t)td_utf8_put(cp, (unsigned char *)buf + len); /* <= 6 escaped bytes */
    }
    P->pos = end + 1;
    buf[len] = 0;
    *out = buf;
    *out_len = len;
    return 0;
}

static int parse_number(parser *P, td_jv *v) {
    size_t start = P->pos, i = P->pos;
    const unsigned char *s = P->s;
    if (i < P->n && s[i] == '-') i++;
    if (i >= P->n || s[i] < '0' || s[i] > '9') FAILAT(start, "invalid number");
    if (s[i] == '0') i++;
    else
        while (i < P->n && s[i] >= '0' && s[i] <= '9') i++;
    int integral = 1;
    if (i < P->n && s[i] == '.') {
        integral = 0;
        if (++i >= P->n || s[i] < '0' || s[i] > '9') FAILAT(start, "invalid number");
        while (i < P->n && s[i] >= '0' && s[i] <= '9') i++;
    }
    if (i < P->n && (s[i] == 'e' || s[i] == 'E')) {
        integral = 0;
        if (++i < P->n && (s[i] == '+' || s[i] == '-')) i++;
        if (i >= P->n || s[i] < '0' || s[i] > '9') FAILAT(start, "invalid number");
        while (i < P->n && s[i] >= '0' && s[i] <= '9') i++;
    }
    if (i - start > 512) FAILAT(start, "number longer than 512 characters");
    char tmp[520];
    memcpy(tmp, s + start, i - start);
    tmp[i - start] = 0;
    v->type = TD_JV_NUM;
    v->num = strtod(tmp, NULL);
    if (integral) { /* exact int64, or not an integer for the getters */
        int neg = s[start] == '-';
        uint64_t mag = 0, lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
        v->is_int = 1;
        for (size_t k = start + (size_t)neg; k < i; k++) {
            uint64_t d = (uint64_t)(s[k] - '0');
            if (mag > (lim - d) / 10) {
                v->is_int = 0;
                break;
            }
            mag = mag * 10 + d;
        }
        if (v->is_int) v->i = neg ? (int64_t)(0 - mag) : (int64_t)mag;
    }
    P->pos = i;
    return 0;
}

static int literal(parser *P, const char *word) {
    size_t k = strlen(word);
    if (P->n - P->pos < k || memcmp(P->s + P->pos, word, k) != 0)
        FAILAT(P->pos, "unexpected character");
    P->pos += k;
    return 0;
}

static int cmp_keys(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int parse_value(parser *P, td_jv *v, int depth);

/* Items of an array or object; grows the arrays by doubling. */
static int parse_container(parser *P, td_jv *v, int depth, int obj) {
    size_t open = P->pos++;
    if (depth >= TD_JSON_MAX_DEPTH) FAILAT(open, "nesting deeper than %d", TD_JSON_MAX_DEPTH);
    v->type = obj ? TD_JV_OBJ : TD_JV_ARR;
    int cap = 0;
    skip_ws(P);
    if (P->pos < P->n && P->s[P->pos] == (obj ? '}' : ']')) {
        P->pos++;
        return 0;
    }
    for (;;) {
        if (v->n == cap) {
            int nc = cap ? 2 * cap : 4;
            td_jv *it = realloc(v->items, sizeof *it * (size_t)nc);
            if (it) v->items = it;
            char **ks = obj ? realloc(v->keys, sizeof *ks * (size_t)nc) : NULL;
            if (ks) v->keys = ks;
            if (!it || (obj && !ks)) FAILAT(P->pos, "out of memory");
            cap = nc;
        }
        /* counted before it is filled, so an error frees what was parsed */
        td_jv *it = &v->items[v->n];
        memset(it, 0, sizeof *it);
        if (obj) v->keys[v->n] = NULL;
        v->n++;
        skip_ws(P);
        if (obj) {
            if (P->pos >= P->n || P->s[P->pos] != '"') FAILAT(P->pos, "expected a key string");
            size_t at = P->pos, klen;
            if (parse_string(P, &v->keys[v->n - 1], &klen)) return -1;
            if (strlen(v->keys[v->n - 1]) != klen) FAILAT(at, "key contains \\u0000");
            skip_ws(P);
            if (P->pos >= P->n || P->s[P->pos] != ':') FAILAT(P->pos, "expected ':'");
            P->pos++;
        }
        if (parse_value(P, it, depth + 1)) return -1;
        skip_ws(P);
        if (P->pos < P->n && P->s[P->pos] == ',') {
            P->pos++;
            continue;
        }
        if (P->pos < P->n && P->s[P->pos] == (obj ? '}' : ']')) break;
        FAILAT(P->pos, "expected ',' or '%c'", obj ? '}' : ']');
    }
    size_t close = P->pos++;
    if (obj && v->n > 1) { /* duplicates: sort a copy of the key pointers */
        char **sorted = malloc(sizeof *sorted * (size_t)v->n);
        if (!sorted) FAILAT(close, "out of memory");
        memcpy(sorted, v->keys, sizeof *sorted * (size_t)v->n);
        qsort(sorted, (size_t)v->n, sizeof *sorted, cmp_keys);
        for (int k = 1; k < v->n; k++)
            if (strcmp(sorted[k - 1], sorted[k]) == 0) {
                char name[200];
                snprintf(name, sizeof name, "%.160s", sorted[k]);
                free(sorted);
                FAILAT(open, "object has the key \"%s\" twice", name);
            }
        free(sorted);
    }
    return 0;
}

static int parse_value_at(parser *P, td_jv *v, int depth) {
    switch (P->s[P->pos]) {
    case '{': return parse_container(P, v, depth, 1);
    case '[': return parse_container(P, v, depth, 0);
    case '"': v->type = TD_JV_STR; return parse_string(P, &v->str, &v->len);
    case 't': v->type = TD_JV_BOOL; v->boolean = 1; return literal(P, "true");
    case 'f': v->type = TD_JV_BOOL; return literal(P, "false");
    case 'n': v->type = TD_JV_NULL; return literal(P, "null");
    default: return parse_number(P, v);
    }
}

static int parse_value(parser *P, td_jv *v, int depth) {
    skip_ws(P);
    if (P->pos >= P->n) FAILAT(P->pos, "unexpected end of text");
    if (++P->nodes > TD_JSON_MAX_NODES) FAILAT(P->pos, "more than %d values", TD_JSON_MAX_NODES);
    v->at = P->pos;
    int rc = parse_value_at(P, v, depth);
    v->end = P->pos;
    return rc;
}

static void free_inner(td_jv *v) {
    if (v->type == TD_JV_ARR || v->type == TD_JV_OBJ) {
        for (int k = 0; k < v->n; k++) {
            free_inner(&v->items[k]);
            if (v->keys) free(v->keys[k]);
        }
        free(v->items);
        free(v->keys);
    }
    free(v->str);
}

void td_json_free(td_jv *v) {
    if (!v) return;
    free_inner(v);
    free(v);
}

int td_json_parse(const char *text, size_t n, td_jv **out, td_err *e) {
    *out = NULL;
    parser P = {(const unsigned char *)text, n, 0, 0, e};
    td_jv *v = calloc(1, sizeof *v);
    if (!v) return td_err_set(e, "byte 0: out of memory");
    if (parse_value(&P, v, 0)) {
        td_json_free(v);
        return -1;
    }
    skip_ws(&P);
    if (P.pos != n) {
        td_json_free(v);
        return td_err_set(e, "byte %zu: text after the JSON value", P.pos);
    }
    *out = v;
    return 0;
}

const td_jv *td_json_get(const td_jv *obj, const char *key) {
    if (!obj || obj->type != TD_JV_OBJ) return NULL;
    for (int k = 0; k < obj->n; k++)
        if (strcmp(obj->keys[k], key) == 0) return &obj->items[k];
    return NULL;
}

int td_json_get_int(const td_jv *obj, const char *key, int64_t lo, int64_t hi, int64_t *out,
                    td_err *e) {
    const td_jv *v = td_json_get(obj, key);
    if (!v) return td_err_set(e, "field %s: missing", key);
    if (v->type != TD_JV_NUM || !v->is_int) return td_err_set(e, "field %s: not an integer", key);
    if (v->i < lo || v->i > hi)
        return td_err_set(e, "field %s: %" PRId64 " is out of [%" PRId64 ",%" PRId64 "]", key, v->i,
                          lo, hi);
    *out = v->i;
    return 0;
}

int td_json_get_str(const td_jv *obj, const char *key, const char **out, td_err *e) {
    const td_jv *v = td_json_get(obj, key);
    if (!v) return td_err_set(e, "field %s: missing", key);
    if (v->type != TD_JV_STR) return td_err_set(e, "field %s: not a string", key);
    *out = v->str;
    return 0;
}

int td_json_put_str(char *buf, size_t cap, size_t len, const char *s) {
    size_t k = len;
#define PUT(ch)                                                                                    \
    do {                                                                                           \
        if (k + 1 >= cap) goto full; /* room for the NUL */                                        \
        buf[k++] = (char)(ch);                                                                     \
    } while (0)
    PUT('"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') {
            PUT('\\');
            PUT(*p);
        } else if (*p < 0x20) {
            char h[8];
            snprintf(h, sizeof h, "\\u%04x", *p);
            for (int j = 0; h[j]; j++) PUT(h[j]);
        } else {
            PUT(*p);
        }
    }
    PUT('"');
#undef PUT
    buf[k] = 0;
    if (k <= INT32_MAX) return (int)k;
full:
    if (len < cap) buf[len] = 0;
    return -1;
}
