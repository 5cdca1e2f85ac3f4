#!/usr/bin/env bash
# Megatron-LM indexed datasets and llm.c's uint32 token files against
# mega.py below, a reader and writer of both written from their definitions
# (Megatron-LM's megatron/core/datasets/indexed_dataset.py _IndexWriter:
# b"MMIDIDX\0\0", <Q version 1, <B dtype code, <Q sequences, <Q document-
# index entries, int32 lengths, int64 byte pointers, int64 document index;
# llm.c's dev/data/data_common.py: 256 int32 of magic, version, count, then
# uint16 (20240520, 1) or uint32 (20240801, 7) tokens), sharing no code with
# trident:
#  1. The same random documents as llm.c uint16 (the reference), Megatron
#     uint16, Megatron int32 and llm.c uint32, and ids up to 100276 (cl100k's
#     vocabulary) as Megatron int32 and llm.c uint32: trident's loader
#     (token_file_tool read, no MPI) gives exactly mega.py's token stream,
#     also from a Megatron dataset named by its prefix.
#  2. The writer's files (token_file_tool write) at vocabularies 300,
#     100277 and 200019 read back field by field in mega.py.
#  3. `trident tokenize --format megatron`: every .idx field checked, one
#     sequence per document piece (each starting where <|endoftext|> does),
#     the stream equal to --format llmc's, data.json's sizes and XXH3s
#     recomputed.
#  4. End to end: llm.c uint16, Megatron uint16 and int32 train to the same
#     loss, grad norm and val loss bits, `trident eval` of one checkpoint
#     gives the same numbers on llm.c uint16 and Megatron int32, the
#     Megatron int32 ids up to 100276 train with --vocab 100277, and the
#     tokenized Megatron shard set trains.
#  5. Each bad file is one `trident: error:` line naming it and the fault
#     (through the loader without MPI; one through train).
# Usage: test_indexed_data.sh TRIDENT TOKEN_FILE_TOOL DATA_DIR
set -u
T=${1:?usage: test_indexed_data.sh TRIDENT TOKEN_FILE_TOOL DATA_DIR}
W=${2:?}
DATA=${3:?}
PY=/usr/bin/python3
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL $*"; fails=$((fails+1)); }
# Most of a short trident run is MPI's start-up, spent waiting, so the
# trident runs go together: bg NAME CMD... runs CMD in the background, its
# output in $tmp/NAME.out and exit status in $tmp/NAME.rc.
# Each in its own Open MPI session tree: isolated singletons (scripts/test.sh)
# all take job family 0, and one exiting removes the shared tree while
# another creates its directory there ("orte_session_dir failed").
bg() {
  local name=$1; shift
  (export OMPI_MCA_orte_tmpdir_base="$tmp/ompi-$name"; mkdir -p "$OMPI_MCA_orte_tmpdir_base"
   "$@" > "$tmp/$name.out" 2>&1; echo $? > "$tmp/$name.rc") &
}
ran() { [ "$(cat "$tmp/$1.rc")" = 0 ] || { fail "$1 (exit $(cat "$tmp/$1.rc")):"; tail -3 "$tmp/$1.out"; return 1; }; }

cat > "$tmp/mega.py" <<'PY'
import json, os, random, struct, sys
if sys.argv[1] == "same":  # the step and val lines of JSON logs, bit for bit (no numpy: a quick start)
    def rows(p): return [(r.get("step"), r.get("loss"), r.get("grad_norm"), r.get("val_loss"))
                         for r in map(json.loads, open(p)) if "loss" in r or "val_loss" in r]
    ref = rows(sys.argv[2]); assert ref, "no loss lines in " + sys.argv[2]
    for p in sys.argv[3:]: assert rows(p) == ref, (p, rows(p), ref)
    sys.exit(0)
import numpy as np

MAGIC = b"MMIDIDX\x00\x00"
DTYPES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64, 7: np.float32, 8: np.uint16}
CODE = {np.uint16: 8, np.int32: 4}

