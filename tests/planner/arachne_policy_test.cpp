// The learned planner's plain-C++ side: request features (physical values from the GPU datasheets, order of
// the cluster file irrelevant), the weights file (round trip, corruption detected), and the network's
// decoding: Type tokens follow their group under any group order, a wide beam is exact, masked
// probabilities sum to one and sampling follows them.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <set>

#include "planner/arachne/features.h"
#include "planner/arachne/policy_net.h"
#include "planner/arachne/policy_weights.h"
#include "planner/template/template.h"
#include "planner/template/tokens.h"
#include "sim/io/input_error.h"
#include "tests/planner/policy_toy.h"
#include "tests/sim/test_support.h"

namespace arachne::planner {
namespace {

namespace fs = std::filesystem;

// Weights drawn from N(0, 0.5^2): large enough that logits differ by whole units.
PolicyWeights random_weights(const PolicyShape& shape, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.0f, 0.5f);
  PolicyWeights w;
  w.shape = shape;
  for (const ParameterSpec& p : policy_parameters(shape)) {
    int64_t count = 1;
    for (int64_t d : p.dims) count *= d;
    std::vector<float>& v = w.tensors[p.name];
    for (int64_t i = 0; i < count; ++i) v.push_back(n(rng));
  }
  return w;
}

// Every complete sequence of the toy grammar with its log-probability under `net`.
std::vector<DecodedSequence> enumerate(const PolicyNet& net, const RequestFeatures& f, const toy::Grammar& start) {
  std::vector<DecodedSequence> all;
  std::function<void(toy::Grammar)> walk = [&](toy::Grammar g) {
    const std::vector<int> next = g.allowed();
    if (next.empty()) {
      all.push_back({g.tokens(), net.log_prob(f, GrammarAdapter<toy::Grammar>(start), g.tokens())});
      return;
    }
    for (int id : next) {
      toy::Grammar h = g;
      h.push(id);
      walk(h);
    }
  };
  walk(start);
  return all;
}

TEST(ArachneFeatures, DatasheetValuesPartialNodesAndClusterOrder) {
  const GpuCatalog catalog = GpuCatalog::load_default();
  // Three full A100 nodes, one A100 node left with 4 GPUs, two V100 nodes: listed in two orders.
  const Cluster a = parse_cluster_spec("A100-80:3x8,A100-80:1x4,V100-32:2x8", catalog);
  const Cluster b = parse_cluster_spec("V100-32:2x8,A100-80:1x4,A100-80:3x8", catalog);
  const ModelConfig model = test::small_gpt_model(64);  // bf16
  const RequestFeatures fa = request_features(a, {"A100-80", "V100-32"}, model, 64);
  const RequestFeatures fb = request_features(b, {"A100-80", "V100-32"}, model, 64);
  EXPECT_EQ(fa.group, fb.group);
  EXPECT_EQ(fa.global, fb.global);
  ASSERT_EQ(fa.groups, 2);
  ASSERT_EQ(fa.group.size(), 2u * kGroupFeatures);
  ASSERT_EQ(fa.global.size(), static_cast<size_t>(kGlobalFeatures));

  EXPECT_FLOAT_EQ(fa.group_at(0, GroupFeature::LogGpus), std::log2(28.0f));
  EXPECT_FLOAT_EQ(fa.group_at(0, GroupFeature::LogNodes), 2.0f);
  EXPECT_FLOAT_EQ(fa.group_at(0, GroupFeature::LogLargestNode), 3.0f);
  EXPECT_FLOAT_EQ(fa.group_at(0, GroupFeature::LogPartialNodes), 1.0f);  // log2(1 + 1)
  EXPECT_FLOAT_EQ(fa.group_at(1, GroupFeature::LogPartialNodes), 0.0f);
  EXPECT_FLOAT_EQ(fa.group_at(0, GroupFeature::GpuShare) + fa.group_at(1, GroupFeature::GpuShare), 1.0f);
  EXPECT_NEAR(fa.group_at(0, GroupFeature::FlopShare) + fa.group_at(1, GroupFeature::FlopShare), 1.0f, 1e-6);
  // NVIDIA datasheets: A100 SXM 312 TFLOP/s dense bf16, 80 GB, ~2.0 TB/s; V100 has no bf16, so a bf16 model
  // runs at its 125 TFLOP/s fp16 rate.
  EXPECT_NEAR(std::exp2(fa.group_at(0, GroupFeature::LogPeakTflops)), 312.0, 1.0);
  EXPECT_NEAR(std::exp2(fa.group_at(1, GroupFeature::LogPeakTflops)), 125.0, 1.0);
  EXPECT_NEAR(std::exp2(fa.group_at(0, GroupFeature::LogMemoryGib)), 80e9 / (1 << 30), 1.0);
  EXPECT_NEAR(std::exp2(fa.group_at(0, GroupFeature::LogHbmTbps)), 2.0, 0.1);
  // The A100 group's compute share: 28 x 312 of 28 x 312 + 16 x 125 TFLOP/s.
  EXPECT_NEAR(fa.group_at(0, GroupFeature::FlopShare), 28 * 312.0 / (28 * 312.0 + 16 * 125.0), 0.01);

  EXPECT_FLOAT_EQ(fa.global_at(GlobalFeature::LogTotalGpus), std::log2(44.0f));
  EXPECT_FLOAT_EQ(fa.global_at(GlobalFeature::GpuTypes), 2.0f);
  EXPECT_FLOAT_EQ(fa.global_at(GlobalFeature::LogGlobalBatch), 6.0f);
  EXPECT_FLOAT_EQ(fa.global_at(GlobalFeature::Moe), 0.0f);
  EXPECT_FLOAT_EQ(fa.global_at(GlobalFeature::LogLayers), std::log2(static_cast<float>(model.layers)));
  const RequestFeatures moe = request_features(a, {"A100-80", "V100-32"}, test::small_moe_model(64), 64);
  EXPECT_FLOAT_EQ(moe.global_at(GlobalFeature::Moe), 1.0f);
  EXPECT_FLOAT_EQ(moe.global_at(GlobalFeature::LogExperts), std::log2(1.0f + test::small_moe_model(64).moe->experts));

  EXPECT_THROW(request_features(a, {"A100-80"}, model, 64), std::invalid_argument);
  EXPECT_THROW(request_features(a, {"A100-80", "V100-32", "V100-32"}, model, 64), std::invalid_argument);
  EXPECT_THROW(request_features(a, {"A100-80", "V100-32"}, model, 0), std::invalid_argument);
}

TEST(ArachnePolicyWeights, FileRoundTripAndCorruptionIsBadInput) {
  const PolicyWeights w = random_weights(toy::shape(), 3);
  const fs::path path = fs::temp_directory_path() / ("arachne_policy_" + std::to_string(::getpid()) + ".bin");
  write_policy_weights(path.string(), w);
  const PolicyWeights r = read_policy_weights(path.string());
  EXPECT_EQ(r.shape, w.shape);
  EXPECT_EQ(r.tensors, w.tensors);
  EXPECT_EQ(fs::file_size(path), 8 + 4 * (8 + 4) + 4 + 8 +
                                     [&] {
                                       size_t n = 0;
                                       for (const ParameterSpec& p : policy_parameters(w.shape))
                                         n += 4 + p.name.size() + 4 + 8 * p.dims.size();
                                       return n;
                                     }() + 4 * static_cast<size_t>(parameter_count(w.shape)));

  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  auto rewrite = [&](const std::string& b) { std::ofstream(path, std::ios::binary) << b; };
  std::string flipped = bytes;
  flipped[bytes.size() / 2] ^= 0x10;  // one bit in a weight
  rewrite(flipped);
  EXPECT_THROW(read_policy_weights(path.string()), InputError);
  rewrite(bytes.substr(0, bytes.size() - 100));
  EXPECT_THROW(read_policy_weights(path.string()), InputError);
  fs::remove(path);
  EXPECT_THROW(read_policy_weights(path.string()), InputError);

  PolicyWeights missing = w;
  missing.tensors.erase("gru.weight_hh");
  EXPECT_THROW(PolicyNet{missing}, std::invalid_argument);
}

// The network's affine layers give the bits of a plain scalar sum in column order, whichever clone the CPU
// runs (AVX2 where it has it) and whatever the tail of the vector width: random shapes of 1-70 rows and
// columns, values of mixed signs and magnitudes (so that a sum in another order would differ in the last bits).
TEST(ArachnePolicyNet, AffineByColumnsIsTheScalarSumBitForBit) {
  std::mt19937_64 rng(11);
  std::uniform_int_distribution<int> size(1, 70);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  long differing_orders = 0;  // shapes where summing rows last to first gives other bits: the test can see order
  for (int trial = 0; trial < 200; ++trial) {
    const int in = size(rng), out = size(rng);
    std::vector<float> wt(static_cast<size_t>(in) * out), b(out), x(in);
    for (float& v : wt) v = value(rng) * std::exp2(static_cast<float>(static_cast<int>(rng() % 16) - 8));
    for (float& v : b) v = value(rng);
    for (float& v : x) v = value(rng);
    std::vector<float> y(out);
    affine_by_columns(wt.data(), b.data(), in, out, x.data(), y.data());
    for (int i = 0; i < out; ++i) {
      float want = b[i], reversed = b[i];
      for (int j = 0; j < in; ++j) {
        volatile float term = wt[static_cast<size_t>(j) * out + i] * x[j];  // no fused multiply-add
        want += term;
      }
      for (int j = in - 1; j >= 0; --j) {
        volatile float term = wt[static_cast<size_t>(j) * out + i] * x[j];
        reversed += term;
      }
      ASSERT_EQ(y[i], want) << "trial " << trial << " in " << in << " out " << out << " row " << i;
      differing_orders += reversed != want ? 1 : 0;
    }
  }
  EXPECT_GT(differing_orders, 100);
}

TEST(ArachnePolicyNet, TypeTokensFollowTheirGroupUnderAnyGroupOrder) {
  const PolicyNet net(random_weights(toy::shape(), 5));
  std::mt19937_64 rng(11);
  const RequestFeatures f = toy::random_features(3, rng);
  // The same request with groups 0 and 2 swapped, and every sequence's Type0 and Type2 swapped with them.
  RequestFeatures g = f;
  for (int i = 0; i < toy::kGroupFeatures; ++i) std::swap(g.group[i], g.group[2 * toy::kGroupFeatures + i]);
  auto swap_types = [](std::vector<int> s) {
    for (int& id : s) id = id == toy::kType0 ? toy::kType0 + 2 : id == toy::kType0 + 2 ? toy::kType0 : id;
    return s;
  };
  const std::vector<DecodedSequence> all = enumerate(net, f, toy::Grammar(3));
  double spread = 0;
  for (const DecodedSequence& s : all) {
    const double swapped = net.log_prob(g, GrammarAdapter<toy::Grammar>(toy::Grammar(3)), swap_types(s.tokens));
    EXPECT_NEAR(swapped, s.log_prob, 1e-4);
    spread = std::max(spread, std::abs(s.log_prob - all[0].log_prob));
  }
  EXPECT_GT(spread, 1.0);  // the sequences do have different probabilities: the check is not vacuous
}

TEST(ArachnePolicyNet, MaskedProbabilitiesSumToOneAndAWideBeamIsExact) {
  const PolicyNet net(random_weights(toy::shape(), 7));
  std::mt19937_64 rng(13);
  const RequestFeatures f = toy::random_features(3, rng);
  std::vector<DecodedSequence> all = enumerate(net, f, toy::Grammar(3));
  ASSERT_EQ(all.size(), 12u + 12u * 12u);  // one or two (Type, Count) pairs, 3 types x 4 counts each
  double total = 0;
  for (const DecodedSequence& s : all) total += std::exp(s.log_prob);
  EXPECT_NEAR(total, 1.0, 1e-9);

  std::sort(all.begin(), all.end(), [](const DecodedSequence& a, const DecodedSequence& b) {
    return a.log_prob != b.log_prob ? a.log_prob > b.log_prob : a.tokens < b.tokens;
  });
  const std::vector<DecodedSequence> beam = net.beam(f, toy::Grammar(3), static_cast<int>(all.size()));
  ASSERT_EQ(beam.size(), all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(beam[i].tokens, all[i].tokens) << "rank " << i;
    EXPECT_NEAR(beam[i].log_prob, all[i].log_prob, 1e-9);
  }
  // A narrow beam: valid, most probable first, each score the sequence's own log-probability.
  const std::vector<DecodedSequence> narrow = net.beam(f, toy::Grammar(3), 4);
  ASSERT_EQ(narrow.size(), 4u);
  for (size_t i = 0; i < narrow.size(); ++i) {
    EXPECT_NEAR(narrow[i].log_prob, net.log_prob(f, GrammarAdapter<toy::Grammar>(toy::Grammar(3)), narrow[i].tokens), 1e-9);
    if (i > 0) {
      EXPECT_GE(narrow[i - 1].log_prob, narrow[i].log_prob);
    }
  }
  EXPECT_EQ(narrow[0].tokens, all[0].tokens);  // holds here: checked against the enumeration
}

TEST(ArachnePolicyNet, SamplingFollowsTheMaskedProbabilities) {
  const PolicyNet net(random_weights(toy::shape(), 9));
  std::mt19937_64 rng(17);
  const RequestFeatures f = toy::random_features(2, rng);
  const toy::Grammar start(2, 1);  // one pair: 2 types x 4 counts = 8 sequences
  const std::vector<DecodedSequence> all = enumerate(net, f, start);
  ASSERT_EQ(all.size(), 8u);
  constexpr int kDraws = 20000;
  std::map<std::vector<int>, int> seen;
  std::mt19937_64 draw(23);
  for (int i = 0; i < kDraws; ++i) {
    const DecodedSequence s = net.sample(f, GrammarAdapter<toy::Grammar>(start), draw);
    ++seen[s.tokens];
  }
  for (const DecodedSequence& s : all) {
    const double p = std::exp(s.log_prob);
    // Binomial count: within 5 standard deviations (a false alarm has probability < 1e-6 per sequence).
    EXPECT_NEAR(seen[s.tokens], kDraws * p, 5 * std::sqrt(kDraws * p * (1 - p)) + 1) << "p = " << p;
  }
  // Same generator state, same sequences.
  std::mt19937_64 r1(99), r2(99);
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(net.sample(f, GrammarAdapter<toy::Grammar>(start), r1).tokens,
              net.sample(f, GrammarAdapter<toy::Grammar>(start), r2).tokens);
  }
}

