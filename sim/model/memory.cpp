// Per-GPU memory of a pipeline stage (Megatron-LM mixed-precision training with Adam).
//
// Model state, per parameter held by the rank (Rajbhandari et al. 2020, ZeRO §3.1, K = 12):
//   weights    2 bytes (bf16/fp16 copy used by the kernels)
//   gradients  4 bytes: Megatron accumulates and all-reduces gradients in an fp32 main_grad buffer
//              (megatron/arguments.py forces accumulate_allreduce_grads_in_fp32 for bf16; with fp16 the
//              optimizer materialises an fp32 copy at the step, so the peak is the same). The buffer is
//              not sharded by the distributed optimizer.
//   optimizer  12 bytes: fp32 master weights + Adam m and v; divided by the DP degree under ZeRO-1
//              (Megatron's distributed optimizer: "6 + 12/d bytes per parameter", docs/distrib_optimizer.md).
// Activations: Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
// §4 and Table 2, per layer and micro-batch, e = 2 bytes, generalised to GQA and SwiGLU as derived below.
#include "sim/model/memory.h"

#include "sim/model/flash_attention.h"
#include "sim/model/moe_costs.h"

#include <algorithm>

namespace arachne {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kWeightBytes = 2.0;     // 16-bit weights
constexpr double kGradBytes = 4.0;       // fp32 main_grad (see above)
constexpr double kOptimizerBytes = 12.0; // fp32 master + Adam m, v (ZeRO §3.1)
// CUDA context, cuBLAS/NCCL workspaces and caching-allocator fragmentation: an estimate (a CUDA context
// alone takes ~0.3-0.8 GiB depending on the GPU and driver; NCCL communicators and fragmentation add
// the rest), not a measurement.
constexpr double kFrameworkOverhead = 1.5 * kGiB;

// The three parts of one layer's stored activations (bytes, full tensors before any TP split).
struct ActivationParts {
  double replicated;  // held whole on every TP rank without sequence parallelism
  double split;       // divided by t by tensor parallelism
  double core;        // attention core: divided by t, dropped by selective recompute when recomputable
  bool core_recomputable;  // unfused attention: selective recompute rebuilds the core instead of storing it
};

// What the attention core keeps for backward beyond Q, K, V and its output (counted in `split`).
// Unfused (Korthikanti §4.1): softmax output 2as²b, dropout mask as²b and dropout output 2as²b = 5as²b
// (GPT); without attention dropout (Llama) only the softmax output 2as²b. Flash: no score matrix, only
// FlashAttention's fp32 log-sum-exp, 4·a·s·b bytes (flash_attention.h).
double attention_core_bytes(const ModelConfig& m, const ShardSpec& sh) {
  if (m.attention == Attention::Flash) return flash_attention_saved_bytes(m, ShardSpec{1, false, sh.samples});
  const double as2b = static_cast<double>(m.heads) * static_cast<double>(m.seq_len) *
                      static_cast<double>(m.seq_len) * sh.samples;
  return (m.gpt_style() ? 5.0 : 2.0) * as2b;
}

ActivationParts activation_parts(const ModelConfig& m, int layer, const ShardSpec& sh) {
  const double sbh = sh.samples * static_cast<double>(m.seq_len) * static_cast<double>(m.hidden);
  const double sb = sh.samples * static_cast<double>(m.seq_len);
  const double kd = static_cast<double>(m.kv_heads) * static_cast<double>(m.head_dim());
  double f = static_cast<double>(m.ffn_hidden);
  if (m.is_moe_layer(layer)) {
    // Activated experts (later issue refines MoE memory: capacity, imbalance, dispatch buffers).
    f = static_cast<double>(m.moe->top_k + m.moe->shared_experts) * static_cast<double>(m.moe->expert_ffn_hidden);
  }
  const bool gpt = m.gpt_style();
  ActivationParts p{};
  // Korthikanti §4.1, bytes per layer: two layernorm inputs 4sbh, QKV input 2sbh, fc1 input 2sbh, and
  // (GPT, dropout on) the two 1-byte dropout masks 2sbh  ->  10sbh for GPT.
  p.replicated = 8.0 * sbh + (gpt ? 2.0 * sbh : 0.0);
  // Q 2sbh, K and V 2·2·sb·k·d (GQA shrinks them; 4sbh when k = a), output-projection input 2sbh, and the
  // MLP intermediates: GeLU input + fc2 input 2·2sbf (16sbh for f = 4h); SwiGLU gate + up + fc2 input
  // 3·2sbf. For GPT-3 this is 24sbh.
  p.split = 4.0 * sbh + 4.0 * sb * kd + (m.ffn_kind == FfnKind::Swiglu ? 6.0 : 4.0) * sb * f;
  p.core = attention_core_bytes(m, sh);
  p.core_recomputable = m.attention == Attention::Unfused;
  return p;
}

double stored(const ActivationParts& p, const ShardSpec& sh, Recompute r) {
  const double t = static_cast<double>(sh.tp);
  const double core = r == Recompute::Selective && p.core_recomputable ? 0.0 : p.core;
  // Table 2: TP without SP keeps the replicated part whole; with SP everything is divided by t.
  return sh.sequence_parallel ? (p.replicated + p.split + core) / t : p.replicated + (p.split + core) / t;
}

}  // namespace

