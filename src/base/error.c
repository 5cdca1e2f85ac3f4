/* Errors: one clear line, then an exit that takes the whole job down. */
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "trident/base.h"
#include "trident/stop.h"

static void (*g_abort_hook)(int code);

void td_set_abort_hook(void (*hook)(int code)) { g_abort_hook = hook; }

static void (*g_exit_hook)(void);

void td_set_exit_hook(void (*hook)(void)) { g_exit_hook = hook; }

_Noreturn void td_exit_ok(void) {
    fflush(stdout);
    if (g_exit_hook) g_exit_hook();
    exit(0);
}

static void (*g_cleanup[4])(void);

void td_set_fail_cleanup(void (*fn)(void)) {
    for (int i = 0; i < 4; i++) {
        if (g_cleanup[i] == fn) return;
        if (!g_cleanup[i]) {
            g_cleanup[i] = fn;
            return;
        }
    }
    TD_ASSERT(!"more than 4 fail cleanups");
}

/* An error exit abandons the run's memory on purpose: the frames that hold
 * it never return (td_fail is _Noreturn, so the compiler need not even keep
 * their pointers). In a sanitizer build (-DTD_SANITIZE=ON) LeakSanitizer's
 * at-exit check would report all of it as leaks after the one error line
 * and turn status 2 into 23, so there _exit skips it (and every atexit
 * handler: none is ours, and all streams are flushed first). Exits through
 * exit() (status 0 included) are still checked. */
_Noreturn void td_exit(int code) {
    fflush(NULL);
#if defined(__SANITIZE_ADDRESS__)
    _exit(code);
#else
    exit(code);
#endif
}

_Noreturn void td_die(int code) {
    fflush(stdout);
    fflush(stderr);
    for (int i = 0; i < 4 && g_cleanup[i]; i++) g_cleanup[i]();
    if (g_abort_hook) g_abort_hook(code); /* MPI_Abort: peers must not hang */
    td_exit(code);
}

static _Noreturn void fail_msg(int code, char *msg) {
    /* One line, always: a file name or value with a newline or another
     * control byte in it (the user's input) must not split the message. */
    for (unsigned char *c = (unsigned char *)msg; *c; c++)
        if (*c < 0x20 || *c == 0x7F) *c = '?';
    /* Most bad input is seen by every rank at once (all read the same flags
     * and files). Rank 0 reports and its abort ends the job; the others hold
     * back a moment so the user reads one line, not one per rank. A rank that
     * alone sees its error still reports it, just later. 2 s, not less: on a
     * loaded 2-core machine (8 ranks, a build beside them) rank 0's abort
     * took more than 0.75 s to reach the others, which then printed too. */
    if (g_abort_hook && td_log_rank() > 0) {
        /* the abort's SIGTERM must end this rank, not be taken for a stop;
         * one that came already most likely was it: rank 0 reports */
        if (td_stop_signals_default() == SIGTERM) td_exit(code);
        usleep(2000 * 1000);
    }
    fflush(stdout);
    fprintf(stderr, "trident: error: %s\n", msg);
    td_die(code);
}

_Noreturn void td_fail(const char *fmt, ...) {
    char msg[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fail_msg(TD_EXIT_USAGE, msg);
}

_Noreturn void td_fail_code(int code, const char *fmt, ...) {
    char msg[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fail_msg(code, msg);
}

_Noreturn void td_assert_failed(const char *cond, const char *file, int line) {
    fflush(stdout);
    fprintf(stderr, "trident: internal error: assertion '%s' failed at %s:%d\n", cond, file, line);
    fflush(stderr);
    if (g_abort_hook) g_abort_hook(3);
    abort();
}
