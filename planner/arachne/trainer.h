// `arachne train`: the learned planner's policy trained on a gen-data dataset (planner/arachne/dataset.h).
//
// Steps:
//   1. examples: every labelled configuration of the training and validation files, each label a token
//      sequence with the grammar's masks before each token (TokenGrammar on the stored cluster and model);
//   2. imitation: `imitation_epochs` epochs of teacher-forced masked cross-entropy towards every label
//      (best templates first; all `labels` of a configuration, so the policy learns a distribution over
//      good templates), mini-batches in an order drawn from (seed, epoch);
//   3. policy gradient: `pg_epochs` epochs of REINFORCE: per configuration `pg_samples` templates sampled
//      from the current policy, completed and priced by the fast estimator; reward = the best label's
//      estimated time / the sample's (0 when it cannot be completed, or is still incomplete at the
//      sampler's step limit), baseline = the configuration's mean, at learning rate `pg_learning_rate`;
//   4. validation after every epoch on the held-out file: the imitation loss, and the beam's quality: the
//      best of `validate_beam` decoded templates, completed and estimated, against the best label's
//      estimate (geometric mean of label_s / beam_s; 1 = as good as the labels);
//   5. epoch 0 is the untrained policy, validated as the others are (the reference of the curves);
//      after every epoch a torch::save checkpoint and the epoch's row in a journal; `resume` continues
//      from them, with the same result as an uninterrupted run; at the end the exported weights (what
//      `plan --planner arachne` reads), the curves as HDF5.
// Deterministic: the same files, options, seed and thread count give bit-identical weights.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "planner/arachne/policy_weights.h"
#include "planner/learned/module_abi.h"

namespace arachne::planner {

struct TrainerOptions {
  std::string data;        // training datasets (gen-data --split train), comma-separated
  std::string validation;  // held-out dataset (gen-data --split held-out)
  std::string out_dir;     // checkpoint, journal, weights, curves
  int imitation_epochs = 30;
  int pg_epochs = 5;
  int batch = 32;
  int pg_samples = 4;
  int validate_beam = 4;
  int max_validation = 200;  // validation configurations used (the first ones)
  std::uint64_t seed = 1;
  int threads = 1;
  double learning_rate = 1e-3;     // Adam, imitation
  double pg_learning_rate = 1e-4;  // Adam, policy gradient (fine-tuning: smaller steps than imitation's)
  int encoder_width = 64, token_width = 32, decoder_width = 128;
  bool resume = false;

  std::string text() const;  // every option a result depends on
};

struct EpochRecord {
  int epoch = 0;          // 0: the untrained policy; then 1-based over both phases
  std::string phase;      // "untrained" | "imitation" | "policy-gradient"
  double train_loss = 0;  // mean over the epoch's steps (epoch 0: the imitation loss on the training labels)
  double val_loss = 0;    // imitation loss on the validation labels
  double val_quality = 0; // geometric mean of best-label estimate / beam-best estimate
  double train_reward = 0;  // policy gradient: mean reward of the samples (0 in imitation)
  double wall_s = 0;
};

// Files in out_dir: checkpoint-<epoch>.pt (the last epoch's torch::save checkpoint), journal.json, and at
// the end policy.weights (exported weights) and training.h5 (/epochs: the curves).
std::string weights_path(const std::string& out_dir);
std::string curves_path(const std::string& out_dir);

// Runs (or resumes) the training; returns every epoch's record. Throws InputError for unreadable or
// mismatched datasets (vocabulary or features of another build) and for a resume with other options.
std::vector<EpochRecord> run_training(const TrainerOptions& opt, const ArachneLearnedModule& module,
                                      const std::string& program_version, const std::string& command_line,
                                      const std::function<void(const EpochRecord&)>& progress = {});

}  // namespace arachne::planner
