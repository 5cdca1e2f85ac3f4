/* --config FILE and --print-config: a command's flag values as one JSON
 * object, keys the long names without the dashes (flags.h, docs/config.md).
 * Both directions go through the flag table, so every table-driven command
 * has them, and a value from a file is checked exactly as the same value on
 * the command line (td_flag_set_value on the number's own text). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "flags_internal.h"
#include "trident/base.h"
#include "trident/files.h"
#include "trident/formats_json.h"

#define TD_CONFIG_MAX_BYTES (1u << 20) /* far above any table's values */

/* Flag values live as long as argv does: the copies made here stay
 * reachable from this list until exit (no owner could free them: options
 * structs are copied and outlive their parse). */
static char **g_kept;
static int g_n_kept, g_cap_kept;
static char *keep(char *p) {
    TD_CHECK(p, "out of memory keeping a flag value");
    if (g_n_kept == g_cap_kept) {
        g_cap_kept = 2 * g_cap_kept + 16;
        g_kept = realloc(g_kept, sizeof(char *) * (size_t)g_cap_kept);
        TD_CHECK(g_kept, "out of memory keeping a flag value");
    }
    g_kept[g_n_kept++] = p;
    return p;
}

char *td_flags_strdup(const char *s) { return keep(strdup(s)); }

static const char *type_wanted(td_flag_type t) {
    return t == TD_FLAG_INT || t == TD_FLAG_U64 ? "an integer"
           : t == TD_FLAG_STR                   ? "a string"
           : t == TD_FLAG_BOOL                  ? "true or false"
                                                : "a number";
}

static const char *type_got(const td_jv *v) {
    static const char *names[] = {"null", "a boolean", "a number", "a string", "an array", "an object"};
    return names[v->type];
}

/* The file's text (NUL-terminated, malloc'd); every failure names it. */
static char *read_config(const char *cmd, const char *path, size_t *len) {
    struct stat st;
    const char *why;
    int fd = td_open_input(path, &st, &why);
    TD_CHECK(fd >= 0, "%s --config %s: cannot read it: %s", cmd, path, why);
    TD_CHECK((uint64_t)st.st_size <= TD_CONFIG_MAX_BYTES, "%s --config %s: %lld bytes; a config file is at most 1 MiB",
             cmd, path, (long long)st.st_size);
    char *text = malloc((size_t)st.st_size + 1);
    TD_CHECK(text, "%s --config %s: out of memory", cmd, path);
    TD_CHECK(td_pread_all(fd, text, (size_t)st.st_size, 0) == 0, "%s --config %s: reading it failed", cmd, path);
    close(fd);
    text[st.st_size] = 0;
    *len = (size_t)st.st_size;
    return text;
}

void td_flags_load_config(const char *cmd, const td_flag *flags, int n, const char *path, unsigned char *from) {
    size_t len;
    char *text = read_config(cmd, path, &len);
    td_jv *root;
    td_err e;
    TD_CHECK(td_json_parse(text, len, &root, &e) == 0, "%s --config %s: not JSON: %s", cmd, path, e.msg);
    TD_CHECK(root->type == TD_JV_OBJ, "%s --config %s: %s, not a JSON object of flag values ({\"steps\": 100})", cmd,
             path, type_got(root));
    int *key_of = malloc(sizeof(int) * ((size_t)n + 1)); /* [flag] the key that set its value, or -1 */
    TD_CHECK(key_of, "%s --config %s: out of memory", cmd, path);
    for (int k = 0; k < n; k++) key_of[k] = -1;
    for (int i = 0; i < root->n; i++) {
        const char *key = root->keys[i];
        const td_jv *v = &root->items[i];
        int k = -1;
        for (int j = 0; j < n; j++)
            if (strcmp(flags[j].name + 2, key) == 0) k = j;
        TD_CHECK(strcmp(key, "config") != 0 && strcmp(key, "print-config") != 0,
                 "%s --config %s: key \"%s\": a command-line flag only, not a config key", cmd, path, key);
        TD_CHECK(k >= 0, "%s --config %s: unknown key \"%.64s\" (keys are the flags of trident %s --help without "
                 "the dashes)", cmd, path, key, cmd);
        const td_flag *f = &flags[k];
        if (v->type == TD_JV_NULL) continue; /* not given: the default stays */
        for (int j = 0; j < n; j++)
            if (flags[j].ptr == f->ptr && key_of[j] >= 0)
                td_fail("%s --config %s: keys \"%s\" and \"%s\" set the same value (%s is another name for %s); "
                        "give one", cmd, path, root->keys[key_of[j]], key, f->name, flags[j].name);
        int number = f->type != TD_FLAG_STR && f->type != TD_FLAG_BOOL;
        int ok = number ? v->type == TD_JV_NUM : f->type == TD_FLAG_STR ? v->type == TD_JV_STR : v->type == TD_JV_BOOL;
        TD_CHECK(ok, "%s --config %s: key \"%s\": %s, but %s takes %s", cmd, path, key, type_got(v), f->name,
                 type_wanted(f->type));
        /* the checks of the command line, under the key's name */
        char label[512], name[96];
        snprintf(label, sizeof label, "%s --config %s, key", cmd, path);
        snprintf(name, sizeof name, "\"%s\"", key);
        td_flag as_key = *f;
        as_key.name = name;
        if (number) {
            char num[64];
            size_t w = v->end - v->at;
            TD_CHECK(w < sizeof num, "%s \"%s\": %.40s... is too long a number", label, key, text + v->at);
            memcpy(num, text + v->at, w);
            num[w] = 0;
            td_flag_set_value(label, &as_key, num);
        } else if (f->type == TD_FLAG_STR) {
            TD_CHECK(strlen(v->str) == v->len, "%s \"%s\": the string holds a NUL character (\\u0000)", label, key);
            *(const char **)f->ptr = td_flags_strdup(v->str); /* lives until exit (flags.h) */
        } else {
            *(int *)f->ptr = v->boolean;
        }
        for (int j = 0; j < n; j++)
            if (flags[j].ptr == f->ptr) {
                key_of[j] = i;
                if (from) from[j] = TD_FROM_CONFIG;
            }
    }
    free(key_of);
    td_json_free(root);
    free(text);
}

