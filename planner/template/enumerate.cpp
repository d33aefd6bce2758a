// Exhaustive enumeration of the template token space and the heuristic template generator
// (planner/template/enumerate.h).
#include "planner/template/enumerate.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <map>
#include <cmath>
#include <numeric>
#include <optional>
#include <set>

#include "planner/common/profile.h"
#include "planner/template/tokens.h"
#include "sim/core/splitmix.h"

namespace arachne::planner {

// ------------------------------------------------------------------ exhaustive enumeration
namespace {

using Phase = TokenGrammar::Phase;

// The restricted mode's extra conditions on the next token (the grammar has checked the rest).
class Restriction {
 public:
  Restriction(const Cluster& cluster, const std::vector<std::string>& types, const EnumerationLimits& limits) : limits_(limits) {
    std::map<std::string, int> gpus;
    for (const Node& n : cluster.nodes) gpus[cluster.groups[n.group].gpu] += n.gpus;
    for (const std::string& t : types) type_gpus_.push_back(gpus[t]);
  }

  bool allows(const TokenGrammar::State& s, const Token& t) const {
    const bool stage_end = s.phase == Phase::AfterGroups || s.phase == Phase::AfterScope || s.phase == Phase::AfterUneven;
    if (t.kind == TokenKind::Pipeline && stage_end && limits_.max_classes > 0 && s.classes >= limits_.max_classes) return false;
    if (t.kind == TokenKind::Stage && limits_.max_stages > 0 && s.stages >= limits_.max_stages) return false;
    if (t.kind == TokenKind::Type && s.phase == Phase::AfterGroups && limits_.max_types_per_stage > 0 &&
        s.stage_kinds >= limits_.max_types_per_stage)
      return false;
    if (t.kind == TokenKind::Type && s.phase == Phase::AfterGroups && limits_.type_blocks) return false;
    if (limits_.type_blocks && s.stages > 1 && !same_ep_as_first_stage(s, t)) return false;
    if (t.kind == TokenKind::Count && s.phase == Phase::AfterType) {
      if (limits_.divisor_counts && type_gpus_[s.last_type] % (s.replicas * s.tp * t.value) != 0) return false;
      if (limits_.type_blocks && !continues_blocks(s, t.value)) return false;
    }
    return true;
  }

 private:
  // The current class's earlier stages as (type, tp, groups) of their first kind, from the body's tokens.
  static std::vector<std::array<int, 3>> earlier_stages(const std::vector<int>& body) {
    std::vector<std::array<int, 3>> out;
    int tp = 0, type = -1;
    bool first_kind = false;
    for (const int id : body) {
      const Token t = token_of(id);
      if (t.kind == TokenKind::Stage) first_kind = true;
      if (t.kind == TokenKind::Tp) tp = t.value;
      if (t.kind == TokenKind::Type) type = t.value;
      if (t.kind == TokenKind::Count && first_kind) {
        out.push_back({type, tp, t.value});
        first_kind = false;
      }
    }
    return out;
  }

  // The EP clause (ep, scope) of the current class's first stage, from the body's tokens.
  static std::array<int, 2> first_stage_ep(const std::vector<int>& body) {
    std::array<int, 2> ep{1, static_cast<int>(EpScope::Pipelines)};
    for (size_t i = 1; i < body.size(); ++i) {
      const Token t = token_of(body[i]);
      if (t.kind == TokenKind::Stage) break;
      if (t.kind == TokenKind::Ep) ep[0] = t.value;
      if (t.kind == TokenKind::Scope) ep[1] = t.value;
    }
    return ep;
  }

  // One EP clause for every stage of a pipeline (Megatron-Core has one expert-parallel size).
  static bool same_ep_as_first_stage(const TokenGrammar::State& s, const Token& t) {
    const std::array<int, 2> first = first_stage_ep(s.body);
    const bool ends_stage = t.kind == TokenKind::Stage || t.kind == TokenKind::Pipeline || t.kind == TokenKind::Eos;
    if (s.phase == Phase::AfterGroups) {
      if (t.kind == TokenKind::Ep) return t.value == first[0];
      if (ends_stage) return first[0] == 1;
    }
    if (s.phase == Phase::AfterEp && t.kind == TokenKind::Scope) return t.value == first[1];
    return true;
  }

