// MoE routing draws: token counts follow the Zipf shares of routing_skew, the capacity cut drops exactly
// what exceeds capacity, and draws are reproducible from (seed, micro-batch, layer).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

#include "sim/model/moe_routing.h"

namespace arachne {
namespace {

MoeConfig moe(int experts, int top_k, double skew, double capacity = 100.0) {
  MoeConfig m;
  m.experts = experts;
  m.top_k = top_k;
  m.routing_skew = skew;
  m.capacity_factor = capacity;  // large: nothing dropped unless a test says otherwise
  return m;
}

TEST(MoeRouting, ZipfSharesSumToOneAndDecay) {
  const auto s = zipf_shares(8, 1.2);
  EXPECT_NEAR(std::accumulate(s.begin(), s.end(), 0.0), 1.0, 1e-12);
  for (size_t i = 1; i < s.size(); ++i) EXPECT_NEAR(s[i - 1] / s[i], std::pow(double(i + 1) / i, 1.2), 1e-9);
  for (double x : zipf_shares(8, 0.0)) EXPECT_DOUBLE_EQ(x, 1.0 / 8);
}

// The k-th largest expert load, averaged over many draws, matches the k-th Zipf share of the routed
// tokens. Tolerance: a multinomial count has standard deviation sqrt(N p (1-p)) <= sqrt(N)/2 = 45 for
// N = 8192; the mean of 400 draws has 45/20 ≈ 2.3, so 5 sigma is ~11.5 tokens, about 0.14 % of N (we allow
// 0.5 % of N to cover the small bias of order statistics of nearly equal shares).
TEST(MoeRouting, TokenCountsFollowZipfShares) {
  for (double skew : {0.0, 0.8, 1.5}) {
    const MoeConfig m = moe(8, 2, skew);
    const long tokens = 4096, n = tokens * m.top_k;
    std::vector<double> mean_sorted(8, 0.0);
    const int draws = 400;
    for (int d = 0; d < draws; ++d) {
      auto r = draw_routing(m, tokens, 7, d, 3).routed;
      EXPECT_EQ(std::accumulate(r.begin(), r.end(), 0L), n);
      std::sort(r.begin(), r.end(), std::greater<>());
      for (int i = 0; i < 8; ++i) mean_sorted[i] += static_cast<double>(r[i]) / draws;
    }
    const auto share = zipf_shares(8, skew);
    for (int i = 0; i < 8; ++i) {
      if (skew == 0.0) continue;  // equal shares: the sorted counts spread by order statistics, see below
      EXPECT_NEAR(mean_sorted[i], share[i] * n, 0.005 * n) << "skew " << skew << " rank " << i;
    }
    // Equal shares: the k-th largest of 8 counts lies within ~1.5 sigma (sigma = sqrt(N/8 * 7/8) ≈ 30) of
    // N/8; allow 3 x 45 tokens plus 2 %.
    if (skew == 0.0)
      for (int i = 0; i < 8; ++i) EXPECT_NEAR(mean_sorted[i], n / 8.0, 0.02 * n / 8.0 + 3 * 45) << i;
  }
}

TEST(MoeRouting, DispatchedIsTokensTimesTopKMinusDropped) {
  const MoeConfig m = moe(8, 2, 1.5, 1.0);  // skewed, capacity factor 1: the popular experts overflow
  long total_dropped = 0;
  for (int d = 0; d < 50; ++d) {
    const RoutingDraw r = draw_routing(m, 2048, 1, d, 0);
    EXPECT_EQ(r.dispatched(), 2048L * 2 - r.dropped);
    const long capacity = static_cast<long>(std::ceil(1.0 * 2048 * 2 / 8));
    for (size_t i = 0; i < r.kept.size(); ++i) {
      EXPECT_LE(r.kept[i], capacity);
      EXPECT_EQ(r.kept[i], std::min(r.routed[i], capacity));
    }
    total_dropped += r.dropped;
  }
  EXPECT_GT(total_dropped, 0);
}

TEST(MoeRouting, DrawsAreReproducibleAndIndependentPerLayer) {
  const MoeConfig m = moe(16, 2, 1.0);
  EXPECT_EQ(draw_routing(m, 1024, 5, 2, 3).routed, draw_routing(m, 1024, 5, 2, 3).routed);
  EXPECT_NE(draw_routing(m, 1024, 5, 2, 3).routed, draw_routing(m, 1024, 5, 2, 4).routed);
  EXPECT_NE(draw_routing(m, 1024, 5, 2, 3).routed, draw_routing(m, 1024, 6, 2, 3).routed);
}

}  // namespace
}  // namespace arachne
