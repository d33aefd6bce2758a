// Topology: routes are paths GPU>fabric>GPU inside a node and GPU>NIC>leaf>(spine>leaf)>NIC>GPU between
// nodes; link capacities are the configured bandwidths times the GPU type's achieved fraction (link_eff).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <utility>

#include "sim/hw/topology.h"
#include "test_support.h"

namespace arachne {
namespace {

const GpuCatalog& catalog() {
  static const GpuCatalog cat = GpuCatalog::load(test::configs() + "/gpus.yaml");
  return cat;
}

Cluster cluster_from_yaml(const std::string& text, const std::string& tag) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::filesystem::path p = std::filesystem::temp_directory_path() /
                                  ("arachne_topo_" + std::string(info->name()) + tag + "_" +
                                   std::to_string(::getpid()) + ".yaml");
  std::ofstream(p) << text;
  Cluster c = parse_cluster_yaml(p.string(), catalog());
  std::filesystem::remove(p);
  return c;
}

std::pair<std::string, std::string> ends(const std::string& link_name) {
  const auto gt = link_name.find('>');
  return {link_name.substr(0, gt), link_name.substr(gt + 1)};
}

double eff(const std::string& gpu) { return catalog().at(gpu).compute.link_eff; }

// Two 8-GPU DGX A100 nodes in different leaves (nodes_per_leaf 1), with the given oversubscription.
std::string two_leaf_yaml(double oversubscription) {
  return "network: {topology: leaf-spine, nodes_per_leaf: 1, oversubscription: " + std::to_string(oversubscription) +
         ", latency: \"7 us\"}\n"
         "node_groups:\n"
         "  - gpu: A100-80\n    nodes: 2\n    gpus_per_node: 8\n"
         "    intra_node: {kind: nvlink, bandwidth: \"300 GB/s\"}\n    nic: {count: 8, bandwidth: \"200 Gbit/s\"}\n";
}

TEST(Topology, IntraNodeRouteIsTwoNvLinkHopsThroughTheFabric) {
  const Cluster c = parse_cluster_spec("A100-80:2x8", catalog());
  const Topology t(c);
  const auto& r = t.route(0, 5);
  ASSERT_EQ(r.size(), 2u);
  for (LinkId l : r) {
    EXPECT_EQ(t.links()[l].cls, LinkClass::NvLink);
    EXPECT_DOUBLE_EQ(t.links()[l].capacity, 300e9 * eff("A100-80"));  // NVLink3 300 GB/s x link_eff
  }
  EXPECT_EQ(t.link_name(r[0]), "n0:0>n0.fabric");
  EXPECT_EQ(t.link_name(r[1]), "n0.fabric>n0:5");
  EXPECT_TRUE(t.route(3, 3).empty());
  EXPECT_TRUE(t.same_node(0, 7));
  EXPECT_FALSE(t.same_node(7, 8));
}

TEST(Topology, InterNodeRoutePassesBothNicsAndOneLeaf) {
  const Cluster c = parse_cluster_spec("A100-80:2x8", catalog());
  const Topology t(c);
  const auto& r = t.route(2, 8 + 6);
  ASSERT_EQ(r.size(), 4u);
  const char* names[] = {"n0:2>n0.nic2", "n0.nic2>leaf0", "leaf0>n1.nic6", "n1.nic6>n1:6"};
  for (std::size_t i = 0; i < r.size(); ++i) {
    EXPECT_EQ(t.link_name(r[i]), names[i]);
    EXPECT_EQ(t.links()[r[i]].cls, LinkClass::Nic);
    EXPECT_DOUBLE_EQ(t.links()[r[i]].capacity, 25e9 * eff("A100-80"));  // HDR 200 Gbit/s x link_eff
  }
}

TEST(Topology, CrossLeafRouteGoesThroughTheSpine) {
  const Cluster c = cluster_from_yaml(two_leaf_yaml(1.0), "");
  const Topology t(c);
  const auto& r = t.route(1, 9);
  ASSERT_EQ(r.size(), 6u);
  EXPECT_EQ(t.link_name(r[2]), "leaf0>spine");
  EXPECT_EQ(t.link_name(r[3]), "spine>leaf1");
  EXPECT_EQ(t.links()[r[2]].cls, LinkClass::Spine);
  EXPECT_EQ(t.links()[r[3]].cls, LinkClass::Spine);
  // Non-oversubscribed: a leaf's uplink carries all of its node's NICs at once (8 x 25 GB/s x link_eff).
  EXPECT_DOUBLE_EQ(t.links()[r[2]].capacity, 8 * 25e9 * eff("A100-80"));
  // GPUs, 2 fabrics, 16 NICs, 2 leaves, 1 spine.
  EXPECT_EQ(t.num_vertices(), 16 + 2 + 16 + 2 + 1);
}

TEST(Topology, OversubscriptionTwoHalvesTheUplink) {
  const Topology t1(cluster_from_yaml(two_leaf_yaml(1.0), "_1"));
  const Topology t2(cluster_from_yaml(two_leaf_yaml(2.0), "_2"));
  ASSERT_EQ(t1.links().size(), t2.links().size());
  int spine_links = 0;
  for (std::size_t i = 0; i < t1.links().size(); ++i) {
    if (t1.links()[i].cls == LinkClass::Spine) {
      ++spine_links;
      EXPECT_DOUBLE_EQ(t2.links()[i].capacity, t1.links()[i].capacity / 2);
    } else {
      EXPECT_DOUBLE_EQ(t2.links()[i].capacity, t1.links()[i].capacity);  // only the uplinks change
    }
  }
  EXPECT_EQ(spine_links, 4);  // up and down for each of 2 leaves
}

TEST(Topology, NicsNoGpuUsesHaveNoLinksButCountInTheLeafUplink) {
  // 2 GPUs per node and 8 NICs: GPU l uses NIC l*8/2, so NICs 0 and 4 carry traffic and six stay idle.
  // nodes_per_leaf 1 puts the nodes under different leaves; each uplink still provisions all 8 NICs.
  const Cluster c = cluster_from_yaml(R"(network: {nodes_per_leaf: 1, oversubscription: 1}
node_groups:
  - {gpu: A100-80, nodes: 2, gpus_per_node: 2, nic: {count: 8, bandwidth: "200 Gbit/s"}}
)",
                                      "");
  const Topology t(c);
  EXPECT_EQ(t.num_vertices(), 4 + 2 * (1 + 2) + 2 + 1);  // GPUs, per node fabric + 2 used NICs, leaves, spine
  EXPECT_EQ(t.link_name(t.route(1, 2)[0]), "n0:1>n0.nic4");
  EXPECT_EQ(t.link_name(t.route(0, 2)[1]), "n0.nic0>leaf0");
  int nic_leaf_links = 0;
  for (std::size_t l = 0; l < t.links().size(); ++l) {
    const std::string name = t.link_name(static_cast<LinkId>(l));
    if (name.find(">leaf") != std::string::npos && name.find(".nic") != std::string::npos) ++nic_leaf_links;
  }
  EXPECT_EQ(nic_leaf_links, 4);  // only the used NICs: 2 per node
  const auto& cross = t.route(0, 2);
  ASSERT_EQ(cross.size(), 6u);
  EXPECT_EQ(t.link_name(cross[2]), "leaf0>spine");
  // 8 NICs x 200 Gbit/s x link_eff, not the 2 reachable ones.
  EXPECT_DOUBLE_EQ(t.links()[cross[2]].capacity, 8 * 25e9 * eff("A100-80"));
}

