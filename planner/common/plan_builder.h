// Turning a planner's decision into a Plan (sim/plan/plan.h), and the one EP rule every baseline without
// expert parallelism gets.
#pragma once
#include <string>
#include <vector>

#include "sim/hw/cluster.h"
#include "sim/model/model.h"
#include "sim/plan/plan.h"

namespace arachne::planner {

struct GroupSpec {
  std::vector<GpuId> gpus;  // rank order
  int tp = 1;
  double share = 1.0;       // fraction of the stage's micro-batch
};
struct StageSpec {
  int layer_begin = 0, layer_end = 0;
  std::vector<GroupSpec> groups;
};
struct PipelineSpec {
  int micro_batch = 1;
  int micro_batches = 1;
  std::vector<StageSpec> stages;
};

// A 1F1B plan (or `schedule`) of the pipelines; selectors formatted for the cluster (unless `selectors` is
// false: a selector only keeps a group's GPUs as text, and plan_to_yaml formats the GPUs of a group without
// one alike). Not validated. The second form moves the groups' GPUs out of `pipelines`.
Plan build_plan(const std::vector<PipelineSpec>& pipelines, const Cluster& cluster, Recompute recompute,
                Schedule schedule = Schedule::OneFOneB, bool selectors = true);
Plan build_plan(std::vector<PipelineSpec>&& pipelines, const Cluster& cluster, Recompute recompute,
                Schedule schedule = Schedule::OneFOneB, bool selectors = true);

// The Megatron-Core user's EP rule for a plan made by a planner that does not plan EP: for MoE models,
// every stage gets the largest EP that divides the expert count and the stage's data-parallel degree.
// EP ranks are that stage in `ep` consecutive pipelines (ep_scope pipelines, Megatron-Core), so every
// aligned block of `ep` pipelines must be replicas as far as EP needs: the same depth and micro-batch
// count, and the stage with the same layer range and number of TP groups (what validate_plan requires). Where pipelines differ in structure, a stage with several
// TP groups (stage-level DP) takes EP over its own groups instead (ep_scope stage). Dense models: no-op.
void apply_megatron_core_ep(Plan& plan, const ModelConfig& model);

// Split `total` samples into `parts` integers proportional to `weights` (largest remainder, ties to the
// lower index; every part >= min_each when total allows). Deterministic.
std::vector<long> split_proportional(long total, const std::vector<double>& weights, long min_each = 0);

}  // namespace arachne::planner
