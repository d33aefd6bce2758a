#include "planner/arachne/arachne_planner.h"

#include <algorithm>
#include <array>
#include <filesystem>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <unordered_map>

#include "planner/arachne/features.h"
#include "planner/arachne/labeler.h"
#include "planner/arachne/policy_net.h"
#include "planner/common/partition.h"
#include "planner/common/evaluator.h"
#include "planner/template/completion.h"
#include "planner/template/estimator.h"
#include "planner/template/enumerate.h"
#include "planner/template/neighbors.h"
#include "planner/template/tokens.h"
#include "sim/io/input_error.h"

namespace arachne::planner {
namespace {

struct SourceName {
  TemplateSource source;
  const char* name;
};
constexpr std::array<SourceName, 5> kSourceNames{{{TemplateSource::PolicyAndHeuristic, "policy+heuristic"},
                                                  {TemplateSource::Policy, "policy"},
                                                  {TemplateSource::Random, "random"},
                                                  {TemplateSource::Heuristic, "heuristic"},
                                                  {TemplateSource::Exhaustive, "exhaustive"}}};

}  // namespace

std::string template_source_name(TemplateSource source) {
  for (const SourceName& s : kSourceNames)
    if (s.source == source) return s.name;
  throw std::invalid_argument("unknown template source");
}

TemplateSource parse_template_source(const std::string& text, const std::string& where) {
  std::string known;
  for (const SourceName& s : kSourceNames) {
    if (text == s.name) return s.source;
    known += (known.empty() ? "" : ", ") + std::string(s.name);
  }
  throw InputError(where, "unknown template source '" + text + "' (known: " + known + ")");
}

std::string arachne_label(TemplateSource source) {
  return source == PlanRequest{}.arachne_templates ? "arachne" : "arachne[" + template_source_name(source) + "]";
}

const PolicyNet& load_policy(const std::string& path_or_empty) {
  const std::string path = path_or_empty.empty() ? default_policy_path() : path_or_empty;
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<PolicyNet>> cache;
  const std::lock_guard<std::mutex> lock(mu);
  auto& slot = cache[path];
  if (!slot) slot = std::make_unique<PolicyNet>(PolicyNet::load(path));
  return *slot;
}

namespace {

std::vector<Template> policy_templates(const PlanRequest& r, long global) {
  if (r.arachne_templates != TemplateSource::Policy && r.arachne_templates != TemplateSource::PolicyAndHeuristic) return {};
  const PolicyNet& net = load_policy(r.arachne_policy);
  const std::vector<std::string> types = type_order(*r.cluster);
  std::vector<Template> out;
  for (const DecodedSequence& d : net.beam(request_features(*r.cluster, types, *r.model, global), TokenGrammar(*r.cluster, *r.model), r.arachne_beam))
    out.push_back(decode(d.tokens, types));
  return out;
}

// Every template of the restricted space when it holds at most kArachneWholeSpaceUpTo of them (clusters of a
// few GPUs), else none. Larger clusters are not walked: their spaces are larger.
std::vector<Template> whole_small_space(const Cluster& cluster, const ModelConfig& model, EnumerationLimits space) {
  if (cluster.total_gpus() > kArachneWholeSpaceMaxGpus) return {};
  space.max_templates = kArachneWholeSpaceUpTo + 1;  // one more: a walk stopped by the cap is not complete
  Enumeration e = enumerate_templates(cluster, model, space);
  if (!e.complete) return {};
  return std::move(e.templates);
}

// The default source's deep pipelines over the fastest types: proposed last, and a secondary source of the
// local search (LocalSearchOptions::secondary: one slot of their own in the first round).
std::set<Template> secondary_templates(const PlanRequest& r, long global) {
  if (r.arachne_templates != TemplateSource::PolicyAndHeuristic) return {};
  const std::vector<Template> ts = fast_subset_templates(*r.cluster, *r.model, kArachneFastSubsetTemplates, global);
  return {ts.begin(), ts.end()};
}

// The source's templates (before the warm start and repeats are handled); `policy`: policy_templates(r, global).
std::vector<Template> source_templates(const PlanRequest& r, long global, const std::vector<Template>& policy, bool* complete) {
  const EnumerationLimits space = LabelOptions{}.enumeration;  // the restricted space of the training labels
  switch (r.arachne_templates) {
    case TemplateSource::PolicyAndHeuristic: {
      std::vector<Template> both = policy;
      for (Template& t : heuristic_templates(*r.cluster, *r.model, r.arachne_beam, global)) both.push_back(std::move(t));
      for (Template& t : device_group_templates(*r.cluster, *r.model, kArachneDeviceGroupTemplates, global)) both.push_back(std::move(t));
      for (Template& t : fast_data_parallel_templates(*r.cluster, *r.model, global)) both.push_back(std::move(t));
      for (Template& t : whole_small_space(*r.cluster, *r.model, space)) both.push_back(std::move(t));
      for (const Template& t : secondary_templates(r, global)) both.push_back(t);
      return both;
    }
    case TemplateSource::Policy:
      return policy;
    case TemplateSource::Random:
      return sample_templates(*r.cluster, *r.model, space, r.arachne_beam, r.seed);
    case TemplateSource::Heuristic:
      return heuristic_templates(*r.cluster, *r.model, r.arachne_beam, global);
    case TemplateSource::Exhaustive: {
      EnumerationLimits capped = space;
      capped.max_templates = r.arachne_exhaustive_cap;
      Enumeration e = enumerate_templates(*r.cluster, *r.model, capped);
      *complete = e.complete;
      return std::move(e.templates);
    }
  }
  throw std::invalid_argument("unknown template source");
}

// proposed_templates with the policy's templates (policy_templates) decoded already: the planner decodes
// them once for its starts and the policy's own climb.
std::vector<Template> proposed_with(const PlanRequest& r, long global, const std::vector<Template>& policy, bool* complete) {
  bool whole = true;
  std::vector<Template> out;
  std::set<Template> seen;
  if (r.previous_plan != nullptr) {
    try {
      Template t = template_of(*r.previous_plan, *r.previous_cluster);
      if (template_problem(t, *r.cluster, *r.model).empty() && seen.insert(t).second) out.push_back(t);
    } catch (const std::invalid_argument&) {
      // The previous plan lies outside the template space (mixed TP in a stage): no warm start.
    }
  }
  for (Template& t : source_templates(r, global, policy, &whole))
    if (seen.insert(t).second) out.push_back(std::move(t));
  if (complete != nullptr) *complete = whole;
  return out;
}

}  // namespace

std::vector<Template> proposed_templates(const PlanRequest& r, long global, bool* complete) {
  return proposed_with(r, global, policy_templates(r, global), complete);
}

namespace {

// What the default source adds beside its starting templates: secondary starts of the local search, and
// templates priced after it (so that they cannot steer the climb), each with both placements of its
// replicas (CompletionOptions::data_parallel_placement; again where the climb priced it with one). Every
// source then has the climb's kArachneReplacedTemplates best templates with replicas completed so too.
struct ExtraTemplates {
  std::set<Template> secondary;
  std::vector<Template> secondary_without_ep;  // climbed on their own after the secondary starts
  std::vector<Template> after;
  std::vector<Template> last;  // priced after the descent (CandidateSearch::price_last)
  bool across_types = false;  // the best template's stages dealt across its types last (pipelines_across_types)
  std::vector<Template> slowest_first_device_groups;  // climbed on their own after the required-round climbs
};

// The default source's heuristic templates, climbed again on their own after the climb from every source:
// a local search that expands its best few templates ends where the best-priced starts lead, and the
// generator's own climb, which those starts can crowd out, then still ends among the candidates.
std::vector<Template> own_climb_templates(const PlanRequest& r, long global) {
  if (r.arachne_templates != TemplateSource::PolicyAndHeuristic) return {};
  return heuristic_templates(*r.cluster, *r.model, r.arachne_beam, global);
}

// The default source's policy templates, climbed again on their own after the generator's, as a search of
// their own (CandidateSearch::climb_on_its_own): where the climb from every source ends below the policy's
// own climb, the policy's best still ends among the candidates. Measured (arachne-only runs of fresh seeds
// 12-20, the 12 and 40 held-out, small and oracle-ratio sets, against the build without it), when it ran
// the `--refine` rounds only under the other climbs' bound: opt-350m on 56 GPUs of GH200, H100-PCIe and
// MI250X (config 0 of the 12 held-out) 1.000 -> 1.153 x the best baseline, deepseek-moe-16b on 748 MI250X
// (config 34 of the 40 held-out) 1.83 x faster, no cell slower, 2.9 % more pricings.
std::vector<Template> policy_climb_templates(const PlanRequest& r, const std::vector<Template>& policy) {
  if (r.arachne_templates != TemplateSource::PolicyAndHeuristic) return {};
  return policy;
}

// The default source's extra templates: secondary_templates, the device-group templates with the slowest type
// first (device_group_templates, TypeOrder::SlowestFirst), and after the climb the uniform layouts of the
// fastest type's nodes (uniform_templates: the grid of Megatron-LM's and AMP's searches) and on any cluster the
// one-stage-per-node pipelines that leave the weakest nodes idle where the nodes outnumber the layers
// (node_stage_templates_over_layers) and data parallelism at one TP width over the types whose nodes hold it
// (tp_data_parallel_templates); and after the descent, on clusters of two types or more, deep pipelines over
// every type that leave no GPU idle (deep_spanning_templates_over_every_gpu, CandidateSearch::price_last).
// Measured for tp_data_parallel_templates (arachne-only runs of fresh seeds 12-24 and the 12 held-out set
// against the build without it): config 0 of the 12 held-out 1.000 -> 1.153 x the best baseline, no other
// cell changed. For the deep pipelines over every GPU (arachne-only runs of fresh seeds 12-56, the 12
// held-out, small, oracle-ratio and planning-time sets, 1,168 cells): gpt3-6.7b on 136 GPUs of GH200, H100
// and H200 (fresh seed 53 config 5) 0.972 -> 1.032 x AMP, two other cells 1.5 % and 11.5 % faster, none
// slower, 1.5 % more pricings. Priced after the climbs instead, with the uniform layouts, they took the
// descent's starts from the templates that had found two cells' plans (gpt3-2.7b on 190 GPUs, fresh seed 27
// config 1: -4.0 %). Last, the best template's stages dealt into pipelines across its GPU types
// (pipelines_across_types), measured on the same 1,168 cells: gpt3-2.7b on 116 GPUs of A10, A10G, L40S and
// P100 (fresh seed 53 config 3) 0.975 -> 1.019 x Sailor, five other cells 0.01 % to 3.6 % faster, none
// slower, 1.9 % more pricings.
ExtraTemplates extra_templates(const PlanRequest& r, long global) {
  if (r.arachne_templates != TemplateSource::PolicyAndHeuristic) return {};
  ExtraTemplates extra;
  extra.secondary = secondary_templates(r, global);
  extra.after = uniform_templates(*r.cluster, *r.model, global);
  extra.secondary_without_ep =
      without_expert_parallelism({extra.secondary.begin(), extra.secondary.end()}, *r.cluster, *r.model);
  extra.slowest_first_device_groups =
      device_group_templates(*r.cluster, *r.model, kArachneDeviceGroupTemplates, global, TypeOrder::SlowestFirst);
  for (Template& t : node_stage_templates_over_layers(*r.cluster, *r.model)) extra.after.push_back(std::move(t));
  for (Template& t : tp_data_parallel_templates(*r.cluster, *r.model, global)) extra.after.push_back(std::move(t));
  extra.last = deep_spanning_templates_over_every_gpu(*r.cluster, *r.model, global);
  extra.across_types = true;
  return extra;
}

// The `count` best-priced distinct templates of `completed`, each with its best price, best first.
std::vector<PricedTemplate> best_distinct_priced(std::vector<PricedTemplate> completed, int count) {
  std::stable_sort(completed.begin(), completed.end(), [](const PricedTemplate& a, const PricedTemplate& b) { return a.priced_s < b.priced_s; });
  std::vector<PricedTemplate> out;
  std::set<Template> seen;
  for (PricedTemplate& p : completed) {
    if (static_cast<int>(out.size()) >= count) break;
    if (seen.insert(p.t).second) out.push_back(std::move(p));
  }
  return out;
}

// The `count` best-priced distinct templates of `completed`, best first.
std::vector<Template> best_distinct(const std::vector<PricedTemplate>& completed, int count) {
  std::vector<Template> out;
  for (PricedTemplate& p : best_distinct_priced(completed, count)) out.push_back(std::move(p.t));
  return out;
}

// The kArachneFoldedTemplates best-priced distinct templates of `completed`: their folds (fold_neighbors)
// priced by `complete`, each once (none that is one of those templates, in order, already).
void fold_best(const std::vector<PricedTemplate>& completed, const Cluster& cluster, const ModelConfig& model,
               const TemplatePricer& complete) {
  std::set<Template> bases, folds;
  for (const Template& base : best_distinct(completed, kArachneFoldedTemplates)) {
    bases.insert(base);
    for (const Template& f : fold_neighbors(base, cluster, model))
      if (bases.count(f) == 0 && folds.insert(f).second) complete(f);
  }
}

// From `start`, steps to its best-priced neighbour (template_neighbors, priced by `price`) while that is
// cheaper, at most kArachneDescentSteps times: the climb leaves its last round's templates and those priced
// after it unexpanded, so a best template may be one move from a better one. Returns the template it stepped
// to last (nullopt: no step).
std::optional<Template> descend_from(PricedTemplate start, const Cluster& cluster, const ModelConfig& model,
                                     StageMoves moves, const TemplatePricer& price) {
  PricedTemplate at = std::move(start);
  std::optional<Template> stepped;
  for (int step = 0; step < kArachneDescentSteps; ++step) {
    std::optional<PricedTemplate> next;
    for (const Template& n : template_neighbors(at.t, cluster, model, moves))
      if (const std::optional<double> p = price(n); p && *p < (next ? next->priced_s : at.priced_s)) next = PricedTemplate{n, *p};
    if (!next) break;
    at = *next;
    stepped = at.t;
  }
  return stepped;
}

// Whether the best-priced template of `completed` was priced by the climbs (`climb_prices`: each class's
// replicas placed one after another) and later lower: its replicas placed stage by stage run faster.
bool replicas_placed_by_stage_win(const std::vector<PricedTemplate>& completed,
                                  const std::unordered_map<Template, std::optional<double>, TemplateHash>& climb_prices) {
  const auto best = std::min_element(completed.begin(), completed.end(),
                                     [](const PricedTemplate& a, const PricedTemplate& b) { return a.priced_s < b.priced_s; });
  if (best == completed.end()) return false;
  const auto climbed = climb_prices.find(best->t);
  return climbed != climb_prices.end() && (!climbed->second || best->priced_s < *climbed->second);
}

// The `count` best-priced distinct templates of `completed`, each priced by `complete` once more.
void complete_best_again(const std::vector<PricedTemplate>& completed, int count, const TemplatePricer& complete) {
  for (const Template& t : best_distinct(completed, count)) complete(t);
}

void sort_by_price(std::vector<CompletedPlan>& plans) {
  std::stable_sort(plans.begin(), plans.end(), [](const CompletedPlan& a, const CompletedPlan& b) { return a.priced_s < b.priced_s; });
}

// The plan with each pipeline's layers split evenly over its stages by count, the extra layers on the
// earliest stages.
Plan even_layer_split(Plan plan) {
  for (Pipeline& p : plan.pipelines) {
    const int first = p.stages.front().layer_begin;
    const std::vector<int> bounds =
        even_partition(p.stages.back().layer_end - first, static_cast<int>(p.stages.size()));
    for (size_t i = 0; i < p.stages.size(); ++i) {
      p.stages[i].layer_begin = first + bounds[i];
      p.stages[i].layer_end = first + bounds[i + 1];
    }
  }
  return plan;
}

// Of the `count` best-priced distinct plans of `plans`, and of the best plan of each of the `structures`
// best-priced structures (simulation_structure), the even layer splits (even_layer_split) that `price` prices
// below their plan, best price first.
std::vector<CompletedPlan> even_split_plans(const std::vector<CompletedPlan>& plans, int count, int structures,
                                            const Cluster& cluster, const PlanPricer& price) {
  std::vector<const CompletedPlan*> by_price;
  for (const CompletedPlan& c : plans) by_price.push_back(&c);
  std::stable_sort(by_price.begin(), by_price.end(), [](const CompletedPlan* a, const CompletedPlan* b) { return a->priced_s < b->priced_s; });
  std::vector<CompletedPlan> out;
  std::set<std::string> seen;
  std::set<Template> shapes;
  for (const CompletedPlan* p : by_price) {
    const CompletedPlan& c = *p;
    const bool shapes_full = static_cast<int>(shapes.size()) >= structures;
    if (static_cast<int>(seen.size()) >= count && shapes_full) break;
    const std::string key = execution_key(c.plan);
    const bool among_best = static_cast<int>(seen.size()) < count;
    if (!seen.insert(key).second) continue;
    const bool best_of_shape = !shapes_full && shapes.insert(simulation_structure(c.plan, cluster)).second;
    if (!among_best && !best_of_shape) continue;
    Plan even = even_layer_split(c.plan);
    if (execution_key(even) == key) continue;
    // Stopped at the plan's own price, an estimate below it is exact.
    if (const std::optional<double> s = price(even, c.priced_s); s && *s < c.priced_s) out.push_back({std::move(even), *s, c.ties});
  }
  sort_by_price(out);
  return out;
}

// The search of steps 2-3 over templates: each template completed and priced against the best plan priced
// so far (a template whose GPUs, or a memory level whose analytic split, cannot beat it is not priced), every
// plan estimated once (estimates kept by execution key), the completions sharing one cache of per-layer
// times and stage memory and one record of the prices given. Stops early (*cut = true) when the wall-clock
// budget is spent.
class CandidateSearch {
 public:
  CandidateSearch(const PlanRequest& r, long global, const PlanTimer& timer, long* priced, bool* cut)
      : r_(r), global_(global), timer_(timer), priced_(priced), cut_(cut), est_(*r.cluster, *r.topo, *r.model),
        cache_(*r.cluster, *r.model), lower_bound_(*r.cluster, *r.model, global),
        stage_moves_(r.cluster->total_gpus() > kArachneRunEndsAboveGpus ? StageMoves::RunEnds : StageMoves::Every) {}

