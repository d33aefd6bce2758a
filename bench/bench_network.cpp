// Event engine and flow network throughput on a 1024-GPU leaf/spine cluster (128 nodes x 8 GPUs, 8 NICs
// per node, 16 nodes per leaf). Reports events/s and flows/s (completed flows per wall second), and the
// mean number of flows whose rates each reallocation recomputed (the connected component's size). Also the
// time to build the topology and flow network of the largest supported clusters (BM_LargestTopology).
#include <benchmark/benchmark.h>

#include <functional>
#include <numeric>
#include <random>
#include <string>

#include "sim/net/collectives.h"

namespace arachne {
namespace {

Cluster big_cluster(int nodes = 128) {
  Cluster c;
  c.name = "bench-1024";
  c.source = "bench_network.cpp";
  c.network.nodes_per_leaf = 16;
  GpuSpec spec;
  spec.name = "BENCHGPU";
  c.catalog.add(spec);
  c.groups.push_back(NodeGroup{"BENCHGPU", nodes, 8, LinkKind::NvLink, 300e9, 8, 25e9});
  for (int n = 0; n < nodes; ++n) c.nodes.push_back(Node{n, 0, n * 8, 8});
  return c;
}

const Topology& topology() {
  static const Topology topo(big_cluster());  // built once; read-only afterwards
  return topo;
}

void report(benchmark::State& state, std::uint64_t flows, std::uint64_t reallocs, std::uint64_t recomputed) {
  state.counters["flows/s"] = benchmark::Counter(static_cast<double>(flows), benchmark::Counter::kIsRate);
  state.counters["flows"] = static_cast<double>(flows) / static_cast<double>(state.iterations());
  state.counters["flows/realloc"] =
      reallocs ? static_cast<double>(recomputed) / static_cast<double>(reallocs) : 0.0;
}

// Pure engine: 10^6 events, each scheduling its successor at a pseudo-random offset among ~1000 pending.
void BM_EngineEvents(benchmark::State& state) {
  const int total = static_cast<int>(state.range(0));
  for (auto _ : state) {
    Engine e;
    std::uint64_t x = 12345;
    int left = total;
    std::function<void()> tick = [&] {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      if (--left > 0) e.schedule_after(static_cast<TimeNs>(x >> 54), tick);
    };
    for (int i = 0; i < 1000; ++i) e.schedule_at(i, tick);
    e.run();
    benchmark::DoNotOptimize(e.executed());
  }
  state.counters["events/s"] = benchmark::Counter(static_cast<double>(total) * static_cast<double>(state.iterations()),
                                                  benchmark::Counter::kIsRate);
}
BENCHMARK(BM_EngineEvents)->Arg(1000000)->Unit(benchmark::kMillisecond);

// Random point-to-point transfers between GPUs of different nodes (they cross NICs, leaves and the spine),
// `concurrency` in flight: each completion starts the next, until `total` flows have run. Third argument 1:
// recompute every active flow at each change (FlowNetwork::Recompute::Global) for comparison.
void BM_RandomSends(benchmark::State& state) {
  const int concurrency = static_cast<int>(state.range(0));
  const int total = static_cast<int>(state.range(1));
  const auto mode = state.range(2) ? FlowNetwork::Recompute::Global : FlowNetwork::Recompute::Component;
  const Topology& topo = topology();
  std::uint64_t flows = 0, reallocs = 0, recomputed = 0;
  for (auto _ : state) {
    Engine e;
    FlowNetwork net(e, topo.links(), mode);
    CollectiveContext ctx{e, net, topo};
    std::mt19937_64 rng(7);
    int started = 0;
    std::function<void()> next = [&] {
      if (started >= total) return;
      ++started;
      const GpuId a = static_cast<GpuId>(rng() % 1024);
      const GpuId b = static_cast<GpuId>((a + 8 * (1 + rng() % 127)) % 1024);
      send(ctx, a, b, static_cast<double>(1 + rng() % 64) * 1e6, next);
    };
    for (int i = 0; i < concurrency; ++i) next();
    e.run();
    flows += net.flows_started();
    reallocs += net.reallocations();
    recomputed += net.flows_recomputed();
  }
  report(state, flows, reallocs, recomputed);
}
BENCHMARK(BM_RandomSends)
    ->Args({64, 100000, 0})
    ->Args({200, 100000, 0})
    ->Args({200, 20000, 1})
    ->Args({1000, 20000, 0})
    ->Unit(benchmark::kMillisecond);

// A training-iteration-like mix: per step, every node runs a TP all-reduce inside each group of 8 GPUs
// (8 ring edges on NVLink, disjoint per node) and every 8th step all 8 DP rings (one per local rank, 128
// nodes each) all-reduce a gradient bucket across the leaf/spine network. `steps` steps chained.
void BM_IterationMix(benchmark::State& state) {
  const int steps = static_cast<int>(state.range(0));
  const Topology& topo = topology();
  std::uint64_t flows = 0, reallocs = 0, recomputed = 0;
  for (auto _ : state) {
    Engine e;
    FlowNetwork net(e, topo.links());
    CollectiveContext ctx{e, net, topo};
    // each node advances its own chain of TP all-reduces
    std::vector<int> left(128, steps);
    std::function<void(int)> tp_step = [&](int node) {
      if (left[static_cast<std::size_t>(node)]-- <= 0) return;
      std::vector<GpuId> m(8);
      std::iota(m.begin(), m.end(), node * 8);
      allreduce(ctx, m, 16e6 * (1 + node % 3), [&tp_step, node] { tp_step(node); });
    };
    for (int n = 0; n < 128; ++n) tp_step(n);
    int dp_left = steps / 8;
    std::function<void()> dp_step = [&] {
      if (dp_left-- <= 0) return;
      std::vector<std::vector<GpuId>> rings(8);
      for (int r = 0; r < 8; ++r) {
        for (int n = 0; n < 128; ++n) rings[static_cast<std::size_t>(r)].push_back(n * 8 + r);
      }
      ring_collective(ctx, CollectiveKind::AllReduce, rings, 100e6, dp_step);
    };
    dp_step();
    e.run();
    flows += net.flows_started();
    reallocs += net.reallocations();
    recomputed += net.flows_recomputed();
  }
  report(state, flows, reallocs, recomputed);
}
BENCHMARK(BM_IterationMix)->Arg(100)->Unit(benchmark::kMillisecond);

// Building the topology of the largest clusters the CLI accepts (65,536 GPUs): in nodes of 1 GPU (the most
// nodes), of 2 GPUs next to 8-GPU nodes (the fuzzer's slowest specs), and of 8 GPUs; then the flow network
// every simulation builds on it. Arg: GPUs per node of the bulk of the cluster.
void BM_LargestTopology(benchmark::State& state) {
  const GpuCatalog catalog = GpuCatalog::load_default();
  const int per_node = static_cast<int>(state.range(0));
  const std::string spec = per_node == 2 ? "H100:34x8,A100-80:32632x2"
                                         : "A100-80:" + std::to_string(65536 / per_node) + "x" + std::to_string(per_node);
  const Cluster c = parse_cluster_spec(spec, catalog);
  std::size_t links = 0;
  for (auto _ : state) {
    const Topology topo(c);
    Engine engine;
    const FlowNetwork net(engine, topo.links());
    links = topo.links().size();
    benchmark::DoNotOptimize(&net);
  }
  state.counters["links"] = static_cast<double>(links);
  state.counters["gpus"] = static_cast<double>(c.total_gpus());
}
BENCHMARK(BM_LargestTopology)->Arg(1)->Arg(2)->Arg(8)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace arachne

BENCHMARK_MAIN();
