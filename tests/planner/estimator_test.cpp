// The fast estimator (planner/template/estimator.h) against the simulator it stands in for: exact where
// the model has nothing to approximate, the same memory verdict, rank agreement over >= 1,000 random plans
// on 22 clusters out of sample, and the fit of its coefficients (run by scripts/fit_estimator.sh).
#include "planner/template/estimator.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <map>

#include "planner/template/estimator_coefficients.h"
#include "sim/exec/simulate.h"
#include "sim/exec/stage_work.h"
#include "sim/plan/plan_yaml.h"
#include "tests/planner/estimator_validation.h"
#include "tests/planner/random_plans.h"
#include "tests/sim/test_support.h"

namespace arachne::planner {
namespace {

Cluster cluster_of(const std::string& spec) { return parse_cluster_spec(spec, GpuCatalog::load_default()); }

double simulated(const Cluster& c, const Topology& t, const ModelConfig& m, const Plan& p) {
  return simulate_iteration(c, t, m, p, SimOptions{}).iteration_time_s;
}

// One GPU, one stage: no transfer, no collective, nothing to approximate - the iteration is the m forward and
// backward passes and the optimizer step the simulator schedules, each rounded to the nanosecond (two
// durations per task, sim/core/engine.h): the estimate must agree within those roundings.
TEST(Estimator, OneGpuIsTheSimulatorsSumOfPasses) {
  const Cluster c = cluster_of("A100-80:1x1");
  const Topology t(c);
  const ModelConfig m = test::small_gpt_model(8);
  Shorthand s;
  s.micro_batch = 2;
  s.global_batch = 8;
  const Plan p = plan_from_shorthand(s, c, m);
  const Estimator est(c, t, m, EstimatorCoefficients{});
  const Estimate e = est.estimate(p);
  ASSERT_TRUE(e.fits);
  EXPECT_NEAR(e.iteration_s, simulated(c, t, m, p), 2 * 9 * 1e-9);
}

// A pipeline inside one NVLink node with one group per stage, under each schedule (1F1B, GPipe, interleaved
// 1F1B): the schedule recurrence runs the simulator's own programs with the same pass and transfer times (each transfer alone on its links, as here), so the pipeline
// end agrees within the nanosecond roundings of its tasks and transfers; the gradient reduction is per stage
// over one group (nothing to reduce) except the tied embedding's all-reduce, timed at its bottleneck link.
TEST(Estimator, PipelineInOneNodeFollowsTheSimulatorsSchedule) {
  const Cluster c = cluster_of("A100-80:1x8");
  const Topology t(c);
  const ModelConfig m = test::small_gpt_model(32);
  struct Case {
    int pp;
    Schedule schedule;
    int interleave;
  };
  for (const Case& k : {Case{2, Schedule::OneFOneB, 1}, Case{4, Schedule::OneFOneB, 1}, Case{8, Schedule::OneFOneB, 1},
                        Case{4, Schedule::GPipe, 1}, Case{2, Schedule::Interleaved, 2}, Case{4, Schedule::Interleaved, 2}}) {
    const int pp = k.pp;
    Shorthand s;
    s.pp = pp;
    s.schedule = k.schedule;
    s.interleave = k.interleave;
    s.micro_batch = 1;
    s.global_batch = 32;
    const Plan p = plan_from_shorthand(s, c, m);
    const Estimator est(c, t, m, EstimatorCoefficients{});
    const Estimate e = est.estimate(p);
    ASSERT_TRUE(e.fits);
    // Relative 1e-3: the roundings (~1 ns per duration, a few hundred durations) and the embedding
    // all-reduce's ring, whose flows the simulator shares max-min fairly and the estimator at its bottleneck.
    // Interleaved: one batched exchange sends activations and gradients from the same GPU at once, sharing its
    // link in the simulator and timed alone here; the transfers (2 MB at NVLink speed, ~15 us each, about
    // 2(m v + p) of them on the critical path) are < 1 % of this iteration, which bounds the difference.
    const double tolerance = k.schedule == Schedule::Interleaved ? 1e-2 : 1e-3;
    EXPECT_NEAR(e.iteration_s, simulated(c, t, m, p), tolerance * e.iteration_s)
        << "pp " << pp << " " << to_string(k.schedule) << " interleave " << k.interleave;
  }
}

// The plan fits, and its estimate is within `tolerance` (relative) of its simulated iteration time.
void expect_estimate_near_simulation(const Cluster& c, const Topology& t, const ModelConfig& m, const Plan& p, double tolerance) {
  const Estimate e = Estimator(c, t, m).estimate(p);
  ASSERT_TRUE(e.fits);
  const double sim = simulated(c, t, m, p);
  EXPECT_NEAR(e.iteration_s / sim, 1.0, tolerance) << "estimated " << e.iteration_s << " s, simulated " << sim << " s";
}

// A cluster of one node group (`node_group`: its YAML mapping) on a leaf-spine network.
Cluster leaf_spine_cluster(int nodes_per_leaf, int oversubscription, const std::string& node_group) {
  return parse_cluster_yaml_text("version: 1\nname: test\nnetwork: {topology: leaf-spine, nodes_per_leaf: " +
                                     std::to_string(nodes_per_leaf) + ", oversubscription: " +
                                     std::to_string(oversubscription) + ", latency: 5 us}\nnode_groups:\n  - " +
                                     node_group + "\n",
                                 "test", GpuCatalog::load_default());
}

// Gradient reduction through NICs that serve several communicators at once: sailor-example-a100-v100 (4-GPU
// nodes, one 6 GB/s NIC each) with 32 three-stage pipelines of gpt3-1.3b under ZeRO-1 - stage 0 on the A100
// nodes (four pipelines per node), stages 1 and 2 (two groups) on the V100 nodes. Each node's NIC carries the
// tied-embedding all-reduces of four pipelines at once, and the stage-0 reduce-scatter that precedes them.
// The simulator shares the NIC max-min fairly among all of them; the estimator must not time each alone:
// timed alone it was 14.6 % short here (the validation plans of ~1 % mean error rarely share a NIC). The
// tolerance, 6 %, is the part the estimator leaves out by design: the pipeline transfers' contention with
// the overlapped reduction, and the rings' edges sharing a link at unequal rates.
TEST(Estimator, GradientReductionSharesItsNicsWithOtherCommunicators) {
  const Cluster c = load_cluster("sailor-example-a100-v100", GpuCatalog::load_default());
  const Topology t(c);
  const ModelConfig m = load_model("gpt3-1.3b");
  auto a100 = [](int i) { return "n" + std::to_string(i / 4) + ":" + std::to_string(i % 4); };
  auto v100 = [](int i) { return "n" + std::to_string(8 + i / 4) + ":" + std::to_string(i % 4); };
  std::string yaml = "version: 1\nschedule: 1f1b\nrecompute: none\nzero1: true\noverlap_grad_reduce: true\npipelines:\n";
  for (int p = 0; p < 32; ++p)
    yaml += "  - micro_batch: 2\n    micro_batches: 8\n    stages:\n"
            "      - {layers: [0, 11], groups: [{gpus: \"" + a100(p) + "\", tp: 1, share: 1}]}\n"
            "      - {layers: [11, 16], groups: [{gpus: \"" + v100(3 * p) + "\", tp: 1, share: 1}]}\n"
            "      - {layers: [16, 24], groups: [{gpus: \"" + v100(3 * p + 1) + "\", tp: 1, share: 0.5}, {gpus: \"" +
            v100(3 * p + 2) + "\", tp: 1, share: 0.5}]}\n";
  expect_estimate_near_simulation(c, t, m, parse_plan_yaml_text(yaml, "shared-nic plan", c), 0.06);
}

// Collectives of different families on one NIC: gpt3-1.3b on five GPUs (fresh seed 37 config 1): a
// two-GPU L4 node, a one-GPU L4 node and a two-GPU V100-32 node, each behind one 3.125 GB/s NIC. Three stages
// under ZeRO-1: the embedding on n0:0, the second stage split over n0:1 and n1 (its reduce-scatter and
// all-gather cross n0's NIC), the head on n2. The tied-embedding all-reduce between n0:0 and n2 starts while
// the second stage's reduce-scatter still runs and meets its all-gather after the optimizer step, on the same
// NIC; the simulator shares the NIC among them. Timed family by family (the reductions, then the tied
// all-reduces, then the all-gathers, each alone), the time after the pipeline was 45 % short (0.186 s against
// 0.341 s) and the planner ranked this plan above a five-stage one that simulates 0.8 % faster. Tolerance:
// 20 % of the time after the pipeline (the estimate is 15 % short: a family's load still to carry is taken as
// spread evenly over its span, where the other families have slowed it unevenly).
TEST(Estimator, CollectiveFamiliesShareTheirNics) {
  const Cluster c = parse_cluster_yaml_text(
      "version: 1\nname: test\nnetwork: {topology: leaf-spine, nodes_per_leaf: 32, oversubscription: 2, latency: 5 us}\n"
      "node_groups:\n"
      "  - {gpu: L4, nodes: 1, gpus_per_node: 2, intra_node: {kind: pcie, bandwidth: 32 GB/s}, nic: {count: 1, bandwidth: 3.125 GB/s}}\n"
      "  - {gpu: L4, nodes: 1, gpus_per_node: 1, intra_node: {kind: pcie, bandwidth: 32 GB/s}, nic: {count: 1, bandwidth: 3.125 GB/s}}\n"
      "  - {gpu: V100-32, nodes: 1, gpus_per_node: 2, intra_node: {kind: nvlink, bandwidth: 150 GB/s}, nic: {count: 4, bandwidth: 3.125 GB/s}}\n",
      "test", GpuCatalog::load_default());
  const Topology t(c);
  const ModelConfig m = load_model("gpt3-1.3b");
  const Plan p = parse_plan_yaml_text(
      "version: 1\nschedule: 1f1b\nrecompute: none\nzero1: true\noverlap_grad_reduce: true\npipelines:\n"
      "  - micro_batch: 2\n    micro_batches: 32\n    stages:\n"
      "      - {layers: [0, 4], groups: [{gpus: \"n0:0\", tp: 1, share: 1}]}\n"
      "      - {layers: [4, 11], groups: [{gpus: \"n0:1\", tp: 1, share: 0.5}, {gpus: \"n1\", tp: 1, share: 0.5}]}\n"
      "      - {layers: [11, 24], groups: [{gpus: \"n2:0\", tp: 1, share: 0.5}, {gpus: \"n2:1\", tp: 1, share: 0.5}]}\n",
      "families plan", c);
  const Estimate e = Estimator(c, t, m).estimate(p);
  ASSERT_TRUE(e.fits);
  const SimResult sim = simulate_iteration(c, t, m, p, SimOptions{});
  const double after = sim.breakdown.dp_comm + sim.breakdown.optimizer;  // the critical path's after the pipeline
  EXPECT_NEAR(e.after_pipeline_s / after, 1.0, 0.2) << "estimated " << e.after_pipeline_s << " s, simulated " << after << " s";
  EXPECT_NEAR(e.iteration_s / sim.iteration_time_s, 1.0, 0.02);
}

// Gradient reduction across an oversubscribed spine: Mixtral on 24 8-GPU H100 nodes, eight per leaf, each leaf's
// uplink a third of its NICs (oversubscription 3), as in the evaluation's configurations. Twelve eight-stage
// pipelines of TP-2 stages, EP 4 across pipelines: stage s of pipelines 4b..4b+3 shares node 8b + s, so
// every node holds four EP ranks and reduces their routed experts' gradients over three nodes on three leaves
// at once, eight rings per node through the spine. One ring (two TP slices) loads its NIC 11x more than its
// spine links, so no spine link is among a single collective's busiest links; the estimator must still count
// the spine on the links several communicators share. Without it the estimate was 34 % short here (the
// spine's share of the all-reduces missing). With all-reduce, and under ZeRO-1, where the all-gathers also
// meet reduce-scatters of other stages still on the spine: timed family by family (each family's collectives
// alone), the ZeRO-1 plan was 9.4 % short; with the families sharing their links, 4.9 %. Tolerance: the 6 %
// of the shared-NIC test above (the same reduction model).
TEST(Estimator, GradientReductionSharesAnOversubscribedSpine) {
  const Cluster c = leaf_spine_cluster(8, 3, "{gpu: H100, nodes: 24, gpus_per_node: 8, intra_node: {kind: nvlink, "
                                            "bandwidth: 450 GB/s}, nic: {count: 8, bandwidth: 12.5 GB/s}}");
  const Topology t(c);
  const ModelConfig m = load_model("mixtral-8x7b");
  for (const std::string zero1 : {"false", "true"}) {
    std::string yaml = "version: 1\nschedule: 1f1b\nrecompute: none\nzero1: " + zero1 + "\noverlap_grad_reduce: true\npipelines:\n";
    for (int p = 0; p < 12; ++p) {
      yaml += "  - micro_batch: 1\n    micro_batches: 8\n    stages:\n";
      for (int s = 0; s < 8; ++s)
        yaml += "      - {layers: [" + std::to_string(4 * s) + ", " + std::to_string(4 * s + 4) +
                "], ep: 4, ep_scope: pipelines, groups: [{gpus: \"n" + std::to_string(8 * (p / 4) + s) + ":" +
                std::to_string(2 * (p % 4)) + "-" + std::to_string(2 * (p % 4) + 1) + "\", tp: 2, share: 1}]}\n";
    }
    SCOPED_TRACE("zero1 " + zero1);
    expect_estimate_near_simulation(c, t, m, parse_plan_yaml_text(yaml, "spine plan", c), 0.06);
  }
}

// Pipeline transfers of replicas placed stage by stage: four four-stage pipelines of gpt3-1.3b on four A10
// nodes of four GPUs behind one 1.56 GB/s NIC each, stage s of every pipeline on node s (the data-parallel
// peers of a stage on one node, placement.h replicas_by_stage), two of them with 32 micro-batches and two
// with 31, as a batch split leaves them. The pipelines run the same schedule, so each boundary's four
// transfers cross the same two NICs at once. Timing each pipeline's transfers alone put the estimate 10.5 %
// below the simulator here (49.5 % below on the A10 nodes of fresh seed 35 config 7, where eight pipelines
// share each NIC), and timing them only with the pipelines of the same micro-batch count 6.3 % below.
// Tolerance: 5 %, room for the contention-free p2p coefficient (1.139, estimator_coefficients.h) on
// transfers that now carry their contention (+4.4 % here).
TEST(Estimator, PipelineTransfersOfReplicasPlacedByStageShareTheirNics) {
  const Cluster c = leaf_spine_cluster(8, 1, "{gpu: A10, nodes: 4, gpus_per_node: 4, intra_node: {kind: pcie, "
                                            "bandwidth: 32 GB/s}, nic: {count: 1, bandwidth: 1.5625 GB/s}}");
  const Topology t(c);
  const ModelConfig m = load_model("gpt3-1.3b");
  std::string yaml = "version: 1\nschedule: 1f1b\nrecompute: none\nzero1: false\noverlap_grad_reduce: true\npipelines:\n";
  for (int p = 0; p < 4; ++p) {
    yaml += "  - micro_batch: 1\n    micro_batches: " + std::to_string(p % 2 == 0 ? 32 : 31) + "\n    stages:\n";
    for (int s = 0; s < 4; ++s)
      yaml += "      - {layers: [" + std::to_string(6 * s) + ", " + std::to_string(6 * s + 6) + "], groups: [{gpus: \"n" +
              std::to_string(s) + ":" + std::to_string(p) + "\", tp: 1, share: 1}]}\n";
  }
  expect_estimate_near_simulation(c, t, m, parse_plan_yaml_text(yaml, "stage-by-stage plan", c), 0.05);
}

// Expert parallelism across pipelines with two TP groups per stage: each group's EP peers are the same
// group in four pipelines on four nodes, so both groups' all-to-alls cross the same one NIC per node at
// once (the pipelines run the same schedule). Timing each group's all-to-all alone halves the EP
// communication and put the estimate 13 % below the simulator. Tolerance: the 5 % that
// EstimatorValidation asks of the mean error on random Mixtral plans.
TEST(Estimator, ConcurrentAllToAllsOfOneStageShareTheirNics) {
  const Cluster c = load_cluster("sailor-example-a100-v100", GpuCatalog::load_default());
  const Topology t(c);
  const ModelConfig m = load_model("gpt-moe-1.3b-64e");
  std::string yaml = "version: 1\nschedule: 1f1b\nrecompute: full\nzero1: true\noverlap_grad_reduce: true\npipelines:\n";
  for (int p = 0; p < 4; ++p) {
    yaml += "  - micro_batch: 4\n    micro_batches: 8\n    stages:\n";
    for (int k = 0; k < 4; ++k) {
      const std::string node = "n" + std::to_string(k == 0 ? 2 * p : 8 + 3 * p + k - 1);  // A100-40, then V100-16
      yaml += "      - {layers: [" + std::to_string(6 * k) + ", " + std::to_string(6 * k + 6) +
              "], ep: 4, ep_scope: pipelines, groups: [{gpus: \"" + node + ":0-1\", tp: 2, share: 0.5}, {gpus: \"" +
              node + ":2-3\", tp: 2, share: 0.5}]}\n";
    }
  }
  expect_estimate_near_simulation(c, t, m, parse_plan_yaml_text(yaml, "shared-nic MoE plan", c), 0.05);
}

// Expert parallelism and data parallelism through one NIC: Mixtral on 32 one-GPU H100 nodes, 32 one-stage
// pipelines of one micro-batch, EP 8 over the pipelines, ZeRO-1. Each GPU's NIC carries the backward's
// all-to-alls and, overlapping them, the reduce-scatters of its expert gradients (over 4 pipelines) and of
// its dense gradients (over all 32); the NIC is the bottleneck. Giving the reduction the NIC alone put the
// estimate 6.6 % below the simulator here (a plan a planner then preferred to a faster one). Tolerance: the
// 2 % that the estimator's mean error on random Mixtral plans reaches (EstimatorValidation), room for the
// all-to-alls taken as spread evenly over the backward pass.
TEST(Estimator, GradientReductionSharesItsNicsWithTheBackwardAllToAlls) {
  const Cluster c = cluster_of("H100:32x1");
  const Topology t(c);
  const ModelConfig m = load_model("mixtral-8x7b");
  std::string yaml = "version: 1\nschedule: 1f1b\nrecompute: none\nzero1: true\noverlap_grad_reduce: true\npipelines:\n";
  for (int p = 0; p < 32; ++p)
    yaml += "  - micro_batch: 1\n    micro_batches: 1\n    stages:\n      - {layers: [0, 32], ep: 8, ep_scope: pipelines, "
            "groups: [{gpus: \"n" + std::to_string(p) + "\", tp: 1, share: 1}]}\n";
  expect_estimate_near_simulation(c, t, m, parse_plan_yaml_text(yaml, "EP and DP on one NIC", c), 0.02);
}

// Pipeline transfers of different boundaries through one NIC: llama2-13b on one pipeline of 14 one-layer
// TP-4 stages over 7 eight-GPU A10 nodes (two stages per node, one 25 Gbit/s NIC each), then 7 TP-4 stages
// of 3-4 layers on A100-40 nodes. The A10 stages wait for the slower A100 ones, so both stages of a node
// send through its NIC at the same moments (one its activations onward, the other its gradients back);
// timing each transfer alone put the estimate 16 % below the simulator. Tolerance: 5 %, the transfers
// overlaps being taken from the schedule run with every transfer alone rather than solved for.
TEST(Estimator, PipelineTransfersThatShareANicTakeLonger) {
  const Cluster c = cluster_of("A10:7x8,A100-40:7x4");
  const Topology t(c);
  const ModelConfig m = load_model("llama2-13b");
  std::string yaml = "version: 1\nschedule: 1f1b\nrecompute: none\nzero1: false\noverlap_grad_reduce: true\npipelines:\n"
                     "  - micro_batch: 1\n    micro_batches: 128\n    stages:\n";
  auto stage = [&](int begin, int end, const std::string& gpus) {
    yaml += "      - {layers: [" + std::to_string(begin) + ", " + std::to_string(end) + "], groups: [{gpus: \"" + gpus +
            "\", tp: 4, share: 1}]}\n";
  };
  for (int k = 0; k < 14; ++k) stage(k, k + 1, "n" + std::to_string(k / 2) + (k % 2 ? ":4-7" : ":0-3"));
  for (int k = 0; k < 7; ++k) stage(k == 0 ? 14 : 17 + 4 * (k - 1), k == 6 ? 40 : 17 + 4 * k, "n" + std::to_string(7 + k));
  expect_estimate_near_simulation(c, t, m, parse_plan_yaml_text(yaml, "shared-NIC transfers", c), 0.05);
}

// Memory: the estimator calls stage_memory with build_stage_work's inputs, so its verdict and peak fraction
// must be the simulator's on every plan, fitting or not (random plans, not filtered by memory).
TEST(Estimator, MemoryVerdictIsTheSimulators) {
  // Clusters on which both verdicts occur for the model (the 64-expert model fits only on larger clusters).
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"A100-80:2x4,V100-32:4x2,T4:2x4", "gpt3-1.3b"},
      {"H100:1x8,A100-40:2x4,L4:4x2", "gpt3-1.3b"},
      {"A100-80:4x8,V100-32:8x4", "gpt-moe-1.3b-64e"}};
  for (const auto& [spec, model] : cases) {
    const Cluster c = cluster_of(spec);
    const Topology t(c);
    ModelConfig m = load_model(model);
    m.global_batch = 32;
    const Estimator est(c, t, m);
    std::mt19937_64 rng(7);
    test::RandomPlanSpace space;
    space.uneven_experts = true;
    int fitting = 0, refused = 0;
    for (int i = 0; i < 100; ++i) {
      const Plan p = test::draw_random_plan(c, m, 32, rng, space);
      const StageWork sw = build_stage_work(c, t, m, p);
      double worst = 0;
      for (const arachne::Worker& w : sw.workers)
        for (GpuId g : w.gpus) worst = std::max(worst, w.memory.total() / c.gpu_spec(g).memory_bytes);
      const Estimate e = est.estimate(p);
      EXPECT_EQ(e.fits, worst <= 1.0) << plan_to_yaml(p, c);
      EXPECT_NEAR(e.peak_memory_fraction, worst, 1e-9 * worst);
      (worst <= 1.0 ? fitting : refused) += 1;
    }
    // Both verdicts occur, or the check proves little.
    EXPECT_GT(fitting, 0) << spec << " " << model;
    EXPECT_GT(refused, 0) << spec << " " << model;
  }
}