  // The local search climbing from `templates`, with `extra.secondary` its secondary starts; then from
  // own_climb_templates alone (as a search of its own, climb_on_its_own, on clusters of at most
  // kArachneGeneratorOwnBoundMaxGpus GPUs); then from the policy's templates (`policy`: policy_templates) as
  // a search of their own (on larger clusters than kArachnePolicyOwnBoundMaxGpus GPUs for the required
  // rounds, sharing the others' bound); then for the required rounds from `extra.secondary` alone and from
  // `extra.secondary_without_ep`; then from `extra.slowest_first_device_groups` with the first climb's
  // rounds. The climbs share their prices (a template one of them priced is not completed again). Returns
  // the first climb's templates, best first.
  std::vector<PricedTemplate> climb(const std::vector<Template>& templates, const std::vector<Template>& policy,
                                    const ExtraTemplates& extra) {
    const TemplatePricer price = [this](const Template& t) { return climb_price(t); };
    const long extend = r_.cluster->total_gpus() <= kArachneExtendMaxGpus ? kArachneExtendBelow : 0;
    const bool long_climb = r_.cluster->total_gpus() <= kArachneLongClimbMaxGpus;
    LocalSearchOptions first{.rounds = r_.arachne_refine,
                             .width = 2,
                             .extend_below = extend,
                             .max_rounds = long_climb ? kArachneMaxGainingRounds : kArachneMaxRounds,
                             .extend_while_gain = kArachneExtendWhileGain,
                             .extend_max_factor = kArachneExtendMaxFactor,
                             .max_gaining_rounds = kArachneMaxGainingRounds,
                             .secondary = &extra.secondary,
                             .stage_moves = stage_moves_};
    std::vector<PricedTemplate> climbed = local_search(templates, *r_.cluster, *r_.model, price, first);
    LocalSearchOptions same_rounds = first;  // without the secondary starts
    same_rounds.secondary = nullptr;
    if (r_.cluster->total_gpus() <= kArachneGeneratorOwnBoundMaxGpus)
      climb_on_its_own(own_climb_templates(r_, global_), same_rounds, kArachneGeneratorClimbSlack);
    else
      local_search(own_climb_templates(r_, global_), *r_.cluster, *r_.model, price, same_rounds);
    LocalSearchOptions required = same_rounds;
    required.max_rounds = required.max_gaining_rounds = 0;
    if (r_.cluster->total_gpus() <= kArachnePolicyOwnBoundMaxGpus)
      climb_on_its_own(policy_climb_templates(r_, policy), same_rounds, kArachnePolicyClimbSlack);
    else
      local_search(policy_climb_templates(r_, policy), *r_.cluster, *r_.model, price, required);
    // And from the deep pipelines over the fastest types alone, for the required rounds: in the first climb
    // only their best start had a slot of its own.
    local_search({extra.secondary.begin(), extra.secondary.end()}, *r_.cluster, *r_.model, price, required);
    // And from those of them that use EP with it removed, for the required rounds: measured (arachne-only
    // runs of fresh seeds 12-24, the 12 and 40 held-out, small, oracle-ratio and planning-time sets, against
    // the build without it) deepseek-moe-16b on 219 GPUs of A10, A100-40 and H100 (config 2 of fresh seed 23)
    // 0.932 -> 1.051 x the best baseline, two Mixtral cells +1.0 % and +1.6 %, no cell slower, 6 % more
    // pricings on the MoE cells. As starts of the first climb they led it elsewhere (Mixtral on 440 GPUs of
    // GH200, MI300X and T4, config 4 of fresh seed 12: -4.9 %).
    local_search(extra.secondary_without_ep, *r_.cluster, *r_.model, price, required);
    // And from the device-group templates with the slowest type first, with the first climb's rounds: where
    // Metis's shape wins, the climbs from the other starts end in pipelines ordered fastest first. Measured
    // (arachne-only runs of fresh seeds 12-36, the 12 and 40 held-out, small, oracle-ratio and planning-time
    // sets, against the build without it): 12 cells faster, by 0.3 % to 11.9 % (deepseek-moe-16b on 42 GPUs
    // of H200 and P100, config 5 of fresh seed 13), none slower, 6.4 % more pricings; gpt3-13b on the 256
    // GPUs of configs/experiments/planning-time.yaml 0.907 -> 0.958 x Metis; the benchmark's plan and
    // pricings unchanged. As starts of the first climb they led it elsewhere (gpt3-1.3b on 15 GPUs of A10G,
    // L4 and P100, config 23 of fresh seed 13: -4.7 %).
    local_search(extra.slowest_first_device_groups, *r_.cluster, *r_.model, price, same_rounds);
    return climbed;
  }

