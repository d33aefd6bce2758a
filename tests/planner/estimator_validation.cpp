// The estimator's validation set, figures and fit (see estimator_validation.h).
#include "tests/planner/estimator_validation.h"

#include <algorithm>
#include <ctime>
#include <cmath>
#include <numeric>

#include "sim/hw/gpu.h"

namespace arachne::test {
namespace {

// 22 clusters, 8-64 GPUs: homogeneous and mixed, 1-4 GPU types, node sizes 1, 2, 4 and 8 (spec strings
// TYPE:NODESxGPUS; link details are each type's default node in configs/gpus.yaml).
const std::vector<std::string>& cluster_specs() {
  static const std::vector<std::string> specs = {
      "A100-80:1x8",
      "A100-80:2x8",
      "A100-40:4x4",
      "V100-32:8x2",
      "H100:4x8",
      "L4:16x1",
      "T4:8x2",
      "A10:4x4",
      "A100-80:2x8,V100-32:4x4",
      "H100:1x8,A100-40:2x4",
      "A100-80:1x8,T4:8x1",
      "H100:2x4,A100-80:2x4,V100-32:4x2",
      "A100-40:2x8,L4:4x2,T4:2x4",
      "H100:2x8,A100-80:2x8,V100-32:2x8,T4:2x8",
      "MI250X:2x8",
      "A100-80:4x2,A10:4x2",
      "H200:1x8,A100-40:2x4,L40S:2x4,V100-16:4x2",
      "V100-16:4x4",
      "A100-80:8x1,H100:8x1",
      "L40S:2x8,A10G:2x4",
      "A100-80:4x8,V100-32:8x4",
      "H100:1x4,A100-80:1x4,L4:2x4,T4:4x2",
  };
  return specs;
}

// A dense model and an MoE model of configs/models (GPT-3 1.3B and its 64-expert sibling), with a small
// global batch so that 1,100 plans simulate in seconds.
constexpr long kGlobalBatch = 16;
constexpr int kDensePlansPerCell = 38;
constexpr int kMoePlansPerCell = 24;  // at most: the 64-expert model fits only some clusters (up to 300 draws)
// Cells with fewer plans are left out of the per-cell rank correlation (a rank correlation of a handful of
// plans says little); their plans count in the pooled figures.
constexpr size_t kMinCellPlans = 10;
const std::vector<std::string> kModels = {"gpt3-1.3b", "gpt-moe-1.3b-64e"};

// CPU time of this thread (the machine may be shared: wall time would count other processes).
double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

std::vector<double> ranks(const std::vector<double>& v) {
  std::vector<int> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(), [&](int a, int b) { return v[a] < v[b]; });
  std::vector<double> r(v.size());
  for (size_t i = 0; i < idx.size();) {
    size_t j = i;
    while (j + 1 < idx.size() && v[idx[j + 1]] == v[idx[i]]) ++j;
    for (size_t k = i; k <= j; ++k) r[idx[k]] = 0.5 * static_cast<double>(i + j);
    i = j + 1;
  }
  return r;
}

double pearson(const std::vector<double>& a, const std::vector<double>& b) {
  const double n = static_cast<double>(a.size());
  const double ma = std::accumulate(a.begin(), a.end(), 0.0) / n, mb = std::accumulate(b.begin(), b.end(), 0.0) / n;
  double sab = 0, saa = 0, sbb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    sab += (a[i] - ma) * (b[i] - mb);
    saa += (a[i] - ma) * (a[i] - ma);
    sbb += (b[i] - mb) * (b[i] - mb);
  }
  return saa > 0 && sbb > 0 ? sab / std::sqrt(saa * sbb) : 0.0;
}

// Estimated times of every plan of every cell of one half (out-of-memory verdicts of the estimator count
// as infinitely slow; the validation plans all fit by the simulator's check, so any is a disagreement).
struct Priced {
  std::vector<std::vector<double>> est, sim;  // per cell
  double seconds = 0, warm_seconds = 0;  // pricing every plan of a cell with a fresh estimator, then again
  int estimates = 0;
};

Priced price(const planner::EstimatorCoefficients& k, bool held_out) {
  Priced p;
  for (const ValidationCell& c : estimator_validation_cells()) {
    if ((c.index % 2 == 1) != held_out) continue;
    planner::Estimator est(c.cluster, *c.topo, c.model, k);
    std::vector<double> e, s;
    const double t0 = cpu_seconds();
    for (const SimulatedPlan& sp : c.plans) {
      const planner::Estimate x = est.estimate(sp.plan);
      e.push_back(x.fits ? x.iteration_s : 1e30);
      s.push_back(sp.result.iteration_time_s);
    }
    const double t1 = cpu_seconds();
    for (const SimulatedPlan& sp : c.plans) est.estimate(sp.plan);  // again, with the caches warm
    p.seconds += t1 - t0;
    p.warm_seconds += cpu_seconds() - t1;
    p.estimates += static_cast<int>(c.plans.size());
    p.est.push_back(std::move(e));
    p.sim.push_back(std::move(s));
  }
  return p;
}

