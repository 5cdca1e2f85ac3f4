#!/usr/bin/env bash
# Resuming: exact resume (bitwise losses and state) on dp2 zero 1, tp2, pp2
# and dp2 with top-k compression (its per-rank residuals and moments), which
# reshard while dp stays (tp 1 -> 2) and are dropped when it changes; a
# resharding matrix (checkpoints saved under one layout continue under
# another: 8 ranks -> 1, 1 -> 8, across dp/tp/pp/zero/precision) whose
# fp32 continuation losses are within 1e-5 relative of the uninterrupted
# one-process run's; an imported model fine-tuned by --resume; --stop-after,
# SIGTERM to the ranks and SIGUSR1 to mpirun end with a checkpoint.
# Usage: test_resume.sh TRIDENT_BINARY DATA_DIR
set -u
T=${1:?usage: test_resume.sh TRIDENT_BINARY DATA_DIR}
DATA=${2:?}
. "$(dirname "$0")/ckpt_lib.sh"
A=(--data "$tmp/small.txt" --layers 2 --heads 2 --embd 32 --seq 16 --batch 4 --steps 8
   --eval-every 0 --threads 1 --lr 1e-2 --warmup 2)

# tr NAME NP FLAGS...: a run that must exit 0 (its output in $tmp/NAME.out).
# One rank runs without mpirun, as a single process that starts no Open MPI
# daemon (test_config.sh does the same): what is resumed does not depend on
# the launcher, and mpirun's start was most of such a run's time (CI budget).
tr() {
  local name=$1 np=$2 launch; shift 2
  if [ "$np" = 1 ]; then launch=(env OMPI_MCA_ess_singleton_isolated=1); else launch=($MPIRUN -np "$np"); fi
  if ! timeout 120 "${launch[@]}" "$T" train "${A[@]}" "$@" >"$tmp/$name.out" 2>&1 </dev/null; then
    fail "$name: exit code $? ($*)"; tail -5 "$tmp/$name.out"; return 1
  fi
}
# cmp_losses NAME LOG_A LOG_B TOL: the steps both logs hold agree (TOL 0: bitwise)
cmp_losses() {
  $PY - "$@" <<'PYEOF' || fails=$((fails+1))
import json, sys
name, fa, fb, tol = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
def losses(f): return {j["step"]: j["loss"] for j in map(json.loads, open(f)) if "loss" in j}
a, b = losses(fa), losses(fb)
common = sorted(set(a) & set(b))
worst = max((abs(a[s] - b[s]) / abs(a[s]), s) for s in common) if common else (1.0, -1)
ok = len(common) >= 4 and worst[0] <= tol
print("%s %s: %d steps compared, worst relative difference %.3g at step %d (allowed %g)"
      % ("ok  " if ok else "FAIL", name, len(common), worst[0], worst[1], tol))
sys.exit(0 if ok else 1)
PYEOF
}

# --- the uninterrupted one-process run: the oracle of every fp32 continuation
tr ref 1 --out "$tmp/ref" --log "$tmp/ref.log"

# --- exact resume: K steps + --resume + N-K steps == N steps, bitwise -------
for L in "dp2z1 2 --dp 2 --zero 1" "tp2 2 --tp 2" "pp2 2 --pp 2" "topk 2 --dp 2 --grad-compress topk:0.1"; do
  set -- $L; name=$1 np=$2; shift 2
  tr "$name-full" "$np" "$@" --out "$tmp/$name-full" --log "$tmp/$name-full.log" || continue
  tr "$name-stop" "$np" "$@" --out "$tmp/$name" --stop-after 4 || continue
  grep -q "stopped after step 4 of 8 with a checkpoint in .*; to continue, run the same command with --resume latest" \
    "$tmp/$name-stop.out" || fail "$name: --stop-after printed no resume line"
  tr "$name-resume" "$np" "$@" --out "$tmp/$name" --resume latest --log "$tmp/$name-resume.log" || continue
  cmp_losses "exact-$name" "$tmp/$name-full.log" "$tmp/$name-resume.log" 0
  $PY "$XXH3" same "$tmp/$name-full/latest" "$tmp/$name/latest" \
    || fail "exact-$name: the state of step 8 differs from the uninterrupted run's"
