/* Start-of-run checks (preflight.h). Each check writes its verdict instead
 * of exiting, so that the ranks can agree on one message: the lowest
 * failing rank prints it and aborts the job, the others wait to be ended.
 * Every rank running TD_CHECK on its own would print the same line once per
 * rank, or lose one rank's line to another's MPI_Abort. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_run.h"
#include "preflight.h"
#include "trident/out_lock.h"
#include "trident/stop.h"
#include "trident/base.h"
#include "trident/comm.h"
#include "trident/compat.h"
#include "trident/files.h"
#include "trident/formats_data.h"

typedef struct {
    int failed;
    char msg[2048];   /* the one error line */
    char extra[8192]; /* printed after it (the memory table) */
} verdict;

/* Returns 1, so that a check can end with "return refuse(...)". */
__attribute__((format(printf, 2, 3))) static int refuse(verdict *v, const char *fmt, ...) {
    if (v->failed) return 1; /* the first problem found is the one reported */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->msg, sizeof v->msg, fmt, ap);
    va_end(ap);
    v->failed = 1;
    return 1;
}

/* ---- --out ------------------------------------------------------------ */

/* Creates DIR when missing (its last component only: a missing parent is
 * more likely a typo than a wish for a tree), then writes, fsyncs and
 * removes a probe file in it. created gets 1 when this call made DIR. */
static int check_out(verdict *v, const td_run_spec *spec, int *created) {
    const char *out = spec->output.out;
    struct stat st;
    *created = 0;
    if (!*out) return refuse(v, "--out needs a directory name");
    if (stat(out, &st) == 0) {
        if (!S_ISDIR(st.st_mode))
            return refuse(v, "--out %s is %s, not a directory; name a directory "
                             "(it is created if missing)", out,
                          S_ISREG(st.st_mode) ? "an existing file" : td_file_kind(st.st_mode));
    } else if (errno == ENOENT) {
        if (mkdir(out, 0777) != 0) {
            int e = errno;
            char copy[PATH_MAX];
            snprintf(copy, sizeof copy, "%s", out);
            const char *parent = dirname(copy);
            struct stat ps;
            if (e == ENOENT && stat(parent, &ps) != 0)
                return refuse(v, "--out %s: its parent directory %s does not exist; create it first "
                                 "(only the last component is created)", out, parent);
            if (e == ENOTDIR)
                return refuse(v, "--out %s: a component of its path is a file, not a directory", out);
            return refuse(v, "--out %s cannot be created: %s", out, strerror(e));
        }
        *created = 1;
    } else if (errno == ENOTDIR) {
        return refuse(v, "--out %s: a component of its path is a file, not a directory", out);
    } else {
        return refuse(v, "--out %s cannot be used: %s", out, strerror(errno));
    }
    /* one job per --out: the lock before anything is written into it */
    char why[sizeof v->msg];
    if (td_out_lock_take(out, *created, why, sizeof why) != 0) return refuse(v, "%s", why);
    char probe[PATH_MAX + 64];
    snprintf(probe, sizeof probe, "%s/.trident-probe-%ld", out, (long)getpid());
    int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL, 0600);
    const char *what = "creating a file in it";
    int e = 0;
    if (fd < 0) {
        e = errno;
    } else {
        errno = 0;
        if (write(fd, "trident\n", 8) != 8) {
            e = errno ? errno : EIO;
            what = "writing a file in it";
        } else if (fsync(fd) != 0) {
            e = errno;
            what = "syncing a file in it";
        }
        if (close(fd) != 0 && !e) {
            e = errno;
            what = "closing a file in it";
        }
        unlink(probe);
    }
    if (!e) return 0;
    return refuse(v, "--out %s cannot be written (%s failed: %s); the checkpoint would be lost at "
                     "the end of the run", out, what, strerror(e));
}

/* A new run does not mix its checkpoints with another run's (after the
 * --log and --trace checks: a path problem is named first). */
static int check_fresh(verdict *v, const td_run_spec *spec) {
    char have[320];
    if (spec->output.resume || !td_out_existing(spec->output.out, have, sizeof have) ||
        spec->output.overwrite)
        return 0;
    return refuse(v,
                  "--out %s already holds checkpoints (%s) that a new run would mix with; give "
                  "--resume latest to "
                  "continue them, --overwrite to replace them, or another --out",
                  spec->output.out, have);
}

