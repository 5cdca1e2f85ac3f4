#!/usr/bin/env bash
# The commands under --device guard (backend.h: every device buffer
# unreachable from host code outside a backend call) print what they print
# under --device cpu: train's losses (3 steps, then a resume to 5), eval's
# loss (also of the checkpoint exported and imported back), a seeded sample's text;
# verify passes under it (dp 2). A host access to device
# memory would end a run with its one error line, which this test shows;
# dp 2 stages its gradients (comm staging > 0), and a planted host read of
# them (TRIDENT_FAULT=host-read) ends the run naming them.
# Usage: test_device_guard.sh TRIDENT DATA_DIR
set -u
T=${1:?usage: test_device_guard.sh TRIDENT DATA_DIR}
DATA=${2:?}
MPI="mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL $*"; fails=$((fails+1)); }
head -c 6000 "$DATA/tinyshakespeare.txt" > "$tmp/small.txt"
A=(--data "$tmp/small.txt" --layers 2 --heads 2 --embd 16 --seq 16 --batch 4 --lr 1e-2 --warmup 0
   --eval-every 0 --log-every 1 --threads 1 --schedule-steps 5)
# run NAME CMD...: exit 0, its output in $tmp/NAME.out
run() {
  local name=$1; shift
  "$@" > "$tmp/$name.out" 2>&1 || { fail "$name exited $?: $(grep -m1 'error' "$tmp/$name.out")"; return 1; }
}
losses() { grep -oE '^step +[0-9]+/[0-9]+ \| loss [0-9.]+( \| [a-z]+ [-0-9.e+]+)*' "$1" | sed 's/ | lr.*//'; }
same() { # NAME A B: the same non-empty text
  if [ -s "$2" ] && cmp -s "$2" "$3"; then echo "ok   $1: $(head -c 120 "$2" | tr '\n' ' ')"; else
    fail "$1 differs: cpu '$(head -c 200 "$2")' guard '$(head -c 200 "$3")'"; fi
}
# cpu: 5 steps straight (an exact resume gives the same: cli_resume); guard: 3, then resumed to 5
run train_cpu "$T" train "${A[@]}" --steps 5 --device cpu --out "$tmp/ck_cpu" --log "$tmp/cpu.jsonl" && losses "$tmp/train_cpu.out" > "$tmp/cpu.l"
run train_guard "$T" train "${A[@]}" --steps 3 --device guard --out "$tmp/ck_guard" --log "$tmp/guard.jsonl" \
  && run resume_guard "$T" train "${A[@]}" --steps 5 --device guard --resume "$tmp/ck_guard" \
  && cat <(losses "$tmp/train_guard.out" | sed 's|/3|/5|') <(losses "$tmp/resume_guard.out") > "$tmp/guard.l"
same "train's losses, 3 steps then resumed to 5" "$tmp/cpu.l" "$tmp/guard.l"
# The memory plan per device and per host (--log's memory event): under the guard every
# category's device bytes (each buffer whole pages) and host bytes equal the measured peaks
# (host comm too: the staging pool is reserved at the plan's size), the step tensors all on the
# device; on cpu every byte is host memory, as the categories' wholes say.
python3 - "$tmp/cpu.jsonl" "$tmp/guard.jsonl" <<'PYEOF' || fail "memory plan per device and per host"
import json, sys
bad = 0
for path, dev in zip(sys.argv[1:], (0, 1)):
    r = [json.loads(l) for l in open(path) if '"event": "memory"' in l][-1]["ranks"][0]
    for c in r["device"]:
        if c == "other": continue
        ok = r["device"][c] == r["device_peak"][c] and r["host"][c] == r["host_peak"][c]
        ok = ok and r["device"][c] + r["host"][c] == r[c] and r["device_peak"][c] + r["host_peak"][c] >= r[c + "_peak"]
        ok = ok and (r["device"][c] == 0 if not dev else r["device"][c] % 4096 == 0)
        bad += not ok
        print("%s %-5s %-11s device %d/%d host %d/%d" % ("ok  " if ok else "FAIL", ("cpu", "guard")[dev], c,
              r["device"][c], r["device_peak"][c], r["host"][c], r["host_peak"][c]))
    if dev and not (r["device"]["params"] and r["device"]["activations"] and not r["host"]["params"]):
        bad += 1; print("FAIL guard: parameters and activations not on the device")