void print(const char* what, const test::EstimatorFigures& f) {
  std::printf("%s: %d plans in %d cells; Spearman per cell mean %.3f (min %.3f), pooled %.3f; "
              "mean |relative error| %.4f; %.1f us per estimate cold, %.1f warm\n",
              what, f.plans, f.cells, f.mean_cell_spearman, f.min_cell_spearman, f.pooled_spearman,
              f.mean_abs_rel_error, f.estimate_us, f.warm_estimate_us);
}

// The lower bound holds for random valid plans that fit (their GPUs, the simulator's time), over
// homogeneous and mixed clusters whose GPUs differ in peak and GEMM efficiency, every recompute policy and
// idle GPUs; and it is not vacuous: on the larger model the GEMMs run near their best efficiency, so the
// bound is a fair share of the time of the tightest plan (>= 20 %).
TEST(EstimatorLowerBound, NeverExceedsTheSimulatedTimeOfRandomPlans) {
  for (const char* spec : {"A100-80:2x4", "H100:1x8,V100-32:2x4", "A100-40:1x4,T4:2x2,L4:1x2"}) {
    const Cluster cluster = parse_cluster_spec(spec, GpuCatalog::load_default());
    const Topology topo(cluster);
    for (const char* name : {"gpt3-1.3b", "gpt3-2.7b"}) {
      const ModelConfig model = load_model(name);
      const test::FittingDraws d = test::draw_fitting_plans(cluster, topo, model, 32, 12, 7, 200);
      ASSERT_GE(d.plans.size(), 4u) << spec << " " << name;
      const IterationLowerBound lower_bound(cluster, model, 32);
      double best_ratio = 0;
      for (const test::SimulatedPlan& p : d.plans) {
        std::map<std::string, int> gpus;
        for (const Pipeline& pl : p.plan.pipelines)
          for (const Stage& st : pl.stages)
            for (const TpGroup& g : st.groups)
              for (const GpuId id : g.gpus) ++gpus[cluster.group_of_node(cluster.node_of(id)).gpu];
        const double bound = lower_bound(gpus);
        EXPECT_LE(bound, p.result.iteration_time_s) << spec << " " << name << "\n" << plan_to_yaml(p.plan, cluster);
        best_ratio = std::max(best_ratio, bound / p.result.iteration_time_s);
      }
      std::printf("%s %s: %zu plans, best bound / simulated %.3f\n", spec, name, d.plans.size(), best_ratio);
      if (std::string(name) == "gpt3-2.7b") {
        EXPECT_GE(best_ratio, 0.2) << spec;
      }
    }
  }
  const Cluster a100 = parse_cluster_spec("A100-80:1x8", GpuCatalog::load_default());
  EXPECT_EQ(IterationLowerBound(a100, load_model("mixtral-8x7b"), 32)({{"A100-80", 8}}), 0.0);
}

