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
