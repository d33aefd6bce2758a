// `arachne calibrate`: fits the compute-model constants of a GPU type to measured Megatron iterations by
// simulating every measured configuration (sim/exec/calibration.h), reports the errors, and optionally
// rewrites the catalog (scripts/calibrate.sh).
#include <boost/program_options.hpp>

#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <fstream>
#include <iostream>
#include <numeric>
#include <sstream>

#include "cli/commands.h"
#include "sim/exec/calibration.h"
#include "sim/exec/gpu_type_fit.h"
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

With --published instead of --data, fits every other GPU type relative to the catalog's A100-80
(sim/exec/gpu_type_fit.h): one tensor-core efficiency factor per GPU with `fitted_on:` in the catalog,
matched to the published speed ratios GPU/A100 of the same source (published_gpu_types.csv), validated
leaving one source out; GPUs extrapolated from a fitted one are re-derived and checked against their rows.
Prints Markdown tables of the fit and of every ratio; --write rewrites those GPUs' lines.

Usage:
  arachne calibrate --data FILE.csv [--gpu A100-80] [--evaluations N] [--validate FILE.csv]
                    [--multi FILE.csv [--joint-evaluations N] [--cross-validate]]
                    [--write configs/gpus.yaml]
  arachne calibrate --published published_gpu_types.csv [--write configs/gpus.yaml | --simulated-time-only]

Example (what scripts/calibrate.sh runs):
  arachne calibrate --data ../shared/data/measured/vtrain_a100_single_node.csv \
      --validate ../shared/data/measured/vtrain_a100_multi_node.csv --write configs/gpus.yaml
  arachne calibrate --published ../shared/data/measured/published_gpu_types.csv --write configs/gpus.yaml

Options)";

std::string pct(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.1f %%", 100 * fraction);
  return buf;
}

std::string num(double v, int decimals) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

void print_type_fits(const GpuTypeFitReport& rep) {
  std::printf("## Per-type fit (k = tensor-core efficiency relative to the A100-80 extrapolated by peak)\n\n");
  std::printf("| GPU | k | gemm_eff_max | attn_eff | fitted on | rows | validation folds |\n|---|---|---|---|---|---|---|\n");
  for (const TypeFit& f : rep.fits) {
    const ComputeConstants& c = rep.catalog.at(f.gpu).compute;
    std::string sources;
    for (const auto& s : f.sources) sources += (sources.empty() ? "" : ", ") + s;
    std::printf("| %s | %.3f%s | %.4f | %.4f | %s | %d | leave one %s out |\n", f.gpu.c_str(), f.k,
                f.at_bound ? " (AT BOUND)" : "", c.gemm_eff_max, c.attn_eff, sources.c_str(), f.rows,
                f.fold_kind.c_str());
  }
}

void print_ratio_rows(const GpuTypeFitReport& rep) {
  std::printf("\n## Speed ratios within each source (simulated vs published)\n\n");
  std::printf("| source | workload | GPU / anchor | published | simulated | out of sample | error (out of sample) |\n"
              "|---|---|---|---|---|---|---|\n");
  for (const RatioPoint& p : rep.points) {
    const PublishedRow& r = p.row->row;
    const std::string wl = r.model.substr(0, r.model.find(',')) + " s" + std::to_string(r.seq_len) + " b" +
                           std::to_string(p.row->shape.micro_batch) + "/" + std::to_string(p.anchor->shape.micro_batch);
    const std::string role = p.target.empty() ? " (extrapolated)" : "";
    std::printf("| %s | %s | %s / %s%s | %.3f | %.3f | %.3f | %s |\n", r.source_id.c_str(), wl.c_str(),
                p.row->catalog_gpu.c_str(), p.anchor->catalog_gpu.c_str(), role.c_str(), p.published, p.simulated,
                p.out_of_sample, pct(p.out_of_sample / p.published - 1).c_str());
  }
}

void print_type_errors(const GpuTypeFitReport& rep) {
  std::printf("\n## Per-type error of the out-of-sample ratios\n\n| GPU | rows | mean abs error | worst |\n|---|---|---|---|\n");
  std::vector<std::string> order;
  std::map<std::string, std::vector<double>> err;
  for (const RatioPoint& p : rep.points) {
    if (!err.count(p.row->catalog_gpu)) order.push_back(p.row->catalog_gpu);
    err[p.row->catalog_gpu].push_back(p.out_of_sample / p.published - 1);
  }
  for (const auto& g : order) {
    double sum = 0, worst = 0;
    for (double e : err[g]) {
      sum += std::abs(e);
      if (std::abs(e) > std::abs(worst)) worst = e;
    }
    std::printf("| %s | %zu | %s | %s |\n", g.c_str(), err[g].size(), (num(100 * sum / err[g].size(), 1) + " %").c_str(),
                pct(worst).c_str());
  }
}

