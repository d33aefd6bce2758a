// `arachne calibrate`: fits the compute-model constants of a GPU type to measured Megatron iterations by
// simulating every measured configuration (sim/exec/calibration.h), reports the errors, and optionally
// rewrites the catalog (scripts/calibrate.sh).
#include <boost/program_options.hpp>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <numeric>
#include <sstream>

#include "cli/commands.h"
#include "sim/exec/calibration.h"
#include "sim/io/atomic_file.h"
#include "sim/io/input_error.h"

namespace arachne::cli {
namespace {

const char* kCalibrateHelp = R"(arachne calibrate - fit a GPU's compute-model constants to measured iterations

Simulates every configuration of a vTrain-format CSV (shared/data/measured/) and minimises the mean
absolute percentage error (MAPE) over the constants of the GPU's compute model (GEMM efficiency curve,
attention and memory-bound efficiency, kernel and collective overheads, achieved link bandwidth, slowdown
of kernels beside a collective) by Nelder-Mead. Prints the fit, its MAPE, and the rank agreement per job;
--validate adds the error on another file (out of sample); --write rewrites the GPU's line in the catalog
and the lines of every GPU extrapolated from it.

With --multi, the fit has two stages: the --data runs alone, then the mean of the --data and --multi
MAPEs (sim/exec/calibration.h, fit_joint). --cross-validate then also reports the out-of-sample errors of
that procedure: K folds, one per multi-node job, each fitted without that job and without half of the
--data runs, scored on both (this runs K more fits).

Usage:
  arachne calibrate --data FILE.csv [--gpu A100-80] [--evaluations N] [--validate FILE.csv]
                    [--multi FILE.csv [--joint-evaluations N] [--cross-validate]]
                    [--write configs/gpus.yaml]

Example (what scripts/calibrate.sh runs):
  arachne calibrate --data ../shared/data/measured/vtrain_a100_single_node.csv \
      --multi ../shared/data/measured/vtrain_a100_multi_node.csv --cross-validate --write configs/gpus.yaml

Options)";

}  // namespace

