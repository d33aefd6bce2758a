// The estimator's fitted coefficients (planner/template/estimator.h EstimatorCoefficients): the one place
// they are stored. Produced by
//   scripts/fit_estimator.sh
// which fits them against the simulator on the fitting half of the validation clusters
// (tests/planner/estimator_test.cpp) and prints this initializer.
#pragma once
#include "planner/template/estimator.h"

namespace arachne::planner {

// Fitted values (compute, p2p, dp, ep): the terms mirror the simulator's own costs, so the fit leaves compute and
// gradient reduction at 1, lengthens point-to-point transfers by 14 % (the contention of transfers with other
// traffic, which the estimator does not model) and expert parallelism by 4 % (all-to-alls timed alone, routing
// draws above the expected load).
inline constexpr EstimatorCoefficients kFittedEstimatorCoefficients{1, 1.139, 1, 1.044};

}  // namespace arachne::planner
