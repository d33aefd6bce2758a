// Collectives on the real topology: ring volumes and latencies, contention on shared NICs, bandwidth
// scaling, hierarchical vs flat all-reduce. Clusters are built by hand so every capacity is known.
#include "sim/net/collectives.h"

#include <gtest/gtest.h>

#include "tests/sim/test_clusters.h"

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <numeric>
#include <vector>

namespace arachne {
namespace {

constexpr double kGB = 1e9;

using Shape = test::ClusterShape;
Cluster make_cluster(const Shape& s) { return test::exact_cluster(s, "collectives-test"); }

struct Outcome {
  double seconds = -1;
  std::array<double, kLinkClasses> bytes{};
  std::uint64_t flows_recomputed = 0;  // over every reallocation (FlowNetwork::flows_recomputed)
};

// Runs `body` (which starts collectives and calls the given `done` once) and records when it finished.
// `checked_bundles`: FlowNetwork::set_checked_bundles.
template <class Body>
Outcome run_on(const Cluster& cluster, Body body, bool checked_bundles = true) {
  const Topology topo(cluster);
  Engine engine;
  FlowNetwork net(engine, topo.links());
  net.set_checked_bundles(checked_bundles);
  CollectiveContext ctx{engine, net, topo};
  Outcome r;
  body(ctx, topo, [&] { r.seconds = ns_to_seconds(engine.now()); });
  engine.run();
  r.bytes = net.bytes_by_class();
  r.flows_recomputed = net.flows_recomputed();
  return r;
}

std::vector<GpuId> gpus(const std::vector<int>& ids) { return std::vector<GpuId>(ids.begin(), ids.end()); }

double nic_bytes(const Outcome& r) { return r.bytes[static_cast<int>(LinkClass::Nic)]; }

int nic_hops(const Topology& topo, GpuId a, GpuId b) {
  int k = 0;
  for (LinkId l : topo.route(a, b)) k += topo.links()[static_cast<std::size_t>(l)].cls == LinkClass::Nic ? 1 : 0;
  return k;
}

TEST(CollectivesTest, IntraNodeRingAllReduceMatchesTheRingFormula) {
  // n GPUs on one NVLink node, every GPU's in- and out-link used by exactly one ring edge: each edge drains
  // 2(n-1)/n*S at the full link bandwidth, after 2(n-1) per-hop latencies. Same as the closed form.
  Shape shape;
  shape.nodes = 1;
  const Cluster cluster = make_cluster(shape);
  const double S = 1 * kGB;
  const int n = 8;
  double hop_lat = 0;
  const Outcome r = run_on(cluster, [&](CollectiveContext& ctx, const Topology& topo, auto done) {
    std::vector<GpuId> m(n);
    std::iota(m.begin(), m.end(), 0);
    hop_lat = topo.latency_s(0, 1);
    allreduce(ctx, m, S, done);
  });
  const double expect = 2.0 * (n - 1) / n * S / shape.intra_bw + 2 * (n - 1) * hop_lat;
  EXPECT_NEAR(r.seconds, expect, 2e-9 * 2 * n);  // integer-ns rounding of latency and completion
  EXPECT_NEAR(intra_node_collective_time(CollectiveKind::AllReduce, n, S, shape.intra_bw, hop_lat), expect,
              1e-12);
  EXPECT_EQ(nic_bytes(r), 0.0) << "an intra-node ring must not touch a NIC";
  // every edge crosses gpu>fabric and fabric>gpu: 2 NVLink hops x n edges x 2(n-1)/n*S
  EXPECT_NEAR(r.bytes[static_cast<int>(LinkClass::NvLink)], 2.0 * n * 2.0 * (n - 1) / n * S, 1.0);
}

TEST(CollectivesTest, InterNodeRingAllReduceMatchesTheRingFormula) {
  // One GPU per node on 4 nodes: each ring edge leaves through one NIC and enters through another, no link
  // shared between edges, so T = 2(n-1)/n*S/nic_bw + 2(n-1)*latency.
  Shape shape;
  shape.gpus_per_node = 1;
  shape.nics = 1;
  const Cluster cluster = make_cluster(shape);
  const double S = 2 * kGB;
  const int n = 4;
  const Outcome r = run_on(cluster, [&](CollectiveContext& ctx, const Topology&, auto done) {
    allreduce(ctx, gpus({0, 1, 2, 3}), S, done);
  });
  const double expect = 2.0 * (n - 1) / n * S / shape.nic_bw + 2 * (n - 1) * shape.latency_s;
  EXPECT_NEAR(r.seconds, expect, 1e-8);
}

// 4 nodes x 2 GPUs behind a single NIC each; ring A = GPU 0 of every node, ring B = GPU 1.
Cluster two_gpus_per_nic() {
  Shape shape;
  shape.gpus_per_node = 2;
  shape.nics = 1;
  return make_cluster(shape);
}
const std::vector<GpuId> kRingA = {0, 2, 4, 6}, kRingB = {1, 3, 5, 7};

TEST(CollectivesTest, TwoRingsSharingOneNicTakeTwiceAsLong) {
  // Together both rings' edges share every NIC link, so each gets half the bandwidth: ~2x the time of one
  // ring alone. Tolerance 2%: the latency term (6 x 5 us) is < 0.1% of the 60 ms bandwidth term and is not
  // doubled.
  const Cluster cluster = two_gpus_per_nic();
  const double S = 1 * kGB;
  const std::vector<GpuId>& ring_a = kRingA;
  const std::vector<GpuId>& ring_b = kRingB;
  const Outcome alone = run_on(cluster, [&](CollectiveContext& ctx, const Topology&, auto done) {
    ring_collective(ctx, CollectiveKind::AllReduce, {ring_a}, S, done);
  });
  const Outcome both = run_on(cluster, [&](CollectiveContext& ctx, const Topology&, auto done) {
    ring_collective(ctx, CollectiveKind::AllReduce, {ring_a, ring_b}, S, done);
  });
  EXPECT_GT(both.seconds, alone.seconds);
  EXPECT_NEAR(both.seconds / alone.seconds, 2.0, 0.04);
}

TEST(CollectivesTest, DoublingNicBandwidthHalvesAnInterNodeRingAllReduce) {
  // 8 nodes, one GPU each, 4 GB buffer: the bandwidth term (~280 ms at 25 GB/s) dwarfs the latency term
  // (14 x 5 us = 70 us, 0.03%), so doubling the NIC bandwidth halves the time within 0.5%.
  Shape shape;
  shape.nodes = 8;
  shape.gpus_per_node = 1;
  shape.nics = 1;
  const double S = 4 * kGB;
  const std::vector<GpuId> m = gpus({0, 1, 2, 3, 4, 5, 6, 7});
  const Outcome slow = run_on(make_cluster(shape), [&](CollectiveContext& ctx, const Topology&, auto done) {
    allreduce(ctx, m, S, done);
  });
  shape.nic_bw *= 2;
  const Outcome fast = run_on(make_cluster(shape), [&](CollectiveContext& ctx, const Topology&, auto done) {
    allreduce(ctx, m, S, done);
  });
  EXPECT_NEAR(fast.seconds / slow.seconds, 0.5, 0.0025);
}

TEST(CollectivesTest, HierarchicalAllReduceMovesFewerNicBytesThanAFlatRing) {
  // N = 4 nodes x g = 4 GPUs (n = 16). A flat ring in node order has N node-crossing edges, each carrying
  // 2(n-1)/n*S; the hierarchical scheme runs g rings of N nodes on shards S/g: g*N*2(N-1)/N*S/g = 2(N-1)*S.
  // Both are multiplied by the NIC-class hops of an inter-node route. 2(N-1) = 6 < N*2(n-1)/n = 7.5.
  // With one NIC per GPU the hierarchical scheme also spreads the inter-node phase over g NICs: faster.
  Shape shape;
  shape.gpus_per_node = 4;
  shape.nics = 4;
  const Cluster cluster = make_cluster(shape);
  const double S = 1 * kGB;
  std::vector<GpuId> m(16);
  std::iota(m.begin(), m.end(), 0);
  int hops = 0;
  const Outcome hier = run_on(cluster, [&](CollectiveContext& ctx, const Topology& topo, auto done) {
    hops = nic_hops(topo, 0, 4);
    allreduce(ctx, m, S, done);
  });
  const Outcome flat = run_on(cluster, [&](CollectiveContext& ctx, const Topology&, auto done) {
    ring_collective(ctx, CollectiveKind::AllReduce, {m}, S, done);
  });
  ASSERT_GT(hops, 0);
  EXPECT_NEAR(nic_bytes(hier), hops * 2.0 * (4 - 1) * S, 1.0);
  EXPECT_NEAR(nic_bytes(flat), hops * 4 * 2.0 * (16 - 1) / 16 * S, 1.0);
  EXPECT_LT(nic_bytes(hier), nic_bytes(flat));
  EXPECT_LT(hier.seconds, flat.seconds);
}

TEST(CollectivesTest, ReduceScatterAndAllGatherMoveHalfAnAllReduce) {
  // Ring reduce-scatter and all-gather each carry (n-1)/n*S per edge and take n-1 steps: on one node their
  // bandwidth term is half the all-reduce's.
  Shape shape;
  shape.nodes = 1;
  shape.gpus_per_node = 4;
  const Cluster cluster = make_cluster(shape);
  const double S = 4 * kGB;
  const std::vector<GpuId> m = gpus({0, 1, 2, 3});
  auto time_of = [&](CollectiveKind k) {
    return run_on(cluster, [&](CollectiveContext& ctx, const Topology&, auto done) {
             ring_collective(ctx, k, {m}, S, done);
           }).seconds;
  };
  const double lat = Topology(cluster).latency_s(0, 1);
  const double ar = time_of(CollectiveKind::AllReduce) - 6 * lat;
  const double rs = time_of(CollectiveKind::ReduceScatter) - 3 * lat;
  const double ag = time_of(CollectiveKind::AllGather) - 3 * lat;
  EXPECT_NEAR(rs / ar, 0.5, 1e-6);
  EXPECT_NEAR(ag / ar, 0.5, 1e-6);
  EXPECT_NEAR(rs, 3.0 / 4 * S / shape.intra_bw, 1e-8);
}

// A ring's edges start as one checked bundle (sim/net/flow_network.h): the completion must be the separate
// flows' bit for bit, whether the bundle keeps one rate to the end (rings across NICs alone), is refused
// (edges of different rate bounds: NVLink and NIC) or splits when other flows arrive on its links later.
TEST(CollectivesTest, RingEdgesAsCheckedBundlesFinishAsSeparateFlowsBitForBit) {
  const Cluster cluster = two_gpus_per_nic();
  const double S = 1 * kGB;
  using Body = std::function<void(CollectiveContext&, const std::function<void()>&)>;
  struct Case {
    std::string name;
    Body body;
    bool bundles_stay = false;  // the bundles keep one rate throughout: fewer flows recomputed
  };
  const std::vector<GpuId>& ring_a = kRingA;
  const std::vector<GpuId>& ring_b = kRingB;
  const std::vector<Case> cases = {
      {"one ring across NICs", [&](CollectiveContext& ctx, const auto& done) {
         ring_collective(ctx, CollectiveKind::AllReduce, {ring_a}, S, done);
       }, true},
      {"two rings sharing the NICs", [&](CollectiveContext& ctx, const auto& done) {
         ring_collective(ctx, CollectiveKind::ReduceScatter, {ring_a, ring_b}, S, done);
       }, true},
      {"a ring of NVLink and NIC edges", [&](CollectiveContext& ctx, const auto& done) {
         ring_collective(ctx, CollectiveKind::AllGather, {gpus({0, 1, 2, 3, 4, 5})}, S, done);
       }},
      {"hierarchical all-reduce", [&](CollectiveContext& ctx, const auto& done) {
         allreduce(ctx, gpus({0, 1, 2, 3, 4, 5, 6, 7}), S, done);
       }},
      {"a second ring joining the NICs midway", [&](CollectiveContext& ctx, const auto& done) {
         auto left = std::make_shared<int>(2);
         auto one = [left, done] {
           if (--*left == 0) done();
         };
         ring_collective(ctx, CollectiveKind::AllReduce, {ring_a}, S, one);
         ctx.engine.schedule_at(seconds_to_ns(0.01), [&ctx, &ring_b, S, one] {
           ring_collective(ctx, CollectiveKind::AllReduce, {ring_b, gpus({0, 1})}, S / 3, one);
         });
       }},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    auto run = [&](bool bundles) {
      return run_on(cluster, [&](CollectiveContext& ctx, const Topology&, auto done) { k.body(ctx, done); }, bundles);
    };
    const Outcome bundled = run(true), separate = run(false);
    ASSERT_GT(separate.seconds, 0);
    EXPECT_EQ(bundled.seconds, separate.seconds);
    for (int c = 0; c < kLinkClasses; ++c) EXPECT_EQ(bundled.bytes[c], separate.bytes[c]) << "link class " << c;
    if (k.bundles_stay) EXPECT_LT(bundled.flows_recomputed, separate.flows_recomputed);
    else EXPECT_LE(bundled.flows_recomputed, separate.flows_recomputed);
  }
}

TEST(CollectivesTest, SendIsOneFlowAlongTheRoute) {
  // Point-to-point: route latency + S / bottleneck capacity (the NIC between nodes, the fabric inside one).
  Shape shape;
  shape.nodes = 2;
  const Cluster cluster = make_cluster(shape);
  const double S = 1 * kGB;
  const Outcome inter = run_on(cluster, [&](CollectiveContext& ctx, const Topology&, auto done) {
    send(ctx, 0, 8, S, done);
  });
  EXPECT_NEAR(inter.seconds, S / shape.nic_bw + shape.latency_s, 1e-8);
  double lat = 0;
  const Outcome intra = run_on(cluster, [&](CollectiveContext& ctx, const Topology& topo, auto done) {
    lat = topo.latency_s(0, 1);
    send(ctx, 0, 1, S, done);
  });
  EXPECT_NEAR(intra.seconds, S / shape.intra_bw + lat, 1e-8);
  EXPECT_EQ(nic_bytes(intra), 0.0);
}

TEST(CollectivesTest, TrivialGroupsCompleteImmediately) {
  Shape shape;
  shape.nodes = 1;
  const Cluster cluster = make_cluster(shape);
  const Outcome one = run_on(cluster, [&](CollectiveContext& ctx, const Topology&, auto done) {
    allreduce(ctx, gpus({3}), kGB, done);
  });
  EXPECT_EQ(one.seconds, 0.0);
  const Outcome none = run_on(cluster, [&](CollectiveContext& ctx, const Topology&, auto done) {
    ring_collective(ctx, CollectiveKind::AllGather, {gpus({1}), {}}, kGB, done);
  });
  EXPECT_EQ(none.seconds, 0.0);
  EXPECT_EQ(intra_node_collective_time(CollectiveKind::AllReduce, 1, kGB, 1e9, 1e-6), 0.0);
}


// NCCL's protocol choice (src/graph/tuning.cc): a tiny all-reduce is latency-bound and runs LL, whose
// latency is baseLat 3.6 us + 2(n-1) steps of 0.47 us over NVLink; a large one is bandwidth-bound and runs
// Simple (8.4 us + 2(n-1) steps of 3.4 us) at the full link bandwidth, 2(n-1)/n of the buffer per rank.
TEST(CollectivesTest, NcclRingPaysLowLatencyOnSmallMessagesAndFullBandwidthOnLargeOnes) {
  const double bw = 300e9;
  const double tiny = nccl_intra_node_collective_time(CollectiveKind::AllReduce, 8, 8.0, bw, true);
  EXPECT_NEAR(tiny, (3.6 + 14 * 0.47) * 1e-6, 0.01e-6);
  const double big_bytes = 1e9;
  const double big = nccl_intra_node_collective_time(CollectiveKind::AllReduce, 8, big_bytes, bw, true);
  EXPECT_NEAR(big, (8.4 + 14 * 3.4) * 1e-6 + 2.0 * 7 / 8 * big_bytes / bw, 1e-9);  // Simple
  // Without NVLink there is no LL128, and PCIe steps are slower.
  EXPECT_GT(nccl_intra_node_collective_time(CollectiveKind::AllReduce, 8, 8.0, bw, false), tiny);
  EXPECT_EQ(nccl_intra_node_collective_time(CollectiveKind::AllReduce, 1, 1e6, bw, true), 0.0);
}

}  // namespace
}  // namespace arachne
