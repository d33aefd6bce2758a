// Event engine: (time, insertion order) ordering, lazy cancellation, re-entrant scheduling, determinism.
#include "sim/core/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <tuple>
#include <vector>

namespace arachne {
namespace {

TEST(EngineTest, RunsByTimeThenInsertionOrder) {
  // Expectation (DESIGN.md, Engine): events run in increasing time; equal times in insertion order.
  Engine e;
  std::vector<std::string> log;
  e.schedule_at(30, [&] { log.push_back("c30"); });
  e.schedule_at(10, [&] { log.push_back("a10"); });
  e.schedule_at(20, [&] { log.push_back("b20"); });
  e.schedule_at(10, [&] { log.push_back("a10'"); });
  e.schedule_at(10, [&] { log.push_back("a10''"); });
  e.schedule_at(0, [&] { log.push_back("z0"); });
  EXPECT_EQ(e.pending(), 6u);
  e.run();
  EXPECT_EQ(log, (std::vector<std::string>{"z0", "a10", "a10'", "a10''", "b20", "c30"}));
  EXPECT_EQ(e.now(), 30);
  EXPECT_EQ(e.executed(), 6u);
  EXPECT_EQ(e.pending(), 0u);
  EXPECT_FALSE(e.step());
}

TEST(EngineTest, CancelledEventsNeverRunAndAreNotCounted) {
  Engine e;
  std::vector<int> log;
  const EventId a = e.schedule_at(5, [&] { log.push_back(1); });
  const EventId b = e.schedule_at(5, [&] { log.push_back(2); });
  e.schedule_at(7, [&] { log.push_back(3); });
  e.cancel(b);
  EXPECT_EQ(e.pending(), 2u);
  e.cancel(b);  // twice: no-op
  EXPECT_EQ(e.pending(), 2u);
  e.run();
  EXPECT_EQ(log, (std::vector<int>{1, 3}));
  EXPECT_EQ(e.executed(), 2u);
  e.cancel(a);  // already ran: no-op
  EXPECT_EQ(e.pending(), 0u);
}

TEST(EngineTest, StaleIdDoesNotCancelAnEventThatReusedItsSlot) {
  // Slots are recycled; an id of an event that already ran must not cancel the new occupant.
  Engine e;
  int ran = 0;
  const EventId first = e.schedule_at(1, [&] { ++ran; });
  e.run();
  e.schedule_at(2, [&] { ran += 10; });
  e.cancel(first);
  e.run();
  EXPECT_EQ(ran, 11);
}

TEST(EngineTest, ActionsMayScheduleAndCancel) {
  // An event scheduled at the current time from inside an action runs after the events already queued
  // for that time (insertion order), and an action may cancel a pending event.
  Engine e;
  std::vector<std::string> log;
  EventId victim = 0;
  e.schedule_at(5, [&] {
    log.push_back("first@5");
    e.schedule_after(0, [&] { log.push_back("child@5"); });
    e.schedule_after(3, [&] { log.push_back("child@8"); });
    e.cancel(victim);
  });
  e.schedule_at(5, [&] { log.push_back("second@5"); });
  victim = e.schedule_at(6, [&] { log.push_back("victim@6"); });
  e.run();
  EXPECT_EQ(log, (std::vector<std::string>{"first@5", "second@5", "child@5", "child@8"}));
  EXPECT_EQ(e.now(), 8);
  EXPECT_EQ(e.executed(), 4u);
}

TEST(EngineTest, SchedulingInThePastIsRejected) {
  Engine e;
  e.schedule_at(10, [] {});
  e.run();
  EXPECT_THROW(e.schedule_at(9, [] {}), std::logic_error);
}

// Random schedules and cancellations compared with a reference that stably sorts by time
// (i.e. (time, insertion index)): the engine must produce exactly that order, and the same order twice.
std::vector<std::pair<TimeNs, int>> random_run(unsigned seed, bool reference) {
  std::mt19937_64 rng(seed);
  Engine e;
  std::vector<std::pair<TimeNs, int>> out;
  struct Ref {
    TimeNs t;
    int label;
    bool cancelled;
  };
  std::vector<Ref> ref;
  std::vector<EventId> ids;
  int next_label = 0;
  for (int i = 0; i < 2000; ++i) {
    const TimeNs t = static_cast<TimeNs>(rng() % 500);
    const int label = next_label++;
    ids.push_back(e.schedule_at(t, [&out, &e, label] { out.emplace_back(e.now(), label); }));
    ref.push_back({t, label, false});
    if (rng() % 4 == 0) {
      const std::size_t victim = rng() % ids.size();
      e.cancel(ids[victim]);
      ref[victim].cancelled = true;
    }
  }
  if (!reference) {
    e.run();
    return out;
  }
  std::stable_sort(ref.begin(), ref.end(), [](const Ref& a, const Ref& b) { return a.t < b.t; });
  for (const Ref& r : ref) {
    if (!r.cancelled) out.emplace_back(r.t, r.label);
  }
  return out;
}

TEST(EngineTest, MatchesSortedReferenceAndIsDeterministic) {
  for (unsigned seed = 0; seed < 5; ++seed) {
    const auto got = random_run(seed, false);
    EXPECT_EQ(got, random_run(seed, true)) << "seed " << seed;
    EXPECT_EQ(got, random_run(seed, false)) << "seed " << seed;
  }
}

TEST(EngineTest, CountsExecutedEventsAcrossChains) {
  // A chain of 10^5 self-rescheduling events plus 10^5 cancelled ones: exactly the chain executes.
  Engine e;
  constexpr int kChain = 100000;
  int left = kChain;
  std::function<void()> tick = [&] {
    const EventId doomed = e.schedule_after(2, [] { ADD_FAILURE() << "cancelled event ran"; });
    e.cancel(doomed);
    if (--left > 0) e.schedule_after(1, tick);
  };
  e.schedule_at(0, tick);
  e.run();
  EXPECT_EQ(e.executed(), static_cast<std::uint64_t>(kChain));
  EXPECT_EQ(e.now(), kChain - 1);
  EXPECT_EQ(e.pending(), 0u);
}

}  // namespace
}  // namespace arachne
