#!/usr/bin/env bash
# Stop signals from a rank's first instruction (docs/checkpoint-safety.md):
# a seeded sweep of offsets over start-up (made long by
# TRIDENT_FAULT=slow-load) and over training, at 2 ranks (one case at 4), with
# SIGUSR1 to mpirun (which forwards it) and SIGTERM / SIGINT to one rank.
# Every run ends within its timeout with exit 0 and ONE "stopped ..." line:
# during start-up nothing is saved (a resumed run's latest is unchanged),
# during training a checkpoint of the step it names is latest and passes
# `trident ckpt check` (without --out: "nothing saved"). SIGTERM to mpirun
# itself (Open MPI forwards it, then kills the ranks and exits 1): never a
# hang, and latest, if any, is a complete checkpoint.
# Usage: test_signals.sh TRIDENT_BINARY DATA_DIR [SEED]
set -u
T=${1:?usage: test_signals.sh TRIDENT_BINARY DATA_DIR [SEED]}
DATA=${2:?}
RANDOM=${3:-2026}
. "$(dirname "$0")/ckpt_lib.sh"
A=(--data "$tmp/small.txt" --layers 1 --heads 2 --embd 16 --seq 16 --batch 4 --eval-every 0 --threads 1
   --log-every 100000)
SLOW=500 # ms, slept twice during start-up (after the data load, after the model build)

# ranks_of MPIRUN_PID: its trident children
ranks_of() { pgrep -P "$1" -f "trident train"; }
# caught_usr1 PID: whether the process has its SIGUSR1 handler (bit 9 of SigCgt)
caught_usr1() { local m; m=$(awk '/^SigCgt/{print $2}' "/proc/$1/status" 2>/dev/null) && [ -n "$m" ] && (( (0x$m >> 9) & 1 )); }

# case NAME NP WHO SIG WAIT OFFSET_MS EXPECT OUT -- TRAIN FLAGS...
#   WHO: mpirun | rank:R; WAIT: handlers (all ranks caught SIGUSR1) | file:PATH
#   (exists) | logstep:LOG (a step line in the --log file); EXPECT: startup | step | nosave | killed (SIGTERM to mpirun)
case_() {
  local name=$1 np=$2 who=$3 sig=$4 wait=$5 off=$6 expect=$7 out=$8; shift 9
  local log="$tmp/$name.log" t mp rks r n
  timeout -k 5 40 $MPIRUN -np "$np" "$T" train "${A[@]}" "$@" >"$log" 2>&1 & t=$!
  for _ in $(seq 400); do mp=$(pgrep -P $t); [ -n "$mp" ] && break; sleep 0.02; done
  for _ in $(seq 600); do
    rks=$(ranks_of "$mp"); n=0
    for r in $rks; do caught_usr1 "$r" && n=$((n+1)); done
    if [ "$n" -eq "$np" ]; then
      case $wait in
        handlers) break ;;
        file:*) [ -e "${wait#file:}" ] && break ;;
        logstep:*) grep -q '^{"step"' "${wait#logstep:}" 2>/dev/null && break ;;
      esac
    fi
    sleep 0.02
  done
  sleep "$(printf '%d.%03d' $((off / 1000)) $((off % 1000)))"
  case $who in
    mpirun) kill -"$sig" "$mp" ;;
    rank:*) kill -"$sig" "$(sed -n "$(( ${who#rank:} + 1 ))p" <<<"$(ranks_of "$mp" | sort -n)")" ;;
  esac
  { wait $t; } 2>/dev/null; local rc=$?
  local stops; stops=$(grep -c '^stopped ' "$log")
  if [ $rc -ge 124 ] && [ $rc -le 137 ]; then fail "$name: timed out or killed (exit $rc)"; tail -3 "$log"; return; fi
  if [ "$expect" = killed ]; then
    if [ -e "$out/latest" ] && ! "$T" ckpt check "$out" >/dev/null 2>"$tmp/chk"; then
      fail "$name: latest after SIGTERM to mpirun is not complete: $(cat "$tmp/chk")"; return
    fi
    echo "ok   $name: SIGTERM to mpirun at +${off} ms: exit $rc, no hang, latest $( [ -e "$out/latest" ] && readlink "$out/latest" || echo none) complete"
    return
  fi
  if [ $rc -ne 0 ] || [ "$stops" -ne 1 ] || grep -q 'error' "$log"; then
    fail "$name: exit $rc, $stops stop lines (want exit 0, one line)"; grep -v '^ ' "$log" | tail -4; return
  fi
  local line; line=$(grep '^stopped ' "$log")
  case $expect in
    startup)
      grep -qE '^stopped during start-up by a stop signal: nothing trained' <<<"$line" || { fail "$name: want a start-up stop: $line"; return; }
      if [ -n "${RESUMED:-}" ]; then [ "$(readlink "$out/latest")" = "$RESUMED" ] || { fail "$name: latest moved: $(readlink "$out/latest")"; return; }
      else [ ! -e "$out/latest" ] || { fail "$name: a start-up stop left $out/latest"; return; }; fi ;;
    step)
      local s; s=$(sed -nE 's/^stopped after step ([0-9]+) of .* with a checkpoint in .*/\1/p' <<<"$line")
      [ -n "$s" ] || { fail "$name: want 'stopped after step N ... with a checkpoint': $line"; return; }
      [ "$(readlink "$out/latest")" = "$(printf 'step-%08d' "$s")" ] || { fail "$name: latest -> $(readlink "$out/latest"), the line says step $s"; return; }
      "$T" ckpt check "$out" >/dev/null 2>"$tmp/chk" || { fail "$name: ckpt check: $(cat "$tmp/chk")"; return; } ;;
    nosave)
      grep -qE '^stopped at step [0-9]+: nothing saved \(no --out\)$' <<<"$line" || { fail "$name: $line"; return; } ;;
  esac
  echo "ok   $name ($np ranks, SIG$sig to $who at +${off} ms): $line"
}

