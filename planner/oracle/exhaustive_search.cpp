// The oracle's complete search (see exhaustive_search.h and README.md "Search").
#include "planner/oracle/exhaustive_search.h"

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <set>
#include <stdexcept>
#include <thread>
#include <tuple>
#include <vector>

#include "planner/common/plan_builder.h"
#include "planner/oracle/ep_variants.h"
#include "planner/oracle/lower_bound.h"
#include "sim/exec/simulate.h"
#include "sim/plan/plan_yaml.h"

namespace arachne::planner {
namespace {

using Clock = std::chrono::steady_clock;
constexpr double kInf = std::numeric_limits<double>::infinity();
// Candidates are collected up to this many, then simulated in ascending bound order.
constexpr size_t kBufferSize = 4096;
// Candidates simulated together (one per thread at a time); fixed, so the result is independent of threads.
constexpr size_t kBatchSize = 16;
// Enumeration caps: beyond them the search stops and reports itself incomplete.
constexpr long kMaxPipeShapes = 500000;
// Structures listed for the best-first order (memory); beyond, the listed ones are searched and the search is
// incomplete.
constexpr size_t kMaxStructures = 10000000;
constexpr long kMaxOptionsPerShape = 2000000;
constexpr long kMaxCachedOptions = 5000000;
// Where the topology does not allow placement-free floors (LowerBound::placement_free), the reduction lift
// takes the least bucket floor over a structure's placement classes when it has at most
// this many (beyond, no lift: the bounds stay admissible, only weaker; each class costs one pass over the
// buckets per layout of cuts, member sets already seen are looked up), and keeps this many layouts' lifted
// option sets.
constexpr size_t kMaxLiftPlacements = 8192;
// Placements enumerated to find a structure's classes (beyond: no classes - every placement is emitted, and
// there is no lift), and structures' classes kept.
constexpr long kMaxClassPlacements = 50000;
constexpr size_t kMaxClassCache = 20000;
constexpr size_t kMaxLiftedLayouts = 4096;
constexpr long kMaxLiftedOptions = 1000000;
// Micro-batch sizes whose count the structure-level caps couple to them (micro_batch_caps): up to this over
// the layers squared (each size costs dynamic programmes over the stages and the L^2 / 2 layer ranges: the
// 8-layer model 144, all of G = 32; gpt3-1.3b's 24 layers 16). Larger sizes keep the decoupled caps - a cost
// limit: the bound stays admissible, only weaker for them.
constexpr long kCoupledSizeBudget = 9216;
const Recompute kRecompute[3] = {Recompute::None, Recompute::Selective, Recompute::Full};

// A stage: tp and the number of TP groups of each node group (types may mix; groups listed by node group).
struct StageShape {
  int tp = 1;
  std::vector<int> groups;    // per node group
  std::vector<int> group_ng;  // node group of each TP group, in order
};

struct PipeShape {
  std::vector<int> stages;  // stage shape ids
  std::vector<int> gpus;    // per node group
};

// One pipeline's choices: micro-batch size and count, layer cuts, integer samples per TP group.
struct PipeOption {
  int b = 1, m = 1;
  std::vector<int> cuts;                  // stages + 1
  std::vector<std::vector<int>> samples;  // per stage, per group
  double bound = 0;
  int n() const { return b * m; }
};

struct Candidate {
  double bound = 0;
  long seq = 0;
  Plan plan;
};

class Search {
 public:
  Search(const PlanRequest& r, long global, const ExhaustiveLimits& lim, Incumbent& inc)
      : req_(r), cluster_(*r.cluster), model_(*r.model), G_(global), L_(r.model->layers), lim_(lim), inc_(inc),
        lb_(cluster_, model_, r.topo), start_(Clock::now()) {
    lb_.allow_placement_free(lim.spread_floors);
  }

  ExhaustiveStats run() {
    describe_cluster();
    enumerate_stage_shapes();
    enumerate_pipe_shapes();
    size_shape_caches();
    if (!stop_) enumerate_structures();
    if (!stop_) flush();
    stats_.complete = !stop_;
    return stats_;
  }

 private:
  // ------------------------------------------------------------------ cluster and shapes
  void describe_cluster() {
    const int NG = static_cast<int>(cluster_.groups.size());
    ng_gpus_.assign(NG, 0);
    ng_max_node_.assign(NG, 0);
    const int per_leaf = std::max(1, cluster_.network.nodes_per_leaf);
    std::map<std::tuple<int, int, int>, int> classes;
    for (const Node& n : cluster_.nodes) {
      ng_gpus_[n.group] += n.gpus;
      ng_max_node_[n.group] = std::max(ng_max_node_[n.group], n.gpus);
      // Interchangeable nodes: same node group (GPU type, fabric, NICs), same leaf switch, same GPU count.
      node_class_.push_back(classes.emplace(std::make_tuple(n.group, n.id / per_leaf, n.gpus), classes.size()).first->second);
    }
  }

  bool tp_ok(int ng, int tp) const {
    return tp <= ng_max_node_[ng] && (model_.heads % tp == 0) && (model_.kv_heads <= 0 || model_.kv_heads % tp == 0);
  }
  int groups_cap(int ng, int tp) const {
    int c = 0;
    for (const Node& n : cluster_.nodes)
      if (n.group == ng) c += n.gpus / tp;
    return c;
  }

  void enumerate_stage_shapes() {
    const int NG = static_cast<int>(cluster_.groups.size());
    int max_tp = 1;
    for (int ng = 0; ng < NG; ++ng) max_tp = std::max(max_tp, ng_max_node_[ng]);
    for (int tp = 1; tp <= max_tp; tp *= 2) {
      std::vector<int> cap(NG, 0), cnt(NG, 0);
      for (int ng = 0; ng < NG; ++ng) cap[ng] = tp_ok(ng, tp) ? groups_cap(ng, tp) : 0;
      std::function<void(int)> rec = [&](int ng) {
        if (ng == NG) {
          StageShape s;
          s.tp = tp;
          s.groups = cnt;
          for (int k = 0; k < NG; ++k)
            for (int c = 0; c < cnt[k]; ++c) s.group_ng.push_back(k);
          if (!s.group_ng.empty()) stage_shapes_.push_back(std::move(s));
          return;
        }
        for (int c = 0; c <= cap[ng]; ++c) {
          cnt[ng] = c;
          rec(ng + 1);
        }
        cnt[ng] = 0;
      };
      rec(0);
    }
  }

  // Every sequence of stage shapes (1..layers stages) within the GPUs of each node group.
  void enumerate_pipe_shapes() {
    const int NG = static_cast<int>(cluster_.groups.size());
    std::vector<int> used(NG, 0), seq;
    std::function<void()> rec = [&]() {
      if (stop_) return;
      if (!seq.empty()) {
        pipe_shapes_.push_back({seq, used});
        if (static_cast<long>(pipe_shapes_.size()) > kMaxPipeShapes) return cut("more than " + std::to_string(kMaxPipeShapes) + " pipeline shapes");
      }
      if (static_cast<int>(seq.size()) == L_) return;
      for (int ss = 0; ss < static_cast<int>(stage_shapes_.size()); ++ss) {
        const StageShape& s = stage_shapes_[ss];
        bool fits = true;
        for (int ng = 0; ng < NG; ++ng) fits = fits && used[ng] + s.groups[ng] * s.tp <= ng_gpus_[ng];
        if (!fits) continue;
        for (int ng = 0; ng < NG; ++ng) used[ng] += s.groups[ng] * s.tp;
        seq.push_back(ss);
        rec();
        seq.pop_back();
        for (int ng = 0; ng < NG; ++ng) used[ng] -= s.groups[ng] * s.tp;
      }
    };
    rec();
  }

