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
// Vertex classes (ClassGraph): FlashFlex's device graphs are blow-ups of the machine graph — the GPUs of one
// machine have the same weight and the same edge to every other GPU (utils.py create_specs: one intra-node
// bandwidth per machine, one inter-machine bandwidth per pair of machines). The partitioner therefore keeps,
// per class, how many of its vertices lie on each side, and prices gains, moves and cuts per class: one class
// move stands for moving any one of its (identical) vertices, the lowest-numbered free one is the one moved.
// This is the lossless part of METIS' multilevel idea (collapse vertices before refining), with no
// approximation: every class vertex can still be split between parts (with reciprocal-bandwidth weights the
// best partitions split every machine, see FlashFlexPlanner), so a bisection step costs O(classes) instead of
// O(vertices), and the partition is the one the vertex-level algorithm would find up to tie-breaking among
// identical vertices.
// Differences from METIS: no lossy multilevel coarsening (matching and contracting distinct vertices),
// recursive bisection instead of METIS' direct k-way refinement, no randomisation (METIS seeds its own RNG:
// fixed seed, different tie-breaking), real-valued edge weights (FlashFlex rounds them to integers for METIS).
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

// A complete graph of n vertices in nc classes of identical vertices: vertex v belongs to class cls[v];
// vertex weight cweight[class]; the edge between two distinct vertices of classes a and b weighs
// cedge[a*nc+b] (symmetric; the diagonal is the edge between two vertices of the same class).
struct ClassGraph {
  int n = 0;
  int nc = 0;
  std::vector<int> cls;         // n
  std::vector<double> cweight;  // nc
  std::vector<double> cedge;    // nc*nc
  double edge(int a, int b) const { return cedge[static_cast<std::size_t>(cls[a]) * nc + cls[b]]; }
};

// Every vertex its own class.
ClassGraph as_class_graph(const WeightedGraph& g);

// Part of every vertex, in [0, min(k, n)); every part non-empty; parts numbered by their smallest vertex.
// k >= n gives every vertex its own part (as FlashFlex's partitioner clamps nparts to the vertex count).
std::vector<int> kway_partition(const ClassGraph& g, int k, double imbalance = 0.03);
std::vector<int> kway_partition(const WeightedGraph& g, int k, double imbalance = 0.03);

// Total weight of the edges whose ends lie in different parts.
double edge_cut(const WeightedGraph& g, const std::vector<int>& part);

}  // namespace arachne::planner::flashflex
