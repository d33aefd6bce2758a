// The `sailor` baseline planner (algorithm, cost model and sources in sailor_planner.h).
#include "planner/baselines/sailor/sailor_planner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "planner/common/evaluator.h"
#include "planner/common/plan_builder.h"
#include "sim/model/compute_time.h"
#include "sim/plan/plan_yaml.h"

namespace arachne::planner {

// ------------------------------------------------------------------ public helpers (Sailor's TP rules)

std::vector<std::pair<int, int>> sailor_stages(int layers, int pp) {
  // planner_utils.cpp get_stages: chunk = L / P; the first P - (L mod P) stages get chunk layers, the rest
  // chunk + 1 ("keep more layers at the last stages to alleviate mem pressure").
  std::vector<std::pair<int, int>> out;
  if (pp < 1 || pp > layers) return out;
  const int chunk = layers / pp;
  const int small = pp - layers % pp;
  int begin = 0;
  for (int i = 0; i < pp; ++i) {
    const int size = i < small ? chunk : chunk + 1;
    out.emplace_back(begin, begin + size);
    begin += size;
  }
  return out;
}

std::vector<int> sailor_tp_candidates(const Cluster& cluster, const ModelConfig& model, const std::string& gpu_type) {
  int node_gpus = 0;
  for (const Node& n : cluster.nodes) {
    if (cluster.groups[n.group].gpu != gpu_type || n.gpus <= 0) continue;
    node_gpus = node_gpus == 0 ? n.gpus : std::min(node_gpus, n.gpus);
  }
  std::vector<int> tps;
  // Sailor's TP degrees are the VM sizes it has network profiles for (1, 2, 4, ...): a TP group is one VM.
  for (int tp = 1; tp <= node_gpus; tp *= 2) {
    if (model.heads > 0 && model.heads % tp != 0) continue;
    if (model.kv_heads > 0 && model.kv_heads % tp != 0) continue;
    tps.push_back(tp);
  }
  return tps;
}

namespace {
ProfileKey key_of(const std::string& type, int tp, int mbs) {
  ProfileKey k;
  k.gpu_type = type;
  k.tp = tp;
  k.samples = mbs;
  k.recompute = Recompute::None;
  k.sequence_parallel = false;
  return k;
}
constexpr double kSpeedupThreshold = 1.5;     // planner_utils.hpp SPEEDUP_THRESHOLD
constexpr double kBucketBytes = 5e8;          // planner_utils.hpp MEMORY_BUCKET_DEEPSPEED_SIZE
constexpr double kAdamBytesPerParam = 34.0;   // optimizer step traffic per parameter (mixed-precision Adam)
}  // namespace

int sailor_speedup_tp(const Profiler& profiler, const std::string& gpu_type, int begin, int end, int micro_batch,
                      const std::vector<int>& tps) {
  // planner.cpp build_structs, "MAX TMP, based on scaling": walk TPs ascending; accept a TP while the
  // previous accepted TP's stage time over this one's is >= 1.5, stop at the first that is not.
  int best = tps.empty() ? 1 : tps.front();
  double prev = std::numeric_limits<double>::infinity();
  for (const int tp : tps) {
    const double t = profiler.stage_time_s(begin, end, key_of(gpu_type, tp, micro_batch));
    if (prev / t >= kSpeedupThreshold) {
      prev = t;
      best = tp;
    } else {
      break;
    }
  }
  return best;
}

int sailor_memory_min_tp(const Profiler& profiler, const std::string& gpu_type, int begin, int end, int micro_batch,
                         double in_flight, const std::vector<int>& tps) {
  // planner.cpp build_structs, "MIN TMP, based on memory": the first TP for which check_stage_fits holds
  // (activations of P - s micro-batches in flight on stage s under 1F1B).
  const double cap = profiler.gpu_memory_bytes(gpu_type);
  for (const int tp : tps)
    if (profiler.stage_memory_bytes(begin, end, key_of(gpu_type, tp, micro_batch), in_flight) <= cap) return tp;
  return -1;
}

// ------------------------------------------------------------------ the search

namespace {


struct TypeInfo {
  std::string name;
  std::vector<int> nodes;  // node indices, fill order (most GPUs first, then id: Sailor sorts zones by size)
  std::vector<int> tps;    // TP candidates
};

// Interchangeable nodes: same node group (so same GPU type and links) and same GPU count. The DP works on
// "slots": the nodes of each class, sorted by free GPUs ascending inside the class (ties: previous order).
struct NodeClass {
  int type = 0;
  int group = 0;
  int gpus = 0;
  int first_slot = 0;  // slots first_slot .. first_slot+count-1
  int count = 0;
};

struct Replica {
  int type = 0;
  int tp = 1;
  int node = 0;         // a slot inside the DP, a cluster node index in a finished configuration
  int first_local = 0;  // GPUs first_local .. first_local+tp-1 of the node
};

// planner_utils.hpp PipelineInfo: the merged state of stages s..P-1.
struct PipeInfo {
  double straggler = 0;   // max over stages of comp + adjacent communication
  double first = 0;       // first stage's comp + its activation send (first_stage_comp)
  double comp = 0;        // Σ comp per micro-batch
  double comm = 0;        // Σ inter-stage communication (activations + gradients)
  double sync = 0;        // max DP all-reduce
  double update = 0;      // max optimizer step
  double tpp = 0;         // T_pp of this suffix as a pipeline of its own
};

// A solved DP state (memo entry): the best suffix s..P-1 on the state's slots, stored as its first stage
// (replicas on the state's slots) and the entry of the rest (on the slots of the state it leaves).
struct Entry {
  bool feasible = false;
  PipeInfo info;
  std::vector<Replica> reps;
  int child = -1;
};

// A finished configuration on cluster nodes.
struct Suffix {
  bool feasible = false;
  PipeInfo info;
  std::vector<std::vector<Replica>> stages;  // stages 0..P-1, D replicas each
};

class Search {
 public:
  Search(const PlanRequest& req, const Profiler& prof, const std::vector<TypeInfo>& types, long global,
         bool memoize, SailorPlanner::Stats& stats, const PlanTimer& timer)
      : req_(req), c_(*req.cluster), prof_(prof), types_(types), global_(global), memoize_(memoize),
        stats_(stats), timer_(timer) {
    // Classes ordered by (type, group, GPUs); slots of a class start in fill order.
    std::map<std::tuple<int, int, int>, std::vector<int>> by_class;
    for (size_t t = 0; t < types_.size(); ++t)
      for (const int n : types_[t].nodes)
        by_class[{static_cast<int>(t), c_.nodes[n].group, c_.nodes[n].gpus}].push_back(n);
    for (const auto& [k, nodes] : by_class) {
      NodeClass nc;
      std::tie(nc.type, nc.group, nc.gpus) = k;
      nc.first_slot = static_cast<int>(slot_node_.size());
      nc.count = static_cast<int>(nodes.size());
      for (const int n : nodes) {
        slot_node_.push_back(n);
        slot_class_.push_back(static_cast<int>(classes_.size()));
      }
      classes_.push_back(nc);
    }
    type_classes_.assign(types_.size(), {});
    for (size_t k = 0; k < classes_.size(); ++k) type_classes_[classes_[k].type].push_back(static_cast<int>(k));
    intra_.resize(types_.size());
    nic_.resize(types_.size());
    for (size_t t = 0; t < types_.size(); ++t) {
      intra_[t] = prof_.intra_bw(types_[t].name);
      nic_[t] = prof_.nic_bw_per_gpu(types_[t].name);
    }
  }

