#!/usr/bin/env bash
# trident eval against an independent PyTorch evaluator: a tiny model
# trained a few steps, exported as safetensors and imported back, evaluated
# by trident (val split, a partial last window and a last batch with an
# empty row; --max-tokens; --split train and all) and by eval_ref.py below,
# which parses the exported safetensors and config.json by hand, tokenizes
# the text itself (sorted distinct characters, 90/10 split) and runs each
# window (the last one shorter) through tests/ref/gpt_ref.py's GPT in
# float64. The mean loss agrees to 1e-6 relative, the token counts and bytes
# exactly. Then dp 2, tp 2 and pp 2 give the same numbers, eval holds no
# gradient, moment or activation gradient (planned to the byte) and its
# report says so, and bad flags are one error line.
# Usage: test_eval.sh TRIDENT DATA_DIR
set -u
T=${1:?usage: test_eval.sh TRIDENT DATA_DIR}
DATA=${2:?}
HERE=$(cd "$(dirname "$0")" && pwd)
PY=/usr/bin/python3
MPI="mpirun --allow-run-as-root --oversubscribe -np 2"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
# A single-process run starts no Open MPI daemon (as in test_config.sh): it
# has no peers to reach, and the daemon's start was half of its time (CI budget).
export OMPI_MCA_ess_singleton_isolated=1
fail() { echo "FAIL $*"; fails=$((fails+1)); }
head -c 6000 "$DATA/tinyshakespeare.txt" > "$tmp/small.txt"
"$T" train --data "$tmp/small.txt" --layers 2 --heads 2 --embd 16 --seq 16 --batch 4 --steps 4 --lr 1e-2 \
  --warmup 0 --eval-every 0 --threads 1 --out "$tmp/ck" > "$tmp/train.log" 2>&1 || { tail -5 "$tmp/train.log"; exit 1; }
mkdir "$tmp/hf"
"$T" export --ckpt "$tmp/ck" --format safetensors --out "$tmp/hf/model.safetensors" >/dev/null || { echo "FAIL export"; exit 1; }
"$T" import --format safetensors --in "$tmp/hf/model.safetensors" --out "$tmp/imp" >/dev/null || { echo "FAIL import"; exit 1; }

# eval NAME [flags...]: trident eval of the re-imported checkpoint, its JSON in $tmp/NAME.json
ev() {
  local name=$1; shift
  "$T" eval --ckpt "$tmp/imp" --data "$tmp/small.txt" --threads 1 --log "$tmp/$name.json" "$@" \
    > "$tmp/$name.out" 2>&1 || { fail "eval $name exited $?: $(tail -2 "$tmp/$name.out")"; return 1; }
}
ev val --batch 3                          # 599 tokens: 38 windows, the last of 7; 13 forwards, the last with one empty row
ev max --batch 3 --max-tokens 100         # 100 tokens: 7 windows, the last of 4
ev train --split train --batch 8 --max-tokens 1000
ev all --split all --batch 5              # the whole text: 5999 tokens

cat > "$tmp/eval_ref.py" <<'PYEOF'
import json, math, struct, sys
import torch
sys.path.insert(0, sys.argv[1])
from gpt_ref import GPT  # nanoGPT's model in PyTorch (no trident code)
st, cfg_path, text_path = sys.argv[2:5]
cfg = json.load(open(cfg_path))
L, H, C, T, V = (cfg[k] for k in ("n_layer", "n_head", "n_embd", "n_positions", "vocab_size"))
raw = open(st, "rb").read()
(n,) = struct.unpack("<Q", raw[:8])
hdr = json.loads(raw[8:8 + n])
state = {}
for name, info in hdr.items():
    if name == "__metadata__":
        continue
    assert info["dtype"] == "F32", name
    b, e = info["data_offsets"]
    t = torch.frombuffer(bytearray(raw[8 + n + b:8 + n + e]), dtype=torch.float32).reshape(info["shape"])
    conv1d = name.endswith(("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight"))
    state["transformer." + name] = t.t() if conv1d else t  # HF Conv1D [in, out] -> nn.Linear [out, in]
