/* The per-rank timeline (timeline.h): events in blocks allocated as they
 * fill, so the capacity bounds memory without being paid up front. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trident/base.h"
#include "trident/timeline.h"

typedef struct {
    char name[TD_TIMELINE_NAME];
    char cat[TD_TIMELINE_CAT];
    int mb, chunk;
    int async;     /* written as a "b"/"e" pair, not "X" */
    double t0, t1; /* us since the epoch */
} td_tl_event;

/* 4096 events (352 KiB) a block: few enough allocations for 1M events,
 * small enough that a short run holds little. */
#define BLOCK_EVENTS 4096

static int g_on;
static size_t g_cap, g_n;
static long g_dropped;
static td_tl_event **g_blocks; /* [ceil(g_cap / BLOCK_EVENTS)], NULL until used */
static double g_epoch_ms;

static void free_blocks(void) {
    size_t nb = (g_cap + BLOCK_EVENTS - 1) / BLOCK_EVENTS;
    for (size_t b = 0; g_blocks && b < nb; b++) td_free(g_blocks[b]);
    free(g_blocks);
    g_blocks = NULL;
    g_cap = g_n = 0;
    g_dropped = 0;
}

void td_timeline_enable(size_t capacity) {
    TD_ASSERT(capacity >= 1);
    free_blocks();
    g_cap = capacity;
    g_blocks = calloc((capacity + BLOCK_EVENTS - 1) / BLOCK_EVENTS, sizeof *g_blocks);
    TD_ASSERT(g_blocks);
    g_on = 1;
    td_timeline_set_epoch();
}

int td_timeline_enabled(void) { return g_on; }

void td_timeline_disable(void) {
    free_blocks();
    g_on = 0;
}

double td_timeline_now_us(void) { return (td_now_ms() - g_epoch_ms) * 1e3; }
void td_timeline_set_epoch(void) { g_epoch_ms = td_now_ms(); }
size_t td_timeline_count(void) { return g_n; }
long td_timeline_dropped(void) { return g_dropped; }

/* Copies s into out[n], cut at a character boundary: a cut UTF-8 sequence
 * would make the whole file invalid JSON text. */
static void copy_field(char *out, size_t n, const char *s) {
    size_t len = s ? strlen(s) : 0;
    if (len >= n) {
        len = n - 1;
        while (len > 0 && ((unsigned char)s[len] & 0xC0) == 0x80)
            len--; /* s[len]: first byte cut */
    }
    if (len) memcpy(out, s, len);
    out[len] = 0;
}

static void add(const char *name, const char *cat, double t0_us, double t1_us, int mb, int chunk,
                int async) {
    if (g_n == g_cap) {
        g_dropped++;
        return;
    }
    td_tl_event **blk = &g_blocks[g_n / BLOCK_EVENTS];
    if (!*blk) *blk = td_alloc(sizeof(td_tl_event) * BLOCK_EVENTS, TD_MEM_OTHER);
    td_tl_event *e = &(*blk)[g_n % BLOCK_EVENTS];
    copy_field(e->name, sizeof e->name, name);
    copy_field(e->cat, sizeof e->cat, cat);
    e->mb = mb;
    e->chunk = chunk;
    e->t0 = t0_us;
    e->t1 = t1_us < t0_us ? t0_us : t1_us;
    e->async = async;
    g_n++;
}

void td_timeline_add(const char *name, const char *cat, double t0_us, double t1_us, int mb,
                     int chunk) {
    if (g_on) add(name, cat, t0_us, t1_us, mb, chunk, 0);
}

void td_timeline_add_async(const char *name, const char *cat, double t0_us, double t1_us, int mb,
                           int chunk) {
    if (g_on) add(name, cat, t0_us, t1_us, mb, chunk, 1);
}

/* ---- JSON -------------------------------------------------------------- */

typedef struct {
    char *p;
    size_t len, cap;
} sbuf;

__attribute__((format(printf, 2, 3))) static void put(sbuf *b, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        TD_ASSERT(k >= 0);
        if ((size_t)k < b->cap - b->len) {
            b->len += (size_t)k;
            return;
        }
        b->cap = 2 * b->cap + (size_t)k + 1;
        b->p = realloc(b->p, b->cap);
        TD_ASSERT(b->p);
    }
}

