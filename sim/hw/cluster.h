// A cluster: node groups of one GPU type each, and a leaf/spine network.
// Built from a YAML file (configs/clusters/*.yaml) or a spec string "A100-80:4x8,V100-32:8x4".
#pragma once
#include <string>
#include <vector>

#include "sim/hw/gpu.h"

namespace arachne {

using GpuId = int;  // global GPU index: nodes in listing order, local GPUs 0..g-1 inside each

struct NetworkConfig {
  std::string topology = "leaf-spine";
  int nodes_per_leaf = 16;
  double oversubscription = 1.0;  // leaf downlink capacity / leaf uplink capacity
  double latency_s = 5e-6;        // per inter-node message
};

struct NodeGroup {
  std::string gpu;  // GPU type name (catalog or cluster-local `gpus:`)
  int nodes = 0;
  int gpus_per_node = 0;
  LinkKind intra_kind = LinkKind::NvLink;
  double intra_bw = 0;  // bytes/s per GPU per direction
  int nic_count = 0;
  double nic_bw = 0;    // bytes/s per NIC per direction
};

struct Node {
  int id = 0;       // n<id>
  int group = 0;    // index into Cluster::groups
  GpuId first_gpu = 0;
  int gpus = 0;
};

struct Cluster {
  std::string name;
  std::string source;  // file path or spec string it came from
  NetworkConfig network;
  std::vector<NodeGroup> groups;
  std::vector<Node> nodes;
  GpuCatalog catalog;  // the catalog plus any cluster-local GPU types

  int total_gpus() const;
  int node_of(GpuId g) const;
  int local_of(GpuId g) const { return g - nodes[node_of(g)].first_gpu; }
  const NodeGroup& group_of_node(int node) const { return groups[nodes[node].group]; }
  const GpuSpec& gpu_spec(GpuId g) const { return catalog.at(group_of_node(node_of(g)).gpu); }
  GpuId gpu_id(int node, int local) const { return nodes[node].first_gpu + local; }
  std::string gpu_label(GpuId g) const;  // "n3:5"
  std::string to_yaml() const;           // full configuration, for HDF5 attributes
};

// Accepts a path to a cluster YAML, a bundled name (configs/clusters/<name>.yaml) or a spec string.
// Throws InputError with file:line: field, or the spec string as `where`.
Cluster load_cluster(const std::string& file_name_or_spec, const GpuCatalog& catalog);
Cluster parse_cluster_spec(const std::string& spec, const GpuCatalog& catalog);
Cluster parse_cluster_yaml(const std::string& path, const GpuCatalog& catalog);
// A cluster YAML document given as text (e.g. Cluster::to_yaml() stored in a dataset); `where` names it in
// errors as a file path would.
Cluster parse_cluster_yaml_text(const std::string& text, const std::string& where, const GpuCatalog& catalog);

}  // namespace arachne
