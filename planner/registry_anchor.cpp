// The planner registry: one entry per planner compiled into this build (name, description, factory).
#include <algorithm>
#include <functional>

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
namespace {

struct Entry {
  const char* name;
  const char* description;
  std::function<std::unique_ptr<Planner>()> make;
};

template <class P>
std::unique_ptr<Planner> make_one() {
  return std::make_unique<P>();
}

// Sorted by name.
const std::vector<Entry>& registry() {
  static const std::vector<Entry> entries = {
      {"amp", "AMP (Li et al. NeurIPS'22): (TP, DP, micro-batch) grid, layer DP, compute averaged over GPU types; top 10 trialled",
       make_one<AmpPlanner>},
      {"flashflex", "FlashFlex (Yan et al. 2024): graph-partitioned asymmetric pipelines (hill-climbing refinement with --flashflex-refine)",
       make_one<FlashFlexPlanner>},
      {"megatron", "Megatron-LM grid (TP/PP/DP/micro-batch/recompute/EP) on the largest homogeneous subset, simulator-priced",
       make_one<MegatronPlanner>},
      {"metis", "Metis (Um et al. ATC'24): device groups per stage, DP->TP trading, batch split by speed", make_one<MetisPlanner>},
      {"oracle", "branch and bound over its declared space (planner/oracle/README.md), simulator-priced; complete only where it says so",
       make_one<OraclePlanner>},
      {"sailor", "Sailor (Strati et al. SOSP'25): memoised DP over depth, DP degree and per-stage GPU types", make_one<SailorPlanner>},
  };
  return entries;
}

const Entry* find(const std::string& name) {
  for (const Entry& e : registry())
    if (e.name == name) return &e;
  return nullptr;
}

}  // namespace

std::vector<std::string> registered_planner_names() {
  std::vector<std::string> names;
  for (const Entry& e : registry()) names.emplace_back(e.name);
  return names;
}

std::string planner_description(const std::string& name) {
  const Entry* e = find(name);
  return e ? e->description : "";
}

std::unique_ptr<Planner> make_planner(const std::string& name) {
  if (const Entry* e = find(name)) return e->make();
  std::string known;
  for (const std::string& n : registered_planner_names()) known += (known.empty() ? "" : ", ") + n;
  throw InputError("--planner", "unknown planner '" + name + "' (known: " + known + ")");
}

}  // namespace arachne::planner
