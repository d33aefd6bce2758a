// Expert-parallel MoE layers in the simulated iteration: all-to-alls on the real links, routing imbalance
// gating each layer, dropped tokens, and expert placement on mixed GPUs.
#include <gtest/gtest.h>

#include <map>

#include "sim/exec/simulate.h"
#include "sim/exec/stage_work.h"
#include "sim/plan/plan_yaml.h"
#include "tests/sim/test_support.h"

namespace arachne {
namespace {

ModelConfig mixtral(double skew = 0.0, double capacity = 1.0, int layers = 8) {
  ModelConfig m = load_model("mixtral-8x7b");
  m.layers = layers;  // fewer layers keep the test quick; every layer is still an MoE layer
  m.moe->routing_skew = skew;
  m.moe->capacity_factor = capacity;
  return m;
}

SimResult run_ep8(const Cluster& c, const ModelConfig& m, int micro_batches = 2) {
  Shorthand s;
  s.dp = 8;
  s.ep = 8;
  s.micro_batch = 1;
  s.global_batch = 8L * micro_batches;
  s.recompute = Recompute::Full;
  const Plan p = plan_from_shorthand(s, c, m);
  const Topology topo(c);
  SimOptions o;
  o.ignore_memory = true;
  return simulate_iteration(c, topo, m, p, o);
}

TEST(MoeIteration, EpGroupInsideOneNodeUsesNoNic) {
  const Cluster c = parse_cluster_spec("A100-80:1x8", GpuCatalog::load_default());
  const SimResult r = run_ep8(c, mixtral());
  EXPECT_GT(r.breakdown.ep_comm, 0);
  EXPECT_EQ(r.bytes[static_cast<int>(LinkClass::Nic)], 0);
  EXPECT_GT(r.bytes[static_cast<int>(LinkClass::NvLink)], 0);
  EXPECT_NEAR(r.breakdown.sum(), r.iteration_time_s, 1e-9 * r.iteration_time_s);
}

TEST(MoeIteration, DoublingNicBandwidthHalvesInterNodeAllToAll) {
  // Eight single-GPU nodes: every dispatch and combine crosses the NICs. The all-to-all time is bandwidth
  // bound (67 MB per GPU each way at 12.5 GB/s is ~5 ms, against 31 us of call overhead), so it halves;
  // 10 % covers the waits for the slowest peer's experts, which do not scale with bandwidth.
  Cluster slow = parse_cluster_spec("A100-80:8x1", GpuCatalog::load_default());
  for (auto& g : slow.groups) g.nic_count = 1, g.nic_bw = 12.5e9;
  Cluster fast = slow;
  for (auto& g : fast.groups) g.nic_bw = 25e9;
  const SimResult a = run_ep8(slow, mixtral()), b = run_ep8(fast, mixtral());
  EXPECT_GT(a.bytes[static_cast<int>(LinkClass::Nic)], 0);
  EXPECT_NEAR(b.breakdown.ep_comm / a.breakdown.ep_comm, 0.5, 0.05);
}

TEST(MoeIteration, RaisingRoutingSkewNeverMakesTheLayerFaster) {
  // The slowest expert rank gates each layer: a more skewed routing loads it more (capacity large enough
  // that nothing is dropped, which would otherwise cap the load).
  const Cluster c = parse_cluster_spec("A100-80:1x8", GpuCatalog::load_default());
  double previous = 0;
  for (double skew : {0.0, 0.5, 1.0, 1.5}) {
    const SimResult r = run_ep8(c, mixtral(skew, 8.0), 4);
    EXPECT_GE(r.iteration_time_s, previous) << "skew " << skew;
    EXPECT_EQ(r.dropped_tokens, 0);
    previous = r.iteration_time_s;
  }
}

TEST(MoeIteration, CapacityCutDropsTokensUnderSkew) {
  const Cluster c = parse_cluster_spec("A100-80:1x8", GpuCatalog::load_default());
  EXPECT_GT(run_ep8(c, mixtral(1.5, 1.0)).dropped_tokens, 0);
  EXPECT_EQ(run_ep8(c, mixtral(1.5, 8.0)).dropped_tokens, 0);
}

TEST(MoeIteration, ExpertsPlacedInProportionToSpeedBeatEvenPlacement) {
  // One A100 (312 TFLOP/s) and one V100 (125, fp16 rate) form an EP group of two pipelines; the routed
  // experts dominate the layer, so giving the A100 6 of 8 experts (~2.5x the V100's speed) shortens the
  // layer the slower rank gates.
  const Cluster c = parse_cluster_spec("A100-80:1x1,V100-32:1x1", GpuCatalog::load_default());
  const ModelConfig m = mixtral();
  auto plan = [&](const std::string& experts) {
    const std::string yaml =
        "pipelines:\n"
        "  - micro_batch: 1\n    micro_batches: 2\n    stages:\n"
        "      - {layers: [0, 8], groups: [{gpus: \"n0\", tp: 1}], ep: 2, ep_scope: pipelines, experts: " + experts + "}\n"
        "  - micro_batch: 1\n    micro_batches: 2\n    stages:\n"
        "      - {layers: [0, 8], groups: [{gpus: \"n1\", tp: 1}], ep: 2, ep_scope: pipelines, experts: " + experts + "}\n";
    return parse_plan_yaml_text(yaml, "placement.yaml", c);
  };
  const Topology topo(c);
  SimOptions o;
  o.ignore_memory = true;
  const Plan even = plan("[4, 4]"), proportional = plan("[6, 2]");
  validate_plan(even, c, m, std::nullopt, "even");
  validate_plan(proportional, c, m, std::nullopt, "proportional");
  EXPECT_LT(simulate_iteration(c, topo, m, proportional, o).iteration_time_s,
            simulate_iteration(c, topo, m, even, o).iteration_time_s);
}

// An A100 and a V100 as the two EP ranks of an expert-parallel group: the A100 reaches every all-to-all
// first and waits for the V100. That idle time is `wait`; `ep_comm` is the all-to-all itself, the same span
// for both peers. Each single-stage pipeline starts its first forward at t = 0, so the A100's first wait is
// the difference of the two GPUs' dense kernels before the first dispatch.
TEST(MoeIteration, WaitingForASlowerPeerAtTheAllToAllIsWait) {
  const Cluster c = parse_cluster_spec("A100-80:1x1,V100-32:1x1", GpuCatalog::load_default());
  const ModelConfig m = mixtral();
  const std::string yaml =
      "pipelines:\n"
      "  - micro_batch: 1\n    micro_batches: 2\n    stages:\n"
      "      - {layers: [0, 8], groups: [{gpus: \"n0\", tp: 1}], ep: 2, ep_scope: pipelines}\n"
      "  - micro_batch: 1\n    micro_batches: 2\n    stages:\n"
      "      - {layers: [0, 8], groups: [{gpus: \"n1\", tp: 1}], ep: 2, ep_scope: pipelines}\n";
  const Plan p = parse_plan_yaml_text(yaml, "ep-wait.yaml", c);
  const Topology topo(c);
  SimOptions o;
  o.ignore_memory = true;
  o.record_timeline = true;
  const SimResult r = simulate_iteration(c, topo, m, p, o);
  const StageWork sw = build_stage_work(c, topo, m, p);
  ASSERT_EQ(sw.workers[0].gpus.front(), 0);  // the A100
  std::map<int, std::vector<std::pair<double, double>>> a2a;  // per GPU: (start, duration) of its all-to-alls
  std::map<int, std::vector<double>> waits;
  for (const auto& s : r.timeline) {
    if (s.track > 1) continue;
    if (s.cat == "ep_comm") a2a[s.track].push_back({s.start_s, s.dur_s});
    if (s.cat == "wait") waits[s.track].push_back(s.dur_s);
  }
  ASSERT_FALSE(a2a[0].empty());
  ASSERT_EQ(a2a[0].size(), a2a[1].size());
  for (size_t i = 0; i < a2a[0].size(); ++i) {  // one collective, one span on both peers
    EXPECT_EQ(a2a[0][i].first, a2a[1][i].first) << i;
    EXPECT_EQ(a2a[0][i].second, a2a[1][i].second) << i;
  }
  const double first = sw.workers[1].chunks[0].forward_segments_s[0] - sw.workers[0].chunks[0].forward_segments_s[0];
  ASSERT_GT(first, 0);
  ASSERT_FALSE(waits[0].empty());
  EXPECT_NEAR(waits[0].front(), first, 1e-8);  // integer-nanosecond event times
  double a100_wait = 0;
  for (double w : waits[0]) a100_wait += w;
  for (double w : waits[1]) EXPECT_LT(w, 0.01 * a100_wait);  // the V100 is the slower at every step
  EXPECT_NEAR(r.breakdown.sum(), r.iteration_time_s, 1e-9 * r.iteration_time_s);
}

TEST(MoeIteration, SameSeedSameIterationOtherSeedOtherRouting) {
  // No capacity cut (factor 8): the most loaded rank, and so the layer time, depends on the drawn routing.
  const Cluster c = parse_cluster_spec("A100-80:1x8", GpuCatalog::load_default());
  const ModelConfig m = mixtral(1.0, 8.0);
  Shorthand s;
  s.dp = 8;
  s.ep = 8;
  s.micro_batch = 1;
  s.global_batch = 16;
  const Plan p = plan_from_shorthand(s, c, m);
  const Topology topo(c);
  SimOptions a;
  a.ignore_memory = true;
  SimOptions b = a;
  b.seed = 1;
  const SimResult x = simulate_iteration(c, topo, m, p, a), y = simulate_iteration(c, topo, m, p, a);
  EXPECT_EQ(x.iteration_time_s, y.iteration_time_s);
  EXPECT_EQ(x.dropped_tokens, y.dropped_tokens);
  EXPECT_NE(x.iteration_time_s, simulate_iteration(c, topo, m, p, b).iteration_time_s);
}

}  // namespace
}  // namespace arachne

