// The learned planner's policy network in LibTorch, for training. The same network as the plain-C++
// inference (planner/arachne/policy_net.h); its equations, parameter names and shapes are those of
// planner/arachne/policy_weights.h, and the tests check that both give the same logits.
#pragma once
#include <torch/torch.h>

#include "planner/arachne/policy_weights.h"

namespace arachne::learned {

using planner::PolicyShape;

// A batch of requests with one token sequence each, padded.
struct PolicyBatch {
  torch::Tensor group_x;      // [B, G, group_features] float; rows k >= group_count[b] are padding
  torch::Tensor group_count;  // [B] int64, 1..G
  torch::Tensor global_x;     // [B, global_features] float
  torch::Tensor tokens;       // [B, S + 1] int64: Bos, then the targets; padded past lengths[b]
  torch::Tensor lengths;      // [B] int64: tokens of sequence b, Bos included (2..S + 1)
  torch::Tensor allowed;      // [B, S, vocabulary] bool: allowed[b][t][v] when v may be tokens[b][t + 1]
};

// The request's encoding: per-group encodings and the context.
struct PolicyEncoding {
  torch::Tensor groups;   // [B, G, E], zero for padding rows
  torch::Tensor present;  // [B, G] bool
  torch::Tensor context;  // [B, E]
};

class PolicyNetImpl : public torch::nn::Module {
 public:
  explicit PolicyNetImpl(const PolicyShape& shape);
  PolicyEncoding encode(const torch::Tensor& group_x, const torch::Tensor& group_count,
                        const torch::Tensor& global_x);
  // Teacher-forced logits [B, S, vocabulary]: step t consumes tokens[:, t] (-inf for the Type tokens of
  // absent groups).
  torch::Tensor logits(const PolicyBatch& batch);
  const PolicyShape& shape() const { return shape_; }

 private:
  PolicyShape shape_;
  torch::nn::Linear group1_{nullptr}, group2_{nullptr}, global1_{nullptr}, global2_{nullptr}, context_{nullptr},
      init_{nullptr}, type_in_{nullptr}, out_{nullptr}, query_{nullptr}, key_{nullptr};
  torch::nn::Embedding embed_{nullptr};
  torch::nn::GRUCell gru_{nullptr};
  torch::Tensor type_of_token_;  // [vocabulary] int64: k for Type k, -1 otherwise (a buffer, not trained)
  torch::Tensor type_tokens_;    // [max_groups] int64
};
TORCH_MODULE(PolicyNet);

// log p(tokens[b][t + 1] | prefix) under the masks, [B, S]; 0 at padding steps. Throws std::invalid_argument
// when a target is not allowed where it stands.
torch::Tensor target_log_probs(PolicyNet& net, const PolicyBatch& batch);

// The network's parameters as plain arrays (for the plain-C++ inference and the weights file).
planner::PolicyWeights export_weights(PolicyNet& net);

}  // namespace arachne::learned