  // The stage being completed (last_type, tp, groups) continues the last block or opens a new type's block.
  static bool continues_blocks(const TokenGrammar::State& s, int groups) {
    const auto earlier = earlier_stages(s.body);
    if (earlier.empty()) return true;
    const auto& last = earlier.back();
    if (last[0] == s.last_type) return last[1] == s.tp && last[2] == groups;
    for (const auto& e : earlier)
      if (e[0] == s.last_type) return false;
    return true;
  }

  EnumerationLimits limits_;
  std::vector<int> type_gpus_;
};

// Depth-first walk over TokenGrammar, ids ascending at every step.
class Walker {
 public:
  Walker(const Restriction& r, const EnumerationLimits& limits, const std::function<bool(const std::vector<int>&)>& visit)
      : restriction_(r), limits_(limits), visit_(visit), start_(std::chrono::steady_clock::now()) {}

  TokenWalk run(const TokenGrammar& root) {
    walk(root);
    result_.complete = !stopped_;
    return result_;
  }

 private:
  const Restriction& restriction_;
  const EnumerationLimits& limits_;
  const std::function<bool(const std::vector<int>&)>& visit_;
  std::chrono::steady_clock::time_point start_;
  TokenWalk result_;
  bool stopped_ = false;

  bool out_of_time() const {
    if (limits_.max_wall_s <= 0 || result_.states % 256 != 0) return false;
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count() > limits_.max_wall_s;
  }

  void emit(const TokenGrammar& g) {
    ++result_.templates;
    if (!visit_(g.tokens()) || (limits_.max_templates > 0 && result_.templates >= limits_.max_templates)) stopped_ = true;
  }

