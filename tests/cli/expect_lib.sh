# The setup command-line tests share (tests/bpe/test_tokenize_cli.sh,
# test_tiktoken_cli.sh, test_hfjson_cli.sh, tests/cli/test_data_manifest.sh), sourced first: a temporary directory removed on exit, the failure counter, ok/fail
# lines, and expect NAME WANT CMD..., which passes when CMD fails the way
# trident refuses input: exit status 2 and one line matching WANT.
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
fails=0
ok() { echo "ok   $1"; }
fail() { echo "FAIL $1"; shift; [ $# -gt 0 ] && echo "$@" | tail -5; fails=$((fails+1)); }
expect() {
  local name=$1 want=$2; shift 2
  out=$("$@" 2>&1); rc=$?
  if [ $rc -eq 2 ] && [ "$(wc -l <<<"$out")" -eq 1 ] && grep -q -- "$want" <<<"$out"; then ok "$name: $out"
  else fail "$name (exit $rc, want '$want')" "$out"; fi
}
# resume NAME NP LAYOUT...: $tmp/ck (a checkpoint of step 6) copied to
# $tmp/NAME and continued there to step 10 on NP ranks (the caller's
# $MPIRUN, $T and RUN flags), logging $tmp/NAME.jsonl.
resume() {
  local name=$1 np=$2; shift 2
  cp -r "$tmp/ck" "$tmp/$name"
  $MPIRUN -np "$np" "$T" train "${RUN[@]}" --steps 10 --out "$tmp/$name" --resume latest --log "$tmp/$name.jsonl" "$@" \
    >"$tmp/$name.out" 2>&1 || fail "resume $name" "$(cat "$tmp/$name.out")"
}
# same_continuations NAME...: steps 6-9 of each NAME's log within 1e-5 of
# $tmp/one.jsonl's (the one-process continuation).
same_continuations() {
  python3 - "$tmp" "$@" <<'P'
import json, sys
d = sys.argv[1]
def losses(n): return {j["step"]: j["loss"] for j in map(json.loads, open("%s/%s.jsonl" % (d, n))) if "loss" in j}
one = losses("one")
assert sorted(one) == [6, 7, 8, 9], one
for n in sys.argv[2:]:
    got = losses(n)
    worst = max(abs(got[s] - one[s]) / one[s] for s in one)
    assert worst <= 1e-5, (n, got, one)
    print("%s: steps 6-9 within %.1e of the one-process resume" % (n, worst))
P
}
