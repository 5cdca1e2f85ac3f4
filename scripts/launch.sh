#!/usr/bin/env bash
# Runs a training job and restarts it from its newest committed checkpoint
# when it fails, so a crashed rank costs at most the save interval.
#
#   scripts/launch.sh [--max-restarts R] [--delay S] [--log FILE] -- \
#       mpirun -np 4 build/trident train ... --save-every K --out DIR
#
# Attempt 0 runs the command as given. When it exits non-zero (a rank died,
# the heartbeat or --comm-timeout ended the job) and restarts are left, the
# next attempt runs the same command with `--resume latest` added (any
# --resume of the command replaced) once DIR/latest holds a committed
# checkpoint (its manifest.json), else the command as given: the job starts
# over. Each attempt exports TRIDENT_RESTART=N (and mpirun gets `-x
# TRIDENT_RESTART` so ranks on other hosts see it too): TRIDENT_FAULT
# faults fire at attempt 0 only. Every start and end is logged, one line
# each, to stderr and to --log FILE (appended): time, attempt, exit status,
# the checkpoint resumed from.
#
# SIGTERM, SIGINT or SIGUSR1 sent to the launcher go to mpirun (SIGUSR1:
# trident's ranks save and stop at the next step boundary) and end the
# loop: a job someone stopped is not restarted.
#
# A script, not `trident launch`: the supervisor must outlive mpirun and
# everything it starts, it takes any mpirun's own arguments untouched, and
# it needs nothing trident's binary has (no MPI, no model); bash is on every
# node that runs mpirun.
#
# Exit status: 0 when an attempt succeeded, else the last attempt's status.
set -u
max_restarts=3
delay=1
log=""
usage() {
    echo "usage: scripts/launch.sh [--max-restarts R] [--delay SECONDS] [--log FILE] -- COMMAND ..." >&2
    exit 2
}
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    case "$1" in
    --max-restarts) [ $# -ge 2 ] || usage; max_restarts=$2; shift 2 ;;
    --delay) [ $# -ge 2 ] || usage; delay=$2; shift 2 ;;
    --log) [ $# -ge 2 ] || usage; log=$2; shift 2 ;;
    *) echo "launch: error: unknown option '$1'" >&2; usage ;;
    esac
done
[ $# -gt 0 ] && shift
[ $# -gt 0 ] || { echo "launch: error: no command after --" >&2; usage; }
[[ "$max_restarts" =~ ^[0-9]+$ ]] ||
    { echo "launch: error: --max-restarts $max_restarts: must be a non-negative integer" >&2; exit 2; }
[[ "$delay" =~ ^[0-9]+([.][0-9]+)?$ ]] ||
    { echo "launch: error: --delay $delay: must be a non-negative number of seconds" >&2; exit 2; }
cmd=("$@")

# The job's --out DIR (--out DIR or --out=DIR; trident refuses a flag given twice).
out=""
for ((i = 0; i < ${#cmd[@]}; i++)); do
    case "${cmd[i]}" in
    --out) out=${cmd[i + 1]:-} ;;
    --out=*) out=${cmd[i]#--out=} ;;
    esac
done

say() {
    local line
    line="launch: $(date -u +%Y-%m-%dT%H:%M:%SZ) $*"
    echo "$line" >&2
    [ -z "$log" ] || echo "$line" >>"$log"
}

# The command for an attempt: --resume latest in place of any --resume when
# a committed checkpoint exists (and without --overwrite, which would remove
# it: trident refuses the two together); -x TRIDENT_RESTART after mpirun.
build() {
    local resume=$1 skip=0 a
    run=()
    local first=${cmd[0]##*/}
    run+=("${cmd[0]}")
    case "$first" in mpirun | mpiexec | orterun) run+=(-x TRIDENT_RESTART) ;; esac
    for a in "${cmd[@]:1}"; do
        if [ "$skip" = 1 ]; then skip=0; continue; fi
        if [ "$resume" = 1 ]; then
            [ "$a" = "--resume" ] && { skip=1; continue; }
            [[ "$a" == --resume=* ]] && continue
            [ "$a" = "--overwrite" ] && continue
        fi
        run+=("$a")
    done
    [ "$resume" = 1 ] && run+=(--resume latest)
}

stopped=""
child=0
forward() {
    stopped=$1
    say "got SIG$1: passing it to the job; no restart after it"
    [ "$child" -gt 0 ] && kill -s "$1" "$child" 2>/dev/null
}
trap 'forward TERM' TERM
trap 'forward INT' INT
trap 'forward USR1' USR1

status=0
for ((attempt = 0; attempt <= max_restarts; attempt++)); do
    resume=0 from=""
    if [ "$attempt" -gt 0 ] && [ -n "$out" ] && [ -e "$out/latest/manifest.json" ]; then
        resume=1
        from=$(readlink -f "$out/latest")
    fi
    build "$resume"
    export TRIDENT_RESTART=$attempt
    if [ "$attempt" -eq 0 ]; then
        say "attempt 0: starting: ${run[*]}"
    elif [ "$resume" = 1 ]; then
        say "attempt $attempt of $max_restarts restarts: --resume latest: resuming from $from"
    else
        say "attempt $attempt of $max_restarts restarts: no committed checkpoint under '${out:-(no --out)}'; starting over"
    fi
    t0=$(date +%s)
    "${run[@]}" &
    child=$!
    # wait returns early when a trapped signal arrives: wait again for the end
    while :; do
        wait "$child"
        status=$?
        kill -0 "$child" 2>/dev/null || break
    done
    child=0
    took=$(($(date +%s) - t0))
    if [ "$status" -eq 0 ]; then
        say "attempt $attempt: finished (exit status 0) after ${took} s"
        exit 0
    fi
    say "attempt $attempt: failed with exit status $status after ${took} s"
    if [ -n "$stopped" ]; then
        say "stopped by SIG$stopped: not restarting"
        exit "$status"
    fi
    [ "$attempt" -lt "$max_restarts" ] && sleep "$delay"
done
say "giving up after $max_restarts restarts (exit status $status)"
exit "$status"
