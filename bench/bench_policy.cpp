// Plain-C++ policy inference: encoding a request and a beam decode of width K for a 1,024-GPU cluster of
// four GPU types, with the default network shape (policy_weights.h) and randomly drawn weights (a trained
// network costs the same per token). Reports the time per decode and the tokens decoded.
//
// Decoding is masked by the template grammar (TokenGrammar), whose cost per step is included.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "planner/arachne/features.h"
#include "planner/arachne/policy_net.h"
#include "planner/template/tokens.h"
#include "sim/model/model.h"

namespace arachne::planner {
namespace {

PolicyNet random_default_net(uint64_t seed) {
  const PolicyShape shape = template_policy_shape();
  PolicyWeights w;
  w.shape = shape;
  std::mt19937_64 rng(seed);
  for (const ParameterSpec& p : policy_parameters(shape)) {
    // Torch's default initialisation scale: U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
    const double bound = 1.0 / std::sqrt(static_cast<double>(p.dims.size() > 1 ? p.dims[1] : p.dims[0]));
    std::uniform_real_distribution<float> u(static_cast<float>(-bound), static_cast<float>(bound));
    int64_t n = 1;
    for (int64_t d : p.dims) n *= d;
    for (int64_t i = 0; i < n; ++i) w.tensors[p.name].push_back(u(rng));
  }
  return PolicyNet(w);
}

void BM_PolicyBeam_1024Gpus_4Types(benchmark::State& state) {
  const int width = static_cast<int>(state.range(0));
  const GpuCatalog catalog = GpuCatalog::load_default();
  const Cluster cluster = parse_cluster_spec("A100-80:40x8,H100:32x8,V100-32:32x8,T4:48x4", catalog);
  const ModelConfig model = load_model("gpt3-13b");
  const RequestFeatures f = request_features(cluster, model, 1024);
  const TokenGrammar grammar(cluster, model);
  const PolicyNet net = random_default_net(1);
  size_t tokens = 0;
  for (auto _ : state) {
    const std::vector<DecodedSequence> best = net.beam(f, grammar, width);
    tokens = 0;
    for (const DecodedSequence& s : best) tokens += s.tokens.size();
    benchmark::DoNotOptimize(best);
  }
  state.counters["mean_tokens_per_sequence"] = static_cast<double>(tokens) / width;
  state.counters["parameters"] = static_cast<double>(parameter_count(net.shape()));
}
BENCHMARK(BM_PolicyBeam_1024Gpus_4Types)->Arg(1)->Arg(8)->Arg(32)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace arachne::planner
BENCHMARK_MAIN();
