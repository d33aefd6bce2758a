// The `metis` baseline planner (algorithm, sources and deviations in metis_planner.h).
#include "planner/baselines/metis/metis_planner.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "planner/common/evaluator.h"
#include "planner/common/plan_builder.h"
#include "planner/common/profile.h"
#include "planner/common/subcluster.h"
#include "sim/model/compute_time.h"
#include "sim/plan/plan_yaml.h"

namespace arachne::planner {
namespace metis_detail {
namespace {

// search_space/device_group.py gen_dgroups_recursive: non-decreasing sequences of `stages` shapes summing to
// `gpus`, with the same pruning, in the same (ascending) order.
void dgroups_recursive(int stages, int gpus, const std::vector<int>& shapes, int sum, int idx, int prev, std::vector<int>& cur,
                       const std::function<bool(const std::vector<int>&)>& fn, bool& stop) {
  if (stop) return;
  if (static_cast<long>(shapes.back()) * (stages - idx) < gpus - sum) return;   // max GPUs < total
  if (static_cast<long>(shapes.front()) * (stages - idx) > gpus - sum) return;  // min GPUs > total
  if (idx >= stages) {
    if (static_cast<int>(cur.size()) == stages && sum == gpus && !fn(cur)) stop = true;
    return;
  }
  for (int i = std::max(0, prev); i < static_cast<int>(shapes.size()) && !stop; ++i) {
    if (shapes[i] + sum > gpus) break;
    cur.push_back(shapes[i]);
    dgroups_recursive(stages, gpus, shapes, sum + shapes[i], idx + 1, i, cur, fn, stop);
    cur.pop_back();
  }
}

// device_group.py permute(): merge equal smallest groups (blocks) until at most max_permute_len remain.
std::vector<std::vector<int>> merge_blocks(const std::vector<int>& s, int max_permute_len) {
  std::vector<std::vector<int>> groups;
  for (const int e : s) groups.push_back({e});
  auto total = [](const std::vector<int>& g) { return std::accumulate(g.begin(), g.end(), 0); };
  long num_reduce = static_cast<long>(groups.size()) - max_permute_len;
  while (num_reduce > 0) {
    const int min_group_size = total(groups[0]);
    // find_num_min: 1 + index of the first block different from the first (len when all equal).
    long num_min_groups = static_cast<long>(groups.size());
    for (size_t i = 0; i < groups.size(); ++i)
      if (groups[i] != groups[0]) {
        num_min_groups = static_cast<long>(i) + 1;
        break;
      }
    if (num_min_groups / 2 > num_reduce) num_reduce = num_min_groups / 2;
    std::vector<std::vector<int>> merged;
    for (size_t i = 0; i < groups.size(); i += 2) {
      if (num_reduce <= static_cast<long>(i / 2)) {
        merged.insert(merged.end(), groups.begin() + static_cast<long>(i), groups.end());
        break;
      }
      if (i + 1 >= groups.size()) {
        merged.push_back(groups[i]);
      } else if (total(groups[i]) == min_group_size && total(groups[i]) == total(groups[i + 1])) {
        std::vector<int> m = groups[i];
        m.insert(m.end(), groups[i + 1].begin(), groups[i + 1].end());
        merged.push_back(m);
      } else {
        merged.push_back(groups[i]);
        merged.push_back(groups[i + 1]);
      }
    }
    groups = std::move(merged);
    if (num_reduce == static_cast<long>(groups.size()) - max_permute_len) break;  // cannot reduce further
    num_reduce = static_cast<long>(groups.size()) - max_permute_len;
  }
  return groups;
}

// gen_dgroups_for_stages_with_variance, lazily: fn(shape) returns false to stop. Returns false if stopped.
bool for_each_device_group(int stages, int gpus, double variance, int max_permute_len,
                           const std::function<bool(const std::vector<int>&)>& fn) {
  std::vector<int> shapes;  // gen_device_group_shapes: powers of two <= gpus
  for (long p = 1; p <= gpus; p *= 2) shapes.push_back(static_cast<int>(p));
  // Key idea 1: limit the size of a device group.
  const double min_group = static_cast<double>(std::max(gpus / stages, stages / gpus)) * variance;
  std::vector<int> kept;
  for (const int s : shapes)
    if (s >= min_group) kept.push_back(s);
  if (kept.empty()) return true;
  bool stop = false;
  std::vector<int> cur;
  dgroups_recursive(stages, gpus, kept, 0, 0, 0, cur,
                    [&](const std::vector<int>& multiset) {
                      // Key idea 2: permutations of the merged blocks (lexicographic order of the blocks).
                      std::vector<std::vector<int>> blocks = merge_blocks(multiset, max_permute_len);
                      std::sort(blocks.begin(), blocks.end());
                      do {
                        std::vector<int> flat;
                        for (const auto& b : blocks) flat.insert(flat.end(), b.begin(), b.end());
                        if (!fn(flat)) return false;
                      } while (std::next_permutation(blocks.begin(), blocks.end()));
                      return true;
                    },
                    stop);
  return !stop;
}

}  // namespace

std::vector<std::vector<int>> device_groups(int stages, int gpus, double variance, int max_permute_len) {
  std::vector<std::vector<int>> out;
  if (stages < 1 || gpus < 1) return out;
  for_each_device_group(stages, gpus, variance, max_permute_len, [&](const std::vector<int>& g) {
    out.push_back(g);
    return true;
  });
  return out;
}

std::vector<long> split_batch(long samples, const std::vector<double>& speeds) {
  // model/load_balancer.py DataLoadBalancer.partition_data.
  const size_t n = speeds.size();
  std::vector<long> out(n, 0);
  if (n == 0) return out;
  const double total = std::accumulate(speeds.begin(), speeds.end(), 0.0);
  std::vector<double> rem(n, 0);
  long assigned = 0;
  for (size_t i = 0; i < n; ++i) {
    const double exact = static_cast<double>(samples) * speeds[i] / total;
    out[i] = static_cast<long>(exact);
    rem[i] = exact - static_cast<double>(out[i]);
    assigned += out[i];
  }
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return rem[a] > rem[b]; });
  for (long i = 0; i < samples - assigned && i < static_cast<long>(n); ++i) out[order[i]] += 1;
  return out;
}

