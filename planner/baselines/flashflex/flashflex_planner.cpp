// The `flashflex` baseline planner (algorithm, cost model and sources in flashflex_planner.h).
#include "planner/baselines/flashflex/flashflex_planner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "planner/baselines/flashflex/graph_partition.h"
#include "planner/common/evaluator.h"
#include "planner/common/plan_builder.h"
#include "planner/common/profile.h"
#include "sim/plan/plan_yaml.h"

namespace arachne::planner {
namespace {

using flashflex::ClassGraph;
using flashflex::kway_partition;

constexpr double kInf = std::numeric_limits<double>::infinity();

struct StageDesc {
  std::vector<GpuId> gpus;  // one TP group, ascending ids, one node
  int tp = 1;
  std::string type;
  int begin = 0, end = 0;
};

struct PipeDesc {
  std::vector<StageDesc> stages;
  int micro_batches = 1;
};

// A point of the search: which pipeline every GPU belongs to, each pipeline's stage-part count K_j, and the
// micro-batch size; plus what building and pricing it gave.
struct Candidate {
  std::vector<int> pipe_of;  // per GPU
  std::vector<int> k;        // per pipeline
  int micro_batch = 1;
  // Filled by build/price:
  bool feasible = false;
  std::string why;
  std::vector<PipeDesc> pipes;
  Recompute recompute = Recompute::None;
  double own_cost = kInf;
  double cost = kInf;  // what the search compares: own cost, or the simulated time
};

class Search {
 public:
  Search(const PlanRequest& req, const Cluster& cluster, const ModelConfig& model, long global)
      : req_(req), cluster_(cluster), model_(model), global_(global), prof_(cluster, model), n_(cluster.total_gpus()) {
    if (req.cost_model == CostModel::Simulator) evaluator_.emplace(req);
    node_.resize(n_);
    type_.resize(n_);
    for (GpuId g = 0; g < n_; ++g) {
      node_[g] = cluster.node_of(g);
      type_[g] = cluster.group_of_node(node_[g]).gpu;
    }
    // Bandwidth between GPUs (utils.py create_specs): the node's intra-node link, else the slower NIC share;
    // kept per node (bw()).
    for (int nd = 0; nd < static_cast<int>(cluster.nodes.size()); ++nd) {
      intra_.push_back(intra(nd));
      nic_.push_back(nic(nd));
      group_.push_back(cluster.nodes[nd].group);
    }
  }

  const Cluster& cluster() const { return cluster_; }
  int gpus() const { return n_; }
  // Simulator evaluations (what the budget counts) and own-model ones (free).
  long evaluations() const { return evaluator_ ? evaluator_->evaluations() : 0; }
  long own_evaluations() const { return own_evals_; }
  bool simulating() const { return evaluator_.has_value(); }
  bool exhausted() const {
    if (evaluations() >= req_.budget_evaluations) return true;
    return req_.budget_wall_s > 0 && elapsed() >= req_.budget_wall_s;
  }
  double elapsed() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }

  // Step 0/1: the device graph with bandwidth (or reciprocal bandwidth) edges over `gpus` (ascending). Its
  // vertices come in classes, one per machine: a machine's GPUs have the same weight and the same edge to
  // every other GPU, which the partitioner exploits (graph_partition.h; no approximation).
  ClassGraph graph(const std::vector<GpuId>& gpus, bool reciprocal) const {
    ClassGraph g;
    g.n = static_cast<int>(gpus.size());
    g.cls.resize(g.n);
    std::vector<int> nodes;  // class -> node
    for (int i = 0; i < g.n; ++i) {
      if (nodes.empty() || nodes.back() != node_[gpus[i]]) {
        nodes.push_back(node_[gpus[i]]);
        g.cweight.push_back(prof_.peak_flops(type_[gpus[i]]) / 1e12);
      }
      g.cls[i] = static_cast<int>(nodes.size()) - 1;
    }
    g.nc = static_cast<int>(nodes.size());
    g.cedge.assign(static_cast<size_t>(g.nc) * g.nc, 0.0);
    for (int a = 0; a < g.nc; ++a)
      for (int b = 0; b < g.nc; ++b) {
        const double x = a == b ? intra_[nodes[a]] : std::min(nic_[nodes[a]], nic_[nodes[b]]);
        g.cedge[static_cast<size_t>(a) * g.nc + b] = reciprocal ? (x > 0 ? 1e9 / x : 1e9) : x / 1e9;
      }
    return g;
  }