// A sample that the step limit stops before the grammar completes comes back marked incomplete (the policy
// gradient penalises it) with the masks along its tokens still available; a complete one is marked complete.
TEST(ArachnePolicyNet, ASampleStoppedByTheStepLimitIsMarkedIncomplete) {
  const PolicyNet net(random_weights(toy::shape(), 9));
  std::mt19937_64 rng(17);
  const RequestFeatures f = toy::random_features(2, rng);
  const toy::Grammar start(2, 50);  // after Bos, a type and a count, Eos or another pair: never done in 2 steps
  std::mt19937_64 draw(5);
  const DecodedSequence cut = net.sample(f, GrammarAdapter<toy::Grammar>(start), draw, 2);
  EXPECT_FALSE(cut.complete);
  ASSERT_EQ(cut.tokens.size(), 3u);  // Bos and two drawn tokens
  EXPECT_EQ(allowed_along(start, cut.tokens, toy::kBos, /*prefix=*/true).size(), 2u);
  EXPECT_THROW(allowed_along(start, cut.tokens, toy::kBos), std::invalid_argument);
  const DecodedSequence whole = net.sample(f, GrammarAdapter<toy::Grammar>(toy::Grammar(2, 1)), draw, 3);
  EXPECT_TRUE(whole.complete);  // Bos, type, count, Eos: three steps
  EXPECT_EQ(whole.tokens.back(), toy::kEos);
}

