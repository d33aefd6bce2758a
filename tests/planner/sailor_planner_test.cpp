// Tests of the `sailor` baseline (planner/baselines/sailor): valid plans of Sailor's shape (even layer split,
// D replicas per stage, one micro-batch size) on homogeneous and heterogeneous clusters; its two TP rules
// (a larger TP only for a profiled speed-up >= 1.5, the minimum TP from memory); memoisation changes nothing
// but the work; the evaluation budget; the simulator as cost model; EP for MoE models; infeasibility.
#include <gtest/gtest.h>

#include "tests/sim/test_support.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "planner/baselines/sailor/sailor_planner.h"
#include "planner/common/profile.h"
#include "sim/exec/simulate.h"
#include "sim/hw/cluster.h"
#include "sim/hw/topology.h"
#include "sim/model/model.h"
#include "sim/plan/plan_yaml.h"

namespace arachne::planner {
namespace {

PlanRequest request_for(const Cluster& c, const Topology& t, const ModelConfig& m, long global, long budget = 2000) {
  PlanRequest r;
  r.cluster = &c;
  r.topo = &t;
  r.model = &m;
  r.global_batch = global;
  r.budget_evaluations = budget;
  return r;
}

std::string type_of(const Cluster& c, GpuId g) { return c.group_of_node(c.node_of(g)).gpu; }

// Sailor's plan form: every pipeline has the same P stages with the even split, one micro-batch size, one TP
// group per stage inside one node and of one GPU type; the longest pipeline runs ceil(B / (mbs·D)).
void expect_sailor_shape(const Plan& plan, const Cluster& c, const ModelConfig& m, long global) {
  EXPECT_NO_THROW(validate_plan(plan, c, m, global, "test"));
  ASSERT_FALSE(plan.pipelines.empty());
  const int D = static_cast<int>(plan.pipelines.size());
  const int P = static_cast<int>(plan.pipelines[0].stages.size());
  const auto split = sailor_stages(m.layers, P);
  const int mbs = plan.pipelines[0].micro_batch;
  int longest = 0;
  for (const Pipeline& p : plan.pipelines) {
    EXPECT_EQ(p.micro_batch, mbs);
    longest = std::max(longest, p.micro_batches);
    ASSERT_EQ(static_cast<int>(p.stages.size()), P);
    for (int s = 0; s < P; ++s) {
      EXPECT_EQ(p.stages[s].layer_begin, split[s].first);
      EXPECT_EQ(p.stages[s].layer_end, split[s].second);
      ASSERT_EQ(p.stages[s].groups.size(), 1u);
      const TpGroup& g = p.stages[s].groups[0];
      EXPECT_EQ(static_cast<int>(g.gpus.size()), g.tp);
      for (const GpuId id : g.gpus) {
        EXPECT_EQ(c.node_of(id), c.node_of(g.gpus.front()));
        EXPECT_EQ(type_of(c, id), type_of(c, g.gpus.front()));
      }
    }
  }
  EXPECT_EQ(longest, (global / mbs + D - 1) / D);
}

// Sailor's TP of a stage, recomputed from the profile: the speed-up walk (accept the next TP while the
// previous accepted one's time over its time is >= 1.5) and the smallest TP that fits; the TP is the larger.
struct TpRule {
  int speedup = 1, memory = -1;
};
TpRule tp_rule(const Profiler& prof, const Cluster& c, const ModelConfig& m, const std::string& type, int b, int e,
               int mbs, int in_flight) {
  const std::vector<int> tps = sailor_tp_candidates(c, m, type);
  TpRule r;
  double prev = std::numeric_limits<double>::infinity();
  for (const int tp : tps) {
    const double t = prof.stage_time_s(b, e, ProfileKey{type, tp, static_cast<double>(mbs)});
    if (prev / t < 1.5) break;
    prev = t;
    r.speedup = tp;
  }
  for (const int tp : tps)
    if (prof.stage_memory_bytes(b, e, ProfileKey{type, tp, static_cast<double>(mbs)}, in_flight) <=
        prof.gpu_memory_bytes(type)) {
      r.memory = tp;
      break;
    }
  return r;
}

void expect_tp_rules(const Plan& plan, const Cluster& c, const ModelConfig& m) {
  const Profiler prof(c, m);
  for (const Pipeline& p : plan.pipelines) {
    const int P = static_cast<int>(p.stages.size());
    for (int s = 0; s < P; ++s) {
      const TpGroup& g = p.stages[s].groups[0];
      const TpRule r = tp_rule(prof, c, m, type_of(c, g.gpus[0]), p.stages[s].layer_begin, p.stages[s].layer_end,
                               p.micro_batch, P - s);
      ASSERT_GT(r.memory, 0);
      EXPECT_EQ(g.tp, std::max(r.speedup, r.memory)) << "stage " << s << " on " << type_of(c, g.gpus[0]);
    }
  }
}

TEST(SailorPlanner, NameIsSailor) { EXPECT_EQ(SailorPlanner().name(), "sailor"); }

TEST(SailorPlanner, HomogeneousPlanIsValidAndSailorShaped) {
  const Cluster c = load_cluster("A100-80:2x4", GpuCatalog::load_default());
  const Topology t(c);
  const ModelConfig m = test::small_gpt_model(16);
  SailorPlanner planner;
  const PlanResult r = planner.plan(request_for(c, t, m, 16));
  ASSERT_TRUE(r.plan) << r.reason;
  expect_sailor_shape(*r.plan, c, m, 16);
  expect_tp_rules(*r.plan, c, m);
  EXPECT_GT(r.predicted_iteration_time_s, 0.0);
  EXPECT_EQ(r.evaluations, 0);  // own model: no simulation
  EXPECT_GT(r.own_model_evaluations, 0);
  EXPECT_TRUE(r.search_complete);
  EXPECT_GE(r.planning_time_s, 0.0);
  // The plan runs in the simulator without running out of memory.
  const SimResult sim = simulate_iteration(c, t, m, *r.plan, SimOptions{});
  EXPECT_FALSE(sim.oom);
}

TEST(SailorPlanner, HeterogeneousPlanIsValidAndSailorShaped) {
  for (const char* spec : {"A100-80:1x4,V100-32:1x4", "tiny-hetero", "V100-32:1x2,A100-80:1x4"}) {
    const Cluster c = load_cluster(spec, GpuCatalog::load_default());
    const Topology t(c);
    const ModelConfig m = test::small_gpt_model(16);
    SailorPlanner planner;
    const PlanResult r = planner.plan(request_for(c, t, m, 16));
    ASSERT_TRUE(r.plan) << spec << ": " << r.reason;
    expect_sailor_shape(*r.plan, c, m, 16);
    expect_tp_rules(*r.plan, c, m);
    const SimResult sim = simulate_iteration(c, t, m, *r.plan, SimOptions{});
    EXPECT_FALSE(sim.oom) << spec;
  }
}

// On A100-80 nodes the small model's TP=2 stage time is less than 1.5x faster than TP=1 for micro-batches of
// 1, 2 and 4 (the only ones a global batch of 12 allows): Sailor keeps TP=1 although TP=2 would fit.
TEST(SailorPlanner, LargerTpRejectedBelowSpeedupThreshold) {
  const Cluster c = load_cluster("A100-80:1x4", GpuCatalog::load_default());
  const Topology t(c);
  const ModelConfig m = test::small_gpt_model(12);
  const Profiler prof(c, m);
  SailorPlanner planner;
  const PlanResult r = planner.plan(request_for(c, t, m, 12));
  ASSERT_TRUE(r.plan) << r.reason;
  expect_sailor_shape(*r.plan, c, m, 12);
  for (const Pipeline& p : r.plan->pipelines)
    for (const Stage& st : p.stages) {
      const double mbs = p.micro_batch;
      const double t1 = prof.stage_time_s(st.layer_begin, st.layer_end, ProfileKey{"A100-80", 1, mbs});
      const double t2 = prof.stage_time_s(st.layer_begin, st.layer_end, ProfileKey{"A100-80", 2, mbs});
      ASSERT_LT(t1 / t2, 1.5) << "precondition: TP=2 helps less than 1.5x";
      ASSERT_GT(t1 / t2, 1.0) << "precondition: TP=2 is faster, so only the threshold rejects it";
      ASSERT_LE(prof.stage_memory_bytes(st.layer_begin, st.layer_end, ProfileKey{"A100-80", 1, mbs},
                                        static_cast<double>(p.stages.size())),
                prof.gpu_memory_bytes("A100-80"))
          << "precondition: TP=1 fits";
      EXPECT_EQ(st.groups[0].tp, 1);
    }
}

// The speed-up walk accepts TP=2 when it is >= 1.5x faster than TP=1 and stops at the first TP below it.
TEST(SailorPlanner, SpeedupWalkAcceptsTpAtThreshold) {
  const Cluster c = load_cluster("V100-32:1x4", GpuCatalog::load_default());
  const ModelConfig m = test::small_gpt_model(16);
  const Profiler prof(c, m);
  const std::vector<int> tps = sailor_tp_candidates(c, m, "V100-32");
  ASSERT_EQ(tps, (std::vector<int>{1, 2, 4}));
  int checked = 0;
  for (const int mbs : {1, 2, 4, 8}) {
    const double t1 = prof.stage_time_s(0, m.layers, ProfileKey{"V100-32", 1, static_cast<double>(mbs)});
    const double t2 = prof.stage_time_s(0, m.layers, ProfileKey{"V100-32", 2, static_cast<double>(mbs)});
    const double t4 = prof.stage_time_s(0, m.layers, ProfileKey{"V100-32", 4, static_cast<double>(mbs)});
    const int want = t1 / t2 < 1.5 ? 1 : (t2 / t4 < 1.5 ? 2 : 4);
    EXPECT_EQ(sailor_speedup_tp(prof, "V100-32", 0, m.layers, mbs, tps), want) << "mbs " << mbs;
    checked += want > 1 ? 1 : 0;
  }
  EXPECT_GT(checked, 0) << "some micro-batch size makes TP=2 worth it on V100 (larger GEMMs)";
}

// A one-layer model on A100-80 nodes whose usable memory is cut to lie between the TP=1 and TP=2 footprints:
// TP=1 fits nowhere, the speed-up rule alone would keep TP=1 (TP=2 helps < 1.5x), so memory forces TP=2 —
// the smallest TP that fits, not TP=4.
TEST(SailorPlanner, MinimumTpComesFromMemory) {
  Cluster c = load_cluster("A100-80:1x4", GpuCatalog::load_default());
  ModelConfig m = test::small_gpt_model(2);
  m.layers = 1;
  double tp1_min = std::numeric_limits<double>::infinity(), tp2_max = 0;
  {
    const Profiler prof(c, m);
    for (const double mbs : {1.0, 2.0}) {
      tp1_min = std::min(tp1_min, prof.stage_memory_bytes(0, 1, ProfileKey{"A100-80", 1, mbs}, 1));
      tp2_max = std::max(tp2_max, prof.stage_memory_bytes(0, 1, ProfileKey{"A100-80", 2, mbs}, 1));
    }
  }
  ASSERT_LT(tp2_max, tp1_min) << "precondition: TP=2 halves enough of the footprint";
  GpuSpec small = c.catalog.at("A100-80");
  small.memory_bytes = 0.5 * (tp1_min + tp2_max);
  c.catalog.add(small);
  const Topology t(c);
  const Profiler prof(c, m);
  for (const int mbs : {1, 2}) {
    const TpRule rule = tp_rule(prof, c, m, "A100-80", 0, 1, mbs, 1);
    ASSERT_EQ(rule.speedup, 1) << "precondition: TP=2 is not 1.5x faster at mbs " << mbs;
    ASSERT_EQ(rule.memory, 2);
    EXPECT_EQ(sailor_memory_min_tp(prof, "A100-80", 0, 1, mbs, 1, {1, 2, 4}), 2);
  }
  SailorPlanner planner;
  const PlanResult r = planner.plan(request_for(c, t, m, 2));
  ASSERT_TRUE(r.plan) << r.reason;
  expect_sailor_shape(*r.plan, c, m, 2);
  for (const Pipeline& p : r.plan->pipelines)
    for (const Stage& st : p.stages) EXPECT_EQ(st.groups[0].tp, 2);
  const SimResult sim = simulate_iteration(c, t, m, *r.plan, SimOptions{});
  EXPECT_FALSE(sim.oom);
}

TEST(SailorPlanner, NothingFitsGivesReason) {
  const Cluster c = load_cluster("A100-80:1x2", GpuCatalog::load_default());
  const Topology t(c);
  const ModelConfig m = load_model("gpt3-175b");
  const PlanResult r = SailorPlanner().plan(request_for(c, t, m, 8));
  EXPECT_FALSE(r.plan);
  EXPECT_NE(r.reason.find("memory"), std::string::npos) << r.reason;
}

// The memo only saves work: the plain recursion gives the same plan, prediction and evaluation count, and
// the same request gives the same plan twice. The memo key is canonical over interchangeable nodes (same
// group, same GPU count), so the multi-node clusters exercise hits between states that differ only by which
// identical node holds which free GPUs.
TEST(SailorPlanner, MemoisationMatchesPlainDpAndIsDeterministic) {
  for (const char* spec : {"A100-80:1x4,V100-32:1x4", "tiny-hetero", "A100-80:2x4,V100-32:2x4"}) {
    const Cluster c = load_cluster(spec, GpuCatalog::load_default());
    const Topology t(c);
    const ModelConfig m = test::small_gpt_model(16);
    SailorPlanner memo, memo2, plain(SailorPlanner::Options{false});
    const PlanResult a = memo.plan(request_for(c, t, m, 16));
    const PlanResult a2 = memo2.plan(request_for(c, t, m, 16));
    const PlanResult b = plain.plan(request_for(c, t, m, 16));
    ASSERT_TRUE(a.plan && a2.plan && b.plan) << spec;
    EXPECT_EQ(plan_to_yaml(*a.plan, c), plan_to_yaml(*b.plan, c)) << spec;
    EXPECT_EQ(plan_to_yaml(*a.plan, c), plan_to_yaml(*a2.plan, c)) << spec;
    EXPECT_EQ(a.predicted_iteration_time_s, b.predicted_iteration_time_s);
    EXPECT_EQ(a.predicted_iteration_time_s, a2.predicted_iteration_time_s);
    EXPECT_EQ(a.own_model_evaluations, b.own_model_evaluations);
    EXPECT_GT(memo.last_stats().memo_hits, 0) << spec;
    EXPECT_EQ(plain.last_stats().memo_hits, 0);
    EXPECT_GT(plain.last_stats().dp_calls, memo.last_stats().dp_calls) << spec;
  }
}

TEST(SailorPlanner, EvaluationBudgetRespected) {
  const Cluster c = load_cluster("A100-80:1x4,V100-32:1x4", GpuCatalog::load_default());
  const Topology t(c);
  const ModelConfig m = test::small_gpt_model(16);
  const PlanResult full = SailorPlanner().plan(request_for(c, t, m, 16));
  ASSERT_TRUE(full.plan);
  ASSERT_GT(full.own_model_evaluations, 5);
  // The budget counts simulations only: with its own model Sailor runs its whole DP whatever the budget.
  const PlanResult own = SailorPlanner().plan(request_for(c, t, m, 16, 1));
  ASSERT_TRUE(own.plan);
  EXPECT_TRUE(own.search_complete);
  EXPECT_EQ(own.own_model_evaluations, full.own_model_evaluations);
  EXPECT_EQ(plan_to_yaml(*own.plan, c), plan_to_yaml(*full.plan, c));
  // Under the simulator cost model the budget cuts the search: one simulation where the full search runs more.
  PlanRequest sim_full = request_for(c, t, m, 16);
  sim_full.cost_model = CostModel::Simulator;
  ASSERT_GT(SailorPlanner().plan(sim_full).evaluations, 1);
  PlanRequest cut = request_for(c, t, m, 16, 1);
  cut.cost_model = CostModel::Simulator;
  const PlanResult x = SailorPlanner().plan(cut);
  EXPECT_EQ(x.evaluations, 1);
  EXPECT_FALSE(x.search_complete);
  // Every configuration of the small model fits, so the one simulated is the plan.
  ASSERT_TRUE(x.plan) << x.reason;
  expect_sailor_shape(*x.plan, c, m, 16);
  // Same budget, same answer.
  const PlanResult y = SailorPlanner().plan(cut);
  ASSERT_TRUE(y.plan) << y.reason;
  EXPECT_EQ(plan_to_yaml(*x.plan, c), plan_to_yaml(*y.plan, c));
}

// Under the simulator cost model the prediction is the simulated time of the returned plan.
TEST(SailorPlanner, SimulatorCostModelPredictsSimulatedTime) {
  const Cluster c = load_cluster("A100-80:1x4,V100-32:1x4", GpuCatalog::load_default());
  const Topology t(c);
  const ModelConfig m = test::small_gpt_model(16);
  PlanRequest req = request_for(c, t, m, 16);
  req.cost_model = CostModel::Simulator;
  const PlanResult r = SailorPlanner().plan(req);
  ASSERT_TRUE(r.plan) << r.reason;
  expect_sailor_shape(*r.plan, c, m, 16);
  SimOptions opt;
  opt.seed = req.seed;
  const SimResult sim = simulate_iteration(c, t, m, *r.plan, opt);
  ASSERT_FALSE(sim.oom);
  EXPECT_NEAR(sim.iteration_time_s, r.predicted_iteration_time_s, 1e-9 * sim.iteration_time_s);
  EXPECT_LE(r.evaluations, req.budget_evaluations);
  EXPECT_GT(r.evaluations, 0);
}

// MoE: planned as its activated dense model, then every stage gets Megatron-Core EP over the D pipelines
// (all of Sailor's pipelines hold the same layers): ep = gcd(experts, D).
TEST(SailorPlanner, MoeGetsExpertParallelism) {
  const Cluster c = load_cluster("A100-80:2x4", GpuCatalog::load_default());
  const Topology t(c);
  ModelConfig m = test::small_gpt_model(16);
  m.name = "tiny-moe";
  MoeConfig moe;
  moe.experts = 4;
  moe.top_k = 2;
  moe.expert_ffn_hidden = 2048;
  m.moe = moe;
  const PlanResult r = SailorPlanner().plan(request_for(c, t, m, 16));
  ASSERT_TRUE(r.plan) << r.reason;
  expect_sailor_shape(*r.plan, c, m, 16);
  const int D = static_cast<int>(r.plan->pipelines.size());
  ASSERT_GT(std::gcd(moe.experts, D), 1) << "precondition: the plan has data parallelism to carve EP from";
  for (const Pipeline& p : r.plan->pipelines)
    for (const Stage& st : p.stages) EXPECT_EQ(st.ep, std::gcd(moe.experts, D));
  const SimResult sim = simulate_iteration(c, t, m, *r.plan, SimOptions{});
  EXPECT_FALSE(sim.oom);
}

TEST(SailorPlanner, StagesAreSailorsEvenSplit) {
  EXPECT_EQ(sailor_stages(8, 3), (std::vector<std::pair<int, int>>{{0, 2}, {2, 5}, {5, 8}}));
  EXPECT_EQ(sailor_stages(8, 4), (std::vector<std::pair<int, int>>{{0, 2}, {2, 4}, {4, 6}, {6, 8}}));
  EXPECT_EQ(sailor_stages(8, 1), (std::vector<std::pair<int, int>>{{0, 8}}));
  EXPECT_TRUE(sailor_stages(4, 5).empty());
}

}  // namespace
}  // namespace arachne::planner
