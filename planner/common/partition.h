// Contiguous layer partitions: the exact min-max split that AMP, Metis and the oracle each use inside
// their own search (with their own stage cost functions).
#pragma once
#include <functional>
#include <vector>

namespace arachne::planner {

// Splits layers [0, layers) into `stages` contiguous non-empty ranges minimising max over stages of
// cost(stage, begin, end) (dynamic programming, O(stages * layers^2) cost calls; ties: earlier cut points).
// Returns the stages+1 boundaries (0 = b_0 < b_1 < ... < b_stages = layers), empty when stages > layers or
// every split has infinite cost.
std::vector<int> minmax_partition(int layers, int stages, const std::function<double(int stage, int begin, int end)>& cost);

}  // namespace arachne::planner