  // Builds the pipelines of a candidate (steps 2-4) and prices it; counts one evaluation (own or simulator).
  void price(Candidate& c) {
    c.feasible = false;
    c.cost = kInf;
    c.own_cost = kInf;
    if (!build_own(c)) {
      if (evaluator_) return;  // nothing to simulate
      ++own_evals_;            // the own model priced it (infeasible)
      return;
    }
    if (!evaluator_) {
      ++own_evals_;
      c.cost = c.own_cost;
      return;
    }
    Plan plan = to_plan(c);
    std::string why;
    const std::optional<double> t = evaluator_->iteration_time(plan, &why);
    if (!t) {
      c.feasible = false;
      c.why = "simulator: " + why;
      return;
    }
    c.cost = *t;
  }

  Plan to_plan(const Candidate& c) const {
    std::vector<PipelineSpec> specs;
    for (const PipeDesc& p : c.pipes) {
      PipelineSpec ps;
      ps.micro_batch = c.micro_batch;
      ps.micro_batches = p.micro_batches;
      for (const StageDesc& s : p.stages) {
        StageSpec ss;
        ss.layer_begin = s.begin;
        ss.layer_end = s.end;
        ss.groups.push_back(GroupSpec{s.gpus, s.tp, 1.0});
        ps.stages.push_back(ss);
      }
      specs.push_back(ps);
    }
    Plan plan = build_plan(specs, cluster_, c.recompute);
    if (model_.moe) apply_megatron_core_ep(plan, model_);
    return plan;
  }

 private:
  const PlanRequest& req_;
  const Cluster& cluster_;
  const ModelConfig& model_;
  long global_;
  Profiler prof_;
  int n_;
  std::vector<int> node_;
  std::vector<std::string> type_;
  std::vector<double> intra_, nic_;  // per node
  std::vector<int> group_;           // per node: its node group
  std::optional<Evaluator> evaluator_;
  // Caches of one plan() call (ordered maps: deterministic). A pipeline's structure (steps 2-3) depends only on
  // its GPUs and K; its stage times only on that and (micro-batch, recompute); a machine piece's TP
  // decomposition only on (node group, GPU count, stage limit).
  struct PipeEntry {
    bool ok = false;
    std::string why;
    PipeDesc desc;
    std::map<std::pair<int, int>, std::vector<double>> times;  // (micro-batch, recompute) -> stage times
    std::map<std::tuple<int, int, long>, bool> fits;           // (micro-batch, recompute, min(m, S)) -> fits
  };
  std::map<std::pair<std::vector<GpuId>, int>, PipeEntry> pipe_cache_;
  mutable std::map<std::tuple<int, int, int>, std::vector<int>> decomposition_cache_;
  long own_evals_ = 0;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();

  double bw(GpuId a, GpuId b) const {
    if (a == b) return 0.0;
    return node_[a] == node_[b] ? intra_[node_[a]] : std::min(nic_[node_[a]], nic_[node_[b]]);
  }
  double intra(int node) const {
    const NodeGroup& g = cluster_.group_of_node(node);
    return g.intra_bw * cluster_.catalog.at(g.gpu).compute.link_eff;
  }
  double nic(int node) const {
    const NodeGroup& g = cluster_.group_of_node(node);
    const double per_gpu = g.gpus_per_node > 0 ? g.nic_bw * g.nic_count / g.gpus_per_node : 0.0;
    return per_gpu * cluster_.catalog.at(g.gpu).compute.link_eff;
  }
  bool tp_ok(int t) const { return model_.heads % t == 0 && model_.kv_heads % t == 0; }

  ProfileKey key(const StageDesc& s, int mb, Recompute rc) const {
    ProfileKey k;
    k.gpu_type = s.type;
    k.tp = s.tp;
    k.samples = mb;
    k.recompute = rc;
    return k;
  }

