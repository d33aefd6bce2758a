// Completion of a template into priced plans (see completion.h). The steps:
//   placement (placement.h) -> plan order, EP blocks and expert counts -> per memory level, cheapest first:
//   per-class costs (pipeline_costs.h: shares, min-max partition under memory) -> batch split (proportional to
//   speed, then analytic local moves) -> candidates (the split, other micro-batch sizes, one class's partition
//   shared by every pipeline as deep, priced local moves)
//   priced by the caller -> best first over all levels.
// Recompute only where memory needs it: a candidate with recompute is one that fits at no level of less
// recompute, and a recompute level is tried only when the micro-batches it lets fit make the analytic split
// faster than the levels of less recompute (so a template that fits without recompute and gains nothing from
// larger micro-batches gets none). ZeRO-1 is priced on and off wherever a layer has several holders: besides
// the memory it saves, it shards the optimizer step over the data-parallel groups (each updates 1/dp of the
// parameters, Rajbhandari et al. 2020 "ZeRO" §5.1; sim/exec/stage_work.cpp) at the price of a parameter
// all-gather, so whether it pays is a question for the pricer.
#include "planner/template/completion.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <functional>
#include <memory>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <stdexcept>
#include <unordered_map>

#include "planner/common/profile.h"
#include "planner/template/pipeline_costs.h"
#include "planner/template/placement.h"
#include "sim/io/input_error.h"
#include "sim/plan/plan_yaml.h"

namespace arachne::planner {

struct CompletionCache::Impl {
  const Cluster& cluster;
  const ModelConfig& model;
  const Profiler profiler;
  LayerTimes times;
  StageMemoryLines memory;
  Plan scratch_plan;  // the plan being priced (assemble): its vectors' memory serves plan after plan
  Impl(const Cluster& c, const ModelConfig& m) : cluster(c), model(m), profiler(c, m), times(profiler), memory(profiler) {}

  // The costs of a pipeline class of these stages at `level`, kept for every template that has such a class
  // (their answers are a function of the stages, level and ties: PipelineCosts), memory_decided() forgotten.
  PipelineCosts& costs(std::vector<StageCostSpec> stages, MemoryLevel level, PartitionTies ties) {
    auto [it, fresh] = classes.try_emplace(class_key(stages, level, ties));
    if (fresh) it->second.costs = std::make_unique<PipelineCosts>(times, memory, std::move(stages), level, ties);
    return use(it->second);
  }
  // Called before each template. A class no template asked for in the last kReleaseAfterTemplates frees
  // its memory tables, and one idle for kDropAfterTemplates is dropped: a climb's templates share most
  // classes with the few before them, and the tables grow with every micro-batch size asked (gpt3-13b on
  // 282 GPUs met 10,344 classes; kept all, they took 1.0 GB of memory against 0.33 GB without them).
  void start_template() {
    ++templates;
    for (auto it = classes.begin(); it != classes.end();) {
      Kept& k = it->second;
      if (templates - k.last_used > kDropAfterTemplates) {
        it = classes.erase(it);
        continue;
      }
      if (!k.released && templates - k.last_used > kReleaseAfterTemplates) {
        k.costs->release_memory_tables();
        k.released = true;
      }
      ++it;
    }
  }
  // The same class as `before` at `level`, of before's recompute with ZeRO-1 on: one that shares before's
  // caches where it is built here (PipelineCosts' constructor from same_times).
  PipelineCosts& costs_after(PipelineCosts& before, MemoryLevel level) {
    auto [it, fresh] = classes.try_emplace(class_key(before.stage_specs(), level, before.ties()));
    if (fresh) it->second.costs = std::make_unique<PipelineCosts>(before, level);
    return use(it->second);
  }

 private:
  std::vector<long> class_key(const std::vector<StageCostSpec>& stages, MemoryLevel level, PartitionTies ties) {
    std::vector<long> key{static_cast<long>(level.recompute), level.zero1, static_cast<long>(ties)};
    for (const StageCostSpec& s : stages) {
      key.insert(key.end(), {s.tp, s.ep, s.zero1_dp, static_cast<long>(s.groups.size())});
      for (const GroupCostSpec& g : s.groups) key.insert(key.end(), {times.type_id(g.gpu_type), std::bit_cast<long>(g.local_experts)});
    }
    return key;
  }
  static constexpr long kReleaseAfterTemplates = 8;
  static constexpr long kDropAfterTemplates = 128;
  struct Kept {
    std::unique_ptr<PipelineCosts> costs;
    long last_used = 0;  // the template (start_template's count) that last asked for it
    bool released = false;
  };
  PipelineCosts& use(Kept& k) {
    k.last_used = templates;
    k.released = false;
    k.costs->forget_memory_decided();
    return *k.costs;
  }
  std::unordered_map<std::vector<long>, Kept, SequenceHash> classes;
  long templates = 0;
};

CompletionCache::CompletionCache(const Cluster& cluster, const ModelConfig& model)
    : impl_(std::make_unique<Impl>(cluster, model)) {}
CompletionCache::~CompletionCache() = default;

struct PlanPrices::Impl {
  // What the pricer said of a plan, asked with stop_at_s: a time below it is the plan's, one at or above it
  // may be a lower bound.
  struct Known {
    bool priced = false, invalid = false;
    std::optional<double> s;
    double stop_at_s = 0;
    // Whether the answer stands for a call with `stop`: a pricer answering it could say the same.
    bool answers(double stop) const { return priced && (!s || *s < stop_at_s || *s >= stop); }
  };
  const Cluster* cluster = nullptr;
  const ModelConfig* model = nullptr;
  long global_batch = 0;
  std::map<std::vector<int>, int> layouts;                          // by what assembly reads of a layout
  std::unordered_map<std::vector<long>, Known, SequenceHash> plans;  // by layout id and what assembly reads of a split
  std::vector<long> key;                                            // scratch

