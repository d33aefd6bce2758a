# Shared set-up of the script tests, sourced with the test's name and the arachne binary:
#   source "$(dirname "${BASH_SOURCE[0]}")/../tools/script_setup.sh" NAME ARACHNE_BINARY
# Defines arachne (absolute path), repo (the repository root), same (tests/tools/same_results.py), work (a
# fresh directory removed at exit) and fail MESSAGE (prints FAIL: MESSAGE and exits 1).
set -euo pipefail
arachne="$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
same="$repo/tests/tools/same_results.py"
work="$(mktemp -d "${TMPDIR:-/tmp}/arachne_$1.XXXXXX")"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
