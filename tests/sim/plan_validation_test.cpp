// Plan validation: every way a plan can be wrong is rejected as bad input, with a precise reason and the
// 1-based line of the offending element ("file:line: field"), as DESIGN.md "Plan" and "CLI" require.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "sim/io/input_error.h"
#include "sim/plan/plan.h"
#include "sim/plan/plan_yaml.h"

namespace arachne {
namespace {

// 2 nodes x 4 A100-80 (like configs/clusters/tiny-a100-2x4.yaml), built from plain fields.
Cluster two_by_four() {
  Cluster c;
  c.name = "2x4";
  NodeGroup g;
  g.gpu = "A100-80";
  g.nodes = 2;
  g.gpus_per_node = 4;
  c.groups.push_back(g);
  for (int n = 0; n < 2; ++n) {
    Node node;
    node.id = n;
    node.group = 0;
    node.first_gpu = 4 * n;
    node.gpus = 4;
    c.nodes.push_back(node);
  }
  return c;
}

// GPT-3 1.3B (configs/models/gpt3-1.3b.yaml): 24 layers, 16 heads, dense.
ModelConfig dense() {
  ModelConfig m;
  m.name = "gpt3-1.3b";
  m.layers = 24;
  m.hidden = 2048;
  m.heads = 16;
  m.kv_heads = 16;
  m.global_batch = 512;
  return m;
}

ModelConfig moe64() {
  ModelConfig m = dense();
  m.name = "gpt-moe-1.3b-64e";
  MoeConfig moe;
  moe.experts = 64;
  moe.every = 2;
  m.moe = moe;
  return m;
}

// A valid Megatron-style tp2 pp2 dp2 plan on 2x4 processing 512 samples.
const std::string kValid = R"(schedule: 1f1b
pipelines:
  - micro_batch: 4
    micro_batches: 64
    stages:
      - layers: [0, 12]
        groups: [{gpus: "n0:0-1", tp: 2}]
      - layers: [12, 24]
        groups: [{gpus: "n1:0-1", tp: 2}]
  - micro_batch: 4
    micro_batches: 64
    stages:
      - layers: [0, 12]
        groups: [{gpus: "n0:2-3", tp: 2}]
      - layers: [12, 24]
        groups: [{gpus: "n1:2-3", tp: 2}]
)";

std::string replace(std::string text, const std::string& from, const std::string& to, int occurrence = 0) {
  size_t pos = text.find(from);
  for (int k = 0; k < occurrence && pos != std::string::npos; ++k) pos = text.find(from, pos + 1);
  EXPECT_NE(pos, std::string::npos) << "test text lacks '" << from << "'";
  if (pos != std::string::npos) text.replace(pos, from.size(), to);
  return text;
}

// 1-based line of the first occurrence of `needle`: where a reader of the file sees the element.
int line1(const std::string& text, const std::string& needle) {
  const auto pos = text.find(needle);
  EXPECT_NE(pos, std::string::npos) << "test text lacks '" << needle << "'";
  return 1 + static_cast<int>(std::count(text.begin(), text.begin() + std::min(pos, text.size()), '\n'));
}

// Parses and validates `text` as plan.yaml; returns the error (or fails the test).
InputError error_of(const std::string& text, const ModelConfig& model = dense(), std::optional<long> global_batch = std::nullopt) {
  try {
    const Plan p = parse_plan_yaml_text(text, "plan.yaml", two_by_four());
    validate_plan(p, two_by_four(), model, global_batch, "plan.yaml");
  } catch (const InputError& e) {
    return e;
  }
  ADD_FAILURE() << "plan accepted:\n" << text;
  return InputError("", "");
}

void expect_error(const std::string& text, const std::string& marker, const std::string& field, const std::string& reason,
                  const ModelConfig& model = dense(), std::optional<long> global_batch = std::nullopt) {
  const InputError e = error_of(text, model, global_batch);
  EXPECT_EQ(e.where(), "plan.yaml:" + std::to_string(line1(text, marker)) + ": " + field) << text;
  EXPECT_EQ(e.reason(), reason);
}

TEST(PlanValidation, ValidPlanPasses) {
  const Plan p = parse_plan_yaml_text(kValid, "plan.yaml", two_by_four());
  EXPECT_NO_THROW(validate_plan(p, two_by_four(), dense(), 512, "plan.yaml"));
}

TEST(PlanValidation, GpuUsedTwice) {
  const std::string t = replace(kValid, "\"n1:2-3\"", "\"n1:1-2\"");
  expect_error(t, "\"n1:1-2\"", "pipelines[1].stages[1].groups[0].gpus",
               "GPU n1:1 is used twice: by pipelines[0].stages[1].groups[0] and by pipelines[1].stages[1].groups[0]");
}

TEST(PlanValidation, GpuNotInClusterFromYaml) {
  const std::string t = replace(kValid, "\"n0:0-1\"", "\"n2:0-1\"");
  expect_error(t, "\"n2:0-1\"", "pipelines[0].stages[0].groups[0].gpus", "unknown node n2 (the cluster has nodes n0-n1)");
  const std::string u = replace(kValid, "\"n1:2-3\"", "\"n1:3-4\"");
  expect_error(u, "\"n1:3-4\"", "pipelines[1].stages[1].groups[0].gpus", "GPU index 4 out of range for n1 (it has 4 GPUs: 0-3)");
}

TEST(PlanValidation, GpuNotInClusterFromCode) {
  Plan p = parse_plan_yaml_text(kValid, "plan.yaml", two_by_four());
  p.pipelines[0].stages[0].groups[0].gpus = {0, 42};
  p.pipelines[0].stages[0].groups[0].line = -1;  // as if built in code: no line
  try {
    validate_plan(p, two_by_four(), dense(), std::nullopt, "planner:oracle");
    FAIL() << "accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(e.where(), "planner:oracle: pipelines[0].stages[0].groups[0].gpus");
    EXPECT_EQ(e.reason(), "GPU id 42 is not in the cluster (it has 8 GPUs)");
  }
}

TEST(PlanValidation, LayersGap) {
  const std::string t = replace(kValid, "[12, 24]", "[16, 24]");
  expect_error(t, "[16, 24]", "pipelines[0].stages[1].layers", "layers 12-15 not covered");
  // A gap at the end points at the pipeline's stage list.
  const std::string u = replace(kValid, "[12, 24]", "[12, 23]", 1);
  EXPECT_EQ(error_of(u).reason(), "layer 23 not covered");
  const std::string second_pipeline = "  - micro_batch: 4\n    micro_batches: 64\n    stages:\n      - layers: [0, 12]\n        groups: [{gpus: \"n0:2-3\"";
  EXPECT_EQ(error_of(u).where(), "plan.yaml:" + std::to_string(line1(u, second_pipeline)) + ": pipelines[1].stages");
}

TEST(PlanValidation, LayersOverlap) {
  const std::string t = replace(kValid, "[12, 24]", "[10, 24]");
  expect_error(t, "[10, 24]", "pipelines[0].stages[1].layers", "layer 10 covered twice");
}

TEST(PlanValidation, EmptyAndOutOfRangeStages) {
  const std::string t = replace(kValid, "[12, 24]", "[12, 10]");
  expect_error(t, "[12, 10]", "pipelines[0].stages[1].layers", "stage layers [12, 10) are empty");
  const std::string u = replace(kValid, "[12, 24]", "[12, 30]");
  expect_error(u, "[12, 30]", "pipelines[0].stages[1].layers", "stage layers [12, 30) exceed the model's 24 layers [0, 24)");
}

TEST(PlanValidation, StagesOutOfLayerOrder) {
  std::string t = replace(kValid, "[0, 12]", "[12, 24]");
  t = replace(t, "[12, 24]", "[0, 12]", 1);  // pipeline 0 now lists [12, 24) before [0, 12)
  expect_error(t, "[0, 12]", "pipelines[0].stages[1].layers",
               "stage layers [0, 12) do not follow the previous stage's [12, 24) (stages must be listed in layer order)");
}

TEST(PlanValidation, GlobalBatchMismatch) {
  // 2 pipelines x 4 x 128 = 1024 samples against --global-batch 1536.
  std::string t = replace(kValid, "micro_batches: 64", "micro_batches: 128");
  t = replace(t, "micro_batches: 64", "micro_batches: 128");
  expect_error(t, "  - micro_batch", "pipelines", "plan processes 1024 samples per iteration, --global-batch is 1536", dense(), 1536);
  // Without --global-batch the plan's own sum is the global batch: accepted.
  EXPECT_NO_THROW(validate_plan(parse_plan_yaml_text(t, "plan.yaml", two_by_four()), two_by_four(), dense(), std::nullopt, "plan.yaml"));
}

TEST(PlanValidation, MicroBatchAtLeastOne) {
  const std::string t = replace(kValid, "micro_batch: 4", "micro_batch: 0", 1);
  // Refused where it is read, against the supported range (sim/io/limits.h).
  expect_error(t, "micro_batch: 0", "pipelines[1].micro_batch", "0 is outside the supported range [1, 65536]");
}

TEST(PlanValidation, TpDiffersFromGroupSize) {
  const std::string t = replace(kValid, "{gpus: \"n0:0-1\", tp: 2}", "{gpus: \"n0:0-1\", tp: 4}");
  expect_error(t, "tp: 4", "pipelines[0].stages[0].groups[0].tp", "group has 2 GPUs but tp=4 (a TP group's GPU count must equal tp)");
}

TEST(PlanValidation, TpMustDivideHeads) {
  ModelConfig m = dense();
  m.heads = m.kv_heads = 32;
  const std::string t = R"(pipelines:
  - micro_batch: 1
    micro_batches: 8
    stages:
      - layers: [0, 24]
        groups: [{gpus: "n0:0-2", tp: 3}]
)";
  expect_error(t, "tp: 3", "pipelines[0].stages[0].groups[0].tp", "tp=3 does not divide 32 attention heads", m);
  m.heads = 32;
  m.kv_heads = 2;  // grouped-query attention: Megatron needs tp | key/value heads too
  const std::string u = replace(t, "\"n0:0-2\", tp: 3", "\"n0:0-3\", tp: 4");
  expect_error(u, "tp: 4", "pipelines[0].stages[0].groups[0].tp", "tp=4 does not divide 2 key/value heads", m);
}

