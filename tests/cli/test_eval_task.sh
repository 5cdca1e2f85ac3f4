#!/usr/bin/env bash
# trident eval --task: multiple-choice scoring in HellaSwag's JSONL schema
# against a scorer written here. A tiny character-level model is trained on
# sentences whose continuations are fixed ("ann likes red apples."); the
# test writes a task whose right ending is the one the text contains (some
# contexts long enough to be cut from the left). task_ref.py parses the
# exported safetensors by hand, tokenizes as llm.c's hellaswag.py renders an
# example (ctx, then " " + ending; the sorted distinct characters), cuts
# from the left itself, runs tests/ref/gpt_ref.py's GPT in float64, masks
# all but the ending's targets and takes the argmin of the summed and of the
# mean loss: every ending's summed loss agrees to 1e-5 relative, every
# prediction, count and accuracy exactly, and the trained model is right on
# every example. data/hellaswag_sample.jsonl (the schema, written here) is
# scored and checked the same way. Then pp 2 x cp 2 (4 ranks) in fp32 and
# dp 2 in bf16 give the one process's predictions and losses, --device
# guard the cpu's bits, and bad task files are one error line naming the
# file, the line and the field. The pp x cp and guard runs give no --data:
# the tokenizer is the checkpoint's (its characters), the result the same;
# a model of token ids (no tokenizer) is refused.
# Usage: test_eval_task.sh TRIDENT DATA_DIR
set -u
T=${1:?usage: test_eval_task.sh TRIDENT DATA_DIR}
DATA=${2:?}
HERE=$(cd "$(dirname "$0")" && pwd)
PY=/usr/bin/python3
MPI="mpirun --allow-run-as-root --oversubscribe"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL $*"; fails=$((fails+1)); }
SAMPLE="$DATA/hellaswag_sample.jsonl"

# The text (each subject's sentence always the same), with one line of the
# sample file's characters so that the model's vocabulary covers them, and
# the task: ctx one sentence and a subject (three sentences for half of
# them: those are cut to T + 1 = 65 tokens), endings the right rest and
# three others.
$PY - "$tmp" "$SAMPLE" <<'PYEOF' || exit 1
import json, random, sys
d, sample = sys.argv[1], sys.argv[2]
subj = ["ann", "bob", "cy", "dee", "eve", "fay", "gus", "hal", "ivy", "jo", "kim", "lu"]
rest = ["likes red apples", "eats green pears", "sees blue birds", "has two cats", "reads old books",
        "wants hot soup", "hums sad songs", "digs deep holes", "buys warm socks", "paints tall trees",
        "loves cold milk", "rides fast bikes"]
rng = random.Random(1)
words = [subj[i] + " " + rest[i] + "." for i in (rng.randrange(12) for _ in range(400))]
chars = sorted(set("".join(json.loads(l)["ctx"] + " " + " ".join(json.loads(l)["endings"]) for l in open(sample))))
open(d + "/text.txt", "w").write(" ".join(words) + "\n" + "".join(c for c in chars if c != "\n") + "\n")
with open(d + "/task.jsonl", "w") as f:
    for k in range(12):
        others = rng.sample([j for j in range(12) if j != k], 3)
        label = rng.randrange(4)
        cand = others[:label] + [k] + others[label:]
        a = " ".join(subj[j % 12] + " " + rest[j % 12] + "." for j in range(k + 5, k + (8 if k % 2 else 6)))
        f.write(json.dumps({"ind": k, "activity_label": "Made up", "ctx_a": a, "ctx_b": subj[k],
                            "ctx": (a + " " + subj[k]).strip(), "split": "val", "split_type": "indomain",
                            "label": label, "endings": [rest[j] + "." for j in cand], "source_id": "test~%d" % k}) + "\n")
PYEOF
"$T" train --data "$tmp/text.txt" --layers 2 --heads 2 --embd 32 --seq 64 --batch 8 --steps 250 --lr 1e-2 --warmup 0 \
  --eval-every 0 --threads 1 --out "$tmp/ck" > "$tmp/train.log" 2>&1 || { tail -5 "$tmp/train.log"; exit 1; }
mkdir "$tmp/hf"
"$T" export --ckpt "$tmp/ck" --format safetensors --out "$tmp/hf/model.safetensors" >/dev/null || { echo "FAIL export"; exit 1; }

# ev NAME TASK [launcher...] -- [flags...]: its --log in NAME.json, its --task-out in NAME.jsonl;
# with the training text as --data unless D=() is set
D=(--data "$tmp/text.txt")
ev() {
  local name=$1 task=$2; shift 2; local run=(); while [ "$1" != "--" ]; do run+=("$1"); shift; done; shift
  "${run[@]}" "$T" eval --ckpt "$tmp/ck" "${D[@]}" --task "$task" --threads 1 --log "$tmp/$name.json" \
    --task-out "$tmp/$name.jsonl" "$@" > "$tmp/$name.out" 2>&1 || fail "eval $name exited: $(tail -2 "$tmp/$name.out")"
}
ev one "$tmp/task.jsonl" -- --batch 8             # 48 candidates: 6 forwards
ev sample "$SAMPLE" -- --batch 12                 # 32 candidates: 3 forwards, the last with 4 empty rows

