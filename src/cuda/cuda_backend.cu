/* The CUDA backend's module entry and its buffer half (backend.h): device
 * memory by category with trident's accounting, zero, copies, 2-D copies,
 * up/downloads and the sync, all queued on one stream. Events stay the
 * dispatcher's sequence numbers (src/backend/backend.c): with one stream a
 * wait for an event is a stream sync, which is what they mean there.
 *
 * COMPILED, NEVER RUN ON A GPU (docs/cuda.md): the machines this was
 * written on have the toolkit but no GPU. */
#include <cublasLt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

cudaStream_t td_cu_stream;
static const td_cuda_host *g_host;
static int g_device = -1;

void td_cu_fail(const char *fmt, ...) {
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    g_host->fail(line);
    abort(); /* fail does not return */
}

void td_cu_check_at(cudaError_t e, const char *what, const char *file, int line) {
    if (e == cudaSuccess) return;
    const char *f = strstr(file, "src/cuda/");
    td_cu_fail("--device cuda (GPU %d): %s: %s (%d) at %s:%d", g_device, what, cudaGetErrorString(e),
               (int)e, f ? f : file, line);
}

/* ---- the buffer table ------------------------------------------------------
 * Sorted by base: free finds a buffer's size and category for the
 * accounting, lookup names the buffer a pointer lies in. */

typedef struct {
    char *base;
    size_t bytes, counted;
    td_mem_cat cat;
    char name[48];
} cu_buf;

static cu_buf *g_tab;
static int g_n, g_cap;

static int find(const void *p) {
    const char *c = (const char *)p;
    int lo = 0, hi = g_n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        if (c < g_tab[mid].base)
            hi = mid - 1;
        else if (c >= g_tab[mid].base + (g_tab[mid].bytes ? g_tab[mid].bytes : 1))
            lo = mid + 1;
        else
            return mid;
    }
    return -1;
}

/* cudaMalloc's pointers are 256-byte aligned and its small sizes rounded
 * up within the driver's pools; 512 bytes is what the accounting and the
 * memory plan count per buffer (the plan and the counts agree by
 * construction; the device-wide figure is cudaMemGetInfo's). */
static size_t cu_footprint(size_t bytes) { return bytes ? (bytes + 511) / 512 * 512 : 512; }

void *td_cu_alloc_counted(size_t bytes, td_mem_cat cat, const char *name) {
    void *p = NULL;
    size_t counted = cu_footprint(bytes);
    cudaError_t e = cudaMalloc(&p, counted);
    if (e != cudaSuccess)
        td_cu_fail("--device cuda (GPU %d): cannot allocate %zu bytes for '%s' (%s): %s", g_device,
                   bytes, name ? name : "?", g_host->cat_name(cat), cudaGetErrorString(e));
    /* backend.h: a buffer's bytes start zero */
    TD_CU(cudaMemsetAsync(p, 0, counted, td_cu_stream));
    if (g_n == g_cap) {
        g_cap = g_cap ? 2 * g_cap : 256;
        g_tab = (cu_buf *)realloc(g_tab, (size_t)g_cap * sizeof *g_tab);
        if (!g_tab) td_cu_fail("--device cuda: out of host memory for the buffer table");
    }
    int at = 0;
    while (at < g_n && g_tab[at].base < (char *)p) at++;
    memmove(&g_tab[at + 1], &g_tab[at], (size_t)(g_n - at) * sizeof *g_tab);
    cu_buf b;
    memset(&b, 0, sizeof b);
    b.base = (char *)p, b.bytes = bytes, b.counted = counted, b.cat = cat;
    snprintf(b.name, sizeof b.name, "%s", name ? name : "?");
    g_tab[at] = b;
    g_n++;
    g_host->account(cat, (ptrdiff_t)counted);
    return p;
}

static void *cu_alloc(size_t bytes, td_mem_cat cat, const char *name, const char *site) {
    (void)site;
    return td_cu_alloc_counted(bytes, cat, name);
}

static void cu_free(void *p) {
    int i = find(p);
    if (i < 0 || g_tab[i].base != p) td_cu_fail("--device cuda: td_dev_free of %p, not a device buffer", p);
    cu_buf b = g_tab[i];
    g_n--;
    memmove(&g_tab[i], &g_tab[i + 1], (size_t)(g_n - i) * sizeof *g_tab);
    TD_CU(cudaFree(p)); /* synchronizes: nothing queued still uses it */
    g_host->account(b.cat, -(ptrdiff_t)b.counted);
}

static int cu_lookup(const void *p, const char **name, size_t *offset) {
    int i = find(p);
    if (i < 0) return 0;
    if (name) *name = g_tab[i].name;
    if (offset) *offset = (size_t)((const char *)p - g_tab[i].base);
    return 1;
}

/* ---- copies ---------------------------------------------------------------- */

static void cu_zero(void *dst, size_t bytes) { TD_CU(cudaMemsetAsync(dst, 0, bytes, td_cu_stream)); }