  // After the climbs, each class's replicas placed both ways: `extra.after`; the first climb's
  // kArachneReplacedTemplates best templates with replicas (`climbed`) again; the folds of the best
  // templates (fold_best).
  void price_after_climbs(const ExtraTemplates& extra, const std::vector<PricedTemplate>& climbed) {
    after_climb_ = true;
    const TemplatePricer price = [this](const Template& t) { return complete(t); };
    for (const Template& t : extra.after) complete(t);
    int polished = 0;
    for (const PricedTemplate& p : climbed) {
      if (polished >= kArachneReplacedTemplates) break;
      if (!has_replicas(p.t)) continue;
      ++polished;
      complete(p.t);
    }
    fold_best(completed_, *r_.cluster, *r_.model, price);
    // Decided here, before the passes below add prices: whether the descent prices the climbs' templates
    // with replicas again (descent_price).
    placement_decides_ = replicas_placed_by_stage_win(completed_, climb_prices_);
  }

  // The kArachneRepartitionedTemplates best templates with the other layer partition of equal max stage time,
  // then the kArachneRecomputedTemplates best with every recompute level priced (complete_best_again).
  void complete_best_again_both_ways() {
    const TemplatePricer price = [this](const Template& t) { return complete(t); };
    ties_ = PartitionTies::LatestCut;
    complete_best_again(completed_, kArachneRepartitionedTemplates, price);
    ties_ = PartitionTies::EarliestCut;
    every_recompute_level_ = true;
    complete_best_again(completed_, kArachneRecomputedTemplates, price);
    every_recompute_level_ = false;
  }

