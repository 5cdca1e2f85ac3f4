#!/usr/bin/env bash
# --tensorboard DIR against --log, read by check_tfevents.py (its own
# CRC32C with the known answer, every record's CRCs, TensorBoard's schema
# compiled by protoc and parsed by python3-protobuf):
#  - a mixture-of-experts run stopped after step 2 (--stop-after): one file,
#    every scalar of every step (moe/* among them) equal to its log line;
#  - its resume: a second file, named after the first, whose first event
#    after file_version is SessionLog START at step 2;
#  - dp 2 with fp16 (mpirun -np 2), step 1's gradient made infinite
#    (TRIDENT_FAULT=grad-inf:1): one file only (rank 0's), the loss scale,
#    the skipped step's count and the reduced values equal to the log's;
#  - the checker refuses a copy with one flipped data byte (it can fail);
#  - --tensorboard naming a regular file: one error line before any step (the
#    preflight's), exit 2.
# Usage: test_tensorboard.sh TRIDENT_BINARY DATA_DIR
set -u
T=${1:?usage: test_tensorboard.sh TRIDENT_BINARY DATA_DIR}
DATA=${2:?}
HERE=$(cd "$(dirname "$0")" && pwd)
CHECK="/usr/bin/python3 $HERE/check_tfevents.py"
MPIRUN="mpirun --allow-run-as-root --oversubscribe --bind-to none"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL $*"; fails=$((fails+1)); }
command -v protoc >/dev/null || { echo "FAIL protoc missing (scripts/deps.sh installs protobuf-compiler)"; exit 1; }
head -c 60000 "$DATA/tinyshakespeare.txt" > "$tmp/small.txt"
A=(--data "$tmp/small.txt" --layers 2 --heads 2 --embd 32 --seq 16 --batch 4 --steps 4 --eval-every 2
   --eval-iters 1 --threads 1 --log-every 100000)
M=(--moe-experts 4 --moe-top-k 2)
files() { find "$1" -name 'events.out.tfevents.*' | sort; }

# --- a stopped run and its resume ---------------------------------------------------------
out=$(timeout 60 "$T" train "${A[@]}" "${M[@]}" --out "$tmp/ck" --stop-after 2 --tensorboard "$tmp/tb" \
      --log "$tmp/l1.jsonl" 2>&1 </dev/null) || { fail "first run: exit $?"; echo "$out" | tail -3; }
out=$(timeout 60 "$T" train "${A[@]}" "${M[@]}" --out "$tmp/ck" --resume latest --tensorboard "$tmp/tb" \
      --log "$tmp/l2.jsonl" 2>&1 </dev/null) || { fail "resume: exit $?"; echo "$out" | tail -3; }
mapfile -t F < <(files "$tmp/tb")
if [ ${#F[@]} -ne 2 ]; then
  fail "stop and resume: ${#F[@]} event files, want 2: ${F[*]}"
else
  # the resume's file sorts after the first (TensorBoard reads them in name order)
  $CHECK "${F[0]}" "$tmp/l1.jsonl" && echo "ok   the stopped run's file" || fail "the stopped run's file"
  $CHECK "${F[1]}" "$tmp/l2.jsonl" --start 2 && echo "ok   the resume's file" || fail "the resume's file"
  grep -q '"moe_aux"' "$tmp/l1.jsonl" || fail "the MoE run's log has no moe_aux"
  # a flipped byte in the last record's data: the checker must refuse it
  cp "${F[0]}" "$tmp/bad"
  n=$(stat -c %s "$tmp/bad")
  printf '\x55' | dd of="$tmp/bad" bs=1 seek=$((n - 6)) conv=notrunc 2>/dev/null
  $CHECK "$tmp/bad" "$tmp/l1.jsonl" >"$tmp/bad.out" 2>&1 && fail "the checker accepts a flipped byte"
  grep -q "data CRC" "$tmp/bad.out" && echo "ok   the checker refuses a flipped byte" \
    || { fail "the checker's refusal does not name the CRC"; cat "$tmp/bad.out"; }
fi

# --- dp 2, fp16: rank 0's file only, with the loss scale ----------------------------------
out=$(TRIDENT_FAULT=grad-inf:1 timeout 60 $MPIRUN -np 2 "$T" train "${A[@]}" --dp 2 --precision fp16 --tensorboard "$tmp/tb2" \
      --log "$tmp/l3.jsonl" 2>&1 </dev/null) || { fail "dp 2: exit $?"; echo "$out" | tail -3; }
mapfile -t F < <(files "$tmp/tb2")
if [ ${#F[@]} -ne 1 ]; then
  fail "dp 2: ${#F[@]} event files, want 1: ${F[*]}"
else
  grep -q '"loss_scale"' "$tmp/l3.jsonl" || fail "the fp16 run's log has no loss_scale"
  grep -q '"event": "skip", "step": 1,' "$tmp/l3.jsonl" || fail "the fp16 run's log has no skip at step 1"
  $CHECK "${F[0]}" "$tmp/l3.jsonl" && echo "ok   dp 2 fp16 with a skipped step: one file, rank 0's" \
    || fail "dp 2 fp16's file"
fi

# --- a regular file where the directory goes: one error line before any step -----------------
touch "$tmp/plain"
out=$(timeout 60 "$T" train "${A[@]}" --tensorboard "$tmp/plain" 2>&1 </dev/null); rc=$?
err=$(grep -c "^trident: error: --tensorboard $tmp/plain is a regular file, not a directory; name a directory" <<<"$out")
if [ $rc -ne 2 ] || [ "$err" -ne 1 ] || grep -q "^step " <<<"$out"; then
  fail "--tensorboard FILE: exit $rc (want 2), error lines $err (want 1):"; echo "$out" | tail -3
else
  echo "ok   --tensorboard naming a regular file: one error line"
fi
[ $fails -eq 0 ] && echo "all tensorboard checks passed" || exit 1
