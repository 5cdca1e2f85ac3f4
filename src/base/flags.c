/* Command-line flags: --name value or --name=value; booleans take no value. */
#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/base.h"
#include "trident/flags.h"
#include "flags_internal.h"

void td_flags_print(const char *cmd, const td_flag *flags, int n) {
    printf("usage: trident %s [flags]\n", cmd);
    td_flags_print_table(flags, n);
}

void td_flags_print_table(const td_flag *flags, int n) {
    for (int i = 0; i < n; i++) {
        const char *kind = flags[i].type == TD_FLAG_INT || flags[i].type == TD_FLAG_U64 ? " N"
                           : flags[i].type == TD_FLAG_STR                              ? " S"
                           : flags[i].type == TD_FLAG_BOOL                             ? ""
                                                                                       : " X";
        char left[64];
        snprintf(left, sizeof left, "%s%s", flags[i].name, kind);
        /* two spaces at least before the help (what the flag tables' readers split on) */
        int w = (int)strlen(left) < 22 ? 22 : (int)strlen(left) + 1;
        if (flags[i].range) printf("  %-*s %s; valid %s\n", w, left, flags[i].help, flags[i].range);
        else printf("  %-*s %s\n", w, left, flags[i].help);
    }
    /* every table's built-ins (td_flags_parse_info), unless it has its own */
    int own = 0;
    for (int i = 0; i < n; i++) own |= strcmp(flags[i].name, "--config") == 0;
    if (!own)
        printf("  %-22s %s\n", "--config S",
           "JSON object of flag values, keys the long names without the dashes ({\"steps\": 100}); "
           "the command line overrides it (docs/config.md)");
    printf("  %-22s %s\n", "--print-config", "print every flag's effective value as JSON (loadable by --config) and exit");
}

/* "[lo, hi)" and the like (see flags.h); a malformed range is a bug in the
 * flag table, not in the user's input. */
static void parse_range(const char *r, double *lo, double *hi, int *lo_open, int *hi_open) {
    char *end;
    TD_ASSERT(r[0] == '[' || r[0] == '(');
    *lo_open = r[0] == '(';
    *lo = strtod(r + 1, &end);
    TD_ASSERT(end != r + 1 && *end == ',');
    const char *h = end + 1;
    *hi = strtod(h, &end);
    TD_ASSERT(end != h && (*end == ']' || *end == ')') && end[1] == '\0');
    *hi_open = *end == ')';
}

int td_flag_in_range(const char *r, double x) {
    if (!r) return 1;
    double lo, hi;
    int lo_open, hi_open;
    parse_range(r, &lo, &hi, &lo_open, &hi_open);
    return (lo_open ? x > lo : x >= lo) && (hi_open ? x < hi : x <= hi);
}

/* Only what a reader would call a plain integer: strtol/strtoull also take
 * leading spaces, a '+', and (strtoull) a '-' that wraps around, so that
 * --seed " -1" used to become 18446744073709551615. */
static int plain_integer(const char *s, int allow_minus) {
    if (allow_minus && *s == '-') s++;
    if (!*s) return 0;
    for (; *s; s++)
        if (*s < '0' || *s > '9') return 0;
    return 1;
}

void td_flag_set_value(const char *cmd, const td_flag *f, const char *val) {
    char *end = NULL;
    const char *valid = f->range ? f->range : "any";
    errno = 0;
    switch (f->type) {
    case TD_FLAG_INT: {
        TD_CHECK(plain_integer(val, 1), "%s %s: '%s' is not an integer; valid: %s", cmd, f->name, val,
                 f->range ? f->range : "[-2147483648, 2147483647]");
        long long x = strtoll(val, &end, 10);
        TD_CHECK(!errno && x >= INT32_MIN && x <= INT32_MAX && td_flag_in_range(f->range, (double)x),
                 "%s %s: '%s' is out of range; valid: %s", cmd, f->name, val,
                 f->range ? f->range : "[-2147483648, 2147483647]");
        *(int *)f->ptr = (int)x;
        break;
    }
    case TD_FLAG_U64: {
        TD_CHECK(plain_integer(val, 0),
                 "%s %s: '%s' is not a non-negative integer (digits only); valid: %s", cmd, f->name,
                 val, f->range ? f->range : "[0, 18446744073709551615]");
        unsigned long long x = strtoull(val, &end, 10);
        TD_CHECK(!errno && td_flag_in_range(f->range, (double)x), "%s %s: '%s' is out of range; valid: %s",
                 cmd, f->name, val, f->range ? f->range : "[0, 18446744073709551615]");
        *(unsigned long long *)f->ptr = x;
        break;
    }
    case TD_FLAG_FLOAT:
    case TD_FLAG_DOUBLE: {
        /* strtod also reads leading spaces, "inf" and "nan"; ERANGE is left
         * to the checks below (an underflow to a denormal is harmless) */
        double x = strtod(val, &end);
        TD_CHECK(*val && !isspace((unsigned char)*val) && !*end, "%s %s: '%s' is not a number; valid: %s",
                 cmd, f->name, val, valid);
        TD_CHECK(isfinite(x), "%s %s: '%s' is not a finite number; valid: %s", cmd, f->name, val, valid);
        if (f->type == TD_FLAG_FLOAT) {
            /* checked on the double before narrowing: 1e39 would become inf */
            TD_CHECK(fabs(x) <= FLT_MAX, "%s %s: '%s' does not fit a 32-bit float (largest %g); valid: %s",
                     cmd, f->name, val, (double)FLT_MAX, valid);
            float y = (float)x;
            TD_CHECK(x == 0.0 || y != 0.0f,
                     "%s %s: '%s' is too small for a 32-bit float (smallest %g); valid: %s", cmd, f->name,
                     val, (double)FLT_TRUE_MIN, valid);
            /* the range holds for the value the run uses, after rounding */
            TD_CHECK(td_flag_in_range(f->range, (double)y), "%s %s: '%s' is out of range; valid: %s", cmd,
                     f->name, val, valid);
            *(float *)f->ptr = y;
        } else {
            TD_CHECK(td_flag_in_range(f->range, x), "%s %s: '%s' is out of range; valid: %s", cmd, f->name, val,
                     valid);
            *(double *)f->ptr = x;
        }
        break;
    }
    case TD_FLAG_STR: *(const char **)f->ptr = val; break;
    case TD_FLAG_BOOL: *(int *)f->ptr = 1; break;
    }
}

