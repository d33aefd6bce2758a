// Plain-C++ policy inference: encoding a request and a beam decode of width K for a 1,024-GPU cluster of
// four GPU types, with the default network shape (policy_weights.h) and randomly drawn weights (a trained
// network costs the same per token). Reports the time per decode and the tokens decoded.
//
// The grammar is a stand-in with the template grammar's structure and vocabulary size (tokens.h: Bos,
// Eos, Pipeline, Stage, 8 Type, 4 Tp, 32 Count, 8 Ep, 2 Scope, Uneven = 59 ids), capped at 2 pipeline
// classes of at most 8 stages and 2 GPU types per stage, without GPU accounting. It bounds what decoding
// costs per token; the planner's TokenGrammar adds its own (small) cost per step.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "planner/arachne/features.h"
#include "planner/arachne/policy_net.h"
#include "sim/model/model.h"

namespace arachne::planner {
namespace {

constexpr int kBos = 0, kEos = 1, kPipeline = 2, kStage = 3, kType0 = 4, kTp0 = 12, kCount0 = 16, kVocabulary = 59;
constexpr int kMaxClasses = 2, kMaxStages = 8, kMaxKinds = 2;

class StandInGrammar {
 public:
  explicit StandInGrammar(int groups) : groups_(groups) {}
  std::vector<int> allowed() const {
    if (tokens_.empty()) return {kBos};
    const int last = tokens_.back();
    if (last == kEos) return {};
    if (last == kBos) return {kPipeline};
    if (last == kPipeline || is_type(last)) return counts();
    if (last == kStage) return {kTp0, kTp0 + 1, kTp0 + 2, kTp0 + 3};
    if (last >= kTp0 && last < kTp0 + 4) return types();
    // A Count: after Pipeline (replicas) the first stage opens; after a Type (TP groups) a kind closes.
    if (tokens_[tokens_.size() - 2] == kPipeline) return {kStage};
    std::vector<int> next;
    if (classes_ < kMaxClasses) next.push_back(kPipeline);
    if (stages_ < kMaxStages) next.push_back(kStage);
    if (kinds_ < kMaxKinds) {
      const std::vector<int> t = types();
      next.insert(next.end(), t.begin(), t.end());
    }
    next.push_back(kEos);
    std::sort(next.begin(), next.end());
    return next;
  }
  void push(int id) {
    tokens_.push_back(id);
    if (id == kPipeline) ++classes_, stages_ = 0;
    if (id == kStage) ++stages_, kinds_ = 0, used_.assign(8, false);
    if (is_type(id)) ++kinds_, used_[id - kType0] = true;
  }

 private:
  static bool is_type(int id) { return id >= kType0 && id < kType0 + 8; }
  static std::vector<int> counts() {
    std::vector<int> c;
    for (int i = 0; i < 32; ++i) c.push_back(kCount0 + i);
    return c;
  }
  std::vector<int> types() const {
    std::vector<int> t;
    for (int k = 0; k < groups_; ++k)
      if (!used_[k]) t.push_back(kType0 + k);
    return t;
  }
  int groups_;
  std::vector<int> tokens_;
  int classes_ = 0, stages_ = 0, kinds_ = 0;
  std::vector<bool> used_ = std::vector<bool>(8, false);
};

PolicyNet random_default_net(uint64_t seed) {
  PolicyShape shape;
  shape.group_features = kGroupFeatures;
  shape.global_features = kGlobalFeatures;
  shape.vocabulary = kVocabulary;
  shape.bos_token = kBos;
  for (int k = 0; k < 8; ++k) shape.type_tokens.push_back(kType0 + k);
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
  const RequestFeatures f = request_features(cluster, {"A100-80", "H100", "T4", "V100-32"}, model, 1024);
  const PolicyNet net = random_default_net(1);
  size_t tokens = 0;
  for (auto _ : state) {
    const std::vector<DecodedSequence> best = net.beam(f, StandInGrammar(f.groups), width);
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
