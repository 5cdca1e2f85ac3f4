# What test_hf_llama.sh and test_hf_mixtral.sh share, sourced after
# tests/cli/ckpt_lib.sh with T (trident) set.

# bad NAME REGEX ARGS...: the command fails cleanly with one error line matching
# REGEX, and $tmp/bad stays absent
bad() {
  local name=$1 re=$2; shift 2
  local out rc
  out=$(timeout 60 "$T" "$@" --out "$tmp/bad" 2>&1 </dev/null); rc=$?
  if [ $rc -eq 0 ] || [ $rc -ge 124 ]; then fail "$name: exit code $rc (want a clean non-zero exit)"; echo "$out" | tail -3; return; fi
  [ "$(echo "$out" | wc -l)" -eq 1 ] && grep -qE -e "^trident: error: .*$re" <<<"$out" \
    || { fail "$name: output is not one error line matching /$re/:"; echo "$out" | tail -3; return; }
  [ -e "$tmp/bad" ] && { fail "$name: --out was written"; rm -rf "$tmp/bad"; return; }
  echo "ok   $name: $out"
}

# resume NAME LAUNCH... -- ARGS...: the import $tmp/im trained 2 steps (no
# model flag given), the losses of steps 0 and 1 into $tmp/NAME.loss (none,
# and the log's tail, when the run fails: same_losses then fails)
resume() {
  local name=$1 launch=(); shift
  while [ "$1" != -- ]; do launch+=("$1"); shift; done; shift
  "${launch[@]}" "$T" train --resume "$tmp/im" --data "$tmp/small.txt" --batch 4 --eval-every 0 \
    --threads 1 --steps 2 --out "$tmp/r_$name" --log "$tmp/$name.jsonl" "$@" > "$tmp/$name.log" 2>&1 \
    || { tail -5 "$tmp/$name.log"; return; }
  grep '"step": [01],' "$tmp/$name.jsonl" | sed 's/.*"loss": \([^,]*\),.*/\1/' > "$tmp/$name.loss"
}

# same_losses NAME: resume NAME's losses within 1e-5 (relative) of resume one's
same_losses() {
  $PY - "$tmp/one.loss" "$tmp/$1.loss" "$1" <<'PYEOF' || fail "resume $1"
import sys
a = [float(x) for x in open(sys.argv[1])]; b = [float(x) for x in open(sys.argv[2])]
assert len(a) == len(b) == 2, (a, b)
rel = max(abs(x - y) / abs(x) for x, y in zip(a, b))
assert rel <= 1e-5, "losses %s vs one process's %s" % (b, a)
print("ok   the imported checkpoint resumed under %s: losses %s, one process's %s (max rel diff %.1e <= 1e-5)"
      % (sys.argv[3], b, a, rel))
PYEOF
}
