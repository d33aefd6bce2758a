// One entry point for every accepted trace format (traces/README.md), with format detection, and the
// summary statistics of a trace (`arachne trace stats`).
#pragma once
#include <map>
#include <string>
#include <vector>

#include "sim/hw/gpu.h"
#include "sim/trace/availability.h"

namespace arachne {

struct TraceLoadOptions {
  std::string format;  // native | alibaba-gpu-v2023 | skypilot | sailor-csv | sailor-json | "" (detect)
  std::uint64_t seed = 0;
  int nodes = 0;              // alibaba: seeded subset keeping the type mix (0: all)
  double load_scale = 1.0;    // alibaba: tenant load multiplier
  double window_start_s = 0;  // alibaba: time window of the pod list replayed (the trace starts at 0 there)
  double window_end_s = -1;   // -1: to the end
};

struct LoadedTrace {
  AvailabilityTrace trace;
  std::string format;
  double tenant_utilisation = -1;  // alibaba: GPU-hours held by other tenants / GPU-hours offered; else -1
};

const std::vector<std::string>& trace_formats();
// Throws InputError("--trace-format", ...) for an unknown format, or the loader's file:line errors.
std::string detect_trace_format(const std::string& path);
LoadedTrace load_trace(const std::string& path, const TraceLoadOptions& opt, const GpuCatalog& catalog);

struct TraceStats {
  double duration_s = 0;
  int nodes = 0;
  int changes = 0;                         // distinct change times after t = 0
  double changes_per_hour = 0;
  std::map<std::string, double> gpu_hours;  // available, per GPU type
  std::map<std::string, int> capacity;      // GPUs per type (node capacities)
  double availability = 0;                 // available GPU-hours / capacity GPU-hours
};
TraceStats trace_stats(const AvailabilityTrace& t);

}  // namespace arachne
