// Replay of a job over an availability trace (DESIGN.md, "Availability traces and replay").
//
// At t = 0 and at every change (changes closer than `coalesce_s` merged into the first), the planner
// replans on the available snapshot through a callback (the simulator never knows planners). Charged as
// downtime: planning time on every replan (the callback's measured time, or a fixed charge), and on a
// change after t = 0 that changes the running plan, a reconfiguration (checkpoint load = model state bytes
// / storage bandwidth, plus a restart). The job checkpoints every `checkpoint_interval_s` of training (each
// save costs state bytes / storage bandwidth); when GPUs it uses disappear, the work since its last
// checkpoint is lost; when GPUs appear, it checkpoints, then reconfigures. With no feasible plan it waits.
// Plans are simulated once per distinct snapshot (cached).
#pragma once
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "sim/hw/cluster.h"
#include "sim/model/model.h"
#include "sim/plan/plan.h"
#include "sim/trace/availability.h"

namespace arachne {

struct ReplanOutcome {
  std::optional<Plan> plan;  // empty: nothing feasible on this snapshot
  double planning_time_s = 0;
  std::string reason;        // when no plan
};
// The plan the job ran last, on the snapshot it was planned for (both null before any plan has run): what a
// planner may warm-start from. A snapshot seen before reuses its cached plan without calling the planner,
// so this is not always the plan the callback returned last.
struct LastPlan {
  const Plan* plan = nullptr;
  const Cluster* cluster = nullptr;
};
using ReplanCallback = std::function<ReplanOutcome(const Cluster& snapshot, long global_batch, const LastPlan& last)>;

// When a running job whose GPUs all remain after a change takes the replan's new plan:
//   Always    - at once, every time the planner returns a different plan;
//   BreakEven - once keeping its plan has cost as many tokens as switching does (the deterministic
//               ski-rental rule, 2-competitive without knowing when the next change comes: Karlin, Manasse,
//               McGeoch & Owicki, "Competitive randomized algorithms for non-uniform problems", SODA 1990):
//               with v_old and v_new the plans' throughputs and C the time the switch costs (checkpoint save
//               + reconfiguration), after C v_new / (v_new - v_old) seconds, if no change comes first (the
//               interval is then split in two); never when v_new <= v_old.
// Under both, the job keeps its plan when the new snapshot has no feasible plan.
enum class SwitchRule { Always, BreakEven };

// Which GPUs the job offers its planner at a replan:
//   All    - every available GPU;
//   Stable - also the pools without the nodes that left most often lately (a node leaves at a replan where it
//            offers fewer GPUs than at the one before), and it runs the plan that trains the most in
//            expectation: v (1 - L r), v its tokens/s, r the departures over the trailing
//            `volatility_window_s` that took some node the plan uses, per second (a departure time counts once
//            however many of the plan's nodes it took: spot preemptions come in waves, and a wave that takes
//            the nodes a plan leaves idle takes some it uses too), L the training one departure costs (half a
//            checkpoint interval of lost work - half the window without checkpoints - plus the checkpoint
//            load and restart). Pools: without the nodes of the k highest departure counts, k = 1 ..
//            kMaxVolatilityPools - 1. Each pool is planned (and its planning time charged) like a snapshot.
// A plan that uses a volatile node loses, at each of its departures, the work since the last checkpoint
// (the cost of preemptions that Bamboo, Thorpe et al. NSDI'23, and Oobleck, Jang et al. SOSP'23, avoid by
// redundancy instead).
enum class PoolRule { All, Stable };
inline constexpr int kMaxVolatilityPools = 4;
// The rules' names ("all", "stable"), for flags and files; nullopt for another name.
std::optional<PoolRule> pool_rule_named(const std::string& name);
const char* pool_rule_name(PoolRule rule);
inline constexpr const char* kPoolRuleNames = "all, stable";

struct ReplayOptions {
  double until_s = -1;                      // end of the replay (-1: the trace's end)
  double coalesce_s = 0;                    // changes closer than this are merged
  std::optional<double> fixed_planning_s;   // charge this per replan instead of the measured time
  double checkpoint_interval_s = 0;         // 0: no periodic checkpoints
  double storage_bandwidth = 2e9;           // bytes/s, checkpoint save and load
  double restart_s = 60;                    // process restart on reconfiguration
  const Cluster* link_template = nullptr;   // node groups matched by GPU type for link properties
  SwitchRule switch_rule = SwitchRule::BreakEven;
  PoolRule pool_rule = PoolRule::All;
  double volatility_window_s = 6 * 3600.0;  // PoolRule::Stable's trailing window
};

// The checkpoint interval is 0 (none) or within [limits::kMinCheckpointIntervalS, kTraceSeconds.max];
// throws InputError(where, ...) otherwise.
void check_checkpoint_interval(double seconds, const std::string& where);
// PoolRule::Stable's window is more than 0 seconds; throws InputError(where, ...) otherwise.
void check_volatility_window(double seconds, const std::string& where);

struct ReplayInterval {
  double start_s = 0, end_s = 0;
  std::map<std::string, int> gpus_per_type;  // available
  std::string plan_summary;                  // "" when idle
  int gpus_used = 0;
  double tokens_per_s = 0;                   // while training
  double tokens = 0;                         // kept (after losses at its end)
  double planning_s = 0, reconfig_s = 0, checkpoint_s = 0, idle_s = 0;
  double work_lost_s = 0;                    // training time lost at the end of this interval
};

struct ReplayTotals {
  double tokens_trained = 0;
  double effective_tokens_per_s = 0;  // tokens_trained / replayed span
  double planning_s = 0, reconfig_s = 0, checkpoint_s = 0, idle_s = 0;
  double work_lost_s = 0;
  int replans = 0;
  int simulations = 0;  // distinct snapshots simulated (cache misses)
};

struct ReplayResult {
  std::vector<ReplayInterval> intervals;
  ReplayTotals totals;
};

// The cluster offered by `gpus[i]` GPUs on each trace node i (nodes offering none are left out, the rest
// keep trace order). Links: the link template's node group of the same GPU type, else the catalog's default
// node. `node_of_trace` (optional) receives, per snapshot node, its trace node index.
Cluster snapshot_cluster(const AvailabilityTrace& trace, const std::vector<int>& gpus, const GpuCatalog& catalog,
                         const Cluster* link_template, std::vector<int>* node_of_trace = nullptr);

// Checkpoint size: bf16 weights plus fp32 master weights and both Adam moments, 14 bytes per parameter
// (Rajbhandari et al. 2020 §3: 16 with fp16 gradients, which are not checkpointed).
double checkpoint_bytes(const ModelConfig& model);

ReplayResult replay(const AvailabilityTrace& trace, const GpuCatalog& catalog, const ModelConfig& model,
                    long global_batch, const ReplanCallback& replan, const ReplayOptions& options);

}  // namespace arachne
