// Exact min-max contiguous partition (see partition.h).
#include "planner/common/partition.h"

namespace arachne::planner {

std::vector<int> minmax_partition(int layers, int stages,
                                  const std::function<double(int stage, int begin, int end)>& cost) {
  return minmax_partition_with(layers, stages, cost);
}

}  // namespace arachne::planner
