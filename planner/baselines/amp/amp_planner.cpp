// The `amp` baseline planner (algorithm, cost model and sources in amp_planner.h).
#include "planner/baselines/amp/amp_planner.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <map>
#include <numeric>
#include <stdexcept>

#include "planner/common/evaluator.h"
#include "planner/common/partition.h"
#include "planner/common/plan_builder.h"
#include "sim/hw/topology.h"
#include "sim/plan/plan_yaml.h"

namespace arachne::planner {
namespace {

std::vector<int> divisors(long n) {
  std::vector<int> d;
  for (long i = 1; i <= n; ++i)
    if (n % i == 0) d.push_back(static_cast<int>(i));
  return d;
}

bool divides(int d, int n) { return n <= 0 || n % d == 0; }

// AMP/pipe.py pipe_uniform: layers/pp per stage, the remainder one each to the first stages.
std::vector<int> uniform_bounds(int layers, int pp) {
  std::vector<int> b(pp + 1, 0);
  const int each = layers / pp, rem = layers % pp;
  for (int s = 0; s < pp; ++s) b[s + 1] = b[s] + each + (s < rem ? 1 : 0);
  return b;
}

}  // namespace

AmpCostModel::AmpCostModel(const Cluster& cluster, const Topology& topo, const ModelConfig& model)
    : cluster_(cluster), topo_(topo), model_(model), profiler_(cluster, model) {
  std::map<std::string, int> count;  // ordered: deterministic
  int total = 0;
  for (const Node& n : cluster.nodes) {
    const std::string& type = cluster.groups[n.group].gpu;
    count[type] += n.gpus;
    total += n.gpus;
    node_gcd_ = std::gcd(node_gcd_, n.gpus);
    for (int l = 0; l < n.gpus; ++l) type_of_gpu_.push_back(type);
  }
  // AMP/cost_het_cluster.py init_param: the profile of each type weighted by its share of the GPUs.
  for (const auto& [type, n] : count)
    if (n > 0) weights_.emplace_back(type, static_cast<double>(n) / total);
}

double AmpCostModel::link_bw(GpuId a, GpuId b) const {
  double bw = std::numeric_limits<double>::infinity();
  for (const LinkId l : topo_.route(a, b)) bw = std::min(bw, topo_.links()[l].capacity);
  return bw;
}

std::optional<AmpCandidate> AmpCostModel::price(int tp, int pp, int dp, int mb, long global, std::string* why) const {
  auto fail = [&](const std::string& w) -> std::optional<AmpCandidate> {
    if (why) *why = w;
    return std::nullopt;
  };
  const int n_gpus = static_cast<int>(type_of_gpu_.size());
  const int L = model_.layers;
  if (tp < 1 || pp < 1 || dp < 1 || mb < 1) return fail("degrees must be positive");
  if (tp * pp * dp != n_gpus) return fail("tp*pp*dp must equal the " + std::to_string(n_gpus) + " GPUs (AMP uses all)");
  if (node_gcd_ % tp != 0) return fail("tp must divide the GPUs of every node (TP inside a node)");
  if (!divides(tp, model_.heads) || !divides(tp, model_.kv_heads)) return fail("tp must divide heads and kv_heads");
  if (pp > L) return fail("more stages than layers");
  if (global % (static_cast<long>(dp) * mb) != 0) return fail("dp*micro_batch must divide the global batch");

  AmpCandidate c;
  c.tp = tp;
  c.pp = pp;
  c.dp = dp;
  c.micro_batch = mb;
  c.micro_batches = static_cast<int>(global / (static_cast<long>(dp) * mb));
  const int B = c.micro_batches;
  auto gpu = [&](int s, int d, int k) { return s * tp * dp + d * tp + k; };  // AMP/amp_utils.py axis2rank

  auto key = [&](const std::string& type) {
    ProfileKey k;
    k.gpu_type = type;
    k.tp = tp;
    k.samples = mb;
    return k;  // no recomputation, no sequence parallelism (AMP's DeepSpeed/Megatron-1.1.5 runs)
  };

  // cost_e: forward+backward kernels per layer, averaged over the GPU types by GPU share (the signature).
  std::vector<double> e(L, 0.0);
  double emb = 0, head = 0;
  for (const auto& [type, w] : weights_) {
    const ProfileKey k = key(type);
    for (int l = 0; l < L; ++l) {
      const LayerProfile& p = profiler_.layer(l, k);
      e[l] += w * (p.forward_s + p.backward_s);
    }
    emb += w * (profiler_.embedding(k).forward_s + profiler_.embedding(k).backward_s);
    head += w * (profiler_.head(k).forward_s + profiler_.head(k).backward_s);
  }
  // TP all-reduce per layer and stage: the group's own node type (its intra-node links), mean over replicas.
  // prefix[s][l] = sum over layers < l of (e + tp comm of stage s).
  std::vector<std::vector<double>> prefix(pp, std::vector<double>(L + 1, 0.0));
  for (int s = 0; s < pp; ++s) {
    std::vector<double> tpc(L, 0.0);
    if (tp > 1) {
      for (int d = 0; d < dp; ++d) {
        const ProfileKey k = key(type_of_gpu_[gpu(s, d, 0)]);
        for (int l = 0; l < L; ++l) {
          const LayerProfile& p = profiler_.layer(l, k);
          tpc[l] += (p.tp_comm_forward_s + p.tp_comm_backward_s) / dp;
        }
      }
    }
    for (int l = 0; l < L; ++l) prefix[s][l + 1] = prefix[s][l] + e[l] + tpc[l];
  }
  auto stage_cost = [&](int s, int b, int en) {
    double t = prefix[s][en] - prefix[s][b];
    if (b == 0) t += emb;
    if (en == L) t += head;
    return t;
  };

  // Layer partition (AMP/cost_het_cluster.py predict): pipe_uniform for one micro-batch, else pipe_ast, whose
  // optimum here is the min-max partition (amp_planner.h, step 3).
  c.bounds = B == 1 ? uniform_bounds(L, pp) : minmax_partition(L, pp, stage_cost);
  if (static_cast<int>(c.bounds.size()) != pp + 1) return fail("no layer partition into " + std::to_string(pp) + " stages");

  double max_stage = 0, sum_stage = 0;
  for (int s = 0; s < pp; ++s) {
    const double t = stage_cost(s, c.bounds[s], c.bounds[s + 1]);
    c.stage_s.push_back(t);
    max_stage = std::max(max_stage, t);
    sum_stage += t;
  }
  // cost_c (AMP/cost_het_cluster.py get_cost_c): activation / slowest tp-rank link between the stages, mean
  // over replicas; once per cut (AMP/pipe.py pipe_cost).
  const double act = profiler_.p2p_bytes(mb);
  for (int j = 0; j + 1 < pp; ++j) {
    double mean = 0;
    for (int d = 0; d < dp; ++d) {
      double slowest = std::numeric_limits<double>::infinity();
      for (int k = 0; k < tp; ++k) slowest = std::min(slowest, link_bw(gpu(j, d, k), gpu(j + 1, d, k)));
      mean += act / slowest / dp;
    }
    c.p2p_s += mean;
  }
  // AMP/pipe.py pipe_cost.
  c.pipeline_s = (B - 1) * max_stage + sum_stage + c.p2p_s;

  // AMP/cost_het_cluster.py dp_cost: ring all-reduce of the stage's gradients per TP rank over the slowest
  // ring link; the maximum over stages and TP ranks.
  if (dp > 1) {
    for (int s = 0; s < pp; ++s) {
      const double bytes = profiler_.grad_bytes(c.bounds[s], c.bounds[s + 1], tp);
      for (int k = 0; k < tp; ++k) {
        double slowest = std::numeric_limits<double>::infinity();
        for (int d = 0; d < dp; ++d) slowest = std::min(slowest, link_bw(gpu(s, d, k), gpu(s, (d + 1) % dp, k)));
        c.dp_sync_s = std::max(c.dp_sync_s, 2.0 * (dp - 1) / (dp * slowest) * bytes);
      }
    }
  }
  c.predicted_s = c.pipeline_s + c.dp_sync_s;
  return c;
}

Plan AmpCostModel::to_plan(const AmpCandidate& c) const {
  std::vector<PipelineSpec> pipes(c.dp);
  for (int d = 0; d < c.dp; ++d) {
    PipelineSpec& p = pipes[d];
    p.micro_batch = c.micro_batch;
    p.micro_batches = c.micro_batches;
    for (int s = 0; s < c.pp; ++s) {
      StageSpec st;
      st.layer_begin = c.bounds[s];
      st.layer_end = c.bounds[s + 1];
      GroupSpec g;
      g.tp = c.tp;
      for (int k = 0; k < c.tp; ++k) g.gpus.push_back(s * c.tp * c.dp + d * c.tp + k);
      st.groups.push_back(std::move(g));
      p.stages.push_back(std::move(st));
    }
  }
  return build_plan(pipes, cluster_, Recompute::None);
}

PlanResult AmpPlanner::plan(const PlanRequest& request) {
  const PlanTimer timer;

  long global = 0;
  const std::optional<std::string> problem = request_problem(request, "amp", &global);
  const Cluster& cluster = *request.cluster;
  const ModelConfig& model = *request.model;

  PlanResult result;
  if (problem) {
    result.reason = *problem;
    return timer.finish(result);
  }
  const int n_gpus = cluster.total_gpus();
  std::optional<Topology> own_topo;
  if (!request.topo) own_topo.emplace(cluster);
  const Topology& topo = request.topo ? *request.topo : *own_topo;
  PlanRequest req = request;
  req.topo = &topo;

  const AmpCostModel cost(cluster, topo, model);
  const bool use_sim = request.cost_model == CostModel::Simulator;
  std::optional<Evaluator> evaluator;
  if (use_sim) evaluator.emplace(req);

  std::optional<AmpCandidate> best;
  std::optional<Plan> best_plan;
  double best_time = std::numeric_limits<double>::infinity();
  long evaluations = 0, candidates = 0, oom = 0;
  bool out_of_budget = false;
  std::string last_invalid;

  // AMP/sa.py amp_no_placement_strategy: tp over divisors of the GPUs per node, dp over divisors of N/tp that
  // divide the batch, micro-batch over divisors of the per-replica batch; pp = N/(tp*dp).
  for (const int tp : divisors(cost.gpus_per_node_gcd())) {
    if (out_of_budget) break;
    if (!divides(tp, model.heads) || !divides(tp, model.kv_heads)) continue;
    for (const int dp : divisors(n_gpus / tp)) {
      if (out_of_budget) break;
      if (global % dp != 0) continue;
      const int pp = n_gpus / (tp * dp);
      if (pp > model.layers) continue;  // sailor-AMP/amp_planner.py: pp > layers skipped
      for (const int mb : divisors(global / dp)) {
        const bool spent = use_sim ? evaluator->exhausted()
                                   : (evaluations >= request.budget_evaluations ||
                                      timer.wall_budget_spent(request));
        if (spent) {
          out_of_budget = true;
          break;
        }
        std::string why;
        std::optional<AmpCandidate> c = cost.price(tp, pp, dp, mb, global, &why);
        if (!c) {
          last_invalid = why;
          continue;
        }
        ++candidates;
        if (!use_sim) {
          ++evaluations;  // one own-cost-model evaluation per priced candidate
          if (c->predicted_s < best_time) {  // strict: ties keep the first in enumeration order
            best_time = c->predicted_s;
            best = std::move(c);
          }
          continue;
        }
        Plan p = cost.to_plan(*c);
        apply_megatron_core_ep(p, model);
        std::string sim_why;
        const std::optional<double> t = evaluator->iteration_time(p, &sim_why);
        if (!t) {
          if (sim_why == "out of memory") ++oom;
          else last_invalid = sim_why;
          continue;
        }
        if (*t < best_time) {
          best_time = *t;
          best = std::move(c);
          best_plan = std::move(p);
        }
      }
    }
  }
  result.evaluations = use_sim ? evaluator->evaluations() : evaluations;
  result.search_complete = !out_of_budget;

  if (!best) {
    const std::string what = std::to_string(n_gpus) + " GPUs";
    if (candidates == 0 && !out_of_budget)
      result.reason = "AMP uses all " + what + ": no (tp, pp, dp) with tp*pp*dp = " + std::to_string(n_gpus) +
                      " fits " + model.name + " (tp must divide every node's GPUs (gcd " +
                      std::to_string(cost.gpus_per_node_gcd()) + "), heads and kv_heads; pp <= " +
                      std::to_string(model.layers) + " layers; dp must divide the global batch " +
                      std::to_string(global) + ")" + (last_invalid.empty() ? "" : "; last: " + last_invalid);
    else if (use_sim && !out_of_budget && oom == result.evaluations)
      result.reason = "every AMP configuration of the " + what + " runs out of memory for " + model.name + " (" +
                      std::to_string(oom) + " simulated)";
    else if (out_of_budget)
      result.reason = "budget exhausted after " + std::to_string(result.evaluations) +
                      " evaluations before an AMP configuration fit " + model.name + " in memory";
    else
      result.reason = "no AMP configuration could be priced for " + model.name +
                      (last_invalid.empty() ? "" : " (last: " + last_invalid + ")");
    return timer.finish(result);
  }

  Plan plan = best_plan ? std::move(*best_plan) : cost.to_plan(*best);
  if (!best_plan) apply_megatron_core_ep(plan, model);  // the Megatron-Core EP rule
  validate_plan(plan, cluster, model, global, "amp");
  result.plan = std::move(plan);
  result.predicted_iteration_time_s = best_time;
  return timer.finish(result);
}

}  // namespace arachne::planner