// The estimator's caches and scratch buffers (pass tables, collective shapes, rank programs kept or made
// again, schedules, the last layout's gradient buckets and their links) must not change an estimate: each
// random plan, estimated by one estimator after all the plans before it, forwards and backwards (the last
// one twice in a row), gives exactly what a fresh estimator gives. Each plan is followed by itself with
// other micro-batch counts (the same buckets on the same GPUs, their reductions ready at other times). The
// batches reach hundreds of micro-batches per pipeline, so long rank programs (made again per use) are among them.
TEST(Estimator, CachesGiveTheSameEstimatesAsAFreshEstimator) {
  for (const char* spec : {"A100-80:2x4,V100-32:2x4", "H100:1x8,T4:3x2"}) {
    const Cluster cluster = parse_cluster_spec(spec, GpuCatalog::load_default());
    const Topology topo(cluster);
    for (const char* name : {"gpt3-1.3b", "gpt-moe-1.3b-64e"}) {
      const ModelConfig model = load_model(name);
      std::mt19937_64 rng(11);
      test::RandomPlanSpace space;
      space.uneven_experts = true;
      std::vector<Plan> plans;
      for (int i = 0; i < 24; ++i) {
        plans.push_back(test::draw_random_plan(cluster, model, i % 2 ? 512 : 48, rng, space));
        // On the A100-80 and V100-32 cluster, the same plan right after with the two types' GPUs swapped (the
        // same layout of gradient buckets on other GPUs).
        if (cluster.total_gpus() == 16) {
          Plan swapped = plans.back();
          for (Pipeline& pl : swapped.pipelines)
            for (Stage& st : pl.stages)
              for (TpGroup& g : st.groups)
                for (GpuId& gpu : g.gpus) gpu = (gpu + 8) % 16;
          plans.push_back(std::move(swapped));
        }
        Plan longer = plans.back();
        for (size_t p = 0; p < longer.pipelines.size(); ++p) longer.pipelines[p].micro_batches += static_cast<int>(1 + p % 3);
        plans.push_back(std::move(longer));
      }
      std::vector<Estimate> fresh;
      for (const Plan& p : plans) fresh.push_back(Estimator(cluster, topo, model).estimate(p));
      const Estimator shared(cluster, topo, model);
      auto check = [&](size_t i) {
        const Estimate e = shared.estimate(plans[i]);
        ASSERT_EQ(e.fits, fresh[i].fits) << spec << " " << name << " plan " << i;
        EXPECT_EQ(e.peak_memory_fraction, fresh[i].peak_memory_fraction) << spec << " " << name << " plan " << i;
        if (e.fits) {
          EXPECT_EQ(e.iteration_s, fresh[i].iteration_s) << spec << " " << name << " plan " << i;
        }
      };
      for (size_t i = 0; i < plans.size(); ++i) check(i);
      for (size_t i = plans.size(); i-- > 0;) check(i);
    }
  }
}

