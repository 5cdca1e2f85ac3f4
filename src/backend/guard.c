/* The guard device (--device guard): the CPU's kernels behind the seam, with
 * every device buffer its own page-aligned mapping kept PROT_NONE whenever
 * no backend call runs, so that a host access to a step tensor outside a
 * named copy or an op of the table faults and the handler names the buffer.
 * A call opens only the pages its arguments' extents span (an op's from its
 * shape arguments, by its rule in GUARD_OPS), so an op that strays outside
 * them inside the same buffer faults too.
 * Downloads land only at the next sync (the destination holds a poison
 * until then), as an asynchronous copy would. backend.h says what the guard
 * cannot catch. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "trident/backend.h"
#include "guard_internal.h"

/* ---- the buffer table ----------------------------------------------------
 * Sorted by base, capacity fixed in advance (mapped once, its pages touched
 * only as entries are used), so that the fault handler can binary-search it
 * without allocating. Each buffer is [base, base + map) readable and
 * writable while open, followed by one page that stays PROT_NONE always: an
 * op that runs off the end of an open buffer faults there too. */

#define GUARD_CAP 65536
#define GUARD_NAME 64

typedef struct {
    char *base;
    size_t bytes; /* as asked */
    size_t map;   /* bytes rounded up to pages (what may be opened and is counted) */
    int open;     /* ranges of it that calls hold open now (all threads) */
    int *pages;   /* per page: the ranges that hold it open (open while > 0) */
    td_mem_cat cat;
    const char *cat_name;
    const char *site; /* __FILE__ ":" line: a string literal */
    char name[GUARD_NAME];
} guard_buf;

static guard_buf *g_tab;
static volatile int g_n; /* read by the handler */
static size_t g_page;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

/* Index of the buffer whose [base, base + span) holds p (span: map, or map
 * plus the guard page for the handler); -1 when none. No locks, no calls:
 * the handler uses it. */
static int find(const void *p, int with_guard_page) {
    const char *c = p;
    int lo = 0, hi = g_n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        const guard_buf *b = &g_tab[mid];
        size_t span = b->map + (with_guard_page ? g_page : 0);
        if (c < b->base)
            hi = mid - 1;
        else if (c >= b->base + span)
            lo = mid + 1;
        else
            return mid;
    }
    return -1;
}

/* Pages [lo, hi) of b. */
static void protect(guard_buf *b, size_t lo, size_t hi, int prot) {
    if (mprotect(b->base + lo * g_page, (hi - lo) * g_page, prot) != 0)
        td_fail("--device guard: cannot %s pages %zu..%zu of buffer '%s' (%zu bytes): %s",
                prot == PROT_NONE ? "close" : "open", lo, hi, b->name, b->map, strerror(errno));
}

/* The site from the repository's top ("src/model/gpt.c:120"): __FILE__ is
 * the compiler's absolute path. */
static const char *short_site(const char *site) {
    if (!site) return "?";
    const char *best = NULL;
    for (const char *c = site; *c; c++)
        if (strncmp(c, "/src/", 5) == 0 || strncmp(c, "/tests/", 7) == 0) best = c + 1;
    return best ? best : site;
}

static size_t guard_footprint(size_t bytes) {
    size_t map = (bytes + g_page - 1) / g_page * g_page;
    return map ? map : g_page;
}

