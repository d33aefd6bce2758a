// The simulator as a cost model, with the request's budgets: what the megatron baseline and the oracle
// search with, and what every other baseline searches with under `--cost-model simulator`.
#pragma once
#include <chrono>
#include <optional>
#include <string>

#include "planner/planner.h"
#include "sim/exec/simulate.h"

namespace arachne::planner {

class Evaluator {
 public:
  // Prices plans on the request's cluster and topology (or on `cluster`/`topo` when given, e.g. a subset).
  explicit Evaluator(const PlanRequest& request, const Cluster* cluster = nullptr, const Topology* topo = nullptr);

  // True once the evaluation or wall-clock budget is spent.
  bool exhausted() const;
  // Validates the plan (invalid: nullopt with the reason in *why, not counted), then simulates it (counted).
  // Out of memory: nullopt, *why = "out of memory". Otherwise the simulated iteration time.
  std::optional<double> iteration_time(const Plan& plan, std::string* why = nullptr);
  // Full result of the last successful or OOM simulation.
  const SimResult& last() const { return last_; }
  long evaluations() const { return evaluations_; }
  // Counts `n` evaluations made elsewhere on this budget (a nested planner's simulations).
  void charge(long n) { evaluations_ += n; }
  double elapsed_s() const;

 private:
  const PlanRequest& request_;
  const Cluster& cluster_;
  const Topology& topo_;
  long global_;
  long evaluations_ = 0;
  SimResult last_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace arachne::planner

namespace arachne::planner {

// The wall clock of one plan() call: elapsed time, the optional wall-clock budget, and the result's
// planning_time_s.
class PlanTimer {
 public:
  PlanTimer() : start_(std::chrono::steady_clock::now()) {}
  double elapsed_s() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }
  bool wall_budget_spent(const PlanRequest& r) const { return r.budget_wall_s > 0 && elapsed_s() >= r.budget_wall_s; }
  PlanResult finish(PlanResult r) const {
    r.planning_time_s = elapsed_s();
    return r;
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

// The checks every planner makes before it searches. Throws std::invalid_argument when the request has no
// cluster or model (a programming error). Returns the global batch to plan for (the request's, else the
// model's) in *global_batch, and a reason when there is nothing to plan: no global batch, no GPUs, no layers.
std::optional<std::string> request_problem(const PlanRequest& request, const std::string& planner, long* global_batch);
// request_problem as a planner's early answer: the finished result (no plan, the reason, the planning time)
// when there is nothing to plan, nullopt otherwise.
std::optional<PlanResult> refused_request(const PlanRequest& request, const std::string& planner, const PlanTimer& timer,
                                          long* global_batch);

}  // namespace arachne::planner
