// The planner interface: request = available cluster snapshot + model + global batch + budget; result =
// a plan (or the reason there is none), the planner's own predicted iteration time, its wall time and the
// evaluations it used. Planners are found by name in the registry (planner/registry.h).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "sim/hw/topology.h"
#include "sim/model/model.h"
#include "sim/plan/plan.h"

namespace arachne::planner {

// What a baseline searches with: its own analytic cost model (as in its paper), or the simulator
// (`arachne plan --cost-model simulator`), to tell a better search space from a better cost model.
enum class CostModel { Own, Simulator };

// Where the learned planner takes its templates from: its policy, or - for the ablations that show what the
// policy adds, everything else equal - seeded random walks over the template grammar, the hand-written
// heuristic generator, or the whole restricted enumeration (planner/template/enumerate.h).
enum class TemplateSource { PolicyAndHeuristic, Policy, Random, Heuristic, Exhaustive };

struct PlanRequest {
  const Cluster* cluster = nullptr;
  const Topology* topo = nullptr;
  const ModelConfig* model = nullptr;
  long global_batch = 0;
  // Simulator evaluations (deterministic). Pricing a candidate with a planner's own analytic model is free:
  // the baselines search their whole own-model space, as their public code does, under their own time caps.
  long budget_evaluations = 2000;
  double budget_wall_s = 0;        // optional wall-clock cap (0: none)
  std::uint64_t seed = 0;
  CostModel cost_model = CostModel::Own;
  // FlashFlex: our hill-climbing refinement after the public code's search (`--flashflex-refine`; off = the
  // public code, whose refinement branch is dead).
  bool flashflex_refine = false;
  // Re-planning (replay): the plan that ran before this snapshot and the cluster it ran on (GPU ids refer
  // to it). The learned planner tries its template first (warm start); the others ignore it.
  const Plan* previous_plan = nullptr;
  const Cluster* previous_cluster = nullptr;
  // The learned planner: templates decoded by beam search, plans completed per template, best-priced plans
  // simulated (at most budget_evaluations), and the policy's weights file (empty: the shipped one).
  int arachne_beam = 8;
  int arachne_completions = 2;
  int arachne_simulate = 3;
  int arachne_refine = 1;  // rounds of local moves from the best-priced templates (planner/template/neighbors.h;
                           // more on small clusters: arachne_planner.h kArachneExtendMaxGpus)
  std::string arachne_policy;
  // The template source (ablations: `arachne plan --arachne-templates`), and the most templates the
  // exhaustive source enumerates (the cap is reported as search_complete = false when it cuts the walk).
  TemplateSource arachne_templates = TemplateSource::PolicyAndHeuristic;
  long arachne_exhaustive_cap = 2000;
};

struct PlanResult {
  std::optional<Plan> plan;      // empty: no feasible plan
  std::string reason;            // why there is no plan
  double predicted_iteration_time_s = 0;  // the planner's own cost model
  double planning_time_s = 0;    // wall time (measured)
  long evaluations = 0;          // simulator evaluations (what the budget counts)
  long own_model_evaluations = 0;  // candidates priced by the planner's own analytic model (not budgeted)
  // false when a budget or time cap cut the search short: for a baseline under its own cost model, whether
  // its whole own-model space (and, for AMP, its top-k trials) was covered.
  bool search_complete = true;
  // An extension of ours beyond the public code that produced the plan ("refine": FlashFlex's hill climbing);
  // empty for the planner as its authors run it. Output labels the row `<planner>+<extension>`.
  std::string extension;
};

class Planner {
 public:
  virtual ~Planner() = default;
  virtual std::string name() const = 0;
  virtual PlanResult plan(const PlanRequest& request) = 0;
};

// A new planner by name; throws InputError(where = "--planner", reason) for an unknown name.
std::unique_ptr<Planner> make_planner(const std::string& name);

}  // namespace arachne::planner
