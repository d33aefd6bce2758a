// DIR/summary.md of `arachne evaluate` (planner/arachne/evaluate.h).
//
// Definitions (also printed in the file):
//   best baseline of a configuration: the highest simulated tokens/s among the baselines of kBaselines
//     that ran and returned a feasible plan;
//   ratio of an arachne row (the policy or an ablation): its tokens/s over the best baseline's; 0 when it
//     returned no feasible plan while a baseline did; undefined when no baseline found a feasible plan;
//   geometric mean over the configurations with a positive ratio (those without a plan are counted apart),
//     minimum over all defined ratios (a failure's 0 included);
//   ratio to the oracle: only where the oracle ran, completed its search and found a feasible plan.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <sstream>

#include "planner/arachne/evaluate.h"

namespace arachne::planner {
namespace {

bool is_arachne(const std::string& planner) { return planner.rfind("arachne", 0) == 0; }

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}
std::string ratio_text(std::optional<double> r) { return r ? fmt("%.3f", *r) : "-"; }

// The arachne row labels in the order they appear (the policy first, then the ablations).
std::vector<std::string> arachne_rows(const std::vector<ConfigResult>& results) {
  std::vector<std::string> rows;
  for (const ConfigResult& r : results)
    for (const CellRecord& c : r.cells)
      if (is_arachne(c.planner) && std::find(rows.begin(), rows.end(), c.planner) == rows.end()) rows.push_back(c.planner);
  return rows;
}

std::vector<std::string> all_rows(const std::vector<ConfigResult>& results) {
  std::vector<std::string> rows;
  for (const ConfigResult& r : results)
    for (const CellRecord& c : r.cells)
      if (std::find(rows.begin(), rows.end(), c.planner) == rows.end()) rows.push_back(c.planner);
  return rows;
}

const CellRecord* find_cell(const ConfigResult& r, const std::string& planner) {
  for (const CellRecord& c : r.cells)
    if (c.planner == planner) return &c;
  return nullptr;
}

const CellRecord* best_baseline(const ConfigResult& r) {
  const CellRecord* best = nullptr;
  for (const CellRecord& c : r.cells)
    if (is_baseline(c.planner) && c.feasible() && (!best || c.tokens_per_s > best->tokens_per_s)) best = &c;
  return best;
}

std::optional<double> ratio_to_best(const ConfigResult& r, const std::string& row) {
  const CellRecord* best = best_baseline(r);
  const CellRecord* c = find_cell(r, row);
  if (!best || !c) return std::nullopt;
  return c->feasible() ? c->tokens_per_s / best->tokens_per_s : 0.0;
}

std::optional<double> ratio_to_oracle(const ConfigResult& r, const std::string& row) {
  const CellRecord* o = find_cell(r, "oracle");
  const CellRecord* c = find_cell(r, row);
  if (!o || !c || !o->feasible() || !o->search_complete) return std::nullopt;
  return c->feasible() ? c->tokens_per_s / o->tokens_per_s : 0.0;
}

struct RatioStats {
  int defined = 0, failures = 0;
  double log_sum = 0, min = std::numeric_limits<double>::infinity();
  void add(std::optional<double> r) {
    if (!r) return;
    ++defined;
    min = std::min(min, *r);
    if (*r > 0) log_sum += std::log(*r);
    else ++failures;
  }
  std::string geomean() const { return defined > failures ? fmt("%.3f", std::exp(log_sum / (defined - failures))) : "-"; }
  std::string minimum() const { return defined > 0 ? fmt("%.3f", min) : "-"; }
};

void per_config_table(std::ostringstream& o, const std::vector<ConfigResult>& results, const std::vector<std::string>& rows) {
  o << "## Per configuration: tokens/s relative to the best baseline\n\n| config | GPUs | GPU types | model | batch | best baseline | tokens/s |";
  for (const std::string& r : rows) o << " " << r << " |";
  o << " arachne / oracle |\n|---:|---:|---|---|---:|---|---:|";
  for (std::size_t i = 0; i < rows.size(); ++i) o << "---:|";
  o << "---:|\n";
  for (const ConfigResult& r : results) {
    const CellRecord* best = best_baseline(r);
    o << "| " << r.config << " | " << r.gpus << " | " << r.family << " | " << r.model << (r.moe ? " (MoE)" : "") << " | "
      << r.global_batch << " | " << (best ? best->planner : "none feasible") << " | "
      << (best ? fmt("%.0f", best->tokens_per_s) : "-") << " |";
    for (const std::string& row : rows) o << " " << ratio_text(ratio_to_best(r, row)) << " |";
    o << " " << ratio_text(ratio_to_oracle(r, "arachne")) << " |\n";
  }
  o << "\n";
}

void quality_table(std::ostringstream& o, const std::vector<ConfigResult>& results, const std::vector<std::string>& rows,
                   bool moe) {
  int n = 0;
  for (const ConfigResult& r : results) n += r.moe == moe;
  o << "## " << (moe ? "MoE" : "Dense") << " models (" << n << " configurations)\n\n";
  if (n == 0) {
    o << "No configuration.\n\n";
    return;
  }
  o << "| planner | configs with a baseline plan | geo. mean vs best baseline | min | no feasible plan | configs with a complete oracle | geo. mean vs oracle | min |\n"
       "|---|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const std::string& row : rows) {
    RatioStats base, oracle;
    for (const ConfigResult& r : results)
      if (r.moe == moe) {
        base.add(ratio_to_best(r, row));
        oracle.add(ratio_to_oracle(r, row));
      }
    o << "| " << row << " | " << base.defined << " | " << base.geomean() << " | " << base.minimum() << " | " << base.failures
      << " | " << oracle.defined << " | " << oracle.geomean() << " | " << oracle.minimum() << " |\n";
  }
  o << "\n";
}

