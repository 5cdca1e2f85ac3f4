#!/usr/bin/env bash
# The reference GPT-2 tokenizer of the tests and the tokenizer benchmark:
# the npm package js-tiktoken, pinned, installed once into a cache directory
# (not the build tree, so a fresh clone or build does not fetch it again).
#   scripts/js_tiktoken.sh dir      prints the directory whose node_modules/
#                                   holds it (TD_JS_TIKTOKEN_DIR overrides)
#   scripts/js_tiktoken.sh install  installs it there unless present
#   scripts/js_tiktoken.sh check    exit 0 if node and the package are there
set -euo pipefail
ver=1.0.21
# HOME may be unset under some CI runners; ~ then comes from the user database
home=${HOME:-$(cd ~ && pwd)}
dir=${TD_JS_TIKTOKEN_DIR:-${XDG_CACHE_HOME:-$home/.cache}/trident/js-tiktoken-$ver}
present() {
  command -v node >/dev/null &&
    [ "$(node -p "require('$dir/node_modules/js-tiktoken/package.json').version" 2>/dev/null)" = "$ver" ]
}
case "${1:-}" in
  dir) echo "$dir" ;;
  check) present ;;
  install)
    present && exit 0
    command -v npm >/dev/null || { echo "js_tiktoken: npm is missing; run scripts/deps.sh" >&2; exit 1; }
    echo "deps: installing js-tiktoken $ver into $dir"
    mkdir -p "$(dirname "$dir")"
    tmp=$(mktemp -d "$dir.tmp.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    # --ignore-scripts: nothing of the package runs at install time
    npm install --prefix "$tmp" --no-audit --no-fund --ignore-scripts --loglevel=error \
      "js-tiktoken@$ver" </dev/null >/dev/null
    rm -rf "$dir"
    mv "$tmp" "$dir"
    trap - EXIT
    present || { echo "js_tiktoken: js-tiktoken $ver did not install into $dir" >&2; exit 1; } ;;
  *) echo "usage: js_tiktoken.sh dir|install|check" >&2; exit 2 ;;
esac
