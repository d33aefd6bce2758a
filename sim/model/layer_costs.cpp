// Per-layer kernels of GPT- and Llama-style transformer blocks on one rank of a tensor-parallel group of
// size t, for a micro-batch of b sequences (b may be fractional: a share of a micro-batch) of length s.
//
// FLOPs (one multiply-add = 2 FLOPs), after Narayanan et al. SC'21 §5.1 eq. (3), generalised to GQA
// (k KV heads of width d = h/a) and SwiGLU (three h x f matrices, Shazeer 2020):
//   QKV projection        2·b·s·h·(h + 2·k·d) / t     (Gemm)
//   scores Q·Kᵀ           2·b·s²·h / t                (Attention)
//   attention over values 2·b·s²·h / t                (Attention)
//   output projection     2·b·s·h² / t                (Gemm)
//   MLP                   gelu 2·2·b·s·h·f / t, swiglu 3·2·b·s·h·f / t   (Gemm)
// With f = 4h and k = a the layer totals 24·b·s·h² + 4·b·s²·h (the paper's formula; tested).
//
// HBM bytes (e = 2 bytes per bf16/fp16 element): GEMMs read their input and weights and write their
// output; memory-bound kernels (class Memory) read and write the tensors listed next to each. Bias adds
// are fused as in Megatron: the QKV/fc1 biases into the GEMM epilogue and the bias-GeLU kernel, the
// row-parallel biases into bias-dropout-add (megatron/model/fused_bias_gelu.py, bias_dropout_add_fused_train).
// Attention (`attention: unfused`) is Megatron's unfused path that materialises the b·a·s²/t score matrix,
// as in Korthikanti et al. 2022; `attention: flash` replaces the whole core by one FlashAttention-2 kernel
// per direction (flash_attention.h). Llama-style models train without dropout: no dropout kernels or masks.
// With sequence parallelism the layernorm and dropout/residual kernels work on s/t of the sequence
// (Korthikanti et al. 2022 §4.2.2); without it every TP rank repeats them on the full sequence.
//
// MoE layers (priced in detail by a later issue) count the activated FFN: top_k routed experts plus the
// shared experts, each expert_ffn_hidden wide, and the router GEMM; capacity and imbalance are ignored here.
#include "sim/model/layer_costs.h"

#include "sim/model/flash_attention.h"

