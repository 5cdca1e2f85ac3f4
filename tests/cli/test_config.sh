#!/usr/bin/env bash
# Configuration (docs/config.md): a flag given twice (or two aliases of one
# value) is one error naming both values; --config FILE sets flags, the
# command line overrides it, and a run from a config trains bitwise as the
# same flags on the command line; --print-config writes every flag of --help
# and loads back to itself; the effective configuration printed at start,
# in the --log start object and in the manifest is --print-config's; bad
# config files are one error naming the key and the file; --resume with no
# model flags (nor --data) continues bitwise as the resume that gives them
# and as the uninterrupted run, also from a manifest without run_config; a
# flag or config key contradicting the checkpoint names both values; under
# mpirun, --help and --print-config print once and every rank ends cleanly.
# Usage: test_config.sh TRIDENT_BINARY DATA_DIR
set -u
T=${1:?usage: test_config.sh TRIDENT_BINARY DATA_DIR}
DATA=${2:?}
. "$(dirname "$0")/ckpt_lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_ess_singleton_isolated=1
D="$tmp/small.txt"
M=(--layers 2 --heads 2 --embd 16 --seq 32)  # none of them the default
B=(--batch 4 --steps 6 --eval-every 0 --threads 1 --lr 1e-2 --warmup 2)