done

# --- resharding: saved under one layout at step 4, continued under another --
tr src1 1 --out "$tmp/src1" --stop-after 4
tr src8 8 --dp 2 --tp 2 --pp 2 --out "$tmp/src8" --stop-after 4
tr srcbf 2 --dp 2 --zero 1 --precision bf16 --out "$tmp/srcbf" --stop-after 4
# reshard NAME SRC NP FLAGS...: resume step 4 of SRC, compare with the reference
reshard() {
  local name=$1 src=$2 np=$3; shift 3
  tr "$name" "$np" "$@" --resume "$tmp/$src/step-00000004" --out "$tmp/o-$name" --log "$tmp/$name.log" &&
    cmp_losses "reshard-$name" "$tmp/ref.log" "$tmp/$name.log" 1e-5
}
reshard 8-to-1        src8  1
reshard 1-to-8        src1  8 --dp 2 --tp 2 --pp 2 --zero 1
reshard dp2z1-to-tp2  dp2z1 2 --tp 2
reshard tp2-to-pp2    tp2   2 --pp 2
reshard pp2-to-dp2z3  pp2   2 --dp 2 --zero 3
reshard 1-to-dp2rb    src1  2 --dp 2 --dp-mode reduce-broadcast
reshard 8-to-tp2dp2z2 src8  4 --tp 2 --dp 2 --zero 2
# context parallelism: parameters do not depend on cp, and its ZeRO state is
# sharded over dp x cp like dp's, so it reshards as for a dp change
tr srccp 2 --cp 2 --zero 1 --out "$tmp/srccp" --stop-after 4
reshard cp2z1-to-dp2z1 srccp 2 --dp 2 --zero 1
reshard cp2z1-to-1     srccp 1
# the manifest records cp: ckpt check and the resume name the layout saved
"$T" ckpt check "$tmp/srccp/step-00000004" 2>&1 | grep -q "saved under dp 1 x cp 2 x tp 1 x pp 1 (2 ranks), zero 1" &&
  grep -q "saved under dp 1 cp 2 tp 1 pp 1 zero 1" "$tmp/cp2z1-to-1.out" && echo "ok   the manifest records cp 2" ||
  fail "cp: ckpt check or the resume line does not name cp 2"
# hybrid sharding: the first replica saves the shards' state once; it
# continues as plain ZeRO over dp 2 and on one process, and into shards again
tr srchs 4 --dp 4 --dp-shard 2 --zero 3 --out "$tmp/srchs" --stop-after 4
reshard hs4z3-to-dp2z1 srchs 2 --dp 2 --zero 1
reshard hs4z3-to-1     srchs 1
reshard 1-to-hs4z1     src1  4 --dp 4 --dp-shard 2 --zero 1
# precision: a bf16 run's fp32 master weights continue in fp32 under two
# layouts (they agree as fp32 runs do; --precision fp32 is the one change,
# one line: a resume continues in the checkpoint's precision unless told),
# and fp32 state continues in bf16
tr bf-to-1 1 --precision fp32 --resume "$tmp/srcbf/step-00000004" --out "$tmp/o-bf1" --log "$tmp/bf-to-1.log" &&
  tr bf-to-tp2 2 --tp 2 --precision fp32 --resume "$tmp/srcbf/step-00000004" --out "$tmp/o-bftp" --log "$tmp/bf-to-tp2.log" &&
  cmp_losses "reshard-bf16-to-fp32-tp2-vs-1" "$tmp/bf-to-1.log" "$tmp/bf-to-tp2.log" 1e-5
[ "$(grep -c "^resume: --" "$tmp/bf-to-1.out")" = 1 ] &&
  grep -q "^resume: --precision fp32 instead of the checkpoint's bf16$" "$tmp/bf-to-1.out" ||
  fail "bf-to-1: not one line for the change of precision: $(grep '^resume: --' "$tmp/bf-to-1.out")"
