/* The accounting allocator: every large buffer carries a category, so the
 * memory report can put measured bytes beside the plan. A 64-byte header in
 * front of each block remembers its size and category. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "trident/base.h"

#define TD_ALIGN 64
/* Blocks of 4 MiB and more start on a 2 MiB boundary and ask for transparent
 * huge pages (the kernel here grants them on request only: THP "madvise").
 * Flat buffers are streamed end to end by the kernels, the optimizer and the
 * comm layer, and with 4 KiB pages every 4 KiB costs a TLB miss. Measured
 * with `trident bench comm`, 2 ranks: all-reduce of 4 MiB in one MPI call
 * went from ~9 to ~17 GB/s, of 64 MiB in 1 MiB pieces from ~5.5 to ~8.5. */
#define TD_HUGE ((size_t)2 << 20)

typedef struct {
    size_t bytes;
    int cat;
    char pad[TD_ALIGN - sizeof(size_t) - sizeof(int)];
} td_block_header;

static size_t g_current[TD_MEM_NCAT], g_peak[TD_MEM_NCAT], g_total, g_total_peak;
/* The same split by where the bytes live: device memory (a backend other
 * than cpu counts its buffers with td_mem_account_device) and host memory
 * (everything else). Peaks are per side: a category's device and host
 * peaks need not fall at the same moment. */
static size_t g_dev[TD_MEM_NCAT], g_dev_peak[TD_MEM_NCAT], g_host_peak[TD_MEM_NCAT];

static const char *g_names[TD_MEM_NCAT] = {"params", "grads",       "optimizer", "master",
                                           "gather", "activations", "comm",      "other"};

const char *td_mem_cat_name(td_mem_cat cat) {
    TD_ASSERT(cat >= 0 && cat < TD_MEM_NCAT);
    return g_names[cat];
}

void *td_alloc(size_t bytes, td_mem_cat cat) {
    TD_ASSERT(cat >= 0 && cat < TD_MEM_NCAT);
    void *raw = NULL;
    size_t total = sizeof(td_block_header) + td_round_up(bytes ? bytes : 1, TD_ALIGN);
    int huge = total >= 2 * TD_HUGE;
    if (posix_memalign(&raw, huge ? TD_HUGE : TD_ALIGN, total) != 0) {
        char b[32];
        td_fail("out of memory allocating %s for %s; reduce --batch, --seq or the model size",
                td_fmt_bytes(b, sizeof b, (double)bytes), g_names[cat]);
    }
#ifdef MADV_HUGEPAGE
    /* before the first touch, so the faults below get huge pages; advice
     * only: a kernel without THP says no and nothing changes */
    if (huge) (void)madvise(raw, td_round_up(total, 4096), MADV_HUGEPAGE);
#endif
    memset(raw, 0, total);
    td_block_header *h = raw;
    h->bytes = bytes;
    h->cat = cat;
    td_mem_account(cat, (ptrdiff_t)bytes);
    return (char *)raw + sizeof(td_block_header);
}

void td_mem_account(td_mem_cat cat, ptrdiff_t delta) {
    TD_ASSERT(cat >= 0 && cat < TD_MEM_NCAT);
    TD_ASSERT(delta >= 0 || g_current[cat] >= (size_t)-delta);
    g_current[cat] += (size_t)delta; /* wraps back down for negative deltas */
    g_total += (size_t)delta;
    if (g_current[cat] > g_peak[cat]) g_peak[cat] = g_current[cat];
    if (g_total > g_total_peak) g_total_peak = g_total;
    size_t host = g_current[cat] - g_dev[cat];
    if (host > g_host_peak[cat]) g_host_peak[cat] = host;
}

void td_mem_account_device(td_mem_cat cat, ptrdiff_t delta) {
    TD_ASSERT(cat >= 0 && cat < TD_MEM_NCAT);
    TD_ASSERT(delta >= 0 || g_dev[cat] >= (size_t)-delta);
    g_dev[cat] += (size_t)delta; /* first: td_mem_account's host side is the rest */
    if (g_dev[cat] > g_dev_peak[cat]) g_dev_peak[cat] = g_dev[cat];
    td_mem_account(cat, delta);
}

void td_free(void *ptr) {
    if (!ptr) return;
    td_block_header *h = (td_block_header *)((char *)ptr - sizeof(td_block_header));
    td_mem_account(h->cat, -(ptrdiff_t)h->bytes);
    free(h);
}

size_t td_mem_current(td_mem_cat cat) { return g_current[cat]; }
size_t td_mem_peak(td_mem_cat cat) { return g_peak[cat]; }
size_t td_mem_peak_device(td_mem_cat cat) { return g_dev_peak[cat]; }
size_t td_mem_peak_host(td_mem_cat cat) { return g_host_peak[cat]; }
size_t td_mem_total_current(void) { return g_total; }
size_t td_mem_total_peak(void) { return g_total_peak; }

void td_mem_reset_total_peak(void) { g_total_peak = g_total; }

void td_mem_reset_peaks(void) {
    for (int c = 0; c < TD_MEM_NCAT; c++)
        g_peak[c] = g_current[c], g_dev_peak[c] = g_dev[c], g_host_peak[c] = g_current[c] - g_dev[c];
    g_total_peak = g_total;
}
