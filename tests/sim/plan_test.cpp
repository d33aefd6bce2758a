// Plans: enum names, batch arithmetic, GPU selectors, YAML parsing and writing, the Megatron shorthand,
// and the bundled example plans (configs/plans/).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim/io/input_error.h"
#include "sim/plan/plan.h"
#include "sim/plan/plan_yaml.h"
#include "tests/sim/test_support.h"

namespace arachne {
namespace {

struct GroupSpec {
  std::string gpu;
  int nodes;
  int gpus_per_node;
};

// A cluster built from its plain fields: nodes n0, n1, ... in listing order, GPU ids consecutive.
Cluster hand_cluster(const std::vector<GroupSpec>& specs) {
  Cluster c;
  c.name = "hand";
  GpuId next = 0;
  for (size_t gi = 0; gi < specs.size(); ++gi) {
    NodeGroup g;
    g.gpu = specs[gi].gpu;
    g.nodes = specs[gi].nodes;
    g.gpus_per_node = specs[gi].gpus_per_node;
    c.groups.push_back(g);
    for (int n = 0; n < specs[gi].nodes; ++n) {
      Node node;
      node.id = static_cast<int>(c.nodes.size());
      node.group = static_cast<int>(gi);
      node.first_gpu = next;
      node.gpus = specs[gi].gpus_per_node;
      next += node.gpus;
      c.nodes.push_back(node);
    }
  }
  return c;
}

Cluster two_by_four() { return hand_cluster({{"A100-80", 2, 4}}); }                            // tiny-a100-2x4
Cluster tiny_hetero() { return hand_cluster({{"A100-80", 1, 4}, {"V100-32", 2, 2}}); }         // tiny-hetero
Cluster selene_like() { return hand_cluster({{"A100-80", 8, 8}, {"V100-32", 4, 4}}); }         // hetero-a100-v100

// GPT-3 1.3B as in configs/models/gpt3-1.3b.yaml: 24 layers, 16 heads, global batch 512.
ModelConfig gpt3_1_3b() {
  ModelConfig m;
  m.name = "gpt3-1.3b";
  m.layers = 24;
  m.hidden = 2048;
  m.heads = 16;
  m.kv_heads = 16;
  m.ffn_hidden = 8192;
  m.seq_len = 2048;
  m.vocab = 51200;
  m.global_batch = 512;
  return m;
}

ModelConfig moe_model(int experts) {
  ModelConfig m = gpt3_1_3b();
  m.name = "moe";
  MoeConfig moe;
  moe.experts = experts;
  moe.every = 2;
  moe.expert_ffn_hidden = 8192;
  m.moe = moe;
  return m;
}

// 0-based line of the first occurrence of `needle` in `text`.
int line_of(const std::string& text, const std::string& needle) {
  const auto pos = text.find(needle);
  return pos == std::string::npos ? -100 : static_cast<int>(std::count(text.begin(), text.begin() + pos, '\n'));
}

std::vector<GpuId> ids(std::initializer_list<int> l) { return std::vector<GpuId>(l); }

void expect_same_plan(const Plan& a, const Plan& b) {
  EXPECT_EQ(a.schedule, b.schedule);
  EXPECT_EQ(a.interleave, b.interleave);
  EXPECT_EQ(a.recompute, b.recompute);
  EXPECT_EQ(a.sequence_parallel, b.sequence_parallel);
  EXPECT_EQ(a.zero1, b.zero1);
  EXPECT_EQ(a.overlap_grad_reduce, b.overlap_grad_reduce);
  ASSERT_EQ(a.pipelines.size(), b.pipelines.size());
  for (size_t i = 0; i < a.pipelines.size(); ++i) {
    const Pipeline& p = a.pipelines[i];
    const Pipeline& q = b.pipelines[i];
    EXPECT_EQ(p.micro_batch, q.micro_batch);
    EXPECT_EQ(p.micro_batches, q.micro_batches);
    ASSERT_EQ(p.stages.size(), q.stages.size());
    for (size_t j = 0; j < p.stages.size(); ++j) {
      const Stage& s = p.stages[j];
      const Stage& t = q.stages[j];
      EXPECT_EQ(s.layer_begin, t.layer_begin);
      EXPECT_EQ(s.layer_end, t.layer_end);
      EXPECT_EQ(s.ep, t.ep);
      EXPECT_EQ(s.ep_scope, t.ep_scope);
      EXPECT_EQ(s.experts, t.experts);
      ASSERT_EQ(s.groups.size(), t.groups.size());
      for (size_t k = 0; k < s.groups.size(); ++k) {
        EXPECT_EQ(s.groups[k].gpus, t.groups[k].gpus);
        EXPECT_EQ(s.groups[k].tp, t.groups[k].tp);
        EXPECT_EQ(s.groups[k].share, t.groups[k].share);  // written with round-trip precision: exact
      }
    }
  }
}

// ------------------------------------------------------------------ enums and arithmetic

TEST(PlanEnums, NamesRoundTrip) {
  for (const Schedule s : {Schedule::OneFOneB, Schedule::GPipe, Schedule::Interleaved})
    EXPECT_EQ(parse_schedule(to_string(s)), s);
  for (const Recompute r : {Recompute::None, Recompute::Selective, Recompute::Full})
    EXPECT_EQ(parse_recompute(to_string(r)), r);
  for (const EpScope e : {EpScope::Pipelines, EpScope::Stage}) EXPECT_EQ(parse_ep_scope(to_string(e)), e);
  EXPECT_STREQ(to_string(Schedule::OneFOneB), "1f1b");
  EXPECT_STREQ(to_string(Schedule::GPipe), "gpipe");
  EXPECT_STREQ(to_string(Schedule::Interleaved), "interleaved");
  EXPECT_STREQ(to_string(Recompute::Selective), "selective");
  EXPECT_STREQ(to_string(EpScope::Stage), "stage");
  EXPECT_THROW(parse_schedule("zb"), std::invalid_argument);
  EXPECT_THROW(parse_recompute("some"), std::invalid_argument);
}

TEST(PlanArithmetic, GlobalBatchIsSumOfMicroBatchTimesCount) {
  Plan p;
  p.pipelines.resize(2);
  p.pipelines[0].micro_batch = 2;
  p.pipelines[0].micro_batches = 184;
  p.pipelines[1].micro_batch = 4;
  p.pipelines[1].micro_batches = 36;
  EXPECT_EQ(p.global_batch(), 2 * 184 + 4 * 36);
}

TEST(PlanArithmetic, InterleavedGpuCountsOnce) {
  // pp=2, interleave=2 on 2 GPUs: four virtual stages, two distinct GPUs.
  const Plan p = plan_from_shorthand(
      Shorthand{.tp = 1, .pp = 2, .dp = 1, .micro_batch = 1, .global_batch = 8, .interleave = 2}, two_by_four(), gpt3_1_3b());
  EXPECT_EQ(p.pipelines[0].stages.size(), 4u);
  EXPECT_EQ(p.num_gpus(), 2);
  EXPECT_EQ(p.physical_stages(0), 2);
}

// ------------------------------------------------------------------ selectors

TEST(PlanSelector, AllForms) {
  const Cluster c = two_by_four();
  EXPECT_EQ(parse_gpu_selector("n1", c), ids({4, 5, 6, 7}));
  EXPECT_EQ(parse_gpu_selector("n1:0-2", c), ids({4, 5, 6}));
  EXPECT_EQ(parse_gpu_selector("n0:0,2", c), ids({0, 2}));
  EXPECT_EQ(parse_gpu_selector("n0-n1", c), ids({0, 1, 2, 3, 4, 5, 6, 7}));
  // A bare index continues the previous node's list; a node name starts a new item.
  EXPECT_EQ(parse_gpu_selector("n0:0,2,n1", c), ids({0, 2, 4, 5, 6, 7}));
  EXPECT_EQ(parse_gpu_selector("n0:0-1,3,n1:2", c), ids({0, 1, 3, 6}));
  // Order as written is rank order.
  EXPECT_EQ(parse_gpu_selector("n1:3,n0:0", c), ids({7, 0}));
  EXPECT_EQ(parse_gpu_selector(" n0:1 , 2 ", c), ids({1, 2}));
  const Cluster big = selene_like();
  EXPECT_EQ(parse_gpu_selector("n8-n9", big).size(), 8u);  // two V100 nodes of 4
  EXPECT_EQ(parse_gpu_selector("n8-n9", big).front(), 64);  // after 8 nodes x 8 A100s
}

TEST(PlanSelector, ErrorsSayWhy) {
  const Cluster c = two_by_four();
  auto reason = [&c](const std::string& sel) {
    try {
      parse_gpu_selector(sel, c);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(reason("n5"), "unknown node n5 (the cluster has nodes n0-n1)");
  EXPECT_EQ(reason("n1:4"), "GPU index 4 out of range for n1 (it has 4 GPUs: 0-3)");
  EXPECT_EQ(reason("n1:2-5"), "GPU index 5 out of range for n1 (it has 4 GPUs: 0-3)");
  EXPECT_EQ(reason("n0-n3"), "unknown node n3 (the cluster has nodes n0-n1)");
  EXPECT_EQ(reason("n0:3-1"), "GPU range '3-1' of n0 is reversed");
  EXPECT_EQ(reason(""), "empty GPU selector");
  EXPECT_EQ(reason("n0:"), "missing GPU index after 'n0:'");
  EXPECT_EQ(reason("n0,,n1"), "empty item in GPU selector 'n0,,n1'");
  EXPECT_EQ(reason("n0,"), "empty item in GPU selector 'n0,'");
  EXPECT_EQ(reason("n0:1,1"), "GPU n0:1 is listed twice in GPU selector 'n0:1,1'");
  EXPECT_EQ(reason("n0,n0:2"), "GPU n0:2 is listed twice in GPU selector 'n0,n0:2'");
  EXPECT_EQ(reason("gpu3"), "malformed item 'gpu3' in GPU selector 'gpu3' (expected n3, n3:0-3, n3:0,2 or n4-n7)");
  EXPECT_EQ(reason("nx"), "malformed node name 'nx' (expected n<k>, e.g. n3)");
  EXPECT_EQ(reason("n0:a"), "malformed GPU index 'a' for n0 (expected a number or a range a-b)");
  EXPECT_EQ(reason("3"), "'3' in GPU selector '3' is not a node; a bare GPU index must follow a node's list such as 'n3:0'");
  EXPECT_EQ(reason("n1,2"), "'2' in GPU selector 'n1,2' is not a node; a bare GPU index must follow a node's list such as 'n3:0'");
  EXPECT_EQ(reason("n1-n0"), "node range 'n1-n0' is reversed");
}

TEST(PlanSelector, FormatParsesBackToTheSameGpus) {
  const Cluster c = selene_like();
  const std::vector<std::vector<GpuId>> lists = {
      ids({0, 1, 2, 3}), ids({0, 1, 2, 3, 4, 5, 6, 7}), ids({0, 2}), ids({8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23}),
      ids({7, 6}), ids({3, 8, 9, 10, 11, 12, 13, 14, 15}), ids({64, 65, 66, 67, 68}), ids({1, 2, 5})};
  for (const auto& l : lists) EXPECT_EQ(parse_gpu_selector(format_gpu_selector(l, c), c), l) << format_gpu_selector(l, c);
  EXPECT_EQ(format_gpu_selector(ids({0, 1, 2, 3}), c), "n0:0-3");
  EXPECT_EQ(format_gpu_selector(ids({8, 9, 10, 11, 12, 13, 14, 15}), c), "n1");
  std::vector<GpuId> v100;
  for (int g = 64; g < 80; ++g) v100.push_back(g);
  EXPECT_EQ(format_gpu_selector(v100, c), "n8-n11");
  EXPECT_EQ(format_gpu_selector(ids({1, 2, 5}), c), "n0:1-2,5");
  EXPECT_THROW(format_gpu_selector(ids({80}), c), std::invalid_argument);
}

// ------------------------------------------------------------------ YAML

// The example of DESIGN.md "Plan", verbatim.
const char* kDesignExample = R"(version: 1
schedule: 1f1b            # 1f1b | gpipe | interleaved
interleave: 1             # virtual stages per GPU (interleaved only)
recompute: none           # none | selective | full
sequence_parallel: false
zero1: false              # distributed optimizer: optimizer state sharded over the DP group
overlap_grad_reduce: true # DP reduction in buckets, overlapped with backward (Megatron's default)
pipelines:                # data-parallel replicas; they may differ in structure
  - micro_batch: 2
    micro_batches: 24
    stages:
      - layers: [0, 12]   # half-open range of transformer layers; the first stage also holds the embedding, the last the head
        groups:           # one or more TP groups splitting each micro-batch (stage-level data parallel, as in Metis)
          - {gpus: "n0:0-3", tp: 4, share: 1.0}
        ep: 1             # MoE: expert-parallel degree of this stage
        ep_scope: pipelines   # pipelines: ranks are this stage in `ep` pipelines with equal layer ranges (Megatron-Core) | stage: inside this stage's GPUs
        experts: [2, 2, 2, 2] # optional: experts held by each EP rank (uneven placement); default even
      - layers: [12, 24]
        groups: [{gpus: "n1", tp: 8}]
)";

TEST(PlanYaml, DesignExampleParses) {
  const Cluster c = selene_like();
  const Plan p = parse_plan_yaml_text(kDesignExample, "design.yaml", c);
  EXPECT_EQ(p.schedule, Schedule::OneFOneB);
  EXPECT_EQ(p.recompute, Recompute::None);
  EXPECT_TRUE(p.overlap_grad_reduce);
  ASSERT_EQ(p.pipelines.size(), 1u);
  EXPECT_EQ(p.global_batch(), 48);
  const Pipeline& pl = p.pipelines[0];
  ASSERT_EQ(pl.stages.size(), 2u);
  EXPECT_EQ(pl.stages[0].groups[0].gpus, ids({0, 1, 2, 3}));
  EXPECT_EQ(pl.stages[0].groups[0].selector, "n0:0-3");
  EXPECT_EQ(pl.stages[0].experts, std::vector<int>({2, 2, 2, 2}));
  EXPECT_EQ(pl.stages[1].layer_begin, 12);
  EXPECT_EQ(pl.stages[1].layer_end, 24);
  EXPECT_EQ(pl.stages[1].groups[0].gpus.size(), 8u);
  EXPECT_EQ(pl.stages[1].groups[0].tp, 8);
  EXPECT_EQ(pl.stages[1].groups[0].share, 1.0);  // one group: the whole micro-batch
  // Lines (0-based, as yaml-cpp marks): each element is where its text starts.
  EXPECT_EQ(pl.line, line_of(kDesignExample, "micro_batch: 2"));
  EXPECT_EQ(pl.stages[1].line, line_of(kDesignExample, "layers: [12, 24]"));
  EXPECT_EQ(pl.stages[1].groups[0].line, line_of(kDesignExample, "[{gpus: \"n1\""));
  EXPECT_EQ(p.pipelines_line, line_of(kDesignExample, "micro_batch: 2"));
  // The example lists 4 EP ranks with ep: 1, so it is only consistent once ep is 4 (inside the stage,
  // whose 4 GPUs hold 2 experts each of an 8-expert model).
  Plan fixed = p;
  fixed.pipelines[0].stages[0].ep = 4;
  fixed.pipelines[0].stages[0].ep_scope = EpScope::Stage;
  EXPECT_NO_THROW(validate_plan(fixed, c, moe_model(8), 48, "design.yaml"));
}

TEST(PlanYaml, DefaultsTpFromGpusAndSharesEvenly) {
  const Cluster c = tiny_hetero();
  const Plan p = parse_plan_yaml_text(R"(pipelines:
  - micro_batch: 4
    micro_batches: 2
    stages:
      - layers: [0, 24]
        groups: [{gpus: "n0:0-1"}, {gpus: "n1"}, {gpus: "n2"}, {gpus: "n0:2-3", share: 0.4}]
)",
                                      "d.yaml", c);
  const Stage& s = p.pipelines[0].stages[0];
  EXPECT_EQ(s.groups[0].tp, 2);
  EXPECT_EQ(p.schedule, Schedule::OneFOneB);
  EXPECT_EQ(p.interleave, 1);
  EXPECT_FALSE(p.zero1);
  EXPECT_TRUE(p.overlap_grad_reduce);
  // Omitted shares split what the given share leaves: (1 - 0.4) / 3 each.
  EXPECT_DOUBLE_EQ(s.groups[0].share, 0.2);
  EXPECT_DOUBLE_EQ(s.groups[2].share, 0.2);
  EXPECT_NO_THROW(validate_plan(p, c, gpt3_1_3b(), std::nullopt, "d.yaml"));
}

TEST(PlanYaml, RoundTripKeepsEveryField) {
  const Cluster c = selene_like();
  const std::string text = R"(version: 1
schedule: interleaved
interleave: 2
recompute: selective
sequence_parallel: true
zero1: true
overlap_grad_reduce: false
pipelines:
  - micro_batch: 3
    micro_batches: 8
    stages:
      - layers: [0, 6]
        groups: [{gpus: "n0:0-1", tp: 2, share: 0.3333333333333333}, {gpus: "n0:2,5", tp: 2, share: 0.6666666666666667}]
        ep: 2
        ep_scope: stage
        experts: [40, 24]
      - layers: [6, 12]
        groups: [{gpus: "n8-n9", tp: 8}]
      - layers: [12, 18]
        groups: [{gpus: "n0:0-1", tp: 2, share: 0.3333333333333333}, {gpus: "n0:2,5", tp: 2, share: 0.6666666666666667}]
        ep: 2
        ep_scope: stage
        experts: [40, 24]
      - layers: [18, 24]
        groups: [{gpus: "n8-n9", tp: 8}]
)";
  const Plan a = parse_plan_yaml_text(text, "a.yaml", c);
  EXPECT_NO_THROW(validate_plan(a, c, moe_model(64), 24, "a.yaml"));
  const std::string written = plan_to_yaml(a, c);
  const Plan b = parse_plan_yaml_text(written, "written.yaml", c);
  expect_same_plan(a, b);
  EXPECT_EQ(plan_to_yaml(b, c), written);  // writing is a fixed point
}

TEST(PlanYaml, RoundTripOfCodeBuiltPlanFormatsSelectors) {
  const Cluster c = two_by_four();
  const Plan a = plan_from_shorthand(Shorthand{.tp = 2, .pp = 2, .dp = 2, .micro_batch = 4}, c, gpt3_1_3b());
  const std::string y = plan_to_yaml(a, c);
  EXPECT_NE(y.find("\"n0:0-1\""), std::string::npos) << y;
  expect_same_plan(a, parse_plan_yaml_text(y, "w.yaml", c));
}

TEST(PlanYaml, ReadsFileAndReportsMissingFile) {
  const std::string path = (std::filesystem::temp_directory_path() / "arachne_plan_test_read.yaml").string();
  {
    std::ofstream out(path);
    out << plan_to_yaml(plan_from_shorthand(Shorthand{.tp = 4, .pp = 2, .dp = 1, .micro_batch = 8}, two_by_four(), gpt3_1_3b()),
                        two_by_four());
  }
  const Plan p = parse_plan_yaml(path, two_by_four());
  EXPECT_EQ(p.global_batch(), 512);
  std::filesystem::remove(path);
  try {
    parse_plan_yaml(path, two_by_four());
    FAIL() << "missing file accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(e.where(), path);
  }
}

// ------------------------------------------------------------------ shorthand

// execution_key: a plan read back from its YAML (source lines and selectors as written, "n0:0-1" rather
// than GPU lists) has the key of the plan built in code; a change of any field the execution depends on
// changes it.
TEST(PlanExecutionKey, EqualForTheSamePlanAndDifferentForAnyExecutionField) {
  const Cluster c = two_by_four();
  Plan a = plan_from_shorthand(Shorthand{.tp = 2, .pp = 2, .dp = 2, .micro_batch = 4}, c, gpt3_1_3b());
  a.pipelines[0].stages[0].ep = 2;
  a.pipelines[0].stages[0].experts = {40, 24};
  const Plan read = parse_plan_yaml_text(plan_to_yaml(a, c), "a.yaml", c);
  ASSERT_GE(read.pipelines.at(0).line, 0);
  EXPECT_EQ(execution_key(read), execution_key(a));
  const std::vector<std::function<void(Plan&)>> changes{
      [](Plan& p) { p.schedule = Schedule::GPipe; },
      [](Plan& p) { p.interleave = 2; },
      [](Plan& p) { p.recompute = Recompute::Full; },
      [](Plan& p) { p.sequence_parallel = true; },
      [](Plan& p) { p.zero1 = true; },
      [](Plan& p) { p.overlap_grad_reduce = false; },
      [](Plan& p) { p.pipelines.pop_back(); },
      [](Plan& p) { p.pipelines[1].micro_batch = 2; },
      [](Plan& p) { p.pipelines[1].micro_batches = 3; },
      [](Plan& p) { p.pipelines[1].stages.pop_back(); },
      [](Plan& p) { p.pipelines[1].stages[0].layer_end -= 1; },
      [](Plan& p) { p.pipelines[1].stages[1].layer_begin -= 1; },
      [](Plan& p) { p.pipelines[0].stages[0].ep = 4; },
      [](Plan& p) { p.pipelines[0].stages[0].ep_scope = EpScope::Stage; },
      [](Plan& p) { p.pipelines[0].stages[0].experts = {32, 32}; },
      [](Plan& p) { p.pipelines[0].stages[0].experts.clear(); },
      [](Plan& p) { p.pipelines[1].stages[1].groups[0].tp = 1; },
      [](Plan& p) { p.pipelines[1].stages[1].groups[0].share = 0.5; },
      [](Plan& p) { std::swap(p.pipelines[1].stages[1].groups[0].gpus[0], p.pipelines[1].stages[1].groups[0].gpus[1]); },
      [](Plan& p) { p.pipelines[1].stages[1].groups[0].gpus.pop_back(); },
  };
  std::set<std::string> keys{execution_key(a)};
  for (size_t i = 0; i < changes.size(); ++i) {
    Plan changed = a;
    changes[i](changed);
    EXPECT_TRUE(keys.insert(execution_key(changed)).second) << "change " << i << " left the key unchanged";
  }
}

TEST(PlanShorthand, MegatronRankOrderTpThenDpThenPp) {
  // Megatron ranks: r = pp_rank*(dp*tp) + dp_rank*tp + tp_rank; rank r is GPU r (nodes in listing order).
  const Plan p = plan_from_shorthand(Shorthand{.tp = 2, .pp = 2, .dp = 2, .micro_batch = 4}, two_by_four(), gpt3_1_3b());
  ASSERT_EQ(p.pipelines.size(), 2u);
  EXPECT_EQ(p.pipelines[0].stages[0].groups[0].gpus, ids({0, 1}));
  EXPECT_EQ(p.pipelines[1].stages[0].groups[0].gpus, ids({2, 3}));
  EXPECT_EQ(p.pipelines[0].stages[1].groups[0].gpus, ids({4, 5}));
  EXPECT_EQ(p.pipelines[1].stages[1].groups[0].gpus, ids({6, 7}));
  // Even layer split: 24 layers over pp=2 is 12 each.
  EXPECT_EQ(p.pipelines[0].stages[0].layer_end, 12);
  EXPECT_EQ(p.pipelines[0].stages[1].layer_begin, 12);
  // Model's global batch 512 over dp=2 x micro-batch 4 is 64 micro-batches per pipeline.
  EXPECT_EQ(p.pipelines[0].micro_batches, 64);
  EXPECT_EQ(p.global_batch(), 512);
  EXPECT_EQ(p.num_gpus(), 8);
}

TEST(PlanShorthand, InterleavedStagesReuseThePhysicalStageGpus) {
  const Plan p = plan_from_shorthand(
      Shorthand{.tp = 2, .pp = 2, .dp = 2, .micro_batch = 1, .global_batch = 16, .interleave = 3}, two_by_four(), gpt3_1_3b());
  EXPECT_EQ(p.schedule, Schedule::Interleaved);
  EXPECT_EQ(p.interleave, 3);
  const Pipeline& p1 = p.pipelines[1];
  ASSERT_EQ(p1.stages.size(), 6u);  // pp*V virtual stages of 24/6 = 4 layers
  for (int j = 0; j < 6; ++j) {
    EXPECT_EQ(p1.stages[j].layer_begin, 4 * j);
    EXPECT_EQ(p1.stages[j].groups[0].gpus, p1.stages[j % 2].groups[0].gpus);
  }
  EXPECT_EQ(p1.stages[1].groups[0].gpus, ids({6, 7}));  // pp_rank 1, dp_rank 1
  EXPECT_EQ(p.num_gpus(), 8);
}

TEST(PlanShorthand, GlobalBatchFlagOverridesModelAndEpIsCopied) {
  const Plan p = plan_from_shorthand(Shorthand{.tp = 1, .pp = 1, .dp = 8, .ep = 4, .micro_batch = 2, .global_batch = 64},
                                     two_by_four(), moe_model(64));
  EXPECT_EQ(p.global_batch(), 64);
  EXPECT_EQ(p.pipelines[0].micro_batches, 4);
  EXPECT_EQ(p.pipelines[5].stages[0].ep, 4);
  EXPECT_EQ(p.pipelines[5].stages[0].ep_scope, EpScope::Pipelines);
}

struct ShorthandError {
  Shorthand s;
  bool moe;
  std::string where;
  std::string reason;
};

TEST(PlanShorthand, ErrorsNameTheFlag) {
  const std::vector<ShorthandError> cases = {
      {Shorthand{.tp = 4, .pp = 2, .dp = 2}, false, "--tp/--pp/--dp", "plan needs 16 GPUs (tp 4 x pp 2 x dp 2), cluster has 8"},
      {Shorthand{.tp = 1, .pp = 5, .dp = 1}, false, "--pp", "24 layers do not divide into pp=5 stages"},
      {Shorthand{.tp = 1, .pp = 2, .dp = 1, .interleave = 5}, false, "--pp",
       "24 layers do not divide into pp=2 x interleave=5 = 10 model chunks"},
      {Shorthand{.tp = 1, .pp = 1, .dp = 2, .micro_batch = 3}, false, "--global-batch",
       "global batch 512 does not divide into dp=2 x micro-batch 3 = 6 samples per micro-batch step"},
      {Shorthand{.tp = 3, .pp = 1, .dp = 1}, false, "--tp", "tp=3 does not divide 16 attention heads"},
      {Shorthand{.tp = 1, .pp = 1, .dp = 2, .ep = 2}, false, "--ep", "--ep 2 needs an MoE model; gpt3-1.3b has no experts"},
      {Shorthand{.tp = 1, .pp = 1, .dp = 2, .ep = 4}, true, "--ep",
       "ep=4 does not divide dp=2 (expert parallelism is taken from the data-parallel ranks)"},
      {Shorthand{.tp = 0}, false, "--tp", "--tp must be at least 1, got 0"},
      {Shorthand{.pp = 2, .schedule = Schedule::Interleaved}, false, "--interleave",
       "schedule interleaved needs --interleave of at least 2, got 1"},
  };
  for (const auto& k : cases) {
    try {
      plan_from_shorthand(k.s, two_by_four(), k.moe ? moe_model(64) : gpt3_1_3b());
      ADD_FAILURE() << "accepted: " << k.reason;
    } catch (const InputError& e) {
      EXPECT_EQ(e.where(), k.where);
      EXPECT_EQ(e.reason(), k.reason);
    }
  }
}

// ------------------------------------------------------------------ bundled example plans

TEST(PlanExamples, BundledPlansParseValidateAndRoundTrip) {
  const std::string dir = test::configs() + "/plans/";
  struct Example {
    std::string file;
    Cluster cluster;
    int gpus;  // GPUs the plan is meant to use
  };
  const std::vector<Example> examples = {
      {"gpt3-1.3b-tp2-pp2-dp2.yaml", two_by_four(), 8},
      {"gpt3-1.3b-interleaved.yaml", two_by_four(), 8},
      {"gpt3-1.3b-hetero-two-pipelines.yaml", selene_like(), 32},
      {"gpt3-1.3b-split-stage.yaml", tiny_hetero(), 8},
  };
  for (const auto& ex : examples) {
    SCOPED_TRACE(ex.file);
    const Plan p = parse_plan_yaml(dir + ex.file, ex.cluster);
    // Every example processes the model's global batch (512 sequences, configs/models/gpt3-1.3b.yaml).
    EXPECT_NO_THROW(validate_plan(p, ex.cluster, gpt3_1_3b(), 512, dir + ex.file));
    EXPECT_EQ(p.num_gpus(), ex.gpus);
    expect_same_plan(p, parse_plan_yaml_text(plan_to_yaml(p, ex.cluster), "written", ex.cluster));
  }
}

TEST(PlanExamples, ValidAgainstTheBundledClusterAndModelFiles) {
  // The same examples against the real configs/clusters/*.yaml and configs/models/gpt3-1.3b.yaml.
  const GpuCatalog catalog = GpuCatalog::load_default();
  const ModelConfig model = load_model("gpt3-1.3b");
  const std::vector<std::pair<std::string, std::string>> examples = {
      {"gpt3-1.3b-tp2-pp2-dp2.yaml", "tiny-a100-2x4"},
      {"gpt3-1.3b-interleaved.yaml", "tiny-a100-2x4"},
      {"gpt3-1.3b-hetero-two-pipelines.yaml", "hetero-a100-v100"},
      {"gpt3-1.3b-split-stage.yaml", "tiny-hetero"},
  };
  for (const auto& [plan_file, cluster_name] : examples) {
    SCOPED_TRACE(plan_file);
    const Cluster cluster = load_cluster(test::configs() + "/clusters/" + cluster_name + ".yaml", catalog);
    const std::string path = test::configs() + "/plans/" + plan_file;
    const Plan p = parse_plan_yaml(path, cluster);
    EXPECT_NO_THROW(validate_plan(p, cluster, model, model.global_batch, path));
  }
  // And the shorthand on the real 2x4 cluster gives the bundled tp2-pp2-dp2 plan.
  const Cluster c = load_cluster(test::configs() + "/clusters/tiny-a100-2x4.yaml", catalog);
  expect_same_plan(parse_plan_yaml(test::configs() + "/plans/gpt3-1.3b-tp2-pp2-dp2.yaml", c),
                   plan_from_shorthand(Shorthand{.tp = 2, .pp = 2, .dp = 2, .micro_batch = 4}, c, model));
}

TEST(PlanExamples, TpPpDpExampleIsTheShorthandPlan) {
  const Cluster c = two_by_four();
  const Plan file = parse_plan_yaml(test::configs() + "/plans/gpt3-1.3b-tp2-pp2-dp2.yaml", c);
  const Plan shorthand = plan_from_shorthand(Shorthand{.tp = 2, .pp = 2, .dp = 2, .micro_batch = 4}, c, gpt3_1_3b());
  expect_same_plan(file, shorthand);
}

TEST(PlanExamples, HeteroPipelinesGiveTheFasterPipelineMoreSamples) {
  const Plan p = parse_plan_yaml(test::configs() + "/plans/gpt3-1.3b-hetero-two-pipelines.yaml", selene_like());
  ASSERT_EQ(p.pipelines.size(), 2u);
  EXPECT_NE(p.pipelines[0].stages.size(), p.pipelines[1].stages.size());
  // Pipeline 0 (A100) must take more samples than pipeline 1 (V100).
  EXPECT_GT(p.pipelines[0].samples(), p.pipelines[1].samples());
}

}  // namespace
}  // namespace arachne
