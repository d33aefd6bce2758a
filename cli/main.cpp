// `arachne`: dispatches to the subcommands in cli/cmd_*.cpp.
#include <exception>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/mpi_group.h"
#include "sim/io/input_error.h"

namespace {

const char* kUsage = R"(arachne - plan and simulate parallel training of large models on heterogeneous GPU clusters

Arachne measures parallel training plans (data, tensor, pipeline and expert parallelism) in a
discrete-event simulator of the cluster: GPUs, NVLink/PCIe, NICs and the leaf/spine network.

Usage: arachne <command> [options]        arachne <command> --help   for a command's options

Commands:
  simulate   simulate one training iteration of a plan: iteration time, tokens/s, MFU, memory per GPU,
             where the time goes; optional HDF5 results (--out) and a Perfetto timeline (--timeline)
  plan       find a plan with one or more planners (arachne, megatron, amp, metis, flashflex, sailor,
             oracle) and measure each in the simulator: tokens/s, ratio to the best, own prediction vs simulated
  list       show the GPU catalog, the bundled models, the planners and the trace formats
  replay     how much training each planner gets done over an availability trace of a shared cluster
  trace      convert availability traces to the native format, or print their statistics
  calibrate  fit a GPU's compute-model constants to measured iterations (scripts/calibrate.sh)
  gen-data   sample cluster configurations and label each with its best templates (learned planner's data)
  train      train the learned planner's policy on a gen-data dataset (loads LibTorch)
  evaluate   the learned planner against the baselines, the oracle and its ablations on unseen clusters
  experiment a planner comparison declared in one YAML file (clusters x models x planners, replays):
             one HDF5 file, summary.md and PNG figures; resumes after an interruption

Common options:
  --seed N   seed of every random choice (default 0); same inputs and seed give the same results
  --help     help for arachne or a command
  --version  print the version

Getting started (from the repository root):
  arachne list gpus
  arachne list models
  arachne simulate --cluster configs/clusters/tiny-a100-2x4.yaml --model gpt3-1.3b \
      --tp 2 --pp 2 --dp 2 --micro-batch 4
  arachne plan --cluster configs/clusters/tiny-hetero.yaml --model gpt3-1.3b --planner all

Exit codes: 0 success; 2 bad input (one line 'error: <where>: <what>' on stderr); 3 infeasible
(the plan does not fit in memory, or no planner found a feasible plan).
)";

// The commands that split their work across the ranks of an MPI job when an MPI launcher started them
// (cli/mpi_group.h). Every error ends every rank: input errors found by every rank are agreed (each rank
// exits 2, one prints); any other failure of one rank aborts the job.
int run_in_group(const std::string& cmd, const std::vector<std::string>& rest, const std::string& command_line) {
  using namespace arachne::cli;
  std::unique_ptr<arachne::planner::WorkGroup> mpi;
  try {
    mpi = join_process_group();
  } catch (const arachne::InputError& e) {
    return input_error(e.where(), e.reason());
  }
  arachne::planner::WorkGroup& group = mpi ? *mpi : arachne::planner::single_process();
  int rc = kExitInternal;
  try {
    rc = cmd == "experiment" ? run_experiment(rest, command_line, group) : run_gen_data(rest, command_line, group);
  } catch (const arachne::planner::FailedElsewhere& e) {
    rc = e.exit_code;  // the rank that failed printed why
  } catch (const arachne::InputError& e) {
    rc = input_error(e.where(), e.reason());
  } catch (const std::exception& e) {
    std::cerr << "error: internal: " << e.what() << std::endl;
    rc = kExitInternal;
  }
  return leave_process_group(std::move(mpi), rc);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace arachne::cli;
  const std::vector<std::string> words(argv + 1, argv + argc);
  try {
    if (words.empty()) return input_error("arachne", "no command given (see 'arachne --help')");
    const std::string& cmd = words[0];
    const std::vector<std::string> rest(words.begin() + 1, words.end());
    if (cmd == "--help" || cmd == "-h") {
      std::cout << kUsage;
      return kExitOk;
    }
    if (cmd == "help") {
      if (rest.empty()) {
        std::cout << kUsage;
        return kExitOk;
      }
      const std::vector<std::string> help = {"--help"};
      if (rest[0] == "simulate") return run_simulate(help, "");
      if (rest[0] == "plan") return run_plan(help, "");
      if (rest[0] == "list") return run_list(help);
      if (rest[0] == "calibrate") return run_calibrate(help);
      if (rest[0] == "replay") return run_replay(help, "");
      if (rest[0] == "trace") return run_trace(help);
      if (rest[0] == "gen-data") return run_gen_data(help, "", arachne::planner::single_process());
      if (rest[0] == "train") return run_train(help, "");
      if (rest[0] == "evaluate") return run_evaluate(help, "");
      if (rest[0] == "experiment") return run_experiment(help, "", arachne::planner::single_process());
      return input_error(rest[0], "unknown command (see 'arachne --help')");
    }
    if (cmd == "--version") {
      std::cout << "arachne " << ARACHNE_VERSION << "\n";
      return kExitOk;
    }
    if (cmd == "simulate") return run_simulate(rest, quoted_command_line(argc, argv));
    if (cmd == "plan") return run_plan(rest, quoted_command_line(argc, argv));
    if (cmd == "list") return run_list(rest);
    if (cmd == "calibrate") return run_calibrate(rest);
    if (cmd == "replay") return run_replay(rest, quoted_command_line(argc, argv));
    if (cmd == "trace") return run_trace(rest);
    if (cmd == "gen-data" || cmd == "experiment") return run_in_group(cmd, rest, quoted_command_line(argc, argv));
    if (cmd == "train") return run_train(rest, quoted_command_line(argc, argv));
    if (cmd == "evaluate") return run_evaluate(rest, quoted_command_line(argc, argv));
    return input_error(cmd, "unknown command (see 'arachne --help')");
  } catch (const arachne::InputError& e) {
    return input_error(e.where(), e.reason());
  } catch (const std::exception& e) {
    std::cerr << "error: internal: " << e.what() << std::endl;
    return kExitInternal;
  }
}
