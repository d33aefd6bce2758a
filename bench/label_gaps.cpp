// Why gen-data's labels lose to the oracle: for each configuration of a dataset (planner/arachne/dataset.h)
// where the oracle completed and the best label is more than 0.1 % slower, runs the oracle again as the
// label search does (planner/arachne/labeler.cpp: no baseline seeds, its simulation cap) and prints one row:
// the oracle's template (template_of); whether each of its TP groups takes a whole number of samples; whether the label search had it among its candidates, and where
// its estimate ranked there; its completion with the estimator as the pricer (as the label search completes
// it) and with the simulator as the pricer, both simulated; the estimator's price of the oracle's own plan;
// then the oracle's plan and the simulator-priced completion in short form (per pipeline micro-batch x count,
// per stage layers and group shares, recompute, ZeRO-1).
//   build/label_gaps DATASET.h5 [max rows]
// e.g. scripts/labels_vs_oracle.sh keeps its datasets with LABELS_VS_ORACLE_KEEP=DIR.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>

#include "bench/plan_brief.h"
#include "planner/arachne/dataset.h"
#include "planner/arachne/labeler.h"
#include "planner/oracle/oracle_planner.h"
#include "planner/template/completion.h"
#include "planner/template/estimator.h"
#include "planner/template/template.h"
#include "sim/exec/simulate.h"
#include "sim/hw/topology.h"

namespace {

using namespace arachne;
using namespace arachne::planner;

// A template's text form inside a Markdown table cell (its stage separator is the cell separator).
std::string cell(const std::string& text) {
  std::string out;
  for (char ch : text) out += ch == '|' ? std::string("\\|") : std::string(1, ch);
  return out;
}

// Whether every TP group processes a whole number of samples per micro-batch (share x micro_batch), as a
// framework requires and the oracle's declared space has it (planner/oracle/README.md, item 5).
bool whole_samples(const Plan& p) {
  for (const Pipeline& pl : p.pipelines)
    for (const Stage& st : pl.stages)
      for (const TpGroup& g : st.groups) {
        const double samples = g.share * pl.micro_batch;
        if (std::abs(samples - std::round(samples)) > 1e-9) return false;
      }
  return true;
}

double simulated(const Cluster& c, const Topology& topo, const ModelConfig& m, const Plan& p) {
  const SimResult r = simulate_iteration(c, topo, m, p, SimOptions{});
  return r.oom ? NAN : r.iteration_time_s;
}

void explain(const ConfigRecord& rec, const GpuCatalog& catalog, const LabelOptions& opt) {
  const Cluster c = parse_cluster_yaml_text(rec.cluster_yaml, "config " + std::to_string(rec.index), catalog);
  const ModelConfig m = load_model(rec.model);
  const Topology topo(c);
  PlanRequest req;
  req.cluster = &c;
  req.topo = &topo;
  req.model = &m;
  req.global_batch = rec.global_batch;
  req.budget_evaluations = opt.oracle_simulations;
  OraclePlanner oracle(/*seed_with_baselines=*/false, /*threads=*/1);
  const PlanResult r = oracle.plan(req);
  if (!r.plan) return;
  const double oracle_s = simulated(c, topo, m, *r.plan);
  std::printf("| %llu | %s | %s | %ld | %.4f | ", static_cast<unsigned long long>(rec.index), rec.family.c_str(),
              rec.model.c_str(), rec.global_batch, rec.labels.front().simulated_s / oracle_s);
  Template t;
  try {
    t = template_of(*r.plan, c);
  } catch (const std::exception& e) {
    std::printf("outside the template space (%s) |\n", e.what());
    return;
  }
  const std::string text = to_text(t);
  std::vector<double> estimates;
  double own = NAN;
  for (const CandidateRecord& k : rec.candidates) {
    if (k.fits) estimates.push_back(k.estimated_s);
    if (k.template_text == text) own = k.fits ? k.estimated_s : INFINITY;
  }
  std::string rank = "not a candidate";
  if (!std::isnan(own)) {
    long better = 0;
    for (double e : estimates) better += e < own;
    rank = std::isinf(own) ? "candidate, not completed" : "candidate, estimate rank " + std::to_string(better + 1) + "/" + std::to_string(rec.candidates.size());
  }
  const Estimator est(c, topo, m);
  const CompletionInput in{&c, &topo, &m, rec.global_batch};
  const PlanPricer by_estimate = [&est](const Plan& p, double) -> std::optional<double> {
    const Estimate e = est.estimate(p);
    return e.fits ? std::optional<double>(e.iteration_s) : std::nullopt;
  };
  const PlanPricer by_simulation = [&](const Plan& p, double) -> std::optional<double> {
    const double s = simulated(c, topo, m, p);
    return std::isnan(s) ? std::nullopt : std::optional<double>(s);
  };
  const std::vector<CompletedPlan> e = complete_template(t, in, by_estimate, {.max_candidates = opt.completions});
  const std::vector<CompletedPlan> s = complete_template(t, in, by_simulation, {.max_candidates = 1});
  const Estimate on_oracle = est.estimate(*r.plan);
  std::printf("%s | %s | %s | %.4f | %.4f | %.4f | %.4f | oracle:%s; completion:%s |\n", cell(text).c_str(),
              whole_samples(*r.plan) ? "yes" : "no", rank.c_str(),
              e.empty() ? NAN : simulated(c, topo, m, e.front().plan) / oracle_s,
              s.empty() ? NAN : s.front().priced_s / oracle_s, on_oracle.iteration_s / oracle_s, oracle_s,
              plan_brief(*r.plan).c_str(), s.empty() ? " none" : plan_brief(s.front().plan).c_str());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: label_gaps DATASET.h5 [max rows]\n");
    return 2;
  }
  const long max_rows = argc > 2 ? std::atol(argv[2]) : 1000;
  try {
    const std::vector<ConfigRecord> records = read_dataset_h5(argv[1]);
    const GpuCatalog catalog = GpuCatalog::load_default();
    const LabelOptions opt;
    std::printf("| config | GPU types | model | batch | best label / oracle | oracle's template | oracle's groups take whole samples | "
                "in the label search | "
                "its completion, estimator-priced / oracle | simulator-priced / oracle | estimator on the oracle's plan / oracle | "
                "oracle (s) | plans |\n|---:|---|---|---:|---:|---|---|---|---:|---:|---:|---:|---|\n");
    long rows = 0;
    for (const ConfigRecord& rec : records) {
      if (std::isnan(rec.oracle_s) || rec.labels.empty() || rec.labels.front().simulated_s <= rec.oracle_s * 1.001) continue;
      if (rows++ == max_rows) break;
      explain(rec, catalog, opt);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  return 0;
}