namespace arachne {

namespace {

struct Dims {
  double b, s, h, a, kd, f, V, t, e;
  double sp_div;  // t with sequence parallelism, else 1: divisor of the layernorm/dropout kernels
  bool gpt;       // GPT-style: biases, dropout, LayerNorm, learned positions
};

Dims dims(const ModelConfig& m, const ShardSpec& sh) {
  Dims d{};
  d.b = sh.samples;
  d.s = static_cast<double>(m.seq_len);
  d.h = static_cast<double>(m.hidden);
  d.a = static_cast<double>(m.heads);
  d.kd = static_cast<double>(m.kv_heads) * static_cast<double>(m.head_dim());
  d.f = static_cast<double>(m.ffn_hidden);
  d.V = static_cast<double>(m.vocab);
  d.t = static_cast<double>(sh.tp);
  d.e = static_cast<double>(bytes_per_element(m));
  d.sp_div = sh.sequence_parallel ? d.t : 1.0;
  d.gpt = m.gpt_style();
  return d;
}

// Activated FFN width of a layer and the number of h x f matrices per FFN (2 gelu, 3 swiglu).
double ffn_width(const ModelConfig& m, int layer) {
  if (!m.is_moe_layer(layer)) return static_cast<double>(m.ffn_hidden);
  const MoeConfig& c = *m.moe;
  return static_cast<double>(c.top_k + c.shared_experts) * static_cast<double>(c.expert_ffn_hidden);
}
double ffn_matrices(const ModelConfig& m) { return m.ffn_kind == FfnKind::Swiglu ? 3.0 : 2.0; }

OpCost gemm(double M, double K, double N, double e) { return gemm_op(M, K, N, e); }
OpCost memory(double bytes) { return OpCost{OpClass::Memory, 0.0, bytes}; }

// LayerNorm / RMSNorm: read x, write y (statistics are negligible).
OpCost norm(const Dims& d) { return memory(2.0 * d.b * d.s * d.h * d.e / d.sp_div); }
// Residual add (+ fused bias and dropout for GPT): read branch output and residual, write the sum,
// write a 1-byte dropout mask when dropout is on.
OpCost residual(const Dims& d) {
  return memory(d.b * d.s * d.h * (3.0 * d.e + (d.gpt ? 1.0 : 0.0)) / d.sp_div);
}

// The unfused attention core: scores, softmax, dropout, attention over values (what selective recompute
// redoes).
void unfused_attention_core(const Dims& d, std::vector<OpCost>& ops) {
  const double scores = d.b * d.a * d.s * d.s / d.t;  // elements of the score matrix on this rank
  // Q·Kᵀ: 2·b·s²·h/t FLOPs; reads Q (b·s·h/t) and K (b·s·k·d/t), writes the scores.
  ops.push_back(OpCost{OpClass::Attention, 2.0 * d.b * d.s * d.s * d.h / d.t,
                       d.e * (d.b * d.s * (d.h + d.kd) / d.t + scores)});
  // Fused scale-mask-softmax: read and write the scores.
  ops.push_back(memory(2.0 * d.e * scores));
  // Attention dropout (GPT): read probabilities, write output and a 1-byte mask.
  if (d.gpt) ops.push_back(memory((2.0 * d.e + 1.0) * scores));
  // probabilities·V: 2·b·s²·h/t FLOPs; reads probabilities and V (b·s·k·d/t), writes context (b·s·h/t).
  ops.push_back(OpCost{OpClass::Attention, 2.0 * d.b * d.s * d.s * d.h / d.t,
                       d.e * (scores + d.b * d.s * (d.kd + d.h) / d.t)});
  // The context comes out as [b·a/t, s, d] and is made contiguous as [s, b, h/t] for the output
  // projection: read and write b·s·h/t (Megatron CoreAttention, context_layer.permute(...).contiguous()).
  ops.push_back(memory(2.0 * d.e * d.b * d.s * d.h / d.t));
}

void attention_core(const ModelConfig& m, const ShardSpec& sh, std::vector<OpCost>& ops) {
  if (m.attention == Attention::Flash) {
    ops.push_back(flash_attention_forward_op(m, sh));
  } else {
    unfused_attention_core(dims(m, sh), ops);
  }
}

}  // namespace

// A GEMM of M x K times K x N: 2·M·K·N FLOPs; reads A and B, writes C (e bytes per element).
OpCost gemm_op(double M, double K, double N, double e) {
  return OpCost{OpClass::Gemm, 2.0 * M * K * N, e * (M * K + K * N + M * N)};
}

std::vector<OpCost> backward_of(std::vector<OpCost> ops) {
  // Backward: each GEMM and attention matmul becomes two of the same shape (input gradient and weight /
  // second-operand gradient), hence 2x FLOPs (Narayanan et al. SC'21 §5.1); a memory-bound kernel's
  // backward reads the saved input and the output gradient and writes the input gradient: ~2x bytes.
  std::vector<OpCost> out;
  out.reserve(ops.size() * 2);
  for (const OpCost& op : ops) {
    if (op.cls == OpClass::Memory) {
      out.push_back(OpCost{OpClass::Memory, 2.0 * op.flops, 2.0 * op.bytes});
    } else if (op.cls == OpClass::FlashAttentionForward) {
      out.push_back(flash_attention_backward_op(op));  // one fused kernel for dQ, dK and dV
    } else {
      out.push_back(op);
      out.push_back(op);
    }
  }
  return out;
}

int bytes_per_element(const ModelConfig& m) { return 2; }  // bf16 and fp16 are both 16-bit

std::vector<OpCost> layer_forward_ops(const ModelConfig& m, int layer, const ShardSpec& sh) {
  const Dims d = dims(m, sh);
  const double tokens = d.b * d.s;
  std::vector<OpCost> ops;
  ops.push_back(norm(d));                                     // input layernorm
  ops.push_back(gemm(tokens, d.h, (d.h + 2.0 * d.kd) / d.t, d.e));  // QKV projection (column parallel)
  attention_core(m, sh, ops);
  ops.push_back(gemm(tokens, d.h / d.t, d.h, d.e));           // output projection (row parallel)
  ops.push_back(residual(d));                                 // bias-dropout-add
  ops.push_back(norm(d));                                     // post-attention layernorm

  const double f = ffn_width(m, layer);
  const double up = (ffn_matrices(m) - 1.0) * f / d.t;       // fc1 outputs: f (gelu) or gate + up 2f (swiglu)
  if (m.is_moe_layer(layer)) {
    // Router: tokens x h times h x experts, replicated on every TP rank.
    ops.push_back(gemm(tokens, d.h, static_cast<double>(m.moe->experts), d.e));
  }
  ops.push_back(gemm(tokens, d.h, up, d.e));                  // fc1 (column parallel)
  // Activation: GeLU reads and writes b·s·f/t; SwiGLU reads gate and up (2·b·s·f/t), writes b·s·f/t.
  ops.push_back(memory(d.e * tokens * (up + f / d.t)));
  ops.push_back(gemm(tokens, f / d.t, d.h, d.e));             // fc2 (row parallel)
  ops.push_back(residual(d));                                 // bias-dropout-add
  return ops;
}

std::vector<OpCost> layer_backward_ops(const ModelConfig& m, int layer, const ShardSpec& s) {
  return backward_of(layer_forward_ops(m, layer, s));
}

std::vector<OpCost> layer_recompute_ops(const ModelConfig& m, int layer, const ShardSpec& s, Recompute r) {
  switch (r) {
    case Recompute::None:
      return {};
    case Recompute::Full:
      return layer_forward_ops(m, layer, s);
    case Recompute::Selective: {
      std::vector<OpCost> ops;
      if (m.attention == Attention::Unfused) unfused_attention_core(dims(m, s), ops);
      return ops;
    }
  }
  return {};
}

std::vector<OpCost> embedding_forward_ops(const ModelConfig& m, const ShardSpec& sh) {
  const Dims d = dims(m, sh);
  const double act = d.b * d.s * d.h;
  // Vocab-parallel lookup: gather b·s rows of h (read) and write the b·s·h output (masked rows are
  // zero-filled on the ranks that do not own them). Its TP all-reduce is not counted here.
  std::vector<OpCost> ops{memory(2.0 * d.e * act)};
  // GPT: add the learned position embedding and apply dropout: read two, write one, 1-byte mask.
  if (d.gpt) ops.push_back(memory(act * (3.0 * d.e + 1.0) / d.sp_div));
  return ops;
}

std::vector<OpCost> embedding_backward_ops(const ModelConfig& m, const ShardSpec& s) {
  return backward_of(embedding_forward_ops(m, s));
}

std::vector<OpCost> head_forward_ops(const ModelConfig& m, const ShardSpec& sh) {
  const Dims d = dims(m, sh);
  const double tokens = d.b * d.s;
  const double logits = tokens * d.V / d.t;
  return {
      norm(d),                             // final layernorm
      gemm(tokens, d.h, d.V / d.t, d.e),   // logits: 2·b·s·h·V/t FLOPs (vocab-parallel head)
      // Vocab-parallel cross-entropy in fp32 (megatron/core/tensor_parallel/cross_entropy.py): read the
      // 16-bit logits, write the fp32 exp (4 bytes), read it again for the sum and the softmax kept for
      // backward: ~(e + 8) bytes per logit. An estimate of a chain of small fused kernels.
      memory(logits * (d.e + 8.0)),
  };
}

std::vector<OpCost> head_backward_ops(const ModelConfig& m, const ShardSpec& s) {
  return backward_of(head_forward_ops(m, s));
}

TpCollectives layer_tp_collectives(const ModelConfig& m, const ShardSpec& s) {
  TpCollectives c;
  if (s.tp <= 1) return c;
  // Shoeybi et al. 2019 §3: one all-reduce after self-attention and one after the MLP, per direction.
  c.count = 2;
  c.bytes = s.samples * static_cast<double>(m.seq_len) * static_cast<double>(m.hidden) * bytes_per_element(m);
  return c;
}

std::vector<TpCollectives> layer_tp_backward_collectives(const ModelConfig& m, int layer, const ShardSpec& sh) {
  const TpCollectives one = layer_tp_collectives(m, sh);
  if (one.count == 0) return {};
  const Dims d = dims(m, sh);
  const double tokens = d.b * d.s;
  TpCollectives qkv{1, one.bytes, gemm(tokens, d.h, (d.h + 2.0 * d.kd) / d.t, d.e)};
  if (m.is_moe_layer(layer)) return {qkv, TpCollectives{1, one.bytes}};
  const double up = (ffn_matrices(m) - 1.0) * ffn_width(m, layer) / d.t;
  return {qkv, TpCollectives{1, one.bytes, gemm(tokens, d.h, up, d.e)}};
}

std::vector<TpCollectives> embedding_tp_collectives(const ModelConfig& m, const ShardSpec& s, bool forward) {
  if (s.tp <= 1 || !forward) return {};
  return {TpCollectives{1, s.samples * static_cast<double>(m.seq_len) * static_cast<double>(m.hidden) *
                               bytes_per_element(m)}};
}

std::vector<TpCollectives> head_tp_collectives(const ModelConfig& m, const ShardSpec& s, bool forward) {
  if (s.tp <= 1) return {};
  const double tokens = s.samples * static_cast<double>(m.seq_len);
  if (forward) return {TpCollectives{3, tokens * 4.0}};  // fp32 per token
  return {TpCollectives{1, tokens * static_cast<double>(m.hidden) * bytes_per_element(m)}};
}

double p2p_bytes(const ModelConfig& m, double samples) {
  // The b x s x h activation (forward) or its gradient (backward) at a stage boundary.
  return samples * static_cast<double>(m.seq_len) * static_cast<double>(m.hidden) * bytes_per_element(m);
}

double layer_params_per_rank(const ModelConfig& m, int layer, int tp) {
  const double h = static_cast<double>(m.hidden);
  const double kd = static_cast<double>(m.kv_heads) * static_cast<double>(m.head_dim());
  const double t = static_cast<double>(tp);
  const bool gpt = m.gpt_style();
  // Attention: QKV (h x (h + 2kd)) and output (h x h) matrices split over TP; GPT biases: QKV bias split,
  // output bias replicated (row-parallel linear keeps a full bias, Megatron RowParallelLinear).
  double p = (h * (h + 2.0 * kd) + h * h) / t;
  if (gpt) p += (h + 2.0 * kd) / t + h;
  // Two norms, replicated on every TP rank: LayerNorm has weight and bias (2h each), RMSNorm weight only.
  p += 2.0 * (gpt ? 2.0 * h : h);
  // One FFN of width f: gelu 2·h·f (+ biases f/t and h), swiglu 3·h·f.
  const auto ffn = [&](double f) {
    double q = ffn_matrices(m) * h * f / t;
    if (gpt) q += f / t + h;
    return q;
  };
  if (!m.is_moe_layer(layer)) return p + ffn(static_cast<double>(m.ffn_hidden));
  // MoE (all experts on this rank, i.e. no expert parallelism): routed + shared experts and the router.
  const MoeConfig& c = *m.moe;
  const double fe = static_cast<double>(c.expert_ffn_hidden);
  return p + static_cast<double>(c.experts + c.shared_experts) * ffn(fe) + h * static_cast<double>(c.experts);
}

double embedding_params_per_rank(const ModelConfig& m, int tp) {
  const double h = static_cast<double>(m.hidden);
  // Vocab-parallel word embedding V·h/t; GPT adds a learned position embedding s·h, replicated on every
  // TP rank (Megatron's position_embeddings is a plain Embedding). Llama uses rotary positions (no params).
  double p = static_cast<double>(m.vocab) * h / static_cast<double>(tp);
  if (m.gpt_style()) p += static_cast<double>(m.seq_len) * h;
  return p;
}

double head_params_per_rank(const ModelConfig& m, int tp) {
  const double h = static_cast<double>(m.hidden);
  // Output matrix V·h/t plus the final norm (replicated). Llama's head is untied. GPT ties it to the
  // word embedding, but with PP > 1 Megatron keeps a copy of the word embedding on the last stage and
  // all-reduces the two copies' gradients (megatron/model/module.py, initialize_word_embeddings), so the
  // last stage holds V·h/t either way. When one stage holds both ends of a tied model, stage_memory
  // counts the matrix once; ModelConfig::parameters() counts unique parameters.
  return static_cast<double>(m.vocab) * h / static_cast<double>(tp) + (m.gpt_style() ? 2.0 * h : h);
}

}  // namespace arachne
