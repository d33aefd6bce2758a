// Lazy loading of the learned planner's Torch module (planner/learned/module_abi.h).
//
// `arachne` links no Torch code: a command or planner that needs the policy network calls
// learned_module(), which dlopen()s libarachne_learned_module.so on first use; every other command starts
// without LibTorch (~1.4 s of loading saved). Where the module is looked for: $ARACHNE_LEARNED_MODULE if
// set, else beside the running executable (the build directory holds both). A module that is missing,
// fails to load or comes from another build is bad input (InputError, exit 2) naming the path and the fix.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "planner/arachne/features.h"
#include "planner/arachne/policy_weights.h"
#include "planner/learned/module_abi.h"

namespace arachne::planner {

// Environment variable that overrides where the module is looked for.
inline constexpr const char* kLearnedModuleEnv = "ARACHNE_LEARNED_MODULE";

// The directory of the running executable (where the build puts the modules it dlopen()s); "." when
// /proc/self/exe cannot be read.
std::string executable_dir();

// $ARACHNE_LEARNED_MODULE if set and non-empty, else ARACHNE_LEARNED_MODULE_FILE in the directory of the
// running executable.
std::string learned_module_path();

// The module at learned_module_path(), loaded on the first call (thread-safe); later calls return the
// same table. Throws InputError("learned planner", reason) when it cannot be loaded.
const ArachneLearnedModule& learned_module();

// Loads the module at `path` (not cached; a loaded module stays loaded for the life of the process, as
// LibTorch cannot be unloaded safely). Throws InputError("learned planner", reason).
const ArachneLearnedModule& load_learned_module(const std::string& path);

// One training sequence: a request's features, a token sequence (Bos first), and before each token after
// Bos the ids the grammar allowed there (allowed_along() in planner/arachne/policy_net.h).
struct TrainingSequence {
  RequestFeatures features;
  std::vector<int> tokens;
  std::vector<std::vector<int>> allowed;  // tokens.size() - 1 lists
  double reward = 0;                      // policy gradient only
  int64_t request = 0;                    // policy gradient only: the same id for the samples of one request
};

// Sequences padded into the module's batch layout (module_abi.h, ArachneBatch).
class TrainingBatch {
 public:
  // Throws std::invalid_argument for an empty batch, features of another size than the shape's, more
  // groups than it has Type tokens, or a mask list of the wrong length or with ids outside the vocabulary.
  TrainingBatch(const PolicyShape& shape, const std::vector<TrainingSequence>& sequences);
  // A view of the arrays (valid while the batch lives).
  ArachneBatch view() const;

 private:
  int64_t size_ = 0, max_groups_ = 0, steps_ = 0;
  std::vector<float> group_x_, global_x_;
  std::vector<int64_t> group_counts_, tokens_, lengths_, request_;
  std::vector<uint8_t> allowed_;
  std::vector<double> rewards_;
};

// A policy network held by the module while it trains (planner/learned/training.h). Failures of the
// module (bad shape, bad batch, unreadable checkpoint) throw std::runtime_error with its message.
class LearnedPolicy {
 public:
  struct Options {
    uint64_t seed = 1;
    int threads = 1;
    double learning_rate = 1e-3;
    double grad_clip = 1.0;
  };
  LearnedPolicy(const ArachneLearnedModule& module, const PolicyShape& shape, const Options& options);
  // Resumes a checkpoint written by save(); threads > 0 overrides the stored count.
  static LearnedPolicy load(const ArachneLearnedModule& module, const std::string& path, int threads = 0);

  // Each returns the loss before the step (imitation: mean masked cross-entropy per token).
  double imitation_step(const TrainingBatch& batch);
  double imitation_loss(const TrainingBatch& batch);  // no step
  double policy_gradient_step(const TrainingBatch& batch);
  // Adam's learning rate for the steps that follow (kept in later checkpoints).
  void set_learning_rate(double learning_rate);
  // Writes a checkpoint to `path` as it is (no temporary; wrap it in write_file_atomically for that).
  void save(const std::string& path);

  PolicyShape shape() const;
  // The current parameters, for PolicyNet (plain-C++ decoding) or write_policy_weights().
  PolicyWeights weights() const;
  void export_weights(const std::string& path) const { write_policy_weights(path, weights()); }  // atomic

 private:
  struct Release {
    const ArachneLearnedModule* module;
    void operator()(ArachnePolicy* p) const { module->policy_destroy(p); }
  };
  LearnedPolicy(const ArachneLearnedModule& module, ArachnePolicy* policy);
  const ArachneLearnedModule* module_;
  std::unique_ptr<ArachnePolicy, Release> policy_;
};

}  // namespace arachne::planner
