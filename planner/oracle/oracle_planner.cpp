// The `oracle` planner (algorithm in oracle_planner.h).
#include "planner/oracle/oracle_planner.h"
#include "planner/oracle/ep_variants.h"
#include "planner/oracle/exhaustive_search.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <queue>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>
#include <unordered_map>
#include <cstdint>
#include <vector>

#include "planner/common/evaluator.h"
#include "planner/common/partition.h"
#include "planner/common/plan_builder.h"
#include "planner/common/profile.h"
#include "planner/common/subcluster.h"
#include "planner/planner.h"
#include "sim/hw/topology.h"
#include "sim/model/compute_time.h"
#include "sim/io/input_error.h"
#include "sim/plan/plan_yaml.h"

namespace arachne::planner {
namespace {

using Clock = std::chrono::steady_clock;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr long kMaxPipeShapes = 20000;   // enumeration caps (large clusters); search_complete = false when hit
constexpr long kMaxStructures = 60000;
constexpr long kMaxCandidates = 200000;
// The complete search (phase 3) runs on clusters of at most this many GPUs; above, the oracle is a
// best-effort search (search_complete false).
constexpr int kCompleteSearchMaxGpus = 16;
// Heuristic simulations before the complete search (its incumbent), at most a quarter of the budget.
constexpr long kHeuristicSimulationsBeforeExhaustive = 200;  // ranked candidates kept for simulation

const Recompute kRecompute[3] = {Recompute::None, Recompute::Selective, Recompute::Full};

bool divides(int d, int n) { return n <= 0 || n % d == 0; }

std::vector<int> divisors(int n) {
  std::vector<int> d;
  for (int i = 1; i <= n; ++i)
    if (n % i == 0) d.push_back(i);
  return d;
}

// ---------------------------------------------------------------------------------------------------------
// The cluster as the oracle sees it: GPU types with their nodes (listing order).
struct TypeInfo {
  std::string name;
  std::vector<int> nodes;  // node ids
  int gpus = 0;
  std::vector<int> tps;    // admissible tp for this type
};

struct StageShape {
  int tp = 1;
  std::vector<int> groups;  // TP groups per type
  int total_groups = 0;
};

struct PipeShape {
  std::vector<int> stages;  // stage shape ids
  std::vector<int> gpus;    // per type
  int total = 0;
};

struct Structure {
  std::vector<int> pipes;  // pipe shape ids, non-decreasing (identical shapes consecutive)
};

// Stage costs of one pipeline shape at (micro-batch, recompute) under a given partition.
struct ShapeEval {
  bool feasible = false;
  std::vector<int> bounds;      // stages + 1
  std::vector<double> stage_t;  // time per micro-batch
  double max_t = 0, sum_t = 0;
  // For the tail term (dp_term): optimizer step of the slowest stage, and the first stage's gradient bytes per
  // TP rank, TP groups and slowest intra-node / NIC bandwidth of its types.
  double opt_s = 0, grad0 = 0, bw0_intra = 0, bw0_nic = 0;
  int groups0 = 1;
  int stages = 0;
};

class Oracle {
 public:
  Oracle(const PlanRequest& req, long global, OraclePlanner::Stats& stats, bool seed, int threads)
      : threads_(threads), req_(req), cluster_(*req.cluster), model_(*req.model), global_(global), stats_(stats), prof_(cluster_, model_),
        eval_(req), seed_(seed) {
    for (const TypeInventory& inv : type_inventory(cluster_)) {
      TypeInfo t;
      t.name = inv.gpu_type;
      t.nodes = inv.nodes;
      t.gpus = inv.gpus;
      int max_node = 0;
      for (const int n : t.nodes) max_node = std::max(max_node, cluster_.nodes[n].gpus);
      for (int tp = 1; tp <= max_node; tp *= 2)
        if (divides(tp, model_.heads) && divides(tp, model_.kv_heads)) t.tps.push_back(tp);
      if (t.gpus > 0) types_.push_back(t);
    }
    L_ = model_.layers;
  }

  PlanResult run();

 private:
  int threads_;
  const PlanRequest& req_;
  const Cluster& cluster_;
  const ModelConfig& model_;
  long global_;
  OraclePlanner::Stats& stats_;
  Profiler prof_;
  Evaluator eval_;
  bool seed_;
  std::vector<TypeInfo> types_;
  int L_ = 0;

  std::vector<StageShape> stage_shapes_;
  std::vector<PipeShape> pipe_shapes_;
  std::vector<Structure> structures_;
  bool capped_ = false;

  // Best so far.
  std::optional<Plan> best_;
  double best_time_ = kInf;
  std::set<std::string> seen_;
  long oom_ = 0, invalid_ = 0, predicted_oom_ = 0;
  std::string last_invalid_;
  bool budget_cut_ = false;

  // Per-layer time prefix sums per (type, tp, mb, recompute) (the Profiler's stage_time_s, summed once).
  struct Prefix {
    std::vector<double> pre;
    double emb = 0, head = 0;
  };
  std::map<std::tuple<int, int, int, int>, Prefix> prefix_;
  std::map<std::tuple<int, int, int>, ShapeEval> shape_cache_;  // (pipe shape, mb, rc)
  const Prefix& prefix(int type, int tp, int mb, int rc) {
    const auto key = std::make_tuple(type, tp, mb, rc);
    auto it = prefix_.find(key);
    if (it != prefix_.end()) return it->second;
    Prefix p;
    ProfileKey k;
    k.gpu_type = types_[type].name;
    k.tp = tp;
    k.samples = mb;
    k.recompute = kRecompute[rc];
    p.pre.assign(L_ + 1, 0.0);
    for (int l = 0; l < L_; ++l) {
      const LayerProfile& lp = prof_.layer(l, k);
      p.pre[l + 1] = p.pre[l] + lp.forward_s + lp.backward_s + lp.tp_comm_forward_s + lp.tp_comm_backward_s;
    }
    p.emb = prof_.embedding(k).forward_s + prof_.embedding(k).backward_s;
    p.head = prof_.head(k).forward_s + prof_.head(k).backward_s;
    return prefix_.emplace(key, std::move(p)).first->second;
  }
  double group_time(int type, int tp, int mb, int rc, int b, int e) {
    const Prefix& p = prefix(type, tp, mb, rc);
    return p.pre[e] - p.pre[b] + (b == 0 ? p.emb : 0.0) + (e == L_ ? p.head : 0.0);
  }