  void check(const CompletionInput& in) {
    if (!cluster) cluster = in.cluster, model = in.model, global_batch = in.global_batch;
    if (cluster != in.cluster || model != in.model || global_batch != in.global_batch)
      throw std::invalid_argument("complete_template: the plan prices belong to another cluster, model or global batch");
  }
};

PlanPrices::PlanPrices() : impl_(std::make_unique<Impl>()) {}
PlanPrices::~PlanPrices() = default;

namespace {

constexpr double kInf = PipelineCosts::kInf;

// ---------------------------------------------------------------- plan order, EP blocks and experts

// A stage's expert layout in the plan, and the routed experts each of its groups holds (for memory).
struct StageExperts {
  int ep = 1;
  EpScope scope = EpScope::Pipelines;
  std::vector<int> experts;       // per EP rank; empty = even
  std::vector<double> local;      // per group: routed experts per MoE layer it holds (-1: all, no EP)
};

// Pipelines that must take equal samples: an aligned block of EP peers (ep_scope pipelines), else one.
struct Unit {
  int pipeline_class = 0;
  std::vector<int> pipelines;  // indices into Layout::pipelines
  int size() const { return static_cast<int>(pipelines.size()); }
};

struct Layout {
  std::vector<PlacedPipeline> pipelines;           // plan order
  std::vector<std::vector<StageExperts>> experts;  // [pipeline][stage]
  std::vector<Unit> units;
  int id = -1;  // among the layouts of PlanPrices (-1: none kept)
};

// EP peers across pipelines: the least common multiple of the class's ep_scope-pipelines EP degrees.
int block_size(const PipelineTemplate& pt, const ModelConfig& model) {
  int k = 1;
  if (!model.moe) return k;
  for (const StageTemplate& st : pt.stages)
    if (st.ep > 1 && st.ep_scope == EpScope::Pipelines) k = std::lcm(k, st.ep);
  return k;
}

// The expert GEMM throughput of one GPU of a type: dense peak for the model's dtype times the calibrated
// asymptotic GEMM efficiency (sim/model/compute_time.h prices expert FFNs as GEMMs with these constants).
double expert_speed(const Cluster& cluster, const ModelConfig& model, const std::string& type) {
  const GpuSpec& g = cluster.catalog.at(type);
  return g.peak_for(model.dtype) * g.compute.gemm_eff_max;
}

// Experts per EP rank: even, or (uneven) in proportion to the ranks' speeds, each >= 1. nullopt when the
// count cannot be placed (even but ep does not divide it; fewer experts than ranks).
std::optional<std::vector<int>> expert_counts(int experts, const std::vector<double>& rank_speed, bool uneven) {
  const int ep = static_cast<int>(rank_speed.size());
  if (!uneven) {
    if (experts % ep != 0) return std::nullopt;
    return std::vector<int>{};
  }
  if (experts < ep) return std::nullopt;
  const std::vector<long> split = proportional_split(experts, rank_speed);
  std::vector<int> out(split.begin(), split.end());
  if (std::all_of(out.begin(), out.end(), [&](int e) { return e == out.front(); })) out.clear();  // even after all
  return out;
}

// Layout of one stage of one pipeline: EP ranks are the stage in `ep` consecutive pipelines (the EP block,
// all of one class: the same types, so the same speed), the stage's groups (ep = groups), or ep equal slices
// of the stage's GPUs in group order (sim/exec/stage_work.cpp reads `experts` in that rank order).
std::optional<StageExperts> stage_experts(const StageTemplate& st, const PlacedStage& ps, const Cluster& cluster,
                                          const ModelConfig& model) {
  StageExperts out;
  out.local.assign(ps.groups.size(), -1.0);
  if (!model.moe || st.ep <= 1) return out;
  const int experts = model.moe->experts;
  out.ep = st.ep;
  out.scope = st.ep_scope;
  std::vector<double> gpu_speeds;  // the stage's GPUs in group order
  for (const PlacedGroup& g : ps.groups)
    for (size_t k = 0; k < g.gpus.size(); ++k) gpu_speeds.push_back(expert_speed(cluster, model, g.gpu_type));
  const int n = static_cast<int>(gpu_speeds.size());
  std::vector<double> rank_speed(st.ep, 0.0);
  if (st.ep_scope == EpScope::Pipelines) {
    std::fill(rank_speed.begin(), rank_speed.end(), std::accumulate(gpu_speeds.begin(), gpu_speeds.end(), 0.0));
  } else {
    if (n % st.ep != 0) return std::nullopt;
    for (int i = 0; i < n; ++i) rank_speed[i / (n / st.ep)] += gpu_speeds[i];
  }
  const auto counts = expert_counts(experts, rank_speed, st.uneven_experts);
  if (!counts) return std::nullopt;
  out.experts = *counts;
  auto held = [&](int rank) { return out.experts.empty() ? static_cast<double>(experts) / st.ep : out.experts[rank]; };
  const int groups = static_cast<int>(ps.groups.size());
  for (int g = 0; g < groups; ++g) {
    if (st.ep_scope == EpScope::Pipelines) {  // the rank is the pipeline's place in its block: the most any holds
      double most = 0;
      for (int r = 0; r < st.ep; ++r) most = std::max(most, held(r));
      out.local[g] = most;
    } else if (groups == st.ep) {
      out.local[g] = held(g);
    } else {  // EP over GPU slices of the stage: each GPU holds experts x tp / N (sim/exec/stage_work.cpp)
      out.local[g] = static_cast<double>(experts) * st.tp / n;
    }
  }
  return out;
}

// Plan order: classes with the largest EP blocks first (blocks must start at multiples of their size), each
// class's replicas consecutive; then the units and every stage's experts. nullopt when the blocks cannot
// align or the experts cannot be placed.
std::optional<Layout> plan_layout(const Template& t, std::vector<PlacedPipeline> placed, const Cluster& cluster,
                                  const ModelConfig& model) {
  std::vector<int> classes(t.pipelines.size());
  std::iota(classes.begin(), classes.end(), 0);
  std::stable_sort(classes.begin(), classes.end(), [&](int a, int b) {
    return block_size(t.pipelines[a], model) > block_size(t.pipelines[b], model);
  });
  Layout out;
  for (const int c : classes) {
    const int k = block_size(t.pipelines[c], model);
    const int first = static_cast<int>(out.pipelines.size());
    if (first % k != 0 || t.pipelines[c].replicas % k != 0) return std::nullopt;
    for (PlacedPipeline& p : placed)
      if (p.pipeline_class == c) {  // each placed pipeline is of one class: moved once
        if ((static_cast<int>(out.pipelines.size()) - first) % k == 0) out.units.push_back({c, {}});
        out.units.back().pipelines.push_back(static_cast<int>(out.pipelines.size()));
        out.pipelines.push_back(std::move(p));
      }
  }
  for (const PlacedPipeline& p : out.pipelines) {
    const PipelineTemplate& pt = t.pipelines[p.pipeline_class];
    std::vector<StageExperts> stages;
    for (size_t j = 0; j < pt.stages.size(); ++j) {
      auto e = stage_experts(pt.stages[j], p.stages[j], cluster, model);
      if (!e) return std::nullopt;
      stages.push_back(std::move(*e));
    }
    out.experts.push_back(std::move(stages));
  }
  return out;
}

// ZeRO-1 can save memory only where a layer has more than one holder.
bool zero1_helps(const Layout& layout) {
  if (layout.pipelines.size() > 1) return true;
  for (const PlacedStage& s : layout.pipelines.front().stages)
    if (s.groups.size() > 1) return true;
  return false;
}

// ---------------------------------------------------------------- per-class costs

// The class costs at one memory level, built from the class's first pipeline (replicas share the types).
std::vector<PipelineCosts*> class_costs(const Template& t, const Layout& layout, CompletionCache::Impl& cache,
                                        MemoryLevel level, PartitionTies ties) {
  // ZeRO-1 shards over every group holding a layer (sim/exec/stage_work.cpp): each other pipeline holds the
  // stage's first layer in at least its narrowest stage's groups.
  auto fewest_groups = [](const PlacedPipeline& p) {
    size_t n = p.stages.front().groups.size();
    for (const PlacedStage& s : p.stages) n = std::min(n, s.groups.size());
    return static_cast<int>(n);
  };
  int all_fewest = 0;
  for (const PlacedPipeline& p : layout.pipelines) all_fewest += fewest_groups(p);
  std::vector<PipelineCosts*> out;
  for (int c = 0; c < static_cast<int>(t.pipelines.size()); ++c) {
    int first = 0;
    while (layout.pipelines[first].pipeline_class != c) ++first;
    const PlacedPipeline& p = layout.pipelines[first];
    std::vector<StageCostSpec> stages;
    for (size_t j = 0; j < p.stages.size(); ++j) {
      StageCostSpec s;
      s.tp = t.pipelines[c].stages[j].tp;
      s.ep = layout.experts[first][j].ep;
      for (size_t g = 0; g < p.stages[j].groups.size(); ++g)
        s.groups.push_back({p.stages[j].groups[g].gpu_type, layout.experts[first][j].local[g]});
      s.zero1_dp = static_cast<int>(p.stages[j].groups.size()) + all_fewest - fewest_groups(p);
      stages.push_back(std::move(s));
    }
    out.push_back(&cache.costs(std::move(stages), level, ties));
  }
  return out;
}

// ---------------------------------------------------------------- batch split

// Samples per pipeline of each unit (every pipeline of a unit takes the same), each pipeline's micro-batch
// size, and whose layer partition the pipelines take (pipeline_bounds).
struct BatchSplit {
  std::vector<long> samples;    // per unit, per pipeline of the unit
  std::vector<int> micro_batch; // per pipeline (plan order)
  int shared_class = -1;        // every pipeline as deep takes this class's partition; -1: each its own class's
  auto key() const { return std::tie(samples, micro_batch, shared_class); }
  bool operator<(const BatchSplit& o) const { return key() < o.key(); }
};

// The samples of each pipeline of the layout (plan order) under the split.
std::vector<long> pipeline_samples(const Layout& layout, const BatchSplit& split) {
  std::vector<long> samples(layout.pipelines.size());
  for (size_t u = 0; u < layout.units.size(); ++u)
    for (const int p : layout.units[u].pipelines) samples[p] = split.samples[u];
  return samples;
}

// The min-max layer partition of class c's first unit at its samples and micro-batch size (empty: none fits).
const std::vector<int>& class_bounds(const Layout& layout, std::vector<PipelineCosts*>& costs, const BatchSplit& split,
                                     int c) {
  size_t u = 0;
  while (layout.units[u].pipeline_class != c) ++u;
  const int b = split.micro_batch[layout.units[u].pipelines.front()];
  return costs[c]->partition(b, split.samples[u] / b);
}

// Pipeline i's layer bounds under the split: those of the split's shared class where it has as many stages
// and its partition fits (a layer's gradient then has the same holders in every such pipeline: one
// data-parallel reduction per stage, not one per run of layers with the same holders), else its own class's
// min-max partition at its samples (`samples`: pipeline_samples) and micro-batch size. Empty: none fits.
const std::vector<int>& pipeline_bounds(const Layout& layout, std::vector<PipelineCosts*>& costs, const BatchSplit& split,
                                        size_t i, const std::vector<long>& samples) {
  const int own = layout.pipelines[i].pipeline_class;
  if (split.shared_class >= 0 && split.shared_class != own) {
    const std::vector<int>& shared = class_bounds(layout, costs, split, split.shared_class);
    if (shared.size() == layout.pipelines[i].stages.size() + 1) return shared;
  }
  const int b = split.micro_batch[i];
  return costs[own]->partition(b, samples[i] / b);
}

class BatchPlanner {
 public:
  BatchPlanner(const Layout& layout, std::vector<PipelineCosts*>& costs, long global)
      : layout_(layout), costs_(costs), global_(global) {}

