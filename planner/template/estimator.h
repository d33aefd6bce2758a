// The fast estimator: prices a complete plan in microseconds, without the event simulator, so that a planner
// can rank thousands of completed templates and simulate only the best few (the simulator stays the judge).
//
// Model: analytic 1F1B per pipeline with the simulator's own per-layer costs (planner/common/profile.h),
// point-to-point transfers on the links the stages actually use, the exposed part of the data-parallel
// gradient reduction and of the MoE all-to-all on the actual links, the optimizer step, and the memory of
// every stage (sim/model/memory.h). Its few coefficients are fitted against the simulator by a script;
// its rank agreement with the simulator is reported in README.
#pragma once
#include <memory>

#include "sim/hw/cluster.h"
#include "sim/hw/topology.h"
#include "sim/model/model.h"
#include "sim/plan/plan.h"

namespace arachne::planner {

struct Estimate {
  double iteration_s = 0;         // estimated iteration time (meaningless when !fits)
  bool fits = true;               // every GPU within its usable memory
  double peak_memory_fraction = 0;  // highest used / usable memory over the plan's GPUs
};

class Estimator {
 public:
  // Keeps references to cluster, topo and model (they must outlive the estimator).
  Estimator(const Cluster& cluster, const Topology& topo, const ModelConfig& model);
  ~Estimator();
  Estimator(Estimator&&) noexcept;
  // The plan must have passed validate_plan. Not thread-safe (caches): one estimator per thread.
  Estimate estimate(const Plan& plan) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace arachne::planner
