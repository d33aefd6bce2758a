// The random plan generator (random_plans.h): every draw is a valid plan for its batch, the draws reach
// every dimension of the plan space they claim, a seed gives the same plans, and the memory filter keeps
// only plans that fit.
#include "tests/planner/random_plans.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "sim/exec/simulate.h"
#include "sim/plan/plan_yaml.h"
#include "tests/sim/test_support.h"

namespace arachne::test {
namespace {

struct Case {
  std::string cluster;
  bool moe = false;
  long global_batch = 32;
};

ModelConfig model_of(const Case& c) { return c.moe ? small_moe_model(c.global_batch) : small_gpt_model(c.global_batch); }

// What a set of draws reached.
struct Coverage {
  int different_micro_batches = 0;  // >= 2 pipelines whose micro-batch sizes differ
  int multi_group_stage = 0;
  int mixed_type_stage = 0;         // one stage on GPUs of two types
  int idle_gpus = 0;
  int deep_pipeline = 0;            // >= 2 stages
  int uneven_layers = 0;            // two stages of a pipeline with different layer counts
  int unequal_shares = 0;           // two groups of a stage with different shares
  int tp_above_one = 0;
  int single_gpu_group = 0;
  int zero1 = 0, no_zero1 = 0;
  std::map<Recompute, int> recompute;
  int ep_in_stage = 0, ep_across_pipelines = 0, uneven_experts = 0;
};

void count(const Plan& p, const Cluster& c, Coverage& cov) {
  std::set<int> micro_batches;
  bool multi = false, mixed = false, deep = false, uneven = false, unequal = false, tp = false, one = false;
  bool ep_stage = false, ep_pipes = false, uneven_e = false;
  for (const Pipeline& pl : p.pipelines) {
    micro_batches.insert(pl.micro_batch);
    deep |= pl.stages.size() >= 2;
    for (const Stage& s : pl.stages) {
      uneven |= s.layer_end - s.layer_begin != pl.stages[0].layer_end - pl.stages[0].layer_begin;
      multi |= s.groups.size() >= 2;
      std::set<std::string> types;
      for (const TpGroup& g : s.groups) {
        for (const GpuId gpu : g.gpus) types.insert(c.gpu_spec(gpu).name);
        unequal |= g.share != s.groups[0].share;
        tp |= g.tp > 1;
        one |= g.tp == 1;
      }
      mixed |= types.size() >= 2;
      ep_stage |= s.ep > 1 && s.ep_scope == EpScope::Stage;
      ep_pipes |= s.ep > 1 && s.ep_scope == EpScope::Pipelines;
      uneven_e |= !s.experts.empty();
    }
  }
  cov.different_micro_batches += micro_batches.size() >= 2;
  cov.multi_group_stage += multi;
  cov.mixed_type_stage += mixed;
  cov.idle_gpus += p.num_gpus() < c.total_gpus();
  cov.deep_pipeline += deep;
  cov.uneven_layers += uneven;
  cov.unequal_shares += unequal;
  cov.tp_above_one += tp;
  cov.single_gpu_group += one;
  (p.zero1 ? cov.zero1 : cov.no_zero1) += 1;
  cov.recompute[p.recompute] += 1;
  cov.ep_in_stage += ep_stage;
  cov.ep_across_pipelines += ep_pipes;
  cov.uneven_experts += uneven_e;
}

Coverage draw_and_validate(const Case& k, int draws, std::uint64_t seed, const RandomPlanSpace& space = {}) {
  const Cluster c = load_cluster(k.cluster, GpuCatalog::load_default());
  const ModelConfig m = model_of(k);
  std::mt19937_64 rng(seed);
  Coverage cov;
  for (int i = 0; i < draws; ++i) {
    const Plan p = draw_random_plan(c, m, k.global_batch, rng, space);
    EXPECT_NO_THROW(validate_plan(p, c, m, k.global_batch, "random plan")) << plan_to_yaml(p, c);
    EXPECT_EQ(p.global_batch(), k.global_batch);
    count(p, c, cov);
  }
  return cov;
}

TEST(RandomPlans, EveryDrawIsValidAndAddsUpToTheBatch) {
  // Node sizes 1, 2, 4 and 8, one to three GPU types, dense and MoE, batches from one sample (one pipeline
  // whose stages have one group each) to more samples than GPUs, and prime batches (3, 7: few splits).
  const std::vector<Case> cases = {
      {"A100-80:1x8", false, 32},          {"A100-80:1x4,V100-32:1x4", false, 32}, {"A100-80:1x2,T4:2x1", false, 7},
      {"H100:1x4,A100-80:1x4,L4:2x2", false, 64}, {"T4:4x1", false, 1},        {"A100-80:2x4", true, 32},
      {"A10G:4x1,L4:1x4,V100-32:1x8", true, 16},  {"A100-80:1x2,T4:2x1", true, 3},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.cluster + (k.moe ? " moe" : " dense") + " batch " + std::to_string(k.global_batch));
    draw_and_validate(k, 300, 7, RandomPlanSpace{{Schedule::OneFOneB, Schedule::GPipe}, true, true});
  }
}

TEST(RandomPlans, DrawsCoverEveryDimension) {
  Coverage d = draw_and_validate({"A100-80:1x4,V100-32:1x4", false, 32}, 500, 1);
  EXPECT_GT(d.different_micro_batches, 0);
  EXPECT_GT(d.multi_group_stage, 0);
  EXPECT_GT(d.mixed_type_stage, 0);
  EXPECT_GT(d.idle_gpus, 0);
  EXPECT_GT(d.deep_pipeline, 0);
  EXPECT_GT(d.uneven_layers, 0);
  EXPECT_GT(d.unequal_shares, 0);
  EXPECT_GT(d.tp_above_one, 0);
  EXPECT_GT(d.single_gpu_group, 0);
  EXPECT_GT(d.zero1, 0);
  EXPECT_GT(d.no_zero1, 0);
  for (const Recompute r : {Recompute::None, Recompute::Selective, Recompute::Full}) EXPECT_GT(d.recompute[r], 0) << to_string(r);
  EXPECT_EQ(d.ep_in_stage + d.ep_across_pipelines + d.uneven_experts, 0) << "EP on a dense model";

  const Coverage moe = draw_and_validate({"A100-80:2x4", true, 32}, 500, 1, RandomPlanSpace{{Schedule::OneFOneB}, true, true});
  EXPECT_GT(moe.ep_in_stage, 0);
  EXPECT_GT(moe.ep_across_pipelines, 0);
  EXPECT_GT(moe.uneven_experts, 0);
  const Coverage even = draw_and_validate({"A100-80:2x4", true, 32}, 200, 1);
  EXPECT_EQ(even.uneven_experts, 0) << "uneven expert placements drawn without uneven_experts";
}

TEST(RandomPlans, WithoutIdleGpusEveryGpuIsUsed) {
  const Coverage d = draw_and_validate({"H100:1x4,A100-80:1x4,L4:2x2", false, 64}, 200, 3, RandomPlanSpace{{Schedule::OneFOneB}, false, false});
  EXPECT_EQ(d.idle_gpus, 0);
}

TEST(RandomPlans, SameSeedSamePlansOtherSeedOtherPlans) {
  const Cluster c = load_cluster("A100-80:1x4,V100-32:1x4", GpuCatalog::load_default());
  const ModelConfig m = small_moe_model(32);
  auto yaml_of_draws = [&](std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::string all;
    for (int i = 0; i < 50; ++i) all += plan_to_yaml(draw_random_plan(c, m, 32, rng), c);
    return all;
  };
  EXPECT_EQ(yaml_of_draws(11), yaml_of_draws(11));
  EXPECT_NE(yaml_of_draws(11), yaml_of_draws(12));
}

// The simulator accepts every drawn form (mixed TP degrees in a stage, EP inside stages of mixed groups,
// EP across pipelines of different micro-batch sizes): each simulates to a positive time.
TEST(RandomPlans, EveryDrawSimulates) {
  for (const Case& k : {Case{"A100-80:1x2,V100-32:1x2", false, 16}, Case{"A100-80:1x4,T4:2x1", true, 16}}) {
    SCOPED_TRACE(k.cluster);
    const Cluster c = load_cluster(k.cluster, GpuCatalog::load_default());
    const Topology t(c);
    const ModelConfig m = model_of(k);
    std::mt19937_64 rng(5);
    for (int i = 0; i < 60; ++i) {
      const Plan p = draw_random_plan(c, m, k.global_batch, rng, RandomPlanSpace{{Schedule::OneFOneB, Schedule::GPipe}, true, true});
      SimOptions o;
      o.ignore_memory = true;
      SimResult r;
      ASSERT_NO_THROW(r = simulate_iteration(c, t, m, p, o)) << plan_to_yaml(p, c);
      EXPECT_GT(r.iteration_time_s, 0) << plan_to_yaml(p, c);
    }
  }
}

// gpt3-1.3b (24 layers) with batch 64 on GPUs of 16 and 40 GB: many draws do not fit (a micro-batch of
// dozens of 2048-token sequences without recompute needs far more than 16 GB), so the filter must reject
// some and keep only plans whose every GPU fits.
TEST(RandomPlans, FittingDrawsFitInMemory) {
  const Cluster c = load_cluster("A100-40:2x2,V100-16:2x2", GpuCatalog::load_default());
  const Topology t(c);
  ModelConfig m = load_model("gpt3-1.3b");
  const FittingDraws d = draw_fitting_plans(c, t, m, 64, 10, 2, 400);
  ASSERT_EQ(d.plans.size(), 10u) << "only " << d.plans.size() << " of " << d.attempts << " draws fit";
  EXPECT_GT(d.attempts, 10) << "no draw was rejected: the memory filter is untested here";
  EXPECT_LE(d.attempts, 400);
  for (const SimulatedPlan& s : d.plans) {
    EXPECT_FALSE(s.result.oom);
    EXPECT_GT(s.result.iteration_time_s, 0);
    EXPECT_EQ(s.plan.global_batch(), 64);
    for (const GpuMemoryReport& g : s.result.per_gpu_memory) EXPECT_LE(g.usage.total(), g.capacity_bytes) << g.label;
  }
  const FittingDraws again = draw_fitting_plans(c, t, m, 64, 10, 2, 400);
  ASSERT_EQ(again.plans.size(), d.plans.size());
  EXPECT_EQ(again.attempts, d.attempts);
  for (size_t i = 0; i < d.plans.size(); ++i) EXPECT_EQ(plan_to_yaml(again.plans[i].plan, c), plan_to_yaml(d.plans[i].plan, c));
}

}  // namespace
}  // namespace arachne::test
