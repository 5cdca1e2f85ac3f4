#!/usr/bin/env bash
# The device seam's speed check (issue 39): two trident binaries, A (the
# parent commit's) and B (this one's), trained alternately on the same
# shapes, so that the load of a shared machine drifts over both alike:
#
#   L6 H6 C384 T256 B8 fp32, the same in bf16 (tinyshakespeare, char
#   tokenizer), and GPT-2-small (L12 H12 C768) T1024 B1 bf16.
#
# Each round runs every shape once with each binary, A first in odd rounds
# and B first in even ones. A run's figure is the median step_ms of its
# --log JSON lines, the first WARMUP steps left out (step 0 allocates and
# faults the pages in); each binary's figure is the median over the rounds.
# Printed: the rounds' figures, then per shape the two medians and B/A, with
# "within 3%" or "OUTSIDE 3%" (the issue's acceptance), and beside them the
# best round of each and its B/A (other jobs only slow a run down, so on a
# busy machine the best rounds are the steadier comparison). A benchmark
# never fails on speed: it exits non-zero only when a binary cannot run a
# shape.
#
# Usage: bench/ab_seam.sh A_TRIDENT B_TRIDENT
#   e.g. git worktree add /tmp/parent HEAD~1 && (build it) &&
#        bench/ab_seam.sh /tmp/parent/build/trident build/trident
# Environment: ROUNDS (5, at least 5 for the issue's table), STEPS (4: the
# small shapes' steps per run), STEPS_GPT2 (3), WARMUP (1 step left out of
# each run), THREADS (2), SHAPES ("0 1 2": which of the three shapes, in the
# order above).
# Time: 30 trainings of 3-4 steps, 8 CPU-minutes in all, so about 4 minutes
# on an otherwise idle 2-core machine; at load 11-16 (five jobs sharing the
# machine) it took 31 minutes, and the same binary as A and B then gave
# medians 0.64-1.25 apart: compare on a quiet machine.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

ROUNDS=${ROUNDS:-5}
STEPS=${STEPS:-4}
STEPS_GPT2=${STEPS_GPT2:-3}
WARMUP=${WARMUP:-1}
THREADS=${THREADS:-2}
DATA=data/tinyshakespeare.txt

die() { echo "ab_seam: error: $*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
if [[ $# -ge 1 && ( $1 == -h || $1 == --help ) ]]; then usage; exit 0; fi
[[ $# -eq 2 ]] || { usage >&2; exit 2; }
A=$1 B=$2
for b in "$A" "$B"; do [[ -x "$b" ]] || die "'$b' is not an executable trident binary"; done
SHAPES=${SHAPES:-"0 1 2"}
read -r -a shapes <<<"$SHAPES"
for s in "${shapes[@]}"; do [[ "$s" =~ ^[012]$ ]] || die "SHAPES='$SHAPES' must list 0, 1 or 2"; done
((${#shapes[@]} > 0)) || die "SHAPES is empty"
for v in ROUNDS STEPS STEPS_GPT2 THREADS; do
  [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || die "$v='${!v}' must be a positive integer"
done
[[ "$WARMUP" =~ ^[0-9]+$ ]] || die "WARMUP='$WARMUP' must be a non-negative integer"
((STEPS > WARMUP && STEPS_GPT2 > WARMUP)) || die "STEPS ($STEPS) and STEPS_GPT2 ($STEPS_GPT2) must exceed WARMUP ($WARMUP)"
((ROUNDS >= 5)) || echo "ab_seam: note: ROUNDS=$ROUNDS, fewer than the issue's 5" >&2
[[ -f "$DATA" ]] || die "$DATA is missing (the corpus ships with the repository)"

NAMES=("L6 C384 T256 B8 fp32" "L6 C384 T256 B8 bf16" "GPT-2-small T1024 B1 bf16")
ARGS=("--layers 6 --heads 6 --embd 384 --seq 256 --batch 8 --precision fp32 --steps $STEPS"
      "--layers 6 --heads 6 --embd 384 --seq 256 --batch 8 --precision bf16 --steps $STEPS"
      "--layers 12 --heads 12 --embd 768 --seq 1024 --batch 1 --precision bf16 --steps $STEPS_GPT2")

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# run WHICH(A|B) SHAPE ROUND: one training; prints its median step_ms
run() {
  local bin=$A; [[ $1 == B ]] && bin=$B
  local base=$tmp/$1_$2_$3
  # shellcheck disable=SC2086  # ARGS holds whitespace-separated flags
  "$bin" train --data "$DATA" --tokenizer char ${ARGS[$2]} --eval-every 0 --log-every 1000000 \
    --threads "$THREADS" --log "$base.jsonl" >"$base.out" 2>&1 ||
    { tail -n 5 "$base.out" >&2; die "$1 ($bin) failed on ${NAMES[$2]}"; }
  /usr/bin/python3 - "$base.jsonl" "$WARMUP" <<'EOF'
import json, statistics, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if '"step_ms"' in l]
ms = [s["step_ms"] for s in steps if "step" in s and s["step"] >= int(sys.argv[2])]
if not ms:
    sys.exit("ab_seam: error: no timed step in %s" % sys.argv[1])
print("%.1f" % statistics.median(ms))
EOF
}

echo "== ab_seam: A=$A B=$B; $ROUNDS rounds, $THREADS threads, median step_ms of steps >= $WARMUP;" \
     "$(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
start=$SECONDS
for r in $(seq "$ROUNDS"); do
  order="A B"; ((r % 2 == 0)) && order="B A"
  for s in "${shapes[@]}"; do
    line="   round $r  $(printf '%-27s' "${NAMES[$s]}")"
    for w in $order; do
      ms=$(run "$w" "$s" "$r")
      echo "$ms" >>"$tmp/$w.$s"
      line+="  $w $(printf '%8s' "$ms") ms"
    done
    echo "$line"
  done
done
echo "== medians over $ROUNDS rounds (ms/step; B/A > 1: B slower); $((SECONDS - start)) s," \
     "load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-27s %10s %10s %7s %-11s %10s %10s %7s\n' shape A B B/A "" "best A" "best B" B/A
for s in "${shapes[@]}"; do
  /usr/bin/python3 - "${NAMES[$s]}" "$tmp/A.$s" "$tmp/B.$s" <<'EOF'
import statistics, sys
a = statistics.median(float(x) for x in open(sys.argv[2]))
b = statistics.median(float(x) for x in open(sys.argv[3]))
r = b / a
ba = min(float(x) for x in open(sys.argv[2]))
bb = min(float(x) for x in open(sys.argv[3]))
print("%-27s %10.1f %10.1f %7.3f %-11s %10.1f %10.1f %7.3f" % (
    sys.argv[1], a, b, r, "within 3%" if abs(r - 1) <= 0.03 else "OUTSIDE 3%", ba, bb, bb / ba))
EOF
done
