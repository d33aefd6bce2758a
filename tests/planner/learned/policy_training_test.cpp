// The Torch policy network: its parameters are the listed ones; the plain-C++ inference reproduces its
// logits from exported weights; training is deterministic under a seed, resumes bit-identically from a
// checkpoint, and learns: imitation on a toy task (name the group with the largest first feature, then a
// count read off that group's second feature) drives the loss down and the exported network's beam decodes the labels of unseen
// requests; REINFORCE raises the probability of rewarded sequences.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>

#include "planner/arachne/policy_net.h"
#include "planner/learned/training.h"
#include "tests/planner/policy_toy.h"

namespace arachne::learned {
namespace {

namespace fs = std::filesystem;
using planner::DecodedSequence;
using planner::GrammarAdapter;
using planner::PolicyWeights;
using planner::RequestFeatures;
namespace toy = planner::toy;

// One request per sequence, padded, with the masks of the toy grammar allowing `max_pairs` pairs.
PolicyBatch make_batch(const std::vector<RequestFeatures>& features, const std::vector<std::vector<int>>& sequences,
                       int max_pairs = 2) {
  const int64_t b = static_cast<int64_t>(features.size());
  int64_t groups = 0, steps = 0;
  for (size_t i = 0; i < features.size(); ++i) {
    groups = std::max<int64_t>(groups, features[i].groups);
    steps = std::max<int64_t>(steps, static_cast<int64_t>(sequences[i].size()) - 1);
  }
  PolicyBatch batch;
  batch.group_x = torch::zeros({b, groups, toy::kGroupFeatures});
  batch.group_count = torch::zeros({b}, torch::kLong);
  batch.global_x = torch::zeros({b, toy::kGlobalFeatures});
  batch.tokens = torch::full({b, steps + 1}, toy::kBos, torch::kLong);
  batch.lengths = torch::zeros({b}, torch::kLong);
  batch.allowed = torch::zeros({b, steps, toy::kVocabulary}, torch::kBool);
  for (int64_t i = 0; i < b; ++i) {
    const RequestFeatures& f = features[i];
    for (int k = 0; k < f.groups; ++k)
      for (int j = 0; j < toy::kGroupFeatures; ++j) batch.group_x[i][k][j] = f.group[k * toy::kGroupFeatures + j];
    for (int j = 0; j < toy::kGlobalFeatures; ++j) batch.global_x[i][j] = f.global[j];
    batch.group_count[i] = f.groups;
    batch.lengths[i] = static_cast<int64_t>(sequences[i].size());
    for (size_t t = 0; t < sequences[i].size(); ++t) batch.tokens[i][static_cast<int64_t>(t)] = sequences[i][t];
    const auto masks = planner::allowed_along(toy::Grammar(f.groups, max_pairs), sequences[i], toy::kBos);
    for (size_t t = 0; t < masks.size(); ++t)
      for (int id : masks[t]) batch.allowed[i][static_cast<int64_t>(t)][id] = true;
  }
  return batch;
}

// The toy task: `n` random requests of 1..4 groups with their labels.
std::pair<std::vector<RequestFeatures>, std::vector<std::vector<int>>> toy_task(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<RequestFeatures> f;
  std::vector<std::vector<int>> labels;
  for (int i = 0; i < n; ++i) {
    f.push_back(toy::random_features(1 + static_cast<int>(rng() % toy::kMaxGroups), rng));
    labels.push_back(toy::label(f.back()));
  }
  return {f, labels};
}

bool same_parameters(PolicyNet& a, PolicyNet& b) { return export_weights(a).tensors == export_weights(b).tensors; }

std::string temp_file(const std::string& stem) {
  return (fs::temp_directory_path() / (stem + std::to_string(::getpid()))).string();
}

TEST(PolicyTraining, ParametersAreTheListedOnes) {
  PolicyTrainer t(toy::shape(), TrainOptions{});
  const auto params = t.net()->named_parameters();
  const auto specs = planner::policy_parameters(toy::shape());
  ASSERT_EQ(params.size(), specs.size());
  int64_t count = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    EXPECT_EQ(params[i].key(), specs[i].name);
    EXPECT_EQ(params[i].value().sizes().vec(), specs[i].dims) << specs[i].name;
    count += params[i].value().numel();
  }
  EXPECT_EQ(count, planner::parameter_count(toy::shape()));
}

TEST(PolicyTraining, PlainInferenceReproducesTorchLogits) {
  // Weights of a larger scale than the initialiser's (N(0, 0.4^2): pre-activations of several units, the
  // GRU's gates partly saturated) and random token sequences, not only grammatical ones: the two forward
  // passes must agree everywhere.
  constexpr int kRequests = 6, kMaxLength = 15;
  PolicyTrainer t(toy::shape(24, 12, 40), TrainOptions{5});
  {
    torch::NoGradGuard no_grad;
    torch::manual_seed(6);
    for (auto& p : t.net()->parameters()) p.normal_(0.0, 0.4);
  }
  std::mt19937_64 rng(8);
  std::vector<RequestFeatures> features;
  std::vector<std::vector<int>> sequences;
  PolicyBatch batch;
  batch.group_x = torch::zeros({kRequests, toy::kMaxGroups, toy::kGroupFeatures});
  batch.group_count = torch::zeros({kRequests}, torch::kLong);
  batch.global_x = torch::zeros({kRequests, toy::kGlobalFeatures});
  batch.tokens = torch::zeros({kRequests, kMaxLength}, torch::kLong);  // padding: Bos
  for (int i = 0; i < kRequests; ++i) {
    const int groups = 1 + i % toy::kMaxGroups;
    features.push_back(toy::random_features(groups, rng));
    std::vector<int> s{toy::kBos};
    const int length = 3 + static_cast<int>(rng() % (kMaxLength - 3));
    while (static_cast<int>(s.size()) < length) {
      const int id = 1 + static_cast<int>(rng() % (toy::kVocabulary - 1));
      const bool absent_type = id >= toy::kType0 && id < toy::kType0 + toy::kMaxGroups && id - toy::kType0 >= groups;
      if (!absent_type) s.push_back(id);
    }
    sequences.push_back(s);
    for (int k = 0; k < groups; ++k)
      for (int j = 0; j < toy::kGroupFeatures; ++j) batch.group_x[i][k][j] = features[i].group[k * toy::kGroupFeatures + j];
    for (int j = 0; j < toy::kGlobalFeatures; ++j) batch.global_x[i][j] = features[i].global[j];
    batch.group_count[i] = groups;
    for (size_t p = 0; p < s.size(); ++p) batch.tokens[i][static_cast<int64_t>(p)] = s[p];
  }
  torch::Tensor torch_logits;
  {
    torch::NoGradGuard no_grad;
    torch_logits = t.net()->logits(batch);
  }
  // Through the weights file, as the planner reads them.
  const std::string path = temp_file("arachne_policy_export_");
  planner::write_policy_weights(path, export_weights(t.net()));
  const planner::PolicyNet plain = planner::PolicyNet::load(path);
  fs::remove(path);
  // Float32 forward passes that sum in different orders differ by a few units in the last place of the
  // larger terms (2^-24 = 6e-8 relative per rounding, ~100 terms per dot product): 1e-5 of the logit's
  // size (at least 1) bounds that with a wide margin, and any real difference of the two definitions
  // (a missing bias, a swapped gate) is of the order of the logits themselves.
  double worst = 0, largest = 0;
  int compared = 0;
  for (int i = 0; i < kRequests; ++i) {
    const std::vector<std::vector<float>> rows = plain.logits(features[i], sequences[i]);
    for (size_t s = 0; s < rows.size(); ++s)
      for (int v = 0; v < toy::kVocabulary; ++v) {
        const float a = torch_logits[i][static_cast<int64_t>(s)][v].item<float>(), b = rows[s][v];
        if (std::isinf(a) || std::isinf(b)) {
          EXPECT_EQ(a, b) << "request " << i << " step " << s << " token " << v;
          continue;
        }
        worst = std::max(worst, std::abs(a - b) / std::max(1.0, std::abs(static_cast<double>(a))));
        largest = std::max(largest, static_cast<double>(std::abs(a)));
        ++compared;
      }
  }
  std::printf("plain vs Torch: max |difference| / max(1, |logit|) = %.3g over %d logits (largest |logit| %.3g)\n",
              worst, compared, largest);
  EXPECT_LE(worst, 1e-5);
  EXPECT_GT(compared, 300);
  EXPECT_GT(largest, 1.0);  // logits of a realistic size, not all near zero
}

TEST(PolicyTraining, SameSeedSameWeightsAndCheckpointsResumeExactly) {
  const auto [features, labels] = toy_task(32, 1);
  const PolicyBatch batch = make_batch(features, labels);
  const TrainOptions o{42, 1, 1e-2, 1.0};
  PolicyTrainer a(toy::shape(), o), b(toy::shape(), o), c(toy::shape(), TrainOptions{43, 1, 1e-2, 1.0});
  for (int i = 0; i < 10; ++i) {
    a.imitation_step(batch);
    b.imitation_step(batch);
    c.imitation_step(batch);
  }
  EXPECT_TRUE(same_parameters(a.net(), b.net()));
  EXPECT_FALSE(same_parameters(a.net(), c.net()));

  // Ten more steps straight, or after a save and a load: the same bits (optimiser state included).
  const std::string path = temp_file("arachne_policy_ckpt_");
  b.save(path);
  std::unique_ptr<PolicyTrainer> resumed = PolicyTrainer::load(path);
  fs::remove(path);
  EXPECT_EQ(resumed->steps(), 10);
  EXPECT_TRUE(same_parameters(a.net(), resumed->net()));
  for (int i = 0; i < 10; ++i) {
    a.imitation_step(batch);
    resumed->imitation_step(batch);
  }
  EXPECT_TRUE(same_parameters(a.net(), resumed->net()));
  EXPECT_THROW(PolicyTrainer::load("/nonexistent/policy.pt"), std::runtime_error);
}

// A learning rate set on a running trainer is the one its next steps take (the same bits as a trainer made
// with it), and a checkpoint keeps it.
TEST(PolicyTraining, ASetLearningRateTakesEffectAndIsCheckpointed) {
  const auto [features, labels] = toy_task(32, 1);
  const PolicyBatch batch = make_batch(features, labels);
  PolicyTrainer fast(toy::shape(), TrainOptions{42, 1, 1e-2, 1.0}), slowed(toy::shape(), TrainOptions{42, 1, 1e-2, 1.0}),
      set(toy::shape(), TrainOptions{42, 1, 1e-2, 1.0}), made_slow(toy::shape(), TrainOptions{42, 1, 1e-4, 1.0});
  set.set_learning_rate(1e-4);
  for (int i = 0; i < 5; ++i) {
    fast.imitation_step(batch);
    set.imitation_step(batch);
    made_slow.imitation_step(batch);
  }
  EXPECT_TRUE(same_parameters(set.net(), made_slow.net()));
  EXPECT_FALSE(same_parameters(set.net(), fast.net()));
  EXPECT_EQ(set.options().learning_rate, 1e-4);

  // Five steps at 1e-2, then the rate lowered: a save and a load keep the lowered rate for the next steps.
  for (int i = 0; i < 5; ++i) slowed.imitation_step(batch);
  slowed.set_learning_rate(1e-4);
  const std::string path = temp_file("arachne_policy_lr_");
  slowed.save(path);
  std::unique_ptr<PolicyTrainer> resumed = PolicyTrainer::load(path);
  fs::remove(path);
  EXPECT_EQ(resumed->options().learning_rate, 1e-4);
  for (int i = 0; i < 5; ++i) {
    slowed.imitation_step(batch);
    resumed->imitation_step(batch);
  }
  EXPECT_TRUE(same_parameters(slowed.net(), resumed->net()));
  EXPECT_THROW(slowed.set_learning_rate(0), std::invalid_argument);
  EXPECT_THROW(slowed.set_learning_rate(std::nan("")), std::invalid_argument);
}

TEST(PolicyTraining, ImitationLearnsTheToyTaskAndTheExportDecodesIt) {
  // A fresh batch of 128 requests at every step (seeded), so that the policy learns the rule rather than the
  // examples; the loss is measured on a fixed batch it never trains on.
  const auto [eval_features, eval_labels] = toy_task(256, 2);
  const PolicyBatch eval = make_batch(eval_features, eval_labels);
  PolicyTrainer t(toy::shape(), TrainOptions{7, 1, 1e-2, 1.0});
  const double initial = t.imitation_loss(eval);
  const auto start = std::chrono::steady_clock::now();
  constexpr int kSteps = 250;  // ~2 s on an idle core
  for (int step = 0; step < kSteps; ++step) {
    const auto [features, labels] = toy_task(128, 100 + step);
    t.imitation_step(make_batch(features, labels));
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double final_loss = t.imitation_loss(eval);
  std::printf("toy imitation: held-out loss %.4f -> %.4f in %d steps, %.1f s\n", initial, final_loss, kSteps, seconds);
  // Chance level: the mean over the three steps of log(allowed choices) = (log 2.5 + log 4 + log 3.5) / 3
  // for 1..4 groups; a loss under 15 % of the start means the policy found the rule, not the prior.
  EXPECT_GT(initial, 0.5);
  EXPECT_LT(final_loss, 0.15 * initial);

  // Other unseen requests: the exported network's best beam sequence is the label.
  const planner::PolicyNet plain(export_weights(t.net()));
  const auto [test_features, test_labels] = toy_task(100, 3);
  int right = 0;
  for (size_t i = 0; i < test_features.size(); ++i) {
    const std::vector<DecodedSequence> best = plain.beam(test_features[i], toy::Grammar(test_features[i].groups), 4);
    right += !best.empty() && best[0].tokens == test_labels[i] ? 1 : 0;
  }
  std::printf("toy imitation: %d/100 unseen requests decoded to their label\n", right);
  EXPECT_GE(right, 85);  // near-ties of the first feature leave a few hard cases
}

TEST(PolicyTraining, PolicyGradientRaisesTheProbabilityOfRewardedSequences) {
  // One request with three groups; reward 1 when the sampled sequence names group 2, else 0.
  std::mt19937_64 rng(4);
  const RequestFeatures f = toy::random_features(3, rng);
  const toy::Grammar grammar(3, 1);
  PolicyTrainer t(toy::shape(), TrainOptions{9, 1, 1e-2, 1.0});
  auto p_rewarded = [&] {
    const planner::PolicyNet plain(export_weights(t.net()));
    double p = 0;
    for (int c = 0; c < 4; ++c)
      p += std::exp(plain.log_prob(f, GrammarAdapter<toy::Grammar>(grammar),
                                   {toy::kBos, toy::kType0 + 2, toy::kCount1 + c, toy::kEos}));
    return p;
  };
  const double before = p_rewarded();
  std::mt19937_64 draw(5);
  for (int step = 0; step < 40; ++step) {
    const planner::PolicyNet plain(export_weights(t.net()));
    std::vector<RequestFeatures> fs;
    std::vector<std::vector<int>> seqs;
    std::vector<double> rewards;
    for (int i = 0; i < 16; ++i) {
      const DecodedSequence s = plain.sample(f, GrammarAdapter<toy::Grammar>(grammar), draw);
      fs.push_back(f);
      seqs.push_back(s.tokens);
      rewards.push_back(s.tokens[1] == toy::kType0 + 2 ? 1.0 : 0.0);
    }
    t.policy_gradient_step(make_batch(fs, seqs, 1), torch::tensor(rewards, torch::kDouble),
                           torch::zeros({16}, torch::kLong));
  }
  const double after = p_rewarded();
  std::printf("policy gradient: p(rewarded) %.3f -> %.3f\n", before, after);
  EXPECT_GT(after, before + 0.3);
}

}  // namespace
}  // namespace arachne::learned
