// The static part of lowering a plan: the workers (one per TP group of a stage of a pipeline; interleaved
// model chunks of the same GPUs belong to one worker), the cost of each of their passes, the transfers they
// make to neighbouring stages, and their memory.
#pragma once
#include <array>
#include <string>
#include <vector>

#include "sim/hw/cluster.h"
#include "sim/hw/topology.h"
#include "sim/model/layer_costs.h"
#include "sim/model/memory.h"
#include "sim/model/model.h"
#include "sim/net/flow_network.h"
#include "sim/plan/plan.h"

namespace arachne {

// Time the TP collectives `calls` of one pass add to it on a TP group of `tp` GPUs inside one node of
// `node` (closed form; DESIGN.md allows it inside a node): the single definition the simulator's passes and
// the planners' profiler (planner/common/profile.h) both use.
double intra_node_tp_collectives_s(const std::vector<TpCollectives>& calls, int tp, const NodeGroup& node,
                                   const GpuSpec& gpu, const std::string& dtype);

struct PassCost {
  double compute_s = 0;            // kernels (GEMM, attention, memory-bound) of the pass
  double tp_bytes = 0;             // TP all-reduce volume of the pass (all collectives of all its layers)
  int tp_collectives = 0;          // number of TP collective calls in the pass
  double tp_closed_form_s = 0;     // its time when the TP group sits in one node (closed form)
  std::array<double, kLinkClasses> tp_closed_form_bytes{};  // bytes those collectives move, by link class
};

// A pipeline transfer from one worker's chunk to a neighbouring stage's group: a bundle of TP-rank flows.
struct StageLink {
  int peer_worker = 0;
  int peer_chunk = 0;
  std::vector<Hop> hops;       // union of the member routes, with multiplicities
  std::vector<std::pair<GpuId, GpuId>> members;  // the TP-rank pairs whose routes make up the bundle
  double bytes_per_member = 0;
  double latency_s = 0;
  double rate_bound = 0;  // member rate bound for FlowNetwork::start (0: computed from the hops)
};

struct ChunkCost {
  int vstage = 0;  // index of the stage in its pipeline
  int layer_begin = 0, layer_end = 0;
  bool has_embedding = false, has_head = false;
  double samples = 0;  // sequences per micro-batch on this group (micro_batch x share)
  PassCost forward, backward;
  std::array<std::vector<StageLink>, 2> sends;  // [0] activations forward, [1] gradients backward
  std::array<int, 2> receives{};                // transfers each forward / backward task waits for
  // Seconds after the start of a backward pass at which the gradients of layer (layer_begin + i) are
  // complete (backward runs head -> last layer -> first layer -> embedding).
  std::vector<double> layer_grad_ready_s;
  double head_grad_ready_s = 0, embedding_grad_ready_s = 0;
  double params_per_rank = 0;
  // Expert parallelism of this stage (MoE models): degree, this group's EP rank, and the routed experts it
  // holds per MoE layer in units of TP-sharded experts (-1: all experts, no EP).
  int ep = 1;
  int ep_rank = 0;
  double local_experts = -1;
  // Expert-parallel execution (ep > 1 with EP ranks = TP groups): the pass is cut at every MoE layer's
  // all-to-alls. forward_segments_s[i] is the dense kernel time before MoE layer moe_layers[i]'s dispatch
  // (after the previous combine); the last entry follows the last combine. backward_segments_s likewise in
  // backward order (first entry before the top MoE layer's combine gradient). Expert kernels are priced
  // per micro-batch from the routing draw. ep_peers: the EP group's workers in EP-rank order; ep_group: a
  // plan-wide id of the group (same chunk of each peer).
  std::vector<int> moe_layers;
  std::vector<double> forward_segments_s, backward_segments_s;
  std::vector<int> ep_peers;
  std::vector<int> ep_experts;  // routed experts per EP rank
  int ep_group = -1;
  // EP inside the stage's TP groups (ep_scope stage, ep != groups): the stage's GPUs in EP-rank order
  // (rank r = members[r*ep_etp, (r+1)*ep_etp)), each rank's experts tensor-parallel over its ep_etp GPUs.
  // Empty when EP ranks are whole TP groups.
  std::vector<GpuId> ep_members;
  int ep_etp = 1;
};

struct Worker {
  int pipeline = 0;
  int rank = 0;   // physical pipeline rank
  int group = 0;  // TP group index within its stage
  std::vector<GpuId> gpus;
  int tp = 1;
  double share = 1;
  bool tp_closed_form = true;  // TP group inside one node: collectives priced in closed form
  std::vector<ChunkCost> chunks;
  double optimizer_s = 0;
  double collective_overhead_s = 0;  // per collective call on this GPU type (catalog constant)
  int dp_degree = 1;           // groups holding this worker's first layer (ZeRO-1 shard count)
  MemoryBreakdown memory;      // per GPU
};

struct StageWork {
  std::vector<Worker> workers;
  // worker_of[pipeline][vstage][group] -> worker id; the chunk index is vstage / physical depth.
  std::vector<std::vector<std::vector<int>>> worker_of;
  std::vector<int> physical_depth;  // per pipeline
  double model_flops = 0;           // model FLOPs per iteration (forward + backward, no recompute)
};

// How build_stage_work prices one pass of TP group `w` (its GPU type, tp and whether it sits in one node):
// the kernels `ops` and the TP collectives `calls`. Read-only; planners use it to bound simulated times.
PassCost price_pass(const std::vector<OpCost>& ops, const std::vector<TpCollectives>& calls, const Worker& w,
                    const Cluster& cluster, const ModelConfig& model);
// Seconds of the mixed-precision Adam step over `params` parameters on one GPU (as build_stage_work prices it).
double optimizer_step_s(double params, const GpuSpec& gpu, const ModelConfig& model);

StageWork build_stage_work(const Cluster& cluster, const Topology& topo, const ModelConfig& model,
                           const Plan& plan);

// Bytes per parameter of the gradients that are reduced: Megatron keeps fp32 main gradients and reduces
// them in fp32 for bf16 (accumulate_allreduce_grads_in_fp32 is forced for bf16 in megatron/arguments.py),
// in the parameter dtype for fp16.
double reduced_grad_bytes_per_param(const ModelConfig& m);

}  // namespace arachne
