// Planning time of every registered planner: gpt3-13b (global batch 1024) on a 256-GPU
// cluster of three GPU types (8 H100 + 12 A100-80 + 12 V100-32 nodes of 8), and on 1,024 GPUs of the same
// mix (32 + 48 + 48 nodes), with the default budget of 2,000 simulator evaluations. Counters: simulator and
// own-model evaluations, whether the search finished inside its budget and caps, the planner's own
// predicted iteration time, the simulated time of its plan and the resulting tokens/s (0 when it runs out
// of memory or there is no plan).
// The benchmark runs each planner once (Iterations(1)): a planning run is seconds to minutes long.
#include <benchmark/benchmark.h>

#include <string>

#include "planner/planner.h"
#include "planner/registry.h"
#include "sim/exec/simulate.h"
#include "sim/hw/topology.h"

namespace arachne {
namespace {

void BM_Plan(benchmark::State& state, const std::string& planner, const std::string& spec) {
  const Cluster cluster = load_cluster(spec, GpuCatalog::load_default());
  const Topology topo(cluster);
  ModelConfig model = load_model("gpt3-13b");
  model.global_batch = 1024;
  planner::PlanRequest req;
  req.cluster = &cluster;
  req.topo = &topo;
  req.model = &model;
  req.global_batch = model.global_batch;
  // The oracle simulates every candidate it keeps; on these clusters one simulation takes 0.05-1 s, so it
  // gets Metis's public 300 s wall-clock cap on top of the evaluation budget (it then reports incomplete).
  if (planner == "oracle") req.budget_wall_s = 300;
  planner::PlanResult r;
  for (auto _ : state) r = planner::make_planner(planner)->plan(req);
  state.counters["evaluations"] = static_cast<double>(r.evaluations);
  state.counters["own_evaluations"] = static_cast<double>(r.own_model_evaluations);
  state.counters["complete"] = r.search_complete ? 1 : 0;
  state.counters["predicted_s"] = r.plan ? r.predicted_iteration_time_s : 0;
  double simulated = 0, tps = 0;
  if (r.plan) {
    const SimResult s = simulate_iteration(cluster, topo, model, *r.plan, SimOptions{});
    if (!s.oom) {
      simulated = s.iteration_time_s;
      tps = s.tokens_per_s;
    }
  }
  state.counters["simulated_s"] = simulated;
  state.counters["tokens_per_s"] = tps;
}

const int kRegistered = [] {
  const std::pair<const char*, const char*> clusters[] = {
      {"256gpu", "H100:8x8,A100-80:12x8,V100-32:12x8"},
      {"1024gpu", "H100:32x8,A100-80:48x8,V100-32:48x8"},
  };
  for (const auto& [label, spec] : clusters)
    for (const std::string& p : planner::registered_planner_names()) {
      if (p == "arachne") continue;  // the learned planner needs a trained policy (its own benchmark)
      benchmark::RegisterBenchmark(("BM_Plan/" + p + "/" + label).c_str(), BM_Plan, p, std::string(spec))
          ->Unit(benchmark::kSecond)
          ->Iterations(1);
    }
  return 0;
}();

}  // namespace
}  // namespace arachne

BENCHMARK_MAIN();
