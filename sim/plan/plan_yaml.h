// Plan YAML parsing/writing, shorthand expansion, and validation with precise reasons.
#pragma once
#include <string>

#include "sim/model/model.h"
#include "sim/plan/plan.h"

namespace arachne {

// Parses the plan schema; GPU selectors are resolved against the cluster. Throws InputError(file:line: field).
Plan parse_plan_yaml(const std::string& path, const Cluster& cluster);
Plan parse_plan_yaml_text(const std::string& text, const std::string& source_name, const Cluster& cluster);
// Expands the shorthand; `where` names the flag for errors (e.g. "--tp"). Throws InputError.
Plan plan_from_shorthand(const Shorthand& s, const Cluster& cluster, const ModelConfig& model);
// Writes the plan schema (round-trips through parse_plan_yaml).
std::string plan_to_yaml(const Plan& plan, const Cluster& cluster);
// "n0:0-3" style selector -> GPU ids in order. Throws std::invalid_argument with the reason.
// Forms (comma-joined): "n3" (all GPUs of n3), "n3:0-3", "n3:0,2" (a bare index or range after a
// "nK:" list continues that node's list, so "n3:0,2,n4" is n3 GPUs 0 and 2, then all of n4),
// "n4-n7" (all GPUs of nodes n4..n7). A GPU listed twice is an error.
std::vector<GpuId> parse_gpu_selector(const std::string& sel, const Cluster& cluster);
// A compact selector in the forms above that parses back to exactly `gpus` (same order).
// Throws std::invalid_argument when a GPU id is not in the cluster.
std::string format_gpu_selector(const std::vector<GpuId>& gpus, const Cluster& cluster);

// Every structural check of DESIGN.md: each GPU used once and present, TP group size = tp, shares sum to
// 1, layers covered exactly once per pipeline, batch arithmetic (Σ micro_batch·micro_batches equals the
// global batch when one is given), interleave/schedule consistency, EP consistency.
// Throws InputError whose `where` is `source` (plan file or "--flag") and whose reason is precise.
void validate_plan(const Plan& plan, const Cluster& cluster, const ModelConfig& model,
                   std::optional<long> global_batch, const std::string& source);

}  // namespace arachne
