// Features of a request; the meaning and unit of each entry is documented in features.h.
#include "planner/arachne/features.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <stdexcept>

namespace arachne::planner {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
// Mixed-precision Adam keeps 16 bytes per parameter (fp16/bf16 weights and gradients, fp32 master weights,
// momentum and variance): Rajbhandari et al. 2020, "ZeRO", sec. 3.1.
constexpr double kStateBytesPerParameter = 16.0;

float log2f_of(double x) { return static_cast<float>(std::log2(x)); }
float log2_1p(double n) { return static_cast<float>(std::log2(1.0 + n)); }

// The nodes of one GPU type, summed over the cluster's node groups of that type.
struct TypeGroup {
  int gpus = 0;
  int nodes = 0;
  int largest_node = 0;
  int partial_nodes = 0;
  double intra_bw_sum = 0;  // sum over GPUs of each GPU's intra-node bandwidth (bytes/s)
  double nic_bw_sum = 0;    // sum over GPUs of each GPU's NIC bandwidth share (bytes/s)
};

void check_order(const Cluster& cluster, const std::vector<std::string>& order) {
  std::set<std::string> present;
  for (const NodeGroup& g : cluster.groups) present.insert(g.gpu);
  const std::set<std::string> named(order.begin(), order.end());
  if (named.size() != order.size()) throw std::invalid_argument("features: the type order repeats a GPU type");
  if (named != present)
    throw std::invalid_argument("features: the type order does not list exactly the cluster's GPU types");
}

std::map<std::string, TypeGroup> type_groups(const Cluster& cluster) {
  std::map<std::string, TypeGroup> by_type;
  for (const Node& n : cluster.nodes) {
    const NodeGroup& g = cluster.groups[n.group];
    TypeGroup& t = by_type[g.gpu];
    t.gpus += n.gpus;
    t.nodes += 1;
    t.largest_node = std::max(t.largest_node, n.gpus);
    t.intra_bw_sum += n.gpus * g.intra_bw;
    // Each node's NICs are shared by the GPUs the node group is built for.
    const double nic_per_gpu = g.gpus_per_node > 0 ? g.nic_count * g.nic_bw / g.gpus_per_node : 0.0;
    t.nic_bw_sum += n.gpus * nic_per_gpu;
  }
  for (const Node& n : cluster.nodes) {
    TypeGroup& t = by_type[cluster.groups[n.group].gpu];
    if (n.gpus < t.largest_node) ++t.partial_nodes;
  }
  return by_type;
}

std::vector<float> group_row(const TypeGroup& t, const GpuSpec& spec, const ModelConfig& model, int total_gpus,
                             double cluster_peak) {
  std::vector<float> f(kGroupFeatures);
  auto set = [&f](GroupFeature which, float v) { f[static_cast<int>(which)] = v; };
  const double peak = spec.peak_for(model.dtype);
  set(GroupFeature::LogGpus, log2f_of(t.gpus));
  set(GroupFeature::GpuShare, static_cast<float>(static_cast<double>(t.gpus) / total_gpus));
  set(GroupFeature::LogNodes, log2f_of(t.nodes));
  set(GroupFeature::LogLargestNode, log2f_of(t.largest_node));
  set(GroupFeature::LogPartialNodes, log2_1p(t.partial_nodes));
  set(GroupFeature::LogPeakTflops, log2f_of(peak / 1e12));
  set(GroupFeature::FlopShare, static_cast<float>(t.gpus * peak / cluster_peak));
  set(GroupFeature::LogMemoryGib, log2f_of(spec.memory_bytes / kGiB));
  set(GroupFeature::LogHbmTbps, log2f_of(spec.hbm_bw / 1e12));
  set(GroupFeature::LogIntraGbps, log2f_of(t.intra_bw_sum / t.gpus / 1e9));
  set(GroupFeature::LogNicGbps, log2f_of(std::max(t.nic_bw_sum / t.gpus, 1.0) / 1e9));
  set(GroupFeature::LogStateGpus, log2f_of(model.parameters() * kStateBytesPerParameter / spec.memory_bytes));
  return f;
}

std::vector<float> global_row(const Cluster& cluster, int types, const ModelConfig& model, long global_batch) {
  std::vector<float> f(kGlobalFeatures);
  auto set = [&f](GlobalFeature which, float v) { f[static_cast<int>(which)] = v; };
  const int total = cluster.total_gpus();
  set(GlobalFeature::LogTotalGpus, log2f_of(total));
  set(GlobalFeature::GpuTypes, static_cast<float>(types));
  set(GlobalFeature::LogNodesPerLeaf, log2f_of(cluster.network.nodes_per_leaf));
  set(GlobalFeature::LogOversubscription, log2f_of(cluster.network.oversubscription));
  set(GlobalFeature::LogLatencyUs, log2f_of(cluster.network.latency_s * 1e6));
  set(GlobalFeature::LogLayers, log2f_of(model.layers));
  set(GlobalFeature::LogHidden, log2f_of(static_cast<double>(model.hidden)));
  set(GlobalFeature::LogHeads, log2f_of(model.heads));
  set(GlobalFeature::LogKvHeads, log2f_of(model.kv_heads > 0 ? model.kv_heads : model.heads));
  set(GlobalFeature::LogFfnHidden, log2f_of(static_cast<double>(model.ffn_hidden > 0 ? model.ffn_hidden : 4 * model.hidden)));
  set(GlobalFeature::Swiglu, model.ffn_kind == FfnKind::Swiglu ? 1.0f : 0.0f);
  set(GlobalFeature::LogSeqLen, log2f_of(static_cast<double>(model.seq_len)));
  set(GlobalFeature::LogVocab, log2f_of(static_cast<double>(model.vocab)));
  set(GlobalFeature::Bf16, model.dtype == "bf16" ? 1.0f : 0.0f);
  set(GlobalFeature::FlashAttention, model.attention == Attention::Flash ? 1.0f : 0.0f);
  set(GlobalFeature::LogParameters, log2f_of(model.parameters() / 1e9));
  if (model.moe) {
    const MoeConfig& m = *model.moe;
    int moe_layers = 0;
    for (int l = 0; l < model.layers; ++l) moe_layers += model.is_moe_layer(l) ? 1 : 0;
    set(GlobalFeature::Moe, 1.0f);
    set(GlobalFeature::LogExperts, log2_1p(m.experts));
    set(GlobalFeature::LogTopK, log2_1p(m.top_k));
    set(GlobalFeature::LogExpertFfn, log2_1p(static_cast<double>(m.expert_ffn_hidden)));
    set(GlobalFeature::LogSharedExperts, log2_1p(m.shared_experts));
    set(GlobalFeature::FirstDenseShare, static_cast<float>(static_cast<double>(m.first_dense) / model.layers));
    set(GlobalFeature::MoeLayerShare, static_cast<float>(static_cast<double>(moe_layers) / model.layers));
  }
  set(GlobalFeature::LogGlobalBatch, log2f_of(static_cast<double>(global_batch)));
  set(GlobalFeature::LogBatchPerGpu, log2f_of(static_cast<double>(global_batch) / total));
  return f;
}

}  // namespace

RequestFeatures request_features(const Cluster& cluster, const std::vector<std::string>& type_order,
                                 const ModelConfig& model, long global_batch) {
  if (global_batch < 1) throw std::invalid_argument("features: global batch must be at least 1");
  check_order(cluster, type_order);
  const std::map<std::string, TypeGroup> groups = type_groups(cluster);
  double cluster_peak = 0;
  for (const auto& [type, t] : groups) cluster_peak += t.gpus * cluster.catalog.at(type).peak_for(model.dtype);

  RequestFeatures out;
  out.groups = static_cast<int>(type_order.size());
  for (const std::string& type : type_order) {
    const std::vector<float> row =
        group_row(groups.at(type), cluster.catalog.at(type), model, cluster.total_gpus(), cluster_peak);
    out.group.insert(out.group.end(), row.begin(), row.end());
  }
  out.global = global_row(cluster, out.groups, model, global_batch);
  return out;
}

}  // namespace arachne::planner
