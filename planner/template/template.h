// Structural templates: the part of a plan that decides its throughput. A template says how many
// pipelines there are and, per pipeline, its ordered stages, each stage's TP width and its TP groups by
// GPU type (several types in one stage = a Metis-style device group), and for MoE models the stage's EP
// layout. It leaves out what follows by rule or from a small priced candidate set (planner/template/
// completion.h): the layer partition, micro-batch sizes and counts, group shares, recompute, ZeRO-1, the
// GPUs each group takes and how experts are spread over EP ranks.
//
// Three forms of one template:
//   - the struct below, canonical after canonical(): identical pipelines appear once with a replica count,
//     a stage's group kinds are sorted by GPU type, pipelines in a total order. Equal templates compare
//     equal; interchangeable nodes never appear (a template names GPU types, not nodes).
//   - text, for people and YAML files (to_text / parse_template), one pipeline class per `;`:
//       "2x[A100-80:tp4x2 | V100-32:tp2x1+T4:tp2x1]; 1x[H100:tp8x1 ep8/stage uneven]"
//     `2x[...]` = two identical pipelines; stages separated by `|`; in a stage, `TYPE:tpTxN` = N TP groups
//     of T GPUs of TYPE, kinds joined by `+` share the stage's TP width; an optional `epE/SCOPE` (SCOPE
//     = stage|pipelines) and `uneven` follow for MoE.
//   - tokens, for the policy (planner/template/tokens.h), relative to the cluster's list of GPU types.
#pragma once
#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "sim/hw/cluster.h"
#include "sim/model/model.h"
#include "sim/plan/plan.h"

namespace arachne::planner {

// `groups` TP groups of the stage's TP width on GPUs of type `gpu_type`.
struct GroupKind {
  std::string gpu_type;
  int groups = 1;
  auto tie() const { return std::tie(gpu_type, groups); }
  bool operator==(const GroupKind& o) const { return tie() == o.tie(); }
  bool operator<(const GroupKind& o) const { return tie() < o.tie(); }
};

struct StageTemplate {
  int tp = 1;
  std::vector<GroupKind> kinds;  // at least one; canonical: sorted by GPU type, one entry per type
  // MoE only (dense models: ep 1, scope Pipelines, even).
  int ep = 1;
  EpScope ep_scope = EpScope::Pipelines;
  bool uneven_experts = false;  // experts per EP rank in proportion to the rank's GPU speed

  int tp_groups() const;  // sum of kinds[].groups
  int gpus() const;       // tp * tp_groups()
  auto tie() const { return std::tie(tp, kinds, ep, ep_scope, uneven_experts); }
  bool operator==(const StageTemplate& o) const { return tie() == o.tie(); }
  bool operator<(const StageTemplate& o) const { return tie() < o.tie(); }
};

struct PipelineTemplate {
  int replicas = 1;  // identical pipelines
  std::vector<StageTemplate> stages;

  int gpus_per_replica() const;
  int groups_common_factor() const;  // the greatest common divisor of every stage's group counts
  auto tie() const { return std::tie(stages, replicas); }
  bool operator==(const PipelineTemplate& o) const { return tie() == o.tie(); }
  bool operator<(const PipelineTemplate& o) const { return tie() < o.tie(); }
};

struct Template {
  std::vector<PipelineTemplate> pipelines;

  int pipeline_count() const;  // sum of replicas
  int num_gpus() const;
  std::map<std::string, int> gpus_by_type() const;  // GPUs the template uses, per type
  bool operator==(const Template& o) const { return pipelines == o.pipelines; }
  bool operator<(const Template& o) const { return pipelines < o.pipelines; }
};

// A hash of every field operator== compares, for unordered sets and maps of templates (the searches look
// templates up thousands of times a plan).
struct TemplateHash {
  std::size_t operator()(const Template& t) const;
};

// The canonical form: kinds of one type merged and sorted, identical pipelines merged (replicas summed),
// pipelines sorted. Idempotent.
Template canonical(Template t);

// The template of a plan: per pipeline, each stage's TP width, its groups by GPU type (of the cluster's
// GPUs they use) and its EP layout; canonical. Throws std::invalid_argument when a stage mixes TP widths
// (outside the template space).
Template template_of(const Plan& plan, const Cluster& cluster);

// Text form (see the top of this file) and back. parse_template throws InputError(where, reason) on a
// malformed string; the result is canonical.
std::string to_text(const Template& t);
Template parse_template(const std::string& text, const std::string& where = "template");

// Why the template cannot run on the cluster, or empty when it can. Checks, in this order: pipelines and
// stages present, at most model.layers stages per pipeline, counts and widths at least 1, GPU types of the
// cluster, TP widths that divide the attention and key/value heads (as validate_plan), EP (1 on dense
// models; dividing the expert count unless uneven; dividing the stage's GPUs with scope stage, as
// validate_plan; dividing the class's replicas with scope pipelines, so that an EP block is `ep` identical
// pipelines), the GPUs of each type, and that each type's TP groups pack into its nodes (a TP group lives
// in one node; first-fit decreasing, exact when the widths divide one another, as 1/2/4/8 do).
std::string template_problem(const Template& t, const Cluster& cluster, const ModelConfig& model);

// Whether a class of `t` has several replicas (which can be placed pipeline by pipeline or stage by stage).
bool has_replicas(const Template& t);

// The GPU counts of the cluster's nodes, per GPU type (nodes in listing order).
std::map<std::string, std::vector<int>> node_sizes_by_type(const Cluster& cluster);
// Whether `tp` divides the model's attention heads and key/value heads (the rule of validate_plan).
bool tp_divides_heads(int tp, const ModelConfig& model);

// YAML form: a file whose only key is `template:`, the text form as a string, e.g.
//   template: "2x[A100-80:tp4x2 | V100-32:tp2x1]"
// load_template_yaml throws InputError("file:line: template", reason).
std::string template_yaml(const Template& t);
Template load_template_yaml(const std::string& path);

}  // namespace arachne::planner
