#include "planner/arachne/labeler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <sstream>

#include "planner/arachne/features.h"
#include "planner/oracle/oracle_planner.h"
#include "planner/template/completion.h"
#include "planner/template/estimator.h"
#include "planner/template/neighbors.h"
#include "planner/template/tokens.h"
#include "sim/exec/simulate.h"

namespace arachne::planner {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct Priced {
  Template tmpl;
  std::optional<CompletedPlan> best;  // the template's best completion (by estimate)
  double simulated_s = kNaN;
};

std::vector<Template> candidate_templates(const SampledConfig& cfg, const LabelOptions& opt, bool* complete) {
  const Enumeration e = enumerate_templates(cfg.cluster, cfg.model, opt.enumeration);
  *complete = e.complete;
  std::vector<Template> out;
  std::set<Template> seen;
  const auto add = [&](const std::vector<Template>& ts) {
    for (const Template& t : ts)
      if (seen.insert(t).second) out.push_back(t);
  };
  add(heuristic_templates(cfg.cluster, cfg.model, opt.heuristic, cfg.global_batch));
  add(e.templates);
  if (!e.complete)
    add(sample_templates(cfg.cluster, cfg.model, opt.enumeration, opt.sampled, cfg.seed * 0x100000001b3ULL + cfg.index));
  return out;
}

std::vector<Priced> price_templates(const std::vector<Template>& templates, const CompletionInput& in,
                                    const Estimator& est, int completions) {
  const PlanPricer price = [&est](const Plan& p, double) -> std::optional<double> {
    const Estimate e = est.estimate(p);
    if (!e.fits) return std::nullopt;
    return e.iteration_s;
  };
  std::vector<Priced> out;
  for (const Template& t : templates) {
    Priced p{t, std::nullopt, kNaN};
    std::vector<CompletedPlan> done = complete_template(t, in, price, {.max_candidates = completions});
    if (!done.empty()) p.best = std::move(done.front());
    out.push_back(std::move(p));
  }
  return out;
}

// Indices of the priced templates, best estimate first (unpriced last; ties: enumeration order).
std::vector<std::size_t> by_estimate(const std::vector<Priced>& priced) {
  std::vector<std::size_t> order(priced.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const double x = priced[a].best ? priced[a].best->priced_s : std::numeric_limits<double>::infinity();
    const double y = priced[b].best ? priced[b].best->priced_s : std::numeric_limits<double>::infinity();
    return x < y;
  });
  return order;
}

// The priced templates' neighbours, a few rounds from the best (local_search), appended to `priced`.
void refine_templates(std::vector<Priced>& priced, const CompletionInput& in, const Estimator& est, const LabelOptions& opt) {
  if (opt.refine_rounds <= 0) return;
  std::map<Template, std::size_t> index;
  std::vector<Template> start;
  for (std::size_t i = 0; i < priced.size(); ++i) index.emplace(priced[i].tmpl, i);
  for (std::size_t i : by_estimate(priced)) {
    if (static_cast<int>(start.size()) == opt.refine_width || !priced[i].best) break;
    start.push_back(priced[i].tmpl);
  }
  long fresh = 0;
  const TemplatePricer price = [&](const Template& t) -> std::optional<double> {
    auto it = index.find(t);
    if (it == index.end()) {
      if (fresh == opt.refine_max) return std::nullopt;
      ++fresh;
      std::vector<Priced> one = price_templates({t}, in, est, opt.completions);
      it = index.emplace(t, priced.size()).first;
      priced.push_back(std::move(one.front()));
    }
    const Priced& p = priced[it->second];
    return p.best ? std::optional<double>(p.best->priced_s) : std::nullopt;
  };
  local_search(start, *in.cluster, *in.model, price, {.rounds = opt.refine_rounds, .width = opt.refine_width});
}

void simulate_best(std::vector<Priced>& priced, const std::vector<std::size_t>& order, const SampledConfig& cfg,
                   const Topology& topo, int top) {
  int done = 0;
  for (std::size_t i : order) {
    if (done == top || !priced[i].best) break;
    const SimResult r = simulate_iteration(cfg.cluster, topo, cfg.model, priced[i].best->plan, SimOptions{});
    if (!r.oom) priced[i].simulated_s = r.iteration_time_s;
    ++done;
  }
}

