#!/usr/bin/env bash
# Writes that fail are errors (docs/checkpoint-safety.md), on a small tmpfs
# filled up in a private mount namespace (needs root for mount, as CI and
# the development machines run):
#  - --log on a full file system, 2 ranks: the run stops at the next agreed
#    step, saves its checkpoint (--out elsewhere), one line naming the file
#    and strerror, exit 74 on every rank;
#  - --tensorboard DIR on a full file system: the same stop, the line naming
#    the event file;
#  - --trace on a full file system: one line, exit 74, no FILE nor FILE.tmp,
#    the run's checkpoint saved;
#  - --out filling up during the run: the save fails with one line, exit 74,
#    no temporary directory left, the previous checkpoint and latest intact;
#  - export --out onto a full file system: one line, exit 74, nothing left.
# Usage: test_full_disk.sh TRIDENT_BINARY DATA_DIR
set -u
T=${1:?usage: test_full_disk.sh TRIDENT_BINARY DATA_DIR}
DATA=${2:?}
. "$(dirname "$0")/ckpt_lib.sh"
mkdir "$tmp/m"
cat >"$tmp/full.sh" <<'EOF'
set -u
T=$1 tmp=$2 m=$3 MPIRUN=$4 PY=$5
A=(--data "$tmp/small.txt" --layers 1 --heads 2 --embd 16 --seq 16 --batch 4 --eval-every 0 --threads 1 --log-every 100000)
fails=0
fail() { echo "FAIL $*"; fails=$((fails+1)); }
mount -t tmpfs -o size=256k tmpfs "$m" || { echo "FAIL mount -t tmpfs (needs root)"; exit 1; }
# fill LEAVE_KIB: the file system full but for LEAVE_KIB (a spare file removed)
fill() {
  rm -f "$m/fill" "$m/spare"
  [ "$1" -gt 0 ] && dd if=/dev/zero of="$m/spare" bs=1k count="$1" 2>/dev/null
  dd if=/dev/zero of="$m/fill" bs=4k 2>/dev/null
  rm -f "$m/spare"
}
# check NAME RC OUT WANT_RE: exit 74, one line of trident's matching WANT_RE
# (under mpirun its own note of the exit status follows), no temporary on the tmpfs
check() {
  local name=$1 rc=$2 out=$3 re=$4
  out=$(awk '/^-----+$/ { inside = !inside; next } !inside && NF' <<<"$out") # mpirun's boxed notes
  if [ "$rc" -ne 74 ] || [ "$(grep -c . <<<"$out")" -ne 1 ] || ! grep -qE "^trident: error: $re" <<<"$out"; then
    fail "$name: exit $rc (want 74), want one line /$re/:"; echo "$out" | tail -4; return 1
  fi
  if find "$m" -name '*.tmp*' | grep -q .; then fail "$name: temporaries left: $(find "$m" -name '*.tmp*')"; return 1; fi
  echo "ok   $name: $out"
}
latest_ok() { # DIR STEP: latest names step-STEP and passes ckpt check
  [ "$(readlink "$1/latest")" = "$(printf 'step-%08d' "$2")" ] && "$T" ckpt check "$1" >/dev/null 2>&1
}

# --- --log: 4 KiB left, so the log's first page fits and a later one does not
fill 4
out=$(timeout 60 $MPIRUN -np 2 "$T" train "${A[@]}" --steps 400 --save-every 100 --log "$m/log.jsonl" \
      --out "$tmp/o1" 2>&1 >/dev/null </dev/null); rc=$?
step=$(sed -nE 's/.*the run stopped after step ([0-9]+) with a checkpoint in .*/\1/p' <<<"$out")
check "--log on a full file system" $rc "$out" \
  "--log $m/log.jsonl: writing it failed: No space left on device; the run stopped after step [0-9]+ with a checkpoint in $tmp/o1$" \
  && { [ -n "$step" ] && [ "$step" -lt 400 ] && latest_ok "$tmp/o1" "$step" \
       && echo "ok   --log: stopped at step $step with its checkpoint latest and intact" \
       || fail "--log: latest -> $(readlink "$tmp/o1/latest"), the line says step $step"; }

