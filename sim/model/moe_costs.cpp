#include "sim/model/moe_costs.h"

namespace arachne {

std::vector<OpCost> moe_dense_forward_ops(const ModelConfig& m, int layer, const ShardSpec& s) {
  // layer_forward_ops prices an MoE layer's FFN as top_k routed + shared experts of expert_ffn_hidden in
  // one block (fc1, activation, fc2, residual at its end). Keep everything but that block, then add the
  // shared experts back at their own width.
  std::vector<OpCost> ops = layer_forward_ops(m, layer, s);
  if (!m.is_moe_layer(layer)) return ops;
  // The block is the last four kernels: fc1, activation, fc2, residual. Keep the residual.
  const OpCost residual = ops.back();
  ops.resize(ops.size() - 4);
  const MoeConfig& c = *m.moe;
  if (c.shared_experts > 0) {
    ModelConfig shared = m;
    shared.moe.reset();
    shared.ffn_hidden = static_cast<long>(c.shared_experts) * c.expert_ffn_hidden;
    const std::vector<OpCost> full = layer_forward_ops(shared, layer, s);
    ops.insert(ops.end(), full.end() - 4, full.end() - 1);  // its fc1, activation, fc2
  }
  ops.push_back(residual);
  return ops;
}

std::vector<OpCost> expert_forward_ops(const ModelConfig& m, const std::vector<long>& tokens, int tp) {
  const double h = static_cast<double>(m.hidden), t = static_cast<double>(tp);
  const double f = static_cast<double>(m.moe->expert_ffn_hidden);
  const double e = bytes_per_element(m);
  const double up = (m.ffn_kind == FfnKind::Swiglu ? 2.0 : 1.0) * f / t;  // gate + up for SwiGLU
  std::vector<OpCost> ops;
  for (const long n_tokens : tokens) {
    if (n_tokens <= 0) continue;
    const double n = static_cast<double>(n_tokens);
    ops.push_back(gemm_op(n, h, up, e));                                    // fc1
    ops.push_back(OpCost{OpClass::Memory, 0.0, e * n * (up + f / t)});     // activation: read up, write f/t
    ops.push_back(gemm_op(n, f / t, h, e));                                 // fc2
  }
  return ops;
}

double dispatch_bytes_per_assignment(const ModelConfig& m) {
  return static_cast<double>(m.hidden) * bytes_per_element(m);
}

MoeLayerParams moe_layer_params_per_rank(const ModelConfig& m, int layer, int tp, int local_experts) {
  MoeLayerParams p;
  const double all = layer_params_per_rank(m, layer, tp);
  if (!m.is_moe_layer(layer)) {
    p.dense = all;
    return p;
  }
  const MoeConfig& c = *m.moe;
  const double h = static_cast<double>(m.hidden), f = static_cast<double>(c.expert_ffn_hidden);
  // One routed expert: its FFN matrices (2 for GeLU, 3 for SwiGLU) split over TP, plus GPT biases.
  double one = (m.ffn_kind == FfnKind::Swiglu ? 3.0 : 2.0) * h * f / tp;
  if (m.gpt_style()) one += f / tp + h;
  p.dense = all - static_cast<double>(c.experts) * one;
  p.experts = static_cast<double>(local_experts) * one;
  return p;
}

}  // namespace arachne
