// Tests of template completion (planner/template/completion.h): valid plans on homogeneous, heterogeneous,
// multi-type-stage and MoE templates; TP groups inside nodes and stages inside one node where one holds
// them; the global batch split exactly, faster pipelines and groups taking more samples; recompute and
// ZeRO-1 only when the plan does not fit without them (ZeRO-1 and more recompute weighed by price), more recompute no faster where memory decided nothing, every recompute level priced on request; uneven experts in proportion to speed; determinism;
// and the key property: completing the oracle's own structure recovers the oracle's simulated time within
// 1 % where the oracle's search is complete.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "planner/oracle/oracle_planner.h"
#include "planner/template/completion.h"
#include "planner/template/enumerate.h"
#include "planner/template/estimator.h"
#include "planner/template/pipeline_costs.h"
#include "planner/template/placement.h"
#include "sim/exec/simulate.h"
#include "sim/hw/cluster.h"
#include "sim/hw/topology.h"
#include "sim/io/input_error.h"
#include "sim/model/memory.h"
#include "sim/plan/plan_yaml.h"
#include "tests/planner/random_plans.h"
#include "tests/sim/test_support.h"

namespace arachne::planner {
namespace {

// The simulator as the pricer (memory enforced).
PlanPricer simulator(const Cluster& c, const Topology& t, const ModelConfig& m) {
  return [&c, &t, &m](const Plan& p, double) -> std::optional<double> {
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

// A one-GPU-group stage of `type` with EP `ep` across the pipelines of its class.
StageTemplate expert_stage(const std::string& type, int ep) {
  StageTemplate s = stage(1, {{type, 1}});
  s.ep = ep;
  s.ep_scope = EpScope::Pipelines;
  return s;
}

PipelineTemplate pipeline(int replicas, std::vector<StageTemplate> stages) {
  PipelineTemplate p;
  p.replicas = replicas;
  p.stages = std::move(stages);
  return p;
}

struct Fixture {
  Cluster cluster;
  Topology topo;
  ModelConfig model;
  Fixture(const std::string& spec, ModelConfig m) : Fixture(parse_cluster_spec(spec, GpuCatalog::load_default()), std::move(m)) {}
  Fixture(Cluster c, ModelConfig m) : cluster(std::move(c)), topo(cluster), model(std::move(m)) {}
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
    if (i > 0) {
      EXPECT_LE(plans[i - 1].priced_s, plans[i].priced_s);
    }
    for (const Pipeline& pl : p.pipelines)
      for (const Stage& s : pl.stages)
        for (const TpGroup& g : s.groups)
          for (const GpuId id : g.gpus) EXPECT_EQ(f.cluster.node_of(id), f.cluster.node_of(g.gpus.front()));
  }
}

GroupKind kind(const std::string& type, int groups) { return {type, groups}; }

std::string type_of(const Fixture& f, const TpGroup& g) { return f.cluster.gpu_spec(g.gpus.front()).name; }

TEST(Completion, HomogeneousTemplateGivesValidPlansOnEveryGpuOfItsNode) {
  const Fixture f("A100-80:1x8", test::small_gpt_model(32));
  Template t;
  t.pipelines = {pipeline(2, {stage(2, {kind("A100-80", 1)}), stage(2, {kind("A100-80", 1)})})};
  const auto plans = complete_template(t, f.input(), simulator(f.cluster, f.topo, f.model));
  expect_sound(plans, f, 32);
  const Plan& p = plans.front().plan;
  EXPECT_EQ(p.num_gpus(), 8);
  ASSERT_EQ(p.pipelines.size(), 2u);
  for (const Pipeline& pl : p.pipelines) {
    ASSERT_EQ(pl.stages.size(), 2u);
    EXPECT_EQ(pl.stages[0].groups.size(), 1u);
    EXPECT_EQ(pl.stages[0].groups[0].tp, 2);
  }
}

TEST(Completion, FasterPipelinesTakeMoreSamples) {
  // A100 (312 TFLOP/s bf16, 2 TB/s) against V100 (125 TFLOP/s fp16, 0.9 TB/s): every A100 pipeline gets more
  // of the batch than every V100 pipeline, and the batch is split exactly.
  const Fixture f("A100-80:1x2,V100-32:1x2", test::small_gpt_model(32));
  Template t;
  t.pipelines = {pipeline(2, {stage(1, {kind("A100-80", 1)})}), pipeline(2, {stage(1, {kind("V100-32", 1)})})};
  const auto plans = complete_template(t, f.input(), simulator(f.cluster, f.topo, f.model));
  expect_sound(plans, f, 32);
  const Plan& p = plans.front().plan;
  long a100_min = 1 << 30, v100_max = 0;
  for (const Pipeline& pl : p.pipelines) {
    if (type_of(f, pl.stages[0].groups[0]) == "A100-80") a100_min = std::min(a100_min, pl.samples());
    else v100_max = std::max(v100_max, pl.samples());
  }
  EXPECT_GT(a100_min, v100_max);
  // No memory saver: everything fits without one.
  for (const CompletedPlan& c : plans) EXPECT_EQ(c.plan.recompute, Recompute::None);
}

TEST(Completion, MultiTypeStageSplitsItsMicroBatchByGroupSpeed) {
  // One stage with two A100 and two V100 groups (a Metis device group): A100 groups take larger shares;
  // then a two-stage pipeline with an A100 stage and a V100 stage of equal GPU counts: the faster stage
  // holds at least as many layers.
  const Fixture f("A100-80:1x2,V100-32:1x2", test::small_gpt_model(32));
  Template t;
  t.pipelines = {pipeline(1, {stage(1, {kind("A100-80", 2), kind("V100-32", 2)})})};
  const auto plans = complete_template(t, f.input(), simulator(f.cluster, f.topo, f.model));
  expect_sound(plans, f, 32);
  const Stage& s = plans.front().plan.pipelines[0].stages[0];
  ASSERT_EQ(s.groups.size(), 4u);
  double a100 = 1, v100 = 0;
  for (const TpGroup& g : s.groups) {
    if (type_of(f, g) == "A100-80") a100 = std::min(a100, g.share);
    else v100 = std::max(v100, g.share);
  }
  EXPECT_GT(a100, v100);

  Template two;
  two.pipelines = {pipeline(1, {stage(1, {kind("A100-80", 2)}), stage(2, {kind("V100-32", 1)})})};
  const auto staged = complete_template(two, f.input(), simulator(f.cluster, f.topo, f.model));
  expect_sound(staged, f, 32);
  const Pipeline& pl = staged.front().plan.pipelines[0];
  ASSERT_EQ(pl.stages.size(), 2u);
  EXPECT_EQ(type_of(f, pl.stages[0].groups[0]), "A100-80");
  EXPECT_GE(pl.stages[0].layer_end - pl.stages[0].layer_begin, pl.stages[1].layer_end - pl.stages[1].layer_begin);
}

TEST(Completion, UnevenExpertsFollowGpuSpeed) {
  // EP over the four groups of a mixed stage, uneven: the 8 experts split in proportion to speed, each rank
  // at least one, the A100 ranks holding more than the V100 ranks.
  const Fixture f("A100-80:1x2,V100-32:1x2", test::small_moe_model(32));
  Template t;
  StageTemplate st = stage(1, {kind("A100-80", 2), kind("V100-32", 2)});
  st.ep = 4;
  st.ep_scope = EpScope::Stage;
  st.uneven_experts = true;
  t.pipelines = {pipeline(1, {st})};
  const auto plans = complete_template(t, f.input(), simulator(f.cluster, f.topo, f.model));
  expect_sound(plans, f, 32);
  const Stage& s = plans.front().plan.pipelines[0].stages[0];
  EXPECT_EQ(s.ep, 4);
  EXPECT_EQ(s.ep_scope, EpScope::Stage);
  ASSERT_EQ(s.experts.size(), 4u);
  int sum = 0;
  for (size_t r = 0; r < 4; ++r) {
    EXPECT_GE(s.experts[r], 1);
    sum += s.experts[r];
  }
  EXPECT_EQ(sum, 8);
  ASSERT_EQ(type_of(f, s.groups[0]), "A100-80");
  ASSERT_EQ(type_of(f, s.groups[3]), "V100-32");
  EXPECT_GT(std::min(s.experts[0], s.experts[1]), std::max(s.experts[2], s.experts[3]));
}

TEST(Completion, ExpertParallelismAcrossReplicasKeepsTheBlockAlike) {
  // EP 2 over two replicas (ep_scope pipelines) beside a pipeline of another class: the replicas form an
  // aligned block with equal samples and micro-batch counts, experts even.
  const Fixture f("A100-80:1x2,V100-32:1x2", test::small_moe_model(32));
  Template t;
  t.pipelines = {pipeline(1, {stage(2, {kind("V100-32", 1)})}), pipeline(2, {expert_stage("A100-80", 2)})};
  const auto plans = complete_template(t, f.input(), simulator(f.cluster, f.topo, f.model));
  expect_sound(plans, f, 32);
  const Plan& p = plans.front().plan;
  ASSERT_EQ(p.pipelines.size(), 3u);
  EXPECT_EQ(p.pipelines[0].stages[0].ep, 2);
  EXPECT_EQ(p.pipelines[1].stages[0].ep, 2);
  EXPECT_EQ(p.pipelines[0].micro_batches, p.pipelines[1].micro_batches);
  EXPECT_EQ(p.pipelines[0].samples(), p.pipelines[1].samples());
  EXPECT_TRUE(p.pipelines[0].stages[0].experts.empty());
  EXPECT_EQ(p.pipelines[2].stages[0].ep, 1);
}

// The same plan at a lower memory level (less recompute) does not fit: the simulator says out of memory.
void expect_recompute_needed(const Plan& plan, const Fixture& f) {
  const Recompute lower[] = {Recompute::None, Recompute::Selective};
  for (const Recompute r : lower) {
    if (r >= plan.recompute) break;
    Plan p = plan;
    p.recompute = r;
    for (const bool z : {false, true}) {
      p.zero1 = z;
      EXPECT_TRUE(simulate_iteration(f.cluster, f.topo, f.model, p, SimOptions{}).oom)
          << "recompute " << to_string(plan.recompute) << " not needed: fits with " << to_string(r) << (z ? " and ZeRO-1" : "");
    }
  }
}

TEST(Completion, RecomputeOnlyWhereMemoryNeedsIt) {
  // GPT-3 1.3B on one V100-32: weights, gradients and Adam state take 16 B x 1.3 G = 21 GB, and one
  // sequence's activations without recompute 24 layers x sbh(34 + 5as/h) = 11.5 GB (Korthikanti et al. 2022
  // Table 2): it needs recompute. The plan fits, and the same plan without (or with less) recompute does not.
  const Fixture f("V100-32:1x1", load_model("gpt3-1.3b"));
  Template t;
  t.pipelines = {pipeline(1, {stage(1, {kind("V100-32", 1)})})};
  const auto plans = complete_template(t, f.input(4), simulator(f.cluster, f.topo, f.model));
  expect_sound(plans, f, 4);
  for (const CompletedPlan& c : plans) {
    EXPECT_NE(c.plan.recompute, Recompute::None);
    EXPECT_FALSE(c.plan.zero1);  // one GPU holds every layer alone: nothing to shard over
    expect_recompute_needed(c.plan, f);
  }
}

// 16 one-GPU EP-16 replicas of gpt-moe-1.3b-64e on 2-GPU H100 nodes at a global batch of 64: at micro-batch
// 4 the plan fits only with ZeRO-1 or with recompute. ZeRO-1 adds a parameter all-gather over the NICs,
// selective recompute part of attention's forward pass (Korthikanti et al. 2022): which costs less depends on
// the NICs, so the completion must price both rather than take the least recompute that fits. With the
// simulator as the pricer, the best plan is no slower than itself at any other memory level that fits.
TEST(Completion, WeighsZeroOneAgainstMoreRecomputeByPrice) {
  for (const int nics : {1, 8}) {
    const Cluster c = parse_cluster_yaml_text(
        "version: 1\nname: h100-pairs\nnetwork: {topology: leaf-spine, nodes_per_leaf: 8, oversubscription: 1, latency: 5 us}\n"
        "node_groups:\n  - gpu: H100\n    nodes: 8\n    gpus_per_node: 2\n    intra_node: {kind: nvlink, bandwidth: 450 GB/s}\n"
        "    nic: {count: " + std::to_string(nics) + ", bandwidth: 25 GB/s}\n",
        "test", GpuCatalog::load_default());
    const Topology topo(c);
    const ModelConfig m = load_model("gpt-moe-1.3b-64e");
    const auto plans = complete_template(parse_template("16x[H100:tp1x1 ep16/pipelines]"), {&c, &topo, &m, 64},
                                         simulator(c, topo, m));
    ASSERT_FALSE(plans.empty());
    const CompletedPlan& best = plans.front();
    int fitting_levels = 0;
    for (const Recompute r : {Recompute::None, Recompute::Selective, Recompute::Full})
      for (const bool z : {false, true}) {
        Plan p = best.plan;
        p.recompute = r;
        p.zero1 = z;
        const SimResult s = simulate_iteration(c, topo, m, p, SimOptions{});
        if (s.oom) continue;
        ++fitting_levels;
        EXPECT_LE(best.priced_s, s.iteration_time_s) << nics << " NICs: " << to_string(r) << (z ? " with ZeRO-1" : "");
      }
    EXPECT_GE(fitting_levels, 4);  // the premise: several levels fit, so the choice matters
  }
}

// 16 TP-4 replicas of gpt3-13b on H200 at a global batch of 128: 8 samples a replica. Two micro-batches of 4
// fit without recompute, one of 8 only with selective recompute; compute alone (the analytic split) favours
// the two of 4, which skip the recompute, so the rule of step 4 leaves the recompute level unpriced. Yet the
// gradient reduction overlaps only the last micro-batch's backward pass (Megatron-LM's overlap_grad_reduce
// issues each bucket's reduction when its gradients are final), which is twice as long with one micro-batch
// of 8: the simulator hides nearly all of it there (DP 3 ms against 75 ms exposed). Asked to price every
// recompute level, completion must find that plan, and with the simulator as pricer rank it first.
TEST(Completion, PricesEveryRecomputeLevelWhenAsked) {
  const Fixture f("H200:8x8", load_model("gpt3-13b"));
  const Template t = parse_template("16x[H200:tp4x1]");
  const auto by_rule = complete_template(t, f.input(128), simulator(f.cluster, f.topo, f.model));
  const auto every = complete_template(t, f.input(128), simulator(f.cluster, f.topo, f.model), {.price_every_recompute_level = true});
  expect_sound(by_rule, f, 128);
  expect_sound(every, f, 128);
  for (const CompletedPlan& c : by_rule) EXPECT_EQ(c.plan.recompute, Recompute::None);
  EXPECT_NE(every.front().plan.recompute, Recompute::None);
  EXPECT_LT(every.front().priced_s, by_rule.front().priced_s);
}

TEST(Completion, PlacementKeepsStagesInOneNodeElseOneLeaf) {
  // Four 2-GPU nodes, two per leaf. A one-GPU pipeline takes n0:0; then a stage of four one-GPU groups
  // cannot sit in one node, and leaf 0 has only three free GPUs: it goes whole to leaf 1.
  Cluster c = parse_cluster_spec("A100-80:4x2", GpuCatalog::load_default());
  c.network.nodes_per_leaf = 2;
  Template t;
  t.pipelines = {pipeline(1, {stage(1, {kind("A100-80", 1)})}), pipeline(1, {stage(1, {kind("A100-80", 4)}), stage(1, {kind("A100-80", 2)})})};
  const auto placed = place_template(t, c);
  ASSERT_TRUE(placed);
  ASSERT_EQ(placed->size(), 2u);
  std::set<int> leaves;
  for (const PlacedGroup& g : (*placed)[1].stages[0].groups) leaves.insert(c.node_of(g.gpus.front()) / 2);
  EXPECT_EQ(leaves, std::set<int>{1});
  // The second stage's two groups share one node.
  std::set<int> nodes;
  for (const PlacedGroup& g : (*placed)[1].stages[1].groups) nodes.insert(c.node_of(g.gpus.front()));
  EXPECT_EQ(nodes.size(), 1u);
  // A template that needs more GPUs than the cluster has places nothing.
  Template big;
  big.pipelines = {pipeline(9, {stage(1, {kind("A100-80", 1)})})};
  EXPECT_FALSE(place_template(big, c));
}

TEST(Completion, PlacementUsesWholeNodesFirst) {
  // One A100 node of 8 GPUs and one partial node of 4 (as after preemption): a 4-GPU TP group goes to the
  // whole node, although the partial node fits it exactly.
  const Cluster c = parse_cluster_spec("A100-80:1x4,A100-80:1x8", GpuCatalog::load_default());
  Template t;
  t.pipelines = {pipeline(1, {stage(4, {kind("A100-80", 1)})})};
  const auto placed = place_template(t, c);
  ASSERT_TRUE(placed);
  EXPECT_EQ(c.nodes[c.node_of((*placed)[0].stages[0].groups[0].gpus.front())].gpus, 8);
}

TEST(Completion, PlacementPutsEachExpertGroupAcrossPipelinesInOneNode) {
  // Four replicas of a two-stage pipeline with EP 4 across them, on two 4-GPU nodes: placed pipeline by
  // pipeline, every EP group would span both nodes; placed EP group by EP group, stage 0's four GPUs share
  // one node and stage 1's the other, so the all-to-alls (per MoE layer, several times the activations a
  // stage sends) stay on the node's links and only the pipeline transfers cross the NICs.
  const Fixture f("A100-80:2x4", test::small_moe_model(32));
  Template t;
  t.pipelines = {pipeline(4, {expert_stage("A100-80", 4), expert_stage("A100-80", 4)})};
  const auto plans = complete_template(t, f.input(), simulator(f.cluster, f.topo, f.model));
  expect_sound(plans, f, 32);
  const Plan& p = plans.front().plan;
  ASSERT_EQ(p.pipelines.size(), 4u);
  for (int j = 0; j < 2; ++j) {
    std::set<int> nodes;
    for (const Pipeline& pl : p.pipelines) nodes.insert(f.cluster.node_of(pl.stages[j].groups[0].gpus.front()));
    EXPECT_EQ(nodes.size(), 1u) << "stage " << j;
  }
  // The same plan placed pipeline by pipeline (pipelines 0 and 1 on node 0, 2 and 3 on node 1) simulates
  // slower.
  Plan by_pipelines = p;
  for (int r = 0; r < 4; ++r)
    for (int j = 0; j < 2; ++j) by_pipelines.pipelines[r].stages[j].groups[0].gpus = {f.cluster.gpu_id(r / 2, (r % 2) * 2 + j)};
  const SimResult grouped = simulate_iteration(f.cluster, f.topo, f.model, p, SimOptions{});
  const SimResult spread = simulate_iteration(f.cluster, f.topo, f.model, by_pipelines, SimOptions{});
  ASSERT_FALSE(spread.oom);
  EXPECT_LT(grouped.iteration_time_s, spread.iteration_time_s);
}

TEST(Completion, ReplicasByStagePutEachStagesDataParallelPeersInOneNode) {
  // Four replicas of a two-stage TP-1 pipeline on two 4-GPU nodes: by default each pipeline keeps its two
  // stages on one node (two pipelines per node); placed replicas by stage, stage 0 of all four shares one
  // node and stage 1 the other, so each stage's gradient all-reduce stays on the node's links.
  const Cluster c = parse_cluster_spec("A100-80:2x4", GpuCatalog::load_default());
  Template t;
  t.pipelines = {pipeline(4, {stage(1, {kind("A100-80", 1)}), stage(1, {kind("A100-80", 1)})})};
  auto nodes_of_stage = [&](const std::vector<PlacedPipeline>& placed, int j) {
    std::set<int> nodes;
    for (const PlacedPipeline& p : placed) nodes.insert(c.node_of(p.stages[j].groups[0].gpus.front()));
    return nodes;
  };
  const auto by_pipeline = place_template(t, c);
  ASSERT_TRUE(by_pipeline);
  for (const PlacedPipeline& p : *by_pipeline)
    EXPECT_EQ(c.node_of(p.stages[0].groups[0].gpus.front()), c.node_of(p.stages[1].groups[0].gpus.front()));
  const auto by_stage = place_template(t, c, /*replicas_by_stage=*/true);
  ASSERT_TRUE(by_stage);
  EXPECT_EQ(nodes_of_stage(*by_stage, 0).size(), 1u);
  EXPECT_EQ(nodes_of_stage(*by_stage, 1).size(), 1u);
  EXPECT_NE(nodes_of_stage(*by_stage, 0), nodes_of_stage(*by_stage, 1));
}

TEST(Completion, ReplicasByStagePutTheSameStageOfEveryClassInOneNode) {
  // Two classes of two replicas whose first stages are alike (one TP-1 A100-80 group), on two 4-GPU A100-80
  // nodes and a V100-32 node: placed replicas by stage, stage 0 of all four pipelines shares one node, so
  // its gradient all-reduce stays on the node's links; placed class by class, the first class would fill
  // node 0 with both its stages and the second's stage 0 would go to node 1.
  const Fixture f("A100-80:2x4,V100-32:1x4", test::small_gpt_model(32));
  Template t;
  t.pipelines = {pipeline(2, {stage(1, {kind("A100-80", 1)}), stage(1, {kind("A100-80", 1)})}),
                 pipeline(2, {stage(1, {kind("A100-80", 1)}), stage(1, {kind("V100-32", 1)})})};
  const auto placed = place_template(t, f.cluster, /*replicas_by_stage=*/true);
  ASSERT_TRUE(placed);
  auto nodes_of_stage = [&](const std::vector<PlacedPipeline>& pipelines, int j) {
    std::set<int> nodes;
    for (const PlacedPipeline& p : pipelines) nodes.insert(f.cluster.node_of(p.stages[j].groups[0].gpus.front()));
    return nodes;
  };
  EXPECT_EQ(nodes_of_stage(*placed, 0).size(), 1u);
  // The first class's second stages share a node too (a block of their own: another kind than the
  // second class's V100-32 stages).
  const std::vector<PlacedPipeline> first_class(placed->begin(), placed->begin() + 2);
  EXPECT_EQ(nodes_of_stage(first_class, 1).size(), 1u);
  // Completed with that placement, the best plan simulates faster than the same plan with the second
  // class's stage 0 on node 1 (its all-reduce with the first class's stage 0 then crosses the NICs).
  CompletionOptions opt;
  opt.data_parallel_placement = true;
  const auto plans = complete_template(canonical(t), f.input(), simulator(f.cluster, f.topo, f.model), opt);
  expect_sound(plans, f, f.model.global_batch);
  const Plan& best = plans.front().plan;
  std::set<int> first_stage_nodes;
  for (const Pipeline& pl : best.pipelines) first_stage_nodes.insert(f.cluster.node_of(pl.stages[0].groups[0].gpus.front()));
  ASSERT_EQ(first_stage_nodes.size(), 1u);
  // The second class's stage 0 to free GPUs of the other A100-80 node.
  const int other = *first_stage_nodes.begin() == 0 ? 1 : 0;
  std::set<GpuId> used;
  for (const Pipeline& pl : best.pipelines)
    for (const Stage& st : pl.stages)
      for (const TpGroup& g : st.groups) used.insert(g.gpus.begin(), g.gpus.end());
  std::vector<GpuId> free;
  for (int k = 0; k < 4; ++k)
    if (used.count(f.cluster.gpu_id(other, k)) == 0) free.push_back(f.cluster.gpu_id(other, k));
  Plan spread = best;
  size_t moved = 0;
  for (Pipeline& pl : spread.pipelines) {
    if (f.cluster.group_of_node(f.cluster.node_of(pl.stages[1].groups[0].gpus.front())).gpu != "V100-32") continue;
    ASSERT_LT(moved, free.size());
    pl.stages[0].groups[0].gpus = {free[moved++]};
  }
  ASSERT_EQ(moved, 2u);
  validate_plan(spread, f.cluster, f.model, f.model.global_batch, "test");
  const SimResult grouped = simulate_iteration(f.cluster, f.topo, f.model, best, SimOptions{});
  const SimResult split = simulate_iteration(f.cluster, f.topo, f.model, spread, SimOptions{});
  ASSERT_FALSE(split.oom);
  EXPECT_LT(grouped.iteration_time_s, split.iteration_time_s);
}

TEST(Completion, IsDeterministicAndRespectsMaxCandidates) {
  const Fixture f("A100-80:1x2,V100-32:1x2", test::small_gpt_model(32));
  Template t;
  t.pipelines = {pipeline(1, {stage(1, {kind("A100-80", 2)}), stage(1, {kind("V100-32", 2)})})};
  CompletionOptions opt;
  opt.max_candidates = 3;
  const auto a = complete_template(t, f.input(), simulator(f.cluster, f.topo, f.model), opt);
  const auto b = complete_template(t, f.input(), simulator(f.cluster, f.topo, f.model), opt);
  ASSERT_FALSE(a.empty());
  EXPECT_LE(a.size(), 3u);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(plan_to_yaml(a[i].plan, f.cluster), plan_to_yaml(b[i].plan, f.cluster));
    EXPECT_EQ(a[i].priced_s, b[i].priced_s);
  }
}

// The estimator's price, never stopping early.
PlanPricer estimated(const Estimator& est) {
  return [&est](const Plan& p, double) -> std::optional<double> {
    const Estimate e = est.estimate(p);
    return e.fits ? std::optional<double>(e.iteration_s) : std::nullopt;
  };
}

// The generator's 8 templates and 24 sampled ones (seed 7): structures of every kind on the fixture's cluster.
std::vector<Template> mixed_templates(const Fixture& f) {
  std::vector<Template> templates = heuristic_templates(f.cluster, f.model, 8);
  for (const Template& t : sample_templates(f.cluster, f.model, {}, 24, 7)) templates.push_back(t);
  return templates;
}

// The same plans with the same priced times, bit for bit, in the same order.
void expect_same_plans(const std::vector<CompletedPlan>& want, const std::vector<CompletedPlan>& got, const Fixture& f,
                       const Template& t) {
  ASSERT_EQ(want.size(), got.size()) << to_text(t);
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(plan_to_yaml(want[i].plan, f.cluster), plan_to_yaml(got[i].plan, f.cluster)) << to_text(t);
    EXPECT_EQ(want[i].priced_s, got[i].priced_s) << to_text(t);
  }
}

// The cache only keeps what completion derives from the cluster and model: one cache shared by many
// templates (each completed twice, the second time on a warm cache) gives every template the plans and
// priced times a fresh completion gives it, bit for bit, on a dense and on an MoE model.
TEST(Completion, SharedCacheGivesTheSamePlansAsAFreshCompletion) {
  // Models whose memory binds on these GPUs (16-80 GB), so the cached stage memory decides plans.
  for (const char* name : {"gpt3-13b", "gpt-moe-1.3b-64e"}) {
    const Fixture f("A100-80:2x8,V100-32:2x4,T4:2x4", load_model(name));
    const Estimator est(f.cluster, f.topo, f.model);
    const PlanPricer price = estimated(est);
    const std::vector<Template> templates = mixed_templates(f);
    CompletionCache cache(f.cluster, f.model);
    CompletionInput shared = f.input();
    shared.cache = &cache;
    int completed = 0;
    for (int round = 0; round < 2; ++round)
      for (const Template& t : templates) {
        const auto fresh = complete_template(t, f.input(), price);
        expect_same_plans(fresh, complete_template(t, shared, price), f, t);
        completed += fresh.empty() ? 0 : 1;
      }
    EXPECT_GE(completed, 2 * 8) << name;  // the comparison saw plans, not only empty completions
  }
}

// A pricer may stop early where completion says the price can neither win nor be returned
// (PlanPricer's stop_at_s): with the estimator stopping there, every template gives the plans and priced
// times an estimator that always finishes gives it, bit for bit, for several numbers of returned plans, on a
// dense and an MoE model; and some estimates did stop (the comparison is not of two identical runs).
TEST(Completion, PricerStoppingEarlyGivesTheSamePlans) {
  for (const char* name : {"gpt3-13b", "gpt-moe-1.3b-64e"}) {
    const Fixture f("A100-80:2x8,V100-32:2x4,T4:2x4", load_model(name));
    const Estimator est(f.cluster, f.topo, f.model);
    const PlanPricer exact = estimated(est);
    long stopped = 0;
    const PlanPricer stopping = [&](const Plan& p, double stop_at_s) -> std::optional<double> {
      const Estimate e = est.estimate(p, stop_at_s);
      stopped += e.stopped ? 1 : 0;
      return e.fits ? std::optional<double>(e.iteration_s) : std::nullopt;
    };
    const std::vector<Template> templates = mixed_templates(f);
    int completed = 0;
    for (const int returned : {1, 2, 8})
      for (const Template& t : templates) {
        const CompletionOptions opt{.max_candidates = returned};
        const auto want = complete_template(t, f.input(), exact, opt);
        expect_same_plans(want, complete_template(t, f.input(), stopping, opt), f, t);
        completed += want.empty() ? 0 : 1;
      }
    EXPECT_GE(completed, 3 * 8) << name;
    EXPECT_GT(stopped, 0) << name;
  }
}

// PlanPrices keeps what the pricer said of each plan across completions: a planner's sequence of completions
// (every template returning 1 plan; again with the other partition ties returning 2; again with both
// placements of the replicas and every recompute level, bound by the best price so far, returning 8) gives every completion
// the plans and priced times that asking the pricer each time gives, bit for bit, on a dense and an MoE
// model. The pricer answers every plan priced at or above stop_at_s with stop_at_s itself (the least
// PlanPricer allows), so an answer kept from a lower bound and reused where the bound has risen would change
// them. It is asked less, and again for plans it answered before with a bound too low for the new call.
TEST(Completion, PlanPricesGiveThePlansOfAskingThePricerEachTime) {
  for (const char* name : {"gpt3-13b", "gpt-moe-1.3b-64e"}) {
    const Fixture f("A100-80:2x8,V100-32:2x4,T4:2x4", load_model(name));
    const Estimator est(f.cluster, f.topo, f.model);
    long calls = 0, asked_again = 0;
    std::set<std::string> asked;  // the plans asked for with the prices kept
    bool keeping = false;
    const PlanPricer bound = [&](const Plan& p, double stop_at_s) -> std::optional<double> {
      ++calls;
      if (keeping && !asked.insert(plan_to_yaml(p, f.cluster)).second) ++asked_again;
      const Estimate e = est.estimate(p);
      if (!e.fits) return std::nullopt;
      return e.iteration_s >= stop_at_s ? stop_at_s : e.iteration_s;
    };
    PlanPrices prices;
    CompletionInput kept = f.input();
    kept.prices = &prices;
    const std::vector<Template> templates = mixed_templates(f);
    long calls_each_time = 0, calls_kept = 0;
    double best = std::numeric_limits<double>::infinity();
    int completed = 0;
    for (int pass = 0; pass < 3; ++pass)
      for (const Template& t : templates) {
        const CompletionOptions opt{.max_candidates = std::array{1, 2, 8}[pass],
                                    .skip_analytic_above_s = pass == 2 ? best : std::numeric_limits<double>::infinity(),
                                    .data_parallel_placement = pass == 2,
                                    .partition_ties = pass == 1 ? PartitionTies::LatestCut : PartitionTies::EarliestCut,
                                    .price_every_recompute_level = pass == 2};
        calls = 0;
        const auto want = complete_template(t, f.input(), bound, opt);
        calls_each_time += calls;
        calls = 0, keeping = true;
        const auto got = complete_template(t, kept, bound, opt);
        calls_kept += calls, keeping = false;
        expect_same_plans(want, got, f, t);
        if (!want.empty()) best = std::min(best, want.front().priced_s), ++completed;
      }
    EXPECT_GE(completed, 2 * 8) << name;
    EXPECT_LT(calls_kept, calls_each_time) << name;
    EXPECT_GT(asked_again, 0) << name;
  }
}

// skip_analytic_above_s leaves unpriced every candidate whose analytic split is no faster than the bound.
// The analytic split leaves out communication and the optimizer step, so it should not exceed the priced
// time: with the bound just above a template's best price, completion still finds that plan (while pricing
// fewer), and with a bound of zero it prices nothing.
TEST(Completion, AnalyticSkipKeepsTheBestPlanAndPricesLess) {
  for (const char* name : {"gpt3-1.3b", "gpt3-13b"}) {
    const Fixture f("A100-80:2x8,V100-32:2x4,T4:2x4", load_model(name));
    const Estimator est(f.cluster, f.topo, f.model);
    long calls = 0;
    const PlanPricer price = [&](const Plan& p, double) -> std::optional<double> {
      ++calls;
      const Estimate e = est.estimate(p);
      return e.fits ? std::optional<double>(e.iteration_s) : std::nullopt;
    };
    long all_calls = 0, skip_calls = 0;
    int compared = 0;
    for (const Template& t : heuristic_templates(f.cluster, f.model, 8)) {
      calls = 0;
      const auto all = complete_template(t, f.input(), price);
      all_calls += calls;
      if (all.empty()) continue;
      calls = 0;
      const auto skipped = complete_template(t, f.input(), price, {.skip_analytic_above_s = all.front().priced_s * (1 + 1e-9)});
      skip_calls += calls;
      ASSERT_FALSE(skipped.empty()) << name << " " << to_text(t);
      EXPECT_EQ(skipped.front().priced_s, all.front().priced_s) << name << " " << to_text(t);
      EXPECT_TRUE(complete_template(t, f.input(), price, {.skip_analytic_above_s = 0}).empty());
      ++compared;
    }
    EXPECT_GE(compared, 4) << name;
    EXPECT_LT(skip_calls, all_calls) << name;
  }
}

TEST(Completion, RefusesACacheOfAnotherClusterOrModel) {
  const Fixture f("A100-80:1x8", test::small_gpt_model(32));
  const Fixture other("A100-80:1x8", test::small_gpt_model(32));
  Template t;
  t.pipelines = {pipeline(1, {stage(8, {kind("A100-80", 1)})})};
  CompletionCache cache(other.cluster, other.model);
  CompletionInput in = f.input();
  in.cache = &cache;
  EXPECT_THROW(complete_template(t, in, simulator(f.cluster, f.topo, f.model)), std::invalid_argument);
}

TEST(Completion, RefusesPlanPricesOfAnotherBatch) {
  const Fixture f("A100-80:1x8", test::small_gpt_model(32));
  Template t;
  t.pipelines = {pipeline(1, {stage(8, {kind("A100-80", 1)})})};
  PlanPrices prices;
  CompletionInput in = f.input(32);
  in.prices = &prices;
  EXPECT_FALSE(complete_template(t, in, simulator(f.cluster, f.topo, f.model)).empty());
  in.global_batch = 64;
  EXPECT_THROW(complete_template(t, in, simulator(f.cluster, f.topo, f.model)), std::invalid_argument);
}

TEST(Completion, ImpossibleTemplatesGiveNoPlan) {
  const Fixture f("A100-80:1x2", test::small_gpt_model(32));
  Template wrong_type;
  wrong_type.pipelines = {pipeline(1, {stage(1, {kind("V100-32", 1)})})};
  EXPECT_TRUE(complete_template(wrong_type, f.input(), simulator(f.cluster, f.topo, f.model)).empty());
  Template too_many;  // more pipelines than samples
  too_many.pipelines = {pipeline(2, {stage(1, {kind("A100-80", 1)})})};
  EXPECT_TRUE(complete_template(too_many, f.input(1), simulator(f.cluster, f.topo, f.model)).empty());
  Template gpt_1_3b_on_small;  // more stages than layers
  gpt_1_3b_on_small.pipelines = {pipeline(1, std::vector<StageTemplate>(9, stage(1, {kind("A100-80", 1)})))};
  EXPECT_TRUE(complete_template(gpt_1_3b_on_small, f.input(), simulator(f.cluster, f.topo, f.model)).empty());
}

// What PipelineCosts needs of a cluster and a model: their profiler's layer times and stage memory.
struct ClassCostInputs {
  Cluster cluster;
  ModelConfig model;
  Profiler profiler;
  LayerTimes times;
  StageMemoryLines memory;
  ClassCostInputs(const std::string& spec, const std::string& model_name)
      : cluster(parse_cluster_spec(spec, GpuCatalog::load_default())), model(load_model(model_name)),
        profiler(cluster, model), times(profiler), memory(profiler) {}
};

TEST(Completion, BestMicroBatchIsTheBestDivisor) {
  // PipelineCosts::best prunes divisors with lower bounds; it must choose what trying every divisor chooses,
  // time_lower_bound must not exceed any divisor's time, and best_lower_bound and time_floor must not exceed
  // the choice (time_floor for any number of samples). On
  // a two-stage class and on a six-stage class of three types where memory limits the partitions (gpt3-2.7b
  // on 16 GB T4 stages).
  // Returns whether memory decided a choice at some level.
  const auto check = [](const std::string& spec, const std::string& model, const std::vector<StageCostSpec>& stages) {
    bool memory_decided = false;
    ClassCostInputs in(spec, model);
    LayerTimes& times = in.times;
    StageMemoryLines& memory = in.memory;
    for (const MemoryLevel level : memory_levels(true)) {
      PipelineCosts costs(times, memory, stages, level);
      PipelineCosts fresh(times, memory, stages, level);
      PipelineCosts bounds(times, memory, stages, level);
      for (long n = 1; n <= 96; ++n) {
        double best = PipelineCosts::kInf;
        int best_b = 0;
        for (int b = 1; b <= n; ++b)
          if (const double t = costs.time(n, b); t < best) {
            best = t;
            best_b = b;
          }
        for (int b = 1; b <= n; ++b)
          if (n % b == 0 && b >= bounds.min_micro_batch()) {
            EXPECT_LE(bounds.time_lower_bound(n, b), costs.time(n, b)) << model << " n=" << n << " b=" << b;
          }
        EXPECT_LE(fresh.best_lower_bound(n), best) << model << " n=" << n;  // a bound before any choice is made
        EXPECT_LE(fresh.time_floor(), best) << model << " n=" << n;
        const PipelineCosts::Choice got = costs.best(n);
        EXPECT_EQ(got.micro_batch, best_b) << model << " n=" << n;
        EXPECT_EQ(got.time_s, best) << model << " n=" << n;
      }
      memory_decided = memory_decided || costs.memory_decided();
    }
    return memory_decided;
  };
  check("A100-80:1x2,V100-32:1x2", "gpt3-1.3b", {{1, 1, {{"A100-80"}, {"V100-32"}}, 2}, {1, 1, {{"V100-32"}}, 2}});
  EXPECT_TRUE(check("A100-80:1x2,V100-32:1x2,T4:1x4", "gpt3-2.7b",
        {{1, 1, {{"A100-80"}}, 1}, {1, 1, {{"V100-32"}}, 1}, {1, 1, {{"V100-32"}}, 1}, {1, 1, {{"T4"}}, 1},
         {1, 1, {{"T4"}}, 1}, {1, 1, {{"T4"}, {"T4"}}, 1}}));
}

// What the completion's skip of a memory level rests on (no split's analytic time below the bound): no number
// of samples whose best time is below t exceeds most_samples_below(t), on classes of one and of several TP
// groups per stage, one and several stages, where memory limits the sizes and where it does not; and on a
// one-stage class of one group, where the bound is each size's own time, it is that largest number.
TEST(Completion, MostSamplesBelowBoundsEverySampleCountFasterThanIt) {
  constexpr long kMaxSamples = 96;
  const auto check = [](const std::string& spec, const std::string& model, const std::vector<StageCostSpec>& stages,
                        bool exact) {
    ClassCostInputs in(spec, model);
    for (const MemoryLevel level : memory_levels(true)) {
      PipelineCosts costs(in.times, in.memory, stages, level);
      PipelineCosts bounds(in.times, in.memory, stages, level);
      std::vector<double> best(kMaxSamples + 1, PipelineCosts::kInf);
      for (long n = 1; n <= kMaxSamples; ++n) best[n] = costs.best(n).time_s;
      // Thresholds between the distinct times (no time sits on one), and above them all.
      std::vector<double> times;
      for (long n = 1; n <= kMaxSamples; ++n)
        if (best[n] < PipelineCosts::kInf) times.push_back(best[n]);
      std::sort(times.begin(), times.end());
      times.erase(std::unique(times.begin(), times.end()), times.end());
      std::vector<double> thresholds{times.empty() ? 1.0 : times.front() / 2};
      for (size_t i = 0; i + 1 < times.size(); ++i) thresholds.push_back((times[i] + times[i + 1]) / 2);
      if (!times.empty()) thresholds.push_back(times.back() * 2);
      for (const double t : thresholds) {
        const long most = bounds.most_samples_below(t, kMaxSamples);
        long largest = 0;  // the largest n whose best time is below t
        for (long n = 1; n <= kMaxSamples; ++n)
          if (best[n] < t) largest = n;
        EXPECT_LE(largest, most) << model << " level " << static_cast<int>(level.recompute) << level.zero1 << " t=" << t;
        if (exact) {
          EXPECT_EQ(largest, most) << model << " level " << static_cast<int>(level.recompute) << level.zero1 << " t=" << t;
        }
      }
    }
  };
  // One stage, one group: memory caps the micro-batch of gpt3-13b on eight A100-80s.
  check("A100-80:1x8", "gpt3-13b", {{8, 1, {{"A100-80"}}, 1}}, true);
  // One stage of two groups of one type (the bound of a block of sizes is its largest size's) and of
  // different types.
  check("A100-80:1x2", "gpt3-1.3b", {{1, 1, {{"A100-80"}, {"A100-80"}}, 2}}, false);
  // Stages of different group counts: the one-group stage takes the whole micro-batch.
  check("A100-80:1x4", "gpt3-1.3b", {{1, 1, {{"A100-80"}, {"A100-80"}}, 2}, {1, 1, {{"A100-80"}}, 2}}, false);
  check("A100-80:1x2,V100-32:1x2", "gpt3-1.3b", {{1, 1, {{"A100-80"}, {"V100-32"}}, 2}}, false);
  // Two stages of one group.
  check("A100-80:1x2,V100-32:1x2", "gpt3-1.3b", {{1, 1, {{"A100-80"}}, 1}, {1, 1, {{"V100-32"}}, 1}}, false);
  // Six stages where memory limits the partitions (gpt3-2.7b on 16 GB T4 stages), one group each, then with
  // a last stage of two groups.
  const std::vector<StageCostSpec> five{{1, 1, {{"A100-80"}}, 1}, {1, 1, {{"V100-32"}}, 1}, {1, 1, {{"V100-32"}}, 1},
                                        {1, 1, {{"T4"}}, 1}, {1, 1, {{"T4"}}, 1}};
  std::vector<StageCostSpec> six = five;
  six.push_back({1, 1, {{"T4"}}, 1});
  check("A100-80:1x2,V100-32:1x2,T4:1x4", "gpt3-2.7b", six, false);
  six.back() = {1, 1, {{"T4"}, {"T4"}}, 1};
  check("A100-80:1x2,V100-32:1x2,T4:1x4", "gpt3-2.7b", six, false);
}

// The floor is the time of one sample through a one-stage class of one TP group (its stage sum), not a
// looser number.
TEST(Completion, TimeFloorIsOneSampleThroughAOneGroupClass) {
  ClassCostInputs in("A100-80:1x8", "gpt3-1.3b");
  for (const MemoryLevel level : memory_levels(false)) {
    PipelineCosts costs(in.times, in.memory, {{2, 1, {{"A100-80"}}, 1}}, level);
    const double one = costs.time(1, 1);
    ASSERT_LT(one, PipelineCosts::kInf);
    EXPECT_NEAR(costs.time_floor(), one, 1e-12 * one);
  }
}

// What PipelineCosts::time_floor and the completion's floor skip rest on: a layer's time (and the embedding's
// and the head's) grows with the samples of its micro-batch (1 to 1,024) and with the recompute level, for
// every GPU type of the catalog, bundled model and TP width of one node.
TEST(Completion, LayerTimesGrowWithSamplesAndRecompute) {
  const GpuCatalog catalog = GpuCatalog::load_default();
  std::vector<std::string> models;
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(configs_dir()) / "models"))
    models.push_back(e.path().stem().string());
  std::sort(models.begin(), models.end());
  ASSERT_GE(models.size(), 10u);
  // Every count up to 32 (where the GEMM efficiency still climbs), then up to a large global batch.
  std::vector<int> sample_counts;
  for (int s = 1; s <= 32; ++s) sample_counts.push_back(s);
  for (const int s : {48, 64, 96, 128, 256, 512, 1024}) sample_counts.push_back(s);
  long checked = 0;
  for (const std::string& type : catalog.names()) {
    const Cluster c = parse_cluster_spec(type + ":1x8", catalog);
    for (const std::string& name : models) {
      const ModelConfig m = load_model(name);
      const Profiler profiler(c, m);
      LayerTimes times(profiler);
      const int id = times.type_id(type);
      for (const int tp : {1, 2, 4, 8}) {
        if (m.heads % tp != 0 || (m.kv_heads > 0 && m.kv_heads % tp != 0)) continue;
        const LayerTimes::Table* less_recompute = nullptr;  // at the same samples
        int before = 0;  // the samples checked before
        for (const int samples : sample_counts) {
          less_recompute = nullptr;
          for (const Recompute r : {Recompute::None, Recompute::Selective, Recompute::Full}) {
            const LayerTimes::Table& t = times.table(id, tp, samples, r);
            const auto grows = [&](const LayerTimes::Table& before, const std::string& what) {
              EXPECT_LE(before.embedding, t.embedding) << type << " " << name << " tp " << tp << " " << what;
              EXPECT_LE(before.head, t.head) << type << " " << name << " tp " << tp << " " << what;
              for (int l = 0; l < m.layers; ++l)
                ASSERT_LE(before.prefix[l + 1] - before.prefix[l], t.prefix[l + 1] - t.prefix[l])
                    << type << " " << name << " tp " << tp << " layer " << l << " " << what;
            };
            if (before > 0) grows(times.table(id, tp, before, r), "samples " + std::to_string(samples));
            if (less_recompute != nullptr) grows(*less_recompute, "recompute at samples " + std::to_string(samples));
            less_recompute = &t;
            ++checked;
          }
          before = samples;
        }
      }
    }
  }
  EXPECT_GT(checked, 10000);
}

