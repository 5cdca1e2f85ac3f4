/* Outputs written under a temporary name and renamed into place (staged.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "staged.h"
#include "trident/base.h"
#include "trident/files.h"

/* The outputs being written, removed on any failure (a safetensors export
 * stages two: the model and config.json beside it). */
#define MAX_LIVE 4
static td_staged *g_live[MAX_LIVE];

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *f) {
    return remove(p) == 0 ? 0 : -1;
}
/* Removes a file or a whole tree (never following symbolic links). */
static int remove_tree(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) return errno == ENOENT ? 0 : -1;
    if (!S_ISDIR(st.st_mode)) return unlink(path);
    return nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

void td_staged_remove_all(void) {
    for (int i = 0; i < MAX_LIVE; i++) {
        td_staged *s = g_live[i];
        if (!s) continue;
        g_live[i] = NULL;
        if (s->fd >= 0) close(s->fd), s->fd = -1;
        if (s->live) remove_tree(s->tmp), s->live = 0;
    }
}

static void forget(td_staged *s) {
    for (int i = 0; i < MAX_LIVE; i++)
        if (g_live[i] == s) g_live[i] = NULL;
}

_Noreturn void td_staged_fail(td_staged *s, const char *name, const char *what, int err) {
    td_staged_remove_all();
    char file[PATH_MAX + 300] = "";
    if (name) snprintf(file, sizeof file, " %s/%s:", s->path, name);
    td_fail_code(TD_EXIT_IO, "%s: %s %s:%s %s: %s; %s%s", s->cmd, s->flag, s->path, file, what, strerror(err),
            s->existed ? s->path : "nothing was written",
            s->existed ? " is as it was" : "");
}

/* Whether every entry of directory path is `ours`; the first that is not
 * goes to bad. 1 yes, 0 no, -1 unreadable (errno). */
static int all_ours(const char *path, int (*ours)(const char *), char *bad, size_t cap, int *empty) {
    DIR *d = opendir(path);
    if (!d) return -1;
    struct dirent *de;
    int ok = 1;
    *empty = 1;
    while (ok && (de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        *empty = 0;
        if (!ours || !ours(de->d_name)) ok = 0, snprintf(bad, cap, "%s", de->d_name);
    }
    closedir(d);
    return ok;
}

void td_staged_check(const char *cmd, const char *what, const char *path, int dir, int overwrite,
                     int (*ours)(const char *entry)) {
    struct stat st;
    if (stat(path, &st) != 0) {
        /* missing is the usual case; a dangling link or an unreadable parent
         * is left to the create, whose error says which */
        return;
    }
    if (!dir) {
        TD_CHECK(S_ISREG(st.st_mode), "%s: %s is %s, not a regular file; %s writes a regular file there",
                 cmd, what, td_file_kind(st.st_mode), cmd);
        TD_CHECK(overwrite, "%s: %s exists; give --overwrite to replace it, or another path", cmd, what);
        return;
    }
    TD_CHECK(S_ISDIR(st.st_mode), "%s: %s is %s, not a directory; %s writes a directory there", cmd,
             what, td_file_kind(st.st_mode), cmd);
    char bad[256];
    int empty, rc = all_ours(path, overwrite ? ours : NULL, bad, sizeof bad, &empty);
    TD_CHECK(rc >= 0, "%s: %s: cannot list it: %s", cmd, what, strerror(errno));
    if (empty) return;
    TD_CHECK(overwrite, "%s: %s exists and is not empty; give --overwrite to replace it, or a new "
                        "directory", cmd, what);
    TD_CHECK(rc == 1, "%s: %s holds \"%s\", which %s does not write; --overwrite replaces only a "
                      "directory of %s's own output, so give a new directory", cmd, what, bad, cmd, cmd);
}

void td_staged_begin(td_staged *s, const char *cmd, const char *path, int dir, int overwrite) {
    memset(s, 0, sizeof *s);
    s->cmd = cmd, s->flag = "--out", s->dir = dir, s->overwrite = overwrite, s->fd = -1;
    TD_CHECK(strlen(path) < PATH_MAX, "%s: --out %.64s...: the path is too long", cmd, path);
    snprintf(s->path, sizeof s->path, "%s", path);
    /* "DIR/" names DIR: its temporary goes beside it, not into it */
    for (size_t n = strlen(s->path); dir && n > 1 && s->path[n - 1] == '/'; n--) s->path[n - 1] = 0;
    snprintf(s->tmp, sizeof s->tmp, "%s.tmp.%d", s->path, (int)getpid());
    struct stat st;
    s->existed = lstat(s->path, &st) == 0;
    int i = 0;
    while (i < MAX_LIVE && g_live[i]) i++;
    TD_ASSERT(i < MAX_LIVE);
    g_live[i] = s;
    if (dir) {
        if (mkdir(s->tmp, 0755) != 0) td_staged_fail(s, NULL, "cannot create it", errno);
    } else {
        const char *why;
        s->fd = td_open_output(s->tmp, O_WRONLY | O_CREAT | O_EXCL, 0644, &why);
        if (s->fd < 0) {
            /* td_open_output names the problem in words; errno still holds it */
            int err = errno ? errno : EIO;
            td_staged_fail(s, NULL, "cannot create it", err);
        }
    }
    s->live = 1;
}

int td_staged_create(td_staged *s, const char *name) {
    char p[sizeof s->tmp + 256];
    snprintf(p, sizeof p, "%s/%s", s->tmp, name);
    const char *why;
    int fd = td_open_output(p, O_WRONLY | O_CREAT | O_EXCL, 0644, &why);
    if (fd < 0) td_staged_fail(s, name, "cannot create it", errno ? errno : EIO);
    return fd;
}

void td_staged_write(td_staged *s, int fd, const char *name, const void *p, size_t n) {
    if (td_write_all(fd, p, n) != 0) td_staged_fail(s, name, "write failed", errno);
}

void td_staged_close(td_staged *s, int fd, const char *name) {
    if (fsync(fd) != 0) {
        int err = errno;
        close(fd);
        td_staged_fail(s, name, "write failed (fsync)", err);
    }
    if (close(fd) != 0) td_staged_fail(s, name, "closing it failed", errno);
}

static int fsync_dir(const char *path) {
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = fsync(fd), err = errno;
    close(fd);
    errno = err;
    return rc;
}

/* rename that never replaces: renameat2's RENAME_NOREPLACE, or where the
 * file system lacks it, link + unlink (files) or rename (directories:
 * POSIX rename never replaces a non-empty one). */
static int rename_new(const char *from, const char *to, int dir) {
    if (renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE) == 0) return 0;
    if (errno != EINVAL && errno != ENOSYS) return -1;
    if (dir) return rename(from, to);
    if (link(from, to) != 0) return -1;
    return unlink(from);
}