TEST(Topology, OneNicPcieNodeSharesItsNicLinkAmongAllGpus) {
  const Cluster c = parse_cluster_yaml(test::configs() + "/clusters/hetero-a100-v100.yaml", catalog());
  const Topology t(c);
  // n8 is the first V100 node: 4 GPUs, PCIe 16 GB/s, one 100 Gbit/s NIC.
  const GpuId first = c.nodes[8].first_gpu;
  const GpuId remote = c.nodes[9].first_gpu;
  std::set<LinkId> up_links;
  for (int l = 0; l < 4; ++l) {
    const auto& r = t.route(first + l, remote);
    ASSERT_EQ(r.size(), 4u);
    up_links.insert(r[1]);  // nic>leaf
    EXPECT_EQ(t.link_name(r[1]), "n8.nic0>leaf0");
    EXPECT_DOUBLE_EQ(t.links()[r[1]].capacity, 12.5e9 * eff("V100-32"));
    // And the reverse direction arrives through the same leaf>nic link.
    EXPECT_EQ(t.link_name(t.route(remote, first + l)[2]), "leaf0>n8.nic0");
  }
  EXPECT_EQ(up_links.size(), 1u) << "all four GPUs share one NIC link";
  const auto& intra = t.route(first, first + 3);
  ASSERT_EQ(intra.size(), 2u);
  EXPECT_EQ(t.links()[intra[0]].cls, LinkClass::Pcie);
  EXPECT_DOUBLE_EQ(t.links()[intra[0]].capacity, 16e9 * eff("V100-32"));
  EXPECT_EQ(t.link_name(intra[0]), "n8:0>n8.fabric") << "same-node traffic never detours through the NIC";
}