/* ---- --log ------------------------------------------------------------ */

/* What trident itself writes directly in --out: a log there would collide
 * with the checkpoint (step-NNNNNNNN/, latest and their temporary names). */
static int checkpoint_name(const char *base) {
    return strcmp(base, "latest") == 0 || strncmp(base, "step-", 5) == 0 || base[0] == '.';
}

/* A file flag's path (--log, --trace) must not collide with what the
 * checkpoint writes in --out. */
static int check_outside_out(verdict *v, const char *flag, const char *path, const char *out) {
    if (!out) return 0;
    /* compared by real path: "ck/./x", "ck/../ck/x" and links all count */
    char rout[PATH_MAX], copy[PATH_MAX], rdir[PATH_MAX], bcopy[PATH_MAX];
    snprintf(copy, sizeof copy, "%s", path);
    snprintf(bcopy, sizeof bcopy, "%s", path);
    const char *base = basename(bcopy);
    if (!realpath(out, rout) || !realpath(dirname(copy), rdir)) return 0;
    size_t n = strlen(rout);
    int inside = strncmp(rdir, rout, n) == 0 && rdir[n] == '/';
    if (inside)
        return refuse(v, "%s %s is inside a directory of --out %s, where checkpoints are written; "
                         "name a file outside it or directly in %s", flag, path, out, out);
    if (strcmp(rdir, rout) == 0 && checkpoint_name(base))
        return refuse(v, "%s %s would take a name the checkpoint uses in --out %s (latest, "
                         "step-*, hidden temporary files); name another file",
                      flag, path, out);
    return 0;
}

/* An output file (--log, --trace) that exists may be replaced only if it is
 * a file of that kind from an earlier run (its first bytes are `head`), never
 * a directory or the data. Returns 1 (refused) or 0; *exists says whether
 * it does. */
static int check_replaceable(verdict *v, const char *flag, const char *path, const char *data,
                             const char *head, const char *kind, const char *writes, int *exists) {
    struct stat st, ds;
    *exists = stat(path, &st) == 0;
    if (!*exists) return 0;
    /* only a regular file: a FIFO would block the probe's open, a device
     * would be written to, and the trace's rename would replace either */
    if (!S_ISREG(st.st_mode))
        return refuse(v, "%s %s is %s, not a regular file; name a file (%s written to it)", flag, path,
                      td_file_kind(st.st_mode), writes);
    if (data && stat(data, &ds) == 0 && ds.st_dev == st.st_dev && ds.st_ino == st.st_ino)
        return refuse(v, "%s %s is the --data file %s; it would be overwritten; name another file", flag,
                      path, data);
    if (S_ISREG(st.st_mode) && st.st_size > 0) {
        size_t want = strlen(head);
        char buf[64] = {0};
        TD_ASSERT(want < sizeof buf);
        const char *why;
        FILE *f = td_fopen_input(path, NULL, &why);
        size_t n = f ? fread(buf, 1, want, f) : 0;
        if (f) fclose(f);
        if (n != want || memcmp(buf, head, n) != 0)
            return refuse(v, "%s %s exists and is not a trident %s (it does not start with %s); it would "
                             "be overwritten; remove it or name another file",
                          flag, path, kind, head);
    }
    return 0;
}

static int check_log(verdict *v, const char *log, const char *data, const char *out) {
    if (!*log) return refuse(v, "--log needs a file name");
    int exists;
    /* --log truncates: only a log of an earlier run may be replaced */
    if (check_replaceable(v, "--log", log, data, "{\"event\": \"start\"", "log", "JSON lines are", &exists))
        return 1;
    if (exists) {
        const char *why;
        int fd = td_open_output(log, O_WRONLY, 0, &why); /* no O_TRUNC: a probe changes nothing */
        if (fd < 0) return refuse(v, "--log %s cannot be written: %s", log, why);
        close(fd);
    } else {
        const char *why;
        int fd = td_open_output(log, O_WRONLY | O_CREAT | O_EXCL, 0644, &why);
        if (fd < 0) return refuse(v, "--log %s cannot be created: %s", log, why);
        close(fd);
        unlink(log);
    }
    return check_outside_out(v, "--log", log, out);
}

