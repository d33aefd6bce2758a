// The `megatron` baseline planner (algorithm and sources in megatron_planner.h).
#include "planner/baselines/megatron/megatron_planner.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "planner/common/evaluator.h"
#include "sim/exec/simulate.h"
#include "sim/hw/topology.h"
#include "sim/io/input_error.h"
#include "sim/plan/plan_yaml.h"
#include "planner/common/subcluster.h"

namespace arachne::planner {
namespace {

// The GPU type with the most GPUs (ties: higher dense peak for the model's dtype, then the name).
std::string pick_type(const Cluster& c, const ModelConfig& model) {
  std::map<std::string, int> count;  // ordered: deterministic
  for (const Node& n : c.nodes) count[c.groups[n.group].gpu] += n.gpus;
  std::string best;
  int best_n = -1;
  double best_peak = -1;
  for (const auto& [type, n] : count) {
    const double peak = c.catalog.at(type).peak_for(model.dtype);
    if (n > best_n || (n == best_n && peak > best_peak)) {  // map order breaks the remaining ties by name
      best = type;
      best_n = n;
      best_peak = peak;
    }
  }
  return best;
}

std::vector<int> divisors(int n) {
  std::vector<int> d;
  for (int i = 1; i <= n; ++i)
    if (n % i == 0) d.push_back(i);
  return d;
}

bool divides(int d, int n) { return n <= 0 || n % d == 0; }

}  // namespace

PlanResult MegatronPlanner::plan(const PlanRequest& request) {
  const PlanTimer timer;

  long global = 0;
  if (auto refused = refused_request(request, "megatron", timer, &global)) return *refused;
  const Cluster& cluster = *request.cluster;
  const ModelConfig& model = *request.model;

  PlanResult result;

  const std::string type = pick_type(cluster, model);
  std::vector<int> type_nodes;
  for (const Node& n : cluster.nodes)
    if (cluster.groups[n.group].gpu == type && n.gpus > 0) type_nodes.push_back(n.id);
  const SubCluster sub = make_subcluster(cluster, type_nodes, type + " nodes");
  const Topology sub_topo(sub.cluster);
  const int n_gpus = sub.cluster.total_gpus();
  const std::string what = std::to_string(n_gpus) + " x " + type;

  std::optional<Plan> best;
  double best_time = std::numeric_limits<double>::infinity();
  long evaluations = 0, oom = 0, rejected = 0;
  bool out_of_budget = false;
  std::string last_rejection;
  const SimOptions opt;  // defaults: memory enforced

  for (int tp = 1; tp <= sub.min_gpus_per_node && !out_of_budget; tp *= 2) {
    if (!divides(tp, model.heads) || !divides(tp, model.kv_heads)) continue;
    for (const int pp : divisors(model.layers)) {
      if (out_of_budget) break;
      if (tp * pp > n_gpus) break;  // divisors ascend
      int dp = n_gpus / (tp * pp);
      while (dp > 1 && global % dp != 0) --dp;
      for (const int mb : {1, 2, 4, 8}) {
        if (out_of_budget) break;
        if ((global / dp) % mb != 0 || global % dp != 0) continue;
        std::vector<int> eps = {1};
        if (model.moe) {
          eps.clear();
          for (const int e : divisors(dp))
            if (model.moe->experts % e == 0) eps.push_back(e);
        }
        for (const int ep : eps) {
          if (out_of_budget) break;
          for (const Recompute rc : {Recompute::None, Recompute::Selective, Recompute::Full}) {
            if (evaluations >= request.budget_evaluations ||
                timer.wall_budget_spent(request)) {
              out_of_budget = true;
              break;
            }
            Shorthand sh;
            sh.tp = tp;
            sh.pp = pp;
            sh.dp = dp;
            sh.ep = ep;
            sh.micro_batch = mb;
            sh.global_batch = global;
            sh.recompute = rc;
            Plan candidate;
            try {
              candidate = plan_from_shorthand(sh, sub.cluster, model);
            } catch (const InputError& e) {
              ++rejected;
              last_rejection = e.what();
              break;  // the recompute mode does not change the shape: the others fail alike
            }
            const SimResult r = simulate_iteration(sub.cluster, sub_topo, model, candidate, opt);
            ++evaluations;
            if (r.oom) {
              ++oom;
              continue;  // try more recomputation
            }
            if (r.iteration_time_s < best_time) {
              best_time = r.iteration_time_s;
              best = std::move(candidate);
            }
            break;  // fits: more recomputation only adds work
          }
        }
      }
    }
  }
  result.evaluations = evaluations;
  result.search_complete = !out_of_budget;

  if (!best) {
    if (evaluations == 0 && !out_of_budget)
      result.reason = "no Megatron configuration of the " + what + " GPUs is valid for " + model.name +
                      (last_rejection.empty() ? std::string() : " (last: " + last_rejection + ")");
    else if (oom == evaluations && !out_of_budget)
      result.reason = "no configuration of the " + what + " fits " + model.name + " in memory (" + std::to_string(oom) +
                      " configurations simulated, all out of memory)";
    else
      result.reason = "budget exhausted after " + std::to_string(evaluations) + " evaluations before a configuration of the " +
                      what + " fit " + model.name + " in memory";
    return timer.finish(result);
  }

  // Back to the original cluster's GPU ids.
  Plan plan = std::move(*best);
  map_plan_back(plan, sub, cluster);
  validate_plan(plan, cluster, model, global, "megatron");
  result.plan = std::move(plan);
  result.predicted_iteration_time_s = best_time;
  return timer.finish(result);
}

}  // namespace arachne::planner