namespace arachne {
namespace {

// Two 4-GPU nodes behind one NIC each: the hierarchical all-to-all moves the same bytes across the NICs as
// the flat one (each token crosses once), in one message per node pair instead of one per GPU pair.
TEST(MoeIteration, HierarchicalAllToAllMovesTheSameNicBytes) {
  Cluster c = parse_cluster_spec("A100-80:2x4", GpuCatalog::load_default());
  for (auto& g : c.groups) g.nic_count = 1;
  const ModelConfig m = mixtral();
  Shorthand s;
  s.dp = 8;
  s.ep = 8;
  s.micro_batch = 1;
  s.global_batch = 16;
  Plan p = plan_from_shorthand(s, c, m);
  p.overlap_grad_reduce = false;
  const Topology topo(c);
  SimOptions flat;
  flat.ignore_memory = true;
  SimOptions hier = flat;
  hier.hierarchical_alltoall = true;
  const SimResult a = simulate_iteration(c, topo, m, p, flat), b = simulate_iteration(c, topo, m, p, hier);
  const int nic = static_cast<int>(LinkClass::Nic);
  EXPECT_NEAR(a.bytes[nic], b.bytes[nic], 1e-9 * a.bytes[nic]);
  EXPECT_GT(b.breakdown.ep_comm, 0);
  EXPECT_LT(b.events, a.events);  // fewer messages
}

}  // namespace
}  // namespace arachne