/* ---- --trace ---------------------------------------------------------- */

/* The trace is written at the end as FILE.tmp, then renamed to FILE: both
 * must be possible now. An existing FILE is replaced only if it is a trace. */
static int check_trace(verdict *v, const char *trace, const char *log, const char *data,
                       const char *out) {
    if (!*trace) return refuse(v, "--trace needs a file name");
    if (log && strcmp(log, trace) == 0)
        return refuse(v, "--trace %s is also the --log file; name two different files", trace);
    int exists;
    if (check_replaceable(v, "--trace", trace, data, "{\"traceEvents\":[", "trace",
                          "a Chrome trace-event JSON file is", &exists))
        return 1;
    char tmp[PATH_MAX + 8];
    snprintf(tmp, sizeof tmp, "%s.tmp", trace);
    const char *why;
    int fd = td_open_output(tmp, O_WRONLY | O_CREAT | O_EXCL, 0644, &why);
    if (fd < 0 && errno == EEXIST) /* a run that died while writing left it */
        fd = td_open_output(tmp, O_WRONLY, 0, &why);
    else if (fd >= 0)
        unlink(tmp);
    if (fd < 0) return refuse(v, "--trace %s cannot be written (creating %s: %s)", trace, tmp, why);
    close(fd);
    return check_outside_out(v, "--trace", trace, out);
}

/* ---- --tensorboard ---------------------------------------------------- */

/* DIR holds a new event file per run: it must be a directory trident can
 * write in, or one it can create (probed by creating and removing it). */
static int check_tensorboard(verdict *v, const char *dir, const char *out) {
    if (!*dir) return refuse(v, "--tensorboard needs a directory name");
    struct stat st;
    if (stat(dir, &st) == 0) {
        if (!S_ISDIR(st.st_mode))
            return refuse(v, "--tensorboard %s is %s, not a directory; name a directory (an event file is "
                             "written in it)", dir, td_file_kind(st.st_mode));
        if (access(dir, W_OK | X_OK) != 0)
            return refuse(v, "--tensorboard %s cannot be written: %s", dir, strerror(errno));
    } else if (mkdir(dir, 0755) != 0) {
        return refuse(v, "--tensorboard %s cannot be created: %s", dir, strerror(errno));
    } else {
        rmdir(dir);
    }
    return check_outside_out(v, "--tensorboard", dir, out);
}

/* ---- --sample-prompt -------------------------------------------------- */

/* The sample at the end encodes the prompt with the run's tokenizer, which
 * dies on a character it lacks: after the whole run. Checked here, without
 * dying, against the same vocabulary. */
static int check_prompt(verdict *v, const char *prompt, const td_tokenizer *tok, const char *data) {
    if (!prompt || !*prompt || tok->kind == TD_TOK_BYTE) return 0; /* bytes encode anything */
    /* a prompt with token ids: the rules table's sample-prompt-ids */
    td_compat_cfg c;
    td_compat_cfg_init(&c);
    c.sample_prompt = 1, c.data_token_ids = tok->kind == TD_TOK_IDS, c.data_text = data;
    char why[1024];
    if (td_compat_first(&c, TD_COMPAT_AT_PREFLIGHT, why, sizeof why) >= 0) return refuse(v, "%s", why);
    if (td_tokenizer_has_bpe(tok->kind)) { /* any UTF-8 text encodes */
        size_t bad;
        td_err e;
        if (td_utf8_check((const unsigned char *)prompt, strlen(prompt), &bad, &e) != 0)
            return refuse(v, "--sample-prompt: %s; %s encodes UTF-8 text", e.msg,
                          tok->kind == TD_TOK_HF ? tok->file : td_tokenizer_name(tok->kind));
        return 0;
    }
    /* the formats library's encoder: the same strict UTF-8 and lookup the
     * sample will use, but returning its error instead of dying */
    size_t n = strlen(prompt), count;
    int *ids = td_alloc(sizeof(int) * n, TD_MEM_OTHER);
    td_err e;
    int rc = td_utf8_encode_ids(tok->chars, (size_t)tok->V, (const unsigned char *)prompt, n, ids,
                                &count, &e);
    td_free(ids);
    if (rc != 0)
        return refuse(v, "--sample-prompt: %s (built from --data %s); use characters the training "
                         "text contains", e.msg, data);
    return 0;
}

