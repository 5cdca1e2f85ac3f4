/* One job per --out: the lock file, the job id, and the check for
 * checkpoints a new run would mix with (include/trident/out_lock.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_internal.h"
#include "trident/base.h"
#include "trident/out_lock.h"

static char g_job[64];
static int g_fd = -1;
static char g_out[PATH_MAX];
static int g_created; /* this job made g_out: an error exit removes it while empty */

/* Keeps [A-Za-z0-9._-]; anything else becomes '_' (a Slurm id is digits,
 * a host name may hold anything). */
static void safe_copy(char *dst, size_t cap, const char *src) {
    size_t n = 0;
    for (; src[n] && n + 1 < cap; n++) {
        char c = src[n];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                 c == '-' || c == '_';
        dst[n] = ok ? c : '_';
    }
    dst[n] = 0;
}

/* Field 22 of /proc/self/stat: the start time in clock ticks after boot
 * (with the pid, unique on this host over time). 0 when unreadable. */
static unsigned long long start_ticks(void) {
    FILE *f = fopen("/proc/self/stat", "r");
    if (!f) return 0;
    char buf[1024];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')'); /* the command name may hold spaces */
    unsigned long long v = 0;
    for (int field = 2; p && field < 22; field++) p = strchr(p + 1, ' ');
    if (p) v = strtoull(p + 1, NULL, 10);
    return v;
}

const char *td_job_id(void) {
    if (g_job[0]) return g_job;
    const char *slurm = getenv("SLURM_JOB_ID");
    char raw[160];
    if (slurm && *slurm) {
        snprintf(raw, sizeof raw, "%s", slurm);
    } else {
        char host[64] = "host";
        gethostname(host, sizeof host - 1);
        host[sizeof host - 1] = 0;
        snprintf(raw, sizeof raw, "%.40s-%ld-%llu", host, (long)getpid(), start_ticks());
    }
    safe_copy(g_job, sizeof g_job, raw);
    return g_job;
}

static void norm_path(char *dst, size_t cap, const char *out) {
    snprintf(dst, cap, "%s", out);
    for (size_t n = strlen(dst); n > 1 && dst[n - 1] == '/'; n--) dst[n - 1] = 0;
}

int td_out_lock_held(const char *out) {
    if (g_fd < 0) return 0;
    char p[PATH_MAX];
    norm_path(p, sizeof p, out);
    return strcmp(p, g_out) == 0;
}

void td_out_lock_release(void) {
    if (g_fd < 0) return;
    /* an empty record: the next job takes the lock without a note */
    if (ftruncate(g_fd, 0) == 0) fsync(g_fd);
    close(g_fd); /* the last descriptor of the description: the lock goes */
    g_fd = -1;
    g_out[0] = 0;
    g_created = 0;
}

/* Whether dir holds nothing but the lock file. */
static int only_the_lock(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int other = 0;
    struct dirent *de;
    while (!other && (de = readdir(d)) != NULL)
        other = strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0 &&
                strcmp(de->d_name, TD_OUT_LOCK_NAME) != 0;
    closedir(d);
    return !other;
}

void td_out_lock_abandon(void) {
    if (g_fd < 0) return;
    char dir[PATH_MAX], lock[PATH_MAX + 32];
    snprintf(dir, sizeof dir, "%s", g_out);
    int remove_dir = g_created && only_the_lock(dir);
    if (remove_dir) {
        /* unlinked while still locked: a job that opens it now waits for
         * none and makes a new one, never locks the removed file */
        snprintf(lock, sizeof lock, "%s/%s", dir, TD_OUT_LOCK_NAME);
        unlink(lock);
    }
    td_out_lock_release();
    if (remove_dir) rmdir(dir);
}

static void release_on_fail(void) { td_out_lock_abandon(); }

/* The holder's record "host H\npid P\njob J\n" as one phrase. */
static void read_record(int fd, char *desc, size_t cap, char *host, size_t hcap, long *pid) {
    char buf[512] = "", job[128] = "?";
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    buf[n > 0 ? n : 0] = 0;
    snprintf(host, hcap, "?");
    *pid = -1;
    for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
        if (strncmp(line, "host ", 5) == 0) snprintf(host, hcap, "%.63s", line + 5);
        if (strncmp(line, "pid ", 4) == 0) *pid = strtol(line + 4, NULL, 10);
        if (strncmp(line, "job ", 4) == 0) snprintf(job, sizeof job, "%.100s", line + 4);
    }
    if (n <= 0)
        snprintf(desc, cap, "a job that has not written its record yet");
    else
        snprintf(desc, cap, "host %s, pid %ld, job %s", host, *pid, job);
}

