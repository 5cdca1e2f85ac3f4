/* The calibration profile (formats_profile.h): parse and format. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/formats_json.h"
#include "trident/formats_profile.h"

#define FAIL(...) return td_err_set(e, __VA_ARGS__)

static const char *op_names[TD_PROF_NOPS] = {"allreduce", "allgather"};
const char *td_prof_op_name(int op) { return op >= 0 && op < TD_PROF_NOPS ? op_names[op] : "?"; }

/* A finite number in [lo, hi] (hi inclusive; lo exclusive when open). */
static int get_num(const td_jv *o, const char *where, const char *key, double lo, int open, double hi, double *out,
                   td_err *e) {
    const td_jv *v = td_json_get(o, key);
    if (!v) FAIL("field %s%s: missing", where, key);
    if (v->type != TD_JV_NUM || !isfinite(v->num)) FAIL("field %s%s: not a number", where, key);
    if (v->num > hi || v->num < lo || (open && v->num == lo))
        FAIL("field %s%s: %g, valid is %s%g..%g", where, key, v->num, open ? "above " : "", lo, hi);
    *out = v->num;
    return 0;
}

static int get_int(const td_jv *o, const char *where, const char *key, int lo, int hi, int *out, td_err *e) {
    const td_jv *v = td_json_get(o, key);
    if (!v) FAIL("field %s%s: missing", where, key);
    if (v->type != TD_JV_NUM || !v->is_int) FAIL("field %s%s: not an integer", where, key);
    if (v->i < lo || v->i > hi) FAIL("field %s%s: %lld, valid is %d..%d", where, key, (long long)v->i, lo, hi);
    *out = (int)v->i;
    return 0;
}

/* The array `key` of objects, lo to TD_PROFILE_MAX of them. */
static int get_list(const td_jv *o, const char *key, int lo, const td_jv **arr, td_err *e) {
    *arr = td_json_get(o, key);
    if (!*arr) FAIL("field %s: missing", key);
    if ((*arr)->type != TD_JV_ARR) FAIL("field %s: not an array", key);
    if ((*arr)->n < lo || (*arr)->n > TD_PROFILE_MAX)
        FAIL("field %s: %d entries, valid is %d..%d", key, (*arr)->n, lo, TD_PROFILE_MAX);
    for (int k = 0; k < (*arr)->n; k++)
        if ((*arr)->items[k].type != TD_JV_OBJ) FAIL("field %s[%d]: not an object", key, k);
    return 0;
}