TEST(PlanValidation, SharesMustSumToOne) {
  const std::string t = replace(kValid, "groups: [{gpus: \"n0:0-1\", tp: 2}]",
                                "groups: [{gpus: \"n0:0-1\", share: 0.5}, {gpus: \"n1:0\", share: 0.4}]");
  expect_error(replace(t, "\"n1:0-1\"", "\"n1:1\""), "layers: [0, 12]", "pipelines[0].stages[0].groups",
               "TP group shares sum to 0.9, not 1");
  const std::string u = replace(kValid, "groups: [{gpus: \"n0:0-1\", tp: 2}]",
                                "groups: [{gpus: \"n0:0-1\", share: 1}, {gpus: \"n1:0\", share: 0}]");
  expect_error(replace(u, "\"n1:0-1\"", "\"n1:1\""), "share: 0}", "pipelines[0].stages[0].groups[1].share",
               "share must be greater than 0, got 0");
}

TEST(PlanValidation, ExpertParallelismOnDenseModel) {
  const std::string t = replace(kValid, "      - layers: [12, 24]\n", "        ep: 2\n      - layers: [12, 24]\n");
  expect_error(t, "layers: [0, 12]", "pipelines[0].stages[0].ep", "ep=2 on a dense model: gpt3-1.3b has no experts, so ep must be 1");
}

