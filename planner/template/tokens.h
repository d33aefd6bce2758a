// The policy's view of a template: a token sequence over a fixed vocabulary, relative to the cluster's list
// of GPU types (type_order: the GPU types present, sorted by name, at most kMaxGpuTypes; token Type k names
// type_order[k], so the policy never sees type names, only the features of group k).
//
// Grammar (one template, canonical order):
//   Bos  { Pipeline Count(replicas)  { Stage Tp(t) { Type(k) Count(groups) }+ [Ep(e) Scope(s) [Uneven]] }+ }+  Eos
// Count values are drawn from kCounts (a template whose replica or group count is not in it has no token form).
// TokenGrammar gives, after any valid prefix, the tokens that may follow: the grammar above, GPUs of each type
// not yet used, TP widths no larger than the type's largest node, and, for MoE models, EP widths that divide
// the expert count. Decoding masks the policy's logits with it, so every decoded sequence is a template that
// the cluster can hold (completion may still find no plan that fits in memory).
//
// One sequence per canonical template (encode and the grammar agree):
//   - a stage's kinds in increasing type index, each type at most once;
//   - EP 1 is said by leaving the EP clause out (Ep1 is in the vocabulary but never allowed);
//   - Uneven only where it changes the placement: scope stage, EP ranks = the stage's TP groups
//     (ep == groups, the case in which the simulator reads a per-rank expert list) and more than one type;
//   - pipeline classes in strictly decreasing order of their body (the tokens from their first Stage to the
//     next Pipeline or Eos, compared id by id, a body that ends first being the smaller). Identical bodies
//     are one class with a replica count.
// Feasibility: per type, TP groups of width w (1, 2, 4, 8) fit in its nodes iff for every width s,
// sum over groups with w >= s of w/s <= sum over nodes of floor(node GPUs / s) (the widths divide one
// another, so the count condition is exact). Count(replicas) scales every group of its class. EP: the
// width divides the expert count and the stage's GPUs (scope stage, as validate_plan) or the class's
// replicas (scope pipelines). At most model.layers stages per pipeline. Every allowed token keeps a
// complete template reachable (no dead ends), the class order included.
#pragma once
#include <array>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "planner/template/template.h"

namespace arachne::planner {

inline constexpr int kMaxGpuTypes = 8;
inline constexpr std::array<int, 4> kTpWidths{1, 2, 4, 8};
inline constexpr std::array<int, 8> kEpWidths{1, 2, 4, 8, 16, 32, 64, 128};
// Replica and group counts a token can say: every count to 16, then steps of ~1.25-1.5x to 1,024.
inline constexpr std::array<int, 32> kCounts{1,  2,  3,  4,  5,  6,  7,  8,  9,  10,  11,  12,  13,  14,  15,  16,
                                             20, 24, 28, 32, 40, 48, 64, 80, 96, 128, 160, 192, 256, 384, 512, 1024};

enum class TokenKind { Bos, Eos, Pipeline, Stage, Type, Tp, Count, Ep, Scope, Uneven };

struct Token {
  TokenKind kind = TokenKind::Bos;
  int value = 0;  // Type: index into type_order; Tp/Count/Ep: the width or count; Scope: EpScope as int
  bool operator==(const Token& o) const { return kind == o.kind && value == o.value; }
};

// The fixed vocabulary: token <-> id (0 .. vocabulary_size()-1). One place for the list.
int vocabulary_size();
int token_id(const Token& t);  // throws std::invalid_argument for a token outside the vocabulary
Token token_of(int id);
std::string token_name(const Token& t);  // "Bos", "Type2", "Tp4", "Count12", "Ep8", "Scope:stage", ...

// The cluster's GPU types in token order (sorted by name; throws InputError when more than kMaxGpuTypes).
std::vector<std::string> type_order(const Cluster& cluster);

// Token form of a canonical template; nullopt when a count, width or type has no token.
std::optional<std::vector<int>> encode(const Template& t, const std::vector<std::string>& type_order);
// Template of a token sequence (Bos ... Eos); throws std::invalid_argument when it breaks the grammar.
Template decode(const std::vector<int>& ids, const std::vector<std::string>& type_order);

// Incremental grammar and feasibility state for masked decoding.
class TokenGrammar {
 public:
  TokenGrammar(const Cluster& cluster, const ModelConfig& model);
  // Ids that may follow the tokens pushed so far (sorted ascending); empty after Eos.
  std::vector<int> allowed() const;
  // Appends a token; throws std::invalid_argument when it is not in allowed().
  void push(int id);
  bool finished() const;
  const std::vector<int>& tokens() const;
  const std::vector<std::string>& types() const;  // type_order(cluster)

  // The grammar's position and what the prefix has used (public so that enumerators can read it).
  enum class Phase { Start, AfterBos, AfterPipeline, AfterReplicas, AfterStage, AfterTp, AfterType, AfterGroups, AfterEp,
                     AfterScope, AfterUneven, Done };
  struct State {
    Phase phase = Phase::Start;
    std::vector<std::array<int, kTpWidths.size()>> used;  // per type: sum of w/s over groups of width w >= s
    int classes = 0;                 // pipeline classes begun
    int replicas = 0, stages = 0;    // of the current class
    int tp = 0, last_type = -1, stage_groups = 0, stage_kinds = 0, ep = 1, scope = 0;  // of the current stage
    std::vector<int> prev_body, body;  // token ids of the previous and the current class's body
    bool below_prev = false;           // body already smaller than prev_body (or no previous class)
  };
  const State& state() const { return state_; }

  // Per cluster and model; shared by copies of the grammar (beam search copies it per beam).
  struct Setup {
    std::vector<std::string> types;
    std::vector<std::array<int, kTpWidths.size()>> capacity;  // per type: sum over nodes of floor(gpus / s)
    int layers = 0;
    int experts = 0;  // 0 for dense models
    std::vector<int> tp_ok;  // per kTpWidths index: 1 when the width divides the heads and kv heads
  };

 private:
  std::vector<int> tokens_;
  std::shared_ptr<const Setup> setup_;
  State state_;
};

}  // namespace arachne::planner