  // Per (P, mbs): stages and TP per (type, stage); returns the usable-type mask (0: nothing fits).
  unsigned prepare(int P, int mbs) {
    P_ = P;
    mbs_ = mbs;
    stages_ = sailor_stages(prof_.model().layers, P);
    tp_.assign(types_.size(), {});
    comp_.assign(types_.size(), {});
    update_.assign(types_.size(), {});
    grad_.assign(types_.size(), {});
    p2p_bytes_ = prof_.p2p_bytes(mbs_);
    unsigned mask = 0;
    for (size_t t = 0; t < types_.size(); ++t) {
      const TypeInfo& ti = types_[t];
      if (ti.tps.empty()) continue;
      std::vector<int> tps;
      bool ok = true;
      for (int s = 0; s < P && ok; ++s) {
        const auto [b, e] = stages_[s];
        // find_tmp_degrees: max(speed-up TP, memory TP); a type whose stage fits at no TP is dropped.
        const int min_tp = memory_tp(t, b, e, P - s);
        if (min_tp < 0) {
          ok = false;
          break;
        }
        tps.push_back(std::max(speedup_tp(t, b, e), min_tp));
      }
      if (!ok) continue;
      // Per-(type, stage) profile terms, priced once (they depend on neither D nor the placement).
      for (int s = 0; s < P; ++s) {
        const auto [b, e] = stages_[s];
        const ProfileKey key = key_of(ti.name, tps[s], mbs_);
        comp_[t].push_back(prof_.stage_time_s(b, e, key));
        grad_[t].push_back(prof_.grad_bytes(b, e, tps[s]));
        // The per-layer optimizer "update" of Sailor's profile: one memory-bound pass over the rank's state.
        double params = 0;
        for (int l = b; l < e; ++l) params += prof_.layer(l, key).params;
        if (b == 0) params += prof_.embedding(key).params;
        if (e == prof_.model().layers) params += prof_.head(key).params;
        update_[t].push_back(op_time_s(OpCost{OpClass::Memory, 0.0, params * kAdamBytesPerParam},
                                       c_.catalog.at(ti.name), prof_.model().dtype));
      }
      tp_[t] = std::move(tps);
      mask |= 1u << t;
    }
    mask_ = mask;
    return mask;
  }

