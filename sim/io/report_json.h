// `simulate --json` (DESIGN.md "CLI, exit codes, machine output"): one JSON object per simulated iteration.
#pragma once
#include <nlohmann/json.hpp>

#include "sim/exec/sim_result.h"

namespace arachne {

// True when the result carries simulated timing: always unless out of memory; with --ignore-memory an
// out-of-memory plan is simulated anyway and has timing (oom stays true).
inline bool has_timing(const SimResult& r) { return !r.oom || r.iteration_time_s > 0; }

// Keys: iteration_time_s, tokens_per_s, samples_per_s, tflops_per_gpu, mfu, mfu_cluster, oom,
// peak_memory_gib, peak_memory_gpu, memory_gib {weights, gradients, optimizer, activations, other},
// breakdown_s {compute, tp_comm, pp_comm, dp_comm, ep_comm, bubble, wait, optimizer}, bytes {nvlink, pcie, nic,
// spine}, dropped_tokens, events, sim_wall_s, warnings [], gpus_used, global_batch.
// Without timing (out of memory) the timing fields and breakdown_s are null, and per_gpu_memory_gib lists
// every GPU the plan uses: [{gpu, type, capacity, weights, gradients, optimizer, activations, other,
// total}] in GiB.
nlohmann::json simulate_report_json(const SimResult& r);

}  // namespace arachne
