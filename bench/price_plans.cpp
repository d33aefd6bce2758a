// Why arachne's plan loses to another planner's on one cluster: an estimator miss (the estimator prices the
// other plan no lower than arachne's, yet it simulates faster) or a miss of the search or of completion (the
// estimator prices it lower, so arachne would have returned it had it been among the candidates). For each
// plan file: the estimator's price (and the end of its slowest pipeline's schedule within it) and the
// simulated time; for each template: its completion as arachne completes it (both placements of replicas,
// every recompute level that memory leaves open, the estimator as the pricer), the best completed plan's
// price and simulated time.
//   build/price_plans CLUSTER MODEL GLOBAL_BATCH (plan:FILE.yaml | template:TEXT | out:FILE.yaml)...
// out:FILE.yaml writes the next template's best completed plan there (`arachne simulate --plan` reads it).
// CLUSTER is a cluster file or spec, MODEL a bundled name or file (as `arachne plan` takes them); plan files
// are what `arachne plan --out` writes (or the plan_yaml column of an evaluation.h5's cells).
#include <cstdio>
#include <exception>
#include <fstream>
#include <optional>
#include <string>

#include "bench/plan_brief.h"
#include "planner/template/completion.h"
#include "planner/template/estimator.h"
#include "planner/template/template.h"
#include "sim/exec/simulate.h"
#include "sim/hw/topology.h"
#include "sim/model/model.h"
#include "sim/plan/plan_yaml.h"

namespace {

using namespace arachne;
using namespace arachne::planner;

struct Request {
  const Cluster& cluster;
  const Topology& topo;
  const ModelConfig& model;
  long global_batch;
  const Estimator& estimator;
  std::string out;  // where the next template's completed plan goes ("": nowhere)
};

// The simulated iteration time (nullopt: out of memory).
std::optional<double> simulated_s(const Request& r, const Plan& plan) {
  const SimResult s = simulate_iteration(r.cluster, r.topo, r.model, plan, SimOptions{});
  if (s.oom) return std::nullopt;
  return s.iteration_time_s;
}

void print_row(const char* kind, const std::string& what, const std::optional<Estimate>& e, std::optional<double> sim) {
  std::printf("%-8s priced %s", kind, !e ? "-" : !e->fits ? "out of memory" : "");
  if (e && e->fits) std::printf("%.6f s (pipeline %.6f s)", e->iteration_s, e->pipeline_s);
  std::printf(", simulated ");
  if (sim) std::printf("%.6f s", *sim);
  else std::printf("out of memory");
  std::printf(": %s\n", what.c_str());
}

void price_plan(const Request& r, const std::string& file) {
  const Plan plan = parse_plan_yaml(file, r.cluster);
  validate_plan(plan, r.cluster, r.model, r.global_batch, file);
  print_row("plan", file, r.estimator.estimate(plan), simulated_s(r, plan));
  std::printf("  %s\n", plan_brief(plan).c_str());
}

void price_template(Request& r, const std::string& text) {
  const Template t = parse_template(text);
  const PlanPricer price = [&](const Plan& p, double stop_at_s) -> std::optional<double> {
    const Estimate e = r.estimator.estimate(p, stop_at_s);
    if (!e.fits) return std::nullopt;
    return e.iteration_s;
  };
  CompletionOptions opt;
  opt.data_parallel_placement = true;
  opt.price_every_recompute_level = true;
  const std::vector<CompletedPlan> plans = complete_template(t, {&r.cluster, &r.topo, &r.model, r.global_batch}, price, opt);
  if (plans.empty()) {
    std::printf("template not completed: %s\n", text.c_str());
    return;
  }
  print_row("template", text, r.estimator.estimate(plans.front().plan), simulated_s(r, plans.front().plan));
  std::printf("  %s\n", plan_brief(plans.front().plan).c_str());
  if (!r.out.empty()) {
    std::ofstream(r.out) << plan_to_yaml(plans.front().plan, r.cluster);
    r.out.clear();
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: price_plans CLUSTER MODEL GLOBAL_BATCH (plan:FILE.yaml | template:TEXT | out:FILE.yaml)...\n");
    return 2;
  }
  try {
    const GpuCatalog catalog = GpuCatalog::load_default();
    const Cluster cluster = load_cluster(argv[1], catalog);
    const Topology topo(cluster);
    const ModelConfig model = load_model(argv[2]);
    const Estimator estimator(cluster, topo, model);
    Request r{cluster, topo, model, std::stol(argv[3]), estimator, ""};
    for (int i = 4; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg.rfind("plan:", 0) == 0) price_plan(r, arg.substr(5));
      else if (arg.rfind("template:", 0) == 0) price_template(r, arg.substr(9));
      else if (arg.rfind("out:", 0) == 0) r.out = arg.substr(4);
      else throw std::invalid_argument("argument " + std::to_string(i) + ": not plan:FILE, template:TEXT or out:FILE");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  return 0;
}
