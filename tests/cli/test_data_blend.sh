#!/usr/bin/env bash
# Blended data, --data W:PATH,W:PATH,... (issue 42):
# - the tokens drawn per source that --log gives at every step are, counted
#   in samples, within 1 of weight x samples so far (checked by python from
#   the log; weights 5:3:2, batch 6: 0.3 x 6 is no whole number);
# - a source of weight ~1 beside one of 1e-9 trains to the bits of --data
#   of that source alone (each source keeps its own order);
# - dp 2 x pp 2 trains the blend to the one-process losses (1e-5);
# - 6 steps = --resume of its step 3 and 3 more, bitwise (losses and state);
# - a resume under other weights says so (old and new weights, the sample
#   index) and from that index draws by the new weights;
# - refusals, one line each: weight <= 0, character-level texts of
#   different alphabets (the characters each
#   has that the other lacks named);
# - trident eval --data of a blend of character-level texts: its val split
#   is the sources' val splits one after another, so its loss line is that
#   of one text whose val split is exactly those (bitwise).
# Usage: test_data_blend.sh TRIDENT DATA_DIR
set -u
T=$1 DATA=$2
PY=/usr/bin/python3
MPIRUN="mpirun --allow-run-as-root --oversubscribe --bind-to none"
XXH3="$(dirname "$0")/ckpt_xxh3.py"
source "$(dirname "$0")/expect_lib.sh"
head -c 20000 "$DATA/tinyshakespeare.txt" >"$tmp/a.txt"
tail -c 12000 "$DATA/tinyshakespeare.txt" >"$tmp/b.txt"
head -c 40000 "$DATA/tinyshakespeare.txt" | tail -c 9000 >"$tmp/c.txt"
BL="5:$tmp/a.txt,3:$tmp/b.txt,2:$tmp/c.txt"
A=(--tokenizer byte --layers 2 --heads 2 --embd 32 --seq 16 --batch 6 --threads 1 --lr 1e-2 --warmup 2
   --eval-every 3 --eval-iters 2)
# tr NAME NP FLAGS...: a run that must exit 0 (output in $tmp/NAME.out, log $tmp/NAME.log)
tr() {
  local name=$1 np=$2; shift 2
  local run=(timeout 120 $MPIRUN -np "$np")
  [ "$np" = 1 ] && run=(timeout 120) # a singleton starts faster
  if "${run[@]}" "$T" train "${A[@]}" --log "$tmp/$name.log" "$@" >"$tmp/$name.out" 2>&1 </dev/null
  then ok "$name"; else fail "$name: exit code $? ($*)" "$(tail -5 "$tmp/$name.out")"; return 1; fi
}
# tracks NAME FIRST W...: from step FIRST on, each step's data_tokens / seq
# per source are the greedy rule's counts, replayed here, and within 1
# sample of w x (step + 1) x batch (weights normalized)
tracks() {
  $PY - "$tmp/$1.log" "$2" "${@:3}" <<'PYEOF' && ok "tracks $1" || fail "tracks $1"
import json, sys
log, first, w = sys.argv[1], int(sys.argv[2]), [float(x) for x in sys.argv[3:]]
w = [x / sum(w) for x in w]
rows = [j for j in map(json.loads, open(log)) if "loss" in j and j["step"] >= first]
assert rows, "no steps logged"
# the greedy rule replayed (Megatron-LM's, with g + 1 for max(g, 1)):
# sample g from the source furthest below w x (g + 1), the first of equals
counts, c = [], [0] * len(w)
for g in range(6 * (rows[-1]["step"] + 1)):
    e = [x * (g + 1) - k for x, k in zip(w, c)]
    c[e.index(max(e))] += 1
    counts.append(list(c))
worst = 0.0
for j in rows:
    got = [v / 16 for v in j["data_tokens"].values()]
    n = (j["step"] + 1) * 6
    assert got == counts[n - 1], ("step", j["step"], got, counts[n - 1])
    for g, x in zip(got, w):
        worst = max(worst, abs(g - x * n))
print("steps %d-%d: worst |count - weight x samples| = %.3f samples" % (rows[0]["step"], rows[-1]["step"], worst))
assert worst < 1.0
PYEOF
}
# same_losses NAME A B TOL: the steps both logs hold agree (TOL 0: bitwise)
same_losses() {
  $PY - "$@" <<'PYEOF' && ok "$1" || fail "$1"
import json, sys
name, fa, fb, tol = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
def losses(f): return {j["step"]: j["loss"] for j in map(json.loads, open(f)) if "loss" in j}
def vals(f): return {j["step"]: j["val_loss"] for j in map(json.loads, open(f)) if "val_loss" in j}
a, b = losses(fa), losses(fb)
common = sorted(set(a) & set(b))
worst = max(abs(a[s] - b[s]) / abs(a[s]) for s in common)
va, vb = vals(fa), vals(fb)
vworst = max([abs(va[s] - vb[s]) / abs(va[s]) for s in set(va) & set(vb)] or [0])
print("%s: %d steps, worst relative difference %.3g, val %.3g (allowed %g)" % (name, len(common), worst, vworst, tol))
assert len(common) >= 3 and worst <= tol and vworst <= tol
PYEOF
}

