// Costs of an MoE layer split the way expert parallelism executes it (Megatron-Core MoE; Lepikhin et al.
// 2021, GShard §2): the dense part every TP rank runs (attention, norms, router, shared experts), the
// routed experts each EP rank runs for the tokens its local experts received, and the token dispatch and
// combine between EP ranks. The execution of MoE layers (sim/exec) uses these.
#pragma once
#include <vector>

#include "sim/model/layer_costs.h"

namespace arachne {

// Dense kernels of an MoE layer, forward, on one TP rank: layer_forward_ops without the routed experts.
std::vector<OpCost> moe_dense_forward_ops(const ModelConfig& m, int layer, const ShardSpec& s);

// Routed-expert kernels on one EP rank, forward: per local expert with n tokens, fc1 (n x h x up/t), the
// activation and fc2 (n x f/t x h) — Megatron-Core's grouped GEMM runs one GEMM per expert, so each is
// priced at its own size (small experts under-fill the GPU). Backward: backward_of().
std::vector<OpCost> expert_forward_ops(const ModelConfig& m, const std::vector<long>& tokens_per_local_expert,
                                       int tp);

// Bytes one token assignment moves in the dispatch (and again in the combine) all-to-all: its hidden
// vector, h x element bytes (Megatron-Core token dispatcher, alltoall).
double dispatch_bytes_per_assignment(const ModelConfig& m);

// Parameters of an MoE layer on one rank with `local_experts` routed experts: the dense part (reduced over
// the whole data-parallel group) and the routed experts (reduced over the expert-data-parallel group).
struct MoeLayerParams {
  double dense = 0;
  double experts = 0;
};
MoeLayerParams moe_layer_params_per_rank(const ModelConfig& m, int layer, int tp, int local_experts);

}  // namespace arachne
