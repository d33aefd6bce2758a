// Step 1 of planner/experiment/experiment.h: the experiment file parsed and every input it names loaded,
// with `file:line: field: reason` errors (InputError).
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "planner/arachne/arachne_planner.h"
#include "planner/arachne/evaluate.h"  // is_baseline
#include "planner/experiment/experiment.h"
#include "planner/planner.h"
#include "planner/registry.h"
#include "sim/io/input_error.h"
#include "sim/io/numbers.h"
#include "sim/io/units.h"
#include "sim/io/yaml_fields.h"

namespace arachne::planner {
namespace {

namespace fs = std::filesystem;
using yaml_fields::check_keys;
using yaml_fields::fail;

const std::vector<std::string> kTopKeys = {"version", "name", "seed", "budget", "comparisons", "replays"};
const std::vector<std::string> kComparisonKeys = {"clusters", "models",   "global_batches", "seeds",
                                                  "planners", "budget", "cost_models"};
const std::vector<std::string> kReplayKeys = {"trace",        "format",        "nodes",      "load_scale",
                                              "window",       "cluster",       "model",      "global_batch",
                                              "planners",     "until",         "coalesce",   "planning_time",
                                              "checkpoint_interval", "storage_bandwidth", "restart", "switch",
                                              "pool",         "volatility_window", "warm_start", "budget", "seed"};
const std::vector<std::string> kBudgetKeys = {"evaluations", "wall"};
const std::vector<std::string> kWindowKeys = {"start", "end"};

std::string read_file(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) throw InputError(path, "cannot read the experiment file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, "cannot read the experiment file");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// A relative path is taken from the current directory, else from the experiment file's directory, else
// from the repository root (bundled configs and traces), so that an experiment file runs from any directory.
// A text that names no file there is passed on as written (a bundled name or a cluster spec).
std::string resolve_path(const std::string& text, const std::string& experiment_file) {
  const fs::path p(text);
  std::error_code ec;  // a text too long for a file name names no file
  if (p.is_absolute() || fs::exists(p, ec)) return text;
  for (const fs::path& base : {fs::path(experiment_file).parent_path(), fs::path(ARACHNE_SOURCE_DIR)})
    if (!base.empty() && fs::exists(base / p, ec)) return (base / p).string();
  return text;
}

// Every InputError of a loader re-raised at the experiment file's line, keeping the loader's place.
template <class F>
auto at_line(const std::string& file, const YAML::Node& node, const std::string& field, F&& load) {
  try {
    return load();
  } catch (const InputError& e) {
    fail(file, node, field, e.where() + ": " + e.reason());
  }
}

class Parser {
 public:
  Parser(std::string file, const GpuCatalog& catalog) : file_(std::move(file)), catalog_(catalog) {}

  Experiment parse(const std::string& text) {
    YAML::Node root;
    try {
      root = YAML::Load(text);
    } catch (const YAML::Exception& e) {
      throw InputError(file_where(file_, e.mark.line, ""), e.msg);
    }
    if (!root.IsMap()) throw InputError(file_where(file_, 0, ""), "expected a mapping with comparisons: and/or replays:");
    check_keys(root, kTopKeys, file_, "");
    Experiment x;
    x.file = file_;
    x.text = text;
    if (root["version"].IsDefined() && yaml_fields::whole_number(root, "version", limits::kFormatVersion, file_, "") != 1)
      fail(file_, root["version"], "version", "only version 1 is known");
    x.name = root["name"].IsDefined() ? yaml_fields::require_scalar(root, "name", file_, "")
                                      : fs::path(file_).stem().string();
    x.seed = root["seed"].IsDefined() ? seed_of(root["seed"], "seed") : 0;
    const ExperimentBudget budget = budget_of(root, ExperimentBudget{}, "");
    const YAML::Node comparisons = list(root, "comparisons");
    const YAML::Node replays = list(root, "replays");
    if (comparisons.size() + replays.size() == 0)
      fail(file_, root, "comparisons", "the experiment has no cells: give comparisons: or replays:");
    for (std::size_t i = 0; i < comparisons.size(); ++i)
      x.comparisons.push_back(comparison(comparisons[i], "comparisons[" + std::to_string(i) + "].", budget, x));
    for (std::size_t i = 0; i < replays.size(); ++i)
      replay(replays[i], "replays[" + std::to_string(i) + "].", budget, x);
    load_policy_if_used(x, root);
    return x;
  }

 private:
  // An optional list; an empty one is an error (it would silently make no cells).
  YAML::Node list(const YAML::Node& parent, const std::string& key, const std::string& prefix = "") {
    const YAML::Node n = parent[key];
    if (!n.IsDefined()) return YAML::Node(YAML::NodeType::Sequence);
    if (!n.IsSequence()) fail(file_, n, prefix + key, "expected a list [a, b, ...]");
    if (n.size() == 0) fail(file_, n, prefix + key, "empty list: the matrix would have no cells");
    return n;
  }

  // A required list of distinct scalars.
  std::vector<std::pair<std::string, YAML::Node>> scalars(const YAML::Node& parent, const std::string& key,
                                                          const std::string& prefix) {
    if (!parent[key].IsDefined()) fail(file_, parent, prefix + key, "missing field");
    const YAML::Node n = list(parent, key, prefix);
    std::vector<std::pair<std::string, YAML::Node>> out;
    for (std::size_t i = 0; i < n.size(); ++i) {
      const std::string field = prefix + key + "[" + std::to_string(i) + "]";
      if (!n[i].IsScalar()) fail(file_, n[i], field, "expected a single value");
      for (const auto& [seen, node] : out)
        if (seen == n[i].Scalar()) fail(file_, n[i], field, "'" + seen + "' is listed twice");
      out.emplace_back(n[i].Scalar(), n[i]);
    }
    return out;
  }

  std::uint64_t seed_of(const YAML::Node& n, const std::string& field) {
    if (!n.IsScalar()) fail(file_, n, field, "expected a non-negative integer");
    return read_seed(n.Scalar(), file_where(file_, n.Mark().line, field));
  }

  long integer(const YAML::Node& n, const std::string& field, limits::IntRange range) {
    if (!n.IsScalar()) fail(file_, n, field, "expected an integer");
    return read_integer(n.Scalar(), range, file_where(file_, n.Mark().line, field));
  }

  double seconds(const YAML::Node& parent, const std::string& key, const std::string& prefix) {
    return yaml_fields::dimensioned(parent, key, units::parse_duration, limits::kTraceSeconds, file_, prefix);
  }

  ExperimentBudget budget_of(const YAML::Node& parent, ExperimentBudget b, const std::string& prefix) {
    const YAML::Node n = yaml_fields::optional_map(parent, "budget", file_, prefix);
    if (!n.IsDefined()) return b;
    const std::string p = prefix + "budget.";
    check_keys(n, kBudgetKeys, file_, p);
    if (n["evaluations"].IsDefined()) b.evaluations = integer(n["evaluations"], p + "evaluations", limits::kCount);
    if (n["wall"].IsDefined()) {
      b.wall_s = seconds(n, "wall", p);
      if (!(b.wall_s > 0)) fail(file_, n["wall"], p + "wall", "must be positive");
    }
    return b;
  }

  std::vector<std::string> planners(const YAML::Node& parent, const std::string& prefix) {
    std::vector<std::string> out;
    for (const auto& [name, node] : scalars(parent, "planners", prefix)) {
      if (name == "all") {
        if (parent["planners"].size() != 1) fail(file_, node, prefix + "planners", "'all' must stand alone");
        return registered_planner_names();
      }
      // (Bindings captured by name: clang before 16 cannot capture a structured binding.)
      at_line(file_, node, prefix + "planners", [&name = name] { return make_planner(name); });  // unknown name
      out.push_back(name);
    }
    return out;
  }

  void load_model(const std::string& name, const YAML::Node& node, const std::string& field, Experiment& x) {
    if (x.models.count(name)) return;
    x.models.emplace(name, at_line(file_, node, field, [&] { return arachne::load_model(resolve_path(name, file_)); }));
  }

  long global_batch_of(const ModelConfig& model, long requested, const YAML::Node& node, const std::string& field) {
    const long gb = requested > 0 ? requested : model.global_batch;
    if (gb < 1) fail(file_, node, field, model.name + " has no global_batch; give one");
    return gb;
  }

  std::vector<CostModel> cost_models(const YAML::Node& n, const std::string& prefix) {
    if (!n["cost_models"].IsDefined()) return {CostModel::Own};
    std::vector<CostModel> out;
    for (const auto& [name, node] : scalars(n, "cost_models", prefix)) {
      if (name != "own" && name != "simulator")
        fail(file_, node, prefix + "cost_models", "unknown cost model '" + name + "' (known: own, simulator)");
      out.push_back(name == "own" ? CostModel::Own : CostModel::Simulator);
    }
    return out;
  }

  ComparisonBlock comparison(const YAML::Node& n, const std::string& prefix, const ExperimentBudget& budget,
                             Experiment& x) {
    if (!n.IsMap()) fail(file_, n, prefix.substr(0, prefix.size() - 1), "expected a mapping");
    check_keys(n, kComparisonKeys, file_, prefix);
    ComparisonBlock b;
    for (const auto& [c, node] : scalars(n, "clusters", prefix)) {
      if (!x.clusters.count(c))
        x.clusters.emplace(c, at_line(file_, node, prefix + "clusters", [&, &c = c] { return load_cluster(resolve_path(c, file_), catalog_); }));
      b.clusters.push_back(c);
    }
    for (const auto& [m, node] : scalars(n, "models", prefix)) {
      load_model(m, node, prefix + "models", x);
      b.models.push_back(m);
    }
    if (n["global_batches"].IsDefined()) {
      for (const auto& [g, node] : scalars(n, "global_batches", prefix))
        b.global_batches.push_back(g == "default" ? 0 : integer(node, prefix + "global_batches", limits::kGlobalBatch));
    } else {
      b.global_batches = {0};
    }
    for (std::size_t i = 0; i < b.models.size(); ++i)
      for (long gb : b.global_batches)
        global_batch_of(x.models.at(b.models[i]), gb, n["models"][i], prefix + "models");
    if (n["seeds"].IsDefined()) {
      for (const auto& [s, node] : scalars(n, "seeds", prefix)) b.seeds.push_back(seed_of(node, prefix + "seeds"));
    } else {
      b.seeds = {x.seed};
    }
    b.planners = planners(n, prefix);
    b.budget = budget_of(n, budget, prefix);
    b.cost_models = cost_models(n, prefix);
    return b;
  }

  void replay(const YAML::Node& n, const std::string& prefix, const ExperimentBudget& budget, Experiment& x) {
    if (!n.IsMap()) fail(file_, n, prefix.substr(0, prefix.size() - 1), "expected a mapping");
    check_keys(n, kReplayKeys, file_, prefix);
    ReplayBlock b;
    b.trace = yaml_fields::require_scalar(n, "trace", file_, prefix);
    b.trace_path = resolve_path(b.trace, file_);
    b.seed = n["seed"].IsDefined() ? seed_of(n["seed"], prefix + "seed") : x.seed;
    b.load.seed = b.seed;
    if (n["format"].IsDefined()) b.load.format = yaml_fields::require_scalar(n, "format", file_, prefix);
    if (n["nodes"].IsDefined()) b.load.nodes = yaml_fields::whole_number(n, "nodes", limits::kNodes, file_, prefix);
    if (n["load_scale"].IsDefined()) b.load.load_scale = yaml_fields::plain_number(n, "load_scale", limits::kLoadScale, file_, prefix);
    if (const YAML::Node w = yaml_fields::optional_map(n, "window", file_, prefix); w.IsDefined()) {
      check_keys(w, kWindowKeys, file_, prefix + "window.");
      if (w["start"].IsDefined()) b.load.window_start_s = seconds(w, "start", prefix + "window.");
      if (w["end"].IsDefined()) b.load.window_end_s = seconds(w, "end", prefix + "window.");
    }
    b.model = yaml_fields::require_scalar(n, "model", file_, prefix);
    load_model(b.model, n["model"], prefix + "model", x);
    if (n["global_batch"].IsDefined()) b.global_batch = integer(n["global_batch"], prefix + "global_batch", limits::kGlobalBatch);
    b.global_batch = global_batch_of(x.models.at(b.model), b.global_batch, n["model"], prefix + "model");
    b.planners = planners(n, prefix);
    replay_options(n, prefix, b.options);
    if (n["warm_start"].IsDefined()) {
      const std::string w = yaml_fields::require_scalar(n, "warm_start", file_, prefix);
      if (w != "true" && w != "false") fail(file_, n["warm_start"], prefix + "warm_start", "expected true or false");
      b.warm_start = w == "true";
    }
    b.budget = budget_of(n, budget, prefix);
    std::optional<Cluster> link;
    if (n["cluster"].IsDefined()) {
      b.link_cluster = yaml_fields::require_scalar(n, "cluster", file_, prefix);
      link = at_line(file_, n["cluster"], prefix + "cluster", [&] { return load_cluster(resolve_path(b.link_cluster, file_), catalog_); });
    }
    x.traces.push_back(at_line(file_, n["trace"], prefix + "trace", [&] { return load_trace(b.trace_path, b.load, catalog_); }));
    x.link_clusters.push_back(std::move(link));
    x.replays.push_back(std::move(b));
  }

  void replay_options(const YAML::Node& n, const std::string& prefix, ReplayOptions& o) {
    if (n["until"].IsDefined()) o.until_s = seconds(n, "until", prefix);
    if (n["coalesce"].IsDefined()) o.coalesce_s = seconds(n, "coalesce", prefix);
    if (n["planning_time"].IsDefined() && yaml_fields::require_scalar(n, "planning_time", file_, prefix) != "measured")
      o.fixed_planning_s = seconds(n, "planning_time", prefix);
    // The defaults of `arachne replay`'s flags.
    o.checkpoint_interval_s = n["checkpoint_interval"].IsDefined() ? seconds(n, "checkpoint_interval", prefix) : 1800;
    check_checkpoint_interval(o.checkpoint_interval_s, yaml_fields::where_of(n, "checkpoint_interval", file_, prefix));
    o.restart_s = n["restart"].IsDefined() ? seconds(n, "restart", prefix) : 60;
    o.storage_bandwidth = n["storage_bandwidth"].IsDefined()
                              ? yaml_fields::dimensioned(n, "storage_bandwidth", units::parse_bandwidth, limits::kBandwidth, file_, prefix)
                              : 2e9;
    if (n["switch"].IsDefined()) {
      const std::string rule = yaml_fields::require_scalar(n, "switch", file_, prefix);
      if (rule == "always") o.switch_rule = SwitchRule::Always;
      else if (rule != "break-even")
        fail(file_, n["switch"], prefix + "switch", "unknown rule '" + rule + "' (known: break-even, always)");
    }
    if (n["pool"].IsDefined()) {
      const std::string rule = yaml_fields::require_scalar(n, "pool", file_, prefix);
      const std::optional<PoolRule> r = pool_rule_named(rule);
      if (!r) fail(file_, n["pool"], prefix + "pool", "unknown rule '" + rule + "' (known: " + kPoolRuleNames + ")");
      o.pool_rule = *r;
    }
    if (n["volatility_window"].IsDefined()) {
      o.volatility_window_s = seconds(n, "volatility_window", prefix);
      check_volatility_window(o.volatility_window_s, yaml_fields::where_of(n, "volatility_window", file_, prefix));
    }
  }

  // The learned planner's policy is read before any cell runs: a missing or malformed file is bad input.
  void load_policy_if_used(const Experiment& x, const YAML::Node& root) {
    bool used = false;
    for (const ComparisonBlock& b : x.comparisons)
      used |= std::find(b.planners.begin(), b.planners.end(), "arachne") != b.planners.end();
    for (const ReplayBlock& b : x.replays)
      used |= std::find(b.planners.begin(), b.planners.end(), "arachne") != b.planners.end();
    if (used) at_line(file_, root, "planners", [] { return &load_policy(""); });
  }

  std::string file_;
  const GpuCatalog& catalog_;
};

}  // namespace

Experiment load_experiment(const std::string& path, const GpuCatalog& catalog) {
  return Parser(path, catalog).parse(read_file(path));
}

std::vector<ExperimentCell> expand(const Experiment& x) {
  std::vector<ExperimentCell> cells;
  const auto add = [&cells](ExperimentCell c) {
    c.index = static_cast<long>(cells.size());
    cells.push_back(std::move(c));
  };
  for (std::size_t b = 0; b < x.comparisons.size(); ++b) {
    const ComparisonBlock& block = x.comparisons[b];
    for (const std::string& cluster : block.clusters)
      for (const std::string& model : block.models)
        for (long gb : block.global_batches)
          for (std::uint64_t seed : block.seeds)
            for (CostModel cm : block.cost_models)
              for (const std::string& p : block.planners)
                if (cm == CostModel::Own || is_baseline(p))  // the others have no cost model of their own
                  add({0, CellKind::Comparison, static_cast<int>(b), cluster, model,
                       gb > 0 ? gb : x.models.at(model).global_batch, seed, p, cm});
  }
  for (std::size_t b = 0; b < x.replays.size(); ++b) {
    const ReplayBlock& block = x.replays[b];
    for (const std::string& p : block.planners)
      add({0, CellKind::Replay, static_cast<int>(b), "", block.model, block.global_batch, block.seed, p});
  }
  return cells;
}

std::string ExperimentCell::describe() const {
  std::ostringstream s;
  if (kind == CellKind::Comparison)
    s << "comparison " << block << ": " << planner << " on " << cluster << ", " << model << ", global batch "
      << global_batch << ", seed " << seed << (cost_model == CostModel::Simulator ? ", simulator cost model" : "");
  else
    s << "replay " << block << ": " << planner << ", " << model << ", global batch " << global_batch << ", seed " << seed;
  return s.str();
}

}  // namespace arachne::planner
