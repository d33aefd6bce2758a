// The policy network in LibTorch; equations in planner/arachne/policy_weights.h.
#include "planner/learned/policy_net.h"

#include <cmath>
#include <limits>
#include <stdexcept>

namespace arachne::learned {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

}  // namespace

PolicyNetImpl::PolicyNetImpl(const PolicyShape& s) : shape_(s) {
  const int64_t e = s.encoder_width, t = s.token_width, d = s.decoder_width, v = s.vocabulary;
  group1_ = register_module("group1", torch::nn::Linear(s.group_features, e));
  group2_ = register_module("group2", torch::nn::Linear(e, e));
  global1_ = register_module("global1", torch::nn::Linear(s.global_features, e));
  global2_ = register_module("global2", torch::nn::Linear(e, e));
  context_ = register_module("context", torch::nn::Linear(3 * e, e));
  init_ = register_module("init", torch::nn::Linear(e, d));
  embed_ = register_module("embed", torch::nn::Embedding(v, t));
  type_in_ = register_module("type_in", torch::nn::Linear(e, t));
  gru_ = register_module("gru", torch::nn::GRUCell(t + e, d));
  out_ = register_module("out", torch::nn::Linear(d, v));
  query_ = register_module("query", torch::nn::Linear(d, e));
  key_ = register_module("key", torch::nn::Linear(e, e));

  std::vector<int64_t> type_of(v, -1), ids;
  for (int k = 0; k < s.max_groups(); ++k) {
    type_of.at(s.type_tokens[k]) = k;
    ids.push_back(s.type_tokens[k]);
  }
  type_of_token_ = register_buffer("type_of_token", torch::tensor(type_of, torch::kLong));
  type_tokens_ = register_buffer("type_tokens", torch::tensor(ids, torch::kLong));
}

PolicyEncoding PolicyNetImpl::encode(const torch::Tensor& group_x, const torch::Tensor& group_count,
                                     const torch::Tensor& global_x) {
  const int64_t g = group_x.size(1);
  PolicyEncoding enc;
  enc.present = torch::arange(g, torch::kLong).unsqueeze(0) < group_count.unsqueeze(1);  // [B, G]
  const torch::Tensor present = enc.present.unsqueeze(-1);
  // Deep set: per-group encodings, pooled by mean and max over the present groups.
  enc.groups = torch::relu(group2_(torch::relu(group1_(group_x)))) * present.to(torch::kFloat);
  const torch::Tensor mean = enc.groups.sum(1) / group_count.unsqueeze(1).to(torch::kFloat);
  const torch::Tensor max = std::get<0>(enc.groups.masked_fill(~present, kNegInf).max(1));
  const torch::Tensor global = torch::relu(global2_(torch::relu(global1_(global_x))));
  enc.context = torch::relu(context_(torch::cat({mean, max, global}, 1)));
  return enc;
}

torch::Tensor PolicyNetImpl::logits(const PolicyBatch& batch) {
  const PolicyEncoding enc = encode(batch.group_x, batch.group_count, batch.global_x);
  const int64_t b = batch.tokens.size(0), steps = batch.tokens.size(1) - 1, g = enc.groups.size(1);
  const int64_t max_groups = shape_.max_groups();
  if (g > max_groups) throw std::invalid_argument("policy: more groups than Type tokens");
  const torch::Tensor keys = key_(enc.groups) / std::sqrt(static_cast<double>(shape_.encoder_width));  // [B, G, E]
  const torch::Tensor type_inputs = type_in_(enc.groups);                                               // [B, G, T]
  // Pointer scores of absent groups (padding rows, and Type tokens beyond G) are -inf.
  const torch::Tensor absent = torch::cat({~enc.present, torch::ones({b, max_groups - g}, torch::kBool)}, 1);

  torch::Tensor h = torch::tanh(init_(enc.context));
  std::vector<torch::Tensor> rows;
  for (int64_t t = 0; t < steps; ++t) {
    const torch::Tensor token = batch.tokens.select(1, t);
    const torch::Tensor k = type_of_token_.index_select(0, token);  // [B]
    const torch::Tensor is_type = (k >= 0).unsqueeze(1);
    const torch::Tensor index = k.clamp_min(0).view({b, 1, 1}).expand({b, 1, shape_.token_width});
    const torch::Tensor type_input = type_inputs.gather(1, index).squeeze(1);
    const torch::Tensor input = torch::where(is_type, type_input, embed_(token));
    h = gru_(torch::cat({input, enc.context}, 1), h);
    const torch::Tensor pointer = torch::bmm(keys, query_(h).unsqueeze(2)).squeeze(2);  // [B, G]
    const torch::Tensor scores =
        torch::cat({pointer, torch::zeros({b, max_groups - g})}, 1).masked_fill(absent, kNegInf);
    rows.push_back(out_(h).index_copy(1, type_tokens_, scores));
  }
  return torch::stack(rows, 1);
}

torch::Tensor target_log_probs(PolicyNet& net, const PolicyBatch& batch) {
  const torch::Tensor logits = net->logits(batch);  // [B, S, V]
  const int64_t steps = logits.size(1);
  const torch::Tensor valid = torch::arange(steps, torch::kLong).unsqueeze(0) < (batch.lengths - 1).unsqueeze(1);
  const torch::Tensor targets = batch.tokens.slice(1, 1).unsqueeze(2);  // [B, S, 1]
  const torch::Tensor target_allowed = batch.allowed.gather(2, targets).squeeze(2);
  if ((valid & ~target_allowed).any().item<bool>())
    throw std::invalid_argument("policy batch: a target token is not allowed where it stands");
  // Padding steps get an all-allowed mask so that their (discarded) softmax stays finite.
  const torch::Tensor mask = batch.allowed | ~valid.unsqueeze(2);
  const torch::Tensor log_p = torch::log_softmax(logits.masked_fill(~mask, kNegInf), 2);
  return log_p.gather(2, targets).squeeze(2).masked_fill(~valid, 0.0);
}

planner::PolicyWeights export_weights(PolicyNet& net) {
  planner::PolicyWeights w;
  w.shape = net->shape();
  torch::NoGradGuard no_grad;
  const auto params = net->named_parameters();
  const std::vector<planner::ParameterSpec> specs = planner::policy_parameters(w.shape);
  if (params.size() != specs.size()) throw std::logic_error("policy: the network's parameters are not the listed ones");
  for (const planner::ParameterSpec& spec : specs) {
    const torch::Tensor* p = params.find(spec.name);
    if (p == nullptr || p->sizes().vec() != spec.dims)
      throw std::logic_error("policy: parameter " + spec.name + " is missing or has other dimensions than listed");
    const torch::Tensor t = p->detach().contiguous().to(torch::kFloat);
    w.tensors[spec.name] = std::vector<float>(t.data_ptr<float>(), t.data_ptr<float>() + t.numel());
  }
  return w;
}

}  // namespace arachne::learned
