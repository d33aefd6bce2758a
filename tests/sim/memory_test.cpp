// Stage memory: mixed-precision Adam model state (ZeRO §3.1), activations after Korthikanti et al. 2022
// Table 2, micro-batches in flight, tied embeddings.
#include <gtest/gtest.h>

#include "sim/model/memory.h"

namespace arachne {
namespace {

ModelConfig gpt3_175b() {
  // Brown et al. 2020 Table 2.1.
  ModelConfig m;
  m.name = "gpt3-175b-test";
  m.layers = 96;
  m.hidden = 12288;
  m.heads = 96;
  m.kv_heads = 96;
  m.ffn_hidden = 4 * 12288;
  m.ffn_kind = FfnKind::Gelu;
  m.seq_len = 2048;
  m.vocab = 51200;
  m.global_batch = 1536;
  return m;
}

double stage_params(const ModelConfig& m, const StageMemoryInput& in) {
  double p = 0;
  for (int l = in.layer_begin; l < in.layer_end; ++l) p += layer_params_per_rank(m, l, in.shard.tp);
  return p;
}

TEST(ModelMemoryModelState, MixedPrecisionAdamIsSixteenToEighteenBytesPerParameter) {
  // ZeRO §3.1: 2 (16-bit weights) + 2..4 (gradients; Megatron keeps fp32 main grads) + 12 (fp32 master,
  // Adam m and v) bytes per parameter.
  const ModelConfig m = gpt3_175b();
  StageMemoryInput in;
  in.layer_begin = 0;
  in.layer_end = 12;
  in.shard = ShardSpec{8, true, 1};
  const MemoryBreakdown mb = stage_memory(m, in);
  const double per_param = (mb.weights + mb.gradients + mb.optimizer) / stage_params(m, in);
  EXPECT_GE(per_param, 16.0);
  EXPECT_LE(per_param, 18.0);
}

TEST(ModelMemoryModelState, ZeroOneDividesOnlyTheOptimizerState) {
  const ModelConfig m = gpt3_175b();
  StageMemoryInput in;
  in.layer_begin = 0;
  in.layer_end = 12;
  in.shard = ShardSpec{8, true, 1};
  const MemoryBreakdown plain = stage_memory(m, in);
  in.zero1 = true;
  in.dp = 8;
  const MemoryBreakdown z = stage_memory(m, in);
  EXPECT_DOUBLE_EQ(z.optimizer * 8, plain.optimizer);
  EXPECT_DOUBLE_EQ(z.weights, plain.weights);
  EXPECT_DOUBLE_EQ(z.gradients, plain.gradients);
  EXPECT_DOUBLE_EQ(z.activations, plain.activations);
}

TEST(ModelMemoryModelState, TiedEmbeddingIsStoredOnceWhenOneStageHoldsBothEnds) {
  // GPT ties the head to the word embedding: a single-stage model holds the V·h matrix once; with the
  // head on another stage Megatron keeps a second copy there (layer_costs.cpp).
  const ModelConfig m = gpt3_175b();
  StageMemoryInput both;
  both.layer_begin = 0;
  both.layer_end = 1;
  both.has_embedding = true;
  both.has_head = true;
  StageMemoryInput first = both;
  first.has_head = false;
  StageMemoryInput last = both;
  last.has_embedding = false;
  StageMemoryInput none = both;
  none.has_embedding = none.has_head = false;
  const double w_both = stage_memory(m, both).weights, w_first = stage_memory(m, first).weights;
  const double w_last = stage_memory(m, last).weights, w_none = stage_memory(m, none).weights;
  const double word_embedding_bytes = 51200.0 * 12288 * 2;
  EXPECT_NEAR((w_first - w_none) + (w_last - w_none) - (w_both - w_none), word_embedding_bytes, 1.0);
}

TEST(ModelMemoryActivations, NoParallelismIsKorthikantiEquationOne) {
  // Korthikanti et al. 2022 eq. (1): s·b·h·(34 + 5·a·s/h) bytes per layer.
  const ModelConfig m = gpt3_175b();
  const double s = 2048, b = 2, h = 12288, a = 96;
  const double expected = s * b * h * (34 + 5 * a * s / h);
  EXPECT_NEAR(layer_activation_bytes(m, 0, ShardSpec{1, false, b}, Recompute::None), expected, 1e-12 * expected);
}

TEST(ModelMemoryActivations, TensorParallelWithAndWithoutSequenceParallel) {
  const ModelConfig m = gpt3_175b();
  const double s = 2048, b = 1, h = 12288, a = 96;
  for (int t : {2, 4, 8}) {
    SCOPED_TRACE(t);
    // Table 2: TP only: sbh(10 + 24/t + 5as/(ht)); TP + SP: sbh/t·(34 + 5as/h).
    const double tp_only = s * b * h * (10 + 24.0 / t + 5 * a * s / (h * t));
    const double tp_sp = s * b * h / t * (34 + 5 * a * s / h);
    EXPECT_NEAR(layer_activation_bytes(m, 0, ShardSpec{t, false, b}, Recompute::None), tp_only, 1e-12 * tp_only);
    EXPECT_NEAR(layer_activation_bytes(m, 0, ShardSpec{t, true, b}, Recompute::None), tp_sp, 1e-12 * tp_sp);
    // SP divides the unparallelised formula exactly by t.
    EXPECT_NEAR(layer_activation_bytes(m, 0, ShardSpec{t, true, b}, Recompute::None) * t,
                layer_activation_bytes(m, 0, ShardSpec{1, false, b}, Recompute::None), 1e-9 * tp_sp * t);
    // Selective recompute drops the 5as/h term (Table 2): 34sbh/t with SP, sbh(10 + 24/t) without.
    EXPECT_NEAR(layer_activation_bytes(m, 0, ShardSpec{t, true, b}, Recompute::Selective), 34 * s * b * h / t, 1.0);
    EXPECT_NEAR(layer_activation_bytes(m, 0, ShardSpec{t, false, b}, Recompute::Selective),
                s * b * h * (10 + 24.0 / t), 1.0);
  }
}

TEST(ModelMemoryActivations, FullRecomputeKeepsOnlyTheLayerInput) {
  // Table 2: full recompute stores 2sbh per layer — for GPT-3 175B at s = 2048 that is 2/(34 + 80) of
  // the unrecomputed activations, i.e. far smaller (< 2%).
  const ModelConfig m = gpt3_175b();
  const double s = 2048, b = 1, h = 12288;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, 0, ShardSpec{1, false, b}, Recompute::Full), 2 * s * b * h);
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, 0, ShardSpec{8, true, b}, Recompute::Full), 2 * s * b * h / 8);
  EXPECT_LT(layer_activation_bytes(m, 0, ShardSpec{1, false, b}, Recompute::Full),
            0.02 * layer_activation_bytes(m, 0, ShardSpec{1, false, b}, Recompute::None));
}

