// Structural templates (planner/template/template.h): canonical form, text and YAML forms, the template of
// a plan, and the check that a template can run on a cluster. Expected values are derived by hand from the
// definitions in the header.
#include "planner/template/template.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include <unistd.h>

#include "sim/hw/cluster.h"
#include "sim/io/input_error.h"
#include "sim/plan/plan_yaml.h"
#include "tests/planner/random_plans.h"
#include "tests/sim/test_support.h"

namespace arachne::planner {
namespace {

StageTemplate stage(int tp, std::vector<GroupKind> kinds) {
  StageTemplate s;
  s.tp = tp;
  s.kinds = std::move(kinds);
  return s;
}

Cluster spec(const std::string& s) { return parse_cluster_spec(s, GpuCatalog::load_default()); }

TpGroup group(std::vector<GpuId> gpus, double share) {
  TpGroup g;
  g.tp = static_cast<int>(gpus.size());
  g.gpus = std::move(gpus);
  g.share = share;
  return g;
}

TEST(Template, ArithmeticCountsGroupsGpusAndTypes) {
  Template t;
  t.pipelines.push_back({2, {stage(4, {{"A100-80", 2}}), stage(2, {{"T4", 1}, {"V100-32", 3}})}});
  t.pipelines.push_back({1, {stage(8, {{"H100", 1}})}});
  EXPECT_EQ(t.pipelines[0].stages[1].tp_groups(), 4);
  EXPECT_EQ(t.pipelines[0].stages[1].gpus(), 8);
  EXPECT_EQ(t.pipelines[0].gpus_per_replica(), 16);
  EXPECT_EQ(t.pipeline_count(), 3);
  EXPECT_EQ(t.num_gpus(), 2 * 16 + 8);
  const std::map<std::string, int> expected{{"A100-80", 16}, {"H100", 8}, {"T4", 4}, {"V100-32", 12}};
  EXPECT_EQ(t.gpus_by_type(), expected);
}

TEST(Template, CanonicalMergesKindsAndPipelinesAndIsIdempotent) {
  Template t;
  t.pipelines.push_back({1, {stage(2, {{"V100-32", 1}, {"A100-80", 1}, {"V100-32", 2}})}});
  t.pipelines.push_back({3, {stage(1, {{"A100-80", 1}})}});
  t.pipelines.push_back({2, {stage(2, {{"A100-80", 1}, {"V100-32", 3}})}});
  const Template c = canonical(t);
  ASSERT_EQ(c.pipelines.size(), 2u);
  // Stages compare by TP width first: the tp1 class sorts before the tp2 one.
  EXPECT_EQ(c.pipelines[0].replicas, 3);
  EXPECT_EQ(c.pipelines[1].replicas, 3);  // 1 + 2 identical pipelines
  const std::vector<GroupKind> kinds{{"A100-80", 1}, {"V100-32", 3}};
  EXPECT_EQ(c.pipelines[1].stages[0].kinds, kinds);
  EXPECT_EQ(canonical(c), c);
  EXPECT_EQ(c.num_gpus(), t.num_gpus());
}

TEST(Template, CanonicalGivesEpOneASingleSpelling) {
  Template t;
  StageTemplate s = stage(1, {{"A100-80", 2}});
  s.ep = 1;
  s.ep_scope = EpScope::Stage;
  s.uneven_experts = true;
  t.pipelines.push_back({1, {s}});
  const StageTemplate c = canonical(t).pipelines[0].stages[0];
  EXPECT_EQ(c.ep_scope, EpScope::Pipelines);
  EXPECT_FALSE(c.uneven_experts);
}

TEST(Template, TextFormOfTheHeaderExampleIsCanonicalised) {
  const Template t = parse_template("2x[A100-80:tp4x2 | V100-32:tp2x1+T4:tp2x1]; 1x[H100:tp8x1 ep8/stage uneven]");
  ASSERT_EQ(t.pipelines.size(), 2u);
  EXPECT_EQ(t.pipelines[0].replicas, 2);
  EXPECT_EQ(t.pipelines[1].stages[0].ep, 8);
  EXPECT_EQ(t.pipelines[1].stages[0].ep_scope, EpScope::Stage);
  EXPECT_TRUE(t.pipelines[1].stages[0].uneven_experts);
  // Kinds sorted by type name: "T4" < "V100-32".
  EXPECT_EQ(to_text(t), "2x[A100-80:tp4x2 | T4:tp2x1+V100-32:tp2x1]; 1x[H100:tp8x1 ep8/stage uneven]");
}

TEST(Template, TextRoundTripOfCanonicalStrings) {
  for (const std::string x : {"1x[A100-80:tp8x1]", "4x[A100-80:tp1x1 | A100-80:tp1x1]",
                              "2x[A100-80:tp4x2 | T4:tp2x1+V100-32:tp2x1]; 1x[H100:tp8x1 ep8/stage uneven]",
                              "16x[V100-32:tp2x3 ep2/pipelines]", "1x[A100-80:tp2x2 ep4/stage]"})
    EXPECT_EQ(to_text(parse_template(x)), x);
  EXPECT_EQ(to_text(parse_template("  1x[ A100-80:tp8x1 |V100-32:tp4x2 ] ;2x[T4:tp1x1]")),
            "2x[T4:tp1x1]; 1x[A100-80:tp8x1 | V100-32:tp4x2]");
}

// Random templates over a few types and widths: text -> template -> text is the identity on canonical forms.
Template random_template(std::mt19937_64& rng, bool moe) {
  const std::vector<std::string> types{"A100-80", "H100", "T4", "V100-32"};
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  Template t;
  for (int i = pick(1, 3); i > 0; --i) {
    PipelineTemplate p;
    p.replicas = pick(1, 20);
    for (int j = pick(1, 4); j > 0; --j) {
      StageTemplate s = stage(1 << pick(0, 3), {});
      for (int k = pick(1, 3); k > 0; --k) s.kinds.push_back({types[pick(0, 3)], pick(1, 12)});
      if (moe && pick(0, 1)) {
        s.ep = 1 << pick(1, 4);
        s.ep_scope = pick(0, 1) ? EpScope::Stage : EpScope::Pipelines;
        s.uneven_experts = pick(0, 1);
      }
      p.stages.push_back(s);
    }
    t.pipelines.push_back(p);
  }
  return canonical(t);
}

TEST(Template, RandomTemplatesRoundTripThroughText) {
  std::mt19937_64 rng(7);
  for (int n = 0; n < 500; ++n) {
    const Template t = random_template(rng, n % 2 == 1);
    const std::string text = to_text(t);
    const Template back = parse_template(text);
    EXPECT_EQ(back, t) << text;
    EXPECT_EQ(to_text(back), text);
  }
}

void expect_parse_error(const std::string& text, const std::string& reason_part) {
  try {
    parse_template(text, "t.yaml:3: template");
    ADD_FAILURE() << "no error for \"" << text << "\"";
  } catch (const InputError& e) {
    EXPECT_EQ(e.where(), "t.yaml:3: template");
    EXPECT_NE(e.reason().find(reason_part), std::string::npos) << "\"" << text << "\": " << e.reason();
  }
}

TEST(Template, ParseErrorsSayWhereAndWhy) {
  expect_parse_error("", "empty template");
  expect_parse_error("2[A100-80:tp1x1]", "at character 2: expected 'x' after the replica count");
  expect_parse_error("0x[A100-80:tp1x1]", "replica count must be at least 1");
  expect_parse_error("1x[A100-80:tp1x1", "expected ']'");
  expect_parse_error("1x[A100-80:tp2x1+V100-32:tp4x1]", "share its TP width: A100-80 has tp2, V100-32 tp4");
  expect_parse_error("1x[A100-80:tp0x1]", "TP width must be at least 1");
  expect_parse_error("1x[A100-80:x1]", "expected 'tp' after A100-80:");
  expect_parse_error("1x[:tp1x1]", "expected a GPU type");
  expect_parse_error("1x[A100-80]", "expected ':' after the GPU type A100-80");
  expect_parse_error("1x[A100-80:tp1x1 ep2/foo]", "unknown ep_scope 'foo'");
  expect_parse_error("1x[A100-80:tp1x1 uneven]", "'uneven' follows an EP clause");
  expect_parse_error("1x[A100-80:tp1x1] 2x[T4:tp1x1]", "expected ';' between pipeline classes");
  expect_parse_error("1x[A100-80:tp1x1 |]", "expected a GPU type");
}

TEST(Template, YamlFormRoundTripsAndReportsFileAndLine) {
  const auto dir = std::filesystem::temp_directory_path() / ("arachne_template_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const Template t = parse_template("2x[A100-80:tp4x2 | V100-32:tp2x1]");
  const std::string good = (dir / "good.yaml").string();
  std::ofstream(good) << template_yaml(t);
  EXPECT_EQ(load_template_yaml(good), t);
  const std::string bad = (dir / "bad.yaml").string();
  std::ofstream(bad) << "# a template\ntemplate: \"2x[A100-80:tp4x2\"\n";
  try {
    load_template_yaml(bad);
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(e.where(), bad + ":2: template");
    EXPECT_NE(e.reason().find("expected ']'"), std::string::npos) << e.reason();
  }
  const std::string extra = (dir / "extra.yaml").string();
  std::ofstream(extra) << "template: \"1x[T4:tp1x1]\"\nreplicas: 2\n";
  EXPECT_THROW(load_template_yaml(extra), InputError);
  std::filesystem::remove_all(dir);
}

// ------------------------------------------------------------------ template_of

TEST(Template, OfAMegatronShorthandPlanIsItsReplicatedPipeline) {
  const Cluster c = spec("A100-80:1x8");
  const ModelConfig m = test::small_gpt_model(16);
  Shorthand sh;
  sh.tp = 2;
  sh.pp = 2;
  sh.dp = 2;
  sh.global_batch = 16;
  const Template t = template_of(plan_from_shorthand(sh, c, m), c);
  EXPECT_EQ(to_text(t), "2x[A100-80:tp2x1 | A100-80:tp2x1]");
}

TEST(Template, OfAPlanWithAMixedStageAndUnevenExperts) {
  const Cluster c = spec("A100-80:1x4,V100-32:1x4");
  Plan plan;
  Pipeline p;
  Stage s0;
  s0.groups = {group({4, 5}, 0.5), group({0, 1}, 0.5)};  // a V100 group and an A100 group
  s0.ep = 2;
  s0.ep_scope = EpScope::Stage;
  s0.experts = {5, 3};
  Stage s1;
  s1.groups = {group({2}, 1.0)};
  s1.ep = 2;
  s1.ep_scope = EpScope::Stage;
  s1.experts = {4, 4};
  p.stages = {s0, s1};
  plan.pipelines = {p};
  const Template t = template_of(plan, c);
  EXPECT_EQ(to_text(t), "1x[A100-80:tp2x1+V100-32:tp2x1 ep2/stage uneven | A100-80:tp1x1 ep2/stage]");
}

TEST(Template, OfAPlanThrowsWhenAStageMixesTpWidths) {
  const Cluster c = spec("A100-80:1x8");
  Plan plan;
  Pipeline p;
  Stage s;
  s.groups = {group({0, 1}, 0.5), group({2}, 0.5)};
  p.stages = {s};
  plan.pipelines = {p};
  EXPECT_THROW(template_of(plan, c), std::invalid_argument);
}

// Random valid plans: their template counts the same GPUs per type and the same stages, and can run.
TEST(Template, OfRandomValidPlansKeepsGpusStagesAndFeasibility) {
  const Cluster c = spec("A100-80:2x8,V100-32:2x4,T4:4x1");
  for (const bool moe : {false, true}) {
    const ModelConfig m = moe ? test::small_moe_model(64) : test::small_gpt_model(64);
    std::mt19937_64 rng(moe ? 11 : 5);
    int checked = 0;
    for (int n = 0; n < 300; ++n) {
      const Plan plan = test::draw_random_plan(c, m, 64, rng);
      Template t;
      try {
        t = template_of(plan, c);
      } catch (const std::invalid_argument&) {
        continue;  // a stage mixing TP widths: outside the template space
      }
      ++checked;
      std::map<std::string, int> gpus;
      for (const Pipeline& p : plan.pipelines)
        for (const Stage& s : p.stages)
          for (const TpGroup& g : s.groups) gpus[c.group_of_node(c.node_of(g.gpus.front())).gpu] += static_cast<int>(g.gpus.size());
      EXPECT_EQ(t.gpus_by_type(), gpus);
      EXPECT_EQ(t.pipeline_count(), static_cast<int>(plan.pipelines.size()));
      const std::string problem = template_problem(t, c, m);
      // EP blocks over pipelines of one shape but different GPU types leave the template space (an EP
      // block there is `ep` identical pipelines); everything else a valid plan does is a runnable template.
      if (problem.find("ep_scope pipelines") == std::string::npos) {
        EXPECT_EQ(problem, "") << to_text(t);
      }
    }
    EXPECT_GT(checked, 50);
  }
}

// ------------------------------------------------------------------ template_problem

void expect_problem(const std::string& text, const Cluster& c, const ModelConfig& m, const std::string& part) {
  const std::string p = template_problem(parse_template(text), c, m);
  if (part.empty())
    EXPECT_EQ(p, "") << text;
  else
    EXPECT_NE(p.find(part), std::string::npos) << text << ": \"" << p << "\"";
}

TEST(Template, ProblemNamesEachReason) {
  const Cluster c = spec("A100-80:2x8,V100-32:1x4");
  const ModelConfig dense = test::small_gpt_model(64);  // 8 layers, 16 heads
  const ModelConfig moe = test::small_moe_model(64);    // 8 experts
  expect_problem("2x[A100-80:tp8x1]; 1x[V100-32:tp4x1]", c, dense, "");
  expect_problem("3x[A100-80:tp8x1]", c, dense, "uses 24 A100-80 GPUs, the cluster has 16");
  expect_problem("1x[V100-32:tp8x1]", c, dense, "tp8 on V100-32, whose nodes have at most 4 GPUs");
  expect_problem("1x[H100:tp1x1]", c, dense, "GPU type H100 is not in the cluster (it has A100-80, V100-32)");
  ModelConfig heads12 = dense;
  heads12.heads = heads12.kv_heads = 12;
  expect_problem("1x[A100-80:tp8x1]", c, heads12, "tp=8 does not divide 12 attention heads");
  ModelConfig kv2 = dense;
  kv2.kv_heads = 2;
  expect_problem("1x[A100-80:tp4x1]", c, kv2, "tp=4 does not divide 2 key/value heads");
  expect_problem("1x[A100-80:tp1x1|A100-80:tp1x1|A100-80:tp1x1|A100-80:tp1x1|A100-80:tp1x1|A100-80:tp1x1|A100-80:tp1x1|"
                 "A100-80:tp1x1|A100-80:tp1x1]",
                 c, dense, "has 9 stages, more than the model's 8 layers");
  expect_problem("2x[A100-80:tp1x1 ep2/pipelines]", c, dense, "on a dense model");
  expect_problem("2x[A100-80:tp1x1 ep2/pipelines]", c, moe, "");
  expect_problem("1x[A100-80:tp1x3 ep3/stage]", c, moe, "ep=3 does not divide 8 experts");
  expect_problem("1x[A100-80:tp1x3 ep3/stage uneven]", c, moe, "");
  expect_problem("1x[A100-80:tp1x2 ep4/stage]", c, moe, "ep=4 does not divide the stage's 2 GPUs");
  expect_problem("1x[A100-80:tp2x2 ep4/stage]", c, moe, "");
  expect_problem("3x[A100-80:tp1x1 ep2/pipelines]", c, moe, "3 replicas to be a multiple of ep");
  expect_problem("1x[A100-80:tp1x1 ep16/stage uneven]", c, moe, "ep=16 ranks cannot each hold one of 8 experts");
}

TEST(Template, ProblemPacksTpGroupsIntoNodes) {
  // 8 A100 GPUs on nodes of 4, 2 and 2: two TP-4 groups do not fit (one node of 4), one TP-4 and two TP-2 do.
  const Cluster c = spec("A100-80:1x4,A100-80:2x2");
  const ModelConfig m = test::small_gpt_model(64);
  expect_problem("1x[A100-80:tp4x2]", c, m, "TP groups on A100-80 do not fit in its nodes");
  expect_problem("1x[A100-80:tp4x1 | A100-80:tp2x2]", c, m, "");
  expect_problem("1x[A100-80:tp2x4]", c, m, "");
  expect_problem("1x[A100-80:tp2x3 | A100-80:tp1x2]", c, m, "");
  expect_problem("1x[A100-80:tp2x4 | A100-80:tp1x1]", c, m, "uses 9 A100-80 GPUs, the cluster has 8");
}

TEST(Template, HashIsEqualForEqualTemplatesAndSeesEveryField) {
  // TemplateHash keys the searches' unordered sets and maps: equal templates must hash alike (else a template
  // priced before is completed again), and a hash that leaves a field out would crowd its buckets. Each
  // template below differs from the first in one field: replicas, a stage's TP, a kind's GPU type, a kind's
  // groups, EP, EP scope, uneven experts, a stage more, a pipeline more.
  const std::string base = "2x[A100-80:tp4x2 | V100-32:tp2x1 ep2/pipelines]";
  const TemplateHash hash;
  const Template t = parse_template(base);
  EXPECT_EQ(hash(t), hash(parse_template(base)));
  EXPECT_EQ(hash(t), hash(parse_template("2x[A100-80:tp4x2|V100-32:tp2x1 ep2/pipelines]")));
  for (const char* other : {"1x[A100-80:tp4x2 | V100-32:tp2x1 ep2/pipelines]", "2x[A100-80:tp2x2 | V100-32:tp2x1 ep2/pipelines]",
                            "2x[H100:tp4x2 | V100-32:tp2x1 ep2/pipelines]", "2x[A100-80:tp4x1 | V100-32:tp2x1 ep2/pipelines]",
                            "2x[A100-80:tp4x2 | V100-32:tp2x1 ep1/pipelines]", "2x[A100-80:tp4x2 | V100-32:tp2x1 ep2/stage]",
                            "2x[A100-80:tp4x2 | V100-32:tp2x1 ep2/pipelines uneven]",
                            "2x[A100-80:tp4x2 | V100-32:tp2x1 ep2/pipelines | T4:tp1x1]",
                            "2x[A100-80:tp4x2 | V100-32:tp2x1 ep2/pipelines]; 1x[T4:tp1x1]"}) {
    const Template o = parse_template(other);
    ASSERT_FALSE(o == t) << other;
    EXPECT_NE(hash(o), hash(t)) << other;
  }
}

}  // namespace
}  // namespace arachne::planner
