# Sourced by the tokenizer command-line tests (test_tokenize_cli.sh,
# test_hfjson_cli.sh): a temporary directory $tmp removed at exit, `ok` and
# `fail` lines with the failures counted in $fails, and
#   expect NAME WANT CMD...   CMD must exit with status 2 and print one line
#                             matching WANT (grep), its "trident: error: ...".
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
