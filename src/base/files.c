/* Opening inputs and outputs safely (include/trident/files.h). */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "trident/files.h"

const char *td_file_kind(mode_t mode) {
    if (S_ISREG(mode)) return "a regular file";
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
    if (S_ISSOCK(mode)) return "a socket";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISLNK(mode)) return "a symbolic link";
    return "not a regular file";
}

/* "is a FIFO (named pipe), not a regular file" for each kind */
static const char *not_regular(mode_t mode) {
    if (S_ISDIR(mode)) return "it is a directory, not a regular file";
    if (S_ISFIFO(mode)) return "it is a FIFO (named pipe), not a regular file";
    if (S_ISSOCK(mode)) return "it is a socket, not a regular file";
    if (S_ISCHR(mode)) return "it is a character device, not a regular file";
    if (S_ISBLK(mode)) return "it is a block device, not a regular file";
    return "it is not a regular file";
}

/* Back to blocking I/O on a descriptor that is known to be a regular file
 * (O_NONBLOCK means nothing for regular files, but a caller may hand the
 * descriptor on). */
static void set_blocking(int fd) {
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
}

int td_open_input(const char *path, struct stat *st, const char **why) {
    struct stat local;
    if (!st) st = &local;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        /* a socket cannot be opened at all (ENXIO): say what it is */
        int e = errno;
        *why = e == ENXIO && stat(path, st) == 0 && !S_ISREG(st->st_mode) ? not_regular(st->st_mode) : strerror(e);
        errno = e;
        return -1;
    }
    if (fstat(fd, st) != 0) {
        *why = strerror(errno);
        close(fd);
        return -1;
    }
    if (!S_ISREG(st->st_mode)) {
        *why = not_regular(st->st_mode);
        close(fd);
        return -1;
    }
    set_blocking(fd);
    return fd;
}

FILE *td_fopen_input(const char *path, struct stat *st, const char **why) {
    int fd = td_open_input(path, st, why);
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        *why = strerror(errno);
        close(fd);
    }
    return f;
}

int td_check_dir(const char *path, const char **why) {
    struct stat st;
    if (stat(path, &st) != 0) {
        *why = strerror(errno);
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        *why = S_ISREG(st.st_mode) ? "it is a file, not a directory" : "it is not a directory";
        return -1;
    }
    return 0;
}

int td_open_output(const char *path, int flags, mode_t mode, const char **why) {
    /* an existing non-regular file is refused before open: opening a FIFO
     * for writing, even non-blocking, is not harmless once a reader waits */
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        *why = not_regular(st.st_mode);
        return -1;
    }
    int trunc = flags & O_TRUNC;
    int fd = open(path, (flags & ~O_TRUNC) | O_NONBLOCK | O_CLOEXEC | O_NOCTTY, mode);
    if (fd < 0) {
        *why = errno == ENXIO ? "it is a FIFO (named pipe) with no reader, not a regular file" : strerror(errno);
        return -1;
    }
    /* checked on the descriptor: the path may have been replaced since */
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        *why = fstat(fd, &st) != 0 ? strerror(errno) : not_regular(st.st_mode);
        close(fd);
        return -1;
    }
    if (trunc && ftruncate(fd, 0) != 0) {
        *why = strerror(errno);
        close(fd);
        return -1;
    }
    set_blocking(fd);
    return fd;
}

FILE *td_fopen_output(const char *path, const char **why) {
    int fd = td_open_output(path, O_WRONLY | O_CREAT | O_TRUNC, 0644, why);
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, "wb");
    if (!f) {
        *why = strerror(errno);
        close(fd);
    }
    return f;
}

int td_write_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n > 0) {
        ssize_t k = write(fd, c, n > (1u << 30) ? (1u << 30) : n);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return -1;
        if (k == 0) {
            errno = EIO;
            return -1;
        }
        c += k, n -= (size_t)k;
    }
    return 0;
}

int td_pread_all(int fd, void *p, size_t n, uint64_t off) {
    char *c = p;
    while (n > 0) {
        ssize_t k = pread(fd, c, n > (1u << 30) ? (1u << 30) : n, (off_t)off);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return -1;
        if (k == 0) {
            errno = ENODATA;
            return -1;
        }
        c += k, n -= (size_t)k, off += (uint64_t)k;
    }
    return 0;
}
