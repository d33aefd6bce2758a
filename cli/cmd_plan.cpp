// `arachne plan`: run one or more planners on a cluster and model, measure every plan they return in the
// simulator, and compare them (DESIGN.md "CLI": plan --json; exit 3 when no planner finds a feasible plan).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "cli/commands.h"
#include "planner/arachne/arachne_planner.h"
#include "planner/planner.h"
#include "planner/registry.h"
#include "planner/run_planner.h"
#include "sim/exec/simulate.h"
#include "sim/hw/cluster.h"
#include "sim/hw/topology.h"
#include "sim/io/atomic_file.h"
#include "sim/io/input_error.h"
#include "sim/io/report_json.h"
#include "sim/model/model.h"
#include "sim/plan/plan_yaml.h"

namespace arachne::cli {
namespace {

namespace po = boost::program_options;

const char* kPlanHelp = R"(arachne plan - find a parallel plan with one or more planners and measure each in the simulator

Each planner searches for a plan (data, tensor, pipeline and expert parallelism over the available GPUs)
with its own algorithm and cost model; every plan it returns is then simulated on the cluster, so the
planners are compared on the same ground. Prints a table: tokens/s, ratio to the best, peak memory,
planning time, simulator and own-model evaluations, and the planner's own predicted iteration time against
the simulated one.

Usage:
  arachne plan --cluster C --model M --planner NAME[,NAME...]|all [--global-batch N] [--budget N]
               [--budget-wall S] [--cost-model own|simulator] [--flashflex-refine] [--beam K]
               [--simulate-top N] [--refine R] [--policy FILE] [--arachne-templates SOURCE]
               [--exhaustive-cap N] [--out plan.yaml]
               [--json] [--seed N]

Planners ('arachne list planners'): arachne (the learned planner: --beam templates proposed by the
policy and as many of the hand-written heuristic generator, --refine rounds of local moves from the best of
them and again from the generator's alone, every template completed and priced by the fast estimator, the
--simulate-top best-priced structures simulated;
--arachne-templates replaces that source by another, everything else equal: the policy alone, random walks
over the template grammar, the heuristic generator alone, or the restricted enumeration, at most
--exhaustive-cap templates); megatron, amp,
metis, flashflex, sailor (baselines reimplemented from their papers and public code;
planner/baselines/README.md); oracle (branch and bound over its declared space, simulator-priced;
complete only where it says so, planner/oracle/README.md).
--cost-model simulator makes every baseline price its candidates with the simulator instead of its own
analytic model, to tell a better search space from a better cost model.
With their own cost model, amp, metis, flashflex and sailor search their whole space, as their public
code does (own-model pricing is free; Metis keeps its public port's 300 s cap). The budget counts
simulator evaluations (deterministic): AMP's trials of its top 10 predictions, every candidate under
--cost-model simulator, and the megatron and oracle searches. --budget-wall adds a wall-clock cap.
--flashflex-refine adds our hill-climbing refinement to FlashFlex (not in its public code); its row is
labelled flashflex+refine.

Examples:
  arachne plan --cluster configs/clusters/tiny-hetero.yaml --model gpt3-1.3b --planner all
  arachne plan --cluster A100-80:2x8,V100-32:4x4 --model gpt3-2.7b --planner metis,sailor --json
  arachne plan --cluster A100-80:1x8 --model gpt3-1.3b --planner megatron --out best.yaml
  arachne simulate --cluster A100-80:1x8 --model gpt3-1.3b --plan best.yaml

Exit codes: 0 a plan was found; 2 bad input (one line 'error: <where>: <what>'); 3 no planner found a
feasible plan (the table or JSON is still printed).
)";

// A YAML scalar as JSON: integers, then floats, then booleans, else the string.
nlohmann::json scalar_to_json(const std::string& s) {
  if (s == "true") return true;
  if (s == "false") return false;
  if (!s.empty()) {
    char* end = nullptr;
    const long long i = std::strtoll(s.c_str(), &end, 10);
    if (*end == '\0') return i;
    const double d = std::strtod(s.c_str(), &end);
    if (*end == '\0') return d;
  }
  return s;
}

nlohmann::json yaml_to_json(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Sequence: {
      nlohmann::json a = nlohmann::json::array();
      for (const auto& e : n) a.push_back(yaml_to_json(e));
      return a;
    }
    case YAML::NodeType::Map: {
      nlohmann::json o = nlohmann::json::object();
      for (const auto& kv : n) o[kv.first.as<std::string>()] = yaml_to_json(kv.second);
      return o;
    }
    case YAML::NodeType::Scalar:
      // Selectors ("n0:0-3") stay strings; quoted scalars too.
      return n.Tag() == "!" ? nlohmann::json(n.Scalar()) : scalar_to_json(n.Scalar());
    default:
      return nullptr;
  }
}

// The plan as the JSON form of its YAML schema (DESIGN.md: the value of `plan` in `plan --json`).
nlohmann::json plan_to_json(const Plan& plan, const Cluster& cluster) {
  return yaml_to_json(YAML::Load(plan_to_yaml(plan, cluster)));
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

using Row = planner::PlannerRun;
using planner::plan_summary;

}  // namespace

int run_plan(const std::vector<std::string>& args, const std::string& command_line) {
  po::options_description opts("Options");
  opts.add_options()
      ("cluster", po::value<std::string>()->value_name("C"), "cluster YAML file, bundled name, or spec TYPE:NODESxGPUS[,...]")
      ("model", po::value<std::string>()->value_name("M"), "model YAML file or bundled name")
      ("planner", po::value<std::string>()->value_name("NAMES"), "planner(s), comma-separated, or 'all'")
      ("global-batch", po::value<std::string>()->value_name("N"), "global batch in samples (default: the model's)")
      ("budget", po::value<std::string>()->value_name("N")->default_value("2000"), "simulator evaluations per planner")
      ("budget-wall", po::value<std::string>()->value_name("S"), "wall-clock cap per planner, seconds (optional)")
      ("cost-model", po::value<std::string>()->value_name("own|simulator")->default_value("own"), "what the baselines price candidates with")
      ("flashflex-refine", po::bool_switch(), "FlashFlex: add our hill-climbing refinement (row flashflex+refine)")
      ("beam", po::value<std::string>()->value_name("K")->default_value("8"), "arachne: templates decoded by beam search")
      ("simulate-top", po::value<std::string>()->value_name("N")->default_value("3"), "arachne: best-priced plan structures simulated")
      ("refine", po::value<std::string>()->value_name("R")->default_value(std::to_string(planner::PlanRequest{}.arachne_refine)), planner::refine_help().c_str())
      ("policy", po::value<std::string>()->value_name("FILE"), "arachne: policy weights (default: the shipped configs/policy/arachne.weights)")
      ("arachne-templates", po::value<std::string>()->value_name("SOURCE")->default_value(planner::template_source_name(planner::PlanRequest{}.arachne_templates)),
       "arachne: template source, policy+heuristic | policy | random | heuristic | exhaustive (other than the default: ablations, row arachne[SOURCE])")
      ("exhaustive-cap", po::value<std::string>()->value_name("N")->default_value("2000"),
       "arachne --arachne-templates exhaustive: most templates enumerated")
      ("out", po::value<std::string>()->value_name("plan.yaml"), "write the best plan as YAML (reads back with simulate --plan)")
      ("json", po::bool_switch(), "print exactly one JSON object on stdout")
      ("seed", po::value<std::string>()->value_name("N")->default_value("0"), "seed of every random choice")
      ("help,h", "show this help");
  po::variables_map vm;
  if (const int rc = parse_options(args, opts, vm, "plan"); rc >= 0) return rc;
  if (vm.count("help")) {
    std::cout << kPlanHelp << "\n" << opts << std::flush;
    return kExitOk;
  }
  for (const char* f : {"cluster", "model", "planner"})
    if (!vm.count(f)) return input_error(std::string("--") + f, "is required (see 'arachne plan --help')");
  const auto str = [&vm](const char* k) { return vm[k].as<std::string>(); };

  planner::PlanRequest req;
  req.budget_evaluations = parse_int_flag("--budget", str("budget"), limits::kCount);
  if (vm.count("budget-wall")) req.budget_wall_s = parse_double_flag("--budget-wall", str("budget-wall"), limits::kWallSeconds);
  req.flashflex_refine = vm["flashflex-refine"].as<bool>();
  req.arachne_beam = parse_small_int_flag("--beam", str("beam"), limits::kSearchWidth);
  req.arachne_simulate = parse_small_int_flag("--simulate-top", str("simulate-top"), limits::kSearchWidth);
  req.arachne_refine = parse_small_int_flag("--refine", str("refine"), limits::kRounds);
  if (vm.count("policy")) req.arachne_policy = str("policy");
  req.arachne_templates = planner::parse_template_source(str("arachne-templates"), "--arachne-templates");
  req.arachne_exhaustive_cap = parse_int_flag("--exhaustive-cap", str("exhaustive-cap"), limits::kCount);
  const std::string cm = str("cost-model");
  if (cm == "own") req.cost_model = planner::CostModel::Own;
  else if (cm == "simulator") req.cost_model = planner::CostModel::Simulator;
  else throw InputError("--cost-model", "expected own or simulator, got '" + cm + "'");
  req.seed = parse_seed_flag("--seed", str("seed"));
  const bool json = vm["json"].as<bool>();
  std::string out_path;
  if (vm.count("out")) {
    out_path = str("out");
    check_output_path("--out", out_path);
  }

  const std::vector<std::string> names = parse_planner_names("--planner", str("planner"), true);
  std::vector<std::unique_ptr<planner::Planner>> planners;
  for (const auto& n : names) planners.push_back(planner::make_planner(n));  // unknown name: exit 2
  load_policy_if_used(names, req.arachne_policy);

  const GpuCatalog catalog = GpuCatalog::load_default();
  const Cluster cluster = load_cluster(str("cluster"), catalog);
  const ModelConfig model = load_model(str("model"));
  const long global = vm.count("global-batch") ? parse_int_flag("--global-batch", str("global-batch"), limits::kGlobalBatch) : model.global_batch;
  if (global < 1) throw InputError("--global-batch", model.name + " has no global_batch; give --global-batch N");
  const Topology topo(cluster);
  req.cluster = &cluster;
  req.topo = &topo;
  req.model = &model;
  req.global_batch = global;

  SimOptions sim_opt;
  sim_opt.seed = req.seed;
  std::vector<Row> rows;
  for (auto& p : planners) {
    std::fprintf(stderr, "plan: %s on %s (%d GPUs), %s, global batch %ld ...\n", p->name().c_str(), cluster.name.c_str(),
                 cluster.total_gpus(), model.name.c_str(), global);
    Row row = planner::run_planner(*p, req);
    std::fprintf(stderr, "plan: %s done in %.3f s, %ld simulator + %ld own-model evaluations%s%s\n", row.label.c_str(),
                 row.result.planning_time_s, row.result.evaluations, row.result.own_model_evaluations,
                 row.result.search_complete ? "" : ", search cut short", row.result.plan ? "" : " (no feasible plan)");
    rows.push_back(std::move(row));
  }

  double best_tps = 0;
  const Row* best = nullptr;
  for (const Row& r : rows)
    if (r.feasible() && r.sim->tokens_per_s > best_tps) {
      best_tps = r.sim->tokens_per_s;
      best = &r;
    }

  if (!out_path.empty() && best) {
    AtomicFile f(out_path);
    {
      std::ofstream os(f.tmp_path());
      os << "# best plan of arachne plan (" << best->label << "): " << fmt("%.1f", best->sim->tokens_per_s)
         << " tokens/s simulated\n# " << command_line << "\n"
         << plan_to_yaml(*best->result.plan, cluster);
      if (!os) throw std::runtime_error("cannot write " + f.tmp_path());
    }
    f.commit();
  }

  if (json) {
    nlohmann::json results = nlohmann::json::array();
    for (const Row& r : rows) {
      nlohmann::json o;
      o["planner"] = r.label;
      o["plan"] = r.result.plan ? plan_to_json(*r.result.plan, cluster) : nlohmann::json(nullptr);
      if (!r.result.plan) o["reason"] = r.result.reason;
      o["predicted_iteration_time_s"] = r.result.plan ? nlohmann::json(r.result.predicted_iteration_time_s) : nlohmann::json(nullptr);
      const bool timed = r.sim && has_timing(*r.sim) && !r.sim->oom;
      o["simulated_iteration_time_s"] = timed ? nlohmann::json(r.sim->iteration_time_s) : nlohmann::json(nullptr);
      o["tokens_per_s"] = timed ? nlohmann::json(r.sim->tokens_per_s) : nlohmann::json(nullptr);
      o["oom"] = r.sim ? r.sim->oom : false;
      o["peak_memory_gib"] = r.sim ? nlohmann::json(r.sim->peak_memory_gib) : nlohmann::json(nullptr);
      o["planning_time_s"] = r.result.planning_time_s;
      o["evaluations"] = r.result.evaluations;
      o["own_model_evaluations"] = r.result.own_model_evaluations;
      o["search_complete"] = r.result.search_complete;
      results.push_back(std::move(o));
    }
    std::cout << nlohmann::json{{"results", results}}.dump() << "\n";
  } else {
    std::printf("arachne plan: %s (%.2f B parameters) on %s, %d GPUs, global batch %ld, budget %ld simulator evaluations%s\n\n",
                model.name.c_str(), model.parameters() / 1e9, cluster.name.c_str(), cluster.total_gpus(), global,
                req.budget_evaluations, req.cost_model == planner::CostModel::Simulator ? ", simulator cost model" : "");
    std::printf("| planner | tokens/s | x best | peak GiB | planning s | sim evals | own evals | predicted s | simulated s | pred. error | plan |\n");
    std::printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
    for (const Row& r : rows) {
      if (!r.result.plan) {
        std::printf("| %s | - | - | - | %.3f | %ld | %ld | - | - | - | no feasible plan: %s |\n", r.label.c_str(),
                    r.result.planning_time_s, r.result.evaluations, r.result.own_model_evaluations,
                    r.result.reason.c_str());
        continue;
      }
      const SimResult& s = *r.sim;
      const std::string summary = plan_summary(*r.result.plan) + (r.result.search_complete ? "" : " (a budget or time cap cut the search)");
      if (s.oom) {
        std::printf("| %s | OOM | - | %.2f | %.3f | %ld | %ld | %.4f | - | - | %s |\n", r.label.c_str(),
                  s.peak_memory_gib, r.result.planning_time_s, r.result.evaluations, r.result.own_model_evaluations,
                  r.result.predicted_iteration_time_s, summary.c_str());
        continue;
      }
      const double err = 100.0 * (r.result.predicted_iteration_time_s - s.iteration_time_s) / s.iteration_time_s;
      std::printf("| %s | %.0f | %.3f | %.2f | %.3f | %ld | %ld | %.4f | %.4f | %+.1f %% | %s |\n", r.label.c_str(),
                  s.tokens_per_s, best_tps > 0 ? s.tokens_per_s / best_tps : 0.0, s.peak_memory_gib,
                  r.result.planning_time_s, r.result.evaluations, r.result.own_model_evaluations,
                  r.result.predicted_iteration_time_s, s.iteration_time_s, err, summary.c_str());
    }
    if (best) std::printf("\nbest: %s%s\n", best->label.c_str(), out_path.empty() ? "" : (" (plan written to " + out_path + ")").c_str());
  }
  if (!best) {
    std::fprintf(stderr, "plan: no planner found a feasible plan\n");
    return kExitInfeasible;
  }
  return kExitOk;
}

}  // namespace arachne::cli