void print_absolute_checks(const std::vector<PublishedCase>& cases, const GpuCatalog& catalog) {
  std::printf("\n## Absolute check: tables with one GPU type (not fitted)\n\n");
  std::printf("| source | model | GPUs | TP-PP-DP | published model TFLOP/s/GPU | simulated | error |\n"
              "|---|---|---|---|---|---|---|\n");
  for (const PublishedCase& c : cases) {
    if (!c.absolute) continue;
    const double sim = simulate_published_tflops(c, catalog);
    std::printf("| %s | %s | %d x %s | %d-%d-%d | %.1f | %.1f | %s |\n", c.row.source_id.c_str(), c.model.name.c_str(),
                c.row.gpus_total, c.catalog_gpu.c_str(), c.shape.tp, c.shape.pp, c.shape.dp, c.row.value, sim,
                pct(sim / c.row.value - 1).c_str());
  }
}

void print_exclusions(const std::vector<PublishedCase>& cases) {
  std::printf("\n## Rows not simulated\n\n");
  std::map<std::pair<std::string, std::string>, std::string> lines;  // (source, reason) -> line numbers
  std::vector<std::pair<std::string, std::string>> order;
  for (const PublishedCase& c : cases) {
    if (c.excluded.empty()) continue;
    const auto key = std::make_pair(c.row.source_id, c.excluded);
    if (!lines.count(key)) order.push_back(key);
    lines[key] += (lines[key].empty() ? "" : ",") + std::to_string(c.row.line);
  }
  for (const auto& key : order)
    std::printf("- %s (lines %s): %s\n", key.first.c_str(), lines[key].c_str(), key.second.c_str());
  std::printf("\nAssumptions of the simulated workloads:\n");
  std::set<std::string> seen;
  for (const PublishedCase& c : cases)
    if (c.excluded.empty() && seen.insert(c.model.name).second)
      std::printf("- %s: %s\n", c.model.name.c_str(), c.assumptions.c_str());
}

int run_gpu_type_fit(const std::string& published, const std::string& write_path, bool charge_unpriced) {
  const GpuCatalog catalog = GpuCatalog::load_default();
  const auto rows = load_published_csv(published);
  const auto cases = interpret_published(rows, catalog);
  const GpuTypeFitReport rep = fit_gpu_types(cases, catalog, charge_unpriced);
  print_type_fits(rep);
  print_ratio_rows(rep);
  print_type_errors(rep);
  print_absolute_checks(cases, rep.catalog);
  print_exclusions(cases);
  if (!write_path.empty()) {
    std::ifstream in(write_path);
    if (!in) return input_error("--write", "cannot read " + write_path);
    std::stringstream ss;
    ss << in.rdbuf();
    write_text_atomically(write_path, rewrite_catalog_gpu_types(ss.str(), rep));
    std::fprintf(stderr, "calibrate: wrote %s\n", write_path.c_str());
  }
  return kExitOk;
}

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
      ("joint-evaluations", po::value<std::string>()->value_name("N")->default_value("100"), "simulator sweeps of the joint stage")
      ("cross-validate", "with --multi: report the out-of-sample errors of the procedure (K more fits)")
      ("published", po::value<std::string>()->value_name("FILE"), "fit the other GPU types to these ratios")
      ("simulated-time-only", "with --published: compare simulated times alone, without charging the anchor's "
                              "unpriced time to the other GPU (an ablation; do not --write it)")
      ("write", po::value<std::string>()->value_name("FILE"), "rewrite the constants in this catalog file");
  po::variables_map vm;
  if (const int rc = parse_options(args, opts, vm, "calibrate"); rc >= 0) return rc;
  if (vm.count("help")) {
    std::cout << kCalibrateHelp << "\n" << opts;
    return kExitOk;
  }
  if (vm.count("write")) check_output_path("--write", vm["write"].as<std::string>());
  if (vm.count("published")) {
    if (vm.count("data")) return input_error("--published", "give either --data or --published, not both");
    if (vm.count("simulated-time-only") && vm.count("write"))
      return input_error("--simulated-time-only", "an ablation: not written to the catalog (drop --write)");
    return run_gpu_type_fit(vm["published"].as<std::string>(),
                            vm.count("write") ? vm["write"].as<std::string>() : std::string(),
                            !vm.count("simulated-time-only"));
  }
  if (!vm.count("data")) return input_error("--data", "required (a vTrain-format CSV of measured iterations)");
  const GpuCatalog catalog = GpuCatalog::load_default();
  const std::string gpu = vm["gpu"].as<std::string>();
  if (!catalog.contains(gpu)) return input_error("--gpu", "unknown GPU type '" + gpu + "'");
  const int evals = parse_small_int_flag("--evaluations", vm["evaluations"].as<std::string>(), {8, limits::kRounds.max});
  const JointBudget budget{evals, parse_small_int_flag("--joint-evaluations", vm["joint-evaluations"].as<std::string>(), {8, limits::kRounds.max})};
  const auto runs = load_vtrain_csv(vm["data"].as<std::string>());
  std::vector<MeasuredRun> validation, multi;
  if (vm.count("validate")) validation = load_vtrain_csv(vm["validate"].as<std::string>());
  if (vm.count("multi")) multi = load_vtrain_csv(vm["multi"].as<std::string>());
  if (vm.count("cross-validate") && multi.empty()) return input_error("--cross-validate", "needs --multi");

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