  // Proportional split, then analytic local moves; micro-batch sizes the best for each pipeline's samples.
  std::optional<BatchSplit> split() {
    std::optional<std::vector<long>> a = proportional();
    if (!a) return std::nullopt;
    local_moves(*a);
    for (size_t u = 0; u < a->size(); ++u)
      if (unit_time(u, (*a)[u]) == kInf) return std::nullopt;
    return with_best_micro_batches(*a);
  }

  // The analytic time of the split: its slowest pipeline (infinite when one does not fit).
  double time(const BatchSplit& s) {
    double worst = 0;
    for (size_t u = 0; u < s.samples.size(); ++u)
      for (const int p : layout_.units[u].pipelines)
        worst = std::max(worst, cls(u).time(s.samples[u], s.micro_batch[p]));
    return worst;
  }
  // Whether no split has an analytic time below t: a pipeline takes at most its class's most_samples_below(t)
  // samples for its time to be below t (a unit's time is its best micro-batch size's), and together they
  // hold less than the batch.
  bool no_split_below(double t) {
    std::vector<long>& most = most_scratch_;  // per class; -1: not asked yet
    most.assign(costs_.size(), -1);
    long room = 0;
    for (const PlacedPipeline& p : layout_.pipelines) {
      long& m = most[p.pipeline_class];
      if (m < 0) m = costs_[p.pipeline_class]->most_samples_below(t, global_);
      if (m == 0) return true;  // every pipeline takes a sample
      room += m;
      if (room >= global_) return false;
    }
    return true;
  }
  // Whether every pipeline's micro-batches fit at this level.
  bool fits(const BatchSplit& s) { return time(s) < kInf; }

