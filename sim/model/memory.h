// Per-GPU memory of a pipeline stage: weights, gradients, optimizer state (mixed-precision Adam,
// ZeRO-1), activations (Korthikanti et al. 2022, "Reducing Activation Recomputation", Table 2 / eq. 1-2)
// times micro-batches in flight under the schedule, and framework overhead.
#pragma once
#include <utility>

#include "sim/model/layer_costs.h"

namespace arachne {

struct MemoryBreakdown {
  double weights = 0;      // bytes
  double gradients = 0;
  double optimizer = 0;
  double activations = 0;
  double other = 0;        // CUDA context, allocator fragmentation, communication buffers
  double total() const { return weights + gradients + optimizer + activations + other; }
};

struct StageMemoryInput {
  int layer_begin = 0, layer_end = 0;
  bool has_embedding = false, has_head = false;
  ShardSpec shard;               // tp, sp, samples per micro-batch
  Recompute recompute = Recompute::None;
  bool zero1 = false;
  int dp = 1;                    // data-parallel degree over which ZeRO-1 shards optimizer state
  double in_flight = 1;          // micro-batches whose activations are held at peak (schedule)
  // Routed experts of each MoE layer this rank holds, in units of experts sharded over `shard.tp` (expert
  // parallelism; moe_layer_params_per_rank). Negative: all of them (no expert parallelism).
  double local_experts = -1;
  int ep = 1;                    // expert-parallel degree (dispatch buffers)
};

MemoryBreakdown stage_memory(const ModelConfig& m, const StageMemoryInput& in);
// stage_memory with in.in_flight = 0 and = 1 (the memory is affine in in_flight), from one pass over the
// layers: bit for bit the two calls' results.
std::pair<MemoryBreakdown, MemoryBreakdown> stage_memory_idle_and_one(const ModelConfig& m, const StageMemoryInput& in);

// Activation bytes one micro-batch leaves stored for one layer on one TP rank (Korthikanti et al. 2022
// Table 2: sbh(34 + 5as/h) without parallelism; /t with TP+SP; attention core dropped by selective;
// only the layer input (2sbh/t) under full recompute). With flash attention the 5as/h term (2as/h without
// attention dropout) becomes FlashAttention's log-sum-exp, 4as bytes per sb, under every recompute policy
// but full.
double layer_activation_bytes(const ModelConfig& m, int layer, const ShardSpec& s, Recompute r);

}  // namespace arachne
