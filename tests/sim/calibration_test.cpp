// Calibration against measured Megatron iterations (vTrain's A100 runs in shared/data/measured/).
// The bars: single-node MAPE <= 12 % out of sample (two-fold: constants fitted on one half, scored on the
// other), multi-node MAPE <= 15 % with the catalog's constants (fitted on single-node runs only), and per
// job the simulator must order the measured configurations like the measurements (mean Spearman >= 0.8).
// The targets (both MAPEs <= 8 % out of sample) are the disabled cross-validation test below: it
// does not pass yet (README, "Calibration"). vTrain reports 8.37 % and 14.73 % for itself (Bang et al.,
// MICRO'24).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <numeric>

#include "sim/exec/calibration.h"
#include "sim/io/input_error.h"
#include "tests/sim/test_support.h"

namespace arachne {
namespace {

double mean(const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0) / v.size(); }

// Reduced sizes (test::reduced_sizes(), the sanitized build): every fourth run and 40 evaluations per fit
// instead of 250; the 12 % bar needs the full fit, so it checks only that each fit lowers the held-out
// MAPE of the neutral starting constants.
TEST(Calibration, SingleNodeTwoFoldOutOfSampleMape) {
  ARACHNE_REQUIRE_DATA(data);
  const auto runs = load_vtrain_csv(data + "/measured/vtrain_a100_single_node.csv");
  ASSERT_EQ(runs.size(), 1440u);
  const bool reduced = test::reduced_sizes();
  const size_t stride = reduced ? 4 : 1;
  const int evaluations = reduced ? 40 : 250;
  std::vector<MeasuredRun> fold[2];
  for (size_t i = 0; i < runs.size(); i += stride) fold[(i / stride) % 2].push_back(runs[i]);
  // Start from the neutral defaults, not the catalog's fitted constants, so nothing is learned from the
  // held-out half.
  GpuSpec start = GpuCatalog::load_default().at("A100-80");
  start.compute = ComputeConstants{};
  double held_out[2];
  for (int k = 0; k < 2; ++k) {
    const CalibrationFit fit = fit_compute_constants(fold[k], start, evaluations);
    GpuSpec g = start;
    g.compute = fit.constants;
    held_out[k] = calibration_mape(fold[1 - k], g);
    std::printf("[calibration] fold %d: fitted on %zu runs (MAPE %.2f %%), held-out MAPE %.2f %% on %zu runs\n",
                k, fold[k].size(), 100 * fit.mape, 100 * held_out[k], fold[1 - k].size());
    if (reduced) {
      EXPECT_LT(held_out[k], calibration_mape(fold[1 - k], start)) << "fold " << k;
    }
  }
  const double mape = (held_out[0] + held_out[1]) / 2;
  std::printf("[calibration] single-node two-fold MAPE: %.2f %%%s\n", 100 * mape, reduced ? " (reduced sizes)" : "");
  if (!reduced) {
    EXPECT_LE(mape, 0.12);
  }
}

TEST(Calibration, MultiNodeOutOfSampleMapeWithCatalogConstants) {
  ARACHNE_REQUIRE_DATA(data);
  const auto runs = load_vtrain_csv(data + "/measured/vtrain_a100_multi_node.csv");
  ASSERT_EQ(runs.size(), 109u);
  const GpuSpec g = GpuCatalog::load_default().at("A100-80");
  ASSERT_TRUE(g.calibrated_from.empty()) << "A100-80 is the measured GPU";
  const double mape = calibration_mape(runs, g);
  std::printf("[calibration] multi-node MAPE (constants fitted on single-node only): %.2f %%\n", 100 * mape);
  EXPECT_LE(mape, 0.15);
}

// The targets, out of sample, for the joint procedure (fit_joint). Runs K = 4 fits (tens of minutes
// on a shared 2-core machine): build/arachne_tests --gtest_also_run_disabled_tests
// --gtest_filter='Calibration.DISABLED_CrossValidated*'. Not met yet (README, "Calibration").
TEST(Calibration, DISABLED_CrossValidatedSingleAndMultiNodeMapesMeetTheTargets) {
  ARACHNE_REQUIRE_DATA(data);
  const auto single = load_vtrain_csv(data + "/measured/vtrain_a100_single_node.csv");
  const auto multi = load_vtrain_csv(data + "/measured/vtrain_a100_multi_node.csv");
  GpuSpec start = GpuCatalog::load_default().at("A100-80");
  start.compute = ComputeConstants{};
  const CrossValidation cv = cross_validate_joint(single, multi, start);
  ASSERT_EQ(cv.fold_jobs.size(), 4u);  // h3072, h6144, h8192, h12288
  for (size_t k = 0; k < cv.fold_jobs.size(); ++k)
    std::printf("[calibration] fold %zu holds out %s: single-node %.2f %%, multi-node %.2f %%\n", k,
                cv.fold_jobs[k].c_str(), 100 * cv.fold_single[k], 100 * cv.fold_multi[k]);
  std::printf("[calibration] cross-validated: single-node %.2f %%, multi-node %.2f %%\n", 100 * cv.single_mape,
              100 * cv.multi_mape);
  EXPECT_LE(cv.single_mape, 0.08);
  EXPECT_LE(cv.multi_mape, 0.08);
}

TEST(Calibration, SimulatorOrdersEachJobsConfigurationsLikeTheMeasurements) {
  ARACHNE_REQUIRE_DATA(data);
  const GpuSpec g = GpuCatalog::load_default().at("A100-80");
  std::vector<double> all;
  for (const char* f : {"vtrain_a100_single_node.csv", "vtrain_a100_multi_node.csv"}) {
    const auto rho = per_job_spearman(load_vtrain_csv(data + "/measured/" + f), g);
    ASSERT_FALSE(rho.empty()) << f;
    std::printf("[calibration] %s: mean Spearman %.3f over %zu jobs\n", f, mean(rho), rho.size());
    all.insert(all.end(), rho.begin(), rho.end());
  }
  std::printf("[calibration] mean Spearman over all %zu jobs: %.3f\n", all.size(), mean(all));
  EXPECT_GE(mean(all), 0.8);
}

TEST(Calibration, BrokenMeasurementRowIsBadInputWithItsLine) {
  const std::string path = testing::TempDir() + "/broken_vtrain.csv";
  {
    std::ofstream f(path);
    f << "# GPUs,global batch,micro batch,hidden size,attention heads,# layers,sequence length,tensor parallelism,"
         "data parallelism,pipeline parallelism,iteration time (ms)\n"
      << "2,16,8,1024,16,24,1024,1,1,2,372.1\n"
      << "8,32,4,1024,16,24,1024,2,2,2,abc\n";
  }
  try {
    load_vtrain_csv(path);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(e.where(), path + ":3: iteration time (ms)");
  }
  std::remove(path.c_str());
}

TEST(Calibration, ExtrapolatedGpuKeepsEfficienciesAndScalesGemmSize) {
  const GpuCatalog cat = GpuCatalog::load_default();
  const GpuSpec& a100 = cat.at("A100-80");
  const GpuSpec& h100 = cat.at("H100");
  const ComputeConstants c = extrapolate_constants(a100, h100);
  EXPECT_EQ(c.gemm_eff_max, a100.compute.gemm_eff_max);
  // 989 / 312 TFLOP/s: the GEMM that half-fills an H100 is ~3.2x bigger.
  EXPECT_NEAR(c.gemm_half_flops / a100.compute.gemm_half_flops, 989.0 / 312.0, 1e-9);
}

TEST(Calibration, CatalogRewriteTouchesOnlyComputeLines) {
  const GpuCatalog cat = GpuCatalog::load_default();
  std::ifstream in(cat.source_path());
  std::stringstream ss;
  ss << in.rdbuf();
  ComputeConstants c;
  c.gemm_eff_max = 0.8125;
  const std::string out = rewrite_catalog_constants(ss.str(), cat, "A100-80", c);
  const std::string path = testing::TempDir() + "/gpus_rewritten.yaml";
  std::ofstream(path) << out;
  const GpuCatalog back = GpuCatalog::load(path);
  EXPECT_NEAR(back.at("A100-80").compute.gemm_eff_max, 0.8125, 1e-4);
  EXPECT_NEAR(back.at("H100").compute.gemm_eff_max, 0.8125, 1e-4);  // extrapolated from A100-80
  EXPECT_EQ(back.at("H100").peak_fp16, cat.at("H100").peak_fp16);    // everything else untouched
  EXPECT_EQ(back.names(), cat.names());
  std::remove(path.c_str());
}

}  // namespace
}  // namespace arachne
