// Balanced k-way partitioning by recursive bisection with greedy growing + Fiduccia–Mattheyses refinement
// (see graph_partition.h for the algorithm and how it differs from METIS).
#include "planner/baselines/flashflex/graph_partition.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>

namespace arachne::planner::flashflex {
namespace {

struct Bisection {
  std::vector<char> side;  // per local vertex: 0 or 1
  double penalty = std::numeric_limits<double>::infinity();
  double cut = std::numeric_limits<double>::infinity();
};

bool better(double pen_a, double cut_a, double pen_b, double cut_b) {
  const double pe = 1e-12 * std::max(1.0, std::max(std::abs(pen_a), std::abs(pen_b)));
  if (pen_a < pen_b - pe) return true;
  if (pen_a > pen_b + pe) return false;
  return cut_a < cut_b - 1e-12 * std::max(std::abs(cut_a), std::abs(cut_b));
}

// Bisects the sub-graph `verts` so that side 0 holds ~`frac` of its vertex weight, with at least min0 / min1
// vertices on each side.
class Bisector {
 public:
  Bisector(const WeightedGraph& g, const std::vector<int>& verts, double frac, int min0, int min1, double imbalance)
      : g_(g), v_(verts), n_(static_cast<int>(verts.size())), min0_(min0), min1_(min1) {
    for (int i = 0; i < n_; ++i) total_ += g_.vweight[v_[i]];
    target0_ = frac * total_;
    tol_ = imbalance * std::min(target0_, total_ - target0_);
  }

  std::vector<char> run() {
    Bisection best;
    const int seeds = std::min(n_, 8);
    for (int s = 0; s < seeds; ++s) {
      const int seed = static_cast<int>(static_cast<long>(s) * n_ / seeds);
      std::vector<char> side = grow(seed);
      fm(side);
      const double pen = penalty(weight0(side));
      const double c = cut(side);
      if (best.side.empty() || better(pen, c, best.penalty, best.cut)) best = {side, pen, c};
    }
    return best.side;
  }

 private:
  const WeightedGraph& g_;
  const std::vector<int>& v_;
  int n_;
  int min0_, min1_;
  double total_ = 0, target0_ = 0, tol_ = 0;

  double w(int a, int b) const { return g_.edge(v_[a], v_[b]); }
  double vw(int a) const { return g_.vweight[v_[a]]; }
  double penalty(double w0) const { return std::max(0.0, std::abs(w0 - target0_) - tol_); }
  double weight0(const std::vector<char>& side) const {
    double s = 0;
    for (int i = 0; i < n_; ++i)
      if (side[i] == 0) s += vw(i);
    return s;
  }
  double cut(const std::vector<char>& side) const {
    double c = 0;
    for (int a = 0; a < n_; ++a)
      for (int b = a + 1; b < n_; ++b)
        if (side[a] != side[b]) c += w(a, b);
    return c;
  }

  // Greedy graph growing: side 0 starts as {seed} and takes the vertex most strongly tied to it (edges into
  // side 0 minus edges to the rest) until its weight reaches the target; the stopping point closest to the
  // target wins.
  std::vector<char> grow(int seed) const {
    std::vector<char> side(n_, 1);
    std::vector<double> to0(n_, 0), to1(n_, 0);
    for (int a = 0; a < n_; ++a)
      for (int b = 0; b < n_; ++b)
        if (a != b) to1[a] += w(a, b);
    auto add = [&](int v) {
      side[v] = 0;
      for (int u = 0; u < n_; ++u) {
        if (u == v) continue;
        to0[u] += w(u, v);
        to1[u] -= w(u, v);
      }
    };
    add(seed);
    double w0 = vw(seed);
    int count0 = 1;
    while (count0 < n_ - min1_) {
      int pick = -1;
      double best_gain = -std::numeric_limits<double>::infinity();
      for (int u = 0; u < n_; ++u) {
        if (side[u] == 0) continue;
        const double gain = to0[u] - to1[u];
        if (gain > best_gain) {
          best_gain = gain;
          pick = u;
        }
      }
      if (pick < 0) break;
      const double next = w0 + vw(pick);
      // Stop when adding overshoots more than stopping undershoots, once side 0 has its minimum size.
      if (count0 >= min0_ && w0 >= target0_) break;
      if (count0 >= min0_ && next > target0_ && next - target0_ > target0_ - w0) break;
      add(pick);
      w0 = next;
      ++count0;
    }
    return side;
  }

