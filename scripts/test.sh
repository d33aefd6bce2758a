#!/usr/bin/env bash
# Installs what is missing, builds (Release), and runs every test with ctest.
# Usage: scripts/test.sh [--sanitize]
#   --sanitize  builds a separate tree (build-sanitize/, or $ARACHNE_BUILD_DIR) with AddressSanitizer and
#               UndefinedBehaviorSanitizer (CMake option ARACHNE_SANITIZE) and runs the whole suite in it:
#               any memory error, leak or undefined behaviour fails the test that hit it. The tests
#               labelled `heavy` (tests/heavy_tests.cmake) run on reduced sizes there (ARACHNE_TEST_REDUCED=1).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
sanitize=0
for a in "$@"; do
  case "$a" in
    --sanitize) sanitize=1 ;;
    *) echo "usage: scripts/test.sh [--sanitize]" >&2; exit 2 ;;
  esac
done
export ARACHNE_DATA="${ARACHNE_DATA:-$(cd "$root/.." && pwd)/shared/data}"
if [ "$sanitize" -eq 1 ]; then
  build="${ARACHNE_BUILD_DIR:-$root/build-sanitize}"
  "$root/scripts/setup.sh" "$build" -DARACHNE_SANITIZE=ON -DARACHNE_BUILD_BENCH=OFF
  # Leaks count as findings, except the third-party ones listed (with the reason) in the suppressions file.
  export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:strict_string_checks=1:check_initialization_order=1}"
  export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$root/tests/sanitize/lsan.supp:print_suppressions=0}"
  export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
  export ARACHNE_TEST_REDUCED=1
  # Wall-clock budgets in tests are stretched by this factor: sanitized code ran 20-50 times slower here.
  export ARACHNE_TEST_SLOWDOWN=30
else
  build="${ARACHNE_BUILD_DIR:-$root/build}"
  "$root/scripts/setup.sh" "$build"
fi
cd "$build"
ctest --output-on-failure -j "${ARACHNE_JOBS:-2}" --timeout 900
