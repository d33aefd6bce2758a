// Calibration of the compute model against measured Megatron iterations (vTrain's A100 measurements in
// shared/data/measured/). The simulator itself is the model being fitted: every candidate set of constants
// is scored by simulating every measured configuration. Used by `arachne calibrate` (scripts/calibrate.sh)
// and by the calibration tests (two-fold cross-validation, out-of-sample multi-node error, ranking).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "sim/hw/gpu.h"
#include "sim/model/model.h"

namespace arachne {

struct MeasuredRun {
  int line = 0;  // 1-based line in the CSV
  int gpus = 0;
  long global_batch = 0;
  int micro_batch = 0;
  long hidden = 0;
  int heads = 0;
  int layers = 0;
  long seq_len = 0;
  int tp = 1, dp = 1, pp = 1;
  double time_s = 0;
};

// Reads vtrain_a100_{single,multi}_node.csv. Throws InputError(file:line: column, reason) on a bad row.
std::vector<MeasuredRun> load_vtrain_csv(const std::string& path);

// The measured setting (data README): GPT blocks, vocabulary 51,200, fp16, full recompute, 1F1B,
// no gradient bucketing, A100 nodes of 8 GPUs with vTrain's 150 GB/s NVLink and 800 Gbit/s per node.
ModelConfig vtrain_model(const MeasuredRun& r);

// Simulated iteration time of a measured configuration with `gpu` (its compute constants) as the A100.
// Returns a negative value when the configuration is infeasible in the simulator (e.g. out of memory is
// ignored; invalid plans return -1).
double simulate_measured(const MeasuredRun& r, const GpuSpec& gpu);

struct CalibrationFit {
  ComputeConstants constants;
  double mape = 0;  // on the rows it was fitted on
  int evaluations = 0;
};

// Simulated iteration times of `runs` (simulate_measured), on as many threads as the machine has; each run
// is independent and deterministic, so the result does not depend on the thread count.
std::vector<double> simulate_all(const std::vector<MeasuredRun>& runs, const GpuSpec& gpu);

// Mean absolute percentage error of the simulator on `runs` (fraction, not percent).
double calibration_mape(const std::vector<MeasuredRun>& runs, const GpuSpec& gpu);

// Fits the compute constants of `base` (start point) to `runs` by Nelder-Mead on the MAPE. Deterministic.
CalibrationFit fit_compute_constants(const std::vector<MeasuredRun>& runs, const GpuSpec& base,
                                     int max_evaluations = 400,
                                     const std::function<void(int, double)>& progress = {});

// The same search on any objective of the GPU's constants (e.g. a mean of MAPEs over several data sets).
CalibrationFit fit_constants(const std::function<double(const GpuSpec&)>& objective, const GpuSpec& base,
                             int max_evaluations = 400, const std::function<void(int, double)>& progress = {});

// The catalog's calibration: Nelder-Mead on the single-node MAPE from `base` (stage 1), then on the mean of
// the single-node and multi-node MAPEs from there (stage 2). Single-node runs (small models, one sequence
// length) do not separate the GEMM, memory-bound and communication terms that dominate at scale; the
// multi-node runs do, so they are fitted too and validated out of sample by cross_validate_joint.
struct JointBudget {
  int single_evaluations = 200;
  int joint_evaluations = 100;
};
CalibrationFit fit_joint(const std::vector<MeasuredRun>& single, const std::vector<MeasuredRun>& multi,
                         const GpuSpec& base, const JointBudget& budget = {},
                         const std::function<void(const std::string&, int, double)>& progress = {});

// Multi-node jobs: runs of one model on one GPU count and global batch (hidden, heads, layers, sequence, GPUs,
// global batch), in order of first appearance; the value is the job's index for each run.
std::vector<int> job_of_runs(const std::vector<MeasuredRun>& runs, std::vector<std::string>* names = nullptr);

struct CrossValidation {
  double single_mape = 0;  // mean over folds of the held-out single-node half's MAPE
  double multi_mape = 0;   // over every multi-node run, each predicted by the fold that held its job out
  std::vector<double> fold_single, fold_multi;  // held-out MAPE per fold
  std::vector<std::string> fold_jobs;           // the multi-node job each fold held out
  std::vector<ComputeConstants> fold_constants;
};
// K-fold cross-validation of fit_joint, K = number of multi-node jobs: fold k fits on every multi-node job
// but job k and on the single-node rows of the other parity than k (row index % 2 != k % 2), then scores
// job k and the held-out single-node half. Every multi-node run is out of sample exactly once, every
// single-node run in half of the folds.
CrossValidation cross_validate_joint(const std::vector<MeasuredRun>& single, const std::vector<MeasuredRun>& multi,
                                     const GpuSpec& base, const JointBudget& budget = {},
                                     const std::function<void(const std::string&, int, double)>& progress = {});

// Spearman rank correlation of simulated vs measured times for each job (same model dimensions, GPU
// count and global batch) with at least `min_configs` configurations spanning at least `min_spread`
// (max/min - 1) in measured time. Returns one coefficient per qualifying job.
std::vector<double> per_job_spearman(const std::vector<MeasuredRun>& runs, const GpuSpec& gpu,
                                     int min_configs = 4, double min_spread = 0.10);

// Constants for a GPU without measurements, from a measured one: efficiencies carry over (the roofline uses
// the GPU's own peak and bandwidth); the GEMM size at half efficiency scales with peak (a faster GPU needs
// proportionally more work to fill its SMs in the same time).
ComputeConstants extrapolate_constants(const GpuSpec& measured, const GpuSpec& target);

}  // namespace arachne

namespace arachne {

// Rewrites the one-line `compute:` blocks of configs/gpus.yaml text: `measured` gets `c`, and every GPU whose
// `calibrated_from` names `measured` gets extrapolate_constants(). Other lines are kept byte for byte.
std::string rewrite_catalog_constants(const std::string& yaml_text, const GpuCatalog& catalog,
                                      const std::string& measured, const ComputeConstants& c);
// The flow-style line body, e.g. {gemm_eff_max: 0.75, gemm_half_flops: 2.0e9, ...}.
std::string format_compute_constants(const ComputeConstants& c);

}  // namespace arachne
