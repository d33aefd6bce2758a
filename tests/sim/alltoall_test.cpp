// MoE all-to-all on the real topology: which links it uses, NVLink and NIC bandwidth bounds, skewed matrices,
// flat vs hierarchical (Tutel 2DH) traffic and timing, determinism. Clusters are built by hand (link_eff = 1)
// so every capacity is known exactly.
#include "sim/net/alltoall.h"

#include <gtest/gtest.h>

#include "tests/sim/test_clusters.h"

#include <array>
#include <numeric>
#include <stdexcept>
#include <vector>

namespace arachne {
namespace {

constexpr double kGB = 1e9;
// Completion times are integer nanoseconds; a few flow completions and latencies each round by <= 0.5 ns.
constexpr double kNsRounding = 1e-8;

using Shape = test::ClusterShape;
Cluster a2a_cluster(const Shape& s) { return test::exact_cluster(s, "alltoall-test"); }

struct A2aOutcome {
  double seconds = -1;
  TimeNs ns = -1;
  std::array<double, kLinkClasses> bytes{};
  std::uint64_t flows = 0;
  std::uint64_t bundles_split = 0;
};

template <class Body>
A2aOutcome run_a2a(const Cluster& cluster, Body body, bool bundled = true) {
  const Topology topo(cluster);
  Engine engine;
  FlowNetwork net(engine, topo.links());
  net.set_checked_bundles(bundled);
  CollectiveContext ctx{engine, net, topo};
  A2aOutcome r;
  body(ctx, topo, [&] {
    r.ns = engine.now();
    r.seconds = ns_to_seconds(engine.now());
  });
  engine.run();
  r.bytes = net.bytes_by_class();
  r.flows = net.flows_started();
  r.bundles_split = net.bundles_split();
  return r;
}

std::vector<GpuId> first_gpus(int n) {
  std::vector<GpuId> m(static_cast<std::size_t>(n));
  std::iota(m.begin(), m.end(), 0);
  return m;
}

double cls_bytes(const A2aOutcome& r, LinkClass c) { return r.bytes[static_cast<int>(c)]; }

double off_diagonal_sum(const std::vector<std::vector<double>>& b) {
  double s = 0;
  for (std::size_t i = 0; i < b.size(); ++i)
    for (std::size_t j = 0; j < b.size(); ++j) s += i == j ? 0.0 : b[i][j];
  return s;
}

TEST(AllToAllTest, UniformMatrixSplitsEachMembersBytesEvenly) {
  const auto b = uniform_alltoall_bytes(4, 8.0);
  ASSERT_EQ(b.size(), 4u);
  for (const auto& row : b) {
    ASSERT_EQ(row.size(), 4u);
    EXPECT_DOUBLE_EQ(std::accumulate(row.begin(), row.end(), 0.0), 8.0);
    for (double v : row) EXPECT_DOUBLE_EQ(v, 2.0);
  }
  EXPECT_TRUE(uniform_alltoall_bytes(0, 1.0).empty());
}

TEST(AllToAllTest, IntraNodeGroupUsesNoNicAndTwoNvLinkHopsPerPair) {
  // An EP group inside one node: every pair's route is gpu>fabric>gpu, so no NIC byte, and the NVLink class
  // carries each off-diagonal byte twice (two links per intra-node route). Diagonal bytes stay local.
  Shape shape;
  shape.nodes = 2;
  const Cluster cluster = a2a_cluster(shape);
  const int n = 8;
  std::vector<std::vector<double>> b(n, std::vector<double>(n));
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) b[i][j] = (1 + i + 2 * j) * 1e6;  // irregular, all positive
  const A2aOutcome r = run_a2a(cluster, [&](CollectiveContext& ctx, const Topology&, auto done) {
    alltoall(ctx, first_gpus(n), b, done);
  });
  EXPECT_GT(r.seconds, 0.0);
  EXPECT_EQ(cls_bytes(r, LinkClass::Nic), 0.0);
  EXPECT_NEAR(cls_bytes(r, LinkClass::NvLink), 2.0 * off_diagonal_sum(b), 1e-6);
  EXPECT_EQ(r.flows, static_cast<std::uint64_t>(n * (n - 1))) << "one flow per ordered pair i != j";
}

TEST(AllToAllTest, FlatIntraNodeTimeIsUplinkVolumeOverLinkBandwidth) {
  // n GPUs of one node, uniform S per member: each GPU's fabric uplink carries (n-1)/n*S (its n-1 equal
  // off-diagonal messages) and each downlink the same, so max-min gives every flow B/(n-1) and all finish
  // together at ((n-1)/n*S)/B after the 1 us NVLink latency. Exact up to ns rounding.
  Shape shape;
  shape.nodes = 1;
  const Cluster cluster = a2a_cluster(shape);
  const double S = 8 * kGB;
  for (int n : {2, 4, 8}) {
    double lat = 0;
    const A2aOutcome r = run_a2a(cluster, [&](CollectiveContext& ctx, const Topology& topo, auto done) {
      lat = topo.latency_s(0, 1);
      alltoall(ctx, first_gpus(n), uniform_alltoall_bytes(n, S), done);
    });
    const double expect = (n - 1.0) / n * S / shape.intra_bw + lat;
    EXPECT_NEAR(r.seconds, expect, kNsRounding) << "n=" << n;
  }
}

TEST(AllToAllTest, DoublingNicBandwidthHalvesInterNodeAllToAll) {
  // With large buffers the NIC links are the bottleneck (intra-node NVLink is 4x faster per GPU and the
  // 5 us latency is < 0.01% of the time), so the time scales as 1/nic_bw: the ratio is 0.5 within 2%.
  // Case 1: 4 nodes x 1 GPU. Case 2: 2 nodes x 4 GPUs behind a single NIC per node.
  struct Case {
    int nodes, gpus, nics;
  };
  for (const Case c : {Case{4, 1, 1}, Case{2, 4, 1}}) {
    Shape shape;
    shape.nodes = c.nodes;
    shape.gpus_per_node = c.gpus;
    shape.nics = c.nics;
    const int n = c.nodes * c.gpus;
    const auto b = uniform_alltoall_bytes(n, 4 * kGB);
    const A2aOutcome slow = run_a2a(a2a_cluster(shape), [&](CollectiveContext& ctx, const Topology&, auto done) {
      alltoall(ctx, first_gpus(n), b, done);
    });
    shape.nic_bw *= 2;
    const A2aOutcome fast = run_a2a(a2a_cluster(shape), [&](CollectiveContext& ctx, const Topology&, auto done) {
      alltoall(ctx, first_gpus(n), b, done);
    });
    EXPECT_NEAR(fast.seconds / slow.seconds, 0.5, 0.01) << c.nodes << "x" << c.gpus;
  }
}

TEST(AllToAllTest, SharedNicBoundsFlatAndHierarchicalMovesTheSameNicBytes) {
  // N = 4 nodes x g = 4 GPUs, one NIC per node, uniform S per member. Bytes leaving a node:
  // E = g * (N-1)/N * S. Flat: every node's nic>leaf carries 48 equal flows (and every leaf>nic 48), so all
  // inter-node flows run at nic_bw/48 and T = E/nic_bw + latency.
  // Hierarchical: phase 2 sends one block of g*g*S/(N*g) = S per node pair; node S's three proxies share its
  // nic>leaf, so phase 2 also takes E/nic_bw. Same bytes cross the NICs (each inter-node byte once, over the
  // 4 NIC links of its route), with N(N-1) = 12 inter-node messages instead of N(N-1)g^2 = 192. The 2DH
  // version is slower than flat by at most its intra-node phases (phases run back to back).
  Shape shape;
  shape.nodes = 4;
  shape.gpus_per_node = 4;
  shape.nics = 1;
  shape.intra_bw = 200 * kGB;
  const Cluster cluster = a2a_cluster(shape);
  const int N = 4, g = 4, n = N * g;
  const double S = 4 * kGB;
  const auto b = uniform_alltoall_bytes(n, S);
  const auto m = first_gpus(n);
  const double E = g * (N - 1.0) / N * S;

  const A2aOutcome flat = run_a2a(cluster, [&](CollectiveContext& ctx, const Topology&, auto done) {
    alltoall(ctx, m, b, done);
  });
  EXPECT_NEAR(flat.seconds, E / shape.nic_bw + shape.latency_s, kNsRounding);

  std::vector<std::vector<AllToAllTransfer>> phases;
  const A2aOutcome hier = run_a2a(cluster, [&](CollectiveContext& ctx, const Topology& topo, auto done) {
    phases = hierarchical_alltoall_phases(topo, m, b);
    hierarchical_alltoall(ctx, m, b, done);
  });
  ASSERT_EQ(phases.size(), 3u);
  EXPECT_EQ(phases[1].size(), static_cast<std::size_t>(N * (N - 1)));
  for (const auto& t : phases[1]) EXPECT_NEAR(t.bytes, g * g * S / n, 1e-3) << "one block of S per node pair";
  EXPECT_LT(hier.flows, flat.flows);
  const double nic_flat = cls_bytes(flat, LinkClass::Nic), nic_hier = cls_bytes(hier, LinkClass::Nic);
  EXPECT_NEAR(nic_hier, nic_flat, 1e-9 * nic_flat);
  EXPECT_NEAR(nic_flat, links_per_crossing(LinkClass::Nic) * N * E, 1e-9 * nic_flat);

  // Each phase alone, on an idle network: the 2DH total is their sum (barriers), its inter-node phase is
  // NIC-bound like flat, and 2DH exceeds flat by no more than the intra-node phases.
  auto phase_time = [&](std::size_t p) {
    return run_a2a(cluster, [&](CollectiveContext& ctx, const Topology&, auto done) {
             run_alltoall_phases(ctx, m, {phases[p]}, done);
           }).seconds;
  };
  const double t1 = phase_time(0), t2 = phase_time(1), t3 = phase_time(2);
  EXPECT_NEAR(t2, E / shape.nic_bw + shape.latency_s, kNsRounding);
  EXPECT_NEAR(hier.seconds, t1 + t2 + t3, 3 * kNsRounding);
  EXPECT_LE(hier.seconds, flat.seconds + t1 + t3 + 3 * kNsRounding);
  EXPECT_GE(hier.seconds, flat.seconds - kNsRounding) << "2DH cannot beat the NIC bound";
}

TEST(AllToAllTest, SkewedReceiverSetsTheTime) {
  // Member 0 receives 4x more (4b from every other member; all other pairs b). Its incoming link carries
  // (n-1)*4b, the most of any link (senders' uplinks carry 4b + (n-2)b). Max-min: all flows share at
  // capacity/(n-1) until the b-flows end, then the 4b-flows keep the receiver's link full, so
  // T = (n-1)*4b / (receiver's downlink bandwidth) + latency.
  // Intra-node: downlink = fabric>gpu0 at intra_bw. Inter-node (one GPU per node): leaf>nic of node 0.
  const double b = 1 * kGB;
  auto skewed = [&](int n) {
    std::vector<std::vector<double>> m(n, std::vector<double>(n, b));
    for (int i = 1; i < n; ++i) m[i][0] = 4 * b;
    return m;
  };
  {
    Shape shape;
    shape.nodes = 1;
    const int n = 8;
    double lat = 0;
    const A2aOutcome r = run_a2a(a2a_cluster(shape), [&](CollectiveContext& ctx, const Topology& topo, auto done) {
      lat = topo.latency_s(0, 1);
      alltoall(ctx, first_gpus(n), skewed(n), done);
    });
    EXPECT_NEAR(r.seconds, (n - 1) * 4 * b / shape.intra_bw + lat, kNsRounding);
  }
  {
    Shape shape;
    shape.gpus_per_node = 1;
    shape.nics = 1;
    const int n = 4;
    const A2aOutcome r = run_a2a(a2a_cluster(shape), [&](CollectiveContext& ctx, const Topology&, auto done) {
      alltoall(ctx, first_gpus(n), skewed(n), done);
    });
    EXPECT_NEAR(r.seconds, (n - 1) * 4 * b / shape.nic_bw + shape.latency_s, kNsRounding);
  }
}

TEST(AllToAllTest, BundledFlowsFinishAsSeparateFlowsBitForBit) {
  // Dispatch-like (bytes set by the receiver) and combine-like (by the sender) matrices: the flows into (out
  // of) one GPU start as one checked bundle. Inside one node they keep equal rates; across two nodes
  // behind one NIC each, a GPU's NVLink and NIC members diverge and the bundles split. Either way the
  // all-to-all ends at the nanosecond the separate flows end.
  Shape one_node;
  one_node.nodes = 1;
  Shape two_nodes;
  two_nodes.nodes = 2;
  two_nodes.gpus_per_node = 4;
  two_nodes.nics = 1;
  for (const Shape& shape : {one_node, two_nodes}) {
    const Cluster cluster = a2a_cluster(shape);
    for (const bool by_receiver : {true, false}) {
      std::vector<std::vector<double>> b(8, std::vector<double>(8));
      for (int i = 0; i < 8; ++i)
        for (int j = 0; j < 8; ++j) b[i][j] = (1 + (by_receiver ? j : i)) * 1e8 / 3;
      for (const bool hierarchical : {false, true}) {
        auto body = [&](CollectiveContext& ctx, const Topology&, auto done) {
          if (hierarchical) hierarchical_alltoall(ctx, first_gpus(8), b, done);
          else alltoall(ctx, first_gpus(8), b, done);
        };
        const A2aOutcome bundled = run_a2a(cluster, body, true), separate = run_a2a(cluster, body, false);
        EXPECT_EQ(bundled.ns, separate.ns);
        EXPECT_EQ(bundled.flows, separate.flows);
        for (int k = 0; k < kLinkClasses; ++k) EXPECT_DOUBLE_EQ(bundled.bytes[k], separate.bytes[k]);
      }
    }
  }
}

TEST(AllToAllTest, FlowsIntoAGpuOverRoutesOfEachLengthStayOneBundleOnSymmetricLeaves) {
  // Four leaves of two nodes, uplinks oversubscribed 3:1: a flat uniform all-to-all's flows into one GPU
  // across the spine are slower than those inside its leaf, so one bundle per receiver would diverge and
  // split. Bundled by route length as well, each bundle keeps one rate (the leaves are symmetric) and
  // nothing splits; the times, flows and bytes are the separate flows' bit for bit.
  Shape shape;
  shape.nodes = 8;
  shape.gpus_per_node = 2;
  shape.nics = 2;
  shape.nodes_per_leaf = 2;
  Cluster cluster = a2a_cluster(shape);
  cluster.network.oversubscription = 3;
  const auto b = uniform_alltoall_bytes(16, 64e6);
  auto body = [&](CollectiveContext& ctx, const Topology&, auto done) { alltoall(ctx, first_gpus(16), b, done); };
  const A2aOutcome bundled = run_a2a(cluster, body, true), separate = run_a2a(cluster, body, false);
  EXPECT_EQ(bundled.bundles_split, 0u);
  EXPECT_EQ(bundled.ns, separate.ns);
  EXPECT_EQ(bundled.flows, separate.flows);
  for (int k = 0; k < kLinkClasses; ++k) EXPECT_DOUBLE_EQ(bundled.bytes[k], separate.bytes[k]);
  // The spine is the bottleneck: the all-to-all is slower than with uplinks as wide as the leaves' NICs.
  cluster.network.oversubscription = 1;
  EXPECT_GT(bundled.ns, run_a2a(cluster, body, true).ns);
}

TEST(AllToAllTest, HierarchicalEqualsFlatOnOneNodeOrOneGpuPerNode) {
  // With every member in one node there is nothing to aggregate; with one member per node every member is
  // its node's proxy. Either way the 2DH schedule is the flat one: same time, flows and bytes.
  std::vector<std::vector<double>> b(4, std::vector<double>(4));
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) b[i][j] = (3 + i * j + j) * 1e8;
  Shape one_node;
  one_node.nodes = 1;
  Shape one_per_node;
  one_per_node.gpus_per_node = 1;
  one_per_node.nics = 1;
  for (const Shape& shape : {one_node, one_per_node}) {
    const Cluster cluster = a2a_cluster(shape);
    const A2aOutcome flat = run_a2a(cluster, [&](CollectiveContext& ctx, const Topology&, auto done) {
      alltoall(ctx, first_gpus(4), b, done);
    });
    const A2aOutcome hier = run_a2a(cluster, [&](CollectiveContext& ctx, const Topology&, auto done) {
      hierarchical_alltoall(ctx, first_gpus(4), b, done);
    });
    EXPECT_EQ(hier.ns, flat.ns);
    EXPECT_EQ(hier.flows, flat.flows);
    EXPECT_EQ(hier.bytes, flat.bytes);
  }
}