TEST(ModelMemoryActivations, GqaAndNoDropoutShrinkLlamaActivations) {
  // Llama-style: K and V are k·d wide (GQA) and no dropout masks are kept, so a Llama layer stores less
  // than the GPT formula with the same h, a, s, f would.
  ModelConfig llama = gpt3_175b();
  llama.ffn_kind = FfnKind::Swiglu;
  llama.hidden = 8192;
  llama.heads = 64;
  llama.kv_heads = 8;
  llama.ffn_hidden = 28672;
  ModelConfig mha = llama;
  mha.kv_heads = 64;
  const ShardSpec sh{1, false, 1};
  EXPECT_LT(layer_activation_bytes(llama, 0, sh, Recompute::None), layer_activation_bytes(mha, 0, sh, Recompute::None));
  EXPECT_GT(layer_activation_bytes(llama, 0, sh, Recompute::None), 0.0);
}

TEST(ModelMemoryStage, InFlightMicroBatchesMultiplyStoredActivations) {
  const ModelConfig m = gpt3_175b();
  StageMemoryInput in;
  in.layer_begin = 0;
  in.layer_end = 6;
  in.shard = ShardSpec{8, true, 1};
  in.in_flight = 1;
  const double one = stage_memory(m, in).activations;
  in.in_flight = 4;
  const double four = stage_memory(m, in).activations;
  const double per_mb = 6 * layer_activation_bytes(m, 0, in.shard, Recompute::None);
  EXPECT_NEAR(four - one, 3 * per_mb, 1e-9 * per_mb);
  EXPECT_NEAR(one, per_mb, 1e-9 * per_mb);  // no recompute: nothing transient on top
}