sys.exit(1 if bad else 0)
PYEOF
grep -q 'on --device guard (planned/measured, other apart): device' "$tmp/train_guard.out" \
  || fail "train's report under the guard has no device/host line"
for d in cpu guard; do
  run "eval_$d" "$T" eval --ckpt "$tmp/ck_$d" --data "$tmp/small.txt" --threads 1 --device $d \
    && grep -oE 'loss [0-9.]+ nats/token' "$tmp/eval_$d.out" > "$tmp/eval_$d.l"
  run "sample_$d" "$T" sample --ckpt "$tmp/ck_$d" --tokens 40 --seed 5 --device $d && cp "$tmp/sample_$d.out" "$tmp/sample_$d.l"
done
same "eval" "$tmp/eval_cpu.l" "$tmp/eval_guard.l"
# export the guard's checkpoint, import it back, and evaluate the import on the guard: its
# parameters reach the device through the checkpoint load's staged uploads
run export "$T" export --ckpt "$tmp/ck_guard" --format hf-gpt2 --out "$tmp/hf" \
  && run import "$T" import --format safetensors --in "$tmp/hf/model.safetensors" --out "$tmp/ck_imp" \
  && run eval_imp "$T" eval --ckpt "$tmp/ck_imp" --data "$tmp/small.txt" --threads 1 --device guard \
  && grep -oE 'loss [0-9.]+ nats/token' "$tmp/eval_imp.out" > "$tmp/eval_imp.l"
same "eval after export and import" "$tmp/eval_guard.l" "$tmp/eval_imp.l"
same "sample (seeded)" "$tmp/sample_cpu.l" "$tmp/sample_guard.l"
# ZeRO-3 in 1 KiB pieces: verify gathers each step's sharded state to the
# host, piece by piece, outside the staging the plan reserves for the step
if run verify $MPI "$T" verify "${A[@]}" --steps 2 --dp 2 --zero 3 --piece-mb 0.001 --device guard \
  && grep -q '^verify: passed' "$tmp/verify.out"; then
  echo "ok   verify --dp 2 --zero 3 --piece-mb 0.001 --device guard: $(grep -m1 '^verify: passed' "$tmp/verify.out" | cut -c1-100)"
else
  fail "verify under guard: $(tail -2 "$tmp/verify.out")"
fi
# dp 2's gradients are device memory under the guard: one node's shared ring
# stages them in pieces (step 0's comm staging: the gradient's bytes each way
# in one 256 KiB piece), and a planted host read of them at step 1 ends the
# run naming the buffer (its size the bytes staged)
TRIDENT_FAULT=host-read:1 $MPI "$T" train "${A[@]}" --steps 2 --dp 2 --device guard --log "$tmp/dp2.jsonl" \
  > "$tmp/host_read.out" 2>&1
rc=$?
g=$(grep -m1 -oE "host access to device memory: buffer 'gradients' \(grads\), offset 0 of [0-9]+" "$tmp/host_read.out" | grep -oE '[0-9]+$')
if [ $rc -ne 0 ] && [ -n "$g" ]; then
  echo "ok   a host read of dp 2's gradients under the guard: buffer 'gradients' of $g B"
else
  fail "a host read of dp 2's gradients under the guard (exit $rc): $(grep -m1 -E 'error|fault' "$tmp/host_read.out")"
fi
staged=$(grep -m1 -oE '"comm_staging": \{[^}]*\}' "$tmp/dp2.jsonl" 2>/dev/null)
if [ -n "$g" ] && [ "$staged" = "\"comm_staging\": {\"up\": [$g, 1], \"down\": [$g, 1]}" ]; then
  echo "ok   dp 2's step 0 staged its gradients: $staged"
else
  fail "dp 2's step 0 under the guard: $staged, expected $g B in 1 piece each way"
fi
[ $fails -eq 0 ] && echo "device guard: train, resume, eval, export/import, sample and verify as on cpu: ok"
exit $fails
