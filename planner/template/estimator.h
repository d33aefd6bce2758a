// The fast estimator: prices a complete plan in microseconds, without the event simulator, so that a planner
// can rank thousands of completed templates and simulate only the best few (the simulator stays the judge).
//
// Model: analytic 1F1B per pipeline with the simulator's own per-layer pass prices (sim/exec/stage_work.h
// price_pass, as planner/oracle/lower_bound.cpp uses them),
// point-to-point transfers on the links the stages actually use, the exposed part of the data-parallel
// gradient reduction and of the MoE all-to-all on the actual links, the optimizer step, and the memory of
// every stage (sim/model/memory.h). Its few coefficients are fitted against the simulator by a script;
// its rank agreement with the simulator is reported in README.
//
// How (estimator.cpp, each formula beside the simulator code it mirrors):
//  - every pass (forward / backward of a TP group) costs what build_stage_work prices it at
//    (sim/exec/stage_work.h price_pass: kernels + TP collectives), from per-layer prefix sums cached per
//    (GPU type, TP, samples, recompute, sequence parallelism);
//  - each pipeline runs the simulator's own rank programs (sim/exec/pipeline_schedule.h rank_program:
//    Megatron's warm-up / steady state / cool-down with blocking exchanges), one timeline per stage (the
//    slowest of its TP groups), the exchanges' transfers paired in posting order as the simulator pairs
//    them; a transfer lasts its latency plus its bottleneck link's load over capacity, the load taken with
//    the same boundary's transfers in every pipeline of its shape (depth, micro-batch size and count: they
//    run the same schedule, so at once - replicas placed stage by stage share their nodes' NICs), and where
//    transfers of other boundaries of its pipeline load the same link, plus the part of their loads that overlaps it
//    (the overlaps taken from the schedule run with every transfer alone); the bubbles follow from the
//    recurrence, no bubble formula is assumed;
//  - gradient reduction: the simulator's segments and Megatron buckets (sim/exec/grad_sync.cpp), each
//    bucket ready at its layer's point in the last backward, one at a time per communicator, timed as the
//    simulator's collective flows (sim/net/collectives.h collective_transfers) at their bottleneck link,
//    no faster than the busiest link shared by several communicators (a leaf's uplink to the spine among
//    them) can carry them all, and each
//    communicator of a shared link no sooner than processor sharing of that link lets it, a link's capacity
//    shared with the MoE all-to-alls of the last backward still to run (spread evenly over the pass); then the
//    tied-embedding all-reduces (timed the same way), the optimizer step and the ZeRO-1 all-gather after it,
//    these three families of collectives sharing their links with each other by processor sharing too (a
//    family's load still to carry taken as spread evenly over its span);
//  - MoE expert parallelism: per MoE layer the dispatch and combine all-to-alls (flat, sim/net/alltoall.h)
//    at their bottleneck link, together with the all-to-alls of the same stage in every pipeline of the same
//    shape (they run at once), and the routed experts at the expected load (multinomial routing with the
//    capacity cut, sim/model/moe_routing.h), the slowest EP rank gating each layer;
//  - memory: stage_memory (sim/model/memory.h) with the inputs build_stage_work gives it - the same verdict.
// It ignores: contention of a pipeline transfer with traffic other than the transfers of its pipeline and of
// its shape's pipelines (the fitted p2p coefficient absorbs part of it), and of an all-to-all with traffic other than its stage's
// all-to-alls (timed on their links alone, though a gradient reduction on their links waits for them), the
// routing draw's variation around the expected expert load, the coupling of pipelines through expert-parallel
// rendezvous, the second-order effects of the families' sharing (one family slowing another ends the slowed
// one's collectives later, which the estimate counts once, from the families' first timing), and the differences
// between the TP groups of one stage (the stage runs at its slowest group's pace).
#pragma once
#include <limits>
#include <map>
#include <memory>
#include <string>

#include "sim/hw/cluster.h"
#include "sim/hw/topology.h"
#include "sim/model/model.h"
#include "sim/plan/plan.h"

namespace arachne::planner {

// Multiplicative corrections of the estimator's terms, fitted against the simulator
// (planner/template/estimator_coefficients.h holds the fitted values and the command that produced them).
struct EstimatorCoefficients {
  double compute = 1;   // forward / backward passes (kernels + TP collectives)
  double p2p = 1;       // pipeline point-to-point transfers
  double dp = 1;        // gradient-reduction collectives (and the ZeRO-1 all-gather)
  double ep = 1;        // MoE all-to-alls and routed-expert kernels
};

// The fitted coefficients (estimator_coefficients.h).
EstimatorCoefficients fitted_estimator_coefficients();

struct Estimate {
  double iteration_s = 0;         // estimated iteration time (meaningless when !fits)
  bool fits = true;               // every GPU within its usable memory
  double peak_memory_fraction = 0;  // highest used / usable memory over the plan's GPUs
  // Where the time goes (meaningless when !fits): the end of the slowest pipeline's schedule, and what the
  // gradient reduction, optimizer step and ZeRO-1 all-gather add after it on the critical worker.
  double pipeline_s = 0;
  double after_pipeline_s = 0;
  // The estimate stopped early (estimate's stop_at_s): iteration_s is only a lower bound, at least stop_at_s,
  // and pipeline_s and after_pipeline_s are meaningless.
  bool stopped = false;
};

// A lower bound on the iteration time of every plan of a dense model that trains `global_batch` samples on
// the GPUs `gpus` (count per GPU type): the GEMM FLOPs of every sample's forward and backward passes
// (sim/model/layer_costs.h at TP 1: TP splits them, it adds none) over the GPUs' summed best GEMM rate,
// dense peak (GpuSpec::peak_for) x gemm_eff_max (sim/model/compute_time.cpp op_time_s prices a GEMM at
// flops / (peak x gemm_efficiency), and gemm_efficiency < gemm_eff_max), and nothing for attention,
// memory-bound kernels, communication, bubbles or recompute. 0 for MoE models (their expert FLOPs follow
// the routing). A planner skips completing a template whose bound is no better than a plan it already priced.
// The FLOPs are counted once, at construction; keeps a reference to the cluster.
class IterationLowerBound {
 public:
  IterationLowerBound(const Cluster& cluster, const ModelConfig& model, long global_batch);
  double operator()(const std::map<std::string, int>& gpus) const;

 private:
  const Cluster& cluster_;
  std::string dtype_;
  double flops_ = 0;  // GEMM FLOPs of one iteration; 0 for MoE models
};

class Estimator {
 public:
  // Keeps references to cluster, topo and model (they must outlive the estimator). Cheap: the per-layer
  // tables are built on first use.
  Estimator(const Cluster& cluster, const Topology& topo, const ModelConfig& model);
  Estimator(const Cluster& cluster, const Topology& topo, const ModelConfig& model,
            const EstimatorCoefficients& coefficients);
  ~Estimator();
  Estimator(Estimator&&) noexcept;
  // The plan must have passed validate_plan. Not thread-safe (caches): one estimator per thread.
  // With a finite stop_at_s, a plan that fits and whose time is shown to be at least stop_at_s before the
  // gradient reduction is worked out comes back `stopped`: every pipeline's schedule, or its workers'
  // backward passes plus their optimizer steps, already end no sooner (the iteration ends after both).
  Estimate estimate(const Plan& plan, double stop_at_s = std::numeric_limits<double>::infinity()) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace arachne::planner
