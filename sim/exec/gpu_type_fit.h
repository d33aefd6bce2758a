// Per-GPU-type compute constants from published measurements (shared/data/measured/published_gpu_types.csv,
// sources and caveats in published_gpu_types_SOURCES.md). The A100-80 is calibrated on vTrain's Megatron
// runs (calibration.h); every other type is priced by the same roofline with its own peak and bandwidth.
// What differs between generations and is fitted here is the fraction of the tensor-core peak that real
// kernels reach: one factor k per fitted type scales the A100-80's gemm_eff_max and attn_eff (extrapolated,
// see extrapolate_constants). HBM efficiency, overheads and link efficiency stay the A100-80's: the data
// hold 2-5 single-GPU rows per type, dominated by GEMM time, which identify one parameter and say nothing
// about collectives; separating memory from tensor-core efficiency would need rows that vary the
// memory-bound share at a fixed GPU, which the sources do not give.
//
// Sources differ in software, precision and per-GPU batch, so a row is only ever compared with an anchor
// row of the same source and workload (an A100 where the source has one, else an H100): the fit matches
// the simulated speed ratio GPU/anchor to the published one. Validation is leave-one-source-out (leave one
// workload out when a type has a single source). GPUs without rows are extrapolated from a sibling by
// `calibrated_from`; rows of such GPUs are out-of-sample checks of the extrapolation.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "sim/hw/gpu.h"
#include "sim/model/model.h"
#include "sim/plan/plan.h"

namespace arachne {

// One line of published_gpu_types.csv as the source states it; numeric cells that are "not stated" are 0.
struct PublishedRow {
  int line = 0;  // 1-based line in the CSV
  std::string source_id, gpu, model, precision, metric, unit;
  int gpus_total = 0;
  int layers = 0, heads = 0, micro_batch = 0, tp = 0, pp = 0, dp = 0;
  long hidden = 0, seq_len = 0, global_batch = 0;
  double value = 0;  // the measured figure in `unit`
};

// Throws InputError(file:line: column, reason) on a malformed row.
std::vector<PublishedRow> load_published_csv(const std::string& path);

// How the simulator reproduces a row, or why it does not.
struct PublishedCase {
  PublishedRow row;
  std::string catalog_gpu;  // the catalog type simulated
  std::string workload;     // source_id + model + sequence: rows of one workload are compared
  std::string excluded;     // non-empty: why the row is not simulated
  std::string assumptions;  // what the row does not state and the simulation assumes
  ModelConfig model;
  Shorthand shape;
  bool anchor = false;      // the row others of its workload are compared with
  bool absolute = false;    // a one-GPU-type table: compared by absolute TFLOP/s, not fitted
};

// Maps every row to a catalog GPU, a model and a plan (documented assumptions where the row is silent),
// marks one anchor per workload, and excludes rows the simulator cannot reproduce (FP8, FP32, ratios
// without a configuration, GPUs not in the catalog, workloads without an anchor).
std::vector<PublishedCase> interpret_published(const std::vector<PublishedRow>& rows, const GpuCatalog& catalog);

// Simulated throughput of a case, sequences per second per GPU, with `catalog`'s constants.
double simulate_published(const PublishedCase& c, const GpuCatalog& catalog);
// Simulated model TFLOP/s per GPU of a case (no recompute FLOPs counted; SimResult::tflops_per_gpu).
double simulate_published_tflops(const PublishedCase& c, const GpuCatalog& catalog);

// Constants of `gpu` as extrapolated from its `calibrated_from` GPU with the tensor-core efficiencies
// (gemm_eff_max, attn_eff) multiplied by k.
ComputeConstants scaled_constants(const GpuCatalog& catalog, const std::string& gpu, double k);
// k of a fitted GPU as its catalog constants say (its gemm_eff_max over the extrapolated one).
double tensor_scale(const GpuCatalog& catalog, const std::string& gpu);
// Re-derives every GPU with `calibrated_from`, parents first: fitted GPUs (fitted_on) keep their k (or
// take `k_override`'s), the others are extrapolate_constants() of their parent.
GpuCatalog propagate_constants(GpuCatalog catalog, const std::map<std::string, double>& k_override = {});
// The fitted GPU whose k a row on `gpu` is evidence for: `gpu` itself if it has fitted_on, else its
// parent's target when `gpu` is an identity extrapolation of it (same peaks and HBM bandwidth, e.g.
// V100-16 of V100-32); "" when rows on `gpu` only check an extrapolation.
std::string fit_target(const GpuCatalog& catalog, const std::string& gpu);

// One published ratio row/anchor and the simulated ratios.
struct RatioPoint {
  const PublishedCase* row = nullptr;
  const PublishedCase* anchor = nullptr;
  std::string target;       // fit_target of the row's GPU ("" = extrapolation check)
  std::string fold;         // held out together in validation
  double published = 0;     // value(row) / value(anchor)
  double simulated = 0;     // with the final constants (in sample for fitted types)
  double out_of_sample = 0; // with k fitted without the row's fold (checks: = simulated)
};

struct TypeFit {
  std::string gpu;
  double k = 1;                      // tensor-core efficiency relative to the extrapolated A100-80
  std::vector<std::string> sources;  // sources of the rows it was fitted on
  int rows = 0;
  bool at_bound = false;             // k at a search bound (reported; never expected)
  std::string fold_kind;             // "source" or "workload" (a type with one source)
};

struct GpuTypeFitReport {
  std::vector<TypeFit> fits;
  std::vector<RatioPoint> points;
  GpuCatalog catalog;  // with the fitted and propagated constants
};

// Fits k for every GPU with `fitted_on` in `catalog` (in catalog order), validates each out of sample, and
// checks every extrapolated GPU that has rows. `cases` must outlive the report.
// charge_unpriced: the anchor's measured time per sequence beyond its simulated time (work of the source's
// code that the simulator's kernels do not price) is charged to the compared GPU as memory-bound work at
// its HBM bandwidth; false compares the simulated times alone (an ablation).
GpuTypeFitReport fit_gpu_types(const std::vector<PublishedCase>& cases, const GpuCatalog& catalog,
                               bool charge_unpriced = true);

// Rewrites the one-line `compute:` blocks of every GPU with `calibrated_from`, and the `fitted_on:` lines of
// the fitted ones, from `fitted` (other lines byte for byte).
std::string rewrite_catalog_gpu_types(const std::string& yaml_text, const GpuTypeFitReport& fitted);

}  // namespace arachne
