#!/usr/bin/env python3
"""The device seam (include/trident/backend.h): step tensors and kernels
belong to the backend.

  (a) No kernel is reached outside src/kernels and src/backend: the kernels
      are the functions declared in include/trident/kernels.h,
      kernels_bf16.h, kernels_f16.h, attention.h and rope.h (parsed from the
      headers, less the helpers in NOT_STEP_OPS below). A call, or an
      address taken for a table, both count: model and parallel code runs
      them through td_ops_for(kind), so a device backend can run its own.
  (b) No step tensor is allocated outside src/backend: td_alloc(bytes, cat)
      or td_mem_account(cat, delta) with cat one of the step categories
      (STEP_CATS, base.h's td_mem_cat) belongs in td_dev_alloc. A category
      that is not a literal (a variable, a function's result) cannot be read
      here and counts as a step category: host memory says TD_MEM_COMM or
      TD_MEM_OTHER literally. Functions whose such allocations hold host
      state that exists only on the cpu device are listed, with the reason,
      in HOST_STATE_FUNCS.
  (c) td_ops_cpu (the CPU row whatever the device) only in the oracles:
      src/train/verify*.c (tests/ is not scanned: tests/layouts and the unit
      tests are oracles too), and the host-side decoder (src/model/decode.c
      and the routing it calls, HOST_ROW_FUNCS) that sample runs on host
      copies of the parameters; also in HOST_ROW_FUNCS, calibration, which
      measures the CPU kernels' own rates on host buffers.

The seam is being built while this runs: the call sites not converted yet
are listed in tests/lint/backend_pending.txt, one `path:function` per line
(a `#` starts a comment: the generator writes what each site does). The
check fails on a site that is not listed (a new debt) and on a listed site
that is clean or gone (a paid debt stays listed): the list only shrinks.

Usage: check_backend.py ROOT              check ROOT/src and ROOT/apps against
                                          ROOT/tests/lint/backend_pending.txt
       check_backend.py ROOT --write      rewrite that list from the tree as
                                          it is (after a merge: the
                                          coordinator's command is
                                          python3 tests/lint/check_backend.py . --write)
       check_backend.py selftest          the checker on a made-up tree
Exit 0: clean; 1: a site unlisted or a listed site paid; 2: usage.
"""
import os
import re
import sys

HEADERS = ["kernels.h", "kernels_bf16.h", "kernels_f16.h", "attention.h", "rope.h"]

# Declared in those headers but not ops of a step: each is host arithmetic
# or process set-up that touches no step tensor, so no backend row needs it.
NOT_STEP_OPS = {
    # the OpenMP team the CPU kernels use: process set-up (--threads)
    "td_kernels_set_threads": "thread count, set once at start-up",
    "td_kernels_threads": "thread count, read by the report and the planner",
    # peak and measured GEMM rates: the planner's and the report's arithmetic
    "td_sgemm_peak_gflops": "a machine's peak rate, for the planner",
    "td_sgemm_rate_gflops": "a rate computed from a shape and a time",
    "td_matmul_lowp_peak_gflops": "a machine's peak rate, for the planner",
    # what the CPU can do and how much scratch it takes: plan arithmetic
    "td_bf16_native": "whether the CPU has bf16 instructions (a capability query)",
    "td_f16_native": "whether the CPU has fp16 instructions (a capability query)",
    "td_matmul_bf16_describe": "a string naming the GEMM path, for the report",
    "td_matmul_bf16_scratch_bytes": "bytes of scratch, for the memory plan",
    "td_matmul_f16_convert_bytes": "bytes of scratch, for the memory plan",
    "td_matmul_convert_scratch_bytes": "bytes of scratch, for the memory plan",
    # the kernels' own thread-local scratch, given back at the end of a run:
    # no tensor argument, nothing a device buffer is involved in
    "td_matmul_bf16_release": "frees the GEMM's thread-local scratch at exit",
    "td_lowp_release_scratch": "frees the 16-bit kernels' scratch at exit",
    "td_attn_release_scratch": "frees attention's thread-local scratch at exit",
    # one scalar converted on the host (a loss, a hyperparameter, a value a
    # test or a file holds): not a tensor op; the array casts (_n) are ops
    "td_bf16_from_float": "one scalar, on the host",
    "td_bf16_to_float": "one scalar, on the host",
    "td_bf16_from_float_ref": "one scalar, on the host (the reference rounding)",
    "td_f16_from_float": "one scalar, on the host",
    "td_f16_to_float": "one scalar, on the host",
    "td_f16_from_float_ref": "one scalar, on the host (the reference rounding)",
    "td_f16_to_float_ref": "one scalar, on the host (the reference rounding)",
    # RoPE's frequency table: computed once on the host from the config and
    # then uploaded like any parameter (rope.h); the rotation itself is an op
    "td_rope_inv_freq": "RoPE frequencies from the config, once, on the host",
    "td_rope_llama3_scale": "Llama 3's frequency scaling, once, on the host",
    "td_rope_table": "the cos/sin table, computed once on the host",
}

