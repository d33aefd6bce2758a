// The oracle's complete search: branch and bound over the declared space (planner/oracle/README.md), every
// candidate either simulated or proven no better than the incumbent by an admissible lower bound
// (planner/oracle/lower_bound.h) or proven out of memory. Candidates are simulated in ascending bound order
// within each buffer of kBufferSize, in fixed batches on all threads; the result does not depend on the
// number of threads (a batch is pruned against the incumbent it starts with, and results are merged in
// candidate order, ties to the earlier candidate).
#pragma once
#include <optional>
#include <string>

#include "planner/planner.h"

namespace arachne::planner {

struct Incumbent {
  std::optional<Plan> plan;
  double time_s = 0;  // simulated iteration time of plan (meaningless without a plan)
  double bound() const;  // time_s, or +inf without a plan
};

struct ExhaustiveStats {
  long structures = 0;         // structures (multisets of pipeline shapes) searched
  long space_structures = 0;   // structures of the declared space (searched or not; 0 when not all listed)
  long candidates = 0;         // complete plans reached by the enumeration (bounded individually)
  long pruned_by_bound = 0;    // plans and option sets discarded because their bound >= incumbent
  long proven_oom = 0;         // plans discarded by a memory proof
  long simulated = 0;          // simulator evaluations
  long simulated_oom = 0;      // of which out of memory
  bool complete = false;       // every plan of the space simulated or proven no better
  std::string incomplete_reason;
};

struct ExhaustiveLimits {
  long max_simulations = 0;  // 0: none
  double wall_s = 0;         // 0: none
  int threads = 1;
  // The reduction lift's floors over every spread of the holders where the topology allows them
  // (LowerBound::placement_free); false: always the per-placement-class floors (tests compare the two).
  bool spread_floors = true;
};

// Searches the declared space of request.cluster for the fastest plan, starting from (and improving)
// `incumbent`. `global` is the global batch.
ExhaustiveStats exhaustive_search(const PlanRequest& request, long global, const ExhaustiveLimits& limits,
                                  Incumbent& incumbent);

// Threads the oracle uses by default: std::thread::hardware_concurrency(), at least 1.
int default_oracle_threads();

}  // namespace arachne::planner
