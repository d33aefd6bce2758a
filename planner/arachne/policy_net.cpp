// Plain-C++ forward pass and masked decoding of the policy network (equations in policy_weights.h).
#include "planner/arachne/policy_net.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace arachne::planner {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
void relu(std::vector<float>& v) {
  for (float& x : v) x = std::max(x, 0.0f);
}

// log p(token) for each allowed token: the softmax of the logits restricted to the allowed ids.
std::vector<double> masked_log_softmax(const std::vector<float>& logits, const std::vector<int>& allowed) {
  double top = -std::numeric_limits<double>::infinity();
  for (int id : allowed) top = std::max(top, static_cast<double>(logits[id]));
  if (!std::isfinite(top)) throw std::invalid_argument("policy: every allowed token has logit -inf");
  double sum = 0;
  for (int id : allowed) sum += std::exp(logits[id] - top);
  const double log_z = top + std::log(sum);
  std::vector<double> out;
  out.reserve(allowed.size());
  for (int id : allowed) out.push_back(logits[id] - log_z);
  return out;
}

// A decoding in progress: its tokens, score, decoder state and grammar.
struct Hypothesis {
  std::vector<int> tokens;
  double log_prob = 0;
  std::vector<float> h;
  std::unique_ptr<DecodingGrammar> grammar;
};

// More probable first; equal scores: the smaller token sequence first.
bool better(double lp_a, const std::vector<int>& a, double lp_b, const std::vector<int>& b) {
  if (lp_a != lp_b) return lp_a > lp_b;
  return a < b;
}

}  // namespace

__attribute__((target_clones("avx2", "default"))) void affine_by_columns(const float* wt, const float* b, int in, int out,
                                                                          const float* x, float* y) {
  std::copy(b, b + out, y);
  for (int j = 0; j < in; ++j) {
    const float xj = x[j];
    const float* col = wt + static_cast<size_t>(j) * out;
    for (int i = 0; i < out; ++i) y[i] += col[i] * xj;
  }
}

void PolicyNet::Linear::apply(const float* x, float* y) const { affine_by_columns(wt.data(), b.data(), in, out, x, y); }

PolicyNet::Linear PolicyNet::linear(const PolicyWeights& w, const std::string& name) const {
  const std::vector<float>& weight = w.tensors.at(name + ".weight");
  Linear l;
  l.b = w.tensors.at(name + ".bias");
  l.out = static_cast<int>(l.b.size());
  l.in = static_cast<int>(weight.size()) / l.out;
  l.wt.resize(weight.size());
  for (int o = 0; o < l.out; ++o)
    for (int i = 0; i < l.in; ++i) l.wt[static_cast<size_t>(i) * l.out + o] = weight[static_cast<size_t>(o) * l.in + i];
  return l;
}

PolicyNet::PolicyNet(const PolicyWeights& w) : shape_(w.shape) {
  check_weights(w);
  group1_ = linear(w, "group1");
  group2_ = linear(w, "group2");
  global1_ = linear(w, "global1");
  global2_ = linear(w, "global2");
  context_ = linear(w, "context");
  init_ = linear(w, "init");
  type_in_ = linear(w, "type_in");
  out_ = linear(w, "out");
  query_ = linear(w, "query");
  key_ = linear(w, "key");
  // The GRU as two linear maps (Torch's GRUCell: weight_ih/bias_ih on the input, weight_hh/bias_hh on h).
  PolicyWeights gru;
  gru.tensors["ih.weight"] = w.tensors.at("gru.weight_ih");
  gru.tensors["ih.bias"] = w.tensors.at("gru.bias_ih");
  gru.tensors["hh.weight"] = w.tensors.at("gru.weight_hh");
  gru.tensors["hh.bias"] = w.tensors.at("gru.bias_hh");
  gru_ih_ = linear(gru, "ih");
  gru_hh_ = linear(gru, "hh");

  const int v = shape_.vocabulary, t = shape_.token_width, g3 = 3 * shape_.decoder_width;
  type_of_token_.assign(v, -1);
  for (int k = 0; k < shape_.max_groups(); ++k) type_of_token_[shape_.type_tokens[k]] = k;
  // Input gates of each token's embedding (no bias: bias_ih enters once, with the context part).
  const std::vector<float>& embed = w.tensors.at("embed.weight");
  token_gates_.assign(static_cast<size_t>(v) * g3, 0.0f);
  for (int id = 0; id < v; ++id)
    for (int j = 0; j < t; ++j) {
      const float e = embed[static_cast<size_t>(id) * t + j];
      const float* col = gru_ih_.wt.data() + static_cast<size_t>(j) * g3;
      float* y = token_gates_.data() + static_cast<size_t>(id) * g3;
      for (int i = 0; i < g3; ++i) y[i] += col[i] * e;
    }
}

