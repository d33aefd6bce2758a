#include "sim/exec/pipeline_schedule.h"

#include <algorithm>

namespace arachne {
namespace {

// Appends the steps of a program: tasks, and exchanges of up to two sends and two receives.
class ProgramBuilder {
 public:
  // Writes into `out` (cleared; its capacity is reused).
  ProgramBuilder(std::vector<ScheduleStep>& out, size_t reserve) : steps_(out) {
    steps_.clear();
    steps_.reserve(reserve);
  }
  void task(ScheduledTask t) {
    ScheduleStep s;
    s.task = t;
    steps_.push_back(s);
  }
  // An exchange; entries with `keep` false are left out, and an exchange with nothing left is no step.
  void exchange(std::initializer_list<std::pair<ScheduledTask, bool>> sends,
                std::initializer_list<std::pair<ScheduledTask, bool>> recvs, bool eager = false) {
    ScheduleStep s;
    s.exchange = true;
    s.eager = eager;
    for (const auto& [t, keep] : sends)
      if (keep) s.sends[s.num_sends++] = t;
    for (const auto& [t, keep] : recvs)
      if (keep) s.recvs[s.num_recvs++] = t;
    if (s.num_sends + s.num_recvs > 0) steps_.push_back(s);
  }

 private:
  std::vector<ScheduleStep>& steps_;
};

ScheduledTask fwd(int chunk, int mb) { return {chunk, mb, true}; }
ScheduledTask bwd(int chunk, int mb) { return {chunk, mb, false}; }

void gpipe_program(int chunks, int m, std::vector<ScheduleStep>& out) {
  ProgramBuilder b(out, static_cast<size_t>(6 * m * chunks));
  auto run = [&](ScheduledTask t) {
    b.exchange({}, {{t, true}});
    b.task(t);
    b.exchange({{t, true}}, {}, /*eager=*/true);
  };
  for (int c = 0; c < chunks; ++c)
    for (int i = 0; i < m; ++i) run(fwd(c, i));
  for (int c = chunks - 1; c >= 0; --c)
    for (int i = 0; i < m; ++i) run(bwd(c, i));
}

// forward_backward_pipelining_without_interleaving (schedules.py).
void one_f_one_b_program(int pp, int rank, int m, std::vector<ScheduleStep>& out) {
  ProgramBuilder b(out, static_cast<size_t>(6 * m));
  const int warmup = std::min(pp - rank - 1, m);
  const int remaining = m - warmup;
  for (int i = 0; i < warmup; ++i) {
    b.exchange({}, {{fwd(0, i), true}});  // recv_forward
    b.task(fwd(0, i));
    b.exchange({{fwd(0, i), true}}, {});  // send_forward
  }
  if (remaining > 0) b.exchange({}, {{fwd(0, warmup), true}});  // recv_forward
  for (int i = 0; i < remaining; ++i) {
    const int f = warmup + i;
    const bool last = i == remaining - 1;
    b.task(fwd(0, f));
    b.exchange({{fwd(0, f), true}}, {{bwd(0, i), true}});  // send_forward_recv_backward
    b.task(bwd(0, i));
    // send_backward on the last iteration, send_backward_recv_forward otherwise.
    b.exchange({{bwd(0, i), true}}, {{fwd(0, f + 1), !last}});
  }
  for (int i = remaining; i < m; ++i) {
    b.exchange({}, {{bwd(0, i), true}});  // recv_backward
    b.task(bwd(0, i));
    b.exchange({{bwd(0, i), true}}, {});  // send_backward
  }
}

// forward_backward_pipelining_with_interleaving (schedules.py) with batched p2p (overlap_p2p_comm off).
class Interleaved {
 public:
  Interleaved(int pp, int rank, int v, int m) : pp_(pp), rank_(rank), v_(v), total_(m * v) {}

