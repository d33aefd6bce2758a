// Tests of the `amp` baseline (planner/baselines/amp): valid plans on homogeneous and heterogeneous clusters,
// the best of its own space under its own cost model, its signature (compute averaged over GPU types: the
// layer partition does not depend on which GPU type sits where), no memory model (own mode may return a plan
// that does not fit; simulator mode never does), determinism, budgets, the MoE EP rule, and the reason when
// no factorisation of the GPUs fits.
#include <gtest/gtest.h>

#include "tests/sim/test_support.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>

#include "planner/baselines/amp/amp_planner.h"
#include "planner/common/profile.h"
#include "sim/exec/simulate.h"
#include "sim/hw/cluster.h"
#include "sim/hw/topology.h"
#include "sim/plan/plan_yaml.h"

namespace arachne::planner {
namespace {

ModelConfig tiny_model() { return test::small_gpt_model(16); }

PlanRequest request_for(const Cluster& c, const Topology& t, const ModelConfig& m, long budget = 2000,
                        CostModel cm = CostModel::Own) {
  PlanRequest r;
  r.cluster = &c;
  r.topo = &t;
  r.model = &m;
  r.global_batch = m.global_batch;
  r.budget_evaluations = budget;
  r.cost_model = cm;
  return r;
}

std::set<GpuId> gpus_of(const Plan& p) {
  std::set<GpuId> s;
  for (const Pipeline& pl : p.pipelines)
    for (const Stage& st : pl.stages)
      for (const TpGroup& g : st.groups) s.insert(g.gpus.begin(), g.gpus.end());
  return s;
}

// AMP's candidates as its own cost model prices them (for the trials test: it checks what the planner does
// with its ranking, while CostModelMatchesThePublicFormulasAtEveryPoint checks the ranking itself).
std::vector<AmpCandidate> all_candidates(const AmpCostModel& cost, int n_gpus, long global) {
  std::vector<AmpCandidate> out;
  for (int tp = 1; tp <= n_gpus; ++tp)
    for (int dp = 1; dp <= n_gpus; ++dp) {
      if (n_gpus % (tp * dp) != 0) continue;
      for (int mb = 1; mb <= global; ++mb)
        if (auto c = cost.price(tp, n_gpus / (tp * dp), dp, mb, global)) out.push_back(*c);
    }
  return out;
}

// AMP's space on a cluster, written from the public code (AMP/sa.py amp_no_placement_strategy, as the header
// restates it): tp over the divisors of the GPUs per node (the gcd of the node sizes) that divide the heads and
// key/value heads, dp over the divisors of N/tp that divide the global batch, micro-batch over the divisors of
// global/dp, pp = N/(tp*dp) <= layers.
struct AmpPoint {
  int tp, pp, dp, mb;
};
std::vector<AmpPoint> amp_space(const Cluster& c, const ModelConfig& m, long global) {
  int per_node = 0;
  for (const Node& n : c.nodes) per_node = std::gcd(per_node, n.gpus);
  const int n_gpus = c.total_gpus();
  const int kv = m.kv_heads > 0 ? m.kv_heads : m.heads;
  std::vector<AmpPoint> out;
  for (int tp = 1; tp <= per_node; ++tp) {
    if (per_node % tp != 0 || m.heads % tp != 0 || kv % tp != 0) continue;
    for (int dp = 1; dp <= n_gpus / tp; ++dp) {
      if ((n_gpus / tp) % dp != 0 || global % dp != 0) continue;
      const int pp = n_gpus / (tp * dp);
      if (pp > m.layers) continue;
      for (int mb = 1; mb <= global / dp; ++mb)
        if ((global / dp) % mb == 0) out.push_back({tp, pp, dp, mb});
    }
  }
  return out;
}

// Every contiguous partition of `layers` layers into `parts` non-empty stages, as pp+1 boundaries.
void partitions(int layers, int parts, std::vector<int>& bounds, std::vector<std::vector<int>>& out) {
  if (static_cast<int>(bounds.size()) == parts) {
    bounds.push_back(layers);
    out.push_back(bounds);
    bounds.pop_back();
    return;
  }
  const int left = parts - static_cast<int>(bounds.size());  // stages still to open after this one
  for (int next = bounds.back() + 1; next <= layers - left; ++next) {
    bounds.push_back(next);
    partitions(layers, parts, bounds, out);
    bounds.pop_back();
  }
}

// AMP's predicted iteration time of one point, from the public code's formulas with the shared profiler as its
// profile: per-layer compute (forward + backward) averaged over the GPU types by GPU share, plus the TP
// all-reduce of the stage's own node type averaged over its replicas (AMP/cost_het_cluster.py cost_e); per
// cut the activation over the slowest TP-rank link, averaged over replicas (get_cost_c); pipe_cost =
// (B-1) * max stage + sum of stages + sum of cuts (AMP/pipe.py); plus the DP ring all-reduce
// 2(dp-1)/dp * a TP rank's gradient bytes over the slowest ring link, the maximum over stages and TP ranks
// (dp_cost). The partition: pipe_uniform for one micro-batch per pipeline, else pipe_ast's. AMP's cost_e does
// not depend on the stage, so the sum of stages is the same for every partition and pipe_ast's minimum of
// pipe_cost is the partition of least maximum stage; brute-forced here over every contiguous partition. (With
// the TP term of each stage's own node type the stages do differ on a mixed cluster; the port keeps the
// min-max partition there, as its header says, and so does this check.) Partitions that tie on the maximum
// may differ in the rest, so the answer is a range [lo, hi].
std::pair<double, double> amp_by_hand(const Cluster& c, const Topology& t, const ModelConfig& m, const AmpPoint& k,
                                      long global) {
  const Profiler prof(c, m);
  const int L = m.layers, B = static_cast<int>(global / (static_cast<long>(k.dp) * k.mb));
  auto gpu = [&](int s, int d, int r) { return s * k.tp * k.dp + d * k.tp + r; };  // AMP/amp_utils.py axis2rank
  auto bw = [&](GpuId a, GpuId b) {
    double slowest = INFINITY;
    for (const LinkId l : t.route(a, b)) slowest = std::min(slowest, t.links()[l].capacity);
    return slowest;
  };
  auto key = [&](const std::string& type) { return ProfileKey{type, k.tp, static_cast<double>(k.mb)}; };
  std::map<std::string, double> share;
  for (GpuId g = 0; g < c.total_gpus(); ++g) share[c.gpu_spec(g).name] += 1.0 / c.total_gpus();
  auto compute = [&](const LayerProfile& p) { return p.forward_s + p.backward_s; };
  auto stage_cost = [&](int s, int b, int e) {
    double cost = 0;
    for (const auto& [type, w] : share) {
      for (int l = b; l < e; ++l) cost += w * compute(prof.layer(l, key(type)));
      if (b == 0) cost += w * compute(prof.embedding(key(type)));
      if (e == L) cost += w * compute(prof.head(key(type)));
    }
    for (int d = 0; d < k.dp && k.tp > 1; ++d)
      for (int l = b; l < e; ++l) {
        const LayerProfile& p = prof.layer(l, key(c.gpu_spec(gpu(s, d, 0)).name));
        cost += (p.tp_comm_forward_s + p.tp_comm_backward_s) / k.dp;
      }
    return cost;
  };
  double cuts = 0;
  for (int j = 0; j + 1 < k.pp; ++j)
    for (int d = 0; d < k.dp; ++d) {
      double slowest = INFINITY;
      for (int r = 0; r < k.tp; ++r) slowest = std::min(slowest, bw(gpu(j, d, r), gpu(j + 1, d, r)));
      cuts += prof.p2p_bytes(k.mb) / slowest / k.dp;
    }
  std::vector<std::vector<int>> candidates;
  if (B == 1) {  // AMP/pipe.py pipe_uniform: L/pp layers each, the remainder to the first stages
    std::vector<int> bounds{0};
    for (int s = 0; s < k.pp; ++s) bounds.push_back(bounds.back() + L / k.pp + (s < L % k.pp ? 1 : 0));
    candidates.push_back(bounds);
  } else {
    std::vector<int> bounds{0};
    partitions(L, k.pp, bounds, candidates);
  }
  std::vector<std::pair<double, double>> priced;  // (max stage, pipe_cost + dp term) per partition
  for (const std::vector<int>& bounds : candidates) {
    double max_stage = 0, sum = 0, dp_term = 0;
    for (int s = 0; s < k.pp; ++s) {
      const double st = stage_cost(s, bounds[s], bounds[s + 1]);
      max_stage = std::max(max_stage, st);
      sum += st;
      if (k.dp == 1) continue;
      for (int r = 0; r < k.tp; ++r) {
        double slowest = INFINITY;
        for (int d = 0; d < k.dp; ++d) slowest = std::min(slowest, bw(gpu(s, d, r), gpu(s, (d + 1) % k.dp, r)));
        dp_term = std::max(dp_term, 2.0 * (k.dp - 1) / (k.dp * slowest) * prof.grad_bytes(bounds[s], bounds[s + 1], k.tp));
      }
    }
    priced.emplace_back(max_stage, (B - 1) * max_stage + sum + cuts + dp_term);
  }
  double least_max = INFINITY;
  for (const auto& [max_stage, total] : priced) least_max = std::min(least_max, max_stage);
  double lo = INFINITY, hi = 0;
  for (const auto& [max_stage, total] : priced)
    if (max_stage <= least_max * (1 + 1e-12)) lo = std::min(lo, total), hi = std::max(hi, total);
  return {lo, hi};
}

void check_valid_and_best(const std::string& spec) {
  const Cluster c = parse_cluster_spec(spec, GpuCatalog::load_default());
  const Topology t(c);
  const ModelConfig m = tiny_model();
  AmpPlanner amp;
  EXPECT_EQ(amp.name(), "amp");
  const PlanResult r = amp.plan(request_for(c, t, m));
  ASSERT_TRUE(r.plan) << spec << ": " << r.reason;
  EXPECT_NO_THROW(validate_plan(*r.plan, c, m, m.global_batch, "test")) << spec;
  EXPECT_EQ(static_cast<int>(gpus_of(*r.plan).size()), c.total_gpus()) << spec << ": AMP uses every GPU";
  EXPECT_EQ(r.plan->schedule, Schedule::OneFOneB);
  EXPECT_GT(r.predicted_iteration_time_s, 0.0);
  EXPECT_GT(r.evaluations, 0);   // the trials of its top predictions
  EXPECT_LE(r.evaluations, 10);
  EXPECT_TRUE(r.search_complete);
  // Identical pipelines (AMP's uniform DP replicas), TP groups inside one node.
  for (const Pipeline& p : r.plan->pipelines) {
    EXPECT_EQ(p.stages.size(), r.plan->pipelines[0].stages.size());
    for (const Stage& s : p.stages)
      for (const TpGroup& g : s.groups)
        for (const GpuId id : g.gpus) EXPECT_EQ(c.node_of(id), c.node_of(g.gpus[0])) << spec;
  }
  // Its whole space is priced, and the plan is one of its 10 best predictions (the trials): the space and
  // every point's prediction computed by hand above (a 1e-9 relative margin for summation order).
  const auto space = amp_space(c, m, m.global_batch);
  ASSERT_FALSE(space.empty());
  EXPECT_EQ(static_cast<long>(space.size()), r.own_model_evaluations) << "one own-model evaluation per point";
  EXPECT_EQ(r.evaluations, std::min<long>(10, static_cast<long>(space.size())));
  long better = 0;  // points AMP must rank above its plan, whatever the partition tie-break
  for (const AmpPoint& k : space) better += amp_by_hand(c, t, m, k, m.global_batch).second < r.predicted_iteration_time_s * (1 - 1e-9);
  EXPECT_LT(better, 10) << spec;
}

// Its cost model, point by point, against the formulas by hand: on a mixed cluster with TP across both node
// types (TP all-reduce priced on each stage's own node) and on one where a pipeline crosses nodes.
TEST(AmpPlanner, CostModelMatchesThePublicFormulasAtEveryPoint) {
  for (const std::string spec : {"A100-80:1x4,V100-32:1x4", "A100-80:2x4"}) {
    const Cluster c = parse_cluster_spec(spec, GpuCatalog::load_default());
    const Topology t(c);
    const ModelConfig m = tiny_model();
    const AmpCostModel cost(c, t, m);
    for (const AmpPoint& k : amp_space(c, m, m.global_batch)) {
      SCOPED_TRACE(spec + " tp" + std::to_string(k.tp) + " pp" + std::to_string(k.pp) + " dp" + std::to_string(k.dp) +
                   " mb" + std::to_string(k.mb));
      const auto priced = cost.price(k.tp, k.pp, k.dp, k.mb, m.global_batch);
      ASSERT_TRUE(priced);
      const auto [lo, hi] = amp_by_hand(c, t, m, k, m.global_batch);
      EXPECT_GE(priced->predicted_s, lo * (1 - 1e-9));
      EXPECT_LE(priced->predicted_s, hi * (1 + 1e-9));
    }
  }
}

TEST(AmpPlanner, ValidPlanOnHomogeneousCluster) { check_valid_and_best("A100-80:2x4"); }

TEST(AmpPlanner, ValidPlanOnHeterogeneousCluster) {
  check_valid_and_best("A100-80:1x4,V100-32:1x4");
  check_valid_and_best("V100-32:1x4,A100-80:1x2");  // unequal nodes: tp divides the gcd (2)
}

// Pipeline stages follow AMP's rank order: stage s is the contiguous block of tp*dp GPUs starting at s*tp*dp,
// replica d of it starts at s*tp*dp + d*tp (DeepSpeed's (pp, dp, mp) grid, mp fastest).
TEST(AmpPlanner, RanksFollowDeepSpeedGridOrder) {
  const Cluster c = parse_cluster_spec("A100-80:2x4", GpuCatalog::load_default());
  const Topology t(c);
  const ModelConfig m = tiny_model();
  const AmpCostModel cost(c, t, m);
  const auto k = cost.price(2, 2, 2, 1, m.global_batch);
  ASSERT_TRUE(k);
  const Plan p = cost.to_plan(*k);
  ASSERT_EQ(p.pipelines.size(), 2u);
  for (int d = 0; d < 2; ++d)
    for (int s = 0; s < 2; ++s) {
      const TpGroup& g = p.pipelines[d].stages[s].groups[0];
      EXPECT_EQ(g.gpus, (std::vector<GpuId>{s * 4 + d * 2, s * 4 + d * 2 + 1}));
    }
  // The pipeline crosses the two nodes; its DP replicas share a node.
  EXPECT_NE(c.node_of(p.pipelines[0].stages[0].groups[0].gpus[0]), c.node_of(p.pipelines[0].stages[1].groups[0].gpus[0]));
}

// Two clusters of one A100 node and one V100 node whose node networking is made identical (same intra-node
// fabric and NICs): only compute differs. AMP averages compute over the GPU types, so its partition and its
// prediction are the same whichever node hosts the first stage, and each stage's estimate is the average of
// the two types' times. A heterogeneity-aware planner would give the A100 stage more layers when the A100
// node comes first and fewer when it comes second, and would price each stage on its own GPU type: every
// assertion below would fail for it.
Cluster two_types_same_network(const std::string& spec) {
  Cluster c = parse_cluster_spec(spec, GpuCatalog::load_default());
  for (NodeGroup& g : c.groups) {
    g.intra_kind = c.groups[0].intra_kind;
    g.intra_bw = 300e9;
    g.nic_count = 1;
    g.nic_bw = 25e9;
  }
  return c;
}

TEST(AmpPlanner, IgnoresComputeHeterogeneity) {
  const Cluster a100_first = two_types_same_network("A100-80:1x4,V100-32:1x4");
  const Cluster v100_first = two_types_same_network("V100-32:1x4,A100-80:1x4");
  const Topology ta(a100_first), tv(v100_first);
  ModelConfig m = tiny_model();
  m.hidden = 2048;  // large enough GEMMs for the A100/V100 peak ratio to show
  m.ffn_hidden = 8192;
  const AmpCostModel ca(a100_first, ta, m), cv(v100_first, tv, m);
  // tp 1, pp 2, dp 4: stage 0 on the first node, stage 1 on the second; B = 16/(4*1) = 4 (the DP partition).
  const auto ka = ca.price(1, 2, 4, 1, m.global_batch);
  const auto kv = cv.price(1, 2, 4, 1, m.global_batch);
  ASSERT_TRUE(ka && kv);
  EXPECT_EQ(ka->bounds, kv->bounds);
  // With one averaged GPU, the last stage (it also holds the head) is the heavier one per layer, so the first
  // stage never gets fewer layers, whichever type it runs on (a heterogeneity-aware split gives the V100 stage
  // fewer layers when the V100 node comes first).
  EXPECT_GE(ka->bounds[1] - ka->bounds[0], ka->bounds[2] - ka->bounds[1]);
  for (int s = 0; s < 2; ++s) EXPECT_NEAR(ka->stage_s[s], kv->stage_s[s], 1e-12 * ka->stage_s[s]);
  EXPECT_NEAR(ka->predicted_s, kv->predicted_s, 1e-12 * ka->predicted_s);

  // The estimate of a stage is the GPU-share average of the two types' profiled times, not its own type's.
  const Profiler prof(a100_first, m);
  for (int s = 0; s < 2; ++s) {
    ProfileKey a{"A100-80", 1, 1.0}, v{"V100-32", 1, 1.0};
    const double ta_s = prof.stage_time_s(ka->bounds[s], ka->bounds[s + 1], a);
    const double tv_s = prof.stage_time_s(ka->bounds[s], ka->bounds[s + 1], v);
    ASSERT_GT(tv_s, 1.4 * ta_s) << "the two types must differ in compute for this test to mean anything";
    EXPECT_NEAR(ka->stage_s[s], 0.5 * ta_s + 0.5 * tv_s, 1e-9 * ka->stage_s[s]);
  }

  // The whole search: the same top-ranked configuration and partition for both orders (one trial: the
  // trials are simulations, which do see the GPU types).
  AmpPlanner amp(AmpPlanner::Options{1});
  const PlanResult ra = amp.plan(request_for(a100_first, ta, m));
  const PlanResult rv = amp.plan(request_for(v100_first, tv, m));
  ASSERT_TRUE(ra.plan && rv.plan);
  EXPECT_NEAR(ra.predicted_iteration_time_s, rv.predicted_iteration_time_s, 1e-12 * ra.predicted_iteration_time_s);
  ASSERT_EQ(ra.plan->pipelines.size(), rv.plan->pipelines.size());
  for (size_t i = 0; i < ra.plan->pipelines.size(); ++i) {
    const Pipeline &pa = ra.plan->pipelines[i], &pv = rv.plan->pipelines[i];
    EXPECT_EQ(pa.micro_batch, pv.micro_batch);
    ASSERT_EQ(pa.stages.size(), pv.stages.size());
    for (size_t s = 0; s < pa.stages.size(); ++s) {
      EXPECT_EQ(pa.stages[s].layer_begin, pv.stages[s].layer_begin);
      EXPECT_EQ(pa.stages[s].layer_end, pv.stages[s].layer_end);
      EXPECT_EQ(pa.stages[s].groups[0].gpus, pv.stages[s].groups[0].gpus);
    }
  }
}

// Bandwidth, on the other hand, is seen: a p2p cut between two nodes costs more than one inside a node.
TEST(AmpPlanner, SeesBandwidthHeterogeneity) {
  const Cluster c = parse_cluster_spec("A100-80:2x4", GpuCatalog::load_default());
  const Topology t(c);
  const ModelConfig m = tiny_model();
  const AmpCostModel cost(c, t, m);
  // tp1 pp2 dp4: the cut crosses the NICs; tp1 pp2 dp2 on a 4-GPU node: inside NVLink.
  const auto across = cost.price(1, 2, 4, 1, m.global_batch);
  const Cluster one = parse_cluster_spec("A100-80:1x4", GpuCatalog::load_default());
  const Topology t1(one);
  const AmpCostModel cost1(one, t1, m);
  const auto inside = cost1.price(1, 2, 2, 1, m.global_batch);
  ASSERT_TRUE(across && inside);
  EXPECT_GT(across->p2p_s, 2 * inside->p2p_s);
}

TEST(AmpPlanner, Deterministic) {
  const Cluster c = parse_cluster_spec("A100-80:1x4,V100-32:1x4", GpuCatalog::load_default());
  const Topology t(c);
  const ModelConfig m = tiny_model();
  AmpPlanner a, b;
  const PlanResult r1 = a.plan(request_for(c, t, m));
  const PlanResult r2 = b.plan(request_for(c, t, m));
  const PlanResult r3 = a.plan(request_for(c, t, m));
  ASSERT_TRUE(r1.plan && r2.plan && r3.plan);
  EXPECT_EQ(plan_to_yaml(*r1.plan, c), plan_to_yaml(*r2.plan, c));
  EXPECT_EQ(plan_to_yaml(*r1.plan, c), plan_to_yaml(*r3.plan, c));
  EXPECT_EQ(r1.predicted_iteration_time_s, r2.predicted_iteration_time_s);
  EXPECT_EQ(r1.evaluations, r2.evaluations);
}

TEST(AmpPlanner, BudgetRespected) {
  const Cluster c = parse_cluster_spec("A100-80:1x4,V100-32:1x4", GpuCatalog::load_default());
  const Topology t(c);
  const ModelConfig m = tiny_model();
  AmpPlanner amp;
  const PlanResult full = amp.plan(request_for(c, t, m));
  ASSERT_GT(full.evaluations, 3);  // precondition: more than 3 trials
  for (const long budget : {1L, 3L}) {
    // The budget counts simulations: it cuts the trials, never the own-model ranking.
    const PlanResult r = amp.plan(request_for(c, t, m, budget));
    EXPECT_EQ(r.evaluations, budget);
    EXPECT_EQ(r.own_model_evaluations, full.own_model_evaluations);
    EXPECT_FALSE(r.search_complete);
    // The small model fits every AMP point on these GPUs, so the first trial is already a plan.
    ASSERT_TRUE(r.plan) << "budget " << budget << ": " << r.reason;
    EXPECT_NO_THROW(validate_plan(*r.plan, c, m, m.global_batch, "test"));
  }
  const PlanResult s = amp.plan(request_for(c, t, m, 2, CostModel::Simulator));
  EXPECT_LE(s.evaluations, 2);
  EXPECT_FALSE(s.search_complete);
}

TEST(AmpPlanner, SimulatorCostModelReturnsAPlanThatFits) {
  const Cluster c = parse_cluster_spec("A100-80:1x4,V100-32:1x4", GpuCatalog::load_default());
  const Topology t(c);
  const ModelConfig m = tiny_model();
  AmpPlanner amp;
  const PlanResult r = amp.plan(request_for(c, t, m, 200, CostModel::Simulator));
  ASSERT_TRUE(r.plan) << r.reason;
  EXPECT_NO_THROW(validate_plan(*r.plan, c, m, m.global_batch, "test"));
  const SimResult sim = simulate_iteration(c, t, m, *r.plan, SimOptions{});
  EXPECT_FALSE(sim.oom);
  EXPECT_NEAR(sim.iteration_time_s, r.predicted_iteration_time_s, 1e-9 * sim.iteration_time_s);
  EXPECT_LE(r.evaluations, 200);
  // Same space as the own model: the simulated best is at least as fast as the own model's choice.
  const PlanResult own = amp.plan(request_for(c, t, m));
  ASSERT_TRUE(own.plan);
  const SimResult own_sim = simulate_iteration(c, t, m, *own.plan, SimOptions{});
  // The small model (0.13 B parameters, ~2 GB of weights and Adam state) fits every AMP point on 32/80 GB GPUs.
  ASSERT_FALSE(own_sim.oom);
  EXPECT_LE(r.predicted_iteration_time_s, own_sim.iteration_time_s * (1 + 1e-12));
}

// No memory model: a 7B model on four 16 GB GPUs cannot fit in any configuration (Adam states alone need
// ~28 GB per GPU), yet AMP's own model ranks configurations; every trial of its top predictions runs out of
// memory, so there is no plan, and the reason says so. Under the simulator cost model the out-of-memory
// candidates are skipped and there is no plan either.
TEST(AmpPlanner, NoMemoryModel) {
  const Cluster c = parse_cluster_spec("V100-16:1x4", GpuCatalog::load_default());
  const Topology t(c);
  ModelConfig m = load_model("llama2-7b");
  m.global_batch = 8;
  AmpPlanner amp;
  const PlanResult own = amp.plan(request_for(c, t, m));
  EXPECT_FALSE(own.plan);
  EXPECT_GT(own.own_model_evaluations, 0);
  EXPECT_EQ(own.evaluations, std::min(10L, own.own_model_evaluations));
  EXPECT_NE(own.reason.find("top"), std::string::npos) << own.reason;
  const PlanResult sim = amp.plan(request_for(c, t, m, 4, CostModel::Simulator));
  EXPECT_FALSE(sim.plan);
  EXPECT_FALSE(sim.reason.empty());
  EXPECT_LE(sim.evaluations, 4);
}

// AMP has no memory model, so its best prediction may not fit: gpt3-1.3b on four 40 GB A100s, batch 16. The
// public het_cluster.py runs real trials of its top predictions (`--full --budget 10`); here each trial is a
// simulation, and the fastest trial that fits wins. The case is derived, not assumed: the test ranks AMP's
// space itself and checks that the top-1 prediction runs out of memory and that some of the top 10 fit.
TEST(AmpPlanner, TrialsReplaceAnOutOfMemoryTopPrediction) {
  const Cluster c = parse_cluster_spec("A100-40:1x4", GpuCatalog::load_default());
  const Topology t(c);
  ModelConfig m = load_model("gpt3-1.3b");
  m.global_batch = 16;
  const AmpCostModel cost(c, t, m);
  std::vector<AmpCandidate> ranked = all_candidates(cost, c.total_gpus(), m.global_batch);
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const AmpCandidate& a, const AmpCandidate& b) { return a.predicted_s < b.predicted_s; });
  ASSERT_GT(ranked.size(), 10u);
  ASSERT_TRUE(simulate_iteration(c, t, m, cost.to_plan(ranked[0]), SimOptions{}).oom) << "precondition: top-1 is OOM";
  std::vector<double> fitting;  // simulated times of the top 10 that fit
  for (size_t i = 0; i < 10; ++i) {
    const SimResult s = simulate_iteration(c, t, m, cost.to_plan(ranked[i]), SimOptions{});
    if (!s.oom) fitting.push_back(s.iteration_time_s);
  }
  ASSERT_FALSE(fitting.empty()) << "precondition: one of the top 10 fits";