PolicyNet PolicyNet::load(const std::string& path) { return PolicyNet(read_policy_weights(path)); }

std::vector<float> PolicyNet::group_encoding(const float* x) const {
  std::vector<float> a(group1_.out), e(group2_.out);
  group1_.apply(x, a.data());
  relu(a);
  group2_.apply(a.data(), e.data());
  relu(e);
  return e;
}

PolicyNet::Encoded PolicyNet::encode(const RequestFeatures& f) const {
  const int e = shape_.encoder_width, t = shape_.token_width, g3 = 3 * shape_.decoder_width;
  if (f.groups < 1 || f.groups > shape_.max_groups())
    throw std::invalid_argument("policy: " + std::to_string(f.groups) + " GPU-type groups; the network takes 1 to " +
                                std::to_string(shape_.max_groups()));
  if (f.group.size() != static_cast<size_t>(f.groups) * shape_.group_features ||
      f.global.size() != static_cast<size_t>(shape_.global_features))
    throw std::invalid_argument("policy: the features do not have the sizes the network was trained with");

  Encoded enc;
  enc.groups = f.groups;
  // Deep set: per-group encodings, pooled by mean and max (order-invariant), with the global encoding.
  std::vector<float> pooled(3 * e, 0.0f);
  std::fill(pooled.begin() + e, pooled.begin() + 2 * e, kNegInf);
  std::vector<std::vector<float>> groups;
  for (int k = 0; k < f.groups; ++k) {
    groups.push_back(group_encoding(f.group.data() + static_cast<size_t>(k) * shape_.group_features));
    for (int i = 0; i < e; ++i) {
      pooled[i] += groups.back()[i] / static_cast<float>(f.groups);
      pooled[e + i] = std::max(pooled[e + i], groups.back()[i]);
    }
  }
  std::vector<float> a(e);
  global1_.apply(f.global.data(), a.data());
  relu(a);
  global2_.apply(a.data(), pooled.data() + 2 * e);
  std::for_each(pooled.begin() + 2 * e, pooled.end(), [](float& x) { x = std::max(x, 0.0f); });
  std::vector<float> c(e);
  context_.apply(pooled.data(), c.data());
  relu(c);

  enc.h0.resize(shape_.decoder_width);
  init_.apply(c.data(), enc.h0.data());
  for (float& x : enc.h0) x = std::tanh(x);
  // Input gates of the context part of every GRU input: W_ih[:, T:] c + bias_ih.
  enc.context_gates = gru_ih_.b;
  for (int j = 0; j < e; ++j) {
    const float* col = gru_ih_.wt.data() + static_cast<size_t>(t + j) * g3;
    for (int i = 0; i < g3; ++i) enc.context_gates[i] += col[i] * c[j];
  }
  // Per group: the key of the pointer score and the input gates of its Type token.
  const float scale = 1.0f / std::sqrt(static_cast<float>(e));
  enc.keys.resize(static_cast<size_t>(f.groups) * e);
  enc.type_gates.assign(static_cast<size_t>(f.groups) * g3, 0.0f);
  std::vector<float> in(t);
  for (int k = 0; k < f.groups; ++k) {
    float* key = enc.keys.data() + static_cast<size_t>(k) * e;
    key_.apply(groups[k].data(), key);
    for (int i = 0; i < e; ++i) key[i] *= scale;
    type_in_.apply(groups[k].data(), in.data());
    float* y = enc.type_gates.data() + static_cast<size_t>(k) * g3;
    for (int j = 0; j < t; ++j) {
      const float* col = gru_ih_.wt.data() + static_cast<size_t>(j) * g3;
      for (int i = 0; i < g3; ++i) y[i] += col[i] * in[j];
    }
  }
  return enc;
}

