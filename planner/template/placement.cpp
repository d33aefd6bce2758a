// Placement of a template's TP groups on GPUs (see placement.h).
#include "planner/template/placement.h"

#include <algorithm>
#include <tuple>

namespace arachne::planner {
namespace {

// One kind of one stage of one pipeline: `groups` TP groups of `tp` GPUs of one type.
struct Demand {
  int pipeline = 0, stage = 0, kind = 0;
  std::string gpu_type;
  int tp = 1, groups = 1;
};

// The cluster's free GPUs, node by node.
class FreeGpus {
 public:
  explicit FreeGpus(const Cluster& c) : c_(c), free_(c.nodes.size()) {
    for (const Node& n : c.nodes) {
      for (int k = 0; k < n.gpus; ++k) free_[n.id].push_back(k);
      const std::string& type = c.group_of_node(n.id).gpu;
      auto it = std::find(types_.begin(), types_.end(), type);
      if (it == types_.end()) {
        types_.push_back(type);
        nodes_of_type_.emplace_back();
        it = types_.end() - 1;
      }
      nodes_of_type_[it - types_.begin()].push_back(n.id);
    }
    per_leaf_ = std::max(1, c.network.nodes_per_leaf);
  }

  // The GPUs of `groups` groups of `tp` GPUs of `type`, near the nodes in `near` (nodes the pipeline already
  // uses) where that is as good; nullopt when the free GPUs cannot hold them.
  std::optional<std::vector<std::vector<GpuId>>> take(const std::string& type, int tp, int groups,
                                                      const std::vector<int>& near) {
    const auto it = std::find(types_.begin(), types_.end(), type);
    if (it == types_.end()) return std::nullopt;
    const std::vector<int>& of_type = nodes_of_type_[it - types_.begin()];  // ascending ids
    if (const int node = one_node(of_type, tp * groups, near); node >= 0) return fill({node}, tp, groups, near);
    for (const int leaf : leaf_order(near)) {
      std::vector<int> nodes;
      for (const int n : of_type)
        if (leaf_of(n) == leaf) nodes.push_back(n);
      if (capacity(nodes, tp) >= groups) return fill(nodes, tp, groups, near);
    }
    if (capacity(of_type, tp) >= groups) return fill(of_type, tp, groups, near);
    return std::nullopt;
  }

 private:
  const Cluster& c_;
  std::vector<std::vector<int>> free_;  // per node: free local GPU indices, ascending
  std::vector<std::string> types_;      // the GPU types of the nodes, in order of first node
  std::vector<std::vector<int>> nodes_of_type_;  // per type: its nodes, ascending
  int per_leaf_ = 1;

  int leaf_of(int node) const { return node / per_leaf_; }  // sim/hw/topology.cpp: one leaf per nodes_per_leaf nodes
  int free_count(int node) const { return static_cast<int>(free_[node].size()); }
  static bool contains(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }
  int capacity(const std::vector<int>& nodes, int tp) const {
    int groups = 0;
    for (const int n : nodes) groups += free_count(n) / tp;
    return groups;
  }

  // The node of `nodes` that holds `need` GPUs: near first, whole (larger) nodes first, tightest fit, lowest
  // id; -1 if none.
  int one_node(const std::vector<int>& nodes, int need, const std::vector<int>& near) const {
    int best = -1;
    std::tuple<bool, int, int, int> best_key;
    for (const int n : nodes) {
      if (free_count(n) < need) continue;
      const auto key = std::make_tuple(!contains(near, n), -c_.nodes[n].gpus, free_count(n) - need, n);
      if (best < 0 || key < best_key) {
        best = n;
        best_key = key;
      }
    }
    return best;
  }

  // Leaves to try for a stage split over nodes: the leaves of `near` first, then by id.
  std::vector<int> leaf_order(const std::vector<int>& near) const {
    std::vector<int> order;
    for (const int n : near)
      if (!contains(order, leaf_of(n))) order.push_back(leaf_of(n));
    const int leaves = c_.nodes.empty() ? 0 : leaf_of(static_cast<int>(c_.nodes.size()) - 1) + 1;
    for (int l = 0; l < leaves; ++l)
      if (!contains(order, l)) order.push_back(l);
    return order;
  }

  // Fills nodes one at a time (near first, whole nodes first, most free first: few nodes per stage).
  std::vector<std::vector<GpuId>> fill(std::vector<int> nodes, int tp, int groups, const std::vector<int>& near) {
    std::sort(nodes.begin(), nodes.end(), [&](int a, int b) {
      return std::make_tuple(!contains(near, a), -c_.nodes[a].gpus, -free_count(a), a) <
             std::make_tuple(!contains(near, b), -c_.nodes[b].gpus, -free_count(b), b);
    });
    std::vector<std::vector<GpuId>> out;
    for (const int n : nodes)
      while (static_cast<int>(out.size()) < groups && free_count(n) >= tp) out.push_back(take_group(n, tp));
    return out;
  }

