// Sub-clusters and the GPU inventory (see subcluster.h).
#include "planner/common/subcluster.h"

#include <algorithm>

#include "sim/plan/plan_yaml.h"

namespace arachne::planner {

SubCluster make_subcluster(const Cluster& c, const std::vector<int>& node_ids, const std::string& label) {
  SubCluster s;
  s.cluster = c;
  s.cluster.name = c.name + " [" + label + "]";
  s.cluster.groups.clear();
  s.cluster.nodes.clear();
  std::map<int, int> group_map;  // original group index -> subset group index (first use order)
  GpuId next = 0;
  for (const int id : node_ids) {
    const Node& n = c.nodes.at(id);
    auto it = group_map.find(n.group);
    if (it == group_map.end()) {
      it = group_map.emplace(n.group, static_cast<int>(s.cluster.groups.size())).first;
      NodeGroup grp = c.groups[n.group];
      grp.nodes = 0;
      s.cluster.groups.push_back(grp);
    }
    Node m = n;
    m.id = static_cast<int>(s.cluster.nodes.size());
    m.group = it->second;
    m.first_gpu = next;
    next += n.gpus;
    s.cluster.groups[m.group].nodes += 1;
    s.cluster.nodes.push_back(m);
    for (int l = 0; l < n.gpus; ++l) s.to_original.push_back(n.first_gpu + l);
    s.min_gpus_per_node = s.min_gpus_per_node == 0 ? n.gpus : std::min(s.min_gpus_per_node, n.gpus);
  }
  return s;
}

void map_plan_back(Plan& plan, const SubCluster& sub, const Cluster& original) {
  for (Pipeline& p : plan.pipelines)
    for (Stage& st : p.stages)
      for (TpGroup& g : st.groups) {
        for (GpuId& id : g.gpus) id = sub.to_original.at(id);
        g.selector = format_gpu_selector(g.gpus, original);
      }
}

std::vector<TypeInventory> type_inventory(const Cluster& c) {
  std::map<std::string, TypeInventory> by_type;
  for (const Node& n : c.nodes) {
    if (n.gpus <= 0) continue;
    TypeInventory& t = by_type[c.groups[n.group].gpu];
    t.gpu_type = c.groups[n.group].gpu;
    t.gpus += n.gpus;
    t.nodes.push_back(n.id);
  }
  std::vector<TypeInventory> out;
  for (auto& [name, t] : by_type) out.push_back(std::move(t));
  return out;
}

}  // namespace arachne::planner
