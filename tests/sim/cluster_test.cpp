// Clusters from YAML files and spec strings: GPU numbering, catalog defaults, errors with 1-based lines.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "sim/hw/cluster.h"
#include "sim/io/input_error.h"
#include "test_support.h"

namespace arachne {
namespace {

const GpuCatalog& catalog() {
  static const GpuCatalog cat = GpuCatalog::load(test::configs() + "/gpus.yaml");
  return cat;
}

// Writes temporary cluster files named after the running test; removes them when the test ends.
class TempFiles : public ::testing::Test {
 protected:
  std::string write_temp(const std::string& text, const std::string& suffix = "") {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    const std::filesystem::path p =
        std::filesystem::temp_directory_path() /
        ("arachne_cluster_" + std::string(info->name()) + suffix + "_" + std::to_string(files_.size()) + "_" +
         std::to_string(::getpid()) + ".yaml");
    std::ofstream(p) << text;
    files_.push_back(p);
    return p.string();
  }
  void TearDown() override {
    for (const auto& f : files_) std::filesystem::remove(f);
  }

 private:
  std::vector<std::filesystem::path> files_;
};
class ClusterYaml : public TempFiles {};
class ClusterLoad : public TempFiles {};

int line_of(const std::string& text, const std::string& needle, int occurrence = 1) {
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n)
    if (line.find(needle) != std::string::npos && --occurrence == 0) return n;
  return -1;
}

template <class F>
InputError input_error(F f) {
  try {
    f();
  } catch (const InputError& e) {
    return e;
  }
  ADD_FAILURE() << "expected an InputError";
  return InputError("", "");
}

// DESIGN.md's example, verbatim.
const char* kDesignExample = R"(name: selene-like
network: {topology: leaf-spine, nodes_per_leaf: 16, oversubscription: 1.0, latency: "5 us"}
node_groups:
  - gpu: A100-80
    nodes: 8
    gpus_per_node: 8
    intra_node: {kind: nvlink, bandwidth: "300 GB/s"}
    nic: {count: 8, bandwidth: "200 Gbit/s"}
  - gpu: V100-32
    nodes: 4
    gpus_per_node: 4
    intra_node: {kind: pcie, bandwidth: "16 GB/s"}
    nic: {count: 1, bandwidth: "100 Gbit/s"}
)";

TEST_F(ClusterYaml, DesignExampleIsAcceptedAsWritten) {
  const Cluster c = parse_cluster_yaml(write_temp(kDesignExample), catalog());
  EXPECT_EQ(c.name, "selene-like");
  EXPECT_EQ(c.total_gpus(), 8 * 8 + 4 * 4);
  ASSERT_EQ(c.nodes.size(), 12u);
  ASSERT_EQ(c.groups.size(), 2u);
  EXPECT_EQ(c.network.topology, "leaf-spine");
  EXPECT_EQ(c.network.nodes_per_leaf, 16);
  EXPECT_DOUBLE_EQ(c.network.oversubscription, 1.0);
  EXPECT_DOUBLE_EQ(c.network.latency_s, 5e-6);
  const NodeGroup& v = c.groups[1];
  EXPECT_EQ(v.gpu, "V100-32");
  EXPECT_EQ(v.intra_kind, LinkKind::Pcie);
  EXPECT_DOUBLE_EQ(v.intra_bw, 16e9);
  EXPECT_EQ(v.nic_count, 1);
  EXPECT_DOUBLE_EQ(v.nic_bw, 12.5e9);  // 100 Gbit/s
  EXPECT_DOUBLE_EQ(c.groups[0].nic_bw, 25e9);
  // Nodes in listing order: n0..n7 A100 (8 GPUs each), n8..n11 V100 (4 each).
  EXPECT_EQ(c.nodes[8].first_gpu, 64);
  EXPECT_EQ(c.nodes[8].group, 1);
  EXPECT_EQ(c.node_of(63), 7);
  EXPECT_EQ(c.node_of(64), 8);
  EXPECT_EQ(c.node_of(79), 11);
  EXPECT_EQ(c.local_of(67), 3);
  EXPECT_EQ(c.gpu_label(64), "n8:0");
  EXPECT_EQ(c.gpu_label(13), "n1:5");
  EXPECT_EQ(c.gpu_id(8, 3), 67);
  EXPECT_EQ(c.gpu_spec(70).name, "V100-32");
  EXPECT_THROW(c.node_of(80), std::out_of_range);
  EXPECT_THROW(c.node_of(-1), std::out_of_range);
}