TEST(ModelMemoryStage, FullRecomputeAddsOneLayerWorkingSetOncePerStage) {
  // Under full recompute the stage stores the layer inputs of every in-flight micro-batch plus, during
  // one layer's backward, that layer's full activations (once, not per micro-batch).
  const ModelConfig m = gpt3_175b();
  StageMemoryInput in;
  in.layer_begin = 0;
  in.layer_end = 6;
  in.shard = ShardSpec{8, true, 1};
  in.recompute = Recompute::Full;
  in.in_flight = 3;
  const double full_layer = layer_activation_bytes(m, 0, in.shard, Recompute::None);
  const double input = layer_activation_bytes(m, 0, in.shard, Recompute::Full);
  const double expected = 3 * 6 * input + (full_layer - input);
  EXPECT_NEAR(stage_memory(m, in).activations, expected, 1e-9 * expected);
  StageMemoryInput none = in;
  none.recompute = Recompute::None;
  EXPECT_LT(stage_memory(m, in).activations, 0.2 * stage_memory(m, none).activations);
}

TEST(ModelMemoryStage, HeadStageHoldsFp32LogitsAndOverheadIsPositive) {
  // The last stage keeps the fp32 softmax of the cross-entropy: 4·s·b·V/t bytes (Korthikanti §4.3).
  const ModelConfig m = gpt3_175b();
  StageMemoryInput in;
  in.layer_begin = 90;
  in.layer_end = 96;
  in.shard = ShardSpec{8, true, 1};
  const MemoryBreakdown body = stage_memory(m, in);
  in.has_head = true;
  const MemoryBreakdown last = stage_memory(m, in);
  EXPECT_GE(last.activations - body.activations, 4.0 * 2048 * 51200 / 8);
  EXPECT_GE(body.other, 1.0 * (1 << 30));  // at least a CUDA context (~1 GiB)
  EXPECT_DOUBLE_EQ(body.total(), body.weights + body.gradients + body.optimizer + body.activations + body.other);
}

TEST(ModelMemoryStage, Gpt3OnMegatronLayoutFitsAnEightyGigabyteGpu) {
  // Narayanan et al. SC'21 Table 1 trained GPT-3 175B with TP 8 x PP 16 on 80 GB A100s (1F1B, micro-batch
  // 1, activation recompute). Our first stage (6 layers + embedding, 16 micro-batches in flight at most)
  // must fit in 80 GB and use a substantial part of it.
  const ModelConfig m = gpt3_175b();
  StageMemoryInput in;
  in.layer_begin = 0;
  in.layer_end = 6;
  in.has_embedding = true;
  in.shard = ShardSpec{8, false, 1};
  in.recompute = Recompute::Full;
  in.in_flight = 16;
  const double total = stage_memory(m, in).total();
  EXPECT_LT(total, 80e9);
  EXPECT_GT(total, 20e9);
}

TEST(ModelMemoryStage, IdleAndOneInFlightAreTheTwoSingleEvaluations) {
  // stage_memory_idle_and_one is one pass over the layers standing in for stage_memory at in_flight 0 and
  // 1 (completion prices memory as idle + in_flight x the difference): every field must be the same double.
  const ModelConfig m = gpt3_175b();
  for (const Recompute r : {Recompute::None, Recompute::Selective, Recompute::Full})
    for (const auto& [begin, end] : {std::pair{0, 6}, std::pair{10, 37}, std::pair{90, 96}, std::pair{0, 96}}) {
      StageMemoryInput in;
      in.layer_begin = begin;
      in.layer_end = end;
      in.has_embedding = begin == 0;
      in.has_head = end == m.layers;
      in.shard = ShardSpec{4, true, 3};
      in.recompute = r;
      in.zero1 = true;
      in.dp = 8;
      in.in_flight = 7;  // ignored: the pair is at 0 and 1
      const auto [idle, one] = stage_memory_idle_and_one(m, in);
      for (const double in_flight : {0.0, 1.0}) {
        in.in_flight = in_flight;
        const MemoryBreakdown want = stage_memory(m, in);
        const MemoryBreakdown& got = in_flight == 0 ? idle : one;
        EXPECT_EQ(got.weights, want.weights);
        EXPECT_EQ(got.gradients, want.gradients);
        EXPECT_EQ(got.optimizer, want.optimizer);
        EXPECT_EQ(got.activations, want.activations);
        EXPECT_EQ(got.other, want.other);
      }
      EXPECT_GT(one.activations, idle.activations);  // a micro-batch in flight stores activations
    }
}

}  // namespace
}  // namespace arachne
