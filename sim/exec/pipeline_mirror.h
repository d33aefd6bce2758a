// Exact shortcut: identical pipelines simulated once.
//
// A pipeline is *mirrored* by an earlier one (its representative) when (1) both have the same structure,
// GPU types and per-pass costs, worker for worker; (2) their transfers are isomorphic: walking the member
// routes of corresponding pipeline sends position by position maps the representative's links one-to-one
// onto the mirror's, with equal capacities; and (3) no link carrying any pipeline's sends is touched by
// another pipeline's sends or by any data-parallel collective, and no TP group crosses nodes. Then each
// pipeline's forward/backward phase depends on nothing but its own tasks and links, so the mirror's phase is
// the representative's, event for event; only the gradient reduction and optimizer, which do couple
// pipelines, are simulated for every worker. Tests compare the result with the full simulation.
#pragma once
#include <vector>

#include "sim/exec/grad_sync.h"
#include "sim/exec/stage_work.h"

namespace arachne {

// For each worker, the worker whose pipeline phase it copies (itself when it is simulated).
std::vector<int> find_mirrored_workers(const Topology& topo, const Plan& plan, const StageWork& work,
                                       const GradSync& grads);

}  // namespace arachne
