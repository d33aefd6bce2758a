// `arachne`: the learned planner. Planning is a search over structural templates (planner/template/):
//   1. features of the request (planner/arachne/features.h);
//   2. templates: the previous plan's template first when re-planning (warm start), then the `beam` most
//      probable templates of the policy (plain-C++ inference of the exported weights, masked beam search
//      over the token grammar; planner/arachne/policy_net.h). The ablations replace the policy by another
//      source, everything else equal (PlanRequest::arachne_templates): `random` = `beam` templates drawn by
//      seeded random walks over the grammar, `heuristic` = the first `beam` templates of the hand-written
//      generator, `exhaustive` = every template of the restricted enumeration, at most
//      arachne_exhaustive_cap of them (random and exhaustive use the restricted space the training labels
//      come from, LabelOptions::enumeration in planner/arachne/labeler.h); the default source (policy+
//      heuristic) adds the heuristic generator's templates, data parallelism over the fastest GPU types
//      only (fast_data_parallel_templates) and kArachneDeviceGroupTemplates device-group
//      templates (one pipeline whose stages hold many data-parallel TP groups, Metis's shape;
//      device_group_templates in planner/template/enumerate.h), which the local search (step 3) folds,
//      unfolds, widens with idle GPUs and splits into pipelines of different depths
//      (planner/template/neighbors.h), where the restricted space holds at most kArachneWholeSpaceUpTo
//      templates (clusters of a few GPUs), every one of them, and last deep pipelines over the fastest GPU
//      types only, the others idle (kArachneFastSubsetTemplates per subset: fast_subset_templates), a
//      secondary source of the local search: its best template takes one slot of its own in the first
//      round (LocalSearchOptions::secondary), so that these deep pipelines, which often price best at the
//      start, do not take the slots of the other sources' best templates; the default source also prices
//      every uniform layout of the fastest type's nodes (uniform_templates: the grid Megatron-LM's and AMP's
//      searches cover), and on any cluster whose nodes outnumber the layers the one-stage-per-node
//      pipelines with the weakest nodes idle (node_stage_templates_over_layers), and on any cluster data
//      parallelism at one TP width over the types whose nodes hold it (tp_data_parallel_templates), after
//      the local search,
//      so that they cannot steer the climb, each with both
//      placements of its replicas (pipeline by pipeline, and stage by stage: the data-parallel peers of a
//      stage on one node), as are then the kArachneReplacedTemplates best templates of the climb, and last
//      (every source) the folds of the kArachneFoldedTemplates best templates priced (fold_neighbors), the
//      kArachneRepartitionedTemplates best templates with the other min-max layer partition, the
//      kArachneRecomputedTemplates best templates with every recompute level priced, and a descent
//      of up to kArachneDescentSteps moves from each of the kArachneDescentStarts best templates (the best
//      alone above kArachneRunnerUpDescentMaxGpus GPUs) and from the best of each climb searching on its own
//      (step 3) where it is not one of them, with a completion cap of its own (with both placements of
//      replicas where the best template's run faster placed stage by stage), the last template of each
//      again with every
//      recompute level priced, and the kArachneEvenSplitPlans best plans with each pipeline's layers split
//      evenly by count where the estimator prices that lower (these two kept apart: PricedPlans); after the
//      descent, on clusters of two types or more, deep pipelines over every type that leave no GPU idle
//      (deep_spanning_templates_over_every_gpu), with both placements, and a descent from the best of them
//      where it prices below every plan before (its plans kept with the descent's), and last, on clusters
//      of at most kArachneTypesOfMaxGpus GPUs, further templates built from the best one and Metis's search
//      over device groups as a descent (CandidateSearch::price_across_types);
//   3. the local search from the templates of step 2 (planner/template/neighbors.h: `--refine` rounds of
//      moves from the best-priced templates, more while they gain), and for the default source a second one
//      from the heuristic generator's templates alone, sharing the first one's prices, so that the
//      generator's climb is not lost where the other sources' better-priced starts lead the first one to a
//      worse end (on clusters of at most kArachneGeneratorOwnBoundMaxGpus GPUs as a search of its own: its
//      bound is its own best price, at most kArachneGeneratorClimbSlack times the best before it, not the
//      best of every climb), and a third from the policy's templates alone with the first one's rounds and
//      extension, as a search of its own (kArachnePolicyClimbSlack; on clusters of more than
//      kArachnePolicyOwnBoundMaxGpus GPUs for the `--refine` rounds only, under the shared bound), a fourth
//      from the deep pipelines over
//      the fastest types alone and a fifth from those of them that use EP, with every stage's EP removed
//      (without_expert_parallelism), each for the `--refine` rounds only (no extension), and a sixth, with
//      the first one's rounds and extension, from the device-group templates with the slowest type first
//      (device_group_templates with TypeOrder::SlowestFirst: Metis's shape with its types in rule 4's
//      order, the fastest type on the last stage); on clusters of more
//      than kArachneRunEndsAboveGpus GPUs the climbs and the descent move stages only at the ends of runs
//      of identical stages; completion of every template by rule and a small candidate set, each candidate priced by the fast
//      estimator (planner/template/completion.h, estimator.h), except a template whose GEMM lower bound, or a
//      memory level whose analytic split, is no faster than the best price so far; a wall-clock budget stops it (the templates
//      completed so far are kept); when no template of the source completes within memory, steps 2-3 run
//      again with a beam kArachneWidenFactor times as wide, up to kArachneWidestBeam (every source but
//      `exhaustive`, whose space is fixed): where the first templates all run out of memory, more of them
//      are tried before the planner gives up;
//   4. the best-priced plans of the `simulate` best-priced structures simulated (each counted against the
//      request's budget), but only those priced within arachne_simulate_within of the best once one simulated
//      plan fits: one plan per structure (simulation_structure: another completion of a template simulated
//      already, or its fold, is skipped, so that the estimator's error on one structure cannot fill every
//      simulation) and rule for equal partitions - where a structure was completed with both rules, its
//      best-priced plan of each is simulated (the estimator ranks the two partitions' fill and drain less
//      surely than the simulator: the one priced faster simulated 2.6 % slower on a held-out configuration);
//      then the descent's best plan, where it is priced below all of them (an addition: it displaces no plan
//      that would be simulated without the descent), and the best even layer split where it is priced below
//      the plan simulated fastest (an addition too); each distinct plan (execution_key) is simulated once -
//      both rules give the same plan where no layer split has a tie, as in one-stage pipelines; the fastest
//      simulated plan is returned.
// No LibTorch: the policy's weights are read from a file (default: the shipped configs/policy/
// arachne.weights; DESIGN.md "Planners").
#pragma once
#include <string>