namespace arachne {
namespace {

// EP inside one TP group (Megatron-Core TP8 with EP8 and expert-TP 1): each GPU keeps one whole expert,
// the group's GPUs exchange tokens by all-to-all over NVLink. Per-GPU expert memory equals TP-sharding all
// eight experts over the eight GPUs (an eighth of them either way); only the EP plan communicates.
TEST(MoeIteration, ExpertParallelismInsideOneTpGroup) {
  const Cluster c = parse_cluster_spec("A100-80:1x8", GpuCatalog::load_default());
  const ModelConfig m = mixtral();
  auto plan = [&](int ep) {
    const std::string yaml =
        "pipelines:\n  - micro_batch: 1\n    micro_batches: 2\n    stages:\n"
        "      - {layers: [0, 8], groups: [{gpus: \"n0\", tp: 8}], ep: " + std::to_string(ep) + ", ep_scope: stage}\n";
    return parse_plan_yaml_text(yaml, "ep-in-tp.yaml", c);
  };
  const Topology topo(c);
  SimOptions o;
  o.ignore_memory = true;
  const Plan ep8 = plan(8), ep1 = plan(1);
  validate_plan(ep8, c, m, std::nullopt, "ep8");
  const SimResult a = simulate_iteration(c, topo, m, ep8, o), b = simulate_iteration(c, topo, m, ep1, o);
  EXPECT_GT(a.breakdown.ep_comm, 0);
  EXPECT_EQ(b.breakdown.ep_comm, 0);
  EXPECT_EQ(a.bytes[static_cast<int>(LinkClass::Nic)], 0);
  EXPECT_NEAR(a.memory.weights, b.memory.weights, 0.01 * b.memory.weights);
  EXPECT_NEAR(a.breakdown.sum(), a.iteration_time_s, 1e-9 * a.iteration_time_s);
}

}  // namespace
}  // namespace arachne

