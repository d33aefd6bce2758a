// `arachne gen-data`: the learned planner's training (or held-out evaluation) dataset: sampled
// configurations labelled by the label search (planner/arachne/labeler.h), written as HDF5
// (planner/arachne/dataset.h), resumable after an interruption.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "cli/mpi_group.h"
#include "planner/arachne/gen_data.h"
#include "planner/arachne/labeler.h"
#include "sim/io/input_error.h"

namespace arachne::cli {
namespace {

namespace po = boost::program_options;
using planner::ConfigSamplerOptions;
using planner::GenDataOptions;
using planner::GenDataProgress;
using planner::GenDataStats;
using planner::LabelOptions;
using planner::SampledConfig;
using planner::Split;

const char* kGenDataHelp = R"(arachne gen-data - sample cluster configurations and label each with its best templates

Draws configurations (1-4 GPU types of the catalog, nodes of 1/2/4/8 GPUs, partial nodes, NIC bandwidths,
8-1,024 GPUs, dense and MoE models, global batches; planner/arachne/config_sampler.h), and labels each
with the best structural templates a wide search finds: the heuristic generator, the first templates of
the restricted enumeration and templates drawn by random walks over the token grammar, every template
completed and priced by the fast estimator, the best few simulated
(planner/arachne/labeler.h). Writes an HDF5 dataset: features, label token sequences, every priced
candidate with its estimated and simulated time (layout: DESIGN.md "HDF5", planner/arachne/dataset.h).

Whole GPU-type families are held out for evaluation: --split held-out draws only those, --split train
never does. Configuration i depends only on (options, --seed, i): kill the run and start it again with
the same options, and it resumes from the shards in FILE.h5.shards/ and ends with the same file. --configs
is not among those options: an interrupted run may be finished with a smaller or larger N.
Progress goes to stderr (one line per 10 configurations when stderr is not a terminal).
Under 'mpirun -np N arachne gen-data ...' (a build with ARACHNE_WITH_MPI) the configurations are handed out to
the ranks (each with --threads T) as they become free, and rank 0 alone writes the same dataset.

Usage:
  arachne gen-data --out FILE.h5 --configs N [--seed N] [--split train|held-out] [--threads T]
                   [--min-gpus G] [--max-gpus G] [--max-templates N] [--sampled-templates N]
                   [--refine-rounds R] [--simulate-top N] [--labels N]
                   [--oracle-max-gpus G]

Example:
  arachne gen-data --out data/train.h5 --configs 2000 --seed 1 --threads 2
)";

// On a terminal one line rewritten in place; otherwise (a log file) a line per 10 configurations and at the end.
// Rank 0 reports the configurations of every rank (planner::run_gen_data).
void print_progress(const GenDataProgress& p, bool tty) {
  if (!tty && p.done % 10 != 0 && p.done != p.total) return;
  const long fresh = p.done - p.resumed;
  const double each = fresh > 0 ? p.elapsed_s / static_cast<double>(fresh) : 0;
  std::fprintf(stderr, "%sgen-data: %ld/%ld configurations (%ld resumed), %.1f s each, ~%.0f min left%s", tty ? "\r" : "",
               p.done, p.total, p.resumed, each, each * static_cast<double>(p.total - p.done) / 60.0, tty ? "   " : "\n");
}

}  // namespace