// estimate(plan, stop_at_s) stops only where the finished estimate is at least stop_at_s, and then says a
// time from stop_at_s up to the finished estimate; where it does not stop it is the finished estimate, bit
// for bit, as it is a fresh estimator's after estimates that stopped. Random plans that fit (by the
// simulator's check), of a dense and an MoE model, asked to stop at fractions of their own estimate around 1;
// at half of it some of each model's stop (the test is not of an estimator that never stops).
TEST(Estimator, StopsEarlyOnlyAtOrAboveTheAskedTime) {
  for (const char* name : {"gpt3-1.3b", "gpt-moe-1.3b-64e"}) {
    const ModelConfig model = load_model(name);
    int fitting = 0, stopped_at_half = 0;
    for (const char* spec : {"A100-80:2x4,V100-32:2x4", "H100:1x8,T4:3x2", "A100-80:2x8"}) {
      const Cluster cluster = parse_cluster_spec(spec, GpuCatalog::load_default());
      const Topology topo(cluster);
      test::RandomPlanSpace space;
      space.uneven_experts = true;
      const Estimator est(cluster, topo, model);
      for (const test::SimulatedPlan& drawn : test::draw_fitting_plans(cluster, topo, model, 32, 12, 5, 1000, space).plans) {
        const Estimate full = est.estimate(drawn.plan);  // after the stopped estimates of the plans before
        EXPECT_FALSE(full.stopped);
        EXPECT_EQ(full.iteration_s, Estimator(cluster, topo, model).estimate(drawn.plan).iteration_s) << spec << " " << name;
        if (!full.fits) continue;
        ++fitting;
        for (const double f : {0.5, 0.9, 0.999, 1.0, 1.001, 2.0}) {
          const double stop_at = f * full.iteration_s;
          const Estimate e = est.estimate(drawn.plan, stop_at);
          ASSERT_TRUE(e.fits) << spec << " " << name;
          if (e.stopped) {
            EXPECT_GE(e.iteration_s, stop_at) << spec << " " << name << " at " << f;
            EXPECT_LE(e.iteration_s, full.iteration_s) << spec << " " << name << " at " << f;
          } else {
            EXPECT_EQ(e.iteration_s, full.iteration_s) << spec << " " << name << " at " << f;
          }
          if (f == 0.5 && e.stopped) ++stopped_at_half;
        }
      }
    }
    EXPECT_GE(fitting, 8) << name;
    EXPECT_GT(stopped_at_half, 0) << name;
  }
}

