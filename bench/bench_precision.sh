#!/usr/bin/env bash
# Mixed precision side by side with PyTorch (issue 11): `trident train
# --precision fp32|bf16|fp16` at 1 and 2 threads beside the PyTorch reference
# model (bench/torch_gpt.py) at fp32 and under bf16 autocast
# (torch.autocast("cpu", dtype=torch.bfloat16)) at 1 and 2 threads, on
# L6 H6 C384 T256, batch 8 (tinyshakespeare, char tokenizer, V 65), plus the
# GEMM peaks of bench/bench_gemm.c measured in the same run. Printed:
#
#   - tokens/s and ms/step: trident's `done:` line (the mean of the timed
#     steps; the trainer leaves step 0 out), torch_gpt.py's line (WARMUP
#     untimed steps, then STEPS - 1 timed); best of REPS runs, repetitions
#     interleaved so drift on the shared machine hits every side alike;
#   - per-rank memory, the accounting allocator's peaks from the --log JSON
#     ("memory" record): compute = params + grads + activations, beside the
#     fp32 master weights and the AdamW moments ("optimizer"), and whether
#     the plan equals the measurement;
#   - the step's achieved GEMM rate, from the line `trident train
#     --gemm-stats` prints (`gemm: F flop/step, M ms/step, R GFLOP/s`) when
#     the binary has that flag (n/a otherwise), against the measured peak of
#     the engine the precision's GEMMs run on (fp32: OpenBLAS, the MFU
#     denominator; bf16: oneDNN bf16; fp16: oneDNN f32, as fp16 operands are
#     converted to fp32 on a CPU without native fp16) and against "alone":
#     the same precision's rate on the model's linear-layer shapes run alone
#     by bench_gemm (qkv, attproj, fc, fcproj per block and the head; fwd,
#     dinp, dw; fp16: its f16_conv column where bench_gemm has it), weighted
#     by their flops (--gemm-stats times the same linear-layer GEMMs);
#   - the issue's acceptance ratios, PASS or FAIL beside each: bf16 tokens/s
#     >= 1.5x trident fp32 and >= 1.2x the best PyTorch figure (each side at
#     its best thread count); the bf16 step's GEMM rate >= 60% of the bf16
#     peak; bf16 compute memory <= 60% of fp32's.
#
# A precision the binary refuses (a `trident: error:` line before any step,
# e.g. --precision bf16 before it exists) prints "n/a (refused: <error>)" and
# the bench goes on; when the binary has no --precision flag at all, fp32
# runs without it (fp32 is then the only precision). A benchmark never fails
# on speed: it exits non-zero only when something cannot be built or run.
# Measured on the 2-core machine: 2 minutes at load ~1, 3.7 at load ~5.
#
# Environment: REPS (1), STEPS (4: trident step 0 untimed, 3 timed; torch 3
# timed), WARMUP (2 torch warm-up steps), THREADS ("1 2"), PYTHON
# (/usr/bin/python3), BUILD_DIR (build), TRIDENT (a trident binary to use
# instead of building BUILD_DIR; bench_gemm is still built in BUILD_DIR).
# OPENBLAS_CORETYPE is passed through untouched and printed.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

REPS=${REPS:-1}
STEPS=${STEPS:-4}
WARMUP=${WARMUP:-2}
THREADS=${THREADS:-"1 2"}
PYTHON=${PYTHON:-/usr/bin/python3}
BUILD_DIR=${BUILD_DIR:-build}
PRECISIONS=(fp32 bf16 fp16)
MODEL=(--layers 6 --heads 6 --embd 384 --seq 256 --batch 8)
DATA=data/tinyshakespeare.txt

die() { echo "bench_precision: error: $*" >&2; exit 1; }