TEST(Topology, GpusSpreadOverNicsInOrder) {
  // 8 GPUs on 4 NICs: GPU l uses NIC l*4/8, i.e. two GPUs per NIC.
  const Cluster c = parse_cluster_spec("L40S:2x8", catalog());
  ASSERT_EQ(c.groups[0].nic_count, 4);
  const Topology t(c);
  for (int l = 0; l < 8; ++l) {
    const auto& r = t.route(l, 8);
    EXPECT_EQ(t.link_name(r[0]), "n0:" + std::to_string(l) + ">n0.nic" + std::to_string(l / 2));
  }
}

TEST(Topology, EveryRouteHasTheDocumentedStructureAndIsTheGraphsShortestPath) {
  // Mixed node sizes and kinds, 2 nodes per leaf so that some pairs cross the spine.
  const Cluster c = cluster_from_yaml(R"(network: {nodes_per_leaf: 2}
node_groups:
  - {gpu: A100-80, nodes: 2, gpus_per_node: 4}
  - {gpu: T4, nodes: 3, gpus_per_node: 2}
  - {gpu: MI250X, nodes: 1, gpus_per_node: 3}
)",
                                      "");
  const Topology t(c);
  ASSERT_EQ(t.num_gpus(), 4 * 2 + 3 * 2 + 3);
  for (GpuId s = 0; s < t.num_gpus(); ++s) {
    for (GpuId d = 0; d < t.num_gpus(); ++d) {
      const auto& r = t.route(s, d);
      const int ns = c.node_of(s);
      const int nd = c.node_of(d);
      std::size_t expect = 0;
      if (s == d) expect = 0;
      else if (ns == nd) expect = 2;
      else if (ns / 2 == nd / 2) expect = 4;
      else expect = 6;
      ASSERT_EQ(r.size(), expect) << c.gpu_label(s) << " -> " << c.gpu_label(d);
      EXPECT_EQ(t.route_length(s, d), static_cast<int>(expect)) << c.gpu_label(s) << " -> " << c.gpu_label(d);
      if (r.empty()) continue;
      // A connected path from src to dst.
      EXPECT_EQ(ends(t.link_name(r.front())).first, c.gpu_label(s));
      EXPECT_EQ(ends(t.link_name(r.back())).second, c.gpu_label(d));
      for (std::size_t i = 0; i + 1 < r.size(); ++i)
        EXPECT_EQ(t.links()[r[i]].to, t.links()[r[i + 1]].from);
      // The graph's own breadth-first search finds the same path (GPUs sharing a NIC: the fabric's).
      EXPECT_EQ(r, t.searched_route(s, d)) << c.gpu_label(s) << " -> " << c.gpu_label(d);
      const LinkKind kind = c.group_of_node(ns).intra_kind;
      const LinkClass intra = kind == LinkKind::Pcie ? LinkClass::Pcie : LinkClass::NvLink;  // xGMI is NVLink class
      for (std::size_t i = 0; i < r.size(); ++i) {
        const LinkClass cls = t.links()[r[i]].cls;
        if (expect == 2) EXPECT_EQ(cls, intra);
        else if (expect == 6 && (i == 2 || i == 3)) EXPECT_EQ(cls, LinkClass::Spine);
        else EXPECT_EQ(cls, LinkClass::Nic);
      }
    }
  }
}

