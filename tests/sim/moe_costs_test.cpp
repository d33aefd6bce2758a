// MoE layer costs split for expert parallelism must add back up to the whole layer: balanced routing
// gives the activated-FFN FLOPs of the dense pricing, and dense + all experts' parameters give the layer's.
#include <gtest/gtest.h>

#include <numeric>

#include "sim/model/moe_costs.h"

namespace arachne {
namespace {

double flops(const std::vector<OpCost>& ops) {
  double f = 0;
  for (const auto& o : ops) f += o.flops;
  return f;
}

TEST(MoeCosts, BalancedExpertsPlusDensePartEqualTheLayer) {
  for (const char* name : {"mixtral-8x7b", "deepseek-moe-16b", "gpt-moe-1.3b-64e"}) {
    const ModelConfig m = load_model(name);
    int layer = 0;
    while (!m.is_moe_layer(layer)) ++layer;
    const ShardSpec s{1, false, 2.0};
    const long tokens = 2 * m.seq_len;
    // Balanced: every token's top_k assignments spread evenly over all experts (one rank holds them all).
    const long per_expert = tokens * m.moe->top_k / m.moe->experts;
    ASSERT_EQ(per_expert * m.moe->experts, tokens * m.moe->top_k) << name;
    const std::vector<long> counts(static_cast<size_t>(m.moe->experts), per_expert);
    const double split = flops(moe_dense_forward_ops(m, layer, s)) + flops(expert_forward_ops(m, counts, 1));
    EXPECT_NEAR(split, flops(layer_forward_ops(m, layer, s)), 1e-9 * split) << name;
  }
}

TEST(MoeCosts, ParametersSplitIntoDenseAndShardedExperts) {
  const ModelConfig m = load_model("mixtral-8x7b");
  const int tp = 2;
  const MoeLayerParams all = moe_layer_params_per_rank(m, 0, tp, 8);
  EXPECT_NEAR(all.dense + all.experts, layer_params_per_rank(m, 0, tp), 1.0);
  // EP 4: each rank holds 2 of 8 experts, a quarter of the expert parameters; the dense part is the same.
  const MoeLayerParams ep4 = moe_layer_params_per_rank(m, 0, tp, 2);
  EXPECT_DOUBLE_EQ(ep4.dense, all.dense);
  EXPECT_NEAR(ep4.experts * 4, all.experts, 1.0);
  // Mixtral's experts are most of the layer: 8 x 3 x 4096 x 14336 against ~42M of attention (both / tp).
  EXPECT_GT(all.experts, 20 * all.dense);
}

TEST(MoeCosts, UnevenTokensCostTheSameFlopsAndIdleExpertsLaunchNothing) {
  const ModelConfig m = load_model("mixtral-8x7b");
  const std::vector<long> even(8, 1024), skewed{4096, 2048, 1024, 512, 256, 128, 64, 64};
  EXPECT_EQ(std::accumulate(even.begin(), even.end(), 0L), std::accumulate(skewed.begin(), skewed.end(), 0L));
  EXPECT_DOUBLE_EQ(flops(expert_forward_ops(m, even, 1)), flops(expert_forward_ops(m, skewed, 1)));
  EXPECT_EQ(expert_forward_ops(m, {0, 0, 5}, 1).size(), 3u);  // experts without tokens launch nothing
  EXPECT_DOUBLE_EQ(dispatch_bytes_per_assignment(m), 4096.0 * 2);
}

}  // namespace
}  // namespace arachne