std::vector<double> adjust_compute_performance(const std::vector<double>& sc, const std::vector<double>& cap,
                                               const std::vector<double>& dem) {
  // model/load_balancer.py LayerLoadBalancer._adj_compute_performance.
  const size_t n = sc.size();
  std::vector<double> adj, avail;
  double extra = 0;
  for (size_t i = 0; i < n; ++i) {
    if (cap[i] > dem[i]) {
      adj.push_back(sc[i]);
      avail.push_back(sc[i] * cap[i] / dem[i] - sc[i]);
    } else {
      avail.push_back(0);
      const double a = sc[i] * (cap[i] / dem[i]) * 0.9;
      adj.push_back(a);
      extra += sc[i] - a;
    }
  }
  if (std::accumulate(avail.begin(), avail.end(), 0.0) < extra) return {};  // memory issues persist
  std::vector<double> add(n, 0);
  for (int guard = 0; extra > 0.01 && guard < 10000; ++guard) {
    double tmp_total = 0;
    for (size_t i = 0; i < n; ++i)
      if (avail[i] > 0.001) tmp_total += sc[i];
    if (!(tmp_total > 0)) return {};
    for (size_t i = 0; i < n; ++i) {
      const double ratio = avail[i] > 0.001 ? sc[i] / tmp_total : 0.0;
      const double alloc = extra * ratio > avail[i] ? avail[i] : extra * ratio;
      add[i] += alloc;
      avail[i] -= alloc;
      extra -= alloc;
    }
  }
  for (size_t i = 0; i < n; ++i) adj[i] += add[i];
  return adj;
}

