/* The guard device (--device guard): the CPU's kernels behind the seam, with
 * every device buffer its own page-aligned mapping kept PROT_NONE whenever
 * no backend call runs, so that a host access to a step tensor outside a
 * named copy or an op of the table faults and the handler names the buffer.
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
    size_t map;   /* bytes rounded up to pages (what is opened and counted) */
    int open;     /* calls that hold it open now (all threads) */
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

static void protect(guard_buf *b, int prot) {
    if (mprotect(b->base, b->map, prot) != 0)
        td_fail("--device guard: cannot %s buffer '%s' (%zu bytes): %s",
                prot == PROT_NONE ? "close" : "open", b->name, b->map, strerror(errno));
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
    guard_buf b = {.base = base, .bytes = bytes, .map = map, .cat = cat,
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
 * Each thread keeps a stack of the bases it opened and a stack of frames
 * (where each enter began), so calls nest: an op inside a copy's bracket,
 * or a wrapper that opens its spans one by one. A buffer stays open while
 * any call, on any thread, holds it. */

typedef struct {
    char **bases;
    int nb, cb;
    int *frames;
    int nf, cf;
} guard_stack;

static _Thread_local guard_stack g_st;

static void frame_begin(void) {
    if (g_st.nf == g_st.cf) {
        g_st.cf = g_st.cf ? 2 * g_st.cf : 16;
        g_st.frames = realloc(g_st.frames, (size_t)g_st.cf * sizeof *g_st.frames);
        TD_ASSERT(g_st.frames);
    }
    g_st.frames[g_st.nf++] = g_st.nb;
}

/* Open the buffer that holds p (host memory and NULL are left alone). */
static void open_ptr(const void *p) {
    if (!p) return;
    pthread_mutex_lock(&g_lock);
    int i = find(p, 0);
    if (i >= 0) {
        if (g_tab[i].open++ == 0) protect(&g_tab[i], PROT_READ | PROT_WRITE);
        if (g_st.nb == g_st.cb) {
            g_st.cb = g_st.cb ? 2 * g_st.cb : 64;
            g_st.bases = realloc(g_st.bases, (size_t)g_st.cb * sizeof *g_st.bases);
            TD_ASSERT(g_st.bases);
        }
        g_st.bases[g_st.nb++] = g_tab[i].base;
    }
    pthread_mutex_unlock(&g_lock);
}

static void guard_enter(const void *const *ptrs, int n) {
    frame_begin();
    for (int i = 0; i < n; i++) open_ptr(ptrs[i]);
}

static void guard_leave(void) {
    TD_ASSERT(g_st.nf > 0); /* leave without enter */
    int start = g_st.frames[--g_st.nf];
    pthread_mutex_lock(&g_lock);
    while (g_st.nb > start) {
        int i = find(g_st.bases[--g_st.nb], 0);
        TD_ASSERT(i >= 0 && g_tab[i].open > 0);
        if (--g_tab[i].open == 0) protect(&g_tab[i], PROT_NONE);
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
    const void *p[1] = {src_dev};
    guard_enter(p, 1);
    memcpy(data, src_dev, bytes);
    guard_leave();
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

/* ---- the ops rows --------------------------------------------------------
 * Each entry of the CPU's row wrapped: open the buffers of every pointer
 * argument, run the CPU entry, close them. GUARD_OPS lists the entries with
 * their parameters, pointer arguments and call arguments: a new entry of
 * td_ops needs one line here (guard_ops_check refuses a row with a CPU
 * entry that has no wrapper). */

#define GUARD_OPS(X, P)                                                                            \
    X(P, round_n, (void *dst, const float *src, size_t n), (dst, src), (dst, src, n))             \
    X(P, widen_n, (float *dst, const void *src, size_t n), (dst, src), (dst, src, n))             \
    X(P, mm_fwd, (void *out, td_ktype ot, const void *inp, const void *w, const float *bias, int N, \
                  int C, int OC),                                                                  \
      (out, inp, w, bias), (out, ot, inp, w, bias, N, C, OC))                                      \
    X(P, mm_bwd, (void *dinp, td_ktype dt, float *dw, float *dbias, const void *dout,             \
                  const void *inp, const void *w, int N, int C, int OC),                           \
      (dinp, dw, dbias, dout, inp, w), (dinp, dt, dw, dbias, dout, inp, w, N, C, OC))              \
    X(P, ln_fwd, (void *out, float *mean, float *rstd, const void *inp, const float *w,           \
                  const float *b, int N, int C),                                                   \
      (out, mean, rstd, inp, w, b), (out, mean, rstd, inp, w, b, N, C))                            \
    X(P, ln_bwd, (void *dinp, float *dw, float *db, const void *dout, const void *inp,            \
                  const float *w, const float *mean, const float *rstd, int N, int C),             \
      (dinp, dw, db, dout, inp, w, mean, rstd), (dinp, dw, db, dout, inp, w, mean, rstd, N, C))    \
    X(P, rms_fwd, (void *out, float *rstd, const void *inp, const float *w, int N, int C,         \
                   float eps),                                                                     \
      (out, rstd, inp, w), (out, rstd, inp, w, N, C, eps))                                         \
    X(P, rms_bwd, (void *dinp, float *dw, const void *dout, const void *inp, const float *w,      \
                   const float *rstd, int N, int C),                                               \
      (dinp, dw, dout, inp, w, rstd), (dinp, dw, dout, inp, w, rstd, N, C))                        \
    X(P, gelu_fwd, (void *out, const void *inp, size_t n), (out, inp), (out, inp, n))             \
    X(P, gelu_bwd, (void *dinp, const void *inp, const void *dout, size_t n), (dinp, inp, dout),  \
      (dinp, inp, dout, n))                                                                        \
    X(P, swiglu_fwd, (void *h, const void *gu, int N, int F), (h, gu), (h, gu, N, F))             \
    X(P, swiglu_bwd, (void *dgu, const void *dh, const void *gu, int N, int F), (dgu, dh, gu),    \
      (dgu, dh, gu, N, F))                                                                         \
    X(P, res_fwd, (void *out, const void *a, const void *b, size_t n), (out, a, b), (out, a, b, n)) \
    X(P, rope_fwd, (void *x, const float *cs, int B, int T, int st, int col, int heads, int hs),  \
      (x, cs), (x, cs, B, T, st, col, heads, hs))                                                  \
    X(P, rope_bwd, (void *g, const float *cs, int B, int T, int st, int col, int heads, int hs),  \
      (g, cs), (g, cs, B, T, st, col, heads, hs))                                                  \
    X(P, att_fwd, (void *out, float *lse, const void *q, const void *k, const void *v,            \
                   const td_attn_shape *s, int acc),                                               \
      (out, lse, q, k, v), (out, lse, q, k, v, s, acc))                                            \
    X(P, att_bwd, (void *dq, void *dk, void *dv, const void *dout, const void *out,               \
                   const float *lse, const void *q, const void *k, const void *v,                  \
                   const td_attn_shape *s),                                                        \
      (dq, dk, dv, dout, out, lse, q, k, v), (dq, dk, dv, dout, out, lse, q, k, v, s))             \
    X(P, emb_fwd, (float *out, const int *tok, const float *wte, int lo, int rows, int N, int C), \
      (out, tok, wte), (out, tok, wte, lo, rows, N, C))                                            \
    X(P, emb_bwd, (float *dwte, const float *dout, const int *tok, int lo, int rows, int N,       \
                   int C),                                                                         \
      (dwte, dout, tok), (dwte, dout, tok, lo, rows, N, C))                                        \
    X(P, pos_fwd, (float *out, const float *wpe, const int *pos, int n0, int N, int T, int C),    \
      (out, wpe, pos), (out, wpe, pos, n0, N, T, C))                                               \
    X(P, pos_bwd, (float *dwpe, const float *dout, const int *pos, int n0, int N, int T, int C),  \
      (dwpe, dout, pos), (dwpe, dout, pos, n0, N, T, C))                                           \
    X(P, xent_max, (float *mx, const float *logits, int N, int V, int Vp), (mx, logits),          \
      (mx, logits, N, V, Vp))                                                                      \
    X(P, xent_exp_sum, (float *sum, float *xt, float *probs, const float *logits,                 \
                        const float *mx, const int *tg, int lo, int N, int V, int Vp),             \
      (sum, xt, probs, logits, mx, tg), (sum, xt, probs, logits, mx, tg, lo, N, V, Vp))            \
    X(P, xent_finish, (float *losses, float *probs, const float *sum, const float *xt,            \
                       const float *mx, const int *tg, int N, int V, int Vp),                      \
      (losses, probs, sum, xt, mx, tg), (losses, probs, sum, xt, mx, tg, N, V, Vp))                \
    X(P, xent_bwd, (float *dlogits, const float *probs, const int *tg, int lo, const float *dloss, \
                    int N, int V, int Vp),                                                         \
      (dlogits, probs, tg, dloss), (dlogits, probs, tg, lo, dloss, N, V, Vp))                      \
    X(P, sumsq, (double *dst, const float *x, size_t n), (dst, x), (dst, x, n))                   \
    X(P, first_nonfinite, (int64_t *dst, const float *x, size_t n), (dst, x), (dst, x, n))        \
    X(P, scale, (float *x, float s, size_t n), (x), (x, s, n))                                    \
    X(P, add, (float *dst, const float *src, size_t n), (dst, src), (dst, src, n))                \
    X(P, adamw, (const td_adamw_span *sp, int n, const td_adamw_hyper *h), (open_spans(sp, n)),         \
      (sp, n, h))                                                                                  \
    X(P, sum, (double *dst, const float *x, size_t n), (dst, x), (dst, x, n))                     \
    X(P, fill, (float *x, float v, size_t n), (x), (x, v, n))                                     \
    /* moe */                                                                                      \
    X(P, moe_scores, (float *sc, const float *lg, int N, int E, int sm), (sc, lg), (sc, lg, N, E, sm)) \
    X(P, moe_gather, (void *dst, const void *src, const int *pos, int N, int K, int C),           \
      (dst, src, pos), (dst, src, pos, N, K, C))                                                   \
    X(P, moe_combine, (float *out, int sh, const void *y, const int *pos, const float *wts,        \
                       int row0, int Ns, int K, int C),                                            \
      (out, y, pos, wts), (out, sh, y, pos, wts, row0, Ns, K, C))                                  \
    X(P, moe_combine_bwd, (float *dw, void *dy, const void *dout, const void *y, const int *pos,  \
                           const float *wts, int N, int K, int C),                                 \
      (dw, dy, dout, y, pos, wts), (dw, dy, dout, y, pos, wts, N, K, C))                           \
    X(P, moe_scatter_add, (float *dst, const void *dx, const int *pos, int N, int K, int C),      \
      (dst, dx, pos), (dst, dx, pos, N, K, C))                                                     \
    X(P, moe_router_bwd, (float *dl, const float *dw, const float *lg, const float *sc,           \
                          const int *idx, const float *gate, const float *wts, const float *st,   \
                          const td_moe_router_shape *s),                                           \
      (dl, dw, lg, sc, idx, gate, wts, st), (dl, dw, lg, sc, idx, gate, wts, st, s))

#define GUARD_ID(...) __VA_ARGS__

/* adamw's spans are a host array of device pointers: opens them all (a
 * pointer argument of the list, so NULL). */
static const void *open_spans(const td_adamw_span *sp, int n) {
    for (int i = 0; i < n; i++) {
        const void *s[4] = {sp[i].p, sp[i].m, sp[i].v, sp[i].g};
        for (int j = 0; j < 4; j++) open_ptr(s[j]);
    }
    return NULL;
}

#define GUARD_KT_f32 TD_K_F32
#define GUARD_KT_bf16 TD_K_BF16
#define GUARD_KT_f16 TD_K_F16

#define GUARD_WRAP(P, name, PARAMS, PTRS, ARGS)                                                    \
    static void P##_##name PARAMS {                                                                \
        frame_begin();                                                                             \
        guard_open_all(GUARD_ID PTRS);                                                             \
        td_ops_cpu(GUARD_KT_##P)->name ARGS;                                                       \
        guard_leave();                                                                             \
    }
#define GUARD_SET(P, name, PARAMS, PTRS, ARGS) row->name = cpu->name ? P##_##name : NULL;

/* Opens each argument (a macro over a compound literal: the arguments'
 * types differ). */
#define guard_open_all(...)                                                                        \
    do {                                                                                           \
        const void *a_[] = {__VA_ARGS__};                                                          \
        for (size_t i_ = 0; i_ < sizeof a_ / sizeof a_[0]; i_++) open_ptr(a_[i_]);                 \
    } while (0)

GUARD_OPS(GUARD_WRAP, f32)
GUARD_OPS(GUARD_WRAP, bf16)
GUARD_OPS(GUARD_WRAP, f16)

static td_ops g_rows[3];

typedef void (*guard_fn)(void);
/* td_ops past `es` is function pointers only: a CPU entry the guard row
 * lacks is an entry added to td_ops without its GUARD_OPS line. */
static void guard_ops_check(const td_ops *row, const td_ops *cpu) {
    size_t first = offsetof(td_ops, round_n), n = (sizeof(td_ops) - first) / sizeof(guard_fn);
    for (size_t i = 0; i < n; i++) {
        guard_fn a, b;
        memcpy(&a, (const char *)row + first + i * sizeof a, sizeof a);
        memcpy(&b, (const char *)cpu + first + i * sizeof b, sizeof b);
        if (b && !a)
            td_fail("--device guard: td_ops entry %zu (after es) has no guard wrapper: add its "
                    "line to GUARD_OPS in src/backend/guard.c", i);
    }
}

#define GUARD_BUILD_ROW(P)                                                                         \
    do {                                                                                           \
        const td_ops *cpu = td_ops_cpu(GUARD_KT_##P);                                              \
        td_ops *row = &g_rows[GUARD_KT_##P];                                                       \
        row->k = cpu->k;                                                                           \
        row->es = cpu->es;                                                                         \
        GUARD_OPS(GUARD_SET, P)                                                                    \
        guard_ops_check(row, cpu);                                                                 \
    } while (0)

static const td_ops *guard_ops(td_ktype k) {
    TD_ASSERT(k >= 0 && k < 3);
    return &g_rows[k];
}

/* ---- the backend ---------------------------------------------------------- */

static const td_backend g_guard = {.device = TD_DEVICE_GUARD,
                                   .alloc = guard_alloc,
                                   .free = guard_free,
                                   .enter = guard_enter,
                                   .leave = guard_leave,
                                   .download = guard_download,
                                   .sync = guard_sync,
                                   .lookup = guard_lookup,
                                   .ops = guard_ops,
                                   .footprint = guard_footprint};

const td_backend *td_backend_guard(void) {
    static int ready;
    if (ready) return &g_guard;
    ready = 1;
    g_page = (size_t)sysconf(_SC_PAGESIZE);
    g_tab = mmap(NULL, GUARD_CAP * sizeof *g_tab, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (g_tab == MAP_FAILED) td_fail("--device guard: cannot map its buffer table: %s", strerror(errno));
    GUARD_BUILD_ROW(f32);
    GUARD_BUILD_ROW(bf16);
    GUARD_BUILD_ROW(f16);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    TD_ASSERT(sigaction(SIGSEGV, &sa, &g_old_segv) == 0);
    TD_ASSERT(sigaction(SIGBUS, &sa, &g_old_bus) == 0);
    return &g_guard;
}
