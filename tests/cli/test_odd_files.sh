#!/usr/bin/env bash
# The odd-files sweep: every file argument of every command (inputs, the
# files inside a checkpoint directory, files named by environment variables,
# outputs) given a FIFO, a unix socket, /dev/zero and a directory (where a
# directory is not what the argument takes). Each run must end by itself
# within 10 s (a FIFO must not block an open or a read, a device must not be
# read forever or written to) with a non-zero exit, not 124, and exactly
# one "trident: error:" line that names the path and what it is. The runs go 8 at a time:
# most of each one's time is MPI's start-up, not CPU.
set -u
T=${1:?usage: test_odd_files.sh TRIDENT_BINARY DATA_DIR}
DATA=${2:?}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
head -c 20000 "$DATA/tinyshakespeare.txt" > "$tmp/small.txt"
M="--layers 1 --heads 2 --embd 16 --seq 8 --batch 4 --eval-every 0 --threads 1"
"$T" train --data "$tmp/small.txt" $M --steps 1 --out "$tmp/ck" > /dev/null 2>&1 &&
  "$T" export --ckpt "$tmp/ck" --format safetensors --out "$tmp/m.st" > /dev/null 2>&1 &&
  "$T" export --ckpt "$tmp/ck" --format llmc --out "$tmp/m.bin" --overwrite > /dev/null 2>&1 ||
  { echo "FAIL setup: could not train and export the tiny model"; exit 1; }
STEP=step-00000001
SHARD=shard-00000.safetensors
# the four odd things; /dev/zero is also reached through a link where the
# name is fixed (a checkpoint's manifest.json)
mkdir -p "$tmp/odd/dir"
mkfifo "$tmp/odd/fifo"
/usr/bin/python3 -c "import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])" "$tmp/odd/sock"
KINDS="fifo sock zero dir"
# what the error line must call each (a --data directory is read as one of
# token shards, and refused as one without them)
declare -A WHAT=([fifo]="FIFO \\(named pipe\\)" [sock]="socket" [zero]="character device" [dir]="directory")
odd_path() { case $1 in zero) echo /dev/zero ;; *) echo "$tmp/odd/$1" ;; esac; }
# put KIND PATH: the odd thing of KIND at PATH (a link to /dev/zero)
put() {
  rm -rf "$2"
  case $1 in
    fifo) mkfifo "$2" ;;
    sock) /usr/bin/python3 -c "import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])" "$2" ;;
    zero) ln -s /dev/zero "$2" ;;
    dir) mkdir "$2" ;;
  esac
}
# checkpoint copies with manifest.json / the shard replaced by each kind
for k in $KINDS; do
  cp -r "$tmp/ck" "$tmp/ckm-$k"; put $k "$tmp/ckm-$k/$STEP/manifest.json"
  cp -r "$tmp/ck" "$tmp/cks-$k"; put $k "$tmp/cks-$k/$STEP/$SHARD"
done

