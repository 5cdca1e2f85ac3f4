#!/usr/bin/env bash
# One job per --out (docs/checkpoint-safety.md): a second job while the first
# holds DIR/.trident-lock is refused with one line naming the holder; a lock
# record left by a dead job is taken over with a note (and its temporary
# leftovers removed); a new run into a DIR with checkpoints is refused
# unless --overwrite, which replaces them; and two jobs started together on
# one --out, killed with SIGKILL and restarted for 10 rounds, never leave a
# lost or foreign checkpoint: every step directory and latest hold the
# first winner's run id and seed, and latest passes `trident ckpt check`.
# Usage: test_out_lock.sh TRIDENT_BINARY DATA_DIR
set -u
T=${1:?usage: test_out_lock.sh TRIDENT_BINARY DATA_DIR}
DATA=${2:?}
. "$(dirname "$0")/ckpt_lib.sh"
A=(--data "$tmp/small.txt" --layers 1 --heads 2 --embd 16 --seq 16 --batch 4 --eval-every 0 --threads 1
   --log-every 100000)
host=$(hostname)

# manifest field of a step directory (or DIR: its latest)
mf() { $PY -c 'import json,os,sys; d=sys.argv[1]; d=d if os.path.exists(d+"/manifest.json") else d+"/latest"
print(json.load(open(d+"/manifest.json"))[sys.argv[2]])' "$1" "$2"; }
snap() { (cd "$1" && find . -type f ! -name .trident-lock -exec sha256sum {} + | sort -k2; find . -type l -printf '%p -> %l\n' | sort); }
# wait_lock DIR PARENT...: until the record in DIR's lock file names a child
# of one of the PARENT pids (timeout's trident; 10 s at most)
wait_lock() {
  local d=$1 p; shift
  for _ in $(seq 200); do
    for p in "$@"; do [ -n "$(pgrep -P "$p")" ] && grep -qx "pid $(pgrep -P "$p")" "$d/.trident-lock" 2>/dev/null && return 0; done
    sleep 0.05
  done; return 1
}

# --- a second job while the first holds the lock ------------------------------
# the first job waits at its two start-up points (after the data, before
# the lock; after the model, lock held) until the test hands it a token
# (release): held until the second job has been refused (a fixed sleep raced
# the second job's start on a loaded machine)
# its own Open MPI session tree: isolated singletons all take job family 0,
# and the runs beside it would remove the shared tree under it
mkdir -p "$tmp/ompi-first"
OMPI_MCA_orte_tmpdir_base="$tmp/ompi-first" TRIDENT_FAULT=slow-load:50000 TRIDENT_FAULT_RELEASE="$tmp/release" timeout 60 "$T" train "${A[@]}" --steps 4 --out "$tmp/o" >"$tmp/first.log" 2>&1 &
first=$!
touch "$tmp/release"
wait_lock "$tmp/o" $first || fail "holder: no lock record appeared in $tmp/o/.trident-lock"
holder=$(sed -n 's/^pid //p' "$tmp/o/.trident-lock")
job=$(sed -n 's/^job //p' "$tmp/o/.trident-lock")
[ "$holder" = "$(pgrep -P $first)" ] || fail "holder: the record names pid $holder, the first job is $(pgrep -P $first)"
err=$(timeout 60 "$T" train "${A[@]}" --steps 4 --out "$tmp/o" 2>&1 >/dev/null); rc=$?
want="error: --out $tmp/o is in use by another job \(host $host, pid $holder, job $job\), which holds $tmp/o/.trident-lock"
if [ $rc -ne 2 ] || [ "$(wc -l <<<"$err")" -ne 1 ] || ! grep -qE "$want" <<<"$err"; then
  fail "second job: exit $rc (want 2), one line naming the holder: $err"
else echo "ok   second job refused: $err"; fi
touch "$tmp/release"
wait $first || fail "holder: exit $? ($(tail -2 "$tmp/first.log"))"
[ "$(readlink "$tmp/o/latest")" = step-00000004 ] || fail "holder: latest -> $(readlink "$tmp/o/latest")"
[ -s "$tmp/o/.trident-lock" ] && fail "holder: its record is still in the lock file after a clean end"

# --- a record left by a dead job: taken over with a note -----------------------
sleep 0 & dead=$!; wait $dead
printf 'host %s\npid %s\njob dead-job\n' "$host" "$dead" >"$tmp/o/.trident-lock"
mkdir "$tmp/o/.step-00000099.tmp.dead-job"; : >"$tmp/o/.step-00000099.tmp.dead-job/shard-00000.safetensors"
ln -s step-00000004 "$tmp/o/.latest.tmp.dead-job"
out=$(timeout 60 "$T" train "${A[@]}" --steps 4 --save-every 2 --out "$tmp/o" --overwrite 2>&1); rc=$?
note="note: --out $tmp/o: taking over the lock of host $host, pid $dead, job dead-job, which ended without releasing it \(that pid is not alive\)"
[ $rc -eq 0 ] && grep -qE "$note" <<<"$out" && echo "ok   stale lock taken over: $(grep -m1 note: <<<"$out")" \
  || fail "stale lock: exit $rc, no note /$note/: $(tail -3 <<<"$out")"
ls -A "$tmp/o" | grep -q 'dead-job' && fail "stale lock: the dead job's leftovers are still there: $(ls -A "$tmp/o")"

# --- existing checkpoints: refused without --overwrite, replaced with it ------
before=$(snap "$tmp/o"); run0=$(mf "$tmp/o" run)
err=$(timeout 60 "$T" train "${A[@]}" --steps 2 --out "$tmp/o" 2>&1 >/dev/null); rc=$?
want="error: --out $tmp/o already holds checkpoints \(2 step directories, latest -> step-00000004\) that a new run would mix with; give --resume latest"
[ $rc -eq 2 ] && [ "$(wc -l <<<"$err")" -eq 1 ] && grep -qE "$want" <<<"$err" && [ "$(snap "$tmp/o")" = "$before" ] \
  && echo "ok   existing checkpoints refused, --out untouched: $err" || fail "no --overwrite: exit $rc: $err"
out=$(timeout 60 "$T" train "${A[@]}" --steps 2 --out "$tmp/o" --overwrite 2>&1); rc=$?
[ $rc -eq 0 ] && [ "$(cd "$tmp/o" && ls -d step-*)" = step-00000002 ] && [ "$(readlink "$tmp/o/latest")" = step-00000002 ] \
  && [ "$(mf "$tmp/o" run)" != "$run0" ] && echo "ok   --overwrite: $(grep -m1 -- '--overwrite:' <<<"$out")" \
  || fail "--overwrite: exit $rc, $(ls "$tmp/o" | tr '\n' ' '): $(tail -2 <<<"$out")"
err=$(timeout 60 "$T" train "${A[@]}" --steps 4 --out "$tmp/o" --overwrite --resume latest 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "error: --overwrite does not combine with --resume latest" <<<"$err" \
  && echo "ok   --overwrite with --resume refused" || fail "--overwrite --resume: exit $rc: $err"

# --- two jobs at once on one --out, SIGKILL, restart ------------------------
# Each round starts two jobs together (the first round fresh, with other
# seeds, the later ones resuming latest); one takes the lock, the other is
# refused at once. The winner is killed (SIGKILL) during its saves.
c="$tmp/c"; B=("${A[@]}" --steps 100000 --save-every 25 --keep 3 --out "$c")
win_run="" win_seed=""
rounds=${TD_LOCK_ROUNDS:-10} # the issue's 10 rounds of start, kill, restart
for round in $(seq "$rounds"); do
  if [ $round = 1 ]; then a=(--seed 11 --overwrite) b=(--seed 22 --overwrite)
  else a=(--seed "$win_seed" --resume latest) b=(--seed "$win_seed" --resume latest); fi
  timeout 60 "$T" train "${B[@]}" "${a[@]}" >"$tmp/a.log" 2>&1 & pa=$!
  timeout 60 "$T" train "${B[@]}" "${b[@]}" >"$tmp/b.log" 2>&1 & pb=$!
  wait_lock "$c" $pa $pb || fail "round $round: neither job took the lock"; sleep 0.$((RANDOM % 3 + 3))
  holder=$(sed -n 's/^pid //p' "$c/.trident-lock")
  for p in $pa $pb; do [ "$(pgrep -P $p)" = "$holder" ] && kill -KILL "$holder"; done
  { wait $pa; ra=$?; wait $pb; rb=$?; } 2>/dev/null
  refused=$(grep -l "is in use by another job" "$tmp/a.log" "$tmp/b.log" | wc -l)
  [ "$refused" -eq 1 ] && { [ $ra -eq 2 ] || [ $rb -eq 2 ]; } || fail "round $round: want one job refused (exit 2), got exits $ra $rb: $(grep -h 'error\|note' "$tmp/a.log" "$tmp/b.log")"
  if [ $round = 1 ]; then
    win_seed=$(mf "$c" seed); win_run=$(mf "$c" run)
    { [ "$win_seed" = 11 ] && grep -q "in use" "$tmp/b.log"; } || { [ "$win_seed" = 22 ] && grep -q "in use" "$tmp/a.log"; } \
      || fail "round 1: latest has seed $win_seed, not the winner's"
  fi
  "$T" ckpt check "$c" >/dev/null 2>"$tmp/check.err" || fail "round $round: ckpt check of latest: $(cat "$tmp/check.err")"
  for s in "$c"/step-*; do
    [ "$(mf "$s" run)" = "$win_run" ] && [ "$(mf "$s" seed)" = "$win_seed" ] \
      || fail "round $round: $s is foreign: run $(mf "$s" run) seed $(mf "$s" seed), want $win_run $win_seed"
  done
  echo "ok   round $round: one job refused, latest -> $(readlink "$c/latest") intact, every step directory run $win_run"
done
# a clean end removes every leftover of the killed saves
out=$(timeout 60 "$T" train "${A[@]}" --steps $(( $(mf "$c" step) + 2 )) --save-every 1 --out "$c" --seed "$win_seed" --resume latest 2>&1) \
  || fail "final resume: $(tail -2 <<<"$out")"
ls -A "$c" | grep -q '\.tmp\.' && fail "final: temporary leftovers in --out: $(ls -A "$c" | grep '\.tmp\.')"
[ "$(mf "$c" run)" = "$win_run" ] && "$T" ckpt check "$c" >/dev/null || fail "final: latest is not the winner's intact save"
echo "ok   final resume: no temporary left, latest -> $(readlink "$c/latest")"

[ $fails -eq 0 ] && echo "all out-lock checks passed" || { echo "$fails failure(s)"; exit 1; }
