// The policy's token form of templates: vocabulary, encode/decode and the incremental grammar that masks
// decoding (planner/template/tokens.h).
#include "planner/template/tokens.h"

#include <algorithm>
#include <functional>
#include <set>
#include <stdexcept>

#include "sim/io/input_error.h"

namespace arachne::planner {

// ------------------------------------------------------------------ vocabulary
namespace {

// The one list of tokens: each kind with the values it can carry, in id order.
struct KindValues {
  TokenKind kind;
  std::vector<int> values;
};

std::vector<int> range_values(int n) {
  std::vector<int> v(n);
  for (int i = 0; i < n; ++i) v[i] = i;
  return v;
}

template <size_t N>
std::vector<int> values_of(const std::array<int, N>& a) {
  return {a.begin(), a.end()};
}

const std::vector<KindValues>& vocabulary_table() {
  static const std::vector<KindValues> table{
      {TokenKind::Bos, {0}},
      {TokenKind::Eos, {0}},
      {TokenKind::Pipeline, {0}},
      {TokenKind::Stage, {0}},
      {TokenKind::Type, range_values(kMaxGpuTypes)},
      {TokenKind::Tp, values_of(kTpWidths)},
      {TokenKind::Count, values_of(kCounts)},
      {TokenKind::Ep, values_of(kEpWidths)},
      {TokenKind::Scope, {static_cast<int>(EpScope::Pipelines), static_cast<int>(EpScope::Stage)}},
      {TokenKind::Uneven, {0}},
  };
  return table;
}

struct Vocabulary {
  std::vector<Token> tokens;
  std::vector<int> base;  // first id of each kind, indexed by TokenKind
};

const Vocabulary& vocabulary() {
  static const Vocabulary v = [] {
    Vocabulary out;
    out.base.assign(vocabulary_table().size(), 0);
    for (const KindValues& kv : vocabulary_table()) {
      out.base[static_cast<size_t>(kv.kind)] = static_cast<int>(out.tokens.size());
      for (const int value : kv.values) out.tokens.push_back({kv.kind, value});
    }
    return out;
  }();
  return v;
}

const char* kind_name(TokenKind k) {
  switch (k) {
    case TokenKind::Bos: return "Bos";
    case TokenKind::Eos: return "Eos";
    case TokenKind::Pipeline: return "Pipeline";
    case TokenKind::Stage: return "Stage";
    case TokenKind::Type: return "Type";
    case TokenKind::Tp: return "Tp";
    case TokenKind::Count: return "Count";
    case TokenKind::Ep: return "Ep";
    case TokenKind::Scope: return "Scope";
    case TokenKind::Uneven: return "Uneven";
  }
  return "?";
}

bool carries_value(TokenKind k) {
  return k == TokenKind::Type || k == TokenKind::Tp || k == TokenKind::Count || k == TokenKind::Ep || k == TokenKind::Scope;
}

std::optional<int> find_id(const Token& t) {
  const auto& table = vocabulary_table();
  const auto kv = std::find_if(table.begin(), table.end(), [&](const KindValues& e) { return e.kind == t.kind; });
  const auto it = std::find(kv->values.begin(), kv->values.end(), carries_value(t.kind) ? t.value : 0);
  if (it == kv->values.end()) return std::nullopt;
  return vocabulary().base[static_cast<size_t>(t.kind)] + static_cast<int>(it - kv->values.begin());
}

}  // namespace

int vocabulary_size() { return static_cast<int>(vocabulary().tokens.size()); }

int token_id(const Token& t) {
  const auto id = find_id(t);
  if (!id) throw std::invalid_argument("token " + token_name(t) + " is not in the vocabulary");
  return *id;
}

Token token_of(int id) {
  if (id < 0 || id >= vocabulary_size()) throw std::invalid_argument("token id " + std::to_string(id) + " is outside the vocabulary");
  return vocabulary().tokens[id];
}

std::string token_name(const Token& t) {
  if (t.kind == TokenKind::Scope) return std::string("Scope:") + to_string(static_cast<EpScope>(t.value));
  if (!carries_value(t.kind)) return kind_name(t.kind);
  return kind_name(t.kind) + std::to_string(t.value);
}

std::vector<std::string> type_order(const Cluster& cluster) {
  std::set<std::string> names;
  for (const NodeGroup& g : cluster.groups) names.insert(g.gpu);
  if (names.size() > static_cast<size_t>(kMaxGpuTypes))
    throw InputError(cluster.source.empty() ? cluster.name : cluster.source,
                     "the cluster has " + std::to_string(names.size()) + " GPU types; the learned planner's token form holds at most " +
                         std::to_string(kMaxGpuTypes));
  return {names.begin(), names.end()};
}

// ------------------------------------------------------------------ encode / decode
namespace {

int type_index(const std::string& type, const std::vector<std::string>& order) {
  const auto it = std::find(order.begin(), order.end(), type);
  return it == order.end() ? -1 : static_cast<int>(it - order.begin());
}

// The body of a class (its stages' tokens); nullopt when a value has no token.
std::optional<std::vector<int>> class_body(const PipelineTemplate& p, const std::vector<std::string>& order) {
  std::vector<int> body;
  bool ok = true;
  const auto put = [&](TokenKind k, int v) {
    const auto id = find_id({k, v});
    ok = ok && id.has_value();
    if (id) body.push_back(*id);
  };
  for (const StageTemplate& s : p.stages) {
    put(TokenKind::Stage, 0);
    put(TokenKind::Tp, s.tp);
    std::vector<std::pair<int, int>> kinds;  // (type index, groups), in increasing type index
    for (const GroupKind& k : s.kinds) kinds.push_back({type_index(k.gpu_type, order), k.groups});
    std::sort(kinds.begin(), kinds.end());
    for (const auto& [type, groups] : kinds) {
      ok = ok && type >= 0;
      put(TokenKind::Type, type);
      put(TokenKind::Count, groups);
    }
    if (s.ep == 1) continue;
    put(TokenKind::Ep, s.ep);
    put(TokenKind::Scope, static_cast<int>(s.ep_scope));
    if (s.uneven_experts) put(TokenKind::Uneven, 0);
  }
  if (!ok) return std::nullopt;
  return body;
}

// Reads a token sequence against the grammar of tokens.h (syntax only; the cluster is not consulted).
class TokenReader {
 public:
  TokenReader(const std::vector<int>& ids, const std::vector<std::string>& order) : ids_(ids), order_(order) {}

