// Exact min-max contiguous partition (see partition.h).
#include "planner/common/partition.h"

namespace arachne::planner {

std::vector<int> even_partition(int layers, int stages) {
  std::vector<int> b(stages + 1, 0);
  const int each = layers / stages, rem = layers % stages;
  for (int s = 0; s < stages; ++s) b[s + 1] = b[s] + each + (s < rem ? 1 : 0);
  return b;
}

std::vector<int> minmax_partition(int layers, int stages,
                                  const std::function<double(int stage, int begin, int end)>& cost) {
  return minmax_partition_with(layers, stages, cost);
}

}  // namespace arachne::planner
