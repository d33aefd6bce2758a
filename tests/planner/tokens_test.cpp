// The token form of templates (planner/template/tokens.h): the vocabulary, encode/decode, and the grammar
// that masks decoding. The grammar is checked both ways against template_problem (template.h), which is
// written independently (per-type first-fit packing rather than the grammar's count condition): every walk
// of allowed tokens ends in a runnable template, and every runnable template of the token space is accepted.
#include "planner/template/tokens.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "sim/io/input_error.h"
#include "tests/sim/test_support.h"

namespace arachne::planner {
namespace {

Cluster spec(const std::string& s) { return parse_cluster_spec(s, GpuCatalog::load_default()); }

int id(TokenKind k, int v = 0) { return token_id({k, v}); }

std::vector<int> ids_of(const std::vector<Token>& ts) {
  std::vector<int> out;
  for (const Token& t : ts) out.push_back(token_id(t));
  return out;
}

TEST(Tokens, VocabularyIsABijectionWithUniqueNames) {
  // Bos, Eos, Pipeline, Stage + 8 types + 4 TP widths + 32 counts + 8 EP widths + 2 scopes + Uneven.
  EXPECT_EQ(vocabulary_size(), 4 + kMaxGpuTypes + 4 + 32 + 8 + 2 + 1);
  std::set<std::string> names;
  for (int i = 0; i < vocabulary_size(); ++i) {
    EXPECT_EQ(token_id(token_of(i)), i);
    names.insert(token_name(token_of(i)));
  }
  EXPECT_EQ(static_cast<int>(names.size()), vocabulary_size());
  EXPECT_EQ(token_name({TokenKind::Scope, static_cast<int>(EpScope::Stage)}), "Scope:stage");
  EXPECT_EQ(token_name({TokenKind::Count, 12}), "Count12");
  EXPECT_THROW(token_id({TokenKind::Tp, 3}), std::invalid_argument);
  EXPECT_THROW(token_id({TokenKind::Count, 17}), std::invalid_argument);
  EXPECT_THROW(token_of(vocabulary_size()), std::invalid_argument);
}

TEST(Tokens, TypeOrderIsSortedAndBounded) {
  const std::vector<std::string> expected{"A100-80", "T4", "V100-32"};
  EXPECT_EQ(type_order(spec("V100-32:1x4,A100-80:1x8,T4:2x1,A100-80:1x2")), expected);
  EXPECT_THROW(type_order(spec("P100:1x1,V100-16:1x1,V100-32:1x1,T4:1x1,A10:1x1,A10G:1x1,L4:1x1,L40S:1x1,A100-40:1x1")),
               InputError);
}

TEST(Tokens, EncodeOrdersClassesByDecreasingBodyAndDecodeInverts) {
  const std::vector<std::string> order{"A100-80", "V100-32"};
  const Template t = parse_template("2x[A100-80:tp4x2 | V100-32:tp2x1]; 1x[A100-80:tp8x1]");
  const auto ids = encode(t, order);
  ASSERT_TRUE(ids);
  // Bodies start Stage Tp8 ... and Stage Tp4 ...: the Tp8 class has the larger body and comes first.
  using K = TokenKind;
  const std::vector<int> expected = ids_of({{K::Bos}, {K::Pipeline}, {K::Count, 1}, {K::Stage}, {K::Tp, 8}, {K::Type, 0}, {K::Count, 1},
                                            {K::Pipeline}, {K::Count, 2}, {K::Stage}, {K::Tp, 4}, {K::Type, 0}, {K::Count, 2},
                                            {K::Stage}, {K::Tp, 2}, {K::Type, 1}, {K::Count, 1}, {K::Eos}});
  EXPECT_EQ(*ids, expected);
  EXPECT_EQ(decode(*ids, order), t);
}

TEST(Tokens, EncodeHasNoFormForCountsWidthsOrTypesOutsideTheVocabulary) {
  const std::vector<std::string> order{"A100-80"};
  EXPECT_FALSE(encode(parse_template("17x[A100-80:tp1x1]"), order));
  EXPECT_FALSE(encode(parse_template("1x[A100-80:tp16x1]"), order));
  EXPECT_FALSE(encode(parse_template("1x[T4:tp1x1]"), order));
  EXPECT_FALSE(encode(parse_template("1x[A100-80:tp1x1 ep3/stage]"), order));
  EXPECT_TRUE(encode(parse_template("1024x[A100-80:tp1x1]"), order));
}

TEST(Tokens, DecodeRejectsBrokenSequences) {
  const std::vector<std::string> order{"A100-80"};
  using K = TokenKind;
  EXPECT_THROW(decode(ids_of({{K::Pipeline}, {K::Count, 1}, {K::Stage}, {K::Tp, 1}, {K::Type, 0}, {K::Count, 1}, {K::Eos}}), order),
               std::invalid_argument);  // no Bos
  EXPECT_THROW(decode(ids_of({{K::Bos}, {K::Pipeline}, {K::Count, 1}, {K::Stage}, {K::Tp, 1}, {K::Eos}}), order),
               std::invalid_argument);  // a stage without kinds
  EXPECT_THROW(decode(ids_of({{K::Bos}, {K::Pipeline}, {K::Count, 1}, {K::Stage}, {K::Tp, 1}, {K::Type, 1}, {K::Count, 1}, {K::Eos}}), order),
               std::invalid_argument);  // Type1 with one type
  EXPECT_THROW(decode(ids_of({{K::Bos}, {K::Pipeline}, {K::Count, 1}, {K::Stage}, {K::Tp, 1}, {K::Type, 0}, {K::Count, 1}}), order),
               std::invalid_argument);  // no Eos
  EXPECT_THROW(decode(ids_of({{K::Bos}, {K::Pipeline}, {K::Count, 1}, {K::Stage}, {K::Tp, 1}, {K::Type, 0}, {K::Count, 1}, {K::Ep, 2},
                              {K::Eos}}),
                      order),
               std::invalid_argument);  // Ep without Scope
}

// ------------------------------------------------------------------ the grammar, by hand

std::vector<int> allowed_after(const Cluster& c, const ModelConfig& m, const std::vector<Token>& prefix) {
  TokenGrammar g(c, m);
  for (const Token& t : prefix) g.push(token_id(t));
  return g.allowed();
}

std::vector<int> sorted_ids(const std::vector<Token>& ts) {
  std::vector<int> ids = ids_of(ts);
  std::sort(ids.begin(), ids.end());
  return ids;
}

// One node of two A100s, a dense 8-layer model with 16 heads.
TEST(TokenGrammar, HandDerivedMasksOnTwoGpus) {
  using K = TokenKind;
  const Cluster c = spec("A100-80:1x2");
  const ModelConfig m = test::small_gpt_model(16);
  EXPECT_EQ(allowed_after(c, m, {}), sorted_ids({{K::Bos}}));
  EXPECT_EQ(allowed_after(c, m, {{K::Bos}}), sorted_ids({{K::Pipeline}}));
  // Replicas: at most the 2 GPUs.
  EXPECT_EQ(allowed_after(c, m, {{K::Bos}, {K::Pipeline}}), sorted_ids({{K::Count, 1}, {K::Count, 2}}));
  // Two replicas: each stage takes 2 x tp x groups GPUs, so only tp1 x1, then nothing is left.
  const std::vector<Token> two{{K::Bos}, {K::Pipeline}, {K::Count, 2}, {K::Stage}};
  EXPECT_EQ(allowed_after(c, m, two), sorted_ids({{K::Tp, 1}}));
  EXPECT_EQ(allowed_after(c, m, {two[0], two[1], two[2], two[3], {K::Tp, 1}, {K::Type, 0}}), sorted_ids({{K::Count, 1}}));
  EXPECT_EQ(allowed_after(c, m, {two[0], two[1], two[2], two[3], {K::Tp, 1}, {K::Type, 0}, {K::Count, 1}}), sorted_ids({{K::Eos}}));
  // One replica: tp 1 or 2 (the node has 2 GPUs; 4 does not fit).
  const std::vector<Token> one{{K::Bos}, {K::Pipeline}, {K::Count, 1}, {K::Stage}};
  EXPECT_EQ(allowed_after(c, m, one), sorted_ids({{K::Tp, 1}, {K::Tp, 2}}));
  std::vector<Token> p = one;
  p.insert(p.end(), {{K::Tp, 1}, {K::Type, 0}});
  EXPECT_EQ(allowed_after(c, m, p), sorted_ids({{K::Count, 1}, {K::Count, 2}}));
  p.push_back({K::Count, 1});
  // One GPU left: another stage, or the end. A second class would need a body below [tp1 x1] on one GPU:
  // none exists (its only body would equal this one, which is the 2-replica template).
  EXPECT_EQ(allowed_after(c, m, p), sorted_ids({{K::Eos}, {K::Stage}}));
  p.insert(p.end(), {{K::Stage}, {K::Tp, 1}, {K::Type, 0}, {K::Count, 1}});
  EXPECT_EQ(allowed_after(c, m, p), sorted_ids({{K::Eos}}));
}

// An MoE model (8 experts) on 4 GPUs: the EP widths that divide the stage's GPUs or the replicas.
TEST(TokenGrammar, HandDerivedEpMasks) {
  using K = TokenKind;
  const ModelConfig m = test::small_moe_model(16);
  const Cluster c = spec("A100-80:1x4");
  const std::vector<Token> p{{K::Bos}, {K::Pipeline}, {K::Count, 2}, {K::Stage}, {K::Tp, 1}, {K::Type, 0}, {K::Count, 2}};
  // 4 GPUs used; ep 2 divides the stage's 2 GPUs and the 2 replicas, ep 4 neither.
  EXPECT_EQ(allowed_after(c, m, p), sorted_ids({{K::Eos}, {K::Ep, 2}}));
  std::vector<Token> q = p;
  q.push_back({K::Ep, 2});
  EXPECT_EQ(allowed_after(c, m, q),
            sorted_ids({{K::Scope, static_cast<int>(EpScope::Pipelines)}, {K::Scope, static_cast<int>(EpScope::Stage)}}));
  q.push_back({K::Scope, static_cast<int>(EpScope::Stage)});
  EXPECT_EQ(allowed_after(c, m, q), sorted_ids({{K::Eos}}));  // one type: uneven would change nothing

  // Two types in one stage, EP ranks = its two TP groups: Uneven is offered.
  const Cluster h = spec("A100-80:1x2,V100-32:1x2");
  const std::vector<Token> u{{K::Bos},     {K::Pipeline}, {K::Count, 1}, {K::Stage},
                             {K::Tp, 1},   {K::Type, 0},  {K::Count, 1}, {K::Type, 1},
                             {K::Count, 1}, {K::Ep, 2},   {K::Scope, static_cast<int>(EpScope::Stage)}};
  // One A100 and one V100 left: another stage; or a second class, whose body can end below this one's
  // (a one-kind stage [tp1 A100 x1] stops where this body goes on with the V100 kind).
  EXPECT_EQ(allowed_after(h, m, u), sorted_ids({{K::Eos}, {K::Pipeline}, {K::Stage}, {K::Uneven}}));
}

TEST(TokenGrammar, PushRejectsATokenOutsideTheMask) {
  TokenGrammar g(spec("A100-80:1x2"), test::small_gpt_model(16));
  EXPECT_THROW(g.push(id(TokenKind::Eos)), std::invalid_argument);
  g.push(id(TokenKind::Bos));
  g.push(id(TokenKind::Pipeline));
  EXPECT_THROW(g.push(id(TokenKind::Count, 3)), std::invalid_argument);
  EXPECT_FALSE(g.finished());
}

// ------------------------------------------------------------------ the grammar against template_problem

struct Case {
  std::string cluster;
  bool moe;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> c{{"A100-80:1x8", false},
                                   {"A100-80:1x8", true},
                                   {"A100-80:2x8,V100-32:2x4", false},
                                   {"A100-80:2x8,V100-32:2x4", true},
                                   {"A100-80:1x8,A100-80:1x2,V100-32:3x4,T4:5x1", false},
                                   {"A100-80:1x4,V100-32:1x2,T4:3x1", true},
                                   {"A100-80:4x8,V100-32:8x4,T4:16x1", false}};
  return c;
}

ModelConfig model_of(const Case& c) { return c.moe ? test::small_moe_model(64) : test::small_gpt_model(64); }

TEST(TokenGrammar, RandomWalksEndInRunnableTemplatesWithOneSequenceEach) {
  for (const Case& k : cases()) {
    const Cluster c = spec(k.cluster);
    const ModelConfig m = model_of(k);
    const std::vector<std::string> order = type_order(c);
    std::mt19937_64 rng(3);
    for (int n = 0; n < 150; ++n) {
      TokenGrammar g(c, m);
      while (!g.finished()) {
        const std::vector<int> ok = g.allowed();
        ASSERT_FALSE(ok.empty()) << k.cluster << ": dead end after " << g.tokens().size() << " tokens";
        g.push(ok[std::uniform_int_distribution<size_t>(0, ok.size() - 1)(rng)]);
      }
      const Template t = decode(g.tokens(), order);
      EXPECT_EQ(template_problem(t, c, m), "") << k.cluster << ": " << to_text(t);
      const auto again = encode(t, order);
      ASSERT_TRUE(again) << to_text(t);
      EXPECT_EQ(*again, g.tokens()) << k.cluster << ": " << to_text(t);
    }
  }
}

// Random templates over the cluster's types: the grammar accepts the token form exactly when the template
// is runnable (the canonical conventions of tokens.h aside: uneven only where it changes the placement).
Template random_template(std::mt19937_64& rng, const std::vector<std::string>& types, bool moe, int max_count) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto count = [&] {
    int v;
    do v = kCounts[pick(0, static_cast<int>(kCounts.size()) - 1)];
    while (v > max_count);
    return v;
  };
  Template t;
  for (int i = pick(1, 3); i > 0; --i) {
    PipelineTemplate p;
    p.replicas = pick(0, 1) ? 1 : count();
    for (int j = pick(1, 4); j > 0; --j) {
      StageTemplate s;
      s.tp = kTpWidths[pick(0, 3)];
      std::vector<std::string> shuffled = types;
      std::shuffle(shuffled.begin(), shuffled.end(), rng);
      for (int q = std::min(pick(1, 2), static_cast<int>(types.size())); q > 0; --q)
        s.kinds.push_back({shuffled[q - 1], pick(0, 1) ? 1 : count()});
      if (moe && pick(0, 1)) {
        s.ep = kEpWidths[pick(1, 4)];
        s.ep_scope = pick(0, 1) ? EpScope::Stage : EpScope::Pipelines;
      }
      p.stages.push_back(s);
    }
    t.pipelines.push_back(p);
  }
  t = canonical(t);
  for (PipelineTemplate& p : t.pipelines)
    for (StageTemplate& s : p.stages)
      s.uneven_experts = s.ep > 1 && s.ep_scope == EpScope::Stage && s.ep == s.tp_groups() && s.kinds.size() > 1 && pick(0, 1);
  return canonical(t);
}

bool grammar_accepts(const Cluster& c, const ModelConfig& m, const std::vector<int>& ids) {
  TokenGrammar g(c, m);
  for (const int i : ids) {
    const std::vector<int> ok = g.allowed();
    if (!std::binary_search(ok.begin(), ok.end(), i)) return false;
    g.push(i);
  }
  return g.finished();
}

TEST(TokenGrammar, AcceptsExactlyTheRunnableTemplates) {
  for (const Case& k : cases()) {
    const Cluster c = spec(k.cluster);
    const ModelConfig m = model_of(k);
    const std::vector<std::string> order = type_order(c);
    std::mt19937_64 rng(9);
    int runnable = 0, not_runnable = 0;
    for (int n = 0; n < 3000; ++n) {
      const Template t = random_template(rng, order, k.moe, c.total_gpus());
      const auto ids = encode(t, order);
      if (!ids) continue;  // merged replicas outside kCounts
      const bool ok = template_problem(t, c, m).empty();
      (ok ? runnable : not_runnable)++;
      EXPECT_EQ(grammar_accepts(c, m, *ids), ok) << k.cluster << ": " << to_text(t) << " problem: " << template_problem(t, c, m);
    }
    EXPECT_GE(runnable, 10) << k.cluster;  // both sides of the boundary are exercised
    EXPECT_GE(not_runnable, 10) << k.cluster;
  }
}

TEST(TokenGrammar, CopiesAreIndependent) {
  TokenGrammar a(spec("A100-80:1x8"), test::small_gpt_model(16));
  a.push(id(TokenKind::Bos));
  a.push(id(TokenKind::Pipeline));
  TokenGrammar b = a;
  b.push(id(TokenKind::Count, 8));
  a.push(id(TokenKind::Count, 1));
  EXPECT_EQ(a.tokens().back(), id(TokenKind::Count, 1));
  EXPECT_EQ(b.allowed(), sorted_ids({{TokenKind::Stage}}));
  EXPECT_EQ(a.state().replicas, 1);
  EXPECT_EQ(b.state().replicas, 8);
}

}  // namespace
}  // namespace arachne::planner
