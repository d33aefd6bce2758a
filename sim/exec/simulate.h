// One simulated training iteration of a plan: the plan is lowered into compute tasks and network flows per
// micro-batch under its pipeline schedule, run on the event engine and flow network, and reported.
#pragma once
#include <cstdint>

#include "sim/exec/sim_result.h"
#include "sim/hw/topology.h"
#include "sim/model/model.h"
#include "sim/plan/plan.h"

namespace arachne {

struct SimOptions {
  std::uint64_t seed = 0;
  bool record_timeline = false;
  bool ignore_memory = false;  // simulate even when out of memory
  // Exact shortcuts (tests compare each with the full simulation and require identical output):
  //  - max-min rates recomputed only for the flows coupled to a change through links that can fill
  //    (sim/net/flow_network.h); false recomputes every active flow at every event;
  //  - identical, isolated pipelines simulated once (sim/exec/pipeline_mirror.h);
  //  - an all-to-all's flows into (or out of) one GPU, and a ring collective's edges, filled as one checked
  //    bundle while they keep equal rates (sim/net/flow_network.h); checked_bundles = false turns only this
  //    one off (for its tests).
  bool exact_shortcuts = true;
  bool checked_bundles = true;
  // MoE all-to-all: flat (one flow per pair, as NCCL's grouped send/recv) or hierarchical (inside nodes
  // first, one message per node pair across: Tutel's 2D all-to-all; sim/net/alltoall.h).
  bool hierarchical_alltoall = false;
};

// The plan must have passed validate_plan. Out of memory (and !ignore_memory): returns oom = true with the
// memory report and timing fields zero.
SimResult simulate_iteration(const Cluster& cluster, const Topology& topo, const ModelConfig& model,
                             const Plan& plan, const SimOptions& opt);

}  // namespace arachne