  void program(std::vector<ScheduleStep>& out) {
    ProgramBuilder b(out, static_cast<size_t>(4 * total_));
    // get_pp_rank_microbatches: warm-up count, capped at all virtual micro-batches.
    const int warmup = std::min(total_, (pp_ - rank_ - 1) * 2 + (v_ - 1) * pp_);
    const bool all_warmup = warmup == total_;
    const int remaining = total_ - warmup;
    const bool last_rank = rank_ == pp_ - 1;
    b.exchange({}, {{task(0, true), true}});  // recv_forward for the first chunk
    for (int k = 0; k < warmup; ++k) {
      b.task(task(k, true));
      auto [recv_prev, next_input] = receives(k, true);
      if (k == total_ - 1) recv_prev = false;
      if (k == warmup - 1 && !all_warmup)  // send_forward_backward_recv_forward_backward
        b.exchange({{task(k, true), true}}, {{next_input, recv_prev}, {task(0, false), !last_rank}});
      else  // send_forward_recv_forward
        b.exchange({{task(k, true), true}}, {{next_input, recv_prev}});
    }
    for (int k = 0; k < remaining; ++k) {
      const int f = warmup + k;
      b.task(task(f, true));
      b.task(task(k, false));
      auto [recv_prev, next_input] = receives(f, true);
      const auto [recv_next, next_grad] = receives(k, false);
      if (k == remaining - 1) recv_prev = false;
      // send_forward_backward_recv_forward_backward
      b.exchange({{task(f, true), true}, {task(k, false), true}}, {{next_input, recv_prev}, {next_grad, recv_next}});
    }
    if (all_warmup) b.exchange({}, {{task(0, false), !last_rank}});  // recv_backward
    for (int k = remaining; k < total_; ++k) {
      b.task(task(k, false));
      auto [recv_next, next_grad] = receives(k, false);
      if (k == total_ - 1) recv_next = false;
      b.exchange({{task(k, false), true}}, {{next_grad, recv_next}});  // send_backward_recv_backward
    }
  }

 private:
  // get_schedule_table with groups of p micro-batches (the plan requires m to be a multiple of p):
  // virtual micro-batch k runs chunk (k / p) % v of micro-batch (k / (p v)) p + k % p; backward chunks run
  // in reverse.
  ScheduledTask task(int k, bool forward) const {
    const int group = k / (pp_ * v_), in_group = k % (pp_ * v_);
    const int chunk = in_group / pp_;
    return {forward ? chunk : v_ - 1 - chunk, group * pp_ + in_group % pp_, forward};
  }
  // recv_tensor_from_previous_stage: whether the exchange after virtual micro-batch k receives, and the task
  // whose input it is. The leading rank (rank 0 for activations, p-1 for gradients) receives what the other
  // end of the pipeline produced p-1 virtual micro-batches earlier, for the following chunk.
  std::pair<bool, ScheduledTask> receives(int k, bool forward) const {
    const bool leading = forward ? rank_ == 0 : rank_ == pp_ - 1;
    if (!leading) return {true, k + 1 < total_ ? task(k + 1, forward) : task(k, forward)};
    if (k < pp_ - 1) return {false, {}};
    ScheduledTask t = task(k - (pp_ - 1), forward);
    if (t.chunk == (forward ? v_ - 1 : 0)) return {false, {}};
    t.chunk += forward ? 1 : -1;
    return {true, t};
  }

  int pp_, rank_, v_, total_;
};

}  // namespace

void rank_program(Schedule schedule, int pp, int rank, int chunks, int m, std::vector<ScheduleStep>& out) {
  if (schedule == Schedule::GPipe) return gpipe_program(chunks, m, out);
  if (schedule == Schedule::OneFOneB || chunks == 1) return one_f_one_b_program(pp, rank, m, out);
  Interleaved(pp, rank, chunks, m).program(out);
}

std::vector<ScheduleStep> rank_program(Schedule schedule, int pp, int rank, int chunks, int m) {
  std::vector<ScheduleStep> out;
  rank_program(schedule, pp, rank, chunks, m, out);
  return out;
}

std::vector<ScheduledTask> rank_task_order(Schedule schedule, int pp, int rank, int chunks, int m) {
  std::vector<ScheduledTask> order;
  for (const ScheduleStep& s : rank_program(schedule, pp, rank, chunks, m))
    if (!s.exchange) order.push_back(s.task);
  return order;
}

double activations_in_flight(Schedule schedule, int pp, int rank, int chunks, int m) {
  if (schedule == Schedule::GPipe) return static_cast<double>(m) * chunks;
  if (schedule == Schedule::OneFOneB || chunks == 1) return std::min(pp - rank, m);
  // Interleaved: warm-up chunk-forwards plus the one in progress (Megatron-LM; Narayanan et al. §2.2.1).
  return std::min(m * chunks, (pp - rank - 1) * 2 + (chunks - 1) * pp + 1);
}

}  // namespace arachne
