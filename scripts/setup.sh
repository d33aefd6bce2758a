#!/usr/bin/env bash
# Installs what is missing (Debian 12 packages only) and builds Arachne (Release, Ninja).
# Usage: scripts/setup.sh [build-dir]    (default: build)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"

pkgs=(build-essential cmake ninja-build pkg-config ccache libboost-graph-dev libboost-program-options-dev
      libyaml-cpp-dev libhdf5-dev libtorch-dev libgtest-dev libgmock-dev libbenchmark-dev
      nlohmann-json3-dev python3-h5py python3-matplotlib libopenmpi-dev openmpi-bin)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

jobs="${ARACHNE_JOBS:-2}"
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >&2
fi
cmake --build "$build" -j "$jobs" >&2