  // cost_modeling.py mb_pp_comm_cost: activations forward and gradients backward between two TP groups, the
  // cheapest sender/receiver pair plus the scatter inside the receiving group.
  double p2p_s(const StageDesc& pre, const StageDesc& post, int mb) const {
    const double bytes = prof_.p2p_bytes(mb);
    double best = kInf;
    for (const GpuId a : pre.gpus)
      for (const GpuId b : post.gpus) {
        double t = bw(a, b) > 0 ? bytes / bw(a, b) : kInf;
        for (const GpuId d : post.gpus)
          if (d != b) t += bw(b, d) > 0 ? bytes / (post.gpus.size() * bw(b, d)) : kInf;
        best = std::min(best, t);
      }
    return 2 * best;
  }

  // cost_modeling.py pipeline_cost: the GPipe map — stage s busy in columns s .. s+m-1; each column lasts as
  // long as its slowest busy stage.
  static double gpipe_s(const std::vector<double>& stage_s, long m) {
    const long S = static_cast<long>(stage_s.size());
    double total = 0;
    for (long col = 0; col < m + S - 1; ++col) {
      double worst = 0;
      for (long s = std::max(0L, col - m + 1); s <= std::min(S - 1, col); ++s) worst = std::max(worst, stage_s[s]);
      total += worst;
    }
    return total;
  }

  std::vector<double> stage_times(const PipeDesc& p, int mb, Recompute rc) const {
    std::vector<double> t;
    for (size_t s = 0; s < p.stages.size(); ++s) {
      const StageDesc& st = p.stages[s];
      double x = prof_.stage_time_s(st.begin, st.end, key(st, mb, rc));
      if (s + 1 < p.stages.size()) x += p2p_s(st, p.stages[s + 1], mb);
      t.push_back(x);
    }
    return t;
  }

  // cost_modeling.py dp_cost / dp_layer_comm_cost / gen_layer_dp_rank_group.
  //   per layer and rank set: 2 x max_i sum_j grad_bytes / (|set| · bw(i, j)) = 2 · grad_bytes · unit(set);
  // unit(set) is computed once per run of layers with the same holder stages, from per-node GPU counts
  // (bw depends only on the two nodes), in O(|set| · distinct NIC bandwidths) instead of O(|set|^2).
  double dp_s(const std::vector<PipeDesc>& pipes) const {
    if (pipes.size() < 2) return 0;
    const size_t P = pipes.size();
    double total = 0;
    std::vector<size_t> idx(P, 0);
    std::vector<const StageDesc*> holder(P, nullptr), prev(P, nullptr);
    int max_tp = 0, min_tp = 0;
    std::vector<double> unit;
    for (int layer = 0; layer < model_.layers; ++layer) {
      for (size_t p = 0; p < P; ++p) {
        while (layer >= pipes[p].stages[idx[p]].end) ++idx[p];
        holder[p] = &pipes[p].stages[idx[p]];
      }
      if (holder != prev) {
        prev = holder;
        max_tp = 0;
        min_tp = std::numeric_limits<int>::max();
        for (const StageDesc* h : holder) {
          max_tp = std::max(max_tp, h->tp);
          min_tp = std::min(min_tp, h->tp);
        }
        const int sets = std::max(1, max_tp / min_tp);
        unit.assign(sets, 0.0);
        std::vector<GpuId> set(P);
        for (int r = 0; r < sets; ++r) {
          // Rank r of every pipeline's group, each group padded to max_tp by repeating its ranks.
          for (size_t p = 0; p < P; ++p) {
            const int rep = max_tp / holder[p]->tp;
            set[p] = holder[p]->gpus[std::min<int>(r / std::max(1, rep), holder[p]->tp - 1)];
          }
          unit[r] = dp_unit(set);
        }
      }
      const double bytes = prof_.grad_bytes(layer, layer + 1, min_tp);
      for (const double u : unit) total += 2 * bytes * u;
    }
    return total;
  }