  BatchSplit with_best_micro_batches(const std::vector<long>& a) {
    BatchSplit s;
    s.samples = a;
    s.micro_batch.assign(layout_.pipelines.size(), 0);
    for (size_t u = 0; u < a.size(); ++u)
      for (const int p : layout_.units[u].pipelines) s.micro_batch[p] = cls(u).best(a[u]).micro_batch;
    return s;
  }

  // The same split with class c's pipelines on their `rank`-th best micro-batch size (rank 1 = the runner-up);
  // nullopt when a pipeline has no such size.
  std::optional<BatchSplit> other_micro_batch(const BatchSplit& s, int c, int rank) {
    BatchSplit out = s;
    bool changed = false;
    for (size_t u = 0; u < s.samples.size(); ++u) {
      if (layout_.units[u].pipeline_class != c) continue;
      std::vector<std::pair<double, int>> options;
      for (long b = 1; b <= s.samples[u]; ++b)
        if (s.samples[u] % b == 0) {
          const double t = cls(u).time(s.samples[u], static_cast<int>(b));
          if (t < kInf) options.emplace_back(t, static_cast<int>(b));
        }
      std::sort(options.begin(), options.end());
      if (static_cast<int>(options.size()) <= rank) return std::nullopt;
      for (const int p : layout_.units[u].pipelines) out.micro_batch[p] = options[rank].second;
      changed = true;
    }
    if (!changed) return std::nullopt;
    return out;
  }

  // The same split with every pipeline as deep as class c's on class c's partition (pipeline_bounds);
  // nullopt when that changes no pipeline's bounds.
  std::optional<BatchSplit> sharing_bounds_of(const BatchSplit& s, int c) {
    if (s.shared_class == c) return std::nullopt;
    BatchSplit out = s;
    out.shared_class = c;
    const std::vector<long> samples = pipeline_samples(layout_, s);
    for (size_t p = 0; p < layout_.pipelines.size(); ++p)
      if (pipeline_bounds(layout_, costs_, out, p, samples) != pipeline_bounds(layout_, costs_, s, p, samples)) return out;
    return std::nullopt;
  }