TEST_F(ClusterYaml, NodeOfAgreesWithALinearScan) {
  const Cluster c = parse_cluster_spec("A100-80:3x8,T4:5x1,V100-32:2x4,L4:1x3", catalog());
  for (GpuId g = 0; g < c.total_gpus(); ++g) {
    int expect = -1;
    for (const Node& n : c.nodes)
      if (g >= n.first_gpu && g < n.first_gpu + n.gpus) expect = n.id;
    EXPECT_EQ(c.node_of(g), expect) << g;
  }
}

TEST_F(ClusterYaml, MissingLinkDetailsComeFromTheCatalogDefaultNode) {
  const Cluster c = parse_cluster_yaml(write_temp(R"(
node_groups:
  - {gpu: H100, nodes: 2}
  - gpu: V100-32
    nodes: 1
    nic: {bandwidth: "25 Gbit/s"}
)"),
                                       catalog());
  const NodeDefaults& h = catalog().at("H100").node;
  EXPECT_EQ(c.groups[0].gpus_per_node, h.gpus_per_node);
  EXPECT_DOUBLE_EQ(c.groups[0].intra_bw, h.intra_bw);
  EXPECT_EQ(c.groups[0].nic_count, h.nics);
  EXPECT_DOUBLE_EQ(c.groups[0].nic_bw, h.nic_bw);
  // Partial nic block: bandwidth given, count from the default node.
  EXPECT_EQ(c.groups[1].nic_count, catalog().at("V100-32").node.nics);
  EXPECT_DOUBLE_EQ(c.groups[1].nic_bw, 25e9 / 8);
  EXPECT_EQ(c.total_gpus(), 2 * h.gpus_per_node + catalog().at("V100-32").node.gpus_per_node);
  // The name defaults to the file's stem; default network is one non-oversubscribed leaf/spine.
  EXPECT_EQ(c.network.oversubscription, 1.0);
}

TEST_F(ClusterYaml, ClusterLocalGpuTypes) {
  const Cluster c = parse_cluster_yaml(write_temp(R"(version: 1
name: local
gpus:
  - name: X1
    peak_bf16: "200 TFLOP/s"
    peak_fp16: "200 TFLOP/s"
    memory: "48 GB"
    hbm_bandwidth: "1 TB/s"
    default_node: {gpus_per_node: 2, intra_node: {kind: pcie, bandwidth: "32 GB/s"}, nic: {count: 1, bandwidth: "50 Gbit/s"}}
    calibrated_from: A100-80
node_groups:
  - {gpu: X1, nodes: 3}
  - {gpu: A100-80, nodes: 1, gpus_per_node: 4}
)"),
                                       catalog());
  ASSERT_TRUE(c.catalog.contains("X1"));
  EXPECT_FALSE(catalog().contains("X1"));  // the shared catalog is untouched
  const GpuSpec& x = c.catalog.at("X1");
  EXPECT_DOUBLE_EQ(x.hbm_bw, 1e12);
  // Without `compute:` the constants are those of the GPU it is calibrated from.
  EXPECT_DOUBLE_EQ(x.compute.gemm_eff_max, catalog().at("A100-80").compute.gemm_eff_max);
  EXPECT_DOUBLE_EQ(x.compute.link_eff, catalog().at("A100-80").compute.link_eff);
  EXPECT_EQ(c.total_gpus(), 3 * 2 + 4);
  EXPECT_EQ(c.gpu_spec(0).name, "X1");
  EXPECT_EQ(c.gpu_spec(6).name, "A100-80");
}

TEST_F(ClusterYaml, BareNumberBandwidthIsAnErrorAtItsOneBasedLine) {
  std::string text = kDesignExample;
  text.replace(text.find("\"16 GB/s\""), 9, "300");  // "bandwidth: 300" in the second group
  const std::string path = write_temp(text);
  const InputError e = input_error([&] { parse_cluster_yaml(path, catalog()); });
  EXPECT_EQ(e.where(), path + ":" + std::to_string(line_of(text, "kind: pcie")) +
                           ": node_groups[1].intra_node.bandwidth");
  EXPECT_NE(e.reason().find("missing unit"), std::string::npos) << e.reason();
}

