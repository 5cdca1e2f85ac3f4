/* The safetensors header (formats_safetensors.h). A header that passes
 * td_st_header_parse describes tensors that lie wholly inside the file and
 * tile its data exactly, so a reader can copy begin..end of each without
 * further checks. The rules follow the reference implementation: offsets
 * are contiguous from 0 in sorted order and the last ends where the file
 * does. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/formats_safetensors.h"

static const char *const dtype_names[] = {"F32", "BF16", "F16", "I32", "I64", "U8"};
static const size_t dtype_sizes[] = {4, 2, 2, 4, 8, 1};
#define N_DTYPES 6

size_t td_st_dtype_size(td_st_dtype d) {
    return (unsigned)d < N_DTYPES ? dtype_sizes[d] : 0;
}
const char *td_st_dtype_name(td_st_dtype d) {
    return (unsigned)d < N_DTYPES ? dtype_names[d] : "?";
}

int td_st_header_len(const void *first8, uint64_t file_len, uint64_t *n, td_err *e) {
    const unsigned char *p = first8;
    *n = 0;
    if (file_len < 8)
        return td_err_set(e, "header length: the file is %" PRIu64 " bytes, shorter than the 8-byte "
                             "length prefix (truncated)", file_len);
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    if (v < 2) return td_err_set(e, "header length: %" PRIu64 " bytes, too short for a JSON object", v);
    if (v > TD_ST_MAX_HEADER)
        return td_err_set(e, "header length: %" PRIu64 " bytes, more than the %llu-byte limit", v,
                          TD_ST_MAX_HEADER);
    if (v > file_len - 8)
        return td_err_set(e, "header length %" PRIu64 " (+ the 8-byte prefix) exceeds the file's size %" PRIu64
                             " (truncated or not safetensors)", v, file_len);
    *n = v;
    return 0;
}

/* One tensor entry: its three fields, checked; *bytes = numel * size. */
static int parse_tensor(const char *name, const td_jv *o, uint64_t data_len, td_st_tensor *t,
                        td_err *e) {
    if (o->type != TD_JV_OBJ) return td_err_set(e, "tensor \"%.200s\": not a JSON object", name);
    for (int k = 0; k < o->n; k++)
        if (strcmp(o->keys[k], "dtype") && strcmp(o->keys[k], "shape") &&
            strcmp(o->keys[k], "data_offsets"))
            return td_err_set(e, "tensor \"%.200s\": unknown field \"%.100s\"", name, o->keys[k]);
    const char *dt;
    td_err ge;
    if (td_json_get_str(o, "dtype", &dt, &ge))
        return td_err_set(e, "tensor \"%.200s\": %s", name, ge.msg);
    int d = 0;
    while (d < N_DTYPES && strcmp(dt, dtype_names[d])) d++;
    if (d == N_DTYPES)
        return td_err_set(e, "tensor \"%.200s\": field dtype: \"%.40s\" is not one of F32, BF16, F16, "
                             "I32, I64, U8", name, dt);
    t->dtype = (td_st_dtype)d;
    const td_jv *sh = td_json_get(o, "shape");
    if (!sh) return td_err_set(e, "tensor \"%.200s\": field shape: missing", name);
    if (sh->type != TD_JV_ARR || sh->n > TD_ST_MAX_DIMS)
        return td_err_set(e, "tensor \"%.200s\": field shape: not an array of at most %d integers",
                          name, TD_ST_MAX_DIMS);
    uint64_t numel = 1;
    t->ndim = sh->n;
    for (int k = 0; k < sh->n; k++) {
        const td_jv *x = &sh->items[k];
        if (x->type != TD_JV_NUM || !x->is_int || x->i < 0)
            return td_err_set(e, "tensor \"%.200s\": field shape: dimension %d is not a non-negative "
                                 "integer", name, k);
        t->shape[k] = x->i;
        if (__builtin_mul_overflow(numel, (uint64_t)x->i, &numel))
            return td_err_set(e, "tensor \"%.200s\": field shape: the element count overflows", name);
    }
    uint64_t bytes;
    if (__builtin_mul_overflow(numel, (uint64_t)dtype_sizes[d], &bytes))
        return td_err_set(e, "tensor \"%.200s\": field shape: the byte count overflows", name);
    const td_jv *off = td_json_get(o, "data_offsets");
    if (!off) return td_err_set(e, "tensor \"%.200s\": field data_offsets: missing", name);
    if (off->type != TD_JV_ARR || off->n != 2)
        return td_err_set(e, "tensor \"%.200s\": field data_offsets: not an array [begin, end]", name);
    for (int k = 0; k < 2; k++)
        if (off->items[k].type != TD_JV_NUM || !off->items[k].is_int || off->items[k].i < 0)
            return td_err_set(e, "tensor \"%.200s\": field data_offsets: entry %d is not a "
                                 "non-negative integer", name, k);
    t->begin = (uint64_t)off->items[0].i;
    t->end = (uint64_t)off->items[1].i;
    if (t->end < t->begin)
        return td_err_set(e, "tensor \"%.200s\": field data_offsets: end %" PRIu64 " before begin %"
                             PRIu64, name, t->end, t->begin);
    if (t->end - t->begin != bytes)
        return td_err_set(e, "tensor \"%.200s\": field data_offsets: [%" PRIu64 ", %" PRIu64 "] holds %"
                             PRIu64 " bytes, but shape and dtype %s need %" PRIu64, name, t->begin,
                          t->end, t->end - t->begin, dtype_names[d], bytes);
    if (t->end > data_len)
        return td_err_set(e, "tensor \"%.200s\": field data_offsets: end %" PRIu64 " is past the %"
                             PRIu64 " bytes of data in the file (truncated?)", name, t->end, data_len);
    return 0;
}

