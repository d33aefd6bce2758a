// Sailor's availability inputs (eth-easl/sailor, MIT; Strati et al., "Sailor", 2025):
// `gpu_trace_*.csv` (GPU counts per "<type>_<zone>" column over Unix timestamps) and `a100_trace.json`
// (`[{"Time": s, "GPUs": n}, ...]`). Mapping to the trace model: traces/README.md, "sailor-csv", "sailor-json".
#pragma once
#include <map>
#include <string>

#include "sim/trace/availability.h"

namespace arachne {

// Sailor GPU name → catalog GPU type ("A100-40" → "A100-40", "A100" → "A100-40", "V100" → "V100-16", ...);
// empty when unknown.
std::string sailor_gpu_to_catalog(const std::string& sailor_name);

// CSV: a leading unnamed index column, `Timestamp` (Unix seconds), then one column per "<GPU>_<zone>".
// Times become relative to the first row; N GPUs of a column become ceil(max N / g) nodes named
// "<GPU>_<zone>/<k>" (g = nodes_of_size[catalog type], default 8), filled in order, the last partially.
// The trace ends at the last row's time. Throws InputError("file:line: column", reason).
AvailabilityTrace load_sailor_csv(const std::string& path, const std::map<std::string, int>& nodes_of_size = {});

// JSON: N GPUs at Time → ceil(max N / gpus_per_node) nodes "<gpu_type>/<k>", filled in order. Times as given
// (seconds), must be non-decreasing; the trace ends at the last entry's Time. Throws InputError("file: [i].field").
AvailabilityTrace load_sailor_json(const std::string& path, const std::string& gpu_type = "A100-40",
                                   int gpus_per_node = 8);

}  // namespace arachne
