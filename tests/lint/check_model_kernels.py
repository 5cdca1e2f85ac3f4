#!/usr/bin/env python3
"""The dense model reaches its kernels only through the backend's table.

Every op of a step runs on the run's device, so the model (src/model),
the parallel layer's model code (src/parallel), the run (src/run) and the
command line (src/train) call a kernel only through a td_ops row
(td_ops_for for step tensors, td_ops_cpu for host memory): a direct call
of a kernels.h / kernels_bf16.h / attention.h / rope.h kernel there would
run the CPU's code on device memory. This fails on one.

Not checked (each has its own owner): src/kernels and src/backend (the
kernels and their rows), the mixture of experts' files (src/model/moe*.c,
src/run/moe_run.c) and the optimizer's (src/optim, src/parallel/step.c).
The host-side helpers that build tables before an upload (td_rope_table,
td_rope_inv_freq, td_rope_llama3_scale) and the GEMM's self-description
(td_matmul_lowp_peak_gflops, td_matmul_bf16_describe) are no kernels.

Usage: check_model_kernels.py SRC_DIR   (exit 0: clean, 1: a direct call)
       check_model_kernels.py selftest  (the checker on a made-up tree)
"""
import os
import re
import sys

DIRS = ["model", "parallel", "run", "train"]
SKIP = re.compile(r"^(model/moe[^/]*\.c|run/moe_run\.c|parallel/step\.c)$")
KERNEL = re.compile(
    r"\b(td_(?:matmul_|layernorm_|rmsnorm_|attn_(?:forward|backward|bf16|f16)|"
    r"rope_(?:forward|backward|bf16|f16)|gelu_|swiglu_|residual_|embedding_|"
    r"position_(?:forward|backward)|xent_|softmax_xent|bf16_(?:from|to)_float|"
    r"f16_(?:from|to)_float)\w*)\s*\(")
NOT_KERNELS = {"td_matmul_lowp_peak_gflops", "td_matmul_bf16_describe"}
COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)


def scan(src):
    """(file under src, line, function) of each direct kernel call."""
    found = []
    for top in DIRS:
        for dirpath, _, files in os.walk(os.path.join(src, top)):
            for f in sorted(files):
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, src)
                if not f.endswith((".c", ".h")) or SKIP.match(rel):
                    continue
                with open(path, encoding="utf-8", errors="replace") as fh:
                    text = fh.read()
                code = COMMENT.sub(lambda m: "\n" * m.group(0).count("\n"), text)
                for m in KERNEL.finditer(code):
                    if m.group(1) not in NOT_KERNELS:
                        found.append((rel, code.count("\n", 0, m.start()) + 1, m.group(1)))
    return found


SELFTEST = {
    "model/a.c": "void f(void) {\n    td_matmul_forward(o, x, w, 0, 1, 2, 3);\n}\n",  # seen (line 2)
    "parallel/b.c": "m->ops->att_fwd(o, l, q, k, v, &s, 0);\ntd_attn_bf16_forward (o);\n",  # seen (line 2)
    "run/c.c": "/* td_gelu_forward(x) */\ndouble p = td_matmul_lowp_peak_gflops(k);\n",  # not seen
    "model/moe.c": "td_matmul_forward(o, x, w, 0, 1, 2, 3);\n",  # another owner: not checked
    "kernels/d.c": "td_layernorm_forward(o);\n",  # the kernels themselves: not checked
}


def selftest():
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        for rel, text in SELFTEST.items():
            os.makedirs(os.path.join(d, os.path.dirname(rel)), exist_ok=True)
            with open(os.path.join(d, rel), "w") as fh:
                fh.write(text)
        got = sorted(scan(d))
    want = [("model/a.c", 2, "td_matmul_forward"), ("parallel/b.c", 2, "td_attn_bf16_forward")]
    if got != want:
        print("check_model_kernels selftest: got %s, want %s" % (got, want))
        return 1
    print("check_model_kernels selftest: the two direct calls seen; a comment, a table call, "
          "the GEMM's description, moe.c and src/kernels not")
    return 0


def main(argv):
    if len(argv) != 2:
        print(__doc__)
        return 2
    if argv[1] == "selftest":
        return selftest()
    found = scan(argv[1])
    for rel, line, fn in found:
        print("src/%s:%d: calls %s directly: go through the backend's row (td_ops_for, or td_ops_cpu "
              "for host memory)" % (rel, line, fn))
    if found:
        return 1
    print("check_model_kernels: the dense model calls its kernels through the backend's table only")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