  // The best plans so far with an even layer split, where it prices lower (even_split_plans).
  void price_even_splits() {
    if (timer_.wall_budget_spent(r_)) return;
    even_split_ = even_split_plans(all_, kArachneEvenSplitPlans, kArachneEvenSplitStructures, *r_.cluster, estimate_);
  }

  // A descent (descend_from) from each of the kArachneDescentStarts best templates (the best alone above
  // kArachneRunnerUpDescentMaxGpus GPUs), sharing one cap of kArachneDescentMaxCompleted completions, then
  // from the best template of each climb on its own that is not one of them, with a cap of its own; each
  // descent's last template completed again with every recompute level priced; their plans are kept apart
  // (PricedPlans::descent).
  void descend() {
    before_descent_ = all_.size();
    const int count = r_.cluster->total_gpus() <= kArachneRunnerUpDescentMaxGpus ? kArachneDescentStarts : 1;
    const std::vector<PricedTemplate> best = best_distinct_priced(completed_, count);
    for (const PricedTemplate& start : best) descend_from_start(start);
    for (const PricedTemplate& own : own_climbs_best_) {
      if (std::any_of(best.begin(), best.end(), [&](const PricedTemplate& b) { return b.t == own.t; })) continue;
      descend_with_own_cap(own);
    }
  }