  // Fiduccia–Mattheyses passes: move the unlocked vertex of highest cut gain that keeps the balance
  // (deviation within the window, or not worse than now) and the minimum sizes; keep the best prefix.
  void fm(std::vector<char>& side) const {
    std::vector<double> gain(n_, 0);  // cut reduction when the vertex changes side
    for (int pass = 0; pass < 10; ++pass) {
      for (int a = 0; a < n_; ++a) {
        double ext = 0, in = 0;
        for (int b = 0; b < n_; ++b) {
          if (a == b) continue;
          (side[a] == side[b] ? in : ext) += w(a, b);
        }
        gain[a] = ext - in;
      }
      double w0 = weight0(side);
      int count0 = static_cast<int>(std::count(side.begin(), side.end(), 0));
      double cur_cut = cut(side);
      double best_pen = penalty(w0), best_cut = cur_cut;
      const double start_pen = best_pen, start_cut = best_cut;
      std::vector<int> moves;
      int best_prefix = 0, since_best = 0;
      std::vector<char> locked(n_, 0);
      while (since_best < 50) {
        int pick = -1;
        double pick_gain = -std::numeric_limits<double>::infinity();
        const double cur_dev = std::abs(w0 - target0_);
        for (int u = 0; u < n_; ++u) {
          if (locked[u]) continue;
          if (side[u] == 0 && count0 - 1 < min0_) continue;
          if (side[u] == 1 && (n_ - count0) - 1 < min1_) continue;
          const double nw0 = side[u] == 0 ? w0 - vw(u) : w0 + vw(u);
          const double dev = std::abs(nw0 - target0_);
          if (dev > tol_ && dev > cur_dev + 1e-12 * total_) continue;
          if (gain[u] > pick_gain) {
            pick_gain = gain[u];
            pick = u;
          }
        }
        if (pick < 0) break;
        const char from = side[pick];
        side[pick] = static_cast<char>(1 - from);
        w0 += from == 0 ? -vw(pick) : vw(pick);
        count0 += from == 0 ? -1 : 1;
        cur_cut -= gain[pick];
        for (int u = 0; u < n_; ++u) {
          if (u == pick) continue;
          // u on pick's new side: the edge becomes internal (gain drops); on its old side: external.
          gain[u] += side[u] == side[pick] ? -2 * w(u, pick) : 2 * w(u, pick);
        }
        gain[pick] = -gain[pick];
        locked[pick] = 1;
        moves.push_back(pick);
        const double pen = penalty(w0);
        if (better(pen, cur_cut, best_pen, best_cut)) {
          best_pen = pen;
          best_cut = cur_cut;
          best_prefix = static_cast<int>(moves.size());
          since_best = 0;
        } else {
          ++since_best;
        }
      }
      for (int i = static_cast<int>(moves.size()) - 1; i >= best_prefix; --i) side[moves[i]] = static_cast<char>(1 - side[moves[i]]);
      if (!better(best_pen, best_cut, start_pen, start_cut)) break;
    }
  }
};

void recurse(const WeightedGraph& g, const std::vector<int>& verts, int k, int first_part, double imbalance,
             std::vector<int>& part) {
  if (k <= 1) {
    for (const int v : verts) part[v] = first_part;
    return;
  }
  const int k0 = k / 2, k1 = k - k0;
  Bisector b(g, verts, static_cast<double>(k0) / k, k0, k1, imbalance);
  const std::vector<char> side = b.run();
  std::vector<int> a, c;
  for (size_t i = 0; i < verts.size(); ++i) (side[i] == 0 ? a : c).push_back(verts[i]);
  recurse(g, a, k0, first_part, imbalance, part);
  recurse(g, c, k1, first_part + k0, imbalance, part);
}

}  // namespace

std::vector<int> kway_partition(const WeightedGraph& g, int k, double imbalance) {
  std::vector<int> part(g.n, 0);
  if (g.n == 0) return part;
  k = std::max(1, std::min(k, g.n));
  std::vector<int> all(g.n);
  std::iota(all.begin(), all.end(), 0);
  recurse(g, all, k, 0, imbalance, part);
  // Canonical numbering: parts in order of their smallest vertex.
  std::map<int, int> renumber;
  for (int v = 0; v < g.n; ++v)
    if (!renumber.count(part[v])) {
      const int next = static_cast<int>(renumber.size());
      renumber[part[v]] = next;
    }
  for (int& p : part) p = renumber[p];
  return part;
}

double edge_cut(const WeightedGraph& g, const std::vector<int>& part) {
  double c = 0;
  for (int a = 0; a < g.n; ++a)
    for (int b = a + 1; b < g.n; ++b)
      if (part[a] != part[b]) c += g.edge(a, b);
  return c;
}

}  // namespace arachne::planner::flashflex
