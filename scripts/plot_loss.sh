#!/usr/bin/env bash
# Turns one or more `trident train --log` files into a PNG with labelled
# train and val loss curves (gnuplot). Usage: plot_loss.sh OUT.png LOG...
set -euo pipefail
out=${1:?usage: plot_loss.sh OUT.png LOG.jsonl...}; shift
[ $# -ge 1 ] || { echo "plot_loss: give at least one --log file" >&2; exit 2; }
command -v gnuplot >/dev/null || { echo "plot_loss: gnuplot missing; run scripts/deps.sh" >&2; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
plots=()
i=0
for log in "$@"; do
  [ -r "$log" ] || { echo "plot_loss: cannot read $log" >&2; exit 2; }
  name=$(basename "$log" .jsonl)
  # step lines carry "loss"; eval lines carry "val_loss"
  sed -n 's/^{"step": \([0-9]*\), "loss": \([-0-9.e+]*\),.*/\1 \2/p' "$log" > "$tmp/train$i"
  sed -n 's/^{"step": \([0-9]*\), "val_loss": \([-0-9.e+]*\)}.*/\1 \2/p' "$log" > "$tmp/val$i"
  [ -s "$tmp/train$i" ] && plots+=("'$tmp/train$i' using 1:2 with lines lw 1 title '$name train'")
  [ -s "$tmp/val$i" ] && plots+=("'$tmp/val$i' using 1:2 with linespoints lw 2 pt 7 title '$name val'")
  i=$((i+1))
done
[ ${#plots[@]} -gt 0 ] || { echo "plot_loss: no loss lines found in $*" >&2; exit 2; }
joined=$(IFS=,; echo "${plots[*]}")
gnuplot <<GP
set terminal pngcairo size 1000,600 noenhanced
set output '$out'
set xlabel 'step'
set ylabel 'loss (nats per token)'
set title 'trident training loss'
set grid
$(echo "plot $joined")
GP
echo "plot_loss: wrote $out"