  // solve_dp for stage 0 with D replicas per stage on the whole cluster; the configuration on cluster nodes.
  Suffix solve_top(int D) {
    D_ = D;
    m_ = static_cast<long>(std::ceil(static_cast<double>(global_) / (static_cast<double>(mbs_) * D)));
    if (scratch_.size() < static_cast<size_t>(P_)) scratch_.resize(P_);  // never resized inside solve
    std::vector<int> free(slot_node_.size());
    for (size_t i = 0; i < free.size(); ++i) free[i] = classes_[slot_class_[i]].gpus;
    const int top = solve(0, free);
    Suffix out;
    if (!entries_[top].feasible) return out;
    out.feasible = true;
    out.info = entries_[top].info;
    // Concretise: replay the placements, carrying the slot -> node map through each re-sort of the slots.
    std::vector<int> node_of = slot_node_;
    std::vector<int> perm;
    for (int e = top; e >= 0; e = entries_[e].child) {
      std::vector<Replica> reps = entries_[e].reps;
      for (const Replica& r : reps) free[r.node] -= r.tp;
      for (Replica& r : reps) r.node = node_of[r.node];
      out.stages.push_back(std::move(reps));
      canonical(free, perm);
      std::vector<int> next(node_of.size());
      for (size_t i = 0; i < perm.size(); ++i) next[i] = node_of[perm[i]];
      node_of = std::move(next);
    }
    return out;
  }

  long evaluations = 0;   // complete configurations priced by the own cost model (not budgeted)
  bool stopped = false;   // the wall-clock budget ran out

 private:
  const PlanRequest& req_;
  const Cluster& c_;
  const Profiler& prof_;
  const std::vector<TypeInfo>& types_;
  long global_;
  bool memoize_;
  SailorPlanner::Stats& stats_;
  const PlanTimer& timer_;

