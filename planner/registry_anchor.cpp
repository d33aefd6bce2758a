// The planner registry: names compiled into this build and construction by name.
#include <algorithm>

#include "planner/baselines/amp/amp_planner.h"
#include "planner/baselines/flashflex/flashflex_planner.h"
#include "planner/baselines/megatron/megatron_planner.h"
#include "planner/baselines/metis/metis_planner.h"
#include "planner/baselines/sailor/sailor_planner.h"
#include "planner/oracle/oracle_planner.h"
#include "planner/planner.h"
#include "planner/registry.h"
#include "sim/io/input_error.h"

namespace arachne::planner {

std::vector<std::string> registered_planner_names() {
  std::vector<std::string> names = {"amp", "flashflex", "megatron", "metis", "oracle", "sailor"};
  std::sort(names.begin(), names.end());
  return names;
}

std::string planner_description(const std::string& name) {
  if (name == "amp") return "AMP (Li et al. NeurIPS'22): (TP, DP, micro-batch) grid, layer DP, compute averaged over GPU types";
  if (name == "flashflex") return "FlashFlex (Yan et al. 2024): graph-partitioned asymmetric pipelines, refined by hill climbing";
  if (name == "megatron") return "Megatron-LM grid (TP/PP/DP/micro-batch/recompute/EP) on the largest homogeneous subset, simulator-priced";
  if (name == "metis") return "Metis (Um et al. ATC'24): device groups per stage, DP->TP trading, batch split by speed";
  if (name == "oracle") return "exhaustive over plan structures up to symmetry, every candidate simulated (reference)";
  if (name == "sailor") return "Sailor (Strati et al. SOSP'25): memoised DP over depth, DP degree and per-stage GPU types";
  return "";
}

std::unique_ptr<Planner> make_planner(const std::string& name) {
  if (name == "amp") return std::make_unique<AmpPlanner>();
  if (name == "flashflex") return std::make_unique<FlashFlexPlanner>();
  if (name == "megatron") return std::make_unique<MegatronPlanner>();
  if (name == "metis") return std::make_unique<MetisPlanner>();
  if (name == "oracle") return std::make_unique<OraclePlanner>();
  if (name == "sailor") return std::make_unique<SailorPlanner>();
  std::string known;
  for (const std::string& n : registered_planner_names()) known += (known.empty() ? "" : ", ") + n;
  throw InputError("--planner", "unknown planner '" + name + "' (known: " + known + ")");
}

}  // namespace arachne::planner
