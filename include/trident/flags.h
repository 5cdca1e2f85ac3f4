/* flags: table-driven command-line parsing with one clear error per mistake. */
#ifndef TRIDENT_FLAGS_H
#define TRIDENT_FLAGS_H

typedef enum { TD_FLAG_INT, TD_FLAG_FLOAT, TD_FLAG_DOUBLE, TD_FLAG_STR, TD_FLAG_BOOL, TD_FLAG_U64 } td_flag_type;

typedef struct {
    const char *name;  /* "--layers" */
    td_flag_type type;
    void *ptr;
    const char *help;
    /* Valid values of a number, as an interval: "[lo, hi]", with "(" or ")"
     * for an open end and "inf" for no bound ("(0, inf)", "[0, 1)"). Checked
     * when the flag is given, never against the default, so a default may
     * stand for "unset" (--vocab -1). NULL: any value of the type. Numbers
     * are always finite, plain (no leading space) and fit their C type. */
    const char *range;
} td_flag;

/* Parses argv[0..argc) against flags[0..n); "--help" prints the table and
 * exits 0; an unknown flag, a missing value, a malformed, non-finite or
 * out-of-range number is one error line naming the flag, the value and the
 * valid range, and exits non-zero. `cmd` names the subcommand
 * in messages. */
void td_flags_parse(const char *cmd, const td_flag *flags, int n, int argc, char **argv);
/* "usage: trident CMD [flags]", then the table: one line per flag ("  --name
 * KIND  help; valid RANGE"), the format docs/flags.md is generated from
 * (scripts/gen_flag_docs.py). A command with positional arguments prints
 * its own usage line and then td_flags_print_table. */
void td_flags_print(const char *cmd, const td_flag *flags, int n);
void td_flags_print_table(const td_flag *flags, int n);

#endif