  Template read() {
    expect(TokenKind::Bos);
    Template t;
    do t.pipelines.push_back(pipeline());
    while (next_is(TokenKind::Pipeline));
    expect(TokenKind::Eos);
    if (pos_ != ids_.size()) fail("tokens after Eos");
    return canonical(std::move(t));
  }

 private:
  const std::vector<int>& ids_;
  const std::vector<std::string>& order_;
  size_t pos_ = 0;

  [[noreturn]] void fail(const std::string& reason) const {
    throw std::invalid_argument("token sequence, position " + std::to_string(pos_) + ": " + reason);
  }
  bool next_is(TokenKind k) const { return pos_ < ids_.size() && token_of(ids_[pos_]).kind == k; }
  int expect(TokenKind k) {
    if (pos_ >= ids_.size()) fail(std::string("expected ") + kind_name(k) + ", the sequence ends");
    const Token t = token_of(ids_[pos_]);
    if (t.kind != k) fail(std::string("expected ") + kind_name(k) + ", got " + token_name(t));
    ++pos_;
    return t.value;
  }

  PipelineTemplate pipeline() {
    expect(TokenKind::Pipeline);
    PipelineTemplate p;
    p.replicas = expect(TokenKind::Count);
    do p.stages.push_back(stage());
    while (next_is(TokenKind::Stage));
    return p;
  }