// StageMemoryLines keeps one line per layer-range kind for every micro-batch size and ZeRO-1 degree. Its
// bytes must be, bit for bit, the affine reconstruction from stage_memory at the query's own degree (no
// samples; one sample with 0 and 1 micro-batches in flight), and stage_memory itself up to rounding, on a
// dense and an MoE model (expert layers every other layer), every memory level, TP 1 and 2, several degrees.
TEST(Completion, StageMemoryLinesAreStageMemoryAtEveryZeroOneDegree) {
  const Cluster c = parse_cluster_spec("A100-80:1x8", GpuCatalog::load_default());
  int checked = 0;
  for (const char* name : {"gpt3-1.3b", "gpt-moe-1.3b-64e"}) {
    const ModelConfig m = load_model(name);
    const Profiler profiler(c, m);
    StageMemoryLines memory(profiler);
    const double experts = m.moe ? 8 : -1;
    for (const MemoryLevel level : memory_levels(true))
      for (const int tp : {1, 2})
        for (const int dp : {1, 3, 8})
          for (int begin = 0; begin < m.layers; begin += 5)
            for (int end = begin + 1; end <= m.layers; end += 4) {
              StageMemoryInput in;
              in.layer_begin = begin, in.layer_end = end;
              in.has_embedding = begin == 0, in.has_head = end == m.layers;
              in.recompute = level.recompute, in.zero1 = level.zero1, in.dp = dp;
              in.local_experts = experts, in.ep = m.moe ? 4 : 1;
              in.shard = {tp, false, 0.0};
              const double fixed = stage_memory(m, in).total();
              in.shard.samples = 1.0;
              const auto [idle, one] = stage_memory_idle_and_one(m, in);
              for (const int samples : {0, 1, 3})
                for (const long in_flight : {1L, 4L}) {
                  const StageMemoryLines::Query q{tp, samples, experts, in.ep, dp, level};
                  const double got = memory.bytes(q, begin, end, in_flight);
                  const double per_sample = idle.total() - fixed, per_in_flight = one.total() - idle.total();
                  EXPECT_EQ(got, fixed + samples * (per_sample + static_cast<double>(in_flight) * per_in_flight))
                      << name << " [" << begin << ", " << end << ") tp " << tp << " dp " << dp << " samples " << samples;
                  StageMemoryInput direct = in;
                  direct.shard.samples = samples, direct.in_flight = static_cast<double>(in_flight);
                  EXPECT_NEAR(got, stage_memory(m, direct).total(), 1e-9 * got);
                  ++checked;
                }
            }
  }
  EXPECT_GT(checked, 1000);
}