  // Time per micro-batch of stage shape `ss` on layers [b, e); kInf when a GPU runs out of memory with
  // `in_flight` micro-batches stored (1F1B: S - j). Shares proportional to 1 / T_group.
  // Cached per (stage shape, mb, recompute, b, e): the time and the largest number of micro-batches in
  // flight that still fits (sim/model/memory.cpp: activations = in_flight x per-micro-batch + working, so
  // memory is affine in in_flight and two evaluations give it exactly).
  struct StageEntry {
    double time = 0;
    double max_in_flight = 0;
  };
  std::unordered_map<std::uint64_t, StageEntry> stage_cache_;  // lookups only (never iterated)
  const StageEntry& stage_entry(int ss, int mb, int rc, int b, int e) {
    const std::uint64_t key = (static_cast<std::uint64_t>(ss) << 40) | (static_cast<std::uint64_t>(mb) << 32) |
                              (static_cast<std::uint64_t>(rc) << 28) | (static_cast<std::uint64_t>(b) << 14) |
                              static_cast<std::uint64_t>(e);
    auto it = stage_cache_.find(key);
    if (it != stage_cache_.end()) return it->second;
    const StageShape& s = stage_shapes_[ss];
    double inv = 0;
    std::vector<double> t(types_.size(), 0.0);
    for (size_t ty = 0; ty < types_.size(); ++ty) {
      if (s.groups[ty] == 0) continue;
      t[ty] = group_time(static_cast<int>(ty), s.tp, mb, rc, b, e);
      inv += s.groups[ty] / t[ty];
    }
    StageEntry en;
    en.time = 1.0 / inv;
    en.max_in_flight = kInf;
    for (size_t ty = 0; ty < types_.size(); ++ty) {
      if (s.groups[ty] == 0) continue;
      ProfileKey k;
      k.gpu_type = types_[ty].name;
      k.tp = s.tp;
      k.samples = mb * (1.0 / t[ty]) / inv;  // share proportional to speed
      k.recompute = kRecompute[rc];
      const double cap = prof_.gpu_memory_bytes(types_[ty].name);
      const double m1 = prof_.stage_memory_bytes(b, e, k, 1), m2 = prof_.stage_memory_bytes(b, e, k, 2);
      const double act = m2 - m1, m0 = m1 - act;
      const double x = act > 0 ? (cap - m0) / act : (m0 <= cap ? kInf : -kInf);
      en.max_in_flight = std::min(en.max_in_flight, x);
    }
    return stage_cache_.emplace(key, en).first->second;
  }

  // Time per micro-batch of stage shape `ss` on layers [b, e); kInf when a GPU runs out of memory with
  // `in_flight` micro-batches stored (1F1B: S - j). Shares proportional to 1 / T_group.
  double stage_cost(int ss, int mb, int rc, int b, int e, double in_flight) {
    const StageEntry& en = stage_entry(ss, mb, rc, b, e);
    return in_flight <= en.max_in_flight + 1e-9 ? en.time : kInf;
  }

  mutable std::map<std::tuple<int, int, int>, double> grad_cache_;
  double grad_bytes(int b, int e, int tp) const {
    const auto key = std::make_tuple(b, e, tp);
    auto it = grad_cache_.find(key);
    if (it != grad_cache_.end()) return it->second;
    return grad_cache_.emplace(key, prof_.grad_bytes(b, e, tp)).first->second;
  }
  ShapeEval eval_bounds(int ps, int mb, int rc, const std::vector<int>& bounds) {
    const PipeShape& p = pipe_shapes_[ps];
    const int S = static_cast<int>(p.stages.size());
    ShapeEval ev;
    ev.bounds = bounds;
    ev.stages = S;
    for (int j = 0; j < S; ++j) {
      const double c = stage_cost(p.stages[j], mb, rc, bounds[j], bounds[j + 1], S - j);
      if (!std::isfinite(c)) return ev;
      ev.stage_t.push_back(c);
      ev.max_t = std::max(ev.max_t, c);
      ev.sum_t += c;
    }
    ev.feasible = true;
    const double per_param = model_.dtype == "bf16" ? 4.0 : 2.0;
    for (int j = 0; j < S; ++j) {
      const StageShape& sj = stage_shapes_[p.stages[j]];
      const double gb = grad_bytes(bounds[j], bounds[j + 1], sj.tp);
      // Optimizer step after the reduction: mixed-precision Adam streams ~34 bytes per parameter (fp32
      // master weight, m, v read+write, fp32 gradient read, bf16 weight write), memory-bound on each GPU.
      for (size_t ty = 0; ty < types_.size(); ++ty)
        if (sj.groups[ty] > 0)
          ev.opt_s = std::max(ev.opt_s, op_time_s(OpCost{OpClass::Memory, 0.0, gb / per_param * 34.0}, cluster_.catalog.at(types_[ty].name),
                                                  model_.dtype));
      if (j == 0) {
        ev.grad0 = gb;
        ev.groups0 = sj.total_groups;
        ev.bw0_intra = ev.bw0_nic = kInf;
        for (size_t ty = 0; ty < types_.size(); ++ty)
          if (sj.groups[ty] > 0) {
            ev.bw0_intra = std::min(ev.bw0_intra, prof_.intra_bw(types_[ty].name));
            ev.bw0_nic = std::min(ev.bw0_nic, prof_.nic_bw_per_gpu(types_[ty].name));
          }
      }
    }
    return ev;
  }

