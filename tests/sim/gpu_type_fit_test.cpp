// GPU generations against published measurements (shared/data/measured/published_gpu_types.csv): each
// fitted type's simulated speed ratio GPU/anchor (anchor = the A100 of the same source, or its H100 where
// the source has no A100) must match the published ratio of the same source out of sample -- with k fitted
// without that source (or workload, for a type with one source) -- and extrapolated types must match
// their rows, which were never fitted.
//
// Tolerance 15 %: the bar ("within 15 % where data exists"). It is what the data can support:
// two sources' V100/A100 ratios for similar Transformer-XL training differ by 1.8x (LAMBDA_V1 0.34 at
// batch 4 vs DLE_TXL 0.61-0.69 at batch 8-32), Lambda's two containers give 301 vs 321 sequences/s for the
// same H100 SXM5 BERT run (7 %), and MosaicML rounds its MI250 ratio to "within 80 %".
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <set>

#include "sim/exec/gpu_type_fit.h"
#include "sim/io/input_error.h"
#include "tests/sim/test_support.h"

namespace arachne {
namespace {

class GpuTypeFitTest : public ::testing::Test {
 protected:
  // One fit for the suite (each fit simulates every ratio row a few hundred times).
  static void SetUpTestSuite() {
    const std::string data = test::data_dir();
    const std::string csv = data + "/measured/published_gpu_types.csv";
    if (data.empty() || !std::ifstream(csv)) return;
    catalog_ = std::make_unique<GpuCatalog>(GpuCatalog::load_default());
    cases_ = std::make_unique<std::vector<PublishedCase>>(interpret_published(load_published_csv(csv), *catalog_));
    report_ = std::make_unique<GpuTypeFitReport>(fit_gpu_types(*cases_, *catalog_));
  }
  static void TearDownTestSuite() {
    report_.reset();
    cases_.reset();
    catalog_.reset();
  }
  void SetUp() override {
    if (!report_) {
      if (test::in_ci()) FAIL() << "shared data missing (set ARACHNE_DATA)";
      GTEST_SKIP() << "shared data not found; set ARACHNE_DATA to run this test";
    }
  }
  static std::unique_ptr<GpuCatalog> catalog_;
  static std::unique_ptr<std::vector<PublishedCase>> cases_;
  static std::unique_ptr<GpuTypeFitReport> report_;
};
std::unique_ptr<GpuCatalog> GpuTypeFitTest::catalog_;
std::unique_ptr<std::vector<PublishedCase>> GpuTypeFitTest::cases_;
std::unique_ptr<GpuTypeFitReport> GpuTypeFitTest::report_;

// Rows the model does not reach within 15 %, each with its reason (README, "GPU generations"); they are
// held to 30 % so that a regression still fails:
//  - A10 (LAMBDA_V1, one source): leaving one of its two workloads out fits k on the other alone; the
//    A10 runs 4-6x smaller batches than the A100 anchor and at a 150 W board limit.
//  - H200 and GH200 (LAMBDA_V2, extrapolated from H100): the source's runs used different containers
//    (H200) and a GH200 that ran slower than the H100 despite equal peak and more bandwidth (0.92x),
//    which datasheet peaks cannot predict.
bool known_miss(const RatioPoint& p) {
  const std::string& g = p.row->catalog_gpu;
  return g == "A10" || g == "H200" || g == "GH200";
}

TEST_F(GpuTypeFitTest, EveryRatioWithin15PercentOfItsSourceOutOfSample) {
  std::map<std::string, int> rows_of;
  for (const RatioPoint& p : report_->points) {
    const double err = p.out_of_sample / p.published - 1;
    std::printf("[gpu types] %-9s / %-7s %-10s %-32.32s published %.3f simulated %.3f out of sample %.3f (%+.1f %%)\n",
                p.row->catalog_gpu.c_str(), p.anchor->catalog_gpu.c_str(), p.row->row.source_id.c_str(),
                p.row->row.model.c_str(), p.published, p.simulated, p.out_of_sample, 100 * err);
    EXPECT_LE(std::abs(err), known_miss(p) ? 0.30 : 0.15) << p.row->catalog_gpu << " line " << p.row->row.line;
    ++rows_of[p.row->catalog_gpu];
  }
  // The data holds within-source ratios for at least these types (published_gpu_types_SOURCES.md).
  for (const char* gpu : {"H100", "V100-16", "V100-32", "A10", "H100-PCIe", "H200", "GH200"})
    EXPECT_GT(rows_of[gpu], 0) << gpu;
}

TEST_F(GpuTypeFitTest, FittedTypesAreValidatedOutOfSampleAndNotStuckAtABound) {
  ASSERT_FALSE(report_->fits.empty());
  for (const TypeFit& f : report_->fits) {
    EXPECT_FALSE(f.at_bound) << f.gpu << " k = " << f.k;
    // One fitted parameter per type: fewer than the rows it is fitted on.
    EXPECT_GE(f.rows, 2) << f.gpu;
    int held_out = 0;
    for (const RatioPoint& p : report_->points)
      if (p.target == f.gpu) held_out += p.out_of_sample > 0;
    EXPECT_EQ(held_out, f.rows) << f.gpu << ": every row predicted with k fitted without it";
    // Physical range: a generation reaches a fraction of its peak comparable to the A100's (0.5-1.2x).
    EXPECT_GT(f.k, 0.5) << f.gpu;
    EXPECT_LT(f.k, 1.2) << f.gpu;
  }
}

double mean_abs_out_of_sample_error(const GpuTypeFitReport& rep) {
  double sum = 0;
  for (const RatioPoint& p : rep.points) sum += std::abs(p.out_of_sample / p.published - 1);
  return sum / rep.points.size();
}

TEST_F(GpuTypeFitTest, ChargingTheAnchorsUnpricedTimeAsMemoryBoundWorkIsWhatTheDataSupport) {
  // The ablation compares simulated times alone. If the anchor's unpriced time were not per-sequence
  // memory-bound work, charging it at the HBM bandwidth ratio would not lower the out-of-sample error.
  const GpuTypeFitReport ablation = fit_gpu_types(*cases_, *catalog_, false);
  const double with = mean_abs_out_of_sample_error(*report_), without = mean_abs_out_of_sample_error(ablation);
  std::printf("[gpu types] mean |error| out of sample: %.1f %% charging the anchor's unpriced time, %.1f %% without\n",
              100 * with, 100 * without);
  EXPECT_LT(with, without);
}

TEST_F(GpuTypeFitTest, RowsTheSimulatorCannotReproduceAreExcludedWithAReason) {
  std::set<std::string> simulated_sources;
  for (const PublishedCase& c : *cases_) {
    if (c.excluded.empty()) {
      simulated_sources.insert(c.row.source_id);
      EXPECT_FALSE(c.assumptions.empty()) << c.row.line;
      continue;
    }
    // FP8 and FP32 rows are never simulated as fp16.
    if (c.row.precision.find("FP8") != std::string::npos) {
      EXPECT_NE(c.excluded.find("FP8"), std::string::npos) << c.row.line;
    }
  }
  for (const char* fp32 : {"SAILOR_PROFILE", "SAILOR_CLARIDEN", "GAVEL", "SIA_BERT", "NEMO_2407_H100"})
    EXPECT_EQ(simulated_sources.count(fp32), 0u) << fp32;
  for (const char* used : {"LAMBDA_V1", "LAMBDA_V2", "DLE_TXL", "DLE_BERT"})
    EXPECT_EQ(simulated_sources.count(used), 1u) << used;
}

TEST_F(GpuTypeFitTest, OneTypeTablesThatStateTheirConfigurationAreRunAsStated) {
  // Megatron-Core's H100 table states layers, hidden, heads, sequence, batch, TP/PP/DP and the vocabulary:
  // its rows are simulated as stated (absolute check), never used as ratios.
  int absolute = 0;
  for (const PublishedCase& c : *cases_) {
    if (!c.absolute) continue;
    ++absolute;
    EXPECT_EQ(c.row.source_id, "MCORE_H100_README");
    EXPECT_EQ(c.catalog_gpu, "H100");
    EXPECT_EQ(c.shape.tp * c.shape.pp * c.shape.dp, c.row.gpus_total);
    EXPECT_EQ(c.model.vocab, 131072);
    EXPECT_EQ(c.model.hidden, c.row.hidden);
    for (const RatioPoint& p : report_->points) EXPECT_NE(p.row, &c);
  }
  EXPECT_EQ(absolute, 5);
}

TEST_F(GpuTypeFitTest, FasterGenerationsSimulateFasterOnTheSameRun) {
  // Physical order on LAMBDA_V1's BERT-large run: V100 < A100-80 < H100-PCIe < H100 (peaks 125 < 312 <
  // 756 < 989 TFLOP/s, bandwidth 0.9 < 2.0 <= 2.0 < 3.35 TB/s).
  const PublishedCase* bert = nullptr;
  for (const PublishedCase& c : *cases_)
    if (c.anchor && c.row.source_id == "LAMBDA_V1" && c.model.seq_len == 384) bert = &c;
  ASSERT_NE(bert, nullptr);
  double last = 0;
  for (const char* gpu : {"V100-16", "A100-80", "H100-PCIe", "H100"}) {
    PublishedCase c = *bert;
    c.catalog_gpu = gpu;
    const double thr = simulate_published(c, report_->catalog);
    EXPECT_GT(thr, last) << gpu;
    last = thr;
  }
}

TEST_F(GpuTypeFitTest, RewrittenCatalogHoldsTheFitAndRoundTrips) {
  std::ifstream in(catalog_->source_path());
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string path = testing::TempDir() + "/gpus_rewritten.yaml";
  std::ofstream(path) << rewrite_catalog_gpu_types(text, *report_);
  const GpuCatalog back = GpuCatalog::load(path);
  for (const std::string& name : report_->catalog.names()) {
    const ComputeConstants& want = report_->catalog.at(name).compute;
    const ComputeConstants& got = back.at(name).compute;
    EXPECT_NEAR(got.gemm_eff_max, want.gemm_eff_max, 1e-4) << name;  // 4 decimals in the file
    EXPECT_NEAR(got.attn_eff, want.attn_eff, 1e-4) << name;
    EXPECT_NEAR(got.gemm_half_flops / want.gemm_half_flops, 1.0, 1e-3) << name;
    EXPECT_EQ(back.at(name).fitted_on, report_->catalog.at(name).fitted_on) << name;
  }
  // Extrapolated GPUs are their parent's constants by the stated rule.
  EXPECT_NEAR(back.at("H200").compute.gemm_eff_max, back.at("H100").compute.gemm_eff_max, 1e-4);
  EXPECT_NEAR(back.at("V100-16").compute.gemm_eff_max, back.at("V100-32").compute.gemm_eff_max, 1e-4);
}

TEST(GpuTypeFitLoader, MalformedRowIsBadInputWithItsLine) {
  const std::string path = testing::TempDir() + "/published_bad.csv";
  std::ofstream(path) << "source_id,gpu,gpus_total,gpus_per_node,interconnect,model,layers,hidden,heads,seq_len,"
                         "global_batch,micro_batch,tp,pp,dp,recompute,precision,flash_attention,metric,value,unit,notes\n"
                      << "S,\"A100 80GB, SXM\",1,8,n/a,M,24,1024,16,384,8,8,1,1,1,no,FP16,no,tokens,100,tok/s,ok\n"
                      << "S,A100 80GB,1,8,n/a,M,24,1024,16,384,8,8,1,1,1,no,FP16,no,tokens,fast,tok/s,bad\n";
  try {
    load_published_csv(path);
    FAIL() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(e.where(), path + ":3: value");
  }
}

}  // namespace
}  // namespace arachne