TEST(Topology, LatencyByPlacement) {
  const Topology t(cluster_from_yaml(two_leaf_yaml(1.0), ""));
  EXPECT_DOUBLE_EQ(t.latency_s(3, 3), 0.0);
  EXPECT_DOUBLE_EQ(t.latency_s(0, 1), 1e-6);  // NVLink hop
  EXPECT_DOUBLE_EQ(t.latency_s(0, 9), 7e-6);  // the configured network latency
  const Topology p(parse_cluster_spec("T4:2x4", catalog()));
  EXPECT_DOUBLE_EQ(p.latency_s(0, 1), 2e-6);  // PCIe hop
}

TEST(Topology, ThousandGpuClusterRoutesAreCachedAndStable) {
  const Cluster c = parse_cluster_spec("A100-80:128x8", catalog());
  Topology t(c);
  ASSERT_EQ(t.num_gpus(), 1024);
  // 128 nodes, 16 per leaf: 8 leaves and a spine.
  EXPECT_EQ(t.num_vertices(), 1024 + 128 + 1024 + 8 + 1);
  std::vector<const std::vector<LinkId>*> first;
  for (GpuId s = 0; s < 1024; s += 61)
    for (GpuId d = 0; d < 1024; ++d) first.push_back(&t.route(s, d));
  const Topology moved = std::move(t);
  std::size_t k = 0;
  for (GpuId s = 0; s < 1024; s += 61) {
    for (GpuId d = 0; d < 1024; ++d, ++k) {
      const auto& r = moved.route(s, d);
      EXPECT_EQ(&r, first[k]) << "cached: the same vector is returned";
      const std::size_t expect = s == d ? 0 : s / 8 == d / 8 ? 2 : s / 128 == d / 128 ? 4 : 6;
      ASSERT_EQ(r.size(), expect);
    }
  }
}

}  // namespace
}  // namespace arachne

namespace arachne {
namespace {

// Routes are built on first request and cached: the route to a GPU must not depend on which routes were
// asked for before it.
TEST(TopologyTest, RoutesDoNotDependOnTheOrderTheyAreAskedFor) {
  Cluster c = parse_cluster_spec("A100-80:10x8,V100-32:3x4", GpuCatalog::load_default());
  c.network.nodes_per_leaf = 3;
  c.groups[0].nic_count = 2;  // GPUs sharing a NIC: equal-length alternatives inside a node
  const Topology ascending(c), scrambled(c);
  const int n = ascending.num_gpus();
  std::vector<std::vector<std::vector<LinkId>>> first(n, std::vector<std::vector<LinkId>>(n));
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b) first[a][b] = ascending.route(a, b);
  for (int a = n - 1; a >= 0; --a)
    for (int k = 0; k < n; ++k) {
      const int b = (k * 7919 + a) % n;
      ASSERT_EQ(scrambled.route(a, b), first[a][b]) << a << " -> " << b;
    }
}

}  // namespace
}  // namespace arachne
