#!/usr/bin/env bash
# export / import --format hf-mixtral (tests/ref/mixtral_ref.py reads the
# files and runs an independent PyTorch Mixtral; no transformers needed):
#  - a tiny trained Llama mixture of experts (4 experts, top 2, GQA,
#    untied, char vocabulary) exported fp32: MixtralConfig's fields and
#    MixtralForCausalLM's tensors; imported back: config and parameters
#    bitwise equal, its eval and sample the same as the trained one's, and
#    trident's logits equal the torch Mixtral's on the exported files
#    within 1e-5 of the largest; a sharded export imports bitwise equal;
#  - what Mixtral cannot express refused by the export, bad Mixtral files
#    by the import, a resume under other --moe-* flags: one error line,
#    --out never written;
#  - the imported checkpoint resumed under tp 2: the losses of 2 steps
#    equal one process's within 1e-5 (relative), no model flag given.
# Usage: test_hf_mixtral.sh TRIDENT INTEROP_TOOL DATA_DIR
set -u
T=${1:?usage: test_hf_mixtral.sh TRIDENT INTEROP_TOOL DATA_DIR}
TOOL=${2:?}
DATA=${3:?}
HERE=$(cd "$(dirname "$0")" && pwd)
F="$HERE/hf_llama_files.py"
R="$HERE/mixtral_ref.py"
. "$HERE/../cli/ckpt_lib.sh" # MPIRUN, PY, $tmp, fail, $tmp/small.txt
. "$HERE/hf_lib.sh"        # bad, resume, same_losses
moe=(--arch llama --kv-heads 2 --ffn-hidden 32 --moe-experts 4)
tiny=(--layers 2 --heads 4 --embd 32 --seq 16 --batch 4 --eval-every 0 --threads 1)
# the model, and those the export refuses, trained at once (a short run's
# time is mostly its start)
train() { "$T" train --data "$tmp/small.txt" "${@:2}" --out "$tmp/$1" > "$tmp/$1.log" 2>&1; } # NAME ARGS...
train ck "${moe[@]}" "${tiny[@]}" --moe-top-k 2 --steps 2 &
train shared "${moe[@]}" "${tiny[@]}" --moe-top-k 2 --steps 1 --moe-shared-experts 1 &
train every "${moe[@]}" "${tiny[@]}" --moe-top-k 2 --steps 1 --moe-every 2 &
train sigmoid "${moe[@]}" "${tiny[@]}" --moe-top-k 2 --steps 1 --moe-router sigmoid &
train top1 "${moe[@]}" "${tiny[@]}" --moe-top-k 1 --steps 1 &
train gpt2moe --layers 1 --heads 2 --embd 16 --seq 8 --batch 2 --eval-every 0 --threads 1 --steps 1 --moe-experts 2 &
wait
for n in ck shared every sigmoid top1 gpt2moe; do
  [ -e "$tmp/$n/latest" ] || { tail -5 "$tmp/$n.log"; fail "train $n"; }
done
[ $fails -eq 0 ] || exit 1

# --- round trip -------------------------------------------------------------------
"$T" export --ckpt "$tmp/ck" --format hf-mixtral --out "$tmp/hf" >/dev/null || fail "export hf-mixtral"
files=$(cd "$tmp/hf" && ls | tr '\n' ' ')
[ "$files" = "config.json generation_config.json model.safetensors " ] && echo "ok   hf-mixtral directory: $files" \
  || fail "hf-mixtral files: $files"
"$T" import --format hf-mixtral --in "$tmp/hf" --out "$tmp/im" >/dev/null || fail "import hf-mixtral"
"$TOOL" cmp "$tmp/ck" "$tmp/im" >/dev/null && echo "ok   fp32 round trip: config and parameters bitwise equal" \
  || fail "fp32 round trip"
"$T" export --ckpt "$tmp/ck" --format hf-mixtral --shard-mb 0.02 --out "$tmp/hfs" >/dev/null \
  && "$T" import --format hf-mixtral --in "$tmp/hfs" --out "$tmp/ims" >/dev/null && "$TOOL" cmp "$tmp/ck" "$tmp/ims" >/dev/null \
  && echo "ok   sharded export ($(ls "$tmp/hfs" | grep -c '^model-') files and the index) imports bitwise equal" \
  || fail "sharded round trip"
s1=$("$T" sample --ckpt "$tmp/ck" --tokens 24 2>&1); s2=$("$T" sample --ckpt "$tmp/im" --tokens 24 2>&1)
[ -n "$s1" ] && [ "$s1" = "$s2" ] && echo "ok   sample of the import = the trained checkpoint's" || fail "sample: '$s1' vs '$s2'"
"$TOOL" logits "$tmp/im" "$tmp/tokens" "$tmp/logits" >/dev/null || fail "logits"
# in the background while the bad input is tried: the torch Mixtral (most of
# its time is torch's import), the evals, the import resumed (one process, tp 2)
$PY "$R" check "$tmp/hf" "$tmp/tokens" "$tmp/logits" > "$tmp/torch.log" 2>&1 &
torch_pid=$!
"$T" eval --ckpt "$tmp/ck" --data "$tmp/small.txt" --threads 1 > "$tmp/eval_ck.log" 2>&1 &
"$T" eval --ckpt "$tmp/im" --data "$tmp/small.txt" --threads 1 > "$tmp/eval_im.log" 2>&1 &
resume one -- &
resume tp2 $MPIRUN -np 2 -- --tp 2 &

