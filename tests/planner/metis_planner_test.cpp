// Tests of the `metis` baseline (planner/baselines/metis): valid single-pipeline plans over every GPU on
// homogeneous and heterogeneous clusters; its signatures — a stage's micro-batch split over its TP groups in
// proportion to their profiled speed, DP traded for TP where memory is short, layers balanced in
// proportion to stage compute performance; device-group shapes; determinism; budgets; EP for MoE models.
#include <gtest/gtest.h>

#include "tests/sim/test_support.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "planner/baselines/metis/metis_planner.h"
#include "planner/common/profile.h"
#include "planner/planner.h"
#include "sim/exec/simulate.h"
#include "sim/hw/cluster.h"
#include "sim/hw/topology.h"
#include "sim/plan/plan_yaml.h"

namespace arachne::planner {
namespace {

struct MetisSetup {
  Cluster cluster;
  Topology topo;
  ModelConfig model;
  explicit MetisSetup(const std::string& spec, ModelConfig m)
      : cluster(load_cluster(spec, GpuCatalog::load_default())), topo(cluster), model(std::move(m)) {}
  PlanRequest request(long budget = 2000, CostModel cm = CostModel::Own) const {
    PlanRequest r;
    r.cluster = &cluster;
    r.topo = &topo;
    r.model = &model;
    r.global_batch = model.global_batch;
    r.budget_evaluations = budget;
    r.cost_model = cm;
    return r;
  }
};

const std::string& type_of(const Cluster& c, GpuId g) { return c.group_of_node(c.node_of(g)).gpu; }

// Valid on the request's cluster, one pipeline, every GPU used once, TP groups of one type inside one node,
// and it fits in the simulator.
void check_plan(const MetisSetup& s, const PlanResult& r) {
  ASSERT_TRUE(r.plan) << r.reason;
  const Plan& p = *r.plan;
  EXPECT_NO_THROW(validate_plan(p, s.cluster, s.model, s.model.global_batch, "test"));
  ASSERT_EQ(p.pipelines.size(), 1u);  // Metis: one pipeline whose stages are device groups
  EXPECT_EQ(p.num_gpus(), s.cluster.total_gpus());  // Metis uses every GPU
  for (const Stage& st : p.pipelines[0].stages)
    for (const TpGroup& g : st.groups) {
      std::set<int> nodes;
      for (const GpuId id : g.gpus) nodes.insert(s.cluster.node_of(id));
      EXPECT_EQ(nodes.size(), 1u) << "TP group " << g.selector << " spans nodes";
    }
  EXPECT_GT(r.predicted_iteration_time_s, 0.0);
  EXPECT_EQ(r.evaluations, 0);  // own model: no simulation
  EXPECT_GT(r.own_model_evaluations, 0);
  EXPECT_GE(r.planning_time_s, 0.0);
  const SimResult sim = simulate_iteration(s.cluster, s.topo, s.model, p, SimOptions{});
  EXPECT_FALSE(sim.oom) << "Metis's memory model let an out-of-memory plan through";
}

TEST(MetisPlanner, ValidPlanOnHomogeneousCluster) {
  const MetisSetup s("A100-80:2x4", test::small_gpt_model(32));
  MetisPlanner planner;
  EXPECT_EQ(planner.name(), "metis");
  const PlanResult r = planner.plan(s.request());
  check_plan(s, r);
}

TEST(MetisPlanner, ValidPlanOnHeterogeneousCluster) {
  const MetisSetup s("A100-80:1x4,V100-32:1x4", test::small_gpt_model(32));
  const PlanResult r = MetisPlanner().plan(s.request());
  check_plan(s, r);
}

// DataLoadBalancer: one stage holding two A100 and two V100 TP groups; the A100 groups take larger shares,
// in the ratio of the profiled speeds up to the rounding to whole samples.
TEST(MetisPlanner, StageBatchSplitProportionalToSpeed) {
  ModelConfig m = test::small_gpt_model(64);
  const MetisSetup s("A100-80:1x2,V100-32:1x2", m);
  MetisPlanner::Options o;
  o.only_type_order = {"A100-80", "V100-32"};
  o.only_device_groups = {4};
  o.only_batches = 4;  // micro-batch 16 over the stage's groups
  const PlanResult r = MetisPlanner(o).plan(s.request());
  check_plan(s, r);
  ASSERT_TRUE(r.plan);
  const Pipeline& pl = r.plan->pipelines[0];
  ASSERT_EQ(pl.stages.size(), 1u);
  const Stage& st = pl.stages[0];
  ASSERT_EQ(st.groups.size(), 4u);  // all-DP fits this small model: no DP traded for TP
  const Profiler prof(s.cluster, s.model);
  std::vector<double> speed;
  for (const TpGroup& g : st.groups) speed.push_back(1.0 / prof.stage_time_s(0, m.layers, ProfileKey{type_of(s.cluster, g.gpus[0]), 1, 1.0}));
  const double total = std::accumulate(speed.begin(), speed.end(), 0.0);
  double a100 = 0, v100 = 0;
  for (size_t k = 0; k < st.groups.size(); ++k) {
    const double samples = st.groups[k].share * pl.micro_batch;
    EXPECT_NEAR(samples, std::round(samples), 1e-9);           // whole samples
    EXPECT_LT(std::abs(samples - pl.micro_batch * speed[k] / total), 1.0);  // largest-remainder rounding
    (type_of(s.cluster, st.groups[k].gpus[0]) == "A100-80" ? a100 : v100) += st.groups[k].share;
  }
  EXPECT_GT(speed[0], speed[2]);  // A100 faster than V100 in the profile
  EXPECT_GT(a100, v100);
}

// LayerComputeBalancer on its own: layers in proportion to stage performance.
TEST(MetisPlanner, LayerBalancerIsComputeProportional) {
  const std::vector<double> demand(12, 1.0 / 12);
  const std::vector<int> p = metis_detail::balance_layers({0.75, 0.25}, demand);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p.front(), 0);
  EXPECT_EQ(p.back(), 12);
  EXPECT_NEAR(p[1], 9, 1);  // 3/4 of 12 layers, within one layer
  const std::vector<int> q = metis_detail::balance_layers({1.0 / 3, 1.0 / 3, 1.0 / 3}, demand);
  ASSERT_EQ(q.size(), 4u);
  for (int s = 0; s < 3; ++s) EXPECT_NEAR(q[s + 1] - q[s], 4, 1);
}

// In a plan: an A100 stage and a V100 stage of equal size; the faster stage holds more layers, whichever
// comes first in the pipeline.
TEST(MetisPlanner, FasterStageGetsMoreLayers) {
  ModelConfig m = test::small_gpt_model(32);
  m.layers = 16;  // enough layers for the split to show the speed ratio (A100/V100 ~ 1.6 here)
  m.hidden = 2048;
  m.ffn_hidden = 8192;
  m.vocab = 1024;  // a head as cheap as a fraction of a layer: layer counts then measure compute
  const MetisSetup s("A100-80:1x4,V100-32:1x4", m);
  for (const bool a100_first : {true, false}) {
    MetisPlanner::Options o;
    o.only_type_order = a100_first ? std::vector<std::string>{"A100-80", "V100-32"} : std::vector<std::string>{"V100-32", "A100-80"};
    o.only_device_groups = {4, 4};
    o.only_batches = 4;  // micro-batch 8: two samples per group
    const PlanResult r = MetisPlanner(o).plan(s.request());
    check_plan(s, r);
    ASSERT_TRUE(r.plan);
    const auto& stages = r.plan->pipelines[0].stages;
    ASSERT_EQ(stages.size(), 2u);
    const Stage& fast = a100_first ? stages[0] : stages[1];
    const Stage& slow = a100_first ? stages[1] : stages[0];
    EXPECT_EQ(type_of(s.cluster, fast.groups[0].gpus[0]), "A100-80");
    EXPECT_GT(fast.layer_end - fast.layer_begin, slow.layer_end - slow.layer_begin) << (a100_first ? "A100 first" : "V100 first");
  }
}

// The greedy step on its own: the stage with the least memory headroom (that still has DP) trades DP for TP;
// without a memory state, the largest-DP stage.
TEST(MetisPlanner, NextStrategyConvertsTheTightestStage) {
  std::vector<std::pair<int, int>> st = {{4, 1}, {4, 1}, {2, 1}};
  ASSERT_TRUE(metis_detail::next_strategy(st, {5e9, -2e9, 1e9}));
  EXPECT_EQ(st, (std::vector<std::pair<int, int>>{{4, 1}, {2, 2}, {2, 1}}));
  ASSERT_TRUE(metis_detail::next_strategy(st, {5e9, -1e9, -3e9}));
  EXPECT_EQ(st, (std::vector<std::pair<int, int>>{{4, 1}, {2, 2}, {1, 2}}));
  ASSERT_TRUE(metis_detail::next_strategy(st, {5e9, 1e9, -3e9}));  // tightest has dp = 1: next tightest
  EXPECT_EQ(st, (std::vector<std::pair<int, int>>{{4, 1}, {1, 4}, {1, 2}}));
  ASSERT_TRUE(metis_detail::next_strategy(st, {}));  // no memory state: 1/dp, the largest DP first
  EXPECT_EQ(st, (std::vector<std::pair<int, int>>{{2, 2}, {1, 4}, {1, 2}}));
  std::vector<std::pair<int, int>> done = {{1, 2}, {1, 4}};
  EXPECT_FALSE(metis_detail::next_strategy(done, {}));
}

// Greedy DP -> TP in a plan: gpt3-2.7b (short sequences: parameters dominate memory) cannot fit 2 x 16 GB
// per stage with tp = 1 in any layer split (half the model's training state alone exceeds 16 GB); Metis
// trades DP for TP until it fits. With 80 GB GPUs all-DP fits and is kept.
TEST(MetisPlanner, TradesDataForTensorParallelismWhenMemoryIsShort) {
  ModelConfig m = load_model("gpt3-2.7b");
  m.seq_len = 256;
  m.global_batch = 16;
  MetisPlanner::Options o;
  o.only_device_groups = {2, 2};
  o.only_batches = 8;  // micro-batch 2: one sample per group under all-DP
  {
    const MetisSetup s("V100-16:1x4", m);
    const Profiler prof(s.cluster, s.model);
    const double cap = prof.gpu_memory_bytes("V100-16");
    // Premise: with tp = 1 neither half fits, so no split of the layers does.
    ASSERT_GT(prof.stage_memory_bytes(0, m.layers / 2, ProfileKey{"V100-16", 1, 1.0}, 2), cap);
    ASSERT_GT(prof.stage_memory_bytes(m.layers / 2, m.layers, ProfileKey{"V100-16", 1, 1.0}, 1), cap);
    const PlanResult r = MetisPlanner(o).plan(s.request());
    check_plan(s, r);
    ASSERT_TRUE(r.plan);
    for (const Stage& st : r.plan->pipelines[0].stages) {
      EXPECT_GT(st.groups[0].tp, 1);
      // Memory (Profiler) of every group fits, at its share of the micro-batch and 1F1B in-flight count.
      const int j = static_cast<int>(&st - &r.plan->pipelines[0].stages[0]);
      for (const TpGroup& g : st.groups)
        EXPECT_LE(prof.stage_memory_bytes(st.layer_begin, st.layer_end, ProfileKey{"V100-16", g.tp, g.share * r.plan->pipelines[0].micro_batch},
                                          std::min(2 - j, r.plan->pipelines[0].micro_batches)),
                  cap);
    }
  }
  {
    const MetisSetup s("A100-80:1x4", m);
    const PlanResult r = MetisPlanner(o).plan(s.request());
    check_plan(s, r);
    ASSERT_TRUE(r.plan);
    for (const Stage& st : r.plan->pipelines[0].stages) {
      EXPECT_EQ(st.groups.size(), 2u);
      EXPECT_EQ(st.groups[0].tp, 1);
    }
  }
}

TEST(MetisPlanner, DeviceGroupShapes) {
  // 8 GPUs in 3 stages: sizes >= max(8/3, 3/8) * 0.5 = 1, powers of two summing to 8: {2,2,4} in 3 orders.
  const auto dg = metis_detail::device_groups(3, 8, 0.5, 10);
  EXPECT_EQ(dg.size(), 3u);
  for (const auto& g : dg) {
    EXPECT_EQ(std::accumulate(g.begin(), g.end(), 0), 8);
    for (const int x : g) EXPECT_EQ(x & (x - 1), 0) << x;
  }
  // Key idea 1: with 2 stages of 16 GPUs no stage is smaller than 16/2 * 0.5 = 4.
  for (const auto& g : metis_detail::device_groups(2, 16, 0.5, 10))
    for (const int x : g) EXPECT_GE(x, 4);
  // Key idea 2: 16 stages of one GPU are merged into blocks; still one shape.
  EXPECT_EQ(metis_detail::device_groups(16, 16, 0.5, 10).size(), 1u);
}

TEST(MetisPlanner, Deterministic) {
  const MetisSetup s("A100-80:1x4,V100-32:1x4", test::small_gpt_model(32));
  const PlanResult a = MetisPlanner().plan(s.request(300));
  const PlanResult b = MetisPlanner().plan(s.request(300));
  ASSERT_TRUE(a.plan && b.plan);
  EXPECT_EQ(plan_to_yaml(*a.plan, s.cluster), plan_to_yaml(*b.plan, s.cluster));
  EXPECT_EQ(a.predicted_iteration_time_s, b.predicted_iteration_time_s);
  EXPECT_EQ(a.own_model_evaluations, b.own_model_evaluations);
}

// The budget counts simulations only: with its own model Metis searches its whole space whatever the budget
// (the public code has no evaluation budget), and with the simulator the budget cuts the search.
TEST(MetisPlanner, BudgetCountsSimulationsOnly) {
  const MetisSetup s("A100-80:1x4,V100-32:1x4", test::small_gpt_model(32));
  const PlanResult small = MetisPlanner().plan(s.request(1));
  const PlanResult large = MetisPlanner().plan(s.request(100000));
  ASSERT_TRUE(small.plan && large.plan) << small.reason << " / " << large.reason;
  EXPECT_TRUE(small.search_complete);
  EXPECT_EQ(small.evaluations, 0);
  EXPECT_EQ(small.own_model_evaluations, large.own_model_evaluations);
  EXPECT_EQ(plan_to_yaml(*small.plan, s.cluster), plan_to_yaml(*large.plan, s.cluster));
  // More candidates than the budget of 3 simulations: the simulator search stops after 3.
  ASSERT_GT(large.own_model_evaluations, 3);
  const PlanResult sim = MetisPlanner().plan(s.request(3, CostModel::Simulator));
  EXPECT_EQ(sim.evaluations, 3);
  EXPECT_FALSE(sim.search_complete);
}

// The sailor port's 300 s search cap (Options::time_cap_s): when it binds, the search stops and says so.
TEST(MetisPlanner, TimeCapCutsTheSearchAndSaysSo) {
  const MetisSetup s("A100-80:1x4,V100-32:1x4", test::small_gpt_model(32));
  MetisPlanner::Options capped;
  capped.time_cap_s = 1e-12;  // spent before the first inter-stage plan
  const PlanResult r = MetisPlanner(capped).plan(s.request());
  EXPECT_FALSE(r.search_complete);
  EXPECT_FALSE(r.plan);
  EXPECT_EQ(r.own_model_evaluations, 0);
  EXPECT_EQ(MetisPlanner::Options{}.time_cap_s, 300);  // the port's TIME_BUDGET_SEC
}

// Under --cost-model simulator the same candidates are priced by the simulator: the prediction is the
// simulated time of the returned plan, and the budget counts simulations.
TEST(MetisPlanner, SimulatorCostModel) {
  const MetisSetup s("A100-80:1x4,V100-32:1x4", test::small_gpt_model(32));
  const PlanResult r = MetisPlanner().plan(s.request(6, CostModel::Simulator));
  EXPECT_LE(r.evaluations, 6);
  ASSERT_TRUE(r.plan) << r.reason;
  const SimResult sim = simulate_iteration(s.cluster, s.topo, s.model, *r.plan, SimOptions{});
  ASSERT_FALSE(sim.oom);
  EXPECT_NEAR(sim.iteration_time_s, r.predicted_iteration_time_s, 1e-9 * sim.iteration_time_s);
}

// MoE: planned as the activated dense model, then Megatron-Core's EP rule: a stage with several TP groups
// takes EP over its groups.
TEST(MetisPlanner, MoeGetsExpertParallelism) {
  ModelConfig m = test::small_gpt_model(32);
  m.name = "small-moe";
  MoeConfig moe;
  moe.experts = 8;
  moe.top_k = 2;
  moe.expert_ffn_hidden = 1024;
  m.moe = moe;
  const MetisSetup s("A100-80:1x4", m);
  MetisPlanner::Options o;
  o.only_device_groups = {4};
  o.only_batches = 4;  // micro-batch 8 over 4 groups
  const PlanResult r = MetisPlanner(o).plan(s.request());
  check_plan(s, r);
  ASSERT_TRUE(r.plan);
  int max_ep = 1;
  for (const Stage& st : r.plan->pipelines[0].stages) max_ep = std::max(max_ep, st.ep);
  EXPECT_GT(max_ep, 1);
}

TEST(MetisPlanner, NoPlanWhenNothingFits) {
  const MetisSetup s("T4:1x2", load_model("gpt3-175b"));
  const PlanResult r = MetisPlanner().plan(s.request(200));
  EXPECT_FALSE(r.plan);
  EXPECT_FALSE(r.reason.empty());
}

}  // namespace
}  // namespace arachne::planner
