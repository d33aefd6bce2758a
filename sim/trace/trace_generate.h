// `arachne trace generate`: a seeded synthetic multi-tenant availability trace (DESIGN.md, "Availability
// traces and replay"; model documented in traces/README.md, "Synthetic traces").
// Other tenants arrive (Poisson, with a daily cycle), hold whole GPUs on nodes for a while and leave; the
// trace offers the job every GPU they do not hold. Optional spot reclaims take whole nodes away.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "sim/hw/gpu.h"
#include "sim/trace/availability.h"

namespace arachne {

struct GenerateOptions {
  std::uint64_t seed = 0;
  double duration_s = 7 * 86400;
  // GPU type, number of nodes; GPUs per node from the catalog's default node of the type.
  std::vector<std::pair<std::string, int>> node_types = {{"A100-80", 16}, {"V100-32", 16}, {"T4", 16}};
  // Used as given only when load < 0; otherwise the rate is derived from `load` (see traces/README.md).
  double tenant_arrivals_per_hour = 20;
  double mean_duration_s = 4 * 3600;  // tenant holding time: exponential with this mean
  double load = 0.7;                  // target mean fraction of GPUs held by other tenants; < 0: unscaled
  double daily_amplitude = 0.3;       // arrival rate x (1 + a sin(2 pi t / 1 day)), 0 <= a <= 1
  double spot_reclaims_per_day = 0;   // whole-node reclaims per day over the cluster (0 = none)
  double mean_reclaim_s = 2 * 3600;   // duration of one reclaim: exponential with this mean
};

// Tenant size distribution (GPUs requested, probability); sums to 1.
const std::vector<std::pair<int, double>>& tenant_size_distribution();
double mean_tenant_size();

// Arrivals per second (mean over a day) that the generator uses for `options` on a cluster of
// `total_gpus`: load * total_gpus / (mean size * mean duration) when load >= 0, else arrivals_per_hour/3600.
double generator_arrival_rate(const GenerateOptions& options, int total_gpus);

// Throws InputError(where = the CLI flag, e.g. "--load") on an invalid option or an unknown GPU type.
AvailabilityTrace generate_trace(const GenerateOptions& options, const GpuCatalog& catalog);

}  // namespace arachne
