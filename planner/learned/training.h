// Training the policy network: a seeded network with its Adam optimiser, imitation (teacher-forced,
// masked cross-entropy) and policy-gradient (REINFORCE with a per-request mean baseline) steps, and
// torch::save checkpoints that resume bit-identically.
//
// Determinism: construction seeds Torch's generator (torch::manual_seed) and every step fixes the number
// of intra-op threads (at::set_num_threads), so the same seed, batches and thread count give bit-identical
// weights. Nothing here draws random numbers after construction (sampling is the host's, in plain C++).
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <string>

#include "planner/learned/policy_net.h"

namespace arachne::learned {

struct TrainOptions {
  uint64_t seed = 1;
  int threads = 1;             // intra-op threads during every step
  double learning_rate = 1e-3; // Adam (Kingma & Ba 2015)
  double grad_clip = 1.0;      // maximum global L2 norm of the gradient; 0 = no clipping
};

class PolicyTrainer {
 public:
  PolicyTrainer(const PolicyShape& shape, const TrainOptions& options);
  // Resumes a checkpoint written by save() (network, optimiser state, options). `threads` > 0 overrides the
  // stored thread count. Throws std::runtime_error for an unreadable or foreign file.
  static std::unique_ptr<PolicyTrainer> load(const std::string& path, int threads = 0);

  // One Adam step on the mean masked cross-entropy of the batch's targets (per token over all valid
  // steps). Returns the loss before the step.
  double imitation_step(const PolicyBatch& batch);
  // The same loss without a step (validation).
  double imitation_loss(const PolicyBatch& batch);
  // One REINFORCE step (Williams 1992) on sampled sequences: loss = -mean_b (r_b - baseline_b) log p(seq_b),
  // baseline_b = the mean reward of the sequences sampled for the same request (request[b]). Returns the
  // loss before the step.
  double policy_gradient_step(const PolicyBatch& batch, const torch::Tensor& rewards, const torch::Tensor& request);

  // Adam's learning rate for the steps that follow (the optimiser's moments are kept); saved with the
  // checkpoint. Throws std::invalid_argument for a rate that is not positive and finite.
  void set_learning_rate(double learning_rate);

  // Writes a torch::save archive to `path` as it is: callers that need the file to appear whole write it
  // to a temporary (write_file_atomically, sim/io/atomic_file.h, the one place that names temporaries).
  void save(const std::string& path);

  PolicyNet& net() { return net_; }
  const TrainOptions& options() const { return options_; }
  int64_t steps() const { return steps_; }

 private:
  double apply(const torch::Tensor& loss);

  TrainOptions options_;
  PolicyNet net_{nullptr};
  std::unique_ptr<torch::optim::Adam> optimizer_;
  int64_t steps_ = 0;
};

}  // namespace arachne::learned