double layer_activation_bytes(const ModelConfig& m, int layer, const ShardSpec& s, Recompute r) {
  if (r == Recompute::Full) {
    // Only the layer input (2sbh; split over TP with sequence parallelism) is checkpointed (Table 2).
    const double input = 2.0 * s.samples * static_cast<double>(m.seq_len) * static_cast<double>(m.hidden);
    return s.sequence_parallel ? input / static_cast<double>(s.tp) : input;
  }
  return stored(activation_parts(m, layer, s), s, r);
}

namespace {

// stage_memory without the micro-batches in flight: the breakdown with activations left for
// with_in_flight, one micro-batch's stored activations and the recompute working set.
struct StageMemoryParts {
  MemoryBreakdown out;
  double per_micro_batch = 0, working = 0;
};

StageMemoryParts stage_memory_parts(const ModelConfig& m, const StageMemoryInput& in) {
  const ShardSpec& sh = in.shard;
  const double t = static_cast<double>(sh.tp);
  const double s = static_cast<double>(m.seq_len);
  const double h = static_cast<double>(m.hidden);
  const double b = sh.samples;

  double params = 0;
  for (int l = in.layer_begin; l < in.layer_end; ++l) {
    if (in.local_experts >= 0 && m.is_moe_layer(l)) {
      const MoeLayerParams p = moe_layer_params_per_rank(m, l, sh.tp, 1);
      params += p.dense + in.local_experts * p.experts;  // experts sharded by EP (Megatron-Core)
    } else {
      params += layer_params_per_rank(m, l, sh.tp);
    }
  }
  if (in.has_embedding) params += embedding_params_per_rank(m, sh.tp);
  if (in.has_head) {
    params += head_params_per_rank(m, sh.tp);
    // A tied head on the embedding's own stage shares its matrix (Megatron: one parameter).
    if (in.has_embedding && m.tied_embeddings()) params -= static_cast<double>(m.vocab) * h / t;
  }

  StageMemoryParts parts;
  MemoryBreakdown& out = parts.out;
  out.weights = params * kWeightBytes;
  out.gradients = params * kGradBytes;
  out.optimizer = params * kOptimizerBytes / (in.zero1 ? static_cast<double>(std::max(in.dp, 1)) : 1.0);

  // Activations of one micro-batch stored until its backward.
  double per_micro_batch = 0;
  double working = 0;  // one layer's transient working set during its recompute + backward
  for (int l = in.layer_begin; l < in.layer_end; ++l) {
    const double stored = layer_activation_bytes(m, l, sh, in.recompute);
    per_micro_batch += stored;
    working = std::max(working, layer_activation_bytes(m, l, sh, Recompute::None) - stored);
  }
  const double sp_div = sh.sequence_parallel ? t : 1.0;
  if (in.has_embedding && m.gpt_style()) {
    per_micro_batch += b * s * h / sp_div;  // embedding dropout mask, 1 byte (Korthikanti §4.3)
  }
  if (in.has_head) {
    // Final-norm input and head input (2sbh each, split with SP), and the fp32 softmax of the
    // vocab-parallel cross-entropy kept for its backward: 4·s·b·V/t bytes (Korthikanti §4.3).
    per_micro_batch += 4.0 * b * s * h / sp_div + 4.0 * b * s * static_cast<double>(m.vocab) / t;
  }
  parts.per_micro_batch = per_micro_batch;
  parts.working = working;

  // Framework overhead plus communication buffers: the TP all-reduce / all-gather output (b·s·h·e, the
  // full tensor) and, unless the stage is the whole pipeline, the send and receive buffers (2 x b·s·h·e).
  const double e = static_cast<double>(bytes_per_element(m));
  double buffers = 0;
  if (sh.tp > 1) buffers += b * s * h * e;
  if (!(in.has_embedding && in.has_head)) buffers += 2.0 * p2p_bytes(m, b);
  // Expert parallelism: the all-to-all send and receive buffers of one MoE layer's permuted tokens,
  // b·s·top_k token vectors each way (Megatron-Core alltoall token dispatcher).
  bool moe_here = false;
  for (int l = in.layer_begin; l < in.layer_end; ++l) moe_here = moe_here || m.is_moe_layer(l);
  if (moe_here && in.ep > 1)
    buffers += 2.0 * b * s * static_cast<double>(m.moe->top_k) * dispatch_bytes_per_assignment(m) / sp_div;
  out.other = kFrameworkOverhead + buffers;
  return parts;
}

// Micro-batches in flight (set by the schedule), plus, under recompute, one layer's rematerialised
// activations while its backward runs (once per stage).
MemoryBreakdown with_in_flight(const StageMemoryParts& parts, double in_flight) {
  MemoryBreakdown out = parts.out;
  out.activations = in_flight * parts.per_micro_batch + parts.working;
  return out;
}

}  // namespace

MemoryBreakdown stage_memory(const ModelConfig& m, const StageMemoryInput& in) {
  return with_in_flight(stage_memory_parts(m, in), in.in_flight);
}

std::pair<MemoryBreakdown, MemoryBreakdown> stage_memory_idle_and_one(const ModelConfig& m, const StageMemoryInput& in) {
  const StageMemoryParts parts = stage_memory_parts(m, in);
  return {with_in_flight(parts, 0), with_in_flight(parts, 1)};
}

}  // namespace arachne