  void walk(const TokenGrammar& g) {
    ++result_.states;
    if (out_of_time()) stopped_ = true;
    if (stopped_) return;
    if (g.finished()) return emit(g);
    for (const int id : g.allowed()) {
      if (!restriction_.allows(g.state(), token_of(id))) continue;
      TokenGrammar next = g;
      next.push(id);
      walk(next);
      if (stopped_) return;
    }
  }
};

}  // namespace

std::vector<Template> sample_templates(const Cluster& cluster, const ModelConfig& model, const EnumerationLimits& limits,
                                       int count, std::uint64_t seed) {
  const TokenGrammar root(cluster, model);
  const Restriction restriction(cluster, root.types(), limits);
  const std::vector<std::string> order = type_order(cluster);
  SplitMix64 rng(seed);
  std::vector<Template> out;
  std::set<Template> seen;
  const long attempts = 20L * count;
  for (long a = 0; a < attempts && static_cast<int>(out.size()) < count; ++a) {
    TokenGrammar g = root;
    while (!g.finished()) {
      std::vector<int> next;
      for (const int id : g.allowed())
        if (restriction.allows(g.state(), token_of(id))) next.push_back(id);
      if (next.empty()) break;  // the restriction closed every way on: draw again
      g.push(next[static_cast<std::size_t>(rng.below(next.size()))]);
    }
    if (!g.finished()) continue;
    Template t = decode(g.tokens(), order);
    if (seen.insert(t).second) out.push_back(std::move(t));
  }
  return out;
}

TokenWalk walk_template_tokens(const Cluster& cluster, const ModelConfig& model, const EnumerationLimits& limits,
                               const std::function<bool(const std::vector<int>&)>& visit) {
  const TokenGrammar root(cluster, model);
  const Restriction restriction(cluster, root.types(), limits);
  return Walker(restriction, limits, visit).run(root);
}

Enumeration enumerate_templates(const Cluster& cluster, const ModelConfig& model, const EnumerationLimits& limits) {
  Enumeration out;
  const std::vector<std::string> order = type_order(cluster);
  const TokenWalk w = walk_template_tokens(cluster, model, limits, [&](const std::vector<int>& ids) {
    out.templates.push_back(decode(ids, order));
    return true;
  });
  out.complete = w.complete;
  out.states = w.states;
  return out;
}

// ------------------------------------------------------------------ heuristic templates
namespace {

struct TypeInfo {
  std::string name;
  std::vector<int> nodes;  // GPUs per node
  double peak = 0;         // FLOP/s
  int node_tp = 1;         // widest token TP width that fits a node and divides the heads
};

// Per GPU type, fastest peak FLOP/s first (ties by name).
std::vector<TypeInfo> types_by_speed(const Cluster& cluster, const ModelConfig& model, const Profiler& prof) {
  std::vector<TypeInfo> out;
  for (const auto& [name, nodes] : node_sizes_by_type(cluster)) {
    TypeInfo t{name, nodes, prof.peak_flops(name), 1};
    const int largest = *std::max_element(nodes.begin(), nodes.end());
    for (const int w : kTpWidths)
      if (w <= largest && tp_divides_heads(w, model)) t.node_tp = w;
    out.push_back(std::move(t));
  }
  std::stable_sort(out.begin(), out.end(), [](const TypeInfo& a, const TypeInfo& b) { return a.peak > b.peak; });
  return out;
}

// TP groups of width tp the type's nodes hold.
int group_capacity(const TypeInfo& t, int tp) {
  int n = 0;
  for (const int g : t.nodes) n += g / tp;
  return n;
}

// The largest token count not above n (0 when n < 1).
int token_count_at_most(int n) {
  int best = 0;
  for (const int c : kCounts)
    if (c <= n) best = c;
  return best;
}

// One stage of a candidate pipeline: its type and TP width, its TP groups and its layers.
struct StagePlan {
  const TypeInfo* type;
  int tp;
  int groups;
  double weight;  // share of the layers (peak FLOP/s of the stage)
};

// Whether every stage fits in memory at micro-batch 1 under 1F1B (stage j keeps pp - j micro-batches,
// Narayanan et al. SC'21 §2.2), layers split in proportion to the stages' weights; without recompute,
// else with full recompute.
bool pipeline_fits(const std::vector<StagePlan>& stages, const ModelConfig& model, const Profiler& prof) {
  const int pp = static_cast<int>(stages.size());
  if (pp < 1 || pp > model.layers) return false;
  double total = 0;
  for (const StagePlan& s : stages) total += s.weight;
  std::vector<int> bounds{0};
  double acc = 0;
  for (int j = 0; j < pp; ++j) {
    acc += stages[j].weight;
    const int remaining_stages = pp - 1 - j;
    int end = j + 1 == pp ? model.layers : static_cast<int>(std::lround(model.layers * acc / total));
    end = std::clamp(end, bounds.back() + 1, model.layers - remaining_stages);
    bounds.push_back(end);
  }
  for (const Recompute rc : {Recompute::None, Recompute::Full}) {
    bool all = true;
    for (int j = 0; j < pp && all; ++j) {
      const ProfileKey key{stages[j].type->name, stages[j].tp, 1.0, rc, false};
      all = prof.stage_memory_bytes(bounds[j], bounds[j + 1], key, pp - j) <= prof.gpu_memory_bytes(stages[j].type->name);
    }
    if (all) return true;
  }
  return false;
}

// Megatron-Core: EP divides the data-parallel degree and the expert count (parallel_state.py).
int pipelines_ep(const ModelConfig& model, int replicas) {
  if (!model.moe) return 1;
  int ep = 1;
  for (const int e : kEpWidths)
    if (model.moe->experts % e == 0 && replicas % e == 0) ep = e;
  return ep;
}

PipelineTemplate make_class(const std::vector<StagePlan>& stages, int replicas, const ModelConfig& model) {
  PipelineTemplate p;
  p.replicas = replicas;
  const int ep = pipelines_ep(model, replicas);
  for (const StagePlan& s : stages) {
    StageTemplate st;
    st.tp = s.tp;
    st.kinds = {{s.type->name, s.groups}};
    st.ep = ep;
    p.stages.push_back(std::move(st));
  }
  return p;
}

// Rule 1 for one type and TP width: the shallowest pipeline that fits, as many replicas as fit.
std::optional<PipelineTemplate> homogeneous(const TypeInfo& t, int tp, const ModelConfig& model, const Profiler& prof) {
  const int groups = group_capacity(t, tp);
  for (int pp = 1; pp <= std::min(model.layers, groups); ++pp) {
    const std::vector<StagePlan> stages(pp, StagePlan{&t, tp, 1, 1.0});
    if (!pipeline_fits(stages, model, prof)) continue;
    const int replicas = token_count_at_most(groups / pp);
    if (replicas < 1) return std::nullopt;
    return make_class(stages, replicas, model);
  }
  return std::nullopt;
}

// Rule 1's TP widths for a type: the node's, then the narrowest with which some depth fits.
std::vector<PipelineTemplate> homogeneous_for_type(const TypeInfo& t, const ModelConfig& model, const Profiler& prof) {
  std::vector<PipelineTemplate> out;
  if (auto p = homogeneous(t, t.node_tp, model, prof)) out.push_back(*p);
  for (const int tp : kTpWidths) {
    if (tp >= t.node_tp || !tp_divides_heads(tp, model)) continue;
    if (auto p = homogeneous(t, tp, model, prof)) {
      out.push_back(*p);
      break;
    }
  }
  return out;
}

// Rule 3: one class over all types, m stages per type, r replicas.
std::optional<PipelineTemplate> speed_ordered(const std::vector<TypeInfo>& types, int m, int r, const ModelConfig& model,
                                              const Profiler& prof) {
  std::vector<StagePlan> stages;
  for (const TypeInfo& t : types) {
    const int per_stage = token_count_at_most(group_capacity(t, t.node_tp) / r / m);
    if (per_stage < 1) return std::nullopt;
    for (int j = 0; j < m; ++j) stages.push_back({&t, t.node_tp, per_stage, t.peak * t.node_tp * per_stage});
  }
  if (!pipeline_fits(stages, model, prof)) return std::nullopt;
  return make_class(stages, r, model);
}

class Collector {
 public:
  Collector(const Cluster& c, const ModelConfig& m, int k) : cluster_(c), model_(m), k_(k), order_(type_order(c)) {}
  bool full() const { return static_cast<int>(out_.size()) >= k_; }
  void add(Template t) {
    t = canonical(std::move(t));
    if (full() || !template_problem(t, cluster_, model_).empty() || !encode(t, order_) || !seen_.insert(t).second) return;
    out_.push_back(std::move(t));
  }
  std::vector<Template> take() { return std::move(out_); }

 private:
  const Cluster& cluster_;
  const ModelConfig& model_;
  int k_;
  std::vector<std::string> order_;
  std::set<Template> seen_;
  std::vector<Template> out_;
};

}  // namespace

std::vector<Template> heuristic_templates(const Cluster& cluster, const ModelConfig& model, int k) {
  Collector c(cluster, model, k);
  if (k < 1 || cluster.nodes.empty()) return {};
  const Profiler prof(cluster, model);
  const std::vector<TypeInfo> types = types_by_speed(cluster, model, prof);
  // Rule 1.
  Template all_types;
  for (const TypeInfo& t : types) {
    const std::vector<PipelineTemplate> ps = homogeneous_for_type(t, model, prof);
    for (const PipelineTemplate& p : ps) c.add(Template{{p}});
    if (!ps.empty()) all_types.pipelines.push_back(ps.front());
  }
  // Rule 2.
  if (all_types.pipelines.size() > 1) c.add(all_types);
  // Rule 3.
  for (const int m : {1, 2, 4, 8})
    for (int r = 1; r <= kCounts.back() && !c.full(); r *= 2)
      if (auto p = speed_ordered(types, m, r, model, prof)) c.add(Template{{*p}});
  return c.take();
}

}  // namespace arachne::planner