static int cmp_begin(const void *a, const void *b) {
    const td_st_tensor *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int parse_meta(const td_jv *m, td_st_header *h, td_err *e) {
    if (m->type != TD_JV_OBJ) return td_err_set(e, "field __metadata__: not a JSON object");
    h->meta_key = calloc((size_t)m->n + 1, sizeof(char *));
    h->meta_val = calloc((size_t)m->n + 1, sizeof(char *));
    if (!h->meta_key || !h->meta_val) return td_err_set(e, "field __metadata__: out of memory");
    for (int k = 0; k < m->n; k++) {
        if (m->items[k].type != TD_JV_STR)
            return td_err_set(e, "field __metadata__: entry \"%.200s\" is not a string", m->keys[k]);
        h->meta_key[k] = m->keys[k];
        h->meta_val[k] = m->items[k].str;
    }
    h->n_meta = m->n;
    return 0;
}

static int parse_body(const td_st_header *hc, td_st_header *h, uint64_t data_len, td_err *e) {
    const td_jv *root = hc->json;
    if (root->type != TD_JV_OBJ) return td_err_set(e, "header: the JSON is not an object");
    h->t = calloc((size_t)root->n + 1, sizeof *h->t);
    if (!h->t) return td_err_set(e, "header: out of memory");
    for (int k = 0; k < root->n; k++) {
        if (strcmp(root->keys[k], "__metadata__") == 0) {
            if (parse_meta(&root->items[k], h, e)) return -1;
            continue;
        }
        td_st_tensor *t = &h->t[h->n++];
        t->name = root->keys[k];
        if (parse_tensor(t->name, &root->items[k], data_len, t, e)) return -1;
    }
    qsort(h->t, (size_t)h->n, sizeof *h->t, cmp_begin);
    uint64_t at = 0;
    for (int k = 0; k < h->n; k++) {
        const td_st_tensor *t = &h->t[k];
        if (t->begin < at)
            return td_err_set(e, "tensor \"%.200s\": field data_offsets: [%" PRIu64 ", %" PRIu64
                                 "] overlaps tensor \"%.200s\" (which ends at %" PRIu64 ")",
                              t->name, t->begin, t->end, h->t[k - 1].name, at);
        if (t->begin > at)
            return td_err_set(e, "tensor \"%.200s\": field data_offsets: begins at %" PRIu64
                                 ", leaving a gap after byte %" PRIu64 " (tensors must be contiguous)",
                              t->name, t->begin, at);
        at = t->end;
    }
    if (at != data_len)
        return td_err_set(e, "header: the tensors cover %" PRIu64 " bytes of data, but the file has %"
                             PRIu64 " after the header", at, data_len);
    return 0;
}

int td_st_header_parse(const char *hdr, uint64_t n, uint64_t file_len, td_st_header *h, td_err *e) {
    memset(h, 0, sizeof *h);
    if (n > TD_ST_MAX_HEADER || file_len < 8 || n > file_len - 8)
        return td_err_set(e, "header length: %" PRIu64 " bytes do not fit a %" PRIu64 "-byte file",
                          n, file_len);
    td_err je;
    if (td_json_parse(hdr, (size_t)n, &h->json, &je)) {
        /* text after the object: most likely a length prefix that runs
         * past the header into the tensor data, and said so */
        size_t end;
        if (sscanf(je.msg, "byte %zu: text after the JSON value", &end) == 1 && strstr(je.msg, "text after"))
            return td_err_set(e, "header length %" PRIu64 " runs past the header's JSON object: text follows it at "
                                 "byte %zu of the header (a wrong length prefix, or text after the header)", n, end);
        return td_err_set(e, "header JSON: %s", je.msg);
    }
    h->header_len = n;
    h->data_off = 8 + n;
    if (parse_body(h, h, file_len - h->data_off, e)) {
        td_st_header_free(h);
        return -1;
    }
    return 0;
}

void td_st_header_free(td_st_header *h) {
    free(h->t);
    free(h->meta_key);
    free(h->meta_val);
    td_json_free(h->json);
    memset(h, 0, sizeof *h);
}

const td_st_tensor *td_st_find(const td_st_header *h, const char *name) {
    for (int k = 0; k < h->n; k++)
        if (strcmp(h->t[k].name, name) == 0) return &h->t[k];
    return NULL;
}

/* Appends s (not escaped) to the header buffer. */
static int put(char *buf, size_t cap, size_t *len, const char *s) {
    size_t k = strlen(s);
    if (*len + k + 1 > cap) return -1;
    memcpy(buf + *len, s, k + 1);
    *len += k;
    return 0;
}
static int put_name(char *buf, size_t cap, size_t *len, const char *s) {
    int r = td_json_put_str(buf, cap, *len, s);
    if (r < 0) return -1;
    *len = (size_t)r;
    return 0;
}

int td_st_header_format(td_st_tensor *t, int n, const char *const *meta_key,
                        const char *const *meta_val, int n_meta, char **out, size_t *out_len,
                        td_err *e) {
    *out = NULL;
    *out_len = 0;
    /* the bound: every name escaped (6x) and quoted, every field at its widest */
    size_t cap = 64, at = 0;
    for (int k = 0; k < n_meta; k++) cap += 6 * (strlen(meta_key[k]) + strlen(meta_val[k])) + 8;
    for (int k = 0; k < n; k++) {
        if (t[k].ndim < 0 || t[k].ndim > TD_ST_MAX_DIMS || (unsigned)t[k].dtype >= N_DTYPES)
            return td_err_set(e, "tensor \"%.200s\": bad dtype or %d dimensions", t[k].name, t[k].ndim);
        cap += 6 * strlen(t[k].name) + 100 + 22 * (size_t)(t[k].ndim + 2);
        uint64_t numel = 1, bytes;
        for (int d = 0; d < t[k].ndim; d++)
            if (t[k].shape[d] < 0 || __builtin_mul_overflow(numel, (uint64_t)t[k].shape[d], &numel))
                return td_err_set(e, "tensor \"%.200s\": bad shape", t[k].name);
        if (__builtin_mul_overflow(numel, (uint64_t)dtype_sizes[t[k].dtype], &bytes) ||
            __builtin_add_overflow(at, bytes, &t[k].end) || t[k].end > (uint64_t)INT64_MAX)
            return td_err_set(e, "tensor \"%.200s\": the data offsets overflow", t[k].name);
        t[k].begin = at;
        at = t[k].end;
    }
    char *buf = malloc(cap + 8);
    if (!buf) return td_err_set(e, "header: out of memory");
    size_t len = 8;
    char num[64];
    int bad = put(buf, cap + 8, &len, "{");
    if (n_meta > 0) {
        bad |= put(buf, cap + 8, &len, "\"__metadata__\":{");
        for (int k = 0; k < n_meta; k++) {
            bad |= put(buf, cap + 8, &len, k ? "," : "");
            bad |= put_name(buf, cap + 8, &len, meta_key[k]);
            bad |= put(buf, cap + 8, &len, ":");
            bad |= put_name(buf, cap + 8, &len, meta_val[k]);
        }
        bad |= put(buf, cap + 8, &len, n ? "}," : "}");
    }
    for (int k = 0; k < n; k++) {
        bad |= put_name(buf, cap + 8, &len, t[k].name);
        snprintf(num, sizeof num, ":{\"dtype\":\"%s\",\"shape\":[", dtype_names[t[k].dtype]);
        bad |= put(buf, cap + 8, &len, num);
        for (int d = 0; d < t[k].ndim; d++) {
            snprintf(num, sizeof num, "%s%" PRId64, d ? "," : "", t[k].shape[d]);
            bad |= put(buf, cap + 8, &len, num);
        }
        snprintf(num, sizeof num, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}%s", t[k].begin,
                 t[k].end, k + 1 < n ? "," : "");
        bad |= put(buf, cap + 8, &len, num);
    }
    bad |= put(buf, cap + 8, &len, "}");
    while (!bad && len % 8) bad |= put(buf, cap + 8, &len, " "); /* data 8-byte aligned */
    if (bad) {
        free(buf);
        return td_err_set(e, "header: longer than its computed bound (internal error)");
    }
    uint64_t N = len - 8;
    for (int i = 0; i < 8; i++) buf[i] = (char)(unsigned char)(N >> (8 * i));
    *out = buf;
    *out_len = len;
    return 0;
}
