#!/usr/bin/env bash
# trident under a real Slurm (Debian's 22.05), started here for this test:
# a generated munge key and a munged on private paths, a private SLURM_CONF
# (one node, this machine; proctrack/linuxproc and task/none, so no cgroups
# are needed), slurmctld and slurmd in the foreground (-D).
#   tests/cli/test_slurm.sh TRIDENT DATA_DIR SBATCH_SCRIPT
# 1. `srun --mpi=pmix -n 2 trident train` gives the losses of
#    `mpirun -np 2`, line for line (printed side by side), and the same
#    threads per rank (cores / 2: srun sets no OMPI_COMM_WORLD_LOCAL_SIZE,
#    trident counts the ranks of a node with MPI_Comm_split_type);
# 2. the memory share per rank (TRIDENT_MEMORY_LIMIT over 2 ranks) refused
#    alike under both; srun --mpi=none or pmi2 (Open MPI cannot start
#    there) refused in one line naming --mpi=pmix;
# 3. scripts/slurm/train.sbatch: the time-limit signal (sent here with
#    scancel --batch --signal=USR1, as --signal=B:USR1@120 sends it) reaches
#    the ranks through the script and srun, they save, the script requeues
#    the job, the requeued start resumes from --out's latest and ends with
#    the losses of the uninterrupted srun run. The ranks are held
#    (SIGSTOP) until the signal is pending on them, so the stop cannot come
#    too late for a short run.
# A missing program or plugin fails the test with the package to install
# (scripts/deps.sh installs them); it never skips. Every daemon and job
# started here is stopped on exit, failure or not.
set -u
TRIDENT=$(readlink -f "$1")
DATA=$(readlink -f "$2")
JOBSCRIPT=$(readlink -f "$3")
fail() { echo "test_slurm: FAIL: $*" >&2; exit 1; }
need() { command -v "$1" >/dev/null 2>&1 || fail "no '$1' on PATH: install Debian's $2 (scripts/deps.sh does)"; }
need munged munge
need munge munge
need slurmctld slurmctld
need slurmd slurmd
for p in srun sbatch scontrol scancel sinfo; do need $p slurm-client; done
need mpirun openmpi-bin
[ "$(id -u)" = 0 ] || fail "needs root: the private slurmd runs as SlurmdUser=root (uid $(id -u))"
[ -x "$TRIDENT" ] || fail "no trident binary at $1"
# the job script's settings for a real cluster: cores per rank (and srun
# told of them), memory, partition and account placeholders, modules, UCX
for want in '^#SBATCH --cpus-per-task=[0-9]' '^export SRUN_CPUS_PER_TASK=' '^##SBATCH --mem=' \
    '^##SBATCH --partition=' '^##SBATCH --account=' '^# module load ' '^# export OMPI_MCA_pml=ucx' \
    '^# export UCX_NET_DEVICES='; do
    grep -q -- "$want" "$JOBSCRIPT" || fail "$JOBSCRIPT has no line matching '$want'"
done

