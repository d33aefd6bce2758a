// Placement, the first step of completion (planner/template/completion.h): the template's TP groups on
// concrete GPUs of the cluster.
//
// Rules, in order of precedence:
//   - a TP group lies inside one node of its GPU type (its tp lowest free local GPUs, consecutive where the
//     node has such a run);
//   - the groups of one kind of a stage share one node when a node can hold them all, else one leaf switch
//     (cluster.network.nodes_per_leaf consecutive nodes share a leaf, sim/hw/topology.h), else any nodes;
//   - a stage prefers the nodes (then the leaf) its pipeline already uses, so pipeline transfers stay local;
//   - whole nodes first: among nodes of one type, larger nodes (partial nodes, as left after preemption,
//     have fewer GPUs) before smaller ones, then the tightest fit, then the lower node id - so the replicas
//     of a pipeline class fill the same kind of node one after another;
//   - pipelines are placed in template order, replicas one after another; when that order strands a wide
//     group (fragmentation), the kinds are placed again widest tp first;
//   - MoE classes with EP across pipelines: each block of `ep` consecutive replicas (one EP group per stage,
//     as the simulator forms them: sim/exec/stage_work.cpp) is placed stage by stage, and a stage prefers
//     the nodes its EP peers already use (before its pipeline's): where the EP group fits in a node the
//     all-to-alls stay inside it (else it spans as few nodes as the free GPUs allow) and the pipeline
//     transfers cross nodes, as Megatron-Core's rank order puts EP ranks next to TP ranks
//     (Megatron-LM megatron/core/parallel_state.py, order "tp-cp-ep-dp-pp"). Measured with the estimator on
//     two MoE clusters of 36 and 56 GPUs: this order priced best for 264 of 285 templates, the other for
//     1, the same for 20;
//   - with `replicas_by_stage`, every pipeline is placed stage by stage: stage j of every class (each class's
//     replicas in order), then stage j + 1; the stages at the same place with the same TP width and kinds,
//     in any class, are one block, so the data-parallel peers of a stage share a node where they fit and the
//     gradient all-reduce stays on the node's links (the same rank order: dp before pp; AMP's and Metis's
//     plans place every pipeline's stage j on one node so). Completion prices it beside the default where
//     the caller asks (CompletionOptions::data_parallel_placement).
// Deterministic.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "planner/template/template.h"
#include "sim/hw/cluster.h"

namespace arachne::planner {

struct PlacedGroup {
  std::string gpu_type;
  std::vector<GpuId> gpus;  // rank order
};
struct PlacedStage {
  std::vector<PlacedGroup> groups;  // the template's kinds in order, each kind's groups in placement order
};
struct PlacedPipeline {
  int pipeline_class = 0;  // index into Template::pipelines
  int replica = 0;
  std::vector<PlacedStage> stages;
};

// One entry per pipeline (classes in template order, replicas consecutive); nullopt when the cluster cannot
// hold the template's groups.
std::optional<std::vector<PlacedPipeline>> place_template(const Template& t, const Cluster& cluster,
                                                          bool replicas_by_stage = false);

}  // namespace arachne::planner
