#!/usr/bin/python3
"""Eager PyTorch baseline for `trident bench train`: the same GPT (the model in
tests/ref/gpt_ref.py) trained on random tokens with AdamW and grad clipping.

Run with /usr/bin/python3 (Debian's torch 1.13). Prints one line:
  torch: threads=1 step_ms=63.1 tokens_per_s=12170.5 blas_threads=2 precision=fp32
step_ms is the mean over the --steps timed steps (total time / steps) of a full
training step: zero_grad, forward, loss, backward, clip, optimizer step.

--precision bf16 runs forward and loss under torch.autocast("cpu",
dtype=torch.bfloat16), PyTorch's own CPU mixed precision: parameters, their
gradients and AdamW stay fp32, autocast runs the linear layers and matmuls in
bf16 (through oneDNN, whose threads follow --threads), the rest as it chooses.
Backward runs outside the autocast region, as torch's documentation says.

--threads sets torch.set_num_threads. Debian's torch does its GEMMs in the
pthread OpenBLAS, which by default uses every core whatever --threads says;
blas_threads= reports that count. It is left alone by default so the baseline
is torch as installed (on 2 cores, threads=1 with 2 BLAS threads was the
fastest setting measured); --blas-threads N pins it.
"""

import argparse
import ctypes
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "ref"))
from gpt_ref import GPT  # noqa: E402


def positive(s):
    v = int(s)
    if v < 1:
        raise argparse.ArgumentTypeError("must be >= 1, got %s" % s)
    return v


def nonnegative(s):
    v = int(s)
    if v < 0:
        raise argparse.ArgumentTypeError("must be >= 0, got %s" % s)
    return v


def openblas_threads(n=None):
    """Sets (when n is given) and returns the thread count of the OpenBLAS
    that torch loaded, as text; 'none' when torch runs without OpenBLAS."""
    for lib in ("libopenblas.so.0", "libopenblas.so"):
        try:
            h = ctypes.CDLL(lib, mode=os.RTLD_NOLOAD | os.RTLD_GLOBAL)
        except OSError:
            continue
        if not hasattr(h, "openblas_get_num_threads"):
            continue
        if n is not None:
            h.openblas_set_num_threads(ctypes.c_int(n))
        return str(h.openblas_get_num_threads())
    if n is not None:
        sys.stderr.write("torch_gpt: warning: --blas-threads ignored, no OpenBLAS loaded\n")
    return "none"


def train_steps(loss_of, opt, params, args):
    """Runs args.warmup_steps untimed and args.steps timed training steps
    (zero_grad, forward and loss under bf16 autocast when args.precision
    says so, backward, clip at 1.0, AdamW); loss_of(i) is batch i's loss.
    Returns (the last loss as a float, the timed seconds)."""
    use_bf16 = args.precision == "bf16"

    def step(i):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=use_bf16):
            loss = loss_of(i)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        return loss

    for i in range(args.warmup_steps):
        step(i)
    t0 = time.perf_counter()
    for i in range(args.warmup_steps, args.warmup_steps + args.steps):
        loss = step(i)
    elapsed = time.perf_counter() - t0
    return float(loss), elapsed  # float(): the work is done before the clock is read back


def report(who, args, result, blas_note, extra):
    """The one output line (0), or a non-finite loss's error (1)."""
    loss, elapsed = result
    if not torch.isfinite(torch.tensor(loss)):
        sys.stderr.write("%s: error: non-finite loss %r\n" % (who, loss))
        return 1
    step_ms = 1000.0 * elapsed / args.steps
    tokens_per_s = args.batch * args.seq * args.steps / elapsed
    print("torch: threads=%d step_ms=%.1f tokens_per_s=%.1f blas_threads=%s precision=%s%s"
          % (args.threads, step_ms, tokens_per_s, blas_note, args.precision, extra))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=positive, default=4)
    ap.add_argument("--heads", type=positive, default=4)
    ap.add_argument("--embd", type=positive, default=128)
    ap.add_argument("--seq", type=positive, default=64)
    ap.add_argument("--batch", type=positive, default=12)
    ap.add_argument("--vocab", type=positive, default=65)
    ap.add_argument("--steps", type=positive, default=50)
    ap.add_argument("--warmup-steps", type=nonnegative, default=5)
    ap.add_argument("--threads", type=positive, default=1,
                    help="torch intra-op threads (torch.set_num_threads)")
    ap.add_argument("--blas-threads", type=positive, default=None,
                    help="OpenBLAS threads for torch's GEMMs (default: leave OpenBLAS as torch ships it, "
                         "which on Debian is the pthread build using every core whatever --threads says)")
    ap.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                    help="fp32, or bf16 autocast on the CPU (torch.autocast)")
    ap.add_argument("--seed", type=int, default=1337)
    args = ap.parse_args()
    if args.embd % args.heads != 0:
        ap.error("--embd %d must be divisible by --heads %d" % (args.embd, args.heads))

    torch.set_num_threads(args.threads)
    blas_note = openblas_threads(args.blas_threads)
    torch.manual_seed(args.seed)
    model = GPT(args.layers, args.heads, args.embd, args.seq, args.vocab)
    model.train()
    opt = model.configure_optimizer(lr=1e-3, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.1)
    params = list(model.parameters())

    # Random batches made up front so token generation is not timed.
    nbatch = args.warmup_steps + args.steps
    g = torch.Generator().manual_seed(args.seed)
    data = torch.randint(0, args.vocab, (nbatch, args.batch, args.seq + 1), generator=g)
    xs = data[:, :, :-1].contiguous()
    ys = data[:, :, 1:].contiguous()

    def loss_of(i):
        return model(xs[i], ys[i])

    return report("torch_gpt", args, train_steps(loss_of, opt, params, args), blas_note, "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
