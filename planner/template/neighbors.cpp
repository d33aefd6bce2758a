// Local moves over templates and the best-first local search on them (planner/template/neighbors.h).
#include "planner/template/neighbors.h"

#include <algorithm>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <unordered_set>

#include "planner/template/tokens.h"

namespace arachne::planner {
namespace {

// Collects the moves' results: canonical, runnable, admitted by the token grammar, each once, the start excluded.
class MoveSink {
 public:
  MoveSink(const Template& start, const Cluster& cluster, const ModelConfig& model)
      : moe(model.moe.has_value()), cluster_(cluster), model_(model), types_(type_order(cluster)), grammar_(cluster, model) {
    seen_.insert(canonical(start));
  }
  // Whether the candidate is runnable and admitted (kept unless it was seen before). With `any_count`, the
  // token grammar is not asked: the candidate may have counts no token says (see fill_moves).
  bool add(const Template& candidate, bool any_count = false) {
    Template t = canonical(candidate);
    auto [it, fresh] = seen_.insert(t);
    if (!fresh) return runnable_.count(t) > 0;
    if (!template_problem(t, cluster_, model_).empty() || (!any_count && !grammar_accepts(t))) return false;
    runnable_.insert(t);
    out_.push_back(std::move(t));
    return true;
  }
  // A token form that the grammar admits token by token (the grammar refuses some templates that
  // template_problem accepts; the policy can neither propose nor learn those).
  bool grammar_accepts(const Template& t) const {
    const std::optional<std::vector<int>> ids = encode(t, types_);
    if (!ids) return false;
    TokenGrammar g = grammar_;
    try {
      for (const int id : *ids) g.push(id);
    } catch (const std::invalid_argument&) {
      return false;
    }
    return g.finished();
  }
  const std::vector<std::string>& types() const { return types_; }
  // GPUs of each type in the cluster.
  int gpus_of(const std::string& type) const {
    int n = 0;
    for (const int size : node_sizes_.at(type)) n += size;
    return n;
  }
  // The most GPUs of the type in one node.
  int widest_node(const std::string& type) const {
    const std::vector<int>& sizes = node_sizes_.at(type);
    return sizes.empty() ? 0 : *std::max_element(sizes.begin(), sizes.end());
  }
  const ModelConfig& model() const { return model_; }
  const bool moe;
  std::vector<Template> take() { return std::move(out_); }

