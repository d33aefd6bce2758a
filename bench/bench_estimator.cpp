// The fast estimator (planner/template/estimator.h): microseconds per estimate of a 1,024-GPU plan over four
// GPU types, and of the 1,024-GPU GPT-3 175B plan that bench_iteration simulates, with warm caches (a
// planner pricing many plans on one cluster) and cold (a fresh estimator per plan).
#include <benchmark/benchmark.h>

#include "bench/iteration_cases.h"
#include "planner/template/estimator.h"

namespace arachne {
namespace {

// GPT-3 13B on 1,024 GPUs of four types (H100, A100-80, V100-32: 32 nodes of 8; A10: 64 nodes of 4): per
// type, pipelines of four nodes (one stage per node, TP = the node), 40 pipelines, micro-batch 1 x 16,
// full recompute, ZeRO-1.
struct FourTypeCase {
  GpuCatalog catalog = GpuCatalog::load_default();
  Cluster cluster = parse_cluster_spec("H100:32x8,A100-80:32x8,V100-32:32x8,A10:64x4", catalog);
  Topology topo{cluster};
  ModelConfig model = load_model("gpt3-13b");
  Plan plan;
  FourTypeCase() {
    plan.recompute = Recompute::Full;
    plan.zero1 = true;
    const int pp = 4, per_stage = model.layers / pp;
    for (size_t n = 0; n + pp <= cluster.nodes.size(); n += pp) {
      Pipeline pl;
      pl.micro_batch = 1;
      pl.micro_batches = 16;
      for (int k = 0; k < pp; ++k) {
        const Node& node = cluster.nodes[n + k];
        Stage st;
        st.layer_begin = k * per_stage;
        st.layer_end = k == pp - 1 ? model.layers : (k + 1) * per_stage;
        TpGroup g;
        for (int i = 0; i < node.gpus; ++i) g.gpus.push_back(node.first_gpu + i);
        g.tp = node.gpus;
        st.groups.push_back(g);
        pl.stages.push_back(st);
      }
      plan.pipelines.push_back(pl);
    }
    model.global_batch = plan.global_batch();
    validate_plan(plan, cluster, model, model.global_batch, "bench");
  }
};

// The estimate beside the simulator's iteration time of the same plan (simulated once per case).
template <class Case>
void run(benchmark::State& state, const Case& c) {
  const planner::Estimator warm(c.cluster, c.topo, c.model);
  const planner::Estimate once = warm.estimate(c.plan);
  const bool cold = state.range(0) != 0;
  for (auto _ : state) {
    if (cold) {
      const planner::Estimator fresh(c.cluster, c.topo, c.model);
      benchmark::DoNotOptimize(fresh.estimate(c.plan));
    } else {
      benchmark::DoNotOptimize(warm.estimate(c.plan));
    }
  }
  static const double simulated = simulate_iteration(c.cluster, c.topo, c.model, c.plan, SimOptions{}).iteration_time_s;
  state.counters["estimated_iteration_s"] = once.iteration_s;
  state.counters["simulated_iteration_s"] = simulated;
  state.counters["fits"] = once.fits;
}

void BM_Estimate_1024Gpus_FourTypes(benchmark::State& state) {
  static const FourTypeCase c;
  run(state, c);
}
void BM_Estimate_Gpt3_175B_1024xA100(benchmark::State& state) {
  static const IterationCase c = gpt3_175b_case();
  run(state, c);
}
// Arg 0: warm caches (one estimator, many plans); Arg 1: a fresh estimator per plan.
BENCHMARK(BM_Estimate_1024Gpus_FourTypes)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Estimate_Gpt3_175B_1024xA100)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace arachne
BENCHMARK_MAIN();
