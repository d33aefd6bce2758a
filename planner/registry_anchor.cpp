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
