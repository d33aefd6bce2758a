#include "sim/model/moe_routing.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

namespace arachne {
namespace {

// SplitMix64 finaliser (Steele et al., OOPSLA 2014): decorrelates the (seed, micro-batch, layer) key.
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

std::vector<double> zipf_shares(int experts, double s) {
  std::vector<double> w(static_cast<size_t>(std::max(experts, 0)));
  for (int i = 0; i < experts; ++i) w[i] = std::pow(static_cast<double>(i + 1), -s);
  const double sum = std::accumulate(w.begin(), w.end(), 0.0);
  for (double& x : w) x /= sum;
  return w;
}

long RoutingDraw::dispatched() const { return std::accumulate(kept.begin(), kept.end(), 0L); }

RoutingDraw draw_routing(const MoeConfig& moe, long tokens, std::uint64_t seed, std::uint64_t micro_batch,
                         std::uint64_t layer) {
  const int e = moe.experts;
  std::mt19937_64 rng(mix(mix(mix(seed) ^ micro_batch) ^ layer));
  // Fresh permutation of ranks: expert i gets the share of rank perm[i] (Fisher-Yates with our own
  // uniform draws, so the result does not depend on the standard library's shuffle).
  std::vector<int> perm(static_cast<size_t>(e));
  std::iota(perm.begin(), perm.end(), 0);
  for (int i = e - 1; i > 0; --i) {
    const int j = static_cast<int>(rng() % static_cast<std::uint64_t>(i + 1));
    std::swap(perm[i], perm[j]);
  }
  const std::vector<double> share = zipf_shares(e, moe.routing_skew);
  // Multinomial sample of tokens x top_k assignments as a chain of binomials.
  RoutingDraw d;
  d.routed.assign(static_cast<size_t>(e), 0);
  long left = tokens * moe.top_k;
  double mass_left = 1.0;
  for (int i = 0; i < e && left > 0; ++i) {
    const double p = share[perm[i]];
    long n = left;
    if (i < e - 1 && mass_left > p) {
      std::binomial_distribution<long> bin(left, std::clamp(p / mass_left, 0.0, 1.0));
      n = bin(rng);
    }
    d.routed[i] = n;
    left -= n;
    mass_left -= p;
  }
  const long capacity =
      static_cast<long>(std::ceil(moe.capacity_factor * static_cast<double>(tokens * moe.top_k) / e));
  d.kept.resize(static_cast<size_t>(e));
  for (int i = 0; i < e; ++i) {
    d.kept[i] = std::min(d.routed[i], capacity);
    d.dropped += d.routed[i] - d.kept[i];
  }
  return d;
}

}  // namespace arachne