// The min-max partition against a brute force over every cut of a three-stage pipeline whose stages hold
// several groups of one type (PipelineCosts keeps each distinct layer table and memory line once): each
// stage timed as its slowest group and checked in memory for every group, from the groups' own shares.
// gpt3-2.7b on these GPUs: the V100-32 groups' memory rules out some ranges, not all.
// A one-stage class's partition is the whole model where every group holds it and the model without its last
// layer (the same end a scan of prefixes from the first layer stops at), else none: with one and two groups,
// where memory rules some micro-batches out.
TEST(Completion, OneStagePartitionIsTheWholeModelWhereItFits) {
  int fitting = 0, ruled_out = 0;
  const auto check = [&](const std::string& spec, const std::string& model, const StageCostSpec& stage) {
    ClassCostInputs in(spec, model);
    const int layers = in.model.layers;
    for (const MemoryLevel level : memory_levels(true)) {
      PipelineCosts costs(in.times, in.memory, {stage}, level);
      for (int b = costs.min_micro_batch(); b <= 24; ++b) {
        const std::vector<int>& share = costs.shares(0, b);
        auto holds = [&](int end) {
          for (size_t g = 0; g < stage.groups.size(); ++g) {
            const StageMemoryLines::Query q{stage.tp, share[g], -1, 1, stage.zero1_dp, level};
            if (in.memory.bytes(q, 0, end, 1) > in.profiler.gpu_memory_bytes(stage.groups[g].gpu_type)) return false;
          }
          return true;
        };
        const bool fits = holds(layers - 1) && holds(layers);
        const std::vector<int> expected = fits ? std::vector<int>{0, layers} : std::vector<int>{};
        for (const long mb : {1L, 4L}) EXPECT_EQ(costs.partition(b, mb), expected) << model << " b=" << b << " m=" << mb;
        (fits ? fitting : ruled_out) += 1;
      }
    }
  };
  check("A100-80:1x8", "gpt3-13b", {8, 1, {{"A100-80"}}, 1});
  check("A100-80:1x2,V100-32:1x2", "gpt3-2.7b", {1, 1, {{"A100-80"}, {"V100-32"}}, 1});
  EXPECT_GT(fitting, 20);
  EXPECT_GT(ruled_out, 20);
}

