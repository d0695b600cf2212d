#!/usr/bin/env bash
# Installs nodecomm's build and test dependencies on Debian 12 with apt-get, only if any are
# missing (idempotent: a second run installs nothing). Needs root, or sudo for apt-get.
set -euo pipefail

# Besides the libraries: `file` (CPack's .deb generator runs it to find the ELF files for
# dpkg-shlibdeps, test package_deb), util-linux (setpriv, runuser, unshare), passwd (useradd)
# and procps (pgrep) for the tests; a minimal Debian 12 (debootstrap --variant=minbase) has
# neither `file` nor procps. The list was checked against such a root: every program the tests,
# tools/test.sh and tools/sanitize.sh run comes from it or from an Essential package.
PACKAGES=(
  build-essential cmake ninja-build pkg-config git file
  openmpi-bin libopenmpi-dev
  libboost-dev libhwloc-dev libnuma-dev libsystemd-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev nlohmann-json3-dev libfmt-dev libhwy-dev libxxhash-dev libgloo-dev
  iproute2 procps util-linux passwd gnuplot-nox
  systemd
  clang libclang-rt-dev
  python3-numpy python3-torch
  libtorch-dev pybind11-dev python3-dev  # the torch.distributed backend (python/torch_backend)
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