static void cu_copy_2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                       size_t height) {
    const char *d = (const char *)dst, *s = (const char *)src;
    size_t dspan = (height - 1) * dpitch + width, sspan = (height - 1) * spitch + width;
    if (d < s + sspan && s < d + dspan && find(src) >= 0) {
        /* overlapping device ranges (memmove's contract): cudaMemcpy's is
         * undefined, so through a scratch copy of the source span */
        void *tmp = NULL;
        TD_CU(cudaMallocAsync(&tmp, sspan, td_cu_stream));
        TD_CU(cudaMemcpyAsync(tmp, src, sspan, cudaMemcpyDeviceToDevice, td_cu_stream));
        TD_CU(cudaMemcpy2DAsync(dst, dpitch, tmp, spitch, width, height, cudaMemcpyDeviceToDevice,
                                td_cu_stream));
        TD_CU(cudaFreeAsync(tmp, td_cu_stream));
        return;
    }
    /* cudaMemcpyDefault: the direction from the pointers (unified
     * addressing). From pageable host memory the call returns once the
     * source is staged, so the caller may reuse it at once (backend.h). */
    if (height == 1)
        TD_CU(cudaMemcpyAsync(dst, src, width, cudaMemcpyDefault, td_cu_stream));
    else
        TD_CU(cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, cudaMemcpyDefault,
                                td_cu_stream));
}

static void cu_download(void *dst_host, const void *src_dev, size_t bytes) {
    TD_CU(cudaMemcpyAsync(dst_host, src_dev, bytes, cudaMemcpyDeviceToHost, td_cu_stream));
}

static void cu_sync(void) { TD_CU(cudaStreamSynchronize(td_cu_stream)); }

static const td_backend g_cuda = {.device = TD_DEVICE_CUDA,
                                  .alloc = cu_alloc,
                                  .free = cu_free,
                                  .download = cu_download,
                                  .zero = cu_zero,
                                  .copy_2d = cu_copy_2d,
                                  .sync = cu_sync,
                                  .lookup = cu_lookup,
                                  .ops = td_cu_ops,
                                  .footprint = cu_footprint};

/* ---- describe and open ------------------------------------------------------- */

static size_t put(char *buf, size_t n, size_t at, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static size_t put(char *buf, size_t n, size_t at, const char *fmt, ...) {
    if (at >= n) return at;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(buf + at, n - at, fmt, ap);
    va_end(ap);
    return w > 0 ? at + (size_t)w : at;
}

static void version3(int v, int *a, int *b, int *c) { *a = v / 1000, *b = v % 1000 / 10, *c = v % 10; }

static void cu_describe(char *buf, size_t n) {
    size_t at = 0;
    int rt = 0, drv = 0, a, b, c;
    cudaRuntimeGetVersion(&rt);
    version3(rt, &a, &b, &c);
    at = put(buf, n, at, "  CUDA runtime %d.%d (static, built against %d.%d)\n", a, b,
             CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10);
    size_t lt = cublasLtGetVersion();
    at = put(buf, n, at, "  cuBLASLt %zu.%zu.%zu (built against %d.%d.%d)\n", lt / 10000, lt / 100 % 100,
             lt % 100, CUBLAS_VER_MAJOR, CUBLAS_VER_MINOR, CUBLAS_VER_PATCH);
    cudaError_t e = cudaDriverGetVersion(&drv);
    if (e != cudaSuccess || drv == 0) {
        at = put(buf, n, at, "  CUDA driver: none\n");
    } else {
        version3(drv, &a, &b, &c);
        at = put(buf, n, at, "  CUDA driver %d.%d\n", a, b);
    }
    int count = 0;
    e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        put(buf, n, at, "  GPU: none (cudaGetDeviceCount: %s (%d))\n", cudaGetErrorString(e), (int)e);
        cudaGetLastError(); /* not sticky: clear it */
        return;
    }
    for (int i = 0; i < count; i++) {
        cudaDeviceProp p;
        if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
        at = put(buf, n, at, "  GPU %d: %s, sm_%d%d, %.1f GiB\n", i, p.name, p.major, p.minor,
                 (double)p.totalGlobalMem / (1024.0 * 1024 * 1024));
    }
}

static const td_backend *cu_open(const td_cuda_host *h, int local_rank, char *err, size_t n) {
    if (!h || h->abi != TD_CUDA_ABI) {
        snprintf(err, n, "the CUDA module's ABI is %d, trident's %d (rebuild)", TD_CUDA_ABI, h ? h->abi : -1);
        return NULL;
    }
    g_host = h;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        snprintf(err, n, "no usable GPU: cudaGetDeviceCount: %s (%d)",
                 e != cudaSuccess ? cudaGetErrorString(e) : "no devices", (int)e);
        return NULL;
    }
    /* CUDA_VISIBLE_DEVICES (as Slurm sets it) already cut count to the
     * visible ones, numbered from 0 */
    g_device = td_cuda_pick_device(local_rank, count);
    e = cudaSetDevice(g_device);
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&td_cu_stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        snprintf(err, n, "no usable GPU: GPU %d of %d (local rank %d): %s (%d)", g_device, count,
                 local_rank, cudaGetErrorString(e), (int)e);
        return NULL;
    }
    td_cu_gemm_init();
    return &g_cuda;
}

static const td_cuda_module g_module = {TD_CUDA_ABI, cu_describe, cu_open};

extern "C" __attribute__((visibility("default"))) const td_cuda_module *td_cuda_module_entry(void) {
    return &g_module;
}
