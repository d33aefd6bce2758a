// The Torch module's entry point (module_abi.h): the policy trainer behind a C table. Every function
// catches what Torch throws and reports it through `err`, so no exception crosses into the host.
#include <torch/torch.h>
#include <torch/version.h>

#include <cstdio>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "planner/learned/module_abi.h"
#include "planner/learned/training.h"

struct ArachnePolicy {
  std::unique_ptr<arachne::learned::PolicyTrainer> trainer;
  std::vector<std::string> names;  // parameter names in export order (stable storage for policy_tensor)
};

namespace {

using arachne::learned::PolicyBatch;
using arachne::learned::PolicyShape;

void report(const char* what, char* err, size_t err_len) {
  if (err != nullptr && err_len > 0) std::snprintf(err, err_len, "%s", what);
}

// Runs `f`, turning an exception into a message and `failed`.
template <class R, class F>
R guarded(F&& f, R failed, char* err, size_t err_len) {
  try {
    return f();
  } catch (const std::exception& e) {
    report(e.what(), err, err_len);
    return failed;
  }
}

PolicyShape shape_from(const ArachnePolicyShape& c) {
  if (c.max_groups < 1 || c.max_groups > ARACHNE_POLICY_MAX_GROUPS)
    throw std::invalid_argument("policy shape: max_groups must be 1.." + std::to_string(ARACHNE_POLICY_MAX_GROUPS));
  if (c.group_features < 1 || c.global_features < 1 || c.vocabulary < 2 || c.encoder_width < 1 || c.token_width < 1 ||
      c.decoder_width < 1)
    throw std::invalid_argument("policy shape: every width and the vocabulary must be positive");
  PolicyShape s;
  s.group_features = static_cast<int>(c.group_features);
  s.global_features = static_cast<int>(c.global_features);
  s.vocabulary = static_cast<int>(c.vocabulary);
  s.bos_token = static_cast<int>(c.bos_token);
  s.encoder_width = static_cast<int>(c.encoder_width);
  s.token_width = static_cast<int>(c.token_width);
  s.decoder_width = static_cast<int>(c.decoder_width);
  for (int64_t k = 0; k < c.max_groups; ++k) {
    if (c.type_tokens[k] < 0 || c.type_tokens[k] >= c.vocabulary || c.type_tokens[k] == c.bos_token)
      throw std::invalid_argument("policy shape: a Type token id is outside the vocabulary or is Bos");
    s.type_tokens.push_back(static_cast<int>(c.type_tokens[k]));
  }
  if (s.bos_token < 0 || s.bos_token >= s.vocabulary) throw std::invalid_argument("policy shape: Bos outside the vocabulary");
  return s;
}

ArachnePolicy* wrap(std::unique_ptr<arachne::learned::PolicyTrainer> trainer) {
  auto* p = new ArachnePolicy;
  for (const auto& spec : arachne::planner::policy_parameters(trainer->net()->shape())) p->names.push_back(spec.name);
  p->trainer = std::move(trainer);
  return p;
}

// Copies of the host's arrays as tensors, after checking every value the network indexes with.
PolicyBatch batch_from(const ArachneBatch& c, const PolicyShape& s) {
  const int64_t b = c.size, g = c.max_groups, steps = c.steps, v = s.vocabulary;
  if (b < 1 || g < 1 || g > s.max_groups() || steps < 1)
    throw std::invalid_argument("policy batch: needs size >= 1, 1 <= max_groups <= the shape's, steps >= 1");
  for (int64_t i = 0; i < b; ++i) {
    if (c.group_counts[i] < 1 || c.group_counts[i] > g) throw std::invalid_argument("policy batch: a group count outside 1..max_groups");
    if (c.lengths[i] < 2 || c.lengths[i] > steps + 1) throw std::invalid_argument("policy batch: a length outside 2..steps+1");
    if (c.tokens[i * (steps + 1)] != s.bos_token) throw std::invalid_argument("policy batch: a sequence does not start with Bos");
    for (int64_t t = 0; t < c.lengths[i]; ++t) {
      const int64_t id = c.tokens[i * (steps + 1) + t];
      if (id < 0 || id >= v) throw std::invalid_argument("policy batch: a token id outside the vocabulary");
      for (int64_t k = 0; k < s.max_groups(); ++k)
        if (id == s.type_tokens[k] && k >= c.group_counts[i])
          throw std::invalid_argument("policy batch: a Type token of a group the request does not have");
    }
  }
  auto copy_f = [](const float* x, std::vector<int64_t> dims) {
    return torch::from_blob(const_cast<float*>(x), dims, torch::kFloat).clone();
  };
  auto copy_l = [](const int64_t* x, std::vector<int64_t> dims) {
    return torch::from_blob(const_cast<int64_t*>(x), dims, torch::kLong).clone();
  };
  PolicyBatch out;
  out.group_x = copy_f(c.group_x, {b, g, s.group_features});
  out.group_count = copy_l(c.group_counts, {b});
  out.global_x = copy_f(c.global_x, {b, s.global_features});
  // Padding past a sequence's end may hold anything: it becomes Bos, a valid id, and is never a target.
  out.tokens = copy_l(c.tokens, {b, steps + 1});
  const torch::Tensor pad = torch::arange(steps + 1, torch::kLong).unsqueeze(0) >= copy_l(c.lengths, {b}).unsqueeze(1);
  out.tokens.masked_fill_(pad, s.bos_token);
  out.lengths = copy_l(c.lengths, {b});
  out.allowed = torch::from_blob(const_cast<uint8_t*>(c.allowed), {b, steps, v}, torch::kUInt8).to(torch::kBool);
  return out;
}

ArachnePolicy* policy_create(const ArachnePolicyShape* shape, const ArachneTrainOptions* options, char* err,
                             size_t err_len) {
  return guarded<ArachnePolicy*>(
      [&] {
        if (options->threads < 1) throw std::invalid_argument("policy: threads must be at least 1");
        const arachne::learned::TrainOptions o{options->seed, static_cast<int>(options->threads), options->learning_rate,
                                               options->grad_clip};
        return wrap(std::make_unique<arachne::learned::PolicyTrainer>(shape_from(*shape), o));
      },
      nullptr, err, err_len);
}

ArachnePolicy* policy_load(const char* path, int64_t threads, char* err, size_t err_len) {
  return guarded<ArachnePolicy*>(
      [&] { return wrap(arachne::learned::PolicyTrainer::load(path, static_cast<int>(threads))); }, nullptr, err,
      err_len);
}

int policy_save(ArachnePolicy* p, const char* path, char* err, size_t err_len) {
  return guarded<int>([&] { return p->trainer->save(path), 0; }, 1, err, err_len);
}

void policy_shape(const ArachnePolicy* p, ArachnePolicyShape* out) {
  const PolicyShape& s = p->trainer->net()->shape();
  *out = ArachnePolicyShape{};
  out->group_features = s.group_features;
  out->global_features = s.global_features;
  out->vocabulary = s.vocabulary;
  out->bos_token = s.bos_token;
  out->max_groups = s.max_groups();
  for (int k = 0; k < s.max_groups(); ++k) out->type_tokens[k] = s.type_tokens[k];
  out->encoder_width = s.encoder_width;
  out->token_width = s.token_width;
  out->decoder_width = s.decoder_width;
}

int policy_imitation_step(ArachnePolicy* p, const ArachneBatch* batch, double* loss, char* err, size_t err_len) {
  return guarded<int>(
      [&] { return *loss = p->trainer->imitation_step(batch_from(*batch, p->trainer->net()->shape())), 0; }, 1, err,
      err_len);
}

int policy_imitation_loss(ArachnePolicy* p, const ArachneBatch* batch, double* loss, char* err, size_t err_len) {
  return guarded<int>(
      [&] { return *loss = p->trainer->imitation_loss(batch_from(*batch, p->trainer->net()->shape())), 0; }, 1, err,
      err_len);
}

int policy_gradient_step(ArachnePolicy* p, const ArachneBatch* batch, double* loss, char* err, size_t err_len) {
  return guarded<int>(
      [&] {
        if (batch->rewards == nullptr || batch->request == nullptr)
          throw std::invalid_argument("policy gradient: the batch has no rewards or request ids");
        const int64_t b = batch->size;
        const torch::Tensor rewards = torch::from_blob(const_cast<double*>(batch->rewards), {b}, torch::kDouble).clone();
        const torch::Tensor request = torch::from_blob(const_cast<int64_t*>(batch->request), {b}, torch::kLong).clone();
        return *loss = p->trainer->policy_gradient_step(batch_from(*batch, p->trainer->net()->shape()), rewards, request),
               0;
      },
      1, err, err_len);
}

int64_t policy_tensor_count(const ArachnePolicy* p) { return static_cast<int64_t>(p->names.size()); }

int policy_tensor(const ArachnePolicy* p, int64_t index, const char** name, int64_t* numel, float* out,
                  int64_t out_len, char* err, size_t err_len) {
  return guarded<int>(
      [&] {
        if (index < 0 || index >= static_cast<int64_t>(p->names.size()))
          throw std::invalid_argument("policy tensor index out of range");
        torch::NoGradGuard no_grad;
        const auto params = p->trainer->net()->named_parameters();  // find() points into this dictionary
        const torch::Tensor* t = params.find(p->names[index]);
        if (t == nullptr) throw std::logic_error("policy: no parameter " + p->names[index]);
        const torch::Tensor values = t->detach().contiguous().to(torch::kFloat);
        *name = p->names[index].c_str();
        *numel = values.numel();
        if (out != nullptr) {
          if (out_len < values.numel()) throw std::invalid_argument("policy tensor: output array too short");
          std::copy(values.data_ptr<float>(), values.data_ptr<float>() + values.numel(), out);
        }
        return 0;
      },
      1, err, err_len);
}

void policy_destroy(ArachnePolicy* p) { delete p; }

int policy_set_learning_rate(ArachnePolicy* p, double learning_rate, char* err, size_t err_len) {
  return guarded<int>([&] { return p->trainer->set_learning_rate(learning_rate), 0; }, 1, err, err_len);
}

const ArachneLearnedModule kModule = {
    ARACHNE_LEARNED_ABI_VERSION, ARACHNE_VERSION,       TORCH_VERSION,         policy_create,
    policy_load,                 policy_save,           policy_shape,          policy_imitation_step,
    policy_imitation_loss,       policy_gradient_step,  policy_tensor_count,   policy_tensor,
    policy_destroy,              policy_set_learning_rate,
};

}  // namespace

extern "C" const ArachneLearnedModule* arachne_learned_module() { return &kModule; }
