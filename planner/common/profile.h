// The profiler stand-in shared by the baseline planners. Each baseline's public code profiles per-layer
// forward/backward time, memory and communication on the real GPUs (AMP: per-layer compute profile;
// Metis: per-layer time and memory per GPU type and TP; FlashFlex/HexiScale: per-layer FLOPs and memory;
// Sailor: per-layer time per GPU type, TP and micro-batch). Here the simulator's own per-layer costs play
// that role: sim/model/layer_costs.h (kernels), sim/model/compute_time.h (calibrated roofline per GPU type),
// sim/model/memory.h (Korthikanti et al. 2022) and the catalog's link bandwidths. The numbers are what a
// profiler would measure for one layer in isolation; the planners combine them with their own cost models.
//
// MoE models: none of the baselines plans expert parallelism, so their profile of an MoE
// layer is its activated dense FFN (top_k routed experts + shared experts as one dense FFN of that width,
// see activated_dense_equivalent) for time; memory is profiled on the real model with every expert on
// every rank (ep = 1), as their profilers would measure it running the model without EP.
#pragma once
#include <map>
#include <string>
#include <tuple>

#include "sim/hw/cluster.h"
#include "sim/model/layer_costs.h"
#include "sim/model/model.h"

namespace arachne::planner {

// The dense model a planner without EP prices an MoE model as: every MoE layer becomes a dense layer whose
// FFN width is (top_k + shared_experts) x expert_ffn_hidden. Dense models are returned unchanged.
ModelConfig activated_dense_equivalent(const ModelConfig& m);

// One transformer layer (or the embedding / head) on one GPU of a TP group of one GPU type.
struct LayerProfile {
  double forward_s = 0;          // kernels of the forward pass
  double backward_s = 0;         // kernels of the backward pass, including recomputation
  double tp_comm_forward_s = 0;  // TP collectives of the forward pass, closed form inside one node
  double tp_comm_backward_s = 0;
  double activation_bytes = 0;   // activations one micro-batch leaves stored (per GPU)
  double params = 0;             // parameters held per GPU (real model: all experts for MoE)
};

struct ProfileKey {
  std::string gpu_type;
  int tp = 1;
  double samples = 1;  // sequences per micro-batch on the TP group
  Recompute recompute = Recompute::None;
  bool sequence_parallel = false;
  auto tie() const { return std::tie(gpu_type, tp, samples, recompute, sequence_parallel); }
  bool operator<(const ProfileKey& o) const { return tie() < o.tie(); }
};

class Profiler {
 public:
  // `cluster` supplies the catalog (compute constants) and each type's node (intra-node bandwidth).
  Profiler(const Cluster& cluster, const ModelConfig& model);

  const ModelConfig& model() const { return model_; }          // the real model
  const ModelConfig& priced_model() const { return priced_; }  // activated dense equivalent

  // Layer `layer` (0-based) with the given GPU type / TP / micro-batch; cached per kind (dense or MoE): every
  // layer of one kind returns the same entry.
  const LayerProfile& layer(int layer, const ProfileKey& key) const;
  const LayerProfile& embedding(const ProfileKey& key) const;
  const LayerProfile& head(const ProfileKey& key) const;

  // Sum of forward+backward (compute + TP) of layers [begin, end) plus embedding/head when the range
  // starts at 0 / ends at the last layer: the time one micro-batch spends in a stage.
  double stage_time_s(int begin, int end, const ProfileKey& key) const;
  // Per-GPU memory of a stage (bytes): sim/model/memory.h with `in_flight` micro-batches' activations,
  // optimizer sharded over `dp` when zero1. Real model; with `ep` > 1 each rank holds 1/ep of every MoE
  // layer's routed experts (expert parallelism), else all of them.
  double stage_memory_bytes(int begin, int end, const ProfileKey& key, double in_flight, int dp = 1,
                            bool zero1 = false, int ep = 1) const;
  // Usable memory of one GPU of the type (bytes).
  double gpu_memory_bytes(const std::string& gpu_type) const;
  // Activation bytes sent between stages per micro-batch of `samples` sequences (whole tensor).
  double p2p_bytes(double samples) const;
  // Gradient bytes one TP rank reduces over data parallelism for layers [begin, end) (+ embedding/head).
  double grad_bytes(int begin, int end, int tp) const;
  // Dense peak FLOP/s of the type for the model's dtype (for planners that weigh GPUs by peak).
  double peak_flops(const std::string& gpu_type) const;
  // Intra-node bandwidth (bytes/s per GPU per direction) of the type's node and NIC bandwidth per GPU.
  double intra_bw(const std::string& gpu_type) const;
  double nic_bw_per_gpu(const std::string& gpu_type) const;

 private:
  const Cluster& cluster_;
  ModelConfig model_, priced_;
  mutable std::map<std::tuple<int, ProfileKey>, LayerProfile> cache_;  // 1e6 + layer kind (dense 0, MoE 1), -1 embedding, -2 head
  LayerProfile compute(int which, const ProfileKey& key) const;
  const NodeGroup& group_of_type(const std::string& gpu_type) const;
};

}  // namespace arachne::planner
