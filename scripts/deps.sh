#!/usr/bin/env bash
# Installs the Debian packages trident needs, only those missing.
# Safe without a terminal (CI): noninteractive, no prompts.
set -euo pipefail
pkgs=(build-essential cmake pkg-config libopenmpi-dev openmpi-bin libopenblas-dev
      python3-torch gnuplot-nox fortunes clang libclang-rt-14-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "deps: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null
fi