model = GPT(L, H, C, T, V)
model.load_state_dict(state, strict=True)
model = model.double().eval()
text = open(text_path, encoding="utf-8").read()
chars = sorted(set(text))
assert len(chars) == V, (len(chars), V)
ids = [chars.index(c) for c in text]
cut = len(ids) * 9 // 10
splits = {"val": ids[cut:], "train": ids[:cut], "all": ids}
worst = 0.0
for arg in sys.argv[5:]:  # RUN:SPLIT:MAX (MAX 0: no --max-tokens)
    name, split, cap = arg.split(":")
    got = json.load(open(name + ".json"))
    toks = splits[split]
    P = len(toks) - 1 if int(cap) == 0 else min(len(toks) - 1, int(cap))
    total, count, windows = 0.0, 0, 0
    with torch.no_grad():
        for s in range(0, P, T):  # windows of T + 1 tokens at 0, T, 2T, ...; the last shorter
            x = torch.tensor(toks[s:min(s + T, P)]).view(1, -1)
            y = torch.tensor(toks[s + 1:min(s + T, P) + 1]).view(1, -1)
            total += model(x, y, reduction="sum").item()
            count += y.numel()
            windows += 1
    mean = total / count
    nbytes = len("".join(chars[i] for i in toks[1:P + 1]).encode("utf-8"))
    bpb = total / math.log(2) / nbytes
    rel = abs(got["loss"] - mean) / mean
    rel_b = abs(got["bits_per_byte"] - bpb) / bpb
    worst = max(worst, rel, rel_b)
    ok = rel <= 1e-6 and rel_b <= 1e-6 and got["tokens"] == count and got["windows"] == windows \
        and got["bytes"] == nbytes and got["split"] == split and abs(got["perplexity"] - math.exp(got["loss"])) <= 1e-12 * got["perplexity"]
    print("%s %-5s split %-5s: %d tokens in %d windows; loss trident %.9f torch %.9f (rel %.1e), "
          "bits/byte %.9f / %.9f (rel %.1e), %d bytes" % ("ok  " if ok else "FAIL", name.split("/")[-1],
          got["split"], got["tokens"], got["windows"], got["loss"], mean, rel, got["bits_per_byte"], bpb, rel_b,
          got["bytes"]))
    if not ok:
        sys.exit(1)
print("largest relative difference %.2e (tolerance 1e-6)" % worst)
PYEOF
$PY "$tmp/eval_ref.py" "$HERE/../ref" "$tmp/hf/model.safetensors" "$tmp/hf/config.json" "$tmp/small.txt" \
  "$tmp/val:val:0" "$tmp/max:val:100" "$tmp/train:train:1000" "$tmp/all:all:0" || fail "trident eval against the PyTorch evaluator"
grep -q "tokens 599 | loss" "$tmp/val.out" || fail "eval's result line: $(tail -1 "$tmp/val.out")"

