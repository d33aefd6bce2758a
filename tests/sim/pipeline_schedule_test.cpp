// The per-rank task orders of the three schedules: every task exactly once, a micro-batch's forward before
// its backward, and the in-flight bounds each schedule is known for.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <tuple>

#include "sim/exec/pipeline_schedule.h"

namespace arachne {
namespace {

void check_order(Schedule s, int pp, int chunks, int m) {
  for (int r = 0; r < pp; ++r) {
    const auto order = rank_task_order(s, pp, r, chunks, m);
    ASSERT_EQ(order.size(), static_cast<size_t>(2 * m * chunks));
    std::set<std::tuple<int, int, bool>> seen;
    int in_flight = 0, peak = 0;
    for (const auto& t : order) {
      EXPECT_TRUE(seen.insert({t.chunk, t.micro_batch, t.forward}).second) << "duplicate task";
      ASSERT_GE(t.chunk, 0);
      ASSERT_LT(t.chunk, chunks);
      ASSERT_GE(t.micro_batch, 0);
      ASSERT_LT(t.micro_batch, m);
      if (!t.forward) EXPECT_TRUE(seen.count({t.chunk, t.micro_batch, true})) << "backward before its forward";
      in_flight += t.forward ? 1 : -1;
      peak = std::max(peak, in_flight);
    }
    // The activations a rank holds at its peak are what the memory model charges.
    EXPECT_EQ(peak, static_cast<int>(activations_in_flight(s, pp, r, chunks, m))) << "rank " << r;
  }
}

TEST(PipelineSchedule, EveryTaskOnceForwardBeforeBackward) {
  check_order(Schedule::GPipe, 4, 1, 8);
  check_order(Schedule::OneFOneB, 4, 1, 8);
  check_order(Schedule::OneFOneB, 4, 1, 2);  // fewer micro-batches than stages
  check_order(Schedule::Interleaved, 4, 2, 8);
  check_order(Schedule::Interleaved, 2, 3, 4);
}

TEST(PipelineSchedule, OneFOneBHoldsAtMostPipelineDepthMinusRank) {
  // PipeDream-Flush (Narayanan et al. SC'21 §2.2): rank r keeps at most p - r micro-batches in flight,
  // GPipe keeps all m.
  EXPECT_EQ(activations_in_flight(Schedule::OneFOneB, 8, 0, 1, 32), 8);
  EXPECT_EQ(activations_in_flight(Schedule::OneFOneB, 8, 7, 1, 32), 1);
  EXPECT_EQ(activations_in_flight(Schedule::GPipe, 8, 0, 1, 32), 32);
  const auto last = rank_task_order(Schedule::OneFOneB, 4, 3, 1, 6);
  for (size_t i = 0; i < last.size(); ++i) EXPECT_EQ(last[i].forward, i % 2 == 0);  // the last rank alternates
}

}  // namespace
}  // namespace arachne
