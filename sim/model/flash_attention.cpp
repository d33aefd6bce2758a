// FlashAttention-2 kernels: FLOPs, HBM bytes, saved bytes and time (see flash_attention.h).
#include "sim/model/flash_attention.h"

namespace arachne {

namespace {

// Achieved fraction of the A100's dense 16-bit peak, as published: "reaching up to 73% of the theoretical
// max throughput in the forward pass, and up to 63% of the theoretical max throughput in the backward
// pass" (Dao 2023, §1; Figures 5 and 6: A100 80GB SXM4, head dimension 64/128, sequence 512-16k). These
// are the paper's best cases (long sequences, head dimension 128); short sequences reach less (the
// abstract's range is 50-73%). Other GPUs: the same fraction of their own peak (GpuSpec::peak_for), a
// rule, not a measurement (FlashAttention-2 itself runs on Ampere and newer only).
constexpr double kForwardPeakFraction = 0.73;
constexpr double kBackwardPeakFraction = 0.63;

// The paper's FLOP convention, which the fractions above are measured in (§4.1): forward
// 4·s²·d·a per sequence, halved under a causal mask ("approximately only half of the entries are
// calculated"); backward 2.5x forward ("2 matmuls in the forward pass and 5 matmuls in the backward pass,
// due to recomputation"). The model counts the full square (Narayanan et al. SC'21 eq. 3) and backward as
// 2x forward. Every model here is a causal decoder, so the kernels do this fraction of the counted FLOPs:
constexpr double kCausalFraction = 0.5;
constexpr double kForwardWorkPerModelFlop = kCausalFraction;
constexpr double kBackwardWorkPerModelFlop = kCausalFraction * 2.5 / 2.0;

}  // namespace

OpCost flash_attention_forward_op(const ModelConfig& m, const ShardSpec& sh) {
  const double b = sh.samples, s = static_cast<double>(m.seq_len), h = static_cast<double>(m.hidden);
  const double t = static_cast<double>(sh.tp), e = static_cast<double>(bytes_per_element(m));
  const double kd = static_cast<double>(m.kv_heads) * static_cast<double>(m.head_dim());
  // Q·Kᵀ and probabilities·V, 2·b·s²·h/t FLOPs each, as on the unfused path.
  const double flops = 4.0 * b * s * s * h / t;
  // Reads Q (b·s·h/t), K and V (b·s·k·d/t each); writes O (b·s·h/t) and the log-sum-exp.
  const double bytes = e * b * s * (2.0 * h + 2.0 * kd) / t + flash_attention_saved_bytes(m, sh);
  return OpCost{OpClass::FlashAttentionForward, flops, bytes};
}

OpCost flash_attention_backward_op(const OpCost& forward) {
  // Twice the forward FLOPs (the model's count). Bytes: reads Q, K, V, O and dO and writes dQ, dK, dV,
  // i.e. twice the forward's Q, K, V in and O out. The log-sum-exp read and the row sums D = rowsum(dO∘O)
  // written and read (FlashAttention-2 Algorithm 2; b·a·s fp32 each) are three such arrays against the two
  // this doubling counts: one left out, ~0.2 % of the bytes at head dimension 128.
  return OpCost{OpClass::FlashAttentionBackward, 2.0 * forward.flops, 2.0 * forward.bytes};
}

double flash_attention_saved_bytes(const ModelConfig& m, const ShardSpec& sh) {
  // softmax_lse: one fp32 per query row and head; a/t heads on this TP rank.
  return 4.0 * sh.samples * static_cast<double>(m.heads) * static_cast<double>(m.seq_len) /
         static_cast<double>(sh.tp);
}

double flash_attention_compute_s(const OpCost& op, double peak) {
  if (op.cls == OpClass::FlashAttentionBackward)
    return kBackwardWorkPerModelFlop * op.flops / (kBackwardPeakFraction * peak);
  return kForwardWorkPerModelFlop * op.flops / (kForwardPeakFraction * peak);
}

}  // namespace arachne