  // `templates` completed after the descent, so that they cannot steer the passes before, and a descent
  // (with a completion cap of its own) from the best of them where it prices below every plan before them;
  // then the best of them with one type at both ends of its pipelines (one_type_at_both_ends), and a descent
  // from the best of those too where it prices below both. Their plans are kept with the descent's.
  void price_last(const std::vector<Template>& templates) {
    const double before = best_priced_;
    const std::optional<PricedTemplate> best = best_completed(templates);
    if (!best) return;
    if (best->priced_s < before) descend_with_own_cap(*best);
    const std::optional<PricedTemplate> ends = best_completed(one_type_at_both_ends(best->t, *r_.cluster, *r_.model));
    if (ends && ends->priced_s < std::min(before, best->priced_s)) descend_with_own_cap(*ends);
  }

  // price_last without the descents: `templates` completed, then the best of them with one type at both ends.
  void price_last_without_descent(const std::vector<Template>& templates) {
    if (const std::optional<PricedTemplate> best = best_completed(templates))
      best_completed(one_type_at_both_ends(best->t, *r_.cluster, *r_.model));
  }

  // descend_from_start with a completion cap of its own.
  void descend_with_own_cap(const PricedTemplate& start) {
    descent_completed_ = 0;
    descend_from_start(start);
  }

  // `templates` completed; the best-priced of them (the first of equal ones), nullopt where none completes.
  std::optional<PricedTemplate> best_completed(const std::vector<Template>& templates) {
    std::optional<PricedTemplate> best;
    for (const Template& t : templates)
      if (const std::optional<double> p = complete(t); p && (!best || *p < best->priced_s)) best = PricedTemplate{t, *p};
    return best;
  }

  // The best template's stages dealt into pipelines across its types (pipelines_across_types), then on
  // clusters of at most kArachneTypesOfMaxGpus GPUs deep pipelines over the best template's types
  // (deep_spanning_templates_over_the_types_of), each priced last; then, priced last without the descents,
  // deep pipelines at its TP widths over its types with the fastest idle one and without its slowest
  // (deep_spanning_templates_at_the_widths_of), and the best template with a few groups of the fastest idle
  // type first (idle_type_stages_first). Those two go without descents because a descent from their best
  // multiplied the pricings of some cells for little gain (gpt3-2.7b on 107 GPUs of L4, L40S, P100 and
  // V100-16: 3.4 s of planning against 0.8 s for 0.4 % more tokens/s). Last, the search over device groups
  // from the device-group templates in both type orders (search_device_groups; the slowest-first ones are
  // extra's).
  void price_across_types(const ExtraTemplates& extra) {
    std::vector<Template> best = best_distinct(completed_, 1);
    if (best.empty()) return;
    price_last(pipelines_across_types(best.front(), *r_.cluster, *r_.model));
    if (r_.cluster->total_gpus() > kArachneTypesOfMaxGpus) return;
    best = best_distinct(completed_, 1);
    price_last(deep_spanning_templates_over_the_types_of(best.front(), *r_.cluster, *r_.model));
    best = best_distinct(completed_, 1);
    price_last_without_descent(deep_spanning_templates_at_the_widths_of(best.front(), *r_.cluster, *r_.model));
    best = best_distinct(completed_, 1);
    price_last_without_descent(idle_type_stages_first(best.front(), *r_.cluster, *r_.model));
    std::vector<Template> device_groups = device_group_templates(*r_.cluster, *r_.model, kArachneDeviceGroupTemplates, global_);
    device_groups.insert(device_groups.end(), extra.slowest_first_device_groups.begin(), extra.slowest_first_device_groups.end());
    search_device_groups(device_groups);
  }

