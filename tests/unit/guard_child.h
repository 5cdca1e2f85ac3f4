/* Forked children for the guard device's tests: run a function that should
 * die, capture its stderr and status, and check the guard's one fault line.
 * Fork before any op starts OpenMP's threads. */
#ifndef TD_TEST_GUARD_CHILD_H
#define TD_TEST_GUARD_CHILD_H

#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "unit/test_util.h"

typedef struct {
    int status;
    char err[2048];
} child_result;

/* Runs fn(arg) in a child with stderr captured; the child exits 0 if fn
 * returns. */
static child_result in_child(void (*fn)(void *), void *arg) {
    child_result r = {0};
    int fd[2];
    TD_ASSERT(pipe(fd) == 0);
    fflush(stdout);
    pid_t pid = fork();
    TD_ASSERT(pid >= 0);
    if (pid == 0) {
        close(fd[0]);
        dup2(fd[1], 2);
        fn(arg);
        _exit(0);
    }
    close(fd[1]);
    size_t n = 0;
    ssize_t got;
    while (n < sizeof r.err - 1 && (got = read(fd[0], r.err + n, sizeof r.err - 1 - n)) > 0)
        n += (size_t)got;
    r.err[n] = 0;
    close(fd[0]);
    TD_ASSERT(waitpid(pid, &r.status, 0) == pid);
    return r;
}

/* Reads that the compiler keeps. */
static volatile float g_sink;

static void expect_fault_line(const char *what, child_result r, const char *line) {
    TU_EXPECT(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 3, "%s: exit status 3, got status %#x",
              what, r.status);
    TU_EXPECT(strstr(r.err, line) != NULL, "%s: stderr has '%s'; it was '%s'", what, line, r.err);
    int lines = 0;
    for (const char *c = r.err; *c; c++) lines += *c == '\n';
    TU_EXPECT(lines == 1, "%s: one line on stderr, got %d: '%s'", what, lines, r.err);
}

#endif