/* ---- sizes and memory ------------------------------------------------- */

/* The plan is exact size_t arithmetic, which wraps silently for absurd
 * sizes; this is an upper estimate of the same sums in double, checked
 * first: below 2^60 bytes nothing in the plan can have wrapped. */
static int check_sizes(verdict *v, const td_run_spec *spec, const td_gpt_config *c, int Bm) {
    double L = c->L, C = c->C, T = c->T, H = c->H, Vp = c->Vp, B = Bm, N = B * T;
    double params = (Vp + T) * C + L * (12 * C * C + 13 * C) + 2 * C;
    double state =
        4.0 * params * (8 + spec->layout.ps_staleness); /* params, grads, moments, buffers */
    double att = B * H * T; /* the attention log-sum-exp rows */
    double acts = 4.0 * (L * (20 * N * C + 4 * N + att) + 20 * N * C + att + N * Vp + 4 * N);
    double est = state + acts;
    if (est < 0x1p60) return 0;
    char b[32];
    return refuse(v, "the model and batch would need about %s per rank (--layers %d --embd %d --seq %d, "
                  "%d sequences per micro-batch, vocabulary %d); no machine has that much memory",
                  td_fmt_bytes(b, sizeof b, est), c->L, c->C, c->T, Bm, c->V);
}

/* The memory this rank may use: TRIDENT_MEMORY_LIMIT_PER_RANK (one
 * device's memory per rank, as on a GPU cluster), else TRIDENT_MEMORY_LIMIT
 * or what the node still has (MemAvailable, the cgroup's room), shared by
 * the ranks on the node. Refuses a plan above it, with the plan's table. */
static int check_memory(verdict *v, const td_grid *g, const td_mem_plan *plan) {
    char source[4600], b1[32], b2[32], b3[32];
    size_t node;
    const char *per = getenv("TRIDENT_MEMORY_LIMIT_PER_RANK");
    const char *env = per ? per : getenv("TRIDENT_MEMORY_LIMIT");
    const char *env_name = per ? "TRIDENT_MEMORY_LIMIT_PER_RANK" : "TRIDENT_MEMORY_LIMIT";
    if (env) {
        if (!td_parse_bytes(env, &node))
            return refuse(v, "%s='%s' is not a byte count; use a positive number of "
                             "bytes with an optional K, M, G or T (powers of 1024), e.g. 512M or 4G",
                          env_name, env);
        snprintf(source, sizeof source, "%s=%s", env_name, env);
    } else {
        node = td_node_memory_available(source, sizeof source);
        if (node == 0) return 0; /* unknown: nothing to compare with */
    }
    int ranks = per ? 1 : td_local_ranks(); /* a per-rank limit is not shared */
    size_t share = node / (size_t)ranks, total = 0;
    for (int c = 0; c < TD_MEM_NCAT; c++) total += plan->bytes[c];
    if (total <= share) return 0;
    const char *fix = "use a smaller model, --batch or --seq, shard with --zero over more ranks, split "
                      "the sequence with --cp, or give the job more memory";
    if (per)
        refuse(v, "memory: rank %d plans %s but a rank may use %s (%s); %s", g->world_rank,
               td_fmt_bytes(b1, sizeof b1, (double)total), td_fmt_bytes(b2, sizeof b2, (double)share),
               source, fix);
    else
        refuse(v, "memory: rank %d plans %s but each of the %d ranks on this node may use %s (%s, for "
                  "the node); %s",
               g->world_rank, td_fmt_bytes(b1, sizeof b1, (double)total), ranks,
               td_fmt_bytes(b2, sizeof b2, (double)share), source, fix);
    size_t k = 0;
    k += (size_t)snprintf(v->extra + k, sizeof v->extra - k, "  plan of rank %d:\n", g->world_rank);
    for (int c = 0; c < TD_MEM_NCAT && k < sizeof v->extra; c++)
        k += (size_t)snprintf(v->extra + k, sizeof v->extra - k, "    %-12s %12s\n", td_mem_cat_name(c),
                              td_fmt_bytes(b1, sizeof b1, (double)plan->bytes[c]));
    if (k < sizeof v->extra)
        snprintf(v->extra + k, sizeof v->extra - k,
                 "    %-12s %12s\n  limit: %s for the node (%s) / %d ranks = %s per rank\n", "total",
                 td_fmt_bytes(b1, sizeof b1, (double)total), td_fmt_bytes(b2, sizeof b2, (double)node),
                 source, ranks, td_fmt_bytes(b3, sizeof b3, (double)share));
    return 1;
}