double quantile_median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void planning_time_table(std::ostringstream& o, const std::vector<ConfigResult>& results, const std::vector<std::string>& rows,
                         int threads) {
  const std::vector<std::pair<int, std::string>> bins = {{64, "<= 64 GPUs"}, {256, "65-256 GPUs"}, {1024, "257-1,024 GPUs"},
                                                         {std::numeric_limits<int>::max(), "> 1,024 GPUs"}};
  const auto bin_of = [&](int gpus) {
    std::size_t b = 0;
    while (gpus > bins[b].first) ++b;
    return b;
  };
  std::map<std::pair<std::string, std::size_t>, std::vector<double>> times;
  std::map<std::string, int> cut;
  std::vector<bool> used(bins.size(), false);
  for (const ConfigResult& r : results)
    for (const CellRecord& c : r.cells) {
      times[{c.planner, bin_of(c.gpus)}].push_back(c.planning_s);
      used[bin_of(c.gpus)] = true;
      cut[c.planner] += !c.search_complete;
    }
  o << "## Planning time (wall seconds: median / max, configurations)\n\n";
  if (threads > 1)
    o << "Measured with " << threads << " configurations evaluated at once: the planning times include contention for the cores.\n\n";
  o << "| planner |";
  for (std::size_t b = 0; b < bins.size(); ++b)
    if (used[b]) o << " " << bins[b].second << " |";
  o << " searches cut by a cap |\n|---|";
  for (std::size_t b = 0; b < bins.size(); ++b)
    if (used[b]) o << "---:|";
  o << "---:|\n";
  for (const std::string& row : rows) {
    o << "| " << row << " |";
    for (std::size_t b = 0; b < bins.size(); ++b) {
      if (!used[b]) continue;
      const auto it = times.find({row, b});
      if (it == times.end()) {
        o << " - |";
        continue;
      }
      o << " " << fmt("%.3g", quantile_median(it->second)) << " / "
        << fmt("%.3g", *std::max_element(it->second.begin(), it->second.end())) << " (" << it->second.size() << ") |";
    }
    o << " " << cut[row] << " |\n";
  }
  o << "\n";
}

void losses(std::ostringstream& o, const std::vector<ConfigResult>& results) {
  o << "## Where arachne loses (ratio < 1 to the best baseline)\n\n";
  int n = 0;
  for (const ConfigResult& r : results) {
    const std::optional<double> ratio = ratio_to_best(r, "arachne");
    if (!ratio || *ratio >= 1) continue;
    ++n;
    const CellRecord* a = find_cell(r, "arachne");
    const CellRecord* b = best_baseline(r);
    o << "- config " << r.config << " (" << r.gpus << " GPUs, " << r.family << ", " << r.model << ", batch " << r.global_batch
      << "): arachne " << fmt("%.3f", *ratio) << " x " << b->planner << "\n";
    o << "  - arachne: " << (a->feasible() ? a->plan + "; template `" + a->template_text + "`"
                                           : std::string(a->has_plan ? "out of memory" : "no plan: " + a->reason))
      << "\n";
    o << "  - " << b->planner << " (" << fmt("%.0f", b->tokens_per_s) << " tokens/s): " << b->plan << "; template `"
      << b->template_text << "`\n";
  }
  if (n == 0) o << "Nowhere in these configurations.\n";
  o << "\n";
}

}  // namespace

std::string evaluation_summary(const std::vector<ConfigResult>& results, const EvaluateOptions& opt) {
  std::ostringstream o;
  const std::vector<std::string> rows = arachne_rows(results);
  o << "# arachne evaluate: " << results.size() << " configurations (" << (opt.split == Split::HeldOut ? "held-out" : "training")
    << " GPU-type families)\n\n";
  o << "Options:\n\n```\n" << opt.options_text << "```\n\n";
  o << "Ratios are simulated tokens/s over the best of the baselines (" ;
  for (std::size_t i = 0; i < kBaselines.size(); ++i) o << (i ? ", " : "") << kBaselines[i];
  o << ") that found a feasible plan; 0 when the row found no feasible plan. Geometric means leave those failures out "
       "(counted in 'no feasible plan'); minima include them. Ratios to the oracle only where its search completed.\n\n";
  per_config_table(o, results, rows);
  quality_table(o, results, rows, false);
  quality_table(o, results, rows, true);
  planning_time_table(o, results, all_rows(results), opt.threads);
  losses(o, results);
  return o.str();
}

}  // namespace arachne::planner
