// Exhaustive enumeration of the template token space and the heuristic template generator
// (planner/template/enumerate.h).
#include "planner/template/enumerate.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <map>
#include <cmath>
#include <limits>
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

// The widest token TP width of at most `gpus` GPUs that divides the heads (1 at least).
int widest_tp(int gpus, const ModelConfig& model) {
  int tp = 1;
  for (const int w : kTpWidths)
    if (w <= gpus && tp_divides_heads(w, model)) tp = w;
  return tp;
}

// The global batch in samples: `global_batch`, or the model's when it is 0.
long batch_or_model(long global_batch, const ModelConfig& model) { return global_batch > 0 ? global_batch : model.global_batch; }

// Per GPU type, fastest peak FLOP/s first; among equal peaks the most HBM bandwidth first (the simulator's
// memory-bound kernels run at hbm_bw, sim/model/compute_time.cpp: A100-80's 2.0 TB/s make its layers faster
// than A100-40's 1.6 TB/s), then by name.
std::vector<TypeInfo> types_by_speed(const Cluster& cluster, const ModelConfig& model, const Profiler& prof) {
  std::vector<TypeInfo> out;
  for (const auto& [name, nodes] : node_sizes_by_type(cluster)) {
    const int largest = *std::max_element(nodes.begin(), nodes.end());
    out.push_back(TypeInfo{name, nodes, prof.peak_flops(name), widest_tp(largest, model)});
  }
  auto rank = [&](const TypeInfo& t) {
    const GpuSpec& g = cluster.catalog.at(t.name);
    return std::pair(t.peak, g.hbm_bw);
  };
  std::stable_sort(out.begin(), out.end(), [&](const TypeInfo& a, const TypeInfo& b) { return rank(a) > rank(b); });
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

// The first stage that does not fit in memory at micro-batch 1 under 1F1B (stage j keeps pp - j
// micro-batches, Narayanan et al. SC'21 §2.2) with layers split in proportion to the stages' weights, neither
// without recompute nor with full recompute; -1 when every stage fits (with one of the two). MoE: each rank
// holds 1/ep of the routed experts (all of them at ep = 1).
int first_unfit_stage(const std::vector<StagePlan>& stages, const ModelConfig& model, const Profiler& prof, int ep = 1) {
  const int pp = static_cast<int>(stages.size());
  if (pp < 1 || pp > model.layers) return 0;
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
  int unfit = 0;
  for (const Recompute rc : {Recompute::None, Recompute::Full}) {
    unfit = -1;
    for (int j = 0; j < pp && unfit < 0; ++j) {
      const ProfileKey key{stages[j].type->name, stages[j].tp, 1.0, rc, false};
      if (prof.stage_memory_bytes(bounds[j], bounds[j + 1], key, pp - j, 1, false, ep) > prof.gpu_memory_bytes(stages[j].type->name)) unfit = j;
    }
    if (unfit < 0) return -1;
  }
  return unfit;
}

// Whether every stage fits in memory (first_unfit_stage).
bool pipeline_fits(const std::vector<StagePlan>& stages, const ModelConfig& model, const Profiler& prof, int ep = 1) {
  return first_unfit_stage(stages, model, prof, ep) < 0;
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

// Rule 1 for one type and TP width: the shallowest pipeline that fits, as many replicas as fit (at most one
// per sample of the global batch). MoE: the memory with the experts sharded by the EP width the replica
// count allows (pipelines_ep); among the counts from the most down to half of them, the one with the widest
// EP width that fits (ties: more replicas), else the most that fit. Each expert's gradients are all-reduced
// over replicas / EP copies (Megatron-Core's expert-data-parallel group), so a wider EP cuts that traffic, to
// none at EP = replicas: 16 replicas at EP 16 rather than 20 at EP 4.
std::optional<PipelineTemplate> homogeneous(const TypeInfo& t, int tp, const ModelConfig& model, const Profiler& prof,
                                            long global_batch) {
  const int groups = group_capacity(t, tp);
  for (int pp = 1; pp <= std::min(model.layers, groups); ++pp) {
    const std::vector<StagePlan> stages(pp, StagePlan{&t, tp, 1, 1.0});
    const int most = token_count_at_most(static_cast<int>(std::min<long>(groups / pp, global_batch)));
    if (!model.moe) {
      if (pipeline_fits(stages, model, prof)) return make_class(stages, most, model);
      continue;
    }
    int chosen = 0, widest = 0;
    for (int replicas = most; replicas >= 1 && (chosen == 0 || 2 * replicas >= most);
         replicas = token_count_at_most(replicas - 1)) {
      const int ep = pipelines_ep(model, replicas);
      if (ep > widest && pipeline_fits(stages, model, prof, ep)) {
        chosen = replicas;
        widest = ep;
      }
    }
    if (chosen > 0) return make_class(stages, chosen, model);
  }
  return std::nullopt;
}

// Rule 1's TP widths for a type: the node's, then the narrowest with which some depth fits.
std::vector<PipelineTemplate> homogeneous_for_type(const TypeInfo& t, const ModelConfig& model, const Profiler& prof,
                                                   long global_batch) {
  std::vector<PipelineTemplate> out;
  if (auto p = homogeneous(t, t.node_tp, model, prof, global_batch)) out.push_back(*p);
  for (const int tp : kTpWidths) {
    if (tp >= t.node_tp || !tp_divides_heads(tp, model)) continue;
    if (auto p = homogeneous(t, tp, model, prof, global_batch)) {
      out.push_back(*p);
      break;
    }
  }
  return out;
}

// Rule 3: one pipeline class whose stages run over every GPU type, replicated `replicas` times (the shape
// of Metis's plans, Um et al. USENIX ATC'24: one pipeline of device groups of different types, data
// parallelism inside each group; FlashFlex, Yan et al. arXiv:2409.01143, also lets one pipeline span GPU
// types). Each replica takes an equal share of every type's GPUs, so every GPU works and a type's stage count
// is its share over its TP width; completion's min-max partition then gives each stage layers in
// proportion to its speed. TP per type starts at 1 (narrow TP wastes least on TP collectives, Narayanan
// et al. SC'21 §3.2) and is widened, one token width at a time:
//   - for the type of the first stage that does not fit in memory, until all fit;
//   - while the pipeline is deeper than the layers or than a quarter of its micro-batches m at micro-batch 1
//     (global batch / replicas): the bubble's share of the 1F1B schedule, (pp - 1) / (m + pp - 1), then
//     stays below 20 % (Narayanan et al. SC'21 §2.2.1 give the bubble as (pp - 1) / m of the ideal time; the
//     bound of 20 % is a choice, not fitted). The type widened is the one whose stages are the weakest (peak
//     FLOP/s x TP): merging the weakest stages keeps the stages' speeds close, so the integer layer split
//     stays balanced.
// Stage order: fastest type first (as Metis orders device groups), except that the type with the least
// memory per GPU is not placed at either end when there are three types or more: under 1F1B the first stage
// keeps the most micro-batches in flight (Narayanan et al. SC'21 §2.2) and the last one holds the output
// layer and its logits (sim/model/memory.h), so both ends need the most memory.
struct TypeShare {
  const TypeInfo* type;
  int gpus;  // GPUs of the type per replica
  int tp;
};

int gpus_of(const TypeInfo& t) { return std::accumulate(t.nodes.begin(), t.nodes.end(), 0); }

// The next token TP width above tp that divides gpus, fits the type's largest node and divides the heads; 0 if none.
int wider_tp(const TypeInfo& t, int gpus, int tp, const ModelConfig& model) {
  const int largest = *std::max_element(t.nodes.begin(), t.nodes.end());
  for (const int w : kTpWidths)
    if (w > tp && w <= largest && gpus % w == 0 && tp_divides_heads(w, model)) return w;
  return 0;
}

std::vector<StagePlan> spanning_stages(const std::vector<TypeShare>& shares) {
  std::vector<StagePlan> stages;
  for (const TypeShare& s : shares)
    for (int j = 0; j < s.gpus / s.tp; ++j) stages.push_back({s.type, s.tp, 1, s.type->peak * s.tp});
  return stages;
}

// The stages' order of types: fastest first, the least memory per GPU kept off both ends (see above).
std::vector<const TypeInfo*> spanning_order(const std::vector<TypeInfo>& types, const Profiler& prof) {
  std::vector<const TypeInfo*> order;
  for (const TypeInfo& t : types) order.push_back(&t);
  if (order.size() < 3) return order;
  const auto least = std::min_element(order.begin(), order.end(), [&](const TypeInfo* a, const TypeInfo* b) {
    return prof.gpu_memory_bytes(a->name) < prof.gpu_memory_bytes(b->name);
  });
  if (least == order.begin() || least + 1 == order.end()) {
    const TypeInfo* t = *least;
    order.erase(least);
    order.insert(order.end() - 1, t);
  }
  return order;
}

// Each type's GPUs per replica at its narrowest TP width, in `order`; nullopt when a type has no GPU per
// replica (or no TP width divides its share).
std::optional<std::vector<TypeShare>> narrowest_shares(const std::vector<const TypeInfo*>& order, int replicas,
                                                       const ModelConfig& model) {
  std::vector<TypeShare> shares;
  for (const TypeInfo* t : order) {
    const int gpus = gpus_of(*t) / replicas;
    const int tp = gpus < 1 ? 0 : wider_tp(*t, gpus, 0, model);
    if (tp == 0) return std::nullopt;
    shares.push_back({t, gpus, tp});
  }
  return shares;
}

// Rule 3 for one replica count: nullopt when a type has no GPU per replica or nothing fits.
// With `soft_depth`, a pipeline that no widening brings within the depth bound is kept when it fits in memory.
std::optional<PipelineTemplate> spanning(const std::vector<const TypeInfo*>& order, int replicas, long global_batch,
                                         const ModelConfig& model, const Profiler& prof, bool soft_depth = false) {
  std::optional<std::vector<TypeShare>> narrowest = narrowest_shares(order, replicas, model);
  if (!narrowest) return std::nullopt;
  std::vector<TypeShare>& shares = *narrowest;
  const long max_depth = std::min<long>(model.layers, std::max<long>(1, global_batch / replicas / 4));
  for (;;) {
    const std::vector<StagePlan> stages = spanning_stages(shares);
    TypeShare* widen = nullptr;
    if (static_cast<long>(stages.size()) > max_depth) {
      for (TypeShare& s : shares)
        if (wider_tp(*s.type, s.gpus, s.tp, model) > 0 && (!widen || s.type->peak * s.tp < widen->type->peak * widen->tp)) widen = &s;
      if (widen == nullptr && soft_depth && static_cast<long>(stages.size()) <= model.layers && pipeline_fits(stages, model, prof))
        return make_class(stages, replicas, model);
    } else {
      const int unfit = first_unfit_stage(stages, model, prof);
      if (unfit < 0) return make_class(stages, replicas, model);
      for (TypeShare& s : shares)
        if (s.type == stages[unfit].type) widen = &s;
    }
    if (widen == nullptr) return std::nullopt;
    widen->tp = wider_tp(*widen->type, widen->gpus, widen->tp, model);
    if (widen->tp == 0) return std::nullopt;
  }
}

// Rule 3 at `count` replica counts: the largest of kCounts with which the spanning pipeline works, then the
// largest that works at no more than half the last one's replicas. Fewer replicas make deeper pipelines
// with more micro-batches each: which balance is best depends on the cluster, so a few spaced points are
// proposed and priced.
// With `whole_shares`, only replica counts that divide every type's GPU count (so that no GPU is left idle),
// and the depth bound soft (a pipeline that no widening brings within it is kept when it fits in memory).
// `type_order` SlowestFirst: the stages' types in the reverse of spanning_order.
std::vector<PipelineTemplate> spanning_pipelines(const std::vector<TypeInfo>& types, long global_batch,
                                                 const ModelConfig& model, const Profiler& prof, int count,
                                                 bool whole_shares = false,
                                                 TypeOrder type_order = TypeOrder::FastestFirst) {
  std::vector<PipelineTemplate> out;
  if (types.size() < 2) return out;
  std::vector<const TypeInfo*> order = spanning_order(types, prof);
  if (type_order == TypeOrder::SlowestFirst) std::reverse(order.begin(), order.end());
  int gpus_gcd = 0;
  for (const TypeInfo& t : types) gpus_gcd = std::gcd(gpus_gcd, gpus_of(t));
  for (auto it = kCounts.rbegin(); it != kCounts.rend() && static_cast<int>(out.size()) < count; ++it) {
    if (!out.empty() && *it * 2 > out.back().replicas) continue;
    if (whole_shares && gpus_gcd % *it != 0) continue;
    if (auto p = spanning(order, *it, global_batch, model, prof, whole_shares)) out.push_back(*p);
  }
  return out;
}

// Rule 4: rule 3's spanning pipeline past its depth bound, which rules out most replica counts where no TP
// width can merge stages (nodes of one GPU): at any depth up to the layers (soft bound), from the fewest
// replicas with which it fits in memory, then at no fewer than twice the last one's replicas, `count` in all.
// Deep pipelines trade the bubble for data-parallel traffic: where a replica's gradients cross slow NICs
// they win (Sailor, Strati et al. SOSP'25, plans such pipelines of 20 stages over one-GPU nodes). The types
// run slowest first: with about one layer per stage the partition cannot give the last stage, which also
// computes the output layer and its logits (sim/model/layer_costs.h), fewer layers, so the fastest type
// takes it.
// With one type, the type's own pipelines as deep as the layers allow (rule 1 takes the shallowest).
std::vector<PipelineTemplate> deep_spanning_pipelines(const Cluster& cluster, const std::vector<TypeInfo>& types,
                                                      long global_batch, const ModelConfig& model, const Profiler& prof,
                                                      int count) {
  std::vector<PipelineTemplate> out;
  if (types.empty()) return out;
  std::vector<const TypeInfo*> order = spanning_order(types, prof);
  std::reverse(order.begin(), order.end());
  for (const int r : kCounts) {
    if (static_cast<int>(out.size()) >= count) break;
    if (!out.empty() && r < 2 * out.back().replicas) continue;
    const std::optional<PipelineTemplate> p = spanning(order, r, global_batch, model, prof, true);
    // The shares ignore node shapes: a type's TP groups may not fit its nodes.
    if (p && template_problem(Template{{*p}}, cluster, model).empty()) out.push_back(*p);
  }
  return out;
}

// One pipeline with a stage per node of the types, the slowest type first (as rule 4) and its largest nodes
// first, each stage TP over its node (the widest token width that fits the node and divides the heads, one
// group per TP width it holds): the shape of Metis's plans on clusters of small nodes of unlike sizes, where
// one TP width per type (rules 3 and 4) leaves the odd nodes out. Where the nodes outnumber the layers:
// nullopt, or with `idle_weakest` the nodes of least peak FLOP/s idle (of equal ones the latest in the
// order), one stage per layer, and the stages in ascending peak FLOP/s (stable): with one layer per stage
// the partition cannot give the last stage, which also computes the output layer and its logits, fewer
// layers, so the strongest stage takes it (as the fastest type does in rule 4). Memory is left to
// completion: its partition under the memory limits gives a GPU of more memory more layers, where the even
// split by speed of pipeline_fits would not fit.
std::optional<PipelineTemplate> node_stage_pipeline(const std::vector<TypeInfo>& types, const ModelConfig& model,
                                                    const Profiler& prof, bool idle_weakest = false) {
  std::vector<const TypeInfo*> order = spanning_order(types, prof);
  std::reverse(order.begin(), order.end());
  std::vector<StagePlan> stages;
  for (const TypeInfo* t : order) {
    std::vector<int> nodes = t->nodes;
    std::sort(nodes.begin(), nodes.end(), std::greater<>());
    for (const int gpus : nodes) {
      const int tp = widest_tp(gpus, model);
      stages.push_back({t, tp, gpus / tp, t->peak * gpus});
    }
  }
  if (static_cast<long>(stages.size()) > model.layers && !idle_weakest) return std::nullopt;
  while (static_cast<long>(stages.size()) > model.layers) {
    std::size_t weakest = 0;
    for (std::size_t i = 1; i < stages.size(); ++i)
      if (stages[i].weight <= stages[weakest].weight) weakest = i;
    stages.erase(stages.begin() + static_cast<std::ptrdiff_t>(weakest));
  }
  if (idle_weakest)
    std::stable_sort(stages.begin(), stages.end(), [](const StagePlan& a, const StagePlan& b) { return a.weight < b.weight; });
  return make_class(stages, 1, model);
}

// Rule 3's pipeline folded into one: its r replicas become r TP groups in every stage (each stage a device
// group of one type's slice, Metis's shape: Um et al. USENIX ATC'24 §4), for MoE EP of the same width over
// the stage's groups (scope stage) instead of over the replicas.
PipelineTemplate folded(PipelineTemplate p) {
  for (StageTemplate& s : p.stages) {
    for (GroupKind& k : s.kinds) k.groups *= p.replicas;
    if (s.ep > 1) s.ep_scope = EpScope::Stage;
  }
  p.replicas = 1;
  return p;
}

// Rule 2 over the first j types of `per_type` (rule 1's templates of each type, fastest first): one pipeline
// class per type, rule 1's first template of each (a type without one left out).
Template rule_two(const std::vector<std::vector<PipelineTemplate>>& per_type, std::size_t j) {
  Template t;
  for (std::size_t i = 0; i < j; ++i)
    if (!per_type[i].empty()) t.pipelines.push_back(per_type[i].front());
  return t;
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

std::vector<Template> heuristic_templates(const Cluster& cluster, const ModelConfig& model, int k, long global_batch) {
  Collector c(cluster, model, k);
  if (k < 1 || cluster.nodes.empty()) return {};
  const Profiler prof(cluster, model);
  const std::vector<TypeInfo> types = types_by_speed(cluster, model, prof);
  const long batch = batch_or_model(global_batch, model);
  std::vector<std::vector<PipelineTemplate>> per_type;  // rule 1
  for (const TypeInfo& t : types) per_type.push_back(homogeneous_for_type(t, model, prof, batch));
  // Rule 1's best guess first, then rule 3 (one of the few ways to use every GPU type in one pipeline, so
  // it gets its slots before the other types' homogeneous templates on a multi-type cluster).
  if (!per_type.empty() && !per_type.front().empty()) c.add(Template{{per_type.front().front()}});
  for (const PipelineTemplate& p : spanning_pipelines(types, batch, model, prof, 3)) c.add(Template{{p}});
  // Rule 1's node-TP template of the other types, rule 2, then rule 1's narrow-TP templates.
  for (const std::vector<PipelineTemplate>& ps : per_type)
    if (!ps.empty()) c.add(Template{{ps.front()}});
  if (const Template all_types = rule_two(per_type, per_type.size()); all_types.pipelines.size() > 1) c.add(all_types);
  for (const std::vector<PipelineTemplate>& ps : per_type)
    for (const PipelineTemplate& p : ps) c.add(Template{{p}});
  // Rule 4 in the slots left: rule 3 past its depth bound, the deepest pipelines first.
  if (!c.full() && types.size() > 1)
    for (const PipelineTemplate& p : deep_spanning_pipelines(cluster, types, batch, model, prof, 3)) c.add(Template{{p}});
  return c.take();
}

std::vector<Template> device_group_templates(const Cluster& cluster, const ModelConfig& model, int k, long global_batch,
                                             TypeOrder order) {
  Collector c(cluster, model, 2 * k);
  if (k < 1 || cluster.nodes.empty()) return {};
  const Profiler prof(cluster, model);
  const std::vector<TypeInfo> types = types_by_speed(cluster, model, prof);
  for (const PipelineTemplate& p : spanning_pipelines(types, batch_or_model(global_batch, model), model, prof, k, true, order)) {
    if (p.replicas > 1) c.add(Template{{folded(p)}});
    c.add(Template{{p}});
  }
  return c.take();
}

std::vector<Template> fast_subset_templates(const Cluster& cluster, const ModelConfig& model, int per_subset,
                                            long global_batch) {
  if (per_subset < 1 || node_sizes_by_type(cluster).size() < 2) return {};
  const Profiler prof(cluster, model);
  const std::vector<TypeInfo> types = types_by_speed(cluster, model, prof);
  Collector c(cluster, model, (per_subset + 1) * static_cast<int>(types.size()));
  const long batch = batch_or_model(global_batch, model);
  for (std::size_t j = types.size(); j >= 1; --j) {
    const std::vector<TypeInfo> fastest(types.begin(), types.begin() + static_cast<std::ptrdiff_t>(j));
    if (auto p = node_stage_pipeline(fastest, model, prof)) c.add(Template{{*p}});
    if (j == types.size()) continue;  // rule 4 spans every type
    for (const PipelineTemplate& p : deep_spanning_pipelines(cluster, fastest, batch, model, prof, per_subset)) c.add(Template{{p}});
  }
  return c.take();
}

std::vector<Template> fast_data_parallel_templates(const Cluster& cluster, const ModelConfig& model, long global_batch) {
  if (node_sizes_by_type(cluster).size() < 3) return {};
  const Profiler prof(cluster, model);
  const std::vector<TypeInfo> types = types_by_speed(cluster, model, prof);
  Collector c(cluster, model, static_cast<int>(types.size()));
  const long batch = batch_or_model(global_batch, model);
  std::vector<std::vector<PipelineTemplate>> per_type;  // rule 1, all types but the slowest
  for (std::size_t i = 0; i + 1 < types.size(); ++i) per_type.push_back(homogeneous_for_type(types[i], model, prof, batch));
  for (std::size_t j = types.size() - 1; j >= 2; --j) c.add(rule_two(per_type, j));
  return c.take();
}

std::vector<Template> tp_data_parallel_templates(const Cluster& cluster, const ModelConfig& model, long global_batch) {
  const Profiler prof(cluster, model);
  const std::vector<TypeInfo> types = types_by_speed(cluster, model, prof);
  const long batch = batch_or_model(global_batch, model);
  Collector wide(cluster, model, static_cast<int>(kTpWidths.size()));
  for (const int tp : kTpWidths) {
    if (tp == 1) continue;
    Template t;
    for (const TypeInfo& ty : types)
      if (ty.node_tp >= tp)
        if (auto p = homogeneous(ty, tp, model, prof, batch)) t.pipelines.push_back(*p);
    if (t.pipelines.size() >= 2 && t.pipelines.size() < types.size()) wide.add(t);
  }
  return wide.take();
}

std::vector<Template> without_expert_parallelism(const std::vector<Template>& templates, const Cluster& cluster,
                                                 const ModelConfig& model) {
  Collector c(cluster, model, static_cast<int>(templates.size()));
  for (Template t : templates) {
    bool had_ep = false;
    for (PipelineTemplate& p : t.pipelines)
      for (StageTemplate& st : p.stages) {
        had_ep = had_ep || st.ep > 1;
        st.ep = 1;
        st.ep_scope = EpScope::Pipelines;
        st.uneven_experts = false;
      }
    if (had_ep) c.add(std::move(t));
  }
  return c.take();
}

namespace {

// Replica counts at which deep_spanning_templates_over_every_gpu takes each of its two pipeline rules.
constexpr int kEveryGpuReplicaCounts = 4;
// The TP groups per stage of deep_spanning_templates_over_every_gpu's folded pipelines: powers of two, which
// split the micro-batches (of power-of-two global batches) evenly over a stage's groups.
constexpr std::array<int, 3> kEveryGpuFoldedGroups{2, 4, 8};

// The pipeline counts into which pipelines_across_types deals a template's stages, given its own count P:
// P / 2, P - 1, P and P + 1 (those of at least one pipeline, each once).
std::vector<int> across_types_pipeline_counts(int pipelines) {
  std::vector<int> out;
  for (const int n : {pipelines / 2, pipelines - 1, pipelines, pipelines + 1})
    if (n >= 1 && std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
  return out;
}

// The GPUs of type t that the replicas of rule 4's pipeline `p` leave idle, as TP groups of p's TP width of
// t, and p's last stage of t (no groups and last -1 where p has no stage of t); nullopt where they make no
// whole group.
struct Leftover {
  int last = -1;
  int tp = 0;
  int groups = 0;
};
std::optional<Leftover> leftover(const PipelineTemplate& p, const TypeInfo& t) {
  Leftover out;
  int used = 0;  // by one replica
  for (size_t j = 0; j < p.stages.size(); ++j)
    for (const GroupKind& k : p.stages[j].kinds)
      if (k.gpu_type == t.name) used += p.stages[j].tp * k.groups, out.tp = p.stages[j].tp, out.last = static_cast<int>(j);
  if (out.last < 0) return out;
  const int left = gpus_of(t) - p.replicas * used;
  if (left % out.tp != 0) return std::nullopt;
  out.groups = left / out.tp;
  return out;
}

// Rule 4's pipeline `p` with more stages: for each entry of `left`, its `groups` one-group copies of p's stage
// `last`, one by one, to the replica with the fewest stages so far (the lowest index of equal ones), after
// stage `last` there. Replicas with the same added stages form one class. nullopt when nothing is added, or
// the deepest replica would outnumber the layers.
std::optional<Template> with_added_stages(const PipelineTemplate& p, const std::vector<Leftover>& left,
                                          const ModelConfig& model) {
  std::vector<std::vector<int>> added(p.replicas);  // per replica: the stage index each added stage follows
  std::vector<int> depth(p.replicas, static_cast<int>(p.stages.size()));
  bool any = false;
  for (const Leftover& l : left)
    for (int g = 0; g < l.groups; ++g) {
      const int r = static_cast<int>(std::min_element(depth.begin(), depth.end()) - depth.begin());
      added[r].push_back(l.last);
      ++depth[r];
      any = true;
    }
  if (!any || *std::max_element(depth.begin(), depth.end()) > model.layers) return std::nullopt;
  std::map<std::vector<int>, int> classes;  // added stages -> replicas
  for (const std::vector<int>& a : added) ++classes[a];
  Template out;
  for (const auto& [extra, replicas] : classes) {
    PipelineTemplate c;
    c.replicas = replicas;
    for (size_t j = 0; j < p.stages.size(); ++j) {
      c.stages.push_back(p.stages[j]);
      for (const int after : extra)
        if (after == static_cast<int>(j)) {
          StageTemplate st = p.stages[j];
          for (GroupKind& k : st.kinds) k.groups = 1;
          st.kinds.resize(1);
          c.stages.push_back(std::move(st));
        }
    }
    out.pipelines.push_back(std::move(c));
  }
  return out;
}

// Rule 4's pipeline `p` with the GPUs its replicas leave idle added as stages (with_added_stages, each type's
// leftover TP groups in `types` order). nullopt when nothing is left over, or a type's leftover GPUs make no
// whole group.
std::optional<Template> with_leftover_stages(const PipelineTemplate& p, const std::vector<TypeInfo>& types,
                                             const ModelConfig& model) {
  std::vector<Leftover> left;
  for (const TypeInfo& t : types) {
    const std::optional<Leftover> l = leftover(p, t);
    if (!l) return std::nullopt;
    left.push_back(*l);
  }
  return with_added_stages(p, left, model);
}

// Rule 4's pipeline `p` folded into one pipeline of p.replicas TP groups per stage (Metis's device groups),
// with each type's GPUs that the replicas leave idle as one stage more of fewer groups (at the pipeline's TP
// width of that type) after that type's last stage. nullopt when nothing is left over, a type's leftover GPUs
// make no whole group, or the stages would outnumber the layers.
std::optional<Template> folded_with_leftover_stages(const PipelineTemplate& p, const std::vector<TypeInfo>& types,
                                                    const ModelConfig& model) {
  const PipelineTemplate base = folded(p);
  std::vector<std::vector<StageTemplate>> added(p.stages.size());  // the stages added after each stage
  bool any = false;
  for (const TypeInfo& t : types) {
    const std::optional<Leftover> left = leftover(p, t);
    if (!left) return std::nullopt;
    if (left->groups == 0) continue;
    StageTemplate st = base.stages[left->last];
    st.kinds.assign(1, GroupKind{t.name, left->groups});
    added[left->last].push_back(std::move(st));
    any = true;
  }
  PipelineTemplate f = base;
  f.stages.clear();
  for (size_t j = 0; j < base.stages.size(); ++j) {
    f.stages.push_back(base.stages[j]);
    for (StageTemplate& st : added[j]) f.stages.push_back(std::move(st));
  }
  if (!any || static_cast<long>(f.stages.size()) > model.layers) return std::nullopt;
  return Template{{f}};
}

// Rule 4's pipeline at `replicas` replicas with no TP widened: each type's GPUs per replica at its narrowest
// TP width, in rule 4's order; nullopt where a type has no GPU per replica, or the stages outnumber the layers
// or do not fit in memory.
std::optional<PipelineTemplate> narrowest_spanning(const std::vector<const TypeInfo*>& order, int replicas,
                                                   const ModelConfig& model, const Profiler& prof) {
  const std::optional<std::vector<TypeShare>> shares = narrowest_shares(order, replicas, model);
  if (!shares) return std::nullopt;
  const std::vector<StagePlan> stages = spanning_stages(*shares);
  if (static_cast<long>(stages.size()) > model.layers || !pipeline_fits(stages, model, prof)) return std::nullopt;
  return make_class(stages, replicas, model);
}

}  // namespace

std::vector<Template> deep_spanning_templates_over_every_gpu(const Cluster& cluster, const ModelConfig& model,
                                                             long global_batch) {
  const Profiler prof(cluster, model);
  const std::vector<TypeInfo> types = types_by_speed(cluster, model, prof);
  if (types.size() < 2) return {};
  Collector c(cluster, model, 2 * kEveryGpuReplicaCounts + 2 * static_cast<int>(kEveryGpuFoldedGroups.size()));
  // Rule 4's pipelines (TP widened to the depth bound, then kept past it), then the same types at their
  // narrowest TP widths: from the fewest replicas with which they fit, then at no fewer than 1.5 times the
  // last one's (the bubble of these deep pipelines shrinks with more replicas, the gradient all-reduce
  // grows: rule 4's doubling steps over the best count too often).
  std::vector<PipelineTemplate> pipelines =
      deep_spanning_pipelines(cluster, types, batch_or_model(global_batch, model), model, prof, kEveryGpuReplicaCounts);
  std::vector<const TypeInfo*> order = spanning_order(types, prof);
  std::reverse(order.begin(), order.end());
  int narrow = 0, last = 0;
  for (const int r : kCounts) {
    if (narrow >= kEveryGpuReplicaCounts) break;
    if (narrow > 0 && 2 * r < 3 * last) continue;
    if (std::optional<PipelineTemplate> p = narrowest_spanning(order, r, model, prof)) {
      pipelines.push_back(std::move(*p));
      ++narrow, last = r;
    }
  }
  for (const PipelineTemplate& p : pipelines)
    if (std::optional<Template> t = with_leftover_stages(p, types, model)) c.add(std::move(*t));
  // And the narrowest pipelines folded into one (Metis's shape) at kEveryGpuFoldedGroups groups per stage,
  // the leftover GPUs as one smaller stage per type, the types in rule 4's order and in the reverse one: rule
  // 4 orders types of equal peak FLOP/s by name, and which of them should take the last layers and the head
  // depends on more than peak FLOP/s (memory for the logits, the NICs between the types).
  for (const bool reversed : {false, true}) {
    if (reversed) std::reverse(order.begin(), order.end());
    for (const int r : kEveryGpuFoldedGroups)
      if (const std::optional<PipelineTemplate> p = narrowest_spanning(order, r, model, prof))
        if (std::optional<Template> t = folded_with_leftover_stages(*p, types, model)) c.add(std::move(*t));
  }
  return c.take();
}

std::vector<Template> deep_spanning_templates_over_the_types_of(const Template& t, const Cluster& cluster,
                                                                const ModelConfig& model) {
  std::set<std::string> used;
  for (const PipelineTemplate& p : t.pipelines)
    for (const StageTemplate& s : p.stages)
      for (const GroupKind& k : s.kinds) used.insert(k.gpu_type);
  const Profiler prof(cluster, model);
  std::vector<TypeInfo> types = types_by_speed(cluster, model, prof);
  if (used.size() < 2 || used.size() == types.size()) return {};
  std::erase_if(types, [&](const TypeInfo& ty) { return used.count(ty.name) == 0; });
  std::vector<const TypeInfo*> order = spanning_order(types, prof);
  std::reverse(order.begin(), order.end());
  Collector c(cluster, model, 6 * static_cast<int>(kCounts.size()));
  for (const int r : kCounts) {
    const std::optional<PipelineTemplate> p = narrowest_spanning(order, r, model, prof);
    if (!p) continue;
    std::vector<Template> shapes{Template{{*p}}};  // the GPUs the replicas leave idle kept idle, or added
    if (std::optional<Template> every_gpu = with_leftover_stages(*p, types, model)) shapes.push_back(std::move(*every_gpu));
    for (const Template& shape : shapes) {
      c.add(shape);
      for (Template& ends : one_type_at_both_ends(shape, cluster, model)) c.add(std::move(ends));
    }
  }
  return c.take();
}

namespace {

// Rule 4's pipeline over `types` (by speed), each type at its TP width of `width`, at every replica count of
// kCounts with which each type's TP groups split over the replicas fit in memory and the layers; each with
// the groups left over kept idle, and added as stages (with_added_stages), into `c`.
void deep_spanning_at_widths(const std::vector<TypeInfo>& types, const std::map<std::string, int>& width,
                             const ModelConfig& model, const Profiler& prof, Collector& c) {
  std::vector<const TypeInfo*> order = spanning_order(types, prof);
  std::reverse(order.begin(), order.end());
  for (const int r : kCounts) {
    std::vector<StagePlan> stages;
    std::vector<Leftover> left;  // per type of `order`: its last stage, the TP groups its nodes hold that no replica takes
    for (const TypeInfo* ty : order) {
      const int tp = width.at(ty->name), groups = group_capacity(*ty, tp);
      if (groups < r) break;
      for (int j = 0; j < groups / r; ++j) stages.push_back({ty, tp, 1, ty->peak * tp});
      left.push_back({static_cast<int>(stages.size()) - 1, tp, groups % r});
    }
    if (left.size() < order.size() || static_cast<long>(stages.size()) > model.layers || !pipeline_fits(stages, model, prof))
      continue;
    const PipelineTemplate p = make_class(stages, r, model);
    c.add(Template{{p}});
    if (std::optional<Template> every_group = with_added_stages(p, left, model)) c.add(std::move(*every_group));
  }
}

}  // namespace

std::vector<Template> deep_spanning_templates_at_the_widths_of(const Template& t, const Cluster& cluster,
                                                                const ModelConfig& model) {
  std::map<std::string, int> width;  // per type of t: its widest TP width there
  for (const PipelineTemplate& p : t.pipelines)
    for (const StageTemplate& s : p.stages)
      for (const GroupKind& k : s.kinds) width[k.gpu_type] = std::max(width[k.gpu_type], s.tp);
  const Profiler prof(cluster, model);
  const std::vector<TypeInfo> all = types_by_speed(cluster, model, prof);
  std::vector<TypeInfo> own;  // t's types, fastest first
  for (const TypeInfo& ty : all)
    if (width.count(ty.name) != 0) own.push_back(ty);
  Collector c(cluster, model, 4 * static_cast<int>(kCounts.size()));
  // t's types and the fastest type it leaves idle, at TP 1.
  const auto idle = std::find_if(all.begin(), all.end(), [&](const TypeInfo& ty) { return width.count(ty.name) == 0; });
  if (idle != all.end()) {
    std::vector<TypeInfo> joined;
    for (const TypeInfo& ty : all)
      if (width.count(ty.name) != 0 || ty.name == idle->name) joined.push_back(ty);
    std::map<std::string, int> w = width;
    w[idle->name] = 1;
    deep_spanning_at_widths(joined, w, model, prof, c);
  }
  // t's types without its slowest.
  if (own.size() > 1) deep_spanning_at_widths({own.begin(), own.end() - 1}, width, model, prof, c);
  return c.take();
}

std::vector<Template> pipelines_across_types(const Template& t, const Cluster& cluster, const ModelConfig& model) {
  std::map<std::string, std::vector<StageTemplate>> stages_of;  // per type, every replica's stages
  int pipelines = 0;
  for (const PipelineTemplate& p : t.pipelines) {
    pipelines += p.replicas;
    for (const StageTemplate& s : p.stages) {
      if (s.kinds.size() != 1) return {};
      for (int r = 0; r < p.replicas; ++r) stages_of[s.kinds.front().gpu_type].push_back(s);
    }
  }
  if (stages_of.size() < 2) return {};
  const Profiler prof(cluster, model);
  const std::vector<TypeInfo> all = types_by_speed(cluster, model, prof);
  std::vector<TypeInfo> types;
  for (const TypeInfo& ty : all)
    if (stages_of.count(ty.name) != 0) types.push_back(ty);
  std::vector<const TypeInfo*> order = spanning_order(types, prof);
  std::reverse(order.begin(), order.end());
  const std::vector<int> counts = across_types_pipeline_counts(pipelines);
  Collector c(cluster, model, static_cast<int>(counts.size()));
  const Template own = canonical(t);
  for (const int count : counts) {
    std::vector<PipelineTemplate> dealt(count);
    for (const TypeInfo* ty : order)
      for (const StageTemplate& s : stages_of.at(ty->name)) {
        const auto fewest = std::min_element(dealt.begin(), dealt.end(), [](const PipelineTemplate& a, const PipelineTemplate& b) {
          return a.stages.size() < b.stages.size();
        });
        fewest->stages.push_back(s);
      }
    Template out;
    for (PipelineTemplate& p : dealt)
      if (!p.stages.empty()) out.pipelines.push_back(std::move(p));
    if (!(canonical(out) == own)) c.add(std::move(out));
  }
  return c.take();
}

std::vector<Template> node_stage_templates_over_layers(const Cluster& cluster, const ModelConfig& model) {
  const Profiler prof(cluster, model);
  const std::vector<TypeInfo> types = types_by_speed(cluster, model, prof);
  Collector c(cluster, model, static_cast<int>(types.size()));
  for (std::size_t j = types.size(); j >= 1; --j) {
    const std::vector<TypeInfo> fastest(types.begin(), types.begin() + static_cast<std::ptrdiff_t>(j));
    long nodes = 0;
    for (const TypeInfo& t : fastest) nodes += static_cast<long>(t.nodes.size());
    if (nodes <= model.layers) continue;  // fast_subset_templates has this pipeline with every node
    if (auto p = node_stage_pipeline(fastest, model, prof, true)) c.add(Template{{*p}});
  }
  return c.take();
}

namespace {

// Every uniform layout of one type's nodes (uniform_templates), into `c`.
void add_uniform_layouts(const TypeInfo& type, const ModelConfig& model, long batch, Collector& c) {
  for (const int tp : kTpWidths) {
    if (tp > type.node_tp) continue;  // wider than a node holds, or not dividing the heads
    const int groups = group_capacity(type, tp);
    for (int pp = 1; pp <= std::min<long>(model.layers, groups); ++pp) {
      // As many pipelines as the groups hold: every GPU used where the depth splits the groups evenly; and
      // Sailor's data-parallel degree where the depth splits the layers evenly, the global batch split
      // unevenly among the pipelines where it must (planner/baselines/sailor), the leftover groups idle.
      std::vector<int> counts;
      if (groups % pp == 0 || model.layers % pp == 0) counts.push_back(groups / pp);
      if (model.layers % pp == 0) {
        // Megatron-LM's data-parallel degree: the largest that the groups hold and that divides the global
        // batch (planner/baselines/megatron), so that every pipeline takes the same share; GPUs may stay idle.
        long dp = groups / pp;
        while (dp > 1 && batch % dp != 0) --dp;
        if (dp != groups / pp) counts.push_back(static_cast<int>(dp));
      }
      for (const int replicas : counts) {
        if (replicas > batch) continue;
        PipelineTemplate p = make_class(std::vector<StagePlan>(pp, StagePlan{&type, tp, 1, 1.0}), replicas, model);
        for (const int ep : kEpWidths) {  // MoE: every EP width over the replicas (dense: EP 1 only)
          if (ep > 1 && (!model.moe || model.moe->experts % ep != 0 || replicas % ep != 0)) continue;
          for (StageTemplate& st : p.stages) st.ep = ep;
          c.add(Template{{p}});
        }
      }
    }
  }
}

}  // namespace

std::vector<Template> uniform_templates(const Cluster& cluster, const ModelConfig& model, long global_batch) {
  const Profiler prof(cluster, model);
  const long batch = batch_or_model(global_batch, model);
  Collector c(cluster, model, std::numeric_limits<int>::max());
  add_uniform_layouts(types_by_speed(cluster, model, prof).front(), model, batch, c);
  return c.take();
}

namespace {

// The GPU types of a stage's group kinds, in order.
std::vector<std::string> stage_types(const StageTemplate& s) {
  std::vector<std::string> out;
  for (const GroupKind& k : s.kinds) out.push_back(k.gpu_type);
  return out;
}

// The length of the first run of stages of the first stage's types (at least 1 for a non-empty class).
size_t first_run_length(const std::vector<StageTemplate>& st) {
  size_t e = 1;
  while (e < st.size() && stage_types(st[e]) == stage_types(st[0])) ++e;
  return e;
}

}  // namespace

std::vector<Template> one_type_at_both_ends(const Template& t, const Cluster& cluster, const ModelConfig& model) {
  Collector c(cluster, model, 2);
  for (const bool to_front : {true, false}) {
    Template out = t;
    bool moved = false;
    for (PipelineTemplate& p : out.pipelines) {
      std::vector<StageTemplate>& st = p.stages;
      const size_t n = st.size();
      if (to_front) {
        size_t b = n - 1;  // the first stage of the last run of the last stage's types
        while (b > 0 && stage_types(st[b - 1]) == stage_types(st[n - 1])) --b;
        if (b == 0) continue;
        std::rotate(st.begin(), st.begin() + static_cast<std::ptrdiff_t>(b), st.begin() + static_cast<std::ptrdiff_t>(b) + 1);
      } else {
        const size_t e = first_run_length(st) - 1;  // the last stage of the first run of the first stage's types
        if (e + 1 == n) continue;
        std::rotate(st.begin() + static_cast<std::ptrdiff_t>(e), st.begin() + static_cast<std::ptrdiff_t>(e) + 1, st.end());
      }
      moved = true;
    }
    if (moved && !(canonical(out) == canonical(t))) c.add(std::move(out));
  }
  return c.take();
}

// At most this many stages of the idle type first (idle_type_stages_first).
constexpr int kIdleStagesFirst = 4;

namespace {

// Class `p` with its first run of stages of the first stage's types moved, in order, to its end (unchanged
// where that run is the whole class).
void move_first_run_to_the_end(PipelineTemplate& p) {
  std::vector<StageTemplate>& st = p.stages;
  std::rotate(st.begin(), st.begin() + static_cast<std::ptrdiff_t>(first_run_length(st)), st.end());
}

}  // namespace

std::vector<Template> idle_type_stages_first(const Template& t, const Cluster& cluster, const ModelConfig& model) {
  if (model.moe) return {};
  std::set<std::string> used;
  int replicas = 0;
  for (const PipelineTemplate& p : t.pipelines) {
    replicas += p.replicas;
    for (const StageTemplate& s : p.stages)
      for (const GroupKind& k : s.kinds) used.insert(k.gpu_type);
  }
  const Profiler prof(cluster, model);
  const std::vector<TypeInfo> all = types_by_speed(cluster, model, prof);
  const auto idle = std::find_if(all.begin(), all.end(), [&](const TypeInfo& ty) { return used.count(ty.name) == 0; });
  if (idle == all.end() || replicas == 0) return {};
  Collector c(cluster, model, 2 * kIdleStagesFirst * 2);
  for (const int tp : {1, idle->node_tp}) {
    const int most = std::min(kIdleStagesFirst, group_capacity(*idle, tp) / replicas);
    for (int k = 1; k <= most; ++k)
      for (const bool first_run_last : {false, true}) {
        Template out = t;
        bool within_layers = true;
        for (PipelineTemplate& p : out.pipelines) {
          if (first_run_last) move_first_run_to_the_end(p);
          StageTemplate st{.tp = tp, .kinds = {GroupKind{idle->name, 1}}};
          p.stages.insert(p.stages.begin(), static_cast<size_t>(k), st);
          within_layers = within_layers && static_cast<long>(p.stages.size()) <= model.layers;
        }
        if (within_layers) c.add(std::move(out));
      }
    if (idle->node_tp == 1) break;
  }
  return c.take();
}

namespace {

// The device-group template of `blocks`: one pipeline, every stage `groups` TP groups of its block's type.
Template device_group_template(const std::vector<DeviceGroupBlock>& blocks, int groups) {
  PipelineTemplate p;
  for (const DeviceGroupBlock& b : blocks)
    for (const int tp : b.tps) p.stages.push_back(StageTemplate{.tp = tp, .kinds = {GroupKind{b.gpu_type, groups}}});
  return Template{{p}};
}

// Every way to lay `gpus` GPUs into stages of width w, or of widths w and w / 2 (at least one stage each; both
// orders), w and w / 2 from `widths`.
std::vector<std::vector<int>> stage_widths_over(int gpus, const std::vector<int>& widths) {
  std::vector<std::vector<int>> out;
  for (const int w : widths) {
    if (gpus % w == 0) out.emplace_back(static_cast<size_t>(gpus / w), w);
    const int half = w / 2;
    if (half < 1 || std::find(widths.begin(), widths.end(), half) == widths.end()) continue;
    for (int wide = 1; wide * w + half <= gpus; ++wide) {
      const int rest = gpus - wide * w;
      if (rest % half != 0) continue;
      std::vector<int> wide_first(static_cast<size_t>(wide), w);
      wide_first.insert(wide_first.end(), static_cast<size_t>(rest / half), half);
      out.push_back(wide_first);
      out.emplace_back(wide_first.rbegin(), wide_first.rend());
    }
  }
  return out;
}

}  // namespace

std::optional<std::vector<DeviceGroupBlock>> device_group_blocks(const Template& t) {
  if (t.pipelines.size() != 1 || t.pipelines.front().replicas != 1) return std::nullopt;
  const std::vector<StageTemplate>& stages = t.pipelines.front().stages;
  std::vector<DeviceGroupBlock> blocks;
  for (const StageTemplate& s : stages) {
    if (s.kinds.size() != 1 || s.tp_groups() != stages.front().tp_groups()) return std::nullopt;
    const std::string& type = s.kinds.front().gpu_type;
    if (blocks.empty() || blocks.back().gpu_type != type) {
      for (const DeviceGroupBlock& b : blocks)
        if (b.gpu_type == type) return std::nullopt;  // the type's stages are not consecutive
      blocks.push_back(DeviceGroupBlock{type, {}});
    }
    blocks.back().tps.push_back(s.tp);
  }
  if (blocks.empty()) return std::nullopt;
  return blocks;
}

std::vector<Template> device_group_block_widths(const Template& t, int block, const Cluster& cluster,
                                                const ModelConfig& model) {
  const std::optional<std::vector<DeviceGroupBlock>> blocks = device_group_blocks(t);
  if (model.moe || !blocks || block < 0 || block >= static_cast<int>(blocks->size())) return {};
  const DeviceGroupBlock& b = (*blocks)[static_cast<size_t>(block)];
  const std::map<std::string, std::vector<int>> nodes = node_sizes_by_type(cluster);
  const int node_tp = widest_tp(*std::max_element(nodes.at(b.gpu_type).begin(), nodes.at(b.gpu_type).end()), model);
  std::vector<int> widths;
  for (const int w : kTpWidths)
    if (w <= node_tp && tp_divides_heads(w, model)) widths.push_back(w);
  const int gpus = std::accumulate(b.tps.begin(), b.tps.end(), 0);
  const int other_stages = static_cast<int>(t.pipelines.front().stages.size() - b.tps.size());
  const Template self = canonical(t);
  Collector c(cluster, model, std::numeric_limits<int>::max());
  for (std::vector<int>& tps : stage_widths_over(gpus, widths)) {
    if (other_stages + static_cast<long>(tps.size()) > model.layers) continue;
    std::vector<DeviceGroupBlock> laid = *blocks;
    laid[static_cast<size_t>(block)].tps = std::move(tps);
    Template out = canonical(device_group_template(laid, t.pipelines.front().stages.front().tp_groups()));
    if (!(out == self)) c.add(std::move(out));
  }
  return c.take();
}

std::vector<Template> device_group_block_orders(const Template& t, const Cluster& cluster, const ModelConfig& model) {
  const std::optional<std::vector<DeviceGroupBlock>> blocks = device_group_blocks(t);
  if (model.moe || !blocks || static_cast<int>(blocks->size()) > kDeviceGroupOrderedBlocks) return {};
  std::vector<size_t> order(blocks->size());
  std::iota(order.begin(), order.end(), 0);
  const Template self = canonical(t);
  Collector c(cluster, model, std::numeric_limits<int>::max());
  while (std::next_permutation(order.begin(), order.end())) {
    std::vector<DeviceGroupBlock> reordered;
    for (const size_t i : order) reordered.push_back((*blocks)[i]);
    Template out = canonical(device_group_template(reordered, t.pipelines.front().stages.front().tp_groups()));
    if (!(out == self)) c.add(std::move(out));
  }
  return c.take();
}

}  // namespace arachne::planner
