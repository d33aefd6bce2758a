// What the learned planner's policy sees of a request (cluster, model, global batch): one feature vector
// per GPU-type group, in token order (planner/template/tokens.h, type_order: row k describes the type that
// token Type k names), and one vector of global features. No Torch; the same numbers feed training (through
// the Torch module) and inference (planner/arachne/policy_net.h).
//
// Scales: quantities that span orders of magnitude across the catalog and the request space (GPU counts,
// FLOP/s, bandwidths, model dimensions) enter as log2 of the value in the unit given below, so that a 2x
// change is one unit everywhere; counts that may be 0 enter as log2(1 + n); flags are 0/1.
// The lists below are the one place that names the features: features.cpp fills each entry by its enum.
#pragma once
#include <array>
#include <string>
#include <vector>

#include "planner/template/tokens.h"
#include "sim/hw/cluster.h"
#include "sim/model/model.h"

namespace arachne::planner {

// Features of one GPU-type group: every node of the cluster with that GPU type (a type may span several
// node groups of the cluster file, e.g. full nodes and nodes left partial after preemption).
enum class GroupFeature {
  LogGpus,         // log2(GPUs of the type)
  GpuShare,        // GPUs of the type / GPUs of the cluster
  LogNodes,        // log2(nodes of the type)
  LogLargestNode,  // log2(GPUs of the type's largest node): the widest TP group that stays in one node
  LogPartialNodes, // log2(1 + nodes with fewer GPUs than the type's largest node)
  LogPeakTflops,   // log2(dense peak TFLOP/s for the model's dtype; bf16 on a GPU without it: its fp16 rate)
  FlopShare,       // the type's GPUs x peak / the cluster's summed peak (its share of the compute)
  LogMemoryGib,    // log2(memory per GPU, GiB)
  LogHbmTbps,      // log2(HBM bandwidth, TB/s)
  LogIntraGbps,    // log2(intra-node bandwidth per GPU per direction, GB/s; GPU-weighted mean over nodes)
  LogNicGbps,      // log2(NIC bandwidth per GPU per direction = NICs x NIC bandwidth / GPUs per node, GB/s)
  LogStateGpus,    // log2(GPUs of the type that the model's training state needs: 16 B/parameter
                   //   for mixed-precision Adam, Rajbhandari et al. 2020 "ZeRO" sec. 3, / memory per GPU)
  Count
};
inline constexpr int kGroupFeatures = static_cast<int>(GroupFeature::Count);
inline constexpr std::array<const char*, kGroupFeatures> kGroupFeatureNames{
    "log_gpus",     "gpu_share",  "log_nodes",   "log_largest_node", "log_partial_nodes", "log_peak_tflops",
    "flop_share",   "log_memory_gib", "log_hbm_tbps", "log_intra_gbps", "log_nic_gbps", "log_state_gpus"};

// Features of the network, the model and the batch.
enum class GlobalFeature {
  LogTotalGpus,        // log2(GPUs of the cluster)
  GpuTypes,            // number of GPU-type groups
  LogNodesPerLeaf,     // log2(nodes under one leaf switch)
  LogOversubscription, // log2(leaf downlink / uplink capacity); 0 = non-blocking
  LogLatencyUs,        // log2(inter-node message latency, us)
  LogLayers,           // log2(transformer layers)
  LogHidden,           // log2(hidden size)
  LogHeads,            // log2(attention heads)
  LogKvHeads,          // log2(key/value heads; = heads without grouped-query attention)
  LogFfnHidden,        // log2(FFN hidden size of dense layers)
  Swiglu,              // 1: SwiGLU FFN (Llama style), 0: GeLU (GPT style)
  LogSeqLen,           // log2(sequence length, tokens)
  LogVocab,            // log2(vocabulary size)
  Bf16,                // 1: bf16, 0: fp16
  FlashAttention,      // 1: fused flash attention, 0: unfused (materialised scores)
  LogParameters,       // log2(total parameters / 1e9)
  Moe,                 // 1: mixture-of-experts model
  LogExperts,          // log2(1 + experts per MoE layer); 0 for dense models
  LogTopK,             // log2(1 + experts per token); 0 for dense models
  LogExpertFfn,        // log2(1 + expert FFN hidden size); 0 for dense models
  LogSharedExperts,    // log2(1 + shared experts)
  FirstDenseShare,     // leading dense layers / layers
  MoeLayerShare,       // MoE layers / layers
  LogGlobalBatch,      // log2(global batch, sequences)
  LogBatchPerGpu,      // log2(global batch / GPUs of the cluster)
  Count
};
inline constexpr int kGlobalFeatures = static_cast<int>(GlobalFeature::Count);
inline constexpr std::array<const char*, kGlobalFeatures> kGlobalFeatureNames{
    "log_total_gpus", "gpu_types",   "log_nodes_per_leaf", "log_oversubscription", "log_latency_us",
    "log_layers",     "log_hidden",  "log_heads",          "log_kv_heads",         "log_ffn_hidden",
    "swiglu",         "log_seq_len", "log_vocab",          "bf16",                 "flash_attention",
    "log_parameters", "moe",         "log_experts",        "log_top_k",            "log_expert_ffn",
    "log_shared_experts", "first_dense_share", "moe_layer_share", "log_global_batch", "log_batch_per_gpu"};

struct RequestFeatures {
  int groups = 0;              // GPU-type groups (rows of `group`)
  std::vector<float> group;    // groups x kGroupFeatures, row-major, row k = type_order[k]
  std::vector<float> global;   // kGlobalFeatures

  float group_at(int k, GroupFeature f) const { return group[k * kGroupFeatures + static_cast<int>(f)]; }
  float global_at(GlobalFeature f) const { return global[static_cast<int>(f)]; }
};

// Features of a request with the groups in the given order (each name a GPU type of the cluster, each type
// once). Throws std::invalid_argument when the order misses or repeats a type of the cluster, or names
// another, or when global_batch < 1.
RequestFeatures request_features(const Cluster& cluster, const std::vector<std::string>& type_order,
                                 const ModelConfig& model, long global_batch);

// The same in token order (type_order(cluster)): what the policy is trained and decoded with.
inline RequestFeatures request_features(const Cluster& cluster, const ModelConfig& model, long global_batch) {
  return request_features(cluster, type_order(cluster), model, global_batch);
}

}  // namespace arachne::planner