  // max_i sum_{j: set[j] != set[i]} 1 / (|set| · bw(set[i], set[j])).
  double dp_unit(const std::vector<GpuId>& set) const {
    std::map<GpuId, long> per_gpu;
    std::map<int, long> per_node;
    std::map<double, long> per_nic;  // GPUs of the set on nodes of each NIC bandwidth
    for (const GpuId g : set) {
      ++per_gpu[g];
      ++per_node[node_[g]];
      ++per_nic[nic_[node_[g]]];
    }
    const double n = static_cast<double>(set.size());
    double worst = 0;
    for (const auto& [g, mult] : per_gpu) {
      const int nd = node_[g];
      double sum = 0;
      const long same_node = per_node[nd] - mult;
      if (same_node > 0) sum += intra_[nd] > 0 ? same_node / (n * intra_[nd]) : kInf;
      for (const auto& [bw_nic, cnt] : per_nic) {
        const long others = cnt - (bw_nic == nic_[nd] ? per_node[nd] : 0);
        if (others <= 0) continue;
        const double b = std::min(nic_[nd], bw_nic);
        sum += b > 0 ? others / (n * b) : kInf;
      }
      worst = std::max(worst, sum);
    }
    return worst;
  }

  // TP decompositions of c GPUs of one machine (strategy.py get_considered_stragegies, generalised): for each
  // allowed TP degree t (descending) as many groups of t as fit, the rest in descending powers of two.
  std::vector<std::vector<int>> decompositions(int c) const {
    std::vector<int> tps;
    for (int t = 1; t <= c; t *= 2)
      if (tp_ok(t)) tps.push_back(t);
    std::reverse(tps.begin(), tps.end());
    std::vector<std::vector<int>> out;
    for (const int t : tps) {
      std::vector<int> d;
      int rest = c;
      for (const int u : tps) {
        if (u > t) continue;
        while (rest >= u) {
          d.push_back(u);
          rest -= u;
        }
      }
      if (rest == 0 && std::find(out.begin(), out.end(), d) == out.end()) out.push_back(d);
    }
    return out;
  }

  // layer_partition.py create_layer_partition: quotas proportional to each stage's total GPU memory, the rest
  // one by one to the stages of most memory.
  std::vector<int> memory_quota(const std::vector<StageDesc>& stages) const {
    const int S = static_cast<int>(stages.size());
    std::vector<double> mem(S);
    double sum = 0;
    for (int s = 0; s < S; ++s) {
      mem[s] = prof_.gpu_memory_bytes(stages[s].type) * stages[s].gpus.size();
      sum += mem[s];
    }
    std::vector<int> q(S);
    int left = model_.layers;
    for (int s = 0; s < S; ++s) {
      q[s] = static_cast<int>(std::floor(model_.layers * mem[s] / sum + 1e-9));
      left -= q[s];
    }
    std::vector<int> rank(S);
    std::iota(rank.begin(), rank.end(), 0);
    std::stable_sort(rank.begin(), rank.end(), [&](int a, int b) { return mem[a] > mem[b]; });
    for (int i = 0; left > 0; ++i, --left) q[rank[i % S]] += 1;
    // Our plans need a layer in every stage (FlashFlex's quota may leave a small-memory stage empty; sailor's
    // port then discards the configuration): an empty stage takes one layer from the stage holding the most
    // (ties: more memory, then the earlier stage).
    for (int s = 0; s < S; ++s) {
      if (q[s] > 0) continue;
      int donor = -1;
      for (const int r : rank)
        if (q[r] > 1 && (donor < 0 || q[r] > q[donor])) donor = r;
      if (donor < 0) break;
      --q[donor];
      q[s] = 1;
    }
    return q;
  }