int td_out_lock_take(const char *out, int created, char *why, size_t cap) {
    TD_ASSERT(g_fd < 0);
    char dir[PATH_MAX];
    norm_path(dir, sizeof dir, out);
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/%s", dir, TD_OUT_LOCK_NAME);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) {
        snprintf(why, cap, "--out %s cannot be written (creating a file in it failed: %s, its lock file %s); the "
                 "checkpoint would be lost at the end of the run", out, strerror(errno), path);
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        snprintf(why, cap, "--out %s: its lock file %s is not a regular file; remove it", out, path);
        return -1;
    }
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = F_WRLCK, fl.l_whence = SEEK_SET, fl.l_start = 0, fl.l_len = 0; /* the whole file */
    char desc[320], host[64];
    long pid;
    if (fcntl(fd, F_OFD_SETLK, &fl) != 0) {
        int err = errno;
        read_record(fd, desc, sizeof desc, host, sizeof host, &pid);
        close(fd);
        if (err == EAGAIN || err == EACCES)
            snprintf(why, cap, "--out %s is in use by another job (%s), which holds %s; wait for it to end, or "
                     "give another --out", out, desc, path);
        else
            snprintf(why, cap, "--out %s: locking %s failed: %s (the file system must support fcntl locks)", out,
                     path, strerror(err));
        return -1;
    }
    /* a refused job that made DIR unlinks its lock file before releasing
     * it: a lock taken on that removed file would guard nothing */
    struct stat now;
    if (stat(path, &now) != 0 || now.st_ino != st.st_ino || now.st_dev != st.st_dev) {
        close(fd);
        snprintf(why, cap, "--out %s: its lock file %s was removed while this job took it (a job refused on a "
                 "new --out removes what it made); start again", out, path);
        return -1;
    }
    if (fstat(fd, &st) == 0 && st.st_size > 0) {
        read_record(fd, desc, sizeof desc, host, sizeof host, &pid);
        char me[64] = "";
        gethostname(me, sizeof me - 1);
        int here = strcmp(host, me) == 0;
        int alive = here && pid > 0 && (kill((pid_t)pid, 0) == 0 || errno == EPERM);
        td_log("note: --out %s: taking over the lock of %s, which ended without releasing it (%s)\n", out, desc,
               !here ? "it ran on another host and holds the lock no more"
               : alive ? "that pid is alive but holds the lock no more" : "that pid is not alive");
    }
    char rec[256];
    char host_me[64] = "?";
    gethostname(host_me, sizeof host_me - 1);
    int len = snprintf(rec, sizeof rec, "host %s\npid %ld\njob %s\n", host_me, (long)getpid(), td_job_id());
    int ok = ftruncate(fd, 0) == 0 && pwrite(fd, rec, (size_t)len, 0) == len && fsync(fd) == 0;
    if (!ok) {
        int err = errno;
        close(fd);
        snprintf(why, cap, "--out %s: writing the lock record %s failed: %s", out, path, strerror(err));
        return -1;
    }
    g_fd = fd;
    snprintf(g_out, sizeof g_out, "%s", dir);
    g_created = created;
    td_set_fail_cleanup(release_on_fail);
    return 0;
}

/* "step-NNNNNNNN" with 8 digits. */
static int is_step_name(const char *s) {
    if (strncmp(s, "step-", 5) != 0 || strlen(s) != 13) return 0;
    for (int i = 5; i < 13; i++)
        if (s[i] < '0' || s[i] > '9') return 0;
    return 1;
}

/* The step directories of out (count) and latest's target ("" if none). */
static int survey(const char *out, char *latest, size_t cap) {
    char link[PATH_MAX + 16];
    snprintf(link, sizeof link, "%s/latest", out);
    ssize_t k = readlink(link, latest, cap - 1);
    struct stat st;
    if (k < 0 && lstat(link, &st) == 0) k = snprintf(latest, cap, "(not a link)");
    latest[k > 0 ? k : 0] = 0;
    DIR *d = opendir(out);
    if (!d) return 0;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) n += is_step_name(de->d_name);
    closedir(d);
    return n;
}

int td_out_existing(const char *out, char *desc, size_t cap) {
    char latest[256];
    int n = survey(out, latest, sizeof latest);
    snprintf(desc, cap, "%d step director%s%s%s", n, n == 1 ? "y" : "ies", latest[0] ? ", latest -> " : "",
             latest);
    return n > 0 || latest[0];
}

int td_out_clear(const char *out) {
    char link[PATH_MAX + 16];
    snprintf(link, sizeof link, "%s/latest", out);
    /* latest first: a crash half-way leaves step directories, never a
     * latest naming a removed one */
    TD_CHECK(unlink(link) == 0 || errno == ENOENT, "--overwrite: removing %s failed: %s", link, strerror(errno));
    DIR *d = opendir(out);
    if (!d) return 0;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (!is_step_name(de->d_name)) continue;
        td_ckpt_retire_dir(out, de->d_name);
        n++;
    }
    closedir(d);
    return n;
}
