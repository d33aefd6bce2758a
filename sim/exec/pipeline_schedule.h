// Order in which one pipeline rank runs its forward and backward micro-batch tasks under each schedule.
// The simulator does not assume any bubble formula: it runs these orders against the data dependencies
// (activations from the previous stage, gradients from the next) and the bubbles follow.
//  - GPipe (Huang et al. 2019): all forwards, then all backwards.
//  - 1F1B / PipeDream-Flush (Narayanan et al. SC'21 §2.2): min(p-r-1, m) warm-up forwards, then one forward
//    and one backward alternately, then the remaining backwards.
//  - Interleaved 1F1B (Narayanan et al. SC'21 §2.2.1, Megatron-LM schedules.py): v model chunks per rank,
//    micro-batches taken in groups of p; warm-up (p-r-1)*2 + (v-1)*p chunk-forwards.
#pragma once
#include <vector>

#include "sim/plan/plan.h"

namespace arachne {

struct ScheduledTask {
  int chunk = 0;        // model chunk on this rank (0 unless interleaved)
  int micro_batch = 0;
  bool forward = true;
};

// Tasks of pipeline rank `rank` of `pp` ranks with `chunks` model chunks and `micro_batches` micro-batches.
std::vector<ScheduledTask> rank_task_order(Schedule schedule, int pp, int rank, int chunks, int micro_batches);

// Micro-batches (in units of one chunk's activations) whose activations rank `rank` holds at its peak.
double activations_in_flight(Schedule schedule, int pp, int rank, int chunks, int micro_batches);

}  // namespace arachne
