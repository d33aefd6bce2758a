// A toy vocabulary, grammar and network shape for tests of the policy network that must not depend on the
// template vocabulary: Bos 0, Eos 1, Type0..Type3 = 2..5, Count1..Count4 = 6..9.
// Grammar: Bos (Type(k) Count(c)){1..max_pairs} Eos with k < groups.
#pragma once
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "planner/arachne/features.h"
#include "planner/arachne/policy_weights.h"

namespace arachne::planner::toy {

inline constexpr int kBos = 0, kEos = 1, kType0 = 2, kCount1 = 6, kVocabulary = 10, kMaxGroups = 4;
inline constexpr int kGroupFeatures = 3, kGlobalFeatures = 2;

inline PolicyShape shape(int encoder = 16, int token = 8, int decoder = 32) {
  PolicyShape s;
  s.group_features = kGroupFeatures;
  s.global_features = kGlobalFeatures;
  s.vocabulary = kVocabulary;
  s.bos_token = kBos;
  s.type_tokens = {kType0, kType0 + 1, kType0 + 2, kType0 + 3};
  s.encoder_width = encoder;
  s.token_width = token;
  s.decoder_width = decoder;
  return s;
}

class Grammar {
 public:
  explicit Grammar(int groups, int max_pairs = 2) : groups_(groups), max_pairs_(max_pairs) {}
  std::vector<int> allowed() const {
    if (tokens_.empty()) return {kBos};
    const int last = tokens_.back();
    std::vector<int> types;
    for (int k = 0; k < groups_; ++k) types.push_back(kType0 + k);
    if (last == kBos) return types;
    if (last >= kType0 && last < kCount1) return {kCount1, kCount1 + 1, kCount1 + 2, kCount1 + 3};
    if (last >= kCount1) {
      if (pairs() >= max_pairs_) return {kEos};
      types.insert(types.begin(), kEos);
      return types;
    }
    return {};  // after Eos
  }
  void push(int id) { tokens_.push_back(id); }
  const std::vector<int>& tokens() const { return tokens_; }

 private:
  int pairs() const {
    int n = 0;
    for (int id : tokens_) n += id >= kCount1 ? 1 : 0;
    return n;
  }
  int groups_, max_pairs_;
  std::vector<int> tokens_;
};

// Random features of a request with `groups` groups.
inline RequestFeatures random_features(int groups, std::mt19937_64& rng) {
  std::normal_distribution<float> n(0.0f, 1.0f);
  RequestFeatures f;
  f.groups = groups;
  for (int i = 0; i < groups * kGroupFeatures; ++i) f.group.push_back(n(rng));
  for (int i = 0; i < kGlobalFeatures; ++i) f.global.push_back(n(rng));
  return f;
}

// The toy task's label: Bos, Type(k) of the group with the largest first feature, Count(c) with c read off
// that group's second feature (floor(x + 2) clamped to 1..4: the decoder must carry the named group's
// encoding to the next step), Eos.
inline std::vector<int> label(const RequestFeatures& f) {
  int best = 0;
  for (int k = 1; k < f.groups; ++k)
    if (f.group[k * kGroupFeatures] > f.group[best * kGroupFeatures]) best = k;
  const int c = std::clamp(static_cast<int>(std::floor(f.group[best * kGroupFeatures + 1] + 2.0f)), 0, 3);
  return {kBos, kType0 + best, kCount1 + c, kEos};
}

}  // namespace arachne::planner::toy