# start-up: offsets inside the two slow-load sleeps (signal seen by the next agreed point)
export TRIDENT_FAULT=slow-load:$SLOW
case_ up-usr1-mpirun 2 mpirun USR1 handlers $((100 + RANDOM % (2 * SLOW - 400))) startup "$tmp/u1" -- \
  --steps 40 --out "$tmp/u1"
case_ up-term-rank1 2 rank:1 TERM handlers $((100 + RANDOM % (2 * SLOW - 400))) startup "$tmp/u2" -- \
  --steps 40 --out "$tmp/u2"
case_ up-term-rank3 4 rank:3 TERM handlers $((100 + RANDOM % (2 * SLOW - 400))) startup "$tmp/u3" -- \
  --steps 40 --out "$tmp/u3"
unset TRIDENT_FAULT
# training: after the first save appears, at a seeded offset
L=(--steps 200000 --save-every 50)
case_ run-usr1-mpirun 2 mpirun USR1 "file:$tmp/t1/latest" $((RANDOM % 400)) step "$tmp/t1" -- "${L[@]}" --out "$tmp/t1"
case_ run-int-rank1 2 rank:1 INT "file:$tmp/t2/latest" $((RANDOM % 400)) step "$tmp/t2" -- "${L[@]}" --out "$tmp/t2"
case_ run-term-rank0-noout 2 rank:0 TERM "logstep:$tmp/none.jsonl" $((RANDOM % 400)) nosave "$tmp/none" -- \
  --steps 200000 --log "$tmp/none.jsonl"
# a resumed run stopped in its start-up: the checkpoint it resumed stays latest
TRIDENT_FAULT=slow-load:$SLOW RESUMED=$(readlink "$tmp/t1/latest") case_ up-resumed 2 mpirun USR1 handlers \
  $((100 + RANDOM % (2 * SLOW - 400))) startup "$tmp/t1" -- "${L[@]}" --out "$tmp/t1" --resume latest
case_ run-term-mpirun 2 mpirun TERM "file:$tmp/t4/latest" $((RANDOM % 400)) killed "$tmp/t4" -- "${L[@]}" --out "$tmp/t4"

[ $fails -eq 0 ] && echo "all signal checks passed" || { echo "$fails failure(s)"; exit 1; }