# --- bad input --------------------------------------------------------------------
x() { bad "export $1" "$2" export --ckpt "$tmp/$1" --format hf-mixtral; }
# a balancing bias moved off zero: expert 1's of block 0, edited into a copy
# of the model (the shard's bytes, then every checksum made again)
cp -r "$tmp/ck" "$tmp/bias"
$PY - "$tmp/bias/step-00000002/shard-00000.safetensors" <<'PYEOF' && $PY "$XXH3" reseal "$tmp/bias/step-00000002" \
  || fail "edit the balancing bias"
import json, struct, sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
n = struct.unpack_from("<Q", b, 0)[0]
at = 8 + n + json.loads(b[8:8 + n])["params/model.layers.0.block_sparse_moe.expert_bias/1/0/0"]["data_offsets"][0]
struct.pack_into("<f", b, at + 4, 0.25)
open(p, "wb").write(b)
PYEOF
x shared "--moe-shared-experts 1: MixtralForCausalLM has no shared experts"
x every "--moe-every 2: every MixtralForCausalLM block is a mixture of experts"
x sigmoid "--moe-router sigmoid: Mixtral's router is a softmax"
x top1 "--moe-norm-topk off: Mixtral renormalises the chosen experts' weights"
x bias "model.layers.0.block_sparse_moe.expert_bias\[1\] is 0.25, not 0 \(--moe-bias-balance moved it\)"
x gpt2moe "a gpt2 mixture-of-experts model \(--moe-experts 2\); no export format holds GPT-2's experts"
bad "hf-llama of experts" "a mixture-of-experts llama model; --format hf-llama writes LlamaForCausalLM's dense MLPs, so use --format hf-mixtral" \
  export --ckpt "$tmp/ck" --format hf-llama
bad "resume of another mixture" "the checkpoint is of another model: it has --moe-experts 4 --moe-top-k 2 .*, this run --moe-experts 4 --moe-top-k 1 " \
  train --resume "$tmp/ck" --data "$tmp/small.txt" --moe-top-k 1 --steps 3
# e NAME REGEX PYTHON: the export edited by PYTHON (hf_llama_files.py edit), then imported
names=(); res=(); codes=()
e() { names+=("$1"); res+=("$2"); codes+=("$3"); }
L0=model.layers.0.block_sparse_moe
e "expert past the config" "tensor \"$L0.experts.4.w1.weight\": expert 4, but .*num_local_experts 4" \
  "ren('$L0.experts.3.w1.weight', '$L0.experts.4.w1.weight')"
e "missing expert tensor" "tensor \"$L0.experts.1.w3.weight\" is missing" "del hdr['$L0.experts.1.w3.weight']"
e "trident's stacked name" "tensor \"$L0.experts.w13.weight\" is not a MixtralForCausalLM tensor trident knows" \
  "ren('$L0.experts.0.w1.weight', '$L0.experts.w13.weight')"
e "sliding window" "field sliding_window: trident's attention is full causal" 'cfg["sliding_window"] = 8'
e "rope_scaling" "field rope_scaling: trident's Mixtral has none" 'cfg["rope_scaling"] = {"rope_type": "linear", "factor": 2.0}'
e "model_type llama" "field model_type: \"llama\"; trident's Mixtral has \"mixtral\"" 'cfg["model_type"] = "llama"'
e "top-k past the experts" "num_experts_per_tok" 'cfg["num_experts_per_tok"] = 5'
edits=(); for i in "${!codes[@]}"; do edits+=("$tmp/e$((i + 1))" "${codes[$i]}"); done
$PY "$F" edit "$tmp/hf" "${edits[@]}" || fail "edit the export"
for i in "${!names[@]}"; do bad "import: ${names[$i]}" "${res[$i]}" import --format hf-mixtral --in "$tmp/e$((i + 1))"; done

# --- what ran in the background ---------------------------------------------------
wait $torch_pid && cat "$tmp/torch.log" || { cat "$tmp/torch.log"; fail "the torch Mixtral"; }
wait
a=$(grep '^eval: tokens' "$tmp/eval_ck.log"); b=$(grep '^eval: tokens' "$tmp/eval_im.log")
[ -n "$a" ] && [ "$a" = "$b" ] && echo "ok   eval of the imported checkpoint = the trained one's: $b" \
  || { fail "eval: '$a' vs '$b'"; tail -3 "$tmp/eval_im.log"; }
same_losses tp2

[ $fails -eq 0 ] && echo "test_hf_mixtral: all passed" || echo "test_hf_mixtral: $fails failed"
exit $((fails > 0))