  const ShapeEval& shape_eval(int ps, int mb, int rc) {
    const auto key = std::make_tuple(ps, mb, rc);
    auto it = shape_cache_.find(key);
    if (it != shape_cache_.end()) return it->second;
    const PipeShape& p = pipe_shapes_[ps];
    const int S = static_cast<int>(p.stages.size());
    // Exact min-max partition on the profiler's stage costs (planner/common/partition.h).
    const std::vector<int> bounds = minmax_partition(L_, S, [&](int j, int b, int e) {
      return stage_cost(p.stages[j], mb, rc, b, e, S - j);
    });
    ShapeEval ev;
    if (!bounds.empty()) ev = eval_bounds(ps, mb, rc, bounds);
    return shape_cache_.emplace(key, std::move(ev)).first->second;
  }

  // Predicted 1F1B time of one pipeline with m micro-batches: fill and drain (sum of stage times) plus
  // (m - 1) steady-state steps of the bottleneck stage (Narayanan et al. SC'21 §2.2), plus activation
  // send/recv on every stage boundary (forward and backward) over the type's NIC (pessimistic).
  double pipe_time(const ShapeEval& ev, int m, double p2p) const {
    return (m - 1) * ev.max_t + ev.sum_t + 2.0 * p2p * (ev.stages - 1.0);
  }

  // Exposed gradient all-reduce: in 1F1B the first stage finishes its backward last, so its reduction over
  // the replicas holding its layers (every pipeline's first stage, every TP group of it) is not hidden
  // (ring all-reduce 2(R-1)/R x bytes / bandwidth; Megatron overlaps the other stages' reductions).
  double dp_term(const Structure& s, const std::vector<const ShapeEval*>& evs, bool multi_node) const {
    const int P = static_cast<int>(s.pipes.size());
    double worst = 0, opt = 0;
    for (int i = 0; i < P; ++i) {
      const ShapeEval& ev = *evs[i];
      opt = std::max(opt, ev.opt_s);
      const double R = static_cast<double>(P) * ev.groups0;
      const double bw = multi_node ? ev.bw0_nic : ev.bw0_intra;
      if (R <= 1 || !(bw > 0) || !std::isfinite(bw)) continue;
      worst = std::max(worst, 2.0 * (R - 1) / R * ev.grad0 / bw);
    }
    return worst + opt;
  }

  void enumerate();
  void price_and_rank();
  bool place(const Structure& s, int policy, std::vector<std::vector<std::vector<std::vector<GpuId>>>>& out) const;
  void simulate(Plan plan, int rc, bool escalate);
  void phase1();
  void phase2(long cap);
  void phase3();
  void seed_from_baselines();
  bool complete_ = false;
  bool out_of_budget() {
    if (eval_.exhausted()) {
      budget_cut_ = true;
      return true;
    }
    return false;
  }

  struct Candidate {
    double predicted = 0;
    long seq = 0;
    int structure = 0;
    int policy = 0;
    int mb = 1;
    int rc = 0;
    int split = 0;        // 0 greedy min-max, 1 proportional to speed
  };
  std::vector<Candidate> cands_;
  long priced_ = 0;
  bool dropped_ = false;  // some priced candidate fell outside the kept set