  // strategy.py tp_pp_tradeoff: pick one machine piece's TP decomposition by the single-pipeline cost of its
  // stages under a layer split proportional to the GPU count (own model, micro-batch 1, no recompute).
  // The result depends only on the piece's node group, size and the stage limit (one machine: every link
  // inside the piece is that group's intra-node link), hence the cache.
  std::vector<int> choose_decomposition(const std::vector<GpuId>& piece, int max_stages) const {
    const std::tuple<int, int, int> ck{group_[node_[piece[0]]], static_cast<int>(piece.size()), max_stages};
    const auto hit = decomposition_cache_.find(ck);
    if (hit != decomposition_cache_.end()) return hit->second;
    const std::vector<std::vector<int>> options = decompositions(static_cast<int>(piece.size()));
    std::vector<int> best;
    double best_cost = kInf;
    for (const std::vector<int>& d : options) {
      if (static_cast<int>(d.size()) > max_stages) continue;
      PipeDesc p;
      int off = 0, layer = 0;
      bool empty = false;
      for (size_t i = 0; i < d.size(); ++i) {
        StageDesc s;
        s.gpus.assign(piece.begin() + off, piece.begin() + off + d[i]);
        off += d[i];
        s.tp = d[i];
        s.type = type_[piece[0]];
        int count = model_.layers * d[i] / static_cast<int>(piece.size());
        if (i + 1 == d.size()) count = model_.layers - layer;
        if (count <= 0) empty = true;
        s.begin = layer;
        s.end = layer + count;
        layer += count;
        p.stages.push_back(s);
      }
      if (empty) continue;
      // config.py N_MB: the pipeline's micro-batches (here the global batch at micro-batch 1, capped).
      const double cost = gpipe_s(stage_times(p, 1, Recompute::None), std::min<long>(global_, 64));
      if (cost < best_cost) {
        best_cost = cost;
        best = d;
      }
    }
    if (best.empty() && !options.empty()) best = options.front();  // fewest stages
    decomposition_cache_[ck] = best;
    return best;
  }

  // Steps 2-3 for one pipeline: stage parts, their order, per-machine TP stages, memory-proportional layers.
  bool build_pipeline(const std::vector<GpuId>& gpus, int k, int stage_budget, PipeDesc& out, std::string& why) const {
    const ClassGraph g = graph(gpus, /*reciprocal=*/false);
    const std::vector<int> part = kway_partition(g, k);
    const int parts = *std::max_element(part.begin(), part.end()) + 1;
    // stage_order.py: merged graph of the parts, Hamiltonian path of maximum summed bandwidth.
    std::vector<std::vector<double>> w(parts, std::vector<double>(parts, 0));
    for (int a = 0; a < g.n; ++a)
      for (int b = 0; b < g.n; ++b)
        if (part[a] != part[b]) w[part[a]][part[b]] += g.edge(a, b);
    std::vector<int> order(parts), best_order;
    std::iota(order.begin(), order.end(), 0);
    double best_w = -1;
    do {
      double s = 0;
      for (int i = 0; i + 1 < parts; ++i) s += w[order[i]][order[i + 1]];
      if (s > best_w * (1 + 1e-12)) {
        best_w = s;
        best_order = order;
      }
    } while (std::next_permutation(order.begin(), order.end()));
    // strategy.py gen_strategy: each part split by machine (ascending node id), each machine's GPUs into TP groups.
    std::vector<std::vector<GpuId>> pieces;
    for (const int p : best_order) {
      std::map<int, std::vector<GpuId>> by_node;
      for (int i = 0; i < g.n; ++i)
        if (part[i] == p) by_node[node_[gpus[i]]].push_back(gpus[i]);
      for (auto& [nd, list] : by_node) pieces.push_back(list);
    }
    std::vector<int> min_stages(pieces.size());
    for (size_t i = 0; i < pieces.size(); ++i) {
      const auto opts = decompositions(static_cast<int>(pieces[i].size()));
      min_stages[i] = opts.empty() ? 1 : static_cast<int>(opts.front().size());
    }
    const int limit = std::min(stage_budget, model_.layers);
    int used = 0;
    out.stages.clear();
    for (size_t i = 0; i < pieces.size(); ++i) {
      int rest_min = 0;
      for (size_t j = i + 1; j < pieces.size(); ++j) rest_min += min_stages[j];
      const std::vector<int> d = choose_decomposition(pieces[i], limit - used - rest_min);
      if (d.empty()) {
        why = "no TP degree divides the heads";
        return false;
      }
      int off = 0;
      for (const int t : d) {
        StageDesc s;
        s.gpus.assign(pieces[i].begin() + off, pieces[i].begin() + off + t);
        off += t;
        s.tp = t;
        s.type = type_[pieces[i][0]];
        out.stages.push_back(s);
      }
      used += static_cast<int>(d.size());
    }
    if (static_cast<int>(out.stages.size()) > model_.layers) {
      why = "a pipeline has more stages (" + std::to_string(out.stages.size()) + ") than the model has layers";
      return false;
    }
    const std::vector<int> q = memory_quota(out.stages);
    int layer = 0;
    for (size_t s = 0; s < out.stages.size(); ++s) {
      if (q[s] <= 0) {
        why = "the memory-proportional layer split leaves a stage without layers";
        return false;
      }
      out.stages[s].begin = layer;
      out.stages[s].end = layer + q[s];
      layer += q[s];
    }
    return true;
  }

