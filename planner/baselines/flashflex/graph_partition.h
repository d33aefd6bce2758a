// Balanced k-way graph partitioning for the `flashflex` baseline: the stand-in for the METIS call
// (pymetis.part_graph) in FlashFlex's experimental/partitioner.py `partitioner()`.
//
// FlashFlex hands METIS a complete graph of the GPUs (experimental/graph.py construct_graph: vertex weight =
// tensor-core TFLOP/s, edge weight = bandwidth or its reciprocal) and asks for `nparts` parts that balance
// the vertex weight (METIS' default tolerance 1.03) while minimising the weight of the cut edges.
//
// What this implementation does (deterministic, own code):
//  * recursive bisection: k parts = bisect into floor(k/2) : ceil(k/2) of the vertex weight, recurse;
//  * each bisection: greedy graph growing (GGGP, Karypis & Kumar 1998 §3.2) from up to 8 evenly spaced seed
//    vertices, each followed by Fiduccia–Mattheyses refinement passes (the move-based Kernighan–Lin variant
//    METIS uses, with rollback to the best prefix of a pass); the best result (balance first, then cut) wins;
//  * balance: a part may deviate from its target weight by `imbalance` x target; a move that would leave
//    that window is taken only if it does not make the deviation worse (GPUs are heavy, coarse vertices: the
//    window cannot always be met, METIS then also returns its best effort).
// Differences from METIS: no multilevel coarsening (the graphs are a few hundred GPUs at most, dense, and
// FM on the whole graph is affordable and better than refining a coarsened one), recursive bisection instead
// of METIS' direct k-way refinement, no randomisation (METIS seeds its own RNG: fixed seed, different
// tie-breaking), real-valued edge weights (FlashFlex rounds them to integers for METIS).
#pragma once
#include <cstddef>
#include <vector>

namespace arachne::planner::flashflex {

struct WeightedGraph {
  int n = 0;
  std::vector<double> vweight;  // n
  std::vector<double> eweight;  // n*n, symmetric, zero diagonal (complete graph: every pair may be an edge)
  double edge(int a, int b) const { return eweight[static_cast<std::size_t>(a) * n + b]; }
};

// Part of every vertex, in [0, min(k, n)); every part non-empty; parts numbered by their smallest vertex.
// k >= n gives every vertex its own part (as FlashFlex's partitioner clamps nparts to the vertex count).
std::vector<int> kway_partition(const WeightedGraph& g, int k, double imbalance = 0.03);

// Total weight of the edges whose ends lie in different parts.
double edge_cut(const WeightedGraph& g, const std::vector<int>& part);

}  // namespace arachne::planner::flashflex