# bf16 rounds activations and weights: its losses stay within 1e-2 of fp32's
tr fp-to-bf 2 --dp 2 --precision bf16 --resume "$tmp/src1/step-00000004" --out "$tmp/o-fpbf" --log "$tmp/fp-to-bf.log" &&
  cmp_losses "reshard-fp32-to-bf16-dp2" "$tmp/ref.log" "$tmp/fp-to-bf.log" 1e-2

# per-dp-rank state (top-k residuals, local moments) reshards like the model
# while dp stays: dp 2 zero 0 fp32 resumed at dp 2 zero 1 bf16 and saved
# again at once (--stop-after at the checkpoint's step) holds the same state,
# element by element of each global tensor (put together below by a reader of
# its own); a dp change drops it with a note. (Top-k is refused with tp or pp
# > 1: the reader's tp mapping and the _tpR / _tied sections are for them.)
tr topk-z1-bf16 2 --dp 2 --zero 1 --precision bf16 --grad-compress topk:0.1 --resume "$tmp/topk/step-00000004" \
  --out "$tmp/o-topkz1" --stop-after 4 &&
  if grep -q "dropped\|starts at zero" "$tmp/topk-z1-bf16.out"; then fail "topk-z1-bf16: $(grep -m1 'dropped\|starts at zero' "$tmp/topk-z1-bf16.out")"
  else $PY - "$tmp/topk/step-00000004" "$tmp/o-topkz1/step-00000004" topk-z1-bf16 <<'PYEOF' || fails=$((fails+1))