  std::vector<NodeClass> classes_;
  std::vector<std::vector<int>> type_classes_;  // [type] -> its classes
  std::vector<int> slot_node_;                  // initial slot -> cluster node
  std::vector<int> slot_class_;
  std::vector<double> intra_, nic_;             // per type

  int P_ = 1, mbs_ = 1, D_ = 1;
  long m_ = 1;
  unsigned mask_ = 0;
  double p2p_bytes_ = 0;
  std::vector<std::pair<int, int>> stages_;
  std::vector<std::vector<int>> tp_;  // [type][stage]; empty: type unused
  std::vector<std::vector<double>> comp_, update_, grad_;  // [type][stage]
  std::vector<Entry> entries_;
  // Looked up only, never iterated (determinism).
  std::unordered_map<std::string, int> memo_;
  // Per-depth scratch buffers (solve(s) uses scratch_[s]; its callee uses s+1).
  struct Scratch {
    std::vector<int> cap, combos, cur, left, perm;
    std::vector<std::vector<int>> order;
    std::vector<Replica> reps;
    std::string key;
  };
  std::vector<Scratch> scratch_;
  std::map<std::tuple<size_t, int, int, int>, int> speedup_cache_;      // type, mbs, begin, end
  std::map<std::tuple<size_t, int, int, int, int>, int> memory_cache_;  // type, mbs, begin, end, in flight

  bool wall_spent() const {
    return timer_.wall_budget_spent(req_);
  }

  int speedup_tp(size_t t, int b, int e) {
    const auto k = std::make_tuple(t, mbs_, b, e);
    auto it = speedup_cache_.find(k);
    if (it == speedup_cache_.end())
      it = speedup_cache_.emplace(k, sailor_speedup_tp(prof_, types_[t].name, b, e, mbs_, types_[t].tps)).first;
    return it->second;
  }
  int memory_tp(size_t t, int b, int e, int in_flight) {
    const auto k = std::make_tuple(t, mbs_, b, e, in_flight);
    auto it = memory_cache_.find(k);
    if (it == memory_cache_.end())
      it = memory_cache_.emplace(k, sailor_memory_min_tp(prof_, types_[t].name, b, e, mbs_, in_flight, types_[t].tps))
               .first;
    return it->second;
  }

  // Re-sorts every class's slots by free GPUs ascending, stably (the DP's canonical state); perm[new] = old.
  void canonical(std::vector<int>& free, std::vector<int>& perm) const {
    perm.resize(free.size());
    for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int>(i);
    for (const NodeClass& k : classes_) {
      const auto b = perm.begin() + k.first_slot, e = b + k.count;
      if (std::is_sorted(free.begin() + k.first_slot, free.begin() + k.first_slot + k.count)) continue;
      std::stable_sort(b, e, [&free](int x, int y) { return free[x] < free[y]; });
      std::sort(free.begin() + k.first_slot, free.begin() + k.first_slot + k.count);
    }
  }

  // The memo key: the sub-problem and, per node class, how many nodes have each number of free GPUs (which
  // is all the canonical state holds: a class's slots are sorted by free GPUs).
  void memo_key(int s, const std::vector<int>& free, std::string& key) const {
    key.clear();
    auto put = [&key](int v) { key.append(reinterpret_cast<const char*>(&v), sizeof v); };
    put(mbs_);
    put(P_ - s);
    put(stages_[s].first);
    put(D_);
    put(static_cast<int>(mask_));
    for (const NodeClass& k : classes_) {
      // A class's slots are sorted by free GPUs: run lengths per free value are its histogram.
      int i = k.first_slot;
      const int end = k.first_slot + k.count;
      while (i < end) {
        int j = i;
        while (j < end && free[j] == free[i]) ++j;
        put(free[i]);
        put(j - i);
        i = j;
      }
      put(-1);
    }
  }

  // Replicas of stage s that type t can still host: Σ over its nodes of floor(free / tp) (solve_dp rec_id).
  int capacity(size_t t, int s, const std::vector<int>& free) const {
    if (tp_[t].empty()) return 0;
    const int tp = tp_[t][s];
    int n = 0;
    for (const int k : type_classes_[t])
      for (int i = classes_[k].first_slot; i < classes_[k].first_slot + classes_[k].count; ++i) n += free[i] / tp;
    return n;
  }

