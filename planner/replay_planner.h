// A planner as the replay's callback (sim/trace/replay.h): each snapshot becomes a PlanRequest with the
// given budgets and seed; with warm_start the plan the job runs is passed as the previous plan. Used by
// `arachne replay` and by the replay cells of `arachne experiment`.
#pragma once
#include <functional>

#include "planner/planner.h"
#include "sim/trace/replay.h"

namespace arachne::planner {

struct ReplanSettings {
  long budget_evaluations = 2000;
  double budget_wall_s = 0;  // 0: none
  std::uint64_t seed = 0;
  bool warm_start = true;
  std::string arachne_policy;  // the learned planner's weights file (empty: the shipped one)
};

// `planner` and `model` must outlive the callback. on_plan (optional) is called before each planner call
// (progress reporting).
ReplanCallback replan_callback(Planner& planner, const ModelConfig& model, const ReplanSettings& settings,
                               const std::function<void()>& on_plan = {});

}  // namespace arachne::planner