int run_calibrate(const std::vector<std::string>& args) {
  namespace po = boost::program_options;
  po::options_description opts("");
  opts.add_options()("help", "this help")
      ("data", po::value<std::string>()->value_name("FILE"), "measured iterations to fit (vTrain CSV)")
      ("gpu", po::value<std::string>()->value_name("NAME")->default_value("A100-80"), "catalog GPU measured")
      ("evaluations", po::value<std::string>()->value_name("N")->default_value("500"), "simulator sweeps the fit may use")
      ("validate", po::value<std::string>()->value_name("FILE"), "report the error on this file too (not fitted)")
      ("multi", po::value<std::string>()->value_name("FILE"), "multi-node runs fitted jointly (second stage)")
      ("joint-evaluations", po::value<std::string>()->value_name("N")->default_value("120"), "simulator sweeps of the joint stage")
      ("cross-validate", "with --multi: report the out-of-sample errors of the procedure (K more fits)")
      ("write", po::value<std::string>()->value_name("FILE"), "rewrite the constants in this catalog file");
  po::variables_map vm;
  if (const int rc = parse_options(args, opts, vm, "calibrate"); rc >= 0) return rc;
  if (vm.count("help")) {
    std::cout << kCalibrateHelp << "\n" << opts;
    return kExitOk;
  }
  if (!vm.count("data")) return input_error("--data", "required (a vTrain-format CSV of measured iterations)");
  const GpuCatalog catalog = GpuCatalog::load_default();
  const std::string gpu = vm["gpu"].as<std::string>();
  if (!catalog.contains(gpu)) return input_error("--gpu", "unknown GPU type '" + gpu + "'");
  const int evals = static_cast<int>(parse_int_flag("--evaluations", vm["evaluations"].as<std::string>(), 8));
  const auto runs = load_vtrain_csv(vm["data"].as<std::string>());
  std::vector<MeasuredRun> validation, multi;
  if (vm.count("validate")) validation = load_vtrain_csv(vm["validate"].as<std::string>());
  if (vm.count("multi")) multi = load_vtrain_csv(vm["multi"].as<std::string>());
  if (vm.count("cross-validate") && multi.empty()) return input_error("--cross-validate", "needs --multi");
  const JointBudget budget{evals, static_cast<int>(parse_int_flag("--joint-evaluations",
                                                                  vm["joint-evaluations"].as<std::string>(), 8))};

  // Start from the neutral defaults (sim/hw/gpu.h), not from the catalog's previous fit, so a rerun gives
  // the same constants whatever the file held.
  GpuSpec spec = catalog.at(gpu);
  spec.compute = ComputeConstants{};
  std::fprintf(stderr, "calibrate: %zu runs, start MAPE %.2f %%\n", runs.size(), 100 * calibration_mape(runs, spec));
  auto progress = [](const std::string& stage, int e, double v) {
    if (e % 25 == 0) std::fprintf(stderr, "calibrate: %s: %d evaluations, objective %.2f %%\n", stage.c_str(), e, 100 * v);
  };
  if (vm.count("cross-validate")) {
    const CrossValidation cv = cross_validate_joint(runs, multi, spec, budget, progress);
    for (size_t k = 0; k < cv.fold_jobs.size(); ++k)
      std::printf("fold %zu (holds out %s): held-out single-node MAPE %.2f %%, multi-node MAPE %.2f %%\n  %s\n",
                  k + 1, cv.fold_jobs[k].c_str(), 100 * cv.fold_single[k], 100 * cv.fold_multi[k],
                  format_compute_constants(cv.fold_constants[k]).c_str());
    std::printf("cross-validated single-node MAPE: %.2f %%\ncross-validated multi-node MAPE: %.2f %% on %zu runs\n",
                100 * cv.single_mape, 100 * cv.multi_mape, multi.size());
  }
  const CalibrationFit fit = multi.empty()
                                 ? fit_compute_constants(runs, spec, evals, [&](int e, double v) { progress("fit", e, v); })
                                 : fit_joint(runs, multi, spec, budget, progress);
  spec.compute = fit.constants;
  std::printf("gpu: %s\nconstants: %s\nfit objective: %.2f %% (%d evaluations)\nsingle-node MAPE (in sample): %.2f %% on %zu runs\n",
              gpu.c_str(), format_compute_constants(fit.constants).c_str(), 100 * fit.mape, fit.evaluations,
              100 * calibration_mape(runs, spec), runs.size());
  if (!multi.empty())
    std::printf("multi-node MAPE (in sample): %.2f %% on %zu runs\n", 100 * calibration_mape(multi, spec), multi.size());
  const auto rho = per_job_spearman(runs, spec);
  if (!rho.empty())
    std::printf("rank agreement: mean Spearman %.3f over %zu jobs\n",
                std::accumulate(rho.begin(), rho.end(), 0.0) / rho.size(), rho.size());
  if (!validation.empty()) {
    std::printf("validation MAPE: %.2f %% on %zu runs\n", 100 * calibration_mape(validation, spec), validation.size());
    const auto vr = per_job_spearman(validation, spec);
    if (!vr.empty())
      std::printf("validation rank agreement: mean Spearman %.3f over %zu jobs\n",
                  std::accumulate(vr.begin(), vr.end(), 0.0) / vr.size(), vr.size());
  }
  if (vm.count("write")) {
    const std::string path = vm["write"].as<std::string>();
    std::ifstream in(path);
    if (!in) return input_error("--write", "cannot read " + path);
    std::stringstream ss;
    ss << in.rdbuf();
    write_text_atomically(path, rewrite_catalog_constants(ss.str(), catalog, gpu, fit.constants));
    std::fprintf(stderr, "calibrate: wrote %s\n", path.c_str());
  }
  return kExitOk;
}

}  // namespace arachne::cli