  std::vector<int> split(const Structure& s, const std::vector<const ShapeEval*>& evs, int mb, int kind, double p2p,
                         double* predicted) const;
  double p2p_time(const Structure& s, int mb) const;
  Plan build(const Candidate& c);
};

// ---------------------------------------------------------------------------------------------------------
// Enumeration up to symmetry: stage shapes, pipeline shapes, structures (multisets of pipeline shapes).
void Oracle::enumerate() {
  const int T = static_cast<int>(types_.size());
  const int total_gpus = cluster_.total_gpus();
  const bool small = total_gpus <= 8;
  std::set<int> tps;
  for (const TypeInfo& t : types_)
    for (const int tp : t.tps) tps.insert(tp);
  // Stage shapes: per tp, every vector of group counts (types that admit the tp), bounded by how many
  // groups of that tp the type's nodes hold.
  for (const int tp : tps) {
    std::vector<int> cap(T, 0);
    for (int ty = 0; ty < T; ++ty) {
      if (std::find(types_[ty].tps.begin(), types_[ty].tps.end(), tp) == types_[ty].tps.end()) continue;
      for (const int n : types_[ty].nodes) cap[ty] += cluster_.nodes[n].gpus / tp;
    }
    std::vector<int> cnt(T, 0);
    std::function<void(int)> rec = [&](int ty) {
      if (ty == T) {
        const int tot = std::accumulate(cnt.begin(), cnt.end(), 0);
        if (tot > 0) stage_shapes_.push_back({tp, cnt, tot});
        return;
      }
      for (int c = 0; c <= cap[ty]; ++c) {
        // Larger snapshots: group counts per type are 0, powers of two, or all the type holds.
        if (!small && c > 0 && (c & (c - 1)) != 0 && c != cap[ty]) continue;
        cnt[ty] = c;
        rec(ty + 1);
      }
      cnt[ty] = 0;
    };
    rec(0);
  }
  if (!small) {
    // Larger snapshots: stage order inside a pipeline is canonical (non-decreasing stage shape id) and stage
    // shapes are ordered by the memory they offer, largest first - 1F1B keeps the most micro-batches in
    // flight on the first stages, so memory-rich stages go first (a reduction that is exact only up to the
    // embedding/head placement; <= 8 GPUs enumerate every order).
    std::vector<double> mem(stage_shapes_.size(), 0.0);
    std::vector<int> idx(stage_shapes_.size());
    std::iota(idx.begin(), idx.end(), 0);
    for (size_t k = 0; k < stage_shapes_.size(); ++k)
      for (int ty = 0; ty < T; ++ty) mem[k] += stage_shapes_[k].groups[ty] * stage_shapes_[k].tp * prof_.gpu_memory_bytes(types_[ty].name);
    std::stable_sort(idx.begin(), idx.end(), [&](int x, int y) { return mem[x] > mem[y]; });
    std::vector<StageShape> sorted;
    for (const int k : idx) sorted.push_back(stage_shapes_[k]);
    stage_shapes_ = std::move(sorted);
  }
  // Pipeline shapes: sequences of stage shapes within the inventory, at most `layers` stages, by iterative
  // deepening on the number of stages (so a cap keeps every shallower pipeline).
  std::vector<int> used(T, 0);
  std::vector<int> seq;
  bool pipe_cap = false;
  int emitted = 0;
  std::function<void(int, int)> rec_pipe = [&](int depth, int from) {
    if (pipe_cap) return;
    if (static_cast<int>(seq.size()) == depth) {
      PipeShape p;
      p.stages = seq;
      p.gpus = used;
      p.total = std::accumulate(used.begin(), used.end(), 0);
      pipe_shapes_.push_back(p);
      ++emitted;
      if (static_cast<long>(pipe_shapes_.size()) >= kMaxPipeShapes) pipe_cap = true;
      return;
    }
    for (int ss = small ? 0 : from; ss < static_cast<int>(stage_shapes_.size()); ++ss) {
      const StageShape& st = stage_shapes_[ss];
      bool ok = true;
      for (int ty = 0; ty < T; ++ty)
        if (used[ty] + st.groups[ty] * st.tp > types_[ty].gpus) ok = false;
      if (!ok) continue;
      for (int ty = 0; ty < T; ++ty) used[ty] += st.groups[ty] * st.tp;
      seq.push_back(ss);
      rec_pipe(depth, ss);
      seq.pop_back();
      for (int ty = 0; ty < T; ++ty) used[ty] -= st.groups[ty] * st.tp;
      if (pipe_cap) return;
    }
  };
  for (int depth = 1; depth <= L_ && !pipe_cap; ++depth) {
    emitted = 0;
    rec_pipe(depth, 0);
    if (emitted == 0) break;  // no deeper pipeline fits the inventory
  }
  if (pipe_cap) capped_ = true;
  if (small) {
    // Smaller pipelines first (stable), so the exhaustive structure search can stop early.
    std::stable_sort(pipe_shapes_.begin(), pipe_shapes_.end(), [](const PipeShape& a, const PipeShape& b) { return a.total < b.total; });
  } else {
    // Most promising pipelines first: predicted samples/s per GPU at micro-batch 1 (lightest recompute that
    // fits); shapes that fit at no recompute level are dropped (a larger micro-batch needs more memory).
    std::vector<double> score(pipe_shapes_.size(), -1.0);
    for (size_t k = 0; k < pipe_shapes_.size(); ++k) {
      // shape_eval caches by index: evaluate on a temporary copy of the shape list position.
      for (int r = 0; r < 3; ++r) {
        const ShapeEval& ev = shape_eval(static_cast<int>(k), 1, r);
        if (!ev.feasible) continue;
        score[k] = 1.0 / ev.max_t / pipe_shapes_[k].total;
        break;
      }
    }
    std::vector<int> idx(pipe_shapes_.size());
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](int x, int y) { return score[x] > score[y]; });
    std::vector<PipeShape> sorted;
    for (const int k : idx)
      if (score[k] > 0) sorted.push_back(pipe_shapes_[k]);
    pipe_shapes_ = std::move(sorted);
    shape_cache_.clear();  // indices changed
  }
  bool struct_cap = false;
  // Structures: first D identical pipelines of one shape (Megatron / AMP / Sailor forms, Metis with D = 1),
  // then every other multiset of pipeline shapes (non-decreasing shape ids) within the inventory, at most
  // global_batch pipelines, until the cap.
  for (int ps = 0; ps < static_cast<int>(pipe_shapes_.size()) && !struct_cap; ++ps) {
    const PipeShape& p = pipe_shapes_[ps];
    for (int d = 1; d <= global_; ++d) {
      bool ok = true;
      for (int ty = 0; ty < T; ++ty)
        if (d * p.gpus[ty] > types_[ty].gpus) ok = false;
      if (!ok) break;
      structures_.push_back({std::vector<int>(d, ps)});
      if (static_cast<long>(structures_.size()) >= kMaxStructures) {
        struct_cap = true;
        break;
      }
    }
  }
  std::fill(used.begin(), used.end(), 0);
  std::vector<int> pipes;
  std::function<void(int)> rec_struct = [&](int from) {
    if (struct_cap) return;
    if (!pipes.empty() && pipes.front() != pipes.back()) {  // homogeneous multisets were listed above
      structures_.push_back({pipes});
      if (static_cast<long>(structures_.size()) >= kMaxStructures) {
        struct_cap = true;
        return;
      }
    }
    if (static_cast<long>(pipes.size()) >= global_) return;
    const int used_total = std::accumulate(used.begin(), used.end(), 0);
    for (int ps = from; ps < static_cast<int>(pipe_shapes_.size()); ++ps) {
      const PipeShape& p = pipe_shapes_[ps];
      if (used_total + p.total > total_gpus) {
        if (small) break;  // sorted by size
        continue;
      }
      bool ok = true;
      for (int ty = 0; ty < T; ++ty)
        if (used[ty] + p.gpus[ty] > types_[ty].gpus) ok = false;
      if (!ok) continue;
      for (int ty = 0; ty < T; ++ty) used[ty] += p.gpus[ty];
      pipes.push_back(ps);
      rec_struct(ps);
      pipes.pop_back();
      for (int ty = 0; ty < T; ++ty) used[ty] -= p.gpus[ty];
      if (struct_cap) return;
    }
  };
  rec_struct(0);
  if (struct_cap) capped_ = true;
  stats_.structures = static_cast<long>(structures_.size());
  stats_.enumeration_capped = capped_;
}