TEST_F(ClusterYaml, UnknownGpuAndOtherErrorsNameTheirLine) {
  {
    std::string text = kDesignExample;
    text.replace(text.find("V100-32"), 7, "Z100");
    const std::string path = write_temp(text);
    const InputError e = input_error([&] { parse_cluster_yaml(path, catalog()); });
    EXPECT_EQ(e.where(), path + ":" + std::to_string(line_of(text, "Z100")) + ": node_groups[1].gpu");
    EXPECT_NE(e.reason().find("unknown GPU type 'Z100' (known: "), std::string::npos) << e.reason();
    EXPECT_NE(e.reason().find("A100-80"), std::string::npos) << e.reason();
  }
  {
    std::string text = kDesignExample;
    text.replace(text.find("nodes: 4"), 8, "nodes: four");
    const std::string path = write_temp(text);
    const InputError e = input_error([&] { parse_cluster_yaml(path, catalog()); });
    EXPECT_EQ(e.where(), path + ":" + std::to_string(line_of(text, "nodes: four")) + ": node_groups[1].nodes");
  }
  {
    std::string text = kDesignExample;
    text.replace(text.find("kind: pcie"), 10, "kind: token-ring");
    const std::string path = write_temp(text);
    const InputError e = input_error([&] { parse_cluster_yaml(path, catalog()); });
    EXPECT_NE(e.reason().find("unknown link kind"), std::string::npos);
  }
  {
    const std::string path = write_temp("name: x\nnode_groups: []\n");
    EXPECT_NE(input_error([&] { parse_cluster_yaml(path, catalog()); }).where().find(":2: node_groups"),
              std::string::npos);
  }
  {
    const std::string path = write_temp("node_groups:\n  - {gpu: A100-80, nodes: 1, colour: red}\n");
    const InputError e = input_error([&] { parse_cluster_yaml(path, catalog()); });
    EXPECT_EQ(e.where(), path + ":2: node_groups[0].colour");
  }
  {
    const std::string path = write_temp("node_groups:\n  - {gpu: A100-80, nodes: 1\n");  // YAML syntax error
    EXPECT_NE(input_error([&] { parse_cluster_yaml(path, catalog()); }).reason().find("YAML"), std::string::npos);
  }
}

TEST(ClusterSpec, ParsesGroupsWithCatalogDefaultNodes) {
  const std::string spec = "A100-80:4x8,V100-32:8x4,T4:16x1";
  const Cluster c = parse_cluster_spec(spec, catalog());
  EXPECT_EQ(c.source, spec);
  EXPECT_EQ(c.total_gpus(), 4 * 8 + 8 * 4 + 16 * 1);
  ASSERT_EQ(c.nodes.size(), 4u + 8u + 16u);
  ASSERT_EQ(c.groups.size(), 3u);
  // GPUs per node from the spec; links from the default node.
  const NodeDefaults& v = catalog().at("V100-32").node;
  EXPECT_EQ(c.groups[1].gpus_per_node, 4);
  EXPECT_EQ(c.groups[1].intra_kind, v.intra_kind);
  EXPECT_DOUBLE_EQ(c.groups[1].intra_bw, v.intra_bw);
  EXPECT_EQ(c.groups[1].nic_count, v.nics);
  EXPECT_DOUBLE_EQ(c.groups[1].nic_bw, v.nic_bw);
  EXPECT_EQ(c.nodes[4].group, 1);
  EXPECT_EQ(c.nodes.back().gpus, 1);
  EXPECT_EQ(c.gpu_label(c.total_gpus() - 1), "n27:0");
  // One leaf/spine network without oversubscription.
  EXPECT_DOUBLE_EQ(c.network.oversubscription, 1.0);
  // A node larger than the default node is allowed: the spec's size wins.
  EXPECT_EQ(parse_cluster_spec("T4:2x16", catalog()).total_gpus(), 32);
  EXPECT_EQ(parse_cluster_spec(" A100-80 : 1x8 ", catalog()).total_gpus(), 8);
}

TEST(ClusterSpec, Errors) {
  const InputError e = input_error([] { parse_cluster_spec("A100-80:4x8,Z100:2x8", catalog()); });
  EXPECT_EQ(e.where(), "A100-80:4x8,Z100:2x8");
  EXPECT_NE(e.reason().find("unknown GPU type 'Z100' (known: "), std::string::npos) << e.reason();
  for (const char* bad : {"", "A100-80", "A100-80:4", "A100-80:4x", "A100-80:x8", "A100-80:0x8", "A100-80:2x0",
                          "A100-80:4x8,", "A100-80:-1x8", "A100-80:2.5x8", "A100-80:4y8"}) {
    const InputError err = input_error([&] { parse_cluster_spec(bad, catalog()); });
    EXPECT_EQ(err.where(), *bad ? std::string(bad) : "cluster spec ''");  // never an empty where
  }
}

