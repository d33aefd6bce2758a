// `arachne experiment`: a planner comparison declared in one YAML file (configs/experiments/*.yaml) and
// run as a list of cells, each recorded in one HDF5 file (README "Experiments" has the schema).
//
// Steps:
//   1. load_experiment: parse the file, check every key, load every cluster, model, trace and planner name
//      it names (bad input: InputError "file:line: field", before any cell runs);
//   2. expand: the cells in their fixed order - comparison blocks in file order, within a block clusters,
//      then models, then global batches, then seeds, then cost models, then planners (innermost); then replay
//      blocks in file
//      order, one cell per planner;
//   3. run_experiment: each cell run (comparison: the planner on the cluster, its plan simulated; replay:
//      the planner driven over the trace) and saved as a JSON shard in DIR/experiment.h5.shards/ (kill -9
//      loses only the cells in flight; a rerun computes only the missing cells); under MPI rank 0 hands
//      the cells out to the ranks as they become free, each rank keeping the shards of its own;
//   4. DIR/experiment.h5 assembled from the shards in cell order, then DIR/summary.md (rank 0 alone,
//      from every rank's records).
// A cell depends only on the experiment file and its index, apart from its planning wall time - unless a
// wall-clock budget cuts a search, or a replay charges the measured planning time (planning_time:
// measured), which makes the cell depend on the machine and its load.
//
// DIR/experiment.h5 (h5py reads it without project code):
//   root attributes  program_version, command_line, seed (the file's top-level seed), config_yaml (the
//                    experiment file's text)
//   /inputs          kind ("cluster" | "model"), name (as written in the file), yaml (the full configuration,
//                    Cluster::to_yaml / ModelConfig::to_yaml), in name order per kind
//   /comparisons     one row per comparison cell, in cell order: cell, block, cluster (as written), gpus,
//                    gpu_types ("A100-80,V100-32"), model, moe, global_batch, seed, planner (row label),
//                    has_plan, oom, tokens_per_s and iteration_time_s (simulated; NaN without a feasible plan),
//                    predicted_iteration_time_s (the planner's own model; NaN without a plan),
//                    peak_memory_gib, planning_time_s (wall), evaluations (simulator), own_evaluations,
//                    search_complete, reason (why there is no plan), plan (one-line summary), plan_yaml
//   /replays         one row per replay cell, in cell order: cell, block, trace, model, global_batch,
//                    planner, the totals (tokens_trained, effective_tokens_per_s, planning_s, reconfig_s,
//                    checkpoint_s, idle_s, work_lost_s, replans) and group (where its tables are)
//   /replay/<block>/<planner>/intervals, /replay/<block>/<planner>/totals
//                    as `arachne replay --out` writes them (sim/io/replay_h5.h)
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "planner/common/work_group.h"
#include "planner/planner.h"
#include "sim/hw/cluster.h"
#include "sim/io/hdf5_writer.h"
#include "sim/model/model.h"
#include "sim/trace/replay.h"
#include "sim/trace/trace_formats.h"

