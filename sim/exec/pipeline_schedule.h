// What one pipeline rank does, in order, under each schedule: its forward and backward micro-batch tasks and
// the point-to-point exchanges between them. The simulator does not assume any bubble formula: it runs these
// programs against each other (an exchange completes when its transfers have) and the bubbles follow.
//  - 1F1B / PipeDream-Flush (Narayanan et al. SC'21 §2.2) as Megatron-LM runs it
//    (megatron/core/pipeline_parallel/schedules.py, forward_backward_pipelining_without_interleaving):
//    min(p-r-1, m) warm-up forwards, each recv_forward -> forward -> send_forward; then recv_forward once and
//    the steady state forward -> send_forward_recv_backward -> backward -> send_backward_recv_forward (the
//    last one a plain send_backward); then the cool-down recv_backward -> backward -> send_backward.
//  - Interleaved 1F1B (Narayanan et al. SC'21 §2.2.1; schedules.py,
//    forward_backward_pipelining_with_interleaving with batched p2p, i.e. overlap_p2p_comm off): v model
//    chunks per rank, micro-batches taken in groups of p (get_schedule_table), (p-r-1)*2 + (v-1)*p warm-up
//    chunk-forwards (get_pp_rank_microbatches), each followed by send_forward_recv_forward (the last by
//    send_forward_backward_recv_forward_backward); the steady state runs a forward and a backward, then one
//    send_forward_backward_recv_forward_backward; the cool-down runs backward -> send_backward_recv_backward.
//    What each exchange receives follows recv_tensor_from_previous_stage: rank 0 (for activations) and rank
//    p-1 (for gradients) receive the wrap-around tensor of an earlier virtual micro-batch, the others the
//    input of their next task.
//  - GPipe (Huang et al. 2019): all forwards, then all backwards. Megatron-LM has no GPipe schedule; here a
//    task waits for its inputs (recv) and sends its output without waiting (eager sends).
// In Megatron's p2p_communication.py (_communicate) every exchange is one batch_isend_irecv whose requests
// are all waited for: the rank blocks until its sends have completed and its receives have arrived.
#pragma once
#include <array>
#include <vector>

#include "sim/plan/plan.h"

namespace arachne {

struct ScheduledTask {
  int chunk = 0;        // model chunk on this rank (0 unless interleaved)
  int micro_batch = 0;
  bool forward = true;
};

// One step of a rank's program: a task, or an exchange of tensors with the neighbouring stages.
// sends[i]: the output of that task goes to the stage that consumes it (activations of a forward to the next
// virtual stage, input gradients of a backward to the previous one). recvs[i]: the input that task needs
// (activations for a forward, output gradients for a backward). A stage with no such neighbour (first or
// last virtual stage) sends or receives nothing for that entry.
struct ScheduleStep {
  bool exchange = false;
  ScheduledTask task;                  // when !exchange
  std::array<ScheduledTask, 2> sends{};
  std::array<ScheduledTask, 2> recvs{};
  int num_sends = 0, num_recvs = 0;
  bool eager = false;                  // sends complete at once (the rank does not wait for them)
};

// Program of pipeline rank `rank` of `pp` ranks with `chunks` model chunks and `micro_batches` micro-batches.
std::vector<ScheduleStep> rank_program(Schedule schedule, int pp, int rank, int chunks, int micro_batches);
// The same program written into `out` (replacing its contents), so that a caller that makes many programs
// reuses one buffer's memory.
void rank_program(Schedule schedule, int pp, int rank, int chunks, int micro_batches, std::vector<ScheduleStep>& out);

// The tasks of rank_program, in order.
std::vector<ScheduledTask> rank_task_order(Schedule schedule, int pp, int rank, int chunks, int micro_batches);

// Micro-batches (in units of one chunk's activations) whose activations rank `rank` holds at its peak.
double activations_in_flight(Schedule schedule, int pp, int rank, int chunks, int micro_batches);

}  // namespace arachne
