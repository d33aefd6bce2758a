// Balanced k-way partitioning by recursive bisection with greedy growing + Fiduccia–Mattheyses refinement,
// computed per class of identical vertices (see graph_partition.h for the algorithm and how it differs from
// METIS).
#include "planner/baselines/flashflex/graph_partition.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>

namespace arachne::planner::flashflex {
namespace {

bool better(double pen_a, double cut_a, double pen_b, double cut_b) {
  const double pe = 1e-12 * std::max(1.0, std::max(std::abs(pen_a), std::abs(pen_b)));
  if (pen_a < pen_b - pe) return true;
  if (pen_a > pen_b + pe) return false;
  return cut_a < cut_b - 1e-12 * std::max(std::abs(cut_a), std::abs(cut_b));
}

// Bisects the sub-graph `verts` (ascending vertex ids) so that side 0 holds ~`frac` of its vertex weight, with
// at least min0 / min1 vertices on each side. Local classes = the classes present in `verts`; every gain,
// weight and cut is computed from how many vertices of each class lie on each side.
class Bisector {
 public:
  Bisector(const ClassGraph& g, const std::vector<int>& verts, double frac, int min0, int min1, double imbalance)
      : n_(static_cast<int>(verts.size())), min0_(min0), min1_(min1) {
    std::map<int, int> local;  // global class -> local class
    cls_.resize(n_);
    for (int i = 0; i < n_; ++i) {
      const int gc = g.cls[verts[i]];
      auto it = local.find(gc);
      if (it == local.end()) {
        it = local.emplace(gc, nc_++).first;
        global_.push_back(gc);
        members_.emplace_back();
      }
      cls_[i] = it->second;
      members_[it->second].push_back(i);
    }
    vw_.resize(nc_);
    w_.resize(static_cast<size_t>(nc_) * nc_);
    for (int a = 0; a < nc_; ++a) {
      vw_[a] = g.cweight[global_[a]];
      for (int b = 0; b < nc_; ++b) w_[static_cast<size_t>(a) * nc_ + b] = g.cedge[static_cast<size_t>(global_[a]) * g.nc + global_[b]];
    }
    for (int i = 0; i < n_; ++i) total_ += vw_[cls_[i]];
    target0_ = frac * total_;
    tol_ = imbalance * std::min(target0_, total_ - target0_);
  }

  std::vector<char> run() {
    std::vector<char> best_side;
    double best_pen = std::numeric_limits<double>::infinity(), best_cut = best_pen;
    const int seeds = std::min(n_, 8);
    for (int s = 0; s < seeds; ++s) {
      const int seed = static_cast<int>(static_cast<long>(s) * n_ / seeds);
      std::vector<char> side = grow(seed);
      fm(side);
      count(side);
      const double pen = penalty(weight0());
      const double c = cut();
      if (best_side.empty() || better(pen, c, best_pen, best_cut)) {
        best_side = side;
        best_pen = pen;
        best_cut = c;
      }
    }
    return best_side;
  }

 private:
  int n_;
  int min0_, min1_;
  int nc_ = 0;
  std::vector<int> cls_;                   // local vertex -> local class
  std::vector<int> global_;                // local class -> class of the graph
  std::vector<std::vector<int>> members_;  // local class -> its local vertices, ascending
  std::vector<double> vw_;                 // per local class
  std::vector<double> w_;                  // nc_ x nc_
  double total_ = 0, target0_ = 0, tol_ = 0;
  std::vector<long> cnt_[2];               // per side: vertices of each class

  double w(int a, int b) const { return w_[static_cast<size_t>(a) * nc_ + b]; }
  double penalty(double w0) const { return std::max(0.0, std::abs(w0 - target0_) - tol_); }
  void count(const std::vector<char>& side) {
    cnt_[0].assign(nc_, 0);
    cnt_[1].assign(nc_, 0);
    for (int i = 0; i < n_; ++i) ++cnt_[static_cast<int>(side[i])][cls_[i]];
  }
  double weight0() const {
    double s = 0;
    for (int c = 0; c < nc_; ++c) s += cnt_[0][c] * vw_[c];
    return s;
  }
  double cut() const {
    double c = 0;
    for (int a = 0; a < nc_; ++a) {
      c += static_cast<double>(cnt_[0][a]) * cnt_[1][a] * w(a, a);
      for (int b = a + 1; b < nc_; ++b)
        c += (static_cast<double>(cnt_[0][a]) * cnt_[1][b] + static_cast<double>(cnt_[1][a]) * cnt_[0][b]) * w(a, b);
    }
    return c;
  }
  // Sum of the edges from one vertex of class c to the vertices on `side` (itself excluded when it is there).
  double tie(int c, int side, bool self_on_side) const {
    double s = 0;
    for (int d = 0; d < nc_; ++d) s += cnt_[side][d] * w(c, d);
    return self_on_side ? s - w(c, c) : s;
  }

