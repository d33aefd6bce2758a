#!/usr/bin/env bash
# Completion (planner/template/completion.h) against the oracle where the oracle's search completes
# (planner/oracle/README.md "Where it completes"): the oracle's plan's structure is completed with the
# simulator as the pricer, and the best completion's simulated time is compared with the oracle's.
# One line per case: oracle time, completion time, ratio (target <= 1.01). Every case also runs in the
# default test suite (each well under a second).
# Usage: scripts/completion_vs_oracle.sh [build dir]
set -euo pipefail
build="${1:-build}"
"$build/arachne_tests" --gtest_also_run_disabled_tests \
  --gtest_filter='Completion.RecoversOracle*' 2>&1 | grep -E '^\[completion vs oracle\]|FAILED|Failure'