  // Every multiset of pipeline shapes within the GPUs (non-decreasing shape ids), searched best first: in
  // ascending structure_order, ties in lexicographic order of the shape ids. The order only decides how early a good incumbent
  // is found (every structure is still searched or pruned by a proof, and the order depends on the inputs
  // alone).
  void enumerate_structures() {
    const int NG = static_cast<int>(cluster_.groups.size());
    // Every structure found: its order key and its shape ids (ids_[first, first + count)), stored flat.
    struct Found {
      std::pair<double, long> order;
      std::uint32_t first = 0;
      std::uint32_t count = 0;
    };
    std::vector<Found> found;
    std::vector<int> ids_flat;
    // Shapes by the GPUs they take (few distinct vectors), each list ascending: a multiset is a non-decreasing
    // sequence of shape ids, extended only by shapes that fit in the GPUs left.
    std::map<std::vector<int>, std::vector<int>> by_gpus;
    for (int ps = 0; ps < static_cast<int>(pipe_shapes_.size()); ++ps) by_gpus[pipe_shapes_[ps].gpus].push_back(ps);
    std::vector<int> left = ng_gpus_, pipes;
    std::function<void(int)> rec = [&](int from) {
      tick();
      if (stop_) return;
      if (found.size() >= kMaxStructures) return;
      if (!pipes.empty() && pipes.size() <= static_cast<size_t>(G_)) {
        found.push_back({structure_order(pipes), static_cast<std::uint32_t>(ids_flat.size()), static_cast<std::uint32_t>(pipes.size())});
        ids_flat.insert(ids_flat.end(), pipes.begin(), pipes.end());
      }
      for (const auto& [gpus, ids] : by_gpus) {
        bool fits = true;
        for (int ng = 0; ng < NG; ++ng) fits = fits && gpus[ng] <= left[ng];
        if (!fits) continue;
        for (auto it = std::lower_bound(ids.begin(), ids.end(), from); it != ids.end() && !stop_; ++it) {
          for (int ng = 0; ng < NG; ++ng) left[ng] -= gpus[ng];
          pipes.push_back(*it);
          rec(*it);
          pipes.pop_back();
          for (int ng = 0; ng < NG; ++ng) left[ng] += gpus[ng];
        }
      }
    };
    rec(0);
    if (stop_) return;
    if (found.size() < kMaxStructures) stats_.space_structures = static_cast<long>(found.size());
    // By order, then by shape ids (lexicographic).
    std::sort(found.begin(), found.end(), [&](const Found& a, const Found& b) {
      if (a.order != b.order) return a.order < b.order;
      return std::lexicographical_compare(ids_flat.begin() + a.first, ids_flat.begin() + a.first + a.count,
                                          ids_flat.begin() + b.first, ids_flat.begin() + b.first + b.count);
    });
    for (const Found& f : found) {
      if (stop_) return;
      search_structure(std::vector<int>(ids_flat.begin() + f.first, ids_flat.begin() + f.first + f.count));
    }
    if (found.size() >= kMaxStructures) cut("more than " + std::to_string(kMaxStructures) + " structures");
  }

  // The order of the search (a heuristic, not a bound): the global batch over the summed speed of the
  // structure's GPUs, each processing whole samples at its per-sample floor (the fastest recompute level),
  // then fewer stages in all (fewer bubbles and transfers).
  std::pair<double, long> structure_order(const std::vector<int>& pipes) {
    double best = kInf;
    long stages = 0;
    for (const int ps : pipes)
      if (!may_fit(ps)) return {kInf, 0};  // proven out of memory when searched
    for (const int ps : pipes) stages += static_cast<long>(pipe_shapes_[ps].stages.size());
    for (int rc = 0; rc < 3; ++rc) {
      double speed = 0;
      for (const int ps : pipes)
        for (const int ss : pipe_shapes_[ps].stages) {
          const StageShape& st = stage_shapes_[ss];
          for (const int ng : st.group_ng) {
            const std::vector<double>& pre = floor_prefix(ng, st.tp, rc);
            speed += 1 / (pre[L_] + pre[L_ + 1] + pre[L_ + 2]);
          }
        }
      best = std::min(best, static_cast<double>(G_) / speed);
    }
    return {best, stages};
  }

  // ------------------------------------------------------------------ one structure
  void search_structure(const std::vector<int>& pipes) {
    ++stats_.structures;
    for (const int ps : pipes)
      if (!may_fit(ps)) {
        ++stats_.proven_oom;
        return;
      }
    // The work bound alone (no placement needed) drops most structures: no recompute level leaves a split.
    bool some_split = false;
    for (int rc = 0; rc < 3 && !some_split; ++rc) {
      std::map<int, std::pair<long, long>> range;
      some_split = sample_ranges(pipes, rc, /*zero1=*/true, &range);  // no optimizer step: holds for both
    }
    if (!some_split) {
      ++stats_.pruned_by_bound;
      return;
    }
    if (!has_placement(pipes)) return;
    const bool one_stage = std::all_of(pipes.begin(), pipes.end(), [&](int ps) { return pipe_shapes_[ps].stages.size() == 1; });
    collect_placement_classes(pipes, one_stage);
    for (const bool zero1 : {false, true}) {
      // Pipelines of one stage only: the reduction's buckets and holders are the structure's own, so options
      // are bounded with their reduction tail as they are generated (pipe_options).
      option_floor_.reset();
      if (one_stage && lifting_) {
        option_floor_ = lift_floor(layout_plan(pipes, std::vector<const PipeOption*>(pipes.size()), zero1));
        ++floor_tag_;
      }
      for (int rc = 0; rc < 3 && !stop_; ++rc) {
        std::map<int, std::pair<long, long>> range;
        if (!sample_ranges(pipes, rc, zero1, &range)) {
          ++stats_.pruned_by_bound;
          continue;
        }
        std::map<int, const OptionSet*> options;
        bool empty = false;
        for (const int ps : pipes) {
          if (options.count(ps)) continue;
          options[ps] = &option_set(ps, rc, zero1, range[ps].first, range[ps].second);
          if (stop_) return;
          empty = empty || options[ps]->opts.empty();
        }
        if (!empty) combine(pipes, options, rc, zero1);
      }
    }
    option_floor_.reset();
    trim_option_cache();
  }

  // The per-pipeline-shape caches, indexed by shape (and recompute level, ZeRO-1): every structure looks its
  // shapes up in them several times.
  void size_shape_caches() {
    const size_t P = pipe_shapes_.size();
    const double unset = std::numeric_limits<double>::quiet_NaN();  // equal to no incumbent
    may_fit_.assign(P, -1);
    rate_.assign(P * 3, unset);
    stage_rates_.clear();
    stage_rates_.resize(P * 3);
    sample_caps_.assign(P * 6, {unset, G_});
    micro_caps_.assign(P * 6, {unset, std::vector<long>()});
  }
  static size_t zkey(int ps, int rc, bool zero1) { return (static_cast<size_t>(ps) * 3 + rc) * 2 + (zero1 ? 1 : 0); }

  // Work bound: a pipeline of shape ps taking n samples has a worker busy for at least n x rate(ps) (every
  // sample passes every layer on some group, at no less than the least per-sample cost of that layer on the
  // pipeline's groups; the busiest of its W workers carries at least 1/W of it).
  double sample_rate(int ps, int rc) {
    double& cached = rate_[static_cast<size_t>(ps) * 3 + rc];
    if (!std::isnan(cached)) return cached;
    std::vector<double> least(L_ + 2, kInf);
    int workers = 0;
    for (const int ss : pipe_shapes_[ps].stages) {
      const StageShape& st = stage_shapes_[ss];
      workers += static_cast<int>(st.group_ng.size());
      for (const int ng : st.group_ng) {
        const std::vector<double>& f = lb_.per_sample_floor(ng, st.tp, kRecompute[rc], static_cast<int>(G_));
        for (int l = 0; l < L_ + 2; ++l) least[l] = std::min(least[l], f[l]);
      }
    }
    const double work = std::accumulate(least.begin(), least.end(), 0.0);
    return cached = work / workers * (1 - 1e-9);
  }

  // Per stage of pipeline shape ps, its groups' (node group, tp), as the pipeline bounds of lower_bound.h take them.
  std::vector<std::vector<std::pair<int, int>>> stage_groups(int ps) const {
    std::vector<std::vector<std::pair<int, int>>> stages;
    for (const int ss : pipe_shapes_[ps].stages) {
      stages.emplace_back();
      for (const int ng : stage_shapes_[ss].group_ng) stages.back().emplace_back(ng, stage_shapes_[ss].tp);
    }
    return stages;
  }

