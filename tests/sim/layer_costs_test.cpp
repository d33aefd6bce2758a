// Layer costs: FLOP counts against the closed forms of Narayanan et al. SC'21, backward/recompute
// relations, TP/GQA/SP scaling, communication volumes and parameter counts.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "sim/model/layer_costs.h"
#include "tests/sim/test_support.h"

namespace arachne {
namespace {

ModelConfig gpt(long h, int a, long s, int layers = 4) {
  ModelConfig m;
  m.name = "gpt-test";
  m.layers = layers;
  m.hidden = h;
  m.heads = a;
  m.kv_heads = a;
  m.ffn_hidden = 4 * h;
  m.ffn_kind = FfnKind::Gelu;
  m.seq_len = s;
  m.vocab = 51200;
  m.global_batch = 8;
  return m;
}

ModelConfig llama(int kv_heads) {
  ModelConfig m;
  m.name = "llama-test";
  m.layers = 4;
  m.hidden = 8192;
  m.heads = 64;
  m.kv_heads = kv_heads;
  m.ffn_hidden = 28672;
  m.ffn_kind = FfnKind::Swiglu;
  m.seq_len = 4096;
  m.vocab = 32000;
  m.global_batch = 8;
  return m;
}

double flops(const std::vector<OpCost>& ops, std::initializer_list<OpClass> classes = {OpClass::Gemm, OpClass::Attention}) {
  double f = 0;
  for (const OpCost& op : ops)
    for (OpClass c : classes)
      if (op.cls == c) f += op.flops;
  return f;
}
double bytes(const std::vector<OpCost>& ops, OpClass cls) {
  double b = 0;
  for (const OpCost& op : ops)
    if (op.cls == cls) b += op.bytes;
  return b;
}

constexpr double kRel = 1e-12;  // the counts are exact products of integers; allow rounding only

// Planners price each layer kind once (planner/common/layer_prices.cpp): every layer's kernels, collectives
// and parameters must equal those of the first layer of its kind (MoE or dense), on models with a dense
// prefix, MoE every other layer, GQA and SwiGLU, under every recompute policy, with and without SP.
TEST(ModelLayerCosts, LayersOfOneKindHaveTheSameCosts) {
  auto same_ops = [](const std::vector<OpCost>& a, const std::vector<OpCost>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (a[i].cls != b[i].cls || a[i].flops != b[i].flops || a[i].bytes != b[i].bytes) return false;
    return true;
  };
  auto same_calls = [](const std::vector<TpCollectives>& a, const std::vector<TpCollectives>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (a[i].count != b[i].count || a[i].bytes != b[i].bytes || a[i].overlaps.flops != b[i].overlaps.flops) return false;
    return true;
  };
  int moe_layers = 0, dense_layers = 0;
  for (const char* name : {"gpt3-13b", "llama2-70b", "mixtral-8x7b", "deepseek-moe-16b", "gpt-moe-1.3b-64e"}) {
    const ModelConfig m = load_model(name);
    for (const ShardSpec sh : {ShardSpec{1, false, 2}, ShardSpec{4, true, 3}}) {
      int first[2] = {-1, -1};
      for (int l = 0; l < m.layers; ++l) {
        const int kind = m.is_moe_layer(l) ? 1 : 0;
        (kind ? moe_layers : dense_layers) += 1;
        if (first[kind] < 0) {
          first[kind] = l;
          continue;
        }
        const int f = first[kind];
        EXPECT_TRUE(same_ops(layer_forward_ops(m, l, sh), layer_forward_ops(m, f, sh))) << name << " layer " << l;
        EXPECT_TRUE(same_ops(layer_backward_ops(m, l, sh), layer_backward_ops(m, f, sh))) << name << " layer " << l;
        for (const Recompute r : {Recompute::None, Recompute::Selective, Recompute::Full})
          EXPECT_TRUE(same_ops(layer_recompute_ops(m, l, sh, r), layer_recompute_ops(m, f, sh, r))) << name << " layer " << l;
        EXPECT_TRUE(same_calls(layer_tp_backward_collectives(m, l, sh), layer_tp_backward_collectives(m, f, sh))) << name << " layer " << l;
        EXPECT_EQ(layer_params_per_rank(m, l, sh.tp), layer_params_per_rank(m, f, sh.tp)) << name << " layer " << l;
      }
    }
  }
  EXPECT_GT(moe_layers, 0);  // both kinds were compared
  EXPECT_GT(dense_layers, 0);
}

TEST(ModelLayerCosts, GptLayerForwardIsTwentyFourBshSquaredPlusFourBsSquaredH) {
  // Narayanan et al. SC'21 eq. (3): one GPT layer forward = 24·b·s·h² + 4·b·s²·h FLOPs (f = 4h, k = a).
  for (double b : {1.0, 2.0, 0.5}) {
    const ModelConfig m = gpt(2048, 16, 2048);
    const double s = 2048, h = 2048;
    const double expected = 24 * b * s * h * h + 4 * b * s * s * h;
    const double got = flops(layer_forward_ops(m, 0, ShardSpec{1, false, b}));
    EXPECT_NEAR(got, expected, kRel * expected) << "b=" << b;
  }
}

TEST(ModelLayerCosts, BackwardIsTwiceForward) {
  // dgrad + wgrad: every matmul twice (Narayanan et al. SC'21 §5.1); memory-bound kernels ~2x bytes.
  for (const ModelConfig& m : {gpt(4096, 32, 2048), llama(8)}) {
    const ShardSpec sh{4, true, 2};
    const auto fw = layer_forward_ops(m, 1, sh);
    const auto bw = layer_backward_ops(m, 1, sh);
    EXPECT_NEAR(flops(bw), 2 * flops(fw), kRel * flops(fw));
    EXPECT_NEAR(bytes(bw, OpClass::Memory), 2 * bytes(fw, OpClass::Memory), kRel * bytes(fw, OpClass::Memory));
  }
}

TEST(ModelLayerCosts, FullRecomputeRepeatsForwardSelectiveOnlyTheAttentionCore) {
  const ModelConfig m = gpt(4096, 32, 2048);
  const ShardSpec sh{2, false, 1};
  const double b = 1, s = 2048, h = 4096, t = 2;
  EXPECT_TRUE(layer_recompute_ops(m, 0, sh, Recompute::None).empty());
  const auto full = layer_recompute_ops(m, 0, sh, Recompute::Full);
  const auto fw = layer_forward_ops(m, 0, sh);
  EXPECT_DOUBLE_EQ(flops(full), flops(fw));
  EXPECT_DOUBLE_EQ(bytes(full, OpClass::Memory), bytes(fw, OpClass::Memory));
  // Korthikanti et al. 2022 §4.2.2: selective recompute redoes Q·Kᵀ, softmax, dropout and attention over
  // V only: 4·b·s²·h/t FLOPs, and no GEMM.
  const auto sel = layer_recompute_ops(m, 0, sh, Recompute::Selective);
  EXPECT_DOUBLE_EQ(flops(sel, {OpClass::Gemm}), 0.0);
  EXPECT_NEAR(flops(sel), 4 * b * s * s * h / t, kRel * 4 * b * s * s * h / t);
  EXPECT_GT(bytes(sel, OpClass::Memory), 0.0);  // softmax and dropout
}

TEST(ModelLayerCosts, TensorParallelismDividesGemmAndAttentionFlops) {
  const ModelConfig m = gpt(4096, 32, 2048);
  const double one = flops(layer_forward_ops(m, 0, ShardSpec{1, false, 1}));
  for (int t : {2, 4, 8}) {
    const double f = flops(layer_forward_ops(m, 0, ShardSpec{t, false, 1}));
    EXPECT_NEAR(f * t, one, kRel * one) << "t=" << t;
  }
}

TEST(ModelLayerCosts, GroupedQueryAttentionShrinksOnlyTheKvProjection) {
  // QKV = 2·b·s·h·(h + 2·k·d): going from k = a to k KV heads saves 2·b·s·h·2·(a − k)·d.
  const double b = 1, s = 4096, h = 8192, d = 128;
  const double mha = flops(layer_forward_ops(llama(64), 0, ShardSpec{1, false, b}));
  const double gqa = flops(layer_forward_ops(llama(8), 0, ShardSpec{1, false, b}));
  EXPECT_LT(gqa, mha);
  EXPECT_NEAR(mha - gqa, 2 * b * s * h * 2 * (64 - 8) * d, kRel * mha);
}

TEST(ModelLayerCosts, SwigluMlpHasThreeMatrices) {
  // SwiGLU (Shazeer 2020): gate, up and down projections, 3·2·b·s·h·f FLOPs; with GQA k=8, d=128 the
  // attention GEMMs are 2bsh(h + 2kd) + 2bsh² and the core 4bs²h.
  const ModelConfig m = llama(8);
  const double b = 1, s = 4096, h = 8192, f = 28672, kd = 1024;
  const double expected = 6 * b * s * h * f + 2 * b * s * h * (h + 2 * kd) + 2 * b * s * h * h + 4 * b * s * s * h;
  EXPECT_NEAR(flops(layer_forward_ops(m, 0, ShardSpec{1, false, b})), expected, kRel * expected);
}

TEST(ModelLayerCosts, SequenceParallelismDividesNormAndDropoutTraffic) {
  // Korthikanti et al. 2022 §4.2.2: with SP the layernorm/dropout kernels work on s/t of the sequence, so
  // the memory-bound traffic shrinks while the GEMM FLOPs are unchanged.
  const ModelConfig m = gpt(4096, 32, 2048);
  const auto tp = layer_forward_ops(m, 0, ShardSpec{4, false, 1});
  const auto sp = layer_forward_ops(m, 0, ShardSpec{4, true, 1});
  EXPECT_LT(bytes(sp, OpClass::Memory), bytes(tp, OpClass::Memory));
  EXPECT_DOUBLE_EQ(flops(sp), flops(tp));
}

TEST(ModelLayerCosts, HeadIsAVocabGemmAndBackwardDoublesIt) {
  const ModelConfig m = gpt(2048, 16, 2048);
  const double b = 2, s = 2048, h = 2048, V = 51200, t = 4;
  const ShardSpec sh{4, false, b};
  EXPECT_NEAR(flops(head_forward_ops(m, sh)), 2 * b * s * h * V / t, kRel * 2 * b * s * h * V / t);
  EXPECT_NEAR(flops(head_backward_ops(m, sh)), 2 * flops(head_forward_ops(m, sh)), 1.0);
  // The embedding lookup is a memory-bound gather (no FLOPs) moving at least the b·s·h output.
  EXPECT_DOUBLE_EQ(flops(embedding_forward_ops(m, sh)), 0.0);
  EXPECT_GE(bytes(embedding_forward_ops(m, sh), OpClass::Memory), b * s * h * 2);
  EXPECT_GT(bytes(embedding_backward_ops(m, sh), OpClass::Memory), 0.0);
}

TEST(ModelLayerCosts, TensorParallelCollectivesAndPipelineMessages) {
  const ModelConfig m = gpt(2048, 16, 2048);
  // No TP group, no collective.
  EXPECT_EQ(layer_tp_collectives(m, ShardSpec{1, false, 4}).count, 0);
  // Shoeybi et al. 2019 §3: two all-reduces per layer per direction, each of the full b·s·h activation.
  const TpCollectives c = layer_tp_collectives(m, ShardSpec{8, false, 4});
  EXPECT_EQ(c.count, 2);
  EXPECT_DOUBLE_EQ(c.bytes, 4.0 * 2048 * 2048 * 2);
  EXPECT_DOUBLE_EQ(p2p_bytes(m, 4), 4.0 * 2048 * 2048 * 2);
  EXPECT_EQ(bytes_per_element(m), 2);
}

TEST(ModelLayerCosts, ParametersSplitOverTensorParallelRanks) {
  // Llama layer: 4h² (MHA, k = a) + 3hf matrices split over t, two RMSNorm weights (h each) replicated.
  const ModelConfig m = llama(64);
  const double h = 8192, f = 28672;
  for (int t : {1, 2, 8}) {
    EXPECT_DOUBLE_EQ(layer_params_per_rank(m, 0, t), (4 * h * h + 3 * h * f) / t + 2 * h) << "t=" << t;
  }
  // Embedding V·h/t (rotary positions: no table); untied head V·h/t + final norm h.
  EXPECT_DOUBLE_EQ(embedding_params_per_rank(m, 4), 32000.0 * h / 4);
  EXPECT_DOUBLE_EQ(head_params_per_rank(m, 4), 32000.0 * h / 4 + h);
  // GPT: learned position embedding s·h is replicated on every TP rank.
  const ModelConfig g = gpt(2048, 16, 2048);
  EXPECT_DOUBLE_EQ(embedding_params_per_rank(g, 2), 51200.0 * 2048 / 2 + 2048.0 * 2048);
}

TEST(ModelLayerCosts, MoeLayersCountActivatedExperts) {
  // A top-2 MoE layer of 8 experts of width f costs the FLOPs of two FFNs of width f (plus a small
  // router GEMM 2·b·s·h·E), while holding all 8 experts' parameters.
  ModelConfig m = llama(8);
  m.moe = MoeConfig{8, 2, 1, 0, m.ffn_hidden, 0, 1.0, 0.0};
  ModelConfig dense = llama(8);
  dense.ffn_hidden = 2 * m.ffn_hidden;
  const double b = 1, s = 4096, h = 8192;
  const double moe_f = flops(layer_forward_ops(m, 0, ShardSpec{1, false, b}));
  const double dense_f = flops(layer_forward_ops(dense, 0, ShardSpec{1, false, b}));
  EXPECT_NEAR(moe_f - dense_f, 2 * b * s * h * 8, kRel * moe_f);
  const double ffn_params = 3.0 * h * m.ffn_hidden;
  EXPECT_NEAR(layer_params_per_rank(m, 0, 1) - layer_params_per_rank(llama(8), 0, 1), 7 * ffn_params + h * 8, 1.0);
}


// Megatron's TP collectives at the ends of the model: the vocab-parallel embedding all-reduces its b·s·h
// output forward only; the head's cross-entropy all-reduces three b·s fp32 vectors forward and the head's
// input gradient (b·s·h) backward. Backward of a layer: the QKV and fc1 input-gradient all-reduces, each
// beside that linear's weight-gradient GEMM (2·b·s·h·3h/t and 2·b·s·h·4h/t FLOPs for GPT).
TEST(ModelLayerCosts, EndsOfTheModelAndAsyncBackwardTensorParallelCollectives) {
  ModelConfig m = test::small_gpt_model(8);
  const ShardSpec sh{4, false, 2.0};
  const double bsh2 = 2.0 * m.seq_len * m.hidden * 2;
  const auto ef = embedding_tp_collectives(m, sh, true);
  ASSERT_EQ(ef.size(), 1u);
  EXPECT_EQ(ef[0].count, 1);
  EXPECT_DOUBLE_EQ(ef[0].bytes, bsh2);
  EXPECT_TRUE(embedding_tp_collectives(m, sh, false).empty());
  const auto hf = head_tp_collectives(m, sh, true);
  ASSERT_EQ(hf.size(), 1u);
  EXPECT_EQ(hf[0].count, 3);
  EXPECT_DOUBLE_EQ(hf[0].bytes, 2.0 * m.seq_len * 4);
  const auto hb = head_tp_collectives(m, sh, false);
  ASSERT_EQ(hb.size(), 1u);
  EXPECT_DOUBLE_EQ(hb[0].bytes, bsh2);
  EXPECT_TRUE(head_tp_collectives(m, ShardSpec{1, false, 2.0}, true).empty());

  const auto lb = layer_tp_backward_collectives(m, 0, sh);
  ASSERT_EQ(lb.size(), 2u);
  const double bsh = 2.0 * m.seq_len * m.hidden;
  EXPECT_DOUBLE_EQ(lb[0].overlaps.flops, 2.0 * bsh * 3.0 * m.hidden / 4);
  EXPECT_DOUBLE_EQ(lb[1].overlaps.flops, 2.0 * bsh * 4.0 * m.hidden / 4);
  EXPECT_DOUBLE_EQ(lb[0].bytes + lb[1].bytes, 2 * bsh2);  // the same volume as the blocking pair
}

}  // namespace
}  // namespace arachne
