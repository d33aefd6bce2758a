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
//  Phase 0 (unless constructed without it): the plans
//    returned by amp, metis, flashflex and sailor are simulated first - each with its own cost model and the
//    request's budget, then each with the simulator as its cost model on an eighth of the remaining budget
//    (charged to the oracle's) - so where a budget cuts the enumeration below the oracle is still not
//    slower than those baselines' own answers.
//  Phase 1 (baseline seed, simulated first): the Megatron shorthand grid (tp up to the largest node, pp |
//    layers, every dp with global % dp == 0, micro-batch 1/2/4/8 dividing global / dp, EP dividing dp and the
//    experts for MoE; plans whose TP groups would span nodes skipped) on the whole snapshot and, when it holds
//    several GPU types, on each type's nodes alone (planner/common/subcluster.h, ids mapped back). So the
//    oracle is never slower than megatron whenever the budget covers the seed (~40-110 evaluations on 8 GPUs).
//  Phase 2 (general structures):
//   1. Symmetry reduction. A TP group is abstracted to a slot (GPU type, tp): GPUs of one type in one node
//      are interchangeable, and nodes of one type with the same free GPUs are interchangeable, so a structure
//      is a multiset of pipeline shapes; a pipeline shape is a sequence of stage shapes; a stage shape is a
//      tp (power of two, <= the largest node of the type, dividing heads and kv_heads) and a number of TP
//      groups per GPU type (several groups = stage-level data parallelism; types may mix, as in Metis).
//      GPUs may stay idle (any subset). Slots are placed on nodes first-fit in node listing order under two
//      canonical orders: stage-major (stage 0 of every pipeline, then stage 1, ...: Megatron's rank order,
//      DP inside nodes, PP across them) and pipeline-major (each pipeline packed on its own nodes).
//      Structures are listed as D identical pipelines first (Megatron / AMP / Sailor; Metis with D = 1), then
//      every other multiset (FlashFlex).
//   2. Per structure and micro-batch (1, 2, 4, 8 dividing the batch), stage costs come from the Profiler
//      (planner/common/profile.h: the simulator's per-layer costs, as a profiler would measure them): a
//      stage's time per micro-batch is 1 / sum_groups (1 / T_group), T_group = forward + backward + TP time of
//      its layer range on the group's type and tp at the full micro-batch (groups split the micro-batch in
//      proportion to speed, which equalises their predicted times - Metis' share rule); every GPU's memory
//      (sim/model/memory.h via the Profiler, 1F1B: S - j micro-batches in flight on stage j) must fit. The
//      layer partition of every pipeline shape is the exact min-max optimum (planner/common/partition.h); on
//      clusters of <= 8 GPUs every other contiguous partition of each shape is a candidate too (while a shape has
//      at most 256 of them; beyond that the search reports itself incomplete). Recompute:
//      the lightest level at which the profiler says every stage fits; in the simulator the next level is
//      tried only when the previous one runs out of memory (recomputation only adds work; Korthikanti 2022).
//   3. Batch split across pipelines: micro-batches handed out one at a time to the pipeline whose predicted
//      1F1B time ((m-1) max_j t_j + sum_j t_j + p2p; Narayanan et al. SC'21 §2.2) grows least - the exact
//      min-max split for increasing per-pipeline times; the split proportional to pipeline speed (FlashFlex)
//      is a second candidate. Predicted iteration = slowest pipeline + exposed DP all-reduce of the first
//      stage (ring, 2(R-1)/R bytes / bandwidth) + the optimizer step (Adam, ~34 bytes/parameter, HBM-bound).
//   4. EP for MoE models (the Profiler prices MoE layers as their activated dense FFN, so EP variants are
//      simulated back to back for each candidate): ep_scope pipelines with every divisor e > 1 of the experts
//      such that blocks of e consecutive pipelines are identical replicas (Megatron-Core carves EP out of
//      DP), largest first; ep_scope stage with every divisor e > 1 of the experts that divides a stage's GPUs;
//      then ep = 1.
//   5. Ordering: all candidates are predicted first (no simulation), then simulated in ascending predicted
//      time (ties: enumeration order), so a budget cut keeps the most promising ones. Only the best
//      4 x (remaining budget) + 64 predictions are kept (a bounded heap; lower bounds - every pipeline takes
//      >= 1 micro-batch, one takes >= ceil(M / P) - skip structures and partitions that cannot enter it; the
//      minimax partitions of all structures are priced before the other partitions to tighten the bound).
//      A plan already simulated (same YAML) is not simulated again.
//  Result: the fastest simulated plan; predicted_iteration_time_s is its simulated time; search_complete is
//  false when the evaluation / wall budget, the kept-candidate bound or an enumeration cap cut the search.
//  The oracle always prices with the simulator (request.cost_model is ignored: it has no cost model of its own).
//
// Larger snapshots (> 8 GPUs; the space grows combinatorially) use further reductions: stage order inside a
// pipeline is canonical (stage shapes sorted by the memory they offer, memory-rich first, since 1F1B keeps
// the most micro-batches in flight on early stages); group counts per type in a stage are 0, powers of two
// or all of that type; pipeline shapes are enumerated by increasing depth and ranked by predicted samples/s
// per GPU before structures are formed; caps of 20000 pipeline shapes and 60000 structures apply.
//
// What it cannot express: interleaved / gpipe schedules, sequence parallelism, ZeRO-1, TP groups spanning
// nodes, stages mixing tp values within one stage, one micro-batch size per structure (pipelines share it),
// uneven expert placement. Simplifications: node placement is the two canonical orders above rather than
// every assignment of node slices (exact for one node; the seed covers Megatron's own order); exhaustive
// partitions vary one pipeline shape at a time (the others stay at their min-max optimum); the profiler-side
// memory check of MoE models assumes ep = 1 (conservative); a simulator exception on one candidate is
// recorded as an invalid candidate, not propagated.
#pragma once
#include <string>

#include "planner/planner.h"

namespace arachne::planner {

class OraclePlanner : public Planner {
 public:
  // seed_with_baselines: phase 0 (the baselines' plans simulated first). Off, the oracle stands on its own
  // enumeration - what the oracle-never-beaten test checks on the clusters it enumerates completely.
  explicit OraclePlanner(bool seed_with_baselines = true) : seed_(seed_with_baselines) {}
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
  bool seed_;
  Stats stats_;
};

}  // namespace arachne::planner