  // Moves of samples from `s`: between every two units in different states (class and samples; units in
  // the same state are interchangeable), the smallest admissible amount and the amount best for the pair,
  // each with its units' best micro-batch sizes and s's shared class.
  // Ordered by the analytic time after the move (time() of the split), those below below_s only.
  std::vector<BatchSplit> neighbours(const BatchSplit& s, double below_s) {
    std::vector<std::pair<double, std::vector<long>>> moves;
    const std::vector<int> states = distinct_units(s.samples);
    for (const int u : states)
      for (const int v : states) {
        if (u == v) continue;
        const long step = std::lcm(unit_size(u), unit_size(v));
        long first_amount = 0, best_amount = 0;  // the smallest admissible amount, the best one
        double best_t = kInf;
        for (long d = step; d <= kMaxMove * step && d / unit_size(u) < s.samples[u]; d += step) {
          const long nu = s.samples[u] - d / unit_size(u), nv = s.samples[v] + d / unit_size(v);
          // After the smallest admissible amount, one whose units' lower bounds reach the best time so far or
          // the caller's bound can neither be the best nor be kept: its micro-batch choices are not worked out.
          if (first_amount != 0 && std::max(cls(u).best_lower_bound(nu), cls(v).best_lower_bound(nv)) >= std::min(best_t, below_s))
            continue;
          const double t = std::max(unit_time(u, nu), unit_time(v, nv));
          if (t == kInf) continue;
          if (first_amount == 0) first_amount = d;
          if (t < best_t) {
            best_t = t;
            best_amount = d;
          }
        }
        // Ascending, each once (the best amount is never below the first).
        const std::array<long, 2> amounts{first_amount, best_amount > first_amount ? best_amount : 0};
        for (const long d : amounts) {
          if (d == 0) continue;
          std::vector<long> a = s.samples;
          a[u] -= d / unit_size(u);
          a[v] += d / unit_size(v);
          const double analytic_s = objective(a).first;
          if (analytic_s < below_s) moves.emplace_back(analytic_s, std::move(a));
        }
      }
    std::stable_sort(moves.begin(), moves.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
    std::vector<BatchSplit> out;
    for (const auto& m : moves) {
      out.push_back(with_best_micro_batches(m.second));
      out.back().shared_class = s.shared_class;
    }
    return out;
  }

 private:
  static constexpr long kMaxMove = 64;  // largest move, in steps, the local search looks at
  std::vector<long> most_scratch_;      // no_split_below's
  const Layout& layout_;
  std::vector<PipelineCosts*>& costs_;
  long global_;

  PipelineCosts& cls(size_t u) { return *costs_[layout_.units[u].pipeline_class]; }
  long unit_size(size_t u) const { return layout_.units[u].size(); }
  double unit_time(size_t u, long n) { return n < 1 ? kInf : cls(u).best(n).time_s; }

  // The first split: every pipeline's share of the batch in proportion to its class's steady-state speed
  // (proportional_split), a unit's pipelines levelled down to their mean, the rest of the samples handed
  // out where they cost least.
  std::optional<std::vector<long>> proportional() {
    const long np = static_cast<long>(layout_.pipelines.size());
    if (np > global_) return std::nullopt;
    // One class: equal weights split the batch alike whatever their value (split_proportional), so only
    // whether the class runs at all is worked out.
    std::vector<double> speed(costs_.size());
    if (costs_.size() == 1) speed[0] = costs_[0]->runs(global_) ? 1.0 : 0.0;
    else for (size_t c = 0; c < costs_.size(); ++c) speed[c] = costs_[c]->speed(global_);
    std::vector<double> weights;
    for (const PlacedPipeline& p : layout_.pipelines) weights.push_back(speed[p.pipeline_class]);
    if (std::all_of(weights.begin(), weights.end(), [](double w) { return w <= 0; })) return std::nullopt;
    const std::vector<long> per_pipeline = proportional_split(global_, weights);
    std::vector<long> a(layout_.units.size());
    long left = global_;
    for (size_t u = 0; u < a.size(); ++u) {
      long sum = 0;
      for (const int p : layout_.units[u].pipelines) sum += per_pipeline[p];
      a[u] = std::max(1L, sum / unit_size(u));
      left -= a[u] * unit_size(u);
    }
    while (left > 0) {  // hand out the rest where the unit's time grows least
      int pick = -1;
      double pick_t = kInf;
      for (size_t u = 0; u < a.size(); ++u) {
        if (unit_size(u) > left) continue;
        const double t = unit_time(u, a[u] + 1);
        if (pick < 0 || t < pick_t) {
          pick = static_cast<int>(u);
          pick_t = t;
        }
      }
      if (pick < 0) return std::nullopt;
      ++a[pick];
      left -= unit_size(pick);
    }
    return left == 0 ? std::optional(a) : std::nullopt;
  }

  // (slowest time, pipelines within a part in 10^12 of it): lower is better.
  std::pair<double, int> objective(const std::vector<long>& a) {
    times_.resize(a.size());
    for (size_t u = 0; u < a.size(); ++u) times_[u] = unit_time(u, a[u]);
    return objective_of_times();
  }
  // objective() from each unit's time in times_.
  std::pair<double, int> objective_of_times() const {
    double worst = 0;
    for (const double t : times_) worst = std::max(worst, t);
    int at = 0;
    for (size_t u = 0; u < times_.size(); ++u)
      if (times_[u] >= worst * (1 - 1e-12)) at += static_cast<int>(unit_size(u));
    return {worst, at};
  }
  std::vector<double> times_;  // objective's scratch: each unit's time

  // The first unit of each state (class and samples), in unit order.
  std::vector<int> distinct_units(const std::vector<long>& a) {
    std::vector<int> out;
    std::vector<std::pair<int, long>>& states = states_scratch_;  // of the units in `out`
    states.clear();
    for (size_t u = 0; u < a.size(); ++u) {
      const std::pair<int, long> state{layout_.units[u].pipeline_class, a[u]};
      if (std::find(states.begin(), states.end(), state) != states.end()) continue;
      states.push_back(state);
      out.push_back(static_cast<int>(u));
    }
    return out;
  }
  std::vector<std::pair<int, long>> states_scratch_;

  // Moves samples from the slowest unit to whichever unit state (and amount) lowers the objective most, while it
  // falls (samples are integers, so the proportional split is only close; divisibility makes the time of n
  // samples uneven in n, hence amounts beyond one step).
  void local_moves(std::vector<long>& a) {
    for (long guard = 0; guard < 4 * global_; ++guard) {
      const auto current = objective(a);  // fills times_
      int slow = 0;
      for (size_t u = 1; u < a.size(); ++u)
        if (times_[u] > times_[slow]) slow = static_cast<int>(u);
      const MoveObjective after(*this, times_);
      long best_d = 0;
      int best_v = -1;
      auto best_obj = current;
      for (const int v : distinct_units(a)) {
        const bool same_state = layout_.units[v].pipeline_class == layout_.units[slow].pipeline_class && a[v] == a[slow];
        if (v == slow || same_state) continue;
        const long step = std::lcm(unit_size(slow), unit_size(v));
        for (long d = step; d <= kMaxMove * step && d / unit_size(slow) < a[slow]; d += step) {
          // Unit v's time after the move is at least its lower bound: above the best slowest time, the
          // move cannot win, and its micro-batch choice is not worked out; nor is the slow unit's time
          // where v's own time is above it.
          const long v_after = a[v] + d / unit_size(v);
          if (cls(v).best_lower_bound(v_after) > best_obj.first || unit_time(v, v_after) > best_obj.first) continue;
          const auto obj = after(slow, a[slow] - d / unit_size(slow), v, v_after);
          if (obj < best_obj) {
            best_obj = obj;
            best_v = v, best_d = d;
          }
        }
      }
      if (best_v < 0) return;
      a[slow] -= best_d / unit_size(slow);
      a[best_v] += best_d / unit_size(best_v);
    }
  }

  // objective() of a split after a move that changes only units s and v, from the other units' times in the
  // split before it: their slowest (the largest of the three slowest that is neither s nor v) and how many
  // pipelines of theirs are within the tolerance of a time (a prefix of their times sorted slowest first).
  // The same comparisons of the same times as objective(): the same result.
  class MoveObjective {
   public:
    // `times`: each unit's time before the move.
    MoveObjective(BatchPlanner& bp, const std::vector<double>& times) : bp_(bp), time_(times) {
      const size_t n = times.size();
      order_.resize(n);
      std::iota(order_.begin(), order_.end(), 0);
      std::sort(order_.begin(), order_.end(), [&](int x, int y) { return time_[x] > time_[y] || (time_[x] == time_[y] && x < y); });
      pipelines_.assign(n + 1, 0);
      for (size_t k = 0; k < n; ++k) pipelines_[k + 1] = pipelines_[k] + bp.unit_size(order_[k]);
    }
    std::pair<double, int> operator()(int s, long samples_s, int v, long samples_v) const {
      const double ts = bp_.unit_time(s, samples_s), tv = bp_.unit_time(v, samples_v);
      double worst = std::max(0.0, std::max(ts, tv));
      for (size_t k = 0; k < order_.size() && k < 3; ++k)
        if (order_[k] != s && order_[k] != v) {
          worst = std::max(worst, time_[order_[k]]);
          break;
        }
      const double at_least = worst * (1 - 1e-12);
      const size_t within = std::partition_point(order_.begin(), order_.end(), [&](int u) { return time_[u] >= at_least; }) - order_.begin();
      long at = pipelines_[within];
      if (time_[s] >= at_least) at -= bp_.unit_size(s);
      if (time_[v] >= at_least) at -= bp_.unit_size(v);
      if (ts >= at_least) at += bp_.unit_size(s);
      if (tv >= at_least) at += bp_.unit_size(v);
      return {worst, static_cast<int>(at)};
    }

   private:
    BatchPlanner& bp_;
    std::vector<double> time_;  // per unit, before the move
    std::vector<int> order_;    // units, slowest first
    std::vector<long> pipelines_;  // pipelines of the first k units of order_
  };

};

// ---------------------------------------------------------------- plans and pricing

// What assemble reads of a layout: per pipeline, per stage its TP width, its groups' GPUs and its experts.
std::vector<int> layout_content(const Template& t, const Layout& layout) {
  std::vector<int> out;
  for (size_t i = 0; i < layout.pipelines.size(); ++i) {
    const PlacedPipeline& pp = layout.pipelines[i];
    out.push_back(static_cast<int>(pp.stages.size()));
    for (size_t j = 0; j < pp.stages.size(); ++j) {
      out.push_back(t.pipelines[pp.pipeline_class].stages[j].tp);
      out.push_back(static_cast<int>(pp.stages[j].groups.size()));
      for (const PlacedGroup& g : pp.stages[j].groups) {
        out.push_back(static_cast<int>(g.gpus.size()));
        out.insert(out.end(), g.gpus.begin(), g.gpus.end());
      }
      const StageExperts& e = layout.experts[i][j];
      out.push_back(e.ep), out.push_back(static_cast<int>(e.scope)), out.push_back(static_cast<int>(e.experts.size()));
      out.insert(out.end(), e.experts.begin(), e.experts.end());
    }
  }
  return out;
}

// What assemble reads of a split and level besides the layout (`key`, after the layout's id): the layout and
// this key decide the plan.
void plan_key(const Layout& layout, std::vector<PipelineCosts*>& costs, const BatchSplit& split, MemoryLevel level,
              std::vector<long>& key) {
  key.assign({layout.id, static_cast<long>(level.recompute), level.zero1});
  const std::vector<long> samples = pipeline_samples(layout, split);
  for (size_t i = 0; i < layout.pipelines.size(); ++i) {
    PipelineCosts& pc = *costs[layout.pipelines[i].pipeline_class];
    const int b = split.micro_batch[i];
    const int m = static_cast<int>(samples[i] / b);
    key.push_back(b), key.push_back(m);
    const std::vector<int>& bounds = pipeline_bounds(layout, costs, split, i, samples);
    key.insert(key.end(), bounds.begin(), bounds.end());
    for (size_t j = 0; j < layout.pipelines[i].stages.size(); ++j) {
      const std::vector<int>& shares = pc.shares(static_cast<int>(j), b);
      key.insert(key.end(), shares.begin(), shares.end());
    }
  }
}

// The plan of the split at the level, into `plan`: the layout's GPUs, each pipeline's layer bounds
// (pipeline_bounds), each class's group shares at its pipelines' micro-batch size, the layout's experts.
// `plan` is a default plan or one only this wrote before (the fields it leaves alone keep their defaults);
// its vectors' memory is reused.
void assemble(const Template& t, const Layout& layout, std::vector<PipelineCosts*>& costs, const BatchSplit& split,
              MemoryLevel level, Plan& plan) {
  const std::vector<long> samples = pipeline_samples(layout, split);
  plan.schedule = Schedule::OneFOneB;
  plan.recompute = level.recompute;
  plan.zero1 = level.zero1;
  plan.pipelines.resize(layout.pipelines.size());
  for (size_t i = 0; i < layout.pipelines.size(); ++i) {
    const PlacedPipeline& pp = layout.pipelines[i];
    PipelineCosts& pc = *costs[pp.pipeline_class];
    Pipeline& p = plan.pipelines[i];
    p.micro_batch = split.micro_batch[i];
    p.micro_batches = static_cast<int>(samples[i] / p.micro_batch);
    const std::vector<int>& bounds = pipeline_bounds(layout, costs, split, i, samples);
    p.stages.resize(pp.stages.size());
    for (size_t j = 0; j < pp.stages.size(); ++j) {
      Stage& st = p.stages[j];
      st.layer_begin = bounds[j];
      st.layer_end = bounds[j + 1];
      const std::vector<int>& shares = pc.shares(static_cast<int>(j), p.micro_batch);
      st.groups.resize(pp.stages[j].groups.size());
      for (size_t g = 0; g < pp.stages[j].groups.size(); ++g) {
        TpGroup& group = st.groups[g];
        const std::vector<GpuId>& gpus = pp.stages[j].groups[g].gpus;
        group.gpus.assign(gpus.begin(), gpus.end());
        group.tp = t.pipelines[pp.pipeline_class].stages[j].tp;
        group.share = static_cast<double>(shares[g]) / p.micro_batch;
      }
      const StageExperts& e = layout.experts[i][j];
      st.ep = e.ep;
      st.ep_scope = e.scope;
      st.experts.assign(e.experts.begin(), e.experts.end());
    }
  }
}

// The `size` lowest prices of a template's plans so far (complete_template returns that many, best first):
// a plan priced at or above the highest of them once there are `size` comes after all of them there.
class KeptPrices {
 public:
  explicit KeptPrices(int size) : size_(std::max(size, 0)) {}
  void add(double price) {
    lowest_.insert(std::upper_bound(lowest_.begin(), lowest_.end(), price), price);
    if (static_cast<int>(lowest_.size()) > size_) lowest_.pop_back();
  }
  // Plans priced at least this are not returned (infinity until there are `size`).
  double cut() const { return static_cast<int>(lowest_.size()) < size_ || size_ == 0 ? kInf : lowest_.back(); }