static void reserve(sbuf *b, size_t more) {
    if (b->len + more < b->cap) return;
    b->cap = 2 * b->cap + more + 1;
    b->p = realloc(b->p, b->cap);
    TD_ASSERT(b->p);
}

/* A JSON string literal: quotes, backslashes and control characters
 * escaped; other bytes (UTF-8) as they are. Written directly, not through
 * put(): a million events' names would be tens of millions of calls. */
static void put_str(sbuf *b, const char *s) {
    reserve(b, 6 * strlen(s) + 3);
    char *o = b->p + b->len;
    *o++ = '"';
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\') {
            *o++ = '\\';
            *o++ = (char)*c;
        } else if (*c < 0x20) {
            o += sprintf(o, "\\u%04x", *c);
        } else {
            *o++ = (char)*c;
        }
    }
    *o++ = '"';
    *o = 0;
    b->len = (size_t)(o - b->p);
}

char *td_timeline_json(int lane, const char *lane_name, size_t *len, long *dropped) {
    sbuf b = {NULL, 0, 0};
    b.cap = 256 + g_n * 160; /* an event is ~130 characters, an async pair ~230 */
    b.p = malloc(b.cap);
    TD_ASSERT(b.p);
    b.p[0] = 0;
    /* metadata: the lane's name, and lanes ordered by number in viewers
     * that would otherwise order them by name ("rank 10" before "rank 2") */
    put(&b,
        "{\"name\":\"thread_name\",\"ph\":\"M\",\"ts\":0,\"pid\":0,\"tid\":%d,\"args\":{\"name\":",
        lane);
    put_str(&b, lane_name ? lane_name : "");
    put(&b,
        "}},\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"ts\":0,\"pid\":0,\"tid\":%d,"
        "\"args\":{\"sort_index\":%d}}",
        lane, lane);
    for (size_t i = 0; i < g_n; i++) {
        const td_tl_event *e = &g_blocks[i / BLOCK_EVENTS][i % BLOCK_EVENTS];
        /* Whole nanoseconds, and the duration as their difference: a child
         * printed with its own rounding could end past its parent and no
         * longer nest. */
        long long a = llround(e->t0 * 1e3), z = llround(e->t1 * 1e3);
        put(&b, ",\n{\"name\":");
        put_str(&b, e->name);
        put(&b, ",\"cat\":");
        put_str(&b, e->cat);
        if (e->async)
            put(&b, ",\"ph\":\"b\",\"id\":%llu,\"ts\":%.3f,\"pid\":0,\"tid\":%d,\"args\":{",
                ((unsigned long long)lane << 32) + i, a / 1e3, lane);
        else
            put(&b, ",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":0,\"tid\":%d,\"args\":{",
                a / 1e3, (z - a) / 1e3, lane);
        if (e->mb >= 0) put(&b, "\"mb\":%d%s", e->mb, e->chunk >= 0 ? "," : "");
        if (e->chunk >= 0) put(&b, "\"chunk\":%d", e->chunk);
        put(&b, "}}");
        if (e->async) {
            put(&b, ",\n{\"name\":");
            put_str(&b, e->name);
            put(&b, ",\"cat\":");
            put_str(&b, e->cat);
            put(&b, ",\"ph\":\"e\",\"id\":%llu,\"ts\":%.3f,\"pid\":0,\"tid\":%d}",
                ((unsigned long long)lane << 32) + i, z / 1e3, lane);
        }
    }
    if (len) *len = b.len;
    if (dropped) *dropped = g_dropped;
    return b.p;
}

double td_timeline_mark_start(void) { return td_timeline_enabled() ? td_timeline_now_us() : 0.0; }

void td_timeline_mark(const char *what, const char *cat, int mb, double t0_us) {
    if (!td_timeline_enabled()) return;
    char name[32];
    if (mb >= 0)
        snprintf(name, sizeof name, "%s mb %d", what, mb);
    else
        snprintf(name, sizeof name, "%s", what);
    td_timeline_add(name, cat, t0_us, td_timeline_now_us(), mb, -1);
}
