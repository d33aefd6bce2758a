// One simulated training iteration of GPT-3 175B on 1,024 A100-80 (128 x 8; TP8 PP16 DP8, micro-batch 1,
// global batch 1536, full recompute) — target <= 30 ms on one core. Reports events/s.
#include <benchmark/benchmark.h>

#include "bench/iteration_cases.h"

namespace arachne {
namespace {

void BM_Gpt3_175B_1024xA100(benchmark::State& state) {
  static const IterationCase setup = gpt3_175b_case();
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
// one simulated iteration; target <= 50 ms on one core.
void BM_Mixtral_64xH100(benchmark::State& state) {
  static const IterationCase c = mixtral_case();
  const Cluster& cluster = c.cluster;
  const Topology& topo = c.topo;
  const ModelConfig& model = c.model;
  const Plan& plan = c.plan;
  SimOptions opt;
  opt.ignore_memory = true;
  opt.checked_bundles = state.range(0) != 0;
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
// Arg 1: every exact shortcut; Arg 0: all but the checked bundles (sim/net/flow_network.h).
BENCHMARK(BM_Mixtral_64xH100)->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond)->MinTime(2.0);

// gpt-moe-1.3b-64e on 768 H100 whose expert all-to-alls cross leaves (bench/iteration_cases.h): one
// simulated iteration; a finding, no target.
void BM_MoeAcrossLeaves_768xH100(benchmark::State& state) {
  static const IterationCase c = moe_across_leaves_case();
  const SimOptions opt;
  const SimResult once = simulate_iteration(c.cluster, c.topo, c.model, c.plan, opt);
  for (auto _ : state) {
    SimResult r = simulate_iteration(c.cluster, c.topo, c.model, c.plan, opt);
    benchmark::DoNotOptimize(r);
  }
  state.counters["events"] = static_cast<double>(once.events);
  state.counters["simulated_iteration_s"] = once.iteration_time_s;
  state.counters["ep_comm_s"] = once.breakdown.ep_comm;
}
BENCHMARK(BM_MoeAcrossLeaves_768xH100)->Unit(benchmark::kMillisecond)->MinTime(2.0);

}  // namespace
}  // namespace arachne

BENCHMARK_MAIN();