# --- --tensorboard: 4 KiB left, so the event file's first page fits and a later one does not
rm -f "$m/log.jsonl"
fill 4
out=$(timeout 60 "$T" train "${A[@]}" --steps 400 --save-every 100 --tensorboard "$m/tb" --out "$tmp/o3" \
      2>&1 >/dev/null </dev/null); rc=$?
step=$(sed -nE 's/.*the run stopped after step ([0-9]+) with a checkpoint in .*/\1/p' <<<"$out")
check "--tensorboard on a full file system" $rc "$out" \
  "--tensorboard $m/tb: writing $m/tb/events[.]out[.]tfevents[.][0-9]+[.][^ ]+ failed: No space left on device; the run stopped after step [0-9]+ with a checkpoint in $tmp/o3$" \
  && { [ -n "$step" ] && [ "$step" -lt 400 ] && latest_ok "$tmp/o3" "$step" \
       && echo "ok   --tensorboard: stopped at step $step with its checkpoint latest and intact" \
       || fail "--tensorboard: latest -> $(readlink "$tmp/o3/latest"), the line says step $step"; }
rm -rf "$m/tb"

# --- --trace: nothing left at all; the trace is written at the end
fill 0
out=$(timeout 60 "$T" train "${A[@]}" --steps 6 --trace "$m/t.json" --out "$tmp/o2" 2>&1 >/dev/null </dev/null); rc=$?
check "--trace on a full file system" $rc "$out" \
  "--trace $m/t.json: writing $m/t.json.tmp failed: No space left on device \($m/t.json.tmp was removed\); the run ended after step 6 with a checkpoint in $tmp/o2$" \
  && { [ ! -e "$m/t.json" ] && latest_ok "$tmp/o2" 6 && echo "ok   --trace: no $m/t.json, the run's checkpoint latest and intact" \
       || fail "--trace: $m/t.json exists or latest is not step 6"; }

# --- --out: a first run saves (steps 2, 4); then 8 KiB left (the lock
# record and the start-up probe fit, a 60 KB checkpoint does not)
rm -f "$m/fill" "$m/log.jsonl"
timeout 60 "$T" train "${A[@]}" --steps 4 --save-every 2 --out "$m/ck" >/dev/null 2>&1 || fail "--out: the first run failed"
before=$(cd "$m/ck" && find . -type f ! -name .trident-lock -exec sha256sum {} + | sort -k2; find . -type l -printf '%p -> %l\n')
fill 8
out=$(timeout 60 "$T" train "${A[@]}" --steps 8 --save-every 2 --out "$m/ck" --resume latest 2>&1 >/dev/null </dev/null); rc=$?
after=$(cd "$m/ck" && find . -type f ! -name .trident-lock -exec sha256sum {} + | sort -k2; find . -type l -printf '%p -> %l\n')
check "--out filling up" $rc "$out" \
  "saving checkpoint $m/ck/step-00000006 failed: writing shard-00000.safetensors: No space left on device; the partial save was removed and --out's latest still names the previous checkpoint$" \
  && { [ "$before" = "$after" ] && latest_ok "$m/ck" 4 && ! ls -A "$m/ck" | grep -q '\.tmp\.' \
       && echo "ok   --out: no temporary directory, step-00000002/4 and latest byte-identical, latest intact" \
       || { fail "--out: the directory changed"; ls -A "$m/ck"; }; }

# --- export --out onto a full file system
fill 0
out=$(timeout 60 "$T" export --ckpt "$tmp/o2" --format safetensors --out "$m/m.st" 2>&1 </dev/null); rc=$?
check "export --out on a full file system" $rc "$out" "export: --out $m/m.st: write failed: No space left on device" \
  && { [ ! -e "$m/m.st" ] && echo "ok   export: no $m/m.st" || fail "export: $m/m.st exists"; }
umount "$m"
exit $((fails > 0))
EOF
unshare -m bash "$tmp/full.sh" "$T" "$tmp" "$tmp/m" "$MPIRUN" "$PY"; rc=$?
[ $rc -eq 0 ] && echo "all full-disk checks passed" || { echo "full-disk checks failed"; exit 1; }
