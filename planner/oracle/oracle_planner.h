// `oracle`: the reference planner every other planner is measured against (DESIGN.md "Planners"): exhaustive
// over plan structures, with layer partitions and batch splits chosen by exact optimisation, every candidate
// priced by the simulator itself (planner::Evaluator, memory enforced). It is not a published system; its
// space is the union of the plan forms of the baselines:
//   Megatron-LM (Narayanan et al. SC'21): TP x PP x DP grids on a (type) subset, even layer split;
//   AMP (Li et al. NeurIPS'22): one structure over all GPUs, uneven layer split;
//   Metis (Um et al. ATC'24): one pipeline whose stages are device groups with several TP groups each,
//     shares proportional to speed, uneven layers;
//   FlashFlex / HexiScale (Yan et al. 2024): several pipelines of different structure, batch split across them;
//   Sailor (Strati et al. SOSP'25): D pipelines with identical layer split whose stages use different GPU
//     types / TP.
//
// Algorithm
//  Phase 1 (baseline seed, simulated first): the Megatron shorthand grid (tp, pp | layers, every dp with
//    global % dp == 0, micro-batch 1/2/4/8, EP for MoE) on the whole snapshot and, when it holds several GPU
//    types, on each type's nodes alone (sub-cluster, ids mapped back). This guarantees the oracle is never
//    worse than the homogeneous grid whenever the budget covers the seed.
//  Phase 2 (general structures):
//   1. Symmetry reduction. A TP group is abstracted to a slot (GPU type, tp): GPUs of one type in one node
//      are interchangeable, and nodes of one type with the same free GPUs are interchangeable, so a structure
//      is a multiset of pipeline shapes; a pipeline shape is a sequence of stage shapes; a stage shape is a
//      tp (power of two, <= the largest node of the type, dividing heads and kv_heads) and a number of TP
//      groups per GPU type (several groups = stage-level data parallelism, types may mix as in Metis).
//      GPUs may stay idle (any subset). Slots are placed on nodes first-fit in node listing order under two
//      canonical orders: stage-major (stage 0 of every pipeline, then stage 1, ...: Megatron's rank order,
//      DP inside nodes, PP across them) and pipeline-major (each pipeline packed on its own nodes).
//   2. Per structure and micro-batch (1, 2, 4, 8 dividing the batch), the stage costs come from the Profiler
//      (planner/common/profile.h, the simulator's per-layer costs): a stage's time per micro-batch is
//      1 / sum_groups (1 / T_group), T_group = forward+backward+TP time of its layer range on the group's type
//      and tp at the full micro-batch (groups share a micro-batch in proportion to speed, which equalises their
//      predicted times); memory (sim/model/memory.h via the Profiler, 1F1B in-flight micro-batches S - j) must
//      fit each GPU. The layer partition of every pipeline shape is the exact min-max optimum
//      (minmax_partition); on clusters of <= 8 GPUs every contiguous partition of each shape is a candidate too.
//      Recompute none / selective / full: the lightest level at which the profiler says every stage fits (the
//      next one only when the previous one runs out of memory in the simulator as well).
//   3. Batch split across pipelines: micro-batches handed out one at a time to the pipeline whose predicted
//      1F1B time ((m-1) * max_j t_j + sum_j t_j + p2p) grows least - the exact min-max split for increasing
//      per-pipeline times; the split proportional to pipeline speed is a second candidate.
//   4. EP for MoE models (the Profiler prices MoE layers as their activated dense FFN): ep = 1, every divisor
//      of the experts that the DP of identical consecutive pipelines admits (ep_scope pipelines, Megatron-Core),
//      and every divisor of the experts dividing a stage's GPUs (ep_scope stage).
//   5. Ordering: all candidates are predicted first (cheap), then simulated in ascending predicted time (ties:
//      enumeration order), so a budget cut keeps the most promising ones. A plan already simulated (same YAML)
//      is not simulated again.
//  Result: the fastest simulated plan; predicted_iteration_time_s is its simulated time; search_complete is
//  false when the evaluation / wall budget or the enumeration cap (structures on large clusters) cut the search.
//
// What it cannot express: interleaved / gpipe schedules, sequence parallelism, ZeRO-1, TP groups spanning
// nodes, stages mixing tp within one stage, pipelines of one structure with different micro-batch sizes,
// uneven expert placement. Simplifications: node placement is the two canonical orders above, not every
// assignment of node slices (exact for one node and for nodes of a single type when stages fill nodes; the
// seed covers Megatron's own order); the profiler-side memory check of MoE models assumes ep = 1 (conservative).
#pragma once
#include <string>

#include "planner/planner.h"

namespace arachne::planner {

class OraclePlanner : public Planner {
 public:
  std::string name() const override { return "oracle"; }
  PlanResult plan(const PlanRequest& request) override;

  // Statistics of the last plan() call (for reports and tests).
  struct Stats {
    long structures = 0;          // phase-2 structures enumerated (up to symmetry)
    long candidates = 0;          // priced candidates (phase 1 + phase 2)
    long simulated = 0;           // simulator evaluations
    bool enumeration_capped = false;
  };
  const Stats& stats() const { return stats_; }

 private:
  Stats stats_;
};

}  // namespace arachne::planner
