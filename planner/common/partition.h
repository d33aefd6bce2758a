// Contiguous layer partitions: the exact min-max split that AMP, Metis and the oracle each use inside
// their own search (with their own stage cost functions).
#pragma once
#include <functional>
#include <limits>
#include <vector>

namespace arachne::planner {

// Splits layers [0, layers) into `stages` ranges of layers / stages layers each, the remainder one each to
// the first stages (AMP's pipe_uniform; FlashFlex's even split). Returns the stages+1 boundaries; stages >= 1.
std::vector<int> even_partition(int layers, int stages);

// Splits layers [0, layers) into `stages` contiguous non-empty ranges minimising max over stages of
// cost(stage, begin, end) (dynamic programming, O(stages * layers^2) cost calls at most; ties: earlier cut
// points). Returns the stages+1 boundaries (0 = b_0 < b_1 < ... < b_stages = layers), empty when stages >
// layers or every split has infinite cost.
std::vector<int> minmax_partition(int layers, int stages, const std::function<double(int stage, int begin, int end)>& cost);

// Buffers of the partition tables, kept by a caller that works out many partitions so that each one
// allocates only its result. The partitions are the same with or without them.
struct PartitionScratch {
  std::vector<double> best;
  std::vector<int> cut, smaller;
};

namespace detail {
// The linear-partition table both variants below fill (Skiena, The Algorithm Design Manual, §8.5):
// best[s][e], the min over splits of layers [0, e) into s stages of the max stage cost, and cut[s][e], the
// start of the last stage. fill(s, prev, row, cuts, max_end) fills row s for e in [s, max_end] from row
// s - 1 (max_end leaves a layer for each later stage). Returns the boundaries, empty when none is finite.
template <class Fill>
std::vector<int> minmax_partition_table(int layers, int stages, const Fill& fill, PartitionScratch& scratch) {
  if (stages < 1 || stages > layers) return {};
  const double inf = std::numeric_limits<double>::infinity();
  const int width = layers + 1;
  std::vector<double>& best = scratch.best;
  std::vector<int>& cut = scratch.cut;
  best.assign(static_cast<size_t>(stages + 1) * width, inf);
  cut.assign(static_cast<size_t>(stages + 1) * width, -1);
  best[0] = 0;
  for (int s = 1; s <= stages; ++s)
    fill(s, &best[static_cast<size_t>(s - 1) * width], &best[static_cast<size_t>(s) * width],
         &cut[static_cast<size_t>(s) * width], layers - (stages - s));
  if (best[static_cast<size_t>(stages) * width + layers] == inf) return {};
  std::vector<int> bounds(stages + 1);
  bounds[stages] = layers;
  for (int s = stages, e = layers; s >= 1; --s) {
    e = cut[static_cast<size_t>(s) * width + e];
    bounds[s - 1] = e;
  }
  return bounds;
}
}  // namespace detail

// Which of several splits of equal max cost the table keeps for a stage: the earliest cut point (the
// default: later stages take the extra layers) or the latest (earlier stages take them). Both are min-max
// partitions; a pipeline's 1F1B time can still differ between them (the stage a layer lands on changes the
// fill and drain), so a caller may price both.
enum class PartitionTies { EarliestCut, LatestCut };

// The same with the cost as any callable (inlined: for callers in a hot loop).
template <class Cost>
std::vector<int> minmax_partition_with(int layers, int stages, const Cost& cost,
                                       PartitionTies ties = PartitionTies::EarliestCut) {
  const bool latest = ties == PartitionTies::LatestCut;
  const double inf = std::numeric_limits<double>::infinity();
  PartitionScratch scratch;
  return detail::minmax_partition_table(layers, stages, [&](int s, const double* prev, double* row, int* cuts, int max_end) {
    for (int e = s; e <= max_end; ++e)
      for (int b = s - 1; b < e; ++b) {
        // A split whose first s - 1 stages already cost at least the best so far cannot lower it (the
        // max only grows): its cost is not needed.
        if (prev[b] == inf || prev[b] > row[e] || (prev[b] == row[e] && !latest)) continue;
        const double c = cost(s - 1, b, e);
        const double v = prev[b] > c ? prev[b] : c;
        if (v < row[e] || (latest && v == row[e])) {  // cut points ascend: strict keeps the earliest of equals
          row[e] = v;
          cuts[e] = b;
        }
      }
  }, scratch);
}

// The same partition (the same boundaries, ties included) for a cost that never falls as a stage grows
// to the left: cost(stage, b, e) >= cost(stage, b + 1, e), infinity included (a memory limit that admits a
// range admits every range that ends there and starts later). The cut points are then tried from the right,
// after the previous end's cut as a first guess, and the search stops at the first one whose last stage
// alone costs more than the best so far: every cut further left costs at least as much. O(stages * layers *
// reach) cost calls, reach the layers a stage spans near the optimum, instead of O(stages * layers^2). Cuts
// whose first stages alone cost more than the best are passed over along previous-smaller links (each cut's
// nearest cut to the left with a smaller prefix cost: every cut between costs no less, so it is passed over
// too), the same cuts the one-by-one scan passes over.
// `scratch`: the caller's buffers (PartitionScratch), else the call's own.
template <class Cost>
std::vector<int> minmax_partition_monotone_with(int layers, int stages, const Cost& cost,
                                                PartitionTies ties = PartitionTies::EarliestCut,
                                                PartitionScratch* scratch = nullptr) {
  const double inf = std::numeric_limits<double>::infinity();
  const bool latest = ties == PartitionTies::LatestCut;
  PartitionScratch own;
  PartitionScratch& buffers = scratch ? *scratch : own;
  std::vector<int>& smaller = buffers.smaller;  // per cut b of row s - 1: its previous-smaller cut (written before read)
  smaller.resize(static_cast<size_t>(layers) + 1);
  return detail::minmax_partition_table(layers, stages, [&](int s, const double* prev, double* row, int* cuts, int max_end) {
    for (int b = s - 1; b < max_end; ++b) {
      int k = b - 1;
      while (k >= s - 1 && !(prev[k] < prev[b])) k = smaller[k];
      smaller[b] = k;  // below s - 1: none
    }
    for (int e = s; e <= max_end; ++e) {
      // The previous end's cut, usually at or next to this end's, seeds the best so the scan stops early.
      if (e > s && cuts[e - 1] >= 0 && prev[cuts[e - 1]] < inf) {
        const double c = cost(s - 1, cuts[e - 1], e);
        const double v = prev[cuts[e - 1]] > c ? prev[cuts[e - 1]] : c;
        if (v < inf) row[e] = v, cuts[e] = cuts[e - 1];
      }
      for (int b = e - 1; b >= s - 1; --b) {
        // Cannot tie the best: no cost needed, nor for the cuts up to its previous-smaller one.
        while (b >= s - 1 && (prev[b] == inf || prev[b] > row[e])) b = smaller[b];
        if (b < s - 1) break;
        const double c = cost(s - 1, b, e);
        if (c > row[e] || c == inf) break;  // so does every cut further left
        const double v = prev[b] > c ? prev[b] : c;
        // Cut points descend from the seed's right: of equal splits the leftmost wins unless `latest`, where
        // one right of the seed replaces it and the first met (the rightmost) stays.
        if (v < row[e] || (v == row[e] && (!latest || b > cuts[e]))) {
          row[e] = v;
          cuts[e] = b;
        }
      }
    }
  }, buffers);
}

}  // namespace arachne::planner
