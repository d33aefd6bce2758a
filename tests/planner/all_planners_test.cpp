// Every registered planner on the same ground (issue 5 item 11): on 11 clusters (homogeneous and
// heterogeneous, node sizes 1/2/4/8) x a dense and an MoE model, each returns a plan that passes
// validation on the request's cluster or a clear reason; budgets are respected; the same request gives
// the same plan; and the oracle is never beaten on a cluster it enumerates completely.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "planner/oracle/oracle_planner.h"
#include "planner/planner.h"
#include "planner/registry.h"
#include "sim/exec/simulate.h"
#include "sim/hw/topology.h"
#include "sim/plan/plan_yaml.h"
#include "tests/sim/test_support.h"

namespace arachne::planner {
namespace {

const std::vector<std::string> kClusters = {
    "A100-80:1x8",                      // one 8-GPU node
    "A100-80:2x4",                      // two 4-GPU nodes
    "V100-32:4x2",                      // 2-GPU nodes
    "T4:4x1",                           // 1-GPU nodes (PCIe, no NVLink)
    "A100-80:1x4,V100-32:1x4",          // two generations, 4-GPU nodes
    "A100-80:1x2,T4:2x1",               // uneven node sizes
    "A100-40:2x2,V100-16:2x2",          // small memories
    "H100:1x4,A100-80:1x4,L4:2x2",      // three types
    "A100-80:2x8",                      // 16 GPUs, homogeneous
    "H100:1x8,A100-40:2x4",             // 16 GPUs, two types
    "A10G:4x1,L4:1x4,V100-32:1x8",      // 16 GPUs, node sizes 1/4/8
};

// Planners under test: every registered one except the learned planner (its own tests train it first).
std::vector<std::string> planners_under_test() {
  std::vector<std::string> names;
  for (const std::string& n : registered_planner_names())
    if (n != "arachne") names.push_back(n);
  return names;
}

struct Outcome {
  PlanResult result;
  double simulated_s = NAN;  // NaN: no plan, or out of memory
};

Outcome run(const std::string& planner, const Cluster& c, const Topology& t, const ModelConfig& m, long budget,
            std::unique_ptr<Planner> instance = nullptr) {
  PlanRequest req;
  req.cluster = &c;
  req.topo = &t;
  req.model = &m;
  req.global_batch = m.global_batch;
  req.budget_evaluations = budget;
  Outcome o;
  o.result = (instance ? std::move(instance) : make_planner(planner))->plan(req);
  if (o.result.plan) {
    const SimResult r = simulate_iteration(c, t, m, *o.result.plan, SimOptions{});
    if (!r.oom) o.simulated_s = r.iteration_time_s;
  }
  return o;
}

class AllPlanners : public ::testing::TestWithParam<std::string> {};

TEST_P(AllPlanners, ValidPlanOrReasonOnEveryClusterAndModel) {
  const GpuCatalog catalog = GpuCatalog::load_default();
  const long budget = 60;
  for (const bool moe : {false, true}) {
    const ModelConfig m = moe ? test::small_moe_model(32) : test::small_gpt_model(32);
    for (const std::string& spec : kClusters) {
      SCOPED_TRACE(GetParam() + " on " + spec + " with " + m.name);
      const Cluster c = load_cluster(spec, catalog);
      const Topology t(c);
      const Outcome o = run(GetParam(), c, t, m, budget);
      if (!o.result.plan) {
        EXPECT_FALSE(o.result.reason.empty());
        // The small models (8 layers, hidden 1024: 0.13 B parameters, about 2 GB of weights, gradients
        // and Adam state at 16 B per parameter; the MoE one 0.34 B, about 5.4 GB at ep 1) fit on every
        // GPU type used here (16 GB and up) with one sample per micro-batch, so every planner must find a plan.
        ADD_FAILURE() << "no plan: " << o.result.reason;
        continue;
      }
      // Valid on the request's cluster: every GPU once, layers covered once, batch adds up, EP consistent.
      EXPECT_NO_THROW(validate_plan(*o.result.plan, c, m, m.global_batch, GetParam()));
      EXPECT_LE(o.result.evaluations, budget);
      EXPECT_GT(o.result.predicted_iteration_time_s, 0);
      EXPECT_GE(o.result.planning_time_s, 0);
      if (moe) {
        for (const Pipeline& p : o.result.plan->pipelines)
          for (const Stage& st : p.stages) EXPECT_EQ(m.moe->experts % st.ep, 0);
      }
    }
  }
}

// Where limits bind: gpt3-1.3b (24 layers, 1.3 B parameters: ~21 GB of weights, gradients and Adam state at
// 16 B per parameter, more than a 16 GB V100 holds, so memory rules out many plans) on two GPU generations,
// with a budget far below any planner's space (so its caps and budget cut the search). Each planner still
// returns a valid plan that fits in memory, or says why not.
TEST_P(AllPlanners, ValidFittingPlanOrReasonWhenMemoryAndBudgetBind) {
  const GpuCatalog catalog = GpuCatalog::load_default();
  ModelConfig m = load_model("gpt3-1.3b");
  m.global_batch = 16;  // few micro-batches: quick simulations
  const long budget = 12;
  for (const std::string spec : {"A100-40:1x2,V100-16:1x4", "A100-80:1x2,V100-16:2x1"}) {
    SCOPED_TRACE(GetParam() + " on " + spec);
    const Cluster c = load_cluster(spec, catalog);
    const Topology t(c);
    const Outcome o = run(GetParam(), c, t, m, budget);
    EXPECT_LE(o.result.evaluations, budget);
    if (!o.result.plan) {
      EXPECT_FALSE(o.result.reason.empty());
      continue;
    }
    EXPECT_NO_THROW(validate_plan(*o.result.plan, c, m, m.global_batch, GetParam()));
    EXPECT_FALSE(std::isnan(o.simulated_s)) << "the plan runs out of memory:\n" << plan_to_yaml(*o.result.plan, c);
  }
}

TEST_P(AllPlanners, SameRequestGivesSamePlan) {
  const Cluster c = load_cluster("A100-80:1x4,V100-32:1x4", GpuCatalog::load_default());
  const Topology t(c);
  for (const bool moe : {false, true}) {
    const ModelConfig m = moe ? test::small_moe_model(32) : test::small_gpt_model(32);
    const Outcome a = run(GetParam(), c, t, m, 40), b = run(GetParam(), c, t, m, 40);
    ASSERT_TRUE(a.result.plan && b.result.plan) << a.result.reason;  // the small models fit: a plan must come back
    EXPECT_EQ(plan_to_yaml(*a.result.plan, c), plan_to_yaml(*b.result.plan, c));
    EXPECT_EQ(a.result.predicted_iteration_time_s, b.result.predicted_iteration_time_s);
    EXPECT_EQ(a.result.evaluations, b.result.evaluations);
  }
}

INSTANTIATE_TEST_SUITE_P(Registered, AllPlanners, ::testing::ValuesIn(planners_under_test()),
                         [](const auto& info) { return info.param; });

// The oracle's space contains every plan form the baselines produce, so where its search is complete
// (search_complete: every plan of its space simulated or proven no better, planner/oracle/README.md) no
// baseline's simulated time may be lower than the oracle's. These clusters complete in 0.1-4 s each.
TEST(OracleNeverBeaten, OnClustersItEnumerates) {
  const auto names = registered_planner_names();
  if (std::find(names.begin(), names.end(), "oracle") == names.end()) GTEST_SKIP() << "oracle not registered";
  const GpuCatalog catalog = GpuCatalog::load_default();
  int compared = 0;
  const std::vector<std::pair<std::string, bool>> cases = {
      {"A100-80:1x2,T4:2x1", false}, {"A100-80:1x2,V100-32:1x2", false}, {"A100-80:2x2", false},
      {"T4:4x1", false}, {"T4:2x1", true}};
  for (const auto& [spec, moe] : cases) {
    const Cluster c = load_cluster(spec, catalog);
    const Topology t(c);
    const ModelConfig m = moe ? test::small_moe_model(32) : test::small_gpt_model(32);
    SCOPED_TRACE(spec + " with " + m.name);
    // Without phase 0 (the baselines' plans as seeds): the enumeration alone must not be beaten.
    const Outcome oracle = run("oracle", c, t, m, 1'000'000, std::make_unique<OraclePlanner>(false));
    ASSERT_TRUE(oracle.result.search_complete) << "the oracle no longer enumerates this cluster completely";
    for (const std::string& p : planners_under_test()) {
      if (p == "oracle") continue;
      const Outcome o = run(p, c, t, m, 2000);
      if (std::isnan(o.simulated_s)) continue;
      ASSERT_FALSE(std::isnan(oracle.simulated_s)) << p << " found a plan that fits, the oracle did not";
      EXPECT_LE(oracle.simulated_s, o.simulated_s * (1 + 1e-9)) << p << " beat the oracle";
      ++compared;
    }
  }
  EXPECT_GE(compared, 20) << "too few baseline plans to compare with";
}

}  // namespace
}  // namespace arachne::planner
