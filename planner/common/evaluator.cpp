// The simulator as a cost model (see evaluator.h).
#include "planner/common/evaluator.h"

#include <stdexcept>

#include "sim/io/input_error.h"
#include "sim/plan/plan_yaml.h"

namespace arachne::planner {

Evaluator::Evaluator(const PlanRequest& request, const Cluster* cluster, const Topology* topo)
    : request_(request),
      cluster_(cluster ? *cluster : *request.cluster),
      topo_(topo ? *topo : *request.topo),
      global_(request.global_batch > 0 ? request.global_batch : request.model->global_batch),
      start_(std::chrono::steady_clock::now()) {}

double Evaluator::elapsed_s() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

bool Evaluator::exhausted() const {
  return evaluations_ >= request_.budget_evaluations || (request_.budget_wall_s > 0 && elapsed_s() >= request_.budget_wall_s);
}

std::optional<double> Evaluator::iteration_time(const Plan& plan, std::string* why) {
  try {
    validate_plan(plan, cluster_, *request_.model, global_, "candidate");
  } catch (const InputError& e) {
    if (why) *why = e.what();
    return std::nullopt;
  }
  SimOptions opt;
  opt.seed = request_.seed;
  last_ = simulate_iteration(cluster_, topo_, *request_.model, plan, opt);
  ++evaluations_;
  if (last_.oom) {
    if (why) *why = "out of memory";
    return std::nullopt;
  }
  return last_.iteration_time_s;
}

}  // namespace arachne::planner

namespace arachne::planner {

std::optional<std::string> request_problem(const PlanRequest& request, const std::string& planner, long* global_batch) {
  if (!request.cluster || !request.model) throw std::invalid_argument(planner + ": request without cluster or model");
  const long global = request.global_batch > 0 ? request.global_batch : request.model->global_batch;
  if (global_batch) *global_batch = global;
  if (global < 1) return "no global batch: give one in the request or set global_batch in the model";
  if (request.cluster->nodes.empty() || request.cluster->total_gpus() == 0) return "no GPUs available";
  if (request.model->layers < 1) return "the model has no layers";
  return std::nullopt;
}

std::optional<PlanResult> refused_request(const PlanRequest& request, const std::string& planner, const PlanTimer& timer,
                                          long* global_batch) {
  const std::optional<std::string> problem = request_problem(request, planner, global_batch);
  if (!problem) return std::nullopt;
  PlanResult result;
  result.reason = *problem;
  return timer.finish(result);
}

}  // namespace arachne::planner