std::vector<int> balance_layers(const std::vector<double>& stage_performance, const std::vector<double>& layer_demand,
                                int h) {
  // model/load_balancer.py LayerComputeBalancer (run and its passes), "hallucination" h pieces per layer.
  const int S = static_cast<int>(stage_performance.size());
  const int L = static_cast<int>(layer_demand.size());
  if (S < 1 || L < S || h < 1) return {};
  const int n = L * h;
  std::vector<double> piece(n);
  for (int i = 0; i < n; ++i) piece[i] = layer_demand[i / h] / h;
  std::vector<double> capa = stage_performance;
  std::vector<std::vector<int>> alloc(S);
  std::vector<int> unassigned;

  // _alloc_first_pass_forward: stages 0..S-2 take pieces in order while they have capacity; the piece that
  // does not fit is left unassigned and the next stage starts after it. The last h+1 pieces are never taken.
  int k = 0;
  for (int s = 0; s < S - 1; ++s) {
    const int from = k;
    for (int id = from; id < n - 1 - h; ++id) {
      if (capa[s] > piece[id]) {
        capa[s] -= piece[id];
        alloc[s].push_back(id);
        k = id + 1;
      } else {
        unassigned.push_back(id);
        k = id + 1;
        break;
      }
    }
  }
  for (int id = k; id < n; ++id) unassigned.push_back(id);
  std::sort(unassigned.begin(), unassigned.end());
  unassigned.erase(std::unique(unassigned.begin(), unassigned.end()), unassigned.end());
  auto remove = [&unassigned](int id) { unassigned.erase(std::find(unassigned.begin(), unassigned.end(), id)); };

  // _alloc_first_pass_backward: the last stage takes the tail (at least h pieces), contiguously, while it
  // has capacity.
  const int last = S - 1;
  {
    std::vector<int> desc(unassigned.rbegin(), unassigned.rend());
    for (const int id : desc) {
      if (static_cast<int>(alloc[last].size()) < h) {
        capa[last] -= piece[id];
        alloc[last].push_back(id);
        remove(id);
        continue;
      }
      if (id + 1 != *std::min_element(alloc[last].begin(), alloc[last].end())) continue;
      if (capa[last] > piece[id]) {
        capa[last] -= piece[id];
        alloc[last].push_back(id);
        remove(id);
      }
    }
  }

  // _alloc_unassigned_first_pass: each leftover piece goes to the stage with the most spare capacity between
  // the stages just below and just above it.
  {
    const std::vector<int> asc = unassigned;
    for (const int q : asc) {
      int min_sid = 0, max_sid = S - 1;
      double min_value = std::numeric_limits<double>::infinity(), max_value = -std::numeric_limits<double>::infinity();
      for (int s = 0; s < S; ++s) {
        if (alloc[s].empty()) continue;
        const double cmin = *std::min_element(alloc[s].begin(), alloc[s].end());
        const double cmax = *std::max_element(alloc[s].begin(), alloc[s].end());
        if (q > cmax && cmax > max_value) {
          min_sid = s;
          max_value = cmax;
        }
        if (q < cmin && cmin < min_value) {
          max_sid = s;
          min_value = cmin;
        }
      }
      int stage = -1;
      double best = -std::numeric_limits<double>::infinity();
      for (int s = min_sid; s <= max_sid; ++s)
        if (capa[s] > best) {
          best = capa[s];
          stage = s;
        }
      if (stage < 0) stage = min_sid;
      capa[stage] -= piece[q];
      alloc[stage].push_back(q);
      remove(q);
    }
    for (auto& a : alloc) std::sort(a.begin(), a.end());
  }

  // _alloc_real_value: a stage keeps a layer when more than h/2 of its pieces went there.
  std::vector<std::vector<int>> layers(S);
  std::vector<int> owner(L, -1);
  std::vector<std::vector<int>> count(S, std::vector<int>(L, 0));
  for (int s = 0; s < S; ++s)
    for (const int id : alloc[s]) ++count[s][id / h];
  for (int s = 0; s < S; ++s)
    for (int l = 0; l < L; ++l)
      if (2 * count[s][l] > h) owner[l] = s;
  // Guard (deviation): a layer without a majority anywhere goes to the stage holding most of its pieces.
  for (int l = 0; l < L; ++l) {
    if (owner[l] >= 0) continue;
    int best = 0;
    for (int s = 1; s < S; ++s)
      if (count[s][l] > count[best][l]) best = s;
    owner[l] = best;
  }
  for (int l = 0; l < L; ++l) layers[owner[l]].push_back(l);
  capa.assign(S, 0);
  for (int s = 0; s < S; ++s) {
    capa[s] = stage_performance[s];
    if (!layers[s].empty())
      for (int l = layers[s].front(); l <= layers[s].back(); ++l) capa[s] -= layer_demand[l];
  }

  // _alloc_first_pass_adjust: up to 3 moves of a boundary layer from the most loaded neighbour to the stage
  // with the most spare capacity, while the largest spare capacity does not grow.
  {
    std::vector<double> opt_capa = capa;
    std::vector<std::vector<int>> opt_layers = layers;
    for (int num_search = 1;; ++num_search) {
      const int sid = static_cast<int>(std::max_element(opt_capa.begin(), opt_capa.end()) - opt_capa.begin());
      int near = -1;
      double min_value = std::numeric_limits<double>::infinity();
      if (sid - 1 >= 0 && opt_capa[sid - 1] < min_value) {
        near = sid - 1;
        min_value = opt_capa[sid - 1];
      }
      if (sid + 1 < S && opt_capa[sid + 1] < min_value) near = sid + 1;
      if (near >= 0 && layers[near].size() == 1) near = -1;  // as the public code: the accepted state's size
      if (near >= 0 && !opt_layers[near].empty()) {
        int moved;
        if (sid > near) {
          moved = opt_layers[near].back();
          opt_layers[near].pop_back();
        } else {
          moved = opt_layers[near].front();
          opt_layers[near].erase(opt_layers[near].begin());
        }
        opt_layers[sid].push_back(moved);
        std::sort(opt_layers[sid].begin(), opt_layers[sid].end());
        opt_capa[sid] -= layer_demand[moved];
        opt_capa[near] += layer_demand[moved];
      }
      if (*std::max_element(opt_capa.begin(), opt_capa.end()) > *std::max_element(capa.begin(), capa.end()) || num_search > 3)
        break;
      layers = opt_layers;
      capa = opt_capa;
    }
  }

  // _get_partition: boundaries from the layer counts.
  std::vector<int> partition(S + 1, 0);
  for (int s = 0; s < S; ++s) {
    if (layers[s].empty()) return {};
    partition[s + 1] = partition[s] + static_cast<int>(layers[s].size());
  }
  return partition;
}

