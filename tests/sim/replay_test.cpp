// Replay over availability traces: exact accounting of planning, reconfiguration, checkpoints and lost
// work (fixed planning time for exactness), waiting when nothing is feasible, caching and determinism.
#include <gtest/gtest.h>

#include "tests/sim/test_support.h"

#include <cmath>

#include "sim/exec/simulate.h"
#include "sim/plan/plan_yaml.h"
#include "sim/trace/replay.h"

namespace arachne {
namespace {

ModelConfig small_model() { return test::small_gpt_model(32); }

// Pure data parallelism over every available GPU (at least `min_gpus`, and dividing the batch).
ReplanCallback data_parallel(const ModelConfig& m, int min_gpus = 1) {
  return [m, min_gpus](const Cluster& snap, long gb, const LastPlan&) {
    ReplanOutcome o;
    o.planning_time_s = 0.25;
    int n = snap.total_gpus();
    while (n > 0 && gb % n != 0) --n;
    if (n < min_gpus) {
      o.reason = "too few GPUs";
      return o;
    }
    Shorthand s;
    s.dp = n;
    s.micro_batch = static_cast<int>(gb / n);
    s.global_batch = gb;
    o.plan = plan_from_shorthand(s, snap, m);
    return o;
  };
}

AvailabilityTrace trace_of(std::vector<TraceEvent> events, double end, int nodes = 1, int capacity = 8) {
  AvailabilityTrace t;
  t.source = "test";
  for (int i = 0; i < nodes; ++i) t.nodes.push_back({"n" + std::to_string(i), "A100-80", capacity});
  t.events = std::move(events);
  t.end_s = end;
  return t;
}

double tokens_per_s_on(const AvailabilityTrace& t, double at, const ModelConfig& m) {
  const GpuCatalog cat = GpuCatalog::load_default();
  const Cluster snap = snapshot_cluster(t, t.snapshot(at), cat, nullptr);
  const Plan p = *data_parallel(m)(snap, m.global_batch, LastPlan{}).plan;
  const Topology topo(snap);
  return simulate_iteration(snap, topo, m, p, SimOptions{}).tokens_per_s;
}

// The planner is told the plan the job ran last (its warm start), also when a snapshot seen before came
// from the cache in between: 8 GPUs, then 4, then 8 again (cached: no call), then 2. At the last call the
// job runs the 8-GPU plan, not the 4-GPU plan the planner returned last.
TEST(Replay, CallbackIsGivenThePlanTheJobRanLastEvenAfterACachedSnapshot) {
  const ModelConfig m = small_model();
  const AvailabilityTrace t = trace_of({{0, 0, 8}, {100, 0, 4}, {200, 0, 8}, {300, 0, 2}}, 400);
  std::vector<int> last_gpus;  // per call: GPUs of the plan the callback is given (0: none)
  std::vector<int> last_snapshot_gpus;
  const ReplanCallback dp = data_parallel(m);
  const ReplanCallback recording = [&](const Cluster& snap, long gb, const LastPlan& last) {
    EXPECT_EQ(last.plan == nullptr, last.cluster == nullptr);
    last_gpus.push_back(last.plan ? last.plan->num_gpus() : 0);
    last_snapshot_gpus.push_back(last.cluster ? last.cluster->total_gpus() : 0);
    return dp(snap, gb, last);
  };
  ReplayOptions o;
  o.fixed_planning_s = 1;
  o.switch_rule = SwitchRule::Always;  // at t = 200 the job takes the 8-GPU plan again
  const ReplayResult r = replay(t, GpuCatalog::load_default(), m, m.global_batch, recording, o);
  EXPECT_EQ(r.totals.replans, 4);
  EXPECT_EQ(last_gpus, (std::vector<int>{0, 8, 8}));  // calls at t = 0, 100, 300 (t = 200 is cached)
  EXPECT_EQ(last_snapshot_gpus, (std::vector<int>{0, 8, 8}));
}

// Four GPUs on node 0 from t = 0; node 1's four join at t = 100. The data-parallel plan on 8 GPUs trains
// faster; switching costs C = a checkpoint save (the job has trained since its start) + the
// reconfiguration (checkpoint load + 60 s restart). Under BreakEven the job keeps its 4-GPU plan
// for C v8 / (v8 - v4) seconds after the replan, then switches (the interval is split there); if node 1
// leaves before that, it never switches and never reconfigures. Under Always it switches at once, and
// loses the work since the switch when node 1 leaves.
TEST(Replay, SwitchesToABetterPlanOnceWaitingHasCostAsMuchAsSwitching) {
  const ModelConfig m = small_model();
  const ReplanCallback dp = data_parallel(m);
  ReplayOptions o;
  o.fixed_planning_s = 1;
  auto run = [&](double leave, SwitchRule rule) {
    std::vector<TraceEvent> events{{0, 0, 4}, {0, 1, 0}, {100, 1, 4}};
    if (leave > 0) events.push_back({leave, 1, 0});
    const AvailabilityTrace t = trace_of(events, 5000, 2, 4);
    o.switch_rule = rule;
    return replay(t, GpuCatalog::load_default(), m, m.global_batch, dp, o);
  };
  const ReplayResult stays = run(0, SwitchRule::BreakEven);
  ASSERT_EQ(stays.intervals.size(), 3u);
  const double v4 = stays.intervals[0].tokens_per_s, v8 = stays.intervals[2].tokens_per_s;
  ASSERT_GT(v8, v4);
  const double cost = checkpoint_bytes(m) / o.storage_bandwidth + (checkpoint_bytes(m) / o.storage_bandwidth + o.restart_s);
  const double wait = cost * v8 / (v8 - v4);
  EXPECT_EQ(stays.intervals[1].gpus_used, 4);
  EXPECT_EQ(stays.intervals[1].reconfig_s, 0);
  EXPECT_NEAR(stays.intervals[1].end_s, 100 + 1 + wait, 1e-9);
  EXPECT_NEAR(stays.intervals[2].start_s, stays.intervals[1].end_s, 0);
  EXPECT_EQ(stays.intervals[2].gpus_used, 8);
  EXPECT_NEAR(stays.intervals[2].reconfig_s + stays.intervals[2].checkpoint_s, cost, 1e-9);

  const ReplayResult brief = run(100 + wait / 2, SwitchRule::BreakEven);  // node 1 leaves before break-even
  for (const ReplayInterval& iv : brief.intervals) EXPECT_EQ(iv.gpus_used, 4);
  EXPECT_EQ(brief.totals.reconfig_s + brief.totals.work_lost_s, 0);

  const ReplayResult always = run(100 + wait / 2, SwitchRule::Always);
  ASSERT_EQ(always.intervals.size(), 3u);
  EXPECT_EQ(always.intervals[1].gpus_used, 8);
  EXPECT_GT(always.intervals[1].reconfig_s, o.restart_s);
  EXPECT_GT(always.totals.work_lost_s, 0);
}

// A job whose GPUs all remain keeps training when the planner finds nothing on the new snapshot.
TEST(Replay, KeepsItsPlanWhenTheNewSnapshotHasNoFeasiblePlanButItsGpusRemain) {
  const ModelConfig m = small_model();
  const ReplanCallback dp = data_parallel(m);
  const ReplanCallback fails_above_four = [&](const Cluster& snap, long gb, const LastPlan& last) {
    if (snap.total_gpus() > 4) return ReplanOutcome{};
    return dp(snap, gb, last);
  };
  const AvailabilityTrace t = trace_of({{0, 0, 4}, {0, 1, 0}, {1000, 1, 4}}, 2000, 2, 4);
  ReplayOptions o;
  o.fixed_planning_s = 1;
  const ReplayResult kept = replay(t, GpuCatalog::load_default(), m, m.global_batch, fails_above_four, o);
  ASSERT_EQ(kept.intervals.size(), 2u);
  EXPECT_EQ(kept.intervals[1].idle_s, 0);
  EXPECT_NEAR(kept.intervals[1].tokens, kept.intervals[0].tokens_per_s * 999, 1e-6 * kept.intervals[1].tokens);
}

TEST(Replay, NoChangeTrainsThroughputTimesDurationMinusPlanning) {
  const ModelConfig m = small_model();
  const AvailabilityTrace t = trace_of({{0, 0, 8}}, 3600);
  ReplayOptions o;
  o.fixed_planning_s = 10;
  const ReplayResult r = replay(t, GpuCatalog::load_default(), m, m.global_batch, data_parallel(m), o);
  const double tps = tokens_per_s_on(t, 0, m);
  EXPECT_NEAR(r.totals.tokens_trained, tps * (3600 - 10), 1e-9 * tps * 3600);
  EXPECT_EQ(r.totals.replans, 1);
  EXPECT_EQ(r.totals.planning_s, 10);
  EXPECT_EQ(r.totals.reconfig_s + r.totals.checkpoint_s + r.totals.idle_s + r.totals.work_lost_s, 0);
}

TEST(Replay, LosingGpusChargesPlanningPlusReconfigurationAndLosesWorkSinceCheckpoint) {
  const ModelConfig m = small_model();
  // 8 GPUs until t = 1000, then 4: the data-parallel job used all 8, so GPUs it uses disappear.
  const AvailabilityTrace t = trace_of({{0, 0, 8}, {1000, 0, 4}}, 2000);
  ReplayOptions o;
  o.fixed_planning_s = 10;
  o.checkpoint_interval_s = 300;
  o.storage_bandwidth = 2e9;
  o.restart_s = 60;
  const ReplayResult r = replay(t, GpuCatalog::load_default(), m, m.global_batch, data_parallel(m), o);
  ASSERT_EQ(r.intervals.size(), 2u);
  const double save = checkpoint_bytes(m) / o.storage_bandwidth;
  // First interval: 10 s planning, then cycles of 300 s training + one save, until t = 1000.
  double left = 1000 - 10, since = 0;
  while (left > 0) {
    const double step = std::min(left, 300 - since);
    since += step;
    left -= step;
    if (since >= 300 && left > 0) left -= std::min(save, left), since = 0;
  }
  EXPECT_NEAR(r.intervals[0].work_lost_s, since, 1e-9);
  EXPECT_NEAR(r.intervals[1].planning_s, 10, 1e-12);
  EXPECT_NEAR(r.intervals[1].reconfig_s, save + 60, 1e-9);  // checkpoint load + restart
  EXPECT_EQ(r.intervals[1].checkpoint_s > 0, true);         // periodic saves go on after the restart
  // The tokens kept in the first interval are those trained up to its last checkpoint.
  const double tps = tokens_per_s_on(t, 0, m);
  EXPECT_NEAR(r.intervals[0].tokens, tps * (990 - since - 3 * save), 1e-6 * tps * 1000);
}

TEST(Replay, JobWaitsWhenNothingIsFeasibleAndRestartsWhenGpusReturn) {
  const ModelConfig m = small_model();
  const AvailabilityTrace t = trace_of({{0, 0, 8}, {100, 0, 2}, {200, 0, 8}}, 300);
  ReplayOptions o;
  o.fixed_planning_s = 1;
  const ReplayResult r = replay(t, GpuCatalog::load_default(), m, m.global_batch, data_parallel(m, 4), o);
  ASSERT_EQ(r.intervals.size(), 3u);
  EXPECT_NEAR(r.intervals[1].idle_s, 99, 1e-9);
  EXPECT_EQ(r.intervals[1].tokens, 0);
  EXPECT_GT(r.intervals[2].reconfig_s, 0);  // a restart after waiting
  EXPECT_EQ(r.totals.simulations, 2);       // the 8-GPU snapshot is simulated once
}

TEST(Replay, CoalescedChangesReplanOnceAndResultsAreDeterministic) {
  const ModelConfig m = small_model();
  const AvailabilityTrace t = trace_of({{0, 0, 8}, {0, 1, 8}, {100, 1, 0}, {101, 1, 8}}, 500, 2);
  ReplayOptions o;
  o.fixed_planning_s = 2;
  o.coalesce_s = 5;
  const ReplayResult a = replay(t, GpuCatalog::load_default(), m, m.global_batch, data_parallel(m), o);
  EXPECT_EQ(a.totals.replans, 2);  // t = 0 and t = 100 (101 merged into 100)
  const ReplayResult b = replay(t, GpuCatalog::load_default(), m, m.global_batch, data_parallel(m), o);
  EXPECT_EQ(a.totals.tokens_trained, b.totals.tokens_trained);
  EXPECT_EQ(a.totals.work_lost_s, b.totals.work_lost_s);
}

// Two nodes of 8 GPUs: n0 stays, n1 leaves every 600 s for 150 s (six hours). Data parallelism over every
// GPU offered uses n1 whenever it is there, so under PoolRule::All each of its departures loses the work
// since the last checkpoint (saved when n1 returns); under PoolRule::Stable the job also plans on n0 alone
// and, once n1's departures are on record, runs that plan: it trains more, loses less, and from the
// second hour on never uses n1.
TEST(Replay, StablePoolLeavesAVolatileNodeIdleWhenItsDeparturesCostMoreThanItAdds) {
  const ModelConfig m = small_model();
  std::vector<TraceEvent> ev{{0, 0, 8}, {0, 1, 8}};
  for (double t = 450; t < 6 * 3600; t += 600) ev.push_back({t, 1, 0}), ev.push_back({t + 150, 1, 8});
  const AvailabilityTrace trace = trace_of(ev, 6 * 3600, 2);
  ReplayOptions o;
  o.fixed_planning_s = 1;
  o.checkpoint_interval_s = 1800;
  o.volatility_window_s = 3600;
  const ReplayResult all = replay(trace, GpuCatalog::load_default(), m, m.global_batch, data_parallel(m), o);
  o.pool_rule = PoolRule::Stable;
  const ReplayResult stable = replay(trace, GpuCatalog::load_default(), m, m.global_batch, data_parallel(m), o);
  EXPECT_GT(stable.totals.tokens_trained, 1.5 * all.totals.tokens_trained);
  EXPECT_LT(stable.totals.work_lost_s, 0.2 * all.totals.work_lost_s);
  for (const ReplayInterval& iv : stable.intervals)
    if (iv.start_s >= 3600) {
      EXPECT_EQ(iv.gpus_used, 8) << "at " << iv.start_s;
    }
}

// Without departures the stable pool rule offers the one pool and changes nothing.
TEST(Replay, StablePoolChangesNothingWhenNoNodeLeaves) {
  const ModelConfig m = small_model();
  const AvailabilityTrace trace = trace_of({{0, 0, 8}, {1000, 1, 8}, {2000, 1, 8}}, 3000, 2);
  ReplayOptions o;
  o.fixed_planning_s = 1;
  o.checkpoint_interval_s = 300;
  const ReplayResult all = replay(trace, GpuCatalog::load_default(), m, m.global_batch, data_parallel(m), o);
  o.pool_rule = PoolRule::Stable;
  const ReplayResult stable = replay(trace, GpuCatalog::load_default(), m, m.global_batch, data_parallel(m), o);
  EXPECT_EQ(stable.totals.tokens_trained, all.totals.tokens_trained);
  EXPECT_EQ(stable.totals.planning_s, all.totals.planning_s);
  EXPECT_EQ(stable.totals.replans, all.totals.replans);
}

}  // namespace
}  // namespace arachne
