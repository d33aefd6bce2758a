// Template generators (planner/template/enumerate.h). The exhaustive enumeration is compared with a brute
// force written from template.h alone (all stage sequences and sets of pipeline classes, filtered by
// template_problem), which shares no code with the token grammar it walks.
#include "planner/template/enumerate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <string>

#include "planner/common/profile.h"
#include "planner/template/completion.h"
#include "planner/template/estimator.h"
#include "planner/template/tokens.h"
#include "sim/exec/simulate.h"
#include "sim/hw/topology.h"
#include "tests/sim/test_support.h"

namespace arachne::planner {
namespace {

Cluster spec(const std::string& s) { return parse_cluster_spec(s, GpuCatalog::load_default()); }

// The estimator as the pricer, as the arachne planner completes templates.
PlanPricer estimated(const Estimator& est) {
  return [&est](const Plan& p, double) -> std::optional<double> {
    const Estimate e = est.estimate(p);
    return e.fits ? std::optional<double>(e.iteration_s) : std::nullopt;
  };
}

// ------------------------------------------------------------------ brute force

// Every stage of at most n GPUs: a TP width, a non-empty set of types with group counts, for MoE an EP
// clause (uneven only where tokens.h allows it).
std::vector<StageTemplate> all_stages(const std::vector<std::string>& types, int n, const ModelConfig& m) {
  std::vector<StageTemplate> out;
  for (const int tp : kTpWidths)
    for (int mask = 1; mask < (1 << types.size()); ++mask) {
      std::vector<StageTemplate> partial{StageTemplate{tp, {}}};
      for (size_t k = 0; k < types.size(); ++k) {
        if (!(mask & (1 << k))) continue;
        std::vector<StageTemplate> next;
        for (const StageTemplate& s : partial)
          for (int g = 1; tp * (s.tp_groups() + g) <= n; ++g) {
            StageTemplate t = s;
            t.kinds.push_back({types[k], g});
            next.push_back(t);
          }
        partial = next;
      }
      for (const StageTemplate& s : partial) {
        out.push_back(s);
        if (!m.moe) continue;
        for (const int ep : {2, 4, 8})
          for (const EpScope scope : {EpScope::Pipelines, EpScope::Stage})
            for (const bool uneven : {false, true}) {
              if (uneven && !(scope == EpScope::Stage && ep == s.tp_groups() && s.kinds.size() > 1)) continue;
              StageTemplate t = s;
              t.ep = ep;
              t.ep_scope = scope;
              t.uneven_experts = uneven;
              out.push_back(t);
            }
      }
    }
  return out;
}

void all_bodies(const std::vector<StageTemplate>& stages, int room, int max_len, std::vector<StageTemplate>& body,
                std::vector<std::vector<StageTemplate>>& out) {
  if (!body.empty()) out.push_back(body);
  if (static_cast<int>(body.size()) == max_len) return;
  for (const StageTemplate& s : stages) {
    if (s.gpus() > room) continue;
    body.push_back(s);
    all_bodies(stages, room - s.gpus(), max_len, body, out);
    body.pop_back();
  }
}

void all_sets(const std::vector<std::vector<StageTemplate>>& bodies, size_t from, int room, Template& t, const Cluster& c,
              const ModelConfig& m, std::set<Template>& out) {
  if (!t.pipelines.empty() && template_problem(t, c, m).empty()) out.insert(canonical(t));
  for (size_t b = from; b < bodies.size(); ++b) {
    PipelineTemplate p{1, bodies[b]};
    const int g = p.gpus_per_replica();
    for (int r = 1; r * g <= room; ++r) {
      p.replicas = r;
      t.pipelines.push_back(p);
      all_sets(bodies, b + 1, room - r * g, t, c, m, out);
      t.pipelines.pop_back();
    }
  }
}

std::set<Template> brute_force(const Cluster& c, const ModelConfig& m) {
  const std::vector<std::string> types = type_order(c);
  const int n = c.total_gpus();
  std::vector<std::vector<StageTemplate>> bodies;
  std::vector<StageTemplate> body;
  all_bodies(all_stages(types, n, m), n, m.layers, body, bodies);
  std::set<Template> out;
  Template t;
  all_sets(bodies, 0, n, t, c, m, out);
  return out;
}

// ------------------------------------------------------------------ exhaustive enumeration

void expect_valid_distinct_canonical(const std::vector<Template>& ts, const Cluster& c, const ModelConfig& m) {
  std::set<Template> seen;
  for (const Template& t : ts) {
    EXPECT_EQ(template_problem(t, c, m), "") << to_text(t);
    EXPECT_EQ(canonical(t), t) << to_text(t);
    EXPECT_TRUE(encode(t, type_order(c))) << to_text(t);
    EXPECT_TRUE(seen.insert(t).second) << "duplicate " << to_text(t);
  }
}

TEST(EnumerateTemplates, TwoGpusHaveFiveTemplates) {
  // By hand: one replica of [tp1 x1], [tp1 x2], [tp2 x1], [tp1 x1 | tp1 x1]; two replicas of [tp1 x1].
  // Two classes would need two distinct one-GPU bodies, and there is only one.
  const Enumeration e = enumerate_templates(spec("A100-80:1x2"), test::small_gpt_model(16));
  EXPECT_TRUE(e.complete);
  std::set<std::string> texts;
  for (const Template& t : e.templates) texts.insert(to_text(t));
  const std::set<std::string> expected{"1x[A100-80:tp1x1]", "1x[A100-80:tp1x2]", "1x[A100-80:tp2x1]",
                                       "1x[A100-80:tp1x1 | A100-80:tp1x1]", "2x[A100-80:tp1x1]"};
  EXPECT_EQ(texts, expected);
}

TEST(EnumerateTemplates, EqualsTheBruteForceOnSmallClusters) {
  struct Case {
    std::string cluster;
    bool moe;
  };
  for (const Case& k : {Case{"A100-80:1x4", false}, Case{"A100-80:1x2,V100-32:1x2", false}, Case{"A100-80:1x4", true},
                        Case{"A100-80:1x2,V100-32:1x1", true}, Case{"A100-80:1x2,V100-32:2x1,T4:1x1", false}}) {
    const Cluster c = spec(k.cluster);
    ModelConfig m = k.moe ? test::small_moe_model(16) : test::small_gpt_model(16);
    m.layers = k.moe ? 2 : 3;  // keeps the brute force small (MoE stages have 13 EP variants each)
    const Enumeration e = enumerate_templates(c, m);
    ASSERT_TRUE(e.complete);
    expect_valid_distinct_canonical(e.templates, c, m);
    const std::set<Template> got(e.templates.begin(), e.templates.end());
    const std::set<Template> want = brute_force(c, m);
    EXPECT_EQ(got.size(), want.size()) << k.cluster;
    for (const Template& t : want)
      if (!got.count(t)) ADD_FAILURE() << k.cluster << ": missing " << to_text(t);
    EXPECT_GT(want.size(), 10u);
  }
}

TEST(EnumerateTemplates, DeterministicAndCapped) {
  const Cluster c = spec("A100-80:1x8,V100-32:1x4");
  const ModelConfig m = test::small_gpt_model(16);
  EnumerationLimits cap;
  cap.max_templates = 500;
  const Enumeration a = enumerate_templates(c, m, cap);
  const Enumeration b = enumerate_templates(c, m, cap);
  EXPECT_FALSE(a.complete);
  EXPECT_EQ(a.templates.size(), 500u);
  EXPECT_EQ(a.templates, b.templates);
  expect_valid_distinct_canonical(a.templates, c, m);
}

// A restricted space small enough to enumerate: at most 2 pipeline classes of at most 3 single-type stages,
// each kind's GPU count a divisor of its type's.
EnumerationLimits two_classes_three_stages_one_type_divisors() {
  EnumerationLimits r;
  r.max_classes = 2;
  r.max_stages = 3;
  r.max_types_per_stage = 1;
  r.divisor_counts = true;
  return r;
}

// Random walks draw templates of the same restricted space (each one found by the complete enumeration),
// distinct and deterministic, and, unlike a capped enumeration, from all of it: on a space the enumeration
// covers, 200 walks reach templates past the first 200 in token order.
TEST(SampleTemplates, DrawFromTheRestrictedSpaceBeyondItsFirstTemplates) {
  const Cluster c = spec("A100-80:1x4,V100-32:1x2,T4:2x1");
  const ModelConfig m = test::small_gpt_model(16);
  const EnumerationLimits r = two_classes_three_stages_one_type_divisors();
  const Enumeration all = enumerate_templates(c, m, r);
  ASSERT_TRUE(all.complete);
  ASSERT_GT(all.templates.size(), 400u);
  const std::vector<Template> drawn = sample_templates(c, m, r, 200, 7);
  EXPECT_EQ(drawn.size(), 200u);
  EXPECT_EQ(drawn, sample_templates(c, m, r, 200, 7));
  EXPECT_NE(drawn, sample_templates(c, m, r, 200, 8));
  expect_valid_distinct_canonical(drawn, c, m);
  const std::set<Template> first(all.templates.begin(), all.templates.begin() + 200);
  const std::set<Template> space(all.templates.begin(), all.templates.end());
  int beyond = 0;
  for (const Template& t : drawn) {
    EXPECT_TRUE(space.count(t)) << to_text(t);
    beyond += first.count(t) == 0;
  }
  EXPECT_GT(beyond, 50);
}

TEST(EnumerateTemplates, RestrictedModeKeepsItsBounds) {
  const Cluster c = spec("A100-80:1x4,V100-32:1x2,T4:2x1");
  const ModelConfig m = test::small_gpt_model(16);
  const EnumerationLimits r = two_classes_three_stages_one_type_divisors();
  const Enumeration e = enumerate_templates(c, m, r);
  ASSERT_TRUE(e.complete);
  expect_valid_distinct_canonical(e.templates, c, m);
  const std::map<std::string, int> have{{"A100-80", 4}, {"V100-32", 2}, {"T4", 2}};
  for (const Template& t : e.templates) {
    EXPECT_LE(t.pipelines.size(), 2u);
    for (const PipelineTemplate& p : t.pipelines) {
      EXPECT_LE(p.stages.size(), 3u);
      for (const StageTemplate& s : p.stages) {
        EXPECT_EQ(s.kinds.size(), 1u);
        EXPECT_EQ(have.at(s.kinds[0].gpu_type) % (p.replicas * s.tp * s.kinds[0].groups), 0) << to_text(t);
      }
    }
  }
  // The restricted space is the unrestricted one filtered by the same bounds.
  EnumerationLimits small = r;
  small.divisor_counts = false;
  small.max_templates = 0;
  EXPECT_LT(e.templates.size(), enumerate_templates(c, m, small).templates.size());
}

TEST(EnumerateTemplates, TypeBlocksAreContiguousUniformRunsOfOneType) {
  for (const bool moe : {false, true}) {
    const Cluster c = spec("A100-80:1x4,V100-32:1x2,T4:2x1");
    const ModelConfig m = moe ? test::small_moe_model(16) : test::small_gpt_model(16);
    EnumerationLimits r;
    r.type_blocks = true;
    r.max_classes = 1;
    const Enumeration e = enumerate_templates(c, m, r);
    ASSERT_TRUE(e.complete);
    expect_valid_distinct_canonical(e.templates, c, m);
    bool saw_two_blocks = false, saw_ep = false;
    for (const Template& t : e.templates)
      for (const PipelineTemplate& p : t.pipelines) {
        std::set<std::string> closed;  // types whose block has ended
        for (size_t j = 0; j < p.stages.size(); ++j) {
          const StageTemplate& s = p.stages[j];
          ASSERT_EQ(s.kinds.size(), 1u) << to_text(t);
          const std::string& type = s.kinds[0].gpu_type;
          EXPECT_FALSE(closed.count(type)) << to_text(t);
          EXPECT_EQ(s.ep, p.stages[0].ep) << to_text(t);
          EXPECT_EQ(s.ep_scope, p.stages[0].ep_scope) << to_text(t);
          saw_ep = saw_ep || s.ep > 1;
          if (j == 0) continue;
          const StageTemplate& prev = p.stages[j - 1];
          if (prev.kinds[0].gpu_type == type) {
            EXPECT_EQ(prev.tp, s.tp) << to_text(t);
            EXPECT_EQ(prev.kinds[0].groups, s.kinds[0].groups) << to_text(t);
          } else {
            closed.insert(prev.kinds[0].gpu_type);
            saw_two_blocks = true;
          }
        }
      }
    EXPECT_TRUE(saw_two_blocks);
    EXPECT_EQ(saw_ep, moe);
  }
}

// ------------------------------------------------------------------ heuristic templates

TEST(HeuristicTemplates, ValidDistinctCanonicalDeterministic) {
  for (const std::string cluster : {"mix-a100-v100-t4", "hetero-a100-v100", "A100-80:1x8", "tiny-hetero"})
    for (const std::string model : {"gpt3-1.3b", "gpt3-13b", "mixtral-8x7b"}) {
      const Cluster c = load_cluster(cluster, GpuCatalog::load_default());
      const ModelConfig m = load_model(model);
      const std::vector<Template> a = heuristic_templates(c, m, 12);
      EXPECT_LE(a.size(), 12u);
      expect_valid_distinct_canonical(a, c, m);
      EXPECT_EQ(a, heuristic_templates(c, m, 12));
    }
}

TEST(HeuristicTemplates, FirstIsTheFastestTypeAtNodeTp) {
  // A 1.3B-parameter model fits in one TP-8 group of 80 GB GPUs (about 21 GB of weights and Adam state in
  // all, before TP), so rule 1 gives one stage; the 32 A100s hold 4 such groups.
  const Cluster c = load_cluster("mix-a100-v100-t4", GpuCatalog::load_default());
  const std::vector<Template> ts = heuristic_templates(c, load_model("gpt3-1.3b"), 4);
  ASSERT_FALSE(ts.empty());
  EXPECT_EQ(to_text(ts.front()), "4x[A100-80:tp8x1]");
  EXPECT_TRUE(heuristic_templates(c, load_model("gpt3-1.3b"), 0).empty());
}

// On a four-type cluster the K = 8 templates include one pipeline class over every type (Metis's shape):
// every GPU of the cluster at work (each type's 32 GPUs split evenly over the replicas), the fastest type
// (H100) first, and a pipeline at most a quarter of its micro-batches deep (global batch / replicas at
// micro-batch 1, the bound enumerate.h states).
TEST(HeuristicTemplates, FourTypeClusterGetsOnePipelineOverEveryType) {
  const Cluster c = load_cluster("A100-80:4x8,V100-32:4x8,H100:4x8,T4:8x4", GpuCatalog::load_default());
  const ModelConfig m = load_model("gpt3-13b");
  const long batch = 256;
  int spanning = 0;
  for (const Template& t : heuristic_templates(c, m, 8, batch)) {
    if (t.pipelines.size() != 1 || t.gpus_by_type().size() != 4) continue;
    ++spanning;
    const PipelineTemplate& p = t.pipelines.front();
    EXPECT_EQ(t.num_gpus(), 128) << to_text(t);
    for (const auto& [type, gpus] : t.gpus_by_type()) EXPECT_EQ(gpus, 32) << to_text(t);
    EXPECT_EQ(p.stages.front().kinds.front().gpu_type, "H100") << to_text(t);
    EXPECT_LE(static_cast<long>(p.stages.size()) * 4 * p.replicas, batch) << to_text(t);
  }
  EXPECT_GE(spanning, 1);
}

// On nodes of one GPU no TP width can merge stages, so no replica count brings the spanning pipeline within a
// quarter of its micro-batches (64 samples: 47 + 24 GPUs make pipelines of about 71 / r stages against a bound
// of 16 / r). Rule 4 proposes it at any depth up to the layers: first at the fewest replicas whose
// pipeline has at most 32 stages (r = 3: 15 + 8 stages; r = 2 makes 35), then at no fewer than twice the
// replicas before; slowest type first, so that the fastest computes the output layer.
TEST(HeuristicTemplates, OneGpuNodesGetSpanningPipelinesDeeperThanTheBubbleBound) {
  const Cluster c = load_cluster("A100-80:47x1,MI300X:24x1", GpuCatalog::load_default());
  const ModelConfig m = load_model("gpt3-6.7b");
  const long batch = 64;
  auto stages_at = [](int r) { return 47 / r + 24 / r; };
  int fewest = 1;
  while (stages_at(fewest) > m.layers) ++fewest;
  std::vector<int> replicas;
  for (const Template& t : heuristic_templates(c, m, 8, batch)) {
    if (t.pipelines.size() != 1 || t.gpus_by_type().size() != 2) continue;
    const PipelineTemplate& p = t.pipelines.front();
    EXPECT_EQ(static_cast<int>(p.stages.size()), stages_at(p.replicas)) << to_text(t);
    EXPECT_GT(static_cast<long>(p.stages.size()) * 4 * p.replicas, batch) << to_text(t);
    EXPECT_EQ(p.stages.front().kinds.front().gpu_type, "A100-80") << to_text(t);
    EXPECT_EQ(p.stages.back().kinds.front().gpu_type, "MI300X") << to_text(t);
    if (!replicas.empty()) {
      EXPECT_GE(p.replicas, 2 * replicas.back()) << to_text(t);
    }
    replicas.push_back(p.replicas);
  }
  ASSERT_FALSE(replicas.empty());
  EXPECT_EQ(replicas.front(), fewest);
}

// gpt-moe-1.3b-64e does not fit one MI300X with all 64 experts (the premise, checked), but does with the
// experts sharded over EP ranks: rule 1 then proposes a one-stage template with EP carved out of its replicas
// (EP dividing both the replicas and the experts), and it completes within memory. Ten GPUs allow ten
// replicas, but only EP 2 at ten.
TEST(HeuristicTemplates, MoeRuleOneShardsExpertsOverTheReplicas) {
  const Cluster c = spec("MI300X:5x2");
  const ModelConfig m = load_model("gpt-moe-1.3b-64e");
  const long batch = 64;
  const Profiler prof(c, m);
  const ProfileKey key{"MI300X", 1, 1.0, Recompute::Full, false};
  ASSERT_GT(prof.stage_memory_bytes(0, m.layers, key, 1), prof.gpu_memory_bytes("MI300X"));
  const Topology topo(c);
  const Estimator est(c, topo, m);
  const PlanPricer price = estimated(est);
  int one_stage = 0;
  for (const Template& t : heuristic_templates(c, m, 8, batch)) {
    if (t.pipelines.size() != 1 || t.pipelines.front().stages.size() != 1) continue;
    ++one_stage;
    const PipelineTemplate& p = t.pipelines.front();
    const int ep = p.stages.front().ep;
    EXPECT_GT(ep, 1) << to_text(t);
    EXPECT_EQ(p.replicas % ep, 0) << to_text(t);
    EXPECT_EQ(m.moe->experts % ep, 0) << to_text(t);
    EXPECT_FALSE(complete_template(t, {&c, &topo, &m, batch}, price).empty()) << to_text(t);
  }
  EXPECT_GE(one_stage, 1);
}

// Each expert's gradients are all-reduced over replicas / EP copies. 40 one-GPU TP groups of H100-PCIe allow
// 40 one-stage replicas at EP 8 (five copies of each expert), 32 at EP 32 (one copy): rule 1 takes the widest
// EP among the counts from the most down to half of them.
TEST(HeuristicTemplates, MoeRuleOneTakesTheWidestEpWithinHalfTheReplicas) {
  const Cluster c = spec("H100-PCIe:5x8");
  const ModelConfig m = load_model("gpt-moe-1.3b-64e");
  int narrow = 0;
  for (const Template& t : heuristic_templates(c, m, 8, 64)) {
    if (t.pipelines.size() != 1 || t.pipelines.front().stages.size() != 1 || t.pipelines.front().stages.front().tp != 1)
      continue;
    ++narrow;
    const PipelineTemplate& p = t.pipelines.front();
    EXPECT_GE(p.replicas, 20) << to_text(t);
    EXPECT_EQ(p.replicas, p.stages.front().ep) << to_text(t);
  }
  EXPECT_EQ(narrow, 1);
}

// A pipeline needs one sample of the global batch at least: 144 A100s in TP-1 groups would make 128
// one-stage replicas of opt-350m (rule 1's narrow TP), twice the 64 samples.
TEST(HeuristicTemplates, NoClassHasMoreReplicasThanTheBatchHasSamples) {
  const Cluster c = spec("A100-80:36x4");
  const ModelConfig m = load_model("opt-350m");
  const long batch = 64;
  const std::vector<Template> ts = heuristic_templates(c, m, 8, batch);
  ASSERT_FALSE(ts.empty());
  for (const Template& t : ts)
    for (const PipelineTemplate& p : t.pipelines) EXPECT_LE(p.replicas, batch) << to_text(t);
}

TEST(HeuristicTemplates, DeepModelsGetPipelines) {
  // GPT-3 175B (about 2.8 TB of weights and Adam state) cannot fit one 8-GPU node: every template pipelines.
  const Cluster c = load_cluster("hetero-a100-v100", GpuCatalog::load_default());
  const std::vector<Template> ts = heuristic_templates(c, load_model("gpt3-175b"), 8);
  ASSERT_FALSE(ts.empty());
  for (const Template& t : ts)
    for (const PipelineTemplate& p : t.pipelines) EXPECT_GT(p.stages.size(), 1u) << to_text(t);
}

// Device-group templates: every GPU of every type in use (unlike rule 3 of the heuristic generator, which
// takes 1/40 of each type on a cluster of 64 H100s, 64 A100s and 128 V100s and leaves 64 idle), one type per
// stage, and each one-pipeline template the fold of a replicated one in the list (its r replicas = r groups
// per stage): the same GPUs and stages.
TEST(DeviceGroupTemplates, UseEveryGpuAndFoldReplicasIntoGroupsPerStage) {
  const Cluster c = load_cluster("H100:8x8,A100-80:16x4,V100-32:64x2", GpuCatalog::load_default());
  const ModelConfig m = load_model("llama2-7b");
  const long batch = 1024;
  const std::vector<Template> all = device_group_templates(c, m, 3, batch);
  int folded = 0;
  for (const Template& t : all) {
    ASSERT_EQ(t.pipelines.size(), 1u) << to_text(t);
    EXPECT_EQ(t.num_gpus(), 256) << to_text(t);
    EXPECT_TRUE(template_problem(t, c, m).empty()) << to_text(t);
    const PipelineTemplate& p = t.pipelines.front();
    for (const StageTemplate& s : p.stages) EXPECT_EQ(s.kinds.size(), 1u) << to_text(t);
    if (p.replicas > 1) continue;
    ++folded;
    const int r = p.stages.front().tp_groups();
    EXPECT_GT(r, 1) << to_text(t);
    Template unfolded = t;
    unfolded.pipelines.front().replicas = r;
    for (StageTemplate& s : unfolded.pipelines.front().stages) s.kinds.front().groups /= r;
    EXPECT_NE(std::find(all.begin(), all.end(), canonical(unfolded)), all.end()) << to_text(t);
  }
  EXPECT_GE(folded, 1);
  EXPECT_EQ(device_group_templates(c, m, 3, batch), all);
}

TEST(DeepSpanningTemplatesOverEveryGpu, UseEveryGpuWithReplicasWithinAStageOfEachOther) {
  // 48 GH200 (8-GPU nodes), 50 H100 (2-GPU) and 38 H200 (1-GPU): no replica count above 2 divides every
  // type's GPUs, so rule 4 leaves GPUs idle; these templates add them as stages. Every GPU works, no class
  // is deeper than the layers, and the replicas' depths differ by at most as many stages as the cluster has
  // types (each type's leftover goes to the shallowest replicas first).
  const Cluster c = load_cluster("GH200:6x8,H100:25x2,H200:38x1", GpuCatalog::load_default());
  const ModelConfig m = load_model("gpt3-6.7b");
  const std::vector<Template> all = deep_spanning_templates_over_every_gpu(c, m, 128);
  ASSERT_FALSE(all.empty());
  int folded = 0;
  for (const Template& t : all) {
    EXPECT_EQ(t.num_gpus(), c.total_gpus()) << to_text(t);
    EXPECT_TRUE(template_problem(t, c, m).empty()) << to_text(t);
    EXPECT_EQ(t, canonical(t)) << to_text(t);
    if (t.pipelines.size() == 1 && t.pipelines.front().replicas == 1) {
      // Folded (one pipeline, g TP groups per stage): each type's stages of g groups, then at most one of
      // fewer groups, the leftover.
      ++folded;
      const std::vector<StageTemplate>& stages = t.pipelines.front().stages;
      const int g = stages.front().tp_groups();
      EXPECT_GT(g, 1) << to_text(t);
      for (size_t j = 0; j < stages.size(); ++j) {
        if (stages[j].tp_groups() == g) continue;
        EXPECT_LT(stages[j].tp_groups(), g) << to_text(t);
        ASSERT_GT(j, 0u);
        const std::vector<GroupKind> leftover{GroupKind{stages[j - 1].kinds.front().gpu_type, stages[j].tp_groups()}};
        EXPECT_EQ(stages[j].kinds, leftover) << to_text(t);
        EXPECT_TRUE(j + 1 == stages.size() || stages[j + 1].kinds.front().gpu_type != stages[j].kinds.front().gpu_type) << to_text(t);
      }
      continue;
    }
    size_t shallowest = m.layers, deepest = 0;
    for (const PipelineTemplate& p : t.pipelines) {
      shallowest = std::min(shallowest, p.stages.size());
      deepest = std::max(deepest, p.stages.size());
    }
    EXPECT_LE(deepest, static_cast<size_t>(m.layers)) << to_text(t);
    EXPECT_LE(deepest - shallowest, 3u) << to_text(t);
    EXPECT_GT(t.pipelines.size(), 1u) << to_text(t);  // some replicas take more of the leftover than others
  }
  EXPECT_GE(folded, 1);
  // One type: none (rule 4 spans two types or more).
  EXPECT_TRUE(deep_spanning_templates_over_every_gpu(load_cluster("H100:4x8", GpuCatalog::load_default()), m, 128).empty());
  EXPECT_EQ(deep_spanning_templates_over_every_gpu(c, m, 128), all);
}

TEST(DeepSpanningTemplatesOverEveryGpu, RunTypesOfEqualPeakInOrderOfHbmBandwidth) {
  // A100-40 and A100-80 have the same peak FLOP/s (312 T); the A100-80's HBM (2,039 against 1,555 GB/s)
  // runs the memory-bound kernels faster, so rule 4's pipelines, slowest type first, put it last (where the
  // head and its logits are), whichever name sorts first. So did AMP's plan for opt-350m on 23 A100-40 and 25
  // one-GPU A100-80 nodes (fresh held-out seed 81), 1.7 % faster than any with the A100-80 stages first.
  const ModelConfig m = load_model("opt-350m");
  for (const std::string& spec : {"A100-40:2x8,A100-40:1x6,A100-40:1x1,A100-80:25x1", "A100-80:2x8,A100-80:1x6,A100-80:1x1,A100-40:25x1"}) {
    const Cluster c = load_cluster(spec, GpuCatalog::load_default());
    int unfolded = 0;
    for (const Template& t : deep_spanning_templates_over_every_gpu(c, m, 64)) {
      if (t.pipelines.size() == 1 && t.pipelines.front().replicas == 1) continue;  // folded: both orders
      ++unfolded;
      for (const PipelineTemplate& p : t.pipelines) {
        const auto first_80 = std::find_if(p.stages.begin(), p.stages.end(), [](const StageTemplate& s) { return s.kinds.front().gpu_type == "A100-80"; });
        ASSERT_NE(first_80, p.stages.end()) << to_text(t);
        EXPECT_TRUE(std::all_of(first_80, p.stages.end(), [](const StageTemplate& s) { return s.kinds.front().gpu_type == "A100-80"; })) << spec << ": " << to_text(t);
      }
    }
    EXPECT_GE(unfolded, 2) << spec;
  }
}

// The text of `replicas` pipelines of `count` one-group stages of `type` at TP `tp` (one class).
std::string stage_class(int replicas, const std::string& type, int tp, int count) {
  std::string out = std::to_string(replicas) + "x[";
  for (int i = 0; i < count; ++i) out += (i ? " | " : "") + type + ":tp" + std::to_string(tp) + "x1";
  return out + "]";
}

// `count` one-group stages of `type` at TP `tp`, as the text of a run of stages within a class.
std::string stage_run(const std::string& type, int tp, int count) {
  const std::string c = stage_class(1, type, tp, count);
  return c.substr(3, c.size() - 4);
}

// The templates of `all` as a set, after checking that each is canonical and runnable, that `check_stage`
// passes on each of its stages, and that none repeats.
std::set<Template> checked_distinct(const std::vector<Template>& all, const Cluster& c, const ModelConfig& m,
                                    const std::function<void(const Template&, const StageTemplate&)>& check_stage) {
  std::set<Template> got;
  for (const Template& t : all) {
    EXPECT_EQ(t, canonical(t)) << to_text(t);
    EXPECT_TRUE(template_problem(t, c, m).empty()) << to_text(t);
    for (const PipelineTemplate& p : t.pipelines)
      for (const StageTemplate& s : p.stages) check_stage(t, s);
    got.insert(t);
  }
  EXPECT_EQ(got.size(), all.size());
  return got;
}

TEST(PipelinesAcrossTypes, DealEveryStageIntoPipelinesOfBothTypesTheSlowestFirst) {
  // The climbs' shape on 22 A10G and 28 L40S GPUs: one class per type. Dealt across types into 2, 3, 4 and 5
  // pipelines (P / 2, P - 1, P, P + 1 of its 4): the same stages, every pipeline with both types, the slower
  // A10G (70 against 362 TFLOP/s) before the L40S, depths within one stage of each other.
  const Cluster c = load_cluster("A10G:11x2,L40S:14x2", GpuCatalog::load_default());
  const ModelConfig m = load_model("gpt3-2.7b");
  const Template by_type = parse_template(stage_class(1, "A10G", 2, 5) + "; " + stage_class(1, "A10G", 2, 6) + "; " +
                                          stage_class(2, "L40S", 2, 7));
  const auto stages_of = [](const Template& t) {
    std::multiset<std::pair<std::string, int>> out;
    for (const PipelineTemplate& p : t.pipelines)
      for (int r = 0; r < p.replicas; ++r)
        for (const StageTemplate& s : p.stages) out.insert({s.kinds.front().gpu_type, s.tp});
    return out;
  };
  const std::vector<Template> all = pipelines_across_types(by_type, c, m);
  std::set<int> counts;
  for (const Template& t : all) {
    EXPECT_EQ(t, canonical(t)) << to_text(t);
    EXPECT_NE(t, canonical(by_type));
    EXPECT_TRUE(template_problem(t, c, m).empty()) << to_text(t);
    EXPECT_EQ(stages_of(t), stages_of(by_type)) << to_text(t);
    int pipelines = 0;
    size_t shallowest = m.layers, deepest = 0;
    for (const PipelineTemplate& p : t.pipelines) {
      pipelines += p.replicas;
      shallowest = std::min(shallowest, p.stages.size());
      deepest = std::max(deepest, p.stages.size());
      ASSERT_TRUE(p.stages.front().kinds.front().gpu_type == "A10G" && p.stages.back().kinds.front().gpu_type == "L40S") << to_text(t);
      const auto first_l40s = std::find_if(p.stages.begin(), p.stages.end(), [](const StageTemplate& s) { return s.kinds.front().gpu_type == "L40S"; });
      EXPECT_TRUE(std::all_of(first_l40s, p.stages.end(), [](const StageTemplate& s) { return s.kinds.front().gpu_type == "L40S"; })) << to_text(t);
    }
    EXPECT_LE(deepest - shallowest, 1u) << to_text(t);
    counts.insert(pipelines);
  }
  EXPECT_EQ(counts, (std::set<int>{2, 3, 4, 5}));
  EXPECT_EQ(pipelines_across_types(by_type, c, m), all);
  // None from one type, nor from stages of several types (a device group).
  EXPECT_TRUE(pipelines_across_types(parse_template(stage_class(4, "L40S", 2, 7)), c, m).empty());
  EXPECT_TRUE(pipelines_across_types(parse_template("2x[A10G:tp2x1+L40S:tp2x1 | L40S:tp2x1]"), c, m).empty());
}

// Deep pipelines over the types a template uses: on 140 H100-PCIe (4-GPU nodes), 160 L4 and 40 MI300X with
// gpt3-6.7b, from a template of MI300X and H100-PCIe, TP-1 pipelines of those two types only, the slower
// H100-PCIe (756 against 1,307 TFLOP/s) first: at 12 replicas 11 H100-PCIe and 3 MI300X stages each, alone
// (12 GPUs idle), with the idle GPUs as stages (the 4 MI300X to the first four replicas, the 8 H100-PCIe to
// the others) and with an MI300X stage first; at 20 replicas 7 and 2 stages, no GPU idle.
TEST(DeepSpanningTemplatesOverTheTypesOf, SweepTheReplicaCountsOverTheTemplatesTypesOnly) {
  const Cluster c = load_cluster("H100-PCIe:35x4,L4:20x8,MI300X:5x8", GpuCatalog::load_default());
  const ModelConfig m = load_model("gpt3-6.7b");
  const Template best = parse_template("5x[MI300X:tp1x2 | MI300X:tp1x2 | H100-PCIe:tp2x4 | H100-PCIe:tp2x2]");
  const std::set<Template> got =
      checked_distinct(deep_spanning_templates_over_the_types_of(best, c, m), c, m, [](const Template& t, const StageTemplate& s) {
        EXPECT_EQ(s.tp, 1) << to_text(t);
        EXPECT_NE(s.kinds.front().gpu_type, "L4") << to_text(t);
      });
  // `count` TP-1 stages of `type`, as template text.
  const auto run = [](const std::string& type, int count) { return stage_run(type, 1, count); };
  const std::string h = "H100-PCIe", mi = "MI300X";
  for (const std::string& text : {"12x[" + run(h, 11) + " | " + run(mi, 3) + "]",
                                  "4x[" + run(h, 11) + " | " + run(mi, 4) + "]; 8x[" + run(h, 12) + " | " + run(mi, 3) + "]",
                                  "12x[" + run(mi, 1) + " | " + run(h, 11) + " | " + run(mi, 2) + "]",
                                  "20x[" + run(h, 7) + " | " + run(mi, 2) + "]",
                                  "20x[" + run(mi, 1) + " | " + run(h, 7) + " | " + run(mi, 1) + "]"})
    EXPECT_TRUE(got.count(canonical(parse_template(text)))) << text;
  // None from a template of every type, nor of one type.
  EXPECT_TRUE(deep_spanning_templates_over_the_types_of(parse_template("1x[L4:tp8x1 | MI300X:tp8x1 | H100-PCIe:tp4x1]"), c, m).empty());
  EXPECT_TRUE(deep_spanning_templates_over_the_types_of(parse_template("5x[MI300X:tp8x1]"), c, m).empty());
}

// Deep pipelines at a template's TP widths: on 161 GPUs of A10 (4-GPU nodes), A100-80 (six 8-GPU nodes and
// one of 6), GH200 (4-GPU nodes) and H100 (one-GPU nodes) with llama2-7b, from a template of TP-4 A100-80 and
// TP-1 H100 stages, the A100-80 nodes hold 13 TP-4 groups (the 6-GPU node one), and the fastest idle type,
// GH200 (peak as H100's, more HBM bandwidth), joins at TP 1; the A10s stay idle. Rule 4's order (the slowest
// first; H100, whose memory is least, kept off both ends): A100-80, H100, GH200. At 4 replicas 3 A100-80, 8
// H100 and 4 GH200 stages each, alone (one A100-80 group and 3 H100 idle) and with those as stages (the
// A100-80 group to the first replica, one H100 to each of the others); at 8 replicas 1, 4 and 2 stages, the 5
// A100-80 groups and 3 H100 left over as stages. And without the template's slowest type, A100-80: H100
// pipelines alone, such as 5 of 7 stages.
TEST(DeepSpanningTemplatesAtTheWidthsOf, SplitTheTemplatesTpGroupsAndTheFastestIdleTypeOverTheReplicas) {
  const Cluster c = load_cluster("A10:14x4,A100-80:6x8,A100-80:1x6,GH200:4x4,H100:35x1", GpuCatalog::load_default());
  const ModelConfig m = load_model("llama2-7b");
  const Template best = parse_template("13x[A100-80:tp4x1 | H100:tp1x1 | H100:tp1x1]");
  const std::set<Template> got =
      checked_distinct(deep_spanning_templates_at_the_widths_of(best, c, m), c, m, [](const Template& t, const StageTemplate& s) {
        ASSERT_EQ(s.kinds.size(), 1u) << to_text(t);
        const std::string& type = s.kinds.front().gpu_type;
        EXPECT_NE(type, "A10") << to_text(t);
        EXPECT_EQ(s.tp, type == "A100-80" ? 4 : 1) << to_text(t);
      });
  const auto run = [](const std::string& type, int tp, int count) { return stage_run(type, tp, count); };
  const std::string a = "A100-80", h = "H100", g = "GH200";
  for (const std::string& text : {"4x[" + run(a, 4, 3) + " | " + run(h, 1, 8) + " | " + run(g, 1, 4) + "]",
                                  "1x[" + run(a, 4, 4) + " | " + run(h, 1, 8) + " | " + run(g, 1, 4) + "]; 3x[" + run(a, 4, 3) +
                                      " | " + run(h, 1, 9) + " | " + run(g, 1, 4) + "]",
                                  "5x[" + run(a, 4, 2) + " | " + run(h, 1, 4) + " | " + run(g, 1, 2) + "]; 3x[" + run(a, 4, 1) +
                                      " | " + run(h, 1, 5) + " | " + run(g, 1, 2) + "]",
                                  "5x[" + run(h, 1, 7) + "]"})
    EXPECT_TRUE(got.count(canonical(parse_template(text)))) << text;
  // From a template of every type, only pipelines without its slowest type, A10.
  const std::vector<Template> every = deep_spanning_templates_at_the_widths_of(
      parse_template("1x[A10:tp4x1 | A100-80:tp8x1 | GH200:tp4x1 | H100:tp1x1]"), c, m);
  EXPECT_FALSE(every.empty());
  for (const Template& t : every)
    for (const PipelineTemplate& p : t.pipelines)
      for (const StageTemplate& s : p.stages) EXPECT_NE(s.kinds.front().gpu_type, "A10") << to_text(t);
}

// The idle type's stages first: one to four one-group stages of the fastest type the template leaves idle
// (MI250X, at TP 1 and at its two-GPU nodes' TP 2) before every class, each also with the class's first run
// (the A100-80 stages) moved to its end; none without an idle type, none for MoE models.
TEST(IdleTypeStagesFirst, PutOneToFourGroupsOfTheIdleTypeFirstWithAndWithoutTheFirstRunLast) {
  const Cluster c = load_cluster("A100-80:1x8,GH200:28x1,MI250X:17x2", GpuCatalog::load_default());
  const ModelConfig m = load_model("gpt3-6.7b");
  const std::string a = stage_run("A100-80", 2, 2), g = stage_run("GH200", 1, 14);
  const Template best = parse_template("2x[" + a + " | " + g + "]");
  const std::set<Template> got = checked_distinct(idle_type_stages_first(best, c, m), c, m, [](const Template& t, const StageTemplate& s) {
    ASSERT_EQ(s.kinds.size(), 1u) << to_text(t);
    if (s.kinds.front().gpu_type == "MI250X") EXPECT_EQ(s.kinds.front().groups, 1) << to_text(t);
  });
  std::set<Template> expected;
  for (const int tp : {1, 2})
    for (int k = 1; k <= 4; ++k) {
      const std::string idle = stage_run("MI250X", tp, k);
      expected.insert(canonical(parse_template("2x[" + idle + " | " + a + " | " + g + "]")));
      expected.insert(canonical(parse_template("2x[" + idle + " | " + g + " | " + a + "]")));
    }
  EXPECT_EQ(got, expected);
  EXPECT_TRUE(idle_type_stages_first(parse_template("2x[MI250X:tp2x1 | " + a + " | " + g + "]"), c, m).empty());
  EXPECT_TRUE(idle_type_stages_first(parse_template("2x[" + a + " | " + g + "]"), c, load_model("mixtral-8x7b")).empty());
}

// The device-group form: one pipeline of equal group counts per stage, one type per stage, each type's stages
// consecutive; no form for replicated pipelines, mixed stages, unequal group counts or a type in two runs.
TEST(DeviceGroupBlocks, ReadTheTypesRunsOfOnePipelineOfEqualGroupCounts) {
  const std::optional<std::vector<DeviceGroupBlock>> blocks =
      device_group_blocks(parse_template("1x[A100-80:tp2x4 | A100-80:tp1x4 | V100-32:tp4x4 | T4:tp1x4]"));
  ASSERT_TRUE(blocks);
  ASSERT_EQ(blocks->size(), 3u);
  EXPECT_EQ((*blocks)[0].gpu_type, "A100-80");
  EXPECT_EQ((*blocks)[0].tps, (std::vector<int>{2, 1}));
  EXPECT_EQ((*blocks)[1].tps, std::vector<int>{4});
  EXPECT_EQ((*blocks)[2].gpu_type, "T4");
  for (const std::string text : {"2x[A100-80:tp2x4 | V100-32:tp4x4]", "1x[A100-80:tp2x4+V100-32:tp2x4]",
                                 "1x[A100-80:tp2x4 | V100-32:tp4x2]", "1x[A100-80:tp2x4 | V100-32:tp4x4 | A100-80:tp2x4]",
                                 "1x[A100-80:tp2x4]; 1x[V100-32:tp4x4]"})
    EXPECT_FALSE(device_group_blocks(parse_template(text))) << text;
}

// One block laid anew over its GPUs per group set: the A100-80s' 4 (8-GPU nodes: TP up to 8) as 2+2, 4, 2+1+1 and
// 1+1+2 (not 4+2: six GPUs), the V100-32s' 2 (4-GPU nodes) as one TP-2 stage; the other block and the group
// count kept, the template itself left out; none for MoE models.
TEST(DeviceGroupBlockWidths, LayABlocksStagesAtOneWidthOrTwoAdjacentWidthsInBothOrders) {
  const Cluster c = load_cluster("A100-80:2x8,V100-32:2x4", GpuCatalog::load_default());
  const ModelConfig m = load_model("gpt3-1.3b");
  const std::string a = "A100-80:tp1x4 | A100-80:tp1x4 | A100-80:tp1x4 | A100-80:tp1x4", v = "V100-32:tp1x4 | V100-32:tp1x4";
  const Template t = parse_template("1x[" + a + " | " + v + "]");
  const auto group_of_four = [](const Template& u, const StageTemplate& s) { EXPECT_EQ(s.tp_groups(), 4) << to_text(u); };
  std::set<Template> expected;
  for (const std::string laid : {"A100-80:tp2x4 | A100-80:tp2x4", "A100-80:tp4x4", "A100-80:tp2x4 | A100-80:tp1x4 | A100-80:tp1x4",
                                  "A100-80:tp1x4 | A100-80:tp1x4 | A100-80:tp2x4"})
    expected.insert(canonical(parse_template("1x[" + laid + " | " + v + "]")));
  EXPECT_EQ(checked_distinct(device_group_block_widths(t, 0, c, m), c, m, group_of_four), expected);
  EXPECT_EQ(checked_distinct(device_group_block_widths(t, 1, c, m), c, m, group_of_four),
            (std::set<Template>{canonical(parse_template("1x[" + a + " | V100-32:tp2x4]"))}));
  EXPECT_TRUE(device_group_block_widths(t, 2, c, m).empty());
  EXPECT_TRUE(device_group_block_widths(parse_template("2x[A100-80:tp4x1 | V100-32:tp2x1]"), 0, c, m).empty());
  EXPECT_TRUE(device_group_block_widths(t, 0, c, load_model("mixtral-8x7b")).empty());
}

// Every other order of three blocks (five), each block's stages kept whole; none for MoE models.
TEST(DeviceGroupBlockOrders, PutTheBlocksInEveryOtherOrder) {
  const Cluster c = load_cluster("A100-80:1x8,V100-32:1x8,T4:1x4", GpuCatalog::load_default());
  const ModelConfig m = load_model("gpt3-1.3b");
  const std::string a = "A100-80:tp2x4", b = "V100-32:tp1x4 | V100-32:tp1x4", t4 = "T4:tp1x4";
  const Template t = parse_template("1x[" + a + " | " + b + " | " + t4 + "]");
  std::set<Template> expected;
  for (const auto& [x, y, z] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {a, t4, b}, {b, a, t4}, {b, t4, a}, {t4, a, b}, {t4, b, a}})
    expected.insert(canonical(parse_template("1x[" + x + " | " + y + " | " + z + "]")));
  EXPECT_EQ(checked_distinct(device_group_block_orders(t, c, m), c, m, [](const Template&, const StageTemplate&) {}), expected);
  EXPECT_TRUE(device_group_block_orders(t, c, load_model("mixtral-8x7b")).empty());
}

// One type at both ends: in every class of two stage types, the first stage of the last run moved to the
// front, or the last stage of the first run moved to the end; one-type classes as they were.
TEST(OneTypeAtBothEnds, MoveOneStageOfTheLastRunToTheFrontOrOfTheFirstRunToTheEnd) {
  const Cluster c = load_cluster("H100-PCIe:35x4,MI300X:5x8", GpuCatalog::load_default());
  const ModelConfig m = load_model("gpt3-6.7b");
  const Template t = parse_template("2x[H100-PCIe:tp1x1 | H100-PCIe:tp1x1 | MI300X:tp1x1 | MI300X:tp2x1]; 1x[MI300X:tp8x1]");
  const std::vector<Template> both = one_type_at_both_ends(t, c, m);
  const std::set<Template> expected{
      canonical(parse_template("2x[MI300X:tp1x1 | H100-PCIe:tp1x1 | H100-PCIe:tp1x1 | MI300X:tp2x1]; 1x[MI300X:tp8x1]")),
      canonical(parse_template("2x[H100-PCIe:tp1x1 | MI300X:tp1x1 | MI300X:tp2x1 | H100-PCIe:tp1x1]; 1x[MI300X:tp8x1]"))};
  EXPECT_EQ(std::set<Template>(both.begin(), both.end()), expected);
  for (const Template& b : both) EXPECT_TRUE(template_problem(b, c, m).empty()) << to_text(b);
  // A template of one type has no such move.
  EXPECT_TRUE(one_type_at_both_ends(parse_template("4x[MI300X:tp1x1 | MI300X:tp2x1]"), c, m).empty());
}

// A cluster, a model and a batch with the estimator as the pricer.
struct EstimatedCase {
  Cluster cluster;
  ModelConfig model;
  long batch;
  Topology topo;
  Estimator est;
  PlanPricer price;
  EstimatedCase(const std::string& cluster_spec, const std::string& model_name, long global_batch)
      : cluster(spec(cluster_spec)), model(load_model(model_name)), batch(global_batch), topo(cluster),
        est(cluster, topo, model), price(estimated(est)) {}
};

// The templates use the j fastest types (peak FLOP/s: H100 > H100-PCIe > L40S > P100), every j from 3 down
// to 1 where one fits, one pipeline class each; all four types only in a pipeline of one stage per node;
// canonical, distinct, runnable.
TEST(FastSubsetTemplates, SpanTheFastestTypesOnly) {
  const Cluster c = spec("H100:1x8,H100-PCIe:14x1,L40S:8x2,P100:6x4");
  const ModelConfig m = load_model("gpt3-13b");
  const std::vector<std::string> by_speed{"H100", "H100-PCIe", "L40S", "P100"};
  const std::vector<Template> all = fast_subset_templates(c, m, 2, 64);
  expect_valid_distinct_canonical(all, c, m);
  std::set<std::size_t> subsets;
  for (const Template& t : all) {
    ASSERT_EQ(t.pipelines.size(), 1u) << to_text(t);
    const auto used = t.gpus_by_type();
    std::size_t j = 0;
    while (j < by_speed.size() && used.count(by_speed[j])) ++j;
    EXPECT_EQ(used.size(), j) << to_text(t) << ": not the fastest types";
    if (j == by_speed.size()) {
      EXPECT_EQ(t.pipelines.front().replicas, 1) << to_text(t);
      EXPECT_EQ(t.pipelines.front().stages.size(), c.nodes.size()) << to_text(t);
    }
    subsets.insert(j);
  }
  EXPECT_EQ(subsets, (std::set<std::size_t>{1, 2, 3, 4}));
  EXPECT_EQ(fast_subset_templates(c, m, 2, 64), all);
  EXPECT_TRUE(fast_subset_templates(spec("H100:4x8"), m, 2, 64).empty());
}

// Why they are proposed. GPT-3 13B's weights, gradients and Adam states take 16 B x 12.9 G = 206 GB: the
// 14 one-GPU H100-PCIe nodes work only in pipelines of three stages or more, and the heuristic generator's
// pipelines hold at most 12 of them, or span the slow L40S and P100 too. One deep pipeline over the H100 node
// and the 14 H100-PCIe has 8 x 989 + 14 x 756 = 18.5 PFLOP/s of peak, 2.3 times the H100 node's 7.9 and
// 2.2 times the 12 H100-PCIe's 9.1 (gpu catalog); at 64 micro-batches its 1F1B bubble,
// (pp - 1) / (m + pp - 1) for pp <= 22 stages, stays below 25 % (Narayanan et al. SC'21 §2.2.1). So, with every
// template completed by the estimator and simulated, the best of them must beat the heuristic generator's
// best by well over 1.3 times.
TEST(FastSubsetTemplates, DeepPipelineOverTheFastTypesBeatsEveryHeuristicTemplate) {
  const EstimatedCase x("H100:1x8,H100-PCIe:14x1,L40S:8x2,P100:6x4", "gpt3-13b", 64);
  auto best_simulated = [&](const std::vector<Template>& ts) {
    double best = std::numeric_limits<double>::infinity();
    for (const Template& t : ts) {
      const std::vector<CompletedPlan> plans = complete_template(t, {&x.cluster, &x.topo, &x.model, x.batch}, x.price, {.max_candidates = 1});
      if (plans.empty()) continue;
      const SimResult r = simulate_iteration(x.cluster, x.topo, x.model, plans.front().plan, SimOptions{});
      if (!r.oom) best = std::min(best, r.iteration_time_s);
    }
    return best;
  };
  const double heuristic = best_simulated(heuristic_templates(x.cluster, x.model, 8, x.batch));
  const double subsets = best_simulated(fast_subset_templates(x.cluster, x.model, 2, x.batch));
  ASSERT_TRUE(std::isfinite(heuristic));
  EXPECT_LT(subsets * 1.3, heuristic);
}

// Rule 2 over the j fastest types, j from types - 1 down to 2 (peak FLOP/s: H100 > H100-PCIe > L40S >
// P100): one class per type, each the heuristic generator's own one-class template of that type; canonical,
// distinct, runnable; none on two types.
TEST(FastDataParallelTemplates, OneClassPerTypeOverTheFastestTypes) {
  const Cluster c = spec("H100:1x8,H100-PCIe:14x1,L40S:8x2,P100:6x4");
  const ModelConfig m = load_model("gpt3-13b");
  const std::vector<std::string> by_speed{"H100", "H100-PCIe", "L40S", "P100"};
  const std::vector<Template> all = fast_data_parallel_templates(c, m, 64);
  expect_valid_distinct_canonical(all, c, m);
  std::set<PipelineTemplate> per_type;  // the heuristic generator's one-class templates
  for (const Template& t : heuristic_templates(c, m, 64, 64))
    if (t.pipelines.size() == 1 && t.gpus_by_type().size() == 1) per_type.insert(t.pipelines.front());
  std::vector<std::size_t> subsets;
  for (const Template& t : all) {
    const auto used = t.gpus_by_type();
    std::size_t j = 0;
    while (j < by_speed.size() && used.count(by_speed[j])) ++j;
    EXPECT_EQ(used.size(), j) << to_text(t) << ": not the fastest types";
    EXPECT_EQ(t.pipelines.size(), j) << to_text(t);
    for (const PipelineTemplate& p : t.pipelines) EXPECT_EQ(per_type.count(p), 1u) << to_text(t);
    subsets.push_back(j);
  }
  EXPECT_EQ(subsets, (std::vector<std::size_t>{3, 2}));
  EXPECT_EQ(fast_data_parallel_templates(c, m, 64), all);
  EXPECT_TRUE(fast_data_parallel_templates(spec("H100:4x8,A100-80:4x8"), m, 64).empty());
}

// Why they are proposed. GPT-3 13B at TP 8 (rule 1 on 8-GPU nodes) leaves each GPU 1/8 of the 12.9 G
// gradients, all-reduced in fp32 (sim/exec/stage_work.cpp) over the data-parallel replicas through the
// NICs: a ring moves about twice the shard per GPU, 2 x 4 B x 1.6 G = 12.9 GB, which at 6.25 GB/s per
// V100-32 GPU (4 x 100 Gbit/s per 8-GPU node, configs/gpus.yaml) takes 2.1 s, against 0.5 s at the
// A100-80's 25 GB/s and less at the H100's 50. Compute is about 1 s (the H100 and A100-80 replicas get
// samples in proportion to speed): the pair's all-reduce mostly hides behind the backward pass (<= ~1.5 s
// per iteration), while with V100-32 in the ring the iteration cannot end before the 2.1 s all-reduce, for
// 9 % more peak FLOP/s (32 x 8 x 125 TFLOP/s beside 32 x 8 x 989 + 40 x 8 x 312). So rule 2 over the three
// fastest types must simulate at least 1.3 times slower than over the two.
TEST(FastDataParallelTemplates, LeaveTheSlowNicsOutOfTheGradientAllReduce) {
  const EstimatedCase x("A100-80:40x8,H100:32x8,V100-32:32x8,T4:48x4", "gpt3-13b", 1024);
  std::map<std::size_t, double> simulated;  // by the number of types
  for (const Template& t : fast_data_parallel_templates(x.cluster, x.model, x.batch)) {
    const std::vector<CompletedPlan> plans = complete_template(t, {&x.cluster, &x.topo, &x.model, x.batch}, x.price, {.max_candidates = 1});
    ASSERT_FALSE(plans.empty()) << to_text(t);
    const SimResult r = simulate_iteration(x.cluster, x.topo, x.model, plans.front().plan, SimOptions{});
    ASSERT_FALSE(r.oom) << to_text(t);
    simulated[t.pipelines.size()] = r.iteration_time_s;
  }
  ASSERT_EQ(simulated.size(), 2u);  // over {H100, A100-80} and {H100, A100-80, V100-32}
  EXPECT_GT(simulated.at(3), 1.3 * simulated.at(2));
}

// DeepSeek-MoE 16B's weights, gradients and Adam states take 16 B x 16.4 G = 262 GB: on 17 GPUs of 24 GB
// (A10G) and 48 GB (L40S) in nodes of one and two, every GPU must hold a share, and rules 3 and 4 (one TP
// width per type) cannot place a type whose nodes differ in size. The pipeline of one stage per node, TP
// over the node, holds them all (completion gives the L40S stages more layers): the premise is that none of
// the heuristic generator's templates completes within memory.
TEST(FastSubsetTemplates, OneStagePerNodeHoldsAModelNoOtherTemplateFits) {
  const EstimatedCase x("A10G:5x2,A10G:2x1,L40S:2x2,L40S:1x1", "deepseek-moe-16b", 64);
  for (const Template& t : heuristic_templates(x.cluster, x.model, 8, x.batch))
    EXPECT_TRUE(complete_template(t, {&x.cluster, &x.topo, &x.model, x.batch}, x.price).empty()) << to_text(t);
  int node_stages = 0;
  for (const Template& t : fast_subset_templates(x.cluster, x.model, 2, x.batch)) {
    const PipelineTemplate& p = t.pipelines.front();
    if (t.gpus_by_type().size() != 2 || p.stages.size() != x.cluster.nodes.size()) continue;
    ++node_stages;
    for (const StageTemplate& st : p.stages) EXPECT_EQ(st.kinds.size(), 1u) << to_text(t);
    EXPECT_EQ(p.stages.front().kinds.front().gpu_type, "A10G") << to_text(t);  // the slowest type first
    EXPECT_EQ(p.stages.front().tp, 2) << to_text(t);                            // its largest nodes first
    const std::vector<CompletedPlan> plans = complete_template(t, {&x.cluster, &x.topo, &x.model, x.batch}, x.price);
    ASSERT_FALSE(plans.empty()) << to_text(t);
    EXPECT_FALSE(simulate_iteration(x.cluster, x.topo, x.model, plans.front().plan, SimOptions{}).oom) << to_text(t);
  }
  EXPECT_EQ(node_stages, 1);
}

// Where the nodes outnumber the layers (Mixtral: 32), the one-stage-per-node pipeline leaves the nodes of
// least peak FLOP/s idle: over H100 and A100-80, the 8-GPU A100-80 node (2.5 PFLOP/s) as one TP-8 stage and
// 31 of the 36 one-GPU H100 nodes (0.99 PFLOP/s each), the A100-80 stage last, where the head is (Sailor's
// plan for such a cluster); over H100 alone, 32 of them; over all three types the same as over two (the 18
// two-GPU A100-40 nodes, 0.62 PFLOP/s each, are the weakest of the 55); none where the nodes are no more
// than the layers (fast_subset_templates has those).
TEST(NodeStageTemplatesOverLayers, LeaveTheWeakestNodesIdle) {
  const Cluster c = spec("A100-40:18x2,A100-80:1x8,H100:36x1");
  const ModelConfig m = load_model("mixtral-8x7b");
  ASSERT_EQ(m.layers, 32);
  const std::vector<Template> all = node_stage_templates_over_layers(c, m);
  expect_valid_distinct_canonical(all, c, m);
  std::set<std::map<std::string, int>> layouts;  // stages by GPU type
  for (const Template& t : all) {
    ASSERT_EQ(t.pipelines.size(), 1u) << to_text(t);
    const PipelineTemplate& p = t.pipelines.front();
    EXPECT_EQ(p.replicas, 1) << to_text(t);
    EXPECT_EQ(static_cast<long>(p.stages.size()), m.layers) << to_text(t);
    std::map<std::string, int> types;
    for (const StageTemplate& st : p.stages) {
      ASSERT_EQ(st.kinds.size(), 1u) << to_text(t);
      EXPECT_EQ(st.tp * st.kinds.front().groups, st.kinds.front().gpu_type == "A100-80" ? 8 : 1) << to_text(t);
      ++types[st.kinds.front().gpu_type];
    }
    layouts.insert(types);
    if (types.size() == 2) {
      EXPECT_EQ(p.stages.back().kinds.front().gpu_type, "A100-80") << to_text(t);
    }
  }
  EXPECT_EQ(layouts, (std::set<std::map<std::string, int>>{{{"A100-80", 1}, {"H100", 31}}, {{"H100", 32}}}));
  EXPECT_TRUE(node_stage_templates_over_layers(spec("A100-80:1x8,H100:20x1"), m).empty());
}

// Data parallelism at one TP width over the types whose nodes hold it: on one-GPU GH200 nodes beside 4-GPU
// H100-PCIe and 8-GPU MI250X nodes, one class of H100-PCIe and one of MI250X at TP 2 and at TP 4, every stage
// at that width, the GH200s idle; none at TP 8 (MI250X alone holds it, which is no data parallelism across
// types); none where every type's nodes hold every width or on one type (rule 1 and the uniform layouts have
// those).
TEST(TpDataParallelTemplates, OneClassPerTypeWhoseNodesHoldTheWidth) {
  const Cluster c = spec("GH200:16x1,H100-PCIe:2x4,MI250X:4x8");
  const ModelConfig m = load_model("opt-350m");
  const std::vector<Template> all = tp_data_parallel_templates(c, m, 64);
  expect_valid_distinct_canonical(all, c, m);
  std::set<int> widths;
  for (const Template& t : all) {
    std::set<std::string> types;
    std::set<int> tps;
    for (const PipelineTemplate& p : t.pipelines)
      for (const StageTemplate& st : p.stages) {
        tps.insert(st.tp);
        for (const auto& k : st.kinds) types.insert(k.gpu_type);
      }
    ASSERT_EQ(tps.size(), 1u) << to_text(t);
    widths.insert(*tps.begin());
    EXPECT_EQ(t.pipelines.size(), 2u) << to_text(t);
    EXPECT_EQ(types, (std::set<std::string>{"H100-PCIe", "MI250X"})) << to_text(t);
  }
  EXPECT_EQ(widths, (std::set<int>{2, 4}));
  EXPECT_TRUE(tp_data_parallel_templates(spec("A100-80:2x8,H100:2x8"), m, 64).empty());
  EXPECT_TRUE(tp_data_parallel_templates(spec("A100-80:4x8"), m, 64).empty());
}

// Of a MoE model's templates, those with EP come back with every stage's EP removed, the others not at all;
// a dense model's templates have no EP, so none come back.
TEST(WithoutExpertParallelism, RemovesEpFromTheTemplatesThatUseIt) {
  const Cluster c = spec("A10:118x1,A100-40:51x1,H100:25x2");
  const ModelConfig moe = load_model("deepseek-moe-16b");
  const std::vector<Template> with = fast_subset_templates(c, moe, 3, 128);
  int using_ep = 0;
  for (const Template& t : with)
    for (const PipelineTemplate& p : t.pipelines)
      if (std::any_of(p.stages.begin(), p.stages.end(), [](const StageTemplate& st) { return st.ep > 1; })) ++using_ep;
  ASSERT_GT(using_ep, 0) << "the premise: some deep pipeline uses EP";
  const std::vector<Template> without = without_expert_parallelism(with, c, moe);
  expect_valid_distinct_canonical(without, c, moe);
  EXPECT_FALSE(without.empty());
  EXPECT_LE(without.size(), with.size());
  for (const Template& t : without)
    for (const PipelineTemplate& p : t.pipelines)
      for (const StageTemplate& st : p.stages) {
        EXPECT_EQ(st.ep, 1) << to_text(t);
        EXPECT_FALSE(st.uneven_experts) << to_text(t);
      }
  EXPECT_TRUE(without_expert_parallelism(fast_subset_templates(c, load_model("gpt3-1.3b"), 3, 128), c, load_model("gpt3-1.3b")).empty());
}

// Every uniform layout of a one-type cluster, each using every GPU: on two 4-GPU A100 nodes and the small
// model (8 layers, 16 heads), TP 1, 2 and 4 (8 is wider than a node) at every depth up to the layers that
// divides the TP groups; on a cluster of two types, the faster type's; for a MoE model, at every EP width.
TEST(UniformTemplates, EveryUniformLayoutOfAOneTypeCluster) {
  const Cluster c = spec("A100-80:2x4");
  const ModelConfig m = test::small_gpt_model(64);
  const std::vector<Template> all = uniform_templates(c, m, 64);
  expect_valid_distinct_canonical(all, c, m);
  std::set<std::tuple<int, int, int>> layouts;  // (tp, depth, replicas)
  for (const Template& t : all) {
    ASSERT_EQ(t.pipelines.size(), 1u) << to_text(t);
    const PipelineTemplate& p = t.pipelines.front();
    for (const StageTemplate& st : p.stages) EXPECT_EQ(st.tp, p.stages.front().tp) << to_text(t);
    EXPECT_EQ(t.num_gpus(), 8) << to_text(t);
    layouts.insert({p.stages.front().tp, static_cast<int>(p.stages.size()), p.replicas});
  }
  const std::set<std::tuple<int, int, int>> expected{{1, 1, 8}, {1, 2, 4}, {1, 4, 2}, {1, 8, 1}, {2, 1, 4},
                                                     {2, 2, 2}, {2, 4, 1}, {4, 1, 2}, {4, 2, 1}};
  EXPECT_EQ(layouts, expected);
  // On a cluster of two types, the faster type's layouts on its own nodes, the other type idle.
  std::set<std::string> two, fastest;
  for (const Template& t : uniform_templates(spec("A100-80:1x4,V100-32:1x4"), m, 64)) two.insert(to_text(t));
  for (const Template& t : uniform_templates(spec("A100-80:1x4"), m, 64)) fastest.insert(to_text(t));
  EXPECT_EQ(two, fastest);
  EXPECT_FALSE(two.empty());
  // MoE (8 experts): every EP width over the replicas that divides both, EP 1 included; 8 one-GPU replicas
  // at EP 1, 2, 4 and 8.
  const ModelConfig moe = test::small_moe_model(64);
  const std::vector<Template> with_ep = uniform_templates(c, moe, 64);
  expect_valid_distinct_canonical(with_ep, c, moe);
  std::set<int> eps;
  for (const Template& t : with_ep) {
    const PipelineTemplate& p = t.pipelines.front();
    EXPECT_EQ(p.replicas % p.stages.front().ep, 0) << to_text(t);
    if (p.replicas == 8) eps.insert(p.stages.front().ep);
  }
  EXPECT_EQ(eps, (std::set<int>{1, 2, 4, 8}));
}

// Where the TP groups do not split the global batch evenly, the uniform layouts also hold Megatron-LM's
// replica count (the most that divide the batch), leaving GPUs idle: on five 4-GPU nodes at a batch of 16,
// 4 one-stage TP-4 replicas beside the 5 that use every GPU, 2 two-stage ones (a depth that does not split
// the 5 groups evenly but divides the 8 layers), and 16 one-GPU replicas (20 would exceed the batch).
TEST(UniformTemplates, HoldMegatronsReplicaCountWhereTheGroupsDoNotSplitTheBatch) {
  const Cluster c = spec("A100-80:5x4");
  const ModelConfig m = test::small_gpt_model(16);
  std::set<std::tuple<int, int, int>> layouts;  // (tp, depth, replicas)
  for (const Template& t : uniform_templates(c, m, 16)) {
    const PipelineTemplate& p = t.pipelines.front();
    layouts.insert({p.stages.front().tp, static_cast<int>(p.stages.size()), p.replicas});
  }
  EXPECT_TRUE(layouts.count({4, 1, 5})) << "every GPU used";
  EXPECT_TRUE(layouts.count({4, 1, 4})) << "16 samples over 4 replicas";
  EXPECT_TRUE(layouts.count({4, 2, 2})) << "5 groups at depth 2: 2 replicas divide 16";
  EXPECT_FALSE(layouts.count({4, 1, 3})) << "3 does not divide 16";
  EXPECT_TRUE(layouts.count({1, 1, 16})) << "20 one-GPU groups, 16 replicas";
  EXPECT_FALSE(layouts.count({1, 1, 20})) << "more replicas than samples";
}

// At a depth that divides the layers but not the TP groups, the uniform layouts also hold Sailor's replica
// count (as many pipelines as the groups hold, the batch split unevenly, the leftover groups idle): on seven
// 4-GPU nodes at a batch of 16 with the small model (8 layers), 3 eight-stage one-GPU replicas (24 of the 28
// GPUs) beside Megatron-LM's 2 (the most that divide 16), 3 four-stage TP-2 replicas (12 of the 14 groups)
// beside Megatron-LM's 2, and no depth of 3 or 5 (dividing neither the groups nor the layers).
TEST(UniformTemplates, HoldSailorsReplicaCountAtEveryDepthThatSplitsTheLayers) {
  const Cluster c = spec("A100-80:7x4");
  const ModelConfig m = test::small_gpt_model(16);
  std::set<std::tuple<int, int, int>> layouts;  // (tp, depth, replicas)
  const std::vector<Template> all = uniform_templates(c, m, 16);
  expect_valid_distinct_canonical(all, c, m);
  for (const Template& t : all) {
    const PipelineTemplate& p = t.pipelines.front();
    layouts.insert({p.stages.front().tp, static_cast<int>(p.stages.size()), p.replicas});
  }
  EXPECT_TRUE(layouts.count({1, 8, 3})) << "Sailor's: 28 one-GPU groups hold 3 eight-stage pipelines";
  EXPECT_TRUE(layouts.count({1, 8, 2})) << "Megatron-LM's: 2 divides 16";
  EXPECT_TRUE(layouts.count({2, 4, 3})) << "Sailor's: 14 TP-2 groups hold 3 four-stage pipelines";
  EXPECT_TRUE(layouts.count({2, 4, 2})) << "Megatron-LM's";
  EXPECT_TRUE(layouts.count({1, 4, 7})) << "every GPU used";
  for (const auto& [tp, depth, replicas] : layouts) {
    EXPECT_NE(depth, 3) << "tp " << tp << " x" << replicas;
    EXPECT_NE(depth, 5) << "tp " << tp << " x" << replicas;
  }
}

}  // namespace
}  // namespace arachne::planner