  StageTemplate stage() {
    expect(TokenKind::Stage);
    StageTemplate s;
    s.tp = expect(TokenKind::Tp);
    do {
      const int type = expect(TokenKind::Type);
      if (type >= static_cast<int>(order_.size()))
        fail("Type" + std::to_string(type) + " but the cluster has " + std::to_string(order_.size()) + " GPU types");
      s.kinds.push_back({order_[type], expect(TokenKind::Count)});
    } while (next_is(TokenKind::Type));
    if (!next_is(TokenKind::Ep)) return s;
    s.ep = expect(TokenKind::Ep);
    s.ep_scope = static_cast<EpScope>(expect(TokenKind::Scope));
    if (next_is(TokenKind::Uneven)) {
      expect(TokenKind::Uneven);
      s.uneven_experts = true;
    }
    return s;
  }
};

}  // namespace

std::optional<std::vector<int>> encode(const Template& t, const std::vector<std::string>& type_order) {
  struct Class {
    std::vector<int> body;
    int replicas_id;
  };
  std::vector<Class> classes;
  for (const PipelineTemplate& p : canonical(t).pipelines) {
    auto body = class_body(p, type_order);
    const auto replicas = find_id({TokenKind::Count, p.replicas});
    if (!body || !replicas) return std::nullopt;
    classes.push_back({std::move(*body), *replicas});
  }
  // Classes in strictly decreasing body order (tokens.h); canonical() made the bodies distinct.
  std::sort(classes.begin(), classes.end(), [](const Class& a, const Class& b) { return a.body > b.body; });
  std::vector<int> ids{token_id({TokenKind::Bos, 0})};
  for (const Class& c : classes) {
    ids.push_back(token_id({TokenKind::Pipeline, 0}));
    ids.push_back(c.replicas_id);
    ids.insert(ids.end(), c.body.begin(), c.body.end());
  }
  ids.push_back(token_id({TokenKind::Eos, 0}));
  return ids;
}

Template decode(const std::vector<int>& ids, const std::vector<std::string>& type_order) {
  return TokenReader(ids, type_order).read();
}

// ------------------------------------------------------------------ the grammar
namespace {

using Phase = TokenGrammar::Phase;
using State = TokenGrammar::State;
using Setup = TokenGrammar::Setup;

int width_index(int tp) {
  for (size_t w = 0; w < kTpWidths.size(); ++w)
    if (kTpWidths[w] == tp) return static_cast<int>(w);
  return -1;
}

// Whether `groups` more TP groups of width tp fit in the nodes of `type` (the count condition of tokens.h).
bool fits(const Setup& su, const State& s, int type, long groups, int tp) {
  const int wi = width_index(tp);
  if (wi < 0 || type < 0 || type >= static_cast<int>(su.types.size())) return false;
  for (int w = 0; w <= wi; ++w)
    if (s.used[type][w] + groups * (tp / kTpWidths[w]) > su.capacity[type][w]) return false;
  return true;
}

bool any_type_fits(const Setup& su, const State& s, long groups, int tp, int first_type = 0) {
  for (int k = first_type; k < static_cast<int>(su.types.size()); ++k)
    if (fits(su, s, k, groups, tp)) return true;
  return false;
}

void add_groups(State& s, int type, long groups, int tp) {
  for (int w = 0; w <= width_index(tp); ++w) s.used[type][w] += static_cast<int>(groups * (tp / kTpWidths[w]));
}

bool complete_point(Phase p) { return p == Phase::AfterGroups || p == Phase::AfterScope || p == Phase::AfterUneven; }

bool scope_ok(const State& s, int ep, int scope) {
  if (scope == static_cast<int>(EpScope::Stage)) return (s.tp * s.stage_groups) % ep == 0;
  return s.replicas % ep == 0;
}

bool ep_ok(const Setup& su, const State& s, int ep) {
  if (su.experts == 0 || ep <= 1 || su.experts % ep != 0) return false;
  return scope_ok(s, ep, static_cast<int>(EpScope::Stage)) || scope_ok(s, ep, static_cast<int>(EpScope::Pipelines));
}

// Uneven changes the placement only when the EP ranks are the stage's TP groups and differ in type.
bool uneven_ok(const State& s) {
  return s.scope == static_cast<int>(EpScope::Stage) && s.ep == s.stage_groups && s.stage_kinds > 1;
}

bool stage_end_allows(const Setup& su, const State& s, const Token& t) {
  switch (t.kind) {
    case TokenKind::Stage: return s.stages < su.layers && any_type_fits(su, s, s.replicas, 1);
    case TokenKind::Pipeline: return any_type_fits(su, s, 1, 1);
    case TokenKind::Eos: return true;
    default: return false;
  }
}

// Grammar and resources, without the order of classes.
bool free_allows(const Setup& su, const State& s, const Token& t) {
  switch (s.phase) {
    case Phase::Start: return t.kind == TokenKind::Bos;
    case Phase::AfterBos: return t.kind == TokenKind::Pipeline && any_type_fits(su, s, 1, 1);
    case Phase::AfterPipeline: return t.kind == TokenKind::Count && any_type_fits(su, s, t.value, 1);
    case Phase::AfterReplicas: return t.kind == TokenKind::Stage && stage_end_allows(su, s, t);
    case Phase::AfterStage:
      return t.kind == TokenKind::Tp && su.tp_ok[width_index(t.value)] && any_type_fits(su, s, s.replicas, t.value);
    case Phase::AfterTp: return t.kind == TokenKind::Type && fits(su, s, t.value, s.replicas, s.tp);
    case Phase::AfterType: return t.kind == TokenKind::Count && fits(su, s, s.last_type, static_cast<long>(s.replicas) * t.value, s.tp);
    case Phase::AfterGroups:
      if (t.kind == TokenKind::Type) return t.value > s.last_type && fits(su, s, t.value, s.replicas, s.tp);
      if (t.kind == TokenKind::Ep) return ep_ok(su, s, t.value);
      return stage_end_allows(su, s, t);
    case Phase::AfterEp: return t.kind == TokenKind::Scope && scope_ok(s, s.ep, t.value);
    case Phase::AfterScope:
      if (t.kind == TokenKind::Uneven) return uneven_ok(s);
      return stage_end_allows(su, s, t);
    case Phase::AfterUneven: return stage_end_allows(su, s, t);
    case Phase::Done: return false;
  }
  return false;
}

void push_body(State& s, int id) {
  if (!s.below_prev && s.body.size() < s.prev_body.size() && id < s.prev_body[s.body.size()]) s.below_prev = true;
  s.body.push_back(id);
}

void begin_class(State& s) {
  if (s.phase == Phase::AfterBos) {
    s.below_prev = true;  // the first class is unconstrained
  } else {
    s.prev_body = std::move(s.body);
    s.below_prev = false;
  }
  s.body.clear();
  ++s.classes;
}

void begin_stage(State& s) {
  ++s.stages;
  s.tp = 0;
  s.last_type = -1;
  s.stage_groups = s.stage_kinds = 0;
  s.ep = 1;
  s.scope = static_cast<int>(EpScope::Pipelines);
}

// Advances the state by one token (assumed allowed).
void apply(State& s, int id) {
  const Token t = token_of(id);
  switch (t.kind) {
    case TokenKind::Bos: s.phase = Phase::AfterBos; return;
    case TokenKind::Eos: s.phase = Phase::Done; return;
    case TokenKind::Pipeline:
      begin_class(s);
      s.phase = Phase::AfterPipeline;
      return;
    case TokenKind::Count:
      if (s.phase == Phase::AfterPipeline) {
        s.replicas = t.value;
        s.stages = 0;
        s.phase = Phase::AfterReplicas;
        return;
      }
      add_groups(s, s.last_type, static_cast<long>(s.replicas) * t.value, s.tp);
      s.stage_groups += t.value;
      ++s.stage_kinds;
      s.phase = Phase::AfterGroups;
      break;
    case TokenKind::Stage:
      begin_stage(s);
      s.phase = Phase::AfterStage;
      break;
    case TokenKind::Tp:
      s.tp = t.value;
      s.phase = Phase::AfterTp;
      break;
    case TokenKind::Type:
      s.last_type = t.value;
      s.phase = Phase::AfterType;
      break;
    case TokenKind::Ep:
      s.ep = t.value;
      s.phase = Phase::AfterEp;
      break;
    case TokenKind::Scope:
      s.scope = t.value;
      s.phase = Phase::AfterScope;
      break;
    case TokenKind::Uneven: s.phase = Phase::AfterUneven; break;
  }
  push_body(s, id);
}

bool is_terminator(const Token& t) { return t.kind == TokenKind::Pipeline || t.kind == TokenKind::Eos; }

// Whether some body token below `bound` may follow (the class then ends below the previous one).
bool some_body_token_below(const Setup& su, const State& s, int bound) {
  for (int id = 0; id < bound; ++id) {
    const Token t = token_of(id);
    if (!is_terminator(t) && free_allows(su, s, t)) return true;
  }
  return false;
}

// Whether a complete template is reachable from the state. Free of the class order (below_prev) every
// allowed token keeps one reachable (free_allows checks room for the smallest continuation). Otherwise
// the class must leave the previous body: copy it token by token until it can end early or step below.
bool completable(const Setup& su, State s) {
  if (s.phase == Phase::AfterPipeline) {
    // One replica needs the least room and can step below wherever more replicas can (tokens.h).
    const Token one{TokenKind::Count, 1};
    if (!free_allows(su, s, one)) return false;
    apply(s, token_id(one));
  }
  if (s.below_prev) return true;
  for (size_t j = s.body.size(); j < s.prev_body.size(); ++j) {
    if (complete_point(s.phase)) return true;  // ending here leaves a shorter, so smaller, body
    if (some_body_token_below(su, s, s.prev_body[j])) return true;
    if (!free_allows(su, s, token_of(s.prev_body[j]))) return false;
    apply(s, s.prev_body[j]);
  }
  return false;
}

bool with_token_completable(const Setup& su, const State& s, int id) {
  State next = s;
  apply(next, id);
  return completable(su, std::move(next));
}

// Grammar, resources and the class order.
bool allows(const Setup& su, const State& s, int id) {
  const Token t = token_of(id);
  if (!free_allows(su, s, t)) return false;
  if (s.phase == Phase::Start) return true;
  if (s.phase == Phase::AfterBos || s.phase == Phase::AfterPipeline) return with_token_completable(su, s, id);
  if (is_terminator(t)) {
    if (!s.below_prev && s.body.size() >= s.prev_body.size()) return false;  // would equal the previous class
    return t.kind == TokenKind::Eos || with_token_completable(su, s, id);
  }
  if (s.below_prev) return true;
  const size_t i = s.body.size();
  if (i >= s.prev_body.size() || id > s.prev_body[i]) return false;
  if (id < s.prev_body[i]) return true;
  return with_token_completable(su, s, id);
}

std::shared_ptr<const Setup> make_setup(const Cluster& cluster, const ModelConfig& model) {
  auto su = std::make_shared<Setup>();
  su->types = type_order(cluster);
  const auto nodes = node_sizes_by_type(cluster);
  for (const std::string& type : su->types) {
    std::array<int, kTpWidths.size()> cap{};
    for (size_t w = 0; w < kTpWidths.size(); ++w)
      for (const int n : nodes.at(type)) cap[w] += n / kTpWidths[w];
    su->capacity.push_back(cap);
  }
  su->layers = model.layers;
  su->experts = model.moe ? model.moe->experts : 0;
  for (const int tp : kTpWidths) su->tp_ok.push_back(tp_divides_heads(tp, model) ? 1 : 0);
  return su;
}

}  // namespace

TokenGrammar::TokenGrammar(const Cluster& cluster, const ModelConfig& model) : setup_(make_setup(cluster, model)) {
  state_.used.assign(setup_->types.size(), {});
}

std::vector<int> TokenGrammar::allowed() const {
  std::vector<int> out;
  for (int id = 0; id < vocabulary_size(); ++id)
    if (allows(*setup_, state_, id)) out.push_back(id);
  return out;
}

void TokenGrammar::push(int id) {
  if (id < 0 || id >= vocabulary_size() || !allows(*setup_, state_, id))
    throw std::invalid_argument("token " + (id >= 0 && id < vocabulary_size() ? token_name(token_of(id)) : std::to_string(id)) +
                                " is not allowed after " + std::to_string(tokens_.size()) + " tokens");
  apply(state_, id);
  tokens_.push_back(id);
}

bool TokenGrammar::finished() const { return state_.phase == Phase::Done; }

const std::vector<int>& TokenGrammar::tokens() const { return tokens_; }

const std::vector<std::string>& TokenGrammar::types() const { return setup_->types; }

}  // namespace arachne::planner
