/* The accounting allocator: every large buffer carries a category, so the
 * memory report can put measured bytes beside the plan. A 64-byte header in
 * front of each block remembers its size and category. */
#include <stdlib.h>
#include <string.h>

#include "trident/base.h"

#define TD_ALIGN 64

typedef struct {
    size_t bytes;
    int cat;
    char pad[TD_ALIGN - sizeof(size_t) - sizeof(int)];
} td_block_header;

static size_t g_current[TD_MEM_NCAT], g_peak[TD_MEM_NCAT], g_total, g_total_peak;

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
    if (posix_memalign(&raw, TD_ALIGN, total) != 0) {
        char b[32];
        td_fail("out of memory allocating %s for %s; reduce --batch, --seq or the model size",
                td_fmt_bytes(b, sizeof b, (double)bytes), g_names[cat]);
    }
    memset(raw, 0, total);
    td_block_header *h = raw;
    h->bytes = bytes;
    h->cat = cat;
    g_current[cat] += bytes;
    if (g_current[cat] > g_peak[cat]) g_peak[cat] = g_current[cat];
    g_total += bytes;
    if (g_total > g_total_peak) g_total_peak = g_total;
    return (char *)raw + sizeof(td_block_header);
}

void td_free(void *ptr) {
    if (!ptr) return;
    td_block_header *h = (td_block_header *)((char *)ptr - sizeof(td_block_header));
    TD_ASSERT(h->cat >= 0 && h->cat < TD_MEM_NCAT && g_current[h->cat] >= h->bytes);
    g_current[h->cat] -= h->bytes;
    g_total -= h->bytes;
    free(h);
}

size_t td_mem_current(td_mem_cat cat) { return g_current[cat]; }
size_t td_mem_peak(td_mem_cat cat) { return g_peak[cat]; }
size_t td_mem_total_current(void) { return g_total; }
size_t td_mem_total_peak(void) { return g_total_peak; }

void td_mem_reset_peaks(void) {
    for (int c = 0; c < TD_MEM_NCAT; c++) g_peak[c] = g_current[c];
    g_total_peak = g_total;
}