def write_megatron(prefix, docs, dtype, code=None, version=1, pointers=None, doc_index=None):
    """docs: lists of ids, one sequence and one document each (as
    preprocess_data.py without sentence splitting writes them)."""
    lengths = [len(d) for d in docs]
    item = np.dtype(dtype).itemsize
    ptr = pointers if pointers is not None else [sum(lengths[:i]) * item for i in range(len(docs))]
    with open(prefix + ".idx", "wb") as f:
        f.write(MAGIC + struct.pack("<Q", version) + struct.pack("<B", code or CODE[dtype]))
        f.write(struct.pack("<Q", len(docs)) + struct.pack("<Q", len(doc_index) if doc_index is not None else len(docs) + 1))
        f.write(np.array(lengths, np.int32).tobytes() + np.array(ptr, np.int64).tobytes())
        f.write(np.array(doc_index if doc_index is not None else range(len(docs) + 1), np.int64).tobytes())
    with open(prefix + ".bin", "wb") as f:
        for d in docs: f.write(np.array(d, dtype).tobytes())

def read_megatron(prefix):
    """Every field of the .idx, checked against the .bin; returns the
    dtype code, lengths, document index and the concatenated tokens."""
    b = open(prefix + ".idx", "rb").read()
    assert b[:9] == MAGIC, b[:9]
    version, = struct.unpack_from("<Q", b, 9); assert version == 1, version
    code = b[17]; item = np.dtype(DTYPES[code]).itemsize
    S, D = struct.unpack_from("<QQ", b, 18)
    assert len(b) == 34 + 12 * S + 8 * D, (len(b), S, D)
    lengths = np.frombuffer(b, np.int32, S, 34)
    ptr = np.frombuffer(b, np.int64, S, 34 + 4 * S)
    doc = np.frombuffer(b, np.int64, D, 34 + 12 * S)
    want_ptr = np.concatenate([[0], np.cumsum(lengths.astype(np.int64))[:-1] * item]) if S else ptr
    assert (ptr == want_ptr).all(), "pointers"
    binb = open(prefix + ".bin", "rb").read()
    assert len(binb) == int(lengths.sum()) * item, (len(binb), int(lengths.sum()), item)
    assert doc[0] == 0 and (np.diff(doc) >= 0).all() and doc[-1] <= S, doc
    return code, lengths, doc, np.frombuffer(binb, DTYPES[code])

def write_llmc(path, toks, u32):
    hdr = [20240801, 7, len(toks)] if u32 else [20240520, 1, len(toks)]
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *(hdr + [0] * 253)))
        f.write(np.array(toks, np.uint32 if u32 else np.uint16).tobytes())

def read_llmc(path):
    b = open(path, "rb").read()
    magic, version, n = struct.unpack_from("<3i", b, 0)
    width = {(20240520, 1): 2, (20240801, 7): 4}[(magic, version)]
    assert len(b) == 1024 + width * n, (len(b), n, width)
    return width, np.frombuffer(b, np.uint16 if width == 2 else np.uint32, n, 1024)

def docs_of(rng, n, vocab, top=None):
    """Random documents of 1..400 ids summing to n (top: forced into the last)."""
    out, left = [], n
    while left:
        k = min(left, rng.randrange(1, 401))
        out.append([rng.randrange(vocab) for _ in range(k)]); left -= k
    if top is not None: out[-1][-1] = top
    return out

def flat(docs): return [t for d in docs for t in d]

cmd = sys.argv[1]
if cmd == "make":  # the same documents in every format
    d = sys.argv[2]; rng = random.Random(7); want = {"tiny": [], "big": []}
    for split, n in (("train", 20000), ("val", 3000)):
        docs = docs_of(rng, n, 300)
        for sub in ("llmc16", "mega16", "mega32", "llmc32"): os.makedirs(f"{d}/{sub}", exist_ok=True)
        write_llmc(f"{d}/llmc16/tiny_{split}.bin", flat(docs), False)
        write_megatron(f"{d}/mega16/tiny_{split}", docs, np.uint16)
        write_megatron(f"{d}/mega32/tiny_{split}", docs, np.int32)
        write_llmc(f"{d}/llmc32/tiny_{split}.bin", flat(docs), True)
        big = docs_of(rng, n, 100277, top=100276)
        for sub in ("big32", "bigl"): os.makedirs(f"{d}/{sub}", exist_ok=True)
        write_megatron(f"{d}/big32/big_{split}", big, np.int32)
        write_llmc(f"{d}/bigl/big_{split}.bin", flat(big), True)
        want["tiny"] += flat(docs); want["big"] += flat(big)
    for k, v in want.items(): np.array(v, np.int32).tofile(f"{d}/want_{k}.i32")