void PolicyNet::step(const Encoded& enc, std::vector<float>& h, int token, std::vector<float>& logits) const {
  const int d = shape_.decoder_width, e = shape_.encoder_width;
  if (token < 0 || token >= shape_.vocabulary) throw std::invalid_argument("policy: token id outside the vocabulary");
  const int k = type_index(token);
  if (k >= enc.groups) throw std::invalid_argument("policy: Type token of a group the request does not have");
  const float* gi_token = k >= 0 ? enc.type_gates.data() + static_cast<size_t>(k) * 3 * d
                                 : token_gates_.data() + static_cast<size_t>(token) * 3 * d;
  std::vector<float> gh(3 * d);
  gru_hh_.apply(h.data(), gh.data());
  // torch.nn.GRUCell: gates ordered r, z, n; n = tanh(i_n + r * h_n); h' = (1 - z) n + z h.
  for (int i = 0; i < d; ++i) {
    const float r = sigmoid(gi_token[i] + enc.context_gates[i] + gh[i]);
    const float z = sigmoid(gi_token[d + i] + enc.context_gates[d + i] + gh[d + i]);
    const float n = std::tanh(gi_token[2 * d + i] + enc.context_gates[2 * d + i] + r * gh[2 * d + i]);
    h[i] = (1.0f - z) * n + z * h[i];
  }
  logits.resize(shape_.vocabulary);
  out_.apply(h.data(), logits.data());
  std::vector<float> q(e);
  query_.apply(h.data(), q.data());
  for (int g = 0; g < shape_.max_groups(); ++g) {
    float score = kNegInf;
    if (g < enc.groups) {
      score = 0;
      const float* key = enc.keys.data() + static_cast<size_t>(g) * e;
      for (int i = 0; i < e; ++i) score += q[i] * key[i];
    }
    logits[shape_.type_tokens[g]] = score;
  }
}

std::vector<std::vector<float>> PolicyNet::logits(const RequestFeatures& f, const std::vector<int>& tokens) const {
  if (tokens.empty() || tokens[0] != shape_.bos_token) throw std::invalid_argument("policy: a sequence starts with Bos");
  const Encoded enc = encode(f);
  std::vector<float> h = enc.h0;
  std::vector<std::vector<float>> rows(tokens.size() - 1);
  for (size_t t = 0; t + 1 < tokens.size(); ++t) step(enc, h, tokens[t], rows[t]);
  return rows;
}

namespace {

// The grammar after the decoder's first input, Bos: pushed when the grammar asks for it.
std::unique_ptr<DecodingGrammar> after_bos(const DecodingGrammar& grammar, int bos) {
  std::unique_ptr<DecodingGrammar> g = grammar.clone();
  const std::vector<int> first = g->allowed();
  if (first.size() == 1 && first[0] == bos) g->push(bos);
  return g;
}

}  // namespace

std::vector<std::vector<int>> allowed_along(const DecodingGrammar& grammar, const std::vector<int>& tokens, int bos,
                                            bool prefix) {
  if (tokens.empty() || tokens[0] != bos) throw std::invalid_argument("policy: a sequence starts with Bos");
  std::unique_ptr<DecodingGrammar> g = after_bos(grammar, bos);
  std::vector<std::vector<int>> out;
  for (size_t t = 1; t < tokens.size(); ++t) {
    out.push_back(g->allowed());
    if (!std::binary_search(out.back().begin(), out.back().end(), tokens[t]))
      throw std::invalid_argument("policy: token " + std::to_string(t) + " is not allowed where it stands");
    g->push(tokens[t]);
  }
  if (!prefix && !g->allowed().empty()) throw std::invalid_argument("policy: the sequence stops before the grammar completes");
  return out;
}

double PolicyNet::log_prob(const RequestFeatures& f, const DecodingGrammar& grammar, const std::vector<int>& tokens) const {
  const std::vector<std::vector<int>> allowed = allowed_along(grammar, tokens, shape_.bos_token);
  const std::vector<std::vector<float>> rows = logits(f, tokens);
  double total = 0;
  for (size_t t = 1; t < tokens.size(); ++t) {
    const std::vector<int>& a = allowed[t - 1];
    const size_t i = std::lower_bound(a.begin(), a.end(), tokens[t]) - a.begin();
    total += masked_log_softmax(rows[t - 1], a)[i];
  }
  return total;
}

