#include "planner/learned/structure_policy.h"

namespace arachne::learned {

StructurePolicyImpl::StructurePolicyImpl(const StructurePolicyOptions& opt) : options_(opt) {
  torch::nn::Sequential seq;
  int64_t in = opt.features;
  for (int64_t i = 0; i < opt.layers; ++i) {
    seq->push_back(torch::nn::Linear(in, opt.hidden));
    seq->push_back(torch::nn::ReLU());
    in = opt.hidden;
  }
  seq->push_back(torch::nn::Linear(in, 1));
  body_ = register_module("body", seq);
}

torch::Tensor StructurePolicyImpl::forward(const torch::Tensor& x) { return body_->forward(x).squeeze(-1); }

StructurePolicy make_structure_policy(const StructurePolicyOptions& opt, uint64_t seed) {
  torch::manual_seed(seed);
  StructurePolicy p(opt);
  return p;
}

double train_step(StructurePolicy& policy, torch::optim::Optimizer& opt, const torch::Tensor& features,
                  int64_t best_index) {
  policy->train();
  opt.zero_grad();
  const torch::Tensor logits = policy->forward(features).unsqueeze(0);
  const torch::Tensor target = torch::tensor({best_index}, torch::kLong);
  torch::Tensor loss = torch::nn::functional::cross_entropy(logits, target);
  loss.backward();
  opt.step();
  return loss.item<double>();
}

}  // namespace arachne::learned