# --- other layouts: the same windows, the same numbers -----------------------
# dp only splits the rows of each forward (the loss sums are shared exactly),
# so its loss is the single process's to a few ulps at most. tp and pp also
# reorder the fp32 sums inside the model (tp's partial products and the
# loss's row statistics over vocabulary shards): as in trident verify
# (src/train/verify.c), a reordered K-term fp32 sum moves by about
# sqrt(K) x 2^-24 of its terms, ~1e-7 of the mean loss here; 1e-5 relative
# keeps a factor 100 above that, while one window counted twice or missed
# moves it by ~1/38 (3e-2).
for lay in "dp:--dp 2 --batch 4" "dpz:--dp 2 --zero 1 --batch 4" "tp:--tp 2 --batch 3" "pp:--pp 2 --micro-batches 3 --batch 3"; do
  name=${lay%%:*}
  # shellcheck disable=SC2086
  $MPI "$T" eval --ckpt "$tmp/imp" --data "$tmp/small.txt" --threads 1 --log "$tmp/$name.json" ${lay#*:} \
    > "$tmp/$name.out" 2>&1 || { fail "eval ${lay#*:} exited: $(tail -2 "$tmp/$name.out")"; continue; }
  $PY - "$tmp/val.json" "$tmp/$name.json" "$name" "${lay#*:}" <<'PYEOF' || fail "eval ${lay#*:} against one process"
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
rel = abs(a["loss"] - b["loss"]) / a["loss"]
ok = rel <= 1e-5 and a["tokens"] == b["tokens"] == 599 and a["bytes"] == b["bytes"] and b[sys.argv[3][:2]] == 2
print("%s eval %s: loss %.9f, one process %.9f, relative difference %.1e (tolerance 1e-5), %d tokens"
      % ("ok  " if ok else "FAIL", sys.argv[4], b["loss"], a["loss"], rel, b["tokens"]))
sys.exit(0 if ok else 1)
PYEOF
done

# --- the checkpoint's precision: bf16 trained, bf16 measured ---------------
# eval without --precision runs in the manifest's precision (the JSON and
# the "eval:" line say which); an explicit --precision wins, with one line.
"$T" train --data "$tmp/small.txt" --layers 2 --heads 2 --embd 16 --seq 16 --batch 4 --steps 2 --warmup 0 \
  --eval-every 0 --threads 1 --precision bf16 --out "$tmp/bf" > "$tmp/bf_train.log" 2>&1 || fail "train bf16: $(tail -2 "$tmp/bf_train.log")"
"$T" eval --ckpt "$tmp/bf" --data "$tmp/small.txt" --threads 1 --batch 4 --max-tokens 200 --log "$tmp/bf.json" > "$tmp/bf.out" 2>&1 \
  || fail "eval bf16: $(tail -2 "$tmp/bf.out")"
"$T" eval --ckpt "$tmp/bf" --data "$tmp/small.txt" --threads 1 --max-tokens 200 --precision fp32 --log "$tmp/bf32.json" \
  > "$tmp/bf32.out" 2>&1 || fail "eval bf16 --precision fp32: $(tail -2 "$tmp/bf32.out")"
grep -q '"precision": "bf16"' "$tmp/bf.json" && ! grep -q -- "--precision" "$tmp/bf.out" \
  && echo "ok   a bf16 checkpoint is evaluated in bf16 without --precision" \
  || fail "a bf16 checkpoint's eval: $(cat "$tmp/bf.json" 2>/dev/null)"
[ "$(grep -c -- "--precision fp32, not the checkpoint's bf16" "$tmp/bf32.out")" -eq 1 ] && grep -q '"precision": "fp32"' "$tmp/bf32.json" \
  && echo "ok   --precision fp32 wins over the checkpoint's bf16, in one line" \
  || fail "--precision fp32 on a bf16 checkpoint: $(grep -- --precision "$tmp/bf32.out")"

# --- a mixture of experts trained with --moe-capacity: no token dropped -----
# Training's capacity keeps ceil(F x tokens x K / E) assignments per expert
# of each micro-batch, so it would tie the loss to --batch; eval routes
# every token (dropless). The same rows in other groupings or layouts then
# differ only by the fp32 reordering of the GEMMs (measured ~1e-9
# relative; dropping at capacity 0.5 moves the loss by ~1e-4), and cp 2 and
# ep 2 are held to the other layouts' 1e-5.
"$T" train --data "$tmp/small.txt" --layers 2 --heads 2 --embd 32 --seq 16 --batch 8 --steps 3 --lr 1e-2 --warmup 0 \
  --eval-every 0 --threads 1 --moe-experts 4 --moe-top-k 2 --moe-capacity 0.5 --out "$tmp/moe" > "$tmp/moe_train.log" 2>&1 \
  || fail "train moe: $(tail -2 "$tmp/moe_train.log")"
mev() { # NAME [launcher...] -- [flags...]
  local name=$1; shift; local run=(); while [ "$1" != "--" ]; do run+=("$1"); shift; done; shift
  "${run[@]}" "$T" eval --ckpt "$tmp/moe" --data "$tmp/small.txt" --threads 1 --log "$tmp/$name.json" "$@" \
    > "$tmp/$name.out" 2>&1 || fail "eval $name exited: $(tail -2 "$tmp/$name.out")"
}
mev moe8 -- --batch 8
mev moe4 -- --batch 4
# shellcheck disable=SC2086
mev moecp $MPI -- --cp 2 --batch 8
# shellcheck disable=SC2086
mev moeep $MPI -- --dp 2 --ep 2 --batch 8
$PY - "$tmp" <<'PYEOF' || fail "a mixture of experts' eval over --batch, --cp and --ep"
import json, sys
d = sys.argv[1]
a = json.load(open(d + "/moe8.json"))
bad = 0
for name, key, tol in (("moe4", "batch", 1e-6), ("moecp", "cp", 1e-5), ("moeep", "ep", 1e-5)):
    b = json.load(open("%s/%s.json" % (d, name)))
    rel = abs(a["loss"] - b["loss"]) / a["loss"]
    ok = rel <= tol and a["tokens"] == b["tokens"] == 599 and b[key] == (4 if key == "batch" else 2)
    bad += not ok
    print("%s moe eval --%s %d: loss %.9f, --batch 8 on one process %.9f, relative difference %.1e (tolerance %g)"
          % ("ok  " if ok else "FAIL", key, b[key], b["loss"], a["loss"], rel, tol))
sys.exit(1 if bad else 0)
PYEOF

# --- eval holds what a forward needs: no gradient, no AdamW moment ---------
# Every eval above logged its rank 0's planned and peak bytes per memory
# category (the allocator's, td_mem_cat): the gradients and the optimizer
# moments are none in each layout and precision, the parameters are there.
$PY - "$tmp" val dp dpz tp pp bf bf32 moe8 moecp moeep <<'PYEOF' || fail "eval's memory: gradients or moments held"
import json, sys
d, bad = sys.argv[1], 0
for name in sys.argv[2:]:
    j = json.load(open("%s/%s.json" % (d, name)))
    held = {k: j[m][k] for m in ("mem_planned", "mem_peak") for k in ("grads", "optimizer")}
    ok = not any(held.values()) and j["mem_planned"]["params"] + j["mem_planned"]["master"] > 0
    bad += not ok
    print("%s eval %-5s: gradients and moments planned %d + %d B, peak %d + %d B; parameters planned %d B"
          % ("ok  " if ok else "FAIL", name, j["mem_planned"]["grads"], j["mem_planned"]["optimizer"],
             j["mem_peak"]["grads"], j["mem_peak"]["optimizer"], j["mem_planned"]["params"]))
sys.exit(1 if bad else 0)
PYEOF
# A forward keeps no block's activations past its end: eval's planned
# activations (the "memory per rank (plan)" table) are below training's for
# the same model and --batch 4 (the bf16 run above).
$PY - "$tmp/bf_train.log" "$tmp/bf.out" <<'PYEOF' || fail "eval's planned activations against training's"
import re, sys
def acts(path):  # the plan table's rank 0 row, its activations column (eval has no grads or optimizer column)
    lines = open(path).read().splitlines()
    i = [i for i, l in enumerate(lines) if l.startswith("memory per rank (plan)")][0]
    col = lines[i + 1].split()[1:].index("activations")
    cells = re.findall(r"([\d.]+) (B|KiB|MiB|GiB)", lines[i + 2])
    return float(cells[col][0]) * {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}[cells[col][1]]
t, e = acts(sys.argv[1]), acts(sys.argv[2])
print("%s planned activations at --batch 4: eval %.0f B, train %.0f B" % ("ok  " if e < t else "FAIL", e, t))
sys.exit(0 if e < t else 1)
PYEOF

# ... nor any activation gradient: eval's planned activations are training's
# with --recompute block (the same saved tensors) less the backward's scratch
# (model.h td_gpt_scratch: dres, dln, datty, dqkv, dfch, dfchg, dlosses;
# under bf16 also dln_local, dln_lp and dlogits_lp; the fp32 rows "full" of
# a row-parallel output stay, a forward reads them), to the byte, in fp32
# (bf32: --batch 8) and bf16 (bf: --batch 4); and every eval above holds
# exactly what it planned of activations and communication buffers (cp's
# ring keeps its blocks itself: there is no MLP backward scratch to lend).
for pb in "fp32:8" "bf16:4"; do
  "$T" train --data "$tmp/small.txt" --layers 2 --heads 2 --embd 16 --seq 16 --batch "${pb#*:}" --steps 1 --warmup 0 \
    --eval-every 0 --threads 1 --precision "${pb%%:*}" --recompute block --log "$tmp/rc_${pb%%:*}.jsonl" \
    > "$tmp/rc_${pb%%:*}.out" 2>&1 || fail "train --recompute block ${pb%%:*}: $(tail -2 "$tmp/rc_${pb%%:*}.out")"
done
$PY - "$tmp" val dp dpz tp pp bf bf32 moe8 moecp moeep <<'PYEOF' || fail "eval's activations: gradient buffers held"
import json, re, sys
d, bad = sys.argv[1], 0
for name, prec, B in (("bf32", "fp32", 8), ("bf", "bf16", 4)):
    start = json.loads(open("%s/rc_%s.jsonl" % (d, prec)).readline())
    Vl = int(re.search(r"\(padded (\d+)\)", open("%s/rc_%s.out" % (d, prec)).read()).group(1))
    C, N, es, lp = start["embd"], B * start["seq"], 2 if prec == "bf16" else 4, prec == "bf16"
    # dres, dln, datty, dqkv [N,3C], dfch and dfchg [N,4C], dlosses
    grads = es * N * C + 4 * N * C + es * N * C + es * N * 3 * C + 2 * es * N * 4 * C + 4 * N
    if lp:
        grads += 4 * N * C + es * N * C + es * N * Vl  # dln_local, dln_lp, dlogits_lp
    train = start["memory_plan"][0]["activations"]
    ev = json.load(open("%s/%s.json" % (d, name)))["mem_planned"]["activations"]
    ok = ev == train - grads
    bad += not ok
    print("%s eval %-4s %s --batch %d: planned activations %d B = train --recompute block's %d B less the "
          "backward's scratch %d B (%+d)" % ("ok  " if ok else "FAIL", name, prec, B, ev, train, grads, ev - (train - grads)))
off = 0
for name in sys.argv[2:]:
    j = json.load(open("%s/%s.json" % (d, name)))
    for c in ("activations", "comm"):
        if j["mem_planned"][c] != j["mem_peak"][c]:
            off += 1
            print("FAIL eval %s: %s planned %d B, peak %d B" % (name, c, j["mem_planned"][c], j["mem_peak"][c]))
print("%s every eval's activations and comm buffers: peak == plan" % ("ok  " if not off else "FAIL"))
bad += off
sys.exit(1 if bad else 0)
PYEOF

# eval's start-up report says what eval holds: forwards only, no AdamW,
# gradient or moment line, no grads or optimizer column in its memory table.
for name in val bf dp; do
  if grep -q "^forwards only: no optimizer" "$tmp/$name.out" && ! grep -Eq "AdamW|optimizer moments|gradient (accum|reduction)" "$tmp/$name.out" \
     && grep -A1 "^memory per rank (plan)" "$tmp/$name.out" | tail -1 | grep -q " activations " \
     && ! grep -A1 "^memory per rank (plan)" "$tmp/$name.out" | tail -1 | grep -Eq " grads | optimizer "; then
    echo "ok   eval $name's report: forwards only, no optimizer, gradients or moments"
  else fail "eval $name's report: $(grep -E "AdamW|optimizer|gradient|forwards only" "$tmp/$name.out" | head -3)"; fi
done

# --- a token file: no text, so no bits per byte ------------------------------
$PY -c "
import numpy as np
np.random.seed(5); np.random.randint(0, 40, 3000).astype('<u2').tofile('$tmp/tok.bin')"
"$T" train --data "$tmp/tok.bin" --layers 1 --heads 2 --embd 16 --seq 16 --batch 4 --steps 2 --eval-every 0 \
  --threads 1 --out "$tmp/tk" > "$tmp/tk_train.log" 2>&1 || fail "train on a token file: $(tail -2 "$tmp/tk_train.log")"
"$T" eval --ckpt "$tmp/tk" --data "$tmp/tok.bin" --threads 1 --log "$tmp/tk.json" > "$tmp/tk.out" 2>&1 || fail "eval tok.bin"
$PY - "$tmp/tk.json" <<'PYEOF' && grep -q "bits per byte unknown" "$tmp/tk.out" || fail "eval of a token file: $(tail -1 "$tmp/tk.out")"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["tokens"] == 300 - 1 and j["windows"] == 19 and j["bytes"] is None and j["bits_per_byte"] is None, j
print("ok   token file: %d val tokens predicted (300 - 1), bits per byte unknown" % j["tokens"])
PYEOF

# --- refusals: one line naming the flag, non-zero exit ----------------------
refuse() { # WHAT PATTERN cmd...
  local what=$1 pat=$2; shift 2
  local err; err=$("$@" 2>&1 >/dev/null); local rc=$?
  if [ $rc -ne 0 ] && [ "$(printf '%s\n' "$err" | grep -c .)" -eq 1 ] && printf '%s' "$err" | grep -q -- "$pat"; then
    echo "ok   refused: $what"
  else fail "refusal $what: rc $rc, '$err'"; fi
}
refuse "--split bad" "--split 'test' is not a split" "$T" eval --ckpt "$tmp/imp" --data "$tmp/small.txt" --split test
refuse "no --ckpt" "--ckpt DIR is required" "$T" eval --data "$tmp/small.txt"
refuse "--max-tokens 0" "--max-tokens" "$T" eval --ckpt "$tmp/imp" --data "$tmp/small.txt" --max-tokens 0
refuse "a training flag" "--lr" "$T" eval --ckpt "$tmp/imp" --data "$tmp/small.txt" --lr 1
printf 'xyz\n' > "$tmp/other.txt"; for i in $(seq 40); do printf 'abcdefgh\n' >> "$tmp/other.txt"; done
refuse "a text file for a token model" "is a model of token ids" "$T" eval --ckpt "$tmp/tk" --data "$tmp/small.txt"
refuse "another character set" "distinct characters" "$T" eval --ckpt "$tmp/imp" --data "$tmp/other.txt"
[ $fails -eq 0 ] && echo "PASS test_eval" || { echo "$fails failure(s)"; exit 1; }
