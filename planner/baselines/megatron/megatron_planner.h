// `megatron`: the practitioner's baseline. Megatron-LM is run on a homogeneous cluster with a grid search over
// its parallel degrees (Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
// Megatron-LM", SC'21, §3 "Performance Analysis of Parallelization Configurations": TP inside a node, PP across
// nodes, DP over the rest, micro-batch size tuned; Korthikanti et al., "Reducing Activation Recomputation in
// Large Transformer Models", 2022, for selective/full recomputation; Megatron-Core MoE for EP taken from DP).
//
// Algorithm
//  1. Homogeneous subset: the GPU type with the most GPUs in the snapshot (ties: higher dense peak for the
//     model's dtype, then the name), all whole nodes of that type. A sub-cluster holding only those nodes
//     (renumbered n0.., first_gpu recomputed) and its own Topology are built; every other GPU stays idle.
//  2. Grid, in this fixed nested order (deterministic; the evaluation budget cuts it at the same point every
//     time):  tp = 1, 2, 4, ... <= GPUs per node (dividing heads and kv_heads)
//              pp = divisors of layers, ascending, with tp*pp <= usable GPUs
//              dp = the largest d with tp*pp*d <= GPUs of the subset and global_batch % d == 0
//                   (Megatron uses every GPU it can; the remainder idles)
//              micro_batch = 1, 2, 4, 8 dividing global_batch / dp
//              ep = divisors of dp that divide the experts, ascending (MoE models only; else 1)
//              recompute = none, then selective, then full — the next one only when the previous one ran out
//                   of memory: recomputation only adds work (Korthikanti et al. 2022), so it can never make a
//                   configuration that already fits faster.
//     Schedule 1F1B, no interleaving, no sequence parallelism, no ZeRO: Megatron-LM's defaults.
//  3. Cost model: the simulator itself (simulate_iteration with default SimOptions, memory enforced: an
//     out-of-memory candidate is infeasible) — as practitioners measure candidate configurations. Each
//     simulate_iteration call counts as one evaluation; a shorthand the model cannot take (InputError from
//     plan_from_shorthand) is skipped without counting.
//  4. Result: the fastest candidate (first in grid order on ties), its GPU ids mapped back to the original
//     cluster; predicted_iteration_time_s is its simulated time on the sub-cluster.
//
// What it cannot express: heterogeneous GPUs (other types idle), uneven layer splits, pipelines of different
// shape, partial nodes, stage-level data parallelism. Simplifications: no interleaved schedule, no sequence
// parallelism or distributed optimizer in the grid. The sub-cluster's Topology numbers leaves from its own
// node 0, so when the chosen nodes span several leaves in the original cluster the routes (and therefore
// the simulated time) may differ from a re-simulation on the original cluster; inside one leaf they agree.
#pragma once
#include <string>

#include "planner/planner.h"

namespace arachne::planner {

class MegatronPlanner : public Planner {
 public:
  std::string name() const override { return "megatron"; }
  PlanResult plan(const PlanRequest& request) override;
};

}  // namespace arachne::planner