double mean_squared_log_ratio(const Priced& p) {
  double sum = 0;
  int n = 0;
  for (size_t c = 0; c < p.est.size(); ++c)
    for (size_t i = 0; i < p.est[c].size(); ++i) {
      const double r = std::log(std::min(p.est[c][i], 1e6) / p.sim[c][i]);
      sum += r * r;
      ++n;
    }
  return n ? sum / n : 0.0;
}

}  // namespace

double spearman(const std::vector<double>& a, const std::vector<double>& b) { return pearson(ranks(a), ranks(b)); }

Agreement agreement(const planner::Estimator& est, const std::vector<SimulatedPlan>& plans) {
  std::vector<double> e, s;
  double err = 0;
  for (const SimulatedPlan& p : plans) {
    e.push_back(est.estimate(p.plan).iteration_s);
    s.push_back(p.result.iteration_time_s);
    err += std::abs(e.back() - s.back()) / s.back();
  }
  return {.spearman = plans.size() >= 3 ? spearman(e, s) : 0.0,
          .mean_abs_rel_error = plans.empty() ? 0.0 : err / static_cast<double>(plans.size())};
}

const std::vector<ValidationCell>& estimator_validation_cells() {
  static const std::vector<ValidationCell> cells = [] {
    const GpuCatalog catalog = GpuCatalog::load_default();
    std::vector<ValidationCell> out;
    const auto& specs = cluster_specs();
    for (size_t i = 0; i < specs.size(); ++i)
      for (size_t m = 0; m < kModels.size(); ++m) {
        ValidationCell c;
        c.cluster_spec = specs[i];
        c.model_name = kModels[m];
        c.index = static_cast<int>(i);
        c.cluster = parse_cluster_spec(specs[i], catalog);
        c.model = load_model(kModels[m]);
        c.model.global_batch = kGlobalBatch;
        c.topo = std::make_unique<Topology>(c.cluster);
        RandomPlanSpace space;
        space.uneven_experts = true;
        const int count = c.model.moe ? kMoePlansPerCell : kDensePlansPerCell;
        c.plans = draw_fitting_plans(c.cluster, *c.topo, c.model, kGlobalBatch, count, 1000 * i + m, 300, space).plans;
        out.push_back(std::move(c));
      }
    return out;
  }();
  return cells;
}

EstimatorFigures estimator_figures(const planner::EstimatorCoefficients& k, bool held_out) {
  const Priced p = price(k, held_out);
  EstimatorFigures f;
  std::vector<double> all_e, all_s;
  double err = 0;
  f.min_cell_spearman = 1;
  for (size_t c = 0; c < p.est.size(); ++c) {
    if (p.est[c].size() >= kMinCellPlans) {
      const double rho = spearman(p.est[c], p.sim[c]);
      f.mean_cell_spearman += rho;
      f.min_cell_spearman = std::min(f.min_cell_spearman, rho);
      ++f.cells;
    }
    for (size_t i = 0; i < p.est[c].size(); ++i) {
      err += std::abs(p.est[c][i] - p.sim[c][i]) / p.sim[c][i];
      all_e.push_back(p.est[c][i]);
      all_s.push_back(p.sim[c][i]);
    }
  }
  f.plans = static_cast<int>(all_e.size());
  f.mean_cell_spearman /= std::max(1, f.cells);
  f.pooled_spearman = spearman(all_e, all_s);
  f.mean_abs_rel_error = err / std::max(1, f.plans);
  f.estimate_us = p.estimates ? 1e6 * p.seconds / p.estimates : 0;
  f.warm_estimate_us = p.estimates ? 1e6 * p.warm_seconds / p.estimates : 0;
  return f;
}

planner::EstimatorCoefficients fit_estimator_coefficients() {
  planner::EstimatorCoefficients k;
  double* fields[] = {&k.compute, &k.p2p, &k.dp, &k.ep};
  double best = mean_squared_log_ratio(price(k, false));
  // Factors 2^(i/16), i = -16..16, around the current value; three sweeps.
  for (int sweep = 0; sweep < 3; ++sweep)
    for (double* f : fields) {
      const double centre = *f;
      double best_value = centre;
      for (int i = -16; i <= 16; ++i) {
        *f = centre * std::exp2(i / 16.0);
        const double loss = mean_squared_log_ratio(price(k, false));
        if (loss < best) best = loss, best_value = *f;
      }
      *f = best_value;
    }
  return k;
}

}  // namespace arachne::test