// Mixtral (8 experts of 14 B-parameter FFNs, top-2) is outside the validation set's models, and the cells
// where arachne lost to Sailor were Mixtral on H200. On random plans that fit on the H200 of those clusters
// (EP peers of different TP widths, uneven experts) the estimator must meet the bar for a planner's
// ranking (Spearman >= 0.9 between estimated and simulated times) within each cluster, and its mean
// relative error must stay within 5 % - five times the validation set's ~1 % (README), room for what it
// leaves out (routing draws around the expected load, all-to-alls timed alone), far below the 2x of a rank's
// experts priced on another rank's TP width.
TEST(EstimatorValidation, RanksRandomMixtralPlansLikeTheSimulator) {
  const ModelConfig model = load_model("mixtral-8x7b");
  for (const char* spec : {"H200:7x2", "H200:2x4,H200:1x2"}) {
    const Cluster cluster = parse_cluster_spec(spec, GpuCatalog::load_default());
    const Topology topo(cluster);
    test::RandomPlanSpace space;
    space.uneven_experts = true;
    const test::FittingDraws d = test::draw_fitting_plans(cluster, topo, model, 32, 16, 3, 400, space);
    const test::Agreement a = test::agreement(Estimator(cluster, topo, model), d.plans);
    std::printf("%s: %zu plans of %d drawn, Spearman %.3f, mean |error| %.3f\n", spec, d.plans.size(), d.attempts,
                a.spearman, a.mean_abs_rel_error);
    ASSERT_GE(d.plans.size(), 10u) << spec;
    EXPECT_GE(a.spearman, 0.9) << spec;
    EXPECT_LE(a.mean_abs_rel_error, 0.05) << spec;
  }
}

