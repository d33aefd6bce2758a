// `simulate --timeline`: SimResult::timeline as Chrome trace-event JSON (opens in Perfetto and
// chrome://tracing). Format: {"traceEvents": [...], "displayTimeUnit": "ms"}; one complete ("X") event per
// span with ts/dur in microseconds, pid 0, tid = track; metadata ("M") events name each track
// (thread_name) and order them (thread_sort_index = track id, so GPUs come in order, then link classes).
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/exec/sim_result.h"
#include "sim/hw/cluster.h"

namespace arachne {

// Track names of a cluster: GPU g -> "n0:3 A100-80" for g < total_gpus, then one per link class:
// "link nvlink", "link pcie", "link nic", "link spine" (track total_gpus + class, as in TimelineSpan).
std::vector<std::string> timeline_track_names(const Cluster& cluster);

// Tracks without a name get "track <id>". Only tracks that carry spans are named.
nlohmann::json chrome_trace_json(const SimResult& r, const std::vector<std::string>& track_names);

// Written atomically (sim/io/atomic_file.h). Throws std::runtime_error.
void write_chrome_trace(const std::string& path, const SimResult& r, const std::vector<std::string>& track_names);

}  // namespace arachne
