// FlashAttention-2 (Dao 2023, "FlashAttention-2: Faster Attention with Better Parallelism and Work
// Partitioning", arXiv 2307.08691): the attention core (scores, mask, softmax, dropout, attention over
// values) as one fused kernel per direction that tiles Q, K and V through on-chip memory and never writes
// the b·a·s² score matrix to HBM. Against the unfused path (layer_costs.cpp) it changes three things:
//   memory   no softmax output, dropout mask or dropout output is kept for backward; only the fp32
//            log-sum-exp of each query row (b·a·s·4 bytes), from which backward recomputes the scores
//            (Algorithm 1 line 13 "write L"; flash_attn's autograd saves q, k, v, out, softmax_lse).
//   traffic  HBM traffic is Q, K, V in and O out (and their gradients): no s² term.
//   time     compute-bound at FlashAttention-2's measured fraction of dense peak (see .cpp).
// FLOPs are unchanged: the model's count (4·b·s²·h/t forward, twice that backward) is kept for MFU.
// Selective recompute (Korthikanti et al. 2022 §5) has nothing left to recompute: Megatron-LM runs the
// flash kernel without core-attention checkpointing (megatron/model/transformer.py, ParallelAttention.forward:
// checkpoint_core_attention applies to the unfused path only).
#pragma once
#include "sim/model/layer_costs.h"

namespace arachne {

// The forward kernel of one layer's attention core on one TP rank (class FlashAttentionForward).
OpCost flash_attention_forward_op(const ModelConfig& m, const ShardSpec& s);
// Its backward kernel (class FlashAttentionBackward): input gradients of Q, K and V.
OpCost flash_attention_backward_op(const OpCost& forward);
// Bytes the kernel keeps for backward besides its inputs and output: the log-sum-exp, fp32, a/t heads.
double flash_attention_saved_bytes(const ModelConfig& m, const ShardSpec& s);
// Compute time of a FlashAttention kernel at `peak` dense FLOP/s (the roofline's compute term).
double flash_attention_compute_s(const OpCost& op, double peak);

}  // namespace arachne
