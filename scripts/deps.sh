#!/usr/bin/env bash
# Installs the Debian packages trident needs, only those missing (Slurm and
# munge for tests/cli/test_slurm.sh among them), and the
# reference GPT-2 tokenizer of the tests (js-tiktoken, an npm package, into a
# cache directory: scripts/js_tiktoken.sh); protoc and python3-protobuf read
# --tensorboard's event files back in tests/cli/test_tensorboard.sh. Safe without a terminal (CI):
# noninteractive, no prompts.
set -euo pipefail
pkgs=(build-essential cmake pkg-config libopenmpi-dev openmpi-bin libopenblas-dev
      python3-torch gnuplot-nox fortunes clang libclang-rt-14-dev libdnnl-dev
      libxxhash-dev python3-xxhash python3-regex libpcre2-dev
      slurmctld slurmd slurm-client munge protobuf-compiler python3-protobuf)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# node and npm: Debian's packages only where no node is installed at all (a
# machine may have its own Node.js, whose npm Debian's package would conflict
# with)
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
  echo "deps: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -q
  # no service starts during the install: munge's and Slurm's packages would
  # start system daemons (tests/cli/test_slurm.sh starts its own, on private
  # paths); a policy-rc.d refusing every start, only while we install and
  # only where there is none (Debian's container images have one)
  policy=/usr/sbin/policy-rc.d
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
    $SUDO chmod 755 "$policy"
    trap '$SUDO rm -f "$policy"' EXIT
  fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null
fi
"$(dirname "$0")/js_tiktoken.sh" install