elif cmd == "stream":  # what token_file_tool read wrote, against the expected stream: GOT WANT pairs
    for g, w in zip(sys.argv[2::2], sys.argv[3::2]):
        got, want = np.fromfile(g, np.int32), np.fromfile(w, np.int32)
        ok = len(got) == len(want) and (got == want).all()
        print(f"{'ok  ' if ok else 'FAIL'} {os.path.basename(g)}: the loader's train + val stream "
              f"{'=' if ok else '!='} mega.py's ({len(got)} vs {len(want)} tokens)")
elif cmd == "writer":  # token_file_tool write's files: FORMAT VOCAB N PATH quadruples
    for at in range(2, len(sys.argv), 4):
        fmt, vocab, n, path = sys.argv[at], int(sys.argv[at + 1]), int(sys.argv[at + 2]), sys.argv[at + 3]
        want = [i * 7919 % vocab for i in range(n)]; want[-1] = vocab - 1
        width = 2 if vocab <= 65536 else 4
        if fmt == "llmc":
            w, toks = read_llmc(path); assert w == width, (w, width)
        else:
            code, lengths, doc, toks = read_megatron(path[:-4])
            assert code == (8 if width == 2 else 4), code
            assert list(lengths) == [min(1000, n - s) for s in range(0, n, 1000)], list(lengths)
            assert list(doc) == list(range(len(lengths) + 1)), list(doc)
        assert [int(t) for t in toks] == want, "tokens differ"
        print(f"ok   writer: {fmt}, vocabulary {vocab}, {n} tokens read back field by field")
elif cmd == "tokenized":  # tokenize's llmc dir vs its megatron dir
    import xxhash
    ld, md = sys.argv[2], sys.argv[3]
    lm, mm = json.load(open(f"{ld}/data.json")), json.load(open(f"{md}/data.json"))
    assert lm["shard_format"] == "llmc" and mm["shard_format"] == "megatron", (lm, mm)
    assert [s["name"] for s in lm["shards"]] == [s["name"] for s in mm["shards"]]
    seqs = 0
    for ls, ms in zip(lm["shards"], mm["shards"]):
        w, ref = read_llmc(f"{ld}/{ls['name']}"); assert w == 2
        code, lengths, doc, toks = read_megatron(f"{md}/{ms['name'][:-4]}")
        assert code == 8 and (toks == ref).all(), ms["name"]
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        eot = [0] + [int(i) for i in np.nonzero(toks == 50256)[0] if i > 0]
        assert list(starts) == eot, (ms["name"], list(starts), eot)  # a sequence per document piece
        assert list(doc) == list(range(len(lengths) + 1)), list(doc)
        binb = open(f"{md}/{ms['name']}", "rb").read()
        assert ms["size"] == len(binb) == 2 * ms["tokens"] and ms["xxh3"] == xxhash.xxh3_64_hexdigest(binb), ms
        seqs += len(lengths)
    print(f"{len(mm['shards'])} shards, {seqs} sequences")
elif cmd == "bad":  # damaged copies of the mega16 / mega32 sets
    d = sys.argv[2]; rng = random.Random(3)
    docs = docs_of(rng, 3000, 300)
    def case(name, **kw):
        os.makedirs(f"{d}/{name}"); write_megatron(f"{d}/{name}/x_train", docs, kw.pop("dtype", np.uint16), **kw)
    case("magic"); p = f"{d}/magic/x_train.idx"; b = bytearray(open(p, "rb").read()); b[0:7] = b"NOTIDX!"; open(p, "wb").write(b)
    case("version", version=2)
    case("dtype9", code=9)
    case("float32", dtype=np.float32, code=7)
    lengths = [len(x) for x in docs]; ptr = [sum(lengths[:i]) * 2 for i in range(len(docs))]; ptr[3] += 2
    case("pointer", pointers=ptr)
    case("binlong"); open(f"{d}/binlong/x_train.bin", "ab").write(b"\x01\x00")
    case("docindex", doc_index=[0, 2, 1] + list(range(3, len(docs) + 1)))
    case("multimodal"); open(f"{d}/multimodal/x_train.idx", "ab").write(bytes(len(docs)))
    case("truncidx"); p = f"{d}/truncidx/x_train.idx"; b = open(p, "rb").read(); open(p, "wb").write(b[:-8])
    docs[2][5] = 5000; case("beyond", dtype=np.int32)            # the id at index len(docs[0]) + len(docs[1]) + 5
    docs[2][5] = -7; case("negative", dtype=np.int32); docs[2][5] = 5
    os.makedirs(f"{d}/l32v1"); write_llmc(f"{d}/l32v1/x_train.bin", flat(docs), True)
    p = f"{d}/l32v1/x_train.bin"; b = bytearray(open(p, "rb").read()); b[4:8] = struct.pack("<i", 1); open(p, "wb").write(b)
    print(len(docs[0]) + len(docs[1]) + 5)