static void *guard_alloc(size_t bytes, td_mem_cat cat, const char *name, const char *site) {
    size_t map = guard_footprint(bytes);
    /* PROT_NONE from the start: fresh anonymous pages read zero once opened. */
    char *base = mmap(NULL, map + g_page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED)
        td_fail("--device guard: cannot map %zu bytes for '%s' (%s): %s", bytes, name ? name : "?",
                td_mem_cat_name(cat), strerror(errno));
    pthread_mutex_lock(&g_lock);
    if (g_n == GUARD_CAP) {
        pthread_mutex_unlock(&g_lock);
        td_fail("--device guard: more than %d device buffers (the guard's table is fixed in "
                "advance; raise GUARD_CAP in src/backend/guard.c)", GUARD_CAP);
    }
    int at = 0;
    while (at < g_n && g_tab[at].base < base) at++;
    int *pages = calloc(map / g_page, sizeof *pages);
    TD_ASSERT(pages);
    guard_buf b = {.base = base, .bytes = bytes, .map = map, .pages = pages, .cat = cat,
                   .cat_name = td_mem_cat_name(cat), .site = short_site(site)};
    strncpy(b.name, name ? name : "?", GUARD_NAME - 1);
    /* Make room first, then write the entry, then count it: the handler
     * never sees a count that covers a half-written entry. */
    memmove(&g_tab[at + 1], &g_tab[at], (size_t)(g_n - at) * sizeof *g_tab);
    g_tab[at] = b;
    g_n = g_n + 1;
    pthread_mutex_unlock(&g_lock);
    td_mem_account_device(cat, (ptrdiff_t)map);
    return base;
}

static void guard_free(void *p) {
    pthread_mutex_lock(&g_lock);
    int i = find(p, 0);
    TD_ASSERT(i >= 0 && g_tab[i].base == p); /* not a device buffer, or freed twice */
    TD_ASSERT(g_tab[i].open == 0);           /* freed while a call uses it */
    guard_buf b = g_tab[i];
    g_n = g_n - 1;
    memmove(&g_tab[i], &g_tab[i + 1], (size_t)(g_n - i) * sizeof *g_tab);
    pthread_mutex_unlock(&g_lock);
    TD_ASSERT(munmap(b.base, b.map + g_page) == 0);
    free(b.pages);
    td_mem_account_device(b.cat, -(ptrdiff_t)b.map);
}

static int guard_lookup(const void *p, const char **name, size_t *offset) {
    pthread_mutex_lock(&g_lock);
    int i = find(p, 0);
    if (i >= 0) {
        if (name) *name = g_tab[i].name;
        if (offset) *offset = (size_t)((const char *)p - g_tab[i].base);
    }
    pthread_mutex_unlock(&g_lock);
    return i >= 0;
}

/* ---- enter and leave -----------------------------------------------------
 * A call opens the pages its ranges span: the ranges resolved to pages of
 * their buffers, sorted, and those of one buffer that overlap or touch
 * merged, so that one mprotect opens each run (and none runs for pages
 * already open). Each page counts the ranges that hold it, so calls nest (an
 * op inside a copy's bracket) and overlap across threads; a page closes
 * when its count drops to zero. Each thread keeps a stack of the page runs
 * it opened and a stack of frames (where each enter began). */

typedef struct {
    char *base;    /* the buffer's */
    size_t lo, hi; /* pages [lo, hi) */
} guard_run;

typedef struct {
    guard_run *runs; /* opened, closed at the leave of their frame */
    int nb, cb;
    int *frames;
    int nf, cf;
    guard_run *tmp; /* scratch of open_ranges */
    int ct;
} guard_stack;

static _Thread_local guard_stack g_st;

#define GUARD_GROW(arr, n, cap, first)                                                             \
    do {                                                                                           \
        if ((n) == (cap)) {                                                                        \
            (cap) = (cap) ? 2 * (cap) : (first);                                                   \
            (arr) = realloc((arr), (size_t)(cap) * sizeof *(arr));                                 \
            TD_ASSERT(arr);                                                                        \
        }                                                                                          \
    } while (0)

static void frame_begin(void) {
    GUARD_GROW(g_st.frames, g_st.nf, g_st.cf, 16);
    g_st.frames[g_st.nf++] = g_st.nb;
}

/* Pages [lo, hi) of b: each count up (open: on 0 -> 1) or down (close: on
 * 1 -> 0); the pages that change state change by runs, one mprotect each. */
static void count_pages(guard_buf *b, size_t lo, size_t hi, int open) {
    size_t run = SIZE_MAX;
    for (size_t pg = lo; pg <= hi; pg++) {
        int flips = 0;
        if (pg < hi) {
            if (open) {
                flips = b->pages[pg]++ == 0;
            } else {
                TD_ASSERT(b->pages[pg] > 0);
                flips = --b->pages[pg] == 0;
            }
        }
        if (flips && run == SIZE_MAX) run = pg;
        if (!flips && run != SIZE_MAX) {
            protect(b, run, pg, open ? PROT_READ | PROT_WRITE : PROT_NONE);
            run = SIZE_MAX;
        }
    }
}