  // The stage water-filling bounds of pipeline shape ps (PipelineRates), cached.
  const PipelineRates& stage_rates(int ps, int rc) {
    std::unique_ptr<PipelineRates>& cached = stage_rates_[static_cast<size_t>(ps) * 3 + rc];
    if (cached) return *cached;
    const std::vector<std::vector<std::pair<int, int>>> stages = stage_groups(ps);
    cached = std::make_unique<PipelineRates>(lb_, stages, kRecompute[rc], L_, static_cast<int>(G_));
    return *cached;
  }
  // The most samples a pipeline of shape ps can take with each of its groups ending below the incumbent, by
  // the groups' size-aware work bounds (pipeline_sample_cap, lower_bound.h). Cached until the incumbent changes.
  long sample_cap(int ps, int rc, bool zero1) {
    const double T = inc_.bound();
    if (!std::isfinite(T)) return G_;
    std::pair<double, long>& cached = sample_caps_[zkey(ps, rc, zero1)];
    if (cached.first == T) return cached.second;
    const std::vector<std::vector<std::pair<int, int>>> stages = stage_groups(ps);
    cached = {T, pipeline_sample_cap(lb_, stages, kRecompute[rc], zero1, L_, G_, T)};
    return cached.second;
  }
  // For each micro-batch size b, the most micro-batches a pipeline of shape ps can take below the incumbent
  // (micro_batch_caps, lower_bound.h), within its sample cap. Cached until the incumbent changes; the
  // incumbent only improves, so the caps at an earlier one bound the new ones.
  const std::vector<long>& micro_caps(int ps, int rc, bool zero1) {
    const double T = inc_.bound();
    std::pair<double, std::vector<long>>& cached = micro_caps_[zkey(ps, rc, zero1)];
    if (cached.first == T) return cached.second;
    const std::vector<std::vector<std::pair<int, int>>> stages = stage_groups(ps);
    const std::vector<long>* earlier = !std::isfinite(cached.first) ? nullptr : &cached.second;  // unset: NaN
    std::vector<long> caps =
        micro_batch_caps(lb_, stages, kRecompute[rc], zero1, L_, sample_cap(ps, rc, zero1), T, earlier,
                         std::max(1L, kCoupledSizeBudget / (static_cast<long>(L_) * L_)));
    cached = {T, std::move(caps)};
    return cached.second;
  }
  // The sample counts n <= most a pipeline of shape ps can take (n = m b with m <= micro_caps[b]), as runs
  // [first, last] of consecutive counts.
  std::vector<std::pair<long, long>> admitted_samples(int ps, int rc, bool zero1, long most) {
    const std::vector<long>& caps = micro_caps(ps, rc, zero1);
    most = std::min(most, static_cast<long>(caps.size()) - 1);
    std::vector<char> ok(static_cast<size_t>(std::max(0L, most)) + 1, 0);
    for (long b = 1; b <= most; ++b)
      for (long m = 1; m <= caps[b] && m * b <= most; ++m) ok[m * b] = 1;
    std::vector<std::pair<long, long>> runs;
    for (long n = 1; n <= most; ++n)
      if (ok[n]) {
        if (!runs.empty() && runs.back().second == n - 1) runs.back().second = n;
        else runs.emplace_back(n, n);
      }
    return runs;
  }
  // Whether the global batch is a sum of one count from each pipeline's runs (a subset-sum over bit sets).
  bool batch_reachable(const std::vector<std::vector<std::pair<long, long>>>& runs) const {
    const size_t words = static_cast<size_t>(G_) / 64 + 1;
    using Bits = std::vector<std::uint64_t>;
    auto shift_or = [&](Bits& dst, const Bits& src, long by) {  // dst |= src << by, bits beyond G dropped
      const size_t w = static_cast<size_t>(by) / 64, r = static_cast<size_t>(by) % 64;
      for (size_t i = words; i-- > w;) {
        std::uint64_t v = src[i - w] << r;
        if (r && i > w) v |= src[i - w - 1] >> (64 - r);
        dst[i] |= v;
      }
    };
    Bits reach(words, 0);
    reach[0] = 1;
    for (const auto& pipeline : runs) {
      Bits next(words, 0);
      for (const auto& [first, last] : pipeline) {
        Bits y(words, 0);
        shift_or(y, reach, first);
        for (long span = 1; span <= last - first;) {  // y covers shifts first..first + span - 1
          const long step = std::min(span, last - first + 1 - span);
          Bits z = y;
          shift_or(y, z, step);
          span += step;
        }
        for (size_t i = 0; i < words; ++i) next[i] |= y[i];
      }
      reach = std::move(next);
    }
    return (reach[static_cast<size_t>(G_) / 64] >> (G_ % 64)) & 1;
  }
  // The work bound of a pipeline of shape ps per sample it takes: the larger of the two above.
  double pipeline_rate(int ps, int rc) { return std::max(sample_rate(ps, rc), stage_rates(ps, rc).pipeline_rate()); }
  static double work_bound(double n, double rate, int m) { return PipelineRates::work_bound(n, rate, m); }

  // Samples each pipeline shape may take: at most what its work bound keeps below the incumbent, at least
  // what the others cannot take. False when no split of the global batch fits these ranges: the plan's time
  // is at least max_i n_i x rate_i (pipeline_rate, at most n_i micro-batches), and a split with every
  // pipeline below the incumbent has n_i <= hi_i, so it exists only when sum_i hi_i >= G (the min over splits
  // of the max of the pipelines' bounds, for bounds that grow with the samples); and n_i = m_i b_i with
  // m_i <= micro_caps[b_i], so it exists only when such counts, one per pipeline, sum to G.
  bool sample_ranges(const std::vector<int>& pipes, int rc, bool zero1, std::map<int, std::pair<long, long>>* range) {
    const int P = static_cast<int>(pipes.size());
    const double T = inc_.bound();
    std::vector<long> hi(P);
    long total_hi = 0;
    for (int i = 0; i < P; ++i) {
      const double rate = pipeline_rate(pipes[i], rc);
      long h = G_ - (P - 1);
      if (std::isfinite(T) && rate > 0) {
        const double cap = std::floor(T / rate) + 1;
        if (cap < static_cast<double>(h)) h = static_cast<long>(cap);
        while (h >= 1 && work_bound(static_cast<double>(h), rate, static_cast<int>(h)) >= T) --h;
      }
      hi[i] = h;
      total_hi += h;
    }
    // The size-aware caps (a dynamic programme per pipeline shape) only where the rates leave a split.
    for (int i = 0; i < P && total_hi >= G_; ++i) {
      const long h = std::min(hi[i], sample_cap(pipes[i], rc, zero1));
      total_hi -= hi[i] - h;
      hi[i] = h;
    }
    if (total_hi < G_) return false;
    // Each pipeline's micro-batch size and count together: only counts n = m b with m <= micro_caps[b] are
    // admitted, and one from each pipeline must sum to the global batch.
    std::vector<std::vector<std::pair<long, long>>> runs(P);
    total_hi = 0;
    for (int i = 0; i < P; ++i) {
      runs[i] = admitted_samples(pipes[i], rc, zero1, hi[i]);
      if (runs[i].empty()) return false;
      hi[i] = runs[i].back().second;
      total_hi += hi[i];
    }
    if (total_hi < G_ || !batch_reachable(runs)) return false;
    for (int i = 0; i < P; ++i) {
      const long lo = std::max(1L, G_ - (total_hi - hi[i]));
      if (lo > hi[i]) return false;
      (*range)[pipes[i]] = {lo, hi[i]};
    }
    return true;
  }

  // Every split of b samples over the stage's groups in integers >= 1, up to the order of groups of one node
  // group (non-increasing there): the bound depends only on which samples each GPU type gets. Every order is
  // restored in emit() - a group's position in the stage fixes its sample interval, hence which groups of
  // the neighbouring stages it exchanges activations with. Group by group: `enter(i, v)` is asked before
  // group i takes v samples (false: no split continues from there), `leave(i)` after; f receives each split.
  // room[i]: the most samples group i can take (a proof that more cannot be below the incumbent): a split
  // whose later groups cannot hold what is left is not continued.
  void share_splits(const StageShape& s, int b, const std::vector<int>& room, const std::function<bool(int, int)>& enter,
                    const std::function<void(int)>& leave, const std::function<void(const std::vector<int>&)>& f) {
    const int g = static_cast<int>(s.group_ng.size());
    if (g > b) return;
    std::vector<long> suffix(g + 1, 0);
    for (int i = g - 1; i >= 0; --i) suffix[i] = suffix[i + 1] + room[i];
    // run_end[i]: one past the last group of i's node group (groups are listed by node group).
    std::vector<int> x(g, 0), run_end(g, g);
    for (int i = g - 2; i >= 0; --i) run_end[i] = s.group_ng[i + 1] == s.group_ng[i] ? run_end[i + 1] : i + 1;
    std::function<void(int, int)> rec = [&](int i, int left) {
      if (stop_) return;
      if (i == g) {
        if (left == 0) f(x);
        return;
      }
      if (suffix[i] < left) {
        ++stats_.pruned_by_bound;
        return;
      }
      const bool same = i > 0 && s.group_ng[i] == s.group_ng[i - 1];
      int hi = std::min(left - (g - 1 - i), room[i]);
      if (same) hi = std::min(hi, x[i - 1]);
      // The last group takes what is left; when i's run ends the stage, its r groups (non-increasing) hold
      // everything left, so the first of them takes at least left / r.
      int lo = i == g - 1 ? left : 1;
      if (run_end[i] == g) lo = std::max(lo, (left + (g - i) - 1) / (g - i));
      for (int v = hi; v >= lo; --v) {
        if (!enter(i, v)) continue;
        x[i] = v;
        rec(i + 1, left - v);
        leave(i);
      }
    };
    rec(0, b);
  }