typedef struct {
    char *p;
    size_t n, cap;
} jbuf;

static void jput(jbuf *b, const char *s) {
    size_t k = strlen(s);
    if (b->n + k + 1 > b->cap) {
        b->cap = 2 * (b->n + k + 1);
        b->p = realloc(b->p, b->cap);
        TD_CHECK(b->p, "out of memory printing the configuration");
    }
    memcpy(b->p + b->n, s, k + 1);
    b->n += k;
}

/* The shortest decimal that reads back as the same value (a float's %.9g,
 * a double's %.17g at most). */
static void shortest(char *out, size_t cap, double x, int is_float) {
    for (int prec = is_float ? 6 : 15; prec <= (is_float ? 9 : 17); prec++) {
        snprintf(out, cap, "%.*g", prec, x);
        double back = strtod(out, NULL);
        if (is_float ? (float)back == (float)x : back == x) return;
    }
}

char *td_flags_json(const td_flag *flags, int n) {
    jbuf b = {NULL, 0, 0};
    jput(&b, "{");
    int first = 1;
    for (int k = 0; k < n; k++) {
        const td_flag *f = &flags[k];
        int alias = 0;
        for (int j = 0; j < k; j++) alias |= flags[j].ptr == f->ptr;
        if (alias) continue;
        char v[128];
        switch (f->type) {
        case TD_FLAG_INT: {
            int x = *(const int *)f->ptr;
            if (td_flag_in_range(f->range, (double)x)) snprintf(v, sizeof v, "%d", x);
            else snprintf(v, sizeof v, "null");
            break;
        }
        case TD_FLAG_U64: {
            unsigned long long x = *(const unsigned long long *)f->ptr;
            if (td_flag_in_range(f->range, (double)x)) snprintf(v, sizeof v, "%llu", x);
            else snprintf(v, sizeof v, "null");
            break;
        }
        case TD_FLAG_FLOAT:
        case TD_FLAG_DOUBLE: {
            double x = f->type == TD_FLAG_FLOAT ? (double)*(const float *)f->ptr : *(const double *)f->ptr;
            if (isfinite(x) && td_flag_in_range(f->range, x)) shortest(v, sizeof v, x, f->type == TD_FLAG_FLOAT);
            else snprintf(v, sizeof v, "null");
            break;
        }
        case TD_FLAG_BOOL: snprintf(v, sizeof v, "%s", *(const int *)f->ptr ? "true" : "false"); break;
        case TD_FLAG_STR: snprintf(v, sizeof v, "null"); break;
        }
        char key[96];
        snprintf(key, sizeof key, "%s\"%s\": ", first ? "" : ", ", f->name + 2);
        jput(&b, key);
        first = 0;
        const char *s = f->type == TD_FLAG_STR ? *(const char *const *)f->ptr : NULL;
        if (!s) {
            jput(&b, v);
            continue;
        }
        size_t need = 6 * strlen(s) + 3; /* every byte escaped, quotes, NUL */
        if (b.n + need > b.cap) {
            b.cap = 2 * (b.n + need);
            b.p = realloc(b.p, b.cap);
            TD_CHECK(b.p, "out of memory printing the configuration");
        }
        int k2 = td_json_put_str(b.p, b.cap, b.n, s);
        TD_ASSERT(k2 >= 0);
        b.n = (size_t)k2;
    }
    jput(&b, "}");
    return keep(b.p);
}
