// Plain-C++ inference of the learned planner's policy (no Torch): the network of policy_weights.h, read
// from an exported weights file, decoded token by token under a grammar's masks.
//
// Probabilities are always over the tokens the grammar allows at that point: a masked softmax of the
// logits (the network's scores of forbidden tokens play no part). Decoding starts by feeding Bos; when the
// grammar's first allowed set is {Bos} the Bos is pushed into it for free, and every returned sequence
// starts with Bos (the form of tokens.h's encode()).
//
// Typical use (the learned planner):
//   const PolicyNet net = PolicyNet::load(path);
//   const auto best = net.beam(request_features(cluster, model, batch), TokenGrammar(cluster, model), 8);
#pragma once
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "planner/arachne/features.h"
#include "planner/arachne/policy_weights.h"
#include "planner/template/tokens.h"

namespace arachne::planner {

// The network's shape for the template vocabulary (planner/template/tokens.h) and the features of
// features.h, with the default widths: what the learned planner trains and loads.
inline PolicyShape template_policy_shape() {
  PolicyShape s;
  s.group_features = kGroupFeatures;
  s.global_features = kGlobalFeatures;
  s.vocabulary = vocabulary_size();
  s.bos_token = token_id(Token{TokenKind::Bos, 0});
  for (int k = 0; k < kMaxGpuTypes; ++k) s.type_tokens.push_back(token_id(Token{TokenKind::Type, k}));
  return s;
}

// y = b + W x for W stored transposed (`in` rows of `out`), summed one column at a time: each y[i] adds its
// terms in the order j = 0, 1, ..., in - 1 whatever the vector width, so the AVX2 clone (picked at load
// time where the CPU has it) and the default one give the same bits. Test
// ArachnePolicyNet.AffineByColumnsIsTheScalarSumBitForBit.
void affine_by_columns(const float* wt, const float* b, int in, int out, const float* x, float* y);

// What masked decoding needs from a grammar.
class DecodingGrammar {
 public:
  virtual ~DecodingGrammar() = default;
  // Ids that may follow (sorted ascending, no repeats); empty when the sequence is complete.
  virtual std::vector<int> allowed() const = 0;
  virtual void push(int id) = 0;
  virtual std::unique_ptr<DecodingGrammar> clone() const = 0;
};

// Any copyable class with allowed() and push(id) (e.g. TokenGrammar) as a DecodingGrammar.
template <class G>
class GrammarAdapter final : public DecodingGrammar {
 public:
  explicit GrammarAdapter(G g) : g_(std::move(g)) {}
  std::vector<int> allowed() const override { return g_.allowed(); }
  void push(int id) override { g_.push(id); }
  std::unique_ptr<DecodingGrammar> clone() const override { return std::make_unique<GrammarAdapter>(g_); }

 private:
  G g_;
};

struct DecodedSequence {
  std::vector<int> tokens;  // Bos ... (the grammar's last token, unless `complete` is false)
  double log_prob = 0;      // sum over decoded tokens of log p(token | prefix), masked softmax
  bool complete = true;     // false: a sample stopped by its step limit before the grammar completed
};

// The ids the grammar allows before each token of `tokens` after the first (Bos): tokens.size() - 1 sorted
// lists, the masks of teacher-forced training. Throws std::invalid_argument when a token is not allowed
// where it stands or (unless `prefix`: an incomplete sample's tokens) the sequence stops before the grammar
// completes.
std::vector<std::vector<int>> allowed_along(const DecodingGrammar& grammar, const std::vector<int>& tokens, int bos,
                                            bool prefix = false);
template <class G>
std::vector<std::vector<int>> allowed_along(const G& grammar, const std::vector<int>& tokens, int bos, bool prefix = false) {
  return allowed_along(static_cast<const DecodingGrammar&>(GrammarAdapter<G>(grammar)), tokens, bos, prefix);
}

class PolicyNet {
 public:
  // Throws std::invalid_argument when the weights do not match their shape (check_weights).
  explicit PolicyNet(const PolicyWeights& weights);
  // Reads an exported weights file; InputError for a bad file (read_policy_weights).
  static PolicyNet load(const std::string& path);