  // generate_all_combos_new: per-type replica counts summing to D, each within its capacity; type 0's count
  // ascending outermost, the last type takes the remainder.
  void combos(const std::vector<int>& cap, size_t t, int left, std::vector<int>& cur, std::vector<int>& out) const {
    if (t + 1 == cap.size()) {
      if (left <= cap[t]) {
        cur.push_back(left);
        out.insert(out.end(), cur.begin(), cur.end());
        cur.pop_back();
      }
      return;
    }
    for (int k = 0; k <= std::min(left, cap[t]); ++k) {
      cur.push_back(k);
      combos(cap, t + 1, left - k, cur, out);
      cur.pop_back();
    }
  }

  // A type's fill order on a state: most GPUs per node first, then the fullest (fewest free GPUs, so a
  // partly used node is filled before a fresh one, as filling zones in order does), then class and slot.
  void fill_order(size_t t, const std::vector<int>& free, std::vector<int>& order) const {
    order.clear();
    for (const int k : type_classes_[t])
      for (int i = classes_[k].first_slot; i < classes_[k].first_slot + classes_[k].count; ++i)
        if (free[i] > 0) order.push_back(i);
    if (type_classes_[t].size() > 1)
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
        const int ga = classes_[slot_class_[a]].gpus, gb = classes_[slot_class_[b]].gpus;
        if (ga != gb) return ga > gb;
        return free[a] < free[b];
      });
  }

  // Places the combination's replicas, filling each type's slots in fill order; false if they do not fit.
  bool place(int s, const int* combo, const std::vector<std::vector<int>>& order, std::vector<int>& free,
             std::vector<Replica>& reps) const {
    for (size_t t = 0; t < types_.size(); ++t) {
      int need = combo[t];
      if (need == 0) continue;
      const int tp = tp_[t][s];
      for (const int slot : order[t]) {
        while (need > 0 && free[slot] >= tp) {
          Replica r;
          r.type = static_cast<int>(t);
          r.tp = tp;
          r.node = slot;
          r.first_local = classes_[slot_class_[slot]].gpus - free[slot];
          reps.push_back(r);
          free[slot] -= tp;
          --need;
        }
        if (need == 0) break;
      }
      if (need > 0) return false;
    }
    return true;
  }

  // simulate_time_single_stage: the stage as a one-stage pipeline.
  PipeInfo price_stage(int s, const std::vector<Replica>& reps) const {
    const int D = static_cast<int>(reps.size());
    bool one_node = true;
    unsigned seen = 0;
    for (const Replica& r : reps) {
      one_node = one_node && r.node == reps.front().node;
      seen |= 1u << r.type;
    }
    double comp = 0, sync = 0, update = 0;
    const double lat = c_.network.latency_s;
    for (size_t t = 0; t < types_.size(); ++t) {
      if (!(seen & (1u << t))) continue;
      const int tp = tp_[t][s];
      // Straggler type of the stage (the max over dp pairs' exec times).
      comp = std::max(comp, comp_[t][s]);
      // find_ar_time / get_ar_time_with_buckets: ring all-reduce over D replicas on the bottleneck link.
      if (D > 1) {
        const double bytes = grad_[t][s];
        const double bw = one_node ? intra_[t] : nic_[t];
        const double buckets = std::max(1.0, std::ceil(bytes * tp / kBucketBytes));
        const double t_ar = bw > 0 ? 2.0 * (D - 1) / D * bytes / bw + 2.0 * (D - 1) * (one_node ? 0.0 : lat) * buckets
                                   : std::numeric_limits<double>::infinity();
        sync = std::max(sync, t_ar);
      }
      update = std::max(update, update_[t][s]);
    }
    PipeInfo p;
    p.straggler = comp;
    p.first = comp;
    p.comp = comp;
    p.comm = 0;
    p.sync = sync;
    p.update = update;
    p.tpp = static_cast<double>(m_) * comp + sync + update;
    return p;
  }

