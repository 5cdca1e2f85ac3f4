/* Loading the CUDA backend module (trident/cuda_module.h) on demand: only
 * --device cuda and --version call in here, so a plain run never maps the
 * CUDA runtime or cuBLASLt (their load costs every process start tens of
 * milliseconds, and the suite starts thousands). TD_CUDA_MODULE_PATH is
 * the build tree's copy, defined by CMakeLists.txt when the module is
 * built; without it this file only says that there is none. */
#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trident/backend.h"
#include "trident/cuda_module.h"

#ifdef TD_CUDA_MODULE_PATH
int td_cuda_built(void) { return 1; }
#else
int td_cuda_built(void) { return 0; }
#endif

/* dlopen of path; on failure its reason appended to err. */
static const td_cuda_module *try_path(const char *path, char *err, size_t n) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        size_t at = strlen(err);
        const char *why = dlerror();
        snprintf(err + at, n - at, "%s%s", at ? "; " : "", why ? why : path);
        return NULL;
    }
    td_cuda_module_fn get = (td_cuda_module_fn)(uintptr_t)dlsym(h, TD_CUDA_MODULE_SYMBOL);
    const td_cuda_module *m = get ? get() : NULL;
    if (!m || m->abi != TD_CUDA_ABI) {
        size_t at = strlen(err);
        snprintf(err + at, n - at, "%s%s: not a trident CUDA module of ABI %d (rebuild it)",
                 at ? "; " : "", path, TD_CUDA_ABI);
        dlclose(h);
        return NULL;
    }
    return m; /* kept loaded for the process's life */
}

const td_cuda_module *td_cuda_module_load(char *err, size_t n) {
    static const td_cuda_module *loaded;
    if (loaded) return loaded;
    err[0] = '\0';
    if (!td_cuda_built()) {
        snprintf(err, n, "this build has no CUDA backend");
        return NULL;
    }
    const char *env = getenv("TRIDENT_CUDA_MODULE");
    if (env && *env) return loaded = try_path(env, err, n);
    /* beside the executable (an installed trident and its module) */
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0) {
        exe[len] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash && (size_t)(slash - exe) + 1 + sizeof TD_CUDA_MODULE_FILE <= sizeof exe) {
            strcpy(slash + 1, TD_CUDA_MODULE_FILE);
            if (access(exe, F_OK) == 0) return loaded = try_path(exe, err, n);
        }
    }
#ifdef TD_CUDA_MODULE_PATH
    loaded = try_path(TD_CUDA_MODULE_PATH, err, n);
#endif
    return loaded;
}

int td_cuda_local_rank(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                                       "SLURM_LOCALID"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
        const char *v = getenv(vars[i]);
        char *end;
        long r = v && *v ? strtol(v, &end, 10) : -1;
        if (v && *v && *end == '\0' && r >= 0 && r <= INT_MAX) return (int)r;
    }
    return 0;
}

static void add_name(char *buf, size_t n, int *count, const char *name) {
    size_t at = strlen(buf);
    if (at + 3 < n) snprintf(buf + at, n - at, "%s%s", *count ? ", " : "", name);
    (*count)++;
}

int td_ops_missing(const td_ops *o, char *buf, size_t n) {
    int count = 0;
    buf[0] = '\0';
#define TD_OP_NEEDED(f) \
    if (!o->f) add_name(buf, n, &count, #f);
    TD_OP_NEEDED(round_n) TD_OP_NEEDED(widen_n) TD_OP_NEEDED(mm_fwd) TD_OP_NEEDED(mm_bwd)
    TD_OP_NEEDED(ln_fwd) TD_OP_NEEDED(ln_bwd) TD_OP_NEEDED(rms_fwd) TD_OP_NEEDED(rms_bwd)
    TD_OP_NEEDED(gelu_fwd) TD_OP_NEEDED(gelu_bwd) TD_OP_NEEDED(swiglu_fwd)
    TD_OP_NEEDED(swiglu_bwd) TD_OP_NEEDED(res_fwd) TD_OP_NEEDED(rope_fwd) TD_OP_NEEDED(rope_bwd)
    TD_OP_NEEDED(att_fwd) TD_OP_NEEDED(att_bwd) TD_OP_NEEDED(emb_fwd) TD_OP_NEEDED(emb_bwd)
    TD_OP_NEEDED(pos_fwd) TD_OP_NEEDED(pos_bwd) TD_OP_NEEDED(xent_max)
    TD_OP_NEEDED(xent_exp_sum) TD_OP_NEEDED(xent_finish) TD_OP_NEEDED(xent_bwd)
    TD_OP_NEEDED(sumsq) TD_OP_NEEDED(first_nonfinite) TD_OP_NEEDED(scale) TD_OP_NEEDED(add)
    TD_OP_NEEDED(adamw) TD_OP_NEEDED(sum) TD_OP_NEEDED(fill) TD_OP_NEEDED(moe_scores)
    TD_OP_NEEDED(moe_gather) TD_OP_NEEDED(moe_combine) TD_OP_NEEDED(moe_combine_bwd)
    TD_OP_NEEDED(moe_scatter_add) TD_OP_NEEDED(moe_router_bwd) TD_OP_NEEDED(muon)
    TD_OP_NEEDED(muon_momentum) TD_OP_NEEDED(muon_ns) TD_OP_NEEDED(muon_apply)
#undef TD_OP_NEEDED
    return count;
}

static void host_fail(const char *line) { td_fail("%s", line); }

const td_backend *td_backend_cuda(void) {
    char err[1024];
    const td_cuda_module *m = td_cuda_module_load(err, sizeof err);
    TD_CHECK(m, "--device cuda: cannot load the CUDA backend: %s", err);
    static const td_cuda_host host = {TD_CUDA_ABI, td_mem_account_device, td_mem_cat_name, host_fail};
    const td_backend *be = m->open(&host, td_cuda_local_rank(), err, sizeof err);
    TD_CHECK(be, "--device cuda: %s", err);
    /* The backend is partial (docs/cuda.md): refuse a run before it
     * allocates, naming what is missing, rather than assert mid-step. */
    static const char *const rows[3] = {"fp32", "bf16", "fp16"};
    for (int k = 0; k < 3; k++) {
        char missing[768];
        int n = td_ops_missing(be->ops((td_ktype)k), missing, sizeof missing);
        TD_CHECK(n == 0, "--device cuda: the CUDA backend does not run training yet: its %s row lacks "
                 "%d ops (%s); docs/cuda.md says what runs", rows[k], n, missing);
    }
    return be;
}
