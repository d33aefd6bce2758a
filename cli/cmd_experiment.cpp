// `arachne experiment FILE.yaml [--out DIR]`: a planner comparison declared in one file
// (planner/experiment/experiment.h).
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/mpi_group.h"
#include "planner/experiment/experiment.h"
#include "sim/io/input_error.h"

namespace arachne::cli {
namespace {

namespace po = boost::program_options;
namespace fs = std::filesystem;

const char* kExperimentHelp = R"(arachne experiment - a planner comparison declared in one YAML file

The file declares comparisons (clusters x models x global batches x seeds x planners, with budgets) and
replays (a trace, its format options, a model, planners, replay options); README "Experiments" gives the
schema and configs/experiments/ holds examples. Every input is checked before any cell runs (bad input:
exit 2, 'error: file:line: field: reason', no output). The cells run in a fixed order: comparison blocks in
file order, within a block clusters, models, global batches, seeds, cost models, planners (innermost); then each replay
block, one cell per planner.

Writes DIR/experiment.h5 (one record per cell: /comparisons with the planner, its plan as YAML, simulated
tokens/s and iteration time, its own prediction, peak memory, OOM, planning time, evaluations,
search_complete; /replays with the totals, and /replay/<block>/<planner>/{intervals,totals} as 'arachne
replay --out' writes them), DIR/summary.md (tables) and DIR/throughput.png, DIR/planning_time.png,
DIR/replay_tokens.png (scripts/plot_experiment.py, from the HDF5 file alone). Progress on stderr.

Each finished cell is kept as a shard in DIR/experiment.h5.shards/: after an interruption (even kill -9)
the same command runs only the missing cells and ends with the same file, apart from planning wall times.
A shard directory of a different experiment file is refused. A wall-clock budget that cuts a search, or a
replay charging the measured planning time, makes those cells depend on the machine and its load.

Under 'mpirun -np N arachne experiment ...' (or srun; a build with ARACHNE_WITH_MPI) rank 0 hands the cells
out to the ranks as they become free and alone writes the same files from every rank's records (README,
section on several processes or hosts).

Usage:
  arachne experiment FILE.yaml [--out DIR] [--list]

  --out DIR  output directory (default: results/<name>, name: the file's 'name:' or its stem)
  --list     print the cells in order and exit (nothing runs, nothing is written)

Example:
  arachne experiment configs/experiments/demo.yaml --out results/demo/experiment
)";

void print_cell(const planner::CellResult& r) {
  char outcome[96];
  if (r.comparison) {
    const planner::ComparisonOutcome& o = *r.comparison;
    if (o.feasible()) std::snprintf(outcome, sizeof outcome, "%.0f tokens/s, planned in %.3f s", o.tokens_per_s, o.planning_time_s);
    else std::snprintf(outcome, sizeof outcome, "%s, planned in %.3f s", o.has_plan ? "out of memory" : "no plan", o.planning_time_s);
  } else {
    std::snprintf(outcome, sizeof outcome, "%.4g tokens trained, %d replans", r.replay->totals.tokens_trained,
                  r.replay->totals.replans);
  }
  std::fprintf(stderr, "experiment: cell %ld (%s): %s\n", r.cell.index, r.cell.describe().c_str(), outcome);
}

// Rank 0 reports the cells of every rank (planner::run_experiment).
void print_progress(const planner::ExperimentProgress& p) {
  if (p.last) print_cell(*p.last);
  const long fresh = p.done - p.resumed;
  const double rate = p.elapsed_s > 0 ? static_cast<double>(fresh) / p.elapsed_s : 0;  // cells per second
  const double eta_s = rate > 0 ? static_cast<double>(p.total - p.done) / rate : 0;
  std::fprintf(stderr, "experiment: %ld/%ld cells done (%ld resumed), %.2f cells/min, ~%.1f min left\n", p.done, p.total,
               p.resumed, 60 * rate, eta_s / 60);
}

}  // namespace

int run_experiment(const std::vector<std::string>& args, const std::string& command_line, planner::WorkGroup& group) {
  std::vector<std::string> flags;
  std::string file;
  for (const std::string& a : args) {
    if (!a.empty() && a[0] != '-' && file.empty() && (flags.empty() || flags.back() != "--out")) file = a;
    else flags.push_back(a);
  }
  po::options_description opts("");
  opts.add_options()("help,h", "this help")("out", po::value<std::string>()->value_name("DIR"), "output directory")
      ("list", po::bool_switch(), "print the cells and exit");
  po::variables_map vm;
  if (const int rc = parse_options(flags, opts, vm, "experiment"); rc >= 0) return agreed_exit_code(group, rc);
  if (vm.count("help")) {
    if (group.rank() == 0) std::cout << kExperimentHelp;
    return kExitOk;
  }
  // Every rank checks the input alike before any cell runs; an error on any rank ends every rank.
  std::optional<GpuCatalog> catalog;
  std::optional<planner::Experiment> x;
  std::string out;
  std::exception_ptr bad_input;
  try {
    if (file.empty()) throw InputError("arachne experiment", "which experiment file? (see 'arachne experiment --help')");
    catalog = GpuCatalog::load_default();
    x = planner::load_experiment(file, *catalog);
    out = vm.count("out") ? vm["out"].as<std::string>() : "results/" + x->name;
    if (!vm["list"].as<bool>()) check_output_dir("--out", out);
  } catch (const InputError&) {
    bad_input = std::current_exception();
  }
  planner::agree(group, bad_input);
  const std::vector<planner::ExperimentCell> cells = planner::expand(*x);
  if (vm["list"].as<bool>()) {
    if (group.rank() == 0)
      for (const planner::ExperimentCell& c : cells) std::printf("%ld %s\n", c.index, c.describe().c_str());
    return kExitOk;
  }
  if (group.rank() == 0)
    std::fprintf(stderr, "experiment: %s, %zu cells on %d process%s, output in %s\n", x->name.c_str(), cells.size(),
                 group.size(), group.size() == 1 ? "" : "es", out.c_str());
  const auto results = planner::run_experiment(*x, out, *catalog, {ARACHNE_VERSION, command_line, x->seed, x->text},
                                               print_progress, group);
  if (group.rank() != 0) return kExitOk;  // rank 0 writes every output file
  const std::string h5 = planner::experiment_h5_path(out);
  if (const int rc = plot_experiment_png(h5, out); rc != 0) return rc;
  std::fprintf(stderr, "experiment: wrote %s, %s, throughput.png, planning_time.png, replay_tokens.png (%zu cells)\n",
               h5.c_str(), planner::experiment_summary_path(out).c_str(), results.size());
  return kExitOk;
}

}  // namespace arachne::cli
