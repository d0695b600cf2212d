#!/usr/bin/env bash
# Installs nodecomm's build and test dependencies on Debian 12 with apt-get, only if any are
# missing (idempotent: a second run installs nothing). Needs root, or sudo for apt-get.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config git
  openmpi-bin libopenmpi-dev
  libboost-dev libhwloc-dev libnuma-dev libsystemd-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev nlohmann-json3-dev libfmt-dev libhwy-dev libxxhash-dev
  iproute2 procps util-linux gnuplot-nox
  systemd
  clang libclang-rt-dev
  python3-numpy python3-torch
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