int run_gen_data(const std::vector<std::string>& args, const std::string& command_line, planner::WorkGroup& group) {
  po::options_description opts("");
  opts.add_options()("help", "this help")
      ("out", po::value<std::string>()->value_name("FILE.h5"), "dataset to write (required)")
      ("configs", po::value<std::string>()->value_name("N"), "configurations to sample and label (required)")
      ("seed", po::value<std::string>()->value_name("N")->default_value("0"), "random seed")
      ("split", po::value<std::string>()->value_name("train|held-out")->default_value("train"), "GPU-type families to draw")
      ("threads", po::value<std::string>()->value_name("T"), "configurations labelled in parallel (default: all cores)")
      ("min-gpus", po::value<std::string>()->value_name("G")->default_value("8"), "smallest cluster")
      ("max-gpus", po::value<std::string>()->value_name("G")->default_value("1024"), "largest cluster")
      ("max-templates", po::value<std::string>()->value_name("N")->default_value("1500"), "enumerated templates per configuration")
      ("sampled-templates", po::value<std::string>()->value_name("N")->default_value("300"),
       "templates drawn by random walks per configuration (where the enumeration is cut short)")
      ("simulate-top", po::value<std::string>()->value_name("N")->default_value("8"), "templates simulated per configuration")
      ("refine-rounds", po::value<std::string>()->value_name("R")->default_value("0"),
       "rounds of local moves from the 4 best-priced templates (planner/template/neighbors.h)")
      ("labels", po::value<std::string>()->value_name("N")->default_value("4"), "templates kept as labels")
      ("oracle-max-gpus", po::value<std::string>()->value_name("G")->default_value("4"),
       "also run the oracle on clusters up to this size, to compare the labels with (0: never)");
  po::variables_map vm;
  if (const int rc = parse_options(args, opts, vm, "gen-data"); rc >= 0) return agreed_exit_code(group, rc);
  if (vm.count("help")) {
    if (group.rank() == 0) std::cout << kGenDataHelp << "\n" << opts;
    return kExitOk;
  }
  // Every rank checks the flags alike before any configuration is labelled; an error on any rank ends
  // every rank.
  GenDataOptions g;
  LabelOptions l;
  std::optional<GpuCatalog> catalog;
  std::exception_ptr bad_input;
  try {
    if (!vm.count("out")) throw InputError("--out", "required (the HDF5 dataset to write)");
    if (!vm.count("configs")) throw InputError("--configs", "required (how many configurations)");
    g.out = vm["out"].as<std::string>();
    check_output_path("--out", g.out);
    g.configs = parse_int_flag("--configs", vm["configs"].as<std::string>(), limits::kCount);
    g.seed = parse_seed_flag("--seed", vm["seed"].as<std::string>());
    g.split = planner::parse_split(vm["split"].as<std::string>(), "--split");
    g.threads = vm.count("threads") ? parse_small_int_flag("--threads", vm["threads"].as<std::string>(), limits::kThreads)
                                    : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    g.sampler.min_gpus = parse_small_int_flag("--min-gpus", vm["min-gpus"].as<std::string>(), {1, limits::kMaxClusterGpus});
    g.sampler.max_gpus = parse_small_int_flag("--max-gpus", vm["max-gpus"].as<std::string>(), {1, limits::kMaxClusterGpus});
    if (g.sampler.max_gpus < g.sampler.min_gpus) throw InputError("--max-gpus", "smaller than --min-gpus");
    l.enumeration.max_templates = parse_int_flag("--max-templates", vm["max-templates"].as<std::string>(), limits::kCount);
    l.sampled = parse_small_int_flag("--sampled-templates", vm["sampled-templates"].as<std::string>(), {0, limits::kSearchWidth.max});
    l.simulate_top = parse_small_int_flag("--simulate-top", vm["simulate-top"].as<std::string>(), limits::kSearchWidth);
    l.labels = parse_small_int_flag("--labels", vm["labels"].as<std::string>(), limits::kSearchWidth);
    l.refine_rounds = parse_small_int_flag("--refine-rounds", vm["refine-rounds"].as<std::string>(), limits::kRounds);
    l.oracle_max_gpus = parse_small_int_flag("--oracle-max-gpus", vm["oracle-max-gpus"].as<std::string>(), {0, limits::kMaxClusterGpus});
    g.options_text = planner::sampler_text(g.sampler, g.split, g.seed) + l.text();
    catalog = GpuCatalog::load_default();
  } catch (const InputError&) {
    bad_input = std::current_exception();
  }
  planner::agree(group, bad_input);
  const bool tty = isatty(fileno(stderr)) != 0;
  const GenDataStats s = planner::run_gen_data(
      g, *catalog, planner::dataset_schema(), [&l](const SampledConfig& c) { return planner::label_config(c, l); },
      {ARACHNE_VERSION, command_line, g.seed, g.options_text},
      [tty](const GenDataProgress& p) { print_progress(p, tty); }, group);
  if (group.rank() != 0) return kExitOk;
  if (tty) std::fprintf(stderr, "\n");
  std::fprintf(stderr, "gen-data: wrote %s (%ld configurations, %ld resumed)\n", g.out.c_str(), g.configs, s.resumed);
  return kExitOk;
}

}  // namespace arachne::cli