  // Metis's search over device groups (Um et al. ATC'24: every order of the GPU types, each type's stages at
  // TP widths of its own) as a descent in that space, on clusters of two types or more: from each
  // device-group template of `starts` (device_group_blocks), each type's stages laid anew one type at a time
  // (descend_block_widths); then from the best of those, every other order of the types
  // (device_group_block_orders), each descended so too. Priced under a bound of its own, fixed at
  // kArachneDeviceGroupSlack times the best price when it starts, so that an order priced above the search's
  // best so far still descends; its plans are kept with the descent's. The starts are completed again (their
  // estimates are kept, not their completions); on MoE models, which have no variants, that is all it does.
  void search_device_groups(const std::vector<Template>& starts) {
    if (node_sizes_by_type(*r_.cluster).size() < 2) return;
    own_bound_ = kArachneDeviceGroupSlack * best_priced_;
    std::optional<PricedTemplate> best;
    const auto keep = [&best](std::optional<PricedTemplate> p) {
      if (p && (!best || p->priced_s < best->priced_s)) best = std::move(p);
    };
    for (const Template& t : starts) keep(descend_block_widths(t));
    if (best)
      for (const Template& t : device_group_block_orders(best->t, *r_.cluster, *r_.model)) keep(descend_block_widths(t));
    own_bound_.reset();
  }

  // From `t` (in device-group form), for up to kArachneDeviceGroupRounds rounds while a round prices lower:
  // each block in turn laid at its best-priced stage widths (device_group_block_widths) where that prices
  // lower. Returns the template it ends at (nullopt: t is not in device-group form or was not priced).
  std::optional<PricedTemplate> descend_block_widths(const Template& t) {
    const std::optional<std::vector<DeviceGroupBlock>> blocks = device_group_blocks(t);
    if (!blocks) return std::nullopt;
    const std::optional<double> p = device_group_price(t);
    if (!p) return std::nullopt;
    PricedTemplate at{t, *p};
    for (int round = 0; round < kArachneDeviceGroupRounds; ++round) {
      const double before = at.priced_s;
      for (int b = 0; b < static_cast<int>(blocks->size()); ++b)
        for (const Template& n : device_group_block_widths(at.t, b, *r_.cluster, *r_.model))
          if (const std::optional<double> q = device_group_price(n); q && *q < at.priced_s) at = PricedTemplate{n, *q};
      if (!(at.priced_s < before)) break;
    }
    return at;
  }

  // The device-group search's price of a template: each completed once.
  std::optional<double> device_group_price(const Template& t) {
    const auto [it, fresh] = device_group_prices_.try_emplace(t);
    if (fresh) it->second = complete(t);
    return it->second;
  }

  // A descent from `start` (descend_from, priced by descent_price), its last template completed again with
  // every recompute level priced, like the best templates before it.
  void descend_from_start(PricedTemplate start) {
    const TemplatePricer price = [this](const Template& t) { return descent_price(t); };
    if (const std::optional<Template> end = descend_from(std::move(start), *r_.cluster, *r_.model, stage_moves_, price)) {
      every_recompute_level_ = true;
      complete(*end);
      every_recompute_level_ = false;
    }
  }

  // Every plan priced, the descent's apart, best price first (once, at the end: the plans are moved out).
  PricedPlans result() {
    PricedPlans out;
    out.descent.assign(std::make_move_iterator(all_.begin() + static_cast<long>(before_descent_)),
                       std::make_move_iterator(all_.end()));
    all_.resize(before_descent_);
    out.plans = std::move(all_);
    out.even_split = std::move(even_split_);
    sort_by_price(out.plans);
    sort_by_price(out.descent);
    return out;
  }

 private:
  // An early-stopped estimate holds only a lower bound: it is done again when a later caller needs more.
  struct Known {
    std::optional<double> s;  // nullopt: does not fit
    bool lower_bound = false;
  };

  // The estimator's price of the plan, once per plan (the passes after the climbs complete templates again:
  // other placements, partitions, recompute levels; most of their plans were built before).
  std::optional<double> estimate(const Plan& p, double stop_at_s) {
    const auto [it, fresh] = estimates_.try_emplace(execution_key(p));
    Known& known = it->second;
    if (fresh || (known.lower_bound && *known.s < stop_at_s)) {
      ++*priced_;
      const Estimate e = est_.estimate(p, stop_at_s);
      known = {e.fits ? std::optional<double>(e.iteration_s) : std::nullopt, e.stopped};
    }
    return known.s;
  }

  // The template completed and priced now: its best price (nullopt: none priced).
  std::optional<double> complete_now(const Template& t) {
    if (timer_.wall_budget_spent(r_)) {
      *cut_ = true;
      return std::nullopt;
    }
    // A template whose GPUs cannot beat the bound (the best plan priced so far, or a climb on its own's
    // bound) even at their best GEMM rate is not completed.
    if (lower_bound_(t.gpus_by_type()) >= bound()) return std::nullopt;
    std::optional<double> best;
    // Nor is a memory level priced whose compute alone, analytically, is no faster than the bound.
    const CompletionOptions opt{.max_candidates = r_.arachne_completions,
                                .skip_analytic_above_s = bound(),
                                .data_parallel_placement = after_climb_,
                                .partition_ties = ties_,
                                .price_every_recompute_level = every_recompute_level_};
    for (CompletedPlan& c : complete_template(t, {r_.cluster, r_.topo, r_.model, global_, &cache_, &prices_}, estimate_, opt)) {
      if (!best || c.priced_s < *best) best = c.priced_s;
      all_.push_back(std::move(c));
    }
    if (best) {
      best_priced_ = std::min(best_priced_, *best);
      completed_.push_back({t, *best});
    }
    return best;
  }