TEST(PlanValidation, ExpertParallelismConsistency) {
  // ep=2 across pipelines (Megatron-Core): stage 0 of pipelines 0 and 1 must hold the same layers.
  std::string t = replace(kValid, "      - layers: [12, 24]\n", "        ep: 2\n      - layers: [12, 24]\n");
  t = replace(t, "      - layers: [12, 24]\n", "        ep: 2\n      - layers: [12, 24]\n", 1);
  {
    const Plan ok = parse_plan_yaml_text(t, "plan.yaml", two_by_four());
    EXPECT_NO_THROW(validate_plan(ok, two_by_four(), moe64(), 512, "plan.yaml"));
  }
  std::string u = replace(t, "[0, 12]", "[0, 10]", 1);
  u = replace(u, "[12, 24]", "[10, 24]", 1);
  expect_error(u, "layers: [0, 10]", "pipelines[1].stages[0].layers",
               "EP group pipelines 0-1 needs equal layer ranges: pipelines[1].stages[0] has [0, 10), pipelines[0].stages[0] has [0, 12)",
               moe64());
  // ep=4 across pipelines needs four pipelines.
  const std::string v = replace(kValid, "      - layers: [12, 24]\n", "        ep: 4\n      - layers: [12, 24]\n");
  expect_error(v, "layers: [0, 12]", "pipelines[0].stages[0].ep",
               "ep=4 with ep_scope pipelines needs pipelines 0-3, the plan has 2 pipelines", moe64());
  // Inside the stage, ep must divide the stage's GPUs; uneven placements must add up.
  const std::string w = replace(kValid, "      - layers: [12, 24]\n", "        ep: 4\n        ep_scope: stage\n      - layers: [12, 24]\n");
  expect_error(w, "layers: [0, 12]", "pipelines[0].stages[0].ep", "ep=4 does not divide the stage's 2 GPUs (ep_scope stage)", moe64());
  const std::string x =
      replace(kValid, "      - layers: [12, 24]\n", "        ep: 2\n        ep_scope: stage\n        experts: [30, 30]\n      - layers: [12, 24]\n");
  expect_error(x, "layers: [0, 12]", "pipelines[0].stages[0].experts", "experts sum to 60 but the model has 64", moe64());
  const std::string y = replace(kValid, "      - layers: [12, 24]\n", "        ep: 2\n        ep_scope: stage\n        experts: [64]\n      - layers: [12, 24]\n");
  expect_error(y, "layers: [0, 12]", "pipelines[0].stages[0].experts", "experts lists 1 EP ranks but ep=2", moe64());
  ModelConfig m = moe64();
  m.moe->experts = 63;
  const std::string z = replace(kValid, "      - layers: [12, 24]\n", "        ep: 2\n        ep_scope: stage\n      - layers: [12, 24]\n");
  expect_error(z, "layers: [0, 12]", "pipelines[0].stages[0].ep", "ep=2 does not divide 63 experts (give an uneven placement under 'experts')", m);
}

