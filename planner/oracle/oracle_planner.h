#pragma once
#include <string>
#include "planner/planner.h"
namespace arachne::planner {
class OraclePlanner : public Planner {
 public:
  std::string name() const override { return "oracle"; }
  PlanResult plan(const PlanRequest& request) override;
};
}  // namespace arachne::planner