static int parse_root(const td_jv *r, td_profile *p, td_err *e) {
    if (r->type != TD_JV_OBJ) FAIL("not a JSON object");
    const char *fmt;
    if (td_json_get_str(r, "format", &fmt, e) != 0) return -1;
    if (strcmp(fmt, "trident-profile") != 0) FAIL("field format: '%.40s', expected 'trident-profile'", fmt);
    int version;
    if (get_int(r, "", "version", 1, 1000, &version, e)) return -1;
    if (version == 1) FAIL("field version: 1, made by an older trident (no optimizer rates; GEMMs measured in cache)");
    if (version != 2) FAIL("field version: %d, this build reads version 2", version);
    if (get_int(r, "", "cores", 1, 1 << 16, &p->cores, e)) return -1;
    if (get_num(r, "", "mem_bytes", 0, 1, 1e18, &p->mem_bytes, e)) return -1;
    const td_jv *a;
    char w[48];
    if (get_list(r, "gemm", 1, &a, e)) return -1;
    p->n_gemm = a->n;
    for (int k = 0; k < a->n; k++) {
        snprintf(w, sizeof w, "gemm[%d].", k);
        if (get_int(&a->items[k], w, "threads", 1, 1 << 16, &p->gemm[k].threads, e) ||
            get_int(&a->items[k], w, "n", 1, 1 << 16, &p->gemm[k].n, e) ||
            get_num(&a->items[k], w, "gflops", 0, 1, 1e9, &p->gemm[k].gflops, e))
            return -1;
    }
    if (get_list(r, "mem_bw", 1, &a, e)) return -1;
    p->n_bw = a->n;
    for (int k = 0; k < a->n; k++) {
        snprintf(w, sizeof w, "mem_bw[%d].", k);
        if (get_int(&a->items[k], w, "threads", 1, 1 << 16, &p->bw[k].threads, e) ||
            get_num(&a->items[k], w, "bytes", 0, 1, 1e15, &p->bw[k].bytes, e) ||
            get_num(&a->items[k], w, "gbs", 0, 1, 1e9, &p->bw[k].gbs, e))
            return -1;
    }
    if (get_list(r, "optimizer", 1, &a, e)) return -1;
    p->n_opt = a->n;
    for (int k = 0; k < a->n; k++) {
        snprintf(w, sizeof w, "optimizer[%d].", k);
        if (get_int(&a->items[k], w, "threads", 1, 1 << 16, &p->opt[k].threads, e) ||
            get_num(&a->items[k], w, "melems", 0, 1, 1e9, &p->opt[k].melems, e))
            return -1;
    }
    const td_jv *pp = td_json_get(r, "p2p");
    if (!pp || pp->type != TD_JV_OBJ) FAIL("field p2p: missing or not an object");
    if (get_num(pp, "p2p.", "alpha_us", 0, 0, 1e9, &p->p2p_alpha_us, e) ||
        get_num(pp, "p2p.", "gbs", 0, 1, 1e9, &p->p2p_gbs, e))
        return -1;
    if (get_list(r, "collectives", 0, &a, e)) return -1;
    p->n_coll = a->n;
    for (int k = 0; k < a->n; k++) {
        const td_jv *x = &a->items[k];
        const char *op;
        snprintf(w, sizeof w, "collectives[%d].", k);
        if (td_json_get_str(x, "op", &op, e) != 0) return td_err_set(e, "field %sop: missing or not a string", w);
        p->coll[k].op = -1;
        for (int o = 0; o < TD_PROF_NOPS; o++)
            if (strcmp(op, op_names[o]) == 0) p->coll[k].op = o;
        if (p->coll[k].op < 0) FAIL("field %sop: '%.40s', valid is allreduce or allgather", w, op);
        if (get_int(x, w, "ranks", 2, 1 << 20, &p->coll[k].ranks, e) ||
            get_num(x, w, "alpha_us", 0, 0, 1e9, &p->coll[k].alpha_us, e) ||
            get_num(x, w, "gbs", 0, 1, 1e9, &p->coll[k].gbs, e))
            return -1;
    }
    return 0;
}

int td_profile_parse(const char *text, size_t n, td_profile *p, td_err *e) {
    memset(p, 0, sizeof *p);
    td_jv *r;
    if (td_json_parse(text, n, &r, e) != 0) return -1;
    int rc = parse_root(r, p, e);
    td_json_free(r);
    if (rc) memset(p, 0, sizeof *p);
    return rc;
}

char *td_profile_format(const td_profile *p) {
    size_t cap = 4096 + (size_t)(p->n_gemm + p->n_bw + p->n_opt + p->n_coll) * 160;
    char *s = malloc(cap);
    if (!s) return NULL;
    size_t n = 0;
#define PUT(...) n += (size_t)snprintf(s + n, cap - n, __VA_ARGS__)
    PUT("{\"format\": \"trident-profile\", \"version\": 2, \"cores\": %d, \"mem_bytes\": %.17g,\n \"gemm\": [",
        p->cores, p->mem_bytes);
    for (int k = 0; k < p->n_gemm; k++)
        PUT("%s\n  {\"threads\": %d, \"n\": %d, \"gflops\": %.17g}", k ? "," : "", p->gemm[k].threads, p->gemm[k].n,
            p->gemm[k].gflops);
    PUT("],\n \"mem_bw\": [");
    for (int k = 0; k < p->n_bw; k++)
        PUT("%s\n  {\"threads\": %d, \"bytes\": %.17g, \"gbs\": %.17g}", k ? "," : "", p->bw[k].threads,
            p->bw[k].bytes, p->bw[k].gbs);
    PUT("],\n \"optimizer\": [");
    for (int k = 0; k < p->n_opt; k++)
        PUT("%s\n  {\"threads\": %d, \"melems\": %.17g}", k ? "," : "", p->opt[k].threads, p->opt[k].melems);
    PUT("],\n \"p2p\": {\"alpha_us\": %.17g, \"gbs\": %.17g},\n \"collectives\": [", p->p2p_alpha_us, p->p2p_gbs);
    for (int k = 0; k < p->n_coll; k++)
        PUT("%s\n  {\"op\": \"%s\", \"ranks\": %d, \"alpha_us\": %.17g, \"gbs\": %.17g}", k ? "," : "",
            td_prof_op_name(p->coll[k].op), p->coll[k].ranks, p->coll[k].alpha_us, p->coll[k].gbs);
    PUT("]}\n");
#undef PUT
    return s;
}