TEST(Completion, PartitionOfStagesOfLikeGroupsMatchesBruteForceOverEveryGroup) {
  ClassCostInputs in("A100-80:1x4,V100-32:1x4", "gpt3-2.7b");
  const ModelConfig& m = in.model;
  LayerTimes& times = in.times;
  StageMemoryLines& memory = in.memory;
  const std::vector<StageCostSpec> stages = {{1, 1, {{"A100-80"}, {"A100-80"}, {"V100-32"}}, 1},
                                             {1, 1, {{"V100-32"}, {"V100-32"}, {"V100-32"}}, 1},
                                             {2, 1, {{"A100-80"}, {"V100-32"}}, 1}};
  const int layers = m.layers;
  const long micro_batches = 8;
  int checked = 0;
  for (const MemoryLevel level : memory_levels(true)) {
    PipelineCosts costs(times, memory, stages, level);
    for (int b = costs.min_micro_batch(); b <= 9; ++b) {
      // Stage j over [begin, end): its slowest group's time, infinite when a group does not fit.
      auto stage_s = [&](int j, int begin, int end) {
        const std::vector<int>& share = costs.shares(j, b);
        const long in_flight = std::min<long>(static_cast<long>(stages.size()) - j, micro_batches);
        double worst = 0;
        for (size_t g = 0; g < stages[j].groups.size(); ++g) {
          const std::string& type = stages[j].groups[g].gpu_type;
          const StageMemoryLines::Query q{stages[j].tp, share[g], -1, 1, 1, level};
          if (memory.bytes(q, begin, end, in_flight) > in.profiler.gpu_memory_bytes(type)) return PipelineCosts::kInf;
          worst = std::max(worst, times.table(times.type_id(type), stages[j].tp, share[g], level.recompute).stage_s(begin, end));
        }
        return worst;
      };
      double best = PipelineCosts::kInf;
      for (int x = 1; x < layers; ++x)
        for (int y = x + 1; y < layers; ++y)
          best = std::min(best, std::max({stage_s(0, 0, x), stage_s(1, x, y), stage_s(2, y, layers)}));
      const std::vector<int>& bounds = costs.partition(b, micro_batches);
      if (best == PipelineCosts::kInf) {
        EXPECT_TRUE(bounds.empty()) << "b=" << b;
        continue;
      }
      ASSERT_EQ(bounds.size(), stages.size() + 1) << "b=" << b;
      const std::vector<double> got = costs.stage_times(b, micro_batches);
      for (size_t j = 0; j < stages.size(); ++j)
        EXPECT_EQ(got[j], stage_s(static_cast<int>(j), bounds[j], bounds[j + 1])) << "b=" << b << " stage " << j;
      EXPECT_EQ(*std::max_element(got.begin(), got.end()), best) << "b=" << b;
      ++checked;
    }
  }
  EXPECT_GT(checked, 20);  // most sizes fit at some memory level
}

