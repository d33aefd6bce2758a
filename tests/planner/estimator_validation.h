// The estimator's validation set and figures (planner/template/estimator.h), shared by its test, its fit
// (scripts/fit_estimator.sh) and its report: random valid plans that fit in memory (random_plans.h) on a
// fixed list of clusters - homogeneous and mixed, 1-4 GPU types, node sizes 1/2/4/8, 8-64 GPUs - for a
// dense and an MoE model of configs/models, each simulated once.
//
// The clusters are split in two halves (even and odd positions in the list): the coefficients are fitted
// on the even half and the figures that judge them are taken on the odd half (out of sample).
//
// Figures: Spearman's rank correlation between estimated and simulated iteration times within each cell
// (one cluster and model: the plans a planner would rank against each other; cells of >= 10 plans), averaged
// over cells; the
// same pooled over all plans of the half; and the mean absolute relative error |est - sim| / sim.
#pragma once
#include <string>
#include <vector>

#include "planner/template/estimator.h"
#include "tests/planner/random_plans.h"

namespace arachne::test {

struct ValidationCell {
  std::string cluster_spec;
  std::string model_name;
  int index = 0;  // position of the cluster in the list (even: fitting half, odd: held out)
  Cluster cluster;
  ModelConfig model;
  std::unique_ptr<Topology> topo;
  std::vector<SimulatedPlan> plans;
};

// The cells, drawn and simulated on first use (seeded: the same plans every run), cached for the process.
const std::vector<ValidationCell>& estimator_validation_cells();

struct EstimatorFigures {
  int cells = 0, plans = 0;  // cells in the per-cell figures; plans in all
  double mean_cell_spearman = 0, min_cell_spearman = 0, pooled_spearman = 0;
  double mean_abs_rel_error = 0;
  double estimate_us = 0;       // mean CPU time of one estimate, one fresh estimator per cell (cold caches)
  double warm_estimate_us = 0;  // the same plans priced again (the per-layer tables and links cached)
};

// Figures of the estimator with `coefficients` over the cells of one half (held_out: odd positions).
EstimatorFigures estimator_figures(const planner::EstimatorCoefficients& coefficients, bool held_out);

// Coefficients minimising the mean squared log ratio of estimated to simulated time on the fitting half, by
// cyclic coordinate search over a logarithmic grid (deterministic).
planner::EstimatorCoefficients fit_estimator_coefficients();

// Spearman's rank correlation (average ranks for ties).
double spearman(const std::vector<double>& a, const std::vector<double>& b);

// The estimates of `plans` beside their simulated times: Spearman's rank correlation (0 for fewer than 3
// plans) and the mean relative error |estimated - simulated| / simulated (0 for no plan).
struct Agreement {
  double spearman = 0;
  double mean_abs_rel_error = 0;
};
Agreement agreement(const planner::Estimator& est, const std::vector<SimulatedPlan>& plans);

}  // namespace arachne::test
