// One simulated training iteration of GPT-3 175B on 1,024 A100-80 (128 x 8; TP8 PP16 DP8, micro-batch 1,
// global batch 1536, full recompute) — the speed target is <= 0.2 s on one core. Reports events/s.
#include <benchmark/benchmark.h>

#include "sim/exec/simulate.h"
#include "sim/plan/plan_yaml.h"

namespace arachne {
namespace {

struct Gpt3Setup {
  GpuCatalog catalog = GpuCatalog::load_default();
  Cluster cluster = parse_cluster_spec("A100-80:128x8", catalog);
  Topology topo{cluster};
  ModelConfig model = load_model("gpt3-175b");
  Plan plan;
  Gpt3Setup() {
    Shorthand s;
    s.tp = 8;
    s.pp = 16;
    s.dp = 8;
    s.micro_batch = 1;
    s.global_batch = 1536;
    s.recompute = Recompute::Full;
    plan = plan_from_shorthand(s, cluster, model);
  }
};

void BM_Gpt3_175B_1024xA100(benchmark::State& state) {
  static const Gpt3Setup setup;
  SimOptions opt;
  opt.exact_shortcuts = state.range(0) != 0;
  const SimResult once = simulate_iteration(setup.cluster, setup.topo, setup.model, setup.plan, opt);
  for (auto _ : state) {
    SimResult r = simulate_iteration(setup.cluster, setup.topo, setup.model, setup.plan, opt);
    benchmark::DoNotOptimize(r);
  }
  state.counters["events"] = static_cast<double>(once.events);
  state.counters["events_per_s"] =
      benchmark::Counter(static_cast<double>(once.events) * state.iterations(), benchmark::Counter::kIsRate);
  state.counters["simulated_iteration_s"] = once.iteration_time_s;
  state.counters["mfu"] = once.mfu;
}
// Arg 1: exact shortcuts on (coupled-component rate recomputation); Arg 0: every rate recomputed at every event.
BENCHMARK(BM_Gpt3_175B_1024xA100)->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond)->MinTime(2.0);

}  // namespace
}  // namespace arachne


namespace arachne {
namespace {

// Mixtral-8x7B on 64 H100 (8 x 8; TP1 PP4 EP8 DP16, global batch 256, as deployed with Megatron-Core):
// one simulated iteration; the MoE issue's target is <= 0.25 s on one core.
void BM_Mixtral_64xH100(benchmark::State& state) {
  static const GpuCatalog catalog = GpuCatalog::load_default();
  static const Cluster cluster = parse_cluster_spec("H100:8x8", catalog);
  static const Topology topo{cluster};
  static const ModelConfig model = load_model("mixtral-8x7b");
  Shorthand s;
  s.tp = 1;
  s.pp = 4;
  s.dp = 16;
  s.ep = 8;
  s.micro_batch = 1;
  s.global_batch = 256;
  s.recompute = Recompute::Full;
  static const Plan plan = plan_from_shorthand(s, cluster, model);
  SimOptions opt;
  opt.ignore_memory = true;
  const SimResult once = simulate_iteration(cluster, topo, model, plan, opt);
  for (auto _ : state) {
    SimResult r = simulate_iteration(cluster, topo, model, plan, opt);
    benchmark::DoNotOptimize(r);
  }
  state.counters["events"] = static_cast<double>(once.events);
  state.counters["simulated_iteration_s"] = once.iteration_time_s;
  state.counters["ep_comm_s"] = once.breakdown.ep_comm;
  state.counters["mfu"] = once.mfu;
}
BENCHMARK(BM_Mixtral_64xH100)->Unit(benchmark::kMillisecond)->MinTime(2.0);

}  // namespace
}  // namespace arachne

BENCHMARK_MAIN();