  // The most samples per micro-batch each group of a stage holding layers [a, e) can take with at least m
  // micro-batches: a group taking v runs m v samples through those layers, each at no less than their least
  // per-sample cost on its GPU type and tp (LowerBound::per_sample_floor), so it ends no earlier than
  // work_bound(m v, that rate, m), which must stay below the incumbent.
  std::vector<int> group_room(const StageShape& st, int b, int m, int a, int e, int rc) {
    std::vector<int> room(st.group_ng.size(), b);
    const double T = inc_.bound();
    if (!std::isfinite(T)) return room;
    for (size_t g = 0; g < st.group_ng.size(); ++g) {
      const std::vector<double>& pre = floor_prefix(st.group_ng[g], st.tp, rc);
      const double rate = pre[e] - pre[a] + (a == 0 ? pre[L_ + 1] : 0.0) + (e == L_ ? pre[L_ + 2] : 0.0);
      if (rate <= 0) continue;
      const double most = std::floor(T / (m * rate)) + 1;
      long v = most >= b ? b : static_cast<long>(most);
      while (v >= 1 && work_bound(static_cast<double>(m) * v, rate, m) >= T) --v;
      room[g] = static_cast<int>(std::max(0L, v));
    }
    return room;
  }
  // The bound of a stage's (micro-batch size, count) before its splits are enumerated. A split's groups are
  // admitted one by one, each on its own bound (a group's term of pipeline_lower_bound depends only on its
  // own samples and the earlier stages), so the best split is no faster than the incumbent unless every
  // group g can take some v_g it admits with sum_g v_g = b; in particular unless sum_g (the largest v it
  // admits) >= b - the water level of the groups' exact per-group bounds (time as a function of samples,
  // with the embedding, head, optimizer step and reduction tail; not assumed monotone: every v below the
  // caps `room` and `fit_cap` - memory_cap - is tried from the top). Returns each group's largest admitted v
  // (0: none); groups of one node group share it. share_splits then prunes a split whose later groups cannot
  // hold what is left.
  std::vector<int> split_room(const StageShape& st, int b, std::vector<int> room, const std::function<int(int)>& fit_cap,
                              const std::function<bool(int, int, bool)>& admit, const std::function<void(int)>& leave) {
    std::map<int, int> by_node_group;
    for (size_t g = 0; g < room.size(); ++g) {
      auto [it, fresh] = by_node_group.try_emplace(st.group_ng[g], 0);
      if (fresh) {
        int v = std::min({room[g], b, fit_cap(static_cast<int>(g))});
        while (v >= 1 && !admit(static_cast<int>(g), v, false)) --v;
        if (v >= 1) leave(static_cast<int>(g));
        it->second = v;
      }
      room[g] = it->second;
    }
    return room;
  }

  // The most samples per micro-batch a TP group of node group ng and tp holding layers [a, e) can take with
  // `in_flight` micro-batches in flight before it is proven out of memory (0: none; at most G). Memory grows
  // with the samples - stage_memory's activation terms are linear in them with non-negative coefficients
  // (sim/model/memory.cpp) - so the largest v that fits (a binary search) caps every v that fits. Cached.
  int memory_cap(int ng, int tp, int a, int e, int rc, int in_flight, bool zero1) {
    const auto key = std::make_tuple(ng, tp, a, e, rc * 2 + (zero1 ? 1 : 0), in_flight);
    auto it = memory_caps_.find(key);
    if (it != memory_caps_.end()) return it->second;
    auto fits = [&](long v) { return !lb_.out_of_memory(ng, tp, static_cast<double>(v), a, e, kRecompute[rc], in_flight, zero1, 0); };
    long lo = 0, hi = G_;  // fits(lo) (0: vacuously); the largest v that fits is <= hi
    if (fits(hi)) lo = hi;
    while (hi - lo > 1) {
      const long mid = lo + (hi - lo) / 2;
      (fits(mid) ? lo : hi) = mid;
    }
    return memory_caps_[key] = static_cast<int>(lo);
  }

  // Prefix sums over layers of per_sample_floor, then the embedding's and the head's (size L + 3).
  const std::vector<double>& floor_prefix(int ng, int tp, int rc) {
    const auto key = std::make_tuple(ng, tp, rc);
    auto it = floor_prefix_.find(key);
    if (it != floor_prefix_.end()) return it->second;
    const std::vector<double>& f = lb_.per_sample_floor(ng, tp, kRecompute[rc], static_cast<int>(G_));
    std::vector<double> pre(L_ + 3, 0.0);
    for (int l = 0; l < L_; ++l) pre[l + 1] = pre[l] + f[l];
    pre[L_ + 1] = f[L_];
    pre[L_ + 2] = f[L_ + 1];
    return floor_prefix_.emplace(key, std::move(pre)).first->second;
  }

  // Every option of pipeline shape ps whose bound is below the incumbent and which is not proven out of
  // memory. A partial pipeline (its first stages chosen) is dropped once its own workers' bound reaches the
  // incumbent: the bound of the whole pipeline is at least that (more micro-batches only add).
  std::vector<PipeOption> pipe_options(int ps, int rc, bool zero1, long n_lo, long n_hi) {
    if (!may_fit(ps)) {
      ++stats_.proven_oom;
      return {};
    }
    const PipeShape& shape = pipe_shapes_[ps];
    const int S = static_cast<int>(shape.stages.size());
    const Recompute r = kRecompute[rc];
    std::vector<PipeOption> out;
    std::vector<std::vector<GroupTimes>> times;
    const PipelineRates& rates = stage_rates(ps, rc);
    PipeOption cur;
    cur.cuts.assign(1, 0);
    // At most micro_caps[b] micro-batches of b samples (the options are generated under the incumbent the
    // caps were computed for, and n_hi is within them).
    const std::vector<long> caps = micro_caps(ps, rc, zero1);
    for (int b = 1; b <= n_hi && !stop_; ++b) {
      cur.b = b;
      const long most = b < static_cast<long>(caps.size()) ? caps[b] : 0;
      const int m_lo = static_cast<int>((n_lo + b - 1) / b), m_hi = static_cast<int>(std::min(n_hi / b, most));
      if (m_lo > m_hi) continue;
      std::function<void(int)> rec = [&](int k) {
        tick();
        if (stop_) return;
        if (k == S) {
          add_options(shape, r, zero1, m_lo, m_hi, times, cur, out);
          return;
        }
        const StageShape& st = stage_shapes_[shape.stages[k]];
        const int begin = cur.cuts.back();
        for (int e = begin + 1; e <= L_ - (S - 1 - k); ++e) {
          if (k == S - 1 && e != L_) continue;
          // This stage's work and the least the later stages' can be, for at least m_lo x b samples.
          const double n_min = static_cast<double>(m_lo) * b;
          if (work_bound(n_min, std::max(rates.rate(k, begin, e), rates.rest(k + 1, e)), m_lo) >= inc_.bound()) {
            ++stats_.pruned_by_bound;
            continue;
          }
          // Group by group: a partial pipeline whose bound reaches the incumbent ends the branch (its bound as a
          // partial pipeline, PipelineBoundOptions::complete = false, is at most each term's final value: the
          // round trip through later stages counts only the stages already complete, and the last stage's
          // groups' terms do not depend on its other groups); samples proven out of memory are above
          // split_room's caps.
          times.emplace_back();
          // Group g may take v samples (no more than split_room's memory cap): its own bound
          // (pipeline_lower_bound's term for it: the earlier stages' are below the incumbent, and its stage's
          // other groups do not enter it) is below the incumbent; then its times stay on `times` until leave().
          auto fit_cap = [&](int g) { return memory_cap(st.group_ng[g], st.tp, begin, e, rc, std::min(S - k, m_lo), zero1); };
          auto admit = [&](int g, int v, bool count) {
            tick();
            const int ng = st.group_ng[g];
            times.back().push_back(lb_.group_times(ng, st.tp, v, begin, e, r, zero1));
            if (option_floor_ && S == 1)  // the tail does not depend on m: m_lo's serves every m
              times.back().back().tail_s = lb_.reduction_tail(*option_floor_, {ng, st.tp, static_cast<double>(v)}, begin,
                                                              e, r, times.back().back(), 0.0, m_lo, 0);
            if (pipeline_lower_bound(times, m_lo, {.complete = false}) >= inc_.bound()) {
              if (count) ++stats_.pruned_by_bound;
              times.back().pop_back();
              return false;
            }
            return true;
          };
          auto enter = [&](int g, int v) { return admit(g, v, true); };
          auto leave = [&](int) { times.back().pop_back(); };
          const std::vector<int> room = split_room(st, b, group_room(st, b, m_lo, begin, e, rc), fit_cap, admit, leave);
          if (std::accumulate(room.begin(), room.end(), 0L) < b) {
            ++stats_.pruned_by_bound;  // no split of the micro-batch over the stage's groups is below the incumbent
            times.pop_back();
            continue;
          }
          share_splits(st, b, room, enter, leave, [&](const std::vector<int>& x) {
            cur.cuts.push_back(e);
            cur.samples.push_back(x);
            rec(k + 1);
            cur.cuts.pop_back();
            cur.samples.pop_back();
          });
          times.pop_back();
        }
      };
      rec(0);
      if (static_cast<long>(out.size()) > kMaxOptionsPerShape) cut("more than " + std::to_string(kMaxOptionsPerShape) + " options of one pipeline shape");
    }
    return out;
  }

