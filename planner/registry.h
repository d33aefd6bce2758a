// Planner registry by name. Planners (baselines, oracle, learned) register here; the CLI lists and
// selects them by name. The planner interface itself arrives with the replay issue.
#pragma once
#include <string>
#include <vector>

namespace arachne::planner {

// Names of the planners compiled into this build, sorted.
std::vector<std::string> registered_planner_names();

// One line on what a registered planner is (source and search), for `arachne list planners`.
std::string planner_description(const std::string& name);

}  // namespace arachne::planner