// Places a structure's TP groups on nodes, first-fit in node listing order, in stage-major (policy 0) or
// pipeline-major (policy 1) order. out[pipeline][stage][group] = GPU ids. Group order inside a stage: by type,
// then placement order.
bool Oracle::place(const Structure& s, int policy,
                   std::vector<std::vector<std::vector<std::vector<GpuId>>>>& out) const {
  std::vector<int> free_next(cluster_.nodes.size(), 0);  // next free local index per node
  const int P = static_cast<int>(s.pipes.size());
  out.assign(P, {});
  int max_s = 0;
  for (int i = 0; i < P; ++i) {
    out[i].resize(pipe_shapes_[s.pipes[i]].stages.size());
    max_s = std::max(max_s, static_cast<int>(out[i].size()));
  }
  auto alloc = [&](int i, int j) {
    const StageShape& st = stage_shapes_[pipe_shapes_[s.pipes[i]].stages[j]];
    for (size_t ty = 0; ty < types_.size(); ++ty)
      for (int g = 0; g < st.groups[ty]; ++g) {
        bool placed = false;
        for (const int n : types_[ty].nodes) {
          if (cluster_.nodes[n].gpus - free_next[n] < st.tp) continue;
          std::vector<GpuId> ids;
          for (int l = 0; l < st.tp; ++l) ids.push_back(cluster_.gpu_id(n, free_next[n] + l));
          free_next[n] += st.tp;
          out[i][j].push_back(std::move(ids));
          placed = true;
          break;
        }
        if (!placed) return false;
      }
    return true;
  };
  if (policy == 0) {
    for (int j = 0; j < max_s; ++j)
      for (int i = 0; i < P; ++i)
        if (j < static_cast<int>(out[i].size()) && !alloc(i, j)) return false;
  } else {
    for (int i = 0; i < P; ++i)
      for (int j = 0; j < static_cast<int>(out[i].size()); ++j)
        if (!alloc(i, j)) return false;
  }
  return true;
}

// Pessimistic send/recv time of one micro-batch's activations between stages (slowest NIC among the types).
double Oracle::p2p_time(const Structure&, int mb) const {
  double bw = kInf;
  for (const TypeInfo& t : types_) bw = std::min(bw, prof_.nic_bw_per_gpu(t.name));
  return std::isfinite(bw) && bw > 0 ? prof_.p2p_bytes(mb) / bw : 0.0;
}

// Micro-batches per pipeline. kind 0: exact min-max of the predicted pipeline times (greedy: each next
// micro-batch to the pipeline whose time after taking it is smallest; optimal for increasing per-pipeline
// times); kind 1: proportional to pipeline speed (1 / bottleneck stage time), as FlashFlex/HexiScale split.
std::vector<int> Oracle::split(const Structure& s, const std::vector<const ShapeEval*>& evs, int mb, int kind, double p2p,
                               double* predicted) const {
  const int P = static_cast<int>(s.pipes.size());
  const long M = global_ / mb;
  std::vector<int> m(P, 1);
  if (kind == 0) {
    for (long k = P; k < M; ++k) {
      int best = 0;
      double bt = kInf;
      for (int i = 0; i < P; ++i) {
        const double t = pipe_time(*evs[i], m[i] + 1, p2p);
        if (t < bt) {
          bt = t;
          best = i;
        }
      }
      ++m[best];
    }
  } else {
    std::vector<double> w(P);
    for (int i = 0; i < P; ++i) w[i] = 1.0 / evs[i]->max_t;
    const std::vector<long> parts = split_proportional(M, w, 1);
    for (int i = 0; i < P; ++i) m[i] = static_cast<int>(parts[i]);
  }
  double t = 0;
  for (int i = 0; i < P; ++i) t = std::max(t, pipe_time(*evs[i], m[i], p2p));
  *predicted = t;
  return m;
}

