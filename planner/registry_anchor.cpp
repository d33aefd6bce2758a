#include "planner/registry.h"

namespace arachne::planner {

std::vector<std::string> registered_planner_names() { return {}; }

}  // namespace arachne::planner
