// `arachne evaluate`: the learned planner against the baselines, the oracle and its ablations on sampled
// configurations of held-out GPU-type families (planner/arachne/evaluate.h).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "planner/arachne/arachne_planner.h"
#include "planner/arachne/evaluate.h"
#include "planner/arachne/policy_weights.h"  // file_fingerprint
#include "planner/registry.h"
#include "sim/io/input_error.h"

namespace arachne::cli {
namespace {

namespace po = boost::program_options;
namespace fs = std::filesystem;
using planner::EvaluateOptions;
using planner::TemplateSource;

const char* kEvaluateHelp = R"(arachne evaluate - the learned planner against the baselines and its ablations on unseen clusters

Draws configurations with the gen-data sampler (by default of GPU-type families held out of training:
--split held-out), runs every planner of --planners on each, and the arachne planner once more per
--ablations entry with its template source replaced, everything else equal (same --beam K, --refine,
completion, estimator, --simulate-top, budgets). arachne itself takes the policy's K templates and the
first K of the hand-written generator; the ablations: policy (the policy's K alone: what it adds), random
(K templates from seeded random walks over the template grammar), heuristic (the generator's first K
alone), exhaustive (the restricted enumeration in token order, at most --exhaustive-cap templates: a
ceiling of the template space only where the cap does not cut it). Every plan is
simulated. The oracle, when listed, runs only on clusters of at most --oracle-max-gpus GPUs.

Writes DIR/evaluation.h5 (one row per configuration and planner: GPUs, GPU types, model, batch, simulated
tokens/s, own prediction, peak memory, OOM, planning wall time, simulator and own-model evaluations,
whether a cap cut the search, the plan; layout in planner/arachne/evaluate.h), DIR/summary.md (ratios to
the best baseline per configuration; geometric mean and minimum, dense and MoE apart; ratios to the
oracle; planning time by cluster size; where arachne loses) and DIR/ratio.png, DIR/planning_time.png
(scripts/plot_evaluation.py, from the HDF5 file alone).

Each finished configuration is kept as a shard in DIR/evaluation.h5.shards/: after a kill, the same
command computes only the missing ones and ends with the same file (apart from planning wall times); more
--configs extends an evaluation. A --budget-wall cap, when it cuts a search, makes that search depend on
the machine's speed and load; with --threads > 1 the planning times include contention.

Usage:
  arachne evaluate --out DIR --configs N [--seed S] [--split held-out|train] [--min-gpus G] [--max-gpus G]
                   [--threads T] [--planners LIST] [--ablations LIST|none] [--oracle-max-gpus G]
                   [--beam K] [--simulate-top N] [--refine R] [--budget N] [--budget-wall S]
                   [--policy FILE] [--exhaustive-cap N]

Example:
  arachne evaluate --out results/evaluation --configs 6 --max-gpus 64 --budget-wall 30
)";

std::vector<TemplateSource> parse_ablations(const std::string& text) {
  if (text == "none") return {};
  std::vector<TemplateSource> out;
  for (const std::string& n : split_list("--ablations", text)) {
    const TemplateSource s = planner::parse_template_source(n, "--ablations");
    if (s == planner::PlanRequest{}.arachne_templates)
      throw InputError("--ablations", "'" + n + "' is the arachne planner itself (list it in --planners)");
    out.push_back(s);
  }
  return out;
}

// Every option a cell depends on (not --threads, --configs or --out).
std::string options_text(const EvaluateOptions& o, bool uses_policy) {
  std::ostringstream s;
  s << "evaluate: " << planner::sampler_text(o.sampler, o.split, o.seed) << "planners";
  for (const std::string& p : o.planners) s << " " << p;
  s << "; ablations";
  if (o.ablations.empty()) s << " none";
  for (TemplateSource a : o.ablations) s << " " << planner::template_source_name(a);
  s << "; oracle up to " << o.oracle_max_gpus << " GPUs; beam " << o.request.arachne_beam << ", simulate-top "
    << o.request.arachne_simulate << ", refine " << o.request.arachne_refine << ", completions " << o.request.arachne_completions << ", exhaustive cap "
    << o.request.arachne_exhaustive_cap << "; budget " << o.request.budget_evaluations << " simulations, wall "
    << o.request.budget_wall_s << " s; plan seed " << o.request.seed;
  if (uses_policy) {
    const std::string path = o.request.arachne_policy.empty() ? planner::default_policy_path() : o.request.arachne_policy;
    s << "; policy " << path << " (fnv1a " << planner::file_fingerprint(path) << ")";
  }
  s << "\n";
  return s.str();
}

void print_cell(const planner::CellRecord& c) {
  char outcome[64];
  if (c.feasible()) std::snprintf(outcome, sizeof outcome, "%.0f tokens/s", c.tokens_per_s);
  else std::snprintf(outcome, sizeof outcome, "%s", c.has_plan ? "out of memory" : "no plan");
  std::fprintf(stderr, "evaluate: config %ld (%d GPUs, %s, %s): %s %.3f s, %s%s\n", c.config, c.gpus, c.family.c_str(),
               c.model.c_str(), c.planner.c_str(), c.planning_s, outcome, c.search_complete ? "" : " (search cut by a cap)");
}

void print_progress(const planner::EvaluateProgress& p) {
  const long fresh = p.done - p.resumed;
  const double each = fresh > 0 ? p.elapsed_s / static_cast<double>(fresh) : 0;
  std::fprintf(stderr, "evaluate: %ld/%ld configurations done (%ld resumed), %.1f s each, ~%.0f min left\n", p.done, p.total,
               p.resumed, each, each * static_cast<double>(p.total - p.done) / 60.0);
}

EvaluateOptions parse(const po::variables_map& vm) {
  const auto str = [&vm](const char* k) { return vm[k].as<std::string>(); };
  for (const char* f : {"out", "configs"})
    if (!vm.count(f)) throw InputError(std::string("--") + f, "required (see 'arachne evaluate --help')");
  EvaluateOptions o;
  o.out_dir = str("out");
  check_output_dir("--out", o.out_dir);
  o.configs = parse_int_flag("--configs", str("configs"), limits::kCount);
  o.seed = parse_seed_flag("--seed", str("seed"));
  o.split = planner::parse_split(str("split"), "--split");
  o.threads = parse_small_int_flag("--threads", str("threads"), limits::kThreads);
  o.sampler.min_gpus = parse_small_int_flag("--min-gpus", str("min-gpus"), {1, limits::kMaxClusterGpus});
  o.sampler.max_gpus = parse_small_int_flag("--max-gpus", str("max-gpus"), {1, limits::kMaxClusterGpus});
  if (o.sampler.max_gpus < o.sampler.min_gpus) throw InputError("--max-gpus", "smaller than --min-gpus");
  o.planners = parse_planner_names("--planners", str("planners"), false);
  o.ablations = parse_ablations(str("ablations"));
  o.oracle_max_gpus = parse_small_int_flag("--oracle-max-gpus", str("oracle-max-gpus"), {0, limits::kMaxClusterGpus});
  o.request.arachne_beam = parse_small_int_flag("--beam", str("beam"), limits::kSearchWidth);
  o.request.arachne_simulate = parse_small_int_flag("--simulate-top", str("simulate-top"), limits::kSearchWidth);
  o.request.arachne_refine = parse_small_int_flag("--refine", str("refine"), limits::kRounds);
  o.request.arachne_exhaustive_cap = parse_int_flag("--exhaustive-cap", str("exhaustive-cap"), limits::kCount);
  o.request.budget_evaluations = parse_int_flag("--budget", str("budget"), limits::kCount);
  if (vm.count("budget-wall")) {
    o.request.budget_wall_s = parse_double_flag("--budget-wall", str("budget-wall"), limits::kWallSeconds);
  }
  if (vm.count("policy")) o.request.arachne_policy = str("policy");
  o.request.seed = o.seed;
  const bool uses_policy = load_policy_if_used(o.planners, o.request.arachne_policy);
  o.options_text = options_text(o, uses_policy);
  return o;
}

}  // namespace

int run_evaluate(const std::vector<std::string>& args, const std::string& command_line) {
  po::options_description opts("");
  opts.add_options()("help", "this help")
      ("out", po::value<std::string>()->value_name("DIR"), "output directory (required)")
      ("configs", po::value<std::string>()->value_name("N"), "configurations to evaluate (required)")
      ("seed", po::value<std::string>()->value_name("S")->default_value("0"), "configuration stream and every random choice")
      ("split", po::value<std::string>()->value_name("held-out|train")->default_value("held-out"), "GPU-type families to draw")
      ("min-gpus", po::value<std::string>()->value_name("G")->default_value("8"), "smallest cluster")
      ("max-gpus", po::value<std::string>()->value_name("G")->default_value("1024"), "largest cluster")
      ("threads", po::value<std::string>()->value_name("T")->default_value("1"), "configurations evaluated at once")
      ("planners", po::value<std::string>()->value_name("LIST")->default_value("arachne,megatron,amp,metis,flashflex,sailor"),
       "planners to run (registry names; oracle allowed)")
      ("ablations", po::value<std::string>()->value_name("LIST")->default_value("policy,random,heuristic,exhaustive"),
       "arachne template sources to compare (policy, random, heuristic, exhaustive), or none")
      ("oracle-max-gpus", po::value<std::string>()->value_name("G")->default_value("4"), "run the oracle only up to this size")
      ("beam", po::value<std::string>()->value_name("K")->default_value("8"), "arachne: templates proposed (K)")
      ("simulate-top", po::value<std::string>()->value_name("N")->default_value("3"), "arachne: best-priced plan structures simulated")
      ("refine", po::value<std::string>()->value_name("R")->default_value(std::to_string(planner::PlanRequest{}.arachne_refine)), planner::refine_help().c_str())
      ("exhaustive-cap", po::value<std::string>()->value_name("N")->default_value("2000"),
       "ablation exhaustive: most templates enumerated (a cut is recorded as search_complete = false)")
      ("budget", po::value<std::string>()->value_name("N")->default_value("2000"), "simulator evaluations per planner")
      ("budget-wall", po::value<std::string>()->value_name("S"), "wall-clock cap per planner and configuration, seconds")
      ("policy", po::value<std::string>()->value_name("FILE"), "arachne: policy weights (default: the shipped one)");
  po::variables_map vm;
  if (const int rc = parse_options(args, opts, vm, "evaluate"); rc >= 0) return rc;
  if (vm.count("help")) {
    std::cout << kEvaluateHelp << "\n" << opts;
    return kExitOk;
  }
  try {
    const EvaluateOptions o = parse(vm);
    const GpuCatalog catalog = GpuCatalog::load_default();
    std::mutex mu;
    const auto on_cell = [&mu](const planner::CellRecord& c) {
      const std::lock_guard<std::mutex> lock(mu);
      print_cell(c);
    };
    const auto results = planner::run_evaluation(o, catalog, {ARACHNE_VERSION, command_line, o.seed, o.options_text}, on_cell,
                                                 print_progress);
    const std::string h5 = planner::evaluation_h5_path(o.out_dir);
    if (const int rc = plot_evaluation_png(h5, o.out_dir); rc != 0) return rc;
    std::fprintf(stderr, "evaluate: wrote %s, %s, ratio.png and planning_time.png (%zu configurations)\n", h5.c_str(),
                 planner::evaluation_summary_path(o.out_dir).c_str(), results.size());
  } catch (const InputError& e) {
    return input_error(e.where(), e.reason());
  }
  return kExitOk;
}

}  // namespace arachne::cli