TEST(AllToAllTest, HierarchicalPhasesFollowTheProxyRuleAndConserveBytes) {
  // Unequal nodes: members {0,1,2} on node 0, {8} on node 1, {16,17} on node 2 (member indices 0-2, 3, 4-5).
  // proxy_src(S, D) = S[idx(D) mod |S|], proxy_dst(S, D) = D[idx(S) mod |D|]; phase 2 carries, per node
  // pair, exactly the bytes between their members; phases 1 and 3 stay inside nodes.
  Shape shape;
  shape.nodes = 3;
  const Cluster cluster = a2a_cluster(shape);
  const Topology topo(cluster);
  const std::vector<GpuId> m{0, 1, 2, 8, 16, 17};
  const std::vector<int> node{0, 0, 0, 1, 2, 2};
  const std::vector<std::vector<int>> groups{{0, 1, 2}, {3}, {4, 5}};
  const int n = 6;
  std::vector<std::vector<double>> b(n, std::vector<double>(n));
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) b[i][j] = 1000.0 * (1 + i) + 10.0 * j;
  const auto phases = hierarchical_alltoall_phases(topo, m, b);
  ASSERT_EQ(phases.size(), 3u);
  for (std::size_t p : {0u, 2u})
    for (const auto& t : phases[p]) EXPECT_EQ(node[t.src], node[t.dst]) << "phase " << p + 1 << " is intra-node";
  std::vector<std::vector<double>> pair_bytes(3, std::vector<double>(3, 0.0));
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j)
      if (node[i] != node[j]) pair_bytes[node[i]][node[j]] += b[i][j];
  ASSERT_EQ(phases[1].size(), 6u);
  for (const auto& t : phases[1]) {
    const int s = node[t.src], d = node[t.dst];
    ASSERT_NE(s, d);
    EXPECT_EQ(t.src, groups[s][d % groups[s].size()]);
    EXPECT_EQ(t.dst, groups[d][s % groups[d].size()]);
    EXPECT_DOUBLE_EQ(t.bytes, pair_bytes[s][d]);
  }
  // Phase 3 delivers to each member everything from other nodes except what it received as a proxy.
  std::vector<double> from_other_nodes(n, 0.0), via_phase3(n, 0.0);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j)
      if (node[i] != node[j]) from_other_nodes[j] += b[i][j];
  for (const auto& t : phases[2]) via_phase3[t.dst] += t.bytes;
  double phase3_total = 0, proxy_kept = 0;
  for (int j = 0; j < n; ++j) phase3_total += via_phase3[j];
  for (int s = 0; s < 3; ++s)
    for (int d = 0; d < 3; ++d)
      if (s != d) {
        const int pd = groups[d][s % groups[d].size()];
        for (int i : groups[s]) proxy_kept += b[i][pd];
      }
  double cross = 0;
  for (int j = 0; j < n; ++j) cross += from_other_nodes[j];
  EXPECT_NEAR(phase3_total + proxy_kept, cross, 1e-6);
  // Both algorithms run to completion on this group and move the same NIC bytes.
  const A2aOutcome flat = run_a2a(cluster, [&](CollectiveContext& ctx, const Topology&, auto done) {
    alltoall(ctx, m, b, done);
  });
  const A2aOutcome hier = run_a2a(cluster, [&](CollectiveContext& ctx, const Topology&, auto done) {
    hierarchical_alltoall(ctx, m, b, done);
  });
  EXPECT_GT(flat.seconds, 0.0);
  EXPECT_GT(hier.seconds, 0.0);
  EXPECT_NEAR(cls_bytes(hier, LinkClass::Nic), cls_bytes(flat, LinkClass::Nic), 1e-9 * cls_bytes(flat, LinkClass::Nic));
}