  // False when no plan with this pipeline shape fits in memory: no contiguous partition fits even at its
  // smallest footprint (one sample per TP group, full recompute, one micro-batch in flight, ZeRO-1 optimizer
  // state left out); memory only grows with samples, lighter recompute, activations in flight and less
  // sharding.
  bool may_fit(int ps) {
    signed char& cached = may_fit_[ps];
    if (cached >= 0) return cached != 0;
    const PipeShape& shape = pipe_shapes_[ps];
    const int S = static_cast<int>(shape.stages.size());
    std::vector<std::vector<char>> reach(S + 1, std::vector<char>(L_ + 1, 0));  // stages 0..k-1 cover [0, l)
    reach[0][0] = 1;
    for (int k = 0; k < S; ++k) {
      const StageShape& st = stage_shapes_[shape.stages[k]];
      for (int b = 0; b < L_; ++b) {
        if (!reach[k][b]) continue;
        for (int e = b + 1; e <= L_; ++e) {
          bool fits = true;
          for (size_t g = 0; g < st.group_ng.size() && fits; ++g)
            fits = !lb_.out_of_memory(st.group_ng[g], st.tp, 1, b, e, Recompute::Full, 1, true, 0);
          if (!fits) break;  // longer ranges need more memory
          reach[k + 1][e] = 1;
        }
      }
    }
    cached = reach[S][L_] != 0 ? 1 : 0;
    return cached != 0;
  }

  // The micro-batch counts of a complete partition: every m whose bound is below the incumbent and whose
  // activations (1F1B: min(S - k, m) micro-batches in flight on stage k) are not proven out of memory.
  void add_options(const PipeShape& shape, Recompute r, bool zero1, int m_lo, int m_hi,
                   const std::vector<std::vector<GroupTimes>>& times, PipeOption& cur, std::vector<PipeOption>& out) {
    const int S = static_cast<int>(shape.stages.size());
    for (int m = m_lo; m <= m_hi; ++m) {
      const double bound = pipeline_lower_bound(times, m);
      if (bound >= inc_.bound()) {
        ++stats_.pruned_by_bound;
        break;  // grows with m
      }
      bool oom = false;
      for (int k = 0; k < S && !oom && m > m_lo && m <= S - k; ++k) {
        const StageShape& st = stage_shapes_[shape.stages[k]];
        for (size_t g = 0; g < st.group_ng.size() && !oom; ++g)
          oom = lb_.out_of_memory(st.group_ng[g], st.tp, cur.samples[k][g], cur.cuts[k], cur.cuts[k + 1], r, m, zero1, 0);
      }
      if (oom) {
        ++stats_.proven_oom;
        break;  // activations in flight only grow with m
      }
      cur.m = m;
      cur.bound = bound;
      out.push_back(cur);
    }
  }

  // The options of a pipeline shape for a range of samples, sorted by samples then bound, with the index of
  // the first option of each sample count. Cached: the incumbent only improves, so options kept earlier are a
  // superset of those that would be kept now (combine() checks every bound against the current incumbent).
  struct OptionSet {
    std::vector<PipeOption> opts;
    std::vector<int> start;  // start[n]: first option with at least n samples (size G + 2)
    long max_n = 0;
  };
  const OptionSet& option_set(int ps, int rc, bool zero1, long n_lo, long n_hi) {
    const auto key = std::make_tuple(ps, rc, zero1 ? 1 : 0, n_lo, n_hi, option_floor_ ? floor_tag_ : 0L);
    auto it = option_cache_.find(key);
    if (it != option_cache_.end()) return it->second;
    OptionSet set;
    set.opts = pipe_options(ps, rc, zero1, n_lo, n_hi);
    index_options(set);
    cached_options_ += static_cast<long>(set.opts.size());
    if (option_floor_) structure_keys_.push_back(key);
    return option_cache_.emplace(key, std::move(set)).first->second;
  }
  // The cache is trimmed between structures only (a structure holds pointers to its sets): the sets bounded
  // under one structure's floor are dropped after it, and everything when the cache holds too many options
  // (the search stays exact, only slower).
  void trim_option_cache() {
    for (const auto& key : structure_keys_) {
      auto it = option_cache_.find(key);
      if (it == option_cache_.end()) continue;
      cached_options_ -= static_cast<long>(it->second.opts.size());
      option_cache_.erase(it);
    }
    structure_keys_.clear();
    if (cached_options_ > kMaxCachedOptions) {
      option_cache_.clear();
      cached_options_ = 0;
    }
  }

  // Sorts a set's options by samples, then bound (stable), and indexes the first option of each sample count.
  void index_options(OptionSet& set) const {
    std::stable_sort(set.opts.begin(), set.opts.end(), [](const PipeOption& a, const PipeOption& b) {
      return a.n() < b.n() || (a.n() == b.n() && a.bound < b.bound);
    });
    set.start.assign(G_ + 2, static_cast<int>(set.opts.size()));
    for (int o = static_cast<int>(set.opts.size()) - 1; o >= 0; --o) set.start[set.opts[o].n()] = o;
    for (long n = G_; n >= 0; --n) set.start[n] = std::min(set.start[n], set.start[n + 1]);
    set.max_n = set.opts.empty() ? 0 : set.opts.back().n();
  }

