// The min-max layer partition with early exit for costs that grow to the left
// (planner/common/partition.h minmax_partition_monotone_with) against the plain dynamic program: the same
// boundaries, ties included, on random costs of that kind - stage speeds, per-layer times with many equal
// values (so splits tie), embedding and head terms and memory limits that admit every later start; with either
// rule for equal splits.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <random>
#include <vector>

#include "planner/common/partition.h"

namespace arachne::planner {
namespace {

struct RandomCost {
  std::vector<double> prefix;                // per-layer times (small integers: ties are common)
  std::vector<double> speed;                 // per stage
  std::vector<std::vector<int>> max_end;     // per stage, per start: non-decreasing in the start
  double embedding = 0, head = 0;
  double operator()(int s, int b, int e) const {
    if (e > max_end[s][b]) return std::numeric_limits<double>::infinity();
    const int layers = static_cast<int>(prefix.size()) - 1;
    return (prefix[e] - prefix[b] + (b == 0 ? embedding : 0) + (e == layers ? head : 0)) / speed[s];
  }
};

RandomCost draw(std::mt19937_64& rng, int layers, int stages) {
  RandomCost c;
  std::uniform_int_distribution<int> layer_time(1, 3), speed(1, 4), coin(0, 3);
  c.prefix.assign(1, 0.0);
  for (int l = 0; l < layers; ++l) c.prefix.push_back(c.prefix.back() + layer_time(rng));
  for (int s = 0; s < stages; ++s) c.speed.push_back(speed(rng));
  c.embedding = coin(rng);
  c.head = coin(rng);
  for (int s = 0; s < stages; ++s) {
    // Limits on some stages: the largest end from each start, never falling as the start moves right.
    std::vector<int> ends(layers);
    int end = coin(rng) == 0 ? layers : std::uniform_int_distribution<int>(1, layers)(rng);
    for (int b = 0; b < layers; ++b) {
      end = std::max(end, b + std::uniform_int_distribution<int>(0, 2)(rng));
      ends[b] = std::min(layers, std::max(end, b));
      end = ends[b];
    }
    c.max_end.push_back(ends);
  }
  return c;
}

// The even split by count: 10 layers over 4 stages, 3, 3, 2, 2 (the remainder on the first stages); a
// count that divides the layers gives equal stages.
TEST(Partition, EvenPartitionGivesTheRemainderToTheFirstStages) {
  EXPECT_EQ(even_partition(10, 4), (std::vector<int>{0, 3, 6, 8, 10}));
  EXPECT_EQ(even_partition(32, 9), (std::vector<int>{0, 4, 8, 12, 16, 20, 23, 26, 29, 32}));
  EXPECT_EQ(even_partition(8, 4), (std::vector<int>{0, 2, 4, 6, 8}));
}

TEST(Partition, MonotoneVariantGivesThePlainProgramsBoundaries) {
  std::mt19937_64 rng(11);
  int feasible = 0, infeasible = 0;
  for (int i = 0; i < 3000; ++i) {
    const int layers = std::uniform_int_distribution<int>(1, 40)(rng);
    const int stages = std::uniform_int_distribution<int>(1, std::min(layers + 1, 24))(rng);
    const RandomCost c = draw(rng, layers, stages);
    const std::vector<int> plain = minmax_partition_with(layers, stages, c);
    EXPECT_EQ(minmax_partition_monotone_with(layers, stages, c), plain) << "case " << i;
    (plain.empty() ? infeasible : feasible) += 1;
  }
  // Both outcomes occur, or the comparison proves little.
  EXPECT_GT(feasible, 1000);
  EXPECT_GT(infeasible, 100);
}

// The max stage cost of a partition (infinity when empty).
template <class Cost>
double max_cost(const std::vector<int>& bounds, const Cost& cost) {
  if (bounds.empty()) return std::numeric_limits<double>::infinity();
  double m = 0;
  for (size_t s = 0; s + 1 < bounds.size(); ++s) m = std::max(m, cost(static_cast<int>(s), bounds[s], bounds[s + 1]));
  return m;
}

TEST(Partition, LatestCutTiesGiveAnotherMinMaxSplitTheSameInBothVariants) {
  std::mt19937_64 rng(12);
  int differ = 0;
  for (int i = 0; i < 3000; ++i) {
    const int layers = std::uniform_int_distribution<int>(1, 40)(rng);
    const int stages = std::uniform_int_distribution<int>(1, std::min(layers + 1, 24))(rng);
    const RandomCost c = draw(rng, layers, stages);
    const std::vector<int> early = minmax_partition_with(layers, stages, c);
    const std::vector<int> late = minmax_partition_with(layers, stages, c, PartitionTies::LatestCut);
    EXPECT_EQ(minmax_partition_monotone_with(layers, stages, c, PartitionTies::LatestCut), late) << "case " << i;
    ASSERT_EQ(early.empty(), late.empty()) << "case " << i;
    if (early.empty()) continue;
    // Both are min-max: the same largest stage cost.
    EXPECT_EQ(max_cost(late, c), max_cost(early, c)) << "case " << i;
    // Of the last stage's equal splits the latest cut is kept: it starts no earlier.
    EXPECT_GE(late[stages - 1], early[stages - 1]) << "case " << i;
    differ += late != early;
  }
  // Ties are common in these costs, so the rules must part somewhere, or the test proves nothing.
  EXPECT_GT(differ, 300);
}

}  // namespace
}  // namespace arachne::planner