/* ---- the verdict ------------------------------------------------------ */

static void agree(const verdict *v, const td_grid *g, const char *out, int created_out) {
    int W = g->world_size;
    float first = v->failed ? (float)(W - g->world_rank) : 0.0f; /* ranks < 2^24: exact */
    if (W > 1) td_allreduce(g->world, &first, 1, TD_F32, TD_MAX);
    if (first == 0.0f) return;
    /* the job ends here: the SIGTERM of the failing rank's MPI_Abort must
     * end every rank at once, not be recorded as a stop request (which
     * left them to mpirun's SIGKILL about a second later) */
    td_stop_signals_default();
    if (out && td_out_lock_held(out)) td_out_lock_abandon(); /* a refused run leaves nothing behind */
    if (created_out) rmdir(out); /* made, but its lock not taken */
    if (W > 1) td_barrier(g->world); /* the directory is gone before anyone aborts */
    if (g->world_rank == W - (int)first) {
        fflush(stdout);
        fprintf(stderr, "trident: error: %s\n%s", v->msg, v->extra);
        td_die(TD_EXIT_USAGE); /* MPI_Abort under mpirun: the others end with it */
    }
    td_barrier(g->world); /* never completes: the failing rank aborts the job */
    td_die(TD_EXIT_USAGE);
}

td_preflight_result td_preflight(const td_run_spec *spec, const td_grid *g,
                                 const td_gpt_config *cfg, const td_dataset *d,
                                 const td_mem_plan *plan, int Bm) {
    verdict v;
    memset(&v, 0, sizeof v);
    int created_out = 0;
    /* --out, --log, --trace and --tensorboard are written by world rank 0 only, so only it probes
     * them: on a cluster another node may not even see that path, and a
     * probe there would create directories nobody uses */
    if (g->world_rank == 0) {
        /* --resume before --out is made: a refused resume leaves no empty
         * directory behind. It fails as TD_CHECK does, on this rank alone
         * while the others wait in agree() for the job to end. */
        td_run_resume_check(spec, cfg, &d->tok);
        /* a resume that could save nowhere trains nothing (run_config.c) */
        TD_CHECK(!spec->output.resume_needs_out || spec->output.out || spec->hooks.layout_pass,
                 "%s", spec->output.resume_needs_out);
        if (spec->output.out) check_out(&v, spec, &created_out);
        const char *data =
            spec->data.path && strncmp(spec->data.path, "synthetic:", 10) ? spec->data.path : NULL;
        if (spec->output.log) check_log(&v, spec->output.log, data, spec->output.out);
        if (spec->output.trace)
            check_trace(&v, spec->output.trace, spec->output.log, data, spec->output.out);
        if (spec->output.tensorboard) check_tensorboard(&v, spec->output.tensorboard, spec->output.out);
        if (spec->output.out) check_fresh(&v, spec);
    }
    /* the plan is only meaningful once the sizes are known not to wrap */
    if (!check_prompt(&v, spec->output.sample_prompt, &d->tok, spec->data.path) &&
        !check_sizes(&v, spec, cfg, g->is_server ? 1 : Bm))
        check_memory(&v, g, plan);
    agree(&v, g, spec->output.out, created_out);

    td_preflight_result r;
    td_rss_reset_peak();
    td_mem_reset_total_peak();
    r.rss_baseline = td_rss_bytes();
    r.alloc_baseline = td_mem_total_current();
    return r;
}