/* Swaps the new directory in for the old one at once; the old tree ends at
 * *old (removed by the caller). Without RENAME_EXCHANGE: two renames, the
 * old one moved back if the second fails. */
static int swap_dir(td_staged *s, char *old, size_t cap) {
    if (renameat2(AT_FDCWD, s->tmp, AT_FDCWD, s->path, RENAME_EXCHANGE) == 0) {
        snprintf(old, cap, "%s", s->tmp);
        return 0;
    }
    if (errno != EINVAL && errno != ENOSYS) return -1;
    snprintf(old, cap, "%s.old.%d", s->path, (int)getpid());
    if (rename(s->path, old) != 0) return -1;
    if (rename(s->tmp, s->path) == 0) return 0;
    int err = errno;
    rename(old, s->path);
    errno = err;
    return -1;
}

void td_staged_commit(td_staged *s) {
    if (!s->dir) {
        if (fsync(s->fd) != 0) td_staged_fail(s, NULL, "write failed (fsync)", errno);
        int rc = close(s->fd);
        s->fd = -1;
        if (rc != 0) td_staged_fail(s, NULL, "closing it failed", errno);
    } else if (fsync_dir(s->tmp) != 0) {
        td_staged_fail(s, NULL, "syncing the directory failed", errno);
    }
    struct stat st;
    int exists = lstat(s->path, &st) == 0, rc;
    char old[sizeof s->tmp + 32] = "";
    if (!exists) rc = rename_new(s->tmp, s->path, s->dir);
    else if (s->dir && S_ISDIR(st.st_mode) && !s->overwrite) rc = rename(s->tmp, s->path); /* empty */
    else if (!s->overwrite) rc = -1, errno = EEXIST; /* it appeared since td_staged_check */
    else if (!s->dir) rc = rename(s->tmp, s->path);
    else rc = swap_dir(s, old, sizeof old);
    if (rc != 0) td_staged_fail(s, NULL, "renaming it into place failed", errno);
    s->live = 0;
    forget(s);
    char parent[PATH_MAX];
    snprintf(parent, sizeof parent, "%s", s->path);
    if (fsync_dir(dirname(parent)) != 0)
        td_fail("%s: %s %s was renamed into place, but syncing its directory failed: %s", s->cmd,
                s->flag, s->path, strerror(errno));
    if (old[0] && remove_tree(old) != 0)
        fprintf(stderr, "trident: warning: %s: %s %s is in place, but removing the one it replaced "
                        "(now %s) failed: %s\n", s->cmd, s->flag, s->path, old, strerror(errno));
}