TEST(ArachnePolicyNet, BeamOverTheTokenGrammarGivesDistinctTemplatesTheClusterHolds) {
  const Cluster cluster = parse_cluster_spec("A100-80:2x8,H100:1x8,V100-32:2x4,T4:1x4", GpuCatalog::load_default());
  const ModelConfig model = test::small_gpt_model(64);
  const PolicyNet net(random_weights(template_policy_shape(), 21));
  const RequestFeatures f = request_features(cluster, model, 64);
  ASSERT_EQ(f.groups, 4);
  const std::vector<std::string> order = type_order(cluster);
  const std::vector<DecodedSequence> best = net.beam(f, TokenGrammar(cluster, model), 8);
  ASSERT_EQ(best.size(), 8u);
  std::map<std::string, int> gpus;
  for (const Node& n : cluster.nodes) gpus[cluster.groups[n.group].gpu] += n.gpus;
  std::set<Template> seen;
  for (size_t i = 0; i < best.size(); ++i) {
    const Template t = decode(best[i].tokens, order);
    EXPECT_TRUE(seen.insert(t).second) << "template " << i << " repeated";
    for (const auto& [type, used] : t.gpus_by_type()) EXPECT_LE(used, gpus.at(type)) << type;
    EXPECT_NEAR(best[i].log_prob, net.log_prob(f, GrammarAdapter<TokenGrammar>(TokenGrammar(cluster, model)), best[i].tokens),
                1e-9);
    if (i > 0) {
      EXPECT_GE(best[i - 1].log_prob, best[i].log_prob);
    }
  }
}

}  // namespace
}  // namespace arachne::planner