# refused NAME REGEX CMD...: exit 2 with exactly one line on stderr, matching REGEX
refused() {
  local name=$1 re=$2; shift 2
  "$@" >"$tmp/out" 2>"$tmp/err" </dev/null; local rc=$?
  if [ $rc -eq 2 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -qE -- "$re" "$tmp/err"; then
    echo "ok   $name: $(cat "$tmp/err")"
  else fail "$name: exit $rc, stderr: $(head -c 400 "$tmp/err")"; fi
}
# ok NAME CMD...: exit 0 (stdout in $tmp/NAME.out)
ok() {
  local name=$1; shift
  "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" </dev/null || { fail "$name: exit $?: $(tail -2 "$tmp/$name.err")"; return 1; }
}

# --- a flag given twice --------------------------------------------------
refused twice-int     "train: --layers given twice \('2', then '3'\); give it once" "$T" train --data "$D" --layers 2 --layers=3
refused twice-alias   "train: --grad-accum '2' and --micro-batches '4' set the same value" "$T" train --data "$D" --grad-accum 2 --micro-batches 4
refused twice-switch  "train: --verbose given twice; give it once" "$T" train --data "$D" --verbose --verbose
refused twice-sample  "sample: --tokens given twice \('3', then '4'\)" "$T" sample --tokens 3 --tokens=4
refused twice-config  "sample: --config given twice \('a.json', then 'b.json'\)" "$T" sample --config a.json --config b.json
echo '{"grad-accum": 2, "micro-batches": 2}' >"$tmp/alias.json"
refused config-alias  "train --config .*/alias.json: keys \"grad-accum\" and \"micro-batches\" set the same value" \
  "$T" train --config "$tmp/alias.json"

# --- --config and --print-config -------------------------------------------
printf '{"data": "%s", "layers": 2, "heads": 2, "embd": 16, "seq": 32, "batch": 8, "steps": 6,\n "eval-every": 0, "threads": 1, "lr": 0.01, "warmup": 2, "verbose": false, "tokenizer": null}\n' \
  "$D" >"$tmp/c.json"
ok print-over "$T" train --config "$tmp/c.json" --batch 4 --print-config
ok print-flags "$T" train --data "$D" "${M[@]}" "${B[@]}" --print-config
ok help "$T" train --help
$PY - "$tmp/print-over.out" "$tmp/print-flags.out" "$tmp/help.out" <<'PYEOF' || fails=$((fails+1))
import json, re, sys
over, flags = (json.loads(open(f).read()) for f in sys.argv[1:3])
helpkeys = [m.group(1) for m in re.finditer(r"^  --([a-z0-9-]+)", open(sys.argv[3]).read(), re.M)]
want = [k for k in helpkeys if k not in ("micro-batches", "config", "print-config")]  # an alias, the built-ins
bad = []
if list(flags) != want: bad.append("keys %s are not --help's flags %s" % (list(flags), want))
if over != flags: bad.append("config + --batch 4 differs from the flags: %s" % {k: (over[k], flags[k]) for k in over if over[k] != flags.get(k)})
if (flags["batch"], flags["layers"], flags["lr"], flags["vocab"], flags["log"]) != (4, 2, 0.01, None, None):
    bad.append("values: batch %r layers %r lr %r vocab %r log %r" % (flags["batch"], flags["layers"], flags["lr"], flags["vocab"], flags["log"]))
print(("FAIL print-config: " + "; ".join(bad)) if bad else "ok   print-config: %d flags, config < command line" % len(flags))
sys.exit(1 if bad else 0)
PYEOF
# round trip: the printed configuration loads back to itself (train, sample)
cp "$tmp/print-flags.out" "$tmp/p.json"
ok print-back "$T" train --config "$tmp/p.json" --print-config &&
  { cmp -s "$tmp/p.json" "$tmp/print-back.out" && echo "ok   round-trip-train" || fail "round-trip-train: $(diff "$tmp/p.json" "$tmp/print-back.out")"; }
ok sample-p "$T" sample --tokens 7 --temperature 0.7 --prompt 'a "b"' --seed 18446744073709551615 --print-config &&
  cp "$tmp/sample-p.out" "$tmp/s.json" && ok sample-back "$T" sample --config "$tmp/s.json" --print-config &&
  { cmp -s "$tmp/s.json" "$tmp/sample-back.out" && grep -q '"seed": 18446744073709551615' "$tmp/s.json" &&
    echo "ok   round-trip-sample: $(cat "$tmp/s.json")" || fail "round-trip-sample: $(cat "$tmp/s.json" "$tmp/sample-back.out")"; }

# --- the effective configuration of a run: start line, log, manifest -------
ok full "$T" train --data "$D" "${M[@]}" "${B[@]}" --out "$tmp/full" --log "$tmp/full.log"
# the host traffic of each step (backend.h's named copies; dense GPT-2, fp32,
# one process, --device cpu): the tokens up, B*T*4 bytes of inputs and as
# many of targets, and a few scalars down (the loss sum: 8 bytes), nothing else
$PY - "$tmp/full.log" <<'PYEOF' || fails=$((fails+1))
import json, sys
steps = [j for j in map(json.loads, open(sys.argv[1])) if "loss" in j and "step" in j]
bad = []
for j in steps:
    h, c = j.get("host_traffic"), j.get("comm_staging")
    if h is None: bad.append("step %d: no host_traffic" % j["step"]); continue
    if set(h) - {"tokens", "scalars"}: bad.append("step %d: purposes %s" % (j["step"], sorted(h)))
    if h.get("tokens") != {"up": [4 * 32 * 4 * 2, 2], "down": [0, 0]}: bad.append("step %d: tokens %s" % (j["step"], h.get("tokens")))
    s = h.get("scalars", {"up": [0, 0], "down": [0, 0]})
    if not 8 <= s["up"][0] + s["down"][0] <= 64: bad.append("step %d: scalars %s" % (j["step"], s))
    if c != {"up": [0, 0], "down": [0, 0]}: bad.append("step %d: comm staging %s" % (j["step"], c))
if len(steps) != 6: bad.append("%d step lines" % len(steps))
print(("FAIL host-traffic: " + "; ".join(bad)) if bad else "ok   host-traffic: %s per step" % json.dumps(steps[0]["host_traffic"]))
sys.exit(1 if bad else 0)
PYEOF
ok full-p "$T" train --data "$D" "${M[@]}" "${B[@]}" --out "$tmp/full" --log "$tmp/full.log" --print-config
# the same run from a config file: the same losses, bit for bit
printf '{"data": "%s", "layers": 2, "heads": 2, "embd": 16, "seq": 32, "batch": 4, "steps": 6, "eval-every": 0,\n "threads": 1, "lr": 0.01, "warmup": 2}\n' "$D" >"$tmp/run.json"
ok from-config "$T" train --config "$tmp/run.json" --log "$tmp/cfg.log"
$PY - "$tmp/full-p.out" "$tmp/full.out" "$tmp/full.log" "$tmp/full/latest/manifest.json" "$tmp/cfg.log" <<'PYEOF' || fails=$((fails+1))
import json, sys
printed = json.loads(open(sys.argv[1]).read())
start = [l[len("config: "):] for l in open(sys.argv[2]) if l.startswith("config: ")]
log = [json.loads(l) for l in open(sys.argv[3])]
manifest = json.load(open(sys.argv[4]))
bad = []
if len(start) != 1 or json.loads(start[0]) != printed: bad.append("the start line %r is not --print-config's" % start[:1])
if log[0].get("event") != "start" or log[0].get("run_config") != printed: bad.append("the log's start object has no or another run_config")
if manifest.get("run_config") != printed: bad.append("the manifest's run_config differs")
def losses(f): return [j["loss"] for j in map(json.loads, open(f)) if "loss" in j]
a, b = losses(sys.argv[3]), losses(sys.argv[5])
if len(a) != 6 or a != b: bad.append("losses from the config file %s differ from the flags' %s" % (b, a))
print(("FAIL effective-config: " + "; ".join(bad)) if bad else
      "ok   effective-config: start line = log start object = manifest run_config = --print-config; config run bitwise")
sys.exit(1 if bad else 0)
PYEOF

# --- bad config files: one error naming the key and the file (the loader is
# every command's: most cases on sample, which starts no MPI) -------------
bad() { local cmd=$1 name=$2 text=$3 re=$4; printf '%s' "$text" >"$tmp/$name.json"; refused "$name" "$re" "$T" $cmd --config "$tmp/$name.json"; }
bad train  cfg-unknown  '{"layer": 2}'         'train --config .*/cfg-unknown.json: unknown key "layer"'
bad train  cfg-switch   '{"verbose": 1}'       'cfg-switch.json: key "verbose": a number, but --verbose takes true or false'
bad sample cfg-str-int  '{"tokens": "2"}'      'sample --config .*/cfg-str-int.json: key "tokens": a string, but --tokens takes an integer'
bad sample cfg-num-str  '{"prompt": 5}'        'cfg-num-str.json: key "prompt": a number, but --prompt takes a string'
bad sample cfg-float    '{"tokens": 2.5}'      "cfg-float.json, key \"tokens\": '2.5' is not an integer; valid: \[0, "
bad sample cfg-range    '{"tokens": -1}'       "cfg-range.json, key \"tokens\": '-1' is out of range; valid: \[0, "
bad sample cfg-big      '{"temperature": 1e39}' "cfg-big.json, key \"temperature\": '1e39' does not fit a 32-bit float"
bad sample cfg-array    '[1, 2]'               'cfg-array.json: an array, not a JSON object of flag values'
bad sample cfg-json     '{"tokens": 2,}'       'cfg-json.json: not JSON: byte '
bad sample cfg-nested   '{"config": "x.json"}' 'cfg-nested.json: key "config": a command-line flag only'
refused cfg-missing "sample --config .*/none.json: cannot read it: No such file" "$T" sample --config "$tmp/none.json"
mkfifo "$tmp/fifo"
refused cfg-fifo    "sample --config .*/fifo: cannot read it: it is a FIFO" timeout 10 "$T" sample --config "$tmp/fifo"
refused cfg-dir     "sample --config .*: cannot read it: .*directory" "$T" sample --config "$tmp"

# --- --resume takes the model, tokenizer and data from the checkpoint ------
ok stop "$T" train --data "$D" "${M[@]}" "${B[@]}" --out "$tmp/r" --stop-after 3
ok with-flags "$T" train --data "$D" "${M[@]}" "${B[@]}" --resume "$tmp/r/step-00000003" --out "$tmp/r2" --log "$tmp/r2.log"
ok no-flags "$T" train "${B[@]}" --out "$tmp/r" --resume latest --log "$tmp/r.log"
# a manifest from before run_config: the model config and tokenizer still
# come from it; --data must be given
mkdir "$tmp/old" && cp -a "$tmp/r/step-00000003" "$tmp/old/" &&
  $PY -c 'import json, sys; p = sys.argv[1]; m = json.load(open(p)); del m["run_config"]; json.dump(m, open(p, "w"))' \
    "$tmp/old/step-00000003/manifest.json" && $PY "$XXH3" reseal "$tmp/old/step-00000003" || fail "old manifest: not made"
ok old "$T" train --data "$D" "${B[@]}" --resume "$tmp/old/step-00000003" --out "$tmp/o" --log "$tmp/old.log"
$PY - "$tmp/full.log" "$tmp/r2.log" "$tmp/r.log" "$tmp/old.log" "$tmp/no-flags.out" <<'PYEOF' || fails=$((fails+1))
import json, sys
def losses(f): return {j["step"]: j["loss"] for j in map(json.loads, open(f)) if "loss" in j}
full, flags, none, old = (losses(f) for f in sys.argv[1:5])
start = [json.loads(l[len("config: "):]) for l in open(sys.argv[5]) if l.startswith("config: ")][0]
bad = []
if sorted(flags) != [3, 4, 5]: bad.append("the resume with flags ran steps %s" % sorted(flags))
for name, got in (("the resume with flags", flags), ("the resume without", none), ("the resume of an old manifest", old)):
    if any(got.get(s) != full[s] for s in (3, 4, 5)):
        bad.append("%s: losses %s, uninterrupted %s" % (name, [got.get(s) for s in (3, 4, 5)], [full[s] for s in (3, 4, 5)]))
got = (start["layers"], start["heads"], start["embd"], start["seq"], start["tokenizer"], start["data"])
if got != (2, 2, 16, 32, "char", sys.argv[1].rsplit("/", 1)[0] + "/small.txt"):
    bad.append("the resume without flags runs with %s" % (got,))
print(("FAIL resume-defaults: " + "; ".join(bad)) if bad else
      "ok   resume-defaults: steps 3-5 bitwise equal in the uninterrupted run, the resume with model flags, without "
      "them (model, tokenizer, data from the checkpoint) and from a manifest without run_config")
sys.exit(1 if bad else 0)
PYEOF
for pair in "full r" "full r2" "full o"; do
  set -- $pair
  $PY "$XXH3" same "$tmp/$1/latest" "$tmp/$2/latest" && echo "ok   state-$2: step 6 equal to the uninterrupted run's" \
    || fail "state-$2: the state of step 6 differs from the uninterrupted run's"
done
C3="$tmp/r/step-00000003"
refused contra-flag  "--resume .*step-00000003: the checkpoint is of another model: it has --layers 2, this run 3; leave --layers out" \
  "$T" train "${B[@]}" --resume "$C3" --layers 3
echo '{"heads": 4}' >"$tmp/h.json"
refused contra-key   "it has --heads 2, this run 4 \(--config .*/h.json\)" "$T" train "${B[@]}" --resume "$C3" --config "$tmp/h.json"
refused contra-tok   "--tokenizer byte contradicts the checkpoint's tokenizer char" "$T" train "${B[@]}" --resume "$C3" --tokenizer byte
refused contra-seed  "--seed 7 contradicts the checkpoint's --seed 1337" "$T" train "${B[@]}" --resume "$C3" --seed 7
refused contra-vocab "it has --vocab 59, this run 99" "$T" train "${B[@]}" --resume "$C3" --vocab 99

# --- a resume continues what was trained, and saves it --------------------
# precision, batch, micro-batches and the schedule (its horizon too) come
# from the checkpoint: 3 steps + a resume with only --steps 8 (no --out)
# trains steps 3-5 bitwise as the uninterrupted bf16 run, then at min-lr,
# and saves into the directory it resumed from; a given change is one line
# each; an import needs --out; micro-batches another dp cannot split are
# refused with the nearest that fit; a run without --out says so at start
CN=(--data "$D" "${M[@]}" --batch 4 --grad-accum 4 --precision bf16 --lr 1e-2 --warmup 2 --steps 6 --eval-every 0 --threads 1)
ok cont-full "$T" train "${CN[@]}" --out "$tmp/cf" --log "$tmp/cf.log"
ok cont-stop "$T" train "${CN[@]}" --out "$tmp/c" --stop-after 3
ok cont "$T" train --resume "$tmp/c" --steps 8 --threads 1 --log "$tmp/cont.log"
$PY - "$tmp/cf.log" "$tmp/cont.log" "$tmp/cont.out" "$(readlink "$tmp/c/latest")" <<'PYEOF' || fails=$((fails+1))
import json, sys
def steps(f): return {j["step"]: j for j in map(json.loads, open(f)) if "loss" in j}
full, cont = steps(sys.argv[1]), steps(sys.argv[2])
notes = [l.strip() for l in open(sys.argv[3]) if l.startswith("resume: ") and " (step 3, " not in l]
bad = []
if sorted(cont) != list(range(3, 8)): bad.append("the resume ran steps %s, not 3-7" % sorted(cont))
elif any(cont[s]["loss"] != full[s]["loss"] for s in (3, 4, 5)):
    bad.append("losses of steps 3-5 %s, the uninterrupted run's %s" % ([cont[s]["loss"] for s in (3, 4, 5)], [full[s]["loss"] for s in (3, 4, 5)]))
elif any(abs(cont[s]["lr"] - 1e-4) > 1e-9 for s in (6, 7)): bad.append("lr after the horizon %s, not --min-lr" % [cont[s]["lr"] for s in (6, 7)])
if sys.argv[4] != "step-00000008": bad.append("latest of the directory resumed from is %r" % sys.argv[4])
if len(notes) != 2 or not notes[0].startswith("resume: saving into ") or "--steps 8 instead of the checkpoint's 6" not in notes[1]:
    bad.append("start lines %s" % notes)
print(("FAIL resume-continues: " + "; ".join(bad)) if bad else
      "ok   resume-continues: bf16, batch 4 x 4 micro-batches and the horizon 6 from the checkpoint (steps 3-5 bitwise), "
      "saved into its directory; lines: %s" % notes)
sys.exit(1 if bad else 0)
PYEOF
ok cont-change "$T" train --resume "$tmp/c/step-00000003" --out "$tmp/c2" --steps 4 --precision fp32 --batch 8 \
  --grad-accum 1 --schedule-steps 10 --threads 1 &&
  n=$(grep -c "^resume: --.* instead of the checkpoint's" "$tmp/cont-change.out") &&
  [ "$n" = 5 ] && ! grep -q "saving into" "$tmp/cont-change.out" && [ "$(readlink "$tmp/c2/latest")" = step-00000004 ] &&
  echo "ok   resume-changes: 5 changes, 5 lines; saved into --out" || fail "resume-changes: $n change lines: $(grep '^resume' "$tmp/cont-change.out")"
"$T" export --ckpt "$tmp/cf" --format llmc --out "$tmp/cf.llmc" >/dev/null 2>&1 &&
  "$T" import --format llmc --in "$tmp/cf.llmc" --out "$tmp/imp" --tokenizer char --data "$D" >/dev/null 2>&1 ||
  fail "export / import of cf"
refused cont-import "--resume .*/imp/step-00000000: it was not saved by 'trident train' .*; give --out DIR to save the resumed run" \
  "$T" train --resume "$tmp/imp" --data "$D" --steps 2 --batch 4 --threads 1
[ ! -e "$tmp/imp/step-00000002" ] || fail "cont-import: the refused resume saved into the import"
out=$(timeout 60 $MPIRUN -np 2 "$T" train --resume "$tmp/c" --out "$tmp/c3" --dp 2 --threads 1 2>&1 </dev/null)
[ $? -ne 0 ] && grep -q "error: --batch 4 does not split over 2 data-parallel replicas x 4 micro-batches; use --micro-batches 2 (the nearest" <<<"$out" &&
  echo "ok   resume-micro-batches: the checkpoint's 4 micro-batches under dp 2 refused, naming 2" ||
  fail "resume-micro-batches: $(grep -m1 error <<<"$out")"
grep -q "^note: no --out: this run saves no checkpoint" "$tmp/from-config.out" && ! grep -q "^note: no --out" "$tmp/cont.out" &&
  echo "ok   no-out: a run without --out says it saves nothing" || fail "no-out: no note in a run without --out"

# --- under mpirun: --help and --print-config print once, and every rank
# ends cleanly (no mpirun note of a rank exiting without MPI_Finalize) ---
once() {
  local name=$1 want=$2; shift 2
  timeout 60 $MPIRUN -np 2 "$@" >"$tmp/$name.out" 2>&1 </dev/null; local rc=$?
  local n; n=$(grep -c -- "$want" "$tmp/$name.out")
  if [ $rc -eq 0 ] && [ "$n" -eq 1 ] && ! grep -q "improperly\|mpirun" "$tmp/$name.out"; then echo "ok   $name: once, exit 0"
  else fail "$name: exit $rc, $n copies: $(head -c 300 "$tmp/$name.out")"; fi
}
once mpi-help-train   "^usage: trident train" "$T" train --help
once mpi-help-bench   "^usage: trident bench train" "$T" bench train --help
once mpi-print-bench  '^{"layers": 4' "$T" bench train --print-config
once mpi-print-train  '^{"data": ' "$T" train --data "$D" --print-config

if [ $fails -ne 0 ]; then echo "test_config: $fails failure(s)"; exit 1; fi
echo "test_config: all passed"
