#!/usr/bin/env bash
# Installs what is missing, builds (Release), and runs every test with ctest.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${ARACHNE_BUILD_DIR:-$root/build}"
"$root/scripts/setup.sh" "$build"
export ARACHNE_DATA="${ARACHNE_DATA:-$(cd "$root/.." && pwd)/shared/data}"
cd "$build"
ctest --output-on-failure -j "${ARACHNE_JOBS:-2}" --timeout 900