[[ "$REPS" =~ ^[1-9][0-9]*$ ]] || die "REPS='$REPS' must be a positive integer"
[[ "$STEPS" =~ ^[0-9]+$ && "$STEPS" -ge 2 ]] || die "STEPS='$STEPS' must be >= 2 (step 0 is not timed)"
[[ "$WARMUP" =~ ^[0-9]+$ ]] || die "WARMUP='$WARMUP' must be a non-negative integer"
read -r -a threads <<<"$THREADS"
((${#threads[@]} > 0)) || die "THREADS is empty"
max_t=0
for t in "${threads[@]}"; do
  [[ "$t" =~ ^[1-9][0-9]*$ ]] || die "THREADS='$THREADS' must list positive integers"
  if ((t > max_t)); then max_t=$t; fi
done
[[ -x "$PYTHON" ]] || die "PYTHON='$PYTHON' is not executable (Debian's torch lives in /usr/bin/python3)"
[[ -f "$DATA" ]] || die "$DATA is missing (the corpus ships with the repository)"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# (a) build: bench_gemm always, trident unless one is given
if [[ ! -f "$BUILD_DIR/CMakeCache.txt" ]] ||
   ! grep -q '^CMAKE_BUILD_TYPE:STRING=Release$' "$BUILD_DIR/CMakeCache.txt"; then
  cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >"$tmp/build.log" 2>&1 ||
    { cat "$tmp/build.log" >&2; die "cmake configure failed"; }
fi
targets=(bench_gemm)
[[ -n "${TRIDENT:-}" ]] || targets+=(trident)
cmake --build "$BUILD_DIR" -j2 --target "${targets[@]}" >>"$tmp/build.log" 2>&1 ||
  { tail -n 50 "$tmp/build.log" >&2; die "build failed"; }
TRIDENT=${TRIDENT:-$BUILD_DIR/trident}
[[ -x "$TRIDENT" ]] || die "TRIDENT='$TRIDENT' is not an executable"
[[ -x "$BUILD_DIR/bench_gemm" ]] || die "build finished but $BUILD_DIR/bench_gemm is missing"

# What this binary knows: the lead adds --precision and --gemm-stats.
"$TRIDENT" train --help >"$tmp/help.txt" 2>&1 || true
has_flag() { grep -q -- "^ *$1\b" "$tmp/help.txt"; }
has_precision=0; has_flag --precision && has_precision=1
gemm_flag=(); has_flag --gemm-stats && gemm_flag=(--gemm-stats)

echo "== bench_precision: ${MODEL[*]} on $DATA (char), trident steps $STEPS (step 0 untimed), torch $WARMUP warm-up + $((STEPS - 1)) timed, best of $REPS"
echo "   measured on this 2-core machine (shared with other work): $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-<unset>}"
echo "   binary: --precision $([[ $has_precision == 1 ]] && echo yes || echo 'no (fp32 only)'), --gemm-stats $([[ ${#gemm_flag[@]} -gt 0 ]] && echo yes || echo no)"

# (b) GEMM peaks and the model's shapes alone, first, with nothing else running
if ! "$BUILD_DIR/bench_gemm" "$max_t" >"$tmp/gemm.log" 2>&1; then
  tail -n 30 "$tmp/gemm.log" >&2; die "$BUILD_DIR/bench_gemm $max_t failed"
fi
echo "   bench_gemm $max_t: $(grep -c '^threads ' "$tmp/gemm.log") thread counts measured"

# run_trident P T REP: one training run; its output in $tmp/tr_P_tT_rREP.{out,jsonl}.
# A refusal (non-zero exit, a `trident: error:` line, no step line) is kept
# in .refused; any other failure stops the bench.
run_trident() {
  local p=$1 t=$2 rep=$3 base=$tmp/tr_$1_t$2_r$3
  local prec=(--precision "$p")
  if [[ $has_precision == 0 && $p == fp32 ]]; then prec=(); fi  # today's binary trains fp32 only
  local cmd=("$TRIDENT" train --data "$DATA" --tokenizer char "${MODEL[@]}" --steps "$STEPS"
             --eval-every 0 --log-every 1000000 --threads "$t" --log "$base.jsonl"
             "${prec[@]}" "${gemm_flag[@]}")
  if "${cmd[@]}" >"$base.out" 2>&1; then
    printf '   run %d/%d trident %-4s threads=%d: %s\n' "$rep" "$REPS" "$p" "$t" \
      "$(grep '^done:' "$base.out" || echo '?')"
    return
  fi
  if grep -q '^trident: error:' "$base.out" && ! grep -q '^step ' "$base.out"; then
    grep -m1 '^trident: error:' "$base.out" | sed 's/^trident: error: //' >"$base.refused"
    printf '   run %d/%d trident %-4s threads=%d: refused: %s\n' "$rep" "$REPS" "$p" "$t" "$(cat "$base.refused")"
    return
  fi
  echo "bench_precision: command failed: ${cmd[*]}" >&2
  tail -n 30 "$base.out" >&2
  exit 1
}

# run_torch P T REP: torch_gpt.py at precision P (fp32 or bf16 autocast)
run_torch() {
  local p=$1 t=$2 rep=$3 log=$tmp/to_$1_t$2_r$3.out
  local cmd=("$PYTHON" bench/torch_gpt.py --layers 6 --heads 6 --embd 384 --seq 256 --batch 8
             --vocab 65 --steps "$((STEPS - 1))" --warmup-steps "$WARMUP" --threads "$t" --precision "$p")
  if ! "${cmd[@]}" >"$log" 2>&1; then
    echo "bench_precision: command failed: ${cmd[*]}" >&2
    tail -n 30 "$log" >&2
    exit 1
  fi
  printf '   run %d/%d torch   %-4s threads=%d: %s\n' "$rep" "$REPS" "$p" "$t" "$(grep '^torch:' "$log" || echo '?')"
}

# (c) interleaved repetitions; a precision refused once is not retried
for ((r = 1; r <= REPS; r++)); do
  for t in "${threads[@]}"; do
    for p in "${PRECISIONS[@]}"; do
      if compgen -G "$tmp/tr_${p}_t*_r*.refused" >/dev/null; then continue; fi
      run_trident "$p" "$t" "$r"
    done
    for p in fp32 bf16; do run_torch "$p" "$t" "$r"; done
  done
done

# (d) the table and the acceptance ratios
"$PYTHON" - "$tmp" "$REPS" "$THREADS" "${PRECISIONS[*]}" <<'PY' || die "the report could not be made (see above)"
import glob, json, os, re, sys

tmp, reps = sys.argv[1], int(sys.argv[2])
threads = [int(t) for t in sys.argv[3].split()]
precisions = sys.argv[4].split()
MiB = 2.0 ** 20
L, C, T, B, VP = 6, 384, 256, 8, 80  # the benchmark model; V 65 padded to 80 as the trainer does
N = B * T
NUM = r"([-+0-9.eE]+)"


def fail(msg):
    print(f"bench_precision: error: {msg}", file=sys.stderr)
    sys.exit(1)


# ---- bench_gemm: peaks and per-shape rates per thread count
# peaks[t] = {blas, dnnl_f32, dnnl_bf16}; rates[t][(layer, kind)] = the same keys, plus
# f16_conv (fp16 converted to fp32) where bench_gemm has that column
peaks, rates = {}, {}
cur = None
for line in open(f"{tmp}/gemm.log"):
    m = re.match(r"threads (\d+)\s+peaks: openblas f32 (\S+) .* onednn f32 (\S+) .* onednn bf16 (\S+) ", line)
    if m:
        cur = int(m.group(1))
        peaks[cur] = dict(zip(("blas", "dnnl_f32", "dnnl_bf16"), map(float, m.group(2, 3, 4))))
        rates[cur] = {}
        continue
    # layer shape kind blas_f32 dnnl_f32 dnnl_bf16 bf16/f32 f32%pk bf16%pk [f16_conv f16/f32]
    w = line.split()
    if cur is not None and len(w) >= 9 and re.fullmatch(r"\d+x\d+->\d+", w[1]) and w[2] in ("fwd", "dinp", "dw"):
        r = dict(zip(("blas", "dnnl_f32", "dnnl_bf16"), map(float, w[3:6])))
        if len(w) >= 11:
            r["f16_conv"] = float(w[9])
        rates[cur][(w[0], w[2])] = r
for t in threads:
    if t not in peaks or len(rates[t]) != 15:
        fail(f"bench_gemm printed no complete table for threads {t}: {open(f'{tmp}/gemm.log').read()[:300]}")

# the engine each precision's GEMMs run on: (its rate in bench_gemm's table, its peak, name);
# fp16 has no peak of its own (converted to fp32 for oneDNN's f32 matmul on this CPU)
has_f16 = all("f16_conv" in r for t in threads for r in rates[t].values())
ENGINE = {"fp32": ("blas", "blas", "OpenBLAS f32"), "bf16": ("dnnl_bf16", "dnnl_bf16", "oneDNN bf16"),
          "fp16": ("f16_conv" if has_f16 else "dnnl_f32", "dnnl_f32", "fp16 converted, oneDNN f32 peak")}
SHAPES = {"qkv": (C, 3 * C, L), "attproj": (C, C, L), "fc": (C, 4 * C, L), "fcproj": (4 * C, C, L),
          "head": (C, VP, 1)}
linear_flop = sum(2.0 * N * c * oc * n * 3 for c, oc, n in SHAPES.values())


def alone_rate(t, eng):
    """GFLOP/s of one step's linear GEMMs if each ran at its bench_gemm rate."""
    secs = sum(2.0 * N * c * oc * n / (rates[t][(name, k)][eng] * 1e9)
               for name, (c, oc, n) in SHAPES.items() for k in ("fwd", "dinp", "dw"))
    return linear_flop / secs / 1e9


# ---- trident runs
def read_trident(p, t, r):
    base = f"{tmp}/tr_{p}_t{t}_r{r}"
    if os.path.exists(base + ".refused"):
        return {"refused": open(base + ".refused").read().strip()}
    if not os.path.exists(base + ".out"):
        return None
    out = open(base + ".out").read()
    m = re.search(r"^done: \d+ steps, " + NUM + r" ms/step, " + NUM + r" tokens/s", out, re.M)
    if not m:
        fail(f"{base}.out: no 'done:' line: {out[-300:]}")
    x = {"ms": float(m.group(1)), "tps": float(m.group(2)), "gemm": None}
    g = re.search(r"\bgemm: " + NUM + r" flop/step, " + NUM + r" ms/step, " + NUM + r" GFLOP/s", out, re.M)
    if g:
        x["gemm"] = dict(zip(("flop", "ms", "gflops"), map(float, g.groups())))
    mem = None
    for line in open(base + ".jsonl"):
        o = json.loads(line)
        if o.get("event") == "memory":
            mem = o["ranks"][0]
        if o.get("event") == "start":
            x["plan"] = o["memory_plan"][0]
    if mem is None or "plan" not in x:
        fail(f"{base}.jsonl: no memory plan or measurement")
    x["mem"] = {c: mem[c + "_peak"] for c in x["plan"]}
    x["plan_ok"] = all(x["plan"][c] == x["mem"][c] for c in x["plan"] if c != "other")
    return x


def best(runs):
    runs = [x for x in runs if x]
    refused = [x for x in runs if "refused" in x]
    if refused:
        return refused[0]
    return max(runs, key=lambda x: x["tps"]) if runs else None


tr = {(p, t): best([read_trident(p, t, r) for r in range(1, reps + 1)]) for p in precisions for t in threads}


def read_torch(p, t, r):
    out = open(f"{tmp}/to_{p}_t{t}_r{r}.out").read()
    m = re.search(r"^torch: threads=(\d+) step_ms=" + NUM + r" tokens_per_s=" + NUM + r" blas_threads=(\S+)", out, re.M)
    if not m:
        fail(f"torch {p} threads {t}: no 'torch:' line: {out[-300:]}")
    return {"ms": float(m.group(2)), "tps": float(m.group(3)), "blas": m.group(4)}


to = {(p, t): best([read_torch(p, t, r) for r in range(1, reps + 1)]) for p in ("fp32", "bf16") for t in threads}


def compute(m):
    return m["params"] + m["grads"] + m["activations"]


# ---- the table
print(f"\n-- L{L} H6 C{C} T{T} batch {B}: one rank; memory = accounting allocator peaks (MiB),"
      f"\n   compute = params + grads + activations; GEMM = the step's rate from --gemm-stats,"
      f"\n   % of the engine's peak and of the same shapes run alone (bench_gemm)")
hdr = (f"  {'impl':<8} {'prec':<5} {'thr':>3} {'tokens/s':>9} {'ms/step':>9} {'GEMM GF/s':>10} {'%peak':>6} "
       f"{'%alone':>6} {'params':>7} {'grads':>7} {'acts':>7} {'compute':>8} {'master':>7} {'moments':>8} {'plan=meas':>9}")
print(hdr)
for p in precisions:
    for t in threads:
        x = tr[(p, t)]
        lead = f"  {'trident':<8} {p:<5} {t:>3}"
        if x is None:
            continue
        if "refused" in x:
            print(f"{lead} n/a (refused: {x['refused']})")
            continue
        eng, peak_eng, _ = ENGINE[p]
        if x["gemm"]:
            gr = x["gemm"]["gflops"]
            gemm = f"{gr:>10.1f} {100 * gr / peaks[t][peak_eng]:>5.0f}% {100 * gr / alone_rate(t, eng):>5.0f}%"
        else:
            gemm = f"{'n/a':>10} {'n/a':>6} {'n/a':>6}"
        m = x["mem"]
        print(f"{lead} {x['tps']:>9.1f} {x['ms']:>9.1f} {gemm} {m['params'] / MiB:>7.2f} {m['grads'] / MiB:>7.2f} "
              f"{m['activations'] / MiB:>7.2f} {compute(m) / MiB:>8.2f} {m['master'] / MiB:>7.2f} "
              f"{m['optimizer'] / MiB:>8.2f} {'yes' if x['plan_ok'] else 'NO':>9}")
for p in ("fp32", "bf16"):
    for t in threads:
        x = to[(p, t)]
        label = p if p == "fp32" else "bf16a"
        print(f"  {'torch':<8} {label:<5} {t:>3} {x['tps']:>9.1f} {x['ms']:>9.1f}   (blas threads {x['blas']})")
print("  bf16a = torch.autocast(\"cpu\", dtype=torch.bfloat16); torch's fp32 GEMMs run on Debian's"
      "\n  OpenBLAS with every core whatever threads says (blas threads), its bf16 ones on oneDNN")

print("\n-- GEMM peaks (bench_gemm, same run), GFLOP/s; 'alone' = the model's linear shapes run alone, flop-weighted")
for t in threads:
    pk = peaks[t]
    print(f"  threads {t}: peaks OpenBLAS f32 {pk['blas']:.0f}, oneDNN f32 {pk['dnnl_f32']:.0f}, oneDNN bf16 "
          f"{pk['dnnl_bf16']:.0f}; alone OpenBLAS f32 {alone_rate(t, 'blas'):.0f}, oneDNN f32 "
          f"{alone_rate(t, 'dnnl_f32'):.0f}, oneDNN bf16 {alone_rate(t, 'dnnl_bf16'):.0f}"
          + (f", fp16 converted {alone_rate(t, 'f16_conv'):.0f}" if has_f16 else ""))
print(f"  engines: " + "; ".join(f"{p} -> {ENGINE[p][2]}" for p in precisions))
print(f"  linear-layer GEMM flop per step: {linear_flop:.3e}"
      + "".join(f"; --gemm-stats {p}: {tr[(p, t)]['gemm']['flop']:.3e}" for p in precisions
                for t in threads[:1] if tr[(p, t)] and tr[(p, t)].get("gemm")))


# ---- acceptance
def best_t(d, p):
    ok = [(d[(p, t)]["tps"], t) for t in threads if d.get((p, t)) and "tps" in d[(p, t)]]
    return max(ok)[1] if ok else None


def verdict(ok):
    return "PASS" if ok else "FAIL"


print("\n-- acceptance (issue 11), each side at its best thread count")
f32_t, bf_t = best_t(tr, "fp32"), best_t(tr, "bf16")
torch_best = max(((to[(p, t)]["tps"], p, t) for p in ("fp32", "bf16") for t in threads))
if bf_t is None:
    why = next((tr[("bf16", t)]["refused"] for t in threads if tr.get(("bf16", t)) and "refused" in tr[("bf16", t)]),
               "not run")
    for what in ("bf16 tokens/s >= 1.5x trident fp32", "bf16 tokens/s >= 1.2x best PyTorch",
                 "bf16 step GEMM rate >= 60% of bf16 peak", "bf16 compute memory <= 60% of fp32"):
        print(f"  {what:<42} n/a (refused: {why})")
    if f32_t is not None:
        print(f"  (trident fp32 best {tr[('fp32', f32_t)]['tps']:.1f} tokens/s at threads {f32_t}; "
              f"best PyTorch {torch_best[0]:.1f} ({torch_best[1]} at threads {torch_best[2]}): "
              f"fp32/PyTorch {tr[('fp32', f32_t)]['tps'] / torch_best[0]:.2f}x)")
    sys.exit(0)
if f32_t is None:
    fail("trident fp32 did not run, so bf16 has nothing to be compared with")
bf, f32 = tr[("bf16", bf_t)], tr[("fp32", f32_t)]
r = bf["tps"] / f32["tps"]
print(f"  {'bf16 tokens/s >= 1.5x trident fp32':<42} {bf['tps']:.1f} (t{bf_t}) / {f32['tps']:.1f} (t{f32_t}) "
      f"= {r:.2f}x  {verdict(r >= 1.5)}")
r = bf["tps"] / torch_best[0]
print(f"  {'bf16 tokens/s >= 1.2x best PyTorch':<42} {bf['tps']:.1f} / {torch_best[0]:.1f} (torch {torch_best[1]}"
      f"{' autocast' if torch_best[1] == 'bf16' else ''}, t{torch_best[2]}) = {r:.2f}x  {verdict(r >= 1.2)}")
what = "bf16 step GEMM rate >= 60% of bf16 peak"
if bf["gemm"]:
    r = bf["gemm"]["gflops"] / peaks[bf_t]["dnnl_bf16"]
    print(f"  {what:<42} {bf['gemm']['gflops']:.1f} / {peaks[bf_t]['dnnl_bf16']:.0f} GFLOP/s (t{bf_t}) "
          f"= {100 * r:.0f}%  {verdict(r >= 0.6)}")
else:
    print(f"  {what:<42} n/a (no 'gemm:' line: the binary has no --gemm-stats)")
r = compute(bf["mem"]) / compute(f32["mem"])
print(f"  {'bf16 compute memory <= 60% of fp32':<42} {compute(bf['mem']) / MiB:.2f} / {compute(f32['mem']) / MiB:.2f} MiB"
      f" = {100 * r:.0f}%  {verdict(r <= 0.6)}")
print(f"  {'':<42} beside it: bf16 master {bf['mem']['master'] / MiB:.2f} + moments "
      f"{bf['mem']['optimizer'] / MiB:.2f} MiB (fp32: master {f32['mem']['master'] / MiB:.2f} + moments "
      f"{f32['mem']['optimizer'] / MiB:.2f})")
PY
echo "   load after: $(cut -d' ' -f1-3 /proc/loadavg)"