bool next_strategy(std::vector<std::pair<int, int>>& strategies, const std::vector<double>& memory_state) {
  // search_space/plan.py IntraStagePlanGenerator._next_strategy.
  std::vector<double> ms = memory_state;
  if (ms.size() != strategies.size()) {
    ms.clear();
    for (const auto& st : strategies) ms.push_back(1.0 / st.first);
  }
  std::vector<int> ids(strategies.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [&](int a, int b) { return ms[a] < ms[b]; });
  for (const int id : ids)
    if (strategies[id].first != 1) {
      strategies[id] = {strategies[id].first / 2, strategies[id].second * 2};
      return true;
    }
  return false;
}

}  // namespace metis_detail

namespace {

using metis_detail::adjust_compute_performance;
using metis_detail::balance_layers;
using metis_detail::split_batch;

// Mixed-precision Adam's HBM traffic per parameter (fp32 master, momentum, variance read and written; fp32
// gradient read; bf16/fp16 weight written): our stand-in for Metis's profiled optimizer_time.
constexpr double kAdamBytesPerParam = 30.0;

struct Group {
  std::vector<GpuId> gpus;
  std::string type;
  int type_id = 0;  // index of `type` in the cluster's GPU types (StageCosts' key)
  int node = 0;
  long samples = 0;
};

// The profiler's per-stage figures for a group (GPU type, tp, samples) and a layer range, memoised: the search
// asks for the same few thousand values millions of times. A memo hit returns exactly what the profiler
// returned, so no result changes.
class StageCosts {
 public:
  StageCosts(const Profiler& prof, const Cluster& cluster, const ModelConfig& model)
      : prof_(prof), cluster_(cluster), model_(model) {}
  // Forward + backward + TP time of layers [b, e) (Profiler::stage_time_s).
  double time(const Group& g, int tp, int b, int e) {
    const Key k{g.type_id, tp, g.samples, b, e, 0};
    auto it = time_.find(k);
    if (it == time_.end()) it = time_.emplace(k, prof_.stage_time_s(b, e, key(g, tp))).first;
    return it->second;
  }
  // Per-GPU memory with `in_flight` micro-batches (Profiler::stage_memory_bytes).
  double memory(const Group& g, int tp, int b, int e, int in_flight) {
    const Key k{g.type_id, tp, g.samples, b, e, in_flight};
    auto it = memory_.find(k);
    if (it == memory_.end()) it = memory_.emplace(k, prof_.stage_memory_bytes(b, e, key(g, tp), in_flight)).first;
    return it->second;
  }
  // Parameter update of the stage's parameters on one GPU (Adam's HBM traffic on the roofline).
  double update(const Group& g, int tp, int b, int e) {
    const Key k{g.type_id, tp, g.samples, b, e, 0};
    auto it = update_.find(k);
    if (it == update_.end()) {
      const ProfileKey pk = key(g, tp);
      double params = 0;
      for (int l = b; l < e; ++l) params += prof_.layer(l, pk).params;
      if (b == 0) params += prof_.embedding(pk).params;
      if (e == model_.layers) params += prof_.head(pk).params;
      const double t = op_time_s(OpCost{OpClass::Memory, 0.0, params * kAdamBytesPerParam}, cluster_.catalog.at(g.type),
                                 model_.dtype);
      it = update_.emplace(k, t).first;
    }
    return it->second;
  }

