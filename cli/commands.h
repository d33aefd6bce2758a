// The `arachne` command line: subcommands are thin (parse flags, call the libraries, print).
// Exit codes (DESIGN.md): 0 success; 2 bad input, with exactly one line `error: <where>: <what>` on stderr
// and no output file; 3 infeasible (simulate: the plan does not fit in memory; plan: no feasible plan).
#pragma once
#include <string>
#include <vector>

#include <boost/program_options/errors.hpp>
#include <boost/program_options/options_description.hpp>
#include <boost/program_options/variables_map.hpp>

#include "planner/common/work_group.h"
#include "sim/io/limits.h"

namespace arachne::cli {

constexpr int kExitOk = 0;
constexpr int kExitInternal = 1;
constexpr int kExitBadInput = 2;
constexpr int kExitInfeasible = 3;

// Subcommands. `args` are the words after the subcommand name; `command_line` is the whole invocation
// (shell-quoted) for result-file metadata.
int run_simulate(const std::vector<std::string>& args, const std::string& command_line);
int run_plan(const std::vector<std::string>& args, const std::string& command_line);
int run_list(const std::vector<std::string>& args);
int run_calibrate(const std::vector<std::string>& args);
int run_replay(const std::vector<std::string>& args, const std::string& command_line);
int run_trace(const std::vector<std::string>& args);
int run_trace_generate(const std::vector<std::string>& args);
int run_trace_plot(const std::vector<std::string>& args);
// gen-data and experiment run on every rank of `group` (cli/mpi_group.h; planner::single_process() when
// not started by an MPI launcher).
int run_gen_data(const std::vector<std::string>& args, const std::string& command_line, planner::WorkGroup& group);
int run_train(const std::vector<std::string>& args, const std::string& command_line);
int run_evaluate(const std::vector<std::string>& args, const std::string& command_line);
int run_experiment(const std::vector<std::string>& args, const std::string& command_line, planner::WorkGroup& group);
// Draws the replay PNG (throughput and cumulative tokens per planner) from a replay HDF5 file.
int plot_replay_png(const std::string& h5_path, const std::string& png_path);
// Draws the training curves PNG (scripts/plot_training.py) from a `train` curves file.
int plot_training_png(const std::string& h5_path, const std::string& png_path);
// Draws DIR/ratio.png and DIR/planning_time.png (scripts/plot_evaluation.py) from an evaluate file.
int plot_evaluation_png(const std::string& h5_path, const std::string& out_dir);
// Draws DIR/throughput.png, DIR/planning_time.png and DIR/replay_tokens.png (scripts/plot_experiment.py)
// from an experiment file.
int plot_experiment_png(const std::string& h5_path, const std::string& out_dir);

// Prints `error: <where>: <reason>` to stderr and returns kExitBadInput.
int input_error(const std::string& where, const std::string& reason);
// The same for a Boost.Program_options error: where = the flag ("--tp"), reason in plain words.
int option_error(const boost::program_options::error& e, const std::string& subcommand);

// Parses a subcommand's flags (no abbreviations, no positional words, no empty values) into `vm`. Returns
// -1 on success, else the exit code after printing the `error: --flag: reason` line.
int parse_options(const std::vector<std::string>& args, const boost::program_options::options_description& opts,
                  boost::program_options::variables_map& vm, const std::string& subcommand);

// Output paths, checked before any work so that bad input creates no file and the work is not lost:
// the directory must exist and take a new file (probed by creating and removing the temporary file the
// write will use), and the path must not be a directory. Throw InputError(flag, ...).
void check_output_path(const std::string& flag, const std::string& path);
// An output directory: an existing writable directory, or a new one in an existing writable directory.
void check_output_dir(const std::string& flag, const std::string& dir);

// A comma-separated list: no empty item, no item twice, at least one; throws InputError(flag, ...).
std::vector<std::string> split_list(const std::string& flag, const std::string& text);
// Planner names (registry): a list as above of registered names, or "all" when `allow_all`.
std::vector<std::string> parse_planner_names(const std::string& flag, const std::string& text, bool allow_all);

// Reads and checks the learned planner's policy (a weights file; empty: the shipped one) now, before any
// work, when `planners` name arachne: a missing or malformed file is bad input (InputError naming the
// file). Returns whether they do.
bool load_policy_if_used(const std::vector<std::string>& planners, const std::string& policy_path);

// `text` with every line indented by two spaces (a YAML document nested under a key).
std::string indented(const std::string& text);

// argv joined with single-quote shell quoting where a word needs it.
std::string quoted_command_line(int argc, char** argv);

// Flag values, through the range-checked readers of sim/io/numbers.h with the supported ranges of
// sim/io/limits.h; each throws InputError(flag, reason).
long long parse_int_flag(const std::string& flag, const std::string& text, limits::IntRange range);
int parse_small_int_flag(const std::string& flag, const std::string& text, limits::IntRange range);  // int-sized
double parse_double_flag(const std::string& flag, const std::string& text, limits::RealRange range);
unsigned long long parse_seed_flag(const std::string& flag, const std::string& text);

}  // namespace arachne::cli
