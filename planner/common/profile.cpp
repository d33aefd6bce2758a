// The profiler stand-in (see profile.h): per-layer costs from the simulator's cost functions.
#include "planner/common/profile.h"

#include <algorithm>
#include <stdexcept>

#include "sim/model/compute_time.h"
#include "sim/model/memory.h"
#include "sim/exec/stage_work.h"

namespace arachne::planner {

ModelConfig activated_dense_equivalent(const ModelConfig& m) {
  if (!m.moe) return m;
  ModelConfig d = m;
  // Every layer dense with the FFN width a token actually passes through: its top_k routed experts plus
  // the shared experts (Megatron-Core MoE; for first_dense / every > 1 models the dense layers keep
  // ffn_hidden, which a planner without MoE support cannot tell apart — the simplification is to price
  // every layer at the activated width when every == 1 and first_dense == 0, and at the mean otherwise).
  const MoeConfig& e = *m.moe;
  const double activated = static_cast<double>(e.top_k + e.shared_experts) * static_cast<double>(e.expert_ffn_hidden);
  int moe_layers = 0;
  for (int l = 0; l < m.layers; ++l) moe_layers += m.is_moe_layer(l) ? 1 : 0;
  const double mean = (activated * moe_layers + static_cast<double>(m.ffn_hidden) * (m.layers - moe_layers)) / m.layers;
  d.ffn_hidden = std::max(1L, static_cast<long>(mean + 0.5));
  d.moe.reset();
  return d;
}

Profiler::Profiler(const Cluster& cluster, const ModelConfig& model)
    : cluster_(cluster), model_(model), priced_(activated_dense_equivalent(model)) {}

const NodeGroup& Profiler::group_of_type(const std::string& gpu_type) const {
  for (const NodeGroup& g : cluster_.groups)
    if (g.gpu == gpu_type) return g;
  throw std::invalid_argument("Profiler: GPU type '" + gpu_type + "' has no node in the cluster");
}

LayerProfile Profiler::compute(int which, const ProfileKey& key) const {
  const GpuSpec& gpu = cluster_.catalog.at(key.gpu_type);
  const ShardSpec s{key.tp, key.sequence_parallel, key.samples};
  LayerProfile p;
  const std::string& dt = priced_.dtype;
  auto tp_time = [&](const std::vector<TpCollectives>& calls) {
    return intra_node_tp_collectives_s(calls, key.tp, group_of_type(key.gpu_type), gpu, dt);
  };
  if (which >= 0) {
    p.forward_s = ops_time_s(layer_forward_ops(priced_, which, s), gpu, dt);
    p.backward_s = ops_time_s(layer_backward_ops(priced_, which, s), gpu, dt) +
                   ops_time_s(layer_recompute_ops(priced_, which, s, key.recompute), gpu, dt);
    // TP collectives priced as the simulator prices them inside one node (sim/exec/stage_work.h): NCCL's
    // ring with its protocol latencies, the per-call overhead, and the backward's input-gradient all-reduces
    // beside their weight-gradient GEMMs. Full recompute repeats the forward's collectives before the
    // backward (Korthikanti et al. 2022 §5).
    const TpCollectives fwd = layer_tp_collectives(priced_, s);
    std::vector<TpCollectives> bwd = layer_tp_backward_collectives(priced_, which, s);
    if (key.recompute == Recompute::Full) bwd.push_back(fwd);
    p.tp_comm_forward_s = tp_time({fwd});
    p.tp_comm_backward_s = tp_time(bwd);
    p.activation_bytes = layer_activation_bytes(model_, which, s, key.recompute);
    p.params = layer_params_per_rank(model_, which, key.tp);
  } else if (which == -1) {
    p.forward_s = ops_time_s(embedding_forward_ops(priced_, s), gpu, dt);
    p.backward_s = ops_time_s(embedding_backward_ops(priced_, s), gpu, dt);
    p.tp_comm_forward_s = tp_time(embedding_tp_collectives(priced_, s, true));
    p.tp_comm_backward_s = tp_time(embedding_tp_collectives(priced_, s, false));
    p.params = embedding_params_per_rank(model_, key.tp);
  } else {
    p.forward_s = ops_time_s(head_forward_ops(priced_, s), gpu, dt);
    p.backward_s = ops_time_s(head_backward_ops(priced_, s), gpu, dt);
    p.tp_comm_forward_s = tp_time(head_tp_collectives(priced_, s, true));
    p.tp_comm_backward_s = tp_time(head_tp_collectives(priced_, s, false));
    p.params = head_params_per_rank(model_, key.tp);
  }
  return p;
}

const LayerProfile& Profiler::layer(int layer, const ProfileKey& key) const {
  if (layer < 0 || layer >= model_.layers) throw std::out_of_range("Profiler::layer: index out of range");
  // Layers of the same kind cost the same; cache per kind (MoE or dense) to keep the cache small.
  const int kind = model_.moe && model_.is_moe_layer(layer) ? 1 : 0;
  const auto k = std::make_tuple(1'000'000 + kind, key);
  auto it = cache_.find(k);
  if (it == cache_.end()) it = cache_.emplace(k, compute(layer, key)).first;
  return it->second;
}

const LayerProfile& Profiler::embedding(const ProfileKey& key) const {
  const auto k = std::make_tuple(-1, key);
  auto it = cache_.find(k);
  if (it == cache_.end()) it = cache_.emplace(k, compute(-1, key)).first;
  return it->second;
}

const LayerProfile& Profiler::head(const ProfileKey& key) const {
  const auto k = std::make_tuple(-2, key);
  auto it = cache_.find(k);
  if (it == cache_.end()) it = cache_.emplace(k, compute(-2, key)).first;
  return it->second;
}

double Profiler::stage_time_s(int begin, int end, const ProfileKey& key) const {
  double t = 0;
  for (int l = begin; l < end; ++l) {
    const LayerProfile& p = layer(l, key);
    t += p.forward_s + p.backward_s + p.tp_comm_forward_s + p.tp_comm_backward_s;
  }
  auto add = [&t](const LayerProfile& p) { t += p.forward_s + p.backward_s + p.tp_comm_forward_s + p.tp_comm_backward_s; };
  if (begin == 0) add(embedding(key));
  if (end == model_.layers) add(head(key));
  return t;
}

double Profiler::stage_memory_bytes(int begin, int end, const ProfileKey& key, double in_flight, int dp,
                                    bool zero1, int ep) const {
  StageMemoryInput in;
  in.layer_begin = begin;
  in.layer_end = end;
  in.has_embedding = begin == 0;
  in.has_head = end == model_.layers;
  in.shard = {key.tp, key.sequence_parallel, key.samples};
  in.recompute = key.recompute;
  in.zero1 = zero1;
  in.dp = std::max(1, dp);
  in.in_flight = in_flight;
  if (model_.moe && ep > 1) {
    in.local_experts = static_cast<double>(model_.moe->experts) / ep;
    in.ep = ep;
  }
  return stage_memory(model_, in).total();
}

double Profiler::gpu_memory_bytes(const std::string& gpu_type) const { return cluster_.catalog.at(gpu_type).memory_bytes; }

double Profiler::p2p_bytes(double samples) const { return arachne::p2p_bytes(model_, samples); }

double Profiler::grad_bytes(int begin, int end, int tp) const {
  double params = 0;
  for (int l = begin; l < end; ++l) params += layer_params_per_rank(model_, l, tp);
  if (begin == 0) params += embedding_params_per_rank(model_, tp);
  if (end == model_.layers) params += head_params_per_rank(model_, tp);
  // Megatron reduces fp32 main gradients for bf16 (sim/exec/stage_work.h reduced_grad_bytes_per_param).
  return params * (model_.dtype == "bf16" ? 4.0 : 2.0);
}

double Profiler::peak_flops(const std::string& gpu_type) const { return cluster_.catalog.at(gpu_type).peak_for(model_.dtype); }

double Profiler::intra_bw(const std::string& gpu_type) const {
  const NodeGroup& g = group_of_type(gpu_type);
  return g.intra_bw * cluster_.catalog.at(gpu_type).compute.link_eff;
}

double Profiler::nic_bw_per_gpu(const std::string& gpu_type) const {
  const NodeGroup& g = group_of_type(gpu_type);
  return g.gpus_per_node > 0 ? g.nic_bw * g.nic_count / g.gpus_per_node : 0.0;
}

}  // namespace arachne::planner