// A random pipeline class: 1-4 stages of one TP width (1, 2 or 4), each of 1-2 groups of `types`, each
// stage's ZeRO-1 shards from zero1_dp().
template <class Zero1Dp>
std::vector<StageCostSpec> random_class(std::mt19937& rng, const std::vector<std::string>& types, Zero1Dp zero1_dp) {
  std::vector<StageCostSpec> stages(1 + rng() % 4);
  const int tp = 1 << (rng() % 3);
  for (StageCostSpec& s : stages) {
    s.tp = tp;
    s.groups.resize(1 + rng() % 2);
    for (GroupCostSpec& g : s.groups) g.gpu_type = types[rng() % types.size()];
    s.zero1_dp = zero1_dp();
  }
  return stages;
}

// The cluster and models of the random-class tests: f(model name, its layer times, its memory lines).
const std::vector<std::string> kClassTypes{"A100-80", "V100-32", "T4"};
template <class F>
void for_each_class_model(const F& f) {
  const Cluster c = parse_cluster_spec("A100-80:1x8,V100-32:1x8,T4:1x4", GpuCatalog::load_default());
  for (const char* name : {"gpt3-1.3b", "gpt3-13b"}) {
    const ModelConfig m = load_model(name);
    const Profiler profiler(c, m);
    LayerTimes times(profiler);
    StageMemoryLines memory(profiler);
    f(name, times, memory);
  }
}