cat > "$tmp/task_ref.py" <<'PYEOF'
import json, struct, sys
import torch
import torch.nn.functional as F
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
    b, e = info["data_offsets"]
    t = torch.frombuffer(bytearray(raw[8 + n + b:8 + n + e]), dtype=torch.float32).reshape(info["shape"])
    conv1d = name.endswith(("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight"))
    state["transformer." + name] = t.t() if conv1d else t  # HF Conv1D [in, out] -> nn.Linear [out, in]
model = GPT(L, H, C, T, V)
model.load_state_dict(state, strict=True)
model = model.double().eval()
chars = sorted(set(open(text_path, encoding="utf-8").read()))
assert len(chars) == V, (len(chars), V)
enc = lambda s: [chars.index(c) for c in s]
bad = 0
for arg in sys.argv[5:]:  # TASK:RUN:MIN_ACC
    task, run, min_acc = arg.split(":")
    got = [json.loads(l) for l in open(run + ".jsonl")]
    log = json.load(open(run + ".json"))
    ex = [json.loads(l) for l in open(task) if l.strip()]
    right = right_norm = cut = 0
    worst = 0.0
    with torch.no_grad():
        for x, g in zip(ex, got):
            ctx = enc(x["ctx"])
            sums, means, counts = [], [], []
            for end in x["endings"]:
                e = enc(" " + end)
                seq = ctx + e
                mask = [0] * len(ctx) + [1] * len(e)
                if len(seq) > T + 1:  # the oldest context tokens go
                    seq, mask = seq[len(seq) - T - 1:], mask[len(seq) - T - 1:]
                    cut += 1
                tok = torch.tensor(seq).view(1, -1)
                losses = F.cross_entropy(model.logits(tok[:, :-1])[0], tok[0, 1:], reduction="none")
                m = torch.tensor(mask[1:], dtype=torch.float64)  # target j is token j + 1
                sums.append(float((losses * m).sum()))
                counts.append(int(m.sum()))
                means.append(sums[-1] / counts[-1])
            pred, pred_norm = min(range(len(sums)), key=lambda i: (sums[i], i)), min(range(len(means)), key=lambda i: (means[i], i))
            right += pred == x["label"]
            right_norm += pred_norm == x["label"]
            rel = max(abs(a - b) / abs(b) for a, b in zip(g["loss_sum"], sums))
            worst = max(worst, rel)
            ok = rel <= 1e-5 and g["tokens"] == counts and (g["pred"], g["pred_norm"], g["label"]) == (pred, pred_norm, x["label"])
            if not ok:
                bad += 1
                print("FAIL %s line %d: trident %s pred %d/%d, torch %s %s pred %d/%d" % (task, g["line"], g["loss_sum"],
                      g["pred"], g["pred_norm"], sums, counts, pred, pred_norm))
    n = len(ex)
    ok = (log["examples"], log["correct"], log["correct_norm"], log["truncated"]) == (n, right, right_norm, cut) \
        and log["acc"] == right / n and log["acc_norm"] == right_norm / n and right >= float(min_acc) * n
    bad += not ok
    print("%s %s: %d examples, acc %d/%d, acc_norm %d/%d (torch %d, %d), %d candidates cut, %d forwards; "
          "largest relative difference of a summed loss %.1e (tolerance 1e-5)" % ("ok  " if ok else "FAIL",
          task.split("/")[-1], log["examples"], log["correct"], n, log["correct_norm"], n, right, right_norm,
          log["truncated"], log["forwards"], worst))
sys.exit(1 if bad else 0)
PYEOF
$PY "$tmp/task_ref.py" "$HERE/../ref" "$tmp/hf/model.safetensors" "$tmp/hf/config.json" "$tmp/text.txt" \
  "$tmp/task.jsonl:$tmp/one:1" "$SAMPLE:$tmp/sample:0" || fail "trident eval --task against the PyTorch scorer"
grep -q "12 examples | acc 1.0000 (12 right" "$tmp/one.out" || fail "eval --task's result line: $(tail -1 "$tmp/one.out")"