  // Options of the pipelines with samples summing to the global batch; identical shapes take options in
  // non-decreasing index order (they are interchangeable up to listing order and placement, which is
  // enumerated in full). Each pipeline scans only the options whose samples leave the later pipelines
  // between one sample each and all they can take, and for each sample count only up to the first bound
  // that reaches the incumbent. Pipelines of several stages are chosen first: once their layer cuts are
  // fixed, so are the gradient reduction's segments and their holders (one-stage pipelines hold every
  // layer), and every option - theirs and the one-stage pipelines' still to be chosen - is bounded with its
  // reduction tail (lift()).
  void combine(const std::vector<int>& pipes, const std::map<int, const OptionSet*>& options, int rc, bool zero1) {
    const int P = static_cast<int>(pipes.size());
    std::vector<int> order;  // positions in pipes: several stages first, each group in pipes' order
    for (const bool multi : {true, false})
      for (int i = 0; i < P; ++i)
        if ((pipe_shapes_[pipes[i]].stages.size() > 1) == multi) order.push_back(i);
    const int multi = static_cast<int>(std::count_if(pipes.begin(), pipes.end(), [&](int ps) { return pipe_shapes_[ps].stages.size() > 1; }));
    std::vector<const OptionSet*> sets(P);
    for (int j = 0; j < P; ++j) sets[j] = options.at(pipes[order[j]]);
    std::vector<long> later_max(P + 1, 0);  // samples the pipelines after position j can take at most
    auto set_later_max = [&](int from) {
      for (int j = P - 1; j >= from; --j) later_max[j] = later_max[j + 1] + sets[j]->max_n;
    };
    set_later_max(0);
    const bool lifting = lifting_;
    lifted_.clear();
    lifted_options_ = 0;
    std::vector<int> chosen(P, 0);                  // per position: option index in sets[position]
    std::vector<const PipeOption*> picked(P, nullptr);  // per pipeline (pipes' order)
    std::function<void(int, long)> choose;  // position j takes each of its options, then rec(j + 1)
    std::function<void(int, long)> rec = [&](int j, long left) {
      tick();
      if (stop_) return;
      if (j == multi && lifting) {  // the later positions' sets and maxima hold for this branch only
        const std::vector<const OptionSet*> saved_sets = sets;
        const std::vector<long> saved_max = later_max;
        if (lift(pipes, options, order, picked, rc, zero1, sets)) {
          set_later_max(multi);
          choose(j, left);
        }
        sets = saved_sets;
        later_max = saved_max;
      } else {
        choose(j, left);
      }
    };
    choose = [&](int j, long left) {
      if (j == P) {
        if (left == 0) emit(pipes, picked, rc, zero1);
        return;
      }
      const OptionSet& set = *sets[j];
      const long lo = std::max(1L, left - later_max[j + 1]), hi = std::min(G_, left - (P - 1 - j));
      if (lo > hi) return;
      int first = set.start[lo];
      if (j > 0 && pipes[order[j - 1]] == pipes[order[j]]) first = std::max(first, chosen[j - 1]);
      const int last = set.start[hi + 1];
      for (int o = first; o < last; ++o) {
        if (set.opts[o].bound >= inc_.bound()) {  // so are the rest with these samples (sorted by bound)
          const int next = set.start[set.opts[o].n() + 1];
          stats_.pruned_by_bound += next - o;
          o = next - 1;
          continue;
        }
        chosen[j] = o;
        picked[order[j]] = &set.opts[o];
        rec(j + 1, left - set.opts[o].n());
      }
    };
    rec(0, G_);
  }

  // The reduction lift, once the pipelines of several stages have their options (picked; the one-stage ones
  // not yet): the reduction's buckets with their least floors over the structure's placements
  // (LowerBound::reduction_floor), then (1) false when a chosen option's bound with its reduction tail
  // (LowerBound::pipeline_bound) reaches the incumbent, (2) the one-stage pipelines' option sets in `sets`
  // replaced by those whose bound with the tail stays below it, sorted again by samples, then bound. Both
  // bounds are admissible for every plan of the structure with these cuts: pipeline_bound is at most
  // plan_bound's term for the pipeline on any of the placements.
  bool lift(const std::vector<int>& pipes, const std::map<int, const OptionSet*>& options, const std::vector<int>& order,
            const std::vector<const PipeOption*>& picked, int rc, bool zero1, std::vector<const OptionSet*>& sets) {
    const int P = static_cast<int>(pipes.size());
    std::vector<std::vector<int>> key;  // the cuts of every pipeline of several stages
    for (int i = 0; i < P; ++i)
      if (picked[i] && pipe_shapes_[pipes[i]].stages.size() > 1) key.push_back(picked[i]->cuts);
    auto it = lifted_.find(key);
    if (it == lifted_.end()) {
      if (lifted_.size() >= kMaxLiftedLayouts || lifted_options_ > kMaxLiftedOptions) {  // memory: start over
        lifted_.clear();
        lifted_options_ = 0;
      }
      it = lifted_.emplace(key, Lifted{}).first;
      it->second.floor = lift_floor(layout_plan(pipes, picked, zero1));
    }
    Lifted& lifted = it->second;
    const Recompute r = kRecompute[rc];
    auto after = [&](int i) { return lifted.floor.after.empty() ? nullptr : &lifted.floor.after[i]; };
    for (int i = 0; i < P; ++i)
      if (picked[i] && pipe_shapes_[pipes[i]].stages.size() > 1 &&
          lifted_bound(pipes[i], *picked[i], r, zero1, lifted.floor, after(i)) >= inc_.bound()) {
        ++stats_.pruned_by_bound;
        return false;
      }
    for (int j = 0; j < P; ++j) {
      const int ps = pipes[order[j]];
      if (pipe_shapes_[ps].stages.size() > 1) continue;
      const OptionSet* source = options.at(ps);
      auto [at, fresh] = lifted.sets.try_emplace(ps, OptionSet{});
      OptionSet& set = at->second;
      if (fresh) {
        // What follows the buckets, the least over the pipelines of this shape (they share the option set).
        const std::vector<std::vector<double>>* least = nullptr;
        std::vector<std::vector<double>> merged;
        for (int i = 0; i < P; ++i)
          if (pipes[i] == ps && after(i)) {
            if (!least) merged = *after(i);
            for (size_t k = 0; k < merged.size(); ++k)
              for (size_t g = 0; g < merged[k].size(); ++g) merged[k][g] = std::min(merged[k][g], (*after(i))[k][g]);
            least = &merged;
          }
        for (const PipeOption& o : source->opts) {
          tick();
          if (o.bound >= inc_.bound()) continue;
          PipeOption x = o;
          x.bound = std::max(o.bound, lifted_bound(ps, o, r, zero1, lifted.floor, least));
          if (x.bound >= inc_.bound()) {
            ++stats_.pruned_by_bound;
            continue;
          }
          set.opts.push_back(std::move(x));
        }
        lifted_options_ += static_cast<long>(set.opts.size());
        index_options(set);
      }
      sets[j] = &set;
    }
    return true;
  }

  double lifted_bound(int ps, const PipeOption& o, Recompute r, bool zero1, const LowerBound::ReductionFloor& floor,
                      const std::vector<std::vector<double>>* after) const {
    const std::vector<int>& stages = pipe_shapes_[ps].stages;
    std::vector<std::vector<LowerBound::LayoutGroup>> groups(stages.size());
    for (size_t k = 0; k < stages.size(); ++k) {
      const StageShape& st = stage_shapes_[stages[k]];
      for (size_t g = 0; g < st.group_ng.size(); ++g)
        groups[k].push_back({st.group_ng[g], st.tp, static_cast<double>(o.samples[k][g])});
    }
    return lb_.pipeline_bound(o.cuts, groups, o.m, r, zero1, floor, after);
  }

  // The reduction's buckets of a layout with their floors for the lift: the least over every spread of each
  // bucket's holders over the nodes when the topology allows (LowerBound::placement_free_floor), else the
  // least over the structure's placement classes.
  LowerBound::ReductionFloor lift_floor(const Plan& layout) const {
    if (lb_.placement_free()) return lb_.placement_free_floor(layout);
    return lb_.reduction_floor(layout, *lift_placements_);
  }

  // A plan with the structure's TP groups on the first placement, the picked cuts of the pipelines of several
  // stages and one stage of all layers for the others: what the reduction's buckets depend on.
  Plan layout_plan(const std::vector<int>& pipes, const std::vector<const PipeOption*>& picked, bool zero1) const {
    const std::vector<std::vector<GpuId>>& gpus = layout_gpus_;
    std::vector<PipelineSpec> specs;
    size_t gi = 0;
    for (size_t i = 0; i < pipes.size(); ++i) {
      const PipeShape& shape = pipe_shapes_[pipes[i]];
      PipelineSpec p;
      p.micro_batch = 1;
      p.micro_batches = 1;
      for (size_t k = 0; k < shape.stages.size(); ++k) {
        const StageShape& st = stage_shapes_[shape.stages[k]];
        StageSpec sp;
        sp.layer_begin = shape.stages.size() > 1 ? picked[i]->cuts[k] : 0;
        sp.layer_end = shape.stages.size() > 1 ? picked[i]->cuts[k + 1] : L_;
        for (size_t g = 0; g < st.group_ng.size(); ++g)
          sp.groups.push_back({gpus[gi++], st.tp, 1.0 / static_cast<double>(st.group_ng.size())});
        p.stages.push_back(std::move(sp));
      }
      specs.push_back(std::move(p));
    }
    Plan plan = build_plan(specs, cluster_, Recompute::None);
    plan.zero1 = zero1;
    return plan;
  }

