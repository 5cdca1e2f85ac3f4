#!/usr/bin/env bash
# scripts/launch.sh, the restarting launcher.
#   test_launch.sh loop LAUNCH TRIDENT DATA
#       TRIDENT_RESTART: a kill fault fires at attempt 0 only, a bad value is
#       one error line; then the restart loop against a stand-in job that fails as told: restarts
#       with TRIDENT_RESTART counted up, `--resume latest` (in place of the
#       job's own --resume) only once --out holds a committed checkpoint,
#       --max-restarts honoured with the last exit status, a log line per
#       start and end, and a SIGTERM to the launcher passed on, not restarted.
#   test_launch.sh resume LAUNCH TRIDENT DATA
#       a real 2-rank job whose rank 1 is SIGKILLed mid-step 5 (saves every 2
#       steps): the heartbeat ends it, the launcher resumes from step 4, and
#       the run ends with the same losses (steps 4-7) and bitwise the same
#       final checkpoint shards as an uninterrupted run. Exit 77 (skipped)
#       when the trident given has no --resume.
set -u
mode=$1 launch=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "test_launch: FAIL: $*" >&2; exit 1; }
has() { grep -qF -- "$2" "$1" || { cat "$1"; fail "$1 lacks: $2"; }; }

if [ "$mode" = loop ]; then
    cd "$tmp"
    # fails while its count of runs is below FAILS; the first failure leaves
    # a committed checkpoint behind (step-4 with its manifest, latest -> it)
    cat >job.sh <<'EOF'
#!/usr/bin/env bash
echo "job: restart=$TRIDENT_RESTART args: $*"
n=$(cat count 2>/dev/null || echo 0); echo $((n + 1)) >count
[ "$n" -ge "$FAILS" ] && exit 0
if [ -n "${SAVE:-}" ]; then
  mkdir -p out/step-00000004 && touch out/step-00000004/manifest.json && ln -sfn step-00000004 out/latest
fi
exit 3
EOF
    chmod +x job.sh
    # 1. fails once after a save: one restart, from the checkpoint
    # (--overwrite of the first attempt dropped: trident refuses it with --resume)
    FAILS=1 SAVE=1 bash "$launch" --max-restarts 2 --delay 0 --log log1 -- ./job.sh --steps 8 --resume old --out out \
        --overwrite >out1 2>&1 || { cat out1; fail "a job that fails once should end with status 0"; }
    has out1 "job: restart=0 args: --steps 8 --resume old --out out --overwrite"
    has out1 "job: restart=1 args: --steps 8 --out out --resume latest"
    has log1 "attempt 0: failed with exit status 3"
    has log1 "attempt 1 of 2 restarts: --resume latest: resuming from $tmp/out/step-00000004"
    has log1 "attempt 1: finished (exit status 0)"
    [ "$(cat count)" = 2 ] || fail "expected 2 runs, got $(cat count)"
    # 2. no checkpoint yet (--out=DIR form): starts over, as given
    rm -rf out count
    FAILS=1 bash "$launch" --max-restarts 1 --delay 0 -- ./job.sh --out=out >out2 2>&1 || fail "2nd case failed"
    has out2 "job: restart=1 args: --out=out"
    grep -qF -- "--resume" out2 && { cat out2; fail "resumed without a checkpoint"; }
    has out2 "no committed checkpoint under 'out'; starting over"
    # 3. always fails: gives up after --max-restarts with the job's status
    rm -f count
    FAILS=99 bash "$launch" --max-restarts 2 --delay 0 -- ./job.sh --out out >out3 2>&1
    rc=$?
    [ "$rc" = 3 ] || { cat out3; fail "exit status $rc after giving up, expected the job's 3"; }
    [ "$(cat count)" = 3 ] || fail "expected 3 runs (1 + 2 restarts), got $(cat count)"
    has out3 "giving up after 2 restarts (exit status 3)"
    # 4. SIGTERM to the launcher reaches the job and ends the loop
    cat >slow.sh <<'EOF'