mkdir -p "$tmp/res" "$tmp/eo" # eo: export outputs, away from the config.json beside m.st
n=0
# sweep NAME KINDS CMD...: CMD with every @ replaced by the kind's path
# (the argument under test), run for each kind in KINDS; @K is the kind's
# name (for the per-kind checkpoint copies, whose inner path is the one named)
sweep() {
  local name=$1 kinds=$2; shift 2
  local k
  for k in $kinds; do
    local p args=() a
    p=$(odd_path $k)
    for a in "$@"; do a=${a//@K/$k}; args+=("${a//@/$p}"); done
    # the path the error must name: the argument itself, or the file
    # replaced inside the checkpoint copy
    local named=$p
    case "$*" in *ckm-@K*) named="$tmp/ckm-$k/$STEP/manifest.json" ;; *cks-@K*) named="$tmp/cks-$k/$STEP/$SHARD" ;; esac
    n=$((n+1))
    (
      # isolated singletons (scripts/test.sh) all take job family 0, so their
      # session directories are one tree: one exiting removes it while another
      # creates its own there ("orte_session_dir failed"); 8 at once need 8 trees
      export OMPI_MCA_orte_tmpdir_base="$tmp/ompi/$n"; mkdir -p "$OMPI_MCA_orte_tmpdir_base"
      out=$(cd "$tmp" && timeout 10 "${args[@]}" 2>&1 </dev/null); rc=$?
      errs=$(grep -c '^trident: error:' <<<"$out")
      line=$(grep -m1 '^trident: error:' <<<"$out")
      if [ $rc -eq 0 ] || [ $rc -ge 124 ] || [ "$errs" -ne 1 ] || ! grep -qF -e "$named" <<<"$line" ||
         ! grep -qE -e "${WHAT[$k]}" <<<"$line"; then
        { echo "FAIL $name [$k]: exit $rc (want non-zero, not 124), $errs error lines, want the path $named and /${WHAT[$k]}/ named:"
          # the whole output (up to 40 lines): an MPI start-up abort says why only at its top
          head -40 <<<"$out"; } > "$tmp/res/$n.fail"
      else
        echo "ok   $name [$k]: $line" > "$tmp/res/$n.ok"
      fi
    ) &
    while [ "$(jobs -rp | wc -l)" -ge 8 ]; do wait -n; done
  done
}
TR=("$T" train --data small.txt $M --steps 2)
NOTDIR="fifo sock zero" # for arguments that take a directory
# ---- inputs ----
sweep "train --data"                 "$KINDS"  "$T" train --data @ $M --steps 2
sweep "train --resume"               "$NOTDIR" "${TR[@]}" --out new-@K --resume @
sweep "train --resume manifest.json" "$KINDS"  "${TR[@]}" --out new-@K --resume "$tmp/ckm-@K"
sweep "train --resume shard"         "$KINDS"  "${TR[@]}" --out new-@K --resume "$tmp/cks-@K"
sweep "sample --ckpt"                "$NOTDIR" "$T" sample --ckpt @ --tokens 2
sweep "sample --ckpt manifest.json"  "$KINDS"  "$T" sample --ckpt "$tmp/ckm-@K" --tokens 2
sweep "sample --ckpt shard"          "$KINDS"  "$T" sample --ckpt "$tmp/cks-@K" --tokens 2
sweep "export --ckpt"                "$NOTDIR" "$T" export --ckpt @ --format safetensors --out eo/e-@K.st
sweep "export --ckpt manifest.json"  "$KINDS"  "$T" export --ckpt "$tmp/ckm-@K" --format safetensors --out eo/e-@K.st
sweep "export --ckpt shard"          "$KINDS"  "$T" export --ckpt "$tmp/cks-@K" --format llmc --out eo/e-@K.bin
sweep "ckpt check"                   "$NOTDIR" "$T" ckpt check @
sweep "ckpt check manifest.json"     "$KINDS"  "$T" ckpt check "$tmp/ckm-@K"
sweep "ckpt check shard"             "$KINDS"  "$T" ckpt check "$tmp/cks-@K"
sweep "import --in safetensors"      "$KINDS"  "$T" import --format safetensors --in @ --config "$tmp/config.json" --out imp-@K
sweep "import --in llmc"             "$KINDS"  "$T" import --format llmc --in @ --out imp-@K
sweep "import --config"              "$KINDS"  "$T" import --format safetensors --in "$tmp/m.st" --config @ --out imp-@K
sweep "tokenize IN"                  "$KINDS"  "$T" tokenize --tokenizer gpt2 small.txt @ --out tok-@K
sweep "TRIDENT_GPT2_BPE (tokenize)"  "$KINDS"  env TRIDENT_GPT2_BPE=@ "$T" tokenize --tokenizer gpt2 small.txt --out tok-@K
sweep "TRIDENT_GPT2_BPE (train)"     "$KINDS"  env TRIDENT_GPT2_BPE=@ "$T" train --data small.txt --tokenizer gpt2 $M --steps 2
sweep "TRIDENT_PROFILE (plan)"       "$KINDS"  env TRIDENT_PROFILE=@ "$T" plan --model gpt2-124m --global-batch 8 --gpus 8 --cluster local
sweep "TRIDENT_PROFILE (train --auto)" "$KINDS" env TRIDENT_PROFILE=@ "$T" train --data small.txt --layers 1 --heads 2 --embd 16 --seq 8 --batch 4 --eval-every 0 --steps 2 --auto
# ---- outputs: refused before any open that could block or write a device ----
sweep "train --log"                  "$KINDS"  "${TR[@]}" --log @
sweep "train --trace"                "$KINDS"  "${TR[@]}" --trace @
sweep "train --out"                  "$NOTDIR" "${TR[@]}" --out @
sweep "train --tensorboard"          "$NOTDIR" "${TR[@]}" --tensorboard @
sweep "export --out safetensors"     "$KINDS"  "$T" export --ckpt "$tmp/ck" --format safetensors --out @ --overwrite
sweep "export --out llmc"            "$KINDS"  "$T" export --ckpt "$tmp/ck" --format llmc --out @ --overwrite
sweep "export --out hf-gpt2"         "$NOTDIR" "$T" export --ckpt "$tmp/ck" --format hf-gpt2 --out @ --overwrite
sweep "import --out"                 "$NOTDIR" "$T" import --format safetensors --in "$tmp/m.st" --out @ --overwrite
sweep "tokenize --out"               "$NOTDIR" "$T" tokenize --tokenizer gpt2 small.txt --out @
sweep "plan --calibrate --out"       "$KINDS"  "$T" plan --calibrate --out @
wait
cat "$tmp"/res/*.ok 2>/dev/null | sort
fails=$(ls "$tmp"/res/*.fail 2>/dev/null | wc -l)
cat "$tmp"/res/*.fail 2>/dev/null
# a refused --resume made no --out (it is checked first, shards included)
left=$(cd "$tmp" && ls -d new-* 2>/dev/null)
[ -z "$left" ] || { echo "FAIL: refused resumes left --out directories: $left"; fails=$((fails+1)); }
# nothing was written through a link or into a FIFO: /dev/zero is still a
# device, the FIFO and the socket are still what they were
[ -c /dev/zero ] && [ -p "$tmp/odd/fifo" ] && [ -S "$tmp/odd/sock" ] && [ -z "$(ls -A "$tmp/odd/dir")" ] ||
  { echo "FAIL: an odd file was replaced or written into"; fails=$((fails+1)); }
echo "odd files: $n runs, $fails failed"
[ "$fails" -eq 0 ]