TEST(Completion, MoreRecomputeChoosesNoFasterWhereMemoryDecidedNothing) {
  // PipelineCosts::memory_decided lets completion skip a level of more recompute: its layers are slower and
  // only a looser memory limit could make it faster. Over random pipeline classes (1-4 stages of 1-2 groups
  // of three GPU types, TP 1-4) and sample counts, wherever the level of less recompute (same ZeRO-1
  // setting) reports that memory decided nothing, the level of more recompute must choose no faster.
  int free_cases = 0, decided_cases = 0;
  for_each_class_model([&](const char* name, LayerTimes& times, StageMemoryLines& memory) {
    std::mt19937 rng(11);
    for (int draw = 0; draw < 40; ++draw) {
      const std::vector<StageCostSpec> stages = random_class(rng, kClassTypes, [] { return 2; });
      const long n = 1 + static_cast<long>(rng() % 64);
      const std::vector<MemoryLevel> levels = memory_levels(true);
      for (size_t lo = 0; lo < levels.size(); ++lo)
        for (size_t hi = lo + 1; hi < levels.size(); ++hi) {
          if (levels[hi].zero1 != levels[lo].zero1 || levels[hi].recompute <= levels[lo].recompute) continue;
          PipelineCosts less(times, memory, stages, levels[lo]), more(times, memory, stages, levels[hi]);
          const double t_less = less.best(n).time_s;
          if (less.memory_decided()) {
            ++decided_cases;
            continue;
          }
          ++free_cases;
          EXPECT_GE(more.best(n).time_s, t_less) << name << " draw " << draw << " n=" << n << " levels " << lo << "->" << hi;
        }
    }
  });
  std::printf("[memory decided] %d cases free of memory, %d decided by it\n", free_cases, decided_cases);
  EXPECT_GT(free_cases, 50);  // both kinds occur: the check is not vacuous
  EXPECT_GT(decided_cases, 50);
}

TEST(Completion, ClassAnswersPartitionsInAnyOrderAsAFreshOne) {
  // A class reuses a partition whose search met no range the memory limit rules out for the same micro-batch
  // at fewer micro-batches in flight. Over random classes, levels and orders of queries, each partition must
  // be what a class built afresh for that one query finds.
  int empty = 0, found = 0;
  for_each_class_model([&](const char* name, LayerTimes& times, StageMemoryLines& memory) {
    std::mt19937 rng(29);
    for (int draw = 0; draw < 30; ++draw) {
      const std::vector<StageCostSpec> stages = random_class(rng, kClassTypes, [&] { return 1 + static_cast<int>(rng() % 6); });
      const MemoryLevel level{static_cast<Recompute>(rng() % 3), rng() % 2 == 0};
      PipelineCosts warm(times, memory, stages, level);
      for (int q = 0; q < 40; ++q) {
        const int b = 1 + static_cast<int>(rng() % 24);
        const long mb = 1 + static_cast<long>(rng() % 8);
        const std::vector<int> got = warm.partition(b, mb);
        ASSERT_EQ(got, PipelineCosts(times, memory, stages, level).partition(b, mb)) << name << " draw " << draw << " b=" << b << " m=" << mb;
        (got.empty() ? empty : found) += 1;
      }
    }
  });
  EXPECT_GT(found, 100);  // partitions that fit and micro-batches that fit nowhere both occur
  EXPECT_GT(empty, 20);
}