TEST_F(ClusterLoad, FileBundledNameOrSpec) {
  const std::string path = write_temp(kDesignExample);
  EXPECT_EQ(load_cluster(path, catalog()).total_gpus(), 80);
  const Cluster tiny = load_cluster("tiny-hetero", catalog());
  EXPECT_EQ(tiny.total_gpus(), 4 + 2 * 2);
  EXPECT_EQ(tiny.nodes.size(), 3u);
  EXPECT_EQ(load_cluster("A100-80:2x8", catalog()).total_gpus(), 16);
  EXPECT_EQ(input_error([] { load_cluster("/no/such/cluster.yaml", catalog()); }).where(), "/no/such/cluster.yaml");
  const InputError e = input_error([] { load_cluster("selene-lik", catalog()); });
  EXPECT_NE(e.reason().find("selene-like"), std::string::npos) << "lists bundled names: " << e.reason();
}

TEST_F(ClusterLoad, EveryBundledClusterLoads) {
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(test::configs() + "/clusters")) {
    if (entry.path().extension() != ".yaml") continue;
    SCOPED_TRACE(entry.path().string());
    const Cluster c = parse_cluster_yaml(entry.path().string(), catalog());
    EXPECT_GT(c.total_gpus(), 0);
    EXPECT_EQ(c.name, entry.path().stem().string()) << "the name matches the file name";
    ++count;
  }
  EXPECT_GE(count, 7);
  EXPECT_EQ(load_cluster("hetero-a100-v100", catalog()).total_gpus(), 80);
  EXPECT_EQ(load_cluster("selene-like", catalog()).total_gpus(), 32 * 8);
  EXPECT_EQ(load_cluster("tiny-a100-2x4", catalog()).total_gpus(), 8);
}

TEST_F(ClusterYaml, ToYamlRoundTrips) {
  const Cluster a = parse_cluster_yaml(write_temp(kDesignExample, "_in"), catalog());
  const std::string text = a.to_yaml();
  const Cluster b = parse_cluster_yaml(write_temp(text, "_out"), GpuCatalog());  // self-contained: no catalog
  EXPECT_EQ(b.name, a.name);
  EXPECT_EQ(b.total_gpus(), a.total_gpus());
  ASSERT_EQ(b.groups.size(), a.groups.size());
  for (std::size_t i = 0; i < a.groups.size(); ++i) {
    EXPECT_EQ(b.groups[i].gpu, a.groups[i].gpu);
    EXPECT_EQ(b.groups[i].gpus_per_node, a.groups[i].gpus_per_node);
    EXPECT_EQ(b.groups[i].intra_kind, a.groups[i].intra_kind);
    EXPECT_NEAR(b.groups[i].intra_bw, a.groups[i].intra_bw, a.groups[i].intra_bw * 1e-12);
    EXPECT_EQ(b.groups[i].nic_count, a.groups[i].nic_count);
    EXPECT_NEAR(b.groups[i].nic_bw, a.groups[i].nic_bw, a.groups[i].nic_bw * 1e-12);
    const GpuSpec& ga = a.catalog.at(a.groups[i].gpu);
    const GpuSpec& gb = b.catalog.at(b.groups[i].gpu);
    EXPECT_NEAR(gb.peak_fp16, ga.peak_fp16, ga.peak_fp16 * 1e-12);
    EXPECT_EQ(gb.has_bf16(), ga.has_bf16());
    EXPECT_NEAR(gb.compute.kernel_overhead_s, ga.compute.kernel_overhead_s, 1e-18);
    EXPECT_EQ(gb.calibrated_from, ga.calibrated_from);
  }
  EXPECT_NEAR(b.network.latency_s, a.network.latency_s, 1e-18);
  EXPECT_EQ(b.network.nodes_per_leaf, a.network.nodes_per_leaf);
}

TEST_F(ClusterYaml, TextFormParsesLikeTheFileAndNamesItsSourceInErrors) {
  const Cluster a = parse_cluster_yaml(write_temp(kDesignExample, "_in"), catalog());
  const Cluster b = parse_cluster_yaml_text(a.to_yaml(), "dataset config 3", GpuCatalog());
  const auto body = [](const std::string& yaml) { return yaml.substr(yaml.find('\n')); };  // after "# ... from SOURCE"
  EXPECT_EQ(body(b.to_yaml()), body(a.to_yaml()));
  EXPECT_EQ(b.source, "dataset config 3");
  try {
    parse_cluster_yaml_text("version: 1\nnode_groups: [\n", "dataset config 4", catalog());
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(e.where().find("dataset config 4"), std::string::npos) << e.where();
  }
}

}  // namespace
}  // namespace arachne
