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


// The comparison cells of one (cluster, model, global batch, seed), from every block, in cell order.
struct Group {
  const ExperimentCell* first = nullptr;
  std::vector<const CellResult*> rows;
  double best_baseline() const {
    double best = 0;
    for (const CellResult* r : rows)
      if (is_baseline(r->comparison->label) && r->comparison->feasible()) best = std::max(best, r->comparison->tokens_per_s);
    return best;
  }
  const CellResult* of(const std::string& label) const {
    for (const CellResult* r : rows)
      if (r->comparison->label == label) return r;
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

// Row labels (planner names, "metis[simulator]" for a baseline searching with the simulator as its cost
// model) in order of first appearance.
std::vector<std::string> planners_of(const std::vector<const Group*>& groups) {
  std::vector<std::string> out;
  for (const Group* g : groups)
    for (const CellResult* r : g->rows)
      if (std::find(out.begin(), out.end(), r->comparison->label) == out.end()) out.push_back(r->comparison->label);
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

// The rows of planners that are not baselines (arachne, the oracle, ...), in order of first appearance.
std::vector<std::string> challengers_of(const std::vector<Group>& groups) {
  std::vector<std::string> out;
  for (const Group& g : groups)
    for (const CellResult* r : g.rows)
      if (!is_baseline(r->cell.planner) && std::find(out.begin(), out.end(), r->comparison->label) == out.end())
        out.push_back(r->comparison->label);
  return out;
}

// Per challenger and model class (dense, MoE): its tokens/s over the best baseline's, summarised over the
// comparisons where both have a feasible plan (geometric mean, least, most, wins/ties/losses at a 0.5 %
// margin), and how often only one side has one.
void headline(std::ostringstream& s, const std::vector<Group>& groups) {
  const std::vector<std::string> challengers = challengers_of(groups);
  if (challengers.empty()) return;
  s << "## Headline\n\nEach planner that is not a baseline against the best of the five baselines on the same "
    << "cluster, model, batch and seed (tokens/s of the simulated plans). Win / tie / loss: ratio above 1.005 / "
    << "within 0.5 % / below 0.995; \"only it\": no baseline has a feasible plan and it has one; \"none\": it "
    << "has none where a baseline has one.\n\n"
    << "| planner | models | comparisons | geometric mean | least | most | wins / ties / losses | only it | none |\n"
    << "|---|---|---:|---:|---:|---:|---|---:|---:|\n";
  for (const std::string& p : challengers)
    for (const bool moe : {false, true}) {
      std::vector<double> ratios;
      int only_it = 0, none = 0, compared = 0;
      for (const Group& g : groups) {
        const CellResult* r = g.of(p);
        if (r == nullptr || r->comparison->moe != moe) continue;
        ++compared;
        const double best = g.best_baseline();
        const bool mine = r->comparison->feasible();
        if (mine && best > 0) ratios.push_back(r->comparison->tokens_per_s / best);
        else if (mine) ++only_it;
        else if (best > 0) ++none;
      }
      if (compared == 0) continue;
      s << "| " << p << " | " << (moe ? "MoE" : "dense") << " | " << compared << " | ";
      if (ratios.empty()) {
        s << "- | - | - | - | " << only_it << " | " << none << " |\n";
        continue;
      }
      double log_sum = 0;
      int wins = 0, losses = 0;
      for (double v : ratios) {
        log_sum += std::log(v);
        wins += v > 1.005;
        losses += v < 0.995;
      }
      const auto [lo, hi] = std::minmax_element(ratios.begin(), ratios.end());
      s << fmt("%.3f", std::exp(log_sum / static_cast<double>(ratios.size()))) << " | " << fmt("%.3f", *lo) << " | "
        << fmt("%.3f", *hi) << " | " << wins << " / " << static_cast<int>(ratios.size()) - wins - losses << " / "
        << losses << " | " << only_it << " | " << none << " |\n";
    }
  s << "\n";
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Per planner over every comparison cell: outcomes, searches cut short, planning wall time, the error of its
// own prediction of the iteration time against the simulator (mean of |predicted / simulated - 1| over its
// feasible plans) and the geometric mean of its tokens/s over the best baseline's (where both have a plan).
void planner_table(std::ostringstream& s, const std::vector<Group>& groups) {
  std::vector<const Group*> all;
  for (const Group& g : groups) all.push_back(&g);
  s << "## Per planner\n\n| planner | runs | feasible plans | OOM | no plan | searches cut | planning s: median / "
    << "max | own-model error | geometric mean x best baseline |\n|---|---:|---:|---:|---:|---:|---|---:|---:|\n";
  for (const std::string& p : planners_of(all)) {
    int runs = 0, feasible = 0, oom = 0, cut = 0;
    std::vector<double> times;
    double error_sum = 0, log_ratio_sum = 0;
    int ratios = 0;
    for (const Group& g : groups) {
      const CellResult* r = g.of(p);
      if (r == nullptr) continue;
      const ComparisonOutcome& o = *r->comparison;
      ++runs;
      times.push_back(o.planning_time_s);
      cut += !o.search_complete;
      oom += o.has_plan && o.oom;
      if (o.feasible()) {
        ++feasible;
        error_sum += std::abs(o.predicted_iteration_time_s / o.iteration_time_s - 1);
        if (const double best = g.best_baseline(); best > 0) {
          log_ratio_sum += std::log(o.tokens_per_s / best);
          ++ratios;
        }
      }
    }
    s << "| " << p << " | " << runs << " | " << feasible << " | " << oom << " | " << runs - feasible - oom << " | "
      << cut << " | " << fmt("%.3g", median(times)) << " / " << fmt("%.3g", *std::max_element(times.begin(), times.end()))
      << " | " << (feasible ? fmt("%.1f %%", 100 * error_sum / feasible) : "-") << " | "
      << (ratios ? fmt("%.3f", std::exp(log_ratio_sum / ratios)) : "-") << " |\n";
  }
  s << "\n";
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
    headline(s, groups);
    s << "## Throughput relative to the best baseline\n\n";
    overview(s, groups);
    planner_table(s, groups);
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
