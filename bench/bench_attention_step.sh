#!/usr/bin/env bash
# A whole training step with the blocked attention kernel (this tree) beside
# the materialized one (the tree before attention moved to the blocked
# kernel, OLD_REV, built here into a temporary worktree), one process at 2
# threads, char vocabulary (synthetic:65). Arguments: T or T:BATCH (batch
# 1 by default); default 1024 4096 16384 on L4 C256 H4 fp32 (the issue's
# benchmark). Prints ms/step and tokens/s (the best of REPS interleaved
# runs, each timed on its last of 3 steps), activations planned and the
# allocator's peak, the attention state a layer keeps (out + lse against
# the T x T probabilities), the resident high-water mark, and new/old
# ratios. The materialized step is not started where its plan exceeds
# OLD_LIMIT (8G): its plan is printed as the refusal.
#   bench/bench_attention_step.sh                     the issue's lengths
#   EMBD=128 PRECISION=bf16 REPS=3 bench/bench_attention_step.sh 64:12 256:4
#                                                     short T, today vs before
# Environment: OLD_REV (14ca494), OLD_LIMIT (8G), LAYERS (4), HEADS (4),
# EMBD (256), PRECISION (fp32), REPS (1).
# Run it alone: other processes on the cores lower every figure. Minutes:
# the old tree's build (~2), then ~1 at T 16384 for the blocked step.
set -euo pipefail
cd "$(dirname "$0")/.."
OLD_REV=${OLD_REV:-14ca494}
OLD_LIMIT=${OLD_LIMIT:-8G}
REPS=${REPS:-1}
args=("${@:-1024 4096 16384}")
[ -x build/trident ] || scripts/build.sh >/dev/null
tmp=$(mktemp -d)
trap 'git worktree remove --force "$tmp/old" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
echo "building $OLD_REV (materialized attention) in a temporary worktree..."
git worktree add -q --detach "$tmp/old" "$OLD_REV"
cmake -S "$tmp/old" -B "$tmp/old/build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$tmp/old/build" -j2 --target trident >/dev/null
limit=$(numfmt --from=iec "$OLD_LIMIT")
MODEL=(--data synthetic:65 --layers "${LAYERS:-4}" --heads "${HEADS:-4}" --embd "${EMBD:-256}" --steps 3
       --eval-every 0 --threads 2 --precision "${PRECISION:-fp32}")

# one BIN T B NAME: a 3-step run logged to $tmp/NAME.jsonl; the old binary
# is stopped once its plan is printed if the plan exceeds the limit
one() {
  local bin=$1 T=$2 B=$3 name=$4 out="$tmp/$4.out"
  "$bin" train "${MODEL[@]}" --seq "$T" --batch "$B" --log "$tmp/$name.jsonl" >"$out" 2>&1 </dev/null &
  local pid=$!
  while kill -0 $pid 2>/dev/null; do
    if [ "$name" != "${name#old}" ] && grep -q '"event": "memory"' "$tmp/$name.jsonl" 2>/dev/null; then
      local plan
      plan=$(/usr/bin/python3 -c 'import json,sys
for l in open(sys.argv[1]):
    o = json.loads(l)
    if o.get("event") == "memory":
        print(sum(v for k, v in o["ranks"][0].items() if not k.endswith("_peak")))' "$tmp/$name.jsonl")
      if [ "$plan" -gt "$limit" ]; then kill $pid; wait $pid 2>/dev/null || true; echo "refused $plan" >"$out"; return; fi
    fi
    sleep 0.2
  done
  wait $pid || { tail -5 "$out"; exit 1; }
}
cases=()
for a in ${args[*]}; do
  T=${a%%:*} B=1
  [ "$a" != "$T" ] && B=${a#*:}
  cases+=("$T:$B")
  for r in $(seq "$REPS"); do # interleaved: drift hits both alike
    one build/trident "$T" "$B" "new$T-$B-$r"
    one "$tmp/old/build/trident" "$T" "$B" "old$T-$B-$r"
  done
done
/usr/bin/python3 - "$tmp" "$OLD_REV" "$REPS" "${LAYERS:-4}" "${HEADS:-4}" "${EMBD:-256}" "${PRECISION:-fp32}" "${cases[@]}" <<'PY'
import json, os, sys
tmp, rev, reps, L, H, C, prec = sys.argv[1], sys.argv[2], int(sys.argv[3]), *sys.argv[4:8]
C = int(C)
cases = [tuple(int(x) for x in a.split(":")) for a in sys.argv[8:]]
M = 2 ** 20
def best(kind, T, B):
    rs = [read(f"{kind}{T}-{B}-{r}", T * B) for r in range(1, reps + 1)]
    return min(rs, key=lambda r: r.get("ms", 1e30))
def read(name, tokens):
    out = open(f"{tmp}/{name}.out").read()
    r = {"refused": out.startswith("refused")}
    if r["refused"]: r["plan"] = int(out.split()[1])
    steps = []
    for l in open(f"{tmp}/{name}.jsonl"):
        o = json.loads(l)
        if o.get("event") == "memory":
            m = o["ranks"][0]; r["acts"], r["acts_peak"] = m["activations"], m["activations_peak"]
            r["plan"] = r.get("plan") or sum(v for k, v in m.items() if not k.endswith("_peak"))
        elif o.get("event") == "rss": r["rss"] = o["ranks"][0]["rss_peak"]
        elif "step_ms" in o: steps.append(o)
    if steps: r["ms"], r["tok"] = steps[-1]["step_ms"], tokens * 1000 / steps[-1]["step_ms"]
    return r
print(f"whole step, L{L} C{C} H{H} {prec}, 2 threads, best of {reps}: blocked attention (this tree) vs materialized ({rev})")
print(f"{'T':>6} {'B':>3} {'kernel':>12} {'ms/step':>9} {'tok/s':>7} {'acts plan':>10} {'acts peak':>10} {'attn state/layer':>17} {'RSS':>9}")
eb = 4 if prec == "fp32" else 2
for T, B in cases:
    new, old = best("new", T, B), best("old", T, B)
    for name, r, st in (("blocked", new, B * (eb * T * C + 4 * int(H) * T)), ("materialized", old, B * eb * int(H) * T * T)):
        if r["refused"]:
            print(f"{T:>6} {B:>3} {name:>12}   refused: its plan is {r['plan'] / 2**30:.1f} GiB (over the bench's limit)"
                  f"; probabilities {st / 2**30:.2f} GiB a layer")
            continue
        print(f"{T:>6} {B:>3} {name:>12} {r['ms']:>9.1f} {r['tok']:>7.0f} {r['acts'] / M:>9.1f}M {r['acts_peak'] / M:>9.1f}M "
              f"{st / M:>16.2f}M {r['rss'] / M:>8.1f}M")
    if not old["refused"]:
        print(f"{T:>6} {B:>3} {'new/old':>12} {new['ms'] / old['ms']:>9.2f}x {new['tok'] / old['tok']:>6.2f}x "
              f"{new['acts'] / old['acts']:>9.3f}x {'':>10} {'':>17} {new['rss'] / old['rss']:>8.3f}x")
print("attn state/layer: what a layer keeps for the backward beside q, k, v: out [T, C] + lse [H, T] (blocked)")
print("against the probabilities [H, T, T] (materialized), per sequence x batch; lse is fp32")
PY