std::vector<LabelRecord> best_simulated(const std::vector<Priced>& priced, const std::vector<std::string>& types, int labels) {
  std::vector<std::size_t> sim;
  for (std::size_t i = 0; i < priced.size(); ++i)
    if (!std::isnan(priced[i].simulated_s)) sim.push_back(i);
  std::stable_sort(sim.begin(), sim.end(), [&](std::size_t a, std::size_t b) { return priced[a].simulated_s < priced[b].simulated_s; });
  std::vector<LabelRecord> out;
  for (std::size_t i : sim) {
    if (static_cast<int>(out.size()) == labels) break;
    const std::optional<std::vector<int>> tokens = encode(priced[i].tmpl, types);
    if (!tokens) continue;
    out.push_back({to_text(priced[i].tmpl), *tokens, priced[i].simulated_s, priced[i].best->priced_s});
  }
  return out;
}

double oracle_time(const SampledConfig& cfg, const Topology& topo, const LabelOptions& opt) {
  if (opt.oracle_max_gpus <= 0 || cfg.cluster.total_gpus() > opt.oracle_max_gpus) return kNaN;
  PlanRequest req;
  req.cluster = &cfg.cluster;
  req.topo = &topo;
  req.model = &cfg.model;
  req.global_batch = cfg.global_batch;
  req.budget_evaluations = opt.oracle_simulations;
  OraclePlanner oracle(/*seed_with_baselines=*/false, /*threads=*/1);
  const PlanResult r = oracle.plan(req);
  if (!r.plan || !r.search_complete) return kNaN;
  return simulate_iteration(cfg.cluster, topo, cfg.model, *r.plan, SimOptions{}).iteration_time_s;
}

}  // namespace

std::string LabelOptions::text() const {
  std::ostringstream s;
  s << "label search: enumeration max_templates " << enumeration.max_templates << ", max_classes "
    << enumeration.max_classes << ", max_stages " << enumeration.max_stages << ", max_types_per_stage "
    << enumeration.max_types_per_stage << ", divisor_counts " << enumeration.divisor_counts << ", type_blocks "
    << enumeration.type_blocks << "; heuristic " << heuristic << "; sampled " << sampled
    << "; completions " << completions << "; refine " << refine_rounds << " rounds of " << refine_width
    << ", at most " << refine_max << "; simulate_top " << simulate_top << "; labels " << labels
    << "; oracle up to " << oracle_max_gpus << " GPUs, " << oracle_simulations << " simulations\n";
  return s.str();
}

DatasetSchema dataset_schema() {
  DatasetSchema s;
  for (int id = 0; id < vocabulary_size(); ++id) s.vocabulary.push_back(token_name(token_of(id)));
  s.group_features.assign(kGroupFeatureNames.begin(), kGroupFeatureNames.end());
  s.global_features.assign(kGlobalFeatureNames.begin(), kGlobalFeatureNames.end());
  return s;
}

ConfigRecord label_config(const SampledConfig& cfg, const LabelOptions& opt) {
  const Topology topo(cfg.cluster);
  const Estimator est(cfg.cluster, topo, cfg.model);
  const CompletionInput in{&cfg.cluster, &topo, &cfg.model, cfg.global_batch};
  ConfigRecord rec;
  const std::vector<Template> templates = candidate_templates(cfg, opt, &rec.search_complete);
  std::vector<Priced> priced = price_templates(templates, in, est, opt.completions);
  refine_templates(priced, in, est, opt);
  const std::vector<std::size_t> order = by_estimate(priced);
  simulate_best(priced, order, cfg, topo, opt.simulate_top);
  const std::vector<std::string> types = type_order(cfg.cluster);
  rec.labels = best_simulated(priced, types, opt.labels);
  for (const Priced& p : priced)
    rec.candidates.push_back({to_text(p.tmpl), p.best ? p.best->priced_s : kNaN, p.simulated_s, p.best.has_value()});
  const RequestFeatures f = request_features(cfg.cluster, types, cfg.model, cfg.global_batch);
  for (int g = 0; g < f.groups; ++g)
    rec.group_features.emplace_back(f.group.begin() + g * kGroupFeatures, f.group.begin() + (g + 1) * kGroupFeatures);
  rec.global_features.assign(f.global.begin(), f.global.end());
  rec.index = cfg.index;
  rec.family = cfg.family;
  rec.model = cfg.model.name;
  rec.global_batch = cfg.global_batch;
  rec.gpus = cfg.cluster.total_gpus();
  rec.cluster_yaml = cfg.cluster.to_yaml();
  rec.search = "heuristic + restricted enumeration (first " + std::to_string(opt.enumeration.max_templates) +
               " in token order) + " + std::to_string(opt.sampled) + " random walks + " +
               std::to_string(opt.refine_rounds) + " rounds of local moves, estimator-priced, top " +
               std::to_string(opt.simulate_top) + " simulated";
  rec.oracle_s = oracle_time(cfg, topo, opt);
  return rec;
}

}  // namespace arachne::planner
