#!/usr/bin/env bash
# Fits the fast estimator's coefficients (planner/template/estimator.h) against the simulator and prints the
# initializer to paste into planner/template/estimator_coefficients.h, with the rank agreement and error in
# sample (the fitting half of the validation clusters) and out of sample (the other half).
# The validation set and the fit: tests/planner/estimator_validation.h. Usage: scripts/fit_estimator.sh [build dir]
set -euo pipefail
build="${1:-build}"
cd "$(dirname "$0")/.."
ninja -C "$build" arachne_tests >/dev/null
"$build/arachne_tests" --gtest_also_run_disabled_tests \
  --gtest_filter='EstimatorValidation.DISABLED_FitCoefficients' | grep -E '^(unit|fitted|inline)'