 private:
  const Cluster& cluster_;
  const ModelConfig& model_;
  std::vector<std::string> types_;
  TokenGrammar grammar_;
  std::map<std::string, std::vector<int>> node_sizes_ = node_sizes_by_type(cluster_);
  std::unordered_set<Template, TemplateHash> seen_, runnable_;
  std::vector<Template> out_;
};

void class_moves(const Template& t, std::size_t c, MoveSink& sink) {
  const int r = t.pipelines[c].replicas;
  for (const int replicas : {r + 1, r - 1, 2 * r, r % 2 == 0 ? r / 2 : 0}) {
    if (replicas < 1 || replicas == r) continue;
    Template n = t;
    n.pipelines[c].replicas = replicas;
    sink.add(n);
  }
  if (t.pipelines.size() > 1) {
    Template n = t;
    n.pipelines.erase(n.pipelines.begin() + static_cast<long>(c));
    sink.add(n);
  }
  for (const std::string& type : sink.types()) {
    PipelineTemplate copy = t.pipelines[c];
    copy.replicas = 1;
    for (StageTemplate& s : copy.stages) s.kinds = {{type, s.tp_groups()}};
    Template n = t;
    n.pipelines.push_back(copy);
    sink.add(n);
  }
}

// GPUs of each type that the classes other than c use.
std::map<std::string, int> spare_gpus(const Template& t, std::size_t c, const MoveSink& sink) {
  std::map<std::string, int> spare;
  for (const std::string& type : sink.types()) spare[type] = sink.gpus_of(type);
  for (std::size_t o = 0; o < t.pipelines.size(); ++o)
    if (o != c)
      for (const StageTemplate& x : t.pipelines[o].stages)
        for (const GroupKind& k : x.kinds) spare[k.gpu_type] -= t.pipelines[o].replicas * x.tp * k.groups;
  return spare;
}

// The class at as many replicas as the GPUs the other classes leave hold (counting down until the template
// packs into the nodes), at any count: token counts step from 16 to 20, 24, ..., 48, so on a cluster of 58
// free GPUs of a type the grammar stops a one-GPU class at 48 replicas and a three-stage one at 16. Such a
// template has no token form: it is a planning candidate, never a label (labels need tokens).
void fill_moves(const Template& t, std::size_t c, MoveSink& sink) {
  const std::map<std::string, int> spare = spare_gpus(t, c, sink);
  std::map<std::string, int> per_replica;
  for (const StageTemplate& s : t.pipelines[c].stages)
    for (const GroupKind& k : s.kinds) per_replica[k.gpu_type] += s.tp * k.groups;
  int most = std::numeric_limits<int>::max();
  for (const auto& [type, gpus] : per_replica) most = std::min(most, spare.at(type) / gpus);
  for (int replicas = most; replicas >= std::max(1, most - 3); --replicas) {
    if (replicas == t.pipelines[c].replicas) break;
    Template n = t;
    n.pipelines[c].replicas = replicas;
    if (sink.add(n, /*any_count=*/true)) break;
  }
}

// A pipeline class of n identical stages and r replicas reshaped at once, the layers left to completion's
// partition (the same group counts per stage):
//   - at the class's GPUs, TP t' = 2t or t/2 at r replicas, or r' = 2r or r/2 replicas at TP t, with the stage
//     count n t r / (t' r') rounded down;
//   - stages of one TP group, on the GPUs of the stage's type that no other class uses: t' in {t, t/2, 2t}
//     at r replicas and, when the class is the template's only one, at r/2 and one replica, with the most
//     stages they hold (counting down until the template packs into the nodes). Left out for their cost,
//     not their quality: deep pipelines of multi-group stages (completing one costs ~10x a one-group
//     pipeline at 1,024 GPUs: its micro-batch shares; in bench_arachne none of them was the best) and a
//     class folded into one deep pipeline beside other classes (the batch split between a deep and shallow
//     pipelines costs completion ~10x a one-class template on the evaluation's 56-GPU opt-350m cell).
// EP over pipelines keeps the part of its width that divides r', and each shape comes without EP too (every
// stage of the class at once; per-stage EP moves would need a step per stage). One step trades tensor,
// pipeline and data parallelism or fills the free GPUs, where single-stage moves need a step per stage.
void reshape_moves(const Template& t, std::size_t c, MoveSink& sink) {
  const PipelineTemplate& cls = t.pipelines[c];
  const StageTemplate& s = cls.stages.front();
  if (std::any_of(cls.stages.begin(), cls.stages.end(), [&](const StageTemplate& x) { return !(x == s); })) return;
  std::map<std::string, int> spare = spare_gpus(t, c, sink);
  const int n = static_cast<int>(cls.stages.size()), r = cls.replicas;
  auto with_shape = [&](int tp, int replicas, int stages) {
    if (stages < 1 || stages > sink.model().layers) return false;
    Template out = t;
    StageTemplate shaped = s;
    shaped.tp = tp;
    if (s.ep_scope == EpScope::Pipelines) shaped.ep = std::gcd(s.ep, replicas);
    out.pipelines[c].replicas = replicas;
    out.pipelines[c].stages.assign(stages, shaped);
    const bool added = sink.add(out);
    // And without EP over the pipelines: a deeper pipeline holds fewer layers per GPU, so every expert may
    // now fit on each rank, with no all-to-all between pipelines over the NICs.
    if (shaped.ep > 1 && shaped.ep_scope == EpScope::Pipelines) {
      for (StageTemplate& x : out.pipelines[c].stages) x.ep = 1;
      sink.add(out);
    }
    return added;
  };
  // At the class's GPUs: one of TP and replicas changed, the stage count following (rounded down).
  const long gpus = static_cast<long>(n) * s.tp * r;
  for (const auto& [tp, replicas] : {std::pair{s.tp * 2, r}, std::pair{s.tp % 2 == 0 ? s.tp / 2 : 0, r},
                                     std::pair{s.tp, 2 * r}, std::pair{s.tp, r % 2 == 0 ? r / 2 : 0}})
    if (tp >= 1 && replicas >= 1) with_shape(tp, replicas, static_cast<int>(std::max(1L, gpus / (static_cast<long>(tp) * replicas))));
  // On the free GPUs: at r, r/2 and one replica, the most stages of one TP group that pack.
  if (s.tp_groups() > 1) return;
  const bool alone = t.pipelines.size() == 1;
  for (const int replicas : {r, alone && r % 2 == 0 ? r / 2 : 0, alone && r > 2 ? 1 : 0}) {
    for (const int tp : {s.tp, s.tp % 2 == 0 ? s.tp / 2 : 0, s.tp * 2}) {
      if (replicas < 1 || tp < 1) continue;
      int most = sink.model().layers;
      for (const GroupKind& k : s.kinds) most = std::min(most, spare[k.gpu_type] / (tp * k.groups * replicas));
      for (int stages = most; stages >= std::max(1, most - 3); --stages)
        if (with_shape(tp, replicas, stages)) break;
    }
  }
}

// Data parallelism moved between replicas and TP groups: r identical pipelines folded into r/d pipelines
// whose every stage holds d times the TP groups (d = r: one pipeline of device-group stages, the shape of
// Metis's plans, Um et al. USENIX ATC'24), and back: a class whose group counts share a factor g unfolded
// into g times the replicas with 1/g the groups (d, g: all of it and half). The GPUs stay the same; what
// changes is whether a stage's data-parallel copies share one micro-batch schedule and layer partition. EP
// over pipelines keeps the part of its width that divides the new replica count. At any count.
void fold_moves(const Template& t, std::size_t c, MoveSink& sink) {
  const PipelineTemplate& cls = t.pipelines[c];
  auto scaled = [&](int replicas, int groups_mul, int groups_div) {
    Template n = t;
    PipelineTemplate& p = n.pipelines[c];
    p.replicas = replicas;
    for (StageTemplate& s : p.stages) {
      for (GroupKind& k : s.kinds) k.groups = k.groups * groups_mul / groups_div;
      if (s.ep_scope == EpScope::Pipelines) s.ep = std::gcd(s.ep, replicas);
    }
    sink.add(n, /*any_count=*/true);
  };
  const int r = cls.replicas;
  for (const int d : {r, r % 2 == 0 ? 2 : 0})
    if (d > 1) scaled(r / d, d, 1);
  const int g = cls.groups_common_factor();
  for (const int d : {g, g % 2 == 0 ? 2 : 0})
    if (d > 1) scaled(r * d, 1, d);
}

// Idle GPUs taken up: per GPU type with GPUs that no class uses, (a) spread as more TP groups over the
// stages of the class that hold the type (each such stage the same number more; all on the first such stage
// when that share is zero), or (b) when the class holds no stage of the type, a stage of the type appended,
// its TP the class's narrowest width that divides the heads, as many groups as the idle GPUs hold, and one
// put first at the widest TP that divides the heads and that one node of the type holds.
// Counting down until the template packs into the nodes. At any count: a planning candidate, not a label.
void idle_moves(const Template& t, std::size_t c, MoveSink& sink) {
  const std::map<std::string, int> idle = spare_gpus(t, t.pipelines.size(), sink);
  const PipelineTemplate& cls = t.pipelines[c];
  for (const auto& [type, free] : idle) {
    if (free < 1) continue;
    std::vector<std::size_t> holders;
    for (std::size_t j = 0; j < cls.stages.size(); ++j)
      for (const GroupKind& k : cls.stages[j].kinds)
        if (k.gpu_type == type) holders.push_back(j);
    auto with_more = [&, &type = type](int per_stage, bool first_only) {  // clang < 16 cannot capture a binding
      Template n = t;
      for (const std::size_t j : holders) {
        StageTemplate& s = n.pipelines[c].stages[j];
        for (GroupKind& k : s.kinds)
          if (k.gpu_type == type) k.groups += per_stage;
        if (first_only) break;
      }
      return sink.add(n, /*any_count=*/true);
    };
    if (!holders.empty()) {
      long gpus_per_group = 0;  // GPUs one more group on every holder takes, over the replicas
      for (const std::size_t j : holders) gpus_per_group += static_cast<long>(cls.stages[j].tp) * cls.replicas;
      const int each = static_cast<int>(free / gpus_per_group);
      if (each > 0) {
        for (int e = each; e >= std::max(1, each - 3); --e)
          if (with_more(e, false)) break;
      } else {
        const int most = free / (cls.stages[holders.front()].tp * cls.replicas);
        for (int e = most; e >= std::max(1, most - 3); --e)
          if (with_more(e, true)) break;
      }
      continue;
    }
    if (static_cast<int>(cls.stages.size()) >= sink.model().layers) continue;
    int tp = 0;
    for (const StageTemplate& s : cls.stages)
      if (tp_divides_heads(s.tp, sink.model()) && (tp == 0 || s.tp < tp)) tp = s.tp;
    if (tp == 0) continue;
    // The first stage's width (when wider than the narrowest): a slow type as few wide groups that take the
    // embedding, as Metis places them.
    int wide = tp;
    for (int w = tp * 2; w <= std::min(sink.widest_node(type), free / cls.replicas); w *= 2)
      if (tp_divides_heads(w, sink.model())) wide = w;
    for (const int width : wide > tp ? std::vector<int>{tp, wide} : std::vector<int>{tp}) {
      const int most = free / (width * cls.replicas);
      for (int groups = most; groups >= std::max(1, most - 3); --groups) {
        Template n = t;
        StageTemplate added = cls.stages.back();
        added.tp = width;
        added.kinds = {{type, groups}};
        auto& stages = n.pipelines[c].stages;
        if (width == tp) stages.push_back(added);
        else stages.insert(stages.begin(), added);
        if (sink.add(n, /*any_count=*/true)) break;
      }
    }
  }
}

// A deep class split into two classes of about half its depth each (the even-numbered stages and the
// odd-numbered ones, so that both keep the class's mix of GPU types in its order), at the class's replica
// count: pipelines of different depths and GPU mixes, as FlashFlex lays out large models on heterogeneous
// clusters (Yan et al. arXiv:2409.01143), whose shallower pipelines bubble less and whose layer split per
// stage is finer (more layers per stage). Only for classes of at least four stages.
void split_depth_moves(const Template& t, std::size_t c, MoveSink& sink) {
  const PipelineTemplate& cls = t.pipelines[c];
  if (cls.stages.size() < 4) return;
  PipelineTemplate even = cls, odd = cls;
  even.stages.clear();
  odd.stages.clear();
  for (std::size_t j = 0; j < cls.stages.size(); ++j) (j % 2 == 0 ? even : odd).stages.push_back(cls.stages[j]);
  Template n = t;
  n.pipelines[c] = even;
  n.pipelines.push_back(odd);
  sink.add(n, /*any_count=*/true);
}

// A run of two or more identical consecutive stages in a class of mixed stages reshaped as a whole at its
// GPUs: TP half as wide over twice the stages, or twice as wide over half of them (the class-wide reshape
// above, for the part of a pipeline on one GPU type: e.g. four TP-4 stages of the fast GPUs becoming eight
// TP-2 stages, which single-stage moves reach only one stage at a time, each step on its own slower).
void run_moves(const Template& t, std::size_t c, MoveSink& sink) {
  const std::vector<StageTemplate>& stages = t.pipelines[c].stages;
  for (std::size_t a = 0, b = 0; a < stages.size(); a = b) {
    for (b = a + 1; b < stages.size() && stages[b] == stages[a]; ++b) {}
    const std::size_t run = b - a;
    if (run < 2 || run == stages.size()) continue;  // a whole class of identical stages: reshape_moves
    const StageTemplate& s = stages[a];
    for (const auto& [tp, count] : {std::pair{s.tp % 2 == 0 ? s.tp / 2 : 0, 2 * run},
                                    std::pair{s.tp * 2, run % 2 == 0 ? run / 2 : 0}}) {
      if (tp < 1 || count < 1 || static_cast<int>(stages.size() - run + count) > sink.model().layers) continue;
      Template n = t;
      auto& out = n.pipelines[c].stages;
      StageTemplate shaped = s;
      shaped.tp = tp;
      out.erase(out.begin() + static_cast<long>(a), out.begin() + static_cast<long>(b));
      out.insert(out.begin() + static_cast<long>(a), count, shaped);
      sink.add(n);
    }
  }
}

// The GPU type of a stage whose groups are all of one type; empty for a stage of several types.
const std::string& single_type(const StageTemplate& s) {
  static const std::string none;
  return s.kinds.size() == 1 ? s.kinds.front().gpu_type : none;
}

// A block of two or more consecutive stages of one GPU type (any TP widths), in a class of several types,
// moved as a whole to the front or the end of its pipeline: the order of the device groups, which Metis
// searches over every permutation of the types (Um et al. USENIX ATC'24; SamsungLabs/Metis
// search_space/device_group.py), decides which type holds the embedding and which the head and the logits,
// and how many micro-batches 1F1B keeps in flight on each type (the first stage the most: Narayanan et al.
// SC'21 §2.2). One stage moves one at a time (stage_moves), and moving a block so takes as many steps,
// each on its own slower.
void block_moves(const Template& t, std::size_t c, MoveSink& sink) {
  const std::vector<StageTemplate>& stages = t.pipelines[c].stages;
  for (std::size_t a = 0, b = 0; a < stages.size(); a = b) {
    const std::string& type = single_type(stages[a]);
    for (b = a + 1; !type.empty() && b < stages.size() && single_type(stages[b]) == type; ++b) {}
    if (type.empty() || b - a < 2 || b - a == stages.size()) continue;
    for (const bool to_front : {true, false}) {
      if ((to_front && a == 0) || (!to_front && b == stages.size())) continue;
      Template n = t;
      std::vector<StageTemplate>& out = n.pipelines[c].stages;
      out.erase(out.begin() + static_cast<long>(a), out.begin() + static_cast<long>(b));
      out.insert(to_front ? out.begin() : out.end(), stages.begin() + static_cast<long>(a), stages.begin() + static_cast<long>(b));
      sink.add(n);
    }
  }
}

void stage_moves(const Template& t, std::size_t c, std::size_t j, MoveSink& sink) {
  const StageTemplate& s = t.pipelines[c].stages[j];
  auto with_stage = [&](const StageTemplate& changed) {
    Template n = t;
    n.pipelines[c].stages[j] = changed;
    sink.add(n);
  };
  // TP twice or half as wide, at the same GPUs (groups halved or doubled) and at the same group count.
  for (const bool wider : {true, false}) {
    const int tp = wider ? s.tp * 2 : s.tp / 2;
    if (tp < 1 || (!wider && s.tp % 2 != 0)) continue;
    StageTemplate same_groups = s;
    same_groups.tp = tp;
    with_stage(same_groups);
    StageTemplate same_gpus = same_groups;
    bool ok = true;
    for (GroupKind& k : same_gpus.kinds) {
      if (wider && k.groups % 2 != 0) ok = false;
      k.groups = wider ? k.groups / 2 : k.groups * 2;
    }
    if (ok) with_stage(same_gpus);
  }
  // The stage split in two stages of half the TP width on its GPUs, or merged with an identical next stage
  // into one of twice the width.
  if (s.tp % 2 == 0) {
    Template n = t;
    auto& stages = n.pipelines[c].stages;
    stages[j].tp /= 2;
    stages.insert(stages.begin() + static_cast<long>(j), stages[j]);
    sink.add(n);
  }
  if (j + 1 < t.pipelines[c].stages.size() && t.pipelines[c].stages[j + 1] == s) {
    Template n = t;
    auto& stages = n.pipelines[c].stages;
    stages[j].tp *= 2;
    stages.erase(stages.begin() + static_cast<long>(j) + 1);
    sink.add(n);
  }
  // The stage's TP groups split over two stages at its TP width (each kind's groups halved, the first stage
  // taking the odd one), on its GPUs; or merged with the next stage of the same TP into one stage holding
  // both stages' groups. A deeper pipeline on the same GPUs holds fewer layers per GPU: what memory-bound
  // stages of many groups need (e.g. MoE experts on small GPUs).
  if (s.tp_groups() >= 2) {
    StageTemplate first = s, second = s;
    first.kinds.clear(), second.kinds.clear();
    for (const GroupKind& k : s.kinds) {
      if (const int a = (k.groups + 1) / 2; a > 0) first.kinds.push_back({k.gpu_type, a});
      if (const int b = k.groups / 2; b > 0) second.kinds.push_back({k.gpu_type, b});
    }
    Template n = t;
    auto& stages = n.pipelines[c].stages;
    stages[j] = second;
    stages.insert(stages.begin() + static_cast<long>(j), first);
    sink.add(n);
  }
  if (j + 1 < t.pipelines[c].stages.size() && t.pipelines[c].stages[j + 1].tp == s.tp) {
    Template n = t;
    auto& stages = n.pipelines[c].stages;
    for (const GroupKind& k : stages[j + 1].kinds) {
      auto same = std::find_if(stages[j].kinds.begin(), stages[j].kinds.end(),
                               [&](const GroupKind& x) { return x.gpu_type == k.gpu_type; });
      if (same != stages[j].kinds.end()) same->groups += k.groups;
      else stages[j].kinds.push_back(k);
    }
    stages.erase(stages.begin() + static_cast<long>(j) + 1);
    sink.add(n);
  }
  // The stage moved to the front or the end of its pipeline (which stage holds the embedding or the head,
  // and how many micro-batches it keeps in flight under 1F1B, depend on its place).
  for (const std::size_t to : {std::size_t{0}, t.pipelines[c].stages.size() - 1}) {
    if (to == j) continue;
    Template n = t;
    auto& stages = n.pipelines[c].stages;
    stages.erase(stages.begin() + static_cast<long>(j));
    stages.insert(stages.begin() + static_cast<long>(to), s);
    sink.add(n);
  }
  // The stage split in two identical stages, or removed.
  {
    Template n = t;
    auto& stages = n.pipelines[c].stages;
    stages.insert(stages.begin() + static_cast<long>(j), s);
    sink.add(n);
  }
  if (t.pipelines[c].stages.size() > 1) {
    Template n = t;
    auto& stages = n.pipelines[c].stages;
    stages.erase(stages.begin() + static_cast<long>(j));
    sink.add(n);
  }
  // MoE: EP twice or half as wide, the other scope, uneven experts toggled.
  if (sink.moe) {
    for (const int ep : {s.ep * 2, s.ep % 2 == 0 ? s.ep / 2 : 0}) {
      if (ep < 1) continue;
      StageTemplate m = s;
      m.ep = ep;
      with_stage(m);
    }
    StageTemplate scope = s;
    scope.ep_scope = s.ep_scope == EpScope::Stage ? EpScope::Pipelines : EpScope::Stage;
    with_stage(scope);
    StageTemplate uneven = s;
    uneven.uneven_experts = !s.uneven_experts;
    with_stage(uneven);
  }
}

void kind_moves(const Template& t, std::size_t c, std::size_t j, std::size_t k, MoveSink& sink) {
  const GroupKind& kind = t.pipelines[c].stages[j].kinds[k];
  auto with_kinds = [&](const std::vector<GroupKind>& kinds) {
    Template n = t;
    n.pipelines[c].stages[j].kinds = kinds;
    sink.add(n);
  };
  const std::vector<GroupKind>& kinds = t.pipelines[c].stages[j].kinds;
  for (const int groups : {kind.groups + 1, kind.groups - 1}) {
    std::vector<GroupKind> n = kinds;
    if (groups >= 1) {
      n[k].groups = groups;
    } else if (kinds.size() > 1) {
      n.erase(n.begin() + static_cast<long>(k));
    } else {
      continue;
    }
    with_kinds(n);
  }
  for (const std::string& type : sink.types()) {
    if (type == kind.gpu_type) continue;
    std::vector<GroupKind> moved = kinds;
    moved[k].gpu_type = type;
    with_kinds(moved);
    std::vector<GroupKind> added = kinds;
    added.push_back({type, 1});
    with_kinds(added);
  }
}

// Whether stage j of the stages lies inside a run of identical consecutive stages (not at either end).
bool inside_run(const std::vector<StageTemplate>& stages, std::size_t j) {
  return j > 0 && j + 1 < stages.size() && stages[j - 1] == stages[j] && stages[j + 1] == stages[j];
}

}  // namespace

std::vector<Template> template_neighbors(const Template& start, const Cluster& cluster, const ModelConfig& model,
                                         StageMoves stages) {
  const Template t = canonical(start);
  MoveSink sink(t, cluster, model);
  for (std::size_t c = 0; c < t.pipelines.size(); ++c) {
    class_moves(t, c, sink);
    fill_moves(t, c, sink);
    reshape_moves(t, c, sink);
    fold_moves(t, c, sink);
    idle_moves(t, c, sink);
    split_depth_moves(t, c, sink);
    run_moves(t, c, sink);
    block_moves(t, c, sink);
    for (std::size_t j = 0; j < t.pipelines[c].stages.size(); ++j) {
      if (stages == StageMoves::RunEnds && inside_run(t.pipelines[c].stages, j)) continue;
      stage_moves(t, c, j, sink);
      for (std::size_t k = 0; k < t.pipelines[c].stages[j].kinds.size(); ++k) kind_moves(t, c, j, k, sink);
    }
  }
  return sink.take();
}

std::vector<Template> fold_neighbors(const Template& start, const Cluster& cluster, const ModelConfig& model) {
  const Template t = canonical(start);
  MoveSink sink(t, cluster, model);
  for (std::size_t c = 0; c < t.pipelines.size(); ++c) fold_moves(t, c, sink);
  return sink.take();
}

std::vector<PricedTemplate> local_search(const std::vector<Template>& start, const Cluster& cluster,
                                         const ModelConfig& model, const TemplatePricer& price,
                                         const LocalSearchOptions& opt) {
  struct Entry {
    PricedTemplate p;
    long order = 0;
    bool expanded = false;
    bool secondary = false;  // a start of opt.secondary
  };
  std::vector<Entry> priced;
  std::unordered_set<Template, TemplateHash> tried;
  long count = 0, cap = std::numeric_limits<long>::max();
  auto try_template = [&](const Template& t) {
    if (opt.max_priced > 0 && count >= opt.max_priced) return;
    if (count >= cap) return;
    Template c = canonical(t);
    if (!tried.insert(c).second) return;
    ++count;
    const bool secondary = opt.secondary != nullptr && opt.secondary->count(c) > 0;
    if (const std::optional<double> s = price(c)) priced.push_back({{std::move(c), *s}, count, false, secondary});
  };
  auto best_first = [](const Entry& a, const Entry& b) {
    return a.p.priced_s != b.p.priced_s ? a.p.priced_s < b.p.priced_s : a.order < b.order;
  };
  auto best_price = [&] {
    double best = std::numeric_limits<double>::infinity();
    for (const Entry& e : priced) best = std::min(best, e.p.priced_s);
    return best;
  };
  for (const Template& t : start) try_template(t);
  double before_round = std::numeric_limits<double>::infinity(), after_round = best_price();
  long required = 0;  // templates priced by the end of the required rounds
  for (int round = 0;; ++round) {
    const bool few = count < opt.extend_below;
    const bool gaining = opt.extend_while_gain > 0 && after_round < before_round * (1 - opt.extend_while_gain);
    const bool extend = opt.rounds > 0 && ((round < opt.max_rounds && (few || gaining)) ||
                                           (round < opt.max_gaining_rounds && gaining));
    if (round >= opt.rounds && !extend) break;
    if (round == opt.rounds) required = count;
    if (round >= opt.rounds && !few && opt.extend_max_factor > 0) {
      cap = static_cast<long>(opt.extend_max_factor * static_cast<double>(required));
      if (count >= cap) break;
    }
    std::stable_sort(priced.begin(), priced.end(), best_first);
    // The `width` best templates not expanded yet; in the first round with a secondary source, the `width`
    // best other starts and the best secondary start.
    const bool split = round == 0 && opt.secondary != nullptr;
    std::vector<Template> frontier;
    int primary = 0, secondary = 0;
    for (Entry& e : priced) {
      if (primary >= opt.width && (!split || secondary >= 1)) break;
      if (e.expanded) continue;
      const bool is_secondary = split && e.secondary;
      if (is_secondary ? secondary >= 1 : primary >= opt.width) continue;
      ++(is_secondary ? secondary : primary);
      e.expanded = true;
      frontier.push_back(e.p.t);
    }
    if (frontier.empty()) break;
    for (const Template& f : frontier)
      for (const Template& n : template_neighbors(f, cluster, model, opt.stage_moves)) try_template(n);
    before_round = after_round;
    after_round = best_price();
  }
  std::stable_sort(priced.begin(), priced.end(), best_first);
  std::vector<PricedTemplate> out;
  out.reserve(priced.size());
  for (Entry& e : priced) out.push_back(std::move(e.p));
  return out;
}

}  // namespace arachne::planner