# --- the mix at every step, the summary line, validation --------------------
tr one 1 --data "$BL" --steps 6 --out "$tmp/full" --save-every 3
tracks one 0 5 3 2
grep -q "data: a blend of 3 sources by weight: 0.5 $tmp/a.txt" "$tmp/one.out" || fail "no blend data line"
grep -q "data: training tokens drawn per source over 6 steps: $tmp/a.txt 288 (50.00%, weight 0.5), $tmp/b.txt " \
  "$tmp/one.out" && ok "summary line" || fail "summary line" "$(grep 'drawn per' "$tmp/one.out")"
grep -q '"val_loss"' "$tmp/one.log" || fail "no validation of the blend"

# --- each source in its own order: ~all weight on a.txt = a.txt alone --------
tr alone 1 --data "$tmp/a.txt" --steps 4
tr nearly 1 --data "1:$tmp/a.txt,1e-9:$tmp/b.txt" --steps 4
same_losses own-order "$tmp/alone.log" "$tmp/nearly.log" 0

# --- layouts equal to one process --------------------------------------------
tr dp2pp2 4 --data "$BL" --steps 6 --dp 2 --pp 2 --grad-accum 3
same_losses dp2pp2 "$tmp/one.log" "$tmp/dp2pp2.log" 1e-5

# --- resume: 3 + 3 steps = 6 bitwise ------------------------------------------
tr rest 1 --data "$BL" --steps 6 --out "$tmp/r" --resume "$tmp/full/step-00000003"
same_losses resume-bitwise "$tmp/one.log" "$tmp/rest.log" 0
$PY "$XXH3" same "$tmp/full/step-00000006" "$tmp/r/latest" && ok "resume state" || fail "resume: the state of step 6 differs"
grep -q "weights changed" "$tmp/rest.out" && fail "same weights said changed"
tracks rest 3 5 3 2

# --- resume under other weights ------------------------------------------------
tr neww 1 --data "1:$tmp/a.txt,1:$tmp/b.txt,2:$tmp/c.txt" --steps 6 --out "$tmp/r2" --resume "$tmp/full/step-00000003"
grep -q "resume: --data weights changed: .* was trained on 0.5:$tmp/a.txt,0.3:$tmp/b.txt,0.2:$tmp/c.txt, --data gives \
0.25:$tmp/a.txt,0.25:$tmp/b.txt,0.5:$tmp/c.txt (normalized); the run goes on from its sample index 18 (step 3) under the new \
weights" "$tmp/neww.out" && ok "new weights line" || fail "new weights line" "$(grep resume "$tmp/neww.out")"
tracks neww 3 1 1 2

# --- refusals ------------------------------------------------------------------
R=(--tokenizer byte --layers 2 --heads 2 --embd 32 --seq 16 --batch 2 --steps 1)
expect weight-zero "--data 0:$tmp/a.txt,1:$tmp/b.txt: '0:$tmp/a.txt' has weight 0; a weight is a finite number above 0" \
  "$T" train --data "0:$tmp/a.txt,1:$tmp/b.txt" "${R[@]}"
printf 'abcabcabc%.0s' $(seq 40) >"$tmp/x.txt"
printf 'abdabdabQ%.0s' $(seq 40) >"$tmp/y.txt"
expect alphabets "$tmp/x.txt and $tmp/y.txt are character-level texts of different alphabets ($tmp/x.txt has 'c' that \
$tmp/y.txt lacks; $tmp/y.txt has 'Q' 'd' that $tmp/x.txt lacks)" \
  "$T" train --data "1:$tmp/x.txt,1:$tmp/y.txt" --layers 2 --heads 2 --embd 32 --seq 16 --batch 2 --steps 1

# --- eval of a blend of character-level texts ----------------------------------
# p and q of one alphabet; pq.txt = 9 x (|p val| + |q val|) characters of
# training text, then p's val split, then q's: its val split (the last 10%)
# is the blend's
$PY - "$tmp" <<'PYEOF' || fail "eval blend texts"
import random, sys
d, rng = sys.argv[1], random.Random(3)
p, q = ("".join(rng.choice("abc de\n") for _ in range(n)) for n in (500, 300))
val = p[len(p) * 9 // 10:] + q[len(q) * 9 // 10:]
open(d + "/p.txt", "w").write(p); open(d + "/q.txt", "w").write(q)
open(d + "/pq.txt", "w").write("".join(rng.choice("abc de\n") for _ in range(9 * len(val))) + val)
PYEOF
"$T" train --data "$tmp/pq.txt" --layers 1 --heads 2 --embd 16 --seq 16 --batch 4 --steps 2 --eval-every 0 \
  --threads 1 --out "$tmp/chk" >"$tmp/chk.out" 2>&1 || fail "eval blend: train" "$(tail -3 "$tmp/chk.out")"
"$T" eval --ckpt "$tmp/chk" --data "1:$tmp/p.txt,3:$tmp/q.txt" --threads 1 >"$tmp/evb.out" 2>&1 ||
  fail "eval of a char blend" "$(tail -3 "$tmp/evb.out")"
"$T" eval --ckpt "$tmp/chk" --data "$tmp/pq.txt" --threads 1 >"$tmp/evpq.out" 2>&1 || fail "eval pq" "$(tail -3 "$tmp/evpq.out")"
lb=$(grep '^eval: tokens' "$tmp/evb.out"); lpq=$(grep '^eval: tokens' "$tmp/evpq.out")
[ -n "$lb" ] && [ "$lb" = "$lpq" ] && ok "eval of a char blend = its val text: $lb" || fail "eval blend '$lb' != '$lpq'"

[ $fails -eq 0 ] && echo "data blend: all passed"
exit $fails