  // Greedy graph growing: side 0 starts as {seed} and takes the vertex most strongly tied to it (edges into
  // side 0 minus edges to the rest) until its weight reaches the target; the stopping point closest to the
  // target wins. Ties: the lowest vertex.
  std::vector<char> grow(int seed) {
    std::vector<char> side(n_, 1);
    count(side);
    std::vector<double> to0(nc_), to1(nc_);  // per class, for one of its side-1 vertices
    for (int c = 0; c < nc_; ++c) {
      to0[c] = 0;
      to1[c] = tie(c, 1, true);
    }
    std::vector<size_t> next(nc_, 0);  // first side-1 member of each class
    auto add = [&](int v) {
      side[v] = 0;
      const int d = cls_[v];
      --cnt_[1][d];
      ++cnt_[0][d];
      for (int c = 0; c < nc_; ++c) {
        to0[c] += w(c, d);
        to1[c] -= w(c, d);
      }
    };
    add(seed);
    double w0 = vw_[cls_[seed]];
    int count0 = 1;
    while (count0 < n_ - min1_) {
      int pick = -1;
      double best_gain = -std::numeric_limits<double>::infinity();
      for (int c = 0; c < nc_; ++c) {
        if (cnt_[1][c] == 0) continue;
        while (side[members_[c][next[c]]] == 0) ++next[c];
        const int u = members_[c][next[c]];
        const double gain = to0[c] - to1[c];
        if (gain > best_gain || (gain == best_gain && u < pick)) {
          best_gain = gain;
          pick = u;
        }
      }
      if (pick < 0) break;
      const double next_w = w0 + vw_[cls_[pick]];
      // Stop when adding overshoots more than stopping undershoots, once side 0 has its minimum size.
      if (count0 >= min0_ && w0 >= target0_) break;
      if (count0 >= min0_ && next_w > target0_ && next_w - target0_ > target0_ - w0) break;
      add(pick);
      w0 = next_w;
      ++count0;
    }
    return side;
  }

  // Fiduccia–Mattheyses passes: move the unlocked vertex of highest cut gain that keeps the balance
  // (deviation within the window, or not worse than now) and the minimum sizes; keep the best prefix.
  // Unlocked vertices of one class on one side share their gain; the lowest of them is the one moved.
  void fm(std::vector<char>& side) {
    std::vector<double> gain[2];  // per side, per class: cut reduction when one of its vertices changes side
    std::vector<std::vector<int>> free_list[2];
    std::vector<size_t> head[2];
    for (int pass = 0; pass < 10; ++pass) {
      count(side);
      for (int s = 0; s < 2; ++s) {
        gain[s].assign(nc_, 0);
        free_list[s].assign(nc_, {});
        head[s].assign(nc_, 0);
        for (int c = 0; c < nc_; ++c) gain[s][c] = tie(c, 1 - s, false) - tie(c, s, true);
      }
      for (int i = 0; i < n_; ++i) free_list[static_cast<int>(side[i])][cls_[i]].push_back(i);
      double w0 = weight0();
      long count0 = 0;
      for (int c = 0; c < nc_; ++c) count0 += cnt_[0][c];
      double cur_cut = cut();
      double best_pen = penalty(w0), best_cut = cur_cut;
      const double start_pen = best_pen, start_cut = best_cut;
      std::vector<int> moves;
      int best_prefix = 0, since_best = 0;
      while (since_best < 50) {
        int pick_c = -1, pick_s = -1, pick_v = -1;
        double pick_gain = -std::numeric_limits<double>::infinity();
        const double cur_dev = std::abs(w0 - target0_);
        for (int s = 0; s < 2; ++s) {
          if (s == 0 && count0 - 1 < min0_) continue;
          if (s == 1 && (n_ - count0) - 1 < min1_) continue;
          for (int c = 0; c < nc_; ++c) {
            if (head[s][c] >= free_list[s][c].size()) continue;
            const double nw0 = s == 0 ? w0 - vw_[c] : w0 + vw_[c];
            const double dev = std::abs(nw0 - target0_);
            if (dev > tol_ && dev > cur_dev + 1e-12 * total_) continue;
            const int u = free_list[s][c][head[s][c]];
            if (gain[s][c] > pick_gain || (gain[s][c] == pick_gain && u < pick_v)) {
              pick_gain = gain[s][c];
              pick_c = c;
              pick_s = s;
              pick_v = u;
            }
          }
        }
        if (pick_v < 0) break;
        ++head[pick_s][pick_c];
        side[pick_v] = static_cast<char>(1 - pick_s);
        w0 += pick_s == 0 ? -vw_[pick_c] : vw_[pick_c];
        count0 += pick_s == 0 ? -1 : 1;
        cur_cut -= pick_gain;
        // Vertices on the mover's new side: the edge to it becomes internal (gain drops); old side: external.
        for (int c = 0; c < nc_; ++c) {
          gain[1 - pick_s][c] -= 2 * w(c, pick_c);
          gain[pick_s][c] += 2 * w(c, pick_c);
        }
        moves.push_back(pick_v);
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

void recurse(const ClassGraph& g, const std::vector<int>& verts, int k, int first_part, double imbalance,
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

ClassGraph as_class_graph(const WeightedGraph& g) {
  ClassGraph c;
  c.n = g.n;
  c.nc = g.n;
  c.cls.resize(g.n);
  std::iota(c.cls.begin(), c.cls.end(), 0);
  c.cweight = g.vweight;
  c.cedge = g.eweight;
  return c;
}

std::vector<int> kway_partition(const ClassGraph& g, int k, double imbalance) {
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

std::vector<int> kway_partition(const WeightedGraph& g, int k, double imbalance) {
  return kway_partition(as_class_graph(g), k, imbalance);
}

double edge_cut(const WeightedGraph& g, const std::vector<int>& part) {
  double c = 0;
  for (int a = 0; a < g.n; ++a)
    for (int b = a + 1; b < g.n; ++b)
      if (part[a] != part[b]) c += g.edge(a, b);
  return c;
}

}  // namespace arachne::planner::flashflex
