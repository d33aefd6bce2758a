// Sub-clusters: a planner that uses only some nodes (megatron's homogeneous subset, a pipeline's nodes)
// builds a Cluster holding just those nodes, plans on it, and maps the plan's GPU ids back.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "sim/hw/cluster.h"
#include "sim/plan/plan.h"

namespace arachne::planner {

struct SubCluster {
  Cluster cluster;                 // nodes renumbered n0.., first_gpu recomputed
  std::vector<GpuId> to_original;  // sub GPU id -> original GPU id
  int min_gpus_per_node = 0;
};

// The nodes `node_ids` (original ids, kept in the given order) as a cluster of their own.
SubCluster make_subcluster(const Cluster& c, const std::vector<int>& node_ids, const std::string& label);
// Rewrites the plan's GPU ids (and selectors) from the sub-cluster to the original cluster.
void map_plan_back(Plan& plan, const SubCluster& sub, const Cluster& original);

// GPU types present, with their GPU counts and node ids (ordered by type name: deterministic).
struct TypeInventory {
  std::string gpu_type;
  int gpus = 0;
  std::vector<int> nodes;
};
std::vector<TypeInventory> type_inventory(const Cluster& c);

}  // namespace arachne::planner