TEST(PlanValidation, ExpertParallelBlocksMustBeReplicas) {
  // EP peers meet at every MoE layer of every micro-batch, so the pipelines of an EP block need the same
  // micro-batch count (and depth) and the same number of TP groups in the stage; otherwise the simulated
  // rendezvous would wait on a pass the peer's schedule runs later.
  std::string t = replace(kValid, "      - layers: [12, 24]\n", "        ep: 2\n      - layers: [12, 24]\n");
  t = replace(t, "      - layers: [12, 24]\n", "        ep: 2\n      - layers: [12, 24]\n", 1);
  std::string u = replace(t, "micro_batches: 64", "micro_batches: 32", 1);
  u = replace(u, "micro_batch: 4", "micro_batch: 8", 1);
  expect_error(u, "micro_batch: 8", "pipelines[1]",
               "EP group pipelines 0-1 needs pipelines of the same depth and micro-batch count: pipelines[1] has 2 stages and 32 "
               "micro-batches, pipelines[0] 2 and 64",
               moe64());
}

TEST(PlanValidation, BadScheduleName) {
  const std::string t = replace(kValid, "schedule: 1f1b", "schedule: zb");
  expect_error(t, "schedule: zb", "schedule", "unknown schedule 'zb' (expected one of: 1f1b, gpipe, interleaved)");
  const std::string u = "recompute: sometimes\n" + kValid;
  expect_error(u, "recompute", "recompute", "unknown recompute policy 'sometimes' (expected one of: none, selective, full)");
}

