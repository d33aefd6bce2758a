// The oracle's lower bound (planner/oracle/lower_bound.h) is admissible: on random valid plans - several
// clusters and GPU types, tp 1-4, stage-level data parallelism with uneven integer shares, uneven layer
// partitions, every recompute level, ZeRO-1, dense and MoE models with EP - it never exceeds the simulated
// iteration time, and whenever it proves a plan out of memory the simulator reports it out of memory. The
// plans come from tests/planner/oracle_test_plans.h and tests/planner/random_plans.h, both written
// independently of the oracle's enumeration.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "planner/common/plan_builder.h"
#include "planner/oracle/lower_bound.h"
#include "sim/exec/simulate.h"
#include "sim/hw/cluster.h"
#include "sim/hw/topology.h"
#include "sim/plan/plan_yaml.h"
#include "tests/planner/oracle_test_plans.h"
#include "tests/planner/random_plans.h"
#include "tests/sim/test_support.h"

namespace arachne::planner {
namespace {

// A plan's pipeline as pipeline_bound takes it: its stage ends after 0, and per stage its groups' node group,
// tp and samples per micro-batch.
struct PipelineLayout {
  std::vector<int> cuts{0};
  std::vector<std::vector<LowerBound::LayoutGroup>> groups;
};
PipelineLayout layout_of(const Pipeline& pl, const Cluster& c) {
  PipelineLayout out;
  for (const Stage& st : pl.stages) {
    out.cuts.push_back(st.layer_end);
    out.groups.emplace_back();
    for (const TpGroup& g : st.groups) out.groups.back().push_back({c.nodes[c.node_of(g.gpus.front())].group, g.tp, pl.micro_batch * g.share});
  }
  return out;
}

struct Tally {
  int simulated = 0, oom_proofs = 0;
  int raised = 0;       // plans whose bound the gradient-reduction tail raised by more than 1 %
  double tightest = 0;  // largest bound / simulated time seen
  int lifted = 0;       // pipelines whose placement-free bound the reduction floor raised by more than 1 %
  int work_checked = 0; // groups whose work bound was checked
  int transfers = 0;    // plans whose bound the pipeline transfers raised by more than 1 %
  int stages_checked = 0;  // stages of several groups whose water-filling work bound was checked
  int pipelines_checked = 0;     // pipelines whose PipelineRates bound was checked
  int pipeline_rate_raised = 0;  // of several stages, whose pipeline rate exceeds the all-workers average by 1 %
  int size_aware_raised = 0;     // groups whose size-aware work bound exceeds the one at the best size by 1 %
  int caps_checked = 0;          // pipelines whose sample cap was checked
  int round_trip = 0;            // plans whose bound the last micro-batch's round trip raised by more than 1 %
  int prefixes_checked = 0;      // partial pipelines whose bound was checked against their completion's
  int spread_plans = 0;          // plans whose reduction was also bounded over every spread (placement_free)
  int spread_buckets = 0;        // buckets whose floor over every spread was checked against the plan's own
  int spread_lifted = 0;         // pipelines whose bound over every spread the reduction raised by more than 1 %
};

// The bound of every partial pipeline the search prunes on (exhaustive_search.cpp: stages 0..k, a prefix of
// stage k's groups, m_lo <= m micro-batches) is below the simulated time of this completion, and at most the
// bound of the complete pipeline but for the engine's rounding slack, which the complete pipeline's longer
// round trips take more of (4 ns per later stage): a branch is cut only when every completion's bound reaches
// the incumbent.
void check_partial_pipelines(const Cluster& c, const LowerBound& lb, const Plan& plan, double simulated, Tally& t) {
  for (const Pipeline& pl : plan.pipelines) {
    std::vector<std::vector<GroupTimes>> stages;
    for (const Stage& st : pl.stages) {
      stages.emplace_back();
      for (const TpGroup& g : st.groups)
        stages.back().push_back(lb.group_times(c.nodes[c.node_of(g.gpus.front())].group, g.tp, pl.micro_batch * g.share,
                                               st.layer_begin, st.layer_end, plan.recompute, plan.zero1));
    }
    const double whole = pipeline_lower_bound(stages, pl.micro_batches);
    for (size_t k = 0; k < stages.size(); ++k)
      for (size_t n = 1; n <= stages[k].size(); ++n) {
        std::vector<std::vector<GroupTimes>> prefix(stages.begin(), stages.begin() + static_cast<long>(k) + 1);
        prefix.back().resize(n);
        for (int m = 1; m <= pl.micro_batches; ++m) {
          const double partial = pipeline_lower_bound(prefix, m, {.complete = false});
          EXPECT_LE(partial, simulated) << plan_to_yaml(plan, c);
          EXPECT_LE(partial, whole + 4e-9 * static_cast<double>(stages.size())) << plan_to_yaml(plan, c);
          ++t.prefixes_checked;
        }
      }
  }
}

bool whole_shares(const std::vector<std::vector<LowerBound::LayoutGroup>>& groups) {
  for (const auto& st : groups)
    for (const LowerBound::LayoutGroup& g : st)
      if (g.samples != std::floor(g.samples) || g.samples < 1) return false;
  return true;
}

// The weaker per-sample rate of a pipeline: every layer at its least per-sample floor over the pipeline's
// groups, the sum shared evenly by all its workers (the search's other pipeline work bound).
double single_worker_rate(const LowerBound& lb, const std::vector<std::vector<LowerBound::LayoutGroup>>& groups,
                          Recompute rc, int L, int max_samples) {
  std::vector<double> least(L + 2, 1e300);
  int workers = 0;
  for (const auto& st : groups)
    for (const LowerBound::LayoutGroup& g : st) {
      ++workers;
      const std::vector<double>& f = lb.per_sample_floor(g.node_group, g.tp, rc, max_samples);
      for (int l = 0; l < L + 2; ++l) least[l] = std::min(least[l], f[l]);
    }
  double work = 0;
  for (const double x : least) work += x;
  return work / workers;
}

// The reduction bounded over every spread of each bucket's holders over the nodes (placement_free_floor, the
// search's reduction lift): each bucket's floor and each group's following collectives are at most those of the
// plan's own placement - one of the spreads -, and each pipeline's bound under them at most the plan's bound.
void check_spreads(const Cluster& c, const LowerBound& lb, const Plan& plan, double plan_bound,
                   const std::vector<std::vector<GpuId>>& own, Tally& t) {
  if (!lb.placement_free()) return;
  ++t.spread_plans;
  const LowerBound::ReductionFloor spread = lb.placement_free_floor(plan);
  const LowerBound::ReductionFloor placed = lb.reduction_floor(plan, {own});
  ASSERT_EQ(spread.segments.size(), placed.segments.size());
  for (const auto& [a, buckets] : spread.segments) {
    const auto& mine = placed.segments.at(a);
    ASSERT_EQ(buckets.size(), mine.size());
    for (size_t b = 0; b < buckets.size(); ++b) {
      EXPECT_LE(buckets[b].busy_s, mine[b].busy_s) << "segment " << a << " bucket " << b << "\n" << plan_to_yaml(plan, c);
      ++t.spread_buckets;
    }
  }
  for (size_t p = 0; p < spread.after.size(); ++p)
    for (size_t k = 0; k < spread.after[p].size(); ++k)
      for (size_t g = 0; g < spread.after[p][k].size(); ++g) EXPECT_LE(spread.after[p][k][g], placed.after[p][k][g]);
  const LowerBound::ReductionFloor none;
  for (size_t p = 0; p < plan.pipelines.size(); ++p) {
    const Pipeline& pl = plan.pipelines[p];
    const auto [cuts, groups] = layout_of(pl, c);
    const double b = lb.pipeline_bound(cuts, groups, pl.micro_batches, plan.recompute, plan.zero1, spread, &spread.after[p]);
    EXPECT_LE(b, plan_bound) << plan_to_yaml(plan, c);
    if (b > 1.01 * lb.pipeline_bound(cuts, groups, pl.micro_batches, plan.recompute, plan.zero1, none)) ++t.spread_lifted;
  }
}

// The floor over every spread, by hand on `A100-80:2x8` with one-stage pipelines of one TP group each (tp 1 or
// 2, 2 to 16 GPUs): every spread is c groups in node 0 and the rest in node 1, and the placements putting them
// on the lowest GPUs of each node realise each of them, so the least floor over those placements
// (reduction_floor) must equal the floor over the spreads - each bucket, bit for bit. Nine or more one-GPU
// groups (five tp-2 groups) cannot share a node: each bucket then crosses the network on every spread, and its
// floor is above that of the same buckets held by eight (four) groups, which can.
TEST(OracleLowerBound, FloorOverEverySpreadOfTheHoldersByHand) {
  const Cluster c = parse_cluster_spec("A100-80:2x8", GpuCatalog::load_default());
  const Topology topo(c);
  const ModelConfig m = test::small_gpt_model(32);
  const LowerBound lb(c, m, &topo);
  ASSERT_TRUE(lb.placement_free());
  for (const int tp : {1, 2}) {
    std::map<int, double> last_in_node;  // segment -> its last bucket's floor with every holder in one node
    for (int groups = 2; groups <= 16 / tp; ++groups) {
      std::vector<std::vector<std::vector<GpuId>>> placements;
      for (int c0 = 0; c0 <= groups; ++c0) {
        const int c1 = groups - c0;
        if (c0 * tp > 8 || c1 * tp > 8) continue;
        std::vector<std::vector<GpuId>> gpus;
        for (int g = 0; g < groups; ++g) {
          const GpuId first = g < c0 ? g * tp : 8 + (g - c0) * tp;
          gpus.emplace_back();
          for (int k = 0; k < tp; ++k) gpus.back().push_back(first + k);
        }
        placements.push_back(gpus);
      }
      std::vector<PipelineSpec> specs;
      for (int g = 0; g < groups; ++g) specs.push_back({1, 1, {{0, m.layers, {{placements.front()[g], tp, 1.0}}}}});
      const Plan plan = build_plan(specs, c, Recompute::None);
      const LowerBound::ReductionFloor spread = lb.placement_free_floor(plan);
      const LowerBound::ReductionFloor placed = lb.reduction_floor(plan, placements);
      ASSERT_EQ(spread.segments.size(), 1u);
      const auto& buckets = spread.segments.begin()->second;
      const auto& mine = placed.segments.begin()->second;
      ASSERT_EQ(buckets.size(), mine.size());
      for (size_t b = 0; b < buckets.size(); ++b) {
        EXPECT_EQ(buckets[b].busy_s, mine[b].busy_s) << groups << " groups of tp " << tp << ", bucket " << b;
        EXPECT_GT(buckets[b].busy_s, 0.0);
      }
      if (groups * tp == 8) last_in_node[0] = buckets.back().busy_s;
      if (groups * tp > 8) {
        EXPECT_GT(buckets.back().busy_s, last_in_node.at(0)) << groups << " groups of tp " << tp;
      }
    }
  }
}

// The placement-free bound of each pipeline (LowerBound::pipeline_bound under reduction_floor, as the
// oracle's search bounds options before placing them) over the plan's own placement and another one (the
// GPU lists of groups of one node group and tp exchanged at random): never above the plan's bound (hence
// the simulated time), and raised by the reduction on some pipelines. Also each group's work bound (m x s
// samples at their per-sample floor), with which the search caps a group's samples: never above the
// simulated time.
void check_placement_free(const Cluster& c, const LowerBound& lb, const Plan& plan, double plan_bound,
                          double simulated, std::mt19937_64& rng, Tally& t) {
  std::vector<std::vector<GpuId>> own, other;
  std::map<std::pair<int, int>, std::vector<size_t>> same;  // (node group, tp) -> group indices
  auto node_group = [&](const TpGroup& g) { return c.nodes[c.node_of(g.gpus.front())].group; };
  for (const Pipeline& pl : plan.pipelines)
    for (const Stage& st : pl.stages)
      for (const TpGroup& g : st.groups) {
        same[{node_group(g), g.tp}].push_back(own.size());
        own.push_back(g.gpus);
      }
  other = own;
  for (const auto& [key, idx] : same) {
    std::vector<size_t> perm = idx;
    std::shuffle(perm.begin(), perm.end(), rng);
    for (size_t i = 0; i < idx.size(); ++i) other[idx[i]] = own[perm[i]];
  }
  const LowerBound::ReductionFloor floor = lb.reduction_floor(plan, {own, other});
  const LowerBound::ReductionFloor none;  // no buckets: no tail
  for (size_t p = 0; p < plan.pipelines.size(); ++p) {
    const Pipeline& pl = plan.pipelines[p];
    const auto [cuts, groups] = layout_of(pl, c);
    const double b = lb.pipeline_bound(cuts, groups, pl.micro_batches, plan.recompute, plan.zero1, floor, &floor.after[p]);
    // The work bound the search caps each group's samples with (exhaustive_search.cpp group_room): m x s
    // samples of the stage's layers at no less than their per-sample floor each, for integer s.
    for (size_t k = 0; k < pl.stages.size(); ++k) {
      double speed = 0;  // the stage's samples per second with every group at its per-sample floor
      bool whole = true;
      for (const LowerBound::LayoutGroup& g : groups[k]) {
        if (g.samples != std::floor(g.samples) || g.samples < 1) {
          whole = false;
          continue;
        }
        const std::vector<double>& f = lb.per_sample_floor(g.node_group, g.tp, plan.recompute, static_cast<int>(g.samples));
        const int L = static_cast<int>(f.size()) - 2;
        double rate = 0;
        for (int l = cuts[k]; l < cuts[k + 1]; ++l) rate += f[l];
        if (cuts[k] == 0) rate += f[L];
        if (cuts[k + 1] == L) rate += f[L + 1];
        const double work = pl.micro_batches * g.samples * rate * (1 - 1e-9) - 4e-9 * pl.micro_batches;
        EXPECT_LE(work, simulated) << plan_to_yaml(plan, c);
        // The size-aware work bound of its m x s samples, with the optimizer step (pipeline_sample_cap's term).
        const long n = std::lround(pl.micro_batches * g.samples);
        const double sized = lb.group_work_bound(g.node_group, g.tp, n, cuts[k], cuts[k + 1], plan.recompute, plan.zero1);
        EXPECT_LE(sized, simulated) << plan_to_yaml(plan, c);
        const std::vector<double>& best = lb.per_sample_floor(g.node_group, g.tp, plan.recompute, 64);
        double at_best = 0;
        for (int l = cuts[k]; l < cuts[k + 1]; ++l) at_best += best[l];
        if (cuts[k] == 0) at_best += best[L];
        if (cuts[k + 1] == L) at_best += best[L + 1];
        if (sized > 1.01 * n * at_best) ++t.size_aware_raised;
        ++t.work_checked;
        speed += 1 / rate;
      }
      // The stage's water-filling bound (exhaustive_search.cpp StageRates): its m x b samples over its
      // groups' speeds at their floors; a stage of several groups of unequal speed or samples tests it.
      if (whole && groups[k].size() > 1) {
        const double n = static_cast<double>(pl.micro_batches) * pl.micro_batch;
        EXPECT_LE(n / speed * (1 - 1e-9) - 4e-9 * pl.micro_batches, simulated) << plan_to_yaml(plan, c);
        ++t.stages_checked;
      }
    }
    // The pipeline's work bound over every partition of its layers into its stages (PipelineRates, with which
    // the search bounds a pipeline shape per sample before choosing anything else): m x b samples at
    // pipeline_rate. It is at most the largest stage bound of the plan's own partition (the partition is one
    // of those it minimises over).
    if (whole_shares(groups)) {
      std::vector<std::vector<std::pair<int, int>>> stages;
      for (const auto& st : groups) {
        stages.emplace_back();
        for (const LowerBound::LayoutGroup& g : st) stages.back().emplace_back(g.node_group, g.tp);
      }
      const int L = static_cast<int>(cuts.back());
      const PipelineRates rates(lb, stages, plan.recompute, L, static_cast<int>(pl.micro_batch));
      const double n = static_cast<double>(pl.micro_batches) * pl.micro_batch;
      double own = 0;
      for (size_t k = 0; k < pl.stages.size(); ++k) own = std::max(own, rates.rate(static_cast<int>(k), cuts[k], cuts[k + 1]));
      EXPECT_LE(rates.pipeline_rate(), own * (1 + 1e-12));
      EXPECT_LE(PipelineRates::work_bound(n, rates.pipeline_rate(), pl.micro_batches), simulated) << plan_to_yaml(plan, c);
      ++t.pipelines_checked;
      // Its samples are within the cap of any T above the simulated time (every group ends by then).
      const double above = std::nextafter(simulated, 1e300);
      EXPECT_LE(static_cast<long>(n), pipeline_sample_cap(lb, stages, plan.recompute, plan.zero1, L, plan.global_batch(), above))
          << plan_to_yaml(plan, c);
      ++t.caps_checked;
      if (pl.stages.size() > 1 && rates.pipeline_rate() > 1.01 * single_worker_rate(lb, groups, plan.recompute, L, pl.micro_batch))
        ++t.pipeline_rate_raised;
    }
    const double compute_only = lb.pipeline_bound(cuts, groups, pl.micro_batches, plan.recompute, plan.zero1, none);
    EXPECT_LE(b, plan_bound) << plan_to_yaml(plan, c);
    if (b > 1.01 * compute_only) ++t.lifted;
  }
  check_spreads(c, lb, plan, plan_bound, own, t);
}

// Draw i of a random plan with a global batch of 1..40 - even draws from this file's generator, odd ones from
// tests/planner/random_plans.h - and its model at that batch; false when the draw is not a valid plan (e.g.
// tp that does not divide the heads).
bool draw_valid_plan(const Cluster& c, const ModelConfig& base, int i, std::mt19937_64& rng, Plan* plan, ModelConfig* m) {
  const long global = std::uniform_int_distribution<long>(1, 40)(rng);
  if (i % 2 == 0) *plan = test::draw_random_plan(c, base, global, rng);
  else if (!test::random_plan(c, base, global, rng, plan)) return false;
  *m = base;
  m->global_batch = plan->global_batch();
  try {
    validate_plan(*plan, c, *m, m->global_batch, "random");
  } catch (const std::exception&) {
    return false;
  }
  return true;
}

// Draws plans until `want` of them fit in memory (or 100 x want draws), checking each.
void check_admissible(const std::string& spec, const ModelConfig& base, int want, std::uint64_t seed, Tally& t) {
  const Cluster c = parse_cluster_spec(spec, GpuCatalog::load_default());
  const Topology topo(c);
  std::mt19937_64 rng(seed);
  const int before = t.simulated;
  for (int i = 0; i < 100 * want && t.simulated - before < want; ++i) {
    Plan plan;
    ModelConfig m;
    if (!draw_valid_plan(c, base, i, rng, &plan, &m)) continue;
    // With the topology the bound includes the gradient reduction's tail; without it, not.
    const LowerBound lb(c, m, &topo);
    const std::optional<double> bound = lb.plan_bound(plan);
    const std::optional<double> compute_only = LowerBound(c, m).plan_bound(plan);
    EXPECT_EQ(bound.has_value(), compute_only.has_value());
    const SimResult r = simulate_iteration(c, topo, m, plan, SimOptions{});
    if (!bound) {
      ++t.oom_proofs;
      EXPECT_TRUE(r.oom) << spec << ": memory proof on a plan that fits\n" << plan_to_yaml(plan, c);
      continue;
    }
    if (r.oom) continue;
    ++t.simulated;
    std::mt19937_64 shuffle(seed + 7919 * static_cast<std::uint64_t>(i));  // the plan draws stay as they were
    if (!m.moe) check_placement_free(c, lb, plan, *bound, r.iteration_time_s, shuffle, t);
    EXPECT_GE(*bound, *compute_only);
    if (*bound > 1.01 * *compute_only) ++t.raised;
    // The bound without one of its terms is never above it; `raised` counts the plans the term raised by 1 %.
    auto without_term = [&](void (LowerBound::*count)(bool), int& raised) {
      LowerBound without(c, m, &topo);
      (without.*count)(false);
      const std::optional<double> b = without.plan_bound(plan);
      ASSERT_TRUE(b.has_value());
      EXPECT_GE(*bound, *b);
      if (*bound > 1.01 * *b) ++raised;
    };
    without_term(&LowerBound::count_transfers, t.transfers);
    without_term(&LowerBound::count_round_trip, t.round_trip);
    check_partial_pipelines(c, lb, plan, r.iteration_time_s, t);
    t.tightest = std::max(t.tightest, *bound / r.iteration_time_s);
    EXPECT_LE(*bound, r.iteration_time_s) << spec << "\n" << plan_to_yaml(plan, c);
  }
}

// Reduced sizes (test::reduced_sizes(), the sanitized build): 60 random plans per cluster instead of 300,
// the counts that show the bound is not vacuous scaled alike.
TEST(OracleLowerBound, NeverAboveTheSimulatedTimeOnRandomDensePlans) {
  const int plans = test::reduced_sizes() ? 60 : 300;
  const auto scaled = [plans](int count) { return count * plans / 300; };
  Tally t;
  int seed = 1;
  for (const std::string spec : {"A100-80:1x2,V100-32:1x2", "A100-80:2x4", "H100:1x4,T4:2x1", "V100-32:4x2",
                                 "A100-40:1x4,L4:1x2", "A100-80:8x1", "H100:2x2,A100-80:2x2"})
    check_admissible(spec, test::small_gpt_model(8), plans, seed++, t);
  std::printf("[bound] dense: %d plans simulated, %d memory proofs, %d raised by the reduction tail, %d by the "
              "pipeline transfers, tightest bound/sim %.3f, %d pipelines lifted placement-free, %d pipeline rates "
              "checked (%d above the workers' average)\n", t.simulated, t.oom_proofs, t.raised, t.transfers, t.tightest,
              t.lifted, t.pipelines_checked, t.pipeline_rate_raised);
  std::printf("[bound] dense: %d raised by the last micro-batch's round trip, %d partial pipelines checked\n",
              t.round_trip, t.prefixes_checked);
  EXPECT_EQ(t.simulated, 7 * plans);  // the draws reach enough valid plans for the check to mean something
  EXPECT_GT(t.tightest, 0.5);         // and the bound is not vacuous
  EXPECT_GT(t.raised, scaled(100));   // nor is the reduction tail
  EXPECT_GT(t.lifted, scaled(100));   // nor its placement-free form
  EXPECT_GT(t.transfers, scaled(100));  // nor the pipeline transfers
  EXPECT_GT(t.round_trip, scaled(20));   // nor the round trip
  EXPECT_GT(t.prefixes_checked, scaled(1000));
  EXPECT_GT(t.work_checked, scaled(1000));
  EXPECT_GT(t.stages_checked, scaled(100));
  EXPECT_GT(t.pipelines_checked, scaled(1000));
  EXPECT_GT(t.pipeline_rate_raised, scaled(100));  // the partition-free stage bound is stronger than the average
  std::printf("[bound] dense: %d groups' size-aware work bound above the best-size one by 1 %%, %d pipeline caps checked\n",
              t.size_aware_raised, t.caps_checked);
  EXPECT_GT(t.size_aware_raised, scaled(500));  // small micro-batches run well below the best per-sample rate
  EXPECT_GT(t.caps_checked, scaled(1000));
  std::printf("[bound] dense: %d plans' reduction bounded over every spread of its holders (%d buckets checked, "
              "%d pipelines lifted by it)\n", t.spread_plans, t.spread_buckets, t.spread_lifted);
  EXPECT_GT(t.spread_plans, 4 * plans);  // the clusters the oracle searches have nodes of alike GPU pairs
  EXPECT_GT(t.spread_lifted, scaled(100));
}

TEST(OracleLowerBound, NeverAboveTheSimulatedTimeOnRandomMoePlans) {
  Tally t;
  int seed = 100;
  for (const std::string spec : {"A100-80:1x4", "A100-80:1x2,V100-32:1x2"})
    check_admissible(spec, test::small_moe_model(8), 100, seed++, t);
  std::printf("[bound] moe: %d plans simulated, tightest bound/sim %.3f\n", t.simulated, t.tightest);
  EXPECT_EQ(t.simulated, 200);
}

// Memory proofs on plans built to fail: a 16-sample micro-batch of a large model without recompute on one
// T4 is refused by the bound and by the simulator alike.
TEST(OracleLowerBound, MemoryProofAgreesWithTheSimulator) {
  const Cluster c = parse_cluster_spec("T4:1x1", GpuCatalog::load_default());
  const Topology topo(c);
  ModelConfig m = test::small_gpt_model(16);
  m.hidden = 4096;
  m.ffn_hidden = 16384;
  m.heads = 32;
  m.kv_heads = 32;
  PipelineSpec p{16, 1, {{0, m.layers, {{{0}, 1, 1.0}}}}};
  const Plan plan = build_plan({p}, c, Recompute::None);
  EXPECT_FALSE(LowerBound(c, m).plan_bound(plan).has_value());
  EXPECT_TRUE(simulate_iteration(c, topo, m, plan, SimOptions{}).oom);
}

// The coupled micro-batch caps (micro_batch_caps), with which the search admits a pipeline shape's (micro-batch
// size, count) pairs before any option: on random valid plans with integer shares, each pipeline's own end -
// the last span on its GPUs' compute streams (every worker simulated, no mirrors) - admits its (b, m) at any T
// just above it. The least T that admits it is also found by bisection, to show the caps are not vacuous: it
// exceeds the least T at which the decoupled cap (pipeline_sample_cap) admits the pipeline's samples on many
// pipelines.
// Whether micro_batch_caps at T admits m micro-batches of b samples for a pipeline with these stages.
bool lb_admits(const LowerBound& lb, const std::vector<std::vector<std::pair<int, int>>>& stages, const Plan& plan,
               int L, long G, long b, long m, double T) {
  const std::vector<long> caps = micro_batch_caps(lb, stages, plan.recompute, plan.zero1, L, G, T);
  return b < static_cast<long>(caps.size()) && m <= caps[b];
}

struct CouplingTally {
  int checked = 0, raised = 0, plans = 0;
  double tightest = 0;  // largest (least admitting T) / pipeline end
};

void check_coupled_caps(const std::string& spec, const ModelConfig& base, int want, std::uint64_t seed, CouplingTally& t) {
  const Cluster c = parse_cluster_spec(spec, GpuCatalog::load_default());
  const Topology topo(c);
  std::mt19937_64 rng(seed);
  SimOptions opt;
  opt.record_timeline = true;
  opt.exact_shortcuts = false;
  const int before = t.plans;
  for (int i = 0; i < 100 * want && t.plans - before < want; ++i) {
    Plan plan;
    ModelConfig m;
    if (!draw_valid_plan(c, base, i, rng, &plan, &m)) continue;
    const SimResult r = simulate_iteration(c, topo, m, plan, opt);
    if (r.oom) continue;
    ++t.plans;
    const LowerBound lb(c, m, &topo);
    const int L = m.layers;
    for (const Pipeline& pl : plan.pipelines) {
      std::vector<std::vector<std::pair<int, int>>> stages;
      std::set<int> gpus;
      bool whole = true;
      for (const Stage& st : pl.stages) {
        stages.emplace_back();
        for (const TpGroup& g : st.groups) {
          stages.back().emplace_back(c.nodes[c.node_of(g.gpus.front())].group, g.tp);
          gpus.insert(g.gpus.begin(), g.gpus.end());
          const double s = pl.micro_batch * g.share;
          whole = whole && std::abs(s - std::round(s)) < 1e-9 && std::round(s) >= 1;
        }
      }
      if (!whole) continue;
      double end = 0;
      for (const TimelineSpan& span : r.timeline)
        if (gpus.count(span.track)) end = std::max(end, span.start_s + span.dur_s);
      const long b = pl.micro_batch, n = b * pl.micro_batches, G = plan.global_batch();
      auto coupled = [&](double T) { return lb_admits(lb, stages, plan, L, G, b, pl.micro_batches, T); };
      EXPECT_TRUE(coupled(std::nextafter(end, 1e300))) << "pipeline ending at " << end << "\n" << plan_to_yaml(plan, c);
      ++t.checked;
      // The least T admitting it under each cap (both admit it just above its end).
      auto least = [&](const std::function<bool(double)>& admits) {
        double lo = 0, hi = std::nextafter(end, 1e300);
        for (int it = 0; it < 50; ++it) {
          const double mid = (lo + hi) / 2;
          (admits(mid) ? hi : lo) = mid;
        }
        return hi;
      };
      const double t_coupled = least(coupled);
      const double t_decoupled = least([&](double T) {
        return pipeline_sample_cap(lb, stages, plan.recompute, plan.zero1, L, G, T) >= n;
      });
      if (t_coupled > 1.01 * t_decoupled) ++t.raised;
      t.tightest = std::max(t.tightest, t_coupled / end);
    }
  }
}

TEST(OracleLowerBound, CoupledMicroBatchCapsAdmitEverySimulatedPipeline) {
  const int plans = test::reduced_sizes() ? 40 : 150;
  CouplingTally t;
  int seed = 300;
  for (const std::string spec : {"A100-80:1x2,V100-32:1x2", "A100-80:2x4", "H100:1x4,T4:2x1", "A100-40:1x4,L4:1x2",
                                 "A100-80:8x1"})
    check_coupled_caps(spec, test::small_gpt_model(8), plans, seed++, t);
  check_coupled_caps("A100-80:1x2,V100-32:1x2", test::small_moe_model(8), plans / 3, seed++, t);
  check_coupled_caps("A100-80:2x4", load_model("gpt3-1.3b"), plans / 6, seed++, t);
  std::printf("[bound] coupled caps: %d pipelines of %d plans checked, %d admitted only above 1.01x the decoupled "
              "cap's least time, tightest least time / pipeline end %.3f\n", t.checked, t.plans, t.raised, t.tightest);
  EXPECT_GT(t.checked, 5 * plans);
  EXPECT_GT(t.raised, t.checked / 10);  // the coupling is stronger than the decoupled cap on many pipelines
  EXPECT_GT(t.tightest, 0.5);
}

// A model whose gradient buckets are Megatron-sized (40M parameters, one layer each) and whose reduction
// across nodes takes a visible part of the iteration: the bucket schedule and link loads are exercised.
TEST(OracleLowerBound, NeverAboveTheSimulatedTimeWithLargeGradientBuckets) {
  Tally t;
  int seed = 200;
  for (const std::string spec : {"H100:1x4,A100-80:1x2,V100-32:1x2", "A100-80:8x1", "A100-80:2x4"})
    check_admissible(spec, load_model("gpt3-1.3b"), 40, seed++, t);
  std::printf("[bound] gpt3-1.3b: %d plans simulated, %d raised by the reduction tail, %d by the pipeline "
              "transfers, tightest bound/sim %.3f, %d pipelines lifted placement-free; %d plans' reduction bounded "
              "over every spread (%d buckets checked, %d pipelines lifted by it)\n", t.simulated, t.raised,
              t.transfers, t.tightest, t.lifted, t.spread_plans, t.spread_buckets, t.spread_lifted);
  EXPECT_EQ(t.simulated, 120);
  EXPECT_GT(t.raised, 10);
  EXPECT_GT(t.transfers, 3);
  EXPECT_GT(t.lifted, 10);
  EXPECT_GT(t.spread_lifted, 10);
}

// The round trip by hand, on a pipeline of two stages with one micro-batch: stage 0 has a slow group A
// (forward 1 s, backward 2 s) and a fast one (0.1 s, 0.2 s), stage 1 one group (3 s, 4 s); every step 0.5 s,
// no transfers. Under 1F1B (as the simulator runs it) A's forward ends at 1, stage 1's forward waits for both
// groups' activations and runs 1-4, its backward 4-8, A's backward 8-10, its step 10-10.5: the iteration ends
// at 10.5, which the bound reaches. Without the round trip the best term is stage 1's: the fast group's
// forward, stage 1's passes, the fast group's backward and a step, 0.1 + 7 + 0.2 + 0.5 = 7.8.
TEST(OracleLowerBound, RoundTripOfTheLastMicroBatchByHand) {
  auto group = [](double f, double b) {
    GroupTimes g;
    g.forward_s = f;
    g.backward_s = b;
    g.optimizer_s = 0.5;
    return g;
  };
  const std::vector<std::vector<GroupTimes>> stages = {{group(1, 2), group(0.1, 0.2)}, {group(3, 4)}};
  EXPECT_NEAR(pipeline_lower_bound(stages, 1), 10.5, 1e-6);
  EXPECT_NEAR(pipeline_lower_bound(stages, 1, {.round_trip = false}), 7.8, 1e-6);
  // A partial pipeline (stage 0 only, or stage 1 with its groups so far) counts no stage that may still
  // change: A's term is then its own passes and step.
  EXPECT_NEAR(pipeline_lower_bound({stages[0]}, 1, {.complete = false}), 3.5, 1e-6);
  EXPECT_NEAR(pipeline_lower_bound(stages, 1, {.complete = false}), 7.8, 1e-6);
  // Two micro-batches: A runs F0 0-1, F1 1-2, then waits for B0's gradients (stage 1: F0 1-4, B0 4-8,
  // F1 8-11, B1 11-15): B0 8-10, B1 15-17, step to 17.5. A's term: 2 x 3 s of passes, then the round trip of
  // 7 s beyond the one backward (2 s) it runs meanwhile, then its step: 11.5; stage 1's term 14.8.
  EXPECT_NEAR(pipeline_lower_bound(stages, 2), 14.8, 1e-6);
  EXPECT_LE(pipeline_lower_bound(stages, 2), 17.5);
}

}  // namespace
}  // namespace arachne::planner