PY

tiny="--layers 2 --embd 32 --heads 2 --seq 16 --batch 4 --steps 3 --eval-every 3 --eval-iters 2 --threads 1"
big="--layers 2 --embd 16 --heads 2 --seq 16 --batch 2 --steps 2 --eval-every 2 --eval-iters 1 --threads 1"
$PY "$tmp/mega.py" make "$tmp" || { echo "FAIL mega.py make"; exit 1; }
head -c 30000 "$DATA/tinyshakespeare.txt" > "$tmp/a.txt"; tail -c 20000 "$DATA/tinyshakespeare.txt" > "$tmp/b.txt"
tok() { "$T" tokenize --tokenizer gpt2 "$tmp/a.txt" "$tmp/b.txt" --out "$tmp/$1" --shard-tokens 4000 --threads 1 "${@:2}"; }
tok tl >/dev/null && tok tm --format megatron >/dev/null || fail "tokenize"

# 4 starts first (in the background): the MPI runs
for f in llmc16 mega16 mega32; do
  bg "$f" "$T" train --data "$tmp/$f/tiny_train.bin" --vocab 512 $tiny --log "$tmp/$f.jsonl" --out "$tmp/ck_$f"
done
bg big32 "$T" train --data "$tmp/big32/big_train.bin" --vocab 100277 $big --log "$tmp/big32.jsonl"
bg tm "$T" train --data "$tmp/tm" $tiny --log "$tmp/tm.jsonl"
bg bad_uint16-train "$T" train --data "$tmp/mega16/tiny_train.bin" --vocab 100277 $tiny

# 1. the loader's stream, format by format
pairs=()
for f in llmc16 mega16 mega32 llmc32 big32 bigl; do
  case $f in big*) set -- big 100277;; *) set -- tiny 512;; esac
  "$W" read "$tmp/$f/$1_train.bin" "$2" "$tmp/$f.i32" > "$tmp/read_$f.out" 2>&1 || { fail "read $f"; head -3 "$tmp/read_$f.out"; }
  pairs+=("$tmp/$f.i32" "$tmp/want_$1.i32")
done
# Megatron's own way to name a dataset: its prefix
"$W" read "$tmp/mega32/tiny_train" 512 "$tmp/mega32_prefix.i32" > "$tmp/read_prefix.out" 2>&1 || fail "read a prefix"
pairs+=("$tmp/mega32_prefix.i32" "$tmp/want_tiny.i32")
r=$($PY "$tmp/mega.py" stream "${pairs[@]}") || fail "mega.py stream"
echo "$r"; grep -q FAIL <<<"$r" && fail "streams"

# 2. the writer
specs=()
for spec in "llmc 100277 2500" "megatron 100277 2500" "megatron 200019 1500" "megatron 300 2100" "llmc 300 10"; do
  set -- $spec
  "$W" write "$1" "$2" "$3" "$tmp/w_$1_$2.bin" || fail "write $spec"
  specs+=("$1" "$2" "$3" "$tmp/w_$1_$2.bin")
done
$PY "$tmp/mega.py" writer "${specs[@]}" || fail "the writer's files"

# 3. trident tokenize --format megatron against --format llmc
if r=$($PY "$tmp/mega.py" tokenized "$tmp/tl" "$tmp/tm"); then
  echo "ok   tokenize --format megatron: every .idx field, $r, the stream = llmc's, data.json sizes and XXH3s"
else fail "tokenize --format megatron"; fi