W=$(mktemp -d /tmp/td_slurm.XXXXXX)
chmod 755 "$W" # munged wants every directory above its socket searchable by all
mkdir -m 700 "$W/key" "$W/log" "$W/state" "$W/spool"
mkdir -m 755 "$W/run"
PIDS=() HELD=() JOBS=()
cleanup() {
    trap '' INT TERM # a second signal must not cut the teardown short
    [ ${#HELD[@]} -gt 0 ] && kill -CONT "${HELD[@]}" 2>/dev/null
    [ ${#JOBS[@]} -gt 0 ] && timeout 5 scancel "${JOBS[@]}" 2>/dev/null
    for _ in $(seq 50); do # the jobs' steps end before slurmd does
        [ -z "$(timeout 5 squeue -h -o %i 2>/dev/null)" ] && break
        sleep 0.2
    done
    local p
    for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do # slurmd, slurmctld, munged
        p=${PIDS[i]}
        kill -TERM "$p" 2>/dev/null || continue
        for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$p" 2>/dev/null
    done
    wait 2>/dev/null
    rm -rf "$W"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
logs() { tail -n 15 "$W"/log/*.log "$W"/*.out 2>/dev/null | sed 's/^/  /' >&2; }

# ---- munge: a key of our own, a daemon on private paths -------------------
dd if=/dev/urandom of="$W/key/munge.key" bs=1024 count=1 status=none || fail "cannot write a munge key"
chmod 400 "$W/key/munge.key"
SOCK=$W/run/munge.sock
munged -F --key-file="$W/key/munge.key" --socket="$SOCK" --pid-file="$W/run/munged.pid" \
    --log-file="$W/log/munged.log" --seed-file="$W/key/munged.seed" >"$W/munged.out" 2>&1 &
PIDS+=($!)
for _ in $(seq 50); do munge -n -S "$SOCK" 2>/dev/null | unmunge -S "$SOCK" >/dev/null 2>&1 && break; sleep 0.1; done
munge -n -S "$SOCK" | unmunge -S "$SOCK" >/dev/null 2>&1 || { logs; fail "munged did not start on $SOCK"; }

# ---- Slurm: a one-node cluster on two free ports ---------------------------
read -r CPORT DPORT < <(/usr/bin/python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*(x.getsockname()[1] for x in s))')
NODE=$(hostname -s)
export SLURM_CONF=$W/slurm.conf
cat >"$SLURM_CONF" <<EOF
ClusterName=tdtest
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$CPORT
SlurmdPort=$DPORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$SOCK
StateSaveLocation=$W/state
SlurmdSpoolDir=$W/spool
SlurmctldPidFile=$W/run/slurmctld.pid
SlurmdPidFile=$W/run/slurmd.pid
SlurmctldLogFile=$W/log/slurmctld.log
SlurmdLogFile=$W/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SlurmdParameters=config_overrides
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
slurmctld -D -f "$SLURM_CONF" >"$W/slurmctld.out" 2>&1 &
PIDS+=($!)
slurmd -D -N "$NODE" -f "$SLURM_CONF" >"$W/slurmd.out" 2>&1 &
PIDS+=($!)
state=""
for _ in $(seq 150); do
    state=$(timeout 5 sinfo -h -n "$NODE" -o %T 2>/dev/null)
    [ "$state" = idle ] && break
    sleep 0.2
done
[ "$state" = idle ] || { logs; fail "node $NODE is '${state:-unknown}', not idle, 30 s after slurmctld and slurmd started"; }
srun --mpi=list 2>&1 | grep -qw pmix || fail "srun has no PMIx plugin (mpi_pmix.so of slurm-wlm-basic-plugins)"
echo "test_slurm: one-node Slurm up ($NODE, slurmctld :$CPORT, slurmd :$DPORT)"

# ---- 1. srun beside mpirun ---------------------------------------------------
STEPS=40
MODEL=(--data "$DATA/tinyshakespeare.txt" --layers 2 --heads 4 --embd 128 --seq 64 --batch 8
       --steps $STEPS --eval-every 0 --seed 7)
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2)
losses() { grep -ho '"step": [0-9]*, "loss": [-0-9.e+]*' "$@" | sed 's/"step": \([0-9]*\), "loss": /\1 /'; }
threads() { grep -o '[0-9]* threads per rank' "$1"; }
timeout -k 5 120 srun --mpi=pmix -n 2 "$TRIDENT" train "${MODEL[@]}" --log "$W/srun.jsonl" >"$W/srun.txt" 2>&1 ||
    { cat "$W/srun.txt"; fail "srun --mpi=pmix -n 2 trident train exited non-zero"; }
timeout -k 5 120 "${MPIRUN[@]}" "$TRIDENT" train "${MODEL[@]}" --log "$W/mpirun.jsonl" >"$W/mpirun.txt" 2>&1 ||
    { cat "$W/mpirun.txt"; fail "mpirun -np 2 trident train exited non-zero"; }
losses "$W/srun.jsonl" >"$W/srun.loss"
losses "$W/mpirun.jsonl" >"$W/mpirun.loss"
echo "  step  srun --mpi=pmix -n 2   mpirun -np 2"
join "$W/srun.loss" "$W/mpirun.loss" | awk '{printf "  %4d  %-20s %s\n", $1, $2, $3}'
[ "$(wc -l <"$W/srun.loss")" = $STEPS ] || fail "srun's log has $(wc -l <"$W/srun.loss") losses, expected $STEPS"
cmp -s "$W/srun.loss" "$W/mpirun.loss" || fail "srun's losses differ from mpirun's (above)"
echo "test_slurm: $STEPS losses identical under srun and mpirun: ok"
cores=$(getconf _NPROCESSORS_ONLN)
want=$((cores / 2 > 0 ? cores / 2 : 1))
ts=$(threads "$W/srun.txt") tm=$(threads "$W/mpirun.txt")
echo "  srun: $ts; mpirun: $tm ($cores cores, 2 ranks on this node)"
[ "$ts" = "$want threads per rank" ] || fail "srun run has '$ts', expected '$want threads per rank' (cores / ranks on the node)"
[ "$tm" = "$ts" ] || fail "mpirun has '$tm', srun '$ts'"
echo "test_slurm: threads per rank alike: ok"

# ---- 2. the memory share per rank --------------------------------------------
share="each of the 2 ranks on this node may use 50.00 KiB (TRIDENT_MEMORY_LIMIT=100K, for the node)"
TRIDENT_MEMORY_LIMIT=100K timeout -k 5 60 srun --mpi=pmix -n 2 "$TRIDENT" train "${MODEL[@]}" \
    >"$W/mem.srun" 2>&1 && fail "srun: a 163 KiB plan under TRIDENT_MEMORY_LIMIT=100K / 2 ranks ran"
TRIDENT_MEMORY_LIMIT=100K timeout -k 5 60 "${MPIRUN[@]}" -x TRIDENT_MEMORY_LIMIT "$TRIDENT" train "${MODEL[@]}" \
    >"$W/mem.mpirun" 2>&1 && fail "mpirun: a plan above TRIDENT_MEMORY_LIMIT=100K / 2 ranks ran"
for f in mem.srun mem.mpirun; do
    grep -qF "$share" "$W/$f" || { cat "$W/$f"; fail "${f#mem.} did not refuse with: $share"; }
done
echo "test_slurm: memory share alike ($share): ok"

# ---- srun without PMIx: one line naming --mpi=pmix, not Open MPI's page ------
for mpi in none pmi2; do
    timeout -k 5 60 srun --mpi=$mpi -n 2 "$TRIDENT" train "${MODEL[@]}" >"$W/mpi.$mpi" 2>&1 &&
        fail "srun --mpi=$mpi: trident ran without PMIx"
    want="trident: error: started by srun with --mpi=$mpi, but Open MPI needs Slurm's PMIx: use srun --mpi=pmix"
    [ "$(grep -c '^trident: error' "$W/mpi.$mpi")" = 1 ] && grep -qF "$want" "$W/mpi.$mpi" ||
        { cat "$W/mpi.$mpi"; fail "srun --mpi=$mpi: expected one line: $want"; }
done
echo "test_slurm: srun --mpi=none / pmi2 refused in one line: ok"

# ---- 3. the job script: signal, save, requeue, resume -------------------------
jid=$(TRIDENT=$TRIDENT timeout 10 sbatch --parsable -N 1 -n 2 --ntasks-per-node=2 -c 1 --time=5 \
    --output="$W/job.out" "$JOBSCRIPT" "${MODEL[@]}" --out "$W/ckpt" --log "$W/job.jsonl") ||
    fail "sbatch $JOBSCRIPT refused the job: $jid"
JOBS+=("$jid")
for _ in $(seq 600); do
    grep -q '"step": 1,' "$W/job.jsonl" 2>/dev/null && break
    sleep 0.05
done
grep -q '"step": 1,' "$W/job.jsonl" 2>/dev/null || { cat "$W/job.out"; fail "job $jid logged no step 1 in 30 s"; }
# hold the ranks, then the signal: it stays pending until they go on
for p in $(timeout 5 scontrol listpids "$jid" | awk 'NR > 1 {print $1}'); do
    [ "$(readlink "/proc/$p/exe" 2>/dev/null)" = "$TRIDENT" ] && HELD+=("$p")
done
[ ${#HELD[@]} = 2 ] || fail "job $jid has ${#HELD[@]} trident processes, expected 2"
kill -STOP "${HELD[@]}"
grep -q '"step": '$((STEPS - 1))',' "$W/job.jsonl" && fail "job $jid ran all $STEPS steps before it could be signalled"
timeout 10 scancel --batch --signal=USR1 "$jid" || fail "scancel --batch --signal=USR1 $jid failed"
pending() { # SIGUSR1 (10: bit 9) pending on process $1
    local m
    for m in $(awk '/^(SigPnd|ShdPnd):/ {print $2}' "/proc/$1/status" 2>/dev/null); do
        (((0x$m >> 9) & 1)) && return 0
    done
    return 1
}
for _ in $(seq 200); do
    n=0
    for p in "${HELD[@]}"; do pending "$p" && n=$((n + 1)); done
    [ $n = 2 ] && break
    sleep 0.05
done
kill -CONT "${HELD[@]}"
HELD=()
[ $n = 2 ] || { cat "$W/job.out"; fail "SIGUSR1 reached $n of 2 ranks within 10 s of scancel --batch"; }
state="" released=""
for _ in $(seq 300); do
    state=$(timeout 5 scontrol show job "$jid" 2>/dev/null | grep -o 'JobState=[A-Z_]*')
    restarts=$(timeout 5 scontrol show job "$jid" 2>/dev/null | grep -o 'Restarts=[0-9]*')
    [ "$state" = JobState=COMPLETED ] && [ "$restarts" = Restarts=1 ] && break
    # Slurm holds a requeued job for 120 s (EligibleTime); the test, as the
    # cluster's administrator, lets it start at once
    if [ "$state" = JobState=PENDING ] && [ "$restarts" = Restarts=1 ] && [ -z "$released" ]; then
        timeout 5 scontrol update JobId="$jid" StartTime=now && released=1
    fi
    case "$state" in *FAILED | *CANCELLED | *TIMEOUT) break ;; esac
    sleep 0.2
done
echo "  job $jid: $state $restarts"
grep '^slurm_train:\|^stopped after\|^done:\|^checkpoint:' "$W/job.out" | sed 's/^/  /'
[ "$state" = JobState=COMPLETED ] && [ "$restarts" = Restarts=1 ] ||
    { cat "$W/job.out"; logs; fail "job $jid is $state $restarts, expected COMPLETED after 1 requeue"; }
grep -q "^stopped after step" "$W/job.out" || fail "job $jid's first start did not stop with a checkpoint"
grep -q "slurm_train: .* start 1: resuming from $W/ckpt/step-" "$W/job.out" || fail "the requeued start did not resume from --out's latest"
losses "$W/job.jsonl" "$W/job.jsonl.requeue1" >"$W/job.loss"
s=$(losses "$W/job.jsonl.requeue1" | head -1 | cut -d' ' -f1)
echo "  losses: steps 0-$((s - 1)) before the stop, $s-$((STEPS - 1)) after the requeue (of $STEPS)"
[ "$(wc -l <"$W/job.loss")" = $STEPS ] || fail "the two starts logged $(wc -l <"$W/job.loss") losses, expected $STEPS"
cmp -s "$W/job.loss" "$W/srun.loss" ||
    { diff "$W/job.loss" "$W/srun.loss" | head; fail "the stopped and requeued job's losses differ from the uninterrupted run's"; }
echo "test_slurm: stop before the time limit, requeue, resume: same $STEPS losses as one run: ok"