// Rank agreement with the simulator on the held-out half of the validation clusters (the coefficients were
// fitted on the other half, estimator_coefficients.h). The bar: a planner ranking the plans of one cluster by
// the estimate orders them as the simulator does, Spearman >= 0.9 per cell on average and over all plans.
TEST(EstimatorValidation, RanksPlansLikeTheSimulatorOutOfSample) {
  const test::EstimatorFigures in = test::estimator_figures(fitted_estimator_coefficients(), false);
  const test::EstimatorFigures out = test::estimator_figures(fitted_estimator_coefficients(), true);
  print("fitting half", in);
  print("held-out half", out);
  EXPECT_GE(in.plans + out.plans, 1000);
  EXPECT_GE(out.mean_cell_spearman, 0.9);
  EXPECT_GE(out.pooled_spearman, 0.9);
}

// The fit (scripts/fit_estimator.sh runs it): coefficients on the fitting half, printed as the initializer of
// estimator_coefficients.h, with the figures in and out of sample.
TEST(EstimatorValidation, DISABLED_FitCoefficients) {
  print("unit coefficients, fitting half", test::estimator_figures(EstimatorCoefficients{}, false));
  print("unit coefficients, held-out half", test::estimator_figures(EstimatorCoefficients{}, true));
  const EstimatorCoefficients k = test::fit_estimator_coefficients();
  print("fitted, fitting half", test::estimator_figures(k, false));
  print("fitted, held-out half", test::estimator_figures(k, true));
  std::printf("inline constexpr EstimatorCoefficients kFittedEstimatorCoefficients{%.4g, %.4g, %.4g, %.4g};\n",
              k.compute, k.p2p, k.dp, k.ep);
}

}  // namespace
}  // namespace arachne::planner