  // ------------------------------------------------------------------ placements
  // The TP groups of a structure in listing order (pipeline, stage, group): node group and tp.
  std::vector<std::pair<int, int>> group_list(const std::vector<int>& pipes) const {
    std::vector<std::pair<int, int>> out;
    for (const int ps : pipes)
      for (const int ss : pipe_shapes_[ps].stages)
        for (const int ng : stage_shapes_[ss].group_ng) out.emplace_back(ng, stage_shapes_[ss].tp);
    return out;
  }

  // Every assignment of the groups to nodes of their node group with room, up to interchangeable nodes (an
  // unused node is taken only when it is the first unused one of its class); inside a node a group takes the
  // lowest free GPUs. f receives each group's GPUs; returning false stops.
  void placements(const std::vector<std::pair<int, int>>& groups,
                  const std::function<bool(const std::vector<std::vector<GpuId>>&)>& f) const {
    const int N = static_cast<int>(cluster_.nodes.size());
    std::vector<int> taken(N, 0);
    std::vector<std::vector<GpuId>> gpus(groups.size());
    bool go = true;
    std::function<void(size_t)> rec = [&](size_t i) {
      if (!go) return;
      if (i == groups.size()) {
        go = f(gpus);
        return;
      }
      const auto [ng, tp] = groups[i];
      std::set<int> fresh_classes;
      for (int n = 0; n < N && go; ++n) {
        const Node& node = cluster_.nodes[n];
        if (node.group != ng || node.gpus - taken[n] < tp) continue;
        if (taken[n] == 0 && !fresh_classes.insert(node_class_[n]).second) continue;
        gpus[i].clear();
        for (int k = 0; k < tp; ++k) gpus[i].push_back(node.first_gpu + taken[n] + k);
        taken[n] += tp;
        rec(i + 1);
        taken[n] -= tp;
      }
    };
    rec(0);
  }

  // The structure's placements up to what a dense model's gradient reduction can tell apart (one
  // representative per class, the first in enumeration order), when the enumeration takes at most
  // kMaxClassPlacements (cached per stage boundaries and groups):
  //  - in general, placements whose stages hold the same multiset of TP groups' GPU lists, stage by stage,
  //    have the same reduction floors: reduction_tails sees a placement only through them (a segment's
  //    holders are whole stages, a slice's members are sorted, the tied embedding spans a pipeline's first and
  //    last stages, ZeRO-1 gathers over a segment's holders). Without placement-free floors, the reduction
  //    lift takes the least floor over the classes when there are at most kMaxLiftPlacements of them (with
  //    them, structures of several stages need no classes and none are listed);
  //  - in a structure of one-stage pipelines every TP group holds every layer, and placements with the same
  //    multiset of GPU lists over the whole structure simulate alike (README "Symmetry": a group's tasks
  //    depend on its GPU type, tp and samples, not on which GPUs; no pipeline transfers; every bucket is
  //    reduced over sorted members once all holders have it), as do the orders of a stage's samples among
  //    its groups of one node group and tp (an order is a permutation of the groups' GPU lists). emit() then
  //    simulates one placement per class, with the samples in one order (emit_by_class_).
  void collect_placement_classes(const std::vector<int>& pipes, bool one_stage) {
    placements_list_.clear();
    lift_placements_ = nullptr;
    lifting_ = false;
    layout_gpus_.clear();
    emit_by_class_ = false;
    if (model_.moe || !req_.topo) return;
    if (lb_.placement_free()) {
      // The lift needs no classes; its layouts take the first placement's GPUs (only their node groups and
      // tp count). The classes still serve one-stage structures' emit().
      placements(group_list(pipes), [&](const std::vector<std::vector<GpuId>>& gpus) {
        layout_gpus_ = gpus;
        return false;
      });
      lifting_ = !layout_gpus_.empty();
      if (!one_stage) return;
    }
    std::vector<size_t> stage_end;  // one past the last group of each stage, in listing order
    for (const int ps : pipes)
      for (const int ss : pipe_shapes_[ps].stages)
        stage_end.push_back((stage_end.empty() ? 0 : stage_end.back()) + stage_shapes_[ss].group_ng.size());
    const std::vector<std::pair<int, int>> groups = group_list(pipes);
    const auto cache_key = std::make_pair(one_stage ? std::vector<size_t>{groups.size()} : stage_end, groups);
    auto cached = class_cache_.find(cache_key);
    if (cached == class_cache_.end()) {
      PlacementClasses pc;
      std::set<std::vector<std::vector<GpuId>>> seen;
      long visited = 0;
      placements(groups, [&](const std::vector<std::vector<GpuId>>& gpus) {
        if (++visited > kMaxClassPlacements) {
          pc.all = false;
          return false;
        }
        std::vector<std::vector<GpuId>> key = gpus;
        size_t a = 0;
        for (const size_t e : one_stage ? std::vector<size_t>{gpus.size()} : stage_end) {
          std::sort(key.begin() + static_cast<long>(a), key.begin() + static_cast<long>(e));
          a = e;
        }
        if (seen.insert(std::move(key)).second) pc.reps.push_back(gpus);
        return true;
      });
      if (!pc.all) pc.reps.clear();
      if (class_cache_.size() >= kMaxClassCache) class_cache_.clear();
      cached = class_cache_.emplace(cache_key, std::move(pc)).first;
    }
    const PlacementClasses& pc = cached->second;
    if (!pc.all || pc.reps.empty()) return;
    emit_by_class_ = one_stage;
    placements_list_ = pc.reps;
    if (!lifting_ && placements_list_.size() <= kMaxLiftPlacements) {
      lift_placements_ = &placements_list_;
      layout_gpus_ = placements_list_.front();
      lifting_ = true;
    }
  }

  bool has_placement(const std::vector<int>& pipes) const {
    bool any = false;
    placements(group_list(pipes), [&](const std::vector<std::vector<GpuId>>&) {
      any = true;
      return false;
    });
    return any;
  }

  // Every placement and EP variant of the chosen options: bounded, then buffered for simulation.
  void emit(const std::vector<int>& pipes, const std::vector<const PipeOption*>& picked, int rc, bool zero1) {
    // The chosen options with each stage's samples in every order within runs of one node group.
    std::vector<PipeOption> opts;
    for (size_t i = 0; i < pipes.size(); ++i) opts.push_back(*picked[i]);
    std::vector<std::pair<int, int>> runs_stage;  // (pipeline, stage) of each run
    std::vector<std::pair<int, int>> runs;        // [first, last) group of each run
    for (size_t i = 0; i < pipes.size(); ++i)
      for (size_t k = 0; k < pipe_shapes_[pipes[i]].stages.size(); ++k) {
        const StageShape& st = stage_shapes_[pipe_shapes_[pipes[i]].stages[k]];
        for (int a = 0, n = static_cast<int>(st.group_ng.size()); a < n;) {
          int e = a + 1;
          while (e < n && st.group_ng[e] == st.group_ng[a]) ++e;
          if (e - a > 1) {
            runs_stage.emplace_back(static_cast<int>(i), static_cast<int>(k));
            runs.emplace_back(a, e);
            std::vector<int>& x = opts[i].samples[k];
            std::sort(x.begin() + a, x.begin() + e);
          }
          a = e;
        }
      }
    if (emit_by_class_) runs.clear();  // every order is a placement of the same class (collect_placement_classes)
    std::function<void(size_t)> orders = [&](size_t r) {
      if (stop_) return;
      if (r == runs.size()) {
        place_and_consider(pipes, opts, rc, zero1);
        return;
      }
      std::vector<int>& x = opts[runs_stage[r].first].samples[runs_stage[r].second];
      do {
        orders(r + 1);
      } while (!stop_ && std::next_permutation(x.begin() + runs[r].first, x.begin() + runs[r].second));
    };
    orders(0);
  }