TEST(Completion, ZeroOneClassSharingCachesAnswersAsAFreshOne) {
  // A ZeRO-1 class built from the class without ZeRO-1 (same stages and recompute) shares its memory-free
  // caches and the partitions it found without meeting the memory limit. Over random pipeline classes, after
  // the class without ZeRO-1 answered a run of queries, the sharing class must answer every query exactly as
  // a class built afresh: partitions, stage times, best micro-batch choices, speeds and memory_decided.
  int shared_partitions = 0, limited = 0;
  for_each_class_model([&](const char* name, LayerTimes& times, StageMemoryLines& memory) {
    std::mt19937 rng(23);
    for (int draw = 0; draw < 30; ++draw) {
      const std::vector<StageCostSpec> stages = random_class(rng, kClassTypes, [&] { return 1 + static_cast<int>(rng() % 4); });
      const Recompute recompute = static_cast<Recompute>(rng() % 3);
      PipelineCosts off(times, memory, stages, {recompute, false});
      std::vector<std::pair<int, long>> queries;  // (b, m)
      for (int q = 0; q < 24; ++q) queries.emplace_back(1 + static_cast<int>(rng() % 32), 1 + static_cast<long>(rng() % 16));
      for (const auto& [b, mb] : queries) {
        off.partition(b, mb);
        off.best(static_cast<long>(b) * mb);
      }
      off.speed(64);
      PipelineCosts sharing(off, {recompute, true}), fresh(times, memory, stages, {recompute, true});
      for (const auto& [b, mb] : queries) {
        ASSERT_EQ(sharing.partition(b, mb), fresh.partition(b, mb)) << name << " draw " << draw << " b=" << b << " m=" << mb;
        EXPECT_EQ(sharing.stage_times(b, mb), fresh.stage_times(b, mb));
        const long n = static_cast<long>(b) * mb;
        EXPECT_EQ(sharing.best(n).time_s, fresh.best(n).time_s) << name << " draw " << draw << " n=" << n;
        EXPECT_EQ(sharing.best(n).micro_batch, fresh.best(n).micro_batch);
        EXPECT_EQ(sharing.best_lower_bound(n + 1), fresh.best_lower_bound(n + 1));
        const bool was_limited = off.partition(b, mb).empty() || off.partition(b, mb) != fresh.partition(b, mb);
        limited += was_limited ? 1 : 0;
        shared_partitions += was_limited ? 0 : 1;
      }
      EXPECT_EQ(sharing.speed(64), fresh.speed(64));
      EXPECT_EQ(sharing.memory_decided(), fresh.memory_decided()) << name << " draw " << draw;
    }
  });
  EXPECT_GT(shared_partitions, 100);  // both kinds occur: partitions the limit left alone and ones it shaped
  EXPECT_GT(limited, 20);
}

TEST(Completion, ClassOnLayerTimesWarmedByOtherClassesAnswersAsOnFreshOnes) {
  // LayerTimes keeps each stage's group shares and tables (stage_groups), and StageMemoryLines each stage's
  // largest fitting ends (max_ends, by stage memory id), for every class and template that asks later. Over
  // random pipeline classes (ZeRO-1 shards and memory levels drawn too, so that stages differing only there
  // meet), a class built on layer times and memory lines that other random classes have used must answer
  // every query exactly as the same class on fresh ones: partitions, stage times, best micro-batch choices,
  // lower bounds, speeds and memory_decided.
  int two_group_stages = 0;
  for_each_class_model([&](const char* name, LayerTimes& warm_times, StageMemoryLines& warm_memory) {
    std::mt19937 rng(31);
    for (int draw = 0; draw < 30; ++draw) {
      const Recompute recompute = static_cast<Recompute>(rng() % 3);
      const MemoryLevel level{recompute, rng() % 2 == 0};
      const auto zero1_dp = [&] { return 1 + static_cast<int>(rng() % 4); };
      for (int other = 0; other < 3; ++other) {  // warm the shared caches with other classes
        PipelineCosts c(warm_times, warm_memory, random_class(rng, kClassTypes, zero1_dp), level);
        for (int q = 0; q < 12; ++q) c.best(1 + static_cast<long>(rng() % 96));
      }
      const std::vector<StageCostSpec> stages = random_class(rng, kClassTypes, zero1_dp);
      for (const StageCostSpec& st : stages) two_group_stages += st.groups.size() == 2 ? 1 : 0;
      LayerTimes fresh_times(warm_times.profiler());
      StageMemoryLines fresh_memory(warm_times.profiler());
      PipelineCosts warm(warm_times, warm_memory, stages, level), fresh(fresh_times, fresh_memory, stages, level);
      for (int q = 0; q < 16; ++q) {
        const int b = 1 + static_cast<int>(rng() % 32);
        const long m = 1 + static_cast<long>(rng() % 16), n = b * m;
        ASSERT_EQ(warm.partition(b, m), fresh.partition(b, m)) << name << " draw " << draw << " b=" << b << " m=" << m;
        EXPECT_EQ(warm.stage_times(b, m), fresh.stage_times(b, m));
        for (int j = 0; j < warm.depth(); ++j) EXPECT_EQ(warm.shares(j, b), fresh.shares(j, b)) << "stage " << j;
        EXPECT_EQ(warm.best(n).time_s, fresh.best(n).time_s) << name << " draw " << draw << " n=" << n;
        EXPECT_EQ(warm.best(n).micro_batch, fresh.best(n).micro_batch);
        EXPECT_EQ(warm.best_lower_bound(n + 1), fresh.best_lower_bound(n + 1));
      }
      EXPECT_EQ(warm.speed(64), fresh.speed(64));
      EXPECT_EQ(warm.memory_decided(), fresh.memory_decided()) << name << " draw " << draw;
    }
  });
  EXPECT_GT(two_group_stages, 20);  // stages whose shares are split, not only whole micro-batches
}

TEST(Completion, EqualWeightsSplitTheBatchAlikeWhateverTheirValue) {
  // With one pipeline class, completion's first split weighs every pipeline by 1 instead of the class's
  // speed (PipelineCosts::runs instead of speed). That keeps every split only if equal weights give the same
  // split whatever their value: over batch sizes, pipeline counts and weights from 1e-9 to 1e9 (speeds in
  // samples per second lie far inside), the split must be that of weights of 1.
  int checked = 0;
  for (long total = 1; total <= 400; ++total)
    for (size_t n = 1; n <= 12 && static_cast<long>(n) <= total; ++n)
      for (const double w : {1e-9, 0.37, 3.0, 12.345678, 1e3 / 7, 3.3e5, 1e9}) {
        ASSERT_EQ(proportional_split(total, std::vector<double>(n, w)), proportional_split(total, std::vector<double>(n, 1.0)))
            << "total " << total << " pipelines " << n << " weight " << w;
        ++checked;
      }
  EXPECT_GT(checked, 20000);
}

TEST(Completion, RunsIsWhetherTheClassHasASpeed) {
  // PipelineCosts::runs stops at the first micro-batch size speed() would find fitting. Over random classes
  // (some too large for their GPUs' memory), memory levels and largest sizes, it must say speed() > 0 of
  // a class built afresh.
  int running = 0, not_running = 0;
  for_each_class_model([&](const char* name, LayerTimes& times, StageMemoryLines& memory) {
    std::mt19937 rng(37);
    for (int draw = 0; draw < 60; ++draw) {
      const std::vector<StageCostSpec> stages = random_class(rng, kClassTypes, [&] { return 1 + static_cast<int>(rng() % 4); });
      const MemoryLevel level{static_cast<Recompute>(rng() % 3), rng() % 2 == 0};
      for (const long max_b : {1L, 2L, 3L, 8L, 64L}) {
        PipelineCosts costs(times, memory, stages, level), fresh(times, memory, stages, level);
        const bool runs = costs.runs(max_b);
        EXPECT_EQ(runs, fresh.speed(max_b) > 0) << name << " draw " << draw << " max_b " << max_b;
        (runs ? running : not_running) += 1;
      }
    }
  });
  EXPECT_GT(running, 100);  // both answers occur: classes that fit and classes that fit nowhere
  EXPECT_GT(not_running, 20);
}

TEST(Completion, ClassKeptForAnotherTemplateAnswersAsAFreshOne) {
  // Completion keeps a class's costs for every template with such a class (CompletionCache). Over random
  // pipeline classes, a class that answered one template's queries and then forgot memory_decided must answer
  // the next template's queries (half of them samples the first asked about too) exactly as a class built
  // afresh: best micro-batch choices, partitions, and memory_decided over the second's alone.
  int forgotten = 0;  // draws where memory decided the first template's choices but none of the second's
  int recalled = 0;   // draws where it decided a choice of the second that the first had asked about too
  for_each_class_model([&](const char* name, LayerTimes& times, StageMemoryLines& memory) {
    std::mt19937 rng(41);
    for (int draw = 0; draw < 40; ++draw) {
      const Recompute recompute = static_cast<Recompute>(rng() % 3);
      const MemoryLevel level{recompute, rng() % 2 == 0};
      const std::vector<StageCostSpec> stages = random_class(rng, kClassTypes, [&] { return 1 + static_cast<int>(rng() % 3); });
      PipelineCosts kept(times, memory, stages, level), fresh(times, memory, stages, level);
      std::vector<long> first;
      for (int q = 0; q < 12; ++q) first.push_back(1 + static_cast<long>(rng() % 192));
      for (const long n : first) kept.best(n);
      const bool first_decided = kept.memory_decided();
      kept.forget_memory_decided();
      std::vector<long> again;  // the second's queries of samples the first asked about
      for (int q = 0; q < 12; ++q) {
        const long n = q % 2 == 0 ? first[rng() % first.size()] : 1 + static_cast<long>(rng() % 192);
        if (q % 2 == 0) again.push_back(n);
        EXPECT_EQ(kept.best(n).time_s, fresh.best(n).time_s) << name << " draw " << draw << " n=" << n;
        EXPECT_EQ(kept.best(n).micro_batch, fresh.best(n).micro_batch);
        const int b = 1 + static_cast<int>(rng() % 32);
        ASSERT_EQ(kept.partition(b, n), fresh.partition(b, n)) << name << " draw " << draw << " b=" << b;
      }
      EXPECT_EQ(kept.memory_decided(), fresh.memory_decided()) << name << " draw " << draw;
      forgotten += first_decided && !fresh.memory_decided() ? 1 : 0;
      PipelineCosts again_only(times, memory, stages, level);
      for (const long n : again) again_only.best(n);
      recalled += again_only.memory_decided() ? 1 : 0;
    }
  });
  // Both ways of getting memory_decided wrong occurred: keeping the first's verdict, or dropping what the
  // cached answers of the second's queries say.
  EXPECT_GT(forgotten, 0);
  EXPECT_GT(recalled, 0);
}

