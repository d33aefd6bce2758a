// splitmix64 (Steele, Lea & Flood, "Fast splittable pseudorandom number generators", OOPSLA'14): a fixed,
// portable stream for draws that must be identical on every platform (std::*_distribution and std::shuffle
// outputs are not fixed by the C++ standard).
#pragma once
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace arachne {

class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  double real() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  double real(double lo, double hi) { return lo + (hi - lo) * real(); }
  // [0, n) by modulo: bias below n / 2^64.
  std::uint64_t below(std::uint64_t n) { return next() % n; }
  // Fisher-Yates with below().
  template <class T>
  void shuffle(std::vector<T>& v) {
    for (std::size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[static_cast<std::size_t>(below(i))]);
  }

 private:
  std::uint64_t state_;
};

}  // namespace arachne