TEST(AllToAllTest, SameInputsGiveIdenticalCompletionTimes) {
  // The simulation is deterministic: flows start in (i, j) order and the engine breaks ties by insertion.
  Shape shape;
  shape.nodes = 3;
  shape.gpus_per_node = 4;
  shape.nics = 2;
  const Cluster cluster = a2a_cluster(shape);
  const std::vector<GpuId> m{0, 1, 2, 5, 8, 9, 11};
  const int n = static_cast<int>(m.size());
  std::vector<std::vector<double>> b(n, std::vector<double>(n));
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) b[i][j] = ((7 * i + 3 * j) % 5) * 1e7;  // includes zeros
  for (const bool hierarchical : {false, true}) {
    auto once = [&] {
      return run_a2a(cluster, [&](CollectiveContext& ctx, const Topology&, auto done) {
        if (hierarchical) {
          hierarchical_alltoall(ctx, m, b, done);
        } else {
          alltoall(ctx, m, b, done);
        }
      });
    };
    const A2aOutcome a = once(), c = once();
    EXPECT_GT(a.ns, 0);
    EXPECT_EQ(a.ns, c.ns);
    EXPECT_EQ(a.bytes, c.bytes);
    EXPECT_EQ(a.flows, c.flows);
  }
}

TEST(AllToAllTest, NothingToSendCompletesAtOnceAndBadShapesThrow) {
  // Zero bytes, a single member, or all pairs on the same GPU: no flow, done at t = 0.
  Shape shape;
  shape.nodes = 1;
  const Cluster cluster = a2a_cluster(shape);
  const A2aOutcome zeros = run_a2a(cluster, [&](CollectiveContext& ctx, const Topology&, auto done) {
    alltoall(ctx, first_gpus(4), std::vector<std::vector<double>>(4, std::vector<double>(4, 0.0)), done);
  });
  EXPECT_EQ(zeros.ns, 0);
  EXPECT_EQ(zeros.flows, 0u);
  const A2aOutcome same_gpu = run_a2a(cluster, [&](CollectiveContext& ctx, const Topology&, auto done) {
    hierarchical_alltoall(ctx, {3, 3}, uniform_alltoall_bytes(2, kGB), done);
  });
  EXPECT_EQ(same_gpu.ns, 0);
  EXPECT_EQ(same_gpu.flows, 0u);
  const Topology topo(cluster);
  Engine engine;
  FlowNetwork net(engine, topo.links());
  CollectiveContext ctx{engine, net, topo};
  EXPECT_THROW(alltoall(ctx, first_gpus(3), uniform_alltoall_bytes(2, kGB), [] {}), std::invalid_argument);
  EXPECT_THROW(hierarchical_alltoall(ctx, first_gpus(2), {{1.0, 2.0}, {3.0}}, [] {}), std::invalid_argument);
}

}  // namespace
}  // namespace arachne