  const PolicyShape& shape() const { return shape_; }

  // A request, encoded once for all decoding steps.
  struct Encoded {
    int groups = 0;
    std::vector<float> keys;          // groups x E: key(e_k) / sqrt(E)
    std::vector<float> type_gates;    // groups x 3D: the GRU's input gates of token Type k
    std::vector<float> context_gates; // 3D: the GRU's input gates of the context part, with bias_ih
    std::vector<float> h0;            // D
  };
  // Throws std::invalid_argument when the feature sizes do not match the network or there are more groups
  // than Type tokens (or none).
  Encoded encode(const RequestFeatures& f) const;

  // One decoder step: consumes `token` (its input), updates `h` (D floats) and writes the logits of the
  // next token (vocabulary floats; -inf for the Type tokens of absent groups).
  void step(const Encoded& enc, std::vector<float>& h, int token, std::vector<float>& logits) const;

  // Teacher-forced logits: row t (vocabulary floats) scores tokens[t + 1] after tokens[0..t];
  // tokens.size() - 1 rows. tokens[0] must be Bos.
  std::vector<std::vector<float>> logits(const RequestFeatures& f, const std::vector<int>& tokens) const;

  // Log-probability of a complete sequence (Bos first) under the grammar's masks. Throws
  // std::invalid_argument when a token is not allowed where it stands or the sequence stops early.
  double log_prob(const RequestFeatures& f, const DecodingGrammar& grammar, const std::vector<int>& tokens) const;

  // The `width` most probable complete sequences that a beam of that width finds, most probable first;
  // ties are broken by the smaller token sequence (lexicographic), so the result is deterministic. Exact
  // (the true top `width`) when width is at least the number of complete sequences. Sequences still
  // incomplete after max_steps tokens are dropped. Fewer than `width` when the grammar has fewer sequences.
  std::vector<DecodedSequence> beam(const RequestFeatures& f, const DecodingGrammar& grammar, int width,
                                    int max_steps = 256) const;
  template <class G>
  std::vector<DecodedSequence> beam(const RequestFeatures& f, const G& grammar, int width, int max_steps = 256) const {
    return beam(f, static_cast<const DecodingGrammar&>(GrammarAdapter<G>(grammar)), width, max_steps);
  }

  // One sequence drawn from the policy (ancestral sampling under the masks, temperature 1). Deterministic
  // for a given generator state. When max_steps tokens pass without completion, the tokens drawn so far
  // with `complete` false (a policy that wanders is penalised for it, not stopped).
  DecodedSequence sample(const RequestFeatures& f, const DecodingGrammar& grammar, std::mt19937_64& rng,
                         int max_steps = 256) const;

 private:
  struct Linear {  // y = W x + b, W stored transposed (in x out) so that y accumulates column by column
    int in = 0, out = 0;
    std::vector<float> wt;
    std::vector<float> b;
    void apply(const float* x, float* y) const;
  };
  Linear linear(const PolicyWeights& w, const std::string& name) const;
  std::vector<float> group_encoding(const float* x) const;
  int type_index(int token) const { return type_of_token_[token]; }

  PolicyShape shape_;
  Linear group1_, group2_, global1_, global2_, context_, init_, type_in_, out_, query_, key_;
  Linear gru_ih_;                   // weight_ih: (T + E) -> 3D, with bias_ih
  Linear gru_hh_;                   // weight_hh: D -> 3D, with bias_hh
  std::vector<float> token_gates_;  // vocabulary x 3D: W_ih[:, :T] embed[v] (Type rows unused)
  std::vector<int> type_of_token_;  // vocabulary: k for Type k, -1 otherwise
};

}  // namespace arachne::planner