// Prices every phase-2 candidate with the profiler (no simulation) and sorts them.
void Oracle::price_and_rank() {
  const auto better = [](const Candidate& a, const Candidate& b) {
    if (a.predicted != b.predicted) return a.predicted < b.predicted;
    return a.seq < b.seq;
  };
  long seq = 0;
  // Only the best `keep` predicted candidates can be simulated within the remaining evaluation budget (each
  // distinct plan costs at least one evaluation; the margin absorbs duplicates and EP variants).
  const long remaining = std::max(0L, req_.budget_evaluations - eval_.evaluations());
  const long keep = std::min(kMaxCandidates, 4 * remaining + 64);
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(better)> heap(better);  // top = worst kept
  bool capped_wall = false;
  struct PlacementInfo {
    int state = 0;  // 0 unknown, 1 placed, 2 no placement
    bool multi_node = false;
    std::vector<int> policies;
  };
  std::vector<PlacementInfo> placement_info(structures_.size());
  // Lower bound on anything a (structure, mb) can still add: no candidate below the worst kept one.
  auto hopeless = [&](double lower_bound) {
    return static_cast<long>(heap.size()) >= keep && lower_bound >= heap.top().predicted;
  };
  std::vector<int> mbs;
  for (const int mb : {1, 2, 4, 8})
    if (global_ % mb == 0) mbs.push_back(mb);
  // Every structure at its min-max partitions (phase 3 covers every other partition).
  for (int si = 0; si < static_cast<int>(structures_.size()); ++si) {
    const Structure& s = structures_[si];
    const int P = static_cast<int>(s.pipes.size());
    // Placement feasibility (both policies; the second only when it differs) and whether the structure spans
    // nodes (DP reduction over NICs) - computed once, lazily (only for structures that can enter the kept set).
    auto ensure_placed = [&]() -> const PlacementInfo& {
      PlacementInfo& info = placement_info[si];
      if (info.state != 0) return info;
      std::vector<std::vector<std::vector<std::vector<GpuId>>>> pl0, pl1;
      const bool ok0 = place(s, 0, pl0), ok1 = place(s, 1, pl1);
      if (ok0) info.policies.push_back(0);
      if (ok1 && (!ok0 || pl1 != pl0)) info.policies.push_back(1);
      std::set<int> nodes_used;
      for (const auto& pipe : ok0 ? pl0 : pl1)
        for (const auto& stage : pipe)
          for (const auto& group : stage)
            for (const GpuId g : group) nodes_used.insert(cluster_.node_of(g));
      info.multi_node = nodes_used.size() > 1;
      info.state = info.policies.empty() ? 2 : 1;
      return info;
    };
    if (placement_info[si].state == 2) continue;
    // Distinct shapes and their multiplicities (consecutive in s.pipes).
    std::vector<int> distinct;
    for (const int ps : s.pipes)
      if (distinct.empty() || distinct.back() != ps) distinct.push_back(ps);
    for (const int mb : mbs) {
      if (global_ / mb < P) continue;
      int rc = -1;
      for (int r = 0; r < 3 && rc < 0; ++r) {
        bool all = true;
        for (const int ps : distinct)
          if (!shape_eval(ps, mb, r).feasible) all = false;
        if (all) rc = r;
      }
      if (rc < 0) {
        ++predicted_oom_;
        continue;
      }
      const double p2p = p2p_time(s, mb);
      std::vector<const ShapeEval*> evs;
      for (const int ps : s.pipes) evs.push_back(&shape_eval(ps, mb, rc));
      // A floor of the prediction (every pipeline takes >= 1 micro-batch, some >= ceil(M / P)): it only decides
      // what phase 2 keeps; phase 3 prunes with lower_bound.h alone.
      const long per = (global_ / mb + P - 1) / P;
      double lb1 = 0, lb2 = kInf;
      for (int i = 0; i < P; ++i) {
        lb1 = std::max(lb1, pipe_time(*evs[i], 1, p2p));
        lb2 = std::min(lb2, pipe_time(*evs[i], static_cast<int>(per), p2p));
      }
      if (hopeless(std::max(lb1, lb2))) {
        dropped_ = true;
        continue;
      }
      const PlacementInfo& placed = ensure_placed();
      if (placed.state == 2) break;
      const bool multi_node = placed.multi_node;
      const std::vector<int>& policies = placed.policies;
      auto push = [&](int split_kind, double pred) {
        for (const int pol : policies) {
          Candidate c;
          c.predicted = pred;
          c.structure = si;
          c.policy = pol;
          c.mb = mb;
          c.rc = rc;
          c.split = split_kind;
          c.seq = seq++;
          ++priced_;
          if (static_cast<long>(heap.size()) < keep) {
            heap.push(c);
          } else if (better(c, heap.top())) {
            heap.pop();
            heap.push(c);
            dropped_ = true;
          } else {
            dropped_ = true;
          }
        }
      };
      double pred0 = 0, pred1 = 0;
      const std::vector<int> m0 = split(s, evs, mb, 0, p2p, &pred0);
      push(0, pred0 + dp_term(s, evs, multi_node));
      const std::vector<int> m1 = split(s, evs, mb, 1, p2p, &pred1);
      if (m1 != m0) push(1, pred1 + dp_term(s, evs, multi_node));
    }
    if (req_.budget_wall_s > 0 && eval_.elapsed_s() >= req_.budget_wall_s) {
      capped_ = capped_wall = true;  // the wall budget ran out while pricing
      break;
    }
  }
  cands_.clear();
  while (!heap.empty()) {
    cands_.push_back(heap.top());
    heap.pop();
  }
  std::reverse(cands_.begin(), cands_.end());  // best first (the comparator is a total order)
}