#include "planner/planner.h"
#include "planner/template/completion.h"
#include "planner/template/neighbors.h"
#include "planner/template/template.h"

namespace arachne::planner {

// Where the shipped policy weights are (configs_dir()/policy/arachne.weights).
std::string default_policy_path();

class PolicyNet;
// The policy of a weights file (empty: the shipped one), read once per process and kept. Throws
// InputError naming the file when it is missing or malformed; commands call it before planning so that
// bad input fails first.
const PolicyNet& load_policy(const std::string& path_or_empty);

// The template sources by name ("policy", "random", "heuristic", "exhaustive"), and back; the parser
// throws InputError(where, ...) for an unknown name.
std::string template_source_name(TemplateSource source);
TemplateSource parse_template_source(const std::string& text, const std::string& where);
// How an arachne row is labelled: "arachne" with the policy, "arachne[random]" etc. for an ablation.
std::string arachne_label(TemplateSource source);

// Step 2: the warm-start template (when the previous plan's template runs on this cluster), then the
// source's templates in its order, without repeats. *complete (optional) is set to false when the
// exhaustive source's cap cut the enumeration.
std::vector<Template> proposed_templates(const PlanRequest& request, long global_batch, bool* complete = nullptr);

// The plans steps 2-3 priced, each list best price first: those of every step but the last descent, and the
// descent's (with its last template's recompute levels), kept apart so that in step 4 they add a simulation
// instead of displacing one.
struct PricedPlans {
  std::vector<CompletedPlan> plans;
  std::vector<CompletedPlan> descent;     // the descent's, and those priced after it
  std::vector<CompletedPlan> even_split;  // the best plans with an even layer split, where it prices lower
  bool empty() const { return plans.empty() && descent.empty(); }
  std::vector<CompletedPlan> merged() const;  // both lists in one, best price first
};

// Steps 2-3 of the planner: the proposed templates completed and priced, every completed plan (what step 4
// simulates from); *priced (optional): the estimator's pricings. Deterministic unless the request's
// wall-clock budget cuts it.
PricedPlans arachne_priced_plans(const PlanRequest& request, long global_batch, long* priced = nullptr);

// The --refine option's help text (plan, evaluate), with the extension rules' constants below.
std::string refine_help();

// The structure a plan is simulated for in step 4: its template with every class unfolded (the groups'
// common factor per stage moved to the replicas; planner/template/neighbors.h fold moves), so that r
// identical pipelines and one pipeline of r-group stages, which run the same GPUs and stages, count as one.
Template simulation_structure(const Plan& plan, const Cluster& cluster);

// Step 4 simulates a best-priced plan after the first only while its price is within a factor of the best
// price (once a simulated plan fits): a plan priced further off has not been seen to simulate faster, and
// each simulation of a large cluster costs as much as hundreds of pricings. The factor is wider for MoE
// models, whose prices are less sure (the estimator's expected-load routing and all-to-alls timed alone).
// Measured by bench/bench_arachne_gaps.cpp on held-out configurations of 8-1,024 GPUs: where the fastest
// simulated plan was not the best-priced, it was priced at most 0.16 % above the best on dense models (3 of
// 80 configurations, `build/bench_arachne_gaps 80 1 1024`: the three best-priced plans simulated) and 0.27 %
// (5 of 80, `build/bench_arachne_gaps 80 2 1024 5`: the five best-priced), and at most 5.73 % on MoE models
// (5 of 80, seed 1) and 0.00 % (2 of 80, seed 2). 2 % and 10 % leave those margins.
inline constexpr double kArachneSimulateWithinDense = 1.02;
inline constexpr double kArachneSimulateWithinMoe = 1.10;
inline double arachne_simulate_within(const ModelConfig& model) {
  return model.moe ? kArachneSimulateWithinMoe : kArachneSimulateWithinDense;
}

// On clusters of at most kArachneExtendMaxGpus GPUs, where a template completes in about a millisecond,
// the local search goes on past `--refine` rounds while fewer than kArachneExtendBelow templates were tried
// (LocalSearchOptions::extend_below), up to kArachneMaxRounds
// rounds. Measured on 24 held-out configurations of 4-10 GPUs (results/arachne-evaluation-small): 1, 3 and 6
// rounds give 5, 3 and 1 losses to the best baseline for 0.015, 0.025 and 0.040 s median planning time.
// 600 templates rather than 300: the same plans on those 24 and on the K-sweep's 27 cases, 0.5-1.1 % faster
// ones on 3 of 52 held-out configurations of up to 1,024 GPUs, and Mixtral on 16 A100-80 and 16 V100-32
// (configs/experiments/paper.yaml) 70.09 -> 68.15 s, where the climb to Metis's deep layout needs a fifth
// round.
// Larger clusters extend only while a round gains (below): one round at 1,024 GPUs costs hundreds of milliseconds.
inline constexpr int kArachneExtendMaxGpus = 64;
inline constexpr long kArachneExtendBelow = 600;
inline constexpr int kArachneMaxRounds = 6;
// On every cluster the local search also goes on past `--refine` rounds, up to kArachneMaxRounds, while the
// round before lowered the best estimated price by at least this fraction (LocalSearchOptions::
// extend_while_gain): rounds are spent where they still pay.
inline constexpr double kArachneExtendWhileGain = 0.005;
// ... pricing at most this many times the templates of the `--refine` rounds (LocalSearchOptions::
// extend_max_factor): the climb at most triples the planning work.
inline constexpr double kArachneExtendMaxFactor = 3;
// Past kArachneMaxRounds the climb goes on only while a round gains (kArachneExtendWhileGain), up to this
// many rounds in all (LocalSearchOptions::max_gaining_rounds; kArachneExtendMaxFactor still caps the work),
// and on clusters of at most kArachneLongClimbMaxGpus GPUs, where a template completes in about a
// millisecond or less, also while fewer than kArachneExtendBelow templates were tried. Measured (arachne-only
// runs of fresh seeds 12-20, the 12 and 40 held-out, small and oracle-ratio sets, against the same build
// without them): fresh seed 13 config 23 (gpt3-1.3b on 15 GPUs of A10G, L4 and P100), whose climb was still
// gaining 2.6 % a round when six rounds cut it, 0.994 -> 1.065 x Metis; eight other cells of 7-22 GPUs
// 0.04-2.8 % faster, none slower; 5.6 % more pricings in all. The gaining rounds alone changed three of
// those cells (+0.3 % pricings). The longer climb on every cluster of up to 64 GPUs changed 13 cells (none
// slower) for 12 % more pricings, and made the paper's llama2-7b cell on 32 GPUs of H100, A100-40 and
// V100-32 1.5 % faster for 9x its planning time (0.20 -> 1.85 s).
inline constexpr int kArachneMaxGainingRounds = 12;
inline constexpr int kArachneLongClimbMaxGpus = 16;
// The policy's own climb (step 3 of the header) runs the first climb's rounds and extension (it ran the
// `--refine` rounds only) and searches as if it were alone: a template is left unpriced only when it cannot
// beat that climb's best price, or this many times the best price of the climbs before it, not when it
// cannot beat their best. On 11 of the 215 configurations of fresh seeds 12-20 the policy's templates alone
// (the `policy` ablation) had found a faster plan than the default source, by up to 7.3 % (gpt3-13b on 32
// GPUs of GH200, H100 and L4, seed 19 config 0: the rounds; llama2-13b on 128 GPUs of A10, A100-40 and L4,
// config 7 of the 12 held-out, 8.6 %: the own bound and the descent from the climb's best). Infinity (the
// policy alone's own search) cost the benchmark's gpt3-13b plan 5.7x the planning time (2,212 pricings
// against 896) for the same plan; 1.1 kept every gain of infinity on those cells but one of 1.5 %.
inline constexpr double kArachnePolicyClimbSlack = 1.1;
// ... on clusters of at most this many GPUs; above, the policy's climb runs the `--refine` rounds only under
// the other climbs' bound, as before. On the benchmark's 1,024 GPUs the own bound cost 39 % more
// instructions for the same plan (2.078 -> 2.889 G, 972 pricings against 896), and no cell above 512 GPUs
// of the planning-time sets or the paper's comparisons gained from it.
inline constexpr int kArachnePolicyOwnBoundMaxGpus = 512;
// The generator's own climb searches so too, with this slack, on clusters of at most
// kArachneGeneratorOwnBoundMaxGpus GPUs, where a template completes in about a millisecond (on the
// benchmark's 1,024 GPUs it took 2.3x the pricings even at 1.1): gpt3-13b on 12 GPUs of H200 and V100-16
// (fresh seed 28 config 22) 0.998 -> 1.029 x Metis, with 1.25 and 1.5 alike and not with 1.1.
inline constexpr double kArachneGeneratorClimbSlack = 1.25;
inline constexpr int kArachneGeneratorOwnBoundMaxGpus = 64;

// The search over device groups (CandidateSearch::search_device_groups, last of all on clusters of at most
// kArachneTypesOfMaxGpus GPUs) prices under a bound of its own, this many times the best price when it
// starts: device-group templates priced further above are left unpriced, and where every start is, the
// search ends there.
inline constexpr double kArachneDeviceGroupSlack = 1.25;
// ... and lays each type's stages anew for at most this many rounds from each template it descends from.
inline constexpr int kArachneDeviceGroupRounds = 3;

// Device-group templates proposed by the default source: rule 3 of the heuristic generator folded at up to
// this many replica counts (each halves the one before, so three cover replica counts a factor of 4 apart);
// as many with the slowest type first are climbed on their own (step 3 of the header).
inline constexpr int kArachneDeviceGroupTemplates = 3;

// Deep pipelines over the fastest GPU types proposed by the default source (fast_subset_templates in
// planner/template/enumerate.h): at up to this many replica counts per subset of types.
inline constexpr int kArachneFastSubsetTemplates = 2;

// The default source also proposes the whole restricted space where it holds at most this many templates:
// on 2-4 GPUs (the space of a 4-GPU two-type cluster holds 100-200), where each completes in about a
// millisecond. Measured on the 40 held-out configurations of 2-5 GPUs of results/arachne-oracle-ratio:
// arachne over the oracle 0.997 -> 0.999 in geometric mean, minimum 0.958 -> 0.980, median planning time
// 4.5 -> 6.6 ms (README, "Against the oracle").
inline constexpr long kArachneWholeSpaceUpTo = 200;
// ... looked for only on clusters of at most this many GPUs (one 8-GPU node's space already holds more; the
// walk to the cap would cost ~2 % of a 1,024-GPU plan).
inline constexpr int kArachneWholeSpaceMaxGpus = 16;

// After the local search, its best templates with several replicas of a class, up to this many, are
// completed again with the replicas also placed stage by stage (the data-parallel peers of a stage on one
// node; CompletionOptions::data_parallel_placement), which the climb does not price (it would double every
// completion). Measured on the fresh seeds 12-20: 2, 4 and 16
// all turn seed 12 config 3 from 0.978 into 1.106 x Sailor; but 4 and 16 change the plans of the paper's
// Alibaba replay, whose extra reconfigurations and lost work cost 15 % of its tokens, and 2 does not.
inline constexpr int kArachneReplacedTemplates = 2;
// Last, the best templates priced so far, up to this many, have their folds (fold_neighbors: a class's
// replicas as more TP groups per stage, and back) completed with both placements: the templates that the
// steps after the climb price best (uniform layouts, replicas placed stage by stage) were never expanded,
// and on one node a stage's data-parallel peers run faster as TP groups of one pipeline than as replicas.
inline constexpr int kArachneFoldedTemplates = 2;
// Then a descent from the best templates priced so far: to the best-priced neighbour while that is cheaper,
// at most this many steps and this many templates completed (a multi-class template over hundreds of GPUs
// has thousands of neighbours). It takes the climbs' prices, except where the best template was priced lower
// after the climbs than by them (its replicas run faster placed stage by stage): then a neighbour with
// replicas that the climbs priced is completed again with both placements. Measured (arachne-only runs of
// fresh seeds 12-24, the 12 and 40 held-out, small, oracle-ratio and planning-time sets, against the build
// without it): llama2-13b on 130 GPUs of A10, GH200, MI300X and V100-32 (fresh seed 32 config 2) 0.989 ->
// 1.007 x Sailor, deepseek-moe-16b on 383 GPUs of H100, H200 and P100 (seed 17 config 3) +1.2 %, no cell
// slower, 0.6 % more pricings; the benchmark's plans and instructions unchanged.
inline constexpr int kArachneDescentSteps = 4;
// ... from each of this many best-priced distinct templates, in order (the completion cap shared): the best
// may be a local minimum whose near-equal runner-up is not. Measured with 2 against 1 (arachne-only runs of
// fresh seeds 12-36, the 12 and 40 held-out, small, oracle-ratio and planning-time sets): 21 of 764 cells
// faster, by 0.08 % to 7.4 % (llama2-7b on 317 GPUs of H100-PCIe, H200, MI300X and P100, fresh seed 14
// config 10), none slower, 6.2 % more pricings (with the limit below); gpt3-2.7b on 40 A100-40 (fresh seed
// 40 config 9) 0.980 -> 1.007 x Metis. With 3: 13 cells more faster (up to 9.0 %), none slower, 4.1 % more
// pricings, but the benchmark's gpt3-13b plan took 39 % more instructions than with 2, for a plan 0.01 %
// faster.
inline constexpr int kArachneDescentStarts = 2;
// ... on clusters of at most this many GPUs; on larger ones from the best template alone. Where 2 gained,
// the clusters held at most 317 GPUs; on the 1,024 GPUs of the benchmark and of the planning-time
// experiment it gained nothing, for 15 % more instructions and 55 % more pricings.
inline constexpr int kArachneRunnerUpDescentMaxGpus = 512;
// The deep pipelines over the best template's types alone (deep_spanning_templates_over_the_types_of) are
// priced on clusters of at most this many GPUs. Where they gained (arachne-only runs of the evaluation sets,
// 1,552 cells: 19 faster, none slower), the clusters held at most 342 GPUs; on the 1,024 GPUs of the
// benchmark they changed no plan, for 20 % more instructions (placing and partitioning up to 192 deep
// templates that no estimate follows).
inline constexpr int kArachneTypesOfMaxGpus = 512;
// The most simulations step 4 runs for `--simulate-top N`: each of the N structures under both rules for
// equal partitions, the descent's plan and the best even layer split.
inline constexpr int arachne_max_simulations(int simulate_top) { return 2 * simulate_top + 2; }
inline constexpr int kArachneDescentMaxCompleted = 200;
// Then the best templates priced so far, up to this many, are completed once more with the other min-max
// layer partition (PartitionTies::LatestCut: of equal splits, earlier stages take the extra layers): both
// split the layers at the same slowest stage time, but the 1F1B fill and drain differ, and the estimator
// prices that.
inline constexpr int kArachneRepartitionedTemplates = 3;
// And the best templates priced so far, up to this many, are completed once more with every recompute level
// that memory leaves open priced (CompletionOptions::price_every_recompute_level): fewer, larger
// micro-batches under recompute hide more of the gradient reduction behind the last backward pass, which the
// analytic split (compute only) leaves out; so is the descent's last template (below). The training labels
// do not price these levels.
inline constexpr int kArachneRecomputedTemplates = 3;
// And the best plans priced so far, up to this many, with each pipeline's layers split evenly by count (the
// extra layers on the earliest stages, as FlashFlex splits them; Yan et al. 2024) instead of the min-max
// partition of stage times, kept where the estimator prices that lower: the min-max split balances the
// slowest stage, but the 1F1B fill and drain favour the heavier stages first, and on nine one-GPU MI250X
// nodes with gpt3-6.7b FlashFlex's 4,4,4,4,4,3,3,3,3 layers simulate 0.9 % faster than min-max's
// 3,4,4,4,3,3,4,4,3 (ArachnePlanner.MatchesTheBaselinesWhereItsTemplatesReachTheirStructure).
inline constexpr int kArachneEvenSplitPlans = 3;
// And the best plan of each of this many best-priced structures (simulation_structure), so that a structure
// whose min-max split prices a little above the best is split evenly too: on 13 one-GPU H100 nodes with
// llama2-7b, one 13-stage pipeline with FlashFlex's even split (3 layers on the first six stages) is priced
// 1.4 % below arachne's best 12-stage plan, its min-max split 2.2 % above.
inline constexpr int kArachneEvenSplitStructures = 8;
// On clusters of more than this many GPUs the climbs and the descent move stages only at the ends of runs of
// identical stages (StageMoves::RunEnds in planner/template/neighbors.h); on smaller clusters, and in the
// labeler's search, every stage. Measured (arachne-only runs of the fresh seeds 12-20, the 12 and 40
// held-out, small, oracle-ratio and planning-time sets, against every stage): on their 11 clusters of more
// than 512 GPUs, and the paper's 1,024-GPU one, the same plans but one, 1.4 % faster, with 1.3-3.1x fewer
// pricings on five cells (that one, Mixtral on 1,008 GPUs: 12,120 -> 3,903 pricings, 55 -> 9.0 s); on
// clusters of 129-512 GPUs it moved 17 cells by -7.2 % to +8.5 % (product +12 %) and three of the paper's
// cells by -0.3 % to -2.9 %, on smaller ones 16 cells by -13.8 % to +4.5 % (product -18 %): a narrower climb
// ends elsewhere, where a climb over every stage costs little.
inline constexpr int kArachneRunEndsAboveGpus = 512;

// When no proposed template completes within memory, the beam widens by this factor, up to this width.
inline constexpr int kArachneWidenFactor = 4;
inline constexpr int kArachneWidestBeam = 128;

class ArachnePlanner : public Planner {
 public:
  std::string name() const override { return "arachne"; }
  PlanResult plan(const PlanRequest& request) override;
};

}  // namespace arachne::planner