# 5. one error line each, through the loader (checked with the one through train below)
at=$($PY "$tmp/mega.py" bad "$tmp/bad") || { echo "FAIL mega.py bad"; exit 1; }
cp -r "$tmp/tm" "$tmp/tm_noidx" && rm "$tmp/tm_noidx/a_val_000000.idx"
bads=(uint16-train "mega16/tiny_train.bin: this Megatron dataset \(dtype uint16\) holds uint16 tokens, .* 100277")
bad() { bads+=("$1" "$2"); bg "bad_$1" "${@:3}"; }
rd() { "$W" read "$1" "${2:-0}" "$tmp/ignored.i32"; }
b="$tmp/bad"
bad magic "x_train.bin: its Megatron index .*x_train.idx: not a Megatron-LM index" rd "$b/magic/x_train.bin"
bad version "x_train.idx: Megatron index version 2 is not supported" rd "$b/version/x_train.bin"
bad dtype9 "x_train.idx: unknown dtype code 9" rd "$b/dtype9/x_train.bin"
bad float32 "x_train.idx: dtype float32 \(code 7\) is not read" rd "$b/float32/x_train.bin"
bad pointer "x_train.idx: sequence 3 points at byte .* \(the index disagrees with its .bin\)" rd "$b/pointer/x_train.bin"
bad bin-long "x_train.idx: .* but the .bin has 6002 bytes \(the index disagrees with its .bin\)" rd "$b/binlong/x_train.bin"
bad doc-index "x_train.idx: document-index entry 2 is 1; the entries start at 0 and rise" rd "$b/docindex/x_train.bin"
bad multimodal "x_train.idx: it carries per-sequence modes \(a multimodal index\)" rd "$b/multimodal/x_train.bin"
bad idx-cut "x_train.idx: .*the index is cut short" rd "$b/truncidx/x_train.bin"
bad beyond "beyond/x_train.bin: token id 5000 at index $at does not fit --vocab 1000" rd "$b/beyond/x_train.bin" 1000
bad negative "negative/x_train.bin: token $at is -7 as int32" rd "$b/negative/x_train.bin"
bad llmc16-big "llmc16/tiny_train.bin: this llm.c token file holds uint16 tokens, .* 100277" \
  rd "$tmp/llmc16/tiny_train.bin" 100277
bad llmc32-v1 "l32v1/x_train.bin: llm.c token file version 1 is not supported; trident reads version 7 \(uint32 tokens\)" \
  rd "$b/l32v1/x_train.bin"
bad idx-missing "a_val_000000.bin: .*data.json says its shards are Megatron files, but .*a_val_000000.idx is missing" \
  rd "$tmp/tm_noidx"
bad format "tokenize --format parquet is not known; valid: llmc, megatron" \
  "$T" tokenize --tokenizer gpt2 "$tmp/a.txt" --out "$tmp/nope" --format parquet
wait

# 4. end to end
for f in llmc16 mega16 mega32 big32 tm; do ran "$f"; done
grep -q "tiny_train.bin + .*tiny_val.bin (token ids)" "$tmp/mega32.out" || fail "mega32: the data line names both files"
$PY "$tmp/mega.py" same "$tmp/llmc16.jsonl" "$tmp/mega16.jsonl" "$tmp/mega32.jsonl" &&
  echo "ok   train: llm.c uint16 = Megatron uint16 = Megatron int32: losses, grad norms, val loss bitwise" ||
  fail "the formats train differently"
grep -q '"val_loss"' "$tmp/big32.jsonl" && grep -q '"vocab": 100277' "$tmp/big32.jsonl" &&
  echo "ok   train: Megatron int32 ids up to 100276 with --vocab 100277" || fail "big vocabulary"
grep -q "^eval .*val loss" "$tmp/tm.out" && echo "ok   train: the tokenized Megatron shard set" || fail "tm: no val loss"
for f in llmc16 mega32; do
  bg "ev_$f" "$T" eval --ckpt "$tmp/ck_llmc16" --data "$tmp/$f/tiny_train.bin" --batch 4 --log "$tmp/ev_$f.json"
done
wait
ran ev_llmc16 && ran ev_mega32 &&
  $PY -c 'import json,sys; a=[json.load(open(p)) for p in sys.argv[1:]]; k=[{x: r[x] for x in r if "loss" in x or "tokens" in x} for r in a]; assert k[0] and k[0]==k[1], k' \
    "$tmp/ev_llmc16.json" "$tmp/ev_mega32.json" &&
  echo "ok   eval: the same loss and token count on llm.c uint16 and Megatron int32" || fail "eval differs between formats"

for ((i = 0; i < ${#bads[@]}; i += 2)); do
  name=${bads[i]} want=${bads[i+1]} out=$(cat "$tmp/bad_${bads[i]}.out") rc=$(cat "$tmp/bad_${bads[i]}.rc")
  if [ "$rc" -ne 0 ] && [ "$(grep -c "^trident: error: " <<<"$out")" -eq 1 ] && [ "$(wc -l <<<"$out")" -eq 1 ] &&
     grep -Eq "$want" <<<"$out"; then
    echo "ok   $name: $out"
  else fail "$name: exit $rc, want one line matching /$want/:"; echo "$out" | head -5; fi
done
[ $fails -eq 0 ] && echo "indexed data: all passed"
exit $fails