namespace arachne::planner {

struct ExperimentBudget {
  long evaluations = 2000;  // simulator evaluations per planner run (per replan in a replay)
  double wall_s = 0;        // wall-clock cap per planner run, seconds (0: none)
};

// A matrix: every cluster x model x global batch x seed x planner.
struct ComparisonBlock {
  std::vector<std::string> clusters;      // as written: path, bundled name or spec
  std::vector<std::string> models;        // path or bundled name
  std::vector<long> global_batches;       // 0: the model's
  std::vector<std::uint64_t> seeds;
  std::vector<std::string> planners;      // registry names
  ExperimentBudget budget;
  // What the baselines price candidates with: each cost model is another axis of the matrix, between seeds and
  // planners, for the five baselines only (a baseline searching with the simulator is the row
  // "<name>[simulator]", not a reference of the ratios).
  std::vector<CostModel> cost_models{CostModel::Own};
};

// One trace replayed with each planner.
struct ReplayBlock {
  std::string trace;                      // as written
  std::string trace_path;                 // resolved
  TraceLoadOptions load;                  // format, nodes, load scale, window, seed
  std::string link_cluster;               // optional cluster file for link properties ("" : catalog)
  std::string model;
  long global_batch = 0;                  // 0: the model's
  std::vector<std::string> planners;
  ReplayOptions options;                  // link_template is set when the cell runs
  ExperimentBudget budget;
  std::uint64_t seed = 0;
  bool warm_start = true;
};

struct Experiment {
  std::string file;   // as given
  std::string name;   // `name:`, else the file's stem
  std::string text;   // the file's bytes (root attribute config_yaml)
  std::uint64_t seed = 0;
  std::vector<ComparisonBlock> comparisons;
  std::vector<ReplayBlock> replays;
  // Inputs loaded by load_experiment, by the text that names them.
  std::map<std::string, Cluster> clusters;
  std::map<std::string, ModelConfig> models;
  std::vector<LoadedTrace> traces;                  // per replay block
  std::vector<std::optional<Cluster>> link_clusters;  // per replay block
};

enum class CellKind { Comparison, Replay };

struct ExperimentCell {
  long index = 0;
  CellKind kind = CellKind::Comparison;
  int block = 0;               // index of its block among the blocks of its kind
  std::string cluster;         // comparison: as written
  std::string model;
  long global_batch = 0;       // resolved (never 0)
  std::uint64_t seed = 0;
  std::string planner;
  CostModel cost_model = CostModel::Own;  // comparison cells
  std::string describe() const;  // one line: what the cell runs
};

// What a comparison cell measured.
struct ComparisonOutcome {
  int gpus = 0;
  std::string gpu_types;
  bool moe = false;
  std::string label;                    // row label (planner/run_planner.h)
  bool has_plan = false;
  bool oom = false;
  double tokens_per_s = 0;              // NaN without a feasible plan
  double iteration_time_s = 0;          // NaN without a feasible plan
  double predicted_iteration_time_s = 0;  // NaN without a plan
  double peak_memory_gib = 0;           // NaN without a plan
  double planning_time_s = 0;
  long evaluations = 0;
  long own_evaluations = 0;
  bool search_complete = true;
  std::string reason;
  std::string plan;
  std::string plan_yaml;
  bool feasible() const { return has_plan && !oom; }
};

struct CellResult {
  ExperimentCell cell;
  std::optional<ComparisonOutcome> comparison;  // kind Comparison
  std::optional<ReplayResult> replay;           // kind Replay
};

// Step 1. Throws InputError ("file:line: field" where) on bad input.
Experiment load_experiment(const std::string& path, const GpuCatalog& catalog);

// Step 2.
std::vector<ExperimentCell> expand(const Experiment& experiment);

// Runs one cell (thread-compatible; no shared state).
CellResult run_cell(const Experiment& experiment, const ExperimentCell& cell, const GpuCatalog& catalog);

struct ExperimentProgress {
  long done = 0, resumed = 0, total = 0;
  double elapsed_s = 0;
  const CellResult* last = nullptr;  // the cell just finished (null: resumed cells only)
};

// Steps 3 and 4 into out_dir (created). Throws InputError("--out", ...) when the shard directory holds
// another experiment's cells. In a group of several ranks (every rank calls it alike) rank 0 hands the
// cells out to the ranks as they become free (run_shards, planner/common/shards.h), each rank keeps the
// shards of its own cells, and rank 0 alone receives every cell's record, reports progress over every
// rank's cells and writes experiment.h5 and summary.md - the files a single process writes. Returns every
// result on rank 0, nothing on the others.
std::vector<CellResult> run_experiment(const Experiment& experiment, const std::string& out_dir,
                                       const GpuCatalog& catalog, const h5::RunInfo& info,
                                       const std::function<void(const ExperimentProgress&)>& progress = {},
                                       WorkGroup& group = single_process());

// The output files in out_dir.
std::string experiment_h5_path(const std::string& out_dir);
std::string experiment_summary_path(const std::string& out_dir);

// Shards: exact round trip of every double (NaN as null).
std::string cell_result_to_json(const CellResult& r);
CellResult cell_result_from_json(const std::string& text);  // throws std::runtime_error

void write_experiment_h5(const std::string& path, const Experiment& experiment, const std::vector<CellResult>& results,
                         const h5::RunInfo& info);

// DIR/summary.md: per comparison (cluster, model, batch, seed) each planner's tokens/s and ratio to the best
// baseline; per model, the ratios of every planner per cluster; per replay, tokens per planner.
std::string experiment_summary(const Experiment& experiment, const std::vector<CellResult>& results);

}  // namespace arachne::planner
