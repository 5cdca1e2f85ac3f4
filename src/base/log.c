/* Rank-aware logging: rank 0 speaks; others only with --verbose, prefixed. */
#include <stdarg.h>
#include <stdio.h>

#include "trident/base.h"

static int g_rank, g_dp, g_pp, g_tp, g_verbose, g_has_identity;

void td_log_set_identity(int rank, int dp, int pp, int tp, int verbose) {
    g_rank = rank, g_dp = dp, g_pp = pp, g_tp = tp, g_verbose = verbose;
    g_has_identity = 1;
}
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
        printf("[rank %d dp=%d pp=%d tp=%d] %s", g_rank, g_dp, g_pp, g_tp, line);
    else
        printf("%s", line);
    fflush(stdout);
}