namespace arachne {
namespace {

// PP 2 x DP gpus/2 with EP 8 over replica pipelines, micro-batch 1, four micro-batches each, full recompute.
Plan pp2_ep8_plan(const Cluster& c, int gpus, const ModelConfig& m) {
  Shorthand s;
  s.pp = 2;
  s.dp = gpus / 2;
  s.ep = 8;
  s.micro_batch = 1;
  s.global_batch = 4L * s.dp;
  s.recompute = Recompute::Full;
  return plan_from_shorthand(s, c, m);
}

// The exact shortcuts (component recompute, skipped refills after completions that change no rate) give the
// full simulation's output bit for bit: skewed routing so that every EP rank receives a different amount, EP
// groups inside one node (every all-to-all's refills skipped) and spanning two nodes over shared NICs (flows
// at different rates: refilled), flat and hierarchical.
TEST(MoeIteration, ExactShortcutsMatchFullSimulation) {
  const ModelConfig m = mixtral(1.0, 1.25, 4);
  for (const auto& [spec, gpus] : {std::pair{"H100:4x8", 32}, std::pair{"H100:4x4", 16}}) {
    for (const bool hierarchical : {false, true}) {
      const Cluster c = parse_cluster_spec(spec, GpuCatalog::load_default());
      const Plan p = pp2_ep8_plan(c, gpus, m);
      const Topology topo(c);
      SimOptions fast;
      fast.ignore_memory = true;
      fast.record_timeline = true;
      fast.hierarchical_alltoall = hierarchical;
      SimOptions full = fast;
      full.exact_shortcuts = false;
      const SimResult a = simulate_iteration(c, topo, m, p, fast), b = simulate_iteration(c, topo, m, p, full);
      SCOPED_TRACE(std::string(spec) + (hierarchical ? " hierarchical" : " flat"));
      test::expect_same_result(a, b);
      test::expect_same_timeline_order(a, b);
    }
  }
}

}  // namespace
}  // namespace arachne

namespace arachne {
namespace {

// Checked all-to-all bundles (the flows into or out of one GPU filled as one flow while they keep equal
// rates, split when they would not; sim/net/flow_network.h) give the unbundled simulation's output bit for
// bit, with the other shortcuts on and against the full simulation: EP groups inside one node (bundles
// kept), spanning two nodes over shared NICs (members on NIC and NVLink routes, concurrent DP traffic:
// splits), flat and hierarchical, EP inside a TP group, and uneven expert placement on mixed GPUs.
TEST(MoeIteration, BundledAllToAllMatchesUnbundled) {
  const ModelConfig m = mixtral(1.0, 1.25, 4);
  struct Case {
    std::string name;
    Cluster cluster;
    Plan plan;
  };
  std::vector<Case> cases;
  for (const auto& [spec, gpus] : {std::pair{"H100:4x8", 32}, std::pair{"H100:4x4", 16}}) {
    const Cluster c = parse_cluster_spec(spec, GpuCatalog::load_default());
    cases.push_back({spec, c, pp2_ep8_plan(c, gpus, m)});
  }
  {
    const Cluster c = parse_cluster_spec("A100-80:1x8", GpuCatalog::load_default());
    const std::string yaml =
        "pipelines:\n  - micro_batch: 1\n    micro_batches: 2\n    stages:\n"
        "      - {layers: [0, 4], groups: [{gpus: \"n0\", tp: 8}], ep: 8, ep_scope: stage}\n";
    cases.push_back({"ep inside tp", c, parse_plan_yaml_text(yaml, "ep-in-tp.yaml", c)});
  }
  {
    // Four single-GPU pipelines on two H100 and two A100, experts placed 3:3:1:1 (faster GPUs hold more).
    const Cluster c = parse_cluster_spec("H100:1x2,A100-80:1x2", GpuCatalog::load_default());
    std::string yaml = "pipelines:\n";
    for (const char* g : {"n0:0", "n0:1", "n1:0", "n1:1"}) {
      yaml += "  - micro_batch: 1\n    micro_batches: 2\n    stages:\n";
      yaml += std::string("      - {layers: [0, 4], groups: [{gpus: \"") + g +
              "\", tp: 1}], ep: 4, ep_scope: pipelines, experts: [3, 3, 1, 1]}\n";
    }
    const Plan p = parse_plan_yaml_text(yaml, "uneven.yaml", c);
    validate_plan(p, c, m, std::nullopt, "uneven");
    cases.push_back({"uneven experts, mixed GPUs", c, p});
  }
  for (const Case& k : cases) {
    for (const bool hierarchical : {false, true}) {
      SCOPED_TRACE(k.name + (hierarchical ? " hierarchical" : " flat"));
      const Topology topo(k.cluster);
      SimOptions bundled;
      bundled.ignore_memory = true;
      bundled.record_timeline = true;
      bundled.hierarchical_alltoall = hierarchical;
      SimOptions unbundled = bundled;
      unbundled.checked_bundles = false;
      SimOptions full = bundled;
      full.exact_shortcuts = false;
      const SimResult a = simulate_iteration(k.cluster, topo, m, k.plan, bundled);
      const SimResult b = simulate_iteration(k.cluster, topo, m, k.plan, unbundled);
      const SimResult f = simulate_iteration(k.cluster, topo, m, k.plan, full);
      ASSERT_GT(a.breakdown.ep_comm, 0);
      test::expect_same_result(a, b);
      test::expect_same_result(a, f);
      test::expect_same_timeline_order(a, b);
    }
  }
}

}  // namespace
}  // namespace arachne
