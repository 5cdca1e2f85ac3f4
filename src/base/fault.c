/* Test-only fault injection (include/trident/fault.h): the one place that
 * reads and validates TRIDENT_FAULT. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "trident/base.h"
#include "trident/fault.h"

static td_fault g_fault;
static int g_parsed;

static int parse_int(const char *s, char **end) {
    errno = 0;
    long v = strtol(s, end, 10);
    if (*end == s || errno || v < 0 || v > 1000000000 || (s[0] < '0' || s[0] > '9')) return -1;
    return (int)v;
}

const td_fault *td_fault_get(void) {
    if (g_parsed) return &g_fault;
    g_parsed = 1;
    memset(&g_fault, 0, sizeof g_fault);
    const char *s = getenv("TRIDENT_FAULT");
    if (!s || !*s) return &g_fault;
    const char *restart = getenv("TRIDENT_RESTART");
    if (restart && *restart) {
        char *end;
        int n = parse_int(restart, &end);
        TD_CHECK(n >= 0 && *end == 0, "TRIDENT_RESTART=%s: must be a non-negative integer (the "
                 "attempt number scripts/launch.sh sets; faults fire at attempt 0 only)", restart);
        if (n > 0) return &g_fault; /* a restarted job runs clean */
    }
    static const struct {
        const char *name;
        td_fault_kind kind;
        int has_rank;
    } kinds[] = {{"nan-loss:", TD_FAULT_NAN_LOSS, 1},
                 {"nan-grad:", TD_FAULT_NAN_GRAD, 1},
                 {"grad-inf:", TD_FAULT_GRAD_INF, 1},
                 {"grad-inf-stuck:", TD_FAULT_GRAD_INF_STUCK, 1},
                 {"save-fail:", TD_FAULT_SAVE_FAIL, 0},
                 {"save-kill:", TD_FAULT_SAVE_KILL, 1},
                 {"skip-embed-sum:", TD_FAULT_SKIP_EMBED_SUM, 0},
                 {"kill:", TD_FAULT_KILL, 1},
                 {"stop:", TD_FAULT_STOP, 1},
                 {"slow-load:", TD_FAULT_SLOW_LOAD, 0},
                 {"route-flip:", TD_FAULT_ROUTE_FLIP, 1},
                 {"host-read:", TD_FAULT_HOST_READ, 1}};
    for (int k = 0; k < (int)(sizeof kinds / sizeof kinds[0]); k++) {
        size_t n = strlen(kinds[k].name);
        if (strncmp(s, kinds[k].name, n) != 0) continue;
        char *end;
        int step = parse_int(s + n, &end), rank = 0;
        int ok = step >= 0;
        if (ok && *end == ':' && kinds[k].has_rank) {
            rank = parse_int(end + 1, &end);
            ok = rank >= 0;
        }
        ok = ok && *end == 0;
        TD_CHECK(ok, "TRIDENT_FAULT=%s: the step%s must be a non-negative integer (test-only fault "
                 "switch: %sSTEP%s)", s, kinds[k].has_rank ? " and rank" : "", kinds[k].name,
                 kinds[k].has_rank ? "[:RANK]" : "");
        g_fault = (td_fault){kinds[k].kind, step, rank};
        return &g_fault;
    }
    td_fail("TRIDENT_FAULT=%s is not known; the test-only faults are nan-loss:STEP[:RANK], "
            "nan-grad:STEP[:RANK], grad-inf:STEP[:RANK], grad-inf-stuck:STEP[:RANK], save-fail:STEP, "
            "save-kill:STEP[:RANK], skip-embed-sum:STEP, kill:STEP[:RANK], stop:STEP[:RANK], slow-load:MS, "
            "route-flip:STEP[:RANK] and host-read:STEP[:RANK]", s);
}

void td_fault_reload(void) { g_parsed = 0; }

void td_fault_slow_load(void) {
    const td_fault *f = td_fault_get();
    if (f->kind != TD_FAULT_SLOW_LOAD) return;
    const char *release = getenv("TRIDENT_FAULT_RELEASE");
    if (!release || !*release) {
        struct timespec ts = {f->step / 1000, (long)(f->step % 1000) * 1000000L};
        nanosleep(&ts, NULL); /* EINTR: a stop signal came, the caller looks at it next */
        return;
    }
    /* in 10 ms slices, until the file appears, the time is up or a signal came */
    for (int ms = 0; ms < f->step; ms += 10) {
        if (unlink(release) == 0) return; /* the token for this sleep */
        struct timespec ts = {0, 10 * 1000000L};
        if (nanosleep(&ts, NULL) != 0) return;
    }
}

int td_fault_at(td_fault_kind kind, int step, int rank) {
    const td_fault *f = td_fault_get();
    return f->kind == kind && f->step == step && (rank < 0 || f->rank == rank);
}

void td_fault_signal_at(int step, int rank) {
    int kill = td_fault_at(TD_FAULT_KILL, step, rank);
    if (!kill && !td_fault_at(TD_FAULT_STOP, step, rank)) return;
    fflush(stdout);
    fprintf(stderr, "trident: rank %d: TRIDENT_FAULT: %s at step %d\n", rank,
            kill ? "SIGKILL" : "SIGSTOP", step);
    fflush(stderr);
    raise(kill ? SIGKILL : SIGSTOP);
}
