// Planning time of every registered planner on the cells of configs/experiments/planning-time.yaml (the one
// place its cases are declared; `arachne experiment` runs the same file): one benchmark per cell, each run
// once (Iterations(1): a planning run is seconds to minutes long). Counters: simulator and own-model
// evaluations, whether the search finished inside its budget and caps, the planner's own predicted
// iteration time, the simulated time of its plan and the resulting tokens/s (0 when it runs out of memory
// or there is no plan).
#include <benchmark/benchmark.h>

#include <cmath>
#include <string>
#include <vector>

#include "planner/experiment/experiment.h"

namespace arachne {
namespace {

const char* kCases = ARACHNE_SOURCE_DIR "/configs/experiments/planning-time.yaml";

struct Cases {
  GpuCatalog catalog = GpuCatalog::load_default();
  planner::Experiment experiment = planner::load_experiment(kCases, catalog);
  std::vector<planner::ExperimentCell> cells = planner::expand(experiment);
};

const Cases& cases() {
  static const Cases c;
  return c;
}

double or_zero(double v) { return std::isnan(v) ? 0 : v; }

void BM_Plan(benchmark::State& state, std::size_t cell) {
  const Cases& c = cases();
  planner::CellResult r;
  for (auto _ : state) r = planner::run_cell(c.experiment, c.cells[cell], c.catalog);
  const planner::ComparisonOutcome& o = *r.comparison;
  state.counters["evaluations"] = static_cast<double>(o.evaluations);
  state.counters["own_evaluations"] = static_cast<double>(o.own_evaluations);
  state.counters["complete"] = o.search_complete ? 1 : 0;
  state.counters["predicted_s"] = o.has_plan ? or_zero(o.predicted_iteration_time_s) : 0;
  state.counters["simulated_s"] = o.feasible() ? o.iteration_time_s : 0;
  state.counters["tokens_per_s"] = o.feasible() ? o.tokens_per_s : 0;
}

// Registered from main: the experiment parser's tables are static objects of another translation unit, not
// ready during this one's static initialisation.
void register_cells() {
  const Cases& c = cases();
  for (std::size_t i = 0; i < c.cells.size(); ++i) {
    const planner::ExperimentCell& cell = c.cells[i];
    const std::string name = "BM_Plan/" + cell.planner + "/" + std::to_string(c.experiment.clusters.at(cell.cluster).total_gpus()) + "gpu";
    benchmark::RegisterBenchmark(name.c_str(), BM_Plan, i)->Unit(benchmark::kSecond)->Iterations(1);
  }
}

}  // namespace
}  // namespace arachne

int main(int argc, char** argv) {
  arachne::register_cells();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