  // complete_now, and after the climbs the best price of each template kept (after_prices_).
  std::optional<double> complete(const Template& t) {
    const std::optional<double> p = complete_now(t);
    if (after_climb_ && !*cut_) {
      std::optional<double>& known = after_prices_[t];
      if (p && (!known || *p < *known)) known = p;
    }
    return p;
  }

  // What a completion must beat to be priced: the best price so far, or during a climb on its own that
  // climb's bound (own_bound_).
  double bound() const { return own_bound_ ? *own_bound_ : best_priced_; }

  // The climbs' price of a template: each completed once for all of them, except that a template left
  // unpriced under a bound is completed again under a looser one (a climb on its own's).
  std::optional<double> climb_price(const Template& t) {
    const double b = bound();
    auto it = climb_prices_.find(t);
    if (it == climb_prices_.end() || (!it->second && unpriced_under_.at(t) < b)) {
      const std::optional<double> price = complete(t);
      if (*cut_) return price;
      climb_prices_[t] = price;
      unpriced_under_[t] = b;
      it = climb_prices_.find(t);
    }
    if (own_bound_ && it->second) own_bound_ = std::min(*own_bound_, *it->second);
    return it->second;
  }

  // The local search from `starts` as if it were the only one: its bound is its own best price, at most
  // `slack` times the best price so far when it starts, so that templates the other climbs' better plans
  // would leave unpriced are priced and climbed through. Its best template is a descent start (descend).
  void climb_on_its_own(const std::vector<Template>& starts, const LocalSearchOptions& opt, double slack) {
    if (starts.empty()) return;
    const TemplatePricer price = [this](const Template& t) { return climb_price(t); };
    own_bound_ = slack * best_priced_;
    const std::vector<PricedTemplate> climbed = local_search(starts, *r_.cluster, *r_.model, price, opt);
    own_bound_.reset();
    if (!climbed.empty()) own_climbs_best_.push_back(climbed.front());
  }

  // The descent's price of a template, each once: its price from the climbs or after them, else a
  // completion, at most kArachneDescentMaxCompleted of them; where the replicas' placement by stage decided
  // the best template (placement_decides_), a climbed template with replicas is completed again with it.
  std::optional<double> descent_price(const Template& t) {
    if (const auto it = after_prices_.find(t); it != after_prices_.end()) return it->second;
    const auto climbed_at = climb_prices_.find(t);
    const bool one_placement = placement_decides_ && climbed_at != climb_prices_.end() && has_replicas(t);
    if (climbed_at != climb_prices_.end() && !one_placement) return climbed_at->second;
    if (descent_completed_ >= kArachneDescentMaxCompleted) return one_placement ? climbed_at->second : std::nullopt;
    ++descent_completed_;
    return complete(t);
  }

