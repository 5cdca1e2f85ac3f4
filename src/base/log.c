/* Rank-aware logging: rank 0 speaks; others only with --verbose, prefixed. */
#include <stdarg.h>
#include <stdio.h>

#include "trident/base.h"

static int g_rank, g_verbose, g_has_identity;
static char g_coords[96]; /* "dp=1 pp=0 tp=1", from the grid (empty: rank alone) */

void td_log_set_identity(int rank, const char *coords, int verbose) {
    g_rank = rank, g_verbose = verbose;
    snprintf(g_coords, sizeof g_coords, "%s", coords ? coords : "");
    g_has_identity = 1;
}
void td_log_set_verbose(int verbose) { g_verbose = verbose; }
int td_log_rank(void) { return g_rank; }
int td_log_verbose(void) { return g_verbose; }

void td_log(const char *fmt, ...) {
    if (g_rank != 0) return;
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fflush(stdout);
}

void td_vlog(const char *fmt, ...) {
    if (!g_verbose) return;
    char line[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (g_has_identity)
        printf("[rank %d%s%s] %s", g_rank, g_coords[0] ? " " : "", g_coords, line);
    else
        printf("%s", line);
    fflush(stdout);
}