Plan Oracle::build(const Candidate& c) {
  const Structure& s = structures_[c.structure];
  const int P = static_cast<int>(s.pipes.size());
  std::vector<std::vector<std::vector<std::vector<GpuId>>>> pl;
  place(s, c.policy, pl);
  std::vector<ShapeEval> evs;
  std::vector<const ShapeEval*> ptrs;
  for (int i = 0; i < P; ++i) {
    const int ps = s.pipes[i];
    evs.push_back(shape_eval(ps, c.mb, c.rc));
  }
  for (const ShapeEval& e : evs) ptrs.push_back(&e);
  double pred = 0;
  const std::vector<int> m = split(s, ptrs, c.mb, c.split, p2p_time(s, c.mb), &pred);
  std::vector<PipelineSpec> specs;
  for (int i = 0; i < P; ++i) {
    PipelineSpec p;
    p.micro_batch = c.mb;
    p.micro_batches = m[i];
    const PipeShape& shape = pipe_shapes_[s.pipes[i]];
    for (int j = 0; j < static_cast<int>(shape.stages.size()); ++j) {
      const StageShape& st = stage_shapes_[shape.stages[j]];
      StageSpec sp;
      sp.layer_begin = evs[i].bounds[j];
      sp.layer_end = evs[i].bounds[j + 1];
      // Shares proportional to each group's speed on this layer range (equal predicted group times), in whole
      // samples of the micro-batch (the declared space: a framework splits samples, not fractions of one).
      std::vector<double> w;
      int g = 0;
      for (size_t ty = 0; ty < types_.size(); ++ty)
        for (int k = 0; k < st.groups[ty]; ++k, ++g) {
          w.push_back(1.0 / group_time(static_cast<int>(ty), st.tp, c.mb, c.rc, sp.layer_begin, sp.layer_end));
          sp.groups.push_back({pl[i][j][g], st.tp, 0.0});
        }
      const std::vector<long> samples = split_proportional(c.mb, w, 1);
      for (size_t k = 0; k < sp.groups.size(); ++k)
        sp.groups[k].share = static_cast<double>(samples[k]) / static_cast<double>(c.mb);
      p.stages.push_back(std::move(sp));
    }
    specs.push_back(std::move(p));
  }
  return build_plan(specs, cluster_, kRecompute[c.rc]);
}

// Simulates a plan (once per distinct plan); out of memory: the next recompute level when `escalate`.
void Oracle::simulate(Plan plan, int rc, bool escalate) {
  for (int r = rc; r < 3; ++r) {
    plan.recompute = kRecompute[r];
    const std::string key = plan_to_yaml(plan, cluster_);
    if (!seen_.insert(key).second) return;
    if (out_of_budget()) return;
    std::string why;
    std::optional<double> t;
    try {
      t = eval_.iteration_time(plan, &why);
    } catch (const std::exception& e) {
      // A simulator failure on one candidate (reported upstream) must not sink the whole search.
      ++invalid_;
      last_invalid_ = std::string("simulator error: ") + e.what();
      return;
    }
    if (t) {
      if (*t < best_time_) {
        best_time_ = *t;
        best_ = plan;
      }
      return;
    }
    if (why != "out of memory") {
      ++invalid_;
      last_invalid_ = why;
      return;
    }
    ++oom_;
    if (!escalate) return;
  }
}

// Phase 1: the Megatron shorthand grid on the whole snapshot and on each type's nodes.
void Oracle::phase1() {
  std::vector<std::vector<int>> subsets;
  std::vector<int> all(cluster_.nodes.size());
  std::iota(all.begin(), all.end(), 0);
  subsets.push_back(all);
  if (types_.size() > 1)
    for (const TypeInfo& t : types_) subsets.push_back(t.nodes);
  for (const std::vector<int>& nodes : subsets) {
    const SubCluster sub = make_subcluster(cluster_, nodes, "oracle subset");
    const int n = sub.cluster.total_gpus();
    int max_node = 0;
    for (const Node& nd : sub.cluster.nodes) max_node = std::max(max_node, nd.gpus);
    for (int tp = 1; tp <= max_node; tp *= 2) {
      if (!divides(tp, model_.heads) || !divides(tp, model_.kv_heads)) continue;
      for (const int pp : divisors(L_)) {
        if (tp * pp > n) break;
        for (int dp = n / (tp * pp); dp >= 1; --dp) {
          if (global_ % dp != 0) continue;
          for (const int mb : {1, 2, 4, 8}) {
            if ((global_ / dp) % mb != 0) continue;
            std::vector<int> eps = {1};
            if (model_.moe) {
              eps.clear();
              for (const int e : divisors(dp))
                if (model_.moe->experts % e == 0) eps.push_back(e);
            }
            for (const int ep : eps) {
              ++stats_.candidates;
              Shorthand sh;
              sh.tp = tp;
              sh.pp = pp;
              sh.dp = dp;
              sh.ep = ep;
              sh.micro_batch = mb;
              sh.global_batch = global_;
              Plan p;
              try {
                p = plan_from_shorthand(sh, sub.cluster, model_);
              } catch (const InputError& e) {
                ++invalid_;
                last_invalid_ = e.what();
                continue;
              }
              bool inside = true;  // the oracle keeps TP groups inside one node
              for (const Pipeline& pl : p.pipelines)
                for (const Stage& st : pl.stages)
                  for (const TpGroup& g : st.groups)
                    for (const GpuId id : g.gpus)
                      if (sub.cluster.node_of(id) != sub.cluster.node_of(g.gpus.front())) inside = false;
              if (!inside) continue;
              map_plan_back(p, sub, cluster_);
              simulate(std::move(p), 0, true);
              if (budget_cut_) return;
            }
          }
        }
      }
    }
  }
}