  // The lowest run of tp consecutive free local GPUs of the node, else its tp lowest free GPUs.
  std::vector<GpuId> take_group(int node, int tp) {
    std::vector<int>& f = free_[node];
    size_t start = 0;
    bool run = false;
    for (size_t i = 0; i + tp <= f.size() && !run; ++i)
      if (f[i + tp - 1] - f[i] == tp - 1) {
        start = i;
        run = true;
      }
    std::vector<GpuId> gpus;
    for (size_t i = start; i < start + tp; ++i) gpus.push_back(c_.gpu_id(node, f[i]));
    f.erase(f.begin() + static_cast<long>(start), f.begin() + static_cast<long>(start) + tp);
    return gpus;
  }
};

// Every kind of every stage of every pipeline (classes in order, replicas consecutive), in that order.
std::vector<Demand> demands_of(const Template& t) {
  std::vector<Demand> out;
  int pipeline = 0;
  for (const PipelineTemplate& pt : t.pipelines)
    for (int r = 0; r < pt.replicas; ++r, ++pipeline)
      for (int j = 0; j < static_cast<int>(pt.stages.size()); ++j)
        for (int k = 0; k < static_cast<int>(pt.stages[j].kinds.size()); ++k) {
          const GroupKind& kind = pt.stages[j].kinds[k];
          out.push_back({pipeline, j, k, kind.gpu_type, pt.stages[j].tp, kind.groups});
        }
  return out;
}

// The pipelines' shapes with empty groups, to be filled by place_demands.
std::vector<PlacedPipeline> empty_pipelines(const Template& t) {
  std::vector<PlacedPipeline> out;
  for (int c = 0; c < static_cast<int>(t.pipelines.size()); ++c)
    for (int r = 0; r < t.pipelines[c].replicas; ++r) {
      PlacedPipeline p;
      p.pipeline_class = c;
      p.replica = r;
      p.stages.resize(t.pipelines[c].stages.size());
      out.push_back(std::move(p));
    }
  return out;
}

// Places the demands in the given order; false when one does not fit.
bool place_demands(const std::vector<Demand>& demands, const Template& t, const Cluster& cluster,
                   std::vector<PlacedPipeline>& pipelines) {
  FreeGpus free(cluster);
  std::vector<std::vector<int>> nodes_of(pipelines.size());  // nodes each pipeline uses so far
  // kinds[p][j][k]: the groups of kind k of stage j of pipeline p.
  std::vector<std::vector<std::vector<std::vector<std::vector<GpuId>>>>> kinds(pipelines.size());
  for (size_t p = 0; p < pipelines.size(); ++p) {
    const PipelineTemplate& pt = t.pipelines[pipelines[p].pipeline_class];
    for (const StageTemplate& st : pt.stages) kinds[p].emplace_back(st.kinds.size());
  }
  for (const Demand& d : demands) {
    auto groups = free.take(d.gpu_type, d.tp, d.groups, nodes_of[d.pipeline]);
    if (!groups) return false;
    for (const auto& g : *groups) {
      const int node = cluster.node_of(g.front());
      if (std::find(nodes_of[d.pipeline].begin(), nodes_of[d.pipeline].end(), node) == nodes_of[d.pipeline].end())
        nodes_of[d.pipeline].push_back(node);
    }
    kinds[d.pipeline][d.stage][d.kind] = std::move(*groups);
  }
  for (size_t p = 0; p < pipelines.size(); ++p) {
    const PipelineTemplate& pt = t.pipelines[pipelines[p].pipeline_class];
    for (size_t j = 0; j < pt.stages.size(); ++j)
      for (size_t k = 0; k < pt.stages[j].kinds.size(); ++k)
        for (auto& gpus : kinds[p][j][k])
          pipelines[p].stages[j].groups.push_back({pt.stages[j].kinds[k].gpu_type, std::move(gpus)});
  }
  return true;
}

}  // namespace

std::optional<std::vector<PlacedPipeline>> place_template(const Template& t, const Cluster& cluster) {
  std::vector<Demand> demands = demands_of(t);
  for (const Demand& d : demands)
    if (d.tp < 1 || d.groups < 1) return std::nullopt;
  std::vector<PlacedPipeline> pipelines = empty_pipelines(t);
  if (place_demands(demands, t, cluster, pipelines)) return pipelines;
  // Widest groups first (first-fit decreasing): narrow groups placed early can leave no node a wide group fits.
  std::stable_sort(demands.begin(), demands.end(), [](const Demand& a, const Demand& b) { return a.tp > b.tp; });
  pipelines = empty_pipelines(t);
  if (place_demands(demands, t, cluster, pipelines)) return pipelines;
  return std::nullopt;
}

}  // namespace arachne::planner
