// The `amp` baseline planner (algorithm, cost model and sources in amp_planner.h).
#include "planner/baselines/amp/amp_planner.h"

#include <algorithm>
#include <chrono>
#include <functional>
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

// The divisors of n in increasing order, in O(sqrt(n)) (n is a GPU count or a global batch).
std::vector<int> divisors(long n) {
  std::vector<int> small, large;
  for (long i = 1; i * i <= n; ++i) {
    if (n % i != 0) continue;
    small.push_back(static_cast<int>(i));
    if (i != n / i) large.push_back(static_cast<int>(n / i));
  }
  small.insert(small.end(), large.rbegin(), large.rend());
  return small;
}

bool divides(int d, int n) { return n <= 0 || n % d == 0; }

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
  c.bounds = B == 1 ? even_partition(L, pp) : minmax_partition(L, pp, stage_cost);
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

namespace {

// AMP's space in its enumeration order (AMP/sa.py amp_no_placement_strategy): tp over the divisors of the
// GPUs per node, dp over the divisors of N/tp that divide the batch, micro-batch over the divisors of the
// per-replica batch; pp = N/(tp*dp). Every configuration is priced by the own model (free of the budget);
// `stop` (a wall-clock cap) may cut the enumeration, then *cut is set.
struct AmpSpace {
  std::vector<AmpCandidate> candidates;  // enumeration order
  std::string last_invalid;
  bool cut = false;
};

AmpSpace enumerate_space(const AmpCostModel& cost, const ModelConfig& model, int n_gpus, long global,
                         const std::function<bool()>& stop) {
  AmpSpace space;
  for (const int tp : divisors(cost.gpus_per_node_gcd())) {
    if (!divides(tp, model.heads) || !divides(tp, model.kv_heads)) continue;
    for (const int dp : divisors(n_gpus / tp)) {
      if (global % dp != 0) continue;
      const int pp = n_gpus / (tp * dp);
      if (pp > model.layers) continue;  // sailor-AMP/amp_planner.py: pp > layers skipped
      for (const int mb : divisors(global / dp)) {
        if (stop()) {
          space.cut = true;
          return space;
        }
        std::string why;
        std::optional<AmpCandidate> c = cost.price(tp, pp, dp, mb, global, &why);
        if (c) space.candidates.push_back(std::move(*c));
        else space.last_invalid = why;
      }
    }
  }
  return space;
}

// The chosen configuration: its plan, and the time it was chosen by (own prediction or simulated time).
struct AmpChoice {
  std::optional<AmpCandidate> candidate;
  std::optional<Plan> plan;
  double time_s = std::numeric_limits<double>::infinity();
  long trials = 0, oom = 0;  // simulated, of which out of memory
  bool budget_cut = false;
};

// AMP/het_cluster.py (lines 108-131): the candidates sorted by predicted cost (Python's stable sort: ties
// keep the enumeration order), then real trials of the first `budget` of them (`--full --budget 10`, the
// README's command for the heterogeneous-cluster experiment). A trial here is a simulation; a trial that
// runs out of memory gives no runtime (the simulator's memory check stands in for the real OOM). The fastest
// trial that fits wins (ties: the better-ranked one).
AmpChoice trial_top_predictions(const AmpCostModel& cost, const ModelConfig& model, std::vector<AmpCandidate> ranked,
                                int trials, Evaluator& evaluator) {
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const AmpCandidate& a, const AmpCandidate& b) { return a.predicted_s < b.predicted_s; });
  AmpChoice choice;
  for (size_t i = 0; i < ranked.size() && i < static_cast<size_t>(trials); ++i) {
    if (evaluator.exhausted()) {
      choice.budget_cut = true;
      break;
    }
    Plan p = cost.to_plan(ranked[i]);
    apply_megatron_core_ep(p, model);
    std::string why;
    const std::optional<double> t = evaluator.iteration_time(p, &why);
    ++choice.trials;
    if (!t) {
      ++choice.oom;  // every AMP plan is valid, so a failed trial is an out-of-memory one
      continue;
    }
    if (*t < choice.time_s) {
      choice.time_s = *t;
      choice.candidate = ranked[i];
      choice.plan = std::move(p);
    }
  }
  return choice;
}