  // Every placement and EP variant of one assignment of options: bounded, then buffered for simulation.
  void place_and_consider(const std::vector<int>& pipes, const std::vector<PipeOption>& opts, int rc, bool zero1) {
    auto place = [&](const std::vector<std::vector<GpuId>>& gpus) {
      std::vector<PipelineSpec> specs;
      size_t gi = 0;
      for (size_t i = 0; i < pipes.size(); ++i) {
        const PipeOption& o = opts[i];
        PipelineSpec p;
        p.micro_batch = o.b;
        p.micro_batches = o.m;
        const PipeShape& shape = pipe_shapes_[pipes[i]];
        for (size_t k = 0; k < shape.stages.size(); ++k) {
          const StageShape& st = stage_shapes_[shape.stages[k]];
          StageSpec sp;
          sp.layer_begin = o.cuts[k];
          sp.layer_end = o.cuts[k + 1];
          for (size_t g = 0; g < st.group_ng.size(); ++g)
            sp.groups.push_back({gpus[gi++], st.tp, static_cast<double>(o.samples[k][g]) / o.b});
          p.stages.push_back(std::move(sp));
        }
        specs.push_back(std::move(p));
      }
      Plan base = build_plan(specs, cluster_, kRecompute[rc]);
      base.zero1 = zero1;
      for (Plan& plan : ep_variants(base, model_)) consider(std::move(plan));
      return !stop_;
    };
    if (!emit_by_class_) return placements(group_list(pipes), place);
    for (const std::vector<std::vector<GpuId>>& gpus : placements_list_)  // one per class
      if (!place(gpus)) return;
  }

  void consider(Plan plan) {
    tick();
    ++stats_.candidates;
    const std::optional<double> bound = lb_.plan_bound(plan);
    if (!bound) {
      ++stats_.proven_oom;
      return;
    }
    if (*bound >= inc_.bound()) {
      ++stats_.pruned_by_bound;
      return;
    }
    if (!seen_.insert(plan_to_yaml(plan, cluster_)).second) return;
    buffer_.push_back({*bound, seq_++, std::move(plan)});
    if (buffer_.size() >= kBufferSize) flush();
  }

  // ------------------------------------------------------------------ simulation
  void flush() {
    std::stable_sort(buffer_.begin(), buffer_.end(), [](const Candidate& a, const Candidate& b) {
      return a.bound < b.bound || (a.bound == b.bound && a.seq < b.seq);
    });
    for (size_t i = 0; i < buffer_.size() && !stop_; i += kBatchSize) {
      std::vector<const Candidate*> batch;
      for (size_t j = i; j < std::min(buffer_.size(), i + kBatchSize); ++j) {
        if (buffer_[j].bound >= inc_.bound()) {
          ++stats_.pruned_by_bound;
          continue;
        }
        batch.push_back(&buffer_[j]);
      }
      check_wall();
      if (stop_) break;
      if (lim_.max_simulations > 0 && stats_.simulated + static_cast<long>(batch.size()) > lim_.max_simulations) {
        batch.resize(static_cast<size_t>(std::max(0L, lim_.max_simulations - stats_.simulated)));
        cut("simulation budget of " + std::to_string(lim_.max_simulations) + " spent");
      }
      simulate_batch(batch);
    }
    buffer_.clear();
  }

  void simulate_batch(const std::vector<const Candidate*>& batch) {
    std::vector<double> times(batch.size(), kInf);
    std::vector<char> oom(batch.size(), 0);
    auto work = [&](size_t first, size_t step) {
      for (size_t j = first; j < batch.size(); j += step) {
        try {
          validate_plan(batch[j]->plan, cluster_, model_, G_, "oracle");
          const SimResult r = simulate_iteration(cluster_, *req_.topo, model_, batch[j]->plan, SimOptions{});
          if (r.oom) oom[j] = 1;
          else times[j] = r.iteration_time_s;
        } catch (const std::exception&) {
          oom[j] = 2;  // invalid or simulator failure: no time
        }
      }
    };
    const size_t threads = std::min(batch.size(), static_cast<size_t>(std::max(1, lim_.threads)));
    if (threads <= 1) {
      work(0, 1);
    } else {
      std::vector<std::thread> pool;
      for (size_t t = 0; t < threads; ++t) pool.emplace_back(work, t, threads);
      for (std::thread& t : pool) t.join();
    }
    for (size_t j = 0; j < batch.size(); ++j) {
      ++stats_.simulated;
      if (oom[j]) ++stats_.simulated_oom;
      if (times[j] < inc_.bound()) {
        inc_.plan = batch[j]->plan;
        inc_.time_s = times[j];
      }
    }
  }

  void tick() {
    if ((++ticks_ & 0xFFF) == 0) check_wall();
  }
  void check_wall() {
    if (lim_.wall_s > 0 && std::chrono::duration<double>(Clock::now() - start_).count() >= lim_.wall_s)
      cut("wall-clock budget of " + std::to_string(lim_.wall_s) + " s spent");
  }
  void cut(const std::string& why) {
    if (!stop_) stats_.incomplete_reason = why;
    stop_ = true;
  }

  const PlanRequest& req_;
  const Cluster& cluster_;
  const ModelConfig& model_;
  long G_;
  int L_;
  ExhaustiveLimits lim_;
  Incumbent& inc_;
  LowerBound lb_;
  Clock::time_point start_;
  ExhaustiveStats stats_;
  bool stop_ = false;

  std::vector<int> ng_gpus_, ng_max_node_, node_class_;
  std::vector<StageShape> stage_shapes_;
  std::vector<PipeShape> pipe_shapes_;
  std::vector<Candidate> buffer_;
  std::set<std::string> seen_;
  std::vector<signed char> may_fit_;  // per shape: -1 not known yet
  std::map<std::tuple<int, int, int, int, int, int>, int> memory_caps_;
  // Per shape and recompute level (x 3), and ZeRO-1 (x 2): NaN / null / NaN incumbent when not known yet.
  std::vector<double> rate_;
  std::vector<std::pair<double, long>> sample_caps_;  // (incumbent, cap)
  std::vector<std::pair<double, std::vector<long>>> micro_caps_;  // (incumbent, caps)
  std::vector<std::unique_ptr<PipelineRates>> stage_rates_;
  std::map<std::tuple<int, int, int>, std::vector<double>> floor_prefix_;
  std::map<std::tuple<int, int, int, long, long, long>, OptionSet> option_cache_;  // last: floor_tag_ or 0
  // The current structure's reduction floor when options are bounded with their tail as generated, and an id
  // of it for the option cache.
  std::optional<LowerBound::ReductionFloor> option_floor_;
  long floor_tag_ = 0;
  std::vector<std::tuple<int, int, int, long, long, long>> structure_keys_;  // cache keys under option_floor_
  // The reduction lift (combine, lift): the structure's placements (null: no lift - MoE, no topology or more
  // than kMaxLiftPlacements), and per layout of the pipelines of several stages its floors and lifted sets.
  struct Lifted {
    LowerBound::ReductionFloor floor;
    std::map<int, OptionSet> sets;  // per one-stage pipeline shape
  };
  std::vector<std::vector<std::vector<GpuId>>> placements_list_;  // the current structure's class representatives
  const std::vector<std::vector<std::vector<GpuId>>>* lift_placements_ = nullptr;
  bool lifting_ = false;  // the reduction lift is on (placement-free floors, or lift_placements_)
  std::vector<std::vector<GpuId>> layout_gpus_;  // the GPUs layout_plan() puts the groups on
  bool emit_by_class_ = false;  // emit() takes one placement per class and one order of samples
  struct PlacementClasses {
    bool all = true;  // every placement was visited (else reps is empty)
    std::vector<std::vector<std::vector<GpuId>>> reps;
  };
  // Per (stage ends, or the group count for one-stage structures; groups' node group and tp in listing order).
  std::map<std::pair<std::vector<size_t>, std::vector<std::pair<int, int>>>, PlacementClasses> class_cache_;
  std::map<std::vector<std::vector<int>>, Lifted> lifted_;
  long lifted_options_ = 0;  // options held in lifted_
  long cached_options_ = 0;
  long seq_ = 0;
  long ticks_ = 0;
};

}  // namespace

double Incumbent::bound() const { return plan ? time_s : kInf; }

int default_oracle_threads() { return std::max(1u, std::thread::hardware_concurrency()); }

ExhaustiveStats exhaustive_search(const PlanRequest& request, long global, const ExhaustiveLimits& limits,
                                  Incumbent& incumbent) {
  Search s(request, global, limits, incumbent);
  return s.run();
}

}  // namespace arachne::planner
