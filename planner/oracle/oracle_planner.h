// `oracle`: the reference planner every other planner is measured against (DESIGN.md "Planners"). It has no
// cost model of its own: every answer is a plan the simulator ran (planner::Evaluator, memory enforced).
// Its space and what lies outside it are written down in planner/oracle/README.md; the search:
//  Phase 0 (unless constructed without it): the plans amp, metis, flashflex and sailor return (own cost model
//    with the remaining budget for their simulations, e.g. AMP's trials; then the simulator as cost model on an
//    eighth of what is left; each gets an eighth of the wall time left) are simulated.
//  Phase 1: the Megatron shorthand grid (tp, pp | layers, dp, micro-batch 1/2/4/8, EP for MoE) on the whole
//    cluster and on each GPU type's nodes.
//  Phase 2 (heuristic): structures up to symmetry priced by the Profiler (planner/common/profile.h) with
//    min-max layer partitions and analytic batch splits, simulated in ascending predicted time - at most a
//    quarter of the budget (and 200) when phase 3 follows, the whole budget otherwise. Predictions only
//    order this phase; they never prune anything.
//  Phase 3 (clusters of <= 16 GPUs): branch and bound over the whole declared space
//    (planner/oracle/exhaustive_search.h) from the best plan of phases 0-2, pruning only with admissible
//    lower bounds on the simulated time and memory proofs (planner/oracle/lower_bound.h), simulating on all
//    threads with a result independent of their number.
// search_complete is true only when phase 3 finished: every plan of the declared space was simulated or
// proven no better (bound >= incumbent) or out of memory. A budget, a wall-clock cap, an enumeration cap or
// a cluster above 16 GPUs leaves it false: the plan is then the best found, not an upper bound on what the
// space holds.
#pragma once
#include <string>

#include "planner/planner.h"

namespace arachne::planner {

class OraclePlanner : public Planner {
 public:
  // seed_with_baselines: phase 0 (the baselines' plans simulated first). Off, the oracle stands on its own
  // enumeration - what the oracle-never-beaten test checks on the clusters it enumerates completely.
  // threads: simulations in parallel in the complete search (0: std::thread::hardware_concurrency()); the
  // result does not depend on it.
  explicit OraclePlanner(bool seed_with_baselines = true, int threads = 0) : seed_(seed_with_baselines), threads_(threads) {}
  std::string name() const override { return "oracle"; }
  PlanResult plan(const PlanRequest& request) override;

  // Statistics of the last plan() call (for reports and tests).
  struct Stats {
    long structures = 0;          // structures enumerated (phases 2 and 3, up to symmetry)
    long candidates = 0;          // priced / bounded candidates (all phases)
    long simulated = 0;           // simulator evaluations (all phases)
    long exhaustive_simulated = 0;  // of which in the complete search
    long exhaustive_structures = 0;  // structures the complete search reached
    long space_structures = 0;       // of the structures of its declared space (0: not enumerated)
    long pruned_by_bound = 0;     // complete search: plans or option sets proven no better by their bound
    long proven_oom = 0;          // complete search: plans proven out of memory
    bool enumeration_capped = false;
    std::string incomplete_reason;  // why search_complete is false (empty when complete)
  };
  const Stats& stats() const { return stats_; }

 private:
  bool seed_;
  int threads_;
  Stats stats_;
};

}  // namespace arachne::planner