#!/usr/bin/env bash
trap 'echo "slow: got TERM"; exit 143' TERM
echo "slow: started"; sleep 20 & wait $!
EOF
    chmod +x slow.sh
    bash "$launch" --max-restarts 3 --delay 0 -- ./slow.sh >out4 2>&1 &
    pid=$!
    for _ in $(seq 50); do grep -q "slow: started" out4 && break; sleep 0.1; done
    kill -TERM $pid
    wait $pid
    rc=$?
    [ "$rc" = 143 ] || { cat out4; fail "exit status $rc after SIGTERM, expected 143"; }
    has out4 "slow: got TERM"
    has out4 "stopped by SIGTERM: not restarting"
    [ "$(grep -c "slow: started" out4)" = 1 ] || fail "restarted after SIGTERM"
    # 5. a bad option is one error line and status 2
    bash "$launch" --max-restarts x -- true >out5 2>&1 && fail "--max-restarts x accepted"
    has out5 "launch: error: --max-restarts x: must be a non-negative integer"
    # 6. the faults of TRIDENT_FAULT fire at attempt 0 only (one process)
    T=$3 D=$4
    R=(train --data "$D/tinyshakespeare.txt" --layers 1 --heads 1 --embd 8 --seq 8 --batch 2 --steps 2 --threads 1)
    TRIDENT_FAULT=kill:1 "$T" "${R[@]}" >out6 2>&1
    rc=$?
    [ "$rc" = 137 ] || { cat out6; fail "kill:1 at attempt 0: exit status $rc, expected 137 (SIGKILL)"; }
    has out6 "trident: rank 0: TRIDENT_FAULT: SIGKILL at step 1"
    TRIDENT_FAULT=kill:1 TRIDENT_RESTART=1 "$T" "${R[@]}" >out7 2>&1 || { cat out7; fail "kill:1 fired at attempt 1"; }
    grep -q "TRIDENT_FAULT" out7 && { cat out7; fail "kill:1 fired at attempt 1"; }
    TRIDENT_FAULT=kill:1 TRIDENT_RESTART=x "$T" "${R[@]}" >out8 2>&1 && fail "TRIDENT_RESTART=x accepted"
    has out8 "trident: error: TRIDENT_RESTART=x: must be a non-negative integer"
    echo "test_launch loop: ok"
    exit 0
fi

[ "$mode" = resume ] || fail "unknown mode '$mode'"
T=$3 D=$4
"$T" train --help 2>&1 | grep -q -- "--resume" || { echo "test_launch: skipped: $T has no --resume"; exit 77; }
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2)
M=(train --data "$D/tinyshakespeare.txt" --layers 2 --heads 2 --embd 32 --seq 16 --batch 8 --steps 8
   --threads 1 --dp 2 --eval-every 0 --save-every 2 --comm-timeout 120)
timeout 120 "${MPIRUN[@]}" "$T" "${M[@]}" --out "$tmp/ref" --log "$tmp/ref.jsonl" >"$tmp/ref.txt" 2>&1 ||
    { cat "$tmp/ref.txt"; fail "the uninterrupted run failed"; }
TRIDENT_FAULT=kill:5:1 timeout 240 bash "$launch" --max-restarts 2 --delay 0 --log "$tmp/launch.log" -- \
    "${MPIRUN[@]}" "$T" "${M[@]}" --out "$tmp/run" --log "$tmp/run.jsonl" >"$tmp/run.txt" 2>&1 ||
    { cat "$tmp/run.txt"; fail "the launched run did not finish"; }
cat "$tmp/launch.log"
has "$tmp/run.txt" "trident: rank 1: TRIDENT_FAULT: SIGKILL at step 5"
has "$tmp/run.txt" "trident: rank 0: rank 1 (host "
[ "$(grep -c "TRIDENT_FAULT: SIGKILL" "$tmp/run.txt")" = 1 ] || fail "the fault fired again after the restart"
has "$tmp/launch.log" "attempt 0: failed with exit status"
has "$tmp/launch.log" "attempt 1 of 2 restarts: --resume latest: resuming from $tmp/run/step-00000004"
has "$tmp/launch.log" "attempt 1: finished (exit status 0)"
# the last record of each step (the log may hold both attempts' steps 4..)
steps() { grep '^{"step"' "$1" | sed -E 's/.*"step": ([0-9]+), "loss": ([^,]+), "lr": [^,]+, "grad_norm": ([^,]+),.*/\1 \2 \3/' |
          awk '{last[$1] = $0} END {for (s = 4; s < 8; s++) print last[s]}'; }
steps "$tmp/ref.jsonl" >"$tmp/ref.steps"
steps "$tmp/run.jsonl" >"$tmp/run.steps"
[ "$(awk 'NF == 3' "$tmp/ref.steps" | wc -l)" = 4 ] || fail "could not read steps 4-7 from the metrics log"
diff "$tmp/ref.steps" "$tmp/run.steps" || fail "steps 4-7 (step, loss, grad norm) differ from the uninterrupted run's"
n=$(ls "$tmp/ref/step-00000008"/*.safetensors | wc -l)
# the same tensors, byte for byte (the run ids differ: two runs)
/usr/bin/python3 "$(dirname "$0")/ckpt_xxh3.py" same "$tmp/ref/step-00000008" "$tmp/run/step-00000008" ||
    fail "the final checkpoint's state differs"
[ "$n" -gt 0 ] || fail "no safetensors shard in $tmp/ref/step-00000008"
echo "test_launch resume: ok (steps 4-7 and $n final shards equal to the uninterrupted run's)"