  const PlanResult r = AmpPlanner().plan(request_for(c, t, m));
  ASSERT_TRUE(r.plan) << r.reason;
  const SimResult sim = simulate_iteration(c, t, m, *r.plan, SimOptions{});
  EXPECT_FALSE(sim.oom);
  EXPECT_EQ(r.evaluations, 10);  // ten trials, each one simulator evaluation
  EXPECT_TRUE(r.search_complete);
  EXPECT_GT(r.predicted_iteration_time_s, ranked[0].predicted_s);  // not the top-1 prediction
  for (const double f : fitting) EXPECT_LE(sim.iteration_time_s, f * (1 + 1e-12));  // the fastest that fits
  // A budget of 1 simulation allows only the top-1 trial, which does not fit: no plan, and the search says
  // it was cut.
  const PlanResult cut = AmpPlanner().plan(request_for(c, t, m, 1));
  EXPECT_FALSE(cut.plan);
  EXPECT_FALSE(cut.search_complete);
  EXPECT_EQ(cut.evaluations, 1);
}

TEST(AmpPlanner, MoeModelGetsMegatronCoreEp) {
  // 16 GPUs: on 8, none of AMP's 10 best predictions for this 26.7 B-parameter MoE fits in memory.
  const Cluster c = parse_cluster_spec("A100-80:2x8", GpuCatalog::load_default());
  const Topology t(c);
  const ModelConfig m = load_model("gpt-moe-1.3b-64e");
  AmpPlanner amp;
  PlanRequest req = request_for(c, t, m);
  req.global_batch = 64;
  const PlanResult r = amp.plan(req);
  ASSERT_TRUE(r.plan) << r.reason;
  EXPECT_NO_THROW(validate_plan(*r.plan, c, m, 64, "test"));
  // Identical pipelines: every stage's EP is the largest divisor of the expert count and the DP degree.
  const int dp = static_cast<int>(r.plan->pipelines.size());
  const int want = std::gcd(m.moe->experts, dp);
  for (const Pipeline& p : r.plan->pipelines)
    for (const Stage& s : p.stages) {
      EXPECT_EQ(s.ep, want);
      if (want > 1) {
        EXPECT_EQ(s.ep_scope, EpScope::Pipelines);
      }
    }
  // Priced as the activated dense model: the same prediction as for the dense equivalent's compute (the
  // MoE model's extra expert parameters only enter the DP gradient term).
  const AmpCostModel moe_cost(c, t, m);
  const ModelConfig dense = activated_dense_equivalent(m);
  const AmpCostModel dense_cost(c, t, dense);
  const int tp = r.plan->pipelines[0].stages[0].groups[0].tp;
  const int pp = static_cast<int>(r.plan->pipelines[0].stages.size());
  const auto km = moe_cost.price(tp, pp, dp, r.plan->pipelines[0].micro_batch, 64);
  const auto kd = dense_cost.price(tp, pp, dp, r.plan->pipelines[0].micro_batch, 64);
  ASSERT_TRUE(km && kd);
  EXPECT_EQ(km->bounds, kd->bounds);
  EXPECT_NEAR(km->pipeline_s, kd->pipeline_s, 1e-9 * kd->pipeline_s);
}

TEST(AmpPlanner, NoFactorisationFitsSaysSo) {
  // 3 GPUs, a 2-layer model, batch 16: dp 3 does not divide the batch and dp 1 needs pp 3 > 2 layers.
  const Cluster c = parse_cluster_spec("A100-80:1x1,V100-32:1x2", GpuCatalog::load_default());
  const Topology t(c);
  ModelConfig m = tiny_model();
  m.layers = 2;
  AmpPlanner amp;
  const PlanResult r = amp.plan(request_for(c, t, m));
  EXPECT_FALSE(r.plan);
  EXPECT_NE(r.reason.find("AMP uses all 3 GPUs"), std::string::npos) << r.reason;
  EXPECT_EQ(r.evaluations, 0);
}

}  // namespace
}  // namespace arachne::planner
