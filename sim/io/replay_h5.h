// A replay's result as HDF5 tables (DESIGN.md "Results (HDF5)"), written under a group of a results file:
// `arachne replay --out` writes one group per planner, `arachne experiment` one per replay cell.
//   <group>/intervals  start_s, end_s, gpus_available, gpus_used, plan (one-line summary), tokens_per_s,
//                      tokens, planning_s, reconfig_s, checkpoint_s, idle_s, work_lost_s (one row per interval)
//   <group>/totals     tokens_trained, effective_tokens_per_s, planning_s, reconfig_s, checkpoint_s, idle_s,
//                      work_lost_s, replans (one row)
#pragma once
#include <string>

#include "sim/io/hdf5_writer.h"
#include "sim/trace/replay.h"

namespace arachne {

// Creates `group` ("/a/b") and its two tables. Throws std::runtime_error on an HDF5 failure.
void write_replay_tables(h5::File& file, const std::string& group, const ReplayResult& result);

}  // namespace arachne
