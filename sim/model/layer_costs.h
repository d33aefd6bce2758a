// Per-layer work of GPT- and Llama-style transformer blocks, per GPU of a tensor-parallel group:
// FLOPs and HBM bytes of every kernel class, TP communication volumes and parameter counts.
// FLOP counts after Narayanan et al. SC'21 (Megatron-LM, eq. 3: 24·b·s·h² + 4·b·s²·h per layer forward)
// generalised to GQA and SwiGLU; backward = 2x forward matmul FLOPs (dgrad + wgrad).
// A layer's kernels, collectives and parameters depend on its index only through ModelConfig::is_moe_layer
// (planner/common/layer_prices.cpp prices each kind once; tests/sim/layer_costs_test.cpp checks it).
#pragma once
#include <vector>

#include "sim/model/model.h"

namespace arachne {

// Attention: the unfused score and context batched matmuls; FlashAttention*: the fused kernels
// (sim/model/flash_attention.h).
enum class OpClass { Gemm, Attention, Memory, FlashAttentionForward, FlashAttentionBackward };
inline bool is_flash_attention(OpClass c) {
  return c == OpClass::FlashAttentionForward || c == OpClass::FlashAttentionBackward;
}

struct OpCost {
  OpClass cls = OpClass::Gemm;
  double flops = 0;  // floating-point operations on one GPU
  double bytes = 0;  // HBM bytes read + written on one GPU
};

// How a stage is executed; shared by costs and memory.
struct ShardSpec {
  int tp = 1;
  bool sequence_parallel = false;
  double samples = 1;  // sequences in this micro-batch on this TP group (micro_batch x share)
};

enum class Recompute { None, Selective, Full };

// Kernels of one transformer layer, forward, on one TP rank.
std::vector<OpCost> layer_forward_ops(const ModelConfig& m, int layer, const ShardSpec& s);
// Kernels of one transformer layer, backward (input and weight gradients), on one TP rank.
std::vector<OpCost> layer_backward_ops(const ModelConfig& m, int layer, const ShardSpec& s);
// Kernels re-executed before backward under the recompute policy (full: the whole forward;
// selective: the unfused attention core only, Korthikanti et al. 2022 §4, nothing with flash attention;
// none: nothing).
std::vector<OpCost> layer_recompute_ops(const ModelConfig& m, int layer, const ShardSpec& s, Recompute r);
// Embedding lookup (first stage) and output head + cross-entropy loss (last stage).
std::vector<OpCost> embedding_forward_ops(const ModelConfig& m, const ShardSpec& s);
std::vector<OpCost> embedding_backward_ops(const ModelConfig& m, const ShardSpec& s);
std::vector<OpCost> head_forward_ops(const ModelConfig& m, const ShardSpec& s);
std::vector<OpCost> head_backward_ops(const ModelConfig& m, const ShardSpec& s);

// TP collectives of one layer in one direction: Megatron does 2 all-reduces forward (after attention
// and after MLP) and 2 backward (Shoeybi et al. 2019 §3); with sequence parallelism each becomes a
// reduce-scatter + all-gather pair of the same total volume (Korthikanti et al. 2022 §4.2.2).
// OpCost is declared above; a collective may run beside a kernel instead of before the next one.
struct TpCollectives {
  int count = 0;        // collectives per layer per direction
  double bytes = 0;     // full tensor size of each (b·s·h·dtype bytes)
  OpCost overlaps{OpClass::Gemm, 0.0, 0.0};  // the kernel each one runs beside (none: it blocks the stream)
};
TpCollectives layer_tp_collectives(const ModelConfig& m, const ShardSpec& s);
// Backward of a layer: the two column-parallel linears (QKV, fc1) all-reduce their input gradient
// asynchronously while computing their weight gradient (Megatron-LM
// LinearWithGradAccumulationAndAsyncCommunication, core/tensor_parallel/layers.py, on by default since
// 2021; with sequence parallelism the reduce-scatter overlaps the same way). One entry per linear, each
// overlapping that linear's weight-gradient GEMM. MoE layers: the attention's only, the expert FFN's
// collectives block.
std::vector<TpCollectives> layer_tp_backward_collectives(const ModelConfig& m, int layer, const ShardSpec& s);
// TP collectives of the ends of the model in one direction (empty when tp = 1):
//  - embedding forward: the vocab-parallel embedding all-reduces its b·s·h output (Megatron
//    VocabParallelEmbedding, reduce_from_tensor_model_parallel_region); backward: none (that reduce's
//    gradient is the identity), and full recompute does not re-run the embedding (only the layers).
//  - head forward: the vocab-parallel cross-entropy all-reduces three b·s fp32 vectors (max logit, target
//    logit, sum of exponentials; megatron/core/tensor_parallel/cross_entropy.py); backward: the head's
//    input gradient, b·s·h (copy_to_tensor_model_parallel_region in parallel_lm_logits).
std::vector<TpCollectives> embedding_tp_collectives(const ModelConfig& m, const ShardSpec& s, bool forward);
std::vector<TpCollectives> head_tp_collectives(const ModelConfig& m, const ShardSpec& s, bool forward);

// Activation (or its gradient) sent between pipeline stages per micro-batch: b·s·h·dtype bytes
// (per TP rank divided by tp when scatter/gather or sequence parallelism splits it).
double p2p_bytes(const ModelConfig& m, double samples);

// Parameters held by one TP rank.
double layer_params_per_rank(const ModelConfig& m, int layer, int tp);
double embedding_params_per_rank(const ModelConfig& m, int tp);  // word + position (GPT) embeddings
// Output head + final norm on the last stage: V·h/t + norm. Counted for tied (GPT) models too, since with
// PP > 1 Megatron keeps a copy of the word embedding on the last stage (see .cpp); stage_memory counts the
// matrix once when one stage holds both ends, ModelConfig::parameters() counts unique parameters.
double head_params_per_rank(const ModelConfig& m, int tp);
int bytes_per_element(const ModelConfig& m);

// Building blocks shared by the layer and MoE cost functions.
OpCost gemm_op(double M, double K, double N, double element_bytes);  // M x K times K x N
std::vector<OpCost> backward_of(std::vector<OpCost> forward_ops);     // input + weight gradients of each kernel  // 2 for bf16/fp16

}  // namespace arachne