  // Activation send from replica a (stage s) to replica b (stage s+1): find_p2p_time_cost.
  double p2p_time(const Replica& a, const Replica& b, bool same_node) const {
    const double bytes = p2p_bytes_;
    if (same_node) {
      const double bw = std::min(intra_[a.type], intra_[b.type]);
      return bw > 0 ? bytes / bw : std::numeric_limits<double>::infinity();
    }
    // Sailor's network profile is per VM (GPU type x GPU count): here the TP group's share of its node's NICs.
    const double bw = std::min(nic_[a.type] * a.tp, nic_[b.type] * b.tp);
    return bw > 0 ? bytes / bw + c_.network.latency_s : std::numeric_limits<double>::infinity();
  }

  // merge_stages_get_time: stage s (single-stage info `a`, replicas `ra`) in front of the suffix `rest`,
  // whose first stage sits on the slots of the state after stage s (perm maps them back to stage s's slots).
  PipeInfo merge(const PipeInfo& a, const std::vector<Replica>& ra, const Entry& rest,
                 const std::vector<int>& perm) const {
    double act = 0;
    const std::vector<Replica>& rb = rest.reps;
    for (size_t k = 0; k < ra.size(); ++k) act = std::max(act, p2p_time(ra[k], rb[k], ra[k].node == perm[rb[k].node]));
    const double grad = act;  // stage_time_comm_grad = stage_time_comm_act
    const PipeInfo& b = rest.info;
    PipeInfo p;
    p.straggler = std::max({a.straggler + act, b.first + grad, b.straggler});
    p.comm = b.comm + act + grad;
    p.comp = a.comp + b.comp;
    p.sync = std::max(a.sync, b.sync);
    p.update = std::max(a.update, b.update);  // Sailor's merge uses 0 here (see header)
    p.first = a.comp + act;
    p.tpp = static_cast<double>(m_ - 1) * p.straggler + p.comm + p.comp + p.update + p.sync;
    return p;
  }

  // solve_dp on a canonical state; returns its entry. A function of the memo key alone, so a memo hit
  // returns exactly what solving again would.
  int solve(int s, const std::vector<int>& free) {
    ++stats_.dp_calls;
    Scratch& sc = scratch_[s];
    if (memoize_) {
      memo_key(s, free, sc.key);
      const auto it = memo_.find(sc.key);
      if (it != memo_.end()) {
        ++stats_.memo_hits;
        return it->second;
      }
    }
    Entry best;
    const bool last = s == P_ - 1;
    const size_t T = types_.size();
    sc.cap.assign(T, 0);
    sc.order.resize(T);
    for (size_t t = 0; t < T; ++t) {
      sc.cap[t] = capacity(t, s, free);
      if (sc.cap[t] > 0) fill_order(t, free, sc.order[t]);
    }
    sc.combos.clear();
    sc.cur.clear();
    combos(sc.cap, 0, D_, sc.cur, sc.combos);
    double prev_single = std::numeric_limits<double>::quiet_NaN();
    std::vector<int>& left = sc.left;
    std::vector<int>& perm = sc.perm;
    std::vector<Replica>& reps = sc.reps;
    for (size_t ci = 0; ci < sc.combos.size(); ci += T) {
      const int* combo = sc.combos.data() + ci;
      if (stopped) break;
      if (wall_spent()) {
        stopped = true;
        break;
      }
      left = free;
      reps.clear();
      if (!place(s, combo, sc.order, left, reps)) continue;
      const PipeInfo single = price_stage(s, reps);
      if (last) {
        if (s == 0) ++evaluations;  // P = 1: a complete configuration
        if (!best.feasible || single.tpp < best.info.tpp) {
          best.feasible = true;
          best.info = single;
          best.reps = reps;
        }
        continue;
      }
      // solve_dp: a combination with the same single-stage time as the previous one is skipped.
      if (single.tpp == prev_single) continue;
      prev_single = single.tpp;
      // next_stage_max_dp < data_par: the next stage cannot get D replicas from what is left.
      int next_cap = 0;
      for (size_t t = 0; t < types_.size(); ++t) next_cap += capacity(t, s + 1, left);
      if (next_cap < D_) continue;
      canonical(left, perm);
      const int ri = solve(s + 1, left);
      if (stopped) break;
      const Entry& rest = entries_[ri];
      if (!rest.feasible) continue;
      if (s == 0) ++evaluations;
      const PipeInfo merged = merge(single, reps, rest, perm);
      if (!best.feasible || merged.tpp < best.info.tpp) {
        best.feasible = true;
        best.info = merged;
        best.reps = reps;
        best.child = ri;
      }
    }
    const int id = static_cast<int>(entries_.size());
    entries_.push_back(std::move(best));
    if (memoize_ && !stopped) memo_.emplace(scratch_[s].key, id);
    return id;
  }
};