  const PlanRequest& r_;
  long global_;
  const PlanTimer& timer_;
  long* priced_;
  bool* cut_;
  const Estimator est_;
  std::unordered_map<std::string, Known> estimates_;  // by execution_key
  const PlanPricer estimate_ = [this](const Plan& p, double stop_at_s) { return estimate(p, stop_at_s); };
  CompletionCache cache_;  // per-layer times and stage memory, shared by the templates
  PlanPrices prices_;      // what `estimate` said of each plan asked for, by split: plans asked again are not assembled
  std::vector<CompletedPlan> all_;
  const IterationLowerBound lower_bound_;
  const StageMoves stage_moves_;
  double best_priced_ = std::numeric_limits<double>::infinity();
  bool after_climb_ = false;  // both placements of every class's replicas priced
  PartitionTies ties_ = PartitionTies::EarliestCut;
  bool every_recompute_level_ = false;
  std::vector<PricedTemplate> completed_;  // every template that completed, with its best price
  // The best price of each completion after the climbs; the climbs' prices; the bound each template of
  // climb_prices_ was completed under.
  std::unordered_map<Template, std::optional<double>, TemplateHash> after_prices_, climb_prices_;
  std::unordered_map<Template, double, TemplateHash> unpriced_under_;
  std::unordered_map<Template, std::optional<double>, TemplateHash> device_group_prices_;  // search_device_groups
  std::optional<double> own_bound_;            // during a climb on its own (climb_on_its_own)
  std::vector<PricedTemplate> own_climbs_best_;
  bool placement_decides_ = false;
  int descent_completed_ = 0;
  std::vector<CompletedPlan> even_split_;
  size_t before_descent_ = 0;
};

// Every template completed and priced: the climbs (CandidateSearch::climb), the passes after them, the even
// layer splits of the best plans, a descent from the best templates, then `extra.last` and the best
// template's stages dealt across its types (CandidateSearch::price_last, price_across_types).
PricedPlans priced_candidates(const std::vector<Template>& templates, const std::vector<Template>& policy, const ExtraTemplates& extra,
                              const PlanRequest& r, long global, const PlanTimer& timer, long* priced, bool* cut) {
  CandidateSearch search(r, global, timer, priced, cut);
  const std::vector<PricedTemplate> climbed = search.climb(templates, policy, extra);
  search.price_after_climbs(extra, climbed);
  search.complete_best_again_both_ways();
  search.price_even_splits();
  search.descend();
  search.price_last(extra.last);
  if (extra.across_types) search.price_across_types(extra);
  return search.result();
}

// priced_candidates of the proposed templates; while none completes within memory (and the budget lasts),
// the same with a beam kArachneWidenFactor times as wide, up to kArachneWidestBeam.
PricedPlans widening_candidates(const PlanRequest& request, long global, const PlanTimer& timer, long* priced,
                                bool* enumerated, bool* cut) {
  const ExtraTemplates extra = extra_templates(request, global);  // the same at every beam width
  const auto candidates_at = [&](const PlanRequest& r) {
    const std::vector<Template> policy = policy_templates(r, global);  // the beam at r's width, decoded once
    return priced_candidates(proposed_with(r, global, policy, enumerated), policy, extra, r, global, timer, priced, cut);
  };
  PricedPlans candidates = candidates_at(request);
  if (request.arachne_templates == TemplateSource::Exhaustive) return candidates;
  PlanRequest wider = request;
  while (candidates.empty() && !*cut && wider.arachne_beam < kArachneWidestBeam) {
    wider.arachne_beam = std::min(kArachneWidestBeam, wider.arachne_beam * kArachneWidenFactor);
    candidates = candidates_at(wider);
  }
  return candidates;
}

// Step 4: the best-priced plans of the `arachne_simulate` best-priced structures simulated, each with its
// structure's best plan under the other rule for equal partitions where it has one (the header), then the
// descent's best plan where it is priced below all of them and its structure was not simulated, then the
// best even layer split where it is priced below the plan simulated fastest; the fastest goes into *result,
// with the simulations counted. Returns whether the request's simulation budget ran out.
bool simulate_best(const PricedPlans& candidates, const PlanRequest& request, PlanResult* result) {
  const std::vector<CompletedPlan>& plans = candidates.plans;
  Evaluator eval(request);
  double best = std::numeric_limits<double>::infinity();
  // A plan is simulated once: both rules for equal partitions give the same plan where no stage's layer
  // count has a tie (e.g. one-stage pipelines), and its second simulation could not change the result.
  std::set<std::string> simulated;
  const auto simulate = [&](const CompletedPlan& c) {
    if (!simulated.insert(execution_key(c.plan)).second) return;
    const std::optional<double> t = eval.iteration_time(c.plan);
    if (t && *t < best) {
      best = *t;
      result->plan = c.plan;
      result->predicted_iteration_time_s = c.priced_s;
    }
  };
  std::vector<Template> structure(plans.size());  // of each plan, made when first needed
  const auto structure_of = [&](size_t i) -> const Template& {
    if (structure[i].pipelines.empty()) structure[i] = simulation_structure(plans[i].plan, *request.cluster);
    return structure[i];
  };
  // The structures completed with the latest-cut rule too (a few templates: complete_best_again).
  std::set<Template> both_rules;
  for (size_t j = 0; j < plans.size(); ++j)
    if (plans[j].ties == PartitionTies::LatestCut) both_rules.insert(structure_of(j));
  std::set<Template> structures;  // simulated
  const double within = arachne_simulate_within(*request.model);
  for (size_t i = 0; i < plans.size(); ++i) {
    if (static_cast<int>(structures.size()) >= request.arachne_simulate || eval.exhausted()) break;
    if (result->plan && plans[i].priced_s > within * plans.front().priced_s) break;  // so are the rest
    if (!structures.insert(structure_of(i)).second) continue;
    simulate(plans[i]);
    if (both_rules.count(structure_of(i)) == 0) continue;
    for (size_t j = i + 1; j < plans.size() && !eval.exhausted(); ++j)
      if (plans[j].ties != plans[i].ties && structure_of(j) == structure_of(i)) {
        simulate(plans[j]);
        break;
      }
  }
  const std::vector<CompletedPlan>& descent = candidates.descent;
  if (!descent.empty() && !eval.exhausted() && (plans.empty() || descent.front().priced_s < plans.front().priced_s) &&
      structures.insert(simulation_structure(descent.front().plan, *request.cluster)).second)
    simulate(descent.front());
  // And the best even layer split where it is priced below the plan simulated fastest (an addition too).
  const std::vector<CompletedPlan>& even = candidates.even_split;
  if (!even.empty() && !eval.exhausted() && (!result->plan || even.front().priced_s < result->predicted_iteration_time_s))
    simulate(even.front());
  result->evaluations = eval.evaluations();
  return eval.exhausted();
}

}  // namespace

PricedPlans arachne_priced_plans(const PlanRequest& request, long global_batch, long* priced) {
  const PlanTimer timer;
  long count = 0;
  bool enumerated = true, cut = false;
  PricedPlans out = widening_candidates(request, global_batch, timer, &count, &enumerated, &cut);
  if (priced != nullptr) *priced = count;
  return out;
}

std::vector<CompletedPlan> PricedPlans::merged() const {
  std::vector<CompletedPlan> out = plans;
  out.insert(out.end(), descent.begin(), descent.end());
  out.insert(out.end(), even_split.begin(), even_split.end());
  sort_by_price(out);
  return out;
}

Template simulation_structure(const Plan& plan, const Cluster& cluster) {
  Template t = template_of(plan, cluster);
  for (PipelineTemplate& p : t.pipelines) {
    const int g = p.groups_common_factor();
    p.replicas *= g;
    for (StageTemplate& s : p.stages)
      for (GroupKind& k : s.kinds) k.groups /= g;
  }
  return canonical(t);
}

std::string refine_help() {
  std::ostringstream out;
  out << "arachne: rounds of local moves from the best-priced templates (then up to " << kArachneMaxGainingRounds
      << " in all while the round before gained >= " << kArachneExtendWhileGain * 100 << " %, or on <= "
      << kArachneExtendMaxGpus << " GPUs up to " << kArachneMaxRounds << " (" << kArachneMaxGainingRounds << " on <= "
      << kArachneLongClimbMaxGpus << " GPUs) while < " << kArachneExtendBelow << " templates were tried)";
  return out.str();
}

std::string default_policy_path() { return (std::filesystem::path(configs_dir()) / "policy" / "arachne.weights").string(); }

PlanResult ArachnePlanner::plan(const PlanRequest& request) {
  const PlanTimer timer;
  long global = 0;
  if (auto early = refused_request(request, name(), timer, &global)) return *early;
  PlanResult result;
  bool enumerated = true, cut = false;
  const PricedPlans candidates = widening_candidates(request, global, timer, &result.own_model_evaluations, &enumerated, &cut);
  const bool exhausted = simulate_best(candidates, request, &result);
  result.search_complete = enumerated && !cut && !exhausted;
  if (!result.plan) result.reason = candidates.empty() ? "no proposed template could be completed within memory" : "every simulated candidate ran out of memory";
  return timer.finish(result);
}

}  // namespace arachne::planner
