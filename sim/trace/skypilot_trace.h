// SkyPilot spot-availability traces (skypilot-org/spot-traces; Wu et al., "Can't Be Late", NSDI'24):
// JSON `{"metadata": {"gap_seconds": N}, "data": [available instances per tick]}`. Mapping to the trace
// model: traces/README.md, "skypilot".
#pragma once
#include <optional>
#include <string>

#include "sim/trace/availability.h"

namespace arachne {

struct SkypilotOptions {
  // Catalog GPU type of one instance. Unset: from the file name's `_<type>_<count>` suffix when the type
  // is known (v100 → V100-16, a100 → A100-40, ...), else "V100-16".
  std::optional<std::string> gpu_type;
  // GPUs per instance. Unset: the file name's trailing `_<count>` (…_v100_8.json → 8), else 1.
  std::optional<int> gpus_per_instance;
};

// Instance slot k (k = 0, 1, ...) becomes node "i-<k>" offering gpus_per_instance GPUs while
// data[tick] > k, else 0; tick i starts at i * gap_seconds; the trace ends at data.size() * gap_seconds.
// Throws InputError on an unreadable file or a malformed document ("file: field").
AvailabilityTrace load_skypilot_trace(const std::string& path, const SkypilotOptions& opt = {});

// What the file name says: `…_<type>_<count>.json` → {"<type>", count}; {"", 0} when it does not match.
struct SkypilotFileName {
  std::string instance_gpu;  // as written, e.g. "v100"
  int gpus = 0;
};
SkypilotFileName parse_skypilot_file_name(const std::string& path);

}  // namespace arachne
