// `arachne evaluate`: the learned planner measured against the baselines, the oracle (on small clusters)
// and its own ablations, on sampled configurations (by default of held-out GPU-type families, never seen in
// training; planner/arachne/config_sampler.h).
//
// Steps:
//   1. configurations [0, configs) of the stream `seed` drawn by the gen-data sampler;
//   2. per configuration, every planner (and every ablation: the arachne planner with another template
//      source, everything else equal) run and its plan simulated, one cell each (planner/run_planner.h);
//      the oracle only on clusters of at most oracle_max_gpus GPUs;
//   3. each finished configuration saved as a JSON shard in DIR/evaluation.h5.shards/ (planner/arachne/
//      shards.h): kill -9 loses only the configurations in flight, a rerun with the same options computes
//      only the missing ones; the shards are kept, so a rerun with more --configs extends the evaluation;
//   4. DIR/evaluation.h5 assembled from the shards in index order, then DIR/summary.md from the cells.
// A cell depends only on (options, seed, index) apart from its planning wall time - unless a wall-clock
// cap (budget_wall_s) cuts a search, which makes that search depend on the machine and its load.
//
// DIR/evaluation.h5 (h5py reads it without project code):
//   root attributes  program_version, command_line, seed, config_yaml (the options text)
//   /configs  config, family, gpus, model, moe, global_batch, cluster_yaml (Cluster::to_yaml)
//   /cells    config, gpus, family, model, moe, global_batch, planner (row label: "sailor",
//             "arachne[random]"), template_source ("policy", "random", "heuristic", "exhaustive"; "-" for
//             the other planners), has_plan, oom, tokens_per_s (simulated; NaN without a feasible plan),
//             simulated_s, predicted_s (the planner's own model), peak_memory_gib, planning_s (wall),
//             evaluations (simulator), own_evaluations (own model), search_complete (false: a budget,
//             time or enumeration cap cut the search), reason (why there is no plan), template (the plan's
//             structural template in text form; "-" outside the template space), plan (one-line summary),
//             plan_yaml
//   rows ordered by config, then planner order (--planners, then the ablations).
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "planner/arachne/config_sampler.h"
#include "planner/common/shards.h"
#include "planner/planner.h"
#include "sim/io/hdf5_writer.h"

namespace arachne::planner {

// The five baselines the learned planner is compared with (each ratio is to the best of those present).
inline constexpr std::array<const char*, 5> kBaselines{"megatron", "amp", "metis", "flashflex", "sailor"};
inline bool is_baseline(std::string_view planner) {
  return std::find(kBaselines.begin(), kBaselines.end(), planner) != kBaselines.end();
}

struct EvaluateOptions {
  std::string out_dir;
  long configs = 0;
  std::uint64_t seed = 0;
  Split split = Split::HeldOut;
  int threads = 1;
  ConfigSamplerOptions sampler;
  std::vector<std::string> planners = {"arachne", "megatron", "amp", "metis", "flashflex", "sailor"};  // registry names
  std::vector<TemplateSource> ablations = {TemplateSource::Policy, TemplateSource::Random, TemplateSource::Heuristic,
                                           TemplateSource::Exhaustive};
  int oracle_max_gpus = 4;
  // Budgets and the learned planner's settings, the same for every cell (cluster, model and batch unset).
  PlanRequest request;
  // Every option a cell depends on, as text: written beside the shards (compared on resume) and into the
  // file's metadata.
  std::string options_text;
};

struct CellRecord {
  long config = 0;
  int gpus = 0;
  std::string family;
  std::string model;
  bool moe = false;
  long global_batch = 0;
  std::string planner;          // row label
  std::string template_source;  // "-" for planners other than arachne
  bool has_plan = false;
  bool oom = false;
  double tokens_per_s = 0;      // NaN without a feasible plan
  double simulated_s = 0;       // NaN without a feasible plan
  double predicted_s = 0;       // NaN without a plan
  double peak_memory_gib = 0;   // NaN without a plan
  double planning_s = 0;
  long evaluations = 0;
  long own_evaluations = 0;
  bool search_complete = true;
  std::string reason;
  std::string template_text;
  std::string plan;
  std::string plan_yaml;
  bool feasible() const { return has_plan && !oom; }
};

struct ConfigResult {
  long config = 0;
  std::string family;
  int gpus = 0;
  std::string model;
  bool moe = false;
  long global_batch = 0;
  std::string cluster_yaml;
  std::vector<CellRecord> cells;
};

// Step 2 for one configuration. on_cell (optional) is called after each cell. Thread-safe.
ConfigResult evaluate_config(const SampledConfig& cfg, const EvaluateOptions& opt,
                             const std::function<void(const CellRecord&)>& on_cell = {});

using EvaluateProgress = ShardProgress;  // planner/common/shards.h

// Steps 1-4. Throws InputError("--out", ...) when the shard directory holds a run of other options.
// Returns the configurations evaluated (resumed ones included).
std::vector<ConfigResult> run_evaluation(const EvaluateOptions& opt, const GpuCatalog& catalog, const h5::RunInfo& info,
                                         const std::function<void(const CellRecord&)>& on_cell = {},
                                         const std::function<void(const EvaluateProgress&)>& progress = {});

// The output files of a run in `out_dir`.
std::string evaluation_h5_path(const std::string& out_dir);
std::string evaluation_summary_path(const std::string& out_dir);

// JSON shards (exact round trip of every double; NaN as null).
std::string config_result_to_json(const ConfigResult& r);
ConfigResult config_result_from_json(const std::string& text);  // throws std::runtime_error

void write_evaluation_h5(const std::string& path, const std::vector<ConfigResult>& results, const h5::RunInfo& info);
// The /cells table of a file written by write_evaluation_h5, in row order. Throws std::runtime_error.
std::vector<CellRecord> read_evaluation_cells(const std::string& path);

// DIR/summary.md (planner/arachne/evaluation_summary.cpp): per-configuration ratios to the best baseline;
// dense and MoE separately: geometric mean and minimum of the ratios, ratio to the oracle where its search
// completed; planning time per planner binned by cluster size; where arachne loses.
std::string evaluation_summary(const std::vector<ConfigResult>& results, const EvaluateOptions& opt);

}  // namespace arachne::planner