static int run_order(const void *a, const void *b) {
    const guard_run *x = a, *y = b;
    if (x->base != y->base) return x->base < y->base ? -1 : 1;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Open the pages r[0..n) span (host memory, NULL and empty ranges are left
 * alone; a range running past its buffer's end is cut there: an access
 * beyond faults in the page that is never opened). */
static void open_ranges(const td_dev_range *r, int n) {
    pthread_mutex_lock(&g_lock);
    int m = 0;
    for (int j = 0; j < n; j++) {
        if (!r[j].p || !r[j].bytes) continue;
        int i = find(r[j].p, 0);
        if (i < 0) continue;
        const guard_buf *b = &g_tab[i];
        size_t off = (size_t)((const char *)r[j].p - b->base);
        size_t end = r[j].bytes > b->map - off ? b->map : off + r[j].bytes;
        GUARD_GROW(g_st.tmp, m, g_st.ct, 16);
        g_st.tmp[m++] = (guard_run){b->base, off / g_page, (end + g_page - 1) / g_page};
    }
    if (m > 1) qsort(g_st.tmp, (size_t)m, sizeof *g_st.tmp, run_order);
    for (int j = 0; j < m;) {
        guard_run u = g_st.tmp[j++];
        while (j < m && g_st.tmp[j].base == u.base && g_st.tmp[j].lo <= u.hi) {
            if (g_st.tmp[j].hi > u.hi) u.hi = g_st.tmp[j].hi;
            j++;
        }
        guard_buf *b = &g_tab[find(u.base, 0)];
        b->open++;
        count_pages(b, u.lo, u.hi, 1);
        GUARD_GROW(g_st.runs, g_st.nb, g_st.cb, 64);
        g_st.runs[g_st.nb++] = u;
    }
    pthread_mutex_unlock(&g_lock);
}

static void guard_enter(const td_dev_range *r, int n) {
    frame_begin();
    open_ranges(r, n);
}
void td_guard_enter(const td_dev_range *r, int n) { guard_enter(r, n); }

void td_guard_leave(void) {
    TD_ASSERT(g_st.nf > 0); /* leave without enter */
    int start = g_st.frames[--g_st.nf];
    pthread_mutex_lock(&g_lock);
    while (g_st.nb > start) {
        guard_run u = g_st.runs[--g_st.nb];
        int i = find(u.base, 0);
        TD_ASSERT(i >= 0 && g_tab[i].open > 0);
        g_tab[i].open--;
        count_pages(&g_tab[i], u.lo, u.hi, 0);
    }
    pthread_mutex_unlock(&g_lock);
}

/* ---- downloads -----------------------------------------------------------
 * The source is read now into a private copy; the destination gets the
 * poison at once and the data at the next sync. */

typedef struct {
    void *dst, *data;
    size_t bytes;
} guard_pending;

static guard_pending *g_pend;
static int g_npend, g_cpend;

/* TD_GUARD_POISON (backend.h): 0xF4 at even addresses, 0xFF at odd, so that
 * every naturally aligned element reads the same whatever the copy's
 * offset: fp32, fp64, bf16, fp16 NaN; int32 -720908 and int64 about
 * -3.1e15 (not -1, which first_nonfinite means "none"). */
static void poison(void *dst, size_t bytes) {
    unsigned char *d = dst;
    for (size_t i = 0; i < bytes; i++) d[i] = ((uintptr_t)(d + i) & 1) ? 0xFF : 0xF4;
}

static void guard_download(void *dst_host, const void *src_dev, size_t bytes) {
    if (!bytes) return; /* a 2-D copy's rows of width 0 */
    TD_ASSERT(!guard_lookup(dst_host, NULL, NULL)); /* a download's destination is host memory */
    void *data = malloc(bytes);
    TD_ASSERT(data);
    const td_dev_range r[1] = {{src_dev, bytes}};
    guard_enter(r, 1);
    memcpy(data, src_dev, bytes);
    td_guard_leave();
    poison(dst_host, bytes);
    pthread_mutex_lock(&g_lock);
    if (g_npend == g_cpend) {
        g_cpend = g_cpend ? 2 * g_cpend : 16;
        g_pend = realloc(g_pend, (size_t)g_cpend * sizeof *g_pend);
        TD_ASSERT(g_pend);
    }
    g_pend[g_npend++] = (guard_pending){dst_host, data, bytes};
    pthread_mutex_unlock(&g_lock);
}

static void guard_sync(void) {
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < g_npend; i++) { /* in call order: a later copy wins */
        memcpy(g_pend[i].dst, g_pend[i].data, g_pend[i].bytes);
        free(g_pend[i].data);
    }
    g_npend = 0;
    pthread_mutex_unlock(&g_lock);
}

