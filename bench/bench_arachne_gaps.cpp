// How far below the best-priced plan the learned planner's other best-priced plans simulate: for
// configurations of the evaluation's sampler (held-out GPU-type families, planner/arachne/config_sampler.h),
// the plans arachne_priced_plans returns (default settings) are simulated, the first `top` of them, and one
// row per configuration prints each one's price and simulated time relative to the best-priced plan's, then a
// summary: in how many configurations the fastest of them is not the best-priced, and the largest price
// excess of such a fastest plan over the best price, dense and MoE apart. This is the measurement behind arachne_simulate_within
// (planner/arachne/arachne_planner.h).
//   build/bench_arachne_gaps CONFIGS SEED MAX_GPUS [TOP=3]
#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "planner/arachne/arachne_planner.h"
#include "planner/arachne/config_sampler.h"
#include "sim/exec/simulate.h"
#include "sim/hw/topology.h"

int main(int argc, char** argv) {
  using namespace arachne;
  using namespace arachne::planner;
  if (argc < 4) {
    std::fprintf(stderr, "usage: bench_arachne_gaps CONFIGS SEED MAX_GPUS [TOP]\n");
    return 2;
  }
  const int configs = std::atoi(argv[1]), top = argc > 4 ? std::atoi(argv[4]) : 3;
  const GpuCatalog catalog = GpuCatalog::load_default();
  ConfigSamplerOptions opt;
  opt.max_gpus = std::atoi(argv[3]);
  load_policy("");
  int wins[2] = {0, 0};
  double worst_excess[2] = {0, 0};
  std::printf("| config | GPUs | model | price / best price, simulated / best-priced's simulated (per plan) |\n|---:|---:|---|---|\n");
  for (int i = 0; i < configs; ++i) {
    const SampledConfig cfg = draw_config(opt, catalog, Split::HeldOut, std::strtoull(argv[2], nullptr, 10), i);
    const Topology topo(cfg.cluster);
    PlanRequest r;
    r.cluster = &cfg.cluster;
    r.topo = &topo;
    r.model = &cfg.model;
    r.global_batch = cfg.global_batch;
    const std::vector<CompletedPlan> plans = arachne_priced_plans(r, cfg.global_batch).merged();
    std::printf("| %d | %d | %s |", i, cfg.cluster.total_gpus(), cfg.model.name.c_str());
    double first = 0, fastest = 0, fastest_price = 1;
    const bool moe = cfg.model.moe.has_value();
    for (int k = 0; k < top && k < static_cast<int>(plans.size()); ++k) {
      const SimResult s = simulate_iteration(cfg.cluster, topo, cfg.model, plans[k].plan, SimOptions{});
      const double price = plans[k].priced_s / plans[0].priced_s;
      if (s.oom) {
        std::printf(" %.4f oom;", price);
        continue;
      }
      if (first == 0) first = fastest = s.iteration_time_s;
      std::printf(" %.4f %.4f;", price, s.iteration_time_s / first);
      if (s.iteration_time_s < fastest) fastest = s.iteration_time_s, fastest_price = price;
    }
    if (fastest < first) {
      ++wins[moe];
      worst_excess[moe] = std::max(worst_excess[moe], fastest_price - 1);
    }
    std::printf(" |\n");
    std::fflush(stdout);
  }
  std::printf("\nThe fastest simulated plan is not the best-priced: dense %d configurations (largest price excess "
              "%.2f %%), MoE %d (%.2f %%).\n",
              wins[0], 100 * worst_excess[0], wins[1], 100 * worst_excess[1]);
}
