// The learned planner end to end (`plan --planner arachne` with the shipped policy and default settings:
// beam 8, two completions per template, the three best-priced plans simulated): one plan for a 1,024-GPU
// cluster of four GPU types, per model. Target (README): <= 100 ms per plan on one core, the final
// simulations included. Counters: simulations, estimator pricings, and the returned plan's iteration time.
#include <benchmark/benchmark.h>

#include "planner/arachne/arachne_planner.h"
#include "sim/hw/topology.h"
#include "sim/model/model.h"

namespace arachne::planner {
namespace {

void plan_once(benchmark::State& state, const std::string& model_name) {
  const GpuCatalog catalog = GpuCatalog::load_default();
  const Cluster cluster = parse_cluster_spec("A100-80:40x8,H100:32x8,V100-32:32x8,T4:48x4", catalog);
  const Topology topo(cluster);
  const ModelConfig model = load_model(model_name);
  PlanRequest r;
  r.cluster = &cluster;
  r.topo = &topo;
  r.model = &model;
  r.global_batch = model.global_batch;
  load_policy("");  // read the weights once, as a long-running process would
  PlanResult res;
  for (auto _ : state) {
    ArachnePlanner p;
    res = p.plan(r);
    benchmark::DoNotOptimize(res);
  }
  state.counters["simulations"] = static_cast<double>(res.evaluations);
  state.counters["priced"] = static_cast<double>(res.own_model_evaluations);
  state.counters["predicted_s"] = res.predicted_iteration_time_s;
  if (!res.plan) state.SkipWithError(res.reason.c_str());
}

void BM_ArachnePlan_1024Gpus_4Types_Gpt3_13b(benchmark::State& state) { plan_once(state, "gpt3-13b"); }
void BM_ArachnePlan_1024Gpus_4Types_Gpt3_1_3b(benchmark::State& state) { plan_once(state, "gpt3-1.3b"); }
BENCHMARK(BM_ArachnePlan_1024Gpus_4Types_Gpt3_13b)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(BM_ArachnePlan_1024Gpus_4Types_Gpt3_1_3b)->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace
}  // namespace arachne::planner

BENCHMARK_MAIN();
