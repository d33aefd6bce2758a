// Completion: from a structural template (planner/template/template.h) to plans the simulator can run, by
// rule and a small priced candidate set:
//   1. placement: the template's TP groups on concrete GPUs, a TP group inside one node, a stage inside one
//      node or leaf where it can be, pipelines of one class on interchangeable nodes, an EP group across
//      pipelines inside one node where it can be;
//   2. layers: the exact min-max contiguous partition of each pipeline's layers over its stages, with the
//      profiler's stage times and under each stage's memory limit;
//   3. batch: per pipeline a micro-batch size and count; the global batch split into integers across
//      pipelines in proportion to each pipeline's measured speed, then local moves;
//   4. memory: recompute only where the memory needs it (a plan with recompute fits at no level of less
//      recompute with the same ZeRO-1 setting, so that ZeRO-1 and recompute are weighed by price; a level of
//      more recompute is not worked out at all where memory decided none of the batch split's choices at a
//      level of less: PipelineCosts::memory_decided); ZeRO-1 is priced on and off, since it also shards the
//      optimizer step; MoE: experts over EP ranks (uneven in proportion to GPU
//      speed where the template says so);
//   5. the candidates the rules leave open (micro-batch sizes, one class's layer partition shared by every
//      pipeline as deep, so that each layer's gradient has the same holders throughout, moves of samples
//      between pipelines, ZeRO-1, recompute levels that let larger micro-batches fit) are priced by `price`
//      and returned best first.
#pragma once
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include "planner/common/partition.h"
#include "planner/template/template.h"
#include "sim/hw/topology.h"

namespace arachne::planner {

// Prices a validated plan: its iteration time in seconds, or nullopt when it does not fit in memory. The
// second argument, stop_at_s, lets a pricer stop early: where the time is at least stop_at_s it may return
// any value from stop_at_s up to the time (completion asks so only where such a plan can neither be returned
// nor change a choice). A pricer may ignore it and always return the time.
using PlanPricer = std::function<std::optional<double>(const Plan&, double stop_at_s)>;

struct CompletionOptions {
  int max_candidates = 8;  // plans returned (best first)
  int max_priced = 32;     // calls of `price` per memory level tried (at most 6 levels)
  // A candidate whose analytic batch split (stage compute from the per-layer times in 1F1B, without
  // communication or the optimizer step) takes at least this long is not priced, nor is a memory level whose
  // first split does: a planner passes the best price it has, which such plans rarely beat. A level where no
  // split can take less (its classes' lower bounds on the samples each pipeline can take within it) is not
  // split at all. Infinity: every candidate is priced.
  double skip_analytic_above_s = std::numeric_limits<double>::infinity();
  // Also complete the template with each class's replicas placed stage by stage (placement.h
  // `replicas_by_stage`: the data-parallel peers of a stage on one node where they fit), both placements
  // priced. Off: the default placement only.
  bool data_parallel_placement = false;
  // Which of equal min-max layer partitions each pipeline takes (partition.h PartitionTies).
  PartitionTies partition_ties = PartitionTies::EarliestCut;
  // Price a level of more recompute even where its analytic split is no faster than the levels of less
  // recompute (the rule of step 4): the analytic split leaves out communication, and fewer, larger
  // micro-batches hide more of the gradient reduction behind the last backward pass. Levels where memory
  // decided nothing are still left out.
  bool price_every_recompute_level = false;
};

struct CompletedPlan {
  Plan plan;
  double priced_s = 0;  // what `price` said
  PartitionTies ties = PartitionTies::EarliestCut;  // the options' rule for equal partitions
};

// What completion derives from the cluster and model alone (the profiler's per-layer times, stage memory by
// layer range, and each pipeline class's costs: partitions, best micro-batch sizes, bounds), kept across
// templates: one cache for every complete_template call on one cluster and model saves recomputing them per
// template; the plans are the same with or without it. Not thread-safe.
class CompletionCache {
 public:
  CompletionCache(const Cluster& cluster, const ModelConfig& model);
  ~CompletionCache();
  CompletionCache(const CompletionCache&) = delete;
  CompletionCache& operator=(const CompletionCache&) = delete;
  struct Impl;
  Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// What a pricer said of each plan completion asked it for, kept across complete_template calls: a plan asked
// for again is neither assembled nor validated where that answer stands (a fitting time below the new
// stop_at_s, or no fit, or an answer at or above the new stop_at_s: PlanPricer), and is built, not validated
// again, where it is returned. For the calls of one planner: one pricer, cluster, model and global batch. The
// plans returned are the same with it or without it. Not thread-safe.
class PlanPrices {
 public:
  PlanPrices();
  ~PlanPrices();
  PlanPrices(const PlanPrices&) = delete;
  PlanPrices& operator=(const PlanPrices&) = delete;
  struct Impl;
  Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

struct CompletionInput {
  const Cluster* cluster = nullptr;
  const Topology* topo = nullptr;
  const ModelConfig* model = nullptr;
  long global_batch = 0;
  CompletionCache* cache = nullptr;  // optional; made for the call when null (it must be of cluster and model)
  PlanPrices* prices = nullptr;      // optional: the pricer's answers kept across calls (with one pricer only)
};

// Plans for the template, each valid (validate_plan) and priced as fitting, best first; empty when the
// template cannot be completed (e.g. nothing fits in memory). Deterministic.
std::vector<CompletedPlan> complete_template(const Template& t, const CompletionInput& in, const PlanPricer& price,
                                             const CompletionOptions& opt = {});

}  // namespace arachne::planner
