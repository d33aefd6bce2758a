// Placement of a template's TP groups on GPUs (see placement.h).
#include "planner/template/placement.h"

#include <algorithm>
#include <tuple>

namespace arachne::planner {
namespace {

// One kind of one stage of one pipeline: `groups` TP groups of `tp` GPUs of one type.
struct Demand {
  int index = 0;  // in demands_of's order
  int pipeline = 0, stage = 0, kind = 0;
  std::string gpu_type;
  int tp = 1, groups = 1;
  int peers = -1;  // the stage's block of replicas (its nodes are preferred), else -1
};

// The cluster's free GPUs, node by node: each node's free local indices, ascending, in one flat array (a
// node's slice starts at its first GPU's id and holds its free count).
class FreeGpus {
 public:
  explicit FreeGpus(const Cluster& c) : c_(c), free_(c.total_gpus()), count_(c.nodes.size()) {
    for (const Node& n : c.nodes) {
      for (int k = 0; k < n.gpus; ++k) free_[n.first_gpu + k] = k;
      count_[n.id] = n.gpus;
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
  // uses) where that is as good; false when the free GPUs cannot hold them (`out` then unspecified).
  bool take(const std::string& type, int tp, int groups, const std::vector<int>& near, std::vector<std::vector<GpuId>>& out) {
    const auto it = std::find(types_.begin(), types_.end(), type);
    if (it == types_.end()) return false;
    const std::vector<int>& of_type = nodes_of_type_[it - types_.begin()];  // ascending ids
    if (const int node = one_node(of_type, tp * groups, near); node >= 0) {
      nodes_.assign(1, node);
      fill(tp, groups, near, out);
      return true;
    }
    for (const int leaf : leaf_order(near)) {
      nodes_.clear();
      for (const int n : of_type)
        if (leaf_of(n) == leaf) nodes_.push_back(n);
      if (capacity(nodes_, tp) >= groups) {
        fill(tp, groups, near, out);
        return true;
      }
    }
    if (capacity(of_type, tp) < groups) return false;
    nodes_ = of_type;
    fill(tp, groups, near, out);
    return true;
  }

 private:
  const Cluster& c_;
  std::vector<int> free_;   // by GPU id: node n's free local indices are free_[first_gpu, first_gpu + count_[n])
  std::vector<int> count_;  // per node: its free GPUs
  std::vector<std::string> types_;      // the GPU types of the nodes, in order of first node
  std::vector<std::vector<int>> nodes_of_type_;  // per type: its nodes, ascending
  int per_leaf_ = 1;
  std::vector<int> nodes_, order_;  // scratch of take and leaf_order

  int leaf_of(int node) const { return node / per_leaf_; }  // sim/hw/topology.cpp: one leaf per nodes_per_leaf nodes
  int free_count(int node) const { return count_[node]; }
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
  const std::vector<int>& leaf_order(const std::vector<int>& near) {
    order_.clear();
    for (const int n : near)
      if (!contains(order_, leaf_of(n))) order_.push_back(leaf_of(n));
    const int leaves = c_.nodes.empty() ? 0 : leaf_of(static_cast<int>(c_.nodes.size()) - 1) + 1;
    for (int l = 0; l < leaves; ++l)
      if (!contains(order_, l)) order_.push_back(l);
    return order_;
  }

  // `groups` groups from the nodes of nodes_ (which hold them), filled one node at a time (near first, whole
  // nodes first, most free first: few nodes per stage).
  void fill(int tp, int groups, const std::vector<int>& near, std::vector<std::vector<GpuId>>& out) {
    auto key = [&](int n) { return std::make_tuple(!contains(near, n), -c_.nodes[n].gpus, -free_count(n), n); };
    std::sort(nodes_.begin(), nodes_.end(), [&](int a, int b) { return key(a) < key(b); });
    out.clear();
    for (const int n : nodes_)
      while (static_cast<int>(out.size()) < groups && free_count(n) >= tp) out.push_back(take_group(n, tp));
  }

  // The lowest run of tp consecutive free local GPUs of the node, else its tp lowest free GPUs.
  std::vector<GpuId> take_group(int node, int tp) {
    int* f = free_.data() + c_.nodes[node].first_gpu;
    int& count = count_[node];
    int start = 0;
    for (int i = 0; i + tp <= count; ++i)
      if (f[i + tp - 1] - f[i] == tp - 1) {
        start = i;
        break;
      }
    std::vector<GpuId> gpus;
    gpus.reserve(tp);
    for (int i = start; i < start + tp; ++i) gpus.push_back(c_.gpu_id(node, f[i]));
    std::copy(f + start + tp, f + count, f + start);
    count -= tp;
    return gpus;
  }
};

// The replicas of a class that form its EP groups across pipelines (the largest EP degree of its stages
// with EP across pipelines; 1 when none has): placed stage by stage as one block.
int ep_block(const PipelineTemplate& pt) {
  int block = 1;
  for (const StageTemplate& st : pt.stages)
    if (st.ep > 1 && st.ep_scope == EpScope::Pipelines) block = std::max(block, st.ep);
  return std::min(block, pt.replicas);
}

// Every kind of every stage of every pipeline, in the demands' index order: classes in order, replicas
// consecutive.
std::vector<Demand> demands_in_plan_order(const Template& t) {
  std::vector<Demand> out;
  int pipeline = 0;
  for (const PipelineTemplate& pt : t.pipelines)
    for (int r = 0; r < pt.replicas; ++r, ++pipeline)
      for (int j = 0; j < static_cast<int>(pt.stages.size()); ++j)
        for (int k = 0; k < static_cast<int>(pt.stages[j].kinds.size()); ++k) {
          const GroupKind& kind = pt.stages[j].kinds[k];
          out.push_back({static_cast<int>(out.size()), pipeline, j, k, kind.gpu_type, pt.stages[j].tp, kind.groups});
        }
  return out;
}

// Where each class's demands start in demands_in_plan_order, and per class where each stage's start within
// a replica's (one more entry: a replica's demands).
struct DemandOffsets {
  std::vector<size_t> first;                // per class
  std::vector<std::vector<size_t>> stage;  // per class, per stage (and the end)
  explicit DemandOffsets(const Template& t) {
    size_t at = 0;
    for (const PipelineTemplate& pt : t.pipelines) {
      first.push_back(at);
      stage.emplace_back(1, 0);
      for (const StageTemplate& st : pt.stages) stage.back().push_back(stage.back().back() + st.kinds.size());
      at += pt.replicas * stage.back().back();
    }
  }
  // Appends replica r's demands of stage j of class c to `out`, each with `peers`.
  void append(const std::vector<Demand>& all, size_t c, int r, size_t j, int peers, std::vector<Demand>& out) const {
    const size_t base = first[c] + r * stage[c].back();
    for (size_t d = base + stage[c][j]; d < base + stage[c][j + 1]; ++d) {
      out.push_back(all[d]);
      out.back().peers = peers;
    }
  }
};

// Stage by stage over every class: stage j of each class, its replicas in order, then stage j + 1. The
// stages at the same place with the same TP width and kinds form one block of peers, whichever class they
// belong to, so a stage's data-parallel peers share a node where it holds them: AMP's and Metis's plans put
// stage j of every pipeline on one node so (Megatron-LM's rank order, dp before pp), where placing each
// class's replicas as a block of its own leaves the classes' peers on different nodes.
std::vector<Demand> stage_by_stage(const Template& t, const std::vector<Demand>& all) {
  const DemandOffsets at(t);
  size_t depth = 0;
  for (const PipelineTemplate& pt : t.pipelines) depth = std::max(depth, pt.stages.size());
  std::vector<Demand> out;
  out.reserve(all.size());
  int blocks = 0;
  for (size_t j = 0; j < depth; ++j) {
    std::vector<std::pair<const StageTemplate*, int>> kinds;  // the stages at place j so far, their block
    for (size_t c = 0; c < t.pipelines.size(); ++c) {
      const PipelineTemplate& pt = t.pipelines[c];
      if (j >= pt.stages.size()) continue;
      const StageTemplate& st = pt.stages[j];
      const auto same = std::find_if(kinds.begin(), kinds.end(), [&](const auto& k) {
        return k.first->tp == st.tp && k.first->kinds == st.kinds;
      });
      const int peers = same != kinds.end() ? same->second : blocks++;
      if (same == kinds.end()) kinds.push_back({&st, peers});
      for (int r = 0; r < pt.replicas; ++r) at.append(all, c, r, j, peers, out);
    }
  }
  return out;
}

// Plan order, except that a class whose replicas form EP groups across pipelines (ep_block above one) is
// placed per block of that many replicas, stage by stage, each stage's replicas in order.
std::vector<Demand> expert_blocks_by_stage(const Template& t, std::vector<Demand> all) {
  if (std::none_of(t.pipelines.begin(), t.pipelines.end(), [](const PipelineTemplate& pt) { return ep_block(pt) > 1; }))
    return all;
  const DemandOffsets at(t);
  std::vector<Demand> out;
  out.reserve(all.size());
  int blocks = 0;  // stage blocks, numbered in placement order
  for (size_t c = 0; c < t.pipelines.size(); ++c) {
    const PipelineTemplate& pt = t.pipelines[c];
    const int block = ep_block(pt);
    if (block == 1) {
      const auto first = all.begin() + static_cast<std::ptrdiff_t>(at.first[c]);
      out.insert(out.end(), first, first + static_cast<std::ptrdiff_t>(pt.replicas * at.stage[c].back()));
      continue;
    }
    for (int b0 = 0; b0 < pt.replicas; b0 += block)
      for (size_t j = 0; j < pt.stages.size(); ++j, ++blocks)
        for (int r = b0; r < std::min(b0 + block, pt.replicas); ++r) at.append(all, c, r, j, blocks, out);
  }
  return out;
}

// The demands in placement order: stage_by_stage with `replicas_by_stage`, else expert_blocks_by_stage.
std::vector<Demand> demands_of(const Template& t, bool replicas_by_stage) {
  std::vector<Demand> all = demands_in_plan_order(t);
  return replicas_by_stage ? stage_by_stage(t, all) : expert_blocks_by_stage(t, std::move(all));
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
  std::vector<std::vector<int>> nodes_of_peers;               // nodes each stage block uses so far
  std::vector<std::vector<std::vector<GpuId>>> placed(demands.size());  // by the demand's index
  auto add = [](std::vector<int>& nodes, int node) {
    if (std::find(nodes.begin(), nodes.end(), node) == nodes.end()) nodes.push_back(node);
  };
  for (const Demand& d : demands) {
    if (d.peers >= static_cast<int>(nodes_of_peers.size())) nodes_of_peers.resize(d.peers + 1);
    // Near the stage's peers in its block where it has them placed, else near its pipeline.
    const bool by_peers = d.peers >= 0 && !nodes_of_peers[d.peers].empty();
    const std::vector<int>& near = by_peers ? nodes_of_peers[d.peers] : nodes_of[d.pipeline];
    std::vector<std::vector<GpuId>>& groups = placed[d.index];
    if (!free.take(d.gpu_type, d.tp, d.groups, near, groups)) return false;
    for (const auto& g : groups) {
      const int node = cluster.node_of(g.front());
      add(nodes_of[d.pipeline], node);
      if (d.peers >= 0) add(nodes_of_peers[d.peers], node);
    }
  }
  // In the demands' first order (pipelines, stages, kinds), each kind's groups in placement order.
  size_t index = 0;
  for (size_t p = 0; p < pipelines.size(); ++p) {
    const PipelineTemplate& pt = t.pipelines[pipelines[p].pipeline_class];
    for (size_t j = 0; j < pt.stages.size(); ++j)
      for (size_t k = 0; k < pt.stages[j].kinds.size(); ++k, ++index)
        for (auto& gpus : placed[index])
          pipelines[p].stages[j].groups.push_back({pt.stages[j].kinds[k].gpu_type, std::move(gpus)});
  }
  return true;
}

}  // namespace

std::optional<std::vector<PlacedPipeline>> place_template(const Template& t, const Cluster& cluster, bool replicas_by_stage) {
  std::vector<Demand> demands = demands_of(t, replicas_by_stage);
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
