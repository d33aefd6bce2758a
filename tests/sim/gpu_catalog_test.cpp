// The bundled GPU catalog against the published figures (shared/data/README.md table), and catalog errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "sim/hw/gpu.h"
#include "sim/io/input_error.h"
#include "test_support.h"

namespace arachne {
namespace {

std::string catalog_path() { return test::configs() + "/gpus.yaml"; }

// Writes temporary catalog files named after the running test; removes them when the test ends.
class GpuCatalogTest : public ::testing::Test {
 protected:
  std::string write_temp(const std::string& text) {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    const std::filesystem::path p =
        std::filesystem::temp_directory_path() / ("arachne_gpu_" + std::string(info->name()) + "_" +
                                                  std::to_string(files_.size()) + "_" + std::to_string(::getpid()) + ".yaml");
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

// 1-based number of the first line of `text` containing `needle`.
int line_of(const std::string& text, const std::string& needle) {
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n)
    if (line.find(needle) != std::string::npos) return n;
  return -1;
}

// Catches the InputError thrown by loading `text` as a catalog.
InputError load_error(const std::string& path) {
  try {
    GpuCatalog::load(path);
  } catch (const InputError& e) {
    return e;
  }
  ADD_FAILURE() << "no InputError for " << path;
  return InputError("", "");
}

const char* kGoodEntry = R"(  - name: G1
    peak_bf16: "100 TFLOP/s"
    peak_fp16: "100 TFLOP/s"
    memory: "40 GB"
    hbm_bandwidth: "1000 GB/s"
    default_node: {gpus_per_node: 4, intra_node: {kind: nvlink, bandwidth: "200 GB/s"}, nic: {count: 2, bandwidth: "100 Gbit/s"}}
    compute: {gemm_eff_max: 0.7, gemm_half_flops: 1.0e9, attn_eff: 0.4, mem_eff: 0.6, kernel_overhead: "4 us", link_eff: 0.9, collective_overhead: "20 us"}
)";

struct Published {
  const char* name;
  double tflops;    // dense bf16 (fp16 where the GPU has no bf16)
  double mem_gb;    // decimal GB
  double hbm_gbs;   // GB/s
  bool bf16;
};

// shared/data/README.md, "Published hardware figures" (vendor datasheets).
constexpr Published kPublished[] = {
    {"P100", 21, 16, 732, false},      {"V100-16", 125, 16, 900, false}, {"V100-32", 125, 32, 900, false},
    {"T4", 65, 16, 320, false},        {"A10", 125, 24, 600, true},      {"A10G", 70, 24, 600, true},
    {"L4", 121, 24, 300, true},        {"L40S", 362, 48, 864, true},     {"A100-40", 312, 40, 1555, true},
    {"A100-80", 312, 80, 2039, true},  {"H100", 989, 80, 3350, true},    {"H100-PCIe", 756, 80, 2000, true},
    {"H200", 989, 141, 4800, true},    {"MI250X", 191, 64, 1600, true},  {"MI300X", 1307, 192, 5300, true},
};

TEST_F(GpuCatalogTest, BundledCatalogHasEveryDesignGpuWithPublishedFigures) {
  const GpuCatalog cat = GpuCatalog::load(catalog_path());
  for (const Published& p : kPublished) {
    SCOPED_TRACE(p.name);
    ASSERT_TRUE(cat.contains(p.name));
    const GpuSpec& g = cat.at(p.name);
    EXPECT_EQ(g.name, p.name);
    // The table rounds MI250X's 383/2 = 191.5 TFLOP/s to "~191": allow 0.5 %; the rest are exact.
    EXPECT_NEAR(g.peak_for("bf16"), p.tflops * 1e12, p.tflops * 1e12 * 0.005);
    EXPECT_NEAR(g.peak_fp16, p.tflops * 1e12, p.tflops * 1e12 * 0.005);
    EXPECT_DOUBLE_EQ(g.memory_bytes, p.mem_gb * 1e9);
    EXPECT_DOUBLE_EQ(g.hbm_bw, p.hbm_gbs * 1e9);
    EXPECT_EQ(g.has_bf16(), p.bf16);
    // Achieved fraction of nominal link bandwidth: positive and never above nominal. (It is fitted against
    // vTrain's 150 GB/s NVLink figure, half of A100's 300 GB/s, so it may sit at 1.)
    EXPECT_GT(g.compute.link_eff, 0.0);
    EXPECT_LE(g.compute.link_eff, 1.0);
    EXPECT_GE(g.node.gpus_per_node, 1);
    EXPECT_GE(g.node.nics, 1);
  }
  EXPECT_EQ(cat.names().front(), "P100");  // file order
  EXPECT_EQ(cat.source_path(), catalog_path());
}

TEST_F(GpuCatalogTest, GpusWithoutBf16RunBf16AtTheirFp16Rate) {
  const GpuCatalog cat = GpuCatalog::load(catalog_path());
  for (const char* name : {"P100", "V100-16", "V100-32", "T4"}) {
    const GpuSpec& g = cat.at(name);
    EXPECT_FALSE(g.has_bf16()) << name;
    EXPECT_DOUBLE_EQ(g.peak_for("bf16"), g.peak_fp16) << name;
  }
  EXPECT_DOUBLE_EQ(cat.at("V100-32").peak_for("bf16"), 125e12);
  EXPECT_THROW(cat.at("V100-32").peak_for("fp8"), std::invalid_argument);
}

TEST_F(GpuCatalogTest, DefaultNodesMatchTheReferenceSystems) {
  const GpuCatalog cat = GpuCatalog::load(catalog_path());
  // DGX A100: 8 GPUs on NVSwitch at 300 GB/s per direction, 8x HDR 200 Gbit/s = 25 GB/s each.
  const NodeDefaults& a = cat.at("A100-80").node;
  EXPECT_EQ(a.gpus_per_node, 8);
  EXPECT_EQ(a.intra_kind, LinkKind::NvLink);
  EXPECT_DOUBLE_EQ(a.intra_bw, 300e9);
  EXPECT_EQ(a.nics, 8);
  EXPECT_DOUBLE_EQ(a.nic_bw, 25e9);
  // DGX-1 V100: NVLink2 150 GB/s, 4x EDR 100 Gbit/s.
  EXPECT_DOUBLE_EQ(cat.at("V100-32").node.intra_bw, 150e9);
  EXPECT_EQ(cat.at("V100-32").node.nics, 4);
  // DGX H100: NVLink4 450 GB/s, 8x NDR 400 Gbit/s.
  EXPECT_DOUBLE_EQ(cat.at("H100").node.intra_bw, 450e9);
  EXPECT_DOUBLE_EQ(cat.at("H100").node.nic_bw, 50e9);
  EXPECT_EQ(cat.at("MI300X").node.intra_kind, LinkKind::Xgmi);
  EXPECT_DOUBLE_EQ(cat.at("MI300X").node.intra_bw, 448e9);
  EXPECT_EQ(cat.at("MI250X").node.gpus_per_node, 8);  // 4 packages = 8 GCDs
  for (const char* pcie : {"T4", "A10", "A10G", "L4", "L40S", "H100-PCIe"})
    EXPECT_EQ(cat.at(pcie).node.intra_kind, LinkKind::Pcie) << pcie;
}

TEST_F(GpuCatalogTest, OnlyA100_80IsMeasuredTheRestSayWhereTheyComeFrom) {
  // A100-80 is calibrated on its own runs; every other GPU names the GPU its constants come from, and
  // following those links always ends at A100-80 (no cycle, no dangling name).
  const GpuCatalog cat = GpuCatalog::load(catalog_path());
  for (const std::string& name : cat.names()) {
    const GpuSpec& g = cat.at(name);
    if (name == "A100-80") {
      EXPECT_TRUE(g.calibrated_from.empty());
      continue;
    }
    std::string at = name;
    for (int hops = 0; at != "A100-80" && hops < 10; ++hops) {
      ASSERT_FALSE(cat.at(at).calibrated_from.empty()) << name << " via " << at;
      at = cat.at(at).calibrated_from;
    }
    EXPECT_EQ(at, "A100-80") << name;
  }
  // The GPUs with published within-source ratios are fitted, not extrapolated.
  for (const char* fitted : {"H100", "V100-32", "A10"}) EXPECT_FALSE(cat.at(fitted).fitted_on.empty()) << fitted;
}

TEST_F(GpuCatalogTest, FittedOnNeedsAListAndTheGpuItIsRelativeTo) {
  const std::string base = std::string("gpus:\n") + kGoodEntry;
  for (const char* bad : {"    calibrated_from: G1\n    fitted_on: LAMBDA_V1\n", "    calibrated_from: G1\n    fitted_on: []\n",
                          "    fitted_on: [LAMBDA_V1]\n"}) {
    const InputError e = load_error(write_temp(base + bad));
    EXPECT_NE(e.where().find(": G1.fitted_on"), std::string::npos) << bad << e.where();
  }
}

TEST_F(GpuCatalogTest, EveryComputeBlockIsOneFlowStyleLine) {
  // scripts/calibrate.sh rewrites `compute:` lines in place: each must be a complete {...} on one line.
  std::ifstream in(catalog_path());
  std::string line;
  int blocks = 0;
  while (std::getline(in, line)) {
    const auto pos = line.find("compute:");
    if (pos == std::string::npos || line.find('#') < pos) continue;
    ++blocks;
    EXPECT_NE(line.find('{'), std::string::npos) << line;
    EXPECT_NE(line.find('}'), std::string::npos) << line;
  }
  EXPECT_EQ(blocks, static_cast<int>(GpuCatalog::load(catalog_path()).names().size()));
}

TEST_F(GpuCatalogTest, ParsesAnEntryWithUnitsAndLinkKinds) {
  const std::string path = write_temp(std::string("version: 1\ngpus:\n") + kGoodEntry);
  const GpuCatalog cat = GpuCatalog::load(path);
  const GpuSpec& g = cat.at("G1");
  EXPECT_DOUBLE_EQ(g.peak_bf16, 100e12);
  EXPECT_DOUBLE_EQ(g.memory_bytes, 40e9);
  EXPECT_DOUBLE_EQ(g.node.nic_bw, 12.5e9);  // 100 Gbit/s / 8
  EXPECT_DOUBLE_EQ(g.compute.kernel_overhead_s, 4e-6);
  EXPECT_DOUBLE_EQ(g.compute.link_eff, 0.9);
  EXPECT_DOUBLE_EQ(g.compute.gemm_half_flops, 1e9);
  EXPECT_STREQ(to_string(LinkKind::NvLink), "nvlink");
  EXPECT_STREQ(to_string(LinkKind::Pcie), "pcie");
  EXPECT_STREQ(to_string(LinkKind::Xgmi), "xgmi");
  EXPECT_EQ(parse_link_kind("xgmi"), LinkKind::Xgmi);
  EXPECT_THROW(cat.at("nope"), std::out_of_range);
}

TEST_F(GpuCatalogTest, BareNumberIsAnErrorAtItsLine) {
  std::string text = std::string("version: 1\ngpus:\n") + kGoodEntry;
  text.replace(text.find("\"1000 GB/s\""), 11, "1000");
  const std::string path = write_temp(text);
  const InputError e = load_error(path);
  EXPECT_EQ(e.where(), path + ":" + std::to_string(line_of(text, "hbm_bandwidth")) + ": G1.hbm_bandwidth");
  EXPECT_NE(e.reason().find("missing unit"), std::string::npos) << e.reason();
}

TEST_F(GpuCatalogTest, UnknownLinkKindMissingFieldAndDuplicateAreErrors) {
  {
    std::string text = std::string("gpus:\n") + kGoodEntry;
    text.replace(text.find("kind: nvlink"), 12, "kind: infiniband");
    const std::string path = write_temp(text);
    const InputError e = load_error(path);
    EXPECT_EQ(e.where(), path + ":" + std::to_string(line_of(text, "default_node")) +
                             ": G1.default_node.intra_node.kind");
    EXPECT_NE(e.reason().find("unknown link kind 'infiniband'"), std::string::npos) << e.reason();
  }
  {
    std::string text = std::string("gpus:\n") + kGoodEntry;
    text.erase(text.find("    memory:"), std::string("    memory: \"40 GB\"\n").size());
    const std::string path = write_temp(text);
    const InputError e = load_error(path);
    EXPECT_NE(e.where().find(": G1.memory"), std::string::npos) << e.where();
    EXPECT_EQ(e.reason(), "missing field");
  }
  {
    const std::string text = std::string("gpus:\n") + kGoodEntry + kGoodEntry;
    const std::string path = write_temp(text);
    const InputError e = load_error(path);
    // The second "name: G1" is on line 2 + 7 + 1 (entry of 7 lines after the 1-line header).
    EXPECT_EQ(e.where(), path + ":" + std::to_string(1 + 7 + 1) + ": name");
    EXPECT_NE(e.reason().find("duplicate GPU 'G1'"), std::string::npos) << e.reason();
    EXPECT_NE(e.reason().find("line 2"), std::string::npos) << e.reason();
  }
  {
    std::string text = std::string("gpus:\n") + kGoodEntry + "    calibrated_from: Z9\n";
    const std::string path = write_temp(text);
    EXPECT_NE(load_error(path).reason().find("unknown GPU 'Z9'"), std::string::npos);
  }
  {
    std::string text = std::string("gpus:\n") + kGoodEntry + "    colour: green\n";
    const std::string path = write_temp(text);
    EXPECT_NE(load_error(path).reason().find("unknown field"), std::string::npos);
  }
  EXPECT_THROW(GpuCatalog::load("/nonexistent/gpus.yaml"), InputError);
}

TEST_F(GpuCatalogTest, ConfigsDirHonoursTheEnvironment) {
  const char* old = std::getenv("ARACHNE_CONFIGS");
  const std::string saved = old ? old : "";
  ::unsetenv("ARACHNE_CONFIGS");
  EXPECT_EQ(configs_dir(), std::string(ARACHNE_SOURCE_DIR) + "/configs");
  ::setenv("ARACHNE_CONFIGS", "/somewhere/else", 1);
  EXPECT_EQ(configs_dir(), "/somewhere/else");
  if (old) ::setenv("ARACHNE_CONFIGS", saved.c_str(), 1); else ::unsetenv("ARACHNE_CONFIGS");
  EXPECT_TRUE(GpuCatalog::load_default().contains("A100-80"));
}

}  // namespace
}  // namespace arachne
