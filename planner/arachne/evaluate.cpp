#include "planner/arachne/evaluate.h"

#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "planner/arachne/arachne_planner.h"
#include "planner/registry.h"
#include "planner/run_planner.h"
#include "planner/template/template.h"
#include "sim/io/atomic_file.h"
#include "sim/plan/plan_yaml.h"

namespace arachne::planner {
namespace {

using nlohmann::json;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// One planner run of a configuration: the registry name and, for arachne, the template source.
struct Entrant {
  std::string planner;
  TemplateSource source = PlanRequest{}.arachne_templates;
};

// Step 2's order: --planners (the oracle only on small clusters), then the ablations.
std::vector<Entrant> entrants(const EvaluateOptions& opt, int gpus) {
  std::vector<Entrant> out;
  for (const std::string& p : opt.planners)
    if (p != "oracle" || gpus <= opt.oracle_max_gpus) out.push_back({p, PlanRequest{}.arachne_templates});
  for (TemplateSource s : opt.ablations) out.push_back({"arachne", s});
  return out;
}

// The plan's structural template in text form; "-" when it lies outside the template space.
std::string template_text_of(const Plan& plan, const Cluster& cluster) {
  try {
    return to_text(template_of(plan, cluster));
  } catch (const std::invalid_argument&) {
    return "-";
  }
}

CellRecord cell_of(const PlannerRun& run, const Entrant& e, const SampledConfig& cfg) {
  CellRecord c;
  c.config = static_cast<long>(cfg.index);
  c.gpus = cfg.cluster.total_gpus();
  c.family = cfg.family;
  c.model = cfg.model.name;
  c.moe = cfg.model.moe.has_value();
  c.global_batch = cfg.global_batch;
  c.planner = run.label;
  c.template_source = e.planner == "arachne" ? template_source_name(e.source) : "-";
  c.has_plan = run.result.plan.has_value();
  c.oom = run.sim && run.sim->oom;
  const bool timed = run.feasible();
  c.tokens_per_s = timed ? run.sim->tokens_per_s : kNaN;
  c.simulated_s = timed ? run.sim->iteration_time_s : kNaN;
  c.predicted_s = c.has_plan ? run.result.predicted_iteration_time_s : kNaN;
  c.peak_memory_gib = run.sim ? run.sim->peak_memory_gib : kNaN;
  c.planning_s = run.result.planning_time_s;
  c.evaluations = run.result.evaluations;
  c.own_evaluations = run.result.own_model_evaluations;
  c.search_complete = run.result.search_complete;
  c.reason = run.result.reason;
  c.template_text = c.has_plan ? template_text_of(*run.result.plan, cfg.cluster) : "";
  c.plan = c.has_plan ? plan_summary(*run.result.plan) : "";
  c.plan_yaml = c.has_plan ? plan_to_yaml(*run.result.plan, cfg.cluster) : "";
  return c;
}

json number_or_null(double x) { return std::isnan(x) ? json(nullptr) : json(x); }
double number_or_nan(const json& j) { return j.is_null() ? kNaN : j.get<double>(); }

json cell_to_json(const CellRecord& c) {
  return {{"planner", c.planner}, {"template_source", c.template_source}, {"has_plan", c.has_plan}, {"oom", c.oom},
          {"tokens_per_s", number_or_null(c.tokens_per_s)}, {"simulated_s", number_or_null(c.simulated_s)},
          {"predicted_s", number_or_null(c.predicted_s)}, {"peak_memory_gib", number_or_null(c.peak_memory_gib)},
          {"planning_s", c.planning_s}, {"evaluations", c.evaluations}, {"own_evaluations", c.own_evaluations},
          {"search_complete", c.search_complete}, {"reason", c.reason}, {"template", c.template_text},
          {"plan", c.plan}, {"plan_yaml", c.plan_yaml}};
}

// The per-configuration fields of a cell come from its configuration.
CellRecord cell_from_json(const json& j, const ConfigResult& r) {
  CellRecord c;
  c.config = r.config;
  c.gpus = r.gpus;
  c.family = r.family;
  c.model = r.model;
  c.moe = r.moe;
  c.global_batch = r.global_batch;
  c.planner = j.at("planner").get<std::string>();
  c.template_source = j.at("template_source").get<std::string>();
  c.has_plan = j.at("has_plan").get<bool>();
  c.oom = j.at("oom").get<bool>();
  c.tokens_per_s = number_or_nan(j.at("tokens_per_s"));
  c.simulated_s = number_or_nan(j.at("simulated_s"));
  c.predicted_s = number_or_nan(j.at("predicted_s"));
  c.peak_memory_gib = number_or_nan(j.at("peak_memory_gib"));
  c.planning_s = j.at("planning_s").get<double>();
  c.evaluations = j.at("evaluations").get<long>();
  c.own_evaluations = j.at("own_evaluations").get<long>();
  c.search_complete = j.at("search_complete").get<bool>();
  c.reason = j.at("reason").get<std::string>();
  c.template_text = j.at("template").get<std::string>();
  c.plan = j.at("plan").get<std::string>();
  c.plan_yaml = j.at("plan_yaml").get<std::string>();
  return c;
}

std::vector<h5::Column> cell_columns() {
  using h5::ColumnType;
  return {{"config", ColumnType::Int64, "1"},          {"gpus", ColumnType::Int64, "1"},
          {"family", ColumnType::String, "-"},         {"model", ColumnType::String, "-"},
          {"moe", ColumnType::Bool, "-"},              {"global_batch", ColumnType::Int64, "1"},
          {"planner", ColumnType::String, "-"},        {"template_source", ColumnType::String, "-"},
          {"has_plan", ColumnType::Bool, "-"},         {"oom", ColumnType::Bool, "-"},
          {"tokens_per_s", ColumnType::Float64, "1/s"}, {"simulated_s", ColumnType::Float64, "s"},
          {"predicted_s", ColumnType::Float64, "s"},   {"peak_memory_gib", ColumnType::Float64, "GiB"},
          {"planning_s", ColumnType::Float64, "s"},    {"evaluations", ColumnType::Int64, "1"},
          {"own_evaluations", ColumnType::Int64, "1"}, {"search_complete", ColumnType::Bool, "-"},
          {"reason", ColumnType::String, "-"},         {"template", ColumnType::String, "-"},
          {"plan", ColumnType::String, "-"},           {"plan_yaml", ColumnType::String, "-"}};
}

h5::Row cell_row(const CellRecord& c) {
  const auto i64 = [](auto x) { return static_cast<std::int64_t>(x); };
  return {i64(c.config), i64(c.gpus), c.family, c.model, c.moe, i64(c.global_batch), c.planner, c.template_source,
          c.has_plan, c.oom, c.tokens_per_s, c.simulated_s, c.predicted_s, c.peak_memory_gib, c.planning_s,
          i64(c.evaluations), i64(c.own_evaluations), c.search_complete, c.reason, c.template_text, c.plan, c.plan_yaml};
}

template <class T>
const T& cell(const h5::TableData& t, const char* column, std::size_t row) {
  return std::get<T>(t.cells[static_cast<std::size_t>(t.column(column))][row]);
}

}  // namespace

ConfigResult evaluate_config(const SampledConfig& cfg, const EvaluateOptions& opt,
                             const std::function<void(const CellRecord&)>& on_cell) {
  const Topology topo(cfg.cluster);
  ConfigResult r;
  r.config = static_cast<long>(cfg.index);
  r.family = cfg.family;
  r.gpus = cfg.cluster.total_gpus();
  r.model = cfg.model.name;
  r.moe = cfg.model.moe.has_value();
  r.global_batch = cfg.global_batch;
  r.cluster_yaml = cfg.cluster.to_yaml();
  for (const Entrant& e : entrants(opt, r.gpus)) {
    PlanRequest req = opt.request;
    req.cluster = &cfg.cluster;
    req.topo = &topo;
    req.model = &cfg.model;
    req.global_batch = cfg.global_batch;
    req.arachne_templates = e.source;
    const std::unique_ptr<Planner> planner = make_planner(e.planner);
    r.cells.push_back(cell_of(run_planner(*planner, req), e, cfg));
    if (on_cell) on_cell(r.cells.back());
  }
  return r;
}

std::string evaluation_h5_path(const std::string& out_dir) { return (std::filesystem::path(out_dir) / "evaluation.h5").string(); }
std::string evaluation_summary_path(const std::string& out_dir) { return (std::filesystem::path(out_dir) / "summary.md").string(); }

std::string config_result_to_json(const ConfigResult& r) {
  json j{{"config", r.config}, {"family", r.family}, {"gpus", r.gpus}, {"model", r.model}, {"moe", r.moe},
         {"global_batch", r.global_batch}, {"cluster_yaml", r.cluster_yaml}, {"cells", json::array()}};
  for (const CellRecord& c : r.cells) j["cells"].push_back(cell_to_json(c));
  return j.dump();
}

ConfigResult config_result_from_json(const std::string& text) {
  try {
    const json j = json::parse(text);
    ConfigResult r;
    r.config = j.at("config").get<long>();
    r.family = j.at("family").get<std::string>();
    r.gpus = j.at("gpus").get<int>();
    r.model = j.at("model").get<std::string>();
    r.moe = j.at("moe").get<bool>();
    r.global_batch = j.at("global_batch").get<long>();
    r.cluster_yaml = j.at("cluster_yaml").get<std::string>();
    for (const json& c : j.at("cells")) r.cells.push_back(cell_from_json(c, r));
    return r;
  } catch (const json::exception& e) {
    throw std::runtime_error(std::string("malformed evaluation shard: ") + e.what());
  }
}

void write_evaluation_h5(const std::string& path, const std::vector<ConfigResult>& results, const h5::RunInfo& info) {
  h5::write_h5_atomically(path, info, [&](h5::File& f) {
    using h5::ColumnType;
    h5::Table configs(f, "/configs",
                      {{"config", ColumnType::Int64, "1"}, {"family", ColumnType::String, "-"},
                       {"gpus", ColumnType::Int64, "1"}, {"model", ColumnType::String, "-"},
                       {"moe", ColumnType::Bool, "-"}, {"global_batch", ColumnType::Int64, "1"},
                       {"cluster_yaml", ColumnType::String, "-"}});
    h5::Table cells(f, "/cells", cell_columns());
    for (const ConfigResult& r : results) {
      configs.append({{static_cast<std::int64_t>(r.config), r.family, static_cast<std::int64_t>(r.gpus), r.model, r.moe,
                       static_cast<std::int64_t>(r.global_batch), r.cluster_yaml}});
      std::vector<h5::Row> rows;
      for (const CellRecord& c : r.cells) rows.push_back(cell_row(c));
      cells.append(rows);
    }
  });
}

std::vector<CellRecord> read_evaluation_cells(const std::string& path) {
  const h5::TableData t = h5::read_table(path, "/cells");
  std::vector<CellRecord> out;
  for (std::size_t i = 0; i < t.rows; ++i) {
    CellRecord c;
    c.config = static_cast<long>(cell<std::int64_t>(t, "config", i));
    c.gpus = static_cast<int>(cell<std::int64_t>(t, "gpus", i));
    c.family = cell<std::string>(t, "family", i);
    c.model = cell<std::string>(t, "model", i);
    c.moe = cell<bool>(t, "moe", i);
    c.global_batch = static_cast<long>(cell<std::int64_t>(t, "global_batch", i));
    c.planner = cell<std::string>(t, "planner", i);
    c.template_source = cell<std::string>(t, "template_source", i);
    c.has_plan = cell<bool>(t, "has_plan", i);
    c.oom = cell<bool>(t, "oom", i);
    c.tokens_per_s = cell<double>(t, "tokens_per_s", i);
    c.simulated_s = cell<double>(t, "simulated_s", i);
    c.predicted_s = cell<double>(t, "predicted_s", i);
    c.peak_memory_gib = cell<double>(t, "peak_memory_gib", i);
    c.planning_s = cell<double>(t, "planning_s", i);
    c.evaluations = static_cast<long>(cell<std::int64_t>(t, "evaluations", i));
    c.own_evaluations = static_cast<long>(cell<std::int64_t>(t, "own_evaluations", i));
    c.search_complete = cell<bool>(t, "search_complete", i);
    c.reason = cell<std::string>(t, "reason", i);
    c.template_text = cell<std::string>(t, "template", i);
    c.plan = cell<std::string>(t, "plan", i);
    c.plan_yaml = cell<std::string>(t, "plan_yaml", i);
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<ConfigResult> run_evaluation(const EvaluateOptions& opt, const GpuCatalog& catalog, const h5::RunInfo& info,
                                         const std::function<void(const CellRecord&)>& on_cell,
                                         const std::function<void(const EvaluateProgress&)>& progress) {
  std::filesystem::create_directories(opt.out_dir);
  const std::string h5_path = evaluation_h5_path(opt.out_dir);
  const auto make = [&](long i) {
    const SampledConfig cfg = draw_config(opt.sampler, catalog, opt.split, opt.seed, static_cast<std::uint64_t>(i));
    return config_result_to_json(evaluate_config(cfg, opt, on_cell));
  };
  std::vector<ConfigResult> results;
  for (const std::string& s : run_shards({h5_path, opt.configs, opt.threads, opt.options_text}, make, progress))
    results.push_back(config_result_from_json(s));
  write_evaluation_h5(h5_path, results, info);
  write_text_atomically(evaluation_summary_path(opt.out_dir), evaluation_summary(results, opt));
  return results;
}

}  // namespace arachne::planner