# Sites that run a kernel on host memory by design, not on a step tensor.
HOST_DATA_SITES = {
    # export converts a host copy of the parameters (already downloaded
    # through the checkpoint's staged ranges) to the file's bf16: file
    # format work on host bytes, as a writer of any other format would
    "src/ckpt/export.c:td_st_plan_write": "bf16 cast of host bytes for a .safetensors file",
}

# Functions whose step-category host allocations hold state that exists only
# on the cpu device (refused or never reached on any other): not step
# tensors of a device run, so not debts of the seam.
HOST_STATE_FUNCS = {
    # MPI shared windows are host memory, made only on the cpu device
    # (src/parallel/dp.c shared_window(): dp > 1 and !td_backend_is_device());
    # on a device the same buffers are td_dev_alloc'ed step tensors
    "src/comm/shm_direct.c:td_comm_alloc_shared": "MPI shared windows, made only on the cpu device (dp.c shared_window())",
    "src/comm/shm_direct.c:td_comm_free_shared": "MPI shared windows, made only on the cpu device (dp.c shared_window())",
    # top-k compression's residual and moments: host state of a mode the
    # rules table refuses on devices (src/parallel/compat.c row topk-device)
    "src/parallel/grad_payload.c:td_gpay_create": "top-k's host state, refused on devices (compat.c row topk-device)",
}

KERNEL_DIRS = ("src/kernels/", "src/backend/")
# base defines the allocator itself (td_alloc calls td_mem_account)
ALLOC_DIRS = ("src/backend/", "src/base/")
STEP_CATS = ["TD_MEM_PARAMS", "TD_MEM_GRADS", "TD_MEM_OPTIM", "TD_MEM_MASTER", "TD_MEM_GATHER",
             "TD_MEM_ACTS"]
HOST_CATS = ["TD_MEM_COMM", "TD_MEM_OTHER"]
# The oracles, and the host-side decoder: sample and the KV cache run on host
# copies of the parameters fetched by named downloads (src/run/sample.c), so
# they compute with the CPU row on host memory whatever the device.
ORACLES = re.compile(r"^src/train/verify[^/]*\.c$|^src/model/decode\.c$")
HOST_ROW_FUNCS = {
    "src/model/moe.c:td_moe_route_token": "the decoder's one-token routing, on host memory",
    # `trident calibrate` measures the host CPU's GEMM rates for the
    # planner's profile: the CPU row on host buffers is what it measures
    "src/train/calibrate_rates.c:linear_round": "calibration of the CPU kernels' rates, on host buffers",
}
PENDING = "tests/lint/backend_pending.txt"

