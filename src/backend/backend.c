/* The run's backend and the buffer half's dispatch: every copy between host
 * and device is counted here by purpose (the report's host traffic), and
 * goes through the backend's hooks so that the guard can check it. */
#include <string.h>

#include "trident/backend.h"
#include "trident/cuda_module.h"

static const td_backend *g_be = &td_backend_cpu;
static int g_allocated; /* a device allocation happened: the choice is fixed */
static td_host_traffic g_traffic;

static const char *const g_device_names[TD_DEVICE_N] = {"cpu", "guard", "cuda"};
static const char *const g_purpose_names[TD_HOST_NPURPOSE] = {
    "tokens", "scalars", "moe", "init", "ckpt", "eval", "export", "comm", "other"};

const char *td_device_name(td_device d) {
    TD_ASSERT(d >= 0 && d < TD_DEVICE_N);
    return g_device_names[d];
}

int td_device_parse(const char *s) {
    for (int i = 0; i < TD_DEVICE_N; i++)
        if (s && strcmp(s, g_device_names[i]) == 0) return i;
    return -1;
}

td_device td_device_flag(const char *s) {
    int d = td_device_parse(s ? s : "cpu");
    TD_CHECK(d >= 0, "--device '%s' is not a device; valid: cpu, guard, cuda", s);
    TD_CHECK(d != TD_DEVICE_CUDA || td_cuda_built(),
             "--device cuda: this build has no CUDA backend (configured with -DTRIDENT_CUDA=OFF or "
             "without the CUDA toolkit); valid here: cpu, guard");
    return (td_device)d;
}

const char *td_host_purpose_name(td_host_purpose p) {
    TD_ASSERT(p >= 0 && p < TD_HOST_NPURPOSE);
    return g_purpose_names[p];
}

void td_backend_use(td_device d) {
    if (d == g_be->device) return;
    TD_ASSERT(!g_allocated);
    g_be = d == TD_DEVICE_CUDA ? td_backend_cuda() : d == TD_DEVICE_GUARD ? td_backend_guard() : &td_backend_cpu;
}

const td_backend *td_backend_current(void) { return g_be; }
td_device td_backend_device(void) { return g_be->device; }
int td_backend_is_device(void) { return g_be->device != TD_DEVICE_CPU; }

const td_ops *td_ops_for(td_ktype k) { return g_be->ops(k); }
const td_ops *td_ops_cpu(td_ktype k) { return td_backend_cpu.ops(k); }

void *td_dev_alloc_at(size_t bytes, td_mem_cat cat, const char *name, const char *site) {
    g_allocated = 1;
    return g_be->alloc ? g_be->alloc(bytes, cat, name, site) : td_alloc(bytes, cat);
}

void td_dev_free(void *p) {
    if (!p) return;
    if (g_be->free)
        g_be->free(p);
    else
        td_free(p);
}

size_t td_dev_footprint(size_t bytes) { return g_be->footprint ? g_be->footprint(bytes) : bytes; }

int td_dev_is_device(const void *p, const char **name, size_t *offset) {
    return p && g_be->lookup ? g_be->lookup(p, name, offset) : 0;
}

/* Opens [a, a + na) and [b, b + nb) (b NULL: one range). */
static void enter(const void *a, size_t na, const void *b, size_t nb) {
    if (!g_be->enter) return;
    const td_dev_range r[2] = {{a, na}, {b, nb}};
    g_be->enter(r, 2);
}

/* The bytes a 2-D copy spans from its first row to the end of its last. */
static size_t span_2d(size_t pitch, size_t width, size_t height) {
    return (height - 1) * pitch + width;
}

static void leave(void) {
    if (g_be->leave) g_be->leave();
}

void td_dev_zero(void *dst, size_t bytes) {
    if (!bytes) return;
    if (g_be->zero) {
        g_be->zero(dst, bytes);
        return;
    }
    enter(dst, bytes, NULL, 0);
    memset(dst, 0, bytes);
    leave();
}

void td_dev_copy(void *dst, const void *src, size_t bytes) {
    if (!bytes || dst == src) return;
    if (g_be->copy_2d) {
        g_be->copy_2d(dst, bytes, src, bytes, bytes, 1);
        return;
    }
    enter(dst, bytes, src, bytes);
    memmove(dst, src, bytes);
    leave();
}

void td_dev_copy_2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                    size_t height) {
    if (!width || !height) return;
    if (g_be->copy_2d) {
        g_be->copy_2d(dst, dpitch, src, spitch, width, height);
        return;
    }
    enter(dst, span_2d(dpitch, width, height), src, span_2d(spitch, width, height));
    for (size_t r = 0; r < height; r++)
        memmove((char *)dst + r * dpitch, (const char *)src + r * spitch, width);
    leave();
}

static void count(int up, size_t bytes, td_host_purpose why) {
    TD_ASSERT(why >= 0 && why < TD_HOST_NPURPOSE);
    if (up)
        g_traffic.up_bytes[why] += bytes, g_traffic.up_calls[why]++;
    else
        g_traffic.down_bytes[why] += bytes, g_traffic.down_calls[why]++;
}

void td_dev_upload(void *dst_dev, const void *src_host, size_t bytes, td_host_purpose why) {
    count(1, bytes, why);
    if (!bytes) return;
    if (g_be->copy_2d) {
        g_be->copy_2d(dst_dev, bytes, src_host, bytes, bytes, 1);
        return;
    }
    enter(dst_dev, bytes, NULL, 0);
    memcpy(dst_dev, src_host, bytes);
    leave();
}

void td_dev_download(void *dst_host, const void *src_dev, size_t bytes, td_host_purpose why) {
    count(0, bytes, why);
    if (!bytes) return;
    if (g_be->download) {
        g_be->download(dst_host, src_dev, bytes);
        return;
    }
    memcpy(dst_host, src_dev, bytes);
}

void td_dev_upload_2d(void *dst_dev, size_t dpitch, const void *src_host, size_t spitch,
                      size_t width, size_t height, td_host_purpose why) {
    count(1, width * height, why);
    if (!width || !height) return;
    if (g_be->copy_2d) {
        g_be->copy_2d(dst_dev, dpitch, src_host, spitch, width, height);
        return;
    }
    enter(dst_dev, span_2d(dpitch, width, height), NULL, 0);
    for (size_t r = 0; r < height; r++)
        memcpy((char *)dst_dev + r * dpitch, (const char *)src_host + r * spitch, width);
    leave();
}

void td_dev_download_2d(void *dst_host, size_t dpitch, const void *src_dev, size_t spitch,
                        size_t width, size_t height, td_host_purpose why) {
    count(0, width * height, why);
    for (size_t r = 0; r < height; r++) {
        void *d = (char *)dst_host + r * dpitch;
        const void *s = (const char *)src_dev + r * spitch;
        if (g_be->download)
            g_be->download(d, s, width);
        else
            memcpy(d, s, width);
    }
}

void td_dev_sync(void) {
    if (g_be->sync) g_be->sync();
}

/* One stream, run in call order: an event is a sequence number, and waiting
 * for it is a sync (the downloads before it land). */
static uint64_t g_seq;
td_dev_event td_dev_event_record(void) {
    td_dev_event e = {++g_seq};
    return e;
}
void td_dev_event_wait(td_dev_event e) {
    (void)e;
    td_dev_sync();
}
void td_dev_stream_wait(td_dev_event e) { (void)e; }

void td_dev_traffic(td_host_traffic *out) { *out = g_traffic; }
void td_dev_traffic_reset(void) { memset(&g_traffic, 0, sizeof g_traffic); }
