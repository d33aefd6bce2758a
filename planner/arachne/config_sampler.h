// The training and evaluation configurations of the learned planner: clusters, models and global batches
// drawn so that the policy sees the situations it will be asked about (several GPU generations, nodes of
// different sizes, partial nodes as after preemption, slow and fast NICs, 8 to 1,024 GPUs, dense and MoE).
//
// A configuration is a pure function of (seed, index): draw_config(opt, seed, i) gives the same cluster,
// model and batch on every run and in any order, so a dataset can be generated in shards, resumed after a
// kill, and regenerated bit for bit. The random source is splitmix64 with our own integer and real draws
// (std::*_distribution outputs are not fixed across standard libraries).
//
// Families. A configuration's family is its set of GPU types, written sorted and joined by '+'
// ("A100-80+T4+V100-32"). Evaluation holds out whole families: a family is held out when the FNV-1a hash
// of its name is divisible by `held_out_modulus` (deterministic, about 1/modulus of all families, of every
// size). Split::Train never draws a held-out family; Split::HeldOut draws only held-out families.
//
// The draw, step by step (all choices uniform unless stated):
//   1. family: 1-4 types (probabilities 0.2, 0.3, 0.3, 0.2) from `gpu_types` without repetition;
//      redrawn until it belongs to the split;
//   2. size: total GPUs log-uniform in [min_gpus, max_gpus]; each type's share of it drawn as normalised
//      uniform(0.2, 1) weights, at least one node per type;
//   3. nodes: per type a node size from {1, 2, 4, 8} (capped by the total of that type), whole nodes of it;
//      with probability 0.3 per type, 1-2 of its nodes are partial (1 .. size-1 GPUs), as after preemption;
//   4. links: per type the catalog's default node links, its NIC bandwidth scaled by one of {0.25, 0.5, 1, 2};
//      network: leaf size from {8, 16, 32} nodes, oversubscription from {1, 1, 2, 3};
//   5. model: from `dense_models` or `moe_models` (probability moe_fraction), redrawn (up to 64 times,
//      then smaller models first) until the cluster's total memory holds 1.5x its mixed-precision training
//      state (18 bytes per parameter: Rajbhandari et al. 2020, ZeRO §3);
//   6. global batch: a power of two log-uniform between max(32, G/4) and max(64, 2G), at most 4,096
//      (G = total GPUs).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "sim/hw/cluster.h"
#include "sim/hw/gpu.h"
#include "sim/model/model.h"

namespace arachne::planner {

enum class Split { Train, HeldOut };

struct ConfigSamplerOptions {
  std::vector<std::string> gpu_types;  // empty: every type of the catalog
  std::vector<std::string> dense_models = {"opt-350m", "gpt3-1.3b", "gpt3-2.7b", "gpt3-6.7b", "llama2-7b", "gpt3-13b",
                                           "llama2-13b"};
  std::vector<std::string> moe_models = {"gpt-moe-1.3b-64e", "deepseek-moe-16b", "mixtral-8x7b"};
  double moe_fraction = 0.3;
  int min_gpus = 8;
  int max_gpus = 1024;
  int held_out_modulus = 7;
};

struct SampledConfig {
  std::uint64_t seed = 0;
  std::uint64_t index = 0;
  std::string family;  // sorted GPU types joined by '+'
  Cluster cluster;
  ModelConfig model;
  long global_batch = 0;
};

// Configuration `index` of the stream `seed` for `split`. Throws InputError for an unknown GPU type or
// model name in `opt`, or when no model fits the drawn cluster's memory.
SampledConfig draw_config(const ConfigSamplerOptions& opt, const GpuCatalog& catalog, Split split, std::uint64_t seed,
                          std::uint64_t index);

// The split by name ("train", "held-out"), and back (throws InputError(where, ...) for another name).
std::string split_name(Split split);
Split parse_split(const std::string& text, const std::string& where);

// The sampler's options, split and seed as one line of text ("seed 1, split train, gpus 8-1024, ...\n"),
// for the options a resumed run must share.
std::string sampler_text(const ConfigSamplerOptions& opt, Split split, std::uint64_t seed);

// The family name of a set of GPU types, and whether it is held out.
std::string family_name(std::vector<std::string> gpu_types);
bool held_out_family(const std::string& family, int modulus);

}  // namespace arachne::planner
