// The expert-parallel variants of a plan of an MoE model that the oracle's space holds (README.md).
#pragma once
#include <vector>

#include "sim/model/model.h"
#include "sim/plan/plan.h"

namespace arachne::planner {

// ep_scope pipelines with every divisor e > 1 of the experts such that aligned blocks of e consecutive
// pipelines are identical replicas (Megatron-Core carves EP out of DP), largest first; ep_scope stage with
// every divisor e > 1 of the experts that divides a stage's GPUs; finally ep = 1 (the plan itself). Dense
// models: the plan itself.
std::vector<Plan> ep_variants(const Plan& base, const ModelConfig& model);

}  // namespace arachne::planner
