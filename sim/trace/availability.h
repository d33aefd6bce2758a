// Availability traces: which GPUs the job may use over time (DESIGN.md, "Availability traces and replay").
// A trace is a list of nodes (each of one catalog GPU type) and, per node, a step function of the number
// of GPUs it offers. All loaders (native CSV, Alibaba cluster-trace-gpu-v2023, SkyPilot spot traces,
// Sailor CSV/JSON) produce this one model; `arachne trace convert` writes it back as native CSV.
#pragma once
#include <string>
#include <vector>

namespace arachne {

struct TraceNode {
  std::string name;      // node id as in the source (native: the `node` column)
  std::string gpu_type;  // catalog GPU type
  int capacity = 0;      // the most GPUs it ever offers
};

// From `time_s` on, node `node` (index into AvailabilityTrace::nodes) offers `gpus` GPUs.
struct TraceEvent {
  double time_s = 0;
  int node = 0;
  int gpus = 0;
};

struct AvailabilityTrace {
  std::string source;              // file it was read from
  std::vector<TraceNode> nodes;    // in order of first appearance
  std::vector<TraceEvent> events;  // sorted by time (stable: file order within a time)
  double end_s = 0;                // the trace ends here (native: last row's time, unless --until)

  // GPUs each node offers at time t (after applying every event with time <= t).
  std::vector<int> snapshot(double t) const;
  // Distinct event times (change points), ascending, starting with 0 when the first event is at 0.
  std::vector<double> change_times() const;
};

// Native format (traces/README.md): CSV with header `time_s,node,gpu_type,gpus`, rows sorted by time.
// Throws InputError("file:line: column", reason) on a malformed row, an unknown GPU type (checked against
// `known_gpu_types` when not empty), or unsorted times.
AvailabilityTrace load_native_trace(const std::string& path, const std::vector<std::string>& known_gpu_types);
std::string to_native_csv(const AvailabilityTrace& trace);

// --- Shared by the count-based loaders (SkyPilot, Sailor) ---

// One group of identical nodes whose total offered GPUs is sampled over time: at sample i the group offers
// `gpus[i]` GPUs, packed onto nodes of `gpus_per_node` (node k offers clamp(gpus[i] - k*g, 0, g): the first
// nodes full, one partially filled, the rest 0). The group has ceil(max_i gpus[i] / g) nodes, named
// node_prefix + k.
struct GpuCountSeries {
  std::string node_prefix;
  std::string gpu_type;
  int gpus_per_node = 8;
  std::vector<long long> gpus;  // one value per sample time
};

// Builds a trace from samples at `times` (ascending) of every series: every node gets an event at times[0],
// later events only where a node's value changes. Nodes in series order, then by k. `end_s` as given.
AvailabilityTrace trace_from_gpu_counts(std::string source, const std::vector<double>& times,
                                        const std::vector<GpuCountSeries>& series, double end_s);

}  // namespace arachne
