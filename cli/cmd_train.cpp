// `arachne train`: trains the learned planner's policy on a gen-data dataset (planner/arachne/trainer.h).
// The only command that loads LibTorch (through the learned module, planner/learned_module.h).
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "planner/arachne/trainer.h"
#include "planner/learned_module.h"
#include "sim/io/input_error.h"

namespace arachne::cli {
namespace {

namespace po = boost::program_options;

const char* kTrainHelp = R"(arachne train - train the learned planner's policy on a gen-data dataset

Imitation learning on the labels (teacher-forced, masked to the token grammar), then policy-gradient
fine-tuning with the fast estimator's throughput as reward; after every epoch, validation on the held-out
dataset (loss, and the beam's templates completed and estimated against the labels), a torch::save
checkpoint and a journal entry. --resume continues an interrupted run with the same result. At the end:
DIR/policy.weights (what 'arachne plan --planner arachne' reads), DIR/training.h5 (curves) and
DIR/training.png. Same data, options, --seed and --threads give bit-identical weights.

Usage:
  arachne train --data TRAIN.h5[,MORE.h5...] --validation HELD_OUT.h5 --out DIR [--imitation-epochs N] [--pg-epochs N]
                [--batch N] [--pg-samples N] [--learning-rate X] [--pg-learning-rate X]
                [--seed N] [--threads T] [--resume]

Example:
  arachne gen-data --out train.h5 --configs 2000 --seed 1
  arachne gen-data --out held.h5 --configs 200 --seed 2 --split held-out
  arachne train --data train.h5 --validation held.h5 --out policy/
)";

}  // namespace

int run_train(const std::vector<std::string>& args, const std::string& command_line) {
  po::options_description opts("");
  opts.add_options()("help", "this help")
      ("data", po::value<std::string>()->value_name("TRAIN.h5[,MORE.h5...]"), "training datasets (required)")
      ("validation", po::value<std::string>()->value_name("HELD_OUT.h5"), "held-out dataset (required)")
      ("out", po::value<std::string>()->value_name("DIR"), "output directory (required)")
      ("imitation-epochs", po::value<std::string>()->value_name("N")->default_value("30"), "imitation epochs")
      ("pg-epochs", po::value<std::string>()->value_name("N")->default_value("5"), "policy-gradient epochs")
      ("batch", po::value<std::string>()->value_name("N")->default_value("32"), "sequences per step")
      ("pg-samples", po::value<std::string>()->value_name("N")->default_value("4"), "templates sampled per configuration")
      ("learning-rate", po::value<std::string>()->value_name("X")->default_value("0.001"), "Adam learning rate (imitation)")
      ("pg-learning-rate", po::value<std::string>()->value_name("X")->default_value("0.0001"), "Adam learning rate (policy gradient)")
      ("seed", po::value<std::string>()->value_name("N")->default_value("1"), "random seed")
      ("threads", po::value<std::string>()->value_name("T")->default_value("1"), "Torch threads (fixed for determinism)")
      ("resume", po::bool_switch(), "continue the run journalled in --out");
  po::variables_map vm;
  if (const int rc = parse_options(args, opts, vm, "train"); rc >= 0) return rc;
  if (vm.count("help")) {
    std::cout << kTrainHelp << "\n" << opts;
    return kExitOk;
  }
  try {
    for (const char* f : {"data", "validation", "out"})
      if (!vm.count(f)) throw InputError(std::string("--") + f, "required");
    planner::TrainerOptions o;
    o.data = vm["data"].as<std::string>();
    o.validation = vm["validation"].as<std::string>();
    o.out_dir = vm["out"].as<std::string>();
    check_output_dir("--out", o.out_dir);
    o.imitation_epochs = parse_small_int_flag("--imitation-epochs", vm["imitation-epochs"].as<std::string>(), limits::kRounds);
    o.pg_epochs = parse_small_int_flag("--pg-epochs", vm["pg-epochs"].as<std::string>(), limits::kRounds);
    o.batch = parse_small_int_flag("--batch", vm["batch"].as<std::string>(), limits::kSearchWidth);
    o.pg_samples = parse_small_int_flag("--pg-samples", vm["pg-samples"].as<std::string>(), {2, limits::kSearchWidth.max});
    o.learning_rate = parse_double_flag("--learning-rate", vm["learning-rate"].as<std::string>(), limits::kLearningRate);
    o.pg_learning_rate = parse_double_flag("--pg-learning-rate", vm["pg-learning-rate"].as<std::string>(), limits::kLearningRate);
    o.seed = parse_seed_flag("--seed", vm["seed"].as<std::string>());
    o.threads = parse_small_int_flag("--threads", vm["threads"].as<std::string>(), limits::kThreads);
    o.resume = vm["resume"].as<bool>();
    const bool tty = isatty(fileno(stderr)) != 0;
    const auto progress = [tty](const planner::EpochRecord& r) {
      if (tty)
        std::fprintf(stderr, "train: epoch %d (%s): loss %.4f, validation loss %.4f, quality %.3f, %.1f s\n", r.epoch,
                     r.phase.c_str(), r.train_loss, r.val_loss, r.val_quality, r.wall_s);
    };
    const auto epochs = planner::run_training(o, planner::learned_module(), ARACHNE_VERSION, command_line, progress);
    if (const int rc = plot_training_png(planner::curves_path(o.out_dir), o.out_dir + "/training.png"); rc != 0) return rc;
    std::fprintf(stderr, "train: wrote %s (%zu epochs; last validation quality %.3f)\n",
                 planner::weights_path(o.out_dir).c_str(), epochs.size(), epochs.empty() ? 0.0 : epochs.back().val_quality);
  } catch (const InputError& e) {
    return input_error(e.where(), e.reason());
  }
  return kExitOk;
}

}  // namespace arachne::cli
