// Template generators that need no policy: the exhaustive enumeration of the token space (the ceiling of
// the template space in the ablations, and the space the label search draws from) and a hand-written
// heuristic generator (the ablation's baseline).
//
// What the enumeration includes: every template with a token form (planner/template/tokens.h) that the
// cluster can hold, each once, in canonical form: identical pipelines only as one class with a replica count
// from kCounts; a stage is one TP width from kTpWidths over one or more GPU types (each type once, with a
// TP group count from kCounts); for MoE models, every EP width of kEpWidths above 1 that divides the expert
// count with each scope that fits (and `uneven` where it changes the placement); up to model.layers stages
// per pipeline; idle GPUs allowed. The walk follows TokenGrammar, so the order is the token order (ids
// ascending at each step): deterministic.
//
// The space grows roughly exponentially with the GPU count (a pipeline is any sequence of stages), so past
// a few dozen GPUs only the restricted mode finishes: at most K pipeline classes, at most S stages per
// pipeline, at most T GPU types per stage, optionally each kind's GPU count (replicas x tp x groups) a
// divisor of the cluster's GPUs of that type (the type's GPUs split evenly), and optionally pipelines made
// of type blocks (below).
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "planner/template/template.h"

namespace arachne::planner {

struct EnumerationLimits {
  long max_templates = 0;    // stop after this many templates (0: no cap)
  double max_wall_s = 0;     // stop after this much wall time (0: no cap; a wall cap makes the result machine-dependent)
  // Restricted mode (0 / false: the whole token space).
  int max_classes = 0;          // pipeline classes per template
  int max_stages = 0;           // stages per pipeline (the model's layers bound it anyway)
  int max_types_per_stage = 0;  // GPU types in one stage
  bool divisor_counts = false;  // replicas x tp x groups of every kind divides the cluster's GPUs of its type
  // Type blocks: one GPU type per stage, and a pipeline is a sequence of blocks, each block consecutive
  // stages of one type with one TP width and group count, each type in at most one block of a pipeline (the
  // shape of Metis's device groups and of the heuristic below); MoE: one EP clause for all stages of a
  // pipeline (Megatron-Core has one expert-parallel size).
  bool type_blocks = false;
};

struct Enumeration {
  std::vector<Template> templates;  // canonical, distinct, in token order
  bool complete = false;            // false when a cap stopped the walk
  long states = 0;                  // grammar prefixes visited
};

// Calls visit(token ids) for every template of the (restricted) space, in token order, until visit returns
// false or a cap is reached. Returns the count visited and whether the walk finished.
struct TokenWalk {
  long templates = 0;
  long states = 0;
  bool complete = false;
};
TokenWalk walk_template_tokens(const Cluster& cluster, const ModelConfig& model, const EnumerationLimits& limits,
                               const std::function<bool(const std::vector<int>&)>& visit);

Enumeration enumerate_templates(const Cluster& cluster, const ModelConfig& model, const EnumerationLimits& limits = {});

// Up to `count` distinct templates of the same (restricted) space drawn by random walks over the grammar: at
// every step a uniform choice among the allowed tokens (splitmix64 from `seed`; a walk that the restriction
// leaves without a token is drawn again, at most 20 x count walks). Canonical, in draw order, deterministic.
// Not uniform over templates: it reaches every corner of the space, where a capped enumeration sees only
// the first templates in token order. The caps of `limits` are not used.
std::vector<Template> sample_templates(const Cluster& cluster, const ModelConfig& model, const EnumerationLimits& limits,
                                       int count, std::uint64_t seed);

// A hand-written generator in the way an engineer lays out a cluster, best guesses first, at most k,
// canonical, distinct, each with an empty template_problem and a token form. `global_batch` in samples
// (0: the model's). Rules:
//   1. homogeneous, per GPU type (fastest peak FLOP/s first; of equal peaks the most HBM bandwidth first,
//      which runs the memory-bound kernels faster): for TP = the widest width that fits the type's
//      largest node and divides the heads (Megatron-LM's advice to keep TP inside a node, Narayanan et al.
//      SC'21 §3.2), then the narrowest TP with which some depth fits: PP = the smallest depth whose stages
//      (even layer split) fit in memory at micro-batch 1 under 1F1B (stage j keeps pp - j micro-batches in
//      flight, Narayanan et al. SC'21 §2.2), without recompute, else with full recompute; replicas = as many
//      as the type's nodes hold (rounded down to a token count), at most one per sample of the global batch;
//   2. the union of rule 1's first template of every type (data parallelism across types, one pipeline
//      class per type, as Sailor and HexiScale lay out heterogeneous clusters);
//   3. on clusters of two GPU types or more, one pipeline class over every type, replicated (Metis's shape):
//      per replica an equal share of each type's GPUs, stages ordered fastest type first with the type of
//      least memory kept off both ends, TP per type from 1 up until every stage fits in memory and the
//      pipeline is at most a quarter of its micro-batches deep; for the largest replica count from kCounts
//      that works and two smaller ones, each at most half the one before (details in enumerate.cpp);
//   4. rule 3 past its depth bound (on nodes too small for the TP widths that would merge stages, such as
//      one-GPU nodes, the bound rules out every replica count): pipelines as deep as the layers allow, the
//      slowest type first, from the fewest replicas that fit in memory and at two more counts, each at least
//      twice the one before; deep pipelines cut the data-parallel traffic that slow NICs carry.
// Output order: rule 1's first template of the fastest type; rule 3's (so that K = 8 leaves them a slot on
// a four-type cluster); rule 1's first template of the other types; rule 2; rule 1's narrow-TP templates;
// rule 4's in the slots left.
// MoE models: EP over the replicas (scope pipelines) with the largest width of kEpWidths that divides both
// the expert count and the replicas (Megatron-Core carves EP out of data parallelism). Rule 1 estimates
// memory with each rank holding 1/EP of the routed experts and, among the replica counts from the most that
// its GPUs hold down to half of them, takes the widest EP width that fits (8 replicas at EP 8 where 10 allow
// only EP 2; 16 at EP 16 rather than 20 at EP 4: a wider EP leaves fewer copies of each expert to all-reduce);
// rules 3 and 4 with every expert on every rank (planner/common/profile.h), a conservative bound.
std::vector<Template> heuristic_templates(const Cluster& cluster, const ModelConfig& model, int k, long global_batch = 0);

// Rule 3 at replica counts r that divide every type's GPU count (every GPU works; rule 3 itself takes the
// largest count that fits and may leave some idle), at up to k such counts (each at most half the one
// before), each as one pipeline whose stages hold r TP groups each (device-group stages, the shape of
// Metis's plans; MoE: EP over the stage's groups) and as r replicated pipelines: the same GPUs and stages;
// the folded form gives the stages one layer partition and one micro-batch schedule. At most 2k, fold first,
// canonical, distinct, each runnable with a token form. Proposed beside the policy and the heuristic
// generator by the arachne planner. With TypeOrder::SlowestFirst the stages' types run in the reverse of
// rule 3's order, as in rule 4: the fastest type takes the last stage, which also computes the output layer
// and its logits (sim/model/layer_costs.h).
enum class TypeOrder { FastestFirst, SlowestFirst };
std::vector<Template> device_group_templates(const Cluster& cluster, const ModelConfig& model, int k, long global_batch = 0,
                                             TypeOrder order = TypeOrder::FastestFirst);

// Deep pipelines over the fastest types, where the cluster has two types or more: for j = types down to 1,
// over the j fastest types (peak FLOP/s), the other types idle,
//   - one pipeline of one stage per node, TP over the node, the slowest type and the largest nodes first
//     (Metis's shape on small nodes of unlike sizes, which one TP width per type cannot place), where the
//     nodes are no more than the layers;
//   - for j < types, rule 4 (one spanning pipeline past the depth bound; with one type, that type's
//     pipelines as deep as the layers allow) at up to `per_subset` replica counts.
// Deep pipelines over the fast types win where the slow types' memory or NICs hold the rest back: Sailor
// (Strati et al. SOSP'25) plans them so, leaving GPU types out entirely, one-GPU H100-PCIe nodes in one
// pipeline with an H100 node beside slow L40S and P100 nodes, or deep pipelines of H200 only beside 99
// P100. Canonical, distinct, each with an empty template_problem and a token form. Proposed beside the
// policy and the heuristic generator by the arachne planner.
std::vector<Template> fast_subset_templates(const Cluster& cluster, const ModelConfig& model, int per_subset,
                                            long global_batch = 0);

// Rule 2 of heuristic_templates over the j fastest types (peak FLOP/s), for j = types - 1 down to 2, the
// other types idle: one pipeline class per type, rule 1's first template of each - data parallelism across
// the fast types only. Canonical, distinct, each with an empty template_problem and a token form; none on
// clusters of fewer than three types. A class on slow NICs holds back the gradient all-reduce of every
// replica: on 1,024 GPUs of H100, A100-80, V100-32 and T4 (the arachne benchmark's cluster) gpt3-13b as rule
// 2 over H100 and A100-80 simulates at least 1.3 times faster than over those and V100-32, whose 6.25 GB/s of
// NIC per GPU (against 25 and 50) the ring waits for
// (FastDataParallelTemplates.LeaveTheSlowNicsOutOfTheGradientAllReduce). Proposed beside the policy and the
// heuristic generator by the arachne planner.
std::vector<Template> fast_data_parallel_templates(const Cluster& cluster, const ModelConfig& model, long global_batch = 0);

// Rule 4's pipelines (heuristic_templates), and the same pipelines over every type at each type's narrowest
// TP width (at up to 4 replica counts, from the fewest with which they fit in memory and the layers, each at
// least 1.5 times the last), with the GPUs their replicas leave idle added as stages: each type's leftover TP
// groups, one at a time, to the replica with the fewest stages, after that type's last stage, so that every
// GPU works and the replicas' depths differ by at most a stage per type (the replicas alike form a class).
// On 136 GPUs of GH200 (8-GPU nodes), H100 (2-GPU) and H200 (1-GPU) AMP's plan for gpt3-6.7b has this shape:
// eight 17-stage TP-1 pipelines, two with an extra H100 stage and six with an extra H200 stage. Then the
// narrowest pipelines at 2, 4 and 8 replicas folded into one pipeline of that many TP groups per stage
// (Metis's device groups), each type's leftover GPUs as one stage more of fewer groups after that type's last
// stage, with the types in rule 4's order and in the reverse one:
// on 16 H100 (4-GPU nodes) and 10 H200 (2-GPU nodes) Metis's plan for llama2-7b at a batch of 64 is
// `1x[4 H100:tp1x4 stages | 2 H200:tp1x4 stages | H200:tp1x2]`, while one move at a time from the climbs'
// best (five stages of 4 groups, two H200s idle) each step prices slower. Canonical, distinct, each with an
// empty template_problem and a token form; none on one-type clusters. Proposed by the arachne planner after
// its descent.
std::vector<Template> deep_spanning_templates_over_every_gpu(const Cluster& cluster, const ModelConfig& model,
                                                             long global_batch = 0);

// Deep pipelines over the types that `t` uses, the cluster's other types idle: rule 4's pipeline at each
// type's narrowest TP width (in rule 4's order) at every replica count of kCounts with which it fits in
// memory and the layers, with the GPUs its replicas leave idle kept idle, and added as stages (as
// deep_spanning_templates_over_every_gpu adds them); each of these also with one type at both ends
// (one_type_at_both_ends). None unless t uses two types or more and fewer than the cluster has. Sailor's
// search (Strati et al. SOSP'25) sweeps the data-parallel degree where deep_spanning_templates_over_every_gpu
// takes four: on 342 GPUs of H100-PCIe (4-GPU nodes on 6.25 GB/s of NIC per GPU), L4 and MI300X with
// gpt3-6.7b at a batch of 512, its twelve 15-stage TP-1 pipelines of MI300X and H100-PCIe stages, the L4s
// idle, simulate 8 % faster than the climbs' plan; at 11 or 13 replicas the same shape prices 12-17 %
// slower than at 12, and at 20 replicas it is faster still. Canonical, distinct, each with an empty
// template_problem and a token form. Proposed by the arachne planner for its best template after its descent.
std::vector<Template> deep_spanning_templates_over_the_types_of(const Template& t, const Cluster& cluster,
                                                                const ModelConfig& model);

// Deep pipelines at the TP widths of `t` (each type's widest there), over t's types and the fastest type it
// leaves idle (at TP 1), and over t's types without its slowest: rule 4's pipeline (the slowest type first)
// with each type's TP groups split evenly over the replicas, at every replica count of kCounts with which it
// fits in memory and the layers, with the groups its replicas leave idle kept idle, and added as stages (one
// by one to the replica with the fewest stages, after that type's last stage). Where the climbs end in
// shallow pipelines, Sailor's search (Strati et al. SOSP'25) lays the same TP groups into a few deep
// pipelines, with a fast type the climbs left idle or without a slow one they use:
//   - on 161 GPUs of A10, A100-80 (8-GPU nodes), GH200 and H100 (one-GPU nodes) with llama2-7b at a batch of
//     64, the climbs' `13x[A100-80:tp4x1 | H100:tp1x1 | H100:tp1x1]` (the GH200s idle) simulates 6 % slower
//     than Sailor's four 16-stage pipelines of those A100-80 TP-4 groups, GH200 and H100; this generator's
//     eight 8-stage pipelines of the same GPUs (at 8 replicas one A100-80 group, 4 H100 and 2 GH200 each,
//     the 5 A100-80 groups and 3 H100 left over added as stages) 1.6 % faster than Sailor's;
//   - on 377 GPUs of A100-80, GH200 and V100-16 (3.125 GB/s NICs) with gpt3-6.7b at a batch of 512, the
//     climbs' 21 pipelines of TP-2 A100-80, V100-16 and GH200 stages simulate 2 % slower than Sailor's
//     seven 17-stage pipelines of TP-2 A100-80 and GH200 stages, the V100s idle; the plan from these
//     pipelines over A100-80 and GH200 alone 2.7 % faster than Sailor's.
// Canonical, distinct, each with an empty template_problem and a token form. Proposed by the arachne planner
// for its best template after its descent.
std::vector<Template> deep_spanning_templates_at_the_widths_of(const Template& t, const Cluster& cluster,
                                                               const ModelConfig& model);

// `t` with k = 1..4 stages of one TP group of the fastest GPU type it leaves idle (at TP 1 and at the widest
// width its nodes hold) first in every class, each also with the class's first run of stages of one type
// moved to its end; dense models only, within the layers and the idle type's TP groups. Sailor's search
// (Strati et al. SOSP'25) puts a few groups of a slow type first and a fast type last: on 70 GPUs of A100-80
// (one 8-GPU node), GH200 (one-GPU nodes) and MI250X (two-GPU nodes) with gpt3-6.7b at a batch of 64, the
// climbs end at `2x[A100-80:tp2x1 | A100-80:tp2x1 | 14 GH200 stages]`, the MI250X idle, 2.7 % slower than
// Sailor's plan; with three MI250X TP-2 stages first and the A100-80 stages last it simulates 7.7 % faster
// than Sailor's, while either change alone prices slower than the climbs' template. Canonical, distinct, each
// with an empty template_problem and a token form. Proposed by the arachne planner for its best template
// after its descent.
std::vector<Template> idle_type_stages_first(const Template& t, const Cluster& cluster, const ModelConfig& model);

// The device-group form of a template (the shape of Metis's plans; Um et al. ATC'24): one pipeline whose
// stages each hold the same number of TP groups, of one GPU type each, each type's stages consecutive. Its
// blocks, one per type in pipeline order, with their stages' TP widths; nullopt for any other template.
struct DeviceGroupBlock {
  std::string gpu_type;
  std::vector<int> tps;  // per stage, in order
};
std::optional<std::vector<DeviceGroupBlock>> device_group_blocks(const Template& t);

// `t` (in device-group form) with the stages of its block `block` laid anew over the same GPUs: as stages of one
// TP width, or of two widths w and w / 2 (at least one stage each) with the wider stages first or last, every
// width one that the type's nodes hold and that divides the heads, within the layers; dense models only.
// Metis's search (Um et al. ATC'24) gives each device group its own TP width: on 256 GPUs of H100, A100-80 and
// V100-32 with gpt3-13b at a batch of 1,024 its plan is one pipeline of 16-group stages, three TP-2 A100-80,
// four TP-1 H100, then a TP-4 and a TP-2 V100-32 stage, where one width per type (three TP-2 V100-32 stages)
// prices 14 % slower. Canonical, distinct, each with an empty template_problem and a token form, t itself
// left out.
std::vector<Template> device_group_block_widths(const Template& t, int block, const Cluster& cluster,
                                                const ModelConfig& model);

// `t` (in device-group form, of at most kDeviceGroupOrderedBlocks blocks) with its blocks in every other order;
// dense models only. Metis's search tries every order of its device groups: in the plan above the A100-80
// stages come first, neither the fastest nor the slowest type. Canonical, distinct, each with an empty
// template_problem and a token form, t itself left out.
inline constexpr int kDeviceGroupOrderedBlocks = 4;
std::vector<Template> device_group_block_orders(const Template& t, const Cluster& cluster, const ModelConfig& model);

// `t` with one type at both ends of its pipelines: in every class of two stage types or more, the first stage
// of the last run of the last stage's types moved to the front (the first template), or the last stage of the
// first run of the first stage's types moved to the end (the second). Where the deep pipelines of
// deep_spanning_templates_over_every_gpu put a type on slow NICs first, its stage holds the embedding, whose
// gradient all-reduce over the replicas waits on those NICs: on 342 GPUs of H100-PCIe (6.25 GB/s of NIC per
// GPU), L4 and MI300X with gpt3-6.7b, Sailor's twelve 15-stage pipelines start and end with MI300X stages,
// and the same stages with every MI300X stage last price 12 % slower. Canonical, distinct, each with an
// empty template_problem and a token form, t itself left out.
std::vector<Template> one_type_at_both_ends(const Template& t, const Cluster& cluster, const ModelConfig& model);

// The stages of `t` dealt into pipelines that cross its GPU types: into P / 2, P - 1, P and P + 1 pipelines (P:
// t's pipelines, replicas counted), every replica's stages kept whole, type by type in rule 4's order (the
// slowest first, so the fastest takes the last layers and the head), each stage to the pipeline with the fewest
// stages so far (the lowest index of equal ones); pipelines with the same stages form one class. None unless
// t's stages hold one type each and t uses two types or more. Where the climbs end in one class per type,
// Sailor's plans (Strati et al. SOSP'25) put both types in every pipeline: on 116 GPUs of A10, A10G, L40S and
// P100 with gpt3-2.7b, the climbs' `1x[5 A10G stages]; 1x[6 A10G stages]; 2x[7 L40S stages]` (TP 2) simulates
// 5 % slower than the same stages dealt into 3 pipelines of 3-4 A10G and 4-5 L40S stages. Canonical, distinct,
// each with an empty template_problem and a token form, t itself left out. Proposed by the arachne planner
// for its best template after its descent.
std::vector<Template> pipelines_across_types(const Template& t, const Cluster& cluster, const ModelConfig& model);

// The one-stage-per-node pipeline of fast_subset_templates where the nodes of the j fastest types outnumber
// the layers (which it leaves out): one stage per layer, the nodes of least peak FLOP/s idle, the stages in
// ascending peak FLOP/s, so that the strongest takes the last layer and the head. On many one-GPU nodes of a
// fast type beside one large node of another, Sailor's plan has this shape: one-GPU stages, then the large
// node as one TP stage. Proposed by the arachne planner after its climb, like the uniform layouts, so that
// they cannot steer it.
std::vector<Template> node_stage_templates_over_layers(const Cluster& cluster, const ModelConfig& model);

// Data parallelism at one TP width over the types whose nodes hold it, the others idle: per TP width t > 1,
// one pipeline class per such type, rule 1's pipeline of that type at TP t, where at least two types hold t
// and some type does not. Where a type's one-GPU nodes sit on slow NICs, leaving it out of the gradient
// all-reduce at TP 2 can win over every type's own best width: on 56 GPUs of GH200 (one-GPU nodes, 6.25 GB/s
// NICs), H100-PCIe and MI250X with opt-350m, `4x[H100-PCIe:tp2x1]; 16x[MI250X:tp2x1]` simulates 15 % faster
// than the 32 one-GPU MI250X replicas that the climb reaches otherwise
// (ArachnePlanner.LeavesOutTheTypesWhoseNodesHoldNoTpGroup). fast_data_parallel_templates chooses its types
// by peak FLOP/s and each type's own width, which keeps the GH200s. Canonical, distinct, each with an empty
// template_problem and a token form. Proposed by the arachne planner after its climb, like the uniform
// layouts, so that they cannot steer it.
std::vector<Template> tp_data_parallel_templates(const Cluster& cluster, const ModelConfig& model, long global_batch = 0);

// The templates among `templates` that use expert parallelism, each with every stage's EP removed (every
// expert on every rank of its stage), canonical, distinct, those with an empty template_problem and a token
// form only. Rule 4's deep pipelines take EP over their replicas, which on one-GPU nodes puts every MoE
// layer's all-to-all on the NICs between the replicas, though rule 4 sizes their depth with every expert on
// every rank (heuristic_templates), so they fit without it: on 219 GPUs of A10, A100-40 (one-GPU nodes) and H100 with deepseek-moe-16b, six
// replicas of rule 4's pipeline over A100-40 and H100 simulate 4.5 times faster without EP than with EP 2.
std::vector<Template> without_expert_parallelism(const std::vector<Template>& templates, const Cluster& cluster,
                                                 const ModelConfig& model);

// Every uniform layout of the fastest GPU type's nodes (peak FLOP/s), the other types idle: per TP width that
// a node holds and that divides the heads, every depth up to the layers that splits the TP groups the nodes
// hold evenly, as many identical pipelines as that leaves (at most one per sample of the global batch), and
// per depth that divides the layers as many pipelines as Sailor's search runs (as many as the groups hold, the
// global batch split unevenly) and as Megatron-LM's grid runs (the largest count the groups hold that divides
// the global batch), so that some GPUs may stay idle; MoE: at every EP width over the
// replicas of kEpWidths that divides both the expert count and the replicas. The grid that Megatron-LM's and
// AMP's searches cover (Narayanan et al. SC'21; Li et al. NeurIPS'22), which Megatron-LM runs on one type of a
// heterogeneous cluster (planner/baselines/megatron: the most numerous). On 164 one-GPU A100-40 and 85 two-GPU
// H100-PCIe nodes with gpt3-1.3b, 128 one-GPU H100-PCIe replicas simulate 1 % faster than the climbs' plan
// (ArachnePlanner.PricesTheUniformLayoutsOfTheFastestTypesNodes); the grid of every type cost 7 % more
// instructions on the arachne benchmark's four-type cluster, that of the fastest 6 %, and on the gate sets the
// plans that gained were all on the fastest type. Canonical, distinct, each with an empty template_problem and
// a token form (a replica count outside kCounts has none). Priced by the arachne planner after its local
// search.
std::vector<Template> uniform_templates(const Cluster& cluster, const ModelConfig& model, long global_batch = 0);

}  // namespace arachne::planner