// Whether the template space holds the plan's structure: every stage's groups share one tp (template_of
// throws otherwise), and EP across pipelines (ep_scope pipelines) joins replicas of one pipeline class
// (template_problem; the simulator would also run EP blocks of pipelines of different structure).
bool in_template_space(const Plan& p, const Fixture& f) {
  try {
    return template_problem(template_of(p, f.cluster), f.cluster, f.model).empty();
  } catch (const std::invalid_argument&) {
    return false;
  }
}

// Random valid plans (tests/planner/random_plans.h, drawn independently of completion) are each one way to
// complete their own structure - random layer cuts, batch split, shares, micro-batch sizes, placement. The
// rules should do better on the whole: the geometric mean of completion / plan is below 1, and completion
// finds a fitting plan for every structure that fits. Prints the distribution (COMPLETION_RANDOM_PLANS sets
// the count; default 40 per model).
void expect_beats_random_completions(const std::string& spec, const ModelConfig& model) {
  const Fixture f(spec, model);
  const int count = std::getenv("COMPLETION_RANDOM_PLANS") ? std::atoi(std::getenv("COMPLETION_RANDOM_PLANS")) : 40;
  test::RandomPlanSpace space;
  space.uneven_experts = model.moe.has_value();
  const test::FittingDraws draws = test::draw_fitting_plans(f.cluster, f.topo, f.model, 32, count, 7, 50 * count, space);
  std::vector<double> ratios;
  for (const test::SimulatedPlan& sp : draws.plans) {
    if (!in_template_space(sp.plan, f)) continue;
    const auto plans = complete_template(template_of(sp.plan, f.cluster), f.input(32), simulator(f.cluster, f.topo, f.model));
    ASSERT_FALSE(plans.empty()) << plan_to_yaml(sp.plan, f.cluster);
    ratios.push_back(plans.front().priced_s / sp.result.iteration_time_s);
  }
  ASSERT_GE(ratios.size(), static_cast<size_t>(count / 4));  // most draws fall in the template space
  std::sort(ratios.begin(), ratios.end());
  double log_sum = 0;
  for (const double r : ratios) log_sum += std::log(r);
  const double geomean = std::exp(log_sum / static_cast<double>(ratios.size()));
  const auto slower = std::count_if(ratios.begin(), ratios.end(), [](double r) { return r > 1.01; });
  std::printf("[completion vs random plans] %s %s: %zu structures, completion/plan geomean %.3f, median %.3f, max %.3f, "
              "%ld more than 1 %% slower\n",
              spec.c_str(), f.model.name.c_str(), ratios.size(), geomean, ratios[ratios.size() / 2], ratios.back(),
              static_cast<long>(slower));
  EXPECT_LT(geomean, 1.0);
}

// On 23 A100-40 and 25 one-GPU A100-80 nodes on 6.25 GB/s NICs (fresh held-out seed 81), opt-350m at a
// batch of 64 in sixteen 3-stage pipelines, 7 x [A100-40 | A100-40 | A100-80] and 9 x [A100-40 | A100-80 |
// A100-80]: completion's best plan simulates no slower than itself with any micro-batch size per class (the
// divisors of its samples) and with its own layer bounds or those of either class in every pipeline, where
// those fit. AMP's plan is one of these (2 x 2 samples, the second class's bounds everywhere, so that each
// layer's gradient has the same holders in every pipeline); completion missed it while it tried each class's
// runner-up micro-batch beside the other's best size only, and no shared bounds.
TEST(Completion, NoMicroBatchOrSharedBoundsOfItsPlanSimulatesFaster) {
  const Fixture f(parse_cluster_yaml_text(
                      "version: 1\nname: a100-40-and-80\n"
                      "network: {topology: leaf-spine, nodes_per_leaf: 8, oversubscription: 1, latency: 5 us}\nnode_groups:\n"
                      "  - {gpu: A100-40, nodes: 2, gpus_per_node: 8, intra_node: {kind: nvlink, bandwidth: 300 GB/s}, nic: {count: 8, bandwidth: 6.25 GB/s}}\n"
                      "  - {gpu: A100-40, nodes: 1, gpus_per_node: 6, intra_node: {kind: nvlink, bandwidth: 300 GB/s}, nic: {count: 8, bandwidth: 6.25 GB/s}}\n"
                      "  - {gpu: A100-40, nodes: 1, gpus_per_node: 1, intra_node: {kind: nvlink, bandwidth: 300 GB/s}, nic: {count: 8, bandwidth: 6.25 GB/s}}\n"
                      "  - {gpu: A100-80, nodes: 25, gpus_per_node: 1, intra_node: {kind: nvlink, bandwidth: 300 GB/s}, nic: {count: 8, bandwidth: 6.25 GB/s}}\n",
                      "a100-40-and-80", GpuCatalog::load_default()),
                  load_model("opt-350m"));
  const long global = 64;
  const Template t = parse_template(
      "7x[A100-40:tp1x1 | A100-40:tp1x1 | A100-80:tp1x1]; 9x[A100-40:tp1x1 | A100-80:tp1x1 | A100-80:tp1x1]");
  const auto plans = complete_template(t, f.input(global), simulator(f.cluster, f.topo, f.model));
  expect_sound(plans, f, global);
  const Plan& best = plans.front().plan;
  ASSERT_EQ(best.pipelines.size(), 16u);
  // A pipeline's class: the type of its middle stage.
  auto second_class = [&](const Pipeline& p) { return type_of(f, p.stages[1].groups.front()) == "A100-80"; };
  std::vector<std::vector<int>> bounds_choices{{}};  // {}: each pipeline its own
  for (const bool second : {false, true})
    for (const Pipeline& p : best.pipelines)
      if (second_class(p) == second) {
        bounds_choices.push_back({p.stages[0].layer_begin, p.stages[1].layer_begin, p.stages[2].layer_begin, p.stages[2].layer_end});
        break;
      }
  int variants = 0;
  for (const std::vector<int>& bounds : bounds_choices)
    for (const int b0 : {1, 2, 4})
      for (const int b1 : {1, 2, 4}) {
        Plan v = best;
        for (Pipeline& p : v.pipelines) {
          ASSERT_EQ(p.micro_batch * p.micro_batches, 4);
          p.micro_batch = second_class(p) ? b1 : b0;
          p.micro_batches = 4 / p.micro_batch;
          if (!bounds.empty())
            for (size_t j = 0; j < 3; ++j) p.stages[j].layer_begin = bounds[j], p.stages[j].layer_end = bounds[j + 1];
        }
        const SimResult r = simulate_iteration(f.cluster, f.topo, f.model, v, SimOptions{});
        if (r.oom) continue;
        ++variants;
        EXPECT_LE(plans.front().priced_s, r.iteration_time_s * (1 + 1e-12)) << plan_to_yaml(v, f.cluster);
      }
  EXPECT_GE(variants, 9);
}

TEST(Completion, BeatsRandomCompletionsOfTheSameStructures) {
  expect_beats_random_completions("A100-80:1x4,V100-32:2x2", test::small_gpt_model(32));
  expect_beats_random_completions("A100-80:1x4,V100-32:2x2", test::small_moe_model(32));
}

// The oracle (no phase-0 seeds, as its own tests run it) on a cluster where its search completes; its plan's
// structure completed with the simulator as the pricer comes within 1 % of the oracle's simulated time.
void expect_recovers_oracle(const std::string& spec, const ModelConfig& model) {
  const Fixture f(spec, model);
  PlanRequest req;
  req.cluster = &f.cluster;
  req.topo = &f.topo;
  req.model = &f.model;
  req.global_batch = f.model.global_batch;
  req.budget_evaluations = 1'000'000'000;
  OraclePlanner oracle(false, 0);
  const PlanResult r = oracle.plan(req);
  ASSERT_TRUE(r.plan) << r.reason;
  ASSERT_TRUE(r.search_complete) << spec << ": " << oracle.stats().incomplete_reason;
  const Template t = template_of(*r.plan, f.cluster);
  const auto t0 = std::chrono::steady_clock::now();
  const auto plans = complete_template(t, f.input(), simulator(f.cluster, f.topo, f.model));
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  expect_sound(plans, f, f.model.global_batch);
  const double ratio = plans.front().priced_s / r.predicted_iteration_time_s;
  std::printf("[completion vs oracle] %s %s G=%ld: oracle %.6f s (%.1f s search), completion %.6f s (%.2f s), ratio %.4f\n",
              spec.c_str(), f.model.name.c_str(), f.model.global_batch, r.predicted_iteration_time_s, r.planning_time_s,
              plans.front().priced_s, wall, ratio);
  // Within 1 %: the target. Completion may beat the oracle only through plans outside its declared
  // space (planner/oracle/README.md), e.g. another GPU order inside a node.
  EXPECT_LE(ratio, 1.01) << plan_to_yaml(plans.front().plan, f.cluster) << "\noracle:\n" << plan_to_yaml(*r.plan, f.cluster);
}

TEST(Completion, RecoversOracleOnMixedFourGpus) { expect_recovers_oracle("A100-80:1x2,V100-32:1x2", test::small_gpt_model(32)); }
TEST(Completion, RecoversOracleOnMixedFourGpusGpt13b) {
  expect_recovers_oracle("A100-80:1x2,V100-32:1x2", load_model("gpt3-1.3b"));
}
TEST(Completion, RecoversOracleOnOneNodeOfEight) { expect_recovers_oracle("A100-80:1x8", test::small_gpt_model(32)); }
TEST(Completion, RecoversOracleOnH100AndA100Gpt13b) {
  expect_recovers_oracle("H100:1x2,A100-80:1x2", load_model("gpt3-1.3b"));
}

}  // namespace
}  // namespace arachne::planner
