#include "planner/arachne/arachne_planner.h"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <map>
#include <mutex>
#include <set>

#include "planner/arachne/features.h"
#include "planner/arachne/policy_net.h"
#include "planner/common/evaluator.h"
#include "planner/template/completion.h"
#include "planner/template/estimator.h"
#include "planner/template/neighbors.h"
#include "planner/template/tokens.h"

namespace arachne::planner {
namespace {

}  // namespace

const PolicyNet& load_policy(const std::string& path_or_empty) {
  const std::string path = path_or_empty.empty() ? default_policy_path() : path_or_empty;
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<PolicyNet>> cache;
  const std::lock_guard<std::mutex> lock(mu);
  auto& slot = cache[path];
  if (!slot) slot = std::make_unique<PolicyNet>(PolicyNet::load(path));
  return *slot;
}

namespace {

}  // namespace

std::vector<Template> proposed_templates(const PlanRequest& r, long global) {
  std::vector<Template> out;
  std::set<Template> seen;
  if (r.previous_plan != nullptr) {
    try {
      Template t = template_of(*r.previous_plan, *r.previous_cluster);
      if (template_problem(t, *r.cluster, *r.model).empty() && seen.insert(t).second) out.push_back(t);
    } catch (const std::invalid_argument&) {
      // The previous plan lies outside the template space (mixed TP in a stage): no warm start.
    }
  }
  const PolicyNet& net = load_policy(r.arachne_policy);
  const std::vector<std::string> types = type_order(*r.cluster);
  for (const DecodedSequence& d : net.beam(request_features(*r.cluster, types, *r.model, global), TokenGrammar(*r.cluster, *r.model), r.arachne_beam)) {
    Template t = decode(d.tokens, types);
    if (seen.insert(t).second) out.push_back(std::move(t));
  }
  return out;
}

namespace {

std::vector<CompletedPlan> priced_candidates(const std::vector<Template>& templates, const PlanRequest& r, long global,
                                             long* priced) {
  const Estimator est(*r.cluster, *r.topo, *r.model);
  const PlanPricer price = [&](const Plan& p) -> std::optional<double> {
    ++*priced;
    const Estimate e = est.estimate(p);
    return e.fits ? std::optional<double>(e.iteration_s) : std::nullopt;
  };
  std::vector<CompletedPlan> all;
  const TemplatePricer complete = [&](const Template& t) -> std::optional<double> {
    std::optional<double> best;
    for (CompletedPlan& c : complete_template(t, {r.cluster, r.topo, r.model, global}, price, {.max_candidates = r.arachne_completions})) {
      if (!best || c.priced_s < *best) best = c.priced_s;
      all.push_back(std::move(c));
    }
    return best;
  };
  local_search(templates, *r.cluster, *r.model, complete, {.rounds = r.arachne_refine, .width = 2});
  std::stable_sort(all.begin(), all.end(), [](const CompletedPlan& a, const CompletedPlan& b) { return a.priced_s < b.priced_s; });
  return all;
}

}  // namespace

std::string default_policy_path() { return (std::filesystem::path(configs_dir()) / "policy" / "arachne.weights").string(); }

PlanResult ArachnePlanner::plan(const PlanRequest& request) {
  const PlanTimer timer;
  long global = 0;
  if (auto early = refused_request(request, name(), timer, &global)) return *early;
  PlanResult result;
  const std::vector<Template> templates = proposed_templates(request, global);
  const std::vector<CompletedPlan> candidates = priced_candidates(templates, request, global, &result.own_model_evaluations);
  Evaluator eval(request);
  double best = std::numeric_limits<double>::infinity();
  for (const CompletedPlan& c : candidates) {
    if (eval.evaluations() >= request.arachne_simulate || eval.exhausted()) break;
    const std::optional<double> t = eval.iteration_time(c.plan);
    if (t && *t < best) {
      best = *t;
      result.plan = c.plan;
      result.predicted_iteration_time_s = c.priced_s;
    }
  }
  result.evaluations = eval.evaluations();
  result.search_complete = !eval.exhausted();
  if (!result.plan) result.reason = candidates.empty() ? "no proposed template could be completed within memory" : "every simulated candidate ran out of memory";
  return timer.finish(result);
}

}  // namespace arachne::planner
