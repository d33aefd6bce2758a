// Training steps and checkpoints of the policy network; see training.h.
#include "planner/learned/training.h"

#include <cmath>
#include <stdexcept>

namespace arachne::learned {

namespace {

// The shape as one int64 tensor: 8 header values, then the Type token ids.
torch::Tensor shape_tensor(const PolicyShape& s) {
  std::vector<int64_t> v{s.group_features, s.global_features, s.vocabulary,   s.bos_token,
                         s.max_groups(),   s.encoder_width,   s.token_width,  s.decoder_width};
  v.insert(v.end(), s.type_tokens.begin(), s.type_tokens.end());
  return torch::tensor(v, torch::kLong);
}

PolicyShape shape_of(const torch::Tensor& t) {
  const std::vector<int64_t> v(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
  if (v.size() < 8 || static_cast<int64_t>(v.size()) != 8 + v[4]) throw std::runtime_error("checkpoint: bad shape record");
  PolicyShape s;
  s.group_features = static_cast<int>(v[0]);
  s.global_features = static_cast<int>(v[1]);
  s.vocabulary = static_cast<int>(v[2]);
  s.bos_token = static_cast<int>(v[3]);
  s.encoder_width = static_cast<int>(v[5]);
  s.token_width = static_cast<int>(v[6]);
  s.decoder_width = static_cast<int>(v[7]);
  for (size_t i = 8; i < v.size(); ++i) s.type_tokens.push_back(static_cast<int>(v[i]));
  return s;
}

}  // namespace

PolicyTrainer::PolicyTrainer(const PolicyShape& shape, const TrainOptions& options) : options_(options) {
  at::set_num_threads(options_.threads);
  torch::manual_seed(options_.seed);
  net_ = PolicyNet(shape);
  optimizer_ = std::make_unique<torch::optim::Adam>(net_->parameters(), torch::optim::AdamOptions(options_.learning_rate));
}

double PolicyTrainer::apply(const torch::Tensor& loss) {
  optimizer_->zero_grad();
  loss.backward();
  if (options_.grad_clip > 0) torch::nn::utils::clip_grad_norm_(net_->parameters(), options_.grad_clip);
  optimizer_->step();
  ++steps_;
  return loss.item<double>();
}

void PolicyTrainer::set_learning_rate(double learning_rate) {
  if (!(learning_rate > 0) || !std::isfinite(learning_rate))
    throw std::invalid_argument("policy: the learning rate must be positive and finite");
  options_.learning_rate = learning_rate;
  for (torch::optim::OptimizerParamGroup& g : optimizer_->param_groups())
    static_cast<torch::optim::AdamOptions&>(g.options()).lr(learning_rate);
}

double PolicyTrainer::imitation_step(const PolicyBatch& batch) {
  at::set_num_threads(options_.threads);
  net_->train();
  const torch::Tensor log_p = target_log_probs(net_, batch);
  const torch::Tensor count = (batch.lengths - 1).sum().to(torch::kFloat);
  return apply(-log_p.sum() / count);
}

double PolicyTrainer::imitation_loss(const PolicyBatch& batch) {
  at::set_num_threads(options_.threads);
  torch::NoGradGuard no_grad;
  const torch::Tensor log_p = target_log_probs(net_, batch);
  return (-log_p.sum() / (batch.lengths - 1).sum().to(torch::kFloat)).item<double>();
}

double PolicyTrainer::policy_gradient_step(const PolicyBatch& batch, const torch::Tensor& rewards,
                                           const torch::Tensor& request) {
  at::set_num_threads(options_.threads);
  net_->train();
  const int64_t b = batch.tokens.size(0);
  if (rewards.numel() != b || request.numel() != b)
    throw std::invalid_argument("policy gradient: one reward and one request id per sequence");
  // Per-request mean reward: same[i][j] when sequences i and j were sampled for the same request.
  const torch::Tensor same = (request.view({b, 1}) == request.view({1, b})).to(torch::kDouble);
  const torch::Tensor r = rewards.to(torch::kDouble);
  const torch::Tensor baseline = same.matmul(r) / same.sum(1);
  const torch::Tensor advantage = (r - baseline).to(torch::kFloat);
  const torch::Tensor log_p = target_log_probs(net_, batch).sum(1);  // [B]
  return apply(-(advantage * log_p).mean());
}

void PolicyTrainer::save(const std::string& path) {
  torch::serialize::OutputArchive archive;
  net_->save(archive);
  torch::serialize::OutputArchive optimizer;
  optimizer_->save(optimizer);
  archive.write("optimizer", optimizer);
  archive.write("shape", shape_tensor(net_->shape()));
  archive.write("options", torch::tensor({options_.learning_rate, options_.grad_clip}, torch::kDouble));
  archive.write("counters", torch::tensor({static_cast<int64_t>(options_.seed), int64_t{options_.threads}, steps_}, torch::kLong));
  archive.save_to(path);
}

std::unique_ptr<PolicyTrainer> PolicyTrainer::load(const std::string& path, int threads) {
  torch::serialize::InputArchive archive;
  try {
    archive.load_from(path);
  } catch (const c10::Error& e) {
    throw std::runtime_error("cannot read the policy checkpoint " + path);
  }
  torch::Tensor shape, options, counters;
  if (!archive.try_read("shape", shape) || !archive.try_read("options", options) || !archive.try_read("counters", counters))
    throw std::runtime_error(path + " is not an arachne policy checkpoint");
  TrainOptions o;
  o.learning_rate = options[0].item<double>();
  o.grad_clip = options[1].item<double>();
  o.seed = static_cast<uint64_t>(counters[0].item<int64_t>());
  o.threads = threads > 0 ? threads : static_cast<int>(counters[1].item<int64_t>());
  auto trainer = std::make_unique<PolicyTrainer>(shape_of(shape), o);
  trainer->net_->load(archive);
  torch::serialize::InputArchive optimizer;
  archive.read("optimizer", optimizer);
  trainer->optimizer_->load(optimizer);
  trainer->steps_ = counters[2].item<int64_t>();
  return trainer;
}

}  // namespace arachne::learned