/* ---- the fault handler --------------------------------------------------- */

static struct sigaction g_old_segv, g_old_bus;

static size_t put_str(char *buf, size_t at, size_t cap, const char *s) {
    while (*s && at < cap) buf[at++] = *s++;
    return at;
}

static size_t put_u64(char *buf, size_t at, size_t cap, uint64_t v) {
    char d[24];
    int n = 0;
    do d[n++] = (char)('0' + v % 10), v /= 10;
    while (v);
    while (n && at < cap) buf[at++] = d[--n];
    return at;
}

/* Async-signal-safe: the table is read, not locked (a fault inside the
 * guard's own bookkeeping is not what it looks for), the line is built on
 * the stack and written with one write(2). */
static void on_fault(int sig, siginfo_t *si, void *uc) {
    int i = find(si->si_addr, 1);
    if (i >= 0) {
        const guard_buf *b = &g_tab[i];
        char line[512];
        size_t n = 0, cap = sizeof line - 1;
        n = put_str(line, n, cap, "trident: error: host access to device memory: buffer '");
        n = put_str(line, n, cap, b->name);
        n = put_str(line, n, cap, "' (");
        n = put_str(line, n, cap, b->cat_name);
        n = put_str(line, n, cap, "), offset ");
        n = put_u64(line, n, cap, (uint64_t)((const char *)si->si_addr - b->base));
        n = put_str(line, n, cap, " of ");
        n = put_u64(line, n, cap, b->bytes);
        n = put_str(line, n, cap, ", allocated at ");
        n = put_str(line, n, cap, b->site);
        line[n++] = '\n';
        ssize_t w = write(2, line, n);
        (void)w;
        /* A programmer error, as a failed TD_ASSERT (which exits 3 through
         * the abort hook): no MPI_Abort from a signal handler; the peers
         * see a dead rank. */
        _exit(3);
    }
    /* Not ours: the previous action again. A faulting instruction runs
     * again and faults into it; a sent signal is sent again. */
    sigaction(sig, sig == SIGBUS ? &g_old_bus : &g_old_segv, NULL);
    if (si->si_code <= 0) raise(sig);
}

/* ---- the backend ---------------------------------------------------------- */

static const td_backend g_guard = {.device = TD_DEVICE_GUARD,
                                   .alloc = guard_alloc,
                                   .free = guard_free,
                                   .enter = guard_enter,
                                   .leave = td_guard_leave,
                                   .download = guard_download,
                                   .sync = guard_sync,
                                   .lookup = guard_lookup,
                                   .ops = td_guard_row,
                                   .footprint = guard_footprint};

const td_backend *td_backend_guard(void) {
    static int ready;
    if (ready) return &g_guard;
    ready = 1;
    g_page = (size_t)sysconf(_SC_PAGESIZE);
    g_tab = mmap(NULL, GUARD_CAP * sizeof *g_tab, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (g_tab == MAP_FAILED) td_fail("--device guard: cannot map its buffer table: %s", strerror(errno));
    td_guard_build_rows();
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    TD_ASSERT(sigaction(SIGSEGV, &sa, &g_old_segv) == 0);
    TD_ASSERT(sigaction(SIGBUS, &sa, &g_old_bus) == 0);
    return &g_guard;
}