STRIP = re.compile(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
# The C++ linkage guards (`#ifdef __cplusplus extern "C" { #endif`): their
# braces would put a whole header inside a block.
CPLUSPLUS = re.compile(r"^[ \t]*#\s*ifdef\s+__cplusplus\b.*?^[ \t]*#\s*endif\b[^\n]*", re.M | re.S)
PREPROC = re.compile(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", re.M)


def blank(m):
    """A stripped span as spaces, its newlines kept (line numbers stay right)."""
    return re.sub(r"[^\n]", " ", m.group(0))


def clean(text):
    """Comments, string and character literals and preprocessor lines out."""
    return PREPROC.sub(blank, STRIP.sub(blank, CPLUSPLUS.sub(blank, text)))


def top_level(code):
    """[(owner, start, end)] of each brace block at file scope: a function's
    body, owned by the function's name, or an initializer, by the object's."""
    out = []
    depth = 0
    head_start = 0
    start = 0
    owner = "<file scope>"
    for i, ch in enumerate(code):
        if ch == "{":
            if depth == 0:
                head = code[head_start:i]
                m = re.search(r"(\w+)\s*\((?:[^()]|\([^()]*\))*\)\s*$", head)
                if m:
                    owner = m.group(1)
                else:
                    m = re.search(r"(\w+)\s*(?:\[[^\]]*\]\s*)*=\s*$", head)
                    owner = m.group(1) if m else "<file scope>"
                start = i
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                out.append((owner, start, i + 1))
                head_start = i + 1
        elif ch == ";" and depth == 0:
            head_start = i + 1
    return out


def declared(code):
    """Names of the functions a header declares (prototypes at file scope)."""
    names = []
    depth = 0
    stmt = []
    for ch in code:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        elif ch == ";" and depth == 0:
            s = "".join(stmt).strip()
            stmt = []
            m = re.search(r"\b(td_\w+)\s*\(", s)
            if m and not s.startswith("typedef"):
                names.append(m.group(1))
        elif depth == 0:
            stmt.append(ch)   # a struct's or enum's members are no prototypes
    return names


def kernels(root):
    ks = set()
    for h in HEADERS:
        with open(os.path.join(root, "include", "trident", h), encoding="utf-8") as fh:
            ks.update(declared(clean(fh.read())))
    missing = sorted(set(NOT_STEP_OPS) - ks)
    return ks - set(NOT_STEP_OPS), missing


def args_of(code, open_paren):
    """The top-level arguments of the call whose '(' is at open_paren."""
    depth = 0
    args, cur = [], []
    for ch in code[open_paren:]:
        if ch in "([{":
            depth += 1
            if depth == 1:
                continue
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                args.append("".join(cur).strip())
                return args
        elif ch == "," and depth == 1:
            args.append("".join(cur).strip())
            cur = []
            continue
        cur.append(ch)
    return args


def sources(root):
    for top in ("src", "apps"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for f in sorted(files):
                if f.endswith((".c", ".h")):
                    path = os.path.join(dirpath, f)
                    yield os.path.relpath(path, root).replace(os.sep, "/"), path


def scan(root):
    """{path:function: [(line, what)]} of every site the seam has not reached."""
    ks, _ = kernels(root)
    ref = re.compile(r"\b(td_\w+)\b")
    sites = {}
    for rel, path in sources(root):
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        code = clean(text)
        blocks = top_level(code)
        # A macro's body is blanked out of `code` (its braces would confuse
        # the blocks): each #define is read alone, owned by the macro's name.
        nolit = STRIP.sub(blank, text)
        for m in PREPROC.finditer(nolit):
            d = re.match(r"\s*#\s*define\s+(\w+)", m.group(0))
            if d:
                blocks.append(("<macro %s>" % d.group(1), m.start(), m.end()))
                code = code[:m.start()] + m.group(0) + code[m.end():]
        for owner, start, end in blocks:
            body = code[start:end]
            for m in ref.finditer(body):
                name = m.group(1)
                pos = start + m.start()
                line = code.count("\n", 0, pos) + 1
                after = code[start + m.end():start + m.end() + 40].lstrip()
                what = None
                key = "%s:%s" % (rel, owner)
                if name in ks and not rel.startswith(KERNEL_DIRS) and key not in HOST_DATA_SITES:
                    what = "kernel %s" % name
                elif name == "td_ops_cpu" and not rel.startswith("src/backend/") and not ORACLES.match(rel) \
                        and key not in HOST_ROW_FUNCS:
                    what = "td_ops_cpu outside the oracles"
                elif name in ("td_alloc", "td_mem_account") and after.startswith("(") \
                        and not rel.startswith(ALLOC_DIRS) and key not in HOST_STATE_FUNCS:
                    a = args_of(code, code.index("(", start + m.end()))
                    cat = (a[-1] if name == "td_alloc" else a[0]) if a else ""
                    if cat in STEP_CATS:
                        what = "%s %s" % (name, cat)
                    elif cat not in HOST_CATS:
                        what = "%s category `%s` (not a literal: counted as a step tensor)" % (
                            name, " ".join(cat.split()))
                if what:
                    sites.setdefault(key, []).append((line, what))
    return sites


def read_pending(path):
    listed = {}
    if not os.path.exists(path):
        return listed
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            s = line.split("#", 1)[0].strip()
            if s:
                listed[s] = n
    return listed


def write_pending(path, sites):
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("# Call sites the device seam has not reached yet (tests/lint/check_backend.py):\n"
                 "# each line is a debt; delete it when the site is converted (the check fails\n"
                 "# while a paid debt stays listed). Regenerate after a merge with\n"
                 "#   python3 tests/lint/check_backend.py . --write\n")
        for key in sorted(sites):
            whats = sorted({w for _, w in sites[key]})
            fh.write("%s  # %s\n" % (key, "; ".join(whats)))


def compare(sites, listed):
    """(messages, failed)"""
    msgs = []
    for key in sorted(set(sites) - set(listed)):
        for line, what in sorted(sites[key]):
            path, fn = key.split(":", 1)
            msgs.append("%s:%d: in %s: %s outside the backend (include/trident/backend.h: td_ops_for, "
                        "td_dev_alloc; the oracles use td_ops_cpu)" % (path, line, fn, what))
    for key in sorted(set(listed) - set(sites)):
        msgs.append("%s:%d: %s is listed but reaches no kernel or step allocation any more: delete "
                    "the line (the list only shrinks)" % (PENDING, listed[key], key))
    return msgs, bool(msgs)


SELFTEST = {
    "include/trident/kernels.h": "void td_kernels_set_threads(int n);\n"
                                 "typedef void (*td_fn)(float *out);\n"
                                 "typedef struct { int td_not_a_kernel; } td_s;\n"
                                 "void td_gelu_forward(float *out, const float *inp, int N);\n"
                                 "/* void td_commented(void); */\n",
    "include/trident/kernels_bf16.h": "float td_bf16_to_float(unsigned short x);\n"
                                      "void td_bf16_to_float_n(float *o, const unsigned short *i,\n"
                                      "                        size_t n);\n",
    "include/trident/kernels_f16.h": "int td_f16_native(void);\n",
    "include/trident/attention.h": "#ifdef __cplusplus\nextern \"C\" {\n#endif\n"
                                   "void td_attn_forward(float *o);\n#ifdef __cplusplus\n}\n#endif\n",
    "include/trident/rope.h": "void td_rope_table(float *t);\nvoid td_rope_forward(float *x);\n",
    "src/kernels/gelu.c": "void td_gelu_forward(float *out, const float *inp, int N) { }\n",
    "src/backend/cpu.c": "static void g(float *o) { td_gelu_forward(o, o, 1); }\n"
                         "void *b(void) { return td_alloc(8, TD_MEM_PARAMS); }\n",
    "src/model/a.c": "void f(float *x) {\n  td_gelu_forward(x, x, 4);\n}\n"          # (a) new: fails
                     "static const struct { void (*fn)(float *); } table[] = {\n"
                     "  { td_attn_forward },\n};\n"                                     # (a) listed
                     "void h(float *x) { /* td_rope_forward(x) */ td_kernels_set_threads(2);\n"
                     "  float y = td_bf16_to_float(1); puts(\"td_gelu_forward(\"); }\n",  # clean
    "src/parallel/b.c": "void *p(size_t n, int c) {\n"
                        "  void *a = td_alloc(n, TD_MEM_OTHER);\n"                      # host: clean
                        "  void *g = td_alloc(n * sizeof(float),\n      TD_MEM_GRADS);\n"  # (b) new
                        "  return td_alloc(n, c);\n}\n"                                 # (b) not literal
                        "void q(void) { td_mem_account(TD_MEM_ACTS, 8); }\n",            # (b) listed
    "src/train/verify.c": "void v(void) { td_ops_cpu(0); }\n"                          # oracle: clean
                          "#define GELU(x) \\\n  td_gelu_forward(x, x, 1)\n",           # (a) new                           # oracle: clean
    "src/run/c.c": "void r(void) { td_ops_cpu(0); td_rope_forward(0); }\n",             # (a)+(c) new
    "apps/x.c": "int main(void) { td_bf16_to_float_n(0, 0, 0); return 0; }\n",           # (a) listed
    PENDING: "# debts\nsrc/model/a.c:table  # kernel\nsrc/parallel/b.c:q\napps/x.c:main\n"
             "src/model/gone.c:paid  # converted, still listed: fails\n",
}


def selftest():
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        for rel, text in SELFTEST.items():
            os.makedirs(os.path.join(d, os.path.dirname(rel)), exist_ok=True)
            with open(os.path.join(d, rel), "w") as fh:
                fh.write(text)
        ks, missing = kernels(d)
        sites = scan(d)
        listed = read_pending(os.path.join(d, PENDING))
        msgs, failed = compare(sites, listed)
        write_pending(os.path.join(d, "regen.txt"), sites)
        regen = read_pending(os.path.join(d, "regen.txt"))
    problems = []
    want_ks = {"td_gelu_forward", "td_bf16_to_float_n", "td_attn_forward", "td_rope_forward"}
    if ks != want_ks:
        problems.append("kernels %s, want %s" % (sorted(ks), sorted(want_ks)))
    want_sites = {
        "src/model/a.c:f": [(2, "kernel td_gelu_forward")],
        "src/model/a.c:table": [(5, "kernel td_attn_forward")],
        "src/parallel/b.c:p": [(3, "td_alloc TD_MEM_GRADS"),
                               (5, "td_alloc category `c` (not a literal: counted as a step tensor)")],
        "src/parallel/b.c:q": [(7, "td_mem_account TD_MEM_ACTS")],
        "src/run/c.c:r": [(1, "kernel td_rope_forward"), (1, "td_ops_cpu outside the oracles")],
        "apps/x.c:main": [(1, "kernel td_bf16_to_float_n")],
        "src/train/verify.c:<macro GELU>": [(3, "kernel td_gelu_forward")],
    }
    got_sites = {k: sorted(v) for k, v in sites.items()}
    if got_sites != want_sites:
        problems.append("sites %s, want %s" % (got_sites, want_sites))
    # new: a.c:f (1), b.c:p (2), c.c:r (2), verify.c's macro (1); paid: gone.c:paid (1)
    if not failed or len(msgs) != 7 or not any("gone.c:paid is listed" in m for m in msgs):
        problems.append("messages %s" % msgs)
    if set(regen) != set(want_sites):
        problems.append("--write lists %s" % sorted(regen))
    if problems:
        print("check_backend selftest: " + "; ".join(problems))
        return 1
    print("check_backend selftest: kernels parsed (helpers, typedefs and comments left out); a direct "
          "call, a table's address, step and unreadable categories and td_ops_cpu outside the oracles "
          "seen; listed sites pass, a paid one fails; --write lists them all")
    return 0


def main(argv):
    if len(argv) == 2 and argv[1] == "selftest":
        return selftest()
    if len(argv) == 2 and argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0
    if len(argv) not in (2, 3) or argv[1].startswith("-") or (len(argv) == 3 and argv[2] != "--write"):
        print(__doc__)
        return 2
    root = argv[1]
    ks, missing = kernels(root)
    if missing:
        print("check_backend: NOT_STEP_OPS names %s, which the kernel headers no longer declare: "
              "remove them" % ", ".join(missing))
        return 1
    sites = scan(root)
    if len(argv) == 3:
        write_pending(os.path.join(root, PENDING), sites)
        print("check_backend: %s lists %d sites" % (PENDING, len(sites)))
        return 0
    msgs, failed = compare(sites, read_pending(os.path.join(root, PENDING)))
    for m in msgs:
        print(m)
    if failed:
        return 1
    print("check_backend: %d kernels; %d sites still outside the backend, each listed in %s" %
          (len(ks), len(sites), PENDING))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
