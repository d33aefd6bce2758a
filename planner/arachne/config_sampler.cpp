#include "planner/arachne/config_sampler.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <sstream>

#include "sim/core/splitmix.h"
#include "sim/io/input_error.h"

namespace arachne::planner {
namespace {

// Every draw below comes from one splitmix64 stream (portable: the same on every standard library).
class Rng : public SplitMix64 {
 public:
  using SplitMix64::SplitMix64;
  int below(int n) { return static_cast<int>(SplitMix64::below(static_cast<std::uint64_t>(n))); }  // [0, n)
  template <class T, std::size_t N>
  T pick(const std::array<T, N>& a) { return a[static_cast<std::size_t>(below(static_cast<int>(N)))]; }
};

std::uint64_t stream_seed(std::uint64_t seed, std::uint64_t index, Split split) {
  Rng mix(seed ^ (0x5851f42d4c957f2dULL * (index + 1)) ^ (split == Split::HeldOut ? 0xa5a5a5a5ULL : 0));
  mix.next();
  return mix.next();
}

// Mixed-precision Adam: 2 + 2 + 12 bytes of weights, gradients and optimizer state plus fp32 gradient
// accumulation headroom, 18 bytes per parameter (Rajbhandari et al. 2020, ZeRO §3).
constexpr double kTrainingStateBytesPerParam = 18.0;
constexpr double kMemoryHeadroom = 1.5;
constexpr int kModelRedraws = 64;

std::vector<std::string> draw_family(Rng& rng, const std::vector<std::string>& pool, Split split, int modulus) {
  static constexpr std::array<double, 4> kTypeCountCdf{0.2, 0.5, 0.8, 1.0};
  constexpr int kFamilyRedraws = 100000;
  for (int attempt = 0; attempt < kFamilyRedraws; ++attempt) {
    const double u = rng.real();
    int k = 1;
    while (k < 4 && u >= kTypeCountCdf[static_cast<std::size_t>(k - 1)]) ++k;
    k = std::min<int>(k, static_cast<int>(pool.size()));
    std::vector<std::string> left = pool, chosen;
    for (int i = 0; i < k; ++i) {
      const int j = rng.below(static_cast<int>(left.size()));
      chosen.push_back(left[static_cast<std::size_t>(j)]);
      left.erase(left.begin() + j);
    }
    std::sort(chosen.begin(), chosen.end());
    if (held_out_family(family_name(chosen), modulus) == (split == Split::HeldOut)) return chosen;
  }
  throw InputError("gen-data", std::string("no GPU-type family of the pool belongs to the ") +
                                   (split == Split::HeldOut ? "held-out" : "training") + " split");
}

// GPUs per type: total log-uniform in [min, max], split by normalised uniform(0.2, 1) weights.
std::vector<int> draw_type_gpus(Rng& rng, int types, int min_gpus, int max_gpus) {
  const int total = static_cast<int>(std::lround(std::exp(rng.real(std::log(min_gpus), std::log(max_gpus)))));
  std::vector<double> w(static_cast<std::size_t>(types));
  double sum = 0;
  for (double& x : w) sum += (x = rng.real(0.2, 1.0));
  std::vector<int> gpus;
  for (double x : w) gpus.push_back(std::max(1, static_cast<int>(std::lround(total * x / sum))));
  return gpus;
}

// One type's node groups as spec items: whole nodes of a drawn size, maybe 1-2 partial nodes.
std::vector<std::string> draw_nodes(Rng& rng, const std::string& type, int gpus) {
  static constexpr std::array<int, 4> kNodeSizes{1, 2, 4, 8};
  int size = rng.pick(kNodeSizes);
  while (size > gpus) size /= 2;
  const int nodes = std::max(1, gpus / size);
  std::vector<std::string> items;
  int partial = 0;
  if (size > 1 && rng.real() < 0.3) partial = std::min(nodes - 1, 1 + rng.below(2));
  if (nodes - partial > 0) items.push_back(type + ":" + std::to_string(nodes - partial) + "x" + std::to_string(size));
  for (int i = 0; i < partial; ++i) items.push_back(type + ":1x" + std::to_string(1 + rng.below(size - 1)));
  return items;
}

Cluster draw_cluster(Rng& rng, const std::vector<std::string>& family, const ConfigSamplerOptions& opt,
                     const GpuCatalog& catalog) {
  const std::vector<int> gpus = draw_type_gpus(rng, static_cast<int>(family.size()), opt.min_gpus, opt.max_gpus);
  std::string spec;
  for (std::size_t t = 0; t < family.size(); ++t)
    for (const std::string& item : draw_nodes(rng, family[t], gpus[t])) spec += (spec.empty() ? "" : ",") + item;
  Cluster c = parse_cluster_spec(spec, catalog);
  static constexpr std::array<double, 4> kNicScale{0.25, 0.5, 1.0, 2.0};
  std::vector<double> nic_scale;  // one per type, in family order
  for (std::size_t t = 0; t < family.size(); ++t) nic_scale.push_back(rng.pick(kNicScale));
  for (NodeGroup& g : c.groups) {
    const auto t = static_cast<std::size_t>(std::find(family.begin(), family.end(), g.gpu) - family.begin());
    g.nic_bw *= nic_scale[t];
  }
  static constexpr std::array<int, 3> kLeafSizes{8, 16, 32};
  static constexpr std::array<double, 4> kOversubscription{1.0, 1.0, 2.0, 3.0};
  c.network.nodes_per_leaf = rng.pick(kLeafSizes);
  c.network.oversubscription = rng.pick(kOversubscription);
  return c;
}

double cluster_memory_bytes(const Cluster& c) {
  double bytes = 0;
  for (const NodeGroup& g : c.groups) bytes += static_cast<double>(g.nodes) * g.gpus_per_node * c.catalog.at(g.gpu).memory_bytes;
  return bytes;
}

bool fits(const ModelConfig& m, const Cluster& c) {
  return kMemoryHeadroom * kTrainingStateBytesPerParam * m.parameters() <= cluster_memory_bytes(c);
}

ModelConfig draw_model(Rng& rng, const ConfigSamplerOptions& opt, const Cluster& c) {
  for (int attempt = 0; attempt < kModelRedraws; ++attempt) {
    const bool moe = !opt.moe_models.empty() && (opt.dense_models.empty() || rng.real() < opt.moe_fraction);
    const std::vector<std::string>& pool = moe ? opt.moe_models : opt.dense_models;
    ModelConfig m = load_model(pool[static_cast<std::size_t>(rng.below(static_cast<int>(pool.size())))]);
    if (fits(m, c)) return m;
  }
  std::vector<ModelConfig> all;
  for (const auto* pool : {&opt.dense_models, &opt.moe_models})
    for (const std::string& name : *pool) all.push_back(load_model(name));
  std::sort(all.begin(), all.end(), [](const ModelConfig& a, const ModelConfig& b) { return a.parameters() < b.parameters(); });
  for (const ModelConfig& m : all)
    if (fits(m, c)) return m;
  throw InputError("gen-data", "no model of the sampler's lists fits cluster " + c.name);
}

long draw_global_batch(Rng& rng, int gpus) {
  const double lo = std::log2(std::max(32.0, gpus / 4.0)), hi = std::log2(std::max(64.0, 2.0 * gpus));
  const long batch = 1L << static_cast<int>(std::lround(rng.real(lo, hi)));
  return std::min(batch, 4096L);
}

}  // namespace

std::string split_name(Split split) { return split == Split::Train ? "train" : "held-out"; }

Split parse_split(const std::string& text, const std::string& where) {
  if (text == "train") return Split::Train;
  if (text == "held-out") return Split::HeldOut;
  throw InputError(where, "'" + text + "' is not train or held-out");
}

std::string sampler_text(const ConfigSamplerOptions& s, Split split, std::uint64_t seed) {
  std::ostringstream o;
  o << "seed " << seed << ", split " << split_name(split) << ", gpus " << s.min_gpus << "-" << s.max_gpus
    << ", moe_fraction " << s.moe_fraction << ", held_out_modulus " << s.held_out_modulus << ", dense";
  for (const auto& m : s.dense_models) o << " " << m;
  o << ", moe";
  for (const auto& m : s.moe_models) o << " " << m;
  if (!s.gpu_types.empty()) {
    o << ", gpu types";
    for (const auto& t : s.gpu_types) o << " " << t;
  }
  o << "\n";
  return o.str();
}

std::string family_name(std::vector<std::string> gpu_types) {
  std::sort(gpu_types.begin(), gpu_types.end());
  std::string name;
  for (const std::string& t : gpu_types) name += (name.empty() ? "" : "+") + t;
  return name;
}

bool held_out_family(const std::string& family, int modulus) {
  std::uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a, 64 bit
  for (unsigned char ch : family) h = (h ^ ch) * 0x100000001b3ULL;
  return modulus > 0 && h % static_cast<std::uint64_t>(modulus) == 0;
}

SampledConfig draw_config(const ConfigSamplerOptions& opt, const GpuCatalog& catalog, Split split, std::uint64_t seed,
                          std::uint64_t index) {
  std::vector<std::string> pool = opt.gpu_types.empty() ? catalog.names() : opt.gpu_types;
  for (const std::string& t : pool)
    if (!catalog.contains(t)) throw InputError("gen-data", "unknown GPU type '" + t + "'");
  Rng rng(stream_seed(seed, index, split));
  SampledConfig s;
  s.seed = seed;
  s.index = index;
  const std::vector<std::string> family = draw_family(rng, pool, split, opt.held_out_modulus);
  s.family = family_name(family);
  s.cluster = draw_cluster(rng, family, opt, catalog);
  s.cluster.name = "sample-" + std::to_string(seed) + "-" + std::to_string(index) + (split == Split::HeldOut ? "-held-out" : "");
  s.model = draw_model(rng, opt, s.cluster);
  s.global_batch = draw_global_batch(rng, s.cluster.total_gpus());
  return s;
}

}  // namespace arachne::planner