  // Steps 2-4 and the own cost model. False (with c.why) when infeasible. Pipelines already built in this
  // plan() call (same GPUs, same K) come from the cache with their stage times: a refinement step re-prices
  // only the pipelines it changed, plus the batch split, the max over pipelines and the DP term.
  bool build_own(Candidate& c) {
    const int P = static_cast<int>(c.k.size());
    std::vector<std::vector<GpuId>> members(P);
    for (GpuId g = 0; g < n_; ++g) members[c.pipe_of[g]].push_back(g);
    c.pipes.assign(P, PipeDesc{});
    std::vector<PipeEntry*> entry(P);
    for (int p = 0; p < P; ++p) {
      if (members[p].empty()) {
        c.why = "an empty pipeline";
        return false;
      }
      const int k = std::min<int>(c.k[p], static_cast<int>(members[p].size()));
      auto it = pipe_cache_.find({members[p], k});
      if (it == pipe_cache_.end()) {
        PipeEntry e;
        e.ok = build_pipeline(members[p], k, model_.layers, e.desc, e.why);
        it = pipe_cache_.emplace(std::make_pair(members[p], k), std::move(e)).first;
      }
      entry[p] = &it->second;
      if (!entry[p]->ok) {
        c.why = entry[p]->why;
        return false;
      }
      c.pipes[p] = entry[p]->desc;
    }
    if (global_ % c.micro_batch != 0) {
      c.why = "micro-batch does not divide the global batch";
      return false;
    }
    const long units = global_ / c.micro_batch;
    if (units < P) {
      c.why = "fewer micro-batches than pipelines";
      return false;
    }
    for (const Recompute rc : {Recompute::None, Recompute::Full}) {
      // Step 4: batch split proportional to each pipeline's throughput at an equal share.
      const long m_ref = std::max<long>(1, units / P);
      std::vector<const std::vector<double>*> times(P);
      std::vector<double> weight(P);
      for (int p = 0; p < P; ++p) {
        const std::pair<int, int> tk{c.micro_batch, static_cast<int>(rc)};
        auto t = entry[p]->times.find(tk);
        if (t == entry[p]->times.end()) t = entry[p]->times.emplace(tk, stage_times(c.pipes[p], c.micro_batch, rc)).first;
        times[p] = &t->second;
        weight[p] = 1.0 / gpipe_s(*times[p], m_ref);
      }
      const std::vector<long> m = split_proportional(units, weight, 1);
      bool fits = true;
      for (int p = 0; p < P && fits; ++p) {
        c.pipes[p].micro_batches = static_cast<int>(m[p]);
        const int S = static_cast<int>(c.pipes[p].stages.size());
        // The memory check depends on m only through the in-flight counts min(S - s, m).
        const std::tuple<int, int, long> fk{c.micro_batch, static_cast<int>(rc), std::min<long>(m[p], S)};
        auto f = entry[p]->fits.find(fk);
        if (f == entry[p]->fits.end()) {
          bool ok = true;
          for (int s = 0; s < S && ok; ++s) {
            const StageDesc& st = c.pipes[p].stages[s];
            const double in_flight = static_cast<double>(std::min<long>(S - s, m[p]));
            const double need = prof_.stage_memory_bytes(st.begin, st.end, key(st, c.micro_batch, rc), in_flight);
            if (need > prof_.gpu_memory_bytes(st.type)) ok = false;
          }
          f = entry[p]->fits.emplace(fk, ok).first;
        }
        fits = f->second;
      }
      if (!fits) continue;
      double worst = 0;
      for (int p = 0; p < P; ++p) worst = std::max(worst, gpipe_s(*times[p], m[p]));
      c.recompute = rc;
      c.own_cost = worst + dp_s(c.pipes);
      c.feasible = true;
      return true;
    }
    c.why = "out of memory (even with full recomputation)";
    return false;
  }
};

std::string signature(const Candidate& c) {
  std::string s = std::to_string(c.micro_batch) + "|";
  for (const int p : c.pipe_of) s += std::to_string(p) + ",";
  s += "|";
  for (const int k : c.k) s += std::to_string(k) + ",";
  return s;
}

// Step 5, our extension (--flashflex-refine): hill climbing from each pipeline count's best candidate, best
// first, with first-improvement acceptance; returns each climb's trace of accepted costs.
std::vector<std::vector<double>> refine(const PlanRequest& request, Search& search,
                                        const std::vector<std::optional<Candidate>>& best_of_p,
                                        const std::function<void(const Candidate&)>& consider, bool& cut_short) {
  const int N = search.gpus();
  std::vector<std::vector<double>> traces;
  std::vector<int> order;
  for (int P = 1; P < static_cast<int>(best_of_p.size()); ++P)
    if (best_of_p[P] && best_of_p[P]->k.size() > 0) order.push_back(P);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return best_of_p[a]->cost < best_of_p[b]->cost; });
  // A few evaluations stay reserved for the micro-batch sizes tried on the final structure.
  const long reserve = search.simulating() && request.budget_evaluations >= 20 ? 3 : 0;
  auto refine_exhausted = [&] { return search.exhausted() || search.evaluations() + reserve >= request.budget_evaluations; };
  for (const int P : order) {
    if (cut_short) break;
    Candidate inc = *best_of_p[P];
    std::vector<double> trace = {inc.cost};
    const int np = static_cast<int>(inc.k.size());
    bool improved = true;
    std::map<std::string, bool> seen;  // ordered map: deterministic
    seen[signature(inc)] = true;
    while (improved && !cut_short) {
      improved = false;
      // The neighbourhood as moves, each applied when its turn comes (a neighbourhood of a large cluster has
      // ~10^5 members; only the ones priced before the first improvement are materialised).
      struct Move {
        int kind;  // 0: swap GPUs a and b; 1: GPU a to pipeline b; 2: pipeline a's K += b
        int a, b;
      };
      std::vector<Move> moves;
      // (node, pipeline) classes, each represented by its highest GPU id.
      std::map<std::pair<int, int>, GpuId> cls;
      for (GpuId g = 0; g < N; ++g) cls[{search.cluster().node_of(g), inc.pipe_of[g]}] = g;
      std::vector<int> size(np, 0);
      for (GpuId g = 0; g < N; ++g) ++size[inc.pipe_of[g]];
      for (auto a = cls.begin(); a != cls.end(); ++a)
        for (auto b = std::next(a); b != cls.end(); ++b) {
          if (a->first.first == b->first.first || a->first.second == b->first.second) continue;
          moves.push_back({0, a->second, b->second});
        }
      for (const auto& [key, g] : cls) {
        if (size[key.second] < 2) continue;
        for (int to = 0; to < np; ++to) {
          if (to == key.second) continue;
          moves.push_back({1, g, to});
        }
      }
      for (int p = 0; p < np; ++p)
        for (const int d : {-1, 1}) {
          const int k = inc.k[p] + d;
          if (k < 1 || k > 3) continue;
          moves.push_back({2, p, d});
        }
      for (const Move& mv : moves) {
        Candidate c;
        c.pipe_of = inc.pipe_of;
        c.k = inc.k;
        c.micro_batch = inc.micro_batch;
        if (mv.kind == 0) std::swap(c.pipe_of[mv.a], c.pipe_of[mv.b]);
        else if (mv.kind == 1) c.pipe_of[mv.a] = mv.b;
        else c.k[mv.a] += mv.b;
        const std::string sig = signature(c);
        if (seen.count(sig)) continue;
        if (refine_exhausted()) {
          cut_short = true;
          break;
        }
        seen[sig] = true;
        search.price(c);
        consider(c);
        if (c.feasible && c.cost < inc.cost) {
          inc = c;
          trace.push_back(inc.cost);
          improved = true;
          break;  // first improvement: rebuild the neighbourhood around the new incumbent
        }
      }
    }
    traces.push_back(trace);
  }

  return traces;
}

}  // namespace

