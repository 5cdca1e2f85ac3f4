#!/usr/bin/env bash
# A whole training step with the blocked attention kernel (this tree) beside
# the materialized one (the tree before attention moved to the blocked
# kernel, OLD_REV, built here into a temporary worktree): L4 C256 H4, batch
# 1, char vocabulary (synthetic:65), fp32, one process at 2 threads, T =
# 1024, 4096, 16384 (arguments replace the list). Prints ms/step and
# tokens/s (step 1 of 2: step 0 warms up), activations planned and the
# allocator's peak, the attention state a layer keeps (out + lse against
# the T x T probabilities), the resident high-water mark, and new/old
# ratios. The materialized step is not started where its plan exceeds
# OLD_LIMIT (8G): its plan is printed as the refusal.
# Run it alone: other processes on the cores lower every figure. Minutes:
# the old tree's build (~2), then ~1 at T 16384 for the blocked step.
set -euo pipefail
cd "$(dirname "$0")/.."
OLD_REV=${OLD_REV:-14ca494}
OLD_LIMIT=${OLD_LIMIT:-8G}
Ts=("${@:-1024 4096 16384}")
[ -x build/trident ] || scripts/build.sh >/dev/null
tmp=$(mktemp -d)
trap 'git worktree remove --force "$tmp/old" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
echo "building $OLD_REV (materialized attention) in a temporary worktree..."
git worktree add -q --detach "$tmp/old" "$OLD_REV"
cmake -S "$tmp/old" -B "$tmp/old/build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$tmp/old/build" -j2 --target trident >/dev/null
limit=$(numfmt --from=iec "$OLD_LIMIT")
MODEL=(--data synthetic:65 --layers 4 --heads 4 --embd 256 --batch 1 --steps 2 --eval-every 0 --threads 2)

# one BIN T NAME: a 2-step run logged to $tmp/NAME.jsonl; the old binary is
# stopped once its plan is printed if the plan exceeds the limit
one() {
  local bin=$1 T=$2 name=$3 out="$tmp/$3.out"
  "$bin" train "${MODEL[@]}" --seq "$T" --log "$tmp/$name.jsonl" >"$out" 2>&1 </dev/null &
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
for T in ${Ts[*]}; do
  one build/trident "$T" "new$T"
  one "$tmp/old/build/trident" "$T" "old$T"
done
/usr/bin/python3 - "$tmp" "$OLD_REV" ${Ts[*]} <<'PY'
import json, os, sys
tmp, rev, Ts = sys.argv[1], sys.argv[2], [int(t) for t in sys.argv[3:]]
M = 2 ** 20
def read(name):
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
    if steps: r["ms"], r["tok"] = steps[-1]["step_ms"], T * 1000 / steps[-1]["step_ms"]
    return r
print(f"whole step, L4 C256 H4 batch 1 fp32, 2 threads: blocked attention (this tree) vs materialized ({rev})")
print(f"{'T':>6} {'kernel':>12} {'ms/step':>9} {'tok/s':>7} {'acts plan':>10} {'acts peak':>10} {'attn state/layer':>17} {'RSS':>9}")
for T in Ts:
    new, old = read(f"new{T}"), read(f"old{T}")
    for name, r, st in (("blocked", new, 4 * (T * 256 + 4 * T)), ("materialized", old, 4 * 4 * T * T)):
        if r["refused"]:
            print(f"{T:>6} {name:>12}   refused: its plan is {r['plan'] / 2**30:.1f} GiB (over the bench's limit)"
                  f"; probabilities {st / 2**30:.2f} GiB a layer")
            continue
        print(f"{T:>6} {name:>12} {r['ms']:>9.1f} {r['tok']:>7.0f} {r['acts'] / M:>9.1f}M {r['acts_peak'] / M:>9.1f}M "
              f"{st / M:>16.2f}M {r['rss'] / M:>8.1f}M")
    if not old["refused"]:
        print(f"{T:>6} {'new/old':>12} {new['ms'] / old['ms']:>9.2f}x {new['tok'] / old['tok']:>6.2f}x "
              f"{new['acts'] / old['acts']:>9.3f}x {'':>10} {'':>17} {new['rss'] / old['rss']:>8.3f}x")
print("attn state/layer: what a layer keeps for the backward beside q, k, v: out [T, C] + lse [H, T] (blocked)")
print("against the probabilities [H, T, T] (materialized), fp32")
PY