# --- other layouts: the same candidates, the same predictions ---------------
# fp32: pp 2 x cp 2 reads each row's loss from the last stage's two chunks
# per cp rank; it reorders fp32 sums only (test_eval.sh: 1e-5 relative).
# bf16: dp 2 against one bf16 process; the rows of a forward split between
# the replicas, each row's arithmetic is the single process's (measured:
# equal), and 1e-5 still holds a dropped or doubled token ~1e-2 away.
ev bf "$tmp/task.jsonl" -- --batch 8 --precision bf16
D=() # no --data: the checkpoint's tokenizer
# shellcheck disable=SC2086
ev ppcp "$tmp/task.jsonl" $MPI -np 4 -- --batch 8 --pp 2 --cp 2 --micro-batches 2
D=(--data "$tmp/text.txt")
# shellcheck disable=SC2086
ev bfdp "$tmp/task.jsonl" $MPI -np 2 -- --batch 8 --dp 2 --precision bf16
$PY - "$tmp" <<'PYEOF' || fail "eval --task in other layouts against one process"
import json, sys
d, bad = sys.argv[1], 0
for name, ref, want in (("ppcp", "one", {"pp": 2, "cp": 2, "precision": "fp32"}), ("bfdp", "bf", {"dp": 2, "precision": "bf16"})):
    a = [json.loads(l) for l in open("%s/%s.jsonl" % (d, ref))]
    b = [json.loads(l) for l in open("%s/%s.jsonl" % (d, name))]
    la, lb = json.load(open("%s/%s.json" % (d, ref))), json.load(open("%s/%s.json" % (d, name)))
    rel = max(abs(x - y) / abs(x) for p, q in zip(a, b) for x, y in zip(p["loss_sum"], q["loss_sum"]))
    same = len(a) == len(b) == 12 and all((p["pred"], p["pred_norm"], p["tokens"]) == (q["pred"], q["pred_norm"], q["tokens"]) for p, q in zip(a, b))
    ok = same and rel <= 1e-5 and all(lb[k] == v for k, v in want.items()) and la["precision"] == lb["precision"] \
        and (la["correct"], la["correct_norm"]) == (lb["correct"], lb["correct_norm"])
    bad += not ok
    print("%s eval --task %s: predictions %s, acc %d acc_norm %d, largest relative difference of a summed loss %.1e "
          "(tolerance 1e-5)" % ("ok  " if ok else "FAIL", " ".join("%s %s" % kv for kv in want.items()),
          "the same" if same else "DIFFER", lb["correct"], lb["correct_norm"], rel))
sys.exit(1 if bad else 0)
PYEOF

# --device guard: the per-row losses come down by a named copy (a host
# access to a step tensor would end the run), the same bits as cpu.
D=() # no --data here either
ev guard "$tmp/task.jsonl" -- --batch 8 --device guard
D=(--data "$tmp/text.txt")
grep -q "data: no data (the char tokenizer of the checkpoint, vocab" "$tmp/guard.out" ||
  fail "eval --task without --data: no 'data: no data' line"
cmp -s "$tmp/one.jsonl" "$tmp/guard.jsonl" && echo "ok   eval --task --device guard: the bits of --device cpu" \
  || fail "eval --task --device guard differs from cpu"

# --- refusals: one line naming the file, the line and the field -------------
refuse() { # WHAT PATTERN cmd...
  local what=$1 pat=$2; shift 2
  local err; err=$("$@" 2>&1 >/dev/null); local rc=$?
  if [ $rc -ne 0 ] && [ "$(printf '%s\n' "$err" | grep -c .)" -eq 1 ] && printf '%s' "$err" | grep -q -- "$pat"; then
    echo "ok   refused: $what"
  else fail "refusal $what: rc $rc, '$err'"; fi
}
bad() { # NAME LINE2: the task's first line, then LINE2
  head -1 "$tmp/task.jsonl" > "$tmp/$1.jsonl"; printf '%s\n' "$2" >> "$tmp/$1.jsonl"
}
bad nolabel '{"ctx": "ann", "endings": ["likes red apples.", "has two cats."]}'
bad badjson '{"ctx": "ann", "endings": ["likes red apples."'
bad char '{"ctx": "ann", "endings": ["likes red apples.", "has two #cats."], "label": 0}'
bad range '{"ctx": "ann", "endings": ["likes red apples.", "has two cats."], "label": 2}'
ET=("$T" eval --ckpt "$tmp/ck" --data "$tmp/text.txt")
refuse "no label" "nolabel.jsonl line 2: field label: missing" "${ET[@]}" --task "$tmp/nolabel.jsonl"
refuse "not JSON" "badjson.jsonl line 2: not JSON" "${ET[@]}" --task "$tmp/badjson.jsonl"
refuse "a character the model lacks" "char.jsonl line 2: field endings\[1\]" "${ET[@]}" --task "$tmp/char.jsonl"
refuse "label out of range" "range.jsonl line 2: field label: 2 is not in \[0, 2)" "${ET[@]}" --task "$tmp/range.jsonl"
refuse "--task-out without --task" "--task-out .* needs --task" "${ET[@]}" --task-out "$tmp/x.jsonl"
refuse "--split with --task" "--split scores --data's split" "${ET[@]}" --task "$tmp/task.jsonl" --split train
refuse "neither --data nor --task" "--data PATH is required .*or --task" "$T" eval --ckpt "$tmp/ck"
"$T" train --data synthetic:40 --layers 1 --heads 1 --embd 8 --seq 8 --batch 2 --steps 1 --eval-every 0 --threads 1 \
  --out "$tmp/ids" >/dev/null 2>&1 || fail "train a model of token ids"
refuse "a model of token ids, no --data" "the checkpoint is a model of token ids" "$T" eval --ckpt "$tmp/ids" \
  --task "$tmp/task.jsonl"
[ $fails -eq 0 ] && echo "PASS test_eval_task" || { echo "$fails failure(s)"; exit 1; }