PlanResult FlashFlexPlanner::plan(const PlanRequest& request) {
  const PlanTimer timer;
  traces_.clear();
  long global = 0;
  if (auto refused = refused_request(request, "flashflex", timer, &global)) return *refused;
  const Cluster& cluster = *request.cluster;
  const ModelConfig& model = *request.model;

  PlanResult result;

  Search search(request, cluster, model, global);
  const int N = search.gpus();
  std::vector<GpuId> all(N);
  std::iota(all.begin(), all.end(), 0);
  const int p_max = static_cast<int>(std::max<long>(1, std::min<long>(N / 5, global)));

  std::optional<Candidate> best;
  std::string last_why;
  long infeasible = 0;
  bool cut_short = false;
  auto consider = [&](const Candidate& c) {
    if (!c.feasible) {
      ++infeasible;
      last_why = c.why;
      return;
    }
    if (!best || c.cost < best->cost) best = c;
  };

  // Step 1 + 2: initial partition for every pipeline count, every uniform K.
  std::vector<std::optional<Candidate>> best_of_p(p_max + 1);
  for (int P = 1; P <= p_max && !cut_short; ++P) {
    const std::vector<int> parts = kway_partition(search.graph(all, /*reciprocal=*/true), P);
    const int got = *std::max_element(parts.begin(), parts.end()) + 1;
    for (int K = 1; K <= 3; ++K) {
      if (search.exhausted()) {
        cut_short = true;
        break;
      }
      Candidate c;
      c.pipe_of = parts;
      c.k.assign(got, K);
      search.price(c);
      consider(c);
      if (c.feasible && (!best_of_p[P] || c.cost < best_of_p[P]->cost)) best_of_p[P] = c;
    }
  }

  // Step 4's micro-batch sizes on the best structure so far (those it has not been priced with).
  auto try_micro_batches = [&] {
    if (!best) return;
    const Candidate base = *best;
    for (const int mb : {1, 2, 4, 8}) {
      if (mb == base.micro_batch) continue;
      if (global % mb != 0 || global / mb < static_cast<long>(base.k.size())) continue;
      if (search.exhausted()) {
        cut_short = true;
        break;
      }
      Candidate c = base;
      c.micro_batch = mb;
      search.price(c);
      consider(c);
    }
  };
  try_micro_batches();

  // Step 6, our extension (--flashflex-refine): the public main.py never runs its refinement branch. It
  // starts from the candidates above, so its own-model cost is never above the public search's.
  if (request.flashflex_refine && !cut_short) {
    const double before = best ? best->cost : kInf;
    traces_ = refine(request, search, best_of_p, consider, cut_short);
    if (best && best->cost < before) try_micro_batches();
  }

  result.evaluations = search.evaluations();
  result.own_model_evaluations = search.own_evaluations();
  result.search_complete = !cut_short;
  if (request.flashflex_refine) result.extension = "refine";
  if (!best) {
    if (cut_short && result.evaluations + result.own_model_evaluations == 0)
      result.reason = "budget exhausted before any FlashFlex candidate was priced";
    else
      result.reason = "no FlashFlex partition of the " + std::to_string(N) + " GPUs is feasible for " + model.name +
                      " (" + std::to_string(infeasible) + " candidates infeasible; last: " + last_why + ")" +
                      (cut_short ? "; budget exhausted" : "");
    return timer.finish(result);
  }
  Plan plan = search.to_plan(*best);
  validate_plan(plan, cluster, model, global, "flashflex");
  result.plan = std::move(plan);
  result.predicted_iteration_time_s = best->cost;
  return timer.finish(result);
}

}  // namespace arachne::planner