// --cost-model simulator: every configuration of the space is simulated, in enumeration order, within the
// budget; out-of-memory ones are skipped; the fastest wins (ties: the first).
AmpChoice simulate_all(const AmpCostModel& cost, const ModelConfig& model, const std::vector<AmpCandidate>& space,
                       Evaluator& evaluator) {
  AmpChoice choice;
  for (const AmpCandidate& c : space) {
    if (evaluator.exhausted()) {
      choice.budget_cut = true;
      break;
    }
    Plan p = cost.to_plan(c);
    apply_megatron_core_ep(p, model);
    std::string why;
    const std::optional<double> t = evaluator.iteration_time(p, &why);
    ++choice.trials;
    if (!t) {
      ++choice.oom;
      continue;
    }
    if (*t < choice.time_s) {
      choice.time_s = *t;
      choice.candidate = c;
      choice.plan = std::move(p);
    }
  }
  return choice;
}

std::string no_plan_reason(const AmpSpace& space, const AmpChoice& choice, const AmpCostModel& cost,
                           const ModelConfig& model, int n_gpus, long global, bool own) {
  const std::string what = std::to_string(n_gpus) + " GPUs";
  if (space.candidates.empty() && !space.cut)
    return "AMP uses all " + what + ": no (tp, pp, dp) with tp*pp*dp = " + std::to_string(n_gpus) + " fits " +
           model.name + " (tp must divide every node's GPUs (gcd " + std::to_string(cost.gpus_per_node_gcd()) +
           "), heads and kv_heads; pp <= " + std::to_string(model.layers) + " layers; dp must divide the global batch " +
           std::to_string(global) + ")" + (space.last_invalid.empty() ? "" : "; last: " + space.last_invalid);
  if (space.candidates.empty()) return "the wall-clock budget ran out before AMP priced a configuration";
  if (choice.trials > 0 && choice.oom == choice.trials) {
    const std::string n = std::to_string(choice.trials);
    const std::string cut = choice.budget_cut ? "; budget exhausted" : "";
    if (own)
      return "none of AMP's top " + n + " predictions fits " + model.name +
             " in memory (simulated trials; AMP has no memory model)" + cut;
    return "every one of the " + n + " simulated AMP configurations runs out of memory for " + model.name + cut;
  }
  return "budget exhausted after " + std::to_string(choice.trials) + " simulator evaluations before an AMP " +
         "configuration fit " + model.name + " in memory";
}

}  // namespace

PlanResult AmpPlanner::plan(const PlanRequest& request) {
  const PlanTimer timer;

  long global = 0;
  if (auto refused = refused_request(request, "amp", timer, &global)) return *refused;
  const Cluster& cluster = *request.cluster;
  const ModelConfig& model = *request.model;

  PlanResult result;
  const int n_gpus = cluster.total_gpus();
  std::optional<Topology> own_topo;
  if (!request.topo) own_topo.emplace(cluster);
  PlanRequest req = request;
  req.topo = request.topo ? request.topo : &*own_topo;

  const AmpCostModel cost(cluster, *req.topo, model);
  const bool own = request.cost_model == CostModel::Own;
  Evaluator evaluator(req);

  // 1. Price AMP's whole space with its own model (no cap in the public code; only --budget-wall).
  const AmpSpace space = enumerate_space(cost, model, n_gpus, global, [&] { return timer.wall_budget_spent(request); });
  result.own_model_evaluations = static_cast<long>(space.candidates.size());
  // 2. Own model: trials of the top predictions; simulator: every configuration.
  const AmpChoice choice = own ? trial_top_predictions(cost, model, space.candidates, options_.trials, evaluator)
                               : simulate_all(cost, model, space.candidates, evaluator);
  result.evaluations = evaluator.evaluations();
  result.search_complete = !space.cut && !choice.budget_cut;

  if (!choice.plan) {
    result.reason = no_plan_reason(space, choice, cost, model, n_gpus, global, own);
    return timer.finish(result);
  }
  validate_plan(*choice.plan, cluster, model, global, "amp");
  result.plan = *choice.plan;
  result.predicted_iteration_time_s = own ? choice.candidate->predicted_s : choice.time_s;
  return timer.finish(result);
}

}  // namespace arachne::planner