struct Candidate {
  int P = 0, mbs = 0, D = 0;
  Suffix config;
  double time = 0;  // own T_pp, or simulated time
  Plan plan;
};

Plan build_sailor_plan(const Cluster& c, const ModelConfig& model, const std::vector<std::pair<int, int>>& stages,
                       const Suffix& config, int mbs, long global) {
  const int D = static_cast<int>(config.stages.front().size());
  const long micro_batches = global / mbs;
  const std::vector<long> per = split_proportional(micro_batches, std::vector<double>(D, 1.0), 1);
  std::vector<PipelineSpec> pipes;
  for (int k = 0; k < D; ++k) {
    PipelineSpec ps;
    ps.micro_batch = mbs;
    ps.micro_batches = static_cast<int>(per[k]);
    for (size_t s = 0; s < stages.size(); ++s) {
      const Replica& r = config.stages[s][k];
      StageSpec ss;
      ss.layer_begin = stages[s].first;
      ss.layer_end = stages[s].second;
      GroupSpec g;
      g.tp = r.tp;
      for (int i = 0; i < r.tp; ++i) g.gpus.push_back(c.gpu_id(r.node, r.first_local + i));
      ss.groups.push_back(std::move(g));
      ps.stages.push_back(std::move(ss));
    }
    pipes.push_back(std::move(ps));
  }
  Plan plan = build_plan(pipes, c, Recompute::None);
  apply_megatron_core_ep(plan, model);
  return plan;
}

}  // namespace

