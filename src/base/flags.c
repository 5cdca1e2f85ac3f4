/* Command-line flags: --name value or --name=value; booleans take no value. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/base.h"
#include "trident/flags.h"

void td_flags_print(const char *cmd, const td_flag *flags, int n) {
    printf("usage: trident %s [flags]\n", cmd);
    for (int i = 0; i < n; i++) {
        const char *kind = flags[i].type == TD_FLAG_INT || flags[i].type == TD_FLAG_U64 ? " N"
                           : flags[i].type == TD_FLAG_STR                              ? " S"
                           : flags[i].type == TD_FLAG_BOOL                             ? ""
                                                                                       : " X";
        char left[64];
        snprintf(left, sizeof left, "%s%s", flags[i].name, kind);
        printf("  %-22s %s\n", left, flags[i].help);
    }
}

static void set_value(const char *cmd, const td_flag *f, const char *val) {
    char *end = NULL;
    errno = 0;
    switch (f->type) {
    case TD_FLAG_INT: {
        long x = strtol(val, &end, 10);
        TD_CHECK(*val && !*end && !errno && x >= INT32_MIN && x <= INT32_MAX,
                 "%s %s: '%s' is not an integer", cmd, f->name, val);
        *(int *)f->ptr = (int)x;
        break;
    }
    case TD_FLAG_U64: {
        unsigned long long x = strtoull(val, &end, 10);
        TD_CHECK(*val && !*end && !errno && val[0] != '-', "%s %s: '%s' is not a non-negative integer",
                 cmd, f->name, val);
        *(unsigned long long *)f->ptr = x;
        break;
    }
    case TD_FLAG_FLOAT:
    case TD_FLAG_DOUBLE: {
        double x = strtod(val, &end);
        TD_CHECK(*val && !*end && !errno, "%s %s: '%s' is not a number", cmd, f->name, val);
        if (f->type == TD_FLAG_FLOAT) *(float *)f->ptr = (float)x;
        else *(double *)f->ptr = x;
        break;
    }
    case TD_FLAG_STR: *(const char **)f->ptr = val; break;
    case TD_FLAG_BOOL: *(int *)f->ptr = 1; break;
    }
}

void td_flags_parse(const char *cmd, const td_flag *flags, int n, int argc, char **argv) {
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            td_flags_print(cmd, flags, n);
            exit(0);
        }
        TD_CHECK(strncmp(arg, "--", 2) == 0, "%s: unexpected argument '%s' (flags start with --; see "
                                             "trident %s --help)", cmd, arg, cmd);
        const char *eq = strchr(arg, '=');
        size_t len = eq ? (size_t)(eq - arg) : strlen(arg);
        const td_flag *f = NULL;
        for (int k = 0; k < n; k++)
            if (strlen(flags[k].name) == len && strncmp(flags[k].name, arg, len) == 0) f = &flags[k];
        TD_CHECK(f, "%s: unknown flag '%.*s' (see trident %s --help for the list)", cmd, (int)len, arg,
                 cmd);
        if (f->type == TD_FLAG_BOOL) {
            TD_CHECK(!eq, "%s %s takes no value", cmd, f->name);
            set_value(cmd, f, "1");
            continue;
        }
        const char *val = eq ? eq + 1 : NULL;
        if (!val) {
            TD_CHECK(i + 1 < argc, "%s %s needs a value", cmd, f->name);
            val = argv[++i];
        }
        set_value(cmd, f, val);
    }
}