 private:
  int size_;
  std::vector<double> lowest_;  // ascending
};

// Prices candidates once each, in the order given, within the budget of pricer calls; a candidate that
// fits at a cheaper memory level is not this level's (memory savers only where memory needs them).
class Pricer {
 public:
  using Admit = std::function<bool(const BatchSplit&)>;
  // `scratch`: the plan assemble fills (CompletionCache::Impl::scratch_plan).
  Pricer(const Template& t, const Layout& layout, std::vector<PipelineCosts*>& costs, const CompletionInput& in,
         const PlanPricer& price, MemoryLevel level, PartitionTies ties, Admit admit, int budget, KeptPrices& kept,
         Plan& scratch)
      : t_(t), layout_(layout), costs_(costs), in_(in), price_(price), level_(level), ties_(ties), admit_(std::move(admit)),
        budget_(budget), kept_(kept), scratch_(scratch) {}

  // The priced time of the split (nullopt: not admitted, over budget, invalid, or out of memory). With a
  // plan priced below `beat_s` already, a split whose time is at least beat_s and at least the template's
  // kept prices (KeptPrices::cut) can neither win nor be returned: its pricer may stop early, and the value
  // that comes back (at least both) is not kept.
  std::optional<double> price(const BatchSplit& s, std::optional<double> beat_s) {
    if (auto it = seen_.find(s); it != seen_.end()) return it->second;
    if (calls_ >= budget_) return std::nullopt;
    if (!admit_(s)) return seen_[s] = std::nullopt;
    const double stop_at_s = beat_s ? std::max(*beat_s, kept_.cut()) : kInf;
    PlanPrices::Impl::Known* known = known_price(s);
    if (known && known->invalid) return seen_[s] = std::nullopt;
    const bool answered = known && known->answers(stop_at_s);
    const bool returned = answered && known->s && *known->s < stop_at_s;
    if (answered && !returned) {  // nothing of the plan is needed
      ++calls_;
      return seen_[s] = known->s;
    }
    Plan& plan = scratch_;
    assemble(t_, layout_, costs_, s, level_, plan);
    if (!known || !known->priced) {
      try {
        validate_plan(plan, *in_.cluster, *in_.model, in_.global_batch, "completion");
      } catch (const InputError&) {
        if (known) known->invalid = true;
        return seen_[s] = std::nullopt;
      }
    }
    ++calls_;
    const std::optional<double> time = answered ? known->s : price_(plan, stop_at_s);
    if (known && !answered) known->priced = true, known->s = time, known->stop_at_s = stop_at_s;
    if (time && *time < stop_at_s) {
      kept_.add(*time);
      done_.push_back({plan, *time, ties_});  // a copy: the scratch keeps its memory
    }
    return seen_[s] = time;
  }
  bool spent() const { return calls_ >= budget_; }
  std::vector<CompletedPlan> take() { return std::move(done_); }

