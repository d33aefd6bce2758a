#!/usr/bin/env bash
# Installs what is missing (Debian 12 packages only) and builds Arachne (Release, Ninja).
# Usage: scripts/setup.sh [build-dir [cmake -D options...]]    (default: build)
#   The options configure a separate tree, e.g. `scripts/setup.sh build-sanitize -DARACHNE_SANITIZE=ON`
#   (what `scripts/test.sh --sanitize` does). With -DARACHNE_FUZZ=ON (scripts/fuzz.sh) it also installs
#   clang-14 and libFuzzer, which nothing else needs, and configures the tree for clang without building.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
cmake_options=("${@:2}")

pkgs=(build-essential cmake ninja-build pkg-config ccache libboost-graph-dev libboost-program-options-dev
      libyaml-cpp-dev libhdf5-dev libtorch-dev libgtest-dev libgmock-dev libbenchmark-dev
      nlohmann-json3-dev python3-h5py python3-matplotlib libopenmpi-dev openmpi-bin)
fuzz=0
for o in "${cmake_options[@]}"; do
  [ "$o" = "-DARACHNE_FUZZ=ON" ] && fuzz=1
done
[ "$fuzz" -eq 1 ] && pkgs+=(clang-14 libfuzzer-14-dev)
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
if [ ! -f "$build/build.ninja" ] || [ ${#cmake_options[@]} -gt 0 ]; then
  compilers=()
  [ "$fuzz" -eq 1 ] && compilers=(-DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14)
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${compilers[@]}" "${cmake_options[@]}" >&2
fi
# The fuzz tree is only configured here: scripts/fuzz.sh builds the targets it runs.
[ "$fuzz" -eq 1 ] || cmake --build "$build" -j "$jobs" >&2
