// Exact min-max contiguous partition (see partition.h).
#include "planner/common/partition.h"

#include <limits>

namespace arachne::planner {

std::vector<int> minmax_partition(int layers, int stages,
                                  const std::function<double(int stage, int begin, int end)>& cost) {
  if (stages < 1 || stages > layers) return {};
  const double inf = std::numeric_limits<double>::infinity();
  // best[s][e]: min over splits of layers [0, e) into s stages of the max stage cost; cut[s][e] the start
  // of the last stage. Classic linear-partition DP (Skiena, The Algorithm Design Manual, §8.5).
  std::vector<std::vector<double>> best(stages + 1, std::vector<double>(layers + 1, inf));
  std::vector<std::vector<int>> cut(stages + 1, std::vector<int>(layers + 1, -1));
  best[0][0] = 0;
  for (int s = 1; s <= stages; ++s) {
    const int max_end = layers - (stages - s);  // leave a layer for each later stage
    for (int e = s; e <= max_end; ++e) {
      for (int b = s - 1; b < e; ++b) {
        if (best[s - 1][b] == inf) continue;
        const double c = cost(s - 1, b, e);
        const double v = best[s - 1][b] > c ? best[s - 1][b] : c;
        if (v < best[s][e]) {  // strict: ties keep the earlier cut point
          best[s][e] = v;
          cut[s][e] = b;
        }
      }
    }
  }
  if (best[stages][layers] == inf) return {};
  std::vector<int> bounds(stages + 1);
  bounds[stages] = layers;
  for (int s = stages, e = layers; s >= 1; --s) {
    e = cut[s][e];
    bounds[s - 1] = e;
  }
  return bounds;
}

}  // namespace arachne::planner