 private:
  // What the pricer said of the split's plan before (nullptr: no PlanPrices given).
  PlanPrices::Impl::Known* known_price(const BatchSplit& s) {
    if (!in_.prices) return nullptr;
    PlanPrices::Impl& prices = in_.prices->impl();
    plan_key(layout_, costs_, s, level_, prices.key);
    return &prices.plans[prices.key];
  }

  const Template& t_;
  const Layout& layout_;
  std::vector<PipelineCosts*>& costs_;
  const CompletionInput& in_;
  const PlanPricer& price_;
  MemoryLevel level_;
  PartitionTies ties_;
  Admit admit_;
  int budget_;
  KeptPrices& kept_;
  Plan& scratch_;
  int calls_ = 0;
  std::map<BatchSplit, std::optional<double>> seen_;
  std::vector<CompletedPlan> done_;
};

// The candidates the rules leave open: the split with each pipeline's best micro-batch size; each class's
// runner-up sizes in that split, then in the best split so far where it differs (the best size of one class
// can depend on another's: their gradient reductions overlap different backward passes); every class's
// partition shared by the pipelines as deep in the best split so far; then moves of samples between classes
// while the priced time falls (moves analytically no faster than analytic_below_s are not made: the pricer
// would not admit them).
void price_candidates(BatchPlanner& batch, const BatchSplit& first, int classes, Pricer& pricer, double analytic_below_s) {
  std::optional<double> best_t = pricer.price(first, std::nullopt);
  BatchSplit best = first;
  auto try_split = [&](const std::optional<BatchSplit>& s) {
    if (!s) return;
    const std::optional<double> t = pricer.price(*s, best_t);
    if (t && (!best_t || *t < *best_t)) {
      best_t = t;
      best = *s;
    }
  };
  for (int c = 0; c < classes; ++c)
    for (const int rank : {1, 2}) try_split(batch.other_micro_batch(first, c, rank));
  if (best.micro_batch != first.micro_batch)
    for (int c = 0; c < classes; ++c)
      for (const int rank : {1, 2}) try_split(batch.other_micro_batch(best, c, rank));
  const BatchSplit own_bounds = best;
  for (int c = 0; c < classes; ++c) try_split(batch.sharing_bounds_of(own_bounds, c));
  for (bool improved = true; improved && !pricer.spent();) {
    improved = false;
    for (const BatchSplit& next : batch.neighbours(best, analytic_below_s)) {
      const std::optional<double> t = pricer.price(next, best_t);
      if (t && (!best_t || *t < *best_t)) {
        best_t = t;
        best = next;
        improved = true;
        break;  // first improvement in analytic order: the next round starts from it
      }
      if (pricer.spent()) break;
    }
  }
}

std::vector<CompletedPlan> best_first(std::vector<CompletedPlan> plans, int max_candidates) {
  std::stable_sort(plans.begin(), plans.end(),
                   [](const CompletedPlan& a, const CompletedPlan& b) { return a.priced_s < b.priced_s; });
  if (static_cast<int>(plans.size()) > max_candidates) plans.resize(std::max(0, max_candidates));
  return plans;
}

// One memory level: its class costs and batch planner (the planner keeps a reference to the costs).
struct Level {
  MemoryLevel memory;
  std::vector<PipelineCosts*> costs;  // per class, in the cache
  BatchPlanner batch;
  Level(const Template& t, const Layout& layout, CompletionCache::Impl& cache, MemoryLevel m, PartitionTies ties, long global)
      : memory(m), costs(class_costs(t, layout, cache, m, ties)), batch(layout, costs, global) {}
  // The level `m`, ZeRO-1 on, after `before`, the same recompute without it: classes built here share
  // before's caches (CompletionCache::Impl::costs_after).
  Level(const Level& before, const Layout& layout, CompletionCache::Impl& cache, MemoryLevel m, long global)
      : memory(m), costs(costs_after(before.costs, cache, m)), batch(layout, costs, global) {}
  static std::vector<PipelineCosts*> costs_after(const std::vector<PipelineCosts*>& before, CompletionCache::Impl& cache,
                                                 MemoryLevel m) {
    std::vector<PipelineCosts*> out;
    for (PipelineCosts* c : before) out.push_back(&cache.costs_after(*c, m));
    return out;
  }
  // A lower bound on the analytic time of every split of this level: its classes' time_floor.
  double floor() {
    double out = 0;
    for (PipelineCosts* c : costs) out = std::max(out, c->time_floor());
    return out;
  }
  // Whether memory decided a choice of this level's batch split or micro-batch sizes (always when no split fits).
  bool memory_decided(bool split) const {
    return !split || std::any_of(costs.begin(), costs.end(), [](const PipelineCosts* c) { return c->memory_decided(); });
  }
};

// Admits a split at the last of `levels` only when it fits at no level of less recompute with the same
// ZeRO-1 setting. Across settings the analytic split cannot compare: it leaves out ZeRO-1's parameter
// all-gather, so a split that fits only with ZeRO-1 at less recompute may run slower than the same split
// without ZeRO-1 at more recompute (measured: 16 one-stage EP-16 replicas of gpt-moe-1.3b-64e on H100,
// selective recompute without ZeRO-1 simulated 0.364 s, no recompute with ZeRO-1 0.385 s).
Pricer::Admit needs_recompute(const std::vector<std::unique_ptr<Level>>& levels) {
  return [&levels](const BatchSplit& s) {
    const MemoryLevel mine = levels.back()->memory;
    for (size_t l = 0; l + 1 < levels.size(); ++l) {
      const MemoryLevel other = levels[l]->memory;
      if (other.zero1 == mine.zero1 && other.recompute < mine.recompute && levels[l]->batch.fits(s)) return false;
    }
    return true;
  };
}

// Recompute only where it pays: a level of more recompute is tried only when its analytic split is faster
// than the best of the levels of less recompute, with the same ZeRO-1 setting (needs_recompute), that gave
// plans (it lets larger micro-batches fit).
class RecomputeGate {
 public:
  bool pays(MemoryLevel m, double analytic_s) const {
    double cheaper = kInf;
    for (const auto& [level, s] : best_)
      if (level.second == m.zero1 && level.first < m.recompute) cheaper = std::min(cheaper, s);
    return analytic_s < cheaper;
  }
  void record(MemoryLevel m, double analytic_s) {
    const auto [it, fresh] = best_.emplace(std::pair{m.recompute, m.zero1}, analytic_s);
    if (!fresh) it->second = std::min(it->second, analytic_s);
  }