namespace arachne::planner {
namespace {

// Per cell: plans, Spearman and mean relative error with the fitted coefficients (for the report).
TEST(EstimatorValidation, DISABLED_PerCell) {
  for (const test::ValidationCell& c : test::estimator_validation_cells()) {
    const test::Agreement a = test::agreement(Estimator(c.cluster, *c.topo, c.model), c.plans);
    std::printf("%-45s %-18s %s plans %2zu  Spearman %6.3f  mean |rel err| %.3f\n", c.cluster_spec.c_str(),
                c.model_name.c_str(), c.index % 2 ? "held-out" : "fitting ", c.plans.size(), a.spearman,
                a.mean_abs_rel_error);
  }
}

}  // namespace
}  // namespace arachne::planner

namespace arachne::planner {
namespace {

// The plans of the cells whose spec contains $ESTIMATOR_CELL, estimated beside the simulator's breakdown.
TEST(EstimatorValidation, DISABLED_Plans) {
  const char* want = std::getenv("ESTIMATOR_CELL");
  for (const test::ValidationCell& c : test::estimator_validation_cells()) {
    if (want && c.cluster_spec + " " + c.model_name != want) continue;
    const Estimator est(c.cluster, *c.topo, c.model);
    for (const test::SimulatedPlan& sp : c.plans) {
      const Estimate e = est.estimate(sp.plan);
      const Breakdown& b = sp.result.breakdown;
      std::printf("%s | est %.4f (pipe %.4f after %.4f) sim %.4f [compute %.4f tp %.4f pp %.4f bubble %.4f dp %.4f ep %.4f wait %.4f opt %.4f] %s\n",
                  c.model_name.c_str(), e.iteration_s, e.pipeline_s, e.after_pipeline_s, sp.result.iteration_time_s,
                  b.compute, b.tp_comm, b.pp_comm, b.bubble, b.dp_comm, b.ep_comm, b.wait, b.optimizer,
                  sp.plan.zero1 ? "zero1" : "");
    }
  }
}

}  // namespace
}  // namespace arachne::planner
