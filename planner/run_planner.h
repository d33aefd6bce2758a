// One cell of a planner comparison: run a planner on a request and measure the plan it returns in the
// simulator. What `arachne plan` prints per row and `arachne evaluate` records per cell.
#pragma once
#include <optional>
#include <string>

#include "planner/planner.h"
#include "sim/exec/simulate.h"

namespace arachne::planner {

struct PlannerRun {
  // The row's label: the planner's name; "+<extension>" for an extension of ours beyond the public code
  // (flashflex+refine); "arachne[<source>]" for an ablation of the learned planner's template source.
  std::string label;
  PlanResult result;
  std::optional<SimResult> sim;  // the returned plan simulated (empty: no plan)
  bool feasible() const { return result.plan && sim && !sim->oom; }
};

// Runs `planner` on `request`, validates the plan it returns and simulates it (SimOptions seeded with the
// request's seed). Throws std::runtime_error when the plan is invalid: the planner's own mistake, not the
// user's input.
PlannerRun run_planner(Planner& planner, const PlanRequest& request);

// A plan in one line: "64 GPUs: 2 x [4 stages tp 2,2,2,4*2 mb 2x16] + 1 x [...]": runs of identical
// pipeline shapes; per stage the TP degree, "4*2" for two groups of TP 4 (stage-level data parallelism).
std::string plan_summary(const Plan& plan);

}  // namespace arachne::planner