import json, re, struct, sys
def load(d):
    """every section's global tensors, put together from the pieces with the
    slice -> global mapping written out here (not trident's)"""
    m = json.load(open(d + "/manifest.json"))
    hdrs, blobs = {}, {}
    for f, entry in enumerate(m["files"]):
        b = open(d + "/" + entry["name"], "rb").read()
        n = struct.unpack("<Q", b[:8])[0]
        hdrs[f], blobs[f] = json.loads(b[8:8 + n]), b[8 + n:]
    out = {}
    for t in m["tensors"]:
        shape = t["shape"]; rows = shape[0]; cols = shape[1] if len(shape) == 2 else 1
        slice_n = {}  # a slice's element count: where its pieces end
        for p in t["pieces"]: slice_n[p["tp"]] = max(slice_n.get(p["tp"], 0), p["end"])
        for p in t["pieces"]:
            o = hdrs[p["file"]][p["key"]]["data_offsets"]
            vals = struct.unpack("<%df" % ((o[1] - o[0]) // 4), blobs[p["file"]][o[0]:o[1]])
            g = out.setdefault((p["section"], t["name"]), {})
            tp, r, sd, grp = p["tp"], p["tp_rank"], p["split_dim"], p["groups"]
            lcols = cols // tp if sd == 1 else cols
            for e, x in enumerate(vals):
                k = p["begin"] + e; i, j = divmod(k, lcols)
                if sd == 0:  # local rows in groups; a vocabulary slice's padding rows fall past the end
                    per = slice_n[tp] // lcols // grp
                    i = (i // per) * (rows // grp) + r * per + i % per
                    if i >= rows: continue
                elif sd == 1: j += r * lcols
                gi = i * cols + j
                assert gi not in g, (p["key"], gi)
                g[gi] = x
    return m, out
ma, a = load(sys.argv[1]); mb, b = load(sys.argv[2])
rs = sorted(k for k in a if k[0].startswith("rs"))
# every holder of a replicated tensor has its own state of it (sections
# _tpR, _tied); from a checkpoint without that copy it starts as the first's
def want(k): return a[k] if k in a else a.get((re.sub("_tp[0-9]+|_tied", "", k[0]), k[1]))
# (a copy without a holder in b's layout is not there)
bad = [k for k in b if want(k) != b[k]] + [k for k in a if k not in b and not re.search("_tp|_tied", k[0])]
nonzero = sum(1 for k in rs for x in a[k].values() if x != 0.0)
def lay(m): return "zero %s %s" % (m["layout"].get("zero"), m["layout"].get("precision"))
print("%s %s: saved under %s, saved again under %s: %d tensors of per-dp-rank state (%d nonzero elements); "
      "%d of %d (section, tensor) pairs differ" % ("ok  " if not bad and rs and nonzero else "FAIL", sys.argv[3],
      lay(ma), lay(mb), len(rs), nonzero, len(bad), len(a)))
sys.exit(0 if not bad and rs and nonzero else 1)
PYEOF
  fi
tr topk-to-1 1 --grad-compress topk:0.1 --resume "$tmp/topk/step-00000004" --out "$tmp/o-topk1" &&
  if grep -q "resume: dp changed from 2 to 1: the checkpoint's per-dp-rank state .* is dropped" "$tmp/topk-to-1.out"
  then echo "ok   topk-to-1: the note of the dropped per-dp-rank state"; else fail "topk-to-1: no note about the dropped state"; fi

# an imported model (step 0, no moments) is fine-tuned by --resume under any
# layout: one process and tp 2 from the same import agree as fp32 runs do
"$T" export --ckpt "$tmp/ref" --format llmc --out "$tmp/ref.llmc" >/dev/null 2>&1 &&
  "$T" import --format llmc --in "$tmp/ref.llmc" --out "$tmp/imp" --tokenizer char --data "$tmp/small.txt" >/dev/null 2>&1 \
  || fail "export/import of the reference run failed"
tr imp-1 1 --resume "$tmp/imp" --out "$tmp/o-imp1" --seed 5 --log "$tmp/imp-1.log" &&
  tr imp-tp2 2 --tp 2 --resume "$tmp/imp" --out "$tmp/o-imp2" --seed 5 --log "$tmp/imp-tp2.log" &&
  cmp_losses "import-fine-tune-tp2-vs-1" "$tmp/imp-1.log" "$tmp/imp-tp2.log" 1e-5
grep -q "holds no AdamW moments (an imported model?); they start at zero" "$tmp/imp-1.out" \
  || fail "imp-1: no note about the missing moments"

# --- preemption: SIGTERM to the ranks (as Slurm sends it) or SIGUSR1 to
# mpirun (which forwards it): every rank stops at the next step boundary with
# a checkpoint and exit 0. (SIGTERM to mpirun itself kills the job: README.)
# signal NAME SIG WHO: WHO = ranks (mpirun's children) or mpirun
signal() {
  local name=$1 sig=$2 who=$3 out="$tmp/$1" long=() a prev=
  # A with --steps 100000 instead of 8 (a flag given twice is an error)
  for a in "${A[@]}"; do [ "$prev" = --steps ] && a=100000; long+=("$a"); prev=$a; done
  $MPIRUN -np 2 "$T" train "${long[@]}" --dp 2 --out "$out" --log-every 1 >"$out.out" 2>&1 </dev/null &
  local mp=$!
  for i in $(seq 1 200); do grep -q "^step  *3/" "$out.out" 2>/dev/null && break; sleep 0.1; done
  if [ "$who" = ranks ]; then kill -"$sig" $(pgrep -P $mp); else kill -"$sig" $mp; fi
  wait $mp; local rc=$?
  if [ $rc -eq 0 ] && grep -q "stopped after step [0-9]* of 100000 with a checkpoint" "$out.out" \
     && [ -f "$out/latest/manifest.json" ]; then
    echo "ok   $name: $(grep -m1 'stopped after' "$out.out")"
  else fail "$name: exit $rc, latest -> $(readlink "$out/latest")"; tail -3 "$out.out"; fi
}
signal sigterm-ranks TERM ranks
signal sigusr1-mpirun USR1 mpirun

if [ $fails -ne 0 ]; then echo "test_resume: $fails failure(s)"; exit 1; fi
echo "test_resume: all passed"