std::vector<DecodedSequence> PolicyNet::beam(const RequestFeatures& f, const DecodingGrammar& grammar, int width,
                                             int max_steps) const {
  if (width < 1) throw std::invalid_argument("policy: beam width must be at least 1");
  const Encoded enc = encode(f);
  std::vector<Hypothesis> live(1);
  live[0].tokens = {shape_.bos_token};
  live[0].h = enc.h0;
  live[0].grammar = after_bos(grammar, shape_.bos_token);
  std::vector<DecodedSequence> done;

  // A one-token extension of live[parent]. Parents have equal lengths, so comparing (parent's tokens,
  // token) is comparing the extended sequences.
  struct Candidate {
    int parent;
    int token;
    double log_prob;
  };
  std::vector<float> logits;
  for (int t = 0; t < max_steps && !live.empty(); ++t) {
    // Expand every live hypothesis by each allowed token.
    std::vector<Candidate> candidates;
    for (int p = 0; p < static_cast<int>(live.size()); ++p) {
      Hypothesis& hyp = live[p];
      step(enc, hyp.h, hyp.tokens.back(), logits);
      const std::vector<int> allowed = hyp.grammar->allowed();
      const std::vector<double> lp = masked_log_softmax(logits, allowed);
      for (size_t i = 0; i < allowed.size(); ++i) candidates.push_back({p, allowed[i], hyp.log_prob + lp[i]});
    }
    // Keep the `width` best; completed sequences leave the beam.
    const size_t keep = std::min(candidates.size(), static_cast<size_t>(width));
    std::partial_sort(candidates.begin(), candidates.begin() + static_cast<long>(keep), candidates.end(),
                      [&live](const Candidate& a, const Candidate& b) {
                        if (a.log_prob != b.log_prob) return a.log_prob > b.log_prob;
                        if (a.parent != b.parent) return live[a.parent].tokens < live[b.parent].tokens;
                        return a.token < b.token;
                      });
    std::vector<Hypothesis> next;
    for (size_t i = 0; i < keep; ++i) {
      const Candidate& c = candidates[i];
      std::vector<int> tokens = live[c.parent].tokens;
      tokens.push_back(c.token);
      std::unique_ptr<DecodingGrammar> g = live[c.parent].grammar->clone();
      g->push(c.token);
      if (g->allowed().empty()) {
        done.push_back({std::move(tokens), c.log_prob});
        continue;
      }
      next.push_back({std::move(tokens), c.log_prob, live[c.parent].h, std::move(g)});
    }
    live = std::move(next);
    // Scores only fall as sequences grow: once `width` completed sequences beat every live one, stop.
    std::sort(done.begin(), done.end(), [](const DecodedSequence& a, const DecodedSequence& b) {
      return better(a.log_prob, a.tokens, b.log_prob, b.tokens);
    });
    if (done.size() >= static_cast<size_t>(width) && !live.empty() && live.front().log_prob < done[width - 1].log_prob)
      break;
  }
  if (done.size() > static_cast<size_t>(width)) done.resize(width);
  return done;
}

DecodedSequence PolicyNet::sample(const RequestFeatures& f, const DecodingGrammar& grammar, std::mt19937_64& rng,
                                  int max_steps) const {
  const Encoded enc = encode(f);
  std::vector<float> h = enc.h0, logits;
  std::unique_ptr<DecodingGrammar> g = after_bos(grammar, shape_.bos_token);
  DecodedSequence s{{shape_.bos_token}, 0.0};
  for (int t = 0; t < max_steps; ++t) {
    const std::vector<int> allowed = g->allowed();
    if (allowed.empty()) break;
    step(enc, h, s.tokens.back(), logits);
    const std::vector<double> lp = masked_log_softmax(logits, allowed);
    // Inverse-CDF draw from a uniform in [0, 1) made of the generator's top 53 bits (portable, unlike
    // std::uniform_real_distribution).
    const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
    size_t pick = allowed.size() - 1;
    double cdf = 0;
    for (size_t i = 0; i < allowed.size(); ++i) {
      cdf += std::exp(lp[i]);
      if (u < cdf) {
        pick = i;
        break;
      }
    }
    s.tokens.push_back(allowed[pick]);
    s.log_prob += lp[pick];
    g->push(allowed[pick]);
  }
  s.complete = g->allowed().empty();
  return s;
}

}  // namespace arachne::planner
