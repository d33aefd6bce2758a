// Local moves over structural templates, and a local search built on them: the way to improve a set of
// good templates (the policy's beam, a label search's best) one small structural change at a time, each
// result completed and priced (planner/template/completion.h, estimator.h) before it is kept.
//
// One move changes one thing of a template (planner/template/template.h):
//   - a pipeline class: one replica more or fewer, twice or half as many; as many as the GPUs that the other
//     classes leave hold (at any count, even one no token says); the class removed (when another remains);
//     a copy of the class added with every stage on another GPU type (one replica);
//   - a class of identical stages reshaped as a whole: TP or replicas twice or half, the stage count
//     following at the class's GPUs; and, for stages of one TP group, TP t/2, t or 2t at r replicas (and at r/2
//     or 1 replica when the class is the only one) with as many stages as the GPUs of its types that no
//     other class uses hold (trades of tensor, pipeline and data parallelism that
//     single-stage moves reach only in many steps);
//   - a stage: TP twice or half as wide at the same GPUs (groups halved or doubled) or at the same group
//     count; the stage split in two stages of half its TP width on the same GPUs, or merged with an
//     identical next stage into one of twice the width; the stage moved to the front or the end of its
//     pipeline; the stage split in two identical stages (a deeper
//     pipeline) or removed (a shallower one); its TP groups split over two stages of its TP width (each
//     kind's groups halved), or merged with the next stage of the same TP width into one stage;
//   - a run of two or more identical consecutive stages in a class of mixed stages: reshaped at its GPUs,
//     TP half as wide over twice the stages or twice as wide over half of them;
//   - a block of two or more consecutive stages of one GPU type (any TP widths) in a class of several types:
//     moved as a whole to the front or the end of its pipeline (the order of the device groups);
//   - a group kind of a stage: one TP group more or fewer; its GPUs moved to another type; a kind of another
//     type (one group) added beside it;
//   - MoE stages: EP twice or half as wide, the other scope, uneven experts on or off;
//   - GPUs that no class uses: more TP groups on the class's stages of their type, or a stage of their type
//     appended at the class's narrowest TP, or put first at the widest TP one of their nodes holds (a slow
//     type as one wide first stage, as in Metis's plans).
// Only templates the cluster can run (template_problem empty) whose token form the grammar admits
// (TokenGrammar, so that the policy could propose them and they can be labels; the fill move excepted) are kept, in
// canonical form, each once, the start template excluded; the order is the order of the moves above over
// classes, stages and kinds in the template's canonical order: deterministic.
#pragma once
#include <functional>
#include <optional>
#include <set>
#include <vector>

#include "planner/template/template.h"

namespace arachne::planner {

// Which stages the per-stage and per-kind moves start from.
enum class StageMoves {
  Every,
  // Only the first and the last stage of each run of identical consecutive stages (and every stage of no
  // such run): a move at a stage inside the run differs from the same move at the run's ends only in the
  // changed stage's place within the run (how many micro-batches 1F1B keeps in flight on it: fewer than on
  // the run's first stage, more than on its last). A pipeline of 30 identical stages has 2 such stages.
  RunEnds,
};

std::vector<Template> template_neighbors(const Template& t, const Cluster& cluster, const ModelConfig& model,
                                         StageMoves stages = StageMoves::Every);
// The fold moves alone (data parallelism moved between a class's replicas and its stages' TP groups), under
// the same rules: templates that template_neighbors(t) holds too.
std::vector<Template> fold_neighbors(const Template& t, const Cluster& cluster, const ModelConfig& model);

// A template's price: the best estimated iteration time of its completed plans, or nullopt when none fits.
using TemplatePricer = std::function<std::optional<double>(const Template&)>;

struct LocalSearchOptions {
  int rounds = 2;  // rounds of moves
  int width = 2;   // templates whose neighbours are tried each round (the best priced so far, not yet expanded)
  long max_priced = 0;  // stop after pricing this many new templates (0: no cap)
  // Rounds beyond `rounds` (when it is at least one), up to `max_rounds` in all, while fewer than
  // `extend_below` templates have been tried: where templates are cheap to complete (small clusters) the
  // search climbs further for the same order of planning time.
  long extend_below = 0;
  int max_rounds = 0;
  // Also beyond `rounds` (up to `max_rounds`): while the round before lowered the best price by at least
  // this fraction (0: never) - a hill climb that stops where it stops gaining.
  double extend_while_gain = 0;
  // Rounds that go on only for their gain price at most this many times the templates priced by the end of
  // `rounds` in all (0: no cap), so that the climb at most multiplies the planning work by this factor.
  double extend_max_factor = 0;
  // Past `max_rounds`, up to this many rounds in all, the search goes on only while the round before gained
  // (extend_while_gain; the extend_max_factor cap still holds): a climb still gaining at max_rounds is not cut
  // there. 0 (or not above max_rounds): no such rounds.
  int max_gaining_rounds = 0;
  // Start templates of a secondary source (canonical): priced with the others, but in the first round only
  // the best of them is expanded, in a slot of its own beside the `width` best of the other starts, so that
  // a source whose templates price well and climb to worse optima does not take every slot.
  const std::set<Template>* secondary = nullptr;
  StageMoves stage_moves = StageMoves::Every;  // the neighbours expanded (template_neighbors)
};

struct PricedTemplate {
  Template t;
  double priced_s = 0;
};

// Best-first local search: start from `start` (priced first, in order), then for `rounds` rounds take the
// `width` best-priced templates not expanded yet and price all their neighbours that were not priced
// before. Returns every template priced (the starts included, unpriceable ones left out), best first (ties
// in pricing order). Deterministic.
std::vector<PricedTemplate> local_search(const std::vector<Template>& start, const Cluster& cluster,
                                         const ModelConfig& model, const TemplatePricer& price,
                                         const LocalSearchOptions& opt);

}  // namespace arachne::planner