 private:
  using Key = std::array<long, 6>;
  static ProfileKey key(const Group& g, int tp) { return ProfileKey{g.type, tp, static_cast<double>(g.samples)}; }
  const Profiler& prof_;
  const Cluster& cluster_;
  const ModelConfig& model_;
  std::map<Key, double> time_, memory_, update_;
};

struct StagePlan {
  int begin = 0, end = 0;  // ranks
  int dp = 1, tp = 1;
  std::vector<Group> groups;
};

struct Candidate {
  std::vector<StagePlan> stages;
  std::vector<int> partition;
  int batches = 1;
  long micro = 1;
};

}  // namespace

PlanResult MetisPlanner::plan(const PlanRequest& request) {
  const PlanTimer timer;

  long global = 0;
  if (auto refused = refused_request(request, "metis", timer, &global)) return *refused;
  const Cluster& cluster = *request.cluster;
  const ModelConfig& model = *request.model;
  const Options& opt = options_;

  PlanResult result;
  const int N = cluster.total_gpus();
  const int L = model.layers;

  const Profiler prof(cluster, model);
  StageCosts costs(prof, cluster, model);
  const std::vector<TypeInventory> inventory = type_inventory(cluster);

  // Layer demand (LayerLoadBalancer._get_nomalize_layer_duration): per-layer time on the first GPU type at
  // tp 1, batch 1, normalised; the embedding counts with the first layer, the head with the last.
  std::vector<double> layer_demand(L);
  {
    const ProfileKey k{inventory.front().gpu_type, 1, 1.0};
    for (int l = 0; l < L; ++l) {
      const LayerProfile& p = prof.layer(l, k);
      layer_demand[l] = p.forward_s + p.backward_s;
    }
    layer_demand[0] += prof.embedding(k).forward_s + prof.embedding(k).backward_s;
    layer_demand[L - 1] += prof.head(k).forward_s + prof.head(k).backward_s;
    const double total = std::accumulate(layer_demand.begin(), layer_demand.end(), 0.0);
    for (double& d : layer_demand) d /= total;
  }

  // Group speed for the data split (DataLoadBalancer): 1 / whole-model time at (type, tp, batch 1).
  std::map<std::pair<std::string, int>, double> speed_cache;
  auto speed = [&](const std::string& type, int tp) {
    const auto key = std::make_pair(type, tp);
    auto it = speed_cache.find(key);
    if (it == speed_cache.end()) it = speed_cache.emplace(key, 1.0 / prof.stage_time_s(0, L, ProfileKey{type, tp, 1.0})).first;
    return it->second;
  };

  // Orderings of the GPU types (node_sequences).
  std::vector<std::string> types;
  for (const TypeInventory& t : inventory) types.push_back(t.gpu_type);
  std::vector<std::vector<std::string>> orderings;
  if (!opt.only_type_order.empty()) {
    std::vector<std::string> a = opt.only_type_order, b = types;
    std::sort(a.begin(), a.end());
    if (a != b) throw std::invalid_argument("MetisPlanner: only_type_order must list each GPU type of the cluster once");
    orderings.push_back(opt.only_type_order);
  } else {
    std::vector<std::string> o = types;
    do orderings.push_back(o);
    while (std::next_permutation(o.begin(), o.end()));
  }

  std::vector<int> batch_counts;  // divisors of the global batch, descending
  for (long b = global; b >= 1; --b)
    if (global % b == 0 && b <= std::numeric_limits<int>::max()) batch_counts.push_back(static_cast<int>(b));
  if (opt.only_batches > 0) batch_counts = {opt.only_batches};

  const bool use_sim = request.cost_model == CostModel::Simulator;
  std::optional<Evaluator> evaluator;
  if (use_sim) evaluator.emplace(request);

  long own_evaluations = 0, candidates = 0, sim_oom = 0;
  bool out_of_budget = false;
  std::optional<Plan> best_plan;
  double best_cost = std::numeric_limits<double>::infinity();

  // The simulator budget (only simulations count), --budget-wall, and the port's time cap (checked where the
  // port checks it: before each inter-stage and each intra-stage plan).
  auto budget_spent = [&] {
    if (use_sim && evaluator->exhausted()) return true;
    if (opt.time_cap_s > 0 && timer.elapsed_s() >= opt.time_cap_s) return true;
    return timer.wall_budget_spent(request);
  };

  auto to_plan = [&](const Candidate& c) {
    PipelineSpec p;
    p.micro_batch = static_cast<int>(c.micro);
    p.micro_batches = c.batches;
    for (size_t s = 0; s < c.stages.size(); ++s) {
      StageSpec st;
      st.layer_begin = c.partition[s];
      st.layer_end = c.partition[s + 1];
      for (const Group& g : c.stages[s].groups)
        st.groups.push_back(GroupSpec{g.gpus, c.stages[s].tp, static_cast<double>(g.samples) / static_cast<double>(c.micro)});
      p.stages.push_back(std::move(st));
    }
    Plan plan = build_plan({p}, cluster, Recompute::None);
    return plan;
  };

  // Bandwidth between / inside sets of groups (HetClusterBandwidth): intra-node when one node, else the
  // slowest NIC bandwidth per GPU of the types involved.
  auto bandwidth = [&](const std::vector<const Group*>& groups) {
    bool one_node = true;
    for (const Group* g : groups) one_node = one_node && g->node == groups.front()->node;
    if (one_node) return prof.intra_bw(groups.front()->type);
    double bw = std::numeric_limits<double>::infinity();
    for (const Group* g : groups) bw = std::min(bw, prof.nic_bw_per_gpu(g->type));
    return bw;
  };

  // HeteroCostEstimator.get_cost.
  auto own_cost = [&](const Candidate& c) {
    const int S = static_cast<int>(c.stages.size());
    std::vector<double> lens(S);
    double pp = 0, dp_max = 0, upd_max = 0;
    for (int s = 0; s < S; ++s) {
      const StagePlan& st = c.stages[s];
      const int b = c.partition[s], e = c.partition[s + 1];
      double t = 0, upd = 0;
      long max_samples = 0;
      for (const Group& g : st.groups) {
        t = std::max(t, costs.time(g, st.tp, b, e));
        upd = std::max(upd, costs.update(g, st.tp, b, e));
        max_samples = std::max(max_samples, g.samples);
      }
      lens[s] = t;
      upd_max = std::max(upd_max, upd);  // _get_parameter_update_cost, max over stages
      std::vector<const Group*> mine;
      for (const Group& g : st.groups) mine.push_back(&g);
      if (st.dp > 1) {  // _get_dp_cost: 2 (dp-1)/dp * bytes / bandwidth
        const double bytes = prof.grad_bytes(b, e, st.tp);
        dp_max = std::max(dp_max, 2.0 * (st.dp - 1) / st.dp * bytes / bandwidth(mine));
      }
      if (s + 1 < S) {  // _get_pp_cost: one activation per boundary
        std::vector<const Group*> both = mine;
        for (const Group& g : c.stages[s + 1].groups) both.push_back(&g);
        pp += prof.p2p_bytes(static_cast<double>(max_samples)) / bandwidth(both);
      }
    }
    const double max_l = *std::max_element(lens.begin(), lens.end());
    const double exec = (c.batches - 1) * max_l + std::accumulate(lens.begin(), lens.end(), 0.0);
    return exec + upd_max + dp_max + pp;
  };

  // One priced candidate.
  auto price = [&](const Candidate& c) {
    ++candidates;
    Plan plan = to_plan(c);
    double cost;
    if (use_sim) {
      apply_megatron_core_ep(plan, model);
      std::string why;
      const std::optional<double> t = evaluator->iteration_time(plan, &why);
      if (!t) {
        ++sim_oom;
        return;
      }
      cost = *t;
    } else {
      ++own_evaluations;
      cost = own_cost(c);
    }
    if (cost < best_cost) {
      best_cost = cost;
      best_plan = std::move(plan);
    }
  };

  // Search.
  for (const std::vector<std::string>& order : orderings) {
    if (out_of_budget) break;
    // Rank layout (StagePerformance._get_device_placement): the GPUs of each type in ordering order.
    std::vector<GpuId> rank_gpu;
    std::vector<int> rank_node;
    for (const std::string& type : order)
      for (const TypeInventory& t : inventory)
        if (t.gpu_type == type)
          for (const int nid : t.nodes)
            for (int l = 0; l < cluster.nodes[nid].gpus; ++l) {
              rank_gpu.push_back(cluster.gpu_id(nid, l));
              rank_node.push_back(nid);
            }
    auto type_of_node = [&](int nid) { return cluster.group_of_node(nid).gpu; };

    // One inter-stage plan: device groups x micro-batch count. Returns false to stop the search.
    auto inter_stage = [&](const std::vector<int>& dg, int batches) -> bool {
      if (budget_spent()) {
        out_of_budget = true;
        return false;
      }
      const int S = static_cast<int>(dg.size());
      const long micro = global / batches;
      std::vector<int> starts(S + 1, 0);
      for (int s = 0; s < S; ++s) starts[s + 1] = starts[s] + dg[s];

      // IntraStagePlanGenerator.
      std::vector<std::pair<int, int>> strat;  // (dp, tp)
      for (const int size : dg) strat.emplace_back(size, 1);  // _initial_strategies: all DP
      std::vector<double> memory_state;
      bool first = true;
      while (true) {
        if (!first) {
          // _next_strategy: halve dp, double tp on the stage with the least memory headroom (dp > 1).
          const bool changed = metis_detail::next_strategy(strat, memory_state);
          if (!changed) return true;
        }
        first = false;
        if (budget_spent()) {
          out_of_budget = true;
          return false;
        }

        // _is_valid_strategies (+ what a Plan needs: TP groups in one node, tp dividing the heads, every group
        // at least one sample).
        std::vector<StagePlan> stages(S);
        bool valid = true;
        for (int s = 0; s < S && valid; ++s) {
          StagePlan& st = stages[s];
          st.begin = starts[s];
          st.end = starts[s + 1];
          st.dp = strat[s].first;
          st.tp = strat[s].second;
          if ((model.heads > 0 && model.heads % st.tp != 0) || (model.kv_heads > 0 && model.kv_heads % st.tp != 0)) valid = false;
          if (micro / st.dp < 1) valid = false;
          std::vector<double> speeds;
          for (int g = 0; g < st.dp && valid; ++g) {
            Group grp;
            const int r0 = st.begin + g * st.tp;
            grp.node = rank_node[r0];
            for (int r = r0; r < r0 + st.tp; ++r) {
              if (rank_node[r] != grp.node) valid = false;
              grp.gpus.push_back(rank_gpu[r]);
            }
            grp.type = type_of_node(grp.node);
            grp.type_id = static_cast<int>(std::find(types.begin(), types.end(), grp.type) - types.begin());
            if (valid) speeds.push_back(speed(grp.type, st.tp));
            st.groups.push_back(std::move(grp));
          }
          if (!valid) break;
          const std::vector<long> parts = split_batch(micro, speeds);
          for (int g = 0; g < st.dp; ++g) {
            st.groups[g].samples = parts[g];
            if (parts[g] < 1 || parts[g] > opt.max_profiled_batch_size) valid = false;
          }
        }
        if (!valid) continue;

        // get_intra_stage_compute_performance: 1 / slowest group's whole-model time, normalised.
        std::vector<double> perf(S);
        for (int s = 0; s < S; ++s) {
          double t = 0;
          for (const Group& g : stages[s].groups) t = std::max(t, costs.time(g, stages[s].tp, 0, L));
          perf[s] = 1.0 / t;
        }
        const double perf_total = std::accumulate(perf.begin(), perf.end(), 0.0);
        for (double& p : perf) p /= perf_total;

        // LayerLoadBalancer.partition_layer: balance, check memory, adjust performance, at most 3 attempts.
        std::vector<int> partition;
        int attempts = 0;
        for (int attempt = 1; attempt <= opt.max_partition_attempts; ++attempt) {
          std::vector<int> part = balance_layers(perf, layer_demand, opt.hallucination);
          if (part.empty()) break;  // a stage without layers (the port drops such plans)
          std::vector<double> cap(S), dem(S), state(S);
          bool oom = false;
          for (int s = 0; s < S; ++s) {
            const int in_flight = std::min(S - s, batches);  // 1F1B
            double best_head = std::numeric_limits<double>::infinity();
            for (const Group& g : stages[s].groups) {
              const double c = prof.gpu_memory_bytes(g.type);
              const double d = costs.memory(g, stages[s].tp, part[s], part[s + 1], in_flight);
              if (c - d < best_head) {
                best_head = c - d;
                cap[s] = c;
                dem[s] = d;
              }
            }
            state[s] = best_head;
            oom = oom || best_head < 0;
          }
          memory_state = state;  // kept also when every attempt fails (deviation, see header)
          if (!oom) {
            partition = std::move(part);
            attempts = attempt;
            break;
          }
          perf = adjust_compute_performance(perf, cap, dem);
          if (perf.empty()) break;
        }
        if (partition.empty()) continue;

        Candidate c;
        c.stages = std::move(stages);
        c.partition = std::move(partition);
        c.batches = batches;
        c.micro = micro;
        price(c);
        if (attempts == 1) return true;  // has_next: no repartitioning was needed -> done
      }
    };

    const int max_stages = std::min(N, L);
    if (!opt.only_device_groups.empty()) {
      if (std::accumulate(opt.only_device_groups.begin(), opt.only_device_groups.end(), 0) != N ||
          static_cast<int>(opt.only_device_groups.size()) > max_stages)
        throw std::invalid_argument("MetisPlanner: only_device_groups must sum to the cluster's GPUs, at most min(GPUs, layers) stages");
      for (const int b : batch_counts)
        if (!inter_stage(opt.only_device_groups, b)) break;
      continue;
    }
    for (int S = 1; S <= max_stages && !out_of_budget; ++S) {
      const std::function<bool(const std::vector<int>&)> per_dg = [&](const std::vector<int>& dg) {
        for (const int b : batch_counts)
          if (!inter_stage(dg, b)) return false;
        return true;
      };
      // Lazy enumeration of gen_dgroups_for_stages_with_variance.
      if (!metis_detail::for_each_device_group(S, N, opt.min_group_scale_variance, opt.max_permute_len, per_dg)) break;
    }
  }

  result.evaluations = use_sim ? evaluator->evaluations() : 0;
  result.own_model_evaluations = own_evaluations;
  result.search_complete = !out_of_budget;
  if (!best_plan) {
    const std::string what = std::to_string(N) + " GPUs";
    if (candidates == 0 && out_of_budget)
      result.reason = "budget exhausted before Metis found a candidate plan for " + model.name + " on " + what;
    else if (candidates == 0)
      result.reason = "no Metis plan (device groups x stage strategies) of the " + what + " fits " + model.name +
                      " in memory under its memory model, with TP groups inside one node and at most " +
                      std::to_string(opt.max_profiled_batch_size) + " samples per TP group";
    else
      result.reason = "every Metis candidate (" + std::to_string(sim_oom) + ") ran out of memory in the simulator";
    return timer.finish(result);
  }
  Plan plan = std::move(*best_plan);
  if (!use_sim) apply_megatron_core_ep(plan, model);
  validate_plan(plan, cluster, model, global, "metis");
  result.plan = std::move(plan);
  result.predicted_iteration_time_s = best_cost;
  return timer.finish(result);
}

}  // namespace arachne::planner
