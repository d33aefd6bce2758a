// Tests of the planner registry and the `megatron` baseline: it plans on the largest homogeneous subset, its
// plan is valid on the original cluster, its prediction is the simulator's time, it is the fastest of its
// grid, it respects the evaluation budget, and it says why when nothing fits.
#include <gtest/gtest.h>

#include "tests/sim/test_support.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "planner/baselines/megatron/megatron_planner.h"
#include "planner/planner.h"
#include "planner/registry.h"
#include "sim/exec/simulate.h"
#include "sim/hw/cluster.h"
#include "sim/hw/topology.h"
#include "sim/io/input_error.h"
#include "sim/plan/plan_yaml.h"

namespace arachne::planner {
namespace {

ModelConfig tiny_model() { return test::small_gpt_model(16); }

PlanRequest request_for(const Cluster& c, const Topology& t, const ModelConfig& m, long budget = 2000) {
  PlanRequest r;
  r.cluster = &c;
  r.topo = &t;
  r.model = &m;
  r.global_batch = m.global_batch;
  r.budget_evaluations = budget;
  return r;
}

double simulate_on(const Cluster& c, const ModelConfig& m, const Plan& p) {
  const Topology t(c);
  const SimResult r = simulate_iteration(c, t, m, p, SimOptions{});
  EXPECT_FALSE(r.oom);
  return r.iteration_time_s;
}

TEST(PlannerRegistry, ListsMegatron) {
  const auto names = registered_planner_names();
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  EXPECT_NE(std::find(names.begin(), names.end(), "megatron"), names.end());
  EXPECT_EQ(make_planner("megatron")->name(), "megatron");
}

TEST(PlannerRegistry, UnknownNameIsAnInputErrorOnThePlannerFlag) {
  try {
    make_planner("nope");
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(e.where(), "--planner");
    EXPECT_NE(e.reason().find("nope"), std::string::npos);
    EXPECT_NE(e.reason().find("megatron"), std::string::npos);  // lists what is known
  }
}

// On a mixed cluster only the GPU type with the most GPUs is used, whatever the node order, and the plan is
// expressed in the original cluster's GPU ids.
void check_uses_only(const std::string& spec, const std::string& type) {
  const Cluster c = parse_cluster_spec(spec, GpuCatalog::load_default());
  const Topology t(c);
  const ModelConfig m = tiny_model();
  const PlanResult r = make_planner("megatron")->plan(request_for(c, t, m));
  ASSERT_TRUE(r.plan) << r.reason;
  for (const Pipeline& p : r.plan->pipelines)
    for (const Stage& s : p.stages)
      for (const TpGroup& g : s.groups)
        for (const GpuId id : g.gpus) EXPECT_EQ(c.group_of_node(c.node_of(id)).gpu, type) << spec << ": GPU " << c.gpu_label(id);
  EXPECT_NO_THROW(validate_plan(*r.plan, c, m, m.global_batch, "test"));
  // The selectors name the original GPUs: the YAML round trip through the original cluster is exact.
  EXPECT_EQ(plan_to_yaml(parse_plan_yaml_text(plan_to_yaml(*r.plan, c), "rt", c), c), plan_to_yaml(*r.plan, c));
  // Same simulator, same GPUs, same links (all nodes on one leaf): the prediction is the simulated time.
  const double sim = simulate_on(c, m, *r.plan);
  EXPECT_NEAR(sim, r.predicted_iteration_time_s, 1e-9 * sim) << spec;
  EXPECT_GT(r.evaluations, 0);
  EXPECT_GE(r.planning_time_s, 0.0);
}

TEST(MegatronPlanner, HeterogeneousClusterUsesOnlyTheLargestType) {
  check_uses_only("A100-80:1x8,V100-32:1x4", "A100-80");
  check_uses_only("V100-32:1x4,A100-80:1x8", "A100-80");  // mapping back shifts ids past the V100 node
  check_uses_only("V100-32:2x8,A100-80:1x4", "V100-32");  // 16 V100 beat 4 A100 by count
}

TEST(MegatronPlanner, CountTieGoesToTheHigherPeak) {
  check_uses_only("V100-32:1x4,A100-80:1x4", "A100-80");  // A100 bf16 peak 312 TFLOP/s > V100 (fp16 125)
}

TEST(MegatronPlanner, OneNodePredictionEqualsSimulation) {
  const Cluster c = parse_cluster_spec("A100-80:1x8", GpuCatalog::load_default());
  const Topology t(c);
  const ModelConfig m = tiny_model();
  const PlanResult r = make_planner("megatron")->plan(request_for(c, t, m));
  ASSERT_TRUE(r.plan) << r.reason;
  EXPECT_EQ(r.plan->num_gpus(), 8);  // 16 samples divide over every dp, so every GPU is used
  const double sim = simulate_on(c, m, *r.plan);
  EXPECT_NEAR(sim, r.predicted_iteration_time_s, 1e-9 * sim);
}

// The chosen plan is at least as fast as every candidate of its grid the test builds by hand (the grid takes
// the largest dp, so these all use 8 GPUs; recompute none fits this small model).
TEST(MegatronPlanner, ChosenPlanIsAtLeastAsFastAsHandPickedCandidates) {
  const Cluster c = parse_cluster_spec("A100-80:1x8", GpuCatalog::load_default());
  const Topology t(c);
  const ModelConfig m = tiny_model();
  const PlanResult r = make_planner("megatron")->plan(request_for(c, t, m));
  ASSERT_TRUE(r.plan) << r.reason;
  struct Cand { int tp, pp, dp, mb; };
  for (const Cand k : {Cand{1, 1, 8, 1}, Cand{1, 1, 8, 2}, Cand{2, 1, 4, 2}, Cand{2, 2, 2, 1}, Cand{4, 2, 1, 4},
                       Cand{8, 1, 1, 8}, Cand{1, 8, 1, 1}, Cand{2, 4, 1, 2}}) {
    Shorthand sh;
    sh.tp = k.tp;
    sh.pp = k.pp;
    sh.dp = k.dp;
    sh.micro_batch = k.mb;
    sh.global_batch = m.global_batch;
    const Plan p = plan_from_shorthand(sh, c, m);
    const double time = simulate_on(c, m, p);
    // Exactly the same simulation when the candidate is the chosen one: a relative 1e-12 absorbs nothing else.
    EXPECT_LE(r.predicted_iteration_time_s, time * (1 + 1e-12)) << "tp" << k.tp << " pp" << k.pp << " dp" << k.dp << " mb" << k.mb;
  }
}

TEST(MegatronPlanner, BudgetOfOneEvaluation) {
  const Cluster c = parse_cluster_spec("A100-80:1x8", GpuCatalog::load_default());
  const Topology t(c);
  const ModelConfig m = tiny_model();
  const PlanResult r = make_planner("megatron")->plan(request_for(c, t, m, 1));
  EXPECT_EQ(r.evaluations, 1);
  // The first grid point (tp1 pp1 dp8 mb1, no recompute) fits this small model, so it is the plan.
  ASSERT_TRUE(r.plan) << r.reason;
  EXPECT_EQ(r.plan->pipelines.size(), 8u);
  EXPECT_EQ(r.plan->pipelines[0].stages.size(), 1u);
  EXPECT_EQ(r.plan->pipelines[0].stages[0].groups[0].tp, 1);
  EXPECT_EQ(r.plan->pipelines[0].micro_batch, 1);
}

// GPT-3 175B needs ~16 bytes/parameter of weights, gradients and Adam states under mixed precision
// (Rajbhandari et al. 2020): 2.8 TB, against 8 x 40 GB = 320 GB. Nothing fits, whatever the split.
TEST(MegatronPlanner, ImpossibleModelHasNoPlanAndSaysWhy) {
  const Cluster c = parse_cluster_spec("A100-40:1x8", GpuCatalog::load_default());
  const Topology t(c);
  const ModelConfig m = load_model("gpt3-175b");
  const PlanResult r = make_planner("megatron")->plan(request_for(c, t, m));
  EXPECT_FALSE(r.plan);
  EXPECT_NE(r.reason.find("memory"), std::string::npos) << r.reason;
  EXPECT_NE(r.reason.find("8 x A100-40"), std::string::npos) << r.reason;
  EXPECT_NE(r.reason.find("gpt3-175b"), std::string::npos) << r.reason;
  EXPECT_GT(r.evaluations, 0);
}

TEST(MegatronPlanner, DeterministicPlan) {
  const Cluster c = parse_cluster_spec("A100-80:1x8,V100-32:1x4", GpuCatalog::load_default());
  const Topology t(c);
  const ModelConfig m = tiny_model();
  const PlanResult a = make_planner("megatron")->plan(request_for(c, t, m));
  const PlanResult b = make_planner("megatron")->plan(request_for(c, t, m));
  ASSERT_TRUE(a.plan && b.plan);
  EXPECT_EQ(plan_to_yaml(*a.plan, c), plan_to_yaml(*b.plan, c));
  EXPECT_EQ(a.evaluations, b.evaluations);
  EXPECT_EQ(a.predicted_iteration_time_s, b.predicted_iteration_time_s);
}

// MoE: EP is taken from the data-parallel ranks (Megatron-Core), so a returned plan's ep divides both dp and
// the experts.
TEST(MegatronPlanner, MoeExpertParallelDividesDpAndExperts) {
  const Cluster c = parse_cluster_spec("A100-80:1x8", GpuCatalog::load_default());
  const Topology t(c);
  ModelConfig m = tiny_model();
  m.name = "tiny-moe";
  MoeConfig moe;
  moe.experts = 4;
  moe.top_k = 2;
  moe.expert_ffn_hidden = 2048;
  m.moe = moe;
  const PlanResult r = make_planner("megatron")->plan(request_for(c, t, m));
  ASSERT_TRUE(r.plan) << r.reason;
  const int dp = static_cast<int>(r.plan->pipelines.size());
  const int ep = r.plan->pipelines[0].stages[0].ep;
  EXPECT_EQ(dp % ep, 0);
  EXPECT_EQ(4 % ep, 0);
  const double sim = simulate_on(c, m, *r.plan);
  EXPECT_NEAR(sim, r.predicted_iteration_time_s, 1e-9 * sim);
}

// Two A100 nodes on one leaf plus a V100 node: data parallelism crosses the NICs, and the sub-cluster's
// routes are the same links as the original's (one leaf), so the prediction is the re-simulated time.
TEST(MegatronPlanner, TwoNodesOfTheLargestTypeOnGpt3_1_3b) {
  const Cluster c = parse_cluster_spec("V100-32:1x8,A100-80:2x8", GpuCatalog::load_default());
  const Topology t(c);
  ModelConfig m = load_model("gpt3-1.3b");
  m.global_batch = 32;  // small batch: few micro-batches, quick simulations
  const PlanResult r = make_planner("megatron")->plan(request_for(c, t, m));
  ASSERT_TRUE(r.plan) << r.reason;
  EXPECT_EQ(r.plan->num_gpus(), 16);  // 32 samples divide over every dp up to 16
  for (const Pipeline& p : r.plan->pipelines)
    for (const Stage& s : p.stages)
      for (const TpGroup& g : s.groups)
        for (const GpuId id : g.gpus) EXPECT_GE(id, 8) << "GPU " << c.gpu_label(id) << " is a V100";
  EXPECT_NO_THROW(validate_plan(*r.plan, c, m, m.global_batch, "test"));
  const double sim = simulate_on(c, m, *r.plan);
  EXPECT_NEAR(sim, r.predicted_iteration_time_s, 1e-9 * sim);
}

// A global batch of 12 on 8 GPUs: no dp above 6 divides it, so with tp = pp = 1 Megatron's grid takes dp 6 and
// leaves 2 GPUs idle, while tp 2 or pp 2 with dp 4 use all 8. The grid is rebuilt here from the header's rules
// (tp a power of two dividing the heads, pp dividing the layers, the largest dp that divides the batch,
// micro-batch 1/2/4/8 dividing the samples per pipeline) and every point simulated: the plan must be the
// fastest of them and use its GPU count — all 8 when a whole-subset configuration is fastest, fewer only when
// idling GPUs is faster. A planner that always used every GPU, or never did, would fail one of the two.
TEST(MegatronPlanner, UsesFewerGpusWhenTheBatchDoesNotDivide) {
  const Cluster c = parse_cluster_spec("A100-80:1x8", GpuCatalog::load_default());
  const Topology t(c);
  ModelConfig m = tiny_model();
  m.global_batch = 12;
  const PlanResult r = make_planner("megatron")->plan(request_for(c, t, m));
  ASSERT_TRUE(r.plan) << r.reason;
  EXPECT_EQ(r.plan->global_batch(), 12);
  EXPECT_NO_THROW(validate_plan(*r.plan, c, m, 12, "test"));

  double best = INFINITY;
  int best_gpus = 0;
  for (const int tp : {1, 2, 4, 8})
    for (const int pp : {1, 2, 4, 8}) {
      if (m.heads % tp != 0 || m.layers % pp != 0 || tp * pp > 8) continue;
      int dp = 8 / (tp * pp);
      while (12 % dp != 0) --dp;
      for (const int mb : {1, 2, 4, 8}) {
        if ((12 / dp) % mb != 0) continue;
        Shorthand sh;
        sh.tp = tp, sh.pp = pp, sh.dp = dp, sh.micro_batch = mb, sh.global_batch = 12;
        const SimResult s = simulate_iteration(c, t, m, plan_from_shorthand(sh, c, m), SimOptions{});
        if (!s.oom && s.iteration_time_s < best) best = s.iteration_time_s, best_gpus = tp * pp * dp;
      }
    }
  ASSERT_GT(best_gpus, 0);
  // The same simulation when the plan is the fastest grid point: a relative 1e-12 absorbs nothing else.
  EXPECT_NEAR(simulate_on(c, m, *r.plan), best, 1e-12 * best);
  EXPECT_EQ(r.plan->num_gpus(), best_gpus);
}

// A wall-clock budget that has already run out stops before the first simulation.
TEST(MegatronPlanner, ExhaustedWallBudgetStopsAndSaysWhy) {
  const Cluster c = parse_cluster_spec("A100-80:1x8", GpuCatalog::load_default());
  const Topology t(c);
  const ModelConfig m = tiny_model();
  PlanRequest req = request_for(c, t, m);
  req.budget_wall_s = 1e-12;
  const PlanResult r = make_planner("megatron")->plan(req);
  EXPECT_FALSE(r.plan);
  EXPECT_EQ(r.evaluations, 0);
  EXPECT_NE(r.reason.find("budget"), std::string::npos) << r.reason;
}

}  // namespace
}  // namespace arachne::planner
