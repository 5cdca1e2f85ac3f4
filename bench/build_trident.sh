# Sourced by the bench/*.sh scripts that run the trident binary: sets
# TRIDENT to the binary they measure. Given TRIDENT (an executable), that
# one; else BUILD_DIR's, configured as Release when it is not already and
# built (its log in $tmp/build.log). Needs the caller's die, tmp, BUILD_DIR.
bench_trident() {
  if [[ -n "${TRIDENT:-}" ]]; then
    [[ -x "$TRIDENT" ]] || die "TRIDENT='$TRIDENT' is not an executable"
    return
  fi
  if [[ ! -f "$BUILD_DIR/CMakeCache.txt" ]] ||
     ! grep -q '^CMAKE_BUILD_TYPE:STRING=Release$' "$BUILD_DIR/CMakeCache.txt"; then
    cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >"$tmp/build.log" 2>&1 ||
      { cat "$tmp/build.log" >&2; die "cmake configure failed"; }
  fi
  cmake --build "$BUILD_DIR" -j2 >>"$tmp/build.log" 2>&1 ||
    { tail -n 50 "$tmp/build.log" >&2; die "build failed"; }
  TRIDENT=$BUILD_DIR/trident
  [[ -x "$TRIDENT" ]] || die "build finished but $TRIDENT is missing"
}