/* The first flag of the table writing *ptr: aliases (--grad-accum,
 * --micro-batches) are one value. */
static int canonical(const td_flag *flags, int n, int k) {
    for (int j = 0; j < k; j++)
        if (flags[j].ptr == flags[k].ptr) return j;
    return k;
}

/* A built-in flag given twice is the same mistake as a table's. */
static void once(const char *cmd, const char *name, const char **seen, const char *val) {
    if (*seen && !*val) td_fail("%s: %s given twice; give it once", cmd, name); /* a switch */
    if (*seen) td_fail("%s: %s given twice ('%s', then '%s'); give it once", cmd, name, *seen, val);
    *seen = val;
}

void td_flags_parse_info(const char *cmd, const td_flag *flags, int n, int argc, char **argv,
                         td_flags_info *info) {
    /* the command line is read first (duplicates, --config), applied last:
     * it overrides the config file */
    int *used = calloc((size_t)n + 1, sizeof(int));         /* [canonical] the flag given, + 1 */
    const char **val = calloc((size_t)n + 1, sizeof(char *)); /* [canonical] its value */
    TD_CHECK(used && val, "%s: out of memory parsing flags", cmd);
    const char *config = NULL, *print = NULL;
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            if (td_log_rank() == 0) td_flags_print(cmd, flags, n); /* once under mpirun */
            td_exit_ok();
        }
        TD_CHECK(strncmp(arg, "--", 2) == 0, "%s: unexpected argument '%s' (flags start with --; see "
                                             "trident %s --help)", cmd, arg, cmd);
        const char *eq = strchr(arg, '=');
        size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
        if (len == 14 && strncmp(arg, "--print-config", 14) == 0) {
            TD_CHECK(!eq, "%s --print-config takes no value", cmd);
            once(cmd, "--print-config", &print, "");
            continue;
        }
        int k = -1;
        for (int j = 0; j < n; j++)
            if (strlen(flags[j].name) == len && strncmp(flags[j].name, arg, len) == 0) k = j;
        /* a table's own --config (import's HF config.json) hides the built-in */
        int is_config = k < 0 && len == 8 && strncmp(arg, "--config", 8) == 0;
        TD_CHECK(k >= 0 || is_config, "%s: unknown flag '%.*s' (see trident %s --help for the list)", cmd,
                 (int)len, arg, cmd);
        const char *name = is_config ? "--config" : flags[k].name, *v = eq ? eq + 1 : NULL;
        if (!is_config && flags[k].type == TD_FLAG_BOOL) {
            TD_CHECK(!eq, "%s %s takes no value", cmd, name);
            v = "";
        } else if (!v) {
            TD_CHECK(i + 1 < argc, "%s %s needs a value", cmd, name);
            v = argv[++i];
        }
        if (is_config) {
            once(cmd, "--config", &config, v);
            continue;
        }
        int c = canonical(flags, n, k);
        if (used[c]) {
            const char *before = flags[used[c] - 1].name;
            if (flags[k].type == TD_FLAG_BOOL && used[c] - 1 == k)
                td_fail("%s: %s given twice; give it once", cmd, name);
            if (used[c] - 1 == k)
                td_fail("%s: %s given twice ('%s', then '%s'); give it once", cmd, name, val[c], v);
            td_fail("%s: %s '%s' and %s '%s' set the same value (%s is another name for %s); give one", cmd,
                    before, val[c], name, v, name, before);
        }
        used[c] = k + 1, val[c] = v;
    }
    unsigned char *from = info ? info->from : NULL;
    if (from) memset(from, TD_FROM_DEFAULT, (size_t)n);
    if (config) td_flags_load_config(cmd, flags, n, config, from);
    for (int c = 0; c < n; c++) {
        if (!used[c]) continue;
        td_flag_set_value(cmd, &flags[used[c] - 1], flags[c].type == TD_FLAG_BOOL ? "1" : val[c]);
        if (from)
            for (int j = 0; j < n; j++)
                if (flags[j].ptr == flags[c].ptr) from[j] = TD_FROM_ARGV;
    }
    free(used);
    free(val);
    if (info) {
        info->config = config;
        info->print_config = print != NULL;
    } else if (print) {
        if (td_log_rank() == 0) printf("%s\n", td_flags_json(flags, n));
        td_exit_ok();
    }
}

void td_flags_parse(const char *cmd, const td_flag *flags, int n, int argc, char **argv) {
    td_flags_parse_info(cmd, flags, n, argc, argv, NULL);
}

int td_flags_from(const td_flag *flags, int n, const td_flags_info *info, const void *ptr) {
    for (int k = 0; k < n; k++)
        if (flags[k].ptr == ptr) return info->from[k];
    return TD_FROM_DEFAULT;
}
