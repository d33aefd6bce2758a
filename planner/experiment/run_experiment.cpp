// Steps 3 and 4 of planner/experiment/experiment.h: cells run and sharded, the HDF5 file assembled.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "planner/arachne/arachne_planner.h"  // default_policy_path
#include "planner/arachne/evaluate.h"         // is_baseline
#include "planner/arachne/policy_weights.h"   // file_fingerprint
#include "planner/common/shards.h"
#include "planner/experiment/experiment.h"
#include "planner/registry.h"
#include "planner/replay_planner.h"
#include "planner/run_planner.h"
#include "sim/hw/topology.h"
#include "sim/io/atomic_file.h"
#include "sim/io/replay_h5.h"
#include "sim/plan/plan_yaml.h"

namespace arachne::planner {
namespace {

using nlohmann::json;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// "A100-80,V100-32": the cluster's GPU types in listing order, each once.
std::string gpu_types_of(const Cluster& c) {
  std::string out;
  std::set<std::string> seen;
  for (const NodeGroup& g : c.groups)
    if (seen.insert(g.gpu).second) out += (out.empty() ? "" : ",") + g.gpu;
  return out;
}

ComparisonOutcome outcome_of(const PlannerRun& run, const Cluster& cluster, const ModelConfig& model) {
  ComparisonOutcome o;
  o.gpus = cluster.total_gpus();
  o.gpu_types = gpu_types_of(cluster);
  o.moe = model.moe.has_value();
  o.label = run.label;
  o.has_plan = run.result.plan.has_value();
  o.oom = run.sim && run.sim->oom;
  const bool timed = run.feasible();
  o.tokens_per_s = timed ? run.sim->tokens_per_s : kNaN;
  o.iteration_time_s = timed ? run.sim->iteration_time_s : kNaN;
  o.predicted_iteration_time_s = o.has_plan ? run.result.predicted_iteration_time_s : kNaN;
  o.peak_memory_gib = run.sim ? run.sim->peak_memory_gib : kNaN;
  o.planning_time_s = run.result.planning_time_s;
  o.evaluations = run.result.evaluations;
  o.own_evaluations = run.result.own_model_evaluations;
  o.search_complete = run.result.search_complete;
  o.reason = run.result.reason;
  o.plan = o.has_plan ? plan_summary(*run.result.plan) : "";
  o.plan_yaml = o.has_plan ? plan_to_yaml(*run.result.plan, cluster) : "";
  return o;
}

ComparisonOutcome run_comparison(const Experiment& x, const ExperimentCell& cell) {
  const ComparisonBlock& block = x.comparisons[static_cast<std::size_t>(cell.block)];
  const Cluster& cluster = x.clusters.at(cell.cluster);
  const ModelConfig& model = x.models.at(cell.model);
  const Topology topo(cluster);
  PlanRequest req;
  req.cluster = &cluster;
  req.topo = &topo;
  req.model = &model;
  req.global_batch = cell.global_batch;
  req.budget_evaluations = block.budget.evaluations;
  req.budget_wall_s = block.budget.wall_s;
  req.seed = cell.seed;
  req.cost_model = cell.cost_model;
  const std::unique_ptr<Planner> p = make_planner(cell.planner);
  ComparisonOutcome o = outcome_of(run_planner(*p, req), cluster, model);
  // A baseline searching with the simulator is another planner than the published one: its own row, not a
  // reference of the ratios.
  if (cell.cost_model == CostModel::Simulator && is_baseline(cell.planner)) o.label += "[simulator]";
  return o;
}

ReplayResult run_replay_cell(const Experiment& x, const ExperimentCell& cell, const GpuCatalog& catalog) {
  const auto b = static_cast<std::size_t>(cell.block);
  const ReplayBlock& block = x.replays[b];
  const ModelConfig& model = x.models.at(cell.model);
  ReplayOptions ro = block.options;
  ro.link_template = x.link_clusters[b] ? &*x.link_clusters[b] : nullptr;
  const std::unique_ptr<Planner> p = make_planner(cell.planner);
  const ReplanSettings settings{block.budget.evaluations, block.budget.wall_s, cell.seed, block.warm_start, ""};  // "": the shipped policy
  const ReplanCallback cb = replan_callback(*p, model, settings);
  return replay(x.traces[b].trace, catalog, model, cell.global_batch, cb, ro);
}

// --- shards (JSON) ---

json number_or_null(double v) { return std::isnan(v) ? json(nullptr) : json(v); }
double number_or_nan(const json& j) { return j.is_null() ? kNaN : j.get<double>(); }

json cell_to_json(const ExperimentCell& c) {
  json j{{"index", c.index}, {"kind", c.kind == CellKind::Comparison ? "comparison" : "replay"}, {"block", c.block},
         {"cluster", c.cluster}, {"model", c.model}, {"global_batch", c.global_batch}, {"seed", c.seed},
         {"planner", c.planner}};
  if (c.cost_model == CostModel::Simulator) j["cost_model"] = "simulator";  // absent: own
  return j;
}

ExperimentCell cell_from_json(const json& j) {
  ExperimentCell c;
  c.index = j.at("index").get<long>();
  c.kind = j.at("kind").get<std::string>() == "comparison" ? CellKind::Comparison : CellKind::Replay;
  c.block = j.at("block").get<int>();
  c.cluster = j.at("cluster").get<std::string>();
  c.model = j.at("model").get<std::string>();
  c.global_batch = j.at("global_batch").get<long>();
  c.seed = j.at("seed").get<std::uint64_t>();
  c.planner = j.at("planner").get<std::string>();
  c.cost_model = j.value("cost_model", "own") == "simulator" ? CostModel::Simulator : CostModel::Own;
  return c;
}

json comparison_to_json(const ComparisonOutcome& o) {
  return {{"gpus", o.gpus}, {"gpu_types", o.gpu_types}, {"moe", o.moe}, {"label", o.label}, {"has_plan", o.has_plan},
          {"oom", o.oom}, {"tokens_per_s", number_or_null(o.tokens_per_s)},
          {"iteration_time_s", number_or_null(o.iteration_time_s)},
          {"predicted_iteration_time_s", number_or_null(o.predicted_iteration_time_s)},
          {"peak_memory_gib", number_or_null(o.peak_memory_gib)}, {"planning_time_s", o.planning_time_s},
          {"evaluations", o.evaluations}, {"own_evaluations", o.own_evaluations},
          {"search_complete", o.search_complete}, {"reason", o.reason}, {"plan", o.plan}, {"plan_yaml", o.plan_yaml}};
}

ComparisonOutcome comparison_from_json(const json& j) {
  ComparisonOutcome o;
  o.gpus = j.at("gpus").get<int>();
  o.gpu_types = j.at("gpu_types").get<std::string>();
  o.moe = j.at("moe").get<bool>();
  o.label = j.at("label").get<std::string>();
  o.has_plan = j.at("has_plan").get<bool>();
  o.oom = j.at("oom").get<bool>();
  o.tokens_per_s = number_or_nan(j.at("tokens_per_s"));
  o.iteration_time_s = number_or_nan(j.at("iteration_time_s"));
  o.predicted_iteration_time_s = number_or_nan(j.at("predicted_iteration_time_s"));
  o.peak_memory_gib = number_or_nan(j.at("peak_memory_gib"));
  o.planning_time_s = j.at("planning_time_s").get<double>();
  o.evaluations = j.at("evaluations").get<long>();
  o.own_evaluations = j.at("own_evaluations").get<long>();
  o.search_complete = j.at("search_complete").get<bool>();
  o.reason = j.at("reason").get<std::string>();
  o.plan = j.at("plan").get<std::string>();
  o.plan_yaml = j.at("plan_yaml").get<std::string>();
  return o;
}

json replay_to_json(const ReplayResult& r) {
  json iv = json::array();
  for (const ReplayInterval& x : r.intervals)
    iv.push_back({{"start_s", x.start_s}, {"end_s", x.end_s}, {"gpus_per_type", x.gpus_per_type},
                  {"plan_summary", x.plan_summary}, {"gpus_used", x.gpus_used}, {"tokens_per_s", x.tokens_per_s},
                  {"tokens", x.tokens}, {"planning_s", x.planning_s}, {"reconfig_s", x.reconfig_s},
                  {"checkpoint_s", x.checkpoint_s}, {"idle_s", x.idle_s}, {"work_lost_s", x.work_lost_s}});
  const ReplayTotals& t = r.totals;
  return {{"intervals", iv},
          {"totals", {{"tokens_trained", t.tokens_trained}, {"effective_tokens_per_s", t.effective_tokens_per_s},
                      {"planning_s", t.planning_s}, {"reconfig_s", t.reconfig_s}, {"checkpoint_s", t.checkpoint_s},
                      {"idle_s", t.idle_s}, {"work_lost_s", t.work_lost_s}, {"replans", t.replans},
                      {"simulations", t.simulations}}}};
}

ReplayResult replay_from_json(const json& j) {
  ReplayResult r;
  for (const json& x : j.at("intervals")) {
    ReplayInterval i;
    i.start_s = x.at("start_s").get<double>();
    i.end_s = x.at("end_s").get<double>();
    i.gpus_per_type = x.at("gpus_per_type").get<std::map<std::string, int>>();
    i.plan_summary = x.at("plan_summary").get<std::string>();
    i.gpus_used = x.at("gpus_used").get<int>();
    i.tokens_per_s = x.at("tokens_per_s").get<double>();
    i.tokens = x.at("tokens").get<double>();
    i.planning_s = x.at("planning_s").get<double>();
    i.reconfig_s = x.at("reconfig_s").get<double>();
    i.checkpoint_s = x.at("checkpoint_s").get<double>();
    i.idle_s = x.at("idle_s").get<double>();
    i.work_lost_s = x.at("work_lost_s").get<double>();
    r.intervals.push_back(std::move(i));
  }
  const json& t = j.at("totals");
  r.totals.tokens_trained = t.at("tokens_trained").get<double>();
  r.totals.effective_tokens_per_s = t.at("effective_tokens_per_s").get<double>();
  r.totals.planning_s = t.at("planning_s").get<double>();
  r.totals.reconfig_s = t.at("reconfig_s").get<double>();
  r.totals.checkpoint_s = t.at("checkpoint_s").get<double>();
  r.totals.idle_s = t.at("idle_s").get<double>();
  r.totals.work_lost_s = t.at("work_lost_s").get<double>();
  r.totals.replans = t.at("replans").get<int>();
  r.totals.simulations = t.at("simulations").get<int>();
  return r;
}

// --- HDF5 ---

std::string replay_group(const ExperimentCell& c) { return "/replay/" + std::to_string(c.block) + "/" + c.planner; }

void write_comparisons(h5::File& f, const std::vector<CellResult>& results) {
  using h5::ColumnType;
  h5::Table t(f, "/comparisons",
              {{"cell", ColumnType::Int64, "1"},           {"block", ColumnType::Int64, "1"},
               {"cluster", ColumnType::String, "-"},       {"gpus", ColumnType::Int64, "1"},
               {"gpu_types", ColumnType::String, "-"},     {"model", ColumnType::String, "-"},
               {"moe", ColumnType::Bool, "-"},             {"global_batch", ColumnType::Int64, "1"},
               {"seed", ColumnType::Int64, "1"},           {"planner", ColumnType::String, "-"},
               {"has_plan", ColumnType::Bool, "-"},        {"oom", ColumnType::Bool, "-"},
               {"tokens_per_s", ColumnType::Float64, "1/s"}, {"iteration_time_s", ColumnType::Float64, "s"},
               {"predicted_iteration_time_s", ColumnType::Float64, "s"},
               {"peak_memory_gib", ColumnType::Float64, "GiB"}, {"planning_time_s", ColumnType::Float64, "s"},
               {"evaluations", ColumnType::Int64, "1"},    {"own_evaluations", ColumnType::Int64, "1"},
               {"search_complete", ColumnType::Bool, "-"}, {"reason", ColumnType::String, "-"},
               {"plan", ColumnType::String, "-"},          {"plan_yaml", ColumnType::String, "-"}});
  std::vector<h5::Row> rows;
  const auto i64 = [](auto v) { return static_cast<std::int64_t>(v); };
  for (const CellResult& r : results) {
    if (!r.comparison) continue;
    const ExperimentCell& c = r.cell;
    const ComparisonOutcome& o = *r.comparison;
    rows.push_back({i64(c.index), i64(c.block), c.cluster, i64(o.gpus), o.gpu_types, c.model, o.moe, i64(c.global_batch),
                    i64(c.seed), o.label, o.has_plan, o.oom, o.tokens_per_s, o.iteration_time_s,
                    o.predicted_iteration_time_s, o.peak_memory_gib, o.planning_time_s, i64(o.evaluations),
                    i64(o.own_evaluations), o.search_complete, o.reason, o.plan, o.plan_yaml});
  }
  t.append(rows);
}

void write_replays(h5::File& f, const Experiment& x, const std::vector<CellResult>& results) {
  using h5::ColumnType;
  h5::Table t(f, "/replays",
              {{"cell", ColumnType::Int64, "1"},         {"block", ColumnType::Int64, "1"},
               {"trace", ColumnType::String, "-"},       {"model", ColumnType::String, "-"},
               {"global_batch", ColumnType::Int64, "1"}, {"planner", ColumnType::String, "-"},
               {"tokens_trained", ColumnType::Float64, "tokens"},
               {"effective_tokens_per_s", ColumnType::Float64, "1/s"},
               {"planning_s", ColumnType::Float64, "s"}, {"reconfig_s", ColumnType::Float64, "s"},
               {"checkpoint_s", ColumnType::Float64, "s"}, {"idle_s", ColumnType::Float64, "s"},
               {"work_lost_s", ColumnType::Float64, "s"}, {"replans", ColumnType::Int64, "1"},
               {"group", ColumnType::String, "-"}});
  std::vector<h5::Row> rows;
  const auto i64 = [](auto v) { return static_cast<std::int64_t>(v); };
  for (const CellResult& r : results) {
    if (!r.replay) continue;
    const ExperimentCell& c = r.cell;
    const ReplayTotals& s = r.replay->totals;
    rows.push_back({i64(c.index), i64(c.block), x.replays[static_cast<std::size_t>(c.block)].trace, c.model,
                    i64(c.global_batch), c.planner, s.tokens_trained, s.effective_tokens_per_s, s.planning_s,
                    s.reconfig_s, s.checkpoint_s, s.idle_s, s.work_lost_s, i64(s.replans), replay_group(c)});
    write_replay_tables(f, replay_group(c), *r.replay);
  }
  t.append(rows);
}

// The clusters and models the cells use, as the YAML of their full configuration: (kind, name, yaml) in
// name order.
std::vector<std::array<std::string, 3>> inputs_of(const Experiment& x) {
  std::vector<std::array<std::string, 3>> out;
  for (const auto& [name, c] : x.clusters) out.push_back({"cluster", name, c.to_yaml()});
  for (const auto& [name, m] : x.models) out.push_back({"model", name, m.to_yaml()});
  return out;
}

void write_inputs(h5::File& f, const Experiment& x) {
  h5::Table t(f, "/inputs", {{"kind", h5::ColumnType::String, "-"}, {"name", h5::ColumnType::String, "-"},
                             {"yaml", h5::ColumnType::String, "-"}});
  std::vector<h5::Row> rows;
  for (const auto& [kind, name, yaml] : inputs_of(x)) rows.push_back({kind, name, yaml});
  t.append(rows);
}

// Every setting a cell depends on, one line per cell, and the full configuration of every cluster and
// model: compared on resume, so that a changed file never mixes with the shards of the old one.
std::string options_text(const Experiment& x, const std::vector<ExperimentCell>& cells) {
  std::ostringstream s;
  s.precision(17);
  s << "experiment " << x.name << ", " << cells.size() << " cells\n";
  for (const ExperimentCell& c : cells) {
    s << c.index << ": " << c.describe();
    if (c.kind == CellKind::Comparison) {
      const ExperimentBudget& b = x.comparisons[static_cast<std::size_t>(c.block)].budget;
      s << ", budget " << b.evaluations << " evaluations, wall " << b.wall_s << " s";
    } else {
      const ReplayBlock& r = x.replays[static_cast<std::size_t>(c.block)];
      s << ", trace " << r.trace << " format '" << r.load.format << "' nodes " << r.load.nodes << " load scale "
        << r.load.load_scale << " window " << r.load.window_start_s << ".." << r.load.window_end_s << " cluster '"
        << r.link_cluster << "' until " << r.options.until_s << " coalesce " << r.options.coalesce_s << " planning "
        << (r.options.fixed_planning_s ? std::to_string(*r.options.fixed_planning_s) : "measured") << " checkpoint "
        << r.options.checkpoint_interval_s << " restart " << r.options.restart_s << " storage "
        << r.options.storage_bandwidth << " switch " << (r.options.switch_rule == SwitchRule::Always ? "always" : "break-even")
        << (r.options.pool_rule == PoolRule::All ? std::string()
                                                  : std::string(" pool ") + pool_rule_name(r.options.pool_rule) + " window " +
                                                        std::to_string(r.options.volatility_window_s))
        << " warm start " << r.warm_start << ", budget " << r.budget.evaluations << " evaluations, wall "
        << r.budget.wall_s << " s";
    }
    s << "\n";
  }
  for (const auto& [kind, name, yaml] : inputs_of(x)) s << kind << " " << name << ":\n" << yaml << "\n";
  // The learned planner's weights by content (the same file on every host of an MPI run, whatever its path).
  if (std::any_of(cells.begin(), cells.end(), [](const ExperimentCell& c) { return c.planner == "arachne"; }))
    s << "policy weights fnv1a " << file_fingerprint(default_policy_path()) << "\n";
  return s.str();
}

}  // namespace

CellResult run_cell(const Experiment& x, const ExperimentCell& cell, const GpuCatalog& catalog) {
  CellResult r;
  r.cell = cell;
  if (cell.kind == CellKind::Comparison) r.comparison = run_comparison(x, cell);
  else r.replay = run_replay_cell(x, cell, catalog);
  return r;
}

std::string cell_result_to_json(const CellResult& r) {
  json j{{"cell", cell_to_json(r.cell)}};
  if (r.comparison) j["comparison"] = comparison_to_json(*r.comparison);
  if (r.replay) j["replay"] = replay_to_json(*r.replay);
  return j.dump();
}

CellResult cell_result_from_json(const std::string& text) {
  try {
    const json j = json::parse(text);
    CellResult r;
    r.cell = cell_from_json(j.at("cell"));
    if (j.contains("comparison")) r.comparison = comparison_from_json(j.at("comparison"));
    if (j.contains("replay")) r.replay = replay_from_json(j.at("replay"));
    return r;
  } catch (const json::exception& e) {
    throw std::runtime_error(std::string("malformed experiment shard: ") + e.what());
  }
}

std::string experiment_h5_path(const std::string& out_dir) { return (std::filesystem::path(out_dir) / "experiment.h5").string(); }
std::string experiment_summary_path(const std::string& out_dir) { return (std::filesystem::path(out_dir) / "summary.md").string(); }

void write_experiment_h5(const std::string& path, const Experiment& x, const std::vector<CellResult>& results,
                         const h5::RunInfo& info) {
  h5::write_h5_atomically(path, info, [&](h5::File& f) {
    write_inputs(f, x);
    write_comparisons(f, results);
    write_replays(f, x, results);
  });
}

std::vector<CellResult> run_experiment(const Experiment& x, const std::string& out_dir, const GpuCatalog& catalog,
                                       const h5::RunInfo& info,
                                       const std::function<void(const ExperimentProgress&)>& progress,
                                       WorkGroup& group) {
  std::filesystem::create_directories(out_dir);
  const std::vector<ExperimentCell> cells = expand(x);
  const std::string h5_path = experiment_h5_path(out_dir);
  const auto make = [&](long i) { return cell_result_to_json(run_cell(x, cells[static_cast<std::size_t>(i)], catalog)); };
  const auto report = [&](const ShardProgress& p) {  // on rank 0, for the cells of every rank
    if (!progress) return;
    const CellResult last = cell_result_from_json(*p.text);
    progress({p.done, p.resumed, p.total, p.elapsed_s, &last});
  };
  ShardProgress final_progress;
  const std::vector<std::string> texts = run_shards({h5_path, static_cast<long>(cells.size()), 1, options_text(x, cells)},
                                                    make, report, &final_progress, group);
  if (group.rank() != 0) return {};
  if (progress && final_progress.done == final_progress.resumed)  // nothing left to run: say so once
    progress({final_progress.done, final_progress.resumed, final_progress.total, 0, nullptr});
  std::vector<CellResult> results;
  for (const std::string& t : texts) results.push_back(cell_result_from_json(t));
  write_experiment_h5(h5_path, x, results, info);
  write_text_atomically(experiment_summary_path(out_dir), experiment_summary(x, results));
  return results;
}

}  // namespace arachne::planner
