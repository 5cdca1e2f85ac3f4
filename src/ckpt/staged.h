/* Outputs of export and import written under a temporary name beside
 * their final one (PATH.tmp.PID) and renamed into place when complete
 * (src/ckpt/staged.c), so that a failed or interrupted write never leaves
 * a partial output under the final name and never touches an existing one.
 *
 * Existing outputs are refused unless --overwrite, and --overwrite replaces
 * only what the command itself writes: a regular file (a file output), or a
 * directory all of whose entries `ours` accepts (a directory output; an
 * empty directory is always taken). A directory is replaced atomically
 * (renameat2 RENAME_EXCHANGE, then the old tree is removed); a file by
 * rename. Every write, fsync and close is checked: a failure is one line
 * "CMD: --out PATH: FILE: what failed: strerror" and exit TD_EXIT_IO (74) after every
 * temporary output of this process is removed. Single-threaded; for the
 * one-process commands (export, import), never under MPI. */
#ifndef TD_CKPT_STAGED_H
#define TD_CKPT_STAGED_H

#include <limits.h>
#include <stddef.h>

typedef struct {
    const char *cmd;         /* "export" or "import": the messages' prefix */
    const char *flag;        /* "--out" */
    char path[PATH_MAX];     /* the final name */
    char tmp[PATH_MAX + 32]; /* where it is written */
    int dir, overwrite;
    int existed; /* path was there at td_staged_begin (so a failure says it is as it was) */
    int fd;      /* a file output: its descriptor until commit */
    int live;    /* tmp exists and is ours to remove */
} td_staged;

/* Before any work: refuses `path` (one error line, exit 2) if it exists and
 * is not replaceable as described above. `what` names it in the message
 * ("--out m.safetensors", "config.json beside --out"). ours may be NULL for
 * a file output. */
void td_staged_check(const char *cmd, const char *what, const char *path, int dir, int overwrite,
                     int (*ours)(const char *entry));
/* Creates the temporary output: a file (s->fd) or a directory. */
void td_staged_begin(td_staged *s, const char *cmd, const char *path, int dir, int overwrite);
/* A file `name` inside a directory output, created; returns its descriptor. */
int td_staged_create(td_staged *s, const char *name);
/* Writes n bytes to fd: the file output's own (name NULL) or a file inside
 * a directory output (name). */
void td_staged_write(td_staged *s, int fd, const char *name, const void *p, size_t n);
/* fsync and close a file inside a directory output. */
void td_staged_close(td_staged *s, int fd, const char *name);
/* fsyncs (the file, or the directory), renames into place, fsyncs the
 * parent; an old directory replaced is removed after the swap. */
void td_staged_commit(td_staged *s);
/* The failure line (file: name inside a directory output, or NULL) and
 * exit, after every live temporary output is removed. */
_Noreturn void td_staged_fail(td_staged *s, const char *name, const char *what, int err);
/* Removes every live temporary output (for an abort hook: an error
 * elsewhere, say in td_ckpt_save, leaves none behind). */
void td_staged_remove_all(void);

#endif
