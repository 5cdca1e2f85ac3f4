/* --tensorboard DIR: the event file (tensorboard.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "tensorboard.h"
#include "trident/files.h"

static double wall_time(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + tv.tv_usec * 1e-6;
}

/* The largest <unix time> of the event files in dir (-1: none). */
static long long newest_time(const char *dir) {
    static const char prefix[] = "events.out.tfevents.";
    long long best = -1;
    DIR *d = opendir(dir);
    if (!d) return best;
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, prefix, sizeof prefix - 1)) continue;
        long long t = strtoll(e->d_name + sizeof prefix - 1, NULL, 10);
        if (t > best) best = t;
    }
    closedir(d);
    return best;
}

/* Writes the event built in tb->ev as one record, flushed. */
static void write_event(td_tensorboard *tb) {
    if (!tb->f) return;
    long n = td_tfevent_end(&tb->ev);
    if (n < 0 || (size_t)n > sizeof tb->buf) { /* trident's own events are far smaller */
        tb->err = tb->err ? tb->err : EOVERFLOW;
        fclose(tb->f), tb->f = NULL;
        return;
    }
    td_tfrecord_frame(tb->rec, tb->buf, (size_t)n);
    errno = 0;
    size_t len = (size_t)n + TD_TFRECORD_OVERHEAD;
    if (fwrite(tb->rec, 1, len, tb->f) != len || fflush(tb->f) != 0 || ferror(tb->f)) {
        if (!tb->err) tb->err = errno ? errno : EIO;
        fclose(tb->f), tb->f = NULL;
    }
}

int td_tensorboard_open(td_tensorboard *tb, const char *dir, char *why, size_t cap) {
    memset(tb, 0, sizeof *tb);
    struct stat st;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        snprintf(why, cap, "cannot create the directory: %s", strerror(errno));
        return -1;
    }
    if (stat(dir, &st) != 0) {
        snprintf(why, cap, "%s", strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(why, cap, "it is %s, not a directory", td_file_kind(st.st_mode));
        return -1;
    }
    char host[256] = "localhost";
    if (gethostname(host, sizeof host) != 0) strcpy(host, "localhost");
    host[sizeof host - 1] = 0;
    for (char *c = host; *c; c++)
        if (*c == '/') *c = '_';
    double now = wall_time();
    long long t = (long long)now, newest = newest_time(dir);
    if (newest >= t) t = newest + 1; /* after the files already there (a resume within the second) */
    int n = snprintf(tb->path, sizeof tb->path, "%s/events.out.tfevents.%010lld.%s.%ld", dir, t, host,
                     (long)getpid());
    if (n < 0 || (size_t)n >= sizeof tb->path) {
        snprintf(why, cap, "the path is too long");
        return -1;
    }
    const char *w;
    int fd = td_open_output(tb->path, O_WRONLY | O_CREAT | O_EXCL, 0644, &w);
    if (fd < 0 || !(tb->f = fdopen(fd, "wb"))) {
        snprintf(why, cap, "cannot create %s: %s", tb->path, fd < 0 ? w : strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    td_tfevent_begin(&tb->ev, tb->buf, sizeof tb->buf, now, 0);
    td_tfevent_file_version(&tb->ev, "brain.Event:2");
    write_event(tb);
    if (tb->err) {
        snprintf(why, cap, "writing %s failed: %s", tb->path, strerror(tb->err));
        return -1;
    }
    return 0;
}

void td_tensorboard_start(td_tensorboard *tb, int64_t step) {
    if (!tb->f) return;
    td_tfevent_begin(&tb->ev, tb->buf, sizeof tb->buf, wall_time(), step);
    td_tfevent_session_start(&tb->ev);
    write_event(tb);
}

void td_tensorboard_begin(td_tensorboard *tb, int64_t step) {
    if (tb->f) td_tfevent_begin(&tb->ev, tb->buf, sizeof tb->buf, wall_time(), step);
}

void td_tensorboard_scalar(td_tensorboard *tb, const char *tag, double value) {
    if (tb->f) td_tfevent_scalar(&tb->ev, tag, (float)value);
}

void td_tensorboard_end(td_tensorboard *tb) { write_event(tb); }

int td_tensorboard_close(td_tensorboard *tb) {
    if (tb->f && fclose(tb->f) != 0 && !tb->err) tb->err = errno ? errno : EIO;
    tb->f = NULL;
    return tb->err;
}
