/* files: opening what the user names, so that no file can hang a read or
 * be overwritten by accident (src/base/files.c). Every input trident reads
 * (data, checkpoints, imports, profiles, BPE files, configs) is opened here,
 * and every output it creates (--log, --trace, exports, checkpoint files).
 *
 * Inputs are opened with O_NONBLOCK and checked with fstat on the open
 * descriptor: a FIFO, socket or device is refused before the first read
 * (a FIFO opened for reading without O_NONBLOCK waits for a writer forever,
 * and /dev/zero never ends). Outputs refuse an existing path that is not a
 * regular file, again checked on the open descriptor (O_NONBLOCK makes
 * opening a FIFO without a reader fail at once instead of waiting). None of
 * these exit: each returns -1 with a sentence in *why, and the caller names
 * the flag or file in its error line. */
#ifndef TRIDENT_FILES_H
#define TRIDENT_FILES_H

#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>

#ifdef __cplusplus
extern "C" {
#endif

/* "a directory", "a FIFO (named pipe)", "a socket", "a character device",
 * "a block device", "a regular file", ... */
const char *td_file_kind(mode_t mode);

/* Opens path for reading; it must be a regular file. Returns the
 * descriptor (blocking again after the check) and fills st, or -1 with
 * *why = strerror(errno) or "it is a FIFO (named pipe), not a regular
 * file": a phrase that can follow "cannot read X: ". */
int td_open_input(const char *path, struct stat *st, const char **why);
/* The same as a stdio stream ("rb"). */
FILE *td_fopen_input(const char *path, struct stat *st, const char **why);
/* Whether path is a directory one can list (no FIFO test needed: opendir
 * of a FIFO fails with ENOTDIR). Returns 0, or -1 with *why. */
int td_check_dir(const char *path, const char **why);

/* Opens path for writing with flags (O_WRONLY or O_RDWR, O_CREAT, O_TRUNC,
 * O_EXCL as wanted) and mode; refuses a path that is or becomes anything
 * but a regular file (a FIFO, device, socket, directory). Returns the
 * descriptor or -1 with *why. O_TRUNC on an existing regular file is
 * applied only after the check. */
int td_open_output(const char *path, int flags, mode_t mode, const char **why);
/* The same as a stdio stream ("wb" semantics: created or truncated). */
FILE *td_fopen_output(const char *path, const char **why);

/* Writes all n bytes at the descriptor's offset, retrying EINTR and short
 * writes; 0, or -1 with errno set (ENOSPC, EIO, ...). */
int td_write_all(int fd, const void *p, size_t n);
/* Reads exactly n bytes at offset off (pread); 0, or -1 with errno set
 * (0 = EIO-like "the file is shorter": errno ENODATA). */
int td_pread_all(int fd, void *p, size_t n, uint64_t off);

#ifdef __cplusplus
}
#endif

#endif
