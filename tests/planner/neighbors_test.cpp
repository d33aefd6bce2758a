// Local moves over templates and the local search on them (planner/template/neighbors.h). Expected
// neighbours are derived by hand from the moves the header lists.
#include "planner/template/neighbors.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "planner/template/tokens.h"
#include "tests/sim/test_support.h"

namespace arachne::planner {
namespace {

Cluster spec(const std::string& s) { return parse_cluster_spec(s, GpuCatalog::load_default()); }

bool contains(const std::vector<Template>& ts, const std::string& text) {
  const Template t = parse_template(text);
  return std::find(ts.begin(), ts.end(), t) != ts.end();
}

TEST(TemplateNeighbors, AreRunnableCanonicalDistinctAndExcludeTheStart) {
  const Cluster c = spec("A100-80:2x8,V100-32:2x4");
  for (const char* model : {"gpt3-1.3b", "gpt-moe-1.3b-64e"}) {
    const ModelConfig m = load_model(model);
    const Template start = parse_template(std::string(model) == "gpt3-1.3b" ? "2x[A100-80:tp4x1 | V100-32:tp2x1]"
                                                                          : "2x[A100-80:tp4x1 ep2/pipelines]");
    const std::vector<Template> ns = template_neighbors(start, c, m);
    EXPECT_GE(ns.size(), 5u) << model;
    const std::set<Template> distinct(ns.begin(), ns.end());
    EXPECT_EQ(distinct.size(), ns.size()) << model;
    EXPECT_EQ(distinct.count(start), 0u) << model;
    for (const Template& t : ns) {
      EXPECT_EQ(canonical(t), t) << to_text(t);
      EXPECT_EQ(template_problem(t, c, m), "") << to_text(t);
      const std::optional<std::vector<int>> ids = encode(t, type_order(c));
      ASSERT_TRUE(ids.has_value()) << to_text(t);
      TokenGrammar g(c, m);
      for (const int id : *ids) ASSERT_NO_THROW(g.push(id)) << to_text(t);
      EXPECT_TRUE(g.finished()) << to_text(t);
    }
  }
}

// StageMoves::RunEnds leaves out only moves that start at a stage inside a run of three or more identical
// stages: on templates without such a run the two neighbourhoods are the same; on a 10-stage run the run-end
// neighbourhood is a strict subset, and it still holds the moves at the run's ends (the first stage twice as
// wide, the last stage moved to another GPU type) and the class-wide reshapes.
TEST(TemplateNeighbors, RunEndsLeaveOutOnlyMovesInsideRuns) {
  const Cluster c = spec("A100-80:2x8,V100-32:2x4");
  const ModelConfig m = load_model("gpt3-1.3b");
  auto as_set = [](const std::vector<Template>& ts) { return std::set<Template>(ts.begin(), ts.end()); };
  for (const char* text : {"2x[A100-80:tp4x1 | V100-32:tp2x1]", "1x[A100-80:tp2x1 | A100-80:tp2x1 | V100-32:tp2x2]"}) {
    const Template t = parse_template(text);
    EXPECT_EQ(as_set(template_neighbors(t, c, m, StageMoves::RunEnds)), as_set(template_neighbors(t, c, m))) << text;
  }
  std::string run = "1x[A100-80:tp1x1", first_wide = "1x[A100-80:tp2x1", last_moved = "1x[A100-80:tp1x1";
  for (int i = 1; i < 10; ++i) {
    run += " | A100-80:tp1x1";
    first_wide += " | A100-80:tp1x1";
    last_moved += i + 1 < 10 ? " | A100-80:tp1x1" : " | V100-32:tp1x1";
  }
  const Template deep = parse_template(run + "]");
  const std::set<Template> every = as_set(template_neighbors(deep, c, m)), ends = as_set(template_neighbors(deep, c, m, StageMoves::RunEnds));
  EXPECT_LT(ends.size(), every.size());
  EXPECT_TRUE(std::includes(every.begin(), every.end(), ends.begin(), ends.end()));
  EXPECT_EQ(ends.count(canonical(parse_template(first_wide + "]"))), 1u);
  EXPECT_EQ(ends.count(canonical(parse_template(last_moved + "]"))), 1u);
  EXPECT_EQ(ends.count(canonical(parse_template("2x[A100-80:tp1x1 | A100-80:tp1x1 | A100-80:tp1x1 | A100-80:tp1x1 | A100-80:tp1x1]"))), 1u);
}

// One move of each kind from 2 pipelines of one 4-wide A100 stage, on 16 A100s and 8 V100s (gpt3-1.3b: 32
// heads, so TP 1-8 all divide them).
TEST(TemplateNeighbors, IncludeOneResultOfEveryMove) {
  const Cluster c = spec("A100-80:2x8,V100-32:2x4");
  const std::vector<Template> ns = template_neighbors(parse_template("2x[A100-80:tp4x1]"), c, load_model("gpt3-1.3b"));
  for (const char* expected : {
           "3x[A100-80:tp4x1]", "1x[A100-80:tp4x1]", "4x[A100-80:tp4x1]",  // replicas +1, -1 (= half), x2
           "2x[A100-80:tp4x1]; 1x[V100-32:tp4x1]",                         // a copy on another type
           "2x[A100-80:tp8x1]", "2x[A100-80:tp2x1]", "2x[A100-80:tp2x2]",  // TP wider, narrower, same GPUs
           "2x[A100-80:tp4x1 | A100-80:tp4x1]",                            // the stage split in two
           "2x[A100-80:tp4x2]",                                            // one group more
           "2x[V100-32:tp4x1]", "2x[A100-80:tp4x1+V100-32:tp4x1]",         // kind moved, kind added
       })
    EXPECT_TRUE(contains(ns, expected)) << expected;
  // Two moves away, or beyond the cluster: absent.
  EXPECT_FALSE(contains(ns, "4x[A100-80:tp2x1]"));
  EXPECT_FALSE(contains(ns, "5x[A100-80:tp4x1]"));  // 20 A100s
}

TEST(TemplateNeighbors, MoeMovesChangeTheEpLayout) {
  const Cluster c = spec("A100-80:2x8");
  const std::vector<Template> ns =
      template_neighbors(parse_template("4x[A100-80:tp2x1 ep2/pipelines]"), c, load_model("gpt-moe-1.3b-64e"));
  EXPECT_TRUE(contains(ns, "4x[A100-80:tp2x1 ep4/pipelines]"));
  EXPECT_TRUE(contains(ns, "4x[A100-80:tp2x1]"));  // EP halved to 1
}

// The reshapes of a class of identical stages and the stage moves that trade TP for depth, each one step:
// on 14 H200 in 7 nodes of 2 (the layout of Sailor's better Mixtral plan in the held-out evaluation), from an
// 11-stage TP-1 pipeline to 7 stages of TP 2 (all free GPUs at twice the width) and 14 of TP 1; from 8
// replicas of one GPU to one pipeline over the free GPUs; on 4 A100 + 4 P100, from one 4-wide A100 stage to
// two 2-wide ones (Megatron's plan) and back, and a stage moved to the front.
// Token counts step from 40 to 48 to 64, so no token template uses 58 one-GPU replicas; the fill move takes
// a class to every free GPU of its type at any count: 58 one-GPU replicas and 19 three-stage ones (57 of
// the 58 A10G), and, beside a class using 16 A10G, 42 one-GPU replicas. Such templates have no token form.
TEST(TemplateNeighbors, FillMoveTakesEveryFreeGpuAtAnyCount) {
  const ModelConfig m = load_model("gpt3-1.3b");
  const Cluster c = spec("A10G:7x8,A10G:1x2,T4:1x4");
  EXPECT_TRUE(contains(template_neighbors(parse_template("40x[A10G:tp1x1]"), c, m), "58x[A10G:tp1x1]"));
  EXPECT_TRUE(contains(template_neighbors(parse_template("16x[A10G:tp1x1 | A10G:tp1x1 | A10G:tp1x1]"), c, m),
                       "19x[A10G:tp1x1 | A10G:tp1x1 | A10G:tp1x1]"));
  const std::vector<Template> beside = template_neighbors(parse_template("2x[A10G:tp8x1]; 40x[A10G:tp1x1]"), c, m);
  EXPECT_TRUE(contains(beside, "2x[A10G:tp8x1]; 42x[A10G:tp1x1]"));
  EXPECT_FALSE(encode(parse_template("58x[A10G:tp1x1]"), type_order(c)).has_value());
}

// Fold: r replicas -> r/d pipelines with d times the groups per stage (d = r and 2); unfold: back by the
// groups' common factor (all of it and 2). The GPUs per type stay the same.
TEST(TemplateNeighbors, FoldMovesTradeReplicasForGroupsPerStage) {
  const ModelConfig m = load_model("llama2-7b");
  const Cluster c = spec("A100-80:1x8,V100-32:1x8");
  const std::vector<Template> from_replicas = template_neighbors(parse_template("4x[A100-80:tp2x1 | V100-32:tp2x1]"), c, m);
  EXPECT_TRUE(contains(from_replicas, "1x[A100-80:tp2x4 | V100-32:tp2x4]"));
  EXPECT_TRUE(contains(from_replicas, "2x[A100-80:tp2x2 | V100-32:tp2x2]"));
  const std::vector<Template> from_wide = template_neighbors(parse_template("1x[A100-80:tp2x4 | V100-32:tp2x4]"), c, m);
  EXPECT_TRUE(contains(from_wide, "4x[A100-80:tp2x1 | V100-32:tp2x1]"));
  EXPECT_TRUE(contains(from_wide, "2x[A100-80:tp2x2 | V100-32:tp2x2]"));
  // fold_neighbors: exactly these four moves' results here, each also a neighbour.
  for (const std::string start : {"4x[A100-80:tp2x1 | V100-32:tp2x1]", "1x[A100-80:tp2x4 | V100-32:tp2x4]"}) {
    const std::vector<Template> folds = fold_neighbors(parse_template(start), c, m);
    const std::vector<Template> all = template_neighbors(parse_template(start), c, m);
    EXPECT_EQ(folds.size(), 2u) << start;
    for (const Template& f : folds) EXPECT_TRUE(contains(all, to_text(f))) << to_text(f);
  }
  EXPECT_TRUE(contains(fold_neighbors(parse_template("4x[A100-80:tp2x1 | V100-32:tp2x1]"), c, m), "1x[A100-80:tp2x4 | V100-32:tp2x4]"));
  EXPECT_TRUE(fold_neighbors(parse_template("1x[A100-80:tp2x1 | V100-32:tp2x1]"), c, m).empty());  // nothing to fold
}

// Idle GPUs: 2 free A100s are one more TP-2 group, on the first A100 stage (two stages would need 4); the 8
// free V100s, a type the pipeline does not hold, are a stage appended at the pipeline's narrowest TP (4
// groups of 2), and a first stage of one TP-8 group (the widest a V100 node holds; 8 divides the 32 heads).
TEST(TemplateNeighbors, IdleMovesPickUpFreeGpus) {
  const ModelConfig m = load_model("llama2-7b");
  const Cluster c = spec("A100-80:1x8,V100-32:1x8");
  const std::vector<Template> ns = template_neighbors(parse_template("1x[A100-80:tp2x2 | A100-80:tp2x1]"), c, m);
  EXPECT_TRUE(contains(ns, "1x[A100-80:tp2x3 | A100-80:tp2x1]"));
  EXPECT_TRUE(contains(ns, "1x[A100-80:tp2x2 | A100-80:tp2x1 | V100-32:tp2x4]"));
  EXPECT_TRUE(contains(ns, "1x[V100-32:tp8x1 | A100-80:tp2x2 | A100-80:tp2x1]"));
  // On nodes of 4 V100s the widest group is TP 4: two such groups in the first stage.
  const std::vector<Template> small_nodes =
      template_neighbors(parse_template("1x[A100-80:tp2x2 | A100-80:tp2x1]"), spec("A100-80:1x8,V100-32:2x4"), m);
  EXPECT_TRUE(contains(small_nodes, "1x[V100-32:tp4x2 | A100-80:tp2x2 | A100-80:tp2x1]"));
  EXPECT_FALSE(contains(small_nodes, "1x[V100-32:tp8x1 | A100-80:tp2x2 | A100-80:tp2x1]"));
  // Spread evenly when every holder can take the same number more: 4 free A100s over two TP-2 stages.
  const std::vector<Template> spread = template_neighbors(parse_template("1x[A100-80:tp2x1 | A100-80:tp2x1]"), c, m);
  EXPECT_TRUE(contains(spread, "1x[A100-80:tp2x2 | A100-80:tp2x2]"));
}

// Split by depth: the even- and odd-numbered stages become two pipelines of different depths, each with the
// mix of types in the class's order.
TEST(TemplateNeighbors, SplitDepthMoveMakesPipelinesOfDifferentDepths) {
  const ModelConfig m = load_model("llama2-7b");
  const Cluster c = spec("A100-80:1x8,V100-32:1x8");
  const std::vector<Template> ns = template_neighbors(
      parse_template("1x[A100-80:tp1x1 | A100-80:tp1x1 | A100-80:tp1x1 | V100-32:tp1x1 | V100-32:tp1x1]"), c, m);
  EXPECT_TRUE(contains(ns, "1x[A100-80:tp1x1 | A100-80:tp1x1 | V100-32:tp1x1]; 1x[A100-80:tp1x1 | V100-32:tp1x1]"));
  // Fewer than four stages: no split.
  for (const Template& t : template_neighbors(parse_template("1x[A100-80:tp1x1 | A100-80:tp1x1 | V100-32:tp1x1]"), c, m))
    EXPECT_FALSE(t.pipelines.size() == 2 && t.num_gpus() == 3 && t.pipelines[0].stages.size() + t.pipelines[1].stages.size() == 3)
        << to_text(t);
}

TEST(TemplateNeighbors, MacroMovesReachOtherParallelismTradesInOneStep) {
  const ModelConfig dense = load_model("gpt3-1.3b");
  const Cluster h200 = spec("H200:7x2,L4:1x4");
  auto deep = [](const std::string& stage, int n) {
    std::string s = "1x[" + stage;
    for (int i = 1; i < n; ++i) s += " | " + stage;
    return s + "]";
  };
  const std::vector<Template> from_deep = template_neighbors(parse_template(deep("H200:tp1x1", 11)), h200, dense);
  EXPECT_TRUE(contains(from_deep, deep("H200:tp2x1", 7)));
  EXPECT_TRUE(contains(from_deep, deep("H200:tp1x1", 14)));
  EXPECT_TRUE(contains(from_deep, deep("H200:tp2x1", 5)));  // TP 2 at the class's 11 GPUs (rounded down)
  EXPECT_FALSE(contains(from_deep, deep("H200:tp2x1", 8)));  // 16 H200: more than the cluster has
  const std::vector<Template> from_wide = template_neighbors(parse_template("8x[H200:tp1x1]"), h200, dense);
  EXPECT_TRUE(contains(from_wide, deep("H200:tp2x1", 7)));   // one replica, TP 2, all 14 H200
  EXPECT_TRUE(contains(from_wide, deep("H200:tp1x1", 14)));  // one replica, TP 1
  EXPECT_TRUE(contains(from_wide, "4x[H200:tp1x1 | H200:tp1x1]"));  // half the replicas at the same GPUs
  const ModelConfig moe = load_model("mixtral-8x7b");
  const std::vector<Template> from_ep = template_neighbors(parse_template("8x[H200:tp1x1 ep8/pipelines]"), h200, moe);
  EXPECT_TRUE(contains(from_ep, deep("H200:tp2x1", 7)));  // EP over one pipeline: none
  EXPECT_TRUE(contains(from_ep, "4x[H200:tp1x1 ep4/pipelines | H200:tp1x1 ep4/pipelines]"));
  // And each such shape without EP: every expert on each rank of the deeper pipelines.
  EXPECT_TRUE(contains(from_ep, "4x[H200:tp1x1 | H200:tp1x1]"));
  EXPECT_TRUE(contains(from_ep, "4x[H200:tp1x1 | H200:tp1x1 | H200:tp1x1]"));  // on the free H200s

  const Cluster ap = spec("A100-80:1x4,P100:1x4");
  const ModelConfig llama = load_model("llama2-13b");
  EXPECT_TRUE(contains(template_neighbors(parse_template("1x[A100-80:tp4x1]"), ap, llama), "1x[A100-80:tp2x1 | A100-80:tp2x1]"));
  EXPECT_TRUE(contains(template_neighbors(parse_template("1x[A100-80:tp2x1 | A100-80:tp2x1]"), ap, llama), "1x[A100-80:tp4x1]"));
  const std::vector<Template> two_types = template_neighbors(parse_template("1x[A100-80:tp4x1 | P100:tp4x1]"), ap, llama);
  EXPECT_TRUE(contains(two_types, "1x[P100:tp4x1 | A100-80:tp4x1]"));
  EXPECT_TRUE(contains(two_types, "1x[A100-80:tp2x1 | A100-80:tp2x1 | P100:tp4x1]"));
}

// The moves for mixed pipelines of memory-bound stages (Metis's Mixtral plan on 16 A100-80 and 16 V100-32:
// eight TP-2 A100 stages, then V100 stages of one, two and two groups): a stage's groups split over two
// stages or two stages of one TP merged, and a run of identical stages reshaped at its GPUs.
TEST(TemplateNeighbors, GroupSplitsAndRunReshapesDeepenMixedPipelines) {
  const Cluster c = spec("A100-80:2x8,V100-32:4x4");
  const ModelConfig m = load_model("mixtral-8x7b");
  const std::vector<Template> from_wide =
      template_neighbors(parse_template("1x[A100-80:tp4x1 | A100-80:tp4x1 | A100-80:tp4x1 | A100-80:tp4x1 | V100-32:tp4x4]"), c, m);
  // Four V100 groups over two stages of two, on the same 16 V100s.
  EXPECT_TRUE(contains(from_wide, "1x[A100-80:tp4x1 | A100-80:tp4x1 | A100-80:tp4x1 | A100-80:tp4x1 | V100-32:tp4x2 | V100-32:tp4x2]"));
  // The run of four TP-4 A100 stages as eight TP-2 stages or two TP-8 ones, on the same 16 A100s.
  EXPECT_TRUE(contains(from_wide, "1x[A100-80:tp2x1 | A100-80:tp2x1 | A100-80:tp2x1 | A100-80:tp2x1 | A100-80:tp2x1 | "
                                  "A100-80:tp2x1 | A100-80:tp2x1 | A100-80:tp2x1 | V100-32:tp4x4]"));
  EXPECT_TRUE(contains(from_wide, "1x[A100-80:tp8x1 | A100-80:tp8x1 | V100-32:tp4x4]"));
  // Odd groups: the first stage takes the odd one; kinds of two types split each.
  const std::vector<Template> odd = template_neighbors(parse_template("1x[A100-80:tp4x2+V100-32:tp4x3]"), c, m);
  EXPECT_TRUE(contains(odd, "1x[A100-80:tp4x1+V100-32:tp4x2 | A100-80:tp4x1+V100-32:tp4x1]"));
  // And back: two stages of one TP merged into one holding both stages' groups.
  const std::vector<Template> from_deep =
      template_neighbors(parse_template("1x[A100-80:tp4x1 | V100-32:tp4x1 | V100-32:tp4x2]"), c, m);
  EXPECT_TRUE(contains(from_deep, "1x[A100-80:tp4x1+V100-32:tp4x1 | V100-32:tp4x2]"));
  EXPECT_TRUE(contains(from_deep, "1x[A100-80:tp4x1 | V100-32:tp4x3]"));
  // Two moves away: the run reshaped and a V100 stage split.
  EXPECT_FALSE(contains(from_wide, "1x[A100-80:tp8x1 | A100-80:tp8x1 | V100-32:tp4x2 | V100-32:tp4x2]"));
}

TEST(TemplateNeighbors, BlockOfOneTypeMovesToEitherEndInOneStep) {
  const Cluster c = spec("H100:1x8,A100-80:1x8,V100-32:1x8");
  const ModelConfig m = load_model("gpt3-1.3b");
  // Device groups in the order H100, V100, A100; the V100 block holds two TP widths.
  const std::vector<Template> n = template_neighbors(
      parse_template("1x[H100:tp1x4 | H100:tp1x4 | V100-32:tp4x1 | V100-32:tp2x2 | A100-80:tp2x2 | A100-80:tp2x2]"), c, m);
  // The A100 block first (Metis's order on the planning-time experiment's 256 GPUs), the V100 block last
  // or first, the H100 block last: each one move.
  EXPECT_TRUE(contains(n, "1x[A100-80:tp2x2 | A100-80:tp2x2 | H100:tp1x4 | H100:tp1x4 | V100-32:tp4x1 | V100-32:tp2x2]"));
  EXPECT_TRUE(contains(n, "1x[H100:tp1x4 | H100:tp1x4 | A100-80:tp2x2 | A100-80:tp2x2 | V100-32:tp4x1 | V100-32:tp2x2]"));
  EXPECT_TRUE(contains(n, "1x[V100-32:tp4x1 | V100-32:tp2x2 | H100:tp1x4 | H100:tp1x4 | A100-80:tp2x2 | A100-80:tp2x2]"));
  EXPECT_TRUE(contains(n, "1x[V100-32:tp4x1 | V100-32:tp2x2 | A100-80:tp2x2 | A100-80:tp2x2 | H100:tp1x4 | H100:tp1x4]"));
  // Two blocks swapped in the middle is not one move.
  EXPECT_FALSE(contains(n, "1x[A100-80:tp2x2 | A100-80:tp2x2 | V100-32:tp4x1 | V100-32:tp2x2 | H100:tp1x4 | H100:tp1x4]"));
}

// Priced by TP width alone (one pipeline of one TP group only): TP doubles once per move, so the search
// climbs 1 -> 2 -> 4 -> 8, one step per round.
std::optional<double> price_by_tp_width(const Template& t) {
  if (t.pipelines.size() != 1 || t.pipelines[0].replicas != 1 || t.pipelines[0].stages.size() != 1 ||
      t.pipelines[0].stages[0].tp_groups() != 1)
    return std::nullopt;
  return 1.0 / t.pipelines[0].stages[0].tp;
}

// As price_by_tp_width up to TP 2, then each doubling gains only 0.2 % (TP 4: 0.2 % below TP 2, TP 8: 0.4 %).
std::optional<double> price_flattening_past_tp2(const Template& t) {
  const std::optional<double> halved = price_by_tp_width(t);
  if (!halved || *halved >= 0.5) return halved;
  return 0.5 * (1 - 0.002 * std::log2(0.5 / *halved));
}

TEST(TemplateLocalSearch, ClimbsOneMovePerRound) {
  const Cluster c = spec("A100-80:2x8");
  const ModelConfig m = load_model("gpt3-1.3b");
  const TemplatePricer by_tp = price_by_tp_width;
  const Template start = parse_template("1x[A100-80:tp1x1]");
  const std::vector<PricedTemplate> four = local_search({start}, c, m, by_tp, {.rounds = 4, .width = 1});
  ASSERT_FALSE(four.empty());
  EXPECT_EQ(four.front().t, parse_template("1x[A100-80:tp8x1]"));
  const std::vector<PricedTemplate> two = local_search({start}, c, m, by_tp, {.rounds = 2, .width = 1});
  EXPECT_EQ(two.front().t, parse_template("1x[A100-80:tp4x1]"));
  for (std::size_t i = 1; i < four.size(); ++i) EXPECT_LE(four[i - 1].priced_s, four[i].priced_s);
  // The same search twice: the same templates in the same order.
  const std::vector<PricedTemplate> again = local_search({start}, c, m, by_tp, {.rounds = 4, .width = 1});
  ASSERT_EQ(again.size(), four.size());
  for (std::size_t i = 0; i < four.size(); ++i) EXPECT_EQ(again[i].t, four[i].t);
}

// Past its rounds the search goes on while fewer than extend_below templates were tried, up to max_rounds
// rounds in all: one round and room to extend climbs TP 1 -> 8 (three rounds); with no room it stops at 2.
TEST(TemplateLocalSearch, ExtendsPastItsRoundsWhileFewTemplatesWereTried) {
  const Cluster c = spec("A100-80:2x8");
  const ModelConfig m = load_model("gpt3-1.3b");
  const TemplatePricer by_tp = price_by_tp_width;
  const Template start = parse_template("1x[A100-80:tp1x1]");
  const auto best = [&](long extend_below, int max_rounds) {
    return local_search({start}, c, m, by_tp, {.rounds = 1, .width = 1, .extend_below = extend_below, .max_rounds = max_rounds}).front().t;
  };
  EXPECT_EQ(best(1000, 6), parse_template("1x[A100-80:tp8x1]"));
  EXPECT_EQ(best(1000, 2), parse_template("1x[A100-80:tp4x1]"));
  EXPECT_EQ(best(1, 6), parse_template("1x[A100-80:tp2x1]"));
  EXPECT_EQ(local_search({start}, c, m, by_tp, {.rounds = 0, .width = 1, .extend_below = 1000, .max_rounds = 6}).front().t, start);
}

// Past its rounds the search also goes on while the round before gained at least extend_while_gain, up to
// max_rounds: halving the price per TP doubling climbs to TP 8; where doubling TP past 2 gains only 0.2 %, the
// search takes the one round that shows it and stops at TP 4; without the option it stops after its round.
TEST(TemplateLocalSearch, ExtendsPastItsRoundsWhileARoundGains) {
  const Cluster c = spec("A100-80:2x8");
  const ModelConfig m = load_model("gpt3-1.3b");
  const Template start = parse_template("1x[A100-80:tp1x1]");
  const TemplatePricer halving = price_by_tp_width;
  const TemplatePricer flattening = price_flattening_past_tp2;
  const auto best = [&](const TemplatePricer& price, double gain) {
    return local_search({start}, c, m, price, {.rounds = 1, .width = 1, .max_rounds = 6, .extend_while_gain = gain}).front().t;
  };
  EXPECT_EQ(best(halving, 0.005), parse_template("1x[A100-80:tp8x1]"));
  EXPECT_EQ(best(flattening, 0.005), parse_template("1x[A100-80:tp4x1]"));
  EXPECT_EQ(best(flattening, 0.001), parse_template("1x[A100-80:tp8x1]"));
  EXPECT_EQ(best(halving, 0), parse_template("1x[A100-80:tp2x1]"));
}

// Past max_rounds the search goes on up to max_gaining_rounds only while the round before gained: with
// room for one extra round (max_rounds 2) halving the price per TP doubling stops at TP 4, with gaining rounds
// it climbs on to TP 8; where doubling TP past 2 gains only 0.2 %, the gaining rounds add nothing.
TEST(TemplateLocalSearch, GoesOnPastItsLastRoundOnlyWhileGaining) {
  const Cluster c = spec("A100-80:2x8");
  const ModelConfig m = load_model("gpt3-1.3b");
  const Template start = parse_template("1x[A100-80:tp1x1]");
  const TemplatePricer halving = price_by_tp_width;
  const TemplatePricer flattening = price_flattening_past_tp2;
  const auto best = [&](const TemplatePricer& price, int gaining_rounds) {
    return local_search({start}, c, m, price,
                        {.rounds = 1, .width = 1, .extend_below = 1000, .max_rounds = 2, .extend_while_gain = 0.005,
                         .max_gaining_rounds = gaining_rounds})
        .front()
        .t;
  };
  EXPECT_EQ(best(halving, 0), parse_template("1x[A100-80:tp4x1]"));
  EXPECT_EQ(best(halving, 6), parse_template("1x[A100-80:tp8x1]"));
  EXPECT_EQ(best(flattening, 6), parse_template("1x[A100-80:tp4x1]"));
}

// The rounds that go on for their gain price at most extend_max_factor times the templates of the required
// rounds: at factor 1 the search stops where its rounds end, at 1.5 it prices no more than that and climbs
// less far than without a cap.
TEST(TemplateLocalSearch, CapsTheRoundsThatGoOnForTheirGain) {
  const Cluster c = spec("A100-80:2x8");
  const ModelConfig m = load_model("gpt3-1.3b");
  const Template start = parse_template("1x[A100-80:tp1x1]");
  long calls = 0;
  const TemplatePricer counted = [&](const Template& t) {
    ++calls;
    return price_by_tp_width(t);
  };
  const auto search = [&](int rounds, double factor) {
    calls = 0;
    return local_search({start}, c, m, counted,
                        {.rounds = rounds, .width = 1, .max_rounds = 6, .extend_while_gain = 0.005, .extend_max_factor = factor})
        .front()
        .t;
  };
  EXPECT_EQ(search(1, 0), parse_template("1x[A100-80:tp8x1]"));
  const long uncapped = calls;
  search(1, 100);
  EXPECT_EQ(calls, uncapped);  // a cap that does not bind changes nothing
  EXPECT_EQ(search(1, 1), parse_template("1x[A100-80:tp2x1]"));
  const long required = calls;
  EXPECT_EQ(search(1, 1), search(1, 0.5));
  search(1, 1.5);
  EXPECT_LE(calls, static_cast<long>(1.5 * static_cast<double>(required)));
  EXPECT_GT(calls, required);
  EXPECT_LT(calls, uncapped);
}

TEST(TemplateLocalSearch, RespectsThePricingCapAndSkipsUnpriceableTemplates) {
  const Cluster c = spec("A100-80:2x8");
  const ModelConfig m = load_model("gpt3-1.3b");
  long calls = 0;
  const TemplatePricer one_stage_only = [&](const Template& t) -> std::optional<double> {
    ++calls;
    for (const PipelineTemplate& p : t.pipelines)
      if (p.stages.size() > 1) return std::nullopt;
    return 1.0 / t.num_gpus();
  };
  const std::vector<PricedTemplate> r = local_search({parse_template("1x[A100-80:tp1x1]")}, c, m, one_stage_only,
                                                     {.rounds = 3, .width = 2, .max_priced = 7});
  EXPECT_EQ(calls, 7);
  EXPECT_GT(r.size(), 1u);
  for (const PricedTemplate& p : r) EXPECT_EQ(p.t.pipelines.front().stages.size(), 1u) << to_text(p.t);
}

// A secondary start that prices best takes every slot of the first round unless it is marked secondary:
// then the best other start is expanded too (TP 1 -> 2) beside it (TP 8 -> 4).
TEST(TemplateLocalSearch, SecondaryStartsTakeOneSlotOfTheFirstRound) {
  const Cluster c = spec("A100-80:2x8");
  const ModelConfig m = load_model("gpt3-1.3b");
  const TemplatePricer by_tp = price_by_tp_width;
  const Template primary = parse_template("1x[A100-80:tp1x1]");
  const Template secondary = parse_template("1x[A100-80:tp8x1]");
  auto priced = [&](const LocalSearchOptions& opt) {
    std::set<Template> out;
    for (const PricedTemplate& p : local_search({primary, secondary}, c, m, by_tp, opt)) out.insert(p.t);
    return out;
  };
  const std::set<Template> plain = priced({.rounds = 1, .width = 1});
  EXPECT_TRUE(plain.count(parse_template("1x[A100-80:tp4x1]")));
  EXPECT_FALSE(plain.count(parse_template("1x[A100-80:tp2x1]")));
  const std::set<Template> marked{secondary};
  const std::set<Template> both = priced({.rounds = 1, .width = 1, .secondary = &marked});
  EXPECT_TRUE(both.count(parse_template("1x[A100-80:tp4x1]")));
  EXPECT_TRUE(both.count(parse_template("1x[A100-80:tp2x1]")));
}

}  // namespace
}  // namespace arachne::planner
