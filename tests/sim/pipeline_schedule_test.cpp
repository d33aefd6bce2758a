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

// rank_program into a reused buffer writes the same steps as the returning form, whatever the buffer held.
TEST(PipelineSchedule, ProgramIntoABufferIsTheReturnedProgram) {
  auto same = [](const ScheduleStep& a, const ScheduleStep& b) {
    auto task = [](const ScheduledTask& t) { return std::make_tuple(t.chunk, t.micro_batch, t.forward); };
    bool eq = a.exchange == b.exchange && task(a.task) == task(b.task) && a.num_sends == b.num_sends &&
              a.num_recvs == b.num_recvs && a.eager == b.eager;
    for (int i = 0; i < a.num_sends && eq; ++i) eq = task(a.sends[i]) == task(b.sends[i]);
    for (int i = 0; i < a.num_recvs && eq; ++i) eq = task(a.recvs[i]) == task(b.recvs[i]);
    return eq;
  };
  std::vector<ScheduleStep> buffer;
  for (const Schedule s : {Schedule::OneFOneB, Schedule::GPipe, Schedule::Interleaved})
    for (const int m : {64, 4, 16})
      for (int r = 0; r < 4; ++r) {
        const int chunks = s == Schedule::OneFOneB ? 1 : 2;
        rank_program(s, 4, r, chunks, m, buffer);
        const std::vector<ScheduleStep> returned = rank_program(s, 4, r, chunks, m);
        ASSERT_EQ(buffer.size(), returned.size());
        for (size_t i = 0; i < buffer.size(); ++i) EXPECT_TRUE(same(buffer[i], returned[i])) << "step " << i;
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

// Runs the p ranks' programs against each other without time: an exchange posts its sends and receives on
// (sender, receiver, direction) channels and blocks until each has met its counterpart in posting order (as
// NCCL pairs send/recv); tasks take no time. The programs transcribe Megatron's schedules, so they must run
// to completion (no deadlock), every receive must get the tensor it was posted for, and every task must
// have its input before it runs.
void check_exchanges(Schedule s, int pp, int v, int m) {
  struct Post {
    int rank;
    ScheduledTask task;  // sender: whose output; receiver: whose input
    bool eager;          // a send the sender does not wait for
  };
  // Virtual stage of chunk c on rank r is c*pp + r; activations go to the next one, gradients back.
  auto vstage = [&](int r, const ScheduledTask& t) { return t.chunk * pp + r; };
  auto consumer = [&](int r, const ScheduledTask& t) { return vstage(r, t) + (t.forward ? 1 : -1); };
  auto producer = [&](int r, const ScheduledTask& t) { return vstage(r, t) + (t.forward ? -1 : 1); };
  const int stages = pp * v;
  std::vector<std::vector<ScheduleStep>> prog;
  for (int r = 0; r < pp; ++r) prog.push_back(rank_program(s, pp, r, v, m));
  std::map<std::tuple<int, int, bool>, std::vector<Post>> sends, recvs;  // unpaired, per channel
  std::vector<size_t> pc(pp, 0);
  std::vector<int> pending(pp, 0);
  std::vector<std::set<std::tuple<int, int, bool>>> inputs(pp);  // inputs received, per rank
  int paired = 0;
  auto try_pair = [&](const std::tuple<int, int, bool>& ch) {
    auto& a = sends[ch];
    auto& b = recvs[ch];
    while (!a.empty() && !b.empty()) {
      const Post snd = a.front(), rcv = b.front();
      a.erase(a.begin());
      b.erase(b.begin());
      // The receiver's task is the one the sender's output feeds: same micro-batch, next virtual stage.
      EXPECT_EQ(snd.task.micro_batch, rcv.task.micro_batch);
      EXPECT_EQ(snd.task.forward, rcv.task.forward);
      EXPECT_EQ(consumer(snd.rank, snd.task), vstage(rcv.rank, rcv.task));
      inputs[rcv.rank].insert({rcv.task.chunk, rcv.task.micro_batch, rcv.task.forward});
      if (!snd.eager) --pending[snd.rank];
      --pending[rcv.rank];
      ++paired;
    }
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < pp; ++r) {
      while (pc[r] < prog[r].size() && pending[r] == 0) {
        const ScheduleStep& st = prog[r][pc[r]];
        if (!st.exchange) {
          const ScheduledTask& t = st.task;
          const int from = producer(r, t);
          if (from >= 0 && from < stages)
            EXPECT_TRUE(inputs[r].count({t.chunk, t.micro_batch, t.forward}))
                << "rank " << r << " runs " << (t.forward ? "F" : "B") << t.micro_batch << " c" << t.chunk
                << " without its input";
          ++pc[r];
          progress = true;
          continue;
        }
        std::vector<std::tuple<int, int, bool>> touched;
        for (int i = 0; i < st.num_sends; ++i) {
          const int to = consumer(r, st.sends[i]);
          if (to < 0 || to >= stages) continue;
          const std::tuple<int, int, bool> ch{r, to % pp, st.sends[i].forward};
          sends[ch].push_back({r, st.sends[i], st.eager});
          if (!st.eager) ++pending[r];
          touched.push_back(ch);
        }
        for (int i = 0; i < st.num_recvs; ++i) {
          const int from = producer(r, st.recvs[i]);
          if (from < 0 || from >= stages) continue;
          const std::tuple<int, int, bool> ch{from % pp, r, st.recvs[i].forward};
          recvs[ch].push_back({r, st.recvs[i], false});
          ++pending[r];
          touched.push_back(ch);
        }
        ++pc[r];  // the exchange is posted; the rank proceeds once pending is back to 0
        for (const auto& ch : touched) try_pair(ch);
        progress = true;
      }
    }
  }
  for (int r = 0; r < pp; ++r) {
    EXPECT_EQ(pc[r], prog[r].size()) << "rank " << r << " deadlocks";
    EXPECT_EQ(pending[r], 0) << "rank " << r << " waits for an exchange";
  }
  // Every boundary crossing of every micro-batch, both directions.
  EXPECT_EQ(paired, 2 * m * (stages - 1));
}

TEST(PipelineSchedule, MegatronExchangesPairUpAndDeliverEveryInput) {
  check_exchanges(Schedule::OneFOneB, 4, 1, 8);
  check_exchanges(Schedule::OneFOneB, 4, 1, 2);  // fewer micro-batches than stages
  check_exchanges(Schedule::OneFOneB, 2, 1, 1);
  check_exchanges(Schedule::GPipe, 4, 1, 8);
  check_exchanges(Schedule::Interleaved, 4, 2, 8);
  check_exchanges(Schedule::Interleaved, 4, 3, 4);
  check_exchanges(Schedule::Interleaved, 3, 2, 3);   // all of rank 0's chunk-forwards are warm-up
  check_exchanges(Schedule::Interleaved, 8, 4, 16);
}

}  // namespace
}  // namespace arachne