PlanResult SailorPlanner::plan(const PlanRequest& request) {
  const PlanTimer timer;
  stats_ = Stats{};
  long global = 0;
  if (auto refused = refused_request(request, "sailor", timer, &global)) return *refused;
  const Cluster& cluster = *request.cluster;
  const ModelConfig& model = *request.model;

  PlanResult result;

  // GPU types ordered by name (Sailor: sorted quota keys); nodes of a type in fill order.
  std::map<std::string, std::vector<int>> by_type;
  for (size_t n = 0; n < cluster.nodes.size(); ++n)
    if (cluster.nodes[n].gpus > 0) by_type[cluster.groups[cluster.nodes[n].group].gpu].push_back(static_cast<int>(n));
  std::vector<TypeInfo> types;
  for (auto& [name, nodes] : by_type) {
    TypeInfo ti;
    ti.name = name;
    ti.nodes = nodes;
    std::stable_sort(ti.nodes.begin(), ti.nodes.end(),
                     [&](int a, int b) { return cluster.nodes[a].gpus > cluster.nodes[b].gpus; });
    ti.tps = sailor_tp_candidates(cluster, model, name);
    types.push_back(std::move(ti));
  }
  if (types.size() > 31) {
    result.reason = "more than 31 GPU types";
    return timer.finish(result);
  }

  const Profiler profiler(cluster, model);
  const int G = cluster.total_gpus();
  Search search(request, profiler, types, global, options_.memoize, stats_, timer);
  const bool use_sim = request.cost_model == CostModel::Simulator;
  std::optional<Evaluator> evaluator;
  if (use_sim) evaluator.emplace(request);

  std::optional<Candidate> best;
  bool any_fit = false, any_mbs = false;
  long sim_evals = 0, sim_oom = 0;
  auto spent = [&] {
    return sim_evals >= request.budget_evaluations || timer.wall_budget_spent(request);
  };
  bool stopped = false;

  for (int P = 1; P <= std::min(model.layers, G) && !stopped; ++P) {
    for (const int mbs : {1, 2, 4, 8}) {  // Sailor's profiled micro-batch sizes
      if (stopped) break;
      if (global % mbs != 0) continue;  // our plans need B/mbs whole micro-batches
      any_mbs = true;
      if (search.prepare(P, mbs) == 0) continue;
      any_fit = true;
      // build_structs mbs_dp_vector: D = 1 and each D where ceil(B/(mbs·D)) changes; largest first.
      const long N = global / mbs;
      std::vector<int> Ds = {1};
      long cur = N;
      for (int D = 2; D <= G; ++D) {
        const long m = (N + D - 1) / D;
        if (m != cur) {
          Ds.push_back(D);
          cur = m;
        }
      }
      std::reverse(Ds.begin(), Ds.end());
      double prev = std::numeric_limits<double>::infinity();
      for (const int D : Ds) {
        if (D * P > G) continue;  // cannot have D replicas of P stages: infeasible (solve_dp finds none)
        Suffix cfg = search.solve_top(D);
        if (search.stopped) stopped = true;
        if (!cfg.feasible) {
          if (stopped) break;
          continue;
        }
        Candidate cand;
        cand.P = P;
        cand.mbs = mbs;
        cand.D = D;
        cand.time = cfg.info.tpp;
        cand.plan = build_sailor_plan(cluster, model, sailor_stages(model.layers, P), cfg, mbs, global);
        cand.config = std::move(cfg);
        if (use_sim) {
          if (spent()) {
            stopped = true;
            break;
          }
          std::string why;
          const std::optional<double> t = evaluator->iteration_time(cand.plan, &why);
          sim_evals = evaluator->evaluations();
          if (!t) {
            if (why == "out of memory") ++sim_oom;
            continue;
          }
          cand.time = *t;
        }
        ++stats_.candidates;
        // H3: stop lowering D once the plan stops getting faster.
        const bool improved = cand.time < prev;
        if (improved) prev = cand.time;
        if (!best || cand.time < best->time) best = std::move(cand);
        if (!improved) break;
        if (stopped) break;
      }
      if (search.stopped) stopped = true;
    }
  }

  result.evaluations = sim_evals;
  result.own_model_evaluations = search.evaluations;
  result.search_complete = !stopped;
  if (!best) {
    if (!any_mbs)
      result.reason = "no micro-batch size in {1, 2, 4, 8} divides the global batch " + std::to_string(global);
    else if (!any_fit)
      result.reason = model.name + " does not fit in memory on any GPU type of the cluster at any TP and pipeline depth";
    else if (stopped)
      result.reason = "budget exhausted after " + std::to_string(result.evaluations) + " simulator evaluations (" +
                      std::to_string(result.own_model_evaluations) + " own-model) before a feasible plan";
    else if (use_sim && sim_oom > 0)
      result.reason = "every Sailor candidate ran out of memory in the simulator (" + std::to_string(sim_oom) + " simulated)";
    else
      result.reason = "no Sailor configuration (even layer split, D replicas per stage) fits the cluster";
    return timer.finish(result);
  }
  validate_plan(best->plan, cluster, model, global, "sailor");
  result.plan = std::move(best->plan);
  result.predicted_iteration_time_s = best->time;
  return timer.finish(result);
}

}  // namespace arachne::planner
