/* The --trace file (trace_file.h). Rank 0 receives the ranks' texts one at
 * a time and appends each to the file, so it holds one rank's text at most
 * beside its own. The comm layer moves fp32 and bf16 only: a text travels as
 * bf16 elements (raw 16-bit units, two bytes each; MPI moves them unchanged),
 * and its length as fp32 pieces small enough to be exact. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trace_file.h"
#include "trident/base.h"
#include "trident/files.h"
#include "trident/comm.h"
#include "trident/timeline.h"

#define TAG_HEAD 7101
#define TAG_TEXT 7102
#define LOW24 ((1u << 24) - 1) /* floats hold integers below 2^24 exactly */

void td_trace_file_start(const td_grid *g) {
    (void)g;
    td_timeline_enable(TD_TIMELINE_DEFAULT_CAPACITY);
}

/* "rank r (dp i, pp j, tp k)" over the axes of size > 1, or "rank r (server s)". */
static void lane_name(char *out, size_t n, const td_grid *g) {
    char coords[96];
    if (g->is_server)
        snprintf(coords, sizeof coords, "server %d", g->server_rank);
    else
        td_grid_describe(g, coords, sizeof coords, " ", ", ");
    if (coords[0])
        snprintf(out, n, "rank %d (%.80s)", g->world_rank, coords);
    else
        snprintf(out, n, "rank %d", g->world_rank);
}

/* One rank's length and dropped count, each split in 24-bit halves. */
static void pack_head(float h[4], size_t len, long dropped) {
    h[0] = (float)(len & LOW24), h[1] = (float)(len >> 24);
    h[2] = (float)((size_t)dropped & LOW24), h[3] = (float)((size_t)dropped >> 24);
}

static void unpack_head(const float h[4], size_t *len, long *dropped) {
    *len = (size_t)h[0] | (size_t)h[1] << 24;
    *dropped = (long)((size_t)h[2] | (size_t)h[3] << 24);
}

/* Rank 0's writes: the first failure is kept (*err) and nothing more is
 * written, while the other ranks' texts are still received (they must not
 * block in their sends). */
static void put(FILE *f, int *err, const void *p, size_t n) {
    if (*err || !f) return;
    errno = 0;
    if (fwrite(p, 1, n, f) != n) *err = errno ? errno : EIO;
}

int td_trace_file_write(const char *path, const td_grid *g, char *why, size_t cap) {
    char name[96];
    lane_name(name, sizeof name, g);
    size_t len;
    long dropped;
    char *text = td_timeline_json(g->world_rank, name, &len, &dropped);
    td_timeline_disable(); /* the gather below is not part of the run */
    int W = g->world_size;
    if (g->world_rank != 0) {
        float h[4];
        pack_head(h, len, dropped);
        td_send(g->world, h, 4, TD_F32, 0, TAG_HEAD);
        text[len] = 0; /* the pad byte of an odd length: the NUL, inside the allocation */
        td_send(g->world, text, (len + 1) / 2, TD_BF16, 0, TAG_TEXT);
        free(text);
        return 0;
    }
    char tmp[8192];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    const char *refused = NULL; /* td_fopen_output's reason: a FIFO, device, ... */
    FILE *f = td_fopen_output(tmp, &refused);
    int opened = f != NULL, err = opened ? 0 : (errno ? errno : EINVAL);
    const char *what = f ? "writing" : "creating";
    static const char head[] = "{\"traceEvents\":[\n",
                      tail[] = "\n],\n\"displayTimeUnit\":\"ms\"}\n";
    put(f, &err, head, sizeof head - 1);
    put(f, &err, text, len);
    free(text);
    long total_dropped = dropped;
    int dropping = dropped > 0;
    for (int r = 1; r < W; r++) {
        float h[4];
        td_recv(g->world, h, 4, TD_F32, r, TAG_HEAD);
        size_t n;
        long d;
        unpack_head(h, &n, &d);
        char *buf = malloc(n + 2);
        TD_CHECK(buf, "--trace %s: no memory for rank %d's %zu bytes of events", path, r, n);
        td_recv(g->world, buf, (n + 1) / 2, TD_BF16, r, TAG_TEXT);
        put(f, &err, ",\n", 2);
        put(f, &err, buf, n);
        free(buf);
        total_dropped += d;
        dropping += d > 0;
    }
    put(f, &err, tail, sizeof tail - 1);
    if (f && !err && (fflush(f) != 0 || fsync(fileno(f)) != 0)) err = errno ? errno : EIO;
    if (f && fclose(f) != 0 && !err) err = errno ? errno : EIO, what = "closing";
    if (!err && rename(tmp, path) != 0) err = errno, what = "renaming";
    if (err) {
        if (opened) unlink(tmp); /* nothing half-written stays behind (a refused tmp is not ours) */
        snprintf(why, cap, "--trace %s: %s %s failed: %s (%s was removed%s)", path, what, tmp,
                 opened ? strerror(err) : refused, tmp, opened ? "" : "; nothing was written");
        return err;
    }
    if (total_dropped > 0)
        fprintf(stderr,
                "trident: warning: --trace %s: %ld events dropped on %d of %d ranks beyond the "
                "capacity of %zu events per rank (the trace holds each rank's first events)\n",
                path, total_dropped, dropping, W, (size_t)TD_TIMELINE_DEFAULT_CAPACITY);
    td_log("trace: %s (%d lanes; open in https://ui.perfetto.dev or chrome://tracing)\n", path, W);
    return 0;
}