TEST(PlanValidation, InterleavedPattern) {
  // pp=2, interleave=2: stages 2 and 3 run on the GPUs of stages 0 and 1.
  const std::string t = R"(schedule: interleaved
interleave: 2
pipelines:
  - micro_batch: 1
    micro_batches: 8
    stages:
      - {layers: [0, 6], groups: [{gpus: "n0:0-1"}]}
      - {layers: [6, 12], groups: [{gpus: "n1:0-1"}]}
      - {layers: [12, 18], groups: [{gpus: "n0:0-1"}]}
      - {layers: [18, 24], groups: [{gpus: "n1:0-1"}]}
)";
  const Plan p = parse_plan_yaml_text(t, "plan.yaml", two_by_four());
  EXPECT_NO_THROW(validate_plan(p, two_by_four(), dense(), 8, "plan.yaml"));
  EXPECT_EQ(p.num_gpus(), 4);
  // Stage 2 on other GPUs breaks the pattern.
  const std::string u = replace(t, "{layers: [12, 18], groups: [{gpus: \"n0:0-1\"}]}", "{layers: [12, 18], groups: [{gpus: \"n0:2-3\"}]}");
  expect_error(u, "[12, 18]", "pipelines[0].stages[2].groups",
               "in an interleaved pipeline stage 2 must run on the TP groups of stage 0 (stage j runs on stage j % pp, pp = 2)");
  // The same reuse under 1F1B is a GPU used twice.
  const std::string v = replace(replace(t, "schedule: interleaved", "schedule: 1f1b"), "interleave: 2", "interleave: 1");
  expect_error(v, "[12, 18]", "pipelines[0].stages[2].groups[0].gpus",
               "GPU n0:0 is used twice: by pipelines[0].stages[0].groups[0] and by pipelines[0].stages[2].groups[0]");
  // interleave without the interleaved schedule, and the reverse.
  const std::string w = replace(t, "schedule: interleaved", "schedule: 1f1b");
  expect_error(w, "interleave: 2", "interleave", "interleave 2 needs schedule interleaved (schedule is 1f1b)");
  const std::string x = replace(t, "interleave: 2", "interleave: 1");
  expect_error(x, "interleave: 1", "interleave", "schedule interleaved needs interleave of at least 2, got 1");
  // Stage count must be a multiple of interleave.
  const std::string y = replace(t, "interleave: 2", "interleave: 3");
  expect_error(y, "  - micro_batch", "pipelines[0].stages", "interleaved pipeline has 4 stages, not a multiple of interleave=3");
}

TEST(PlanValidation, UnknownDuplicateAndMissingKeys) {
  const std::string t = replace(kValid, "{gpus: \"n0:0-1\", tp: 2}", "{gpus: \"n0:0-1\", tpp: 2}");
  expect_error(t, "tpp", "pipelines[0].stages[0].groups[0].tpp", "unknown key 'tpp' (expected one of: gpus, tp, share)");
  const std::string u = replace(kValid, "schedule: 1f1b\n", "schedule: 1f1b\nschedule: gpipe\n");
  expect_error(u, "schedule: gpipe", "schedule", "duplicate key 'schedule'");
  const std::string v = replace(kValid, "    micro_batches: 64\n", "", 1);
  expect_error(v, "micro_batch: 4\n    stages", "pipelines[1].micro_batches", "missing required key 'micro_batches'");
  const std::string w = "version: 2\n" + kValid;
  expect_error(w, "version", "version", "unsupported plan version 2 (this program reads version 1)");
}

TEST(PlanValidation, WrongValueTypes) {
  const std::string t = replace(kValid, "micro_batch: 4", "micro_batch: four");
  expect_error(t, "four", "pipelines[0].micro_batch", "expected an integer, got 'four'");
  const std::string u = replace(kValid, "[0, 12]", "[0, 12, 24]");
  expect_error(u, "[0, 12, 24]", "pipelines[0].stages[0].layers", "expected a half-open layer range [begin, end]");
  const std::string v = "zero1: maybe\n" + kValid;
  expect_error(v, "maybe", "zero1", "expected true or false, got 'maybe'");
}

TEST(PlanValidation, MalformedYamlGivesItsLine) {
  // An unterminated flow mapping on line 7: yaml-cpp stops where the mapping should have ended.
  const std::string t = replace(kValid, "groups: [{gpus: \"n0:0-1\", tp: 2}]", "groups: [{gpus: \"n0:0-1\", tp: 2]");
  try {
    parse_plan_yaml_text(t, "plan.yaml", two_by_four());
    FAIL() << "malformed YAML accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(e.where(), "plan.yaml:" + std::to_string(line1(t, "tp: 2]")));
    EXPECT_NE(e.reason().find("YAML syntax error"), std::string::npos) << e.reason();
  }
}

}  // namespace
}  // namespace arachne
