// The learned planner's policy network (LibTorch): scores candidate structural templates for a cluster.
// Input: one feature vector per (cluster snapshot, template) pair; output: one logit per pair; a softmax
// over the candidates of one snapshot gives the policy. Torch stays in planner/learned/ only.
#pragma once
#include <torch/torch.h>

#include <cstdint>

namespace arachne::learned {

struct StructurePolicyOptions {
  int64_t features = 16;
  int64_t hidden = 64;
  int64_t layers = 2;  // hidden layers
};

class StructurePolicyImpl : public torch::nn::Module {
 public:
  explicit StructurePolicyImpl(const StructurePolicyOptions& opt);
  // x: [candidates, features] -> logits [candidates]
  torch::Tensor forward(const torch::Tensor& x);
  const StructurePolicyOptions& options() const { return options_; }

 private:
  StructurePolicyOptions options_;
  torch::nn::Sequential body_{nullptr};
};
TORCH_MODULE(StructurePolicy);

// Deterministic construction: parameters drawn from a generator seeded with `seed`.
StructurePolicy make_structure_policy(const StructurePolicyOptions& opt, uint64_t seed);

// One step of listwise training (softmax cross-entropy towards the best-throughput candidate).
// Returns the loss before the step.
double train_step(StructurePolicy& policy, torch::optim::Optimizer& opt, const torch::Tensor& features,
                  int64_t best_index);

}  // namespace arachne::learned
