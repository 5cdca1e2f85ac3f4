/* flags: table-driven command-line parsing with one clear error per mistake. */
#ifndef TRIDENT_FLAGS_H
#define TRIDENT_FLAGS_H

#ifdef __cplusplus
extern "C" {
#endif

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
 * out-of-range number, a flag given twice (or two aliases of one value:
 * flags sharing ptr) is one error line naming the flag, the value(s) and
 * the valid range, and exits non-zero. `cmd` names the subcommand in
 * messages.
 *
 * Every table also takes two built-in flags (docs/config.md):
 *   --config FILE   a JSON object of flag values, keys the long names
 *                   without the dashes ({"layers": 4, "data": "x.txt"});
 *                   numbers for N and X flags, strings for S, true/false
 *                   for switches, null for "not given". Applied before the
 *                   command line, which overrides it. An unknown key, a
 *                   wrong type or a bad value is one error naming the key
 *                   and the file. Strings from it live until the process
 *                   exits. (A table with its own --config, import's HF
 *                   config.json, has no built-in one.)
 *   --print-config  print the effective values as such a JSON object (one
 *                   line, loadable by --config) and exit 0.
 * td_flags_parse does --print-config itself, right after parsing;
 * td_flags_parse_info leaves it to the caller (its values may depend on
 * more than the flags: train --resume). */
void td_flags_parse(const char *cmd, const td_flag *flags, int n, int argc, char **argv);

/* Where a flag's value came from. */
enum { TD_FROM_DEFAULT = 0, TD_FROM_CONFIG, TD_FROM_ARGV };
typedef struct {
    unsigned char *from; /* caller's [n]: each flag's origin (aliases share theirs) */
    const char *config;  /* the --config FILE, or NULL */
    int print_config;    /* --print-config was given: the caller prints and exits 0 */
} td_flags_info;
void td_flags_parse_info(const char *cmd, const td_flag *flags, int n, int argc, char **argv,
                         td_flags_info *info);
/* The origin of the flag whose value is *ptr (TD_FROM_DEFAULT if none is). */
int td_flags_from(const td_flag *flags, int n, const td_flags_info *info, const void *ptr);
/* Every flag's value as one line of JSON ({"layers": 4, ...}, the format
 * --config reads; an alias is written once, under its first name; a number
 * outside its range, which only a default meaning "unset" can be, and an
 * unset string are null). Like a config file's strings it lives until the
 * process exits (the flag layer keeps it; never freed by the caller). */
char *td_flags_json(const td_flag *flags, int n);
/* A copy of s that lives until the process exits, for a flag value set
 * from elsewhere than argv (a config file, a checkpoint's run_config). */
char *td_flags_strdup(const char *s);
/* "usage: trident CMD [flags]", then the table: one line per flag ("  --name
 * KIND  help; valid RANGE"), the format docs/flags.md is generated from
 * (scripts/gen_flag_docs.py). A command with positional arguments prints
 * its own usage line and then td_flags_print_table. */
void td_flags_print(const char *cmd, const td_flag *flags, int n);
void td_flags_print_table(const td_flag *flags, int n);

#ifdef __cplusplus
}
#endif

#endif