// Phase 0 (unless disabled): the plans the baselines' searches return are simulated first, so the
// oracle's answer is never worse than theirs even where a budget cuts its enumeration.
// First each with its own cost model (its own-model pricing is free; the simulations it makes, e.g. AMP's
// trials, are charged), then each with the simulator as its cost model on an eighth of the remaining budget
// (charged). Without phase 0 the oracle stands on its enumeration alone (what the
// oracle-never-beaten test checks).
void Oracle::seed_from_baselines() {
  for (const CostModel cm : {CostModel::Own, CostModel::Simulator})
    for (const char* name : {"amp", "metis", "flashflex", "sailor"}) {
      if (out_of_budget()) return;
      PlanRequest r = req_;
      r.cost_model = cm;
      // A seed needs at least one simulation of its own (AMP's trials, a simulator-priced search) and one
      // to simulate the plan it returns.
      const long remaining = req_.budget_evaluations - eval_.evaluations();
      if (remaining < 2) return;
      r.budget_evaluations = cm == CostModel::Simulator ? std::max(1L, remaining / 8) : remaining - 1;
      if (req_.budget_wall_s > 0) {
        // An eighth of the wall time left, as of the simulations: a baseline whose own search runs to its
        // time cap (Metis) must not take the time the oracle's own phases need.
        r.budget_wall_s = (req_.budget_wall_s - eval_.elapsed_s()) / 8;
        if (r.budget_wall_s <= 0) return;
      }
      const PlanResult seed = make_planner(name)->plan(r);
      eval_.charge(seed.evaluations);
      if (!seed.plan) continue;
      ++stats_.candidates;
      const int rc = seed.plan->recompute == Recompute::Full ? 2 : seed.plan->recompute == Recompute::Selective ? 1 : 0;
      simulate(*seed.plan, rc, true);
    }
}

// Phase 2 (heuristic): the predicted-best candidates, simulated in ascending predicted time, at most `cap`
// simulations (the budget when no complete search follows).
void Oracle::phase2(long cap) {
  enumerate();
  price_and_rank();
  stats_.candidates += priced_;
  const long until = eval_.evaluations() + cap;
  for (const Candidate& c : cands_) {
    if (out_of_budget() || eval_.evaluations() >= until) break;
    for (Plan& p : ep_variants(build(c), model_)) {
      simulate(std::move(p), c.rc, true);
      if (budget_cut_) break;
    }
    if (budget_cut_) break;
  }
}

// Phase 3: branch and bound over the declared space from the best plan so far (exhaustive_search.h).
void Oracle::phase3() {
  Incumbent inc;
  inc.plan = best_;
  inc.time_s = best_time_;
  ExhaustiveLimits lim;
  lim.max_simulations = std::max(0L, req_.budget_evaluations - eval_.evaluations());
  if (req_.budget_wall_s > 0) lim.wall_s = std::max(1e-9, req_.budget_wall_s - eval_.elapsed_s());
  lim.threads = threads_;
  const ExhaustiveStats st = exhaustive_search(req_, global_, lim, inc);
  eval_.charge(st.simulated);
  stats_.structures += st.structures;
  stats_.exhaustive_structures = st.structures;
  stats_.space_structures = st.space_structures;
  stats_.candidates += st.candidates;
  stats_.pruned_by_bound = st.pruned_by_bound;
  stats_.proven_oom = st.proven_oom;
  stats_.exhaustive_simulated = st.simulated;
  stats_.incomplete_reason = st.incomplete_reason;
  complete_ = st.complete;
  if (inc.plan && inc.time_s < best_time_) {
    best_ = inc.plan;
    best_time_ = inc.time_s;
  }
}

PlanResult Oracle::run() {
  PlanResult result;
  const bool exhaustive = cluster_.total_gpus() <= kCompleteSearchMaxGpus;
  if (seed_) seed_from_baselines();
  if (!budget_cut_) phase1();
  const long left = std::max(0L, req_.budget_evaluations - eval_.evaluations());
  if (!budget_cut_) phase2(exhaustive ? std::min(left / 4, kHeuristicSimulationsBeforeExhaustive) : left);
  if (!budget_cut_ && exhaustive) phase3();
  if (!exhaustive) stats_.incomplete_reason = "more than " + std::to_string(kCompleteSearchMaxGpus) + " GPUs: best found";
  else if (budget_cut_) stats_.incomplete_reason = "simulation budget spent before the complete search";
  stats_.simulated = eval_.evaluations();
  result.evaluations = eval_.evaluations();
  result.search_complete = exhaustive && complete_ && !budget_cut_;
  if (!best_) {
    const std::string what = std::to_string(cluster_.total_gpus()) + " GPUs";
    if (!result.search_complete)
      result.reason = "no plan of " + model_.name + " on the " + what + " found (" + stats_.incomplete_reason + ")";
    else if (oom_ > 0 || predicted_oom_ > 0 || stats_.proven_oom > 0)
      result.reason = "no plan of " + model_.name + " on the " + what + " fits in memory (" + std::to_string(oom_) +
                      " plans simulated out of memory, " + std::to_string(stats_.proven_oom) +
                      " candidates proven out of memory)";
    else
      result.reason = "no valid plan structure of " + model_.name + " on the " + what +
                      (last_invalid_.empty() ? std::string() : " (last: " + last_invalid_ + ")");
    return result;
  }
  Plan plan = std::move(*best_);
  validate_plan(plan, cluster_, model_, global_, "oracle");
  result.plan = std::move(plan);
  result.predicted_iteration_time_s = best_time_;
  return result;
}

}  // namespace

PlanResult OraclePlanner::plan(const PlanRequest& request) {
  const auto start = Clock::now();
  stats_ = Stats{};
  long global = 0;
  PlanResult r;
  if (const auto problem = request_problem(request, "oracle", &global)) {
    r.reason = *problem;
  } else {
    if (!request.topo) throw std::invalid_argument("oracle: request without topology");
    Oracle o(request, global, stats_, seed_, threads_ > 0 ? threads_ : default_oracle_threads());
    r = o.run();
  }
  r.planning_time_s = std::chrono::duration<double>(Clock::now() - start).count();
  return r;
}

}  // namespace arachne::planner
