// Per-layer pass prices of one TP group, as build_stage_work (sim/exec/stage_work.cpp) prices its passes
// layer by layer: the planners that bound or estimate simulated times (the oracle's lower bound, the fast
// estimator) sum them over a stage's layers.
#pragma once
#include <vector>

#include "sim/exec/stage_work.h"
#include "sim/hw/cluster.h"
#include "sim/model/model.h"

namespace arachne::planner {

struct LayerPrices {
  // Per layer l: forward = its forward kernels and TP collectives; backward = recompute + backward kernels,
  // the forward's collectives again under full recompute (Korthikanti et al. 2022 §5), and the backward
  // collectives.
  std::vector<PassCost> forward, backward;
  // MoE models only (empty otherwise), per layer: the kernel seconds an expert-parallel pass runs without the
  // routed experts (stage_work.cpp, expert-parallel segments): forward dense(l) (moe_dense_forward_ops on MoE
  // layers, the whole layer on the others); backward its recompute + backward_of(dense(l)). No TP collectives.
  std::vector<double> forward_dense_s, backward_dense_s;
  PassCost embedding_forward, embedding_backward, head_forward, head_backward;
};

// The prices on a GPU of node group `node_group` in a TP group of `tp` inside one node (closed-form TP
// collectives), for micro-batches of `samples` samples.
LayerPrices price_layers(const Cluster& cluster, const ModelConfig& model, int node_group, int tp, double samples,
                         Recompute rc, bool sequence_parallel);

}  // namespace arachne::planner
