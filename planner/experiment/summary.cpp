// DIR/summary.md of an experiment (planner/experiment/experiment.h): Markdown tables from the cells.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>
#include <tuple>

#include "planner/arachne/evaluate.h"  // kBaselines
#include "planner/experiment/experiment.h"

namespace arachne::planner {
namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

bool is_baseline(const std::string& planner) {
  return std::find(kBaselines.begin(), kBaselines.end(), planner) != kBaselines.end();
}

// The comparison cells of one (cluster, model, global batch, seed), from every block, in cell order.
struct Group {
  const ExperimentCell* first = nullptr;
  std::vector<const CellResult*> rows;
  double best_baseline() const {
    double best = 0;
    for (const CellResult* r : rows)
      if (is_baseline(r->cell.planner) && r->comparison->feasible()) best = std::max(best, r->comparison->tokens_per_s);
    return best;
  }
  const CellResult* of(const std::string& planner) const {
    for (const CellResult* r : rows)
      if (r->cell.planner == planner) return r;
    return nullptr;
  }
};

// Groups in order of first appearance.
std::vector<Group> groups_of(const std::vector<CellResult>& results) {
  std::vector<Group> out;
  using Key = std::tuple<std::string, std::string, long, std::uint64_t>;
  std::map<Key, std::size_t> index;
  for (const CellResult& r : results) {
    if (!r.comparison) continue;
    const Key key{r.cell.cluster, r.cell.model, r.cell.global_batch, r.cell.seed};
    const auto [it, fresh] = index.emplace(key, out.size());
    if (fresh) out.push_back({&r.cell, {}});
    out[it->second].rows.push_back(&r);
  }
  return out;
}

std::string outcome_text(const ComparisonOutcome& o) { return o.has_plan ? "OOM" : "no plan"; }

std::string ratio_text(const CellResult* r, double best) {
  if (r == nullptr) return "";
  if (!r->comparison->feasible()) return outcome_text(*r->comparison);
  if (!(best > 0)) return fmt("%.0f tok/s", r->comparison->tokens_per_s);
  return fmt("%.3f", r->comparison->tokens_per_s / best);
}

// Planners in order of first appearance.
std::vector<std::string> planners_of(const std::vector<const Group*>& groups) {
  std::vector<std::string> out;
  for (const Group* g : groups)
    for (const CellResult* r : g->rows)
      if (std::find(out.begin(), out.end(), r->cell.planner) == out.end()) out.push_back(r->cell.planner);
  return out;
}

// Per model: one row per (cluster, batch, seed), one column per planner, ratio to the best baseline.
void overview(std::ostringstream& s, const std::vector<Group>& groups) {
  std::vector<std::string> models;
  for (const Group& g : groups)
    if (std::find(models.begin(), models.end(), g.first->model) == models.end()) models.push_back(g.first->model);
  for (const std::string& m : models) {
    std::vector<const Group*> mine;
    for (const Group& g : groups)
      if (g.first->model == m) mine.push_back(&g);
    const std::vector<std::string> planners = planners_of(mine);
    s << "### " << m << "\n\nTokens/s of each planner's plan (simulated) divided by the best baseline's on the same "
      << "cluster (baselines: megatron, amp, metis, flashflex, sailor); OOM: the plan does not fit; no plan: the "
      << "planner found none.\n\n| cluster | GPUs | batch | seed |";
    for (const std::string& p : planners) s << " " << p << " |";
    s << "\n|---|---:|---:|---:|";
    for (std::size_t i = 0; i < planners.size(); ++i) s << "---:|";
    s << "\n";
    std::map<std::string, std::pair<double, int>> log_sum;  // geometric mean over feasible cells
    for (const Group* g : mine) {
      const double best = g->best_baseline();
      s << "| " << g->first->cluster << " | " << g->rows.front()->comparison->gpus << " | " << g->first->global_batch
        << " | " << g->first->seed << " |";
      for (const std::string& p : planners) {
        const CellResult* r = g->of(p);
        s << " " << ratio_text(r, best) << " |";
        if (r && r->comparison->feasible() && best > 0) {
          log_sum[p].first += std::log(r->comparison->tokens_per_s / best);
          ++log_sum[p].second;
        }
      }
      s << "\n";
    }
    s << "| geometric mean (feasible cells) | | | |";
    for (const std::string& p : planners) {
      const auto it = log_sum.find(p);
      s << " " << (it == log_sum.end() ? "-" : fmt("%.3f", std::exp(it->second.first / it->second.second))) << " |";
    }
    s << "\n\n";
  }
}

void details(std::ostringstream& s, const std::vector<Group>& groups) {
  for (const Group& g : groups) {
    const double best = g.best_baseline();
    const ComparisonOutcome& any = *g.rows.front()->comparison;
    s << "### " << g.first->model << " on " << g.first->cluster << " (" << any.gpus << " GPUs: " << any.gpu_types
      << "), global batch " << g.first->global_batch << ", seed " << g.first->seed << "\n\n"
      << "| planner | tokens/s | x best baseline | iteration s | predicted s | peak GiB | planning s | sim evals | "
         "search complete | plan |\n|---|---:|---:|---:|---:|---:|---:|---:|---|---|\n";
    for (const CellResult* r : g.rows) {
      const ComparisonOutcome& o = *r->comparison;
      s << "| " << o.label << " | ";
      if (o.feasible())
        s << fmt("%.0f", o.tokens_per_s) << " | " << ratio_text(r, best) << " | " << fmt("%.4f", o.iteration_time_s);
      else
        s << outcome_text(o) << " | - | -";
      s << " | " << (o.has_plan ? fmt("%.4f", o.predicted_iteration_time_s) : "-") << " | "
        << (o.has_plan ? fmt("%.2f", o.peak_memory_gib) : "-") << " | " << fmt("%.3f", o.planning_time_s) << " | "
        << o.evaluations << " | " << (o.search_complete ? "yes" : "no (cap)") << " | "
        << (o.has_plan ? o.plan : o.reason) << " |\n";
    }
    s << "\n";
  }
}

void replays(std::ostringstream& s, const Experiment& x, const std::vector<CellResult>& results) {
  for (std::size_t b = 0; b < x.replays.size(); ++b) {
    const ReplayBlock& block = x.replays[b];
    std::vector<const CellResult*> mine;
    double best = 0;
    for (const CellResult& r : results)
      if (r.replay && r.cell.block == static_cast<int>(b)) {
        mine.push_back(&r);
        if (is_baseline(r.cell.planner)) best = std::max(best, r.replay->totals.tokens_trained);
      }
    s << "### Replay " << b << ": " << block.trace << ", " << block.model << ", global batch " << block.global_batch
      << "\n\n| planner | tokens trained | x best baseline | effective tokens/s | replans | planning s | reconfig s | "
         "checkpoint s | idle s | work lost s |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
    for (const CellResult* r : mine) {
      const ReplayTotals& t = r->replay->totals;
      s << "| " << r->cell.planner << " | " << fmt("%.4g", t.tokens_trained) << " | "
        << (best > 0 ? fmt("%.3f", t.tokens_trained / best) : "-") << " | " << fmt("%.1f", t.effective_tokens_per_s)
        << " | " << t.replans << " | " << fmt("%.1f", t.planning_s) << " | " << fmt("%.1f", t.reconfig_s) << " | "
        << fmt("%.1f", t.checkpoint_s) << " | " << fmt("%.1f", t.idle_s) << " | " << fmt("%.1f", t.work_lost_s) << " |\n";
    }
    s << "\n";
  }
}

}  // namespace

std::string experiment_summary(const Experiment& x, const std::vector<CellResult>& results) {
  std::ostringstream s;
  long comparisons = 0, replay_cells = 0;
  for (const CellResult& r : results) (r.comparison ? comparisons : replay_cells) += 1;
  s << "# Experiment " << x.name << "\n\n" << results.size() << " cells from " << x.file << ": " << comparisons
    << " planner runs on clusters, " << replay_cells << " replays. Every plan is measured in the simulator; "
    << "planning times are wall times of this run.\n\n";
  const std::vector<Group> groups = groups_of(results);
  if (!groups.empty()) {
    s << "## Throughput relative to the best baseline\n\n";
    overview(s, groups);
    s << "## Per cluster and model\n\n";
    details(s, groups);
  }
  if (!x.replays.empty()) {
    s << "## Replays\n\n";
    replays(s, x, results);
  }
  return s.str();
}

}  // namespace arachne::planner