 private:
  std::map<std::pair<Recompute, bool>, double> best_;  // best analytic split of each level that gave plans
};

// The fewest units of a layout whose memory levels completion bounds before splitting (no_split_below).
constexpr size_t kBoundedUnits = 4;

// Steps 2-5 at every memory level, cheapest first: costs, batch split, priced candidates.
std::vector<CompletedPlan> price_levels(const Template& t, const Layout& layout, CompletionCache::Impl& cache,
                                        const CompletionInput& in, const PlanPricer& price, const CompletionOptions& opt,
                                        KeptPrices& kept) {
  std::vector<std::unique_ptr<Level>> levels;
  std::vector<CompletedPlan> plans;
  RecomputeGate gate;
  // Per ZeRO-1 setting: memory decided nothing at a level of less recompute, so more recompute (slower
  // layers, a looser limit) cannot split faster and is not worked out.
  std::array<bool, 2> memory_free{false, false};
  for (const MemoryLevel memory : memory_levels(zero1_helps(layout))) {
    if (memory_free[memory.zero1]) continue;
    const bool zero1_after_off = memory.zero1 && !levels.empty() && !levels.back()->memory.zero1 &&
                                 levels.back()->memory.recompute == memory.recompute;
    levels.push_back(zero1_after_off ? std::make_unique<Level>(*levels.back(), layout, cache, memory, in.global_batch)
                                     : std::make_unique<Level>(t, layout, cache, memory, opt.partition_ties, in.global_batch));
    Level& level = *levels.back();
    // Every class takes a sample, so a class whose floor is no faster than the caller's bound leaves every
    // split of this level no faster: its split is not worked out (nor, with more recompute and slower
    // layers, would it be faster there).
    if (opt.skip_analytic_above_s < kInf && level.floor() >= opt.skip_analytic_above_s) continue;
    // Nor where no split's analytic time can be below the bound (a margin of 10^-9 for rounding). Asked only
    // where the split has several units to move samples between: with a few, working the bound out costs about
    // what the split would.
    if (opt.skip_analytic_above_s < kInf && layout.units.size() >= kBoundedUnits &&
        level.batch.no_split_below(opt.skip_analytic_above_s * (1 + 1e-9)))
      continue;
    const std::optional<BatchSplit> split = level.batch.split();
    if (split) {
      const double analytic_s = level.batch.time(*split);
      if ((opt.price_every_recompute_level || gate.pays(memory, analytic_s)) && analytic_s < opt.skip_analytic_above_s) {
        // Priced: a candidate analytically faster than the caller's bound that needs this level's recompute.
        Pricer::Admit admit = [needs = needs_recompute(levels), &level, skip = opt.skip_analytic_above_s](const BatchSplit& s) {
          return level.batch.time(s) < skip && needs(s);
        };
        Pricer pricer(t, layout, level.costs, in, price, memory, opt.partition_ties, std::move(admit), opt.max_priced,
                      kept, cache.scratch_plan);
        price_candidates(level.batch, *split, static_cast<int>(t.pipelines.size()), pricer, opt.skip_analytic_above_s);
        std::vector<CompletedPlan> priced = pricer.take();
        if (!priced.empty()) gate.record(memory, analytic_s);
        for (CompletedPlan& p : priced) plans.push_back(std::move(p));
      }
    }
    memory_free[memory.zero1] = !level.memory_decided(split.has_value());
  }
  return plans;
}

// The largest group_work (one sample) of the template's classes at the least recompute: no plan of the template
// runs faster, at any memory level (every class takes a sample).
double template_floor(const Template& t, LayerTimes& times) {
  double out = 0;
  for (const PipelineTemplate& p : t.pipelines) {
    std::vector<FloorStage> stages;
    for (const StageTemplate& s : p.stages) {
      FloorStage f{s.tp, {}};
      for (const GroupKind& k : s.kinds) f.types.push_back(times.type_id(k.gpu_type));
      stages.push_back(std::move(f));
    }
    out = std::max(out, group_work(times, stages, Recompute::None, 1));
  }
  return out;
}

// A request completion can work on: a cluster, a model, a batch, and a template the cluster can run
// (template_problem: types, widths, EP, GPU counts, packing).
bool usable(const Template& t, const CompletionInput& in) {
  return in.cluster && in.model && in.global_batch > 0 && template_problem(t, *in.cluster, *in.model).empty();
}

}  // namespace

std::vector<CompletedPlan> complete_template(const Template& t, const CompletionInput& in, const PlanPricer& price,
                                             const CompletionOptions& opt) {
  if (!usable(t, in)) return {};
  std::optional<CompletionCache> own;
  CompletionCache& cache = in.cache ? *in.cache : own.emplace(*in.cluster, *in.model);
  if (&cache.impl().cluster != in.cluster || &cache.impl().model != in.model)
    throw std::invalid_argument("complete_template: the cache belongs to another cluster or model");
  // No level of the template could be priced (price_levels' floor, at the least recompute).
  if (opt.skip_analytic_above_s < kInf && template_floor(t, cache.impl().times) >= opt.skip_analytic_above_s) return {};
  const bool replicated = has_replicas(t);
  if (in.prices) in.prices->impl().check(in);
  cache.impl().start_template();
  std::vector<CompletedPlan> plans;
  KeptPrices kept(opt.max_candidates);
  for (const bool by_stage : {false, true}) {
    if (by_stage && !(opt.data_parallel_placement && replicated)) break;
    auto placed = place_template(t, *in.cluster, by_stage);
    if (!placed) continue;
    auto layout = plan_layout(t, std::move(*placed), *in.cluster, *in.model);
    if (!layout) continue;
    if (in.prices) {
      std::map<std::vector<int>, int>& ids = in.prices->impl().layouts;
      layout->id = ids.try_emplace(layout_content(t, *layout), static_cast<int>(ids.size())).first->second;
    }
    for (CompletedPlan& p : price_levels(t, *layout, cache.impl(), in, price, opt, kept)) plans.push_back(std::move(p));
  }
  return best_first(std::move(plans), opt.max_candidates);
}

}  // namespace arachne::planner
