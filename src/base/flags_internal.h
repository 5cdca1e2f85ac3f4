/* Private to src/base's flag parser (flags.c) and its config files
 * (flags_config.c). */
#ifndef TRIDENT_FLAGS_INTERNAL_H
#define TRIDENT_FLAGS_INTERNAL_H

#include "trident/flags.h"

/* Whether x lies in a flag's range ("[lo, hi)", NULL: any). */
int td_flag_in_range(const char *range, double x);
/* Parses val as f's type, checks it against f's range and stores it; a bad
 * value is one error "CMD NAME: 'VAL' is ...; valid: RANGE". */
void td_flag_set_value(const char *cmd, const td_flag *f, const char *val);
/* --config path: its keys' values into the table (from[] marked
 * TD_FROM_CONFIG where not NULL); any mistake is one error naming the key
 * and the file. */
void td_flags_load_config(const char *cmd, const td_flag *flags, int n, const char *path, unsigned char *from);

#endif
