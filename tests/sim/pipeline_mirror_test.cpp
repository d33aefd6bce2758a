// The exact shortcut of sim/exec/pipeline_mirror.h: identical pipelines simulated once must give the full
// simulation's result bit for bit - when they are isolated, and when their sends share NICs with the
// gradient rings symmetrically, tied-embedding all-reduces included - and must not apply when a slower node
// breaks the symmetry.
#include <gtest/gtest.h>

#include <algorithm>
#include <tuple>
#include <vector>

#include "sim/exec/simulate.h"
#include "sim/hw/cluster.h"
#include "sim/net/flow_network.h"
#include "sim/plan/plan_yaml.h"
#include "tests/sim/test_support.h"

namespace arachne {
namespace {

// Wide layers so that the gradient buckets are large and the rings run while the last backward sends do.
ModelConfig wide_model() {
  ModelConfig m = test::small_gpt_model(64);
  m.hidden = 4096;
  m.heads = 32;
  m.kv_heads = 32;
  m.ffn_hidden = 16384;
  m.seq_len = 2048;
  return m;
}

Plan megatron_plan(const Cluster& c, const ModelConfig& m, int tp, int pp, int dp, Schedule s, bool zero1) {
  Shorthand sh;
  sh.tp = tp;
  sh.pp = pp;
  sh.dp = dp;
  sh.micro_batch = 1;
  sh.global_batch = 64;
  sh.schedule = s;
  sh.interleave = s == Schedule::Interleaved ? 2 : 1;
  Plan p = plan_from_shorthand(sh, c, m);
  p.zero1 = zero1;
  return p;
}

// Some gradient reduction runs while a backward pipeline send is in flight: with every GPU's traffic on its
// own NIC, they share it.
bool rings_overlap_sends(const SimResult& r) {
  for (const auto& a : r.timeline)
    if (a.cat == "dp_comm")
      for (const auto& b : r.timeline)
        if (b.name == "grad" && b.start_s < a.start_s + a.dur_s && a.start_s < b.start_s + b.dur_s) return true;
  return false;
}

// TP8 PP2 DP4 on the cluster under every schedule, with and without ZeRO-1: the shortcut applies (fewer
// events) and gives the full simulation's result, while rings and sends really share the NICs.
void expect_mirrored_like_full_simulation(const Cluster& c, const ModelConfig& m) {
  for (Schedule s : {Schedule::OneFOneB, Schedule::GPipe, Schedule::Interleaved})
    for (bool zero1 : {false, true}) {
      const Plan p = megatron_plan(c, m, 8, 2, 4, s, zero1);
      const SimResult fast = test::simulate_with_shortcuts(c, m, p, true);
      const SimResult full = test::simulate_with_shortcuts(c, m, p, false);
      SCOPED_TRACE(::testing::Message() << "schedule " << static_cast<int>(s) << " zero1 " << zero1);
      test::expect_same_result(fast, full);
      EXPECT_LT(fast.events, full.events);  // the shortcut did apply
      EXPECT_TRUE(rings_overlap_sends(full));
    }
}

// Megatron's layout with TP8 on 8-GPU nodes: each stage of each pipeline is one node, and the stage's
// gradient rings run between the same NICs that carry the pipeline sends. Four leaves' worth of nodes per
// leaf keeps every ring inside a leaf, and every pipeline send crosses the spine, so the sends of all four
// pipelines also share the leaf uplinks. Rotating the pipelines maps the whole iteration onto itself: three
// of the four need not be simulated, and the result must be the full simulation's.
TEST(PipelineMirror, SymmetricPipelinesSharingNicsWithGradientRingsMatchFullSimulation) {
  Cluster c = parse_cluster_spec("A100-80:8x8", GpuCatalog::load_default());
  c.network.nodes_per_leaf = 4;
  // Untied (Llama-style FFN): no tied-embedding all-reduce (the tied case is the next test).
  ModelConfig m = wide_model();
  m.ffn_kind = FfnKind::Swiglu;
  expect_mirrored_like_full_simulation(c, m);
}

// The same layout with a tied-embedding GPT: after its data-parallel buckets, each pipeline all-reduces the
// word-embedding gradient between its first- and last-stage nodes, over the NICs its sends and the gradient
// rings use. The rotation maps each pipeline's all-reduce onto the next one's; the mirrored simulation runs
// each orbit as one collective and must still give the full simulation's result bit for bit.
TEST(PipelineMirror, SymmetricTiedEmbeddingPipelinesMatchFullSimulation) {
  Cluster c = parse_cluster_spec("A100-80:8x8", GpuCatalog::load_default());
  c.network.nodes_per_leaf = 4;
  const ModelConfig m = wide_model();
  ASSERT_TRUE(m.tied_embeddings());
  expect_mirrored_like_full_simulation(c, m);
}

// Four pipelines of depth 4 on 16 nodes, two leaves: each pipeline's first and last stage sit in different
// leaves, so the tied-embedding all-reduces cross the spine while the rotation still maps every one onto the
// next pipeline's. Deeper pipelines put the all-reduce between nodes that carry no send of each other.
TEST(PipelineMirror, SymmetricTiedEmbeddingAcrossLeavesMatchesFullSimulation) {
  Cluster c = parse_cluster_spec("A100-80:16x8", GpuCatalog::load_default());
  c.network.nodes_per_leaf = 8;
  c.network.oversubscription = 2;
  const ModelConfig m = wide_model();
  const Plan p = megatron_plan(c, m, 8, 4, 4, Schedule::OneFOneB, false);
  const SimResult fast = test::simulate_with_shortcuts(c, m, p, true);
  const SimResult full = test::simulate_with_shortcuts(c, m, p, false);
  test::expect_same_result(fast, full);
  EXPECT_LT(fast.events, full.events);
}

// One node with half the NIC bandwidth: its pipeline is no longer a copy of the others, and rotating the
// three that still are would move a gradient ring edge onto a pair of nodes that has none. The shortcut must
// not apply (the same number of events as the full simulation), and the result is the full simulation's.
TEST(PipelineMirror, OneSlowerNodeBreaksTheSymmetry) {
  Cluster c = parse_cluster_spec("A100-80:7x8,A100-80:1x8", GpuCatalog::load_default());
  c.network.nodes_per_leaf = 4;
  c.groups[1].nic_bw /= 2;
  const ModelConfig m = wide_model();
  const Plan p = megatron_plan(c, m, 8, 2, 4, Schedule::OneFOneB, false);
  const SimResult fast = test::simulate_with_shortcuts(c, m, p, true);
  const SimResult full = test::simulate_with_shortcuts(c, m, p, false);
  test::expect_same_result(fast, full);
  EXPECT_EQ(fast.events, full.events);
}

// Rings that cross leaves unevenly (two nodes of a stage per leaf): rotating the pipelines would map an
// edge inside a leaf onto one across the spine, so the pipelines are not symmetric and are all simulated.
TEST(PipelineMirror, RingsCrossingLeavesUnevenlyAreNotMirrored) {
  Cluster c = parse_cluster_spec("A100-80:8x8", GpuCatalog::load_default());
  c.network.nodes_per_leaf = 2;
  c.network.oversubscription = 4;
  const ModelConfig m = wide_model();
  const Plan p = megatron_plan(c, m, 8, 2, 4, Schedule::OneFOneB, false);
  const SimResult fast = test::simulate_with_shortcuts(c, m, p, true);
  const SimResult full = test::simulate_with_shortcuts(c, m, p, false);
  test::expect_same_result(fast, full);
  EXPECT_EQ(fast.events, full.events);
}

TEST(PipelineMirror, MirroredSimulationIsDeterministic) {
  Cluster c = parse_cluster_spec("A100-80:8x8", GpuCatalog::load_default());
  c.network.nodes_per_leaf = 4;
  const ModelConfig m = wide_model();
  const Plan p = megatron_plan(c, m, 8, 2, 4, Schedule::OneFOneB, true);
  test::expect_same_result(test::simulate_with_shortcuts(c, m, p, true), test::simulate_with_shortcuts(c, m, p, true));
}

}  // namespace
}  // namespace arachne
